"""A compaction job's transfers without its compute: the same GETs and PUTs, at its concurrency.

Downloads every object under --prefix of --bucket, --downloads at a time (the job's parallel
downloads), to /dev/null, then uploads --output-bytes to a key of its own as the job uploads
its output: one PUT when it fits --first-part-bytes, else a multipart upload of --part-bytes
parts, two in flight. Prints the seconds each phase and both took, as JSON. The endpoint and
credentials come from the usual AWS variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).

    python tests/transfer_only.py --bucket B --prefix P --downloads 4 --output-bytes N
        --part-bytes N --first-part-bytes N
"""

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config


def download_all(s3, bucket, prefix, downloads):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", []))

    def get(key):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        total = 0
        while chunk := body.read(1 << 20):
            total += len(chunk)
        return total

    with ThreadPoolExecutor(max_workers=max(1, downloads)) as pool:
        return len(keys), sum(pool.map(get, keys))


def upload(s3, bucket, key, size, part_bytes, first_part_bytes):
    if size <= first_part_bytes:
        s3.put_object(Bucket=bucket, Key=key, Body=b"\0" * size)
        return 1
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    sizes = [part_bytes] * (size // part_bytes)
    if size % part_bytes:
        sizes.append(size % part_bytes)

    def put(numbered):
        number, n = numbered
        etag = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=b"\0" * n
        )["ETag"]
        return {"ETag": etag, "PartNumber": number}

    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(put, enumerate(sizes, start=1)))
    s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    s3.delete_object(Bucket=bucket, Key=key)
    return len(parts) + 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--downloads", type=int, default=4)
    parser.add_argument("--output-bytes", type=int, required=True)
    parser.add_argument("--part-bytes", type=int, required=True)
    parser.add_argument("--first-part-bytes", type=int, required=True)
    args = parser.parse_args()
    s3 = boto3.client("s3", config=Config(max_pool_connections=max(4, args.downloads)))
    start = time.monotonic()
    objects, downloaded = download_all(s3, args.bucket, args.prefix, args.downloads)
    downloaded_at = time.monotonic()
    requests = upload(
        s3, args.bucket, "transfer-only/output.bin", args.output_bytes, args.part_bytes,
        args.first_part_bytes,
    )
    end = time.monotonic()
    print(json.dumps({
        "objects": objects,
        "downloaded_bytes": downloaded,
        "download_seconds": round(downloaded_at - start, 3),
        "uploaded_bytes": args.output_bytes,
        "upload_requests": requests,
        "upload_seconds": round(end - downloaded_at, 3),
        "seconds": round(end - start, 3),
    }))


if __name__ == "__main__":
    sys.exit(main())

"""A compaction job's transfers without its compute: the same GETs and PUTs, at its concurrency.

Downloads every object under --prefix of --bucket, --downloads at a time (the job's parallel
downloads), to /dev/null, and beside them reads the last 64 KiB of each, 16 at a time, when they
hold at least --footers-above-bytes on average (a job then reads its inputs' footers to sort them
as they arrive: `CompactOptions::arrive_above_bytes`); then uploads --output-bytes to a key of its own as the job uploads
its output: one PUT when it fits --first-part-bytes, else a multipart upload of --part-bytes
parts, --parts-in-flight at a time. Prints the seconds each phase and both took, as JSON. The endpoint and
credentials come from the usual AWS variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).

    python tests/transfer_only.py --bucket B --prefix P --downloads 4 --output-bytes N
        --part-bytes N --parts-in-flight N --first-part-bytes N [--footers-above-bytes N]

With --group FIRST:COUNT:RUN_BYTES (repeated), it replays the run tasks of a fanned-out job one
after another instead: each downloads its COUNT inputs from key FIRST on (its footers beside
them, by the same rule) and uploads its run of RUN_BYTES; it prints each task's seconds.
"""

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config


# What a footer read asks for: the object's last bytes (`FOOTER_TAIL_BYTES` in the engine).
FOOTER_TAIL_BYTES = 64 << 10
# Footers read at once (`FOOTER_READS` in the engine).
FOOTER_READS = 16


def list_objects(s3, bucket, prefix):
    objects = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        objects.extend((o["Key"], o["Size"]) for o in page.get("Contents", []))
    return objects


def read_footers(s3, bucket, objects):
    def tail(obj):
        key, size = obj
        start = max(0, size - FOOTER_TAIL_BYTES)
        body = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{size - 1}")["Body"]
        return len(body.read())

    with ThreadPoolExecutor(max_workers=FOOTER_READS) as pool:
        return sum(pool.map(tail, objects))


def download_all(s3, bucket, keys, downloads):

    def get(key):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        total = 0
        while chunk := body.read(1 << 20):
            total += len(chunk)
        return total

    with ThreadPoolExecutor(max_workers=max(1, downloads)) as pool:
        return len(keys), sum(pool.map(get, keys))


def upload(s3, bucket, key, size, part_bytes, first_part_bytes, in_flight):
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

    with ThreadPoolExecutor(max_workers=max(1, in_flight)) as pool:
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
    parser.add_argument("--output-bytes", type=int, default=0)
    parser.add_argument("--part-bytes", type=int, required=True)
    parser.add_argument("--first-part-bytes", type=int, required=True)
    parser.add_argument("--parts-in-flight", type=int, default=2)
    parser.add_argument("--footers-above-bytes", type=int, default=1 << 20)
    parser.add_argument("--group", action="append", default=[])
    args = parser.parse_args()
    pool = FOOTER_READS + max(1, args.downloads)
    s3 = boto3.client("s3", config=Config(max_pool_connections=pool))
    start = time.monotonic()
    listed = list_objects(s3, args.bucket, args.prefix)
    if args.group:
        tasks = []
        keys = [k for k, _ in listed]
        for n, spec in enumerate(args.group):
            first, count, run_bytes = spec.rsplit(":", 2)
            at = keys.index(first)
            group = listed[at : at + int(count)]
            started = time.monotonic()
            transfer(s3, args, group)
            upload(
                s3, args.bucket, f"transfer-only/run-{n}.bin", int(run_bytes), args.part_bytes,
                args.first_part_bytes, args.parts_in_flight,
            )
            tasks.append(round(time.monotonic() - started, 3))
        print(json.dumps({"tasks": tasks, "seconds": round(time.monotonic() - start, 3)}))
        return
    objects, downloaded, footer_reads, footer_bytes = transfer(s3, args, listed)
    downloaded_at = time.monotonic()
    requests = upload(
        s3, args.bucket, "transfer-only/output.bin", args.output_bytes, args.part_bytes,
        args.first_part_bytes, args.parts_in_flight,
    )
    end = time.monotonic()
    print(json.dumps({
        "objects": objects,
        "footer_reads": footer_reads,
        "footer_bytes": footer_bytes,
        "downloaded_bytes": downloaded,
        "download_seconds": round(downloaded_at - start, 3),
        "uploaded_bytes": args.output_bytes,
        "upload_requests": requests,
        "upload_seconds": round(end - downloaded_at, 3),
        "seconds": round(end - start, 3),
    }))


def transfer(s3, args, listed):
    """Downloads `listed` (key, size) pairs, their footers read beside them when the job would."""
    total = sum(size for _, size in listed)
    footers = len(listed) >= 2 and total >= len(listed) * args.footers_above_bytes
    with ThreadPoolExecutor(max_workers=1) as beside:
        footer_bytes = beside.submit(read_footers, s3, args.bucket, listed if footers else [])
        objects, downloaded = download_all(
            s3, args.bucket, [k for k, _ in listed], args.downloads
        )
        footer_bytes = footer_bytes.result()
    return objects, downloaded, len(listed) if footers else 0, footer_bytes


if __name__ == "__main__":
    sys.exit(main())

"""Checks store operations a function made against its role in infra/template.yaml.

Reads {"role": "PlannerRole", "operations": [{"operation": "get", "key": "..."}, ...]} on stdin
(keys relative to the store root, listing prefixes with their trailing slash), evaluates the
template as test_template.py does, for a store at the bucket's root and under a root prefix,
and exits non-zero naming every operation the role does not allow. The functions' handler tests
record their operations with a recording store and run this (`infra/README.md`, "How the permissions are checked").

A GET or HEAD also needs s3:ListBucket on its key: without it S3 answers a missing key with 403
instead of 404.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_template import Access, Evaluator, load_template  # noqa: E402

ACTIONS = {
    "get": ["s3:GetObject"],
    "head": ["s3:GetObject"],
    "put": ["s3:PutObject"],
    "put_multipart": ["s3:PutObject", "s3:AbortMultipartUpload"],
    "delete": ["s3:DeleteObject"],
    "abort_upload": ["s3:AbortMultipartUpload"],
}
# Bucket-level operations: the action on the bucket itself.
BUCKET_ACTIONS = {"list_uploads": "s3:ListBucketMultipartUploads"}


def violations(template, role, operations, root):
    evaluator = Evaluator(template, {"BucketName": "logs-bucket", "RootPrefix": root})
    access = Access(template, role, evaluator)
    missing = []
    for op in operations:
        name, key = op["operation"], op["key"]
        if name in ("list", "list_with_delimiter"):
            if not access.may_list(key):
                missing.append(f"{name} {key!r}: s3:ListBucket with s3:prefix {access.root}{key!r}")
            continue
        if name in BUCKET_ACTIONS:
            if not access.may_on_bucket(BUCKET_ACTIONS[name]):
                missing.append(f"{name} {key!r}: {BUCKET_ACTIONS[name]} on the bucket")
            continue
        for action in ACTIONS[name]:
            if not access.may(action, key):
                missing.append(f"{name} {key!r}: {action} on {access.root}{key}")
        if name in ("get", "head") and not access.may_list(key):
            missing.append(
                f"{name} {key!r}: s3:ListBucket covering {access.root}{key} (else a missing key is 403, not 404)"
            )
    return missing


def main():
    request = json.load(sys.stdin)
    template = load_template()
    problems = []
    for root in ("", "lake/raw"):
        for line in violations(template, request["role"], request["operations"], root):
            problems.append(f"{request['role']} (RootPrefix={root!r}): {line}")
    for line in problems:
        print(line)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

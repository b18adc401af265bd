#!/usr/bin/env bash
# The test command: formatting, lints, then every test of the workspace in release mode
# (the memory and end-to-end tests run real-sized partitions), with a real S3-compatible
# server for the integration tests in tests/.
#
# The server: $S3_ENDPOINT when set (an already running MinIO or S3-compatible server; the
# credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), else a `minio` binary
# from the PATH, else moto's server (`pip install 'moto[server]'`, which .ci/run does). A
# started server listens on a free port of 127.0.0.1 only and is always stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "== infra (cfn-lint, checkov, cargo lambda build of both functions, template test)"
bash infra/tests/check.sh

echo "== cargo build --release -p ourios-compact (the concurrency tests run it as processes)"
cargo build --release -p ourios-compact --bin ourios-compact
target_dir="${CARGO_TARGET_DIR:-target}"
OURIOS_COMPACT_BIN="$(cd "$target_dir" && pwd)/release/ourios-compact"
export OURIOS_COMPACT_BIN

# Block-layout files (1, 4 and 8 row groups per block; strings, dictionaries, nulls, a struct,
# a list, page indexes, bloom filters) must read back identically in other readers.
# $OURIOS_INTEROP_PYTHON, else python3, needs pyarrow, duckdb and polars (.ci/run installs them).
echo "== interop: pyarrow, DuckDB and Polars read block-layout files"
interop_python="${OURIOS_INTEROP_PYTHON:-python3}"
if ! "$interop_python" -c 'import pyarrow, duckdb, polars' 2>/dev/null; then
    echo "$interop_python lacks pyarrow, duckdb or polars: pip install them (see .ci/run)," >&2
    echo "or point OURIOS_INTEROP_PYTHON at a Python that has them" >&2
    exit 1
fi
interop_dir="$(mktemp -d)"
cargo run --release -q -p ourios-compaction --example interop_fixtures -- "$interop_dir"
"$interop_python" tests/interop/check_readers.py "$interop_dir"
rm -rf "$interop_dir"

server_pid=""
server_dir=""
stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [[ -n "$server_dir" ]]; then
        rm -rf "$server_dir"
    fi
}
trap stop_server EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_for() {
    local url="$1"
    for _ in $(seq 1 100); do
        if python3 -c "import urllib.request, sys
try:
    urllib.request.urlopen('$url', timeout=1)
except urllib.error.HTTPError:
    pass
" 2>/dev/null; then
            return 0
        fi
        if [[ -n "$server_pid" ]] && ! kill -0 "$server_pid" 2>/dev/null; then
            echo "the S3 test server exited; its log:" >&2
            cat "$server_dir/server.log" >&2 || true
            return 1
        fi
        sleep 0.2
    done
    echo "the S3 test server did not answer at $url" >&2
    return 1
}

if [[ -n "${S3_ENDPOINT:-}" ]]; then
    echo "== S3 server: $S3_ENDPOINT (given)"
    endpoint="$S3_ENDPOINT"
    : "${AWS_ACCESS_KEY_ID:?set AWS_ACCESS_KEY_ID for S3_ENDPOINT}"
    : "${AWS_SECRET_ACCESS_KEY:?set AWS_SECRET_ACCESS_KEY for S3_ENDPOINT}"
else
    server_dir="$(mktemp -d)"
    port="$(free_port)"
    endpoint="http://127.0.0.1:$port"
    if command -v minio >/dev/null 2>&1; then
        echo "== S3 server: MinIO on $endpoint"
        export AWS_ACCESS_KEY_ID=ourios-test AWS_SECRET_ACCESS_KEY=ourios-test-secret
        MINIO_ROOT_USER="$AWS_ACCESS_KEY_ID" MINIO_ROOT_PASSWORD="$AWS_SECRET_ACCESS_KEY" \
            minio server --quiet --address "127.0.0.1:$port" --console-address "127.0.0.1:$(free_port)" \
            "$server_dir/data" >"$server_dir/server.log" 2>&1 &
        server_pid=$!
    elif python3 -c 'import moto.server, flask' 2>/dev/null; then
        echo "== S3 server: moto $(python3 -c 'import moto; print(moto.__version__)') on $endpoint"
        export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
        python3 -m moto.server -H 127.0.0.1 -p "$port" >"$server_dir/server.log" 2>&1 &
        server_pid=$!
    else
        echo "no S3 test server: put minio on the PATH, set S3_ENDPOINT, or" >&2
        echo "pip install 'moto[server]>=5.1,<5.3' (as .ci/run does)" >&2
        exit 1
    fi
    wait_for "$endpoint/minio/health/live"
fi

export AWS_ENDPOINT_URL="$endpoint"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ALLOW_HTTP=true
export OURIOS_TEST_S3_ENDPOINT="$endpoint"
export OURIOS_TEST_S3_BUCKET="${OURIOS_TEST_S3_BUCKET:-ourios-test}"
# Never send test traffic through a proxy.
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}"
export no_proxy="$NO_PROXY"

python3 - <<'EOF'
import json, os
import boto3, botocore
s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["AWS_ENDPOINT_URL"],
    region_name=os.environ["AWS_REGION"],
)
bucket = os.environ["OURIOS_TEST_S3_BUCKET"]
try:
    s3.create_bucket(Bucket=bucket)
except botocore.exceptions.ClientError as e:
    if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
        raise
# The rule production buckets carry for multipart uploads a killed compactor left behind
# (object_store cannot list or abort them): checks that the server accepts it.
with open("infra/local/lifecycle.json") as f:
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=json.load(f))
print(f"bucket {bucket} ready")
EOF

echo "== cargo test"
cargo test --release --workspace

#!/usr/bin/env bash
# The test command.
#
#   bash tests/run.sh           everything: formatting, lints, the infra checks (cfn-lint,
#                               checkov, the functions' zips), the interoperability check with
#                               pyarrow, DuckDB and Polars, and every test of the workspace
#                               (profile quick, the inner loop's build, which the lints and docs
#                               share), with a real S3-compatible server started here (the
#                               functions' release zips build beside the workspace)
#   bash tests/run.sh --quick   the inner loop: formatting and the unit, property and in-memory
#                               tests (no S3 server, no function builds, no stress shapes; 10
#                               seeds of each simulation)
#   bash tests/run.sh --quick F only those of them whose names contain F (e.g. manifest::)
#   bash tests/run.sh --install only install what the full run needs, then stop
#
# On a fresh machine with only Rust and Python it installs what it lacks, pinned and
# project-local, then runs: the Python tools of tests/requirements.txt (and, for the full
# run, tests/requirements-full.txt) into .tools/venv, checkov into .tools/checkov-venv (both
# git-ignored; nothing goes into the system Python), rustfmt, clippy and the aarch64 Rust
# target through rustup when rustup can. A second run finds them in place and installs nothing
# (an environment is rebuilt only when a requirements file it was built from changes).
#
#   OURIOS_TOOLS_DIR  where the pinned tools go (default .tools; .ci/run keeps them in its cache)
#
# Already have the tools? These are used instead of installing:
#   S3_ENDPOINT (+ AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)   a running S3-compatible server
#   a `minio` binary on the PATH                               started on a free loopback port
#   OURIOS_PYTHON      a Python with cfn-lint, pyarrow, duckdb and polars (the full run: also
#                      boto3, moto[server] and datafusion)
#   CFN_LINT, CHECKOV  the linters' executables; cargo-lambda on the PATH
# A started server listens on 127.0.0.1 only and is always stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
# Each step's header carries the seconds since the start, so a slow step shows in the log.
step() { echo "== [${SECONDS}s] $*"; }

mode=full
filter=()
case "${1:-}" in
    "") ;;
    --quick)
        mode=quick
        filter=("${@:2}")
        ;;
    --install) mode=install ;;
    -h | --help)
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
        exit 0
        ;;
    *)
        echo "usage: bash tests/run.sh [--quick [FILTER...] | --install]" >&2
        exit 2
        ;;
esac

tools="${OURIOS_TOOLS_DIR:-$root/.tools}"
venv="$tools/venv"
checkov_venv="$tools/checkov-venv"
missing=()

# Adds a rustup component (rustfmt, clippy) when its cargo subcommand is missing.
ensure_rust_component() {
    local component="$1" subcommand="$2"
    if cargo "$subcommand" --version >/dev/null 2>&1; then
        return 0
    fi
    if command -v rustup >/dev/null 2>&1 && rustup component add "$component"; then
        return 0
    fi
    missing+=("$component: install it with \`rustup component add $component\` (cargo $subcommand is missing)")
}

# Creates (or refreshes) a virtual environment from pinned requirements files, each a layer on
# the ones before it (`--quick` installs tests/requirements.txt; a full run adds
# tests/requirements-full.txt to it). Installs nothing when the environment holds the files'
# layers already (or more of them); adds the layers it lacks; rebuilds it from nothing when a
# file it was built from changed.
ensure_venv() {
    local dir="$1" stamp i have=() want=()
    shift
    local files=("$@")
    stamp="$dir/.requirements.sha256"
    for ((i = 0; i < ${#files[@]}; i++)); do
        want+=("$(sha256sum "${files[i]}" | cut -d' ' -f1)")
    done
    if [[ -x "$dir/bin/python" && -f "$stamp" ]]; then
        mapfile -t have <"$stamp"
    fi
    for ((i = 0; i < ${#have[@]} && i < ${#want[@]}; i++)); do
        if [[ "${have[i]}" != "${want[i]}" ]]; then
            have=()
            break
        fi
    done
    ((${#have[@]} < ${#want[@]})) || return 0
    if ((${#have[@]} == 0)); then
        rm -rf "$dir"
        python3 -m venv "$dir" || return 1
    fi
    # The missing layers in one pip call, which resolves them together.
    local layers=()
    for ((i = ${#have[@]}; i < ${#files[@]}; i++)); do
        echo "-- installing ${files[i]} into ${dir#"$root"/}"
        layers+=(-r "${files[i]}")
    done
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${layers[@]}" &&
        printf '%s\n' "${want[@]}" >"$stamp"
}

target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
logs="$(mktemp -d)"
background_pids=()
# Stops a process and every process under it (a background step's cargo and rustc children).
kill_tree() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do
        kill_tree "$child"
    done
    kill -TERM "$1" 2>/dev/null || true
}
# Stops the background steps still running when the run ends early.
stop_background() {
    local pid
    for pid in "${background_pids[@]}"; do
        kill_tree "$pid"
    done
}
trap 'stop_background; rm -rf "$logs"' EXIT

# Runs a step in the background, its output in $logs/<name>.log, so the builds share the two
# cores: each one alone leaves a core idle while one large crate or a link runs by itself.
background() {
    local name="$1"
    shift
    (
        start=$SECONDS
        status=0
        "$@" >"$logs/$name.log" 2>&1 || status=$?
        echo "$status $((SECONDS - start))" >"$logs/$name.status"
    ) &
    background_pids+=($!)
}

# Waits for a background step; sets `status` and `seconds` to its exit status and duration.
await_step() {
    while [[ ! -f "$logs/$1.status" ]]; do sleep 1; done
    read -r status seconds <"$logs/$1.status"
}

# Waits for a background step, prints its log and returns its status.
settle() {
    local status seconds
    await_step "$1"
    cat "$logs/$1.log"
    return "$status"
}

# Prints a background step's log under its header, and fails the run if the step failed.
finish() {
    local name="$1" title="$2" status seconds
    await_step "$name"
    step "$title (in the background: ${seconds}s, exit $status)"
    if ! settle "$name"; then
        echo "$title failed" >&2
        exit 1
    fi
}

# The workspace's build starts now, beside the tools' installation (mostly downloads): the step
# that builds it below finds it under way, waits for it, and shows what it printed.
# `--quick` builds every package's unit and integration tests except the S3 suite's (the
# ourios-integration-tests package), and no examples or benchmarks: none of those adds a feature
# to a crate the others use, so the two modes build each crate alike, a full run after `--quick`
# builds only what `--quick` left out, and a fresh clone's first `--quick` builds none of it.
quick_targets=(--exclude ourios-integration-tests --lib --bins --tests)
case "$mode" in
    quick) background prebuild cargo test --profile quick --workspace "${quick_targets[@]}" --no-run ;;
    full) background prebuild cargo build --profile quick --workspace --all-targets ;;
esac

# In the full run checkov's environment installs beside the tests' own: the two installations
# wait on downloads together.
if [[ "$mode" != quick && -z "${CHECKOV:-}" ]]; then
    background checkov_venv ensure_venv "$checkov_venv" infra/tests/checkov-requirements.txt
fi

step "tools (pinned, project-local; installed only when missing)"
ensure_rust_component rustfmt fmt
requirements=(tests/requirements.txt)
[[ "$mode" == quick ]] || requirements+=(tests/requirements-full.txt)
if ! ensure_venv "$venv" "${requirements[@]}"; then
    echo "-- could not install ${requirements[*]} into .tools/venv (no route to PyPI?)" >&2
fi
if [[ -f "$venv/.requirements.sha256" ]]; then
    # The environment's tools (python3, cfn-lint; in the full run also cargo-lambda and moto)
    # come first.
    export PATH="$venv/bin:$PATH"
    export VIRTUAL_ENV="$venv"
fi
python="${OURIOS_PYTHON:-$(command -v python3)}"
export OURIOS_PYTHON="$python"
export OURIOS_INTEROP_PYTHON="${OURIOS_INTEROP_PYTHON:-$python}"
export CFN_LINT="${CFN_LINT:-$(command -v cfn-lint || true)}"
# The handler tests check the functions' store operations against the template's roles with
# cfn-lint's template reader; the writer corpus test writes files with pyarrow, DuckDB, Polars.
[[ -n "$CFN_LINT" && -x "$CFN_LINT" ]] && "$python" -c 'import cfnlint' 2>/dev/null ||
    missing+=("cfn-lint in $python (pin in tests/requirements.txt): set OURIOS_PYTHON to a Python that has it")
"$OURIOS_INTEROP_PYTHON" -c 'import pyarrow, duckdb, polars' 2>/dev/null ||
    missing+=("pyarrow, duckdb, polars in $OURIOS_INTEROP_PYTHON (pins in tests/requirements.txt): set OURIOS_PYTHON to a Python that has them")

# Builds the workspace's test binaries (the cargo arguments before `--`) and runs them side by
# side, each as cargo would run it (from its package's directory) with the arguments after
# `--`, their output printed when all have ended. `cargo test` runs them one after another, and
# one binary's tests wait on the S3 server or on real seconds while the others' could run.
run_test_binaries() {
    local what="$1" cargo_args=() test_args=() binaries test_logs index status
    local name failed i real user sys
    shift
    while [[ $# -gt 0 && "$1" != -- ]]; do
        cargo_args+=("$1")
        shift
    done
    [[ $# -gt 0 ]] && shift
    test_args=("$@")
    binaries="$(mktemp)"
    cargo test --profile quick --workspace "${cargo_args[@]}" --no-run \
        --message-format=json-render-diagnostics |
        "$python" tests/test_binaries.py >"$binaries"
    step "the test binaries side by side ($(wc -l <"$binaries") of them; $what)"
    test_logs="$(mktemp -d)"
    local pids=()
    index=0
    while IFS=$'\t' read -r name directory executable; do
        index=$((index + 1))
        (
            cd "$directory"
            status=0
            TIMEFORMAT='%R %U %S'
            { time "$executable" "${test_args[@]}" >"$test_logs/$index.log" 2>&1 || status=$?; } \
                2>"$test_logs/$index.time"
            echo "$status $name" >"$test_logs/$index.status"
        ) &
        pids+=($!)
    done <"$binaries"
    wait "${pids[@]}"
    failed=()
    for ((i = 1; i <= index; i++)); do
        read -r status name <"$test_logs/$i.status"
        real=0 user=0 sys=0
        read -r real user sys <"$test_logs/$i.time" || true
        echo "-- $name (exit $status; ${real%.*} s, $(awk "BEGIN { printf \"%d\", $user + $sys }") s of CPU)"
        cat "$test_logs/$i.log"
        [[ "$status" == 0 ]] || failed+=("$name")
    done
    rm -rf "$test_logs" "$binaries"
    if [[ ${#failed[@]} -gt 0 ]]; then
        echo "failed: ${failed[*]}" >&2
        exit 1
    fi
}

if [[ "$mode" == quick ]]; then
    if [[ ${#missing[@]} -gt 0 ]]; then
        echo "cannot run the tests; missing:" >&2
        printf '  - %s\n' "${missing[@]}" >&2
        exit 1
    fi
    step "cargo fmt --check"
    cargo fmt --all -- --check
    # Profile `quick` (Cargo.toml): optimised dependencies, the engine at level 1 and the thin
    # crates unoptimised, incremental; the full run's build too. Stress shapes (`stress_*`) and
    # benchmarks (`bench_*`) run release-sized partitions under peak-RSS bounds and are left to
    # the full run, as is every test that needs the S3 server or cargo-lambda (the
    # ourios-integration-tests crate, not built here).
    # The two simulations run 10 seeds each here (the full run: 5,000 and 200); OURIOS_SIM_SEEDS
    # set by the caller wins, and a failing seed prints its replay command either way.
    export OURIOS_SIM_SEEDS="${OURIOS_SIM_SEEDS:-10}"
    # The simulated week of the deployment runs one day, the burst 100 partitions (the full run:
    # seven days and 1,000).
    export OURIOS_QUICK=1
    # Four test threads on two cores: the tests that wait on real seconds (grace periods, slow
    # uploads) leave the cores to the others (39 s for the in-memory suite with two, 34 with four).
    export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
    step "cargo test --profile quick --no-run (unit, property and in-memory tests; not stress_*, bench_*, nor the S3 suite)"
    run_test_binaries "$OURIOS_SIM_SEEDS seeds a simulation" "${quick_targets[@]}" -- \
        --skip stress_ --skip bench_ "${filter[@]}"
    step "done"
    exit 0
fi

ensure_rust_component clippy clippy
# The template's default Architecture is arm64. Where rustup cannot add the target, the infra
# checks build and check the x86_64 zips instead (infra/tests/check.sh says so).
if command -v rustup >/dev/null 2>&1 &&
    ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    rustup target add aarch64-unknown-linux-gnu ||
        echo "-- the aarch64 Rust target is unavailable here: the infra checks use x86_64"
fi
if [[ -z "${CHECKOV:-}" ]] && ! settle checkov_venv; then
    echo "-- could not install checkov into .tools/checkov-venv (no route to PyPI?)" >&2
fi
export CHECKOV="${CHECKOV:-$checkov_venv/bin/checkov}"

# Everything the full run needs, each with how to provide it.
"$python" -c 'import boto3' 2>/dev/null ||
    missing+=("boto3 in $python (pin in tests/requirements-full.txt): let this script install it, or set OURIOS_PYTHON")
"$OURIOS_INTEROP_PYTHON" -c 'import datafusion' 2>/dev/null ||
    missing+=("datafusion in $OURIOS_INTEROP_PYTHON (pin in tests/requirements-full.txt): set OURIOS_PYTHON to a Python that has it")
# tests/tests/it/lambda_iam.rs starts its own IAM-enforcing moto server (tests/iam/s3_iam_server.py)
# with this Python, whichever S3 server the other tests use.
"$python" -c 'import moto.server, flask' 2>/dev/null ||
    missing+=("moto[server] in $python (pin in tests/requirements-full.txt): the IAM-enforcing S3 server of tests/tests/it/lambda_iam.rs; set OURIOS_PYTHON to a Python that has it")
[[ -x "$CHECKOV" ]] ||
    missing+=("checkov (pin in infra/tests/checkov-requirements.txt): set CHECKOV to its path")
cargo lambda --version >/dev/null 2>&1 ||
    missing+=("cargo-lambda (pin in tests/requirements-full.txt): put cargo-lambda on the PATH")
if [[ -z "${S3_ENDPOINT:-}" ]] && ! command -v minio >/dev/null 2>&1 &&
    ! "$python" -c 'import moto.server, flask' 2>/dev/null; then
    missing+=("an S3-compatible server: set S3_ENDPOINT (with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) to a running one, put a minio binary on the PATH, or let this script install moto[server] (tests/requirements-full.txt)")
fi
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "cannot run the tests; missing:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
fi
echo "python: $python ($("$python" --version 2>&1)); $(cargo lambda --version)"
if [[ "$mode" == install ]]; then
    exit 0
fi

step "cargo fmt --check"
cargo fmt --all -- --check

# The functions' zips are cross-compiled in release, in a build directory of their own, since a
# cross build locks the host's directory for its build scripts.
background infra env CARGO_TARGET_DIR="$target_dir/lambda-build" bash infra/tests/check.sh

# One build of the whole workspace, tests and examples included, in profile `quick`: the inner
# loop's build (dependencies optimised, the workspace's crates not), so a full run after
# `--quick` compiles nothing again, and the cheapest build to start from (the release profile
# stays the functions' zips' and the benchmarks'). The stress shapes' peak-RSS bounds mean the
# same or more here: the heap a job holds does not depend on the optimisation level, and
# unoptimised code maps more of its larger binary, so a shape under its bound here is under it
# in release. `cargo test --workspace` below finds everything built, with the same features. A
# build of one package (`-p`, or `cargo run --example`) resolves that package's features alone
# and compiles most dependencies again, so the binaries used below (the CLI, which the
# concurrency tests run as processes; the interop fixtures; the functions under the Lambda
# emulator) are taken from it.
step "cargo build --profile quick --workspace --all-targets (the infra checks run beside it)"
finish prebuild "the workspace's build, started before the tools"
cargo build --profile quick --workspace --all-targets
bin_dir="$(cd "$target_dir" && pwd)/quick"
export OURIOS_COMPACT_BIN="$bin_dir/ourios-compact"

# The interoperability checks, one Python process at a time, run beside the tests (in the
# background): alone they would leave a core idle for about 20 s.
interop() {
    local dir status=0
    # Block-layout files (1, 4 and 8 row groups per block; strings, dictionaries, nulls, a
    # struct, a list, page indexes, bloom filters) must read back identically in other readers.
    echo "-- pyarrow, DuckDB and Polars read block-layout files"
    dir="$(mktemp -d)"
    "$bin_dir/examples/interop_fixtures" "$dir" &&
        "$OURIOS_INTEROP_PYTHON" tests/interop/check_readers.py "$dir" || status=$?
    rm -rf "$dir"
    [[ "$status" == 0 ]] || return "$status"
    # The README's recipes: DuckDB, Polars, pyarrow and DataFusion read `files --urls` of hours
    # in every state (compacted within the grace, a late file, a quarantined one, fanned out,
    # after GC, not compacted yet) and count what `query` counts.
    echo "-- DuckDB, Polars, pyarrow and DataFusion read the live set (files --urls)"
    "$OURIOS_INTEROP_PYTHON" tests/interop/live_set_readers.py "$bin_dir/ourios-compact"
}
background interop interop

# The lints and the docs, after the build and in its profile: they take its procedural macros
# and its build scripts' outputs (zstd's and ring's C code among them) as they are, where a
# profile of their own built them again (50 s of CPU more, measured). `--examples` makes cargo
# resolve the dev-dependencies' features as clippy's `--all-targets` does, so the docs take
# clippy's checked dependencies (about 90 crates, Arrow and Parquet among them) as they are.
step "cargo clippy --all-targets and cargo doc (profile quick)"
cargo clippy --profile quick --workspace --all-targets -- -D warnings
echo "-- cargo doc (broken and private intra-doc links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --profile quick --workspace --no-deps --lib --bins --examples

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
trap 'stop_server; stop_background; rm -rf "$logs"' EXIT

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_for() {
    local url="$1"
    for _ in $(seq 1 100); do
        if "$python" -c "import urllib.request, sys
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
    step "S3 server: $S3_ENDPOINT (given)"
    endpoint="$S3_ENDPOINT"
    : "${AWS_ACCESS_KEY_ID:?set AWS_ACCESS_KEY_ID for S3_ENDPOINT}"
    : "${AWS_SECRET_ACCESS_KEY:?set AWS_SECRET_ACCESS_KEY for S3_ENDPOINT}"
else
    server_dir="$(mktemp -d)"
    port="$(free_port)"
    endpoint="http://127.0.0.1:$port"
    if command -v minio >/dev/null 2>&1; then
        step "S3 server: MinIO on $endpoint"
        export AWS_ACCESS_KEY_ID=ourios-test AWS_SECRET_ACCESS_KEY=ourios-test-secret
        MINIO_ROOT_USER="$AWS_ACCESS_KEY_ID" MINIO_ROOT_PASSWORD="$AWS_SECRET_ACCESS_KEY" \
            minio server --quiet --address "127.0.0.1:$port" --console-address "127.0.0.1:$(free_port)" \
            "$server_dir/data" >"$server_dir/server.log" 2>&1 &
        server_pid=$!
    else
        step "S3 server: moto $("$python" -c 'import moto; print(moto.__version__)') on $endpoint"
        export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
        # moto's server with S3's atomic conditional writes (tests/s3_test_server.py).
        "$python" tests/s3_test_server.py -H 127.0.0.1 -p "$port" >"$server_dir/server.log" 2>&1 &
        server_pid=$!
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

"$python" - <<'EOF'
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

# The functions' arm64 build may still run: the tests share the cores with its last crates.
step "cargo test (profile quick)"
run_test_binaries "the S3 server at $endpoint"
finish interop "interop: pyarrow, DuckDB and Polars read block-layout files; DuckDB, Polars, pyarrow and DataFusion read the live set (files --urls)"
finish infra "infra (cfn-lint, checkov, cargo lambda build of both functions, template test)"

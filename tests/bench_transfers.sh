#!/usr/bin/env bash
# A compaction job as deployed, where its inputs and output travel to and from S3: the S3 test
# server (tests/s3_test_server.py) behind a shaping proxy (tests/shaping_proxy.py: each
# response's first byte 20-50 ms late, 80 MB/s shared by every connection, as one Lambda
# function gets from S3). Each repetition runs three sides, alternating, each in a cgroup of
# LIMIT (tests/bench_limited.sh --exec, which also gives the job the function's memory):
#
#   compute  the job on a local directory store (no transfers);
#   transfer the job's transfers alone through the proxy (tests/transfer_only.py: the same
#            GETs at the job's parallel downloads, then its output's bytes as it uploads them);
#   job      the job on the S3 server through the proxy.
#
# It prints each run's wall seconds, then the medians and the job's time as a multiple of the
# larger of the other two (1.0 would hide every transfer behind compute, or the reverse), and
# the CPU seconds the server and the proxy used during the job runs (they share the machine's
# cores with it).
#
#   bash tests/bench_transfers.sh [--limit 256MiB] [--repeat 3] [--mbps 80] [--pin] [--server moto|s3s-fs] [-- compact flags] [generate flags...]
#   bash tests/bench_transfers.sh --repeat 3 --files 60 --rows 350000
#   bash tests/bench_transfers.sh --repeat 3 --files 60 --rows 50000 -- --fan-out 4
#
# `--pin` runs the server and the proxy on the last core and the three sides on the others
# (taskset), so that the server's CPU is not taken from the job's, as on AWS.
#
# `--server s3s-fs` serves the bucket with s3s-fs (an S3 server in Rust over a directory,
# installed pinned under .tools/s3s-fs on first use, or $OURIOS_S3S_FS) instead of the S3 test
# server (moto, in Python): it takes a fraction of moto's CPU, and completes a multipart upload
# by joining files rather than Python byte strings.
#
# Flags after `--` go to every `compact` (the memory budget is 64MiB unless given there). Needs
# the release binary (target/release/ourios-compact or $OURIOS_BENCH_BIN), moto and boto3 in
# $OURIOS_PYTHON (default .tools/venv/bin/python, which `tests/run.sh` installs), GNU time and
# the right to create a cgroup. Scratch goes under $TMPDIR.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${OURIOS_BENCH_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/ourios-compact}"
python="${OURIOS_PYTHON:-$root/.tools/venv/bin/python}"
limit=256MiB
repeat=3
mbps=80
pin=0
server=moto
compact_flags=()
generate_flags=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --limit) limit="$2"; shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --mbps) mbps="$2"; shift 2 ;;
        --pin) pin=1; shift ;;
        --server) server="$2"; shift 2 ;;
        --) shift; compact_flags=("$@"); break ;;
        *) generate_flags+=("$1"); shift ;;
    esac
done
# `--` may come after the generate flags too.
for i in "${!generate_flags[@]}"; do
    if [[ "${generate_flags[$i]}" == -- ]]; then
        compact_flags=("${generate_flags[@]:$((i + 1))}" "${compact_flags[@]}")
        generate_flags=("${generate_flags[@]:0:$i}")
        break
    fi
done
if [[ " ${compact_flags[*]} " != *" --memory-budget "* ]]; then
    compact_flags+=(--memory-budget 64MiB)
fi
for tool in "$bin" "$python" /usr/bin/time; do
    if [[ ! -x "$tool" ]]; then
        echo "error: $tool is missing (see the header of $0)" >&2
        exit 2
    fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/ourios-transfers.XXXXXX")"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
tenant=acme
hour=2026-11-29T10
"$bin" generate --store "$work/pristine" --tenant "$tenant" --hour "$hour" "${generate_flags[@]}" >&2
input_bytes="$(du -sb "$work/pristine" | cut -f1)"
ingest_dir="data/tenant=$tenant/year=${hour:0:4}/month=${hour:5:2}/day=${hour:8:2}/hour=${hour:11:2}"

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
server_port="$(free_port)"
# With --pin: the server and the proxy on the last core, the sides on the others.
server_cpus=()
side_cpus=()
if ((pin)); then
    last=$(($(nproc) - 1))
    server_cpus=(taskset -c "$last")
    side_cpus=(taskset -c "0-$((last - 1))")
fi
case "$server" in
    moto)
        "${server_cpus[@]}" "$python" "$root/tests/s3_test_server.py" -H 127.0.0.1 -p "$server_port" \
            >"$work/server.log" 2>&1 &
        ;;
    s3s-fs)
        s3s_fs="${OURIOS_S3S_FS:-$root/.tools/s3s-fs/bin/s3s-fs}"
        if [[ ! -x "$s3s_fs" ]]; then
            echo "== installing s3s-fs 0.14.1 under $root/.tools/s3s-fs" >&2
            cargo install s3s-fs --version 0.14.1 --features binary --locked \
                --root "$root/.tools/s3s-fs" --target-dir "$root/.tools/s3s-fs/target" >&2
            rm -rf "$root/.tools/s3s-fs/target"
        fi
        mkdir -p "$work/s3s-root"
        "${server_cpus[@]}" "$s3s_fs" --host 127.0.0.1 --port "$server_port" --access-key testing \
            --secret-key testing "$work/s3s-root" >"$work/server.log" 2>&1 &
        ;;
    *)
        echo "error: --server is moto or s3s-fs, not $server" >&2
        exit 2
        ;;
esac
server_pid=$!
pids+=("$server_pid")
"${server_cpus[@]}" "$python" -u "$root/tests/shaping_proxy.py" --upstream-port "$server_port" --mbps "$mbps" \
    >"$work/proxy.log" 2>&1 &
proxy_pid=$!
pids+=("$proxy_pid")
for _ in $(seq 100); do
    grep -q "listening on" "$work/proxy.log" 2>/dev/null && break
    sleep 0.1
done
proxy_port="$(sed -n 's/^listening on //p' "$work/proxy.log")"
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
bucket=ourios-bench
# Every repetition's job reads a copy of its own, uploaded straight to the server.
AWS_ENDPOINT_URL="http://127.0.0.1:$server_port" "$python" - "$work/pristine" "$bucket" "$repeat" <<'EOF'
import os, sys, time
import boto3
root, bucket, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
s3 = boto3.client("s3")
for _ in range(100):
    try:
        s3.create_bucket(Bucket=bucket)
        break
    except Exception:
        time.sleep(0.1)
for run in range(1, repeat + 1):
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            key = f"run{run}/" + os.path.relpath(path, root)
            s3.upload_file(path, bucket, key)
EOF

# A report's CPU seconds.
cpu() { "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["cpu_ms"] / 1000)' "$1"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
limited=("${side_cpus[@]}" bash "$root/tests/bench_limited.sh" "$limit" --exec)
downloads="${OURIOS_PARALLEL_DOWNLOADS:-4}"
: >"$work/times"
: >"$work/tasks"
# The run tasks of a fanned-out job say what they read and wrote, and how long they took;
# every upload says how it is cut into parts, which the transfer side replays.
task_log="ourios_compaction::compact::fan_out::tasks=info,ourios_compaction::store::upload=debug"
server_ticks=0
proxy_ticks=0
for run in $(seq "$repeat"); do
    rm -rf "$work/local"
    cp -r "$work/pristine" "$work/local"
    OURIOS_LOG="$task_log" /usr/bin/time -f "%e" -o "$work/t" "${limited[@]}" "$bin" compact \
        --store "$work/local" --tenant "$tenant" --hour "$hour" --json "${compact_flags[@]}" \
        >"$work/compute.json" 2>"$work/compute.log"
    compute="$(tail -1 "$work/t")"
    output_bytes="$("$python" -c 'import json, sys; print(sum(o["bytes"] for o in json.load(open(sys.argv[1]))["outputs"]))' "$work/compute.json")"
    read -r part_bytes first_part_bytes parts_in_flight \
        < <("$python" "$root/tests/run_tasks.py" parts "$work/compute.log")

    # Timed by the script itself, without the interpreter's start.
    AWS_ENDPOINT_URL="http://127.0.0.1:$proxy_port" "${limited[@]}" "$python" \
        "$root/tests/transfer_only.py" --bucket "$bucket" --prefix "run$run/$ingest_dir/" \
        --downloads "$downloads" --output-bytes "$output_bytes" --part-bytes "$part_bytes" \
        --parts-in-flight "$parts_in_flight" --first-part-bytes "$first_part_bytes" >"$work/transfer.json"
    transfer="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["seconds"])' "$work/transfer.json")"

    before_server="$(cpu_ticks "$server_pid")"
    before_proxy="$(cpu_ticks "$proxy_pid")"
    AWS_ENDPOINT_URL="http://127.0.0.1:$proxy_port" OURIOS_LOG="$task_log" \
        /usr/bin/time -f "%e" -o "$work/t" "${limited[@]}" "$bin" compact \
        --store "s3://$bucket/run$run" --tenant "$tenant" --hour "$hour" --json \
        "${compact_flags[@]}" >"$work/job.json" 2>"$work/job.log"
    job="$(tail -1 "$work/t")"
    server_ticks=$((server_ticks + $(cpu_ticks "$server_pid") - before_server))
    proxy_ticks=$((proxy_ticks + $(cpu_ticks "$proxy_pid") - before_proxy))
    job_rows="$("$python" -c 'import json, sys; print(sum(o["rows"] for o in json.load(open(sys.argv[1]))["outputs"]))' "$work/job.json")"
    compute_rows="$("$python" -c 'import json, sys; print(sum(o["rows"] for o in json.load(open(sys.argv[1]))["outputs"]))' "$work/compute.json")"
    if [[ "$job_rows" != "$compute_rows" ]]; then
        echo "error: the job on S3 wrote $job_rows rows, on a local directory $compute_rows" >&2
        exit 1
    fi
    echo "-- run $run: compute $compute s ($(cpu "$work/compute.json") CPU-s), transfer $transfer s ($(cat "$work/transfer.json")), job $job s ($(cpu "$work/job.json") CPU-s), $job_rows rows" >&2
    echo "$compute $transfer $job" >>"$work/times"

    # A fanned-out job: each run task beside its own transfers (its inputs and footers, then
    # its run), replayed one task after another as the job ran them.
    mapfile -t groups < <("$python" "$root/tests/run_tasks.py" groups "$work/job.log" "run$run/")
    if ((${#groups[@]} > 0)); then
        AWS_ENDPOINT_URL="http://127.0.0.1:$proxy_port" "${limited[@]}" "$python" \
            "$root/tests/transfer_only.py" --bucket "$bucket" --prefix "run$run/$ingest_dir/" \
            --downloads "$downloads" --part-bytes "$part_bytes" \
            --parts-in-flight "$parts_in_flight" --first-part-bytes "$first_part_bytes" "${groups[@]/#/--group=}" >"$work/tasks.json"
        "$python" "$root/tests/run_tasks.py" times "$work/compute.log" "$work/job.log" \
            "$work/tasks.json" >>"$work/tasks"
        echo "-- run $run: run tasks (compute transfer job): $(tail -n "${#groups[@]}" "$work/tasks" | paste -sd ';')" >&2
    fi
done
"$python" - "$work/times" "$input_bytes" "$server_ticks" "$proxy_ticks" "$(getconf CLK_TCK)" "$repeat" <<'EOF'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
input_bytes, server, proxy, tck, repeat = (int(a) for a in sys.argv[2:])
compute, transfer, job = (statistics.median(col) for col in zip(*rows))
print(f"input {input_bytes / 1e6:.0f} MB; medians of {len(rows)}: compute {compute:.2f} s, "
      f"transfer {transfer:.2f} s, job {job:.2f} s")
print(f"job / max(compute, transfer) = {job / max(compute, transfer):.2f}x")
print(f"during the job runs: server {server / tck / repeat:.2f} CPU-s, proxy {proxy / tck / repeat:.2f} CPU-s a run")
EOF
if [[ -s "$work/tasks" ]]; then
    "$python" "$root/tests/run_tasks.py" summary "$work/tasks"
fi

#!/usr/bin/env bash
# Runs `ourios-compact bench` inside a cgroup memory limit, as a Lambda function of that size
# runs it: both sides (the plain rewrite and the sorted compaction) and the page cache of their
# inputs, spills and outputs count against the limit, so spilled runs that the cache cannot hold
# are written to and read back from disk.
#
#   bash tests/bench_limited.sh LIMIT [bench flags...]
#   bash tests/bench_limited.sh 256MiB --files 60 --rows 50000 --memory-budget 64MiB --repeat 5
#   bash tests/bench_limited.sh LIMIT --exec COMMAND [ARGS...]
#
# With --exec it runs COMMAND in the limit instead of the bench (tests/bench_peers.sh uses it to
# give each sorter its memory). The command runs as a Lambda function of that memory does:
# AWS_LAMBDA_FUNCTION_MEMORY_SIZE is the limit in MiB unless already set, so this project's
# binary gives free memory back above half of it, as the compactor function does, and reckons
# its cost at that memory.
#
# LIMIT is bytes or a number with KiB, MiB or GiB. The binary is target/release/ourios-compact
# (build it with `cargo build --release -p ourios-compact`), or $OURIOS_BENCH_BIN. It creates a
# cgroup of its own (v1: /sys/fs/cgroup/memory/<name> with memory.limit_in_bytes and, when the
# kernel accounts swap, memory.memsw.limit_in_bytes; v2: /sys/fs/cgroup/<name> with memory.max
# and memory.swap.max), moves the bench into it, prints the bench's output and then the
# cgroup's peak usage and OOM kills, and removes the cgroup. When no cgroup
# can be created (no permission, no memory controller) it says so and refuses: a run without
# the limit would report a ratio no small function sees.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
fi

limit_arg="$1"
shift
if [[ "$limit_arg" =~ ^([0-9]+)(KiB|MiB|GiB)?$ ]]; then
    case "${BASH_REMATCH[2]}" in
        KiB) limit=$((BASH_REMATCH[1] << 10)) ;;
        MiB) limit=$((BASH_REMATCH[1] << 20)) ;;
        GiB) limit=$((BASH_REMATCH[1] << 30)) ;;
        *) limit="${BASH_REMATCH[1]}" ;;
    esac
else
    echo "error: limit $limit_arg is not bytes or a number with KiB, MiB or GiB" >&2
    exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${OURIOS_BENCH_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/ourios-compact}"
if [[ "${1:-}" == --exec ]]; then
    shift
    if [[ $# -lt 1 ]]; then
        echo "error: --exec needs a command" >&2
        exit 2
    fi
    command=("$@")
else
    command=("$bin" bench "$@")
fi
if [[ "${command[0]}" == "$bin" && ! -x "$bin" ]]; then
    echo "error: $bin is missing: cargo build --release -p ourios-compact, or set OURIOS_BENCH_BIN" >&2
    exit 2
fi

export AWS_LAMBDA_FUNCTION_MEMORY_SIZE="${AWS_LAMBDA_FUNCTION_MEMORY_SIZE:-$((limit >> 20))}"
name="ourios-bench-$$"
version=""
group=""
if [[ -d /sys/fs/cgroup/memory ]] && mkdir "/sys/fs/cgroup/memory/$name" 2>/dev/null; then
    version=1
    group="/sys/fs/cgroup/memory/$name"
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] &&
    grep -qw memory /sys/fs/cgroup/cgroup.controllers &&
    mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
    version=2
    group="/sys/fs/cgroup/$name"
else
    echo "error: cannot create a memory cgroup (neither /sys/fs/cgroup/memory/$name nor" \
        "/sys/fs/cgroup/$name with the memory controller); refusing to run without the limit" >&2
    exit 1
fi

cleanup() {
    # The bench has exited: the cgroup is empty and can go.
    rmdir "$group" 2>/dev/null || echo "warning: could not remove $group" >&2
}
trap cleanup EXIT

if [[ "$version" == 1 ]]; then
    echo "$limit" >"$group/memory.limit_in_bytes"
    # Without this, swap would stretch the limit.
    if [[ -f "$group/memory.memsw.limit_in_bytes" ]]; then
        echo "$limit" >"$group/memory.memsw.limit_in_bytes"
    fi
else
    echo "$limit" >"$group/memory.max"
    if [[ -f "$group/memory.swap.max" ]]; then
        echo 0 >"$group/memory.swap.max"
    fi
fi
echo "== cgroup v$version $group, limit $limit bytes ($limit_arg)" >&2

status=0
sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$group" "${command[@]}" || status=$?

if [[ "$version" == 1 ]]; then
    peak="$(cat "$group/memory.max_usage_in_bytes")"
    ooms="$(awk '/^oom_kill / { print $2 }' "$group/memory.oom_control")"
else
    peak="$(cat "$group/memory.peak" 2>/dev/null || echo unknown)"
    ooms="$(awk '/^oom_kill / { print $2 }' "$group/memory.events")"
fi
echo "== cgroup peak usage ${peak} bytes (page cache included), ${ooms:-0} OOM kills" >&2
if [[ "$status" != 0 ]]; then
    echo "error: ${command[0]} exited with status $status${ooms:+ (OOM kills: $ooms)}" >&2
fi
exit "$status"

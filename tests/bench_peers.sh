#!/usr/bin/env bash
# Sorts one generated hour by (service.name, time_unix_nano) into one file three ways, each in a
# cgroup memory limit of its own (tests/bench_limited.sh --exec): this project's `compact` in 256 MiB
# (budget 64 MiB), Polars in 2 GiB and DuckDB in 1 GiB (its own memory limit set to 1GB, so it
# spills instead of failing). A fourth side, `rewrite`, is the plain rewrite the sort is
# measured against: pyarrow reads each file whole and appends it, unsorted, to one ZSTD file, in
# 16 GiB (a limit it never reaches). Each side reads a fresh copy of the same files and the runs
# alternate, `--repeat` times each (default 3); it prints every run's wall, user and system
# seconds, peak RSS and the rows written (which must be the rows generated), then each side's
# median wall time, and this project's median time as a multiple of the rewrite's and its CPU
# seconds per GB of input.
#
#   bash tests/bench_peers.sh [--repeat N] [--sides LIST] [generate flags...]
#   bash tests/bench_peers.sh --repeat 3 --files 20 --rows 3000 --wide
#   bash tests/bench_peers.sh --repeat 3 --sides ours,rewrite --files 40 --rows 530000
#
# LIST is a comma-separated choice of ours, polars, duckdb and rewrite (default all four).
#
# Needs the release binary (target/release/ourios-compact or $OURIOS_BENCH_BIN), Polars and
# DuckDB in $OURIOS_PYTHON (default .tools/venv/bin/python, which `tests/run.sh` installs), GNU
# time, and the right to create a cgroup. Scratch goes under $TMPDIR.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${OURIOS_BENCH_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/ourios-compact}"
python="${OURIOS_PYTHON:-$root/.tools/venv/bin/python}"
repeat=3
sides=ours,polars,duckdb,rewrite
while [[ "${1:-}" == --repeat || "${1:-}" == --sides ]]; do
    case "$1" in
        --repeat) repeat="$2" ;;
        --sides) sides="$2" ;;
    esac
    shift 2
done
IFS=, read -r -a chosen <<<"$sides"
for side in "${chosen[@]}"; do
    case "$side" in
        ours | polars | duckdb | rewrite) ;;
        *)
            echo "error: unknown side $side (ours, polars, duckdb, rewrite)" >&2
            exit 2
            ;;
    esac
done
for tool in "$bin" "$python" /usr/bin/time; do
    if [[ ! -x "$tool" ]]; then
        echo "error: $tool is missing (see the header of $0)" >&2
        exit 2
    fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/ourios-peers.XXXXXX")"
trap 'rm -rf "$work"' EXIT
hour=2026-11-29T10
"$bin" generate --store "$work/pristine" --tenant acme --hour "$hour" "$@" | tee "$work/generated" >&2
expected="$(sed -n 's/^wrote [0-9]* files, \([0-9]*\) rows.*/\1/p' "$work/generated")"
input_bytes="$(du -sb "$work/pristine" | cut -f1)"
echo "== generated: $input_bytes bytes of Parquet, $expected rows" >&2

# One timed run of a side: a fresh copy of the hour, the command in its limit; GNU time's
# figures are left in $work/time and the command's output in $work/stdout.
run_side() {
    local side="$1" limit="$2"
    shift 2
    rm -rf "$work/store" "$work/scratch" "$work/out.parquet"
    cp -r "$work/pristine" "$work/store"
    mkdir -p "$work/scratch"
    sync
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" \
        bash "$root/tests/bench_limited.sh" "$limit" --exec "$@" >"$work/stdout" 2>"$work/stderr" || {
        cat "$work/stderr" >&2
        echo "error: $side failed" >&2
        exit 1
    }
}

# Appends the last run's figures, `rows` and its CPU seconds to $work/SIDE.times; a side that
# lost or added rows stops the bench.
record() {
    local side="$1" rows="$2"
    if [[ "$rows" != "$expected" ]]; then
        echo "error: $side wrote $rows rows of $expected" >&2
        exit 1
    fi
    tail -n 1 "$work/time" | awk -v rows="$rows" '{ print $1, $2, $3, $4, rows, $2 + $3 }' \
        >>"$work/$side.times"
    echo "-- $side: wall user sys maxrss_kb rows cpu = $(tail -n 1 "$work/$side.times")" >&2
}

# Rows in the compacted files (everything outside the ingest directory).
rows_compacted() {
    "$python" - "$work/store" <<'EOF'
import glob, sys
import pyarrow.parquet as pq
files = glob.glob(sys.argv[1] + "/**/*.parquet", recursive=True)
print(sum(pq.ParquetFile(f).metadata.num_rows for f in files if "/ingest" not in f))
EOF
}

for _ in $(seq "$repeat"); do
    for side in "${chosen[@]}"; do
        case "$side" in
            ours)
                run_side ours 256MiB "$bin" compact --store "$work/store" --tenant acme \
                    --hour "$hour" --memory-budget 64MiB --scratch "$work/scratch"
                record ours "$(rows_compacted)"
                ;;
            polars)
                run_side polars 2GiB "$python" "$root/tests/peers_sort.py" polars \
                    "$work/store" "$work/out.parquet"
                record polars "$(tail -n 1 "$work/stdout")"
                ;;
            duckdb)
                OURIOS_PEER_MEMORY=1GB run_side duckdb 1GiB "$python" \
                    "$root/tests/peers_sort.py" duckdb "$work/store" "$work/out.parquet"
                record duckdb "$(tail -n 1 "$work/stdout")"
                ;;
            rewrite)
                run_side rewrite 16GiB "$python" "$root/tests/peers_sort.py" rewrite \
                    "$work/store" "$work/out.parquet"
                record rewrite "$(tail -n 1 "$work/stdout")"
                ;;
        esac
    done
done

# The median of column $2 of side $1's runs (1: wall seconds, 6: CPU seconds).
median() {
    sort -n -k"$2" "$work/$1.times" | awk -v k="$2" '{ v[NR] = $k } END { print v[int((NR + 1) / 2)] }'
}
for side in "${chosen[@]}"; do
    awk -v side="$side" -v wall="$(median "$side" 1)" -v cpu="$(median "$side" 6)" '
        { rss = ($4 > rss ? $4 : rss); rows = $5 }
        END { printf "%-7s median wall %.2f s, CPU %.2f s over %d runs, peak RSS %d MiB, rows %s\n",
              side, wall, cpu, NR, rss / 1024, rows }' "$work/$side.times"
done
if [[ -f "$work/ours.times" ]]; then
    awk -v cpu="$(median ours 6)" -v bytes="$input_bytes" \
        'BEGIN { printf "ours    %.1f CPU-seconds per GB of input\n", cpu / (bytes / 1e9) }'
fi
if [[ -f "$work/ours.times" && -f "$work/rewrite.times" ]]; then
    awk -v ours="$(median ours 1)" -v rewrite="$(median rewrite 1)" \
        'BEGIN { printf "ours    %.2fx the plain rewrite'"'"'s median wall time\n", ours / rewrite }'
fi

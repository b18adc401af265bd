#!/usr/bin/env bash
# Measures a fanned-out compaction step by step against one output, on a generated hour in a
# local directory store: the per-phase throughput the README's fan-out numbers come from.
#
#   bash tests/bench_fan_out.sh DIR [--files N] [--rows N] [--ranges K] [--workers W]
#                                   [--memory-budget SIZE] [--fanned-only]
#   bash tests/bench_fan_out.sh /tmp/fan --files 60 --rows 350000 --ranges 4 --workers 2
#
# DIR receives the generated hour (kept between runs with the same --files/--rows, so the
# generation is paid once) and two copies to compact (one with --fanned-only, which skips the
# one-output side). The binary is target/release/ourios-compact
# (cargo build --release -p ourios-compact), or $OURIOS_BENCH_BIN. Prints, for each side, the wall
# time, CPU time and peak resident memory, and for the fan-out each phase's seconds and MB/s of
# encoded input; the JSON reports are left in DIR.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
fi
dir="$1"
shift
files=60
rows=350000
ranges=4
workers=1
budget=64MiB
sides="one fanned"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --files) files="$2" ;;
        --rows) rows="$2" ;;
        --ranges) ranges="$2" ;;
        --workers) workers="$2" ;;
        --memory-budget) budget="$2" ;;
        --fanned-only) sides="fanned"; shift; continue ;;
        *) echo "error: unknown flag $1" >&2; exit 2 ;;
    esac
    shift 2
done

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${OURIOS_BENCH_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/ourios-compact}"
if [[ ! -x "$bin" ]]; then
    echo "error: $bin is missing: cargo build --release -p ourios-compact, or set OURIOS_BENCH_BIN" >&2
    exit 2
fi
if ! command -v python3 >/dev/null; then
    echo "error: python3 is needed to read the reports" >&2
    exit 2
fi

hour=2026-11-29T10
base="$dir/hour-${files}x${rows}"
mkdir -p "$dir"
if [[ ! -f "$base/.complete" ]]; then
    rm -rf "$base"
    echo "== generating $files files of $rows rows into $base" >&2
    "$bin" generate --store "$base" --tenant acme --hour "$hour" \
        --files "$files" --rows "$rows" --seed 7 >/dev/null
    touch "$base/.complete"
fi

# One side: a fresh copy compacted with the given flags; prints "wall cpu rss_kb".
run() {
    local name="$1"
    shift
    rm -rf "${dir:?}/$name"
    cp -r "$base" "$dir/$name"
    OURIOS_LOG=info /usr/bin/env time -f '%e %U %S %M' -o "$dir/$name.time" \
        "$bin" compact --store "$dir/$name" --tenant acme --hour "$hour" \
        --memory-budget "$budget" --scratch "$dir/scratch-$name" --json "$@" \
        >"$dir/$name.json" 2>"$dir/$name.log"
    rm -rf "${dir:?}/$name" "${dir:?}/scratch-$name"
}

rm -f "$dir/one.json" "$dir/one.time"
if [[ "$sides" == *one* ]]; then
    run one --fan-out off
fi
run fanned --fan-out "$ranges" --workers "$workers"

python3 - "$dir" "$budget" "$ranges" "$workers" <<'EOF'
import json, os, re, sys
dir, budget, ranges, workers = sys.argv[1:]
def side(name):
    wall, user, sys_, rss = open(f"{dir}/{name}.time").read().split()[-4:]
    report = json.load(open(f"{dir}/{name}.json"))
    return float(wall), float(user) + float(sys_), int(rss), report
fanned = side("fanned")
sides = [(f"fan-out {ranges} ranges, {workers} workers", fanned)]
mb = fanned[3]["inputs"]["bytes"] / 1e6
rows = fanned[3]["inputs"]["rows"]
if os.path.exists(f"{dir}/one.json"):
    one = side("one")
    assert one[3]["inputs"]["rows"] == rows, "the two sides read different rows"
    sides.insert(0, ("one output", one))
print(f"hour: {fanned[3]['inputs']['files']} files, {mb:.0f} MB encoded, {rows:,} rows; "
      f"budget {budget}")
print(f"{'side':<34} {'wall s':>8} {'CPU s':>8} {'MB/s':>8} {'peak RSS MiB':>13}")
for label, (wall, cpu, rss, _) in sides:
    print(f"{label:<34} {wall:>8.1f} {cpu:>8.1f} {mb / wall:>8.1f} {rss / 1024:>13.0f}")
phases = {}
for line in open(f"{dir}/fanned.log"):
    m = re.search(r"fan-out: (runs sorted|split|ranges merged).*elapsed_ms=(\d+)", line)
    if m:
        phases[m.group(1)] = int(m.group(2)) / 1000
print(f"{'phase':<34} {'wall s':>8} {'MB/s':>8} {'MB/s per task':>14}")
for phase, tasks in [("runs sorted", int(fanned[3]["fan_out"]["groups"])),
                     ("split", 1), ("ranges merged", int(ranges))]:
    secs = phases.get(phase)
    if secs is None:
        continue
    per_task = mb / secs / min(tasks, int(workers)) if secs else float("inf")
    print(f"{phase:<34} {secs:>8.1f} {mb / max(secs, 1e-3):>8.1f} {per_task:>14.1f}")
EOF

"""What a job's log says of its uploads and of a fanned-out job's run tasks
(`tests/bench_transfers.sh`).

Each upload logs one line at debug level (`OURIOS_LOG=ourios_compaction::store::upload=debug`):
`upload planned key=... part_bytes=N first_part_bytes=N in_flight=N`. Each run task logs one line
at info level (`OURIOS_LOG=ourios_compaction::compact::fan_out::tasks=info`):
`fan-out: run task done group=0 inputs=15 first="data/..." input_bytes=N run_bytes=N elapsed_ms=N`.

    python tests/run_tasks.py parts JOB_LOG
        `part_bytes first_part_bytes in_flight` of the job's first upload, for `transfer_only.py`

    python tests/run_tasks.py groups JOB_LOG PREFIX
        one `PREFIX+first:inputs:run_bytes` a task, for `transfer_only.py --group`
    python tests/run_tasks.py times COMPUTE_LOG JOB_LOG TASKS_JSON
        one `compute transfer job` line of seconds a task
    python tests/run_tasks.py summary TIMES
        the medians, and the median of each task's job / max(compute, transfer)
"""

import json
import re
import statistics
import sys

DONE = "fan-out: run task done"
PLANNED = "upload planned"
FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')


def lines(log, message):
    """The fields of each line of `log` that says `message`, in order."""
    found = []
    for line in open(log):
        if message in line:
            found.append({k: v.strip('"') for k, v in FIELD.findall(line.split(message, 1)[1])})
    return found


def tasks(log):
    """The fields of each run task's line in `log`, in order."""
    return lines(log, DONE)


def main(argv):
    command = argv[1]
    if command == "parts":
        planned = lines(argv[2], PLANNED)
        if not planned:
            sys.exit(f"{argv[2]} has no `{PLANNED}` line: was the upload logged at debug level?")
        first = planned[0]
        print(first["part_bytes"], first["first_part_bytes"], first["in_flight"])
    elif command == "groups":
        for task in tasks(argv[2]):
            print(f"{argv[3]}{task['first']}:{task['inputs']}:{task['run_bytes']}")
    elif command == "times":
        compute, job = ([int(t["elapsed_ms"]) / 1000 for t in tasks(log)] for log in argv[2:4])
        transfer = json.load(open(argv[4]))["tasks"]
        for c, t, j in zip(compute, transfer, job):
            print(c, t, j)
    elif command == "summary":
        rows = [list(map(float, line.split())) for line in open(argv[2])]
        compute, transfer, job = (statistics.median(col) for col in zip(*rows))
        ratio = statistics.median(j / max(c, t) for c, t, j in rows)
        print(
            f"run tasks, medians of {len(rows)}: compute {compute:.2f} s, transfer "
            f"{transfer:.2f} s, job {job:.2f} s; job / max(compute, transfer) = {ratio:.2f}x "
            "(median of the tasks' ratios)"
        )
    else:
        sys.exit(f"unknown command {command}: see {argv[0]}'s header")


if __name__ == "__main__":
    main(sys.argv)

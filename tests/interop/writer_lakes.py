#!/usr/bin/env python3
"""Writes one hour of each usual writer's lake with pyarrow, and checks its compaction.

Usage:
  writer_lakes.py write DIR               writes each lake under DIR/<lake>, a store root
  writer_lakes.py check DIR LAKE KEY...   checks LAKE's compacted files KEY... (store keys)

`write` prints one JSON line per lake: {"lake", "store", "flags", "hour", "rows",
"where_key", "where_bloom"}: its store root, the CLI flags of its settings, its hour, its
rows, and one `--where` filter on the sort key's first column and one on a bloom column, each
matching some rows (the bloom column's value in one row).

The lakes follow each writer's documented layout and schema:
- Vector's `aws_s3` sink (key_prefix templated with strftime, object names
  `<unix time>-<uuid>.parquet`): a `timestamp`, `host`, `message`, and fields that drift
  between batches (`status` in some files only, `trace_id` as hex text).
- Fluent Bit's `out_s3` (keys down to the minute, object names without an extension; its
  JSON lines typed by Arrow's JSON reader as its Parquet compression does, so its time key
  `date` is an integer of seconds under `json_date_format epoch`; records from its Kubernetes
  filter with a `kubernetes` object of pod, namespace and container).
- OpenTelemetry logs converted to Parquet beside the collector's `awss3` exporter (its
  default `s3_partition_format` `year=%Y/month=%m/day=%d/hour=%H/minute=%M`): OTLP's
  `time_unix_nano` as unsigned 64-bit integers, 16-byte `trace_id`, the service inside the
  `resource` struct under the field `service.name`.
- Amazon Data Firehose with record-format conversion (default prefix `YYYY/MM/dd/HH/` under a
  configured head, object names `<stream>-<version>-<yyyy-MM-dd-HH-mm-ss>-<uuid>` without an
  extension, timestamps as INT96, the Glue table's lower-case column names).

`check` reads the lake's inputs (still in place until the grace period) and the compacted
files, in key order, and requires: the same multiset of rows by each row's unique id, rows in
the sort key's order (nulls first; struct fields null where their struct is), `sorting_columns`
declaring the key, and the time column's type (the inputs' logical type at the finest unit,
Int64 nanoseconds for `time_unix_nano`). Exits non-zero on the first mismatch.
"""

import datetime as dt
import io
import json
import random
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

HOUR = dt.datetime(2026, 11, 29, 10, tzinfo=dt.timezone.utc)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
FILES = 6
ROWS = 400

LAKES = {
    "vector": {
        "layout": "vector/dt=%Y%m%d/hour=%H",
        "flags": ["--sort-key", "host,status,timestamp", "--bloom-columns", "host,trace_id"],
        "sort": ["host", "status", "timestamp"],
        "time": "timestamp",
        "time_type": pa.timestamp("us", tz="UTC"),
        "id": "message",
    },
    "fluentbit": {
        "layout": "fluentbit/year=%Y/month=%m/day=%d/hr=%H/min=%M",
        "flags": [
            "--input-names", "*",
            "--sort-key", "kubernetes.namespace_name,date",
            "--time-unit", "s",
            "--bloom-columns", "kubernetes.pod_name",
        ],
        "sort": ["kubernetes.namespace_name", "date"],
        "time": "date",
        "time_type": pa.int64(),
        "id": "log",
    },
    "otel": {
        "layout": "otel/year=%Y/month=%m/day=%d/hour=%H/minute=%M",
        "flags": [
            "--sort-key", "resource.service.name,time_unix_nano",
            "--bloom-columns", "trace_id,resource.service.name",
        ],
        "sort": ["resource.service.name", "time_unix_nano"],
        "time": "time_unix_nano",
        "time_type": pa.int64(),
        "id": "body",
    },
    "firehose": {
        "layout": "firehose/%Y/%m/%d/%H",
        "flags": [
            "--input-names", "*",
            "--sort-key", "app,event_time",
            "--bloom-columns", "app,request_id",
        ],
        "sort": ["app", "event_time"],
        "time": "event_time",
        "time_type": pa.timestamp("ns"),
        "id": "message",
    },
}


def hour_dir(layout, minute=None):
    at = HOUR.replace(minute=minute or 0)
    head, _, tail = layout.rpartition("/")
    if "%M" in tail:
        return at.strftime(layout) if minute is not None else HOUR.strftime(head)
    return HOUR.strftime(layout)


def instants(rng, n):
    return sorted(HOUR + dt.timedelta(microseconds=rng.randrange(3_600_000_000)) for _ in range(n))


def vector_file(rng, i):
    times = instants(rng, ROWS)
    rng.shuffle(times)
    columns = {
        "timestamp": pa.array(times, pa.timestamp("us", tz="UTC")),
        "host": [rng.choice(["web-1", "web-2", "db-1", None]) for _ in range(ROWS)],
        "message": [f"vector file {i} line {r}" for r in range(ROWS)],
        "source_type": ["file"] * ROWS,
    }
    if i % 2 == 0:  # Inferred per batch: only batches with HTTP events have a status.
        columns["status"] = pa.array([rng.choice([200, 404, 500, None]) for _ in range(ROWS)], pa.int64())
    if i != 3:
        columns["trace_id"] = [f"{rng.randrange(1, 5000) if r else 7 * (i == 1):032x}" for r in range(ROWS)]
    name = f"{int(HOUR.timestamp()) + i * 300}-{uuid.UUID(int=rng.getrandbits(128))}.parquet"
    return name, None, pa.table(columns)


def fluentbit_file(rng, i):
    # Fluent Bit turns its JSON lines into Parquet with Arrow's JSON reader and its default
    # options (src/aws/compression/arrow/compress.c), which pyarrow.json is: the types are
    # inferred. With `json_date_format epoch` its time key is an integer of seconds.
    lines = []
    for r, t in enumerate(instants(rng, ROWS)):
        ns, pod = f"ns-{rng.randrange(3)}", f"pod-{rng.randrange(4, 500) if r else 3}"
        lines.append(json.dumps({
            "date": int(t.timestamp()),
            "log": f"fluentbit file {i} line {r}",
            "stream": rng.choice(["stdout", "stderr"]),
            "kubernetes": None if rng.randrange(10) == 0 else
            {"namespace_name": ns, "pod_name": pod, "container_name": "app"},
        }))
    table = pa_json.read_json(io.BytesIO("\n".join(lines).encode()))
    # Keys down to the minute (the first file in the hour's own directory), no extension.
    minute = None if i == 0 else i * 7
    return f"{i * 7:02d}-{rng.getrandbits(32):08x}", minute, table


def otel_file(rng, i):
    times = instants(rng, ROWS)
    rng.shuffle(times)
    nanos = [int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000 + rng.randrange(1000) for t in times]
    resource = pa.array(
        [{"service.name": rng.choice(["checkout", "cart", "payment"]), "host.name": f"node-{rng.randrange(4)}"} for _ in range(ROWS)],
        pa.struct([("service.name", pa.string()), ("host.name", pa.string())]),
    )
    table = pa.table({
        "time_unix_nano": pa.array(nanos, pa.uint64()),
        "severity_text": [rng.choice(["INFO", "WARN", "ERROR"]) for _ in range(ROWS)],
        "body": [f"otel file {i} record {r}" for r in range(ROWS)],
        "trace_id": pa.array([(rng.randrange(8, 5000) if r else 7).to_bytes(16, "big") for r in range(ROWS)], pa.binary(16)),
        "resource": resource,
    })
    return f"logs_{rng.getrandbits(63)}.parquet", i * 9, table


def firehose_file(rng, i):
    times = instants(rng, ROWS)
    rng.shuffle(times)
    table = pa.table({
        "event_time": pa.array(times, pa.timestamp("us")),
        "level": [rng.choice(["info", "error"]) for _ in range(ROWS)],
        "app": [rng.choice(["billing", "search", "auth"]) for _ in range(ROWS)],
        "message": [f"firehose file {i} record {r}" for r in range(ROWS)],
        "request_id": [f"req-{rng.randrange(8, 5000) if r else 7}" for r in range(ROWS)],
    })
    at = HOUR + dt.timedelta(minutes=i * 9, seconds=i)
    name = f"logs-stream-1-{at.strftime('%Y-%m-%d-%H-%M-%S')}-{uuid.UUID(int=rng.getrandbits(128))}"
    return name, None, table


WRITERS = {"vector": vector_file, "fluentbit": fluentbit_file, "otel": otel_file, "firehose": firehose_file}


def write(store):
    # One lake per store root: outputs and manifests are named by partition under the root.
    for lake, spec in LAKES.items():
        rng = random.Random(lake)
        for i in range(FILES):
            name, minute, table = WRITERS[lake](rng, i)
            directory = Path(store) / lake / hour_dir(spec["layout"], minute)
            directory.mkdir(parents=True, exist_ok=True)
            # Firehose's (Hive's) Parquet serializer writes timestamps as INT96, and no Arrow
            # schema beside them.
            firehose = lake == "firehose"
            pq.write_table(table, directory / name, row_group_size=100,
                           use_deprecated_int96_timestamps=firehose, store_schema=not firehose)
        first_key = {"vector": "host=web-2", "fluentbit": "kubernetes.namespace_name=ns-1",
                     "otel": "resource.service.name=cart", "firehose": "app=search"}[lake]
        bloom = {"vector": "trace_id=" + f"{7:032x}", "fluentbit": "kubernetes.pod_name=pod-3",
                 "otel": "trace_id=" + (7).to_bytes(16, "big").hex(), "firehose": "request_id=req-7"}[lake]
        print(json.dumps({
            "lake": lake,
            "store": str(Path(store) / lake),
            "flags": ["--layout", spec["layout"], *spec["flags"]],
            "hour": HOUR.strftime("%Y-%m-%dT%H"),
            "rows": FILES * ROWS,
            "where_key": first_key,
            "where_bloom": bloom,
        }))


def column(table, path):
    """The values of a column or a struct path, null where a struct holding it is."""
    if path in table.column_names:
        return table.column(path).to_pylist()
    head, _, field = path.partition(".")
    return [None if v is None else v.get(field) for v in table.column(head).to_pylist()]


def as_key(value):
    """A value as it sorts: nulls first; timestamps as instants; bytes as bytes."""
    if value is None:
        return (0,)
    if isinstance(value, dt.datetime):
        return (1, (value.replace(tzinfo=value.tzinfo or dt.timezone.utc) - EPOCH) // dt.timedelta(microseconds=1))
    return (1, value)


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def check(store, lake, keys):
    spec = LAKES[lake]
    root = Path(store) / lake
    inputs = [p for p in (root / spec["layout"].split("/")[0]).rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    expected = sorted(v for p in inputs for v in pq.read_table(p).column(spec["id"]).to_pylist())
    tables = [pq.read_table(root / key) for key in keys]
    rows = []
    for table in tables:
        ids = table.column(spec["id"]).to_pylist()
        sort = [column(table, c) for c in spec["sort"]]
        rows.extend((tuple(as_key(s[r]) for s in sort), ids[r]) for r in range(table.num_rows))
        if table.schema.field(spec["time"]).type != spec["time_type"]:
            fail(f"{lake}: time column {table.schema.field(spec['time']).type}, expected {spec['time_type']}")
    if sorted(r[1] for r in rows) != expected:
        fail(f"{lake}: {len(rows)} rows compacted, {len(expected)} written: not the same rows")
    for a, b in zip(rows, rows[1:]):
        if a[0] > b[0]:
            fail(f"{lake}: {a} before {b}: not in the order of {spec['sort']}")
    for key in keys:
        metadata = pq.ParquetFile(root / key).metadata
        declared = [metadata.schema.column(c.column_index).path for c in metadata.row_group(0).sorting_columns]
        if declared != spec["sort"] or any(c.descending or not c.nulls_first for c in metadata.row_group(0).sorting_columns):
            fail(f"{lake}: sorting_columns {declared}, expected {spec['sort']} ascending, nulls first")
    print(json.dumps({"lake": lake, "rows": len(rows), "files": len(keys)}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        fail(__doc__)

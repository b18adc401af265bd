#!/usr/bin/env python3
"""Writes partitions of Parquet files as real writers produce them, and checks compactions.

Usage:
  writer_corpus.py write STORE     writes the partitions under STORE/data/ (a directory store)
  writer_corpus.py verify STORE    compares every compacted partition with its inputs

`write` prints one JSON line per partition: {"tenant", "hour", "expect"}, where "expect" is
"compacted" or "partial" (a partition holding a file of conflicting types), and for a
partial one the quarantined file's name and the words its reason must contain.

Writers: pyarrow with every codec it writes (none, snappy, gzip, brotli, lz4_raw, zstd) and
both format versions (1.0, 2.6) and data page versions; Polars (large strings and lists,
microsecond times); DuckDB (16-byte ids as BLOB, timestamps with a zone); INT96 times; a
file with zero rows; nested columns whose encodings differ by file; integer and float
widths that differ by file; page checksums, one of them not matching its page; a file
whose definition levels were damaged (its nulls no longer match its statistics) and one whose
list lost an element to a damaged level (its rows no longer match its pages' levels); service and
tenant columns of nulls typed Null; a stray conflicting file of few rows whose name sorts first;
Date32 and Date64 columns.

`verify` reads every input of a partition (still in place: inputs are deleted only after the
grace period) and its compacted file(s) with pyarrow, normalises values (not types: every
string encoding is a string, timestamps are nanoseconds, lists are lists, a missing struct
field is a null one) and requires the same multiset of rows, in (service nulls first, time)
order in the output. Exits non-zero on the first mismatch.
"""

import datetime as dt
import decimal
import json
import sys
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SERVICE = "service.name"
TIME = "time_unix_nano"
HOUR = "2026-11-29T10"
START = int(dt.datetime(2026, 11, 29, 10, tzinfo=dt.timezone.utc).timestamp()) * 10**9
SERVICES = ["api", "billing", None, "checkout", "db"]


def partition_dir(store, tenant):
    return Path(store) / "data" / f"tenant={tenant}" / "year=2026" / "month=11" / "day=29" / "hour=10"


def times_ns(n, seed):
    # Distinct microsecond-aligned times inside the hour, in no particular order.
    return [START + ((i * 7919 + seed * 104729) % 3_500_000) * 1_000_000 + seed * 1000 for i in range(n)]


def base_columns(n, seed):
    return {
        SERVICE: [SERVICES[(i + seed) % len(SERVICES)] for i in range(n)],
        "body": [f"line {seed}-{i} " + "x" * (i % 40) for i in range(n)],
        "status": [200 + (i % 5) * 100 for i in range(n)],
    }


def pyarrow_table(n, seed, time_type=pa.int64()):
    cols = base_columns(n, seed)
    t = times_ns(n, seed)
    if pa.types.is_timestamp(time_type):
        factor = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[time_type.unit]
        time = pa.array([v // factor for v in t], pa.int64()).cast(time_type)
    else:
        time = pa.array(t, time_type)
    return pa.table(
        {
            TIME: time,
            SERVICE: pa.array(cols[SERVICE], pa.string()),
            "body": pa.array(cols["body"], pa.string()),
            "status": pa.array(cols["status"], pa.int32()),
        }
    )


def partial(tenant, quarantined, reason_words):
    """The expectation of a partition where one file is quarantined for the given words."""
    return {
        "tenant": tenant,
        "hour": HOUR,
        "expect": "partial",
        "quarantined": quarantined,
        "reason_words": reason_words,
    }


def write_codecs(store):
    d = partition_dir(store, "codecs")
    d.mkdir(parents=True, exist_ok=True)
    seed = 0
    for codec in ["none", "snappy", "gzip", "brotli", "lz4", "zstd"]:
        for version, page in [("1.0", "1.0"), ("2.6", "2.0")]:
            seed += 1
            pq.write_table(
                pyarrow_table(300, seed),
                d / f"pyarrow-{codec}-v{version}.parquet",
                compression=codec,
                version=version,
                data_page_version=page,
                row_group_size=128,
            )
    return [{"tenant": "codecs", "hour": HOUR, "expect": "compacted"}]


def write_polars_and_pyarrow(store):
    d = partition_dir(store, "polars")
    d.mkdir(parents=True, exist_ok=True)
    n = 400
    for seed in (1, 2):
        cols = base_columns(n, seed)
        df = pl.DataFrame(
            {
                TIME: pl.Series(times_ns(n, seed), dtype=pl.Int64),
                SERVICE: cols[SERVICE],
                "body": cols["body"],
                "status": pl.Series(cols["status"], dtype=pl.Int64),
                "tags": [[f"t{i % 3}", f"u{seed}"] for i in range(n)],
                "when": pl.Series([v // 1000 for v in times_ns(n, seed)], dtype=pl.Int64).cast(
                    pl.Datetime("us", "UTC")
                ),
            }
        )
        df.write_parquet(d / f"polars-{seed}.parquet", compression="zstd")
    for seed in (3, 4):
        table = pyarrow_table(n, seed).append_column(
            "tags", pa.array([[f"t{i % 3}"] for i in range(n)], pa.list_(pa.string()))
        ).append_column(
            "when", pa.array(times_ns(n, seed), pa.int64()).cast(pa.timestamp("ns"))
        )
        pq.write_table(table, d / f"pyarrow-{seed}.parquet", compression="snappy")
    return [{"tenant": "polars", "hour": HOUR, "expect": "compacted"}]


def write_duckdb_and_pyarrow(store):
    d = partition_dir(store, "duckdb")
    d.mkdir(parents=True, exist_ok=True)
    n = 300
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for seed in (1, 2):
        path = d / f"duckdb-{seed}.parquet"
        con.execute(
            f"""
            COPY (
              SELECT
                ({START} + ((i * 7919 + {seed} * 104729) % 3500000) * 1000000 + {seed} * 1000)::BIGINT
                  AS "{TIME}",
                CASE WHEN i % 5 = 2 THEN NULL ELSE ['api','billing','x','checkout','db'][(i % 5) + 1] END
                  AS "{SERVICE}",
                'duck ' || i::VARCHAR AS body,
                (200 + (i % 5) * 100)::INTEGER AS status,
                unhex(md5('{seed}-' || i::VARCHAR)) AS id,
                make_timestamptz(2026, 11, 29, 10, i % 60, 1.5) AS seen
              FROM range({n}) t(i)
            ) TO '{path}' (FORMAT parquet, COMPRESSION gzip)
            """
        )
    for seed in (3, 4):
        ids = [bytes([(i + seed) % 256]) * 16 for i in range(n)]
        table = (
            pyarrow_table(n, seed)
            .append_column("id", pa.array(ids, pa.binary(16)))
            .append_column(
                "seen",
                pa.array([t // 10**6 for t in times_ns(n, seed)], pa.int64()).cast(
                    pa.timestamp("ms", tz="UTC")
                ),
            )
        )
        pq.write_table(table, d / f"pyarrow-{seed}.parquet", compression="brotli")
    return [{"tenant": "duckdb", "hour": HOUR, "expect": "compacted"}]


def write_time_units(store):
    d = partition_dir(store, "units")
    d.mkdir(parents=True, exist_ok=True)
    n = 200
    kinds = [
        ("int64", pa.int64()),
        ("uint64", pa.uint64()),
        ("ts-s", pa.timestamp("s")),
        ("ts-ms-utc", pa.timestamp("ms", tz="UTC")),
        ("ts-us-utc", pa.timestamp("us", tz="UTC")),
        ("ts-us-berlin", pa.timestamp("us", tz="Europe/Berlin")),
        ("ts-ns", pa.timestamp("ns")),
    ]
    for seed, (name, time_type) in enumerate(kinds, start=1):
        table = pyarrow_table(n, seed, time_type)
        if time_type == pa.timestamp("s"):
            # Whole seconds: distinct second values inside the hour.
            secs = [START // 10**9 + (i * 17 + seed) % 3600 for i in range(n)]
            table = table.set_column(0, TIME, pa.array(secs, pa.int64()).cast(time_type))
        pq.write_table(table, d / f"{name}.parquet")
    pq.write_table(
        pyarrow_table(n, 99, pa.timestamp("ns")),
        d / "int96.parquet",
        use_deprecated_int96_timestamps=True,
    )
    # Dates as Date32 in one file and Date64 in another: the output holds Parquet DATEs.
    day = dt.date(2026, 11, 29)
    for seed, date_type in ((1, pa.date32()), (2, pa.date64())):
        table = pyarrow_table(n, 100 + seed).append_column("day", pa.array([day] * n, date_type))
        pq.write_table(table, d / f"date-{seed}.parquet")
    return [{"tenant": "units", "hour": HOUR, "expect": "compacted"}]


def write_nested(store):
    d = partition_dir(store, "nested")
    d.mkdir(parents=True, exist_ok=True)
    n = 150
    a = pyarrow_table(n, 1).append_column(
        "attrs",
        pa.array(
            [{"host": f"h{i % 4}", "port": i % 3} for i in range(n)],
            pa.struct([("host", pa.string()), ("port", pa.int32())]),
        ),
    ).append_column(
        "spans",
        pa.array([[{"id": i, "ok": True}] for i in range(n)], pa.list_(pa.struct([("id", pa.int32()), ("ok", pa.bool_())]))),
    ).append_column(
        "labels", pa.array([[("k", f"v{i % 3}")] for i in range(n)], pa.map_(pa.string(), pa.string()))
    ).append_column("ratio", pa.array([i / 7 for i in range(n)], pa.float32()))
    pq.write_table(a, d / "a.parquet")
    b = pyarrow_table(n, 2).append_column(
        "attrs",
        pa.array(
            [{"port": i, "region": "eu"} for i in range(n)],
            pa.struct([("port", pa.int64()), ("region", pa.large_string())]),
        ),
    ).append_column(
        "spans",
        pa.array(
            [[{"id": i, "name": "s"}, {"id": i + 1, "name": None}] for i in range(n)],
            pa.large_list(pa.struct([("id", pa.int64()), ("name", pa.large_string())])),
        ),
    ).append_column(
        "labels", pa.array([[("k", f"w{i % 3}")] for i in range(n)], pa.map_(pa.large_string(), pa.string()))
    ).append_column("ratio", pa.array([i / 9 for i in range(n)], pa.float64()))
    pq.write_table(b, d / "b.parquet", compression="zstd")
    c = pyarrow_table(n, 3).append_column(
        "spans",
        pa.array([[{"id": i}] for i in range(n)], pa.list_view(pa.struct([("id", pa.int16())]))),
    ).append_column("status8", pa.array([i % 100 for i in range(n)], pa.uint8()))
    pq.write_table(c, d / "c.parquet", compression="gzip")
    return [{"tenant": "nested", "hour": HOUR, "expect": "compacted"}]


def write_empty(store):
    d = partition_dir(store, "empty")
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pyarrow_table(200, 1), d / "a.parquet")
    pq.write_table(pyarrow_table(0, 2), d / "b-empty.parquet")
    # A Spark-style empty file: the schema only, no row group, no time column.
    pq.write_table(pa.table({"other": pa.array([], pa.string())}), d / "c-empty-other.parquet")
    pq.write_table(pyarrow_table(100, 3), d / "d.parquet")
    return [{"tenant": "empty", "hour": HOUR, "expect": "compacted"}]


def write_conflict(store):
    d = partition_dir(store, "conflict")
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pyarrow_table(100, 1), d / "a.parquet")
    bad = pyarrow_table(100, 2).set_column(3, "status", pa.array(["ok"] * 100, pa.string()))
    pq.write_table(bad, d / "b-text-status.parquet")
    pq.write_table(pyarrow_table(100, 3), d / "c.parquet")
    words = ["status", "Utf8", "Int32", "a.parquet"]
    return [partial("conflict", "b-text-status.parquet", words)]


def write_null_typed_keys(store):
    """pyarrow (from_pylist, pandas) types a column of nulls as Null: a service or tenant
    column of nulls that way is an all-null string column, not a bad input."""
    d = partition_dir(store, "nulltyped")
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pyarrow_table(50, 1), d / "a.parquet")
    t = times_ns(20, 2)
    nulls = pa.table(
        {TIME: pa.array(t, pa.int64()), SERVICE: [None] * 20, "tenant_id": [None] * 20}
    )
    assert nulls.schema.field(SERVICE).type == pa.null()
    pq.write_table(nulls, d / "b-null-typed.parquet")
    return [{"tenant": "nulltyped", "hour": HOUR, "expect": "compacted"}]


def write_stray_conflict(store):
    """A stray file of a few rows whose name sorts first disagrees with the files of many rows:
    it is the one quarantined."""
    d = partition_dir(store, "stray")
    d.mkdir(parents=True, exist_ok=True)
    stray = pyarrow_table(5, 1).set_column(3, "status", pa.array(["ok"] * 5, pa.string()))
    pq.write_table(stray, d / "0-stray.parquet")
    pq.write_table(pyarrow_table(100, 2), d / "a.parquet")
    pq.write_table(pyarrow_table(100, 3), d / "b.parquet")
    words = ["status", "Utf8", "Int32", "a.parquet", "more of the partition's rows"]
    return [partial("stray", "0-stray.parquet", words)]


def write_checksums(store):
    """Files with page checksums (as parquet-mr and Spark write them by default): an intact
    one compacts; one whose body page lost a byte in storage is quarantined by its checksum,
    not read as rows that are silently wrong."""
    d = partition_dir(store, "checksums")
    d.mkdir(parents=True, exist_ok=True)
    options = {"write_page_checksum": True, "use_dictionary": False, "compression": "snappy"}
    pq.write_table(pyarrow_table(100, 1), d / "a.parquet", **options)
    damaged = d / "b-damaged.parquet"
    pq.write_table(pyarrow_table(100, 2), damaged, **options)
    body = pq.ParquetFile(damaged).metadata.row_group(0).column(2)
    assert body.path_in_schema == "body"
    data = bytearray(damaged.read_bytes())
    data[body.data_page_offset + body.total_compressed_size // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    pq.write_table(pyarrow_table(100, 3), d / "c.parquet", **options)
    return [partial("checksums", "b-damaged.parquet", ["checksum"])]


def write_damaged_levels(store):
    """A file whose definition levels were damaged in storage, written without checksums: one
    row's body turned null. Readers that take the levels as they come read a null there and
    every later body of the page one row early, with no error; its column statistics still
    count the nulls written, so it is quarantined for them, not compacted with bodies on the
    wrong rows."""
    d = partition_dir(store, "levels")
    d.mkdir(parents=True, exist_ok=True)
    options = {"use_dictionary": False, "compression": "none", "data_page_version": "1.0"}
    pq.write_table(pyarrow_table(100, 1), d / "a.parquet", **options)
    damaged = d / "b-damaged.parquet"
    table = pyarrow_table(100, 2)
    bodies = [None] * 8 + table.column("body").to_pylist()[8:]
    table = table.set_column(2, "body", pa.array(bodies, pa.string()))
    pq.write_table(table, damaged, **options)
    body = pq.ParquetFile(damaged).metadata.row_group(0).column(2)
    assert body.path_in_schema == "body" and body.statistics.null_count == 8
    data = bytearray(damaged.read_bytes())
    start = body.data_page_offset
    chunk = bytes(data[start : start + body.total_compressed_size])
    # The page's levels: a run of 8 nulls (RLE: 8 << 1, level 0), then 92 values (92 << 1 as
    # a varint, level 1). Damaged: 9 nulls, then 91 values.
    runs = bytes([0x10, 0x00, 0xB8, 0x01, 0x01])
    assert chunk.count(runs) == 1, "the body page's definition levels"
    at = start + chunk.index(runs)
    data[at : at + len(runs)] = bytes([0x12, 0x00, 0xB6, 0x01, 0x01])
    damaged.write_bytes(bytes(data))
    pq.write_table(pyarrow_table(100, 3), d / "c.parquet", **options)
    words = ["b-damaged.parquet", "column body", "9 nulls", "declare 8", "definition levels"]
    return [partial("levels", "b-damaged.parquet", words)]


def write_damaged_list_levels(store):
    """A file whose list column lost an element to a damaged definition level (the second,
    null element of the first row's tags now reads as an empty list's level). Readers that
    take the levels as they come drop the element with no error (pyarrow refuses the file:
    "list offsets larger than values array"); the rows then stand for fewer levels than the
    pages hold, so it is quarantined."""
    d = partition_dir(store, "listlevels")
    d.mkdir(parents=True, exist_ok=True)
    options = {"use_dictionary": False, "compression": "none", "data_page_version": "1.0"}

    def tagged(seed):
        table = pyarrow_table(8, seed)
        return table.append_column("tags", pa.array([["a", None]] * 8, pa.list_(pa.string())))

    pq.write_table(tagged(1), d / "a.parquet", **options)
    damaged = d / "b-damaged.parquet"
    pq.write_table(tagged(2), damaged, **options)
    data = bytearray(damaged.read_bytes())
    # The tags' definition levels, 3 (a value) and 2 (a null element) by turns, two bits each
    # from the low bits (0b10_11_10_11), after a header of two bit-packed groups of eight.
    levels = bytes([0x05, 0xBB, 0xBB, 0xBB, 0xBB])
    assert data.count(levels) == 1, "the tags' definition levels"
    at = data.index(levels)
    data[at + 1] = 0b1011_0111  # the first null element (2) becomes an empty list (1)
    damaged.write_bytes(bytes(data))
    pq.write_table(tagged(3), d / "c.parquet", **options)
    words = ["b-damaged.parquet", "column tags", "15 levels", "pages hold 16", "levels or its page headers"]
    return [partial("listlevels", "b-damaged.parquet", words)]


# --- verification --------------------------------------------------------------------------


def normal_type(t):
    """The type values of `t` are compared in: one per logical family."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_dictionary(t):
        return normal_type(t.value_type)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(normal_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, normal_type(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(normal_type(t.key_type), normal_type(t.item_type))
    return t


def normal_array(a):
    t = a.type
    if pa.types.is_dictionary(t):
        return normal_array(a.cast(t.value_type))
    if pa.types.is_timestamp(t):
        return a.cast(pa.timestamp("ns", tz=t.tz)).cast(pa.int64())
    if isinstance(a, pa.ChunkedArray):
        return pa.chunked_array([normal_array(c) for c in a.chunks], type=normal_type(t))
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays(
            [normal_array(child) for child in a.flatten()],
            fields=[pa.field(f.name, normal_type(f.type)) for f in t],
            mask=a.is_null(),
        )
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        # Lists (of leaves without timestamps, as in this corpus) through Python values.
        return pa.array(a.to_pylist(), type=normal_type(t))
    return a.cast(normal_type(t))


def prune(value):
    """A row as plain JSON: nulls dropped from objects (a missing field equals a null one)."""
    if isinstance(value, dict):
        return {k: prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune(v) for v in value]
    if isinstance(value, tuple):
        return [prune(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dt.date, dt.time, dt.datetime)):
        return value.isoformat()
    return value


def normal_rows(table):
    columns = {name: normal_array(table.column(name).combine_chunks()) for name in table.column_names}
    normal = pa.table(columns)
    return [prune(row) for row in normal.to_pylist()]


def fail(message):
    print(f"writer corpus: {message}", file=sys.stderr)
    sys.exit(1)


def verify(store):
    store = Path(store)
    compacted_root = store / "compacted"
    partitions = sorted(p for p in (store / "data").glob("tenant=*/year=*/month=*/day=*/hour=*"))
    if not partitions:
        fail(f"no partitions under {store}/data")
    for part in partitions:
        relative = part.relative_to(store / "data")
        outputs = sorted((compacted_root / relative).glob("*.parquet"))
        if not outputs:
            fail(f"{relative}: no compacted file")
        manifest_dir = store / "_compaction" / "manifests" / relative
        quarantined = set()
        for m in sorted(manifest_dir.glob("*.json")) if manifest_dir.exists() else []:
            quarantined |= {Path(q["key"]).name for q in json.loads(m.read_text()).get("quarantined", [])}
        expected = []
        for f in sorted(part.glob("*.parquet")):
            if f.name in quarantined:
                continue
            expected += [json.dumps(r, sort_keys=True) for r in normal_rows(pq.read_table(f))]
        got_rows = []
        for out in outputs:
            got_rows += normal_rows(pq.read_table(out))
        keys = [((r.get(SERVICE) is not None), r.get(SERVICE) or "", r[TIME]) for r in got_rows]
        if keys != sorted(keys):
            fail(f"{relative}: output rows are not in (service, time) order")
        got = sorted(json.dumps(r, sort_keys=True) for r in got_rows)
        if got != sorted(expected):
            missing = sorted(set(expected) - set(got))[:3]
            extra = sorted(set(got) - set(expected))[:3]
            fail(
                f"{relative}: {len(got)} rows out, {len(expected)} in; "
                f"missing e.g. {missing}; unexpected e.g. {extra}"
            )
        print(f"{relative}: {len(got)} rows equal to the inputs")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "verify"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    store = sys.argv[2]
    if sys.argv[1] == "verify":
        verify(store)
        return
    writers = [
        write_codecs,
        write_polars_and_pyarrow,
        write_duckdb_and_pyarrow,
        write_time_units,
        write_nested,
        write_empty,
        write_conflict,
        write_checksums,
        write_damaged_levels,
        write_damaged_list_levels,
        write_null_typed_keys,
        write_stray_conflict,
    ]
    for writer in writers:
        for line in writer(store):
            print(json.dumps(line))


if __name__ == "__main__":
    main()

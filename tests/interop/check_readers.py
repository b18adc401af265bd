#!/usr/bin/env python3
"""Reads the block-layout files of `interop_fixtures` with independent Parquet readers.

Usage: check_readers.py DIR

DIR holds the files written by
`cargo run --release -p ourios-compaction --example interop_fixtures -- DIR` and their
`expected.json`. Every file is read with pyarrow, DuckDB and Polars: in full, projected,
and filtered (a service and a time window, an absent service, rows without a service, a
non-key column), and each answer must equal the expected rows exactly, in file order. The
footer is decoded independently as well: each column's chunks of a block's row groups are
contiguous, RowGroup.file_offset is the row group's earliest chunk and
RowGroup.total_compressed_size the sum of its chunks, and bloom filters follow the last
block; DuckDB's bloom probe must agree with the rows of every row group.

Exits non-zero on the first mismatch, naming the file, the reader and the query.
"""

import json
import math
import struct
import sys
from pathlib import Path

import duckdb
import polars as pl
import pyarrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

SERVICE = "service.name"
TIME = "time_unix_nano"
PROJECTION = [SERVICE, "body", "resource", "tags"]
MINUTE = 60 * 10**9


class Mismatch(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Mismatch(message)


# --- the expected answers ----------------------------------------------------------------


def queries(expected):
    """(name, columns or None, predicate as (service op, window), row filter)."""
    start = expected["start"]
    window = (start + 10 * MINUTE, start + 40 * MINUTE)
    present = expected["services"][3]
    return [
        ("full", None, None),
        ("projected", PROJECTION, None),
        ("service and window", None, {"service": present, "window": window}),
        ("absent service", PROJECTION, {"service": "no-such-service", "window": None}),
        ("rows without a service", None, {"service": None, "window": window}),
        ("status 500 and ok", [SERVICE, TIME, "status", "ok"], {"status": 500}),
    ]


def matches(row, predicate):
    if predicate is None:
        return True
    if "status" in predicate:
        return row["status"] == predicate["status"] and row["ok"] is True
    if row[SERVICE] != predicate["service"]:
        return False
    window = predicate["window"]
    return window is None or window[0] <= row[TIME] < window[1]


def expected_rows(rows, columns, predicate):
    picked = [r for r in rows if matches(r, predicate)]
    if columns is None:
        return picked
    return [{c: r[c] for c in columns} for r in picked]


# --- the readers ------------------------------------------------------------------------


def condition(predicate, col):
    """The predicate as an expression of a library whose column reference is `col`
    (pyarrow's `pc.field`, Polars' `pl.col`): both build expressions the same way."""
    if "status" in predicate:
        return (col("status") == predicate["status"]) & (col("ok") == True)  # noqa: E712
    service = col(SERVICE)
    expression = (
        service.is_null() if predicate["service"] is None else service == predicate["service"]
    )
    if predicate["window"] is not None:
        low, high = predicate["window"]
        expression = expression & (col(TIME) >= low) & (col(TIME) < high)
    return expression


def read_pyarrow(path, columns, predicate):
    filters = None if predicate is None else condition(predicate, pc.field)
    return pq.read_table(path, columns=columns, filters=filters).to_pylist()


def quoted(column):
    return '"' + column.replace('"', '""') + '"'


def read_duckdb(path, columns, predicate):
    select = "*" if columns is None else ", ".join(quoted(c) for c in columns)
    where = []
    params = []
    if predicate is not None:
        if "status" in predicate:
            where.append("status = ? AND ok")
            params.append(predicate["status"])
        else:
            if predicate["service"] is None:
                where.append(f"{quoted(SERVICE)} IS NULL")
            else:
                where.append(f"{quoted(SERVICE)} = ?")
                params.append(predicate["service"])
            if predicate["window"] is not None:
                where.append(f"{TIME} >= ? AND {TIME} < ?")
                params.extend(predicate["window"])
    sql = (
        f"SELECT {select} FROM read_parquet(?, file_row_number = true)"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY file_row_number"
    )
    connection = duckdb.connect()
    result = connection.execute(sql, [str(path)] + params)
    names = [d[0] for d in result.description]
    rows = [dict(zip(names, values)) for values in result.fetchall()]
    for row in rows:
        row.pop("file_row_number", None)
    return rows


def read_polars(path, columns, predicate):
    frame = pl.scan_parquet(path)
    if predicate is not None:
        frame = frame.filter(condition(predicate, pl.col))
    if columns is not None:
        frame = frame.select(columns)
    return frame.collect().to_dicts()


READERS = [
    (f"pyarrow {pyarrow.__version__}", read_pyarrow),
    (f"duckdb {duckdb.__version__}", read_duckdb),
    (f"polars {pl.__version__}", read_polars),
]


def same(a, b):
    """Exact equality of decoded values (floats compare as floats, NaN equals NaN)."""
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b) or (a is None and b is None)


def compare(got, want, where):
    check(len(got) == len(want), f"{where}: {len(got)} rows, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if not same(g, w):
            raise Mismatch(f"{where}: row {i} is {g!r}, expected {w!r}")


# --- the footer, decoded independently (Thrift compact protocol) -------------------------


class Thrift:
    """Decodes a Thrift compact-protocol struct into {field id: value}."""

    def __init__(self, data):
        self.data = data
        self.at = 0

    def byte(self):
        value = self.data[self.at]
        self.at += 1
        return value

    def varint(self):
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self):
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind):
        if kind in (1, 2):
            return kind == 1
        if kind == 3:
            return struct.unpack("b", bytes([self.byte()]))[0]
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            value = struct.unpack("<d", self.data[self.at : self.at + 8])[0]
            self.at += 8
            return value
        if kind == 8:
            length = self.varint()
            value = self.data[self.at : self.at + length]
            self.at += length
            return value
        if kind in (9, 10):
            header = self.byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            if element in (1, 2):
                return [self.byte() == 1 for _ in range(size)]
            return [self.value(element) for _ in range(size)]
        if kind == 11:
            size = self.varint()
            if size == 0:
                return {}
            types = self.byte()
            return {self.value(types >> 4): self.value(types & 0x0F) for _ in range(size)}
        if kind == 12:
            return self.struct()
        raise Mismatch(f"unknown Thrift type {kind} at byte {self.at}")

    def struct(self):
        fields = {}
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return fields
            delta, kind = header >> 4, header & 0x0F
            last = last + delta if delta else self.zigzag()
            fields[last] = self.value(kind)


def footer(path):
    data = Path(path).read_bytes()
    check(data[:4] == b"PAR1" and data[-4:] == b"PAR1", f"{path}: not a Parquet file")
    length = struct.unpack("<I", data[-8:-4])[0]
    return Thrift(data[-8 - length : -8]).struct()


def check_layout(path, blocks):
    """The block layout, from pyarrow's metadata and the raw footer."""
    metadata = pq.ParquetFile(path).metadata
    raw_groups = footer(path)[4]
    groups = metadata.num_row_groups
    check(groups == len(raw_groups), f"{path}: row group count")
    check(groups > blocks, f"{path}: {groups} row groups for blocks of {blocks}")
    position = 4
    for first in range(0, groups, blocks):
        block = range(first, min(first + blocks, groups))
        for column in range(metadata.num_columns):
            for rg in block:
                chunk = metadata.row_group(rg).column(column)
                start = (
                    chunk.dictionary_page_offset
                    if chunk.has_dictionary_page
                    else chunk.data_page_offset
                )
                check(
                    start == position,
                    f"{path}: row group {rg} column {column} starts at {start}, "
                    f"expected {position} (blocks of {blocks})",
                )
                position = start + chunk.total_compressed_size
        if blocks == 1:
            for column in range(metadata.num_columns):
                chunk = metadata.row_group(first).column(column)
                if chunk.bloom_filter_offset is not None:
                    check(chunk.bloom_filter_offset == position, f"{path}: bloom after rg {first}")
                    position += chunk.bloom_filter_length
    for rg in range(groups):
        group = metadata.row_group(rg)
        chunks = [group.column(c) for c in range(metadata.num_columns)]
        starts = [
            c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
            for c in chunks
        ]
        raw = raw_groups[rg]
        check(raw.get(5) == min(starts), f"{path}: rg {rg} file_offset {raw.get(5)} != {min(starts)}")
        total = sum(c.total_compressed_size for c in chunks)
        check(raw.get(6) == total, f"{path}: rg {rg} total_compressed_size {raw.get(6)} != {total}")
    blooms = sorted(
        (c.bloom_filter_offset, c.bloom_filter_length)
        for rg in range(groups)
        for c in (metadata.row_group(rg).column(i) for i in range(metadata.num_columns))
        if c.bloom_filter_offset is not None
    )
    check(len(blooms) == groups, f"{path}: one bloom filter per row group")
    if blocks > 1:
        for offset, length in blooms:
            check(offset == position, f"{path}: bloom filter at {offset}, expected {position}")
            position += length
    return groups


def check_blooms(path, rows, services):
    """DuckDB's bloom probe never excludes a row group holding the service."""
    connection = duckdb.connect()
    per_group = connection.execute(
        "SELECT row_group_id, row_group_num_rows FROM parquet_metadata(?) "
        "WHERE column_id = 0 ORDER BY row_group_id",
        [str(path)],
    ).fetchall()
    first = 0
    held = []
    for _, count in per_group:
        held.append({r[SERVICE] for r in rows[first : first + count]})
        first += count
    check(first == len(rows), f"{path}: row groups hold {first} rows")
    for service in services + ["no-such-service"]:
        probe = connection.execute(
            "SELECT row_group_id, bloom_filter_excludes FROM parquet_bloom_probe(?, ?, ?) "
            "ORDER BY row_group_id",
            [str(path), SERVICE, service],
        ).fetchall()
        check(len(probe) == len(held), f"{path}: bloom probe of {service} covers every row group")
        for rg, excludes in probe:
            if service in held[rg]:
                check(not excludes, f"{path}: bloom filter of rg {rg} excludes {service}")
        if service == "no-such-service":
            excluded = sum(1 for _, e in probe if e)
            check(excluded == len(probe), f"{path}: absent service excluded by {excluded}/{len(probe)}")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(sys.argv[1])
    expected = json.loads((directory / "expected.json").read_text())
    rows = expected["rows"]
    checked = 0
    try:
        for entry in expected["files"]:
            path = directory / entry["name"]
            groups = check_layout(path, entry["blocks"])
            check_blooms(path, rows, expected["services"])
            for name, columns, predicate in queries(expected):
                want = expected_rows(rows, columns, predicate)
                check(
                    (len(want) == 0) == (name == "absent service"),
                    f"fixture: {name} selects {len(want)} rows",
                )
                for reader, read in READERS:
                    got = read(path, columns, predicate)
                    compare(got, want, f"{entry['name']} / {reader} / {name}")
                    checked += 1
            print(f"ok {entry['name']}: {groups} row groups in blocks of {entry['blocks']}")
    except Mismatch as e:
        print(f"MISMATCH {e}", file=sys.stderr)
        print(f"{checked} passed, 1 failed")
        return 1
    print(f"{checked} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

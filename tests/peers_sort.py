"""Sorts one hour's Parquet files into one file by (service.name, time_unix_nano) with another
engine, as an operator would write it, or rewrites them unsorted, for tests/bench_peers.sh to
time beside this project.

    python tests/peers_sort.py ENGINE INPUT_DIR OUTPUT_FILE

ENGINE is `polars` (lazy scan, sort, sink), `duckdb` (COPY ... ORDER BY, its memory limit
read from OURIOS_PEER_MEMORY, e.g. 1GB) or `rewrite` (pyarrow, no sort: each input file read
whole and appended to one writer: the plain rewrite a sort is measured against).
All write ZSTD Parquet. Prints the rows written.
"""

import os
import sys

SERVICE = "service.name"
TIME = "time_unix_nano"


def sort_with_polars(files, output):
    import polars as pl

    frame = pl.scan_parquet(files).sort([SERVICE, TIME], nulls_last=False)
    frame.sink_parquet(output, compression="zstd")
    return pl.scan_parquet(output).select(pl.len()).collect().item()


def sql_string(text):
    """A SQL string literal of `text`."""
    return "'" + text.replace("'", "''") + "'"


def sort_with_duckdb(files, output):
    import duckdb

    connection = duckdb.connect()
    memory = os.environ.get("OURIOS_PEER_MEMORY")
    if memory:
        connection.execute(f"SET memory_limit = '{memory}'")
    listed = ", ".join(sql_string(f) for f in files)
    connection.execute(
        f"COPY (SELECT * FROM read_parquet([{listed}], union_by_name = true) "
        f'ORDER BY "{SERVICE}" NULLS FIRST, "{TIME}" NULLS FIRST) '
        f"TO {sql_string(output)} (FORMAT parquet, COMPRESSION zstd)"
    )
    count = f"SELECT count(*) FROM read_parquet({sql_string(output)})"
    return connection.execute(count).fetchone()[0]


def rewrite_with_pyarrow(files, output):
    import pyarrow.parquet as pq

    writer = None
    for path in files:
        table = pq.read_table(path)
        if writer is None:
            writer = pq.ParquetWriter(output, table.schema, compression="zstd")
        writer.write_table(table)
    if writer is None:
        sys.exit("error: no input files")
    writer.close()
    return pq.ParquetFile(output).metadata.num_rows


ENGINES = {
    "polars": sort_with_polars,
    "duckdb": sort_with_duckdb,
    "rewrite": rewrite_with_pyarrow,
}


def main(argv):
    if len(argv) != 4 or argv[1] not in ENGINES:
        sys.exit(__doc__)
    engine, input_dir, output = argv[1:]
    files = sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(input_dir)
        for name in names
        if name.endswith(".parquet")
    )
    if not files:
        sys.exit(f"error: no Parquet files under {input_dir}")
    print(ENGINES[engine](files, output))


if __name__ == "__main__":
    main(sys.argv)

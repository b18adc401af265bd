"""Other engines read the live set: the README's recipes, run against a lake in every state.

Usage: python live_set_readers.py <path to the ourios-compact binary>

Builds a local lake of tenant `acme` whose hours are in every state at once:

- 10: compacted, its retired inputs still on disk (within the grace), a late file live beside
  the output, a damaged file quarantined;
- 11: fanned out into several sorted outputs;
- 12: compacted and garbage-collected (only the output is left);
- 13: not compacted yet (ingest files only).

The truth is each ingest file read on its own before any compaction (plus the late file, minus
the damaged one). `ourios-compact files --urls` over the four hours gives the list; DuckDB,
Polars, pyarrow and DataFusion each count the rows and sum `severity_number` over it (the recipes
of the README), and must match the truth and `ourios-compact query`: no row missed, none twice.
Then `ourios-compact symlinks` rewrites the hours' symlink manifests (as the planner does on each
ingest event); each must be byte-identical to `files --urls` for its hour, and DuckDB, Polars and
pyarrow reading their URLs must match the truth too.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import reduce

import pyarrow.parquet as pq

TENANT = "acme"
HOURS = ["2026-11-29T10", "2026-11-29T11", "2026-11-29T12", "2026-11-29T13"]


def cli(binary, *args):
    """Runs the CLI; returns its stdout (fails loudly with its stderr)."""
    done = subprocess.run([binary, *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ourios-compact {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def hour_dir(store, tenant, hour):
    day, hh = hour.split("T")
    y, m, d = day.split("-")
    return os.path.join(store, "data", f"tenant={tenant}", f"year={y}", f"month={m}", f"day={d}", f"hour={hh}")


def count_and_sum(paths):
    """The truth: each file read on its own."""
    rows, total = 0, 0
    for path in paths:
        column = pq.read_table(path, columns=["severity_number"]).column(0)
        rows += len(column)
        total += sum(column.to_pylist())
    return rows, total


# ---------------------------------------------------------------- the recipes (README)


def duckdb_recipe(urls):
    import duckdb

    paths = [u.removeprefix("file://") for u in urls]
    query = "SELECT count(*), sum(severity_number) FROM read_parquet(?, union_by_name = true)"
    return duckdb.connect().execute(query, [paths]).fetchone()


def polars_recipe(urls):
    import polars as pl

    paths = [u.removeprefix("file://") for u in urls]
    frame = pl.scan_parquet(paths, missing_columns="insert", extra_columns="ignore")
    out = frame.select(pl.len(), pl.col("severity_number").sum()).collect()
    return out.row(0)


def pyarrow_recipe(urls):
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    paths = [u.removeprefix("file://") for u in urls]
    table = ds.dataset(paths, format="parquet").to_table(columns=["severity_number"])
    return table.num_rows, pc.sum(table.column(0)).as_py()


def datafusion_recipe(files):
    from datafusion import SessionContext, col

    ctx = SessionContext()
    # Only a sorted output declares its order: DataFusion trusts a declared order.
    order = [col("service.name").sort(), col("time_unix_nano").sort()]
    frames = [
        ctx.read_parquet(f["url"].removeprefix("file://"), file_sort_order=[order] if f["sorted"] else None)
        .select(col("severity_number"))
        for f in files
    ]
    out = reduce(lambda a, b: a.union(b), frames).to_pydict()["severity_number"]
    return len(out), sum(out)


def main():
    binary = sys.argv[1]
    store = tempfile.mkdtemp(prefix="ourios-live-set-")
    try:
        for i, hour in enumerate(HOURS):
            files = "6" if hour == HOURS[1] else "3"
            cli(binary, "generate", "--store", store, "--tenant", TENANT, "--hour", hour,
                "--files", files, "--rows", "1500", "--seed", str(i + 1))
        # A late file of hour 10 (its own rows, generated elsewhere) and a damaged one.
        cli(binary, "generate", "--store", store, "--tenant", "late", "--hour", HOURS[0],
            "--files", "1", "--rows", "700", "--seed", "99")
        late_src = os.path.join(hour_dir(store, "late", HOURS[0]), os.listdir(hour_dir(store, "late", HOURS[0]))[0])
        truth_files = []
        for hour in HOURS:
            d = hour_dir(store, TENANT, hour)
            truth_files += [os.path.join(d, n) for n in sorted(os.listdir(d))]
        truth_files.append(late_src)
        truth = count_and_sum(truth_files)
        with open(os.path.join(hour_dir(store, TENANT, HOURS[0]), "damaged.parquet"), "wb") as f:
            f.write(b"PAR1 a writer died here PAR1")
        with open(late_src, "rb") as f:
            late_bytes = f.read()
        shutil.rmtree(os.path.join(store, "data", "tenant=late"))

        report = json.loads(cli(binary, "compact", "--store", store, "--tenant", TENANT, "--hour", HOURS[0], "--json"))
        assert len(report["quarantined"]) == 1, report
        with open(os.path.join(hour_dir(store, TENANT, HOURS[0]), "late~1 x.parquet"), "wb") as f:
            f.write(late_bytes)
        report = json.loads(cli(binary, "compact", "--store", store, "--tenant", TENANT, "--hour", HOURS[1],
                                "--fan-out", "3", "--json"))
        assert len(report["outputs"]) > 1, report
        cli(binary, "compact", "--store", store, "--tenant", TENANT, "--hour", HOURS[2], "--json")
        cli(binary, "gc", "--store", store, "--tenant", TENANT, "--hour", HOURS[2], "--grace", "0s", "--json")
        collected = hour_dir(store, TENANT, HOURS[2])
        assert not os.path.exists(collected) or not os.listdir(collected), "hour 12's inputs were collected"

        window = ["--store", store, "--tenant", TENANT, "--from", HOURS[0], "--to", HOURS[-1]]
        urls = cli(binary, "files", *window, "--urls").splitlines()
        listed = json.loads(cli(binary, "files", *window, "--json"))
        assert [u["url"] for u in listed["urls"]] == urls, (listed, urls)
        query = json.loads(cli(binary, "query", "--store", store, "--tenant", TENANT,
                               "--from", "2026-11-29T10:00:00Z", "--to", "2026-11-29T14:00:00Z",
                               "--limit", "0", "--json"))
        assert query["stats"]["rows_matched"] == truth[0], (query["stats"], truth)

        results = {
            "duckdb": duckdb_recipe(urls),
            "polars": polars_recipe(urls),
            "pyarrow": pyarrow_recipe(urls),
            "datafusion": datafusion_recipe(listed["urls"]),
        }
        # The symlink manifests (what Athena and Trino read), rewritten as the planner does on
        # each ingest event: each byte-identical to `files --urls` for its hour.
        cli(binary, "symlinks", "--store", store, "--tenant", TENANT, "--from", HOURS[0], "--to", HOURS[-1])
        linked = []
        for hour in HOURS:
            day, hh = hour.split("T")
            y, m, d = day.split("-")
            path = os.path.join(store, "_compaction", "symlink", f"tenant={TENANT}", f"year={y}",
                                f"month={m}", f"day={d}", f"hour={hh}", "manifest")
            with open(path) as f:
                body = f.read()
            expected = cli(binary, "files", "--store", store, "--tenant", TENANT, "--hour", hour, "--urls")
            assert body == expected, (hour, body, expected)
            linked += body.splitlines()
        for name, recipe in [("duckdb", duckdb_recipe), ("polars", polars_recipe), ("pyarrow", pyarrow_recipe)]:
            results[f"{name} (symlink manifests)"] = recipe(linked)
        failed = {name: got for name, got in results.items() if tuple(got) != truth}
        if failed:
            sys.exit(f"the live set read by {sorted(failed)} gave {failed}, expected {truth} (rows, sum)")
        print(f"live set of {len(urls)} files over {len(HOURS)} hours in every state: DuckDB, Polars, "
              f"pyarrow and DataFusion read {truth[0]} rows from files --urls, DuckDB, Polars and "
              f"pyarrow from the symlink manifests, as query does, none twice")
    finally:
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()

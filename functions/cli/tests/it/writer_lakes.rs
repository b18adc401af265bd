//! The lakes of the usual writers (Vector, Fluent Bit, OpenTelemetry beside the collector's S3
//! exporter, Firehose), written with pyarrow in each writer's layout and schema, one store root
//! each (`tests/interop/writer_lakes.py`), swept by `backfill --run-local` with each lake's
//! settings: every row once, in the configured key's order, with `sorting_columns` declared
//! and the time column's type kept; queries by the key's first column and by a bloom column
//! match the same rows before and after, and read fewer row groups after.
//!
//! Needs Python with pyarrow (`$OURIOS_INTEROP_PYTHON`, else `python3`); without it the test
//! fails, naming what to install.

use crate::common::{interop_script, json, run_ok};
use serde_json::Value;

fn script(args: &[&str]) -> String {
    interop_script("writer_lakes.py", args, "pyarrow")
}

fn ok(args: &[String]) -> Value {
    json(&run_ok(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    ))
}

/// (rows matched, row groups scanned, row groups in all) of a `--where` query over the hour.
fn matched(lake: &Value, filter: &str) -> (u64, u64, u64) {
    matched_by(lake, "--where", filter)
}

/// [`matched`] of a query by `flag` (`--where` or `--service`) with `value`.
fn matched_by(lake: &Value, flag: &str, value: &str) -> (u64, u64, u64) {
    let store = lake["store"].as_str().expect("a store");
    let mut args: Vec<String> = ["query", "--store", store].map(String::from).to_vec();
    args.extend(flags(lake));
    args.extend(
        [
            flag,
            value,
            "--from",
            "2026-11-29T10:00:00Z",
            "--to",
            "2026-11-29T11:00:00Z",
            "--limit",
            "0",
            "--json",
        ]
        .map(String::from),
    );
    let stats = ok(&args)["stats"].clone();
    let number = |field: &str| {
        stats[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field}: {stats}"))
    };
    (
        number("rows_matched"),
        number("row_groups_scanned"),
        number("row_groups_total"),
    )
}

fn flags(lake: &Value) -> Vec<String> {
    (lake["flags"].as_array().expect("flags").iter())
        .map(|f| f.as_str().expect("a flag").to_string())
        .collect()
}

#[test]
fn writers_lakes_compact_in_their_keys_order_and_prune_by_their_keys() {
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().to_string_lossy().into_owned();
    let written = script(&["write", &root]);
    let lakes: Vec<Value> = written.lines().map(json_line).collect();
    assert_eq!(lakes.len(), 4, "{written}");
    for lake in &lakes {
        let name = lake["lake"].as_str().expect("a lake");
        let store = lake["store"].as_str().expect("a store");
        let filters = [
            lake["where_key"].as_str().expect("a key filter"),
            lake["where_bloom"].as_str().expect("a bloom filter"),
        ];
        let before: Vec<(u64, u64, u64)> = filters.iter().map(|f| matched(lake, f)).collect();

        let mut backfill: Vec<String> = ["backfill", "--store", store, "--run-local"]
            .map(String::from)
            .to_vec();
        backfill.extend(flags(lake));
        backfill.extend(
            [
                "--from",
                "2026-11-29T10",
                "--to",
                "2026-11-29T10",
                "--max-rows-per-row-group",
                "100",
                "--json",
            ]
            .map(String::from),
        );
        let swept = ok(&backfill);
        let partitions = swept["partitions"].as_array().expect("partitions");
        assert_eq!(partitions.len(), 1, "{name}: {swept}");
        assert_eq!(partitions[0]["tenant"], Value::Null, "{name}: {swept}");

        let mut files: Vec<String> = ["files", "--store", store, "--hour", "2026-11-29T10"]
            .map(String::from)
            .to_vec();
        files.extend(flags(lake));
        files.push("--json".into());
        let files = ok(&files);
        let live: Vec<&str> = (files["live"].as_array().expect("live files").iter())
            .map(|k| k.as_str().expect("a key"))
            .collect();
        assert!(
            !live.is_empty() && live.iter().all(|k| k.starts_with("compacted/")),
            "{name}: {files}"
        );
        let mut check = vec!["check", root.as_str(), name];
        check.extend(live.iter().copied());
        let checked = json_line(script(&check).trim());
        assert_eq!(checked["rows"], lake["rows"], "{name}: {checked}");

        // `--service` filters the key's first column, top-level or inside a struct, as
        // `--where` does.
        let (column, value) = filters[0].split_once('=').expect("column=value");
        assert_eq!(
            matched_by(lake, "--service", value).0,
            matched(lake, filters[0]).0,
            "{name}: --service {value} filters {column}"
        );
        for (filter, before) in filters.iter().zip(&before) {
            let after = matched(lake, filter);
            assert!(before.0 > 0, "{name}: {filter} matches rows");
            assert_eq!(after.0, before.0, "{name}: {filter}: the same rows after");
            assert!(
                after.1 < before.1,
                "{name}: {filter}: fewer row groups read after ({} of {}) than before ({} of {})",
                after.1,
                after.2,
                before.1,
                before.2
            );
            println!(
                "{name} --where {filter}: {} rows; row groups read {} of {} before, {} of {} after",
                after.0, before.1, before.2, after.1, after.2
            );
        }
    }
}

fn json_line(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

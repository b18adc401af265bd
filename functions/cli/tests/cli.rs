//! The CLI contract, run as a child process the way outside tools call it: flags, the JSON
//! report, exit codes, the block layout flags, and the peak memory of real-sized partitions
//! under a 64 MiB budget (plain and in blocks).

mod common;

use std::path::Path;
use std::process::Output;

use common::{json, run};
use serde_json::Value;

const HOUR: &str = "2026-11-29T10";
const MIB: u64 = 1 << 20;

/// Runs the CLI with `args`, which must succeed (stderr in the panic message otherwise).
fn run_ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn generate(store: &Path, tenant: &str, extra: &[&str]) {
    let store = store.to_string_lossy();
    let mut args = vec![
        "generate", "--store", &store, "--tenant", tenant, "--hour", HOUR,
    ];
    args.extend_from_slice(extra);
    run_ok(&args);
}

fn compact(store: &Path, tenant: &str, extra: &[&str]) -> (Output, Value) {
    let store = store.to_string_lossy();
    let mut args = vec![
        "compact", "--store", &store, "--tenant", tenant, "--hour", HOUR, "--json",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    let report = json(&out);
    (out, report)
}

#[test]
fn compact_json_report_follows_the_contract() {
    let dir = tempfile::tempdir().expect("dir");
    let scratch = tempfile::tempdir().expect("scratch");
    generate(
        dir.path(),
        "acme",
        &["--files", "6", "--rows", "2000", "--services", "5"],
    );
    let scratch_arg = scratch.path().to_string_lossy().to_string();
    let (out, report) = compact(
        dir.path(),
        "acme",
        &[
            "--memory-budget",
            "256KiB",
            "--scratch",
            &scratch_arg,
            "--rg-bytes",
            "1MiB",
        ],
    );
    assert!(out.status.success());
    assert_eq!(
        report["partition"],
        "tenant=acme/year=2026/month=11/day=29/hour=10"
    );
    assert_eq!(report["status"], "compacted");
    assert_eq!(report["inputs"]["files"], 6);
    assert_eq!(report["inputs"]["rows"], 12_000);
    assert!(report["inputs"]["bytes"].as_u64().expect("bytes") > 0);
    let output = &report["output"];
    let key = output["key"].as_str().expect("output key");
    assert!(
        key.starts_with("compacted/tenant=acme/year=2026/month=11/day=29/hour=10/"),
        "{key}"
    );
    assert!(
        dir.path().join(key).is_file(),
        "keys are relative to the store root"
    );
    assert_eq!(output["rows"], 12_000);
    assert!(output["bytes"].as_u64().expect("bytes") > 0);
    assert!(output["row_groups"].as_u64().expect("row groups") >= 1);
    assert_eq!(report["flush_threshold_bytes"], MIB);
    assert_eq!(report["budget_bytes"], 256 * 1024);
    assert!(
        report["runs_spilled"].as_u64().expect("runs") > 1,
        "a 256 KiB budget spills"
    );
    assert!(report["merge_passes"].as_u64().expect("passes") >= 1);
    assert!(report["spill_bytes"].as_u64().expect("spill") > 0);
    assert!(report["peak_decoded_bytes"].as_u64().expect("peak") > 0);
    assert!(report["peak_rss_bytes"].as_u64().expect("rss") > 0);
    assert!(report["duration_ms"].is_u64());
    assert_eq!(report["quarantined"], Value::Array(vec![]));
    let leftovers = std::fs::read_dir(scratch.path().join("ourios-compaction"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leftovers, 0, "scratch is cleaned");

    let store = dir.path().to_string_lossy().to_string();
    let files = run(&[
        "files", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--json",
    ]);
    assert!(files.status.success());
    assert_eq!(json(&files)["live"], serde_json::json!([key]));

    let (again_out, again) = compact(dir.path(), "acme", &[]);
    assert!(again_out.status.success());
    assert_eq!(again["status"], "noop");
    assert_eq!(again["output"], Value::Null);

    let inspect = run(&["inspect", &dir.path().join(key).to_string_lossy(), "--json"]);
    assert!(inspect.status.success());
    let summary = json(&inspect);
    assert_eq!(summary["rows"], 12_000);
    assert_eq!(
        summary["sorting_columns"][0]
            .as_str()
            .map(|s| s.starts_with("service.name ASC")),
        Some(true)
    );
}

#[test]
fn file_urls_and_bad_arguments() {
    let dir = tempfile::tempdir().expect("dir");
    generate(dir.path(), "acme", &["--files", "2", "--rows", "100"]);
    let url = format!("file://{}", dir.path().display());
    let out = run(&[
        "compact", "--store", &url, "--tenant", "acme", "--hour", HOUR, "--json",
    ]);
    assert!(out.status.success());
    assert_eq!(json(&out)["status"], "compacted");

    for args in [
        vec![
            "compact",
            "--store",
            &url,
            "--tenant",
            "acme",
            "--hour",
            "2026-11-29T24",
        ],
        vec![
            "compact", "--store", &url, "--tenant", "a/b", "--hour", HOUR,
        ],
        vec![
            "compact",
            "--store",
            &url,
            "--tenant",
            "acme",
            "--hour",
            HOUR,
            "--memory-budget",
            "lots",
        ],
        vec![
            "compact",
            "--store",
            "gs://bucket",
            "--tenant",
            "acme",
            "--hour",
            HOUR,
        ],
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_bad_input_gives_partial_with_exit_zero() {
    let dir = tempfile::tempdir().expect("dir");
    generate(dir.path(), "acme", &["--files", "2", "--rows", "100"]);
    let bad = dir
        .path()
        .join("data/tenant=acme/year=2026/month=11/day=29/hour=10/zz-corrupt.parquet");
    std::fs::write(&bad, b"PAR1 truncated garbage").expect("write");
    let (out, report) = compact(dir.path(), "acme", &[]);
    assert!(out.status.success());
    assert_eq!(report["status"], "partial");
    let q = &report["quarantined"][0];
    assert_eq!(
        q["file"],
        "data/tenant=acme/year=2026/month=11/day=29/hour=10/zz-corrupt.parquet"
    );
    assert!(q["reason"].as_str().expect("reason").contains("Parquet"));
    assert_eq!(
        std::fs::read(&bad).expect("still there"),
        b"PAR1 truncated garbage"
    );
}

#[test]
fn blocks_and_a_row_cap_shape_the_output() {
    let dir = tempfile::tempdir().expect("dir");
    generate(
        dir.path(),
        "acme",
        &["--files", "6", "--rows", "2000", "--services", "5"],
    );
    for bad in [
        ["--row-groups-per-block", "0"],
        ["--max-rows-per-row-group", "0"],
        ["--row-groups-per-block", "many"],
    ] {
        let store = dir.path().to_string_lossy().to_string();
        let mut args = vec![
            "compact", "--store", &store, "--tenant", "acme", "--hour", HOUR,
        ];
        args.extend_from_slice(&bad);
        let out = run(&args);
        assert!(!out.status.success(), "{bad:?} must fail");
    }
    let (out, report) = compact(
        dir.path(),
        "acme",
        &[
            "--rg-bytes",
            "1MiB",
            "--row-groups-per-block",
            "4",
            "--max-rows-per-row-group",
            "500",
        ],
    );
    assert!(out.status.success(), "{report}");
    assert_eq!(report["status"], "compacted");
    let output = &report["output"];
    let key = output["key"].as_str().expect("key");
    let file = std::fs::File::open(dir.path().join(key)).expect("output file");
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).expect("footer");
    let meta = parquet::file::reader::FileReader::metadata(&reader);
    let groups = meta.num_row_groups();
    assert_eq!(
        output["row_groups"], groups as u64,
        "the report counts row groups"
    );
    assert!(groups >= 12_000 / 500, "{groups} row groups");
    assert!(meta.row_groups().iter().all(|rg| rg.num_rows() <= 500));
    let mut position = 4;
    for block in (0..groups).collect::<Vec<_>>().chunks(4) {
        for column in 0..meta.file_metadata().schema_descr().num_columns() {
            for &rg in block {
                let (start, length) = meta.row_group(rg).column(column).byte_range();
                assert_eq!(
                    start, position,
                    "rg {rg} column {column} continues its block"
                );
                position = start + length;
            }
        }
    }
}

/// Peak RSS of the child, from its own report, for the stress shapes at a 64 MiB budget.
fn assert_peak_rss_under(store: &Path, tenant: &str, bound: u64) -> Value {
    assert_peak_rss_under_with(store, tenant, bound, &[])
}

/// [`assert_peak_rss_under`] with extra compact flags.
fn assert_peak_rss_under_with(store: &Path, tenant: &str, bound: u64, extra: &[&str]) -> Value {
    let mut args = vec!["--memory-budget", "64MiB"];
    args.extend_from_slice(extra);
    let (out, report) = compact(store, tenant, &args);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["status"], "compacted", "{report}");
    let rss = report["peak_rss_bytes"].as_u64().expect("rss");
    assert!(
        rss > 0 && rss < bound,
        "{tenant}: peak RSS {} MiB, bound {} MiB",
        rss / MIB,
        bound / MIB
    );
    let decoded = report["peak_decoded_bytes"].as_u64().expect("decoded");
    assert!(
        decoded < 64 * MIB + 16 * MIB,
        "{tenant}: peak decoded {decoded}"
    );
    report
}

#[test]
fn stress_shapes_stay_under_256_mib_with_a_64_mib_budget() {
    let dir = tempfile::tempdir().expect("dir");
    // One huge input file (a single row group of about 2 million rows).
    generate(
        dir.path(),
        "huge",
        &["--files", "1", "--rows", "2000000", "--services", "40"],
    );
    // Many small inputs.
    generate(
        dir.path(),
        "small",
        &["--files", "1500", "--rows", "300", "--services", "40"],
    );
    // Wide rows: 40 attributes of 250 bytes.
    generate(
        dir.path(),
        "wide",
        &["--files", "20", "--rows", "3000", "--wide"],
    );
    // 200 MB of wide rows in one file: one reader holds a page and a dictionary for each of
    // its ~50 columns, and the writer as many pages and compressors, besides the budget.
    generate(
        dir.path(),
        "widefile",
        &["--files", "1", "--rows", "175000", "--wide"],
    );
    for tenant in ["huge", "small", "wide", "widefile"] {
        let report = assert_peak_rss_under(dir.path(), tenant, 256 * MIB);
        assert!(
            report["runs_spilled"].as_u64().expect("runs") > 1,
            "{tenant} must spill: {report}"
        );
    }
    // The huge file again, its row groups grouped in blocks of 8: a block of the 8 MiB-class
    // row groups outgrows the in-memory staging and goes to scratch.
    generate(
        dir.path(),
        "huge-blocks",
        &["--files", "1", "--rows", "2000000", "--services", "40"],
    );
    let report = assert_peak_rss_under_with(
        dir.path(),
        "huge-blocks",
        256 * MIB,
        &["--row-groups-per-block", "8"],
    );
    assert!(report["output"]["row_groups"].as_u64().expect("row groups") > 8);
}

#[test]
fn bench_ranges_measures_each_layout_on_the_same_rows() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().join("ranges");
    let out = run_ok(&[
        "bench-ranges",
        "--store",
        &store.to_string_lossy(),
        "--files",
        "4",
        "--rows",
        "20000",
        "--rg-bytes",
        "256KiB",
        "--blocks",
        "1,4",
        "--repeat",
        "1",
        "--json",
    ]);
    let result = json(&out);
    assert_eq!(result["input_rows"], 80_000);
    let layouts = result["layouts"].as_array().expect("layouts");
    assert_eq!(layouts.len(), 2);
    let (plain, blocks) = (&layouts[0], &layouts[1]);
    assert_eq!(plain["row_groups_per_block"], 1);
    assert_eq!(blocks["row_groups_per_block"], 4);
    assert!(plain["row_groups"].as_u64().expect("row groups") >= 8);
    for query in [
        "window_rows",
        "window_count",
        "window_every_service_rows",
        "scan_two_columns",
    ] {
        let (a, b) = (&plain["queries"][query], &blocks["queries"][query]);
        assert_eq!(a["rows"], b["rows"], "{query}");
        assert!(a["requests"].as_u64().expect("requests") > 0, "{query}");
    }
    assert_eq!(plain["queries"]["scan_two_columns"]["rows"], 80_000);
    let scan = |l: &Value| l["queries"]["scan_two_columns"]["requests"].as_u64();
    assert!(scan(blocks) < scan(plain), "{result}");
    assert!(!store.exists(), "the bench store is removed");
}

#[test]
fn bench_compares_the_sorted_compaction_with_a_plain_rewrite_of_the_same_rows() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().join("bench");
    let out = run_ok(&[
        "bench",
        "--store",
        &store.to_string_lossy(),
        "--files",
        "6",
        "--rows",
        "5000",
        "--memory-budget",
        "2MiB",
        "--repeat",
        "3",
        "--json",
    ]);
    let result = json(&out);
    assert_eq!(result["input_rows"], 30_000);
    assert!(
        result["runs_spilled"].as_u64().expect("runs") > 1,
        "{result}"
    );
    let ms = |k: &str| result[k].as_u64().unwrap_or(0);
    assert!(
        ms("plain_rewrite_ms") > 0 && ms("sorted_compaction_ms") > 0,
        "{result}"
    );
    let ratio = result["ratio"].as_f64().expect("ratio");
    let expected = ms("sorted_compaction_ms") as f64 / ms("plain_rewrite_ms") as f64;
    assert!((ratio - expected).abs() < 0.01, "{result}");
    assert!(result["paired_ratio"].as_f64().expect("paired ratio") > 0.0);
    let rows = |side: &str| result["query"][side]["rows_matched"].as_u64();
    assert_eq!(rows("uncompacted"), rows("compacted"), "{result}");
    assert!(!store.exists(), "the bench store is removed");
}

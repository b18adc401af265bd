//! The CLI contract, run as a child process the way outside tools call it: flags, the JSON
//! report, exit codes, the block layout flags, and the peak memory of real-sized partitions
//! under a 64 MiB budget (plain and in blocks).

use std::path::Path;
use std::process::Output;

use crate::common::{compact_json, json, run, run_ok, run_with_env};
use serde_json::Value;

const HOUR: &str = "2026-11-29T10";
const MIB: u64 = 1 << 20;

fn generate(store: &Path, tenant: &str, extra: &[&str]) {
    let store = store.to_string_lossy();
    let mut args = vec![
        "generate", "--store", &store, "--tenant", tenant, "--hour", HOUR,
    ];
    args.extend_from_slice(extra);
    run_ok(&args);
}

/// Counts tenant acme's rows of the test hour (`query --limit 0 --json`).
fn query_hour(store: &str) -> Output {
    run(&[
        "query",
        "--store",
        store,
        "--tenant",
        "acme",
        "--from",
        "2026-11-29T10:00:00Z",
        "--to",
        "2026-11-29T11:00:00Z",
        "--limit",
        "0",
        "--json",
    ])
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
    assert_eq!(report["outputs"], serde_json::json!([output]));
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
    assert_eq!(again["outputs"], Value::Array(vec![]));

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
fn fan_out_writes_key_ranges_and_reports_their_shape() {
    let dir = tempfile::tempdir().expect("dir");
    let scratch = tempfile::tempdir().expect("scratch");
    generate(
        dir.path(),
        "acme",
        &["--files", "6", "--rows", "2000", "--services", "5"],
    );
    let store = dir.path().to_string_lossy().to_string();
    for bad in [
        ["--fan-out", "0"],
        ["--fan-out", "many"],
        ["--workers", "0"],
    ] {
        let mut args = vec![
            "compact", "--store", &store, "--tenant", "acme", "--hour", HOUR,
        ];
        args.extend_from_slice(&bad);
        let out = run(&args);
        assert!(!out.status.success(), "{bad:?} must fail");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(bad[0]),
            "the error names {}",
            bad[0]
        );
    }
    let scratch_arg = scratch.path().to_string_lossy().to_string();
    let (out, report) = compact(
        dir.path(),
        "acme",
        &[
            "--fan-out",
            "3",
            "--workers",
            "2",
            "--memory-budget",
            "256KiB",
            "--rg-bytes",
            "64KiB",
            "--scratch",
            &scratch_arg,
        ],
    );
    assert!(out.status.success(), "{report}");
    assert_eq!(report["status"], "compacted");
    assert_eq!(
        report["fan_out"],
        serde_json::json!({"groups": 3, "ranges": 3})
    );
    let outputs = report["outputs"].as_array().expect("outputs");
    assert!(outputs.len() >= 2, "{report}");
    assert_eq!(
        report["output"],
        Value::Null,
        "several outputs: no single output"
    );
    let rows: u64 = outputs.iter().filter_map(|o| o["rows"].as_u64()).sum();
    assert_eq!(rows, 12_000);
    let keys: Vec<&str> = outputs.iter().filter_map(|o| o["key"].as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "outputs in key order");
    for output in outputs {
        let key = output["key"].as_str().expect("key");
        let inspect = run_ok(&["inspect", &dir.path().join(key).to_string_lossy(), "--json"]);
        let summary = json(&inspect);
        assert_eq!(summary["rows"], output["rows"]);
        let row_groups = summary["row_groups"].as_array().map(|a| a.len() as u64);
        assert_eq!(row_groups, output["row_groups"].as_u64());
        assert!(summary["sorting_columns"][0].is_string(), "{summary}");
    }
    let files = run_ok(&[
        "files", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--json",
    ]);
    assert_eq!(json(&files)["live"], serde_json::json!(keys));
    let query = query_hour(&store);
    assert!(query.status.success());
    assert_eq!(json(&query)["stats"]["rows_matched"], 12_000);
    assert_eq!(json(&query)["stats"]["files"], keys.len());

    // The ranges are final: a rerun is a noop.
    let (_, again) = compact(dir.path(), "acme", &["--fan-out", "3"]);
    assert_eq!(again["status"], "noop", "{again}");
    assert_eq!(again["fan_out"], Value::Null);
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

/// `release` puts a quarantined file back into the live set (JSON and exit code by contract);
/// a file still bad is quarantined again by the next compaction, which keeps the output it
/// has; a key that is not quarantined is refused by name.
#[test]
fn release_returns_a_quarantined_file_to_the_live_set() {
    let dir = tempfile::tempdir().expect("dir");
    generate(dir.path(), "acme", &["--files", "2", "--rows", "100"]);
    let bad = "data/tenant=acme/year=2026/month=11/day=29/hour=10/zz-corrupt.parquet";
    std::fs::write(dir.path().join(bad), b"PAR1 truncated garbage").expect("write");
    let (_, first) = compact(dir.path(), "acme", &[]);
    assert_eq!(first["status"], "partial");
    let output = first["output"]["key"].as_str().expect("output").to_string();
    let store = dir.path().to_string_lossy().to_string();
    let partition = ["--store", &store, "--tenant", "acme", "--hour", HOUR];
    let release = |extra: &[&str]| {
        let mut args = vec!["release"];
        args.extend_from_slice(&partition);
        args.extend_from_slice(extra);
        run(&args)
    };

    // A query says rows are hidden in quarantine, in its statistics and on stderr.
    let query = || query_hour(&store);
    let hidden = query();
    assert_eq!(json(&hidden)["stats"]["quarantined_files"], 1);
    assert_eq!(json(&hidden)["stats"]["unaddressable_files"], 0);
    let stderr = String::from_utf8_lossy(&hidden.stderr);
    assert!(
        stderr.contains("1 file(s)") && stderr.contains("quarantined"),
        "{stderr}"
    );

    let live = "data/tenant=acme/year=2026/month=11/day=29/hour=10/nothing.parquet";
    let refused = release(&["--key", live, "--json"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(live) && stderr.contains("not a quarantined"),
        "{stderr}"
    );

    let released = release(&["--key", bad, "--json"]);
    assert!(released.status.success());
    let released = json(&released);
    assert_eq!(
        released["partition"],
        "tenant=acme/year=2026/month=11/day=29/hour=10"
    );
    assert_eq!(released["released"][0]["key"], bad);
    assert!(released["released"][0]["reason"].is_string());
    assert_eq!(released["manifest_version"], 2);
    let mut files_args = vec!["files"];
    files_args.extend_from_slice(&partition);
    files_args.push("--json");
    let files = json(&run_ok(&files_args));
    assert_eq!(files["live"], serde_json::json!([output, bad]));
    assert_eq!(files["quarantined"], serde_json::json!([]));
    // Released while still bad, it is live: a reader meets it until a compaction quarantines
    // it again.
    let meets_it = query();
    assert!(!meets_it.status.success());
    assert!(String::from_utf8_lossy(&meets_it.stderr).contains(bad));

    let (_, again) = compact(dir.path(), "acme", &[]);
    assert_eq!(again["status"], "partial", "{again}");
    assert_eq!(again["quarantined"][0]["file"], bad);
    assert_eq!(again["output"], Value::Null, "the output is kept: {again}");
    let files = json(&run_ok(&files_args));
    assert_eq!(files["live"], serde_json::json!([output]));
    let hidden_again = query();
    assert!(hidden_again.status.success());
    assert_eq!(json(&hidden_again)["stats"]["quarantined_files"], 1);

    let text = release(&[]);
    assert!(text.status.success());
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains(&format!("released: {bad}")), "{stdout}");
    let nothing = json(&release(&["--json"]));
    assert_eq!(nothing["released"], serde_json::json!([]));
    assert_eq!(nothing["manifest_version"], 4, "no version written");
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
    let spilled = |tenant: &str, report: &Value| {
        assert!(
            report["runs_spilled"].as_u64().expect("runs") > 1,
            "{tenant} must spill: {report}"
        );
    };
    // Two shapes at a time, each in its own process (its own peak RSS): the two huge inputs
    // beside the three others.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // One huge input file (a single row group of about 2 million rows).
            generate(
                dir.path(),
                "huge",
                &["--files", "1", "--rows", "2000000", "--services", "40"],
            );
            spilled(
                "huge",
                &assert_peak_rss_under(dir.path(), "huge", 256 * MIB),
            );
            // The huge file again, its row groups grouped in blocks of 8: a block of the 8
            // MiB-class row groups outgrows the in-memory staging and goes to scratch.
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
        });
        scope.spawn(|| {
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
            // 200 MB of wide rows in one file: one reader holds a page and a dictionary for
            // each of its ~50 columns, and the writer as many pages and compressors, besides
            // the budget.
            generate(
                dir.path(),
                "widefile",
                &["--files", "1", "--rows", "175000", "--wide"],
            );
            for tenant in ["small", "wide", "widefile"] {
                spilled(
                    tenant,
                    &assert_peak_rss_under(dir.path(), tenant, 256 * MIB),
                );
            }
        });
    });
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

/// Checks a report's `cost` adds up from its parts at `prices` (dollars per GB-second, per
/// invocation, per PUT or LIST, per GET) for a function of `memory_mb`.
fn assert_cost_adds_up(report: &Value, memory_mb: f64, prices: [f64; 4]) {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12);
    let cost = &report["cost"];
    let f = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("a number: {report}"));
    let duration_ms = f(&report["duration_ms"]);
    let gb_seconds = f(&cost["lambda_gb_seconds"]);
    assert!(
        close(gb_seconds, duration_ms / 1000.0 * memory_mb / 1024.0),
        "{report}"
    );
    let requests = &cost["requests"];
    let (get, put, list) = (
        f(&requests["get"]),
        f(&requests["put"]),
        f(&requests["list"]),
    );
    assert!(requests["delete"].is_u64(), "{report}");
    let [gb_second, invocation, put_list, get_price] = prices;
    let usd = f(&cost["usd"]);
    let expected = gb_seconds * gb_second + invocation + (put + list) * put_list + get * get_price;
    assert!(close(usd, expected), "{usd} vs {expected}: {report}");
    let input_gb = f(&report["inputs"]["bytes"]) / 1e9;
    let per_gb = f(&cost["usd_per_gb"]);
    if input_gb > 0.0 {
        assert!(close(per_gb, usd / input_gb), "{report}");
    } else {
        assert_eq!(per_gb, 0.0, "{report}");
    }
}

/// One compaction whose cost is checked: its flags, environment, and what they mean.
struct PricedCase {
    tenant: &'static str,
    flags: &'static [&'static str],
    memory_mb: f64,
    env: &'static [(&'static str, &'static str)],
    /// Dollars per GB-second, per invocation, per PUT or LIST, per GET.
    prices: [f64; 4],
}

const PUBLISHED_PRICES: [f64; 4] = [0.000_013_333_4, 0.2e-6, 0.005e-3, 0.0004e-3];

#[test]
fn compact_json_report_carries_cpu_time_and_cost() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().to_string();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    // The default function (1,769 MB), twice that, and other prices.
    let cases = [
        PricedCase {
            tenant: "acme",
            flags: &[],
            memory_mb: 1769.0,
            env: &[],
            prices: PUBLISHED_PRICES,
        },
        PricedCase {
            tenant: "globex",
            flags: &["--function-memory", "3538"],
            memory_mb: 3538.0,
            env: &[],
            prices: PUBLISHED_PRICES,
        },
        PricedCase {
            tenant: "initech",
            flags: &[],
            memory_mb: 1769.0,
            env: &[
                ("OURIOS_PRICE_LAMBDA_GB_SECOND", "0.0000166667"),
                ("OURIOS_PRICE_S3_GET_REQUEST", "0"),
            ],
            prices: [0.000_016_666_7, 0.2e-6, 0.005e-3, 0.0],
        },
    ];
    for case in cases {
        let tenant = case.tenant;
        generate(
            dir.path(),
            tenant,
            &["--files", "6", "--rows", "2000", "--services", "5"],
        );
        let mut args = compact_json(&store, tenant, HOUR, "256KiB");
        args.extend_from_slice(case.flags);
        let out = run_with_env(&args, case.env);
        let report = json(&out);
        assert_eq!(report["status"], "compacted", "{report}");
        let requests = &report["cost"]["requests"];
        // Each input is read once (in place here, one GET on S3); the output and the
        // manifest are written; the partition is listed.
        assert!(requests["get"].as_u64().expect("gets") >= 6, "{report}");
        assert!(requests["put"].as_u64().expect("puts") >= 2, "{report}");
        assert!(requests["list"].as_u64().expect("lists") >= 1, "{report}");
        let cpu_ms = report["cpu_ms"].as_u64().expect("cpu_ms");
        let duration_ms = report["duration_ms"].as_u64().expect("duration");
        assert!(cpu_ms > 0, "sorting 12,000 rows takes CPU: {report}");
        // No process spends more CPU than its wall time on every core (1 ms per clock read).
        assert!(cpu_ms <= (duration_ms + 2) * cores, "{report}");
        assert_cost_adds_up(&report, case.memory_mb, case.prices);
    }

    // A noop still reads the state, and has no input to spread its cost over.
    let out = run_with_env(
        &[
            "compact", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--json",
        ],
        &[],
    );
    let again = json(&out);
    assert_eq!(again["status"], "noop");
    assert!(again["cost"]["requests"]["list"].as_u64().expect("lists") >= 1);
    assert_cost_adds_up(&again, 1769.0, PUBLISHED_PRICES);

    let bad = run_with_env(
        &[
            "compact", "--store", &store, "--tenant", "acme", "--hour", HOUR,
        ],
        &[("OURIOS_PRICE_S3_GET_REQUEST", "-1")],
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("OURIOS_PRICE_S3_GET_REQUEST"));
    let zero = run(&[
        "compact",
        "--store",
        &store,
        "--tenant",
        "acme",
        "--hour",
        HOUR,
        "--function-memory",
        "0",
    ]);
    assert!(!zero.status.success());
}

#[test]
fn bench_prices_both_sides_next_to_s3_tables() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().join("bench");
    let out = run_ok(&[
        "bench",
        "--store",
        &store.to_string_lossy(),
        "--files",
        "4",
        "--rows",
        "3000",
        "--memory-budget",
        "1MiB",
        "--repeat",
        "1",
        "--function-memory",
        "3538",
        "--json",
    ]);
    let result = json(&out);
    let cost = &result["cost"];
    assert_eq!(cost["function_memory_mb"], 3538, "{result}");
    let f = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("a number: {result}"));
    let input_gb = f(&result["input_bytes"]) / 1e9;
    // S3 Tables: $0.01 (sort) or $0.005 (binpack) per GB and $0.002 per 1,000 objects.
    let per_object = 4.0 / 1000.0 * 0.002 / input_gb;
    assert!((f(&cost["s3_tables_sort_usd_per_gb"]) - (0.01 + per_object)).abs() < 1e-9);
    assert!((f(&cost["s3_tables_binpack_usd_per_gb"]) - (0.005 + per_object)).abs() < 1e-9);
    for (side, wall, cpu) in [
        (
            "sorted_compaction",
            "sorted_compaction_ms",
            "sorted_compaction_cpu_ms",
        ),
        ("plain_rewrite", "plain_rewrite_ms", "plain_rewrite_cpu_ms"),
    ] {
        let priced = &cost[side];
        // Billed for the wall time, or the CPU time spread over the function's two vCPUs
        // when that is longer.
        let billed = f(&priced["duration_ms"]);
        let floor = f(&result[wall]).max((f(&result[cpu]) / 2.0).ceil());
        assert!((billed - floor).abs() <= 1.0, "{side}: {result}");
        assert!(
            (f(&priced["lambda_gb_seconds"]) - billed / 1000.0 * 3538.0 / 1024.0).abs() < 1e-9,
            "{side}: {result}"
        );
        assert!(
            priced["requests"]["get"].as_u64().expect("gets") >= 4,
            "{result}"
        );
        assert!(
            priced["requests"]["put"].as_u64().expect("puts") >= 1,
            "{result}"
        );
        let usd = f(&priced["usd"]);
        assert!(
            (f(&priced["usd_per_gb"]) - usd / input_gb).abs() <= 1e-9 * usd / input_gb,
            "{result}"
        );
    }
    let times = f(&cost["s3_tables_sort_per_sorted_compaction"]);
    let expected =
        f(&cost["s3_tables_sort_usd_per_gb"]) / f(&cost["sorted_compaction"]["usd_per_gb"]);
    assert!((times - expected).abs() <= 1e-9 * expected, "{result}");
}

/// `compact` applies the late-file policy when asked (a flag or its variable): a late file
/// that waits is only checked, and stays live; without the policy, it is merged at once.
#[test]
fn compact_applies_the_late_file_policy_only_when_asked() {
    let dir = tempfile::tempdir().expect("dir");
    generate(dir.path(), "acme", &["--files", "4", "--rows", "2000"]);
    let (_, first) = compact(dir.path(), "acme", &[]);
    assert_eq!(first["status"], "compacted", "{first}");
    // A late file: the hour closed long ago, and it is a fraction of the hour's bytes.
    generate(
        dir.path(),
        "acme",
        &["--files", "1", "--rows", "50", "--seed", "99"],
    );

    let (out, waits) = compact(dir.path(), "acme", &["--late-wait", "1h"]);
    assert_eq!(waits["status"], "noop", "{waits}");
    assert_eq!(waits["late_check"]["checked"], 1, "{waits}");
    assert_eq!(waits["late_check"]["waiting"], 1, "{waits}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("late files: 1 late file(s)"), "{stderr}");
    let store = dir.path().to_string_lossy().to_string();
    let files_args = [
        "files", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--json",
    ];
    let live = json(&run_ok(&files_args))["live"].as_array().map(Vec::len);
    assert_eq!(
        live,
        Some(2),
        "the output and the late file, live while it waits"
    );

    // The variable alone applies it too; checked once, the late file is not checked again.
    let store_arg = dir.path().to_string_lossy().to_string();
    let args = [
        "compact", "--store", &store_arg, "--tenant", "acme", "--hour", HOUR, "--json",
    ];
    let again = json(&run_with_env(&args, &[("OURIOS_LATE_SHARE", "90%")]));
    assert_eq!(again["status"], "noop", "{again}");
    assert!(
        again.get("late_check").is_none(),
        "nothing left to check: {again}"
    );

    // A share the late file reaches merges it.
    let (_, merged) = compact(dir.path(), "acme", &["--late-share", "0.001"]);
    assert_eq!(merged["status"], "compacted", "{merged}");
    assert_eq!(merged["inputs"]["files"], 2, "{merged}");
}

/// `files --urls` and `files --json` over a range of hours: every live file once (the output, a
/// late file beside it), as a `file://` URL with the key verbatim, with its bytes and whether it
/// is a sorted output; retired inputs (still on disk within the grace) and quarantined files
/// are not live. A range without `--tenant` covers every tenant.
#[test]
fn files_lists_the_live_urls_of_a_range_of_hours() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().to_string();
    generate(dir.path(), "acme", &["--files", "3", "--rows", "500"]);
    run_ok(&[
        "generate",
        "--store",
        &store,
        "--tenant",
        "beta",
        "--hour",
        "2026-11-29T11",
        "--files",
        "2",
        "--rows",
        "100",
    ]);
    let acme = dir
        .path()
        .join("data/tenant=acme/year=2026/month=11/day=29/hour=10");
    std::fs::write(acme.join("bad.parquet"), b"PAR1 not parquet PAR1").expect("bad");
    let (out, report) = compact(dir.path(), "acme", &[]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["quarantined"].as_array().map(Vec::len), Some(1));
    let output = report["output"]["key"]
        .as_str()
        .expect("output")
        .to_string();
    // A late file beside the output, its name needing no escape in a key.
    let first_input = std::fs::read_dir(&acme)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n != "bad.parquet"))
        .expect("an input");
    std::fs::copy(&first_input, acme.join("late~1 x.parquet")).expect("late file");

    let urls = run_ok(&[
        "files", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--urls",
    ]);
    let root = std::fs::canonicalize(dir.path()).expect("root");
    let listed: Vec<String> = String::from_utf8_lossy(&urls.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let late = "data/tenant=acme/year=2026/month=11/day=29/hour=10/late~1 x.parquet";
    let expected: Vec<String> = [&output, late]
        .iter()
        .map(|key| format!("file://{}/{key}", root.display()))
        .collect();
    assert_eq!(listed, expected);

    let range = run_ok(&[
        "files",
        "--store",
        &store,
        "--from",
        HOUR,
        "--to",
        "2026-11-29T11",
        "--json",
    ]);
    let range = json(&range);
    let partitions: Vec<(String, String, u64)> = (range["partitions"].as_array().expect("list"))
        .iter()
        .map(|p| {
            let field = |f: &str| p[f].as_str().unwrap_or_default().to_string();
            (
                field("tenant"),
                field("hour"),
                p["live"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        partitions,
        [
            ("acme".to_string(), HOUR.to_string(), 2),
            ("beta".to_string(), "2026-11-29T11".to_string(), 2)
        ]
    );
    let urls = range["urls"].as_array().expect("urls");
    let live = range["live"].as_array().expect("live");
    assert_eq!(urls.len(), 4, "{range}");
    assert_eq!(live.len(), 4);
    for (url, key) in urls.iter().zip(live) {
        let key = key.as_str().expect("a key");
        let path = root.join(key);
        assert_eq!(url["url"], format!("file://{}", path.display()));
        let bytes = std::fs::metadata(&path).expect("a live file exists").len();
        assert_eq!(url["bytes"], bytes, "{key}");
        assert_eq!(url["sorted"], key.starts_with("compacted/"), "{key}");
    }
    assert_eq!(range["quarantined"].as_array().map(Vec::len), Some(1));
    assert!(range.get("manifest_version").is_none());
    // One partition keeps its shape, with the URLs beside the keys.
    let one = json(&run_ok(&[
        "files", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--json",
    ]));
    assert_eq!(one["live"].as_array().map(Vec::len), Some(2));
    assert_eq!(one["manifest_version"], 1);
    assert!(one.get("partitions").is_none());
}

//! `ourios-compact backfill` as a child process: dry run, scheduling (job records), and
//! `--run-local`, on a local directory store.

use std::path::Path;
use std::process::Output;

use crate::common::run;
use serde_json::Value;

const JOB: &str = "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=10.json";

/// The JSON report of a run that must succeed.
fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    crate::common::json(output)
}

/// Generates `files` files of `rows` rows in acme's hour 10.
fn generate(store: &str, files: &str, rows: &str) {
    let out = run(&[
        "generate",
        "--store",
        store,
        "--tenant",
        "acme",
        "--hour",
        "2026-11-29T10",
        "--files",
        files,
        "--rows",
        rows,
    ]);
    assert!(out.status.success());
}

fn backfill(store: &Path, extra: &[&str]) -> Value {
    let store = store.to_string_lossy();
    let mut args = vec![
        "backfill",
        "--store",
        &store,
        "--from",
        "2026-11-29T09",
        "--to",
        "2026-11-29T11",
        "--interval",
        "0s",
        "--json",
    ];
    args.extend_from_slice(extra);
    json(&run(&args))
}

/// Generates `files` files of `rows` rows in a fresh store and backfills it with
/// `--run-local`, a fresh scratch directory and `extra`.
fn backfill_run_local(files: &str, rows: &str, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("dir");
    let scratch = tempfile::tempdir().expect("scratch");
    generate(&dir.path().to_string_lossy(), files, rows);
    let scratch_arg = scratch.path().to_string_lossy();
    let args = [&["--run-local", "--scratch", &scratch_arg][..], extra].concat();
    backfill(dir.path(), &args)
}

#[test]
fn backfill_dry_run_schedule_and_run_local() {
    let dir = tempfile::tempdir().expect("dir");
    let scratch = tempfile::tempdir().expect("scratch");
    let store = dir.path();
    let s = store.to_string_lossy();
    for (tenant, hour) in [("acme", "2026-11-29T10"), ("acme", "2026-11-29T12")] {
        let out = run(&[
            "generate", "--store", &s, "--tenant", tenant, "--hour", hour, "--files", "3",
            "--rows", "200",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let dry = backfill(store, &["--dry-run"]);
    assert_eq!(dry["considered"], 3, "{dry}");
    assert_eq!(dry["scheduled"], 1, "{dry}");
    assert_eq!(dry["partitions"][0]["hour"], "2026-11-29T10");
    assert_eq!(dry["partitions"][0]["decision"], "would_dispatch");
    assert!(!store.join(JOB).exists(), "a dry run writes nothing");

    let scheduled = backfill(store, &["--tenant", "acme"]);
    assert_eq!(scheduled["scheduled"], 1, "{scheduled}");
    assert_eq!(scheduled["partitions"][0]["decision"], "dispatched");
    let record: Value =
        serde_json::from_slice(&std::fs::read(store.join(JOB)).expect("the job record exists"))
            .expect("the job record is JSON");
    assert_eq!(record["job_id"], scheduled["partitions"][0]["job_id"]);
    // Again: the job is active, nothing new is scheduled.
    let again = backfill(store, &[]);
    assert_eq!(again["scheduled"], 0, "{again}");
    assert_eq!(again["partitions"][0]["decision"], "job_active");

    let scratch_arg = scratch.path().to_string_lossy();
    let local = backfill(store, &["--run-local", "--scratch", &scratch_arg]);
    assert_eq!(local["run_local"], true);
    assert_eq!(local["scheduled"], 1, "{local}");
    assert_eq!(local["partitions"][0]["decision"], "compacted", "{local}");
    assert_eq!(local["compactions"][0]["inputs"]["rows"], 600);
    assert!(
        !store.join(JOB).exists(),
        "the local run ended the scheduled job"
    );

    // Compacted: a second local run finds nothing to do.
    let done = backfill(store, &["--run-local", "--scratch", &scratch_arg]);
    assert_eq!(done["scheduled"], 0, "{done}");

    let bad = run(&[
        "backfill",
        "--store",
        &s,
        "--from",
        "2026-11-29T11",
        "--to",
        "2026-11-29T09",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("ends before it starts"));
}

#[test]
fn backfill_run_local_fans_out_like_compact() {
    let extra = ["--fan-out", "2", "--workers", "2", "--rg-bytes", "32KiB"];
    let local = backfill_run_local("4", "1500", &extra);
    let report = &local["compactions"][0];
    assert_eq!(report["status"], "compacted", "{local}");
    assert_eq!(report["fan_out"]["ranges"], 2, "{local}");
    assert_eq!(
        report["outputs"].as_array().map(Vec::len),
        Some(2),
        "{local}"
    );
    let rows: u64 = (report["outputs"].as_array().into_iter().flatten())
        .filter_map(|o| o["rows"].as_u64())
        .sum();
    assert_eq!(rows, 6000);
}

#[test]
fn backfill_run_local_prices_each_compaction_for_the_function_memory() {
    let local = backfill_run_local("3", "200", &["--function-memory", "512"]);
    let report = &local["compactions"][0];
    assert_eq!(report["status"], "compacted", "{local}");
    let duration_s = report["duration_ms"].as_f64().expect("duration") / 1000.0;
    let gb_seconds = report["cost"]["lambda_gb_seconds"]
        .as_f64()
        .expect("GB-seconds");
    assert!((gb_seconds - duration_s / 2.0).abs() <= 1e-9, "{report}");
    assert!(
        report["cost"]["requests"]["get"].as_u64().expect("gets") >= 3,
        "{report}"
    );
    assert!(
        report["cost"]["usd"].as_f64().expect("usd") > 0.0,
        "{report}"
    );
}

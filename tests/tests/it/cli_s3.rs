//! The release CLI against the S3 test server: every subcommand that takes a store URL
//! (generate, files, compact, inspect, query, gc) works with an `s3://bucket/prefix` URL, and
//! `gc` without --tenant/--hour covers every partition with a manifest or compacted outputs
//! while leaving uncompacted partitions alone.

use std::collections::BTreeSet;

use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{put_bytes, symlink_manifest};
use ourios_integration_tests::{
    all_keys, assert_exactly_once, assert_live_exactly_once, cli_json, cli_json_with_env,
    land_files, live_set, live_tags, query_hour_args, s3_url,
};

fn partition_args<'a>(url: &'a str, tenant: &'a str, hour: &'a str) -> Vec<&'a str> {
    vec!["--store", url, "--tenant", tenant, "--hour", hour]
}

/// `query --json` over the whole of hour 10 of `tenant`, with at most `limit` rows.
fn query_hour(url: &str, tenant: &str, limit: &str) -> serde_json::Value {
    let mut args = query_hour_args(url, tenant);
    args.extend(["--limit", limit, "--json"]);
    cli_json(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_works_on_s3() {
    let url = s3_url("cli");
    let store = Store::open(&url).expect("store");
    let (tenant, hour) = ("acme", "2026-11-29T10");

    let mut args = vec!["generate"];
    args.extend(partition_args(&url, tenant, hour));
    args.extend(["--files", "3", "--rows", "2000", "--json"]);
    let generated = cli_json(&args);
    assert_eq!(generated["keys"].as_array().map(Vec::len), Some(3));

    let mut args = vec!["files"];
    args.extend(partition_args(&url, tenant, hour));
    args.push("--json");
    let before = cli_json(&args);
    assert_eq!(before["live"].as_array().map(Vec::len), Some(3));

    let mut args = vec!["compact"];
    args.extend(partition_args(&url, tenant, hour));
    args.push("--json");
    let report = cli_json(&args);
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(report["inputs"]["rows"], 6000);
    let output_key = report["output"]["key"]
        .as_str()
        .expect("an output key")
        .to_string();

    let mut args = vec!["files"];
    args.extend(partition_args(&url, tenant, hour));
    args.push("--json");
    let after = cli_json(&args);
    assert_eq!(after["live"], serde_json::json!([output_key]));

    let file_url = format!("{url}/{output_key}");
    // What another engine reads: the output's s3:// URL under the store's prefix, its size.
    assert_eq!(after["urls"][0]["url"], file_url.as_str(), "{after}");
    assert_eq!(after["urls"][0]["sorted"], true);
    assert_eq!(after["urls"][0]["bytes"], report["output"]["bytes"]);
    // The commit rewrote the hour's symlink manifest to the same list; `symlinks` finds it so.
    let partition = PartitionId::parse(tenant, hour).expect("partition");
    let body = symlink_manifest(&store, &KeyLayout::default(), &partition).await;
    assert_eq!(body, Some(format!("{file_url}\n")));
    let rewritten = cli_json(&[
        "symlinks", "--store", &url, "--tenant", tenant, "--from", hour, "--to", hour, "--json",
    ]);
    assert_eq!(
        rewritten["partitions"][0]["symlink"], "unchanged",
        "{rewritten}"
    );
    let summary = cli_json(&["inspect", &file_url, "--json"]);
    assert_eq!(summary["rows"], 6000, "{summary}");

    // The whole hour through the query path: every row once, from the one compacted file.
    let queried = query_hour(&url, tenant, "5");
    assert_eq!(queried["stats"]["rows_matched"], 6000, "{queried}");
    assert_eq!(queried["stats"]["files"], 1, "{queried}");
    assert_eq!(queried["rows"].as_array().map(Vec::len), Some(5));

    // A second compaction is a no-op.
    let mut args = vec!["compact"];
    args.extend(partition_args(&url, tenant, hour));
    args.push("--json");
    assert_eq!(cli_json(&args)["status"], "noop");

    // GC of the partition: a dry run deletes nothing, then a zero grace deletes the inputs.
    let mut args = vec!["gc"];
    args.extend(partition_args(&url, tenant, hour));
    args.extend(["--grace", "0s", "--dry-run", "--json"]);
    let dry = cli_json(&args);
    assert_eq!(dry["plan"]["retired"].as_array().map(Vec::len), Some(3));
    assert_eq!(dry["deleted"], 0);
    let mut args = vec!["gc"];
    args.extend(partition_args(&url, tenant, hour));
    args.extend(["--grace", "0s", "--json"]);
    assert_eq!(cli_json(&args)["deleted"], 3);
    let live = live_set(&store, &KeyLayout::default(), &partition).await;
    assert_eq!(live.live, [output_key]);
}

/// A fanned-out compaction on S3: the merge tasks fetch the runs' footers and row groups by
/// range requests; the key ranges become live together and the runs are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_on_s3_commits_key_ranges() {
    let url = s3_url("fan-out");
    let store = Store::open(&url).expect("store");
    let (tenant, hour) = ("acme", "2026-11-29T10");
    let mut args = vec!["generate"];
    args.extend(partition_args(&url, tenant, hour));
    args.extend(["--files", "4", "--rows", "3000", "--json"]);
    cli_json(&args);

    let mut args = vec!["compact"];
    args.extend(partition_args(&url, tenant, hour));
    args.extend([
        "--fan-out",
        "3",
        "--workers",
        "2",
        "--rg-bytes",
        "64KiB",
        "--json",
    ]);
    let report = cli_json(&args);
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(report["fan_out"]["ranges"], 3, "{report}");
    let keys: Vec<String> = (report["outputs"].as_array().into_iter().flatten())
        .filter_map(|o| o["key"].as_str().map(str::to_string))
        .collect();
    assert!(keys.len() >= 2, "{report}");
    let rows: u64 = (report["outputs"].as_array().into_iter().flatten())
        .filter_map(|o| o["rows"].as_u64())
        .sum();
    assert_eq!(rows, 12_000);

    let partition = PartitionId::parse(tenant, hour).expect("partition");
    let layout = KeyLayout::default();
    let live = live_set(&store, &layout, &partition).await;
    assert_eq!(live.live, keys);
    let runs = Path::from(format!("{}/runs", layout.compacted_dir(&partition)));
    let left = store.list_sorted(&runs).await.expect("listing");
    assert!(left.is_empty(), "runs deleted once merged: {left:?}");

    let queried = query_hour(&url, tenant, "0");
    assert_eq!(queried["stats"]["rows_matched"], 12_000, "{queried}");
    assert_eq!(queried["stats"]["files"], keys.len(), "{queried}");

    let mut args = vec!["compact"];
    args.extend(partition_args(&url, tenant, hour));
    args.extend(["--fan-out", "3", "--json"]);
    assert_eq!(cli_json(&args)["status"], "noop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_without_tenant_or_hour_covers_every_compacted_partition() {
    let url = s3_url("gc-scope");
    let store = Store::open(&url).expect("store");
    let layout = KeyLayout::default();
    let compacted_hours = [
        ("acme", "2026-11-29T10"),
        ("acme", "2026-11-29T11"),
        ("globex", "2026-11-30T23"),
    ];
    let mut expected = Vec::new();
    for (tenant, hour) in compacted_hours {
        let partition = PartitionId::parse(tenant, hour).expect("partition");
        expected.push(land_files(&store, &layout, &partition, 2, 100).await);
        let mut args = vec!["compact"];
        args.extend(partition_args(&url, tenant, hour));
        args.push("--json");
        assert_eq!(cli_json(&args)["status"], "compacted");
    }
    // An uncompacted partition: GC never looks at ingest data without a manifest.
    let untouched = PartitionId::parse("initech", "2026-11-29T10").expect("partition");
    let untouched_tags = land_files(&store, &layout, &untouched, 2, 50).await;
    // A partition whose first compaction crashed after its upload: an orphan, no manifest.
    let crashed = PartitionId::parse("umbrella", "2026-11-29T12").expect("partition");
    let orphan = format!(
        "{}/part-000000000000.parquet",
        layout.compacted_dir(&crashed)
    );
    put_bytes(&store, &orphan, Bytes::from_static(b"never committed")).await;

    // A dry run over one tenant plans only that tenant's partitions.
    let dry = cli_json(&[
        "gc",
        "--store",
        &url,
        "--tenant",
        "acme",
        "--grace",
        "0s",
        "--dry-run",
        "--json",
    ]);
    let planned: Vec<&str> = dry["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter_map(|p| p["partition"].as_str())
        .collect();
    assert_eq!(
        planned,
        [
            "tenant=acme/year=2026/month=11/day=29/hour=10",
            "tenant=acme/year=2026/month=11/day=29/hour=11"
        ]
    );
    assert_eq!(dry["deleted"], 0);

    // One hour across all tenants.
    let one_hour = cli_json(&[
        "gc",
        "--store",
        &url,
        "--hour",
        "2026-11-30T23",
        "--grace",
        "0s",
        "--json",
    ]);
    assert_eq!(one_hour["partitions"].as_array().map(Vec::len), Some(1));
    assert_eq!(one_hour["deleted"], 2);

    // Everything.
    let all = cli_json(&["gc", "--store", &url, "--grace", "0s", "--json"]);
    let partitions: BTreeSet<&str> = all["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter_map(|p| p["partition"].as_str())
        .collect();
    assert_eq!(partitions.len(), 4, "{all}");
    assert!(partitions.contains("tenant=umbrella/year=2026/month=11/day=29/hour=12"));
    assert_eq!(all["deleted"], 2 + 2 + 1, "{all}");

    for ((tenant, hour), tags) in compacted_hours.iter().zip(&expected) {
        let partition = PartitionId::parse(tenant, hour).expect("partition");
        let name = partition.to_string();
        assert_live_exactly_once(&store, &layout, &partition, 1, tags, &name).await;
        let ingest_left = store
            .list_sorted(&layout.ingest_dir(&partition))
            .await
            .expect("list");
        assert!(ingest_left.is_empty(), "retired inputs deleted");
    }
    assert_exactly_once(
        &live_tags(&store, &layout, &untouched).await,
        &untouched_tags,
        "an uncompacted partition",
    );
    let keys = all_keys(&store).await;
    assert!(!keys.contains(&orphan), "the orphan is swept");
    // Of the partition that held only the orphan, only the manifest version that condemned
    // it is left (a committer that stalled past its hold finds it there and commits nothing).
    assert!(
        (keys.iter())
            .filter(|k| k.contains("tenant=umbrella"))
            .all(|k| k.starts_with("_compaction/manifests/")),
        "{keys:?}"
    );
    assert!(
        store
            .object_store()
            .head(&Path::from(orphan.as_str()))
            .await
            .is_err()
    );
}

/// `compact --json` counts its requests by price class, and a job counts the same on S3 as
/// on a local directory, whose in-place reads and walks count as the GETs and LISTs they
/// stand for: the same hour compacted on each, then compacted again (nothing to do). On the
/// first job: one GET per input; four PUTs (the garbage-due marker, the output in one PUT, the
/// manifest, the symlink manifest) and no DELETE: an output in one PUT that its job commits
/// needs no hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_counts_the_same_requests_on_s3_and_on_a_local_directory() {
    let local = tempfile::tempdir().expect("a directory");
    let local = local.path().to_string_lossy().into_owned();
    let mut counted = Vec::new();
    for url in [s3_url("cli-cost"), local] {
        let (tenant, hour) = ("acme", "2026-11-29T10");
        let mut args = vec!["generate"];
        args.extend(partition_args(&url, tenant, hour));
        args.extend(["--files", "4", "--rows", "1000", "--json"]);
        cli_json(&args);

        let mut args = vec!["compact"];
        args.extend(partition_args(&url, tenant, hour));
        args.extend(["--function-memory", "1024", "--json"]);
        let first = cli_json(&args);
        assert_eq!(first["status"], "compacted", "{first}");
        let duration_s = first["duration_ms"].as_f64().expect("duration") / 1000.0;
        let gb_seconds = (first["cost"]["lambda_gb_seconds"].as_f64()).expect("GB-seconds");
        assert!((gb_seconds - duration_s).abs() <= 1e-9, "1,024 MB: {first}");
        let again = cli_json(&args);
        assert_eq!(again["status"], "noop", "{again}");
        counted.push((url, [first, again].map(|r| r["cost"]["requests"].clone())));
    }
    let [(_, on_s3), (_, on_disk)] = &counted[..] else {
        unreachable!("two stores")
    };
    assert_eq!(on_s3, on_disk, "S3, then the local directory");
    let first = &on_s3[0];
    let count = |class: &str| first[class].as_u64().expect("a count");
    assert!(count("get") >= 4, "{first}");
    assert_eq!(count("put"), 4, "{first}");
    assert_eq!(count("delete"), 0, "{first}");
    assert!(count("list") >= 2, "{first}");
}

/// Inputs of more than a MiB each are sorted as they arrive from S3: their footers read first
/// (one ranged GET each, the only requests a local directory does not stand for), and the
/// output the same bytes as the same hour compacted on a local directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_sorted_as_they_arrive_from_s3_give_the_local_directory_s_output() {
    let local = tempfile::tempdir().expect("a directory");
    let local = local.path().to_string_lossy().into_owned();
    let (tenant, hour) = ("acme", "2026-11-29T10");
    let mut reports = Vec::new();
    let mut outputs = Vec::new();
    for url in [s3_url("cli-arrive"), local] {
        let mut args = vec!["generate"];
        args.extend(partition_args(&url, tenant, hour));
        args.extend(["--files", "3", "--rows", "60000", "--json"]);
        let generated = cli_json(&args);
        let bytes = generated["bytes"].as_u64().expect("bytes");
        assert!(bytes > 3 << 20, "more than a MiB a file: {generated}");

        let mut args = vec!["compact"];
        args.extend(partition_args(&url, tenant, hour));
        args.extend(["--memory-budget", "8MiB", "--json"]);
        let report = cli_json(&args);
        assert_eq!(report["status"], "compacted", "{report}");
        let key = report["output"]["key"].as_str().expect("an output key");
        let store = Store::open(&url).expect("store");
        let output = store
            .object_store()
            .get(&Path::from(key))
            .await
            .expect("the output")
            .bytes()
            .await
            .expect("its bytes");
        outputs.push(output);
        reports.push(report);
    }
    let [on_s3, on_disk] = &reports[..] else {
        unreachable!("two stores")
    };
    assert!(
        on_s3["runs_spilled"].as_u64() > Some(1),
        "the sort spilled runs: {on_s3}"
    );
    assert_eq!(on_s3["inputs"], on_disk["inputs"]);
    assert!(outputs[0] == outputs[1], "the outputs differ");
    let gets = |r: &serde_json::Value| r["cost"]["requests"]["get"].as_u64().expect("GETs");
    assert_eq!(gets(on_s3), gets(on_disk) + 3, "one footer read a file");
}

/// Variables exported empty (`AWS_ENDPOINT_URL_S3=`, `AWS_SESSION_TOKEN=`, as some shells and
/// CI systems leave them) count as unset: the CLI still reaches the server that
/// `AWS_ENDPOINT_URL` names, and what it writes is there.
#[test]
fn empty_aws_variables_count_as_unset() {
    let url = s3_url("cli-empty-env");
    let (tenant, hour) = ("acme", "2026-11-29T10");
    let mut args = vec!["generate"];
    args.extend(partition_args(&url, tenant, hour));
    args.extend(["--files", "1", "--rows", "100", "--json"]);
    cli_json_with_env(
        &args,
        &[("AWS_ENDPOINT_URL_S3", ""), ("AWS_SESSION_TOKEN", "")],
    );

    let mut args = vec!["files"];
    args.extend(partition_args(&url, tenant, hour));
    args.push("--json");
    let files = cli_json(&args);
    assert_eq!(files["live"].as_array().map(Vec::len), Some(1), "{files}");
}

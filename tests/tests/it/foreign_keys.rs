//! Keys object_store cannot represent (an empty `//` segment, a `.` segment, an ASCII control
//! character) beside real partitions on the S3 test server: they are reported (in `files` and
//! `compact` JSON when they sit in the partition) and skipped, never read, retired or deleted,
//! and no partition or tenant stops because of them (`files`, `compact`, `query`, `gc` through
//! the CLI; the planner's sweep through its entry point). Names it can address are data
//! whatever they hold (a backslash, a C1 control character). invariant 10.

use std::collections::BTreeSet;

use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::serverless::dispatch::sweep;
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_compaction::store::Store;
use ourios_integration_tests::{
    assert_exactly_once, cli_json, cli_json_with_env, dispatched, land_file, land_files, live_set,
    live_tags, put_with_boto3, query_hour_args, s3_url, test_hour_closed,
};

const HOUR: &str = "2026-11-29T10";

/// Keys object_store cannot address inside a partition, in key order.
fn foreign_in_partition(layout: &KeyLayout, partition: &PartitionId) -> Vec<String> {
    let dir = layout.ingest_dir(partition);
    vec![
        format!("{dir}/./dot-segment.parquet"),
        format!("{dir}//empty-segment.parquet"),
        format!("{dir}/control\u{1}char.parquet"),
    ]
}

/// Keys object_store cannot address, inside a partition (with a side file the reports leave
/// out) and beside the tenants.
fn foreign_keys(layout: &KeyLayout, partition: &PartitionId) -> Vec<String> {
    let mut keys = foreign_in_partition(layout, partition);
    keys.extend([
        format!("{}/_control\u{1}side.parquet", layout.ingest_dir(partition)),
        format!("{}//stray.parquet", layout.ingest_prefix()),
        format!("{}/./tenant=ghost/x.parquet", layout.ingest_prefix()),
    ]);
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_keys_are_skipped_and_stop_no_partition_on_s3() {
    let url = s3_url("foreign");
    let store = Store::open(&url).expect("store");
    let layout = KeyLayout::default();
    let acme = PartitionId::parse("acme", HOUR).expect("partition");
    let beta = PartitionId::parse("beta", HOUR).expect("partition");
    let mut acme_tags = land_files(&store, &layout, &acme, 2, 500).await;
    // Names a writer may choose that object_store can address: data like any other.
    for (i, name) in ["back\\slash.parquet", "c1\u{85}control.parquet"]
        .into_iter()
        .enumerate()
    {
        acme_tags
            .extend(land_file(&store, &layout, &acme, name, 2000 + 1000 * i as i64, 500).await);
    }
    let beta_tags = land_files(&store, &layout, &beta, 2, 500).await;
    let raw = store.raw_s3().expect("the S3 test store has raw S3 access");
    let foreign = foreign_keys(&layout, &acme);
    put_with_boto3(&url, &foreign, b"not addressable");

    // The live set: the real files, the foreign ones skipped and named.
    let files = live_set(&store, &layout, &acme).await;
    assert_eq!(files.live.len(), 4, "{:?}", files.live);
    assert_eq!(files.unaddressable, foreign_in_partition(&layout, &acme));

    // The planner's sweep plans both tenants.
    let outcomes = sweep(
        &store,
        &layout,
        test_hour_closed(),
        &ReadinessConfig::default(),
    )
    .await
    .expect("the sweep lists tenants past a foreign key");
    let scheduled: BTreeSet<(String, String)> = dispatched(&outcomes).into_iter().collect();
    assert!(
        outcomes.iter().all(|o| o.decision != "failed"),
        "{outcomes:?}"
    );
    for tenant in ["acme", "beta"] {
        assert!(
            scheduled.contains(&(tenant.to_string(), HOUR.to_string())),
            "{tenant} not dispatched: {outcomes:?}"
        );
    }

    // The CLI: files, compact, query and gc of every partition go on.
    for (partition, tags, unaddressable) in [
        (&acme, &acme_tags, foreign_in_partition(&layout, &acme)),
        (&beta, &beta_tags, Vec::new()),
    ] {
        let tenant = partition.tenant().expect("a tenant");
        let base = ["--store", url.as_str(), "--tenant", tenant, "--hour", HOUR];
        let files = cli_json(&[&["files"], &base[..], &["--json"]].concat());
        assert_eq!(
            files["live"].as_array().map(Vec::len),
            Some(tags.len() / 500),
            "{files}"
        );
        assert_eq!(files["unaddressable"], serde_json::json!(unaddressable));
        let report = cli_json(&[&["compact"], &base[..], &["--json"]].concat());
        assert_eq!(report["status"], "compacted", "{report}");
        assert_eq!(report["inputs"]["rows"], tags.len() as u64, "{report}");
        assert_eq!(report["unaddressable"], serde_json::json!(unaddressable));
        let queried = cli_json(&[&query_hour_args(&url, tenant)[..], &["--json"]].concat());
        assert_eq!(
            queried["stats"]["rows_matched"],
            tags.len() as u64,
            "{queried}"
        );
        let live = live_tags(&store, &layout, partition).await;
        assert_exactly_once(&live, tags, tenant);
    }
    let gc = cli_json(&["gc", "--store", &url, "--grace", "0s", "--json"]);
    assert_eq!(gc["partitions"].as_array().map(Vec::len), Some(2), "{gc}");
    assert_eq!(gc["deleted"], 6, "the six retired inputs: {gc}");

    // The foreign keys are still there: never read, retired or deleted.
    let remaining = raw
        .list(&object_store::path::Path::from(""), false)
        .await
        .expect("a raw listing");
    let skipped: BTreeSet<&str> = remaining.skipped.iter().map(String::as_str).collect();
    for key in &foreign {
        assert!(
            skipped.contains(key.as_str()),
            "{key:?} is gone: {skipped:?}"
        );
    }
}

/// With no keys in the environment, the CLI takes its credentials from the standard chain (here
/// a shared credentials file and a profile, as on a laptop with `aws configure` or SSO), its raw
/// S3 calls included: a partition holding keys object_store cannot address is listed and
/// compacted, those keys reported, as with keys in the environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_alone_lists_and_compacts_a_partition_holding_foreign_keys() {
    let url = s3_url("profile-only");
    let store = Store::open(&url).expect("store");
    let layout = KeyLayout::default();
    let acme = PartitionId::parse("acme", HOUR).expect("partition");
    let tags = land_files(&store, &layout, &acme, 2, 300).await;
    let foreign = foreign_in_partition(&layout, &acme);
    put_with_boto3(&url, &foreign, b"not addressable");

    let dir = tempfile::tempdir().expect("dir");
    let key = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let credentials = dir.path().join("credentials");
    let profile = format!(
        "[ourios-test]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
        key("AWS_ACCESS_KEY_ID"),
        key("AWS_SECRET_ACCESS_KEY")
    );
    std::fs::write(&credentials, profile).expect("credentials file");
    let config = dir.path().join("config");
    std::fs::write(&config, "[profile ourios-test]\n").expect("config file");
    let (credentials, config) = (credentials.to_string_lossy(), config.to_string_lossy());
    let env = [
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
        ("AWS_SESSION_TOKEN", ""),
        ("AWS_PROFILE", "ourios-test"),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.as_ref()),
        ("AWS_CONFIG_FILE", config.as_ref()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let base = ["--store", url.as_str(), "--tenant", "acme", "--hour", HOUR];
    let files = cli_json_with_env(&[&["files"], &base[..], &["--json"]].concat(), &env);
    assert_eq!(files["live"].as_array().map(Vec::len), Some(2), "{files}");
    assert_eq!(files["unaddressable"], serde_json::json!(foreign));
    let report = cli_json_with_env(&[&["compact"], &base[..], &["--json"]].concat(), &env);
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(report["unaddressable"], serde_json::json!(foreign));
    let live = live_tags(&store, &layout, &acme).await;
    assert_exactly_once(&live, &tags, "compacted with a profile's credentials");
}

//! Fixtures the integration tests share: the S3 test server's store, landing tagged ingest
//! files, and reading back every live row's tag to check the exactly-once invariant.
//!
//! Every ingest row carries a unique integer `tag`. A partition is correct when the tags of
//! all its live files (the reader rule, `manifest::partition_files`) are exactly the tags
//! landed: none missing, none twice (invariant 1).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, Int64Array};
use arrow::datatypes::DataType;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use ourios_compaction::manifest::{CommitRequest, CompactedFile, partition_files};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{parquet_bytes, put_bytes, read_parquet, rows_batch};

pub mod emulator;

/// The variable `tests/run.sh` sets to the S3 test server's endpoint.
pub const S3_ENDPOINT_ENV: &str = "OURIOS_TEST_S3_ENDPOINT";
/// The variable naming the test bucket (created by `tests/run.sh`).
pub const S3_BUCKET_ENV: &str = "OURIOS_TEST_S3_BUCKET";
/// The variable `tests/run.sh` sets to the release CLI binary.
pub const CLI_BIN_ENV: &str = "OURIOS_COMPACT_BIN";

/// The S3 test server's endpoint. Panics (the test fails, it never skips) when the tests
/// were not started by `bash tests/run.sh`, which starts the server and sets the variables.
pub fn s3_endpoint() -> String {
    let endpoint = std::env::var(S3_ENDPOINT_ENV).unwrap_or_else(|_| {
        panic!(
            "{S3_ENDPOINT_ENV} is not set: the S3 integration tests need the S3-compatible test \
             server; run them with `bash tests/run.sh` (it starts MinIO or moto on 127.0.0.1 and \
             sets {S3_ENDPOINT_ENV}, AWS_ENDPOINT_URL, the credentials and the bucket)"
        )
    });
    assert!(
        endpoint.starts_with("http://127.0.0.1:") || std::env::var("S3_ENDPOINT").is_ok(),
        "{S3_ENDPOINT_ENV}={endpoint}: the tests only talk to a server on 127.0.0.1"
    );
    assert_eq!(
        std::env::var("AWS_ENDPOINT_URL").ok().as_deref(),
        Some(endpoint.as_str()),
        "AWS_ENDPOINT_URL must point at the test server too (tests/run.sh exports both)"
    );
    endpoint
}

/// A fresh `s3://bucket/<name>-<random>` store root on the test server, so tests running
/// at once never see each other's objects.
pub fn s3_url(name: &str) -> String {
    s3_endpoint();
    let bucket = std::env::var(S3_BUCKET_ENV).unwrap_or_else(|_| "ourios-test".to_string());
    format!("s3://{bucket}/{name}-{:016x}", rand::random::<u64>())
}

/// Opens a fresh store root on the S3 test server.
pub fn open_s3(name: &str) -> Store {
    Store::open(&s3_url(name)).expect("the S3 test store opens")
}

/// Where a test runs: a fresh in-memory store or a fresh root on the S3 test server (one
/// `rstest` case each, so both run the same body).
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    /// [`open_memory`].
    Memory,
    /// [`open_s3`].
    S3,
}

impl Backend {
    /// A fresh store of this kind; `name` starts the S3 root's name.
    pub fn open(self, name: &str) -> Store {
        match self {
            Self::Memory => open_memory(),
            Self::S3 => open_s3(name),
        }
    }
}

/// A fresh in-memory store.
pub fn open_memory() -> Store {
    Store::from_object_store(Arc::new(InMemory::new()), "memory://")
}

/// The release CLI binary (`tests/run.sh` builds it and sets `OURIOS_COMPACT_BIN`).
pub fn cli_bin() -> std::path::PathBuf {
    let path = std::env::var(CLI_BIN_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/release/ourios-compact")
        });
    assert!(
        path.is_file(),
        "the CLI binary {} is missing: run `bash tests/run.sh` (it builds it and sets {CLI_BIN_ENV})",
        path.display()
    );
    path
}

/// Runs the CLI, expects success, and parses its JSON output.
pub fn cli_json(args: &[&str]) -> serde_json::Value {
    cli_json_with_env(args, &[])
}

/// [`cli_json`] with `env` variables set (or overridden) for the CLI process.
pub fn cli_json_with_env(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let output = std::process::Command::new(cli_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the CLI starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ourios-compact {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("ourios-compact {args:?} printed no JSON ({e}): {stdout}"))
}

/// The partition most tests use.
pub fn test_partition() -> PartitionId {
    PartitionId::parse("acme", "2026-11-29T10").expect("a valid partition")
}

/// Writes one ingest file `name` with `num_rows` rows tagged `first_tag..first_tag+num_rows`
/// into the partition, and returns the tags.
pub async fn land_file(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    name: &str,
    first_tag: i64,
    num_rows: i64,
) -> Vec<i64> {
    let (start, end) = partition.time_range_nanos();
    let span = end - start;
    let services = ["api", "auth", "billing", "search", "web"];
    let rows: Vec<_> = (first_tag..first_tag + num_rows)
        .map(|tag| {
            let service = (tag % 7 != 0).then(|| services[(tag as usize * 31) % 5].to_string());
            let time = start + (tag.wrapping_mul(7_919_000_003)).rem_euclid(span);
            (service, time, tag)
        })
        .collect();
    let bytes = parquet_bytes(&[rows_batch(&rows)], 64);
    let key = format!("{}/{name}", layout.ingest_dir(partition));
    put_bytes(store, &key, bytes).await;
    (first_tag..first_tag + num_rows).collect()
}

/// Lands `num_files` ingest files `f<i>.parquet` of `num_rows` rows each (tags `i * 1000..`),
/// and returns every tag.
pub async fn land_files(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    num_files: i64,
    num_rows: i64,
) -> BTreeSet<i64> {
    let mut tags = BTreeSet::new();
    for i in 0..num_files {
        let name = format!("f{i}.parquet");
        tags.extend(land_file(store, layout, partition, &name, i * 1000, num_rows).await);
    }
    tags
}

/// A commit request retiring one input for one output (one row, one byte).
pub fn commit_request(job: &str, input: &str, output: &str) -> CommitRequest {
    CommitRequest {
        inputs: vec![input.to_string()],
        outputs: vec![CompactedFile {
            key: output.to_string(),
            rows: 1,
            bytes: 1,
            input_set: String::new(),
        }],
        quarantined: Vec::new(),
        released: Vec::new(),
        forget: Vec::new(),
        ingested_bytes: 0,
        attempt_id: job.to_string(),
        now_ms: 1,
        commit_by: None,
    }
}

/// The `tag` of every row of one Parquet object.
pub async fn file_tags(store: &Store, key: &str) -> Vec<i64> {
    let mut tags = Vec::new();
    for batch in read_parquet(store, key).await {
        let column = batch
            .column_by_name("tag")
            .unwrap_or_else(|| panic!("{key} has no tag column"));
        let column = arrow::compute::cast(column, &DataType::Int64).expect("tags cast to Int64");
        let ints = column
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("an Int64 column");
        assert_eq!(ints.null_count(), 0, "{key} has null tags");
        tags.extend(ints.values().iter().copied());
    }
    tags
}

/// The tags of every row of every live file of the partition, as the reader rule sees it.
pub async fn live_tags(store: &Store, layout: &KeyLayout, partition: &PartitionId) -> Vec<i64> {
    let files = partition_files(store, layout, partition)
        .await
        .expect("the live set reads");
    let mut tags = Vec::new();
    for key in &files.live {
        tags.extend(file_tags(store, key).await);
    }
    tags
}

/// Asserts that `tags` holds every tag of `expected` exactly once and nothing else.
pub fn assert_exactly_once(tags: &[i64], expected: &BTreeSet<i64>, context: &str) {
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for &t in tags {
        *counts.entry(t).or_default() += 1;
    }
    let twice: Vec<i64> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(t, _)| *t)
        .take(10)
        .collect();
    let missing: Vec<i64> = expected
        .iter()
        .filter(|t| !counts.contains_key(t))
        .copied()
        .take(10)
        .collect();
    let unexpected: Vec<i64> = counts
        .keys()
        .filter(|t| !expected.contains(t))
        .copied()
        .take(10)
        .collect();
    assert!(
        twice.is_empty() && missing.is_empty() && unexpected.is_empty(),
        "{context}: rows not live exactly once: duplicated {twice:?}, missing {missing:?}, \
         unknown {unexpected:?} ({} live rows, {} expected)",
        tags.len(),
        expected.len()
    );
}

/// Every key in the store, sorted.
pub async fn all_keys(store: &Store) -> Vec<String> {
    let mut keys: Vec<String> = store
        .object_store()
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("the store lists");
    keys.sort();
    keys
}

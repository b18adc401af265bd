//! Ingest files whose every row carries a unique integer `tag`, and reading back the tags of
//! every live row: a partition is correct when the tags of all its live files (the reader
//! rule, [`crate::manifest::partition_files`]) are exactly the tags landed, none missing, none
//! twice (invariant 1).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::{Array, Int64Array};
use arrow_schema::DataType;
use futures::TryStreamExt;
use object_store::memory::InMemory;

use crate::manifest::{
    CommitOutcome, CommitRequest, CompactedFile, PartitionFiles, partition_files,
};
use crate::object_key::ObjectKey;
use crate::partition::{KeyLayout, PartitionId};
use crate::store::Store;
use crate::testing::{parquet_bytes, put_bytes, read_parquet, rows_batch};

/// A fresh in-memory store.
pub fn open_memory() -> Store {
    Store::from_object_store(Arc::new(InMemory::new()), "memory://")
}

/// `store`, the default layout, the test partition and its ingest directory.
pub fn test_partition_on(
    store: Store,
) -> (Store, KeyLayout, PartitionId, object_store::path::Path) {
    let layout = KeyLayout::default();
    let partition = test_partition();
    let dir = layout.ingest_dir(&partition);
    (store, layout, partition, dir)
}

/// [`test_partition_on`] a fresh in-memory store.
pub fn memory_test_partition() -> (Store, KeyLayout, PartitionId, object_store::path::Path) {
    test_partition_on(open_memory())
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
        inputs: vec![ObjectKey::parse(input).expect("a test key parses")],
        outputs: vec![CompactedFile {
            key: ObjectKey::parse(output).expect("a test key parses"),
            rows: 1,
            bytes: 1,
            input_set: String::new(),
            range: None,
        }],
        quarantined: Vec::new(),
        released: Vec::new(),
        forget: Vec::new(),
        ingested_bytes: 0,
        attempt_id: job.to_string(),
        now_ms: 1,
        commit_by: None,
        unpruned_until: None,
    }
}

/// Asserts that a commit met a conflict (`context` and the outcome in the message otherwise).
pub fn assert_conflict(outcome: &CommitOutcome, context: &str) {
    assert!(
        matches!(outcome, CommitOutcome::Conflict { .. }),
        "{context}: {outcome:?}"
    );
}

/// The `tag` of every row of one Parquet object.
pub async fn file_tags(store: &Store, key: &str) -> Vec<i64> {
    let mut tags = Vec::new();
    for batch in read_parquet(store, key).await {
        let column = batch
            .column_by_name("tag")
            .unwrap_or_else(|| panic!("{key} has no tag column"));
        let column = arrow_cast::cast(column, &DataType::Int64).expect("tags cast to Int64");
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
    let files = live_set(store, layout, partition).await;
    let mut tags = Vec::new();
    for key in &files.live {
        tags.extend(file_tags(store, key).await);
    }
    tags
}

/// The partition's files as readers see them ([`partition_files`]).
pub async fn live_set(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> PartitionFiles {
    partition_files(store, layout, partition)
        .await
        .expect("the live set reads")
}

/// Asserts that `partition` has `num_live` live files and that they hold every tag of
/// `expected` exactly once (`context` names the moment); returns the live set.
pub async fn assert_live_exactly_once(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    num_live: usize,
    expected: &BTreeSet<i64>,
    context: &str,
) -> PartitionFiles {
    let files = live_set(store, layout, partition).await;
    assert_eq!(files.live.len(), num_live, "{context}: {files:?}");
    let tags = live_tags(store, layout, partition).await;
    assert_exactly_once(&tags, expected, context);
    files
}

/// Asserts that `tags` holds every tag of `expected` exactly once and nothing else.
pub fn assert_exactly_once(tags: &[i64], expected: &BTreeSet<i64>, context: &str) {
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for &t in tags {
        *counts.entry(t).or_default() += 1;
    }
    let first_ten = |tags: &mut dyn Iterator<Item = i64>| tags.take(10).collect::<Vec<_>>();
    let twice = first_ten(&mut counts.iter().filter(|(_, n)| **n > 1).map(|(t, _)| *t));
    let missing = first_ten(&mut expected.iter().copied().filter(|t| !counts.contains_key(t)));
    let unexpected = first_ten(&mut counts.keys().copied().filter(|t| !expected.contains(t)));
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

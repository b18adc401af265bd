//! Regression tests of the commit protocol's known interleavings (crate doc, invariants 1, 3
//! and 8): each one lost or duplicated rows before it was closed.

use std::collections::BTreeMap;
use std::path::Path as FsPath;
use std::time::Duration;

use arrow::array::{Array, Int64Array};
use ourios_compaction::compact::compact_partition;
use ourios_compaction::config::CompactOptions;
use ourios_compaction::gc::collect_garbage;
use ourios_compaction::manifest::partition_files;
use ourios_compaction::partition::{Layout, PartitionId};
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{parquet_bytes, read_parquet, rows_batch};

fn partition() -> PartitionId {
    PartitionId::parse("acme", "2026-11-29T10").expect("a valid partition")
}

fn options(scratch: &FsPath) -> CompactOptions {
    let mut options = CompactOptions::new(scratch);
    options.budget_bytes = 64 << 10;
    options
}

/// Parquet bytes of `num_rows` rows tagged `first_tag..`, inside the test partition's hour.
fn ingest_bytes(first_tag: i64, num_rows: i64) -> bytes::Bytes {
    let (start, end) = partition().time_range_nanos();
    let rows: Vec<_> = (first_tag..first_tag + num_rows)
        .map(|tag| {
            let time = start + (tag.wrapping_mul(7_919_000_003)).rem_euclid(end - start);
            (Some(format!("svc-{}", tag % 3)), time, tag)
        })
        .collect();
    parquet_bytes(&[rows_batch(&rows)], 64)
}

/// Writes an ingest file straight onto the local store's disk, named exactly `name`.
fn land_on_disk(root: &FsPath, layout: &Layout, name: &str, first_tag: i64, num_rows: i64) {
    let dir = root.join(layout.ingest_dir(&partition()).as_ref());
    std::fs::create_dir_all(&dir).expect("partition directory");
    std::fs::write(dir.join(name), ingest_bytes(first_tag, num_rows)).expect("ingest file");
}

/// How many times each tag is live.
async fn live_tag_counts(store: &Store, layout: &Layout) -> BTreeMap<i64, usize> {
    let files = partition_files(store, layout, &partition())
        .await
        .expect("the live set reads");
    let mut counts = BTreeMap::new();
    for key in &files.live {
        for batch in read_parquet(store, key).await {
            let tags = batch
                .column_by_name("tag")
                .expect("a tag column")
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("Int64 tags")
                .clone();
            for i in 0..tags.len() {
                *counts.entry(tags.value(i)).or_default() += 1;
            }
        }
    }
    counts
}

fn assert_each_once(counts: &BTreeMap<i64, usize>, expected: std::ops::Range<i64>, context: &str) {
    let wrong: Vec<(i64, usize)> = expected
        .clone()
        .map(|t| (t, counts.get(&t).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 1)
        .take(5)
        .collect();
    assert!(
        wrong.is_empty() && counts.len() == expected.count(),
        "{context}: tags not live exactly once (tag, times): {wrong:?}"
    );
}

/// The reproduction, on a local directory store: `a~b.parquet` is compacted and
/// retired; `a%7Eb.parquet` (what `Path::from` turns `a~b.parquet` into) lands later. GC with
/// no grace must delete the retired `a~b.parquet`, never the live `a%7Eb.parquet`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole1_a_key_that_encoding_would_change_is_never_confused_with_another() {
    let root = tempfile::tempdir().expect("store root");
    let scratch = tempfile::tempdir().expect("scratch");
    let store = Store::open(&root.path().to_string_lossy()).expect("local store");
    let layout = Layout::default();
    land_on_disk(root.path(), &layout, "a~b.parquet", 0, 1000);

    let report = compact_partition(&store, &layout, &partition(), &options(scratch.path()))
        .await
        .expect("compaction runs");
    assert_eq!(report.status, Status::Compacted, "{:?}", report.error);

    land_on_disk(root.path(), &layout, "a%7Eb.parquet", 1000, 1000);
    assert_each_once(
        &live_tag_counts(&store, &layout).await,
        0..2000,
        "after the late file",
    );

    collect_garbage(&store, &layout, &partition(), Duration::ZERO, false)
        .await
        .expect("gc runs");
    let dir = root.path().join(layout.ingest_dir(&partition()).as_ref());
    assert!(
        dir.join("a%7Eb.parquet").exists(),
        "the live late file is kept"
    );
    assert!(
        !dir.join("a~b.parquet").exists(),
        "the retired file is the one deleted"
    );
    assert_each_once(&live_tag_counts(&store, &layout).await, 0..2000, "after gc");

    // The next compaction reads the late file as itself, and GC then removes it.
    let report = compact_partition(&store, &layout, &partition(), &options(scratch.path()))
        .await
        .expect("second compaction runs");
    assert_eq!(report.status, Status::Compacted, "{:?}", report.error);
    collect_garbage(&store, &layout, &partition(), Duration::ZERO, false)
        .await
        .expect("gc runs");
    assert!(!dir.join("a%7Eb.parquet").exists(), "retired, then deleted");
    assert_each_once(
        &live_tag_counts(&store, &layout).await,
        0..2000,
        "after the second compaction",
    );
}

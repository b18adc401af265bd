//! The budget returns to zero after every job: whatever the sort held (batches buffered in
//! memory, runs spilled and read back, merge passes over runs of runs), the gauge's current
//! usage is 0 once `compact_partition` returns, and no spill file survives.

use std::path::Path;
use std::sync::Arc;

use object_store::memory::InMemory;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    TestRow, compact_expecting, parquet_bytes, put_bytes, rows_batch,
};

/// Files under `dir`, recursively.
fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("read scratch")
        .map(|entry| {
            let path = entry.expect("entry").path();
            if path.is_dir() { count_files(&path) } else { 1 }
        })
        .sum()
}

/// Compacts `num_files` files of `rows` rows each under `budget_bytes` and `fan_in`.
async fn compact(
    num_files: usize,
    rows: i64,
    budget_bytes: u64,
    fan_in: usize,
) -> CompactionReport {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let layout = KeyLayout::default();
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let (start, _) = partition.time_range_nanos();
    for f in 0..num_files {
        let batch: Vec<TestRow> = (0..rows)
            .map(|r| {
                let tag = f as i64 * rows + r;
                let service = format!("service-{}-{}", tag % 7, "x".repeat(40));
                (
                    Some(service),
                    start + (tag * 7_919_000) % 3_600_000_000_000,
                    tag,
                )
            })
            .collect();
        let key = format!("{}/f{f:04}.parquet", layout.ingest_dir(&partition));
        put_bytes(&store, &key, parquet_bytes(&[rows_batch(&batch)], 256)).await;
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    options.settings.budget_bytes = budget_bytes;
    options.merge_fan_in = fan_in;
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Compacted).await;
    assert_eq!(
        report.output.as_ref().map(|o| o.rows),
        Some(num_files as u64 * rows as u64)
    );
    assert!(
        report.peak_decoded_bytes > 0,
        "the gauge saw the rows: {report:?}"
    );
    assert_eq!(report.decoded_bytes_at_end, 0, "budget leaked: {report:?}");
    assert_eq!(count_files(scratch.path()), 0, "a spill file survived");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_returns_to_zero_when_everything_fits() {
    let report = compact(3, 500, 64 << 20, 16).await;
    assert_eq!(report.runs_spilled, 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_returns_to_zero_after_spilled_runs() {
    let report = compact(4, 4_000, 256 << 10, 64).await;
    assert!(report.runs_spilled > 1, "{report:?}");
    assert_eq!(report.merge_passes, 1, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_returns_to_zero_after_a_multi_pass_merge() {
    let report = compact(8, 4_000, 256 << 10, 2).await;
    assert!(report.runs_spilled > 2, "{report:?}");
    assert!(report.merge_passes >= 2, "{report:?}");
}

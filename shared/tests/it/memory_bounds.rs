//! Invariant 8: decoded rows held at once stay within the budget B plus one batch, measured
//! by the memory gauge, for the shapes that broke earlier designs: many small, highly
//! compressible inputs whose encoded total is far below B while their decoded rows exceed
//! it (a 1,555-file production failure); wide rows (40 attributes of 250 bytes);
//! and one huge input file with a single row group. Each shape runs in the plain layout and
//! with row groups grouped in blocks of 8.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use object_store::memory::InMemory;
use ourios_compaction::gauge::batch_memory_bytes;
use ourios_compaction::options::{CompactOptions, DEFAULT_MERGE_FAN_IN};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{compact_expecting, parquet_bytes, put_bytes, test_partition};

const MIB: u64 = 1 << 20;

/// Rows with `attributes` string columns of `width` bytes each, services interleaved; with
/// `distinct`, every row's attribute values differ (so the sort cannot carry them as codes).
fn batch(
    partition: &PartitionId,
    rows: usize,
    attributes: usize,
    width: usize,
    seed: u64,
    distinct: bool,
) -> RecordBatch {
    let (start, _) = partition.time_range_nanos();
    let services = ["checkout", "auth", "search", "ads", "cart"];
    let mut fields = vec![
        Field::new("time_unix_nano", DataType::Int64, false),
        Field::new("service.name", DataType::Utf8, true),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values((0..rows).map(|r| {
            start + ((r as u64 * 7919 + seed * 104_729) % 3_600_000) as i64 * 1_000_000
        }))),
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|r| services[(r + seed as usize) % services.len()]),
        )),
    ];
    for a in 0..attributes {
        fields.push(Field::new(format!("attr_{a:02}"), DataType::Utf8, true));
        // Highly repetitive text: tiny when encoded, `width` bytes per row when decoded.
        let value = format!(
            "{a:02}-{}",
            "lorem ipsum dolor sit amet ".repeat(width / 27 + 1)
        );
        let value = &value[..width];
        columns.push(Arc::new(StringArray::from_iter_values((0..rows).map(
            |r| {
                if distinct {
                    let mut text = format!("{seed}-{r}-{value}");
                    text.truncate(width);
                    text
                } else {
                    value.to_string()
                }
            },
        ))));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch")
}

/// Output row groups per block each shape is compacted with.
const BLOCKS: [usize; 2] = [1, 8];

async fn run(
    files: Vec<RecordBatch>,
    rows_per_group: usize,
    budget: u64,
    fan_in: usize,
    blocks: usize,
) -> (CompactionReport, u64) {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let layout = KeyLayout::default();
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let dir = layout.ingest_dir(&partition);
    let mut encoded = 0u64;
    for (i, b) in files.iter().enumerate() {
        let bytes = parquet_bytes(std::slice::from_ref(b), rows_per_group);
        encoded += bytes.len() as u64;
        put_bytes(&store, &format!("{dir}/f{i:05}.parquet"), bytes).await;
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    options.settings.budget_bytes = budget;
    options.merge_fan_in = fan_in;
    options.settings.row_groups_per_block = blocks;
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Compacted).await;
    (report, encoded)
}

/// `count` batches of [`batch`], seeded `0..count`.
fn batches(
    partition: &PartitionId,
    count: u64,
    rows: usize,
    attributes: usize,
    width: usize,
    distinct: bool,
) -> Vec<RecordBatch> {
    (0..count)
        .map(|seed| batch(partition, rows, attributes, width, seed, distinct))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_inputs_within_the_encoded_budget_do_not_decode_at_once() {
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let files = batches(&partition, 600, 200, 4, 250, false);
    let decoded: u64 = files.iter().map(batch_memory_bytes).sum();
    // Encoded total is small: set B to twice it, as a skip-spill gate on encoded size would.
    let encoded: u64 = files
        .iter()
        .map(|b| parquet_bytes(std::slice::from_ref(b), 1000).len() as u64)
        .sum();
    let budget = 2 * encoded;
    assert!(
        decoded > 4 * budget,
        "fixture: decoded {decoded} must dwarf B {budget}"
    );
    for blocks in BLOCKS {
        let (report, _) = run(files.clone(), 1000, budget, DEFAULT_MERGE_FAN_IN, blocks).await;
        assert!(report.runs_spilled > 1, "{report:?}");
        assert!(
            report.peak_decoded_bytes <= budget + budget / 2 + MIB / 2,
            "blocks of {blocks}: peak {} over B {budget} plus one batch",
            report.peak_decoded_bytes
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_rows_merge_within_the_byte_budget() {
    let files = batches(&test_partition(), 12, 1500, 40, 250, true);
    let budget = 8 * MIB;
    for blocks in BLOCKS {
        let (report, _) = run(files.clone(), 500, budget, 4, blocks).await;
        assert!(report.runs_spilled > 4, "{report:?}");
        assert!(
            report.merge_passes > 1,
            "fan-in 4 must merge hierarchically: {report:?}"
        );
        assert!(
            report.peak_decoded_bytes <= budget + budget / 2 + MIB,
            "blocks of {blocks}: peak {} over B {budget}",
            report.peak_decoded_bytes
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_huge_input_with_a_single_row_group_is_read_in_batches() {
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let file = batch(&partition, 200_000, 2, 200, 3, false);
    let decoded = batch_memory_bytes(&file);
    let budget = 4 * MIB;
    assert!(decoded > 20 * budget, "fixture: decoded {decoded}");
    for blocks in BLOCKS {
        let (report, _) = run(
            vec![file.clone()],
            usize::MAX,
            budget,
            DEFAULT_MERGE_FAN_IN,
            blocks,
        )
        .await;
        assert!(report.runs_spilled > 5, "{report:?}");
        assert!(
            report.peak_decoded_bytes <= budget + budget / 2 + MIB / 2,
            "blocks of {blocks}: peak {} over B {budget}",
            report.peak_decoded_bytes
        );
    }
}

//! Property tests of the external sort through the whole driver, on an in-memory store:
//! under any budget, fan-in and output layout (row groups per block, row cap) the output
//! holds exactly the input rows, in key order, with equal keys in tie-break order (input
//! ordinal by basename, then row ordinal).

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use object_store::memory::InMemory;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    TestRow, compact_expecting, get_bytes, multi_thread_runtime, parquet_bytes, put_bytes,
    read_parquet, rows_batch,
};
use parquet::file::reader::{FileReader, SerializedFileReader};
use proptest::prelude::*;

const SERVICES: [Option<&str>; 5] = [None, Some("a"), Some("ab"), Some("b"), Some("zz")];

fn expected_order(files: &[Vec<TestRow>]) -> Vec<i64> {
    let mut all: Vec<&TestRow> = files.iter().flatten().collect();
    // Stable: equal keys keep (file, row) order, the tie-break.
    all.sort_by(|a, b| (a.0.is_some(), &a.0, a.1).cmp(&(b.0.is_some(), &b.0, b.1)));
    all.iter().map(|r| r.2).collect()
}

fn tags(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let col = b.column_by_name("tag").expect("tag column");
            col.as_primitive::<Int64Type>().values().to_vec()
        })
        .collect()
}

fn files_strategy() -> impl Strategy<Value = Vec<Vec<(usize, i64)>>> {
    prop::collection::vec(
        prop::collection::vec((0..SERVICES.len(), 0i64..50), 1..400),
        1..7,
    )
}

/// The output layout of a case: row groups per block and the row cap per row group.
#[derive(Debug, Clone, Copy)]
struct OutputLayout {
    blocks: usize,
    max_rows: Option<u64>,
}

const PLAIN: OutputLayout = OutputLayout {
    blocks: 1,
    max_rows: None,
};

fn run_case(
    files: Vec<Vec<(usize, i64)>>,
    budget: u64,
    fan_in: usize,
    rows_per_group: usize,
    output: OutputLayout,
) {
    let partition = PartitionId::parse("t", "2026-11-29T10").expect("partition");
    let (start, _) = partition.time_range_nanos();
    let mut tag = 0;
    let files: Vec<Vec<TestRow>> = files
        .into_iter()
        .map(|rows| {
            rows.into_iter()
                .map(|(s, t)| {
                    tag += 1;
                    (SERVICES[s].map(str::to_string), start + t * 1_000_000, tag)
                })
                .collect()
        })
        .collect();
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let layout = KeyLayout::default();
        let dir = layout.ingest_dir(&partition);
        for (i, rows) in files.iter().enumerate() {
            let key = format!("{dir}/f{i:03}.parquet");
            put_bytes(
                &store,
                &key,
                parquet_bytes(&[rows_batch(rows)], rows_per_group),
            )
            .await;
        }
        let scratch = tempfile::tempdir().expect("scratch");
        let mut options = CompactOptions::new(scratch.path());
        options.settings.budget_bytes = budget;
        options.merge_fan_in = fan_in;
        options.settings.row_groups_per_block = output.blocks;
        options.settings.max_rows_per_row_group = output.max_rows;
        let report =
            compact_expecting(&store, &layout, &partition, &options, Status::Compacted).await;
        let out = report.output.expect("an output");
        let batches = read_parquet(&store, &out.key).await;
        assert_eq!(tags(&batches), expected_order(&files), "{output:?}");
        let footer = SerializedFileReader::new(get_bytes(&store, &out.key).await).expect("footer");
        let row_groups = footer.metadata().row_groups();
        assert_eq!(
            out.row_groups,
            row_groups.len() as u64,
            "the report counts row groups"
        );
        if let Some(max) = output.max_rows {
            assert!(
                row_groups.iter().all(|rg| rg.num_rows() as u64 <= max),
                "row cap {max}"
            );
        }
        let leftover: Vec<_> = std::fs::read_dir(scratch.path().join("ourios-compaction"))
            .map(|d| d.flatten().collect())
            .unwrap_or_default();
        assert!(leftover.is_empty(), "scratch must be empty after the job");
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn external_sort_equals_stable_in_memory_sort(
        files in files_strategy(),
        budget_kib in 16u64..256,
        fan_in in 2usize..6,
        rows_per_group in 1usize..200,
        blocks in prop::sample::select(vec![1usize, 2, 4, 8]),
        max_rows in prop::option::of(1u64..300),
    ) {
        let output = OutputLayout { blocks, max_rows };
        run_case(files, budget_kib << 10, fan_in, rows_per_group, output);
    }
}

#[test]
fn fits_in_memory_without_spilling() {
    run_case(
        vec![vec![(1, 5), (0, 3), (3, 1)], vec![(1, 5), (2, 0)]],
        64 << 20,
        64,
        10,
        PLAIN,
    );
}

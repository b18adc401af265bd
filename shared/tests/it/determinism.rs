//! Invariant 9: the same inputs give a byte-identical output whatever the listing order,
//! the budget (no spill, spill, hierarchical merge) and the number of runtime threads, in
//! the plain layout and with row groups grouped in blocks.

use std::sync::Arc;

use object_store::memory::InMemory;
use ourios_compaction::options::{CompactOptions, DEFAULT_MERGE_FAN_IN};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::CompactionReport;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    ReversedListingStore, TestRow, compact_to_bytes, multi_thread_runtime, parquet_bytes,
    put_bytes, rows_batch, tied_key_files,
};

/// The eight tie-heavy input files of this test.
fn inputs(partition: &PartitionId) -> Vec<Vec<TestRow>> {
    tied_key_files(partition, 0x9e37_79b9_7f4a_7c15)
}

fn compact(
    threads: usize,
    budget: u64,
    fan_in: usize,
    reversed: bool,
    blocks: usize,
) -> (CompactionReport, Vec<u8>) {
    multi_thread_runtime(threads).block_on(async {
        let memory = Arc::new(InMemory::new());
        let store = if reversed {
            Store::from_object_store(Arc::new(ReversedListingStore::new(memory)), "reversed")
        } else {
            Store::from_object_store(memory, "memory://")
        };
        let layout = KeyLayout::default();
        let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
        let dir = layout.ingest_dir(&partition);
        for (i, rows) in inputs(&partition).iter().enumerate() {
            let key = format!("{dir}/ingest-{i:04}.parquet");
            put_bytes(&store, &key, parquet_bytes(&[rows_batch(rows)], 700)).await;
        }
        let scratch = tempfile::tempdir().expect("scratch");
        let mut options = CompactOptions::new(scratch.path());
        options.settings.budget_bytes = budget;
        options.merge_fan_in = fan_in;
        options.settings.row_group_bytes = Some(64 << 10);
        options.settings.row_groups_per_block = blocks;
        if blocks > 1 {
            options.settings.max_rows_per_row_group = Some(1500);
        }
        compact_to_bytes(&store, &layout, &partition, &options).await
    })
}

#[test]
fn byte_identical_across_listing_order_budget_and_threads() {
    for blocks in [1, 4, 8] {
        assert_byte_identical(blocks);
    }
}

fn assert_byte_identical(blocks: usize) {
    let (in_memory, reference) = compact(2, 64 << 20, 64, false, blocks);
    assert_eq!(
        in_memory.runs_spilled, 0,
        "the large budget must skip spilling"
    );
    assert!(in_memory.output.as_ref().expect("output").row_groups > blocks as u64);

    let (spilled, bytes) = compact(1, 48 << 10, 3, true, blocks);
    assert!(
        spilled.runs_spilled > 3,
        "a small budget must spill runs: {spilled:?}"
    );
    assert!(
        spilled.merge_passes > 1,
        "fan-in 3 must merge hierarchically: {spilled:?}"
    );
    assert_eq!(
        bytes, reference,
        "blocks of {blocks}: spilled output differs from the in-memory one"
    );
    // Each attempt names its output `part-<input-set hash>-<job id>`: the hash part is the same.
    assert_eq!(
        spilled.output.as_ref().map(|o| input_set_hash(&o.key)),
        in_memory.output.as_ref().map(|o| input_set_hash(&o.key))
    );

    let (_, bytes) = compact(4, 300 << 10, DEFAULT_MERGE_FAN_IN, false, blocks);
    assert_eq!(
        bytes, reference,
        "blocks of {blocks}: output differs with 4 threads and another budget"
    );
}

/// The input-set hash of an output key `…/part-<hash>-<job id>.parquet`.
fn input_set_hash(key: &str) -> String {
    let name = key.rsplit('/').next().unwrap_or(key);
    let rest = name.strip_prefix("part-").unwrap_or(name);
    rest.split('-').next().unwrap_or(rest).to_string()
}

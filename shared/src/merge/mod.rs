//! K-way merge of sorted runs with a fan-in cap and hierarchical passes beyond it.
//!
//! Each open run holds one decoded batch; the heap orders runs by (current key, run
//! ordinal), so equal keys leave in run order. Picked rows are gathered into chunks of a
//! fixed row count, so the chunk sequence the sink sees depends only on the merged order,
//! never on how the rows were split into runs or batches.

mod cursor;

use arrow::array::RecordBatch;
use arrow::compute::interleave_record_batch;
use arrow::datatypes::SchemaRef;

pub use cursor::RunSource;
use cursor::{Advance, Cursor};

use crate::budget::MemoryGauge;
use crate::error::{Error, Result};
use crate::key::SortKey;
use crate::runs::{RunReader, RunWriter, ScratchDir, SortedRun, SpillCompression};
use crate::sink::ChunkSink;

/// What a merge did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Passes over the data (1 when all runs fit one fan-in).
    pub passes: u32,
    /// Intermediate runs written by hierarchical passes.
    pub intermediate_runs: u32,
    /// Bytes written to scratch by intermediate passes.
    pub intermediate_bytes: u64,
}

/// Settings of a merge.
#[derive(Debug, Clone, Copy)]
pub struct MergeSettings {
    /// Maximum runs merged at once.
    pub fan_in: usize,
    /// Rows per chunk handed to the final sink.
    pub chunk_rows: usize,
    /// Decoded bytes per batch of intermediate runs (each reader's share of the budget).
    pub run_batch_target_bytes: u64,
    /// Compression of intermediate runs.
    pub compression: SpillCompression,
}

/// Merges spilled runs into `sink`, in passes of at most `fan_in` runs; earlier sources in
/// `sources` win ties. Intermediate runs live in `scratch` and are removed once merged.
pub fn merge_runs(
    sources: Vec<RunSource>,
    schema: &SchemaRef,
    key: &SortKey,
    settings: MergeSettings,
    scratch: &ScratchDir,
    gauge: &MemoryGauge,
    sink: &mut dyn ChunkSink,
) -> Result<MergeStats> {
    let mut stats = MergeStats::default();
    let mut sources = sources;
    while sources.len() > settings.fan_in {
        stats.passes += 1;
        let mut next = Vec::new();
        let mut rest = sources.into_iter();
        loop {
            let group: Vec<RunSource> = rest.by_ref().take(settings.fan_in).collect();
            if group.is_empty() {
                break;
            }
            if group.len() == 1 {
                next.extend(group);
                continue;
            }
            let mut writer = RunWriter::create(
                scratch.file("merged", "arrow"),
                schema,
                settings.compression,
            )?;
            let removable: Vec<_> = group.iter().filter_map(|s| s.spilled_path()).collect();
            let row_bytes = group
                .iter()
                .map(RunSource::max_row_bytes)
                .max()
                .unwrap_or(1);
            let rows = (settings.run_batch_target_bytes / row_bytes.max(1)).clamp(1, 1024);
            merge_pass(group, key, rows as usize, gauge, &mut writer)?;
            let run: SortedRun = writer.finish()?;
            for path in removable {
                std::fs::remove_file(&path).map_err(|e| Error::scratch(&path, e))?;
            }
            stats.intermediate_runs += 1;
            stats.intermediate_bytes += run.file_bytes;
            next.push(RunSource::Spilled(run));
        }
        sources = next;
    }
    stats.passes += 1;
    merge_pass(sources, key, settings.chunk_rows, gauge, sink)?;
    Ok(stats)
}

/// Opens a spilled run for merging.
pub(crate) fn open_run(run: &SortedRun) -> Result<RunReader> {
    RunReader::open(&run.path)
}

/// One merge of at most fan-in runs into a sink.
fn merge_pass(
    sources: Vec<RunSource>,
    key: &SortKey,
    chunk_rows: usize,
    gauge: &MemoryGauge,
    sink: &mut dyn ChunkSink,
) -> Result<()> {
    let mut cursors = Vec::with_capacity(sources.len());
    for source in sources {
        if let Some(c) = Cursor::open(source, key, gauge)? {
            cursors.push(c);
        }
    }
    // Batches referenced by picks not yet emitted; a cursor's current batch is always here.
    let mut slots: Vec<RecordBatch> = Vec::with_capacity(cursors.len() * 2);
    for c in &mut cursors {
        c.slot = slots.len();
        slots.push(c.batch().clone());
    }
    let mut picks: Vec<(usize, usize)> = Vec::with_capacity(chunk_rows);
    let mut heap: Vec<usize> = (0..cursors.len()).collect();
    let less = |cursors: &[Cursor], a: usize, b: usize| -> bool {
        match cursors[a].cmp_current(&cursors[b]) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => a < b,
        }
    };
    build_heap(&mut heap, |a, b| less(&cursors, a, b));

    while let Some(&top) = heap.first() {
        picks.push((cursors[top].slot, cursors[top].position()));
        let advance = cursors[top].advance(key, gauge)?;
        match advance {
            Advance::SameBatch => {}
            Advance::NewBatch => {
                cursors[top].slot = slots.len();
                slots.push(cursors[top].batch().clone());
            }
            Advance::Exhausted => {
                let last = heap.len() - 1;
                heap.swap(0, last);
                heap.pop();
            }
        }
        sift_down(&mut heap, 0, |a, b| less(&cursors, a, b));
        if picks.len() == chunk_rows {
            emit(&mut slots, &mut picks, &mut cursors, sink)?;
        }
    }
    if !picks.is_empty() {
        emit(&mut slots, &mut picks, &mut cursors, sink)?;
    }
    Ok(())
}

fn emit(
    slots: &mut Vec<RecordBatch>,
    picks: &mut Vec<(usize, usize)>,
    cursors: &mut [Cursor],
    sink: &mut dyn ChunkSink,
) -> Result<()> {
    let refs: Vec<&RecordBatch> = slots.iter().collect();
    let chunk = interleave_record_batch(&refs, picks)
        .map_err(|e| Error::arrow("gathering merged rows", e))?;
    sink.write_chunk(&chunk)?;
    picks.clear();
    // Keep only the batches cursors still read from.
    let mut kept = Vec::with_capacity(cursors.len());
    for c in cursors.iter_mut().filter(|c| !c.is_exhausted()) {
        c.slot = kept.len();
        kept.push(c.batch().clone());
    }
    *slots = kept;
    Ok(())
}

fn build_heap(heap: &mut [usize], less: impl Fn(usize, usize) -> bool) {
    for i in (0..heap.len() / 2).rev() {
        sift_down(heap, i, &less);
    }
}

fn sift_down(heap: &mut [usize], mut i: usize, less: impl Fn(usize, usize) -> bool) {
    loop {
        let l = 2 * i + 1;
        let r = l + 1;
        let mut smallest = i;
        if l < heap.len() && less(heap[l], heap[smallest]) {
            smallest = l;
        }
        if r < heap.len() && less(heap[r], heap[smallest]) {
            smallest = r;
        }
        if smallest == i {
            return;
        }
        heap.swap(i, smallest);
        i = smallest;
    }
}

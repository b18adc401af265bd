//! K-way merge of sorted runs with a fan-in cap and hierarchical passes beyond it.
//!
//! Each open run holds one decoded batch; the heap orders runs by (current key, run
//! ordinal), so equal keys leave in run order. Picked rows are gathered into chunks of a
//! fixed row count, so the chunk sequence the sink sees depends only on the merged order,
//! never on how the rows were split into runs or batches.

mod cursor;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

pub use cursor::RunSource;
use cursor::{Advance, BatchIter, Cursor};

use crate::error::{Error, Result};
use crate::gauge::{Charge, MemoryGauge, batch_memory_bytes};
use crate::scratch::ScratchDir;
use crate::sort::gather::gather_rows;
use crate::sort::key::SortKey;
use crate::sort::resources::MemoryRelease;
use crate::sort::runs::{
    RUN_READ_BUFFER_BYTES, RunReader, RunWriter, SortedRun, SpillCompression, StringDecoder,
    run_batch_rows,
};
use crate::sort::sink::ChunkSink;

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
    /// Most runs merged at once, whatever their batches.
    pub fan_in: usize,
    /// Runs the batch target is sized for: a pass opens at least this many (or `fan_in`, if
    /// fewer), and more while their largest batches fit the same memory.
    pub sized_fan_in: usize,
    /// Rows per chunk handed to the final sink.
    pub chunk_rows: usize,
    /// Decoded bytes per batch of intermediate runs (each reader's share of the budget).
    pub run_batch_target_bytes: u64,
    /// Compression of intermediate runs.
    pub compression: SpillCompression,
    /// Bytes of merged rows between two releases of the allocator's free memory (see
    /// [`MemoryRelease`]; 0: never).
    pub release_interval_bytes: u64,
    /// Release only while the resident set is at least this (`None`: whatever it is).
    pub release_above_bytes: Option<u64>,
}

impl MergeSettings {
    /// The release of free memory these settings ask for.
    fn release(&self) -> MemoryRelease {
        MemoryRelease::every(self.release_interval_bytes).above(self.release_above_bytes)
    }

    /// Runs one pass over `sources` opens at once: as many as the memory set aside for
    /// `sized_fan_in` runs' batches and read buffers (plus one batch for the chunk being
    /// gathered) holds of the sources' largest batch and a read buffer each, between
    /// `sized_fan_in` and `fan_in`. Runs of one schema are held as written (string columns
    /// as codes); otherwise the merge decodes them as it reads them.
    fn pass_fan_in(&self, sources: &[RunSource]) -> usize {
        let cap = self.fan_in.max(2);
        let sized = self.sized_fan_in.clamp(2, cap);
        let target = self.run_batch_target_bytes.max(1);
        let memory = (sized as u64 + 1) * target + sized as u64 * RUN_READ_BUFFER_BYTES;
        let decoded = common_run_schema(sources).is_none();
        let largest = (sources.iter())
            .map(|s| s.batch_bytes(target, decoded))
            .max()
            .unwrap_or(target);
        let by_memory = (memory / (largest + RUN_READ_BUFFER_BYTES)).saturating_sub(1);
        usize::try_from(by_memory)
            .unwrap_or(usize::MAX)
            .clamp(sized, cap)
    }
}

/// Merges spilled runs into `sink`, in passes of at most `fan_in` runs; earlier sources in
/// `sources` win ties. Intermediate runs live in `scratch` and are removed once merged.
///
/// Runs may hold coded string columns (see [`StringCoder`](crate::sort::runs::StringCoder)):
/// runs of one schema are merged as they are and `decoder` turns the final chunks back into
/// strings; where a pass mixes schemas (a column stopped being coded, or an already sorted
/// input joins), the runs are decoded as they are read.
///
/// An intermediate pass merges only as many runs as it takes to bring the count down to
/// the fan-in (70 runs at fan-in 64: one group of 7 from the tail, then one final merge of
/// 64), so little data is written twice; beyond fan-in squared runs a pass merges groups of
/// the fan-in throughout. Groups are runs next to each other and each merged run takes its
/// group's place, so the order of ties is unchanged.
pub fn merge_runs(
    sources: Vec<RunSource>,
    key: &SortKey,
    settings: MergeSettings,
    scratch: &ScratchDir,
    gauge: &MemoryGauge,
    sink: &mut dyn ChunkSink,
    decoder: &Arc<StringDecoder>,
) -> Result<MergeStats> {
    let fan_in = settings.pass_fan_in(&sources);
    tracing::debug!(runs = sources.len(), fan_in, "merging");
    let mut stats = MergeStats::default();
    let mut sources = sources;
    while sources.len() > fan_in {
        stats.passes += 1;
        let mut groups = Vec::new();
        if sources.len() > fan_in * fan_in {
            let mut rest = sources.into_iter();
            loop {
                let group: Vec<RunSource> = rest.by_ref().take(fan_in).collect();
                if group.is_empty() {
                    break;
                }
                groups.push(group);
            }
        } else {
            // Each merged group of g runs removes g - 1 of them; take groups from the tail.
            let mut excess = sources.len() - fan_in;
            let mut tail = Vec::new();
            while excess > 0 {
                let size = (excess + 1).min(fan_in);
                tail.push(sources.split_off(sources.len() - size));
                excess -= size - 1;
            }
            groups.extend(sources.into_iter().map(|s| vec![s]));
            groups.extend(tail.into_iter().rev());
        }
        let mut next = Vec::with_capacity(groups.len());
        for group in groups {
            if group.len() == 1 {
                next.extend(group);
                continue;
            }
            let run = merge_to_run(group, key, &settings, scratch, gauge, decoder)?;
            stats.intermediate_runs += 1;
            stats.intermediate_bytes += run.file_bytes;
            next.push(RunSource::Spilled(run));
        }
        sources = next;
    }
    stats.passes += 1;
    let mut decoding = DecodingSink { decoder, sink };
    merge_pass(
        sources,
        key,
        (settings.chunk_rows, settings.release()),
        gauge,
        &mut decoding,
        decoder,
    )?;
    Ok(stats)
}

/// Merges a group of runs into one intermediate run and removes the group's spilled files.
fn merge_to_run(
    group: Vec<RunSource>,
    key: &SortKey,
    settings: &MergeSettings,
    scratch: &ScratchDir,
    gauge: &MemoryGauge,
    decoder: &Arc<StringDecoder>,
) -> Result<SortedRun> {
    let schema = common_run_schema(&group).unwrap_or_else(|| Arc::clone(decoder.unified()));
    let mut writer = RunWriter::create(
        scratch.file("merged", "arrow"),
        &schema,
        settings.compression,
    )?;
    let removable: Vec<_> = group.iter().filter_map(|s| s.spilled_path()).collect();
    let row_bytes = group
        .iter()
        .map(RunSource::max_row_bytes)
        .max()
        .unwrap_or(1);
    let rows = run_batch_rows(settings.run_batch_target_bytes, row_bytes);
    let chunking = (rows, settings.release());
    merge_pass(group, key, chunking, gauge, &mut writer, decoder)?;
    let run = writer.finish()?;
    for path in removable {
        std::fs::remove_file(&path).map_err(|e| Error::scratch(&path, e))?;
    }
    Ok(run)
}

/// Opens a spilled run for merging; with a `decoder`, its coded columns are read as strings.
pub(crate) fn open_run(run: &SortedRun, decoder: Option<&Arc<StringDecoder>>) -> Result<BatchIter> {
    let reader = RunReader::open(&run.path)?;
    Ok(match decoder.cloned() {
        None => Box::new(reader),
        Some(decoder) => Box::new(reader.map(move |batch| decoder.decode(&batch?))),
    })
}

/// The schema of `sources` when all are spilled runs of one schema.
fn common_run_schema(sources: &[RunSource]) -> Option<SchemaRef> {
    let mut schemas = sources.iter().map(|s| match s {
        RunSource::Spilled(run) => Some(&run.schema),
        RunSource::Presorted { .. } => None,
    });
    let first = schemas.next()??;
    schemas.all(|s| s == Some(first)).then(|| Arc::clone(first))
}

/// Decodes coded columns of the chunks it passes on.
struct DecodingSink<'a> {
    decoder: &'a StringDecoder,
    sink: &'a mut dyn ChunkSink,
}

impl ChunkSink for DecodingSink<'_> {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        self.sink.write_chunk(&self.decoder.decode(chunk)?)
    }

    fn end_row_group(&mut self) -> Result<()> {
        self.sink.end_row_group()
    }
}

/// One merge of at most fan-in runs into a sink, in chunks of `chunk_rows`, releasing the
/// allocator's free memory as `release` says (noting every chunk). Runs of one schema are
/// merged as they are; otherwise `decoder` decodes them as they are read.
fn merge_pass(
    sources: Vec<RunSource>,
    key: &SortKey,
    (chunk_rows, mut release): (usize, MemoryRelease),
    gauge: &MemoryGauge,
    sink: &mut dyn ChunkSink,
    decoder: &Arc<StringDecoder>,
) -> Result<()> {
    let read_decoder = match common_run_schema(&sources) {
        Some(_) => None,
        None => Some(decoder),
    };
    let mut cursors = Vec::with_capacity(sources.len());
    for source in sources {
        if let Some(c) = Cursor::open(source, key, gauge, read_decoder)? {
            cursors.push(c);
        }
    }
    // Batches referenced by picks not yet emitted; a cursor's current batch is always here.
    let mut slots: Vec<RecordBatch> = Vec::with_capacity(cursors.len() * 2);
    // The charges of the batches cursors left that are still in `slots`: they are held until
    // the next chunk is gathered, so they stay charged until then.
    let mut left: Vec<Charge> = Vec::new();
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
            Advance::NewBatch(charge) => {
                left.push(charge);
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
            release.note(emit(&mut slots, &mut picks, &mut cursors, sink)?);
            left.clear();
        }
    }
    if !picks.is_empty() {
        emit(&mut slots, &mut picks, &mut cursors, sink)?;
    }
    Ok(())
}

/// Gathers the picked rows into one chunk for `sink`; returns the chunk's bytes.
fn emit(
    slots: &mut Vec<RecordBatch>,
    picks: &mut Vec<(usize, usize)>,
    cursors: &mut [Cursor],
    sink: &mut dyn ChunkSink,
) -> Result<u64> {
    let refs: Vec<&RecordBatch> = slots.iter().collect();
    let chunk = gather_rows(&refs, picks).map_err(|e| Error::arrow("gathering merged rows", e))?;
    sink.write_chunk(&chunk)?;
    let chunk_bytes = batch_memory_bytes(&chunk);
    picks.clear();
    // Keep only the batches cursors still read from, moved to the front in place: a merge of
    // hundreds of runs would otherwise clone every cursor's batch for every chunk. Each slot a
    // cursor reads is marked, then numbered in slot order (a cursor's slot is its own).
    let mut moved_to = vec![usize::MAX; slots.len()];
    for c in cursors.iter().filter(|c| !c.is_exhausted()) {
        moved_to[c.slot] = 0;
    }
    let mut kept = 0;
    for (slot, to) in moved_to.iter_mut().enumerate() {
        if *to != usize::MAX {
            slots.swap(kept, slot);
            *to = kept;
            kept += 1;
        }
    }
    slots.truncate(kept);
    for c in cursors.iter_mut().filter(|c| !c.is_exhausted()) {
        c.slot = moved_to[c.slot];
    }
    Ok(chunk_bytes)
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::input::schema::UnifiedSchema;
    use crate::scratch::ScratchDir;
    use crate::sort::runs::{RunWriter, StringCoder};
    use crate::sort::sink::VecSink;

    /// `count` runs of three rows each, in batches of `batch_rows`; every run holds the same
    /// keys, so only the tie-break (run order) orders rows of equal keys. Column `run` says
    /// which run a row came from.
    fn runs(
        scratch: &ScratchDir,
        schema: &SchemaRef,
        count: usize,
        batch_rows: usize,
    ) -> Vec<RunSource> {
        (0..count)
            .map(|r| {
                let batch = RecordBatch::try_new(
                    Arc::clone(schema),
                    vec![
                        Arc::new(StringArray::from(vec!["a", "a", "b"])),
                        Arc::new(Int64Array::from(vec![1, 2, 1])),
                        Arc::new(Int64Array::from(vec![r as i64; 3])),
                    ],
                )
                .unwrap();
                let mut writer =
                    RunWriter::create(scratch.file("run", "arrow"), schema, SpillCompression::None)
                        .unwrap();
                for start in (0..batch.num_rows()).step_by(batch_rows) {
                    let rows = batch_rows.min(batch.num_rows() - start);
                    writer.write(&batch.slice(start, rows)).unwrap();
                }
                RunSource::Spilled(writer.finish().unwrap())
            })
            .collect()
    }

    /// Merges `count` runs at `fan_in`: the stats, the rows, and the run files left in
    /// scratch (the final pass's inputs; merged groups are removed as they are merged).
    fn merge(count: usize, fan_in: usize) -> (MergeStats, Vec<(String, i64, i64)>, usize) {
        let (stats, rows, files, _) = merge_in_batches(count, (fan_in, fan_in, 1 << 10), 3);
        (stats, rows, files)
    }

    /// What [`merge_in_batches`] returns: [`merge`]'s figures and (the gauge's peak, the
    /// smallest batch of a run as read back).
    type Merged = (MergeStats, Vec<(String, i64, i64)>, usize, (u64, u64));

    /// [`merge`] of runs in batches of `batch_rows` at (fan-in cap, sized fan-in, batch
    /// target), also returning the gauge's peak and the smallest batch of a run as read back.
    fn merge_in_batches(
        count: usize,
        (fan_in, sized_fan_in, target): (usize, usize, u64),
        batch_rows: usize,
    ) -> Merged {
        let dir = tempfile::tempdir().unwrap();
        let scratch = ScratchDir::create(dir.path()).unwrap();
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("service.name", DataType::Utf8, true),
            Field::new("time_unix_nano", DataType::Int64, false),
            Field::new("run", DataType::Int64, false),
        ]));
        let key = SortKey::new(&UnifiedSchema {
            schema: Arc::clone(&schema),
            service_index: Some(0),
            time_path: vec![1],
            time_unit: Default::default(),
            sort_paths: vec![vec![0], vec![1]],
        })
        .unwrap();
        let settings = MergeSettings {
            fan_in,
            sized_fan_in,
            chunk_rows: 5,
            run_batch_target_bytes: target,
            compression: SpillCompression::None,
            release_interval_bytes: 1 << 10,
            release_above_bytes: None,
        };
        let mut sink = VecSink::default();
        let sources = runs(&scratch, &schema, count, batch_rows);
        let smallest_batch = match &sources[0] {
            RunSource::Spilled(run) => (crate::sort::runs::RunReader::open(&run.path).unwrap())
                .map(|b| batch_memory_bytes(&b.unwrap()))
                .min()
                .unwrap(),
            RunSource::Presorted { .. } => unreachable!("spilled runs"),
        };
        let gauge = MemoryGauge::new();
        let unified = UnifiedSchema {
            schema: Arc::clone(&schema),
            service_index: Some(0),
            time_path: vec![1],
            time_unit: Default::default(),
            sort_paths: vec![vec![0], vec![1]],
        };
        let decoder = Arc::new(StringCoder::new(&unified, 0, &gauge).decoder());
        let pass_fan_in = settings.pass_fan_in(&sources);
        let stats = merge_runs(
            sources, &key, settings, &scratch, &gauge, &mut sink, &decoder,
        )
        .unwrap();
        // Every open run's read buffer was charged with its batch, and all was released.
        let open_runs = count.min(pass_fan_in) as u64;
        assert!(gauge.peak() >= open_runs * crate::sort::runs::RUN_READ_BUFFER_BYTES);
        assert_eq!(gauge.current(), 0);
        let mut rows = Vec::new();
        for chunk in &sink.chunks {
            let services = chunk.column(0).as_string::<i32>();
            let times = chunk.column(1).as_primitive::<Int64Type>();
            let run = chunk.column(2).as_primitive::<Int64Type>();
            for i in 0..chunk.num_rows() {
                rows.push((services.value(i).to_string(), times.value(i), run.value(i)));
            }
        }
        (
            stats,
            rows,
            scratch.num_files(),
            (gauge.peak(), smallest_batch),
        )
    }

    fn expected(count: usize) -> Vec<(String, i64, i64)> {
        let mut rows = Vec::new();
        for (service, time) in [("a", 1), ("a", 2), ("b", 1)] {
            rows.extend((0..count as i64).map(|r| (service.to_string(), time, r)));
        }
        rows
    }

    #[test]
    fn an_extra_pass_merges_only_the_excess_runs() {
        // 7 runs at fan-in 4: one group of the last 4, then a final merge of 4.
        let (stats, rows, files) = merge(7, 4);
        assert_eq!((stats.passes, stats.intermediate_runs, files), (2, 1, 4));
        assert_eq!(rows, expected(7));
    }

    #[test]
    fn beyond_fan_in_squared_passes_merge_full_groups() {
        // 20 runs at fan-in 4: 5 groups of 4, then one group of 2 (5 -> 4), then the final.
        let (stats, rows, files) = merge(20, 4);
        assert_eq!((stats.passes, stats.intermediate_runs, files), (3, 6, 4));
        assert_eq!(rows, expected(20));
    }

    #[test]
    fn batches_cursors_left_stay_charged_until_their_rows_are_gathered() {
        // Two runs of one-row batches, chunks of 5 rows: the first chunk picks a row from
        // each of 4 batches its cursors then leave, which wait with the 2 current ones.
        let (_, rows, _, (peak, batch)) = merge_in_batches(2, (4, 4, 1 << 10), 1);
        assert_eq!(rows, expected(2));
        let readers = 2 * crate::sort::runs::RUN_READ_BUFFER_BYTES;
        assert!(peak >= readers + 6 * batch, "peak {peak}, batch {batch}");
    }

    /// A spilled run whose largest batch takes `batch_bytes`, of rows of `row_bytes`.
    fn spilled(batch_bytes: u64, row_bytes: u64) -> RunSource {
        RunSource::Spilled(SortedRun {
            path: "run.arrow".into(),
            rows: 1 << 20,
            file_bytes: 1 << 30,
            max_batch_bytes: batch_bytes,
            max_row_bytes: row_bytes,
            schema: Arc::new(Schema::empty()),
        })
    }

    #[test]
    fn a_pass_opens_as_many_runs_as_their_batches_fit_between_the_sized_fan_in_and_the_cap() {
        let settings = |fan_in| MergeSettings {
            fan_in,
            sized_fan_in: 64,
            chunk_rows: 1024,
            run_batch_target_bytes: 600 << 10,
            compression: SpillCompression::None,
            release_interval_bytes: 0,
            release_above_bytes: None,
        };
        let reader = RUN_READ_BUFFER_BYTES;
        let memory = 65 * (600 << 10) + 64 * reader;
        // Narrow rows: batches of 1,024 rows of 163 bytes, well under their share.
        let narrow: Vec<_> = (0..3).map(|_| spilled(1024 * 163, 163)).collect();
        let fits = (memory / (1024 * 163 + reader) - 1) as usize;
        assert!(fits > 200, "{fits}");
        assert_eq!(settings(512).pass_fan_in(&narrow), fits);
        assert_eq!(settings(100).pass_fan_in(&narrow), 100);
        // Runs of one schema are held as written: coded strings make them smaller still.
        let coded = vec![spilled(1024 * 40, 163), spilled(1024 * 40, 163)];
        let fits_coded = (memory / (1024 * 40 + reader) - 1) as usize;
        assert!(fits_coded > fits, "{fits_coded}");
        assert_eq!(settings(512).pass_fan_in(&coded), fits_coded.min(512));
        // A pass that mixes them with a run of another schema (a column stopped being
        // coded) decodes them as it reads them: counted at 1,024 rows of their decoded width.
        let mut mixed = coded;
        if let RunSource::Spilled(mut run) = spilled(1024 * 40, 163) {
            run.schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
            mixed.push(RunSource::Spilled(run));
        }
        assert_eq!(settings(512).pass_fan_in(&mixed), fits);
        // An already sorted input is read in batches of its share: the sized fan-in.
        mixed.push(RunSource::Presorted {
            name: "compacted".into(),
            batches: Box::new(std::iter::empty()),
            row_bytes: 163,
        });
        assert_eq!(settings(512).pass_fan_in(&mixed), 64);
        // Wide rows fill their share: the sized fan-in, as before.
        let wide = vec![spilled(600 << 10, 10 << 10), spilled(1024 * 163, 163)];
        assert_eq!(settings(512).pass_fan_in(&wide), 64);
        // A batch larger than its share (one row wider than it) opens no fewer runs.
        let wider = vec![spilled(2 << 20, 2 << 20)];
        assert_eq!(settings(512).pass_fan_in(&wider), 64);
        // Never more than the cap, even when it is below the sized fan-in.
        assert_eq!(settings(16).pass_fan_in(&wide), 16);
    }

    #[test]
    fn runs_of_batches_smaller_than_their_share_merge_past_the_sized_fan_in_in_one_pass() {
        // Batches sized for 4 runs of 1 MiB, but holding 3 rows: counted at 1,024 rows of
        // their width (a few hundred bytes in buffers this small), the memory of 4 runs holds
        // more than 7.
        let target = 1 << 20;
        let (stats, rows, files, (peak, _)) = merge_in_batches(7, (16, 4, target), 3);
        assert_eq!((stats.passes, stats.intermediate_runs, files), (1, 0, 7));
        assert_eq!(rows, expected(7));
        let sized_memory = 5 * target + 4 * RUN_READ_BUFFER_BYTES;
        assert!(peak <= sized_memory, "peak {peak} over {sized_memory}");
        // The cap still binds: at 4 the same runs take an extra pass.
        let (capped, rows, _, _) = merge_in_batches(7, (4, 4, target), 3);
        assert_eq!((capped.passes, capped.intermediate_runs), (2, 1));
        assert_eq!(rows, expected(7));
    }

    #[test]
    fn runs_within_the_fan_in_merge_in_one_pass() {
        let (stats, rows, files) = merge(4, 4);
        assert_eq!((stats.passes, stats.intermediate_runs, files), (1, 0, 4));
        assert_eq!(rows, expected(4));
    }
}

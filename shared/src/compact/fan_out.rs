//! Fan-out: a partition compacted into several outputs by tasks that can run anywhere and give
//! the same bytes.
//!
//! 1. **Runs**: the inputs, in ordinal order, are cut into contiguous groups of about equal
//!    bytes; each group is staged, checked and sorted by the engine into a run object
//!    ([`KeyLayout::run_key`]), a sorted Parquet file like any output.
//! 2. **Split**: boundaries from the runs' row-group statistics cut the key space into ranges
//!    of about equal bytes ([`split_points`]), a pure function of the runs.
//! 3. **Merge**: each range is merged from the row groups of every run that can hold its
//!    keys, fetched with range reads and read as presorted runs, into one output; rows are
//!    kept by key, so every row lands in exactly one range.
//! 4. **Commit**: the caller's one manifest version makes the outputs live and retires every
//!    input; the runs are deleted once merged (a crash leaves them to GC as orphans).
//!
//! Each step depends only on what the one before wrote, so the outputs are byte-identical
//! however many tasks run at once ([`CompactOptions::workers`]). Equal keys keep the order of
//! the unfanned job: a range holds every row of a key, and the merge breaks ties by run, which
//! is by input.

use std::fs::File;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::metadata::ParquetMetaData;

use super::{
    JobContext, OutputTarget, Produced, SortedGroup, WantedInput, WriteJob, Written,
    input_set_hash, sort_and_write, sort_group,
};
use crate::error::{Error, Result};
use crate::gauge::MemoryGauge;
use crate::input::schema::{UnifiedSchema, unify};
use crate::input::type_union::time_nanos;
use crate::input::{CheckedInput, READER_BYTES_PER_COLUMN, StagedInput};
use crate::options::{CompactOptions, FanOut, KeyColumns, SORT_KEY_METADATA};
use crate::output::threshold::resolve_row_group_bytes;
use crate::partition::{KeyLayout, PartitionId};
use crate::read::planned_reader::PlannedReader;
use crate::read::split::{row_group_spans, row_groups_in_range, split_points};
use crate::report::{FanOutShape, OutputFile, Quarantined};
use crate::scratch::ScratchDir;
use crate::sort::SortStats;
use crate::sort::key::KeyRange;
use crate::store::Store;

/// Scratch bytes one task needs per byte of encoded input: the staged copy, and spilled runs
/// of about the pages' uncompressed size (LZ4), which is about twice the encoded size of
/// zstd-compressed logs.
const SCRATCH_PER_INPUT_BYTE: u64 = 3;

/// Encoded input bytes one task sorts per second, a conservative reading of the benchmark
/// (the 610 MB hour in about 24 s at a 64 MiB budget): `auto` fans out a job that would not
/// finish before the deadline at this pace.
const INPUT_BYTES_PER_SECOND: u64 = 16 << 20;

/// How the job fans out: `None` for one task and one output.
pub(crate) fn shape(wanted: &[WantedInput], options: &CompactOptions) -> Option<FanOutShape> {
    let total: u64 = wanted.iter().map(|w| w.bytes).sum();
    let ranges = match options.fan_out {
        FanOut::Off => return None,
        FanOut::Ranges(n) => n,
        FanOut::Auto => auto_ranges(total, options.scratch_limit_bytes, options.deadline),
    };
    (ranges > 1 && !wanted.is_empty()).then(|| FanOutShape {
        groups: ranges.min(wanted.len()),
        ranges,
    })
}

/// The tasks `auto` needs so that each fits the scratch limit and the time before the deadline.
fn auto_ranges(total_bytes: u64, scratch_limit: Option<u64>, deadline: Option<Instant>) -> usize {
    let by_scratch = scratch_limit.map_or(1, |limit| {
        total_bytes
            .saturating_mul(SCRATCH_PER_INPUT_BYTE)
            .div_ceil(limit.max(1))
    });
    let by_time = deadline.map_or(1, |deadline| {
        let seconds = deadline.saturating_duration_since(Instant::now()).as_secs();
        let per_task = seconds.saturating_mul(INPUT_BYTES_PER_SECOND).max(1);
        total_bytes.div_ceil(per_task)
    });
    usize::try_from(by_scratch.max(by_time).max(1)).unwrap_or(usize::MAX)
}

/// Contiguous groups of the inputs in ordinal order, of about equal bytes: input `i` goes to
/// group `⌊bytes before it × groups / total⌋` (by count when no input has bytes); groups left
/// empty by a large input are dropped.
pub(crate) fn group_inputs(wanted: Vec<WantedInput>, groups: usize) -> Vec<Vec<WantedInput>> {
    let total: u128 = wanted.iter().map(|w| u128::from(w.bytes)).sum();
    let mut out: Vec<Vec<WantedInput>> = (0..groups.max(1)).map(|_| Vec::new()).collect();
    let mut before: u128 = 0;
    let count = out.len();
    let inputs = wanted.len();
    for (i, input) in wanted.into_iter().enumerate() {
        let group = (before * count as u128)
            .checked_div(total)
            .map_or(i * count / inputs.max(1), |g| {
                usize::try_from(g).unwrap_or(count - 1)
            });
        before += u128::from(input.bytes);
        out[group.min(count - 1)].push(input);
    }
    out.retain(|g| !g.is_empty());
    out
}

/// What a task needs, owned, so tasks can run on threads of their own.
#[derive(Clone)]
struct OwnedJob {
    store: Store,
    layout: KeyLayout,
    partition: PartitionId,
    options: CompactOptions,
    gauge: MemoryGauge,
    attempt_id: String,
}

impl OwnedJob {
    fn context(&self) -> JobContext<'_> {
        JobContext {
            store: &self.store,
            layout: &self.layout,
            partition: &self.partition,
            options: &self.options,
            gauge: &self.gauge,
            attempt_id: &self.attempt_id,
        }
    }

    fn scratch(&self) -> Result<ScratchDir> {
        ScratchDir::create_with_limit(&self.options.scratch_dir, self.options.scratch_limit_bytes)
    }
}

/// Steps 2 to 4 fanned out: runs, split, merges.
pub(crate) async fn produce(
    job: &JobContext<'_>,
    wanted: Vec<WantedInput>,
    shape: FanOutShape,
) -> Result<Produced> {
    let owned = OwnedJob {
        store: job.store.clone(),
        layout: job.layout.clone(),
        partition: job.partition.clone(),
        options: job.options.clone(),
        gauge: job.gauge.clone(),
        attempt_id: job.attempt_id.to_string(),
    };
    let workers = job.options.workers;

    // Step 1: runs.
    let groups = group_inputs(wanted, shape.groups);
    let shape = FanOutShape {
        groups: groups.len(),
        ranges: shape.ranges,
    };
    let sorted: Vec<SortedGroup> =
        run_tasks(workers, groups.into_iter().enumerate(), |(g, inputs)| {
            let owned = owned.clone();
            async move {
                let job = owned.context();
                let scratch = owned.scratch()?;
                let key = owned.layout.run_key(&owned.partition, &owned.attempt_id, g);
                sort_group(&job, inputs, &scratch, &OutputTarget::Run(key)).await
            }
        })
        .await?;
    let runs: Vec<OutputFile> = (sorted.iter())
        .filter_map(|s| s.written.as_ref().map(|w| w.output.clone()))
        .collect();
    let mut consumed = Vec::new();
    let mut quarantined: Vec<Quarantined> = Vec::new();
    let mut stats = SortStats::default();
    let mut rows = 0;
    for group in sorted {
        consumed.extend(group.consumed);
        quarantined.extend(group.quarantined);
        rows += group.rows;
        if let Some(w) = &group.written {
            add_stats(&mut stats, &w.stats);
        }
    }
    quarantined.sort_by(|a, b| a.file.cmp(&b.file));

    // Steps 2 and 3: split and merge. Every range output names the whole job's input set.
    let input_bytes: u64 = consumed.iter().map(|c| c.bytes).sum();
    let row_group_bytes = resolve_row_group_bytes(job.options.row_group_bytes, input_bytes);
    let inputs = consumed.iter().map(|c| (&c.key, c.bytes));
    let input_set = input_set_hash(inputs, row_group_bytes, job.options, Some(shape.ranges));
    let merged = merge_ranges(&owned, &runs, shape.ranges, input_bytes, &input_set).await;
    delete_runs(job.store, &runs).await;
    let outputs = merged?;
    for w in &outputs {
        add_stats(&mut stats, &w.stats);
    }
    let written_rows: u64 = outputs.iter().map(|w| w.output.rows).sum();
    if written_rows != rows {
        delete_outputs_now(job.store, &outputs).await;
        return Err(Error::invariant(format!(
            "the ranges hold {written_rows} rows but the inputs hold {rows}"
        )));
    }
    Ok(Produced {
        consumed,
        rows,
        quarantined,
        outputs,
        stats,
        fan_out: Some(shape),
    })
}

fn add_stats(total: &mut SortStats, more: &SortStats) {
    total.runs_spilled += more.runs_spilled;
    total.merge_passes += more.merge_passes;
    total.spill_bytes += more.spill_bytes;
}

/// Steps 2 and 3: the split points of the runs, then one merge task per range, whose output
/// is named `part-<input set>-<attempt>-r<range>`.
async fn merge_ranges(
    owned: &OwnedJob,
    runs: &[OutputFile],
    ranges: usize,
    input_bytes: u64,
    input_set: &str,
) -> Result<Vec<Written>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let keys = &owned.options.keys;
    let mut footers = Vec::with_capacity(runs.len());
    let mut spans = Vec::new();
    for run in runs {
        let key = crate::store::key_path(&run.key)?;
        let metadata = PlannedReader::new(Arc::clone(owned.store.object_store()), key)
            .load_metadata()
            .await?;
        spans.extend(row_group_spans(&metadata, keys));
        footers.push(metadata);
    }
    let points = split_points(&spans, ranges);
    let footers = Arc::new(footers);
    let runs = Arc::new(runs.to_vec());
    let range_count = points.len() + 1;
    let written = run_tasks(owned.options.workers, 0..range_count, |index| {
        let owned = owned.clone();
        let (footers, runs) = (Arc::clone(&footers), Arc::clone(&runs));
        let range = KeyRange::of_split(&points, index);
        let input_set = input_set.to_string();
        async move {
            let target = RangeTarget {
                index,
                input_bytes,
                input_set,
            };
            merge_range(&owned, &runs, &footers, &range, &target).await
        }
    })
    .await?;
    Ok(written.into_iter().flatten().collect())
}

/// The output of one range.
struct RangeTarget {
    /// The range's index.
    index: usize,
    /// Encoded bytes of the job's inputs (every range's row-group threshold).
    input_bytes: u64,
    /// The job's input set (hash).
    input_set: String,
}

/// One merge task: the rows of `range` from every run into one output (`None` when the range
/// holds no row).
async fn merge_range(
    owned: &OwnedJob,
    runs: &[OutputFile],
    footers: &[Arc<ParquetMetaData>],
    range: &KeyRange,
    target: &RangeTarget,
) -> Result<Option<Written>> {
    let job = owned.context();
    let keys = &owned.options.keys;
    let scratch = owned.scratch()?;
    let mut inputs = Vec::new();
    let mut schemas = Vec::new();
    for (ordinal, (run, metadata)) in runs.iter().zip(footers).enumerate() {
        let key = crate::store::key_path(&run.key)?;
        let arrow = ArrowReaderMetadata::try_new(Arc::clone(metadata), ArrowReaderOptions::new())
            .map_err(|e| Error::parquet(run.key.clone(), e))?;
        schemas.push((run.key.clone(), Arc::clone(arrow.schema())));
        let row_groups = row_groups_in_range(metadata, keys, range);
        if row_groups.is_empty() {
            continue;
        }
        let local = stage_row_groups(
            &owned.store,
            &key,
            run.bytes,
            metadata,
            &row_groups,
            &scratch,
            ordinal,
        )
        .await?;
        let staged = StagedInput {
            name: key.filename().unwrap_or_default().to_string(),
            key,
            size: run.bytes,
            local,
            is_compacted: true,
        };
        let input = range_input(staged, metadata, &arrow, row_groups, keys, range)?;
        if input.rows > 0 {
            inputs.push(input);
        }
    }
    if inputs.is_empty() {
        return Ok(None);
    }
    // Every range unifies every run, so all the outputs have one schema.
    let named: Vec<(&str, &arrow::datatypes::Schema)> = schemas
        .iter()
        .map(|(k, s)| (k.as_str(), s.as_ref()))
        .collect();
    let (unified, rejected) = unify(&named, keys);
    let unified: UnifiedSchema = match (unified, rejected.first()) {
        (Some(unified), None) => unified,
        (_, Some(rejection)) => {
            return Err(Error::invariant(format!(
                "the runs of one job do not unify: {}",
                rejection.reason
            )));
        }
        (None, None) => return Err(Error::invariant("the runs of one job have no schema")),
    };
    let write = WriteJob {
        inputs: &inputs,
        unified: &unified,
        threshold_input_bytes: target.input_bytes,
        range: Some(range),
    };
    let name = |_row_group_bytes: u64| {
        let attempt = format!("{}-r{:05}", owned.attempt_id, target.index);
        let key = (owned.layout).output_key(&owned.partition, &target.input_set, &attempt);
        (key, target.input_set.clone())
    };
    match sort_and_write(&job, &scratch, &write, &name).await? {
        Ok(written) => Ok(Some(written)),
        Err((position, reason)) => Err(Error::invariant(format!(
            "run {} of this job is unreadable: {reason}",
            inputs[position].staged.key
        ))),
    }
}

/// A run read for one range: its selected row groups, the rows of the range among them
/// counted, sizes from the footer (the run is this job's own file, written by the engine).
fn range_input(
    staged: StagedInput,
    metadata: &ParquetMetaData,
    arrow: &ArrowReaderMetadata,
    row_groups: Vec<usize>,
    keys: &KeyColumns,
    range: &KeyRange,
) -> Result<CheckedInput> {
    let mut uncompressed_bytes = 0u64;
    let mut row_bytes_estimate = 1u64;
    let mut reader_bytes_estimate = 0u64;
    for &i in &row_groups {
        let rg = metadata.row_group(i);
        let bytes = u64::try_from(rg.total_byte_size()).unwrap_or(0);
        uncompressed_bytes += bytes;
        if let Ok(rows) = u64::try_from(rg.num_rows())
            && rows > 0
        {
            row_bytes_estimate = row_bytes_estimate.max(bytes.div_ceil(rows));
        }
        let reader: u64 = (rg.columns().iter())
            .map(|c| {
                u64::try_from(c.uncompressed_size())
                    .unwrap_or(0)
                    .min(READER_BYTES_PER_COLUMN)
            })
            .sum();
        reader_bytes_estimate = reader_bytes_estimate.max(reader);
    }
    let declared_sort_key = (metadata.file_metadata().key_value_metadata())
        .and_then(|kv| kv.iter().find(|e| e.key == SORT_KEY_METADATA))
        .and_then(|e| e.value.clone());
    let mut input = CheckedInput {
        staged,
        schema: Arc::clone(arrow.schema()),
        rows: 0,
        uncompressed_bytes,
        row_bytes_estimate,
        reader_bytes_estimate,
        declared_sort_key,
        row_groups: Some(row_groups),
    };
    input.rows = rows_in_range(&input, keys, range)?;
    Ok(input)
}

/// Rows of the input's selected row groups whose key is in `range`, reading the key columns.
fn rows_in_range(input: &CheckedInput, keys: &KeyColumns, range: &KeyRange) -> Result<u64> {
    let path = &input.staged.local;
    let name = input.staged.key.to_string();
    let file = File::open(path).map_err(|e| Error::scratch(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| Error::parquet(name.clone(), e))?;
    let schema = Arc::clone(builder.schema());
    let time = schema
        .index_of(&keys.time)
        .map_err(|_| Error::invariant(format!("{name} has no column {}", keys.time)))?;
    let service = schema.index_of(&keys.service).ok();
    let mask = ProjectionMask::roots(builder.parquet_schema(), service.into_iter().chain([time]));
    let mut builder = builder.with_projection(mask).with_batch_size(64 * 1024);
    if let Some(row_groups) = &input.row_groups {
        builder = builder.with_row_groups(row_groups.clone());
    }
    let reader = builder
        .build()
        .map_err(|e| Error::parquet(name.clone(), e))?;
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| Error::arrow(format!("reading {name}"), e))?;
        let time = batch
            .column_by_name(&keys.time)
            .ok_or_else(|| Error::invariant("the time column went missing"))?;
        let times =
            time_nanos(time.as_ref()).map_err(|e| Error::arrow("reading the time key", e))?;
        let services = match batch.column_by_name(&keys.service) {
            Some(column) => Some(
                cast(column, &DataType::Utf8)
                    .map_err(|e| Error::arrow("reading the service column", e))?,
            ),
            None => None,
        };
        let strings = services.as_ref().map(|s| s.as_string::<i32>());
        for i in 0..batch.num_rows() {
            let service = strings.and_then(|s| s.is_valid(i).then(|| s.value(i).as_bytes()));
            rows += u64::from(range.contains(service, times.value(i)));
        }
    }
    Ok(rows)
}

/// A local file holding what a reader of `row_groups` of the object needs: the object itself
/// for a local directory store; otherwise a sparse file of the object's size with only the
/// footer and those row groups' column chunks fetched (one ranged request each, coalesced by
/// the store).
async fn stage_row_groups(
    store: &Store,
    key: &Path,
    size: u64,
    metadata: &ParquetMetaData,
    row_groups: &[usize],
    scratch: &ScratchDir,
    ordinal: usize,
) -> Result<std::path::PathBuf> {
    if let Some(path) = store.read_in_place(key) {
        return Ok(path);
    }
    let tail = store
        .object_store()
        .get_range(key, size.saturating_sub(8)..size)
        .await
        .map_err(|e| Error::store("get", key, e))?;
    let footer_len = tail
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| Error::invariant(format!("{key} is shorter than a Parquet footer")))?;
    let footer = size.saturating_sub(8 + u64::from(footer_len))..size;
    let mut ranges = Vec::from([footer]);
    for &i in row_groups {
        for column in metadata.row_group(i).columns() {
            let (start, len) = column.byte_range();
            ranges.push(start..start + len);
        }
    }
    let parts = store
        .object_store()
        .get_ranges(key, &ranges)
        .await
        .map_err(|e| Error::store("get", key, e))?;
    let local = scratch
        .path()
        .join(format!("run-range-{ordinal:05}.parquet"));
    let write = {
        let local = local.clone();
        move || -> std::io::Result<()> {
            use std::os::unix::fs::FileExt;
            let file = File::create(&local)?;
            file.set_len(size)?;
            for (range, bytes) in ranges.iter().zip(&parts) {
                file.write_all_at(bytes, range.start)?;
            }
            Ok(())
        }
    };
    tokio::task::spawn_blocking(write)
        .await
        .map_err(|e| Error::invariant(format!("staging task failed: {e}")))?
        .map_err(|e| Error::scratch(&local, e))?;
    Ok(local)
}

/// Runs `task` on each input, at most `workers` at once, each on a Tokio task of its own;
/// results in input order. The first failure aborts the tasks not yet finished.
async fn run_tasks<T, R, F, Fut>(
    workers: usize,
    inputs: impl IntoIterator<Item = T>,
    task: F,
) -> Result<Vec<R>>
where
    R: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<R>> + Send + 'static,
{
    let permits = Arc::new(tokio::sync::Semaphore::new(workers.max(1)));
    let mut set = tokio::task::JoinSet::new();
    let mut count = 0;
    for (i, input) in inputs.into_iter().enumerate() {
        let permits = Arc::clone(&permits);
        let work = task(input);
        set.spawn(async move {
            let _permit = permits
                .acquire_owned()
                .await
                .map_err(|e| Error::invariant(format!("task permits: {e}")))?;
            work.await.map(|r| (i, r))
        });
        count += 1;
    }
    let mut results: Vec<Option<R>> = (0..count).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, result) =
            joined.map_err(|e| Error::invariant(format!("a fan-out task failed: {e}")))??;
        results[i] = Some(result);
    }
    Ok(results.into_iter().flatten().collect())
}

/// Deletes the runs once merged (best effort: GC sweeps what is left).
async fn delete_runs(store: &Store, runs: &[OutputFile]) {
    for run in runs {
        super::delete_quietly(store, &run.key).await;
    }
}

async fn delete_outputs_now(store: &Store, outputs: &[Written]) {
    for w in outputs {
        super::delete_quietly(store, &w.output.key).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(sizes: &[u64]) -> Vec<WantedInput> {
        (sizes.iter().enumerate())
            .map(|(i, &bytes)| WantedInput {
                key: Path::from(format!("data/f{i}.parquet")),
                bytes,
                is_compacted: false,
            })
            .collect()
    }

    fn group_sizes(sizes: &[u64], groups: usize) -> Vec<Vec<u64>> {
        group_inputs(wanted(sizes), groups)
            .iter()
            .map(|g| g.iter().map(|w| w.bytes).collect())
            .collect()
    }

    #[test]
    fn groups_are_contiguous_and_about_equal_in_bytes() {
        assert_eq!(
            group_sizes(&[10, 10, 10, 10, 10, 10], 3),
            [[10, 10], [10, 10], [10, 10]]
        );
        // A large input takes a group of its own; the groups it leaves empty are dropped.
        assert_eq!(group_sizes(&[100, 1, 1], 3), [vec![100], vec![1, 1]]);
        // No bytes: by count.
        assert_eq!(group_sizes(&[0, 0, 0, 0], 2), [[0, 0], [0, 0]]);
        assert_eq!(group_sizes(&[5], 4), [[5]]);
    }

    #[test]
    fn auto_fans_out_only_past_the_limits() {
        let gib = 1u64 << 30;
        assert_eq!(auto_ranges(10 * gib, None, None), 1);
        // Three bytes of scratch per input byte.
        assert_eq!(auto_ranges(gib, Some(3 * gib), None), 1);
        assert_eq!(auto_ranges(gib, Some(gib), None), 3);
        assert_eq!(auto_ranges(10 * gib, Some(10 * gib), None), 3);
        // Time: 16 MiB a second.
        let deadline = Instant::now() + std::time::Duration::from_secs(100);
        assert_eq!(auto_ranges(800 << 20, None, Some(deadline)), 1);
        assert_eq!(auto_ranges(5600 << 20, None, Some(deadline)), 4);
        // A forced number of ranges, and off.
        let mut options = CompactOptions::new("/tmp");
        let inputs = wanted(&[10, 10]);
        assert_eq!(shape(&inputs, &options), None);
        options.fan_out = FanOut::Ranges(4);
        assert_eq!(
            shape(&inputs, &options),
            Some(FanOutShape {
                groups: 2,
                ranges: 4
            })
        );
        options.fan_out = FanOut::Ranges(1);
        assert_eq!(shape(&inputs, &options), None);
    }
}

//! The tasks of a fanned-out job, each a function of what the store holds, so any host can run
//! any of them: here on threads, on Lambda one invocation each.
//!
//! A job's state lives beside its runs, in `compacted/<partition>/runs/<job id>/`: `plan.json`
//! (the base manifest version, the groups and the number of ranges), `run-<g>.json` (what a
//! group's task consumed, quarantined and wrote), `split.json` (the runs and the boundaries) and
//! `range-<k>.json` (a range's output). A task reads what the steps before it wrote and writes
//! its own record last, so a record present means its task completed; a task that runs again
//! writes the same bytes under the same keys.

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::Schema;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::admission::admit;
use super::range_read::{FOOTER_PREFETCH_BYTES, footer, stage_range};
use crate::clock::Expiry;
use crate::compact::committing::delete_all_quietly;
use crate::compact::job::JobContext;
use crate::compact::producing::{OutputTarget, Produced, sort_group};
use crate::compact::sizing::{Footers, Sizing};
pub use crate::compact::staging::Refusals;
use crate::compact::state::WantedInput;
use crate::compact::writing::{WriteJob, Written, input_set_hash, sort_and_write};
use crate::error::{Error, Result};
use crate::input::schema::unify;
use crate::manifest::OutputRange;
use crate::object_key::ObjectKey;
use crate::output::threshold::resolve_row_group_bytes;
use crate::read::planned_reader::PlannedReader;
use crate::read::split::{row_group_spans, row_groups_in_range, split_points};
use crate::report::{FanOutShape, OutputFile, OversizedInput, Quarantined};
use crate::scratch::ScratchDir;
use crate::sort::SortStats;
use crate::sort::key::{KeyPoint, KeyRange};
use crate::store::upload::LAST_MODIFIED_RESOLUTION_MS;

/// An input of the job, as its plan records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedInput {
    /// Object key.
    pub key: ObjectKey,
    /// Its size when listed.
    pub bytes: u64,
    /// An earlier output of the partition (a presorted run).
    pub is_compacted: bool,
}

/// Step 1's decision (`plan.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanOutPlan {
    /// The manifest version the live set was read at: the commit's base.
    pub manifest_version: u64,
    /// Key ranges to split into.
    pub ranges: usize,
    /// The inputs of each group, in ordinal order.
    pub groups: Vec<Vec<PlannedInput>>,
    /// Inputs the partition's union of columns refused (see `fan_out::admission`), quarantined
    /// by the commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<Quarantined>,
    /// Readable inputs too large for any task, left live (see `compact::sizing`), reported by
    /// the commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oversized: Vec<OversizedInput>,
}

/// What a group's task did (`run-<g>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRun {
    /// The run written (`None` when no input of the group held a row).
    pub run: Option<OutputFile>,
    /// Inputs read and sorted, or valid and empty: retired by the commit.
    pub consumed: Vec<PlannedInput>,
    /// Rows they hold.
    pub rows: u64,
    /// Bad inputs.
    pub quarantined: Vec<Quarantined>,
    /// How the store answered the group's reads (the commit fails a job whose every input the
    /// store refused).
    #[serde(default)]
    pub refusals: Refusals,
    /// The sort's work.
    pub stats: SortStats,
}

/// The split (`split.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    /// Every run, in group order.
    pub runs: Vec<OutputFile>,
    /// The boundaries: range `k` is `[points[k-1], points[k])`.
    pub points: Vec<KeyPoint>,
    /// Encoded bytes of every consumed input (each range's row-group threshold).
    pub input_bytes: u64,
    /// The job's input set (hash), in every output's name.
    pub input_set: String,
}

impl Split {
    /// Ranges to merge.
    pub fn ranges(&self) -> usize {
        if self.runs.is_empty() {
            0
        } else {
            self.points.len() + 1
        }
    }
}

/// What a range's task wrote (`range-<k>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeOutput {
    /// The output (`None` when the range holds no row).
    pub output: Option<OutputFile>,
    /// The row-group threshold it was written with.
    pub row_group_bytes: u64,
    /// The merge's work.
    pub stats: SortStats,
}

fn state_key(job: &JobContext<'_>, name: &str) -> Path {
    let dir = job.layout.fan_out_dir(job.partition, job.attempt_id);
    Path::from(format!("{dir}/{name}"))
}

async fn write_state<T: Serialize>(job: &JobContext<'_>, name: &str, value: &T) -> Result<()> {
    let key = state_key(job, name);
    let bytes =
        serde_json::to_vec(value).map_err(|e| Error::invariant(format!("encoding {key}: {e}")))?;
    job.store
        .object_store()
        .put(&key, PutPayload::from(bytes))
        .await
        .map_err(|e| Error::store("put", &key, e))?;
    Ok(())
}

async fn read_state<T: DeserializeOwned>(job: &JobContext<'_>, name: &str) -> Result<T> {
    let key = state_key(job, name);
    let bytes = job
        .store
        .object_store()
        .get(&key)
        .await
        .map_err(|e| Error::store("get", &key, e))?
        .bytes()
        .await
        .map_err(|e| Error::store("get", &key, e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Manifest {
        key: key.to_string(),
        message: format!("not a fan-out record of this version: {e}"),
    })
}

fn run_name(group: usize) -> String {
    format!("run-{group:05}.json")
}

fn range_name(range: usize) -> String {
    format!("range-{range:05}.json")
}

impl From<&WantedInput> for PlannedInput {
    fn from(w: &WantedInput) -> Self {
        PlannedInput {
            key: ObjectKey::from(&w.key),
            bytes: w.bytes,
            is_compacted: w.is_compacted,
        }
    }
}

impl PlannedInput {
    fn wanted(&self) -> WantedInput {
        WantedInput {
            key: self.key.location().clone(),
            bytes: self.bytes,
            is_compacted: self.is_compacted,
        }
    }
}

/// Step 1: records the plan of `groups` of the live inputs and `ranges` ranges, without the
/// inputs the partition's union of columns refuses ([`admit`], from the footers the sizing
/// read and the others) and those the sizing set aside as `oversized`.
pub(crate) async fn plan(
    job: &JobContext<'_>,
    manifest_version: u64,
    groups: Vec<Vec<WantedInput>>,
    ranges: usize,
    sizing: Sizing,
) -> Result<FanOutPlan> {
    let admission = admit(job, groups, &sizing.footers).await?;
    let plan = FanOutPlan {
        manifest_version,
        ranges,
        groups: (admission.groups.iter())
            .map(|g| g.iter().map(PlannedInput::from).collect())
            .collect(),
        rejected: admission.rejected,
        oversized: sizing.oversized,
    };
    write_state(job, "plan.json", &plan).await?;
    Ok(plan)
}

/// The job's plan, as step 1 recorded it.
pub(crate) async fn read_plan(job: &JobContext<'_>) -> Result<FanOutPlan> {
    read_state(job, "plan.json").await
}

/// The runs step for group `group`: stages, checks and sorts its inputs into its run object.
pub(crate) async fn run_group(job: &JobContext<'_>, group: usize) -> Result<GroupRun> {
    let plan = read_plan(job).await?;
    let inputs = plan.groups.get(group).ok_or_else(|| Error::Config {
        message: format!(
            "the plan has {} groups, not {}",
            plan.groups.len(),
            group + 1
        ),
    })?;
    let started = std::time::Instant::now();
    let wanted: Vec<WantedInput> = inputs.iter().map(PlannedInput::wanted).collect();
    let input_bytes: u64 = wanted.iter().map(|w| w.bytes).sum();
    let (first, count) = (wanted.first().map(|w| w.key.to_string()), wanted.len());
    let options = job.options;
    let scratch = ScratchDir::create_with_limit(
        &options.settings.scratch_dir,
        options.settings.scratch_limit_bytes,
    )?;
    let key = job.layout.run_key(job.partition, job.attempt_id, group);
    let sorted = sort_group(
        job,
        wanted,
        &Footers::new(),
        &scratch,
        &OutputTarget::Run(key),
    )
    .await?;
    let run = GroupRun {
        stats: sorted.written.as_ref().map(|w| w.stats).unwrap_or_default(),
        run: sorted.written.map(|w| w.output),
        consumed: (sorted.consumed.iter()).map(PlannedInput::from).collect(),
        rows: sorted.rows,
        quarantined: sorted.quarantined,
        refusals: sorted.refusals,
    };
    write_state(job, &run_name(group), &run).await?;
    // What a bench replays of the task's transfers (`tests/bench_transfers.sh`).
    tracing::info!(
        group,
        inputs = count,
        first = first.as_deref().unwrap_or(""),
        input_bytes,
        run_bytes = run.run.as_ref().map_or(0, |r| r.bytes),
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "fan-out: run task done"
    );
    Ok(run)
}

/// The job's split, as the split step recorded it.
pub(crate) async fn read_split(job: &JobContext<'_>) -> Result<Split> {
    read_state(job, "split.json").await
}

/// The split step: the boundaries of the runs' row groups into the plan's ranges, and the
/// job's input set.
pub(crate) async fn split(job: &JobContext<'_>) -> Result<Split> {
    let plan = read_plan(job).await?;
    let mut runs = Vec::new();
    let mut consumed = Vec::new();
    for group in 0..plan.groups.len() {
        let run: GroupRun = read_state(job, &run_name(group)).await?;
        runs.extend(run.run);
        consumed.extend(run.consumed);
    }
    let mut spans = Vec::new();
    let mut leaves = std::collections::BTreeSet::new();
    for run in &runs {
        let metadata = PlannedReader::new(
            Arc::clone(job.store.object_store()),
            run.key.location().clone(),
        )
        .with_footer_prefetch(run.bytes, FOOTER_PREFETCH_BYTES)
        .load_metadata()
        .await?;
        spans.extend(row_group_spans(&metadata, &job.options.keys));
        let schema = metadata.file_metadata().schema_descr();
        leaves.extend(schema.columns().iter().map(|c| c.path().string()));
    }
    // Each group kept its inputs' union within the leaf limit; the ranges merge every run.
    let limit = job.options.budget().shares().leaf_limit;
    if leaves.len() > limit {
        return Err(Error::TooWide {
            partition: job.partition.to_string(),
            leaves: leaves.len(),
            limit,
        });
    }
    let input_bytes: u64 = consumed.iter().map(|c| c.bytes).sum();
    let row_group_bytes =
        resolve_row_group_bytes(job.options.settings.row_group_bytes, input_bytes);
    let inputs = consumed.iter().map(|c| (c.key.location(), c.bytes));
    let split = Split {
        points: split_points(&spans, plan.ranges),
        runs,
        input_bytes,
        input_set: input_set_hash(inputs, row_group_bytes, job.options, Some(plan.ranges)),
    };
    write_state(job, "split.json", &split).await?;
    Ok(split)
}

/// The merge step for range `range`: its rows from every run into one output,
/// `part-<input set>-<job id>-r<range>`.
pub(crate) async fn merge(job: &JobContext<'_>, range: usize) -> Result<RangeOutput> {
    let split = read_split(job).await?;
    if range >= split.ranges() {
        return Err(Error::Config {
            message: format!("the split has {} ranges, not {}", split.ranges(), range + 1),
        });
    }
    let key_range = KeyRange::of_split(&split.points, range);
    let keys = &job.options.keys;
    let scratch = ScratchDir::create_with_limit(
        &job.options.settings.scratch_dir,
        job.options.settings.scratch_limit_bytes,
    )?;
    let mut inputs = Vec::new();
    let mut schemas = Vec::new();
    for (ordinal, run) in split.runs.iter().enumerate() {
        let (metadata, arrow) = footer(job, run.key.location(), run.bytes, &run.key).await?;
        schemas.push((run.key.clone(), Arc::clone(arrow.schema())));
        let row_groups = row_groups_in_range(&metadata, keys, &key_range);
        if row_groups.is_empty() {
            continue;
        }
        let input = stage_range(
            job, run, &metadata, &arrow, row_groups, &key_range, &scratch, ordinal,
        )
        .await?;
        if input.rows > 0 {
            inputs.push(input);
        }
    }
    let row_group_bytes =
        resolve_row_group_bytes(job.options.settings.row_group_bytes, split.input_bytes);
    let written = if inputs.is_empty() {
        None
    } else {
        // Every range unifies every run, so all the outputs have one schema.
        let named: Vec<(&str, &Schema)> = schemas
            .iter()
            .map(|(k, s)| (k.as_str(), s.as_ref()))
            .collect();
        let (unified, rejected) = unify(&named, keys);
        let unified = match (unified, rejected.first()) {
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
            threshold_input_bytes: split.input_bytes,
            range: Some(&key_range),
            arrivals: None,
            committed_here: false,
        };
        let name = |_: u64| {
            let attempt = format!("{}-r{range:05}", job.attempt_id);
            let key = job
                .layout
                .output_key(job.partition, &split.input_set, &attempt);
            (key, split.input_set.clone())
        };
        match sort_and_write(job, &scratch, &write, &name).await? {
            Ok(written) => Some(written),
            Err(stopped) => {
                return Err(Error::invariant(format!(
                    "run {} of this job is unreadable: {}",
                    inputs[stopped.position()].staged.key,
                    stopped.reason()
                )));
            }
        }
    };
    let output = RangeOutput {
        stats: written.as_ref().map(|w| w.stats).unwrap_or_default(),
        // The threshold the writer used (capped for a schema of many leaves).
        row_group_bytes: written
            .as_ref()
            .map_or(row_group_bytes, |w| w.row_group_bytes),
        output: written.map(|w| w.output),
    };
    write_state(job, &range_name(range), &output).await?;
    Ok(output)
}

/// Everything the job's tasks wrote, ready to commit: checked (every row of the inputs in
/// exactly one output, some input readable), its commit deadline taken on the store's clock.
/// The runs stay until the commit's outcome is definitive ([`delete_state`]).
pub(crate) async fn gather(job: &JobContext<'_>) -> Result<Produced> {
    let (mut produced, refusals) = recorded(job).await?;
    // Decided for the job, as one task decides: a group of one refused file is quarantined
    // when other groups were read.
    refusals.check(job.partition)?;
    produced.commit_by = commit_deadline(job, &produced.outputs).await?;
    Ok(produced)
}

/// What the job's tasks recorded, read from their records alone (every row of the inputs in
/// exactly one output), with how the store answered the groups' reads; no deadline.
pub(crate) async fn recorded(job: &JobContext<'_>) -> Result<(Produced, Refusals)> {
    let plan = read_plan(job).await?;
    let split = read_split(job).await?;
    let mut consumed = Vec::new();
    let mut quarantined: Vec<Quarantined> = Vec::new();
    let mut stats = SortStats::default();
    let mut rows = 0;
    let mut refusals = Refusals {
        read_any: !plan.rejected.is_empty(),
        first: None,
    };
    // The records are read as many at a time as the job downloads at once, used in order.
    let at_once = job.options.parallel_downloads.max(1);
    let runs: Vec<Result<GroupRun>> = futures::stream::iter(0..plan.groups.len())
        .map(|group| async move { read_state(job, &run_name(group)).await })
        .buffered(at_once)
        .collect()
        .await;
    for run in runs {
        let run = run?;
        consumed.extend(run.consumed.iter().map(PlannedInput::wanted));
        quarantined.extend(run.quarantined);
        refusals.merge(&run.refusals);
        rows += run.rows;
        add_stats(&mut stats, &run.stats);
    }
    quarantined.extend(plan.rejected.iter().cloned());
    quarantined.sort_by(|a, b| a.file.cmp(&b.file));
    let mut outputs = Vec::new();
    let ranges: Vec<Result<RangeOutput>> = futures::stream::iter(0..split.ranges())
        .map(|range| async move { read_state(job, &range_name(range)).await })
        .buffered(at_once)
        .collect()
        .await;
    for (range, output) in ranges.into_iter().enumerate() {
        let output = output?;
        add_stats(&mut stats, &output.stats);
        if let Some(file) = output.output {
            // The first output's range is open below; a range without rows joins the one
            // before it.
            let start = KeyRange::of_split(&split.points, range)
                .start
                .filter(|_| !outputs.is_empty());
            outputs.push((file, output.row_group_bytes, OutputRange { start }));
        }
    }
    let written_rows: u64 = outputs.iter().map(|(o, _, _)| o.rows).sum();
    if written_rows != rows {
        return Err(Error::invariant(format!(
            "the ranges hold {written_rows} rows but the inputs hold {rows}"
        )));
    }
    let written = outputs
        .into_iter()
        .map(|(output, row_group_bytes, range)| Written {
            output,
            input_set: split.input_set.clone(),
            row_group_bytes,
            stats: SortStats::default(),
            held_from_ms: None,
            put_from_ms: None,
            range: Some(range),
        })
        .collect();
    let produced = Produced {
        consumed,
        rows,
        quarantined,
        outputs: written,
        stats,
        fan_out: Some(FanOutShape {
            groups: plan.groups.len(),
            ranges: plan.ranges,
        }),
        commit_by: None,
    };
    Ok((produced, refusals))
}

/// When the commit of a job whose outputs its directory holds must land by (`None`: no grace).
/// The commit renews the directory (`commit.json`) and lists it: GC takes the outputs only of a
/// directory unchanged for twice the grace, so a commit within the grace of the renewal is
/// safe, unless the directory had already been idle that long before it (a stalled job, whose
/// outputs GC may have deleted: too late, a definitive end).
async fn commit_deadline(job: &JobContext<'_>, outputs: &[Written]) -> Result<Option<Expiry>> {
    let grace = job.options.settings.gc_grace;
    if grace == Duration::ZERO || outputs.is_empty() {
        return Ok(None);
    }
    let renewed_at = job.options.clock.monotonic_ms();
    let marker = state_key(job, "commit.json");
    job.store
        .object_store()
        .put(&marker, PutPayload::new())
        .await
        .map_err(|e| Error::store("put", &marker, e))?;
    let dir = job.layout.fan_out_dir(job.partition, job.attempt_id);
    let listing = job.store.list_sorted(&dir).await?;
    let renewal = (listing.iter().find(|o| o.location == marker))
        .map(|o| o.last_modified.timestamp_millis())
        .ok_or_else(|| Error::invariant(format!("{marker} is not listed after its write")))?;
    let before = (listing.iter().filter(|o| o.location != marker))
        .map(|o| o.last_modified.timestamp_millis())
        .max()
        .unwrap_or(i64::MIN);
    let idle_ms = i64::try_from(grace.saturating_mul(2).as_millis()).unwrap_or(i64::MAX);
    let resolution_ms = i64::try_from(LAST_MODIFIED_RESOLUTION_MS).unwrap_or(0);
    if before.saturating_add(idle_ms).saturating_sub(resolution_ms) <= renewal {
        return Err(Error::Deadline {
            partition: format!(
                "{} (the job's directory was idle for twice the grace before its commit)",
                job.partition
            ),
        });
    }
    let deadline = renewed_at.saturating_add(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX));
    Ok(Some(Expiry::at_monotonic(&job.options.clock, deadline)))
}

/// Deletes the job's records and its runs, once the job is over (committed, or failed for
/// good); its holds stay until [`release_holds`]. Best effort: GC sweeps what is left.
pub(crate) async fn delete_state(job: &JobContext<'_>, plan: &FanOutPlan, split: Option<&Split>) {
    let mut keys = vec![state_key(job, "plan.json"), state_key(job, "split.json")];
    for group in 0..plan.groups.len() {
        keys.push(state_key(job, &run_name(group)));
        keys.push(job.layout.run_key(job.partition, job.attempt_id, group));
    }
    for range in 0..split.map_or(0, Split::ranges) {
        keys.push(state_key(job, &range_name(range)));
    }
    delete_all_quietly(job, keys).await;
}

pub(crate) fn add_stats(total: &mut SortStats, more: &SortStats) {
    total.runs_spilled += more.runs_spilled;
    total.merge_passes += more.merge_passes;
    total.spill_bytes += more.spill_bytes;
}

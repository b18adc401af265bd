//! Fan-out: a partition compacted into several outputs by tasks that can run anywhere and give
//! the same bytes.
//!
//! 1. **Runs**: the inputs, in ordinal order, are cut into contiguous groups of about equal
//!    bytes; each group is staged, checked and sorted by the engine into a run object
//!    ([`KeyLayout::run_key`]), a sorted Parquet file like any output.
//! 2. **Split**: boundaries from the runs' row-group statistics cut the key space into ranges
//!    of about equal bytes ([`split_points`](crate::read::split::split_points)), a pure function of the runs.
//! 3. **Merge**: each range is merged from the row groups of every run that can hold its
//!    keys, fetched with range reads and read as presorted runs, into one output; rows are
//!    kept by key, so every row lands in exactly one range.
//! 4. **Commit**: the caller's one manifest version makes the outputs live and retires every
//!    input; the runs are deleted once merged (a crash leaves them to GC as orphans).
//!
//! Each step depends only on what the one before wrote, so the outputs are byte-identical
//! however many tasks run at once ([`CompactSettings::workers`](crate::settings::CompactSettings::workers)). Equal keys keep the order of
//! the unfanned job: a range holds every row of a key, and the merge breaks ties by run, which
//! is by input.

mod admission;
mod into_ranges;
mod range_read;
pub mod tasks;

use std::future::Future;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::json;

pub(crate) use into_ranges::{merges_into_ranges, produce_into_ranges};

use crate::compact::committing::{commit_produced, release_holds};
use crate::compact::job::{CommittedLiveSet, GarbageMark, JobContext, JobRun};
use crate::compact::producing::{Produced, produce_one, settle_without_rows};
use crate::compact::sizing::{Prepared, Sizing, size_job};
use crate::compact::state::{WantedInput, read_job_state, read_partition};
use crate::error::{Error, ErrorKind, Result};
use crate::gauge::MemoryGauge;
use crate::manifest::symlink::read_symlink;
use crate::manifest::{Manifest, load_latest, unaddressable_inputs};
use crate::options::{CompactOptions, FanOut};
use crate::partition::{KeyLayout, PartitionId};
use crate::report::{CompactionReport, FanOutShape, OutputFile, Status};
use crate::store::Store;

/// The steps of a fanned-out job, as the state machine names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FanOutStep {
    /// Reads the live set and records the plan (a new job).
    Plan,
    /// Sorts group `index` into its run.
    Run,
    /// Splits the runs into ranges.
    Split,
    /// Merges range `index` into its output.
    Merge,
    /// Commits the outputs.
    Commit,
}

/// One task of a fanned-out job, as the state machine sends it to the compactor:
/// `{"fan_out": {"step": "merge", "tenant": "acme", "hour": "2026-11-29T10", "job": "…",
/// "index": 3}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanOutTask {
    /// Which step.
    pub step: FanOutStep,
    /// The partition's tenant (null, or absent, in a layout without tenants).
    #[serde(default)]
    pub tenant: Option<String>,
    /// The partition's hour, `YYYY-MM-DDTHH`.
    pub hour: String,
    /// The job (every step but `plan`, which names it unless given one: the compactor that
    /// starts an execution passes its dispatch job id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The group of `run`, the range of `merge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// `plan`: the ranges to split into (default: what `auto` needs under the function's
    /// limits, at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<usize>,
}

/// Runs one task and answers what the next state needs: `plan` the job and its group indexes
/// (`"job": null` when the partition has nothing to compact), `run` the group's run, `split`
/// the range indexes, `merge` the range's output, `commit` the compaction report.
pub async fn run_fan_out_task(
    store: &Store,
    layout: &KeyLayout,
    options: &CompactOptions,
    task: &FanOutTask,
) -> Result<TaskAnswer> {
    let partition = layout.partition(task.tenant.as_deref(), &task.hour)?;
    let needed = |what: &str, value: Option<&str>| {
        value.map(str::to_string).ok_or_else(|| Error::Config {
            message: format!("a fan-out {:?} task needs its {what}", task.step),
        })
    };
    let job_id = match (task.step, &task.job) {
        (FanOutStep::Plan, None) => (options.attempt_id.clone())
            .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>())),
        _ => needed("job", task.job.as_deref())?,
    };
    validate_job_id(&job_id)?;
    let index = || {
        task.index.ok_or_else(|| Error::Config {
            message: format!("a fan-out {:?} task needs its index", task.step),
        })
    };
    let gauge = MemoryGauge::new();
    let garbage_mark = GarbageMark::default();
    let job = JobContext {
        store,
        layout,
        partition: &partition,
        options,
        gauge: &gauge,
        attempt_id: &job_id,
        garbage_mark: &garbage_mark,
    };
    let answer = match task.step {
        FanOutStep::Plan => {
            let state = read_partition(store, layout, &partition).await?;
            let Some(wanted) = state.wanted else {
                let hour = &task.hour;
                return Ok(TaskAnswer::Next(
                    json!({ "tenant": task.tenant, "hour": hour, "job": null, "groups": [] }),
                ));
            };
            let mut sizing = size_job(&job, wanted).await?;
            let ranges = task.ranges.unwrap_or_else(|| {
                let mut auto = options.clone();
                auto.settings.fan_out = FanOut::Auto;
                shape(&sizing, &auto).map_or(1, |s| s.ranges)
            });
            let groups = group_inputs(std::mem::take(&mut sizing.wanted), ranges.max(1));
            let groups = sizing.cut_to_fit(groups);
            let version = state.manifest.version;
            let plan = tasks::plan(&job, version, groups, ranges.max(1), sizing).await?;
            let indexes: Vec<usize> = (0..plan.groups.len()).collect();
            json!({ "tenant": task.tenant, "hour": task.hour, "job": job_id, "groups": indexes })
        }
        FanOutStep::Run => {
            let run = tasks::run_group(&job, index()?).await?;
            json!({ "group": index()?, "rows": run.rows, "run": run.run })
        }
        FanOutStep::Split => {
            let split = tasks::split(&job).await?;
            let indexes: Vec<usize> = (0..split.ranges()).collect();
            json!({ "ranges": indexes })
        }
        FanOutStep::Merge => {
            let merged = tasks::merge(&job, index()?).await?;
            json!({ "range": index()?, "output": merged.output })
        }
        FanOutStep::Commit => {
            let options = CompactOptions {
                attempt_id: Some(job_id.clone()),
                ..options.clone()
            };
            let report = commit_fanned_out(store, layout, &partition, &options).await?;
            return Ok(TaskAnswer::Committed(Box::new(report)));
        }
    };
    Ok(TaskAnswer::Next(answer))
}

/// Commits a fanned-out job whose runs and merges are done ([`tasks`]; its id is
/// `options.attempt_id`), collects the partition's garbage and reports, as
/// [`compact_partition`](crate::compact::compact_partition) does.
pub async fn commit_fanned_out(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
) -> Result<CompactionReport> {
    if options.attempt_id.is_none() {
        return Err(Error::Config {
            message: "committing a fanned-out job needs its job id".into(),
        });
    }
    let (run, mut report) = JobRun::start(store, layout, partition, options)?;
    let committed = commit(&run.context(), &mut report).await;
    Ok(run.finish(committed, report).await)
}

/// Step 5 of a job fanned out elsewhere: its tasks' records gathered and committed on the
/// latest manifest, unless a version since the plan's forgot retired files (invariant 11).
/// The records and runs stay until the outcome is definitive (committed, conflict, too late),
/// so a commit retried after a transient error finds them; a retry that finds the job's own
/// version (its response lost) reports it `compacted`.
async fn commit(
    job: &JobContext<'_>,
    report: &mut CompactionReport,
) -> Result<Option<CommittedLiveSet>> {
    let (store, layout, partition) = (job.store, job.layout, job.partition);
    // Read before the state, so the commit's live set can be written to it (`state`).
    let listed_at_ms = Some(job.options.clock.monotonic_ms());
    let symlink = read_symlink(store, layout, partition).await.ok();
    let manifest = load_latest(store, layout, partition).await?;
    report.manifest_version = manifest.version;
    if let Some(outputs) = committed_ranges(&manifest, job.attempt_id) {
        report_landed_commit(job, &manifest, outputs, report).await;
        return Ok(None);
    }
    let plan = tasks::read_plan(job).await?;
    report.oversized.clone_from(&plan.oversized);
    if manifest.forgotten_in > plan.manifest_version {
        return Err(Error::Conflict {
            partition: partition.to_string(),
            message: format!(
                "version {} forgot retired files after the plan read version {}",
                manifest.forgotten_in, plan.manifest_version
            ),
        });
    }
    let produced = tasks::gather(job).await?;
    let ingest_dir = layout.ingest_dir(partition);
    let listing = store.list(&ingest_dir).await?;
    report.unaddressable = unaddressable_inputs(layout, &ingest_dir, &listing.unaddressable);
    let listing = listing.objects;
    let split = tasks::read_split(job).await.ok();
    let committed = commit_produced(job, &manifest, listed_at_ms, &listing, produced, report).await;
    let definitive = match &committed {
        Ok(_) => true,
        Err(e) => e.kind() != ErrorKind::Transient,
    };
    if definitive {
        tasks::delete_state(job, &plan, split.as_ref()).await;
        release_holds(job, None).await;
    }
    Ok(CommittedLiveSet::of(symlink, committed?))
}

/// The outputs of job `job` that `manifest` holds, live or since retired (`None`: its commit
/// has not landed).
fn committed_ranges(manifest: &Manifest, job: &str) -> Option<Vec<OutputFile>> {
    let live = (manifest.compacted.iter()).filter(|c| is_range_of(&c.key, job));
    let outputs: Vec<OutputFile> = live
        .map(|c| OutputFile {
            key: c.key.clone(),
            bytes: c.bytes,
            rows: c.rows,
            row_groups: 0,
        })
        .collect();
    let retired = || (manifest.retired.iter()).any(|r| is_range_of(&r.key, job));
    (!outputs.is_empty() || retired()).then_some(outputs)
}

/// Reports a commit of this job that landed before (a retry whose first answer was lost):
/// `compacted`, with the outputs the manifest holds (their row groups and the inputs' totals
/// from the job's records while they last), and the records and runs left behind deleted.
async fn report_landed_commit(
    job: &JobContext<'_>,
    manifest: &Manifest,
    mut outputs: Vec<OutputFile>,
    report: &mut CompactionReport,
) {
    report.status = Status::Compacted;
    report.write_amplification = manifest.write_amplification();
    if let Ok(plan) = tasks::read_plan(job).await {
        let split = tasks::read_split(job).await.ok();
        if let Ok((produced, _)) = tasks::recorded(job).await {
            let recorded: Vec<OutputFile> =
                produced.outputs.into_iter().map(|w| w.output).collect();
            for output in &mut outputs {
                if let Some(r) = recorded.iter().find(|r| r.key == output.key) {
                    output.row_groups = r.row_groups;
                }
            }
            report.inputs.rows = produced.rows;
            report.inputs.files = produced.consumed.len() as u64;
            report.inputs.bytes = produced.consumed.iter().map(|c| c.bytes).sum();
            report.fan_out = produced.fan_out;
        }
        tasks::delete_state(job, &plan, split.as_ref()).await;
    }
    release_holds(job, None).await;
    report.output = match outputs.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    };
    report.outputs = outputs;
}

/// What a task answers.
#[derive(Debug)]
pub enum TaskAnswer {
    /// The next state's input (`plan`, `run`, `split`, `merge`).
    Next(serde_json::Value),
    /// `commit`: the compaction report.
    Committed(Box<CompactionReport>),
}

/// How a job would fan out under `options` (`None`: one task does it), from the live inputs'
/// sizes: the decision [`crate::compact::compact_partition`] takes, without sorting. Like it,
/// when earlier outputs in one piece would fan out with late files, it first checks those
/// (downloading them, smallest first, until one has rows): late files that bring no row are
/// settled by one task, which keeps the outputs.
pub async fn estimate(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
) -> Result<Option<FanOutShape>> {
    Ok(estimate_prepared(store, layout, partition, options)
        .await?
        .0)
}

/// [`estimate`], and with `None` what it read, for the job that runs here to start from
/// ([`crate::compact::compact_partition_prepared`]).
pub async fn estimate_prepared(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
) -> Result<(Option<FanOutShape>, Option<Prepared>)> {
    let state = read_job_state(store, layout, partition, &options.clock).await?;
    let here = |state, sizing| Ok((None, Some(Prepared { state, sizing })));
    let Some(wanted) = state.wanted.clone() else {
        return here(state, None);
    };
    let gauge = MemoryGauge::new();
    let garbage_mark = GarbageMark::default();
    let job = JobContext {
        store,
        layout,
        partition,
        options,
        gauge: &gauge,
        attempt_id: "estimate",
        garbage_mark: &garbage_mark,
    };
    if options.settings.fan_out == FanOut::Off {
        return here(state, None);
    }
    let in_one_piece = state.manifest.compacted_in_one_piece();
    if merges_into_ranges(&state.manifest, &wanted) {
        // Late files into a fanned-out hour: only the ranges they touch, here.
        return here(state, None);
    }
    let sizing = size_job(&job, wanted.clone()).await?;
    let Some(shape) = shape(&sizing, options) else {
        return here(state, Some(sizing));
    };
    if settle_without_rows(&job, &wanted, in_one_piece)
        .await?
        .is_some()
    {
        // The job settles them again (it does not fan out): nothing sized is reused.
        return here(state, None);
    }
    Ok((Some(shape), None))
}

/// Another fanned-out job of `partition` still at work: one whose directory (`runs/<job>/`)
/// holds its plan and changed within twice the GC grace on the store's clock, the span GC leaves a job directory
/// alone (no task runs longer than the grace). `ours` is not counted. One listing; the store's
/// clock is read only when a job directory exists.
pub async fn active_job(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    ours: &str,
) -> Result<Option<String>> {
    let listing = store.list_sorted(&layout.fan_out_root(partition)).await?;
    let mut newest: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    let mut planned = std::collections::BTreeSet::new();
    for object in &listing {
        let Some(dir) = crate::partition::fan_out_job_dir(object.location.as_ref()) else {
            continue;
        };
        let job = dir.rsplit('/').next().unwrap_or(dir);
        if job != ours {
            let at = newest.entry(job.to_string()).or_insert(i64::MIN);
            *at = (*at).max(object.last_modified.timestamp_millis());
            if object.location.filename() == Some("plan.json") {
                planned.insert(job.to_string());
            }
        }
    }
    // A one-output job's directory holds only its output's hold: no fan-out.
    newest.retain(|job, _| planned.contains(job));
    if newest.is_empty() {
        return Ok(None);
    }
    let now = store.store_now(&layout.clock_key(partition)).await?;
    let window =
        i64::try_from(options.settings.gc_grace.as_millis().saturating_mul(2)).unwrap_or(i64::MAX);
    Ok(newest
        .into_iter()
        .filter(|(_, at)| at.saturating_add(window) > now.timestamp_millis())
        .max_by_key(|(_, at)| *at)
        .map(|(job, _)| job))
}

/// A job id names a directory of the store: 1 to 64 ASCII letters, digits, `-` or `_`.
fn validate_job_id(job: &str) -> Result<()> {
    let valid = (1..=64).contains(&job.len())
        && job
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(Error::Config {
            message: format!(
                "fan-out job id {job:?} must be 1 to 64 ASCII letters, digits, '-' or '_'"
            ),
        })
    }
}

/// Whether `key` is a range output of fanned-out job `job` (`part-<hash>-<job>-r<k>.parquet`).
pub fn is_range_of(key: &str, job: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    name.strip_prefix("part-")
        .and_then(|rest| rest.split_once('-'))
        .and_then(|(_, rest)| rest.strip_prefix(job))
        .is_some_and(|rest| rest.starts_with("-r"))
}

/// Encoded input bytes one task compacts per second, less than half the slowest pace the fan-out
/// benchmark measured on an idle machine (`tests/bench_fan_out.sh`: 9.7 MB/s for run tasks of
/// 141 MB, 10.3 MB/s for one output of 4.54 GB), which leaves room for S3 transfers and a
/// function with fewer vCPUs: `auto` fans out a job that would not finish before the deadline
/// at this pace.
const INPUT_BYTES_PER_SECOND: u64 = 4 << 20;

/// How the job fans out: `None` for one task and one output. `auto` takes the tasks the
/// job's scratch need takes ([`Sizing::tasks`], the rule every task enforces) and those the
/// time before the deadline takes.
pub(crate) fn shape(sizing: &Sizing, options: &CompactOptions) -> Option<FanOutShape> {
    let wanted = &sizing.wanted;
    let total: u64 = wanted.iter().map(|w| w.bytes).sum();
    let auto = || auto_ranges(total, sizing.tasks(), options.deadline);
    let ranges = match options.settings.fan_out {
        FanOut::Off => return None,
        FanOut::Ranges(n) => n,
        FanOut::Auto => auto(),
        FanOut::AutoAtLeast(n) => auto().max(n),
    };
    (ranges > 1 && !wanted.is_empty()).then(|| FanOutShape {
        groups: ranges.min(wanted.len()),
        ranges,
    })
}

/// The tasks `auto` needs so that each fits its scratch space (`by_scratch`, from the sizing)
/// and the time before the deadline.
fn auto_ranges(total_bytes: u64, by_scratch: u64, deadline: Option<Instant>) -> usize {
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
    garbage_mark: GarbageMark,
}

impl OwnedJob {
    fn new(job: &JobContext<'_>) -> Self {
        OwnedJob {
            store: job.store.clone(),
            layout: job.layout.clone(),
            partition: job.partition.clone(),
            options: job.options.clone(),
            gauge: job.gauge.clone(),
            attempt_id: job.attempt_id.to_string(),
            garbage_mark: job.garbage_mark.clone(),
        }
    }

    fn context(&self) -> JobContext<'_> {
        JobContext {
            store: &self.store,
            layout: &self.layout,
            partition: &self.partition,
            options: &self.options,
            gauge: &self.gauge,
            attempt_id: &self.attempt_id,
            garbage_mark: &self.garbage_mark,
        }
    }
}

/// Steps 2 to 4 for the sized inputs: fanned out as [`shape`] decides, or in one task; a task
/// that finds from its pages that the job does not fit its scratch space after all (footers
/// are estimates) hands the job to the fan-out here, with the tasks its need takes, unless the
/// fan-out is off.
pub(crate) async fn produce_sized(
    job: &JobContext<'_>,
    manifest_version: u64,
    sizing: Sizing,
    compacted_in_one_piece: bool,
) -> Result<Produced> {
    if let Some(shape) = shape(&sizing, job.options) {
        return produce(job, manifest_version, sizing, shape).await;
    }
    let wanted = sizing.wanted.clone();
    match produce_one(job, wanted, &sizing.footers, compacted_in_one_piece).await {
        Err(Error::ScratchFull {
            needed_bytes,
            available_bytes,
            ..
        }) if job.options.settings.fan_out != FanOut::Off && sizing.wanted.len() > 1 => {
            let tasks = needed_bytes
                .div_ceil(available_bytes.max(1))
                .saturating_add(1);
            let ranges = usize::try_from(tasks).unwrap_or(usize::MAX).max(2);
            tracing::info!(
                needed_bytes,
                available_bytes,
                ranges,
                "the job does not fit one task's scratch space; fanning out"
            );
            let shape = FanOutShape {
                groups: ranges.min(sizing.wanted.len()),
                ranges,
            };
            produce(job, manifest_version, sizing, shape).await
        }
        produced => produced,
    }
}

/// Steps 2 to 4 fanned out, here: the plan, the runs, the split and the merges, each task on a
/// thread of its own, at most [`CompactSettings::workers`](crate::settings::CompactSettings::workers) at once; the job's records are
/// deleted afterwards with its runs (the outputs hold every row; a retry is a new job).
pub(crate) async fn produce(
    job: &JobContext<'_>,
    manifest_version: u64,
    mut sizing: Sizing,
    shape: FanOutShape,
) -> Result<Produced> {
    let owned = OwnedJob::new(job);
    let groups = group_inputs(std::mem::take(&mut sizing.wanted), shape.groups);
    let groups = sizing.cut_to_fit(groups);
    let plan = tasks::plan(job, manifest_version, groups, shape.ranges, sizing).await?;
    let mut split = None;
    let produced = run_steps(job, &owned, plan.groups.len(), &mut split).await;
    tasks::delete_state(job, &plan, split.as_ref()).await;
    produced
}

async fn run_steps(
    job: &JobContext<'_>,
    owned: &OwnedJob,
    groups: usize,
    split: &mut Option<tasks::Split>,
) -> Result<Produced> {
    let workers = job.options.settings.workers;
    let started = Instant::now();
    let runs = run_tasks(workers, 0..groups, |group| {
        let owned = owned.clone();
        async move { tasks::run_group(&owned.context(), group).await }
    })
    .await?;
    let rows: u64 = runs.iter().map(|r| r.rows).sum();
    tracing::info!(
        groups,
        rows,
        elapsed_ms = elapsed_ms(started),
        "fan-out: runs sorted"
    );
    let started = Instant::now();
    let split = split.insert(tasks::split(job).await?);
    tracing::info!(
        ranges = split.ranges(),
        elapsed_ms = elapsed_ms(started),
        "fan-out: split"
    );
    let started = Instant::now();
    run_tasks(workers, 0..split.ranges(), |range| {
        let owned = owned.clone();
        async move { tasks::merge(&owned.context(), range).await }
    })
    .await?;
    tracing::info!(elapsed_ms = elapsed_ms(started), "fan-out: ranges merged");
    tasks::gather(job).await
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Runs `task` on each input, at most `workers` at once, each on a Tokio task of its own;
/// results in input order. Tasks start in input order (the next once one has finished), so
/// with one worker they run one after another as listed. The first failure aborts the tasks
/// not yet finished.
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
    let mut set = tokio::task::JoinSet::new();
    let mut results: Vec<Option<R>> = Vec::new();
    for (i, input) in inputs.into_iter().enumerate() {
        if set.len() >= workers.max(1)
            && let Some(joined) = set.join_next().await
        {
            let (at, result) = joined_task(joined)?;
            results[at] = Some(result);
        }
        let work = task(input);
        results.push(None);
        set.spawn(async move { work.await.map(|r| (i, r)) });
    }
    while let Some(joined) = set.join_next().await {
        let (at, result) = joined_task(joined)?;
        results[at] = Some(result);
    }
    Ok(results.into_iter().flatten().collect())
}

/// A finished task's index and result, or its failure (a panic or cancellation included).
fn joined_task<R>(
    joined: std::result::Result<Result<(usize, R)>, tokio::task::JoinError>,
) -> Result<(usize, R)> {
    joined.map_err(|e| Error::invariant(format!("a fan-out task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(sizes: &[u64]) -> Vec<WantedInput> {
        (sizes.iter().enumerate())
            .map(|(i, &bytes)| WantedInput {
                key: object_store::path::Path::from(format!("data/f{i}.parquet")),
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
        // The tasks the scratch need takes.
        assert_eq!(auto_ranges(10 * gib, 1, None), 1);
        assert_eq!(auto_ranges(10 * gib, 5, None), 5);
        // Time: 4 MiB a second (the clock moves on between these lines: stay clear of the edge).
        let deadline = Instant::now() + std::time::Duration::from_secs(100);
        assert_eq!(auto_ranges(300 << 20, 1, Some(deadline)), 1);
        assert_eq!(auto_ranges(1500 << 20, 1, Some(deadline)), 4);
        assert_eq!(auto_ranges(1500 << 20, 7, Some(deadline)), 7);
        // A forced number of ranges, at least some, and off.
        let mut options = CompactOptions::new("/tmp");
        let sizing = Sizing {
            wanted: wanted(&[10, 10]),
            ..Sizing::default()
        };
        assert_eq!(shape(&sizing, &options), None);
        options.settings.fan_out = FanOut::Ranges(4);
        assert_eq!(
            shape(&sizing, &options),
            Some(FanOutShape {
                groups: 2,
                ranges: 4
            })
        );
        options.settings.fan_out = FanOut::Ranges(1);
        assert_eq!(shape(&sizing, &options), None);
        options.settings.fan_out = FanOut::AutoAtLeast(3);
        assert_eq!(shape(&sizing, &options).map(|s| s.ranges), Some(3));
        options.settings.fan_out = FanOut::Auto;
        assert_eq!(shape(&sizing, &options), None);
        let needy = Sizing {
            scratch_bytes: Some(800),
            needed_bytes: Some(1500),
            ..sizing
        };
        // 7/8 of 800 is 700 a task: three tasks for 1,500 bytes.
        assert_eq!(shape(&needy, &options).map(|s| s.ranges), Some(3));
    }
}

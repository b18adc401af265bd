//! The driver: compacts one partition in named steps.
//!
//! 1. **Read the state**: the latest manifest and a listing of the ingest directory give
//!    the live set (the reader rule). Nothing to merge means `noop`.
//! 2. **Stage**: each live input gets a local file (the store's own file for a local
//!    directory; a streamed download into scratch otherwise), so it can be read page by page.
//! 3. **Check**: every input's footer and key columns are validated against the partition;
//!    bad inputs are quarantined (recorded, left untouched, never deleted).
//! 4. **Sort and write**: the bounded-memory sort streams sorted chunks to the output
//!    writer, which uploads row groups as they complete. An input found unreadable midway
//!    is quarantined and the step restarts without it.
//! 5. **Commit**: one create-only manifest write makes the output live and retires the
//!    inputs; losing the race is detected and reported (`noop` or `conflict`).
//! 6. **Collect garbage** of the partition past the grace period.
//!
//! Every request of these steps goes through a counting store, and the report prices them
//! with the job's duration and CPU time (`cost`, `cpu_ms`).

pub mod fan_out;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use sha2::{Digest, Sha256};

use crate::budget::Budget;
use crate::clock::Expiry;
use crate::error::{Error, Result};
use crate::gauge::MemoryGauge;
use crate::input::schema::{UnifiedSchema, unify_weighted};
use crate::input::{CheckedInput, StagedInput};
use crate::manifest::gc::collect_garbage_with;
use crate::manifest::{
    CommitOutcome, CommitRequest, CompactedFile, Manifest, QuarantinedFile, commit, live_set,
    load_latest, unaddressable_inputs,
};
use crate::options::{CompactOptions, sort_key_label};
use crate::output::threshold::resolve_row_group_bytes;
use crate::output::writer::{OutputWriter, partition_output_settings};
use crate::partition::{KeyLayout, PartitionId, staged_input_name};
use crate::report::{CompactionReport, FanOutShape, InputTotals, OutputFile, Quarantined, Status};
use crate::scratch::ScratchDir;
use crate::sort::key::KeyRange;
use crate::sort::resources::{peak_rss_bytes, process_cpu_time};
use crate::sort::runs::SpillCompression;
use crate::sort::sink::with_sink_thread;
use crate::sort::{SortFailure, SortJob, SortStats, sort_inputs};
use crate::store::upload::start_upload;
use crate::store::{Listing, Store, key_path};

/// Version of the output format; part of the output name so a format change never reuses one.
const OUTPUT_FORMAT_VERSION: &str = "ourios-compaction/2";

/// Compacts one partition and reports what happened. Errors that leave nothing committed
/// are reported as `failed` or `timeout` rather than returned; an `Err` means the job could
/// not even read the partition's state.
pub async fn compact_partition(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
) -> Result<CompactionReport> {
    report_job(store, layout, partition, options, JobBody::Compact).await
}

/// Commits a fanned-out job whose runs and merges are done ([`fan_out::tasks`]; its id is
/// `options.attempt_id`), collects the partition's garbage and reports, as
/// [`compact_partition`] does.
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
    report_job(store, layout, partition, options, JobBody::CommitFanOut).await
}

/// What a reported job does.
#[derive(Debug, Clone, Copy)]
enum JobBody {
    /// Steps 1 to 5: the whole compaction, in one task or fanned out here.
    Compact,
    /// Step 5 of a job fanned out elsewhere.
    CommitFanOut,
}

async fn report_job(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    body: JobBody,
) -> Result<CompactionReport> {
    options.validate()?;
    let started = Instant::now();
    let cpu_started = process_cpu_time();
    let store = &store.counting_requests();
    let requests_before = store.request_counts();
    let attempt_id = options
        .attempt_id
        .clone()
        .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()));
    let mut report = CompactionReport::new(&partition.relative_dir(), &attempt_id);
    report.budget_bytes = options.budget_bytes;
    let gauge = MemoryGauge::new();

    let result = match body {
        JobBody::Compact => run_job(store, layout, partition, options, &gauge, &mut report).await,
        JobBody::CommitFanOut => {
            commit_fan_out(store, layout, partition, options, &gauge, &mut report).await
        }
    };
    if let Err(e) = result {
        report.error_kind = Some(e.kind());
        report.status = match e {
            Error::Deadline { .. } => Status::Timeout,
            Error::Conflict { .. } => Status::Conflict,
            _ => Status::Failed,
        };
        report.error = Some(match e {
            Error::Deadline { .. } => Error::Deadline {
                partition: partition.to_string(),
            }
            .to_string(),
            other => other.to_string(),
        });
    }
    if report.status.is_success() {
        let gc = collect_garbage_with(
            store,
            layout,
            partition,
            options.gc_grace,
            false,
            &options.clock,
        );
        match gc.await {
            Ok(gc) => report.gc_deleted = gc.deleted,
            Err(e) => {
                tracing::warn!(partition = %partition, error = %e, "garbage collection failed")
            }
        }
    }
    report.peak_decoded_bytes = gauge.peak();
    report.decoded_bytes_at_end = gauge.current();
    report.peak_rss_bytes = peak_rss_bytes();
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.cpu_ms = process_cpu_time().saturating_sub(cpu_started).as_millis() as u64;
    let requests = store.request_counts().since(&requests_before);
    report.price(&options.prices, options.function_memory_mb, requests);
    tracing::info!(
        partition = %report.partition,
        attempt_id = %report.attempt_id,
        status = ?report.status,
        rows = report.inputs.rows,
        files = report.inputs.files,
        runs_spilled = report.runs_spilled,
        duration_ms = report.duration_ms,
        cpu_ms = report.cpu_ms,
        usd = report.cost.usd,
        "compaction finished"
    );
    Ok(report)
}

async fn run_job(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    gauge: &MemoryGauge,
    report: &mut CompactionReport,
) -> Result<()> {
    // Step 1: read the state.
    let state = read_partition(store, layout, partition).await?;
    report.manifest_version = state.manifest.version;
    report.unaddressable = state.unaddressable;
    let (manifest, listing) = (state.manifest, state.listing);
    let Some(wanted) = state.wanted else {
        report.status = Status::Noop;
        return Ok(());
    };

    // Steps 2 to 4, in one task or fanned out.
    let attempt_id = report.attempt_id.clone();
    let job = JobContext {
        store,
        layout,
        partition,
        options,
        gauge,
        attempt_id: &attempt_id,
    };
    let in_one_piece = manifest.compacted_in_one_piece();
    let produced = match fan_out::shape(&wanted, options) {
        Some(shape) => match settle_without_rows(&job, &wanted, in_one_piece).await? {
            Some(settled) => settled,
            None => fan_out::produce(&job, manifest.version, wanted, shape).await?,
        },
        None => produce_one(&job, wanted, in_one_piece).await?,
    };
    commit_produced(&job, &manifest, &listing, produced, report).await
}

/// What step 1 read: the latest manifest, the listing of the ingest directory, the live
/// inputs in ordinal order (`None` when there is nothing to merge) and the data keys the store
/// cannot address.
pub(crate) struct PartitionState {
    pub(crate) manifest: Manifest,
    pub(crate) listing: Vec<object_store::ObjectMeta>,
    pub(crate) wanted: Option<Vec<WantedInput>>,
    pub(crate) unaddressable: Vec<String>,
}

/// Step 1: the latest manifest and a listing give the live set (the reader rule); nothing
/// uncompacted and the compacted files of one commit leave nothing to merge.
pub(crate) async fn read_partition(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> Result<PartitionState> {
    let manifest = load_latest(store, layout, partition).await?;
    let ingest_dir = layout.ingest_dir(partition);
    let Listing {
        objects: listing,
        unaddressable,
    } = store.list(&ingest_dir).await?;
    let live = live_set(&ingest_dir, &listing, &manifest);
    let wanted = if live.ingest.is_empty() && manifest.compacted_in_one_piece() {
        None
    } else {
        Some(wanted_inputs(&manifest, &live)?)
    };
    Ok(PartitionState {
        manifest,
        listing,
        wanted,
        unaddressable: unaddressable_inputs(&ingest_dir, &unaddressable),
    })
}

/// Step 5 of a job fanned out elsewhere: its tasks' records gathered and committed on the
/// latest manifest, unless a version since the plan's forgot retired files (invariant 11).
async fn commit_fan_out(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    gauge: &MemoryGauge,
    report: &mut CompactionReport,
) -> Result<()> {
    let attempt_id = report.attempt_id.clone();
    let job = JobContext {
        store,
        layout,
        partition,
        options,
        gauge,
        attempt_id: &attempt_id,
    };
    let manifest = load_latest(store, layout, partition).await?;
    report.manifest_version = manifest.version;
    let plan = match fan_out::tasks::read_plan(&job).await {
        Ok(plan) => plan,
        // A retry of a commit that landed (its records are deleted after it).
        Err(_)
            if manifest
                .compacted
                .iter()
                .any(|c| fan_out::is_range_of(&c.key, &attempt_id)) =>
        {
            report.status = Status::Noop;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    if manifest.forgotten_in > plan.manifest_version {
        return Err(Error::Conflict {
            partition: partition.to_string(),
            message: format!(
                "version {} forgot retired files after the plan read version {}",
                manifest.forgotten_in, plan.manifest_version
            ),
        });
    }
    let produced = fan_out::tasks::gather(&job).await?;
    let ingest_dir = layout.ingest_dir(partition);
    let listing = store.list(&ingest_dir).await?;
    report.unaddressable = unaddressable_inputs(&ingest_dir, &listing.unaddressable);
    let listing = listing.objects;
    let split = fan_out::tasks::read_split(&job).await.ok();
    let committed = commit_produced(&job, &manifest, &listing, produced, report).await;
    fan_out::tasks::delete_state(&job, &plan, split.as_ref(), false).await;
    committed
}

/// What one job works with, shared by its tasks.
pub(crate) struct JobContext<'a> {
    pub(crate) store: &'a Store,
    pub(crate) layout: &'a KeyLayout,
    pub(crate) partition: &'a PartitionId,
    pub(crate) options: &'a CompactOptions,
    pub(crate) gauge: &'a MemoryGauge,
    pub(crate) attempt_id: &'a str,
}

/// An input the job wants to read: its key, size and whether it is an earlier output.
#[derive(Debug, Clone)]
pub(crate) struct WantedInput {
    pub(crate) key: Path,
    pub(crate) bytes: u64,
    pub(crate) is_compacted: bool,
}

/// What steps 2 to 4 produced, ready to commit.
pub(crate) struct Produced {
    /// Inputs consumed (read and sorted, or valid and empty), in ordinal order.
    pub(crate) consumed: Vec<WantedInput>,
    /// Rows read from them.
    pub(crate) rows: u64,
    /// Bad inputs.
    pub(crate) quarantined: Vec<Quarantined>,
    /// The outputs written, in key order.
    pub(crate) outputs: Vec<Written>,
    /// The sort's work, summed over tasks.
    pub(crate) stats: SortStats,
    /// How the job fanned out.
    pub(crate) fan_out: Option<FanOutShape>,
    /// When the outputs become too old to commit (`None`: no grace, no limit).
    pub(crate) commit_by: Option<Expiry>,
}

/// The live inputs in ordinal order: earlier compacted files first (they are runs already),
/// then ingest files in sorted-key order.
fn wanted_inputs(manifest: &Manifest, live: &crate::manifest::LiveSet) -> Result<Vec<WantedInput>> {
    let mut wanted = Vec::new();
    for key in &live.compacted {
        let bytes = manifest
            .compacted
            .iter()
            .find(|c| &c.key == key)
            .map_or(0, |c| c.bytes);
        wanted.push(WantedInput {
            key: key_path(key)?,
            bytes,
            is_compacted: true,
        });
    }
    for meta in &live.ingest {
        wanted.push(WantedInput {
            key: meta.location.clone(),
            bytes: meta.size,
            is_compacted: false,
        });
    }
    Ok(wanted)
}

/// Steps 2 to 4 in one task: stage, check, sort and write one output. `compacted_in_one_piece`
/// says the earlier outputs among `wanted` need no merge among themselves
/// ([`Manifest::compacted_in_one_piece`]).
async fn produce_one(
    job: &JobContext<'_>,
    wanted: Vec<WantedInput>,
    compacted_in_one_piece: bool,
) -> Result<Produced> {
    let options = job.options;
    let scratch = ScratchDir::create_with_limit(&options.scratch_dir, options.scratch_limit_bytes)?;
    let target = OutputTarget::Output {
        compacted_in_one_piece,
    };
    let sorted = sort_group(job, wanted, &scratch, &target).await?;
    drop(scratch);
    // INVARIANT: an output is committed within half the grace of its upload (on this host's
    // monotonic clock), so GC, which waits the whole grace on the store's clock, never sweeps
    // it as an orphan just before a commit references it.
    let commit_by = (sorted.written.as_ref())
        .filter(|_| options.gc_grace > Duration::ZERO)
        .map(|_| Expiry::after(&options.clock, options.gc_grace / 2));
    Ok(Produced {
        commit_by,
        consumed: sorted.consumed,
        rows: sorted.rows,
        quarantined: sorted.quarantined,
        stats: sorted.written.as_ref().map(|w| w.stats).unwrap_or_default(),
        outputs: sorted.written.into_iter().collect(),
        fan_out: None,
    })
}

/// Before a job fans out over earlier outputs in one piece: checks the other inputs alone,
/// and when none of them brings a row (all bad, empty or gone), settles them (bad ones
/// quarantined, empty ones consumed) without rewriting the outputs, as [`sort_group`] does in
/// one task. `None`: some input has rows to merge, or the check would download more than the
/// memory budget's worth of them, and the job fans out. The inputs are checked smallest first,
/// as many at a time as are downloaded at once, and the first with rows ends the check, so a
/// fanned-out job with good late files stages about one batch of them twice; a late file larger
/// than what is left of the budget ends it too (the invocation that asks may have little
/// scratch space, and the groups of the fan-out read such a file anyway).
pub(crate) async fn settle_without_rows(
    job: &JobContext<'_>,
    wanted: &[WantedInput],
    compacted_in_one_piece: bool,
) -> Result<Option<Produced>> {
    if !compacted_in_one_piece || !wanted.iter().any(|w| w.is_compacted) {
        return Ok(None);
    }
    let mut others: Vec<WantedInput> = wanted.iter().filter(|w| !w.is_compacted).cloned().collect();
    others.sort_by(|a, b| a.bytes.cmp(&b.bytes).then_with(|| a.key.cmp(&b.key)));
    let options = job.options;
    let scratch = ScratchDir::create_with_limit(&options.scratch_dir, options.scratch_limit_bytes)?;
    let (mut consumed, mut quarantined) = (Vec::new(), Vec::new());
    let mut allowance = options.budget().shares().download_allowance_bytes;
    let mut rest = others.as_slice();
    while !rest.is_empty() {
        let mut batch_len = 0;
        while batch_len < rest.len().min(options.parallel_downloads.max(1))
            && rest[batch_len].bytes <= allowance
        {
            allowance -= rest[batch_len].bytes;
            batch_len += 1;
        }
        if batch_len == 0 {
            return Ok(None);
        }
        let (batch, tail) = rest.split_at(batch_len);
        rest = tail;
        let group = stage_and_check(job, batch.to_vec(), &scratch, true).await?;
        if !group.checked.is_empty() {
            return Ok(None);
        }
        consumed.extend(group.empty.iter().map(consumed_input));
        quarantined.extend(group.quarantined);
    }
    quarantined.sort_by(|a, b| a.file.cmp(&b.file));
    consumed.sort_by(|a: &WantedInput, b: &WantedInput| a.key.cmp(&b.key));
    Ok(Some(Produced {
        consumed,
        rows: 0,
        quarantined,
        outputs: Vec::new(),
        stats: SortStats::default(),
        fan_out: None,
        commit_by: None,
    }))
}

/// A checked input as the commit retires it.
fn consumed_input(c: &CheckedInput) -> WantedInput {
    WantedInput {
        key: c.staged.key.clone(),
        bytes: c.staged.size,
        is_compacted: c.staged.is_compacted,
    }
}

/// Where a sorted group goes.
pub(crate) enum OutputTarget {
    /// The job's output, named by its input set ([`output_key`]). When the earlier outputs
    /// among the inputs are in one piece and no other input with rows passes the check, none
    /// is written: they stand as they are, and only the bad and empty inputs are committed.
    Output { compacted_in_one_piece: bool },
    /// A run of a fanned-out job, at this key.
    Run(Path),
}

/// What sorting one group of inputs gave.
pub(crate) struct SortedGroup {
    pub(crate) consumed: Vec<WantedInput>,
    pub(crate) rows: u64,
    pub(crate) quarantined: Vec<Quarantined>,
    /// `None` when no input held a row.
    pub(crate) written: Option<Written>,
}

/// What steps 2 and 3 left of a group of inputs.
struct CheckedGroup {
    /// Inputs that passed the check with rows, in ordinal order.
    checked: Vec<CheckedInput>,
    /// Valid inputs without rows: consumed with the others, kept out of the union.
    empty: Vec<CheckedInput>,
    /// Bad inputs.
    quarantined: Vec<Quarantined>,
}

/// Steps 2 and 3 for a group of inputs: stage them in `scratch` and check them. Unless
/// `others_readable` (other live inputs were read by an earlier job), every input refused by
/// the store fails the job: the function's own access is then at fault, not the files.
async fn stage_and_check(
    job: &JobContext<'_>,
    wanted: Vec<WantedInput>,
    scratch: &ScratchDir,
    others_readable: bool,
) -> Result<CheckedGroup> {
    let (store, partition, options) = (job.store, job.partition, job.options);
    // Step 2: stage.
    let (staged, unreadable) =
        stage_inputs(store, wanted, scratch, options.parallel_downloads).await?;
    let mut refused = Vec::new();
    for (key, outcome) in unreadable {
        match outcome {
            Unreadable::Refused(reason) => refused.push((key, reason)),
            // Gone since the listing (deleted, or retired by another job's GC): nothing to
            // read, keep or retire; the next listing no longer holds it.
            Unreadable::Vanished(reason) => {
                tracing::warn!(file = %key, reason, "input vanished since the listing; skipped")
            }
        }
    }
    if !refused.is_empty() && staged.is_empty() && !others_readable {
        // Fail and retry rather than quarantine a whole partition.
        let (key, reason) = &refused[0];
        return Err(Error::Config {
            message: format!(
                "the store refused to read every input of {partition} (e.g. {key}: {reason})"
            ),
        });
    }

    // Step 3: check.
    let checking = Instant::now();
    let (checked, mut quarantined) = check_inputs(staged, partition, options).await?;
    for (key, reason) in &refused {
        quarantined.push(quarantine_key(
            key,
            &format!("the store refused to read it: {reason}"),
        ));
    }
    tracing::debug!(
        elapsed_ms = checking.elapsed().as_millis() as u64,
        "inputs checked"
    );
    let (empty, checked) = checked.into_iter().partition(|c| c.rows == 0);
    Ok(CheckedGroup {
        checked,
        empty,
        quarantined,
    })
}

/// Steps 2 to 4 for a group of inputs: stage them in `scratch`, check them, and sort the good
/// ones into `target`, restarting without any input found bad midway.
pub(crate) async fn sort_group(
    job: &JobContext<'_>,
    wanted: Vec<WantedInput>,
    scratch: &ScratchDir,
    target: &OutputTarget,
) -> Result<SortedGroup> {
    let (partition, options) = (job.partition, job.options);
    let CheckedGroup {
        mut checked,
        empty,
        mut quarantined,
    } = stage_and_check(job, wanted, scratch, false).await?;

    // Step 4: sort and write, restarting without any input found bad midway.
    let written = loop {
        let (unified, rejected) = {
            // A previous compacted output outweighs any ingest file: its rows are live.
            let schemas: Vec<(&str, &arrow::datatypes::Schema, u64)> = checked
                .iter()
                .map(|c| {
                    let weight = if c.staged.is_compacted {
                        u64::MAX
                    } else {
                        c.rows
                    };
                    (c.staged.name.as_str(), c.schema.as_ref(), weight)
                })
                .collect();
            unify_weighted(
                &schemas,
                &options.keys,
                options.budget().shares().leaf_limit,
            )
        };
        for rejection in rejected.iter().rev() {
            let bad = checked.remove(rejection.position);
            quarantined.push(quarantine(&bad.staged, &rejection.reason)?);
        }
        let Some(unified) = unified.filter(|_| !checked.is_empty()) else {
            break None;
        };
        if matches!(
            target,
            OutputTarget::Output {
                compacted_in_one_piece: true
            }
        ) && checked.iter().all(|c| c.staged.is_compacted)
        {
            // Nothing new to merge: rewriting the earlier outputs would change no row. They
            // are neither consumed nor retired.
            checked.clear();
            break None;
        }
        let input_bytes: u64 = checked.iter().map(|c| c.staged.size).sum();
        let write = WriteJob {
            inputs: &checked,
            unified: &unified,
            threshold_input_bytes: input_bytes,
            range: None,
        };
        let name = |row_group_bytes: u64| match target {
            OutputTarget::Output { .. } => output_key(
                job.layout,
                partition,
                &checked,
                row_group_bytes,
                options,
                job.attempt_id,
            ),
            OutputTarget::Run(key) => (key.clone(), String::new()),
        };
        match sort_and_write(job, scratch, &write, &name).await? {
            Ok(written) => break Some(written),
            Err((position, reason)) => {
                let bad = checked.remove(position);
                quarantined.push(quarantine(&bad.staged, &reason)?);
            }
        }
    };
    quarantined.sort_by(|a, b| a.file.cmp(&b.file));
    let consumed = checked.iter().chain(&empty).map(consumed_input).collect();
    Ok(SortedGroup {
        consumed,
        rows: checked.iter().map(|c| c.rows).sum(),
        quarantined,
        written,
    })
}

/// Step 5: commits what was produced, and reports it.
async fn commit_produced(
    job: &JobContext<'_>,
    manifest: &Manifest,
    listing: &[object_store::ObjectMeta],
    produced: Produced,
    report: &mut CompactionReport,
) -> Result<()> {
    let (store, layout, partition, options) = (job.store, job.layout, job.partition, job.options);
    let Produced {
        consumed,
        rows,
        quarantined,
        outputs: written,
        stats,
        fan_out,
        commit_by,
    } = produced;
    report.quarantined = quarantined.clone();
    report.fan_out = fan_out;
    report.inputs = InputTotals {
        files: consumed.len() as u64,
        bytes: consumed.iter().map(|c| c.bytes).sum(),
        rows,
    };
    if let Some(w) = written.first() {
        report.row_group_bytes = w.row_group_bytes;
    }
    report.runs_spilled = stats.runs_spilled;
    report.merge_passes = stats.merge_passes;
    report.spill_bytes = stats.spill_bytes;
    if consumed.is_empty() && written.is_empty() && quarantined.is_empty() {
        // Every new input vanished since the listing: no version would change anything.
        report.status = Status::Noop;
        return Ok(());
    }

    // Each attempt names its outputs uniquely, so a late job may delete its own outputs: no
    // manifest can reference them.
    if let Some(deadline) = options.deadline
        && Instant::now() >= deadline
    {
        delete_outputs(store, &written, None).await;
        return Err(Error::Deadline {
            partition: partition.to_string(),
        });
    }

    // Retired entries whose files are gone are forgotten (ingest files and earlier outputs
    // alike), so the manifest stays as small as the grace period allows.
    let compacted_listing = store.list_sorted(&layout.compacted_dir(partition)).await?;
    let listed: std::collections::HashSet<&str> = listing
        .iter()
        .chain(&compacted_listing)
        .map(|m| m.location.as_ref())
        .collect();
    let forget = manifest
        .retired
        .iter()
        .filter(|r| !listed.contains(r.key.as_str()))
        .map(|r| r.key.clone())
        .collect();
    let request = CommitRequest {
        inputs: consumed.iter().map(|c| c.key.to_string()).collect(),
        outputs: written
            .iter()
            .map(|w| CompactedFile {
                key: w.output.key.clone(),
                rows: w.output.rows,
                bytes: w.output.bytes,
                input_set: w.input_set.clone(),
            })
            .collect(),
        quarantined: quarantined
            .iter()
            .map(|q| QuarantinedFile {
                key: q.file.clone(),
                reason: q.reason.clone(),
            })
            .collect(),
        released: Vec::new(),
        forget,
        ingested_bytes: consumed
            .iter()
            .filter(|c| !c.is_compacted)
            .map(|c| c.bytes)
            .sum(),
        attempt_id: report.attempt_id.clone(),
        now_ms: options.clock.now_ms(),
        commit_by,
    };
    let outcome = match commit(store, layout, partition, manifest, &request).await {
        Err(e @ Error::Deadline { .. }) => {
            delete_outputs(store, &written, None).await;
            return Err(e);
        }
        other => other?,
    };
    match outcome {
        CommitOutcome::Committed(m) => {
            report.manifest_version = m.version;
            report.write_amplification = m.write_amplification();
            report.outputs = written.into_iter().map(|w| w.output).collect();
            report.output = match report.outputs.as_slice() {
                [one] => Some(one.clone()),
                _ => None,
            };
            report.status = if quarantined.is_empty() {
                Status::Compacted
            } else {
                Status::Partial
            };
        }
        CommitOutcome::AlreadyCommitted(m) => {
            report.manifest_version = m.version;
            report.write_amplification = m.write_amplification();
            report.status = Status::Noop;
            // Another attempt committed the same input set under its own names.
            delete_outputs(store, &written, Some(&m)).await;
        }
        CommitOutcome::Conflict { current, reason } => {
            report.manifest_version = current.version;
            // The winner retired one of our inputs, so no later commit can make our outputs
            // live; if a lost response hid our own commit and a later one retired them
            // since, they wait for the grace period like any input.
            delete_outputs(store, &written, Some(&current)).await;
            return Err(Error::Conflict {
                partition: partition.to_string(),
                message: reason,
            });
        }
    }
    Ok(())
}

/// Deletes outputs no commit made live: all of them, or those `manifest` does not reference.
async fn delete_outputs(store: &Store, written: &[Written], manifest: Option<&Manifest>) {
    for w in written {
        if manifest.is_none_or(|m| !m.references(&w.output.key)) {
            delete_quietly(store, &w.output.key).await;
        }
    }
}

/// Quarantines a bad input; an earlier compacted output is never quarantined (its rows are
/// live only through it), so the job fails instead ([`Error::CompactedInput`]).
fn quarantine(staged: &StagedInput, reason: &str) -> Result<Quarantined> {
    if staged.is_compacted {
        return Err(Error::CompactedInput {
            file: staged.key.to_string(),
            reason: reason.to_string(),
        });
    }
    Ok(quarantine_key(&staged.key, reason))
}

fn quarantine_key(key: &Path, reason: &str) -> Quarantined {
    tracing::warn!(file = %key, reason, "quarantined bad input");
    Quarantined {
        file: key.to_string(),
        reason: reason.to_string(),
    }
}

/// Why an input could not be staged.
#[derive(Debug)]
enum Unreadable {
    /// The store refused the GET (403: a KMS key the function may not use, an archived
    /// storage class answering `InvalidObjectState`): a bad input, with the store's reason.
    Refused(String),
    /// The object is gone (404) since the listing.
    Vanished(String),
}

async fn delete_quietly(store: &Store, key: &str) {
    let Ok(path) = key_path(key) else {
        return;
    };
    if let Err(e) = store.object_store().delete(&path).await {
        tracing::warn!(key, error = %e, "could not delete an uncommitted output; GC will sweep it");
    }
}

/// Stages the wanted inputs in order; and names the ones the store would not give.
async fn stage_inputs(
    store: &Store,
    wanted: Vec<WantedInput>,
    scratch: &ScratchDir,
    parallel_downloads: usize,
) -> Result<(Vec<StagedInput>, Vec<(Path, Unreadable)>)> {
    // Every download runs to its end before this returns, even after one fails: a download
    // dropped midway leaves its file creation or write running on a blocking thread, which
    // could put a file back into the scratch directory while it is being removed. Once one has
    // failed, the downloads not yet started are skipped (`None`).
    let failed = AtomicBool::new(false);
    let failed = &failed;
    let outcomes: Vec<Result<Option<_>>> = futures::stream::iter(wanted.into_iter().enumerate())
        .map(|(i, wanted)| async move {
            if failed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let outcome = stage_input(store, scratch, i, wanted).await;
            if outcome.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            outcome.map(Some)
        })
        .buffered(parallel_downloads.max(1))
        .collect()
        .await;
    let mut staged = Vec::new();
    let mut unreadable = Vec::new();
    for outcome in outcomes {
        match outcome? {
            Some(Ok(input)) => staged.push(input),
            Some(Err(refused)) => unreadable.push(refused),
            None => return Err(Error::invariant("a download was skipped, yet none failed")),
        }
    }
    Ok((staged, unreadable))
}

/// Stages input `i` of a job: its local path when the store is a directory, else a download
/// into `scratch`; `Err` inside for an input that cannot be read (refused or vanished).
async fn stage_input(
    store: &Store,
    scratch: &ScratchDir,
    i: usize,
    wanted: WantedInput,
) -> Result<std::result::Result<StagedInput, (Path, Unreadable)>> {
    let WantedInput {
        key,
        bytes: size,
        is_compacted,
    } = wanted;
    let name = key.filename().unwrap_or_default().to_string();
    let local = match store.read_in_place(&key) {
        Some(path) if path.exists() || is_compacted => path,
        Some(_) => {
            let gone = Unreadable::Vanished("no longer in the store".into());
            return Ok(Err((key, gone)));
        }
        None => {
            let dest = scratch.path().join(staged_input_name(i));
            match store.download(&key, &dest).await {
                Ok(_) => dest,
                // A compacted file is this system's own: any failure fails the job.
                Err(e) if is_compacted => return Err(e),
                Err(Error::Store { source, .. }) if is_refusal(&source) => {
                    let refused = Unreadable::Refused(source.to_string());
                    return Ok(Err((key, refused)));
                }
                Err(Error::Store {
                    source: source @ object_store::Error::NotFound { .. },
                    ..
                }) => return Ok(Err((key, Unreadable::Vanished(source.to_string())))),
                Err(e) => return Err(e),
            }
        }
    };
    Ok(Ok(StagedInput {
        key,
        name,
        size,
        local,
        is_compacted,
    }))
}

/// A store answer that refuses this object for good (403), as opposed to a transient error.
pub(crate) fn is_refusal(error: &object_store::Error) -> bool {
    matches!(
        error,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    )
}

/// Checks the staged inputs ([`crate::input::check_inputs`]) off the runtime's threads and
/// quarantines the bad ones, in the inputs' order.
async fn check_inputs(
    staged: Vec<StagedInput>,
    partition: &PartitionId,
    options: &CompactOptions,
) -> Result<(Vec<CheckedInput>, Vec<Quarantined>)> {
    let partition = partition.clone();
    let keys = options.keys.clone();
    let budget = options.budget_bytes;
    let verdicts = tokio::task::spawn_blocking(move || {
        crate::input::check_inputs(staged, &partition, &keys, budget)
    })
    .await
    .map_err(|e| Error::invariant(format!("input check task failed: {e}")))??;
    let mut checked = Vec::new();
    let mut quarantined = Vec::new();
    for (staged, verdict) in verdicts {
        match verdict {
            Ok(c) => checked.push(c),
            Err(reason) => quarantined.push(quarantine(&staged, &reason)?),
        }
    }
    Ok((checked, quarantined))
}

/// The name of an output: a hash of its input set and the settings that shape its bytes,
/// then the job id, so no two attempts ever write the same key (an upload never overwrites
/// an object that GC listed, or that another attempt committed). Returns the key and the hash.
fn output_key(
    layout: &KeyLayout,
    partition: &PartitionId,
    inputs: &[CheckedInput],
    row_group_bytes: u64,
    options: &CompactOptions,
    attempt_id: &str,
) -> (Path, String) {
    let inputs = inputs.iter().map(|c| (&c.staged.key, c.staged.size));
    let hash = input_set_hash(inputs, row_group_bytes, options, None);
    (layout.output_key(partition, &hash, attempt_id), hash)
}

/// The hash naming an input set and the settings that shape the output's bytes: the format,
/// the row-group threshold, any layout away from the plain one, the ranges of a fanned-out
/// job, and each input's key and size in order.
pub(crate) fn input_set_hash<'a>(
    inputs: impl Iterator<Item = (&'a Path, u64)>,
    row_group_bytes: u64,
    options: &CompactOptions,
    ranges: Option<usize>,
) -> String {
    let mut hash = Sha256::new();
    hash.update(OUTPUT_FORMAT_VERSION.as_bytes());
    hash.update(row_group_bytes.to_le_bytes());
    // Only settings away from the plain layout enter the hash, so plain outputs keep their names.
    if options.row_groups_per_block != 1 {
        hash.update(b"blocks");
        hash.update((options.row_groups_per_block as u64).to_le_bytes());
    }
    if let Some(rows) = options.max_rows_per_row_group {
        hash.update(b"max-rows");
        hash.update(rows.to_le_bytes());
    }
    if let Some(ranges) = ranges {
        hash.update(b"ranges");
        hash.update((ranges as u64).to_le_bytes());
    }
    for (key, size) in inputs {
        hash.update(key.as_ref().as_bytes());
        hash.update([0]);
        hash.update(size.to_le_bytes());
    }
    let digest = hash.finalize();
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// A written output (or run), not yet committed.
pub(crate) struct Written {
    pub(crate) output: OutputFile,
    pub(crate) input_set: String,
    pub(crate) row_group_bytes: u64,
    pub(crate) stats: SortStats,
}

/// What one sort-and-write reads.
pub(crate) struct WriteJob<'a> {
    /// The checked inputs, in ordinal order (presorted ones first).
    pub(crate) inputs: &'a [CheckedInput],
    /// Their union.
    pub(crate) unified: &'a UnifiedSchema,
    /// The input bytes the row-group threshold is resolved for: the inputs', or for a range
    /// of a fanned-out job the whole job's, so every range has the same threshold.
    pub(crate) threshold_input_bytes: u64,
    /// Only the rows in this range (every input then presorted, and `rows` of each counts
    /// the range's rows).
    pub(crate) range: Option<&'a KeyRange>,
}

/// Sorts the checked inputs into a new object, named by `name` from the row-group threshold
/// (key and input-set hash). The inner `Err` names an input that turned out unreadable
/// (position and reason); nothing was written then.
pub(crate) async fn sort_and_write(
    job: &JobContext<'_>,
    scratch: &ScratchDir,
    write: &WriteJob<'_>,
    name: &(dyn Fn(u64) -> (Path, String) + Sync),
) -> Result<std::result::Result<Written, (usize, String)>> {
    let (store, options, gauge) = (job.store, job.options, job.gauge);
    let (checked, unified) = (write.inputs, write.unified);
    let row_group_bytes =
        resolve_row_group_bytes(options.row_group_bytes, write.threshold_input_bytes);
    let label = sort_key_label(&options.keys, unified.service_index.is_some());
    // A run of a group without a service column is sorted by time, with every service null:
    // in the (service, time) order too.
    let time_only = sort_key_label(&options.keys, false);
    let presorted: Vec<bool> = checked
        .iter()
        .map(|c| {
            let declared = c.declared_sort_key.as_deref();
            c.staged.is_compacted
                && (declared == Some(label.as_str())
                    || (write.range.is_some() && declared == Some(time_only.as_str())))
        })
        .collect();
    if write.range.is_some() && presorted.iter().any(|p| !p) {
        return Err(Error::invariant(
            "a range of a fanned-out job reads only sorted runs",
        ));
    }
    let staged_block_bytes = if options.row_groups_per_block > 1 {
        row_group_bytes.saturating_mul(options.row_groups_per_block as u64)
    } else {
        0
    };
    let spill_compression =
        check_scratch_space(scratch, checked, options.budget(), staged_block_bytes)?;

    let (key, input_set) = name(row_group_bytes);
    let (properties, blocks) =
        partition_output_settings(unified, options, row_group_bytes, scratch)?;
    // What the writer closes row groups at: a schema of many leaves caps the threshold (see
    // `output_properties`); the name keeps the threshold asked for.
    let row_group_bytes_used = (properties.max_row_group_bytes())
        .map_or(row_group_bytes, |cap| row_group_bytes.min(cap as u64));
    let (upload, task) = start_upload(Arc::clone(store.object_store()), key.clone());
    let expected_rows: u64 = checked.iter().map(|c| c.rows).sum();

    let sorted = tokio::task::block_in_place(|| {
        let mut writer =
            OutputWriter::try_new(upload, Arc::clone(&unified.schema), properties, blocks)?;
        let progress = options
            .progress
            .as_ref()
            .map(|report| move |rows: u64| (report.0)(rows, expected_rows));
        let job = SortJob {
            inputs: checked,
            presorted: &presorted,
            unified,
            budget: options.budget(),
            spill_compression,
            fan_in: options.merge_fan_in,
            code_strings: options.code_strings,
            scratch,
            gauge,
            deadline: options.deadline,
            large_service_rows: Some(large_service_rows(
                checked,
                row_group_bytes,
                options.max_rows_per_row_group,
            )),
            progress: progress.as_ref().map(|p| p as &(dyn Fn(u64) + Sync)),
            range: write.range,
            release_above_bytes: options.release_memory_above_bytes,
        };
        let sorted = with_sink_thread(&mut writer, |sink| sort_inputs(&job, sink));
        let stats = match sorted {
            Ok(Ok(stats)) => stats,
            Ok(Err(SortFailure::BadInput { position, reason })) => {
                return Ok(Err((position, reason)));
            }
            Ok(Err(SortFailure::Failed(e))) | Err(e) => return Err(e),
        };
        let rows = writer.rows();
        if rows != expected_rows {
            return Err(Error::invariant(format!(
                "wrote {rows} rows but the inputs hold {expected_rows}"
            )));
        }
        let metadata = writer.finish()?;
        writer
            .inner_mut()
            .finish()
            .map_err(|e| Error::scratch("upload stream", e))?;
        Ok(Ok((rows, metadata.num_row_groups() as u64, stats)))
    });
    match sorted {
        Ok(Ok((rows, row_groups, stats))) => {
            let bytes = task
                .await
                .map_err(|e| Error::invariant(format!("upload task failed: {e}")))??;
            Ok(Ok(Written {
                output: OutputFile {
                    key: key.to_string(),
                    bytes,
                    rows,
                    row_groups,
                },
                input_set,
                row_group_bytes: row_group_bytes_used,
                stats,
            }))
        }
        Ok(Err(bad)) => {
            let _ = task.await;
            Ok(Err(bad))
        }
        Err(e) => {
            let _ = task.await;
            Err(e)
        }
    }
}

/// Rows of a service that fill half a row group (by bytes, or by the row cap when it is
/// smaller): such a service gets row groups of its own.
fn large_service_rows(
    checked: &[CheckedInput],
    row_group_bytes: u64,
    max_rows: Option<u64>,
) -> u64 {
    let rows: u64 = checked.iter().map(|c| c.rows).sum();
    let bytes: u64 = checked.iter().map(|c| c.uncompressed_bytes).sum();
    let row_bytes = (bytes / rows.max(1)).max(1);
    let by_bytes = row_group_bytes / 2 / row_bytes;
    max_rows
        .map_or(by_bytes, |max| by_bytes.min(max / 2))
        .max(1)
}

/// Fails early when the spill this job may write (plus `staged_block_bytes`, an output block
/// staged before it is laid out) cannot fit the scratch file system, and picks the run
/// encoding: plain when there is room to spare, LZ4 when space is tight. Inputs within the
/// budget's [`scratch_check_above_bytes`](crate::budget::BudgetPlan::scratch_check_above_bytes)
/// spill plain without a look.
fn check_scratch_space(
    scratch: &ScratchDir,
    checked: &[CheckedInput],
    budget: Budget,
    staged_block_bytes: u64,
) -> Result<SpillCompression> {
    let encoded_estimate: u64 = checked.iter().map(|c| c.uncompressed_bytes).sum();
    if encoded_estimate <= budget.shares().scratch_check_above_bytes {
        return Ok(SpillCompression::None);
    }
    let available_bytes = scratch.available_bytes()?;
    // LZ4 runs take about the Parquet pages' uncompressed size; plain runs hold decoded rows,
    // which can be several times more.
    let needed_bytes = encoded_estimate.saturating_add(staged_block_bytes);
    if needed_bytes > available_bytes {
        return Err(Error::ScratchFull {
            path: scratch.path().to_path_buf(),
            needed_bytes,
            available_bytes,
        });
    }
    if available_bytes > 8 * encoded_estimate {
        Ok(SpillCompression::None)
    } else {
        Ok(SpillCompression::Lz4)
    }
}

//! The driver: compacts one partition in named steps, each in a module of its own.
//!
//! 1. **Read the state** (`state`): the latest manifest and a listing of the ingest
//!    directory give the live set (the reader rule). Nothing to merge means `noop`. Then
//!    **size** the job (`sizing`): the scratch space it needs, by the rule every task
//!    enforces, from the inputs' footers when they could pass it; an input too large for any
//!    task stays live, uncompacted and reported, and `auto` fans out as the need takes.
//!    A job that only checks late files (the late-file policy keeps them waiting, [`crate::late`])
//!    stages and checks those not checked yet (steps 2 and 3), records them, and commits only
//!    what it quarantined; one that only collects goes straight to step 6.
//! 2. **Stage** (`staging`): each live input gets a local file (the store's own file for a
//!    local directory; a streamed download into scratch otherwise), so it can be read page by
//!    page.
//! 3. **Check** (`staging`): every input's footer and key columns are validated against the
//!    partition; bad inputs are quarantined (recorded, left untouched, never deleted). A group
//!    that downloads its inputs does steps 2 and 3 beside step 4 (`arriving`): the sort starts
//!    from the inputs' footers and reads each input once it has arrived and passed its check.
//! 4. **Sort and write** (`writing`): the bounded-memory sort streams sorted chunks to the
//!    output writer, which uploads row groups as they complete. An input found unreadable
//!    midway is quarantined and the step restarts without it (`producing`).
//! 5. **Commit** (`committing`): one create-only manifest write makes the output live and
//!    retires the inputs; losing the race is detected and reported (`noop` or `conflict`).
//! 6. **Collect garbage** of the partition past the grace period (`job`).
//!
//! Steps 2 to 4 run in one task (`producing`), or fanned out into key ranges
//! ([`fan_out`]), which commits through step 5 too. The job (`job`) runs the steps under its
//! report: every request goes through a counting store, and the report prices them with the
//! job's duration and CPU time (`cost`, `cpu_ms`).
//!
//! The steps never name this driver, and each names only the steps before it in this order:
//! `job`, `state`, `staging`, `sizing`, `arriving`, `writing`, `producing`, `committing`,
//! [`fan_out`]
//! (`tests/layers.rs` checks it).

mod arriving;
mod committing;
pub mod fan_out;
mod job;
mod producing;
mod sizing;
mod staging;
mod state;
mod writing;

use crate::error::Result;
use crate::late::forget_checked;
use crate::options::{CompactOptions, JobMode};
use crate::partition::{KeyLayout, PartitionId};
use crate::report::{CompactionReport, Status};
use crate::store::Store;
use committing::{commit_produced, known_holds, release_holds};
use job::{CommittedLiveSet, JobContext, JobRun};
use producing::{check_late_files, settle_without_rows};
use sizing::size_job;

pub use sizing::Prepared;
use state::read_job_state;

pub use fan_out::commit_fanned_out;

/// Compacts one partition and reports what happened. Errors that leave nothing committed
/// are reported as `failed` or `timeout` rather than returned; an `Err` means the job could
/// not even read the partition's state.
pub async fn compact_partition(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
) -> Result<CompactionReport> {
    compact_partition_prepared(store, layout, partition, options, None).await
}

/// [`compact_partition`] from what a look at the job's size read just before
/// ([`fan_out::estimate`]): its state, and its sizing when the look got that far, are not read
/// again. A merge's state read a moment earlier is as good as one read now: the commit is
/// conditional on the manifest version it saw.
pub async fn compact_partition_prepared(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    prepared: Option<Prepared>,
) -> Result<CompactionReport> {
    let (run, mut report) = JobRun::start(store, layout, partition, options)?;
    let steps = compact(&run.context(), &mut report, prepared).await;
    Ok(run.finish(steps, report).await)
}

/// Steps 1 to 5 of one job, and the live set its commit made when they know it;
/// [`JobRun::finish`] writes the symlink manifest, collects the garbage and prices the report.
async fn compact(
    job: &JobContext<'_>,
    report: &mut CompactionReport,
    prepared: Option<Prepared>,
) -> Result<Option<CommittedLiveSet>> {
    // A job that only collects reads nothing here: its GC (step 6) reads what it needs.
    let mode = job.options.job_mode();
    if mode == JobMode::Collect {
        report.status = Status::Noop;
        return Ok(None);
    }
    // Step 1: read the state (unless a look at the job's size just read it).
    let (state, mut prepared_sizing) = match prepared {
        Some(Prepared { state, sizing }) => (state, sizing.filter(|_| mode.is_merge())),
        None => (
            read_job_state(job.store, job.layout, job.partition, &job.options.clock).await?,
            None,
        ),
    };
    report.manifest_version = state.manifest.version;
    report.unaddressable = state.unaddressable;
    let (symlink, manifest, listing) = (state.symlink, state.manifest, state.listing);
    let listed_at_ms = state.listed_at_ms;
    let wanted = match mode {
        // An append merges the uncompacted files alone.
        JobMode::Append => (state.wanted)
            .map(|w| {
                w.into_iter()
                    .filter(|w| !w.is_compacted)
                    .collect::<Vec<_>>()
            })
            .filter(|w| !w.is_empty()),
        _ => state.wanted,
    };
    let Some(wanted) = wanted else {
        report.status = Status::Noop;
        return Ok(None);
    };

    // Steps 2 to 4: a job that only checks or collects merges nothing; late files that bring no
    // row to earlier outputs in one piece are settled reading only them; late files into a
    // fanned-out hour are merged into the ranges they touch; otherwise in one task or fanned
    // out. Inputs too large for any task stay live (`sizing`).
    let in_one_piece = manifest.compacted_in_one_piece();
    let settled = match mode {
        JobMode::Collect | JobMode::Append => None,
        JobMode::Check => {
            let (settled, checked) = check_late_files(job, &wanted).await?;
            report.late_check = Some(checked);
            settled
        }
        JobMode::Merge => settle_without_rows(job, &wanted, in_one_piece).await?,
    };
    let produced = match settled {
        Some(settled) => settled,
        None if !mode.writes() => {
            report.status = Status::Noop;
            return Ok(None);
        }
        None if mode == JobMode::Append => {
            let sizing = size_job(job, wanted).await?;
            report.oversized.clone_from(&sizing.oversized);
            let mut piece = fan_out::produce_sized(job, manifest.version, sizing, false).await?;
            // A piece beside the others: no range of the partition's is its alone.
            piece.outputs.iter_mut().for_each(|w| w.range = None);
            piece
        }
        None => match fan_out::produce_into_ranges(job, &manifest, &wanted).await? {
            Some(into_ranges) => into_ranges,
            None => {
                let sizing = match prepared_sizing.take() {
                    Some(sizing) => sizing,
                    None => size_job(job, wanted).await?,
                };
                report.oversized.clone_from(&sizing.oversized);
                if sizing.wanted.iter().all(|w| w.is_compacted) && in_one_piece {
                    report.status = Status::Noop;
                    return Ok(None);
                }
                fan_out::produce_sized(job, manifest.version, sizing, in_one_piece).await?
            }
        },
    };

    // Step 5: commit; the holds on the outputs go, whatever its outcome. Late files merged
    // leave nothing waiting.
    let holds = known_holds(job, &produced);
    let committed = commit_produced(job, &manifest, listed_at_ms, &listing, produced, report).await;
    release_holds(job, holds).await;
    if mode.is_merge() && manifest.version > 0 && report.status.is_success() {
        forget_checked(job.store, job.partition).await;
    }
    Ok(CommittedLiveSet::of(symlink, committed?))
}

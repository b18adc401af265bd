//! Dispatch: turning accepted events, sweeps and backfills into at most one job per partition.
//!
//! Per partition, bounded work: one listing of the ingest directory (plus the manifest when
//! it has files), one read of the job record when the partition is ready, and at most two
//! writes. The decision itself is [`crate::serverless::readiness::plan_partition`], pure; this module reads
//! its inputs and carries it out.

pub mod compactor;
pub mod hand_off;
pub mod job;
pub mod job_lifecycle;
pub mod planner;

mod failures;

pub use failures::{FailureAction, GIVE_UP_AFTER_ATTEMPTS};

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::late::{LateVerdict, read_checked};
use crate::manifest::{LiveSet, live_set, load_latest};
use crate::options::JobMode;
use crate::partition::{
    GC_DUE_PREFIX, KeyLayout, PartitionId, SWEEP_CURSOR_KEY, parse_gc_due_key, parse_hour,
    parse_late_key, validate_tenant,
};
use crate::report::Status;
use crate::serverless::events::BackfillRequest;
use crate::serverless::readiness::{
    Decision, JobState, NotReady, PartitionFacts, ReadinessConfig, plan_partition, readiness,
    sweep_window,
};
use crate::store::Store;

pub use job::{JobRecord, WriteOutcome};

/// Most partitions one backfill request may cover (tenants × hours).
pub const MAX_BACKFILL_PARTITIONS: usize = 100_000;

/// What was done with one partition, as the planner (or a local backfill) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeDecision {
    /// A job record was written.
    Dispatched,
    /// A job record would be written (dry run).
    WouldDispatch,
    /// A job is already scheduled or running.
    JobActive,
    /// The hour is open and below the pressure thresholds.
    NotReady,
    /// No uncompacted files.
    NothingToCompact,
    /// Its job failed the same way on every attempt and was given up: the job record says
    /// why; a new file or a request dispatches it again.
    Parked,
    /// Planning failed (the error in the reason).
    Failed,
    /// A local backfill would compact it (dry run).
    WouldCompact,
    /// A local backfill compacted it, with this outcome.
    #[serde(untagged)]
    Compaction(Status),
}

impl OutcomeDecision {
    /// The name written in the JSON (`dispatched`, `job_active`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dispatched => "dispatched",
            Self::WouldDispatch => "would_dispatch",
            Self::JobActive => "job_active",
            Self::NotReady => "not_ready",
            Self::NothingToCompact => "nothing_to_compact",
            Self::Parked => "parked",
            Self::Failed => "failed",
            Self::WouldCompact => "would_compact",
            Self::Compaction(status) => status.as_str(),
        }
    }

    /// The outcome of a planned [`Decision`] that writes nothing.
    fn of_skip(not_ready: &NotReady) -> Self {
        match not_ready {
            NotReady::NothingToCompact => Self::NothingToCompact,
            NotReady::HourOpen { .. } | NotReady::LateFilesWait(_) => Self::NotReady,
            NotReady::JobActive { .. } => Self::JobActive,
            NotReady::Parked { .. } => Self::Parked,
        }
    }
}

impl std::fmt::Display for OutcomeDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl PartialEq<&str> for OutcomeDecision {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What happened to one partition, as the planner reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionOutcome {
    /// Tenant (null in a layout without tenants).
    pub tenant: Option<String>,
    /// Hour, `YYYY-MM-DDTHH`.
    pub hour: String,
    /// What was done.
    pub decision: OutcomeDecision,
    /// Why, in words.
    pub reason: String,
    /// The job id when a job record was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// For `failed`: the kind of the error, as in the reports and metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// For an hour already compacted with late files: what the late-file policy decided
    /// (`merge`, `check` or `wait`), why, and the facts it weighed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late: Option<LateVerdict>,
}

impl PartitionOutcome {
    /// An outcome of `decision` for `partition`, without a job id or an error kind.
    pub fn new(partition: &PartitionId, decision: OutcomeDecision, reason: String) -> Self {
        Self {
            tenant: partition.tenant().map(str::to_string),
            hour: partition.hour_label(),
            decision,
            reason,
            job_id: None,
            error_kind: None,
            late: None,
        }
    }

    /// A partition whose planning failed: reported, and the sweep or backfill goes on.
    fn failed(partition: &PartitionId, error: &Error) -> Self {
        tracing::error!(partition = %partition, error = %error, kind = error.kind().name(), "partition not planned");
        Self {
            error_kind: Some(error.kind()),
            ..Self::new(partition, OutcomeDecision::Failed, error.to_string())
        }
    }

    /// True when a job record was written (or would be, in a dry run).
    pub fn is_dispatched(&self) -> bool {
        matches!(
            self.decision,
            OutcomeDecision::Dispatched | OutcomeDecision::WouldDispatch
        )
    }
}

/// How a partition is considered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchMode {
    /// Skip the readiness check (backfill); single-flight still holds.
    pub requested: bool,
    /// Decide but write nothing.
    pub dry_run: bool,
}

/// How long after an hour becomes ready by the clock (its close plus the lateness grace) the
/// plan reads its manifest even when no file of its ingest directory could be uncompacted:
/// the pieces an open hour was compacted into under small-file pressure are merged at its
/// close, and the last of those jobs may have taken every file, which GC then deleted. The
/// sweep plans every hour of its window, so it reads each such manifest a few times at most.
pub const PIECES_LOOK: Duration = Duration::from_secs(60 * 60);

/// Reads what the plan needs about a partition: its live files and manifest version. Without
/// a file that could be uncompacted the manifest is read only when `pieces` (a request, or
/// [`pieces_may_wait`]): otherwise the hour has nothing to merge that the plan would act on.
pub async fn partition_facts(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    pieces: bool,
) -> Result<(PartitionFacts, LiveSet)> {
    let dir = layout.ingest_dir(partition);
    let listing = store.list_sorted(&dir).await?;
    let has_candidates = listing.iter().any(|m| {
        m.location
            .filename()
            .is_some_and(|n| layout.is_input_name(n))
    });
    if !has_candidates && !pieces {
        // Nothing could be uncompacted: skip reading the manifest.
        return Ok((PartitionFacts::empty(partition), LiveSet::default()));
    }
    let manifest = load_latest(store, layout, partition).await?;
    let live = live_set(layout, &dir, &listing, &manifest);
    let mut facts = PartitionFacts::new(partition, &live, &manifest);
    if manifest.version > 0 && !live.ingest.is_empty() {
        // Files that may be late: those a check passed wait without another.
        let checked = read_checked(store, partition).await?;
        facts.unchecked_files = checked.unchecked(&live.ingest).len();
    }
    Ok((facts, live))
}

/// Whether `partition` became ready by the clock (under `config`) less than [`PIECES_LOOK`]
/// before `now`: the pieces of its open hour may wait for their merge.
pub fn pieces_may_wait(
    partition: &PartitionId,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
) -> bool {
    let look = chrono::Duration::from_std(PIECES_LOOK).unwrap_or(chrono::Duration::MAX);
    let ready_at = crate::serverless::readiness::ready_at(partition, config);
    now >= ready_at
        && ready_at
            .checked_add_signed(look)
            .is_none_or(|end| now < end)
}

/// What a job on `partition` started at `now` by hand does under the late-file policy of
/// `config`: when its late files wait, it checks those not checked yet, or only collects
/// garbage when every one is checked; otherwise it merges (an open hour too: it was asked).
pub async fn late_policy_mode(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
) -> Result<(JobMode, Option<LateVerdict>)> {
    // Asked for: its pieces too.
    let (facts, _) = partition_facts(store, layout, partition, true).await?;
    Ok(match readiness(&facts, now, config) {
        // Asked for, an open hour is merged whole.
        Ok(ready) if ready.mode() == JobMode::Append => (JobMode::Merge, None),
        Ok(ready) => (ready.mode(), ready.late().copied()),
        Err(NotReady::LateFilesWait(verdict)) => (JobMode::Collect, Some(verdict)),
        Err(_) => (JobMode::Merge, None),
    })
}

/// Plans one partition and carries the decision out: creates (or replaces a stale) job record.
pub async fn dispatch_partition(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
    mode: DispatchMode,
) -> Result<PartitionOutcome> {
    let pieces = mode.requested || pieces_may_wait(partition, now, config);
    let (facts, _) = partition_facts(store, layout, partition, pieces).await?;
    let ready = readiness(&facts, now, config);
    let needs_job_state = ready.is_ok()
        || (mode.requested
            && matches!(
                ready,
                Err(NotReady::HourOpen { .. } | NotReady::LateFilesWait(_))
            ));
    let stored = if needs_job_state {
        job::read_job(store, partition).await?
    } else {
        None
    };
    let state = match &stored {
        Some(s) if s.record.as_ref().is_some_and(|r| r.parked.is_some()) => JobState::Parked {
            since: s.written_at,
        },
        Some(s) => JobState::Present {
            written_at: s.written_at,
        },
        None => JobState::Absent,
    };
    let decision = plan_partition(&facts, state, now, config, mode.requested);
    let reason = decision.to_string();
    let late = decision.late().copied();
    let job_mode = match &decision {
        Decision::Dispatch(ready) | Decision::ReplaceStale { ready, .. } => ready.mode(),
        Decision::Skip(_) => JobMode::Merge,
    };
    let record = JobRecord::new(partition, &reason, now).with_mode(job_mode);
    let written = match (&decision, mode.dry_run) {
        (Decision::Skip(not_ready), _) => {
            let decision = OutcomeDecision::of_skip(not_ready);
            return Ok(PartitionOutcome {
                late,
                ..PartitionOutcome::new(partition, decision, reason)
            });
        }
        (_, true) => {
            let decision = OutcomeDecision::WouldDispatch;
            return Ok(PartitionOutcome {
                late,
                ..PartitionOutcome::new(partition, decision, reason)
            });
        }
        (Decision::Dispatch(_), false) => job::create_job(store, &record, partition).await?,
        (Decision::ReplaceStale { .. }, false) => {
            let Some(stored) = &stored else {
                return Err(Error::invariant(
                    "a stale job was planned without a job record",
                ));
            };
            job::replace_job(store, &record, partition, &stored.version).await?
        }
    };
    let lost = "another planner dispatched this partition first";
    Ok(PartitionOutcome {
        late,
        ..dispatch_outcome(partition, written, record, reason, lost)
    })
}

/// What writing `record` for `partition` did: `Dispatched` with its job id, or `JobActive`
/// (`lost` says why) when another record is in place.
fn dispatch_outcome(
    partition: &PartitionId,
    written: WriteOutcome,
    record: JobRecord,
    reason: String,
    lost: &str,
) -> PartitionOutcome {
    match written {
        WriteOutcome::Written => {
            tracing::info!(partition = %partition, job_id = %record.job_id, reason = %reason, "dispatched a job");
            PartitionOutcome {
                job_id: Some(record.job_id),
                ..PartitionOutcome::new(partition, OutcomeDecision::Dispatched, reason)
            }
        }
        WriteOutcome::Lost => {
            PartitionOutcome::new(partition, OutcomeDecision::JobActive, lost.to_string())
        }
    }
}

/// The tenants of `hours`, or the given ones, validated: one delimited listing of each
/// directory the layout keeps tenants in for those hours (one in all when it does not depend
/// on the hour, as in this project's layout). A layout without tenants has one, `None`, and
/// refuses given ones.
pub async fn find_tenants(
    store: &Store,
    layout: &KeyLayout,
    given: Option<&[String]>,
    hours: &[DateTime<Utc>],
) -> Result<Vec<Option<String>>> {
    if !layout.has_tenant() {
        layout.refuse_tenant(given.and_then(|g| g.first()).map(String::as_str))?;
        return Ok(vec![None]);
    }
    if let Some(given) = given {
        for tenant in given {
            validate_tenant(tenant)?;
        }
        let unique: BTreeSet<String> = given.iter().cloned().collect();
        return Ok(unique.into_iter().map(Some).collect());
    }
    let template = layout.template();
    let dirs: BTreeSet<String> = hours
        .iter()
        .filter_map(|hour| template.tenants_dir(*hour))
        .collect();
    let mut tenants = BTreeSet::new();
    for dir in dirs {
        for child in store.list_dirs(&Path::from(dir.as_str())).await? {
            let Some(name) = child.filename() else {
                continue;
            };
            match template.tenant_of_dir(name) {
                Some(tenant) => {
                    tenants.insert(tenant);
                }
                None => {
                    tracing::warn!(directory = %child, "ignoring a directory that is not a tenant")
                }
            }
        }
    }
    Ok(tenants.into_iter().map(Some).collect())
}

/// Time a sweep or backfill keeps free before the invocation's deadline, to report and save
/// where it stopped.
pub const PLANNER_DEADLINE_MARGIN: Duration = Duration::from_secs(10);

/// True when work must stop to end before `deadline`.
fn out_of_time(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() + PLANNER_DEADLINE_MARGIN >= d)
}

/// What a sweep did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SweepReport {
    /// Every partition considered, in the order considered.
    pub partitions: Vec<PartitionOutcome>,
    /// Partitions whose planning failed (in `partitions` with decision `failed`).
    pub failed: usize,
    /// False when the deadline stopped it; the next sweep resumes after the last partition.
    pub complete: bool,
}

impl SweepReport {
    /// The report without the partitions that had nothing to compact (the answer a sweep
    /// returns: those are most of the window and say nothing).
    pub fn without_idle(mut self) -> Self {
        self.partitions
            .retain(|p| p.decision != OutcomeDecision::NothingToCompact);
        self
    }
}

/// The sweep: every tenant's partitions in the window of recent hours, planned as if an event
/// had arrived. Lists tenants once, then only the window's hour directories.
pub async fn sweep(
    store: &Store,
    layout: &KeyLayout,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
) -> Result<Vec<PartitionOutcome>> {
    Ok(sweep_until(store, layout, now, config, None)
        .await?
        .partitions)
}

/// The sweep, bounded by an invocation deadline. A partition that fails is reported and the
/// sweep goes on. It starts after the partition where the last sweep stopped (the cursor at
/// [`SWEEP_CURSOR_KEY`]) and, when time runs out, saves where it stopped, so successive sweeps
/// cover every tenant and hour however many there are.
pub async fn sweep_until(
    store: &Store,
    layout: &KeyLayout,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
    deadline: Option<Instant>,
) -> Result<SweepReport> {
    let window: Vec<DateTime<Utc>> = sweep_window(now, config.sweep_hours);
    let tenants = find_tenants(store, layout, None, &window).await?;
    let mut partitions = Vec::new();
    for tenant in &tenants {
        for hour in &window {
            partitions.push(PartitionId::of(tenant.as_deref(), *hour)?);
        }
    }
    if let Some(after) = read_sweep_cursor(store).await
        && let Some(i) = partitions.iter().position(|p| p.relative_dir() == after)
    {
        partitions.rotate_left(i + 1);
    }
    let mut report = SweepReport {
        complete: true,
        ..Default::default()
    };
    for (i, partition) in partitions.iter().enumerate() {
        if i > 0 && out_of_time(deadline) {
            report.complete = false;
            write_sweep_cursor(store, &partitions[i - 1]).await;
            tracing::warn!(
                done = i,
                total = partitions.len(),
                "sweep stopped before the deadline; the next one resumes here"
            );
            break;
        }
        let outcome = match dispatch_partition(
            store,
            layout,
            partition,
            now,
            config,
            DispatchMode::default(),
        )
        .await
        {
            Ok(outcome) => outcome,
            Err(e) => {
                report.failed += 1;
                PartitionOutcome::failed(partition, &e)
            }
        };
        report.partitions.push(outcome);
    }
    let swept: BTreeSet<PartitionId> = partitions.into_iter().collect();
    dispatch_late_waiting(store, layout, now, config, deadline, &swept, &mut report).await;
    dispatch_garbage_due(store, now, config, deadline, &mut report).await;
    Ok(report)
}

/// Most partitions with late files waiting one sweep looks at (the rest wait for the next).
pub const MAX_LATE_WAITING_PER_SWEEP: usize = 500;

/// Plans each partition with a checked-late record (late files waiting for the late-file
/// policy) that the window did not cover, whatever its hour's age, so late files are merged
/// once the policy says, with no new event. A record whose partition has nothing left to
/// merge is deleted. Failures are counted in the report; at most
/// [`MAX_LATE_WAITING_PER_SWEEP`] a sweep.
async fn dispatch_late_waiting(
    store: &Store,
    layout: &KeyLayout,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
    deadline: Option<Instant>,
    swept: &BTreeSet<PartitionId>,
    report: &mut SweepReport,
) {
    let records = match store.list_sorted(&crate::late::records_prefix()).await {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!(error = %e, "could not list the partitions with late files waiting");
            report.failed += 1;
            return;
        }
    };
    let waiting = (records.iter())
        .filter_map(|m| Some((m, parse_late_key(m.location.as_ref()).ok()?)))
        .filter(|(_, partition)| !swept.contains(partition))
        .take(MAX_LATE_WAITING_PER_SWEEP);
    for (meta, partition) in waiting {
        if out_of_time(deadline) {
            report.complete = false;
            break;
        }
        let mode = DispatchMode::default();
        let outcome = match dispatch_partition(store, layout, &partition, now, config, mode).await {
            Ok(outcome) => outcome,
            Err(e) => {
                report.failed += 1;
                PartitionOutcome::failed(&partition, &e)
            }
        };
        if outcome.decision == OutcomeDecision::NothingToCompact {
            // Merged (or gone) since: the record is stale, unless rewritten meanwhile.
            if let Err(e) = store.delete_listed(meta).await {
                tracing::warn!(partition = %partition, error = %e, "could not delete a stale checked-late record");
            }
        }
        report.partitions.push(outcome);
    }
}

/// Most partitions with garbage due one sweep dispatches (the rest wait for the next).
pub const MAX_GARBAGE_DUE_PER_SWEEP: usize = 500;

/// Gives a job record to each partition whose garbage-due marker is older than the grace,
/// whatever its hour's age: the compactor's job finds nothing or late files to compact, and
/// its GC deletes the retired inputs and orphans past the grace (then the marker, once none
/// is left). A partition whose job is still at work waits for it; a stale record is replaced.
/// Failures are counted in the report; at most [`MAX_GARBAGE_DUE_PER_SWEEP`] a sweep.
async fn dispatch_garbage_due(
    store: &Store,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
    deadline: Option<Instant>,
    report: &mut SweepReport,
) {
    let markers = match store.list_sorted(&Path::from(GC_DUE_PREFIX)).await {
        Ok(markers) => markers,
        Err(e) => {
            tracing::warn!(error = %e, "could not list the partitions with garbage due");
            report.failed += 1;
            return;
        }
    };
    // Markers are dated by the store; the event's time may be old (a replayed or delayed
    // event), so the host's clock counts when it is later. A dispatch a skewed clock makes
    // early only costs a job whose GC finds nothing due yet (it keeps the marker).
    let now = now.max(Utc::now());
    let grace = chrono::Duration::from_std(config.gc_grace).unwrap_or(chrono::Duration::MAX);
    let due = (markers.iter())
        .filter(|m| m.last_modified + grace <= now)
        .filter_map(|m| parse_gc_due_key(m.location.as_ref()).ok())
        .take(MAX_GARBAGE_DUE_PER_SWEEP);
    for partition in due {
        if out_of_time(deadline) {
            report.complete = false;
            break;
        }
        let outcome = match dispatch_garbage_job(store, &partition, now, config).await {
            Ok(outcome) => outcome,
            Err(e) => {
                report.failed += 1;
                PartitionOutcome::failed(&partition, &e)
            }
        };
        report.partitions.push(outcome);
    }
}

/// A job record for `partition`, whose garbage is due: created, or replacing a stale one.
async fn dispatch_garbage_job(
    store: &Store,
    partition: &PartitionId,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
) -> Result<PartitionOutcome> {
    let reason = "garbage due: retired files or orphans past the grace".to_string();
    // It only collects: what else the partition needs, the end of the job re-arms it for.
    let record = JobRecord::new(partition, &reason, now).with_mode(JobMode::Collect);
    let written = match job::read_job(store, partition).await? {
        None => job::create_job(store, &record, partition).await?,
        // A parked partition waits for a new file or a request; its garbage waits with it.
        Some(stored) if stored.record.as_ref().is_some_and(|r| r.parked.is_some()) => {
            return Ok(PartitionOutcome::new(
                partition,
                OutcomeDecision::Parked,
                "parked: its job failed the same way on every attempt".into(),
            ));
        }
        Some(stored) => {
            let lease =
                chrono::Duration::from_std(config.job_lease).unwrap_or(chrono::Duration::MAX);
            if stored.written_at + lease > now {
                WriteOutcome::Lost
            } else {
                job::replace_job(store, &record, partition, &stored.version).await?
            }
        }
    };
    let lost = "a job of this partition is at work; its GC takes the garbage";
    Ok(dispatch_outcome(partition, written, record, reason, lost))
}

/// The partition the last sweep stopped after; `None` when there is none or it is unreadable
/// (the sweep then starts at the beginning, which is always safe).
async fn read_sweep_cursor(store: &Store) -> Option<String> {
    let key = Path::from(SWEEP_CURSOR_KEY);
    let bytes = match store.object_store().get(&key).await {
        Ok(result) => result.bytes().await.ok()?,
        Err(
            object_store::Error::NotFound { .. } | object_store::Error::PermissionDenied { .. },
        ) => {
            return None;
        }
        Err(e) => {
            tracing::warn!(key = %key, error = %e, "cannot read the sweep cursor; starting at the beginning");
            return None;
        }
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("after")?.as_str().map(str::to_string)
}

/// Saves where the sweep stopped; a failure only costs the next sweep its head start.
async fn write_sweep_cursor(store: &Store, after: &PartitionId) {
    let key = Path::from(SWEEP_CURSOR_KEY);
    let body = serde_json::json!({ "after": after.relative_dir() }).to_string();
    if let Err(e) = store.object_store().put(&key, body.into()).await {
        tracing::warn!(key = %key, error = %e, "cannot save the sweep cursor");
    }
}

/// The partitions a backfill covers, validated and bounded.
pub async fn backfill_partitions(
    store: &Store,
    layout: &KeyLayout,
    request: &BackfillRequest,
) -> Result<Vec<PartitionId>> {
    let from = parse_hour(&request.from)?;
    let to = parse_hour(&request.to)?;
    if to < from {
        return Err(Error::Config {
            message: format!(
                "backfill range {} .. {} ends before it starts",
                request.from, request.to
            ),
        });
    }
    let num_hours = ((to - from).num_hours() + 1) as usize;
    let hours: Vec<DateTime<Utc>> = (0..num_hours)
        .map(|h| from + chrono::Duration::hours(h as i64))
        .collect();
    let tenants = find_tenants(store, layout, request.tenants.as_deref(), &hours).await?;
    let total = num_hours.saturating_mul(tenants.len());
    if total > MAX_BACKFILL_PARTITIONS {
        return Err(Error::Config {
            message: format!(
                "backfill covers {total} partitions, more than {MAX_BACKFILL_PARTITIONS}; split the range"
            ),
        });
    }
    let mut partitions = Vec::with_capacity(total);
    for tenant in &tenants {
        for h in 0..num_hours {
            partitions.push(PartitionId::of(
                tenant.as_deref(),
                from + chrono::Duration::hours(h as i64),
            )?);
        }
    }
    Ok(partitions)
}

/// What a backfill scheduled.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BackfillReport {
    /// Every partition with uncompacted files, and what was done with it.
    pub partitions: Vec<PartitionOutcome>,
    /// Partitions scheduled (or that would be, in a dry run).
    pub scheduled: usize,
    /// Partitions looked at.
    pub considered: usize,
    /// Nothing was written.
    pub dry_run: bool,
    /// Partitions whose planning failed (in `partitions` with decision `failed`).
    pub failed: usize,
    /// False when the deadline stopped it before the end of the range.
    pub complete: bool,
    /// When incomplete, the first partition not considered (re-run the backfill from there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<String>,
}

/// Schedules every partition of the range that has uncompacted files, at most one job
/// record write per `min_interval` (rate limit). `progress(done, total)` is called after each.
pub async fn backfill(
    store: &Store,
    layout: &KeyLayout,
    request: &BackfillRequest,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
    min_interval: Duration,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<BackfillReport> {
    let pacing = Pacing {
        min_interval,
        deadline: None,
    };
    backfill_until(store, layout, request, now, config, pacing, progress).await
}

/// How a backfill spreads its work: the rate limit, and the invocation deadline it stops
/// before.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pacing {
    /// Least time between two job records written.
    pub min_interval: Duration,
    /// Stop before this instant (a Lambda invocation's deadline).
    pub deadline: Option<Instant>,
}

/// [`backfill`], bounded by a deadline: a partition that fails is reported and the backfill
/// goes on; when time runs out it reports the first hour it did not consider.
pub async fn backfill_until(
    store: &Store,
    layout: &KeyLayout,
    request: &BackfillRequest,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
    pacing: Pacing,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<BackfillReport> {
    let partitions = backfill_partitions(store, layout, request).await?;
    let mode = DispatchMode {
        requested: true,
        dry_run: request.dry_run,
    };
    let mut report = BackfillReport {
        dry_run: request.dry_run,
        considered: partitions.len(),
        complete: true,
        ..Default::default()
    };
    for (i, partition) in partitions.iter().enumerate() {
        if i > 0 && out_of_time(pacing.deadline) {
            report.complete = false;
            report.considered = i;
            report.resume_from = Some(partition.relative_dir());
            break;
        }
        let outcome = match dispatch_partition(store, layout, partition, now, config, mode).await {
            Ok(outcome) => outcome,
            Err(e) => {
                report.failed += 1;
                PartitionOutcome::failed(partition, &e)
            }
        };
        if outcome.decision != OutcomeDecision::NothingToCompact {
            if outcome.decision == OutcomeDecision::Dispatched && !pacing.min_interval.is_zero() {
                tokio::time::sleep(pacing.min_interval).await;
            }
            report.scheduled += usize::from(outcome.is_dispatched());
            report.partitions.push(outcome);
        }
        progress(i + 1, partitions.len());
    }
    Ok(report)
}

#[cfg(test)]
mod late_files;
#[cfg(test)]
mod order_properties;
#[cfg(test)]
mod tests;

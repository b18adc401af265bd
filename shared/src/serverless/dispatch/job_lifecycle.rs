//! The compactor's side of a job: compact the partition, then end the job record — delete
//! it, or re-arm it when the partition is ready again by the planner's rule (files that
//! arrived during the job wait for the hour to close, or for the pressure thresholds, like
//! any others; re-arming on any new file rewrote open hours back to back).

use chrono::{TimeZone, Utc};
use serde::Serialize;

use super::failures::{FailureAction, clear_failures, count_failure};
use super::hand_off::{Claim, claim_hand_off, release_hand_off};
use super::job::{self, JobRecord, StoredJob, WriteOutcome};
use super::{partition_facts, pieces_may_wait};
use crate::compact::fan_out::{active_job, estimate_prepared};
use crate::compact::{Prepared, compact_partition_prepared};
use crate::cost::RequestCounts;
use crate::error::Result;
use crate::options::CompactOptions;
use crate::partition::{KeyLayout, PartitionId, is_attempt_output};
use crate::report::{CompactionReport, FanOutShape, Status};
use crate::serverless::readiness::{ReadinessConfig, readiness};
use crate::serverless::state_machine::{FanOutStateMachine, execution_name};
use crate::store::Store;
use crate::store::raw_s3::IncompleteUpload;

/// What became of the job record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordAction {
    /// Deleted: the partition is not ready (nothing left, or an open hour below the
    /// thresholds: the next event or the sweep dispatches it when it is).
    Deleted,
    /// Overwritten: the partition is ready again; the new record dispatches the next job.
    ReArmed,
    /// Left in place: the job failed or timed out (Lambda retries it, and once stale the
    /// planner or the sweep replaces it), or was handed to the fan-out state machine, whose
    /// commit step ends it.
    Left,
    /// Another job's record replaced ours meanwhile; it is that job's to end.
    Superseded,
    /// Marked parked: the job failed the same way on every attempt ([`FailureAction`]).
    Parked,
}

/// A finished job.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    /// The compaction report.
    pub report: CompactionReport,
    /// The dispatch job id, when a job record was found.
    pub dispatch_job_id: Option<String>,
    /// What became of the job record.
    pub record: RecordAction,
    /// Incomplete multipart uploads of earlier attempts of the same job that were aborted.
    pub aborted_uploads: usize,
    /// A failed job's count, and what it led to.
    pub failure: Option<FailureAction>,
}

/// What the compactor read before it ran a job here: the job record and, from its look at the
/// job's size, the partition's state; the job reads none of it again, and its report counts
/// the requests from `requests_before` on.
pub struct ReadBefore {
    /// The job record as read.
    pub stored: Option<StoredJob>,
    /// What the look at the job's size read (`None`: no look).
    pub prepared: Option<Prepared>,
    /// The counting store's counts before the first of those reads.
    pub requests_before: RequestCounts,
}

/// Runs one compaction job and ends its job record, re-arming it only when `readiness` says
/// the partition is ready again.
pub async fn run_compaction_job(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    readiness_config: &ReadinessConfig,
) -> Result<JobOutcome> {
    // The job's cost counts the job record's requests besides the compaction's.
    let store = &store.counting_requests();
    let requests_before = store.request_counts();
    let stored = job::read_job(store, partition).await?;
    let read = ReadBefore {
        stored,
        prepared: None,
        requests_before,
    };
    run_compaction_job_after(store, layout, partition, options, readiness_config, read).await
}

/// [`run_compaction_job`] after the compactor read the job record, and perhaps the partition's
/// state, itself (`read`), through `store`, which counts requests
/// ([`Store::counting_requests`]).
pub async fn run_compaction_job_after(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    readiness_config: &ReadinessConfig,
    read: ReadBefore,
) -> Result<JobOutcome> {
    let store = &store.counting_requests();
    let ReadBefore {
        stored,
        prepared,
        requests_before,
    } = read;
    let dispatch_job_id = stored
        .as_ref()
        .and_then(|s| s.record.as_ref())
        .map(|r| r.job_id.clone());
    if let Some(job) = &dispatch_job_id {
        // Names the job on every line the caller's span holds, when it declares `job_id`.
        tracing::Span::current().record("job_id", job.as_str());
    }
    let mut options = options.clone();
    if options.mode.is_none() {
        // A dispatched job does what its record asks: a merge, a check of late files that
        // wait, or only GC.
        let asked = stored
            .as_ref()
            .and_then(|s| s.record.as_ref())
            .map(|r| r.mode);
        options.mode = Some(asked.unwrap_or_default());
    }
    let mut aborted_uploads = 0;
    if let Some(job) = &dispatch_job_id
        && options.attempt_id.is_none()
    {
        options.attempt_id = Some(attempt_id(job, options.local_attempt));
        let grace = options.settings.gc_grace;
        aborted_uploads = abort_earlier_attempts(store, layout, partition, job, grace).await;
    }
    let options = &options;
    let mut report =
        compact_partition_prepared(store, layout, partition, options, prepared).await?;
    let finished = report.status.is_success() || report.status == Status::Conflict;
    if report.status == Status::Timeout || report.did_not_fit {
        note_timeout(store, partition, stored.as_ref()).await;
    }
    // A merge that found nothing it could merge (inputs too large for any task stay live)
    // would find the same again: its partition is not re-armed at once, or jobs would chase
    // each other without end.
    let stalled = report.status == Status::Noop && options.job_mode().writes();
    let failure = if report.status == Status::Failed {
        let now_ms = options.clock.now_ms();
        count_failure(store, layout, partition, &report, stored.as_ref(), now_ms).await
    } else {
        None
    };
    let record = if finished {
        clear_failures(store, partition).await;
        end_job_record(
            store,
            layout,
            partition,
            stored.as_ref(),
            options,
            readiness_config,
            stalled,
        )
        .await?
    } else {
        match failure {
            Some(FailureAction::Parked) => RecordAction::Parked,
            Some(FailureAction::Quarantined { .. }) => RecordAction::ReArmed,
            _ => RecordAction::Left,
        }
    };
    let requests = store.request_counts().since(&requests_before);
    report.price(
        &options.settings.prices,
        options.settings.function_memory_mb,
        requests,
    );
    tracing::info!(
        partition = %partition,
        job_id = dispatch_job_id.as_deref().unwrap_or(""),
        status = ?report.status,
        record = ?record,
        "job ended"
    );
    Ok(JobOutcome {
        report,
        dispatch_job_id,
        record,
        aborted_uploads,
        failure,
    })
}

/// Ends a finished job's record: re-armed when `readiness` says the partition is ready
/// again (for another mode only, after a merge that `stalled`), deleted otherwise.
async fn end_job_record(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    stored: Option<&StoredJob>,
    options: &CompactOptions,
    readiness_config: &ReadinessConfig,
    stalled: bool,
) -> Result<RecordAction> {
    let now = Utc
        .timestamp_millis_opt(options.clock.now_ms())
        .single()
        .unwrap_or_else(Utc::now);
    let pieces = pieces_may_wait(partition, now, readiness_config);
    let (facts, _) = partition_facts(store, layout, partition, pieces).await?;
    let ready = readiness(&facts, now, readiness_config)
        .ok()
        .filter(|ready| !(stalled && ready.mode().writes()));
    let Some(ready) = ready else {
        // Only our own record: one that replaced it is another job's to end.
        let Some(ours) = stored else {
            return Ok(match job::read_job(store, partition).await? {
                None => RecordAction::Deleted,
                Some(_) => RecordAction::Superseded,
            });
        };
        return Ok(
            match job::delete_job_if(store, partition, &ours.version).await? {
                WriteOutcome::Written => RecordAction::Deleted,
                WriteOutcome::Lost => RecordAction::Superseded,
            },
        );
    };
    let next = JobRecord::new(partition, &format!("after the previous job: {ready}"), now)
        .with_mode(ready.mode());
    let written = match stored {
        Some(s) => job::replace_job(store, &next, partition, &s.version).await?,
        None => job::create_job(store, &next, partition).await?,
    };
    Ok(match written {
        WriteOutcome::Written => RecordAction::ReArmed,
        WriteOutcome::Lost => RecordAction::Superseded,
    })
}

/// Counts an attempt of the job that ran out of time or scratch space in its record (if the
/// record is still the one read), so the next attempt escalates to the fan-out. Best effort:
/// logged.
async fn note_timeout(store: &Store, partition: &PartitionId, stored: Option<&StoredJob>) {
    let Some((stored, record)) = stored.and_then(|s| s.record.as_ref().map(|r| (s, r))) else {
        return;
    };
    let mut next = record.clone();
    next.timed_out = next.timed_out.saturating_add(1);
    match job::replace_job(store, &next, partition, &stored.version).await {
        Ok(_) => {
            tracing::info!(partition = %partition, job_id = %record.job_id, timed_out = next.timed_out, "the job ran out of time or scratch space; its next attempt fans out")
        }
        Err(e) => {
            tracing::warn!(partition = %partition, error = %e, "could not count the job's timeout")
        }
    }
}

/// Hands job `partition` to the fan-out state machine when it would not fit this invocation
/// (`options.fan_out`'s decision, from the live inputs' sizes): starts an execution named after
/// the dispatch job and answers `fanned_out`, leaving the job record in place for the
/// execution's commit step to end ([`end_fanned_out_job`]). `None`: the job fits; run it here.
pub async fn hand_off_if_large(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    machine: &FanOutStateMachine,
    stored: Option<&StoredJob>,
) -> Result<HandOff> {
    let (shape, prepared) = estimate_prepared(store, layout, partition, options).await?;
    let Some(shape) = shape else {
        return Ok(HandOff::Here(prepared));
    };
    let dispatch_job_id = stored
        .and_then(|s| s.record.as_ref())
        .map(|r| r.job_id.clone());
    let job = dispatch_job_id
        .clone()
        .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()));
    tracing::Span::current().record("job_id", job.as_str());
    // A job record replaced as stale while an execution still runs: let that one finish
    // rather than do the work twice. Until its plan is written, an execution just started shows
    // in no job directory: the claim keeps a second compactor from starting another.
    let other = match active_job(store, layout, partition, options, &job).await? {
        Some(running) => Some((running, "another fan-out of this partition is at work")),
        None => match claim_hand_off(store, layout, partition, &job, options.settings.gc_grace)
            .await?
        {
            Claim::Other(starting) => Some((starting, "another compactor is starting a fan-out")),
            Claim::Ours => None,
        },
    };
    let execution = match other {
        Some((other, why)) => {
            tracing::info!(partition = %partition, job_id = %job, other = %other, "{why}; not starting a second");
            (!other.is_empty()).then(|| execution_name(partition, &other))
        }
        None => {
            let execution = machine.start(partition, &job, shape).await?;
            tracing::info!(
                partition = %partition,
                job_id = %job,
                execution = %execution.name,
                started = execution.arn.is_some(),
                groups = shape.groups,
                ranges = shape.ranges,
                "handed the job to the fan-out state machine"
            );
            Some(execution.name)
        }
    };
    let mut report = handed_off(partition, &job, shape, options);
    report.execution = execution;
    Ok(HandOff::Handed(JobOutcome {
        report,
        dispatch_job_id,
        record: RecordAction::Left,
        aborted_uploads: 0,
        failure: None,
    }))
}

/// What [`hand_off_if_large`] did.
pub enum HandOff {
    /// Handed the job to the state machine (or left it to a fan-out already at work).
    Handed(JobOutcome),
    /// The job fits here; with what the look at its size read, for it to start from.
    Here(Option<Prepared>),
}

/// The report of job `job` handed off in `shape`.
fn handed_off(
    partition: &PartitionId,
    job: &str,
    shape: FanOutShape,
    options: &CompactOptions,
) -> CompactionReport {
    let mut report = CompactionReport::new(&partition.relative_dir(), job);
    report.status = Status::FannedOut;
    report.fan_out = Some(shape);
    report.budget_bytes = options.settings.budget_bytes;
    report
}

/// Ends the job record of fanned-out job `job` once its commit step finished (compacted, noop
/// or conflict), as [`run_compaction_job`] ends its own, and releases its hand-off claim; `None` when the record is gone or
/// belongs to another job (a job record replaced as stale while the execution ran).
pub async fn end_fanned_out_job(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    job: &str,
    options: &CompactOptions,
    readiness_config: &ReadinessConfig,
) -> Result<Option<RecordAction>> {
    release_hand_off(store, layout, partition, job).await;
    let stored = job::read_job(store, partition).await?;
    let ours = stored
        .as_ref()
        .and_then(|s| s.record.as_ref())
        .is_some_and(|r| r.job_id == job);
    if !ours {
        return Ok(None);
    }
    let action = end_job_record(
        store,
        layout,
        partition,
        stored.as_ref(),
        options,
        readiness_config,
        false,
    )
    .await?;
    Ok(Some(action))
}

/// The id of one attempt of a dispatched job: the job id and a random suffix, `local` before
/// it for an attempt outside a function. Each attempt names its output apart
/// (`part-<input-set hash>-<job>-<attempt>.parquet`), and a later attempt of the job
/// recognises the uploads an earlier function attempt left ([`is_attempt_output`]).
fn attempt_id(job_id: &str, local: bool) -> String {
    let origin = if local { "local" } else { "" };
    format!("{job_id}-{origin}{:08x}", rand::random::<u32>())
}

/// Aborts the incomplete multipart uploads an earlier, killed function attempt of the same
/// job left under the partition's compacted directory (invariant 4), once older than the
/// grace on the store's clock: no attempt outlives the grace, so a younger upload may be a
/// live attempt's (a duplicate delivery of the job's event). Uploads of other jobs and of
/// local attempts are left alone. A failure is logged: it never stops the job.
async fn abort_earlier_attempts(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    job_id: &str,
    grace: std::time::Duration,
) -> usize {
    if store.raw_s3().is_none() {
        return 0;
    }
    let prefix = layout.output_prefix(partition);
    let aborted = async {
        let now_ms = store
            .store_now(&layout.clock_key(partition))
            .await?
            .timestamp_millis();
        let abandoned =
            |upload: &IncompleteUpload| is_earlier_attempt_abandoned(upload, job_id, now_ms, grace);
        store.abort_uploads(&prefix, abandoned).await
    };
    match aborted.await {
        Ok(aborted) => aborted,
        Err(e) => {
            tracing::warn!(partition = %partition, error = %e, "could not abort the uploads of earlier attempts");
            0
        }
    }
}

/// Whether `upload` is an earlier function attempt of job `job_id` initiated longer ago than
/// `grace` at `now_ms` on the store's clock (never one whose initiation is unknown).
fn is_earlier_attempt_abandoned(
    upload: &IncompleteUpload,
    job_id: &str,
    now_ms: i64,
    grace: std::time::Duration,
) -> bool {
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    is_attempt_output(&upload.key, job_id)
        && (upload.initiated_ms).is_some_and(|at| at <= now_ms.saturating_sub(grace_ms))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::testing::test_partition;

    /// A job ending on a partition that is not ready deletes its own record only: a record
    /// that replaced it meanwhile (another job's, written once ours went stale) stays.
    #[tokio::test]
    async fn a_job_ends_its_own_record_never_the_one_that_replaced_it() {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        let options = CompactOptions::new(std::env::temp_dir());
        let config = ReadinessConfig::default();
        let end = |read: Option<StoredJob>| {
            let (store, layout, partition) = (&store, &layout, &partition);
            let (options, config) = (&options, &config);
            async move {
                end_job_record(
                    store,
                    layout,
                    partition,
                    read.as_ref(),
                    options,
                    config,
                    false,
                )
                .await
                .unwrap()
            }
        };
        let ours = JobRecord::new(&partition, "ours", Utc::now());
        job::create_job(&store, &ours, &partition).await.unwrap();
        let read = job::read_job(&store, &partition).await.unwrap();

        let theirs = JobRecord::new(&partition, "theirs", Utc::now());
        let version = &read.as_ref().unwrap().version;
        let replaced = job::replace_job(&store, &theirs, &partition, version).await;
        assert_eq!(replaced.unwrap(), WriteOutcome::Written);
        assert_eq!(end(read).await, RecordAction::Superseded);
        let left = job::read_job(&store, &partition).await.unwrap();
        let left = left.and_then(|s| s.record).map(|r| r.job_id);
        assert_eq!(left, Some(theirs.job_id.clone()), "their record stays");

        // Its own record, unchanged, it deletes.
        let read = job::read_job(&store, &partition).await.unwrap();
        assert_eq!(end(read).await, RecordAction::Deleted);
        assert!(job::read_job(&store, &partition).await.unwrap().is_none());
    }

    /// An earlier attempt's upload is aborted only once older than the grace on the store's
    /// clock (a younger one may be a live attempt's: a duplicate delivery), and only a function
    /// attempt's of the same job.
    #[test]
    fn an_earlier_attempts_upload_is_abandoned_once_older_than_the_grace() {
        let job = "00c0ffee00c0ffee";
        let dir = "compacted/tenant=acme/year=2026/month=11/day=29/hour=10";
        let grace = std::time::Duration::from_secs(900);
        let now_ms = 10_000_000;
        let upload = |name: &str, initiated_ms: Option<i64>| IncompleteUpload {
            key: format!("{dir}/{name}"),
            upload_id: "u".into(),
            initiated_ms,
        };
        let old = Some(now_ms - 900_000);
        let young = Some(now_ms - 899_999);
        let ours = format!("part-0a1b-{job}-0badf00d.parquet");
        assert!(is_earlier_attempt_abandoned(
            &upload(&ours, old),
            job,
            now_ms,
            grace
        ));
        assert!(!is_earlier_attempt_abandoned(
            &upload(&ours, young),
            job,
            now_ms,
            grace
        ));
        assert!(!is_earlier_attempt_abandoned(
            &upload(&ours, None),
            job,
            now_ms,
            grace
        ));
        for other in [
            format!("part-0a1b-{job}-local0badf00d.parquet"),
            format!("part-0a1b-{job}0-0badf00d.parquet"),
            format!("part-0a1b-{job}-r00001.parquet"),
        ] {
            assert!(!is_earlier_attempt_abandoned(
                &upload(&other, old),
                job,
                now_ms,
                grace
            ));
        }
    }
}

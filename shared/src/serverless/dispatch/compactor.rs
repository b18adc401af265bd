//! The compactor's one entry point: an unwrapped invocation in, the jobs it ran (or the
//! records it ignored) out, with the failure policy that decides whether the invocation failed.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tracing::Instrument;

use super::failures::FailureAction;
use super::job::{self, JobRecord, Parked};
use super::job_lifecycle::{
    HandOff, JobOutcome, ReadBefore, RecordAction, end_fanned_out_job, hand_off_if_large,
    run_compaction_job_after,
};
use crate::clock::Clock;
use crate::compact::fan_out::{FanOutTask, TaskAnswer, run_fan_out_task};
use crate::error::{ErrorKind, InvocationError};
use crate::options::{CompactOptions, FanOut, JobMode};
use crate::partition::{KeyLayout, PartitionId};
use crate::report::{CompactionReport, Status};
use crate::serverless::events::{Classified, Invocation, KeyScope, Record, Watch, classify};
use crate::serverless::readiness::ReadinessConfig;
use crate::serverless::state_machine::FanOutStateMachine;
use crate::settings::CompactSettings;
use crate::store::Store;

/// Everything the compactor needs, built once by `main`.
#[derive(Debug, Clone)]
pub struct Compactor {
    /// The store root.
    pub store: Store,
    /// The layout.
    pub layout: KeyLayout,
    /// Bucket and prefix of the root, to read job-record keys.
    pub scope: KeyScope,
    /// Budget, scratch and deadline settings.
    pub settings: CompactSettings,
    /// The planner's readiness rule, to decide whether a finished job re-arms its record.
    pub readiness: ReadinessConfig,
    /// The fan-out state machine, when deployed: a job too large for one invocation is
    /// handed to it rather than run here.
    pub state_machine: Option<FanOutStateMachine>,
    /// The host's clocks (the system's; a test's virtual ones).
    pub clock: Arc<dyn Clock>,
}

/// A record the compactor acknowledged without work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredRecord {
    /// The key or record.
    pub item: String,
    /// Why.
    pub reason: String,
}

/// What the compactor did with an invocation.
#[derive(Debug, Clone)]
pub enum CompactorAnswer {
    /// The invocation held no job: every record was acknowledged without work.
    Ignored(Vec<IgnoredRecord>),
    /// One finished job per partition, in the order the invocation named them.
    Jobs(Vec<JobOutcome>),
    /// What a task of a fanned-out job answers the state machine.
    FanOut(serde_json::Value),
    /// A fanned-out job's commit: its report, and what became of its job record (`None`:
    /// gone, or another job's).
    FanOutCommitted {
        /// The compaction report.
        report: Box<CompactionReport>,
        /// The job record's end.
        record: Option<RecordAction>,
    },
}

/// Entries of each list of a report a fan-out commit answers with (the rest are counted): Step
/// Functions fails a task whose result passes 256 KiB (`States.DataLimitExceeded`), after the
/// commit landed. The whole report is in the function's log.
pub const FAN_OUT_ANSWER_LISTED: usize = 100;

impl CompactorAnswer {
    /// The kind the invocation fails with when a job did not complete (failed or timed out),
    /// so that Lambda retries it; `None` when every job finished.
    pub fn failure_kind(&self) -> Option<ErrorKind> {
        let Self::Jobs(jobs) = self else {
            return None;
        };
        let mut failed = jobs.iter().filter(|job| !job.is_finished()).peekable();
        failed.peek()?;
        Some(
            failed
                .find_map(|job| job.report.error_kind)
                .unwrap_or(ErrorKind::Bug),
        )
    }
}

impl JobOutcome {
    /// True when the job needs no retry: it compacted, found nothing to do, lost its commit to
    /// an identical job, was handed to the fan-out state machine, or failed the same way on
    /// every attempt and was given up ([`FailureAction::settled`]).
    pub fn is_finished(&self) -> bool {
        self.report.status.is_success()
            || matches!(self.report.status, Status::Conflict | Status::FannedOut)
            || self.failure.as_ref().is_some_and(FailureAction::settled)
    }
}

/// The outcome of an invocation for a parked partition's record: no work.
fn parked_job(partition: &PartitionId, record: &JobRecord, parked: &Parked) -> JobOutcome {
    let mut report = CompactionReport::new(&partition.relative_dir(), &record.job_id);
    report.error = Some(format!(
        "parked after {} attempts failed with {}: {}",
        parked.attempts, parked.kind, parked.error
    ));
    tracing::info!(partition = %partition, job_id = %record.job_id, "the partition is parked; nothing to do");
    JobOutcome {
        report,
        dispatch_job_id: Some(record.job_id.clone()),
        record: RecordAction::Left,
        aborted_uploads: 0,
        failure: Some(FailureAction::Parked),
    }
}

impl Compactor {
    /// Compaction options for an invocation ending at `deadline`.
    pub fn options(&self, deadline: Option<Instant>) -> CompactOptions {
        let mut options = self.settings.options(deadline);
        options.clock = Arc::clone(&self.clock);
        options
    }

    /// Handles one invocation ending at `deadline`: runs the job of every partition whose job
    /// record it names, one after the other. `Err` for a request the compactor does not take
    /// or a store failure outside a job; a job that fails is in the answer
    /// ([`CompactorAnswer::failure_kind`]).
    pub async fn handle(
        &self,
        invocation: Invocation,
        deadline: Option<Instant>,
    ) -> Result<CompactorAnswer, InvocationError> {
        if let Invocation::FanOut(task) = &invocation {
            let options = self.options(deadline);
            return match run_fan_out_task(&self.store, &self.layout, &options, task).await? {
                TaskAnswer::Next(answer) => Ok(CompactorAnswer::FanOut(answer)),
                TaskAnswer::Committed(report) => self.end_fanned_out(task, &options, *report).await,
            };
        }
        let by_hand = matches!(invocation, Invocation::Compact { .. });
        let (partitions, ignored) = self.jobs_of(invocation)?;
        if partitions.is_empty() {
            return Ok(CompactorAnswer::Ignored(ignored));
        }
        let options = self.options(deadline);
        let mut jobs = Vec::with_capacity(partitions.len());
        for partition in &partitions {
            let span = tracing::info_span!(
                "job",
                partition = %partition,
                job_id = tracing::field::Empty
            );
            let outcome = self
                .run_job(partition, &options, by_hand)
                .instrument(span.clone())
                .await?;
            span.in_scope(|| {
                let report = serde_json::to_string(&outcome.report).unwrap_or_default();
                tracing::info!(report = %report, record = ?outcome.record, "compaction report");
            });
            jobs.push(outcome);
        }
        Ok(CompactorAnswer::Jobs(jobs))
    }

    /// One job, doing what its record asks (a merge, by hand): handed to the state machine
    /// when it merges and is too large for this invocation, otherwise run here in one piece.
    async fn run_job(
        &self,
        partition: &PartitionId,
        options: &CompactOptions,
        by_hand: bool,
    ) -> crate::error::Result<JobOutcome> {
        // One counting store for the whole job: its report counts the record's and the look's
        // requests too.
        let (store, layout) = (&self.store.counting_requests(), &self.layout);
        let requests_before = store.request_counts();
        let stored = job::read_job(store, partition).await?;
        let record = stored.as_ref().and_then(|s| s.record.clone());
        if let Some(record) = record.as_ref().filter(|_| !by_hand)
            && let Some(parked) = &record.parked
        {
            // The event of the record's own rewrite: the partition waits for a new file or a
            // request by hand.
            return Ok(parked_job(partition, record, parked));
        }
        let mut options = options.clone();
        if by_hand {
            options.mode = Some(JobMode::Merge);
        }
        let mode = (options.mode)
            .unwrap_or_else(|| record.as_ref().map_or_else(JobMode::default, |r| r.mode));
        let mut read = ReadBefore {
            stored,
            prepared: None,
            requests_before,
        };
        let readiness = &self.readiness;
        let Some(machine) = (self.state_machine.as_ref()).filter(|_| mode.is_merge()) else {
            return run_compaction_job_after(store, layout, partition, &options, readiness, read)
                .await;
        };
        // A job whose earlier attempts ran out of time here is handed off with more ranges.
        let timed_out = record.map_or(0, |r| r.timed_out);
        options.settings.fan_out = options.settings.fan_out.escalated(timed_out);
        if options.settings.fan_out != FanOut::Off {
            let stored = read.stored.as_ref();
            match hand_off_if_large(store, layout, partition, &options, machine, stored).await? {
                HandOff::Handed(outcome) => return Ok(outcome),
                HandOff::Here(prepared) => read.prepared = prepared,
            }
        }
        // It fits: one piece, whatever a later look at the clock would say.
        options.settings.fan_out = FanOut::Off;
        run_compaction_job_after(store, layout, partition, &options, readiness, read).await
    }

    /// The answer of a fanned-out job's commit. One that failed or ran out of time fails the
    /// task, so the state machine retries it; otherwise the job record that dispatched the job
    /// is ended (`None` when it is gone or another job's).
    async fn end_fanned_out(
        &self,
        task: &FanOutTask,
        options: &CompactOptions,
        report: CompactionReport,
    ) -> Result<CompactorAnswer, InvocationError> {
        if matches!(report.status, Status::Failed | Status::Timeout) {
            let kind = report.error_kind.unwrap_or(ErrorKind::Bug);
            let body = report.bounded_json(FAN_OUT_ANSWER_LISTED);
            let status = report.status.as_str();
            return Err(InvocationError::new(
                kind,
                format!("fan-out commit {status}: {body}"),
            ));
        }
        let partition = self.layout.partition(task.tenant.as_deref(), &task.hour)?;
        let job = report.attempt_id.clone();
        let record = end_fanned_out_job(
            &self.store,
            &self.layout,
            &partition,
            &job,
            options,
            &self.readiness,
        )
        .await?;
        tracing::info!(partition = %partition, job_id = %job, record = ?record, "fanned-out job ended");
        Ok(CompactorAnswer::FanOutCommitted {
            report: Box::new(report),
            record,
        })
    }

    /// The partitions an invocation asks to compact (once each, in order), and the records it
    /// held besides.
    fn jobs_of(
        &self,
        invocation: Invocation,
    ) -> Result<(Vec<PartitionId>, Vec<IgnoredRecord>), InvocationError> {
        let invalid = |message: String| InvocationError::new(ErrorKind::InvalidInput, message);
        let records: Vec<Record> = match invocation {
            Invocation::Compact { tenant, hour } => {
                let partition = self.layout.partition(tenant.as_deref(), &hour)?;
                return Ok((vec![partition], Vec::new()));
            }
            Invocation::Notifications { records, .. } => records,
            Invocation::SqsBatch(messages) => {
                messages.into_iter().flat_map(|m| m.records).collect()
            }
            Invocation::FanOut(_) => {
                return Err(invalid("a fan-out task is not a compaction job".into()));
            }
            Invocation::Backfill(_) | Invocation::Sweep => {
                return Err(invalid(
                    "backfills and sweeps go to the planner, not the compactor".into(),
                ));
            }
            Invocation::Http(_) => {
                return Err(invalid(
                    "an HTTP request's body must be a notification, not another request".into(),
                ));
            }
        };
        let mut partitions = Vec::new();
        let mut ignored = Vec::new();
        let mut rejected = Vec::new();
        for record in &records {
            match classify(record, &self.scope, &self.layout, Watch::Jobs) {
                Classified::Accepted { partition, .. } => {
                    if !partitions.contains(&partition) {
                        partitions.push(partition);
                    }
                }
                Classified::Ignored { item, reason } => {
                    tracing::debug!(item, reason = %reason, "ignored");
                    ignored.push(IgnoredRecord {
                        item,
                        reason: reason.to_string(),
                    });
                }
                Classified::Rejected { item, reason } => {
                    rejected.push(format!("{item}: {reason}"));
                }
            }
        }
        if !rejected.is_empty() {
            return Err(invalid(format!(
                "rejected job event record(s): {}",
                rejected.join("; ")
            )));
        }
        Ok((partitions, ignored))
    }
}

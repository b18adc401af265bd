//! The compactor's one entry point: an unwrapped invocation in, the jobs it ran (or the
//! records it ignored) out, with the failure policy that decides whether the invocation failed.

use std::time::Instant;

use serde::Serialize;
use tracing::Instrument;

use super::worker::{JobOutcome, run_compaction_job};
use crate::compact::fan_out::run_fan_out_task;
use crate::error::{ErrorKind, InvocationError};
use crate::options::CompactOptions;
use crate::partition::{KeyLayout, PartitionId};
use crate::report::Status;
use crate::serverless::events::{Classified, Invocation, KeyScope, Record, Watch, classify};
use crate::serverless::readiness::ReadinessConfig;
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
}

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
    /// True when the job needs no retry: it compacted, found nothing to do, or lost its
    /// commit to an identical job.
    pub fn is_finished(&self) -> bool {
        self.report.status.is_success() || self.report.status == Status::Conflict
    }
}

impl Compactor {
    /// Compaction options for an invocation ending at `deadline`.
    pub fn options(&self, deadline: Option<Instant>) -> CompactOptions {
        self.settings.options(deadline)
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
            let answer = run_fan_out_task(&self.store, &self.layout, &options, task).await?;
            // A commit that failed or ran out of time fails the task, so the state machine
            // retries it; `noop` and `conflict` end the execution with the report.
            let status = answer.get("status").and_then(serde_json::Value::as_str);
            if let Some(status @ ("failed" | "timeout")) = status {
                let kind = answer
                    .get("error_kind")
                    .and_then(|k| serde_json::from_value(k.clone()).ok())
                    .unwrap_or(ErrorKind::Bug);
                return Err(InvocationError::new(
                    kind,
                    format!("fan-out commit {status}: {answer}"),
                ));
            }
            return Ok(CompactorAnswer::FanOut(answer));
        }
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
            let outcome = run_compaction_job(
                &self.store,
                &self.layout,
                partition,
                &options,
                &self.readiness,
            )
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

    /// The partitions an invocation asks to compact (once each, in order), and the records it
    /// held besides.
    fn jobs_of(
        &self,
        invocation: Invocation,
    ) -> Result<(Vec<PartitionId>, Vec<IgnoredRecord>), InvocationError> {
        let invalid = |message: String| InvocationError::new(ErrorKind::InvalidInput, message);
        let records: Vec<Record> = match invocation {
            Invocation::Compact { tenant, hour } => {
                return Ok((vec![PartitionId::parse(&tenant, &hour)?], Vec::new()));
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

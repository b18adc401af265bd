//! The planner's one entry point: an unwrapped invocation in, what was done with every
//! record and partition out. Accepted partitions are dispatched before anything is reported
//! as failed (`functions/README.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{
    BackfillReport, DispatchMode, Pacing, PartitionOutcome, SweepReport, backfill_until,
    dispatch_partition, sweep_until,
};
use crate::error::{Error, ErrorKind, InvocationError, Result};
use crate::manifest::symlink::write_symlink;
use crate::partition::{KeyLayout, PartitionId};
use crate::serverless::events::{Classified, Invocation, KeyScope, Record, Watch, classify};
use crate::serverless::readiness::ReadinessConfig;
use crate::store::Store;

/// Everything the planner needs, built once by `main`.
#[derive(Debug, Clone)]
pub struct Planner {
    /// The store root.
    pub store: Store,
    /// The layout (ingest prefix).
    pub layout: KeyLayout,
    /// The bucket and prefix of the store root, to read event keys.
    pub scope: KeyScope,
    /// Readiness thresholds.
    pub readiness: ReadinessConfig,
    /// Least time between two job records a backfill writes.
    pub backfill_interval: Duration,
}

/// A record acknowledged without work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredItem {
    /// The key, for an object event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A description, for anything else (`s3:TestEvent`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    /// Why.
    pub reason: String,
}

/// A record that was refused, or a partition whose dispatch failed, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RejectedItem {
    /// The key, record or partition.
    pub item: String,
    /// Why.
    pub reason: String,
    /// How a caller should react (`invalid_input` for a refused record).
    pub kind: ErrorKind,
}

/// The records of an invocation, sorted and with their partitions planned.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Handled {
    /// What happened to each accepted partition (once per partition).
    pub partitions: Vec<PartitionOutcome>,
    /// Acknowledged records.
    pub ignored: Vec<IgnoredItem>,
    /// Refused records.
    pub rejected: Vec<RejectedItem>,
    /// Partitions whose dispatch failed (store errors), with the error.
    pub failed: Vec<RejectedItem>,
    /// Records accepted.
    pub num_accepted: usize,
}

impl Handled {
    /// Partitions a job record was written for (or would be, in a dry run).
    pub fn num_dispatched(&self) -> usize {
        num_dispatched(&self.partitions)
    }

    /// The invocation's error when a record was rejected or a dispatch failed (after every
    /// accepted partition was dispatched): the kind of the first failed dispatch that is not
    /// a refusal, since a retry may succeed; `invalid_input` when only refusals remain, which
    /// no retry mends. `None` when everything was handled.
    pub fn failure(&self) -> Option<InvocationError> {
        let problems: Vec<String> = self
            .rejected
            .iter()
            .map(|r| format!("rejected {}: {}", r.item, r.reason))
            .chain(
                self.failed
                    .iter()
                    .map(|f| format!("dispatch of {} failed: {}", f.item, f.reason)),
            )
            .collect();
        if problems.is_empty() {
            return None;
        }
        let kind = self
            .failed
            .iter()
            .map(|f| f.kind)
            .find(|k| *k != ErrorKind::InvalidInput)
            .unwrap_or(ErrorKind::InvalidInput);
        Some(InvocationError::new(
            kind,
            format!(
                "{} record(s) or partition(s) not handled (accepted partitions were dispatched first): {}",
                problems.len(),
                problems.join("; ")
            ),
        ))
    }
}

/// Partitions of `outcomes` a job record was written for (or would be, in a dry run).
fn num_dispatched(outcomes: &[PartitionOutcome]) -> usize {
    outcomes.iter().filter(|p| p.is_dispatched()).count()
}

/// What an invocation's metrics count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannerCounts {
    /// Records accepted.
    pub accepted: u64,
    /// Records acknowledged and ignored.
    pub ignored: u64,
    /// Records refused and partitions whose planning failed.
    pub rejected: u64,
    /// Partitions a job record was written for.
    pub dispatched: u64,
    /// The kind of invocation: `notification`, `sqs`, `backfill` or `sweep`.
    pub source: &'static str,
}

/// What the planner did with an invocation.
#[derive(Debug, Clone)]
pub enum PlannerAnswer {
    /// Direct S3, SNS or EventBridge records: the invocation fails when anything was rejected
    /// or failed (after the accepted partitions were dispatched).
    Notifications(Handled),
    /// An SQS batch: only the listed messages failed.
    SqsBatch {
        /// The records and partitions.
        handled: Handled,
        /// Ids of messages holding a rejected record or a partition whose dispatch failed.
        failed_message_ids: Vec<String>,
    },
    /// A backfill.
    Backfill(BackfillReport),
    /// A sweep.
    Sweep(SweepReport),
}

impl PlannerCounts {
    /// The counts of a payload refused before any record was read, from `source`.
    pub fn refused_payload(source: &'static str) -> Self {
        Self {
            accepted: 0,
            ignored: 0,
            rejected: 1,
            dispatched: 0,
            source,
        }
    }
}

impl PlannerAnswer {
    /// What the invocation's metrics count.
    pub fn counts(&self) -> PlannerCounts {
        let of_records = |handled: &Handled, source| PlannerCounts {
            accepted: handled.num_accepted as u64,
            ignored: handled.ignored.len() as u64,
            rejected: (handled.rejected.len() + handled.failed.len()) as u64,
            dispatched: handled.num_dispatched() as u64,
            source,
        };
        match self {
            Self::Notifications(handled) => of_records(handled, "notification"),
            Self::SqsBatch { handled, .. } => of_records(handled, "sqs"),
            Self::Backfill(report) => PlannerCounts {
                accepted: 0,
                ignored: 0,
                rejected: report.failed as u64,
                dispatched: report.scheduled as u64,
                source: "backfill",
            },
            Self::Sweep(report) => PlannerCounts {
                accepted: 0,
                ignored: 0,
                rejected: report.failed as u64,
                dispatched: report
                    .partitions
                    .iter()
                    .filter(|p| p.is_dispatched())
                    .count() as u64,
                source: "sweep",
            },
        }
    }
}

impl Planner {
    /// Handles one invocation. `Err` only for a request this function does not take.
    pub async fn handle(
        &self,
        invocation: Invocation,
        now: DateTime<Utc>,
    ) -> Result<PlannerAnswer> {
        self.handle_until(invocation, now, None).await
    }

    /// [`Planner::handle`] for an invocation ending at `deadline`: sweeps and backfills stop
    /// before it and say where they stopped.
    pub async fn handle_until(
        &self,
        invocation: Invocation,
        now: DateTime<Utc>,
        deadline: Option<Instant>,
    ) -> Result<PlannerAnswer> {
        match invocation {
            Invocation::Notifications { records, .. } => {
                let (handled, _) = self.handle_records(&[records], now).await;
                Ok(PlannerAnswer::Notifications(handled))
            }
            Invocation::SqsBatch(messages) => {
                let groups: Vec<Vec<Record>> = messages.iter().map(|m| m.records.clone()).collect();
                let (handled, failed) = self.handle_records(&groups, now).await;
                let failed_message_ids = messages
                    .iter()
                    .zip(failed)
                    .filter(|(_, failed)| *failed)
                    .map(|(m, _)| m.message_id.clone())
                    .collect();
                Ok(PlannerAnswer::SqsBatch {
                    handled,
                    failed_message_ids,
                })
            }
            Invocation::Backfill(request) => {
                let pacing = Pacing {
                    min_interval: self.backfill_interval,
                    deadline,
                };
                let report = backfill_until(
                    &self.store,
                    &self.layout,
                    &request,
                    now,
                    &self.readiness,
                    pacing,
                    &|_, _| {},
                )
                .await?;
                Ok(PlannerAnswer::Backfill(report))
            }
            Invocation::Sweep => Ok(PlannerAnswer::Sweep(
                sweep_until(&self.store, &self.layout, now, &self.readiness, deadline).await?,
            )),
            Invocation::Compact { tenant, hour } => Err(Error::Config {
                message: format!(
                    "the planner does not compact ({} {hour}); invoke the compactor with this request",
                    tenant.as_deref().unwrap_or("-")
                ),
            }),
            Invocation::Http(_) => Err(Error::invariant(
                "an HTTP request reaches the planner unwrapped; its handler answers it",
            )),
            Invocation::FanOut(task) => Err(Error::Config {
                message: format!(
                    "the planner runs no fan-out task ({:?}); the state machine invokes the compactor",
                    task.step
                ),
            }),
        }
    }

    /// Classifies every record of every group, dispatches each accepted partition once,
    /// and says for each group whether it holds a rejected record or a failed partition.
    async fn handle_records(
        &self,
        groups: &[Vec<Record>],
        now: DateTime<Utc>,
    ) -> (Handled, Vec<bool>) {
        let mut handled = Handled::default();
        let mut group_failed = vec![false; groups.len()];
        let mut partitions_of: Vec<BTreeSet<PartitionId>> = vec![BTreeSet::new(); groups.len()];
        let mut accepted: BTreeSet<PartitionId> = BTreeSet::new();
        for (g, records) in groups.iter().enumerate() {
            for record in records {
                match classify(record, &self.scope, &self.layout, Watch::Ingest) {
                    Classified::Accepted { key, partition } => {
                        tracing::debug!(key, partition = %partition, "accepted");
                        handled.num_accepted += 1;
                        partitions_of[g].insert(partition.clone());
                        accepted.insert(partition);
                    }
                    Classified::Ignored { item, reason } => {
                        tracing::debug!(item, reason = %reason, "ignored");
                        let is_key = matches!(record, Record::Object { .. });
                        handled.ignored.push(IgnoredItem {
                            key: is_key.then(|| item.clone()),
                            item: (!is_key).then_some(item),
                            reason: reason.to_string(),
                        });
                    }
                    Classified::Rejected { item, reason } => {
                        tracing::error!(item, reason, "rejected");
                        group_failed[g] = true;
                        handled.rejected.push(RejectedItem {
                            item,
                            reason,
                            kind: ErrorKind::InvalidInput,
                        });
                    }
                }
            }
        }
        // Accepted partitions first, once each, whatever else the invocation holds.
        let mut failed_partitions: BTreeMap<PartitionId, (String, ErrorKind)> = BTreeMap::new();
        for partition in &accepted {
            match dispatch_partition(
                &self.store,
                &self.layout,
                partition,
                now,
                &self.readiness,
                DispatchMode::default(),
            )
            .await
            {
                Ok(outcome) => handled.partitions.push(outcome),
                Err(e) => {
                    tracing::error!(partition = %partition, error = %e, "dispatch failed");
                    failed_partitions.insert(partition.clone(), (e.to_string(), e.kind()));
                    continue;
                }
            }
            // The new files reach the partition's symlink manifest now. Lost races leave it
            // to the writers that won them; a store error fails the event, which is retried.
            match write_symlink(&self.store, &self.layout, partition).await {
                Ok(_) => {}
                Err(e @ Error::Conflict { .. }) => {
                    tracing::warn!(partition = %partition, error = %e, "symlink manifest left to the other writers")
                }
                Err(e) => {
                    tracing::error!(partition = %partition, error = %e, "symlink manifest not rewritten");
                    failed_partitions.insert(partition.clone(), (e.to_string(), e.kind()));
                }
            }
        }
        for (partition, (reason, kind)) in &failed_partitions {
            handled.failed.push(RejectedItem {
                item: partition.to_string(),
                reason: reason.clone(),
                kind: *kind,
            });
        }
        for (g, partitions) in partitions_of.iter().enumerate() {
            if partitions.iter().any(|p| failed_partitions.contains_key(p)) {
                group_failed[g] = true;
            }
        }
        (handled, group_failed)
    }
}

//! The compactor's side of a job: compact the partition, then end the job record — delete
//! it, or re-arm it when the partition is ready again by the planner's rule (files that
//! arrived during the job wait for the hour to close, or for the pressure thresholds, like
//! any others; re-arming on any new file rewrote open hours back to back).

use chrono::{TimeZone, Utc};
use serde::Serialize;

use super::job::{self, JobRecord, WriteOutcome};
use super::partition_facts;
use crate::compact::compact_partition;
use crate::error::Result;
use crate::options::CompactOptions;
use crate::partition::{KeyLayout, PartitionId, is_attempt_output};
use crate::report::{CompactionReport, Status};
use crate::serverless::readiness::{ReadinessConfig, readiness};
use crate::store::Store;

/// What became of the job record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordAction {
    /// Deleted: the partition is not ready (nothing left, or an open hour below the
    /// thresholds: the next event or the sweep dispatches it when it is).
    Deleted,
    /// Overwritten: the partition is ready again; the new record dispatches the next job.
    ReArmed,
    /// Left in place: the job failed or timed out; Lambda retries it, and once stale the
    /// planner or the sweep replaces it.
    Left,
    /// Another job's record replaced ours meanwhile; it is that job's to end.
    Superseded,
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
    let dispatch_job_id = stored
        .as_ref()
        .and_then(|s| s.record.as_ref())
        .map(|r| r.job_id.clone());
    if let Some(job) = &dispatch_job_id {
        // Names the job on every line the caller's span holds, when it declares `job_id`.
        tracing::Span::current().record("job_id", job.as_str());
    }
    let mut options = options.clone();
    let mut aborted_uploads = 0;
    if let Some(job) = &dispatch_job_id
        && options.attempt_id.is_none()
    {
        options.attempt_id = Some(attempt_id(job));
        aborted_uploads = abort_earlier_attempts(store, layout, partition, job).await;
    }
    let options = &options;
    let mut report = compact_partition(store, layout, partition, options).await?;
    let finished = report.status.is_success() || report.status == Status::Conflict;
    let record = if !finished {
        RecordAction::Left
    } else {
        let (facts, _) = partition_facts(store, layout, partition).await?;
        let now = Utc
            .timestamp_millis_opt(options.clock.now_ms())
            .single()
            .unwrap_or_else(Utc::now);
        if let Ok(ready) = readiness(&facts, now, readiness_config) {
            let next = JobRecord::new(partition, &format!("after the previous job: {ready}"), now);
            let written = match &stored {
                Some(s) => job::replace_job(store, &next, partition, &s.version).await?,
                None => job::create_job(store, &next, partition).await?,
            };
            match written {
                WriteOutcome::Written => RecordAction::ReArmed,
                WriteOutcome::Lost => RecordAction::Superseded,
            }
        } else {
            job::delete_job(store, partition).await?;
            RecordAction::Deleted
        }
    };
    let requests = store.request_counts().since(&requests_before);
    report.price(&options.prices, options.function_memory_mb, requests);
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
    })
}

/// The id of one attempt of a dispatched job: the job id and a random suffix. Each attempt
/// names its output apart (`part-<input-set hash>-<job>-<attempt>.parquet`), and a later
/// attempt of the job recognises the uploads an earlier one left.
fn attempt_id(job_id: &str) -> String {
    format!("{job_id}-{:08x}", rand::random::<u32>())
}

/// Aborts the incomplete multipart uploads an earlier, killed attempt of the same job left
/// under the partition's compacted directory (invariant 4); uploads of other jobs,
/// which may be live, are left alone. A failure is logged: it never stops the job.
async fn abort_earlier_attempts(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    job_id: &str,
) -> usize {
    let prefix = layout.output_prefix(partition);
    match store
        .abort_own_uploads(&prefix, |key| is_attempt_output(key, job_id))
        .await
    {
        Ok(aborted) => aborted,
        Err(e) => {
            tracing::warn!(partition = %partition, error = %e, "could not abort the uploads of earlier attempts");
            0
        }
    }
}

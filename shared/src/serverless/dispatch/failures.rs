//! Failures that repeat: a partition whose job fails the same way on every attempt is given up
//! rather than retried for ever.
//!
//! Each failed attempt is counted in `_compaction/failures/<partition>.json`, outside the job
//! prefix, so counting dispatches nothing: the error's kind and the objects it names. Lambda
//! runs a failed event [`GIVE_UP_AFTER_ATTEMPTS`] times in all, so an error that holds reaches the count
//! within one event's attempts, and the attempt that reaches it succeeds (nothing goes to the
//! dead-letter queue):
//!
//! - an error reading ingest files of the partition (a GET the store keeps failing, every input
//!   refused, a file that will not decode) quarantines them, in place, with the error as the
//!   reason, and re-arms the job record for the rest of the partition;
//! - any other error (an earlier output this budget cannot merge, a bug) parks the partition:
//!   its job record stays, marked [`Parked`] with the error, so neither the sweep nor a lapsed
//!   lease dispatches it again. A new ingest file, a request by hand or a release dispatches it
//!   again; its files stay live meanwhile, and readers read them.
//!
//! Another error starts the count again; a job that finishes deletes it.

use chrono::{TimeZone, Utc};
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use super::job::{self, JobRecord, Parked, StoredJob, WriteOutcome};
use crate::manifest::{QuarantinedFile, quarantine_files};
use crate::object_key::ObjectKey;
use crate::partition::{KeyLayout, PartitionId, failures_key};
use crate::report::{CompactionReport, Status};
use crate::store::Store;

/// Attempts that fail the same way before the partition is given up: the first invocation and
/// Lambda's two retries of an asynchronous event (the template's `MaximumRetryAttempts`).
pub const GIVE_UP_AFTER_ATTEMPTS: u32 = 3;

/// Format version of a failure count.
const FAILURES_FORMAT: u32 = 1;

/// The body of `_compaction/failures/<partition>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FailureCount {
    format: u32,
    /// The error's kind (`Transient`, `InvalidInput`, ...).
    kind: String,
    /// The objects the error names, sorted.
    objects: Vec<String>,
    /// Failed attempts in a row with this kind and these objects.
    count: u32,
    /// The last attempt's error.
    error: String,
    /// When the last attempt failed (Unix milliseconds).
    last_ms: i64,
}

/// What counting a failed job did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum FailureAction {
    /// Counted: the job failed this way `count` times in a row; the invocation fails, and
    /// Lambda retries it.
    Counted {
        /// Attempts in a row.
        count: u32,
    },
    /// The ingest files the error names were quarantined, and the job record re-armed for the
    /// rest of the partition.
    Quarantined {
        /// The files.
        keys: Vec<String>,
    },
    /// The partition is parked: its job record says why.
    Parked,
}

impl FailureAction {
    /// True when the failure was dealt with: the invocation succeeds, nothing is retried.
    pub fn settled(&self) -> bool {
        !matches!(self, FailureAction::Counted { .. })
    }
}

/// Counts a failed job of `partition` (`report.status` is `failed`) and, at the [`GIVE_UP_AFTER_ATTEMPTS`]th
/// failure in a row with the same kind and objects, quarantines or parks. `None` when the
/// count could not be read or written (logged): the failure is retried as any other.
pub(super) async fn count_failure(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    report: &CompactionReport,
    stored: Option<&StoredJob>,
    now_ms: i64,
) -> Option<FailureAction> {
    debug_assert_eq!(report.status, Status::Failed);
    let kind = report.error_kind?.name().to_string();
    let (mut objects, reading) = report.error_objects.clone();
    // What this attempt wrote is named after it: the same failure names another object.
    objects.retain(|o| !o.contains(&report.attempt_id));
    objects.sort();
    objects.dedup();
    let error = report.error.clone().unwrap_or_default();
    let key = failures_key(partition);
    let previous = match store.get_if_present(&key).await {
        Ok(found) => {
            found.and_then(|(_, bytes)| serde_json::from_slice::<FailureCount>(&bytes).ok())
        }
        Err(e) => {
            tracing::warn!(key = %key, error = %e, "cannot read the failure count");
            return None;
        }
    };
    let count = match previous {
        Some(p) if p.kind == kind && p.objects == objects => p.count.saturating_add(1),
        _ => 1,
    };
    if count < GIVE_UP_AFTER_ATTEMPTS {
        let body = FailureCount {
            format: FAILURES_FORMAT,
            kind,
            objects,
            count,
            error,
            last_ms: now_ms,
        };
        let body = serde_json::to_vec_pretty(&body).unwrap_or_default();
        if let Err(e) = store.object_store().put(&key, body.into()).await {
            tracing::warn!(key = %key, error = %e, "cannot count the failure");
            return None;
        }
        return Some(FailureAction::Counted { count });
    }
    let ingest_dir = format!("{}/", layout.ingest_dir(partition));
    let ingest_files: Option<Vec<ObjectKey>> = (objects.iter())
        .map(|o| {
            o.starts_with(&ingest_dir)
                .then(|| ObjectKey::parse(o).ok())
                .flatten()
        })
        .collect();
    let unreadable_inputs = ingest_files.filter(|files| reading && !files.is_empty());
    let action = if let Some(files) = unreadable_inputs {
        quarantine(store, layout, partition, files, &error, stored, now_ms).await?
    } else {
        park(store, partition, &kind, &error, stored, now_ms).await?
    };
    clear_failures(store, partition).await;
    Some(action)
}

/// Quarantines the ingest files that failed [`GIVE_UP_AFTER_ATTEMPTS`] times and re-arms the job record.
async fn quarantine(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    keys: Vec<ObjectKey>,
    error: &str,
    stored: Option<&StoredJob>,
    now_ms: i64,
) -> Option<FailureAction> {
    let reason = format!("the job failed {GIVE_UP_AFTER_ATTEMPTS} times reading it: {error}");
    let files: Vec<QuarantinedFile> = (keys.iter())
        .map(|key| QuarantinedFile {
            key: key.clone(),
            reason: reason.clone(),
        })
        .collect();
    let keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
    if let Err(e) = quarantine_files(store, layout, partition, files, now_ms).await {
        tracing::warn!(partition = %partition, error = %e, "cannot quarantine the files the job keeps failing on");
        return None;
    }
    tracing::error!(partition = %partition, files = ?keys, error, "quarantined after {GIVE_UP_AFTER_ATTEMPTS} failed attempts");
    let now = Utc
        .timestamp_millis_opt(now_ms)
        .single()
        .unwrap_or_else(Utc::now);
    let reason = format!(
        "after quarantining {} file(s) it kept failing on",
        keys.len()
    );
    let next = JobRecord::new(partition, &reason, now);
    rewrite_record(store, partition, &next, stored).await;
    Some(FailureAction::Quarantined { keys })
}

/// Parks the partition: its job record stays, saying why.
async fn park(
    store: &Store,
    partition: &PartitionId,
    kind: &str,
    error: &str,
    stored: Option<&StoredJob>,
    now_ms: i64,
) -> Option<FailureAction> {
    let now = Utc
        .timestamp_millis_opt(now_ms)
        .single()
        .unwrap_or_else(Utc::now);
    let base = stored.and_then(|s| s.record.clone());
    let mut record = base.unwrap_or_else(|| JobRecord::new(partition, "by hand", now));
    record.parked = Some(Parked {
        at_ms: now_ms,
        attempts: GIVE_UP_AFTER_ATTEMPTS,
        kind: kind.to_string(),
        error: error.to_string(),
    });
    if !rewrite_record(store, partition, &record, stored).await {
        return None;
    }
    tracing::error!(partition = %partition, kind, error, "parked after {GIVE_UP_AFTER_ATTEMPTS} failed attempts: a new file, a request by hand or a release dispatches it again");
    Some(FailureAction::Parked)
}

/// Writes `record` over the one read (or creates it): true when it is in place.
async fn rewrite_record(
    store: &Store,
    partition: &PartitionId,
    record: &JobRecord,
    stored: Option<&StoredJob>,
) -> bool {
    let written = match stored {
        Some(s) => job::replace_job(store, record, partition, &s.version).await,
        None => job::create_job(store, record, partition).await,
    };
    match written {
        Ok(WriteOutcome::Written) => true,
        Ok(WriteOutcome::Lost) => {
            tracing::info!(partition = %partition, "another job's record replaced ours; it is that job's partition now");
            false
        }
        Err(e) => {
            tracing::warn!(partition = %partition, error = %e, "cannot rewrite the job record");
            false
        }
    }
}

/// Deletes the partition's failure count (a job finished, or the failure was dealt with).
/// Best effort: a count left behind only starts the next failure's count higher.
pub(super) async fn clear_failures(store: &Store, partition: &PartitionId) {
    let key = failures_key(partition);
    match store.object_store().delete(&key).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => tracing::warn!(key = %key, error = %e, "cannot delete the failure count"),
    }
}

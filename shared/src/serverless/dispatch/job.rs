//! The job record `_compaction/jobs/<partition>.json`: its creation dispatches a compaction,
//! its presence keeps a partition to one job at a time.
//!
//! - Created with a create-only write: of a burst of planners, one creates it, the others
//!   see `AlreadyExists` and change nothing.
//! - Replaced when stale (older than the lease) with a conditional overwrite on its ETag, so
//!   of two planners replacing the same stale record one wins.
//! - Deleted by the compactor when its job ends, or re-armed (overwritten) when files arrived
//!   during the job, so they are compacted next.

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::options::JobMode;
use crate::partition::{PartitionId, job_key};
use crate::store::Store;

/// Format version of a job record.
pub const JOB_FORMAT: u32 = 1;

/// The body of a job record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Format of this document.
    pub format: u32,
    /// The partition, as `tenant=…/…/hour=…`.
    pub partition: String,
    /// Tenant (null in a layout without tenants).
    pub tenant: Option<String>,
    /// Hour, `YYYY-MM-DDTHH`.
    pub hour: String,
    /// Id of this job (on every log line of the compactor that runs it).
    pub job_id: String,
    /// Why it was dispatched.
    pub reason: String,
    /// When it was written (Unix milliseconds, writer's clock; staleness uses the store's).
    pub created_at_ms: i64,
    /// Attempts of this job that ran out of time or scratch space in one invocation: the next hands the job to
    /// the fan-out with more ranges ([`FanOut::escalated`](crate::options::FanOut::escalated)).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timed_out: u32,
    /// What the job does: `merge` (absent), `check` (late files that wait: checked, not
    /// merged) or `collect` (garbage only).
    #[serde(default, skip_serializing_if = "JobMode::is_merge")]
    pub mode: JobMode,
    /// Set when the partition's job failed the same way on every attempt and was given up:
    /// the record stays, so neither the sweep nor a lapsed lease dispatches it again; a new
    /// ingest file or a request by hand replaces it (`serverless::dispatch::failures`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<Parked>,
}

/// Why and when a partition's job was given up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// When (Unix milliseconds, the compactor's clock).
    pub at_ms: i64,
    /// Attempts that failed the same way.
    pub attempts: u32,
    /// The error's kind (`InvalidInput`, `ResourceExhausted`, ...).
    pub kind: String,
    /// The error of the last attempt.
    pub error: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl JobRecord {
    /// A new record with a fresh job id.
    pub fn new(partition: &PartitionId, reason: &str, now: DateTime<Utc>) -> Self {
        Self {
            format: JOB_FORMAT,
            partition: partition.relative_dir(),
            tenant: partition.tenant().map(str::to_string),
            hour: partition.hour_label(),
            job_id: format!("{:016x}", rand::random::<u64>()),
            reason: reason.to_string(),
            created_at_ms: now.timestamp_millis(),
            timed_out: 0,
            mode: JobMode::Merge,
            parked: None,
        }
    }

    /// The record, for a job that does `mode`.
    pub fn with_mode(self, mode: JobMode) -> Self {
        Self { mode, ..self }
    }

    fn encode(&self) -> PutPayload {
        // Plain strings and integers always serialize.
        PutPayload::from(serde_json::to_vec_pretty(self).unwrap_or_default())
    }
}

/// A job record as read: its body (when readable) and version.
#[derive(Debug, Clone)]
pub struct StoredJob {
    /// The body; `None` when the object is not a readable record (it is still a lock).
    pub record: Option<JobRecord>,
    /// When the store last wrote it.
    pub written_at: DateTime<Utc>,
    /// Its version, for a conditional overwrite.
    pub version: UpdateVersion,
}

/// How a write of the job record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Our record is in place.
    Written,
    /// Another writer's record is in place (a lost race: single-flight held).
    Lost,
}

/// Reads a partition's job record, if any.
pub async fn read_job(store: &Store, partition: &PartitionId) -> Result<Option<StoredJob>> {
    let key = Path::from(job_key(partition));
    let (meta, bytes) = match store.get_if_present(&key).await {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(None),
        // S3 answers a GET of a missing key with 403 to a caller that may read but not list
        // it. The functions may read job records, so a 403 here means "no record"; were it
        // wrong, the create-only write that follows finds the record and changes nothing.
        Err(object_store::Error::PermissionDenied { .. }) => {
            tracing::warn!(key = %key, "reading the job record was denied; taking it as absent (grant s3:ListBucket on the job prefix to get 404s)");
            return Ok(None);
        }
        Err(e) => return Err(Error::store("get", &key, e)),
    };
    let record = serde_json::from_slice::<JobRecord>(&bytes).ok();
    if record.is_none() {
        tracing::warn!(key = %key, "job record is not readable; treating it as a lock until stale");
    }
    Ok(Some(StoredJob {
        record,
        written_at: meta.last_modified,
        version: UpdateVersion {
            e_tag: meta.e_tag,
            version: meta.version,
        },
    }))
}

/// Creates the job record unless one exists.
pub async fn create_job(
    store: &Store,
    record: &JobRecord,
    partition: &PartitionId,
) -> Result<WriteOutcome> {
    let (key, put) = put_job(store, record, partition, PutMode::Create).await;
    match put {
        Ok(()) => Ok(WriteOutcome::Written),
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Ok(WriteOutcome::Lost),
        Err(e) => Err(Error::store("put", &key, e)),
    }
}

/// Overwrites the job record if it is still the version read.
///
/// A store without conditional overwrite (a local directory) falls back to delete then
/// create-only: two racing replacers may then both start a job, which the commit protocol
/// tolerates (one commits, the other reports `noop` or `conflict`).
pub async fn replace_job(
    store: &Store,
    record: &JobRecord,
    partition: &PartitionId,
    expected: &UpdateVersion,
) -> Result<WriteOutcome> {
    let (key, put) = put_job(store, record, partition, PutMode::Update(expected.clone())).await;
    match put {
        Ok(()) => Ok(WriteOutcome::Written),
        Err(object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. }) => {
            Ok(WriteOutcome::Lost)
        }
        Err(
            object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. },
        ) => {
            delete_job(store, partition).await?;
            create_job(store, record, partition).await
        }
        Err(e) => Err(Error::store("put", &key, e)),
    }
}

/// Writes the job record with `mode`; the store's error is the caller's to classify.
async fn put_job(
    store: &Store,
    record: &JobRecord,
    partition: &PartitionId,
    mode: PutMode,
) -> (Path, object_store::Result<()>) {
    let key = Path::from(job_key(partition));
    let options = PutOptions {
        mode,
        ..Default::default()
    };
    let put = store
        .object_store()
        .put_opts(&key, record.encode(), options)
        .await
        .map(drop);
    (key, put)
}

/// Deletes the job record if it is still the version read, so a record that replaced it
/// (another job's, written once ours went stale) stays for that job to end: `Lost` then.
/// The store's conditional delete decides where it has one (S3); elsewhere (a local
/// directory, memory) the record is read again just before the delete.
pub async fn delete_job_if(
    store: &Store,
    partition: &PartitionId,
    expected: &UpdateVersion,
) -> Result<WriteOutcome> {
    let Some(current) = read_job(store, partition).await? else {
        return Ok(WriteOutcome::Lost);
    };
    if current.version != *expected {
        return Ok(WriteOutcome::Lost);
    }
    let listed = object_store::ObjectMeta {
        location: Path::from(job_key(partition)),
        last_modified: current.written_at,
        size: 0,
        e_tag: expected.e_tag.clone(),
        version: expected.version.clone(),
    };
    Ok(if store.delete_listed(&listed).await? {
        WriteOutcome::Written
    } else {
        WriteOutcome::Lost
    })
}

/// Deletes the job record (absent is fine).
pub async fn delete_job(store: &Store, partition: &PartitionId) -> Result<()> {
    let key = Path::from(job_key(partition));
    match store.object_store().delete(&key).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(Error::store("delete", &key, e)),
    }
}

//! Files moved in and out of quarantine outside a compaction: an operator's release, and the
//! quarantine of ingest files a job failed to read on every attempt.
//!
//! Quarantine is never lifted by a compaction: a bad file stays out of the live set, in place,
//! until someone decides it should be tried again, typically once the cause is fixed (the
//! function may now use the file's KMS key, has the memory for its columns, or runs a build
//! that reads it). A release is one commit like any other (a create-only write of the next
//! version) that drops the files' quarantine entries. They are then live: readers read them
//! and the next compaction merges them, or quarantines them again if they are still bad.

use serde::Serialize;

use super::{CommitOutcome, CommitRequest, QuarantinedFile, commit, load_latest};
use crate::error::{Error, Result};
use crate::partition::{KeyLayout, PartitionId};
use crate::store::Store;

/// Commits tried before giving up on a partition whose commits keep forgetting files.
const RELEASE_ATTEMPTS: usize = 4;

/// What a release did.
#[derive(Debug, Clone, Serialize)]
pub struct Released {
    /// The partition, as `tenant=…/year=…/month=…/day=…/hour=…`.
    pub partition: String,
    /// The files released, with the reasons they had been quarantined for.
    pub released: Vec<QuarantinedFile>,
    /// The manifest version now latest (unchanged when nothing was released).
    pub manifest_version: u64,
}

/// Releases quarantined ingest files of `partition` back into its live set: those of `keys`
/// (keys relative to the store root, each of which must be a quarantined ingest file), or every
/// one when `keys` is empty. Nothing to release writes no version. `now_ms` is recorded as the
/// version's commit time.
pub async fn release_quarantined(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    keys: &[String],
    now_ms: i64,
) -> Result<Released> {
    let manifest = load_latest(store, layout, partition).await?;
    let ingest_dir = format!("{}/", layout.ingest_dir(partition));
    let releasable: Vec<&QuarantinedFile> = manifest
        .quarantined
        .iter()
        .filter(|q| q.key.starts_with(&ingest_dir))
        .collect();
    let chosen: Vec<QuarantinedFile> = if keys.is_empty() {
        releasable.into_iter().cloned().collect()
    } else {
        let mut chosen = Vec::new();
        for key in keys {
            let Some(q) = releasable.iter().find(|q| &q.key == key) else {
                return Err(Error::NotQuarantined {
                    key: key.clone(),
                    partition: partition.relative_dir(),
                });
            };
            if !chosen.iter().any(|c: &QuarantinedFile| &c.key == key) {
                chosen.push((*q).clone());
            }
        }
        chosen
    };
    if chosen.is_empty() {
        return Ok(Released {
            partition: partition.relative_dir(),
            released: chosen,
            manifest_version: manifest.version,
        });
    }
    let request = CommitRequest {
        inputs: Vec::new(),
        outputs: Vec::new(),
        quarantined: Vec::new(),
        released: chosen.iter().map(|q| q.key.clone()).collect(),
        forget: Vec::new(),
        ingested_bytes: 0,
        attempt_id: format!("release-{:016x}", rand::random::<u64>()),
        now_ms,
        commit_by: None,
        unpruned_until: None,
    };
    let version = commit_alone(store, layout, partition, manifest, &request).await?;
    follow_in_symlink(store, layout, partition).await;
    for q in &chosen {
        tracing::info!(file = %q.key, reason = %q.reason, "released from quarantine");
    }
    Ok(Released {
        partition: partition.relative_dir(),
        released: chosen,
        manifest_version: version,
    })
}

/// Quarantines ingest files of `partition` outside a compaction (its job failed reading them
/// on every attempt): one commit that adds them to the quarantine, in place. Returns the
/// manifest version now latest.
pub async fn quarantine_files(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    files: Vec<QuarantinedFile>,
    now_ms: i64,
) -> Result<u64> {
    let manifest = load_latest(store, layout, partition).await?;
    let request = CommitRequest {
        inputs: Vec::new(),
        outputs: Vec::new(),
        quarantined: files,
        released: Vec::new(),
        forget: Vec::new(),
        ingested_bytes: 0,
        attempt_id: format!("quarantine-{:016x}", rand::random::<u64>()),
        now_ms,
        commit_by: None,
        unpruned_until: None,
    };
    let version = commit_alone(store, layout, partition, manifest, &request).await?;
    follow_in_symlink(store, layout, partition).await;
    Ok(version)
}

/// Rewrites the symlink manifest after a commit; a failure is left to the next writer (GC
/// rewrites it before it deletes anything).
async fn follow_in_symlink(store: &Store, layout: &KeyLayout, partition: &PartitionId) {
    if let Err(e) = super::symlink::write_symlink(store, layout, partition).await {
        tracing::warn!(partition = %partition, error = %e, "could not rewrite the symlink manifest");
    }
}

/// Commits a change that depends on no listing, from `base` on: a conflict (a commit that
/// forgot retired files meanwhile) only reads the latest version again.
async fn commit_alone(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    mut base: super::Manifest,
    request: &CommitRequest,
) -> Result<u64> {
    for _ in 0..RELEASE_ATTEMPTS {
        match commit(store, layout, partition, &base, request).await? {
            CommitOutcome::Committed(m) | CommitOutcome::AlreadyCommitted(m) => {
                return Ok(m.version);
            }
            CommitOutcome::Conflict { .. } => base = load_latest(store, layout, partition).await?,
        }
    }
    Err(Error::Conflict {
        partition: partition.relative_dir(),
        message: format!("the manifest kept changing over {RELEASE_ATTEMPTS} commits"),
    })
}

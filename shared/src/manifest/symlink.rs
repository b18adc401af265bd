//! Symlink manifests: each partition's live set as a list of URLs, for Athena, Trino and Hive
//! (`SymlinkTextInputFormat`), at `_compaction/symlink/<partition>/manifest`.
//!
//! The body is the URL of every live file, one a line and nothing else, exactly what
//! `ourios-compact files --urls` prints for the hour. Every commit, release and quarantine
//! rewrites it, the planner on each ingest event, and GC before it deletes retired files.
//!
//! INVARIANT: a writer reads the symlink manifest (its ETag) before it reads the partition's
//! state, and writes conditionally on that ETag (create-only when absent): a writer whose
//! state is older than another's write fails its write and starts again, so no writer leaves
//! an older list in place. A job whose commit is the version right after the one it read
//! writes that version's live set over the listing it read, without reading the state again
//! ([`write_symlink_from`]): no other version came between, so its list misses only files
//! that landed since the listing. Each of those has its own event, whose writer either wrote
//! after the job read the symlink manifest (then the job's write fails and it reads again) or
//! writes after the job, reading the state anew. GC deletes a retired file only once the
//! symlink manifest it wrote after the commit that retired it no longer lists it, so a reader
//! of the symlink manifest never meets a deleted file, never a row twice, and never misses a
//! committed row.

use bytes::Bytes;
use object_store::{ObjectMeta, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Serialize;

use super::{PartitionFiles, partition_files};
use crate::error::{Error, Result};
use crate::partition::{KeyLayout, PartitionId};
use crate::store::Store;

/// Writes tried before giving up on a partition whose state keeps changing.
const SYMLINK_ATTEMPTS: usize = 8;

/// What writing a symlink manifest did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymlinkWrite {
    /// The list changed and is written.
    Written,
    /// It already held the live set.
    Unchanged,
}

/// The body of a partition's symlink manifest for `urls`: one a line, each ending in `\n`.
pub fn symlink_body(urls: &[String]) -> String {
    urls.iter().map(|u| format!("{u}\n")).collect()
}

/// A partition's symlink manifest as a writer read it before the partition's state: its
/// body and the version a conditional write replaces (`None`: absent, or unreadable for want
/// of the right to list, which S3 answers with 403).
#[derive(Debug, Clone, Default)]
pub struct SymlinkSeen(Option<(ObjectMeta, Bytes)>);

/// Reads `partition`'s symlink manifest, first of a writer's reads (module doc).
pub async fn read_symlink(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> Result<SymlinkSeen> {
    let key = layout.symlink_key(partition);
    match store.get_if_present(&key).await {
        Ok(found) => Ok(SymlinkSeen(found)),
        Err(object_store::Error::PermissionDenied { .. }) => Ok(SymlinkSeen(None)),
        Err(e) => Err(Error::store("get", &key, e)),
    }
}

/// Rewrites `partition`'s symlink manifest from its live set, unless it holds it already
/// (module doc: conditional on the ETag read first).
pub async fn write_symlink(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> Result<SymlinkWrite> {
    for _ in 0..SYMLINK_ATTEMPTS {
        let seen = read_symlink(store, layout, partition).await?;
        let files = partition_files(store, layout, partition).await?;
        if let Some(written) = write_unless_changed(store, layout, partition, &seen, &files).await?
        {
            return Ok(written);
        }
    }
    Err(Error::Conflict {
        partition: partition.to_string(),
        message: format!(
            "its symlink manifest changed under {SYMLINK_ATTEMPTS} writes in a row; the next \
             commit or event rewrites it"
        ),
    })
}

/// Writes `files`, the live set a commit made on the state read after `seen`, conditionally
/// on `seen`; when another writer wrote since, reads and writes again as [`write_symlink`]
/// does. A job that committed the version after the one it read knows the live set without
/// reading the state again (module doc).
pub async fn write_symlink_from(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    seen: &SymlinkSeen,
    files: &PartitionFiles,
) -> Result<SymlinkWrite> {
    match write_unless_changed(store, layout, partition, seen, files).await? {
        Some(written) => Ok(written),
        None => write_symlink(store, layout, partition).await,
    }
}

/// One conditional write of `files`' URLs over `seen`; `None` when another writer wrote since
/// `seen` was read.
async fn write_unless_changed(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    seen: &SymlinkSeen,
    files: &PartitionFiles,
) -> Result<Option<SymlinkWrite>> {
    let key = layout.symlink_key(partition);
    let urls: Vec<String> = (files.files.iter()).map(|f| store.url_of(&f.key)).collect();
    let body = symlink_body(&urls);
    if (seen.0.as_ref()).is_some_and(|(_, b)| b.as_ref() == body.as_bytes()) {
        return Ok(Some(SymlinkWrite::Unchanged));
    }
    let mode = match &seen.0 {
        Some((meta, _)) => PutMode::Update(UpdateVersion {
            e_tag: meta.e_tag.clone(),
            version: meta.version.clone(),
        }),
        None => PutMode::Create,
    };
    let options = PutOptions {
        mode,
        ..Default::default()
    };
    let payload = PutPayload::from(body.into_bytes());
    let put = (store.object_store())
        .put_opts(&key, payload.clone(), options)
        .await;
    match put {
        Ok(_) => Ok(Some(SymlinkWrite::Written)),
        Err(
            object_store::Error::Precondition { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::NotFound { .. },
        ) => Ok(None),
        // A local directory has no conditional overwrite: the last writer wins there.
        Err(
            object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. },
        ) => {
            (store.object_store().put(&key, payload).await)
                .map_err(|e| Error::store("put", &key, e))?;
            Ok(Some(SymlinkWrite::Written))
        }
        Err(e) => Err(Error::store("put", &key, e)),
    }
}

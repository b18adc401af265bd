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
//! an older list in place. GC deletes a retired file only once the symlink manifest it wrote
//! after the commit that retired it no longer lists it, so a reader of the symlink manifest
//! never meets a deleted file, never a row twice, and never misses a committed row.

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Serialize;

use super::partition_files;
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

/// Rewrites `partition`'s symlink manifest from its live set, unless it holds it already
/// (module doc: conditional on the ETag read first).
pub async fn write_symlink(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> Result<SymlinkWrite> {
    let key = layout.symlink_key(partition);
    for _ in 0..SYMLINK_ATTEMPTS {
        let current = match store.get_if_present(&key).await {
            Ok(found) => found,
            // Without the right to list the prefix, S3 answers a missing key with 403.
            Err(object_store::Error::PermissionDenied { .. }) => None,
            Err(e) => return Err(Error::store("get", &key, e)),
        };
        let files = partition_files(store, layout, partition).await?;
        let urls: Vec<String> = (files.files.iter()).map(|f| store.url_of(&f.key)).collect();
        let body = symlink_body(&urls);
        if current
            .as_ref()
            .is_some_and(|(_, b)| b.as_ref() == body.as_bytes())
        {
            return Ok(SymlinkWrite::Unchanged);
        }
        let mode = match &current {
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
        let put = (store.object_store())
            .put_opts(&key, PutPayload::from(body.into_bytes()), options)
            .await;
        match put {
            Ok(_) => return Ok(SymlinkWrite::Written),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }
                | object_store::Error::NotFound { .. },
            ) => {}
            // A local directory has no conditional overwrite: the last writer wins there.
            Err(
                object_store::Error::NotImplemented { .. }
                | object_store::Error::NotSupported { .. },
            ) => {
                let body = PutPayload::from(symlink_body(&urls).into_bytes());
                (store.object_store().put(&key, body).await)
                    .map_err(|e| Error::store("put", &key, e))?;
                return Ok(SymlinkWrite::Written);
            }
            Err(e) => return Err(Error::store("put", &key, e)),
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

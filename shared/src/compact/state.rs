//! Step 1, the partition's state: the latest manifest and a listing of the ingest directory
//! give the live set (the reader rule), and with it the inputs the job wants, in ordinal order.
//! A job's read ([`read_job_state`]) takes the symlink manifest first, so a job that commits can
//! write it from this state (`manifest::symlink`'s invariant), and notes when it listed the
//! manifest versions, so its commit knows until when none after its base can be pruned.

use std::sync::Arc;

use object_store::path::Path;

use crate::clock::Clock;
use crate::error::Result;
use crate::manifest::symlink::{SymlinkSeen, read_symlink};
use crate::manifest::{Manifest, live_set, load_latest, unaddressable_inputs};
use crate::partition::{KeyLayout, PartitionId};
use crate::store::{Listing, Store};

/// What step 1 read: the symlink manifest (`None`: not read, or its read failed, and a
/// commit's write reads it again), the latest manifest, the listing of the ingest directory, the live inputs in
/// ordinal order (`None` when there is nothing to merge) and the data keys the store cannot
/// address.
pub(crate) struct PartitionState {
    pub(crate) symlink: Option<SymlinkSeen>,
    pub(crate) manifest: Manifest,
    pub(crate) listing: Vec<object_store::ObjectMeta>,
    pub(crate) wanted: Option<Vec<WantedInput>>,
    pub(crate) unaddressable: Vec<String>,
    /// When the manifest versions were listed, on the job's monotonic clock (`None` for a state
    /// no commit is based on; see [`crate::manifest::unpruned_until`]).
    pub(crate) listed_at_ms: Option<u64>,
}

/// Step 1 of a job that may commit: the symlink manifest, then [`read_partition`].
pub(crate) async fn read_job_state(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    clock: &Arc<dyn Clock>,
) -> Result<PartitionState> {
    let listed_at_ms = Some(clock.monotonic_ms());
    let symlink = read_symlink(store, layout, partition).await.ok();
    let state = read_partition(store, layout, partition).await?;
    Ok(PartitionState {
        symlink,
        listed_at_ms,
        ..state
    })
}

/// The latest manifest and a listing, which give the live set (the reader rule); nothing
/// uncompacted and the compacted files of one commit leave nothing to merge. The symlink
/// manifest is not read (a fan-out's plan commits nothing).
pub(crate) async fn read_partition(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> Result<PartitionState> {
    let symlink = None;
    let manifest = load_latest(store, layout, partition).await?;
    let ingest_dir = layout.ingest_dir(partition);
    let Listing {
        objects: listing,
        unaddressable,
    } = store.list(&ingest_dir).await?;
    let live = live_set(layout, &ingest_dir, &listing, &manifest);
    let wanted = if live.ingest.is_empty() && manifest.compacted_in_one_piece() {
        None
    } else {
        Some(wanted_inputs(&manifest, &live))
    };
    Ok(PartitionState {
        symlink,
        manifest,
        listing,
        wanted,
        unaddressable: unaddressable_inputs(layout, &ingest_dir, &unaddressable),
        listed_at_ms: None,
    })
}

/// An input the job wants to read: its key, size and whether it is an earlier output.
#[derive(Debug, Clone)]
pub(crate) struct WantedInput {
    pub(crate) key: Path,
    pub(crate) bytes: u64,
    pub(crate) is_compacted: bool,
}

/// The live inputs in ordinal order: earlier compacted files first (they are runs already),
/// then ingest files in sorted-key order.
fn wanted_inputs(manifest: &Manifest, live: &crate::manifest::LiveSet) -> Vec<WantedInput> {
    let mut wanted = Vec::new();
    for key in &live.compacted {
        let bytes = manifest
            .compacted
            .iter()
            .find(|c| &c.key == key)
            .map_or(0, |c| c.bytes);
        wanted.push(WantedInput {
            key: key.location().clone(),
            bytes,
            is_compacted: true,
        });
    }
    for meta in &live.ingest {
        wanted.push(WantedInput {
            key: meta.location.clone(),
            bytes: meta.size,
            is_compacted: false,
        });
    }
    wanted
}

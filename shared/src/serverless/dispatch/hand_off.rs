//! The hand-off claim: at most one compactor starts a fan-out execution for a partition.
//!
//! A compactor that hands a job to the state machine first claims the partition with a
//! create-only write of `runs/hand-off.json` naming its job. Until the execution's plan is
//! written, no job directory shows it at work ([`crate::compact::fan_out::active_job`]); the
//! claim covers that window, so two compactors handed the same partition (a job record replaced
//! as stale, a duplicate delivery) start one execution. A claim older than the grace on the
//! store's clock is stale (no plan takes that long to start) and is taken over; GC deletes an
//! abandoned one as it deletes any unreferenced object of the compacted directory. The
//! execution's commit releases it.

use std::time::Duration;

use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::partition::{KeyLayout, PartitionId};
use crate::store::Store;

/// What a claim says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct HandOffClaim {
    /// The job handed off.
    job: String,
}

/// The outcome of claiming a partition's hand-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The partition's hand-off is this job's (claimed now, or by an earlier attempt of it).
    Ours,
    /// Another job's execution is being started.
    Other(String),
}

/// Claims the hand-off of `partition` for `job`.
pub async fn claim_hand_off(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    job: &str,
    grace: Duration,
) -> Result<Claim> {
    let key = layout.hand_off_key(partition);
    let payload = || {
        let claim = HandOffClaim {
            job: job.to_string(),
        };
        serde_json::to_vec(&claim).map(PutPayload::from)
    };
    let encode = |e: serde_json::Error| Error::invariant(format!("encoding {key}: {e}"));
    if is_written(
        put(store, &key, payload().map_err(encode)?, PutMode::Create).await,
        &key,
    )? {
        return Ok(Claim::Ours);
    }
    let Some((holder, meta)) = read_claim(store, &key).await? else {
        // Released meanwhile: the claim is free again.
        let put = put(store, &key, payload().map_err(encode)?, PutMode::Create).await;
        return Ok(match is_written(put, &key)? {
            true => Claim::Ours,
            false => Claim::Other(String::new()),
        });
    };
    if holder.as_deref() == Some(job) {
        return Ok(Claim::Ours);
    }
    let now = store.store_now(&layout.clock_key(partition)).await?;
    let age_ms = (now - meta.last_modified).num_milliseconds();
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let other = || Claim::Other(holder.clone().unwrap_or_default());
    if age_ms < grace_ms {
        return Ok(other());
    }
    // Stale: taken over only if it is still the version read.
    let expected = UpdateVersion {
        e_tag: meta.e_tag.clone(),
        version: meta.version.clone(),
    };
    let taken_over = match put(
        store,
        &key,
        payload().map_err(encode)?,
        PutMode::Update(expected),
    )
    .await
    {
        Ok(()) => true,
        Err(
            object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. },
        ) => {
            // No conditional overwrite (a local directory): delete what was read, then create.
            store.delete_listed(&meta).await?
                && is_written(
                    put(store, &key, payload().map_err(encode)?, PutMode::Create).await,
                    &key,
                )?
        }
        written => is_written(written, &key)?,
    };
    Ok(if taken_over { Claim::Ours } else { other() })
}

/// Releases `job`'s hand-off claim of `partition`, if it still holds it. Best effort: a claim
/// left behind goes stale after the grace.
pub async fn release_hand_off(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    job: &str,
) {
    let key = layout.hand_off_key(partition);
    match read_claim(store, &key).await {
        Ok(Some((Some(holder), meta))) if holder == job => {
            if let Err(e) = store.delete_listed(&meta).await {
                tracing::warn!(key = %key, error = %e, "could not release the hand-off claim");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(key = %key, error = %e, "could not read the hand-off claim"),
    }
}

async fn put(
    store: &Store,
    key: &Path,
    payload: PutPayload,
    mode: PutMode,
) -> object_store::Result<()> {
    let options = PutOptions {
        mode,
        ..Default::default()
    };
    store
        .object_store()
        .put_opts(key, payload, options)
        .await
        .map(drop)
}

/// Whether a conditional write landed: `false` when another writer's claim is in place (a lost
/// race); any other error fails.
fn is_written(put: object_store::Result<()>, key: &Path) -> Result<bool> {
    match put {
        Ok(()) => Ok(true),
        Err(
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. }
            | object_store::Error::NotFound { .. },
        ) => Ok(false),
        Err(e) => Err(Error::store("put", key, e)),
    }
}

/// The claim at `key` (its job, `None` if unreadable) and its listing entry; `None` when absent.
async fn read_claim(
    store: &Store,
    key: &Path,
) -> Result<Option<(Option<String>, object_store::ObjectMeta)>> {
    let Some((meta, bytes)) =
        (store.get_if_present(key).await).map_err(|e| Error::store("get", key, e))?
    else {
        return Ok(None);
    };
    let holder = serde_json::from_slice::<HandOffClaim>(&bytes)
        .ok()
        .map(|c| c.job);
    Ok(Some((holder, meta)))
}

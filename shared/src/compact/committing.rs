//! Step 5, committing: one create-only manifest write makes the outputs live and retires the
//! inputs; losing the race is detected and reported (`noop` or `conflict`), and outputs no
//! commit made live are deleted.

use std::time::Instant;

use futures::StreamExt;
use object_store::path::Path;

use crate::compact::job::JobContext;
use crate::compact::producing::Produced;
use crate::compact::writing::{Written, delete_quietly};
use crate::error::{Error, Result};
use crate::manifest::{
    CommitOutcome, CommitRequest, CompactedFile, Manifest, PartitionFiles, QuarantinedFile, commit,
    live_files, unpruned_until,
};
use crate::object_key::ObjectKey;
use crate::report::{CompactionReport, InputTotals, Status};
use crate::store::Store;

/// Step 5: commits what was produced on `manifest` and `listing`, the state the job read (its
/// manifest versions listed at `listed_at_ms` of the job's monotonic clock, when known), and
/// reports it. Returns the live set the commit made when it is the version right after
/// `manifest` (no other commit came between, so `listing` gives it).
pub(crate) async fn commit_produced(
    job: &JobContext<'_>,
    manifest: &Manifest,
    listed_at_ms: Option<u64>,
    listing: &[object_store::ObjectMeta],
    produced: Produced,
    report: &mut CompactionReport,
) -> Result<Option<PartitionFiles>> {
    let (store, layout, partition, options) = (job.store, job.layout, job.partition, job.options);
    let Produced {
        consumed,
        rows,
        quarantined,
        outputs: written,
        stats,
        fan_out,
        commit_by,
    } = produced;
    report.quarantined = quarantined.clone();
    report.fan_out = fan_out;
    report.inputs = InputTotals {
        files: consumed.len() as u64,
        bytes: consumed.iter().map(|c| c.bytes).sum(),
        rows,
    };
    if let Some(w) = written.first() {
        report.row_group_bytes = w.row_group_bytes;
    }
    report.runs_spilled = stats.runs_spilled;
    report.merge_passes = stats.merge_passes;
    report.spill_bytes = stats.spill_bytes;
    if consumed.is_empty() && written.is_empty() && quarantined.is_empty() {
        // Every new input vanished since the listing: no version would change anything.
        report.status = Status::Noop;
        return Ok(None);
    }

    // Each attempt names its outputs uniquely, so a late job may delete its own outputs: no
    // manifest can reference them.
    if let Some(deadline) = options.deadline
        && Instant::now() >= deadline
    {
        delete_outputs(store, &written, None).await;
        return Err(Error::Deadline {
            partition: partition.to_string(),
        });
    }

    // Retired entries whose files are gone are forgotten (ingest files and earlier outputs
    // alike), so the manifest stays as small as the grace period allows.
    // The compacted directory is listed only when an earlier output is among them.
    let compacted_dir = layout.compacted_dir(partition);
    let compacted_prefix = format!("{compacted_dir}/");
    let compacted_listing =
        match (manifest.retired.iter()).any(|r| r.key.as_str().starts_with(&compacted_prefix)) {
            true => store.list_sorted(&compacted_dir).await?,
            false => Vec::new(),
        };
    let listed: std::collections::HashSet<&str> = listing
        .iter()
        .chain(&compacted_listing)
        .map(|m| m.location.as_ref())
        .collect();
    let forget = manifest
        .retired
        .iter()
        .filter(|r| !listed.contains(r.key.as_str()))
        .map(|r| r.key.clone())
        .collect();
    let request = CommitRequest {
        inputs: consumed.iter().map(|c| ObjectKey::from(&c.key)).collect(),
        outputs: written
            .iter()
            .map(|w| CompactedFile {
                key: w.output.key.clone(),
                rows: w.output.rows,
                bytes: w.output.bytes,
                input_set: w.input_set.clone(),
                range: w.range.clone(),
            })
            .collect(),
        quarantined: quarantined
            .iter()
            .map(|q| QuarantinedFile {
                key: q.file.clone(),
                reason: q.reason.clone(),
            })
            .collect(),
        released: Vec::new(),
        forget,
        ingested_bytes: consumed
            .iter()
            .filter(|c| !c.is_compacted)
            .map(|c| c.bytes)
            .sum(),
        attempt_id: report.attempt_id.clone(),
        now_ms: options.clock.now_ms(),
        commit_by,
        unpruned_until: listed_at_ms
            .and_then(|at| unpruned_until(&options.clock, at, options.settings.gc_grace)),
    };
    // Marked before the commit: a job killed before its GC still leaves the retired inputs
    // to the sweep (a marker with nothing due is removed by the GC it dispatches). An upload
    // marked it already.
    if !consumed.is_empty()
        && written.is_empty()
        && !options.settings.gc_grace.is_zero()
        && let Err(e) = job.mark_garbage().await
    {
        tracing::warn!(partition = %partition, error = %e, "could not mark garbage due; GC after the job marks it");
    }
    let outcome = match commit(store, layout, partition, manifest, &request).await {
        Err(e @ Error::Deadline { .. }) => {
            delete_outputs(store, &written, None).await;
            return Err(e);
        }
        other => other?,
    };
    let mut live = None;
    match outcome {
        CommitOutcome::Committed(m) => {
            if m.version == manifest.version + 1 {
                live = Some(live_files(layout, partition, &m, listing));
            }
            report.manifest_version = m.version;
            report.write_amplification = m.write_amplification();
            report.outputs = written.into_iter().map(|w| w.output).collect();
            report.output = match report.outputs.as_slice() {
                [one] => Some(one.clone()),
                _ => None,
            };
            report.status = if quarantined.is_empty() {
                Status::Compacted
            } else {
                Status::Partial
            };
        }
        CommitOutcome::AlreadyCommitted(m) => {
            report.manifest_version = m.version;
            report.write_amplification = m.write_amplification();
            report.status = Status::Noop;
            // Another attempt committed the same input set under its own names.
            delete_outputs(store, &written, Some(&m)).await;
        }
        CommitOutcome::Conflict { current, reason } => {
            report.manifest_version = current.version;
            // The winner retired one of our inputs, so no later commit can make our outputs
            // live; if a lost response hid our own commit and a later one retired them
            // since, they wait for the grace period like any input.
            delete_outputs(store, &written, Some(&current)).await;
            return Err(Error::Conflict {
                partition: partition.to_string(),
                message: reason,
            });
        }
    }
    Ok(live)
}

/// Deletes outputs no commit made live: all of them, or those `manifest` does not reference.
async fn delete_outputs(store: &Store, written: &[Written], manifest: Option<&Manifest>) {
    for w in written {
        if manifest.is_none_or(|m| !m.references(&w.output.key)) {
            delete_quietly(store, &w.output.key).await;
        }
    }
}

/// Deletes `keys` as [`delete_quietly`] does, as many at a time as the job downloads at once:
/// a round trip each, so a fan-out's records and holds go in a few instead of one after
/// another (one at a time keeps a job's store operations one sequence, as the protocol
/// simulation runs them).
pub(crate) async fn delete_all_quietly(job: &JobContext<'_>, keys: Vec<Path>) {
    let at_once = job.options.parallel_downloads.max(1);
    futures::stream::iter(keys)
        .for_each_concurrent(at_once, |key| async move {
            delete_quietly(job.store, &ObjectKey::from(key)).await
        })
        .await;
}

/// Deletes what is left of the job's directory (`runs/<job>/`: the holds on its outputs, the
/// commit's marker), once its commit is over: a committed output is referenced, and an
/// uncommitted one is an orphan GC may take. `known` names every object left there when the
/// job knows them (the holds of a job that did not fan out), saving the listing. Best
/// effort: GC sweeps the directory once idle.
pub(crate) async fn release_holds(job: &JobContext<'_>, known: Option<Vec<Path>>) {
    if job.options.settings.gc_grace.is_zero() {
        return;
    }
    let left = match known {
        Some(keys) => keys,
        None => {
            let dir = job.layout.fan_out_dir(job.partition, job.attempt_id);
            match job.store.list_sorted(&dir).await {
                Ok(listed) => listed.into_iter().map(|o| o.location).collect(),
                Err(_) => return,
            }
        }
    };
    delete_all_quietly(job, left).await;
}

/// The holds on `produced`'s outputs when they are all the job left in its directory (it did
/// not fan out), for [`release_holds`]; `None` otherwise.
pub(crate) fn known_holds(job: &JobContext<'_>, produced: &Produced) -> Option<Vec<Path>> {
    if produced.fan_out.is_some() {
        return None;
    }
    (produced.outputs.iter())
        .filter(|w| w.held_from_ms.is_some())
        .map(|w| {
            let name = w.output.key.location().filename()?;
            Some(job.layout.hold_key(job.partition, job.attempt_id, name))
        })
        .collect()
}

//! Loading the latest manifest version and committing the next one by create-only write.

use std::sync::Arc;
use std::time::Duration;

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::{CompactedFile, Manifest, QuarantinedFile, RetiredFile};
use crate::clock::{Clock, Expiry};
use crate::error::{Error, Result};
use crate::object_key::ObjectKey;
use crate::partition::{KeyLayout, PartitionId, parse_version};
use crate::store::Store;

/// Attempts of one commit before giving up on a partition that keeps changing.
const MAX_COMMIT_ATTEMPTS: usize = 8;

/// Every manifest version present for a partition, ascending.
pub async fn list_versions(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> Result<Vec<u64>> {
    let listing = store.list_sorted(&layout.manifest_dir(partition)).await?;
    let mut versions: Vec<u64> = listing
        .iter()
        .filter_map(|m| parse_version(&m.location))
        .collect();
    versions.sort_unstable();
    Ok(versions)
}

/// The latest manifest of a partition, or the empty version-0 state.
pub async fn load_latest(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> Result<Manifest> {
    let versions = list_versions(store, layout, partition).await?;
    match versions.last() {
        None => Ok(Manifest::empty(&partition.relative_dir())),
        Some(&v) => load_version(store, layout, partition, v).await,
    }
}

async fn load_version(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    version: u64,
) -> Result<Manifest> {
    let key = layout.manifest_key(partition, version);
    let bytes = store
        .object_store()
        .get(&key)
        .await
        .map_err(|e| Error::store("get", &key, e))?
        .bytes()
        .await
        .map_err(|e| Error::store("get", &key, e))?;
    let manifest = Manifest::decode(key.as_ref(), &bytes)?;
    if manifest.version != version {
        return Err(Error::Manifest {
            key: key.to_string(),
            message: format!(
                "holds version {} under the name of {version}",
                manifest.version
            ),
        });
    }
    Ok(manifest)
}

/// One compaction's change to the live set.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    /// Files the output replaces (ingest files and earlier compacted files).
    pub inputs: Vec<ObjectKey>,
    /// The new compacted files, in key order: none when no rows were written, one, or the
    /// disjoint key ranges of a fanned-out job (all with the same `input_set`, naming the
    /// inputs).
    pub outputs: Vec<CompactedFile>,
    /// Bad inputs to record.
    pub quarantined: Vec<QuarantinedFile>,
    /// Quarantined ingest files to take out of the quarantine, back into the live set (see
    /// [`release_quarantined`](super::release_quarantined)).
    pub released: Vec<ObjectKey>,
    /// Retired keys known to be deleted, whose entries may be dropped.
    pub forget: Vec<ObjectKey>,
    /// Bytes of the ingest files among the inputs (write amplification).
    pub ingested_bytes: u64,
    /// This attempt's id.
    pub attempt_id: String,
    /// Commit time (Unix milliseconds, committer's clock; informational).
    pub now_ms: i64,
    /// When the output becomes too old to commit: GC may sweep an unreferenced output once
    /// the grace has passed on the store's clock, so no write is attempted after this.
    pub commit_by: Option<Expiry>,
    /// Until when no version after the base can have been pruned (`None`: unknown). GC prunes
    /// only versions a grace old, and none after the base existed when the committer listed
    /// the versions, so a version written before this needs no listing to be the latest
    /// ([`unpruned_until`]).
    pub unpruned_until: Option<Expiry>,
}

/// Until when a committer that listed the manifest versions at `listed_at_ms` of `clock`'s
/// monotonic side finds every version after the one it read unpruned: half the `grace` later
/// (`None` without a grace). A version after it was written after the listing began, and GC
/// prunes it only once its Last-Modified is a grace old; the other half covers the stores'
/// one-second dates and the clocks' drift.
pub fn unpruned_until(
    clock: &Arc<dyn Clock>,
    listed_at_ms: u64,
    grace: Duration,
) -> Option<Expiry> {
    let half_ms = u64::try_from(grace.as_millis() / 2).unwrap_or(u64::MAX);
    (half_ms > 0).then(|| Expiry::at_monotonic(clock, listed_at_ms.saturating_add(half_ms)))
}

/// How a commit ended.
#[derive(Debug, Clone)]
pub enum CommitOutcome {
    /// This job's version is now the latest.
    Committed(Manifest),
    /// The same output was already committed (by a retry of this job or an identical one).
    AlreadyCommitted(Manifest),
    /// Another commit retired some of our inputs first; ours is abandoned.
    Conflict {
        /// The manifest that won.
        current: Manifest,
        /// Which input is no longer live.
        reason: String,
    },
}

/// Whether every input is still live in `base`.
fn stale_input(base: &Manifest, request: &CommitRequest, compacted_prefix: &str) -> Option<String> {
    request.inputs.iter().find_map(|key| {
        let live = if key.starts_with(compacted_prefix) {
            base.has_compacted(key)
        } else {
            !base.excludes(key)
        };
        (!live).then(|| format!("input {key} was compacted by version {}", base.version))
    })
}

/// Whether `latest` already holds the change of `request` (its output live or since retired,
/// its bad inputs recorded).
fn reflects(latest: &Manifest, request: &CommitRequest) -> bool {
    let output_applied = if request.outputs.is_empty() {
        request.inputs.iter().all(|key| latest.excludes(key))
    } else {
        request.outputs.iter().all(|o| latest.references(&o.key))
    };
    output_applied
        && request
            .quarantined
            .iter()
            .all(|q| latest.quarantined.iter().any(|e| e.key == q.key))
        && request
            .released
            .iter()
            .all(|key| latest.quarantined.iter().all(|e| &e.key != key))
}

fn apply(base: &Manifest, request: &CommitRequest) -> Manifest {
    let mut next = base.clone();
    next.version = base.version + 1;
    next.attempt_id = request.attempt_id.clone();
    next.committed_at_ms = request.now_ms;
    let inputs: std::collections::HashSet<&str> =
        request.inputs.iter().map(|k| k.as_str()).collect();
    let bad: std::collections::HashSet<&str> =
        request.quarantined.iter().map(|q| q.key.as_str()).collect();
    // A compacted file found bad is quarantined like an ingest file: out of the live set.
    next.compacted
        .retain(|c| !inputs.contains(c.key.as_str()) && !bad.contains(c.key.as_str()));
    for output in &request.outputs {
        next.compacted.push(output.clone());
        next.written_bytes = next.written_bytes.saturating_add(output.bytes);
    }
    // In key order: by range where every file records one, else by name (the ranges of one
    // fanned-out job are named in range order).
    if next.compacted.iter().all(|c| c.range.is_some()) {
        next.compacted
            .sort_by(|a, b| a.range.cmp(&b.range).then_with(|| a.key.cmp(&b.key)));
    } else {
        next.compacted.sort_by(|a, b| a.key.cmp(&b.key));
    }
    next.ingested_bytes = next.ingested_bytes.saturating_add(request.ingested_bytes);
    let forget: std::collections::HashSet<&str> =
        request.forget.iter().map(|k| k.as_str()).collect();
    let before = next.retired.len();
    next.retired.retain(|r| !forget.contains(r.key.as_str()));
    if next.retired.len() != before {
        next.forgotten_in = next.version;
    }
    let retired: std::collections::HashSet<ObjectKey> =
        next.retired.iter().map(|r| r.key.clone()).collect();
    for key in &request.inputs {
        if !retired.contains(key) {
            next.retired.push(RetiredFile {
                key: key.clone(),
                retired_at_ms: request.now_ms,
                retired_in: next.version,
            });
        }
    }
    next.quarantined
        .retain(|q| !request.released.contains(&q.key));
    let recorded: std::collections::HashSet<ObjectKey> =
        next.quarantined.iter().map(|q| q.key.clone()).collect();
    for q in &request.quarantined {
        if !recorded.contains(&q.key) {
            next.quarantined.push(q.clone());
        }
    }
    next
}

/// What `base` already says about `request`, before any write.
fn settled(base: &Manifest, request: &CommitRequest, read_version: u64) -> Option<CommitOutcome> {
    // The outputs of one request are committed together, so the first stands for all.
    if let Some(output) = request.outputs.first() {
        // Each attempt names its output uniquely: finding it means our own write landed
        // (its response was lost, or a retry met our own version).
        if base.has_compacted(&output.key) {
            return Some(CommitOutcome::Committed(base.clone()));
        }
        if !output.input_set.is_empty()
            && base
                .compacted
                .iter()
                .any(|c| c.input_set == output.input_set)
        {
            return Some(CommitOutcome::AlreadyCommitted(base.clone()));
        }
    }
    if base.forgotten_in > read_version {
        return Some(CommitOutcome::Conflict {
            current: base.clone(),
            reason: format!(
                "version {} forgot retired files after this job read version {read_version}, \
                 so its listing may hold files already compacted",
                base.forgotten_in
            ),
        });
    }
    None
}

/// Commits `request` on top of `base`, re-reading and retrying while other commits that
/// leave our inputs live get in first. INVARIANT: the only write is a create-only put of
/// version `base.version + 1`, so a lost race is always detected, never overwritten.
pub async fn commit(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    base: &Manifest,
    request: &CommitRequest,
) -> Result<CommitOutcome> {
    let compacted_prefix = layout.compacted_prefix(partition);
    let read_version = base.version;
    let mut base = base.clone();
    for _ in 0..MAX_COMMIT_ATTEMPTS {
        if let Some(outcome) = settled(&base, request, read_version) {
            return Ok(outcome);
        }
        if let Some(reason) = stale_input(&base, request, &compacted_prefix) {
            return Ok(CommitOutcome::Conflict {
                current: base,
                reason,
            });
        }
        // GC deleted an output of ours as an orphan: this attempt stalled past its hold (its
        // deadline check came before the stall), and must commit nothing.
        let condemned = (request.outputs.iter()).any(|o| base.condemned.contains(&o.key));
        if condemned || request.commit_by.as_ref().is_some_and(Expiry::has_passed) {
            // INVARIANT: nothing of ours is in `base` (checked above), and every failed write
            // was followed by a fresh read, so no version of ours exists: nothing committed.
            return Err(Error::Deadline {
                partition: partition.to_string(),
            });
        }
        let next = apply(&base, request);
        let key = layout.manifest_key(partition, next.version);
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let put = store
            .object_store()
            .put_opts(&key, PutPayload::from(next.encode()), options)
            .await;
        match put {
            Ok(_) => {
                // INVARIANT: a version is the state only while no higher one exists. GC prunes
                // old versions, so a committer more than KEEP_MANIFEST_VERSIONS behind can
                // re-create a pruned number: such a version is shadowed, never read, and the
                // commit is retried on the real latest. A higher version that already holds
                // our change was built on ours: we won. Ours is the highest listed in the
                // common case, and then it need not be read back. Before `unpruned_until`
                // (checked once the write has landed) no number after the base was pruned,
                // so ours was not: no listing.
                if request
                    .unpruned_until
                    .as_ref()
                    .is_some_and(|u| !u.has_passed())
                {
                    return Ok(CommitOutcome::Committed(next));
                }
                let versions = list_versions(store, layout, partition).await?;
                if versions.last() == Some(&next.version) {
                    return Ok(CommitOutcome::Committed(next));
                }
                let latest = load_latest(store, layout, partition).await?;
                if latest.version == next.version || reflects(&latest, request) {
                    return Ok(CommitOutcome::Committed(next));
                }
                tracing::warn!(
                    partition = %partition,
                    version = next.version,
                    latest = latest.version,
                    "committed on a pruned manifest version; retrying on the latest"
                );
                if let Err(e) = store.object_store().delete(&key).await {
                    tracing::warn!(key = %key, error = %e, "could not delete a shadowed manifest version; GC will prune it");
                }
                base = latest;
            }
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                base = load_latest(store, layout, partition).await?;
            }
            Err(e) => {
                // The write may have landed with its response lost: look before failing.
                let latest = load_latest(store, layout, partition).await?;
                let ours = (latest.version == next.version
                    && latest.attempt_id == request.attempt_id)
                    || request
                        .outputs
                        .first()
                        .is_some_and(|o| latest.has_compacted(&o.key));
                if ours {
                    return Ok(CommitOutcome::Committed(latest));
                }
                return Err(Error::store("put", &key, e));
            }
        }
    }
    Err(Error::Conflict {
        partition: partition.to_string(),
        message: format!("the manifest changed {MAX_COMMIT_ATTEMPTS} times during one commit"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::key;

    /// A commit written while no version after its base can have been pruned lands without a
    /// listing; once that is unknown (no grace) or past, it lists the versions after its write.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_lists_the_versions_only_when_its_base_may_have_been_pruned() {
        let clock = crate::clock::SystemClock::shared();
        let grace = std::time::Duration::from_secs(60);
        let (layout, partition) = (KeyLayout::default(), crate::testing::test_partition());
        let input = format!("{}/a.parquet", layout.ingest_dir(&partition));
        let output = format!("{}/part-a.parquet", layout.compacted_dir(&partition));
        let cases = [
            (
                "within",
                unpruned_until(&clock, clock.monotonic_ms(), grace),
                0,
            ),
            (
                "no grace",
                unpruned_until(&clock, 0, std::time::Duration::ZERO),
                1,
            ),
            ("past", Some(Expiry::at_monotonic(&clock, 0)), 1),
        ];
        for (case, unpruned, lists) in cases {
            let store = Store::from_object_store(
                std::sync::Arc::new(object_store::memory::InMemory::new()),
                "memory://",
            )
            .counting_requests();
            let mut request = crate::testing::commit_request("job", &input, &output);
            request.unpruned_until = unpruned;
            let base = Manifest::empty(&partition.relative_dir());
            let outcome = commit(&store, &layout, &partition, &base, &request).await;
            assert!(
                matches!(outcome, Ok(CommitOutcome::Committed(ref m)) if m.version == 1),
                "{case}: {outcome:?}"
            );
            let counts = store.request_counts();
            assert_eq!((counts.put, counts.list), (1, lists), "{case}");
        }
    }

    #[test]
    fn apply_retires_inputs_and_adds_output() {
        let mut base = Manifest::empty("p");
        base.compacted.push(CompactedFile {
            key: key("compacted/p/old.parquet"),
            rows: 1,
            bytes: 1,
            input_set: String::new(),
            range: None,
        });
        let request = CommitRequest {
            inputs: vec![key("compacted/p/old.parquet"), key("data/p/a.parquet")],
            outputs: vec![CompactedFile {
                key: key("compacted/p/new.parquet"),
                rows: 2,
                bytes: 2,
                input_set: "h".into(),
                range: None,
            }],
            quarantined: vec![QuarantinedFile {
                key: key("data/p/bad.parquet"),
                reason: "r".into(),
            }],
            released: vec![],
            forget: vec![],
            ingested_bytes: 5,
            attempt_id: "j".into(),
            now_ms: 9,
            commit_by: None,
            unpruned_until: None,
        };
        let next = apply(&base, &request);
        assert_eq!(next.version, 1);
        assert_eq!(next.compacted.len(), 1);
        assert_eq!(next.compacted[0].key, "compacted/p/new.parquet");
        assert_eq!(next.retired.len(), 2);
        assert!(next.excludes("data/p/bad.parquet"));
        assert!(stale_input(&next, &request, "compacted/p/").is_some());
        assert!(stale_input(&base, &request, "compacted/p/").is_none());
        assert_eq!(next.retired[0].retired_in, 1);
        assert_eq!((next.ingested_bytes, next.written_bytes), (5, 2));
        assert_eq!(next.forgotten_in, 0, "nothing forgotten");
    }

    #[test]
    fn forgetting_sets_the_watermark_and_older_bases_conflict() {
        let mut base = Manifest::empty("p");
        base.version = 4;
        base.retired.push(RetiredFile {
            key: key("data/p/gone.parquet"),
            retired_at_ms: 0,
            retired_in: 2,
        });
        let request = CommitRequest {
            inputs: vec![key("data/p/a.parquet")],
            outputs: vec![],
            quarantined: vec![],
            released: vec![],
            forget: vec![key("data/p/gone.parquet")],
            ingested_bytes: 0,
            attempt_id: "j".into(),
            now_ms: 0,
            commit_by: None,
            unpruned_until: None,
        };
        let next = apply(&base, &request);
        assert_eq!(next.forgotten_in, 5);
        assert!(next.retired.iter().all(|r| r.key != "data/p/gone.parquet"));
        assert!(matches!(
            settled(&next, &request, 4),
            Some(CommitOutcome::Conflict { .. })
        ));
        assert!(settled(&next, &request, 5).is_none());
    }

    #[test]
    fn a_released_file_leaves_the_quarantine_and_only_it() {
        let mut base = Manifest::empty("p");
        for key in ["data/p/a.parquet", "data/p/b.parquet"] {
            base.quarantined.push(QuarantinedFile {
                key: crate::testing::key(key),
                reason: "refused".into(),
            });
        }
        let request = CommitRequest {
            inputs: vec![],
            outputs: vec![],
            quarantined: vec![],
            released: vec![key("data/p/a.parquet")],
            forget: vec![],
            ingested_bytes: 0,
            attempt_id: "release".into(),
            now_ms: 0,
            commit_by: None,
            unpruned_until: None,
        };
        assert!(!reflects(&base, &request));
        let next = apply(&base, &request);
        assert_eq!(next.version, 1);
        assert!(!next.excludes("data/p/a.parquet"));
        assert!(next.excludes("data/p/b.parquet"));
        assert!(next.retired.is_empty(), "nothing retired");
        assert!(reflects(&next, &request));
    }

    #[test]
    fn a_quarantined_compacted_file_leaves_the_live_set() {
        let mut base = Manifest::empty("p");
        base.compacted.push(CompactedFile {
            key: key("compacted/p/bad.parquet"),
            rows: 1,
            bytes: 1,
            input_set: "x".into(),
            range: None,
        });
        let request = CommitRequest {
            inputs: vec![key("data/p/a.parquet")],
            outputs: vec![],
            quarantined: vec![QuarantinedFile {
                key: key("compacted/p/bad.parquet"),
                reason: "unreadable".into(),
            }],
            released: vec![],
            forget: vec![],
            ingested_bytes: 0,
            attempt_id: "j".into(),
            now_ms: 0,
            commit_by: None,
            unpruned_until: None,
        };
        let next = apply(&base, &request);
        assert!(next.compacted.is_empty(), "{next:?}");
        assert!(
            next.quarantined
                .iter()
                .any(|q| q.key == "compacted/p/bad.parquet")
        );
    }
}

//! Crash points: a compaction runs through a `FaultyStore` that fails at the N-th store
//! operation, for every N from the first operation to the last (in memory) and a sample of N
//! (on the S3 test server), in each fault variant: a crash (the operation and every later one
//! fail), a lost response (the operation lands, the caller sees an error), a forced 412 and a
//! forced 409 on the conditional write, and a multipart upload left with its parts written and
//! never completed.
//!
//! After every fault the live set holds every row exactly once (invariant 1) and the
//! quarantined file is untouched (invariant 7). A rerun without faults converges to one
//! compacted file (invariant 4), and GC with a zero grace leaves nothing but the live output,
//! the quarantined file and the latest manifest versions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::gc::{KEEP_MANIFEST_VERSIONS, collect_garbage};
use ourios_compaction::manifest::list_versions;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    Fault, FaultyStore, get_bytes, put_bytes, small_budget_options, symlink_manifest,
};
use ourios_integration_tests::{
    all_keys, assert_exactly_once, compact_expecting, file_tags, land_file, live_set, open_memory,
    open_s3, test_partition,
};

const BAD_BYTES: &[u8] = b"PAR1 this is not a parquet file PAR1";

/// Which compaction of the partition the fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// The first: no manifest yet, three ingest files and a bad one.
    First,
    /// The second: a compacted file (the bad input quarantined) and three late files.
    Second,
}

/// A partition ready for the compaction under test.
struct Scenario {
    store: Store,
    layout: KeyLayout,
    partition: PartitionId,
    expected: BTreeSet<i64>,
    bad_key: String,
    scratch: tempfile::TempDir,
}

fn options(scratch: &std::path::Path, store: &Store) -> CompactOptions {
    // Small budget: the sort spills runs, so the crash points cover the spill path too.
    let mut options = small_budget_options(scratch);
    // Zero grace: GC runs right after the commit, so its deletes are crash points as well.
    options.settings.gc_grace = Duration::ZERO;
    // Parts small enough that the output goes up as a multipart upload (its first part holds
    // three), so its parts and completion are crash points too; S3 takes no part under
    // 5 MiB, so only in memory (`store` is the scenario's own, not the faulty wrapper, which
    // has no raw S3 access whatever it wraps).
    if store.raw_s3().is_none() {
        options.upload_part_bytes = Some(2 << 10);
    }
    options
}

async fn prepare(store: Store, round: Round) -> Scenario {
    let layout = KeyLayout::default();
    let partition = test_partition();
    let mut expected = BTreeSet::new();
    for (i, name) in ["a.parquet", "b.parquet", "c.parquet"].iter().enumerate() {
        expected.extend(land_file(&store, &layout, &partition, name, i as i64 * 1000, 300).await);
    }
    let bad_key = format!("{}/bad.parquet", layout.ingest_dir(&partition));
    put_bytes(&store, &bad_key, Bytes::from_static(BAD_BYTES)).await;
    let scratch = tempfile::tempdir().expect("scratch");
    if round != Round::First {
        let opts = options(scratch.path(), &store);
        compact_expecting(&store, &layout, &partition, &opts, Status::Partial).await;
        for (i, name) in ["d.parquet", "e.parquet", "f.parquet"].iter().enumerate() {
            let first = (i as i64 + 3) * 1000;
            expected.extend(land_file(&store, &layout, &partition, name, first, 250).await);
        }
    }
    Scenario {
        store,
        layout,
        partition,
        expected,
        bad_key,
        scratch,
    }
}

impl Scenario {
    async fn compact(&self, store: &Store) -> Option<Status> {
        compact_partition(
            store,
            &self.layout,
            &self.partition,
            &options(self.scratch.path(), &self.store),
        )
        .await
        .ok()
        .map(|r| r.status)
    }

    async fn assert_consistent(&self, context: &str) {
        // Until a commit quarantines it, the bad file is live too (it holds no readable rows).
        let files = live_set(&self.store, &self.layout, &self.partition).await;
        let mut tags = Vec::new();
        for key in files.live.iter().filter(|k| **k != self.bad_key) {
            tags.extend(file_tags(&self.store, key).await);
        }
        assert_exactly_once(&tags, &self.expected, context);
        assert_eq!(
            get_bytes(&self.store, &self.bad_key).await.as_ref(),
            BAD_BYTES,
            "{context}: the quarantined file is untouched"
        );
        let root = self.scratch.path().join("ourios-compaction");
        let left: Vec<_> = std::fs::read_dir(&root)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{context}: scratch files left: {left:?}");
    }

    /// Rerun without faults, then GC with zero grace: one compacted file, nothing else.
    async fn assert_converges(&self, context: &str) {
        let status = self.compact(&self.store).await;
        assert!(
            matches!(
                status,
                Some(Status::Compacted | Status::Partial | Status::Noop)
            ),
            "{context}: the rerun succeeds, got {status:?}"
        );
        self.assert_consistent(&format!("{context}, after the rerun"))
            .await;
        let files = live_set(&self.store, &self.layout, &self.partition).await;
        assert_eq!(files.live.len(), 1, "{context}: one live file: {files:?}");
        let compacted_dir = format!("{}/", self.layout.compacted_dir(&self.partition));
        assert!(files.live[0].starts_with(&compacted_dir), "{files:?}");
        assert_eq!(files.quarantined.len(), 1, "{files:?}");

        collect_garbage(
            &self.store,
            &self.layout,
            &self.partition,
            Duration::ZERO,
            false,
        )
        .await
        .expect("gc runs");
        let versions = list_versions(&self.store, &self.layout, &self.partition)
            .await
            .expect("versions");
        assert!(
            versions.len() <= KEEP_MANIFEST_VERSIONS,
            "{context}: old manifest versions pruned: {versions:?}"
        );
        let latest = *versions.last().expect("a manifest exists");
        assert_eq!(files.manifest_version, latest);
        let mut allowed: BTreeSet<String> = versions
            .iter()
            .map(|v| self.layout.manifest_key(&self.partition, *v).to_string())
            .collect();
        allowed.insert(files.live[0].to_string());
        allowed.insert(self.bad_key.clone());
        // The symlink manifest, when a commit or GC wrote it, lists the live output alone.
        if let Some(body) = symlink_manifest(&self.store, &self.layout, &self.partition).await {
            let expected = format!("{}\n", self.store.url_of(files.live[0].as_str()));
            assert_eq!(body, expected, "{context}");
            allowed.insert(self.layout.symlink_key(&self.partition).to_string());
        }
        let keys: BTreeSet<String> = all_keys(&self.store).await.into_iter().collect();
        assert_eq!(
            keys, allowed,
            "{context}: after GC only the live output, the quarantined file and the latest \
             manifest versions remain"
        );
        self.assert_consistent(&format!("{context}, after GC"))
            .await;
    }
}

/// Counts the store operations of the faulted compaction on a fresh scenario.
async fn count_ops(fresh: &impl Fn() -> Store, round: Round) -> u64 {
    let scenario = prepare(fresh(), round).await;
    let counting = Arc::new(FaultyStore::new(
        Arc::clone(scenario.store.object_store()),
        None,
    ));
    // The same store (its URL, which the symlink manifest lists) seen through the counter.
    let wrapped = scenario.store.wrapped(|_| counting.clone());
    let status = scenario.compact(&wrapped).await;
    let expected = match round {
        Round::First => Status::Partial,
        Round::Second => Status::Compacted,
    };
    assert_eq!(status, Some(expected));
    scenario.assert_converges("without faults").await;
    counting.num_ops()
}

async fn run_with_fault(fresh: &impl Fn() -> Store, round: Round, fault: Fault) -> bool {
    let scenario = prepare(fresh(), round).await;
    let faulty = Arc::new(FaultyStore::new(
        Arc::clone(scenario.store.object_store()),
        Some(fault),
    ));
    let wrapped = scenario.store.wrapped(|_| faulty.clone());
    let status = scenario.compact(&wrapped).await;
    let context = format!("{round:?} compaction, {fault:?} (status {status:?})");
    scenario.assert_consistent(&context).await;
    scenario.assert_converges(&context).await;
    faulty.has_fired()
}

fn all_faults(n: u64) -> [Fault; 5] {
    [
        Fault::Crash(n),
        Fault::LostResponse(n),
        Fault::Precondition(n),
        Fault::Conflict(n),
        Fault::PartialMultipart(n),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_in_memory_converges() {
    let fresh = open_memory;
    for round in [Round::First, Round::Second] {
        let total = count_ops(&fresh, round).await;
        assert!(total > 10, "a compaction makes more than 10 store calls");
        let mut fired = [0usize; 5];
        for n in 1..=total + 1 {
            for (i, fault) in all_faults(n).into_iter().enumerate() {
                if run_with_fault(&fresh, round, fault).await {
                    fired[i] += 1;
                }
            }
        }
        // Crashes and lost responses fire at every operation; the conditional-write faults
        // and the abandoned upload fire at every N up to their operation.
        assert_eq!(fired[0] as u64, total, "crash fired at every operation");
        assert_eq!(
            fired[1] as u64, total,
            "lost response fired at every operation"
        );
        assert!(fired[2] > 0 && fired[3] > 0 && fired[4] > 0, "{fired:?}");
        eprintln!("{round:?}: {total} store operations; faults fired per variant: {fired:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_crash_points_on_s3_converge() {
    let fresh = || open_s3("crashes");
    let total = count_ops(&fresh, Round::Second).await;
    assert!(total > 10, "a compaction makes more than 10 store calls");
    let mut fired = 0;
    // Every third operation for crashes and lost responses (offset so both together cover
    // every N), the conditional-write faults and the abandoned upload at a few points.
    for n in (1..=total).step_by(3) {
        fired += usize::from(run_with_fault(&fresh, Round::Second, Fault::Crash(n)).await);
        let lost = Fault::LostResponse(n + 1);
        fired += usize::from(run_with_fault(&fresh, Round::Second, lost).await);
    }
    for n in [1, total / 2, total] {
        for fault in [
            Fault::Precondition(n),
            Fault::Conflict(n),
            Fault::PartialMultipart(n),
        ] {
            fired += usize::from(run_with_fault(&fresh, Round::Second, fault).await);
        }
    }
    assert!(fired as u64 >= total / 3 * 2, "faults fired: {fired}");
    // The first compaction of a partition (no manifest yet), crashing every third operation.
    let first_total = count_ops(&fresh, Round::First).await;
    for n in (2..=first_total).step_by(3) {
        run_with_fault(&fresh, Round::First, Fault::Crash(n)).await;
    }
    eprintln!("{total} store operations; {fired} faults fired");
}

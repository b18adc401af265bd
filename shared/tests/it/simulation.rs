//! A deterministic simulation of the commit protocol (crate doc, invariants 1-4, 6 and 11).
//!
//! Three partitions of two tenants, several compactors, GC, late ingest (some of it corrupt)
//! and a reader, interleaved step by step by a seeded scheduler over an in-memory store whose
//! clock is virtual. The real `commit`, `collect_garbage_with` and `live_set` run against that
//! store; a compaction's sort is modelled (its output object records the union of its good
//! inputs' rows, and a corrupt input is quarantined as the real check does), since the protocol
//! never looks inside a file. Jobs read a state and commit it much later (past the grace),
//! crash with their output uploaded, lose commit responses (5xx, 5xx then 412), and every
//! host clock is skewed by up to half the grace. After every step: every ingested row is live
//! exactly once or sits in a quarantined file, no live or quarantined object is ever missing,
//! and no quarantined file is live; once faults stop, every partition converges to one
//! compacted file beside its quarantined ones.
//!
//! `OURIOS_SIM_SEEDS=N` runs N seeds (default 5000); `OURIOS_SIM_SEED=S` replays one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use ourios_compaction::clock::{Clock, Expiry};
use ourios_compaction::manifest::gc::collect_garbage_with;
use ourios_compaction::manifest::{
    CommitOutcome, CommitRequest, CompactedFile, Manifest, QuarantinedFile, commit, live_set,
    load_latest, unpruned_until,
};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    Fault, FaultyStore, HostClock, StoreState, VirtualStore, key as object_key, random_stream,
    run_seeds, sim_seeds,
};

const GRACE: Duration = Duration::from_secs(60);
const GRACE_MS: i64 = 60_000;

/// A compaction between reading its state and committing.
struct Job {
    id: String,
    partition: PartitionId,
    base: Manifest,
    inputs: Vec<String>,
    /// None when every input was bad.
    output: Option<CompactedFile>,
    quarantined: Vec<QuarantinedFile>,
    forget: Vec<String>,
    /// Set when the sort is done and the output (if any) uploaded.
    uploaded: bool,
    /// Half the grace after the upload (a sort may take longer than the grace).
    commit_by: Option<Expiry>,
    /// Half the grace after the state was read: no version after `base` is pruned before.
    unpruned_until: Option<Expiry>,
}

struct Sim {
    seed: u64,
    sim: Arc<StoreState>,
    store: Store,
    layout: KeyLayout,
    partitions: Vec<PartitionId>,
    rows: BTreeMap<String, Vec<u64>>,
    /// Ingest files a compaction finds unreadable.
    corrupt: BTreeSet<String>,
    ingested: BTreeSet<u64>,
    next_row: u64,
    next_file: u64,
    next_job: u64,
    jobs: Vec<Job>,
    random: Box<dyn FnMut() -> u64>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let virtual_store = Arc::new(VirtualStore::default());
        let sim = Arc::clone(&virtual_store.state);
        sim.now_ms
            .store(1_800_000_000_000, std::sync::atomic::Ordering::SeqCst);
        let store = Store::from_object_store(virtual_store, "sim://");
        Self {
            seed,
            sim,
            store,
            layout: KeyLayout::default(),
            partitions: [
                ("acme", "2026-11-29T10"),
                ("acme", "2026-11-29T11"),
                ("beta", "2026-11-29T10"),
            ]
            .iter()
            .map(|(t, h)| PartitionId::parse(t, h).expect("partition"))
            .collect(),
            rows: BTreeMap::new(),
            corrupt: BTreeSet::new(),
            ingested: BTreeSet::new(),
            next_row: 0,
            next_file: 0,
            next_job: 0,
            jobs: Vec::new(),
            random: Box::new(random_stream(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)),
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        (self.random)() % n.max(1)
    }

    fn pick_partition(&mut self) -> PartitionId {
        let i = self.below(self.partitions.len() as u64) as usize;
        self.partitions[i].clone()
    }

    fn clock(&mut self) -> Arc<dyn Clock> {
        let skew_ms = self.below(GRACE_MS as u64 + 1) as i64 - GRACE_MS / 2;
        Arc::new(HostClock {
            store: Arc::clone(&self.sim),
            skew_ms,
            origin_ms: 0,
        })
    }

    fn advance(&self, ms: i64) {
        self.sim
            .now_ms
            .fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }

    async fn put(&self, key: &str) {
        self.store
            .object_store()
            .put(
                &Path::parse(key).expect("key"),
                PutPayload::from_static(b"x"),
            )
            .await
            .expect("sim put");
    }

    async fn ingest(&mut self) {
        let partition = self.pick_partition();
        let n = 1 + self.below(3);
        let rows: Vec<u64> = (self.next_row..self.next_row + n).collect();
        self.next_row += n;
        let key = format!(
            "{}/f{:04}.parquet",
            self.layout.ingest_dir(&partition),
            self.next_file
        );
        self.next_file += 1;
        self.put(&key).await;
        if self.below(8) == 0 {
            self.corrupt.insert(key.clone());
        }
        self.ingested.extend(&rows);
        self.rows.insert(key, rows);
    }

    /// Reads the state as a compaction does; its (modelled) output is the good inputs' rows,
    /// and its corrupt inputs are quarantined.
    async fn start_job(&mut self, partition: PartitionId) {
        let clock = self.clock();
        let unpruned = unpruned_until(&clock, clock.monotonic_ms(), GRACE);
        let base = load_latest(&self.store, &self.layout, &partition)
            .await
            .expect("manifest");
        let dir = self.layout.ingest_dir(&partition);
        let listing = self.store.list_sorted(&dir).await.expect("list");
        let live = live_set(&KeyLayout::default(), &dir, &listing, &base);
        if live.ingest.is_empty() && live.compacted.len() <= 1 {
            return;
        }
        let compacted_listing = self
            .store
            .list_sorted(&self.layout.compacted_dir(&partition))
            .await
            .expect("list");
        let listed: BTreeSet<String> = listing
            .iter()
            .chain(&compacted_listing)
            .map(|m| m.location.to_string())
            .collect();
        let (bad, inputs): (Vec<String>, Vec<String>) = live
            .keys()
            .iter()
            .map(ToString::to_string)
            .partition(|k| self.corrupt.contains(k));
        let mut rows = Vec::new();
        for key in inputs.iter().chain(&bad) {
            if !self.sim.keys().contains(key) {
                panic!("seed {}: live input {key} cannot be read", self.seed);
            }
        }
        for key in &inputs {
            match self.rows.get(key) {
                Some(r) if self.sim.keys().contains(key) => rows.extend(r.iter().copied()),
                _ => panic!("seed {}: live input {key} cannot be read", self.seed),
            }
        }
        let id = format!("job{:04}", self.next_job);
        self.next_job += 1;
        let set = inputs.join("|");
        let key = format!(
            "{}/part-{:016x}-{id}.parquet",
            self.layout.compacted_dir(&partition),
            fxhash(&set)
        );
        let output = (!inputs.is_empty()).then(|| CompactedFile {
            key: object_key(&key),
            rows: rows.len() as u64,
            bytes: 1,
            input_set: format!("{:016x}", fxhash(&set)),
            range: None,
        });
        self.rows.insert(key, rows);
        self.jobs.push(Job {
            id,
            partition,
            quarantined: bad
                .into_iter()
                .map(|key| QuarantinedFile {
                    key: object_key(&key),
                    reason: "corrupt".to_string(),
                })
                .collect(),
            forget: base
                .retired
                .iter()
                .filter(|r| !listed.contains(r.key.as_str()))
                .map(|r| r.key.to_string())
                .collect(),
            base,
            inputs,
            output,
            uploaded: false,
            commit_by: None,
            unpruned_until: unpruned,
        });
    }

    /// A job finishes sorting and uploads its output.
    async fn upload(&mut self) {
        let waiting: Vec<usize> = (0..self.jobs.len())
            .filter(|i| !self.jobs[*i].uploaded)
            .collect();
        if waiting.is_empty() {
            return;
        }
        let i = waiting[self.below(waiting.len() as u64) as usize];
        let clock = self.clock();
        self.jobs[i].uploaded = true;
        if let Some(output) = self.jobs[i].output.clone() {
            self.put(&output.key).await;
            self.jobs[i].commit_by = Some(Expiry::after(&clock, GRACE / 2));
        }
    }

    /// Commits one waiting job, maybe losing the response of its write.
    async fn commit_job(&mut self, faults: bool) {
        let uploaded: Vec<usize> = (0..self.jobs.len())
            .filter(|i| self.jobs[*i].uploaded)
            .collect();
        if uploaded.is_empty() {
            return;
        }
        let i = uploaded[self.below(uploaded.len() as u64) as usize];
        let job = self.jobs.remove(i);
        let fault = match (faults, self.below(6)) {
            (true, 0) => Some(Fault::LostResponse(1)),
            (true, 1) => Some(Fault::RetriedIntoPrecondition(1)),
            (true, 2) => Some(Fault::Precondition(1)),
            _ => None,
        };
        let store = match fault {
            Some(f) => Store::from_object_store(
                Arc::new(FaultyStore::new(
                    Arc::clone(self.store.object_store()),
                    Some(f),
                )),
                "faulty",
            ),
            None => self.store.clone(),
        };
        let clock = self.clock();
        let request = CommitRequest {
            inputs: job.inputs.iter().map(|k| object_key(k)).collect(),
            outputs: job.output.clone().into_iter().collect(),
            quarantined: job.quarantined.clone(),
            released: Vec::new(),
            forget: job.forget.iter().map(|k| object_key(k)).collect(),
            ingested_bytes: 1,
            attempt_id: job.id.clone(),
            now_ms: clock.now_ms(),
            commit_by: job.commit_by.clone(),
            unpruned_until: job.unpruned_until.clone(),
        };
        let outcome = commit(&store, &self.layout, &job.partition, &job.base, &request).await;
        let Some(output) = &job.output else {
            return;
        };
        let delete_own = match outcome {
            Ok(CommitOutcome::Committed(_)) => false,
            Ok(CommitOutcome::AlreadyCommitted(m) | CommitOutcome::Conflict { current: m, .. }) => {
                !m.references(&output.key)
            }
            // Too old to commit: nothing of ours was committed.
            Err(ourios_compaction::Error::Deadline { .. }) => true,
            // Unknown (a lost response the commit could not resolve): GC sweeps it.
            Err(_) => false,
        };
        if delete_own {
            self.store
                .object_store()
                .delete(&Path::parse(&output.key).expect("key"))
                .await
                .expect("delete");
        }
    }

    async fn gc(&mut self, partition: &PartitionId) {
        let clock = self.clock();
        collect_garbage_with(&self.store, &self.layout, partition, GRACE, false, &clock)
            .await
            .expect("gc");
    }

    /// Every ingested row is live exactly once or sits in a quarantined file, every live or
    /// quarantined key exists, and no quarantined file is live.
    async fn check(&self, step: usize) {
        let replay = format!(
            "replay with OURIOS_SIM_SEED={} cargo test --profile quick -p ourios-compaction --test it simulation::",
            self.seed
        );
        let present = self.sim.keys();
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        for partition in &self.partitions {
            let manifest = load_latest(&self.store, &self.layout, partition)
                .await
                .expect("manifest");
            let dir = self.layout.ingest_dir(partition);
            let listing = self.store.list_sorted(&dir).await.expect("list");
            let live: Vec<String> = (live_set(&KeyLayout::default(), &dir, &listing, &manifest)
                .keys()
                .iter())
            .map(ToString::to_string)
            .collect();
            let quarantined: Vec<String> = manifest
                .quarantined
                .iter()
                .map(|q| q.key.to_string())
                .collect();
            for key in live.iter().chain(&quarantined) {
                assert!(
                    present.contains(key),
                    "seed {} step {step}: live or quarantined object {key} was deleted; {replay}",
                    self.seed,
                );
                for row in &self.rows[key] {
                    *counts.entry(*row).or_default() += 1;
                }
            }
            for key in &quarantined {
                assert!(
                    self.corrupt.contains(key) && !live.contains(key),
                    "seed {} step {step}: {key} is quarantined but good or live; {replay}",
                    self.seed,
                );
            }
        }
        let wrong: Vec<_> = self
            .ingested
            .iter()
            .map(|r| (*r, counts.get(r).copied().unwrap_or(0)))
            .filter(|(_, n)| *n != 1)
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "seed {} step {step}: rows not live or quarantined exactly once (row, times) \
             {wrong:?}; {replay}",
            self.seed,
        );
    }

    async fn run(mut self) {
        for step in 0..60 {
            match self.below(13) {
                0..=2 => self.ingest().await,
                3..=4 => {
                    let partition = self.pick_partition();
                    self.start_job(partition).await;
                }
                5..=6 => self.commit_job(true).await,
                7 => {
                    let partition = self.pick_partition();
                    self.gc(&partition).await;
                }
                12 => self.upload().await,
                // A crash: the job's uploaded output is left behind.
                8 if !self.jobs.is_empty() => {
                    let i = self.below(self.jobs.len() as u64) as usize;
                    self.jobs.remove(i);
                }
                // A long pause: jobs outlive the grace.
                9 => {
                    let pause = GRACE_MS + self.below(GRACE_MS as u64) as i64;
                    self.advance(pause);
                }
                _ => {
                    let pause = self.below(GRACE_MS as u64 / 4) as i64;
                    self.advance(pause);
                }
            }
            self.check(step).await;
        }
        // Faults stop; the stragglers commit or give up, and a clean run converges.
        while !self.jobs.is_empty() {
            self.upload().await;
            self.commit_job(false).await;
            self.check(1000).await;
        }
        for partition in self.partitions.clone() {
            self.start_job(partition).await;
            while !self.jobs.is_empty() {
                self.upload().await;
                self.commit_job(false).await;
            }
            self.check(1001).await;
        }
        for _ in 0..2 {
            self.advance(GRACE_MS + 1);
            for partition in self.partitions.clone() {
                self.gc(&partition).await;
            }
        }
        self.check(1002).await;
        for partition in &self.partitions {
            self.check_converged(partition).await;
        }
    }

    /// One compacted file (when any good row landed) and no ingest file but the quarantined.
    async fn check_converged(&self, partition: &PartitionId) {
        let manifest = load_latest(&self.store, &self.layout, partition)
            .await
            .expect("manifest");
        let keys = self.sim.keys();
        let compacted_dir = format!("{}/", self.layout.compacted_dir(partition));
        let ingest_dir = format!("{}/", self.layout.ingest_dir(partition));
        let compacted: Vec<&String> = keys
            .iter()
            .filter(|k| k.starts_with(&compacted_dir))
            .collect();
        let ingest_left: BTreeSet<&str> = (keys.iter())
            .filter(|k| k.starts_with(&ingest_dir))
            .map(String::as_str)
            .collect();
        let quarantined: BTreeSet<&str> = manifest
            .quarantined
            .iter()
            .map(|q| q.key.as_str())
            .collect();
        let good_rows = self
            .rows
            .iter()
            .any(|(k, r)| k.starts_with(&ingest_dir) && !self.corrupt.contains(k) && !r.is_empty());
        let expected = usize::from(good_rows);
        assert!(
            manifest.compacted.len() == expected
                && compacted.len() == expected
                && ingest_left == quarantined,
            "seed {}: {partition} converges to {expected} compacted file(s) beside its quarantined \
             ones: {compacted:?} {ingest_left:?} {quarantined:?}; replay with OURIOS_SIM_SEED={} \
             cargo test --profile quick -p ourios-compaction --test it simulation::",
            self.seed,
            self.seed
        );
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn the_commit_protocol_survives_seeded_interleavings() {
    run_seeds(&sim_seeds(5000), |seed| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(Sim::new(seed).run());
    });
}

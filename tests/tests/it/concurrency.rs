//! Concurrent compactors on one partition of the S3 test server, as separate processes of the
//! release CLI, while ingest files keep landing (invariants 1, 2 and 5).
//!
//! Each round starts four `ourios-compact compact --store s3://… --json` processes at once.
//! Afterwards, and at sampled instants while they run, the live files hold every landed row
//! exactly once (rows that land during a sample may or may not be seen, but never twice).
//! Every process ends `compacted`, `noop` or `conflict`; each winner wrote exactly one manifest
//! version and every new version has a winner. In the last round nothing lands while the
//! processes run, so they all read the same state: exactly one wins.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ourios_compaction::manifest::{list_versions, load_latest};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::store::Store;
use ourios_integration_tests::{
    assert_live_exactly_once, cli_bin, file_tags, land_file, live_set, s3_url, test_partition,
};

const NUM_COMPACTORS: usize = 4;
const NUM_ROUNDS: usize = 6;
const ROWS_PER_FILE: i64 = 400;

/// Tags of files whose upload has completed.
type Landed = Arc<Mutex<BTreeSet<i64>>>;

struct Partition {
    url: String,
    store: Store,
    layout: KeyLayout,
    id: PartitionId,
    landed: Landed,
}

impl Partition {
    async fn land(&self, index: i64) {
        let name = format!("ingest-{index:05}.parquet");
        let tags = land_file(
            &self.store,
            &self.layout,
            &self.id,
            &name,
            index * 10_000,
            ROWS_PER_FILE,
        )
        .await;
        self.landed.lock().expect("landed lock").extend(tags);
    }

    fn landed(&self) -> BTreeSet<i64> {
        self.landed.lock().expect("landed lock").clone()
    }

    /// Reads every live file now: no row twice, every row landed before the read is there.
    async fn sample(&self, context: &str) {
        let before = self.landed();
        let files = live_set(&self.store, &self.layout, &self.id).await;
        let mut tags = Vec::new();
        for key in &files.live {
            tags.extend(file_tags(&self.store, key).await);
        }
        let after = self.landed();
        let seen: BTreeSet<i64> = tags.iter().copied().collect();
        assert_eq!(seen.len(), tags.len(), "{context}: a row is live twice");
        let missing: Vec<&i64> = before.difference(&seen).take(5).collect();
        assert!(missing.is_empty(), "{context}: rows missing: {missing:?}");
        let unknown: Vec<&i64> = seen.difference(&after).take(5).collect();
        assert!(unknown.is_empty(), "{context}: unknown rows: {unknown:?}");
    }

    /// Starts one compactor process.
    fn spawn_compactor(&self) -> tokio::process::Child {
        tokio::process::Command::new(cli_bin())
            .args([
                "compact",
                "--store",
                &self.url,
                "--tenant",
                self.id.tenant().expect("a tenant"),
                "--hour",
                &self.id.hour_label(),
                "--memory-budget",
                "256KiB",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the CLI starts")
    }
}

#[derive(Debug)]
struct Outcome {
    status: String,
    job_id: String,
}

async fn finish(child: tokio::process::Child) -> Outcome {
    let output = child.wait_with_output().await.expect("the CLI runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let status = report["status"].as_str().unwrap_or_default().to_string();
    assert!(
        matches!(status.as_str(), "compacted" | "noop" | "conflict"),
        "a compactor ends compacted, noop or conflict: {report}"
    );
    Outcome {
        status,
        job_id: report["job_id"].as_str().unwrap_or_default().to_string(),
    }
}

/// Runs one round of compactors, sampling the live set while they run; returns the
/// outcomes and checks them against the manifest versions the round created.
async fn round(partition: &Partition, name: &str) -> Vec<Outcome> {
    let first_new = load_latest(&partition.store, &partition.layout, &partition.id)
        .await
        .expect("latest")
        .version
        + 1;
    let children: Vec<_> = (0..NUM_COMPACTORS)
        .map(|_| partition.spawn_compactor())
        .collect();
    partition.sample(&format!("{name}, while running")).await;
    let mut outcomes = Vec::new();
    for child in children {
        outcomes.push(finish(child).await);
    }
    partition.sample(&format!("{name}, after")).await;

    let versions = list_versions(&partition.store, &partition.layout, &partition.id)
        .await
        .expect("versions");
    let mut writers = BTreeSet::new();
    for v in versions.iter().filter(|v| **v >= first_new) {
        let key = partition.layout.manifest_key(&partition.id, *v);
        let bytes = ourios_compaction::testing::get_bytes(&partition.store, key.as_ref()).await;
        let manifest = ourios_compaction::manifest::Manifest::decode(key.as_ref(), &bytes)
            .expect("a manifest");
        assert!(
            writers.insert(manifest.attempt_id.clone()),
            "{name}: one job wrote two versions"
        );
    }
    let winners: BTreeSet<String> = outcomes
        .iter()
        .filter(|o| o.status == "compacted")
        .map(|o| o.job_id.clone())
        .collect();
    assert_eq!(
        winners, writers,
        "{name}: the winners are exactly the jobs that wrote the new manifest versions ({outcomes:?})"
    );
    assert!(
        !winners.is_empty(),
        "{name}: a round that starts with work has a winner"
    );
    let statuses: Vec<&str> = outcomes.iter().map(|o| o.status.as_str()).collect();
    eprintln!(
        "{name}: {statuses:?}, {} rows landed",
        partition.landed().len()
    );
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_compactors_keep_every_row_exactly_once() {
    let url = s3_url("concurrency");
    let partition = Arc::new(Partition {
        store: Store::open(&url).expect("store"),
        url,
        layout: KeyLayout::default(),
        id: test_partition(),
        landed: Arc::default(),
    });
    for i in 0..4 {
        partition.land(i).await;
    }

    // Ingest keeps landing in the background through the rounds.
    let stop = Arc::new(AtomicBool::new(false));
    let next_index = Arc::new(Mutex::new(4i64));
    let lander = {
        let partition = Arc::clone(&partition);
        let stop = Arc::clone(&stop);
        let next_index = Arc::clone(&next_index);
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let index = {
                    let mut next = next_index.lock().expect("index lock");
                    *next += 1;
                    *next - 1
                };
                partition.land(index).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // A reader samples the live set continuously, whatever the compactors are doing.
    let sampler = {
        let partition = Arc::clone(&partition);
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut num_samples = 0usize;
            while !stop.load(Ordering::SeqCst) {
                partition
                    .sample(&format!("background sample {num_samples}"))
                    .await;
                num_samples += 1;
            }
            num_samples
        })
    };

    for r in 0..NUM_ROUNDS {
        // At least one file lands before every round, so every round has work.
        let index = {
            let mut next = next_index.lock().expect("index lock");
            *next += 1;
            *next - 1
        };
        partition.land(index).await;
        round(&partition, &format!("round {r}")).await;
    }
    stop.store(true, Ordering::SeqCst);
    lander.await.expect("the lander stops");
    let num_samples = sampler.await.expect("every background sample holds");
    eprintln!("{num_samples} background samples");

    // Nothing lands now: all compactors read the same state and exactly one wins.
    let index = *next_index.lock().expect("index lock");
    partition.land(index).await;
    let outcomes = round(&partition, "quiet round").await;
    let num_winners = outcomes.iter().filter(|o| o.status == "compacted").count();
    assert_eq!(num_winners, 1, "exactly one commit wins: {outcomes:?}");

    let (store, layout) = (&partition.store, &partition.layout);
    let landed = partition.landed();
    assert_live_exactly_once(store, layout, &partition.id, 1, &landed, "after all rounds").await;
}

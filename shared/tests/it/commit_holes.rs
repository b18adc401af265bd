//! Regression tests of the commit protocol's known interleavings (crate doc, invariants 1, 3
//! and 8): each one lost or duplicated rows before it was closed.

use std::collections::BTreeMap;
use std::path::Path as FsPath;
use std::time::Duration;

use arrow_array::{Array, Int64Array};
use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::gc::collect_garbage;
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use std::sync::Arc;

use ourios_compaction::manifest::{
    CommitOutcome, CommitRequest, CompactedFile, Manifest, commit, load_latest,
};
use ourios_compaction::serverless::dispatch::job_lifecycle::RecordAction;
use ourios_compaction::testing;
use ourios_compaction::testing::small_budget_options as options;
use ourios_compaction::testing::test_partition as partition;
use ourios_compaction::testing::{
    Fault, FaultyStore, ManualClock, assert_conflict, compact_expecting, live_set, parquet_bytes,
    put_bytes, read_parquet, rows_batch, run_job,
};

/// Parquet bytes of `num_rows` rows tagged `first_tag..`, inside the test partition's hour.
fn ingest_bytes(first_tag: i64, num_rows: i64) -> bytes::Bytes {
    let (start, end) = partition().time_range_nanos();
    let rows: Vec<_> = (first_tag..first_tag + num_rows)
        .map(|tag| {
            let time = start + (tag.wrapping_mul(7_919_000_003)).rem_euclid(end - start);
            (Some(format!("svc-{}", tag % 3)), time, tag)
        })
        .collect();
    parquet_bytes(&[rows_batch(&rows)], 64)
}

/// A local store rooted in a fresh temporary directory (kept alive by the returned guard), and
/// the default layout.
fn local_store() -> (tempfile::TempDir, Store, KeyLayout) {
    let root = tempfile::tempdir().expect("store root");
    let store = Store::open(&root.path().to_string_lossy()).expect("local store");
    (root, store, KeyLayout::default())
}

/// Writes an ingest file straight onto the local store's disk, named exactly `name`.
fn land_on_disk(root: &FsPath, layout: &KeyLayout, name: &str, first_tag: i64, num_rows: i64) {
    let dir = root.join(layout.ingest_dir(&partition()).as_ref());
    std::fs::create_dir_all(&dir).expect("partition directory");
    std::fs::write(dir.join(name), ingest_bytes(first_tag, num_rows)).expect("ingest file");
}

/// How many times each tag is live.
async fn live_tag_counts(store: &Store, layout: &KeyLayout) -> BTreeMap<i64, usize> {
    let files = live_set(store, layout, &partition()).await;
    let mut counts = BTreeMap::new();
    for key in &files.live {
        for batch in read_parquet(store, key).await {
            let tags = batch
                .column_by_name("tag")
                .expect("a tag column")
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("Int64 tags")
                .clone();
            for i in 0..tags.len() {
                *counts.entry(tags.value(i)).or_default() += 1;
            }
        }
    }
    counts
}

fn assert_each_once(counts: &BTreeMap<i64, usize>, expected: std::ops::Range<i64>, context: &str) {
    let wrong: Vec<(i64, usize)> = expected
        .clone()
        .map(|t| (t, counts.get(&t).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 1)
        .take(5)
        .collect();
    assert!(
        wrong.is_empty() && counts.len() == expected.count(),
        "{context}: tags not live exactly once (tag, times): {wrong:?}"
    );
}

/// The reproduction, on a local directory store: `a~b.parquet` is compacted and
/// retired; `a%7Eb.parquet` (what `Path::from` turns `a~b.parquet` into) lands later. GC with
/// no grace must delete the retired `a~b.parquet`, never the live `a%7Eb.parquet`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole1_a_key_that_encoding_would_change_is_never_confused_with_another() {
    let (root, store, layout) = local_store();
    let scratch = tempfile::tempdir().expect("scratch");
    land_on_disk(root.path(), &layout, "a~b.parquet", 0, 1000);

    let opts = options(scratch.path());
    compact_expecting(&store, &layout, &partition(), &opts, Status::Compacted).await;

    land_on_disk(root.path(), &layout, "a%7Eb.parquet", 1000, 1000);
    assert_each_once(
        &live_tag_counts(&store, &layout).await,
        0..2000,
        "after the late file",
    );

    collect_garbage(&store, &layout, &partition(), Duration::ZERO, false)
        .await
        .expect("gc runs");
    let dir = root.path().join(layout.ingest_dir(&partition()).as_ref());
    assert!(
        dir.join("a%7Eb.parquet").exists(),
        "the live late file is kept"
    );
    assert!(
        !dir.join("a~b.parquet").exists(),
        "the retired file is the one deleted"
    );
    assert_each_once(&live_tag_counts(&store, &layout).await, 0..2000, "after gc");

    // The next compaction reads the late file as itself, and GC then removes it.
    let opts = options(scratch.path());
    compact_expecting(&store, &layout, &partition(), &opts, Status::Compacted).await;
    collect_garbage(&store, &layout, &partition(), Duration::ZERO, false)
        .await
        .expect("gc runs");
    assert!(!dir.join("a%7Eb.parquet").exists(), "retired, then deleted");
    assert_each_once(
        &live_tag_counts(&store, &layout).await,
        0..2000,
        "after the second compaction",
    );
}

fn commit_request(job: &str, inputs: &[&str], output: &str, forget: &[&str]) -> CommitRequest {
    CommitRequest {
        inputs: inputs.iter().map(|k| testing::key(k)).collect(),
        outputs: vec![CompactedFile {
            key: testing::key(output),
            rows: 1,
            bytes: 1,
            input_set: format!("set-of-{job}"),
            range: None,
        }],
        quarantined: Vec::new(),
        released: Vec::new(),
        forget: forget.iter().map(|k| testing::key(k)).collect(),
        ingested_bytes: 1,
        attempt_id: job.to_string(),
        now_ms: 0,
        commit_by: None,
        unpruned_until: None,
    }
}

/// A slow job read version 0 and listed `x` live. Meanwhile B retired `x` (v1), GC deleted
/// it, and C forgot it (v2). The slow job's commit must end `conflict`: retiring `x` again
/// would make its rows live twice (in C's output and in the slow job's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole2_a_commit_based_before_a_forgetting_conflicts() {
    let store = Store::open("memory://").expect("memory store");
    let layout = KeyLayout::default();
    let p = partition();
    let dir = layout.ingest_dir(&p);
    let out = layout.compacted_dir(&p);
    let x = format!("{dir}/x.parquet");
    let y = format!("{dir}/y.parquet");
    let base = Manifest::empty(&p.relative_dir());
    let b = commit_request("b", &[&x], &format!("{out}/b.parquet"), &[]);
    let v1 = match commit(&store, &layout, &p, &base, &b).await.expect("b") {
        CommitOutcome::Committed(m) => m,
        other => panic!("{other:?}"),
    };
    let c = commit_request(
        "c",
        &[&format!("{out}/b.parquet"), &y],
        &format!("{out}/c.parquet"),
        &[&x],
    );
    let v2 = match commit(&store, &layout, &p, &v1, &c).await.expect("c") {
        CommitOutcome::Committed(m) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(v2.forgotten_in, 2);
    let slow = commit_request("slow", &[&x], &format!("{out}/slow.parquet"), &[]);
    let outcome = commit(&store, &layout, &p, &base, &slow)
        .await
        .expect("slow");
    assert_conflict(&outcome, "a commit based before the forgetting conflicts");
    assert_eq!(
        load_latest(&store, &layout, &p)
            .await
            .expect("latest")
            .version,
        2
    );
}

async fn land_two_files(store: &Store, layout: &KeyLayout) {
    for (i, name) in ["f1.parquet", "f2.parquet"].iter().enumerate() {
        let key = format!("{}/{name}", layout.ingest_dir(&partition()));
        put_bytes(store, &key, ingest_bytes(i as i64 * 1000, 300)).await;
    }
}

/// A fresh memory store with two ingest files of 300 rows in the partition, and the layout.
async fn memory_with_two_files() -> (Store, KeyLayout) {
    let store = Store::open("memory://").expect("memory store");
    let layout = KeyLayout::default();
    land_two_files(&store, &layout).await;
    (store, layout)
}

/// Two attempts at the same input set write different keys (an upload can never land on
/// an object a GC listed earlier as an orphan) and record the same input-set hash, which is
/// what makes a rerun of a committed input set a `noop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole3_each_attempt_writes_its_own_output_key() {
    let layout = KeyLayout::default();
    let scratch = tempfile::tempdir().expect("scratch");
    let mut outputs = Vec::new();
    for _ in 0..2 {
        let store = Store::open("memory://").expect("memory store");
        land_two_files(&store, &layout).await;
        let opts = options(scratch.path());
        let report =
            compact_expecting(&store, &layout, &partition(), &opts, Status::Compacted).await;
        let latest = load_latest(&store, &layout, &partition())
            .await
            .expect("latest");
        outputs.push((
            report.output.expect("output").key,
            latest.compacted[0].input_set.clone(),
        ));
    }
    assert_ne!(outputs[0].0, outputs[1].0, "each attempt has its own key");
    assert_eq!(outputs[0].1, outputs[1].1, "the same input set");
    assert!(!outputs[0].1.is_empty());
}

/// The committer's clock says 1970: the grace still runs from the commit on the store's
/// clock, so GC with a 15-minute grace deletes no input that was just retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole3_the_grace_is_measured_on_the_store_clock() {
    let (store, layout) = memory_with_two_files().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let mut o = options(scratch.path());
    o.clock = ManualClock::at(0);
    compact_expecting(&store, &layout, &partition(), &o, Status::Compacted).await;
    let gc = collect_garbage(
        &store,
        &layout,
        &partition(),
        Duration::from_secs(900),
        false,
    )
    .await
    .expect("gc runs");
    assert!(gc.plan.retired.is_empty(), "{gc:?}");
    let listed = store
        .list_sorted(&layout.ingest_dir(&partition()))
        .await
        .expect("listing");
    assert_eq!(listed.len(), 2, "both retired inputs wait for the grace");
}

/// The commit's PUT lands, its response is lost (5xx), and the client's retry meets 412:
/// the job committed, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole6_a_lost_commit_response_then_412_reports_compacted() {
    let (store, layout) = memory_with_two_files().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let faulty = Arc::new(FaultyStore::new(
        Arc::clone(store.object_store()),
        Some(Fault::RetriedIntoPrecondition(1)),
    ));
    let report = compact_partition(
        &Store::from_object_store(faulty.clone(), "faulty"),
        &layout,
        &partition(),
        &options(scratch.path()),
    )
    .await
    .expect("compaction runs");
    assert!(faulty.has_fired());
    assert_eq!(report.status, Status::Compacted, "{report:?}");
    assert_eq!(report.manifest_version, 1);
    let counts = live_tag_counts(&store, &layout).await;
    assert_eq!(counts.len(), 600, "both files' rows");
    assert!(counts.values().all(|n| *n == 1), "each once");
}

/// Files keep landing in an open hour: a finished job does not re-arm its record below the
/// planner's thresholds (the next event or the sweep dispatches it when ready), and the
/// report carries the partition's write amplification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole5_an_open_hour_is_re_armed_only_by_readiness() {
    let inner: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
    let layout = KeyLayout::default();
    land_two_files(&plain, &layout).await;
    let late_store = plain.clone();
    let late_key = format!("{}/late.parquet", layout.ingest_dir(&partition()));
    let hook = async move { put_bytes(&late_store, &late_key, ingest_bytes(5000, 10)).await };
    let hooked = Arc::new(FaultyStore::new(Arc::clone(&inner), None).with_hook_before_upload(hook));
    let store = Store::from_object_store(hooked, "hooked");
    let scratch = tempfile::tempdir().expect("scratch");
    let mut o = options(scratch.path());
    // Half past the hour: open, and one late file is far below the pressure thresholds.
    let half_past = partition().hour_start().timestamp_millis() + 30 * 60 * 1000;
    o.clock = ManualClock::at(half_past);
    let outcome = run_job(&store, &partition(), &o).await;
    assert_eq!(outcome.report.status, Status::Compacted);
    assert_eq!(
        outcome.record,
        RecordAction::Deleted,
        "not re-armed in an open hour"
    );
    let wa = outcome.report.write_amplification;
    let latest = load_latest(&plain, &layout, &partition())
        .await
        .expect("latest");
    assert!(wa > 0.0, "{wa}");
    assert_eq!(
        wa,
        latest.written_bytes as f64 / latest.ingested_bytes as f64
    );
    assert!(latest.ingested_bytes > 0);
}

/// A foreign key the object store cannot address (a control character) sits in a partition
/// of a local store: it is reported and skipped, left untouched, and the partition's files
/// compact and read as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole4_a_foreign_key_is_skipped_not_fatal() {
    let (root, store, layout) = local_store();
    let scratch = tempfile::tempdir().expect("scratch");
    land_on_disk(root.path(), &layout, "good.parquet", 0, 100);
    land_on_disk(root.path(), &layout, "bad\u{1}name.parquet", 1000, 100);
    let files = live_set(&store, &layout, &partition()).await;
    assert_eq!(files.live.len(), 1, "{files:?}");
    let opts = options(scratch.path());
    compact_expecting(&store, &layout, &partition(), &opts, Status::Compacted).await;
    collect_garbage(&store, &layout, &partition(), Duration::ZERO, false)
        .await
        .expect("gc runs");
    let dir = root.path().join(layout.ingest_dir(&partition()).as_ref());
    assert!(dir.join("bad\u{1}name.parquet").exists(), "left untouched");
    assert_each_once(&live_tag_counts(&store, &layout).await, 0..100, "after gc");
}

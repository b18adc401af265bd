//! Incomplete multipart uploads killed attempts leave behind, on the S3 test server
//! (invariant 4): a compactor job aborts its own earlier function attempts' once they are
//! older than the grace on the store's clock, never another job's nor a local attempt's; GC
//! aborts what is left once old enough. How old is old enough is checked on the rules
//! themselves (`job_lifecycle` and `manifest::gc` unit tests): moto, the S3 test server here,
//! dates every upload 2010-11-10.

use std::collections::BTreeSet;
use std::time::Duration;

use ourios_compaction::manifest::gc::collect_garbage;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use ourios_compaction::store::raw_s3::IncompleteUpload;
use ourios_integration_tests::{
    assert_exactly_once, dispatch_at, land_files, live_tags, open_s3, run_job, test_hour_closed,
    test_partition,
};

const HASH: &str = "0123456789abcdef01234567";

/// Starts an incomplete upload of `name` in the test partition's compacted directory.
async fn killed_upload(store: &Store, name: &str) -> IncompleteUpload {
    let raw = store.raw_s3().expect("the S3 test store has raw S3 access");
    let dir = KeyLayout::default().compacted_dir(&test_partition());
    raw.start_incomplete_upload(&format!("{dir}/{name}"))
        .await
        .expect("an upload starts")
}

/// The ids of the incomplete uploads left in the test partition's compacted directory.
async fn uploads_left(store: &Store) -> Vec<String> {
    let raw = store.raw_s3().expect("the S3 test store has raw S3 access");
    let dir = KeyLayout::default().compacted_dir(&test_partition());
    let mut ids: Vec<String> = (raw.incomplete_uploads(&format!("{dir}/")).await)
        .expect("uploads list")
        .into_iter()
        .map(|u| u.upload_id)
        .collect();
    ids.sort();
    ids
}

fn ids(uploads: &[&IncompleteUpload]) -> Vec<String> {
    let mut ids: Vec<String> = uploads.iter().map(|u| u.upload_id.clone()).collect();
    ids.sort();
    ids
}

/// A dispatched job on a store holding 300-row files; its id and the files' tags.
async fn dispatched(store: &Store) -> (String, BTreeSet<i64>) {
    let (layout, partition) = (KeyLayout::default(), test_partition());
    let tags = land_files(store, &layout, &partition, 2, 300).await;
    let dispatched = dispatch_at(store, &partition, test_hour_closed()).await;
    (dispatched.job_id.expect("a job record was written"), tags)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_aborts_its_earlier_attempts_uploads_once_older_than_the_grace_only() {
    let store = open_s3("uploads");
    let (layout, partition) = (KeyLayout::default(), test_partition());
    let (job, tags) = dispatched(&store).await;

    // An earlier function attempt of this job, a local attempt of it (the CLI's
    // `backfill --run-local`) and another job's upload.
    let killed = killed_upload(&store, &format!("part-{HASH}-{job}-0badf00d.parquet")).await;
    killed_upload(&store, &format!("part-{HASH}-{job}-local0badf00d.parquet")).await;
    killed_upload(&store, &format!("part-{HASH}-{job}0-1234abcd.parquet")).await;
    assert_eq!(uploads_left(&store).await.len(), 3);

    // Older than the grace (here none): only this job's function attempt is aborted.
    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = Duration::ZERO;
    let outcome = run_job(&store, &partition, &options).await;
    assert_eq!(
        outcome.report.status,
        Status::Compacted,
        "{:?}",
        outcome.report
    );
    assert_eq!(outcome.aborted_uploads, 1);
    let output = outcome
        .report
        .output
        .as_ref()
        .expect("an output")
        .key
        .clone();
    assert!(output.contains(&format!("-{job}-")), "{output}");
    // The job aborted one: its own function attempt's (GC, which ran after it with no grace,
    // may sweep the others as a day old: moto dates every upload 2010-11-10).
    assert!(!uploads_left(&store).await.contains(&killed.upload_id));
    assert_exactly_once(&live_tags(&store, &layout, &partition).await, &tags, "live");
}

/// GC aborts a killed function attempt's upload once initiated longer ago than the grace
/// (here none); a dry run aborts nothing. (How old each kind of upload must be is checked on
/// the rule itself, `manifest::gc`'s tests: the S3 test server may date every upload alike.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_aborts_a_killed_attempts_upload_once_older_than_the_grace() {
    let store = open_s3("uploads-gc");
    let (layout, partition) = (KeyLayout::default(), test_partition());
    let job = "00c0ffee00c0ffee";
    let killed = killed_upload(&store, &format!("part-{HASH}-{job}-0badf00d.parquet")).await;
    let dry = collect_garbage(&store, &layout, &partition, Duration::ZERO, true)
        .await
        .expect("GC runs");
    assert_eq!(dry.aborted_uploads, 0, "a dry run aborts nothing");
    assert_eq!(uploads_left(&store).await, ids(&[&killed]));

    let swept = collect_garbage(&store, &layout, &partition, Duration::ZERO, false)
        .await
        .expect("GC runs");
    assert_eq!(swept.aborted_uploads, 1, "{swept:?}");
    assert!(uploads_left(&store).await.is_empty());
}

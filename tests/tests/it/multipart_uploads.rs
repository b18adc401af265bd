//! A compactor job aborts the incomplete multipart uploads a killed earlier attempt of the same
//! job left behind, and never another job's (which may be live), on the S3 test server.
//! invariant 4.

use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::Status;
use ourios_integration_tests::{
    assert_exactly_once, dispatch_at, land_files, live_tags, open_s3, run_job, test_hour_closed,
    test_partition,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_aborts_its_earlier_attempts_uploads_and_no_other_jobs() {
    let store = open_s3("uploads");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let tags = land_files(&store, &layout, &partition, 2, 300).await;
    let dispatched = dispatch_at(&store, &partition, test_hour_closed()).await;
    let job = dispatched.job_id.expect("a job record was written");

    // A killed attempt of this job, and a live upload of another job.
    let raw = store.raw_s3().expect("the S3 test store has raw S3 access");
    let dir = layout.compacted_dir(&partition);
    let hash = "0123456789abcdef01234567";
    let killed = raw
        .start_incomplete_upload(&format!("{dir}/part-{hash}-{job}-0badf00d.parquet"))
        .await
        .expect("an upload starts");
    let other = raw
        .start_incomplete_upload(&format!("{dir}/part-{hash}-{job}0-1234abcd.parquet"))
        .await
        .expect("an upload starts");
    let listed = raw
        .incomplete_uploads(&format!("{dir}/"))
        .await
        .expect("uploads list");
    assert_eq!(listed.len(), 2, "{listed:?}");

    let scratch = tempfile::tempdir().expect("scratch");
    let outcome = run_job(&store, &partition, &CompactOptions::new(scratch.path())).await;
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

    let left = raw
        .incomplete_uploads(&format!("{dir}/"))
        .await
        .expect("uploads list");
    assert_eq!(left, [other], "only the other job's upload is left");
    assert!(!left.contains(&killed));
    assert_exactly_once(&live_tags(&store, &layout, &partition).await, &tags, "live");
}

//! A compactor job aborts the incomplete multipart uploads a killed earlier attempt of the same
//! job left behind, and never another job's (which may be live), on the S3 test server.
//! invariant 4.

use chrono::TimeZone;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::Status;
use ourios_compaction::serverless::dispatch::job_lifecycle::run_compaction_job;
use ourios_compaction::serverless::dispatch::{DispatchMode, dispatch_partition};
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_integration_tests::{
    assert_exactly_once, land_files, live_tags, open_s3, test_partition,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_aborts_its_earlier_attempts_uploads_and_no_other_jobs() {
    let store = open_s3("uploads");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let tags = land_files(&store, &layout, &partition, 2, 300).await;
    let now = chrono::Utc
        .with_ymd_and_hms(2026, 11, 29, 12, 0, 0)
        .single()
        .expect("a valid instant");
    let dispatched = dispatch_partition(
        &store,
        &layout,
        &partition,
        now,
        &ReadinessConfig::default(),
        DispatchMode::default(),
    )
    .await
    .expect("the planner dispatches");
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
    let outcome = run_compaction_job(
        &store,
        &layout,
        &partition,
        &CompactOptions::new(scratch.path()),
        &ReadinessConfig::default(),
    )
    .await
    .expect("the job runs");
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

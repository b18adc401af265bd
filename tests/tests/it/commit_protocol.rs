//! The commit protocol's outcomes, in memory and on the S3 test server: a retried job is a
//! `noop` (invariant 6); a job whose inputs another compactor committed first is a
//! `noop` (identical work) or a `conflict` (different work), never a second copy of the rows
//! (invariants 1 and 2); a committer far behind a pruned manifest history is rebased, never
//! left believing it won with a version nobody reads.

use std::sync::Arc;
use std::time::Duration;

use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::gc::{KEEP_MANIFEST_VERSIONS, collect_garbage};
use ourios_compaction::manifest::{CommitOutcome, Manifest, commit, list_versions, load_latest};
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use ourios_compaction::testing::FaultyStore;
use ourios_compaction::testing::small_budget_options as options;
use ourios_integration_tests::{
    Backend, all_keys, assert_conflict, assert_exactly_once, assert_live_exactly_once,
    commit_request as request, compact_expecting, land_file, land_files, live_set, live_tags,
    test_partition,
};

/// A test per case of an async test body, named `body::case` and run on two worker threads:
/// `cases!(body: in_memory(Backend::Memory), on_s3(Backend::S3));`
macro_rules! cases {
    ($body:ident: $($case:ident($($arg:expr),* $(,)?)),+ $(,)?) => {
        mod $body {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$body($($arg),*).await
                }
            )+
        }
    };
}

cases!(retried_job_is_noop:
    in_memory(Backend::Memory),
    on_s3(Backend::S3),
);
async fn retried_job_is_noop(backend: Backend) {
    let store = backend.open("retry");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let scratch = tempfile::tempdir().expect("scratch");
    let expected = land_files(&store, &layout, &partition, 3, 200).await;
    let opts = options(scratch.path());
    let first = compact_expecting(&store, &layout, &partition, &opts, Status::Compacted).await;
    let keys = all_keys(&store).await;
    let opts = options(scratch.path());
    let second = compact_expecting(&store, &layout, &partition, &opts, Status::Noop).await;
    assert_eq!(second.manifest_version, first.manifest_version);
    assert_eq!(all_keys(&store).await, keys, "a noop writes nothing");
    assert_exactly_once(
        &live_tags(&store, &layout, &partition).await,
        &expected,
        "after a retried job",
    );
}

/// Job A reads the partition; before it commits, job B compacts it (after a late file landed
/// when `late_file`). A must end `noop` (same inputs) or `conflict` (B's inputs differ), and
/// the rows stay live exactly once.
async fn inputs_compacted_by_someone_else(store: Store, late_file: bool) -> Status {
    let layout = KeyLayout::default();
    let partition = test_partition();
    let scratch = tempfile::tempdir().expect("scratch");
    let mut expected = land_files(&store, &layout, &partition, 3, 200).await;
    let late_tags: Vec<i64> = (9000..9050).collect();
    let other = {
        let store = store.clone();
        let layout = layout.clone();
        let partition = partition.clone();
        let options = options(scratch.path());
        async move {
            if late_file {
                land_file(&store, &layout, &partition, "late.parquet", 9000, 50).await;
            }
            let report = compact_partition(&store, &layout, &partition, &options)
                .await
                .expect("job B runs");
            assert_eq!(report.status, Status::Compacted, "job B wins: {report:?}");
        }
    };
    if late_file {
        expected.extend(late_tags);
    }
    let interposed =
        FaultyStore::new(Arc::clone(store.object_store()), None).with_hook_before_upload(other);
    let job_a_store = Store::from_object_store(Arc::new(interposed), "interposed");
    let report = compact_partition(&job_a_store, &layout, &partition, &options(scratch.path()))
        .await
        .expect("job A runs");
    assert_exactly_once(
        &live_tags(&store, &layout, &partition).await,
        &expected,
        "after a competing commit",
    );
    let latest = load_latest(&store, &layout, &partition)
        .await
        .expect("latest");
    assert_eq!(latest.version, 1, "only job B committed");
    assert_eq!(latest.compacted.len(), 1);
    let compacted: Vec<String> = all_keys(&store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("compacted/"))
        .collect();
    assert_eq!(
        compacted,
        [latest.compacted[0].key.clone()],
        "the loser leaves no output behind"
    );
    report.status
}

cases!(competing_job_ends_noop_or_conflict:
    identical_in_memory(Backend::Memory, false, Status::Noop),
    different_in_memory(Backend::Memory, true, Status::Conflict),
    identical_on_s3(Backend::S3, false, Status::Noop),
    different_on_s3(Backend::S3, true, Status::Conflict),
);
async fn competing_job_ends_noop_or_conflict(backend: Backend, late_file: bool, expected: Status) {
    let status = inputs_compacted_by_someone_else(backend.open("competing"), late_file).await;
    assert_eq!(status, expected);
}

cases!(late_file_stays_live_and_is_compacted_next_time:
    in_memory(Backend::Memory),
    on_s3(Backend::S3),
);
/// A file that lands while a job runs (after it listed the partition) stays live beside the
/// job's output, and the next job merges it with the compacted file (invariant 5).
async fn late_file_stays_live_and_is_compacted_next_time(backend: Backend) {
    let store = backend.open("late-file");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let scratch = tempfile::tempdir().expect("scratch");
    let mut expected = land_files(&store, &layout, &partition, 3, 200).await;
    let lands_midway = {
        let (store, layout, partition) = (store.clone(), layout.clone(), partition.clone());
        async move {
            land_file(&store, &layout, &partition, "late.parquet", 9000, 50).await;
        }
    };
    let hooked = FaultyStore::new(Arc::clone(store.object_store()), None)
        .with_hook_before_upload(lands_midway);
    let job_store = Store::from_object_store(Arc::new(hooked), "hooked");
    let opts = options(scratch.path());
    let first = compact_expecting(&job_store, &layout, &partition, &opts, Status::Compacted).await;
    assert_eq!(first.inputs.files, 3);
    expected.extend(9000..9050);
    let during = "after a file landed during the job";
    let files = assert_live_exactly_once(&store, &layout, &partition, 2, &expected, during).await;
    let late_key = format!("{}/late.parquet", layout.ingest_dir(&partition));
    assert!(files.live.iter().any(|k| *k == late_key), "{files:?}");

    let opts = options(scratch.path());
    let second = compact_expecting(&store, &layout, &partition, &opts, Status::Compacted).await;
    assert_eq!(
        second.inputs.files, 2,
        "the compacted file and the late file"
    );
    let after = "after the next job";
    assert_live_exactly_once(&store, &layout, &partition, 1, &expected, after).await;
}

cases!(late_job_keeps_an_identical_committed_output:
    deadline_in_memory(Backend::Memory, Lateness::Deadline),
    half_grace_in_memory(Backend::Memory, Lateness::HalfGrace),
    deadline_on_s3(Backend::S3, Lateness::Deadline),
);
/// Job B stops late (past its deadline) after an identical job A committed the same input
/// set, or (with a grace shorter than the wait) finds A's commit of it: B times out or ends
/// `noop`, and A's live file stays. Each attempt names its output uniquely, so B's own output
/// is never A's; the half-grace rule counts from the end of B's upload, so B is not late then.
async fn late_job_keeps_an_identical_committed_output(backend: Backend, late: Lateness) {
    let store = backend.open("late");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let scratch = tempfile::tempdir().expect("scratch");
    let expected = land_files(&store, &layout, &partition, 3, 200).await;
    let mut b_options = options(scratch.path());
    let wait_until = match late {
        Lateness::Deadline => {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
            b_options.deadline = Some(deadline.into_std());
            deadline
        }
        Lateness::HalfGrace => {
            b_options.settings.gc_grace = Duration::from_secs(1);
            tokio::time::Instant::now() + Duration::from_secs(1)
        }
    };
    let job_a = {
        let (store, layout, partition) = (store.clone(), layout.clone(), partition.clone());
        let options = options(scratch.path());
        async move {
            let report = compact_partition(&store, &layout, &partition, &options)
                .await
                .expect("job A runs");
            assert_eq!(report.status, Status::Compacted, "job A wins: {report:?}");
            // Job B resumes only once it is late.
            tokio::time::sleep_until(wait_until).await;
        }
    };
    let hooked =
        FaultyStore::new(Arc::clone(store.object_store()), None).with_hook_before_upload(job_a);
    let job_b_store = Store::from_object_store(Arc::new(hooked), "hooked");
    let report = compact_partition(&job_b_store, &layout, &partition, &b_options)
        .await
        .expect("job B runs");
    let expected_status = match late {
        Lateness::Deadline => Status::Timeout,
        Lateness::HalfGrace => Status::Noop,
    };
    assert_eq!(report.status, expected_status, "{report:?}");
    assert_exactly_once(
        &live_tags(&store, &layout, &partition).await,
        &expected,
        "after a late identical job",
    );
    let files = live_set(&store, &layout, &partition).await;
    let compacted: Vec<String> = all_keys(&store)
        .await
        .into_iter()
        .filter(|k| k.starts_with(&format!("{}/", layout.compacted_dir(&partition))))
        .collect();
    assert_eq!(compacted, files.live, "B removed its own output, never A's");
}

#[derive(Debug, Clone, Copy)]
enum Lateness {
    Deadline,
    HalfGrace,
}

cases!(stale_committer_after_pruning:
    in_memory(Backend::Memory),
    on_s3(Backend::S3),
);
/// A committer whose base is older than the versions GC keeps re-creates a pruned version
/// number. That version is shadowed (readers take the highest), so the commit must be
/// retried on the latest: rebased when its inputs are still live, a conflict otherwise.
async fn stale_committer_after_pruning(backend: Backend) {
    let store = backend.open("pruning");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let dir = layout.ingest_dir(&partition);
    let out = layout.compacted_dir(&partition);
    let stale_base = Manifest::empty(&partition.relative_dir());
    let num_commits = KEEP_MANIFEST_VERSIONS as u64 + 2;
    for i in 0..num_commits {
        let base = load_latest(&store, &layout, &partition)
            .await
            .expect("latest");
        let r = request(
            &format!("job-{i}"),
            &format!("{dir}/in-{i}.parquet"),
            &format!("{out}/out-{i}.parquet"),
        );
        let outcome = commit(&store, &layout, &partition, &base, &r)
            .await
            .expect("commit");
        assert!(
            matches!(outcome, CommitOutcome::Committed(_)),
            "{outcome:?}"
        );
    }
    // GC prunes versions beyond the latest few once they are a grace old: with no grace, at
    // once.
    collect_garbage(&store, &layout, &partition, Duration::ZERO, false)
        .await
        .expect("gc");
    let versions = list_versions(&store, &layout, &partition)
        .await
        .expect("versions");
    assert_eq!(versions.first(), Some(&3), "versions 1 and 2 pruned");

    // Inputs still live: the commit is rebased on the latest.
    let live = request(
        "stale-live",
        &format!("{dir}/late.parquet"),
        &format!("{out}/out-late.parquet"),
    );
    match commit(&store, &layout, &partition, &stale_base, &live)
        .await
        .expect("stale commit")
    {
        CommitOutcome::Committed(m) => assert_eq!(m.version, num_commits + 1),
        other => panic!("a stale commit with live inputs is rebased: {other:?}"),
    }
    let latest = load_latest(&store, &layout, &partition)
        .await
        .expect("latest");
    assert_eq!(latest.version, num_commits + 1);
    assert!(latest.has_compacted(&format!("{out}/out-late.parquet")));

    // Inputs retired meanwhile: a conflict, and no shadowed version left behind.
    let retired = request(
        "stale-retired",
        &format!("{dir}/in-0.parquet"),
        &format!("{out}/out-x.parquet"),
    );
    let outcome = commit(&store, &layout, &partition, &stale_base, &retired)
        .await
        .expect("stale commit");
    assert_conflict(&outcome, "a commit on a stale base");
    let versions = list_versions(&store, &layout, &partition)
        .await
        .expect("versions");
    assert_eq!(
        versions,
        (3..=num_commits + 1).collect::<Vec<_>>(),
        "shadowed versions are removed"
    );
}

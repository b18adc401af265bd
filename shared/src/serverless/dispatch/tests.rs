//! Single-flight dispatch, the sweep, backfill and the end of a job, on an in-memory store.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use serde_json::json;

use super::job_lifecycle::{JobOutcome, RecordAction};
use super::planner::{Planner, PlannerAnswer};
use super::*;
use crate::manifest::{list_versions, partition_files};
use crate::options::CompactOptions;
use crate::partition::job_key;
use crate::report::Status;
use crate::serverless::dispatch::compactor::{Compactor, CompactorAnswer};
use crate::serverless::events::{Invocation, KeyScope, parse_invocation};
use crate::serverless::state_machine::FanOutStateMachine;
use crate::settings::CompactSettings;
use crate::store::StoreUrl;
use crate::testing::{
    FaultyStore, dispatched, files_under, parquet_bytes, put_bytes, rows_batch, run_job,
    test_partition,
};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// After the hour closed and its grace passed.
fn closed() -> DateTime<Utc> {
    at("2026-11-29T12:00:00Z")
}

fn memory() -> Store {
    Store::from_object_store(Arc::new(InMemory::new()), "memory://")
}

fn planner(store: &Store) -> Planner {
    Planner {
        store: store.clone(),
        layout: KeyLayout::default(),
        scope: KeyScope::for_store(&StoreUrl::Memory),
        readiness: ReadinessConfig::default(),
        backfill_interval: Duration::ZERO,
    }
}

/// Lands an ingest file of `rows` rows inside the partition's hour.
async fn land(store: &Store, partition: &PartitionId, name: &str, first_tag: i64, rows: i64) {
    let (start, _) = partition.time_range_nanos();
    let batch: Vec<_> = (first_tag..first_tag + rows)
        .map(|t| {
            (
                Some(format!("svc{}", t % 3)),
                start + (t * 7_919) % 3_600_000_000_000,
                t,
            )
        })
        .collect();
    let key = format!("{}/{name}", KeyLayout::default().ingest_dir(partition));
    put_bytes(store, &key, parquet_bytes(&[rows_batch(&batch)], 64)).await;
}

/// Dispatches `p` at `now` with `config`, as the planner does (the default mode).
async fn dispatch_with(
    store: &Store,
    p: &PartitionId,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
) -> PartitionOutcome {
    dispatch_partition(
        store,
        &KeyLayout::default(),
        p,
        now,
        config,
        DispatchMode::default(),
    )
    .await
    .unwrap()
}

/// Dispatches `p` with the default settings after its hour closed.
async fn dispatch_closed(store: &Store, p: &PartitionId) -> PartitionOutcome {
    dispatch_with(store, p, closed(), &ReadinessConfig::default()).await
}

/// The job id of the record `p` holds (panics when there is none).
async fn record_job_id(store: &Store, p: &PartitionId) -> String {
    job::read_job(store, p)
        .await
        .unwrap()
        .unwrap()
        .record
        .unwrap()
        .job_id
}

/// Backfills `request` at `now` with the default settings, no rate limit and no progress.
async fn backfill_now(
    store: &Store,
    request: &BackfillRequest,
    now: DateTime<Utc>,
) -> crate::Result<BackfillReport> {
    backfill(
        store,
        &KeyLayout::default(),
        request,
        now,
        &ReadinessConfig::default(),
        Duration::ZERO,
        &|_, _| {},
    )
    .await
}

/// Lands a 10-row file in each of the space-separated `tenant/hour` partitions and returns
/// the partitions.
async fn land_in<const N: usize>(store: &Store, partitions: &str) -> [PartitionId; N] {
    let mut parsed = Vec::new();
    for name in partitions.split(' ') {
        let (tenant, hour) = name.split_once('/').unwrap();
        let p = PartitionId::parse(tenant, hour).unwrap();
        land(store, &p, "f.parquet", 0, 10).await;
        parsed.push(p);
    }
    parsed.try_into().unwrap()
}

/// Overwrites the first manifest of `p` with `bytes` that are no manifest.
async fn break_manifest(store: &Store, p: &PartitionId, bytes: &'static [u8]) {
    let key = KeyLayout::default().manifest_key(p, 1);
    put_bytes(store, key.as_ref(), bytes::Bytes::from_static(bytes)).await;
}

async fn job_exists(store: &Store, partition: &PartitionId) -> bool {
    job::read_job(store, partition).await.unwrap().is_some()
}

async fn all_keys(store: &Store) -> Vec<String> {
    let listed: Vec<_> = store.object_store().list(None).try_collect().await.unwrap();
    listed.into_iter().map(|m| m.location.to_string()).collect()
}

/// An S3 notification of object creations of `keys`, `=` percent-encoded as S3 sends it.
pub(super) fn s3_event(keys: &[String]) -> serde_json::Value {
    let records: Vec<_> = keys
        .iter()
        .map(|k| {
            json!({"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                   "s3": {"bucket": {"name": "logs-bucket"}, "object": {"key": k.replace('=', "%3D")}}})
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_duplicate_and_out_of_order_events_yields_one_job() {
    let store = memory();
    let p = test_partition();
    for i in 0..5 {
        land(&store, &p, &format!("f{i}.parquet"), i * 100, 10).await;
    }
    let planner = planner(&store);
    // Events for the same files, duplicated, in reverse order, in several invocations.
    let mut keys: Vec<String> = (0..5)
        .rev()
        .map(|i| format!("data/{}/f{i}.parquet", p.relative_dir()))
        .collect();
    keys.extend(keys.clone());
    let mut dispatched = 0;
    let mut job_ids = Vec::new();
    for chunk in keys.chunks(3) {
        let invocation = parse_invocation(&s3_event(chunk)).unwrap();
        let PlannerAnswer::Notifications(handled) =
            planner.handle(invocation, closed()).await.unwrap()
        else {
            panic!("notifications answer");
        };
        assert!(handled.rejected.is_empty() && handled.failed.is_empty());
        assert_eq!(
            handled.partitions.len(),
            1,
            "one outcome per partition per invocation"
        );
        for outcome in handled.partitions {
            if outcome.decision == "dispatched" {
                dispatched += 1;
                job_ids.extend(outcome.job_id);
            } else {
                assert_eq!(outcome.decision, "job_active");
            }
        }
    }
    assert_eq!(dispatched, 1);
    let stored = job::read_job(&store, &p).await.unwrap().unwrap();
    assert_eq!(stored.record.map(|r| r.job_id), job_ids.first().cloned());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_planners_create_one_job_record() {
    let store = memory();
    let p = test_partition();
    land(&store, &p, "f.parquet", 0, 10).await;
    let attempts = (0..16).map(|_| dispatch_closed(&store, &p));
    let outcomes = futures::future::join_all(attempts).await;
    let dispatched = outcomes
        .iter()
        .filter(|o| o.decision == "dispatched")
        .count();
    assert_eq!(dispatched, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_job_record_is_replaced_and_a_fresh_one_is_not() {
    let store = memory();
    let p = test_partition();
    land(&store, &p, "f.parquet", 0, 10).await;
    let config = ReadinessConfig::default();
    let now = Utc::now();
    let first = dispatch_with(&store, &p, now, &config).await;
    assert_eq!(first.decision, "dispatched");
    let again = dispatch_with(&store, &p, now, &config).await;
    assert_eq!(again.decision, "job_active");
    // Past the lease (by the store's clock), the record is stale.
    let later =
        now + chrono::Duration::from_std(config.job_lease).unwrap() + chrono::Duration::seconds(5);
    let replaced = dispatch_with(&store, &p, later, &config).await;
    assert_eq!(replaced.decision, "dispatched", "{}", replaced.reason);
    assert!(replaced.reason.contains("stale"));
    assert_ne!(replaced.job_id, first.job_id);
    let stored = job::read_job(&store, &p).await.unwrap().unwrap();
    assert_eq!(stored.record.map(|r| r.job_id), replaced.job_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_and_empty_partitions_get_no_job() {
    let store = memory();
    let p = test_partition();
    let config = ReadinessConfig::default();
    let empty = dispatch_closed(&store, &p).await;
    assert_eq!(empty.decision, "nothing_to_compact");
    land(&store, &p, "f.parquet", 0, 10).await;
    let open = dispatch_with(&store, &p, at("2026-11-29T10:30:00Z"), &config).await;
    assert_eq!(open.decision, "not_ready");
    assert!(!job_exists(&store, &p).await);
    // Small-file pressure makes an open hour ready.
    let pressure = ReadinessConfig {
        pressure_files: 1,
        ..config
    };
    let busy = dispatch_with(&store, &p, at("2026-11-29T10:30:00Z"), &pressure).await;
    assert_eq!(busy.decision, "dispatched", "{}", busy.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactors_own_writes_start_no_new_work() {
    let store = memory();
    let p = test_partition();
    land(&store, &p, "f1.parquet", 0, 50).await;
    land(&store, &p, "f2.parquet", 100, 50).await;
    let before: std::collections::BTreeSet<String> = all_keys(&store).await.into_iter().collect();
    let scratch = tempfile::tempdir().unwrap();
    let report = crate::compact::compact_partition(
        &store,
        &KeyLayout::default(),
        &p,
        &CompactOptions::new(scratch.path()),
    )
    .await
    .unwrap();
    assert_eq!(report.status, Status::Compacted);
    // Every object the compactor wrote, as S3 would announce it, plus the job record.
    let mut written: Vec<String> = all_keys(&store)
        .await
        .into_iter()
        .filter(|k| !before.contains(k))
        .collect();
    written.push(job_key(&p));
    assert!(
        written.len() >= 3,
        "an output, a manifest and a job record: {written:?}"
    );
    let answer = planner(&store)
        .handle(parse_invocation(&s3_event(&written)).unwrap(), closed())
        .await
        .unwrap();
    let PlannerAnswer::Notifications(handled) = answer else {
        panic!()
    };
    assert!(handled.partitions.is_empty(), "{:?}", handled.partitions);
    assert!(handled.rejected.is_empty(), "{:?}", handled.rejected);
    assert_eq!(handled.ignored.len(), written.len());
    assert!(!job_exists(&store, &p).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_covers_only_its_window() {
    let store = memory();
    let partitions = "acme/2026-11-29T10 acme/2026-11-20T10 globex/2026-11-29T11";
    let [_, old, _] = land_in(&store, partitions).await;
    let outcomes = sweep(
        &store,
        &KeyLayout::default(),
        at("2026-11-29T13:00:00Z"),
        &ReadinessConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        dispatched(&outcomes),
        [
            ("acme".to_string(), "2026-11-29T10".to_string()),
            ("globex".to_string(), "2026-11-29T11".to_string())
        ]
    );
    assert!(!job_exists(&store, &old).await);
    // 2 tenants × 49 hours considered, not the whole history.
    assert_eq!(outcomes.len(), 2 * 49);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_schedules_partitions_with_files_and_dry_run_writes_nothing() {
    let store = memory();
    let partitions = "acme/2026-11-29T08 acme/2026-11-29T10 acme/2026-11-29T12";
    let [a, b, outside] = land_in(&store, partitions).await;
    let request = |dry_run| BackfillRequest {
        tenants: None,
        from: "2026-11-29T07".into(),
        to: "2026-11-29T11".into(),
        dry_run,
    };
    let seen = std::sync::Mutex::new(Vec::new());
    let progress = |done, total| seen.lock().unwrap().push((done, total));
    // Readiness is not checked: the backfill runs "now", while the hours are open.
    let now = at("2026-11-29T08:30:00Z");
    let dry = backfill(
        &store,
        &KeyLayout::default(),
        &request(true),
        now,
        &ReadinessConfig::default(),
        Duration::ZERO,
        &progress,
    )
    .await
    .unwrap();
    assert_eq!(dry.scheduled, 2);
    assert!(
        dry.partitions
            .iter()
            .all(|o| o.decision == "would_dispatch")
    );
    assert!(!job_exists(&store, &a).await && !job_exists(&store, &b).await);
    assert_eq!(seen.lock().unwrap().last(), Some(&(5, 5)));

    let real = backfill_now(&store, &request(false), now).await.unwrap();
    assert_eq!(real.scheduled, 2);
    let hours: Vec<&str> = real.partitions.iter().map(|o| o.hour.as_str()).collect();
    assert_eq!(hours, ["2026-11-29T08", "2026-11-29T10"]);
    assert!(job_exists(&store, &a).await && job_exists(&store, &b).await);
    assert!(!job_exists(&store, &outside).await);
    // Running it again schedules nothing new: the jobs are active.
    let again = backfill_now(&store, &request(false), now).await.unwrap();
    assert_eq!(again.scheduled, 0);

    let backwards = BackfillRequest {
        from: "2026-11-29T11".into(),
        to: "2026-11-29T07".into(),
        ..request(true)
    };
    assert!(backfill_now(&store, &backwards, now).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_deletes_its_record() {
    let store = memory();
    let p = test_partition();
    land(&store, &p, "f.parquet", 0, 20).await;
    dispatch_closed(&store, &p).await;
    let scratch = tempfile::tempdir().unwrap();
    let outcome = run_job(&store, &p, &CompactOptions::new(scratch.path())).await;
    assert_eq!(outcome.report.status, Status::Compacted);
    assert_eq!(outcome.record, RecordAction::Deleted);
    assert!(outcome.dispatch_job_id.is_some());
    assert!(!job_exists(&store, &p).await);
}

/// Once an hour's last job is done, the sweep finds its retired inputs past the grace whatever
/// the hour's age (this one is far outside the sweep's window), and the job it dispatches
/// deletes them: the hour ends holding its output and manifests only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_collects_an_old_hours_retired_inputs_once_past_the_grace() {
    let (store, layout, p) = (memory(), KeyLayout::default(), test_partition());
    land(&store, &p, "f1.parquet", 0, 20).await;
    land(&store, &p, "f2.parquet", 20, 20).await;
    dispatch_closed(&store, &p).await;
    let scratch = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(1);
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = grace;
    let first = run_job(&store, &p, &options).await;
    assert_eq!(first.report.status, Status::Compacted);
    assert_eq!(first.record, RecordAction::Deleted);
    let ingest_dir = layout.ingest_dir(&p).to_string();
    let ingest = |keys: &[String]| keys.iter().filter(|k| k.starts_with(&ingest_dir)).count();
    assert_eq!(
        ingest(&all_keys(&store).await),
        2,
        "retired, within the grace"
    );

    let config = ReadinessConfig {
        gc_grace: grace,
        ..ReadinessConfig::default()
    };
    let sweep = || async {
        sweep_until(&store, &layout, Utc::now(), &config, None)
            .await
            .unwrap()
    };
    let ours = |report: &SweepReport| {
        (report.partitions.iter())
            .find(|o| o.tenant.as_deref() == p.tenant() && o.hour == p.hour_label())
            .map(|o| o.decision)
    };
    assert_eq!(ours(&sweep().await), None, "nothing due within the grace");
    tokio::time::sleep(grace + Duration::from_millis(200)).await;
    assert_eq!(ours(&sweep().await), Some(OutcomeDecision::Dispatched));

    let collected = run_job(&store, &p, &options).await;
    assert_eq!(collected.report.status, Status::Noop);
    assert_eq!(collected.report.gc_deleted, 2);
    assert_eq!(collected.record, RecordAction::Deleted);
    let keys = all_keys(&store).await;
    assert_eq!(ingest(&keys), 0, "{keys:?}");
    let left: Vec<&String> = (keys.iter())
        .filter(|k| {
            !k.starts_with("_compaction/manifests/") && !k.starts_with("_compaction/symlink/")
        })
        .collect();
    assert_eq!(left.len(), 1, "the output alone: {left:?}");
    assert_eq!(ours(&sweep().await), None, "nothing left to collect");
}

/// Fails every write of a manifest version with a 503: a job uploads its output and fails
/// its commit.
#[derive(Debug)]
struct UnavailableManifestWrites;

#[async_trait::async_trait]
impl crate::store::hooked::StoreHooks for UnavailableManifestWrites {
    async fn put(
        &self,
        inner: &crate::store::hooked::Inner,
        put: crate::store::hooked::PutRequest<'_>,
    ) -> object_store::Result<object_store::PutResult> {
        if put.location.as_ref().starts_with("_compaction/manifests/") {
            return Err(object_store::Error::Generic {
                store: "UnavailableManifestWrites",
                source: "503 Slow Down (injected)".into(),
            });
        }
        put.forward(inner).await
    }
}

/// An attempt that uploaded its output and never committed (its job failing for good, its
/// record going stale) leaves an orphan the sweep finds whatever the hour's age: the job it
/// dispatches deletes the orphan, and its end re-arms the record for the job that compacts
/// the hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_collects_the_orphan_of_an_attempt_that_never_committed() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store = Store::from_object_store(Arc::clone(&inner), "memory://");
    let (layout, p) = (KeyLayout::default(), test_partition());
    land(&store, &p, "f1.parquet", 0, 20).await;
    dispatch_closed(&store, &p).await;
    let scratch = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(1);
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = grace;
    let failing =
        crate::store::hooked::HookedStore::wrap(inner, Arc::new(UnavailableManifestWrites));
    let failing = Store::from_object_store(Arc::new(failing), "memory://");
    let failed = run_job(&failing, &p, &options).await;
    assert_eq!(failed.report.status, Status::Failed);
    let compacted_dir = format!("{}/", layout.compacted_dir(&p));
    // Outputs only (the attempt's hold stays in its job directory until GC finds it idle).
    let orphans = |keys: Vec<String>| -> Vec<String> {
        (keys.into_iter())
            .filter(|k| {
                k.strip_prefix(&compacted_dir)
                    .is_some_and(|name| !name.contains('/'))
            })
            .collect()
    };
    let orphan = orphans(all_keys(&store).await);
    assert_eq!(orphan.len(), 1, "the uploaded output: {orphan:?}");

    // Its record goes stale; once its hold has been idle for twice the grace, the sweep
    // replaces the record for the garbage due.
    let config = ReadinessConfig {
        gc_grace: grace,
        job_lease: Duration::from_millis(500),
        ..ReadinessConfig::default()
    };
    tokio::time::sleep(grace * 2 + Duration::from_millis(300)).await;
    let report = sweep_until(&store, &layout, Utc::now(), &config, None)
        .await
        .unwrap();
    let ours = (report.partitions.iter())
        .find(|o| o.tenant.as_deref() == p.tenant() && o.hour == p.hour_label())
        .map(|o| o.decision);
    assert_eq!(ours, Some(OutcomeDecision::Dispatched), "{report:?}");
    // That job only collects; its end re-arms the record for the hour, still to compact.
    let collected = run_job(&store, &p, &options).await;
    assert_eq!(collected.report.status, Status::Noop);
    assert_eq!(collected.record, RecordAction::ReArmed);
    let left = orphans(all_keys(&store).await);
    assert!(!left.contains(&orphan[0]), "the orphan is gone: {left:?}");
    let job = run_job(&store, &p, &options).await;
    assert_eq!(job.report.status, Status::Compacted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_arriving_during_a_job_re_arm_its_record() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
    let p = test_partition();
    land(&plain, &p, "f1.parquet", 0, 20).await;
    let layout = KeyLayout::default();
    dispatch_closed(&plain, &p).await;
    let first_id = record_job_id(&plain, &p).await;
    // A file lands after the compaction listed the partition, before it commits.
    let late_store = plain.clone();
    let late_partition = p.clone();
    let hook = async move { land(&late_store, &late_partition, "late.parquet", 1000, 5).await };
    let faulty = Arc::new(FaultyStore::new(Arc::clone(&inner), None).with_hook_before_upload(hook));
    let store = Store::from_object_store(faulty, "memory://");
    let scratch = tempfile::tempdir().unwrap();
    let options = CompactOptions::new(scratch.path());
    let outcome = run_job(&store, &p, &options).await;
    assert_eq!(outcome.report.status, Status::Compacted);
    assert_eq!(outcome.record, RecordAction::ReArmed);
    assert_ne!(
        record_job_id(&plain, &p).await,
        first_id,
        "a new record dispatches the next job"
    );
    let live = partition_files(&plain, &layout, &p).await.unwrap();
    assert!(live.live.iter().any(|k| k.ends_with("late.parquet")));

    // The next job compacts the late file and ends the record.
    let next = run_job(&plain, &p, &options).await;
    assert_eq!(next.report.status, Status::Compacted);
    assert_eq!(next.record, RecordAction::Deleted);
    assert_eq!(next.report.inputs.rows, 25);
    assert_eq!(list_versions(&plain, &layout, &p).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_job_commits_nothing_and_leaves_its_record() {
    let store = memory();
    let layout = KeyLayout::default();
    let p = test_partition();
    land(&store, &p, "f1.parquet", 0, 200).await;
    land(&store, &p, "f2.parquet", 1000, 200).await;
    dispatch_closed(&store, &p).await;
    let scratch = tempfile::tempdir().unwrap();
    let mut options = CompactOptions::new(scratch.path());
    options.deadline = Some(std::time::Instant::now());
    let outcome = run_job(&store, &p, &options).await;
    assert_eq!(outcome.report.status, Status::Timeout);
    assert_eq!(outcome.record, RecordAction::Left);
    assert!(
        list_versions(&store, &layout, &p).await.unwrap().is_empty(),
        "nothing committed"
    );
    assert!(job_exists(&store, &p).await);
    let compacted: Vec<String> = all_keys(&store)
        .await
        .into_iter()
        .filter(|k| k.starts_with("compacted/"))
        .collect();
    assert!(compacted.is_empty(), "no output left behind: {compacted:?}");
    assert_eq!(
        files_under(scratch.path()),
        Vec::<std::path::PathBuf>::new(),
        "scratch is empty"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_per_invocation_is_bounded_whatever_the_burst() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
    let p = test_partition();
    for i in 0..40 {
        land(&plain, &p, &format!("f{i:02}.parquet"), i * 10, 1).await;
    }
    let keys: Vec<String> = (0..40)
        .map(|i| format!("data/{}/f{i:02}.parquet", p.relative_dir()))
        .collect();
    // Store operations of one invocation holding `n` seal events of the partition.
    let ops_for = |n: usize, store_inner: Arc<dyn ObjectStore>| {
        let keys = keys[..n].to_vec();
        async move {
            let counting = Arc::new(FaultyStore::new(store_inner, None));
            let store = Store::from_object_store(counting.clone(), "memory://");
            let invocation = parse_invocation(&s3_event(&keys)).unwrap();
            planner(&store).handle(invocation, closed()).await.unwrap();
            counting.num_ops()
        }
    };
    // First invocation: a listing, the manifest listing, the job read and its create; then
    // the symlink manifest: its read, the live set's two listings and its write.
    let first = ops_for(40, Arc::clone(&inner)).await;
    assert!(first <= 8, "{first} store operations for one partition");
    // The events' files are in the partition's symlink manifest (what Athena reads) at once.
    let symlink = KeyLayout::default().symlink_key(&p);
    let body = plain
        .object_store()
        .get(&symlink)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let listed: Vec<String> = String::from_utf8(body.to_vec())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let urls: Vec<String> = keys.iter().map(|k| plain.url_of(k)).collect();
    assert_eq!(listed, urls);
    // Later ones, one event or forty: the same constant work, and no write (the symlink
    // manifest holds the live set already).
    let one = ops_for(1, Arc::clone(&inner)).await;
    let forty = ops_for(40, Arc::clone(&inner)).await;
    assert_eq!(one, forty);
    assert!(one <= 6, "{one} store operations");
}

#[tokio::test]
async fn a_denied_read_of_a_missing_job_record_is_no_record() {
    // S3 answers a GET of a missing key with 403 to a caller that may not list it: the first
    // dispatch of a partition still writes its job record, and a second finds it.
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store = Store::from_object_store(
        Arc::new(crate::testing::DenyMissingStore::new(Arc::clone(&inner))),
        "memory://",
    );
    let p = test_partition();
    land(&store, &p, "f1.parquet", 0, 10).await;
    assert!(job::read_job(&store, &p).await.unwrap().is_none());
    let first = dispatch_closed(&store, &p).await;
    assert_eq!(first.decision, "dispatched", "{first:?}");
    let second = dispatch_closed(&store, &p).await;
    assert_eq!(second.decision, "job_active", "{second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_goes_past_a_failing_partition_and_resumes_after_its_deadline() {
    let store = memory();
    let layout = KeyLayout::default();
    let config = ReadinessConfig {
        sweep_hours: 2,
        ..ReadinessConfig::default()
    };
    let now = at("2026-11-29T13:00:00Z");
    // Tenant "bad" has an unreadable manifest; "acme" and "zeta" are fine.
    let partitions = "acme/2026-11-29T11 bad/2026-11-29T11 zeta/2026-11-29T11";
    let [_, bad, _] = land_in(&store, partitions).await;
    break_manifest(&store, &bad, b"not a manifest").await;
    let report = sweep_until(&store, &layout, now, &config, None)
        .await
        .unwrap();
    assert!(report.complete);
    assert_eq!(report.failed, 1, "{:?}", report.partitions);
    let decided: Vec<(&str, &str)> = report
        .partitions
        .iter()
        .filter(|o| o.hour == "2026-11-29T11")
        .map(|o| (o.tenant.as_deref().unwrap_or_default(), o.decision.as_str()))
        .collect();
    assert_eq!(
        decided,
        [
            ("acme", "dispatched"),
            ("bad", "failed"),
            ("zeta", "dispatched")
        ]
    );
    let failed = report
        .partitions
        .iter()
        .find(|o| o.decision == "failed")
        .unwrap();
    assert_eq!(failed.error_kind, Some(ErrorKind::InvalidInput));
    assert!(failed.reason.contains("not a manifest") || failed.reason.contains("unreadable"));

    // Out of time from the start: one partition per sweep, each sweep resuming after the last,
    // so successive sweeps visit every partition of the window in turn.
    let mut visited = Vec::new();
    for _ in 0..9 {
        let report = sweep_until(
            &store,
            &layout,
            now,
            &config,
            Some(std::time::Instant::now()),
        )
        .await
        .unwrap();
        assert!(!report.complete);
        assert_eq!(report.partitions.len(), 1);
        let o = &report.partitions[0];
        visited.push(format!(
            "{}/{}",
            o.tenant.as_deref().unwrap_or_default(),
            o.hour
        ));
    }
    // 3 tenants × 3 hours: nine sweeps see nine different partitions.
    let distinct: BTreeSet<&String> = visited.iter().collect();
    assert_eq!(distinct.len(), 9, "{visited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_goes_past_a_failing_partition_and_stops_before_its_deadline() {
    let store = memory();
    let layout = KeyLayout::default();
    let partitions = "acme/2026-11-29T08 acme/2026-11-29T09 acme/2026-11-29T10";
    let [_, bad, _] = land_in(&store, partitions).await;
    break_manifest(&store, &bad, b"{").await;
    let request = BackfillRequest {
        tenants: None,
        from: "2026-11-29T08".into(),
        to: "2026-11-29T10".into(),
        dry_run: false,
    };
    let report = backfill_now(&store, &request, closed()).await.unwrap();
    assert!(report.complete);
    assert_eq!((report.scheduled, report.failed), (2, 1));
    let pacing = Pacing {
        min_interval: Duration::ZERO,
        deadline: Some(std::time::Instant::now()),
    };
    let cut = backfill_until(
        &store,
        &layout,
        &request,
        closed(),
        &ReadinessConfig::default(),
        pacing,
        &|_, _| {},
    )
    .await
    .unwrap();
    assert!(!cut.complete);
    assert_eq!(cut.considered, 1);
    assert_eq!(
        cut.resume_from.as_deref(),
        Some("tenant=acme/year=2026/month=11/day=29/hour=09")
    );
}

#[test]
fn attempt_outputs_belong_to_their_job_only() {
    use crate::partition::is_attempt_output;
    let dir = "compacted/tenant=acme/year=2026/month=11/day=29/hour=10";
    let job = "00c0ffee00c0ffee";
    assert!(is_attempt_output(
        &format!("{dir}/part-0a1b-{job}-1234abcd.parquet"),
        job
    ));
    for other in [
        format!("{dir}/part-0a1b-{job}0-1234abcd.parquet"),
        format!("{dir}/part-0a1b-1{job}-1234abcd.parquet"),
        format!("{dir}/part-0a1b-{job}.parquet"),
        format!("{dir}/part-0a1b-direct-{job}-1.parquet"),
        format!("{dir}/{job}-1234abcd.parquet"),
        format!("{dir}/part-0a1b-{job}-local1234abcd.parquet"),
        format!("{dir}/part-0a1b-{job}-1234abcd-r00000.parquet"),
        format!("{dir}/part-0a1b-{job}-1234abcdx.parquet"),
    ] {
        assert!(!is_attempt_output(&other, job), "{other}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatched_job_names_its_attempt_after_the_job() {
    let store = memory();
    let p = test_partition();
    land(&store, &p, "a.parquet", 0, 10).await;
    let outcome = dispatch_closed(&store, &p).await;
    let job = outcome.job_id.unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let done = run_job(&store, &p, &CompactOptions::new(scratch.path())).await;
    assert_eq!(done.report.status, Status::Compacted);
    assert_eq!(
        done.aborted_uploads, 0,
        "a memory store has no listable uploads"
    );
    let key = done.report.output.unwrap().key;
    assert!(crate::partition::is_attempt_output(&key, &job), "{key}");
}

#[test]
fn outcome_decisions_are_written_by_their_names() {
    use OutcomeDecision::*;
    let cases = [
        (Dispatched, "dispatched"),
        (WouldDispatch, "would_dispatch"),
        (JobActive, "job_active"),
        (NotReady, "not_ready"),
        (NothingToCompact, "nothing_to_compact"),
        (Failed, "failed"),
        (WouldCompact, "would_compact"),
        (Compaction(Status::Noop), "noop"),
        (Compaction(Status::Timeout), "timeout"),
    ];
    for (decision, name) in cases {
        assert_eq!(serde_json::to_value(decision).unwrap(), json!(name));
        // The CLI's table pads the text form.
        assert_eq!(format!("{decision:<16}|"), format!("{name:<16}|"));
    }
}

/// A merge that can merge nothing (its only input is too large for any task's scratch space,
/// so it stays live) ends its record rather than re-arming it: each re-armed record is an
/// event, and the jobs would chase each other without end.
#[tokio::test]
async fn a_merge_that_merges_nothing_does_not_re_arm_its_record() {
    let store = memory();
    let p = test_partition();
    land(&store, &p, "big.parquet", 0, 2_000).await;
    assert_eq!(dispatch_closed(&store, &p).await.decision, "dispatched");
    let scratch = tempfile::tempdir().unwrap();
    let mut options = CompactOptions::new(scratch.path());
    options.settings.budget_bytes = 64 << 10;
    options.settings.scratch_limit_bytes = Some(16 << 10);
    let job = run_job(&store, &p, &options).await;
    assert_eq!(job.report.status, Status::Noop, "{:?}", job.report);
    assert_eq!(job.report.oversized.len(), 1, "{:?}", job.report);
    assert_eq!(job.record, RecordAction::Deleted);
    assert!(!job_exists(&store, &p).await);
    // The file stays live, and the next event or sweep may try again.
    let files = partition_files(&store, &KeyLayout::default(), &p)
        .await
        .unwrap();
    assert_eq!(files.live.len(), 1, "{files:?}");
}

/// Small-file pressure in an open hour appends a piece and leaves the earlier pieces as they
/// are; the hour's close merges them into one file. Each byte is written twice, however often
/// the pressure fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pressure_appends_pieces_that_the_close_merges_once() {
    let store = memory();
    let layout = KeyLayout::default();
    let p = test_partition();
    let pressure = ReadinessConfig {
        pressure_files: 1,
        ..ReadinessConfig::default()
    };
    let scratch = tempfile::tempdir().unwrap();
    let options = CompactOptions::new(scratch.path());
    let mut pieces = Vec::new();
    for (i, minute) in ["10:20", "10:40"].into_iter().enumerate() {
        let tag = i64::try_from(i).unwrap() * 100;
        land(&store, &p, &format!("f{i}.parquet"), tag, 40).await;
        let now = at(&format!("2026-11-29T{minute}:00Z"));
        let outcome = dispatch_with(&store, &p, now, &pressure).await;
        assert_eq!(outcome.decision, "dispatched", "{}", outcome.reason);
        let record = job::read_job(&store, &p).await.unwrap().unwrap();
        assert_eq!(record.record.unwrap().mode, crate::options::JobMode::Append);
        let job = run_job(&store, &p, &options).await;
        assert_eq!(job.report.status, Status::Compacted, "{:?}", job.report);
        assert_eq!(
            job.report.inputs.files, 1,
            "only the new file: {:?}",
            job.report
        );
        pieces.push(job.report.outputs[0].key.clone());
        let manifest = crate::manifest::load_latest(&store, &layout, &p)
            .await
            .unwrap();
        let live: std::collections::BTreeSet<_> =
            manifest.compacted.iter().map(|c| c.key.clone()).collect();
        let want: std::collections::BTreeSet<_> = pieces.iter().cloned().collect();
        assert_eq!(live, want, "the earlier piece is kept as it was");
    }
    // The last job ended after the hour closed (on this host's clock), so it re-armed its
    // record for the close, which merges the pieces with no new file to bring.
    let record = job::read_job(&store, &p).await.unwrap().unwrap();
    assert_eq!(record.record.unwrap().mode, crate::options::JobMode::Merge);
    let job = run_job(&store, &p, &options).await;
    assert_eq!(job.report.status, Status::Compacted, "{:?}", job.report);
    assert_eq!(job.report.inputs.rows, 80);
    let manifest = crate::manifest::load_latest(&store, &layout, &p)
        .await
        .unwrap();
    assert!(manifest.compacted_in_one_piece() && manifest.compacted.len() == 1);
    let pieces_bytes: u64 = job.report.inputs.bytes;
    let final_bytes = manifest.compacted[0].bytes;
    assert_eq!(manifest.written_bytes, pieces_bytes + final_bytes);
    assert!(manifest.write_amplification() < 2.5, "{manifest:?}");
    assert_eq!(
        dispatch_closed(&store, &p).await.decision,
        "nothing_to_compact"
    );
}

/// Two pieces of an open hour, each appended under small-file pressure from every file the
/// hour had, whose files GC then deleted (no grace): nothing is left in the ingest directory.
async fn pieces_without_files(store: &Store, p: &PartitionId) {
    let pressure = ReadinessConfig {
        pressure_files: 1,
        ..ReadinessConfig::default()
    };
    let scratch = tempfile::tempdir().unwrap();
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = Duration::ZERO;
    for (i, minute) in ["10:20", "10:40"].into_iter().enumerate() {
        let tag = i64::try_from(i).unwrap() * 100;
        land(store, p, &format!("f{i}.parquet"), tag, 40).await;
        let now = at(&format!("2026-11-29T{minute}:00Z"));
        let outcome = dispatch_with(store, p, now, &pressure).await;
        assert_eq!(outcome.decision, "dispatched", "{}", outcome.reason);
        let job = run_job(store, p, &options).await;
        assert_eq!(job.report.status, Status::Compacted, "{:?}", job.report);
    }
    let layout = KeyLayout::default();
    let manifest = crate::manifest::load_latest(store, &layout, p)
        .await
        .unwrap();
    assert_eq!(manifest.compacted.len(), 2, "{manifest:?}");
    assert!(!manifest.compacted_in_one_piece());
    let ingest = store.list_sorted(&layout.ingest_dir(p)).await.unwrap();
    assert!(ingest.is_empty(), "{ingest:?}");
}

/// An open hour compacted into pieces from every file it had, whose files are all gone by its
/// close, is still merged at its close: within `PIECES_LOOK` of the hour becoming ready the
/// plan reads the manifest with no file to look at. Later, only a request does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_whose_files_are_all_gone_are_merged_at_the_close() {
    let p = test_partition();
    let store = memory();
    pieces_without_files(&store, &p).await;
    // Ready at 11:10 (the default lateness grace): the plan of 12:00 looks.
    let outcome = dispatch_closed(&store, &p).await;
    assert_eq!(outcome.decision, "dispatched", "{}", outcome.reason);
    let record = job::read_job(&store, &p).await.unwrap().unwrap();
    assert_eq!(record.record.unwrap().mode, crate::options::JobMode::Merge);
    let scratch = tempfile::tempdir().unwrap();
    let job = run_job(&store, &p, &CompactOptions::new(scratch.path())).await;
    assert_eq!(job.report.status, Status::Compacted, "{:?}", job.report);
    assert_eq!(job.report.inputs.rows, 80);
    let layout = KeyLayout::default();
    let manifest = crate::manifest::load_latest(&store, &layout, &p)
        .await
        .unwrap();
    assert!(manifest.compacted_in_one_piece() && manifest.compacted.len() == 1);

    // An hour later than that, the plan no longer reads the manifest of an hour without
    // files; a request still merges its pieces.
    let store = memory();
    pieces_without_files(&store, &p).await;
    let late = at("2026-11-29T12:10:00Z");
    let outcome = dispatch_with(&store, &p, late, &ReadinessConfig::default()).await;
    assert_eq!(outcome.decision, "nothing_to_compact", "{}", outcome.reason);
    let requested = DispatchMode {
        requested: true,
        dry_run: false,
    };
    let config = ReadinessConfig::default();
    let outcome = dispatch_partition(&store, &layout, &p, late, &config, requested)
        .await
        .unwrap();
    assert_eq!(outcome.decision, "dispatched", "{}", outcome.reason);
}

/// Runs the partition's job `attempts` times on `store` (each attempt as Lambda would retry
/// the same event), returning each attempt's failure action.
async fn attempts(store: &Store, p: &PartitionId, attempts: usize) -> Vec<JobOutcome> {
    let scratch = tempfile::tempdir().unwrap();
    let options = CompactOptions::new(scratch.path());
    let mut outcomes = Vec::new();
    for _ in 0..attempts {
        outcomes.push(run_job(store, p, &options).await);
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_failing_reading_the_same_inputs_three_times_quarantines_them() {
    use crate::testing::{Refusal, RefusingStore};
    // A GET that always fails beside a good file; every input refused (the job alone cannot
    // tell the function's access from the files': it fails rather than quarantine at once).
    let cases = [
        (
            "broken GET",
            vec!["good.parquet", "bad.parquet"],
            Refusal::Broken,
            10,
        ),
        ("all refused", vec!["bad.parquet"], Refusal::Forbidden, 0),
    ];
    for (case, files, refusal, rows_left) in cases {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
        let store = Store::from_object_store(
            Arc::new(RefusingStore::new(
                Arc::clone(&inner),
                vec![("bad.parquet".into(), refusal)],
            )),
            "memory://",
        );
        let layout = KeyLayout::default();
        let p = test_partition();
        for (i, name) in files.iter().enumerate() {
            land(&plain, &p, name, i as i64 * 100, 10).await;
        }
        let bad = format!("{}/bad.parquet", layout.ingest_dir(&p));
        dispatch_closed(&store, &p).await;
        let tried = attempts(&store, &p, 3).await;
        let actions: Vec<_> = tried.iter().map(|o| o.failure.clone()).collect();
        assert_eq!(
            actions,
            [
                Some(FailureAction::Counted { count: 1 }),
                Some(FailureAction::Counted { count: 2 }),
                Some(FailureAction::Quarantined {
                    keys: vec![bad.clone()]
                }),
            ],
            "{case}"
        );
        let finished: Vec<bool> = tried.iter().map(JobOutcome::is_finished).collect();
        assert_eq!(
            finished,
            [false, false, true],
            "{case}: only the third settles"
        );
        assert_eq!(tried[2].record, RecordAction::ReArmed, "{case}");
        let manifest = load_latest(&plain, &layout, &p).await.unwrap();
        let quarantined: Vec<_> = manifest
            .quarantined
            .iter()
            .map(|q| q.key.as_str())
            .collect();
        assert_eq!(quarantined, [bad.as_str()], "{case}");
        assert!(
            manifest.quarantined[0].reason.contains("failed 3 times"),
            "{case}: {}",
            manifest.quarantined[0].reason
        );
        // The re-armed record's job compacts the rest and clears the count.
        let next = attempts(&store, &p, 1).await.remove(0);
        assert!(next.report.status.is_success(), "{case}: {:?}", next.report);
        assert_eq!(next.report.inputs.rows, rows_left, "{case}");
        assert_eq!(next.failure, None, "{case}");
        let keys = all_keys(&plain).await;
        assert!(keys.contains(&bad), "{case}: never deleted");
        assert!(
            !keys.iter().any(|k| k.starts_with("_compaction/failures/")),
            "{case}: the count is gone: {keys:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_failing_the_same_way_three_times_without_a_bad_input_parks_its_partition() {
    use crate::testing::RefusedOutputsStore;
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
    let refusing = Store::from_object_store(
        Arc::new(RefusedOutputsStore::new(Arc::clone(&inner))),
        "memory://",
    );
    let p = test_partition();
    land(&plain, &p, "f1.parquet", 0, 10).await;
    dispatch_closed(&plain, &p).await;
    let tried = attempts(&refusing, &p, 3).await;
    let actions: Vec<_> = tried.iter().map(|o| o.failure.clone()).collect();
    assert_eq!(
        actions,
        [
            Some(FailureAction::Counted { count: 1 }),
            Some(FailureAction::Counted { count: 2 }),
            Some(FailureAction::Parked),
        ]
    );
    assert!(
        tried[2].is_finished(),
        "the third attempt settles: no dead letter"
    );
    assert_eq!(tried[2].record, RecordAction::Parked);
    let record = job::read_job(&plain, &p)
        .await
        .unwrap()
        .unwrap()
        .record
        .unwrap();
    let parked = record.parked.expect("the record says why");
    assert_eq!(parked.attempts, 3);
    assert!(
        parked.error.contains("AccessDenied writing"),
        "{}",
        parked.error
    );
    // Neither the sweep nor a lapsed lease dispatches it again, and its file stays live.
    let a_day_later = closed() + chrono::Duration::days(1);
    let again = dispatch_with(&plain, &p, a_day_later, &ReadinessConfig::default()).await;
    assert_eq!(again.decision, "parked", "{again:?}");
    assert!(again.reason.contains("parked since"), "{}", again.reason);
    let live = crate::testing::live_set(&plain, &KeyLayout::default(), &p).await;
    assert_eq!(live.live.len(), 1, "its file stays live for readers");
    // A new file dispatches it again; with the store mended the job compacts both.
    tokio::time::sleep(Duration::from_millis(5)).await;
    land(&plain, &p, "f2.parquet", 100, 5).await;
    let redispatched = dispatch_with(&plain, &p, a_day_later, &ReadinessConfig::default()).await;
    assert_eq!(redispatched.decision, "dispatched", "{redispatched:?}");
    let done = attempts(&plain, &p, 1).await.remove(0);
    assert_eq!(done.report.status, Status::Compacted);
    assert_eq!(done.report.inputs.rows, 15);
    assert_eq!(done.record, RecordAction::Deleted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_that_changes_starts_the_count_again() {
    use crate::testing::{Refusal, RefusingStore};
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
    let broken = |suffix: &str| {
        Store::from_object_store(
            Arc::new(RefusingStore::new(
                Arc::clone(&inner),
                vec![(suffix.to_string(), Refusal::Broken)],
            )),
            "memory://",
        )
    };
    let p = test_partition();
    land(&plain, &p, "a.parquet", 0, 10).await;
    land(&plain, &p, "b.parquet", 100, 10).await;
    dispatch_closed(&plain, &p).await;
    let mut counts = Vec::new();
    for suffix in [
        "a.parquet",
        "a.parquet",
        "b.parquet",
        "b.parquet",
        "a.parquet",
    ] {
        let outcome = attempts(&broken(suffix), &p, 1).await.remove(0);
        counts.push(outcome.failure);
    }
    let counted = |count| Some(FailureAction::Counted { count });
    assert_eq!(
        counts,
        [counted(1), counted(2), counted(1), counted(2), counted(1)]
    );
    assert!(
        load_latest(&plain, &KeyLayout::default(), &p)
            .await
            .unwrap()
            .quarantined
            .is_empty()
    );
}

/// A layout that keeps its tenants under each day's directory: the sweep finds them by listing
/// the window's days, and plans each tenant's hours; `files` over a range finds them too.
#[tokio::test]
async fn the_sweep_finds_tenants_where_the_layout_keeps_them() {
    let store = memory();
    let layout = KeyLayout::from_template("logs/dt=%Y%m%d/svc={tenant}/hour=%H").expect("layout");
    for tenant in ["api", "web"] {
        let partition = PartitionId::parse(tenant, "2026-11-29T10").expect("partition");
        crate::testing::land_files(&store, &layout, &partition, 2, 50).await;
    }
    // A directory of the day that names no tenant is skipped.
    put_bytes(
        &store,
        "logs/dt=20261129/README/x.parquet",
        bytes::Bytes::from_static(b"x"),
    )
    .await;
    let window = crate::serverless::readiness::sweep_window(closed(), 3);
    let tenants = find_tenants(&store, &layout, None, &window)
        .await
        .expect("tenants");
    assert_eq!(tenants, [Some("api".to_string()), Some("web".to_string())]);
    let report = sweep_until(&store, &layout, closed(), &ReadinessConfig::default(), None)
        .await
        .expect("a sweep");
    let dispatched: Vec<String> = (report.partitions.iter())
        .filter(|p| p.decision == OutcomeDecision::Dispatched)
        .map(|p| format!("{} {}", p.tenant.as_deref().unwrap_or_default(), p.hour))
        .collect();
    assert_eq!(dispatched, ["api 2026-11-29T10", "web 2026-11-29T10"]);
    let hours =
        crate::manifest::hours_files(&store, &layout, None, "2026-11-29T09", "2026-11-29T11")
            .await
            .expect("files of a range");
    let found: Vec<String> = hours.iter().map(|(p, _)| p.relative_dir()).collect();
    assert_eq!(found.len(), 2, "{found:?}");
}

/// Firehose's default layout has no tenant level: an upload's event dispatches its hour alone,
/// the compactor merges it, and the sweep, backfill, GC and `files` find hours by listing the
/// project's own keys without a tenant level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_without_tenants_is_planned_compacted_and_swept_by_the_hour() {
    let store = memory();
    let layout = KeyLayout::from_template("firehose/%Y/%m/%d/%H").expect("layout");
    let ten = PartitionId::hour_only(at("2026-11-29T10:00:00Z")).expect("an hour");
    let eleven = ten.next_hour();
    crate::testing::land_files(&store, &layout, &ten, 2, 50).await;
    crate::testing::land_files(&store, &layout, &eleven, 1, 50).await;
    let key = format!("{}/f0.parquet", layout.ingest_dir(&ten));
    let event = json!({"Records": [{
        "eventSource": "aws:s3", "eventName": "ObjectCreated:CompleteMultipartUpload",
        "s3": {"bucket": {"name": "logs-bucket"}, "object": {"key": key}}}]});
    let planner = Planner {
        layout: layout.clone(),
        ..planner(&store)
    };
    let answer = planner
        .handle(parse_invocation(&event).expect("an event"), closed())
        .await
        .expect("handled");
    assert_eq!(answer.counts().dispatched, 1, "{answer:?}");
    let record = job::read_job(&store, &ten)
        .await
        .unwrap()
        .unwrap()
        .record
        .unwrap();
    assert_eq!(record.tenant, None);
    assert!(
        all_keys(&store)
            .await
            .contains(&"_compaction/jobs/year=2026/month=11/day=29/hour=10.json".to_string())
    );

    let scratch = tempfile::tempdir().expect("scratch");
    let outcome = job_lifecycle::run_compaction_job(
        &store,
        &layout,
        &ten,
        &CompactOptions::new(scratch.path()),
        &ReadinessConfig::default(),
    )
    .await
    .expect("the job runs");
    assert_eq!(outcome.report.status, Status::Compacted);
    let files = partition_files(&store, &layout, &ten).await.unwrap();
    assert_eq!(files.live.len(), 1, "{:?}", files.live);
    assert!(files.live[0].starts_with("compacted/year=2026/month=11/day=29/hour=10/"));

    // The sweep plans the other hour once its grace has passed; the hour compacted is left
    // alone.
    let later = at("2026-11-29T12:30:00Z");
    let report = sweep_until(&store, &layout, later, &ReadinessConfig::default(), None)
        .await
        .expect("a sweep");
    let dispatched: Vec<(Option<String>, String)> = (report.partitions.iter())
        .filter(|p| p.decision == OutcomeDecision::Dispatched)
        .map(|p| (p.tenant.clone(), p.hour.clone()))
        .collect();
    assert_eq!(
        dispatched,
        [(None, "2026-11-29T11".to_string())],
        "{report:?}"
    );
    // A backfill that names a tenant is refused; one that does not finds both hours.
    let request = |tenants: Option<Vec<String>>| BackfillRequest {
        tenants,
        from: "2026-11-29T10".into(),
        to: "2026-11-29T11".into(),
        dry_run: true,
    };
    let named = backfill(
        &store,
        &layout,
        &request(Some(vec!["acme".into()])),
        closed(),
        &ReadinessConfig::default(),
        Duration::ZERO,
        &|_, _| {},
    )
    .await
    .unwrap_err();
    assert!(named.to_string().contains("no tenant level"), "{named}");
    let found = backfill_partitions(&store, &layout, &request(None))
        .await
        .expect("partitions");
    assert_eq!(found, [ten.clone(), eleven.clone()]);

    let gc_found = crate::manifest::gc::find_partitions(&store, &Default::default())
        .await
        .expect("GC's partitions");
    assert_eq!(gc_found, std::slice::from_ref(&ten));
    let hours =
        crate::manifest::hours_files(&store, &layout, None, "2026-11-29T09", "2026-11-29T12")
            .await
            .expect("files of a range");
    let found: Vec<&PartitionId> = hours.iter().map(|(p, _)| p).collect();
    assert_eq!(found, [&ten, &eleven]);
}

/// Each usual writer's object, named and announced as the writer does, dispatches its hour
/// alone under the writer's layout and input names: Vector's `<unix time>-<uuid>.parquet`
/// (`Put`), Fluent Bit's extension-less name in a minute directory (`Put`), an OpenTelemetry
/// pipeline's file in a Hive minute directory (EventBridge's `Object Created`), Firehose's
/// extension-less multipart upload (`CompleteMultipartUpload`). A writer's side file is not an
/// input and dispatches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_writers_objects_and_events_dispatch_their_hour() {
    let notification = |name: &str, key: &str| {
        json!({"Records": [{
            "eventSource": "aws:s3", "eventName": format!("ObjectCreated:{name}"),
            "s3": {"bucket": {"name": "logs-bucket"}, "object": {"key": key}}}]})
    };
    let eventbridge = |reason: &str, key: &str| {
        json!({
            "version": "0", "detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "logs-bucket"}, "object": {"key": key}, "reason": reason}
        })
    };
    let ten = PartitionId::hour_only(at("2026-11-29T10:00:00Z")).expect("an hour");
    for (layout, names, object, event) in [
        (
            "logs/dt=%Y%m%d/hour=%H",
            "*.parquet",
            "1795946700-164ea117-3d5f-4d20-9203-0ae06303173f.parquet",
            notification(
                "Put",
                "logs/dt=20261129/hour=10/1795946700-164ea117-3d5f-4d20-9203-0ae06303173f.parquet",
            ),
        ),
        (
            "logs/year=%Y/month=%m/day=%d/hr=%H/min=%M",
            "*",
            "min=07/07-9b6584b6",
            notification(
                "Put",
                "logs/year=2026/month=11/day=29/hr=10/min=07/07-9b6584b6",
            ),
        ),
        (
            "otel/year=%Y/month=%m/day=%d/hour=%H/minute=%M",
            "*.parquet",
            "minute=09/logs_3438029371176977260.parquet",
            eventbridge(
                "PutObject",
                "otel/year=2026/month=11/day=29/hour=10/minute=09/logs_3438029371176977260.parquet",
            ),
        ),
        (
            "firehose/%Y/%m/%d/%H",
            "*",
            "logs-stream-1-2026-11-29-10-09-01-3c0d34d1-7ebc-43a2-9aeb-1803d4867bff",
            notification(
                "CompleteMultipartUpload",
                "firehose/2026/11/29/10/logs-stream-1-2026-11-29-10-09-01-3c0d34d1-7ebc-43a2-9aeb-1803d4867bff",
            ),
        ),
    ] {
        let store = memory();
        let layout = KeyLayout::from_template(layout)
            .expect("layout")
            .with_input_names(crate::partition::InputNames::parse(names).expect("input names"));
        crate::testing::land_file(&store, &layout, &ten, object, 0, 50).await;
        let planner = Planner {
            layout: layout.clone(),
            ..planner(&store)
        };
        // A side file of the writer's, announced the same way, is no input.
        let side = event
            .to_string()
            .replace(object.rsplit('/').next().unwrap_or(object), "_SUCCESS");
        let side = serde_json::from_str(&side).expect("an event");
        let answer = (planner
            .handle(parse_invocation(&side).expect("an event"), closed())
            .await)
            .expect("handled");
        assert_eq!(answer.counts().dispatched, 0, "{layout:?}: {answer:?}");
        let answer = (planner
            .handle(parse_invocation(&event).expect("an event"), closed())
            .await)
            .expect("handled");
        assert_eq!(answer.counts().dispatched, 1, "{layout:?}: {answer:?}");
        let record = job::read_job(&store, &ten)
            .await
            .unwrap()
            .unwrap()
            .record
            .unwrap();
        assert_eq!(
            (record.tenant, record.hour.as_str()),
            (None, "2026-11-29T10")
        );
    }
}

/// A job that fits the invocation, with the fan-out state machine deployed, reads its record
/// and the partition's state once: the look at its size is where the job starts from. Its
/// report counts every request from the record's read on, the look's included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fits_reads_its_record_and_state_once_with_the_fan_out_deployed() {
    let requests = |deployed: bool| async move {
        let store = memory();
        let p = test_partition();
        for i in 0..3 {
            land(&store, &p, &format!("f{i}.parquet"), i * 100, 100).await;
        }
        dispatch_closed(&store, &p).await;
        let scratch = tempfile::tempdir().unwrap();
        let mut settings = CompactSettings::new(scratch.path());
        settings.fan_out = crate::options::FanOut::Auto;
        let (machine, started) = FanOutStateMachine::recording("arn:aws:states:::fan-out");
        let compactor = Compactor {
            store: store.clone(),
            layout: KeyLayout::default(),
            scope: KeyScope::for_store(&StoreUrl::Memory),
            settings,
            readiness: ReadinessConfig::default(),
            state_machine: deployed.then_some(machine),
            clock: crate::clock::SystemClock::shared(),
        };
        let invocation = Invocation::Compact {
            tenant: Some("acme".into()),
            hour: "2026-11-29T10".into(),
        };
        let CompactorAnswer::Jobs(jobs) = compactor.handle(invocation, None).await.unwrap() else {
            panic!("a job");
        };
        let report = &jobs[0].report;
        assert_eq!(report.status, Status::Compacted, "{report:?}");
        assert!(
            started.lock().unwrap().is_empty(),
            "it fits: nothing started"
        );
        report.cost.requests
    };
    let alone = requests(false).await;
    let deployed = requests(true).await;
    assert_eq!(deployed, alone, "the look read nothing the job read again");
    // The three inputs, the record and the manifest the symlink writer reads at least.
    assert!(alone.get >= 5, "{alone:?}");
}

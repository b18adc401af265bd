//! A job holds each output before its upload starts, so GC running all along never takes an
//! output about to be committed: not one whose upload outlasted the grace (S3 dates it at the
//! upload's start), nor the ranges of a fan-out whose merges run in waves past the grace. An
//! output that goes up in one PUT, committed by the same job, is protected by its own date
//! instead, and commits within half the grace of its PUT's start or not at all.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::{ObjectStore, PutResult};
use ourios_compaction::clock::{Clock, SystemClock};
use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::gc::collect_garbage;
use ourios_compaction::options::{CompactOptions, FanOut};
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::store::Store;
use ourios_compaction::store::hooked::{HookedStore, Inner, PutRequest, StoreHooks, StoreResult};
use ourios_compaction::testing::{
    MultipartDatingStore, SlowWriteStore, assert_live_exactly_once, land_files,
    multi_thread_runtime, test_partition,
};

/// The grace of these tests: short, so a slow upload outlasts it.
const GRACE: Duration = Duration::from_secs(4);

/// An in-memory store dating multipart objects as S3 does, whose output uploads each take
/// `upload` to complete and whose commits each take `commit` to land.
fn slow_s3_like_store(upload: Duration, commit: Duration) -> Store {
    let slow = SlowWriteStore::new(Arc::new(InMemory::new()), upload, commit);
    let dated = MultipartDatingStore::new(Arc::new(slow), SystemClock::shared());
    Store::from_object_store(Arc::new(dated), "memory://")
}

/// Compacts the test partition while GC runs on it every 100 ms with the same grace, and once
/// more after; returns the report.
async fn compact_while_collecting(store: &Store, options: &CompactOptions) -> CompactionReport {
    let (layout, partition) = (KeyLayout::default(), test_partition());
    let done = Arc::new(AtomicBool::new(false));
    let collector = {
        let (store, layout, partition, done) = (
            store.clone(),
            layout.clone(),
            partition.clone(),
            Arc::clone(&done),
        );
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                collect_garbage(&store, &layout, &partition, GRACE, false)
                    .await
                    .expect("gc");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let report = compact_partition(store, &layout, &partition, options)
        .await
        .expect("runs");
    done.store(true, Ordering::Relaxed);
    collector.await.expect("collector");
    collect_garbage(store, &layout, &partition, GRACE, false)
        .await
        .expect("gc");
    report
}

fn options(scratch: &std::path::Path) -> CompactOptions {
    let mut options = CompactOptions::new(scratch);
    options.settings.gc_grace = GRACE;
    options.settings.budget_bytes = 1 << 20;
    options
}

#[test]
fn an_output_whose_upload_outlasts_the_grace_is_committed_and_kept() {
    multi_thread_runtime(2).block_on(async {
        // The output appears older than the grace, and its commit lands a second later: GC
        // runs ten times meanwhile.
        let store = slow_s3_like_store(GRACE + Duration::from_secs(1), Duration::from_secs(1));
        let (layout, partition) = (KeyLayout::default(), test_partition());
        let tags = land_files(&store, &layout, &partition, 3, 200).await;
        let scratch = tempfile::tempdir().expect("scratch");
        let report = compact_while_collecting(&store, &options(scratch.path())).await;
        assert_eq!(report.status, Status::Compacted, "{:?}", report.error);
        // The output, dated older than the grace the moment it appeared, is live and whole.
        assert_live_exactly_once(&store, &layout, &partition, 1, &tags, "after GC").await;
        let holds = store
            .list_sorted(&layout.fan_out_root(&partition))
            .await
            .expect("listing");
        assert!(holds.is_empty(), "the hold goes at the commit: {holds:?}");
    });
}

#[test]
fn a_fan_out_whose_merges_run_in_waves_past_the_grace_commits() {
    multi_thread_runtime(2).block_on(async {
        // Eight ranges merged two at a time, each upload taking a quarter of the grace: the
        // first range's output is older than half the grace long before the last is written.
        let store = slow_s3_like_store(GRACE / 4, Duration::from_millis(1500));
        let (layout, partition) = (KeyLayout::default(), test_partition());
        let tags = land_files(&store, &layout, &partition, 8, 1000).await;
        let scratch = tempfile::tempdir().expect("scratch");
        let mut options = options(scratch.path());
        options.settings.fan_out = FanOut::Ranges(8);
        options.settings.workers = 2;
        options.settings.row_group_bytes = Some(4 << 10);
        let report = compact_while_collecting(&store, &options).await;
        assert_eq!(report.status, Status::Compacted, "{:?}", report.error);
        let ranges = report.outputs.len();
        assert!(ranges > 4, "{ranges} ranges");
        assert_live_exactly_once(&store, &layout, &partition, ranges, &tags, "after GC").await;
        let left = store
            .list_sorted(&layout.fan_out_root(&partition))
            .await
            .expect("listing");
        assert!(left.is_empty(), "runs, records and holds go: {left:?}");
    });
}

/// A committer checks its deadline, then stalls (a paused process, a write retried for
/// minutes) while GC takes its output as an orphan: its write lands after GC's, so it finds
/// the output condemned and commits nothing, and its inputs stay live.
#[test]
fn a_commit_that_stalls_past_its_hold_commits_nothing_once_gc_took_its_output() {
    use ourios_compaction::manifest::{Manifest, commit, load_latest};
    use ourios_compaction::testing::{commit_request, put_bytes};
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        let tags = land_files(&store, &layout, &partition, 1, 10).await;
        let live = ourios_compaction::testing::live_set(&store, &layout, &partition).await;
        assert_eq!(live.live.len(), 1, "{:?}", live.live);
        let input = live.live[0].to_string();
        // The stalled job's output, uploaded; its hold long gone (no grace: no hold at all).
        let output = format!(
            "{}/part-00-stalled.parquet",
            layout.compacted_dir(&partition)
        );
        put_bytes(&store, &output, bytes::Bytes::from_static(b"an output")).await;
        let base = Manifest::empty(&partition.relative_dir());
        // The stall: GC runs and takes the unreferenced output.
        let gc = collect_garbage(&store, &layout, &partition, Duration::ZERO, false)
            .await
            .expect("gc");
        assert_eq!(gc.plan.orphans.len(), 1, "{:?}", gc.plan);
        let condemned = load_latest(&store, &layout, &partition)
            .await
            .expect("latest");
        assert_eq!(condemned.condemned.len(), 1, "GC condemned it in a version");
        // The write lands: on the version GC took, so it reads again and commits nothing.
        let request = commit_request("stalled", &input, &output);
        let landed = commit(&store, &layout, &partition, &base, &request).await;
        assert!(
            matches!(landed, Err(ourios_compaction::Error::Deadline { .. })),
            "{landed:?}"
        );
        let latest = load_latest(&store, &layout, &partition)
            .await
            .expect("latest");
        assert!(!latest.references(&output), "{latest:?}");
        assert_live_exactly_once(&store, &layout, &partition, 1, &tags, "after the stall").await;
    });
}

/// The system's clocks, moved on by `offset_ms` (a job that pauses: its monotonic clock runs
/// on while nothing happens).
#[derive(Debug)]
struct PausingClock {
    system: SystemClock,
    offset_ms: AtomicU64,
}

impl Clock for PausingClock {
    fn now_ms(&self) -> i64 {
        let offset = i64::try_from(self.offset_ms.load(Ordering::SeqCst)).unwrap_or(i64::MAX);
        self.system.now_ms().saturating_add(offset)
    }

    fn monotonic_ms(&self) -> u64 {
        (self.system.monotonic_ms()).saturating_add(self.offset_ms.load(Ordering::SeqCst))
    }
}

/// Records every key put, and pauses the job's clock by `pause_ms` while the output's PUT is
/// on its way.
#[derive(Debug)]
struct SlowOutputPut {
    clock: Arc<PausingClock>,
    pause_ms: u64,
    puts: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl StoreHooks for SlowOutputPut {
    const NAME: &'static str = "SlowOutputPut";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        let key = put.location.to_string();
        let output = key.starts_with("compacted/") && key.contains("/part-");
        if output {
            self.clock
                .offset_ms
                .fetch_add(self.pause_ms, Ordering::SeqCst);
        }
        self.puts.lock().expect("puts").push(key);
        put.forward(inner).await
    }
}

/// Compacts the test partition (three small files) under a grace of a minute while the
/// output's one PUT takes `pause_ms` of the job's clock; returns the report, the keys put and
/// the store, beside the files' tags.
fn compact_with_a_slow_put(pause_ms: u64) -> (CompactionReport, Vec<String>, Store, BTreeSet<i64>) {
    multi_thread_runtime(2).block_on(async {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        let tags = land_files(&plain, &layout, &partition, 3, 200).await;
        let clock = Arc::new(PausingClock {
            system: SystemClock::new(),
            offset_ms: AtomicU64::new(0),
        });
        let hooks = Arc::new(SlowOutputPut {
            clock: Arc::clone(&clock),
            pause_ms,
            puts: std::sync::Mutex::new(Vec::new()),
        });
        let store = Store::from_object_store(
            Arc::new(HookedStore::wrap(inner, Arc::clone(&hooks))),
            "memory://",
        );
        let scratch = tempfile::tempdir().expect("scratch");
        let mut options = options(scratch.path());
        options.settings.gc_grace = Duration::from_secs(60);
        options.clock = clock;
        let report = compact_partition(&store, &layout, &partition, &options)
            .await
            .expect("runs");
        let puts = hooks.puts.lock().expect("puts").clone();
        (report, puts, plain, tags)
    })
}

#[test]
fn an_output_in_one_put_commits_without_a_hold_within_half_the_grace_of_its_put() {
    // 20 s of the job's clock pass during the PUT: within the 29 s half a minute's grace
    // leaves (less a second for the stores' resolution).
    let (report, puts, store, tags) = compact_with_a_slow_put(20_000);
    assert_eq!(report.status, Status::Compacted, "{:?}", report.error);
    let holds: Vec<&String> = puts.iter().filter(|k| k.contains("/holds/")).collect();
    assert!(holds.is_empty(), "no hold is written: {holds:?}");
    let outputs = puts.iter().filter(|k| k.contains("/part-")).count();
    assert_eq!(outputs, 1, "the output goes up in one PUT: {puts:?}");
    multi_thread_runtime(1).block_on(async {
        let (layout, partition) = (KeyLayout::default(), test_partition());
        assert_live_exactly_once(&store, &layout, &partition, 1, &tags, "committed").await;
    });
}

#[test]
fn an_output_in_one_put_past_half_the_grace_of_its_put_commits_nothing() {
    // 31 s pass during the PUT: GC could take the output a minute after its date, and delete
    // it within half a minute of that, so the job must not commit it.
    let (report, puts, store, tags) = compact_with_a_slow_put(31_000);
    assert_eq!(report.status, Status::Timeout, "{:?}", report.error);
    assert!(!puts.iter().any(|k| k.contains("/holds/")), "{puts:?}");
    multi_thread_runtime(1).block_on(async {
        let (layout, partition) = (KeyLayout::default(), test_partition());
        // Nothing committed: the three inputs are still the live set.
        assert_live_exactly_once(&store, &layout, &partition, 3, &tags, "not committed").await;
    });
}

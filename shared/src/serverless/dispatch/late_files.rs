//! The late-file policy as deployed: a compacted hour receives late files one at a time over a
//! day, on a store whose clock the test moves. The planner's decisions (for each event and each
//! sweep) and the compactor's handler run as the template wires them: each job record the
//! planner writes is handed to the compactor, whose job ends it or re-arms it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

use super::compactor::{Compactor, CompactorAnswer};
use super::job_lifecycle::RecordAction;
use super::*;
use crate::late::{LateAction, LatePolicy, LateReason};
use crate::manifest::load_latest;
use crate::report::Status;
use crate::serverless::events::{KeyScope, parse_invocation};
use crate::settings::CompactSettings;
use crate::store::StoreUrl;
use crate::testing::{HostClock, StoreState, VirtualStore};
use crate::testing::{parquet_bytes, put_bytes, rows_batch, test_partition};

/// The deployment over a virtual store: the planner's settings, the compactor, and what its
/// jobs wrote.
struct Deployment {
    state: Arc<StoreState>,
    store: Store,
    layout: KeyLayout,
    partition: PartitionId,
    config: ReadinessConfig,
    compactor: Compactor,
    /// Bytes of the outputs each merge committed, in order.
    merges: Vec<u64>,
    /// Jobs that only checked.
    checks: usize,
    _scratch: tempfile::TempDir,
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

impl Deployment {
    fn new(policy: LatePolicy) -> Self {
        let state = Arc::new(StoreState::default());
        state.now_ms.store(
            at("2026-11-29T10:05:00Z").timestamp_millis(),
            Ordering::SeqCst,
        );
        let virtual_store = VirtualStore {
            state: Arc::clone(&state),
        };
        let store = Store::from_object_store(Arc::new(virtual_store), "memory://");
        let scratch = tempfile::tempdir().unwrap();
        // The sweep's window is soon past the hour: it finds the late files by their record.
        let config = ReadinessConfig {
            late: policy,
            sweep_hours: 1,
            ..ReadinessConfig::default()
        };
        let clock = Arc::new(HostClock {
            store: Arc::clone(&state),
            skew_ms: 0,
            origin_ms: state.now(),
        });
        let compactor = Compactor {
            store: store.clone(),
            layout: KeyLayout::default(),
            scope: KeyScope::for_store(&StoreUrl::Memory),
            settings: CompactSettings::new(scratch.path()),
            readiness: config.clone(),
            state_machine: None,
            clock,
        };
        Self {
            state,
            store,
            layout: KeyLayout::default(),
            partition: test_partition(),
            config,
            compactor,
            merges: Vec::new(),
            checks: 0,
            _scratch: scratch,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(self.state.now()).unwrap()
    }

    fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap();
        self.state.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Lands an ingest file of `rows` rows of the hour, numbered from `first`.
    async fn land(&self, name: &str, first: i64, rows: i64) -> u64 {
        let (start, _) = self.partition.time_range_nanos();
        let batch: Vec<_> = (first..first + rows)
            .map(|t| {
                let service = format!("svc{}", t % 5);
                (
                    Some(service),
                    start + (t * 7_919_000) % 3_600_000_000_000,
                    t,
                )
            })
            .collect();
        let bytes = parquet_bytes(&[rows_batch(&batch)], 1024);
        let size = bytes.len() as u64;
        put_bytes(&self.store, &self.ingest_key(name), bytes).await;
        size
    }

    fn ingest_key(&self, name: &str) -> String {
        format!("{}/{name}", self.layout.ingest_dir(&self.partition))
    }

    /// The planner, for an event of a file of the partition.
    async fn event(&mut self) -> PartitionOutcome {
        let (store, layout, p) = (&self.store, &self.layout, &self.partition);
        let mode = DispatchMode::default();
        let outcome = dispatch_partition(store, layout, p, self.now(), &self.config, mode)
            .await
            .unwrap();
        self.run_jobs().await;
        outcome
    }

    /// The scheduled sweep.
    async fn sweep(&mut self) -> Vec<PartitionOutcome> {
        let report = sweep_until(&self.store, &self.layout, self.now(), &self.config, None)
            .await
            .unwrap();
        self.run_jobs().await;
        report.partitions
    }

    /// Hands the job record, while there is one, to the compactor (a re-armed record is handed
    /// again, as its write is an event).
    async fn run_jobs(&mut self) {
        for _ in 0..10 {
            if job::read_job(&self.store, &self.partition)
                .await
                .unwrap()
                .is_none()
            {
                return;
            }
            let event = json!({
                "version": "0", "id": "e", "detail-type": "Object Created", "source": "aws.s3",
                "account": "1", "time": self.now().to_rfc3339(), "region": "eu-west-1",
                "resources": [], "detail": {
                    "bucket": {"name": "logs-bucket"},
                    "object": {"key": crate::partition::job_key(&self.partition), "size": 1}
                }
            });
            let invocation = parse_invocation(&event).unwrap();
            let answer = self.compactor.handle(invocation, None).await.unwrap();
            let CompactorAnswer::Jobs(jobs) = answer else {
                panic!("a job record is a job");
            };
            let mut re_armed = false;
            for job in jobs {
                let report = &job.report;
                assert!(report.status.is_success(), "{report:?}");
                if report.late_check.is_some() {
                    self.checks += 1;
                }
                if !report.outputs.is_empty() {
                    self.merges
                        .push(report.outputs.iter().map(|o| o.bytes).sum());
                }
                re_armed |= job.record == RecordAction::ReArmed;
            }
            if !re_armed {
                return;
            }
        }
        panic!("the job record was re-armed ten times in a row");
    }

    /// The keys in the store now.
    fn keys(&self) -> Vec<String> {
        self.state.keys().into_iter().collect()
    }

    /// The live, quarantined and unaddressable files of the partition.
    async fn files(&self) -> crate::manifest::PartitionFiles {
        crate::manifest::partition_files(&self.store, &self.layout, &self.partition)
            .await
            .unwrap()
    }

    /// Bytes of the live compacted outputs.
    async fn compacted_bytes(&self) -> u64 {
        let manifest = load_latest(&self.store, &self.layout, &self.partition)
            .await
            .unwrap();
        manifest.compacted.iter().map(|c| c.bytes).sum()
    }
}

/// A day of late files landing one at a time into a compacted hour (one every 14.4 minutes)
/// costs one rewrite of the hour: each is checked at once (a damaged one quarantined then,
/// with nothing rewritten), they wait, readers see them live meanwhile, and the sweep merges
/// them all together once the first has waited the day. Compaction writes under twice the
/// hour's compacted bytes, and the hour ends holding its output and the quarantined file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_of_late_files_rewrites_the_hour_once() {
    let mut deployment = Deployment::new(LatePolicy::default());
    for i in 0..12 {
        deployment
            .land(&format!("f{i}.parquet"), i * 5000, 5000)
            .await;
    }
    deployment.advance(Duration::from_secs(70 * 60)); // 11:15, closed and past the grace
    let first = deployment.event().await;
    assert_eq!(first.decision, OutcomeDecision::Dispatched, "{first:?}");
    assert_eq!(deployment.merges.len(), 1);
    let hour_bytes = deployment.compacted_bytes().await;

    let day = Duration::from_secs(24 * 3600);
    let (mut late_bytes, mut late_rows) = (0, 0);
    for k in 0..100 {
        deployment.advance(day / 100);
        let name = format!("late-{k:03}.parquet");
        if k == 50 {
            let damaged = bytes::Bytes::from_static(b"PAR1 this is not a parquet file PAR1");
            put_bytes(&deployment.store, &deployment.ingest_key(&name), damaged).await;
        } else {
            late_bytes += deployment.land(&name, 100_000 + k * 20, 20).await;
            late_rows += 20;
        }
        let outcome = deployment.event().await;
        let verdict = outcome.late.unwrap_or_else(|| panic!("{outcome:?}"));
        assert_eq!(verdict.action, LateAction::Check, "{}", outcome.reason);
        assert_eq!(outcome.decision, OutcomeDecision::Dispatched);
        assert!(outcome.reason.contains("checked now"), "{}", outcome.reason);
        assert_eq!(
            deployment.checks,
            k as usize + 1,
            "each late file checked at once"
        );
        if k == 50 {
            let manifest =
                load_latest(&deployment.store, &deployment.layout, &deployment.partition)
                    .await
                    .unwrap();
            let quarantined: Vec<_> = manifest
                .quarantined
                .iter()
                .map(|q| q.key.as_str())
                .collect();
            assert_eq!(quarantined, [deployment.ingest_key(&name)]);
        }
        if k % 4 == 3 {
            for swept in deployment.sweep().await {
                assert_ne!(swept.decision, OutcomeDecision::Dispatched, "{swept:?}");
            }
        }
        assert_eq!(
            deployment.merges.len(),
            1,
            "late file {k}: no merge within the wait"
        );
    }
    assert!(
        (late_bytes as f64) < 0.5 * hour_bytes as f64,
        "the late files stay under the share ({late_bytes} of {hour_bytes}): the wait decides"
    );
    // Every good late file is live for readers while it waits.
    let files = deployment.files().await;
    assert_eq!(files.live.len(), 1 + 99, "{:?}", files.live);

    // The first late file has waited the day: the sweep merges them all, once.
    deployment.advance(Duration::from_secs(15 * 60));
    let swept = deployment.sweep().await;
    let merged = (swept.iter())
        .find(|o| o.late.is_some_and(|l| l.action == LateAction::Merge))
        .unwrap_or_else(|| panic!("{swept:?}"));
    assert_eq!(merged.late.unwrap().reason, LateReason::WaitOver);
    assert_eq!(deployment.merges.len(), 2, "{:?}", deployment.merges);
    let rewritten: u64 = deployment.merges[1..].iter().sum();
    assert!(
        rewritten < 2 * hour_bytes,
        "a day of late files wrote {rewritten} bytes, the hour is {hour_bytes}"
    );
    let manifest = load_latest(&deployment.store, &deployment.layout, &deployment.partition)
        .await
        .unwrap();
    let rows: u64 = manifest.compacted.iter().map(|c| c.rows).sum();
    assert_eq!(
        rows,
        12 * 5000 + late_rows as u64,
        "every late row merged, none twice"
    );
    let written: u64 = deployment.merges.iter().sum();
    let final_bytes = deployment.compacted_bytes().await;
    assert!(
        written < 2 * final_bytes,
        "write amplification {written} / {final_bytes}"
    );

    // Past the GC grace, the sweep's jobs leave the hour its output and the damaged file.
    deployment.advance(Duration::from_secs(60 * 60));
    deployment.sweep().await;
    let keys = deployment.keys();
    let data: Vec<&String> = keys.iter().filter(|k| k.starts_with("data/")).collect();
    assert_eq!(
        data,
        [&deployment.ingest_key("late-050.parquet")],
        "{keys:?}"
    );
    assert!(
        !keys.iter().any(|k| k.starts_with("_compaction/late/")),
        "nothing waits: {keys:?}"
    );
}

/// Late files whose bytes reach the share of the hour's compacted bytes are merged at once;
/// with the policy of a compaction asked for by hand, any late file is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_files_reaching_the_share_are_merged_at_once() {
    let policy = LatePolicy {
        wait: Duration::from_secs(24 * 3600),
        share: 0.5,
    };
    let mut deployment = Deployment::new(policy);
    deployment.land("f0.parquet", 0, 4000).await;
    deployment.advance(Duration::from_secs(70 * 60));
    deployment.event().await;
    assert_eq!(deployment.merges.len(), 1);

    deployment.advance(Duration::from_secs(60));
    deployment.land("late-small.parquet", 10_000, 20).await;
    let small = deployment.event().await;
    assert_eq!(small.late.map(|l| l.action), Some(LateAction::Check));
    assert_eq!(deployment.merges.len(), 1);

    deployment.advance(Duration::from_secs(60));
    deployment.land("late-large.parquet", 20_000, 3000).await;
    let large = deployment.event().await;
    let verdict = large.late.unwrap();
    assert_eq!(
        (verdict.action, verdict.reason),
        (LateAction::Merge, LateReason::ShareReached)
    );
    assert!(
        large.reason.contains("reached the 50.0% share"),
        "{}",
        large.reason
    );
    assert_eq!(deployment.merges.len(), 2);
    let files = deployment.files().await;
    assert_eq!(
        files.live.len(),
        1,
        "both late files merged: {:?}",
        files.live
    );

    // A compaction asked for by hand merges a late file that would wait.
    deployment.advance(Duration::from_secs(60));
    deployment.land("late-by-hand.parquet", 30_000, 20).await;
    let waits = deployment.event().await;
    assert_eq!(waits.late.map(|l| l.action), Some(LateAction::Check));
    let by_hand = crate::serverless::events::Invocation::Compact {
        tenant: deployment.partition.tenant().map(str::to_string),
        hour: deployment.partition.hour_label(),
    };
    let answer = deployment.compactor.handle(by_hand, None).await.unwrap();
    let CompactorAnswer::Jobs(jobs) = answer else {
        panic!("a compaction by hand is a job");
    };
    assert_eq!(jobs[0].report.status, Status::Compacted);
    assert_eq!(
        jobs[0].report.inputs.files, 2,
        "the output and the late file"
    );
}

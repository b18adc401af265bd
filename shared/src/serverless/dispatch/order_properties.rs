//! Property tests: the planner's decisions do not depend on the order of the listing it
//! reads or of the event records it is sent (duplicates included).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use object_store::ObjectMeta;
use object_store::memory::InMemory;
use object_store::path::Path;
use proptest::prelude::*;

use super::planner::{Planner, PlannerAnswer};
use super::tests::s3_event;
use crate::manifest::{CompactedFile, Manifest, QuarantinedFile, RetiredFile, live_set};
use crate::object_key::ObjectKey;
use crate::partition::{KeyLayout, PartitionId};
use crate::serverless::events::{KeyScope, parse_invocation};
use crate::serverless::readiness::{JobState, PartitionFacts, ReadinessConfig, plan_partition};
use crate::store::{Store, StoreUrl};
use crate::testing::{multi_thread_runtime, parquet_bytes, put_bytes, rows_batch};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("valid time")
        .with_timezone(&Utc)
}

/// A listing of the partition's ingest directory: ingest files, side files and a file one
/// directory down, of the given sizes.
fn listing(partition: &PartitionId, sizes: &[u64]) -> Vec<ObjectMeta> {
    let dir = KeyLayout::default().ingest_dir(partition);
    sizes
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let name = match i % 5 {
                3 => format!("_SUCCESS{i}"),
                4 => format!("nested/f{i}.parquet"),
                _ => format!("f{i}.parquet"),
            };
            ObjectMeta {
                location: Path::from(format!("{dir}/{name}")),
                last_modified: at("2026-11-29T10:30:00Z"),
                size: *size,
                e_tag: None,
                version: None,
            }
        })
        .collect()
}

/// A manifest that compacted some files and retired or quarantined some of the listing.
fn manifest(partition: &PartitionId, listed: &[ObjectMeta], num_compacted: usize) -> Manifest {
    let mut manifest = Manifest::empty(&partition.relative_dir());
    manifest.version = num_compacted as u64;
    for i in 0..num_compacted {
        manifest.compacted.push(CompactedFile {
            key: crate::testing::key(&format!(
                "compacted/{}/part-{i}.parquet",
                partition.relative_dir()
            )),
            rows: 1,
            bytes: 1,
            input_set: String::new(),
            range: None,
        });
    }
    for (i, meta) in listed.iter().enumerate() {
        let key = ObjectKey::from(&meta.location);
        match i % 7 {
            1 => manifest.retired.push(RetiredFile {
                key,
                retired_at_ms: 0,
                retired_in: 1,
            }),
            2 => manifest.quarantined.push(QuarantinedFile {
                key,
                reason: "bad".into(),
            }),
            _ => {}
        }
    }
    manifest
}

/// The listing's entries in the order `keys` sorts them (a permutation from random keys).
fn permuted<T: Clone>(items: &[T], keys: &[u32]) -> Vec<T> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| keys.get(i).copied().unwrap_or(0));
    order.into_iter().map(|i| items[i].clone()).collect()
}

proptest! {
    /// The facts and the decision for a partition are the same whatever order the store
    /// lists its ingest directory in, at any time and in any job state.
    #[test]
    fn the_decision_ignores_the_listing_order(
        sizes in prop::collection::vec(1u64..(64 << 20), 0..40),
        order in prop::collection::vec(any::<u32>(), 40),
        num_compacted in 0usize..3,
        minutes_after in 0i64..240,
        job_minutes_ago in prop::option::of(0i64..120),
        requested in any::<bool>(),
    ) {
        let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
        let dir = KeyLayout::default().ingest_dir(&partition);
        let listed = listing(&partition, &sizes);
        let manifest = manifest(&partition, &listed, num_compacted);
        let now = at("2026-11-29T10:00:00Z") + chrono::Duration::minutes(minutes_after);
        let job = match job_minutes_ago {
            Some(m) => JobState::Present { written_at: now - chrono::Duration::minutes(m) },
            None => JobState::Absent,
        };
        let config = ReadinessConfig::default();
        let decide = |listing: &[ObjectMeta]| {
            let live = live_set(&KeyLayout::default(), &dir, listing, &manifest);
            let facts = PartitionFacts::new(&partition, &live, &manifest);
            let decision = plan_partition(&facts, job, now, &config, requested);
            (live, facts, decision.label(), decision.to_string())
        };
        prop_assert_eq!(decide(&listed), decide(&permuted(&listed, &order)));
    }
}

/// Tenants and hours of the fixed world the event test plans: closed and open hours, with
/// and without files.
const WORLD: [(&str, &str, usize); 5] = [
    ("acme", "2026-11-29T10", 3),
    ("acme", "2026-11-29T11", 1),
    ("beta", "2026-11-29T10", 2),
    ("beta", "2026-11-29T12", 2),
    ("gamma", "2026-11-29T10", 0),
];

/// The event keys of the world: every ingest file, a side file per partition, and a key
/// outside the layout.
fn world_keys() -> Vec<String> {
    let layout = KeyLayout::default();
    let mut keys = vec!["elsewhere/f.parquet".to_string()];
    for (tenant, hour, num_files) in WORLD {
        let partition = PartitionId::parse(tenant, hour).expect("partition");
        let dir = layout.ingest_dir(&partition);
        keys.push(format!("{dir}/_SUCCESS"));
        keys.extend((0..num_files.max(1)).map(|i| format!("{dir}/f{i}.parquet")));
    }
    keys
}

/// A store holding the world's ingest files.
async fn world() -> Store {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    for (tenant, hour, num_files) in WORLD {
        let partition = PartitionId::parse(tenant, hour).expect("partition");
        let (start, _) = partition.time_range_nanos();
        for i in 0..num_files {
            let rows = [(Some("api".to_string()), start + i as i64, i as i64)];
            let key = format!(
                "{}/f{i}.parquet",
                KeyLayout::default().ingest_dir(&partition)
            );
            put_bytes(&store, &key, parquet_bytes(&[rows_batch(&rows)], 64)).await;
        }
    }
    store
}

/// What one planner invocation decided, in a form that ignores order and job ids: each
/// partition's decision and reason, the ignored records, and the job records in the store.
async fn plan_events(keys: &[String]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let store = world().await;
    let planner = Planner {
        store: store.clone(),
        layout: KeyLayout::default(),
        scope: KeyScope::for_store(&StoreUrl::Memory),
        readiness: ReadinessConfig::default(),
        backfill_interval: std::time::Duration::ZERO,
    };
    let invocation = parse_invocation(&s3_event(keys)).expect("an event");
    let answer = planner
        .handle(invocation, at("2026-11-29T12:30:00Z"))
        .await
        .expect("handled");
    let PlannerAnswer::Notifications(handled) = answer else {
        panic!("a notifications answer");
    };
    assert!(handled.rejected.is_empty() && handled.failed.is_empty());
    let mut partitions: Vec<String> = handled
        .partitions
        .iter()
        .map(|p| {
            format!(
                "{} {} {} {}",
                p.tenant.as_deref().unwrap_or("-"),
                p.hour,
                p.decision,
                p.reason
            )
        })
        .collect();
    partitions.sort();
    let mut ignored: Vec<String> = handled
        .ignored
        .iter()
        .map(|i| format!("{:?} {:?} {}", i.key, i.item, i.reason))
        .collect();
    ignored.sort();
    let mut jobs: Vec<String> = Vec::new();
    for (tenant, hour, _) in WORLD {
        let partition = PartitionId::parse(tenant, hour).expect("partition");
        if super::job::read_job(&store, &partition)
            .await
            .expect("read")
            .is_some()
        {
            jobs.push(partition.relative_dir());
        }
    }
    (partitions, ignored, jobs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The partitions dispatched, their decisions, the records ignored and the job records
    /// written are the same whatever order the records arrive in, duplicates included.
    #[test]
    fn the_dispatch_ignores_the_order_of_events(
        order in prop::collection::vec(any::<u32>(), 32),
        duplicates in prop::collection::vec(0usize..32, 0..8),
    ) {
        let keys = world_keys();
        let runtime = multi_thread_runtime(2);
        let expected = runtime.block_on(plan_events(&keys));
        // Some partition is dispatched and some is not: the comparison is not vacuous.
        prop_assert!(expected.0.iter().any(|p| p.contains(" dispatched ")));
        prop_assert!(expected.0.iter().any(|p| !p.contains(" dispatched ")));
        let mut shuffled = permuted(&keys, &order);
        for &d in &duplicates {
            let key = shuffled[d % shuffled.len()].clone();
            shuffled.push(key);
        }
        let shuffled = permuted(&shuffled, &order);
        let mut got = runtime.block_on(plan_events(&shuffled));
        // A duplicated ignored record is listed twice.
        got.1.dedup();
        let mut want = expected;
        want.1.dedup();
        prop_assert_eq!(got, want);
    }
}

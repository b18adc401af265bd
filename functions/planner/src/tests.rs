//! Every payload in `events/` through the real handler, with the outcome each must produce.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use object_store::memory::InMemory;
use ourios_compaction::dispatch::invocation::Planner;
use ourios_compaction::dispatch::job::read_job;
use ourios_compaction::events::KeyScope;
use ourios_compaction::partition::{Layout, PartitionId};
use ourios_compaction::plan::ReadinessConfig;
use ourios_compaction::store::{Store, StoreUrl};
use ourios_compaction::testing::{
    event_file_names, load_event, parquet_bytes, put_bytes, rows_batch,
};
use serde_json::{Value, json};

use crate::handler::handle;

fn partition() -> PartitionId {
    PartitionId::parse("acme", "2026-11-29T10").expect("valid partition")
}

/// After the hour closed and its lateness grace passed.
fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .expect("valid time")
        .with_timezone(&Utc)
}

/// A fresh store holding ingest files in acme's hour 10, and a planner on it.
async fn setup() -> Planner {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let p = partition();
    let (start, _) = p.time_range_nanos();
    for name in ["batch 0001.parquet", "part-0003.parquet"] {
        let rows = [(Some("api".to_string()), start + 1, 1)];
        let key = format!("{}/{name}", Layout::default().ingest_dir(&p));
        put_bytes(&store, &key, parquet_bytes(&[rows_batch(&rows)], 64)).await;
    }
    Planner {
        store,
        layout: Layout::default(),
        scope: KeyScope::for_store(&StoreUrl::Memory),
        readiness: ReadinessConfig::default(),
        backfill_interval: Duration::ZERO,
    }
}

async fn has_job(planner: &Planner) -> bool {
    read_job(&planner.store, &partition())
        .await
        .expect("job read")
        .is_some()
}

fn dispatched_acme_10() -> Value {
    json!([{"tenant": "acme", "hour": "2026-11-29T10", "decision": "dispatched"}])
}

/// The parts of `got` that `want` names (a subset check on objects, exact on arrays' length).
fn assert_subset(got: &Value, want: &Value, path: &str) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, wv) in w {
                let gv = g
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k} missing in {got}"));
                assert_subset(gv, wv, &format!("{path}.{k}"));
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{path}: {got} vs {want}");
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                assert_subset(gv, wv, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(got, want, "{path}"),
    }
}

enum Expect {
    /// Ok with this (subset of a) body; and whether a job record exists afterwards.
    Ok(Value, bool),
    /// An error naming each of these strings; and whether a job record exists afterwards.
    Err(&'static [&'static str], bool),
}

fn expectation(file: &str) -> Expect {
    match file {
        "s3-put-encoded-keys.json" => Expect::Ok(
            json!({"partitions": dispatched_acme_10(), "ignored": []}),
            true,
        ),
        "sns-wrapped.json" => Expect::Ok(
            json!({"partitions": dispatched_acme_10(), "ignored": []}),
            true,
        ),
        "eventbridge-object-created.json" => Expect::Ok(
            json!({"partitions": dispatched_acme_10(), "ignored": []}),
            true,
        ),
        "s3-test-event.json" => Expect::Ok(
            json!({"partitions": [], "ignored": [{"item": "s3:TestEvent for bucket \"logs-bucket\"", "reason": "s3:TestEvent"}]}),
            false,
        ),
        "s3-object-removed.json" => Expect::Ok(
            json!({"partitions": [], "ignored": [{
                "key": "data/tenant=acme/year=2026/month=11/day=29/hour=10/part-0003.parquet",
                "reason": "event creates no object"}]}),
            false,
        ),
        "s3-compactor-outputs.json"
        | "compactor-job-created.json"
        | "compactor-job-eventbridge.json" => Expect::Ok(json!({"partitions": []}), false),
        "s3-hostile-keys.json" => Expect::Err(
            &[
                "6 record(s)",
                "hour=10/../../../compacted/x.parquet",
                "month=13",
                "hour=25",
                "tenant=ac$me",
                "tenant=acme//year",
                "part-0009.parquet%ZZ",
            ],
            // The valid record was dispatched before the invocation failed.
            true,
        ),
        "sqs-batch-one-bad-message.json" => Expect::Ok(
            json!({"batchItemFailures": [{"itemIdentifier": "2e1424d4-f796-459a-8184-9c92662be6da"}]}),
            true,
        ),
        "eventbridge-scheduled-sweep.json" => {
            Expect::Ok(json!({"partitions": dispatched_acme_10()}), true)
        }
        "backfill.json" => Expect::Ok(
            json!({"scheduled": 1, "considered": 4, "dry_run": false, "partitions": dispatched_acme_10()}),
            true,
        ),
        "not-an-event.json" => Expect::Err(&["not an event"], false),
        "compactor-direct.json" => Expect::Err(&["invoke the compactor"], false),
        other => panic!("events/{other} has no expected planner outcome: add one here"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_file_through_the_handler() {
    let files = event_file_names();
    assert!(files.len() >= 12, "events/ holds every shape: {files:?}");
    for file in &files {
        let planner = setup().await;
        let result = handle(&planner, load_event(file), now()).await;
        match (expectation(file), result) {
            (Expect::Ok(want, job), Ok(got)) => {
                assert_subset(&got, &want, file);
                assert_eq!(has_job(&planner).await, job, "{file}: job record");
            }
            (Expect::Err(needles, job), Err(e)) => {
                let message = e.to_string();
                for needle in needles {
                    assert!(
                        message.contains(needle),
                        "{file}: {needle:?} not in {message}"
                    );
                }
                assert_eq!(has_job(&planner).await, job, "{file}: job record");
            }
            (Expect::Ok(..), Err(e)) => panic!("{file}: expected success, got {e}"),
            (Expect::Err(..), Ok(v)) => panic!("{file}: expected an error, got {v}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_every_event_file_creates_one_job() {
    let planner = setup().await;
    let mut job_ids = std::collections::BTreeSet::new();
    for file in [
        "eventbridge-object-created.json",
        "s3-put-encoded-keys.json",
        "sns-wrapped.json",
        "sqs-batch-one-bad-message.json",
        "s3-put-encoded-keys.json",
        "eventbridge-scheduled-sweep.json",
    ] {
        let _ = handle(&planner, load_event(file), now()).await;
        let job = read_job(&planner.store, &partition())
            .await
            .expect("read")
            .expect("a job exists");
        job_ids.insert(job.record.expect("readable").job_id);
    }
    assert_eq!(job_ids.len(), 1, "one job for the burst: {job_ids:?}");
}

#[test]
fn event_files_parse_as_the_aws_event_types() {
    use aws_lambda_events::event::{
        eventbridge::EventBridgeEvent, s3::S3Event, sns::SnsEvent, sqs::SqsEvent,
    };
    for (file, kind) in [
        ("s3-put-encoded-keys.json", "s3"),
        ("s3-object-removed.json", "s3"),
        ("s3-compactor-outputs.json", "s3"),
        ("s3-hostile-keys.json", "s3"),
        ("compactor-job-created.json", "s3"),
        ("sqs-batch-one-bad-message.json", "sqs"),
        ("sns-wrapped.json", "sns"),
        ("eventbridge-object-created.json", "eventbridge"),
        ("eventbridge-scheduled-sweep.json", "eventbridge"),
        ("compactor-job-eventbridge.json", "eventbridge"),
    ] {
        let value = load_event(file);
        let ok = match kind {
            "s3" => serde_json::from_value::<S3Event>(value).is_ok(),
            "sqs" => serde_json::from_value::<SqsEvent>(value).is_ok(),
            "sns" => serde_json::from_value::<SnsEvent>(value).is_ok(),
            _ => serde_json::from_value::<EventBridgeEvent>(value).is_ok(),
        };
        assert!(ok, "{file} is a realistic {kind} event");
    }
}

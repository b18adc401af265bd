//! Every payload in `events/` through the real handler, with the outcome each must produce.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use object_store::memory::InMemory;
use ourios_compaction::error::ErrorKind;
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::partition::SWEEP_CURSOR_KEY;
use ourios_compaction::serverless::dispatch::job::read_job;
use ourios_compaction::serverless::dispatch::planner::Planner;
use ourios_compaction::serverless::events::KeyScope;
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_compaction::store::{Store, StoreUrl};
use ourios_compaction::testing::{
    Fault, FaultyStore, RecordingStore, assert_http_answer, assert_role_covers, event_file_names,
    load_event, parquet_bytes, put_bytes, rows_batch, test_partition,
};
use serde_json::{Value, json};

use crate::handler::handle;

/// After the hour closed and its lateness grace passed.
fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .expect("valid time")
        .with_timezone(&Utc)
}

/// A fresh store holding ingest files in acme's hour 10, and a planner on it.
async fn setup() -> Planner {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let p = test_partition();
    let (start, _) = p.time_range_nanos();
    for name in ["batch 0001.parquet", "part-0003.parquet"] {
        let rows = [(Some("api".to_string()), start + 1, 1)];
        let key = format!("{}/{name}", KeyLayout::default().ingest_dir(&p));
        put_bytes(&store, &key, parquet_bytes(&[rows_batch(&rows)], 64)).await;
    }
    Planner {
        store,
        layout: KeyLayout::default(),
        scope: KeyScope::for_store(&StoreUrl::Memory),
        readiness: ReadinessConfig::default(),
        backfill_interval: Duration::ZERO,
    }
}

async fn has_job(planner: &Planner) -> bool {
    read_job(&planner.store, &test_partition())
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
    /// An HTTP response with this status and (subset of a) JSON body; and the job record.
    Http(u16, Value, bool),
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
        "eventbridge-object-created.json"
        | "eventbridge-object-created-encoded.json"
        | "minio-put.json" => Expect::Ok(
            json!({"partitions": dispatched_acme_10(), "ignored": []}),
            true,
        ),
        "function-url-minio-put.json" | "function-url-s3-base64.json" => Expect::Http(
            200,
            json!({"partitions": dispatched_acme_10(), "ignored": []}),
            true,
        ),
        // The job record's notification is the compactor's, ignored here like any key
        // outside the ingest prefix.
        "function-url-minio-job-created.json" => Expect::Http(
            200,
            json!({"partitions": [], "ignored": [{
                "key": "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=10.json",
                "reason": "outside the prefix this function watches"}]}),
            false,
        ),
        "minio-hostile-key.json" => {
            Expect::Err(&["1 record(s)", "hour=24/part-0004.parquet"], false)
        }
        "s3-spark-side-files.json" => {
            let side = |file: &str| {
                json!({"key": format!("data/tenant=acme/year=2026/month=11/day=29/hour=10/{file}"),
                       "reason": "writer side file, not data"})
            };
            Expect::Ok(
                json!({"partitions": [], "ignored": [
                    side("_SUCCESS"), side("_committed_123"), side("_started_123"),
                    side("part-0000.snappy.parquet.crc"), side(".part-0000.snappy.parquet.crc"),
                    side("_temporary/0/_temporary/attempt_202611291059_0001_m_000000_1/part-0000.snappy.parquet"),
                ]}),
                false,
            )
        }
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
        let result = handle(&planner, load_event(file), now(), None).await;
        match (expectation(file), result) {
            (Expect::Ok(want, job), Ok(got)) => {
                assert_subset(&got, &want, file);
                assert_eq!(has_job(&planner).await, job, "{file}: job record");
            }
            (Expect::Http(status, want, job), Ok(got)) => {
                assert_eq!(got["statusCode"], status, "{file}: {got}");
                assert_eq!(got["headers"]["content-type"], "application/json", "{file}");
                // Every field of a function-URL response (the emulator refuses one without
                // `cookies`).
                assert_eq!(got["cookies"], json!([]), "{file}: {got}");
                assert_eq!(got["isBase64Encoded"], false, "{file}: {got}");
                let body: Value = serde_json::from_str(got["body"].as_str().expect("a body"))
                    .unwrap_or_else(|e| panic!("{file}: body is not JSON ({e}): {got}"));
                assert_subset(&body, &want, file);
                assert_eq!(has_job(&planner).await, job, "{file}: job record");
            }
            (Expect::Err(needles, job), Err(e)) => {
                // Every refusal among the event files is the caller's: a retry cannot help.
                assert_eq!(e.kind, ErrorKind::InvalidInput, "{file}: {e}");
                let message = e.to_string();
                for needle in needles {
                    assert!(
                        message.contains(needle),
                        "{file}: {needle:?} not in {message}"
                    );
                }
                assert_eq!(has_job(&planner).await, job, "{file}: job record");
            }
            (Expect::Ok(..) | Expect::Http(..), Err(e)) => {
                panic!("{file}: expected success, got {e}")
            }
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
        let _ = handle(&planner, load_event(file), now(), None).await;
        let job = read_job(&planner.store, &test_partition())
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
        eventbridge::EventBridgeEvent, lambda_function_urls::LambdaFunctionUrlRequest, s3::S3Event,
        sns::SnsEvent, sqs::SqsEvent,
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
        ("eventbridge-object-created-encoded.json", "eventbridge"),
        ("s3-spark-side-files.json", "s3"),
        ("minio-put.json", "s3"),
        ("minio-hostile-key.json", "s3"),
        ("function-url-minio-put.json", "url"),
        ("function-url-minio-job-created.json", "url"),
        ("function-url-s3-base64.json", "url"),
    ] {
        let value = load_event(file);
        let ok = match kind {
            "s3" => serde_json::from_value::<S3Event>(value).is_ok(),
            "sqs" => serde_json::from_value::<SqsEvent>(value).is_ok(),
            "sns" => serde_json::from_value::<SnsEvent>(value).is_ok(),
            "url" => serde_json::from_value::<LambdaFunctionUrlRequest>(value).is_ok(),
            _ => serde_json::from_value::<EventBridgeEvent>(value).is_ok(),
        };
        assert!(ok, "{file} is a realistic {kind} event");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_get_http_answers_with_the_error_kind_as_status() {
    let planner = setup().await;
    // MinIO's webhook posting a key that fails the grammar: 400, naming the key and its kind.
    let mut request = load_event("function-url-minio-put.json");
    request["body"] = Value::from(load_event("minio-hostile-key.json").to_string());
    let response = handle(&planner, request, now(), None)
        .await
        .expect("an HTTP answer");
    assert_eq!(response["statusCode"], 400, "{response}");
    let body: Value =
        serde_json::from_str(response["body"].as_str().expect("a body")).expect("a JSON body");
    assert_eq!(body["kind"], "InvalidInput", "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("hour=24/part-0004.parquet")),
        "{body}"
    );
    // A body that is not a notification: 400, nothing dispatched.
    let mut request = load_event("function-url-minio-put.json");
    request["body"] =
        Value::from("{\"backfill\": {\"from\": \"2026-11-29T00\", \"to\": \"2026-11-29T23\"}}");
    let response = handle(&planner, request, now(), None)
        .await
        .expect("an HTTP answer");
    assert_eq!(response["statusCode"], 400, "{response}");
    assert!(!has_job(&planner).await);
    // A probe without a body (a webhook target checking the endpoint): 200.
    let mut probe = load_event("function-url-minio-put.json");
    probe["requestContext"]["http"]["method"] = Value::from("HEAD");
    probe.as_object_mut().expect("an object").remove("body");
    let response = handle(&planner, probe, now(), None)
        .await
        .expect("an HTTP answer");
    assert_eq!(response["statusCode"], 200, "{response}");
    // A store that fails: 503, so the webhook retries; the kind says a retry may succeed.
    let failing = Planner {
        store: Store::from_object_store(
            Arc::new(FaultyStore::new(
                Arc::new(InMemory::new()),
                Some(Fault::Crash(1)),
            )),
            "memory://",
        ),
        ..planner.clone()
    };
    let response = handle(
        &failing,
        load_event("function-url-minio-put.json"),
        now(),
        None,
    )
    .await
    .expect("an HTTP answer");
    assert_http_answer(&response, 503, "\"Transient\"");
    // Delivered directly, the same failure fails the invocation with that kind.
    let err = handle(&failing, load_event("minio-put.json"), now(), None)
        .await
        .expect_err("a failed dispatch fails the invocation");
    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_operation_is_allowed_by_the_planner_role() {
    let mut operations = std::collections::BTreeSet::new();
    for file in event_file_names() {
        let planner = setup().await;
        let (recording, log) = RecordingStore::new(Arc::clone(planner.store.object_store()));
        let planner = Planner {
            store: Store::from_object_store(Arc::new(recording), "memory://"),
            ..planner
        };
        let _ = handle(&planner, load_event(&file), now(), None).await;
        // Later, the job record is stale: a backfill replaces it (a conditional overwrite).
        let later = Utc::now() + chrono::Duration::hours(2);
        let _ = handle(&planner, load_event("backfill.json"), later, None).await;
        // A sweep out of time saves where it stopped, and the next one reads it.
        let sweep = load_event("eventbridge-scheduled-sweep.json");
        let _ = handle(
            &planner,
            sweep.clone(),
            now(),
            Some(std::time::Instant::now()),
        )
        .await;
        let _ = handle(&planner, sweep, now(), None).await;
        operations.extend(log.lock().expect("log").iter().cloned());
    }
    assert!(
        operations
            .iter()
            .any(|o| o.operation == "put" && o.key == SWEEP_CURSOR_KEY),
        "the sweep cursor was written: {operations:?}"
    );
    // The check is not vacuous: the planner's role deletes nothing.
    let job_record = "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=10.json";
    let kinds = ["get", "put", "list", "list_with_delimiter"];
    assert_role_covers("PlannerRole", &operations, &kinds, ("delete", job_record));
}

//! Every payload in `events/` through the real compactor handler, and the deadline path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::memory::InMemory;
use ourios_compaction::cost::{ONE_VCPU_FUNCTION_MB, Prices};
use ourios_compaction::error::ErrorKind;
use ourios_compaction::manifest::list_versions;
use ourios_compaction::options::FanOut;
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::serverless::dispatch::job::read_job;
use ourios_compaction::serverless::events::KeyScope;
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_compaction::settings::{CompactSettings, fixed_lookup};
use ourios_compaction::store::{Store, StoreUrl};
use ourios_compaction::testing::{
    Operation, RecordingStore, assert_http_answer, assert_role_covers, assert_role_permits,
    dispatch_at, event_file_names, files_under, load_event, parquet_bytes, put_bytes, rows_batch,
    test_hour_closed, test_partition,
};

use crate::handler::{Compactor, handle};

/// A store with two ingest files of 300 rows in acme's hour 10 and a job record for it.
async fn setup(scratch: &Path) -> Compactor {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let p = test_partition();
    let (start, _) = p.time_range_nanos();
    for (i, name) in ["f1.parquet", "f2.parquet"].iter().enumerate() {
        let rows: Vec<_> = (0..300i64)
            .map(|r| {
                let tag = i as i64 * 1000 + r;
                (
                    Some(format!("svc{}", tag % 4)),
                    start + (tag * 7_919_000) % 3_600_000_000_000,
                    tag,
                )
            })
            .collect();
        let key = format!("{}/{name}", KeyLayout::default().ingest_dir(&p));
        put_bytes(&store, &key, parquet_bytes(&[rows_batch(&rows)], 64)).await;
    }
    let dispatched = dispatch_at(&store, &p, test_hour_closed()).await;
    assert_eq!(dispatched.decision, "dispatched");
    Compactor {
        store,
        layout: KeyLayout::default(),
        scope: KeyScope::for_store(&StoreUrl::Memory),
        settings: CompactSettings {
            budget_bytes: 1 << 20,
            scratch_dir: scratch.to_path_buf(),
            scratch_limit_bytes: None,
            row_group_bytes: None,
            row_groups_per_block: 4,
            max_rows_per_row_group: None,
            gc_grace: Duration::from_secs(900),
            deadline_margin: Duration::ZERO,
            function_memory_mb: ONE_VCPU_FUNCTION_MB,
            function_memory_given: false,
            prices: Prices::default(),
            fan_out: FanOut::Off,
            workers: 1,
            release_memory_above_bytes: None,
            keys: Default::default(),
        },
        readiness: ReadinessConfig::default(),
        state_machine: None,
        clock: ourios_compaction::clock::SystemClock::shared(),
    }
}

enum Expect {
    /// The partition is compacted: 600 rows in, the job record deleted.
    Compacted,
    /// Acknowledged with this many ignored records; nothing compacted.
    Ignored(usize),
    /// Fails naming this.
    Err(&'static str),
    /// An HTTP 200 response whose body is this outcome.
    Http(Box<Expect>),
}

fn expectation(file: &str) -> Expect {
    match file {
        "compactor-direct.json"
        | "compactor-job-created.json"
        | "compactor-job-eventbridge.json" => Expect::Compacted,
        // The job record's own creation event is the dispatch: it starts the job.
        "s3-compactor-outputs.json" => Expect::Compacted,
        // Ingest events are the planner's: the compactor watches job records only.
        "s3-put-encoded-keys.json" => Expect::Ignored(3),
        "function-url-minio-job-created.json" => Expect::Http(Box::new(Expect::Compacted)),
        "function-url-minio-put.json" => Expect::Http(Box::new(Expect::Ignored(1))),
        "function-url-s3-base64.json" => Expect::Http(Box::new(Expect::Ignored(3))),
        "s3-spark-side-files.json" => Expect::Ignored(6),
        "eventbridge-object-created-encoded.json" | "minio-put.json" | "minio-hostile-key.json" => {
            Expect::Ignored(1)
        }
        "s3-test-event.json"
        | "s3-object-removed.json"
        | "sns-wrapped.json"
        | "eventbridge-object-created.json" => Expect::Ignored(1),
        "sqs-batch-one-bad-message.json" => Expect::Ignored(4),
        "s3-hostile-keys.json" => Expect::Err("part-0009.parquet%ZZ"),
        "eventbridge-scheduled-sweep.json" | "backfill.json" => Expect::Err("go to the planner"),
        "not-an-event.json" => Expect::Err("not an event"),
        other => panic!("events/{other} has no expected compactor outcome: add one here"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_file_through_the_handler() {
    let files = event_file_names();
    for file in &files {
        let scratch = tempfile::tempdir().expect("tempdir");
        let compactor = setup(scratch.path()).await;
        let mut expect = expectation(file);
        let mut result = handle(&compactor, load_event(file), None, "test-request").await;
        if let Expect::Http(inner) = expect {
            let response = result.unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(response["statusCode"], 200, "{file}: {response}");
            let body = response["body"].as_str().expect("a body");
            result = Ok(serde_json::from_str(body).expect("a JSON body"));
            expect = *inner;
        }
        let job_left = read_job(&compactor.store, &test_partition())
            .await
            .expect("read")
            .is_some();
        let versions = list_versions(&compactor.store, &compactor.layout, &test_partition())
            .await
            .expect("versions");
        match (expect, result) {
            (Expect::Compacted, Ok(report)) => {
                assert_eq!(report["status"], "compacted", "{file}: {report}");
                assert_eq!(report["inputs"]["rows"], 600, "{file}");
                assert_eq!(report["output"]["rows"], 600, "{file}");
                assert_eq!(
                    report["partition"],
                    "tenant=acme/year=2026/month=11/day=29/hour=10"
                );
                assert!(
                    !job_left,
                    "{file}: the job record is deleted when the job ends"
                );
                assert_eq!(versions, [1]);
            }
            (Expect::Ignored(n), Ok(body)) => {
                let ignored = body["ignored"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{file}: {body}"));
                assert_eq!(ignored.len(), n, "{file}: {body}");
                assert!(job_left && versions.is_empty(), "{file}: nothing compacted");
            }
            (Expect::Err(needle), Err(e)) => {
                assert!(
                    e.to_string().contains(needle),
                    "{file}: {needle:?} not in {e}"
                );
                assert!(job_left && versions.is_empty(), "{file}: nothing compacted");
            }
            (_, Ok(v)) => panic!("{file}: unexpected success {v}"),
            (_, Err(e)) => panic!("{file}: unexpected error {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_deadline_times_out_with_nothing_committed_and_scratch_empty() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut compactor = setup(scratch.path()).await;
    compactor.settings.deadline_margin = Duration::from_secs(60);
    // The invocation ends in one second; the margin leaves no time at all.
    let deadline = Instant::now() + Duration::from_secs(1);
    let err = handle(
        &compactor,
        load_event("compactor-job-created.json"),
        Some(deadline),
        "r1",
    )
    .await
    .expect_err("a timed-out job fails the invocation (Lambda retries it)");
    let message = err.to_string();
    assert!(message.contains("\"status\":\"timeout\""), "{message}");
    assert!(message.contains("nothing was committed"), "{message}");
    let versions = list_versions(&compactor.store, &compactor.layout, &test_partition())
        .await
        .expect("versions");
    assert!(versions.is_empty(), "nothing committed");
    assert!(
        read_job(&compactor.store, &test_partition())
            .await
            .expect("read")
            .is_some(),
        "job record left for the retry"
    );
    assert_eq!(
        files_under(scratch.path()),
        Vec::<PathBuf>::new(),
        "scratch is empty"
    );
    // With time, the same job completes.
    let report = handle(
        &compactor,
        load_event("compactor-job-created.json"),
        None,
        "r2",
    )
    .await
    .expect("compacts");
    assert_eq!(report["status"], "compacted");
}

#[test]
fn options_follow_the_settings_and_the_deadline() {
    let compactor = Compactor {
        store: Store::from_object_store(Arc::new(InMemory::new()), "memory://"),
        layout: KeyLayout::default(),
        scope: KeyScope::for_store(&StoreUrl::Memory),
        settings: CompactSettings {
            budget_bytes: 32 << 20,
            scratch_dir: "/tmp/x".into(),
            scratch_limit_bytes: Some(1 << 30),
            row_group_bytes: Some(4 << 20),
            row_groups_per_block: 8,
            max_rows_per_row_group: Some(65536),
            gc_grace: Duration::from_secs(60),
            deadline_margin: Duration::from_secs(20),
            function_memory_mb: 3538,
            function_memory_given: true,
            prices: Prices {
                lambda_gb_second: 0.000_016_666_7,
                ..Prices::default()
            },
            fan_out: FanOut::Auto,
            workers: 3,
            release_memory_above_bytes: Some(1769 << 20),
            keys: ourios_compaction::options::KeyColumns::from_settings(
                Some("timestamp"),
                Some("host,timestamp"),
                Some("trace_id"),
                Some("ms"),
            )
            .expect("key columns"),
        },
        readiness: ReadinessConfig::default(),
        state_machine: None,
        clock: ourios_compaction::clock::SystemClock::shared(),
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    let options = compactor.options(Some(deadline));
    assert_eq!(options.settings.budget_bytes, 32 << 20);
    assert_eq!(options.settings.scratch_dir, PathBuf::from("/tmp/x"));
    assert_eq!(options.settings.scratch_limit_bytes, Some(1 << 30));
    assert_eq!(options.settings.row_group_bytes, Some(4 << 20));
    assert_eq!(options.settings.row_groups_per_block, 8);
    assert_eq!(options.settings.max_rows_per_row_group, Some(65536));
    assert_eq!(options.deadline, Some(deadline - Duration::from_secs(20)));
    assert_eq!(compactor.options(None).deadline, None);
    assert_eq!(options.settings.function_memory_mb, 3538);
    assert_eq!(options.settings.prices.lambda_gb_second, 0.000_016_666_7);
    assert_eq!(
        (options.settings.fan_out, options.settings.workers),
        (FanOut::Auto, 3)
    );
    assert_eq!(
        options.settings.release_memory_above_bytes,
        Some(1769 << 20)
    );
    assert_eq!(
        (options.keys.service.as_str(), options.keys.time.as_str()),
        ("host", "timestamp")
    );
    assert_eq!(options.keys.bloom_columns(), ["trace_id"]);
}

/// The job's cost in a compactor's answer, with the function memory the settings read from
/// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`.
async fn priced_report(memory_mb: &str) -> serde_json::Value {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut compactor = setup(scratch.path()).await;
    let scratch_dir = scratch.path().to_string_lossy().into_owned();
    let vars = [
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb),
        ("OURIOS_MEMORY_BUDGET", "1MiB"),
        ("OURIOS_SCRATCH", scratch_dir.as_str()),
        ("OURIOS_DEADLINE_MARGIN", "0s"),
    ];
    compactor.settings = CompactSettings::from_lookup(&fixed_lookup(&vars)).expect("settings");
    handle(
        &compactor,
        load_event("compactor-job-created.json"),
        None,
        "cost",
    )
    .await
    .expect("compacts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_memory_scales_the_job_cost() {
    for memory_mb in [1024u64, 1769, 3538] {
        let report = priced_report(&memory_mb.to_string()).await;
        assert_eq!(report["status"], "compacted", "{report}");
        let cost = &report["cost"];
        let duration_ms = report["duration_ms"].as_u64().expect("duration");
        assert!(duration_ms > 0, "{report}");
        let gb_seconds = cost["lambda_gb_seconds"].as_f64().expect("GB-seconds");
        // Billed memory is in GB of 1,024 MB: the same job in twice the memory costs twice
        // the GB-seconds.
        let expected = duration_ms as f64 / 1000.0 * memory_mb as f64 / 1024.0;
        assert!(
            (gb_seconds - expected).abs() <= 1e-9 * expected,
            "{memory_mb} MB: {gb_seconds} GB-s for {duration_ms} ms"
        );
        let requests = &cost["requests"];
        // Two inputs, the manifest and the job record are read; the output, the manifest
        // are written and the job record is deleted.
        assert!(requests["get"].as_u64().expect("gets") >= 2, "{report}");
        assert!(requests["put"].as_u64().expect("puts") >= 2, "{report}");
        assert!(requests["list"].as_u64().expect("lists") >= 1, "{report}");
        assert!(
            requests["delete"].as_u64().expect("deletes") >= 1,
            "{report}"
        );
        assert!(report["cpu_ms"].is_u64(), "{report}");
        let bytes = report["inputs"]["bytes"].as_f64().expect("bytes");
        let usd = cost["usd"].as_f64().expect("usd");
        let per_gb = cost["usd_per_gb"].as_f64().expect("usd per GB");
        assert!(
            (per_gb - usd / (bytes / 1e9)).abs() <= 1e-9 * per_gb,
            "{report}"
        );
    }
}

#[test]
fn deadline_from_the_runtime_header() {
    let now = Instant::now();
    let now_ms = 1_796_023_210_524;
    // Real Lambda: Unix milliseconds.
    assert_eq!(
        crate::handler::deadline_instant(now_ms + 900_000, now_ms, now),
        Some(now + Duration::from_secs(900))
    );
    // Already past: no time left.
    assert_eq!(
        crate::handler::deadline_instant(now_ms - 5, now_ms, now),
        Some(now)
    );
    // cargo-lambda's emulator: the timeout itself.
    assert_eq!(
        crate::handler::deadline_instant(600_000, now_ms, now),
        Some(now + Duration::from_secs(600))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_operation_is_allowed_by_the_compactor_role() {
    let mut operations = std::collections::BTreeSet::new();
    for file in event_file_names() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let mut compactor = setup(scratch.path()).await;
        let plain = compactor.store.clone();
        let (recording, log) = RecordingStore::new(Arc::clone(plain.object_store()));
        compactor.store = Store::from_object_store(Arc::new(recording), "memory://");
        // No grace: garbage collection deletes what the commits retire, in the same job.
        compactor.settings.gc_grace = Duration::ZERO;
        let _ = handle(&compactor, load_event(&file), None, "r1").await;
        // A late file: the next job merges the compacted file with it and retires both.
        let (start, _) = test_partition().time_range_nanos();
        let key = format!(
            "{}/late.parquet",
            KeyLayout::default().ingest_dir(&test_partition())
        );
        let rows = [(Some("api".to_string()), start + 5, 9_999)];
        put_bytes(&plain, &key, parquet_bytes(&[rows_batch(&rows)], 64)).await;
        let _ = handle(&compactor, load_event("compactor-direct.json"), None, "r2").await;
        operations.extend(log.lock().expect("log").iter().cloned());
    }
    assert!(
        operations
            .iter()
            .any(|o| o.operation == "delete" && o.key.starts_with("data/")),
        "GC deleted a retired input: {operations:?}"
    );
    // The check is not vacuous: the compactor never writes ingest files.
    let ingest_file = "data/tenant=acme/year=2026/month=11/day=29/hour=10/f1.parquet";
    let kinds = ["get", "put", "delete", "list"];
    assert_role_covers("CompactorRole", &operations, &kinds, ("put", ingest_file));
    // These outputs fit one PUT; a larger one goes up in parts, under the same key.
    let output = (operations.iter())
        .find(|o| {
            o.operation == "put" && o.key.starts_with("compacted/") && !o.key.contains("/runs/")
        })
        .map(|o| o.key.clone())
        .expect("an output was written");
    let multipart = Operation {
        operation: "put_multipart",
        key: output,
    };
    assert_role_permits("CompactorRole", &[multipart].into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_get_http_answers() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let compactor = setup(scratch.path()).await;
    let mut probe = load_event("function-url-minio-job-created.json");
    probe["requestContext"]["http"]["method"] = serde_json::Value::from("HEAD");
    probe.as_object_mut().expect("an object").remove("body");
    let response = handle(&compactor, probe, None, "r1")
        .await
        .expect("an answer");
    assert_eq!(response["statusCode"], 200, "{response}");
    let mut bad = load_event("function-url-minio-job-created.json");
    bad["body"] = serde_json::Value::from("{\"sweep\": {}}");
    let response = handle(&compactor, bad, None, "r2")
        .await
        .expect("an answer");
    assert_http_answer(&response, 400, "InvalidInput");
    let versions = list_versions(&compactor.store, &compactor.layout, &test_partition())
        .await
        .expect("versions");
    assert!(versions.is_empty(), "nothing compacted");
}

/// Sends `{"fan_out": task}` through the handler.
async fn fan_out_task(compactor: &Compactor, task: serde_json::Value) -> serde_json::Value {
    handle(
        compactor,
        serde_json::json!({ "fan_out": task }),
        None,
        "fan-out",
    )
    .await
    .unwrap_or_else(|e| panic!("{task}: {e:?}"))
}

/// The tasks of a fanned-out job, each through the real handler as the state machine sends
/// them: plan, every run, split, every merge, commit; then a retried commit and a new plan find
/// nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_tasks_run_through_the_handler() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let compactor = setup(scratch.path()).await;
    let partition = serde_json::json!({ "tenant": "acme", "hour": "2026-11-29T10" });
    let with = |fields: serde_json::Value| {
        let mut task = partition.clone();
        if let (Some(task), Some(fields)) = (task.as_object_mut(), fields.as_object()) {
            task.extend(fields.clone());
        }
        task
    };

    let plan = fan_out_task(
        &compactor,
        with(serde_json::json!({"step": "plan", "ranges": 2})),
    )
    .await;
    let job = plan["job"].as_str().expect("a job id").to_string();
    assert_eq!(plan["groups"], serde_json::json!([0, 1]), "{plan}");
    let mut rows = 0;
    for group in 0..2 {
        let run = fan_out_task(
            &compactor,
            with(serde_json::json!({"step": "run", "job": job, "index": group})),
        )
        .await;
        rows += run["rows"].as_u64().expect("rows");
    }
    assert_eq!(rows, 600);
    let split = fan_out_task(
        &compactor,
        with(serde_json::json!({"step": "split", "job": job})),
    )
    .await;
    let ranges = split["ranges"].as_array().expect("ranges").clone();
    assert_eq!(ranges.len(), 2, "{split}");
    for range in &ranges {
        let merged = fan_out_task(
            &compactor,
            with(serde_json::json!({"step": "merge", "job": job, "index": range})),
        )
        .await;
        assert!(
            merged["output"]["rows"].as_u64().is_some_and(|r| r > 0),
            "{merged}"
        );
    }
    let report = fan_out_task(
        &compactor,
        with(serde_json::json!({"step": "commit", "job": job})),
    )
    .await;
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(
        report["fan_out"],
        serde_json::json!({"groups": 2, "ranges": 2})
    );
    assert_eq!(report["inputs"]["rows"], 600);
    let outputs = report["outputs"].as_array().expect("outputs");
    assert_eq!(outputs.len(), 2);
    let written: u64 = outputs.iter().filter_map(|o| o["rows"].as_u64()).sum();
    assert_eq!(written, 600);

    // A retried commit (its answer lost) and a new plan find the work done.
    let again = fan_out_task(
        &compactor,
        with(serde_json::json!({"step": "commit", "job": job})),
    )
    .await;
    assert_eq!(again["status"], "compacted", "{again}");
    let done = fan_out_task(&compactor, with(serde_json::json!({"step": "plan"}))).await;
    assert_eq!(done["job"], serde_json::Value::Null, "{done}");

    // A task without its job or index is refused, naming what is missing.
    for task in [
        serde_json::json!({"step": "run", "index": 0}),
        serde_json::json!({"step": "merge", "job": job}),
        serde_json::json!({"step": "sort", "job": job}),
    ] {
        let refused = handle(
            &compactor,
            serde_json::json!({ "fan_out": with(task.clone()) }),
            None,
            "bad",
        )
        .await
        .expect_err("refused");
        assert_eq!(refused.kind, ErrorKind::InvalidInput, "{task}: {refused:?}");
    }
}

/// A run of the fan-out state machine (`infra/fan-out.asl.json`) with every task sent to the
/// real handler: the subset of the States Language the definition uses (Task, Choice, Map,
/// Succeed; `Parameters` and `ItemSelector` with `.$` paths, `ResultSelector`, `ResultPath`,
/// `OutputPath`), executed in the order the definition gives.
struct StateMachineRun<'a> {
    compactor: &'a Compactor,
    /// The `step` of each task invoked, in order.
    steps: Vec<String>,
}

/// The value at a JSONPath of the simple form `$`, `$.a.b` (or `$$.a.b` in `context`).
fn json_path(
    input: &serde_json::Value,
    context: &serde_json::Value,
    path: &str,
) -> serde_json::Value {
    let (root, rest) = match path.strip_prefix("$$") {
        Some(rest) => (context, rest),
        None => (input, path.strip_prefix('$').expect("a path starts with $")),
    };
    rest.split('.')
        .filter(|part| !part.is_empty())
        .fold(root.clone(), |value, part| {
            value.get(part).cloned().unwrap_or(serde_json::Value::Null)
        })
}

/// A `Parameters`-style template filled in: `"key.$": path` becomes `"key": value`.
fn fill(
    template: &serde_json::Value,
    input: &serde_json::Value,
    context: &serde_json::Value,
) -> serde_json::Value {
    match template {
        serde_json::Value::Object(fields) => {
            let mut out = serde_json::Map::new();
            for (key, value) in fields {
                match (key.strip_suffix(".$"), value.as_str()) {
                    (Some(name), Some(path)) => {
                        out.insert(name.to_string(), json_path(input, context, path));
                    }
                    _ => {
                        out.insert(key.clone(), fill(value, input, context));
                    }
                }
            }
            serde_json::Value::Object(out)
        }
        other => other.clone(),
    }
}

impl StateMachineRun<'_> {
    fn run<'s>(
        &'s mut self,
        states: &'s serde_json::Value,
        start: &'s str,
        input: serde_json::Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = serde_json::Value> + 's>> {
        Box::pin(async move {
            let mut name = start.to_string();
            let mut input = input;
            loop {
                let state = &states[&name];
                let none = serde_json::Value::Null;
                let output = match state["Type"].as_str().expect("a state type") {
                    "Succeed" => return input,
                    "Choice" => {
                        let next = (state["Choices"].as_array().expect("choices").iter())
                            .find(|c| {
                                let value = json_path(
                                    &input,
                                    &none,
                                    c["Variable"].as_str().expect("variable"),
                                );
                                c["IsNull"].as_bool() == Some(value.is_null())
                            })
                            .map_or(&state["Default"], |c| &c["Next"]);
                        name = next.as_str().expect("next state").to_string();
                        continue;
                    }
                    "Task" => {
                        let parameters = fill(&state["Parameters"], &input, &none);
                        assert_eq!(
                            parameters["FunctionName"], "${CompactorFunctionArn}",
                            "{name}"
                        );
                        let payload = parameters["Payload"].clone();
                        self.steps.push(
                            payload["fan_out"]["step"]
                                .as_str()
                                .unwrap_or("?")
                                .to_string(),
                        );
                        let answer = handle(self.compactor, payload, None, "state-machine")
                            .await
                            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
                        let result = serde_json::json!({ "Payload": answer });
                        let result = match state.get("ResultSelector") {
                            Some(selector) => fill(selector, &result, &none),
                            None => result,
                        };
                        self.place(state, input, result)
                    }
                    "Map" => {
                        let items = json_path(
                            &input,
                            &none,
                            state["ItemsPath"].as_str().expect("items path"),
                        );
                        let processor = &state["ItemProcessor"];
                        let start = processor["StartAt"].as_str().expect("start");
                        let mut results = Vec::new();
                        for (index, item) in items.as_array().expect("items").iter().enumerate() {
                            let context = serde_json::json!({"Map": {"Item": {"Index": index, "Value": item}}});
                            let item_input = fill(&state["ItemSelector"], &input, &context);
                            results.push(self.run(&processor["States"], start, item_input).await);
                        }
                        self.place(state, input, serde_json::Value::Array(results))
                    }
                    other => panic!("state type {other} is not modelled by this test"),
                };
                input = match state.get("OutputPath").and_then(serde_json::Value::as_str) {
                    Some(path) => json_path(&output, &none, path),
                    None => output,
                };
                if state["End"].as_bool() == Some(true) {
                    return input;
                }
                name = state["Next"].as_str().expect("next state").to_string();
            }
        })
    }

    /// `ResultPath`: null keeps the input, a path sets the result there, none replaces it.
    fn place(
        &self,
        state: &serde_json::Value,
        mut input: serde_json::Value,
        result: serde_json::Value,
    ) -> serde_json::Value {
        match state.get("ResultPath") {
            Some(serde_json::Value::Null) => input,
            Some(serde_json::Value::String(path)) => {
                let field = path.strip_prefix("$.").expect("a top-level result path");
                input[field] = result;
                input
            }
            _ => result,
        }
    }
}

/// The fan-out state machine's definition, run against the real handler in the order it gives:
/// it compacts the partition into key ranges, and a second execution stops after its plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fan_out_state_machine_drives_the_handler_to_a_commit() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut compactor = setup(scratch.path()).await;
    // Every store operation of the tasks is checked against the compactor's role.
    let (recording, log) = RecordingStore::new(Arc::clone(compactor.store.object_store()));
    compactor.store = Store::from_object_store(Arc::new(recording), "memory://");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/fan-out.asl.json");
    let definition: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("the definition")).expect("JSON");
    let start = definition["StartAt"].as_str().expect("start");
    let input = serde_json::json!({
        "fan_out": {"step": "plan", "tenant": "acme", "hour": "2026-11-29T10", "ranges": 3}
    });
    let mut run = StateMachineRun {
        compactor: &compactor,
        steps: Vec::new(),
    };
    let report = run.run(&definition["States"], start, input.clone()).await;
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(report["fan_out"]["ranges"], 3, "{report}");
    assert_eq!(report["inputs"]["rows"], 600);
    let rows: u64 = (report["outputs"].as_array().into_iter().flatten())
        .filter_map(|o| o["rows"].as_u64())
        .sum();
    assert_eq!(rows, 600);
    let groups = report["fan_out"]["groups"].as_u64().expect("groups") as usize;
    let ranges = report["outputs"].as_array().map_or(0, Vec::len);
    let mut expected = vec!["plan".to_string()];
    expected.extend(std::iter::repeat_n("run".to_string(), groups));
    expected.push("split".into());
    expected.extend(std::iter::repeat_n("merge".to_string(), ranges));
    expected.push("commit".into());
    assert_eq!(run.steps, expected);

    let mut again = StateMachineRun {
        compactor: &compactor,
        steps: Vec::new(),
    };
    let output = again.run(&definition["States"], start, input).await;
    assert_eq!(again.steps, ["plan"], "nothing left to compact");
    assert_eq!(output["plan"]["job"], serde_json::Value::Null, "{output}");

    let operations: std::collections::BTreeSet<Operation> =
        log.lock().expect("log").iter().cloned().collect();
    assert!(
        operations.iter().any(|o| o.key.contains("/runs/")),
        "the runs and records were written and read: {operations:?}"
    );
    assert_role_permits("CompactorRole", &operations);
}

//! A job too large for one invocation is handed to the fan-out state machine. The compactor
//! starts an execution of the real definition (`infra/fan-out.asl.json`, created on a Step
//! Functions test server: moto, started by the test) named after the dispatch job, once however
//! often the hand-off is retried, and leaves the job record in place; the execution's tasks, run
//! through the compactor from the execution's own input, commit the partition on the S3 test
//! server and end the job record. A job that fits is compacted in place with no execution.
//!
//! Needs the Python of `tests/run.sh` (OURIOS_PYTHON, with moto pinned in tests/requirements.txt).

use object_store::ObjectStoreExt;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::{FanOutShape, Status};
use ourios_compaction::serverless::dispatch::compactor::{Compactor, CompactorAnswer};
use ourios_compaction::serverless::dispatch::job::read_job;
use ourios_compaction::serverless::dispatch::job_lifecycle::{JobOutcome, RecordAction};
use ourios_compaction::serverless::events::{Invocation, KeyScope, parse_invocation};
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_compaction::serverless::state_machine::{
    FanOutStateMachine, STATE_MACHINE_SETTING, StepFunctions, execution_input, execution_name,
};
use ourios_compaction::settings::CompactSettings;
use ourios_compaction::store::{Store, StoreUrl};
use ourios_compaction::testing::SlowIngestStore;
use ourios_integration_tests::emulator::workspace_root;
use ourios_integration_tests::{
    assert_exactly_once, dispatch_at, land_files, live_tags, s3_url, test_hour_closed,
};
use serde_json::{Value, json};

/// A Step Functions test server (moto) on a free loopback port, stopped when dropped.
struct StepFunctionsServer {
    child: Child,
    endpoint: String,
}

impl StepFunctionsServer {
    fn start() -> Self {
        let python = std::env::var("OURIOS_PYTHON").unwrap_or_else(|_| {
            panic!(
                "OURIOS_PYTHON is not set: run the tests with `bash tests/run.sh` (it installs \
                 moto pinned into .tools/venv and sets OURIOS_PYTHON)"
            )
        });
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {python} -m moto.server: {e}"));
        let mut server = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        for _ in 0..300 {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("the Step Functions test server exited ({status})");
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = server.child.kill();
        panic!("the Step Functions test server never listened on port {port}");
    }

    fn client(&self) -> StepFunctions {
        let keys = object_store::aws::AwsCredential {
            key_id: "testing".into(),
            secret_key: "testing".into(),
            token: None,
        };
        let credentials = Arc::new(object_store::StaticCredentialProvider::new(keys));
        StepFunctions::new("us-east-1", &self.endpoint, credentials).expect("a client")
    }

    /// The compactor's view of state machine `arn`, configured as the function's environment
    /// configures it.
    fn machine(&self, arn: &str) -> FanOutStateMachine {
        let vars = [
            (STATE_MACHINE_SETTING, arn.to_string()),
            ("AWS_ACCESS_KEY_ID", "testing".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ENDPOINT_URL_SFN", self.endpoint.clone()),
        ];
        let lookup = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        };
        FanOutStateMachine::from_lookup(&lookup)
            .expect("valid settings")
            .expect("a state machine")
    }
}

impl Drop for StepFunctionsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates the state machine of `infra/fan-out.asl.json` and returns its ARN.
async fn create_fan_out_machine(client: &StepFunctions, name: &str) -> String {
    let definition = std::fs::read_to_string(workspace_root().join("infra/fan-out.asl.json"))
        .expect("the definition")
        .replace(
            "${CompactorFunctionArn}",
            "arn:aws:lambda:us-east-1:123456789012:function:ourios-compactor",
        );
    let request = json!({
        "name": name,
        "definition": definition,
        "roleArn": "arn:aws:iam::123456789012:role/ourios-fan-out",
    });
    let created = (client.call("CreateStateMachine", &request).await)
        .unwrap_or_else(|e| panic!("the state machine is not created: {e}"));
    created["stateMachineArn"]
        .as_str()
        .expect("the state machine's ARN")
        .to_string()
}

/// A compactor of the store at `url` with the function's settings plus `vars`.
fn compactor(url: &str, scratch: &std::path::Path, vars: &[(&str, &str)]) -> Compactor {
    let scratch = scratch.display().to_string();
    // `vars` first: the first match wins.
    let mut all: Vec<(&str, &str)> = vars.to_vec();
    all.extend([
        ("OURIOS_SCRATCH", scratch.as_str()),
        ("OURIOS_GC_GRACE", "0s"),
    ]);
    let lookup = |name: &str| {
        all.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let store_url = StoreUrl::parse(url).expect("a store URL");
    Compactor {
        store: Store::open(url).expect("the S3 test store opens"),
        layout: KeyLayout::default(),
        scope: KeyScope::for_store(&store_url),
        settings: CompactSettings::from_lookup(&lookup).expect("valid settings"),
        readiness: ReadinessConfig::default(),
        state_machine: None,
        clock: ourios_compaction::clock::SystemClock::shared(),
    }
}

/// Lands files and dispatches the partition as the planner does; returns the job id.
async fn dispatched(store: &Store, partition: &PartitionId, files: i64) -> (String, Vec<i64>) {
    let layout = KeyLayout::default();
    let tags = land_files(store, &layout, partition, files, 300).await;
    let outcome = dispatch_at(store, partition, test_hour_closed()).await;
    let job = outcome.job_id.expect("a job record was written");
    (job, tags.into_iter().collect())
}

async fn run(compactor: &Compactor, invocation: Invocation) -> CompactorAnswer {
    compactor
        .handle(invocation, None)
        .await
        .unwrap_or_else(|e| panic!("the invocation fails: {e:?}"))
}

/// A Step Functions test server with the fan-out state machine, and a compactor handing off to
/// it on a fresh root of the S3 test store.
struct Fixture {
    /// Kept for its lifetime: dropped, the server stops.
    _server: StepFunctionsServer,
    client: StepFunctions,
    arn: String,
    compactor: Compactor,
    _scratch: tempfile::TempDir,
}

impl Fixture {
    async fn start(name: &str, vars: &[(&str, &str)]) -> Self {
        let server = StepFunctionsServer::start();
        let client = server.client();
        let arn = create_fan_out_machine(&client, &format!("ourios-test-{name}")).await;
        let scratch = tempfile::tempdir().expect("scratch");
        let mut compactor = compactor(&s3_url(name), scratch.path(), vars);
        compactor.state_machine = Some(server.machine(&arn));
        Self {
            _server: server,
            client,
            arn,
            compactor,
            _scratch: scratch,
        }
    }

    /// The state machine's executions, as ListExecutions gives them.
    async fn executions(&self) -> Vec<Value> {
        let request = json!({ "stateMachineArn": self.arn });
        let listed = (self.client.call("ListExecutions", &request).await)
            .unwrap_or_else(|e| panic!("cannot list executions: {e}"));
        listed["executions"].as_array().expect("executions").clone()
    }

    /// The names of the state machine's executions.
    async fn execution_names(&self) -> Vec<String> {
        let executions = self.executions().await;
        (executions.iter())
            .map(|e| e["name"].as_str().expect("a name").to_string())
            .collect()
    }
}

/// The payload of task `step` of job `job` of the test partition.
fn step(job: &str, step: &str, index: Option<&Value>) -> Value {
    let mut body = json!({ "step": step, "tenant": "acme", "hour": "2026-11-29T10", "job": job });
    if let Some(index) = index {
        body["index"] = index.clone();
    }
    json!({ "fan_out": body })
}

/// The job of a direct `{"tenant", "hour"}` invocation for the test partition.
async fn compact_directly(compactor: &Compactor) -> JobOutcome {
    let invocation = Invocation::Compact {
        tenant: Some("acme".into()),
        hour: "2026-11-29T10".into(),
    };
    match run(compactor, invocation).await {
        CompactorAnswer::Jobs(mut jobs) if jobs.len() == 1 => jobs.remove(0),
        other => panic!("not one job's answer: {other:?}"),
    }
}

/// A task's answer as the function shapes it (the commit's report with `record`).
async fn task(compactor: &Compactor, payload: Value) -> Value {
    let invocation = parse_invocation(&payload).expect("a fan-out task");
    match run(compactor, invocation).await {
        CompactorAnswer::FanOut(answer) => answer,
        CompactorAnswer::FanOutCommitted { report, record } => {
            let mut answer = serde_json::to_value(&report).expect("a report");
            answer["record"] = serde_json::to_value(record).expect("a record action");
            answer
        }
        other => panic!("not a fan-out answer: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_job_is_handed_to_one_execution_that_commits_it_and_ends_the_job_record() {
    let fixture = Fixture::start("hand-off", &[("OURIOS_FAN_OUT", "3")]).await;
    let compactor = &fixture.compactor;
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("a partition");
    let (job, tags) = dispatched(&compactor.store, &partition, 4).await;

    // The hand-off, and a retry of it (Lambda delivers an event at least once).
    let name = execution_name(&partition, &job);
    let shape = FanOutShape {
        groups: 3,
        ranges: 3,
    };
    for attempt in 0..2 {
        let outcome = &compact_directly(compactor).await;
        assert_eq!(
            outcome.report.status,
            Status::FannedOut,
            "attempt {attempt}"
        );
        assert_eq!(outcome.report.execution.as_deref(), Some(name.as_str()));
        assert_eq!(outcome.report.fan_out, Some(shape));
        assert_eq!(outcome.record, RecordAction::Left);
        assert!(outcome.is_finished(), "a hand-off is not retried");
        let report = serde_json::to_value(&outcome.report).expect("a report");
        assert_eq!(report["status"], "fanned_out", "{report}");
        let record = read_job(&compactor.store, &partition).await.expect("reads");
        assert!(record.is_some(), "the job record stays for the execution");
    }
    assert_eq!(
        fixture.execution_names().await,
        [name.as_str()],
        "one execution however often handed off"
    );
    let executions = fixture.executions().await;
    let request = json!({ "executionArn": executions[0]["executionArn"] });
    let described = (fixture.client.call("DescribeExecution", &request).await)
        .unwrap_or_else(|e| panic!("cannot describe the execution: {e}"));
    let input: Value =
        serde_json::from_str(described["input"].as_str().expect("an input")).expect("JSON input");
    assert_eq!(input, execution_input(&partition, &job, shape));
    let compacted_dir = KeyLayout::default().compacted_dir(&partition);
    let written = compactor
        .store
        .list_sorted(&compacted_dir)
        .await
        .expect("lists");
    let written: Vec<String> = written.iter().map(|o| o.location.to_string()).collect();
    let claim = KeyLayout::default().hand_off_key(&partition).to_string();
    assert_eq!(
        written,
        [claim],
        "nothing but the hand-off claim is written before the execution runs"
    );

    // The execution, task by task in the definition's order, from its own input.
    let plan = task(compactor, input).await;
    assert_eq!(
        plan["job"],
        job.as_str(),
        "the plan keeps the dispatch job id: {plan}"
    );
    let groups = plan["groups"].as_array().expect("groups").clone();
    assert_eq!(groups.len(), 3, "{plan}");
    for group in &groups {
        task(compactor, step(&job, "run", Some(group))).await;
    }
    let split = task(compactor, step(&job, "split", None)).await;
    for range in split["ranges"].as_array().expect("ranges") {
        task(compactor, step(&job, "merge", Some(range))).await;
    }
    let committed = task(compactor, step(&job, "commit", None)).await;
    assert_eq!(committed["status"], "compacted", "{committed}");
    assert_eq!(committed["record"], "deleted", "{committed}");
    assert_eq!(committed["job_id"], job.as_str(), "{committed}");
    assert!(
        read_job(&compactor.store, &partition)
            .await
            .expect("reads")
            .is_none(),
        "the commit ended the job record"
    );
    let expected = tags.iter().copied().collect();
    let live = live_tags(&compactor.store, &KeyLayout::default(), &partition).await;
    assert_exactly_once(&live, &expected, "after the fanned-out commit");

    // A retried commit finds its own version: `compacted`, and the record (gone) is nobody's
    // to end.
    let again = task(compactor, step(&job, "commit", None)).await;
    assert_eq!(again["status"], "compacted", "{again}");
    assert_eq!(again["record"], Value::Null, "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fits_is_compacted_in_place_without_an_execution() {
    // `auto` with room to spare: the scratch limit holds the job many times over.
    let vars = [("OURIOS_FAN_OUT", "auto"), ("OURIOS_SCRATCH_LIMIT", "1GiB")];
    let mut fixture = Fixture::start("fits", &vars).await;
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("a partition");
    let (job, tags) = dispatched(&fixture.compactor.store, &partition, 3).await;
    let outcome = compact_directly(&fixture.compactor).await;
    assert_eq!(
        outcome.report.status,
        Status::Compacted,
        "{:?}",
        outcome.report
    );
    assert_eq!(outcome.report.fan_out, None);
    assert_eq!(outcome.dispatch_job_id.as_deref(), Some(job.as_str()));
    assert_eq!(outcome.record, RecordAction::Deleted);
    assert!(
        fixture.execution_names().await.is_empty(),
        "no execution for a job that fits"
    );
    let expected = tags.iter().copied().collect();
    let live = live_tags(&fixture.compactor.store, &KeyLayout::default(), &partition).await;
    assert_exactly_once(&live, &expected, "after the in-place compaction");

    // A scratch limit the job cannot fit in (each file can) hands the next job off instead
    // (`auto`); a budget this small makes its tasks check their spill.
    let vars = [
        ("OURIOS_FAN_OUT", "auto"),
        ("OURIOS_SCRATCH_LIMIT", "24KiB"),
        ("OURIOS_MEMORY_BUDGET", "32KiB"),
        ("OURIOS_ROW_GROUPS_PER_BLOCK", "1"),
    ];
    let scratch = tempfile::tempdir().expect("scratch");
    let mut tight = compactor(&s3_url("too-large"), scratch.path(), &vars);
    tight.state_machine = fixture.compactor.state_machine.take();
    dispatched(&tight.store, &partition, 3).await;
    let outcome = compact_directly(&tight).await;
    assert_eq!(
        outcome.report.status,
        Status::FannedOut,
        "{:?}",
        outcome.report
    );
    let ranges = outcome.report.fan_out.expect("a shape").ranges;
    assert!(ranges > 1, "{ranges}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_record_replaced_while_an_execution_runs_starts_no_second_execution() {
    // A real grace: GC leaves a job directory alone for twice it, and so does the hand-off.
    let vars = [("OURIOS_FAN_OUT", "2"), ("OURIOS_GC_GRACE", "15m")];
    let fixture = Fixture::start("stale", &vars).await;
    let compactor = &fixture.compactor;
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("a partition");
    let (first, tags) = dispatched(&compactor.store, &partition, 3).await;
    let handed = compact_directly(compactor).await;
    assert_eq!(handed.report.status, Status::FannedOut);
    let first_execution = execution_name(&partition, &first);
    assert_eq!(
        handed.report.execution.as_deref(),
        Some(first_execution.as_str())
    );
    // The execution plans (its job directory appears) and runs its first group.
    let shape = FanOutShape {
        groups: 2,
        ranges: 2,
    };
    let plan = task(compactor, execution_input(&partition, &first, shape)).await;
    assert_eq!(plan["job"], first.as_str(), "{plan}");
    task(compactor, step(&first, "run", Some(&json!(0)))).await;

    // Meanwhile the job record goes stale and the planner replaces it with a new job.
    let second = replaced_and_handed_off_again(&fixture, &partition, &first).await;

    // The first execution finishes; the record is the second job's, so it is left to it.
    task(compactor, step(&first, "run", Some(&json!(1)))).await;
    let split = task(compactor, step(&first, "split", None)).await;
    for range in split["ranges"].as_array().expect("ranges") {
        task(compactor, step(&first, "merge", Some(range))).await;
    }
    let committed = task(compactor, step(&first, "commit", None)).await;
    assert_eq!(committed["status"], "compacted", "{committed}");
    assert_eq!(committed["record"], Value::Null, "{committed}");
    let record = read_job(&compactor.store, &partition)
        .await
        .expect("reads")
        .and_then(|s| s.record)
        .expect("the second job's record");
    assert_eq!(record.job_id, second);
    let expected = tags.iter().copied().collect();
    let live = live_tags(&compactor.store, &KeyLayout::default(), &partition).await;
    assert_exactly_once(&live, &expected, "after the first execution's commit");
    let claim = KeyLayout::default().hand_off_key(&partition);
    let claim = compactor.store.object_store().head(&claim).await;
    assert!(
        claim.is_err(),
        "the commit released the hand-off claim: {claim:?}"
    );

    // The second job, delivered now, finds the partition compacted: nothing to hand off.
    let last = compact_directly(compactor).await;
    assert_eq!(last.report.status, Status::Noop, "{:?}", last.report);
    assert_eq!(last.record, RecordAction::Deleted);
}

/// Two compactors handed one partition before the first execution's plan is written (a job
/// record replaced as stale, a duplicate delivery) start one execution: no job directory
/// shows the first at work yet, and its hand-off claim stands in for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_compactors_handed_one_partition_before_its_plan_start_one_execution() {
    let vars = [("OURIOS_FAN_OUT", "2"), ("OURIOS_GC_GRACE", "15m")];
    let fixture = Fixture::start("claim", &vars).await;
    let compactor = &fixture.compactor;
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("a partition");
    let (first, _) = dispatched(&compactor.store, &partition, 3).await;
    let handed = compact_directly(compactor).await;
    assert_eq!(handed.report.status, Status::FannedOut);

    // No task of the execution has run. The record goes stale and a new job replaces it.
    replaced_and_handed_off_again(&fixture, &partition, &first).await;
}

/// Replaces the job record of `partition` as stale and hands the new job off: the execution
/// of job `first` is named, no second one is started. Returns the new job's id.
async fn replaced_and_handed_off_again(
    fixture: &Fixture,
    partition: &PartitionId,
    first: &str,
) -> String {
    let compactor = &fixture.compactor;
    let later = chrono::Utc::now() + chrono::Duration::hours(2);
    let replaced = dispatch_at(&compactor.store, partition, later).await;
    let second = replaced.job_id.expect("a new job record");
    assert_ne!(second, first);
    let again = compact_directly(compactor).await;
    assert_eq!(again.report.status, Status::FannedOut);
    let first_execution = execution_name(partition, first);
    assert_eq!(
        again.report.execution.as_deref(),
        Some(first_execution.as_str()),
        "the first execution is named, no second one is started"
    );
    assert_eq!(again.record, RecordAction::Left);
    assert_eq!(fixture.execution_names().await, [first_execution.as_str()]);
    second
}

/// A job `auto` judged to fit one invocation but that ran out of time there is not retried with
/// the same decision: its record counts the timeout, and its next attempt hands it to the
/// fan-out state machine in two ranges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ran_out_of_time_in_place_is_handed_off_on_its_next_attempt() {
    let fixture = Fixture::start("escalate", &[("OURIOS_FAN_OUT", "auto")]).await;
    let compactor = &fixture.compactor;
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("a partition");
    let (job, _) = dispatched(&compactor.store, &partition, 2).await;

    // The first attempt: the hour is small, so `auto` keeps it here, but the store answers its
    // reads of the ingest files slowly and the invocation's time runs out.
    let slow = SlowIngestStore::new(
        Arc::clone(compactor.store.object_store()),
        Duration::from_secs(3),
    );
    let slow = Compactor {
        store: Store::from_object_store(Arc::new(slow), "s3-slow"),
        ..compactor.clone()
    };
    let invocation = Invocation::Compact {
        tenant: Some("acme".into()),
        hour: "2026-11-29T10".into(),
    };
    let margin = slow.settings.deadline_margin;
    let deadline = Instant::now() + margin + Duration::from_secs(2);
    let answer = (slow.handle(invocation, Some(deadline)).await).expect("the invocation runs");
    let CompactorAnswer::Jobs(jobs) = answer else {
        panic!("not a job's answer: {answer:?}");
    };
    assert_eq!(
        jobs[0].report.status,
        Status::Timeout,
        "{:?}",
        jobs[0].report
    );
    assert!(
        fixture.execution_names().await.is_empty(),
        "it fit: no execution"
    );
    let record = read_job(&compactor.store, &partition).await.expect("reads");
    let record = record.and_then(|s| s.record).expect("the job record stays");
    assert_eq!(
        (record.job_id.as_str(), record.timed_out),
        (job.as_str(), 1)
    );

    // The next attempt fans out.
    let outcome = compact_directly(compactor).await;
    assert_eq!(
        outcome.report.status,
        Status::FannedOut,
        "{:?}",
        outcome.report
    );
    assert_eq!(outcome.report.fan_out.map(|s| s.ranges), Some(2));
    assert_eq!(
        fixture.execution_names().await,
        [execution_name(&partition, &job)]
    );
}

//! A simulated week of the deployment: the real planner (every ingest file's object-created
//! event, of every kind: EventBridge's for each reason and S3 event notifications' records; the
//! scheduled sweep, an operator's backfill), the real compactor (its jobs, checks,
//! garbage collections and hand-offs), and fan-out executions run by a model of
//! `infra/fan-out.asl.json`, over one virtual store and a virtual clock. Lambda is modelled as
//! `infra/template.yaml` sets it: the compactor's reserved concurrency (a throttled
//! asynchronous event waits in Lambda's queue with backoff until its maximum age; a throttled
//! synchronous task fails with `Lambda.TooManyRequestsException` for the state machine's
//! retriers), its asynchronous retries, its timeout and memory, and the dead-letter queue.
//! The environment both functions read is the template's, so the planner's thresholds, the
//! lease, the GC grace and the late-file policy are the deployed defaults.
//!
//! Each invocation runs to its end at the instant it starts (the store sees its writes then);
//! its duration, from the bytes it moved, holds a concurrency slot and bills GB-seconds. Sizes
//! are scaled down by [`SCALE`]: a simulated byte stands for that many real ones, in the hour
//! sizes, the thresholds in bytes, `/tmp` and the throughput alike.
//!
//! Three loads: the week (five tenants, 840 hours; at the scaled limits every hour fits one
//! task, so none fans out; and one more hour whose only file its KMS key refuses for good,
//! which the third failed attempt quarantines); a burst of 1,000 partitions closing together; and
//! 6 hours of about 4 GB closing together, past `/tmp` and B (scaled with them), which their jobs
//! hand to the fan-out state machine.
//!
//! Checked every simulated hour and at the end: every good row ingested is live exactly once
//! or in a quarantined file; an hour past its lateness grace, the late-file wait, a sweep and a
//! lease is compacted and holds no older uncompacted file; no retired ingest file outlives the
//! GC grace and two sweeps, no unreferenced output or fan-out run two graces; no partition
//! keeps failing; nothing reaches the dead-letter queue and no invocation times out. The run
//! prints one table (`--nocapture`): hours, jobs, fan-outs, quarantines, throttling, write
//! amplification, $/GB, the cost against compacting each hour once, and the longest time
//! from an hour's close to its compacted state. `OURIOS_SIM_SEED` replays one seed,
//! `OURIOS_WEEK_DAYS` sets the length (seven days, seed 1; one day, seeds 1 and 2, under
//! `OURIOS_QUICK`, which also cuts the burst to 100 partitions and the fan-out range to one
//! hour).

mod asl;
mod meter;
mod template;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::{RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use object_store::ObjectStore;
use object_store::path::Path;
use ourios_compaction::clock::Clock;
use ourios_compaction::manifest::{load_latest, partition_files, release_quarantined};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::Status;
use ourios_compaction::serverless::dispatch::FailureAction;
use ourios_compaction::serverless::dispatch::compactor::{
    Compactor, CompactorAnswer, FAN_OUT_ANSWER_LISTED,
};
use ourios_compaction::serverless::dispatch::planner::{Planner, PlannerAnswer};
use ourios_compaction::serverless::events::{KeyScope, parse_invocation};
use ourios_compaction::serverless::function_settings::FunctionSettings;
use ourios_compaction::serverless::state_machine::{FanOutStateMachine, StartRequests};
use ourios_compaction::settings::CompactSettings;
use ourios_compaction::store::Store;
use ourios_compaction::store::hooked::HookedStore;
use ourios_compaction::testing::{
    HostClock, StoreState, VirtualStore, multi_thread_runtime, parquet_bytes, parquet_bytes_with,
    random_stream, rows_batch,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde_json::{Value, json};

use asl::{Step, Thread};
use meter::{Fault, Meter, Refusals};
use template::Deployed;

/// Real bytes a simulated byte stands for, in the week and in the burst (whose hours are few
/// files standing for hundreds of MB each).
const SCALE: f64 = 10_000.0;
const BURST_SCALE: f64 = 100_000.0;
/// Real bytes a simulated byte stands for in the fan-out range, and the files and rows of each
/// of its hours: about 4 GB an hour in files of about 300 MB.
const FAN_OUT_SCALE: f64 = 2_000.0;
const FAN_OUT_FILES: usize = 12;
const FAN_OUT_ROWS: u64 = 8_000;
/// Real bytes an invocation reads and writes per second.
const THROUGHPUT: f64 = 60e6;
/// Seconds of every invocation besides its requests and bytes (the runtime's start), and of
/// each request's round trip to S3.
const START_S: f64 = 0.05;
const REQUEST_S: f64 = 0.025;
/// Lambda's price on arm64: per GB-second and per request.
const GB_SECOND: f64 = 0.000_013_333_4;
const REQUEST: f64 = 0.000_000_2;
/// A compactor invocation that fails at a store operation: crashes, lost responses (per mille),
/// at one of its first `FAULT_WITHIN_OPS` operations (a small hour's job makes about 15).
const CRASH_PER_MILLE: u64 = 20;
const LOST_PER_MILLE: u64 = 10;
const FAULT_WITHIN_OPS: u64 = 20;
/// One ingest file in this many is damaged.
const DAMAGED_ONE_IN: u64 = 300;
const HOUR_MS: i64 = 3_600_000;

/// A tenant's ingest: files per hour and rows per file, busier in its peak hours.
struct Tenant {
    name: &'static str,
    files: (u64, u64),
    rows: u64,
    peak_hours: &'static [u32],
    peak_files: (u64, u64),
    peak_rows: u64,
}

const TENANTS: &[Tenant] = &[
    Tenant {
        name: "quiet",
        files: (1, 2),
        rows: 30,
        peak_hours: &[],
        peak_files: (1, 2),
        peak_rows: 30,
    },
    Tenant {
        name: "shop",
        files: (3, 8),
        rows: 60,
        peak_hours: &[12, 19],
        peak_files: (10, 16),
        peak_rows: 80,
    },
    Tenant {
        name: "pay",
        files: (3, 6),
        rows: 60,
        peak_hours: &[],
        peak_files: (3, 6),
        peak_rows: 60,
    },
    Tenant {
        name: "search",
        files: (12, 20),
        rows: 80,
        peak_hours: &[9, 14],
        peak_files: (25, 35),
        peak_rows: 120,
    },
    Tenant {
        name: "big",
        files: (6, 10),
        rows: 150,
        peak_hours: &[10, 15, 20],
        peak_files: (60, 80),
        peak_rows: 400,
    },
];

/// What happens at an instant.
#[derive(Debug)]
enum Event {
    /// An ingest file lands (bytes, tags of its rows; `None` for a damaged file).
    Land {
        partition: PartitionId,
        key: String,
        bytes: Bytes,
        tags: Option<Vec<i64>>,
    },
    /// A key no partition owns lands under the ingest prefix.
    Stray(String),
    Sweep,
    Check,
    /// The KMS key admits the role again; the operator releases the quarantined file and
    /// backfills its hour.
    Release(PartitionId, String),
    /// The bucket policy admits the role's writes to a partition again; the operator backfills
    /// its hour.
    Mend(PartitionId),
    /// An asynchronous compactor event tries to run.
    Compactor(AsyncEvent),
    /// An asynchronous planner event (a retry of a failed one).
    Planner(AsyncEvent),
    /// A compactor invocation ends: its slot in `Pool` is free.
    Free(Pool),
    /// A fan-out task tries to invoke the compactor.
    TaskInvoke(u64),
    /// A fan-out task's invocation answered.
    TaskAnswer(u64, Result<Value, String>),
}

/// The reserved concurrency an invocation counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    /// The compactor's: dispatched jobs.
    Jobs,
    /// The fan-out task function's: the state machine's tasks.
    Tasks,
}

#[derive(Debug, Clone)]
struct AsyncEvent {
    payload: Value,
    first_ms: i64,
    retries: u32,
    throttles: u32,
}

/// A thread of a fan-out execution.
struct ThreadEntry {
    thread: Thread,
    /// The thread whose Map runs this one.
    parent: Option<u64>,
    execution: u64,
    payload: Value,
}

/// A Map state at work.
struct MapRun {
    pending: VecDeque<Thread>,
    left: usize,
}

#[derive(Debug, Default, Clone)]
struct PartitionBook {
    /// Tags of the good rows ingested, by file key.
    rows: BTreeMap<String, Vec<i64>>,
    damaged: BTreeSet<String>,
    ingest_bytes: u64,
    /// Bytes of outputs committed.
    written_bytes: u64,
    /// Failures of its compactor invocations since its last success.
    failing: Vec<String>,
    /// When its closed hour was first seen with every file compacted.
    compacted_at_ms: Option<i64>,
    /// When an attempt parked it, until a job compacts it.
    parked_ms: Option<i64>,
    /// Job attempts that failed while it was parked (a parked partition is not retried).
    attempts_while_parked: usize,
    /// Whether it was ever parked.
    was_parked: bool,
    /// Whether the operator mended what parked it (and asked for its hour again).
    mended: bool,
}

/// The run's measures.
#[derive(Debug, Default, Clone, PartialEq)]
struct Totals {
    tenants: usize,
    hours: usize,
    files: usize,
    jobs: usize,
    merges: usize,
    checks: usize,
    fan_outs: usize,
    fan_out_tasks: usize,
    quarantined: usize,
    throttled_async: usize,
    throttled_tasks: usize,
    crashes: usize,
    compactor_invocations: usize,
    planner_invocations: usize,
    dead_letters: Vec<String>,
    timeouts: usize,
    gb_seconds: f64,
    /// The compactor's cost.
    cost: f64,
    planner_cost: f64,
    ingest_bytes: u64,
    longest_close_to_compacted_ms: i64,
    max_amplification: f64,
    cost_ratio: f64,
    peak_concurrency: usize,
    peak_tasks: usize,
}

/// What lands in the store.
#[derive(Debug, Clone, Copy)]
enum Load {
    /// Every tenant's hours for so many days.
    Week { days: u32 },
    /// So many tenants' hours of about 600 MB each, closing together.
    Burst { partitions: usize },
    /// So many tenants' hours in the fan-out range (a few GB each, past the template's `/tmp`),
    /// closing together: each job finds its hour too large for one invocation and hands it to
    /// the fan-out state machine, as deployed (`OURIOS_FAN_OUT=auto`).
    FanOutRange { partitions: usize },
}

struct Sim {
    seed: u64,
    /// Real bytes a simulated byte stands for.
    scale: f64,
    random: Box<dyn FnMut() -> u64>,
    runtime: tokio::runtime::Runtime,
    state: Arc<StoreState>,
    inner: Arc<dyn ObjectStore>,
    layout: KeyLayout,
    functions: FunctionSettings,
    compact_settings: CompactSettings,
    deployed: Deployed,
    machine: Arc<asl::Machine>,
    recording: FanOutStateMachine,
    started: StartRequests,
    executions_seen: usize,
    clock: Arc<dyn Clock>,
    refused: Arc<Mutex<Refusals>>,
    queue: BinaryHeap<Reverse<(i64, u64)>>,
    events: BTreeMap<u64, Event>,
    next_event: u64,
    running: usize,
    running_tasks: usize,
    threads: BTreeMap<u64, ThreadEntry>,
    maps: BTreeMap<u64, MapRun>,
    next_thread: u64,
    live_executions: BTreeMap<u64, (PartitionId, String)>,
    next_execution: u64,
    job_tags: BTreeMap<String, u64>,
    book: BTreeMap<PartitionId, PartitionBook>,
    dirty: BTreeSet<PartitionId>,
    /// Keys first seen retired (ingest) or orphaned (outputs, runs), and when.
    leftovers: BTreeMap<String, i64>,
    next_tag: i64,
    next_file: u64,
    start_ms: i64,
    end_ms: i64,
    totals: Totals,
    /// Ingest rows carry a log line each and files are ZSTD-compressed, as real writers' are
    /// (their pages inflate several times over); otherwise three plain columns.
    bodies: bool,
    _scratch: tempfile::TempDir,
}

/// An ingest file of `rows` as a real writer's: each row with a log line, ZSTD pages.
fn with_bodies(rows: &[(Option<String>, i64, i64)]) -> Bytes {
    let batch = rows_batch(rows);
    let lines: StringArray = (rows.iter())
        .map(|(service, time, tag)| {
            let service = service.as_deref().unwrap_or("-");
            Some(format!(
                "{time} INFO [{service}-worker-{}] org.apache.hadoop.hdfs.server.datanode.DataNode: \
                 Receiving block blk_-{tag} src: /10.251.{}.{}:50010 dest: /10.251.{}.{}:50010 \
                 of size 67108864",
                tag % 16,
                tag % 7,
                tag % 251,
                tag % 5,
                tag % 241
            ))
        })
        .collect();
    let mut fields: Vec<Field> = (batch.schema().fields().iter())
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("body", DataType::Utf8, true));
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(lines));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("a batch");
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(4096))
        .build();
    parquet_bytes_with(&[batch], props)
}

fn utc(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().expect("a time")
}

fn seconds(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).expect("a duration in ms")
}

/// An object-created event of `key` of any kind the planner may be sent: EventBridge's
/// `Object Created` for each of its reasons (what the template wires), or an S3 event
/// notification's record (`ObjectCreated:*`, its key URL-encoded), picked by `kind`.
fn created_event(key: &str, size: u64, at_ms: i64, kind: u64) -> Value {
    const REASONS: [(&str, &str); 4] = [
        ("PutObject", "Put"),
        ("CompleteMultipartUpload", "CompleteMultipartUpload"),
        ("CopyObject", "Copy"),
        ("PostObject", "Post"),
    ];
    let (reason, name) = REASONS[(kind % 4) as usize];
    if kind % 8 < 4 {
        let mut event = object_created(key, size, at_ms);
        event["detail"]["reason"] = json!(reason);
        return event;
    }
    json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "eu-west-1",
        "eventTime": utc(at_ms).to_rfc3339(), "eventName": format!("ObjectCreated:{name}"),
        "s3": {
            "s3SchemaVersion": "1.0",
            "bucket": {"name": "logs-bucket", "arn": "arn:aws:s3:::logs-bucket"},
            "object": {"key": notification_key(key), "size": size, "sequencer": "00"}
        }
    }]})
}

/// A key as S3 event notifications write it: URL-encoded, `+` for a space, `/` as it is.
fn notification_key(key: &str) -> String {
    let mut out = String::new();
    for byte in key.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The EventBridge `Object Created` event of `key` in the deployment's bucket.
fn object_created(key: &str, size: u64, at_ms: i64) -> Value {
    json!({
        "version": "0", "id": format!("e-{key}"), "detail-type": "Object Created",
        "source": "aws.s3", "account": "1", "time": utc(at_ms).to_rfc3339(),
        "region": "eu-west-1", "resources": [],
        "detail": {
            "bucket": {"name": "logs-bucket"},
            "object": {"key": key, "size": size}
        }
    })
}

impl Sim {
    fn new(seed: u64, load: Load) -> Self {
        let (days, scale) = match load {
            Load::Week { days } => (days, SCALE),
            Load::Burst { .. } => (1, BURST_SCALE),
            Load::FanOutRange { .. } => (1, FAN_OUT_SCALE),
        };
        let deployed = template::deployed();
        let scratch = tempfile::tempdir().expect("scratch");
        let scaled = |real: f64| format!("{}", (real / scale).round() as u64);
        let mut env = template::environment("CompactorFunction");
        env.insert("OURIOS_STORE".into(), "memory://".into());
        env.insert(
            "OURIOS_SCRATCH".into(),
            scratch.path().display().to_string(),
        );
        env.insert(
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(),
            format!("{}", deployed.memory_mb as u64),
        );
        // Byte thresholds scale with the data. `/tmp` does in the fan-out range, whose hours
        // are a few files of many rows, so that they pass it as their real sizes pass the
        // template's (with the row groups, whose staged blocks take scratch space too). In
        // the week and the burst, hours of small files, `/tmp` is the template's as it is:
        // each input needs scratch space of its own whatever its size (a page, a footer),
        // which does not scale.
        let mib = f64::from(1 << 20);
        match load {
            Load::FanOutRange { .. } => {
                let ephemeral = deployed.ephemeral_mb * mib;
                env.insert("OURIOS_SCRATCH_LIMIT".into(), scaled(ephemeral));
                env.insert("OURIOS_COMPACTED_RG_BYTES".into(), scaled(32.0 * mib));
                // B, a quarter of the function's memory as the compactor takes it, scaled too:
                // what does not sort in memory spills to `/tmp`.
                let budget = deployed.memory_mb * mib / 4.0;
                env.insert("OURIOS_MEMORY_BUDGET".into(), scaled(budget));
            }
            Load::Week { .. } | Load::Burst { .. } => {
                let scratch_limit = format!("{}MiB", deployed.ephemeral_mb as u64);
                env.insert("OURIOS_SCRATCH_LIMIT".into(), scratch_limit);
            }
        }
        // A job given up after as many attempts as Lambda makes of one event.
        assert_eq!(
            deployed.async_retries + 1,
            ourios_compaction::serverless::dispatch::GIVE_UP_AFTER_ATTEMPTS,
            "the compactor gives a job up when Lambda stops retrying its event"
        );
        let pressure = env["OURIOS_PRESSURE_BYTES"].as_str();
        let pressure: f64 = match pressure.find(|c: char| !c.is_ascii_digit()) {
            Some(at) => {
                let n: f64 = pressure[..at].parse().expect("PressureBytes' number");
                n * match &pressure[at..] {
                    "KiB" => 1024.0,
                    "MiB" => mib,
                    "GiB" => mib * 1024.0,
                    "B" => 1.0,
                    unit => panic!("PressureBytes unit {unit}"),
                }
            }
            None => pressure.parse().expect("PressureBytes in bytes"),
        };
        env.insert("OURIOS_PRESSURE_BYTES".into(), scaled(pressure));
        let lookup = |name: &str| env.get(name).cloned();
        let functions = FunctionSettings::from_lookup(&lookup).expect("the planner's settings");
        let compact_settings = CompactSettings::from_lookup(&lookup).expect("compactor settings");
        let state = Arc::new(StoreState::default());
        // A Monday ahead of any host clock: the planner takes the host's time when it is later
        // than an event's, as for a delayed event.
        let start_ms = DateTime::parse_from_rfc3339("2030-01-07T00:00:00Z")
            .expect("a time")
            .timestamp_millis();
        state.now_ms.store(start_ms, Ordering::SeqCst);
        let inner: Arc<dyn ObjectStore> = Arc::new(VirtualStore {
            state: Arc::clone(&state),
        });
        let clock: Arc<dyn Clock> = Arc::new(HostClock {
            store: Arc::clone(&state),
            skew_ms: 0,
            origin_ms: start_ms,
        });
        let (recording, started) =
            FanOutStateMachine::recording("arn:aws:states:eu-west-1:1:stateMachine:ourios-fan-out");
        let mut sim = Self {
            seed,
            scale,
            random: Box::new(random_stream(seed)),
            runtime: multi_thread_runtime(2),
            state,
            inner,
            layout: functions.layout.clone(),
            functions,
            compact_settings,
            deployed,
            machine: asl::fan_out_machine(),
            recording,
            started,
            executions_seen: 0,
            clock,
            refused: Arc::default(),
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            next_event: 0,
            running: 0,
            running_tasks: 0,
            threads: BTreeMap::new(),
            maps: BTreeMap::new(),
            next_thread: 0,
            live_executions: BTreeMap::new(),
            next_execution: 0,
            job_tags: BTreeMap::new(),
            book: BTreeMap::new(),
            dirty: BTreeSet::new(),
            leftovers: BTreeMap::new(),
            next_tag: 0,
            next_file: 0,
            start_ms,
            end_ms: start_ms + i64::from(days) * 24 * HOUR_MS,
            totals: Totals::default(),
            bodies: matches!(load, Load::FanOutRange { .. }),
            _scratch: scratch,
        };
        match load {
            Load::Week { days } => sim.plan_ingest(days),
            Load::Burst { partitions } => sim.plan_burst(partitions, 2, 100),
            Load::FanOutRange { partitions } => {
                sim.plan_burst(partitions, FAN_OUT_FILES, FAN_OUT_ROWS)
            }
        }
        let sweep_ms = sim.deployed.sweep_every_s as i64 * 1000;
        let mut at = start_ms + sweep_ms;
        while at < sim.end_ms + 3 * 24 * HOUR_MS {
            sim.at(at, Event::Sweep);
            at += sweep_ms;
        }
        let mut at = start_ms + HOUR_MS;
        while at <= sim.end_ms + 3 * 24 * HOUR_MS {
            sim.at(at, Event::Check);
            at += HOUR_MS;
        }
        sim
    }

    fn below(&mut self, n: u64) -> u64 {
        (self.random)() % n.max(1)
    }

    fn unit(&mut self) -> f64 {
        self.below(1 << 30) as f64 / f64::from(1 << 30)
    }

    fn now(&self) -> i64 {
        self.state.now()
    }

    fn at(&mut self, ms: i64, event: Event) {
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(id, event);
        self.queue.push(Reverse((ms, id)));
    }

    // ------------------------------------------------------------------- the world

    /// Every tenant's files of every hour of the week: a burst at the top of the hour, the
    /// rest over the hour, a tail within the lateness grace, and late files for some hours
    /// up to half a day after the close; damaged files, stray keys and one refused file.
    fn plan_ingest(&mut self, days: u32) {
        self.totals.tenants = TENANTS.len();
        let grace_ms = seconds(self.functions.readiness.lateness_grace);
        for hour in 0..i64::from(days) * 24 {
            let hour_ms = self.start_ms + hour * HOUR_MS;
            let partition_hour = utc(hour_ms).format("%Y-%m-%dT%H").to_string();
            let hour_of_day = (hour % 24) as u32;
            for tenant in TENANTS {
                let peak = tenant.peak_hours.contains(&hour_of_day);
                let (range, rows) = match peak {
                    true => (tenant.peak_files, tenant.peak_rows),
                    false => (tenant.files, tenant.rows),
                };
                let files = range.0 + self.below(range.1 - range.0 + 1);
                let partition =
                    PartitionId::parse(tenant.name, &partition_hour).expect("a partition");
                self.totals.hours += 1;
                for _ in 0..files {
                    let offset = match self.below(100) {
                        0..=29 => self.below(120_000) as i64,
                        30..=94 => self.below(HOUR_MS as u64) as i64,
                        _ => HOUR_MS + self.below(grace_ms as u64) as i64,
                    };
                    self.land(&partition, hour_ms + offset, rows);
                }
                if self.below(100) < 4 {
                    for _ in 0..1 + self.below(3) {
                        let after = grace_ms + 600_000 + self.below(12 * HOUR_MS as u64) as i64;
                        self.land(&partition, hour_ms + HOUR_MS + after, rows / 2);
                    }
                }
            }
            if hour % 6 == 3 {
                let tenant = TENANTS[self.below(TENANTS.len() as u64) as usize].name;
                let partition = PartitionId::parse(tenant, &partition_hour).expect("partition");
                let dir = self.layout.ingest_dir(&partition);
                // Writers' side files, which the planner ignores. (A key that breaks the layout
                // fails its invocation loudly, into the dead-letter queue, by contract: the
                // week has none.)
                let stray = match self.below(3) {
                    0 => format!("{dir}/_SUCCESS"),
                    1 => format!("{dir}/_temporary/0/part-00000.parquet"),
                    _ => format!("{dir}/.part-0001.parquet.crc"),
                };
                self.at(hour_ms + 1_800_000, Event::Stray(stray));
            }
        }
        // A file its KMS key refuses, released by the operator two days later (or at the end
        // of a shorter run).
        let refused_hour = self.start_ms + 9 * HOUR_MS;
        let partition =
            PartitionId::parse("shop", &utc(refused_hour).format("%Y-%m-%dT%H").to_string())
                .expect("a partition");
        let key = self.land(&partition, refused_hour + 1_200_000, 60);
        self.refused.lock().expect("lock").reads.insert(key.clone());
        let release_at = (refused_hour + 51 * HOUR_MS).min(self.end_ms - 4 * HOUR_MS);
        self.at(release_at, Event::Release(partition, key));
        // An hour whose only file its KMS key refuses, never released: every attempt of its
        // job fails the same way (the job cannot tell the function's access from the file's),
        // so the third quarantines the file rather than the event going to the dead-letter
        // queue and the sweep dispatching it for ever.
        let lone_hour = self.start_ms + 14 * HOUR_MS;
        let partition =
            PartitionId::parse("vault", &utc(lone_hour).format("%Y-%m-%dT%H").to_string())
                .expect("a partition");
        self.totals.hours += 1;
        let key = self.land(&partition, lone_hour + 600_000, 40);
        self.refused.lock().expect("lock").reads.insert(key);
        // An hour whose outputs a bucket policy refuses until the operator mends it a day later
        // and backfills the hour: every attempt fails the same way, and the input files are
        // readable, so the third parks the partition (reported, its files live, no attempt
        // until a newer file or a request) rather than retrying it for ever.
        let denied_hour = self.start_ms + 4 * HOUR_MS;
        let partition = PartitionId::parse(
            "ledger",
            &utc(denied_hour).format("%Y-%m-%dT%H").to_string(),
        )
        .expect("a partition");
        self.totals.hours += 1;
        for minute in [5, 25] {
            self.land(&partition, denied_hour + minute * 60_000, 40);
        }
        let denied = format!("{}/", self.layout.compacted_dir(&partition));
        self.refused.lock().expect("lock").writes.insert(denied);
        let mended_at = (denied_hour + 26 * HOUR_MS).min(self.end_ms - 4 * HOUR_MS);
        self.at(mended_at, Event::Mend(partition));
    }

    /// `partitions` tenants' first hour: two files each, landing over the hour, so that every
    /// one becomes ready at the same sweep after the close.
    fn plan_burst(&mut self, partitions: usize, files: usize, rows: u64) {
        self.totals.tenants = partitions;
        let hour = utc(self.start_ms).format("%Y-%m-%dT%H").to_string();
        for i in 0..partitions {
            let partition = PartitionId::parse(&format!("t{i:04}"), &hour).expect("a partition");
            self.totals.hours += 1;
            for _ in 0..files {
                let at = self.start_ms + self.below(HOUR_MS as u64) as i64;
                self.land(&partition, at, rows);
            }
        }
    }

    /// Plans one ingest file of `partition` landing at `at_ms`; returns its key.
    fn land(&mut self, partition: &PartitionId, at_ms: i64, rows: u64) -> String {
        self.next_file += 1;
        let key = format!(
            "{}/part-{:07}.parquet",
            self.layout.ingest_dir(partition),
            self.next_file
        );
        let damaged = self.below(DAMAGED_ONE_IN) == 0;
        let (bytes, tags) = if damaged {
            (Bytes::from_static(b"PAR1 a writer died here PAR1"), None)
        } else {
            let (start, _) = partition.time_range_nanos();
            let services = ["api", "web", "db", "auth", "queue", "cache"];
            let batch: Vec<_> = (0..rows)
                .map(|_| {
                    self.next_tag += 1;
                    let service = services[self.below(services.len() as u64) as usize];
                    let time = start + self.below(3_600_000_000_000) as i64;
                    (Some(service.to_string()), time, self.next_tag)
                })
                .collect();
            let tags = batch.iter().map(|r| r.2).collect();
            let bytes = match self.bodies {
                false => parquet_bytes(&[rows_batch(&batch)], 1024),
                true => with_bodies(&batch),
            };
            (bytes, Some(tags))
        };
        self.at(
            at_ms,
            Event::Land {
                partition: partition.clone(),
                key: key.clone(),
                bytes,
                tags,
            },
        );
        key
    }

    // ------------------------------------------------------------------- the run

    fn run(mut self) -> Totals {
        while let Some(Reverse((ms, id))) = self.queue.pop() {
            if ms > self.now() {
                self.state.now_ms.store(ms, Ordering::SeqCst);
            }
            let event = self.events.remove(&id).expect("a queued event");
            self.handle(event);
        }
        self.check(true);
        self.finish()
    }

    fn handle(&mut self, event: Event) {
        let now = self.now();
        match event {
            Event::Land {
                partition,
                key,
                bytes,
                tags,
            } => {
                let size = bytes.len() as u64;
                let path = Path::parse(&key).expect("an ingest key");
                self.runtime
                    .block_on(self.inner.put_opts(&path, bytes.into(), Default::default()))
                    .expect("ingest put");
                let book = self.book.entry(partition.clone()).or_default();
                book.ingest_bytes += size;
                match tags {
                    Some(tags) => {
                        book.rows.insert(key.clone(), tags);
                    }
                    None => {
                        book.damaged.insert(key.clone());
                    }
                }
                self.totals.files += 1;
                self.totals.ingest_bytes += size;
                self.dirty.insert(partition);
                let event = created_event(&key, size, now, self.below(8));
                self.planner(AsyncEvent::first(event, now));
            }
            Event::Stray(key) => {
                let path = Path::parse(&key).expect("a stray key");
                self.runtime
                    .block_on(self.inner.put_opts(
                        &path,
                        Bytes::from_static(b"x").into(),
                        Default::default(),
                    ))
                    .expect("stray put");
                let event = created_event(&key, 1, now, self.below(8));
                self.planner(AsyncEvent::first(event, now));
            }
            Event::Sweep => self.planner(AsyncEvent::first(json!({"sweep": {}}), now)),
            Event::Check => self.check(false),
            Event::Release(partition, key) => {
                self.refused.lock().expect("lock").reads.remove(&key);
                let store = self.store(None).0;
                let released = self.runtime.block_on(release_quarantined(
                    &store,
                    &self.layout,
                    &partition,
                    std::slice::from_ref(&key),
                    now,
                ));
                let released = released.expect("the operator's release");
                assert_eq!(
                    released.released.len(),
                    1,
                    "the refused file was quarantined"
                );
                self.backfill(&partition, now);
            }
            Event::Mend(partition) => {
                let book = self.book.get(&partition).cloned().unwrap_or_default();
                assert!(
                    book.parked_ms.is_some(),
                    "seed {}: {partition}, its outputs refused, was not parked: {:?}",
                    self.seed,
                    book.failing
                );
                self.refused.lock().expect("lock").writes.clear();
                self.book.entry(partition.clone()).or_default().mended = true;
                self.backfill(&partition, now);
            }
            Event::Planner(event) => self.planner(event),
            Event::Compactor(event) => self.compactor_event(event),
            Event::Free(Pool::Jobs) => self.running -= 1,
            Event::Free(Pool::Tasks) => self.running_tasks -= 1,
            Event::TaskInvoke(thread) => self.task_invoke(thread),
            Event::TaskAnswer(thread, answer) => self.task_answer(thread, answer),
        }
    }

    /// The operator's backfill of `partition`'s hour: a request by hand.
    fn backfill(&mut self, partition: &PartitionId, now: i64) {
        let backfill = json!({"backfill": {
            "tenants": [partition.tenant()],
            "from": partition.hour_label(),
            "to": partition.hour_label(),
        }});
        self.planner(AsyncEvent::first(backfill, now));
    }

    /// A store for one invocation, with a fault or none.
    fn store(&self, fault: Option<(u64, Fault)>) -> (Store, Arc<Meter>) {
        let meter = Arc::new(Meter::new(fault, Arc::clone(&self.refused)));
        let hooked = HookedStore::wrap(Arc::clone(&self.inner), Arc::clone(&meter));
        (
            Store::from_object_store(Arc::new(hooked), "memory://"),
            meter,
        )
    }

    /// Runs the planner on `event` (its unreserved concurrency is never reached); a failure
    /// is retried as Lambda retries an asynchronous invocation, then dead-lettered.
    fn planner(&mut self, event: AsyncEvent) {
        let now = self.now();
        if (now - event.first_ms) as f64 > self.deployed.planner_event_age_s * 1000.0 {
            let what = format!("planner event too old: {}", event.payload);
            self.totals.dead_letters.push(what);
            return;
        }
        self.totals.planner_invocations += 1;
        let (store, meter) = self.store(None);
        let planner = Planner {
            store,
            layout: self.layout.clone(),
            scope: self.functions.scope.clone(),
            readiness: self.functions.readiness.clone(),
            backfill_interval: Duration::ZERO,
        };
        let invocation = parse_invocation(&event.payload).expect("a planner payload");
        let answer = self.runtime.block_on(planner.handle(invocation, utc(now)));
        let failure = match answer {
            Ok(PlannerAnswer::Notifications(handled)) => handled.failure().map(|e| e.message),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        let ran_s = START_S + meter.requests.load(Ordering::SeqCst) as f64 * REQUEST_S;
        let gb_s = ran_s * self.deployed.planner_memory_mb / 1024.0;
        self.totals.planner_cost += gb_s * GB_SECOND + REQUEST;
        self.notice_job_records();
        if let Some(error) = failure {
            self.retry_async(event, error, 0.2, false);
        }
    }

    /// A failed asynchronous invocation: retried a minute, then two, later; dead-lettered
    /// after the deployed retries.
    fn retry_async(&mut self, mut event: AsyncEvent, error: String, ran_s: f64, compactor: bool) {
        if event.retries >= self.deployed.async_retries {
            let who = if compactor { "compactor" } else { "planner" };
            self.totals.dead_letters.push(format!(
                "{who} failed {}x: {error}: {}",
                event.retries + 1,
                event.payload
            ));
            return;
        }
        event.retries += 1;
        let at = self.now() + (ran_s * 1000.0) as i64 + 60_000 * i64::from(event.retries);
        match compactor {
            true => self.at(at, Event::Compactor(event)),
            false => self.at(at, Event::Planner(event)),
        }
    }

    /// Bills one invocation of `memory_mb` that ran `s` seconds.
    fn cost(&mut self, s: f64, memory_mb: f64) {
        let gb_s = s * memory_mb / 1024.0;
        self.totals.gb_seconds += gb_s;
        self.totals.cost += gb_s * GB_SECOND + REQUEST;
    }

    /// Every job record written since the last look is an object-created event that
    /// EventBridge delivers to the compactor asynchronously.
    fn notice_job_records(&mut self) {
        let prefix = "_compaction/jobs/";
        let records: Vec<(String, u64)> = {
            let objects = self.state.objects.lock().expect("lock");
            (objects.range(prefix.to_string()..))
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, e)| (k.clone(), e.2))
                .collect()
        };
        let now = self.now();
        for (key, tag) in records {
            if self.job_tags.insert(key.clone(), tag) != Some(tag) {
                let event = AsyncEvent::first(object_created(&key, 1, now), now);
                self.compactor_event(event);
            }
        }
    }

    /// An asynchronous compactor event: throttled at the reserved concurrency (Lambda retries
    /// it with backoff of up to five minutes), dropped to the failure destination past its
    /// maximum age, otherwise run.
    fn compactor_event(&mut self, mut event: AsyncEvent) {
        let now = self.now();
        if (now - event.first_ms) as f64 > self.deployed.compactor_event_age_s * 1000.0 {
            self.totals
                .dead_letters
                .push(format!("compactor event too old: {}", event.payload));
            return;
        }
        if self.running >= self.deployed.reserved {
            self.totals.throttled_async += 1;
            let backoff = (1_000i64 << event.throttles.min(9)).min(300_000);
            event.throttles += 1;
            let jitter = self.below(backoff as u64 / 2 + 1) as i64;
            self.at(now + backoff / 2 + jitter, Event::Compactor(event));
            return;
        }
        let (answer, ran_s) = self.invoke_compactor(&event.payload, Pool::Jobs);
        if let Err(error) = answer {
            self.retry_async(event, error, ran_s, true);
        }
    }

    /// One compactor invocation on `payload`, as the function answers it: its answer (or
    /// its error's type) and how long it ran. Its slot is held until then.
    fn invoke_compactor(&mut self, payload: &Value, pool: Pool) -> (Result<Value, String>, f64) {
        self.totals.compactor_invocations += 1;
        let fault = match self.below(1000) {
            n if n < CRASH_PER_MILLE => Some((1 + self.below(FAULT_WITHIN_OPS), Fault::Crash)),
            n if n < CRASH_PER_MILLE + LOST_PER_MILLE => {
                Some((1 + self.below(FAULT_WITHIN_OPS), Fault::LostResponse))
            }
            _ => None,
        };
        let (store, meter) = self.store(fault);
        let compactor = Compactor {
            store,
            layout: self.layout.clone(),
            scope: KeyScope::for_store(&ourios_compaction::store::StoreUrl::Memory),
            settings: self.compact_settings.clone(),
            readiness: self.functions.readiness.clone(),
            state_machine: Some(self.recording.clone()),
            clock: Arc::clone(&self.clock),
        };
        let invocation = parse_invocation(payload).expect("a compactor payload");
        let answer = self.runtime.block_on(compactor.handle(invocation, None));
        let answer = self.shape_answer(answer, payload);
        let answer = match meter.crashed() {
            true => {
                self.totals.crashes += 1;
                Err("Runtime.ExitError".to_string())
            }
            false => answer,
        };
        let mut ran_s = START_S
            + meter.requests.load(Ordering::SeqCst) as f64 * REQUEST_S
            + meter.bytes.load(Ordering::SeqCst) as f64 * self.scale / THROUGHPUT;
        let answer = if ran_s > self.deployed.timeout_s {
            self.totals.timeouts += 1;
            ran_s = self.deployed.timeout_s;
            Err("Sandbox.Timedout".to_string())
        } else {
            answer
        };
        self.cost(ran_s, self.deployed.memory_mb);
        match pool {
            Pool::Jobs => {
                self.running += 1;
                self.totals.peak_concurrency = self.totals.peak_concurrency.max(self.running);
            }
            Pool::Tasks => {
                self.running_tasks += 1;
                self.totals.peak_tasks = self.totals.peak_tasks.max(self.running_tasks);
            }
        }
        let now = self.now();
        self.at(now + (ran_s * 1000.0) as i64, Event::Free(pool));
        self.notice_job_records();
        self.start_executions();
        (answer, ran_s)
    }

    /// The function's answer (`functions/compactor`): the fan-out task's or commit's value,
    /// the reports, or the error type of a job that did not complete; the book kept of it.
    fn shape_answer(
        &mut self,
        answer: Result<CompactorAnswer, ourios_compaction::error::InvocationError>,
        payload: &Value,
    ) -> Result<Value, String> {
        let answer = answer.map_err(|e| e.kind.name().to_string())?;
        let failure = answer.failure_kind();
        // Job attempts that failed, and whether one of them parked its partition.
        let (failed_attempts, parked) = match &answer {
            CompactorAnswer::Jobs(jobs) => {
                let failed = jobs.iter().filter(|j| j.report.status == Status::Failed);
                let parked = failed
                    .clone()
                    .any(|j| matches!(j.failure, Some(FailureAction::Parked)));
                (failed.count(), parked)
            }
            _ => (0, false),
        };
        let mut reports = Vec::new();
        let value = match answer {
            CompactorAnswer::Ignored(ignored) => json!({ "ignored": ignored }),
            CompactorAnswer::FanOut(value) => value,
            CompactorAnswer::FanOutCommitted { report, record } => {
                let mut value = report.bounded_json(FAN_OUT_ANSWER_LISTED);
                value["record"] = serde_json::to_value(record).expect("a record");
                reports.push(*report);
                value
            }
            CompactorAnswer::Jobs(jobs) => {
                self.totals.jobs += jobs.len();
                reports.extend(jobs.into_iter().map(|j| j.report));
                json!({ "reports": reports.len() })
            }
        };
        let partition = reports
            .first()
            .and_then(|r| partition_of_report(&r.partition))
            .or_else(|| {
                let task = &payload["fan_out"];
                PartitionId::parse(task["tenant"].as_str()?, task["hour"].as_str()?).ok()
            });
        for report in &reports {
            let written: u64 = report.outputs.iter().map(|o| o.bytes).sum();
            if written > 0 {
                self.totals.merges += 1;
            }
            if report.late_check.is_some() {
                self.totals.checks += 1;
            }
            self.totals.quarantined += report.quarantined.len();
            if let Some(p) = &partition {
                self.book.entry(p.clone()).or_default().written_bytes += written;
            }
        }
        if let Some(p) = partition {
            let now = self.now();
            let book = self.book.entry(p.clone()).or_default();
            match failure {
                Some(kind) => book.failing.push(kind.name().to_string()),
                None => book.failing.clear(),
            }
            if book.parked_ms.is_some() {
                if !book.mended {
                    book.attempts_while_parked += failed_attempts;
                }
                if book.written_bytes > 0 && failed_attempts == 0 && !parked {
                    book.parked_ms = None;
                }
            } else if parked {
                book.parked_ms = Some(now);
                book.was_parked = true;
            }
            self.dirty.insert(p.clone());
            self.note_compacted(&p);
        }
        match failure {
            Some(kind) => Err(kind.name().to_string()),
            None => Ok(value),
        }
    }

    /// Records when a closed hour is first seen with every file compacted.
    fn note_compacted(&mut self, partition: &PartitionId) {
        let closed_ms = partition.next_hour().hour_start().timestamp_millis();
        let now = self.now();
        if now < closed_ms
            || self
                .book
                .get(partition)
                .is_some_and(|b| b.compacted_at_ms.is_some())
        {
            return;
        }
        let files = self
            .runtime
            .block_on(partition_files(
                &self.store(None).0,
                &self.layout,
                partition,
            ))
            .expect("the live set");
        let ingest = self.layout.ingest_dir(partition).to_string();
        let all_compacted = files.manifest_version > 0
            && !files.live.iter().any(|k| k.as_str().starts_with(&ingest));
        if all_compacted {
            let book = self.book.entry(partition.clone()).or_default();
            book.compacted_at_ms = Some(now);
            // A parked hour waited for its operator, not for the deployment.
            if !book.was_parked {
                let took = now - closed_ms;
                self.totals.longest_close_to_compacted_ms =
                    self.totals.longest_close_to_compacted_ms.max(took);
            }
        }
    }

    // ------------------------------------------------------------------- fan-out executions

    /// Starts the executions the compactor asked for since the last look.
    fn start_executions(&mut self) {
        let started: Vec<(String, Value)> = {
            let all = self.started.lock().expect("lock");
            all[self.executions_seen..].to_vec()
        };
        self.executions_seen += started.len();
        for (name, input) in started {
            self.totals.fan_outs += 1;
            let execution = self.next_execution;
            self.next_execution += 1;
            let task = &input["fan_out"];
            let partition = PartitionId::parse(
                task["tenant"].as_str().expect("tenant"),
                task["hour"].as_str().expect("hour"),
            )
            .expect("the execution's partition");
            self.live_executions.insert(execution, (partition, name));
            let thread = Thread::start(&self.machine, input, json!({}));
            let id = self.new_thread(thread, None, execution);
            self.advance(id, None);
        }
    }

    fn new_thread(&mut self, thread: Thread, parent: Option<u64>, execution: u64) -> u64 {
        let id = self.next_thread;
        self.next_thread += 1;
        self.threads.insert(
            id,
            ThreadEntry {
                thread,
                parent,
                execution,
                payload: Value::Null,
            },
        );
        id
    }

    /// Moves thread `id` on: by `step`, or from where it stands.
    fn advance(&mut self, id: u64, step: Option<Step>) {
        let Some(entry) = self.threads.get_mut(&id) else {
            return;
        };
        let step = step.unwrap_or_else(|| entry.thread.step());
        match step {
            Step::Invoke(payload) => {
                entry.payload = payload;
                let now = self.now();
                self.at(now, Event::TaskInvoke(id));
            }
            Step::Map {
                items,
                max_concurrency,
            } => {
                let execution = entry.execution;
                if items.is_empty() {
                    let step = entry.thread.map_succeeded();
                    return self.advance(id, Some(step));
                }
                let width = match max_concurrency {
                    0 => items.len(),
                    n => n,
                };
                let mut pending: VecDeque<Thread> = items.into();
                let first: Vec<Thread> = (0..width).filter_map(|_| pending.pop_front()).collect();
                self.maps.insert(
                    id,
                    MapRun {
                        left: first.len() + pending.len(),
                        pending,
                    },
                );
                for thread in first {
                    let child = self.new_thread(thread, Some(id), execution);
                    self.advance(child, None);
                }
            }
            Step::Succeeded => {
                let entry = self.threads.remove(&id).expect("the thread");
                match entry.parent {
                    Some(parent) => {
                        let map = self.maps.get_mut(&parent).expect("the parent's Map");
                        map.left -= 1;
                        let next = map.pending.pop_front();
                        let done = map.left == 0;
                        if let Some(thread) = next {
                            let child = self.new_thread(thread, Some(parent), entry.execution);
                            self.advance(child, None);
                        }
                        if done {
                            self.maps.remove(&parent);
                            let step = (self.threads.get_mut(&parent))
                                .expect("the parent")
                                .thread
                                .map_succeeded();
                            self.advance(parent, Some(step));
                        }
                    }
                    None => {
                        self.live_executions.remove(&entry.execution);
                    }
                }
            }
        }
    }

    fn fail_execution(&mut self, id: u64, error: &str) {
        let execution = self.threads[&id].execution;
        let (partition, name) = self
            .live_executions
            .remove(&execution)
            .expect("a live execution");
        let threads: Vec<u64> = (self.threads.iter())
            .filter(|(_, t)| t.execution == execution)
            .map(|(id, _)| *id)
            .collect();
        for thread in threads {
            self.threads.remove(&thread);
            self.maps.remove(&thread);
        }
        self.totals
            .dead_letters
            .push(format!("execution {name} of {partition} failed: {error}"));
    }

    /// A task invokes the compactor synchronously: throttled at the reserved concurrency.
    fn task_invoke(&mut self, id: u64) {
        let Some(entry) = self.threads.get(&id) else {
            return;
        };
        let payload = entry.payload.clone();
        if self.running_tasks >= self.deployed.tasks_reserved {
            self.totals.throttled_tasks += 1;
            return self.task_failed(id, "Lambda.TooManyRequestsException".into());
        }
        self.totals.fan_out_tasks += 1;
        let (answer, ran_s) = self.invoke_compactor(&payload, Pool::Tasks);
        let at = self.now() + (ran_s * 1000.0) as i64;
        self.at(at, Event::TaskAnswer(id, answer));
    }

    fn task_answer(&mut self, id: u64, answer: Result<Value, String>) {
        let Some(entry) = self.threads.get_mut(&id) else {
            return;
        };
        match answer {
            Ok(payload) => {
                let step = entry.thread.task_succeeded(payload);
                self.advance(id, Some(step));
            }
            Err(error) => self.task_failed(id, error),
        }
    }

    fn task_failed(&mut self, id: u64, error: String) {
        let random = self.unit();
        let entry = self.threads.get_mut(&id).expect("the thread");
        match entry.thread.task_failed(&error, random) {
            Some(delay_s) => {
                let at = self.now() + (delay_s * 1000.0) as i64;
                self.at(at, Event::TaskInvoke(id));
            }
            None => self.fail_execution(id, &error),
        }
    }

    // ------------------------------------------------------------------- the invariants

    fn check(&mut self, end: bool) {
        let now = self.now();
        if std::env::var_os("OURIOS_SIM_TRACE").is_some() {
            eprintln!(
                "{} queue {} running {} executions {} {:?}",
                utc(now),
                self.queue.len(),
                self.running,
                self.live_executions.len(),
                self.totals
            );
        }
        let readiness = self.functions.readiness.clone();
        let sweep_ms = self.deployed.sweep_every_s as i64 * 1000;
        let lease_ms = self.deployed.job_lease_s as i64 * 1000;
        let gc_ms = seconds(self.compact_settings.gc_grace);
        let grace_ms = seconds(readiness.lateness_grace);
        let wait_ms = seconds(readiness.late.wait);
        let partitions: Vec<PartitionId> = match end {
            true => self.book.keys().cloned().collect(),
            false => std::mem::take(&mut self.dirty).into_iter().collect(),
        };
        let store = self.store(None).0;
        // Nothing writes while the check runs: one copy of the store's index serves every
        // partition.
        let objects = self.state.objects.lock().expect("lock").clone();
        for partition in &partitions {
            let files = self
                .runtime
                .block_on(partition_files(&store, &self.layout, partition))
                .expect("the live set");
            let book = self.book.get(partition).cloned().unwrap_or_default();
            let at = format!("seed {} at {}: {partition}", self.seed, utc(now));
            Self::check_rows(&at, &files, &book, &objects);
            Self::check_symlink(
                &at,
                &self.layout.symlink_key(partition),
                &files,
                &book,
                &objects,
            );
            // Compacted in time: an hour past its grace, a sweep and the late-file wait.
            let closed_ms = partition.next_hour().hour_start().timestamp_millis();
            let ingest = self.layout.ingest_dir(partition).to_string();
            let slack = sweep_ms + lease_ms;
            // A parked partition is reported instead, its files live, until a newer file or
            // a request by hand.
            if now > closed_ms + grace_ms + wait_ms + slack && book.parked_ms.is_none() {
                assert!(files.manifest_version > 0, "{at}: never compacted");
                for key in files
                    .live
                    .iter()
                    .filter(|k| k.as_str().starts_with(&ingest))
                {
                    let landed = objects[key.as_str()].1;
                    assert!(
                        now - landed <= wait_ms + slack,
                        "{at}: {key} landed {} min ago and is still uncompacted",
                        (now - landed) / 60_000
                    );
                }
            }
            // Leftovers: retired ingest files, outputs no manifest names, runs of no live
            // execution.
            let live: BTreeSet<&str> = files.live.iter().map(|k| k.as_str()).collect();
            let quarantined: BTreeSet<&str> =
                files.quarantined.iter().map(|q| q.key.as_str()).collect();
            let compacted = self.layout.compacted_dir(partition).to_string();
            let executing = self.live_executions.values().any(|(p, _)| p == partition);
            for (key, _) in objects
                .range(ingest.clone()..)
                .take_while(|(k, _)| k.starts_with(&ingest))
            {
                let name = &key[ingest.len()..];
                let retired = name.ends_with(".parquet")
                    && name.matches('/').count() == 1
                    && !name.starts_with("/_")
                    && !name.starts_with("/.")
                    && !live.contains(key.as_str())
                    && !quarantined.contains(key.as_str());
                self.leftover(key, retired, now, gc_ms + 2 * sweep_ms + HOUR_MS, &at);
            }
            for (key, _) in objects
                .range(compacted.clone()..)
                .take_while(|(k, _)| k.starts_with(&compacted))
            {
                let orphan = match key.contains("/runs/") {
                    true => !executing && !key.ends_with("hand-off.json"),
                    false => key.ends_with(".parquet") && !live.contains(key.as_str()),
                };
                self.leftover(key, orphan, now, 2 * gc_ms + 2 * sweep_ms + HOUR_MS, &at);
            }
        }
        if end {
            let stuck: Vec<String> = (self.book.iter())
                .filter(|(_, b)| b.failing.len() >= 3)
                .map(|(p, b)| format!("{p}: {:?}", b.failing))
                .collect();
            assert!(
                stuck.is_empty(),
                "seed {}: partitions failing without end: {stuck:?}",
                self.seed
            );
            // Parked partitions were left alone while parked and compacted once mended.
            let parked: Vec<(&PartitionId, &PartitionBook)> =
                self.book.iter().filter(|(_, b)| b.was_parked).collect();
            for (partition, book) in &parked {
                assert_eq!(
                    book.attempts_while_parked, 0,
                    "seed {}: {partition} was retried while parked",
                    self.seed
                );
                assert!(
                    book.parked_ms.is_none(),
                    "seed {}: {partition} is still parked after the operator's request",
                    self.seed
                );
            }
            if self.book.keys().any(|p| p.tenant() == Some("ledger")) {
                assert_eq!(
                    parked.len(),
                    1,
                    "seed {}: the refused hour parked",
                    self.seed
                );
            }
        }
    }

    /// Notes `key` as a leftover (or not); fails once it has been one for longer than `limit`.
    fn leftover(&mut self, key: &str, is_leftover: bool, now: i64, limit: i64, at: &str) {
        if !is_leftover {
            self.leftovers.remove(key);
            return;
        }
        let since = *self.leftovers.entry(key.to_string()).or_insert(now);
        assert!(
            now - since <= limit,
            "{at}: {key} left over for {} min",
            (now - since) / 60_000
        );
    }

    /// Every good row ingested is live exactly once, or in a quarantined file; no other row
    /// is live.
    fn check_rows(
        at: &str,
        files: &ourios_compaction::manifest::PartitionFiles,
        book: &PartitionBook,
        objects: &BTreeMap<String, ourios_compaction::testing::Entry>,
    ) {
        let mut live: BTreeMap<i64, u32> = BTreeMap::new();
        for key in &files.live {
            if book.damaged.contains(key.as_str()) {
                continue;
            }
            let bytes = objects
                .get(key.as_str())
                .unwrap_or_else(|| panic!("{at}: live {key} is missing"))
                .0
                .clone();
            for tag in crate::protocol_simulation::decode_tags(bytes)
                .unwrap_or_else(|| panic!("{at}: live {key} decodes"))
            {
                *live.entry(tag).or_default() += 1;
            }
        }
        let quarantined: BTreeSet<&str> =
            files.quarantined.iter().map(|q| q.key.as_str()).collect();
        for (key, tags) in &book.rows {
            let in_quarantine = quarantined.contains(key.as_str());
            for tag in tags {
                let count = live.remove(tag).unwrap_or(0);
                assert!(
                    count == 1 || (count == 0 && in_quarantine),
                    "{at}: row {tag} of {key} is live {count} times (quarantined: {in_quarantine})"
                );
            }
        }
        assert!(
            live.is_empty(),
            "{at}: rows live that were never ingested: {}",
            live.len()
        );
        for key in &book.damaged {
            assert!(
                quarantined.contains(key.as_str()) || files.live.iter().any(|k| k.as_str() == key),
                "{at}: damaged {key} is neither quarantined nor awaiting a job"
            );
        }
    }

    /// The partition's symlink manifest (once written) lists files that exist, holds no row
    /// twice, and misses no row of a committed output.
    fn check_symlink(
        at: &str,
        key: &object_store::path::Path,
        files: &ourios_compaction::manifest::PartitionFiles,
        book: &PartitionBook,
        objects: &BTreeMap<String, ourios_compaction::testing::Entry>,
    ) {
        let Some((body, ..)) = objects.get(key.as_ref()) else {
            return;
        };
        let body = String::from_utf8(body.to_vec()).expect("a UTF-8 symlink manifest");
        let tags = |key: &str| {
            let (bytes, ..) = objects
                .get(key)
                .unwrap_or_else(|| panic!("{at}: the symlink manifest lists {key}, which is gone"));
            crate::protocol_simulation::decode_tags(bytes.clone())
                .unwrap_or_else(|| panic!("{at}: {key} decodes"))
        };
        let mut listed: BTreeMap<i64, u32> = BTreeMap::new();
        for url in body.lines() {
            let key = url.strip_prefix("memory://").expect("a memory:// URL");
            if book.damaged.contains(key) {
                continue;
            }
            for tag in tags(key) {
                *listed.entry(tag).or_default() += 1;
            }
        }
        let twice = listed.iter().find(|(_, n)| **n > 1);
        assert!(
            twice.is_none(),
            "{at}: row {twice:?} twice in the symlink manifest"
        );
        for key in files
            .live
            .iter()
            .filter(|k| k.as_str().starts_with("compacted/"))
        {
            for tag in tags(key.as_str()) {
                assert!(
                    listed.contains_key(&tag),
                    "{at}: row {tag} of the committed {key} is missing from the symlink manifest"
                );
            }
        }
    }

    /// The run's measures once every event has run.
    fn finish(mut self) -> Totals {
        let price = |s: f64| s * self.deployed.memory_mb / 1024.0 * GB_SECOND + REQUEST;
        let mut once = 0.0;
        for (partition, book) in &self.book {
            let manifest = self
                .runtime
                .block_on(load_latest(&self.store(None).0, &self.layout, partition))
                .expect("a manifest");
            let compacted: u64 = manifest.compacted.iter().map(|o| o.bytes).sum();
            if compacted == 0 {
                continue;
            }
            let amplification = manifest.write_amplification();
            self.totals.max_amplification = self.totals.max_amplification.max(amplification);
            // One job: its listing, manifest and job-record requests, a GET of each file, the
            // output's upload in three requests, the manifest's PUT and the symlink manifest's
            // read before the state and its write after the commit; every byte once.
            let files = (book.rows.len() + book.damaged.len()) as f64;
            let requests = files + 8.0 + 2.0;
            let bytes = (book.ingest_bytes + compacted) as f64 * self.scale;
            once += price(START_S + requests * REQUEST_S + bytes / THROUGHPUT);
        }
        self.totals.cost_ratio = self.totals.cost / once;
        self.totals
    }
}

impl AsyncEvent {
    fn first(payload: Value, now: i64) -> Self {
        Self {
            payload,
            first_ms: now,
            retries: 0,
            throttles: 0,
        }
    }
}

fn partition_of_report(text: &str) -> Option<PartitionId> {
    let tenant = text.strip_prefix("tenant=")?.split('/').next()?;
    let field = |name: &str| -> Option<&str> { text.split('/').find_map(|p| p.strip_prefix(name)) };
    let hour = format!(
        "{}-{}-{}T{}",
        field("year=")?,
        field("month=")?,
        field("day=")?,
        field("hour=")?
    );
    PartitionId::parse(tenant, &hour).ok()
}

/// The table the run prints.
fn table(days: u32, scale: f64, totals: &Totals) -> String {
    let gb = totals.ingest_bytes as f64 * scale / 1e9;
    format!(
        "| days | tenants | hours | files | jobs | merges | checks | fan-outs | fan-out tasks | quarantines | throttled (async / tasks) | crashes | write amplification (max) | $/GB | compactor's cost vs compacting once | longest close to compacted |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n\
         | {days} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {:.2} | {:.4} | {:.2}x | {} min |",
        totals.tenants,
        totals.hours,
        totals.files,
        totals.jobs,
        totals.merges,
        totals.checks,
        totals.fan_outs,
        totals.fan_out_tasks,
        totals.quarantined,
        totals.throttled_async,
        totals.throttled_tasks,
        totals.crashes,
        totals.max_amplification,
        (totals.cost + totals.planner_cost) / gb,
        totals.cost_ratio,
        totals.longest_close_to_compacted_ms / 60_000,
    )
}

/// What the run must show. Write amplification and the cost against compacting each hour
/// once are measured and printed: the pressure compactions of open hours rewrite the hour
/// each time, which the deployed thresholds do not bound (see the table).
fn assert_week(deployed: &Deployed, totals: &Totals) {
    assert!(
        deployed.compactor_dead_letters,
        "failed compactor events are dead-lettered"
    );
    assert!(
        totals.dead_letters.is_empty(),
        "dead letters: {:#?}",
        totals.dead_letters
    );
    assert_eq!(totals.timeouts, 0, "invocations timed out");
    assert!(totals.quarantined > 0, "damaged files are quarantined");
    assert!(totals.crashes > 0, "invocations crashed and were retried");
    assert!(totals.checks > 0, "late files were checked");
}

fn days_and_seeds() -> (u32, Vec<u64>) {
    let quick = std::env::var_os("OURIOS_QUICK").is_some();
    let days = std::env::var("OURIOS_WEEK_DAYS")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(if quick { 1 } else { 7 });
    // The full run's week, or two days-long seeds in the quick run.
    let seeds = match std::env::var("OURIOS_SIM_SEED") {
        Ok(seed) => vec![seed.parse().expect("OURIOS_SIM_SEED is a number")],
        Err(_) if quick => vec![1, 2],
        Err(_) => vec![1],
    };
    (days, seeds)
}

#[test]
fn a_simulated_week_of_the_deployment_keeps_every_invariant() {
    let (days, seeds) = days_and_seeds();
    for seed in seeds {
        let sim = Sim::new(seed, Load::Week { days });
        let deployed = sim.deployed.clone();
        let totals = sim.run();
        println!("seed {seed}:\n{}", table(days, SCALE, &totals));
        assert_week(&deployed, &totals);
        assert!(
            totals.max_amplification <= 2.0,
            "seed {seed}: write amplification {:.2}",
            totals.max_amplification
        );
        assert!(
            totals.cost_ratio <= 1.5,
            "seed {seed}: the compactor cost {:.2}x compacting each hour once",
            totals.cost_ratio
        );
    }
}

/// A thousand partitions closing together, under the deployed reserved concurrency: their
/// jobs wait in Lambda's asynchronous queue (throttled, retried with backoff) and every one
/// ends compacted within its maximum event age, none dead-lettered.
#[test]
fn a_burst_of_a_thousand_partitions_closing_together_drains_under_the_reserved_concurrency() {
    let partitions = if std::env::var_os("OURIOS_QUICK").is_some() {
        100
    } else {
        1000
    };
    let sim = Sim::new(1, Load::Burst { partitions });
    let deployed = sim.deployed.clone();
    let totals = sim.run();
    println!(
        "{partitions} partitions:\n{}",
        table(1, BURST_SCALE, &totals)
    );
    assert!(
        totals.dead_letters.is_empty(),
        "dead letters: {:#?}",
        totals.dead_letters
    );
    assert_eq!(totals.timeouts, 0, "invocations timed out");
    assert!(
        totals.throttled_async > 0,
        "the burst passed the reserved concurrency"
    );
    assert!(totals.peak_concurrency <= deployed.reserved);
    // Inside the lease, too: no job was queued long enough to be dispatched twice.
    let limit_ms =
        (deployed.job_lease_s as f64 * 1000.0).min(deployed.compactor_event_age_s * 1000.0);
    assert!(
        (totals.longest_close_to_compacted_ms as f64) < limit_ms,
        "the last partition waited {} min",
        totals.longest_close_to_compacted_ms / 60_000
    );
}

/// Hours in the fan-out range closing together: each job finds its hour past `/tmp` and
/// hands it to the fan-out state machine by itself (`auto`, as deployed); each execution runs
/// as `infra/fan-out.asl.json` says (its Maps, their concurrency, its retriers) with the real
/// compactor as every task, in the task pool's reserved concurrency. Throttled tasks retry
/// with backoff; every execution commits its ranges, none fails.
#[test]
fn hours_in_the_fan_out_range_closing_together_fan_out_and_all_commit() {
    let quick = std::env::var_os("OURIOS_QUICK").is_some();
    let partitions = if quick { 1 } else { 6 };
    let sim = Sim::new(1, Load::FanOutRange { partitions });
    let deployed = sim.deployed.clone();
    let totals = sim.run();
    println!("{}", table(1, FAN_OUT_SCALE, &totals));
    assert!(
        totals.dead_letters.is_empty(),
        "dead letters: {:#?}",
        totals.dead_letters
    );
    assert!(
        totals.fan_outs >= partitions,
        "every hour fanned out: {}",
        totals.fan_outs
    );
    // One hour's tasks fit the pool; six hours' do not.
    assert!(
        quick || totals.throttled_tasks > 0,
        "tasks met the reserved concurrency"
    );
    assert!(totals.peak_concurrency <= deployed.reserved);
}

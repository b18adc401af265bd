//! A deterministic simulation of the whole protocol running the real code (crate doc,
//! invariants 1-4, 6, 7 and 11).
//!
//! Real compactions (`compact_partition`, several at once on the same partitions, as the CLI
//! and local backfills run them), fanned-out jobs whose tasks (plan, runs, split, merges,
//! commit) run as the fan-out state machine runs them, retried as it retries them, operators
//! releasing quarantined files (`release`), the real
//! planner (`dispatch_partition`: readiness, job
//! records created, replaced when stale) and the compactor's jobs it dispatches
//! (`run_compaction_job`, started when a job record is written, delivered at least once and
//! retried when they fail, re-arming their record by readiness; each doing what its record
//! asks, so late files in a compacted hour are first only checked and merged once they have
//! waited the late-file policy's wait), real GC
//! (`collect_garbage_with`), late ingest of real Parquet files (some of them corrupt, some
//! named with characters a URL encoding would change, beside their encoded twins) and readers
//! of the live set (`partition_files`, then every live file decoded) run as tasks against an
//! in-memory store whose Last-Modified comes from a virtual clock (a multipart object dated at
//! its upload's start, as S3 dates it). One partition's hour is open
//! while faults run, so its jobs are dispatched by file pressure alone. Every store
//! operation (get, head, put, create-only put, list, delete, multipart start, part, complete
//! and abort) parks its task at a gate; once every task is parked or finished, a seeded
//! scheduler picks one to proceed, advances the virtual clock, starts a task, or injects a
//! fault: a crash before or after the operation takes effect, a lost response (applied, error
//! returned), a 5xx (not applied), or a 403 for a read of an ingest file (a job quarantines
//! such a file, good or not, until an operator releases it). The create-only manifest writes meet real 409s when
//! commits race. Host clocks are skewed by up to half the grace, and jobs outlive the grace
//! while parked. CPU work between operations never influences a choice, so a seed replays
//! the same schedule.
//!
//! After every scheduled operation: every ingested row is live exactly once or sits in a
//! quarantined file, every live or quarantined object exists, no quarantined file is live,
//! the symlink manifest lists only objects that exist and no row twice;
//! a reader that finished within the grace saw every row ingested before it started exactly
//! once. Once faults stop, the hour closes and the planner, the jobs it dispatches and GC run
//! until quiet: every partition converges to one compacted file beside its quarantined ones,
//! with no job record left but a stale one from before (a job whose retries ran out).
//!
//! Tasks run at one of three speeds (the scheduler picks among parked tasks by weight), so a
//! slow reader or job spans many operations of the others.
//!
//! `OURIOS_SIM_SEEDS=N` runs N seeds (default 200); `OURIOS_SIM_SEED=S` replays one, and
//! `OURIOS_SIM_TRACE=1` prints its schedule.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arrow_array::{Array, Int64Array};
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutOptions};
use ourios_compaction::clock::Clock;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::compact::fan_out::{FanOutStep, FanOutTask, TaskAnswer, run_fan_out_task};
use ourios_compaction::late::LatePolicy;
use ourios_compaction::manifest::gc::collect_garbage_with;
use ourios_compaction::manifest::{live_set, load_latest, partition_files, release_quarantined};
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::job_key;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::serverless::dispatch::job_lifecycle::{RecordAction, run_compaction_job};
use ourios_compaction::serverless::dispatch::{DispatchMode, dispatch_partition};
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    HostClock, StoreState, VirtualStore, multi_thread_runtime, parquet_bytes, random_stream,
    rows_batch, run_seeds, sim_seeds,
};

const GRACE: Duration = Duration::from_secs(60);
const GRACE_MS: i64 = 60_000;
const START_MS: i64 = 1_800_000_000_000;
/// Scheduler decisions while faults are on.
const STEPS: usize = 400;
/// Tasks alive at once.
const MAX_TASKS: usize = 5;
/// Age after which the planner replaces a job record (a crashed job's).
const LEASE: Duration = Duration::from_secs(180);
/// Attempts of one delivered job event (Lambda's asynchronous invocation: one and two retries).
const JOB_ATTEMPTS: u32 = 3;
/// Uncompacted files that make the open hour ready.
const PRESSURE_FILES: usize = 3;

/// The planner's rule in the simulation: short lateness and lease, low file pressure.
fn readiness_config() -> ReadinessConfig {
    ReadinessConfig {
        lateness_grace: Duration::from_secs(30),
        pressure_files: PRESSURE_FILES,
        job_lease: LEASE,
        // Late files in a compacted hour wait whatever their size (the hours are small): jobs
        // check them, and merge them once waited.
        late: LatePolicy {
            wait: 2 * GRACE,
            share: 10.0,
        },
        ..ReadinessConfig::default()
    }
}

mod gate;

use gate::{Gate, GateStore, TaskState, Turn, Verdict};

// ---------------------------------------------------------------------------------------
// The tasks.

/// Marks its task done when dropped (finished, failed, panicked or aborted).
struct Done {
    gate: Arc<Gate>,
    task: u64,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.gate.update(self.task, |s| s.done = true);
    }
}

/// What a reader saw.
#[derive(Debug)]
struct ReaderView {
    /// How many times each tag was read; None when a store error stopped it.
    counts: Option<BTreeMap<i64, usize>>,
    /// A live file that was missing.
    missing: Option<String>,
}

enum TaskKind {
    Ingest,
    /// A compaction without a job record (the CLI, a local backfill).
    Compact,
    /// The planner on an event or a sweep.
    Plan,
    /// The compactor on a delivered job event, the `attempt`-th time.
    Job {
        attempt: u32,
    },
    Gc,
    /// An operator releasing every quarantined file of the partition (`release`).
    Release,
    /// A fanned-out job in two ranges, its tasks run one after another as the fan-out state
    /// machine runs them (plan, each group's run, split, each range's merge, commit), each
    /// task retried up to three times as the state machine retries it.
    FanOut,
    Read {
        started_ms: i64,
        /// Tags of the good files ingested before the reader started.
        expected: BTreeSet<i64>,
    },
}

enum Outcome {
    Nothing,
    Read(ReaderView),
    /// A job that finished (its event needs no retry).
    JobFinished,
}

struct Task {
    kind: TaskKind,
    partition: PartitionId,
    /// How often the scheduler picks this task among the parked ones: slow tasks (readers,
    /// jobs) span many operations of others.
    weight: u64,
    handle: tokio::task::JoinHandle<Outcome>,
}

/// The `tag` column of a Parquet file's rows; `None` when it does not decode.
pub(crate) fn decode_tags(bytes: Bytes) -> Option<Vec<i64>> {
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024).ok()?;
    let mut tags = Vec::new();
    for batch in reader {
        let batch = batch.ok()?;
        let column = batch.column_by_name("tag")?;
        let column = column.as_any().downcast_ref::<Int64Array>()?;
        tags.extend((0..column.len()).map(|i| column.value(i)));
    }
    Some(tags)
}

/// Reads the live set through the reader rule and decodes every live good file.
async fn read_live(store: Store, layout: KeyLayout, partition: PartitionId) -> ReaderView {
    let mut view = ReaderView {
        counts: None,
        missing: None,
    };
    let Ok(files) = partition_files(&store, &layout, &partition).await else {
        return view;
    };
    let mut counts = BTreeMap::new();
    for key in files.live.iter().filter(|k| !is_corrupt(k)) {
        let path = Path::parse(key).expect("live keys parse");
        let got = match store
            .object_store()
            .get_opts(&path, GetOptions::default())
            .await
        {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                view.missing = Some(key.to_string());
                return view;
            }
            Err(_) => return view,
        };
        let Ok(bytes) = got.bytes().await else {
            return view;
        };
        for tag in decode_tags(bytes).expect("a live good file decodes") {
            *counts.entry(tag).or_default() += 1;
        }
    }
    view.counts = Some(counts);
    view
}

fn utc(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().expect("a time")
}

fn is_corrupt(key: &str) -> bool {
    key.rsplit('/').next().is_some_and(|n| n.starts_with("bad"))
}

struct Sim {
    seed: u64,
    runtime: Arc<tokio::runtime::Runtime>,
    state: Arc<StoreState>,
    raw: Store,
    virtual_store: Arc<VirtualStore>,
    gate: Arc<Gate>,
    layout: KeyLayout,
    partitions: Vec<PartitionId>,
    scratch: tempfile::TempDir,
    tasks: BTreeMap<u64, Task>,
    next_task: u64,
    next_tag: i64,
    /// Tags of every ingest file attempted, corrupt ones included.
    files: BTreeMap<String, Vec<i64>>,
    /// Decoded tags of objects, by key and ETag.
    decoded: BTreeMap<(String, String), Vec<i64>>,
    random: Box<dyn FnMut() -> u64>,
    /// Job events not yet delivered to a compactor: the partition and the attempt.
    job_events: Vec<(PartitionId, u32)>,
    /// The ETag of each partition's job record last seen, to notice a new record.
    job_records: BTreeMap<String, Option<u64>>,
    /// Ingest names holding `~`, whose encoded twins (`%7E`) may land later.
    tilde_names: Vec<String>,
    /// Every scheduler decision, to show a seed replays the same schedule.
    trace: Vec<String>,
}

impl Sim {
    fn new(seed: u64, runtime: Arc<tokio::runtime::Runtime>) -> Self {
        let virtual_store = Arc::new(VirtualStore::default());
        let state = Arc::clone(&virtual_store.state);
        state.now_ms.store(START_MS, Ordering::SeqCst);
        Self {
            seed,
            runtime,
            raw: Store::from_object_store(virtual_store.clone(), "sim://"),
            state,
            virtual_store,
            gate: Arc::default(),
            layout: KeyLayout::default(),
            // The last hour is the virtual clock's own: open while faults run.
            partitions: [
                ("acme", "2026-11-29T10"),
                ("beta", "2026-11-29T11"),
                ("gamma", "2027-01-15T08"),
            ]
            .iter()
            .map(|(t, h)| PartitionId::parse(t, h).expect("partition"))
            .collect(),
            scratch: tempfile::tempdir().expect("scratch"),
            tasks: BTreeMap::new(),
            next_task: 0,
            next_tag: 0,
            files: BTreeMap::new(),
            decoded: BTreeMap::new(),
            random: Box::new(random_stream(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)),
            job_events: Vec::new(),
            job_records: BTreeMap::new(),
            tilde_names: Vec::new(),
            trace: Vec::new(),
        }
    }

    fn replay(&self) -> String {
        format!(
            "replay with OURIOS_SIM_SEED={} cargo test --profile quick -p ourios-compaction --test it \
             protocol_simulation::",
            self.seed
        )
    }

    /// Notes a scheduler decision; printed as it is taken under `OURIOS_SIM_TRACE`, so a
    /// failing seed's schedule shows up to the failure.
    fn record(&mut self, decision: String) {
        if std::env::var_os("OURIOS_SIM_TRACE").is_some() {
            eprintln!("{decision}");
        }
        self.trace.push(decision);
    }

    fn below(&mut self, n: u64) -> u64 {
        (self.random)() % n.max(1)
    }

    fn pick_partition(&mut self) -> PartitionId {
        let i = self.below(self.partitions.len() as u64) as usize;
        self.partitions[i].clone()
    }

    fn clock(&mut self) -> Arc<dyn Clock> {
        let skew_ms = self.below(GRACE_MS as u64 + 1) as i64 - GRACE_MS / 2;
        Arc::new(HostClock {
            store: Arc::clone(&self.state),
            skew_ms,
            origin_ms: START_MS,
        })
    }

    fn advance(&mut self, ms: i64) {
        self.state.now_ms.fetch_add(ms, Ordering::SeqCst);
        self.record(format!("advance {ms}"));
    }

    /// Starts a task of `kind` on `partition` with its own gated view of the store.
    fn start(&mut self, kind: TaskKind, partition: PartitionId) {
        let id = self.next_task;
        self.next_task += 1;
        self.gate
            .tasks
            .lock()
            .expect("lock")
            .insert(id, TaskState::default());
        let store = Store::from_object_store(
            Arc::new(GateStore::wrap(
                Arc::clone(&self.virtual_store) as Arc<dyn ObjectStore>,
                Arc::new(Turn {
                    gate: Arc::clone(&self.gate),
                    task: id,
                    serial: Arc::default(),
                }),
            )),
            "sim://",
        );
        let layout = self.layout.clone();
        let done = Done {
            gate: Arc::clone(&self.gate),
            task: id,
        };
        let label = match &kind {
            TaskKind::Ingest => "ingest",
            TaskKind::Compact => "compact",
            TaskKind::Plan => "plan",
            TaskKind::Job { .. } => "job",
            TaskKind::Gc => "gc",
            TaskKind::Release => "release",
            TaskKind::FanOut => "fan-out",
            TaskKind::Read { .. } => "read",
        };
        self.record(format!("start {id} {label} {partition}"));
        let p = partition.clone();
        let handle = match &kind {
            TaskKind::Ingest => {
                let (key, bytes) = self.ingest_file(&partition);
                self.runtime.spawn(async move {
                    let _done = done;
                    let path = Path::parse(&key).expect("ingest key");
                    let put =
                        store
                            .object_store()
                            .put_opts(&path, bytes.into(), PutOptions::default());
                    let _ = put.await;
                    Outcome::Nothing
                })
            }
            TaskKind::Compact => {
                let options = self.compact_options(id);
                self.runtime.spawn(async move {
                    let _done = done;
                    let _ = compact_partition(&store, &layout, &p, &options).await;
                    Outcome::Nothing
                })
            }
            TaskKind::Plan => {
                let clock = self.clock();
                let now = utc(clock.now_ms());
                self.runtime.spawn(async move {
                    let _done = done;
                    let mode = DispatchMode::default();
                    let config = readiness_config();
                    let _ = dispatch_partition(&store, &layout, &p, now, &config, mode).await;
                    Outcome::Nothing
                })
            }
            TaskKind::Job { .. } => {
                let options = self.compact_options(id);
                self.runtime.spawn(async move {
                    let _done = done;
                    let config = readiness_config();
                    match run_compaction_job(&store, &layout, &p, &options, &config).await {
                        Ok(job) if job.record != RecordAction::Left => Outcome::JobFinished,
                        _ => Outcome::Nothing,
                    }
                })
            }
            TaskKind::Gc => {
                let clock = self.clock();
                self.runtime.spawn(async move {
                    let _done = done;
                    let _ = collect_garbage_with(&store, &layout, &p, GRACE, false, &clock).await;
                    Outcome::Nothing
                })
            }
            TaskKind::Release => {
                let clock = self.clock();
                self.runtime.spawn(async move {
                    let _done = done;
                    let now_ms = clock.now_ms();
                    let _ = release_quarantined(&store, &layout, &p, &[], now_ms).await;
                    Outcome::Nothing
                })
            }
            TaskKind::FanOut => {
                let options = self.compact_options(id);
                let job = format!("s{}f{id}", self.seed);
                self.runtime.spawn(async move {
                    let _done = done;
                    let _ = run_fan_out(&store, &layout, &options, &p, &job).await;
                    Outcome::Nothing
                })
            }
            TaskKind::Read { .. } => self.runtime.spawn(async move {
                let _done = done;
                Outcome::Read(read_live(store, layout, p).await)
            }),
        };
        let weight = [1, 16, 256][self.below(3) as usize];
        self.tasks.insert(
            id,
            Task {
                kind,
                partition,
                weight,
                handle,
            },
        );
    }

    /// Options of task `id`'s compaction: a small budget, the simulation's grace, a skewed
    /// host clock and an attempt id of its own (a job's attempt id is random in production;
    /// here it is fixed so that output keys, and so listings, replay with the seed).
    fn compact_options(&mut self, id: u64) -> CompactOptions {
        let mut options = CompactOptions::new(self.scratch.path().join(format!("t{id}")));
        options.settings.budget_bytes = 64 << 10;
        options.settings.gc_grace = GRACE;
        options.clock = self.clock();
        options.attempt_id = Some(format!("s{}t{id}", self.seed));
        // Concurrent downloads would make which of them reach the store before a failure
        // stops the others a matter of thread timing.
        options.parallel_downloads = 1;
        options
    }

    /// A new ingest file: real Parquet with fresh tags, or (one in eight) corrupt bytes.
    fn ingest_file(&mut self, partition: &PartitionId) -> (String, Bytes) {
        let corrupt = self.below(8) == 0;
        let num_rows = 1 + self.below(40) as i64;
        let first = self.next_tag;
        self.next_tag += num_rows;
        let tags: Vec<i64> = (first..first + num_rows).collect();
        let (start, end) = partition.time_range_nanos();
        let rows: Vec<_> = tags
            .iter()
            .map(|&tag| {
                let time = start + tag.wrapping_mul(7_919_000_003).rem_euclid(end - start);
                (Some(format!("svc-{}", tag % 3)), time, tag)
            })
            .collect();
        let dir = self.layout.ingest_dir(partition);
        let twin = self
            .tilde_names
            .iter()
            .map(|k| k.replace('~', "%7E"))
            .find(|k| k.starts_with(&format!("{dir}/")) && !self.files.contains_key(k));
        let key = match twin {
            // The twin of an earlier name: a listing or a delete that re-encoded keys would
            // take one for the other (hole 1).
            Some(twin) if !corrupt && self.below(3) == 0 => twin,
            _ => {
                let name = if corrupt { "bad" } else { "f" };
                // Characters the ingest grammar accepts and a URL encoding changes.
                let mark = ["-", "~", "%25", "#", "[x]", " ", "é"][self.below(7) as usize];
                format!("{dir}/{name}{mark}{first:06}.parquet")
            }
        };
        if key.contains('~') && !corrupt {
            self.tilde_names.push(key.clone());
        }
        let bytes = if corrupt {
            Bytes::from_static(b"PAR1 this is not a parquet file PAR1")
        } else {
            parquet_bytes(&[rows_batch(&rows)], 16)
        };
        self.files.insert(key.clone(), tags);
        (key, bytes)
    }

    /// A fault for a released operation (none when `faults` is off).
    fn verdict(&mut self, faults: bool) -> Verdict {
        if !faults {
            return Verdict::Proceed;
        }
        match self.below(200) {
            0..=1 => Verdict::CrashBefore,
            2..=3 => Verdict::CrashAfter,
            4..=7 => Verdict::Unavailable,
            8..=10 => Verdict::LostResponse,
            11..=12 => Verdict::Refused,
            _ => Verdict::Proceed,
        }
    }

    /// Waits for every task to park or finish, then reaps and checks the finished ones.
    fn settle(&mut self, step: usize) -> Vec<(u64, String)> {
        let parked = self.gate.settle();
        let finished: Vec<u64> = {
            let tasks = self.gate.tasks.lock().expect("lock");
            tasks
                .iter()
                .filter(|(_, t)| t.parked.is_none() && t.is_settled())
                .map(|(id, _)| *id)
                .collect()
        };
        for id in finished {
            let state = self.gate.tasks.lock().expect("lock").remove(&id);
            let task = self.tasks.remove(&id).expect("a task");
            // A crashed process reports nothing, whether its abort or its end came first.
            let crashed = state.is_some_and(|s| s.crashed);
            if crashed {
                self.gate.reaped_crashed.lock().expect("lock").insert(id);
            }
            let outcome = match self.runtime.block_on(task.handle) {
                Ok(_) if crashed => Outcome::Nothing,
                Ok(outcome) => outcome,
                Err(e) if e.is_cancelled() => Outcome::Nothing,
                Err(e) => panic!(
                    "seed {} step {step}: task {id} panicked: {e}; {}",
                    self.seed,
                    self.replay()
                ),
            };
            if let TaskKind::Job { attempt } = task.kind
                && !matches!(outcome, Outcome::JobFinished)
                && attempt + 1 < JOB_ATTEMPTS
            {
                // A failed or killed invocation: Lambda delivers the event again.
                self.job_events.push((task.partition.clone(), attempt + 1));
            }
            if let (
                Outcome::Read(view),
                TaskKind::Read {
                    started_ms,
                    expected,
                },
            ) = (outcome, &task.kind)
            {
                self.check_reader(step, &task.partition, *started_ms, expected, &view);
            }
        }
        self.notice_job_records();
        parked
    }

    /// A job record written since the last look is an object-created event for the compactor:
    /// queue its delivery.
    fn notice_job_records(&mut self) {
        for partition in self.partitions.clone() {
            let key = job_key(&partition);
            let tag = self
                .state
                .objects
                .lock()
                .expect("lock")
                .get(&key)
                .map(|e| e.2);
            let seen = self.job_records.insert(key, tag).flatten();
            if tag.is_some() && tag != seen {
                self.job_events.push((partition, 0));
            }
        }
    }

    /// Starts a compactor on a queued job event; one in eight is delivered twice.
    fn deliver_job_event(&mut self) {
        if self.job_events.is_empty() {
            return;
        }
        let i = self.below(self.job_events.len() as u64) as usize;
        let (partition, attempt) = if self.below(8) == 0 {
            self.job_events[i].clone()
        } else {
            self.job_events.remove(i)
        };
        self.start(TaskKind::Job { attempt }, partition);
    }

    /// A reader that finished within the grace saw every row ingested before it started
    /// exactly once (but those of files the store refused, which a job may have quarantined),
    /// and no row twice.
    fn check_reader(
        &self,
        step: usize,
        partition: &PartitionId,
        started_ms: i64,
        expected: &BTreeSet<i64>,
        view: &ReaderView,
    ) {
        if self.state.now() - started_ms >= GRACE_MS {
            return;
        }
        if let Some(key) = &view.missing {
            panic!(
                "seed {} step {step}: a reader of {partition} found live file {key} deleted \
                 within the grace; {}",
                self.seed,
                self.replay()
            );
        }
        let Some(counts) = &view.counts else {
            return;
        };
        let refused: BTreeSet<i64> = (self.gate.refused.lock().expect("lock").iter())
            .filter_map(|key| self.files.get(key))
            .flatten()
            .copied()
            .collect();
        let expected: BTreeSet<i64> = expected.difference(&refused).copied().collect();
        let wrong: Vec<_> = counts
            .iter()
            .filter(|(_, n)| **n != 1)
            .map(|(t, n)| (*t, *n))
            .chain(
                expected
                    .iter()
                    .filter(|t| !counts.contains_key(t))
                    .map(|t| (*t, 0)),
            )
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "seed {} step {step}: a reader of {partition} saw rows not exactly once (tag, \
             times) {wrong:?}; {}",
            self.seed,
            self.replay()
        );
    }

    /// The good ingest files of `partition` whose put took effect.
    fn ingested_good_keys(&self, partition: &PartitionId) -> Vec<String> {
        let dir = format!("{}/", self.layout.ingest_dir(partition));
        let written = self.state.written.lock().expect("lock");
        (self.files.keys())
            .filter(|k| k.starts_with(&dir) && !is_corrupt(k) && written.contains(*k))
            .cloned()
            .collect()
    }

    /// Tags of the good ingest files of `partition` whose put took effect.
    fn ingested_good(&self, partition: &PartitionId) -> BTreeSet<i64> {
        (self.ingested_good_keys(partition).iter())
            .flat_map(|k| self.files[k].iter().copied())
            .collect()
    }

    /// Tags of an object as stored now (decoded once per ETag).
    fn tags_of(&mut self, key: &str) -> Option<Vec<i64>> {
        if is_corrupt(key) {
            return self.files.get(key).cloned();
        }
        let (bytes, tag) = {
            let objects = self.state.objects.lock().expect("lock");
            let entry = objects.get(key)?;
            (entry.0.clone(), entry.2.to_string())
        };
        let cache_key = (key.to_string(), tag);
        if !self.decoded.contains_key(&cache_key) {
            let tags = decode_tags(bytes).unwrap_or_else(|| {
                panic!(
                    "seed {}: live file {key} does not decode; {}",
                    self.seed,
                    self.replay()
                )
            });
            self.decoded.insert(cache_key.clone(), tags);
        }
        self.decoded.get(&cache_key).cloned()
    }

    /// Every ingested row is live exactly once or sits in a quarantined file; every live or
    /// quarantined object exists; no quarantined file is live.
    fn check(&mut self, step: usize) {
        // Every tag of every live or quarantined file, once per file holding it.
        let mut seen: Vec<i64> = Vec::new();
        for partition in self.partitions.clone() {
            let (live, quarantined) = self.runtime.block_on(async {
                let manifest = load_latest(&self.raw, &self.layout, &partition)
                    .await
                    .expect("the manifest reads");
                let dir = self.layout.ingest_dir(&partition);
                let listing = self.raw.list_sorted(&dir).await.expect("the listing reads");
                let live: Vec<String> =
                    (live_set(&KeyLayout::default(), &dir, &listing, &manifest)
                        .keys()
                        .iter())
                    .map(ToString::to_string)
                    .collect();
                let quarantined: Vec<String> = manifest
                    .quarantined
                    .iter()
                    .map(|q| q.key.to_string())
                    .collect();
                (live, quarantined)
            });
            for key in live.iter().chain(&quarantined) {
                let Some(tags) = self.tags_of(key) else {
                    panic!(
                        "seed {} step {step}: live or quarantined object {key} was deleted; {}",
                        self.seed,
                        self.replay()
                    );
                };
                seen.extend(tags);
            }
            self.check_symlink(step, &partition);
            let refused = self.gate.refused.lock().expect("lock").clone();
            for key in &quarantined {
                assert!(
                    (is_corrupt(key) || refused.contains(key)) && !live.contains(key),
                    "seed {} step {step}: {key} is quarantined but good (never refused) or \
                     live; {}",
                    self.seed,
                    self.replay()
                );
            }
        }
        let written = self.state.written.lock().expect("lock").clone();
        let mut ingested: Vec<i64> = self
            .files
            .iter()
            .filter(|(k, _)| written.contains(*k))
            .flat_map(|(_, tags)| tags.iter().copied())
            .collect();
        ingested.sort_unstable();
        ingested.dedup();
        seen.sort_unstable();
        // Each ingested tag exactly once and no other: the two sorted lists are equal. Only a
        // failing step counts them, to say which tags are off.
        if seen == ingested {
            return;
        }
        let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
        for tag in seen {
            *counts.entry(tag).or_default() += 1;
        }
        let ingested: BTreeSet<i64> = ingested.into_iter().collect();
        let wrong: Vec<_> = ingested
            .iter()
            .map(|t| (*t, counts.get(t).copied().unwrap_or(0)))
            .filter(|(_, n)| *n != 1)
            .chain(
                counts
                    .iter()
                    .filter(|(t, _)| !ingested.contains(t))
                    .map(|(t, n)| (*t, *n)),
            )
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "seed {} step {step}: rows not live or quarantined exactly once (tag, times) \
             {wrong:?}; {}",
            self.seed,
            self.replay()
        );
    }

    /// The partition's symlink manifest, once written, lists only files that exist and no row
    /// twice (GC deletes a retired file only once the list no longer holds it).
    fn check_symlink(&mut self, step: usize, partition: &PartitionId) {
        let symlink_key = self.layout.symlink_key(partition).to_string();
        let body = {
            let objects = self.state.objects.lock().expect("lock");
            match objects.get(&symlink_key) {
                Some(entry) => String::from_utf8(entry.0.to_vec()).expect("a UTF-8 list"),
                None => return,
            }
        };
        let mut listed: Vec<i64> = Vec::new();
        for url in body.lines() {
            let key = url.strip_prefix("sim://").expect("a sim:// URL");
            let Some(tags) = self.tags_of(key) else {
                panic!(
                    "seed {} step {step}: the symlink manifest lists {key}, which is gone; {}",
                    self.seed,
                    self.replay()
                );
            };
            listed.extend(tags);
        }
        let count = listed.len();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(
            listed.len(),
            count,
            "seed {} step {step}: a row twice in the symlink manifest; {}",
            self.seed,
            self.replay()
        );
    }

    /// Releases one parked operation, chosen by the seed.
    fn release_one(&mut self, parked: &[(u64, String)], faults: bool) {
        let total: u64 = parked.iter().map(|(id, _)| self.tasks[id].weight).sum();
        let mut pick = self.below(total);
        let (id, op) = parked
            .iter()
            .find(|(id, _)| {
                let weight = self.tasks[id].weight;
                let found = pick < weight;
                pick = pick.saturating_sub(weight);
                found
            })
            .cloned()
            .expect("a parked task");
        let verdict = self.verdict(faults);
        self.record(format!("{id} {op} {verdict:?}"));
        self.gate.release(id, verdict);
        if verdict == Verdict::CrashBefore {
            // The process is gone: its future is dropped at its next await. A crash after
            // the operation is not aborted here, which could cancel the operation before it
            // takes effect (a race with the runtime); the gate fails every later operation of
            // the crashed task instead, so nothing of it takes effect after the crash.
            self.tasks[&id].handle.abort();
        }
    }

    fn start_random(&mut self) {
        let choice = self.below(21);
        if (8..=11).contains(&choice) && !self.job_events.is_empty() {
            self.deliver_job_event();
            return;
        }
        let partition = self.pick_partition();
        let kind = match choice {
            0..=7 => TaskKind::Ingest,
            8..=10 => TaskKind::Plan,
            11..=13 => TaskKind::Compact,
            14..=16 => TaskKind::Gc,
            17 => TaskKind::FanOut,
            20 => TaskKind::Release,
            _ => TaskKind::Read {
                started_ms: self.state.now(),
                expected: self.ingested_good(&partition),
            },
        };
        self.start(kind, partition);
    }

    /// Runs every task to its end, releasing operations in a seeded order without faults.
    fn drain(&mut self, step: usize) {
        loop {
            let parked = self.settle(step);
            self.check(step);
            if parked.is_empty() {
                assert!(
                    self.tasks.is_empty(),
                    "every settled task is parked or reaped"
                );
                if self.job_events.is_empty() {
                    return;
                }
                self.deliver_job_event();
                continue;
            }
            self.release_one(&parked, false);
        }
    }

    fn run(mut self) -> Vec<String> {
        for step in 0..STEPS {
            let parked = self.settle(step);
            self.check(step);
            let choice = self.below(100);
            if parked.is_empty() || (self.tasks.len() < MAX_TASKS && choice < 20) {
                self.start_random();
            } else if (20..24).contains(&choice) {
                let ms = self.below(GRACE_MS as u64 / 2) as i64;
                self.advance(ms);
            } else if (24..26).contains(&choice) {
                // A long pause: parked jobs outlive the grace.
                let ms = GRACE_MS + self.below(GRACE_MS as u64) as i64;
                self.advance(ms);
            } else {
                self.release_one(&parked, true);
            }
        }
        // Faults stop: the tasks in flight (and the job events they cause) end, the open hour
        // closes, then the planner, its jobs and GC run until quiet. A crashed job's record
        // is replaced once stale: the rounds are a lease apart.
        let quiet_ms = self.state.now();
        self.drain(STEPS);
        let hour_closed = self.partitions[2]
            .next_hour()
            .hour_start()
            .timestamp_millis()
            + readiness_config().lateness_grace.as_millis() as i64
            + GRACE_MS;
        if self.state.now() < hour_closed {
            self.advance(hour_closed - self.state.now());
        }
        for round in 0..3 {
            for partition in self.partitions.clone() {
                self.start(TaskKind::Plan, partition.clone());
                self.drain(STEPS + 1 + round);
                self.advance(GRACE_MS + 1);
                self.start(TaskKind::Gc, partition);
                self.drain(STEPS + 1 + round);
            }
            self.advance(LEASE.as_millis() as i64 + 1);
        }
        for partition in self.partitions.clone() {
            self.check_converged(&partition, quiet_ms);
        }
        self.trace
    }

    /// One compacted file or the ranges of one fanned-out job (when any good row landed), no
    /// ingest file but the quarantined, and
    /// no job record written since faults stopped (`quiet_ms`). A record an earlier job left
    /// when Lambda's retries ran out may stay: the planner deletes nothing and reads no record
    /// for a partition with nothing to compact; it is stale by now, so the partition's next
    /// file replaces it and dispatches a job.
    fn check_converged(&self, partition: &PartitionId, quiet_ms: i64) {
        let manifest = self
            .runtime
            .block_on(load_latest(&self.raw, &self.layout, partition))
            .expect("the manifest reads");
        let keys: Vec<String> = self
            .state
            .objects
            .lock()
            .expect("lock")
            .keys()
            .cloned()
            .collect();
        let compacted_dir = format!("{}/", self.layout.compacted_dir(partition));
        let ingest_dir = format!("{}/", self.layout.ingest_dir(partition));
        let compacted: Vec<&String> = keys
            .iter()
            .filter(|k| k.starts_with(&compacted_dir))
            .collect();
        let ingest_left: BTreeSet<&str> = (keys.iter())
            .filter(|k| k.starts_with(&ingest_dir))
            .map(String::as_str)
            .collect();
        let quarantined: BTreeSet<&str> = manifest
            .quarantined
            .iter()
            .map(|q| q.key.as_str())
            .collect();
        // Good files the store refused may stay quarantined (until released).
        let compactable =
            (self.ingested_good_keys(partition).iter()).any(|k| !quarantined.contains(k.as_str()));
        let expected = usize::from(compactable);
        let record_written = self
            .state
            .objects
            .lock()
            .expect("lock")
            .get(&job_key(partition))
            .map(|entry| entry.1);
        if let Some(written) = record_written {
            assert!(
                written < quiet_ms && self.state.now() - written > LEASE.as_millis() as i64,
                "seed {}: {partition} converged with a job record written at {written} (faults \
                 stopped at {quiet_ms}, now {}) left behind; {}",
                self.seed,
                self.state.now(),
                self.replay()
            );
        }
        // One piece: one file, or the key ranges of a fanned-out job.
        let live = manifest.compacted.len();
        let in_one_piece =
            (live == expected || (expected == 1 && live > 1)) && manifest.compacted_in_one_piece();
        assert!(
            in_one_piece && compacted.len() == live && ingest_left == quarantined,
            "seed {}: {partition} converges to {expected} piece(s) of compacted files beside \
             its quarantined ones: compacted {compacted:?}, ingest left {ingest_left:?}, \
             quarantined {quarantined:?}; {}",
            self.seed,
            self.replay()
        );
    }
}

/// A fanned-out job of `partition` in two ranges, as the state machine runs it: each task after
/// the one before, retried up to three times; the first task that fails three times ends the
/// execution (it commits nothing; GC takes what it left).
async fn run_fan_out(
    store: &Store,
    layout: &KeyLayout,
    options: &CompactOptions,
    partition: &PartitionId,
    job: &str,
) -> Option<()> {
    let task = |step: FanOutStep, index: Option<usize>| FanOutTask {
        step,
        tenant: partition.tenant().map(str::to_string),
        hour: partition.hour_label(),
        job: Some(job.to_string()),
        index,
        ranges: Some(2),
    };
    let run = |task: FanOutTask| async move {
        for _ in 0..3 {
            if let Ok(answer) = run_fan_out_task(store, layout, options, &task).await {
                return Some(answer);
            }
        }
        None
    };
    let indexes = |answer: &TaskAnswer, field: &str| -> Vec<usize> {
        let TaskAnswer::Next(value) = answer else {
            return Vec::new();
        };
        (value[field].as_array().into_iter().flatten())
            .filter_map(|i| i.as_u64().map(|i| i as usize))
            .collect()
    };
    let plan = run(task(FanOutStep::Plan, None)).await?;
    if matches!(&plan, TaskAnswer::Next(value) if value["job"].is_null()) {
        return Some(()); // Nothing to compact.
    }
    for group in indexes(&plan, "groups") {
        run(task(FanOutStep::Run, Some(group))).await?;
    }
    let split = run(task(FanOutStep::Split, None)).await?;
    for range in indexes(&split, "ranges") {
        run(task(FanOutStep::Merge, Some(range))).await?;
    }
    run(task(FanOutStep::Commit, None)).await.map(drop)
}

#[test]
fn the_real_compactor_gc_ingest_and_readers_survive_seeded_interleavings() {
    run_seeds(&sim_seeds(200), |seed| {
        Sim::new(seed, Arc::new(multi_thread_runtime(2))).run();
    });
}

/// The schedule depends on the seed alone: CPU timing between store operations never
/// changes a choice, so a printed seed replays the failure it names.
#[test]
fn a_seed_replays_the_same_schedule() {
    let runtime = Arc::new(multi_thread_runtime(2));
    for seed in [3, 17] {
        let first = Sim::new(seed, Arc::clone(&runtime)).run();
        let second = Sim::new(seed, Arc::clone(&runtime)).run();
        assert!(
            first.len() > 100,
            "seed {seed} schedules work: {}",
            first.len()
        );
        let diverged = first.iter().zip(&second).position(|(a, b)| a != b);
        let around = |run: &[String]| {
            let at = diverged.unwrap_or(first.len().min(second.len()));
            run[at.saturating_sub(3)..(at + 2).min(run.len())].join("\n  ")
        };
        assert!(
            first == second,
            "seed {seed}: the schedule diverged at decision {diverged:?} ({} vs {} decisions)\n\
             first:\n  {}\nsecond:\n  {}",
            first.len(),
            second.len(),
            around(&first),
            around(&second)
        );
    }
}

//! Test support (feature `testing`), the one home of the fixtures every test crate of the
//! workspace uses: small log batches, Parquet fixtures, tagged ingest files, the store hooks
//! (faults, recording, quirks), the simulations' virtual store, the event payloads, and the
//! steps many tests share (a dispatch, a job run, a compaction that must end in a given
//! status, the live-set checks).

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use object_store::{ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::store::Store;

mod cli_process;
mod event_files;
mod faulty_store;
mod interop;
mod log_fixture;
mod recording_store;
mod seeds;
mod store_quirks;
mod tagged_files;
mod virtual_store;
pub use cli_process::{
    cli_command, compact_json, partition_args, partition_dir, query_hour_args, report_with_status,
    run_cli, stdout_json,
};
pub use event_files::{assert_http_answer, event_file_names, events_dir, load_event};
pub use faulty_store::{Fault, Faults, FaultyStore};
pub use interop::interop_script;
pub use log_fixture::{FIXTURE_SERVICES, fixture_properties, log_fixture};
pub use recording_store::{
    Operation, OperationLog, RecordingStore, assert_role_covers, assert_role_permits,
    assert_role_refuses,
};
pub use seeds::{run_seeds, sim_seeds};
pub use store_quirks::{
    DenyMissing, DenyMissingStore, MultipartDating, MultipartDatingStore, Refusal, Refusals,
    RefusedOutputs, RefusedOutputsStore, RefusingStore, ReversedListing, ReversedListingStore,
    SlowIngestReads, SlowIngestStore, SlowWriteStore, SlowWrites,
};
pub use tagged_files::{
    all_keys, assert_conflict, assert_exactly_once, assert_live_exactly_once, commit_request,
    file_tags, land_file, land_files, live_set, live_tags, memory_test_partition, open_memory,
    test_partition, test_partition_on,
};
pub use virtual_store::{Entry, HostClock, StoreState, VirtualStore};

/// A seeded stream of random 64-bit values ([`crate::rng::SplitMix64`]): test data that is
/// random-looking yet the same in every run.
pub fn random_stream(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = crate::rng::SplitMix64::new(seed);
    move || rng.next_u64()
}

/// Eight files of 3,000 rows in `partition`'s hour, drawn from `seed`: six services and null
/// ones, times on 200 distinct seconds (many equal keys, so the tie-break decides the order of
/// most rows), and each row tagged `file * 10_000 + row`.
pub fn tied_key_files(partition: &crate::partition::PartitionId, seed: u64) -> Vec<Vec<TestRow>> {
    let (start, _) = partition.time_range_nanos();
    let mut next = random_stream(seed);
    let services = ["checkout", "auth", "search", "ads", "cart", "email"];
    (0..8)
        .map(|f| {
            (0..3000)
                .map(|r| {
                    let s = next() as usize % (services.len() + 1);
                    let service = services.get(s).map(|s| s.to_string());
                    let t = start + (next() % 200) as i64 * 1_000_000_000;
                    (service, t, f * 10_000 + r)
                })
                .collect()
        })
        .collect()
}

/// A multi-threaded Tokio runtime with `threads` workers (the sort needs `block_in_place`).
pub fn multi_thread_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a test runtime starts")
}

/// Job options with scratch space in `scratch` and a 64 KiB memory budget, so the sort spills
/// runs even of small test files.
pub fn small_budget_options(scratch: &std::path::Path) -> crate::options::CompactOptions {
    let mut options = crate::options::CompactOptions::new(scratch);
    options.settings.budget_bytes = 64 << 10;
    options
}

/// 2026-11-29T12:00:00Z: the test partition's hour (10:00) has closed and its grace passed.
pub fn test_hour_closed() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .expect("a valid instant")
        .with_timezone(&chrono::Utc)
}

/// Dispatches `partition` at `now` as the planner does (default layout, readiness settings
/// and mode).
pub async fn dispatch_at(
    store: &Store,
    partition: &crate::partition::PartitionId,
    now: chrono::DateTime<chrono::Utc>,
) -> crate::serverless::dispatch::PartitionOutcome {
    crate::serverless::dispatch::dispatch_partition(
        store,
        &crate::partition::KeyLayout::default(),
        partition,
        now,
        &crate::serverless::readiness::ReadinessConfig::default(),
        crate::serverless::dispatch::DispatchMode::default(),
    )
    .await
    .expect("the planner dispatches")
}

/// Runs the compaction job of `partition` as the compactor does (default layout and
/// readiness settings) with `options`.
pub async fn run_job(
    store: &Store,
    partition: &crate::partition::PartitionId,
    options: &crate::options::CompactOptions,
) -> crate::serverless::dispatch::job_lifecycle::JobOutcome {
    crate::serverless::dispatch::job_lifecycle::run_compaction_job(
        store,
        &crate::partition::KeyLayout::default(),
        partition,
        options,
        &crate::serverless::readiness::ReadinessConfig::default(),
    )
    .await
    .expect("the job runs")
}

/// The `(tenant, hour)` of each outcome that dispatched a job, in the outcomes' order (an
/// empty tenant in a layout without tenants).
pub fn dispatched(
    outcomes: &[crate::serverless::dispatch::PartitionOutcome],
) -> Vec<(String, String)> {
    outcomes
        .iter()
        .filter(|o| o.decision == "dispatched")
        .map(|o| (o.tenant.clone().unwrap_or_default(), o.hour.clone()))
        .collect()
}

/// Every file (not directory) under `dir`.
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the directory reads") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Asserts that `report` quarantined `key` for a reason that mentions `why`.
pub fn assert_quarantined_for(report: &crate::report::CompactionReport, key: &str, why: &str) {
    let entry = report
        .quarantined
        .iter()
        .find(|q| q.file == key)
        .unwrap_or_else(|| panic!("{key} is quarantined: {:?}", report.quarantined));
    assert!(entry.reason.contains(why), "{key}: {}", entry.reason);
}

/// Compacts `partition`, requires status `compacted`, and returns the report and the
/// output file's bytes.
pub async fn compact_to_bytes(
    store: &Store,
    layout: &crate::partition::KeyLayout,
    partition: &crate::partition::PartitionId,
    options: &crate::options::CompactOptions,
) -> (crate::report::CompactionReport, Vec<u8>) {
    let compacted = crate::report::Status::Compacted;
    let report = compact_expecting(store, layout, partition, options, compacted).await;
    let key = report.output.as_ref().expect("an output").key.clone();
    let bytes = get_bytes(store, &key).await.to_vec();
    (report, bytes)
}

/// Compacts `partition` with `options`, requires the report's `status` (the report in the
/// message otherwise), and returns the report.
pub async fn compact_expecting(
    store: &Store,
    layout: &crate::partition::KeyLayout,
    partition: &crate::partition::PartitionId,
    options: &crate::options::CompactOptions,
    status: crate::report::Status,
) -> crate::report::CompactionReport {
    let report = crate::compact::compact_partition(store, layout, partition, options)
        .await
        .expect("the compaction runs");
    assert_eq!(report.status, status, "{report:?}");
    report
}

/// One test row: service (nullable), time, and a tag that identifies the row.
pub type TestRow = (Option<String>, i64, i64);

/// A batch of `service.name`, `time_unix_nano` and `tag` columns.
pub fn rows_batch(rows: &[TestRow]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("service.name", DataType::Utf8, true),
        Field::new("time_unix_nano", DataType::Int64, false),
        Field::new("tag", DataType::Int64, false),
    ]));
    let services: StringArray = rows.iter().map(|r| r.0.as_deref()).collect();
    let times = Int64Array::from_iter_values(rows.iter().map(|r| r.1));
    let tags = Int64Array::from_iter_values(rows.iter().map(|r| r.2));
    let columns: Vec<ArrayRef> = vec![Arc::new(services), Arc::new(times), Arc::new(tags)];
    RecordBatch::try_new(schema, columns).expect("test batch columns match their schema")
}

/// A batch of named columns, every field nullable.
pub fn named_batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .expect("test columns have equal lengths")
}

/// Encodes batches as one Parquet file (one row group per `rows_per_group` rows).
pub fn parquet_bytes(batches: &[RecordBatch], rows_per_group: usize) -> Bytes {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows_per_group.max(1)))
        .build();
    parquet_bytes_with(batches, props)
}

/// Encodes batches as a Parquet file written with `props` (empty for no batches).
pub fn parquet_bytes_with(batches: &[RecordBatch], props: WriterProperties) -> Bytes {
    let Some(first) = batches.first() else {
        return Bytes::new();
    };
    let mut buf = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut buf, first.schema(), Some(props)).expect("test writer opens");
    for b in batches {
        writer.write(b).expect("test batch writes");
    }
    writer.close().expect("test file closes");
    Bytes::from(buf)
}

/// The object key of a test's literal.
pub fn key(key: &str) -> crate::object_key::ObjectKey {
    crate::object_key::ObjectKey::parse(key).expect("a test key parses")
}

/// Puts raw bytes at a key.
pub async fn put_bytes(store: &Store, key: &str, bytes: Bytes) {
    store
        .object_store()
        .put(
            crate::object_key::ObjectKey::parse(key)
                .expect("a test key parses")
                .location(),
            PutPayload::from(bytes),
        )
        .await
        .expect("test put succeeds");
}

/// The body of `partition`'s symlink manifest under `layout`; `None` when there is none.
pub async fn symlink_manifest(
    store: &Store,
    layout: &crate::partition::KeyLayout,
    partition: &crate::partition::PartitionId,
) -> Option<String> {
    let got = (store.object_store())
        .get(&layout.symlink_key(partition))
        .await
        .ok()?;
    let body = got
        .bytes()
        .await
        .expect("the symlink manifest's body reads");
    Some(String::from_utf8(body.to_vec()).expect("a symlink manifest is UTF-8"))
}

/// Reads a whole object.
pub async fn get_bytes(store: &Store, key: &str) -> Bytes {
    store
        .object_store()
        .get(
            crate::object_key::ObjectKey::parse(key)
                .expect("a test key parses")
                .location(),
        )
        .await
        .expect("test get succeeds")
        .bytes()
        .await
        .expect("test body reads")
}

/// Decodes every row of a Parquet object.
pub async fn read_parquet(store: &Store, key: &str) -> Vec<RecordBatch> {
    let bytes = get_bytes(store, key).await;
    parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024)
        .expect("test file opens")
        .collect::<Result<Vec<_>, _>>()
        .expect("test file decodes")
}

/// A clock a test sets and advances by hand: wall time (possibly skewed) and monotonic time.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: std::sync::atomic::AtomicI64,
    monotonic_ms: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    /// A clock whose wall time reads `now_ms`.
    pub fn at(now_ms: i64) -> Arc<Self> {
        let clock = Self::default();
        clock.set_now_ms(now_ms);
        Arc::new(clock)
    }

    /// Sets the wall time.
    pub fn set_now_ms(&self, now_ms: i64) {
        self.now_ms
            .store(now_ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Moves both clocks forward.
    pub fn advance(&self, by: std::time::Duration) {
        let ms = by.as_millis() as u64;
        self.now_ms
            .fetch_add(ms as i64, std::sync::atomic::Ordering::SeqCst);
        self.monotonic_ms
            .fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl crate::clock::Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms.load(std::sync::atomic::Ordering::SeqCst)
    }
}

//! Test support (feature `testing`): small log batches, Parquet fixtures, store wrappers and
//! the workspace's event payloads.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::store::Store;

mod event_files;
mod log_fixture;
mod recording_store;
pub use event_files::{event_file_names, events_dir, load_event};
pub use log_fixture::{FIXTURE_SERVICES, fixture_properties, log_fixture};
pub use recording_store::{DenyMissingStore, Operation, RecordingStore, assert_role_permits};

/// A seeded stream of random 64-bit values ([`crate::rng::SplitMix64`]): test data that is
/// random-looking yet the same in every run.
pub fn random_stream(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = crate::rng::SplitMix64::new(seed);
    move || rng.next_u64()
}

/// A multi-threaded Tokio runtime with `threads` workers (the sort needs `block_in_place`).
pub fn multi_thread_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a test runtime starts")
}

/// Compacts `partition`, requires status `compacted`, and returns the report and the
/// output file's bytes.
pub async fn compact_to_bytes(
    store: &Store,
    layout: &crate::partition::KeyLayout,
    partition: &crate::partition::PartitionId,
    options: &crate::options::CompactOptions,
) -> (crate::report::CompactionReport, Vec<u8>) {
    let report = crate::compact::compact_partition(store, layout, partition, options)
        .await
        .expect("the compaction runs");
    assert_eq!(
        report.status,
        crate::report::Status::Compacted,
        "{:?}",
        report.error
    );
    let key = report.output.as_ref().expect("an output").key.clone();
    let bytes = get_bytes(store, &key).await.to_vec();
    (report, bytes)
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

/// Puts raw bytes at a key.
pub async fn put_bytes(store: &Store, key: &str, bytes: Bytes) {
    store
        .object_store()
        .put(
            &crate::store::key_path(key).expect("a test key parses"),
            PutPayload::from(bytes),
        )
        .await
        .expect("test put succeeds");
}

/// Reads a whole object.
pub async fn get_bytes(store: &Store, key: &str) -> Bytes {
    store
        .object_store()
        .get(&crate::store::key_path(key).expect("a test key parses"))
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

/// A store wrapper that returns every listing in reverse order, to prove that nothing
/// depends on the order a store lists in.
#[derive(Debug)]
pub struct ReversedListingStore {
    inner: Arc<dyn object_store::ObjectStore>,
}

impl ReversedListingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn object_store::ObjectStore>) -> Self {
        Self { inner }
    }
}

impl std::fmt::Display for ReversedListingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReversedListingStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for ReversedListingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        use futures::{StreamExt, TryStreamExt};
        let inner = self.inner.list(prefix);
        futures::stream::once(async move {
            let mut all: Vec<object_store::ObjectMeta> = inner.try_collect().await?;
            all.reverse();
            Ok::<_, object_store::Error>(futures::stream::iter(all.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        let mut result = self.inner.list_with_delimiter(prefix).await?;
        result.objects.reverse();
        Ok(result)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// How a [`RefusingStore`] answers a GET of a refused key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `403 Forbidden`, as S3 answers for a KMS key the caller may not use or for an
    /// archived object (`InvalidObjectState`).
    Forbidden,
    /// `404 Not Found`: the object vanished between the listing and the GET.
    Vanished,
}

/// A store wrapper whose GETs of keys ending in one of some suffixes fail with a
/// [`Refusal`]; everything else passes through.
#[derive(Debug)]
pub struct RefusingStore {
    inner: Arc<dyn object_store::ObjectStore>,
    refused: Vec<(String, Refusal)>,
}

impl RefusingStore {
    /// Wraps `inner`, refusing GETs of keys ending in each suffix of `refused`.
    pub fn new(inner: Arc<dyn object_store::ObjectStore>, refused: Vec<(String, Refusal)>) -> Self {
        Self { inner, refused }
    }
}

impl std::fmt::Display for RefusingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RefusingStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for RefusingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let refusal = self
            .refused
            .iter()
            .find(|(suffix, _)| location.as_ref().ends_with(suffix.as_str()));
        match refusal {
            Some((_, Refusal::Forbidden)) => Err(object_store::Error::PermissionDenied {
                path: location.to_string(),
                source: "InvalidObjectState: the object is archived".into(),
            }),
            Some((_, Refusal::Vanished)) => Err(object_store::Error::NotFound {
                path: location.to_string(),
                source: "NoSuchKey".into(),
            }),
            None => self.inner.get_opts(location, options).await,
        }
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Which failure a [`FaultyStore`] injects, and at which store operation (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Operation `n` and every later one fail without effect: the process crashed there.
    Crash(u64),
    /// Operation `n` takes effect but its caller sees an error (the response was lost);
    /// later operations work.
    LostResponse(u64),
    /// The first create-only write at or after operation `n` fails with `412 Precondition
    /// Failed` without writing; everything else works.
    Precondition(u64),
    /// The first create-only write at or after operation `n` fails with a `409 Conflict`
    /// (object_store's `AlreadyExists`) without writing; everything else works.
    Conflict(u64),
    /// The first multipart upload started at or after operation `n` uploads its parts but
    /// is never completed nor aborted; the process crashes there (every later operation fails).
    PartialMultipart(u64),
    /// The first create-only write at or after operation `n` lands, but its response is lost
    /// (a 5xx) and the client's retry of the same write meets `412 Precondition Failed`.
    RetriedIntoPrecondition(u64),
}

impl Fault {
    fn at(self) -> u64 {
        match self {
            Fault::Crash(n)
            | Fault::LostResponse(n)
            | Fault::Precondition(n)
            | Fault::Conflict(n)
            | Fault::PartialMultipart(n)
            | Fault::RetriedIntoPrecondition(n) => n,
        }
    }
}

#[derive(Debug, Default)]
struct FaultState {
    ops: std::sync::atomic::AtomicU64,
    /// Set once a one-shot fault fired, or for good once the process "crashed".
    fired: std::sync::atomic::AtomicBool,
    crashed: std::sync::atomic::AtomicBool,
}

/// What a [`FaultyStore`] decided for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    DoThenFail,
}

impl FaultState {
    /// Counts one operation and decides its fate. `conditional` marks a create-only write.
    fn next(&self, fault: Option<Fault>, conditional: bool, multipart: bool) -> (u64, Verdict) {
        use std::sync::atomic::Ordering::SeqCst;
        let n = self.ops.fetch_add(1, SeqCst) + 1;
        if self.crashed.load(SeqCst) {
            return (n, Verdict::Fail);
        }
        let Some(fault) = fault else {
            return (n, Verdict::Pass);
        };
        let due = n >= fault.at();
        let verdict = match fault {
            Fault::Crash(_) if due => {
                self.crashed.store(true, SeqCst);
                Verdict::Fail
            }
            Fault::LostResponse(at) if n == at => Verdict::DoThenFail,
            Fault::Precondition(_) | Fault::Conflict(_)
                if due && conditional && !self.fired.swap(true, SeqCst) =>
            {
                Verdict::Fail
            }
            Fault::RetriedIntoPrecondition(_)
                if due && conditional && !self.fired.swap(true, SeqCst) =>
            {
                Verdict::DoThenFail
            }
            Fault::PartialMultipart(_) if due && multipart && !self.fired.swap(true, SeqCst) => {
                // The upload starts; its completion is where the process dies.
                Verdict::DoThenFail
            }
            _ => Verdict::Pass,
        };
        (n, verdict)
    }
}

/// A store wrapper that injects one [`Fault`] at the N-th store operation, to check that
/// every crash point leaves a state from which a rerun converges (invariant 4).
///
/// Operations counted: every put, get, list, listing with delimiter, copy, the start of a
/// multipart upload, each uploaded part, its completion or abort, and each deleted key.
/// Run once without a fault and read [`FaultyStore::num_ops`] to learn how many there are.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn object_store::ObjectStore>,
    fault: Option<Fault>,
    state: Arc<FaultState>,
    before_upload: std::sync::Mutex<Option<Hook>>,
}

impl FaultyStore {
    /// Wraps `inner`; `None` only counts operations.
    pub fn new(inner: Arc<dyn object_store::ObjectStore>, fault: Option<Fault>) -> Self {
        Self {
            inner,
            fault,
            state: Arc::new(FaultState::default()),
            before_upload: std::sync::Mutex::new(None),
        }
    }

    /// Runs `hook` to completion when the first multipart upload starts: for a compaction,
    /// after it read the partition and sorted, before it commits. A hook that runs another
    /// compaction injects a competing commit between plan and commit.
    pub fn with_hook_before_upload(
        self,
        hook: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self {
        use futures::FutureExt;
        Self {
            before_upload: std::sync::Mutex::new(Some(Hook(hook.boxed()))),
            ..self
        }
    }

    /// Operations seen so far.
    pub fn num_ops(&self) -> u64 {
        self.state.ops.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// True once the injected fault has taken effect (a crash, a lost response, a forced
    /// precondition or conflict failure, or an abandoned multipart upload).
    pub fn has_fired(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.state.crashed.load(SeqCst)
            || self.state.fired.load(SeqCst)
            || matches!(self.fault, Some(Fault::LostResponse(n)) if self.num_ops() >= n)
    }

    fn decide(&self, conditional: bool, multipart: bool) -> (u64, Verdict) {
        self.state.next(self.fault, conditional, multipart)
    }
}

fn injected(op: u64, what: &str, path: &Path) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: format!("injected fault at operation {op} ({what} {path})").into(),
    }
}

/// Runs (or not) one operation as its verdict says; `run` is only polled when it takes effect.
async fn with_verdict<T>(
    (op, verdict): (u64, Verdict),
    what: &str,
    path: &Path,
    run: impl std::future::Future<Output = object_store::Result<T>>,
) -> object_store::Result<T> {
    match verdict {
        Verdict::Pass => run.await,
        Verdict::Fail => Err(injected(op, what, path)),
        Verdict::DoThenFail => {
            run.await?;
            Err(injected(op, &format!("{what} (response lost)"), path))
        }
    }
}

/// Work to run inside a store call, standing for another process acting at that instant.
struct Hook(futures::future::BoxFuture<'static, ()>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

impl std::fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultyStore({:?}, {})", self.fault, self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        let conditional = matches!(opts.mode, object_store::PutMode::Create);
        let (op, verdict) = self.decide(conditional, false);
        match (verdict, self.fault) {
            (Verdict::Pass, _) => self.inner.put_opts(location, payload, opts).await,
            (Verdict::Fail, Some(Fault::Precondition(_))) if conditional => {
                Err(object_store::Error::Precondition {
                    path: location.to_string(),
                    source: format!("injected 412 Precondition Failed at operation {op}").into(),
                })
            }
            (Verdict::DoThenFail, Some(Fault::RetriedIntoPrecondition(_))) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(object_store::Error::Precondition {
                    path: location.to_string(),
                    source: format!(
                        "injected 5xx then 412 Precondition Failed on the retry at operation {op}"
                    )
                    .into(),
                })
            }
            (Verdict::Fail, Some(Fault::Conflict(_))) if conditional => {
                Err(object_store::Error::AlreadyExists {
                    path: location.to_string(),
                    source: format!("injected 409 ConditionalRequestConflict at operation {op}")
                        .into(),
                })
            }
            (verdict, _) => {
                let put = self.inner.put_opts(location, payload, opts);
                with_verdict((op, verdict), "put", location, put).await
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        let hook = self.before_upload.lock().ok().and_then(|mut h| h.take());
        if let Some(Hook(hook)) = hook {
            hook.await;
        }
        let (op, verdict) = self.decide(false, true);
        let abandon = matches!(
            (verdict, self.fault),
            (Verdict::DoThenFail, Some(Fault::PartialMultipart(_)))
        );
        match verdict {
            Verdict::Fail => return Err(injected(op, "put_multipart", location)),
            Verdict::DoThenFail if !abandon => {
                let mut upload = self.inner.put_multipart_opts(location, opts).await?;
                let _ = upload.abort().await;
                return Err(injected(op, "put_multipart (response lost)", location));
            }
            _ => {}
        }
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultyUpload {
            inner,
            location: location.clone(),
            fault: self.fault,
            state: Arc::clone(&self.state),
            abandon,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let get = self.inner.get_opts(location, options);
        with_verdict(self.decide(false, false), "get", location, get).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        use futures::StreamExt;
        let inner = Arc::clone(&self.inner);
        let state = Arc::clone(&self.state);
        let fault = self.fault;
        locations
            .then(move |location| {
                let inner = Arc::clone(&inner);
                let state = Arc::clone(&state);
                async move {
                    let location = location?;
                    let decided = state.next(fault, false, false);
                    with_verdict(decided, "delete", &location, inner.delete(&location)).await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        use futures::StreamExt;
        match self.decide(false, false) {
            (_, Verdict::Pass) => self.inner.list(prefix),
            (op, _) => {
                let path = prefix.cloned().unwrap_or_default();
                futures::stream::once(async move { Err(injected(op, "list", &path)) }).boxed()
            }
        }
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        use futures::StreamExt;
        match self.decide(false, false) {
            (_, Verdict::Pass) => self.inner.list_with_offset(prefix, offset),
            (op, _) => {
                let path = prefix.cloned().unwrap_or_default();
                futures::stream::once(async move { Err(injected(op, "list", &path)) }).boxed()
            }
        }
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        match self.decide(false, false) {
            (_, Verdict::Pass) => self.inner.list_with_delimiter(prefix).await,
            (op, _) => Err(injected(
                op,
                "list_with_delimiter",
                &prefix.cloned().unwrap_or_default(),
            )),
        }
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        let copy = self.inner.copy_opts(from, to, options);
        with_verdict(self.decide(false, false), "copy", to, copy).await
    }
}

/// A multipart upload seen through a [`FaultyStore`].
#[derive(Debug)]
struct FaultyUpload {
    inner: Box<dyn object_store::MultipartUpload>,
    location: Path,
    fault: Option<Fault>,
    state: Arc<FaultState>,
    /// Parts go through, but the upload is never completed nor aborted (then the process dies).
    abandon: bool,
}

#[async_trait::async_trait]
impl object_store::MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        use futures::FutureExt;
        let (op, verdict) = self.state.next(self.fault, false, false);
        let location = self.location.clone();
        match verdict {
            Verdict::Pass => self.inner.put_part(data),
            Verdict::Fail => async move { Err(injected(op, "put_part", &location)) }.boxed(),
            Verdict::DoThenFail => {
                let part = self.inner.put_part(data);
                async move {
                    part.await?;
                    Err(injected(op, "put_part (response lost)", &location))
                }
                .boxed()
            }
        }
    }

    async fn complete(&mut self) -> object_store::Result<object_store::PutResult> {
        let (op, verdict) = self.state.next(self.fault, false, false);
        if self.abandon {
            self.state
                .crashed
                .store(true, std::sync::atomic::Ordering::SeqCst);
            return Err(injected(
                op,
                "complete_multipart (abandoned)",
                &self.location,
            ));
        }
        let complete = self.inner.complete();
        with_verdict(
            (op, verdict),
            "complete_multipart",
            &self.location,
            complete,
        )
        .await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        let (op, verdict) = self.state.next(self.fault, false, false);
        if self.abandon {
            return Err(injected(op, "abort_multipart (abandoned)", &self.location));
        }
        let abort = self.inner.abort();
        with_verdict((op, verdict), "abort_multipart", &self.location, abort).await
    }
}

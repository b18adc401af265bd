//! A fault injector for crash tests: [`FaultyStore`] fails the N-th store operation in one
//! of the ways S3 and a crashing process fail ([`Fault`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{
    GetResult, ListResult, ObjectStoreExt, PutMode, PutPayload, PutResult, UploadPart,
};

use crate::store::hooked::{
    CopyRequest, GetRequest, HookedStore, Inner, ListRequest, MetaStream, PathStream, PutRequest,
    StoreHooks, StoreResult, Upload, UploadRequest,
};

/// Which failure a [`FaultyStore`] injects, and at which store operation (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Operation `n` and every later one fail without effect: the process crashed there.
    Crash(u64),
    /// Operation `n` takes effect but its caller sees an error (the response was lost);
    /// later operations work.
    LostResponse(u64),
    /// Operation `n` fails without effect (a 503 the caller sees); later operations work.
    Unavailable(u64),
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
            | Fault::Unavailable(n)
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
            Fault::Unavailable(at) if n == at => Verdict::Fail,
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

/// The hooks of a [`FaultyStore`]: the fault, the operations counted, and the work to run when
/// the first multipart upload starts.
#[derive(Debug)]
pub struct Faults {
    fault: Option<Fault>,
    state: Arc<FaultState>,
    before_upload: std::sync::Mutex<Option<Hook>>,
    /// The upload a [`Fault::PartialMultipart`] abandons: parts go through, but it is never
    /// completed nor aborted (then the process dies).
    abandoned: std::sync::Mutex<Option<Path>>,
}

/// Whether `location` is a compaction's output (not a hold or a run in a job directory).
fn is_output(location: &Path) -> bool {
    let key = location.as_ref();
    key.starts_with("compacted/") && key.ends_with(".parquet") && !key.contains("/runs/")
}

impl Faults {
    /// Runs the hook set by [`FaultyStore::with_hook_before_upload`], once.
    async fn run_hook_before_upload(&self) {
        let hook = self.before_upload.lock().ok().and_then(|mut h| h.take());
        if let Some(Hook(hook)) = hook {
            hook.await;
        }
    }

    fn decide(&self, conditional: bool, multipart: bool) -> (u64, Verdict) {
        self.state.next(self.fault, conditional, multipart)
    }

    fn is_abandoned(&self, location: &Path) -> bool {
        self.abandoned
            .lock()
            .is_ok_and(|abandoned| abandoned.as_ref() == Some(location))
    }
}

/// A store wrapper that injects one [`Fault`] at the N-th store operation, to check that
/// every crash point leaves a state from which a rerun converges (invariant 4).
///
/// Operations counted: every put, get, list, listing with delimiter, copy, the start of a
/// multipart upload, each uploaded part, its completion or abort, and each deleted key.
/// Run once without a fault and read [`FaultyStore::num_ops`] to learn how many there are.
pub type FaultyStore = HookedStore<Faults>;

impl FaultyStore {
    /// Wraps `inner`; `None` only counts operations.
    pub fn new(inner: Arc<dyn object_store::ObjectStore>, fault: Option<Fault>) -> Self {
        let faults = Faults {
            fault,
            state: Arc::new(FaultState::default()),
            before_upload: std::sync::Mutex::new(None),
            abandoned: std::sync::Mutex::new(None),
        };
        Self::wrap(inner, Arc::new(faults))
    }

    /// Runs `hook` to completion when the first output's upload starts (a `.parquet` object
    /// under `compacted/` outside a job directory, whether in one PUT or in parts): for a
    /// compaction, after it read the partition and sorted, before it commits. A hook that runs another
    /// compaction injects a competing commit between plan and commit.
    pub fn with_hook_before_upload(
        self,
        hook: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self {
        if let Ok(mut before_upload) = self.hooks().before_upload.lock() {
            *before_upload = Some(Hook(hook.boxed()));
        }
        self
    }

    /// Operations seen so far.
    pub fn num_ops(&self) -> u64 {
        self.hooks().state.ops.load(SeqCst)
    }

    /// True once the injected fault has taken effect (a crash, a lost response, a forced
    /// precondition or conflict failure, or an abandoned multipart upload).
    pub fn has_fired(&self) -> bool {
        let faults = self.hooks();
        faults.state.crashed.load(SeqCst)
            || faults.state.fired.load(SeqCst)
            || matches!(
                faults.fault,
                Some(Fault::LostResponse(n) | Fault::Unavailable(n)) if self.num_ops() >= n
            )
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

/// A failed listing: one error in place of the entries.
fn failed_listing(op: u64, what: &'static str, prefix: Option<&Path>) -> MetaStream {
    let path = prefix.cloned().unwrap_or_default();
    futures::stream::once(async move { Err(injected(op, what, &path)) }).boxed()
}

#[async_trait::async_trait]
impl StoreHooks for Faults {
    const NAME: &'static str = "FaultyStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        let (location, conditional) = (put.location, matches!(put.opts.mode, PutMode::Create));
        if is_output(location) {
            self.run_hook_before_upload().await;
        }
        let (op, verdict) = self.decide(conditional, false);
        match (verdict, self.fault) {
            (Verdict::Pass, _) => put.forward(inner).await,
            (Verdict::Fail, Some(Fault::Precondition(_))) if conditional => {
                Err(object_store::Error::Precondition {
                    path: location.to_string(),
                    source: format!("injected 412 Precondition Failed at operation {op}").into(),
                })
            }
            (Verdict::DoThenFail, Some(Fault::RetriedIntoPrecondition(_))) => {
                put.forward(inner).await?;
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
                let put = put.forward(inner);
                with_verdict((op, verdict), "put", location, put).await
            }
        }
    }

    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> StoreResult<Upload> {
        let location = start.location;
        self.run_hook_before_upload().await;
        let (op, verdict) = self.decide(false, true);
        let abandon = matches!(
            (verdict, self.fault),
            (Verdict::DoThenFail, Some(Fault::PartialMultipart(_)))
        );
        match verdict {
            Verdict::Fail => return Err(injected(op, "put_multipart", location)),
            Verdict::DoThenFail if !abandon => {
                let mut upload = start.forward(inner).await?;
                let _ = upload.abort().await;
                return Err(injected(op, "put_multipart (response lost)", location));
            }
            _ => {}
        }
        let upload = start.forward(inner).await?;
        if abandon && let Ok(mut abandoned) = self.abandoned.lock() {
            *abandoned = Some(location.clone());
        }
        Ok(upload)
    }

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let location = get.location;
        with_verdict(
            self.decide(false, false),
            "get",
            location,
            get.forward(inner),
        )
        .await
    }

    fn delete(&self, inner: &Inner, locations: PathStream) -> PathStream {
        let inner = Arc::clone(inner);
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

    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        match self.decide(false, false) {
            (_, Verdict::Pass) => list.forward(inner),
            (op, _) => failed_listing(op, "list", list.prefix),
        }
    }

    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> StoreResult<ListResult> {
        match self.decide(false, false) {
            (_, Verdict::Pass) => inner.list_with_delimiter(prefix).await,
            (op, _) => Err(injected(
                op,
                "list_with_delimiter",
                &prefix.cloned().unwrap_or_default(),
            )),
        }
    }

    async fn copy(&self, inner: &Inner, copy: CopyRequest<'_>) -> StoreResult<()> {
        let to = copy.to;
        with_verdict(self.decide(false, false), "copy", to, copy.forward(inner)).await
    }

    fn put_part(&self, upload: &mut Upload, location: &Path, data: PutPayload) -> UploadPart {
        let (op, verdict) = self.decide(false, false);
        let location = location.clone();
        match verdict {
            Verdict::Pass => upload.put_part(data),
            Verdict::Fail => async move { Err(injected(op, "put_part", &location)) }.boxed(),
            Verdict::DoThenFail => {
                let part = upload.put_part(data);
                async move {
                    part.await?;
                    Err(injected(op, "put_part (response lost)", &location))
                }
                .boxed()
            }
        }
    }

    async fn complete(&self, upload: &mut Upload, location: &Path) -> StoreResult<PutResult> {
        let (op, verdict) = self.decide(false, false);
        if self.is_abandoned(location) {
            self.state.crashed.store(true, SeqCst);
            return Err(injected(op, "complete_multipart (abandoned)", location));
        }
        let complete = upload.complete();
        with_verdict((op, verdict), "complete_multipart", location, complete).await
    }

    async fn abort(&self, upload: &mut Upload, location: &Path) -> StoreResult<()> {
        let (op, verdict) = self.decide(false, false);
        if self.is_abandoned(location) {
            return Err(injected(op, "abort_multipart (abandoned)", location));
        }
        let abort = upload.abort();
        with_verdict((op, verdict), "abort_multipart", location, abort).await
    }
}

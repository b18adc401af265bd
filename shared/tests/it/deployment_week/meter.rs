//! One invocation's view of the store: the bytes it moves (which set its modelled duration),
//! the faults the simulation injects into it, and the ingest files a KMS key refuses.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use object_store::path::Path;
use object_store::{GetResult, PutResult, UploadPart};
use ourios_compaction::store::hooked::{GetRequest, Inner, PutRequest, StoreHooks};
use ourios_compaction::store::hooked::{Upload, UploadRequest};

type ObjResult<T> = object_store::Result<T>;

/// A fault of one invocation, at its `at`-th store operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The process dies before the operation: it and everything after it fail.
    Crash,
    /// The operation takes effect but its response is lost (an error).
    LostResponse,
}

/// The hooks of one invocation.
#[derive(Debug)]
pub(crate) struct Meter {
    pub(crate) bytes: AtomicU64,
    /// Requests sent (each costs a round trip).
    pub(crate) requests: AtomicU64,
    ops: AtomicU64,
    fault: Option<(u64, Fault)>,
    crashed: AtomicBool,
    refused: Arc<Mutex<Refusals>>,
}

/// What the store refuses the functions' role, as a KMS key or a bucket policy would.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// Ingest keys whose GET is refused (a KMS key the role may not use).
    pub(crate) reads: BTreeSet<String>,
    /// Prefixes under which writes are refused (a bucket policy's explicit deny).
    pub(crate) writes: BTreeSet<String>,
}

impl Refusals {
    fn write_refused(&self, location: &Path) -> Option<object_store::Error> {
        let key = location.as_ref();
        (self
            .writes
            .iter()
            .any(|prefix| key.starts_with(prefix.as_str())))
        .then(|| object_store::Error::PermissionDenied {
            path: key.to_string(),
            source: "403: an explicit deny in the bucket policy".into(),
        })
    }
}

impl Meter {
    pub(crate) fn new(fault: Option<(u64, Fault)>, refused: Arc<Mutex<Refusals>>) -> Self {
        Self {
            bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            fault,
            crashed: AtomicBool::new(false),
            refused,
        }
    }

    /// Whether the injected crash happened.
    pub(crate) fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Counts an operation: `Err` when it must fail before it takes effect, `Ok(true)` when
    /// its response must be lost after it does.
    fn op(&self, what: &str) -> ObjResult<bool> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        let injected = |kind: &str| object_store::Error::Generic {
            store: "MeteredStore",
            source: format!("injected {kind} at {what}").into(),
        };
        if self.crashed() {
            return Err(injected("crash"));
        }
        match self.fault {
            Some((at, Fault::Crash)) if at == n => {
                self.crashed.store(true, Ordering::SeqCst);
                Err(injected("crash"))
            }
            Some((at, Fault::LostResponse)) if at == n => Ok(true),
            _ => Ok(false),
        }
    }

    fn lose<T>(&self, lose: bool, result: ObjResult<T>, what: &str) -> ObjResult<T> {
        match (lose, result) {
            (true, Ok(_)) => Err(object_store::Error::Generic {
                store: "MeteredStore",
                source: format!("injected lost response at {what}").into(),
            }),
            (_, result) => result,
        }
    }
}

/// Parquet files, whose bytes the simulation scales; manifests, records and markers are a few
/// KB in any deployment, so only their requests count.
fn is_data(location: &Path) -> bool {
    location.as_ref().ends_with(".parquet")
}

#[async_trait::async_trait]
impl StoreHooks for Meter {
    const NAME: &'static str = "MeteredStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> ObjResult<PutResult> {
        let what = format!("put {}", put.location);
        let lose = self.op(&what)?;
        if let Some(refused) = self
            .refused
            .lock()
            .expect("lock")
            .write_refused(put.location)
        {
            return Err(refused);
        }
        if is_data(put.location) {
            self.bytes
                .fetch_add(put.payload.content_length() as u64, Ordering::SeqCst);
        }
        let result = put.forward(inner).await;
        self.lose(lose, result, &what)
    }

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> ObjResult<GetResult> {
        let what = format!("get {}", get.location);
        let lose = self.op(&what)?;
        let key = get.location.to_string();
        if !get.options.head && self.refused.lock().expect("lock").reads.contains(&key) {
            return Err(object_store::Error::PermissionDenied {
                path: key,
                source: "403: the KMS key refuses this role".into(),
            });
        }
        let result = get.forward(inner).await;
        if let (true, Ok(got)) = (key.ends_with(".parquet"), &result) {
            let read = got.range.end - got.range.start;
            self.bytes.fetch_add(read, Ordering::SeqCst);
        }
        self.lose(lose, result, &what)
    }

    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> ObjResult<Upload> {
        let what = format!("put_multipart {}", start.location);
        let lose = self.op(&what)?;
        if let Some(refused) = (self.refused.lock().expect("lock")).write_refused(start.location) {
            return Err(refused);
        }
        let result = start.forward(inner).await;
        self.lose(lose, result, &what)
    }

    fn put_part(
        &self,
        upload: &mut Upload,
        location: &Path,
        data: object_store::PutPayload,
    ) -> UploadPart {
        if is_data(location) {
            self.bytes
                .fetch_add(data.content_length() as u64, Ordering::SeqCst);
        }
        let failed = self.op(&format!("put_part {location}")).err();
        let part = upload.put_part(data);
        Box::pin(async move {
            match failed {
                Some(e) => Err(e),
                None => part.await,
            }
        })
    }

    fn delete(
        &self,
        inner: &Inner,
        locations: ourios_compaction::store::hooked::PathStream,
    ) -> ourios_compaction::store::hooked::PathStream {
        use futures::StreamExt;
        self.requests.fetch_add(1, Ordering::SeqCst);
        if self.crashed() {
            let dead = object_store::Error::Generic {
                store: "MeteredStore",
                source: "injected crash: delete after the process died".into(),
            };
            return futures::stream::once(async move { Err(dead) }).boxed();
        }
        inner.delete_stream(locations)
    }

    fn list(
        &self,
        inner: &Inner,
        list: ourios_compaction::store::hooked::ListRequest<'_>,
    ) -> ourios_compaction::store::hooked::MetaStream {
        self.requests.fetch_add(1, Ordering::SeqCst);
        list.forward(inner)
    }

    async fn complete(&self, upload: &mut Upload, location: &Path) -> ObjResult<PutResult> {
        let what = format!("complete {location}");
        let lose = self.op(&what)?;
        let result = upload.complete().await;
        self.lose(lose, result, &what)
    }
}

//! Store behaviours tests need that a plain in-memory store lacks: listings in another order,
//! refused, forbidden and slow reads, slow writes, and S3's dating of multipart objects; each a [`StoreHooks`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{TimeZone, Utc};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetResult, ListResult, ObjectMeta, ObjectStore, PutResult};

use crate::clock::Clock;
use crate::store::hooked::{
    CopyRequest, GetRequest, HookedStore, Inner, ListRequest, MetaStream, PutRequest, StoreHooks,
    StoreResult, Upload, UploadRequest,
};

/// Lists in reverse order.
#[derive(Debug)]
pub struct ReversedListing;

#[async_trait::async_trait]
impl StoreHooks for ReversedListing {
    const NAME: &'static str = "ReversedListingStore";

    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        let listed = list.forward(inner);
        futures::stream::once(async move {
            let mut all: Vec<ObjectMeta> = listed.try_collect().await?;
            all.reverse();
            Ok::<_, object_store::Error>(futures::stream::iter(all.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> StoreResult<ListResult> {
        let mut result = inner.list_with_delimiter(prefix).await?;
        result.objects.reverse();
        Ok(result)
    }
}

/// A store wrapper that returns every listing in reverse order, to prove that nothing
/// depends on the order a store lists in.
pub type ReversedListingStore = HookedStore<ReversedListing>;

impl ReversedListingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self::wrap(inner, Arc::new(ReversedListing))
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
    /// `500 Internal Error` on every GET (after the client's own retries): an object the
    /// store holds but cannot serve.
    Broken,
}

/// Refuses GETs of keys ending in one of some suffixes.
#[derive(Debug)]
pub struct Refusals(Vec<(String, Refusal)>);

#[async_trait::async_trait]
impl StoreHooks for Refusals {
    const NAME: &'static str = "RefusingStore";

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let location = get.location;
        let refusal = self
            .0
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
            Some((_, Refusal::Broken)) => Err(object_store::Error::Generic {
                store: "S3",
                source: format!("500 InternalError reading {location}").into(),
            }),
            None => get.forward(inner).await,
        }
    }
}

/// A store wrapper whose GETs of keys ending in one of some suffixes fail with a
/// [`Refusal`]; everything else passes through.
pub type RefusingStore = HookedStore<Refusals>;

impl RefusingStore {
    /// Wraps `inner`, refusing GETs of keys ending in each suffix of `refused`.
    pub fn new(inner: Arc<dyn ObjectStore>, refused: Vec<(String, Refusal)>) -> Self {
        Self::wrap(inner, Arc::new(Refusals(refused)))
    }
}

/// Delays each GET of a key holding a segment `data` (ingest files) by a fixed time, as a slow
/// or throttled store answers: a job's time runs out while it stages its inputs.
#[derive(Debug)]
pub struct SlowIngestReads(std::time::Duration);

#[async_trait::async_trait]
impl StoreHooks for SlowIngestReads {
    const NAME: &'static str = "SlowIngestStore";

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        if get.location.parts().any(|part| part.as_ref() == "data") {
            tokio::time::sleep(self.0).await;
        }
        get.forward(inner).await
    }
}

/// A store wrapper whose reads of ingest files each take `delay` longer.
pub type SlowIngestStore = HookedStore<SlowIngestReads>;

impl SlowIngestStore {
    /// Wraps `inner`, delaying each GET of an ingest file by `delay`.
    pub fn new(inner: Arc<dyn ObjectStore>, delay: std::time::Duration) -> Self {
        Self::wrap(inner, Arc::new(SlowIngestReads(delay)))
    }
}

/// Delays the completion of each multipart upload of an output (`part-…`), as a large upload
/// takes its time (the object appears that much after its upload started), and each PUT of a
/// manifest version, as a commit that lands late.
#[derive(Debug)]
pub struct SlowWrites {
    output_upload: std::time::Duration,
    manifest_put: std::time::Duration,
}

#[async_trait::async_trait]
impl StoreHooks for SlowWrites {
    const NAME: &'static str = "SlowWriteStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        if put
            .location
            .parts()
            .any(|part| part.as_ref() == "manifests")
        {
            tokio::time::sleep(self.manifest_put).await;
        }
        put.forward(inner).await
    }

    async fn complete(&self, upload: &mut Upload, location: &Path) -> StoreResult<PutResult> {
        if location
            .filename()
            .is_some_and(|name| name.starts_with("part-"))
        {
            tokio::time::sleep(self.output_upload).await;
        }
        upload.complete().await
    }
}

/// A store wrapper whose uploads of outputs and writes of manifest versions take longer.
pub type SlowWriteStore = HookedStore<SlowWrites>;

impl SlowWriteStore {
    /// Wraps `inner`, delaying the completion of each output's upload by `output_upload` and
    /// each PUT of a manifest version by `manifest_put`.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        output_upload: std::time::Duration,
        manifest_put: std::time::Duration,
    ) -> Self {
        Self::wrap(
            inner,
            Arc::new(SlowWrites {
                output_upload,
                manifest_put,
            }),
        )
    }
}

/// Fails every write of a compacted output (a PUT or the start of an upload under
/// `compacted/`), as a bucket policy or a full quota would.
#[derive(Debug)]
pub struct RefusedOutputs;

impl RefusedOutputs {
    fn refuse(location: &Path) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: format!("403 AccessDenied writing {location}").into(),
        }
    }

    fn is_output(location: &Path) -> bool {
        location.as_ref().starts_with("compacted/")
    }
}

#[async_trait::async_trait]
impl StoreHooks for RefusedOutputs {
    const NAME: &'static str = "RefusedOutputsStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        if Self::is_output(put.location) {
            return Err(Self::refuse(put.location));
        }
        put.forward(inner).await
    }

    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> StoreResult<Upload> {
        if Self::is_output(start.location) {
            return Err(Self::refuse(start.location));
        }
        start.forward(inner).await
    }
}

/// A store wrapper that refuses every write of a compacted output.
pub type RefusedOutputsStore = HookedStore<RefusedOutputs>;

impl RefusedOutputsStore {
    /// Wraps `inner`, refusing writes under `compacted/`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self::wrap(inner, Arc::new(RefusedOutputs))
    }
}

/// Answers a GET or HEAD of a missing key with 403.
#[derive(Debug)]
pub struct DenyMissing;

#[async_trait::async_trait]
impl StoreHooks for DenyMissing {
    const NAME: &'static str = "DenyMissingStore";

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        match get.forward(inner).await {
            Err(object_store::Error::NotFound { path, .. }) => {
                Err(object_store::Error::PermissionDenied {
                    path,
                    source: "403 Access Denied (the caller may not list this key)".into(),
                })
            }
            other => other,
        }
    }
}

/// A store wrapper that answers a GET or HEAD of a missing key with 403 Permission Denied,
/// as S3 does for a caller that may read a key but not list it.
pub type DenyMissingStore = HookedStore<DenyMissing>;

impl DenyMissingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self::wrap(inner, Arc::new(DenyMissing))
    }
}

/// Dates each object a multipart upload wrote at the upload's initiation, read from the
/// store's clock.
#[derive(Debug)]
pub struct MultipartDating {
    clock: Arc<dyn Clock>,
    /// When each upload in flight started, by key (Unix ms).
    started_ms: Mutex<HashMap<Path, i64>>,
    /// The Last-Modified of each object a completed upload wrote (Unix ms).
    dated_ms: Mutex<HashMap<Path, i64>>,
}

impl MultipartDating {
    fn set_date(&self, location: &Path, date_ms: Option<i64>) {
        if let Ok(mut dated) = self.dated_ms.lock() {
            match date_ms {
                Some(ms) => dated.insert(location.clone(), ms),
                None => dated.remove(location),
            };
        }
    }

    /// `meta` with the Last-Modified of its upload's initiation, when an upload wrote it.
    fn dated(&self, mut meta: ObjectMeta) -> ObjectMeta {
        let date_ms = self
            .dated_ms
            .lock()
            .ok()
            .and_then(|dated| dated.get(&meta.location).copied());
        if let Some(date) = date_ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single()) {
            meta.last_modified = date;
        }
        meta
    }
}

#[async_trait::async_trait]
impl StoreHooks for Arc<MultipartDating> {
    const NAME: &'static str = "MultipartDatingStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        let location = put.location;
        let result = put.forward(inner).await?;
        self.set_date(location, None);
        Ok(result)
    }

    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> StoreResult<Upload> {
        let (location, started_ms) = (start.location, self.clock.now_ms());
        let upload = start.forward(inner).await?;
        if let Ok(mut started) = self.started_ms.lock() {
            started.insert(location.clone(), started_ms);
        }
        Ok(upload)
    }

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let mut result = get.forward(inner).await?;
        result.meta = self.dated(result.meta);
        Ok(result)
    }

    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        let dating = Arc::clone(self);
        list.forward(inner)
            .map_ok(move |meta| dating.dated(meta))
            .boxed()
    }

    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> StoreResult<ListResult> {
        let mut result = inner.list_with_delimiter(prefix).await?;
        result.objects = result.objects.into_iter().map(|m| self.dated(m)).collect();
        Ok(result)
    }

    async fn copy(&self, inner: &Inner, copy: CopyRequest<'_>) -> StoreResult<()> {
        let to = copy.to;
        copy.forward(inner).await?;
        self.set_date(to, None);
        Ok(())
    }

    async fn complete(&self, upload: &mut Upload, location: &Path) -> StoreResult<PutResult> {
        let result = upload.complete().await?;
        let started_ms = self
            .started_ms
            .lock()
            .ok()
            .and_then(|mut started| started.remove(location));
        self.set_date(location, started_ms);
        Ok(result)
    }
}

/// A store wrapper with S3's dating of multipart objects: an object a multipart upload wrote
/// is dated when the upload started, not when it completed (a plain PUT is dated as it lands).
/// A file uploaded for longer than a grace period is older than the grace the moment it
/// appears.
pub type MultipartDatingStore = HookedStore<Arc<MultipartDating>>;

impl MultipartDatingStore {
    /// Wraps `inner`, whose own dates come from `clock`.
    pub fn new(inner: Arc<dyn ObjectStore>, clock: Arc<dyn Clock>) -> Self {
        let dating = MultipartDating {
            clock,
            started_ms: Mutex::default(),
            dated_ms: Mutex::default(),
        };
        Self::wrap(inner, Arc::new(Arc::new(dating)))
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;
    use crate::testing::ManualClock;

    /// The Unix-ms Last-Modified of `meta`.
    fn last_modified_ms(meta: &ObjectMeta) -> i64 {
        meta.last_modified.timestamp_millis()
    }

    /// The Unix-ms Last-Modified of the object at `path`, by a HEAD.
    async fn head_ms(store: &impl ObjectStore, path: &Path) -> i64 {
        last_modified_ms(&store.head(path).await.expect("head"))
    }

    #[tokio::test]
    async fn a_multipart_object_is_dated_at_the_upload_start() {
        let clock = ManualClock::at(1_000_000);
        let store = MultipartDatingStore::new(Arc::new(InMemory::new()), clock.clone());
        let big = Path::from("p/big");
        let mut upload = store.put_multipart(&big).await.expect("start");
        clock.set_now_ms(5_000_000);
        upload
            .put_part(PutPayload::from_static(b"part"))
            .await
            .expect("part");
        upload.complete().await.expect("complete");
        let small = Path::from("p/small");
        store
            .put(&small, PutPayload::from_static(b"x"))
            .await
            .expect("put");
        assert_eq!(head_ms(&store, &big).await, 1_000_000);
        let listed: Vec<ObjectMeta> = store
            .list(Some(&Path::from("p")))
            .try_collect()
            .await
            .expect("list");
        let dates: Vec<i64> = listed.iter().map(last_modified_ms).collect();
        assert_eq!(dates[0], 1_000_000);
        assert_ne!(dates[1], 1_000_000, "a plain put keeps the store's date");
        let dirs = store
            .list_with_delimiter(Some(&Path::from("p")))
            .await
            .expect("dirs");
        assert_eq!(last_modified_ms(&dirs.objects[0]), 1_000_000);
        store
            .put(&big, PutPayload::from_static(b"rewritten"))
            .await
            .expect("put");
        assert_ne!(head_ms(&store, &big).await, 1_000_000);
    }
}

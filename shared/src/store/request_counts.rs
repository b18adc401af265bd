//! A store wrapper that counts every request a job sends, by S3 price class (the `requests`
//! of a job's [`crate::cost::JobCost`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetResult, ListResult, ObjectStore, PutPayload, PutResult, UploadPart};

use crate::cost::RequestCounts;
use crate::store::hooked::{
    CopyRequest, GetRequest, HookedStore, Inner, ListRequest, MetaStream, PathStream, PutRequest,
    StoreHooks, StoreResult, Upload, UploadRequest,
};

/// Keys one S3 LIST request returns at most (a longer listing is several requests).
const LIST_PAGE: u64 = 1_000;

/// Requests counted so far, shared between a [`RequestCountingStore`] and its caller.
#[derive(Debug, Default)]
pub struct RequestCounters {
    get: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
}

impl RequestCounters {
    /// The counts now.
    pub fn snapshot(&self) -> RequestCounts {
        RequestCounts {
            get: self.get.load(Ordering::Relaxed),
            put: self.put.load(Ordering::Relaxed),
            list: self.list.load(Ordering::Relaxed),
            delete: self.delete.load(Ordering::Relaxed),
        }
    }

    /// Counts one GET made outside the store (a local file read in place of a download).
    pub fn count_get(&self, key: &Path) {
        self.count(Class::Get, "read in place", key, 1);
    }

    /// Counts the LIST requests of a listing of `entries` keys under `prefix` made outside the
    /// store (a local directory walked in place): one per page, at least one.
    pub fn count_listing(&self, prefix: &Path, entries: u64) {
        self.count(Class::List, "walk", prefix, list_requests(entries));
    }

    /// Counts one DELETE-class request made outside the store (by raw S3 access).
    pub fn count_delete(&self, key: &Path) {
        self.count(Class::Delete, "delete (raw)", key, 1);
    }

    /// Counts `n` requests of `class`, logged (at debug level) with the operation and key, so
    /// a job's requests can be told apart (`OURIOS_LOG=ourios_compaction::store=debug`).
    fn count(&self, class: Class, operation: &str, key: &Path, n: u64) {
        let counter = match class {
            Class::Get => &self.get,
            Class::Put => &self.put,
            Class::List => &self.list,
            Class::Delete => &self.delete,
        };
        counter.fetch_add(n, Ordering::Relaxed);
        tracing::debug!(class = ?class, operation, key = %key, n, "store request");
    }
}

/// An S3 price class.
#[derive(Debug, Clone, Copy)]
enum Class {
    Get,
    Put,
    List,
    Delete,
}

/// The LIST requests of a listing of `entries` keys: one per page of [`LIST_PAGE`], at least
/// one.
fn list_requests(entries: u64) -> u64 {
    entries.div_ceil(LIST_PAGE).max(1)
}

/// Counts a listing's requests: one per page of [`LIST_PAGE`] entries, at least one.
fn counted_listing(stream: MetaStream, counters: Arc<RequestCounters>, prefix: Path) -> MetaStream {
    counters.count(Class::List, "list", &prefix, 1);
    stream
        .enumerate()
        .map(move |(i, item)| {
            let i = i as u64;
            if i > 0 && i.is_multiple_of(LIST_PAGE) {
                counters.count(Class::List, "list (next page)", &prefix, 1);
            }
            item
        })
        .boxed()
}

#[async_trait::async_trait]
impl StoreHooks for Arc<RequestCounters> {
    const NAME: &'static str = "RequestCountingStore";

    /// A conditional write the store does not offer (a local directory's overwrite by ETag)
    /// sends no request, and is not counted.
    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        let location = put.location.clone();
        let result = put.forward(inner).await;
        if !matches!(
            result,
            Err(object_store::Error::NotImplemented { .. }
                | object_store::Error::NotSupported { .. })
        ) {
            self.count(Class::Put, "put", &location, 1);
        }
        result
    }

    /// CreateMultipartUpload; each part and the completion are counted as they go.
    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> StoreResult<Upload> {
        self.count(Class::Put, "create multipart upload", start.location, 1);
        start.forward(inner).await
    }

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let operation = if get.options.head { "head" } else { "get" };
        self.count(Class::Get, operation, get.location, 1);
        get.forward(inner).await
    }

    fn delete(&self, inner: &Inner, locations: PathStream) -> PathStream {
        let counters = Arc::clone(self);
        let counted = locations
            .inspect(move |key| {
                if let Ok(key) = key {
                    counters.count(Class::Delete, "delete", key, 1);
                }
            })
            .boxed();
        inner.delete_stream(counted)
    }

    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        let prefix = list.prefix.cloned().unwrap_or_default();
        counted_listing(list.forward(inner), Arc::clone(self), prefix)
    }

    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> StoreResult<ListResult> {
        let result = inner.list_with_delimiter(prefix).await?;
        let entries = (result.objects.len() + result.common_prefixes.len()) as u64;
        let prefix = prefix.cloned().unwrap_or_default();
        self.count(
            Class::List,
            "list directories",
            &prefix,
            list_requests(entries),
        );
        Ok(result)
    }

    async fn copy(&self, inner: &Inner, copy: CopyRequest<'_>) -> StoreResult<()> {
        self.count(Class::Put, "copy", copy.to, 1);
        copy.forward(inner).await
    }

    fn put_part(&self, upload: &mut Upload, location: &Path, data: PutPayload) -> UploadPart {
        self.count(Class::Put, "upload part", location, 1);
        upload.put_part(data)
    }

    async fn complete(&self, upload: &mut Upload, location: &Path) -> StoreResult<PutResult> {
        self.count(Class::Put, "complete multipart upload", location, 1);
        upload.complete().await
    }

    /// AbortMultipartUpload is a DELETE-class request (free).
    async fn abort(&self, upload: &mut Upload, location: &Path) -> StoreResult<()> {
        self.count(Class::Delete, "abort multipart upload", location, 1);
        upload.abort().await
    }
}

/// Wraps a store and counts each request that reaches it.
pub type RequestCountingStore = HookedStore<Arc<RequestCounters>>;

impl RequestCountingStore {
    /// Wraps `inner`; the counters are shared with the caller.
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Self, Arc<RequestCounters>) {
        let counters = Arc::new(RequestCounters::default());
        (Self::wrap(inner, Arc::new(Arc::clone(&counters))), counters)
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;

    #[tokio::test]
    async fn every_request_is_counted_by_class() {
        let (store, counters) = RequestCountingStore::new(Arc::new(InMemory::new()));
        for i in 0..3 {
            let key = Path::from(format!("p/f{i}"));
            store
                .put(&key, PutPayload::from_static(b"abc"))
                .await
                .expect("put");
        }
        let mut upload = store
            .put_multipart(&Path::from("p/big"))
            .await
            .expect("create");
        upload
            .put_part(PutPayload::from_static(b"one"))
            .await
            .expect("part");
        upload
            .put_part(PutPayload::from_static(b"two"))
            .await
            .expect("part");
        upload.complete().await.expect("complete");
        store.get(&Path::from("p/f0")).await.expect("get");
        store.head(&Path::from("p/f1")).await.expect("head");
        let listed: Vec<_> = store.list(Some(&Path::from("p"))).collect().await;
        assert_eq!(listed.len(), 4);
        store
            .list_with_delimiter(Some(&Path::from("p")))
            .await
            .expect("list");
        store.delete(&Path::from("p/f2")).await.expect("delete");
        assert_eq!(
            counters.snapshot(),
            RequestCounts {
                get: 2,
                put: 3 + 4,
                list: 2,
                delete: 1,
            }
        );
    }

    #[tokio::test]
    async fn a_long_listing_is_one_request_per_thousand_keys() {
        let (store, counters) = RequestCountingStore::new(Arc::new(InMemory::new()));
        for i in 0..2_001 {
            store
                .put(
                    &Path::from(format!("k/{i:05}")),
                    PutPayload::from_static(b""),
                )
                .await
                .expect("put");
        }
        let before = counters.snapshot().list;
        let n = store.list(Some(&Path::from("k"))).count().await;
        assert_eq!(n, 2_001);
        assert_eq!(counters.snapshot().list - before, 3);
        let walked = Path::from("k");
        counters.count_listing(&walked, 0);
        counters.count_listing(&walked, 1_000);
        counters.count_listing(&walked, 1_001);
        assert_eq!(counters.snapshot().list - before, 3 + 1 + 1 + 2);
    }
}

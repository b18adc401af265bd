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
    pub fn count_get(&self) {
        Self::add(&self.get, 1);
    }

    /// Counts the LIST requests of a listing of `entries` keys made outside the store (a local
    /// directory walked in place): one per page, at least one.
    pub fn count_listing(&self, entries: u64) {
        Self::add(&self.list, entries.div_ceil(LIST_PAGE).max(1));
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Counts a listing's requests: one per page of [`LIST_PAGE`] entries, at least one.
fn counted_listing(stream: MetaStream, counters: Arc<RequestCounters>) -> MetaStream {
    RequestCounters::add(&counters.list, 1);
    stream
        .enumerate()
        .map(move |(i, item)| {
            let i = i as u64;
            if i > 0 && i.is_multiple_of(LIST_PAGE) {
                RequestCounters::add(&counters.list, 1);
            }
            item
        })
        .boxed()
}

#[async_trait::async_trait]
impl StoreHooks for Arc<RequestCounters> {
    const NAME: &'static str = "RequestCountingStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        RequestCounters::add(&self.put, 1);
        put.forward(inner).await
    }

    /// CreateMultipartUpload; each part and the completion are counted as they go.
    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> StoreResult<Upload> {
        RequestCounters::add(&self.put, 1);
        start.forward(inner).await
    }

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        RequestCounters::add(&self.get, 1);
        get.forward(inner).await
    }

    fn delete(&self, inner: &Inner, locations: PathStream) -> PathStream {
        let counters = Arc::clone(self);
        let counted = locations
            .inspect(move |_| RequestCounters::add(&counters.delete, 1))
            .boxed();
        inner.delete_stream(counted)
    }

    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        counted_listing(list.forward(inner), Arc::clone(self))
    }

    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> StoreResult<ListResult> {
        let result = inner.list_with_delimiter(prefix).await?;
        let entries = (result.objects.len() + result.common_prefixes.len()) as u64;
        self.count_listing(entries);
        Ok(result)
    }

    async fn copy(&self, inner: &Inner, copy: CopyRequest<'_>) -> StoreResult<()> {
        RequestCounters::add(&self.put, 1);
        copy.forward(inner).await
    }

    fn put_part(&self, upload: &mut Upload, _location: &Path, data: PutPayload) -> UploadPart {
        RequestCounters::add(&self.put, 1);
        upload.put_part(data)
    }

    async fn complete(&self, upload: &mut Upload, _location: &Path) -> StoreResult<PutResult> {
        RequestCounters::add(&self.put, 1);
        upload.complete().await
    }

    /// AbortMultipartUpload is a DELETE-class request (free).
    async fn abort(&self, upload: &mut Upload, _location: &Path) -> StoreResult<()> {
        RequestCounters::add(&self.delete, 1);
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
        counters.count_listing(0);
        counters.count_listing(1_000);
        counters.count_listing(1_001);
        assert_eq!(counters.snapshot().list - before, 3 + 1 + 1 + 2);
    }
}

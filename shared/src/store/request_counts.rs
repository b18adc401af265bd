//! A store wrapper that counts every request a job sends, by S3 price class (the `requests`
//! of a job's [`crate::cost::JobCost`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};

use crate::cost::RequestCounts;

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

/// Wraps a store and counts each request that reaches it.
#[derive(Debug)]
pub struct RequestCountingStore {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<RequestCounters>,
}

impl RequestCountingStore {
    /// Wraps `inner`; the counters are shared with the caller.
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Self, Arc<RequestCounters>) {
        let counters = Arc::new(RequestCounters::default());
        (
            Self {
                inner,
                counters: Arc::clone(&counters),
            },
            counters,
        )
    }
}

impl std::fmt::Display for RequestCountingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestCountingStore({})", self.inner)
    }
}

/// Counts a listing's requests: one per page of [`LIST_PAGE`] entries, at least one.
fn counted_listing(
    stream: BoxStream<'static, object_store::Result<ObjectMeta>>,
    counters: Arc<RequestCounters>,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
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
impl ObjectStore for RequestCountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        RequestCounters::add(&self.counters.put, 1);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        // CreateMultipartUpload; each part and the completion are counted by the upload.
        RequestCounters::add(&self.counters.put, 1);
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(CountingUpload {
            inner: upload,
            counters: Arc::clone(&self.counters),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        RequestCounters::add(&self.counters.get, 1);
        self.inner.get_opts(location, options).await
    }

    // `get_ranges` keeps its default: it coalesces ranges and issues each through `get_opts`.

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let counters = Arc::clone(&self.counters);
        let counted = locations
            .inspect(move |_| RequestCounters::add(&counters.delete, 1))
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        counted_listing(self.inner.list(prefix), Arc::clone(&self.counters))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        counted_listing(
            self.inner.list_with_offset(prefix, offset),
            Arc::clone(&self.counters),
        )
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let result = self.inner.list_with_delimiter(prefix).await?;
        let entries = (result.objects.len() + result.common_prefixes.len()) as u64;
        self.counters.count_listing(entries);
        Ok(result)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        RequestCounters::add(&self.counters.put, 1);
        self.inner.copy_opts(from, to, options).await
    }
}

/// A multipart upload whose parts and completion are counted as PUT requests.
#[derive(Debug)]
struct CountingUpload {
    inner: Box<dyn MultipartUpload>,
    counters: Arc<RequestCounters>,
}

#[async_trait::async_trait]
impl MultipartUpload for CountingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        RequestCounters::add(&self.counters.put, 1);
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        RequestCounters::add(&self.counters.put, 1);
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        // AbortMultipartUpload is a DELETE-class request (free).
        RequestCounters::add(&self.counters.delete, 1);
        self.inner.abort().await
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

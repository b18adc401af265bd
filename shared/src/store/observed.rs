//! A pass-through store wrapper that tells an observer about every GET: the one mechanism
//! behind the read counters of queries ([`crate::store::counting`]) and the simulated network of
//! benchmarks.

use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Sees each GET that went through an [`ObservedStore`], after it returned.
#[async_trait::async_trait]
pub trait ReadObserver: std::fmt::Debug + Send + Sync + 'static {
    /// A GET returned `bytes` bytes; `None` for a HEAD request (no body).
    async fn on_get(&self, bytes: Option<u64>);
}

/// Wraps a store; reads are reported to the observer, everything else passes through.
#[derive(Debug)]
pub struct ObservedStore<O> {
    inner: Arc<dyn ObjectStore>,
    observer: O,
}

impl<O: ReadObserver> ObservedStore<O> {
    /// Wraps `inner`, reporting its reads to `observer`.
    pub fn wrap(inner: Arc<dyn ObjectStore>, observer: O) -> Self {
        Self { inner, observer }
    }
}

impl<O> std::fmt::Display for ObservedStore<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObservedStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl<O: ReadObserver> ObjectStore for ObservedStore<O> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let head = options.head;
        let result = self.inner.get_opts(location, options).await?;
        let bytes = (!head).then(|| result.range.end - result.range.start);
        self.observer.on_get(bytes).await;
        Ok(result)
    }

    // `get_ranges` keeps its default: it coalesces nearby ranges and issues them through
    // `get_opts` above, so the observer sees each request that reaches the store once.

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

//! The one store wrapper: a forwarding [`HookedStore`] that hands each operation to its
//! [`StoreHooks`], whose methods forward it unchanged unless a hook overrides them. Every
//! observer, counter, recorder, fault injector and store quirk of the workspace is such a set
//! of hooks.

use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};

/// What a store operation returns.
pub type StoreResult<T> = object_store::Result<T>;

/// The store a [`HookedStore`] wraps, as its hooks receive it.
pub type Inner = Arc<dyn ObjectStore>;

/// A multipart upload as the hooks see it.
pub type Upload = Box<dyn MultipartUpload>;

/// A stream of keys (what a delete takes and returns).
pub type PathStream = BoxStream<'static, StoreResult<Path>>;

/// A stream of listed objects.
pub type MetaStream = BoxStream<'static, StoreResult<ObjectMeta>>;

/// A PUT on its way to the store.
#[derive(Debug)]
pub struct PutRequest<'a> {
    /// The key written.
    pub location: &'a Path,
    /// The bytes written.
    pub payload: PutPayload,
    /// Its mode (create-only, versioned) and attributes.
    pub opts: PutOptions,
}

impl PutRequest<'_> {
    /// Sends the PUT to `inner`.
    pub async fn forward(self, inner: &Inner) -> StoreResult<PutResult> {
        inner.put_opts(self.location, self.payload, self.opts).await
    }
}

/// The start of a multipart upload on its way to the store.
#[derive(Debug)]
pub struct UploadRequest<'a> {
    /// The key the upload writes on completion.
    pub location: &'a Path,
    /// Its attributes.
    pub opts: PutMultipartOptions,
}

impl UploadRequest<'_> {
    /// Starts the upload on `inner`.
    pub async fn forward(self, inner: &Inner) -> StoreResult<Upload> {
        inner.put_multipart_opts(self.location, self.opts).await
    }
}

/// A GET or HEAD (`options.head`) on its way to the store.
#[derive(Debug)]
pub struct GetRequest<'a> {
    /// The key read.
    pub location: &'a Path,
    /// Its range, conditions and whether it is a HEAD.
    pub options: GetOptions,
}

impl GetRequest<'_> {
    /// Sends the GET to `inner`.
    pub async fn forward(self, inner: &Inner) -> StoreResult<GetResult> {
        inner.get_opts(self.location, self.options).await
    }

    /// Sends the GET to `inner`; also returns the bytes its body holds (`None` for a HEAD).
    pub async fn forward_sized(self, inner: &Inner) -> StoreResult<(GetResult, Option<u64>)> {
        let head = self.options.head;
        let result = self.forward(inner).await?;
        let bytes = (!head).then(|| result.range.end - result.range.start);
        Ok((result, bytes))
    }
}

/// A recursive listing on its way to the store.
#[derive(Debug, Clone, Copy)]
pub struct ListRequest<'a> {
    /// The prefix listed (everything for `None`).
    pub prefix: Option<&'a Path>,
    /// Only the keys after this one, when given.
    pub offset: Option<&'a Path>,
}

impl ListRequest<'_> {
    /// Lists `inner`.
    pub fn forward(self, inner: &Inner) -> MetaStream {
        match self.offset {
            Some(offset) => inner.list_with_offset(self.prefix, offset),
            None => inner.list(self.prefix),
        }
    }
}

/// A copy on its way to the store.
#[derive(Debug)]
pub struct CopyRequest<'a> {
    /// The key copied.
    pub from: &'a Path,
    /// The key written.
    pub to: &'a Path,
    /// Its mode (overwrite or create-only).
    pub options: CopyOptions,
}

impl CopyRequest<'_> {
    /// Sends the copy to `inner`.
    pub async fn forward(self, inner: &Inner) -> StoreResult<()> {
        inner.copy_opts(self.from, self.to, self.options).await
    }
}

/// What a [`HookedStore`] does for each operation. Each method receives the wrapped store and
/// the operation; its default forwards the operation unchanged, so a hook overrides only what
/// it acts on. The upload methods see each multipart upload the store started, named by its
/// key.
#[async_trait::async_trait]
pub trait StoreHooks: std::fmt::Debug + Send + Sync + 'static {
    /// The wrapper's name in its `Display` (`NAME(inner)`).
    const NAME: &'static str = "HookedStore";

    /// A PUT.
    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        put.forward(inner).await
    }

    /// The start of a multipart upload (its parts go through [`StoreHooks::put_part`]).
    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> StoreResult<Upload> {
        start.forward(inner).await
    }

    /// A GET or HEAD. `get_ranges` issues each coalesced range through here, so a hook sees
    /// each request that reaches the store once.
    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        get.forward(inner).await
    }

    /// A stream of deletes.
    fn delete(&self, inner: &Inner, locations: PathStream) -> PathStream {
        inner.delete_stream(locations)
    }

    /// A recursive listing.
    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        list.forward(inner)
    }

    /// A listing of one level of `prefix` (`list_with_delimiter`).
    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> StoreResult<ListResult> {
        inner.list_with_delimiter(prefix).await
    }

    /// A copy.
    async fn copy(&self, inner: &Inner, copy: CopyRequest<'_>) -> StoreResult<()> {
        copy.forward(inner).await
    }

    /// One part of the upload to `location`.
    fn put_part(&self, upload: &mut Upload, location: &Path, data: PutPayload) -> UploadPart {
        let _ = location;
        upload.put_part(data)
    }

    /// The completion of the upload to `location`.
    async fn complete(&self, upload: &mut Upload, location: &Path) -> StoreResult<PutResult> {
        let _ = location;
        upload.complete().await
    }

    /// The abort of the upload to `location`.
    async fn abort(&self, upload: &mut Upload, location: &Path) -> StoreResult<()> {
        let _ = location;
        upload.abort().await
    }

    /// The upload to `location` was dropped (after its completion, its abort, or neither).
    fn upload_dropped(&self, location: &Path) {
        let _ = location;
    }
}

/// Wraps a store and runs every operation through its hooks.
#[derive(Debug)]
pub struct HookedStore<H> {
    inner: Inner,
    hooks: Arc<H>,
}

impl<H: StoreHooks> HookedStore<H> {
    /// Wraps `inner`, running its operations through `hooks` (which the caller may share).
    pub fn wrap(inner: Inner, hooks: Arc<H>) -> Self {
        Self { inner, hooks }
    }

    /// The hooks, with whatever state they keep.
    pub fn hooks(&self) -> &Arc<H> {
        &self.hooks
    }
}

impl<H: StoreHooks> std::fmt::Display for HookedStore<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", H::NAME, self.inner)
    }
}

#[async_trait::async_trait]
impl<H: StoreHooks> ObjectStore for HookedStore<H> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> StoreResult<PutResult> {
        let put = PutRequest {
            location,
            payload,
            opts,
        };
        self.hooks.put(&self.inner, put).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> StoreResult<Upload> {
        let start = UploadRequest { location, opts };
        let inner = self.hooks.put_multipart(&self.inner, start).await?;
        Ok(Box::new(HookedUpload {
            inner,
            location: location.clone(),
            hooks: Arc::clone(&self.hooks),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        let get = GetRequest { location, options };
        self.hooks.get(&self.inner, get).await
    }

    // `get_ranges` keeps its default: it coalesces nearby ranges and issues them through
    // `get_opts` above.

    fn delete_stream(&self, locations: PathStream) -> PathStream {
        self.hooks.delete(&self.inner, locations)
    }

    fn list(&self, prefix: Option<&Path>) -> MetaStream {
        let list = ListRequest {
            prefix,
            offset: None,
        };
        self.hooks.list(&self.inner, list)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> MetaStream {
        let list = ListRequest {
            prefix,
            offset: Some(offset),
        };
        self.hooks.list(&self.inner, list)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> StoreResult<ListResult> {
        self.hooks.list_dirs(&self.inner, prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> StoreResult<()> {
        let copy = CopyRequest { from, to, options };
        self.hooks.copy(&self.inner, copy).await
    }
}

/// A multipart upload started through a [`HookedStore`]: its parts, completion and abort go
/// through the same hooks.
#[derive(Debug)]
struct HookedUpload<H: StoreHooks> {
    inner: Upload,
    location: Path,
    hooks: Arc<H>,
}

#[async_trait::async_trait]
impl<H: StoreHooks> MultipartUpload for HookedUpload<H> {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.hooks.put_part(&mut self.inner, &self.location, data)
    }

    async fn complete(&mut self) -> StoreResult<PutResult> {
        self.hooks.complete(&mut self.inner, &self.location).await
    }

    async fn abort(&mut self) -> StoreResult<()> {
        self.hooks.abort(&mut self.inner, &self.location).await
    }
}

impl<H: StoreHooks> Drop for HookedUpload<H> {
    fn drop(&mut self) {
        self.hooks.upload_dropped(&self.location);
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    use super::*;

    /// Hooks that act on nothing.
    #[derive(Debug)]
    struct PassThrough;

    impl StoreHooks for PassThrough {}

    #[tokio::test]
    async fn default_hooks_pass_every_operation_through() {
        let store = HookedStore::wrap(Arc::new(InMemory::new()), Arc::new(PassThrough));
        let key = Path::from("p/a");
        store
            .put(&key, PutPayload::from_static(b"abc"))
            .await
            .expect("put");
        let mut upload = store
            .put_multipart(&Path::from("p/b"))
            .await
            .expect("start");
        upload
            .put_part(PutPayload::from_static(b"de"))
            .await
            .expect("part");
        upload.complete().await.expect("complete");
        store.copy(&key, &Path::from("p/c")).await.expect("copy");
        let bytes = store
            .get(&key)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        assert_eq!(&bytes[..], b"abc");
        assert_eq!(store.list(Some(&Path::from("p"))).count().await, 3);
        let after = store.list_with_offset(Some(&Path::from("p")), &key);
        assert_eq!(after.count().await, 2);
        let dirs = store.list_with_delimiter(None).await.expect("dirs");
        assert_eq!(dirs.common_prefixes, vec![Path::from("p")]);
        store.delete(&key).await.expect("delete");
        assert!(store.head(&key).await.is_err());
        assert_eq!(store.to_string(), "HookedStore(InMemory)");
    }
}

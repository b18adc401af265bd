//! A store wrapper that makes every GET (and HEAD) take a round trip and a transfer time, so a
//! benchmark on a local directory shows what request counts cost against a remote store.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Delays each read: `round_trip`, plus its bytes at `bytes_per_second` when set.
#[derive(Debug)]
pub struct LatencyStore {
    inner: Arc<dyn ObjectStore>,
    round_trip: Duration,
    bytes_per_second: Option<u64>,
}

impl LatencyStore {
    /// Wraps `inner`.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        round_trip: Duration,
        bytes_per_second: Option<u64>,
    ) -> Self {
        Self {
            inner,
            round_trip,
            bytes_per_second,
        }
    }

    /// How long a read of `bytes` takes.
    fn delay(&self, bytes: u64) -> Duration {
        let transfer = self
            .bytes_per_second
            .filter(|&rate| rate > 0)
            .map_or(Duration::ZERO, |rate| {
                Duration::from_secs_f64(bytes as f64 / rate as f64)
            });
        self.round_trip + transfer
    }
}

impl std::fmt::Display for LatencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LatencyStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for LatencyStore {
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
        let bytes = if head {
            0
        } else {
            result.range.end - result.range.start
        };
        tokio::time::sleep(self.delay(bytes)).await;
        Ok(result)
    }

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

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;

    #[tokio::test]
    async fn reads_take_a_round_trip_and_their_transfer_time() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = Path::from("a");
        inner
            .put(&key, PutPayload::from(vec![0u8; 1000]))
            .await
            .expect("put");
        let store = LatencyStore::new(inner, Duration::from_millis(30), Some(10_000));
        assert_eq!(store.delay(1000), Duration::from_millis(130));
        let t = std::time::Instant::now();
        let bytes = store.get_range(&key, 0..500).await.expect("get");
        assert_eq!(bytes.len(), 500);
        assert!(t.elapsed() >= Duration::from_millis(80));
        let unlimited = LatencyStore::new(Arc::new(InMemory::new()), Duration::ZERO, None);
        assert_eq!(unlimited.delay(1 << 30), Duration::ZERO);
    }
}

//! Test support (feature `testing`): small log batches, Parquet fixtures and store wrappers.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::store::Store;

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

/// Encodes batches as one Parquet file (one row group per `rows_per_group` rows).
pub fn parquet_bytes(batches: &[RecordBatch], rows_per_group: usize) -> Bytes {
    let Some(first) = batches.first() else {
        return Bytes::new();
    };
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows_per_group.max(1)))
        .build();
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
        .put(&Path::from(key), PutPayload::from(bytes))
        .await
        .expect("test put succeeds");
}

/// Reads a whole object.
pub async fn get_bytes(store: &Store, key: &str) -> Bytes {
    store
        .object_store()
        .get(&Path::from(key))
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

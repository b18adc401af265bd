//! A Parquet footer as a person wants to see it: size, sort order, and per-row-group key ranges.

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use chrono::{DateTime, SecondsFormat};
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::MetadataFetch;
use parquet::errors::ParquetError;
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData, SortingColumn,
};
use parquet::schema::types::SchemaDescriptor;

use crate::error::{Error, Result};
use crate::input::page_check::{check_schema_nesting, footer_range};
use crate::options::KeyColumns;
use crate::read::prune::{leaf_column_index, service_bounds, time_bounds, time_leaf};
use crate::store::Store;

/// What the footer of one Parquet file says.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileSummary {
    /// The object key.
    pub file: String,
    /// Size of the object in bytes.
    pub bytes: u64,
    /// Rows in the file.
    pub rows: u64,
    /// The writer that made the file.
    pub created_by: Option<String>,
    /// The declared sort order of row group 0, e.g. `service.name ASC NULLS FIRST`.
    pub sorting_columns: Option<Vec<String>>,
    /// Top-level columns as `name: arrow type`.
    pub columns: Vec<String>,
    /// One entry per row group, in file order.
    pub row_groups: Vec<RowGroupSummary>,
}

/// What the footer says about one row group.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RowGroupSummary {
    /// Position of the row group in the file.
    pub index: usize,
    /// Rows in the row group.
    pub rows: u64,
    /// Bytes of its column chunks as stored.
    pub compressed_bytes: u64,
    /// Bytes of its column chunks decompressed.
    pub uncompressed_bytes: u64,
    /// Smallest service name (lossy UTF-8), from statistics.
    pub service_min: Option<String>,
    /// Largest service name (lossy UTF-8), from statistics.
    pub service_max: Option<String>,
    /// Earliest time, Unix nanoseconds, from statistics.
    pub time_min: Option<i64>,
    /// Latest time, Unix nanoseconds, from statistics.
    pub time_max: Option<i64>,
    /// Whether the service column chunk has a bloom filter.
    pub service_bloom_filter: bool,
    /// The row group's declared sort order.
    pub sorting_columns: Option<Vec<String>>,
    /// Whether every key column present has a page index (column and offset index).
    pub column_index: bool,
}

/// Reads the footer (with page indexes) of `key` and summarises it; errors name the file.
pub async fn inspect_object(store: &Store, key: &Path, keys: &KeyColumns) -> Result<FileSummary> {
    let object_store = Arc::clone(store.object_store());
    let meta = object_store
        .head(key)
        .await
        .map_err(|e| Error::store("head", key, e))?;
    let read = check_nesting(&object_store, key, meta.size).await?;
    let fetch = StoreFetch {
        store: &object_store,
        key,
        read,
    };
    let metadata = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Optional)
        .load_and_finish(fetch, meta.size)
        .await
        .map_err(|e| parquet_store_error("get", key, e))?;
    let arrow = ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
        .map_err(|e| Error::parquet(key.to_string(), e))?;
    let metadata = arrow.metadata();
    let columns = arrow
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    let schema = metadata.file_metadata().schema_descr();
    let row_groups = (0..metadata.num_row_groups())
        .map(|i| summarise_row_group(metadata, i, keys))
        .collect();
    Ok(FileSummary {
        file: key.to_string(),
        bytes: meta.size,
        rows: u64::try_from(metadata.file_metadata().num_rows()).unwrap_or(0),
        created_by: metadata.file_metadata().created_by().map(str::to_string),
        sorting_columns: metadata
            .row_groups()
            .first()
            .and_then(|rg| describe_sorting(schema, rg)),
        columns,
        row_groups,
    })
}

/// Ranged reads of one object, for the footer and page-index reader; ranges inside the bytes
/// the nesting check already read (`read`: where they start, and them) are served from them.
struct StoreFetch<'a> {
    store: &'a Arc<dyn ObjectStore>,
    key: &'a Path,
    read: Option<(u64, Bytes)>,
}

impl MetadataFetch for StoreFetch<'_> {
    fn fetch(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        if let Some((start, bytes)) = &self.read
            && range.start >= *start
            && range.end <= start + bytes.len() as u64
        {
            let from = (range.start - start) as usize;
            let to = (range.end - start) as usize;
            let held = bytes.slice(from..to);
            return async move { Ok(held) }.boxed();
        }
        let (store, key) = (self.store, self.key);
        async move {
            store
                .get_range(key, range)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))
        }
        .boxed()
    }
}

/// Where the footer of the stored object `key` (of `size` bytes) lies, and the object's last
/// eight bytes that say so (one GET); `None` when it is too short or its tail is not a Parquet
/// footer within [`footer_range`]'s limits (a reader then reports why).
pub(crate) async fn stored_footer_range(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    size: u64,
) -> std::result::Result<Option<(Range<u64>, Bytes)>, object_store::Error> {
    if size < 12 {
        return Ok(None);
    }
    let tail = store.get_range(key, size - 8..size).await?;
    let footer = <[u8; 8]>::try_from(tail.as_ref())
        .ok()
        .and_then(|eight| footer_range(&eight, size).ok());
    Ok(footer.map(|footer| (footer, tail)))
}

/// Refuses a file whose schema nests too deep before the footer is parsed
/// ([`check_schema_nesting`]): parsing it would overflow the stack. A footer that cannot be
/// located passes, for the reader to report. Returns the bytes it read from the footer to the
/// end of the file, and where they start, for the reader to use again.
async fn check_nesting(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    size: u64,
) -> Result<Option<(u64, Bytes)>> {
    let get = |e| Error::store("get", key, e);
    let Some((footer, tail)) = stored_footer_range(store, key, size).await.map_err(get)? else {
        return Ok(None);
    };
    let start = footer.start;
    let bytes = store.get_range(key, footer).await.map_err(get)?;
    check_schema_nesting(&bytes)
        .map_err(|reason| Error::parquet(key.to_string(), ParquetError::General(reason)))?;
    let mut read = Vec::with_capacity(bytes.len() + tail.len());
    read.extend_from_slice(&bytes);
    read.extend_from_slice(&tail);
    Ok(Some((start, Bytes::from(read))))
}

/// A Parquet reader or writer error as the store error it wraps, when it is one (so it is
/// classified, and retried, as the store's), otherwise as a Parquet error naming the file.
pub(crate) fn parquet_store_error(
    operation: &'static str,
    key: &Path,
    error: ParquetError,
) -> Error {
    let ParquetError::External(inner) = error else {
        return Error::parquet(key.to_string(), error);
    };
    // Uploads through `BufWriter` report store failures as I/O errors carrying the store's.
    let inner: Box<dyn std::error::Error + Send + Sync> = match inner.downcast::<std::io::Error>() {
        Ok(io) if io.get_ref().is_some_and(|e| e.is::<object_store::Error>()) => {
            match (*io).into_inner() {
                Some(carried) => carried,
                None => return Error::invariant("an I/O error lost the error it carried"),
            }
        }
        Ok(io) => io,
        Err(other) => other,
    };
    match inner.downcast::<object_store::Error>() {
        Ok(store_error) => Error::store(operation, key, *store_error),
        Err(other) => Error::parquet(key.to_string(), ParquetError::External(other)),
    }
}

fn summarise_row_group(
    metadata: &ParquetMetaData,
    index: usize,
    keys: &KeyColumns,
) -> RowGroupSummary {
    let schema = metadata.file_metadata().schema_descr();
    let rg = metadata.row_group(index);
    let service = leaf_column_index(schema, &keys.service);
    let time = time_leaf(schema, keys);
    let service_range = service.and_then(|i| service_bounds(rg.column(i)));
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let time_range = time.and_then(|t| time_bounds(rg.column(t.index), t.unit));
    let key_columns: Vec<usize> = [service, time.map(|t| t.index)]
        .into_iter()
        .flatten()
        .collect();
    let page_index = metadata.page_index();
    let column_index = !key_columns.is_empty()
        && key_columns.iter().all(|&c| {
            page_index.is_some_and(|p| {
                p.column_index(index, c).is_some() && p.offset_index(index, c).is_some()
            })
        });
    RowGroupSummary {
        index,
        rows: u64::try_from(rg.num_rows()).unwrap_or(0),
        compressed_bytes: u64::try_from(rg.compressed_size()).unwrap_or(0),
        uncompressed_bytes: u64::try_from(rg.total_byte_size()).unwrap_or(0),
        service_min: service_range.map(|(min, _)| lossy(min)),
        service_max: service_range.map(|(_, max)| lossy(max)),
        time_min: time_range.map(|(min, _)| min),
        time_max: time_range.map(|(_, max)| max),
        service_bloom_filter: service.is_some_and(|i| rg.column(i).bloom_filter_offset().is_some()),
        sorting_columns: describe_sorting(schema, rg),
        column_index,
    }
}

/// The declared sort order in SQL words; the nulls clause is shown only when it differs from
/// the SQL default (`ASC` puts nulls last, `DESC` first).
fn describe_sorting(schema: &SchemaDescriptor, rg: &RowGroupMetaData) -> Option<Vec<String>> {
    let describe = |s: &SortingColumn| {
        let name = usize::try_from(s.column_idx)
            .ok()
            .filter(|&i| i < schema.num_columns())
            .map_or_else(
                || format!("column #{}", s.column_idx),
                |i| schema.column(i).path().string(),
            );
        let direction = if s.descending { "DESC" } else { "ASC" };
        let nulls = match (s.descending, s.nulls_first) {
            (false, true) => " NULLS FIRST",
            (true, false) => " NULLS LAST",
            _ => "",
        };
        format!("{name} {direction}{nulls}")
    };
    rg.sorting_columns()
        .map(|cols| cols.iter().map(describe).collect())
}

impl FileSummary {
    /// A compact text report: a header about the file, then one aligned line per row group.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let sort = self
            .sorting_columns
            .as_ref()
            .map_or_else(|| "none declared".to_string(), |s| s.join(", "));
        let _ = writeln!(out, "file        {}", self.file);
        let _ = writeln!(
            out,
            "size        {} ({} bytes)",
            human_bytes(self.bytes),
            self.bytes
        );
        let _ = writeln!(out, "rows        {}", self.rows);
        let _ = writeln!(
            out,
            "created by  {}",
            self.created_by.as_deref().unwrap_or("unknown")
        );
        let _ = writeln!(out, "sorted by   {sort}");
        let _ = writeln!(out, "columns     {}", self.columns.join(", "));
        let _ = writeln!(out, "row groups  {}", self.row_groups.len());
        if self.row_groups.is_empty() {
            return out;
        }
        let header = [
            "rg",
            "rows",
            "compressed",
            "raw",
            "bloom",
            "index",
            "service",
            "time (UTC)",
        ];
        let lines: Vec<[String; 8]> = self.row_groups.iter().map(row_group_cells).collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                lines
                    .iter()
                    .map(|l| l[c].len())
                    .chain([header[c].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut push_line = |cells: &[&str]| {
            let mut line = String::new();
            for (c, cell) in cells.iter().enumerate() {
                let right = c < 4;
                let width = widths[c];
                if c > 0 {
                    line.push_str("  ");
                }
                let _ = if right {
                    write!(line, "{cell:>width$}")
                } else {
                    write!(line, "{cell:<width$}")
                };
            }
            out.push_str(line.trim_end());
            out.push('\n');
        };
        push_line(&header);
        for cells in &lines {
            let cells: Vec<&str> = cells.iter().map(String::as_str).collect();
            push_line(&cells);
        }
        out
    }
}

fn row_group_cells(rg: &RowGroupSummary) -> [String; 8] {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let range = |min: Option<String>, max: Option<String>| match (min, max) {
        (Some(min), Some(max)) if min == max => min,
        (Some(min), Some(max)) => format!("{min} .. {max}"),
        _ => "-".to_string(),
    };
    [
        rg.index.to_string(),
        rg.rows.to_string(),
        human_bytes(rg.compressed_bytes),
        human_bytes(rg.uncompressed_bytes),
        yes_no(rg.service_bloom_filter),
        yes_no(rg.column_index),
        range(rg.service_min.clone(), rg.service_max.clone()),
        range(rg.time_min.map(rfc3339), rg.time_max.map(rfc3339)),
    ]
}

/// Unix nanoseconds as RFC 3339 UTC with milliseconds.
fn rfc3339(nanos: i64) -> String {
    DateTime::from_timestamp_nanos(nanos).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Bytes in binary units with one decimal: `812 B`, `12.3 KiB`, `1.5 MiB`.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use object_store::PutPayload;
    use object_store::memory::InMemory;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use parquet::schema::types::ColumnPath;

    use super::*;

    const T0: i64 = 1_795_946_400_000_000_000; // 2026-11-29T10:00:00Z

    /// A sorted file: `api` then `db`, 100 rows each, in two row groups.
    fn sorted_file() -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("service.name", DataType::Utf8, true),
            Field::new("time_unix_nano", DataType::Int64, false),
            Field::new("body", DataType::Utf8, true),
        ]));
        let services: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..200).map(|i| if i < 100 { "api" } else { "db" }),
        ));
        let times: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (0..200).map(|i| T0 + (i % 100) * 1_000_000_000),
        ));
        let bodies: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..200).map(|i| format!("line {i}")),
        ));
        let batch =
            RecordBatch::try_new(Arc::clone(&schema), vec![services, times, bodies]).unwrap();
        let sorting = vec![
            SortingColumn {
                column_idx: 0,
                descending: false,
                nulls_first: true,
            },
            SortingColumn {
                column_idx: 1,
                descending: false,
                nulls_first: false,
            },
        ];
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .set_sorting_columns(Some(sorting))
            .set_column_bloom_filter_enabled(ColumnPath::new(vec!["service.name".into()]), true)
            .build();
        let mut writer = ArrowWriter::try_new(Vec::new(), schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.into_inner().unwrap()
    }

    async fn store_with(key: &str, bytes: Vec<u8>) -> Store {
        let memory = Arc::new(InMemory::new());
        memory
            .put(&Path::from(key), PutPayload::from(bytes))
            .await
            .unwrap();
        Store::from_object_store(memory, "memory://")
    }

    #[tokio::test]
    async fn reads_the_footer_once() {
        let bytes = sorted_file();
        let key = Path::from("compacted/part-1.parquet");
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        memory.put(&key, PutPayload::from(bytes)).await.unwrap();
        let (counting, counters) = crate::store::counting::CountingStore::new(memory);
        let store = Store::from_object_store(Arc::new(counting), "memory://");
        let summary = inspect_object(&store, &key, &KeyColumns::default())
            .await
            .unwrap();
        assert!(summary.row_groups.iter().all(|g| g.column_index));
        // The tail and the footer for the nesting check, then the page indexes: the reader
        // takes the footer from what the check read.
        assert_eq!(counters.requests(), 3);
    }

    #[tokio::test]
    async fn summarises_a_sorted_file() {
        let bytes = sorted_file();
        let size = bytes.len() as u64;
        let key = Path::from("compacted/part-1.parquet");
        let store = store_with(key.as_ref(), bytes).await;
        let summary = inspect_object(&store, &key, &KeyColumns::default())
            .await
            .unwrap();

        assert_eq!(summary.file, "compacted/part-1.parquet");
        assert_eq!((summary.bytes, summary.rows), (size, 200));
        assert!(
            summary
                .created_by
                .as_deref()
                .unwrap_or("")
                .starts_with("parquet-rs")
        );
        let order = vec![
            "service.name ASC NULLS FIRST".to_string(),
            "time_unix_nano ASC".into(),
        ];
        assert_eq!(summary.sorting_columns.as_ref(), Some(&order));
        assert_eq!(summary.columns[0], "service.name: Utf8");
        assert_eq!(summary.columns[1], "time_unix_nano: Int64");
        assert_eq!(summary.row_groups.len(), 2);

        let (first, second) = (&summary.row_groups[0], &summary.row_groups[1]);
        assert_eq!(
            (first.index, first.rows, second.index, second.rows),
            (0, 100, 1, 100)
        );
        assert_eq!(first.service_min.as_deref(), Some("api"));
        assert_eq!(first.service_max.as_deref(), Some("api"));
        assert_eq!(second.service_min.as_deref(), Some("db"));
        assert_eq!(
            (first.time_min, first.time_max),
            (Some(T0), Some(T0 + 99_000_000_000))
        );
        assert!(first.service_bloom_filter && second.service_bloom_filter);
        assert!(first.column_index && second.column_index);
        assert_eq!(second.sorting_columns.as_ref(), Some(&order));
        assert!(first.compressed_bytes > 0 && first.uncompressed_bytes > 0);

        let text = summary.render_text();
        assert!(text.contains("sorted by   service.name ASC NULLS FIRST, time_unix_nano ASC"));
        assert!(
            text.contains("2026-11-29T10:00:00.000Z .. 2026-11-29T10:01:39.000Z"),
            "{text}"
        );
        let rows: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("rg")).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert_eq!(
            rows[1].find("api"),
            rows[2].find("db"),
            "columns align:\n{text}"
        );
    }

    #[tokio::test]
    async fn a_file_without_keys_or_stats_still_summarises() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let column: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column]).unwrap();
        let mut writer = ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        let key = Path::from("data/x.parquet");
        let store = store_with(key.as_ref(), writer.into_inner().unwrap()).await;
        let summary = inspect_object(&store, &key, &KeyColumns::default())
            .await
            .unwrap();
        let rg = &summary.row_groups[0];
        assert_eq!(summary.sorting_columns, None);
        assert_eq!((rg.service_min.as_ref(), rg.time_min), (None, None));
        assert!(!rg.service_bloom_filter && !rg.column_index);
        assert!(summary.render_text().contains("none declared"));
    }

    #[tokio::test]
    async fn errors_name_the_file() {
        let key = Path::from("data/broken.parquet");
        let store = store_with(key.as_ref(), b"not a parquet file at all".to_vec()).await;
        let err = inspect_object(&store, &key, &KeyColumns::default())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Parquet { .. }), "{err:?}");
        assert!(err.to_string().contains("data/broken.parquet"), "{err}");

        let missing = Path::from("data/missing.parquet");
        let err = inspect_object(&store, &missing, &KeyColumns::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("data/missing.parquet"), "{err}");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(12_595), "12.3 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}

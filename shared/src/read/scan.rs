//! The column scan: every row of some columns of a partition's live files, read through the
//! same read plan and request counting as the window query (the other end of the range
//! request measurement: a scan reads every row group, a window query few).

use std::sync::Arc;

use futures::StreamExt;
use object_store::ObjectStore;
use object_store::path::Path;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};

use crate::error::{Error, Result};
use crate::manifest::partition_files;
use crate::partition::{KeyLayout, PartitionId};
use crate::read::inspect::parquet_store_error;
use crate::read::planned_reader::PlannedReader;
use crate::read::query::QueryStats;
use crate::read::read_plan::{DEFAULT_MAX_BLOCK_BYTES, ReadPlan, projected_leaves};
use crate::store::Store;
use crate::store::counting::CountingStore;

/// Rows read and what reading them cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScanResult {
    /// Rows decoded (every row of every live file).
    pub rows: u64,
    /// What the scan read; `rows_matched` equals `rows`.
    pub stats: QueryStats,
}

/// Decodes every row of the top-level `columns` (those a file has) of the partition's live
/// files, counting the requests and bytes fetched; the rows are counted, not kept.
pub async fn scan_columns(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    columns: &[String],
) -> Result<ScanResult> {
    let (counting, counters) = CountingStore::new(Arc::clone(store.object_store()));
    let counting: Arc<dyn ObjectStore> = Arc::new(counting);
    let mut stats = QueryStats::default();
    for key in partition_files(store, layout, partition).await?.live {
        stats.files += 1;
        let key = key.into();
        stats.rows_matched += scan_file(&counting, &key, columns, &mut stats).await?;
    }
    stats.bytes_read = counters.bytes();
    stats.requests = counters.requests();
    Ok(ScanResult {
        rows: stats.rows_matched,
        stats,
    })
}

/// Reads every row group of one file for `columns`; returns its row count.
async fn scan_file(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    columns: &[String],
    stats: &mut QueryStats,
) -> Result<u64> {
    let mut reader = PlannedReader::new(Arc::clone(store), key.clone());
    let metadata = reader.load_metadata().await?;
    let arrow = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())
        .map_err(|e| Error::parquet(key.to_string(), e))?;
    let roots: Vec<usize> = columns
        .iter()
        .filter_map(|name| arrow.schema().index_of(name).ok())
        .collect();
    let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
    let row_groups: Vec<usize> = (0..metadata.num_row_groups()).collect();
    stats.row_groups_total += row_groups.len() as u64;
    stats.row_groups_scanned += row_groups.len() as u64;
    let planned: Vec<_> = row_groups.iter().map(|&rg| (rg, None)).collect();
    let leaves = projected_leaves(&metadata, &mask);
    let plan = ReadPlan::from_footer(&metadata, &planned, &leaves, DEFAULT_MAX_BLOCK_BYTES);
    let reader = reader.with_plan(plan);
    let mut stream = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, arrow)
        .with_row_groups(row_groups)
        .with_batch_size(8192)
        .with_projection(mask)
        .build()
        .map_err(|e| Error::parquet(key.to_string(), e))?;
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        rows += batch
            .map_err(|e| parquet_store_error("get", key, e))?
            .num_rows() as u64;
    }
    Ok(rows)
}

//! Reading one range of a sorted run: only the row groups that can hold its keys, fetched by
//! range requests into a sparse local file, with the rows of the range counted.

use std::fs::File;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetMetaData;

use crate::error::{Error, Result};
use crate::input::type_union::time_nanos;
use crate::input::{CheckedInput, READER_BYTES_PER_COLUMN, StagedInput};
use crate::options::{KeyColumns, SORT_KEY_METADATA};
use crate::scratch::ScratchDir;
use crate::sort::key::KeyRange;
use crate::store::Store;

/// A run read for one range: its selected row groups, the rows of the range among them
/// counted, sizes from the footer (the run is this job's own file, written by the engine).
pub(super) fn range_input(
    staged: StagedInput,
    metadata: &ParquetMetaData,
    arrow: &ArrowReaderMetadata,
    row_groups: Vec<usize>,
    keys: &KeyColumns,
    range: &KeyRange,
) -> Result<CheckedInput> {
    let mut uncompressed_bytes = 0u64;
    let mut row_bytes_estimate = 1u64;
    let mut reader_bytes_estimate = 0u64;
    for &i in &row_groups {
        let rg = metadata.row_group(i);
        let bytes = u64::try_from(rg.total_byte_size()).unwrap_or(0);
        uncompressed_bytes += bytes;
        if let Ok(rows) = u64::try_from(rg.num_rows())
            && rows > 0
        {
            row_bytes_estimate = row_bytes_estimate.max(bytes.div_ceil(rows));
        }
        let reader: u64 = (rg.columns().iter())
            .map(|c| {
                u64::try_from(c.uncompressed_size())
                    .unwrap_or(0)
                    .min(READER_BYTES_PER_COLUMN)
            })
            .sum();
        reader_bytes_estimate = reader_bytes_estimate.max(reader);
    }
    let declared_sort_key = (metadata.file_metadata().key_value_metadata())
        .and_then(|kv| kv.iter().find(|e| e.key == SORT_KEY_METADATA))
        .and_then(|e| e.value.clone());
    let mut input = CheckedInput {
        staged,
        schema: Arc::clone(arrow.schema()),
        rows: 0,
        uncompressed_bytes,
        row_bytes_estimate,
        reader_bytes_estimate,
        declared_sort_key,
        row_groups: Some(row_groups),
        page_levels: Vec::new(),
    };
    input.rows = rows_in_range(&input, keys, range)?;
    Ok(input)
}

/// Rows of the input's selected row groups whose key is in `range`, reading the key columns.
fn rows_in_range(input: &CheckedInput, keys: &KeyColumns, range: &KeyRange) -> Result<u64> {
    let path = &input.staged.local;
    let name = input.staged.key.to_string();
    let file = File::open(path).map_err(|e| Error::scratch(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| Error::parquet(name.clone(), e))?;
    let schema = Arc::clone(builder.schema());
    let time = schema
        .index_of(&keys.time)
        .map_err(|_| Error::invariant(format!("{name} has no column {}", keys.time)))?;
    let service = schema.index_of(&keys.service).ok();
    let mask = ProjectionMask::roots(builder.parquet_schema(), service.into_iter().chain([time]));
    let mut builder = builder.with_projection(mask).with_batch_size(64 * 1024);
    if let Some(row_groups) = &input.row_groups {
        builder = builder.with_row_groups(row_groups.clone());
    }
    let reader = builder
        .build()
        .map_err(|e| Error::parquet(name.clone(), e))?;
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| Error::arrow(format!("reading {name}"), e))?;
        let time = batch
            .column_by_name(&keys.time)
            .ok_or_else(|| Error::invariant("the time column went missing"))?;
        let times =
            time_nanos(time.as_ref()).map_err(|e| Error::arrow("reading the time key", e))?;
        let services = match batch.column_by_name(&keys.service) {
            Some(column) => Some(
                cast(column, &DataType::Utf8)
                    .map_err(|e| Error::arrow("reading the service column", e))?,
            ),
            None => None,
        };
        let strings = services.as_ref().map(|s| s.as_string::<i32>());
        for i in 0..batch.num_rows() {
            let service = strings.and_then(|s| s.is_valid(i).then(|| s.value(i).as_bytes()));
            rows += u64::from(range.contains(service, times.value(i)));
        }
    }
    Ok(rows)
}

/// A local file holding what a reader of `row_groups` of the object needs: the object itself
/// for a local directory store; otherwise a sparse file of the object's size with only the
/// footer and those row groups' column chunks fetched (one ranged request each, coalesced by
/// the store).
pub(super) async fn stage_row_groups(
    store: &Store,
    key: &Path,
    size: u64,
    metadata: &ParquetMetaData,
    row_groups: &[usize],
    scratch: &ScratchDir,
    ordinal: usize,
) -> Result<std::path::PathBuf> {
    if let Some(path) = store.read_in_place(key) {
        return Ok(path);
    }
    let tail = store
        .object_store()
        .get_range(key, size.saturating_sub(8)..size)
        .await
        .map_err(|e| Error::store("get", key, e))?;
    let footer_len = tail
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| Error::invariant(format!("{key} is shorter than a Parquet footer")))?;
    let footer = size.saturating_sub(8 + u64::from(footer_len))..size;
    let mut ranges = Vec::from([footer]);
    for &i in row_groups {
        for column in metadata.row_group(i).columns() {
            let (start, len) = column.byte_range();
            ranges.push(start..start + len);
        }
    }
    let parts = store
        .object_store()
        .get_ranges(key, &ranges)
        .await
        .map_err(|e| Error::store("get", key, e))?;
    let local = scratch
        .path()
        .join(format!("run-range-{ordinal:05}.parquet"));
    let write = {
        let local = local.clone();
        move || -> std::io::Result<()> {
            use std::os::unix::fs::FileExt;
            let file = File::create(&local)?;
            file.set_len(size)?;
            for (range, bytes) in ranges.iter().zip(&parts) {
                file.write_all_at(bytes, range.start)?;
            }
            Ok(())
        }
    };
    tokio::task::spawn_blocking(write)
        .await
        .map_err(|e| Error::invariant(format!("staging task failed: {e}")))?
        .map_err(|e| Error::scratch(&local, e))?;
    Ok(local)
}

//! The output Parquet writer: row-group rotation, `sorting_columns`, statistics, blooms, and
//! the block layout ([`crate::output::blocks`]).
//!
//! Every setting is fixed or derived from the inputs, and no clock, host or random value
//! reaches the file, so the same rows give byte-identical output.

use std::io::Write;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema};
use parquet::arrow::ArrowSchemaConverter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, ParquetMetaData, SortingColumn};
use parquet::file::properties::{BloomFilterPosition, EnabledStatistics, WriterProperties};
use parquet::schema::types::{ColumnPath, SchemaDescriptor};

use crate::error::{Error, Result};
use crate::input::column_path::resolve;
use crate::input::schema::UnifiedSchema;
use crate::options::{CompactOptions, KeyColumns, SORT_KEY_METADATA, sort_key_label};
use crate::output::blocks::{BlockOptions, BlockWriter};
use crate::output::dictionary_choice::DICTIONARY_SAMPLE_ROWS;
use crate::scratch::ScratchDir;
use crate::sort::sink::{ChunkSink, values_bytes};

/// Distinct values a row group's service bloom filter is sized for (row groups are
/// clustered by service, so few distinct services fall in one).
const SERVICE_BLOOM_NDV: u64 = 1024;
/// Distinct values a row group's bloom filter of another column (`--bloom-columns`: trace ids,
/// hosts) is sized for: about 19 KiB a row group at 1% false positives.
const OTHER_BLOOM_NDV: u64 = 16_384;
/// What the open data pages and dictionaries of all columns may hold together, so a wide
/// schema gets smaller pages instead of one megabyte per column (beyond 64 columns, its row
/// groups are capped instead, see [`OPEN_COMPRESSORS`]).
const OPEN_PAGES_BYTES: usize = 16 << 20;
/// Page and dictionary size limits stay within these bounds. Small pages cost more memory
/// than large ones where it matters most: a ZSTD context per page-byte (see
/// [`OPEN_COMPRESSORS`]).
const PAGE_BYTES_RANGE: (usize, usize) = (256 << 10, 1 << 20);

/// Column chunks of a row group that may have compressed a page before the row group closes.
/// Each keeps a ZSTD compression context sized for its pages (at level 3: 0.66 MB at 64 KiB,
/// 1.0 MB at 256 KiB, 1.3 MB at 1 MiB) until the row group closes, while chunks that only
/// compress when it closes do so one after another. A schema of more leaves than this gets row
/// groups of at most this many of its pages (8 MiB beyond 64 leaves): no more than that many
/// of its chunks can fill a page early.
const OPEN_COMPRESSORS: usize = 32;

/// Rows of consecutive chunks the writer encodes in one call, at most (see [`OutputWriter`]).
const WRITE_GROUP_ROWS: usize = 8192;
/// Decoded bytes of consecutive chunks the writer encodes in one call, at most (one chunk of
/// wide rows may hold more; it is written alone).
const WRITE_GROUP_BYTES: usize = 4 << 20;

/// The data page and dictionary page size limit for a schema of `leaves` leaf columns.
fn page_bytes_limit(leaves: usize) -> usize {
    (OPEN_PAGES_BYTES / leaves.max(1)).clamp(PAGE_BYTES_RANGE.0, PAGE_BYTES_RANGE.1)
}

/// The most bytes a row group of a schema of `leaves` leaf columns may hold (see
/// [`OPEN_COMPRESSORS`]): no limit up to that many leaves.
fn row_group_bytes_cap(leaves: usize) -> u64 {
    if leaves <= OPEN_COMPRESSORS {
        u64::MAX
    } else {
        (OPEN_COMPRESSORS * page_bytes_limit(leaves)) as u64
    }
}

/// The Parquet schema of `schema`.
fn parquet_schema(schema: &Schema) -> Result<SchemaDescriptor> {
    ArrowSchemaConverter::new()
        .convert(schema)
        .map_err(|e| Error::encode("output schema", e))
}

/// The leaf column `name` resolves to in `descr`: a top-level column of exactly that name
/// first, else a path into structs whose field names may themselves hold dots
/// (`resource.service.name` for a struct `resource` with a field `service.name`).
pub fn resolve_leaf(descr: &SchemaDescriptor, name: &str) -> Option<ColumnPath> {
    resolve_leaf_index(descr, name).map(|i| descr.column(i).path().clone())
}

/// The index in `descr` of the leaf column `name` resolves to (see [`resolve_leaf`]).
pub fn resolve_leaf_index(descr: &SchemaDescriptor, name: &str) -> Option<usize> {
    (0..descr.num_columns())
        .filter(|&i| descr.column(i).path().parts().join(".") == name)
        .min_by_key(|&i| descr.column(i).path().parts().len())
}

/// The leaf index in `descr` (the Parquet schema of `schema`) of the column at `path`
/// (indexes into `schema` and its structs), when that column is a leaf.
fn leaf_at(schema: &Schema, descr: &SchemaDescriptor, path: &[usize]) -> Option<usize> {
    let mut names = Vec::with_capacity(path.len());
    let mut fields = schema.fields();
    let mut leaf = true;
    for &i in path {
        let field = fields.get(i)?;
        names.push(field.name().clone());
        match field.data_type() {
            DataType::Struct(children) => {
                fields = children;
                leaf = false;
            }
            t => leaf = !t.is_nested(),
        }
    }
    if !leaf {
        return None;
    }
    (descr.columns().iter()).position(|c| c.path().parts() == names.as_slice())
}

/// Writer properties of a compacted file: row groups rotate at `row_group_bytes` of estimated encoded
/// size (at most 32 pages of each column, for a schema of more than 32 leaf columns) or at
/// `max_rows` rows, whichever comes first. Leaves of lists and maps carry no min/max
/// statistics: their range spans every row's elements, which prunes no row.
pub fn output_properties(
    schema: &Schema,
    keys: &KeyColumns,
    has_service: bool,
    row_group_bytes: u64,
    max_rows: Option<u64>,
) -> Result<WriterProperties> {
    let descr = parquet_schema(schema)?;
    let page_bytes = page_bytes_limit(descr.num_columns());
    let row_group_bytes = row_group_bytes.min(row_group_bytes_cap(descr.num_columns()));
    let mut sorting = Vec::new();
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).map_err(|e| Error::encode("zstd level", e))?,
        ))
        .set_dictionary_enabled(true)
        .set_data_page_size_limit(page_bytes)
        .set_dictionary_page_size_limit(page_bytes)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(max_rows.map(|n| n.clamp(1, usize::MAX as u64) as usize))
        .set_max_row_group_bytes(Some(row_group_bytes.max(1) as usize))
        .set_bloom_filter_position(BloomFilterPosition::AfterRowGroup)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SORT_KEY_METADATA.to_string(),
            sort_key_label(keys, has_service),
        )]));
    for leaf in descr.columns().iter().filter(|c| c.max_rep_level() > 0) {
        builder =
            builder.set_column_statistics_enabled(leaf.path().clone(), EnabledStatistics::None);
    }
    // The key's columns this output has, in order (a top-level column, else a path into
    // structs); a column no input had is null throughout and orders nothing. A column that is
    // not a leaf (a struct or a list) ends what can be declared.
    for name in &keys.sort {
        if *name == keys.service && !has_service && keys.is_service_time() {
            continue;
        }
        let Some(path) = resolve(schema.fields(), name) else {
            continue;
        };
        let Some(leaf) = leaf_at(schema, &descr, &path) else {
            break;
        };
        sorting.push(SortingColumn {
            column_idx: leaf as i32,
            descending: false,
            nulls_first: true,
        });
    }
    // Bloom filters on the columns set (the service column's alone by default); a column this
    // output does not have gets none.
    for name in keys.bloom_columns() {
        let Some(path) = resolve_leaf(&descr, name) else {
            continue;
        };
        let ndv = if name == keys.service {
            SERVICE_BLOOM_NDV
        } else {
            OTHER_BLOOM_NDV
        };
        builder = builder
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(path, ndv);
    }
    Ok(builder.set_sorting_columns(Some(sorting)).build())
}

/// The writer settings of one partition's output: properties for `unified` under `options`
/// with row groups of `row_group_bytes`, and the block layout staging in `scratch`.
pub fn partition_output_settings(
    unified: &UnifiedSchema,
    options: &CompactOptions,
    row_group_bytes: u64,
    scratch: &ScratchDir,
) -> Result<(WriterProperties, BlockOptions)> {
    let properties = output_properties(
        &unified.schema,
        &options.keys,
        unified.has_service(),
        row_group_bytes,
        options.settings.max_rows_per_row_group,
    )?;
    let blocks = BlockOptions::new(
        options.settings.row_groups_per_block,
        Some(scratch.file("block", "parquet")),
    )
    .with_page_file(scratch.file("pages", "bin"))
    .with_dictionary_sample(DICTIONARY_SAMPLE_ROWS)
    .with_parallel_encoding(options.settings.two_threads());
    Ok((properties, blocks))
}

/// The compacted-file writer as a chunk sink.
///
/// Chunks arrive small (a merge emits about a megabyte of encoded rows at a time, 1,024 rows
/// of narrow ones). Each call into the block writer ends in a barrier, the two encoding threads
/// joining before the row-group size is checked, and a call of 1,024 narrow rows is over before
/// the second thread is scheduled. So consecutive chunks wait here until they hold 8,192 rows
/// or 4 MiB of decoded bytes, or a row group must end, and are encoded in one call. The groups
/// depend on the chunks' rows and sizes alone (the bytes their values take, not the capacity of
/// their buffers), so the output stays the same for the same rows.
pub struct OutputWriter<W: Write + Send + 'static> {
    writer: BlockWriter<W>,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: usize,
}

impl<W: Write + Send + 'static> OutputWriter<W> {
    /// A writer of `schema` with `properties` into `sink`, its row groups laid out in blocks.
    pub fn try_new(
        sink: W,
        schema: std::sync::Arc<Schema>,
        properties: WriterProperties,
        blocks: BlockOptions,
    ) -> Result<Self> {
        Ok(Self {
            writer: BlockWriter::try_new(sink, schema, properties, blocks)?,
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
        })
    }

    /// Rows taken so far (written, or waiting to be written with the next chunks).
    pub fn rows(&self) -> u64 {
        self.writer.rows() + self.pending_rows as u64
    }

    /// Writes the waiting chunks and the footer, and returns the file's metadata; the inner
    /// writer then holds the whole file.
    pub fn finish(&mut self) -> Result<ParquetMetaData> {
        self.write_pending()?;
        self.writer.finish()
    }

    /// The inner writer (to complete an upload after [`Self::finish`]).
    pub fn inner_mut(&mut self) -> Result<&mut W> {
        self.writer.inner_mut()
    }

    fn write_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        (self.pending_rows, self.pending_bytes) = (0, 0);
        self.writer.write_batches(&pending)
    }
}

impl<W: Write + Send + 'static> ChunkSink for OutputWriter<W> {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        self.pending_rows += chunk.num_rows();
        self.pending_bytes = self.pending_bytes.saturating_add(values_bytes(chunk));
        self.pending.push(chunk.clone());
        if self.pending_rows >= WRITE_GROUP_ROWS || self.pending_bytes >= WRITE_GROUP_BYTES {
            self.write_pending()?;
        }
        Ok(())
    }

    fn end_row_group(&mut self) -> Result<()> {
        self.write_pending()?;
        self.writer.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_schemas_get_row_groups_of_at_most_32_pages() {
        assert_eq!(page_bytes_limit(16), 1 << 20);
        assert_eq!(page_bytes_limit(32), 512 << 10);
        assert_eq!(page_bytes_limit(64), 256 << 10);
        assert_eq!(page_bytes_limit(1000), 256 << 10);
        assert_eq!(row_group_bytes_cap(32), u64::MAX);
        assert_eq!(row_group_bytes_cap(33), 32 * ((16 << 20) / 33));
        assert_eq!(row_group_bytes_cap(64), 8 << 20);
        assert_eq!(row_group_bytes_cap(10_000), 8 << 20);
    }
}

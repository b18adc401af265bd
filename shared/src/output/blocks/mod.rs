//! The block-layout Parquet writer: small row groups for pruning, grouped into blocks so a
//! remote reader fetches one column of a whole block with one range request.
//!
//! A block is `row_groups_per_block` consecutive row groups. Inside a block, for each leaf
//! column in schema order, that column's chunks of the block's row groups are contiguous, in
//! row-group order. A row group stays the unit of statistics, pruning and decoding; only where
//! its bytes sit changes, and the footer points at every chunk: a row group's `file_offset` is
//! the start of its earliest chunk and its `total_compressed_size` the sum of its chunks. Page
//! indexes are rewritten with the moved page locations. Bloom filters go after the last block:
//! between blocks they would split the column ranges a reader coalesces across blocks.
//!
//! With one row group per block (the plain layout) and no dictionary sample, the file is byte for
//! byte what `ArrowWriter` writes with the same properties: the same rotation, chunks written in
//! place, bloom filters after each row group as `BloomFilterPosition::AfterRowGroup` puts them.
//! With a sample ([`BlockOptions::dictionary_sample_rows`]), row groups after the sample is ready
//! write mostly distinct columns without a dictionary, and those of them that are strings or
//! binaries (sort keys excepted) without statistics ([`crate::output::dictionary_choice`]). Columns
//! may be encoded on two threads ([`BlockOptions::parallel_encoding`]); the bytes are the same.
//!
//! **Memory.** The open row group is encoded in memory, as with `ArrowWriter`. Closed row groups
//! of the open block are staged: in memory up to [`STAGING_MEMORY_BYTES`] (by default), in one
//! scratch file beyond it, so a block adds at most that to the writer's memory whatever its
//! size. The output streams: each block goes to the sink as soon as it is complete, copied by a
//! thread of its own while the next row group is encoded (`copying`). Bloom
//! filters (about 2 KiB per row group) and page indexes wait in memory for the end of the file,
//! as they do in `ArrowWriter`.

mod copying;
mod encode;
mod footer;
mod page_store;
mod staging;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory,
    compute_leaves,
};
use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
use parquet::basic::{Compression, Encoding, Type as PhysicalType, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesPtr};
use parquet::file::writer::{
    OnCloseRowGroup, SerializedFileWriter, SerializedRowGroupWriter, TrackedWrite,
};
use parquet::schema::types::{SchemaDescPtr, SchemaDescriptor};

use crate::error::{Error, Result};
use crate::output::dictionary_choice::DictionaryChoice;
use copying::Destination;
use footer::{ClosedRowGroup, file_metadata, render_footer, write_blooms};
pub use page_store::ScratchPageStoreFactory;
pub use staging::STAGING_MEMORY_BYTES;
use staging::Staging;

/// What errors of the output are reported against.
const OUTPUT: &str = "compacted output";

/// How a [`BlockWriter`] groups row groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockOptions {
    /// Row groups per block; 1 is the plain row-major layout.
    pub row_groups_per_block: usize,
    /// Scratch file for a block that outgrows `staging_memory_bytes`; without one, blocks are
    /// staged in memory whatever their size.
    pub staging_file: Option<PathBuf>,
    /// Most bytes of an open block held in memory before it moves to `staging_file`.
    pub staging_memory_bytes: usize,
    /// Scratch file for the finished pages of the open row group; without one they wait in
    /// memory, as in `ArrowWriter`.
    pub page_file: Option<PathBuf>,
    /// Rows sampled at the start of the file to write mostly distinct columns without a
    /// dictionary (and strings among them without statistics) once a row group closes with the
    /// sample ready ([`crate::output::dictionary_choice`]); 0 keeps the properties' settings
    /// throughout, as `ArrowWriter` does.
    pub dictionary_sample_rows: usize,
    /// Encode each row group's columns on two threads (the bytes are the same either way).
    pub parallel_encoding: bool,
}

impl BlockOptions {
    /// `row_groups_per_block` row groups per block, staged in `staging_file` beyond
    /// [`STAGING_MEMORY_BYTES`].
    pub fn new(row_groups_per_block: usize, staging_file: Option<PathBuf>) -> Self {
        Self {
            row_groups_per_block,
            staging_file,
            staging_memory_bytes: STAGING_MEMORY_BYTES,
            page_file: None,
            dictionary_sample_rows: 0,
            parallel_encoding: false,
        }
    }

    /// The same, keeping the open row group's finished pages in `page_file`.
    pub fn with_page_file(self, page_file: PathBuf) -> Self {
        Self {
            page_file: Some(page_file),
            ..self
        }
    }

    /// The same, encoding columns on two threads when `parallel`.
    pub fn with_parallel_encoding(self, parallel: bool) -> Self {
        Self {
            parallel_encoding: parallel,
            ..self
        }
    }

    /// The same, choosing each column's dictionary from the first `rows` rows.
    pub fn with_dictionary_sample(self, rows: usize) -> Self {
        Self {
            dictionary_sample_rows: rows,
            ..self
        }
    }
}

impl Default for BlockOptions {
    /// The plain layout.
    fn default() -> Self {
        Self::new(1, None)
    }
}

/// Writes record batches as a Parquet file in the block layout, streaming it to `W`.
///
/// Row groups rotate like `ArrowWriter`'s: at the properties' `max_row_group_bytes` (estimated
/// encoded size) or `max_row_group_row_count`, whichever comes first, and at [`Self::flush`].
pub struct BlockWriter<W: Write + Send + 'static> {
    destination: Destination<W>,
    arrow_schema: SchemaRef,
    descr: SchemaDescPtr,
    props: WriterPropertiesPtr,
    factory: ArrowRowGroupWriterFactory,
    page_file: Option<PathBuf>,
    dictionary_choice: Option<DictionaryChoice>,
    parallel_encoding: bool,
    row_groups_per_block: usize,
    open: Option<OpenRowGroup>,
    block: Vec<StagedRowGroup>,
    closed: Vec<ClosedRowGroup>,
    rows: u64,
    finished: bool,
}

struct OpenRowGroup {
    writers: Vec<ArrowColumnWriter>,
    rows: usize,
}

/// A row group of the open block, its offsets relative to `start` in the staging buffer.
struct StagedRowGroup {
    row_group: ClosedRowGroup,
    start: u64,
}

impl<W: Write + Send + 'static> BlockWriter<W> {
    /// A writer of `schema` into `sink`; the file carries the same key-value metadata, encoded
    /// Arrow schema and `created_by` as `ArrowWriter`'s with these properties.
    pub fn try_new(
        sink: W,
        schema: SchemaRef,
        properties: WriterProperties,
        options: BlockOptions,
    ) -> Result<Self> {
        if options.row_groups_per_block == 0 {
            return Err(Error::Config {
                message: "row groups per block must be at least 1".into(),
            });
        }
        if properties.content_defined_chunking().is_some() {
            return Err(Error::Config {
                message: "the block writer does not support content-defined chunking".into(),
            });
        }
        let mut properties = properties;
        add_encoded_arrow_schema_to_metadata(&schema, &mut properties);
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(properties.coerce_types())
            .convert(&schema)
            .map_err(|e| Error::encode(OUTPUT, e))?;
        let props = Arc::new(properties);
        let descr = Arc::new(SchemaDescriptor::new(parquet_schema.root_schema_ptr()));
        let factory = row_group_factory(&descr, &props, &schema, options.page_file.as_ref())?;
        let dictionary_choice = (options.dictionary_sample_rows > 0)
            .then(|| DictionaryChoice::new(&schema, options.dictionary_sample_rows));
        let mut out = TrackedWrite::new(sink);
        out.write_all(b"PAR1")
            .map_err(|e| Error::encode(OUTPUT, e.into()))?;
        let staging = Staging::new(options.staging_file, options.staging_memory_bytes);
        Ok(Self {
            destination: Destination::new(out, staging),
            arrow_schema: schema,
            descr,
            props,
            factory,
            page_file: options.page_file,
            dictionary_choice,
            parallel_encoding: options.parallel_encoding,
            row_groups_per_block: options.row_groups_per_block,
            open: None,
            block: Vec::new(),
            closed: Vec::new(),
            rows: 0,
            finished: false,
        })
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows in the open row group.
    pub fn in_progress_rows(&self) -> usize {
        self.open.as_ref().map_or(0, |o| o.rows)
    }

    /// Row groups closed so far (laid out or staged).
    pub fn row_groups(&self) -> usize {
        self.closed.len() + self.block.len()
    }

    /// The most bytes of a staged block held in memory at once (once the block being copied
    /// is out).
    pub fn peak_staged_memory(&mut self) -> Result<usize> {
        Ok(self.destination.ready()?.staging.peak_memory())
    }

    /// Whether a block outgrew memory and was staged in the scratch file (once the block
    /// being copied is out).
    pub fn staged_in_file(&mut self) -> Result<bool> {
        Ok(self.destination.ready()?.staging.is_spilled())
    }

    /// The properties the next row group is written with: those given, plus the per-column
    /// settings of the dictionary choice once it is made.
    pub fn properties(&self) -> &WriterProperties {
        &self.props
    }

    /// Encodes `batch`, closing row groups where the byte or row limit falls.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.write_batches(std::slice::from_ref(batch))
    }

    /// Encodes `batches`, in order, as one call (without copying them), closing row groups
    /// where the byte or row limit falls: an empty row group takes the first batch alone, and
    /// the rest of the call is fitted to the limit by the row group's measured size, as
    /// [`Self::write`] fits a batch. The same batches in the same calls give the same bytes.
    /// Fewer, larger calls let the two encoding threads share more work per call.
    pub fn write_batches(&mut self, batches: &[RecordBatch]) -> Result<()> {
        self.check_open()?;
        let mut remaining = Rows::new(batches);
        if remaining.num_rows() == 0 {
            return Ok(());
        }
        let max_rows = self.props.max_row_group_row_count();
        let max_bytes = self.props.max_row_group_bytes();
        // The rotation of `ArrowWriter::write`, step for step, so the plain layout matches it.
        loop {
            let open = self.open_row_group()?;
            let buffered = open.rows;
            let mut split_at = match max_rows {
                Some(max) if buffered + remaining.num_rows() > max => Some(max - buffered),
                _ => None,
            };
            // An empty row group takes the first batch alone, so its size is measured before
            // the rest of the call is fitted to the limit.
            if buffered == 0 && max_bytes.is_some() {
                let first = remaining.first_batch_rows();
                split_at = Some(split_at.map_or(first, |n| n.min(first)));
            }
            let candidate = split_at.unwrap_or_else(|| remaining.num_rows());
            if let Some(max_bytes) = max_bytes
                && buffered > 0
            {
                let current = open.estimated_bytes();
                if current >= max_bytes {
                    self.flush()?;
                    continue;
                }
                let average = current / buffered;
                if let Some(fit) = (max_bytes - current).checked_div(average)
                    && candidate > fit
                {
                    if fit > 0 {
                        split_at = Some(fit);
                    } else {
                        self.flush()?;
                        continue;
                    }
                }
            }
            let rest = split_at
                .filter(|&n| n < remaining.num_rows())
                .map(|n| remaining.split_off(n));
            if let Some(choice) = self.dictionary_choice.as_mut() {
                remaining
                    .batches
                    .iter()
                    .for_each(|batch| choice.observe(batch));
            }
            let schema = Arc::clone(&self.arrow_schema);
            let parallel = self.parallel_encoding;
            let open = self.open_row_group()?;
            open.write(&schema, &remaining.batches, parallel)?;
            let full = max_rows.is_some_and(|max| open.rows >= max)
                || max_bytes.is_some_and(|max| open.estimated_bytes() >= max);
            self.rows += remaining.num_rows() as u64;
            if full {
                self.flush()?;
            }
            match rest {
                Some(rest) => remaining = rest,
                None => return Ok(()),
            }
        }
    }

    /// Closes the open row group, if it holds rows; a block that becomes complete is written.
    pub fn flush(&mut self) -> Result<()> {
        self.check_open()?;
        let Some(open) = self.open.take().filter(|o| o.rows > 0) else {
            return Ok(());
        };
        self.settle_dictionaries()?;
        let chunks = encode::close_writers(open.writers, self.parallel_encoding)?;
        let ordinal = i32::try_from(self.row_groups())
            .map_err(|_| Error::invariant("more than 2^31 row groups"))?;
        let ends = self.destination.ready()?;
        if self.row_groups_per_block == 1 {
            let row_group = append_row_group(
                &mut ends.out,
                &self.descr,
                &self.props,
                ordinal,
                chunks,
                true,
            )
            .map_err(|e| Error::encode(OUTPUT, e))?;
            self.closed.push(row_group);
            return Ok(());
        }
        let start = ends.staging.len();
        let mut tracked = TrackedWrite::new(&mut ends.staging);
        let row_group = append_row_group(
            &mut tracked,
            &self.descr,
            &self.props,
            ordinal,
            chunks,
            false,
        )
        .map_err(|e| Error::encode(OUTPUT, e))?;
        tracked.into_inner().map_err(|e| Error::encode(OUTPUT, e))?;
        self.block.push(StagedRowGroup { row_group, start });
        if self.block.len() >= self.row_groups_per_block {
            self.write_block()?;
        }
        Ok(())
    }

    /// Closes the last row group and block, writes bloom filters, page indexes and the footer,
    /// and returns the file's metadata. The sink then holds the whole file.
    pub fn finish(&mut self) -> Result<ParquetMetaData> {
        self.flush()?;
        self.write_block()?;
        self.finished = true;
        let out = &mut self.destination.ready()?.out;
        for row_group in &mut self.closed {
            write_blooms(out, &mut row_group.metadata, &mut row_group.blooms)
                .map_err(|e| Error::encode(OUTPUT, e))?;
        }
        let closed = std::mem::take(&mut self.closed);
        let metadata = file_metadata(&self.descr, &self.props, closed);
        let footer = render_footer(&metadata, &self.props, out.bytes_written())
            .map_err(|e| Error::encode(OUTPUT, e))?;
        out.write_all(&footer)
            .and_then(|()| out.flush())
            .map_err(|e| Error::encode(OUTPUT, e.into()))?;
        Ok(metadata)
    }

    /// The sink (to complete an upload after [`Self::finish`]), once the block being copied
    /// is out.
    pub fn inner_mut(&mut self) -> Result<&mut W> {
        Ok(self.destination.ready()?.out.inner_mut())
    }

    fn check_open(&self) -> Result<()> {
        if self.finished {
            return Err(Error::invariant("write after the output was finished"));
        }
        Ok(())
    }

    /// Once a row group closes with the sample ready (the first, unless its rows are few): the
    /// later ones write the columns the first rows showed to be mostly distinct without a
    /// dictionary (integers as deltas), and those of strings or binaries at ZSTD level 1 and,
    /// unless they are sort keys, without statistics.
    fn settle_dictionaries(&mut self) -> Result<()> {
        let Some(choice) = self.dictionary_choice.take_if(|c| c.ready()) else {
            return Ok(());
        };
        let plain = choice.plain_columns();
        if plain.is_empty() {
            return Ok(());
        }
        let keys: Vec<_> = (self.props.sorting_columns().into_iter().flatten())
            .filter_map(|c| usize::try_from(c.column_idx).ok())
            .filter(|&i| i < self.descr.num_columns())
            .map(|i| self.descr.column(i).path().clone())
            .collect();
        let mut builder = (*self.props).clone().into_builder();
        for column in plain {
            let integers = (self.descr.columns().iter()).any(|c| {
                c.path() == &column
                    && matches!(c.physical_type(), PhysicalType::INT32 | PhysicalType::INT64)
            });
            if integers {
                builder =
                    builder.set_column_encoding(column.clone(), Encoding::DELTA_BINARY_PACKED);
            }
            builder = builder.set_column_dictionary_enabled(column, false);
        }
        for column in choice.columns_without_statistics() {
            builder = builder.set_column_compression(column.clone(), distinct_text_compression()?);
            if !keys.contains(&column) {
                builder = builder.set_column_statistics_enabled(column, EnabledStatistics::None);
            }
        }
        self.props = Arc::new(builder.build());
        self.factory = row_group_factory(
            &self.descr,
            &self.props,
            &self.arrow_schema,
            self.page_file.as_ref(),
        )?;
        Ok(())
    }

    fn open_row_group(&mut self) -> Result<&mut OpenRowGroup> {
        if self.open.is_none() {
            let writers = self
                .factory
                .create_column_writers(self.row_groups())
                .map_err(|e| Error::encode(OUTPUT, e))?;
            self.open = Some(OpenRowGroup { writers, rows: 0 });
        }
        self.open
            .as_mut()
            .ok_or_else(|| Error::invariant("no open row group"))
    }

    /// Lays the staged block out in the output, column by column, moving every offset with
    /// it, and has its bytes copied there while the writer goes on (`copying`).
    fn write_block(&mut self) -> Result<()> {
        let mut block = std::mem::take(&mut self.block);
        if block.is_empty() {
            return Ok(());
        }
        let mut to = self.destination.ready()?.out.bytes_written() as u64;
        let mut ranges = Vec::with_capacity(block.len() * self.descr.num_columns());
        let mut columns: Vec<Vec<_>> = block.iter().map(|_| Vec::new()).collect();
        for c in 0..self.descr.num_columns() {
            for (staged, laid_out) in block.iter_mut().zip(columns.iter_mut()) {
                let chunk = staged.row_group.metadata.column(c);
                let (start, length) = chunk.byte_range();
                ranges.push((staged.start + start, length));
                let shift = to as i64 - start as i64;
                to += length;
                let moved = chunk
                    .clone()
                    .into_builder()
                    .set_data_page_offset(chunk.data_page_offset() + shift)
                    .set_dictionary_page_offset(chunk.dictionary_page_offset().map(|o| o + shift))
                    .set_index_page_offset(chunk.index_page_offset().map(|o| o + shift))
                    .build()
                    .map_err(|e| Error::encode(OUTPUT, e))?;
                laid_out.push(moved);
                if let Some(index) = staged.row_group.offset_indexes[c].as_mut() {
                    for page in &mut index.page_locations {
                        page.offset += shift;
                    }
                }
            }
        }
        for (staged, laid_out) in block.into_iter().zip(columns) {
            let mut row_group = staged.row_group;
            let file_offset = laid_out.iter().map(|c| c.byte_range().0).min().unwrap_or(0) as i64;
            row_group.metadata = row_group
                .metadata
                .into_builder()
                .set_column_metadata(laid_out)
                .set_file_offset(file_offset)
                .build()
                .map_err(|e| Error::encode(OUTPUT, e))?;
            self.closed.push(row_group);
        }
        self.destination.copy(ranges)
    }
}

impl OpenRowGroup {
    fn write(&mut self, schema: &SchemaRef, batches: &[RecordBatch], parallel: bool) -> Result<()> {
        // Each writer's leaves, one per batch, and its weight: the decoded size of its column,
        // shared by the column's leaves, stands for the work of encoding it (only the split
        // between two threads needs it).
        let mut leaves: Vec<(Vec<ArrowLeafColumn>, usize)> = (self.writers.iter())
            .map(|_| (Vec::with_capacity(batches.len()), 0))
            .collect();
        for batch in batches {
            let mut writer = 0;
            for (field, column) in schema.fields().iter().zip(batch.columns()) {
                let field_leaves =
                    compute_leaves(field, column).map_err(|e| Error::encode(OUTPUT, e))?;
                let weight = match parallel {
                    true => column.get_array_memory_size() / field_leaves.len().max(1),
                    false => 0,
                };
                for leaf in field_leaves {
                    let (column_leaves, column_weight) =
                        leaves.get_mut(writer).ok_or_else(|| {
                            Error::invariant(format!(
                                "more leaves than the {} column writers",
                                self.writers.len()
                            ))
                        })?;
                    column_leaves.push(leaf);
                    *column_weight += weight;
                    writer += 1;
                }
            }
        }
        encode::write_leaves(&mut self.writers, leaves, parallel)?;
        self.rows += batches.iter().map(RecordBatch::num_rows).sum::<usize>();
        Ok(())
    }

    fn estimated_bytes(&self) -> usize {
        self.writers
            .iter()
            .map(ArrowColumnWriter::get_estimated_total_bytes)
            .sum()
    }
}

/// The rows of consecutive batches, split without copying.
struct Rows {
    batches: Vec<RecordBatch>,
}

impl Rows {
    fn new(batches: &[RecordBatch]) -> Self {
        let batches = batches
            .iter()
            .filter(|b| b.num_rows() > 0)
            .cloned()
            .collect();
        Self { batches }
    }

    fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    fn first_batch_rows(&self) -> usize {
        self.batches.first().map_or(0, RecordBatch::num_rows)
    }

    /// Keeps the first `at` rows and returns the others.
    fn split_off(&mut self, at: usize) -> Rows {
        let mut kept = 0;
        let mut rest = Vec::new();
        let mut batches = std::mem::take(&mut self.batches).into_iter();
        for batch in batches.by_ref() {
            let rows = batch.num_rows();
            if kept + rows <= at {
                kept += rows;
                self.batches.push(batch);
                if kept == at {
                    break;
                }
                continue;
            }
            let head = at - kept;
            if head > 0 {
                self.batches.push(batch.slice(0, head));
            }
            rest.push(batch.slice(head, rows - head));
            break;
        }
        rest.extend(batches);
        Rows { batches: rest }
    }
}

/// The column-writer factory of row groups of `schema` under `props`, their finished pages in
/// `page_file` when given.
fn row_group_factory(
    descr: &SchemaDescPtr,
    props: &WriterPropertiesPtr,
    schema: &SchemaRef,
    page_file: Option<&PathBuf>,
) -> Result<ArrowRowGroupWriterFactory> {
    // The factory takes its schema and properties from a file writer; this one writes nowhere.
    let template =
        SerializedFileWriter::new(std::io::sink(), descr.root_schema_ptr(), Arc::clone(props))
            .map_err(|e| Error::encode(OUTPUT, e))?;
    let factory = ArrowRowGroupWriterFactory::new(&template, Arc::clone(schema));
    Ok(match page_file {
        Some(path) => factory.with_page_store_factory(Arc::new(ScratchPageStoreFactory::new(path))),
        None => factory,
    })
}

/// Writes one row group's chunks to `out` in column order and returns its metadata and
/// indexes; with `blooms_after`, its bloom filters follow it directly.
fn append_row_group<T: Write + Send>(
    out: &mut TrackedWrite<T>,
    descr: &SchemaDescPtr,
    props: &WriterPropertiesPtr,
    ordinal: i32,
    chunks: Vec<ArrowColumnChunk>,
    blooms_after: bool,
) -> parquet::errors::Result<ClosedRowGroup> {
    let mut closed = None;
    {
        let slot = &mut closed;
        let on_close: OnCloseRowGroup<'_, T> = Box::new(
            move |out, mut metadata, mut blooms, column_indexes, offset_indexes| {
                if blooms_after {
                    write_blooms(out, &mut metadata, &mut blooms)?;
                }
                *slot = Some(ClosedRowGroup {
                    metadata,
                    blooms,
                    column_indexes,
                    offset_indexes,
                });
                Ok(())
            },
        );
        let mut writer = SerializedRowGroupWriter::new(
            Arc::clone(descr),
            Arc::clone(props),
            out,
            ordinal,
            Some(on_close),
        );
        for chunk in chunks {
            chunk.append_to_row_group(&mut writer)?;
        }
        writer.close()?;
    }
    closed.ok_or_else(|| ParquetError::General("row group closed without its metadata".into()))
}

/// The compression of mostly distinct text (see [`crate::output::dictionary_choice`]): ZSTD
/// level 1.
fn distinct_text_compression() -> Result<Compression> {
    let level = ZstdLevel::try_new(1).map_err(|e| Error::encode("zstd level", e))?;
    Ok(Compression::ZSTD(level))
}

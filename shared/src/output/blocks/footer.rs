//! The tail of a block-layout file: bloom filters, page indexes and the footer, written the way
//! `SerializedFileWriter` writes them so a plain-layout file is byte-identical to `ArrowWriter`'s.

use std::io::Write;
use std::sync::Arc;

use parquet::bloom_filter::Sbbf;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::page_index::PageIndexBuilder;
use parquet::file::metadata::{
    FileMetaData, ParquetMetaData, ParquetMetaDataBuilder, ParquetMetaDataWriter, RowGroupMetaData,
};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::page_index::offset_index::OffsetIndexMetaData;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::TrackedWrite;
use parquet::schema::types::SchemaDescPtr;

/// A row group whose chunks are in the output, with what the footer needs of it.
#[derive(Debug)]
pub(crate) struct ClosedRowGroup {
    /// Its footer entry, offsets as written.
    pub metadata: RowGroupMetaData,
    /// Bloom filters not written yet, per leaf column.
    pub blooms: Vec<Option<Sbbf>>,
    /// Column index per leaf column.
    pub column_indexes: Vec<Option<ColumnIndexMetaData>>,
    /// Offset index per leaf column, page locations as written.
    pub offset_indexes: Vec<Option<OffsetIndexMetaData>>,
}

/// Writes the row group's pending bloom filters to `out` in column order and records where.
pub(crate) fn write_blooms<W: Write>(
    out: &mut TrackedWrite<W>,
    row_group: &mut RowGroupMetaData,
    blooms: &mut [Option<Sbbf>],
) -> Result<()> {
    for (column, bloom) in row_group.columns_mut().iter_mut().zip(blooms.iter_mut()) {
        let Some(bloom) = bloom.take() else {
            continue;
        };
        let start = out.bytes_written();
        bloom.write(&mut *out)?;
        let length = i32::try_from(out.bytes_written() - start)
            .map_err(|_| ParquetError::General("bloom filter over 2 GiB".into()))?;
        *column = column
            .clone()
            .into_builder()
            .set_bloom_filter_offset(Some(start as i64))
            .set_bloom_filter_length(Some(length))
            .build()?;
    }
    Ok(())
}

/// The file's metadata: row groups, key-value metadata and page indexes of `row_groups`.
pub(crate) fn file_metadata(
    descr: &SchemaDescPtr,
    props: &WriterProperties,
    row_groups: Vec<ClosedRowGroup>,
) -> ParquetMetaData {
    let num_rows = row_groups.iter().map(|r| r.metadata.num_rows()).sum();
    let file = FileMetaData::new(
        props.writer_version().as_num(),
        num_rows,
        Some(props.created_by().to_string()),
        props.key_value_metadata().cloned(),
        Arc::clone(descr),
        None,
    );
    let mut index = PageIndexBuilder::new(row_groups.len(), descr.num_columns());
    let mut metadata = Vec::with_capacity(row_groups.len());
    for (r, row_group) in row_groups.into_iter().enumerate() {
        for (c, column_index) in row_group.column_indexes.into_iter().enumerate() {
            if let Some(column_index) = column_index {
                index.put_column_index(column_index, r, c);
            }
        }
        if !props.offset_index_disabled() {
            for (c, offset_index) in row_group.offset_indexes.into_iter().enumerate() {
                if let Some(offset_index) = offset_index {
                    index.put_offset_index(offset_index, r, c);
                }
            }
        }
        metadata.push(row_group.metadata);
    }
    ParquetMetaDataBuilder::new(file)
        .set_row_groups(metadata)
        .set_page_index(Some(Arc::new(index.build())))
        .build()
}

/// The page indexes, footer and magic of `metadata` for a file whose first `offset` bytes are
/// already written (every offset in them is absolute).
pub(crate) fn render_footer(
    metadata: &ParquetMetaData,
    props: &WriterProperties,
    offset: usize,
) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    // `ParquetMetaDataWriter` counts positions from its `TrackedWrite`, which counts from zero:
    // feed it `offset` bytes that the sink drops, so it counts from the file position.
    let mut tracked = TrackedWrite::new(SkipPrefix {
        skip: offset,
        out: &mut bytes,
    });
    let zeros = [0u8; 64 << 10];
    let mut left = offset;
    while left > 0 {
        let n = left.min(zeros.len());
        tracked.write_all(&zeros[..n])?;
        left -= n;
    }
    ParquetMetaDataWriter::new_with_tracked(tracked, metadata)
        .with_write_path_in_schema(props.write_path_in_schema())
        .with_preserve_page_index_locations(false)
        .finish()?;
    Ok(bytes)
}

/// A writer that drops its first `skip` bytes and appends the rest to `out`.
struct SkipPrefix<'a> {
    skip: usize,
    out: &'a mut Vec<u8>,
}

impl Write for SkipPrefix<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let dropped = self.skip.min(buf.len());
        self.skip -= dropped;
        self.out.extend_from_slice(&buf[dropped..]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

//! The pages of an input checked against what they declare, before any of them is decoded.
//!
//! A Parquet reader trusts the sizes a file declares: it allocates a page's declared size
//! before inflating it, inflates gzip, brotli and LZ4-frame pages to their end whatever the
//! header said, and reads column chunks by the footer's byte ranges. A hostile or broken file
//! (a 300 MiB value compressed to 16 KiB, a page that inflates far beyond its header, a
//! footer claiming chunks of 2^50 bytes or a schema thousands of levels deep) would then take
//! the memory of the whole job. This walk reads every page header of every column chunk
//! (the compact Thrift encoding, parsed here with limits) and refuses the file when:
//!
//! - the footer is larger than [`MAX_FOOTER_BYTES`], has more than [`MAX_LEAF_COLUMNS`]
//!   leaf columns, or nests deeper than [`MAX_NESTING`];
//! - a column chunk's byte range leaves the file, or its pages overrun it, or the footer
//!   claims it decodes to far more than its pages declare;
//! - a page declares more decoded bytes than the page cap (a share of the budget B);
//! - a page inflates to another size than its header declares (checked by inflating it,
//!   output discarded, for the codecs a reader would inflate without a bound: gzip, brotli
//!   and LZ4 frames; snappy by its own length prefix; zstd, LZ4 raw and Hadoop LZ4 are
//!   inflated into the declared size by the reader itself);
//! - a row group's row count disagrees with the values its chunks and their pages declare
//!   ([`check_row_counts`]).
//!
//! It also gives the decoded size of each column chunk as its pages declare it (bounded by
//! the cap), which the job uses instead of the footer's claims.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::ops::Range;

use parquet::basic::Compression;
use parquet::file::metadata::ParquetMetaData;

/// The largest footer an input may have (bytes).
pub const MAX_FOOTER_BYTES: u64 = 16 << 20;
/// The most leaf columns an input may have.
pub const MAX_LEAF_COLUMNS: usize = 10_000;
/// The deepest nesting of a column (path segments of a leaf).
pub const MAX_NESTING: usize = 64;
/// The longest page header read (statistics included).
const MAX_PAGE_HEADER_BYTES: u64 = 16 << 20;
/// The deepest Thrift nesting skipped inside a page header.
const MAX_THRIFT_DEPTH: u32 = 16;

/// What the walk found out about one column chunk's pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkPages {
    /// Decoded bytes of its pages (the sum of their declared sizes, each within the cap).
    pub decoded_bytes: u64,
    /// Bytes the chunk takes in the file, page headers included.
    pub stored_bytes: u64,
    /// The largest data page, decoded.
    pub largest_page_bytes: u64,
    /// The dictionary page, decoded (0 without one).
    pub dictionary_bytes: u64,
    /// Values its data pages declare, nulls and empty lists included: the definition and
    /// repetition levels a reader decodes from them.
    pub levels: u64,
}

impl ChunkPages {
    /// The chunk's decoded size, bounded by what its pages declare: a footer may claim any
    /// size, but a chunk's decoded bytes are its pages' plus its page headers, which lie in
    /// the file (`claimed` is the footer's figure).
    pub fn bounded_bytes(&self, claimed: i64) -> u64 {
        let claimed = u64::try_from(claimed).unwrap_or(0);
        claimed.min(self.decoded_bytes.saturating_add(self.stored_bytes))
    }
}

/// What the walk found out about an input's pages: per row group, per column chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageFacts {
    /// The pages of each row group's column chunks, in footer order.
    pub row_groups: Vec<Vec<ChunkPages>>,
}

/// Checks the size of an input's footer from its last eight bytes, and how deep its schema
/// nests ([`check_schema_nesting`]), before a reader parses it. `Err` holds the reason the
/// file is a bad input.
pub fn check_footer_size(file: &mut File) -> Result<(), String> {
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read the local copy: {e}"))?
        .len();
    if len < 12 {
        return Err(format!(
            "not a readable Parquet file: {len} bytes is too short"
        ));
    }
    let mut tail = [0u8; 8];
    file.seek(SeekFrom::End(-8))
        .and_then(|_| file.read_exact(&mut tail))
        .map_err(|e| format!("cannot read the footer: {e}"))?;
    let footer = footer_range(&tail, len)?;
    let mut bytes = vec![0u8; (footer.end - footer.start) as usize];
    file.seek(SeekFrom::Start(footer.start))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read the footer: {e}"))?;
    check_schema_nesting(&bytes)
}

/// Where the footer of a file of `len` bytes (at least 12) lies, from its last eight bytes
/// `tail`: the footer's length and the `PAR1` magic. `Err` holds the reason the file is a bad
/// input.
pub fn footer_range(tail: &[u8; 8], len: u64) -> Result<Range<u64>, String> {
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if &tail[4..] != b"PAR1" {
        return Err("not a readable Parquet file: no PAR1 magic at its end".into());
    }
    if footer > MAX_FOOTER_BYTES {
        return Err(format!(
            "the footer claims {footer} bytes, more than the {MAX_FOOTER_BYTES} an input may have"
        ));
    }
    if footer + 12 > len {
        return Err(format!(
            "the footer claims {footer} bytes but the file holds {len}"
        ));
    }
    Ok(len - 8 - footer..len - 8)
}

/// Refuses a footer (the compact-Thrift `FileMetaData`) whose schema nests deeper than
/// [`MAX_NESTING`], from its flat list of schema elements and their child counts, before a
/// reader builds the schema tree: readers build it recursively, and a footer of a few megabytes
/// can declare hundreds of thousands of levels, which overflow a thread's stack (aborting the
/// process) before any check of the built schema runs. A footer that does not parse passes, for
/// the reader to report.
pub fn check_schema_nesting(footer: &[u8]) -> Result<(), String> {
    let mut r = footer;
    let Ok(Some(elements)) = schema_list(&mut r) else {
        return Ok(());
    };
    // Per open group, innermost last: its children still to come, and its name.
    let mut open: Vec<(u64, String)> = Vec::new();
    for index in 0..elements {
        let Ok((name, children)) = schema_element(&mut r) else {
            return Ok(());
        };
        if index > 0 {
            while matches!(open.last(), Some((0, _))) {
                open.pop();
            }
            let Some(parent) = open.last_mut() else {
                return Ok(());
            };
            parent.0 -= 1;
            if open.len() > MAX_NESTING {
                let path: Vec<&str> = open[1..].iter().take(4).map(|(_, n)| n.as_str()).collect();
                return Err(format!(
                    "column {}… nests more than {MAX_NESTING} levels deep",
                    path.join(".")
                ));
            }
        }
        if children > 0 {
            open.push((children, name));
        }
    }
    Ok(())
}

/// Reads a `FileMetaData` up to its schema list; the number of schema elements, `None`
/// without one.
fn schema_list<R: Read>(r: &mut R) -> std::io::Result<Option<u64>> {
    let mut field = 0i16;
    while let Some((id, kind)) = field_header(r, &mut field)? {
        if (id, kind) == (2, T_LIST) {
            let b = read_byte(r)?;
            if b & 0x0f != T_STRUCT {
                return Ok(None);
            }
            return Ok(Some(match b >> 4 {
                15 => read_varint(r)?,
                n => u64::from(n),
            }));
        }
        skip(r, kind, 0)?;
    }
    Ok(None)
}

/// Reads one `SchemaElement`: its name and its number of children (0 for a leaf).
fn schema_element<R: Read>(r: &mut R) -> std::io::Result<(String, u64)> {
    let (mut name, mut children) = (String::new(), 0u64);
    let mut field = 0i16;
    while let Some((id, kind)) = field_header(r, &mut field)? {
        match (id, kind) {
            (4, T_BINARY) => {
                let len = read_varint(r)?;
                let mut bytes = Vec::new();
                r.by_ref().take(len.min(1 << 16)).read_to_end(&mut bytes)?;
                std::io::copy(
                    &mut r.by_ref().take(len.saturating_sub(1 << 16)),
                    &mut std::io::sink(),
                )?;
                name = String::from_utf8_lossy(&bytes).into_owned();
            }
            (5, T_I32) => children = u64::try_from(read_i32(r)?).unwrap_or(0),
            (_, kind) => skip(r, kind, 1)?,
        }
    }
    Ok((name, children))
}

/// Walks every page header of `metadata`'s column chunks in `file`. `page_cap_bytes` is the
/// most one page may decode to. `Err` holds the reason the file is a bad input.
pub fn check_pages(
    file: &File,
    metadata: &ParquetMetaData,
    page_cap_bytes: u64,
) -> Result<PageFacts, String> {
    let schema = metadata.file_metadata().schema_descr();
    if schema.num_columns() > MAX_LEAF_COLUMNS {
        return Err(format!(
            "{} leaf columns, more than the {MAX_LEAF_COLUMNS} an input may have",
            schema.num_columns()
        ));
    }
    let file_len = file
        .metadata()
        .map_err(|e| format!("cannot read the local copy: {e}"))?
        .len();
    let mut reader = BufReader::with_capacity(64 << 10, file);
    let mut facts = PageFacts::default();
    for (rg_index, rg) in metadata.row_groups().iter().enumerate() {
        let mut chunks = Vec::with_capacity(rg.columns().len());
        for chunk in rg.columns() {
            let column = chunk.column_path().string();
            let at = |what: String| format!("row group {rg_index}, column {column}: {what}");
            let (start, length) = chunk.byte_range();
            let end = start
                .checked_add(length)
                .filter(|&end| end <= file_len)
                .ok_or_else(|| {
                    at(format!(
                        "the footer places the chunk at bytes {start}..+{length}, beyond the file's {file_len}"
                    ))
                })?;
            let walked = walk_chunk(&mut reader, start, end, chunk.compression(), page_cap_bytes)
                .map_err(at)?;
            // Writers count page headers in; twice the pages and headers is far beyond any.
            let plausible = walked
                .decoded_bytes
                .saturating_add(walked.stored_bytes)
                .saturating_mul(2)
                .saturating_add(1 << 20);
            let claimed = chunk.uncompressed_size();
            if u64::try_from(claimed).map_or(true, |c| c > plausible) {
                return Err(at(format!(
                    "the footer claims {claimed} decoded bytes, but the chunk's pages declare {}",
                    walked.decoded_bytes
                )));
            }
            chunks.push(walked);
        }
        facts.row_groups.push(chunks);
    }
    Ok(facts)
}

/// Checks each row group's row count against the values its column chunks hold, from the
/// footer's `num_values` and from the walk's [`ChunkPages::levels`] (what the data page
/// headers declare): a chunk must declare the values its pages declare, a column that repeats
/// nothing must hold one value for each row, and a repeated one (lists, maps) at least one,
/// and none exactly when the row group has no row. A reader trusts the row count: a footer
/// that under-counts hides the rows past its count, and one that counts no row at all makes
/// the file look empty, to be consumed and deleted with its rows. `Err` holds the reason the
/// file is a bad input.
pub fn check_row_counts(metadata: &ParquetMetaData, pages: &PageFacts) -> Result<(), String> {
    let groups = metadata.row_groups().iter().zip(&pages.row_groups);
    for (rg_index, (rg, walked)) in groups.enumerate() {
        let rows = rg.num_rows();
        for (chunk, walked) in rg.columns().iter().zip(walked) {
            let column = chunk.column_path().string();
            let levels = walked.levels;
            if u64::try_from(chunk.num_values()) != Ok(levels) {
                return Err(format!(
                    "row group {rg_index}, column {column}: the footer declares {} values but the chunk's pages declare {levels}",
                    chunk.num_values()
                ));
            }
            let repeated = chunk.column_descr().max_rep_level() > 0;
            let agrees = match u64::try_from(rows) {
                Ok(rows) if repeated => levels >= rows && (levels == 0) == (rows == 0),
                Ok(rows) => levels == rows,
                Err(_) => false,
            };
            if !agrees {
                return Err(format!(
                    "row group {rg_index} counts {rows} rows but the pages of its column {column} declare {levels} values: the footer miscounts the file's rows"
                ));
            }
        }
    }
    Ok(())
}

fn walk_chunk<R: Read + Seek>(
    reader: &mut R,
    start: u64,
    end: u64,
    codec: Compression,
    page_cap_bytes: u64,
) -> Result<ChunkPages, String> {
    let mut walk = ChunkPages {
        stored_bytes: end - start,
        ..Default::default()
    };
    let mut at = start;
    while at < end {
        reader
            .seek(SeekFrom::Start(at))
            .map_err(|e| format!("cannot read a page header: {e}"))?;
        let mut counted = CountingReader {
            inner: reader.by_ref().take(MAX_PAGE_HEADER_BYTES.min(end - at)),
            read: 0,
        };
        let header = PageHeader::read(&mut counted)
            .map_err(|e| format!("unreadable page header at byte {at}: {e}"))?;
        let header_bytes = counted.read;
        let (Ok(compressed), Ok(decoded)) = (
            u64::try_from(header.compressed_page_size),
            u64::try_from(header.uncompressed_page_size),
        ) else {
            return Err(format!("a page at byte {at} declares a negative size"));
        };
        let body = at + header_bytes;
        if body.saturating_add(compressed) > end {
            return Err(format!(
                "a page at byte {at} declares {compressed} bytes, beyond its chunk's end at {end}"
            ));
        }
        if compressed > page_cap_bytes.saturating_add(page_cap_bytes / 8) {
            return Err(format!(
                "a page at byte {at} holds {compressed} bytes, more than a page may (the cap is {page_cap_bytes} decoded bytes)"
            ));
        }
        if decoded > page_cap_bytes {
            return Err(format!(
                "a page decodes to {decoded} bytes, more than the {page_cap_bytes} one page may take under the memory budget (a value or row too large for it)"
            ));
        }
        let levels = header.v2_levels_bytes.unwrap_or(0);
        if levels > compressed || levels > decoded {
            return Err(format!(
                "a page at byte {at} declares more level bytes than it holds"
            ));
        }
        if header.is_compressed {
            reader
                .seek(SeekFrom::Start(body + levels))
                .map_err(|e| format!("cannot read a page: {e}"))?;
            let payload = reader.by_ref().take(compressed - levels);
            check_inflated_size(payload, codec, decoded - levels)
                .map_err(|e| format!("the page at byte {at}: {e}"))?;
        } else if compressed != decoded {
            return Err(format!(
                "an uncompressed page at byte {at} holds {compressed} bytes but declares {decoded}"
            ));
        }
        walk.decoded_bytes = walk.decoded_bytes.saturating_add(decoded);
        walk.levels = walk.levels.saturating_add(header.num_values);
        if header.is_dictionary {
            walk.dictionary_bytes = walk.dictionary_bytes.max(decoded);
        } else {
            walk.largest_page_bytes = walk.largest_page_bytes.max(decoded);
        }
        at = body + compressed;
    }
    Ok(walk)
}

/// Checks that `payload` inflates to exactly `declared` bytes with `codec`, inflating at most
/// one byte more than that (output discarded) for the codecs a reader inflates unbounded.
fn check_inflated_size<R: Read>(
    mut payload: R,
    codec: Compression,
    declared: u64,
) -> Result<(), String> {
    let inflated = match codec {
        Compression::UNCOMPRESSED => {
            let held = std::io::copy(&mut payload, &mut std::io::sink())
                .map_err(|e| format!("unreadable: {e}"))?;
            if held != declared {
                return Err(format!(
                    "uncompressed, it holds {held} bytes but declares {declared}"
                ));
            }
            return Ok(());
        }
        Compression::GZIP(_) => bounded_copy(flate2::read::MultiGzDecoder::new(payload), declared),
        Compression::BROTLI(_) => bounded_copy(brotli::Decompressor::new(payload, 4096), declared),
        Compression::LZ4 => {
            let mut bytes = Vec::new();
            payload
                .read_to_end(&mut bytes)
                .map_err(|e| format!("unreadable: {e}"))?;
            if hadoop_lz4_size(&bytes) == Some(declared) {
                return Ok(());
            }
            // Not Hadoop framing: a reader falls back to an LZ4 frame, inflated unbounded.
            match bounded_copy(
                lz4_flex::frame::FrameDecoder::new(bytes.as_slice()),
                declared,
            ) {
                Ok(n) => Ok(n),
                // Nor a frame: the last fallback, raw LZ4, is inflated into the declared size.
                Err(_) => return Ok(()),
            }
        }
        Compression::SNAPPY => {
            let mut prefix = Vec::with_capacity(10);
            payload
                .take(10)
                .read_to_end(&mut prefix)
                .map_err(|e| format!("unreadable: {e}"))?;
            snap::raw::decompress_len(&prefix)
                .map(|n| n as u64)
                .map_err(|e| format!("not snappy data: {e}"))
        }
        // Inflated by the reader into a buffer of the declared size, never beyond it.
        _ => return Ok(()),
    }?;
    if inflated > declared {
        Err(format!(
            "it inflates beyond the {declared} bytes its header declares (a decompression bomb)"
        ))
    } else if inflated < declared {
        Err(format!(
            "it inflates to {inflated} bytes, not the {declared} its header declares"
        ))
    } else {
        Ok(())
    }
}

/// Bytes `decoder` yields, reading at most one more than `declared`.
fn bounded_copy<R: Read>(decoder: R, declared: u64) -> Result<u64, String> {
    std::io::copy(&mut decoder.take(declared + 1), &mut std::io::sink())
        .map_err(|e| format!("does not inflate: {e}"))
}

/// The decoded size a run of Hadoop LZ4 blocks declares, when `bytes` is exactly such a run.
fn hadoop_lz4_size(mut bytes: &[u8]) -> Option<u64> {
    let mut total = 0u64;
    while !bytes.is_empty() {
        let prefix = bytes.get(..8)?;
        let decoded = u64::from(u32::from_be_bytes(prefix[..4].try_into().ok()?));
        let compressed = u32::from_be_bytes(prefix[4..].try_into().ok()?) as usize;
        bytes = bytes.get(8 + compressed..)?;
        total += decoded;
    }
    Some(total)
}

struct CountingReader<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// The fields of a Parquet page header the walk needs.
#[derive(Debug, Default, PartialEq, Eq)]
struct PageHeader {
    uncompressed_page_size: i32,
    compressed_page_size: i32,
    is_dictionary: bool,
    /// Level bytes of a v2 data page (stored uncompressed before its values).
    v2_levels_bytes: Option<u64>,
    /// False for a v2 data page stored uncompressed.
    is_compressed: bool,
    /// Values of a data page, nulls included (0 for other pages).
    num_values: u64,
}

/// Compact Thrift field types.
const T_BOOL_TRUE: u8 = 1;
const T_BOOL_FALSE: u8 = 2;
const T_BYTE: u8 = 3;
const T_I16: u8 = 4;
const T_I32: u8 = 5;
const T_I64: u8 = 6;
const T_DOUBLE: u8 = 7;
const T_BINARY: u8 = 8;
const T_LIST: u8 = 9;
const T_SET: u8 = 10;
const T_MAP: u8 = 11;
const T_STRUCT: u8 = 12;

/// Dictionary page type in `PageHeader.type`.
const DICTIONARY_PAGE: i32 = 2;

impl PageHeader {
    fn read<R: Read>(r: &mut R) -> std::io::Result<Self> {
        let mut header = PageHeader {
            is_compressed: true,
            ..Default::default()
        };
        let mut field = 0i16;
        while let Some((id, kind)) = field_header(r, &mut field)? {
            match (id, kind) {
                (1, T_I32) => header.is_dictionary = read_i32(r)? == DICTIONARY_PAGE,
                (2, T_I32) => header.uncompressed_page_size = read_i32(r)?,
                (3, T_I32) => header.compressed_page_size = read_i32(r)?,
                (5, T_STRUCT) => header.num_values = read_num_values(r)?,
                (8, T_STRUCT) => {
                    let (levels, compressed, values) = read_v2_header(r)?;
                    header.v2_levels_bytes = Some(levels);
                    header.is_compressed = compressed;
                    header.num_values = values;
                }
                (_, kind) => skip(r, kind, 0)?,
            }
        }
        Ok(header)
    }
}

/// `num_values` of a `DataPageHeader` (its first field).
fn read_num_values<R: Read>(r: &mut R) -> std::io::Result<u64> {
    let mut field = 0i16;
    let mut values = 0u64;
    while let Some((id, kind)) = field_header(r, &mut field)? {
        match (id, kind) {
            (1, T_I32) => values = non_negative(read_i32(r)?)?,
            (_, kind) => skip(r, kind, 1)?,
        }
    }
    Ok(values)
}

fn non_negative(value: i32) -> std::io::Result<u64> {
    u64::try_from(value).map_err(|_| invalid("a negative count"))
}

/// Level bytes, `is_compressed` and `num_values` of a `DataPageHeaderV2`.
fn read_v2_header<R: Read>(r: &mut R) -> std::io::Result<(u64, bool, u64)> {
    let mut field = 0i16;
    let (mut levels, mut compressed, mut values) = (0u64, true, 0u64);
    while let Some((id, kind)) = field_header(r, &mut field)? {
        match (id, kind) {
            (1, T_I32) => values = non_negative(read_i32(r)?)?,
            (5 | 6, T_I32) => {
                let bytes =
                    u64::try_from(read_i32(r)?).map_err(|_| invalid("negative level bytes"))?;
                levels = levels.saturating_add(bytes);
            }
            (7, T_BOOL_TRUE) => compressed = true,
            (7, T_BOOL_FALSE) => compressed = false,
            (_, kind) => skip(r, kind, 1)?,
        }
    }
    Ok((levels, compressed, values))
}

fn invalid(message: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.to_string())
}

fn read_byte<R: Read>(r: &mut R) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

fn read_varint<R: Read>(r: &mut R) -> std::io::Result<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = read_byte(r)?;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(invalid("varint too long"))
}

fn read_i32<R: Read>(r: &mut R) -> std::io::Result<i32> {
    let v = read_varint(r)?;
    let v = ((v >> 1) as i64) ^ -((v & 1) as i64);
    i32::try_from(v).map_err(|_| invalid("i32 out of range"))
}

/// The next field's id and type, `None` at the struct's end.
fn field_header<R: Read>(r: &mut R, last: &mut i16) -> std::io::Result<Option<(i16, u8)>> {
    let b = read_byte(r)?;
    if b == 0 {
        return Ok(None);
    }
    let kind = b & 0x0f;
    let delta = (b >> 4) as i16;
    *last = if delta == 0 {
        let v = read_varint(r)?;
        ((v >> 1) as i64 ^ -((v & 1) as i64)) as i16
    } else {
        last.saturating_add(delta)
    };
    Ok(Some((*last, kind)))
}

fn skip<R: Read>(r: &mut R, kind: u8, depth: u32) -> std::io::Result<()> {
    if depth > MAX_THRIFT_DEPTH {
        return Err(invalid("page header nests too deep"));
    }
    match kind {
        T_BOOL_TRUE | T_BOOL_FALSE => Ok(()),
        T_BYTE => read_byte(r).map(drop),
        T_I16 | T_I32 | T_I64 => read_varint(r).map(drop),
        T_DOUBLE => {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)
        }
        T_BINARY => {
            let len = read_varint(r)?;
            let copied = std::io::copy(&mut r.by_ref().take(len), &mut std::io::sink())?;
            if copied == len {
                Ok(())
            } else {
                Err(invalid("truncated binary field"))
            }
        }
        T_LIST | T_SET => {
            let b = read_byte(r)?;
            let size = match b >> 4 {
                15 => read_varint(r)?,
                n => u64::from(n),
            };
            let element = b & 0x0f;
            for _ in 0..size {
                // A list of booleans holds one byte per element.
                if element == T_BOOL_TRUE || element == T_BOOL_FALSE {
                    read_byte(r)?;
                } else {
                    skip(r, element, depth + 1)?;
                }
            }
            Ok(())
        }
        T_MAP => {
            let size = read_varint(r)?;
            if size == 0 {
                return Ok(());
            }
            let kinds = read_byte(r)?;
            for _ in 0..size {
                skip(r, kinds >> 4, depth + 1)?;
                skip(r, kinds & 0x0f, depth + 1)?;
            }
            Ok(())
        }
        T_STRUCT => {
            let mut field = 0i16;
            while let Some((_, kind)) = field_header(r, &mut field)? {
                skip(r, kind, depth + 1)?;
            }
            Ok(())
        }
        _ => Err(invalid("unknown Thrift type in a page header")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{GzipLevel, ZstdLevel};
    use parquet::file::properties::{WriterProperties, WriterVersion};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use std::sync::Arc;

    fn file_with(compression: Compression, version: WriterVersion) -> tempfile::NamedTempFile {
        let batch = RecordBatch::try_from_iter([
            (
                "t",
                Arc::new(Int64Array::from_iter_values(0..20_000)) as ArrayRef,
            ),
            (
                "s",
                Arc::new(StringArray::from_iter_values(
                    (0..20_000).map(|i| format!("value {}", i % 300)),
                )),
            ),
        ])
        .expect("batch");
        let props = WriterProperties::builder()
            .set_compression(compression)
            .set_writer_version(version)
            .set_data_page_size_limit(16 << 10)
            .set_max_row_group_row_count(Some(7_000))
            .build();
        let file = tempfile::NamedTempFile::new().expect("file");
        let mut writer =
            ArrowWriter::try_new(file.reopen().expect("reopen"), batch.schema(), Some(props))
                .expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        file
    }

    #[test]
    fn honest_files_pass_and_their_pages_add_up_to_the_footer() {
        for compression in [
            Compression::SNAPPY,
            Compression::GZIP(GzipLevel::default()),
            Compression::ZSTD(ZstdLevel::default()),
            Compression::LZ4,
            Compression::UNCOMPRESSED,
        ] {
            for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
                let tmp = file_with(compression, version);
                let mut file = tmp.reopen().expect("open");
                check_footer_size(&mut file).expect("footer");
                let reader =
                    SerializedFileReader::new(tmp.reopen().expect("open")).expect("reader");
                let metadata = reader.metadata();
                let facts = check_pages(&file, metadata, 1 << 20)
                    .unwrap_or_else(|e| panic!("{compression:?} {version:?}: {e}"));
                assert_eq!(facts.row_groups.len(), 3);
                for (rg, chunks) in metadata.row_groups().iter().zip(&facts.row_groups) {
                    for (chunk, pages) in rg.columns().iter().zip(chunks) {
                        assert_eq!(pages.stored_bytes, chunk.byte_range().1);
                        let claimed = chunk.uncompressed_size() as u64;
                        // The footer counts page headers in; the pages alone are a little less.
                        assert!(pages.decoded_bytes <= claimed, "{compression:?}");
                        assert!(claimed - pages.decoded_bytes < 1_000, "{compression:?}");
                        assert_eq!(pages.bounded_bytes(chunk.uncompressed_size()), claimed);
                        assert_eq!(pages.levels, chunk.num_values() as u64, "{compression:?}");
                    }
                }
                // A cap below the pages' size refuses the file.
                let refused = check_pages(&file, metadata, 1_000).expect_err("too large");
                assert!(
                    refused.contains("cap is 1000") || refused.contains("more than the 1000"),
                    "{refused}"
                );
            }
        }
    }

    #[test]
    fn page_headers_parse_with_skipped_fields() {
        // type=DATA_PAGE_V2 (3), sizes 100 and 40, crc, then a v2 header with level bytes
        // 4 and 6 and is_compressed=false, then a binary statistics field to skip.
        let bytes = [
            0x15, 0x06, // field 1 i32: 3
            0x15, 0xc8, 0x01, // field 2 i32: 100
            0x15, 0x50, // field 3 i32: 40
            0x15, 0x02, // field 4 i32 (crc): 1
            0x4c, // field 8 struct (delta 4)
            0x55, 0x08, // field 5 i32: 4
            0x15, 0x0c, // field 6 i32: 6
            0x12, // field 7 bool false
            0x18, 0x03, b'a', b'b', b'c', // field 8 binary, skipped
            0x00, // end of v2 header
            0x00, // end of page header
        ];
        let header = PageHeader::read(&mut &bytes[..]).expect("parses");
        assert_eq!(header.uncompressed_page_size, 100);
        assert_eq!(header.compressed_page_size, 40);
        assert_eq!(header.v2_levels_bytes, Some(10));
        assert!(!header.is_compressed);
        assert!(!header.is_dictionary);
        assert!(PageHeader::read(&mut &bytes[..5]).is_err(), "truncated");
    }

    /// `metadata` with the rows of row group `g` counted `rows(g, as written)` and the values
    /// of its chunks `values(g, as written)`.
    fn recounted(
        metadata: &ParquetMetaData,
        rows: impl Fn(usize, i64) -> i64,
        values: impl Fn(usize, i64) -> i64,
    ) -> ParquetMetaData {
        let groups = (metadata.row_groups().iter().enumerate())
            .map(|(g, rg)| {
                let columns = (rg.columns().iter())
                    .map(|c| {
                        let builder = c.clone().into_builder();
                        builder.set_num_values(values(g, c.num_values())).build()
                    })
                    .collect::<parquet::errors::Result<Vec<_>>>()
                    .expect("columns");
                let builder = rg.clone().into_builder().set_column_metadata(columns);
                builder.set_num_rows(rows(g, rg.num_rows())).build()
            })
            .collect::<parquet::errors::Result<Vec<_>>>()
            .expect("row groups");
        metadata
            .clone()
            .into_builder()
            .set_row_groups(groups)
            .build()
    }

    #[test]
    fn row_counts_must_agree_with_the_values_the_pages_declare() {
        let tmp = file_with(Compression::SNAPPY, WriterVersion::PARQUET_2_0);
        let file = tmp.reopen().expect("open");
        let reader = SerializedFileReader::new(tmp.reopen().expect("open")).expect("reader");
        let metadata = reader.metadata();
        let facts = check_pages(&file, metadata, 1 << 20).expect("pages");
        let as_written = |_: usize, n: i64| n;
        assert_eq!(check_row_counts(metadata, &facts), Ok(()));
        // A footer that counts no row over full pages, or fewer or more rows than they hold.
        for (rows, expected) in [
            (0, "counts 0 rows"),
            (6_999, "counts 6999"),
            (7_001, "7001"),
        ] {
            let lying = recounted(metadata, |g, n| if g == 1 { rows } else { n }, as_written);
            let refused = check_row_counts(&lying, &facts).expect_err("miscounted");
            assert!(
                refused.starts_with("row group 1 ") && refused.contains(expected),
                "{refused}"
            );
            assert!(refused.contains("declare 7000 values"), "{refused}");
        }
        // A chunk whose declared values are not its pages'.
        let lying = recounted(metadata, as_written, |g, n| if g == 2 { 0 } else { n });
        let refused = check_row_counts(&lying, &facts).expect_err("miscounted");
        assert!(
            refused.contains("row group 2, column t: the footer declares 0 values"),
            "{refused}"
        );

        // Lists: at least one value a row, none exactly when there is no row.
        let lists =
            arrow_array::ListArray::from_iter_primitive::<arrow_array::types::Int64Type, _, _>(
                (0..100).map(|i| Some(vec![Some(i), Some(i + 1), None])),
            );
        let batch =
            RecordBatch::try_from_iter([("l", Arc::new(lists) as ArrayRef)]).expect("batch");
        let tmp = tempfile::NamedTempFile::new().expect("file");
        let mut writer = ArrowWriter::try_new(tmp.reopen().expect("reopen"), batch.schema(), None)
            .expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        let reader = SerializedFileReader::new(tmp.reopen().expect("open")).expect("reader");
        let metadata = reader.metadata();
        let facts = check_pages(&tmp.reopen().expect("open"), metadata, 1 << 20).expect("pages");
        assert_eq!(facts.row_groups[0][0].levels, 300);
        for (rows, agrees) in [(100, true), (300, true), (0, false), (301, false)] {
            let recounted = recounted(metadata, |_, _| rows, as_written);
            assert_eq!(
                check_row_counts(&recounted, &facts).is_ok(),
                agrees,
                "{rows} rows"
            );
        }
    }

    /// The footer of a file whose one leaf's path has `levels` segments.
    fn footer_of_nesting(levels: usize) -> Vec<u8> {
        use arrow_array::{Int8Array, StructArray};
        use arrow_schema::{Field, Fields};
        let mut array: ArrayRef = Arc::new(Int8Array::from(vec![1i8]));
        for _ in 1..levels {
            let field = Field::new("n", array.data_type().clone(), true);
            array = Arc::new(StructArray::new(
                Fields::from(vec![field]),
                vec![array],
                None,
            ));
        }
        let batch = RecordBatch::try_from_iter([("deep", array)]).expect("batch");
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        let tail = bytes.len() - 8;
        let len = u32::from_le_bytes(bytes[tail..tail + 4].try_into().expect("length")) as usize;
        bytes[tail - len..tail].to_vec()
    }

    #[test]
    fn a_schema_nests_up_to_the_limit_and_no_deeper() {
        assert_eq!(check_schema_nesting(&footer_of_nesting(1)), Ok(()));
        assert_eq!(
            check_schema_nesting(&footer_of_nesting(MAX_NESTING)),
            Ok(())
        );
        let refused = check_schema_nesting(&footer_of_nesting(MAX_NESTING + 1));
        assert_eq!(
            refused,
            Err(format!(
                "column deep.n.n.n… nests more than {MAX_NESTING} levels deep"
            ))
        );
        // A footer that does not parse is left to the reader.
        assert_eq!(check_schema_nesting(&[0x19, 0xff]), Ok(()));
    }
}

//! `query --where column=value`: equality filters on any column (a top-level name, else a path
//! into structs), pruned by row-group statistics and bloom filters, then applied exactly.
//!
//! Values are written as text: strings as they are, integers in decimal, binary columns (an
//! OpenTelemetry trace id) in hex. A file without the column holds no matching row (its value
//! is null there). Pruning may be weak, never wrong: a row group is skipped only when its
//! statistics or its bloom filter prove that no row in it holds the value.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, BooleanArray, RecordBatch, StringArray};
use arrow_cast::cast;
use arrow_ord::cmp::eq;
use arrow_schema::DataType;
use parquet::basic::Type as PhysicalType;
use parquet::bloom_filter::Sbbf;
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;
use parquet::schema::types::SchemaDescriptor;

use crate::error::{Error, Result};
use crate::output::writer::resolve_leaf_index;

/// One `column=value` filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFilter {
    /// The column: a top-level name first, else a path into structs (`resource.service.name`).
    pub column: String,
    /// The value, as text (hex for binary columns).
    pub value: String,
}

impl ColumnFilter {
    /// Parses `column=value` (the first `=` splits); an error names what is wrong.
    pub fn parse(raw: &str) -> Result<Self> {
        match raw.split_once('=') {
            Some((column, value)) if !column.trim().is_empty() => Ok(Self {
                column: column.trim().to_string(),
                value: value.to_string(),
            }),
            _ => Err(Error::Config {
                message: format!("--where {raw:?}: expected column=value"),
            }),
        }
    }
}

/// The value a filter probes statistics and bloom filters with, in the column's physical form.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    /// Byte arrays and fixed-length byte arrays, compared byte-wise.
    Bytes(Vec<u8>),
    /// 32-bit integers.
    Int32(i32),
    /// 64-bit integers.
    Int64(i64),
    /// A value this filter cannot probe with (rows are still filtered exactly).
    Unprobed,
}

/// A filter resolved against one file's schema.
#[derive(Debug, Clone)]
pub(crate) struct FileFilter<'a> {
    filter: &'a ColumnFilter,
    /// The leaf column's index in the file's Parquet schema.
    pub(crate) leaf: usize,
    /// The leaf's path: its top-level column, then its struct fields.
    path: Vec<String>,
    probe: Probe,
}

/// Resolves `filter` against `descr`: `None` when the file has no such leaf column (no row of
/// it matches). A value the column's type cannot hold is an error naming both.
pub(crate) fn resolve<'a>(
    descr: &SchemaDescriptor,
    filter: &'a ColumnFilter,
) -> Result<Option<FileFilter<'a>>> {
    let Some(leaf) = resolve_leaf_index(descr, &filter.column) else {
        return Ok(None);
    };
    let column = descr.column(leaf);
    let bad = |why: String| Error::Config {
        message: format!("--where {}={}: {why}", filter.column, filter.value),
    };
    let is_text = matches!(
        column.logical_type_ref(),
        Some(parquet::basic::LogicalType::String | parquet::basic::LogicalType::Enum)
    ) || column.converted_type() == parquet::basic::ConvertedType::UTF8;
    let probe = match column.physical_type() {
        PhysicalType::BYTE_ARRAY if is_text => Probe::Bytes(filter.value.as_bytes().to_vec()),
        PhysicalType::BYTE_ARRAY | PhysicalType::FIXED_LEN_BYTE_ARRAY => {
            Probe::Bytes(decode_hex(&filter.value).map_err(bad)?)
        }
        PhysicalType::INT32 if signed_plain(column.logical_type_ref()) => Probe::Int32(
            (filter.value.trim().parse()).map_err(|e| bad(format!("not a 32-bit integer: {e}")))?,
        ),
        PhysicalType::INT64 if signed_plain(column.logical_type_ref()) => Probe::Int64(
            (filter.value.trim().parse()).map_err(|e| bad(format!("not a 64-bit integer: {e}")))?,
        ),
        _ => Probe::Unprobed,
    };
    Ok(Some(FileFilter {
        filter,
        leaf,
        path: column.path().parts().to_vec(),
        probe,
    }))
}

/// True for integers without a logical type or with a signed integer one (whose statistics
/// order as the probe does; timestamps and unsigned integers are filtered, not probed).
fn signed_plain(logical: Option<&parquet::basic::LogicalType>) -> bool {
    match logical {
        None => true,
        Some(parquet::basic::LogicalType::Integer(int)) => int.is_signed,
        Some(_) => false,
    }
}

/// Bytes of a hex string (an even number of hex digits, an optional `0x`).
fn decode_hex(text: &str) -> std::result::Result<Vec<u8>, String> {
    let digits = text.trim().trim_start_matches("0x").as_bytes();
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(format!("{text:?} is not hex (binary values are hex)"));
    }
    if !digits.len().is_multiple_of(2) {
        return Err("binary values are hex, an even number of digits".into());
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => d - b'0',
        b'a'..=b'f' => d - b'a' + 10,
        _ => d - b'A' + 10,
    };
    Ok(digits
        .chunks_exact(2)
        .map(|pair| (value(pair[0]) << 4) | value(pair[1]))
        .collect())
}

impl FileFilter<'_> {
    /// The top-level column the filter reads.
    pub(crate) fn root(&self) -> &str {
        &self.path[0]
    }

    /// False when the row group's statistics prove no row holds the value.
    pub(crate) fn stats_may_match(&self, row_group: &RowGroupMetaData) -> bool {
        let Some(statistics) = row_group.column(self.leaf).statistics() else {
            return true;
        };
        if statistics.is_min_max_deprecated() {
            return true;
        }
        match (&self.probe, statistics) {
            (Probe::Bytes(wanted), Statistics::ByteArray(s)) => match (s.min_opt(), s.max_opt()) {
                (Some(min), Some(max)) => {
                    min.data() <= wanted.as_slice() && wanted.as_slice() <= max.data()
                }
                _ => true,
            },
            (Probe::Bytes(wanted), Statistics::FixedLenByteArray(s)) => {
                match (s.min_opt(), s.max_opt()) {
                    (Some(min), Some(max)) => {
                        min.data() <= wanted.as_slice() && wanted.as_slice() <= max.data()
                    }
                    _ => true,
                }
            }
            (Probe::Int32(wanted), Statistics::Int32(s)) => match (s.min_opt(), s.max_opt()) {
                (Some(min), Some(max)) => min <= wanted && wanted <= max,
                _ => true,
            },
            (Probe::Int64(wanted), Statistics::Int64(s)) => match (s.min_opt(), s.max_opt()) {
                (Some(min), Some(max)) => min <= wanted && wanted <= max,
                _ => true,
            },
            _ => true,
        }
    }

    /// False when the bloom filter proves no row holds the value.
    pub(crate) fn bloom_may_match(&self, bloom: &Sbbf) -> bool {
        match &self.probe {
            Probe::Bytes(wanted) => bloom.check(wanted.as_slice()),
            Probe::Int32(wanted) => bloom.check(wanted),
            Probe::Int64(wanted) => bloom.check(wanted),
            Probe::Unprobed => true,
        }
    }

    /// Which rows of `batch` hold the value (a batch without the column: none).
    pub(crate) fn row_mask(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let none = || BooleanArray::from(vec![false; batch.num_rows()]);
        let Some(mut column) = batch.column_by_name(self.root()).cloned() else {
            return Ok(none());
        };
        for field in &self.path[1..] {
            let Some(inner) = (column.as_any().downcast_ref::<arrow_array::StructArray>())
                .and_then(|s| s.column_by_name(field).cloned())
            else {
                return Ok(none());
            };
            column = inner;
        }
        let plain = match column.data_type() {
            DataType::Dictionary(_, values) => cast(&column, values),
            _ => Ok(column),
        }
        .map_err(|e| Error::arrow("reading a --where column", e))?;
        let wanted: ArrayRef = match plain.data_type() {
            DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_) => {
                let bytes = decode_hex(&self.filter.value).map_err(|why| Error::Config {
                    message: format!("--where {}: {why}", self.filter.column),
                })?;
                Arc::new(BinaryArray::from_vec(vec![bytes.as_slice()]))
            }
            _ => Arc::new(StringArray::from(vec![self.filter.value.as_str()])),
        };
        let wanted = cast(&wanted, plain.data_type()).map_err(|e| Error::Config {
            message: format!(
                "--where {}={}: not a value of type {}: {e}",
                self.filter.column,
                self.filter.value,
                plain.data_type()
            ),
        })?;
        let matched = eq(&plain, &arrow_array::Scalar::new(wanted))
            .map_err(|e| Error::arrow("comparing a --where column", e))?;
        // Nulls never match.
        Ok(BooleanArray::from_iter(
            matched.iter().map(|m| Some(m.unwrap_or(false))),
        ))
    }
}

/// `mask` and every filter's row mask.
pub(crate) fn and_masks(
    mask: BooleanArray,
    filters: &[FileFilter<'_>],
    batch: &RecordBatch,
) -> Result<BooleanArray> {
    filters.iter().try_fold(mask, |mask, filter| {
        Ok(both(&mask, &filter.row_mask(batch)?))
    })
}

/// The rows both masks keep; a null keeps no row, as in `filter_record_batch`.
fn both(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    let kept = |mask: &BooleanArray| match mask.nulls() {
        Some(nulls) => mask.values() & nulls.inner(),
        None => mask.values().clone(),
    };
    BooleanArray::new(&kept(a) & &kept(b), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_buffer::{BooleanBuffer, NullBuffer};

    #[test]
    fn both_keeps_what_both_masks_keep_and_a_null_keeps_nothing() {
        // The third row's value bit is set under its null: a null still keeps no row.
        let a = BooleanArray::new(
            BooleanBuffer::from(vec![true, true, true, false]),
            Some(NullBuffer::from(vec![true, true, false, true])),
        );
        let b = BooleanArray::from(vec![true, false, true, true]);
        let kept = both(&a, &b);
        assert_eq!(kept.null_count(), 0);
        assert_eq!(
            kept.iter().collect::<Vec<_>>(),
            [Some(true), Some(false), Some(false), Some(false)]
        );
    }

    #[test]
    fn filters_parse_and_hex_decodes_strictly() {
        let f = ColumnFilter::parse("trace_id=00ff").expect("a filter");
        assert_eq!((f.column.as_str(), f.value.as_str()), ("trace_id", "00ff"));
        assert_eq!(ColumnFilter::parse("a=b=c").expect("a filter").value, "b=c");
        assert!(ColumnFilter::parse("novalue").is_err());
        assert!(ColumnFilter::parse("=x").is_err());
        assert_eq!(decode_hex("0x00Ff10"), Ok(vec![0, 255, 16]));
        assert!(decode_hex("abc").is_err());
        assert!(decode_hex("zz").is_err());
        assert!(
            decode_hex("aéb").is_err(),
            "not hex, and no panic on a multi-byte character"
        );
    }
}

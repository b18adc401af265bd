//! The clustering key and its total order: the sort key's columns in order, each ascending
//! with nulls first.
//!
//! A row's key is a prefix of bytes that compare byte-wise, then a time: the prefix holds
//! every key column but a trailing time column, which is compared as Unix nanoseconds. One
//! string or binary column before the time (today's `service.name`) is its own bytes, a null
//! sorting first; any other prefix is the columns in Arrow's row format, whose bytes compare
//! as the columns do.
//!
//! The tie-break of equal keys (input ordinal, then row ordinal) is not stored: it is carried
//! by position. INVARIANT: buffers hold rows in (input, row) order, every sort breaks ties
//! by that position, runs are contiguous in that order, and the merge breaks ties by run
//! ordinal; so the same total order results however runs are cut.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, BinaryArray, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::DataType;
use arrow_schema::SortOptions;

use crate::error::{Error, Result};
use crate::input::column_path::{column_at, field_at};
use crate::input::schema::UnifiedSchema;
use crate::input::type_union::time_nanos;
use crate::options::IntegerTimeUnit;

/// Where the key columns are in conformed batches.
#[derive(Debug, Clone)]
pub struct SortKey {
    prefix: PrefixColumns,
    /// The key's trailing time column (its path), compared as nanoseconds.
    time_path: Option<Vec<usize>>,
    /// What the time column's integers count.
    time_unit: IntegerTimeUnit,
}

/// The key columns before the trailing time column.
#[derive(Debug, Clone)]
enum PrefixColumns {
    /// None: the key is the time alone.
    None,
    /// One Utf8 column (the service), its bytes.
    Text(Vec<usize>),
    /// One Binary column, its bytes.
    Binary(Vec<usize>),
    /// Any other columns, in the row format.
    Rows(Vec<Vec<usize>>, Arc<RowConverter>),
}

/// The key of every row of one conformed batch, ready to compare rows without allocation.
#[derive(Debug, Clone)]
pub struct BatchKeys {
    prefix: PrefixValues,
    times: Option<Int64Array>,
    rows: usize,
}

#[derive(Debug, Clone)]
enum PrefixValues {
    None,
    Text(StringArray),
    Binary(BinaryArray),
    Rows(Rows),
}

impl SortKey {
    /// The key of a unified schema: its sort key's columns that some input has, in order.
    /// Fails, naming it, for a column whose type has no order.
    pub fn new(schema: &UnifiedSchema) -> Result<Self> {
        let mut columns = schema.sort_paths.clone();
        let time_path = match columns.last() {
            Some(last) if *last == schema.time_path => columns.pop(),
            _ => None,
        };
        let fields = (columns.iter())
            .map(|path| {
                (field_at(schema.schema.fields(), path).cloned())
                    .ok_or_else(|| Error::invariant("a sort key path names no field"))
            })
            .collect::<Result<Vec<_>>>()?;
        let prefix = match (columns.as_slice(), fields.as_slice()) {
            ([], _) => PrefixColumns::None,
            ([path], [field]) if field.data_type() == &DataType::Utf8 => {
                PrefixColumns::Text(path.clone())
            }
            ([path], [field]) if field.data_type() == &DataType::Binary => {
                PrefixColumns::Binary(path.clone())
            }
            _ => {
                let options = SortOptions {
                    descending: false,
                    nulls_first: true,
                };
                let sort_fields = (fields.iter())
                    .map(|f| SortField::new_with_options(f.data_type().clone(), options))
                    .collect();
                let converter = RowConverter::new(sort_fields).map_err(|e| Error::Config {
                    message: format!(
                        "sort key: column(s) {:?} cannot be sorted: {e}",
                        fields.iter().map(|f| f.name()).collect::<Vec<_>>()
                    ),
                })?;
                PrefixColumns::Rows(columns, Arc::new(converter))
            }
        };
        Ok(Self {
            prefix,
            time_path,
            time_unit: schema.time_unit,
        })
    }

    /// Whether the key leads with a service (string) column before the time: the key whose
    /// large services get row groups of their own.
    pub fn has_service(&self) -> bool {
        matches!(self.prefix, PrefixColumns::Text(_)) && self.time_path.is_some()
    }

    /// The key columns of a conformed batch.
    pub fn keys(&self, batch: &RecordBatch) -> Result<BatchKeys> {
        let prefix = match &self.prefix {
            PrefixColumns::None => PrefixValues::None,
            PrefixColumns::Text(path) => PrefixValues::Text(
                (column_at(batch, path)?.as_string_opt::<i32>())
                    .ok_or_else(|| Error::invariant("a key column is not Utf8 after conforming"))?
                    .clone(),
            ),
            PrefixColumns::Binary(path) => PrefixValues::Binary(
                (column_at(batch, path)?.as_binary_opt::<i32>())
                    .ok_or_else(|| Error::invariant("a key column is not Binary after conforming"))?
                    .clone(),
            ),
            PrefixColumns::Rows(columns, converter) => {
                let arrays = (columns.iter())
                    .map(|path| column_at(batch, path))
                    .collect::<Result<Vec<_>>>()?;
                PrefixValues::Rows(
                    (converter.convert_columns(&arrays))
                        .map_err(|e| Error::arrow("reading the sort key", e))?,
                )
            }
        };
        let times = match &self.time_path {
            Some(path) => Some(
                time_nanos(column_at(batch, path)?.as_ref(), self.time_unit)
                    .map_err(|e| Error::arrow("reading the time key", e))?,
            ),
            None => None,
        };
        Ok(BatchKeys {
            prefix,
            times,
            rows: batch.num_rows(),
        })
    }
}

/// The field at `path` of a unified schema.
impl BatchKeys {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True for an empty batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the keys hold beside the batch's own columns (the row format's).
    pub fn extra_bytes(&self) -> u64 {
        match &self.prefix {
            PrefixValues::Rows(rows) => rows.size() as u64,
            _ => 0,
        }
    }

    /// The service of row `i`: the value of a Utf8 prefix column (`None` when null, or for
    /// any other key).
    #[inline]
    pub fn service(&self, i: usize) -> Option<&str> {
        match &self.prefix {
            PrefixValues::Text(s) => s.is_valid(i).then(|| s.value(i)),
            _ => None,
        }
    }

    /// The prefix of row `i`, as bytes that compare as the key does (`None` for a null
    /// service or binary value, and for a key of time alone).
    #[inline]
    pub fn prefix(&self, i: usize) -> Option<&[u8]> {
        match &self.prefix {
            PrefixValues::None => None,
            PrefixValues::Text(s) => s.is_valid(i).then(|| s.value(i).as_bytes()),
            PrefixValues::Binary(b) => b.is_valid(i).then(|| b.value(i)),
            PrefixValues::Rows(rows) => Some(rows.row(i).data()),
        }
    }

    /// The time of row `i` in nanoseconds (0 for a key without a trailing time).
    #[inline]
    pub fn time(&self, i: usize) -> i64 {
        self.times.as_ref().map_or(0, |t| t.value(i))
    }

    /// Compares row `i` of this batch with row `j` of `other` by (prefix, time).
    #[inline]
    pub fn cmp_rows(&self, i: usize, other: &BatchKeys, j: usize) -> Ordering {
        // `Option` orders `None` first: null services sort first. Bytes compare bytewise.
        self.prefix(i)
            .cmp(&other.prefix(j))
            .then_with(|| self.time(i).cmp(&other.time(j)))
    }
}

/// A point of the partition's order: rows sort by prefix (see the module; a null service
/// first, then byte-wise), then by time. The derived order is exactly that.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct KeyPoint {
    /// The prefix's bytes (a service's UTF-8 bytes); `None` is the null service, which sorts
    /// first.
    pub service: Option<Vec<u8>>,
    /// Unix nanoseconds.
    pub time_nanos: i64,
}

impl KeyPoint {
    /// The lowest point: no row sorts before it.
    pub const MIN: KeyPoint = KeyPoint {
        service: None,
        time_nanos: i64::MIN,
    };
}

/// A half-open range of the partition's order, `[start, end)`; `None` leaves a side open.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyRange {
    /// The lowest point in the range (`None`: open below).
    pub start: Option<KeyPoint>,
    /// The first point past the range (`None`: open above).
    pub end: Option<KeyPoint>,
}

impl KeyRange {
    /// Range `index` of the ranges that `points` (strictly increasing) cut the order into.
    pub fn of_split(points: &[KeyPoint], index: usize) -> Self {
        Self {
            start: index.checked_sub(1).and_then(|i| points.get(i)).cloned(),
            end: points.get(index).cloned(),
        }
    }

    /// Whether the key (prefix bytes, time) is in the range.
    pub fn contains(&self, service: Option<&[u8]>, time_nanos: i64) -> bool {
        let cmp = |point: &KeyPoint| {
            service
                .cmp(&point.service.as_deref())
                .then(time_nanos.cmp(&point.time_nanos))
        };
        self.start.as_ref().is_none_or(|s| cmp(s) != Ordering::Less)
            && self.end.as_ref().is_none_or(|e| cmp(e) == Ordering::Less)
    }

    /// The rows of `keys` in the range, as a filter mask.
    pub fn mask(&self, keys: &BatchKeys) -> BooleanArray {
        (0..keys.len())
            .map(|i| Some(self.contains(keys.prefix(i), keys.time(i))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::ArrayRef;
    use arrow_buffer::NullBuffer;
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    #[test]
    fn orders_service_nulls_first_then_time() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("service.name", DataType::Utf8, true),
            Field::new("time_unix_nano", DataType::Int64, true),
        ]));
        let unified = UnifiedSchema {
            schema: Arc::clone(&schema),
            service_index: Some(0),
            time_path: vec![1],
            time_unit: Default::default(),
            sort_paths: vec![vec![0], vec![1]],
        };
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    Some("b"),
                    None,
                    Some("a"),
                    Some("a"),
                    Some("ab"),
                    Some("é"),
                ])),
                Arc::new(Int64Array::from(vec![1, 9, 5, -3, 0, 0])),
            ],
        )
        .unwrap();
        let keys = SortKey::new(&unified).unwrap().keys(&batch).unwrap();
        let mut order: Vec<usize> = (0..6).collect();
        order.sort_by(|&a, &b| keys.cmp_rows(a, &keys, b));
        assert_eq!(order, [1, 3, 2, 4, 0, 5]);
    }

    #[test]
    fn a_key_inside_a_struct_is_null_where_its_struct_is_and_other_keys_use_the_row_format() {
        use arrow_array::{Int32Array, StructArray};
        let service = Arc::new(Field::new("service.name", DataType::Utf8, true));
        let resource = StructArray::new(
            vec![Arc::clone(&service)].into(),
            vec![Arc::new(StringArray::from(vec!["b", "hidden", "a"])) as ArrayRef],
            Some(NullBuffer::from(vec![true, false, true])),
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new("resource", resource.data_type().clone(), true),
            Field::new("status", DataType::Int32, true),
            Field::new("time_unix_nano", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(resource),
                Arc::new(Int32Array::from(vec![Some(-1), None, Some(7)])),
                Arc::new(Int64Array::from(vec![3, 2, 1])),
            ],
        )
        .unwrap();
        let unified = |sort_paths: Vec<Vec<usize>>| UnifiedSchema {
            schema: Arc::clone(&schema),
            service_index: None,
            time_path: vec![2],
            time_unit: Default::default(),
            sort_paths,
        };
        let order = |sort_paths| {
            let keys = SortKey::new(&unified(sort_paths))
                .unwrap()
                .keys(&batch)
                .unwrap();
            let mut order: Vec<usize> = (0..3).collect();
            order.sort_by(|&a, &b| keys.cmp_rows(a, &keys, b));
            order
        };
        // The hidden service under the null resource is null: it sorts first.
        assert_eq!(order(vec![vec![0, 0], vec![2]]), [1, 2, 0]);
        // Integers in the row format: null first, then -1 before 7.
        assert_eq!(order(vec![vec![1], vec![2]]), [1, 0, 2]);
        // No trailing time: the time is a key column like the others.
        assert_eq!(order(vec![vec![2]]), [2, 1, 0]);
        assert_eq!(order(vec![vec![2], vec![1]]), [2, 1, 0]);
    }
}

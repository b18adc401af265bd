//! The clustering key and its total order: service bytes (nulls first), then time.
//!
//! The tie-break of equal keys (input ordinal, then row ordinal) is not stored: it is carried
//! by position. INVARIANT: buffers hold rows in (input, row) order, every sort breaks ties
//! by that position, runs are contiguous in that order, and the merge breaks ties by run
//! ordinal; so the same total order results however runs are cut.

use std::cmp::Ordering;

use arrow::array::{Array, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};

use crate::error::{Error, Result};
use crate::input::schema::UnifiedSchema;

/// Where the key columns are in conformed batches.
#[derive(Debug, Clone, Copy)]
pub struct SortKey {
    service_index: Option<usize>,
    time_index: usize,
}

/// The key columns of one conformed batch, ready to compare rows without allocation.
#[derive(Debug, Clone)]
pub struct BatchKeys {
    services: Option<StringArray>,
    times: Int64Array,
}

impl SortKey {
    /// The key of a unified schema: (service, time), or time alone when no input has a service.
    pub fn new(schema: &UnifiedSchema) -> Self {
        Self {
            service_index: schema.service_index,
            time_index: schema.time_index,
        }
    }

    /// Whether the key leads with the service column.
    pub fn has_service(&self) -> bool {
        self.service_index.is_some()
    }

    /// The key columns of a conformed batch (service as Utf8, time as Int64 nanoseconds).
    pub fn keys(&self, batch: &RecordBatch) -> Result<BatchKeys> {
        let services = match self.service_index {
            Some(i) => Some(
                batch
                    .column(i)
                    .as_string_opt::<i32>()
                    .ok_or_else(|| Error::invariant("service column is not Utf8 after conforming"))?
                    .clone(),
            ),
            None => None,
        };
        let time = batch.column(self.time_index);
        let times = match time.data_type() {
            DataType::Int64 => time.as_primitive::<Int64Type>().clone(),
            _ => cast(time, &DataType::Int64)
                .map_err(|e| Error::arrow("reading the time key", e))?
                .as_primitive::<Int64Type>()
                .clone(),
        };
        Ok(BatchKeys { services, times })
    }
}

impl BatchKeys {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    /// True for an empty batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The service of row `i` (`None` when null or when the key is time only).
    #[inline]
    pub fn service(&self, i: usize) -> Option<&str> {
        self.services
            .as_ref()
            .and_then(|s| s.is_valid(i).then(|| s.value(i)))
    }

    /// The time of row `i` in nanoseconds.
    #[inline]
    pub fn time(&self, i: usize) -> i64 {
        self.times.value(i)
    }

    /// Compares row `i` of this batch with row `j` of `other` by (service, time).
    #[inline]
    pub fn cmp_rows(&self, i: usize, other: &BatchKeys, j: usize) -> Ordering {
        // `Option` orders `None` first: null services sort first. `str` compares bytewise.
        self.service(i)
            .map(str::as_bytes)
            .cmp(&other.service(j).map(str::as_bytes))
            .then_with(|| self.time(i).cmp(&other.time(j)))
    }
}

/// A point of the partition's order: rows sort by service (a null service first, then
/// byte-wise), then by time. The derived order is exactly that.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct KeyPoint {
    /// The service's UTF-8 bytes; `None` is the null service, which sorts first.
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

    /// Whether the key (service bytes, time) is in the range.
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
            .map(|i| Some(self.contains(keys.service(i).map(str::as_bytes), keys.time(i))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
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
            time_index: 1,
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
        let keys = SortKey::new(&unified).keys(&batch).unwrap();
        let mut order: Vec<usize> = (0..6).collect();
        order.sort_by(|&a, &b| keys.cmp_rows(a, &keys, b));
        assert_eq!(order, [1, 3, 2, 4, 0, 5]);
    }
}

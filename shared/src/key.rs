//! The clustering key and its total order: service bytes (nulls first), then time.
//!
//! Rows are encoded with Arrow's row format, so comparing two keys is one `memcmp` with no
//! per-row allocation. The tie-break of equal keys (input ordinal, then row ordinal) is not
//! encoded: it is carried by position (INVARIANT: buffers hold rows in (input, row) order,
//! every sort is stable, runs are contiguous in that order, and the merge breaks ties by run
//! ordinal), which yields the same total order however runs are cut.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::SortOptions;
use arrow::compute::cast;
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, Rows, SortField};

use crate::error::{Error, Result};
use crate::schema::UnifiedSchema;

/// Encodes the key columns of conformed batches into comparable rows.
#[derive(Debug)]
pub struct SortKey {
    converter: RowConverter,
    service_index: Option<usize>,
    time_index: usize,
}

impl SortKey {
    /// The key of a unified schema: (service, time), or time alone when no input has a service.
    pub fn new(schema: &UnifiedSchema) -> Result<Self> {
        let ascending_nulls_first = SortOptions {
            descending: false,
            nulls_first: true,
        };
        let mut fields = Vec::new();
        if schema.service_index.is_some() {
            fields.push(SortField::new_with_options(
                DataType::Utf8,
                ascending_nulls_first,
            ));
        }
        fields.push(SortField::new_with_options(
            DataType::Int64,
            ascending_nulls_first,
        ));
        let converter =
            RowConverter::new(fields).map_err(|e| Error::arrow("building the sort key", e))?;
        Ok(Self {
            converter,
            service_index: schema.service_index,
            time_index: schema.time_index,
        })
    }

    /// Whether the key leads with the service column.
    pub fn has_service(&self) -> bool {
        self.service_index.is_some()
    }

    fn key_columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let mut columns = Vec::with_capacity(2);
        if let Some(i) = self.service_index {
            columns.push(Arc::clone(batch.column(i)));
        }
        let time = batch.column(self.time_index);
        let time = if time.data_type() == &DataType::Int64 {
            Arc::clone(time)
        } else {
            cast(time, &DataType::Int64).map_err(|e| Error::arrow("reading the time key", e))?
        };
        columns.push(time);
        Ok(columns)
    }

    /// The encoded keys of every row of a conformed batch.
    pub fn rows(&self, batch: &RecordBatch) -> Result<Rows> {
        let columns = self.key_columns(batch)?;
        self.converter
            .convert_columns(&columns)
            .map_err(|e| Error::arrow("encoding sort keys", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

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
                ])),
                Arc::new(Int64Array::from(vec![1, 9, 5, -3, 0])),
            ],
        )
        .unwrap();
        let key = SortKey::new(&unified).unwrap();
        let rows = key.rows(&batch).unwrap();
        let mut order: Vec<usize> = (0..5).collect();
        order.sort_by(|&a, &b| rows.row(a).cmp(&rows.row(b)));
        assert_eq!(order, [1, 3, 2, 4, 0]);
    }
}

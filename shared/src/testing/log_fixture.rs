//! A log batch with every column shape the output must carry to other readers: plain and
//! dictionary strings, nulls, integers, floats, booleans, a struct and a list, sorted by
//! (service nulls first, time) with unique keys, so any sort of it is the identity.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray, StructArray,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::error::Result;
use crate::options::KeyColumns;
use crate::output::writer::output_properties;

/// The services of [`log_fixture`], in sort order (rows without a service come first).
pub const FIXTURE_SERVICES: [&str; 6] = [
    "api-gateway",
    "auth",
    "billing",
    "checkout",
    "search",
    "worker",
];
/// Share of the rows per service slot (nulls first, then [`FIXTURE_SERVICES`]).
const WEIGHTS: [usize; 7] = [1, 4, 1, 6, 2, 5, 3];
const SEVERITIES: [&str; 4] = ["DEBUG", "INFO", "WARN", "ERROR"];

/// `rows` log rows in the hour starting at `start_nanos`: `service.name` (with nulls),
/// `time_unix_nano`, `severity` (a dictionary), `body` (long, distinct), `status`,
/// `duration_ms`, `resource` (struct of host and pid), `tags` (list of strings) and `ok`.
pub fn log_fixture(rows: usize, start_nanos: i64) -> RecordBatch {
    let total: usize = WEIGHTS.iter().sum();
    let mut services: Vec<Option<&str>> = Vec::with_capacity(rows);
    let mut times = Vec::with_capacity(rows);
    let mut assigned = 0;
    for (slot, weight) in WEIGHTS.iter().enumerate() {
        let n = if slot + 1 == WEIGHTS.len() {
            rows - assigned
        } else {
            rows * weight / total
        };
        assigned += n;
        let step = 3_599_000_000_000 / n.max(1) as i64;
        for j in 0..n {
            services.push(slot.checked_sub(1).map(|s| FIXTURE_SERVICES[s]));
            times.push(start_nanos + j as i64 * step);
        }
    }
    let mut next = super::random_stream(0x2545_f491_4f6c_dd1d);
    let noise: Vec<u64> = (0..rows).map(|_| next()).collect();

    let severity = DictionaryArray::<Int32Type>::new(
        Int32Array::from_iter((0..rows).map(|i| (i % 17 != 5).then_some((noise[i] % 4) as i32))),
        Arc::new(StringArray::from_iter_values(SEVERITIES)),
    );
    let body = StringArray::from_iter((0..rows).map(|i| {
        (i % 23 != 7).then(|| {
            format!(
                "{} handled request {i} for user {:016x} in {} ms",
                services[i].unwrap_or("unknown"),
                noise[i],
                noise[i] % 997
            )
        })
    }));
    let status = Int32Array::from_iter(
        (0..rows)
            .map(|i| (i % 11 != 3).then_some([200, 201, 404, 500][(noise[i] >> 8) as usize % 4])),
    );
    let duration =
        Float64Array::from_iter_values((0..rows).map(|i| (noise[i] % 40_000) as f64 / 4.0));
    let host = StringArray::from_iter_values((0..rows).map(|i| format!("host-{:02}", i % 7)));
    let pid =
        Int64Array::from_iter((0..rows).map(|i| (i % 5 != 1).then_some(1000 + (i % 13) as i64)));
    let resource_fields = Fields::from(vec![
        Field::new("host", DataType::Utf8, true),
        Field::new("pid", DataType::Int64, true),
    ]);
    let resource = StructArray::new(
        resource_fields.clone(),
        vec![Arc::new(host) as ArrayRef, Arc::new(pid)],
        Some(NullBuffer::from_iter((0..rows).map(|i| i % 29 != 2))),
    );
    let mut tags = ListBuilder::new(StringBuilder::new());
    for (i, n) in noise.iter().enumerate() {
        if i % 13 == 4 {
            tags.append(false);
            continue;
        }
        if i % 7 != 6 {
            for k in 0..(1 + n % 3) {
                if (i + k as usize).is_multiple_of(19) {
                    tags.values().append_null();
                } else {
                    tags.values()
                        .append_value(format!("tag-{}", (n >> (8 * k)) % 5));
                }
            }
        }
        tags.append(true);
    }
    let tags = tags.finish();
    let ok = BooleanArray::from_iter((0..rows).map(|i| Some(!noise[i].is_multiple_of(3))));

    let schema = Schema::new(vec![
        Field::new("service.name", DataType::Utf8, true),
        Field::new("time_unix_nano", DataType::Int64, false),
        Field::new_dictionary("severity", DataType::Int32, DataType::Utf8, true),
        Field::new("body", DataType::Utf8, true),
        Field::new("status", DataType::Int32, true),
        Field::new("duration_ms", DataType::Float64, false),
        Field::new("resource", DataType::Struct(resource_fields), true),
        Field::new("tags", tags.data_type().clone(), true),
        Field::new("ok", DataType::Boolean, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(services)),
        Arc::new(Int64Array::from(times)),
        Arc::new(severity),
        Arc::new(body),
        Arc::new(status),
        Arc::new(duration),
        Arc::new(resource),
        Arc::new(tags),
        Arc::new(ok),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).expect("fixture columns match their schema")
}

/// The compacted-file properties for `schema`, with small pages (so page indexes and row
/// selections have pages to skip) and `body` plain-encoded (so both string encodings occur).
pub fn fixture_properties(
    schema: &Schema,
    row_group_bytes: u64,
    max_rows: Option<u64>,
) -> Result<WriterProperties> {
    Ok(output_properties(
        schema,
        &KeyColumns::default(),
        true,
        row_group_bytes,
        max_rows,
    )?
    .into_builder()
    .set_write_batch_size(128)
    .set_data_page_row_count_limit(256)
    .set_column_dictionary_enabled(ColumnPath::from("body"), false)
    .build())
}

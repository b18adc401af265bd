//! Sort keys as settings: keys of any number of string, integer and binary columns, with or
//! without the time column, sort every row exactly once into the same bytes whatever the
//! budget, declare their `sorting_columns`, and read back as sorted runs when a late file
//! arrives; a configured time column keeps its inputs' logical type.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, Int32Array, Int64Array, RecordBatch,
    StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
};
use arrow_cast::cast;
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use bytes::Bytes;
use object_store::memory::InMemory;
use ourios_compaction::options::{CompactOptions, KeyColumns};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::CompactionReport;
use ourios_compaction::rng::SplitMix64;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    compact_to_bytes, multi_thread_runtime, parquet_bytes, put_bytes,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};

const LAYOUT: &str = "logs/dt=%Y%m%d/hour=%H";
const HOUR_START_MS: i64 = 1_795_946_400_000; // 2026-11-29T10:00:00Z
const FILES: usize = 8;
const ROWS: usize = 300;

/// One row's key and identity, as the test compares them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    host: Option<String>,
    status: Option<i64>,
    trace: Option<Vec<u8>>,
    micros: i64,
    message: String,
}

/// Vector-like batches whose types drift between files: `ts` in milliseconds (microseconds
/// in the last file), `status` Int32 (Int64 in file 3), `trace_id` FixedSizeBinary(16)
/// (Binary in even files); few distinct values, nulls in every key column, so keys tie.
fn input(file: usize, seed: u64) -> (RecordBatch, Vec<Row>) {
    let mut rng = SplitMix64::new(seed ^ (file as u64).wrapping_mul(0x9e37_79b9));
    let mut rows = Vec::with_capacity(ROWS);
    for r in 0..ROWS {
        let host = (rng.below(6) > 0).then(|| format!("host-{}", rng.below(4)));
        let status = (rng.below(5) > 0).then(|| [200i64, 404, 500, -1][rng.below(4) as usize]);
        let trace = (rng.below(4) > 0).then(|| {
            let mut id = [0u8; 16];
            id[0] = [0x00, 0x7f, 0x80, 0xff][rng.below(4) as usize];
            id[15] = rng.below(3) as u8;
            id.to_vec()
        });
        let millis = HOUR_START_MS + rng.below(3_600_000) as i64;
        let micros = millis * 1000
            + if file == FILES - 1 {
                r as i64 % 1000
            } else {
                0
            };
        rows.push(Row {
            host,
            status,
            trace,
            micros,
            message: format!("file {file} row {r}"),
        });
    }
    let zone = Some("UTC".into());
    let (ts, ts_type): (ArrayRef, DataType) = if file == FILES - 1 {
        let values = rows.iter().map(|r| r.micros);
        (
            Arc::new(TimestampMicrosecondArray::from_iter_values(values).with_timezone("UTC")),
            DataType::Timestamp(TimeUnit::Microsecond, zone),
        )
    } else {
        let values = rows.iter().map(|r| r.micros / 1000);
        (
            Arc::new(TimestampMillisecondArray::from_iter_values(values).with_timezone("UTC")),
            DataType::Timestamp(TimeUnit::Millisecond, zone),
        )
    };
    let host: ArrayRef = Arc::new(StringArray::from_iter(rows.iter().map(|r| r.host.clone())));
    let (status, status_type): (ArrayRef, DataType) = if file == 3 {
        let values = rows.iter().map(|r| r.status);
        (Arc::new(Int64Array::from_iter(values)), DataType::Int64)
    } else {
        let values = rows.iter().map(|r| r.status.map(|s| s as i32));
        (Arc::new(Int32Array::from_iter(values)), DataType::Int32)
    };
    let (trace, trace_type): (ArrayRef, DataType) = if file.is_multiple_of(2) {
        let values = rows.iter().map(|r| r.trace.as_deref());
        (Arc::new(BinaryArray::from_iter(values)), DataType::Binary)
    } else {
        let values = rows.iter().map(|r| r.trace.as_deref());
        let array =
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(values, 16).expect("16-byte ids");
        (Arc::new(array), DataType::FixedSizeBinary(16))
    };
    let message: ArrayRef = Arc::new(StringArray::from_iter_values(
        rows.iter().map(|r| r.message.clone()),
    ));
    let schema = Schema::new(vec![
        Field::new("ts", ts_type, false),
        Field::new("host", DataType::Utf8, true),
        Field::new("status", status_type, true),
        Field::new("trace_id", trace_type, true),
        Field::new("message", DataType::Utf8, false),
    ]);
    let batch = RecordBatch::try_new(Arc::new(schema), vec![ts, host, status, trace, message])
        .expect("columns match");
    (batch, rows)
}

/// The rows of a compacted file, in file order, and its schema and declared sort columns.
fn read_output(bytes: &[u8]) -> (Vec<Row>, Arc<Schema>, Vec<String>) {
    let bytes = Bytes::copy_from_slice(bytes);
    let reader = SerializedFileReader::new(bytes.clone()).expect("a Parquet file");
    let metadata = reader.metadata();
    let descr = metadata.file_metadata().schema_descr();
    let declared = (metadata.row_group(0).sorting_columns())
        .expect("sorting_columns declared")
        .iter()
        .map(|c| {
            assert!(c.nulls_first && !c.descending, "ascending, nulls first");
            descr.column(c.column_idx as usize).name().to_string()
        })
        .collect();
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).expect("a reader");
    let schema = Arc::clone(builder.schema());
    let mut rows = Vec::new();
    for batch in builder.build().expect("batches") {
        let batch = batch.expect("a batch");
        let column = |name: &str| batch.column_by_name(name).expect("a column");
        let micros = cast(
            column("ts"),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )
        .expect("microseconds");
        let micros = micros.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        let host = column("host").as_string::<i32>();
        let status = cast(column("status"), &DataType::Int64).expect("integers");
        let status = status.as_primitive::<arrow_array::types::Int64Type>();
        let trace = column("trace_id").as_binary::<i32>();
        let message = column("message").as_string::<i32>();
        for i in 0..batch.num_rows() {
            rows.push(Row {
                host: host.is_valid(i).then(|| host.value(i).to_string()),
                status: status.is_valid(i).then(|| status.value(i)),
                trace: trace.is_valid(i).then(|| trace.value(i).to_vec()),
                micros: micros.value(i),
                message: message.value(i).to_string(),
            });
        }
    }
    (rows, schema, declared)
}

/// Compacts `batches` (then `late`, in a second job over the first one's output) under
/// `keys` with `budget` and merge fan-in `fan_in`; the reports and the last output's bytes.
fn compact(
    keys: &KeyColumns,
    batches: &[RecordBatch],
    late: Option<&RecordBatch>,
    budget: u64,
    fan_in: usize,
) -> (Vec<CompactionReport>, Vec<u8>) {
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let layout = KeyLayout::from_template(LAYOUT).expect("the layout");
        let partition = PartitionId::parse_of(None, "2026-11-29T10").expect("partition");
        let dir = layout.ingest_dir(&partition);
        for (i, batch) in batches.iter().enumerate() {
            let key = format!("{dir}/batch-{i:04}.parquet");
            put_bytes(&store, &key, parquet_bytes(std::slice::from_ref(batch), 64)).await;
        }
        let scratch = tempfile::tempdir().expect("scratch");
        let mut options = CompactOptions::new(scratch.path());
        options.keys = keys.clone();
        options.settings.budget_bytes = budget;
        options.merge_fan_in = fan_in;
        options.settings.row_group_bytes = Some(16 << 10);
        let (first, bytes) = compact_to_bytes(&store, &layout, &partition, &options).await;
        let Some(late) = late else {
            return (vec![first], bytes);
        };
        let key = format!("{dir}/late-0000.parquet");
        put_bytes(&store, &key, parquet_bytes(std::slice::from_ref(late), 64)).await;
        let (second, bytes) = compact_to_bytes(&store, &layout, &partition, &options).await;
        (vec![first, second], bytes)
    })
}

/// The key of a row under a sort key of `columns` (named as in the inputs; `ts` as micros).
fn key_of(row: &Row, columns: &[&str]) -> Vec<KeyValue> {
    (columns.iter())
        .map(|c| match *c {
            "host" => KeyValue::Bytes(row.host.as_ref().map(|h| h.as_bytes().to_vec())),
            "trace_id" => KeyValue::Bytes(row.trace.clone()),
            "status" => KeyValue::Int(row.status),
            "ts" => KeyValue::Int(Some(row.micros)),
            "absent" => KeyValue::Int(None),
            other => panic!("no column {other}"),
        })
        .collect()
}

/// One key column's value; `None` (null) sorts first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum KeyValue {
    Bytes(Option<Vec<u8>>),
    Int(Option<i64>),
}

#[test]
fn keys_of_strings_integers_and_binaries_sort_every_row_once_whatever_the_budget() {
    let inputs: Vec<(RecordBatch, Vec<Row>)> = (0..FILES).map(|f| input(f, 7)).collect();
    let batches: Vec<RecordBatch> = inputs.iter().map(|(b, _)| b.clone()).collect();
    let (late_batch, late_rows) = input(FILES + 1, 11);
    // Three columns of string, integer and binary type, without the time; an integer then the
    // time; a binary then the time; a column no input has (null throughout) in the middle.
    for (sort_key, time_column) in [
        ("host,status,trace_id", Some("ts")),
        ("status,ts", None),
        ("trace_id,ts", None),
        ("host,absent,ts", None),
    ] {
        let keys =
            KeyColumns::from_settings(time_column, Some(sort_key), None, None).expect("keys");
        assert_eq!(keys.time, "ts", "{sort_key}");
        let columns: Vec<&str> = sort_key.split(',').collect();
        // Inputs are taken in name order, each in row order: that order breaks ties.
        let mut expected: Vec<Row> = inputs.iter().flat_map(|(_, rows)| rows.clone()).collect();
        expected.sort_by_key(|r| key_of(r, &columns));

        let (whole, reference) = compact(&keys, &batches, None, 64 << 20, 64);
        assert_eq!(whole[0].runs_spilled, 0, "{sort_key}: fits the budget");
        let (spilled, bytes) = compact(&keys, &batches, None, 48 << 10, 3);
        assert!(
            spilled[0].runs_spilled > 3 && spilled[0].merge_passes > 1,
            "{sort_key}: a small budget spills and merges in passes: {:?}",
            spilled[0]
        );
        assert!(
            reference == bytes,
            "{sort_key}: the same bytes whatever the budget"
        );

        let (rows, schema, declared) = read_output(&reference);
        assert_eq!(rows, expected, "{sort_key}: every row once, in key order");
        let present: Vec<&str> = columns.iter().copied().filter(|c| *c != "absent").collect();
        assert_eq!(declared, present, "{sort_key}: sorting_columns");
        assert_eq!(
            schema.field_with_name("ts").expect("ts").data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            "{sort_key}: the time column keeps its inputs' type at their finest unit"
        );

        // A late file: the first output is read back as a sorted run beside it.
        let (reports, bytes) = compact(&keys, &batches, Some(&late_batch), 48 << 10, 3);
        assert_eq!(reports[1].inputs.rows, (FILES + 1) as u64 * ROWS as u64);
        let mut expected = expected.clone();
        expected.extend(late_rows.iter().cloned());
        expected.sort_by_key(|r| key_of(r, &columns));
        let (mut rows, _, _) = read_output(&bytes);
        assert!(
            rows.windows(2)
                .all(|w| key_of(&w[0], &columns) <= key_of(&w[1], &columns)),
            "{sort_key}: sorted after the late file"
        );
        rows.sort();
        expected.sort();
        assert_eq!(
            rows, expected,
            "{sort_key}: every row once after the late file"
        );
    }
}

/// OpenTelemetry's shape: the service inside the resource's struct, under a field whose name
/// holds dots; a null resource holds a service value that no reader sees.
fn otel_input(file: usize) -> (RecordBatch, Vec<(Option<String>, i64, String)>) {
    use arrow_array::StructArray;
    use arrow_buffer::NullBuffer;
    let mut rng = SplitMix64::new(0x07e1 + file as u64);
    let nanos_start = HOUR_START_MS * 1_000_000;
    let mut services = Vec::new();
    let mut valid = Vec::new();
    let mut rows = Vec::new();
    for r in 0..ROWS {
        let service = (rng.below(5) > 0).then(|| format!("svc-{}", rng.below(3)));
        let resource_valid = rng.below(6) > 0;
        let time = nanos_start + rng.below(3_600_000_000_000) as i64;
        let message = format!("file {file} row {r}");
        // What a reader sees: null wherever the resource is.
        let seen = service.clone().filter(|_| resource_valid);
        rows.push((seen, time, message));
        // Under a null resource, a value no reader sees.
        services.push(match resource_valid {
            true => service,
            false => Some("hidden".to_string()),
        });
        valid.push(resource_valid);
    }
    let service_field = Arc::new(Field::new("service.name", DataType::Utf8, true));
    let resource = StructArray::new(
        vec![Arc::clone(&service_field)].into(),
        vec![Arc::new(StringArray::from(services)) as ArrayRef],
        Some(NullBuffer::from(valid)),
    );
    let schema = Schema::new(vec![
        Field::new("time_unix_nano", DataType::Int64, false),
        Field::new("resource", resource.data_type().clone(), true),
        Field::new("body", DataType::Utf8, false),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(resource),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.2.clone()),
            )),
        ],
    )
    .expect("columns match");
    (batch, rows)
}

#[test]
fn a_key_column_inside_a_struct_sorts_as_its_readers_see_it() {
    let inputs: Vec<_> = (0..FILES).map(otel_input).collect();
    let batches: Vec<RecordBatch> = inputs.iter().map(|(b, _)| b.clone()).collect();
    let mut expected: Vec<(Option<String>, i64, String)> =
        inputs.iter().flat_map(|(_, rows)| rows.clone()).collect();
    expected.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let keys = KeyColumns::from_settings(
        None,
        Some("resource.service.name,time_unix_nano"),
        None,
        None,
    )
    .expect("keys");
    let (whole, reference) = compact(&keys, &batches, None, 64 << 20, 64);
    assert_eq!(whole[0].runs_spilled, 0);
    let (spilled, bytes) = compact(&keys, &batches, None, 48 << 10, 3);
    assert!(spilled[0].runs_spilled > 3, "{:?}", spilled[0]);
    assert!(reference == bytes, "the same bytes whatever the budget");

    let bytes = Bytes::from(reference);
    let reader = SerializedFileReader::new(bytes.clone()).expect("a Parquet file");
    let descr = reader.metadata().file_metadata().schema_descr();
    let declared: Vec<String> = (reader.metadata().row_group(0).sorting_columns())
        .expect("sorting_columns declared")
        .iter()
        .map(|c| descr.column(c.column_idx as usize).path().string())
        .collect();
    assert_eq!(declared, ["resource.service.name", "time_unix_nano"]);
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).expect("a reader");
    assert_eq!(
        builder
            .schema()
            .field_with_name("time_unix_nano")
            .expect("time")
            .data_type(),
        &DataType::Int64,
        "today's time column stays Int64 nanoseconds"
    );
    let mut rows = Vec::new();
    for batch in builder.build().expect("batches") {
        let batch = batch.expect("a batch");
        let resource = batch
            .column_by_name("resource")
            .expect("resource")
            .as_struct();
        let service = resource.column(0).as_string::<i32>();
        let time = (batch.column_by_name("time_unix_nano").expect("time"))
            .as_primitive::<arrow_array::types::Int64Type>();
        let body = batch
            .column_by_name("body")
            .expect("body")
            .as_string::<i32>();
        for i in 0..batch.num_rows() {
            let seen =
                (resource.is_valid(i) && service.is_valid(i)).then(|| service.value(i).to_string());
            rows.push((seen, time.value(i), body.value(i).to_string()));
        }
    }
    assert_eq!(rows.len(), expected.len());
    let first_difference = rows.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(
        first_difference.map(|i| (i, &rows[i], &expected[i])),
        None,
        "every row once, by the service readers see, then time"
    );
}

#[test]
fn a_fanned_out_hour_keeps_every_row_once_under_any_key() {
    use ourios_compaction::options::FanOut;
    use ourios_compaction::report::Status;
    use ourios_compaction::testing::{compact_expecting, get_bytes};
    let inputs: Vec<(RecordBatch, Vec<Row>)> = (0..FILES).map(|f| input(f, 5)).collect();
    // A binary then the time splits into key ranges by the runs' statistics; three columns
    // without the time are merged whole.
    for (sort_key, time_column, split) in [
        ("trace_id,ts", None, true),
        ("host,status,trace_id", Some("ts"), false),
    ] {
        let keys =
            KeyColumns::from_settings(time_column, Some(sort_key), None, None).expect("keys");
        let columns: Vec<&str> = sort_key.split(',').collect();
        let mut expected: Vec<Row> = inputs.iter().flat_map(|(_, rows)| rows.clone()).collect();
        expected.sort_by_key(|r| key_of(r, &columns));
        let rows = multi_thread_runtime(2).block_on(async {
            let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
            let layout = KeyLayout::from_template(LAYOUT).expect("the layout");
            let partition = PartitionId::parse_of(None, "2026-11-29T10").expect("partition");
            let dir = layout.ingest_dir(&partition);
            for (i, (batch, _)) in inputs.iter().enumerate() {
                let key = format!("{dir}/batch-{i:04}.parquet");
                put_bytes(&store, &key, parquet_bytes(std::slice::from_ref(batch), 64)).await;
            }
            let scratch = tempfile::tempdir().expect("scratch");
            let mut options = CompactOptions::new(scratch.path());
            options.keys = keys.clone();
            options.settings.budget_bytes = 256 << 10;
            options.settings.row_group_bytes = Some(16 << 10);
            options.settings.fan_out = FanOut::Ranges(3);
            options.settings.workers = 2;
            options.attempt_id = Some("job".into());
            let report =
                compact_expecting(&store, &layout, &partition, &options, Status::Compacted).await;
            assert!(report.fan_out.is_some(), "{sort_key}: {report:?}");
            assert_eq!(
                report.outputs.len() > 1,
                split,
                "{sort_key}: {:?}",
                report.outputs
            );
            let mut rows = Vec::new();
            for output in &report.outputs {
                let bytes = get_bytes(&store, &output.key).await;
                rows.extend(read_output(&bytes).0);
            }
            rows
        });
        // The outputs in key order hold every row once, in key order.
        assert_eq!(rows.len(), expected.len(), "{sort_key}");
        assert!(
            rows.windows(2)
                .all(|w| key_of(&w[0], &columns) <= key_of(&w[1], &columns)),
            "{sort_key}: the ranges are sorted and disjoint"
        );
        let (mut rows, mut expected) = (rows, expected);
        rows.sort();
        expected.sort();
        assert!(rows == expected, "{sort_key}: every row once");
    }
}

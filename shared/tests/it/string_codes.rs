//! Repetitive string columns travel through the sort as codes (`StringCoder`); the output
//! must not show it: byte-identical to a sort without codes, whatever the string encodings
//! of the inputs, the budget (no spill, spill, hierarchical merge), columns that stop being
//! coded midway (values that do not repeat, a dictionary cap reached) and earlier compacted
//! files joining the merge as strings.

use std::sync::Arc;

use arrow_array::builder::{MapBuilder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int64Array, LargeStringArray, RecordBatch, StringArray,
    StringViewArray,
};
use object_store::memory::InMemory;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::CompactionReport;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    compact_to_bytes, multi_thread_runtime, parquet_bytes, put_bytes, random_stream,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const ROWS: usize = 2500;
const SERVICES: [&str; 4] = ["auth", "cart", "checkout", "search"];
const HOSTS: [&str; 5] = ["host-a", "host-b", "host-c", "host-d", "host-e"];
const LEVELS: [&str; 3] = ["INFO", "WARN", "ERROR"];

/// One ingest file: a different string encoding per file for the repetitive columns, a
/// body that never repeats, a user column and attribute values that gain 40 values per
/// file (frozen by the dictionary cap partway under a small budget).
fn ingest_file(partition: &PartitionId, file: usize) -> RecordBatch {
    let (start, _) = partition.time_range_nanos();
    let mut next = random_stream(0x5eed_0000 + file as u64);
    let mut pick = |n: usize| next() as usize % n;
    let rows: Vec<(usize, i64, usize, usize, usize)> = (0..ROWS)
        .map(|_| {
            let service = pick(SERVICES.len() + 1);
            let time = start + (pick(300) as i64) * 1_000_000_000;
            (
                service,
                time,
                pick(HOSTS.len() + 1),
                pick(LEVELS.len()),
                pick(40),
            )
        })
        .collect();
    let service: ArrayRef = Arc::new(StringArray::from_iter(
        rows.iter().map(|r| SERVICES.get(r.0).copied()),
    ));
    let time: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
    let hosts = rows.iter().map(|r| HOSTS.get(r.2).copied());
    let host: ArrayRef = match file % 3 {
        0 => Arc::new(hosts.collect::<DictionaryArray<Int32Type>>()),
        1 => Arc::new(LargeStringArray::from_iter(hosts)),
        _ => Arc::new(StringViewArray::from_iter(hosts)),
    };
    let level: ArrayRef = Arc::new(StringArray::from_iter_values(
        rows.iter().map(|r| LEVELS[r.3]),
    ));
    let user: ArrayRef = Arc::new(StringArray::from_iter_values(
        rows.iter().map(|r| format!("user-{:04}", file * 40 + r.4)),
    ));
    let body: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| format!("request {file}-{i} served")),
    ));
    let mut attributes = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for (i, r) in rows.iter().enumerate() {
        if i % 9 == 0 {
            attributes.append(false).expect("null map");
            continue;
        }
        attributes.keys().append_value("component");
        attributes.values().append_value(["dfs", "ipc", "rpc"][r.3]);
        attributes.keys().append_value("pid");
        attributes
            .values()
            .append_value(format!("{}", file * 40 + r.4));
        if i % 3 == 0 {
            attributes.keys().append_value("event_id");
            attributes.values().append_null();
        }
        attributes.append(true).expect("map");
    }
    let attributes: ArrayRef = Arc::new(attributes.finish());
    let mut columns = vec![
        ("time_unix_nano", time),
        ("service.name", service),
        ("host.name", host),
        ("body", body),
        ("user", user),
    ];
    // The level column is missing from every fourth file, the attributes from every fifth.
    if file % 4 != 3 {
        columns.insert(3, ("severity_text", level));
    }
    if file % 5 != 4 {
        columns.push(("attributes", attributes));
    }
    RecordBatch::try_from_iter(columns).expect("batch")
}

struct Setting {
    code_strings: bool,
    budget: u64,
    fan_in: usize,
}

/// Compacts `first` ingest files, then `second` more on top of the compacted file; returns
/// both reports and output files.
fn compact_twice(
    setting: &Setting,
    first: usize,
    second: usize,
) -> Vec<(CompactionReport, Vec<u8>)> {
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let layout = KeyLayout::default();
        let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
        let dir = layout.ingest_dir(&partition);
        let scratch = tempfile::tempdir().expect("scratch");
        let mut options = CompactOptions::new(scratch.path());
        options.settings.budget_bytes = setting.budget;
        options.merge_fan_in = setting.fan_in;
        options.settings.row_group_bytes = Some(64 << 10);
        options.code_strings = setting.code_strings;
        let mut outputs = Vec::new();
        for files in [0..first, first..first + second] {
            for f in files {
                let key = format!("{dir}/ingest-{f:04}.parquet");
                put_bytes(
                    &store,
                    &key,
                    parquet_bytes(&[ingest_file(&partition, f)], 700),
                )
                .await;
            }
            outputs.push(compact_to_bytes(&store, &layout, &partition, &options).await);
        }
        outputs
    })
}

fn column_values(file: &[u8], name: &str) -> Vec<Option<String>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(file))
        .expect("output opens")
        .build()
        .expect("reader");
    let mut values = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch");
        let column = batch.column_by_name(name).expect("column");
        let strings = arrow_cast::cast(column, &arrow_schema::DataType::Utf8).expect("cast");
        let strings = strings
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("strings");
        values.extend(strings.iter().map(|s| s.map(str::to_string)));
    }
    values
}

#[test]
fn coded_sorts_write_the_same_bytes_as_uncoded_ones() {
    let reference = compact_twice(
        &Setting {
            code_strings: false,
            budget: 64 << 20,
            fan_in: 64,
        },
        9,
        4,
    );
    let settings = [
        // Everything in memory: the sorted buffer is decoded on its way to the writer.
        Setting {
            code_strings: true,
            budget: 64 << 20,
            fan_in: 64,
        },
        // Spilled runs and hierarchical merges; a 2 KiB dictionary cap freezes the user
        // column partway, so runs of two schemas meet in the merge.
        Setting {
            code_strings: true,
            budget: 64 << 10,
            fan_in: 3,
        },
        Setting {
            code_strings: true,
            budget: 400 << 10,
            fan_in: 64,
        },
    ];
    for setting in &settings {
        let outputs = compact_twice(setting, 9, 4);
        for (round, ((report, bytes), (_, expected))) in outputs.iter().zip(&reference).enumerate()
        {
            assert!(
                bytes == expected,
                "budget {} fan-in {}, round {round}: output differs from the uncoded sort ({report:?})",
                setting.budget,
                setting.fan_in
            );
        }
        if setting.budget == 64 << 10 {
            let (first, _) = &outputs[0];
            assert!(
                first.runs_spilled > 3 && first.merge_passes > 1,
                "{first:?}"
            );
        }
    }

    // And the uncoded reference holds what the inputs held.
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let (_, output) = &reference[1];
    for column in ["host.name", "severity_text", "user", "body"] {
        let mut expected: Vec<Option<String>> = Vec::new();
        for f in 0..13 {
            let batch = ingest_file(&partition, f);
            let position = match batch.schema().index_of(column) {
                Ok(i) => i,
                Err(_) => {
                    expected.extend(std::iter::repeat_n(None, batch.num_rows()));
                    continue;
                }
            };
            let strings = arrow_cast::cast(batch.column(position), &arrow_schema::DataType::Utf8)
                .expect("cast");
            let strings = strings
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("strings");
            expected.extend(strings.iter().map(|s| s.map(str::to_string)));
        }
        let mut got = column_values(output, column);
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "column {column}");
    }
}

//! The output file: row groups at the threshold, `sorting_columns`
//! on every row group, statistics and a bloom filter on the service column; the time-only
//! fallback; the schema union; late files merged with the existing compacted file; reruns.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, DictionaryArray, Int32Array, Int64Array, LargeStringArray, ListArray,
    StringArray, StringViewArray, StructArray, TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field};
use bytes::Bytes;
use object_store::memory::InMemory;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    get_bytes, live_set, named_batch, parquet_bytes, put_bytes, read_parquet, rows_batch,
};
use parquet::file::reader::{FileReader, SerializedFileReader};

struct Fixture {
    store: Store,
    layout: KeyLayout,
    partition: PartitionId,
    scratch: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Self {
            store: Store::from_object_store(Arc::new(InMemory::new()), "memory://"),
            layout: KeyLayout::default(),
            partition: PartitionId::parse("acme", "2026-11-29T10").expect("partition"),
            scratch: tempfile::tempdir().expect("scratch"),
        }
    }

    fn start(&self) -> i64 {
        self.partition.time_range_nanos().0
    }

    async fn put(&self, name: &str, bytes: Bytes) {
        let key = format!("{}/{name}", self.layout.ingest_dir(&self.partition));
        put_bytes(&self.store, &key, bytes).await;
    }

    async fn compact(&self, row_group_bytes: Option<u64>) -> CompactionReport {
        self.compact_in_blocks(row_group_bytes, 1, None).await
    }

    async fn compact_in_blocks(
        &self,
        row_group_bytes: Option<u64>,
        blocks: usize,
        max_rows: Option<u64>,
    ) -> CompactionReport {
        let mut options = CompactOptions::new(self.scratch.path());
        options.settings.row_group_bytes = row_group_bytes;
        options.settings.row_groups_per_block = blocks;
        options.settings.max_rows_per_row_group = max_rows;
        let report = compact_partition(&self.store, &self.layout, &self.partition, &options)
            .await
            .expect("compaction");
        assert!(report.status.is_success(), "{report:?}");
        report
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_groups_rotate_at_the_threshold_and_declare_the_sort() {
    let f = Fixture::new();
    let services = ["alpha", "bravo", "charlie", "delta"];
    for i in 0..4 {
        let rows: Vec<_> = (0..20_000)
            .map(|r| {
                let s = services[(r * 7 + i) % services.len()].to_string();
                (
                    Some(s),
                    f.start() + ((r * 7919) % 3_600_000) as i64 * 1_000_000,
                    r as i64,
                )
            })
            .collect();
        f.put(
            &format!("f{i}.parquet"),
            parquet_bytes(&[rows_batch(&rows)], 100_000),
        )
        .await;
    }
    let threshold = 128 << 10;
    let report = f.compact(Some(threshold)).await;
    assert_eq!(report.status, Status::Compacted);
    assert_eq!(report.row_group_bytes, threshold);
    let out = report.output.expect("output");
    let bytes = get_bytes(&f.store, &out.key).await;
    let reader = SerializedFileReader::new(bytes).expect("footer");
    let meta = reader.metadata();
    assert!(
        meta.num_row_groups() >= 4,
        "{} row groups",
        meta.num_row_groups()
    );
    assert_eq!(meta.num_row_groups() as u64, out.row_groups);
    let mut previous_max: Option<Vec<u8>> = None;
    for (i, rg) in meta.row_groups().iter().enumerate() {
        let sorting = rg
            .sorting_columns()
            .expect("sorting_columns on every row group");
        assert_eq!(sorting.len(), 2);
        assert_eq!(sorting[0].column_idx, 0, "service.name first");
        assert!(!sorting[0].descending && sorting[0].nulls_first);
        assert_eq!(sorting[1].column_idx, 1, "then time");
        // Rotation: the encoded size stays near the threshold (one 1,024-row chunk of slack).
        assert!(
            (rg.compressed_size() as u64) < threshold * 2,
            "row group {i} is {} bytes",
            rg.compressed_size()
        );
        let service = rg.column(0);
        assert!(
            service.bloom_filter_offset().is_some(),
            "bloom filter on service.name"
        );
        for key_column in [rg.column(0), rg.column(1)] {
            assert!(
                key_column.column_index_offset().is_some(),
                "page index on the key columns"
            );
            assert!(key_column.offset_index_offset().is_some());
        }
        let stats = service.statistics().expect("service statistics");
        let min = stats.min_bytes_opt().expect("min").to_vec();
        let max = stats.max_bytes_opt().expect("max").to_vec();
        if let Some(prev) = &previous_max {
            assert!(prev <= &min, "row groups are in service order");
        }
        previous_max = Some(max);
    }
}

/// A schema of more than 64 leaf columns closes its row groups at 8 MiB, whatever larger
/// threshold is asked for (each open chunk keeps a compressor, see `output_properties`), and
/// the report gives the threshold the writer used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_gives_the_threshold_a_wide_schema_is_written_at() {
    let f = Fixture::new();
    let rows = 200;
    let mut columns: Vec<(String, ArrayRef)> = vec![
        (
            "service.name".into(),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|r| format!("s{}", r % 3)),
            )),
        ),
        (
            "time_unix_nano".into(),
            Arc::new(Int64Array::from_iter_values(
                (0..rows).map(|r| f.start() + r),
            )),
        ),
    ];
    for c in 0..70 {
        let values = Int64Array::from_iter_values((0..rows).map(|r| r * c));
        columns.push((format!("c{c:02}"), Arc::new(values)));
    }
    let named = columns
        .iter()
        .map(|(n, a)| (n.as_str(), Arc::clone(a)))
        .collect();
    f.put("wide.parquet", parquet_bytes(&[named_batch(named)], 1_000))
        .await;
    let report = f.compact(Some(32 << 20)).await;
    assert_eq!(report.status, Status::Compacted);
    assert_eq!(report.row_group_bytes, 8 << 20);

    let narrow = Fixture::new();
    let rows: Vec<_> = (0..200)
        .map(|r| (Some("s".into()), narrow.start() + r, r))
        .collect();
    narrow
        .put("narrow.parquet", parquet_bytes(&[rows_batch(&rows)], 1_000))
        .await;
    let report = narrow.compact(Some(32 << 20)).await;
    assert_eq!(report.row_group_bytes, 32 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_group_each_columns_chunks_and_keep_the_rows() {
    let plain = Fixture::new();
    let grouped = Fixture::new();
    let services = ["alpha", "bravo", "charlie", "delta"];
    for i in 0..3 {
        let rows: Vec<_> = (0..10_000)
            .map(|r| {
                let s = services[(r * 3 + i) % services.len()].to_string();
                (Some(s), plain.start() + r as i64 * 100_000_000, r as i64)
            })
            .collect();
        let bytes = parquet_bytes(&[rows_batch(&rows)], 4_000);
        plain.put(&format!("f{i}.parquet"), bytes.clone()).await;
        grouped.put(&format!("f{i}.parquet"), bytes).await;
    }
    let threshold = Some(32 << 10);
    let plain_out = plain.compact(threshold).await.output.expect("output");
    let report = grouped.compact_in_blocks(threshold, 4, None).await;
    let out = report.output.expect("output");
    assert_ne!(
        out.key, plain_out.key,
        "the layout is part of the output name"
    );
    assert_eq!(
        out.row_groups, plain_out.row_groups,
        "blocks move bytes, not boundaries"
    );
    assert_eq!(
        read_parquet(&grouped.store, &out.key).await,
        read_parquet(&plain.store, &plain_out.key).await
    );
    let meta = SerializedFileReader::new(get_bytes(&grouped.store, &out.key).await)
        .expect("footer")
        .metadata()
        .clone();
    let groups = meta.num_row_groups();
    assert!(
        groups > 4 && groups as u64 == out.row_groups,
        "{groups} row groups"
    );
    let mut position = 4;
    for block in (0..groups).collect::<Vec<_>>().chunks(4) {
        for column in 0..meta.file_metadata().schema_descr().num_columns() {
            for &rg in block {
                let (start, length) = meta.row_group(rg).column(column).byte_range();
                assert_eq!(start, position, "rg {rg} column {column}");
                position = start + length;
            }
        }
        for &rg in block {
            let first = meta.row_group(rg).column(0).byte_range().0;
            assert_eq!(meta.row_group(rg).file_offset(), Some(first as i64));
        }
    }
    let bloom = meta
        .row_group(0)
        .column(0)
        .bloom_filter_offset()
        .expect("bloom");
    assert_eq!(bloom as u64, position, "bloom filters after the last block");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_only_sort_when_no_input_has_a_service() {
    let f = Fixture::new();
    for (i, times) in [[5i64, 1, 9], [3, 3, 0]].iter().enumerate() {
        let b = named_batch(vec![
            (
                "time_unix_nano",
                Arc::new(UInt64Array::from_iter_values(
                    times.iter().map(|t| (f.start() + t) as u64),
                )),
            ),
            ("body", Arc::new(StringArray::from(vec!["x", "y", "z"]))),
        ]);
        f.put(&format!("f{i}.parquet"), parquet_bytes(&[b], 10))
            .await;
    }
    let out = f.compact(None).await.output.expect("output");
    let bytes = get_bytes(&f.store, &out.key).await;
    let reader = SerializedFileReader::new(bytes).expect("footer");
    let sorting = reader
        .metadata()
        .row_group(0)
        .sorting_columns()
        .expect("declared")
        .clone();
    assert_eq!(sorting.len(), 1, "time only");
    assert_eq!(sorting[0].column_idx, 0);
    let batches = read_parquet(&f.store, &out.key).await;
    // The output's time column has one type whatever the inputs used: Int64 nanoseconds.
    assert_eq!(
        batches[0].schema().field(0).data_type(),
        &DataType::Int64,
        "the documented time type"
    );
    let times: Vec<i64> = batches[0]
        .column(0)
        .as_primitive::<arrow_array::types::Int64Type>()
        .values()
        .to_vec();
    let offsets: Vec<i64> = times.iter().map(|t| *t - f.start()).collect();
    assert_eq!(offsets, [0, 1, 3, 3, 5, 9]);
    let bodies: Vec<&str> = batches[0]
        .column(1)
        .as_string::<i32>()
        .iter()
        .flatten()
        .collect();
    assert_eq!(
        bodies,
        ["z", "y", "x", "y", "x", "z"],
        "equal times keep input order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_union_across_encodings_and_evolution() {
    let f = Fixture::new();
    let s = f.start();
    let point = StructArray::from(vec![(
        Arc::new(Field::new("x", DataType::Int32, true)),
        Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef,
    )]);
    let a = named_batch(vec![
        (
            "time_unix_nano",
            Arc::new(Int64Array::from(vec![s + 2, s + 1])),
        ),
        (
            "service.name",
            Arc::new(StringViewArray::from(vec![Some("b"), None])),
        ),
        ("only_a", Arc::new(Int32Array::from(vec![10, 11]))),
        ("point", Arc::new(point)),
    ]);
    let dict: DictionaryArray<Int32Type> = vec!["a", "b"].into_iter().collect();
    let list = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![Some(vec![Some(1)]), None]);
    let b = named_batch(vec![
        ("service.name", Arc::new(dict)),
        (
            "time_unix_nano",
            Arc::new(TimestampNanosecondArray::from(vec![s + 3, s + 4]).with_timezone("UTC")),
        ),
        ("only_b", Arc::new(LargeStringArray::from(vec!["p", "q"]))),
        ("tags", Arc::new(list)),
    ]);
    f.put("a.parquet", parquet_bytes(&[a], 10)).await;
    f.put("b.parquet", parquet_bytes(&[b], 10)).await;
    let report = f.compact(None).await;
    assert_eq!(report.status, Status::Compacted, "{report:?}");
    let batches = read_parquet(&f.store, &report.output.expect("output").key).await;
    let out = &batches[0];
    let names: Vec<_> = out
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        [
            "time_unix_nano",
            "service.name",
            "only_a",
            "point",
            "only_b",
            "tags"
        ]
    );
    assert_eq!(
        out.schema().field(0).data_type(),
        &DataType::Int64,
        "mixed time types unify to Int64"
    );
    assert_eq!(out.schema().field(1).data_type(), &DataType::Utf8);
    let services: Vec<Option<&str>> = out.column(1).as_string::<i32>().iter().collect();
    assert_eq!(services, [None, Some("a"), Some("b"), Some("b")]);
    let only_a = out.column(2).as_primitive::<Int32Type>();
    assert_eq!(
        only_a.null_count(),
        2,
        "missing columns are null for that file's rows"
    );
    assert!(out.column(3).is_valid(0) && out.column(3).is_null(1));
    assert_eq!(out.column(5).null_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_files_merge_with_the_compacted_file_and_reruns_are_noops() {
    for blocks in [1, 4] {
        late_files_merge(blocks).await;
    }
}

/// A compacted file laid out `blocks` row groups per block is read back as a sorted run.
async fn late_files_merge(blocks: usize) {
    let f = Fixture::new();
    // Small row groups with blocks, so the compacted file read back as a run has several.
    let max_rows = (blocks > 1).then_some(60);
    let s = f.start();
    let first: Vec<_> = (0..500)
        .map(|r| (Some(format!("svc{}", r % 3)), s + r, r))
        .collect();
    f.put("a.parquet", parquet_bytes(&[rows_batch(&first)], 1000))
        .await;
    let one = f.compact_in_blocks(None, blocks, max_rows).await;
    assert_eq!(one.status, Status::Compacted);
    if blocks > 1 {
        assert!(one.output.as_ref().expect("output").row_groups > blocks as u64);
    }
    let first_out = one.output.expect("output").key;

    let again = f.compact_in_blocks(None, blocks, max_rows).await;
    assert_eq!(
        again.status,
        Status::Noop,
        "a rerun after a commit changes nothing"
    );

    let late: Vec<_> = (0..300)
        .map(|r| (Some(format!("svc{}", r % 4)), s + r * 2, 1000 + r))
        .collect();
    f.put("late.parquet", parquet_bytes(&[rows_batch(&late)], 1000))
        .await;
    let files = live_set(&f.store, &f.layout, &f.partition).await;
    assert_eq!(
        files.live.len(),
        2,
        "the late file is live next to the compacted one"
    );

    let two = f.compact_in_blocks(None, blocks, max_rows).await;
    assert_eq!(two.status, Status::Compacted);
    assert_eq!(two.inputs.files, 2);
    assert_eq!(two.inputs.rows, 800);
    let second_out = two.output.expect("output").key;
    assert_ne!(first_out, second_out);
    let files = live_set(&f.store, &f.layout, &f.partition).await;
    assert_eq!(files.live, vec![second_out.clone()]);

    let batches = read_parquet(&f.store, &second_out).await;
    let mut keys = Vec::new();
    for b in &batches {
        let svc = b
            .column_by_name("service.name")
            .expect("svc")
            .as_string::<i32>();
        let t = b
            .column_by_name("time_unix_nano")
            .expect("t")
            .as_primitive::<Int64Type>();
        let tag = b
            .column_by_name("tag")
            .expect("tag")
            .as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            keys.push((svc.value(i).to_string(), t.value(i), tag.value(i)));
        }
    }
    let mut expected = keys.clone();
    // Stable by key; the compacted file is the first input, so its rows win ties.
    expected.sort_by(|a, b| {
        (&a.0, a.1)
            .cmp(&(&b.0, b.1))
            .then((a.2 >= 1000).cmp(&(b.2 >= 1000)))
    });
    assert_eq!(keys.len(), 800);
    assert_eq!(keys, expected);
}

//! Bad inputs on the S3 test server: quarantined, left byte-for-byte in place through two
//! compactions and a zero-grace GC, and out of the live set, while the rest of the partition
//! compacts (invariant 7; the in-memory variant is `shared/tests/it/bad_inputs.rs`).

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use ourios_compaction::manifest::gc::collect_garbage;
use ourios_compaction::manifest::release_quarantined;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::report::Status;
use ourios_compaction::testing::{
    assert_quarantined_for, get_bytes, parquet_bytes, put_bytes, rows_batch,
};
use ourios_integration_tests::{
    assert_exactly_once, assert_live_exactly_once, compact_expecting, land_file, land_files,
    live_set, live_tags, open_s3, test_partition_on,
};

/// A one-row file with the test columns plus `extra` (name, type, value as a string).
fn with_extra_column(time: i64, extra: (&str, &str)) -> Bytes {
    let schema = Arc::new(Schema::new(vec![
        Field::new("service.name", DataType::Utf8, true),
        Field::new("time_unix_nano", DataType::Int64, false),
        Field::new(extra.0, DataType::Utf8, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec!["api"])),
        Arc::new(Int64Array::from(vec![time])),
        Arc::new(StringArray::from(vec![extra.1])),
    ];
    let batch = RecordBatch::try_new(schema, columns).expect("batch");
    parquet_bytes(&[batch], 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_files_survive_compaction_and_gc_on_s3() {
    let (store, layout, partition, dir) = test_partition_on(open_s3("quarantine"));
    let (start, end) = partition.time_range_nanos();
    let mut expected = land_files(&store, &layout, &partition, 2, 300).await;

    let good = parquet_bytes(&[rows_batch(&[(Some("a".into()), start + 1, 1)])], 10);
    let bad: Vec<(&str, Bytes, &str)> = vec![
        (
            "b1-garbage.parquet",
            Bytes::from_static(b"this is not parquet at all"),
            "not a readable Parquet",
        ),
        (
            "b2-truncated.parquet",
            good.slice(0..good.len() / 2),
            "not a readable Parquet",
        ),
        ("b3-empty.parquet", Bytes::new(), "empty"),
        (
            "b4-outside.parquet",
            parquet_bytes(&[rows_batch(&[(Some("a".into()), end, 5)])], 10),
            "outside the partition's hour",
        ),
        (
            "b5-tenant.parquet",
            with_extra_column(start + 2, ("tenant_id", "globex")),
            "tenant",
        ),
        (
            "z-conflict.parquet",
            with_extra_column(start + 3, ("tag", "not an integer")),
            "more of the partition's rows agree with",
        ),
    ];
    for (name, bytes, _) in &bad {
        put_bytes(&store, &format!("{dir}/{name}"), bytes.clone()).await;
    }
    let assert_untouched = |context: &'static str| {
        let store = store.clone();
        let dir = dir.clone();
        let bad = bad.clone();
        async move {
            for (name, bytes, _) in &bad {
                let got = get_bytes(&store, &format!("{dir}/{name}")).await;
                assert_eq!(&got, bytes, "{context}: {name} is left untouched");
            }
        }
    };

    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = Duration::ZERO;
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Partial).await;
    assert_eq!(report.inputs.files, 2);
    for (name, _, why) in &bad {
        let key = format!("{dir}/{name}");
        assert_quarantined_for(&report, &key, why);
    }
    assert_untouched("after the first compaction").await;

    // A late good file: the next compaction merges it with the compacted file and leaves
    // the quarantined files where they are.
    expected.extend(land_file(&store, &layout, &partition, "late.parquet", 90_000, 40).await);
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Compacted).await;
    assert_eq!(
        report.inputs.files, 2,
        "the compacted file and the late file"
    );
    assert_untouched("after the second compaction").await;

    collect_garbage(&store, &layout, &partition, Duration::ZERO, false)
        .await
        .expect("gc");
    assert_untouched("after GC").await;

    let good = "the good rows";
    let files = assert_live_exactly_once(&store, &layout, &partition, 1, &expected, good).await;
    assert_eq!(files.quarantined.len(), bad.len());
}

/// A file quarantined for more columns than a small budget allows is merged once released to a
/// compactor with a larger one: the release is a create-only manifest write on S3 like any
/// commit, the file is live from that version on, and every row is live exactly once after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_file_is_merged_by_a_larger_compactor_on_s3() {
    let (store, layout, partition, dir) = test_partition_on(open_s3("quarantine-release"));
    let (start, _) = partition.time_range_nanos();
    let mut expected = land_files(&store, &layout, &partition, 2, 200).await;

    // 300 leaf columns: more than the 256 a 16 MiB budget allows, fewer than 64 MiB's 512.
    let wide_tag = 77_777;
    let mut columns: Vec<(String, ArrayRef)> = vec![
        (
            "service.name".into(),
            Arc::new(StringArray::from(vec!["api"])),
        ),
        (
            "time_unix_nano".into(),
            Arc::new(Int64Array::from(vec![start + 3])),
        ),
        ("tag".into(), Arc::new(Int64Array::from(vec![wide_tag]))),
    ];
    for c in 0..297 {
        columns.push((format!("attr_{c:03}"), Arc::new(Int64Array::from(vec![c]))));
    }
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(name, array.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, array)| array).collect();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("batch");
    let wide = format!("{dir}/w-wide.parquet");
    put_bytes(&store, &wide, parquet_bytes(&[batch], 10)).await;

    let scratch = tempfile::tempdir().expect("scratch");
    let mut small = CompactOptions::new(scratch.path());
    small.settings.budget_bytes = 16 << 20;
    let report = compact_expecting(&store, &layout, &partition, &small, Status::Partial).await;
    assert_eq!(report.quarantined[0].file, wide);
    assert!(
        report.quarantined[0]
            .reason
            .contains("memory budget allows"),
        "{}",
        report.quarantined[0].reason
    );

    let released = release_quarantined(&store, &layout, &partition, &[], 0)
        .await
        .expect("releases");
    assert_eq!(released.released.len(), 1);
    assert_eq!(released.released[0].key, wide);
    assert_eq!(released.manifest_version, report.manifest_version + 1);
    let files = live_set(&store, &layout, &partition).await;
    assert!(
        files.live.iter().any(|k| *k == wide) && files.quarantined.is_empty(),
        "{files:?}"
    );

    let larger = CompactOptions::new(scratch.path());
    compact_expecting(&store, &layout, &partition, &larger, Status::Compacted).await;
    expected.insert(wide_tag);
    assert_exactly_once(
        &live_tags(&store, &layout, &partition).await,
        &expected,
        "the released file's row with the others",
    );
}

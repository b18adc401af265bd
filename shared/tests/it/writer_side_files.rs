//! Writer side files are not data (the README's storage layout): a Spark-style partition's `_SUCCESS`, `.crc`,
//! `_committed_*`, `_started_*` and `_temporary/` objects are never compacted, quarantined,
//! retired, deleted or read, and never make a job `partial`, through compaction, the live
//! set, queries and garbage collection, run twice.

use std::time::Duration;

use arrow_array::RecordBatch;
use bytes::Bytes;
use object_store::ObjectStoreExt;
use ourios_compaction::manifest::gc::{GcScope, collect_garbage_in};
use ourios_compaction::options::{CompactOptions, KeyColumns};
use ourios_compaction::read::query::{WindowQuery, query_window};
use ourios_compaction::report::Status;
use ourios_compaction::testing::{
    compact_expecting, get_bytes, live_set, memory_test_partition, parquet_bytes, put_bytes,
    rows_batch,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spark_partition_compacts_and_its_side_files_stay_untouched() {
    let (store, layout, partition, dir) = memory_test_partition();
    let (start, _) = partition.time_range_nanos();
    let rows = |first: i64| -> Vec<_> {
        (first..first + 50)
            .map(|t| (Some(format!("svc{}", t % 3)), start + t * 1_000, t))
            .collect()
    };
    put_bytes(
        &store,
        &format!("{dir}/part-0000.snappy.parquet"),
        parquet_bytes(&[rows_batch(&rows(0))], 100),
    )
    .await;
    put_bytes(
        &store,
        &format!("{dir}/part-0001.snappy.parquet"),
        parquet_bytes(&[rows_batch(&rows(50))], 100),
    )
    .await;
    // Side files: a valid Parquet file of an unfinished task attempt (its rows must never
    // become live), checksums that are not Parquet, and empty markers.
    let attempt = parquet_bytes(&[rows_batch(&rows(1_000))], 100);
    let side: Vec<(String, Bytes)> = vec![
        (format!("{dir}/_SUCCESS"), Bytes::new()),
        (
            format!("{dir}/part-0000.snappy.parquet.crc"),
            Bytes::from_static(b"crc\0\0\0\x02"),
        ),
        (
            format!("{dir}/.part-0000.snappy.parquet.crc"),
            Bytes::from_static(b"crc\0\0\0\x02"),
        ),
        (format!("{dir}/.part-0001.crc"), Bytes::from_static(b"crc")),
        (
            format!("{dir}/_temporary/0/_temporary/attempt_1/part-0002.snappy.parquet"),
            attempt,
        ),
        (format!("{dir}/_committed_123"), Bytes::from_static(b"{}")),
        (format!("{dir}/_started_123"), Bytes::new()),
    ];
    for (key, bytes) in &side {
        put_bytes(&store, key, bytes.clone()).await;
    }

    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = Duration::ZERO;
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Compacted).await;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    assert_eq!((report.inputs.files, report.inputs.rows), (2, 100));

    let files = live_set(&store, &layout, &partition).await;
    assert_eq!(files.live.len(), 1, "{:?}", files.live);
    assert!(files.live[0].starts_with("compacted/"), "{:?}", files.live);
    assert!(files.quarantined.is_empty(), "{:?}", files.quarantined);

    let query = WindowQuery {
        tenant: Some("acme".into()),
        service: None,
        from_nanos: start,
        to_nanos: start + 3_600_000_000_000,
        limit: usize::MAX,
        filters: Vec::new(),
    };
    let result = query_window(&store, &layout, &KeyColumns::default(), &query)
        .await
        .expect("query");
    let matched: usize = result.rows.iter().map(RecordBatch::num_rows).sum();
    assert_eq!((result.stats.rows_matched, matched), (100, 100));

    // GC with no grace, then a second compaction (a noop) and GC again.
    for _ in 0..2 {
        collect_garbage_in(
            &store,
            &layout,
            &GcScope {
                tenant: None,
                hour: None,
            },
            Duration::ZERO,
            false,
        )
        .await
        .expect("gc");
        compact_expecting(&store, &layout, &partition, &options, Status::Noop).await;
    }
    for (key, bytes) in &side {
        assert_eq!(
            &get_bytes(&store, key).await,
            bytes,
            "{key} is left byte for byte"
        );
    }
    for input in ["part-0000.snappy.parquet", "part-0001.snappy.parquet"] {
        let key = format!("{dir}/{input}");
        assert!(
            store
                .object_store()
                .head(&object_store::path::Path::from(key.as_str()))
                .await
                .is_err(),
            "the retired input {key} is deleted after the grace"
        );
    }
}

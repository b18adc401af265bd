//! The window query: it returns exactly a full scan's rows (property test, on uncompacted and
//! compacted partitions), and on a compacted hour a one-service window scans at most
//! `ceil(B_sw / T) + 2` row groups (the layout's acceptance bound), a bound an unsorted file breaks,
//! in the plain layout and with row groups grouped in blocks.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_cast::cast;
use arrow_schema::DataType;
use object_store::memory::InMemory;
use object_store::path::Path;
use ourios_compaction::bench::baseline::rewrite_plain;
use ourios_compaction::bench::generate::{GenerateSpec, generate_partition, service_names};
use ourios_compaction::compact::compact_partition;
use ourios_compaction::options::{CompactOptions, KeyColumns};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::read::prune::{WindowPredicate, count_row_groups};
use ourios_compaction::read::query::{WindowQuery, query_window};
use ourios_compaction::read::scan::scan_columns;
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{get_bytes, live_set, read_parquet};
use parquet::file::reader::{FileReader, SerializedFileReader};

const MINUTE: i64 = 60_000_000_000;

/// An in-memory store holding one generated hour of `files` files of `rows` rows.
async fn generated_in_memory(
    files: usize,
    rows: usize,
    services: usize,
    seed: u64,
) -> (Store, KeyLayout, PartitionId) {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let layout = KeyLayout::default();
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let spec = GenerateSpec {
        files,
        rows_per_file: rows,
        services,
        seed,
        wide: false,
    };
    generate_partition(&store, &layout, &partition, &spec)
        .await
        .expect("generate");
    (store, layout, partition)
}

/// (service, time, body) of every row, sorted: a layout-independent identity of a row set.
/// Compacts the partition with default options and a scratch directory of its own.
async fn compact_with_defaults(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
) -> ourios_compaction::report::CompactionReport {
    let scratch = tempfile::tempdir().expect("scratch");
    compact_partition(
        store,
        layout,
        partition,
        &CompactOptions::new(scratch.path()),
    )
    .await
    .expect("compact")
}

fn identities(batches: &[RecordBatch]) -> Vec<(Option<String>, i64, String)> {
    let mut out = Vec::new();
    for b in batches {
        let s = cast(
            b.column_by_name("service.name").expect("service"),
            &DataType::Utf8,
        )
        .expect("utf8");
        let s = s.as_string::<i32>();
        let t = cast(
            b.column_by_name("time_unix_nano").expect("time"),
            &DataType::Int64,
        )
        .expect("i64");
        let t = t.as_primitive::<Int64Type>();
        let body = b.column_by_name("body").expect("body").as_string::<i32>();
        for i in 0..b.num_rows() {
            out.push((
                s.is_valid(i).then(|| s.value(i).to_string()),
                t.value(i),
                body.value(i).to_string(),
            ));
        }
    }
    out.sort();
    out
}

async fn brute_force(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    q: &WindowQuery,
) -> Vec<(Option<String>, i64, String)> {
    let mut all = Vec::new();
    for key in live_set(store, layout, partition).await.live {
        all.extend(read_parquet(store, &key).await);
    }
    identities(&all)
        .into_iter()
        .filter(|(s, t, _)| {
            (q.from_nanos..q.to_nanos).contains(t)
                && q.service.as_ref().is_none_or(|w| s.as_ref() == Some(w))
        })
        .collect()
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_equals_a_full_scan_before_and_after_compaction() {
    let (store, layout, partition) = generated_in_memory(8, 3000, 12, 5).await;
    let services = service_names(12);
    let (start, _) = partition.time_range_nanos();
    let mut rng = Lcg(42);
    for round in 0..2 {
        for _ in 0..12 {
            let from = start + rng.next(70) as i64 * MINUTE - 5 * MINUTE;
            let to = from + (1 + rng.next(40) as i64) * MINUTE;
            let service = match rng.next(4) {
                0 => None,
                1 => Some("no-such-service".to_string()),
                _ => Some(services[rng.next(services.len() as u64) as usize].clone()),
            };
            let q = WindowQuery {
                tenant: Some("acme".into()),
                service,
                from_nanos: from,
                to_nanos: to,
                limit: usize::MAX,
                filters: Vec::new(),
            };
            let result = query_window(&store, &layout, &KeyColumns::default(), &q)
                .await
                .expect("query");
            let expected = brute_force(&store, &layout, &partition, &q).await;
            assert_eq!(result.stats.rows_matched as usize, expected.len(), "{q:?}");
            assert_eq!(identities(&result.rows), expected, "round {round}: {q:?}");
            assert_eq!(
                result.stats.row_groups_scanned + result.stats.row_groups_pruned,
                result.stats.row_groups_total
            );
            let limited = query_window(
                &store,
                &layout,
                &KeyColumns::default(),
                &WindowQuery {
                    limit: 7,
                    filters: Vec::new(),
                    ..q.clone()
                },
            )
            .await
            .expect("query");
            let rows: usize = limited.rows.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(rows, expected.len().min(7));
            assert_eq!(limited.stats.rows_matched as usize, expected.len());
        }
        if round == 0 {
            let report = compact_with_defaults(&store, &layout, &partition).await;
            assert!(report.output.is_some());
        }
    }
}

/// Uncompressed bytes of the rows matching `predicate` in a file, apportioned per row group.
fn service_window_bytes(
    bytes: &bytes::Bytes,
    batches_per_rg: &[Vec<RecordBatch>],
    predicate: &WindowPredicate,
) -> f64 {
    let reader = SerializedFileReader::new(bytes.clone()).expect("footer");
    let mut total = 0.0;
    for (i, rg) in reader.metadata().row_groups().iter().enumerate() {
        let matched = identities(&batches_per_rg[i])
            .iter()
            .filter(|(s, t, _)| {
                (predicate.from_nanos..predicate.to_nanos).contains(t)
                    && s.as_deref() == predicate.service.as_deref()
            })
            .count();
        total += rg.total_byte_size() as f64 * matched as f64 / rg.num_rows() as f64;
    }
    total
}

fn row_group_batches(bytes: &bytes::Bytes) -> Vec<Vec<RecordBatch>> {
    let reader = SerializedFileReader::new(bytes.clone()).expect("footer");
    (0..reader.metadata().num_row_groups())
        .map(|rg| {
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
                .expect("open")
                .with_row_groups(vec![rg])
                .build()
                .expect("reader")
                .collect::<Result<Vec<_>, _>>()
                .expect("decode")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0036_2_one_service_window_scans_at_most_the_bound() {
    // One hour generated once, copied for each layout.
    let source = tempfile::tempdir().expect("source dir");
    let store = Store::open(&source.path().to_string_lossy()).expect("local store");
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let spec = GenerateSpec {
        files: 20,
        rows_per_file: 20_000,
        services: 40,
        seed: 9,
        wide: false,
    };
    generate_partition(&store, &KeyLayout::default(), &partition, &spec)
        .await
        .expect("generate");
    // The block layout also takes late files: live beside the output until merged, then
    // merged into it, after which the bound holds again.
    for (blocks, late) in [(1, false), (4, true)] {
        assert_rfc0036_2_bound(source.path(), blocks, late).await;
    }
}

/// `service`'s window of `minutes` minutes from minute `from_min` of the hour starting at
/// `start` (Unix nanoseconds).
fn minutes_of(service: &str, start: i64, from_min: i64, minutes: i64) -> WindowPredicate {
    WindowPredicate {
        service: Some(service.to_string()),
        from_nanos: start + from_min * MINUTE,
        to_nanos: start + (from_min + minutes) * MINUTE,
    }
}

/// The query of the acme hour's `predicate`.
fn window(predicate: &WindowPredicate) -> WindowQuery {
    WindowQuery {
        tenant: Some("acme".into()),
        service: predicate.service.clone(),
        from_nanos: predicate.from_nanos,
        to_nanos: predicate.to_nanos,
        limit: 0,
        filters: Vec::new(),
    }
}

/// Copies the directory tree `from` into `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("a directory");
    for entry in std::fs::read_dir(from).expect("a directory") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("a copy");
        }
    }
}

/// The bound on the hour generated in `source`, compacted with its row groups laid out
/// `blocks` per block; with `late`, then given late files, which a window may scan beside the
/// bound until a second compaction merges them.
async fn assert_rfc0036_2_bound(source: &std::path::Path, blocks: usize, late: bool) {
    let dir = tempfile::tempdir().expect("store dir");
    copy_tree(source, dir.path());
    let store = Store::open(&dir.path().to_string_lossy()).expect("local store");
    let layout = KeyLayout::default();
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    // An unsorted rewrite of the same rows with the same writer, for the negative control.
    options.settings.row_group_bytes = Some(1 << 20);
    options.settings.row_groups_per_block = blocks;
    let unsorted = Path::from("control/unsorted.parquet");
    rewrite_plain(&store, &layout, &partition, &options, &unsorted)
        .await
        .expect("rewrite");
    let mut report = compact_partition(&store, &layout, &partition, &options)
        .await
        .expect("compact");
    let (start, _) = partition.time_range_nanos();
    let services = service_names(40);
    let windows = [(20, 10), (5, 30), (0, 60)];
    if late {
        let first = report.output.clone().expect("output");
        let spec = GenerateSpec {
            files: 2,
            rows_per_file: 5_000,
            services: 40,
            seed: 10,
            wide: false,
        };
        let landed = generate_partition(&store, &layout, &partition, &spec)
            .await
            .expect("late files");
        let mut late_row_groups = 0;
        for key in &landed.keys {
            let bytes = get_bytes(&store, key).await;
            late_row_groups += SerializedFileReader::new(bytes)
                .expect("footer")
                .metadata()
                .num_row_groups() as u64;
        }
        // Live beside the output: the window may scan the late files' row groups too.
        let first_bytes = get_bytes(&store, &first.key).await;
        let first_rgs = row_group_batches(&first_bytes);
        for (from_min, minutes) in windows {
            let predicate = minutes_of(&services[10], start, from_min, minutes);
            let result = query_window(&store, &layout, &KeyColumns::default(), &window(&predicate))
                .await
                .expect("query");
            let b_sw = service_window_bytes(&first_bytes, &first_rgs, &predicate);
            let bound = (b_sw / report.row_group_bytes as f64).ceil() as u64 + 2;
            assert!(
                result.stats.row_groups_scanned <= bound + late_row_groups,
                "late files live: scanned {} > bound {bound} + {late_row_groups} late row groups",
                result.stats.row_groups_scanned
            );
        }
        report = compact_partition(&store, &layout, &partition, &options)
            .await
            .expect("the late files merged");
        assert_eq!(report.status, Status::Compacted, "{report:?}");
    }
    let out = report.output.expect("output");
    let threshold = report.row_group_bytes as f64;
    assert!(
        out.row_groups >= 8,
        "enough row groups to prune: {}",
        out.row_groups
    );

    let sorted_bytes = get_bytes(&store, &out.key).await;
    let sorted_rgs = row_group_batches(&sorted_bytes);
    let unsorted_bytes = get_bytes(&store, unsorted.as_ref()).await;
    let unsorted_meta = SerializedFileReader::new(unsorted_bytes.clone()).expect("footer");
    let mut control_broke_the_bound = false;
    // The biggest service, a middle one and the tiniest, over windows of 10, 30 and 60 minutes.
    for service in [&services[0], &services[10], &services[39]] {
        for (from_min, minutes) in windows {
            let predicate = minutes_of(service, start, from_min, minutes);
            let result = query_window(&store, &layout, &KeyColumns::default(), &window(&predicate))
                .await
                .expect("query");
            let b_sw = service_window_bytes(&sorted_bytes, &sorted_rgs, &predicate);
            let bound = (b_sw / threshold).ceil() as u64 + 2;
            assert!(
                result.stats.row_groups_scanned <= bound,
                "blocks of {blocks}, {service} {minutes}min: scanned {} > bound {bound} (B_sw {b_sw:.0}, T {threshold})",
                result.stats.row_groups_scanned
            );
            let control =
                count_row_groups(unsorted_meta.metadata(), &KeyColumns::default(), &predicate);
            if control.row_groups_scanned as u64 > bound {
                control_broke_the_bound = true;
            }
        }
    }
    assert!(
        control_broke_the_bound,
        "the bound must catch an unsorted file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_scan_reads_every_row_of_the_columns_asked_for() {
    let (store, layout, partition) = generated_in_memory(4, 2500, 6, 9).await;
    let keys = KeyColumns::default();
    let two = [keys.time.clone(), keys.service.clone()];
    let before = scan_columns(&store, &layout, &partition, &two)
        .await
        .expect("scan");
    assert_eq!(before.rows, 10_000);
    assert_eq!(before.stats.files, 4);
    assert_eq!(
        before.stats.row_groups_scanned,
        before.stats.row_groups_total
    );
    // Reading one more column fetches more bytes.
    let wide = [two[0].clone(), two[1].clone(), "body".to_string()];
    let more = scan_columns(&store, &layout, &partition, &wide)
        .await
        .expect("scan");
    assert_eq!(more.rows, 10_000);
    assert!(more.stats.bytes_read > before.stats.bytes_read);

    compact_with_defaults(&store, &layout, &partition).await;
    let after = scan_columns(&store, &layout, &partition, &two)
        .await
        .expect("scan");
    assert_eq!(after.rows, 10_000);
    assert_eq!(after.stats.files, 1);
    assert!(after.stats.requests < before.stats.requests);
}

/// Uncompacted files whose time column is in microseconds (Spark, Polars) are filtered in
/// nanoseconds like every other file, before and after compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_over_microsecond_times_matches_in_nanoseconds() {
    use arrow_array::{StringArray, TimestampMicrosecondArray};
    use ourios_compaction::testing::{named_batch, parquet_bytes, put_bytes};

    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let layout = KeyLayout::default();
    let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
    let (start, _) = partition.time_range_nanos();
    // One row a minute, as microseconds.
    let micros: Vec<i64> = (0..60).map(|m| (start + m * MINUTE) / 1_000).collect();
    let batch = named_batch(vec![
        (
            "time_unix_nano",
            Arc::new(TimestampMicrosecondArray::from(micros).with_timezone("UTC")),
        ),
        ("service.name", Arc::new(StringArray::from(vec!["svc"; 60]))),
    ]);
    let key = format!("{}/spark-0.parquet", layout.ingest_dir(&partition));
    put_bytes(&store, &key, parquet_bytes(&[batch], 16)).await;

    let query = WindowQuery {
        tenant: Some("acme".into()),
        service: Some("svc".into()),
        from_nanos: start + 20 * MINUTE,
        to_nanos: start + 30 * MINUTE,
        limit: 100,
        filters: Vec::new(),
    };
    for stage in ["ingest", "compacted"] {
        if stage == "compacted" {
            compact_with_defaults(&store, &layout, &partition).await;
        }
        let result = query_window(&store, &layout, &KeyColumns::default(), &query)
            .await
            .expect("query");
        let rows: usize = result.rows.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(
            (result.stats.rows_matched, rows),
            (10, 10),
            "{stage}: minutes 20 to 29"
        );
    }
}

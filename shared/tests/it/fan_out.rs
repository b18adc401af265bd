//! Fan-out: a partition forced to fan out compacts into disjoint, ordered key ranges, each a
//! sorted file with `sorting_columns`, holding every row exactly once; the bytes do not depend
//! on how many tasks run at once; queries see what the unfanned layout gives; a rerun is a
//! `noop`; and a crash at any store operation of any task converges on rerun, GC sweeping the runs it
//! left.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use object_store::ObjectStore;
use object_store::memory::InMemory;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::compact::fan_out::estimate;
use ourios_compaction::manifest::partition_files;
use ourios_compaction::options::{CompactOptions, FanOut, KeyColumns};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::read::query::{WindowQuery, query_window};
use ourios_compaction::report::{CompactionReport, FanOutShape, Status};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    Fault, FaultyStore, Refusal, RefusingStore, TestRow, compact_expecting, get_bytes, live_set,
    multi_thread_runtime, parquet_bytes, put_bytes, read_parquet, rows_batch, test_partition,
    tied_key_files,
};

/// The keys left in the test partition's directory of sorted runs.
async fn runs_left(store: &Store) -> Vec<object_store::ObjectMeta> {
    let runs = format!("compacted/{}/runs", test_partition().relative_dir());
    store
        .list_sorted(&runs.as_str().into())
        .await
        .expect("listing")
}

/// The eight tie-heavy input files of these tests.
fn inputs(partition: &PartitionId) -> Vec<Vec<TestRow>> {
    tied_key_files(partition, 0x5eed_fa11_u64)
}

async fn ingest(store: &Store, layout: &KeyLayout, files: &[Vec<TestRow>], first: usize) {
    let dir = layout.ingest_dir(&test_partition());
    for (i, rows) in files.iter().enumerate() {
        let key = format!("{dir}/ingest-{:04}.parquet", first + i);
        put_bytes(store, &key, parquet_bytes(&[rows_batch(rows)], 700)).await;
    }
}

fn options(scratch: &std::path::Path, fan_out: FanOut, workers: usize) -> CompactOptions {
    let mut options = CompactOptions::new(scratch);
    options.settings.budget_bytes = 256 << 10;
    options.settings.row_group_bytes = Some(32 << 10);
    options.settings.fan_out = fan_out;
    options.settings.workers = workers;
    options.attempt_id = Some("job".into());
    options
}

/// (service, time, tag) of every row of a batch.
fn rows_of(batch: &RecordBatch) -> Vec<TestRow> {
    let services = batch.column_by_name("service.name").expect("service");
    let services = services.as_string::<i32>();
    let times = batch.column_by_name("time_unix_nano").expect("time");
    let tags = batch.column_by_name("tag").expect("tag");
    (0..batch.num_rows())
        .map(|i| {
            (
                services.is_valid(i).then(|| services.value(i).to_string()),
                times.as_primitive::<Int64Type>().value(i),
                tags.as_primitive::<Int64Type>().value(i),
            )
        })
        .collect()
}

fn key_of(row: &TestRow) -> (Option<&[u8]>, i64) {
    (row.0.as_deref().map(str::as_bytes), row.1)
}

/// Compacts the test partition (default layout) and requires `status`.
async fn compact_test_partition(
    store: &Store,
    options: &CompactOptions,
    status: Status,
) -> CompactionReport {
    compact_expecting(
        store,
        &KeyLayout::default(),
        &test_partition(),
        options,
        status,
    )
    .await
}

/// Compacts the eight files in a fresh in-memory store; returns the report, each output's
/// bytes and the store.
fn compact_fresh(fan_out: FanOut, workers: usize) -> (CompactionReport, Vec<Vec<u8>>, Store) {
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let layout = KeyLayout::default();
        ingest(&store, &layout, &inputs(&test_partition()), 0).await;
        let scratch = tempfile::tempdir().expect("scratch");
        let options = options(scratch.path(), fan_out, workers);
        let report = compact_test_partition(&store, &options, Status::Compacted).await;
        let mut bytes = Vec::new();
        for output in &report.outputs {
            bytes.push(get_bytes(&store, &output.key).await.to_vec());
        }
        (report, bytes, store)
    })
}

#[test]
fn fanned_out_ranges_are_disjoint_sorted_and_identical_for_any_workers() {
    let (report, bytes, store) = compact_fresh(FanOut::Ranges(4), 1);
    assert_eq!(
        report.fan_out,
        Some(FanOutShape {
            groups: 4,
            ranges: 4
        })
    );
    assert!(
        (2..=4).contains(&report.outputs.len()),
        "four ranges of about equal bytes give several outputs: {:?}",
        report.outputs
    );
    assert_eq!(report.output, None, "several outputs: no single `output`");
    let keys: Vec<&str> = report.outputs.iter().map(|o| o.key.as_str()).collect();
    let mut sorted_keys = keys.clone();
    sorted_keys.sort();
    assert_eq!(keys, sorted_keys, "outputs are reported in key order");

    let (plain, _, plain_store) = compact_fresh(FanOut::Off, 1);
    assert_eq!(plain.fan_out, None);
    multi_thread_runtime(2).block_on(async {
        // Every row exactly once; each output sorted; the ranges disjoint and in order.
        let mut all: Vec<TestRow> = Vec::new();
        let mut previous_last: Option<TestRow> = None;
        for output in &report.outputs {
            let rows: Vec<TestRow> = read_parquet(&store, &output.key)
                .await
                .iter()
                .flat_map(rows_of)
                .collect();
            assert_eq!(rows.len() as u64, output.rows, "{}", output.key);
            assert!(!rows.is_empty(), "no empty output: {}", output.key);
            assert!(
                rows.windows(2).all(|w| key_of(&w[0]) <= key_of(&w[1])),
                "{} is sorted by (service, time)",
                output.key
            );
            if let Some(last) = &previous_last {
                assert!(
                    key_of(last) < key_of(&rows[0]),
                    "ranges are disjoint and ordered: {last:?} then {:?}",
                    rows[0]
                );
            }
            previous_last = rows.last().cloned();
            all.extend(rows);
            let metadata = parquet::file::serialized_reader::SerializedFileReader::new(
                get_bytes(&store, &output.key).await,
            )
            .map(|r| parquet::file::reader::FileReader::metadata(&r).clone())
            .expect("output footer");
            for rg in metadata.row_groups() {
                assert!(
                    rg.sorting_columns().is_some_and(|c| c.len() == 2),
                    "{} declares its sort order",
                    output.key
                );
            }
        }
        let mut tags: Vec<i64> = all.iter().map(|r| r.2).collect();
        tags.sort_unstable();
        let mut expected: Vec<i64> = inputs(&test_partition())
            .iter()
            .flatten()
            .map(|r| r.2)
            .collect();
        expected.sort_unstable();
        assert_eq!(tags, expected, "every row exactly once");

        // The runs are gone once merged, and the live set is the outputs.
        let left = runs_left(&store).await;
        assert!(left.is_empty(), "runs deleted after the merge: {left:?}");
        let files = partition_files(&store, &KeyLayout::default(), &test_partition())
            .await
            .expect("files");
        assert_eq!(
            files.live,
            keys.iter().map(|k| k.to_string()).collect::<Vec<_>>()
        );

        // The same partition unfanned gives the same rows in the same order, and the same
        // query answers.
        let plain_rows: Vec<TestRow> = read_parquet(&plain_store, &plain.outputs[0].key)
            .await
            .iter()
            .flat_map(rows_of)
            .collect();
        assert_eq!(
            all, plain_rows,
            "the ranges in order are the unfanned output"
        );
        let (start, _) = test_partition().time_range_nanos();
        for service in [Some("cart"), Some("ads"), None] {
            let query = WindowQuery {
                tenant: Some("acme".into()),
                service: service.map(str::to_string),
                from_nanos: start + 40_000_000_000,
                to_nanos: start + 120_000_000_000,
                limit: usize::MAX,
                filters: Vec::new(),
            };
            let keys = KeyColumns::default();
            let fanned = query_window(&store, &KeyLayout::default(), &keys, &query)
                .await
                .expect("query");
            let unfanned = query_window(&plain_store, &KeyLayout::default(), &keys, &query)
                .await
                .expect("query");
            assert_eq!(fanned.stats.rows_matched, unfanned.stats.rows_matched);
            let tags = |result: &ourios_compaction::read::query::QueryResult| {
                let mut tags: Vec<i64> =
                    result.rows.iter().flat_map(rows_of).map(|r| r.2).collect();
                tags.sort_unstable();
                tags
            };
            assert_eq!(tags(&fanned), tags(&unfanned), "query for {service:?}");
            assert!(fanned.stats.rows_matched > 0);
        }
    });

    // Four workers write the same bytes.
    let (four, four_bytes, _) = compact_fresh(FanOut::Ranges(4), 4);
    assert_eq!(four.outputs, report.outputs, "same names, sizes and rows");
    assert!(
        four_bytes == bytes,
        "four workers write byte-identical outputs"
    );
}

#[test]
fn fanned_out_outputs_are_final_and_later_files_merge_with_them() {
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let layout = KeyLayout::default();
        let files = inputs(&test_partition());
        ingest(&store, &layout, &files[..6], 0).await;
        let scratch = tempfile::tempdir().expect("scratch");
        let fanned = options(scratch.path(), FanOut::Ranges(3), 2);
        let first = compact_test_partition(&store, &fanned, Status::Compacted).await;
        assert!(first.outputs.len() > 1, "{:?}", first.outputs);

        // The ranges of one job are final: a rerun changes nothing.
        let mut rerun_options = fanned.clone();
        rerun_options.attempt_id = Some("rerun".into());
        compact_test_partition(&store, &rerun_options, Status::Noop).await;

        // Later files merge with the ranges (read as presorted runs) into one output.
        ingest(&store, &layout, &files[6..], 6).await;
        let mut plain = options(scratch.path(), FanOut::Off, 1);
        plain.attempt_id = Some("later".into());
        let second = compact_test_partition(&store, &plain, Status::Compacted).await;
        assert_eq!(second.outputs.len(), 1);
        assert_eq!(second.inputs.files, first.outputs.len() as u64 + 2);
        let live = live_set(&store, &layout, &test_partition()).await.live;
        assert_eq!(live, [second.outputs[0].key.clone()]);
        let rows: Vec<TestRow> = read_parquet(&store, &live[0])
            .await
            .iter()
            .flat_map(rows_of)
            .collect();
        assert_eq!(rows.len(), 8 * 3000, "every row exactly once");
        assert!(rows.windows(2).all(|w| key_of(&w[0]) <= key_of(&w[1])));
    });
}

#[test]
fn auto_fans_out_a_job_larger_than_the_scratch_limit() {
    multi_thread_runtime(2).block_on(async {
        let root = tempfile::tempdir().expect("store");
        let store = Store::open(root.path().to_str().expect("utf-8 path")).expect("store");
        let layout = KeyLayout::default();
        ingest(&store, &layout, &inputs(&test_partition()), 0).await;
        let listed = store
            .list_sorted(&layout.ingest_dir(&test_partition()))
            .await
            .expect("listing");
        let input_bytes: u64 = listed.iter().map(|m| m.size).sum();
        let scratch = tempfile::tempdir().expect("scratch");

        let mut roomy = options(scratch.path(), FanOut::Auto, 1);
        roomy.settings.scratch_limit_bytes = Some(input_bytes * 4);
        let mut tight = roomy.clone();
        tight.settings.scratch_limit_bytes = Some(input_bytes);
        // Within the limit: one task, one output.
        let plain_store = tempfile::tempdir().expect("store");
        let plain = Store::open(plain_store.path().to_str().expect("utf-8")).expect("store");
        ingest(&plain, &layout, &inputs(&test_partition()), 0).await;
        let one = compact_partition(&plain, &layout, &test_partition(), &roomy)
            .await
            .expect("runs");
        assert_eq!(
            (one.status, one.fan_out, one.outputs.len()),
            (Status::Compacted, None, 1)
        );

        // The pages' uncompressed size does not fit a limit of the encoded size: the job fans
        // out, read in place from the local store (`scratch_fit` checks the count of tasks).
        let report = compact_test_partition(&store, &tight, Status::Compacted).await;
        let shape = report.fan_out.expect("fanned out");
        assert!(shape.ranges >= 2 && shape.groups >= 2, "{shape:?}");
        let rows: u64 = report.outputs.iter().map(|o| o.rows).sum();
        assert_eq!(rows, 8 * 3000);
        assert_eq!(report.inputs.rows, 8 * 3000);
    });
}

/// A crash at any store operation of the fanned-out job (a run, the split, a merge, the
/// commit, the cleanup) leaves a state a rerun converges from: every row exactly once.
#[test]
fn a_crash_in_any_task_converges_on_rerun() {
    let runtime = multi_thread_runtime(2);
    let files = inputs(&test_partition());
    let expected: BTreeMap<i64, usize> = files.iter().flatten().map(|r| (r.2, 1)).collect();
    let run = |fault: Option<Fault>| {
        runtime.block_on(async {
            let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            let clean = Store::from_object_store(Arc::clone(&memory), "memory://");
            let layout = KeyLayout::default();
            ingest(&clean, &layout, &files[..4], 0).await;
            let faulty = Arc::new(FaultyStore::new(Arc::clone(&memory), fault));
            let store = Store::from_object_store(faulty.clone(), "faulty");
            let scratch = tempfile::tempdir().expect("scratch");
            let mut crashing = options(scratch.path(), FanOut::Ranges(3), 1);
            crashing.parallel_downloads = 1;
            crashing.attempt_id = Some("crashing".into());
            let _ = compact_partition(&store, &layout, &test_partition(), &crashing).await;
            let ops = faulty.num_ops();
            let mut rerun = options(scratch.path(), FanOut::Ranges(3), 1);
            rerun.attempt_id = Some("rerun".into());
            // No grace: the rerun's GC sweeps what the crash left (runs, outputs) at once.
            rerun.settings.gc_grace = std::time::Duration::ZERO;
            let report = compact_partition(&clean, &layout, &test_partition(), &rerun)
                .await
                .expect("the rerun runs");
            assert!(
                matches!(report.status, Status::Compacted | Status::Noop),
                "{fault:?}: {report:?}"
            );
            let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
            for key in live_set(&clean, &layout, &test_partition()).await.live {
                for batch in read_parquet(&clean, &key).await {
                    for row in rows_of(&batch) {
                        *seen.entry(row.2).or_default() += 1;
                    }
                }
            }
            let left = runs_left(&clean).await;
            assert!(left.is_empty(), "{fault:?}: runs left behind: {left:?}");
            (ops, seen)
        })
    };
    let (ops, seen) = run(None);
    let first_four: BTreeMap<i64, usize> = expected
        .iter()
        .filter(|(tag, _)| **tag < 40_000)
        .map(|(t, n)| (*t, *n))
        .collect();
    assert_eq!(seen, first_four);
    assert!(
        ops > 20,
        "a fanned-out job makes many store operations: {ops}"
    );
    // Crash points spread over the whole job.
    let step = (ops / 16).max(1);
    for at in (1..=ops).step_by(step as usize) {
        let (_, seen) = run(Some(Fault::Crash(at)));
        assert_eq!(seen, first_four, "crash at operation {at} of {ops}");
    }
}

/// Compacts the test partition fanned out into two ranges, on two workers.
async fn compact_in_two_ranges(store: &Store, layout: &KeyLayout) -> CompactionReport {
    let scratch = tempfile::tempdir().expect("scratch");
    compact_partition(
        store,
        layout,
        &test_partition(),
        &options(scratch.path(), FanOut::Ranges(2), 2),
    )
    .await
    .expect("runs")
}

/// A fresh in-memory store holding the first two of the test files; also returns every test
/// file's rows and the partition's ingest directory.
async fn two_files_ingested() -> (Store, KeyLayout, Vec<Vec<TestRow>>, String) {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let layout = KeyLayout::default();
    let files = inputs(&test_partition());
    ingest(&store, &layout, &files[..2], 0).await;
    let dir = layout.ingest_dir(&test_partition()).to_string();
    (store, layout, files, dir)
}

/// [`two_files_ingested`], compacted in two ranges; also returns that job's report.
async fn two_files_in_two_ranges() -> (
    Store,
    KeyLayout,
    Vec<Vec<TestRow>>,
    String,
    CompactionReport,
) {
    let (store, layout, files, dir) = two_files_ingested().await;
    let first = compact_in_two_ranges(&store, &layout).await;
    assert_eq!(first.status, Status::Compacted, "{first:?}");
    assert_eq!(first.outputs.len(), 2);
    (store, layout, files, dir, first)
}

/// The rows of every output of `report`, in output order.
async fn output_rows(store: &Store, report: &CompactionReport) -> Vec<TestRow> {
    let mut rows = Vec::new();
    for output in &report.outputs {
        rows.extend(
            read_parquet(store, &output.key)
                .await
                .iter()
                .flat_map(rows_of),
        );
    }
    rows
}

/// A group whose inputs have no service column sorts into a run by time alone; its rows (a null
/// service) still merge into the ranges of the (service, time) order.
#[test]
fn a_group_without_services_merges_into_the_ranges() {
    use arrow_array::{ArrayRef, Int64Array};
    use ourios_compaction::testing::named_batch;
    multi_thread_runtime(2).block_on(async {
        let (store, layout, files, dir) = two_files_ingested().await;
        for (i, rows) in files[2..4].iter().enumerate() {
            let times: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
            let tags: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2)));
            let batch = named_batch(vec![("time_unix_nano", times), ("tag", tags)]);
            let key = format!("{dir}/no-service-{i}.parquet");
            put_bytes(&store, &key, parquet_bytes(&[batch], 700)).await;
        }
        let report = compact_in_two_ranges(&store, &layout).await;
        assert_eq!(report.status, Status::Compacted, "{:?}", report.error);
        assert_eq!(report.fan_out.map(|f| f.groups), Some(2));
        let rows = output_rows(&store, &report).await;
        assert_eq!(rows.len(), 4 * 3000, "every row exactly once");
        assert!(rows.windows(2).all(|w| key_of(&w[0]) <= key_of(&w[1])));
        assert!(rows.iter().filter(|r| r.0.is_none()).count() >= 2 * 3000);
    });
}

/// Each group sees only its own inputs, so groups of different columns could each stay within
/// the budget's leaf limit and together pass it. The plan admits the partition's inputs into one
/// union as an unfanned job does: the file that would widen it past the limit is quarantined
/// with the unfanned job's reason, and the other is compacted.
#[test]
fn a_file_that_widens_the_union_past_the_leaf_limit_is_quarantined_by_the_plan() {
    use arrow_array::{ArrayRef, Int64Array};
    use ourios_compaction::testing::named_batch;
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let layout = KeyLayout::default();
        let dir = layout.ingest_dir(&test_partition());
        let (start, _) = test_partition().time_range_nanos();
        // At the tests' 256 KiB budget the union may hold 256 leaves: each file has 151.
        for (i, prefix) in ["a", "b"].into_iter().enumerate() {
            let mut columns: Vec<(String, ArrayRef)> = vec![(
                "time_unix_nano".into(),
                Arc::new(Int64Array::from_iter_values((0..50).map(|r| start + r))),
            )];
            for c in 0..150 {
                columns.push((
                    format!("{prefix}{c}"),
                    Arc::new(Int64Array::from_iter_values((0..50).map(|r| r * c))),
                ));
            }
            let columns = columns
                .iter()
                .map(|(n, a)| (n.as_str(), Arc::clone(a)))
                .collect();
            let key = format!("{dir}/wide-{i}.parquet");
            put_bytes(&store, &key, parquet_bytes(&[named_batch(columns)], 700)).await;
        }
        let report = compact_in_two_ranges(&store, &layout).await;
        assert_eq!(report.status, Status::Partial, "{:?}", report.error);
        assert_eq!(report.fan_out.map(|f| f.groups), Some(1), "one group left");
        assert_eq!(report.quarantined.len(), 1, "{:?}", report.quarantined);
        let refused = &report.quarantined[0];
        assert!(refused.file.ends_with("wide-1.parquet"), "{refused:?}");
        assert!(
            refused
                .reason
                .contains("more than the 256 the memory budget allows"),
            "{refused:?}"
        );
        let written: u64 = report.outputs.iter().map(|o| o.rows).sum();
        assert_eq!(written, 50);
        let files = live_set(&store, &layout, &test_partition()).await;
        assert_eq!(files.quarantined.len(), 1, "{:?}", files.quarantined);
        assert!(
            files.live.iter().all(|k| !k.contains("wide-")),
            "{:?}",
            files.live
        );
    });
}

/// Groups that disagree on a column's type would each sort a run of their own type, and the
/// runs would not unify. The plan decides the conflict for the whole partition (the type more
/// rows hold wins), so the file of the other type is quarantined, the rest is compacted into
/// ranges, and a file that is not Parquet is left to its group, whose check quarantines it.
#[test]
fn groups_that_disagree_on_a_type_compact_after_the_plan_quarantines_the_minority() {
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use ourios_compaction::testing::named_batch;
    multi_thread_runtime(2).block_on(async {
        let (store, layout, files, dir) = two_files_ingested().await;
        // Last in ordinal order, so in the second group with nothing to outweigh it there:
        // `tag` as text, in fewer rows than the two files of the first group.
        let rows = &files[2][..2000];
        let services: ArrayRef = Arc::new(StringArray::from(
            rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        ));
        let times: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)));
        let tags: ArrayRef = Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.2.to_string()),
        ));
        let batch = named_batch(vec![
            ("service.name", services),
            ("time_unix_nano", times),
            ("tag", tags),
        ]);
        put_bytes(
            &store,
            &format!("{dir}/text-tags.parquet"),
            parquet_bytes(&[batch], 700),
        )
        .await;
        put_bytes(
            &store,
            &format!("{dir}/not-parquet.parquet"),
            vec![7u8; 4096].into(),
        )
        .await;
        let report = compact_in_two_ranges(&store, &layout).await;
        assert_eq!(report.status, Status::Partial, "{:?}", report.error);
        let refused: Vec<(&str, &str)> = (report.quarantined.iter())
            .map(|q| (q.file.rsplit('/').next().unwrap_or(""), q.reason.as_str()))
            .collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!(refused[0].0, "not-parquet.parquet", "{refused:?}");
        assert!(refused[0].1.contains("PAR1"), "{refused:?}");
        assert_eq!(refused[1].0, "text-tags.parquet", "{refused:?}");
        assert!(refused[1].1.contains("tag"), "{refused:?}");
        let rows = output_rows(&store, &report).await;
        assert_eq!(
            rows.len(),
            2 * 3000,
            "every row of the two files exactly once"
        );
        assert!(rows.windows(2).all(|w| key_of(&w[0]) <= key_of(&w[1])));
    });
}

/// Files without rows arriving after a fanned-out job leave its ranges as they are: the next
/// job checks them alone and only quarantines or retires them, instead of fanning out to
/// rewrite every range; a late file with rows fans out and merges as before.
#[test]
fn late_files_without_rows_leave_the_ranges_as_they_are() {
    multi_thread_runtime(2).block_on(async {
        let (store, layout, files, dir, first) = two_files_in_two_ranges().await;
        let mut ranges = Vec::new();
        for output in &first.outputs {
            ranges.push((output.key.clone(), get_bytes(&store, &output.key).await));
        }

        let garbage = format!("{dir}/ingest-0100.parquet");
        put_bytes(&store, &garbage, bytes::Bytes::from_static(b"not parquet")).await;
        let no_rows = format!("{dir}/ingest-0101.parquet");
        put_bytes(&store, &no_rows, parquet_bytes(&[rows_batch(&[])], 10)).await;
        // The compactor function asks before handing a job to the state machine: nothing to
        // fan out.
        let scratch = tempfile::tempdir().expect("scratch");
        let forced = options(scratch.path(), FanOut::Ranges(2), 2);
        let part = test_partition();
        let shape_now = || estimate(&store, &layout, &part, &forced);
        assert_eq!(shape_now().await.expect("estimates"), None);
        // So the compactor runs the job in place, unfanned: it settles the late files without
        // reading the ranges (a store refusing them would fail a job that tried).
        let refusals = (ranges.iter())
            .map(|(key, _)| (key.to_string(), Refusal::Forbidden))
            .collect();
        let refusing = RefusingStore::new(Arc::clone(store.object_store()), refusals);
        let refusing = Store::from_object_store(Arc::new(refusing), "memory://");
        let in_place = options(scratch.path(), FanOut::Off, 1);
        let late = compact_partition(&refusing, &layout, &part, &in_place)
            .await
            .expect("runs");
        assert_eq!(late.status, Status::Partial, "{late:?}");
        assert!(
            late.outputs.is_empty() && late.fan_out.is_none(),
            "{late:?}"
        );
        assert_eq!((late.inputs.files, late.inputs.rows), (1, 0));
        assert_eq!(late.quarantined.len(), 1, "{:?}", late.quarantined);
        assert_eq!(late.quarantined[0].file, garbage);
        let files_now = live_set(&store, &layout, &test_partition()).await;
        let mut live = files_now.live.clone();
        live.sort();
        let mut kept: Vec<String> = ranges.iter().map(|(key, _)| key.to_string()).collect();
        kept.sort();
        assert_eq!(live, kept, "the ranges stay the live set");
        for (key, bytes) in &ranges {
            assert_eq!(&get_bytes(&store, key).await, bytes, "{key} is unchanged");
        }

        ingest(&store, &layout, &files[2..3], 2).await;
        assert!(shape_now().await.expect("estimates").is_some());
        let merged = compact_in_two_ranges(&store, &layout).await;
        assert_eq!(merged.status, Status::Compacted, "{merged:?}");
        assert!(merged.fan_out.is_some(), "{merged:?}");
        let mut rows = output_rows(&store, &merged).await;
        let mut expected: Vec<TestRow> = files[..3].concat();
        rows.sort();
        expected.sort();
        assert_eq!(rows, expected);
    });
}

/// Before a fan-out over earlier outputs, late files are checked smallest first, a batch of
/// downloads at a time, and the first with rows ends the check: the other late files are read
/// once, by their groups, not twice.
#[test]
fn the_check_before_a_fan_out_stops_at_the_first_late_file_with_rows() {
    multi_thread_runtime(2).block_on(async {
        let (store, layout, files, _, _) = two_files_in_two_ranges().await;
        ingest(&store, &layout, &files[2..8], 2).await;
        let counting = store.counting_requests();
        let scratch = tempfile::tempdir().expect("scratch");
        let mut forced = options(scratch.path(), FanOut::Ranges(2), 2);
        forced.parallel_downloads = 1;
        let shape = estimate(&counting, &layout, &test_partition(), &forced)
            .await
            .expect("estimates");
        assert!(shape.is_some(), "late files with rows fan out");
        let gets = counting.request_counts().get;
        assert!(gets < 6, "{gets} GETs for 6 late files and the manifest");
    });
}

/// A late file larger than the budget is not downloaded by the check before a fan-out (the
/// invocation that asks may have little scratch space): the job fans out as it did before the
/// check, and its group quarantines the file.
#[test]
fn a_late_file_beyond_the_budget_is_left_to_the_fan_out() {
    multi_thread_runtime(2).block_on(async {
        let (store, layout, _, dir, _) = two_files_in_two_ranges().await;
        let scratch = tempfile::tempdir().expect("scratch");
        let forced = options(scratch.path(), FanOut::Ranges(2), 2);
        let garbage = format!("{dir}/ingest-0200.parquet");
        let size = usize::try_from(forced.settings.budget_bytes).expect("fits") + 1;
        put_bytes(&store, &garbage, bytes::Bytes::from(vec![7u8; size])).await;
        let counting = store.counting_requests();
        let shape = estimate(&counting, &layout, &test_partition(), &forced)
            .await
            .expect("estimates");
        assert!(shape.is_some(), "left to the fan-out");
        let gets = counting.request_counts().get;
        assert_eq!(
            gets, 2,
            "the symlink manifest and the manifest alone are read"
        );

        let late = compact_in_two_ranges(&store, &layout).await;
        assert_eq!(late.status, Status::Partial, "{late:?}");
        assert!(late.fan_out.is_some(), "{late:?}");
        assert_eq!(late.quarantined[0].file, garbage);
    });
}

/// Every row of the live outputs in live-set order: sorted by (service, time) across the
/// outputs (disjoint ranges in key order), each output holding the rows it says.
async fn rows_in_order(store: &Store) -> Vec<TestRow> {
    let live = live_set(store, &KeyLayout::default(), &test_partition()).await;
    let mut all = Vec::new();
    for key in &live.live {
        let rows: Vec<TestRow> = read_parquet(store, key)
            .await
            .iter()
            .flat_map(rows_of)
            .collect();
        assert!(!rows.is_empty(), "no empty output: {key}");
        all.extend(rows);
    }
    assert!(
        all.windows(2).all(|w| key_of(&w[0]) <= key_of(&w[1])),
        "the outputs are disjoint key ranges in key order"
    );
    all
}

/// A late file into a fanned-out hour is merged into the ranges its keys fall in, and only
/// those: the other outputs stay as they are, the outputs stay disjoint key ranges in key
/// order, every row is live once, and the file costs the bytes of the ranges it touched. A
/// second late file, after the first merge, does the same.
#[test]
fn late_files_merge_into_only_the_ranges_their_keys_touch() {
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
        let layout = KeyLayout::default();
        let files = inputs(&test_partition());
        ingest(&store, &layout, &files, 0).await;
        let scratch = tempfile::tempdir().expect("scratch");
        let fanned = options(scratch.path(), FanOut::Ranges(4), 1);
        let first = compact_test_partition(&store, &fanned, Status::Compacted).await;
        assert!(first.outputs.len() >= 3, "{:?}", first.outputs);
        let hour_bytes: u64 = first.outputs.iter().map(|o| o.bytes).sum();

        let (start, _) = test_partition().time_range_nanos();
        let mut expected: Vec<i64> = files.iter().flatten().map(|r| r.2).collect();
        for (n, service) in ["ads", "search"].into_iter().enumerate() {
            let before = live_set(&store, &layout, &test_partition()).await.live;
            let late: Vec<TestRow> = (0..200)
                .map(|i| {
                    let time = start + (i % 150) * 1_000_000_000;
                    (
                        Some(service.to_string()),
                        time,
                        900_000 + n as i64 * 1000 + i,
                    )
                })
                .collect();
            expected.extend(late.iter().map(|r| r.2));
            ingest(&store, &layout, &[late], 100 + n).await;
            // While it waits, a one-service window also scans the late file's row groups.
            let query = WindowQuery {
                tenant: Some("acme".into()),
                service: Some(service.to_string()),
                from_nanos: start,
                to_nanos: start + 3_600_000_000_000,
                limit: usize::MAX,
                filters: Vec::new(),
            };
            let keys = KeyColumns::default();
            let waiting = query_window(&store, &layout, &keys, &query)
                .await
                .expect("query");
            let mut later = options(scratch.path(), FanOut::Ranges(4), 1);
            later.attempt_id = Some(format!("late{n}"));
            let merged = compact_test_partition(&store, &later, Status::Compacted).await;
            let after_merge = query_window(&store, &layout, &keys, &query)
                .await
                .expect("query");
            assert_eq!(after_merge.stats.rows_matched, waiting.stats.rows_matched);
            assert!(
                after_merge.stats.row_groups_scanned < waiting.stats.row_groups_scanned,
                "merged, the late file's row groups are gone: {:?} then {:?}",
                waiting.stats,
                after_merge.stats
            );

            let touched = merged.outputs.len();
            assert!(
                touched >= 1 && touched < before.len(),
                "{service}: {:?}",
                merged.outputs
            );
            assert_eq!(merged.fan_out.map(|f| f.ranges), Some(touched));
            assert_eq!(
                merged.inputs.files,
                touched as u64 + 1,
                "its ranges and the late file"
            );
            let written: u64 = merged.outputs.iter().map(|o| o.bytes).sum();
            assert!(
                written < hour_bytes,
                "{service}: {written} bytes of the hour's {hour_bytes}"
            );

            let after = live_set(&store, &layout, &test_partition()).await.live;
            assert_eq!(after.len(), before.len(), "one output per range still");
            let kept = before.iter().filter(|k| after.contains(k)).count();
            assert_eq!(kept, before.len() - touched, "the untouched outputs stay");
            let mut tags: Vec<i64> = rows_in_order(&store).await.iter().map(|r| r.2).collect();
            tags.sort_unstable();
            let mut want = expected.clone();
            want.sort_unstable();
            assert_eq!(tags, want, "every row exactly once");
        }
        // Nothing is left of the late files' runs.
        let left = runs_left(&store).await;
        assert!(
            left.iter()
                .all(|m| !m.location.as_ref().ends_with(".parquet")),
            "{left:?}"
        );
    });
}

//! Every kind of bad input is quarantined: left byte-for-byte in place, recorded with a reason
//! naming the file, excluded from the live set, while the rest of the partition compacts
//! and the result says `partial` (invariant 7).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, StringArray, UInt64Array};
use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use ourios_compaction::ErrorKind;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::release_quarantined;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    Refusal, RefusingStore, assert_quarantined_for, compact_expecting, get_bytes, live_set,
    memory_test_partition, named_batch, parquet_bytes, put_bytes, read_parquet, rows_batch,
    test_partition,
};
use parquet::file::metadata::{ParquetMetaDataReader, ParquetMetaDataWriter};

/// The test partition on `memory`, read through a store that refuses `refusals` (object names
/// and how they are refused): that store, the layout, the partition, its ingest directory and
/// the start of its hour.
fn refusing_partition(
    memory: Arc<InMemory>,
    refusals: Vec<(String, Refusal)>,
) -> (Store, KeyLayout, PartitionId, Path, i64) {
    let refusing = RefusingStore::new(memory, refusals);
    let store = Store::from_object_store(Arc::new(refusing), "memory://");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let dir = layout.ingest_dir(&partition);
    let (start, _) = partition.time_range_nanos();
    (store, layout, partition, dir, start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_kind_is_quarantined_untouched() {
    let (store, layout, partition, dir) = memory_test_partition();
    let (start, end) = partition.time_range_nanos();

    let good_rows = vec![
        (Some("b".to_string()), start + 5, 1),
        (Some("a".to_string()), start + 9, 2),
    ];
    let good = parquet_bytes(&[rows_batch(&good_rows)], 100);
    let valid = good.clone();
    let truncated = valid.slice(0..valid.len() / 2);
    let empty_rows = parquet_bytes(&[rows_batch(&[])], 100);
    let no_time = parquet_bytes(
        &[named_batch(vec![(
            "service.name",
            Arc::new(StringArray::from(vec!["a"])),
        )])],
        10,
    );
    let conflicting = parquet_bytes(
        &[named_batch(vec![
            (
                "time_unix_nano",
                Arc::new(Int64Array::from(vec![start + 1])),
            ),
            ("tag", Arc::new(StringArray::from(vec!["not an integer"]))),
        ])],
        10,
    );
    let outside = parquet_bytes(
        &[rows_batch(&[
            (Some("a".into()), start + 1, 3),
            (Some("a".into()), end, 4),
        ])],
        10,
    );
    let wrong_tenant = parquet_bytes(
        &[named_batch(vec![
            (
                "time_unix_nano",
                Arc::new(UInt64Array::from(vec![start as u64 + 1])),
            ),
            ("tenant_id", Arc::new(StringArray::from(vec!["globex"]))),
        ])],
        10,
    );
    let bad: Vec<(&str, Bytes, &str)> = vec![
        (
            "b1-garbage.parquet",
            Bytes::from_static(b"this is not parquet at all"),
            "not a readable Parquet",
        ),
        ("b2-truncated.parquet", truncated, "not a readable Parquet"),
        ("b3-empty.parquet", Bytes::new(), "empty"),
        ("b5-no-time.parquet", no_time, "time column"),
        ("b6-conflict.parquet", conflicting, "in input"),
        (
            "b7-outside.parquet",
            outside,
            "outside the partition's hour",
        ),
        ("b8-tenant.parquet", wrong_tenant, "tenant"),
    ];
    put_bytes(&store, &format!("{dir}/a0-good.parquet"), good).await;
    // A valid file without rows is no bad input: it is consumed with the others.
    let no_rows_key = format!("{dir}/b4-no-rows.parquet");
    put_bytes(&store, &no_rows_key, empty_rows).await;
    for (name, bytes, _) in &bad {
        put_bytes(&store, &format!("{dir}/{name}"), bytes.clone()).await;
    }

    let scratch = tempfile::tempdir().expect("scratch");
    let options = CompactOptions::new(scratch.path());
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Partial).await;
    assert_eq!(
        report.inputs.files, 2,
        "the good file and the one without rows"
    );
    assert_eq!(report.inputs.rows, 2);
    assert_eq!(
        report.quarantined.len(),
        bad.len(),
        "{:#?}",
        report.quarantined
    );
    for (name, bytes, why) in &bad {
        let key = format!("{dir}/{name}");
        assert_quarantined_for(&report, &key, why);
        assert_eq!(
            &get_bytes(&store, &key).await,
            bytes,
            "{name} is left untouched"
        );
    }
    let out = report.output.expect("the good file compacts");
    let rows: usize = read_parquet(&store, &out.key)
        .await
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 2);

    let files = live_set(&store, &layout, &partition).await;
    assert_eq!(files.live, vec![out.key.clone()]);
    assert_eq!(files.quarantined.len(), bad.len());
    assert!(
        !files.quarantined.iter().any(|q| q.key == no_rows_key),
        "the file without rows is retired, not quarantined"
    );

    // A rerun changes nothing, and quarantined files survive it and garbage collection.
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = std::time::Duration::ZERO;
    compact_expecting(&store, &layout, &partition, &options, Status::Noop).await;
    for (name, bytes, _) in &bad {
        assert_eq!(&get_bytes(&store, &format!("{dir}/{name}")).await, bytes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_too_large_for_any_tasks_scratch_stay_live_and_are_reported() {
    let (store, layout, partition, dir) = memory_test_partition();
    let (start, _) = partition.time_range_nanos();
    for f in 0..4 {
        let rows: Vec<_> = (0..20_000)
            .map(|r| (Some(format!("svc-{}", r % 7)), start + r, r))
            .collect();
        put_bytes(
            &store,
            &format!("{dir}/f{f}.parquet"),
            parquet_bytes(&[rows_batch(&rows)], 50_000),
        )
        .await;
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    options.settings.budget_bytes = 64 << 10;
    options.settings.scratch_limit_bytes = Some(4 << 10);
    // Not quarantined: their rows are valid and stay readable where they are.
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Noop).await;
    assert!(report.quarantined.is_empty());
    let oversized: Vec<&str> = report.oversized.iter().map(|o| o.file.as_str()).collect();
    assert_eq!(oversized.len(), 4, "{oversized:?}");
    assert!(
        (report.oversized.iter())
            .all(|o| o.scratch_needed_bytes > o.scratch_bytes && o.scratch_bytes == 4 << 10),
        "{:?}",
        report.oversized
    );
    let files = live_set(&store, &layout, &partition).await;
    assert_eq!(files.live.len(), 4, "nothing was committed");
    assert_eq!(files.manifest_version, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_objects_are_quarantined_with_the_store_reason_and_vanished_ones_skipped() {
    let memory = Arc::new(InMemory::new());
    let (store, layout, partition, dir, start) = refusing_partition(
        memory.clone(),
        vec![
            ("k1-kms.parquet".into(), Refusal::Forbidden),
            ("v1-vanished.parquet".into(), Refusal::Vanished),
        ],
    );
    let file = |t| parquet_bytes(&[rows_batch(&[(Some("a".to_string()), start + t, 1)])], 10);
    for (name, t) in [
        ("a0-good.parquet", 1),
        ("k1-kms.parquet", 2),
        ("v1-vanished.parquet", 3),
    ] {
        put_bytes(&store, &format!("{dir}/{name}"), file(t)).await;
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let options = CompactOptions::new(scratch.path());
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Partial).await;
    assert_eq!(report.inputs.files, 1);
    assert_eq!(report.quarantined.len(), 1, "{:#?}", report.quarantined);
    let q = &report.quarantined[0];
    assert_eq!(q.file, format!("{dir}/k1-kms.parquet"));
    assert!(
        q.reason.contains("refused") && q.reason.contains("InvalidObjectState"),
        "{}",
        q.reason
    );
    // The vanished object is neither quarantined nor retired: were it listed again, it
    // would be compacted then.
    let files = live_set(&store, &layout, &partition).await;
    let vanished = format!("{dir}/v1-vanished.parquet");
    assert!(
        files.live.iter().any(|k| *k == vanished),
        "{:?}",
        files.live
    );

    // Every input refused: the function's access is at fault; nothing is quarantined.
    let partition = PartitionId::parse("acme", "2026-11-29T11").expect("partition");
    let dir = layout.ingest_dir(&partition);
    put_bytes(&store, &format!("{dir}/k1-kms.parquet"), file(1)).await;
    let report = compact_expecting(&store, &layout, &partition, &options, Status::Failed).await;
    assert!(report.quarantined.is_empty());
    // The function's access is at fault, not the request: a retry may succeed once it is granted.
    assert_eq!(report.error_kind, Some(ErrorKind::Transient), "{report:?}");
    let error = report.error.expect("an error");
    assert!(error.contains("refused to read every input"), "{error}");
}

/// An earlier compacted output is never quarantined, whatever stops a job from reading it
/// again: its rows are live only through it. Here it is wider than a smaller budget allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_output_a_smaller_budget_cannot_hold_fails_the_job_and_stays_live() {
    let (store, layout, partition, dir) = memory_test_partition();
    let (start, _) = partition.time_range_nanos();
    let mut columns: Vec<(String, arrow_array::ArrayRef)> = vec![(
        "time_unix_nano".into(),
        Arc::new(Int64Array::from_iter_values((0..20).map(|r| start + r))),
    )];
    for c in 0..300 {
        columns.push((
            format!("attr{c}"),
            Arc::new(Int64Array::from_iter_values((0..20).map(|r| c * 100 + r))),
        ));
    }
    let wide = arrow_array::RecordBatch::try_from_iter(columns).expect("a wide batch");
    put_bytes(
        &store,
        &format!("{dir}/wide.parquet"),
        parquet_bytes(&[wide], 100),
    )
    .await;
    let scratch = tempfile::tempdir().expect("scratch");
    let mut large = CompactOptions::new(scratch.path());
    large.settings.budget_bytes = 64 << 20;
    let first = compact_expecting(&store, &layout, &partition, &large, Status::Compacted).await;

    let late = vec![(Some("a".to_string()), start + 7, 1)];
    put_bytes(
        &store,
        &format!("{dir}/late.parquet"),
        parquet_bytes(&[rows_batch(&late)], 10),
    )
    .await;
    // At 8 MiB the union may hold 256 leaves; the compacted output has 301.
    let mut small = CompactOptions::new(scratch.path());
    small.settings.budget_bytes = 8 << 20;
    let second = compact_expecting(&store, &layout, &partition, &small, Status::Failed).await;
    assert!(second.quarantined.is_empty(), "{:?}", second.quarantined);
    let error = second.error.expect("an error");
    assert!(
        error.contains("cannot be compacted again") && error.contains("301 leaves"),
        "{error}"
    );
    let files = live_set(&store, &layout, &partition).await;
    assert!(files.quarantined.is_empty(), "{:?}", files.quarantined);
    assert_eq!(files.live.len(), 2, "{:?}", files.live);
    assert_eq!(files.manifest_version, first.manifest_version);

    // With the budget that wrote it, the partition compacts again, every row kept.
    let third = compact_expecting(&store, &layout, &partition, &large, Status::Compacted).await;
    assert_eq!(third.inputs.rows, 21);
}

/// Files arriving in a compacted partition that bring no row (bad, empty, or gone before they
/// are read) are recorded without rewriting its output: the output stays the same object,
/// byte for byte, and only a file with rows makes the next job merge again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_files_without_rows_leave_the_compacted_output_as_it_is() {
    let memory = Arc::new(InMemory::new());
    let (store, layout, partition, dir, start) = refusing_partition(
        memory,
        vec![("v9-vanished.parquet".into(), Refusal::Vanished)],
    );
    let file =
        |rows: &[ourios_compaction::testing::TestRow]| parquet_bytes(&[rows_batch(rows)], 10);
    let a = [(Some("b".to_string()), start + 5, 1), (None, start + 9, 2)];
    put_bytes(&store, &format!("{dir}/a0-good.parquet"), file(&a)).await;
    let scratch = tempfile::tempdir().expect("scratch");
    let options = CompactOptions::new(scratch.path());
    let compact = || compact_partition(&store, &layout, &partition, &options);
    let first = compact().await.expect("runs");
    assert_eq!(first.status, Status::Compacted, "{first:?}");
    let output = first.output.expect("an output").key;
    let output_bytes = get_bytes(&store, &output).await;
    let compacted_objects = || async {
        store
            .list_sorted(&layout.compacted_dir(&partition))
            .await
            .expect("lists")
            .len()
    };
    assert_eq!(compacted_objects().await, 1);

    // A file gone before it is read changes nothing, so no version is written.
    put_bytes(&store, &format!("{dir}/v9-vanished.parquet"), file(&a)).await;
    let vanished = compact().await.expect("runs");
    assert_eq!(vanished.status, Status::Noop, "{vanished:?}");
    assert_eq!(vanished.manifest_version, 1);

    // A bad file and a valid one without rows: quarantined and retired, the output kept.
    let garbage = format!("{dir}/b1-garbage.parquet");
    put_bytes(&store, &garbage, Bytes::from_static(b"not parquet")).await;
    let no_rows = format!("{dir}/b2-no-rows.parquet");
    put_bytes(&store, &no_rows, file(&[])).await;
    let late = compact().await.expect("runs");
    assert_eq!(late.status, Status::Partial, "{late:?}");
    assert!(late.output.is_none() && late.outputs.is_empty(), "{late:?}");
    assert_eq!(
        (late.inputs.files, late.inputs.rows),
        (1, 0),
        "the file without rows"
    );
    assert_eq!(late.quarantined.len(), 1, "{:?}", late.quarantined);
    assert_eq!(late.quarantined[0].file, garbage);
    assert_eq!(late.manifest_version, 2);
    let files = live_set(&store, &layout, &partition).await;
    let vanished_key = format!("{dir}/v9-vanished.parquet");
    assert_eq!(files.live, vec![output.to_string(), vanished_key]);
    assert_eq!(files.quarantined.len(), 1);
    assert_eq!(get_bytes(&store, &output).await, output_bytes);
    assert_eq!(compacted_objects().await, 1, "no output was written");
    assert_eq!(
        get_bytes(&store, &no_rows).await,
        file(&[]),
        "retired, kept"
    );

    // A late file with rows is merged with the output, as before.
    let c = [(Some("a".to_string()), start + 7, 3)];
    put_bytes(&store, &format!("{dir}/c0-late.parquet"), file(&c)).await;
    let merged = compact().await.expect("runs");
    assert_eq!(merged.status, Status::Compacted, "{merged:?}");
    assert_eq!(merged.inputs.rows, 3);
    let merged_output = merged.output.expect("an output").key;
    assert_ne!(merged_output, output);
    let rows: usize = read_parquet(&store, &merged_output)
        .await
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 3);
}

/// A file quarantined because the store refused it (a KMS key the function could not use)
/// comes back once released: it is live again, the next job merges its rows, and releasing a
/// file that is not quarantined is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_file_is_live_again_and_the_next_job_merges_it() {
    let memory = Arc::new(InMemory::new());
    let (refused, layout, partition, dir, start) = refusing_partition(
        memory.clone(),
        vec![("k1-kms.parquet".into(), Refusal::Forbidden)],
    );
    let file = |t| parquet_bytes(&[rows_batch(&[(Some("a".to_string()), start + t, t)])], 10);
    let kms = format!("{dir}/k1-kms.parquet");
    put_bytes(&refused, &format!("{dir}/a0-good.parquet"), file(1)).await;
    put_bytes(&refused, &kms, file(2)).await;
    let scratch = tempfile::tempdir().expect("scratch");
    let options = CompactOptions::new(scratch.path());
    let first = compact_expecting(&refused, &layout, &partition, &options, Status::Partial).await;
    assert_eq!(first.quarantined[0].file, kms);

    // The function may now use the key: the same objects, read without refusal.
    let fixed = Store::from_object_store(memory, "memory://");
    let not_quarantined = release_quarantined(
        &fixed,
        &layout,
        &partition,
        &[format!("{dir}/a0-good.parquet")],
        0,
    )
    .await
    .expect_err("a live file is not quarantined");
    assert!(
        not_quarantined.to_string().contains("a0-good.parquet"),
        "{not_quarantined}"
    );
    let released = release_quarantined(&fixed, &layout, &partition, std::slice::from_ref(&kms), 0)
        .await
        .expect("releases");
    assert_eq!(released.released.len(), 1);
    assert!(released.released[0].reason.contains("refused"));
    assert_eq!(released.manifest_version, 2);
    let files = live_set(&fixed, &layout, &partition).await;
    assert!(files.quarantined.is_empty(), "{:?}", files.quarantined);
    assert!(files.live.iter().any(|k| *k == kms), "{:?}", files.live);
    let again = release_quarantined(&fixed, &layout, &partition, &[], 0)
        .await
        .expect("nothing to release");
    assert!(again.released.is_empty());
    assert_eq!(again.manifest_version, 2, "no version written");

    let merged = compact_expecting(&fixed, &layout, &partition, &options, Status::Compacted).await;
    let output = merged.output.expect("an output").key;
    let rows: usize = read_parquet(&fixed, &output)
        .await
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 2, "the released file's row is merged");
    let files = live_set(&fixed, &layout, &partition).await;
    assert_eq!(files.live, vec![output]);
}

/// `bytes` (a Parquet file) with its footer rewritten so that row group `g` counts `rows(g)`
/// rows (and the file their sum), its chunks' declared values and its pages left as written.
fn with_footer_row_counts(bytes: &Bytes, rows: impl Fn(usize) -> i64) -> Bytes {
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(bytes)
        .expect("metadata");
    let tail = &bytes[bytes.len() - 8..bytes.len() - 4];
    let footer_bytes = u32::from_le_bytes(tail.try_into().expect("four bytes")) as usize;
    let row_groups = (metadata.row_groups().iter().enumerate())
        .map(|(g, rg)| {
            let builder = rg.clone().into_builder().set_num_rows(rows(g));
            builder.build().expect("row group")
        })
        .collect();
    let metadata = metadata.into_builder().set_row_groups(row_groups).build();
    let mut out = bytes[..bytes.len() - 8 - footer_bytes].to_vec();
    ParquetMetaDataWriter::new(&mut out, &metadata)
        .finish()
        .expect("footer");
    Bytes::from(out)
}

/// `count` rows from `first_tag` on, every service set (no null for a statistics check to
/// catch), in one row group.
fn file_of_rows(start: i64, first_tag: i64, count: i64) -> Bytes {
    let rows: Vec<_> = (first_tag..first_tag + count)
        .map(|tag| (Some(format!("svc-{}", tag % 7)), start + tag, tag))
        .collect();
    parquet_bytes(&[rows_batch(&rows)], rows.len().max(1))
}

/// Checks that `report` says `partial` and quarantined one file, `key`, for a row count that
/// disagrees with the 1,000 values its pages declare (`words`), the file left as `bytes`.
async fn assert_quarantined_alone(
    store: &Store,
    report: &CompactionReport,
    (key, bytes, words): (&str, &Bytes, &str),
) {
    assert_eq!(report.status, Status::Partial, "{report:?}");
    assert_eq!(report.quarantined.len(), 1, "{:?}", report.quarantined);
    assert_eq!(report.quarantined[0].file, key);
    let reason = &report.quarantined[0].reason;
    assert!(
        reason.contains(words) && reason.contains("declare 1000 values"),
        "{reason}"
    );
    assert_eq!(&get_bytes(store, key).await, bytes, "left untouched");
}

/// A file whose footer counts no row while its chunks and pages hold 1,000 is no empty file
/// (invariants 1 and 7): it is quarantined, left in place through garbage collection, while
/// the other inputs compact and a truly empty file is still consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_footer_counting_no_row_over_full_pages_is_quarantined_not_consumed() {
    let (store, layout, partition, dir, start) =
        refusing_partition(Arc::new(InMemory::new()), vec![]);
    for (name, first_tag) in [("a0-good.parquet", 0), ("a1-good.parquet", 500)] {
        let bytes = file_of_rows(start, first_tag, 500);
        put_bytes(&store, &format!("{dir}/{name}"), bytes).await;
    }
    let lying = format!("{dir}/lying-footer.parquet");
    let lying_bytes = with_footer_row_counts(&file_of_rows(start, 1_000, 1_000), |_| 0);
    put_bytes(&store, &lying, lying_bytes.clone()).await;
    let empty = format!("{dir}/no-rows.parquet");
    put_bytes(&store, &empty, parquet_bytes(&[rows_batch(&[])], 10)).await;

    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = CompactOptions::new(scratch.path());
    options.settings.gc_grace = std::time::Duration::ZERO;
    let report = compact_partition(&store, &layout, &partition, &options)
        .await
        .expect("runs");
    let quarantined = (lying.as_str(), &lying_bytes, "counts 0 rows");
    assert_quarantined_alone(&store, &report, quarantined).await;
    assert_eq!(
        (report.inputs.files, report.inputs.rows),
        (3, 1_000),
        "the good files and the empty one"
    );
    assert_eq!(report.gc_deleted, 3, "the good files and the empty one");

    let out = report.output.expect("the good files compact").key;
    let mut tags: Vec<i64> = (read_parquet(&store, &out).await.iter())
        .flat_map(|b| {
            let tags = b
                .column_by_name("tag")
                .expect("tag")
                .as_primitive::<Int64Type>();
            tags.values().to_vec()
        })
        .collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..1_000).collect::<Vec<_>>(), "every good row once");
    let files = live_set(&store, &layout, &partition).await;
    assert_eq!(files.live, vec![out]);
    let quarantined: Vec<&str> = files.quarantined.iter().map(|q| q.key.as_str()).collect();
    assert_eq!(quarantined, vec![lying.as_str()]);

    // A rerun and its garbage collection leave the file where it is.
    compact_expecting(&store, &layout, &partition, &options, Status::Noop).await;
    assert_eq!(get_bytes(&store, &lying).await, lying_bytes);
}

/// A footer that counts 500 rows over a row group whose pages hold 1,000 values a column is
/// refused from its page headers, before any page is decoded, with a reason naming the row
/// group and the column (invariants 1 and 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_footer_under_counting_its_pages_is_quarantined() {
    let (store, layout, partition, dir, start) =
        refusing_partition(Arc::new(InMemory::new()), vec![]);
    put_bytes(
        &store,
        &format!("{dir}/a0-good.parquet"),
        file_of_rows(start, 0, 500),
    )
    .await;
    let lying = format!("{dir}/under-counted.parquet");
    let lying_bytes = with_footer_row_counts(&file_of_rows(start, 500, 1_000), |_| 500);
    put_bytes(&store, &lying, lying_bytes.clone()).await;

    let scratch = tempfile::tempdir().expect("scratch");
    let report = compact_partition(
        &store,
        &layout,
        &partition,
        &CompactOptions::new(scratch.path()),
    )
    .await
    .expect("runs");
    let quarantined = (lying.as_str(), &lying_bytes, "counts 500 rows");
    assert_quarantined_alone(&store, &report, quarantined).await;
    assert_eq!((report.inputs.files, report.inputs.rows), (1, 500));
    let files = live_set(&store, &layout, &partition).await;
    assert_eq!(files.live, vec![report.output.expect("an output").key]);
    assert_eq!(files.quarantined.len(), 1);
}

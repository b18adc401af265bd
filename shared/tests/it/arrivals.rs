//! Inputs sorted as they arrive (a store the job downloads from, every footer read first, each
//! input read once it has arrived and passed its check) give what staging and checking every
//! input first gives: the same output bytes and the same quarantine, whatever arrives bad, other
//! than its footer declared, or not at all.

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::{GetResult, ObjectStore};
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::store::Store;
use ourios_compaction::store::hooked::{GetRequest, HookedStore, Inner, StoreHooks, StoreResult};
use ourios_compaction::testing::{
    files_under, get_bytes, interop_script, live_set, named_batch, parquet_bytes, put_bytes,
    rows_batch, test_partition, tied_key_files,
};

/// How the job meets its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Staging {
    /// Every input staged and checked before the sort.
    First,
    /// The sort starts from the footers; each input read as it arrives.
    AsTheyArrive,
}

fn options(scratch: &std::path::Path, staging: Staging) -> CompactOptions {
    let mut options = CompactOptions::new(scratch);
    options.arrive_above_bytes = match staging {
        Staging::First => u64::MAX,
        Staging::AsTheyArrive => 0,
    };
    options
}

/// What a whole download of an object (not a ranged read of it) meets.
#[derive(Debug, Clone, Copy)]
enum OnDownload {
    Forbidden,
    Vanished,
    Broken,
}

/// Whole-object GETs of keys ending in a suffix fail; ranged GETs (footers) pass: an object the
/// store stops giving between the footers' reads and the downloads.
#[derive(Debug)]
struct FailedDownloads(Vec<(&'static str, OnDownload)>);

#[async_trait::async_trait]
impl StoreHooks for FailedDownloads {
    const NAME: &'static str = "FailedDownloads";

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let path = get.location.to_string();
        let failure = (self.0.iter()).find(|(suffix, _)| path.ends_with(suffix));
        match failure {
            Some((_, on)) if get.options.range.is_none() && !get.options.head => Err(match on {
                OnDownload::Forbidden => object_store::Error::PermissionDenied {
                    path,
                    source: "AccessDenied: the KMS key is not the function's".into(),
                },
                OnDownload::Vanished => object_store::Error::NotFound {
                    path,
                    source: "NoSuchKey".into(),
                },
                OnDownload::Broken => object_store::Error::Generic {
                    store: "S3",
                    source: format!("500 InternalError reading {path}").into(),
                },
            }),
            _ => get.forward(inner).await,
        }
    }
}

/// A partition on a fresh in-memory store (read through `failed` downloads), holding `files`.
async fn partition_with(
    files: &[(String, Bytes)],
    failed: Vec<(&'static str, OnDownload)>,
) -> (Store, KeyLayout, PartitionId) {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let hooked = HookedStore::wrap(memory, Arc::new(FailedDownloads(failed)));
    let store = Store::from_object_store(Arc::new(hooked), "memory://");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let dir = layout.ingest_dir(&partition);
    for (name, bytes) in files {
        put_bytes(&store, &format!("{dir}/{name}"), bytes.clone()).await;
    }
    (store, layout, partition)
}

/// One job over `files`, staged as `staging` says: its report and its output's bytes.
async fn compact(
    files: &[(String, Bytes)],
    failed: Vec<(&'static str, OnDownload)>,
    staging: Staging,
    tune: impl Fn(&mut CompactOptions),
) -> (CompactionReport, Option<Vec<u8>>, Store) {
    let (store, layout, partition) = partition_with(files, failed).await;
    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = options(scratch.path(), staging);
    tune(&mut options);
    let report =
        ourios_compaction::compact::compact_partition(&store, &layout, &partition, &options)
            .await
            .expect("the job runs");
    assert!(
        files_under(scratch.path()).is_empty(),
        "the job leaves no scratch file: {:?}",
        files_under(scratch.path())
    );
    let bytes = match &report.output {
        Some(output) => Some(get_bytes(&store, &output.key).await.to_vec()),
        None => None,
    };
    (report, bytes, store)
}

/// Compacts `files` both ways and requires the same outcome; returns the report of the job
/// that sorted its inputs as they arrived.
async fn same_either_way(
    files: &[(String, Bytes)],
    failed: Vec<(&'static str, OnDownload)>,
    tune: impl Fn(&mut CompactOptions),
) -> CompactionReport {
    let (first, first_bytes, _) = compact(files, failed.clone(), Staging::First, &tune).await;
    let (arriving, arriving_bytes, _) = compact(files, failed, Staging::AsTheyArrive, &tune).await;
    assert_eq!(arriving.status, first.status, "{arriving:#?}");
    assert_eq!(arriving.error, first.error);
    assert_eq!(arriving.inputs, first.inputs);
    assert_eq!(arriving.quarantined, first.quarantined);
    // Named by the input set, then the attempt.
    let named = |r: &CompactionReport| {
        (r.output.as_ref()).map(|o| {
            let name = o.key.location().filename().unwrap_or_default().to_string();
            (
                name.rsplit_once('-').map(|(set, _)| set.to_string()),
                o.rows,
            )
        })
    };
    assert_eq!(named(&arriving), named(&first));
    assert!(arriving_bytes == first_bytes, "the outputs differ");
    arriving
}

/// Eight files of tied keys, written in row groups of 700 rows.
fn tied_files() -> Vec<(String, Bytes)> {
    let partition = test_partition();
    (tied_key_files(&partition, 0x5eed).iter().enumerate())
        .map(|(i, rows)| {
            let name = format!("ingest-{i:04}.parquet");
            (name, parquet_bytes(&[rows_batch(rows)], 700))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_sorted_as_they_arrive_give_the_bytes_of_inputs_staged_first() {
    for budget in [64 << 20, 48 << 10] {
        let files = tied_files();
        let tune = |o: &mut CompactOptions| {
            o.settings.budget_bytes = budget;
            o.settings.row_group_bytes = Some(64 << 10);
        };
        let (first, _, _) = compact(&files, Vec::new(), Staging::First, tune).await;
        let arriving = same_either_way(&files, Vec::new(), tune).await;
        assert_eq!(arriving.status, Status::Compacted);
        assert_eq!(arriving.runs_spilled, first.runs_spilled, "budget {budget}");
        if budget < 1 << 20 {
            assert!(arriving.runs_spilled > 3, "{arriving:?}");
        }
        // The footers first: one ranged GET each (their tails hold them whole).
        let gets = |r: &CompactionReport| r.cost.requests.get;
        assert_eq!(gets(&arriving), gets(&first) + files.len() as u64);
    }
}

/// Every kind of bad input among inputs that arrive: those whose footers cannot be read wait
/// for their checks, those whose checks fail stop the sort, which starts again without them,
/// a file without rows is consumed, and a file the union of columns leaves out is found so
/// once every check has spoken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_that_arrive_are_settled_as_when_staged_first() {
    let partition = test_partition();
    let (start, end) = partition.time_range_nanos();
    let rows = |first: i64, count: i64, t: i64| -> Vec<_> {
        (0..count)
            .map(|r| (Some(format!("svc-{}", r % 3)), t + r, first + r))
            .collect()
    };
    let file = |rows: Vec<_>| parquet_bytes(&[rows_batch(&rows)], 100);
    let good = file(rows(0, 500, start));
    let mut outside = rows(1000, 300, start + 10);
    outside.push((Some("svc-0".into()), end, 2000));
    let conflicting = parquet_bytes(
        &[named_batch(vec![
            (
                "time_unix_nano",
                Arc::new(arrow_array::Int64Array::from(vec![start + 1])),
            ),
            (
                "tag",
                Arc::new(arrow_array::StringArray::from(vec!["not an integer"])),
            ),
        ])],
        10,
    );
    let files: Vec<(String, Bytes)> = vec![
        ("a0-good.parquet".into(), good.clone()),
        (
            "a1-garbage.parquet".into(),
            Bytes::from_static(b"not parquet at all"),
        ),
        ("a2-truncated.parquet".into(), good.slice(0..good.len() / 2)),
        ("a3-no-rows.parquet".into(), file(Vec::new())),
        ("a4-outside.parquet".into(), file(outside)),
        ("a5-good.parquet".into(), file(rows(3000, 400, start + 7))),
        ("a6-empty.parquet".into(), Bytes::new()),
    ];
    let report = same_either_way(&files, Vec::new(), |_| {}).await;
    assert_eq!(report.status, Status::Partial);
    assert_eq!(report.inputs.rows, 900, "{report:#?}");
    assert_eq!(report.quarantined.len(), 4, "{:#?}", report.quarantined);

    // A file the union of columns leaves out.
    let mut with_conflict = files;
    with_conflict.push(("a7-conflict.parquet".into(), conflicting));
    let report = same_either_way(&with_conflict, Vec::new(), |_| {}).await;
    assert_eq!(report.quarantined.len(), 5, "{:#?}", report.quarantined);
}

/// Inputs whose footers were read but that the store then refuses or no longer holds: the
/// sort's plan no longer holds, and the group is settled and sorted as if staged first (the
/// refused one quarantined with the store's reason, the vanished one skipped and left live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_the_store_stops_giving_after_their_footers_are_settled_as_when_staged_first() {
    let files = tied_files();
    let failed = vec![
        ("ingest-0002.parquet", OnDownload::Forbidden),
        ("ingest-0005.parquet", OnDownload::Vanished),
    ];
    let report = same_either_way(&files, failed.clone(), |_| {}).await;
    assert_eq!(report.status, Status::Partial);
    assert_eq!(report.inputs.files, files.len() as u64 - 2);
    assert_eq!(report.quarantined.len(), 1, "{:#?}", report.quarantined);
    assert!(report.quarantined[0].reason.contains("AccessDenied"));

    let (report, _, store) = compact(&files, failed, Staging::AsTheyArrive, |_| {}).await;
    let layout = KeyLayout::default();
    let live = live_set(&store, &layout, &test_partition()).await;
    let vanished = format!(
        "{}/ingest-0005.parquet",
        layout.ingest_dir(&test_partition())
    );
    assert!(live.live.iter().any(|k| *k == vanished), "{:?}", live.live);
    assert!(report.output.is_some());
}

/// A download that fails fails the job, naming the input, whatever the sort had begun; nothing
/// is committed and the scratch directory is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_download_fails_the_job_naming_the_input() {
    let files = tied_files();
    let failed = vec![("ingest-0006.parquet", OnDownload::Broken)];
    let report = same_either_way(&files, failed.clone(), |_| {}).await;
    assert_eq!(report.status, Status::Failed);
    let error = report.error.expect("an error");
    assert!(error.contains("ingest-0006.parquet"), "{error}");
    let (_, _, store) = compact(&files, failed, Staging::AsTheyArrive, |_| {}).await;
    let live = live_set(&store, &KeyLayout::default(), &test_partition()).await;
    assert_eq!(live.manifest_version, 0, "nothing was committed");
}

/// Holds back the whole-object GET of one key until the sort has read rows (or a timeout
/// passes), and says which came first.
#[derive(Debug)]
struct HeldDownload {
    suffix: String,
    rows_read: Arc<tokio::sync::Notify>,
    released_by_the_sort: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait::async_trait]
impl StoreHooks for HeldDownload {
    const NAME: &'static str = "HeldDownload";

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let whole = get.options.range.is_none() && !get.options.head;
        if whole && get.location.as_ref().ends_with(self.suffix.as_str()) {
            let waited = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                self.rows_read.notified(),
            );
            let released = waited.await.is_ok();
            self.released_by_the_sort
                .store(released, std::sync::atomic::Ordering::SeqCst);
        }
        get.forward(inner).await
    }
}

/// A job over `files` (sorted as they arrive, `tune`d) whose download of the last file waits
/// until the sort has read rows (20 s at most): its report, whether the sort read rows before
/// the last file arrived, and every count of rows read, in order.
async fn hold_the_last_download(
    files: &[(String, Bytes)],
    tune: impl Fn(&mut CompactOptions),
) -> (CompactionReport, bool, Vec<u64>) {
    let last = files.last().map(|(name, _)| name.clone()).expect("files");
    let rows_read = Arc::new(tokio::sync::Notify::new());
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hooks = HeldDownload {
        suffix: last,
        rows_read: Arc::clone(&rows_read),
        released_by_the_sort: Arc::clone(&released),
    };
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store = Store::from_object_store(
        Arc::new(HookedStore::wrap(memory, Arc::new(hooks))),
        "memory://",
    );
    let (layout, partition) = (KeyLayout::default(), test_partition());
    let dir = layout.ingest_dir(&partition);
    for (name, bytes) in files {
        put_bytes(&store, &format!("{dir}/{name}"), bytes.clone()).await;
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let mut options = options(scratch.path(), Staging::AsTheyArrive);
    tune(&mut options);
    // Every count of rows read, in order: a sort that starts again counts from zero.
    let counts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&counts);
    options.progress = Some(ourios_compaction::options::Progress(Arc::new(
        move |read, _| {
            seen.lock().expect("counts").push(read);
            rows_read.notify_one();
        },
    )));
    let report =
        ourios_compaction::compact::compact_partition(&store, &layout, &partition, &options)
            .await
            .expect("the job runs");
    let counts = counts.lock().expect("counts").clone();
    (
        report,
        released.load(std::sync::atomic::Ordering::SeqCst),
        counts,
    )
}

/// The sort reads the first inputs while the last one is still on the wire, and does not start
/// again once it has arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sort_reads_the_first_inputs_while_the_last_one_downloads() {
    let (report, released, counts) = hold_the_last_download(&tied_files(), |_| {}).await;
    assert_eq!(report.status, Status::Compacted, "{report:?}");
    assert!(
        released,
        "the last download waited for rows the sort never read before it"
    );
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "the sort started again: {counts:?}"
    );
    assert_eq!(counts.last().copied(), Some(report.inputs.rows));
}

/// The generator's log lines, in files of 350,000 rows: a text column outgrows its dictionary,
/// and its last dictionary and the plain pages after it, together more than a footer can tell,
/// make a reader larger than the sort was planned for. The rows' buffer gives it room, and the
/// sort goes on without starting again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_larger_than_its_footer_tells_takes_room_from_the_rows() {
    let memory = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    let (layout, partition) = (KeyLayout::default(), test_partition());
    let spec = ourios_compaction::bench::generate::GenerateSpec {
        files: 2,
        rows_per_file: 350_000,
        ..Default::default()
    };
    let generated =
        ourios_compaction::bench::generate::generate_partition(&memory, &layout, &partition, &spec)
            .await
            .expect("generated");
    let mut files = Vec::new();
    for key in &generated.keys {
        let name = key.rsplit('/').next().unwrap_or(key).to_string();
        files.push((name, get_bytes(&memory, key).await));
    }
    let small = |o: &mut CompactOptions| o.settings.budget_bytes = 16 << 20;
    let report = same_either_way(&files, Vec::new(), small).await;
    assert_eq!(report.status, Status::Compacted);
    let (report, released, counts) = hold_the_last_download(&files, small).await;
    assert_eq!(report.status, Status::Compacted, "{report:?}");
    assert!(
        released,
        "the sort started again once every input had arrived"
    );
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
}

/// The partitions `tests/interop/writer_corpus.py` writes under `dir`: one JSON line each.
fn writer_corpus(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let dir = dir.to_string_lossy();
    interop_script(
        "writer_corpus.py",
        &["write", dir.as_ref()],
        "pyarrow, duckdb and polars",
    )
    .lines()
    .map(|line| serde_json::from_str(line).expect("a partition line"))
    .collect()
}

/// Real writers' files (pyarrow with every codec and format version, Polars, DuckDB, INT96 and
/// zoned times, nested columns, a file without rows, conflicting files, damaged pages and
/// levels: `tests/interop/writer_corpus.py`), sorted as they arrive, give what staging them
/// first gives, partition by partition, and what the corpus expects of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_writers_files_sorted_as_they_arrive_give_what_staging_them_first_gives() {
    let dir = tempfile::tempdir().expect("a directory");
    let partitions = writer_corpus(dir.path());
    assert!(partitions.len() >= 7, "{partitions:?}");
    for partition in &partitions {
        let tenant = partition["tenant"].as_str().expect("tenant");
        let mut files: Vec<(String, Bytes)> =
            files_under(&dir.path().join("data").join(format!("tenant={tenant}")))
                .into_iter()
                .map(|path| {
                    let name = path
                        .file_name()
                        .expect("a name")
                        .to_string_lossy()
                        .into_owned();
                    let bytes = std::fs::read(&path).expect("the file reads");
                    (name, Bytes::from(bytes))
                })
                .collect();
        files.sort();
        assert!(!files.is_empty(), "{tenant}: no files");
        let report = same_either_way(&files, Vec::new(), |o| {
            o.settings.budget_bytes = 32 << 20;
        })
        .await;
        let status = serde_json::to_value(report.status).expect("a status");
        assert_eq!(status, partition["expect"], "{tenant}: {report:#?}");
        let quarantined = partition["quarantined"].as_str();
        assert_eq!(
            report.quarantined.len(),
            usize::from(quarantined.is_some()),
            "{tenant}: {:?}",
            report.quarantined
        );
    }
}

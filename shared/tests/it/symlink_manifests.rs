//! Symlink manifests: each partition's live URLs for Athena and Trino. Every commit, release and
//! quarantine rewrites one, the planner on each ingest event, and GC before it deletes retired
//! files; writers are conditional, so no writer leaves an older list in place.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutResult};
use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::gc::collect_garbage;
use ourios_compaction::manifest::symlink::{SymlinkWrite, symlink_body, write_symlink};
use ourios_compaction::manifest::{partition_files, release_quarantined};
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::store::Store;
use ourios_compaction::store::hooked::{HookedStore, Inner, PutRequest, StoreHooks, StoreResult};
use ourios_compaction::testing::{
    land_file, multi_thread_runtime, put_bytes, symlink_manifest, test_partition,
};

/// The symlink manifest's lines (empty when there is none).
async fn listed(store: &Store, partition: &PartitionId) -> Vec<String> {
    let body = symlink_manifest(store, &KeyLayout::default(), partition).await;
    body.map(|b| b.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Compacts `partition` with the default options.
async fn compact(
    store: &Store,
    partition: &PartitionId,
) -> ourios_compaction::report::CompactionReport {
    let scratch = tempfile::tempdir().expect("scratch");
    let options = CompactOptions::new(scratch.path());
    compact_partition(store, &KeyLayout::default(), partition, &options)
        .await
        .expect("compacts")
}

/// Lands `a.parquet` (tags from 0) and `b.parquet` (from 100), `rows` rows each, in the test
/// partition.
async fn land_a_and_b(store: &Store, rows: i64) {
    let (layout, partition) = (KeyLayout::default(), test_partition());
    land_file(store, &layout, &partition, "a.parquet", 0, rows).await;
    land_file(store, &layout, &partition, "b.parquet", 100, rows).await;
}

/// What `files --urls` prints for the partition now.
async fn live_urls(store: &Store, partition: &PartitionId) -> Vec<String> {
    let files = partition_files(store, &KeyLayout::default(), partition)
        .await
        .expect("live set");
    files.files.iter().map(|f| store.url_of(&f.key)).collect()
}

#[test]
fn commits_releases_and_quarantines_rewrite_it_to_the_live_urls() {
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "s3://logs/lake");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        land_a_and_b(&store, 50).await;
        let bad = format!("{}/bad.parquet", layout.ingest_dir(&partition));
        put_bytes(&store, &bad, bytes::Bytes::from_static(b"PAR1 no PAR1")).await;
        assert_eq!(
            write_symlink(&store, &layout, &partition)
                .await
                .expect("write"),
            SymlinkWrite::Written
        );
        let before = listed(&store, &partition).await;
        assert_eq!(before, live_urls(&store, &partition).await);
        assert_eq!(before.len(), 3);
        assert!(
            before.iter().all(|u| u.starts_with("s3://logs/lake/data/")),
            "{before:?}"
        );
        assert_eq!(
            write_symlink(&store, &layout, &partition)
                .await
                .expect("write"),
            SymlinkWrite::Unchanged
        );

        // The commit rewrites it: the output alone (the damaged file quarantined).
        let report = compact(&store, &partition).await;
        assert_eq!(report.quarantined.len(), 1);
        let output = report.output.expect("an output").key;
        assert_eq!(
            listed(&store, &partition).await,
            [format!("s3://logs/lake/{output}")]
        );
        // A release puts the file back in the list (and in the live set).
        release_quarantined(&store, &layout, &partition, std::slice::from_ref(&bad), 1)
            .await
            .expect("release");
        let released = listed(&store, &partition).await;
        assert_eq!(released, live_urls(&store, &partition).await);
        assert!(
            released.contains(&format!("s3://logs/lake/{bad}")),
            "{released:?}"
        );
        // The body is exactly the URLs, one a line.
        let body = symlink_manifest(&store, &KeyLayout::default(), &partition).await;
        assert_eq!(body, Some(symlink_body(&released)));
    });
}

/// Another writer (with a newer state: one more file) writes the symlink manifest just before
/// the first write of a key the trigger picks: between a writer's state read and its write.
#[derive(Debug)]
struct Interloper {
    plain: Store,
    trigger: fn(&str) -> bool,
    fired: AtomicBool,
}

impl Interloper {
    fn before(plain: &Store, trigger: fn(&str) -> bool) -> Arc<Self> {
        Arc::new(Interloper {
            plain: plain.clone(),
            trigger,
            fired: AtomicBool::new(false),
        })
    }
}

#[async_trait::async_trait]
impl StoreHooks for Interloper {
    const NAME: &'static str = "Interloper";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        if (self.trigger)(put.location.as_ref()) && !self.fired.swap(true, Ordering::SeqCst) {
            let (layout, partition) = (KeyLayout::default(), test_partition());
            land_file(&self.plain, &layout, &partition, "newer.parquet", 500, 5).await;
            write_symlink(&self.plain, &layout, &partition)
                .await
                .expect("the interloper writes");
        }
        put.forward(inner).await
    }
}

/// A write of a symlink manifest.
fn symlink_write(key: &str) -> bool {
    key.ends_with("/manifest")
}

/// A job's write of a manifest version (its commit).
fn manifest_version_write(key: &str) -> bool {
    key.starts_with("_compaction/manifests/")
}

#[test]
fn a_writer_with_an_older_state_never_leaves_its_list_in_place() {
    multi_thread_runtime(2).block_on(async {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        land_file(&plain, &layout, &partition, "a.parquet", 0, 5).await;
        write_symlink(&plain, &layout, &partition)
            .await
            .expect("first list");
        land_file(&plain, &layout, &partition, "b.parquet", 100, 5).await;
        let hooks = Interloper::before(&plain, symlink_write);
        let racing =
            Store::from_object_store(Arc::new(HookedStore::wrap(inner, hooks)), "memory://");
        // Its state (a, b) is older than the interloper's (a, b, newer): its conditional write
        // fails, and it reads again.
        write_symlink(&racing, &layout, &partition)
            .await
            .expect("write");
        let urls = listed(&plain, &partition).await;
        assert_eq!(urls, live_urls(&plain, &partition).await);
        assert_eq!(urls.len(), 3, "the newer file is listed: {urls:?}");
    });
}

/// Fails every write of a symlink manifest while `broken` is set.
#[derive(Debug)]
struct BrokenSymlinks(AtomicBool);

#[async_trait::async_trait]
impl StoreHooks for BrokenSymlinks {
    const NAME: &'static str = "BrokenSymlinks";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        if put.location.as_ref().ends_with("/manifest") && self.0.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "S3",
                source: "503 SlowDown".into(),
            });
        }
        put.forward(inner).await
    }
}

#[test]
fn gc_deletes_no_file_the_symlink_manifest_lists() {
    multi_thread_runtime(2).block_on(async {
        let hooks = Arc::new(BrokenSymlinks(AtomicBool::new(false)));
        let store = Store::from_object_store(
            Arc::new(HookedStore::wrap(
                Arc::new(InMemory::new()),
                Arc::clone(&hooks),
            )),
            "memory://",
        );
        let (layout, partition) = (KeyLayout::default(), test_partition());
        land_a_and_b(&store, 20).await;
        write_symlink(&store, &layout, &partition)
            .await
            .expect("list");
        // The job commits, but its rewrite of the symlink manifest fails: it still lists the
        // inputs the commit retired.
        hooks.0.store(true, Ordering::SeqCst);
        let report = compact(&store, &partition).await;
        assert!(report.status.is_success());
        assert_eq!(
            listed(&store, &partition).await.len(),
            2,
            "the inputs, still listed"
        );
        // GC that cannot rewrite it keeps the retired files...
        let kept = collect_garbage(
            &store,
            &layout,
            &partition,
            std::time::Duration::ZERO,
            false,
        )
        .await
        .expect("gc");
        assert_eq!(kept.deleted, 0, "{kept:?}");
        // ... and GC that can rewrites it first, then deletes them.
        hooks.0.store(false, Ordering::SeqCst);
        let collected = collect_garbage(
            &store,
            &layout,
            &partition,
            std::time::Duration::ZERO,
            false,
        )
        .await
        .expect("gc");
        assert_eq!(collected.plan.retired.len(), 2, "{collected:?}");
        for url in listed(&store, &partition).await {
            let key = url.trim_start_matches("memory://");
            let path = object_store::path::Path::from(key);
            assert!(
                store.object_store().head(&path).await.is_ok(),
                "{url} is listed and exists"
            );
        }
        assert_eq!(
            listed(&store, &partition).await,
            live_urls(&store, &partition).await
        );
    });
}

/// A job that commits the version after the one it read writes the list that version makes
/// over the listing it read: no listing or manifest read again after its commit (which lands
/// well within half the grace of the state's read, so needs no check for a pruned version);
/// and the garbage-due marker it wrote is too young for its GC to find anything due.
#[test]
fn a_job_lists_what_its_commit_made_without_reading_the_state_again() {
    multi_thread_runtime(2).block_on(async {
        let store = Store::from_object_store(Arc::new(InMemory::new()), "s3://logs/lake");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        land_a_and_b(&store, 50).await;
        assert_eq!(
            write_symlink(&store, &layout, &partition)
                .await
                .expect("list"),
            SymlinkWrite::Written
        );
        let report = compact(&store, &partition).await;
        assert!(report.status.is_success(), "{report:?}");
        let requests = report.cost.requests;
        // The manifests and the partition (the state).
        assert_eq!(requests.list, 2, "{requests:?}");
        // The symlink manifest and the two inputs: no manifest yet, none read after the
        // commit, and no HEAD of the garbage-due marker the job wrote itself.
        assert_eq!(requests.get, 3, "{requests:?}");
        let urls = listed(&store, &partition).await;
        assert_eq!(urls, live_urls(&store, &partition).await);
        assert_eq!(urls.len(), 1, "the output alone: {urls:?}");
    });
}

/// A file lands and is listed (as the planner does on its event) while a job commits: the
/// job's list over its own listing would miss it, so its conditional write fails, and it reads
/// the state again.
#[test]
fn a_writer_between_a_job_s_state_and_its_list_makes_the_job_read_again() {
    multi_thread_runtime(2).block_on(async {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let plain = Store::from_object_store(Arc::clone(&inner), "memory://");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        land_a_and_b(&plain, 50).await;
        write_symlink(&plain, &layout, &partition)
            .await
            .expect("first list");
        let hooks = Interloper::before(&plain, manifest_version_write);
        let racing =
            Store::from_object_store(Arc::new(HookedStore::wrap(inner, hooks)), "memory://");
        let report = compact(&racing, &partition).await;
        assert!(report.status.is_success(), "{report:?}");
        let urls = listed(&plain, &partition).await;
        assert_eq!(urls, live_urls(&plain, &partition).await);
        assert!(
            urls.iter().any(|u| u.ends_with("/newer.parquet")),
            "the newer file stays listed: {urls:?}"
        );
        assert_eq!(urls.len(), 2, "the output and the newer file: {urls:?}");
    });
}

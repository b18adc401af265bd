//! One conformance suite run against every backend: in-memory, a local directory and the S3
//! test server. It checks the object-store behaviours the commit protocol relies on
//! (invariant 2: create-only writes detect a lost race) and the protocol's basic
//! behaviours on top of them.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use ourios_compaction::manifest::{CommitOutcome, Manifest, commit, load_latest};
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::store::Store;
use ourios_compaction::testing::get_bytes;
use ourios_integration_tests::{commit_request as request, open_memory, open_s3, test_partition};

async fn put_get_list_delete(store: &Store) {
    let os = store.object_store();
    os.put(&Path::from("c/one.bin"), PutPayload::from_static(b"one"))
        .await
        .expect("put one");
    os.put(
        &Path::from("c/sub/two.bin"),
        PutPayload::from_static(b"two"),
    )
    .await
    .expect("put two");
    os.put(&Path::from("d/three.bin"), PutPayload::from_static(b"3"))
        .await
        .expect("put three");
    let got = get_bytes(store, "c/sub/two.bin").await;
    assert_eq!(got, Bytes::from_static(b"two"));

    let listed: Vec<String> = store
        .list_sorted(&Path::from("c"))
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.location.to_string())
        .collect();
    assert_eq!(listed, ["c/one.bin", "c/sub/two.bin"]);

    // Delimited listing: what GC uses to find partitions without scanning data.
    let result = os
        .list_with_delimiter(Some(&Path::from("c")))
        .await
        .expect("list with delimiter");
    let objects: Vec<String> = result
        .objects
        .iter()
        .map(|m| m.location.to_string())
        .collect();
    let prefixes: Vec<String> = result
        .common_prefixes
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(objects, ["c/one.bin"]);
    assert_eq!(prefixes, ["c/sub"]);

    os.delete(&Path::from("c/one.bin")).await.expect("delete");
    let err = os
        .get(&Path::from("c/one.bin"))
        .await
        .expect_err("a deleted object is gone");
    assert!(
        matches!(err, object_store::Error::NotFound { .. }),
        "get after delete: {err:?}"
    );
    assert_eq!(
        store
            .list_sorted(&Path::from("c"))
            .await
            .expect("list")
            .len(),
        1
    );
}

async fn create_only_put(store: &Store) {
    let os = store.object_store();
    let key = Path::from("m/v1.json");
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    os.put_opts(&key, PutPayload::from_static(b"first"), create())
        .await
        .expect("the first create succeeds");
    let err = os
        .put_opts(&key, PutPayload::from_static(b"second"), create())
        .await
        .expect_err("the second create fails");
    assert!(
        matches!(err, object_store::Error::AlreadyExists { .. }),
        "the second create must be AlreadyExists, got {err:?}"
    );
    let got = get_bytes(store, key.as_ref()).await;
    assert_eq!(got, Bytes::from_static(b"first"), "never overwritten");

    // Racing creates of one key: exactly one wins.
    let race = Path::from("m/race.json");
    let attempts = (0..6u8).map(|i| {
        let os = std::sync::Arc::clone(os);
        let race = race.clone();
        tokio::spawn(async move {
            os.put_opts(&race, PutPayload::from(vec![i]), create())
                .await
                .map(|_| i)
        })
    });
    let mut winners = Vec::new();
    for attempt in attempts {
        match attempt.await.expect("task") {
            Ok(i) => winners.push(i),
            Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => panic!("a losing create must be AlreadyExists, got {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one racing create wins");
    let got = get_bytes(store, race.as_ref()).await;
    assert_eq!(got.as_ref(), [winners[0]]);
}

async fn multipart_upload(store: &Store) {
    let os = store.object_store();
    let key = Path::from("u/big.bin");
    // S3 needs parts of at least 5 MiB except the last.
    let part_bytes = 5 << 20;
    let data: Vec<u8> = (0..part_bytes * 2 + 1234)
        .map(|i| (i % 251) as u8)
        .collect();
    let upload = os.put_multipart(&key).await.expect("start multipart");
    let mut writer = WriteMultipart::new_with_chunk_size(upload, part_bytes);
    writer.write(&data);
    writer.finish().await.expect("complete multipart");
    let got = get_bytes(store, key.as_ref()).await;
    assert_eq!(got.len(), data.len());
    assert!(
        got.as_ref() == data.as_slice(),
        "multipart content round-trips"
    );

    // An upload that is never completed leaves nothing visible at its key.
    let abandoned = Path::from("u/abandoned.bin");
    let mut upload = os.put_multipart(&abandoned).await.expect("start multipart");
    upload
        .put_part(PutPayload::from(vec![7u8; part_bytes]))
        .await
        .expect("a part uploads");
    drop(upload);
    let listed: Vec<String> = os
        .list(Some(&Path::from("u")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    assert_eq!(listed, ["u/big.bin"], "an uncompleted upload is invisible");
    assert!(matches!(
        os.get(&abandoned).await,
        Err(object_store::Error::NotFound { .. })
    ));
}

async fn racing_commits(store: &Store) {
    let layout = KeyLayout::default();
    let partition = test_partition();
    let dir = layout.ingest_dir(&partition);
    let compacted = layout.compacted_dir(&partition);
    let input = format!("{dir}/a.parquet");
    let base = Manifest::empty(&partition.relative_dir());

    // Two jobs with the same input and different outputs commit on the same base at once.
    let a = request("job-a", &input, &format!("{compacted}/part-a.parquet"));
    let b = request("job-b", &input, &format!("{compacted}/part-b.parquet"));
    let (ra, rb) = tokio::join!(
        commit(store, &layout, &partition, &base, &a),
        commit(store, &layout, &partition, &base, &b)
    );
    let outcomes = [ra.expect("commit a"), rb.expect("commit b")];
    let winners: Vec<&Manifest> = outcomes
        .iter()
        .filter_map(|o| match o {
            CommitOutcome::Committed(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one of two racing commits wins: {outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, CommitOutcome::Conflict { .. })),
        "the loser sees a conflict: {outcomes:?}"
    );
    let latest = load_latest(store, &layout, &partition)
        .await
        .expect("latest");
    assert_eq!(latest.version, 1);
    assert_eq!(&latest, winners[0]);
    assert_eq!(latest.compacted.len(), 1);

    // A retry of the winner on the stale base is recognised as landed, not applied twice
    // (each attempt names its output uniquely, so finding it means this attempt's write).
    let winner_request = if latest.attempt_id == "job-a" { &a } else { &b };
    let retry = commit(store, &layout, &partition, &base, winner_request)
        .await
        .expect("retry");
    assert!(
        matches!(retry, CommitOutcome::Committed(ref m) if m.version == 1),
        "a retried commit is recognised: {retry:?}"
    );

    // A commit on a stale base whose inputs are still live is rebased and wins.
    let other = format!("{dir}/b.parquet");
    let c = request("job-c", &other, &format!("{compacted}/part-c.parquet"));
    match commit(store, &layout, &partition, &base, &c)
        .await
        .expect("commit c")
    {
        CommitOutcome::Committed(m) => {
            assert_eq!(m.version, 2);
            assert_eq!(m.compacted.len(), 2, "the earlier output stays live");
        }
        other => panic!("a rebased commit wins: {other:?}"),
    }
    assert_eq!(
        load_latest(store, &layout, &partition)
            .await
            .expect("latest")
            .version,
        2
    );
}

async fn conformance(store: &Store) {
    put_get_list_delete(store).await;
    create_only_put(store).await;
    multipart_upload(store).await;
    racing_commits(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_store_conforms() {
    conformance(&open_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_directory_store_conforms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().to_string_lossy()).expect("local store");
    conformance(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_store_conforms() {
    conformance(&open_s3("conformance")).await;
}

/// GC's delete of a listed object (an orphan) on S3 is conditional on the ETag listed: an
/// object written again since is left in place; the version listed is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_deletes_a_listed_object_only_while_unchanged() {
    let store = open_s3("conditional-delete");
    let os = store.object_store();
    let key = Path::from("compacted/part-x.parquet");
    os.put(&key, PutPayload::from_static(b"first"))
        .await
        .expect("put");
    let listed = store
        .list_sorted(&Path::from("compacted"))
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert!(listed[0].e_tag.is_some(), "S3 listings carry ETags");
    os.put(&key, PutPayload::from_static(b"written again"))
        .await
        .expect("put again");
    assert!(
        !store.delete_listed(&listed[0]).await.expect("delete"),
        "an object changed since its listing is left in place"
    );
    assert_eq!(
        get_bytes(&store, key.as_ref()).await,
        Bytes::from_static(b"written again")
    );
    let relisted = store
        .list_sorted(&Path::from("compacted"))
        .await
        .expect("list");
    assert!(store.delete_listed(&relisted[0]).await.expect("delete"));
    assert!(
        store
            .list_sorted(&Path::from("compacted"))
            .await
            .expect("list")
            .is_empty()
    );
}

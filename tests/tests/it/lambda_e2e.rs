//! Both functions end to end under cargo-lambda's local emulator, against the S3 test server
//! (`functions/README.md`): ingest files land, the planner gets their seal event (from `events/`), the
//! compactor gets the job record's event, and the live set is checked row by row.
//!
//! Needs `cargo lambda` on the PATH (`bash tests/run.sh` installs it into .tools/venv) and the
//! S3 server `tests/run.sh` starts. It runs the real function binaries against the runtime API
//! of `cargo lambda watch --only-lambda-apis`, then sends payloads with
//! `cargo lambda invoke --data-file`.

use ourios_compaction::partition::KeyLayout;
use ourios_compaction::partition::job_key;
use ourios_compaction::store::{Store, StoreUrl};
use ourios_compaction::testing::symlink_manifest;
use ourios_integration_tests::emulator::{
    Emulator, FUNCTIONS, event_for_store, land_announced_files, load, move_event, s3_server_env,
    workspace_root,
};
use ourios_integration_tests::{assert_exactly_once, live_set, live_tags, s3_url, test_partition};
use serde_json::Value;

/// The GC grace of the functions: short, so the test sees the steady state after it.
const GRACE: &str = "2s";

/// The longest a late file waits: short, so the test sees it merged by the sweep.
const LATE_WAIT: &str = "3s";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planner_and_compactor_under_cargo_lambda() {
    let url = s3_url("lambda-e2e");
    let StoreUrl::S3 { bucket, prefix } = StoreUrl::parse(&url).expect("an s3 URL") else {
        panic!("{url} is an S3 store");
    };
    let store = Store::open(&url).expect("store opens");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let tags = land_announced_files(&store, &layout, &partition).await;

    let work = tempfile::tempdir().expect("tempdir");
    let scratch = work.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut env: Vec<(String, String)> = [
        ("OURIOS_STORE", url.as_str()),
        ("OURIOS_LOG", "info"),
        ("OURIOS_MEMORY_BUDGET", "16MiB"),
        ("OURIOS_DEADLINE_MARGIN", "1s"),
        ("OURIOS_GC_GRACE", GRACE),
        ("OURIOS_LATE_WAIT", LATE_WAIT),
        ("OURIOS_SCRATCH", &scratch.to_string_lossy()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend(s3_server_env());
    let emulator = Emulator::start("cargo-lambda-watch", &FUNCTIONS, &env, work.path());

    // 1. The seal events reach the planner: one job for the partition.
    let seal = event_for_store("s3-put-encoded-keys.json", &bucket, &prefix, work.path());
    let planned = emulator
        .invoke("ourios-planner", &seal)
        .unwrap_or_else(|e| panic!("planner failed: {e}\n{}", emulator.log_tail()));
    assert_eq!(
        planned["partitions"][0]["decision"], "dispatched",
        "{planned}"
    );
    assert_eq!(planned["partitions"].as_array().map(Vec::len), Some(1));
    let job = ourios_integration_tests::all_keys(&store).await;
    assert!(
        job.contains(&job_key(&partition)),
        "job record written: {job:?}"
    );

    // The same burst again changes nothing.
    let replay_seal = || {
        emulator
            .invoke("ourios-planner", &seal)
            .expect("planner replays")
    };
    let replay = replay_seal();
    assert_eq!(
        replay["partitions"][0]["decision"], "job_active",
        "{replay}"
    );

    // 2. The compactor acknowledges a test event (and is built on this first invocation),
    // then the job record's creation event starts the job.
    let test_event = workspace_root().join("events/s3-test-event.json");
    let warm = emulator
        .invoke("ourios-compactor", &test_event)
        .unwrap_or_else(|e| panic!("compactor failed: {e}\n{}", emulator.log_tail()));
    assert_eq!(warm["ignored"].as_array().map(Vec::len), Some(1), "{warm}");
    let job_event = event_for_store("compactor-job-created.json", &bucket, &prefix, work.path());
    let report = emulator
        .invoke("ourios-compactor", &job_event)
        .unwrap_or_else(|e| panic!("compactor failed: {e}\n{}", emulator.log_tail()));
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(report["inputs"]["files"], 3);
    assert_eq!(report["output"]["rows"], 1200);

    // 3. Row by row: every landed row is live exactly once, in the one compacted file.
    let files = live_set(&store, &layout, &partition).await;
    assert_eq!(files.live.len(), 1, "one compacted file: {:?}", files.live);
    assert!(files.live[0].starts_with("compacted/"), "{:?}", files.live);
    let live = live_tags(&store, &layout, &partition).await;
    assert_exactly_once(&live, &tags, "after the Lambda compaction");
    let keys = ourios_integration_tests::all_keys(&store).await;
    assert!(
        !keys.contains(&job_key(&partition)),
        "job record deleted: {keys:?}"
    );

    // 4. The compactor's own writes, announced to the planner, start nothing.
    let outputs = event_for_store("s3-compactor-outputs.json", &bucket, &prefix, work.path());
    let ignored = emulator
        .invoke("ourios-planner", &outputs)
        .expect("planner answers");
    assert_eq!(ignored["partitions"], Value::Array(Vec::new()), "{ignored}");
    assert_eq!(
        ignored["ignored"].as_array().map(Vec::len),
        Some(3),
        "{ignored}"
    );
    // A late replay of the seal events finds nothing left to compact.
    let late = replay_seal();
    assert_eq!(
        late["partitions"][0]["decision"], "nothing_to_compact",
        "{late}"
    );

    // 5. The steady state: with no new ingest, once the grace has passed the scheduled sweep
    // gives the partition a job whose GC deletes the retired inputs; the bucket holds the
    // output and manifests only.
    let retired = ourios_integration_tests::all_keys(&store).await;
    let ingest_dir = format!("{}/", layout.ingest_dir(&partition));
    assert_eq!(
        retired
            .iter()
            .filter(|k| k.starts_with(&ingest_dir))
            .count(),
        3,
        "retired inputs wait for the grace: {retired:?}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    let sweep_event = workspace_root().join("events/eventbridge-scheduled-sweep.json");
    let swept = emulator
        .invoke("ourios-planner", &sweep_event)
        .unwrap_or_else(|e| panic!("planner failed: {e}\n{}", emulator.log_tail()));
    let due: Vec<&Value> = (swept["partitions"].as_array().into_iter().flatten())
        .filter(|p| p["decision"] == "dispatched")
        .collect();
    assert_eq!(due.len(), 1, "one job for the garbage due: {swept}");
    let collected = emulator
        .invoke("ourios-compactor", &job_event)
        .unwrap_or_else(|e| panic!("compactor failed: {e}\n{}", emulator.log_tail()));
    assert_eq!(collected["status"], "noop", "{collected}");
    assert_eq!(collected["gc_deleted"], 3, "{collected}");
    let keys = ourios_integration_tests::all_keys(&store).await;
    let stray: Vec<&String> = (keys.iter())
        .filter(|k| !k.starts_with("_compaction/manifests/"))
        .filter(|k| !k.starts_with("_compaction/symlink/"))
        .filter(|k| !files.live.iter().any(|live| live.as_str() == k.as_str()))
        .collect();
    assert!(
        stray.is_empty(),
        "outputs, manifests and the symlink manifest only: {stray:?}"
    );
    // The symlink manifest Athena reads lists the live set, as URLs of the functions' store.
    let listed = symlink_manifest(&store, &KeyLayout::default(), &partition).await;
    let expected: String = (files.live.iter())
        .map(|key| format!("{}\n", store.url_of(key)))
        .collect();
    assert_eq!(listed, Some(expected));

    // 6. A late file: checked at once and left live, unmerged; once it has waited the late
    // wait, the sweep dispatches its merge. It costs one rewrite of the hour.
    let late_name = "late-0001.parquet";
    let late_tags =
        ourios_compaction::testing::land_file(&store, &layout, &partition, late_name, 9_000, 50)
            .await;
    let mut late_event = load("eventbridge-object-created.json");
    late_event["detail"]["object"]["key"] =
        Value::from(format!("{}/{late_name}", layout.ingest_dir(&partition)));
    let late_event_file = work.path().join("late-object-created.json");
    let late_event = move_event(late_event, &bucket, &prefix).to_string();
    std::fs::write(&late_event_file, late_event).expect("event written");
    let checked = emulator
        .invoke("ourios-planner", &late_event_file)
        .unwrap_or_else(|e| panic!("planner failed: {e}\n{}", emulator.log_tail()));
    let decided = &checked["partitions"][0];
    assert_eq!(decided["decision"], "dispatched", "{checked}");
    assert_eq!(decided["late"]["action"], "check", "{checked}");
    let check = emulator
        .invoke("ourios-compactor", &job_event)
        .unwrap_or_else(|e| panic!("compactor failed: {e}\n{}", emulator.log_tail()));
    assert_eq!(check["status"], "noop", "{check}");
    assert_eq!(check["late_check"]["checked"], 1, "{check}");
    assert_eq!(
        check["outputs"],
        Value::Array(Vec::new()),
        "nothing rewritten: {check}"
    );
    let waiting = emulator
        .invoke("ourios-planner", &late_event_file)
        .expect("planner answers");
    assert_eq!(
        waiting["partitions"][0]["decision"], "not_ready",
        "{waiting}"
    );
    assert_eq!(
        waiting["partitions"][0]["late"]["action"], "wait",
        "{waiting}"
    );
    let mut all_tags = tags.clone();
    all_tags.extend(late_tags);
    let live = live_tags(&store, &layout, &partition).await;
    assert_exactly_once(&live, &all_tags, "with the late file waiting");

    tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
    let swept = emulator
        .invoke("ourios-planner", &sweep_event)
        .unwrap_or_else(|e| panic!("planner failed: {e}\n{}", emulator.log_tail()));
    let merges: Vec<&Value> = (swept["partitions"].as_array().into_iter().flatten())
        .filter(|p| p["decision"] == "dispatched")
        .collect();
    assert_eq!(merges.len(), 1, "one merge of the late file: {swept}");
    assert_eq!(merges[0]["late"]["reason"], "wait_over", "{swept}");
    let merged = emulator
        .invoke("ourios-compactor", &job_event)
        .unwrap_or_else(|e| panic!("compactor failed: {e}\n{}", emulator.log_tail()));
    assert_eq!(merged["status"], "compacted", "{merged}");
    assert_eq!(
        merged["inputs"]["files"], 2,
        "the output and the late file: {merged}"
    );
    let hour_bytes = report["output"]["bytes"].as_u64().expect("bytes");
    let rewritten = merged["output"]["bytes"].as_u64().expect("bytes");
    assert!(
        rewritten < 2 * hour_bytes,
        "the late file cost {rewritten} bytes, the hour is {hour_bytes}"
    );
    let live = live_tags(&store, &layout, &partition).await;
    assert_exactly_once(&live, &all_tags, "after the late file's merge");
    let keys = ourios_integration_tests::all_keys(&store).await;
    assert!(
        !keys.iter().any(|k| k.starts_with("_compaction/late/")),
        "nothing waits: {keys:?}"
    );

    // 7. A hostile key fails the invocation loudly, naming it.
    let hostile = event_for_store("s3-hostile-keys.json", &bucket, &prefix, work.path());
    let err = emulator
        .invoke("ourios-planner", &hostile)
        .expect_err("a rejected key fails the invocation");
    assert!(err.contains("hour=25"), "{err}");
}

//! The usual writers' lakes through both functions as deployed: under cargo-lambda's emulator,
//! against the S3 test server, each function configured by the variables the template sets
//! from its parameters (`OURIOS_LAYOUT`, `OURIOS_INPUT_NAMES`, `OURIOS_SORT_KEY`,
//! `OURIOS_TIME_UNIT`, `OURIOS_BLOOM_COLUMNS`).
//!
//! Each lake is written with pyarrow in its writer's layout and schema
//! (`tests/interop/writer_lakes.py`) and uploaded to its own store root as the writer uploads
//! it (Firehose by multipart upload). The planner gets the event the writer's object raises,
//! shaped as AWS sends it (Vector's and Fluent Bit's `ObjectCreated:Put`, the OpenTelemetry
//! exporter's through EventBridge, Firehose's `ObjectCreated:CompleteMultipartUpload`); the
//! compactor gets the job record's. pyarrow then checks the compacted files: every row once,
//! in the lake's key order, `sorting_columns` declared, the time column's type kept; and a
//! query by a bloom column reads fewer row groups than it did before.

use std::path::{Path, PathBuf};

use object_store::ObjectStoreExt;

use ourios_compaction::partition::{PartitionId, job_key};
use ourios_compaction::store::{Store, StoreUrl};
use ourios_compaction::testing::{files_under, interop_script};
use ourios_integration_tests::emulator::{Emulator, FUNCTIONS, load, s3_server_env};
use ourios_integration_tests::{cli_json, s3_url};
use serde_json::Value;

/// The lakes' hour (`writer_lakes.py`).
const HOUR: &str = "2026-11-29T10";

/// The flags of the CLI (`writer_lakes.py` prints a lake's settings as flags) and the
/// functions' variables that carry the same settings.
const SETTINGS: [(&str, &str); 6] = [
    ("--layout", "OURIOS_LAYOUT"),
    ("--input-names", "OURIOS_INPUT_NAMES"),
    ("--sort-key", "OURIOS_SORT_KEY"),
    ("--time-column", "OURIOS_TIME_COLUMN"),
    ("--time-unit", "OURIOS_TIME_UNIT"),
    ("--bloom-columns", "OURIOS_BLOOM_COLUMNS"),
];

/// Runs `tests/interop/writer_lakes.py` with the test command's Python (pyarrow).
fn writer_lakes(args: &[&str]) -> String {
    interop_script("writer_lakes.py", args, "pyarrow")
}

/// The files under `dir`, as keys relative to it, in order.
fn keys_under(dir: &Path) -> Vec<String> {
    let mut keys: Vec<String> = (files_under(dir).iter())
        .map(|path| {
            let key = path.strip_prefix(dir).expect("under the lake");
            key.to_string_lossy().into_owned()
        })
        .collect();
    keys.sort();
    keys
}

/// A key as S3 writes it into an event notification: URL-encoded, a space as `+`.
fn notification_key(key: &str) -> String {
    let mut encoded = String::new();
    for byte in key.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                encoded.push(char::from(byte))
            }
            b' ' => encoded.push('+'),
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

/// An S3 notification of one object-created record (`events/s3-put-encoded-keys.json`'s
/// first, renamed), for `key` of `bucket`.
fn s3_notification(event_name: &str, bucket: &str, key: &str) -> Value {
    let mut event = load("s3-put-encoded-keys.json");
    let mut record = event["Records"][0].clone();
    record["eventName"] = Value::from(event_name);
    record["s3"]["bucket"]["name"] = Value::from(bucket);
    record["s3"]["bucket"]["arn"] = Value::from(format!("arn:aws:s3:::{bucket}"));
    record["s3"]["object"]["key"] = Value::from(notification_key(key));
    event["Records"] = Value::Array(vec![record]);
    event
}

/// EventBridge's "Object Created" for `key` of `bucket` (keys plain, not encoded).
fn eventbridge_object_created(bucket: &str, key: &str) -> Value {
    let mut event = load("eventbridge-object-created.json");
    event["resources"] = Value::Array(vec![Value::from(format!("arn:aws:s3:::{bucket}"))]);
    event["detail"]["bucket"]["name"] = Value::from(bucket);
    event["detail"]["object"]["key"] = Value::from(key);
    event["detail"]["reason"] = Value::from("PutObject");
    event
}

/// Uploads every file of the local lake `dir` under the store's root, as its writer does:
/// Firehose in parts (its objects end with `CompleteMultipartUpload`), the others in one PUT.
async fn upload_lake(store: &Store, dir: &Path, multipart: bool) -> Vec<String> {
    let keys = keys_under(dir);
    for key in &keys {
        let bytes = std::fs::read(dir.join(key)).expect("a written file");
        let path = object_store::path::Path::from(key.as_str());
        if multipart {
            let mut upload = (store.object_store().put_multipart(&path).await)
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            upload
                .put_part(bytes.into())
                .await
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            upload
                .complete()
                .await
                .unwrap_or_else(|e| panic!("{key}: {e}"));
        } else {
            (store.object_store().put(&path, bytes.into()).await)
                .unwrap_or_else(|e| panic!("{key}: {e}"));
        }
    }
    keys
}

/// (rows matched, row groups scanned, row groups in all) of `query --where filter` over the
/// hour, with the lake's flags.
fn matched(url: &str, flags: &[String], filter: &str) -> (u64, u64, u64) {
    let mut args: Vec<&str> = vec!["query", "--store", url];
    args.extend(flags.iter().map(String::as_str));
    args.extend([
        "--where",
        filter,
        "--from",
        "2026-11-29T10:00:00Z",
        "--to",
        "2026-11-29T11:00:00Z",
        "--limit",
        "0",
        "--json",
    ]);
    let stats = cli_json(&args)["stats"].clone();
    let number = |field: &str| {
        stats[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field}: {stats}"))
    };
    (
        number("rows_matched"),
        number("row_groups_scanned"),
        number("row_groups_total"),
    )
}

/// The functions' environment: the lake's settings from its flags, the S3 test server's
/// credentials, a scratch directory in `work`.
fn function_env(url: &str, flags: &[String], work: &Path) -> Vec<(String, String)> {
    let scratch = work.join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut env: Vec<(String, String)> = vec![
        ("OURIOS_STORE".into(), url.into()),
        ("OURIOS_LOG".into(), "info".into()),
        ("OURIOS_MEMORY_BUDGET".into(), "16MiB".into()),
        // Row groups of 100 rows, as the CLI's test of the same lakes asks: enough of them
        // in one hour to prune.
        ("OURIOS_MAX_ROWS_PER_ROW_GROUP".into(), "100".into()),
        ("OURIOS_SCRATCH".into(), scratch.to_string_lossy().into()),
    ];
    for pair in flags.chunks(2) {
        let [flag, value] = pair else {
            panic!("a flag without a value: {flags:?}")
        };
        let (_, variable) = (SETTINGS.iter())
            .find(|(f, _)| f == flag)
            .unwrap_or_else(|| panic!("no function variable for {flag}"));
        env.push((variable.to_string(), value.clone()));
    }
    env.extend(s3_server_env());
    env
}

/// Writes `event` to `dir/<name>.json` for `cargo lambda invoke --data-file`.
fn event_file(dir: &Path, name: &str, event: &Value) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, event.to_string()).expect("event written");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_lakes_are_planned_and_compacted_by_the_deployed_functions() {
    let written_dir = tempfile::tempdir().expect("tempdir");
    let written_root = written_dir.path().to_string_lossy().into_owned();
    let written = writer_lakes(&["write", &written_root]);
    let lakes: Vec<Value> = (written.lines())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(lakes.len(), 4, "{written}");
    let partition = PartitionId::parse_of(None, HOUR).expect("the lakes' hour");

    for lake in &lakes {
        let name = lake["lake"].as_str().expect("a lake");
        let flags: Vec<String> = (lake["flags"].as_array().expect("flags").iter())
            .map(|f| f.as_str().expect("a flag").to_string())
            .collect();
        let url = s3_url(&format!("lambda-lakes-{name}"));
        let StoreUrl::S3 { bucket, prefix } = StoreUrl::parse(&url).expect("an s3 URL") else {
            panic!("{url} is an S3 store");
        };
        let store = Store::open(&url).expect("store opens");
        let lake_dir = written_dir.path().join(name);
        let keys = upload_lake(&store, &lake_dir, name == "firehose").await;
        let bloom = lake["where_bloom"].as_str().expect("a bloom filter");
        let before = matched(&url, &flags, bloom);

        let work = tempfile::tempdir().expect("tempdir");
        let env = function_env(&url, &flags, work.path());
        let emulator = Emulator::start(name, &FUNCTIONS, &env, work.path());

        // The event the writer's last object raises, as AWS sends it.
        let last = format!("{prefix}/{}", keys.last().expect("a file"));
        let event = match name {
            "otel" => eventbridge_object_created(&bucket, &last),
            "firehose" => s3_notification("ObjectCreated:CompleteMultipartUpload", &bucket, &last),
            _ => s3_notification("ObjectCreated:Put", &bucket, &last),
        };
        let seal = event_file(work.path(), "seal", &event);
        let planned = emulator
            .invoke("ourios-planner", &seal)
            .unwrap_or_else(|e| panic!("{name}: planner failed: {e}\n{}", emulator.log_tail()));
        let decided = planned["partitions"].as_array().expect("partitions");
        assert_eq!(decided.len(), 1, "{name}: {planned}");
        assert_eq!(decided[0]["decision"], "dispatched", "{name}: {planned}");
        assert_eq!(decided[0]["tenant"], Value::Null, "{name}: {planned}");

        // The job record's creation starts the compactor.
        let job = format!("{prefix}/{}", job_key(&partition));
        let job_event = event_file(
            work.path(),
            "job",
            &s3_notification("ObjectCreated:Put", &bucket, &job),
        );
        let report = emulator
            .invoke("ourios-compactor", &job_event)
            .unwrap_or_else(|e| panic!("{name}: compactor failed: {e}\n{}", emulator.log_tail()));
        assert_eq!(report["status"], "compacted", "{name}: {report}");
        assert_eq!(
            report["inputs"]["files"],
            keys.len(),
            "every object of the hour, minute directories included: {report}"
        );
        assert_eq!(report["output"]["rows"], lake["rows"], "{name}: {report}");

        // pyarrow reads the compacted files beside the written inputs: every row once, in the
        // lake's key order, `sorting_columns` declared, the time column's type kept.
        let mut files_args: Vec<&str> = vec!["files", "--store", &url, "--hour", HOUR];
        files_args.extend(flags.iter().map(String::as_str));
        files_args.push("--json");
        let files = cli_json(&files_args);
        let live: Vec<String> = (files["live"].as_array().expect("live files").iter())
            .map(|k| k.as_str().expect("a key").to_string())
            .collect();
        assert!(
            !live.is_empty() && live.iter().all(|k| k.starts_with("compacted/")),
            "{name}: {files}"
        );
        for key in &live {
            let bytes = ourios_compaction::testing::get_bytes(&store, key).await;
            let local = lake_dir.join(key);
            std::fs::create_dir_all(local.parent().expect("a directory")).expect("mkdir");
            std::fs::write(&local, bytes).expect("a local copy");
        }
        let mut check = vec!["check", written_root.as_str(), name];
        check.extend(live.iter().map(String::as_str));
        let checked: Value = serde_json::from_str(writer_lakes(&check).trim()).expect("JSON");
        assert_eq!(checked["rows"], lake["rows"], "{name}: {checked}");

        // A query by a bloom column finds the same rows in fewer row groups.
        let after = matched(&url, &flags, bloom);
        assert!(before.0 > 0, "{name}: {bloom} matches rows");
        assert_eq!(after.0, before.0, "{name}: {bloom}: the same rows after");
        assert!(
            after.1 < before.1,
            "{name}: {bloom}: row groups read {} of {} after, {} of {} before",
            after.1,
            after.2,
            before.1,
            before.2
        );

        // The event again finds the hour compacted.
        let replay = emulator
            .invoke("ourios-planner", &seal)
            .unwrap_or_else(|e| panic!("{name}: planner failed: {e}\n{}", emulator.log_tail()));
        assert_eq!(
            replay["partitions"][0]["decision"], "nothing_to_compact",
            "{name}: {replay}"
        );
    }
}

//! Both functions end to end under cargo-lambda's local emulator, against the S3 test server
//! (DESIGN §10): ingest files land, the planner gets their seal event (from `events/`), the
//! compactor gets the job record's event, and the live set is checked row by row.
//!
//! Needs `cargo lambda` on the PATH (`bash tests/run.sh` installs it into .tools/venv) and the
//! S3 server `tests/run.sh` starts. It builds and runs the real function binaries through
//! `cargo lambda watch`, then sends payloads with `cargo lambda invoke --data-file`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use ourios_compaction::events::job_key;
use ourios_compaction::manifest::partition_files;
use ourios_compaction::partition::Layout;
use ourios_compaction::store::{Store, StoreUrl};
use ourios_integration_tests::{assert_exactly_once, land_file, live_tags, s3_url, test_partition};
use serde_json::Value;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `cargo lambda watch` in its own process group, stopped (with the functions it started)
/// when dropped.
struct Emulator {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Emulator {
    fn start(env: &[(String, String)], log_dir: &Path) -> Self {
        // Build each function first (as the emulator's `cargo run --bin` will, so it finds
        // them fresh): the invocations then never wait on a compiler.
        for package in ["ourios-planner", "ourios-compactor"] {
            let mut build = Command::new("cargo");
            build
                .current_dir(workspace_root())
                .args(["build", "-p", package]);
            if !cfg!(debug_assertions) {
                build.arg("--release");
            }
            let status = build.status().expect("cargo build runs");
            assert!(status.success(), "cargo build -p {package} failed");
        }
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().expect("its address").port()
        };
        let log = log_dir.join("cargo-lambda-watch.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new("cargo");
        command
            .current_dir(workspace_root())
            .args(["lambda", "watch", "--ignore-changes"])
            .args([
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file);
        for (key, value) in env {
            command
                .env(key, value)
                .arg("--env-var")
                .arg(format!("{key}={value}"));
        }
        if !cfg!(debug_assertions) {
            // Built like this test (`cargo test --release` in tests/run.sh), so the release
            // dependencies already built are reused.
            command.arg("--release");
        }
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start `cargo lambda watch` ({e}): install cargo-lambda \
                 (`bash tests/run.sh` installs it into .tools/venv and runs this test)"
            )
        });
        let mut emulator = Self { child, port, log };
        emulator.wait_until_listening();
        emulator
    }

    /// Waits (a bounded number of tries) until the emulator accepts connections.
    fn wait_until_listening(&mut self) {
        for _ in 0..600 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("cargo lambda watch exited ({status}):\n{}", self.log_tail());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!(
            "cargo lambda watch never listened on {}:\n{}",
            self.port,
            self.log_tail()
        );
    }

    /// Invokes a function with a payload file; the response, or the error text.
    fn invoke(&self, function: &str, data_file: &Path) -> Result<Value, String> {
        let output = Command::new("cargo")
            .current_dir(workspace_root())
            .args([
                "lambda",
                "invoke",
                function,
                "--invoke-address",
                "127.0.0.1",
            ])
            .args([
                "--invoke-port",
                &self.port.to_string(),
                "--output-format",
                "json",
            ])
            .arg("--data-file")
            .arg(data_file)
            .stdin(Stdio::null())
            .output()
            .expect("cargo lambda invoke runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            return Err(format!(
                "{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        serde_json::from_str(stdout.trim()).map_err(|e| {
            format!(
                "response is not JSON ({e}): {stdout}\nemulator log:\n{}",
                self.log_tail()
            )
        })
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // The whole group: cargo lambda and the function processes it started.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// An `events/` payload with its bucket and keys moved under the test store's root.
fn event_for_store(name: &str, bucket: &str, root_prefix: &str, dir: &Path) -> PathBuf {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).expect("event file reads");
    let mut event: Value = serde_json::from_str(&text).expect("event file is JSON");
    for record in event["Records"].as_array_mut().expect("an S3 event") {
        record["s3"]["bucket"]["name"] = Value::from(bucket);
        record["s3"]["bucket"]["arn"] = Value::from(format!("arn:aws:s3:::{bucket}"));
        let key = record["s3"]["object"]["key"]
            .as_str()
            .expect("a key")
            .to_string();
        record["s3"]["object"]["key"] = Value::from(format!("{root_prefix}/{key}"));
    }
    let out = dir.join(name);
    std::fs::write(&out, event.to_string()).expect("write event");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planner_and_compactor_under_cargo_lambda() {
    let url = s3_url("lambda-e2e");
    let StoreUrl::S3 { bucket, prefix } = StoreUrl::parse(&url).expect("an s3 URL") else {
        panic!("{url} is an S3 store");
    };
    let store = Store::open(&url).expect("store opens");
    let layout = Layout::default();
    let partition = test_partition();
    // The files events/s3-put-encoded-keys.json announces (its keys, decoded).
    let mut tags = std::collections::BTreeSet::new();
    for (i, name) in [
        "batch 0001.parquet",
        "café-0002.parquet",
        "part-0003.parquet",
    ]
    .iter()
    .enumerate()
    {
        tags.extend(land_file(&store, &layout, &partition, name, i as i64 * 1000, 400).await);
    }

    let work = tempfile::tempdir().expect("tempdir");
    let scratch = work.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut env: Vec<(String, String)> = [
        ("OURIOS_STORE", url.as_str()),
        ("OURIOS_LOG", "info"),
        ("OURIOS_MEMORY_BUDGET", "16MiB"),
        ("OURIOS_DEADLINE_MARGIN", "1s"),
        ("OURIOS_SCRATCH", &scratch.to_string_lossy()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for key in [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ALLOW_HTTP",
    ] {
        let value = std::env::var(key)
            .unwrap_or_else(|_| panic!("{key} is not set: run the tests with `bash tests/run.sh`"));
        env.push((key.to_string(), value));
    }
    let emulator = Emulator::start(&env, work.path());

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
    let replay = emulator
        .invoke("ourios-planner", &seal)
        .expect("planner replays");
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
    let files = partition_files(&store, &layout, &partition)
        .await
        .expect("live set");
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
    let late = emulator
        .invoke("ourios-planner", &seal)
        .expect("planner answers");
    assert_eq!(
        late["partitions"][0]["decision"], "nothing_to_compact",
        "{late}"
    );

    // 5. A hostile key fails the invocation loudly, naming it.
    let hostile = event_for_store("s3-hostile-keys.json", &bucket, &prefix, work.path());
    let err = emulator
        .invoke("ourios-planner", &hostile)
        .expect_err("a rejected key fails the invocation");
    assert!(err.contains("hour=25"), "{err}");
}

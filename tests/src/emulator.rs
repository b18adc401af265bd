//! Both functions under cargo-lambda's local emulator (`cargo lambda watch`), invoked with
//! `cargo lambda invoke` or over their function URLs, and `events/` payloads moved into a
//! test store.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use base64::Engine;
use serde_json::Value;

/// The workspace root (where `events/` and `infra/` are).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `cargo lambda watch --only-lambda-apis` in its own process group, serving the Lambda runtime
/// and invoke APIs to function binaries that run as their own processes in that group; all
/// stopped when dropped.
pub struct Emulator {
    child: Child,
    functions: Vec<Child>,
    port: u16,
    log: PathBuf,
}

/// The workspace's function binaries.
pub const FUNCTIONS: [&str; 2] = ["ourios-planner", "ourios-compactor"];

impl Emulator {
    /// Serves `functions` (of [`FUNCTIONS`]) with `env` as their environment; the log of the
    /// emulator and the functions is `<log_dir>/<name>.log`.
    ///
    /// The functions are the workspace's binaries, built here as `cargo test --workspace`
    /// builds them (`--workspace --all-targets`, so with the same features), which reuses what
    /// that build compiled: `cargo lambda watch` would build each function alone, with its own
    /// features, compiling most dependencies again.
    pub fn start(name: &str, functions: &[&str], env: &[(String, String)], log_dir: &Path) -> Self {
        let bin_dir = build_function_binaries();
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().expect("its address").port()
        };
        let log = log_dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new("cargo");
        command
            .current_dir(workspace_root())
            .args(["lambda", "watch", "--only-lambda-apis", "--ignore-changes"])
            .args([
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file.try_clone().expect("log file"));
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start `cargo lambda watch` ({e}): install cargo-lambda \
                 (`bash tests/run.sh` installs it into .tools/venv and runs this test)"
            )
        });
        let mut emulator = Self {
            child,
            functions: Vec::new(),
            port,
            log,
        };
        emulator.wait_until_listening();
        for &function in functions {
            // The variables `cargo lambda watch` gives a function it starts itself, with the
            // runtime API of the function's own name.
            let mut command = Command::new(bin_dir.join(function));
            command
                .envs(env.iter().map(|(k, v)| (k, v)))
                .env("AWS_LAMBDA_FUNCTION_NAME", function)
                .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
                .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "4096")
                .env("AWS_LAMBDA_MAX_CONCURRENCY", "1")
                .env(
                    "AWS_LAMBDA_RUNTIME_API",
                    format!("http://127.0.0.1:{port}/.rt/{function}"),
                )
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().expect("log file"))
                .stderr(log_file.try_clone().expect("log file"));
            std::os::unix::process::CommandExt::process_group(&mut command, emulator.group());
            let child = command
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {function}: {e}"));
            emulator.functions.push(child);
        }
        emulator
    }

    /// The process group of the emulator and the functions.
    fn group(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a process id fits an i32")
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
    pub fn invoke(&self, function: &str, data_file: &Path) -> Result<Value, String> {
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

    /// POSTs `body` to a function's URL, as a webhook (MinIO's) delivers a notification; the
    /// HTTP status and the body parsed as JSON.
    pub async fn post_to_url(&self, function: &str, body: String) -> (u16, Value) {
        let url = format!("http://127.0.0.1:{}/lambda-url/{function}/", self.port);
        let response = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("an HTTP client")
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}\n{}", self.log_tail()));
        let status = response.status().as_u16();
        let text = response.text().await.expect("a response body");
        assert!(
            status != 500,
            "POST {url}: the emulator answered 500 ({text}):\n{}",
            self.log_tail()
        );
        let json = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "POST {url}: {status} answer is not JSON ({e}): {text}\n{}",
                self.log_tail()
            )
        });
        (status, json)
    }

    /// The last lines of the emulator's log (the functions' logs included).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // The whole group: cargo lambda and the function processes.
        let group = format!("-{}", self.group());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.child.wait();
        for function in &mut self.functions {
            let _ = function.wait();
        }
    }
}

/// Whether cargo sets variable `name` for the tests it runs (not for the builds the test
/// command starts itself).
fn is_set_by_cargo_for_tests(name: &str) -> bool {
    const EXACT: [&str; 8] = [
        "CARGO",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
    ];
    EXACT.contains(&name)
        || ["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_CFG_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// Builds the workspace's binaries and test targets in this test's profile and returns the
/// directory of the binaries (this test executable's `target/<profile dir>`).
fn build_function_binaries() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's executable");
    // target/<profile dir>/deps/<test> -> target/<profile dir>
    let bin_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile dir>/deps")
        .to_path_buf();
    let profile = match bin_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(dir) => dir.to_string(),
        None => panic!("no profile directory in {}", exe.display()),
    };
    let mut build = Command::new("cargo");
    build.current_dir(workspace_root()).args([
        "build",
        "--workspace",
        "--all-targets",
        "--profile",
        &profile,
    ]);
    // Without the variables cargo set for this test (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`,
    // ...): build scripts that watch them (ring's) would see them changed since the test
    // command's own build and rebuild, with everything above them, twice a run.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_set_by_cargo_for_tests) {
            build.env_remove(&name);
        }
    }
    let status = build.status().expect("cargo build runs");
    assert!(
        status.success(),
        "cargo build --workspace --all-targets failed"
    );
    for function in FUNCTIONS {
        assert!(
            bin_dir.join(function).is_file(),
            "{function} was not built in {}",
            bin_dir.display()
        );
    }
    bin_dir
}

/// The S3 test server's settings `bash tests/run.sh` exports (endpoint, region, credentials),
/// as a function's environment needs them.
pub fn s3_server_env() -> Vec<(String, String)> {
    [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ALLOW_HTTP",
    ]
    .iter()
    .map(|key| {
        let value = std::env::var(key)
            .unwrap_or_else(|_| panic!("{key} is not set: run the tests with `bash tests/run.sh`"));
        (key.to_string(), value)
    })
    .collect()
}

/// An `events/` payload with its bucket and keys moved under a store root `s3://bucket/root`,
/// written to `dir`: S3 and MinIO notifications, EventBridge "Object Created" events, and
/// function-URL requests holding a notification, each key kept in the encoding it arrives in
/// (other payloads, a sweep or a backfill, name no key and stay as they are).
pub fn event_for_store(name: &str, bucket: &str, root: &str, dir: &Path) -> PathBuf {
    let out = dir.join(name);
    let event = move_event(load(name), bucket, root);
    std::fs::write(&out, event.to_string()).expect("write event");
    out
}

/// Lands the ingest files `events/s3-put-encoded-keys.json` announces (its keys, decoded) in
/// the partition, 400 rows each, and returns their tags.
pub async fn land_announced_files(
    store: &ourios_compaction::store::Store,
    layout: &ourios_compaction::partition::KeyLayout,
    partition: &ourios_compaction::partition::PartitionId,
) -> std::collections::BTreeSet<i64> {
    let mut tags = std::collections::BTreeSet::new();
    let names = [
        "batch 0001.parquet",
        "café-0002.parquet",
        "part-0003.parquet",
    ];
    for (i, name) in names.iter().enumerate() {
        let first_tag = i as i64 * 1000;
        tags.extend(crate::land_file(store, layout, partition, name, first_tag, 400).await);
    }
    tags
}

/// An `events/` payload, parsed.
pub fn load(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).expect("event file reads");
    serde_json::from_str(&text).expect("event file is JSON")
}

/// The payload moved under `s3://bucket/root` (see [`event_for_store`]).
pub fn move_event(mut event: Value, bucket: &str, root: &str) -> Value {
    assert!(
        root.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)),
        "root {root:?} needs no encoding in a key"
    );
    if event.get("requestContext").is_some() {
        // A function-URL request: the notification is its body, perhaps base64.
        let base64 = event["isBase64Encoded"] == Value::Bool(true);
        let body = event["body"].as_str().expect("a request body");
        let body = if base64 {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(body)
                .expect("a base64 body");
            String::from_utf8(bytes).expect("a UTF-8 body")
        } else {
            body.to_string()
        };
        let inner = move_event(
            serde_json::from_str(&body).expect("a JSON body"),
            bucket,
            root,
        )
        .to_string();
        event["body"] = Value::from(if base64 {
            base64::engine::general_purpose::STANDARD.encode(inner)
        } else {
            inner
        });
        return event;
    }
    if let Some(detail) = event
        .get_mut("detail")
        .filter(|d| d.get("object").is_some())
    {
        // EventBridge "Object Created".
        detail["bucket"]["name"] = Value::from(bucket);
        let key = detail["object"]["key"].as_str().expect("a key").to_string();
        detail["object"]["key"] = Value::from(format!("{root}/{key}"));
        return event;
    }
    if let Some(key) = event.get("Key").and_then(Value::as_str) {
        // MinIO's top-level `Key`: `bucket/key`, decoded.
        let (_, key) = key.split_once('/').expect("a MinIO Key is bucket/key");
        event["Key"] = Value::from(format!("{bucket}/{root}/{key}"));
    }
    let records = event.get_mut("Records").and_then(Value::as_array_mut);
    for record in records.into_iter().flatten() {
        // MinIO encodes `/` in keys as %2F; S3 leaves it.
        let root = if record["eventSource"] == "minio:s3" {
            format!("{}%2F", root.replace('/', "%2F"))
        } else {
            format!("{root}/")
        };
        let s3 = &mut record["s3"];
        s3["bucket"]["name"] = Value::from(bucket);
        s3["bucket"]["arn"] = Value::from(format!("arn:aws:s3:::{bucket}"));
        let key = s3["object"]["key"].as_str().expect("an S3 record's key");
        s3["object"]["key"] = Value::from(format!("{root}{key}"));
    }
    event
}

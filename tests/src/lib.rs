//! What only the integration tests need: the S3 test server's store and the release CLI. The
//! fixtures they share with every other test crate (landing tagged ingest files, reading back
//! every live row's tag) live in `ourios_compaction::testing`, re-exported here.

use ourios_compaction::store::Store;
pub use ourios_compaction::testing::{
    all_keys, assert_conflict, assert_exactly_once, assert_live_exactly_once, commit_request,
    compact_expecting, dispatch_at, dispatched, file_tags, land_file, land_files, live_set,
    live_tags, open_memory, query_hour_args, run_job, test_hour_closed, test_partition,
    test_partition_on,
};

pub mod emulator;

/// The variable `tests/run.sh` sets to the S3 test server's endpoint.
pub const S3_ENDPOINT_ENV: &str = "OURIOS_TEST_S3_ENDPOINT";
/// The variable naming the test bucket (created by `tests/run.sh`).
pub const S3_BUCKET_ENV: &str = "OURIOS_TEST_S3_BUCKET";
/// The variable `tests/run.sh` sets to the release CLI binary.
pub const CLI_BIN_ENV: &str = "OURIOS_COMPACT_BIN";

/// The S3 test server's endpoint. Panics (the test fails, it never skips) when the tests
/// were not started by `bash tests/run.sh`, which starts the server and sets the variables.
pub fn s3_endpoint() -> String {
    let endpoint = std::env::var(S3_ENDPOINT_ENV).unwrap_or_else(|_| {
        panic!(
            "{S3_ENDPOINT_ENV} is not set: the S3 integration tests need the S3-compatible test \
             server; run them with `bash tests/run.sh` (it starts MinIO or moto on 127.0.0.1 and \
             sets {S3_ENDPOINT_ENV}, AWS_ENDPOINT_URL, the credentials and the bucket)"
        )
    });
    assert!(
        endpoint.starts_with("http://127.0.0.1:") || std::env::var("S3_ENDPOINT").is_ok(),
        "{S3_ENDPOINT_ENV}={endpoint}: the tests only talk to a server on 127.0.0.1"
    );
    assert_eq!(
        std::env::var("AWS_ENDPOINT_URL").ok().as_deref(),
        Some(endpoint.as_str()),
        "AWS_ENDPOINT_URL must point at the test server too (tests/run.sh exports both)"
    );
    endpoint
}

/// Puts objects holding `body` at `keys` under the S3 store root `url` with boto3, as a writer
/// in another language puts them: keys that no HTTP client built on URLs can send (a `.`
/// segment is resolved by `url::Url`, which reqwest and object_store parse every request with)
/// land as they are. Uses the Python of `tests/run.sh` (`OURIOS_PYTHON`).
pub fn put_with_boto3(url: &str, keys: &[String], body: &[u8]) {
    let endpoint = s3_endpoint();
    let (bucket, root) = url
        .strip_prefix("s3://")
        .and_then(|rest| rest.split_once('/'))
        .unwrap_or_else(|| panic!("{url} is not s3://bucket/root"));
    let python = std::env::var("OURIOS_PYTHON").unwrap_or_else(|_| {
        panic!("OURIOS_PYTHON is not set: run the tests with `bash tests/run.sh` (boto3 is pinned in tests/requirements.txt)")
    });
    const PUT: &str = "import sys, boto3\n\
        s3 = boto3.client('s3', endpoint_url=sys.argv[1])\n\
        for key in sys.argv[4:]:\n    \
            s3.put_object(Bucket=sys.argv[2], Key=key, Body=sys.argv[3].encode())\n";
    let full: Vec<String> = keys.iter().map(|k| format!("{root}/{k}")).collect();
    let status = std::process::Command::new(&python)
        .args(["-c", PUT, &endpoint, bucket, &String::from_utf8_lossy(body)])
        .args(&full)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(status.success(), "boto3 could not put {keys:?} ({status})");
}

/// A fresh `s3://bucket/<name>-<random>` store root on the test server, so tests running
/// at once never see each other's objects.
pub fn s3_url(name: &str) -> String {
    s3_endpoint();
    let bucket = std::env::var(S3_BUCKET_ENV).unwrap_or_else(|_| "ourios-test".to_string());
    format!("s3://{bucket}/{name}-{:016x}", rand::random::<u64>())
}

/// Opens a fresh store root on the S3 test server.
pub fn open_s3(name: &str) -> Store {
    Store::open(&s3_url(name)).expect("the S3 test store opens")
}

/// Where a test runs: a fresh in-memory store or a fresh root on the S3 test server (one
/// test case each, so both run the same body).
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    /// [`open_memory`].
    Memory,
    /// [`open_s3`].
    S3,
}

impl Backend {
    /// A fresh store of this kind; `name` starts the S3 root's name.
    pub fn open(self, name: &str) -> Store {
        match self {
            Self::Memory => open_memory(),
            Self::S3 => open_s3(name),
        }
    }
}

/// The CLI binary: `OURIOS_COMPACT_BIN` (`tests/run.sh` builds it and sets it), else the one
/// beside this test's profile directory (`target/<profile>/ourios-compact`).
pub fn cli_bin() -> std::path::PathBuf {
    let path = std::env::var(CLI_BIN_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            // target/<profile>/deps/<test> -> target/<profile>/ourios-compact
            let exe = std::env::current_exe().expect("the test's executable");
            exe.parent()
                .and_then(std::path::Path::parent)
                .map(|dir| dir.join("ourios-compact"))
                .expect("the test runs from target/<profile>/deps")
        });
    assert!(
        path.is_file(),
        "the CLI binary {} is missing: run `bash tests/run.sh` (it builds it and sets {CLI_BIN_ENV})",
        path.display()
    );
    path
}

/// Runs the CLI, expects success, and parses its JSON output.
pub fn cli_json(args: &[&str]) -> serde_json::Value {
    cli_json_with_env(args, &[])
}

/// [`cli_json`] with `env` variables set (or overridden) for the CLI process.
pub fn cli_json_with_env(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let output = ourios_compaction::testing::run_cli(&cli_bin(), args, env);
    assert!(
        output.status.success(),
        "ourios-compact {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    ourios_compaction::testing::stdout_json(&output)
}

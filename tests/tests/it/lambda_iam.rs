//! The functions with exactly their roles' permissions from `infra/template.yaml`, on an S3
//! test server that enforces them (`tests/iam/s3_iam_server.py`: moto with IAM enforcement on,
//! one user per role whose policy is the role's S3 statements rendered for the test bucket and
//! root prefix). The planner and the compactor run end to end under `cargo lambda watch`, each
//! with its role's credentials, fed every delivery shape they take (S3, EventBridge and MinIO
//! notifications, a recorded function-URL request, and MinIO's webhook POST to the function's
//! URL); and a missing key is 404 only to a caller that may list it, 403 otherwise, as on S3.
//!
//! The server records every request it refuses; a refusal fails the test naming the action
//! and the key, even when the function took the refusal in its stride.
//!
//! Needs the Python of `tests/run.sh` (OURIOS_PYTHON: moto and cfn-lint, pinned in
//! tests/requirements.txt) and `cargo lambda`. Each test starts its own server on a free
//! loopback port and stops it when it ends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStoreExt, PutPayload};
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::partition::job_key;
use ourios_compaction::serverless::dispatch::job::read_job;
use ourios_compaction::store::Store;
use ourios_compaction::testing::get_bytes;
use ourios_integration_tests::emulator::{
    Emulator, event_for_store, land_announced_files, load, move_event, workspace_root,
};
use ourios_integration_tests::{
    all_keys, assert_exactly_once, land_file, live_set, live_tags, test_partition,
};
use serde_json::{Value, json};

const BUCKET: &str = "ourios-iam";
/// A root prefix, so the template's `HasRootPrefix` branches are the ones enforced.
const ROOT: &str = "lake/raw";
/// How long the functions let a late file wait before its merge.
const LATE_WAIT: std::time::Duration = std::time::Duration::from_secs(8);

/// The enforcing server, stopped when dropped.
struct IamServer {
    child: Child,
    config: Value,
    dir: tempfile::TempDir,
}

impl IamServer {
    /// Starts the server with the roles' users, `admin`, and `extra` users (name, policy).
    fn start(extra: &[(&str, Value)]) -> Self {
        let python = std::env::var("OURIOS_PYTHON").unwrap_or_else(|_| {
            panic!(
                "OURIOS_PYTHON is not set: run the tests with `bash tests/run.sh` (it installs \
                 moto and cfn-lint pinned into .tools/venv and sets OURIOS_PYTHON)"
            )
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = dir.path().join("server.json");
        let log = dir.path().join("server.log");
        let log_file = std::fs::File::create(&log).expect("server log");
        let mut command = Command::new(&python);
        command
            .arg(workspace_root().join("tests/iam/s3_iam_server.py"))
            .args(["--bucket", BUCKET, "--root-prefix", ROOT, "--config"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("server log"))
            .stderr(log_file);
        for (name, policy) in extra {
            let file = dir.path().join(format!("{name}.json"));
            std::fs::write(&file, policy.to_string()).expect("policy file");
            command
                .arg("--user")
                .arg(format!("{name}={}", file.display()));
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {python} tests/iam/s3_iam_server.py: {e}"));
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        for _ in 0..600 {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "the IAM-enforcing S3 server exited ({status}):\n{}",
                    read_log()
                );
            }
            if let Ok(text) = std::fs::read_to_string(&config_path) {
                let config: Value = serde_json::from_str(&text).expect("server config is JSON");
                let endpoint = config["endpoint"]
                    .as_str()
                    .expect("an endpoint")
                    .to_string();
                let address = endpoint.trim_start_matches("http://").to_string();
                for _ in 0..100 {
                    if std::net::TcpStream::connect(&address).is_ok() {
                        return Self { child, config, dir };
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                panic!(
                    "the IAM-enforcing S3 server never listened on {endpoint}:\n{}",
                    read_log()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the IAM-enforcing S3 server did not start:\n{}", read_log());
    }

    fn endpoint(&self) -> String {
        self.config["endpoint"]
            .as_str()
            .expect("an endpoint")
            .to_string()
    }

    fn credentials(&self, user: &str) -> (String, String) {
        let user_config = &self.config["users"][user];
        let field = |name: &str| {
            user_config[name]
                .as_str()
                .unwrap_or_else(|| panic!("no {name} for user {user}"))
                .to_string()
        };
        (field("access_key_id"), field("secret_access_key"))
    }

    /// The store root as `user` sees it.
    fn store(&self, user: &str) -> Store {
        let (key, secret) = self.credentials(user);
        ourios_compaction::store::tls::install_crypto_provider();
        let s3 = AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_bucket_name(BUCKET)
            .with_region("us-east-1")
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .build()
            .expect("an S3 client");
        Store::from_object_store(
            Arc::new(PrefixStore::new(s3, ROOT)),
            &format!("s3://{BUCKET}/{ROOT}"),
        )
    }

    /// A function's environment: the store, the server, and `user`'s credentials.
    fn function_env(&self, user: &str, scratch: &Path) -> Vec<(String, String)> {
        let (key, secret) = self.credentials(user);
        [
            ("OURIOS_STORE", format!("s3://{BUCKET}/{ROOT}")),
            ("OURIOS_LOG", "info".to_string()),
            ("OURIOS_MEMORY_BUDGET", "16MiB".to_string()),
            ("OURIOS_DEADLINE_MARGIN", "1s".to_string()),
            ("OURIOS_SCRATCH", scratch.to_string_lossy().into_owned()),
            // GC deletes retired inputs as soon as it runs, so its deletes are enforced too.
            ("OURIOS_GC_GRACE", "0s".to_string()),
            // Late files wait eight seconds whatever their size: checked first, merged by the
            // sweep after (a check ends well within the wait, even on a loaded machine).
            ("OURIOS_LATE_WAIT", format!("{}s", LATE_WAIT.as_secs())),
            ("OURIOS_LATE_SHARE", "10".to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ENDPOINT_URL_S3", self.endpoint()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_ACCESS_KEY_ID", key),
            ("AWS_SECRET_ACCESS_KEY", secret),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Every request the server refused so far: user, action, resource and why.
    fn denials(&self) -> Vec<String> {
        let path = self.config["denials"].as_str().expect("a denials file");
        std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Fails the test with what went wrong and every refused request.
    fn fail(&self, what: &str, detail: &str) -> ! {
        panic!(
            "{what}: {detail}\nrequests the server refused:\n{}",
            self.denials().join("\n")
        )
    }

    fn work_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for IamServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The function-URL body MinIO's webhook posts: an `events/` MinIO notification moved into
/// the test store.
fn minio_webhook_body(name: &str) -> String {
    move_event(load(name), BUCKET, ROOT).to_string()
}

/// Asserts that an object store call failed as not found (404).
fn assert_not_found<T: std::fmt::Debug>(got: &object_store::Result<T>) {
    assert!(
        matches!(got, Err(object_store::Error::NotFound { .. })),
        "{got:?}"
    );
}

/// Asserts that an object store call was denied (403).
fn assert_denied<T: std::fmt::Debug>(got: &object_store::Result<T>) {
    assert!(
        matches!(got, Err(object_store::Error::PermissionDenied { .. })),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_work_end_to_end_with_exactly_their_roles_permissions() {
    let server = IamServer::start(&[]);
    let admin = server.store("admin");
    let layout = KeyLayout::default();
    let partition = test_partition();
    let mut tags = land_announced_files(&admin, &layout, &partition).await;

    let work = server.work_dir();
    let scratch = work.join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    // Each function under its own role's credentials, alone in its emulator.
    let planner = Emulator::start(
        "planner",
        &["ourios-planner"],
        &server.function_env("planner", &scratch),
        &work,
    );
    let compactor = Emulator::start(
        "compactor",
        &["ourios-compactor"],
        &server.function_env("compactor", &scratch),
        &work,
    );
    let event = |name: &str| event_for_store(name, BUCKET, ROOT, &work);
    let invoke = |emulator: &Emulator, function: &str, name: &str| {
        emulator.invoke(function, &event(name)).unwrap_or_else(|e| {
            server.fail(
                &format!("{function} with events/{name}"),
                &format!("{e}\n{}", emulator.log_tail()),
            )
        })
    };
    let has_job = async || all_keys(&admin).await.contains(&job_key(&partition));

    // 1. S3 notifications: the planner dispatches, the compactor (EventBridge) compacts.
    let planned = invoke(&planner, "ourios-planner", "s3-put-encoded-keys.json");
    assert_eq!(
        planned["partitions"][0]["decision"], "dispatched",
        "{planned}"
    );
    assert!(has_job().await, "job record written");
    let report = invoke(
        &compactor,
        "ourios-compactor",
        "compactor-job-eventbridge.json",
    );
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(report["inputs"]["files"], 3, "{report}");
    assert!(!has_job().await, "job record deleted");

    // 2. A late file; MinIO's webhook posts its notification to each function's URL. It waits
    // for the late-file policy: the job checks it and merges nothing.
    tags.extend(land_file(&admin, &layout, &partition, "late-0004.parquet", 5000, 300).await);
    let (status, planned) = planner
        .post_to_url("ourios-planner", minio_webhook_body("minio-put.json"))
        .await;
    assert_eq!(status, 200, "{planned}");
    assert_eq!(
        planned["partitions"][0]["decision"], "dispatched",
        "{planned}"
    );
    assert_eq!(
        planned["partitions"][0]["late"]["action"], "check",
        "{planned}"
    );
    assert!(has_job().await, "job record written");
    let job_created = load("function-url-minio-job-created.json");
    let body = job_created["body"].as_str().expect("a request body");
    let body = move_event(serde_json::from_str(body).expect("JSON"), BUCKET, ROOT);
    let (status, report) = compactor
        .post_to_url("ourios-compactor", body.to_string())
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["status"], "noop", "{report}");
    assert_eq!(report["late_check"]["checked"], 1, "{report}");
    assert!(!has_job().await, "job record deleted");

    // 3. Another late file; recorded function-URL requests (a base64 S3 notification, a MinIO
    // one), a MinIO notification and an encoded EventBridge event invoked directly, then the
    // job record's S3 notification.
    tags.extend(land_file(&admin, &layout, &partition, "late-0005.parquet", 6000, 300).await);
    let url_decision = |name: &str| {
        let answer = invoke(&planner, "ourios-planner", name);
        assert_eq!(answer["statusCode"], 200, "{name}: {answer}");
        let body = answer["body"].as_str().expect("a body");
        let planned: Value = serde_json::from_str(body).expect("a JSON body");
        planned["partitions"][0]["decision"].clone()
    };
    assert_eq!(url_decision("function-url-s3-base64.json"), "dispatched");
    assert_eq!(url_decision("function-url-minio-put.json"), "job_active");
    for name in ["minio-put.json", "eventbridge-object-created-encoded.json"] {
        let replay = invoke(&planner, "ourios-planner", name);
        assert_eq!(
            replay["partitions"][0]["decision"], "job_active",
            "{name}: {replay}"
        );
    }
    let report = invoke(&compactor, "ourios-compactor", "compactor-job-created.json");
    assert_eq!(report["status"], "noop", "{report}");
    assert_eq!(
        report["late_check"]["checked"], 1,
        "the new late file only: {report}"
    );
    // Once the first has waited, the sweep (listing the partitions with late files waiting)
    // dispatches their merge. A check that ended after the wait had passed (a loaded machine)
    // re-armed the record for the merge instead, as its own write's event would run it: the
    // sweep then finds that job scheduled.
    let re_armed = has_job().await;
    tokio::time::sleep(LATE_WAIT + std::time::Duration::from_millis(200)).await;
    let swept = invoke(
        &planner,
        "ourios-planner",
        "eventbridge-scheduled-sweep.json",
    );
    let decided = |decision: &str| -> Vec<&Value> {
        (swept["partitions"].as_array().into_iter().flatten())
            .filter(|p| p["decision"] == decision)
            .collect()
    };
    if re_armed {
        assert_eq!(decided("job_active").len(), 1, "{swept}");
        assert!(decided("dispatched").is_empty(), "{swept}");
    } else {
        let merges = decided("dispatched");
        assert_eq!(merges.len(), 1, "{swept}");
        assert_eq!(merges[0]["late"]["action"], "merge", "{swept}");
    }
    let report = invoke(&compactor, "ourios-compactor", "compactor-job-created.json");
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(
        report["inputs"]["files"], 3,
        "the output and both late files: {report}"
    );

    // 4. Every row live exactly once, in one compacted file; no job record left.
    let files = live_set(&admin, &layout, &partition).await;
    assert_eq!(files.live.len(), 1, "one compacted file: {:?}", files.live);
    let live = live_tags(&admin, &layout, &partition).await;
    assert_exactly_once(
        &live,
        &tags,
        "after two compactions and two checks under IAM",
    );
    assert!(!has_job().await, "no job record left");
    // GC (grace 0s) deleted every retired input and replaced output under the compactor's role.
    let keys = all_keys(&admin).await;
    assert!(
        keys.iter().all(|k| !k.starts_with("data/")),
        "retired inputs deleted: {keys:?}"
    );
    let outputs = keys.iter().filter(|k| k.starts_with("compacted/")).count();
    assert_eq!(outputs, 1, "replaced outputs deleted: {keys:?}");

    // 5. The sweep (tenant listing, its cursor) and a backfill find nothing left to do.
    let swept = invoke(
        &planner,
        "ourios-planner",
        "eventbridge-scheduled-sweep.json",
    );
    assert!(swept["partitions"].is_array(), "{swept}");
    let backfill = invoke(&planner, "ourios-planner", "backfill.json");
    assert_eq!(backfill["scheduled"], 0, "{backfill}");
    assert_eq!(backfill["considered"], 4, "{backfill}");

    let denials = server.denials();
    assert!(
        denials.is_empty(),
        "the template's roles lack permissions the functions use (user, action, resource):\n{}",
        denials.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_is_404_only_to_a_caller_that_may_list_it() {
    let read_metadata = json!({
        "Effect": "Allow",
        "Action": "s3:GetObject",
        "Resource": format!("arn:aws:s3:::{BUCKET}/{ROOT}/_compaction/*"),
    });
    let lists_jobs = json!({"Version": "2012-10-17", "Statement": [read_metadata, {
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": format!("arn:aws:s3:::{BUCKET}"),
        "Condition": {"StringLike": {"s3:prefix": [format!("{ROOT}/_compaction/jobs/*")]}},
    }]});
    let lists_nothing = json!({"Version": "2012-10-17", "Statement": [read_metadata]});
    let server = IamServer::start(&[("lists_jobs", lists_jobs), ("lists_nothing", lists_nothing)]);
    let partition = test_partition();
    let job = object_store::path::Path::from(job_key(&partition));
    let manifest = object_store::path::Path::from("_compaction/manifests/missing.json");

    // ListBucket limited by s3:prefix: 404 under the prefix, 403 outside it.
    let store = server.store("lists_jobs");
    assert_not_found(&store.object_store().get(&job).await);
    assert_not_found(&store.object_store().head(&job).await);
    assert_denied(&store.object_store().get(&manifest).await);
    assert!(read_job(&store, &partition).await.expect("read").is_none());

    // No ListBucket: 403 for the missing job record, which read_job takes as absent; an
    // existing object still reads.
    let store = server.store("lists_nothing");
    assert_denied(&store.object_store().get(&job).await);
    assert!(read_job(&store, &partition).await.expect("read").is_none());
    server
        .store("admin")
        .object_store()
        .put(&manifest, PutPayload::from_static(b"{}"))
        .await
        .expect("admin writes");
    assert_eq!(&get_bytes(&store, manifest.as_ref()).await[..], b"{}");

    // The planner's role: job records are listable (404), and it deletes nothing.
    let planner = server.store("planner");
    assert_not_found(&planner.object_store().head(&job).await);
    // (object_store deletes with DeleteObjects, which refuses each key inside a 200.)
    let deleted = planner.object_store().delete(&manifest).await;
    assert!(
        deleted
            .as_ref()
            .is_err_and(|e| format!("{e:?}").contains("AccessDenied")),
        "{deleted:?}"
    );

    let denials = server.denials().join("\n");
    let full = |key: &str| format!("arn:aws:s3:::{BUCKET}/{ROOT}/{key}");
    for (user, action, key) in [
        ("lists_jobs", "s3:GetObject", manifest.as_ref()),
        ("lists_nothing", "s3:GetObject", job.as_ref()),
        ("planner", "s3:DeleteObject", manifest.as_ref()),
    ] {
        let resource = full(key);
        assert!(
            denials.lines().any(|line| {
                let d: Value = serde_json::from_str(line).expect("a JSON line");
                d["user"] == user && d["action"] == action && d["resource"] == resource
            }),
            "{user} {action} {resource} is recorded as refused:\n{denials}"
        );
    }
}

//! A store wrapper that records every operation with its key or prefix, to check them against a
//! role of `infra/template.yaml` as IAM applies it to S3.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetResult, ListResult, ObjectStore, PutResult};

use crate::store::hooked::{
    CopyRequest, GetRequest, HookedStore, Inner, ListRequest, MetaStream, PathStream, PutRequest,
    StoreHooks, StoreResult, Upload, UploadRequest,
};

/// One store operation as IAM sees it: the S3 action and the key (or listing prefix).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Operation {
    /// `get`, `head`, `put`, `put_multipart`, `delete`, `list`, `list_with_delimiter`, `copy`.
    pub operation: &'static str,
    /// The key, or the listing prefix (with its trailing `/`, as S3 receives it).
    pub key: String,
}

/// The operations a [`RecordingStore`] saw, each once.
pub type OperationLog = Mutex<BTreeSet<Operation>>;

/// Records `operation` on `key`.
fn record(log: &OperationLog, operation: &'static str, key: String) {
    if let Ok(mut log) = log.lock() {
        log.insert(Operation { operation, key });
    }
}

/// The prefix S3 receives for an object_store listing of `prefix`.
fn list_prefix(prefix: Option<&Path>) -> String {
    match prefix {
        Some(p) if !p.as_ref().is_empty() => format!("{p}/"),
        _ => String::new(),
    }
}

#[async_trait::async_trait]
impl StoreHooks for Arc<OperationLog> {
    const NAME: &'static str = "RecordingStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> StoreResult<PutResult> {
        record(self, "put", put.location.to_string());
        put.forward(inner).await
    }

    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> StoreResult<Upload> {
        record(self, "put_multipart", start.location.to_string());
        start.forward(inner).await
    }

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let operation = if get.options.head { "head" } else { "get" };
        record(self, operation, get.location.to_string());
        get.forward(inner).await
    }

    fn delete(&self, inner: &Inner, locations: PathStream) -> PathStream {
        let log = Arc::clone(self);
        let recorded = locations
            .inspect(move |location| {
                if let Ok(path) = location {
                    record(&log, "delete", path.to_string());
                }
            })
            .boxed();
        inner.delete_stream(recorded)
    }

    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        record(self, "list", list_prefix(list.prefix));
        list.forward(inner)
    }

    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> StoreResult<ListResult> {
        record(self, "list_with_delimiter", list_prefix(prefix));
        inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, inner: &Inner, copy: CopyRequest<'_>) -> StoreResult<()> {
        record(self, "get", copy.from.to_string());
        record(self, "put", copy.to.to_string());
        copy.forward(inner).await
    }
}

/// Wraps a store and records each operation that goes through it.
pub type RecordingStore = HookedStore<Arc<OperationLog>>;

impl RecordingStore {
    /// Wraps `inner`; the returned log is shared with the wrapper.
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Self, Arc<OperationLog>) {
        let log = Arc::new(OperationLog::default());
        (Self::wrap(inner, Arc::new(Arc::clone(&log))), log)
    }
}

/// Checks the operations a function made against its role: each of `kinds` (`get`, `put`,
/// `list`, ...) was made at least once, [`assert_role_permits`] passes, and `role` is refused
/// the operation `refused` names on its key (so the check is not vacuous).
pub fn assert_role_covers(
    role: &str,
    operations: &BTreeSet<Operation>,
    kinds: &[&str],
    refused: (&'static str, &str),
) {
    let names: BTreeSet<&str> = operations.iter().map(|o| o.operation).collect();
    for expected in kinds {
        assert!(
            names.contains(expected),
            "no {expected} recorded: {operations:?}"
        );
    }
    assert_role_permits(role, operations);
    assert_role_refuses(role, refused.0, refused.1);
}

/// Panics unless `role` is refused `operation` on `key`: shows that a check of
/// [`assert_role_permits`] is not vacuous.
pub fn assert_role_refuses(role: &str, operation: &'static str, key: &str) {
    let forbidden = BTreeSet::from([Operation {
        operation,
        key: key.to_string(),
    }]);
    let refused = std::panic::catch_unwind(|| assert_role_permits(role, &forbidden));
    assert!(
        refused.is_err(),
        "{role} may {operation} {key}, which it must not"
    );
}

/// Checks every operation against the statements of `role` in `infra/template.yaml`, for a
/// store at the bucket's root and under a root prefix, with `infra/tests/check_access.py`
/// (which evaluates the template as `test_template.py` does). Each operation needs its S3
/// action on its key; a GET or HEAD also needs `s3:ListBucket` on its key, or S3 answers a
/// missing key with 403 instead of 404. Panics naming each operation and key not allowed.
pub fn assert_role_permits(role: &str, operations: &BTreeSet<Operation>) {
    use std::io::Write;
    assert!(!operations.is_empty(), "no operation recorded for {role}");
    let script = super::events_dir().join("../infra/tests/check_access.py");
    let input = serde_json::json!({ "role": role, "operations": operations }).to_string();
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.as_bytes())
        .expect("operations written to the checker");
    let output = child.wait_with_output().expect("the checker ends");
    assert!(
        output.status.success(),
        "{role} lacks permissions for operations its function makes (needs cfn-lint: pip \
         install cfn-lint):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

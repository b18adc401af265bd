//! Store wrappers for IAM as S3 applies it: one records every operation with its key or prefix,
//! to check them against a role of `infra/template.yaml`; one answers a missing key with 403.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// One store operation as IAM sees it: the S3 action and the key (or listing prefix).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Operation {
    /// `get`, `head`, `put`, `put_multipart`, `delete`, `list`, `list_with_delimiter`, `copy`.
    pub operation: &'static str,
    /// The key, or the listing prefix (with its trailing `/`, as S3 receives it).
    pub key: String,
}

/// Wraps a store and records each operation that goes through it.
#[derive(Debug)]
pub struct RecordingStore {
    inner: Arc<dyn ObjectStore>,
    log: Arc<Mutex<BTreeSet<Operation>>>,
}

impl RecordingStore {
    /// Wraps `inner`; the returned log is shared with the wrapper.
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Self, Arc<Mutex<BTreeSet<Operation>>>) {
        let log = Arc::new(Mutex::new(BTreeSet::new()));
        (
            Self {
                inner,
                log: Arc::clone(&log),
            },
            log,
        )
    }

    fn record(&self, operation: &'static str, key: String) {
        if let Ok(mut log) = self.log.lock() {
            log.insert(Operation { operation, key });
        }
    }
}

/// The prefix S3 receives for an object_store listing of `prefix`.
fn list_prefix(prefix: Option<&Path>) -> String {
    match prefix {
        Some(p) if !p.as_ref().is_empty() => format!("{p}/"),
        _ => String::new(),
    }
}

impl std::fmt::Display for RecordingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordingStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for RecordingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.record("put", location.to_string());
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.record("put_multipart", location.to_string());
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let operation = if options.head { "head" } else { "get" };
        self.record(operation, location.to_string());
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        use futures::StreamExt;
        let log = Arc::clone(&self.log);
        let recorded = locations
            .map(move |location| {
                if let (Ok(path), Ok(mut log)) = (&location, log.lock()) {
                    log.insert(Operation {
                        operation: "delete",
                        key: path.to_string(),
                    });
                }
                location
            })
            .boxed();
        self.inner.delete_stream(recorded)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.record("list", list_prefix(prefix));
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.record("list", list_prefix(prefix));
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.record("list_with_delimiter", list_prefix(prefix));
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.record("get", from.to_string());
        self.record("put", to.to_string());
        self.inner.copy_opts(from, to, options).await
    }
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

/// A store wrapper that answers a GET or HEAD of a missing key with 403 Permission Denied,
/// as S3 does for a caller that may read a key but not list it.
#[derive(Debug)]
pub struct DenyMissingStore {
    inner: Arc<dyn ObjectStore>,
}

impl DenyMissingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self { inner }
    }
}

impl std::fmt::Display for DenyMissingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DenyMissingStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for DenyMissingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        match self.inner.get_opts(location, options).await {
            Err(object_store::Error::NotFound { path, .. }) => {
                Err(object_store::Error::PermissionDenied {
                    path,
                    source: "403 Access Denied (the caller may not list this key)".into(),
                })
            }
            other => other,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

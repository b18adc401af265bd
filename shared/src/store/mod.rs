//! Store construction from a URL, and the few object-store helpers the engine needs.

pub mod aws_api;
pub mod aws_env;
pub mod counting;
pub mod credentials;
pub mod hooked;
pub mod raw_s3;
pub mod request_counts;
pub mod tls;
pub mod upload;

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::AsyncWriteExt;

use crate::cost::RequestCounts;
use crate::error::{Error, Result};
use crate::object_key::ObjectKey;
use crate::settings::{Lookup, process_env};
use crate::store::raw_s3::{ConditionalDelete, RawS3, addressable};
use crate::store::request_counts::{RequestCounters, RequestCountingStore};

/// A parsed store root URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `s3://bucket[/prefix]`, configured from the standard AWS environment.
    S3 {
        /// The bucket name.
        bucket: String,
        /// The key prefix under which the layout lives (may be empty).
        prefix: String,
    },
    /// `file:///abs/dir` or a plain directory path.
    Local(PathBuf),
    /// `memory://`: an in-process store (tests).
    Memory,
}

impl StoreUrl {
    /// Parses `s3://bucket/prefix`, `file:///abs/dir`, `memory://` or a plain directory path.
    pub fn parse(raw: &str) -> Result<Self> {
        let bad = |why: &str| Error::Config {
            message: format!("store {raw:?}: {why}"),
        };
        if raw.is_empty() {
            return Err(bad("empty store URL"));
        }
        if let Some(rest) = raw.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad(
                    "s3:// URL needs a bucket, e.g. s3://logs-bucket/prefix",
                ));
            }
            let prefix = prefix.trim_matches('/');
            if prefix.split('/').any(|s| s == "..") {
                return Err(bad("prefix may not contain '..'"));
            }
            return Ok(StoreUrl::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
            });
        }
        if raw == "memory://" || raw == "memory:" {
            return Ok(StoreUrl::Memory);
        }
        if raw.starts_with("file://") {
            let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
            let path = url
                .to_file_path()
                .map_err(|()| bad("file:// URL must hold an absolute path"))?;
            return Ok(StoreUrl::Local(path));
        }
        if raw.contains("://") {
            return Err(bad("supported schemes are s3://, file:// and memory://"));
        }
        Ok(StoreUrl::Local(PathBuf::from(raw)))
    }
}

/// A listing of a prefix, sorted by key.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The objects the store can address.
    pub objects: Vec<ObjectMeta>,
    /// Keys under the prefix (relative to the store root) the store cannot address: never
    /// read, retired or deleted. A directory of them counts as one key.
    pub unaddressable: Vec<String>,
}

/// An opened store root: the object store plus where it is, for messages and local reads.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    local_root: Option<PathBuf>,
    /// Raw S3 calls (an S3 store opened from a URL, never wrapped).
    raw: Option<RawS3>,
    display: String,
    /// What a key is appended to for its URL ([`Store::url_of`]).
    root_url: String,
    /// The request counters of a [`Store::counting_requests`] store.
    requests: Option<Arc<RequestCounters>>,
}

/// The URL prefix of the keys of a store whose root URL is `display`: with a `/` to append a
/// key to (`memory://` stays as it is).
fn root_url_of(display: &str) -> String {
    match display.ends_with('/') {
        true => display.to_string(),
        false => format!("{display}/"),
    }
}

impl Store {
    /// Opens a store root URL; a local directory is created if missing.
    pub fn open(url: &str) -> Result<Self> {
        match StoreUrl::parse(url)? {
            StoreUrl::S3 { bucket, prefix } => {
                let builder = aws_env::object_store_builder().with_bucket_name(&bucket);
                let s3 = builder.build().map_err(|e| Error::Config {
                    message: format!("cannot configure S3 for bucket {bucket}: {e}"),
                })?;
                let env: Lookup<'_> = &process_env;
                let endpoint = aws_env::endpoint(env);
                let credentials = s3.credentials().clone();
                let region = aws_env::region(env);
                let raw = RawS3::new(&bucket, &prefix, &region, endpoint.as_deref(), credentials)?;
                let inner: Arc<dyn ObjectStore> = if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(PrefixStore::new(s3, prefix.as_str()))
                };
                let root_url = match prefix.is_empty() {
                    true => format!("s3://{bucket}/"),
                    false => format!("s3://{bucket}/{}/", prefix.trim_end_matches('/')),
                };
                Ok(Self {
                    inner,
                    local_root: None,
                    raw: Some(raw),
                    display: url.to_string(),
                    root_url,
                    requests: None,
                })
            }
            StoreUrl::Local(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| Error::scratch(&dir, e))?;
                let dir = std::fs::canonicalize(&dir).map_err(|e| Error::scratch(&dir, e))?;
                let fs = LocalFileSystem::new_with_prefix(&dir).map_err(|e| Error::Config {
                    message: format!("cannot open local store {}: {e}", dir.display()),
                })?;
                Ok(Self {
                    inner: Arc::new(fs.with_automatic_cleanup(true)),
                    root_url: format!("file://{}/", dir.display()),
                    local_root: Some(dir),
                    raw: None,
                    display: url.to_string(),
                    requests: None,
                })
            }
            StoreUrl::Memory => Ok(Self::from_object_store(
                Arc::new(InMemory::new()),
                "memory://",
            )),
        }
    }

    /// Wraps an existing object store (tests wrap stores to count or inject faults).
    pub fn from_object_store(inner: Arc<dyn ObjectStore>, display: &str) -> Self {
        Self {
            inner,
            local_root: None,
            raw: None,
            display: display.to_string(),
            root_url: root_url_of(display),
            requests: None,
        }
    }

    /// The URL of `key` (relative to the store root) for other engines: `s3://<bucket>/<key
    /// under the root>`, `file://<absolute path>`; the key verbatim, never percent-encoded
    /// (keys are themselves).
    pub fn url_of(&self, key: &str) -> String {
        format!("{}{key}", self.root_url)
    }

    /// The same store seen through a wrapper, keeping local-path knowledge off (the wrapper
    /// must see every read).
    pub fn wrapped(&self, wrap: impl FnOnce(Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore>) -> Self {
        Self {
            inner: wrap(Arc::clone(&self.inner)),
            local_root: None,
            raw: None,
            display: self.display.clone(),
            root_url: self.root_url.clone(),
            requests: self.requests.clone(),
        }
    }

    /// The same store with every request counted by S3 price class
    /// ([`RequestCountingStore`]); a store that already counts is returned as it is (one set
    /// of counters per job, however many layers ask). A local directory is still read and
    /// listed in place, each read counted as the one GET that downloads the file from S3
    /// ([`Store::read_in_place`]) and each listing as its LIST pages.
    pub fn counting_requests(&self) -> Self {
        if self.requests.is_some() {
            return self.clone();
        }
        let (counting, counters) = RequestCountingStore::new(Arc::clone(&self.inner));
        Self {
            inner: Arc::new(counting),
            local_root: self.local_root.clone(),
            raw: self.raw.clone(),
            display: self.display.clone(),
            root_url: self.root_url.clone(),
            requests: Some(counters),
        }
    }

    /// Requests counted so far by a [`Store::counting_requests`] store (zero otherwise).
    pub fn request_counts(&self) -> RequestCounts {
        self.requests
            .as_ref()
            .map(|r| r.snapshot())
            .unwrap_or_default()
    }

    /// The local file of a key to read in place, when the store is a local directory; a
    /// counting store counts it as one GET (the download it stands for on S3).
    pub fn read_in_place(&self, key: &Path) -> Option<PathBuf> {
        let path = self.local_path(key)?;
        if let Some(requests) = &self.requests {
            requests.count_get(key);
        }
        Some(path)
    }

    /// The raw S3 client of an S3 store opened from a URL (it signs as the store's client does).
    pub fn raw_s3(&self) -> Option<&RawS3> {
        self.raw.as_ref()
    }

    /// The underlying object store.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// The local file of a key, when the store is a local directory.
    pub fn local_path(&self, key: &Path) -> Option<PathBuf> {
        self.local_root.as_ref().map(|root| {
            key.parts()
                .fold(root.clone(), |p, part| p.join(part.as_ref()))
        })
    }

    /// Lists every object under a prefix, sorted by key.
    ///
    /// A key the object store cannot represent (an empty `//` segment, a `.` or `..` segment,
    /// an ASCII control character, a local name that is not UTF-8) makes object_store 0.14
    /// fail the whole listing, on S3 and on a local directory alike. Such a key is reported
    /// (a warning naming it, and [`Listing::unaddressable`]) and skipped, and the rest is
    /// listed: a local directory is listed here entry by entry, and an S3 listing that
    /// object_store fails is taken again by raw key ([`RawS3::list`]). Skipping is safe: a
    /// key that cannot be addressed was never read, retired or deleted, so no manifest names
    /// it. Without raw S3 access (a wrapped store) the
    /// object_store error is returned, naming the key.
    pub async fn list(&self, prefix: &Path) -> Result<Listing> {
        let mut listing = match &self.local_root {
            Some(root) => {
                let (root, walked) = (root.clone(), prefix.clone());
                let listed = tokio::task::spawn_blocking(move || list_local(&root, &walked))
                    .await
                    .map_err(|e| Error::invariant(format!("listing task failed: {e}")))??;
                // Walked in place: counted as the listing it stands for on S3.
                if let Some(requests) = &self.requests {
                    requests.count_listing(prefix, listed.objects.len() as u64);
                }
                listed
            }
            None => match self.inner.list(Some(prefix)).try_collect().await {
                Ok(objects) => Listing {
                    objects,
                    unaddressable: Vec::new(),
                },
                Err(e) => match &self.raw {
                    Some(raw) if may_be_unaddressable(&e) => {
                        tracing::info!(prefix = %prefix, error = %e, "listing again by raw key");
                        let listed = raw.list(prefix, false).await?;
                        if let Some(requests) = &self.requests {
                            requests.count_listing(prefix, listed.objects.len() as u64);
                        }
                        Listing {
                            objects: listed.objects,
                            unaddressable: listed.skipped,
                        }
                    }
                    _ => return Err(Error::store("list", prefix, e)),
                },
            },
        };
        listing.objects.sort_by(|a, b| a.location.cmp(&b.location));
        listing.unaddressable.sort();
        Ok(listing)
    }

    /// The objects under a prefix, sorted by key, without the keys skipped ([`Store::list`]).
    pub async fn list_sorted(&self, prefix: &Path) -> Result<Vec<ObjectMeta>> {
        Ok(self.list(prefix).await?.objects)
    }

    /// The child directories of `prefix` (one delimited listing), sorted. A directory name the
    /// object store cannot represent is reported and skipped, as in [`Store::list_sorted`].
    pub async fn list_dirs(&self, prefix: &Path) -> Result<Vec<Path>> {
        let mut dirs = match &self.local_root {
            Some(root) => {
                let (root, walked) = (root.clone(), prefix.clone());
                let dirs = tokio::task::spawn_blocking(move || list_local_dirs(&root, &walked))
                    .await
                    .map_err(|e| Error::invariant(format!("listing task failed: {e}")))??;
                // Walked in place: counted as the delimited listing it stands for on S3.
                if let Some(requests) = &self.requests {
                    requests.count_listing(prefix, dirs.len() as u64);
                }
                dirs
            }
            None => match self.inner.list_with_delimiter(Some(prefix)).await {
                Ok(listing) => listing.common_prefixes,
                Err(e) => match &self.raw {
                    Some(raw) if may_be_unaddressable(&e) => {
                        tracing::info!(prefix = %prefix, error = %e, "listing again by raw key");
                        let listed = raw.list(prefix, true).await?;
                        if let Some(requests) = &self.requests {
                            requests.count_listing(prefix, listed.dirs.len() as u64);
                        }
                        listed.dirs
                    }
                    _ => return Err(Error::store("list", prefix, e)),
                },
            },
        };
        dirs.sort();
        Ok(dirs)
    }

    /// Aborts the incomplete multipart uploads under `key_prefix` that `abandoned` accepts
    /// (a killed attempt's, old enough on the store's clock that no live attempt can own it);
    /// returns how many were aborted. Stores without raw S3 access have no listable uploads: 0
    /// (a local directory counts the listing that finds none on S3).
    pub async fn abort_uploads(
        &self,
        key_prefix: &str,
        abandoned: impl Fn(&raw_s3::IncompleteUpload) -> bool,
    ) -> Result<usize> {
        let counted = Path::from(key_prefix);
        let Some(raw) = &self.raw else {
            if let (Some(requests), Some(_)) = (&self.requests, &self.local_root) {
                requests.count_listing(&counted, 0);
            }
            return Ok(0);
        };
        let uploads = raw.incomplete_uploads(key_prefix).await?;
        if let Some(requests) = &self.requests {
            requests.count_listing(&counted, uploads.len() as u64);
        }
        let mut aborted = 0;
        for upload in uploads {
            if abandoned(&upload) {
                if let Some(requests) = &self.requests {
                    requests.count_delete(&counted);
                }
                raw.abort_upload(&upload).await?;
                tracing::info!(key = %upload.key, upload_id = %upload.upload_id, "aborted an abandoned incomplete upload");
                aborted += 1;
            }
        }
        Ok(aborted)
    }

    /// Deletes a listed object only while it is still the version listed (If-Match on its
    /// ETag) where the store offers it; elsewhere a plain delete. Returns false when the
    /// object changed since the listing and was left in place.
    pub async fn delete_listed(&self, meta: &ObjectMeta) -> Result<bool> {
        if let (Some(raw), Some(e_tag)) = (&self.raw, &meta.e_tag) {
            if let Some(requests) = &self.requests {
                requests.count_delete(&meta.location);
            }
            return Ok(
                raw.delete_if_match(&meta.location, e_tag).await? == ConditionalDelete::Deleted
            );
        }
        match self.inner.delete(&meta.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(Error::store("delete", &meta.location, e)),
        }
    }

    /// The object at `key` with its listing entry, read whole (small records: job records,
    /// claims); `None` when absent. The store's other answers are the caller's to classify.
    pub async fn get_if_present(
        &self,
        key: &Path,
    ) -> object_store::Result<Option<(ObjectMeta, bytes::Bytes)>> {
        let result = match self.inner.get(key).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = result.meta.clone();
        Ok(Some((meta, result.bytes().await?)))
    }

    /// The listing entry of `key`; `None` when absent.
    pub async fn head_if_present(&self, key: &Path) -> Result<Option<ObjectMeta>> {
        match self.inner.head(key).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::store("head", key, e)),
        }
    }

    /// Now on the store's clock: writes a small object at `key`, reads back its Last-Modified
    /// (S3 may round it down to the second, which only makes "now" earlier) and removes it.
    pub async fn store_now(&self, key: &Path) -> Result<chrono::DateTime<chrono::Utc>> {
        self.inner
            .put(key, PutPayload::from_static(b"{}"))
            .await
            .map_err(|e| Error::store("put", key, e))?;
        let meta = self
            .inner
            .head(key)
            .await
            .map_err(|e| Error::store("head", key, e))?;
        if let Err(e) = self.inner.delete(key).await {
            tracing::warn!(key = %key, error = %e, "could not remove the clock object");
        }
        Ok(meta.last_modified)
    }

    /// Streams an object into a local file, never holding it whole in memory.
    pub async fn download(&self, key: &Path, dest: &FsPath) -> Result<u64> {
        let result = self
            .inner
            .get(key)
            .await
            .map_err(|e| Error::store("get", key, e))?;
        let mut stream = result.into_stream();
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| Error::scratch(dest, e))?;
        let mut written = 0u64;
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(|e| Error::store("get", key, e))?
        {
            file.write_all(&chunk)
                .await
                .map_err(|e| Error::scratch(dest, e))?;
            written += chunk.len() as u64;
        }
        file.flush().await.map_err(|e| Error::scratch(dest, e))?;
        Ok(written)
    }
}

/// Every file under `prefix` of a local store rooted at `root`, except object_store's own
/// staging files (`name#<digits>`); names object_store cannot address are logged and
/// returned apart (a name that is not UTF-8 shown with U+FFFD for its bad bytes).
fn list_local(root: &FsPath, prefix: &Path) -> Result<Listing> {
    let start = prefix
        .parts()
        .fold(root.to_path_buf(), |p, part| p.join(part.as_ref()));
    let mut listing = Listing::default();
    let mut pending = vec![(start, prefix.as_ref().to_string())];
    while let Some((dir, key)) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => continue,
            Err(e) => return Err(Error::scratch(&dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::scratch(&dir, e))?;
            let path = entry.path();
            let name = entry.file_name();
            let lossy = name.to_string_lossy();
            let child = if key.is_empty() {
                lossy.to_string()
            } else {
                format!("{key}/{lossy}")
            };
            let location = match ObjectKey::parse(&child) {
                Ok(location) if name.to_str().is_some() => Path::from(location),
                _ => {
                    tracing::warn!(key = ?child, file = %path.display(), "skipping a key the store cannot address");
                    listing.unaddressable.push(child);
                    continue;
                }
            };
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                pending.push((path, child));
            } else if meta.is_file() && !is_staging_file(&child) {
                let modified = meta.modified().map_err(|e| Error::scratch(&path, e))?;
                listing.objects.push(ObjectMeta {
                    location,
                    last_modified: chrono::DateTime::<chrono::Utc>::from(modified),
                    size: meta.len(),
                    e_tag: None,
                    version: None,
                });
            }
        }
    }
    Ok(listing)
}

/// True for the listing errors a key object_store cannot represent causes: an invalid path, or
/// a response it could not parse (a control character in the XML). Denials and the like are
/// returned as they are.
fn may_be_unaddressable(error: &object_store::Error) -> bool {
    matches!(
        error,
        object_store::Error::InvalidPath { .. } | object_store::Error::Generic { .. }
    )
}

/// The subdirectories of `prefix` in a local store rooted at `root` that object_store can
/// address.
fn list_local_dirs(root: &FsPath, prefix: &Path) -> Result<Vec<Path>> {
    let start = prefix
        .parts()
        .fold(root.to_path_buf(), |p, part| p.join(part.as_ref()));
    let entries = match std::fs::read_dir(&start) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::scratch(&start, e)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::scratch(&start, e))?;
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name();
        let child = match name.to_str() {
            Some(name) if prefix.as_ref().is_empty() => name.to_string(),
            Some(name) => format!("{prefix}/{name}"),
            None => {
                tracing::warn!(dir = %entry.path().display(), "skipping a directory whose name is not UTF-8");
                continue;
            }
        };
        match addressable(&child) {
            Some(dir) => dirs.push(dir),
            None => tracing::warn!(key = ?child, "skipping a directory the store cannot address"),
        }
    }
    Ok(dirs)
}

/// object_store's local store writes `name#<digits>` while an upload is in flight.
fn is_staging_file(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .and_then(|n| n.split_once('#'))
        .is_some_and(|(_, suffix)| !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()))
}

impl std::fmt::Display for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_store_urls() {
        assert_eq!(
            StoreUrl::parse("s3://logs/a/b/").unwrap(),
            StoreUrl::S3 {
                bucket: "logs".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("s3://logs").unwrap(),
            StoreUrl::S3 {
                bucket: "logs".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            StoreUrl::parse("file:///tmp/x").unwrap(),
            StoreUrl::Local(PathBuf::from("/tmp/x"))
        );
        assert_eq!(
            StoreUrl::parse("rel/dir").unwrap(),
            StoreUrl::Local(PathBuf::from("rel/dir"))
        );
        assert_eq!(StoreUrl::parse("memory://").unwrap(), StoreUrl::Memory);
        assert!(StoreUrl::parse("gs://x").is_err());
        assert!(StoreUrl::parse("s3:///x").is_err());
        assert!(StoreUrl::parse("").is_err());
    }

    #[tokio::test]
    async fn local_listings_skip_and_report_names_the_store_cannot_address() {
        use std::os::unix::ffi::OsStrExt;

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().to_string_lossy()).unwrap();
        for name in ["tenant=a", "tenant=b\u{1}"] {
            let tenant = dir.path().join("data").join(name);
            std::fs::create_dir_all(&tenant).unwrap();
            std::fs::write(tenant.join("f.parquet"), b"x").unwrap();
            std::fs::write(tenant.join("g\u{1}.parquet"), b"x").unwrap();
        }
        let dirs = store.list_dirs(&Path::from("data")).await.unwrap();
        assert_eq!(dirs, [Path::from("data/tenant=a")]);
        std::fs::write(
            dir.path()
                .join("data/tenant=a")
                .join(std::ffi::OsStr::from_bytes(b"bad\xff.parquet")),
            b"x",
        )
        .unwrap();
        let listing = store.list(&Path::from("data")).await.unwrap();
        let keys: Vec<String> = listing
            .objects
            .iter()
            .map(|m| m.location.to_string())
            .collect();
        assert_eq!(keys, ["data/tenant=a/f.parquet"]);
        assert_eq!(
            listing.unaddressable,
            [
                "data/tenant=a/bad\u{fffd}.parquet",
                "data/tenant=a/g\u{1}.parquet",
                "data/tenant=b\u{1}",
            ]
        );
    }
}

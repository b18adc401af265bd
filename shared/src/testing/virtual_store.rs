//! The in-memory object store of the simulations: Last-Modified from a virtual clock,
//! create-only and versioned conditional puts, multipart uploads visible on completion and
//! dated at their start (as S3 dates them), and its objects readable without a runtime between
//! steps.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    Attributes, Extensions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    UploadPart,
};

use crate::clock::Clock;

type ObjResult<T> = object_store::Result<T>;

/// An object's bytes, Last-Modified (virtual store clock, ms) and ETag.
pub type Entry = (Bytes, i64, u64);

/// The objects of a [`VirtualStore`] and its clock.
#[derive(Debug, Default)]
pub struct StoreState {
    /// The objects by key.
    pub objects: Mutex<BTreeMap<String, Entry>>,
    /// Every key ever written (an ingest file counts as ingested once its put took effect).
    pub written: Mutex<BTreeSet<String>>,
    /// The store's clock (Unix ms), which dates every write.
    pub now_ms: AtomicI64,
    next_tag: AtomicU64,
}

impl StoreState {
    /// The store's time (Unix ms).
    pub fn now(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    /// The keys stored now.
    pub fn keys(&self) -> BTreeSet<String> {
        self.objects.lock().expect("lock").keys().cloned().collect()
    }

    fn insert(&self, key: String, bytes: Bytes, mode: &PutMode) -> ObjResult<PutResult> {
        self.insert_dated(key, bytes, mode, self.now())
    }

    fn insert_dated(
        &self,
        key: String,
        bytes: Bytes,
        mode: &PutMode,
        date_ms: i64,
    ) -> ObjResult<PutResult> {
        let mut objects = self.objects.lock().expect("lock");
        match mode {
            PutMode::Create if objects.contains_key(&key) => {
                return Err(object_store::Error::AlreadyExists {
                    path: key,
                    source: "409: the object exists".into(),
                });
            }
            PutMode::Update(v) if objects.get(&key).map(|e| e.2.to_string()) != v.e_tag => {
                return Err(object_store::Error::Precondition {
                    path: key,
                    source: "412: the object changed".into(),
                });
            }
            _ => {}
        }
        let tag = self.next_tag.fetch_add(1, Ordering::SeqCst);
        self.written.lock().expect("lock").insert(key.clone());
        objects.insert(key, (bytes, date_ms, tag));
        Ok(PutResult {
            e_tag: Some(tag.to_string()),
            version: None,
            extensions: Extensions::default(),
        })
    }
}

/// A simulated host's clocks over a [`VirtualStore`]: the store's time plus a fixed skew;
/// monotonic time is the store's time since `origin_ms`.
#[derive(Debug)]
pub struct HostClock {
    /// The store whose clock the host reads.
    pub store: Arc<StoreState>,
    /// How far the host's wall clock is ahead of the store's (behind when negative).
    pub skew_ms: i64,
    /// The store time at which the host's monotonic clock reads zero.
    pub origin_ms: i64,
}

impl Clock for HostClock {
    fn now_ms(&self) -> i64 {
        self.store.now() + self.skew_ms
    }

    fn monotonic_ms(&self) -> u64 {
        (self.store.now() - self.origin_ms) as u64
    }
}

/// The keys from `prefix` on, in order: a listing reads them until one lacks the prefix.
fn from(prefix: &str) -> (Bound<&str>, Bound<&str>) {
    (Bound::Included(prefix), Bound::Unbounded)
}

fn meta(key: &str, entry: &Entry) -> ObjectMeta {
    ObjectMeta {
        location: Path::parse(key).expect("sim keys parse"),
        last_modified: Utc.timestamp_millis_opt(entry.1).single().expect("a time"),
        size: entry.0.len() as u64,
        e_tag: Some(entry.2.to_string()),
        version: None,
    }
}

/// An in-memory store whose Last-Modified comes from a virtual clock ([`StoreState::now_ms`]).
#[derive(Debug, Default)]
pub struct VirtualStore {
    /// Its objects and clock, shared with the test that checks them.
    pub state: Arc<StoreState>,
}

impl std::fmt::Display for VirtualStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VirtualStore")
    }
}

/// A multipart upload: its parts appear at the key only on completion, dated when the upload
/// started.
#[derive(Debug)]
struct VirtualUpload {
    state: Arc<StoreState>,
    key: String,
    started_ms: i64,
    parts: Arc<Mutex<BTreeMap<usize, Bytes>>>,
    next_part: usize,
}

#[async_trait::async_trait]
impl MultipartUpload for VirtualUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let (parts, index) = (Arc::clone(&self.parts), self.next_part);
        self.next_part += 1;
        Box::pin(async move {
            parts.lock().expect("lock").insert(index, Bytes::from(data));
            Ok(())
        })
    }

    async fn complete(&mut self) -> ObjResult<PutResult> {
        let parts = std::mem::take(&mut *self.parts.lock().expect("lock"));
        let bytes: Vec<u8> = parts.values().flat_map(|p| p.iter().copied()).collect();
        let (key, date) = (self.key.clone(), self.started_ms);
        self.state
            .insert_dated(key, Bytes::from(bytes), &PutMode::Overwrite, date)
    }

    async fn abort(&mut self) -> ObjResult<()> {
        self.parts.lock().expect("lock").clear();
        Ok(())
    }
}

#[async_trait::async_trait]
impl ObjectStore for VirtualStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> ObjResult<PutResult> {
        self.state
            .insert(location.to_string(), Bytes::from(payload), &opts.mode)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _opts: PutMultipartOptions,
    ) -> ObjResult<Box<dyn MultipartUpload>> {
        Ok(Box::new(VirtualUpload {
            state: Arc::clone(&self.state),
            key: location.to_string(),
            started_ms: self.state.now(),
            parts: Arc::default(),
            next_part: 0,
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> ObjResult<GetResult> {
        let key = location.to_string();
        let Some(entry) = self.state.objects.lock().expect("lock").get(&key).cloned() else {
            return Err(object_store::Error::NotFound {
                path: key,
                source: "404".into(),
            });
        };
        let len = entry.0.len() as u64;
        let range = match &options.range {
            Some(r) => r.as_range(len).map_err(|e| object_store::Error::Generic {
                store: "VirtualStore",
                source: e.to_string().into(),
            })?,
            None => 0..len,
        };
        let bytes = if options.head {
            Bytes::new()
        } else {
            entry.0.slice(range.start as usize..range.end as usize)
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(
                futures::stream::once(async move { Ok(bytes) }).boxed(),
            ),
            meta: meta(&key, &entry),
            range,
            attributes: Attributes::default(),
            extensions: Extensions::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, ObjResult<Path>>,
    ) -> BoxStream<'static, ObjResult<Path>> {
        let state = Arc::clone(&self.state);
        locations
            .map(move |location| {
                let location = location?;
                state
                    .objects
                    .lock()
                    .expect("lock")
                    .remove(location.as_ref());
                Ok(location)
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, ObjResult<ObjectMeta>> {
        let prefix = prefix.map(|p| format!("{p}/")).unwrap_or_default();
        let listed: Vec<_> = self
            .state
            .objects
            .lock()
            .expect("lock")
            .range::<str, _>(from(&prefix))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, e)| Ok(meta(k, e)))
            .collect();
        futures::stream::iter(listed).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> ObjResult<ListResult> {
        let prefix = prefix.map(|p| format!("{p}/")).unwrap_or_default();
        let mut dirs = BTreeSet::new();
        let mut objects = Vec::new();
        let objects_held = self.state.objects.lock().expect("lock");
        for (k, e) in objects_held.range::<str, _>(from(&prefix)) {
            let Some(rest) = k.strip_prefix(&prefix) else {
                break;
            };
            match rest.split_once('/') {
                Some((dir, _)) => {
                    dirs.insert(format!("{prefix}{dir}"));
                }
                None => objects.push(meta(k, e)),
            }
        }
        Ok(ListResult {
            common_prefixes: dirs.iter().map(|d| Path::parse(d).expect("dir")).collect(),
            objects,
            extensions: Extensions::default(),
        })
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: object_store::CopyOptions,
    ) -> ObjResult<()> {
        Err(object_store::Error::NotImplemented {
            operation: "copy".into(),
            implementer: "VirtualStore".into(),
        })
    }
}

//! The gate: every store operation of a task parks here until the scheduler lets it
//! proceed, or injects a fault in its place.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetResult, ListResult, PutPayload, PutResult, UploadPart};
use ourios_compaction::store::hooked::{
    CopyRequest, GetRequest, HookedStore, Inner, ListRequest, MetaStream, PathStream, PutRequest,
    StoreHooks, Upload, UploadRequest,
};
use tokio::sync::oneshot;

type ObjResult<T> = object_store::Result<T>;

/// How long a task may run without reaching the store before the simulation reports a hang.
const HANG: Duration = Duration::from_secs(300);

/// What the scheduler lets a parked operation do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Proceed,
    /// A 5xx: not applied, an error returned.
    Unavailable,
    /// Applied, but the response is lost: an error returned.
    LostResponse,
    /// The task dies before the operation; nothing of it or after it takes effect.
    CrashBefore,
    /// The task dies right after the operation took effect.
    CrashAfter,
    /// A 403 for a GET of an ingest file (a KMS key the role may not use); a 503 elsewhere.
    Refused,
}

#[derive(Debug, Default)]
pub(crate) struct TaskState {
    /// The parked operation and the channel that releases it.
    pub(crate) parked: Option<(String, oneshot::Sender<Verdict>)>,
    pub(crate) ops_in_progress: usize,
    pub(crate) open_uploads: usize,
    pub(crate) done: bool,
    pub(crate) crashed: bool,
}

impl TaskState {
    /// Parked at the gate, or finished with nothing left in flight.
    pub(crate) fn is_settled(&self) -> bool {
        self.parked.is_some() || (self.done && self.ops_in_progress == 0 && self.open_uploads == 0)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Gate {
    pub(crate) tasks: Mutex<BTreeMap<u64, TaskState>>,
    pub(crate) changed: Condvar,
    /// Ingest files a GET of which was refused (a job may quarantine them, good or not).
    pub(crate) refused: Mutex<BTreeSet<String>>,
    /// Tasks reaped after their process crashed: an operation one of their detached tasks
    /// (an upload) still sends fails as the dead process's would, and takes no effect.
    pub(crate) reaped_crashed: Mutex<BTreeSet<u64>>,
}

impl Gate {
    pub(crate) fn update(&self, task: u64, change: impl FnOnce(&mut TaskState)) {
        let mut tasks = self.tasks.lock().expect("lock");
        change(tasks.get_mut(&task).expect("a registered task"));
        self.changed.notify_all();
    }

    pub(crate) async fn arrive(&self, task: u64, what: &str) -> Verdict {
        let rx = {
            let mut tasks = self.tasks.lock().expect("lock");
            let state = tasks.get_mut(&task).expect("a registered task");
            if state.crashed {
                return Verdict::CrashBefore;
            }
            let (tx, rx) = oneshot::channel();
            state.parked = Some((what.to_string(), tx));
            self.changed.notify_all();
            rx
        };
        rx.await.unwrap_or(Verdict::CrashBefore)
    }

    /// Waits until every task is settled; returns the parked tasks and their operations.
    pub(crate) fn settle(&self) -> Vec<(u64, String)> {
        let mut tasks = self.tasks.lock().expect("lock");
        loop {
            if tasks.values().all(TaskState::is_settled) {
                return tasks
                    .iter()
                    .filter_map(|(id, t)| t.parked.as_ref().map(|(op, _)| (*id, op.clone())))
                    .collect();
            }
            let (guard, wait) = self.changed.wait_timeout(tasks, HANG).expect("lock");
            tasks = guard;
            assert!(
                !wait.timed_out() || tasks.values().all(TaskState::is_settled),
                "a task neither reached the store nor finished in {HANG:?}"
            );
        }
    }

    pub(crate) fn release(&self, task: u64, verdict: Verdict) {
        self.update(task, |state| {
            if matches!(verdict, Verdict::CrashBefore | Verdict::CrashAfter) {
                state.crashed = true;
            }
            let (_, tx) = state.parked.take().expect("a parked operation");
            let _ = tx.send(verdict);
        });
    }
}

/// Counts an operation in progress until dropped.
pub(crate) struct InProgress {
    pub(crate) gate: Arc<Gate>,
    pub(crate) task: u64,
}

impl InProgress {
    /// Counts an operation of `task`; `None` when the task was reaped after a crash.
    pub(crate) fn new(gate: &Arc<Gate>, task: u64) -> Option<Self> {
        let mut tasks = gate.tasks.lock().expect("lock");
        match tasks.get_mut(&task) {
            Some(state) => state.ops_in_progress += 1,
            None if gate.reaped_crashed.lock().expect("lock").contains(&task) => return None,
            None => panic!("an operation of task {task}, which finished and was reaped"),
        }
        gate.changed.notify_all();
        Some(Self {
            gate: Arc::clone(gate),
            task,
        })
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.gate.update(self.task, |s| s.ops_in_progress -= 1);
    }
}

/// One task's way through the gate: its id and the lock that lets one of its operations
/// through at a time (so the order of its concurrent operations is the order they queued).
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub(crate) gate: Arc<Gate>,
    pub(crate) task: u64,
    pub(crate) serial: Arc<tokio::sync::Mutex<()>>,
}

impl Turn {
    pub(crate) async fn run<T>(
        &self,
        what: String,
        op: impl std::future::Future<Output = ObjResult<T>>,
    ) -> ObjResult<T> {
        let injected = |kind: &str| object_store::Error::Generic {
            store: "GateStore",
            source: format!("injected {kind} at {what}").into(),
        };
        let Some(_counted) = InProgress::new(&self.gate, self.task) else {
            return Err(injected("crash (the process is gone)"));
        };
        let _turn = self.serial.lock().await;
        match self.gate.arrive(self.task, &what).await {
            Verdict::Proceed => op.await,
            Verdict::Unavailable => Err(injected("503")),
            Verdict::CrashBefore => Err(injected("crash")),
            Verdict::LostResponse | Verdict::CrashAfter => {
                op.await?;
                Err(injected("lost response"))
            }
            Verdict::Refused => match what.strip_prefix("get(head false) ") {
                Some(key) if key.contains("/tenant=") && !key.starts_with("compacted/") => {
                    self.gate
                        .refused
                        .lock()
                        .expect("lock")
                        .insert(key.to_string());
                    Err(object_store::Error::PermissionDenied {
                        path: key.to_string(),
                        source: format!("injected 403 at {what}").into(),
                    })
                }
                _ => Err(injected("503")),
            },
        }
    }
}

/// A task's view of the store: every operation waits its turn at the gate.
pub(crate) type GateStore = HookedStore<Turn>;

#[async_trait::async_trait]
impl StoreHooks for Turn {
    const NAME: &'static str = "GateStore";

    async fn put(&self, inner: &Inner, put: PutRequest<'_>) -> ObjResult<PutResult> {
        let what = format!("put({:?}) {}", put.opts.mode, put.location);
        self.run(what, put.forward(inner)).await
    }

    async fn put_multipart(&self, inner: &Inner, start: UploadRequest<'_>) -> ObjResult<Upload> {
        let what = format!("put_multipart {}", start.location);
        let upload = self.run(what, start.forward(inner)).await?;
        self.gate.update(self.task, |s| s.open_uploads += 1);
        Ok(upload)
    }

    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> ObjResult<GetResult> {
        let what = format!("get(head {}) {}", get.options.head, get.location);
        self.run(what, get.forward(inner)).await
    }

    fn delete(&self, inner: &Inner, locations: PathStream) -> PathStream {
        let (inner, turn) = (Arc::clone(inner), self.clone());
        locations
            .then(move |location| {
                let (inner, turn) = (Arc::clone(&inner), turn.clone());
                async move {
                    let location = location?;
                    let what = format!("delete {location}");
                    let one = futures::stream::once(futures::future::ready(Ok(location)));
                    let deleted = async move {
                        let mut results = inner.delete_stream(one.boxed());
                        results.next().await.expect("one result")
                    };
                    turn.run(what, deleted).await
                }
            })
            .boxed()
    }

    /// The whole listing waits at the gate once, when first polled.
    fn list(&self, inner: &Inner, list: ListRequest<'_>) -> MetaStream {
        let (inner, turn) = (Arc::clone(inner), self.clone());
        let (prefix, offset) = (list.prefix.cloned(), list.offset.cloned());
        futures::stream::once(async move {
            let what = format!("list {}", prefix.as_ref().map_or("", |p| p.as_ref()));
            let list = ListRequest {
                prefix: prefix.as_ref(),
                offset: offset.as_ref(),
            };
            turn.run(what, list.forward(&inner).try_collect::<Vec<_>>())
                .await
        })
        .map(|listed| match listed {
            Ok(metas) => futures::stream::iter(metas.into_iter().map(Ok)).boxed(),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        })
        .flatten()
        .boxed()
    }

    async fn list_dirs(&self, inner: &Inner, prefix: Option<&Path>) -> ObjResult<ListResult> {
        let what = format!("list_dirs {}", prefix.map_or("", |p| p.as_ref()));
        self.run(what, inner.list_with_delimiter(prefix)).await
    }

    async fn copy(&self, inner: &Inner, copy: CopyRequest<'_>) -> ObjResult<()> {
        let what = format!("copy {} {}", copy.from, copy.to);
        self.run(what, copy.forward(inner)).await
    }

    fn put_part(&self, upload: &mut Upload, location: &Path, data: PutPayload) -> UploadPart {
        let part = upload.put_part(data);
        let (turn, what) = (self.clone(), format!("put_part {location}"));
        Box::pin(async move { turn.run(what, part).await })
    }

    async fn complete(&self, upload: &mut Upload, location: &Path) -> ObjResult<PutResult> {
        self.run(format!("complete {location}"), upload.complete())
            .await
    }

    async fn abort(&self, upload: &mut Upload, location: &Path) -> ObjResult<()> {
        self.run(format!("abort {location}"), upload.abort()).await
    }

    fn upload_dropped(&self, _location: &Path) {
        // A crashed task's detached upload may outlive its reaping.
        let mut tasks = self.gate.tasks.lock().expect("lock");
        if let Some(state) = tasks.get_mut(&self.task) {
            state.open_uploads -= 1;
            self.gate.changed.notify_all();
        }
    }
}

//! Streams a file being written on a blocking thread to the store as a multipart upload.
//!
//! The writer side implements `std::io::Write`, cuts the byte stream into parts and hands
//! them over a bounded channel, so at most a few parts are in memory at once. The async
//! side uploads them; if the writer goes away without [`UploadWriter::finish`], the upload
//! is aborted and nothing appears at the key.
//!
//! Parts are sized to the job's memory ([`part_bytes_for`]). An output that fits in its first
//! part, which may hold [`FIRST_PART_PARTS`] parts' bytes (nothing else is in memory while it
//! fills), goes up in one PUT; a larger one as a multipart upload, which starts with that first
//! part, not before: S3 dates a multipart object at the upload's start, so the object is no
//! older than its bytes. An upload with a [`Hold`] writes the hold just before it starts and
//! renews it as parts go (at most every half grace, on the job's monotonic clock): GC leaves the
//! object alone while its hold is fresh, however long the upload takes, and the committer knows
//! from the last renewal how long it may still commit ([`Uploaded::held_from_ms`]). An object
//! that goes up in one PUT may need no hold ([`OnePut`]): one in the hold's job directory, or one
//! whose commit follows in the same invocation, which its own date protects for a grace
//! ([`Uploaded::put_from_ms`]).

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::options::CompactOptions;

/// The smallest part (S3 needs at least 5 MiB for all parts but the last).
pub const PART_BYTES: usize = 5 << 20;
/// The largest part whatever the memory.
const MAX_PART_BYTES: u64 = 64 << 20;
/// The first part holds up to this many parts' bytes: while it fills nothing else is held,
/// and once it is sent it goes up as that many parts at once. An output that fits in it goes
/// up in one PUT.
pub const FIRST_PART_PARTS: usize = 3;

/// The fewest parts an upload sends at once.
const MIN_PARTS_IN_FLIGHT: usize = 2;
/// The most parts an upload sends at once, whatever the memory: with parts that grow with
/// the memory, more would only hold more.
const MAX_PARTS_IN_FLIGHT: usize = 4;
/// An upload holds at most this share of the function's memory where the smallest parts
/// allow: an eighth.
const UPLOAD_MEMORY_SHARE: u64 = 8;

/// The part size of an upload by a job whose function has `memory_bytes` of memory: a 64th
/// of it, at least [`PART_BYTES`] and at most 64 MiB. A 256 MB function keeps 5 MiB parts and
/// puts an output of up to 15 MiB in one PUT; a 1,769 MB one cuts 27.6 MiB parts, puts up to
/// 83 MiB in one PUT and a 3 GB output in 112 parts instead of 615.
pub fn part_bytes_for(memory_bytes: u64) -> usize {
    let part = (memory_bytes / 64).clamp(PART_BYTES as u64, MAX_PART_BYTES);
    usize::try_from(part).unwrap_or(PART_BYTES)
}

/// How an upload cuts and sends its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartPlan {
    /// The size of every part but the first (which holds [`FIRST_PART_PARTS`] of them) and
    /// the last.
    pub part_bytes: usize,
    /// Parts sent at once (the first part's pieces may exceed it while they go up).
    pub in_flight: usize,
}

impl PartPlan {
    /// Parts of `part_bytes` under a function of `memory_bytes`, as many sent at once as keep
    /// the upload within an eighth of the memory ([`PartPlan::held_parts`]), at least two and
    /// at most four. A 256 MB function sends four parts of 5 MiB at once (30 MiB held at
    /// most), and so does a 1,769 MB one, of 27.6 MiB (166 MiB); a 128 MB function two.
    pub fn for_memory(memory_bytes: u64, part_bytes: usize) -> PartPlan {
        let part_bytes = part_bytes.max(1);
        let parts = usize::try_from(memory_bytes / UPLOAD_MEMORY_SHARE / part_bytes as u64)
            .unwrap_or(usize::MAX);
        let in_flight = parts
            .saturating_sub(2)
            .clamp(MIN_PARTS_IN_FLIGHT, MAX_PARTS_IN_FLIGHT);
        PartPlan {
            part_bytes,
            in_flight,
        }
    }

    /// The most parts' bytes the upload holds at once: those going up (the first part's
    /// [`FIRST_PART_PARTS`], or [`in_flight`](Self::in_flight)), the one queued for the upload
    /// and the one the writer fills.
    pub fn held_parts(&self) -> usize {
        self.in_flight.max(FIRST_PART_PARTS) + 2
    }

    /// The most bytes the upload holds at once.
    pub fn held_bytes(&self) -> u64 {
        (self.held_parts() as u64).saturating_mul(self.part_bytes as u64)
    }
}

/// How a job's outputs go up under `options`: parts of [`CompactOptions::upload_part_bytes`]
/// when set, else of [`part_bytes_for`] the memory the settings give
/// ([`crate::settings::CompactSettings::upload_memory_bytes`]), as many at once as
/// [`PartPlan::for_memory`] allows.
pub fn job_parts(options: &CompactOptions) -> PartPlan {
    let memory_bytes = options.settings.upload_memory_bytes();
    let part_bytes = (options.upload_part_bytes).unwrap_or_else(|| part_bytes_for(memory_bytes));
    PartPlan::for_memory(memory_bytes, part_bytes)
}

enum Message {
    Part(Bytes),
    Finish,
}

/// A hold on an upload's object: an empty object at `key` that marks the job directory it
/// lies in as at work ([`crate::partition::held_output`]); GC deletes no output a job directory
/// that changed within twice the grace holds.
#[derive(Debug, Clone)]
pub struct Hold {
    /// The hold's key.
    pub key: Path,
    /// The job's clock (its monotonic side times the renewals).
    pub clock: Arc<dyn Clock>,
    /// The grace period (positive).
    pub grace: std::time::Duration,
    /// Whether the object needs the hold when it goes up in one PUT (a multipart upload, dated
    /// at its start, always does).
    pub one_put: OnePut,
}

/// What keeps GC off an object that goes up in one PUT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnePut {
    /// Its hold, as for a multipart upload.
    Held,
    /// Its own creation: it lies in the job directory the hold marks (a fanned-out job's run),
    /// which it keeps at work as the hold would.
    InJobDirectory,
    /// Its own date: GC takes an object no manifest references only a grace after its
    /// Last-Modified, which is no earlier than the PUT's start, so a commit in the same
    /// invocation within half the grace of that start ([`Uploaded::put_from_ms`]) needs no
    /// hold.
    DatedByItself,
}

/// S3 keeps Last-Modified to the second: a second's margin covers the rounding.
pub const LAST_MODIFIED_RESOLUTION_MS: u64 = 1_000;

impl Hold {
    fn grace_ms(&self) -> u64 {
        u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX)
    }

    /// Writes (or renews) the hold; `since_ms` is the start of the renewal before it. The
    /// renewal must land while the one before still holds (within twice the grace of its
    /// start, less the stores' one-second resolution), or GC may have taken the object.
    async fn renew(&self, store: &Arc<dyn ObjectStore>, since_ms: Option<u64>) -> Result<u64> {
        let start = self.clock.monotonic_ms();
        store
            .put(&self.key, PutPayload::new())
            .await
            .map_err(|e| Error::store("put", &self.key, e))?;
        let lapse_ms = self
            .grace_ms()
            .saturating_mul(2)
            .saturating_sub(LAST_MODIFIED_RESOLUTION_MS);
        if let Some(since) = since_ms
            && self.clock.monotonic_ms().saturating_sub(since) >= lapse_ms
        {
            return Err(Error::Deadline {
                partition: format!("{} (the hold lapsed before its renewal)", self.key),
            });
        }
        Ok(start)
    }

    /// Renews the hold when half the grace has passed since `since_ms`.
    async fn keep(&self, store: &Arc<dyn ObjectStore>, since_ms: u64) -> Result<u64> {
        let due = since_ms.saturating_add(self.grace_ms() / 2);
        if self.clock.monotonic_ms() >= due {
            self.renew(store, Some(since_ms)).await
        } else {
            Ok(since_ms)
        }
    }
}

/// What an upload task gives back.
#[derive(Debug, Clone, Copy)]
pub struct Uploaded {
    /// Bytes uploaded.
    pub bytes: u64,
    /// With a hold: the start of its last renewal on the job's monotonic clock. GC leaves the
    /// object alone at least until twice the grace after it.
    pub held_from_ms: Option<u64>,
    /// Without one, for an object [`OnePut::DatedByItself`]: the start of its PUT on the job's
    /// monotonic clock. GC leaves the object alone at least until a grace after it.
    pub put_from_ms: Option<u64>,
}

/// The blocking-thread end: collects bytes into parts.
pub struct UploadWriter {
    tx: mpsc::Sender<Message>,
    buffer: Vec<u8>,
    bytes: u64,
    part_bytes: usize,
}

/// Starts an upload task for `key` cut and sent as `parts` says (see [`job_parts`]; S3 takes
/// no part but the last under [`PART_BYTES`]), held by `hold`; returns the writer end and the
/// task handle, which resolves once the writer finishes.
pub fn start_upload(
    store: Arc<dyn ObjectStore>,
    key: Path,
    hold: Option<Hold>,
    parts: PartPlan,
) -> (UploadWriter, tokio::task::JoinHandle<Result<Uploaded>>) {
    let parts = PartPlan {
        part_bytes: parts.part_bytes.max(1),
        in_flight: parts.in_flight.max(1),
    };
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(run_upload(store, key, hold, parts, rx));
    (UploadWriter::new(tx, parts.part_bytes), task)
}

async fn run_upload(
    store: Arc<dyn ObjectStore>,
    key: Path,
    hold: Option<Hold>,
    plan: PartPlan,
    mut rx: mpsc::Receiver<Message>,
) -> Result<Uploaded> {
    let abandoned = |when: &str| Error::invariant(format!("upload of {key} abandoned {when}"));
    // What `tests/bench_transfers.sh` replays of the job's uploads.
    tracing::debug!(
        key = %key,
        part_bytes = plan.part_bytes,
        first_part_bytes = plan.part_bytes.saturating_mul(FIRST_PART_PARTS),
        in_flight = plan.in_flight,
        "upload planned"
    );
    // The upload starts with the first part, or the end of a stream that fits in it.
    let first = match rx.recv().await {
        Some(Message::Part(first)) => first,
        Some(Message::Finish) => Bytes::new(),
        None => return Err(abandoned("before it started")),
    };
    let mut message = match first.is_empty() {
        true => Message::Finish,
        false => rx
            .recv()
            .await
            .ok_or_else(|| abandoned("before it finished"))?,
    };
    let one_put = matches!(message, Message::Finish);
    let mut held_from_ms = match &hold {
        Some(hold) if !(one_put && hold.one_put != OnePut::Held) => {
            Some(hold.renew(&store, None).await?)
        }
        _ => None,
    };
    if one_put {
        let total = first.len() as u64;
        let put_from_ms = (hold.as_ref())
            .filter(|h| h.one_put == OnePut::DatedByItself)
            .map(|h| h.clock.monotonic_ms());
        store
            .put(&key, PutPayload::from(first))
            .await
            .map_err(|e| Error::store("put", &key, e))?;
        let uploaded = uploaded(&store, hold.as_ref(), held_from_ms, total).await?;
        return Ok(Uploaded {
            put_from_ms,
            ..uploaded
        });
    }
    let upload = store
        .put_multipart(&key)
        .await
        .map_err(|e| Error::store("put_multipart", &key, e))?;
    let mut parts = WriteMultipart::new_with_chunk_size(upload, plan.part_bytes);
    let mut total = first.len() as u64;
    parts.put(first);
    loop {
        if let (Some(hold), Some(since)) = (&hold, held_from_ms) {
            match hold.keep(&store, since).await {
                Ok(renewed) => held_from_ms = Some(renewed),
                Err(e) => {
                    let _ = parts.abort().await;
                    return Err(e);
                }
            }
        }
        match message {
            Message::Part(bytes) => {
                if let Err(e) = parts.wait_for_capacity(plan.in_flight).await {
                    let _ = parts.abort().await;
                    return Err(Error::store("upload_part", &key, e));
                }
                total += bytes.len() as u64;
                parts.put(bytes);
            }
            Message::Finish => {
                parts
                    .finish()
                    .await
                    .map_err(|e| Error::store("complete_multipart", &key, e))?;
                return uploaded(&store, hold.as_ref(), held_from_ms, total).await;
            }
        }
        message = match rx.recv().await {
            Some(next) => next,
            None => {
                // The writer failed or was dropped: nothing may appear at the key.
                let _ = parts.abort().await;
                return Err(abandoned("before it finished"));
            }
        };
    }
}

/// What an upload of `bytes` that just landed gives back: a PUT or completion that took long
/// renews the hold first, so the commit has its time.
async fn uploaded(
    store: &Arc<dyn ObjectStore>,
    hold: Option<&Hold>,
    held_from_ms: Option<u64>,
    bytes: u64,
) -> Result<Uploaded> {
    let held_from_ms = match (hold, held_from_ms) {
        (Some(hold), Some(since)) => Some(hold.keep(store, since).await?),
        _ => held_from_ms,
    };
    Ok(Uploaded {
        bytes,
        held_from_ms,
        put_from_ms: None,
    })
}

impl UploadWriter {
    fn new(tx: mpsc::Sender<Message>, part_bytes: usize) -> Self {
        // The first part's capacity is reserved, not touched: its pages are only mapped as
        // bytes are written.
        Self {
            tx,
            buffer: Vec::with_capacity(part_bytes * FIRST_PART_PARTS),
            bytes: 0,
            part_bytes,
        }
    }

    fn send(&mut self, message: Message) -> std::io::Result<()> {
        self.tx
            .blocking_send(message)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "upload task stopped"))
    }

    /// Sends the last part and asks the task to complete the upload.
    pub fn finish(&mut self) -> std::io::Result<u64> {
        if !self.buffer.is_empty() {
            let part = Bytes::from(std::mem::take(&mut self.buffer));
            self.send(Message::Part(part))?;
        }
        self.send(Message::Finish)?;
        Ok(self.bytes)
    }

    /// The size the part being filled is sent at: the first part's, until it is sent.
    fn part_limit(&self) -> usize {
        match self.bytes <= self.buffer.len() as u64 {
            true => self.part_bytes * FIRST_PART_PARTS,
            false => self.part_bytes,
        }
    }
}

impl Write for UploadWriter {
    /// Takes what fits the part being filled, so the part's buffer never grows past its size
    /// (growing it would copy the part into a buffer of twice the size).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let limit = self.part_limit();
        let taken = buf.len().min(limit.saturating_sub(self.buffer.len()));
        self.buffer.extend_from_slice(&buf[..taken]);
        self.bytes += taken as u64;
        if self.buffer.len() >= limit {
            let part = Bytes::from(std::mem::replace(
                &mut self.buffer,
                Vec::with_capacity(self.part_bytes),
            ));
            self.send(Message::Part(part))?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use object_store::UploadPart;
    use object_store::memory::InMemory;

    use super::*;
    use crate::store::Store;
    use crate::store::hooked::{HookedStore, StoreHooks, Upload};
    use crate::testing::get_bytes;

    /// `mib` MiB and a bit, written in pieces that straddle part boundaries.
    fn data(mib: usize) -> Vec<u8> {
        (0..(mib << 20) + 12_345).map(|i| (i % 251) as u8).collect()
    }

    const PIECE: usize = (3 << 20) + 7;

    /// Writes `data` through `writer` in pieces that straddle part boundaries, on a blocking
    /// thread, and finishes; the bytes written.
    async fn write_through(mut writer: UploadWriter, data: Vec<u8>) -> u64 {
        tokio::task::spawn_blocking(move || {
            for piece in data.chunks(PIECE) {
                writer.write_all(piece).expect("write");
            }
            writer.finish().expect("finish")
        })
        .await
        .expect("writer thread")
    }

    #[test]
    fn the_first_part_holds_three_parts_and_the_rest_are_cut_at_their_size() {
        let (tx, mut rx) = mpsc::channel(1);
        let receiver = std::thread::spawn(move || {
            let mut parts = Vec::new();
            while let Some(Message::Part(part)) = rx.blocking_recv() {
                parts.push(part);
            }
            parts
        });
        let mut writer = UploadWriter::new(tx, 3 << 20);
        let data = data(12);
        for piece in data.chunks(PIECE) {
            writer.write_all(piece).expect("write");
        }
        assert_eq!(writer.finish().expect("finish"), data.len() as u64);
        drop(writer);
        let parts = receiver.join().expect("receiver");
        let sizes: Vec<usize> = parts.iter().map(Bytes::len).collect();
        assert_eq!(sizes, [9 << 20, 3 << 20, 12_345]);
        assert_eq!(parts.concat(), data);
    }

    #[test]
    fn parts_grow_with_the_memory() {
        const MIB: u64 = 1 << 20;
        // A small function keeps the smallest parts.
        assert_eq!(part_bytes_for(256 * MIB), PART_BYTES);
        // A 3 GB output on a 1,769 MB function: at most a fifth of the 5 MiB parts' PUTs.
        let part = part_bytes_for(1769 * MIB) as u64;
        assert_eq!(part, 1769 * MIB / 64);
        let (parts, before) = ((3u64 << 30).div_ceil(part), (3u64 << 30).div_ceil(5 * MIB));
        assert!(
            parts * 5 <= before,
            "{parts} parts of {part} bytes, {before} before"
        );
        // Never more than 64 MiB.
        assert_eq!(part_bytes_for(10_240 * MIB) as u64, 64 * MIB);
    }

    #[test]
    fn parts_in_flight_keep_the_upload_within_an_eighth_of_the_memory() {
        const MIB: u64 = 1 << 20;
        for memory in [256 * MIB, 512 * MIB, 1769 * MIB, 10_240 * MIB] {
            let plan = PartPlan::for_memory(memory, part_bytes_for(memory));
            assert_eq!(plan.in_flight, 4, "{memory}");
            assert!(plan.held_bytes() <= memory / 8, "{plan:?} at {memory}");
        }
        // Below, two at once, as few as the first part's pieces allow.
        let small = PartPlan::for_memory(128 * MIB, part_bytes_for(128 * MIB));
        assert_eq!((small.in_flight, small.held_parts()), (2, 5));
        // Tests' small parts in a large memory stop at four.
        assert_eq!(PartPlan::for_memory(256 * MIB, 1 << 10).in_flight, 4);
    }

    /// An output that fits in the first part goes up in one PUT; a larger one in parts (the
    /// first part cut in three), each request counted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_stores_every_byte_in_one_put_or_in_parts() {
        for (mib, puts) in [(0, 1), (12, 1), (21, 7)] {
            let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://")
                .counting_requests();
            let key = format!("out-{mib}.parquet");
            let (writer, task) = start_upload(
                Arc::clone(store.object_store()),
                Path::from(key.as_str()),
                None,
                PartPlan::for_memory(256 << 20, PART_BYTES),
            );
            let expected = data(mib);
            let written = write_through(writer, expected.clone()).await;
            assert_eq!(written, expected.len() as u64);
            let uploaded = task.await.expect("task").expect("upload");
            assert_eq!((uploaded.bytes, uploaded.held_from_ms), (written, None));
            assert_eq!(store.request_counts().put, puts, "{mib} MiB");
            let stored = get_bytes(&store, &key).await;
            assert_eq!(stored.as_ref(), expected.as_slice());
        }
    }

    /// A held object's hold is written before it goes up, in one PUT or in parts. One that
    /// goes up in one PUT in the hold's job directory (a run) or dated by itself (an output
    /// committed in the same invocation) needs none; the latter tells when its PUT started. In
    /// parts, every object is held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_object_in_one_put_is_held_only_when_nothing_else_keeps_gc_off_it() {
        for (one_put, mib, held) in [
            (OnePut::Held, 1, true),
            (OnePut::Held, 21, true),
            (OnePut::InJobDirectory, 1, false),
            (OnePut::InJobDirectory, 21, true),
            (OnePut::DatedByItself, 1, false),
            (OnePut::DatedByItself, 21, true),
        ] {
            let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
            let clock = crate::clock::SystemClock::shared();
            let before = clock.monotonic_ms();
            let hold = Hold {
                key: Path::from("runs/job/holds/out.parquet"),
                clock: Arc::clone(&clock),
                grace: std::time::Duration::from_secs(60),
                one_put,
            };
            let (writer, task) = start_upload(
                Arc::clone(store.object_store()),
                Path::from("runs/job/out.parquet"),
                Some(hold),
                PartPlan::for_memory(256 << 20, PART_BYTES),
            );
            let expected = data(mib);
            write_through(writer, expected.clone()).await;
            let uploaded = task.await.expect("task").expect("upload");
            let written = store
                .head_if_present(&Path::from("runs/job/holds/out.parquet"))
                .await
                .expect("head");
            let case = format!("{mib} MiB, {one_put:?}");
            assert_eq!(written.is_some(), held, "{case}");
            assert_eq!(uploaded.held_from_ms.is_some(), held, "{case}");
            let dated = one_put == OnePut::DatedByItself && !held;
            assert_eq!(uploaded.put_from_ms.is_some(), dated, "{case}");
            if let Some(from) = uploaded.put_from_ms {
                assert!((before..=clock.monotonic_ms()).contains(&from), "{case}");
            }
            let stored = get_bytes(&store, "runs/job/out.parquet").await;
            assert_eq!(stored.as_ref(), expected.as_slice(), "{case}");
        }
    }

    /// Counts the parts going up at once; each takes 20 ms.
    #[derive(Debug, Default)]
    struct PartsAtOnce {
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl StoreHooks for PartsAtOnce {
        fn put_part(&self, upload: &mut Upload, _: &Path, data: PutPayload) -> UploadPart {
            let (now, most) = (Arc::clone(&self.now), Arc::clone(&self.most));
            let part = upload.put_part(data);
            Box::pin(async move {
                let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(at_once, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                let done = part.await;
                now.fetch_sub(1, Ordering::SeqCst);
                done
            })
        }
    }

    /// The upload sends as many parts at once as its plan says, never more, past the first
    /// part's pieces.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_sends_its_plan_s_parts_at_once() {
        for in_flight in [2, 4] {
            let hooks = Arc::new(PartsAtOnce::default());
            let inner = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
            let hooked = HookedStore::wrap(Arc::clone(inner.object_store()), Arc::clone(&hooks));
            let plan = PartPlan {
                part_bytes: 64 << 10,
                in_flight,
            };
            let (writer, task) =
                start_upload(Arc::new(hooked), Path::from("out.parquet"), None, plan);
            let expected = data(3);
            write_through(writer, expected.clone()).await;
            task.await.expect("task").expect("upload");
            let most = hooks.most.load(Ordering::SeqCst);
            assert_eq!(most, in_flight.max(FIRST_PART_PARTS), "{plan:?}");
            let stored = get_bytes(&inner, "out.parquet").await;
            assert_eq!(stored.as_ref(), expected.as_slice());
        }
    }
}

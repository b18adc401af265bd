//! Where sorted rows go: the output writer or a run file, always in fixed-size chunks.
//!
//! Both sinks implement [`ChunkSink`] where they are defined ([`RunWriter`](crate::sort::runs::RunWriter),
//! [`OutputWriter`](crate::output::writer::OutputWriter)), so this module depends on neither.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use arrow_array::RecordBatch;

use crate::error::Result;

/// Receives rows in key order, one chunk at a time.
pub trait ChunkSink {
    /// Appends a chunk that follows the previous ones in key order.
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()>;

    /// Asks for the rows written so far to close their row group (a service boundary);
    /// sinks without row groups ignore it.
    fn end_row_group(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A sink that collects chunks in memory (tests and small tools).
#[derive(Debug, Default)]
pub struct VecSink {
    /// The chunks received, in order.
    pub chunks: Vec<RecordBatch>,
}

impl ChunkSink for VecSink {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        self.chunks.push(chunk.clone());
        Ok(())
    }
}

/// Decoded bytes of chunks that may wait between the producer and the writer thread, at most
/// (one chunk larger than this still passes, alone). It lets the producer run a whole write
/// group of the output ([`crate::output::writer::OutputWriter`]) ahead of the writer.
pub const QUEUED_CHUNK_BYTES: usize = 8 << 20;

/// The bytes the values of `chunk` take: the slices its columns show, whatever the capacity
/// of the buffers they sit in, so the same rows measure the same however they were gathered.
/// Types the measure does not know count as [`QUEUED_CHUNK_BYTES`].
pub fn values_bytes(chunk: &RecordBatch) -> usize {
    chunk
        .columns()
        .iter()
        .map(|c| {
            c.to_data()
                .get_slice_memory_size()
                .unwrap_or(QUEUED_CHUNK_BYTES)
        })
        .fold(0, usize::saturating_add)
}

/// Runs `body` with a sink whose chunks are written to `sink` on a second thread, so the
/// producer (sort, merge) and the Parquet encoder use two cores. At most
/// [`QUEUED_CHUNK_BYTES`] of chunks wait in between. The chunk sequence is unchanged, so
/// output bytes are too.
pub fn with_sink_thread<S, R>(sink: &mut S, body: impl FnOnce(&mut dyn ChunkSink) -> R) -> Result<R>
where
    S: ChunkSink + Send,
{
    let queue = ChunkQueue::new(QUEUED_CHUNK_BYTES);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| -> Result<()> {
            let _stopped = queue.on_exit();
            while let Some(message) = queue.pop() {
                match message {
                    SinkMessage::Chunk(chunk) => sink.write_chunk(&chunk)?,
                    SinkMessage::EndRowGroup => sink.end_row_group()?,
                }
            }
            Ok(())
        });
        let mut channel = ChannelSink { queue: &queue };
        let result = body(&mut channel);
        queue.close();
        match writer.join() {
            Ok(written) => written.map(|()| result),
            Err(_) => Err(crate::error::Error::invariant("the writer thread panicked")),
        }
    })
}

enum SinkMessage {
    Chunk(RecordBatch),
    EndRowGroup,
}

/// Messages from the producer to the writer thread, bounded by the bytes of the chunks they
/// carry rather than by their number: chunks of narrow rows are small and many, those of wide
/// rows few and large.
struct ChunkQueue {
    state: Mutex<QueueState>,
    changed: Condvar,
    capacity: usize,
}

#[derive(Default)]
struct QueueState {
    messages: VecDeque<(SinkMessage, usize)>,
    bytes: usize,
    /// The producer sends no more.
    closed: bool,
    /// The writer thread takes no more (it stopped on an error or a panic).
    stopped: bool,
}

/// Marks the queue stopped when the writer thread leaves, however it leaves.
struct WriterExit<'a>(&'a ChunkQueue);

impl Drop for WriterExit<'_> {
    fn drop(&mut self) {
        self.0.lock().stopped = true;
        self.0.changed.notify_all();
    }
}

impl ChunkQueue {
    fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(QueueState::default()),
            changed: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, QueueState>) -> MutexGuard<'a, QueueState> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `message` once it fits (at once when nothing waits); `false` if the writer
    /// thread has stopped.
    fn push(&self, message: SinkMessage, bytes: usize) -> bool {
        let mut state = self.lock();
        while !state.stopped
            && !state.messages.is_empty()
            && state.bytes.saturating_add(bytes) > self.capacity
        {
            state = self.wait(state);
        }
        if state.stopped {
            return false;
        }
        state.bytes += bytes;
        state.messages.push_back((message, bytes));
        drop(state);
        self.changed.notify_all();
        true
    }

    /// The next message, waiting for one; `None` once the producer has closed the queue and
    /// every message was taken.
    fn pop(&self) -> Option<SinkMessage> {
        let mut state = self.lock();
        loop {
            if let Some((message, bytes)) = state.messages.pop_front() {
                state.bytes -= bytes;
                drop(state);
                self.changed.notify_all();
                return Some(message);
            }
            if state.closed {
                return None;
            }
            state = self.wait(state);
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    fn on_exit(&self) -> WriterExit<'_> {
        WriterExit(self)
    }
}

struct ChannelSink<'a> {
    queue: &'a ChunkQueue,
}

impl ChannelSink<'_> {
    fn send(&mut self, message: SinkMessage, bytes: usize) -> Result<()> {
        match self.queue.push(message, bytes) {
            true => Ok(()),
            // The writer stopped on an error; `with_sink_thread` returns that error.
            false => Err(crate::error::Error::invariant("the writer thread stopped")),
        }
    }
}

impl ChunkSink for ChannelSink<'_> {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        self.send(SinkMessage::Chunk(chunk.clone()), values_bytes(chunk))
    }

    fn end_row_group(&mut self) -> Result<()> {
        self.send(SinkMessage::EndRowGroup, 0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use arrow_array::{ArrayRef, StringArray};

    use super::*;
    use crate::error::Error;

    fn chunk(bytes: usize) -> RecordBatch {
        let values: ArrayRef = Arc::new(StringArray::from(vec!["x".repeat(bytes)]));
        RecordBatch::try_from_iter([("s", values)]).expect("batch")
    }

    #[test]
    fn values_bytes_count_a_slice_not_its_buffers() {
        let values: ArrayRef = Arc::new(StringArray::from(vec!["aaaa", "bb", "c"]));
        let batch = RecordBatch::try_from_iter([("s", values)]).expect("batch");
        // Offsets (n + 1 of 4 bytes) and the values' bytes.
        assert_eq!(values_bytes(&batch), 4 * 4 + 7);
        assert_eq!(values_bytes(&batch.slice(1, 1)), 2 * 4 + 2);
    }

    #[test]
    fn the_queue_holds_its_bytes_at_most_and_a_large_chunk_alone() {
        let queue = ChunkQueue::new(100);
        let over = AtomicUsize::new(0);
        let within = |state: &QueueState| state.bytes <= 100 || state.messages.len() == 1;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                loop {
                    if !within(&queue.lock()) {
                        over.fetch_add(1, Ordering::Relaxed);
                    }
                    let Some(message) = queue.pop() else { break };
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    drop(message);
                }
            });
            for bytes in [40, 40, 40, 250, 10, 60, 60] {
                assert!(queue.push(SinkMessage::Chunk(chunk(bytes)), bytes));
                assert!(within(&queue.lock()));
            }
            queue.close();
        });
        assert_eq!(over.load(Ordering::Relaxed), 0);
        assert!(queue.lock().messages.is_empty());
    }

    #[test]
    fn a_writer_error_stops_the_producer_and_is_returned() {
        struct Failing(usize);
        impl ChunkSink for Failing {
            fn write_chunk(&mut self, _: &RecordBatch) -> Result<()> {
                self.0 += 1;
                match self.0 {
                    3 => Err(Error::invariant("third chunk")),
                    _ => Ok(()),
                }
            }
        }
        let mut sink = Failing(0);
        let sent = with_sink_thread(&mut sink, |s| {
            (0..1000).try_for_each(|_| s.write_chunk(&chunk(1 << 20)))
        });
        let error = sent.expect_err("the writer's error");
        assert!(error.to_string().contains("third chunk"), "{error}");
        assert_eq!(sink.0, 3);
    }
}

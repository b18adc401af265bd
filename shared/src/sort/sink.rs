//! Where sorted rows go: the output writer or a run file, always in fixed-size chunks.
//!
//! Both sinks implement [`ChunkSink`] where they are defined ([`RunWriter`](crate::sort::runs::RunWriter),
//! [`OutputWriter`](crate::output::writer::OutputWriter)), so this module depends on neither.

use arrow::array::RecordBatch;

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

/// Runs `body` with a sink whose chunks are written to `sink` on a second thread, so the
/// producer (sort, merge) and the Parquet encoder use two cores. At most two chunks wait in
/// between. The chunk sequence is unchanged, so output bytes are too.
pub fn with_sink_thread<S, R>(sink: &mut S, body: impl FnOnce(&mut dyn ChunkSink) -> R) -> Result<R>
where
    S: ChunkSink + Send,
{
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<SinkMessage>(2);
        let writer = scope.spawn(move || -> Result<()> {
            for message in rx {
                match message {
                    SinkMessage::Chunk(chunk) => sink.write_chunk(&chunk)?,
                    SinkMessage::EndRowGroup => sink.end_row_group()?,
                }
            }
            Ok(())
        });
        let mut channel = ChannelSink { tx: Some(tx) };
        let result = body(&mut channel);
        channel.tx = None;
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

struct ChannelSink {
    tx: Option<std::sync::mpsc::SyncSender<SinkMessage>>,
}

impl ChannelSink {
    fn send(&mut self, message: SinkMessage) -> Result<()> {
        match self.tx.as_ref().map(|tx| tx.send(message)) {
            Some(Ok(())) => Ok(()),
            // The writer stopped on an error; `with_sink_thread` returns that error.
            _ => Err(crate::error::Error::invariant("the writer thread stopped")),
        }
    }
}

impl ChunkSink for ChannelSink {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        self.send(SinkMessage::Chunk(chunk.clone()))
    }

    fn end_row_group(&mut self) -> Result<()> {
        self.send(SinkMessage::EndRowGroup)
    }
}

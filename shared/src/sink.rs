//! Where sorted rows go: the output writer or a run file, always in fixed-size chunks.

use arrow::array::RecordBatch;

use crate::error::Result;
use crate::runs::RunWriter;

/// Receives rows in key order, one chunk at a time.
pub trait ChunkSink {
    /// Appends a chunk that follows the previous ones in key order.
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()>;
}

impl ChunkSink for RunWriter {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        self.write(chunk)
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

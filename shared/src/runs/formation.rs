//! Run formation (phase 1): buffer decoded rows up to the budget, then sort and spill.
//!
//! Batches arrive in (input ordinal, row ordinal) order. When the buffer's decoded bytes
//! pass the budget B it is stably sorted and spilled as one run, so a run may be cut inside
//! an input and peak residency is B plus one batch, whatever the size of one input. If
//! nothing was spilled when the inputs end, the whole partition fits B and is written
//! straight from memory (skip-spill).

use arrow::array::RecordBatch;
use arrow::compute::interleave_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::row::Rows;

use crate::budget::{Charge, MemoryGauge};
use crate::error::{Error, Result};
use crate::key::SortKey;
use crate::runs::{RunWriter, ScratchDir, SortedRun};
use crate::sink::ChunkSink;

struct Buffered {
    batch: RecordBatch,
    rows: Rows,
    _charge: Charge,
}

/// The phase-1 buffer and the runs it has spilled.
pub struct RunFormation<'a> {
    key: &'a SortKey,
    schema: SchemaRef,
    budget_bytes: u64,
    run_batch_target_bytes: u64,
    gauge: &'a MemoryGauge,
    scratch: &'a ScratchDir,
    buffer: Vec<Buffered>,
    buffered_bytes: u64,
    buffered_rows: usize,
    runs: Vec<SortedRun>,
    spill_bytes: u64,
}

/// Bytes charged per buffered row for the sort's index entry.
const INDEX_BYTES_PER_ROW: u64 = 8;

impl<'a> RunFormation<'a> {
    /// An empty buffer under budget `budget_bytes`, spilling batches of about
    /// `run_batch_target_bytes` decoded bytes.
    pub fn new(
        key: &'a SortKey,
        schema: SchemaRef,
        budget_bytes: u64,
        run_batch_target_bytes: u64,
        gauge: &'a MemoryGauge,
        scratch: &'a ScratchDir,
    ) -> Self {
        Self {
            key,
            schema,
            budget_bytes,
            run_batch_target_bytes: run_batch_target_bytes.max(1),
            gauge,
            scratch,
            buffer: Vec::new(),
            buffered_bytes: 0,
            buffered_rows: 0,
            runs: Vec::new(),
            spill_bytes: 0,
        }
    }

    /// Adds a conformed batch; spills a run when the buffer passes the budget.
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let rows = self.key.rows(&batch)?;
        let bytes = crate::budget::batch_memory_bytes(&batch)
            + rows.size() as u64
            + INDEX_BYTES_PER_ROW * batch.num_rows() as u64;
        self.buffered_bytes += bytes;
        self.buffered_rows += batch.num_rows();
        self.buffer.push(Buffered {
            batch,
            rows,
            _charge: Charge::new(self.gauge, bytes),
        });
        if self.buffered_bytes > self.budget_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Runs spilled so far.
    pub fn num_runs(&self) -> usize {
        self.runs.len()
    }

    /// Stable order of the buffered rows by key: (batch, row) pairs.
    fn sorted_order(&self) -> Vec<(usize, usize)> {
        let mut order: Vec<(u32, u32)> = Vec::with_capacity(self.buffered_rows);
        for (b, buffered) in self.buffer.iter().enumerate() {
            order.extend((0..buffered.rows.num_rows()).map(|r| (b as u32, r as u32)));
        }
        // `sort_by` is stable: equal keys keep (input, row) order.
        order.sort_by(|&(ab, ar), &(bb, br)| {
            self.buffer[ab as usize]
                .rows
                .row(ar as usize)
                .cmp(&self.buffer[bb as usize].rows.row(br as usize))
        });
        order
            .into_iter()
            .map(|(b, r)| (b as usize, r as usize))
            .collect()
    }

    /// Writes the buffered rows in key order to `sink`, `chunk_rows` at a time.
    fn drain_sorted(&mut self, chunk_rows: usize, sink: &mut dyn ChunkSink) -> Result<()> {
        let order = self.sorted_order();
        let batches: Vec<&RecordBatch> = self.buffer.iter().map(|b| &b.batch).collect();
        for chunk in order.chunks(chunk_rows.max(1)) {
            let out = interleave_record_batch(&batches, chunk)
                .map_err(|e| Error::arrow("gathering sorted rows", e))?;
            sink.write_chunk(&out)?;
        }
        self.buffer.clear();
        self.buffered_bytes = 0;
        self.buffered_rows = 0;
        Ok(())
    }

    /// Sorts the buffer and spills it as one run.
    fn spill(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let avg_row_bytes = (self.buffered_bytes / self.buffered_rows.max(1) as u64).max(1);
        let rows_per_batch = (self.run_batch_target_bytes / avg_row_bytes).clamp(1, 1024) as usize;
        let mut writer = RunWriter::create(self.scratch.file("run", "arrow"), &self.schema)?;
        self.drain_sorted(rows_per_batch, &mut writer)?;
        let run = writer.finish()?;
        tracing::debug!(
            run = self.runs.len(),
            rows = run.rows,
            bytes = run.file_bytes,
            "spilled run"
        );
        self.spill_bytes += run.file_bytes;
        self.runs.push(run);
        Ok(())
    }

    /// Ends phase 1. With no run spilled, writes the sorted buffer straight to `sink` and
    /// returns no runs; otherwise spills the remainder and returns every run in order.
    pub fn finish(
        mut self,
        output_chunk_rows: usize,
        must_spill: bool,
        sink: &mut dyn ChunkSink,
    ) -> Result<FormedRuns> {
        if self.runs.is_empty() && !must_spill {
            self.drain_sorted(output_chunk_rows, sink)?;
            return Ok(FormedRuns {
                runs: Vec::new(),
                spill_bytes: 0,
            });
        }
        self.spill()?;
        Ok(FormedRuns {
            runs: std::mem::take(&mut self.runs),
            spill_bytes: self.spill_bytes,
        })
    }
}

/// The outcome of phase 1.
#[derive(Debug)]
pub struct FormedRuns {
    /// Runs in spill order (empty when the partition was written from memory).
    pub runs: Vec<SortedRun>,
    /// Bytes spilled to scratch.
    pub spill_bytes: u64,
}

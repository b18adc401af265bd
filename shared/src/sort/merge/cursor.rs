//! A merge cursor: one open run, its current batch and that batch's encoded keys.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;

use crate::error::{Error, Result};
use crate::gauge::{Charge, MemoryGauge};
use crate::sort::key::{BatchKeys, SortKey};
use crate::sort::runs::{RUN_READ_BUFFER_BYTES, SortedRun, StringDecoder, run_batch_rows};

/// A batch iterator over rows already in key order.
pub type BatchIter = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// A sorted input of a merge.
pub enum RunSource {
    /// A run this job spilled to scratch.
    Spilled(SortedRun),
    /// An input that is already sorted (a previous compacted file), read as it is. Its order
    /// is checked while merging: a file that claims order but breaks it fails the job.
    Presorted {
        /// The input's name, for errors.
        name: String,
        /// Its batches, conformed to the output schema.
        batches: BatchIter,
        /// Estimated decoded bytes per row.
        row_bytes: u64,
    },
}

impl RunSource {
    pub(crate) fn max_row_bytes(&self) -> u64 {
        match self {
            RunSource::Spilled(run) => run.max_row_bytes,
            RunSource::Presorted { row_bytes, .. } => *row_bytes,
        }
    }

    /// Bytes of its largest batch as a merge holds it, for batches written or read at most
    /// `target` bytes (at most 1,024 rows each): a spilled run's largest batch as written, or,
    /// when the merge `decoded` its codes, the same batch at its decoded width; an already
    /// sorted input is read in batches of `target`.
    pub(crate) fn batch_bytes(&self, target: u64, decoded: bool) -> u64 {
        match self {
            RunSource::Spilled(run) if decoded => {
                let rows = run_batch_rows(target, run.max_row_bytes) as u64;
                run.max_batch_bytes
                    .max(rows.saturating_mul(run.max_row_bytes))
            }
            RunSource::Spilled(run) => run.max_batch_bytes,
            RunSource::Presorted { .. } => target,
        }
    }

    pub(crate) fn spilled_path(&self) -> Option<PathBuf> {
        match self {
            RunSource::Spilled(run) => Some(run.path.clone()),
            RunSource::Presorted { .. } => None,
        }
    }
}

pub(super) enum Advance {
    SameBatch,
    /// The cursor moved to its next batch; the charge of the one it left, whose rows may
    /// still wait to be gathered, comes back to be dropped with that batch.
    NewBatch(Charge),
    Exhausted,
}

pub(super) struct Cursor {
    name: String,
    batches: BatchIter,
    batch: RecordBatch,
    keys: BatchKeys,
    position: usize,
    exhausted: bool,
    check_order: bool,
    _charge: Charge,
    /// The run reader's own buffer (see [`RUN_READ_BUFFER_BYTES`]), held while it is open.
    _reader_charge: Charge,
    pub(super) slot: usize,
}

impl Cursor {
    /// Opens a source; `None` when it holds no rows.
    pub(super) fn open(
        source: RunSource,
        key: &SortKey,
        gauge: &MemoryGauge,
        decoder: Option<&Arc<StringDecoder>>,
    ) -> Result<Option<Self>> {
        let (name, mut batches, check_order, reader_charge) = match source {
            RunSource::Spilled(run) => {
                let reader_charge = Charge::new(gauge, RUN_READ_BUFFER_BYTES);
                let name = run.path.display().to_string();
                let batches: BatchIter = super::open_run(&run, decoder)?;
                (name, batches, false, reader_charge)
            }
            RunSource::Presorted { name, batches, .. } => {
                (name, batches, true, Charge::new(gauge, 0))
            }
        };
        let Some((batch, keys, charge)) = next_non_empty(&mut batches, key, gauge)? else {
            return Ok(None);
        };
        let cursor = Self {
            name,
            batches,
            batch,
            keys,
            position: 0,
            exhausted: false,
            check_order,
            _charge: charge,
            _reader_charge: reader_charge,
            slot: 0,
        };
        if check_order {
            cursor.check_batch_order()?;
        }
        Ok(Some(cursor))
    }

    /// Compares this cursor's current row with another's.
    #[inline]
    pub(super) fn cmp_current(&self, other: &Cursor) -> std::cmp::Ordering {
        self.keys
            .cmp_rows(self.position, &other.keys, other.position)
    }

    pub(super) fn position(&self) -> usize {
        self.position
    }

    pub(super) fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    pub(super) fn is_exhausted(&self) -> bool {
        self.exhausted
    }

    /// Moves to the next row, loading the next batch when this one is used up.
    pub(super) fn advance(&mut self, key: &SortKey, gauge: &MemoryGauge) -> Result<Advance> {
        if self.position + 1 < self.keys.len() {
            self.position += 1;
            return Ok(Advance::SameBatch);
        }
        let last = self.check_order.then(|| (self.keys.clone(), self.position));
        match next_non_empty(&mut self.batches, key, gauge)? {
            Some((batch, keys, charge)) => {
                let left = std::mem::replace(&mut self._charge, charge);
                self.batch = batch;
                self.keys = keys;
                self.position = 0;
                if let Some((last_keys, last_position)) = last {
                    if self.keys.cmp_rows(0, &last_keys, last_position).is_lt() {
                        return Err(self.order_error());
                    }
                    self.check_batch_order()?;
                }
                Ok(Advance::NewBatch(left))
            }
            None => {
                self.exhausted = true;
                Ok(Advance::Exhausted)
            }
        }
    }

    fn check_batch_order(&self) -> Result<()> {
        for i in 1..self.keys.len() {
            if self.keys.cmp_rows(i, &self.keys, i - 1).is_lt() {
                return Err(self.order_error());
            }
        }
        Ok(())
    }

    fn order_error(&self) -> Error {
        Error::invariant(format!(
            "{} declares the compaction sort order but its rows are not sorted",
            self.name
        ))
    }
}

fn next_non_empty(
    batches: &mut BatchIter,
    key: &SortKey,
    gauge: &MemoryGauge,
) -> Result<Option<(RecordBatch, BatchKeys, Charge)>> {
    for batch in batches.by_ref() {
        let batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        let keys = key.keys(&batch)?;
        let bytes = crate::gauge::batch_memory_bytes(&batch) + keys.extra_bytes();
        let charge = Charge::new(gauge, bytes);
        return Ok(Some((batch, keys, charge)));
    }
    Ok(None)
}

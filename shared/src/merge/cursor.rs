//! A merge cursor: one open run, its current batch and that batch's encoded keys.

use std::path::PathBuf;

use arrow::array::RecordBatch;
use arrow::row::{Row, Rows};

use crate::budget::{Charge, MemoryGauge};
use crate::error::{Error, Result};
use crate::key::SortKey;
use crate::runs::SortedRun;

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

    pub(crate) fn spilled_path(&self) -> Option<PathBuf> {
        match self {
            RunSource::Spilled(run) => Some(run.path.clone()),
            RunSource::Presorted { .. } => None,
        }
    }
}

pub(super) enum Advance {
    SameBatch,
    NewBatch,
    Exhausted,
}

pub(super) struct Cursor {
    name: String,
    batches: BatchIter,
    batch: RecordBatch,
    rows: Rows,
    position: usize,
    exhausted: bool,
    check_order: bool,
    _charge: Charge,
    pub(super) slot: usize,
}

impl Cursor {
    /// Opens a source; `None` when it holds no rows.
    pub(super) fn open(
        source: RunSource,
        key: &SortKey,
        gauge: &MemoryGauge,
    ) -> Result<Option<Self>> {
        let (name, mut batches, check_order): (String, BatchIter, bool) = match source {
            RunSource::Spilled(run) => {
                let name = run.path.display().to_string();
                (name, Box::new(super::open_run(&run)?), false)
            }
            RunSource::Presorted { name, batches, .. } => (name, batches, true),
        };
        let Some((batch, rows, charge)) = next_non_empty(&mut batches, key, gauge)? else {
            return Ok(None);
        };
        let cursor = Self {
            name,
            batches,
            batch,
            rows,
            position: 0,
            exhausted: false,
            check_order,
            _charge: charge,
            slot: 0,
        };
        if check_order {
            cursor.check_batch_order()?;
        }
        Ok(Some(cursor))
    }

    pub(super) fn current(&self) -> Row<'_> {
        self.rows.row(self.position)
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
        if self.position + 1 < self.rows.num_rows() {
            self.position += 1;
            return Ok(Advance::SameBatch);
        }
        let last = self
            .check_order
            .then(|| self.rows.row(self.position).owned());
        match next_non_empty(&mut self.batches, key, gauge)? {
            Some((batch, rows, charge)) => {
                self._charge = charge;
                self.batch = batch;
                self.rows = rows;
                self.position = 0;
                if let Some(last) = last {
                    if self.rows.row(0) < last.row() {
                        return Err(self.order_error());
                    }
                    self.check_batch_order()?;
                }
                Ok(Advance::NewBatch)
            }
            None => {
                self.exhausted = true;
                Ok(Advance::Exhausted)
            }
        }
    }

    fn check_batch_order(&self) -> Result<()> {
        for i in 1..self.rows.num_rows() {
            if self.rows.row(i) < self.rows.row(i - 1) {
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
) -> Result<Option<(RecordBatch, Rows, Charge)>> {
    for batch in batches.by_ref() {
        let batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        let rows = key.rows(&batch)?;
        let charge = Charge::new(
            gauge,
            crate::budget::batch_memory_bytes(&batch) + rows.size() as u64,
        );
        return Ok(Some((batch, rows, charge)));
    }
    Ok(None)
}

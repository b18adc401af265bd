//! A row group's columns encoded on two threads: each column writer is independent (its pages,
//! dictionary, statistics and compression are its own), so which thread encodes a column
//! changes when its bytes are made, never what they are.

use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn};

use crate::error::{Error, Result};
use crate::two_threads::on_two_threads;

use super::OUTPUT;

/// Writes each writer's leaves to it in order (the writers and their leaves in the same
/// order), on two threads when `parallel`; a writer's weight is about the work of encoding its
/// leaves.
pub(super) fn write_leaves(
    writers: &mut [ArrowColumnWriter],
    leaves: Vec<(Vec<ArrowLeafColumn>, usize)>,
    parallel: bool,
) -> Result<()> {
    if leaves.len() != writers.len() {
        return Err(Error::invariant(format!(
            "{} leaves for {} column writers",
            leaves.len(),
            writers.len()
        )));
    }
    let weights: Vec<usize> = leaves.iter().map(|(_, w)| *w).collect();
    let pairs: Vec<_> = writers
        .iter_mut()
        .zip(leaves.into_iter().map(|(leaf, _)| leaf))
        .collect();
    on_two_threads(pairs, &weights, parallel, None, |(writer, leaves)| {
        leaves
            .iter()
            .try_for_each(|leaf| writer.write(leaf))
            .map_err(|e| Error::encode(OUTPUT, e))
    })?;
    Ok(())
}

/// Closes every writer (encoding and compressing its last pages), on two threads when
/// `parallel`; the chunks come back in the writers' order.
pub(super) fn close_writers(
    writers: Vec<ArrowColumnWriter>,
    parallel: bool,
) -> Result<Vec<ArrowColumnChunk>> {
    let weights: Vec<usize> = writers
        .iter()
        .map(ArrowColumnWriter::get_estimated_total_bytes)
        .collect();
    on_two_threads(writers, &weights, parallel, None, |writer| {
        writer.close().map_err(|e| Error::encode(OUTPUT, e))
    })
}

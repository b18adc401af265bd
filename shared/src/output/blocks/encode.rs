//! A row group's columns encoded on two threads: each column writer is independent (its pages,
//! dictionary, statistics and compression are its own), so splitting the columns between
//! threads changes when their bytes are made, never what they are.

use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn};

use crate::error::{Error, Result};

use super::OUTPUT;

/// Splits items of `weights` between two threads, heaviest first onto the lighter thread;
/// `true` marks the second thread's items.
fn split(weights: &[usize]) -> Vec<bool> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
    let mut second = vec![false; weights.len()];
    let (mut first_load, mut second_load) = (0usize, 0usize);
    for i in order {
        if second_load < first_load {
            second[i] = true;
            second_load += weights[i];
        } else {
            first_load += weights[i];
        }
    }
    second
}

/// Runs `work` over `items`, split between this thread and a helper by `weights` when
/// `parallel` (else all here); the results come back as this thread's, then the helper's.
fn on_two_threads<T: Send, R: Send>(
    items: Vec<T>,
    weights: &[usize],
    parallel: bool,
    work: impl Fn(Vec<T>) -> Result<Vec<R>> + Sync,
) -> Result<Vec<R>> {
    if !parallel || items.len() < 2 {
        return work(items);
    }
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for (item, to_second) in items.into_iter().zip(split(weights)) {
        if to_second {
            second.push(item);
        } else {
            first.push(item);
        }
    }
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| work(second));
        let mut results = work(first)?;
        let theirs = helper
            .join()
            .map_err(|_| Error::invariant("a column-encoding thread panicked"))??;
        results.extend(theirs);
        Ok(results)
    })
}

/// Writes each leaf to its writer (in the same order), on two threads when `parallel`; a
/// leaf's weight is about the work of encoding it.
pub(super) fn write_leaves(
    writers: &mut [ArrowColumnWriter],
    leaves: Vec<(ArrowLeafColumn, usize)>,
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
    on_two_threads(pairs, &weights, parallel, |pairs| {
        for (writer, leaf) in pairs {
            writer.write(&leaf).map_err(|e| Error::encode(OUTPUT, e))?;
        }
        Ok(Vec::<()>::new())
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
    let numbered: Vec<_> = writers.into_iter().enumerate().collect();
    let mut chunks = on_two_threads(numbered, &weights, parallel, |writers| {
        writers
            .into_iter()
            .map(|(i, w)| w.close().map(|chunk| (i, chunk)))
            .collect::<parquet::errors::Result<Vec<_>>>()
            .map_err(|e| Error::encode(OUTPUT, e))
    })?;
    chunks.sort_by_key(|(i, _)| *i);
    Ok(chunks.into_iter().map(|(_, chunk)| chunk).collect())
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn the_split_balances_the_heaviest_first() {
        assert_eq!(split(&[10, 1, 1, 8]), [false, true, true, true]);
        assert_eq!(split(&[5, 5]), [false, true]);
        assert_eq!(split(&[]), Vec::<bool>::new());
    }
}

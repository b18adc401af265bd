//! A row group's columns encoded on two threads: each column writer is independent (its pages,
//! dictionary, statistics and compression are its own), so which thread encodes a column
//! changes when its bytes are made, never what they are.

use std::sync::{Mutex, PoisonError};

use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn};

use crate::error::{Error, Result};

use super::OUTPUT;

/// The order in which items of `weights` are handed out: heaviest first, so the last items
/// taken, which decide when both threads are done, are the lightest.
fn heaviest_first(weights: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
    order
}

/// Runs `work` on each of `items`, on this thread and a helper when `parallel` (else all
/// here), and returns the results in the items' order. The two threads take the items one at
/// a time, heaviest (by `weights`) first, so neither waits long for the other: how long a
/// column takes depends on more than its weight (a page that fills is compressed there and
/// then), so a split fixed in advance leaves one thread idle while the other finishes.
fn on_two_threads<T: Send, R: Send>(
    items: Vec<T>,
    weights: &[usize],
    parallel: bool,
    work: impl Fn(T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    if !parallel || items.len() < 2 {
        return items.into_iter().map(work).collect();
    }
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    let queue: Vec<(usize, T)> = heaviest_first(weights)
        .into_iter()
        .filter_map(|i| {
            slots
                .get_mut(i)
                .and_then(Option::take)
                .map(|item| (i, item))
        })
        .collect();
    let queue = Mutex::new(queue.into_iter());
    let take_all = || -> Result<Vec<(usize, R)>> {
        let mut done = Vec::new();
        loop {
            let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some((i, item)) = next else {
                return Ok(done);
            };
            done.push((i, work(item)?));
        }
    };
    let mut results = std::thread::scope(|scope| {
        let helper = scope.spawn(take_all);
        let mut results = take_all()?;
        let theirs = helper
            .join()
            .map_err(|_| Error::invariant("a column-encoding thread panicked"))??;
        results.extend(theirs);
        Ok::<_, Error>(results)
    })?;
    results.sort_by_key(|(i, _)| *i);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}

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
    on_two_threads(pairs, &weights, parallel, |(writer, leaves)| {
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
    on_two_threads(writers, &weights, parallel, |writer| {
        writer.close().map_err(|e| Error::encode(OUTPUT, e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heaviest_go_first() {
        assert_eq!(heaviest_first(&[10, 1, 1, 8]), [0, 3, 1, 2]);
        assert_eq!(heaviest_first(&[5, 5]), [0, 1]);
        assert_eq!(heaviest_first(&[]), Vec::<usize>::new());
    }

    #[test]
    fn results_come_back_in_the_items_order_on_either_thread() {
        let items: Vec<usize> = (0..50).collect();
        let weights: Vec<usize> = items.iter().map(|i| (i * 7) % 13).collect();
        for parallel in [false, true] {
            let doubled = on_two_threads(items.clone(), &weights, parallel, |i| Ok(i * 2));
            let want: Vec<usize> = items.iter().map(|i| i * 2).collect();
            assert_eq!(doubled.ok(), Some(want), "parallel {parallel}");
        }
    }

    #[test]
    fn an_error_on_either_thread_is_returned() {
        let items: Vec<usize> = (0..20).collect();
        let weights = vec![1; items.len()];
        let failed = on_two_threads(items, &weights, true, |i| match i {
            13 => Err(Error::invariant("item 13")),
            i => Ok(i),
        });
        assert!(failed.is_err());
    }
}

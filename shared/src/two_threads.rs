//! Independent items worked on two threads, their results in the items' order: which thread
//! took an item changes when its result is made, never what it is.

use std::sync::{Mutex, PoisonError};

use crate::error::{Error, Result};

/// Whether this process may run on two cores or more (then the work that can is split over
/// two threads, which costs a few percent more CPU for a shorter job).
pub fn two_cores() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// The order in which items of `weights` are handed out: heaviest first, so the last items
/// taken, which decide when both threads are done, are the lightest.
fn heaviest_first(weights: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
    order
}

/// Runs `work` on each of `items`, on this thread and a helper when `parallel` (else all
/// here), and returns the results in the items' order; the helper gets a stack of
/// `helper_stack_bytes` when set (else the default). The two threads take the items one at a
/// time, heaviest (by `weights`) first, so neither waits long for the other: how long an item
/// takes depends on more than its weight, so a split fixed in advance leaves one thread idle
/// while the other finishes.
pub fn on_two_threads<T: Send, R: Send>(
    items: Vec<T>,
    weights: &[usize],
    parallel: bool,
    helper_stack_bytes: Option<usize>,
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
        let mut helper = std::thread::Builder::new();
        if let Some(bytes) = helper_stack_bytes {
            helper = helper.stack_size(bytes);
        }
        let helper = helper
            .spawn_scoped(scope, take_all)
            .map_err(|e| Error::invariant(format!("cannot start a helper thread: {e}")))?;
        let mut results = take_all()?;
        let theirs = helper
            .join()
            .map_err(|_| Error::invariant("a helper thread panicked"))??;
        results.extend(theirs);
        Ok::<_, Error>(results)
    })?;
    results.sort_by_key(|(i, _)| *i);
    Ok(results.into_iter().map(|(_, r)| r).collect())
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
            for stack in [None, Some(4 << 20)] {
                let doubled =
                    on_two_threads(items.clone(), &weights, parallel, stack, |i| Ok(i * 2));
                let want: Vec<usize> = items.iter().map(|i| i * 2).collect();
                assert_eq!(
                    doubled.ok(),
                    Some(want),
                    "parallel {parallel}, stack {stack:?}"
                );
            }
        }
    }

    #[test]
    fn both_threads_take_items() {
        let items: Vec<usize> = (0..8).collect();
        let weights = vec![1; items.len()];
        let seen = Mutex::new(std::collections::BTreeSet::new());
        let threads = on_two_threads(items, &weights, true, Some(1 << 20), |_| {
            let id = format!("{:?}", std::thread::current().id());
            seen.lock().expect("seen").insert(id.clone());
            // Each thread's first item waits (up to 10 s) until the other has taken one.
            let waited = std::time::Instant::now();
            while seen.lock().expect("seen").len() < 2 && waited.elapsed().as_secs() < 10 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Ok(id)
        })
        .expect("work");
        let distinct: std::collections::BTreeSet<&String> = threads.iter().collect();
        assert_eq!(distinct.len(), 2, "{distinct:?}");
    }

    #[test]
    fn an_error_on_either_thread_is_returned() {
        let items: Vec<usize> = (0..20).collect();
        let weights = vec![1; items.len()];
        let failed = on_two_threads(items, &weights, true, None, |i| match i {
            13 => Err(Error::invariant("item 13")),
            i => Ok(i),
        });
        assert!(failed.is_err());
    }
}

//! Inputs checked as they arrive: while a job downloads its inputs, each one downloaded is
//! checked on a thread of the pool (two where the job works on two threads) while the next ones
//! are still on the wire, so the check's CPU hides behind the transfers instead of following
//! them. The verdicts come back in the inputs' order, whichever thread took which input.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::input::{
    CHECK_STACK_BYTES, CheckVerdict, StagedInput, check_guarded, sized_by_local_copy,
};
use crate::options::KeyColumns;
use crate::partition::PartitionId;

/// Threads that check staged inputs handed to them one by one ([`check_input`](crate::input::check_input) under budget
/// B, a reader panic counting as a bad input, each input's size read from its local copy).
pub struct CheckPool {
    queue: Option<Sender<(usize, StagedInput)>>,
    workers: Vec<JoinHandle<Vec<(usize, CheckVerdict)>>>,
}

impl CheckPool {
    /// Starts the pool's threads (two when `parallel`, else one), each with a stack of
    /// [`CHECK_STACK_BYTES`]. `Err` when no thread could be started.
    pub fn start(
        partition: &PartitionId,
        keys: &KeyColumns,
        budget_bytes: u64,
        parallel: bool,
    ) -> Result<Self> {
        let (queue, inbox) = channel::<(usize, StagedInput)>();
        let inbox = Arc::new(Mutex::new(inbox));
        let partition = Arc::new(partition.clone());
        let keys = Arc::new(keys.clone());
        let threads = if parallel { 2 } else { 1 };
        let mut workers = Vec::with_capacity(threads);
        for n in 0..threads {
            let (inbox, partition, keys) = (
                Arc::clone(&inbox),
                Arc::clone(&partition),
                Arc::clone(&keys),
            );
            let worker = std::thread::Builder::new()
                .name(format!("input-check-{n}"))
                .stack_size(CHECK_STACK_BYTES)
                .spawn(move || check_until_closed(&inbox, &partition, &keys, budget_bytes))
                .map_err(|e| Error::invariant(format!("input check thread: {e}")))?;
            workers.push(worker);
        }
        Ok(CheckPool {
            queue: Some(queue),
            workers,
        })
    }

    /// Hands input `index` to the pool; it is checked as soon as a thread is free.
    pub fn check(&self, index: usize, staged: StagedInput) {
        if let Some(queue) = &self.queue {
            // The threads hold the inbox until `finish`: the send cannot fail before it.
            let _ = queue.send((index, staged));
        }
    }

    /// Waits for every input handed over to be checked, and returns the verdicts in the
    /// order of their indexes. Blocks: call it off the async runtime's threads.
    pub fn finish(mut self) -> Result<Vec<CheckVerdict>> {
        self.queue = None;
        let mut verdicts = Vec::new();
        for worker in self.workers.drain(..) {
            let done = worker
                .join()
                .map_err(|_| Error::invariant("an input check thread panicked"))?;
            verdicts.extend(done);
        }
        verdicts.sort_by_key(|(index, _)| *index);
        Ok(verdicts.into_iter().map(|(_, verdict)| verdict).collect())
    }
}

/// One thread of the pool: checks what the inbox gives until it is closed.
fn check_until_closed(
    inbox: &Mutex<Receiver<(usize, StagedInput)>>,
    partition: &PartitionId,
    keys: &KeyColumns,
    budget_bytes: u64,
) -> Vec<(usize, CheckVerdict)> {
    let mut done = Vec::new();
    loop {
        let next = inbox.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((index, staged)) = next else {
            return done;
        };
        let staged = sized_by_local_copy(staged);
        done.push((index, check_guarded(staged, partition, keys, budget_bytes)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{parquet_bytes, rows_batch, test_partition};

    /// A Parquet file of `rows` rows of one service inside the partition's hour.
    fn good_file(partition: &PartitionId, rows: i64) -> Vec<u8> {
        let (start, _) = partition.time_range_nanos();
        let rows: Vec<_> = (0..rows)
            .map(|i| (Some("api".to_string()), start + i, i))
            .collect();
        parquet_bytes(&[rows_batch(&rows)], 1024).to_vec()
    }

    #[test]
    fn verdicts_come_back_in_the_inputs_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let partition = test_partition();
        let keys = KeyColumns::default();
        let pool = CheckPool::start(&partition, &keys, 64 << 20, true).expect("pool");
        // Handed over out of order: a good file, a file that is no Parquet, another good one.
        let inputs = [
            (2, good_file(&partition, 50)),
            (0, b"not parquet at all".to_vec()),
            (1, good_file(&partition, 20)),
        ];
        for (index, bytes) in inputs {
            let local = dir.path().join(format!("{index}.parquet"));
            std::fs::write(&local, &bytes).expect("write");
            let staged = StagedInput {
                key: format!("in/{index}.parquet").into(),
                name: format!("{index}.parquet"),
                size: 0,
                local,
                is_compacted: false,
            };
            pool.check(index, staged);
        }
        let verdicts = pool.finish().expect("finish");
        let names: Vec<&str> = verdicts.iter().map(|(s, _)| s.name.as_str()).collect();
        assert_eq!(names, ["0.parquet", "1.parquet", "2.parquet"]);
        assert!(verdicts[0].1.is_err(), "{:?}", verdicts[0].1);
        let rows: Vec<u64> = (verdicts[1..].iter())
            .map(|(_, v)| v.as_ref().map(|c| c.rows).expect("a good file"))
            .collect();
        assert_eq!(rows, [20, 50]);
        // Each size is the local copy's.
        assert!(verdicts.iter().all(|(s, _)| s.size > 0));
    }
}

//! Steps 2 and 3 beside step 4, for a group whose inputs are downloaded: the sort starts from
//! what the inputs' footers declare (read first, one ranged GET each), while the inputs download
//! in the background, and reads each one once it has arrived and passed its check
//! ([`Arrivals`]). Transfers then hide behind compute instead of coming before it.
//!
//! The group that comes out is the one staging and checking every input first would give: once
//! the sort is done, every input's verdict is settled as [`stage_and_check`](super::staging)
//! settles them, and the sorted output stands only if it read exactly the inputs those
//! verdicts keep. Otherwise (an input the store no longer gives, one whose check found other
//! facts than its footer declared, or a union of columns that left an input out before every
//! verdict was known) the sort is done again from the settled verdicts, as without arrivals.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use futures::StreamExt;
use object_store::path::Path;

use crate::compact::job::JobContext;
use crate::compact::sizing::{Footer, Footers, read_footers};
use crate::compact::staging::{
    CheckedGroup, Refusals, Unreadable, check_inputs, settle_checks, stage_input, staged_copy,
};
use crate::compact::state::WantedInput;
use crate::error::{Error, Result};
use crate::input::sized_by_local_copy;
use crate::input::{CHECK_STACK_BYTES, CheckVerdict, CheckedInput, StagedInput, check_guarded};
use crate::object_key::ObjectKey;
use crate::options::KeyColumns;
use crate::partition::PartitionId;
use crate::scratch::ScratchDir;
use crate::sort::{Arrival, Arrivals};
use crate::store::Store;

/// A group's inputs on their way: the downloads running in the background, and what each
/// input's footer declared.
pub(crate) struct Arriving {
    slots: Arc<Slots>,
    downloads: Option<tokio::task::JoinHandle<()>>,
    /// The inputs with rows, as their footers declare them, in the group's order (until
    /// [`Arriving::declared_group`] takes them).
    declared: Vec<CheckedInput>,
}

/// Where each input of the group stands, shared by the downloads and the sort.
struct Slots {
    state: Mutex<Vec<Slot>>,
    changed: Condvar,
    /// Each input's key, in the group's order.
    order: Vec<Path>,
    /// Each input's place, by key.
    places: HashMap<Path, usize>,
    /// The bytes of each input, as listed.
    bytes: Vec<u64>,
    /// A download failed: the ones not yet started are skipped.
    failed: AtomicBool,
    partition: PartitionId,
    keys: KeyColumns,
    budget_bytes: u64,
}

/// Where one input stands.
enum Slot {
    /// Being (or yet to be) downloaded.
    OnTheWire,
    /// Downloaded, with its check's verdict once it has one.
    Staged {
        staged: StagedInput,
        verdict: Option<std::result::Result<CheckedInput, String>>,
    },
    /// The store would not give it.
    Unreadable(Unreadable),
    /// Its download failed (the error, until someone takes it).
    Failed(Option<Error>),
    /// Not downloaded: another download failed first.
    Skipped,
}

impl Arriving {
    /// Starts the downloads of `wanted` into `scratch` in the background, once their footers
    /// are read (from `footers` when the plan read them), when that is worth it: the group
    /// downloads at least two inputs, several at a time, and unless the footers are read
    /// already, of [`CompactOptions::arrive_above_bytes`](crate::options::CompactOptions::arrive_above_bytes) on average. `None`: the group is
    /// staged and checked first.
    pub(crate) async fn start(
        job: &JobContext<'_>,
        wanted: &[WantedInput],
        footers: &Footers,
        scratch: &ScratchDir,
    ) -> Result<Option<Self>> {
        let (store, options) = (job.store, job.options);
        let downloads = wanted.iter().filter(|w| store.local_path(&w.key).is_none());
        let (count, bytes) = downloads.fold((0u64, 0u64), |(n, b), w| (n + 1, b + w.bytes));
        let known = wanted
            .iter()
            .all(|w| footers.contains_key(&ObjectKey::from(&w.key)));
        // One download at a time keeps a job's store operations one sequence: the output's
        // upload would run beside the downloads.
        if count < 2
            || options.parallel_downloads < 2
            || (!known && bytes < count.saturating_mul(options.arrive_above_bytes))
        {
            return Ok(None);
        }
        let dir = scratch.path().to_path_buf();
        let slots = Arc::new(Slots {
            state: Mutex::new(wanted.iter().map(|_| Slot::OnTheWire).collect()),
            changed: Condvar::new(),
            order: wanted.iter().map(|w| w.key.clone()).collect(),
            places: (wanted.iter().enumerate())
                .map(|(i, w)| (w.key.clone(), i))
                .collect(),
            bytes: wanted.iter().map(|w| w.bytes).collect(),
            failed: AtomicBool::new(false),
            partition: job.partition.clone(),
            keys: options.keys.clone(),
            budget_bytes: options.settings.budget_bytes,
        });
        let downloads = tokio::spawn(download_all(
            store.clone(),
            wanted.to_vec(),
            dir.clone(),
            options.parallel_downloads,
            Arc::clone(&slots),
        ));
        let mut arriving = Arriving {
            slots,
            downloads: Some(downloads),
            declared: Vec::new(),
        };
        // The downloads start at once; the footers are read beside them.
        let read = if known {
            (wanted.iter())
                .map(|w| {
                    footers
                        .get(&ObjectKey::from(&w.key))
                        .cloned()
                        .unwrap_or(Footer::Unread)
                })
                .collect()
        } else {
            let inputs: Vec<&WantedInput> = wanted.iter().collect();
            match read_footers(job, &inputs).await {
                Ok(read) => read,
                Err(e) => {
                    arriving.abandon().await;
                    return Err(e);
                }
            }
        };
        arriving.declared = (wanted.iter().enumerate().zip(read))
            .filter_map(|((i, w), footer)| match footer {
                Footer::Read(facts) if facts.rows > 0 => Some(CheckedInput {
                    staged: StagedInput {
                        key: w.key.clone(),
                        name: w.key.filename().unwrap_or_default().to_string(),
                        size: w.bytes,
                        local: staged_copy(&dir, i),
                        is_compacted: w.is_compacted,
                    },
                    schema: facts.schema,
                    rows: facts.rows,
                    uncompressed_bytes: facts.declared.uncompressed_bytes,
                    row_bytes_estimate: facts.declared.row_bytes_estimate,
                    reader_bytes_estimate: facts.declared.reader_bytes_estimate,
                    declared_sort_key: facts.declared_sort_key,
                    row_groups: None,
                    page_levels: Vec::new(),
                }),
                _ => None,
            })
            .collect();
        Ok(Some(arriving))
    }

    /// The group as the footers declare it, for the sort to start from: the inputs with rows;
    /// the others (empty, or a footer the check would refuse) wait for their verdicts.
    pub(crate) fn declared_group(&mut self) -> CheckedGroup {
        CheckedGroup {
            checked: std::mem::take(&mut self.declared),
            empty: Vec::new(),
            quarantined: Vec::new(),
            refusals: Refusals::default(),
        }
    }

    /// Where the sort waits for the inputs.
    pub(crate) fn arrivals(&self) -> &dyn Arrivals {
        self.slots.as_ref()
    }

    /// Waits for every download, checks every input not checked yet, and settles the verdicts
    /// as staging and checking first would ([`settle_checks`]). A download's failure is the
    /// group's.
    pub(crate) async fn settle(
        mut self,
        job: &JobContext<'_>,
        job_decides: bool,
    ) -> Result<CheckedGroup> {
        self.join().await?;
        let slots = std::mem::take(&mut *self.slots.lock());
        let (mut verdicts, mut unchecked, mut unreadable) = (Vec::new(), Vec::new(), Vec::new());
        for ((i, key), slot) in self.slots.order.iter().enumerate().zip(slots) {
            match slot {
                Slot::Staged {
                    staged,
                    verdict: Some(verdict),
                } => verdicts.push((i, (staged, verdict))),
                Slot::Staged {
                    staged,
                    verdict: None,
                } => unchecked.push((i, staged)),
                Slot::Unreadable(why) => unreadable.push((key.clone(), why)),
                Slot::Failed(e) => {
                    return Err(e.unwrap_or_else(|| Error::invariant("a download failed twice")));
                }
                Slot::OnTheWire | Slot::Skipped => {
                    return Err(Error::invariant("a download was skipped, yet none failed"));
                }
            }
        }
        let (places, staged): (Vec<usize>, Vec<StagedInput>) = unchecked.into_iter().unzip();
        let checked = check_inputs(staged, job.partition, job.options).await?;
        verdicts.extend(places.into_iter().zip(checked));
        verdicts.sort_by_key(|&(i, _)| i);
        let verdicts: Vec<CheckVerdict> = verdicts.into_iter().map(|(_, v)| v).collect();
        settle_checks(job, verdicts, unreadable, false, job_decides)
    }

    /// Stops the downloads not yet started and waits for the others: nothing may write into
    /// the scratch directory once it is removed.
    pub(crate) async fn abandon(mut self) {
        self.slots.failed.store(true, Ordering::Relaxed);
        let _ = self.join().await;
    }

    async fn join(&mut self) -> Result<()> {
        match self.downloads.take() {
            Some(downloads) => downloads
                .await
                .map_err(|e| Error::invariant(format!("the downloads' task failed: {e}"))),
            None => Ok(()),
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        // Dropped without `settle` or `abandon` (the job's future was dropped): no download
        // goes on. A staged copy written after its directory went is removed with the
        // directories of jobs that no longer run ([`ScratchDir::create`]).
        self.slots.failed.store(true, Ordering::Relaxed);
        if let Some(downloads) = self.downloads.take() {
            downloads.abort();
        }
    }
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records how input `i`'s download ended.
    fn arrive(&self, i: usize, slot: Slot) {
        if matches!(slot, Slot::Failed(_)) {
            self.failed.store(true, Ordering::Relaxed);
        }
        if let Some(place) = self.lock().get_mut(i) {
            *place = slot;
        }
        self.changed.notify_all();
    }

    /// Checks input `i` once it is staged (on a thread of the check's stack), keeping the
    /// verdict for the next wait and for [`Arriving::settle`].
    fn verdict(&self, i: usize) -> Arrival {
        let staged = {
            let mut state = self.lock();
            loop {
                match state.get_mut(i) {
                    Some(Slot::OnTheWire) => {
                        state = (self.changed.wait(state)).unwrap_or_else(PoisonError::into_inner);
                    }
                    Some(Slot::Staged {
                        verdict: Some(verdict),
                        ..
                    }) => return arrival(verdict.clone()),
                    Some(Slot::Staged { staged, .. }) => break staged.clone(),
                    Some(Slot::Unreadable(why)) => {
                        return Arrival::Changed(format!("the store no longer gives it: {why:?}"));
                    }
                    Some(Slot::Failed(e)) => {
                        let e = e.take();
                        return Arrival::Failed(e.unwrap_or_else(|| {
                            Error::invariant("a download failed (reported already)")
                        }));
                    }
                    Some(Slot::Skipped) | None => {
                        return Arrival::Failed(Error::invariant(
                            "an input was not downloaded: another download failed",
                        ));
                    }
                }
            }
        };
        let (_, verdict) = match self.check(staged) {
            Ok(checked) => checked,
            Err(e) => return Arrival::Failed(e),
        };
        if let Some(Slot::Staged { verdict: kept, .. }) = self.lock().get_mut(i) {
            *kept = Some(verdict.clone());
        }
        arrival(verdict)
    }

    /// [`check_guarded`] on a thread of [`CHECK_STACK_BYTES`]: a hostile footer nests deep.
    fn check(&self, staged: StagedInput) -> Result<CheckVerdict> {
        let staged = sized_by_local_copy(staged);
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("input-check".into())
                .stack_size(CHECK_STACK_BYTES)
                .spawn_scoped(scope, || {
                    check_guarded(staged, &self.partition, &self.keys, self.budget_bytes)
                })
                .map_err(|e| Error::invariant(format!("input check thread: {e}")))?
                .join()
                .map_err(|_| Error::invariant("an input check thread panicked"))
        })
    }
}

/// What a check's verdict tells the sort.
fn arrival(verdict: std::result::Result<CheckedInput, String>) -> Arrival {
    match verdict {
        Ok(checked) => Arrival::Checked(checked),
        Err(reason) => Arrival::Bad(reason),
    }
}

impl Arrivals for Slots {
    fn wait(&self, declared: &CheckedInput) -> Arrival {
        match self.places.get(&declared.staged.key) {
            Some(&i) => self.verdict(i),
            None => Arrival::Changed("it is not among the group's inputs".into()),
        }
    }

    fn bytes_to_come(&self) -> u64 {
        let state = self.lock();
        (state.iter().zip(&self.bytes))
            .filter(|(slot, _)| matches!(slot, Slot::OnTheWire))
            .map(|(_, &bytes)| bytes)
            .sum()
    }
}

/// Downloads `wanted` into `dir`, `parallel` at a time in the group's order, recording each
/// outcome in `slots`; once one has failed (or the group is abandoned), the rest are skipped.
async fn download_all(
    store: Store,
    wanted: Vec<WantedInput>,
    dir: PathBuf,
    parallel: usize,
    slots: Arc<Slots>,
) {
    let (store, dir, slots) = (&store, &dir, &slots);
    futures::stream::iter(wanted.into_iter().enumerate())
        .map(|(i, wanted)| async move {
            if slots.failed.load(Ordering::Relaxed) {
                slots.arrive(i, Slot::Skipped);
                return;
            }
            let slot = match stage_input(store, dir, i, wanted).await {
                Ok(Ok(staged)) => Slot::Staged {
                    staged,
                    verdict: None,
                },
                Ok(Err((_, why))) => Slot::Unreadable(why),
                Err(e) => Slot::Failed(Some(e)),
            };
            slots.arrive(i, slot);
        })
        .buffered(parallel.max(1))
        .collect::<Vec<()>>()
        .await;
}

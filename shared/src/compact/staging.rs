//! Steps 2 and 3, staging and checking: each wanted input gets a local file (the store's own
//! file for a local directory, a streamed download into scratch otherwise), and its footer
//! and key columns are checked against the partition (a downloaded input as soon as it has
//! arrived, while the next ones download: [`crate::input::check_pool`]); bad inputs are
//! quarantined (recorded, left untouched, never deleted).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::StreamExt;
use object_store::path::Path;

use crate::compact::job::JobContext;
use crate::compact::state::WantedInput;
use crate::error::{Error, Result};
use crate::input::check_pool::CheckPool;
use crate::input::schema::is_time_setting_reason;
use crate::input::{CheckVerdict, CheckedInput, StagedInput};
use crate::object_key::ObjectKey;
use crate::options::CompactOptions;
use crate::partition::{PartitionId, staged_input_name};
use crate::report::Quarantined;
use crate::scratch::ScratchDir;
use crate::store::Store;

/// What steps 2 and 3 left of a group of inputs.
pub(crate) struct CheckedGroup {
    /// Inputs that passed the check with rows, in ordinal order.
    pub(crate) checked: Vec<CheckedInput>,
    /// Valid inputs without rows: consumed with the others, kept out of the union.
    pub(crate) empty: Vec<CheckedInput>,
    /// Bad inputs.
    pub(crate) quarantined: Vec<Quarantined>,
    /// The store's refusals: what a job whose every input was refused fails with.
    pub(crate) refusals: Refusals,
}

/// How the store answered a group's reads: whether it let any input be read, and the first
/// input it refused. A job none of whose inputs could be read because the store refused them
/// fails rather than quarantine them all: the function's own access is then at fault, not the
/// files.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refusals {
    /// Some input was read (staged).
    #[serde(default)]
    pub read_any: bool,
    /// The first input refused, with the store's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<(ObjectKey, String)>,
}

impl Refusals {
    /// The refusals of several groups together.
    pub(crate) fn merge(&mut self, other: &Refusals) {
        self.read_any |= other.read_any;
        if self.first.is_none() {
            self.first.clone_from(&other.first);
        }
    }

    /// `Err` when the store refused an input and let none be read.
    pub(crate) fn check(&self, partition: &PartitionId) -> Result<()> {
        match &self.first {
            Some((key, reason)) if !self.read_any => Err(Error::AccessDenied {
                partition: partition.to_string(),
                key: key.to_string(),
                reason: reason.clone(),
                refused: vec![key.to_string()],
            }),
            _ => Ok(()),
        }
    }
}

/// Steps 2 and 3 for a group of inputs: stage them in `scratch` and check them. Unless
/// `others_readable` (other live inputs were read by an earlier job) or `job_decides` (a group
/// of a fanned-out job, whose commit decides for the whole job), every input refused by the
/// store fails the job ([`Refusals`]).
pub(crate) async fn stage_and_check(
    job: &JobContext<'_>,
    wanted: Vec<WantedInput>,
    scratch: &ScratchDir,
    others_readable: bool,
    job_decides: bool,
) -> Result<CheckedGroup> {
    let (store, partition, options) = (job.store, job.partition, job.options);
    // Step 2: stage; inputs that are downloaded are checked (step 3) as each arrives.
    let pool = if wanted.iter().any(|w| store.local_path(&w.key).is_none()) {
        let (budget, parallel) = (
            options.settings.budget_bytes,
            options.settings.two_threads(),
        );
        Some(CheckPool::start(
            partition,
            &options.keys,
            budget,
            parallel,
        )?)
    } else {
        None
    };
    let staging = stage_inputs(
        store,
        wanted,
        scratch,
        options.parallel_downloads,
        pool.as_ref(),
    )
    .await;
    // Every check handed over ends before the scratch files may go.
    let checking = Instant::now();
    let early_verdicts = match pool {
        Some(pool) => Some(
            tokio::task::spawn_blocking(move || pool.finish())
                .await
                .map_err(|e| Error::invariant(format!("input check task failed: {e}")))??,
        ),
        None => None,
    };
    let (staged, unreadable) = staging?;
    let verdicts = match early_verdicts {
        Some(verdicts) if verdicts.len() == staged.len() => verdicts,
        Some(_) => return Err(Error::invariant("a staged input was not checked")),
        // Step 3: check (what was not checked as it arrived).
        None => check_inputs(staged, partition, options).await?,
    };
    let group = settle_checks(job, verdicts, unreadable, others_readable, job_decides)?;
    tracing::debug!(
        elapsed_ms = checking.elapsed().as_millis() as u64,
        "inputs checked"
    );
    Ok(group)
}

/// The group the verdicts of its staged inputs (in their order) and the inputs the store would
/// not give leave: the checked, the empty, the quarantined and the refusals, which fail the job
/// when the store refused every input and let none be read (unless `others_readable` or
/// `job_decides`, see [`stage_and_check`]).
pub(crate) fn settle_checks(
    job: &JobContext<'_>,
    verdicts: Vec<CheckVerdict>,
    unreadable: Vec<(Path, Unreadable)>,
    others_readable: bool,
    job_decides: bool,
) -> Result<CheckedGroup> {
    let (partition, options) = (job.partition, job.options);
    let mut refused = Vec::new();
    for (key, outcome) in unreadable {
        match outcome {
            Unreadable::Refused(reason) => refused.push((key, reason)),
            // Gone since the listing (deleted, or retired by another job's GC): nothing to
            // read, keep or retire; the next listing no longer holds it.
            Unreadable::Vanished(reason) => {
                tracing::warn!(file = %key, reason, "input vanished since the listing; skipped")
            }
        }
    }
    let refusals = Refusals {
        read_any: others_readable || !verdicts.is_empty(),
        first: (refused.first()).map(|(key, reason)| (ObjectKey::from(key), reason.clone())),
    };
    if !job_decides {
        // Fail and retry rather than quarantine a whole partition, naming every refused input
        // (a job that keeps failing so quarantines them: `dispatch::failures`).
        refusals.check(partition).map_err(|e| match e {
            Error::AccessDenied {
                partition,
                key,
                reason,
                ..
            } => Error::AccessDenied {
                partition,
                key,
                reason,
                refused: refused.iter().map(|(key, _)| key.to_string()).collect(),
            },
            other => other,
        })?;
    }

    let (checked, mut quarantined) = sort_verdicts(verdicts, options)?;
    for (key, reason) in &refused {
        quarantined.push(quarantine_key(
            key,
            &format!("the store refused to read it: {reason}"),
        ));
    }
    let (empty, checked) = checked.into_iter().partition(|c| c.rows == 0);
    Ok(CheckedGroup {
        checked,
        empty,
        quarantined,
        refusals,
    })
}

/// A checked input as the commit retires it.
pub(crate) fn consumed_input(c: &CheckedInput) -> WantedInput {
    WantedInput {
        key: c.staged.key.clone(),
        bytes: c.staged.size,
        is_compacted: c.staged.is_compacted,
    }
}

/// Why an input could not be staged.
#[derive(Debug)]
pub(crate) enum Unreadable {
    /// The store refused the GET (403: a KMS key the function may not use, an archived
    /// storage class answering `InvalidObjectState`): a bad input, with the store's reason.
    Refused(String),
    /// The object is gone (404) since the listing.
    Vanished(String),
}

/// Stages the wanted inputs in order, handing each to `checks` as soon as it is staged; and
/// names the ones the store would not give.
async fn stage_inputs(
    store: &Store,
    wanted: Vec<WantedInput>,
    scratch: &ScratchDir,
    parallel_downloads: usize,
    checks: Option<&CheckPool>,
) -> Result<(Vec<StagedInput>, Vec<(Path, Unreadable)>)> {
    // Every download runs to its end before this returns, even after one fails: a download
    // dropped midway leaves its file creation or write running on a blocking thread, which
    // could put a file back into the scratch directory while it is being removed. Once one has
    // failed, the downloads not yet started are skipped (`None`).
    let failed = AtomicBool::new(false);
    let failed = &failed;
    let outcomes: Vec<Result<Option<_>>> = futures::stream::iter(wanted.into_iter().enumerate())
        .map(|(i, wanted)| async move {
            if failed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let outcome = stage_input(store, scratch.path(), i, wanted).await;
            match (&outcome, checks) {
                (Err(_), _) => failed.store(true, Ordering::Relaxed),
                (Ok(Ok(staged)), Some(pool)) => pool.check(i, staged.clone()),
                _ => {}
            }
            outcome.map(Some)
        })
        .buffered(parallel_downloads.max(1))
        .collect()
        .await;
    let mut staged = Vec::new();
    let mut unreadable = Vec::new();
    for outcome in outcomes {
        match outcome? {
            Some(Ok(input)) => staged.push(input),
            Some(Err(refused)) => unreadable.push(refused),
            None => return Err(Error::invariant("a download was skipped, yet none failed")),
        }
    }
    Ok((staged, unreadable))
}

/// Stages input `i` of a job: its local path when the store is a directory, else a download
/// into `scratch_dir` ([`staged_copy`]); `Err` inside for an input that cannot be read (refused
/// or vanished).
pub(crate) async fn stage_input(
    store: &Store,
    scratch_dir: &std::path::Path,
    i: usize,
    wanted: WantedInput,
) -> Result<std::result::Result<StagedInput, (Path, Unreadable)>> {
    let WantedInput {
        key,
        bytes: size,
        is_compacted,
    } = wanted;
    let name = key.filename().unwrap_or_default().to_string();
    let local = match store.read_in_place(&key) {
        Some(path) if path.exists() || is_compacted => path,
        Some(_) => {
            let gone = Unreadable::Vanished("no longer in the store".into());
            return Ok(Err((key, gone)));
        }
        None => {
            let dest = staged_copy(scratch_dir, i);
            match store.download(&key, &dest).await {
                Ok(_) => dest,
                // A compacted file is this system's own: any failure fails the job.
                Err(e) if is_compacted => return Err(e),
                Err(Error::Store { source, .. }) if is_refusal(&source) => {
                    let refused = Unreadable::Refused(source.to_string());
                    return Ok(Err((key, refused)));
                }
                Err(Error::Store {
                    source: source @ object_store::Error::NotFound { .. },
                    ..
                }) => return Ok(Err((key, Unreadable::Vanished(source.to_string())))),
                Err(e) => return Err(e),
            }
        }
    };
    Ok(Ok(StagedInput {
        key,
        name,
        size,
        local,
        is_compacted,
    }))
}

/// Where input `i` of a job is downloaded in its scratch directory.
pub(crate) fn staged_copy(scratch_dir: &std::path::Path, i: usize) -> std::path::PathBuf {
    scratch_dir.join(staged_input_name(i))
}

/// A store answer that refuses this object for good (403), as opposed to a transient error.
pub(crate) fn is_refusal(error: &object_store::Error) -> bool {
    matches!(
        error,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    )
}

/// Checks the staged inputs ([`crate::input::check_inputs`]) off the runtime's threads, the
/// verdicts in the inputs' order.
pub(crate) async fn check_inputs(
    staged: Vec<StagedInput>,
    partition: &PartitionId,
    options: &CompactOptions,
) -> Result<Vec<CheckVerdict>> {
    let partition = partition.clone();
    let keys = options.keys.clone();
    let (budget, parallel) = (
        options.settings.budget_bytes,
        options.settings.two_threads(),
    );
    tokio::task::spawn_blocking(move || {
        crate::input::check_inputs(staged, &partition, &keys, budget, parallel)
    })
    .await
    .map_err(|e| Error::invariant(format!("input check task failed: {e}")))?
}

/// Sorts the verdicts, in the inputs' order, into the checked inputs and the quarantined
/// ones, unless the time column's settings are what every input lacks.
fn sort_verdicts(
    verdicts: Vec<CheckVerdict>,
    options: &CompactOptions,
) -> Result<(Vec<CheckedInput>, Vec<Quarantined>)> {
    // A time column that no input holds, that every input holds with a type no time has, or
    // whose integers every input counts in another unit, is a setting's mistake (a typo,
    // another writer's name, a text column, seconds read as nanoseconds), not bad files: the
    // job fails naming it, and nothing is quarantined.
    let lacking: Vec<(&Path, &String)> = (verdicts.iter())
        .filter_map(|(staged, v)| match v {
            Err(reason) if is_time_setting_reason(reason, &options.keys) => {
                Some((&staged.key, reason))
            }
            _ => None,
        })
        .collect();
    if let Some((first, reason)) = lacking.first()
        && !verdicts
            .iter()
            .any(|(_, v)| matches!(v, Ok(c) if c.rows > 0))
    {
        return Err(Error::Config {
            message: format!(
                "{reason} in all {} input(s) that hold rows (e.g. {first}): check the time \
                 column settings (--time-column, --time-unit, OURIOS_TIME_COLUMN, \
                 OURIOS_TIME_UNIT); nothing was quarantined",
                lacking.len()
            ),
        });
    }
    let mut checked = Vec::new();
    let mut quarantined = Vec::new();
    for (staged, verdict) in verdicts {
        match verdict {
            Ok(c) => checked.push(c),
            Err(reason) => quarantined.push(quarantine(&staged, &reason)?),
        }
    }
    Ok((checked, quarantined))
}

/// Quarantines a bad input; an earlier compacted output is never quarantined (its rows are
/// live only through it), so the job fails instead ([`Error::CompactedInput`]).
pub(crate) fn quarantine(staged: &StagedInput, reason: &str) -> Result<Quarantined> {
    if staged.is_compacted {
        return Err(Error::CompactedInput {
            file: staged.key.to_string(),
            reason: reason.to_string(),
        });
    }
    Ok(quarantine_key(&staged.key, reason))
}

fn quarantine_key(key: &Path, reason: &str) -> Quarantined {
    tracing::warn!(file = %key, reason, "quarantined bad input");
    Quarantined {
        file: ObjectKey::from(key),
        reason: reason.to_string(),
    }
}

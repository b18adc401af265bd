//! Steps 2 to 4, producing what a commit takes: a group of inputs staged, checked and sorted
//! into one object (the job's output, or a run of a fanned-out job), restarting without any
//! input found bad midway; the whole job in one task; late files that bring no row settled
//! without rewriting the earlier outputs; and late files that wait only checked.

use std::collections::BTreeSet;

use object_store::path::Path;

use crate::clock::Expiry;
use crate::compact::arriving::Arriving;
use crate::compact::job::JobContext;
use crate::compact::sizing::Footers;
use crate::compact::staging::{
    CheckedGroup, Refusals, consumed_input, quarantine, stage_and_check,
};
use crate::compact::state::WantedInput;
use crate::compact::writing::{
    Interrupted, WriteJob, Written, delete_quietly, output_key, sort_and_write,
};
use crate::error::{Error, Result};
use crate::input::schema::unify_weighted;
use crate::late::{CheckedFile, read_checked, write_checked};
use crate::manifest::OutputRange;
use crate::object_key::ObjectKey;
use crate::report::{FanOutShape, LateCheck, Quarantined};
use crate::scratch::ScratchDir;
use crate::sort::{Arrivals, SortStats};

/// What steps 2 to 4 produced, ready to commit.
pub(crate) struct Produced {
    /// Inputs consumed (read and sorted, or valid and empty), in ordinal order.
    pub(crate) consumed: Vec<WantedInput>,
    /// Rows read from them.
    pub(crate) rows: u64,
    /// Bad inputs.
    pub(crate) quarantined: Vec<Quarantined>,
    /// The outputs written, in key order.
    pub(crate) outputs: Vec<Written>,
    /// The sort's work, summed over tasks.
    pub(crate) stats: SortStats,
    /// How the job fanned out.
    pub(crate) fan_out: Option<FanOutShape>,
    /// When the outputs become too old to commit (`None`: no grace, no limit).
    pub(crate) commit_by: Option<Expiry>,
}

impl Produced {
    /// What settling inputs without writing anything gives: the empty ones consumed, the bad
    /// ones quarantined, each in key order.
    pub(crate) fn settled(
        mut consumed: Vec<WantedInput>,
        mut quarantined: Vec<Quarantined>,
    ) -> Self {
        quarantined.sort_by(|a, b| a.file.cmp(&b.file));
        consumed.sort_by(|a, b| a.key.cmp(&b.key));
        Produced {
            consumed,
            rows: 0,
            quarantined,
            outputs: Vec::new(),
            stats: SortStats::default(),
            fan_out: None,
            commit_by: None,
        }
    }
}

/// Steps 2 to 4 in one task: stage, check, sort and write one output (`footers`: those the plan
/// read). `compacted_in_one_piece` says the earlier outputs among `wanted` need no merge among
/// themselves ([`Manifest::compacted_in_one_piece`](crate::manifest::Manifest::compacted_in_one_piece)).
pub(crate) async fn produce_one(
    job: &JobContext<'_>,
    wanted: Vec<WantedInput>,
    footers: &Footers,
    compacted_in_one_piece: bool,
) -> Result<Produced> {
    let options = job.options;
    let scratch = ScratchDir::create_with_limit(
        &options.settings.scratch_dir,
        options.settings.scratch_limit_bytes,
    )?;
    let target = OutputTarget::Output {
        compacted_in_one_piece,
    };
    let sorted = sort_group(job, wanted, footers, &scratch, &target).await?;
    drop(scratch);
    // INVARIANT: an output is committed within the grace of the last renewal of its hold (on
    // this host's monotonic clock), and GC takes no output a job directory holds until it has
    // been idle for twice the grace on the store's clock; an unheld one, in one PUT, within
    // half the grace of the PUT's start, and GC takes it only a grace after its Last-Modified:
    // GC never sweeps an output as an orphan just before a commit references it, however long
    // its upload took.
    let commit_by = (sorted.written.as_ref())
        .and_then(|w| w.commit_by_ms(options.settings.gc_grace))
        .map(|by| Expiry::at_monotonic(&options.clock, by));
    Ok(Produced {
        commit_by,
        consumed: sorted.consumed,
        rows: sorted.rows,
        quarantined: sorted.quarantined,
        stats: sorted.written.as_ref().map(|w| w.stats).unwrap_or_default(),
        // The one output replaces every earlier one: its range is the whole partition.
        outputs: (sorted.written.into_iter())
            .map(|w| Written {
                range: Some(OutputRange { start: None }),
                ..w
            })
            .collect(),
        fan_out: None,
    })
}

/// Before a job over earlier outputs in one piece (in one task or fanned out): checks the
/// other inputs alone, and when none of them brings a row (all bad, empty or gone), settles
/// them (bad ones quarantined, empty ones consumed) reading neither the outputs nor anything
/// but them. `None`: some input has rows to merge, or the check would download more than the
/// memory budget's worth of them, and the job goes on. The inputs are checked smallest first,
/// as many at a time as are downloaded at once, and the first with rows ends the check, so a
/// job with good late files stages about one batch of them twice; a late file larger
/// than what is left of the budget ends it too (the invocation that asks may have little
/// scratch space, and the groups of the fan-out read such a file anyway).
pub(crate) async fn settle_without_rows(
    job: &JobContext<'_>,
    wanted: &[WantedInput],
    compacted_in_one_piece: bool,
) -> Result<Option<Produced>> {
    if !compacted_in_one_piece || !wanted.iter().any(|w| w.is_compacted) {
        return Ok(None);
    }
    let mut others: Vec<WantedInput> = wanted.iter().filter(|w| !w.is_compacted).cloned().collect();
    others.sort_by(|a, b| a.bytes.cmp(&b.bytes).then_with(|| a.key.cmp(&b.key)));
    let options = job.options;
    let scratch = ScratchDir::create_with_limit(
        &options.settings.scratch_dir,
        options.settings.scratch_limit_bytes,
    )?;
    let (mut consumed, mut quarantined) = (Vec::new(), Vec::new());
    let mut allowance = options.budget().shares().download_allowance_bytes;
    let mut rest = others.as_slice();
    while !rest.is_empty() {
        let mut batch_len = 0;
        while batch_len < rest.len().min(options.parallel_downloads.max(1))
            && rest[batch_len].bytes <= allowance
        {
            allowance -= rest[batch_len].bytes;
            batch_len += 1;
        }
        if batch_len == 0 {
            return Ok(None);
        }
        let (batch, tail) = rest.split_at(batch_len);
        rest = tail;
        let group = stage_and_check(job, batch.to_vec(), &scratch, true, false).await?;
        if !group.checked.is_empty() {
            return Ok(None);
        }
        consumed.extend(group.empty.iter().map(consumed_input));
        quarantined.extend(group.quarantined);
    }
    Ok(Some(Produced::settled(consumed, quarantined)))
}

/// A job that only checks ([`JobMode::Check`](crate::options::JobMode::Check)): the
/// uncompacted inputs among `wanted` no check has passed are staged and checked, as many at
/// a time as are downloaded at once within the download allowance (one at least); the bad
/// are quarantined, the empty consumed, and the others recorded in the partition's
/// checked-late record ([`crate::late`]), where they wait for the late-file policy to merge
/// them. Nothing is written but that record; `Produced` holds what a commit records (`None`:
/// nothing).
pub(crate) async fn check_late_files(
    job: &JobContext<'_>,
    wanted: &[WantedInput],
) -> Result<(Option<Produced>, LateCheck)> {
    let ingest: Vec<&WantedInput> = wanted.iter().filter(|w| !w.is_compacted).collect();
    let mut record = read_checked(job.store, job.partition).await?;
    let entry = |w: &WantedInput| CheckedFile {
        key: w.key.to_string(),
        bytes: w.bytes,
    };
    let live: BTreeSet<CheckedFile> = ingest.iter().map(|w| entry(w)).collect();
    record.checked.retain(|c| live.contains(c));
    let mut unchecked: Vec<WantedInput> = (ingest.iter())
        .filter(|w| !record.checked.contains(&entry(w)))
        .map(|w| (*w).clone())
        .collect();
    unchecked.sort_by(|a, b| a.bytes.cmp(&b.bytes).then_with(|| a.key.cmp(&b.key)));
    let checked = unchecked.len();
    let options = job.options;
    let allowance = options.budget().shares().download_allowance_bytes;
    let (mut consumed, mut quarantined) = (Vec::new(), Vec::new());
    let mut rest = unchecked.as_slice();
    while !rest.is_empty() {
        let (mut batch_len, mut bytes) = (1, rest[0].bytes);
        while batch_len < rest.len().min(options.parallel_downloads.max(1))
            && bytes + rest[batch_len].bytes <= allowance
        {
            bytes += rest[batch_len].bytes;
            batch_len += 1;
        }
        let (batch, tail) = rest.split_at(batch_len);
        rest = tail;
        // Each batch in its own scratch directory, gone before the next is staged.
        let scratch = ScratchDir::create_with_limit(
            &options.settings.scratch_dir,
            options.settings.scratch_limit_bytes,
        )?;
        let group = stage_and_check(job, batch.to_vec(), &scratch, true, false).await?;
        consumed.extend(group.empty.iter().map(consumed_input));
        quarantined.extend(group.quarantined);
        for good in &group.checked {
            record.checked.insert(CheckedFile {
                key: good.staged.key.to_string(),
                bytes: good.staged.size,
            });
        }
    }
    write_checked(job.store, job.partition, &record).await?;
    let outcome = LateCheck {
        checked,
        waiting: record.checked.len(),
    };
    if consumed.is_empty() && quarantined.is_empty() {
        return Ok((None, outcome));
    }
    Ok((Some(Produced::settled(consumed, quarantined)), outcome))
}

/// Where a sorted group goes.
pub(crate) enum OutputTarget {
    /// The job's output, named by its input set ([`output_key`]). When the earlier outputs
    /// among the inputs are in one piece and no other input with rows passes the check, none
    /// is written: they stand as they are, and only the bad and empty inputs are committed.
    Output { compacted_in_one_piece: bool },
    /// A run of a fanned-out job, at this key.
    Run(Path),
}

/// What sorting one group of inputs gave.
pub(crate) struct SortedGroup {
    pub(crate) consumed: Vec<WantedInput>,
    pub(crate) rows: u64,
    pub(crate) quarantined: Vec<Quarantined>,
    /// How the store answered the group's reads.
    pub(crate) refusals: Refusals,
    /// `None` when no input held a row.
    pub(crate) written: Option<Written>,
}

/// Steps 2 to 4 for a group of inputs: stage them in `scratch`, check them, and sort the good
/// ones into `target`, restarting without any input found bad midway. A group that downloads
/// its inputs sorts them as they arrive ([`Arriving`]), from their footers (`footers` holds
/// those the plan read).
pub(crate) async fn sort_group(
    job: &JobContext<'_>,
    wanted: Vec<WantedInput>,
    footers: &Footers,
    scratch: &ScratchDir,
    target: &OutputTarget,
) -> Result<SortedGroup> {
    let job_decides = matches!(target, OutputTarget::Run(_));
    if let Some(arriving) = Arriving::start(job, &wanted, footers, scratch).await? {
        return sort_arriving(job, arriving, scratch, target, job_decides).await;
    }
    let group = stage_and_check(job, wanted, scratch, false, job_decides).await?;
    sort_settled(job, group, scratch, target).await
}

/// Step 4 for a group whose every verdict is in ([`sort_checked`] without arrivals).
async fn sort_settled(
    job: &JobContext<'_>,
    group: CheckedGroup,
    scratch: &ScratchDir,
    target: &OutputTarget,
) -> Result<SortedGroup> {
    let sorted = sort_checked(job, group, scratch, target, None).await?;
    sorted.ok_or_else(|| Error::invariant("a sort without arrivals found one changed"))
}

/// [`sort_group`] while the inputs arrive: the sort from their footers, then their verdicts
/// settled. The sorted output stands when it read exactly the inputs the verdicts keep;
/// otherwise it is deleted and the group sorted again from the verdicts.
async fn sort_arriving(
    job: &JobContext<'_>,
    mut arriving: Arriving,
    scratch: &ScratchDir,
    target: &OutputTarget,
    job_decides: bool,
) -> Result<SortedGroup> {
    let declared = arriving.declared_group();
    let streamed = sort_checked(job, declared, scratch, target, Some(arriving.arrivals())).await;
    let streamed = match streamed {
        Ok(streamed) => streamed,
        Err(e) => {
            arriving.abandon().await;
            return Err(e);
        }
    };
    let settled = arriving.settle(job, job_decides).await;
    let written = streamed.as_ref().and_then(|s| s.written.as_ref());
    let group = match settled {
        Ok(group) => group,
        Err(e) => {
            discard(job, written).await;
            return Err(e);
        }
    };
    match streamed {
        Some(sorted) if read_exactly(&sorted, &group) => {
            // The inputs found bad midway, which their checks passed, as without arrivals.
            let mut quarantined = group.quarantined;
            let midway: Vec<Quarantined> = (sorted.quarantined.into_iter())
                .filter(|q| !quarantined.iter().any(|g| g.file == q.file))
                .collect();
            quarantined.extend(midway);
            let consumed = (group.checked.iter().chain(&group.empty))
                .map(consumed_input)
                .filter(|c| {
                    !quarantined
                        .iter()
                        .any(|q| q.file == ObjectKey::from(&c.key))
                })
                .collect();
            Ok(SortedGroup {
                consumed,
                quarantined: sorted_by_file(quarantined),
                refusals: group.refusals,
                rows: sorted.rows,
                written: sorted.written,
            })
        }
        streamed => {
            let written = streamed.as_ref().and_then(|s| s.written.as_ref());
            tracing::info!(
                partition = %job.partition,
                "the inputs arrived other than their footers declared; sorting them again"
            );
            discard(job, written).await;
            sort_settled(job, group, scratch, target).await
        }
    }
}

/// Whether a sort read exactly the inputs with rows that `group` keeps, in their order, but
/// those it found bad midway (each input it read was checked, and found as declared, as it
/// arrived).
fn read_exactly(sorted: &SortedGroup, group: &CheckedGroup) -> bool {
    let midway = |key: &object_store::path::Path| {
        let key = ObjectKey::from(key);
        sorted.quarantined.iter().any(|q| q.file == key)
    };
    let kept = (group.checked.iter())
        .map(|c| &c.staged.key)
        .filter(|k| !midway(k));
    sorted.consumed.iter().map(|c| &c.key).eq(kept)
}

/// Deletes an output written from inputs that turned out other than declared, with its hold
/// (best effort: GC sweeps what is left once the hold is idle).
async fn discard(job: &JobContext<'_>, written: Option<&Written>) {
    let Some(written) = written else {
        return;
    };
    let key = &written.output.key;
    let name = (key.location().filename()).filter(|_| written.held_from_ms.is_some());
    let hold = name.map(|name| job.layout.hold_key(job.partition, job.attempt_id, name));
    delete_quietly(job.store, key).await;
    if let Some(hold) = hold {
        delete_quietly(job.store, &ObjectKey::from(hold)).await;
    }
}

fn sorted_by_file(mut quarantined: Vec<Quarantined>) -> Vec<Quarantined> {
    quarantined.sort_by(|a, b| a.file.cmp(&b.file));
    quarantined
}

/// Step 4 for a checked group: sorts the good inputs into `target`, restarting without any
/// input found bad midway. With `arrivals`, the inputs are those the footers declare, read as
/// they arrive; `None` then when the sort's plan no longer holds: an input arrived other than
/// declared, or the union of columns left one out before every check had spoken.
async fn sort_checked(
    job: &JobContext<'_>,
    group: CheckedGroup,
    scratch: &ScratchDir,
    target: &OutputTarget,
    arrivals: Option<&dyn Arrivals>,
) -> Result<Option<SortedGroup>> {
    let (partition, options) = (job.partition, job.options);
    let CheckedGroup {
        mut checked,
        empty,
        mut quarantined,
        refusals,
    } = group;

    // Step 4: sort and write, restarting without any input found bad midway.
    let written = loop {
        let (unified, rejected) = {
            // A previous compacted output outweighs any ingest file: its rows are live.
            let schemas: Vec<(&str, &arrow_schema::Schema, u64)> = checked
                .iter()
                .map(|c| {
                    let weight = if c.staged.is_compacted {
                        u64::MAX
                    } else {
                        c.rows
                    };
                    (c.staged.name.as_str(), c.schema.as_ref(), weight)
                })
                .collect();
            unify_weighted(
                &schemas,
                &options.keys,
                options.budget().shares().leaf_limit,
            )
        };
        if !rejected.is_empty() && arrivals.is_some() {
            // Which inputs the union keeps depends on which ones the checks keep.
            return Ok(None);
        }
        for rejection in rejected.iter().rev() {
            let bad = checked.remove(rejection.position);
            quarantined.push(quarantine(&bad.staged, &rejection.reason)?);
        }
        let Some(unified) = unified.filter(|_| !checked.is_empty()) else {
            break None;
        };
        if matches!(
            target,
            OutputTarget::Output {
                compacted_in_one_piece: true
            }
        ) && checked.iter().all(|c| c.staged.is_compacted)
        {
            // Nothing new to merge: rewriting the earlier outputs would change no row. They
            // are neither consumed nor retired.
            checked.clear();
            break None;
        }
        let input_bytes: u64 = checked.iter().map(|c| c.staged.size).sum();
        let write = WriteJob {
            inputs: &checked,
            unified: &unified,
            threshold_input_bytes: input_bytes,
            range: None,
            arrivals,
            committed_here: true,
        };
        let name = |row_group_bytes: u64| match target {
            OutputTarget::Output { .. } => output_key(
                job.layout,
                partition,
                &checked,
                row_group_bytes,
                options,
                job.attempt_id,
            ),
            OutputTarget::Run(key) => (key.clone(), String::new()),
        };
        match sort_and_write(job, scratch, &write, &name).await? {
            Ok(written) => break Some(written),
            Err(Interrupted::Bad { position, reason }) => {
                let bad = checked.remove(position);
                quarantined.push(quarantine(&bad.staged, &reason)?);
            }
            Err(Interrupted::Changed { position, reason }) => {
                tracing::info!(file = %checked[position].staged.key, reason, "an input arrived other than its footer declared");
                return Ok(None);
            }
        }
    };
    let consumed = checked.iter().chain(&empty).map(consumed_input).collect();
    Ok(Some(SortedGroup {
        consumed,
        rows: checked.iter().map(|c| c.rows).sum(),
        quarantined: sorted_by_file(quarantined),
        refusals,
        written,
    }))
}

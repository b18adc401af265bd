//! Late files merged into the ranges of a fanned-out hour that their keys fall in, and only
//! those. The hour's outputs are disjoint key ranges, each recorded with its start in the
//! manifest ([`Manifest::ranges`]). The late files are staged, checked and sorted into one run;
//! each output whose range holds some of its rows is merged with them into a new output over
//! the same range; the other outputs stay as they are, unread. The outputs stay disjoint key
//! ranges in key order, and a late file costs the bytes of the ranges it touches.

use arrow_schema::Schema;

use super::range_read::{footer, stage_range};
use crate::clock::Expiry;
use crate::compact::job::JobContext;
use crate::compact::producing::{OutputTarget, Produced, sort_group};
use crate::compact::sizing::Footers;
use crate::compact::state::WantedInput;
use crate::compact::writing::{WriteJob, Written, delete_quietly, input_set_hash, sort_and_write};
use crate::error::{Error, Result};
use crate::input::schema::unify;
use crate::manifest::{CompactedFile, Manifest, OutputRange};
use crate::output::threshold::resolve_row_group_bytes;
use crate::read::split::row_groups_in_range;
use crate::report::{FanOutShape, OutputFile};
use crate::scratch::ScratchDir;
use crate::sort::key::KeyRange;

/// Whether the late files among `wanted` are merged into the ranges they touch: the hour's
/// outputs are several recorded ranges, and the late files are no larger than its largest
/// output (a larger batch is merged like a new hour, fanned out afresh).
pub(crate) fn merges_into_ranges(manifest: &Manifest, wanted: &[WantedInput]) -> bool {
    let Some(ranges) = manifest.ranges().filter(|r| r.len() > 1) else {
        return false;
    };
    let late: u64 = (wanted.iter().filter(|w| !w.is_compacted))
        .map(|w| w.bytes)
        .sum();
    let largest = ranges.iter().map(|(f, _)| f.bytes).max().unwrap_or(0);
    let every_output = ranges.iter().all(|(f, _)| {
        wanted
            .iter()
            .any(|w| w.is_compacted && f.key.location() == &w.key)
    });
    late > 0 && late <= largest && every_output
}

/// Steps 2 to 4 for late files merged into the ranges they touch (`None`: the job is not one,
/// see [`merges_into_ranges`], or the late files' columns do not unify with the outputs', which
/// the whole hour's merge settles).
pub(crate) async fn produce_into_ranges(
    job: &JobContext<'_>,
    manifest: &Manifest,
    wanted: &[WantedInput],
) -> Result<Option<Produced>> {
    if !merges_into_ranges(manifest, wanted) {
        return Ok(None);
    }
    let Some(ranges) = manifest.ranges() else {
        return Ok(None);
    };
    let late: Vec<WantedInput> = wanted.iter().filter(|w| !w.is_compacted).cloned().collect();
    let options = job.options;
    let scratch = ScratchDir::create_with_limit(
        &options.settings.scratch_dir,
        options.settings.scratch_limit_bytes,
    )?;
    let run_key = job.layout.run_key(job.partition, job.attempt_id, 0);
    let sorted = sort_group(
        job,
        late,
        &Footers::new(),
        &scratch,
        &OutputTarget::Run(run_key.clone()),
    )
    .await?;
    drop(scratch);
    // Only late files were read: a store that refused every one fails the job.
    sorted.refusals.check(job.partition)?;
    let Some(run) = sorted.written else {
        // No late row: the bad ones are quarantined, the empty ones retired.
        return Ok(Some(Produced::settled(sorted.consumed, sorted.quarantined)));
    };
    let merged = merge_touched(job, &ranges, &run.output).await;
    delete_quietly(job.store, &run.output.key).await;
    let Some(touched) = merged? else {
        return Ok(None);
    };
    let late_rows = sorted.rows;
    if touched.late_rows != late_rows {
        return Err(Error::invariant(format!(
            "the ranges took {} of the late files' {late_rows} rows",
            touched.late_rows
        )));
    }
    let mut consumed = sorted.consumed;
    consumed.extend(touched.outputs.iter().map(|(file, _)| WantedInput {
        key: file.key.location().clone(),
        bytes: file.bytes,
        is_compacted: true,
    }));
    let commit_by = (touched.written.iter())
        .filter_map(|w| w.commit_by_ms(options.settings.gc_grace))
        .min()
        .map(|by| Expiry::at_monotonic(&options.clock, by));
    let rows = late_rows + touched.outputs.iter().map(|(f, _)| f.rows).sum::<u64>();
    let mut stats = run.stats;
    for w in &touched.written {
        super::tasks::add_stats(&mut stats, &w.stats);
    }
    Ok(Some(Produced {
        fan_out: Some(FanOutShape {
            groups: 1,
            ranges: touched.written.len(),
        }),
        consumed,
        rows,
        quarantined: sorted.quarantined,
        outputs: touched.written,
        stats,
        commit_by,
    }))
}

/// The outputs the late run touched, and what their merges wrote.
struct Touched {
    /// The earlier outputs merged, with their ranges.
    outputs: Vec<(CompactedFile, KeyRange)>,
    /// Their replacements, in key order, each over the range of the one it replaces.
    written: Vec<Written>,
    /// Late rows merged.
    late_rows: u64,
}

/// Merges the late run into each output whose range holds some of its rows (`None`: their
/// columns do not unify). Each range in a scratch directory of its own, gone before the next.
async fn merge_touched(
    job: &JobContext<'_>,
    ranges: &[(&CompactedFile, KeyRange)],
    run: &OutputFile,
) -> Result<Option<Touched>> {
    let keys = &job.options.keys;
    let (run_meta, run_arrow) = footer(job, run.key.location(), run.bytes, &run.key).await?;
    let all_bytes = run.bytes + ranges.iter().map(|(f, _)| f.bytes).sum::<u64>();
    let mut touched = Touched {
        outputs: Vec::new(),
        written: Vec::new(),
        late_rows: 0,
    };
    for (index, (file, range)) in ranges.iter().enumerate() {
        let run_groups = row_groups_in_range(&run_meta, keys, range);
        if run_groups.is_empty() {
            continue;
        }
        let scratch = ScratchDir::create_with_limit(
            &job.options.settings.scratch_dir,
            job.options.settings.scratch_limit_bytes,
        )?;
        let late = stage_range(
            job, run, &run_meta, &run_arrow, run_groups, range, &scratch, 1,
        );
        let late = late.await?;
        if late.rows == 0 {
            continue;
        }
        let (meta, arrow) = footer(job, file.key.location(), file.bytes, &file.key).await?;
        let every_group: Vec<usize> = (0..meta.num_row_groups()).collect();
        let output = OutputFile {
            key: file.key.clone(),
            bytes: file.bytes,
            rows: file.rows,
            row_groups: every_group.len() as u64,
        };
        let earlier = stage_range(job, &output, &meta, &arrow, every_group, range, &scratch, 0);
        let earlier = earlier.await?;
        if earlier.rows != file.rows {
            return Err(Error::invariant(format!(
                "{} holds {} rows, {} of them in its recorded range",
                file.key, file.rows, earlier.rows
            )));
        }
        let schemas: [(&str, &Schema); 2] = [
            (file.key.as_str(), earlier.schema.as_ref()),
            (run.key.as_str(), late.schema.as_ref()),
        ];
        let (unified, rejected) = unify(&schemas, keys);
        let Some(unified) = unified.filter(|_| rejected.is_empty()) else {
            return Ok(None);
        };
        touched.late_rows += late.rows;
        let inputs = [earlier, late];
        let write = WriteJob {
            inputs: &inputs,
            unified: &unified,
            threshold_input_bytes: all_bytes,
            range: Some(range),
            arrivals: None,
            committed_here: true,
        };
        let sources = inputs.iter().map(|c| (&c.staged.key, c.staged.size));
        let threshold = resolve_row_group_bytes(job.options.settings.row_group_bytes, all_bytes);
        let input_set = input_set_hash(sources, threshold, job.options, Some(index));
        let name = |_: u64| {
            let attempt = format!("{}-r{index:05}", job.attempt_id);
            let key = job.layout.output_key(job.partition, &input_set, &attempt);
            (key, input_set.clone())
        };
        let written = match sort_and_write(job, &scratch, &write, &name).await? {
            Ok(written) => written,
            Err(stopped) => {
                return Err(Error::invariant(format!(
                    "{} is unreadable: {}",
                    inputs[stopped.position()].staged.key,
                    stopped.reason()
                )));
            }
        };
        touched.written.push(Written {
            range: Some(OutputRange {
                start: range.start.clone(),
            }),
            ..written
        });
        touched.outputs.push(((*file).clone(), range.clone()));
    }
    Ok(Some(touched))
}

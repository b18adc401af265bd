//! Step 4, writing: the bounded-memory sort streams the sorted chunks of a group's checked
//! inputs to the output writer, which uploads row groups as they complete; and the name of an
//! output, a hash of its input set and of the settings that shape its bytes.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStoreExt;
use object_store::path::Path;
use sha2::{Digest, Sha256};

use crate::budget::Budget;
use crate::compact::job::JobContext;
use crate::error::{Error, Result};
use crate::input::CheckedInput;
use crate::input::schema::UnifiedSchema;
use crate::manifest::OutputRange;
use crate::object_key::ObjectKey;
use crate::options::{CompactOptions, sort_key_label};
use crate::output::threshold::{resolve_row_group_bytes, staged_block_bytes};
use crate::output::writer::{OutputWriter, partition_output_settings};
use crate::partition::{KeyLayout, PartitionId, fan_out_job_dir};
use crate::report::OutputFile;
use crate::scratch::{ScratchDir, input_scratch_bytes};
use crate::sort::key::KeyRange;
use crate::sort::runs::SpillCompression;
use crate::sort::sink::with_sink_thread;
use crate::sort::{Arrivals, SortFailure, SortJob, SortStats, sort_inputs};
use crate::store::Store;
use crate::store::upload::{Hold, LAST_MODIFIED_RESOLUTION_MS, OnePut, job_parts, start_upload};

/// Version of the output format; part of the output name so a format change never reuses one.
const OUTPUT_FORMAT_VERSION: &str = "ourios-compaction/2";

/// The name of an output: a hash of its input set and the settings that shape its bytes,
/// then the job id, so no two attempts ever write the same key (an upload never overwrites
/// an object that GC listed, or that another attempt committed). Returns the key and the hash.
pub(crate) fn output_key(
    layout: &KeyLayout,
    partition: &PartitionId,
    inputs: &[CheckedInput],
    row_group_bytes: u64,
    options: &CompactOptions,
    attempt_id: &str,
) -> (Path, String) {
    let inputs = inputs.iter().map(|c| (&c.staged.key, c.staged.size));
    let hash = input_set_hash(inputs, row_group_bytes, options, None);
    (layout.output_key(partition, &hash, attempt_id), hash)
}

/// The hash naming an input set and the settings that shape the output's bytes: the format,
/// the row-group threshold, any layout away from the plain one, the ranges of a fanned-out
/// job, and each input's key and size in order.
pub(crate) fn input_set_hash<'a>(
    inputs: impl Iterator<Item = (&'a Path, u64)>,
    row_group_bytes: u64,
    options: &CompactOptions,
    ranges: Option<usize>,
) -> String {
    let mut hash = Sha256::new();
    hash.update(OUTPUT_FORMAT_VERSION.as_bytes());
    hash.update(row_group_bytes.to_le_bytes());
    // Only settings away from the plain layout enter the hash, so plain outputs keep their names.
    if options.settings.row_groups_per_block != 1 {
        hash.update(b"blocks");
        hash.update((options.settings.row_groups_per_block as u64).to_le_bytes());
    }
    if let Some(rows) = options.settings.max_rows_per_row_group {
        hash.update(b"max-rows");
        hash.update(rows.to_le_bytes());
    }
    if let Some(ranges) = ranges {
        hash.update(b"ranges");
        hash.update((ranges as u64).to_le_bytes());
    }
    for (key, size) in inputs {
        hash.update(key.as_ref().as_bytes());
        hash.update([0]);
        hash.update(size.to_le_bytes());
    }
    let digest = hash.finalize();
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// A written output (or run), not yet committed.
pub(crate) struct Written {
    pub(crate) output: OutputFile,
    pub(crate) input_set: String,
    pub(crate) row_group_bytes: u64,
    pub(crate) stats: SortStats,
    /// The start of the last renewal of the output's hold, on the job's monotonic clock
    /// (`None`: no grace, or no hold).
    pub(crate) held_from_ms: Option<u64>,
    /// The start of its one PUT, on the job's monotonic clock, when its own date keeps GC off
    /// it instead of a hold ([`OnePut::DatedByItself`]).
    pub(crate) put_from_ms: Option<u64>,
    /// Its key range in the partition, as the commit records it (`None`: not recorded).
    pub(crate) range: Option<OutputRange>,
}

impl Written {
    /// When its commit must land, on the job's monotonic clock (`None`: no grace): within the
    /// grace of its hold's last renewal (GC takes no output a job directory changed within
    /// twice the grace holds), or within half the grace of its one PUT's start, less the
    /// stores' one-second resolution (GC takes an unheld output once its Last-Modified is a
    /// grace old, and deletes within half the grace of taking "now").
    pub(crate) fn commit_by_ms(&self, grace: Duration) -> Option<u64> {
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        match (self.held_from_ms, self.put_from_ms) {
            (Some(from), _) => Some(from.saturating_add(grace_ms)),
            (None, Some(from)) => Some(
                from.saturating_add(grace_ms / 2)
                    .saturating_sub(LAST_MODIFIED_RESOLUTION_MS),
            ),
            (None, None) => None,
        }
    }
}

/// What one sort-and-write reads.
pub(crate) struct WriteJob<'a> {
    /// The checked inputs, in ordinal order (presorted ones first).
    pub(crate) inputs: &'a [CheckedInput],
    /// Their union.
    pub(crate) unified: &'a UnifiedSchema,
    /// The input bytes the row-group threshold is resolved for: the inputs', or for a range
    /// of a fanned-out job the whole job's, so every range has the same threshold.
    pub(crate) threshold_input_bytes: u64,
    /// Only the rows in this range (every input then presorted, and `rows` of each counts
    /// the range's rows).
    pub(crate) range: Option<&'a KeyRange>,
    /// Where inputs still on their way arrive (`None`: every input is at hand; see
    /// [`SortJob::arrivals`]).
    pub(crate) arrivals: Option<&'a dyn Arrivals>,
    /// The output is committed by this invocation, which then knows when its PUT started: an
    /// output that goes up in one PUT needs no hold ([`OnePut::DatedByItself`]). A fanned-out
    /// job's range, which another invocation commits, does.
    pub(crate) committed_here: bool,
}

/// Why a sort-and-write stopped before its output was written, naming the input to blame.
#[derive(Debug)]
pub(crate) enum Interrupted {
    /// Input `position` turned out unreadable.
    Bad { position: usize, reason: String },
    /// Input `position` arrived other than its footer declared ([`SortFailure::Changed`]).
    Changed { position: usize, reason: String },
}

impl Interrupted {
    /// The position of the input to blame.
    pub(crate) fn position(&self) -> usize {
        match self {
            Interrupted::Bad { position, .. } | Interrupted::Changed { position, .. } => *position,
        }
    }

    /// What is wrong with it.
    pub(crate) fn reason(&self) -> &str {
        match self {
            Interrupted::Bad { reason, .. } | Interrupted::Changed { reason, .. } => reason,
        }
    }
}

/// Sorts the checked inputs into a new object, named by `name` from the row-group threshold
/// (key and input-set hash). The inner `Err` names an input that turned out unreadable, or that
/// arrived other than declared; nothing was written then.
pub(crate) async fn sort_and_write(
    job: &JobContext<'_>,
    scratch: &ScratchDir,
    write: &WriteJob<'_>,
    name: &(dyn Fn(u64) -> (Path, String) + Sync),
) -> Result<std::result::Result<Written, Interrupted>> {
    let (store, options, gauge) = (job.store, job.options, job.gauge);
    let (checked, unified) = (write.inputs, write.unified);
    let row_group_bytes = resolve_row_group_bytes(
        options.settings.row_group_bytes,
        write.threshold_input_bytes,
    );
    let label = sort_key_label(&options.keys, unified.has_service());
    // A run of a group without a service column is sorted by time, with every service null:
    // in the (service, time) order too.
    let time_only = sort_key_label(&options.keys, false);
    let presorted: Vec<bool> = checked
        .iter()
        .map(|c| {
            let declared = c.declared_sort_key.as_deref();
            c.staged.is_compacted
                && (declared == Some(label.as_str())
                    || (write.range.is_some() && declared == Some(time_only.as_str())))
        })
        .collect();
    if write.range.is_some() && presorted.iter().any(|p| !p) {
        return Err(Error::invariant(
            "a range of a fanned-out job reads only sorted runs",
        ));
    }
    let staged_block_bytes =
        staged_block_bytes(row_group_bytes, options.settings.row_groups_per_block);
    // Inputs still on their way take scratch space too.
    let to_come = (write.arrivals).map_or(0, |a| a.bytes_to_come());
    let spill_compression = check_scratch_space(
        scratch,
        checked,
        &presorted,
        options.budget(),
        staged_block_bytes.saturating_add(to_come),
    )?;

    let (key, input_set) = name(row_group_bytes);
    let (properties, blocks) =
        partition_output_settings(unified, options, row_group_bytes, scratch)?;
    // What the writer closes row groups at: a schema of many leaves caps the threshold (see
    // `output_properties`); the name keeps the threshold asked for.
    let row_group_bytes_used = (properties.max_row_group_bytes())
        .map_or(row_group_bytes, |cap| row_group_bytes.min(cap as u64));
    let hold = output_hold(job, &key, write.committed_here);
    if hold.is_some()
        && let Err(e) = job.mark_garbage().await
    {
        // An attempt that dies after its upload leaves an orphan, and its hold, to the sweep.
        tracing::warn!(partition = %job.partition, error = %e, "could not mark garbage due");
    }
    let parts = job_parts(options);
    let (upload, task) = start_upload(Arc::clone(store.object_store()), key.clone(), hold, parts);
    let expected_rows: u64 = checked.iter().map(|c| c.rows).sum();

    let sorted = tokio::task::block_in_place(|| {
        let mut writer =
            OutputWriter::try_new(upload, Arc::clone(&unified.schema), properties, blocks)?;
        let progress = options
            .progress
            .as_ref()
            .map(|report| move |rows: u64| (report.0)(rows, expected_rows));
        let job = SortJob {
            inputs: checked,
            presorted: &presorted,
            unified,
            budget: options.budget(),
            spill_compression,
            fan_in: options.merge_fan_in,
            code_strings: options.code_strings,
            scratch,
            gauge,
            deadline: options.deadline,
            large_service_rows: Some(large_service_rows(
                checked,
                row_group_bytes,
                options.settings.max_rows_per_row_group,
            )),
            progress: progress.as_ref().map(|p| p as &(dyn Fn(u64) + Sync)),
            range: write.range,
            release_above_bytes: options.settings.release_memory_above_bytes,
            arrivals: write.arrivals,
        };
        let sorted = with_sink_thread(&mut writer, |sink| sort_inputs(&job, sink));
        let stats = match sorted {
            Ok(Ok(stats)) => stats,
            Ok(Err(SortFailure::BadInput { position, reason })) => {
                return Ok(Err(Interrupted::Bad { position, reason }));
            }
            Ok(Err(SortFailure::Changed { position, reason })) => {
                return Ok(Err(Interrupted::Changed { position, reason }));
            }
            Ok(Err(SortFailure::Failed(e))) | Err(e) => return Err(e),
        };
        let rows = writer.rows();
        if rows != expected_rows {
            return Err(Error::invariant(format!(
                "wrote {rows} rows but the inputs hold {expected_rows}"
            )));
        }
        let metadata = writer.finish()?;
        writer
            .inner_mut()?
            .finish()
            .map_err(|e| Error::scratch("upload stream", e))?;
        Ok(Ok((rows, metadata.num_row_groups() as u64, stats)))
    });
    match sorted {
        Ok(Ok((rows, row_groups, stats))) => {
            let uploaded = task
                .await
                .map_err(|e| Error::invariant(format!("upload task failed: {e}")))??;
            Ok(Ok(Written {
                output: OutputFile {
                    key: ObjectKey::from(&key),
                    bytes: uploaded.bytes,
                    rows,
                    row_groups,
                },
                input_set,
                row_group_bytes: row_group_bytes_used,
                stats,
                held_from_ms: uploaded.held_from_ms,
                put_from_ms: uploaded.put_from_ms,
                range: None,
            }))
        }
        Ok(Err(bad)) => {
            let _ = task.await;
            Ok(Err(bad))
        }
        // A writer stops when its upload does: the upload's own error (the store refused a
        // part, say) is the cause, and names the output. Its error for being abandoned by a
        // writer that failed first is not.
        Err(e) => match task.await {
            Ok(Err(upload)) if !matches!(upload, Error::Invariant { .. }) => Err(upload),
            _ => Err(e),
        },
    }
}

/// Deletes an output (or run) no commit made live; best effort: GC sweeps what is left.
pub(crate) async fn delete_quietly(store: &Store, key: &ObjectKey) {
    if let Err(e) = store.object_store().delete(key.location()).await {
        tracing::warn!(key = %key, error = %e, "could not delete an uncommitted output; GC will sweep it");
    }
}

/// The hold the job keeps on an object it uploads (`None` without a grace): in its own job
/// directory, so GC leaves the object alone until the commit, whenever the upload started. A
/// run, which lies in that directory too, needs it only for a multipart upload; so does an
/// output `committed_here`, under a grace long enough to commit within half of it after the
/// PUT.
fn output_hold(job: &JobContext<'_>, key: &Path, committed_here: bool) -> Option<Hold> {
    let grace = job.options.settings.gc_grace;
    let name = key.filename()?;
    let hold_key = job.layout.hold_key(job.partition, job.attempt_id, name);
    let object_in_job_dir = (fan_out_job_dir(key.as_ref()))
        .is_some_and(|dir| fan_out_job_dir(hold_key.as_ref()) == Some(dir));
    let one_put = if object_in_job_dir {
        OnePut::InJobDirectory
    } else if committed_here && grace >= MIN_GRACE_DATED_BY_ITSELF {
        OnePut::DatedByItself
    } else {
        OnePut::Held
    };
    (grace > Duration::ZERO).then(|| Hold {
        key: hold_key,
        clock: Arc::clone(&job.options.clock),
        grace,
        one_put,
    })
}

/// The shortest grace under which an output in one PUT goes unheld: half of it, less the
/// stores' one-second resolution, leaves the PUT and the commit at least 14 seconds.
const MIN_GRACE_DATED_BY_ITSELF: Duration = Duration::from_secs(30);

/// Rows of a service that fill half a row group (by bytes, or by the row cap when it is
/// smaller): such a service gets row groups of its own.
fn large_service_rows(
    checked: &[CheckedInput],
    row_group_bytes: u64,
    max_rows: Option<u64>,
) -> u64 {
    let rows: u64 = checked.iter().map(|c| c.rows).sum();
    let bytes: u64 = checked.iter().map(|c| c.uncompressed_bytes).sum();
    let row_bytes = (bytes / rows.max(1)).max(1);
    let by_bytes = row_group_bytes / 2 / row_bytes;
    max_rows
        .map_or(by_bytes, |max| by_bytes.min(max / 2))
        .max(1)
}

/// Fails early when the spill this job may write (plus `staged_block_bytes`, an output block
/// staged before it is laid out, and the inputs still to arrive) cannot fit the scratch file system, by the rule the plan
/// applies ([`input_scratch_bytes`]: the inputs are staged already, and presorted ones never
/// spill), and picks the run encoding: plain when there is room to spare, LZ4 when space is
/// tight. Inputs within the budget's
/// [`scratch_check_above_bytes`](crate::budget::BudgetPlan::scratch_check_above_bytes) spill
/// plain without a look.
fn check_scratch_space(
    scratch: &ScratchDir,
    checked: &[CheckedInput],
    presorted: &[bool],
    budget: Budget,
    staged_block_bytes: u64,
) -> Result<SpillCompression> {
    let uncompressed: u64 = checked.iter().map(|c| c.uncompressed_bytes).sum();
    if uncompressed <= budget.shares().scratch_check_above_bytes {
        return Ok(SpillCompression::None);
    }
    let spill_estimate: u64 = (checked.iter().zip(presorted))
        .map(|(c, &presorted)| {
            input_scratch_bytes(c.staged.size, c.uncompressed_bytes, presorted, false)
        })
        .sum();
    let available_bytes = scratch.available_bytes()?;
    let needed_bytes = spill_estimate.saturating_add(staged_block_bytes);
    if needed_bytes > available_bytes {
        return Err(Error::ScratchFull {
            path: scratch.path().to_path_buf(),
            needed_bytes,
            available_bytes,
        });
    }
    if available_bytes > 8 * spill_estimate {
        Ok(SpillCompression::None)
    } else {
        Ok(SpillCompression::Lz4)
    }
}

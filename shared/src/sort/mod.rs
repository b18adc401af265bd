//! The bounded-memory sort of one partition's checked inputs into a chunk sink.
//!
//! Phase 1 streams the inputs in ordinal order through [`RunFormation`]; phase 2 merges the
//! spilled runs, together with inputs that are already sorted (earlier compacted files),
//! in passes of at most the fan-in. Both paths hand the sink the same chunks (their row
//! count set by the inputs' row width alone) of the same total order, so output bytes never
//! depend on the budget or the spill pattern.

pub mod alignment;
pub mod gather;
pub mod key;
pub mod merge;
pub mod resources;
pub mod runs;
pub mod sink;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_select::filter::filter_record_batch;

use crate::budget::{Budget, SortDemand};
use crate::error::{Error, Result};
use crate::gauge::{Charge, MemoryGauge, batch_memory_bytes};
use crate::input::column_path::path_name;
use crate::input::schema::{UnifiedSchema, conform};
use crate::input::{CheckedInput, RowWidth, SizedBatches, catch_reader_panic};
use crate::options::output_chunk_rows;
use crate::scratch::ScratchDir;
use crate::sort::alignment::{AligningSink, ServiceCounts, count_services};
use crate::sort::key::{KeyRange, SortKey};
use crate::sort::merge::{MergeSettings, RunSource, merge_runs};
use crate::sort::resources::open_files_allowance;
use crate::sort::runs::RunFormation;
use crate::sort::runs::{SpillCompression, StringCoder, StringDecoder};
use crate::sort::sink::ChunkSink;

/// One sort job: what to read and under which limits.
pub struct SortJob<'a> {
    /// Inputs in ordinal order; presorted ones must come first.
    pub inputs: &'a [CheckedInput],
    /// Which of `inputs` are read as already-sorted runs.
    pub presorted: &'a [bool],
    /// The output schema.
    pub unified: &'a UnifiedSchema,
    /// Decoded-row budget B.
    pub budget: Budget,
    /// Whether spilled runs are compressed.
    pub spill_compression: SpillCompression,
    /// Merge fan-in cap.
    pub fan_in: usize,
    /// Whether repetitive string columns travel as codes (see [`StringCoder`]).
    pub code_strings: bool,
    /// Scratch directory.
    pub scratch: &'a ScratchDir,
    /// Decoded-bytes gauge.
    pub gauge: &'a MemoryGauge,
    /// Stop when this instant passes.
    pub deadline: Option<Instant>,
    /// A service with at least this many rows gets row groups of its own (`None`: no
    /// alignment, e.g. a time-only key).
    pub large_service_rows: Option<u64>,
    /// Called with (rows read so far) after each batch.
    pub progress: Option<&'a (dyn Fn(u64) + Sync)>,
    /// Only the rows of presorted inputs whose key is in this range (one range of a fanned-out
    /// merge; `None`: every row).
    pub range: Option<&'a KeyRange>,
    /// The merge gives free memory back only while the resident set is at least this (`None`:
    /// at every interval; see [`MemoryRelease::above`](crate::sort::resources::MemoryRelease::above)).
    pub release_above_bytes: Option<u64>,
    /// Where inputs still on their way arrive (`None`: every input is at hand, as `inputs`
    /// says): `inputs` then hold what each input's footer declares, and the sort waits for an
    /// input only when it reads it.
    pub arrivals: Option<&'a dyn Arrivals>,
}

/// Inputs a sort starts on before they are all at hand: a job that downloads its inputs sorts
/// from what their footers declare, and reads each one once its copy has arrived and passed
/// its check, while the next ones are still on the wire.
pub trait Arrivals: Sync {
    /// Blocks until `declared` (an input as its footer declares it) has arrived and been
    /// checked.
    fn wait(&self, declared: &CheckedInput) -> Arrival;

    /// The bytes still to arrive, which the scratch space must still take.
    fn bytes_to_come(&self) -> u64;
}

/// How an input the sort waited for arrived.
#[derive(Debug)]
pub enum Arrival {
    /// Checked: what the check found.
    Checked(CheckedInput),
    /// Its check refused it, for this reason.
    Bad(String),
    /// It is not what the sort was planned from (the store no longer gives it, or its check
    /// found other facts than its footer declares): the sort's plan does not hold.
    Changed(String),
    /// Its download failed.
    Failed(Error),
}

/// What the sort did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SortStats {
    /// Runs spilled in phase 1.
    pub runs_spilled: u32,
    /// Merge passes (0 when the partition fit the budget).
    pub merge_passes: u32,
    /// Bytes written to scratch (phase-1 runs and intermediate merges).
    pub spill_bytes: u64,
}

/// Why a sort stopped.
#[derive(Debug)]
pub enum SortFailure {
    /// An input turned out unreadable while its rows were read; the job restarts without it.
    BadInput {
        /// Position in [`SortJob::inputs`].
        position: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// An input that arrived is not what the sort was planned from ([`Arrival::Changed`]).
    Changed {
        /// Position in [`SortJob::inputs`].
        position: usize,
        /// How it differs.
        reason: String,
    },
    /// Any other failure.
    Failed(Error),
}

impl From<Error> for SortFailure {
    fn from(e: Error) -> Self {
        SortFailure::Failed(e)
    }
}

/// Sorts the job's inputs into `sink`.
pub fn sort_inputs(job: &SortJob<'_>, sink: &mut dyn ChunkSink) -> Result<SortStats, SortFailure> {
    let started = Instant::now();
    let key = SortKey::new(job.unified)?;
    let schema = &job.unified.schema;
    // Room inside B for the largest reader of an input (its pages and dictionaries), for the
    // string codes and for one decoded batch waiting for the sorter (see `decode_inputs`).
    let planned_reader_bytes =
        (job.inputs.iter().map(|i| i.reader_bytes_estimate).max()).unwrap_or(0);
    let plan = job.budget.plan(SortDemand {
        reader_bytes: planned_reader_bytes,
        code_strings: job.code_strings,
        fan_in: job.fan_in,
    });
    let (read_target, share, sized_fan_in) = (
        plan.read_target_bytes,
        plan.run_batch_bytes,
        plan.sized_fan_in,
    );
    let mut coder = StringCoder::new(job.unified, plan.string_codes_bytes, job.gauge);
    let mut formation = RunFormation::new(
        &key,
        plan.rows_bytes,
        share,
        job.spill_compression,
        job.gauge,
        job.scratch,
    );
    // Decoded rows are at least as large as their uncompressed pages (strings read as
    // codes aside), so inputs whose pages alone pass the budget cannot fit it.
    let encoded_bytes: u64 = (job.inputs.iter().enumerate())
        .filter(|&(position, _)| !is_presorted(job, position))
        .map(|(_, input)| input.uncompressed_bytes)
        .sum();
    if encoded_bytes > plan.rows_bytes {
        formation = formation.spill_from_start();
    }
    let mut presorted_sources = Vec::new();
    let mut counts = ServiceCounts::default();
    // Row groups align with services only under a (string service, time) key.
    let service_index = job.unified.service_index.filter(|_| key.has_service());
    for position in 0..job.inputs.len() {
        if is_presorted(job, position) {
            let input = arrived(job, position)?;
            let input = input.as_ref();
            if input.reader_bytes_estimate > planned_reader_bytes {
                // Its reader stays open through the merge, beside the others.
                return Err(SortFailure::Changed {
                    position,
                    reason: reader_beyond(input.reader_bytes_estimate, planned_reader_bytes),
                });
            }
            let time_column = path_name(schema.fields(), &job.unified.time_path)
                .ok_or_else(|| Error::invariant("the time column's path names no field"))?;
            if let Some(i) = service_index {
                let range = (job.range).map(|r| (r, time_column.as_str(), job.unified.time_unit));
                counts.merge(count_services(input, schema.field(i).name(), range)?);
            }
            let reader = SizedBatches::open(input, share)?;
            let target = schema.clone();
            let range = job.range.cloned();
            let key = key.clone();
            let batches = reader
                .map(move |b| {
                    let batch = conform(&b?, &target)?;
                    match &range {
                        None => Ok(batch),
                        Some(range) => {
                            let mask = range.mask(&key.keys(&batch)?);
                            filter_record_batch(&batch, &mask)
                                .map_err(|e| Error::arrow("selecting a range's rows", e))
                        }
                    }
                })
                .filter(|b| b.as_ref().map_or(true, |b| b.num_rows() > 0));
            presorted_sources.push(RunSource::Presorted {
                name: input.staged.key.to_string(),
                batches: Box::new(batches),
                row_bytes: input.row_bytes_estimate,
            });
        }
    }
    // Decoding runs one batch ahead on a thread of its own, so it overlaps the conforming,
    // sorting and spilling of the previous batch; the batches still arrive in (input, row)
    // order, which is all the key's tie-break needs.
    std::thread::scope(|scope| -> Result<(), SortFailure> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let coder = &mut coder;
        scope.spawn(move || decode_inputs(job, read_target, planned_reader_bytes, coder, tx));
        let mut rows_read = 0u64;
        for decoded in rx {
            let (batch, text_bytes, frozen, queued) = match decoded? {
                Decoded::Batch(batch, text_bytes, frozen, queued) => {
                    (batch, text_bytes, frozen, queued)
                }
                Decoded::Reserve {
                    position,
                    bytes,
                    done,
                } => {
                    if !formation.reserve(bytes)? {
                        return Err(SortFailure::Changed {
                            position,
                            reason: format!(
                                "its reader holds {bytes} bytes more than the sort was planned \
                                 for, more than the rows' share can give up"
                            ),
                        });
                    }
                    let _ = done.send(());
                    continue;
                }
            };
            drop(queued);
            rows_read += batch.num_rows() as u64;
            formation.push(batch, text_bytes, frozen.as_ref())?;
            check_deadline(job.deadline)?;
            if let Some(progress) = job.progress {
                progress(rows_read);
            }
        }
        Ok(())
    })?;
    counts.merge(formation.take_service_counts());
    let compression = formation.compression();
    let widest_row = job.inputs.iter().map(|i| i.row_bytes_estimate).max();
    let chunk_rows = output_chunk_rows(widest_row.unwrap_or(1));
    let mut aligned;
    let sink: &mut dyn ChunkSink = match (service_index, job.large_service_rows) {
        (Some(i), Some(large_rows)) if counts.is_complete() => {
            aligned = AligningSink::new(sink, counts, i, large_rows);
            &mut aligned
        }
        _ => sink,
    };
    let decoder = Arc::new(coder.decoder());
    drop(coder);
    let formed = formation.finish(chunk_rows, !presorted_sources.is_empty(), sink, &decoder)?;
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        runs = formed.runs.len(),
        "run formation done"
    );
    let mut stats = SortStats {
        runs_spilled: formed.runs.len() as u32,
        merge_passes: 0,
        spill_bytes: formed.spill_bytes,
    };
    if formed.runs.is_empty() && presorted_sources.is_empty() {
        return Ok(stats);
    }
    let mut sources = presorted_sources;
    sources.extend(formed.runs.into_iter().map(RunSource::Spilled));
    let settings = MergeSettings {
        // One open file per run: within the descriptors the process may open (a macOS shell
        // allows 256), never below the fan-in the batches are sized for.
        fan_in: (job.fan_in)
            .min(open_files_allowance().unwrap_or(usize::MAX))
            .max(sized_fan_in),
        sized_fan_in,
        chunk_rows,
        run_batch_target_bytes: share,
        compression,
        release_interval_bytes: plan.release_interval_bytes,
        release_above_bytes: job.release_above_bytes,
    };
    let merged = merge_runs(
        sources,
        &key,
        settings,
        job.scratch,
        job.gauge,
        sink,
        &decoder,
    )?;
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "merge done"
    );
    stats.merge_passes = merged.passes;
    stats.spill_bytes += merged.intermediate_bytes;
    Ok(stats)
}

fn is_presorted(job: &SortJob<'_>, position: usize) -> bool {
    job.presorted.get(position).copied().unwrap_or(false)
}

/// Input `position` as the sort reads it: as `inputs` hold it, or once it has arrived
/// ([`SortJob::arrivals`]), checked and found as its footer declared it.
fn arrived<'b>(job: &SortJob<'b>, position: usize) -> Result<Cow<'b, CheckedInput>, SortFailure> {
    let declared = &job.inputs[position];
    let Some(arrivals) = job.arrivals else {
        return Ok(Cow::Borrowed(declared));
    };
    match arrivals.wait(declared) {
        Arrival::Checked(checked) => match disagreement(declared, &checked) {
            None => Ok(Cow::Owned(checked)),
            Some(reason) => Err(SortFailure::Changed { position, reason }),
        },
        Arrival::Bad(reason) => Err(SortFailure::BadInput { position, reason }),
        Arrival::Changed(reason) => Err(SortFailure::Changed { position, reason }),
        Arrival::Failed(e) => Err(SortFailure::Failed(e)),
    }
}

fn reader_beyond(bytes: u64, planned: u64) -> String {
    format!("its reader holds {bytes} bytes, more than the {planned} the sort was planned for")
}

/// How a checked input differs from what its footer declared, in what the sort was planned
/// from or what shapes its output (`None`: in nothing; its reader may hold more than the footer
/// tells, which the sort makes room for).
fn disagreement(declared: &CheckedInput, checked: &CheckedInput) -> Option<String> {
    let differ = |what: &str| Some(format!("its {what} differs from what its footer declared"));
    if checked.staged.size != declared.staged.size {
        return differ("size");
    }
    if checked.schema != declared.schema {
        return differ("schema");
    }
    if checked.rows != declared.rows {
        return differ("row count");
    }
    if (checked.uncompressed_bytes, checked.row_bytes_estimate)
        != (declared.uncompressed_bytes, declared.row_bytes_estimate)
    {
        return differ("decoded size");
    }
    if checked.declared_sort_key != declared.declared_sort_key {
        return differ("sort key");
    }
    None
}

/// What the decoding thread hands the sort.
enum Decoded {
    /// A decoded and coded batch with the bytes of text its codes stand for and the decoder of
    /// parts that stopped being coded with it, charged to the gauge until it is taken.
    Batch(RecordBatch, u64, Option<StringDecoder>, Charge),
    /// Input `position`, which arrived with a reader of `bytes` more than the readers' room,
    /// is opened only once the rows' buffer has given them up (`done`).
    Reserve {
        position: usize,
        bytes: u64,
        done: SyncSender<()>,
    },
}

/// Reads the inputs that are not presorted, in ordinal order (each once it has arrived, see
/// [`arrived`]), conforms and codes them (`coder`) into `tx`; a read error ends the stream with
/// [`SortFailure::BadInput`]. Stops
/// early when the receiver is gone.
fn decode_inputs(
    job: &SortJob<'_>,
    read_target: u64,
    planned_reader_bytes: u64,
    coder: &mut StringCoder,
    tx: SyncSender<Result<Decoded, SortFailure>>,
) {
    let mut width = RowWidth::default();
    // The room for one reader: the largest the inputs' footers declare, or more once one has
    // arrived with a larger one.
    let mut reader_room = planned_reader_bytes;
    for (position, declared) in job.inputs.iter().enumerate() {
        if is_presorted(job, position) || declared.rows == 0 {
            continue;
        }
        let input = match arrived(job, position) {
            Ok(input) => input,
            Err(failure) => {
                let _ = tx.send(Err(failure));
                return;
            }
        };
        let input = input.as_ref();
        if input.reader_bytes_estimate > reader_room {
            let (done, made_room) = std::sync::mpsc::sync_channel(1);
            let bytes = input.reader_bytes_estimate - reader_room;
            let reserve = Decoded::Reserve {
                position,
                bytes,
                done,
            };
            if tx.send(Ok(reserve)).is_err() || made_room.recv().is_err() {
                return;
            }
            reader_room = input.reader_bytes_estimate;
        }
        let dictionaries = coder.coded_columns();
        let opened = catch_reader_panic(|| {
            SizedBatches::open_with_dictionaries(input, read_target, &dictionaries, &width)
                .map_err(|e| e.to_string())
        });
        let mut reader = match opened.and_then(|r| r) {
            Ok(reader) => reader,
            Err(reason) => {
                let _ = tx.send(Err(SortFailure::BadInput { position, reason }));
                return;
            }
        };
        let mut row = 0u64;
        loop {
            // A panic while decoding or converting a batch is this input's fault.
            let next = catch_reader_panic(|| {
                reader.next().map(|batch| match batch {
                    Ok(batch) => {
                        let rows = batch.num_rows() as u64;
                        let coded = coder.code(&batch);
                        coded
                            .map(|c| (c, rows))
                            .map_err(|e| input_failure(position, row, e))
                    }
                    Err(e) => Err(SortFailure::BadInput {
                        position,
                        reason: format!("unreadable at row {row}: {e}"),
                    }),
                })
            });
            let decoded = match next {
                Ok(None) => break,
                Ok(Some(Ok(((batch, text_bytes), rows)))) => {
                    row += rows;
                    let charge = Charge::new(job.gauge, batch_memory_bytes(&batch));
                    Ok(Decoded::Batch(
                        batch,
                        text_bytes,
                        coder.take_frozen(),
                        charge,
                    ))
                }
                Ok(Some(Err(failure))) => Err(failure),
                Err(reason) => Err(SortFailure::BadInput { position, reason }),
            };
            let failed = decoded.is_err();
            let froze = matches!(&decoded, Ok(Decoded::Batch(_, _, Some(_), _)));
            if tx.send(decoded).is_err() || failed {
                return;
            }
            if froze {
                // A column stopped being coded: read it as plain strings again.
                if let Err(e) = reader.read_as_dictionaries(&coder.coded_columns()) {
                    let _ = tx.send(Err(SortFailure::BadInput {
                        position,
                        reason: e.to_string(),
                    }));
                    return;
                }
            }
        }
        width = reader.width().clone();
    }
}

/// What an error while reading input `position` means: a decoding or conversion error (an
/// Arrow or Parquet failure on its bytes) makes it a bad input; anything else fails the job.
fn input_failure(position: usize, row: u64, e: Error) -> SortFailure {
    match e {
        Error::Arrow { .. } | Error::Parquet { .. } => SortFailure::BadInput {
            position,
            reason: format!("unreadable at row {row}: {e}"),
        },
        other => SortFailure::Failed(other),
    }
}

fn check_deadline(deadline: Option<Instant>) -> Result<()> {
    match deadline {
        Some(d) if Instant::now() >= d => Err(Error::Deadline {
            partition: String::new(),
        }),
        _ => Ok(()),
    }
}

//! Before staging, the plan: how much scratch space a job needs, from its inputs' footers,
//! by the one rule every task applies ([`input_scratch_bytes`]).
//!
//! A job whose inputs could not pass one task's scratch space even at the largest expansion
//! logs show ([`MAX_EXPANSION`]) needs no look. Otherwise every input's footer is read (one
//! ranged GET each, at most half the budget of them in memory): its pages' uncompressed size
//! and whether it is a presorted earlier output give its need. A readable input that alone
//! needs more than a task has is set aside, live and uncompacted ([`OversizedInput`]): no
//! task could sort it, and quarantine is for unreadable files. `auto` fans the rest out into
//! as many tasks as their need takes ([`Sizing::tasks`]), and the fan-out's plan reuses the
//! footers for its union of columns. The tasks then enforce the same rule from their pages.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::ParquetMetaDataReader;

use crate::compact::job::JobContext;
use crate::compact::staging::is_refusal;
use crate::compact::state::{PartitionState, WantedInput};
use crate::error::{Error, Result};
use crate::input::page_check::{MAX_LEAF_COLUMNS, check_schema_nesting, footer_range};
use crate::input::schema::check_key_columns;
use crate::input::{CHECK_STACK_BYTES, DeclaredSize, catch_reader_panic, declared_size};
use crate::object_key::ObjectKey;
use crate::options::{KeyColumns, SORT_KEY_METADATA, sort_key_label};
use crate::output::threshold::{resolve_row_group_bytes, staged_block_bytes};
use crate::report::OversizedInput;
use crate::scratch::{free_bytes, input_scratch_bytes};

/// Footers read at once.
const FOOTER_READS: usize = 16;
/// Footers parsed at once (each on a thread of its own).
const FOOTER_PARSES: usize = 2;

/// The largest ratio of uncompressed to encoded bytes the plan assumes without reading
/// footers: templated logs reach 15x under zstd. A job of inputs this ratio cannot push past
/// the scratch space reads no footer.
pub(crate) const MAX_EXPANSION: u64 = 16;

/// The share of a task's scratch space the plan fills (7/8): the rest is for an output block
/// staged before it is laid out, and estimates from footers rather than pages.
fn plannable(scratch_bytes: u64) -> u64 {
    scratch_bytes - scratch_bytes / 8
}

/// What the plan learned of one input's footer.
#[derive(Debug, Clone)]
pub(crate) enum Footer {
    /// What it declares.
    Read(FooterFacts),
    /// Left to the input check, which says why.
    Unread,
}

/// What a readable footer declares.
#[derive(Debug, Clone)]
pub(crate) struct FooterFacts {
    pub(crate) schema: SchemaRef,
    pub(crate) rows: u64,
    /// The row groups' uncompressed size.
    pub(crate) uncompressed_bytes: u64,
    /// The sort key an output of this engine declares.
    pub(crate) declared_sort_key: Option<String>,
    /// The sizes the input check computes, as the footer declares them.
    pub(crate) declared: DeclaredSize,
}

/// Footers already read, by key.
pub(crate) type Footers = HashMap<ObjectKey, Footer>;

/// What a look at a job's size read before the job ran ([`crate::compact::fan_out::estimate`]):
/// the partition's state and, when the look got that far, the job's sizing, for the job to
/// start from instead of reading them again ([`crate::compact::compact_partition_prepared`]).
pub struct Prepared {
    pub(crate) state: PartitionState,
    pub(crate) sizing: Option<Sizing>,
}

/// The plan of a job's scratch space.
#[derive(Debug, Default)]
pub(crate) struct Sizing {
    /// The inputs the job takes, in ordinal order.
    pub(crate) wanted: Vec<WantedInput>,
    /// Readable inputs too large for any task, left live.
    pub(crate) oversized: Vec<OversizedInput>,
    /// The scratch bytes of one task (the limit, or the file system's free bytes).
    pub(crate) scratch_bytes: Option<u64>,
    /// The scratch bytes `wanted` needs (`None`: no look was needed, one task holds them).
    pub(crate) needed_bytes: Option<u64>,
    /// What each of `wanted` needs, by key (empty when no look was needed).
    pub(crate) needs: HashMap<Path, u64>,
    /// What each task needs besides its inputs: an output block staged before it is laid
    /// out.
    pub(crate) block_bytes: u64,
    /// The footers read.
    pub(crate) footers: Footers,
}

impl Sizing {
    /// The tasks the job's scratch need takes, at least one.
    pub(crate) fn tasks(&self) -> u64 {
        match (self.needed_bytes, self.per_task_bytes()) {
            (Some(needed), Some(per_task)) => needed.div_ceil(per_task).max(1),
            _ => 1,
        }
    }

    /// The input bytes one task plans to take (`None`: no look was needed).
    pub(crate) fn per_task_bytes(&self) -> Option<u64> {
        let scratch = self.scratch_bytes.filter(|_| self.needed_bytes.is_some())?;
        Some(plannable(scratch).saturating_sub(self.block_bytes).max(1))
    }

    /// `groups`, each cut where its inputs would need more than a task plans to take (a
    /// group's inputs are whole files, so groups of about equal bytes can pass it).
    pub(crate) fn cut_to_fit(&self, groups: Vec<Vec<WantedInput>>) -> Vec<Vec<WantedInput>> {
        let Some(per_task) = self.per_task_bytes() else {
            return groups;
        };
        let mut cut = Vec::with_capacity(groups.len());
        for group in groups {
            let mut current: Vec<WantedInput> = Vec::new();
            let mut need = 0u64;
            for input in group {
                let input_need = self.needs.get(&input.key).copied().unwrap_or(0);
                if !current.is_empty() && need.saturating_add(input_need) > per_task {
                    cut.push(std::mem::take(&mut current));
                    need = 0;
                }
                need = need.saturating_add(input_need);
                current.push(input);
            }
            if !current.is_empty() {
                cut.push(current);
            }
        }
        cut
    }
}

/// The plan of `wanted`'s scratch space: the footers read when the inputs could pass one
/// task's scratch space, the inputs too large for any task set aside.
pub(crate) async fn size_job(job: &JobContext<'_>, wanted: Vec<WantedInput>) -> Result<Sizing> {
    let settings = &job.options.settings;
    let scratch_bytes =
        (settings.scratch_limit_bytes).or_else(|| free_bytes(&settings.scratch_dir).ok());
    let staged_copy = |w: &WantedInput| job.store.local_path(&w.key).is_none();
    let encoded: u64 = wanted.iter().map(|w| w.bytes).sum();
    let row_group_bytes = resolve_row_group_bytes(settings.row_group_bytes, encoded);
    let block_bytes = staged_block_bytes(row_group_bytes, settings.row_groups_per_block);
    let upper_bound: u64 = (wanted.iter())
        .map(|w| {
            let expanded = w.bytes.saturating_mul(MAX_EXPANSION);
            input_scratch_bytes(w.bytes, expanded, false, staged_copy(w))
        })
        .fold(block_bytes, u64::saturating_add);
    // A job whose spill stays within the budget's share is never checked by its task.
    let check_above = job.options.budget().shares().scratch_check_above_bytes;
    let checked = encoded.saturating_mul(MAX_EXPANSION) > check_above;
    let Some(scratch) = scratch_bytes.filter(|&s| checked && upper_bound > plannable(s)) else {
        return Ok(Sizing {
            wanted,
            scratch_bytes,
            block_bytes,
            ..Sizing::default()
        });
    };
    let inputs: Vec<&WantedInput> = wanted.iter().collect();
    let read = read_footers(job, &inputs).await?;
    let uncompressed: u64 = (read.iter())
        .map(|f| match f {
            Footer::Read(facts) => facts.uncompressed_bytes,
            Footer::Unread => 0,
        })
        .sum();
    if uncompressed <= check_above {
        let footers = (wanted.iter().map(|w| ObjectKey::from(&w.key)))
            .zip(read)
            .collect();
        return Ok(Sizing {
            wanted,
            scratch_bytes,
            block_bytes,
            footers,
            ..Sizing::default()
        });
    }
    let labels = [
        sort_key_label(&job.options.keys, true),
        sort_key_label(&job.options.keys, false),
    ];
    let mut sizing = Sizing {
        scratch_bytes,
        block_bytes,
        ..Sizing::default()
    };
    let mut needed = 0u64;
    for (input, footer) in wanted.into_iter().zip(read) {
        let need = match &footer {
            Footer::Read(facts) => {
                let presorted = input.is_compacted
                    && facts
                        .declared_sort_key
                        .as_ref()
                        .is_some_and(|d| labels.contains(d));
                input_scratch_bytes(
                    input.bytes,
                    facts.uncompressed_bytes,
                    presorted,
                    staged_copy(&input),
                )
            }
            // The check refuses it from its staged copy, without a spill.
            Footer::Unread => input_scratch_bytes(input.bytes, 0, true, staged_copy(&input)),
        };
        if !input.is_compacted && need.saturating_add(block_bytes) > scratch {
            tracing::warn!(file = %input.key, bytes = input.bytes, scratch_needed_bytes = need, scratch_bytes = scratch, "an input too large for any task's scratch space is left live and uncompacted");
            sizing.oversized.push(OversizedInput {
                file: ObjectKey::from(&input.key),
                bytes: input.bytes,
                scratch_needed_bytes: need.saturating_add(block_bytes),
                scratch_bytes: scratch,
            });
            continue;
        }
        needed = needed.saturating_add(need);
        sizing.needs.insert(input.key.clone(), need);
        sizing.footers.insert(ObjectKey::from(&input.key), footer);
        sizing.wanted.push(input);
    }
    sizing.needed_bytes = Some(needed);
    Ok(sizing)
}

/// The footers of `inputs`, in order, read at most [`FOOTER_READS`] at once and within half
/// the budget. A footer the store refuses or no longer holds, or that the input check would
/// refuse on its own, is [`Footer::Unread`]; a store failure of another kind fails the plan.
pub(crate) async fn read_footers(
    job: &JobContext<'_>,
    inputs: &[&WantedInput],
) -> Result<Vec<Footer>> {
    // The footers being read hold at most half the budget (one footer may pass it alone).
    let units = footer_units(job.options.budget().shares().footers_bytes).max(1);
    let limits = FooterLimits {
        room: Arc::new(tokio::sync::Semaphore::new(units)),
        units,
        parsers: Arc::new(tokio::sync::Semaphore::new(FOOTER_PARSES)),
    };
    let reads: Vec<_> = (inputs.iter())
        .map(|input| {
            let store = Arc::clone(job.store.object_store());
            let (key, size) = (input.key.clone(), input.bytes);
            let (limits, keys) = (limits.clone(), job.options.keys.clone());
            async move { read_footer(store, key, size, limits, keys).await }
        })
        .collect();
    // A job whose downloads run one at a time reads its footers one at a time too, so that its
    // store operations stay one sequence ([`crate::options::CompactOptions::parallel_downloads`]).
    let at_once = match job.options.parallel_downloads {
        0 | 1 => 1,
        _ => FOOTER_READS,
    };
    futures::stream::iter(reads)
        .buffered(at_once)
        .try_collect()
        .await
}

/// What bounds the footers read at once: the bytes they hold (`room`, in KiB units, of which
/// there are `units`) and the threads parsing them.
#[derive(Clone)]
struct FooterLimits {
    room: Arc<tokio::sync::Semaphore>,
    units: usize,
    parsers: Arc<tokio::sync::Semaphore>,
}

/// Units of the footers' semaphore that `bytes` take (KiB, at least one).
fn footer_units(bytes: u64) -> usize {
    usize::try_from(bytes.div_ceil(1 << 10)).unwrap_or(usize::MAX)
}

/// The object's last bytes a footer read asks for first: the whole footer of most log files
/// (tens of columns, a few row groups), so one GET reads it; a larger footer takes a second
/// GET for the rest.
const FOOTER_TAIL_BYTES: u64 = 64 << 10;

/// What the footer of `key` (of `size` bytes) declares, read within `limits`.
async fn read_footer(
    store: Arc<dyn ObjectStore>,
    key: Path,
    size: u64,
    limits: FooterLimits,
    keys: KeyColumns,
) -> Result<Footer> {
    if size < 12 {
        return Ok(Footer::Unread);
    }
    let closed = |_| Error::invariant("the footers' semaphore closed");
    let tail_start = size - size.min(FOOTER_TAIL_BYTES);
    let units = |bytes: u64| {
        let units = footer_units(bytes).clamp(1, limits.units);
        u32::try_from(units).unwrap_or(u32::MAX)
    };
    let tail_room = limits.room.acquire_many(units(size - tail_start)).await;
    let tail_room = tail_room.map_err(closed)?;
    let Some(tail) = get_range(&store, &key, tail_start..size).await? else {
        return Ok(Footer::Unread);
    };
    let eight = <[u8; 8]>::try_from(&tail[tail.len() - 8..]).ok();
    let Some(range) = eight.and_then(|eight| footer_range(&eight, size).ok()) else {
        return Ok(Footer::Unread);
    };
    let bytes = if range.start >= tail_start {
        let start = usize::try_from(range.start - tail_start).unwrap_or(usize::MAX);
        tail.slice(start..tail.len() - 8)
    } else {
        // The footer's room, the tail's with it, taken anew: holding the tail's while waiting
        // for more could wait forever.
        drop(tail_room);
        let whole_bytes = (range.end - range.start).saturating_add(FOOTER_TAIL_BYTES);
        let _room = limits.room.acquire_many(units(whole_bytes)).await;
        let _room = _room.map_err(closed)?;
        let Some(head) = get_range(&store, &key, range.start..tail_start).await? else {
            return Ok(Footer::Unread);
        };
        let mut whole = Vec::with_capacity((range.end - range.start) as usize);
        whole.extend_from_slice(&head);
        whole.extend_from_slice(&tail[..tail.len() - 8]);
        Bytes::from(whole)
    };
    let _parser = limits.parsers.acquire().await.map_err(closed)?;
    decode_on_deep_stack(bytes, keys).await
}

/// The bytes of `range` of `key`; `None` when the store refuses them, no longer holds them or
/// holds fewer (the group's staging and check then say why).
async fn get_range(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    range: std::ops::Range<u64>,
) -> Result<Option<Bytes>> {
    let wanted = range.end - range.start;
    match store.get_range(key, range).await {
        Ok(bytes) => Ok((bytes.len() as u64 == wanted).then_some(bytes)),
        Err(e) => unread_unless_failed(key, e).map(|()| None),
    }
}

/// `Ok` when the store's answer for `key` leaves the file to its group (refused for good, or
/// gone: staging says so again), the store's error otherwise (the plan fails, to be retried).
fn unread_unless_failed(key: &Path, e: object_store::Error) -> Result<()> {
    match is_refusal(&e) || matches!(e, object_store::Error::NotFound { .. }) {
        true => Ok(()),
        false => Err(Error::store("get", key, e)),
    }
}

/// Decodes a footer on a thread with the stack the input check gives one (a hostile schema
/// nests deep); a panic of the reader leaves it unread.
async fn decode_on_deep_stack(bytes: Bytes, keys: KeyColumns) -> Result<Footer> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("footer-read".into())
        .stack_size(CHECK_STACK_BYTES)
        .spawn(move || {
            let footer = catch_reader_panic(|| decode_footer(&bytes, &keys));
            let _ = tx.send(footer.unwrap_or(Footer::Unread));
        })
        .map_err(|e| Error::invariant(format!("footer reading thread: {e}")))?;
    rx.await
        .map_err(|_| Error::invariant("a footer reading thread stopped without an answer"))
}

/// What one footer declares, as the input check would see it.
fn decode_footer(bytes: &[u8], keys: &KeyColumns) -> Footer {
    if check_schema_nesting(bytes).is_err() {
        return Footer::Unread;
    }
    let Ok(metadata) = ParquetMetaDataReader::decode_metadata(bytes) else {
        return Footer::Unread;
    };
    if metadata.file_metadata().schema_descr().num_columns() > MAX_LEAF_COLUMNS {
        return Footer::Unread;
    }
    let rows: u64 = (metadata.row_groups().iter())
        .map(|g| g.num_rows().max(0) as u64)
        .sum();
    let file_rows = metadata.file_metadata().num_rows();
    if file_rows != i64::try_from(rows).unwrap_or(-1) && !(rows == 0 && file_rows <= 0) {
        // The check refuses a footer whose counts disagree.
        return Footer::Unread;
    }
    let declared = declared_size(&metadata);
    let uncompressed_bytes: u64 = (metadata.row_groups().iter())
        .map(|g| g.total_byte_size().max(0) as u64)
        .sum();
    let declared_sort_key = (metadata.file_metadata().key_value_metadata())
        .and_then(|kv| kv.iter().find(|e| e.key == SORT_KEY_METADATA))
        .and_then(|e| e.value.clone());
    let Ok(arrow) = ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
    else {
        return Footer::Unread;
    };
    let schema = Arc::clone(arrow.schema());
    if rows > 0 && check_key_columns(&schema, keys).is_err() {
        return Footer::Unread;
    }
    Footer::Read(FooterFacts {
        schema,
        rows,
        uncompressed_bytes,
        declared_sort_key,
        declared,
    })
}

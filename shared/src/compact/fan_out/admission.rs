//! The plan's admission of a fanned-out job's inputs into one union of columns.
//!
//! Each group sorts its inputs into a run on its own, and the ranges then merge every run, so
//! the runs must unify and their columns together stay within the budget's leaf limit. A
//! group can only see its own inputs: two groups may each keep a different type of a
//! conflicting column, or each stay under the limit while together they pass it, and the job
//! would fail at the split however often it ran. So the plan reads every input's footer and
//! makes the decision an unfanned job makes ([`unify_weighted`]: the types most rows back,
//! within the leaf limit) for the whole partition, before any group runs. The files it refuses
//! are quarantined with its reason, as an unfanned job would quarantine them, and the groups
//! sort the rest.
//!
//! A footer the plan cannot read or that the input check refuses on its own (refused, gone, not
//! Parquet, too large, nesting too deep, too many columns, no time column) stays in its group,
//! whose check quarantines the file with the precise reason; only a store failure of another
//! kind fails the plan. The plan sees footers, not rows: a file whose rows
//! its group's check refuses (outside the hour) still took part in the union.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::ParquetMetaDataReader;

use crate::compact::job::JobContext;
use crate::compact::staging::is_refusal;
use crate::compact::state::WantedInput;
use crate::error::{Error, Result};
use crate::input::page_check::{MAX_LEAF_COLUMNS, check_schema_nesting};
use crate::input::schema::{check_key_columns, unify_weighted};
use crate::input::{CHECK_STACK_BYTES, catch_reader_panic};
use crate::object_key::ObjectKey;
use crate::options::KeyColumns;
use crate::read::inspect::stored_footer_range;
use crate::report::Quarantined;

/// Footers read at once.
const FOOTER_READS: usize = 16;
/// Footers parsed at once (each on a thread of its own).
const FOOTER_PARSES: usize = 2;

/// The groups with only the admitted inputs (groups left empty dropped), and the refused ones.
#[derive(Debug)]
pub(crate) struct Admission {
    /// The admitted inputs of each group, in order.
    pub groups: Vec<Vec<WantedInput>>,
    /// The inputs the union refused, with why.
    pub rejected: Vec<Quarantined>,
}

/// What the plan learned of one input's footer.
enum Footer {
    /// Its schema and rows.
    Read(SchemaRef, u64),
    /// Left to its group's check.
    Unread,
}

/// Admits the inputs of `groups` into one union, as an unfanned job of them would.
pub(crate) async fn admit(
    job: &JobContext<'_>,
    groups: Vec<Vec<WantedInput>>,
) -> Result<Admission> {
    let inputs: Vec<&WantedInput> = groups.iter().flatten().collect();
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
    let read: Vec<Footer> = futures::stream::iter(reads)
        .buffered(FOOTER_READS)
        .try_collect()
        .await?;
    // The union of every readable footer holding rows, weighed as an unfanned job weighs.
    let names: Vec<String> = (inputs.iter())
        .map(|i| i.key.filename().unwrap_or_default().to_string())
        .collect();
    let mut candidates = Vec::new();
    let mut positions = Vec::new();
    for (position, footer) in read.iter().enumerate() {
        if let Footer::Read(schema, rows) = footer
            && *rows > 0
        {
            let weight = match inputs[position].is_compacted {
                true => u64::MAX,
                false => *rows,
            };
            candidates.push((names[position].as_str(), schema.as_ref(), weight));
            positions.push(position);
        }
    }
    let limit = job.options.budget().shares().leaf_limit;
    let (_, refusals) = unify_weighted(&candidates, &job.options.keys, limit);
    let mut refused = vec![None; inputs.len()];
    for refusal in refusals {
        let position = positions[refusal.position];
        let input = inputs[position];
        if input.is_compacted {
            return Err(Error::CompactedInput {
                file: input.key.to_string(),
                reason: refusal.reason,
            });
        }
        tracing::warn!(file = %input.key, reason = refusal.reason, "quarantined bad input");
        refused[position] = Some(refusal.reason);
    }
    let mut rejected = Vec::new();
    let mut admitted = Vec::new();
    let mut refused = refused.into_iter();
    for group in groups {
        let mut kept = Vec::new();
        for input in group {
            match refused.next().flatten() {
                Some(reason) => rejected.push(Quarantined {
                    file: ObjectKey::from(&input.key),
                    reason,
                }),
                None => kept.push(input),
            }
        }
        if !kept.is_empty() {
            admitted.push(kept);
        }
    }
    Ok(Admission {
        groups: admitted,
        rejected,
    })
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

/// What the footer of `key` (of `size` bytes) declares, read within `limits`.
async fn read_footer(
    store: Arc<dyn ObjectStore>,
    key: Path,
    size: u64,
    limits: FooterLimits,
    keys: KeyColumns,
) -> Result<Footer> {
    let range = match stored_footer_range(&store, &key, size).await {
        Ok(Some((range, _))) => range,
        Ok(None) => return Ok(Footer::Unread),
        Err(e) => return unread_unless_failed(&key, e).map(|()| Footer::Unread),
    };
    let units = footer_units(range.end - range.start).clamp(1, limits.units);
    let units = u32::try_from(units).unwrap_or(u32::MAX);
    let closed = |_| Error::invariant("the footers' semaphore closed");
    let _room = limits.room.acquire_many(units).await.map_err(closed)?;
    let Some(bytes) = get_range(&store, &key, range).await? else {
        return Ok(Footer::Unread);
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

/// One footer's schema and rows, as the input check would see them.
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
    let Ok(arrow) = ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
    else {
        return Footer::Unread;
    };
    let schema = Arc::clone(arrow.schema());
    if rows > 0 && check_key_columns(&schema, keys).is_err() {
        return Footer::Unread;
    }
    Footer::Read(schema, rows)
}

//! Reading one range of a sorted run: only the row groups that can hold its keys, fetched by
//! range requests into a sparse local file, with the rows of the range counted.

use std::fs::File;
use std::sync::Arc;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_cast::cast;
use arrow_schema::DataType;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::metadata::ParquetMetaData;

use crate::compact::job::JobContext;
use crate::error::{Error, Result};
use crate::input::column_path::{column_named, resolve};
use crate::input::type_union::time_nanos;
use crate::input::{CheckedInput, READER_BYTES_PER_COLUMN, StagedInput};
use crate::object_key::ObjectKey;
use crate::options::{KeyColumns, SORT_KEY_METADATA};
use crate::read::planned_reader::PlannedReader;
use crate::report::OutputFile;
use crate::scratch::ScratchDir;
use crate::sort::key::KeyRange;
use crate::store::Store;

/// A run read for one range: its selected row groups, the rows of the range among them
/// counted, sizes from the footer (the run is this job's own file, written by the engine).
pub(super) fn range_input(
    staged: StagedInput,
    metadata: &ParquetMetaData,
    arrow: &ArrowReaderMetadata,
    row_groups: Vec<usize>,
    keys: &KeyColumns,
    range: &KeyRange,
) -> Result<CheckedInput> {
    let mut uncompressed_bytes = 0u64;
    let mut row_bytes_estimate = 1u64;
    let mut reader_bytes_estimate = 0u64;
    for &i in &row_groups {
        let rg = metadata.row_group(i);
        let bytes = u64::try_from(rg.total_byte_size()).unwrap_or(0);
        uncompressed_bytes += bytes;
        if let Ok(rows) = u64::try_from(rg.num_rows())
            && rows > 0
        {
            row_bytes_estimate = row_bytes_estimate.max(bytes.div_ceil(rows));
        }
        let reader: u64 = (rg.columns().iter())
            .map(|c| {
                u64::try_from(c.uncompressed_size())
                    .unwrap_or(0)
                    .min(READER_BYTES_PER_COLUMN)
            })
            .sum();
        reader_bytes_estimate = reader_bytes_estimate.max(reader);
    }
    let declared_sort_key = (metadata.file_metadata().key_value_metadata())
        .and_then(|kv| kv.iter().find(|e| e.key == SORT_KEY_METADATA))
        .and_then(|e| e.value.clone());
    let mut input = CheckedInput {
        staged,
        schema: Arc::clone(arrow.schema()),
        rows: 0,
        uncompressed_bytes,
        row_bytes_estimate,
        reader_bytes_estimate,
        declared_sort_key,
        row_groups: Some(row_groups),
        page_levels: Vec::new(),
    };
    input.rows = rows_in_range(&input, keys, range)?;
    Ok(input)
}

/// Rows of the input's selected row groups whose key is in `range`, reading the key columns.
fn rows_in_range(input: &CheckedInput, keys: &KeyColumns, range: &KeyRange) -> Result<u64> {
    let path = &input.staged.local;
    let name = input.staged.key.to_string();
    let file = File::open(path).map_err(|e| Error::scratch(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| Error::parquet(name.clone(), e))?;
    let schema = Arc::clone(builder.schema());
    let time = resolve(schema.fields(), &keys.time)
        .map(|path| path[0])
        .ok_or_else(|| Error::invariant(format!("{name} has no column {}", keys.time)))?;
    let service = schema.index_of(&keys.service).ok();
    let mask = ProjectionMask::roots(builder.parquet_schema(), service.into_iter().chain([time]));
    let mut builder = builder.with_projection(mask).with_batch_size(64 * 1024);
    if let Some(row_groups) = &input.row_groups {
        builder = builder.with_row_groups(row_groups.clone());
    }
    let reader = builder
        .build()
        .map_err(|e| Error::parquet(name.clone(), e))?;
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| Error::arrow(format!("reading {name}"), e))?;
        let time = column_named(&batch, &keys.time)?
            .ok_or_else(|| Error::invariant("the time column went missing"))?;
        let times = time_nanos(time.as_ref(), keys.time_unit)
            .map_err(|e| Error::arrow("reading the time key", e))?;
        // A range is bounded only under a key whose prefix is the service's bytes (see
        // `read::split`); under any other, every range is the whole key space.
        let services = match batch.column_by_name(&keys.service) {
            Some(column) if keys.is_service_time() && is_bytes(column.data_type()) => Some(
                cast(column, &DataType::Binary)
                    .map_err(|e| Error::arrow("reading the service column", e))?,
            ),
            _ => None,
        };
        let bytes = services.as_ref().map(|s| s.as_binary::<i32>());
        for i in 0..batch.num_rows() {
            let service = bytes.and_then(|s| s.is_valid(i).then(|| s.value(i)));
            rows += u64::from(range.contains(service, times.value(i)));
        }
    }
    Ok(rows)
}

/// Whether a column's values are strings or bytes (compared as their bytes).
fn is_bytes(t: &DataType) -> bool {
    match t {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => true,
        DataType::Dictionary(_, values) => is_bytes(values),
        _ => false,
    }
}

/// Ranged GETs of a run's selection in flight at once.
const PIECES_IN_FLIGHT: usize = 2;

/// Chunks of a selection this close are fetched together, the bytes between them with them:
/// a range's row groups leave small gaps in a run (the columns of the row groups outside it,
/// within a block), and a round trip of 20-50 ms to S3 costs more than a megabyte at the
/// 80 MB/s a function gets (object_store coalesces its own ranged reads at the same gap).
/// The gaps filled add at most a sixteenth of the selection to the staged copy
/// ([`GAP_SHARE`]), so a task's scratch holds what its plan gave it, and a little more.
const COALESCE_GAP_BYTES: u64 = 1 << 20;

/// The most gap bytes a selection may fetch with it, as a share (1/N) of its own bytes.
const GAP_SHARE: u64 = 16;

/// A local file holding what a reader of `row_groups` of the object needs: the object itself
/// for a local directory store; otherwise a sparse file of the object's size with only the
/// footer and those row groups' column chunks fetched. The selection (nearly a whole run when
/// a range spans it) is fetched in pieces of at most `piece_bytes`, chunks less than
/// [`COALESCE_GAP_BYTES`] apart together,
/// [`PIECES_IN_FLIGHT`] at a time, each written to the file as it arrives: a merge holds a
/// few pieces of a run, never its selection.
#[allow(clippy::too_many_arguments)]
pub(super) async fn stage_row_groups(
    store: &Store,
    key: &Path,
    size: u64,
    metadata: &ParquetMetaData,
    row_groups: &[usize],
    scratch: &ScratchDir,
    ordinal: usize,
    piece_bytes: u64,
) -> Result<std::path::PathBuf> {
    if let Some(path) = store.read_in_place(key) {
        return Ok(path);
    }
    let tail = store
        .object_store()
        .get_range(key, size.saturating_sub(8)..size)
        .await
        .map_err(|e| Error::store("get", key, e))?;
    let footer_len = tail
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| Error::invariant(format!("{key} is shorter than a Parquet footer")))?;
    let footer = size.saturating_sub(8 + u64::from(footer_len))..size;
    let mut ranges = Vec::from([footer]);
    for &i in row_groups {
        for column in metadata.row_group(i).columns() {
            let (start, len) = column.byte_range();
            ranges.push(start..start + len);
        }
    }
    let local = scratch
        .path()
        .join(format!("run-range-{ordinal:05}.parquet"));
    let create = {
        let local = local.clone();
        move || -> std::io::Result<File> {
            let file = File::create(&local)?;
            file.set_len(size)?;
            Ok(file)
        }
    };
    let file = tokio::task::spawn_blocking(create)
        .await
        .map_err(|e| Error::invariant(format!("staging task failed: {e}")))?
        .map_err(|e| Error::scratch(&local, e))?;
    let file = Arc::new(file);
    let object_store = store.object_store();
    let selected: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
    let gaps = Gaps {
        largest: COALESCE_GAP_BYTES,
        allowance: selected / GAP_SHARE,
    };
    let mut fetched = futures::stream::iter(pieces(ranges, gaps, piece_bytes))
        .map(|piece| async move {
            let bytes = object_store.get_range(key, piece.clone()).await;
            bytes.map(|bytes| (piece, bytes))
        })
        .buffered(PIECES_IN_FLIGHT);
    while let Some(piece) = fetched.next().await {
        let (piece, bytes) = piece.map_err(|e| Error::store("get", key, e))?;
        let file = Arc::clone(&file);
        let write = move || {
            use std::os::unix::fs::FileExt;
            file.write_all_at(&bytes, piece.start)
        };
        tokio::task::spawn_blocking(write)
            .await
            .map_err(|e| Error::invariant(format!("staging task failed: {e}")))?
            .map_err(|e| Error::scratch(&local, e))?;
    }
    Ok(local)
}

/// Which gaps between the ranges of a selection are fetched with them.
#[derive(Debug, Clone, Copy)]
struct Gaps {
    /// A gap is fetched only when smaller than this.
    largest: u64,
    /// The most gap bytes fetched in all.
    allowance: u64,
}

/// `ranges` in order, those that touch or overlap merged, and those apart by a gap `gaps`
/// lets fetch merged with the gap, cut into pieces of at most `piece_bytes` (at least one
/// byte).
fn pieces(
    mut ranges: Vec<std::ops::Range<u64>>,
    gaps: Gaps,
    piece_bytes: u64,
) -> Vec<std::ops::Range<u64>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| r.start);
    let mut allowance = gaps.allowance;
    let mut merged: Vec<std::ops::Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            Some(last)
                if range.start - last.end < gaps.largest && range.start - last.end <= allowance =>
            {
                allowance -= range.start - last.end;
                last.end = range.end;
            }
            _ => merged.push(range),
        }
    }
    let piece_bytes = piece_bytes.max(1);
    let mut cut = Vec::new();
    for range in merged {
        let mut start = range.start;
        while start < range.end {
            let end = range.end.min(start.saturating_add(piece_bytes));
            cut.push(start..end);
            start = end;
        }
    }
    cut
}

/// Bytes a task reads from the end of a sorted file of the job to load its footer: in one
/// request the footer and page indexes of a run or output (tens of KB for a run of a 564 MB
/// hour), where reading the last eight bytes, then the footer, then the indexes takes three
/// round trips of 20-50 ms on S3.
pub(super) const FOOTER_PREFETCH_BYTES: usize = 256 << 10;

/// The footer of a sorted file of the job (an output or its run), `bytes` long.
pub(super) async fn footer(
    job: &JobContext<'_>,
    key: &object_store::path::Path,
    bytes: u64,
    name: &ObjectKey,
) -> Result<(Arc<ParquetMetaData>, ArrowReaderMetadata)> {
    let metadata = PlannedReader::new(Arc::clone(job.store.object_store()), key.clone())
        .with_footer_prefetch(bytes, FOOTER_PREFETCH_BYTES)
        .load_metadata()
        .await?;
    let arrow = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())
        .map_err(|e| Error::parquet(name.to_string(), e))?;
    Ok((metadata, arrow))
}

/// The rows of `range` in row groups `groups` of a sorted file, staged by range requests.
#[allow(clippy::too_many_arguments)]
pub(super) async fn stage_range(
    job: &JobContext<'_>,
    file: &OutputFile,
    metadata: &ParquetMetaData,
    arrow: &ArrowReaderMetadata,
    groups: Vec<usize>,
    range: &KeyRange,
    scratch: &ScratchDir,
    ordinal: usize,
) -> Result<CheckedInput> {
    let key = file.key.location().clone();
    let piece = job.options.budget().shares().range_piece_bytes;
    let local = stage_row_groups(
        job.store, &key, file.bytes, metadata, &groups, scratch, ordinal, piece,
    )
    .await?;
    let staged = StagedInput {
        name: key.filename().unwrap_or_default().to_string(),
        key,
        size: file.bytes,
        local,
        is_compacted: true,
    };
    range_input(staged, metadata, arrow, groups, &job.options.keys, range)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use object_store::memory::InMemory;
    use parquet::file::metadata::ParquetMetaDataReader;

    use super::*;
    use crate::store::hooked::{GetRequest, HookedStore, Inner, StoreHooks, StoreResult};
    use crate::testing::{parquet_bytes, put_bytes, rows_batch, test_partition};

    #[test]
    fn pieces_merge_close_ranges_and_cut_them_to_size() {
        let none = Gaps {
            largest: 0,
            allowance: 0,
        };
        assert_eq!(
            pieces(vec![10..20, 0..10, 30..35], none, 8),
            [0..8, 8..16, 16..20, 30..35]
        );
        assert_eq!(pieces(vec![0..10, 5..12, 12..12], none, 100), vec![(0..12)]);
        assert!(pieces(Vec::new(), none, 8).is_empty());
        // Ranges closer than the largest gap come with what lies between them, farther ones
        // do not, and the gaps fetched stay within the allowance.
        let gaps = Gaps {
            largest: 25,
            allowance: 30,
        };
        assert_eq!(
            pieces(vec![30..35, 0..10, 100..110], gaps, 100),
            [0..35, 100..110]
        );
        assert_eq!(
            pieces(vec![0..10, 30..35], gaps, 8),
            [0..8, 8..16, 16..24, 24..32, 32..35]
        );
        assert_eq!(
            pieces(vec![0..10, 30..40, 60..70, 90..100], gaps, 100),
            [0..40, 60..70, 90..100],
            "the second gap of 20 would pass the allowance of 30"
        );
    }

    /// Records the largest ranged GET and the most GETs at once.
    #[derive(Debug, Default)]
    struct GetSizes {
        largest: AtomicU64,
        at_once: AtomicUsize,
        most_at_once: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl StoreHooks for Arc<GetSizes> {
        async fn get(
            &self,
            inner: &Inner,
            get: GetRequest<'_>,
        ) -> StoreResult<object_store::GetResult> {
            let now = self.at_once.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_at_once.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            let result = get.forward(inner).await;
            self.at_once.fetch_sub(1, Ordering::SeqCst);
            if let Ok(r) = &result {
                self.largest
                    .fetch_max(r.range.end - r.range.start, Ordering::SeqCst);
            }
            result
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_selection_is_staged_in_pieces_a_few_at_a_time() {
        let (start, _) = test_partition().time_range_nanos();
        let rows: Vec<_> = (0..20_000)
            .map(|r| (Some(format!("svc-{}", r % 5)), start + r, r))
            .collect();
        let bytes = parquet_bytes(&[rows_batch(&rows)], 1_000);
        let sizes = Arc::new(GetSizes::default());
        let hooked = HookedStore::wrap(Arc::new(InMemory::new()), Arc::new(Arc::clone(&sizes)));
        let store = Store::from_object_store(Arc::new(hooked), "memory://");
        put_bytes(&store, "run.parquet", bytes.clone()).await;
        let metadata = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .expect("metadata");
        let row_groups: Vec<usize> = (0..metadata.num_row_groups()).collect();
        assert!(row_groups.len() > 4);
        let base = tempfile::tempdir().expect("dir");
        let scratch = ScratchDir::create(base.path()).expect("scratch");
        let piece = 4 << 10;
        let local = stage_row_groups(
            &store,
            &Path::from("run.parquet"),
            bytes.len() as u64,
            &metadata,
            &row_groups,
            &scratch,
            0,
            piece,
        )
        .await
        .expect("staged");
        // Every column chunk and the footer hold the object's bytes, fetched 4 KiB at a time.
        let staged = std::fs::read(&local).expect("staged file");
        assert_eq!(staged.len(), bytes.len());
        let footer = bytes.len()
            - 8
            - u32::from_le_bytes(bytes[bytes.len() - 8..][..4].try_into().expect("4 bytes"))
                as usize;
        assert_eq!(&staged[footer..], &bytes[footer..]);
        for group in metadata.row_groups() {
            for column in group.columns() {
                let (start, len) = column.byte_range();
                let chunk = start as usize..(start + len) as usize;
                assert_eq!(&staged[chunk.clone()], &bytes[chunk]);
            }
        }
        let largest = sizes.largest.load(Ordering::SeqCst);
        assert!(largest <= piece, "{largest}");
        assert!(sizes.most_at_once.load(Ordering::SeqCst) <= PIECES_IN_FLIGHT);
    }
}

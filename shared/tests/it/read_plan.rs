//! Read plans on real files: the planned reader returns the rows a reader without a plan
//! returns; on a file written row group after row group it makes exactly the same requests;
//! the ranges it plans are the ranges the Parquet decoder asks for.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use bytes::Bytes;
use futures::StreamExt;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use ourios_compaction::output::blocks::{BlockOptions, BlockWriter};
use ourios_compaction::read::planned_reader::PlannedReader;
use ourios_compaction::read::read_plan::{
    DEFAULT_MAX_BLOCK_BYTES, ReadPlan, RowGroupReads, merge_ranges, projected_leaves,
};
use ourios_compaction::store::Store;
use ourios_compaction::store::counting::CountingStore;
use ourios_compaction::testing::{fixture_properties, log_fixture, named_batch, put_bytes};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use parquet::arrow::push_decoder::ParquetPushDecoderBuilder;
use parquet::arrow::{ArrowWriter, ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

const ROWS: usize = 6000;
const ROWS_PER_GROUP: usize = 1000;

/// Four columns, many small pages, six row groups, a page index and a bloom filter.
fn file(columns: &[&str]) -> Bytes {
    let all: Vec<(&str, ArrayRef)> = vec![
        (
            "service.name",
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|i| format!("svc-{}", i / 700)),
            )),
        ),
        (
            "time_unix_nano",
            Arc::new(Int64Array::from_iter_values(
                (0..ROWS as i64).map(|i| i * 1000),
            )),
        ),
        (
            "body",
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|i| format!("line {i} {}", "x".repeat(i % 97))),
            )),
        ),
        (
            "tag",
            Arc::new(Int64Array::from_iter_values(
                (0..ROWS as i64).map(|i| i * 7 % 13),
            )),
        ),
    ];
    let batch = named_batch(
        all.into_iter()
            .filter(|(name, _)| columns.contains(name))
            .collect(),
    );
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROWS_PER_GROUP))
        .set_data_page_row_count_limit(100)
        .set_write_batch_size(100)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_bloom_filter_enabled(true)
        .build();
    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    Bytes::from(buf)
}

/// What one read of a file returned and cost.
#[derive(Debug, PartialEq)]
struct Read {
    batches: Vec<RecordBatch>,
    requests: u64,
    bytes: u64,
}

/// A scan of `row_groups` (each with its selection, or all of them) projecting `mask`,
/// counting only the data requests; with or without a read plan.
struct Scan {
    row_groups: Vec<(usize, Option<RowSelection>)>,
    roots: Option<Vec<usize>>,
}

impl Scan {
    fn mask(&self, metadata: &ParquetMetaData) -> ProjectionMask {
        match &self.roots {
            Some(roots) => ProjectionMask::roots(
                metadata.file_metadata().schema_descr(),
                roots.iter().copied(),
            ),
            None => ProjectionMask::all(),
        }
    }

    fn selection(&self) -> Option<RowSelection> {
        let selectors: Vec<RowSelector> = self
            .row_groups
            .iter()
            .filter_map(|(_, s)| s.as_ref())
            .flat_map(|s| s.iter().copied())
            .collect();
        self.row_groups
            .iter()
            .all(|(_, s)| s.is_some())
            .then(|| RowSelection::from(selectors))
    }

    fn plan(&self, metadata: &ParquetMetaData) -> ReadPlan {
        let leaves = projected_leaves(metadata, &self.mask(metadata));
        ReadPlan::from_footer(metadata, &self.row_groups, &leaves, DEFAULT_MAX_BLOCK_BYTES)
    }

    /// Reads with the scan's own plan, or without a plan.
    async fn read(&self, store: &Arc<dyn ObjectStore>, key: &Path, planned: bool) -> Read {
        let metadata = footer(store, key).await;
        let plan = planned.then(|| self.plan(&metadata));
        self.read_with(store, key, plan).await
    }

    /// Reads with `plan`, or without a plan.
    async fn read_with(
        &self,
        store: &Arc<dyn ObjectStore>,
        key: &Path,
        plan: Option<ReadPlan>,
    ) -> Read {
        let metadata = footer(store, key).await;
        let (counting, counters) = CountingStore::new(Arc::clone(store));
        let mut reader = PlannedReader::new(Arc::new(counting), key.clone());
        if let Some(plan) = plan {
            reader = reader.with_plan(plan);
        }
        let arrow = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())
            .expect("arrow metadata");
        let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, arrow)
            .with_row_groups(self.row_groups.iter().map(|(rg, _)| *rg).collect())
            .with_projection(self.mask(&metadata));
        if let Some(selection) = self.selection() {
            builder = builder.with_row_selection(selection);
        }
        let mut stream = builder.build().expect("stream");
        let mut batches = Vec::new();
        while let Some(batch) = stream.next().await {
            batches.push(batch.expect("batch"));
        }
        Read {
            batches,
            requests: counters.requests(),
            bytes: counters.bytes(),
        }
    }
}

async fn footer(store: &Arc<dyn ObjectStore>, key: &Path) -> Arc<ParquetMetaData> {
    PlannedReader::new(Arc::clone(store), key.clone())
        .load_metadata()
        .await
        .expect("footer")
}

/// The selection of the rows `[start, end)` of each pair, in a row group of `rows`.
fn select(ranges: &[(usize, usize)], rows: usize) -> RowSelection {
    let mut selectors = Vec::new();
    let mut at = 0;
    for &(start, end) in ranges {
        selectors.push(RowSelector::skip(start - at));
        selectors.push(RowSelector::select(end - start));
        at = end;
    }
    selectors.push(RowSelector::skip(rows - at));
    RowSelection::from(selectors)
}

/// Scans of a file of six or more row groups of [`ROWS_PER_GROUP`] rows: whole row groups,
/// page selections and projections.
fn scans() -> Vec<Scan> {
    let every: Vec<_> = (0..6).map(|rg| (rg, None)).collect();
    let pages = vec![
        (1, Some(select(&[(250, 420)], ROWS_PER_GROUP))),
        (2, Some(select(&[(900, 1000)], ROWS_PER_GROUP))),
        (3, Some(select(&[(0, 1000)], ROWS_PER_GROUP))),
        (4, Some(select(&[(0, 300)], ROWS_PER_GROUP))),
        (5, Some(select(&[(0, 10), (990, 1000)], ROWS_PER_GROUP))),
    ];
    vec![
        Scan {
            row_groups: every.clone(),
            roots: None,
        },
        Scan {
            row_groups: every.clone(),
            roots: Some(vec![0, 1]),
        },
        Scan {
            row_groups: every,
            roots: Some(vec![0, 3]),
        },
        Scan {
            row_groups: vec![(0, None), (2, None), (3, None)],
            roots: Some(vec![1]),
        },
        Scan {
            row_groups: pages.clone(),
            roots: None,
        },
        Scan {
            row_groups: pages,
            roots: Some(vec![0, 1]),
        },
    ]
}

async fn stored(bytes: Bytes) -> (Arc<dyn ObjectStore>, Path) {
    let store = Store::from_object_store(Arc::new(InMemory::new()), "memory://");
    put_bytes(&store, "f.parquet", bytes).await;
    (Arc::clone(store.object_store()), Path::from("f.parquet"))
}

#[tokio::test]
async fn plain_files_read_exactly_as_before() {
    let (store, key) = stored(file(&["service.name", "time_unix_nano", "body", "tag"])).await;
    for (i, scan) in scans().iter().enumerate() {
        let before = scan.read(&store, &key, false).await;
        let after = scan.read(&store, &key, true).await;
        assert!(!before.batches.is_empty(), "scan {i} reads rows");
        assert_eq!(after, before, "scan {i}");
    }
}

#[tokio::test]
async fn planned_requests_are_the_requests_made() {
    let (store, key) = stored(file(&["service.name", "time_unix_nano", "body", "tag"])).await;
    let metadata = footer(&store, &key).await;
    for (i, scan) in scans().iter().enumerate() {
        let plan = scan.plan(&metadata);
        let read = scan.read(&store, &key, true).await;
        assert_eq!(read.requests, plan.requests() as u64, "scan {i}");
        assert_eq!(read.bytes, plan.bytes(), "scan {i}");
        // Every block is one row group: row groups are written one after another.
        assert_eq!(plan.blocks.len(), scan.row_groups.len(), "scan {i}");
    }
}

#[tokio::test]
async fn one_column_files_are_one_block() {
    // With a single column and no bloom filter, each row group's chunk starts where the
    // previous one ends: the plan finds the contiguity from offsets and fetches all row
    // groups in one request, with the same rows.
    let batch = named_batch(vec![(
        "tag",
        Arc::new(Int64Array::from_iter_values(0..ROWS as i64)) as ArrayRef,
    )]);
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROWS_PER_GROUP))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .build();
    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    let (store, key) = stored(Bytes::from(buf)).await;
    let scan = Scan {
        row_groups: (0..6).map(|rg| (rg, None)).collect(),
        roots: None,
    };
    let before = scan.read(&store, &key, false).await;
    let after = scan.read(&store, &key, true).await;
    assert_eq!(before.requests, 6);
    assert_eq!(after.requests, 1);
    assert_eq!(after.bytes, before.bytes);
    assert_eq!(after.batches, before.batches);
}

#[tokio::test]
async fn planned_ranges_are_the_decoders() {
    // The ranges planned from the footer cover exactly the bytes the decoder's own scan plan
    // lists, row group by row group.
    let (store, key) = stored(file(&["service.name", "time_unix_nano", "body", "tag"])).await;
    let metadata = footer(&store, &key).await;
    for (i, scan) in scans().iter().enumerate() {
        let arrow = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())
            .expect("arrow metadata");
        let mut builder = ParquetPushDecoderBuilder::new_with_metadata(arrow)
            .with_row_groups(scan.row_groups.iter().map(|(rg, _)| *rg).collect())
            .with_projection(scan.mask(&metadata));
        if let Some(selection) = scan.selection() {
            builder = builder.with_row_selection(selection);
        }
        let decoder = builder.build().expect("decoder");
        let leaves = projected_leaves(&metadata, &scan.mask(&metadata));
        for (rg, selection) in &scan.row_groups {
            let ours = RowGroupReads::from_footer(&metadata, *rg, &leaves, selection.as_ref());
            let theirs: Vec<_> = decoder
                .scan_plan()
                .filter(|p| p.row_group == *rg)
                .map(|p| p.range)
                .collect();
            assert_eq!(
                merge_ranges(ours.ranges, 0),
                merge_ranges(theirs, 0),
                "scan {i}, row group {rg}"
            );
        }
    }
}

/// The log fixture (service, time, then seven more columns) in row groups of
/// [`ROWS_PER_GROUP`] rows, in blocks of `per_block`.
fn block_file(per_block: usize) -> Bytes {
    let batch = log_fixture(12 * ROWS_PER_GROUP, 1_795_946_400_000_000_000);
    let props = fixture_properties(&batch.schema(), 64 << 20, Some(ROWS_PER_GROUP as u64))
        .expect("properties");
    let options = BlockOptions::new(per_block, None);
    let mut writer =
        BlockWriter::try_new(Vec::new(), batch.schema(), props, options).expect("writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    Bytes::from(std::mem::take(writer.inner_mut().expect("the sink")))
}

#[tokio::test]
async fn block_files_read_the_same_rows_in_fewer_requests() {
    let (plain_store, plain_key) = stored(block_file(1)).await;
    let (store, key) = stored(block_file(4)).await;
    let metadata = footer(&store, &key).await;
    assert_eq!(metadata.num_row_groups(), 12);
    for (i, scan) in scans().iter().enumerate() {
        let plain = scan.read(&plain_store, &plain_key, true).await;
        let unplanned = scan.read(&store, &key, false).await;
        let planned = scan.read(&store, &key, true).await;
        assert_eq!(planned.batches, plain.batches, "scan {i}: the same rows");
        assert_eq!(unplanned.batches, plain.batches, "scan {i}: the same rows");
        // Everything read was planned: one GET per planned request.
        let plan = scan.plan(&metadata);
        assert_eq!(planned.requests, plan.requests() as u64, "scan {i}");
        assert_eq!(planned.bytes, plan.bytes(), "scan {i}");
        assert!(planned.requests <= unplanned.requests, "scan {i}");
    }
    // The two key columns, every row: one request per block of four against one per row
    // group, for the same bytes.
    let keys = Scan {
        row_groups: (0..12).map(|rg| (rg, None)).collect(),
        roots: Some(vec![0, 1]),
    };
    let plain = keys.read(&plain_store, &plain_key, true).await;
    let planned = keys.read(&store, &key, true).await;
    assert_eq!((plain.requests, planned.requests), (12, 3));
    assert_eq!(keys.plan(&metadata).blocks.len(), 3);
    // One column of row groups 0, 1 and 3: 0 and 1 are one range, 3 another (row group 2's
    // chunk lies between them).
    let gap = Scan {
        row_groups: vec![(0, None), (1, None), (3, None)],
        roots: Some(vec![2]),
    };
    let plan = gap.plan(&metadata);
    assert_eq!(plan.blocks.len(), 2);
    assert_eq!(plan.blocks[0].row_groups, vec![0, 1]);
    assert_eq!(gap.read(&store, &key, true).await.requests, 2);
}

#[tokio::test]
async fn a_bounded_plan_cuts_blocks_and_reads_the_same_rows() {
    let (store, key) = stored(block_file(8)).await;
    let metadata = footer(&store, &key).await;
    let scan = Scan {
        row_groups: (0..12).map(|rg| (rg, None)).collect(),
        roots: None,
    };
    let leaves = projected_leaves(&metadata, &scan.mask(&metadata));
    let whole = ReadPlan::from_footer(&metadata, &scan.row_groups, &leaves, u64::MAX);
    assert_eq!(whole.blocks.len(), 2);
    let bound = whole.blocks[0].bytes() / 3;
    let bounded = ReadPlan::from_footer(&metadata, &scan.row_groups, &leaves, bound);
    assert!(bounded.blocks.len() > whole.blocks.len());
    assert!(
        bounded
            .blocks
            .iter()
            .all(|b| b.bytes() <= bound || b.row_groups.len() == 1)
    );
    // The same rows, a few more requests; a cut block may fetch again bytes its neighbour
    // coalesced over.
    let unplanned = scan.read(&store, &key, false).await;
    let read = scan.read_with(&store, &key, Some(bounded)).await;
    assert_eq!(read.batches, unplanned.batches);
    assert!(read.bytes >= whole.bytes());
}

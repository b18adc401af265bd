//! Read planning from footer offsets alone: the byte ranges a scan of some row groups and
//! columns fetches, one request per range, with row groups whose chunks sit back to back
//! fetched together.
//!
//! A writer may store a block of row groups column by column: each column's chunks for the
//! block's row groups back to back (the file stays standard Parquet; the footer records
//! every chunk's offsets). The plan needs no flag to find such blocks. Two surviving row
//! groups belong to one **fetch block** when every projected column's chunk in the second
//! starts exactly where its chunk in the first ends, or when their requests share bytes.
//! Inside a block, requests that overlap or touch become one; nothing merges across a gap
//! or across blocks. Inside a row group, requests are coalesced exactly as the object store
//! coalesces one `get_ranges` call ([`COALESCE_GAP_BYTES`]), so a file written row group
//! after row group (columns interleaved) gives the same requests as a reader without a plan.

use std::ops::Range;

use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::RowSelection;
use parquet::file::metadata::ParquetMetaData;

/// Largest gap between two ranges of one row group that one request spans: what
/// `ObjectStore::get_ranges` does with the ranges of one call.
pub const COALESCE_GAP_BYTES: u64 = object_store::OBJECT_STORE_COALESCE_DEFAULT;

/// Most bytes one fetch block requests, so a scan holds a bounded amount of a file at once
/// (a block is cut at a row-group boundary past this; a single row group may exceed it).
pub const DEFAULT_MAX_BLOCK_BYTES: u64 = 64 << 20;

/// What the reader fetches from one row group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroupReads {
    /// Row-group index in the file.
    pub row_group: usize,
    /// Byte ranges of the projected column chunks, in column order.
    pub chunks: Vec<Range<u64>>,
    /// Byte ranges the reader asks for: whole chunks, or each chunk's dictionary page and
    /// the data pages holding selected rows.
    pub ranges: Vec<Range<u64>>,
}

impl RowGroupReads {
    /// The reads of `row_group` for the leaf `columns` and the row group's `selection`, from
    /// the footer (and its offset index, when loaded): the ranges the Parquet reader requests.
    ///
    /// With a selection and an offset index, a column needs its dictionary page (the bytes
    /// before its first data page) and the data pages that hold a selected row; otherwise
    /// the whole chunk. A column index out of range is ignored.
    pub fn from_footer(
        metadata: &ParquetMetaData,
        row_group: usize,
        columns: &[usize],
        selection: Option<&RowSelection>,
    ) -> Self {
        let rg = metadata.row_group(row_group);
        // The reader uses offset indexes only when a selection is given and they were loaded.
        let offsets = metadata
            .page_index()
            .filter(|index| selection.is_some() && index.has_offset_indexes())
            .map(|_| metadata.page_index_for_row_group(row_group));
        let mut chunks = Vec::with_capacity(columns.len());
        let mut ranges = Vec::new();
        for &column in columns.iter().filter(|&&c| c < rg.num_columns()) {
            let (start, len) = rg.column(column).byte_range();
            let chunk = start..start.saturating_add(len);
            chunks.push(chunk.clone());
            let pages = offsets
                .as_ref()
                .and_then(|index| index.page_locations(column))
                .map(Vec::as_slice)
                .filter(|pages| !pages.is_empty());
            match (selection, pages) {
                (Some(selection), Some(pages)) => {
                    let first = pages[0].offset.max(0) as u64;
                    if first != chunk.start {
                        ranges.push(chunk.start..first);
                    }
                    ranges.extend(selection.scan_ranges(pages));
                }
                _ => ranges.push(chunk),
            }
        }
        Self {
            row_group,
            chunks,
            ranges,
        }
    }

    /// The requests this row group alone makes: its ranges coalesced across gaps of at most
    /// [`COALESCE_GAP_BYTES`], sorted.
    pub fn requests(&self) -> Vec<Range<u64>> {
        merge_ranges(self.ranges.clone(), COALESCE_GAP_BYTES)
    }

    /// True when every chunk starts exactly where the matching chunk of `previous` ends.
    fn continues(&self, previous: &RowGroupReads) -> bool {
        !self.chunks.is_empty()
            && self.chunks.len() == previous.chunks.len()
            && self
                .chunks
                .iter()
                .zip(&previous.chunks)
                .all(|(next, prev)| next.start == prev.end)
    }
}

/// Row groups fetched together, and the requests that fetch them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchBlock {
    /// Row-group indexes, in read order.
    pub row_groups: Vec<usize>,
    /// One GET each, sorted and disjoint.
    pub requests: Vec<Range<u64>>,
}

impl FetchBlock {
    /// Bytes the block's requests fetch.
    pub fn bytes(&self) -> u64 {
        self.requests.iter().map(|r| r.end - r.start).sum()
    }

    /// The index of the request that holds all of `range`, if one does.
    pub fn request_holding(&self, range: &Range<u64>) -> Option<usize> {
        let i = self.requests.partition_point(|r| r.start <= range.start);
        (i > 0 && range.end <= self.requests[i - 1].end).then(|| i - 1)
    }
}

/// The requests of a scan, in fetch blocks, in read order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// The fetch blocks, in the order the reader reaches them.
    pub blocks: Vec<FetchBlock>,
}

impl ReadPlan {
    /// Plans the reads of row groups in read order; a block is cut before a row group that
    /// would take its requests past `max_block_bytes`.
    pub fn new(reads: &[RowGroupReads], max_block_bytes: u64) -> Self {
        let mut blocks: Vec<FetchBlock> = Vec::new();
        let mut previous: Option<&RowGroupReads> = None;
        for rg in reads {
            let requests = rg.requests();
            let size: u64 = requests.iter().map(|r| r.end - r.start).sum();
            let joins = blocks.last().zip(previous).is_some_and(|(block, prev)| {
                (rg.continues(prev) || shares_bytes(&block.requests, &requests))
                    && block.bytes().saturating_add(size) <= max_block_bytes
            });
            match blocks.last_mut() {
                Some(block) if joins => {
                    block.row_groups.push(rg.row_group);
                    block.requests.extend(requests);
                    block.requests = merge_ranges(std::mem::take(&mut block.requests), 0);
                }
                _ => blocks.push(FetchBlock {
                    row_groups: vec![rg.row_group],
                    requests,
                }),
            }
            previous = Some(rg);
        }
        Self { blocks }
    }

    /// The plan of a scan from the footer: `row_groups` in read order, each with its own
    /// selection (or `None` for all its rows), reading the leaf `columns`.
    pub fn from_footer(
        metadata: &ParquetMetaData,
        row_groups: &[(usize, Option<RowSelection>)],
        columns: &[usize],
        max_block_bytes: u64,
    ) -> Self {
        let reads: Vec<RowGroupReads> = row_groups
            .iter()
            .filter(|(rg, _)| *rg < metadata.num_row_groups())
            .map(|(rg, selection)| {
                RowGroupReads::from_footer(metadata, *rg, columns, selection.as_ref())
            })
            .collect();
        Self::new(&reads, max_block_bytes)
    }

    /// GET requests the plan makes.
    pub fn requests(&self) -> usize {
        self.blocks.iter().map(|b| b.requests.len()).sum()
    }

    /// Bytes the plan fetches.
    pub fn bytes(&self) -> u64 {
        self.blocks.iter().map(FetchBlock::bytes).sum()
    }

    /// The first block at or after `from` (wrapping around) with a request holding all of
    /// `range`.
    pub fn block_holding(&self, range: &Range<u64>, from: usize) -> Option<usize> {
        let n = self.blocks.len();
        (0..n)
            .map(|i| (from + i) % n)
            .find(|&b| self.blocks[b].request_holding(range).is_some())
    }
}

/// True when a range of `a` and a range of `b` (both sorted) share at least one byte.
fn shares_bytes(a: &[Range<u64>], b: &[Range<u64>]) -> bool {
    b.iter().any(|r| {
        let i = a.partition_point(|x| x.end <= r.start);
        a.get(i).is_some_and(|x| x.start < r.end)
    })
}

/// The leaf columns a projection reads.
pub fn projected_leaves(metadata: &ParquetMetaData, mask: &ProjectionMask) -> Vec<usize> {
    let leaves = metadata.file_metadata().schema_descr().num_columns();
    (0..leaves).filter(|&i| mask.leaf_included(i)).collect()
}

/// Sorts `ranges` and merges those that overlap or lie at most `gap` bytes apart (the rule
/// of `object_store`'s `coalesce_ranges`). Empty ranges are dropped.
pub fn merge_ranges(mut ranges: Vec<Range<u64>>, gap: u64) -> Vec<Range<u64>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(gap) => {
                last.end = last.end.max(r.end);
            }
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads of one row group reading whole chunks.
    fn whole(row_group: usize, chunks: &[Range<u64>]) -> RowGroupReads {
        RowGroupReads {
            row_group,
            chunks: chunks.to_vec(),
            ranges: chunks.to_vec(),
        }
    }

    /// A plain layout: `groups` row groups of `columns` chunks of `len` bytes, one row
    /// group after another; the reads of the leaf columns `projected`.
    fn plain(groups: usize, columns: usize, len: u64, projected: &[usize]) -> Vec<RowGroupReads> {
        (0..groups)
            .map(|g| {
                let base = 4 + (g * columns) as u64 * len;
                let chunks: Vec<_> = projected
                    .iter()
                    .map(|&c| base + c as u64 * len..base + (c as u64 + 1) * len)
                    .collect();
                whole(g, &chunks)
            })
            .collect()
    }

    /// A block layout: blocks of `per_block` row groups, each column's chunks back to back.
    fn blocked(
        groups: usize,
        per_block: usize,
        columns: usize,
        len: u64,
        projected: &[usize],
    ) -> Vec<RowGroupReads> {
        (0..groups)
            .map(|g| {
                let (block, k) = (g / per_block, g % per_block);
                let in_block = per_block.min(groups - block * per_block) as u64;
                let base = 4 + (block * per_block * columns) as u64 * len;
                let chunks: Vec<_> = projected
                    .iter()
                    .map(|&c| {
                        let start = base + (c as u64 * in_block + k as u64) * len;
                        start..start + len
                    })
                    .collect();
                whole(g, &chunks)
            })
            .collect()
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn plain_files_keep_one_block_per_row_group() {
        // Columns 0 and 2 of 4, chunks of 2 MiB: two requests per row group (the gap is too
        // big to coalesce), exactly what a reader without a plan sends.
        let reads = plain(6, 4, 2 * MIB, &[0, 2]);
        let plan = ReadPlan::new(&reads, u64::MAX);
        assert_eq!(plan.blocks.len(), 6);
        assert_eq!(plan.requests(), 12);
        let unplanned: usize = reads.iter().map(|r| r.requests().len()).sum();
        assert_eq!(plan.requests(), unplanned);
        // Small chunks: the object store's coalescing joins a row group's two columns.
        let plan = ReadPlan::new(&plain(6, 4, 1000, &[0, 2]), u64::MAX);
        assert_eq!((plan.blocks.len(), plan.requests()), (6, 6));
        assert_eq!(plan.bytes(), 6 * 3000);
    }

    #[test]
    fn plain_files_touching_across_row_groups_stay_apart() {
        // Last column of one row group and the first of the next touch, but the projected
        // columns do not each continue: no block, today's requests.
        let reads = plain(3, 3, 2 * MIB, &[0, 2]);
        let plan = ReadPlan::new(&reads, u64::MAX);
        assert_eq!(plan.blocks.len(), 3);
        assert_eq!(plan.requests(), 6);
    }

    #[test]
    fn blocks_fetch_each_column_once() {
        // 8 row groups in blocks of 4, 4 columns of 2 MiB chunks, columns 0 and 2 projected:
        // one request per column per block.
        let reads = blocked(8, 4, 4, 2 * MIB, &[0, 2]);
        let plan = ReadPlan::new(&reads, u64::MAX);
        assert_eq!(plan.blocks.len(), 2);
        assert_eq!(plan.blocks[0].row_groups, vec![0, 1, 2, 3]);
        assert_eq!(plan.requests(), 4);
        assert_eq!(plan.bytes(), 16 * 2 * MIB);
        // Adjacent projected columns merge into one request per block.
        let plan = ReadPlan::new(&blocked(8, 4, 4, 2 * MIB, &[1, 2]), u64::MAX);
        assert_eq!(plan.requests(), 2);
        // A last, shorter block.
        let plan = ReadPlan::new(&blocked(10, 4, 4, 2 * MIB, &[0]), u64::MAX);
        assert_eq!(plan.blocks.len(), 3);
        assert_eq!(plan.blocks[2].row_groups, vec![8, 9]);
        assert_eq!(plan.requests(), 3);
    }

    #[test]
    fn pruned_row_groups_split_a_block_without_crossing_gaps() {
        // Row groups 0, 1 and 3 of a block of 4 survive: 0 and 1 share requests, 3 does not
        // continue 1 (row group 2's chunk lies between).
        let reads = blocked(4, 4, 4, 2 * MIB, &[0]);
        let surviving = [reads[0].clone(), reads[1].clone(), reads[3].clone()];
        let plan = ReadPlan::new(&surviving, u64::MAX);
        assert_eq!(plan.blocks.len(), 2);
        assert_eq!(plan.blocks[0].row_groups, vec![0, 1]);
        assert_eq!(plan.blocks[0].requests, vec![4..4 + 4 * MIB]);
        assert_eq!(plan.requests(), 2);
        assert_eq!(plan.bytes(), 3 * 2 * MIB);
    }

    #[test]
    fn selected_pages_merge_only_when_they_touch() {
        // Row groups 0 and 1 of a block, one column of 2 MiB chunks in 8 pages. Row group 0
        // needs its last two pages, row group 1 its first: they touch, one request.
        let chunk = |g: u64| 4 + g * 2 * MIB..4 + (g + 1) * 2 * MIB;
        let page = |g: u64, p: u64| {
            let start = chunk(g).start + p * MIB / 4;
            start..start + MIB / 4
        };
        let a = RowGroupReads {
            row_group: 0,
            chunks: vec![chunk(0)],
            ranges: vec![page(0, 6), page(0, 7)],
        };
        let b = RowGroupReads {
            row_group: 1,
            chunks: vec![chunk(1)],
            ranges: vec![page(1, 0)],
        };
        let plan = ReadPlan::new(&[a.clone(), b], u64::MAX);
        assert_eq!(plan.blocks.len(), 1);
        assert_eq!(
            plan.blocks[0].requests,
            vec![page(0, 6).start..page(1, 0).end]
        );
        // Row group 1 needing its third page instead: a gap, two requests in one block.
        let c = RowGroupReads {
            row_group: 1,
            chunks: vec![chunk(1)],
            ranges: vec![page(1, 2)],
        };
        let plan = ReadPlan::new(&[a, c], u64::MAX);
        assert_eq!(plan.blocks.len(), 1);
        assert_eq!(plan.requests(), 2);
        assert_eq!(plan.bytes(), 3 * MIB / 4);
    }

    #[test]
    fn overlapping_requests_of_separate_row_groups_merge() {
        // Coalescing inside row group 0 spans row group 1's chunk (a block layout with row
        // group 1 read but not continuing row group 0 in every column): one request.
        let a = RowGroupReads {
            row_group: 0,
            chunks: vec![0..100, 300..400],
            ranges: vec![0..100, 300..400],
        };
        let b = RowGroupReads {
            row_group: 2,
            chunks: vec![150..200, 500..600],
            ranges: vec![150..200, 500..600],
        };
        let plan = ReadPlan::new(&[a, b], u64::MAX);
        assert_eq!(plan.blocks.len(), 1);
        assert_eq!(plan.blocks[0].requests, vec![0..600]);
    }

    #[test]
    fn block_size_is_bounded() {
        let reads = blocked(8, 8, 2, MIB, &[0]);
        let plan = ReadPlan::new(&reads, 3 * MIB);
        assert_eq!(
            plan.blocks
                .iter()
                .map(|b| b.row_groups.len())
                .collect::<Vec<_>>(),
            vec![3, 3, 2]
        );
        assert!(plan.blocks.iter().all(|b| b.bytes() <= 3 * MIB));
        // A single row group larger than the bound is still one block.
        let plan = ReadPlan::new(&reads, MIB / 2);
        assert_eq!(plan.blocks.len(), 8);
    }

    #[test]
    fn requests_hold_every_range_read() {
        let reads = blocked(12, 4, 3, 3000, &[0, 2]);
        let plan = ReadPlan::new(&reads, u64::MAX);
        for (i, rg) in reads.iter().enumerate() {
            for r in &rg.ranges {
                assert_eq!(plan.block_holding(r, 0), Some(i / 4), "{r:?}");
            }
        }
        assert_eq!(plan.block_holding(&(0..4), 0), None);
        assert_eq!(plan.block_holding(&(4..4 + 3000 * 13), 0), None);
    }

    #[test]
    fn merging_follows_the_store_rule() {
        assert_eq!(
            merge_ranges(vec![5..6, 0..2, 2..3, 9..9], 0),
            vec![0..3, 5..6]
        );
        assert_eq!(merge_ranges(vec![5..6, 0..2], 3), vec![0..6]);
        assert_eq!(merge_ranges(vec![0..10, 2..4], 0), vec![0..10]);
        assert!(merge_ranges(Vec::new(), 0).is_empty());
    }
}

//! The window query: one tenant, one service (or all), a half-open time window, over the live
//! files of the partitions the window touches, reading as little as the layout allows.
//!
//! Files are pruned by row group with footer min/max statistics, then with the bloom filter
//! of the service column, then by page with the page indexes of the key columns; only the
//! surviving pages are fetched and decoded, and their rows are filtered exactly, so the
//! answer equals a full scan's whatever the layout (old unsorted files just prune less).
//! Reads follow a [`ReadPlan`] (row groups stored back to back share requests) and go
//! through a [`CountingStore`], so the statistics report real requests.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_cast::cast;
use arrow_schema::{DataType, SchemaRef};
use arrow_select::concat::concat_batches;
use arrow_select::filter::filter_record_batch;
use arrow_select::take::take_record_batch;
use futures::StreamExt;
use object_store::ObjectStore;
use object_store::path::Path;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::input::column_path::{self, column_named};
use crate::input::type_union::time_nanos;
use crate::manifest::partition_files;
use crate::options::KeyColumns;
use crate::partition::{HOUR_NANOS, KeyLayout, PartitionId};
use crate::read::column_filter::{ColumnFilter, and_masks, resolve};
use crate::read::inspect::parquet_store_error;
use crate::read::planned_reader::PlannedReader;
use crate::read::prune::{TimeLeaf, WindowPredicate, leaf_column_index, may_match, time_leaf};
use crate::read::read_plan::{DEFAULT_MAX_BLOCK_BYTES, ReadPlan, projected_leaves};
use crate::store::Store;
use crate::store::counting::CountingStore;

/// A window query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowQuery {
    /// The tenant (required in a layout with tenants: a query never crosses tenants; none in
    /// a layout without).
    pub tenant: Option<String>,
    /// The service, or `None` for every service.
    pub service: Option<String>,
    /// Window start, Unix nanoseconds, inclusive.
    pub from_nanos: i64,
    /// Window end, Unix nanoseconds, exclusive.
    pub to_nanos: i64,
    /// Most rows returned (in key order); `rows_matched` still counts them all.
    pub limit: usize,
    /// `column=value` filters every row must pass (`--where`).
    pub filters: Vec<ColumnFilter>,
}

/// What a query read (result statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueryStats {
    /// Live files considered.
    pub files: u64,
    /// Row groups in those files.
    pub row_groups_total: u64,
    /// Row groups read.
    pub row_groups_scanned: u64,
    /// Row groups skipped by statistics or bloom filters.
    pub row_groups_pruned: u64,
    /// Of those, row groups skipped by a bloom filter (the service's, a `--where` column's).
    pub row_groups_pruned_by_bloom: u64,
    /// Bytes fetched from the store (footers, indexes, blooms, pages).
    pub bytes_read: u64,
    /// GET requests made to the store.
    pub requests: u64,
    /// Rows matching the query.
    pub rows_matched: u64,
    /// Quarantined files in the window's partitions: their rows are in no answer until the
    /// files are released and compacted (`ourios-compact files` lists them).
    pub quarantined_files: u64,
    /// `*.parquet` keys in the window's partitions the store cannot address: their rows are in
    /// no answer until the objects are renamed.
    pub unaddressable_files: u64,
}

/// Rows (up to the limit, in key order) and statistics.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// Matching rows, at most `limit`, sorted by (service, time), in one batch per file.
    pub rows: Vec<RecordBatch>,
    /// What the query read.
    pub stats: QueryStats,
}

/// Runs a window query over the live files of every partition the window touches.
pub async fn query_window(
    store: &Store,
    layout: &KeyLayout,
    keys: &KeyColumns,
    query: &WindowQuery,
) -> Result<QueryResult> {
    if query.from_nanos >= query.to_nanos {
        return Err(Error::Config {
            message: "the window is empty: --from must be before --to".into(),
        });
    }
    let (counting, counters) = CountingStore::new(Arc::clone(store.object_store()));
    let counting: Arc<dyn ObjectStore> = Arc::new(counting);
    let predicate = WindowPredicate {
        service: query.service.clone(),
        from_nanos: query.from_nanos,
        to_nanos: query.to_nanos,
    };
    let mut stats = QueryStats::default();
    let mut found = Vec::new();
    let window = partitions_in_window(
        layout,
        query.tenant.as_deref(),
        query.from_nanos,
        query.to_nanos,
    )?;
    for partition in window {
        let files = partition_files(store, layout, &partition).await?;
        stats.quarantined_files += files.quarantined.len() as u64;
        stats.unaddressable_files += files.unaddressable.len() as u64;
        for key in files.live {
            stats.files += 1;
            let file = FileQuery {
                store: &counting,
                key: key.into(),
                keys,
                predicate: &predicate,
                keys_only: query.limit == 0,
                filters: &query.filters,
            };
            if let Some(rows) = file.run(&mut stats).await? {
                found.push(rows);
            }
        }
    }
    stats.bytes_read = counters.bytes();
    stats.requests = counters.requests();
    let rows = top_rows(found, keys, query.limit)?;
    Ok(QueryResult { rows, stats })
}

/// The partitions of a tenant (of the layout's, when it has none) whose hours overlap
/// `[from, to)`.
fn partitions_in_window(
    layout: &KeyLayout,
    tenant: Option<&str>,
    from: i64,
    to: i64,
) -> Result<Vec<PartitionId>> {
    let first = from.div_euclid(HOUR_NANOS);
    let last = (to - 1).div_euclid(HOUR_NANOS);
    if last - first > 24 * 366 {
        return Err(Error::Config {
            message: "the window spans more than a year of hours; narrow it".into(),
        });
    }
    (first..=last)
        .map(|h| {
            let secs = h * 3600;
            let instant =
                chrono::DateTime::from_timestamp(secs, 0).ok_or_else(|| Error::Config {
                    message: format!("hour {h} is out of range"),
                })?;
            layout.partition_at(tenant, instant)
        })
        .collect()
}

struct FileQuery<'a> {
    store: &'a Arc<dyn ObjectStore>,
    key: Path,
    keys: &'a KeyColumns,
    predicate: &'a WindowPredicate,
    /// Only count: decode the key columns alone.
    keys_only: bool,
    /// The `--where` filters.
    filters: &'a [ColumnFilter],
}

impl FileQuery<'_> {
    /// Prunes, reads and filters one file; returns its matching rows.
    async fn run(&self, stats: &mut QueryStats) -> Result<Option<RecordBatch>> {
        let mut reader = PlannedReader::new(Arc::clone(self.store), self.key.clone());
        let metadata = reader.load_metadata().await?;
        let schema_descr = metadata.file_metadata().schema_descr();
        let time_leaf = time_leaf(schema_descr, self.keys);
        let service_leaf = leaf_column_index(schema_descr, &self.keys.service);
        let num_row_groups = metadata.num_row_groups();
        stats.row_groups_total += num_row_groups as u64;
        // A service column inside a struct (`resource.service.name`) has no top-level leaf:
        // `--service` then filters it as a `--where` filter does (statistics, bloom filters,
        // values), and the window predicate keeps the time alone.
        let nested_service = match (&self.predicate.service, service_leaf) {
            (Some(service), None) => Some(ColumnFilter {
                column: self.keys.service.clone(),
                value: service.clone(),
            }),
            _ => None,
        };
        let time_only;
        let predicate = match nested_service {
            Some(_) => {
                time_only = WindowPredicate {
                    service: None,
                    ..self.predicate.clone()
                };
                &time_only
            }
            None => self.predicate,
        };
        let mut filters = Vec::with_capacity(self.filters.len() + 1);
        for filter in self.filters.iter().chain(&nested_service) {
            match resolve(schema_descr, filter)? {
                Some(resolved) => filters.push(resolved),
                None => {
                    // No such column here: every row holds null, which matches no value.
                    stats.row_groups_pruned += num_row_groups as u64;
                    return Ok(None);
                }
            }
        }

        let arrow = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())
            .map_err(|e| Error::parquet(self.key.to_string(), e))?;
        let mut blooms = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, arrow.clone());
        let mut surviving = Vec::new();
        for (i, rg) in metadata.row_groups().iter().enumerate() {
            if !may_match(rg, time_leaf, service_leaf, predicate)
                || !filters.iter().all(|f| f.stats_may_match(rg))
            {
                continue;
            }
            if let (Some(service), Some(leaf)) = (&predicate.service, service_leaf) {
                let bloom = blooms
                    .get_row_group_column_bloom_filter(i, leaf)
                    .await
                    .map_err(|e| parquet_store_error("get", &self.key, e))?;
                if bloom.is_some_and(|b| !b.check(service.as_str())) {
                    stats.row_groups_pruned_by_bloom += 1;
                    continue;
                }
            }
            let mut ruled_out = false;
            for filter in &filters {
                let bloom = blooms
                    .get_row_group_column_bloom_filter(i, filter.leaf)
                    .await
                    .map_err(|e| parquet_store_error("get", &self.key, e))?;
                if bloom.is_some_and(|b| !filter.bloom_may_match(&b)) {
                    ruled_out = true;
                    break;
                }
            }
            if ruled_out {
                stats.row_groups_pruned_by_bloom += 1;
                continue;
            }
            surviving.push(i);
        }
        // Page indexes can rule out a row group its statistics could not (a boundary group
        // whose time range spans the hour because of a neighbouring service).
        let (mut scanned, mut selection) = (Vec::new(), Vec::new());
        for rg in surviving {
            let rows = row_count(&metadata, rg);
            let mut selectors = Vec::new();
            match row_group_pages(&metadata, rg, time_leaf, service_leaf, predicate) {
                Some(ranges) if ranges.is_empty() => continue,
                Some(ranges) => push_selectors(&mut selectors, &ranges, rows),
                None => push_selectors(&mut selectors, std::slice::from_ref(&(0..rows)), rows),
            }
            selection.extend(selectors.iter().copied());
            scanned.push((rg, Some(RowSelection::from(selectors))));
        }
        stats.row_groups_scanned += scanned.len() as u64;
        stats.row_groups_pruned += (num_row_groups - scanned.len()) as u64;
        if scanned.is_empty() {
            return Ok(None);
        }
        let mask = if self.keys_only {
            // Counting needs only the key columns: fetch no other column chunk.
            let mut roots: Vec<usize> = [self.keys.time.as_str(), self.keys.service.as_str()]
                .into_iter()
                .chain(filters.iter().map(|f| f.root()))
                .filter_map(|name| {
                    column_path::resolve(arrow.schema().fields(), name).map(|p| p[0])
                })
                .collect();
            roots.sort_unstable();
            roots.dedup();
            ProjectionMask::roots(schema_descr, roots)
        } else {
            ProjectionMask::all()
        };
        let leaves = projected_leaves(&metadata, &mask);
        let plan = ReadPlan::from_footer(&metadata, &scanned, &leaves, DEFAULT_MAX_BLOCK_BYTES);
        let reader = PlannedReader::new(Arc::clone(self.store), self.key.clone()).with_plan(plan);
        let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, arrow)
            .with_row_groups(scanned.into_iter().map(|(rg, _)| rg).collect())
            .with_batch_size(8192)
            .with_row_selection(RowSelection::from(selection))
            .with_projection(mask);
        let mut stream = builder
            .build()
            .map_err(|e| Error::parquet(self.key.to_string(), e))?;
        let mut matched = Vec::new();
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| parquet_store_error("get", &self.key, e))?;
            let mask = and_masks(row_mask(&batch, self.keys, predicate)?, &filters, &batch)?;
            let kept = filter_record_batch(&batch, &mask)
                .map_err(|e| Error::arrow("filtering query rows", e))?;
            stats.rows_matched += kept.num_rows() as u64;
            if kept.num_rows() > 0 {
                matched.push(kept);
            }
        }
        match matched.first() {
            None => Ok(None),
            Some(first) => concat(&first.schema(), &matched).map(Some),
        }
    }
}

fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<RecordBatch> {
    concat_batches(schema, batches).map_err(|e| Error::arrow("collecting query rows", e))
}

/// Exact filter of a decoded batch by the predicate.
fn row_mask(
    batch: &RecordBatch,
    keys: &KeyColumns,
    predicate: &WindowPredicate,
) -> Result<BooleanArray> {
    let rows = batch.num_rows();
    let times = match column_named(batch, &keys.time)? {
        Some(t) => Some(
            time_nanos(t.as_ref(), keys.time_unit).map_err(|e| Error::arrow("reading time", e))?,
        ),
        None => None,
    };
    let services = match batch.column_by_name(&keys.service) {
        Some(s) => Some(cast(s, &DataType::Utf8).map_err(|e| Error::arrow("reading service", e))?),
        None => None,
    };
    let mask: BooleanArray = (0..rows)
        .map(|i| {
            let in_window = times.as_ref().is_some_and(|t| {
                t.is_valid(i) && (predicate.from_nanos..predicate.to_nanos).contains(&t.value(i))
            });
            let service_ok = match &predicate.service {
                None => true,
                Some(wanted) => services.as_ref().is_some_and(|s| {
                    let s = s.as_string::<i32>();
                    s.is_valid(i) && s.value(i) == wanted
                }),
            };
            Some(in_window && service_ok)
        })
        .collect();
    Ok(mask)
}

/// The (service, time) key of every row of a matched batch.
fn row_keys(batch: &RecordBatch, keys: &KeyColumns) -> Result<Vec<(Option<String>, i64)>> {
    let services = batch
        .column_by_name(&keys.service)
        .map(|s| cast(s, &DataType::Utf8))
        .transpose()
        .map_err(|e| Error::arrow("reading service", e))?;
    let times = column_named(batch, &keys.time)?
        .map(|t| time_nanos(t.as_ref(), keys.time_unit))
        .transpose()
        .map_err(|e| Error::arrow("reading time", e))?;
    Ok((0..batch.num_rows())
        .map(|i| {
            let service = services.as_ref().and_then(|s| {
                let s = s.as_string::<i32>();
                s.is_valid(i).then(|| s.value(i).to_string())
            });
            let time = times.as_ref().map_or(0, |t| t.value(i));
            (service, time)
        })
        .collect())
}

/// Keeps the first `limit` matching rows in (service, time) order, then file order; rows stay
/// in one batch per file, since files may differ in schema.
fn top_rows(found: Vec<RecordBatch>, keys: &KeyColumns, limit: usize) -> Result<Vec<RecordBatch>> {
    if limit == 0 || found.is_empty() {
        return Ok(Vec::new());
    }
    let mut all: Vec<(Option<String>, i64, usize, usize)> = Vec::new();
    for (b, batch) in found.iter().enumerate() {
        for (i, (service, time)) in row_keys(batch, keys)?.into_iter().enumerate() {
            all.push((service, time, b, i));
        }
    }
    all.sort();
    all.truncate(limit);
    let mut keep: Vec<Vec<u32>> = vec![Vec::new(); found.len()];
    for (_, _, b, i) in &all {
        keep[*b].push(*i as u32);
    }
    found
        .iter()
        .zip(keep)
        .filter(|(_, k)| !k.is_empty())
        .map(|(batch, k)| {
            take_record_batch(batch, &arrow_array::UInt32Array::from(k))
                .map_err(|e| Error::arrow("ordering rows", e))
        })
        .collect()
}

fn row_count(metadata: &ParquetMetaData, rg: usize) -> usize {
    metadata.row_group(rg).num_rows().max(0) as usize
}

/// Appends the selectors of one row group: its `keep` ranges selected, the rest skipped.
fn push_selectors(selectors: &mut Vec<RowSelector>, keep: &[Range<usize>], rows: usize) {
    let mut at = 0;
    for r in keep {
        if r.start > at {
            selectors.push(RowSelector::skip(r.start - at));
        }
        if r.end > r.start {
            selectors.push(RowSelector::select(r.end - r.start));
        }
        at = at.max(r.end);
    }
    if rows > at {
        selectors.push(RowSelector::skip(rows - at));
    }
}

/// Row ranges of one row group whose pages may match, from the page indexes of the time and
/// service columns; `None` when the indexes are missing (read the whole group).
fn row_group_pages(
    metadata: &ParquetMetaData,
    rg: usize,
    time_leaf: Option<TimeLeaf>,
    service_leaf: Option<usize>,
    predicate: &WindowPredicate,
) -> Option<Vec<Range<usize>>> {
    metadata.page_index()?;
    let page_index = metadata.page_index_for_row_group(rg);
    let rows = row_count(metadata, rg);
    let mut keep = Vec::from([Range {
        start: 0,
        end: rows,
    }]);
    let mut used_index = false;
    // Page pruning only for signed integers (in their unit) and nanosecond timestamps; other
    // encodings read whole groups.
    let time_plain = time_leaf.and_then(|time| {
        let descr = metadata.row_group(rg).column(time.index).column_descr();
        match descr.logical_type_ref() {
            Some(parquet::basic::LogicalType::Integer(i)) if !i.is_signed => None,
            Some(parquet::basic::LogicalType::Timestamp(t)) => {
                (t.unit == parquet::basic::TimeUnit::NANOS).then_some((time.index, 1))
            }
            _ => Some((time.index, time.unit.nanos())),
        }
    });
    if let Some((leaf, nanos_per_unit)) = time_plain
        && let (Some(ColumnIndexMetaData::INT64(index)), Some(offsets)) =
            (page_index.column_index(leaf), page_index.offset_index(leaf))
    {
        let nanos = |v: &i64| v.saturating_mul(nanos_per_unit);
        let wanted: Vec<Range<usize>> = page_ranges(offsets.page_locations(), rows)
            .into_iter()
            .enumerate()
            .filter(|(p, _)| match (index.min_value(*p), index.max_value(*p)) {
                (Some(min), Some(max)) => {
                    nanos(max) >= predicate.from_nanos && nanos(min) < predicate.to_nanos
                }
                _ => !index.is_null_page(*p),
            })
            .map(|(_, r)| r)
            .collect();
        keep = intersect(&keep, &wanted);
        used_index = true;
    }
    if let (Some(service), Some(leaf)) = (&predicate.service, service_leaf)
        && let (Some(ColumnIndexMetaData::BYTE_ARRAY(index)), Some(offsets)) =
            (page_index.column_index(leaf), page_index.offset_index(leaf))
    {
        let wanted: Vec<Range<usize>> = page_ranges(offsets.page_locations(), rows)
            .into_iter()
            .enumerate()
            .filter(|(p, _)| match (index.min_value(*p), index.max_value(*p)) {
                (Some(min), Some(max)) => min <= service.as_bytes() && service.as_bytes() <= max,
                _ => !index.is_null_page(*p),
            })
            .map(|(_, r)| r)
            .collect();
        keep = intersect(&keep, &wanted);
        used_index = true;
    }
    used_index.then_some(keep)
}

fn page_ranges(
    pages: &[parquet::file::page_index::offset_index::PageLocation],
    rows: usize,
) -> Vec<Range<usize>> {
    pages
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let start = p.first_row_index.max(0) as usize;
            let end = pages
                .get(i + 1)
                .map_or(rows, |next| next.first_row_index.max(0) as usize);
            start..end.max(start)
        })
        .collect()
}

fn intersect(a: &[Range<usize>], b: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let start = x.start.max(y.start);
            let end = x.end.min(y.end);
            if start < end {
                out.push(start..end);
            }
        }
    }
    out.sort_by_key(|r| r.start);
    out
}

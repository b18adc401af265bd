//! Input files of one compaction: staged locally, checked against the partition, read in batches.

pub mod check_pool;
pub mod column_path;
pub mod page_check;
pub mod schema;
pub mod type_union;

use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_cast::cast;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use object_store::path::Path;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::file::metadata::ParquetMetaData;

use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::input::column_path::{column_named, resolve};
use crate::input::page_check::{PageFacts, check_footer_size, check_pages, check_row_counts};
use crate::input::schema::{check_key_columns, map_with_child_types};
use crate::input::type_union::time_nanos;
use crate::options::{IntegerTimeUnit, KeyColumns, SORT_KEY_METADATA};
use crate::partition::PartitionId;
use crate::two_threads::on_two_threads;

/// An input file with a local copy the engine can read page by page.
#[derive(Debug, Clone)]
pub struct StagedInput {
    /// Object key, relative to the store root.
    pub key: Path,
    /// Base name (the tie-break orders ingest files by it).
    pub name: String,
    /// Object size in bytes.
    pub size: u64,
    /// Local file holding the object's bytes.
    pub local: PathBuf,
    /// A previous compacted output of this partition.
    pub is_compacted: bool,
}

/// What checking an input found out.
#[derive(Debug, Clone)]
pub struct CheckedInput {
    /// The staged file.
    pub staged: StagedInput,
    /// Its Arrow schema.
    pub schema: SchemaRef,
    /// Rows in the file.
    pub rows: u64,
    /// Sum of the row groups' uncompressed sizes.
    pub uncompressed_bytes: u64,
    /// Largest uncompressed bytes per row over its row groups.
    pub row_bytes_estimate: u64,
    /// What a reader of the file holds besides the rows it returns: one decompressed page
    /// and one dictionary per column (see [`READER_BYTES_PER_COLUMN`]).
    pub reader_bytes_estimate: u64,
    /// The sort order it declares in our metadata, if any.
    pub declared_sort_key: Option<String>,
    /// The row groups to read (`None`: all). A range of a fanned-out merge reads only the row
    /// groups of a run that can hold its keys, and `rows` counts the rows of the range.
    pub row_groups: Option<Vec<usize>>,
    /// The levels each row group's column chunks hold, as their data pages declare them, by
    /// row group and leaf column (empty: not walked), which [`SizedBatches`] checks the rows
    /// of lists and maps against.
    pub page_levels: Vec<Vec<u64>>,
}

fn open(
    staged: &StagedInput,
) -> std::result::Result<ParquetRecordBatchReaderBuilder<File>, String> {
    let file = File::open(&staged.local).map_err(|e| format!("cannot open local copy: {e}"))?;
    ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| format!("not a readable Parquet file: {e}"))
}

/// A reader holds at most this much per column chunk: a decompressed data page and a
/// dictionary at the usual one-megabyte limits of Parquet writers.
pub const READER_BYTES_PER_COLUMN: u64 = 2 << 20;

/// The most one page of an input may decode to under budget B (see
/// [`BudgetPlan::page_cap_bytes`](crate::budget::BudgetPlan::page_cap_bytes)).
pub fn page_cap_bytes(budget_bytes: u64) -> u64 {
    Budget::new(budget_bytes).shares().page_cap_bytes
}

/// The most that reading one row group of an input with `leaves` leaf columns may hold at once
/// in pages and dictionaries under budget B (see
/// [`BudgetPlan::reader_cap_bytes`](crate::budget::BudgetPlan::reader_cap_bytes)). Measured: a
/// file of 300 int64 columns with dictionaries of 400 KB each (132 MB of pages and dictionaries
/// a row group) compacts in a peak RSS of 207 MiB at a 64 MiB budget, where 149 MiB are
/// allowed.
pub fn reader_cap_bytes(budget_bytes: u64, leaves: u64) -> u64 {
    Budget::new(budget_bytes).shares().reader_cap_bytes(leaves)
}

/// Refuses an input whose reader would hold more than [`reader_cap_bytes`] at once: a
/// reader decodes every column of a row group together, holding each column chunk's
/// dictionary and current page, so a wide file whose writer left large dictionaries (a
/// writer's default limit is one megabyte a column) cannot be read inside the bound, however
/// few rows are decoded at a time.
fn check_held_pages(
    metadata: &ParquetMetaData,
    pages: &PageFacts,
    budget_bytes: u64,
) -> std::result::Result<(), String> {
    let leaves = metadata.file_metadata().schema_descr().num_columns() as u64;
    let cap = reader_cap_bytes(budget_bytes, leaves);
    for (index, chunks) in pages.row_groups.iter().enumerate() {
        let held: u64 = (chunks.iter())
            .map(|p| p.largest_page_bytes.saturating_add(p.dictionary_bytes))
            .fold(0, u64::saturating_add);
        if held > cap {
            return Err(format!(
                "reading row group {index} holds {held} bytes of pages and dictionaries at once (the largest page and the dictionary of each of its {leaves} leaf columns), more than the {cap} the memory budget leaves a reader of that many columns"
            ));
        }
    }
    Ok(())
}

/// The largest, over row groups, of what streaming one row group holds in pages and
/// dictionaries: per column chunk its uncompressed size, at most [`READER_BYTES_PER_COLUMN`]
/// unless its largest page and dictionary together take more.
fn reader_bytes(metadata: &ParquetMetaData, pages: &PageFacts) -> u64 {
    metadata
        .row_groups()
        .iter()
        .zip(&pages.row_groups)
        .map(|(rg, chunks)| {
            rg.columns()
                .iter()
                .zip(chunks)
                .map(|(c, p)| {
                    let bytes = p.bounded_bytes(c.uncompressed_size());
                    bytes
                        .min(READER_BYTES_PER_COLUMN)
                        .max(p.largest_page_bytes + p.dictionary_bytes)
                })
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// Decoded bytes of the file and the largest per row, from the footer's figures bounded by
/// what the pages declare.
fn size_facts(metadata: &ParquetMetaData, pages: &PageFacts) -> (u64, u64) {
    let bounded = (metadata.row_groups().iter().zip(&pages.row_groups)).map(|(rg, chunks)| {
        (rg.columns().iter().zip(chunks))
            .map(|(c, p)| p.bounded_bytes(c.uncompressed_size()))
            .sum::<u64>()
    });
    row_group_sizes(metadata, bounded)
}

/// Decoded bytes of the file and the largest per row, given each row group's column chunks'
/// decoded bytes (`chunk_bytes`, in footer order): each row group counts the smaller of
/// that sum and the footer's total.
fn row_group_sizes(
    metadata: &ParquetMetaData,
    chunk_bytes: impl Iterator<Item = u64>,
) -> (u64, u64) {
    let mut total = 0u64;
    let mut per_row = 0u64;
    for (rg, bounded) in metadata.row_groups().iter().zip(chunk_bytes) {
        let bytes = (rg.total_byte_size().max(0) as u64).min(bounded);
        total += bytes;
        if rg.num_rows() > 0 {
            per_row = per_row.max(bytes.div_ceil(rg.num_rows() as u64));
        }
    }
    (total, per_row.max(1))
}

/// What an input's footer alone declares of the sizes its check computes: the same figures
/// as the check's when its pages agree with the footer, except the reader's, which counts no
/// page or dictionary above [`READER_BYTES_PER_COLUMN`] (only the pages tell those).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeclaredSize {
    /// [`CheckedInput::uncompressed_bytes`] as the footer declares it.
    pub uncompressed_bytes: u64,
    /// [`CheckedInput::row_bytes_estimate`] as the footer declares it.
    pub row_bytes_estimate: u64,
    /// [`CheckedInput::reader_bytes_estimate`] as the footer declares it.
    pub reader_bytes_estimate: u64,
}

/// The sizes `metadata` declares ([`DeclaredSize`]).
pub fn declared_size(metadata: &ParquetMetaData) -> DeclaredSize {
    let claimed = |c: &parquet::file::metadata::ColumnChunkMetaData| {
        u64::try_from(c.uncompressed_size()).unwrap_or(0)
    };
    let chunk_bytes =
        (metadata.row_groups().iter()).map(|rg| rg.columns().iter().map(claimed).sum::<u64>());
    let (uncompressed_bytes, row_bytes_estimate) = row_group_sizes(metadata, chunk_bytes);
    let reader_bytes_estimate = (metadata.row_groups().iter())
        .map(|rg| {
            (rg.columns().iter())
                .map(|c| claimed(c).min(READER_BYTES_PER_COLUMN))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    DeclaredSize {
        uncompressed_bytes,
        row_bytes_estimate,
        reader_bytes_estimate,
    }
}

/// Stack of each thread that checks inputs (reserved, not resident until used). Footers are
/// parsed recursively by the reader; a hostile one nesting thousands of levels deep must meet
/// a stack deep enough to be refused (the check caps nesting for the rest).
pub const CHECK_STACK_BYTES: usize = 256 << 20;

/// A staged input and the verdict of its check: `Err` holds the reason it is a bad input.
pub type CheckVerdict = (StagedInput, std::result::Result<CheckedInput, String>);

/// Checks every staged input ([`check_input`] under budget B, `budget_bytes`; a reader panic
/// counts as a bad input), on two threads of [`CHECK_STACK_BYTES`] when `parallel`, the
/// largest files first;
/// each input's size is read from its local copy. The verdicts come back in the inputs' order,
/// so which thread checked a file changes nothing. An `Err` means no thread could be started.
pub fn check_inputs(
    staged: Vec<StagedInput>,
    partition: &PartitionId,
    keys: &KeyColumns,
    budget_bytes: u64,
    parallel: bool,
) -> Result<Vec<CheckVerdict>> {
    let staged: Vec<StagedInput> = staged.into_iter().map(sized_by_local_copy).collect();
    let weights: Vec<usize> = staged.iter().map(|s| s.size as usize).collect();
    let check = move || {
        on_two_threads(
            staged,
            &weights,
            parallel,
            Some(CHECK_STACK_BYTES),
            |s: StagedInput| Ok(check_guarded(s, partition, keys, budget_bytes)),
        )
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("input-check".into())
            .stack_size(CHECK_STACK_BYTES)
            .spawn_scoped(scope, check)
            .map_err(|e| Error::invariant(format!("input check thread: {e}")))?
            .join()
            .map_err(|_| Error::invariant("input check thread panicked"))?
    })
}

/// `staged` with the size of its local copy (0 when it cannot be read).
pub(crate) fn sized_by_local_copy(staged: StagedInput) -> StagedInput {
    let size = std::fs::metadata(&staged.local).map_or(0, |m| m.len());
    StagedInput { size, ..staged }
}

/// [`check_input`] with a reader panic counted as a bad input, and the input with its verdict.
pub(crate) fn check_guarded(
    staged: StagedInput,
    partition: &PartitionId,
    keys: &KeyColumns,
    budget_bytes: u64,
) -> CheckVerdict {
    let verdict = catch_reader_panic(|| check_input(staged.clone(), partition, keys, budget_bytes))
        .and_then(|checked| checked);
    (staged, verdict)
}

/// Checks one input against its partition: readable footer, key columns present and typed,
/// every time inside the hour and every tenant value equal to the partition's. A file whose
/// footer, chunks and pages all agree that it holds no row passes whatever its columns (it
/// holds nothing to lose and is consumed with the other inputs). `Err` holds the reason the
/// file is a bad input.
///
/// Before any page is decoded, the footer's size and every page header are checked (see
/// [`crate::input::page_check`]): no page may decode to more than [`page_cap_bytes`] of budget
/// B (`budget_bytes`) nor inflate beyond what it declares, no row group may hold more pages
/// and dictionaries at once than [`reader_cap_bytes`], and each row group's row count must
/// agree with the values its pages declare ([`check_row_counts`]).
pub fn check_input(
    staged: StagedInput,
    partition: &PartitionId,
    keys: &KeyColumns,
    budget_bytes: u64,
) -> std::result::Result<CheckedInput, String> {
    if staged.size == 0 {
        return Err("empty object (0 bytes)".into());
    }
    let mut file = File::open(&staged.local).map_err(|e| format!("cannot open local copy: {e}"))?;
    check_footer_size(&mut file)?;
    let builder = open(&staged)?;
    let pages = check_pages(&file, builder.metadata(), page_cap_bytes(budget_bytes))?;
    check_held_pages(builder.metadata(), &pages, budget_bytes)?;
    check_row_counts(builder.metadata(), &pages)?;
    let schema = builder.schema().clone();
    let metadata = builder.metadata().clone();
    let rows: u64 = metadata
        .row_groups()
        .iter()
        .map(|rg| rg.num_rows().max(0) as u64)
        .sum();
    if rows == 0 && metadata.file_metadata().num_rows() <= 0 {
        return Ok(CheckedInput {
            staged,
            schema,
            rows: 0,
            uncompressed_bytes: 0,
            row_bytes_estimate: 1,
            reader_bytes_estimate: 0,
            declared_sort_key: None,
            row_groups: None,
            page_levels: Vec::new(),
        });
    }
    if metadata.file_metadata().num_rows() != rows as i64 {
        return Err(format!(
            "the footer counts {} rows but its row groups hold {rows}",
            metadata.file_metadata().num_rows()
        ));
    }
    check_key_columns(&schema, keys)?;
    let declared_sort_key = metadata
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == SORT_KEY_METADATA))
        .and_then(|e| e.value.clone());

    // Read only the time and tenant columns (the time's top-level column when it is inside
    // a struct) to validate every row.
    let time_root = resolve(schema.fields(), &keys.time).map(|path| path[0]);
    let wanted: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|&(i, f)| Some(i) == time_root || f.name() == &keys.tenant)
        .map(|(i, _)| i)
        .collect();
    let mask = ProjectionMask::roots(builder.parquet_schema(), wanted);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(64 * 1024)
        .build()
        .map_err(|e| format!("not a readable Parquet file: {e}"))?;
    let (start, end) = partition.time_range_nanos();
    let mut row_base = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| format!("unreadable at row {row_base}: {e}"))?;
        validate_rows(&batch, keys, partition, start, end, row_base)?;
        row_base += batch.num_rows() as u64;
    }
    if row_base != rows {
        return Err(format!(
            "the footer counts {rows} rows but {row_base} could be read"
        ));
    }
    let (uncompressed_bytes, row_bytes_estimate) = size_facts(&metadata, &pages);
    Ok(CheckedInput {
        staged,
        schema,
        rows,
        uncompressed_bytes,
        row_bytes_estimate,
        reader_bytes_estimate: reader_bytes(&metadata, &pages),
        declared_sort_key,
        row_groups: None,
        page_levels: (pages.row_groups.iter())
            .map(|chunks| chunks.iter().map(|c| c.levels).collect())
            .collect(),
    })
}

/// Runs `read` (reading one input) and turns a panic inside it into the reason the input is
/// bad: a reader that panics on a hostile file must not take the job down with it.
pub fn catch_reader_panic<T>(read: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).map_err(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|m| (*m).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        format!("the Parquet reader failed on this file (panic: {message})")
    })
}

fn validate_rows(
    batch: &RecordBatch,
    keys: &KeyColumns,
    partition: &PartitionId,
    start: i64,
    end: i64,
    row_base: u64,
) -> std::result::Result<(), String> {
    let time = column_named(batch, &keys.time).map_err(|e| format!("{}: {e}", keys.time))?;
    if let Some(time) = &time {
        let values = time_nanos(time.as_ref(), keys.time_unit).map_err(|e| {
            let hint = (0..time.len())
                .find(|&i| time.is_valid(i))
                .and_then(|i| unit_that_fits(time, i, keys.time_unit, start..end))
                .map(schema::another_unit_hint)
                .unwrap_or_default();
            format!(
                "{}: {e}, outside the partition's hour {} (UTC){hint}",
                keys.time,
                partition.hour_label()
            )
        })?;
        for i in 0..values.len() {
            if time.is_null(i) {
                return Err(format!(
                    "row {}: {} is null",
                    row_base + i as u64,
                    keys.time
                ));
            }
            let t = values.value(i);
            if values.is_null(i) || t < start || t >= end {
                return Err(format!(
                    "row {}: {} = {} is outside the partition's hour {} (UTC){}",
                    row_base + i as u64,
                    keys.time,
                    describe_time(time, i, t),
                    partition.hour_label(),
                    unit_that_fits(time, i, keys.time_unit, start..end)
                        .map(schema::another_unit_hint)
                        .unwrap_or_default()
                ));
            }
        }
    }
    if let (Some(tenant), Some(expected)) = (batch.column_by_name(&keys.tenant), partition.tenant())
    {
        let as_utf8 = cast(tenant, &DataType::Utf8).map_err(|e| format!("tenant column: {e}"))?;
        let values = as_utf8.as_string::<i32>();
        for i in 0..values.len() {
            if values.is_valid(i) && values.value(i) != expected {
                return Err(format!(
                    "row {}: {} = {:?} does not match the partition's tenant {:?}",
                    row_base + i as u64,
                    keys.tenant,
                    values.value(i),
                    expected
                ));
            }
        }
    }
    Ok(())
}

/// For an integer time column, the unit other than `configured` that puts row `i` in `hour`
/// (Unix nanoseconds), if one does: a unit setting's mistake rather than a bad file.
fn unit_that_fits(
    time: &dyn Array,
    i: usize,
    configured: IntegerTimeUnit,
    hour: std::ops::Range<i64>,
) -> Option<IntegerTimeUnit> {
    let value = match time.data_type() {
        DataType::Int64 => time
            .as_primitive::<arrow_array::types::Int64Type>()
            .value(i),
        DataType::UInt64 => i64::try_from(
            time.as_primitive::<arrow_array::types::UInt64Type>()
                .value(i),
        )
        .ok()?,
        _ => return None,
    };
    (IntegerTimeUnit::ALL.into_iter())
        .filter(|&unit| unit != configured)
        .find(|unit| {
            value
                .checked_mul(unit.nanos())
                .is_some_and(|nanos| hour.contains(&nanos))
        })
}

/// Row `i` of a time column as its type shows it, else (a zone named without the time zone
/// database, `UTC` say) as `nanos` nanoseconds since the epoch.
fn describe_time(time: &dyn Array, i: usize, nanos: i64) -> String {
    arrow_cast::display::ArrayFormatter::try_new(time, &Default::default())
        .ok()
        .and_then(|f| f.value(i).try_to_string().ok())
        .unwrap_or_else(|| {
            let at = chrono::DateTime::from_timestamp_nanos(nanos);
            format!("{} ({nanos} ns since the epoch)", at.to_rfc3339())
        })
}

/// Rows of the first, measuring batch of an input.
const PROBE_ROWS: usize = 64;
/// Most rows in one decoded batch.
const MAX_BATCH_ROWS: usize = 8192;
/// Reopens allowed per input: each one skips the rows already read, so a file whose row
/// width keeps swinging must not make reading quadratic.
const MAX_RESIZES: u32 = 8;

/// Streams the rows of a checked input page by page, in batches of about `target_bytes`
/// decoded bytes. Footer sizes cannot say how wide a row decodes (dictionary pages of long
/// repeated strings encode to almost nothing), so the width is measured on the batches
/// themselves: a small first batch sets the batch size, and the reader is reopened at the
/// current row whenever a batch comes out far off its target. Each reopen decompresses the
/// current page of every column again, so an input of a stream starts from the width its
/// predecessor measured (see [`RowWidth`]) instead of probing.
///
/// Each row group is read by a reader of its own, and must decode to the rows its footer
/// declares. One reader over several row groups chains each column's chunks: a corrupt page
/// that decodes to more or fewer records than its chunk holds would shift that column against
/// the others into the next row group, which is intact, with no error. Bounded by its row
/// group, the column comes out of step with the others and the reader fails instead.
pub struct SizedBatches {
    local: PathBuf,
    key: String,
    /// The row groups to read, in order, each with the rows its footer declares.
    row_groups: Vec<(usize, usize)>,
    /// Position in `row_groups` of the one being read.
    group: usize,
    /// The file's metadata, read once (with the dictionaries' hint).
    metadata: Option<ArrowReaderMetadata>,
    /// Strings read as Arrow dictionaries (see `read_as_dictionaries`).
    dictionaries: DictionaryColumns,
    target_bytes: u64,
    /// Rows read from the row group being read.
    rows_read: usize,
    batch_rows: usize,
    resizes: u32,
    reader: Option<ParquetRecordBatchReader>,
    /// The input's schema and encoded row width, and the width of its last batch.
    width: RowWidth,
    /// The flat top-level columns whose nulls are counted, each with its nulls read so far
    /// from the current row group (see [`NullCount`]).
    null_counts: Vec<NullCount>,
    /// The columns holding lists or maps, each with the levels read so far from the current
    /// row group (see [`LevelCount`]).
    level_counts: Vec<LevelCount>,
    /// The input's [`CheckedInput::page_levels`].
    page_levels: Vec<Vec<u64>>,
}

/// A top-level column holding lists or maps, whose rows as read must re-encode to the levels
/// its pages hold. A damaged definition level inside a list (an element's turned into an empty
/// list's) makes the Parquet crate drop the element without an error, where pyarrow refuses
/// the file ("list offsets larger than values array"); the levels the decoded rows stand for
/// then fall short of what the pages declare.
#[derive(Debug, Clone)]
struct LevelCount {
    /// Position of the column in the file's schema (and in each batch).
    field: usize,
    /// Its leaves in the Parquet schema, in order.
    leaves: Range<usize>,
    /// Levels of each leaf read so far from the current row group.
    levels: Vec<u64>,
    /// Its rows could be counted ([`count_levels`] knows their type): the column is left
    /// unchecked once they cannot.
    countable: bool,
}

/// A flat top-level column (one leaf, not repeated) whose nulls read from a row group must be
/// the nulls its statistics declare, when they declare them. The Parquet crate takes
/// definition levels as they come: a damaged one (flipped, or out of range, where pyarrow
/// refuses the file as "malformed levels") can turn a value into a null, and the page's later
/// values then land one row early, with no error. Counting the nulls shows the damage
/// instead of compacting rows whose values moved.
#[derive(Debug, Clone)]
struct NullCount {
    /// Position of the column in the file's schema (and in each batch).
    field: usize,
    /// Its leaf in the Parquet schema.
    leaf: usize,
    nulls: u64,
}

/// The decoded width of the rows of one input, measured on its last batch, and what its
/// footer said of them: the next input of a stream with the same schema and no wider
/// encoded rows starts at that width instead of probing its first rows.
#[derive(Debug, Clone, Default)]
pub struct RowWidth {
    schema: Option<SchemaRef>,
    encoded_row_bytes: u64,
    decoded_row_bytes: Option<u64>,
}

impl RowWidth {
    /// Rows of the first batch of `input` for batches of `target_bytes`: from this width
    /// when it was measured on an input with the same schema, scaled up when `input`'s
    /// encoded rows are wider; else a small probing batch.
    fn first_batch_rows(&self, input: &CheckedInput, target_bytes: u64) -> usize {
        let (Some(schema), Some(decoded)) = (&self.schema, self.decoded_row_bytes) else {
            return PROBE_ROWS;
        };
        if schema != &input.schema {
            return PROBE_ROWS;
        }
        let growth = input
            .row_bytes_estimate
            .div_ceil(self.encoded_row_bytes.max(1))
            .max(1);
        batch_rows(target_bytes, decoded.saturating_mul(growth))
    }
}

/// Rows of a batch of `target_bytes` for rows of `row_bytes` decoded bytes.
fn batch_rows(target_bytes: u64, row_bytes: u64) -> usize {
    (target_bytes / row_bytes.max(1)).clamp(1, MAX_BATCH_ROWS as u64) as usize
}

impl SizedBatches {
    /// Opens a checked input for reading.
    pub fn open(input: &CheckedInput, target_bytes: u64) -> Result<Self> {
        Self::open_with_dictionaries(
            input,
            target_bytes,
            &DictionaryColumns::default(),
            &RowWidth::default(),
        )
    }

    /// Opens a checked input for reading, with `dictionaries` read as dictionaries: a
    /// dictionary-encoded column chunk then comes with its dictionary and keys instead of
    /// one string per row. `previous` is the [`SizedBatches::width`] of the input read
    /// before this one, if any.
    pub fn open_with_dictionaries(
        input: &CheckedInput,
        target_bytes: u64,
        dictionaries: &DictionaryColumns,
        previous: &RowWidth,
    ) -> Result<Self> {
        let target_bytes = target_bytes.max(1);
        let mut batches = Self {
            local: input.staged.local.clone(),
            key: input.staged.key.to_string(),
            row_groups: Vec::new(),
            group: 0,
            metadata: None,
            dictionaries: dictionaries.clone(),
            target_bytes,
            rows_read: 0,
            batch_rows: previous.first_batch_rows(input, target_bytes),
            resizes: 0,
            reader: None,
            width: RowWidth {
                schema: Some(Arc::clone(&input.schema)),
                encoded_row_bytes: input.row_bytes_estimate,
                decoded_row_bytes: None,
            },
            null_counts: Vec::new(),
            level_counts: Vec::new(),
            page_levels: input.page_levels.clone(),
        };
        batches.null_counts = null_counted_columns(batches.metadata()?);
        if !batches.page_levels.is_empty() {
            batches.level_counts = level_counted_columns(batches.metadata()?);
        }
        let declared: Vec<usize> = (batches.metadata()?.metadata().row_groups().iter())
            .map(|g| usize::try_from(g.num_rows()).unwrap_or(0))
            .collect();
        let chosen = match &input.row_groups {
            Some(chosen) => chosen.clone(),
            None => (0..declared.len()).collect(),
        };
        for row_group in chosen {
            let rows = declared.get(row_group).copied().ok_or_else(|| {
                Error::invariant(format!("{}: no row group {row_group}", input.staged.key))
            })?;
            if rows > 0 {
                batches.row_groups.push((row_group, rows));
            }
        }
        batches.reopen()?;
        Ok(batches)
    }

    /// The width of this input's rows as measured so far, for the next input of a stream.
    pub fn width(&self) -> &RowWidth {
        &self.width
    }

    /// From the next batch on, reads `dictionaries` as dictionaries (and no others).
    pub fn read_as_dictionaries(&mut self, dictionaries: &DictionaryColumns) -> Result<()> {
        if &self.dictionaries != dictionaries {
            self.dictionaries = dictionaries.clone();
            self.metadata = None;
            self.reopen()?;
        }
        Ok(())
    }

    /// The file's metadata, read on first use and again when the dictionaries change.
    fn metadata(&mut self) -> Result<&ArrowReaderMetadata> {
        if self.metadata.is_none() {
            let file = File::open(&self.local).map_err(|e| Error::scratch(&self.local, e))?;
            let parquet = |e| Error::parquet(self.key.clone(), e);
            let mut metadata =
                ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(parquet)?;
            if let Some(hint) = dictionary_hint(metadata.schema(), &self.dictionaries) {
                let options = ArrowReaderOptions::new().with_schema(hint);
                metadata = ArrowReaderMetadata::try_new(Arc::clone(metadata.metadata()), options)
                    .map_err(parquet)?;
            }
            self.metadata = Some(metadata);
        }
        self.metadata
            .as_ref()
            .ok_or_else(|| Error::invariant("reader metadata was not kept"))
    }

    /// Opens a reader of the current row group at the current row (none past the last).
    fn reopen(&mut self) -> Result<()> {
        self.reader = None;
        let Some(&(row_group, _)) = self.row_groups.get(self.group) else {
            return Ok(());
        };
        let metadata = self.metadata()?.clone();
        let file = File::open(&self.local).map_err(|e| Error::scratch(&self.local, e))?;
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, metadata)
            .with_row_groups(vec![row_group])
            .with_batch_size(self.batch_rows)
            .with_offset(self.rows_read)
            .build()
            .map_err(|e| Error::parquet(self.key.clone(), e))?;
        self.reader = Some(reader);
        Ok(())
    }

    /// The current row group is read out: checks it gave the rows its footer declares and
    /// moves to the next.
    fn next_group(&mut self) -> Result<()> {
        if let Some(&(row_group, declared)) = self.row_groups.get(self.group) {
            // The file's fault, not ours: reported like any other decoding error of it.
            let key = self.key.clone();
            let damaged = move |reason: String| {
                Error::parquet(key, parquet::errors::ParquetError::General(reason))
            };
            if self.rows_read != declared {
                return Err(damaged(format!(
                    "row group {row_group} decodes to {} rows but its footer declares {declared}",
                    self.rows_read
                )));
            }
            let metadata = self.metadata()?.clone();
            let chunks = (metadata.metadata().row_groups().get(row_group))
                .map_or(&[][..], |group| group.columns());
            let name = |field: usize| {
                (metadata.schema().fields().get(field)).map_or("?", |field| field.name().as_str())
            };
            for counted in &self.null_counts {
                let declared = (chunks.get(counted.leaf))
                    .and_then(|chunk| chunk.statistics())
                    .and_then(|statistics| statistics.null_count_opt());
                if let Some(declared) = declared
                    && declared != counted.nulls
                {
                    return Err(damaged(format!(
                        "column {} of row group {row_group} decodes to {} nulls but its \
                         statistics declare {declared}: its definition levels or its statistics \
                         are damaged",
                        name(counted.field),
                        counted.nulls
                    )));
                }
            }
            let declared = self.page_levels.get(row_group);
            for counted in self.level_counts.iter().filter(|c| c.countable) {
                let leaves = counted.leaves.clone().zip(&counted.levels);
                for (leaf, &read) in leaves {
                    let Some(&declared) = declared.and_then(|levels| levels.get(leaf)) else {
                        continue;
                    };
                    if read != declared {
                        return Err(damaged(format!(
                            "column {} of row group {row_group} decodes to rows of {read} \
                             levels but its pages hold {declared}: its levels or its page headers \
                             are damaged",
                            name(counted.field)
                        )));
                    }
                }
            }
        }
        self.group += 1;
        self.rows_read = 0;
        for counted in &mut self.null_counts {
            counted.nulls = 0;
        }
        for counted in &mut self.level_counts {
            counted.levels.iter_mut().for_each(|levels| *levels = 0);
        }
        self.reopen()
    }

    fn resize(&mut self, batch: &RecordBatch) -> Result<()> {
        let rows = batch.num_rows().max(1) as u64;
        let bytes = decoded_bytes(batch);
        let per_row = (bytes / rows).max(1);
        self.width.decoded_row_bytes = Some(per_row);
        let ideal = batch_rows(self.target_bytes, per_row);
        let far_off = ideal > self.batch_rows * 2 || ideal * 2 < self.batch_rows;
        if far_off && self.resizes < MAX_RESIZES {
            self.resizes += 1;
            self.batch_rows = ideal;
            self.reopen()?;
        }
        Ok(())
    }
}

impl Iterator for SizedBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = loop {
            match self.reader.as_mut()?.next() {
                Some(Ok(batch)) => break batch,
                Some(Err(e)) => {
                    self.reader = None;
                    return Some(Err(Error::arrow(format!("decoding {}", self.key), e)));
                }
                None => {
                    if let Err(e) = self.next_group() {
                        self.reader = None;
                        return Some(Err(e));
                    }
                }
            }
        };
        self.rows_read += batch.num_rows();
        for counted in &mut self.null_counts {
            if let Some(column) = batch.columns().get(counted.field) {
                counted.nulls += column.logical_null_count() as u64;
            }
        }
        let mut levels = Vec::new();
        for counted in &mut self.level_counts {
            let Some(column) = batch.columns().get(counted.field) else {
                continue;
            };
            levels.clear();
            let rows = 0..column.len();
            counted.countable &=
                count_levels(column.as_ref(), std::slice::from_ref(&rows), &mut levels)
                    && levels.len() == counted.levels.len();
            for (sum, read) in counted.levels.iter_mut().zip(&levels) {
                *sum += read;
            }
        }
        if let Err(e) = self.resize(&batch) {
            self.reader = None;
            return Some(Err(e));
        }
        Some(Ok(batch))
    }
}

/// The flat top-level columns of a file read with `reader` (a root that is its own single
/// leaf, not repeated), whose nulls are counted against their statistics.
fn null_counted_columns(reader: &ArrowReaderMetadata) -> Vec<NullCount> {
    let schema = reader.metadata().file_metadata().schema_descr();
    if reader.schema().fields().len() != schema.root_schema().get_fields().len() {
        return Vec::new();
    }
    (0..schema.num_columns())
        .filter(|&leaf| {
            let column = schema.column(leaf);
            column.path().parts().len() == 1 && column.max_rep_level() == 0
        })
        .map(|leaf| NullCount {
            field: schema.get_column_root_idx(leaf),
            leaf,
            nulls: 0,
        })
        .collect()
}

/// The top-level columns of a file read with `reader` that hold a repeated leaf (a list or a
/// map somewhere inside), whose levels are counted against their pages'.
fn level_counted_columns(reader: &ArrowReaderMetadata) -> Vec<LevelCount> {
    let schema = reader.metadata().file_metadata().schema_descr();
    let roots = schema.root_schema().get_fields().len();
    if reader.schema().fields().len() != roots {
        return Vec::new();
    }
    let mut counted: Vec<LevelCount> = Vec::new();
    for leaf in 0..schema.num_columns() {
        let root = schema.get_column_root_idx(leaf);
        match counted.last_mut() {
            Some(last) if last.field == root => last.leaves.end = leaf + 1,
            _ => counted.push(LevelCount {
                field: root,
                leaves: leaf..leaf + 1,
                levels: Vec::new(),
                countable: true,
            }),
        }
    }
    counted.retain(|c| {
        c.leaves
            .clone()
            .any(|l| schema.column(l).max_rep_level() > 0)
    });
    for c in &mut counted {
        c.levels = vec![0; c.leaves.len()];
    }
    counted
}

/// Adds to `out`, leaf by leaf in schema order, the levels that the slots `ranges` of `array`
/// encode to in Parquet: one for a value, a null, a null struct or an empty or null list or
/// map, and those of its elements for any other list or map. `false` for a type it does not
/// know (nothing is counted then).
fn count_levels(array: &dyn Array, ranges: &[Range<usize>], out: &mut Vec<u64>) -> bool {
    use arrow_array::{OffsetSizeTrait, StructArray};
    use arrow_buffer::NullBuffer;
    /// The elements of a list's `slot` (empty for a null one), `None` past its end.
    fn list_span<O: OffsetSizeTrait>(
        offsets: &[O],
        nulls: Option<&NullBuffer>,
        slot: usize,
    ) -> Option<Range<usize>> {
        let (start, end) = (
            offsets.get(slot)?.as_usize(),
            offsets.get(slot + 1)?.as_usize(),
        );
        Some(match nulls.is_some_and(|n| n.is_null(slot)) {
            true => start..start,
            false => start..end.max(start),
        })
    }
    /// The elements of a list view's `slot` (empty for a null one), `None` past its end.
    fn view_span<O: OffsetSizeTrait>(
        offsets: &[O],
        sizes: &[O],
        nulls: Option<&NullBuffer>,
        slot: usize,
    ) -> Option<Range<usize>> {
        let (start, size) = (offsets.get(slot)?.as_usize(), sizes.get(slot)?.as_usize());
        let size = if nulls.is_some_and(|n| n.is_null(slot)) {
            0
        } else {
            size
        };
        Some(start..start.checked_add(size)?)
    }
    let spans = |span: &dyn Fn(usize) -> Option<Range<usize>>| {
        // The slots of `ranges` whose span is empty (one level each), and the spans of the
        // others, adjacent ones joined.
        let mut short = 0u64;
        let mut children: Vec<Range<usize>> = Vec::new();
        for slot in ranges.iter().flat_map(Clone::clone) {
            let span = span(slot)?;
            if span.is_empty() {
                short += 1;
                continue;
            }
            match children.last_mut() {
                Some(last) if last.end == span.start => last.end = span.end,
                _ => children.push(span),
            }
        }
        Some((short, children))
    };
    let (spanned, children): (_, Vec<&dyn Array>) = match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            let span = |slot| list_span(list.value_offsets(), list.nulls(), slot);
            (spans(&span), vec![list.values().as_ref()])
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            let span = |slot| list_span(list.value_offsets(), list.nulls(), slot);
            (spans(&span), vec![list.values().as_ref()])
        }
        DataType::Map(_, _) => {
            let map = array.as_map();
            let span = |slot| list_span(map.value_offsets(), map.nulls(), slot);
            (spans(&span), vec![map.entries() as &dyn Array])
        }
        DataType::ListView(_) => {
            let list = array.as_list_view::<i32>();
            let (offsets, sizes) = (list.value_offsets(), list.value_sizes());
            let span = |slot| view_span(offsets, sizes, list.nulls(), slot);
            (spans(&span), vec![list.values().as_ref()])
        }
        DataType::LargeListView(_) => {
            let list = array.as_list_view::<i64>();
            let (offsets, sizes) = (list.value_offsets(), list.value_sizes());
            let span = |slot| view_span(offsets, sizes, list.nulls(), slot);
            (spans(&span), vec![list.values().as_ref()])
        }
        DataType::Struct(_) => {
            // A struct's slot is its children's: one level of each leaf when it is null.
            let fields: &StructArray = array.as_struct();
            let span = |slot| {
                (slot < fields.len()).then(|| slot..slot + usize::from(fields.is_valid(slot)))
            };
            let columns = fields.columns().iter().map(|c| c.as_ref()).collect();
            (spans(&span), columns)
        }
        DataType::FixedSizeList(_, _) | DataType::Union(_, _) | DataType::RunEndEncoded(_, _) => {
            return false;
        }
        _ => {
            out.push(ranges.iter().map(|r| r.len() as u64).sum());
            return true;
        }
    };
    let Some((short, spans)) = spanned else {
        return false;
    };
    let before = out.len();
    for child in children {
        if !count_levels(child, &spans, out) {
            out.truncate(before);
            return false;
        }
    }
    for levels in &mut out[before..] {
        *levels += short;
    }
    true
}

/// Strings to read as Arrow dictionaries, by column name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DictionaryColumns {
    /// Top-level `Utf8` columns.
    pub strings: Vec<String>,
    /// Map columns whose `Utf8` keys are wanted as a dictionary.
    pub map_keys: Vec<String>,
    /// Map columns whose `Utf8` values are wanted as a dictionary.
    pub map_values: Vec<String>,
}

/// `schema` with `columns` as dictionaries (`None`: none of them is in it).
fn dictionary_hint(schema: &SchemaRef, columns: &DictionaryColumns) -> Option<SchemaRef> {
    let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let named = |names: &[String], field: &Field| names.iter().any(|n| n == field.name());
    let mut hinted = false;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let wanted = [named(&columns.map_keys, f), named(&columns.map_values, f)];
            let hinted_type = match f.data_type() {
                DataType::Utf8 if named(&columns.strings, f) => Some(dictionary.clone()),
                DataType::Map(_, _) if wanted.contains(&true) => {
                    map_with_child_types(f.data_type(), |at, child| match child.data_type() {
                        DataType::Utf8 if wanted[at] => dictionary.clone(),
                        other => other.clone(),
                    })
                }
                _ => None,
            };
            hinted |= hinted_type.is_some();
            let field = f.as_ref().clone();
            match hinted_type {
                Some(data_type) => field.with_data_type(data_type),
                None => field,
            }
        })
        .collect();
    hinted.then(|| Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

/// Decoded bytes of a batch as rows: a dictionary column whose dictionary is shared by the
/// batches of a row group counts its keys and at most one value per row.
fn decoded_bytes(batch: &RecordBatch) -> u64 {
    let mut plain = Vec::new();
    let mut bytes = 0u64;
    for column in batch.columns() {
        match column.as_any_dictionary_opt() {
            Some(dictionary) => {
                let values = dictionary.values();
                let per_value = values.get_array_memory_size() / values.len().max(1);
                let keys = dictionary.keys().get_array_memory_size();
                bytes += (keys + per_value * column.len().min(values.len())) as u64;
            }
            None => plain.push(column),
        }
    }
    bytes + crate::gauge::arrays_memory_bytes(plain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{parquet_bytes, parquet_bytes_with};
    use arrow_array::{ArrayRef, Int64Array, StringArray};

    #[test]
    fn a_time_outside_the_hour_is_shown_whatever_its_zone() {
        let millis = 1_795_946_400_000i64; // 2026-11-29T10:00:00Z
        let utc = arrow_array::TimestampMillisecondArray::from(vec![millis]).with_timezone("UTC");
        let shown = describe_time(&utc, 0, millis * 1_000_000);
        assert!(shown.contains("2026-11-29T10:00:00"), "{shown}");
        let plain = Int64Array::from(vec![millis * 1_000_000]);
        assert_eq!(
            describe_time(&plain, 0, millis * 1_000_000),
            (millis * 1_000_000).to_string()
        );
    }

    const TARGET: u64 = 256 << 10;

    /// Stages and checks a file of `rows` rows whose body is `width` distinct bytes a row.
    fn input(
        dir: &std::path::Path,
        name: &str,
        rows: usize,
        width: usize,
        extra: bool,
    ) -> CheckedInput {
        let partition = PartitionId::parse("acme", "2026-11-29T10").expect("partition");
        let (start, _) = partition.time_range_nanos();
        let mut columns: Vec<(&str, ArrayRef)> = vec![
            (
                "time_unix_nano",
                Arc::new(Int64Array::from_iter_values(
                    (0..rows as i64).map(|r| start + r),
                )),
            ),
            (
                "body",
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|r| format!("{r:0width$}")),
                )),
            ),
        ];
        if extra {
            columns.push((
                "extra",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)),
            ));
        }
        let batch = RecordBatch::try_from_iter(columns).expect("batch");
        let local = dir.join(name);
        std::fs::write(&local, parquet_bytes(&[batch], rows)).expect("write");
        let staged = StagedInput {
            key: Path::from(name),
            name: name.to_string(),
            size: std::fs::metadata(&local).expect("metadata").len(),
            local,
            is_compacted: false,
        };
        check_input(staged, &partition, &KeyColumns::default(), 8 << 20).expect("checked")
    }

    /// Reads every batch; returns their row counts, the widest batch's decoded bytes and
    /// what the reader measured.
    fn read(input: &CheckedInput, previous: &RowWidth) -> (Vec<usize>, u64, RowWidth) {
        let plain = DictionaryColumns::default();
        let mut batches =
            SizedBatches::open_with_dictionaries(input, TARGET, &plain, previous).expect("open");
        let (mut rows, mut widest) = (Vec::new(), 0);
        for batch in batches.by_ref() {
            let batch = batch.expect("batch");
            rows.push(batch.num_rows());
            widest = widest.max(decoded_bytes(&batch));
        }
        (rows, widest, batches.width().clone())
    }

    #[test]
    fn an_input_like_the_previous_one_starts_at_its_width() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = input(dir.path(), "a.parquet", 20_000, 100, false);
        let (rows, _, width) = read(&first, &RowWidth::default());
        assert_eq!(rows[0], PROBE_ROWS, "the first input of a stream probes");
        assert_eq!(rows.iter().sum::<usize>(), 20_000);

        let alike = input(dir.path(), "b.parquet", 20_000, 100, false);
        let (rows, widest, _) = read(&alike, &width);
        assert!(rows[0] > 8 * PROBE_ROWS, "no probe: {rows:?}");
        assert!(
            rows[..rows.len() - 1].iter().all(|&r| r == rows[0]),
            "never resized: {rows:?}"
        );
        assert_eq!(rows.iter().sum::<usize>(), 20_000);
        assert!(widest <= 2 * TARGET, "batches near the target: {widest}");
    }

    #[test]
    fn a_wider_input_starts_no_wider_than_its_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let narrow = input(dir.path(), "a.parquet", 20_000, 40, false);
        let (_, _, width) = read(&narrow, &RowWidth::default());
        let wide = input(dir.path(), "b.parquet", 5_000, 1_000, false);
        let (rows, widest, _) = read(&wide, &width);
        assert!(widest <= 2 * TARGET, "first of {rows:?}: {widest} bytes");
        assert_eq!(rows.iter().sum::<usize>(), 5_000);
    }

    #[test]
    fn another_schema_probes_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = input(dir.path(), "a.parquet", 20_000, 100, false);
        let (_, _, width) = read(&first, &RowWidth::default());
        let other = input(dir.path(), "b.parquet", 20_000, 100, true);
        let (rows, _, _) = read(&other, &width);
        assert_eq!(rows[0], PROBE_ROWS);
    }

    /// `batch` in one row group of plain, uncompressed, version 1 pages: each page's levels
    /// come first, where a test can find and damage them.
    fn plain_file(batch: RecordBatch) -> Vec<u8> {
        use parquet::basic::Compression;
        use parquet::file::properties::WriterProperties;
        let properties = WriterProperties::builder()
            .set_compression(Compression::UNCOMPRESSED)
            .set_dictionary_enabled(false)
            .build();
        parquet_bytes_with(&[batch], properties).to_vec()
    }

    /// 100 rows of a time and a nullable body (null on the first eight rows and every seventh),
    /// as a [`plain_file`].
    fn bodies_file() -> Vec<u8> {
        let (start, _) = partition().time_range_nanos();
        let bodies: Vec<Option<String>> = (0..100)
            .map(|i| (i % 7 != 0 && i >= 8).then(|| format!("line {i}")))
            .collect();
        let batch = crate::testing::named_batch(vec![
            (
                "time_unix_nano",
                Arc::new(Int64Array::from_iter_values((0..100).map(|r| start + r))) as ArrayRef,
            ),
            ("body", Arc::new(StringArray::from(bodies)) as ArrayRef),
        ]);
        plain_file(batch)
    }

    /// A damaged definition level that turns a row's value into a null reads in the Parquet
    /// crate as a null, and every later value of the page one row early (the page's last
    /// value is left over, unread); the nulls the statistics declare show it, and the file is
    /// refused instead of compacted. Nulls that are really there read as before.
    #[test]
    fn damaged_definition_levels_are_refused_not_read_as_nulls() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let dir = tempfile::tempdir().expect("tempdir");
        let read = |name: &str, bytes: &[u8]| -> Result<Vec<RecordBatch>> {
            let staged = stage(dir.path(), name, bytes);
            let checked = check_input(staged, &partition(), &KeyColumns::default(), 8 << 20)
                .expect("the pages pass the check");
            SizedBatches::open(&checked, TARGET)?.collect()
        };
        let with_nulls = read("nulls.parquet", &bodies_file()).expect("intact");
        let bodies: usize = with_nulls.iter().map(|b| b.column(1).null_count()).sum();
        assert_eq!(bodies, 21);

        let mut bytes = bodies_file();
        let metadata = SerializedFileReader::new(bytes::Bytes::from(bytes.clone()))
            .expect("reader")
            .metadata()
            .clone();
        let chunk = metadata.row_group(0).column(1);
        let (start, length) = chunk.byte_range();
        let range = start as usize..(start + length) as usize;
        // The levels' length (4 bytes), one RLE run of the first eight rows' levels (0: its
        // header, 8 << 1, then the level), then the others bit-packed (a header, 12 groups
        // of 8 << 1 | 1, then a bit per row): row 8 is made null.
        let run = (bytes[range.clone()].windows(7))
            .position(|w| w[2..] == [0, 0, 0x10, 0, 0x19])
            .expect("the body's definition levels");
        bytes[range.start + run + 7] &= !1;
        let refused = read("damaged.parquet", &bytes).expect_err("damaged levels");
        let reason = refused.to_string();
        assert!(
            reason.contains("column body of row group 0 decodes to 22 nulls")
                && reason.contains("declare 21")
                && reason.contains("damaged.parquet"),
            "{reason}"
        );
    }

    /// Eight rows of a time and a `tags` list of two strings, the second null, as a
    /// [`plain_file`].
    fn tags_file() -> Vec<u8> {
        use arrow_array::builder::{ListBuilder, StringBuilder};
        let (start, _) = partition().time_range_nanos();
        let mut tags = ListBuilder::new(StringBuilder::new());
        for _ in 0..8 {
            tags.values().append_value("a");
            tags.values().append_null();
            tags.append(true);
        }
        let batch = crate::testing::named_batch(vec![
            (
                "time_unix_nano",
                Arc::new(Int64Array::from_iter_values((0..8).map(|r| start + r))),
            ),
            ("tags", Arc::new(tags.finish())),
        ]);
        plain_file(batch)
    }

    /// Lists, maps and structs of lists, with nulls and empty ones at every level, in several
    /// row groups and batches, read as plain strings and as dictionaries, re-encode to the
    /// levels their pages hold; the file's bytes and the rows read are unchanged.
    #[test]
    fn nested_rows_read_whole_match_their_pages_levels() {
        use arrow_array::StructArray;
        use arrow_array::builder::{ListBuilder, MapBuilder, StringBuilder};
        let dir = tempfile::tempdir().expect("tempdir");
        let (start, _) = partition().time_range_nanos();
        let mut batches = Vec::new();
        for b in 0..3 {
            let rows = 1_000;
            let mut lists = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
            let mut attributes = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
            for row in 0..rows {
                match (row + b) % 5 {
                    0 => lists.append(false),
                    1 => lists.append(true),
                    _ => {
                        for inner in 0..(row % 3) {
                            match inner % 2 {
                                0 => lists.values().append(false),
                                _ => {
                                    lists.values().values().append_value("x");
                                    lists.values().values().append_null();
                                    lists.values().append(true);
                                }
                            }
                        }
                        lists.append(true);
                    }
                }
                for entry in 0..(row + b) % 4 {
                    attributes.keys().append_value(format!("k{entry}"));
                    match (row + entry) % 3 {
                        0 => attributes.values().append_null(),
                        _ => attributes.values().append_value(format!("v{row}")),
                    }
                }
                attributes.append(row % 7 != 0).expect("a map");
            }
            let lists: ArrayRef = Arc::new(lists.finish());
            let holder = StructArray::from(vec![(
                Arc::new(Field::new("lists", lists.data_type().clone(), true)),
                Arc::clone(&lists),
            )]);
            let times = (0..rows as i64).map(|r| start + r + 1_000 * b as i64);
            batches.push(crate::testing::named_batch(vec![
                (
                    "time_unix_nano",
                    Arc::new(Int64Array::from_iter_values(times)),
                ),
                ("attributes", Arc::new(attributes.finish())),
                ("lists", lists),
                ("holder", Arc::new(holder)),
            ]));
        }
        let bytes = parquet_bytes(&batches, 700);
        let staged = stage(dir.path(), "nested.parquet", &bytes);
        let checked =
            check_input(staged, &partition(), &KeyColumns::default(), 8 << 20).expect("checked");
        assert!(checked.page_levels.len() > 3, "several row groups");
        let maps: Vec<String> = (checked.schema.fields().iter())
            .filter(|f| matches!(f.data_type(), DataType::Map(_, _)))
            .map(|f| f.name().clone())
            .collect();
        let coded = DictionaryColumns {
            map_keys: maps.clone(),
            map_values: maps,
            ..DictionaryColumns::default()
        };
        for dictionaries in [DictionaryColumns::default(), coded] {
            let mut read = SizedBatches::open_with_dictionaries(
                &checked,
                TARGET / 8,
                &dictionaries,
                &RowWidth::default(),
            )
            .expect("open");
            assert!(read.level_counts.len() >= 3, "{:?}", read.level_counts);
            let counted = read.level_counts.clone();
            let rows: Vec<RecordBatch> = read.by_ref().map(|b| b.expect("batch")).collect();
            let rows =
                arrow_select::concat::concat_batches(&rows[0].schema(), &rows).expect("concat");
            assert_eq!(rows.num_rows(), 3_000);
            // The whole file's rows count, leaf by leaf, what all its pages declare.
            for column in counted {
                let mut levels = Vec::new();
                let array = rows.column(column.field);
                let all = 0..array.len();
                assert!(count_levels(
                    array.as_ref(),
                    std::slice::from_ref(&all),
                    &mut levels
                ));
                let declared: Vec<u64> = (column.leaves.clone())
                    .map(|leaf| checked.page_levels.iter().map(|group| group[leaf]).sum())
                    .collect();
                assert_eq!(levels, declared, "column {}", column.field);
            }
        }
    }

    /// A damaged definition level inside a list (an element's, turned into an empty list's)
    /// makes the Parquet crate drop the element, with no error (pyarrow: "list offsets larger
    /// than values array"); the levels the rows read stand for fall short of the pages', and
    /// the file is refused.
    #[test]
    fn a_list_element_lost_to_a_damaged_level_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut bytes = tags_file();
        // Definition levels of (a, null) pairs: 3 then 2, two bits each, bit-packed from the
        // low bits (0b10_11_10_11), after a header of two groups of eight.
        let levels = bytes
            .windows(5)
            .position(|w| w == [0x05, 0xbb, 0xbb, 0xbb, 0xbb])
            .expect("the tags' definition levels");
        // The first row's null element (2) becomes an empty list (1).
        bytes[levels + 1] = 0b1011_0111;
        let staged = stage(dir.path(), "damaged.parquet", &bytes);
        let checked = check_input(staged, &partition(), &KeyColumns::default(), 8 << 20)
            .expect("the pages pass the check");
        let refused = SizedBatches::open(&checked, TARGET)
            .and_then(|batches| batches.collect::<Result<Vec<_>>>())
            .expect_err("a lost element");
        let reason = refused.to_string();
        assert!(
            reason.contains("column tags of row group 0 decodes to rows of 15 levels")
                && reason.contains("its pages hold 16"),
            "{reason}"
        );
        let intact = stage(dir.path(), "intact.parquet", &tags_file());
        let checked =
            check_input(intact, &partition(), &KeyColumns::default(), 8 << 20).expect("checked");
        let rows: Vec<RecordBatch> = SizedBatches::open(&checked, TARGET)
            .expect("open")
            .collect::<Result<_>>()
            .expect("intact");
        assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 8);
    }

    /// Levels as the Parquet format counts them: one for a value, a null, a null or empty
    /// list; a list's elements otherwise; a null struct one for each of its leaves. Only the
    /// slots asked for count, and a type without a count of its own is not counted.
    #[test]
    fn levels_are_counted_as_parquet_encodes_them() {
        use arrow_array::types::Int32Type;
        use arrow_array::{FixedSizeListArray, Int32Array, ListArray, ListViewArray, StructArray};
        use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
        let count = |array: &dyn Array, ranges: &[(usize, usize)]| {
            let ranges: Vec<Range<usize>> = ranges.iter().map(|&(start, end)| start..end).collect();
            let mut levels = Vec::new();
            count_levels(array, &ranges, &mut levels).then_some(levels)
        };
        // [1, 2], null, [], [null], [3, 4, 5]
        let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
            Some(vec![None]),
            Some(vec![Some(3), Some(4), Some(5)]),
        ]);
        assert_eq!(count(&lists, &[(0, 5)]), Some(vec![2 + 1 + 1 + 1 + 3]));
        assert_eq!(count(&lists, &[(1, 3)]), Some(vec![2]));
        assert_eq!(count(&lists, &[(0, 1), (4, 5)]), Some(vec![5]));
        // The same rows as views, written out of order.
        let views = ListViewArray::new(
            Arc::new(Field::new("item", DataType::Int32, true)),
            ScalarBuffer::from(vec![3, 0, 0, 2, 5]),
            ScalarBuffer::from(vec![2, 0, 0, 1, 3]),
            Arc::new(Int32Array::from(vec![
                None,
                None,
                Some(9),
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
            ])),
            Some(NullBuffer::from(vec![true, false, true, true, true])),
        );
        assert_eq!(count(&views, &[(0, 5)]), Some(vec![8]));
        // A struct of an integer and a list: a null struct is one level of each leaf.
        let holder = StructArray::new(
            vec![
                Arc::new(Field::new("n", DataType::Int32, true)),
                Arc::new(Field::new("l", lists.data_type().clone(), true)),
            ]
            .into(),
            vec![
                Arc::new(Int32Array::from(vec![1, 2, 3, 4, 5])) as ArrayRef,
                Arc::new(lists.clone()),
            ],
            Some(NullBuffer::from(vec![true, true, true, false, false])),
        );
        assert_eq!(count(&holder, &[(0, 5)]), Some(vec![5, 2 + 1 + 1 + 2]));
        let lists_of_lists = ListArray::new(
            Arc::new(Field::new("item", lists.data_type().clone(), true)),
            OffsetBuffer::new(ScalarBuffer::from(vec![0, 2, 2, 5])),
            Arc::new(lists),
            None,
        );
        assert_eq!(count(&lists_of_lists, &[(0, 3)]), Some(vec![3 + 1 + 5]));
        let fixed = FixedSizeListArray::from_iter_primitive::<Int32Type, _, _>(
            vec![Some(vec![Some(1), Some(2)])],
            2,
        );
        assert_eq!(count(&fixed, &[(0, 1)]), None);
    }

    fn stage(dir: &std::path::Path, name: &str, bytes: &[u8]) -> StagedInput {
        let local = dir.join(name);
        std::fs::write(&local, bytes).expect("write");
        StagedInput {
            key: Path::from(name),
            name: name.to_string(),
            size: bytes.len() as u64,
            local,
            is_compacted: false,
        }
    }

    fn partition() -> PartitionId {
        PartitionId::parse("acme", "2026-11-29T10").expect("partition")
    }

    /// One row's list: `None` for a null list.
    type ListRow = Option<Vec<Option<i64>>>;

    /// A file of 300 rows in row groups of 100 with a list column, ZSTD, small pages.
    fn listed_rows_file() -> (Vec<u8>, Vec<ListRow>) {
        use arrow_array::ListArray;
        use arrow_array::types::Int64Type;
        use parquet::basic::{Compression, ZstdLevel};
        use parquet::file::properties::WriterProperties;
        let (start, _) = partition().time_range_nanos();
        let lists: Vec<ListRow> = (0..300i64)
            .map(|i| (i % 3 != 0).then(|| vec![Some(i), None, Some(i * 2)]))
            .collect();
        let batch = RecordBatch::try_from_iter([
            (
                "time_unix_nano",
                Arc::new(Int64Array::from_iter_values((0..300).map(|r| start + r))) as ArrayRef,
            ),
            (
                "lst",
                Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(
                    lists.clone(),
                )),
            ),
        ])
        .expect("batch");
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(100))
            .set_data_page_row_count_limit(40)
            .set_write_batch_size(20)
            .set_dictionary_enabled(false)
            .build();
        (parquet_bytes_with(&[batch], properties).to_vec(), lists)
    }

    /// Whatever byte of the second row group's list chunk is damaged, the third row group,
    /// intact, reads back as written (or the file fails to read): a column whose corrupt page
    /// decodes to more or fewer records than its chunk holds must not shift into the next row
    /// group, where no error would ever show it.
    #[test]
    fn a_corrupt_row_group_never_shifts_a_column_into_the_next() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let dir = tempfile::tempdir().expect("tempdir");
        let (bytes, lists) = listed_rows_file();
        let metadata = SerializedFileReader::new(bytes::Bytes::from(bytes.clone()))
            .expect("reader")
            .metadata()
            .clone();
        assert_eq!(metadata.num_row_groups(), 3);
        let chunk = metadata.row_group(1).column(1);
        let start = chunk.data_page_offset() as usize;
        let end = start + chunk.compressed_size() as usize;
        let (mut read, mut failed) = (0, 0);
        for position in start..end {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0xff;
            let name = format!("damaged-{position}.parquet");
            let staged = stage(dir.path(), &name, &damaged);
            let Ok(checked) = check_input(staged, &partition(), &KeyColumns::default(), 8 << 20)
            else {
                failed += 1;
                continue;
            };
            let rows: Result<Vec<RecordBatch>> = catch_reader_panic(|| {
                SizedBatches::open(&checked, TARGET).and_then(|batches| batches.collect())
            })
            .unwrap_or_else(|panic| Err(Error::invariant(panic)));
            let Ok(rows) = rows else {
                failed += 1;
                continue;
            };
            read += 1;
            let all =
                arrow_select::concat::concat_batches(&rows[0].schema(), &rows).expect("concat");
            assert_eq!(all.num_rows(), 300, "byte {position}");
            let got = all.column(1).as_list::<i32>();
            for (row, want) in lists.iter().enumerate().skip(200) {
                let value: ListRow = got.is_valid(row).then(|| {
                    let item = got.value(row);
                    let item = item.as_primitive::<arrow_array::types::Int64Type>();
                    (0..item.len())
                        .map(|i| item.is_valid(i).then(|| item.value(i)))
                        .collect()
                });
                assert_eq!(
                    &value, want,
                    "byte {position}: row {row} of an intact row group"
                );
            }
        }
        assert!(read > 0 && failed > 0, "read {read}, failed {failed}");
    }

    #[test]
    fn every_parquet_codec_reads() {
        use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
        use parquet::file::properties::{WriterProperties, WriterVersion};
        let dir = tempfile::tempdir().expect("tempdir");
        let (start, _) = partition().time_range_nanos();
        let batch = RecordBatch::try_from_iter([
            (
                "time_unix_nano",
                Arc::new(Int64Array::from_iter_values((0..5_000).map(|r| start + r))) as ArrayRef,
            ),
            (
                "body",
                Arc::new(StringArray::from_iter_values(
                    (0..5_000).map(|r| format!("line {r} of a compressible body")),
                )),
            ),
        ])
        .expect("batch");
        let codecs = [
            Compression::UNCOMPRESSED,
            Compression::SNAPPY,
            Compression::GZIP(GzipLevel::default()),
            Compression::BROTLI(BrotliLevel::default()),
            // The parquet crate writes LZ4 with the Hadoop framing.
            Compression::LZ4,
            Compression::LZ4_RAW,
            Compression::ZSTD(ZstdLevel::default()),
        ];
        for codec in codecs {
            for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
                let props = WriterProperties::builder()
                    .set_compression(codec)
                    .set_writer_version(version)
                    .build();
                let bytes = parquet_bytes_with(std::slice::from_ref(&batch), props);
                let name = format!("{codec:?}-{version:?}.parquet");
                let staged = stage(dir.path(), &name, &bytes);
                let checked = check_input(staged, &partition(), &KeyColumns::default(), 8 << 20)
                    .unwrap_or_else(|e| panic!("{codec:?} {version:?}: {e}"));
                let rows: usize = SizedBatches::open(&checked, TARGET)
                    .expect("open")
                    .map(|b| b.expect("batch").num_rows())
                    .sum();
                assert_eq!(rows, 5_000, "{codec:?} {version:?}");
            }
        }
    }

    #[test]
    fn time_columns_of_any_unit_are_checked_in_nanoseconds() {
        use arrow_array::{TimestampMicrosecondArray, TimestampSecondArray, UInt64Array};
        let dir = tempfile::tempdir().expect("tempdir");
        let (start, end) = partition().time_range_nanos();
        let keys = KeyColumns::default();
        let file = |name: &str, time: ArrayRef| {
            let batch = RecordBatch::try_from_iter([("time_unix_nano", time)]).expect("batch");
            let staged = stage(dir.path(), name, &parquet_bytes(&[batch], 100));
            check_input(staged, &partition(), &keys, 8 << 20)
        };
        let micros = TimestampMicrosecondArray::from(vec![start / 1_000, (end - 1) / 1_000])
            .with_timezone("UTC");
        assert!(file("us.parquet", Arc::new(micros)).is_ok());
        let seconds = TimestampSecondArray::from(vec![start / 1_000_000_000]);
        assert!(file("s.parquet", Arc::new(seconds)).is_ok());
        let unsigned = UInt64Array::from(vec![start as u64, (end - 1) as u64]);
        assert!(file("u64.parquet", Arc::new(unsigned)).is_ok());
        // Raw microseconds would look like 1970 to a nanosecond check, and the reverse:
        // the hour after this one, in microseconds, is outside.
        let late = TimestampMicrosecondArray::from(vec![end / 1_000]);
        let reason = file("late.parquet", Arc::new(late)).expect_err("outside the hour");
        assert!(reason.contains("outside the partition's hour"), "{reason}");
        let overflow = TimestampSecondArray::from(vec![i64::MAX / 10]);
        let reason = file("overflow.parquet", Arc::new(overflow)).expect_err("overflow");
        assert!(reason.contains("outside the partition's hour"), "{reason}");
    }

    #[test]
    fn a_file_without_rows_passes_whatever_its_columns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = Arc::new(Schema::new(vec![Field::new("other", DataType::Utf8, true)]));
        let mut bytes = Vec::new();
        let writer =
            parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).expect("writer");
        writer.close().expect("close");
        let staged = stage(dir.path(), "empty.parquet", &bytes);
        let checked =
            check_input(staged, &partition(), &KeyColumns::default(), 8 << 20).expect("passes");
        assert_eq!(checked.rows, 0);
        let staged = stage(dir.path(), "zero-bytes.parquet", &[]);
        let reason =
            check_input(staged, &partition(), &KeyColumns::default(), 8 << 20).expect_err("bad");
        assert!(reason.contains("0 bytes"), "{reason}");
    }

    /// A file of 100 int64 columns of 20,000 distinct values in one row group, each with its
    /// dictionary (about 160 KB a column), as writers leave them by default.
    fn large_dictionaries_file() -> bytes::Bytes {
        let (start, _) = partition().time_range_nanos();
        let rows = 20_000i64;
        let mut columns: Vec<(String, ArrayRef)> = vec![(
            "time_unix_nano".into(),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|r| start + r))),
        )];
        for c in 0..100i64 {
            columns.push((
                format!("c{c}"),
                Arc::new(Int64Array::from_iter_values(
                    (0..rows).map(|r| c * 1_000_003 + r),
                )),
            ));
        }
        let batch = RecordBatch::try_from_iter(columns).expect("batch");
        parquet_bytes(&[batch], rows as usize)
    }

    #[test]
    fn a_file_whose_row_group_holds_more_dictionaries_than_the_budget_allows_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = large_dictionaries_file();
        let staged = stage(dir.path(), "dictionaries.parquet", &bytes);
        // 100 dictionaries of 160 KB and their pages: more than the 16 MiB an 8 MiB budget
        // leaves a reader of 101 columns, less than the 30.75 MiB of a 16 MiB budget.
        let reason = check_input(
            staged.clone(),
            &partition(),
            &KeyColumns::default(),
            8 << 20,
        )
        .expect_err("refused");
        assert!(
            reason.contains("row group 0 holds") && reason.contains("101 leaf columns"),
            "{reason}"
        );
        let checked = check_input(staged, &partition(), &KeyColumns::default(), 16 << 20)
            .expect("read under a larger budget");
        assert_eq!(checked.rows, 20_000);
    }

    #[test]
    fn inputs_checked_on_two_threads_keep_their_order_and_sizes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (start, end) = partition().time_range_nanos();
        let mut staged = Vec::new();
        for i in 0..24i64 {
            let name = format!("f{i:02}.parquet");
            // Every third file has a row outside the hour; sizes differ so the largest-first
            // hand-out differs from the inputs' order.
            let times: Vec<i64> = (0..=i * 40)
                .map(|r| if i % 3 == 2 && r == 0 { end } else { start + r })
                .collect();
            let batch = RecordBatch::try_from_iter([(
                "time_unix_nano",
                Arc::new(Int64Array::from(times)) as ArrayRef,
            )])
            .expect("batch");
            let mut input = stage(dir.path(), &name, &parquet_bytes(&[batch], 100));
            input.size = 0; // read again from the local copy
            staged.push(input);
        }
        let verdicts = check_inputs(staged, &partition(), &KeyColumns::default(), 8 << 20, true)
            .expect("threads");
        assert_eq!(verdicts.len(), 24);
        for (i, (input, verdict)) in verdicts.iter().enumerate() {
            assert_eq!(input.name, format!("f{i:02}.parquet"));
            let on_disk = std::fs::metadata(&input.local).expect("file").len();
            assert_eq!(input.size, on_disk, "{}", input.name);
            match verdict {
                Ok(checked) => {
                    assert_ne!(i % 3, 2, "{} passed", input.name);
                    assert_eq!(checked.rows, i as u64 * 40 + 1);
                    assert_eq!(checked.staged.name, input.name);
                }
                Err(reason) => {
                    assert_eq!(i % 3, 2, "{}: {reason}", input.name);
                    assert!(reason.contains("outside the partition's hour"), "{reason}");
                }
            }
        }
    }

    #[test]
    fn a_panic_while_reading_is_the_reason_of_the_input() {
        let reason =
            catch_reader_panic(|| -> u32 { panic!("index out of bounds") }).expect_err("caught");
        assert!(reason.contains("index out of bounds"), "{reason}");
        assert_eq!(catch_reader_panic(|| 7), Ok(7));
    }
}

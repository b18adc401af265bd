//! Dictionary encoding and statistics only where they pay: columns whose values are mostly
//! distinct (timestamps, trace ids, free-text bodies) are written without a dictionary once the
//! first rows have shown it (integers as deltas, `DELTA_BINARY_PACKED`, the rest plain), and
//! those of them that are strings or binaries also without min/max statistics and at ZSTD
//! level 1.
//!
//! A dictionary pays when values repeat. For a column of distinct values the writer still hashes
//! every value into its dictionary until the dictionary page fills, then falls back to plain
//! pages, and starts again in every row group: the hashing is the largest single cost of
//! encoding such a column, for no saving. Timestamps sorted within each service differ little
//! from one row to the next, so their deltas take a few bits where plain values take 64. A row
//! group's min/max of distinct strings, in a file sorted by other columns, spans nearly the
//! whole range of values and prunes nothing, while computing it compares every value. Sort key
//! columns always keep their statistics: pruning and splitting read them. What repeats in
//! distinct text is long substrings (a log line's template, a host name), which ZSTD's fastest
//! strategy finds as well as level 3 does: the pages come out within about 1% of the size, for
//! about a quarter less compression time and match tables several times smaller to clear for
//! every page.
//!
//! The choice is made from the file's first [`DICTIONARY_SAMPLE_ROWS`] rows (fewer for a schema
//! of more than 256 sampled columns, so the sample holds at most [`MAX_SAMPLED_VALUES`] values)
//! when a row group closes with the sample ready (usually the first row group; several for wide
//! rows), and holds from the next row group on. It depends only on the schema, the rows and where
//! row groups close, never on how the rows were chunked or on the memory budget: the same rows
//! give the same bytes.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Schema};
use parquet::schema::types::ColumnPath;

/// Rows sampled at the start of a file.
pub const DICTIONARY_SAMPLE_ROWS: usize = 4096;
/// Fewer sampled values than this keep the dictionary (too few to judge).
const MIN_SAMPLED_VALUES: usize = 256;
/// The most values a sample takes over all its columns: each distinct one is a hash held until
/// the choice is made (about 16 bytes with the set's slack), so a schema of hundreds of columns
/// samples fewer rows instead of holding tens of megabytes beside the budget.
pub const MAX_SAMPLED_VALUES: usize = 1 << 20;

/// Value hashes with a fixed hasher, so a sample counts the same on every run.
type Hashes = HashSet<u64, BuildHasherDefault<DefaultHasher>>;

/// Distinct values of one column among the sampled rows.
#[derive(Debug, Default)]
struct ColumnSample {
    values: usize,
    distinct: Hashes,
}

impl ColumnSample {
    /// Adds a value of a sample of at most `sample_rows` values. Once more than half of them
    /// are distinct the verdict cannot change, so no more hashes are kept.
    fn add(&mut self, value: &[u8], sample_rows: usize) {
        if self.distinct.len() <= sample_rows / 2 {
            let mut hasher = DefaultHasher::new();
            value.hash(&mut hasher);
            self.distinct.insert(hasher.finish());
        }
        self.values += 1;
    }

    /// Whether most values differ (so a dictionary would not pay).
    fn mostly_distinct(&self) -> bool {
        self.values >= MIN_SAMPLED_VALUES && self.distinct.len() * 2 > self.values
    }
}

/// Samples the first rows written and names the columns to write without a dictionary.
///
/// Only top-level columns of one leaf are sampled: primitives, strings and binaries (fixed or
/// variable width). Nested, boolean and dictionary-typed columns keep the writer's setting.
#[derive(Debug)]
pub struct DictionaryChoice {
    sample_rows: usize,
    rows_left: usize,
    samples: Vec<SampledColumn>,
}

/// One sampled column.
#[derive(Debug)]
struct SampledColumn {
    /// Index among the top-level fields.
    index: usize,
    /// Its leaf's path.
    path: ColumnPath,
    /// Whether its values are byte strings (not fixed-width primitives).
    bytes: bool,
    sample: ColumnSample,
}

impl DictionaryChoice {
    /// A choice from the first `sample_rows` rows of files of `schema`, or fewer, so that the
    /// sample takes at most [`MAX_SAMPLED_VALUES`] values (and never fewer than twice
    /// the 256 values a column needs to be judged).
    pub fn new(schema: &Schema, sample_rows: usize) -> Self {
        let samples: Vec<SampledColumn> = (schema.fields().iter().enumerate())
            .filter(|(_, f)| sampled(f.data_type()))
            .map(|(i, f)| SampledColumn {
                index: i,
                path: ColumnPath::new(vec![f.name().clone()]),
                bytes: f.data_type().primitive_width().is_none(),
                sample: ColumnSample::default(),
            })
            .collect();
        let by_values = (MAX_SAMPLED_VALUES / samples.len().max(1)).max(2 * MIN_SAMPLED_VALUES);
        let sample_rows = sample_rows.min(by_values);
        Self {
            sample_rows,
            rows_left: sample_rows,
            samples,
        }
    }

    /// Takes the rows of `batch` into the sample, up to the sample's size.
    pub fn observe(&mut self, batch: &RecordBatch) {
        let rows = batch.num_rows().min(self.rows_left);
        if rows == 0 {
            return;
        }
        self.rows_left -= rows;
        for column in &mut self.samples {
            if let Some(values) = batch.columns().get(column.index) {
                add_values(values.as_ref(), rows, self.sample_rows, &mut column.sample);
            }
        }
    }

    /// Whether the sample can decide: it is full, or every sampled column has enough values.
    /// A file of wide rows may close several small row groups before that.
    pub fn ready(&self) -> bool {
        self.rows_left == 0 || (self.samples.iter()).all(|c| c.sample.values >= MIN_SAMPLED_VALUES)
    }

    /// The columns to write without a dictionary.
    pub fn plain_columns(&self) -> Vec<ColumnPath> {
        (self.samples.iter())
            .filter(|c| c.sample.mostly_distinct())
            .map(|c| c.path.clone())
            .collect()
    }

    /// The columns to write without min/max statistics: the plain ones of strings or binaries
    /// (the caller keeps them on the sort key columns).
    pub fn columns_without_statistics(&self) -> Vec<ColumnPath> {
        (self.samples.iter())
            .filter(|c| c.bytes && c.sample.mostly_distinct())
            .map(|c| c.path.clone())
            .collect()
    }
}

/// Whether a column of `data_type` is sampled.
fn sampled(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    ) || data_type.primitive_width().is_some()
}

/// Adds the non-null values of the first `rows` rows of `array` to `sample`, a sample of at
/// most `sample_rows` values.
fn add_values(array: &dyn Array, rows: usize, sample_rows: usize, sample: &mut ColumnSample) {
    let valid = (0..rows).filter(|&i| array.is_valid(i));
    let mut add = |value: &[u8]| sample.add(value, sample_rows);
    if let Some(a) = array.as_string_opt::<i32>() {
        valid.for_each(|i| add(a.value(i).as_bytes()));
    } else if let Some(a) = array.as_string_opt::<i64>() {
        valid.for_each(|i| add(a.value(i).as_bytes()));
    } else if let Some(a) = array.as_string_view_opt() {
        valid.for_each(|i| add(a.value(i).as_bytes()));
    } else if let Some(a) = array.as_binary_opt::<i32>() {
        valid.for_each(|i| add(a.value(i)));
    } else if let Some(a) = array.as_binary_opt::<i64>() {
        valid.for_each(|i| add(a.value(i)));
    } else if let Some(a) = array.as_binary_view_opt() {
        valid.for_each(|i| add(a.value(i)));
    } else if let Some(a) = array.as_fixed_size_binary_opt() {
        valid.for_each(|i| add(a.value(i)));
    } else if let Some(width) = array.data_type().primitive_width() {
        let data = array.to_data();
        let Some(values) = data.buffers().first() else {
            return;
        };
        let bytes = values.as_slice();
        for i in valid {
            let start = (data.offset() + i) * width;
            if let Some(value) = bytes.get(start..start + width) {
                add(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{BooleanArray, FixedSizeBinaryArray, Int64Array, StringArray};
    use arrow_schema::Field;

    use super::*;

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("time", DataType::Int64, false),
            Field::new("service", DataType::Utf8, true),
            Field::new("body", DataType::Utf8, true),
            Field::new("trace", DataType::FixedSizeBinary(2), true),
            Field::new("flag", DataType::Boolean, true),
        ]))
    }

    fn batch(from: usize, rows: usize) -> RecordBatch {
        let range = from..from + rows;
        let columns: Vec<Arc<dyn Array>> = vec![
            Arc::new(Int64Array::from_iter_values(
                range.clone().map(|i| i as i64),
            )),
            Arc::new(StringArray::from_iter_values(
                range.clone().map(|i| format!("s{}", i % 3)),
            )),
            Arc::new(StringArray::from_iter(
                range
                    .clone()
                    .map(|i| (i % 2 == 0).then(|| format!("line {i}"))),
            )),
            Arc::new(
                FixedSizeBinaryArray::try_from_iter(
                    range.clone().map(|i| (i as u16).to_be_bytes()),
                )
                .expect("two bytes each"),
            ),
            Arc::new(BooleanArray::from_iter(range.map(|i| Some(i % 2 == 0)))),
        ];
        RecordBatch::try_new(schema(), columns).expect("columns match the schema")
    }

    fn names(paths: &[ColumnPath]) -> Vec<String> {
        paths.iter().map(|p| p.string()).collect()
    }

    #[test]
    fn distinct_columns_go_plain_and_repeating_ones_keep_the_dictionary() {
        let mut choice = DictionaryChoice::new(&schema(), 1000);
        choice.observe(&batch(0, 1000));
        assert_eq!(names(&choice.plain_columns()), ["time", "body", "trace"]);
        // Distinct integers keep their cheap, pruning statistics.
        assert_eq!(
            names(&choice.columns_without_statistics()),
            ["body", "trace"]
        );
    }

    #[test]
    fn the_choice_does_not_depend_on_how_rows_are_chunked() {
        let mut whole = DictionaryChoice::new(&schema(), 600);
        whole.observe(&batch(0, 2000));
        let mut chunked = DictionaryChoice::new(&schema(), 600);
        for from in (0..2000).step_by(7) {
            chunked.observe(&batch(from, 7));
        }
        assert_eq!(whole.plain_columns(), chunked.plain_columns());
        assert_eq!(whole.samples[0].sample.values, 600);
        assert_eq!(chunked.samples[0].sample.values, 600);
    }

    #[test]
    fn too_few_values_keep_the_dictionary() {
        let mut choice = DictionaryChoice::new(&schema(), 4096);
        choice.observe(&batch(0, 300));
        // 300 distinct times are enough to judge; 150 non-null bodies are not.
        assert_eq!(names(&choice.plain_columns()), ["time", "trace"]);
    }

    #[test]
    fn the_sample_is_ready_when_full_or_when_every_column_has_enough_values() {
        let mut choice = DictionaryChoice::new(&schema(), 4096);
        choice.observe(&batch(0, 300));
        // Half the bodies are null: 150 values are too few.
        assert!(!choice.ready());
        choice.observe(&batch(300, 300));
        assert!(choice.ready());
        let mut small = DictionaryChoice::new(&schema(), 100);
        small.observe(&batch(0, 50));
        assert!(!small.ready());
        small.observe(&batch(50, 50));
        assert!(small.ready());
    }

    #[test]
    fn a_wide_schema_samples_fewer_rows_and_keeps_no_more_hashes_than_decide() {
        let fields: Vec<Field> = (0..1000)
            .map(|i| Field::new(format!("c{i}"), DataType::Int64, false))
            .collect();
        let wide = Arc::new(Schema::new(fields));
        let columns: Vec<Arc<dyn Array>> = (0..1000i64)
            .map(|c| {
                Arc::new(Int64Array::from_iter_values(
                    (0..3000).map(|r| c * 10_000 + r),
                )) as _
            })
            .collect();
        let batch = RecordBatch::try_new(Arc::clone(&wide), columns).expect("batch");
        let mut choice = DictionaryChoice::new(&wide, DICTIONARY_SAMPLE_ROWS);
        choice.observe(&batch);
        // 2^20 values over 1,000 columns: 1,048 rows each, of which 525 hashes decide.
        assert_eq!(choice.samples[0].sample.values, 1048);
        assert_eq!(choice.samples[0].sample.distinct.len(), 525);
        assert!(choice.ready());
        assert_eq!(choice.plain_columns().len(), 1000);
        // A narrow schema samples the full 4,096 rows.
        assert_eq!(
            DictionaryChoice::new(&schema(), DICTIONARY_SAMPLE_ROWS).rows_left,
            4096
        );
    }

    #[test]
    fn sliced_primitives_hash_their_own_values() {
        let mut choice = DictionaryChoice::new(&schema(), 4096);
        let repeated = batch(0, 1000);
        // Distinct values before the slice, one value repeated inside it.
        let times = Int64Array::from_iter_values((0..2000).map(|i| if i < 1000 { i } else { 0 }));
        let columns: Vec<Arc<dyn Array>> = std::iter::once(Arc::new(times.slice(1000, 1000)) as _)
            .chain(repeated.columns().iter().skip(1).cloned())
            .collect();
        choice.observe(&RecordBatch::try_new(schema(), columns).expect("same schema"));
        assert!(!names(&choice.plain_columns()).contains(&"time".to_string()));
    }
}

//! Row-group pruning from footer statistics: which row groups a service-and-window query must read.
//!
//! A row group is skipped only when its statistics prove that no row in it can match; any
//! doubt (no statistics, a missing key column, statistics in an order we cannot trust)
//! means it is scanned. Pruning may be weak, never wrong.

use parquet::basic::{ConvertedType, LogicalType, TimeUnit};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData, RowGroupMetaData};
use parquet::file::statistics::Statistics;
use parquet::schema::types::SchemaDescriptor;

use crate::options::{IntegerTimeUnit, KeyColumns};
use crate::output::writer::resolve_leaf_index;

/// A query for the rows of one service (or all services) in a time window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowPredicate {
    /// The service asked for; `None` matches every service, null included.
    pub service: Option<String>,
    /// Start of the window, Unix nanoseconds, inclusive.
    pub from_nanos: i64,
    /// End of the window, Unix nanoseconds, exclusive.
    pub to_nanos: i64,
}

/// How many row groups a query has to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PruneCount {
    /// Row groups in the file.
    pub row_groups_total: usize,
    /// Row groups whose statistics could not rule the query out.
    pub row_groups_scanned: usize,
}

/// Counts the row groups of a file that `predicate` must scan, from footer statistics alone.
pub fn count_row_groups(
    metadata: &ParquetMetaData,
    keys: &KeyColumns,
    predicate: &WindowPredicate,
) -> PruneCount {
    let schema = metadata.file_metadata().schema_descr();
    let time = time_leaf(schema, keys);
    let service = leaf_column_index(schema, &keys.service);
    let row_groups = metadata.row_groups();
    PruneCount {
        row_groups_total: row_groups.len(),
        row_groups_scanned: row_groups
            .iter()
            .filter(|rg| may_match(rg, time, service, predicate))
            .count(),
    }
}

/// True unless the row group's statistics prove that no row matches.
pub(crate) fn may_match(
    row_group: &RowGroupMetaData,
    time: Option<TimeLeaf>,
    service: Option<usize>,
    predicate: &WindowPredicate,
) -> bool {
    let time_bounds = time.and_then(|t| time_bounds(row_group.column(t.index), t.unit));
    if let Some((min, max)) = time_bounds
        && (max < predicate.from_nanos || min >= predicate.to_nanos)
    {
        return false;
    }
    let (Some(wanted), Some(i)) = (&predicate.service, service) else {
        return true;
    };
    let chunk = row_group.column(i);
    let all_null = chunk
        .statistics()
        .and_then(Statistics::null_count_opt)
        .is_some_and(|nulls| i64::try_from(nulls).is_ok_and(|n| n == row_group.num_rows()));
    if all_null && row_group.num_rows() > 0 {
        return false;
    }
    match service_bounds(chunk) {
        Some((min, max)) => min <= wanted.as_bytes() && wanted.as_bytes() <= max,
        None => true,
    }
}

/// The leaf index of a top-level, non-nested column named exactly `name` (dots included:
/// `service.name` is one column name, not a path).
pub(crate) fn leaf_column_index(schema: &SchemaDescriptor, name: &str) -> Option<usize> {
    schema.columns().iter().position(|column| {
        let parts = column.path().parts();
        parts.len() == 1 && parts[0] == name
    })
}

/// The time column's leaf in a file's schema, and what its integers count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeLeaf {
    /// The leaf's index.
    pub index: usize,
    /// What a plain integer in it counts (timestamps carry their unit).
    pub unit: IntegerTimeUnit,
}

/// The time column's [`TimeLeaf`] in `schema`, when the file has it (at the top level or
/// inside structs, as [`resolve_leaf_index`] finds it).
pub(crate) fn time_leaf(schema: &SchemaDescriptor, keys: &KeyColumns) -> Option<TimeLeaf> {
    resolve_leaf_index(schema, &keys.time).map(|index| TimeLeaf {
        index,
        unit: keys.time_unit,
    })
}

/// The chunk's time range in Unix nanoseconds, from Int64 (plain integers counting
/// `integer_unit`, or a timestamp) or unsigned 64-bit statistics; `None` when absent or
/// untrustworthy.
pub(crate) fn time_bounds(
    chunk: &ColumnChunkMetaData,
    integer_unit: IntegerTimeUnit,
) -> Option<(i64, i64)> {
    let statistics = chunk.statistics()?;
    let Statistics::Int64(stats) = statistics else {
        return None;
    };
    let (min, max) = (*stats.min_opt()?, *stats.max_opt()?);
    let descr = chunk.column_descr();
    let unsigned = matches!(descr.logical_type_ref(), Some(LogicalType::Integer(int)) if !int.is_signed)
        || descr.converted_type() == ConvertedType::UINT_64;
    if unsigned {
        // Deprecated min/max fields were ordered as signed, which is wrong for unsigned values.
        if statistics.is_min_max_deprecated() {
            return None;
        }
        let widen = |v: i64| {
            i64::try_from(v as u64)
                .unwrap_or(i64::MAX)
                .saturating_mul(integer_unit.nanos())
        };
        return Some((widen(min), widen(max)));
    }
    let nanos_per_unit: i64 = match descr.logical_type_ref() {
        Some(LogicalType::Timestamp(timestamp)) => match timestamp.unit {
            TimeUnit::MILLIS => 1_000_000,
            TimeUnit::MICROS => 1_000,
            TimeUnit::NANOS => 1,
        },
        _ => match descr.converted_type() {
            ConvertedType::TIMESTAMP_MILLIS => 1_000_000,
            ConvertedType::TIMESTAMP_MICROS => 1_000,
            _ => integer_unit.nanos(),
        },
    };
    Some((
        min.saturating_mul(nanos_per_unit),
        max.saturating_mul(nanos_per_unit),
    ))
}

/// The chunk's byte-string range (UTF-8 bytes, compared byte-wise); `None` when absent or
/// written in the deprecated signed order.
pub(crate) fn service_bounds(chunk: &ColumnChunkMetaData) -> Option<(&[u8], &[u8])> {
    let statistics = chunk.statistics()?;
    let Statistics::ByteArray(stats) = statistics else {
        return None;
    };
    if statistics.is_min_max_deprecated() {
        return None;
    }
    Some((stats.min_opt()?.data(), stats.max_opt()?.data()))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};

    use super::*;

    pub(crate) const MINUTE: i64 = 60_000_000_000;

    /// Writes `rows` (service, minute) as a file with `rows_per_group` rows per row group.
    pub(crate) fn file(
        rows: &[(Option<&str>, i64)],
        rows_per_group: usize,
        unsigned_time: bool,
        statistics: EnabledStatistics,
    ) -> ParquetMetaData {
        let services: ArrayRef = Arc::new(StringArray::from(
            rows.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        ));
        let (time_type, times): (DataType, ArrayRef) = if unsigned_time {
            let values = rows.iter().map(|(_, m)| (m * MINUTE) as u64);
            (
                DataType::UInt64,
                Arc::new(UInt64Array::from_iter_values(values)),
            )
        } else {
            let values = rows.iter().map(|(_, m)| m * MINUTE);
            (
                DataType::Int64,
                Arc::new(Int64Array::from_iter_values(values)),
            )
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("service.name", DataType::Utf8, true),
            Field::new("time_unix_nano", time_type, false),
        ]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![services, times]).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rows_per_group))
            .set_statistics_enabled(statistics)
            .build();
        let mut writer = ArrowWriter::try_new(Vec::new(), schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        let bytes = Bytes::from(writer.into_inner().unwrap());
        ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .unwrap()
    }

    fn window(service: Option<&str>, from_minute: i64, to_minute: i64) -> WindowPredicate {
        WindowPredicate {
            service: service.map(str::to_string),
            from_nanos: from_minute * MINUTE,
            to_nanos: to_minute * MINUTE,
        }
    }

    fn scanned(metadata: &ParquetMetaData, predicate: &WindowPredicate) -> usize {
        let count = count_row_groups(metadata, &KeyColumns::default(), predicate);
        assert_eq!(count.row_groups_total, metadata.num_row_groups());
        count.row_groups_scanned
    }

    /// Sorted by (service, time): `api` over minutes 0..60, then `db` over 0..60.
    fn sorted_rows() -> Vec<(Option<&'static str>, i64)> {
        let api = (0..60).map(|m| (Some("api"), m));
        api.chain((0..60).map(|m| (Some("db"), m))).collect()
    }

    #[test]
    fn sorted_file_prunes_the_other_service() {
        // Four row groups: api 0..30, api 30..60, db 0..30, db 30..60.
        let metadata = file(&sorted_rows(), 30, false, EnabledStatistics::Chunk);
        assert_eq!(scanned(&metadata, &window(Some("db"), 0, 60)), 2);
        assert_eq!(scanned(&metadata, &window(Some("db"), 40, 50)), 1);
        assert_eq!(scanned(&metadata, &window(Some("api"), 0, 10)), 1);
        assert_eq!(scanned(&metadata, &window(Some("cache"), 0, 60)), 0);
        assert_eq!(scanned(&metadata, &window(None, 0, 60)), 4);
        assert_eq!(scanned(&metadata, &window(None, 45, 46)), 2);
        // Half-open window: a group ending at minute 29 is out of [30, 31).
        assert_eq!(scanned(&metadata, &window(Some("api"), 30, 31)), 1);
        assert_eq!(scanned(&metadata, &window(Some("api"), 29, 30)), 1);
        assert_eq!(scanned(&metadata, &window(None, 60, 120)), 0);
    }

    #[test]
    fn unsorted_file_prunes_nothing() {
        // Ingest order: services interleaved, and every group spans the hour (late and early
        // lines), so no group can be ruled out.
        let minute = |i: i64| match i % 30 {
            0 => 0,
            29 => 59,
            _ => (i * 7) % 60,
        };
        let rows: Vec<_> = (0..120)
            .map(|i| (Some(if i % 2 == 0 { "api" } else { "db" }), minute(i)))
            .collect();
        let metadata = file(&rows, 30, false, EnabledStatistics::Page);
        for predicate in [
            window(Some("db"), 10, 20),
            window(Some("api"), 0, 1),
            window(None, 5, 6),
        ] {
            assert_eq!(scanned(&metadata, &predicate), 4, "{predicate:?}");
        }
    }

    #[test]
    fn missing_statistics_scan_everything() {
        let metadata = file(&sorted_rows(), 30, false, EnabledStatistics::None);
        assert_eq!(scanned(&metadata, &window(Some("db"), 40, 50)), 4);
        assert_eq!(scanned(&metadata, &window(Some("zzz"), 1000, 2000)), 4);

        let renamed = KeyColumns {
            service: "svc".into(),
            time: "ts".into(),
            ..KeyColumns::default()
        };
        let metadata = file(&sorted_rows(), 30, false, EnabledStatistics::Chunk);
        let count = count_row_groups(&metadata, &renamed, &window(Some("db"), 40, 50));
        assert_eq!(
            count.row_groups_scanned, 4,
            "absent key columns prune nothing"
        );
    }

    #[test]
    fn null_only_groups_cannot_match_a_service() {
        let rows: Vec<_> = (0..60)
            .map(|m| (None, m))
            .chain((0..60).map(|m| (Some("api"), m)))
            .collect();
        let metadata = file(&rows, 60, false, EnabledStatistics::Chunk);
        assert_eq!(scanned(&metadata, &window(Some("api"), 0, 60)), 1);
        assert_eq!(scanned(&metadata, &window(None, 0, 60)), 2);
    }

    #[test]
    fn unsigned_time_statistics_prune_too() {
        let metadata = file(&sorted_rows(), 30, true, EnabledStatistics::Chunk);
        assert_eq!(scanned(&metadata, &window(Some("db"), 40, 50)), 1);
        assert_eq!(scanned(&metadata, &window(None, 0, 10)), 2);
    }

    #[test]
    fn integer_time_statistics_are_read_in_the_configured_unit() {
        let metadata = file(&sorted_rows(), 30, false, EnabledStatistics::Chunk);
        let chunk = metadata.row_group(0).column(1);
        let (min, max) = time_bounds(chunk, IntegerTimeUnit::Nanoseconds).expect("bounds");
        assert_eq!((min, max), (0, 29 * MINUTE));
        // The same integers counting microseconds span a thousand times as long.
        let (min, max) = time_bounds(chunk, IntegerTimeUnit::Microseconds).expect("bounds");
        assert_eq!((min, max), (0, 29 * MINUTE * 1_000));
    }
}

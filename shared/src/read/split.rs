//! Split points of sorted files: boundaries that cut the partition's key space (service, then
//! time) into ranges carrying about equal bytes, chosen from the files' row-group statistics
//! alone.
//!
//! The boundaries are a pure function of the row groups (their starts and sizes), whatever
//! order the files or their row groups are listed in, so the same runs always split the same
//! way, wherever the split is computed. A boundary need not be a key of any row: ranges are
//! half-open intervals of the key space, `[b(i), b(i+1))`, the first open below and the last
//! open above, so every row falls in exactly one range.

use parquet::basic::Type;
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::statistics::Statistics;

use crate::options::KeyColumns;
use crate::output::writer::resolve_leaf;
use crate::read::prune::{TimeLeaf, leaf_column_index, service_bounds, time_bounds, time_leaf};
use crate::sort::key::{KeyPoint, KeyRange};

/// Where a row group of a sorted file starts (a point at or below its first row's key) and
/// how many bytes it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroupSpan {
    /// At or below the key of the row group's first row.
    pub start: KeyPoint,
    /// The row group's compressed bytes.
    pub bytes: u64,
}

/// The spans of a file sorted by (service, time), from its footer.
///
/// A row group's start is its smallest service (none when it holds a null service, which
/// sorts first) with its smallest time: at or below its first row's key. A row group whose
/// statistics cannot tell starts where the one before it did (the file is sorted), the first
/// at [`KeyPoint::MIN`].
pub fn row_group_spans(metadata: &ParquetMetaData, keys: &KeyColumns) -> Vec<RowGroupSpan> {
    let (time, service) = key_leaves(metadata, keys);
    let mut previous = KeyPoint::MIN;
    metadata
        .row_groups()
        .iter()
        .map(|row_group| {
            // Sorted files start each row group at or after the one before it; statistics that
            // say otherwise are not trusted past that point.
            if let Some(start) = row_group_point(row_group, time, service, End::First)
                && start > previous
            {
                previous = start;
            }
            RowGroupSpan {
                start: previous.clone(),
                bytes: u64::try_from(row_group.compressed_size()).unwrap_or(0),
            }
        })
        .collect()
}

/// The leaves of the time and service columns whose statistics bound a row group's keys:
/// under a (service, time) key whose service is a top-level byte array (or absent), or a key
/// of the time alone.
/// Any other key has no time leaf here (no statistics bound its points), and its runs are
/// never split.
fn key_leaves(metadata: &ParquetMetaData, keys: &KeyColumns) -> (Option<TimeLeaf>, Option<usize>) {
    let schema = metadata.file_metadata().schema_descr();
    let time = time_leaf(schema, keys);
    let service = leaf_column_index(schema, &keys.service);
    let is_time = |s: &String| *s == keys.time;
    if matches!(keys.sort.as_slice(), [t] if is_time(t)) {
        return (time, None);
    }
    let bytes = match service {
        Some(i) => schema.column(i).physical_type() == Type::BYTE_ARRAY,
        // Absent (null throughout, the time orders the rows): not a column of another shape
        // (a struct, a list) nor inside a struct.
        None => {
            let roots = schema.root_schema().get_fields();
            !roots.iter().any(|f| f.name() == keys.service)
                && resolve_leaf(schema, &keys.service).is_none()
        }
    };
    match keys.is_service_time() && bytes {
        true => (time, service),
        false => (None, None),
    }
}

/// Which end of a row group a point bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// At or below the key of its first row.
    First,
    /// At or above the key of its last row.
    Last,
}

/// A bound of one row group's keys, when its statistics tell it: the smallest service (none
/// when it holds a null service, which sorts first) with the smallest time for its first row;
/// the largest service (none when every service is null) with the largest time for its last.
fn row_group_point(
    row_group: &RowGroupMetaData,
    time: Option<TimeLeaf>,
    service: Option<usize>,
    end: End,
) -> Option<KeyPoint> {
    let time = time?;
    let (time_min, time_max) = time_bounds(row_group.column(time.index), time.unit)?;
    let service = match service {
        // A time-only key: every row's service is null.
        None => None,
        Some(i) => {
            let chunk = row_group.column(i);
            let nulls = chunk.statistics().and_then(Statistics::null_count_opt)?;
            let all_null = i64::try_from(nulls).ok()? >= row_group.num_rows();
            match end {
                End::First if nulls > 0 => None,
                End::Last if all_null => None,
                End::First => Some(service_bounds(chunk)?.0.to_vec()),
                End::Last => Some(service_bounds(chunk)?.1.to_vec()),
            }
        }
    };
    let time_nanos = match end {
        End::First => time_min,
        End::Last => time_max,
    };
    Some(KeyPoint {
        service,
        time_nanos,
    })
}

/// At most `ranges - 1` boundaries, strictly increasing, that cut the spans into ranges of
/// about equal bytes; none for one range. Each boundary is the start of the first row group
/// with a `ranges`-th share more of the bytes before it, or, when that start is not past the
/// boundary before it, of the next row group that starts further on. With distinct starts and
/// no row group larger than a share, there are `ranges - 1` boundaries and the row groups
/// starting in one range hold less than a share plus the largest row group; row groups that
/// share a start, or one larger than a share, leave fewer ranges, never one without a row
/// group starting in it.
pub fn split_points(spans: &[RowGroupSpan], ranges: usize) -> Vec<KeyPoint> {
    let total: u128 = spans.iter().map(|s| u128::from(s.bytes)).sum();
    if ranges <= 1 || total == 0 {
        return Vec::new();
    }
    let mut ordered: Vec<&RowGroupSpan> = spans.iter().collect();
    ordered.sort_by(|a, b| a.start.cmp(&b.start).then(a.bytes.cmp(&b.bytes)));
    let count = ranges as u128;
    let mut points: Vec<KeyPoint> = Vec::with_capacity(ranges - 1);
    let mut lowest = &ordered[0].start;
    let mut before: u128 = 0;
    let mut cut = 1u128;
    let mut wanted = false;
    for span in &ordered {
        while cut < count && before * count >= total * cut {
            wanted = true;
            cut += 1;
        }
        if wanted && &span.start > lowest {
            points.push(span.start.clone());
            lowest = &span.start;
            wanted = false;
        }
        before += u128::from(span.bytes);
    }
    points
}

/// The row groups of a file sorted by (service, time) that can hold a key of `range`, from
/// its footer: every row group except those starting at or past the range's end and those whose
/// statistics bound their last key below the range's start. A row group whose statistics cannot
/// tell is kept; the reader filters its rows.
pub fn row_groups_in_range(
    metadata: &ParquetMetaData,
    keys: &KeyColumns,
    range: &KeyRange,
) -> Vec<usize> {
    let (time, service) = key_leaves(metadata, keys);
    let spans = row_group_spans(metadata, keys);
    (metadata.row_groups().iter().zip(&spans).enumerate())
        .filter(|(_, (row_group, span))| {
            let starts_before_end = range.end.as_ref().is_none_or(|end| &span.start < end);
            let ends_after_start = match (
                &range.start,
                row_group_point(row_group, time, service, End::Last),
            ) {
                (Some(start), Some(last)) => &last >= start,
                _ => true,
            };
            starts_before_end && ends_after_start
        })
        .map(|(i, _)| i)
        .collect()
}

/// The range (0-based) that `key` falls in, for boundaries from [`split_points`].
pub fn range_of(points: &[KeyPoint], key: &KeyPoint) -> usize {
    points.partition_point(|point| point <= key)
}

#[cfg(test)]
mod tests {
    use parquet::file::properties::EnabledStatistics;
    use proptest::prelude::*;

    use super::*;
    use crate::read::prune::tests::{MINUTE, file};
    use crate::rng::SplitMix64;

    fn point(service: Option<&str>, time_nanos: i64) -> KeyPoint {
        KeyPoint {
            service: service.map(|s| s.as_bytes().to_vec()),
            time_nanos,
        }
    }

    fn span(service: Option<&str>, time_nanos: i64, bytes: u64) -> RowGroupSpan {
        RowGroupSpan {
            start: point(service, time_nanos),
            bytes,
        }
    }

    /// The footer of a sorted file of `rows` (service, minute) with `rows_per_group` rows per
    /// row group.
    fn sorted_file(
        rows: &[(Option<String>, i64)],
        rows_per_group: usize,
        statistics: EnabledStatistics,
    ) -> ParquetMetaData {
        let rows: Vec<(Option<&str>, i64)> = rows.iter().map(|(s, m)| (s.as_deref(), *m)).collect();
        file(&rows, rows_per_group, false, statistics)
    }

    /// Sorted rows (service, minute) of a few services, some null, from a seed.
    fn sorted_rows(seed: u64, count: usize) -> Vec<(Option<String>, i64)> {
        let mut rng = SplitMix64::new(seed);
        let mut rows: Vec<(Option<String>, i64)> = (0..count)
            .map(|_| {
                let service = match rng.below(6) {
                    0 => None,
                    n => Some(format!("service-{n}")),
                };
                (service, rng.below(1_000_000) as i64)
            })
            .collect();
        rows.sort();
        rows
    }

    #[test]
    fn equal_row_groups_split_into_equal_ranges() {
        let spans: Vec<RowGroupSpan> = (0..12).map(|i| span(Some("a"), i * 10, 100)).collect();
        let points = split_points(&spans, 4);
        assert_eq!(
            points,
            [
                point(Some("a"), 30),
                point(Some("a"), 60),
                point(Some("a"), 90)
            ]
        );
        let mut bytes = [0u64; 4];
        for s in &spans {
            bytes[range_of(&points, &s.start)] += s.bytes;
        }
        assert_eq!(bytes, [300; 4]);
    }

    #[test]
    fn one_range_or_no_bytes_needs_no_boundary() {
        let spans = [span(Some("a"), 0, 10), span(Some("b"), 0, 10)];
        assert!(split_points(&spans, 1).is_empty());
        assert!(split_points(&spans, 0).is_empty());
        assert!(split_points(&[span(Some("a"), 0, 0)], 3).is_empty());
        assert!(split_points(&[], 3).is_empty());
    }

    #[test]
    fn large_or_tied_row_groups_leave_fewer_ranges_never_an_empty_one() {
        let spans = [
            span(Some("a"), 0, 1_000),
            span(Some("b"), 0, 10),
            span(Some("c"), 0, 10),
        ];
        // The first row group carries most bytes: the cuts it holds collapse into one.
        assert_eq!(split_points(&spans, 4), [point(Some("b"), 0)]);
        // All row groups start at one point: nothing to cut between them.
        let same = [span(Some("a"), 5, 10), span(Some("a"), 5, 10)];
        assert!(split_points(&same, 2).is_empty());
        // A cut inside row groups sharing a start moves to the next start.
        let mut tied: Vec<RowGroupSpan> = (0..10).map(|_| span(Some("a"), 5, 100)).collect();
        tied.push(span(Some("b"), 0, 100));
        assert_eq!(split_points(&tied, 2), [point(Some("b"), 0)]);
    }

    #[test]
    fn null_services_sort_first() {
        let spans = [
            span(Some("a"), 0, 10),
            span(None, 50, 10),
            span(Some("b"), 0, 10),
            span(None, 0, 10),
        ];
        assert_eq!(
            split_points(&spans, 2),
            [point(Some("a"), 0)],
            "half the bytes are the null service's"
        );
        assert_eq!(range_of(&[point(Some("a"), 0)], &point(None, i64::MAX)), 0);
        assert_eq!(range_of(&[point(Some("a"), 0)], &point(Some("a"), 0)), 1);
    }

    #[test]
    fn row_group_starts_are_at_or_below_their_first_rows() {
        let rows = sorted_rows(7, 5_000);
        let metadata = sorted_file(&rows, 300, EnabledStatistics::Chunk);
        let spans = row_group_spans(&metadata, &KeyColumns::default());
        assert_eq!(spans.len(), 5_000usize.div_ceil(300));
        for (i, span) in spans.iter().enumerate() {
            let (service, minute) = &rows[i * 300];
            let first = point(service.as_deref(), minute * MINUTE);
            assert!(span.start <= first, "row group {i}: {span:?} > {first:?}");
            if i > 0 {
                assert!(spans[i - 1].start <= span.start, "row group {i}");
            }
            assert!(span.bytes > 0);
        }
    }

    #[test]
    fn row_groups_without_statistics_start_where_the_one_before_did() {
        let rows = sorted_rows(3, 1_000);
        let metadata = sorted_file(&rows, 100, EnabledStatistics::None);
        let spans = row_group_spans(&metadata, &KeyColumns::default());
        assert_eq!(spans.len(), 10);
        assert!(spans.iter().all(|s| s.start == KeyPoint::MIN));
        // Nothing to cut by, so one range: every row in it.
        assert!(split_points(&spans, 4).is_empty());
    }

    #[test]
    fn runs_split_into_ranges_of_about_equal_rows() {
        // Three sorted runs of the same key distribution; 8 ranges.
        let runs: Vec<Vec<(Option<String>, i64)>> =
            (0..3).map(|seed| sorted_rows(seed, 8_000)).collect();
        let spans: Vec<RowGroupSpan> = runs
            .iter()
            .flat_map(|rows| {
                row_group_spans(
                    &sorted_file(rows, 250, EnabledStatistics::Chunk),
                    &KeyColumns::default(),
                )
            })
            .collect();
        let points = split_points(&spans, 8);
        assert_eq!(points.len(), 7, "{points:?}");
        let mut rows_per_range = [0usize; 8];
        for (service, minute) in runs.iter().flatten() {
            rows_per_range[range_of(&points, &point(service.as_deref(), minute * MINUTE))] += 1;
        }
        // 3,000 rows a range, give or take a row group per run.
        for rows in rows_per_range {
            assert!(rows.abs_diff(3_000) <= 3 * 250, "{rows_per_range:?}");
        }
    }

    #[test]
    fn a_range_reads_every_row_group_holding_its_keys_and_few_others() {
        let rows = sorted_rows(5, 4_000);
        let metadata = sorted_file(&rows, 100, EnabledStatistics::Chunk);
        let keys = KeyColumns::default();
        let points = split_points(&row_group_spans(&metadata, &keys), 4);
        assert_eq!(points.len(), 3);
        let mut selected = 0;
        for index in 0..4 {
            let range = KeyRange::of_split(&points, index);
            let chosen = row_groups_in_range(&metadata, &keys, &range);
            selected += chosen.len();
            for (i, group) in rows.chunks(100).enumerate() {
                let holds = group.iter().any(|(service, minute)| {
                    range.contains(service.as_deref().map(str::as_bytes), minute * MINUTE)
                });
                assert!(
                    !holds || chosen.contains(&i),
                    "range {index} needs row group {i}"
                );
            }
        }
        // Each range reads its own row groups and at most one shared at each boundary.
        assert!(selected <= 40 + 2 * 3, "{selected} row groups read for 40");
        // Without statistics every row group is read.
        let blind = sorted_file(&rows, 100, EnabledStatistics::None);
        let range = KeyRange::of_split(&points, 1);
        assert_eq!(row_groups_in_range(&blind, &keys, &range).len(), 40);
    }

    fn any_span() -> impl Strategy<Value = RowGroupSpan> {
        (
            prop::option::of(prop::sample::select(vec!["a", "b", "c", "d"])),
            -5i64..5,
            0u64..1_000,
        )
            .prop_map(|(service, time, bytes)| span(service, time, bytes))
    }

    fn shuffled(spans: &[RowGroupSpan], seed: u64) -> Vec<RowGroupSpan> {
        let mut shuffled = spans.to_vec();
        let mut rng = SplitMix64::new(seed);
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.index(i + 1));
        }
        shuffled
    }

    proptest! {
        #[test]
        fn boundaries_are_a_function_of_the_spans_not_their_order(
            spans in prop::collection::vec(any_span(), 0..40),
            ranges in 1usize..10,
            seed in any::<u64>(),
        ) {
            let points = split_points(&spans, ranges);
            prop_assert_eq!(&split_points(&shuffled(&spans, seed), ranges), &points);
            prop_assert!(points.len() < ranges);
            prop_assert!(points.windows(2).all(|w| w[0] < w[1]));
            // No range without a row group starting in it.
            let mut starts = vec![0usize; points.len() + 1];
            for s in &spans {
                starts[range_of(&points, &s.start)] += 1;
            }
            prop_assert!(spans.is_empty() || starts.iter().all(|&n| n > 0), "{:?}", starts);
        }

        #[test]
        fn distinct_starts_split_into_balanced_ranges(
            sizes in prop::collection::vec(1u64..1_000, 1..60),
            ranges in 2usize..8,
        ) {
            // Distinct starts, and no row group larger than a share.
            let total: u64 = sizes.iter().sum();
            let largest = sizes.iter().copied().max().unwrap_or(0);
            prop_assume!(largest * (ranges as u64) < total);
            let spans: Vec<RowGroupSpan> = sizes
                .iter()
                .enumerate()
                .map(|(i, &bytes)| span(Some(["a", "b"][i % 2]), (i / 2) as i64, bytes))
                .collect();
            let points = split_points(&spans, ranges);
            prop_assert_eq!(points.len(), ranges - 1);
            let mut bytes = vec![0u64; ranges];
            for s in &spans {
                bytes[range_of(&points, &s.start)] += s.bytes;
            }
            let share = total as f64 / ranges as f64;
            for b in &bytes {
                prop_assert!((*b as f64) < share + largest as f64, "{:?}: share {}, largest {}", bytes, share, largest);
            }
        }
    }
}

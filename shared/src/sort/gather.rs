//! Gathering rows from batches into a new batch: the copy at the heart of every sort step.
//!
//! Arrow's `take` and `interleave` gather a list or map column element by element: one index
//! and one small copy per entry of every child. A row's entries are contiguous in its list's
//! child, so here a list-like column (list, large list, map) is gathered one row range at a
//! time; every other column goes to Arrow's kernels. The result is the same array either way.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::builder::BooleanBufferBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, FixedSizeBinaryArray, GenericListArray, MapArray,
    OffsetSizeTrait, PrimitiveArray, RecordBatch, RecordBatchOptions, StringArray, StructArray,
    UInt32Array, make_array,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer};
use arrow_data::transform::MutableArrayData;
use arrow_schema::ArrowError;
use arrow_schema::{DataType, FieldRef, TimeUnit};
use arrow_select::interleave::interleave;
use arrow_select::take::take;

/// Shortest mean stretch (consecutive rows of one batch among the picks) for which copying
/// stretches beats gathering row by row.
const MIN_MEAN_STRETCH: usize = 32;

/// Rows `picks` = (batch, row) of `batches` (which share one schema), in pick order.
///
/// Picks of sorted sequences often come in stretches of consecutive rows of one batch (log
/// files cover successive time windows, so one service's rows of a run follow each other):
/// then each stretch is copied as one slice per column. Otherwise rows are gathered one by
/// one. Both give the same rows.
pub fn gather_rows(
    batches: &[&RecordBatch],
    picks: &[(usize, usize)],
) -> Result<RecordBatch, ArrowError> {
    let stretches = stretches(batches, picks)?;
    if stretches.len() * MIN_MEAN_STRETCH > picks.len() {
        return interleave_rows(batches, picks);
    }
    copy_stretches(batches, &stretches, picks.len())
}

/// The rows of `stretches` (`rows` in all), one slice copy per stretch and column.
fn copy_stretches(
    batches: &[&RecordBatch],
    stretches: &[(usize, Range<usize>)],
    rows: usize,
) -> Result<RecordBatch, ArrowError> {
    by_column(batches, rows, |arrays| {
        gather_child_ranges(arrays, stretches, rows)
    })
}

/// The picks as maximal stretches (batch, rows) of consecutive rows of one batch.
fn stretches(
    batches: &[&RecordBatch],
    picks: &[(usize, usize)],
) -> Result<Vec<(usize, Range<usize>)>, ArrowError> {
    let mut stretches: Vec<(usize, Range<usize>)> = Vec::new();
    for &(batch, row) in picks {
        let rows = batches.get(batch).map_or(0, |b| b.num_rows());
        if row >= rows {
            return Err(ArrowError::InvalidArgumentError(format!(
                "row {row} of batch {batch} out of bounds"
            )));
        }
        match stretches.last_mut() {
            Some((b, range)) if *b == batch && range.end == row => range.end += 1,
            _ => stretches.push((batch, row..row + 1)),
        }
    }
    Ok(stretches)
}

/// Rows `picks` = (batch, row) of `batches` (which share one schema), gathered row by row.
fn interleave_rows(
    batches: &[&RecordBatch],
    picks: &[(usize, usize)],
) -> Result<RecordBatch, ArrowError> {
    by_column(batches, picks.len(), |arrays| gather_column(arrays, picks))
}

/// A batch of `rows` rows whose every column is `gather` of that column of all `batches`.
fn by_column(
    batches: &[&RecordBatch],
    rows: usize,
    gather: impl Fn(&[&dyn Array]) -> Result<ArrayRef, ArrowError>,
) -> Result<RecordBatch, ArrowError> {
    let Some(first) = batches.first() else {
        return Err(ArrowError::InvalidArgumentError(
            "gathering rows from no batches".into(),
        ));
    };
    let schema = first.schema();
    let columns = (0..schema.fields().len())
        .map(|c| {
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            gather(&arrays)
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
}

/// Rows `indices` of `batch`, in index order.
pub fn take_rows(batch: &RecordBatch, indices: &UInt32Array) -> Result<RecordBatch, ArrowError> {
    let mut picks: Option<Vec<(usize, usize)>> = None;
    let columns = batch
        .columns()
        .iter()
        .map(|column| {
            if is_list_like(column.data_type()) {
                let picks = picks.get_or_insert_with(|| {
                    indices.values().iter().map(|&i| (0, i as usize)).collect()
                });
                gather_column(&[column.as_ref()], picks)
            } else {
                take(column.as_ref(), indices, None)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(indices.len())),
    )
}

fn is_list_like(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::List(_) | DataType::LargeList(_) | DataType::Map(_, _)
    )
}

/// One column of the picked rows; `arrays` are that column of every source batch.
fn gather_column(arrays: &[&dyn Array], picks: &[(usize, usize)]) -> Result<ArrayRef, ArrowError> {
    match arrays.first().map(|a| a.data_type()) {
        Some(data_type) if is_list_like(data_type) => {
            let rows: Vec<(usize, Range<usize>)> = picks
                .iter()
                .map(|&(array, row)| (array, row..row + 1))
                .collect();
            gather_child_ranges(arrays, &rows, picks.len())
        }
        Some(DataType::FixedSizeBinary(size)) => gather_fixed_size(*size, arrays, picks),
        _ => interleave(arrays, picks),
    }
}

/// Fixed-size binary rows, one copy per row (Arrow's `interleave` extends a generic builder
/// per row for this type).
fn gather_fixed_size(
    size: i32,
    arrays: &[&dyn Array],
    picks: &[(usize, usize)],
) -> Result<ArrayRef, ArrowError> {
    let width = usize::try_from(size).unwrap_or(0);
    let arrays: Vec<&FixedSizeBinaryArray> =
        arrays.iter().map(|a| a.as_fixed_size_binary()).collect();
    let mut bytes = Vec::with_capacity(picks.len() * width);
    for &(array, row) in picks {
        match arrays.get(array) {
            Some(a) if row < a.len() => bytes.extend_from_slice(a.value(row)),
            _ => {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "row {row} of array {array} out of bounds"
                )));
            }
        }
    }
    let nulls = arrays
        .iter()
        .any(|a| a.nulls().is_some())
        .then(|| NullBuffer::from_iter(picks.iter().map(|&(a, r)| arrays[a].is_valid(r))));
    Ok(Arc::new(FixedSizeBinaryArray::try_new(
        size,
        Buffer::from_vec(bytes),
        nulls,
    )?))
}

/// Row ranges of maps: their entries (one range of the child per range of rows) and validity.
fn gather_maps(
    field: &FieldRef,
    ordered: bool,
    arrays: &[&dyn Array],
    ranges: &[(usize, Range<usize>)],
    length: usize,
) -> Result<ArrayRef, ArrowError> {
    let maps: Vec<&MapArray> = arrays.iter().map(|a| a.as_map()).collect();
    let offsets: Vec<&[i32]> = maps.iter().map(|m| m.value_offsets()).collect();
    let children: Vec<&dyn Array> = maps.iter().map(|m| m.entries() as &dyn Array).collect();
    let (offsets, entries) = gather_entries(&offsets, &children, ranges, length)?;
    Ok(Arc::new(MapArray::try_new(
        Arc::clone(field),
        offsets,
        entries.as_struct().clone(),
        range_nulls(arrays, ranges, length),
        ordered,
    )?))
}

/// Row ranges of lists (or large lists, by `O`): their entries (one range of the child per
/// range of rows) and validity.
fn gather_lists<O: OffsetSizeTrait>(
    field: &FieldRef,
    arrays: &[&dyn Array],
    ranges: &[(usize, Range<usize>)],
    length: usize,
) -> Result<ArrayRef, ArrowError> {
    let lists: Vec<&GenericListArray<O>> = arrays.iter().map(|a| a.as_list::<O>()).collect();
    let offsets: Vec<&[O]> = lists.iter().map(|l| l.value_offsets()).collect();
    let children: Vec<&dyn Array> = lists.iter().map(|l| l.values().as_ref()).collect();
    let (offsets, values) = gather_entries(&offsets, &children, ranges, length)?;
    Ok(Arc::new(GenericListArray::<O>::try_new(
        Arc::clone(field),
        offsets,
        values,
        range_nulls(arrays, ranges, length),
    )?))
}

/// The offsets of rows `ranges` (`length` rows) of lists whose offsets are `offsets`, and their
/// entries gathered from `children`.
fn gather_entries<O: OffsetSizeTrait>(
    offsets: &[&[O]],
    children: &[&dyn Array],
    ranges: &[(usize, Range<usize>)],
    length: usize,
) -> Result<(OffsetBuffer<O>, ArrayRef), ArrowError> {
    let mut gathered = Vec::with_capacity(length + 1);
    let mut entry_ranges = Vec::with_capacity(ranges.len());
    let mut entries = 0usize;
    gathered.push(O::usize_as(0));
    for (list, rows) in ranges {
        let source = offsets
            .get(*list)
            .ok_or_else(|| ArrowError::InvalidArgumentError(format!("no array {list}")))?
            .get(rows.start..=rows.end)
            .ok_or_else(|| out_of_bounds(rows))?;
        let (Some(first), Some(last)) = (source.first(), source.last()) else {
            return Err(out_of_bounds(rows));
        };
        let (first, last) = (first.as_usize(), last.as_usize());
        // The range's last offset is its largest: when it fits, so do the others.
        let end = entries + (last - first);
        O::from_usize(end).ok_or(ArrowError::OffsetOverflowError(end))?;
        gathered.extend(
            source[1..]
                .iter()
                .map(|offset| O::usize_as(entries + (offset.as_usize() - first))),
        );
        if last > first {
            entry_ranges.push((*list, first..last));
            entries += last - first;
        }
    }
    let values = gather_child_ranges(children, &entry_ranges, entries)?;
    Ok((OffsetBuffer::new(gathered.into()), values))
}

/// Element ranges (array, range) of `arrays`, concatenated into one array of `length`; lists
/// and maps at any depth are copied by ranges of their children too.
fn gather_child_ranges(
    arrays: &[&dyn Array],
    ranges: &[(usize, Range<usize>)],
    length: usize,
) -> Result<ArrayRef, ArrowError> {
    match arrays.first().map(|a| a.data_type()) {
        Some(DataType::Utf8) => {
            let strings: Vec<&StringArray> = arrays.iter().map(|a| a.as_string()).collect();
            let (offsets, bytes) = gather_byte_ranges(&strings, ranges, length)?;
            let nulls = range_nulls(arrays, ranges, length);
            // SAFETY: the offsets are the sources' own, shifted by the same amount as their
            // bytes, which are copied whole from value boundaries of valid UTF-8 arrays.
            Ok(Arc::new(unsafe {
                StringArray::new_unchecked(offsets, bytes, nulls)
            }))
        }
        Some(DataType::List(field)) => gather_lists::<i32>(field, arrays, ranges, length),
        Some(DataType::LargeList(field)) => gather_lists::<i64>(field, arrays, ranges, length),
        Some(DataType::Map(field, ordered)) => gather_maps(field, *ordered, arrays, ranges, length),
        Some(DataType::Struct(fields)) => {
            let structs: Vec<&StructArray> = arrays.iter().map(|a| a.as_struct()).collect();
            let columns = (0..fields.len())
                .map(|f| {
                    let children: Vec<&dyn Array> =
                        structs.iter().map(|s| s.column(f).as_ref()).collect();
                    gather_child_ranges(&children, ranges, length)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let nulls = range_nulls(arrays, ranges, length);
            Ok(Arc::new(StructArray::try_new_with_length(
                fields.clone(),
                columns,
                nulls,
                length,
            )?))
        }
        Some(DataType::UInt32) => gather_primitive_ranges::<UInt32Type>(arrays, ranges, length),
        Some(DataType::Int32) => gather_primitive_ranges::<Int32Type>(arrays, ranges, length),
        Some(DataType::Int64) => gather_primitive_ranges::<Int64Type>(arrays, ranges, length),
        Some(DataType::UInt64) => gather_primitive_ranges::<UInt64Type>(arrays, ranges, length),
        Some(DataType::Float64) => gather_primitive_ranges::<Float64Type>(arrays, ranges, length),
        Some(DataType::Timestamp(TimeUnit::Nanosecond, _)) => {
            gather_primitive_ranges::<TimestampNanosecondType>(arrays, ranges, length)
        }
        Some(DataType::FixedSizeBinary(size)) => {
            let width = usize::try_from(*size).unwrap_or(0);
            let mut bytes = Vec::with_capacity(length * width);
            for (array, range) in ranges {
                let data = arrays[*array].as_fixed_size_binary().value_data();
                let slice = data
                    .get(range.start * width..range.end * width)
                    .ok_or_else(|| out_of_bounds(range))?;
                bytes.extend_from_slice(slice);
            }
            let nulls = range_nulls(arrays, ranges, length);
            Ok(Arc::new(FixedSizeBinaryArray::try_new(
                *size,
                Buffer::from_vec(bytes),
                nulls,
            )?))
        }
        _ => {
            // Only the arrays the ranges take from: describing an array as `ArrayData` copies
            // its whole description, and a merge gathers from hundreds of runs' batches.
            let mut slots = vec![usize::MAX; arrays.len()];
            let mut data = Vec::new();
            for (array, _) in ranges {
                if slots[*array] == usize::MAX {
                    slots[*array] = data.len();
                    data.push(arrays[*array].to_data());
                }
            }
            if data.is_empty() {
                let Some(first) = arrays.first() else {
                    return Err(ArrowError::InvalidArgumentError(
                        "gathering rows from no arrays".into(),
                    ));
                };
                return Ok(first.slice(0, 0));
            }
            let mut values = MutableArrayData::new(data.iter().collect(), false, length);
            for (array, range) in ranges {
                values.try_extend(slots[*array], range.start, range.end)?;
            }
            Ok(make_array(values.freeze()))
        }
    }
}

fn out_of_bounds(range: &Range<usize>) -> ArrowError {
    ArrowError::InvalidArgumentError(format!("rows {range:?} out of bounds"))
}

/// Ranges of a primitive array type, one slice copy each.
fn gather_primitive_ranges<T: ArrowPrimitiveType>(
    arrays: &[&dyn Array],
    ranges: &[(usize, Range<usize>)],
    length: usize,
) -> Result<ArrayRef, ArrowError> {
    let mut values: Vec<T::Native> = Vec::with_capacity(length);
    for (array, range) in ranges {
        let source = arrays[*array].as_primitive::<T>().values();
        let slice = source
            .get(range.clone())
            .ok_or_else(|| out_of_bounds(range))?;
        values.extend_from_slice(slice);
    }
    let nulls = range_nulls(arrays, ranges, length);
    let data_type = arrays.first().map(|a| a.data_type().clone());
    let array = PrimitiveArray::<T>::try_new(values.into(), nulls)?;
    Ok(Arc::new(match data_type {
        Some(data_type) => array.with_data_type(data_type),
        None => array,
    }))
}

/// The offsets and bytes of string ranges: one copy of bytes per range.
fn gather_byte_ranges(
    arrays: &[&StringArray],
    ranges: &[(usize, Range<usize>)],
    length: usize,
) -> Result<(OffsetBuffer<i32>, Buffer), ArrowError> {
    let mut byte_length = 0usize;
    for (array, range) in ranges {
        let offsets = arrays[*array].value_offsets();
        byte_length += (offsets[range.end] - offsets[range.start]) as usize;
    }
    let mut offsets = Vec::with_capacity(length + 1);
    let mut bytes = Vec::with_capacity(byte_length);
    offsets.push(0i32);
    for (array, range) in ranges {
        let source = arrays[*array].value_offsets();
        let (first, last) = (source[range.start], source[range.end]);
        let shift = i32::try_from(bytes.len())
            .map_err(|_| ArrowError::OffsetOverflowError(bytes.len()))?
            - first;
        bytes.extend_from_slice(&arrays[*array].value_data()[first as usize..last as usize]);
        offsets.extend(
            source[range.start + 1..=range.end]
                .iter()
                .map(|o| o + shift),
        );
    }
    Ok((OffsetBuffer::new(offsets.into()), Buffer::from_vec(bytes)))
}

/// The validity of the gathered ranges, or `None` when no source has nulls.
fn range_nulls(
    arrays: &[&dyn Array],
    ranges: &[(usize, Range<usize>)],
    length: usize,
) -> Option<NullBuffer> {
    if arrays.iter().all(|a| a.nulls().is_none()) {
        return None;
    }
    let mut validity = BooleanBufferBuilder::new(length);
    for (array, range) in ranges {
        match arrays[*array].nulls() {
            Some(nulls) => validity.append_packed_range(
                nulls.offset() + range.start..nulls.offset() + range.end,
                nulls.buffer().as_slice(),
            ),
            None => validity.append_n(range.len(), true),
        }
    }
    Some(NullBuffer::new(validity.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{
        Int32Builder, Int64Builder, ListBuilder, MapBuilder, StringBuilder, UInt32Builder,
    };
    use arrow_array::{BooleanArray, Int32Array, Int64Array};
    use arrow_schema::{Field, Schema};
    use arrow_select::interleave::interleave_record_batch;

    fn batch(seed: i32) -> RecordBatch {
        let mut map = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        let mut list = ListBuilder::new(Int32Builder::new());
        for row in 0..7 {
            let n = (row + seed) % 4;
            if n == 3 {
                map.append(false).unwrap();
                list.append_null();
                continue;
            }
            for e in 0..n {
                map.keys().append_value(format!("k{e}"));
                if e == 1 {
                    map.values().append_null();
                } else {
                    map.values().append_value(format!("v{seed}-{row}-{e}"));
                }
                list.values().append_value(seed * 100 + row * 10 + e);
            }
            map.append(true).unwrap();
            list.append(true);
        }
        let map: ArrayRef = Arc::new(map.finish());
        let list: ArrayRef = Arc::new(list.finish());
        let id: ArrayRef = Arc::new(Int32Array::from_iter_values((0..7).map(|r| seed * 10 + r)));
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("map", map.data_type().clone(), true),
            Field::new("list", list.data_type().clone(), true),
        ]));
        RecordBatch::try_new(schema, vec![id, map, list]).unwrap()
    }

    #[test]
    fn interleaving_matches_arrow() {
        // Sliced sources too: their offsets do not start at zero.
        let (a, b) = (batch(1), batch(2).slice(2, 5));
        let picks = [
            (1, 4),
            (0, 0),
            (0, 6),
            (1, 0),
            (0, 3),
            (1, 2),
            (0, 2),
            (1, 1),
        ];
        let ours = interleave_rows(&[&a, &b], &picks).unwrap();
        let arrows = interleave_record_batch(&[&a, &b], &picks).unwrap();
        assert_eq!(ours, arrows);
        assert_eq!(interleave_rows(&[&a, &b], &[]).unwrap().num_rows(), 0);
    }

    #[test]
    fn taking_matches_arrow() {
        let a = batch(3).slice(1, 6);
        let indices = UInt32Array::from(vec![5, 0, 3, 3, 1, 4, 2]);
        let ours = take_rows(&a, &indices).unwrap();
        let arrows = arrow_select::take::take_record_batch(&a, &indices).unwrap();
        assert_eq!(ours, arrows);
    }

    type Row = Option<Vec<(String, Option<String>)>>;

    /// A batch of a map column, a list-of-strings column and a list of codes (the values'
    /// lengths) holding the same entries, and flat columns beside them (a boolean one among
    /// them, which no copy of this module's own handles).
    fn nested_batch(rows: &[Row]) -> RecordBatch {
        let mut map = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        let mut list = ListBuilder::new(StringBuilder::new());
        let mut codes = ListBuilder::new(UInt32Builder::new());
        for row in rows {
            match row {
                None => {
                    map.append(false).unwrap();
                    list.append_null();
                    codes.append_null();
                }
                Some(entries) => {
                    for (k, v) in entries {
                        map.keys().append_value(k);
                        map.values().append_option(v.as_deref());
                        list.values().append_option(v.as_deref());
                        codes
                            .values()
                            .append_option(v.as_ref().map(|v| v.len() as u32));
                    }
                    map.append(true).unwrap();
                    list.append(true);
                    codes.append(true);
                }
            }
        }
        let map: ArrayRef = Arc::new(map.finish());
        let list: ArrayRef = Arc::new(list.finish());
        let codes: ArrayRef = Arc::new(codes.finish());
        let sizes: ArrayRef = Arc::new(Int64Array::from_iter(
            rows.iter().map(|r| r.as_ref().map(|e| e.len() as i64)),
        ));
        let names: ArrayRef =
            Arc::new(StringArray::from_iter(rows.iter().map(|r| {
                r.as_ref().and_then(|e| e.first()).map(|(k, _)| k.clone())
            })));
        let tags: ArrayRef = Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                (0..rows.len()).map(|i| (i % 5 != 3).then_some([i as u8, rows.len() as u8])),
                2,
            )
            .unwrap(),
        );
        let empty: ArrayRef = Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| r.as_ref().map(|e| e.is_empty())),
        ));
        let schema = Arc::new(Schema::new(vec![
            Field::new("map", map.data_type().clone(), true),
            Field::new("list", list.data_type().clone(), true),
            Field::new("size", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("tag", DataType::FixedSizeBinary(2), true),
            Field::new("codes", codes.data_type().clone(), true),
            Field::new("empty", DataType::Boolean, true),
        ]));
        RecordBatch::try_new(schema, vec![map, list, sizes, names, tags, codes, empty]).unwrap()
    }

    fn row() -> impl proptest::strategy::Strategy<Value = Row> {
        let entry = ("[a-c]{0,3}", proptest::option::of("[x-zé]{0,4}"));
        proptest::option::weighted(0.8, proptest::collection::vec(entry, 0..4))
    }

    proptest::proptest! {
        #[test]
        fn gathers_what_arrow_gathers(
            a in proptest::collection::vec(row(), 1..12),
            b in proptest::collection::vec(row(), 2..12),
            c in proptest::collection::vec(row(), 1..12),
            picks in proptest::collection::vec((0usize..3, 0usize..1000), 0..40),
            spans in proptest::collection::vec((0usize..3, 0usize..1000, 1usize..12), 0..8),
        ) {
            // The second source is sliced: its offsets do not start at zero. Picks that leave
            // a source out gather from the others alone.
            let (a, b, c) = (nested_batch(&a), nested_batch(&b), nested_batch(&c));
            let b = b.slice(1, b.num_rows() - 1);
            let sources = [&a, &b, &c];
            let picks: Vec<(usize, usize)> = picks
                .into_iter()
                .map(|(s, r)| (s, r % sources[s].num_rows()))
                .collect();
            let ours = interleave_rows(&sources, &picks).unwrap();
            proptest::prop_assert_eq!(&ours, &interleave_record_batch(&sources, &picks).unwrap());
            let indices = UInt32Array::from_iter_values(
                picks.iter().filter(|p| p.0 == 1).map(|p| p.1 as u32),
            );
            // Stretches of consecutive rows take the copying path.
            let stretched: Vec<(usize, usize)> = spans
                .into_iter()
                .flat_map(|(s, start, len)| {
                    let rows = sources[s].num_rows();
                    let start = start % rows;
                    (start..(start + len).min(rows)).map(move |r| (s, r))
                })
                .collect();
            for picks in [&picks, &stretched] {
                let arrows = interleave_record_batch(&sources, picks).unwrap();
                proptest::prop_assert_eq!(&gather_rows(&sources, picks).unwrap(), &arrows);
                let stretches = stretches(&sources, picks).unwrap();
                let copied = copy_stretches(&sources, &stretches, picks.len());
                proptest::prop_assert_eq!(&copied.unwrap(), &arrows);
            }
            let taken = take_rows(&b, &indices).unwrap();
            proptest::prop_assert_eq!(
                &taken,
                &arrow_select::take::take_record_batch(&b, &indices).unwrap()
            );
        }
    }

    /// Lists nested in lists and in structs (Spark and pyarrow write both), large lists and
    /// a list of maps: every depth is gathered by ranges, and must give Arrow's rows.
    #[test]
    fn nested_lists_gather_what_arrow_gathers() {
        use arrow_array::builder::{LargeListBuilder, StructBuilder};
        use arrow_schema::Fields;
        fn batch(seed: i64) -> RecordBatch {
            let mut nested = ListBuilder::new(ListBuilder::new(Int64Builder::new()));
            let mut large = LargeListBuilder::new(StringBuilder::new());
            let fields = Fields::from(vec![Field::new(
                "tags",
                DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
                true,
            )]);
            let mut structs = StructBuilder::from_fields(fields, 0);
            let mut maps = ListBuilder::new(MapBuilder::new(
                None,
                StringBuilder::new(),
                Int64Builder::new(),
            ));
            for row in 0..9i64 {
                let n = (row + seed) % 4;
                for i in 0..n {
                    for j in 0..(i + row) % 3 {
                        nested
                            .values()
                            .values()
                            .append_value(seed * 1000 + row * 10 + j);
                    }
                    nested.values().append(i != 2);
                    large.values().append_value(format!("l{seed}-{row}-{i}"));
                    let map = maps.values();
                    for k in 0..i {
                        map.keys().append_value(format!("k{k}"));
                        map.values().append_value(row * k);
                    }
                    map.append(true).unwrap();
                }
                nested.append(n != 3);
                large.append(n != 1);
                maps.append(row % 5 != 4);
                let tags = structs
                    .field_builder::<ListBuilder<Box<dyn arrow_array::builder::ArrayBuilder>>>(0)
                    .unwrap();
                for i in 0..n {
                    tags.values()
                        .as_any_mut()
                        .downcast_mut::<StringBuilder>()
                        .unwrap()
                        .append_value(format!("t{i}"));
                }
                tags.append(n != 2);
                structs.append(row % 4 != 3);
            }
            let columns: Vec<ArrayRef> = vec![
                Arc::new(nested.finish()),
                Arc::new(large.finish()),
                Arc::new(structs.finish()),
                Arc::new(maps.finish()),
            ];
            RecordBatch::try_from_iter(
                ["nested", "large", "struct", "maps"]
                    .into_iter()
                    .zip(columns),
            )
            .unwrap()
        }
        let (a, b, c) = (batch(1), batch(2).slice(2, 7), batch(3));
        let sources = [&a, &b, &c];
        let stretched: Vec<(usize, usize)> =
            [(1, 0..4), (0, 3..9), (1, 4..7), (0, 0..3), (2, 1..9)]
                .into_iter()
                .flat_map(|(s, rows)| rows.map(move |r| (s, r)))
                .collect();
        let picks = [(2, 8), (0, 1), (1, 6), (0, 8), (2, 0), (1, 0), (0, 4)];
        for picks in [&stretched[..], &picks[..]] {
            let arrows = interleave_record_batch(&sources, picks).unwrap();
            assert_eq!(gather_rows(&sources, picks).unwrap(), arrows);
            let stretches = stretches(&sources, picks).unwrap();
            assert_eq!(
                copy_stretches(&sources, &stretches, picks.len()).unwrap(),
                arrows
            );
        }
        let indices = UInt32Array::from(vec![6, 0, 2, 2, 5, 1]);
        assert_eq!(
            take_rows(&b, &indices).unwrap(),
            arrow_select::take::take_record_batch(&b, &indices).unwrap()
        );
    }

    #[test]
    fn a_row_out_of_bounds_is_an_error() {
        let a = batch(1);
        let map = a.column(1).as_ref();
        assert!(gather_column(&[map], &[(0, 7)]).is_err());
        assert!(gather_column(&[map], &[(1, 0)]).is_err());
        assert!(gather_rows(&[&a], &[(0, 7)]).is_err());
        assert!(gather_rows(&[&a], &[(1, 0)]).is_err());
    }
}

//! The type rules of the schema union: how two encodings of one logical type unify, at any
//! depth, and how an array is converted to the unified type.
//!
//! | inputs hold | unified type |
//! | --- | --- |
//! | `Utf8`, `LargeUtf8`, `Utf8View`, dictionaries of them | `Utf8` |
//! | `Binary`, `LargeBinary`, `BinaryView`, dictionaries of them | `Binary` |
//! | `FixedSizeBinary(n)` only, one width | `FixedSizeBinary(n)` |
//! | `FixedSizeBinary` of several widths, or with another binary | `Binary` |
//! | integers of one signedness | the wider of them |
//! | signed and unsigned integers | `Int64` (a `UInt64` value above 2^63 − 1 makes its file bad) |
//! | `Float16`, `Float32`, `Float64` | the wider of them |
//! | decimals | the precision and scale that hold both (at most 38 digits) |
//! | `Date32`, `Date64` | `Date32`, Parquet's `DATE` (a `Date64` value that is not a whole day makes its file bad) |
//! | `Time32`, `Time64` of any unit | the finer unit |
//! | `Duration` of any unit | the finer unit |
//! | `Timestamp` of any unit and zone, INT96 | the finer unit; the zone when all agree, else `UTC` (values without a zone read as UTC) |
//! | `List`, `LargeList`, `ListView`, `LargeListView`, `FixedSizeList` of other sizes | `List` of the unified element type |
//! | `FixedSizeList(n)` only, one size | `FixedSizeList(n)` of the unified element type |
//! | `Struct` | the union of the fields by name (a field missing from a file is null there) |
//! | `Map` | `Map` of the unified key and value types |
//! | `Null` and any type | that type |
//!
//! Anything else under one name (text in one file, a number in another) is a conflict. Names
//! of nested fields come from the first file that has them; a nested field is nullable in the
//! union when it is in any file (map keys stay required).

use std::sync::Arc;

use crate::options::IntegerTimeUnit;
use arrow_array::cast::AsArray;
use arrow_array::types::Date64Type;
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Int64Array, ListArray, MapArray, StructArray, make_array,
    new_null_array,
};
use arrow_buffer::OffsetBuffer;
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::ArrowError;
use arrow_schema::{DataType, Field, FieldRef, Fields, TimeUnit};

/// Two types that do not unify, and where (a dotted path inside the column, empty at its top).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeConflict {
    /// Path of the nested field that conflicts, empty when the column itself does.
    pub path: String,
    /// The type so far.
    pub have: DataType,
    /// The type that disagrees.
    pub found: DataType,
}

/// The canonical encoding of a type as one file holds it: string and binary encodings, views
/// and dictionaries collapse, lists become `List`, recursively.
pub fn canonical_type(t: &DataType) -> DataType {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::Dictionary(_, v) => canonical_type(v),
        DataType::RunEndEncoded(_, v) => canonical_type(v.data_type()),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f) => DataType::List(canonical_field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(canonical_field(f), *n),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(canonical_field).collect()),
        DataType::Map(entries, sorted) => DataType::Map(canonical_field(entries), *sorted),
        // Parquet's DATE is days: a `Date64` column would be written as plain INT64 (no date
        // type for other readers).
        DataType::Date64 => DataType::Date32,
        other => other.clone(),
    }
}

fn canonical_field(f: &FieldRef) -> FieldRef {
    Arc::new(
        f.as_ref()
            .clone()
            .with_data_type(canonical_type(f.data_type())),
    )
}

/// The union of two canonical types of one column (`have` from earlier files), or where
/// they conflict.
pub fn union_type(have: &DataType, found: &DataType) -> Result<DataType, TypeConflict> {
    union_at("", have, found)
}

fn conflict(path: &str, have: &DataType, found: &DataType) -> TypeConflict {
    TypeConflict {
        path: path.to_string(),
        have: have.clone(),
        found: found.clone(),
    }
}

fn union_at(path: &str, have: &DataType, found: &DataType) -> Result<DataType, TypeConflict> {
    use DataType::*;
    if have == found {
        return Ok(have.clone());
    }
    let unified = match (have, found) {
        (Null, t) | (t, Null) => t.clone(),
        (FixedSizeBinary(_) | Binary, FixedSizeBinary(_) | Binary) => Binary,
        (a, b) if a.is_integer() && b.is_integer() => union_integers(a, b),
        (a, b) if a.is_floating() && b.is_floating() => wider(a, b, float_rank),
        (a, b) if is_decimal(a) && is_decimal(b) => {
            union_decimals(a, b).ok_or_else(|| conflict(path, have, found))?
        }
        (Date32 | Date64, Date32 | Date64) => Date32,
        (Time32(a), Time32(b)) => Time32(finer(a, b)),
        (Time32(_), Time64(u)) | (Time64(u), Time32(_)) => Time64(*u),
        (Time64(a), Time64(b)) => Time64(finer(a, b)),
        (Duration(a), Duration(b)) => Duration(finer(a, b)),
        (Timestamp(a, za), Timestamp(b, zb)) => {
            let zone = if za == zb {
                za.clone()
            } else {
                Some("UTC".into())
            };
            Timestamp(finer(a, b), zone)
        }
        (FixedSizeList(a, n), FixedSizeList(b, m)) if n == m => {
            FixedSizeList(union_field(path, a, b)?, *n)
        }
        (List(a) | FixedSizeList(a, _), List(b) | FixedSizeList(b, _)) => {
            List(union_field(path, a, b)?)
        }
        (Struct(a), Struct(b)) => Struct(union_struct(path, a, b)?),
        (Map(a, sa), Map(b, sb)) => {
            let (Struct(ka), Struct(kb)) = (a.data_type(), b.data_type()) else {
                return Err(conflict(path, have, found));
            };
            if ka.len() != 2 || kb.len() != 2 {
                return Err(conflict(path, have, found));
            }
            let keys = union_field(path, &ka[0], &kb[0])?;
            let keys = Arc::new(keys.as_ref().clone().with_nullable(false));
            let values = union_field(path, &ka[1], &kb[1])?;
            let entries = a
                .as_ref()
                .clone()
                .with_data_type(Struct(Fields::from(vec![keys, values])));
            Map(Arc::new(entries), *sa && *sb)
        }
        _ => return Err(conflict(path, have, found)),
    };
    Ok(unified)
}

fn nested_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn union_field(path: &str, a: &FieldRef, b: &FieldRef) -> Result<FieldRef, TypeConflict> {
    let data_type = union_at(&nested_path(path, a.name()), a.data_type(), b.data_type())?;
    Ok(Arc::new(
        a.as_ref()
            .clone()
            .with_data_type(data_type)
            .with_nullable(a.is_nullable() || b.is_nullable()),
    ))
}

fn union_struct(path: &str, a: &Fields, b: &Fields) -> Result<Fields, TypeConflict> {
    let mut fields: Vec<FieldRef> = Vec::with_capacity(a.len().max(b.len()));
    for fa in a {
        match b.iter().find(|fb| fb.name() == fa.name()) {
            Some(fb) => fields.push(union_field(path, fa, fb)?),
            None => fields.push(Arc::new(fa.as_ref().clone().with_nullable(true))),
        }
    }
    for fb in b
        .iter()
        .filter(|fb| a.iter().all(|fa| fa.name() != fb.name()))
    {
        fields.push(Arc::new(fb.as_ref().clone().with_nullable(true)));
    }
    Ok(fields.into())
}

fn union_integers(a: &DataType, b: &DataType) -> DataType {
    if a.is_signed_integer() == b.is_signed_integer() {
        wider(a, b, |t| t.primitive_width().unwrap_or(8))
    } else {
        DataType::Int64
    }
}

fn float_rank(t: &DataType) -> usize {
    t.primitive_width().unwrap_or(8)
}

fn wider(a: &DataType, b: &DataType, rank: impl Fn(&DataType) -> usize) -> DataType {
    if rank(a) >= rank(b) {
        a.clone()
    } else {
        b.clone()
    }
}

fn is_decimal(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..)
    )
}

fn decimal_parts(t: &DataType) -> Option<(u8, i8)> {
    match t {
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => Some((*p, *s)),
        _ => None,
    }
}

fn union_decimals(a: &DataType, b: &DataType) -> Option<DataType> {
    let ((pa, sa), (pb, sb)) = (decimal_parts(a)?, decimal_parts(b)?);
    let scale = sa.max(sb);
    let integer_digits = (i16::from(pa) - i16::from(sa)).max(i16::from(pb) - i16::from(sb));
    let precision = u8::try_from(integer_digits + i16::from(scale)).ok()?;
    (precision <= 38).then_some(DataType::Decimal128(precision, scale))
}

fn unit_rank(u: &TimeUnit) -> u8 {
    match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    }
}

fn finer(a: &TimeUnit, b: &TimeUnit) -> TimeUnit {
    if unit_rank(a) >= unit_rank(b) { *a } else { *b }
}

/// Milliseconds in a day (a `Date64` value that is a date is a multiple of it).
const MILLIS_PER_DAY: i64 = 86_400_000;

/// `array` converted to `target`, a type it unifies into (see the module's table). A
/// timestamp converted to `Int64` becomes nanoseconds since the epoch (the time column).
/// Fails when a value does not fit (a `UInt64` above `Int64`, a timestamp beyond the
/// nanosecond range, a list of more than 2^31 values).
pub fn conform_array(array: &ArrayRef, target: &DataType) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == target {
        return Ok(Arc::clone(array));
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    match (array.data_type(), target) {
        (DataType::Dictionary(_, values), _) => {
            let plain = cast_with_options(array, values, &options)?;
            conform_array(&plain, target)
        }
        (DataType::Null, _) => Ok(new_null_array(target, array.len())),
        (DataType::Date64, DataType::Date32) => {
            let millis = array.as_primitive::<Date64Type>();
            if let Some(v) = millis.iter().flatten().find(|v| v % MILLIS_PER_DAY != 0) {
                return Err(ArrowError::CastError(format!(
                    "a Date64 value of {v} ms is not a whole day (a date holds days)"
                )));
            }
            cast_with_options(array, target, &options)
        }
        (DataType::Timestamp(_, _), DataType::Int64) => {
            Ok(Arc::new(time_nanos(array, IntegerTimeUnit::Nanoseconds)?))
        }
        // Integer nanoseconds beside timestamps in a configured time column (see
        // `time_union`): the same instants, in the union's unit and zone.
        (DataType::Int64 | DataType::UInt64, DataType::Timestamp(_, zone)) => {
            let nanos = time_nanos(array, IntegerTimeUnit::Nanoseconds)?;
            let plain = DataType::Timestamp(arrow_schema::TimeUnit::Nanosecond, zone.clone());
            let data = nanos.to_data().into_builder().data_type(plain).build()?;
            conform_array(&make_array(data), target)
        }
        (DataType::Timestamp(_, zone), DataType::Timestamp(unit, _)) => {
            // Scale to the unit in the source's own zone, then relabel the zone: the values
            // are instants (or, without a zone, read as UTC) and do not change.
            let scaled =
                cast_with_options(array, &DataType::Timestamp(*unit, zone.clone()), &options)?;
            let data = scaled
                .to_data()
                .into_builder()
                .data_type(target.clone())
                .build()?;
            Ok(make_array(data))
        }
        (DataType::Struct(_), DataType::Struct(fields)) => conform_struct(array, fields),
        (
            DataType::List(_)
            | DataType::LargeList(_)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::FixedSizeList(_, _),
            DataType::List(field),
        ) => conform_list(array, field),
        (DataType::FixedSizeList(_, _), DataType::FixedSizeList(field, size)) => {
            let list = array.as_fixed_size_list();
            let values = conform_array(list.values(), field.data_type())?;
            let list = FixedSizeListArray::try_new(
                Arc::clone(field),
                *size,
                values,
                list.nulls().cloned(),
            )?;
            Ok(Arc::new(list))
        }
        (DataType::Map(_, _), DataType::Map(entries, sorted)) => {
            conform_map(array, entries, *sorted)
        }
        _ => cast_with_options(array, target, &options),
    }
}

fn conform_struct(array: &ArrayRef, fields: &Fields) -> Result<ArrayRef, ArrowError> {
    let source = array.as_struct();
    let columns = fields
        .iter()
        .map(|f| match source.column_by_name(f.name()) {
            Some(column) => conform_array(column, f.data_type()),
            None => Ok(new_null_array(f.data_type(), source.len())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let array = StructArray::try_new_with_length(
        fields.clone(),
        columns,
        source.nulls().cloned(),
        source.len(),
    )?;
    Ok(Arc::new(array))
}

fn conform_list(array: &ArrayRef, field: &FieldRef) -> Result<ArrayRef, ArrowError> {
    let too_long = || ArrowError::ComputeError("a list holds more than 2^31 values".into());
    let (offsets, values): (OffsetBuffer<i32>, ArrayRef) = match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            (list.offsets().clone(), Arc::clone(list.values()))
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            let offsets = list
                .offsets()
                .iter()
                .map(|&o| i32::try_from(o).map_err(|_| too_long()))
                .collect::<Result<Vec<_>, _>>()?;
            (OffsetBuffer::new(offsets.into()), Arc::clone(list.values()))
        }
        DataType::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list();
            let size = usize::try_from(*size).map_err(|_| too_long())?;
            let lengths = std::iter::repeat_n(size, list.len());
            let offsets = OffsetBuffer::<i32>::from_lengths(lengths);
            let start = list.offset() * size;
            let values = list.values().slice(start, list.len() * size);
            (offsets, values)
        }
        _ => {
            // List views: arrow's kernel lays the values out in row order.
            let plain = DataType::List(Arc::new(Field::new(
                "item",
                list_value_type(array.data_type()),
                true,
            )));
            let list = cast_with_options(array, &plain, &CastOptions::default())?;
            let list = list.as_list::<i32>();
            (list.offsets().clone(), Arc::clone(list.values()))
        }
    };
    let values = conform_array(&values, field.data_type())?;
    let list = ListArray::try_new(Arc::clone(field), offsets, values, array.nulls().cloned())?;
    Ok(Arc::new(list))
}

fn list_value_type(t: &DataType) -> DataType {
    match t {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _) => f.data_type().clone(),
        other => other.clone(),
    }
}

fn conform_map(array: &ArrayRef, entries: &FieldRef, sorted: bool) -> Result<ArrayRef, ArrowError> {
    let map = array.as_map();
    let DataType::Struct(children) = entries.data_type() else {
        return Err(ArrowError::InvalidArgumentError(
            "a map's entries are not a struct".into(),
        ));
    };
    let source = map.entries();
    if source.num_columns() != 2 || children.len() != 2 {
        return Err(ArrowError::InvalidArgumentError(
            "a map's entries are not two columns".into(),
        ));
    }
    let columns = (0..2)
        .map(|at| conform_array(source.column(at), children[at].data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    let entries_array = StructArray::try_new(children.clone(), columns, source.nulls().cloned())?;
    let map = MapArray::try_new(
        Arc::clone(entries),
        map.offsets().clone(),
        entries_array,
        map.nulls().cloned(),
        sorted,
    )?;
    Ok(Arc::new(map))
}

/// Nanoseconds since the epoch of a time column of any accepted type (`Int64` and `UInt64`
/// counting `integer_unit`, `Timestamp` of any unit and zone). A value beyond the `Int64`
/// nanosecond range is an error naming it.
pub fn time_nanos(
    array: &dyn Array,
    integer_unit: IntegerTimeUnit,
) -> Result<Int64Array, ArrowError> {
    use arrow_array::types::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType, UInt64Type,
    };
    let overflow = |v: i128| {
        ArrowError::ComputeError(format!(
            "time value {v} is beyond the nanosecond range of Int64"
        ))
    };
    fn scaled<T: arrow_array::ArrowPrimitiveType<Native = i64>>(
        array: &dyn Array,
        factor: i64,
        overflow: impl Fn(i128) -> ArrowError,
    ) -> Result<Int64Array, ArrowError> {
        let values = array.as_primitive::<T>();
        let mut out = Vec::with_capacity(values.len());
        for (i, &v) in values.values().iter().enumerate() {
            if values.is_null(i) {
                out.push(0);
                continue;
            }
            out.push(
                v.checked_mul(factor)
                    .ok_or_else(|| overflow(i128::from(v) * i128::from(factor)))?,
            );
        }
        Ok(Int64Array::new(out.into(), values.nulls().cloned()))
    }
    let factor = integer_unit.nanos();
    match array.data_type() {
        DataType::Int64 if factor == 1 => Ok(array
            .as_primitive::<arrow_array::types::Int64Type>()
            .clone()),
        DataType::Int64 => scaled::<arrow_array::types::Int64Type>(array, factor, overflow),
        DataType::UInt64 if factor != 1 => {
            let signed = time_nanos(array, IntegerTimeUnit::Nanoseconds)?;
            scaled::<arrow_array::types::Int64Type>(&signed, factor, overflow)
        }
        DataType::UInt64 => {
            let values = array.as_primitive::<UInt64Type>();
            let mut out = Vec::with_capacity(values.len());
            for (i, &v) in values.values().iter().enumerate() {
                match i64::try_from(v) {
                    Ok(v) => out.push(v),
                    Err(_) if values.is_null(i) => out.push(0),
                    Err(_) => return Err(overflow(i128::from(v))),
                }
            }
            Ok(Int64Array::new(out.into(), values.nulls().cloned()))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            scaled::<TimestampNanosecondType>(array, 1, overflow)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            scaled::<TimestampMicrosecondType>(array, 1_000, overflow)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            scaled::<TimestampMillisecondType>(array, 1_000_000, overflow)
        }
        DataType::Timestamp(TimeUnit::Second, _) => {
            scaled::<TimestampSecondType>(array, 1_000_000_000, overflow)
        }
        other => Err(ArrowError::CastError(format!(
            "{other} is not a time column type"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use arrow_array::types::Int64Type;
    use arrow_array::{
        BinaryArray, FixedSizeBinaryArray, Float64Array, Int32Array, LargeStringArray, StringArray,
        TimestampMicrosecondArray, TimestampNanosecondArray, UInt64Array,
    };
    use arrow_cast::cast;
    use std::collections::BTreeMap;

    fn field(name: &str, t: DataType) -> FieldRef {
        Arc::new(Field::new(name, t, true))
    }

    fn list(t: DataType) -> DataType {
        DataType::List(field("item", t))
    }

    #[test]
    fn encodings_of_one_logical_type_unify() {
        use DataType::*;
        let ts = |u, z: Option<&str>| Timestamp(u, z.map(Into::into));
        let cases = [
            (Utf8, canonical_type(&LargeUtf8), Utf8),
            (
                Utf8,
                canonical_type(&Dictionary(Box::new(Int8), Box::new(Utf8View))),
                Utf8,
            ),
            (
                FixedSizeBinary(16),
                FixedSizeBinary(16),
                FixedSizeBinary(16),
            ),
            (FixedSizeBinary(16), FixedSizeBinary(8), Binary),
            (FixedSizeBinary(16), canonical_type(&BinaryView), Binary),
            (Int32, Int8, Int32),
            (UInt8, UInt64, UInt64),
            (Int32, UInt32, Int64),
            (Int16, UInt8, Int64),
            (Float32, Float64, Float64),
            (Decimal128(10, 2), Decimal128(12, 4), Decimal128(12, 4)),
            (Date32, canonical_type(&Date64), Date32),
            (
                ts(TimeUnit::Millisecond, Some("UTC")),
                ts(TimeUnit::Microsecond, Some("UTC")),
                ts(TimeUnit::Microsecond, Some("UTC")),
            ),
            (
                ts(TimeUnit::Nanosecond, None),
                ts(TimeUnit::Microsecond, Some("Europe/Berlin")),
                ts(TimeUnit::Nanosecond, Some("UTC")),
            ),
            (
                list(Int32),
                canonical_type(&LargeList(field("element", Int64))),
                list(Int64),
            ),
            (
                list(Utf8),
                canonical_type(&ListView(field("item", LargeUtf8))),
                list(Utf8),
            ),
            (Null, Float64, Float64),
        ];
        for (have, found, want) in cases {
            assert_eq!(
                union_type(&have, &found),
                Ok(want.clone()),
                "{have} + {found}"
            );
        }
    }

    #[test]
    fn structs_union_their_fields_and_conflicts_name_the_path() {
        let a = DataType::Struct(
            vec![
                field("host", DataType::Utf8),
                field("port", DataType::Int32),
            ]
            .into(),
        );
        let b = DataType::Struct(
            vec![
                field("port", DataType::Int64),
                field("zone", DataType::Utf8),
            ]
            .into(),
        );
        let u = union_type(&a, &b).expect("unifies");
        let DataType::Struct(fields) = &u else {
            panic!("{u}")
        };
        let names: Vec<_> = fields
            .iter()
            .map(|f| (f.name().as_str(), f.data_type().clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("host", DataType::Utf8),
                ("port", DataType::Int64),
                ("zone", DataType::Utf8)
            ]
        );
        let bad = DataType::Struct(vec![field("port", DataType::Utf8)].into());
        let conflict = union_type(&list(a), &list(bad)).expect_err("conflict");
        assert_eq!(conflict.path, "item.port");
        assert_eq!(conflict.have, DataType::Int32);
        assert_eq!(conflict.found, DataType::Utf8);
        assert!(union_type(&DataType::Utf8, &DataType::Int64).is_err());
        assert!(union_type(&DataType::Utf8, &DataType::Binary).is_err());
    }

    #[test]
    fn arrays_convert_to_the_union() {
        let big = LargeStringArray::from(vec![Some("a"), None, Some("ccc")]);
        let out = conform_array(&(Arc::new(big) as ArrayRef), &DataType::Utf8).expect("strings");
        assert_eq!(
            out.as_string::<i32>(),
            &StringArray::from(vec![Some("a"), None, Some("ccc")])
        );

        let ids =
            FixedSizeBinaryArray::try_from_iter([[1u8; 16], [2u8; 16]].into_iter()).expect("ids");
        let out = conform_array(&(Arc::new(ids) as ArrayRef), &DataType::Binary).expect("binary");
        assert_eq!(
            out.as_binary::<i32>(),
            &BinaryArray::from(vec![&[1u8; 16][..], &[2u8; 16][..]])
        );

        let micros = TimestampMicrosecondArray::from(vec![Some(1_700_000_000_000_000), None])
            .with_timezone("UTC");
        let out = conform_array(&(Arc::new(micros) as ArrayRef), &DataType::Int64).expect("time");
        assert_eq!(
            out.as_primitive::<Int64Type>().value(0),
            1_700_000_000_000_000_000
        );
        assert!(out.is_null(1));

        let huge = UInt64Array::from(vec![u64::MAX]);
        assert!(conform_array(&(Arc::new(huge) as ArrayRef), &DataType::Int64).is_err());
        let too_far = arrow_array::TimestampSecondArray::from(vec![i64::MAX / 2]);
        assert!(time_nanos(&too_far, IntegerTimeUnit::Nanoseconds).is_err());
        // Integers count their unit; timestamps keep theirs whatever it is.
        let seconds = Int64Array::from(vec![Some(1_795_946_400), None]);
        let nanos = time_nanos(&seconds, IntegerTimeUnit::Seconds).expect("in range");
        assert_eq!(nanos.value(0), 1_795_946_400_000_000_000);
        assert!(nanos.is_null(1));
        let millis = UInt64Array::from(vec![1_795_946_400_000u64]);
        let nanos = time_nanos(&millis, IntegerTimeUnit::Milliseconds).expect("in range");
        assert_eq!(nanos.value(0), 1_795_946_400_000_000_000);
        let stamped = TimestampMicrosecondArray::from(vec![1_795_946_400_000_000]);
        let nanos = time_nanos(&stamped, IntegerTimeUnit::Seconds).expect("in range");
        assert_eq!(nanos.value(0), 1_795_946_400_000_000_000);
        let millis_as_seconds = Int64Array::from(vec![1_795_946_400_000]);
        assert!(time_nanos(&millis_as_seconds, IntegerTimeUnit::Seconds).is_err());
    }

    // --- the property: random schemas mixing the type families -----------------------------

    /// A value as a reader sees it, whatever the encoding.
    #[derive(Debug, Clone, PartialEq)]
    enum Value {
        Int(i64),
        Float(u64),
        Text(String),
        Bytes(Vec<u8>),
        Nanos(i64),
        List(Vec<Option<Value>>),
        Struct(BTreeMap<String, Value>),
    }

    #[derive(Debug, Clone)]
    enum Family {
        Text,
        Bytes,
        Int,
        Float,
        Time,
        List(Box<Family>),
        Struct(Vec<(String, Family)>),
    }

    fn family(rng: &mut SplitMix64, depth: u32) -> Family {
        match rng.index(if depth < 2 { 7 } else { 5 }) {
            0 => Family::Text,
            1 => Family::Bytes,
            2 => Family::Int,
            3 => Family::Float,
            4 => Family::Time,
            5 => Family::List(Box::new(family(rng, depth + 1))),
            _ => Family::Struct(
                (0..1 + rng.index(3))
                    .map(|i| (format!("f{i}"), family(rng, depth + 1)))
                    .collect(),
            ),
        }
    }

    fn pick<T: Clone>(rng: &mut SplitMix64, items: &[T]) -> T {
        items[rng.index(items.len())].clone()
    }

    /// One file's array of `rows` values of `family`, in a random encoding, and its values.
    fn encoded(
        rng: &mut SplitMix64,
        family: &Family,
        rows: usize,
    ) -> (ArrayRef, Vec<Option<Value>>) {
        let null = |rng: &mut SplitMix64| rng.index(5) == 0;
        match family {
            Family::Text => {
                let values: Vec<Option<String>> = (0..rows)
                    .map(|_| (!null(rng)).then(|| format!("s{}", rng.index(20))))
                    .collect();
                let plain: ArrayRef = Arc::new(StringArray::from(values.clone()));
                let dictionary =
                    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
                let to = pick(
                    rng,
                    &[
                        DataType::Utf8,
                        DataType::LargeUtf8,
                        DataType::Utf8View,
                        dictionary,
                    ],
                );
                let array = cast(&plain, &to).expect("text encoding");
                (
                    array,
                    values.into_iter().map(|v| v.map(Value::Text)).collect(),
                )
            }
            Family::Bytes => {
                let width = pick(rng, &[4usize, 16]);
                let values: Vec<Option<Vec<u8>>> = (0..rows)
                    .map(|_| (!null(rng)).then(|| vec![rng.next_u64() as u8; width]))
                    .collect();
                let plain: ArrayRef =
                    Arc::new(BinaryArray::from_iter(values.iter().map(|v| v.as_deref())));
                let array = match rng.index(4) {
                    0 => plain,
                    1 => cast(&plain, &DataType::LargeBinary).expect("large"),
                    2 => cast(&plain, &DataType::BinaryView).expect("view"),
                    _ => Arc::new(
                        FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                            values.iter().map(|v| v.as_deref()),
                            width as i32,
                        )
                        .expect("fixed"),
                    ),
                };
                (
                    array,
                    values.into_iter().map(|v| v.map(Value::Bytes)).collect(),
                )
            }
            Family::Int => {
                let values: Vec<Option<i32>> = (0..rows)
                    .map(|_| (!null(rng)).then(|| rng.below(100) as i32))
                    .collect();
                let plain: ArrayRef = Arc::new(Int32Array::from(values.clone()));
                use DataType::*;
                let to = pick(
                    rng,
                    &[Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64],
                );
                let array = cast(&plain, &to).expect("int encoding");
                (
                    array,
                    values
                        .into_iter()
                        .map(|v| v.map(|v| Value::Int(v.into())))
                        .collect(),
                )
            }
            Family::Float => {
                let values: Vec<Option<f64>> = (0..rows)
                    .map(|_| (!null(rng)).then(|| rng.below(400) as f64 / 4.0))
                    .collect();
                let plain: ArrayRef = Arc::new(Float64Array::from(values.clone()));
                let to = pick(rng, &[DataType::Float32, DataType::Float64]);
                let array = cast(&plain, &to).expect("float encoding");
                (
                    array,
                    values
                        .into_iter()
                        .map(|v| v.map(|v| Value::Float(v.to_bits())))
                        .collect(),
                )
            }
            Family::Time => {
                let values: Vec<Option<i64>> = (0..rows)
                    .map(|_| {
                        (!null(rng)).then(|| {
                            1_700_000_000_000_000_000 + (rng.below(3600) as i64) * 1_000_000_000
                        })
                    })
                    .collect();
                let plain: ArrayRef = Arc::new(TimestampNanosecondArray::from(values.clone()));
                let unit = pick(
                    rng,
                    &[
                        TimeUnit::Second,
                        TimeUnit::Millisecond,
                        TimeUnit::Microsecond,
                        TimeUnit::Nanosecond,
                    ],
                );
                let zone = pick(rng, &[None, Some("UTC"), Some("+02:00")]);
                let array = cast(&plain, &DataType::Timestamp(unit, None)).expect("unit");
                // The same instants labelled with a zone (a cast would shift them).
                let zoned = DataType::Timestamp(unit, zone.map(Into::into));
                let data = array
                    .to_data()
                    .into_builder()
                    .data_type(zoned)
                    .build()
                    .expect("zone");
                let array = arrow_array::make_array(data);
                (
                    array,
                    values.into_iter().map(|v| v.map(Value::Nanos)).collect(),
                )
            }
            Family::List(element) => {
                let lengths: Vec<usize> = (0..rows).map(|_| rng.index(3)).collect();
                let (child, child_values) = encoded(rng, element, lengths.iter().sum());
                let offsets = OffsetBuffer::<i32>::from_lengths(lengths.iter().copied());
                let item = Arc::new(Field::new("item", child.data_type().clone(), true));
                let plain: ArrayRef = Arc::new(ListArray::new(item.clone(), offsets, child, None));
                let array = match rng.index(3) {
                    0 => plain,
                    1 => cast(&plain, &DataType::LargeList(item)).expect("large list"),
                    _ => cast(&plain, &DataType::ListView(item)).expect("list view"),
                };
                let mut rest = child_values.into_iter();
                let values = lengths
                    .iter()
                    .map(|&n| Some(Value::List(rest.by_ref().take(n).collect())))
                    .collect();
                (array, values)
            }
            Family::Struct(children) => {
                // Each file holds a random, non-empty subset of the fields (schema evolution).
                let mut fields = Vec::new();
                let mut arrays = Vec::new();
                let mut values: Vec<BTreeMap<String, Value>> = vec![BTreeMap::new(); rows];
                for (name, family) in children {
                    if !fields.is_empty() && rng.index(3) == 0 {
                        continue;
                    }
                    let (array, column) = encoded(rng, family, rows);
                    fields.push(Field::new(name, array.data_type().clone(), true));
                    arrays.push(array);
                    for (row, value) in column.into_iter().enumerate() {
                        if let Some(value) = value {
                            values[row].insert(name.clone(), value);
                        }
                    }
                }
                let array: ArrayRef = Arc::new(StructArray::new(fields.into(), arrays, None));
                (
                    array,
                    values.into_iter().map(|v| Some(Value::Struct(v))).collect(),
                )
            }
        }
    }

    /// The values of a converted array, read back.
    fn read_back(array: &dyn Array, row: usize) -> Option<Value> {
        if array.is_null(row) {
            return None;
        }
        Some(match array.data_type() {
            DataType::Utf8 => Value::Text(array.as_string::<i32>().value(row).to_string()),
            DataType::Binary => Value::Bytes(array.as_binary::<i32>().value(row).to_vec()),
            DataType::FixedSizeBinary(_) => {
                Value::Bytes(array.as_fixed_size_binary().value(row).to_vec())
            }
            DataType::Float32 | DataType::Float64 | DataType::Float16 => {
                let f = cast(&array.slice(row, 1), &DataType::Float64).expect("float");
                Value::Float(
                    f.as_primitive::<arrow_array::types::Float64Type>()
                        .value(0)
                        .to_bits(),
                )
            }
            DataType::Timestamp(_, _) => {
                let one = time_nanos(&array.slice(row, 1), IntegerTimeUnit::Nanoseconds);
                Value::Nanos(one.expect("nanos").value(0))
            }
            t if t.is_integer() => {
                let i = cast(&array.slice(row, 1), &DataType::Int64).expect("int");
                Value::Int(i.as_primitive::<Int64Type>().value(0))
            }
            DataType::List(_) => {
                let list = array.as_list::<i32>().value(row);
                Value::List(
                    (0..list.len())
                        .map(|i| read_back(list.as_ref(), i))
                        .collect(),
                )
            }
            DataType::Struct(fields) => {
                let s = array.as_struct();
                Value::Struct(
                    fields
                        .iter()
                        .zip(s.columns())
                        .filter_map(|(f, c)| {
                            read_back(c.as_ref(), row).map(|v| (f.name().clone(), v))
                        })
                        .collect(),
                )
            }
            other => panic!("unexpected type in the union: {other}"),
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Files holding one random logical schema in random encodings unify, and every
        /// file's values read back unchanged from its arrays converted to the union.
        #[test]
        fn random_encodings_of_one_schema_unify_and_keep_their_values(seed in proptest::prelude::any::<u64>()) {
            let mut rng = SplitMix64::new(seed);
            let family = family(&mut rng, 0);
            let files: Vec<(ArrayRef, Vec<Option<Value>>)> =
                (0..2 + rng.index(3)).map(|_| encoded(&mut rng, &family, 6)).collect();
            let mut union = canonical_type(files[0].0.data_type());
            for (array, _) in &files[1..] {
                union = union_type(&union, &canonical_type(array.data_type()))
                    .unwrap_or_else(|c| panic!("{family:?}: {c:?}"));
            }
            for (array, values) in &files {
                let converted = conform_array(array, &union)
                    .unwrap_or_else(|e| panic!("{} to {union}: {e}", array.data_type()));
                proptest::prop_assert_eq!(converted.data_type(), &union);
                let back: Vec<Option<Value>> =
                    (0..converted.len()).map(|r| read_back(converted.as_ref(), r)).collect();
                proptest::prop_assert_eq!(&back, values, "{} to {}", array.data_type(), union);
            }
        }
    }

    #[test]
    fn dates_of_whole_days_become_parquet_dates_and_others_make_the_file_bad() {
        use arrow_array::{Date32Array, Date64Array};
        let days: ArrayRef = Arc::new(Date64Array::from(vec![
            Some(19_844 * MILLIS_PER_DAY),
            None,
            Some(-3 * MILLIS_PER_DAY),
        ]));
        let target = canonical_type(days.data_type());
        assert_eq!(target, DataType::Date32);
        let dates = conform_array(&days, &target).expect("whole days");
        let want: ArrayRef = Arc::new(Date32Array::from(vec![Some(19_844), None, Some(-3)]));
        assert_eq!(&dates, &want);
        let instant: ArrayRef = Arc::new(Date64Array::from(vec![19_844 * MILLIS_PER_DAY + 1]));
        let refused = conform_array(&instant, &target).expect_err("not a whole day");
        assert!(refused.to_string().contains("not a whole day"), "{refused}");
    }
}

//! Schema union across inputs: one canonical output schema, and per-file conformance to it.
//!
//! Encodings of one logical type unify at any depth by the rules of [`crate::input::type_union`]
//! (strings become Utf8, binaries Binary, lists List, integers and floats widen, timestamps
//! take the finer unit). The time column is always Int64 nanoseconds since the epoch in the
//! union, whatever type each input used. A column missing from a file is null for its rows.
//! Genuinely conflicting types under one name make one of the files a bad input, with a reason
//! naming both types and the other file: in a job, the file whose types fewer of the
//! partition's rows agree with ([`unify_weighted`]); among runs, the later one ([`unify`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::input::column_path::{field_at, resolve};
use crate::input::type_union::{canonical_type, conform_array, union_type};
use crate::options::{IntegerTimeUnit, KeyColumns};

/// The canonical output schema and where the key columns are in it.
#[derive(Debug, Clone)]
pub struct UnifiedSchema {
    /// The output schema (every field nullable).
    pub schema: SchemaRef,
    /// Index of the service column, when the key is (service, time) and an input has it.
    pub service_index: Option<usize>,
    /// Where the time column is: a top-level column's index, or the indexes of a path into
    /// structs.
    pub time_path: Vec<usize>,
    /// What the time column's integers count, when they are integers.
    pub time_unit: IntegerTimeUnit,
    /// Where the sort key's columns that some input has are, in key order: a top-level
    /// column's index, or the indexes of a path into structs.
    pub sort_paths: Vec<Vec<usize>>,
}

impl UnifiedSchema {
    /// Whether some input has a key column other than the time column (under a (service,
    /// time) key: the service, top-level or inside a struct).
    pub fn has_service(&self) -> bool {
        (self.sort_paths.iter()).any(|path| *path != self.time_path)
    }
}

/// A file rejected by the union, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaRejection {
    /// Position of the file in the list given to [`unify`].
    pub position: usize,
    /// Why it cannot join the union.
    pub reason: String,
}

fn is_string_like(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, v) => is_string_like(v),
        _ => false,
    }
}

/// The type of the output's time column in today's lake (the default time column):
/// nanoseconds since the epoch. A configured time column keeps its inputs' logical type
/// ([`time_union`]).
pub const TIME_TYPE: DataType = DataType::Int64;

/// The output type of a configured time column of types `have` and `found`: Int64 (from
/// Int64 or UInt64 nanoseconds) while every input has integers, else a Timestamp of the
/// finest unit among them, integers counting as nanoseconds, in their zone when all agree
/// (else `UTC`).
pub fn time_union(have: &DataType, found: &DataType) -> DataType {
    use arrow_schema::TimeUnit;
    match (have, found) {
        (DataType::Timestamp(..), DataType::Timestamp(..)) => union_type(have, found).unwrap_or(
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        ),
        (DataType::Timestamp(_, zone), _) | (_, DataType::Timestamp(_, zone)) => {
            DataType::Timestamp(TimeUnit::Nanosecond, zone.clone())
        }
        _ => TIME_TYPE,
    }
}

/// True for the accepted time column types: Int64 and UInt64 nanoseconds, Timestamp of any
/// unit with or without a zone (INT96 reads as Timestamp(Nanosecond)).
pub fn is_time_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int64 | DataType::UInt64 | DataType::Timestamp(_, _)
    )
}

/// The reason a file without the time column is a bad input.
pub fn missing_time_column(keys: &KeyColumns) -> String {
    format!("required time column {:?} is missing", keys.time)
}

/// The start of the reason a file whose time column has a type no time has is a bad input.
fn another_type_prefix(keys: &KeyColumns) -> String {
    format!("time column {:?} has type ", keys.time)
}

/// The reason a file whose time column has a type no time has is a bad input.
fn time_column_of_another_type(keys: &KeyColumns, found: &DataType) -> String {
    format!(
        "{}{found}; expected Int64 or UInt64 nanoseconds, or a Timestamp",
        another_type_prefix(keys)
    )
}

/// How the reason for an integer time outside the hour ends when another unit would put it
/// inside (see [`another_unit_hint`]).
const TIME_UNIT_HINT_END: &str = "check the time unit setting (--time-unit, OURIOS_TIME_UNIT)";

/// The end of the reason for an integer time outside the hour that counted in `unit` lies
/// inside it.
pub fn another_unit_hint(unit: IntegerTimeUnit) -> String {
    format!(
        "; counted in {} it lies inside: {TIME_UNIT_HINT_END}",
        unit.name()
    )
}

/// Whether a file's reason for being a bad input is the time column settings' rather than
/// the file's: the column missing, of a type no time has, or integers that lie in the hour in
/// another unit. When every input that holds rows says so, a setting is wrong.
pub fn is_time_setting_reason(reason: &str, keys: &KeyColumns) -> bool {
    reason == missing_time_column(keys)
        || reason.starts_with(&another_type_prefix(keys))
        || reason.ends_with(TIME_UNIT_HINT_END)
}

/// Checks the key columns of one file's schema; `Err` holds the reason it is a bad input.
pub fn check_key_columns(schema: &Schema, keys: &KeyColumns) -> std::result::Result<(), String> {
    let mut seen = HashMap::new();
    for f in schema.fields() {
        if seen.insert(f.name().as_str(), ()).is_some() {
            return Err(format!("column {:?} appears twice", f.name()));
        }
    }
    let time = resolve(schema.fields(), &keys.time)
        .and_then(|path| field_at(schema.fields(), &path))
        .ok_or_else(|| missing_time_column(keys))?;
    if !is_time_type(time.data_type()) {
        return Err(time_column_of_another_type(keys, time.data_type()));
    }
    // Today's service column is a string; a configured key column may have any type.
    let service = (keys.service == crate::options::DEFAULT_SERVICE_COLUMN).then_some(&keys.service);
    for (name, what) in [(service, "service"), (Some(&keys.tenant), "tenant")] {
        let Some(name) = name else {
            continue;
        };
        // An all-null column that its writer typed as Null (pyarrow's `from_pylist` and pandas
        // do) holds no value to disagree with: it unifies as strings.
        if let Ok(f) = schema.field_with_name(name)
            && !is_string_like(f.data_type())
            && f.data_type() != &DataType::Null
        {
            return Err(format!(
                "{what} column {name:?} has type {}; expected a string type",
                f.data_type()
            ));
        }
    }
    Ok(())
}

/// Why the other file's type stands, in a conflict's reason.
const PRECEDENCE: &str =
    ", whose types more of the partition's rows agree with (or as many, and it comes first)";

/// Unions the schemas of the inputs, in ordinal order: a file whose types conflict with the
/// union of the files before it is rejected. Returns the union of the accepted files (`None`
/// when none is accepted) and the rejected ones.
pub fn unify(
    schemas: &[(&str, &Schema)],
    keys: &KeyColumns,
) -> (Option<UnifiedSchema>, Vec<SchemaRejection>) {
    let order: Vec<usize> = (0..schemas.len()).collect();
    unify_in_order(schemas, &order, keys, usize::MAX)
}

/// Unions the schemas of the inputs, each with a weight (its rows; a previous compacted
/// output weighs most). Where types conflict, the types that more weight agrees with win: each
/// distinct schema is backed by the weight of every file whose schema unions with it, and the
/// files are taken in order of that backing, then of their own weight, then of their position.
/// So one stray file cannot get the many rows around it quarantined because its name sorts
/// first. A file that would take the union past `max_leaves` leaf columns
/// ([`BudgetPlan::leaf_limit`](crate::budget::BudgetPlan::leaf_limit)) is rejected too. The
/// union's columns come in ordinal order, as with [`unify`]; rejections are in ordinal order.
pub fn unify_weighted(
    schemas: &[(&str, &Schema, u64)],
    keys: &KeyColumns,
    max_leaves: usize,
) -> (Option<UnifiedSchema>, Vec<SchemaRejection>) {
    let plain: Vec<(&str, &Schema)> = schemas.iter().map(|&(n, s, _)| (n, s)).collect();
    // Distinct schemas (most partitions have one or a few), each with a file and its weight.
    let mut groups: Vec<(usize, u64)> = Vec::new();
    let mut group_of = Vec::with_capacity(schemas.len());
    for (i, &(_, schema, weight)) in schemas.iter().enumerate() {
        match groups.iter().position(|&(r, _)| schemas[r].1 == schema) {
            Some(g) => {
                groups[g].1 = groups[g].1.saturating_add(weight);
                group_of.push(g);
            }
            None => {
                groups.push((i, weight));
                group_of.push(groups.len() - 1);
            }
        }
    }
    let backing: Vec<u64> = if groups.len() <= MAX_SCHEMAS_COMPARED {
        let agree = |a: usize, b: usize| {
            a == b
                || unify_in_order(&plain, &[a, b], keys, usize::MAX)
                    .1
                    .is_empty()
        };
        (groups.iter())
            .map(|&(r, _)| {
                (groups.iter())
                    .filter(|&&(o, _)| agree(r, o))
                    .fold(0u64, |sum, &(_, w)| sum.saturating_add(w))
            })
            .collect()
    } else {
        groups.iter().map(|&(_, w)| w).collect()
    };
    let mut order: Vec<usize> = (0..schemas.len()).collect();
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(backing[group_of[i]]),
            std::cmp::Reverse(schemas[i].2),
            i,
        )
    });
    let (_, mut rejected) = unify_in_order(&plain, &order, keys, max_leaves);
    let accepted: Vec<usize> = (0..schemas.len())
        .filter(|i| rejected.iter().all(|r| r.position != *i))
        .collect();
    let (unified, more) = unify_in_order(&plain, &accepted, keys, max_leaves);
    rejected.extend(more);
    rejected.sort_by_key(|r| r.position);
    (unified, rejected)
}

/// Leaf columns of a column of type `t` (a struct's fields, a list's element, a map's keys
/// and values).
fn leaves_of(t: &DataType) -> usize {
    match t {
        DataType::Struct(fields) if !fields.is_empty() => {
            fields.iter().map(|f| leaves_of(f.data_type())).sum()
        }
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => leaves_of(f.data_type()),
        DataType::Dictionary(_, v) => leaves_of(v),
        _ => 1,
    }
}

/// Distinct schemas compared pairwise to weigh a conflict; beyond it, each schema is backed
/// by its own files' weight alone.
const MAX_SCHEMAS_COMPARED: usize = 256;

/// Unions the schemas of the inputs taken in `order` (positions in `schemas`).
fn unify_in_order(
    schemas: &[(&str, &Schema)],
    order: &[usize],
    keys: &KeyColumns,
    max_leaves: usize,
) -> (Option<UnifiedSchema>, Vec<SchemaRejection>) {
    let mut fields: Vec<Field> = Vec::new();
    let mut union_leaves = 0usize;
    // Per column: its index and the input its type was last set by.
    let mut by_name: HashMap<String, (usize, String)> = HashMap::new();
    let mut rejected = Vec::new();

    'files: for &position in order {
        let Some((file, schema)) = schemas.get(position) else {
            continue;
        };
        if let Err(reason) = check_key_columns(schema, keys) {
            rejected.push(SchemaRejection { position, reason });
            continue;
        }
        // First pass: the file's contribution, or its conflict, without changing the union.
        let mut changes: Vec<(Option<usize>, Field)> = Vec::new();
        for f in schema.fields() {
            let is_time = f.name() == &keys.time;
            let t = if is_time && keys.time_in_nanos() {
                TIME_TYPE
            } else if is_time {
                time_union(f.data_type(), f.data_type())
            } else if f.data_type() == &DataType::Null
                && ((f.name() == &keys.service
                    && keys.service == crate::options::DEFAULT_SERVICE_COLUMN)
                    || f.name() == &keys.tenant)
            {
                DataType::Utf8
            } else {
                canonical_type(f.data_type())
            };
            match by_name.get(f.name()) {
                Some((i, earlier)) => {
                    let have = fields[*i].data_type();
                    let integer = |t: &DataType| matches!(t, DataType::Int64 | DataType::UInt64);
                    if is_time
                        && keys.time_unit != IntegerTimeUnit::Nanoseconds
                        && integer(have) != integer(&t)
                    {
                        // Integers in another unit are kept as they are, so they cannot join
                        // timestamps in one column.
                        let reason = format!(
                            "time column {:?} has type {} here but {} in input {earlier}, and \
                             integers counting {} are not mixed with timestamps{PRECEDENCE}",
                            f.name(),
                            f.data_type(),
                            have,
                            keys.time_unit.name(),
                        );
                        rejected.push(SchemaRejection { position, reason });
                        continue 'files;
                    }
                    let union = if is_time {
                        Ok(time_union(have, &t))
                    } else {
                        union_type(have, &t)
                    };
                    match union {
                        Ok(u) if &u == have => {}
                        Ok(u) => changes.push((Some(*i), fields[*i].clone().with_data_type(u))),
                        Err(conflict) => {
                            let reason = if conflict.path.is_empty() {
                                format!(
                                    "column {:?} has type {} here but {} in input {earlier}{PRECEDENCE}",
                                    f.name(),
                                    f.data_type(),
                                    have
                                )
                            } else {
                                format!(
                                    "column {:?}: field {:?} has type {} here but {} in input {earlier}{PRECEDENCE}",
                                    f.name(),
                                    conflict.path,
                                    conflict.found,
                                    conflict.have
                                )
                            };
                            rejected.push(SchemaRejection { position, reason });
                            continue 'files;
                        }
                    }
                }
                None if f.name() == &keys.time => {
                    changes.push((None, Field::new(f.name(), t, true)))
                }
                None => changes.push((
                    None,
                    Field::new(f.name(), t, true).with_metadata(f.metadata().clone()),
                )),
            }
        }
        let leaves = changes.iter().fold(union_leaves, |sum, (index, field)| {
            let before = index.map_or(0, |i| leaves_of(fields[i].data_type()));
            (sum + leaves_of(field.data_type())).saturating_sub(before)
        });
        if leaves > max_leaves {
            let reason = format!(
                "with this file the partition's columns would number {leaves} leaves, more than \
                 the {max_leaves} the memory budget allows (each leaf holds a reader and a writer)"
            );
            rejected.push(SchemaRejection { position, reason });
            continue 'files;
        }
        union_leaves = leaves;
        for (index, field) in changes {
            let name = field.name().clone();
            match index {
                Some(i) => {
                    fields[i] = field;
                    by_name.insert(name, (i, (*file).to_string()));
                }
                None => {
                    by_name.insert(name, (fields.len(), (*file).to_string()));
                    fields.push(field);
                }
            }
        }
    }

    let fields = Fields::from(fields);
    let Some(time_path) = resolve(&fields, &keys.time) else {
        return (None, rejected);
    };
    let service_index = (keys.is_service_time())
        .then(|| by_name.get(&keys.service).map(|(i, _)| *i))
        .flatten();
    let sort_paths = (keys.sort.iter())
        .filter_map(|c| resolve(&fields, c))
        .collect();
    let unified = UnifiedSchema {
        schema: Arc::new(Schema::new(fields)),
        service_index,
        time_unit: keys.time_unit,
        time_path,
        sort_paths,
    };
    (Some(unified), rejected)
}

/// Conforms one decoded batch to the unified schema: casts encodings, fills missing columns
/// with nulls and puts the columns in the output order.
pub fn conform(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let columns = target
        .fields()
        .iter()
        .map(|field| conform_column(batch, field))
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(Arc::clone(target), columns)
        .map_err(|e| Error::arrow("assembling a conformed batch", e))
}

/// The entries field, the key and value fields, and the ordering of a map type.
pub fn map_fields(data_type: &DataType) -> Option<(&FieldRef, &Fields, bool)> {
    let DataType::Map(entries, sorted) = data_type else {
        return None;
    };
    let DataType::Struct(children) = entries.data_type() else {
        return None;
    };
    (children.len() == 2).then_some((entries, children, *sorted))
}

/// The map type `data_type` with its key and value fields' types changed by `child_type`
/// (given each child's position, 0 for keys and 1 for values); names, nullability and
/// ordering stay. `None` when `data_type` is not a map.
pub fn map_with_child_types(
    data_type: &DataType,
    child_type: impl Fn(usize, &FieldRef) -> DataType,
) -> Option<DataType> {
    let (entries, children, sorted) = map_fields(data_type)?;
    let children: Fields = children
        .iter()
        .enumerate()
        .map(|(at, child)| Arc::new(child.as_ref().clone().with_data_type(child_type(at, child))))
        .collect();
    let entries = entries
        .as_ref()
        .clone()
        .with_data_type(DataType::Struct(children));
    Some(DataType::Map(Arc::new(entries), sorted))
}

/// The column of `batch` named like `field`, converted to its type (all nulls when missing;
/// see [`conform_array`]).
pub fn conform_column(batch: &RecordBatch, field: &Field) -> Result<ArrayRef> {
    match batch.column_by_name(field.name()) {
        Some(col) => conform_array(col, field.data_type())
            .map_err(|e| Error::arrow(format!("converting column {:?}", field.name()), e)),
        None => Ok(new_null_array(field.data_type(), batch.num_rows())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;
    use arrow_schema::TimeUnit;

    fn schema(fields: Vec<(&str, DataType)>) -> Schema {
        Schema::new(
            fields
                .into_iter()
                .map(|(n, t)| Field::new(n, t, true))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn a_configured_time_column_keeps_its_inputs_type_at_the_finest_unit() {
        let ts = |unit, zone: Option<&str>| DataType::Timestamp(unit, zone.map(Into::into));
        let (ms, us, ns) = (
            TimeUnit::Millisecond,
            TimeUnit::Microsecond,
            TimeUnit::Nanosecond,
        );
        for (have, found, union) in [
            (DataType::Int64, DataType::UInt64, DataType::Int64),
            (
                ts(ms, Some("UTC")),
                ts(us, Some("UTC")),
                ts(us, Some("UTC")),
            ),
            (ts(ms, None), ts(ms, None), ts(ms, None)),
            (
                ts(ms, Some("UTC")),
                ts(ms, Some("+01:00")),
                ts(ms, Some("UTC")),
            ),
            (ts(ms, Some("UTC")), DataType::Int64, ts(ns, Some("UTC"))),
            (DataType::UInt64, ts(us, None), ts(ns, None)),
        ] {
            assert_eq!(time_union(&have, &found), union, "{have} with {found}");
            assert_eq!(time_union(&found, &have), union, "{found} with {have}");
        }
        let keys = KeyColumns::from_settings(None, Some("host,ts"), None, None).expect("keys");
        let a = schema(vec![("ts", ts(ms, Some("UTC"))), ("host", DataType::Utf8)]);
        let b = schema(vec![("ts", ts(us, Some("UTC"))), ("host", DataType::Utf8)]);
        let c = schema(vec![("ts", DataType::Int64), ("host", DataType::Int64)]);
        let (u, rejected) = unify(&[("a", &a), ("b", &b), ("c", &c)], &keys);
        let u = u.expect("a union");
        assert_eq!(u.schema.field(0).data_type(), &ts(us, Some("UTC")));
        assert_eq!(rejected.len(), 1, "host's types conflict: {rejected:?}");
        assert_eq!(rejected[0].position, 2);
        assert_eq!(
            (u.sort_paths.concat(), u.service_index),
            (vec![1, 0], Some(1))
        );
        // Integers counting seconds keep their type, so they cannot join timestamps: the
        // later file is rejected, naming the unit; in nanoseconds they convert.
        let seconds =
            KeyColumns::from_settings(Some("ts"), None, None, Some("s")).expect("seconds");
        let ints = schema(vec![("ts", DataType::Int64)]);
        let stamps = schema(vec![("ts", ts(ms, Some("UTC")))]);
        let (u, rejected) = unify(&[("ints", &ints), ("stamps", &stamps)], &seconds);
        assert_eq!(u.expect("a union").time_unit, IntegerTimeUnit::Seconds);
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert!(
            rejected[0].reason.contains("integers counting s")
                && rejected[0].reason.contains("input ints"),
            "{rejected:?}"
        );
        let nanos = KeyColumns::from_settings(Some("ts"), None, None, None).expect("nanos");
        let (_, rejected) = unify(&[("ints", &ints), ("stamps", &stamps)], &nanos);
        assert!(rejected.is_empty(), "{rejected:?}");
        // A configured key column typed Null in one file takes the others' type.
        let keys =
            KeyColumns::from_settings(Some("ts"), Some("status,ts"), None, None).expect("keys");
        let typed = schema(vec![("ts", ts(ms, None)), ("status", DataType::Int32)]);
        let nulls = schema(vec![("ts", ts(ms, None)), ("status", DataType::Null)]);
        let (u, rejected) = unify(&[("nulls", &nulls), ("typed", &typed)], &keys);
        assert!(rejected.is_empty(), "{rejected:?}");
        assert_eq!(
            u.expect("a union").schema.field(1).data_type(),
            &DataType::Int32
        );
        // Today's time column stays Int64 nanoseconds whatever its inputs' type.
        let c = schema(vec![("time_unix_nano", ts(ms, None))]);
        let (u, _) = unify(&[("c", &c)], &KeyColumns::default());
        assert_eq!(u.expect("a union").schema.field(0).data_type(), &TIME_TYPE);
        // Conforming an integer input to a timestamp union keeps its instants.
        let nanos: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![1_500_000_000]));
        let conformed = conform_array(&nanos, &ts(ns, Some("UTC"))).expect("conforms");
        assert_eq!(
            crate::input::type_union::time_nanos(conformed.as_ref(), IntegerTimeUnit::Nanoseconds)
                .expect("nanoseconds")
                .value(0),
            1_500_000_000
        );
    }

    #[test]
    fn unions_encodings_and_missing_columns() {
        let keys = KeyColumns::default();
        let a = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("service.name", DataType::Utf8View),
            ("body", DataType::LargeUtf8),
        ]);
        let b = schema(vec![
            (
                "service.name",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            ),
            ("time_unix_nano", DataType::Int64),
            ("extra", DataType::Int32),
        ]);
        let (u, rejected) = unify(&[("a", &a), ("b", &b)], &keys);
        let u = u.unwrap();
        assert!(rejected.is_empty());
        let names: Vec<_> = u.schema.fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["time_unix_nano", "service.name", "body", "extra"]);
        assert_eq!(u.schema.field(1).data_type(), &DataType::Utf8);
        assert_eq!(u.schema.field(2).data_type(), &DataType::Utf8);
        assert_eq!(u.service_index, Some(1));
        assert_eq!(u.time_path, vec![0]);
    }

    #[test]
    fn time_types_unify() {
        let keys = KeyColumns::default();
        let a = schema(vec![("time_unix_nano", DataType::UInt64)]);
        let b = schema(vec![("time_unix_nano", DataType::UInt64)]);
        let c = schema(vec![(
            "time_unix_nano",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        )]);
        // One documented output type whatever the inputs used: Int64 nanoseconds.
        let (u, _) = unify(&[("a", &a), ("b", &b)], &keys);
        assert_eq!(u.unwrap().schema.field(0).data_type(), &DataType::Int64);
        let (u, _) = unify(&[("a", &a), ("c", &c)], &keys);
        assert_eq!(u.unwrap().schema.field(0).data_type(), &DataType::Int64);
        let us = schema(vec![(
            "time_unix_nano",
            DataType::Timestamp(TimeUnit::Microsecond, None),
        )]);
        let (u, rejected) = unify(&[("us", &us), ("a", &a)], &keys);
        assert!(rejected.is_empty(), "{rejected:?}");
        assert_eq!(u.unwrap().schema.field(0).data_type(), &DataType::Int64);
    }

    #[test]
    fn all_null_service_and_tenant_columns_typed_null_are_strings() {
        let keys = KeyColumns::default();
        let nulls = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("service.name", DataType::Null),
            ("tenant_id", DataType::Null),
        ]);
        assert_eq!(check_key_columns(&nulls, &keys), Ok(()));
        let (u, rejected) = unify(&[("a", &nulls)], &keys);
        assert!(rejected.is_empty(), "{rejected:?}");
        let u = u.expect("a union");
        assert_eq!(u.service_index, Some(1));
        assert_eq!(u.schema.field(1).data_type(), &DataType::Utf8);
        assert_eq!(u.schema.field(2).data_type(), &DataType::Utf8);
        let text = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("service.name", DataType::LargeUtf8),
        ]);
        let (u, rejected) = unify(&[("a", &nulls), ("b", &text)], &keys);
        assert!(rejected.is_empty(), "{rejected:?}");
        assert_eq!(
            u.expect("a union").schema.field(1).data_type(),
            &DataType::Utf8
        );
    }

    #[test]
    fn a_file_that_would_widen_the_union_past_the_leaf_limit_is_rejected() {
        let keys = KeyColumns::default();
        let wide = |prefix: &str| {
            let mut names = vec!["time_unix_nano".to_string()];
            names.extend((0..400).map(|i| format!("{prefix}{i}")));
            schema(
                names
                    .iter()
                    .map(|n| (n.as_str(), DataType::Int64))
                    .collect(),
            )
        };
        let (a, b, again) = (wide("a"), wide("b"), wide("a"));
        let limit = Budget::new(64 << 20).shares().leaf_limit;
        assert_eq!(limit, 512);
        let (u, rejected) = unify_weighted(
            &[("a", &a, 10), ("b", &b, 20), ("c", &again, 10)],
            &keys,
            limit,
        );
        // b holds more rows and goes first; a would take the union to 801 leaves, and so
        // would c, which has a's columns.
        let positions: Vec<usize> = rejected.iter().map(|r| r.position).collect();
        assert_eq!(positions, [0, 2], "{rejected:?}");
        assert!(
            rejected[0].reason.contains("801 leaves"),
            "{}",
            rejected[0].reason
        );
        assert_eq!(u.expect("a union").schema.fields().len(), 401);
        // Nested columns count their leaves.
        let nested = DataType::Struct(Fields::from(vec![
            Field::new("x", DataType::Int64, true),
            Field::new(
                "m",
                DataType::List(Arc::new(Field::new(
                    "item",
                    DataType::Struct(Fields::from(vec![
                        Field::new("k", DataType::Utf8, true),
                        Field::new("v", DataType::Utf8, true),
                    ])),
                    true,
                ))),
                true,
            ),
        ]));
        assert_eq!(leaves_of(&nested), 3);
    }

    #[test]
    fn a_conflict_is_decided_for_the_file_of_more_rows() {
        let keys = KeyColumns::default();
        let time = ("time_unix_nano", DataType::Int64);
        let stray = schema(vec![time.clone(), ("code", DataType::Utf8)]);
        let many = schema(vec![
            time.clone(),
            ("code", DataType::Int64),
            ("x", DataType::Utf8),
        ]);
        let also = schema(vec![time, ("y", DataType::Utf8), ("code", DataType::Int32)]);
        // The stray file sorts first but holds one row.
        let (u, rejected) = unify_weighted(
            &[("0-stray", &stray, 1), ("a", &many, 500), ("b", &also, 500)],
            &keys,
            usize::MAX,
        );
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert_eq!(rejected[0].position, 0);
        assert!(
            rejected[0].reason.contains("in input a"),
            "{}",
            rejected[0].reason
        );
        let u = u.expect("a union");
        let names: Vec<&str> = u
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        // The columns come in ordinal order of the accepted files.
        assert_eq!(names, ["time_unix_nano", "code", "x", "y"]);
        assert_eq!(u.schema.field(1).data_type(), &DataType::Int64);
        // Files of as many rows: the type more of them agree with wins.
        let (_, rejected) = unify_weighted(
            &[("0-stray", &stray, 10), ("a", &many, 10), ("b", &also, 10)],
            &keys,
            usize::MAX,
        );
        assert_eq!(rejected.iter().map(|r| r.position).collect::<Vec<_>>(), [0]);
        // As heavy and as backed: the earlier file wins, as `unify` decides.
        let (_, rejected) = unify_weighted(
            &[("0-stray", &stray, 7), ("a", &many, 7)],
            &keys,
            usize::MAX,
        );
        assert_eq!(rejected.iter().map(|r| r.position).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn rejects_conflicts_and_bad_keys() {
        let keys = KeyColumns::default();
        let good = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("x", DataType::Utf8),
        ]);
        let conflict = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("x", DataType::Int64),
        ]);
        let no_time = schema(vec![("x", DataType::Utf8)]);
        let bad_time = schema(vec![("time_unix_nano", DataType::Utf8)]);
        let bad_service = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("service.name", DataType::Int64),
        ]);
        let float_time = schema(vec![("time_unix_nano", DataType::Float64)]);
        let (u, rejected) = unify(
            &[
                ("good", &good),
                ("conflict", &conflict),
                ("no_time", &no_time),
                ("bad_time", &bad_time),
                ("bad_service", &bad_service),
                ("float_time", &float_time),
            ],
            &keys,
        );
        assert!(u.is_some());
        let positions: Vec<_> = rejected.iter().map(|r| r.position).collect();
        assert_eq!(positions, [1, 2, 3, 4, 5]);
        assert!(
            rejected[0].reason.contains("in input good"),
            "{}",
            rejected[0].reason
        );
        assert!(rejected[1].reason.contains("missing"));
    }

    #[test]
    fn null_typed_columns_take_the_real_type() {
        let keys = KeyColumns::default();
        let a = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("x", DataType::Null),
        ]);
        let b = schema(vec![
            ("time_unix_nano", DataType::Int64),
            ("x", DataType::Int32),
        ]);
        let (u, rejected) = unify(&[("a", &a), ("b", &b)], &keys);
        assert!(rejected.is_empty());
        assert_eq!(u.unwrap().schema.field(1).data_type(), &DataType::Int32);
    }
}

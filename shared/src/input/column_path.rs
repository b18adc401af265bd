//! Columns named by the settings, found at the top level or inside structs: a top-level
//! column of exactly the name first, else a path into structs whose field names may
//! themselves hold dots (`resource.service.name` for a struct `resource` with a field
//! `service.name`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, make_array};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, FieldRef, Fields};

use crate::error::{Error, Result};

/// The path into structs that `name` names among `fields`; `None` when it names no field
/// inside a struct (a top-level column is not a path).
pub fn struct_path(fields: &Fields, name: &str) -> Option<Vec<usize>> {
    fn within(fields: &Fields, name: &str) -> Option<Vec<usize>> {
        for (i, field) in fields.iter().enumerate() {
            if field.name() == name {
                return Some(vec![i]);
            }
            let rest = (name.strip_prefix(field.name().as_str())).and_then(|r| r.strip_prefix('.'));
            if let (Some(rest), DataType::Struct(children)) = (rest, field.data_type())
                && let Some(mut path) = within(children, rest)
            {
                path.insert(0, i);
                return Some(path);
            }
        }
        None
    }
    within(fields, name).filter(|path| path.len() > 1)
}

/// The indexes of the column `name` names among `fields`: a top-level column's index, else
/// its path into structs.
pub fn resolve(fields: &Fields, name: &str) -> Option<Vec<usize>> {
    match fields.iter().position(|f| f.name() == name) {
        Some(i) => Some(vec![i]),
        None => struct_path(fields, name),
    }
}

/// The field at `path` (indexes into `fields` and its structs).
pub fn field_at<'a>(fields: &'a Fields, path: &[usize]) -> Option<&'a FieldRef> {
    let (&first, rest) = path.split_first()?;
    let mut field = fields.get(first)?;
    for &i in rest {
        let DataType::Struct(children) = field.data_type() else {
            return None;
        };
        field = children.get(i)?;
    }
    Some(field)
}

/// The name of the column at `path`: its fields' names joined by dots, which
/// [`resolve`] reads back to `path` unless a top-level name says the same.
pub fn path_name(fields: &Fields, path: &[usize]) -> Option<String> {
    let mut names = Vec::with_capacity(path.len());
    for depth in 1..=path.len() {
        names.push(field_at(fields, &path[..depth])?.name().as_str());
    }
    Some(names.join("."))
}

/// The column at `path` of a batch (a top-level column, or a field inside structs), null
/// wherever a struct holding it is.
pub fn column_at(batch: &RecordBatch, path: &[usize]) -> Result<ArrayRef> {
    let Some((&first, rest)) = path.split_first() else {
        return Err(Error::invariant("an empty column path"));
    };
    let mut array = Arc::clone(
        (batch.columns().get(first))
            .ok_or_else(|| Error::invariant("a column path is past the batch's columns"))?,
    );
    for &i in rest {
        let parent = (array.as_struct_opt())
            .ok_or_else(|| Error::invariant("a column path goes through a non-struct"))?;
        let child = (parent.columns().get(i))
            .ok_or_else(|| Error::invariant("a column path is past a struct's fields"))?;
        let nulls = NullBuffer::union(parent.nulls(), child.nulls());
        let data = (child.to_data().into_builder().nulls(nulls).build())
            .map_err(|e| Error::arrow("reading a column inside a struct", e))?;
        array = make_array(data);
    }
    Ok(array)
}

/// The column `name` names in `batch` ([`resolve`]), `None` when the batch has none.
pub fn column_named(batch: &RecordBatch, name: &str) -> Result<Option<ArrayRef>> {
    match resolve(batch.schema_ref().fields(), name) {
        Some(path) => column_at(batch, &path).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StructArray};
    use arrow_schema::{Field, Schema};

    fn nested() -> RecordBatch {
        let inner = Fields::from(vec![Field::new("ts", DataType::Int64, true)]);
        let record = StructArray::new(
            inner.clone(),
            vec![Arc::new(Int64Array::from(vec![Some(1), Some(2), None]))],
            Some(NullBuffer::from(vec![true, false, true])),
        );
        let schema = Schema::new(vec![
            Field::new("record.ts", DataType::Int64, true),
            Field::new("record", DataType::Struct(inner), true),
        ]);
        let flat = Int64Array::from(vec![7, 8, 9]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(flat), Arc::new(record)])
            .expect("a valid batch")
    }

    #[test]
    fn a_top_level_name_wins_over_a_path_and_a_path_reads_nulls_of_its_structs() {
        let batch = nested();
        let fields = batch.schema_ref().fields().clone();
        assert_eq!(resolve(&fields, "record.ts"), Some(vec![0]));
        let without_top = Fields::from(vec![Arc::clone(&fields[1])]);
        assert_eq!(resolve(&without_top, "record.ts"), Some(vec![0, 0]));
        assert_eq!(resolve(&fields, "record.other"), None);
        assert_eq!(
            field_at(&fields, &[1, 0]).map(|f| f.name().as_str()),
            Some("ts")
        );
        assert_eq!(path_name(&fields, &[1, 0]).as_deref(), Some("record.ts"));
        let inside = column_at(&batch, &[1, 0]).expect("the path reads");
        let values = inside.as_primitive::<arrow_array::types::Int64Type>();
        let read: Vec<Option<i64>> = values.iter().collect();
        assert_eq!(read, vec![Some(1), None, None]);
        let top = column_named(&batch, "record.ts")
            .expect("reads")
            .expect("found");
        assert_eq!(top.len(), 3);
        assert_eq!(top.null_count(), 0);
    }
}

//! Partition-wide codes for repetitive string columns while the rows are sorted.
//!
//! Most text columns of log rows repeat a few values (severity, host, tenant, region, the
//! keys and many values of attribute maps). Run formation carries such a column, or such a
//! map's keys or values, as `UInt32` codes into one dictionary per column for the whole
//! partition, so decoding, the per-batch sort, the run gather and the spill move four bytes
//! instead of a string. An input whose column is dictionary-encoded is read as an Arrow
//! dictionary and recoded through its few values, so its strings are never materialised.
//! The merge turns the rows back into strings (after gathering them, or as it reads runs of
//! mixed forms): the writer never sees a code, and the output bytes do not depend on coding.
//!
//! A column stops being coded (it is *frozen*) when its dictionary turns out large: more
//! values than a quarter of its rows so far (and more than [`MIN_VALUES`]), or more bytes
//! than its share of the dictionaries' cap. The batch that finds out, and every later one,
//! carry it as strings; the dictionary keeps what it has (codes are never renumbered), so
//! the batches already coded still decode.

use std::hash::BuildHasher;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, MapArray, RecordBatch, StringArray, StructArray, UInt32Array, new_null_array,
};
use arrow_buffer::NullBuffer;
use arrow_cast::cast;
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use arrow_select::take::take;
use hashbrown::HashTable;

use crate::error::{Error, Result};
use crate::gauge::{Charge, MemoryGauge};
use crate::input::DictionaryColumns;
use crate::input::schema::{UnifiedSchema, conform_column, map_fields, map_with_child_types};
use crate::input::type_union::conform_array;

/// A column keeps its codes while its dictionary holds at most this many values, whatever
/// the rows coded so far.
pub const MIN_VALUES: usize = 1024;
/// Bytes charged per dictionary value beside its text: the boxed string and its table slot.
const VALUE_OVERHEAD_BYTES: u64 = 32;
const HARDLY_REPEATS: &str = "its values hardly repeat";

/// Which strings of a top-level column a dictionary codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The column itself (a string column).
    Column,
    /// The keys of a map column.
    MapKeys,
    /// The values of a map column.
    MapValues,
}

impl Part {
    /// The position of this part among a map's entry fields (0 keys, 1 values).
    fn child(self) -> Option<usize> {
        match self {
            Part::Column => None,
            Part::MapKeys => Some(0),
            Part::MapValues => Some(1),
        }
    }

    /// The bit of this part in a column's form (which parts of it a batch carries as codes).
    fn bit(self) -> u8 {
        match self {
            Part::Column => 1,
            Part::MapKeys => 2,
            Part::MapValues => 4,
        }
    }
}

/// The dictionary of one coded part of a column.
struct PartCodes {
    /// Position of the column in the unified schema.
    index: usize,
    part: Part,
    values: Vec<Box<str>>,
    table: HashTable<u32>,
    /// Bytes charged for `values`.
    bytes: u64,
    frozen: bool,
    /// Strings coded so far (rows, or map entries).
    coded: u64,
    /// The last input dictionary seen.
    recent: Option<RecentDictionary>,
}

/// An input dictionary (the same for the batches of one row group) and what its values are
/// coded as so far.
struct RecentDictionary {
    /// Holding the array keeps its buffers from being reused by another dictionary.
    values: ArrayRef,
    /// The values as `Utf8`.
    texts: ArrayRef,
    /// Per value: its code, [`UNSEEN`] or [`NULL_VALUE`].
    codes: Vec<u32>,
}

/// A dictionary value no row has used yet.
const UNSEEN: u32 = u32::MAX;
/// A null dictionary value.
const NULL_VALUE: u32 = u32::MAX - 1;

/// What coding one part of a batch gave.
enum Coded {
    /// The codes, and the bytes of text they stand for.
    Codes(ArrayRef, u64),
    /// The part goes as strings from this batch on, for this reason.
    Frozen(&'static str),
}

/// Codes the repetitive string columns of conformed batches (phase 1).
pub struct StringCoder {
    unified: SchemaRef,
    parts: Vec<PartCodes>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Most bytes one part's dictionary may hold.
    part_cap_bytes: u64,
    /// Bytes of all dictionaries.
    bytes: u64,
    gauge: MemoryGauge,
    charge: Option<Charge>,
    /// The schema of the last coded batch, reused while the same parts are coded.
    schema: Option<(Vec<u8>, SchemaRef)>,
    /// Parts frozen since the last [`StringCoder::take_frozen`].
    newly_frozen: Vec<usize>,
}

impl StringCoder {
    /// A coder for the top-level string columns of `unified` other than the sort key's
    /// (the key reads those as text) and the string keys and values of its map
    /// columns, whose dictionaries hold at most `cap_bytes` together (an equal share each),
    /// charged to `gauge`. With `cap_bytes` 0 nothing is coded.
    pub fn new(unified: &UnifiedSchema, cap_bytes: u64, gauge: &MemoryGauge) -> Self {
        let mut parts = Vec::new();
        let fields = unified.schema.fields().iter().enumerate();
        for (index, field) in
            fields.filter(|&(i, _)| !unified.sort_paths.iter().any(|p| p[..] == [i]))
        {
            let mut add = |part| {
                parts.push(PartCodes {
                    index,
                    part,
                    values: Vec::new(),
                    table: HashTable::new(),
                    bytes: 0,
                    frozen: false,
                    coded: 0,
                    recent: None,
                })
            };
            if field.data_type() == &DataType::Utf8 {
                add(Part::Column);
            } else if let Some((_, children, _)) = map_fields(field.data_type()) {
                for (child, part) in children.iter().zip([Part::MapKeys, Part::MapValues]) {
                    if child.data_type() == &DataType::Utf8 {
                        add(part);
                    }
                }
            }
        }
        if cap_bytes == 0 {
            parts.clear();
        }
        let part_cap_bytes = cap_bytes / parts.len().max(1) as u64;
        Self {
            unified: Arc::clone(&unified.schema),
            parts,
            hasher: hashbrown::DefaultHashBuilder::default(),
            part_cap_bytes,
            bytes: 0,
            gauge: gauge.clone(),
            charge: None,
            schema: None,
            newly_frozen: Vec::new(),
        }
    }

    /// The columns (and map keys and values) still coded: worth reading as dictionaries.
    pub fn coded_columns(&self) -> DictionaryColumns {
        let mut columns = DictionaryColumns::default();
        for p in self.parts.iter().filter(|p| !p.frozen) {
            let name = self.unified.field(p.index).name().clone();
            match p.part {
                Part::Column => columns.strings.push(name),
                Part::MapKeys => columns.map_keys.push(name),
                Part::MapValues => columns.map_values.push(name),
            }
        }
        columns
    }

    /// Conforms `batch` to the unified schema, with the parts still coded as `UInt32` codes,
    /// and says how many bytes of text the codes stand for (what decoding the batch adds).
    /// Batches share one schema until a part freezes.
    pub fn code(&mut self, batch: &RecordBatch) -> Result<(RecordBatch, u64)> {
        let mut coded = vec![ColumnCodes::None; self.unified.fields().len()];
        let mut text_bytes = 0;
        for p in 0..self.parts.len() {
            if self.parts[p].frozen {
                continue;
            }
            let (index, part) = (self.parts[p].index, self.parts[p].part);
            let field = self.unified.field(index);
            let strings = match part.child() {
                None => batch.column_by_name(field.name()).cloned(),
                Some(at) => {
                    let map = map_source(batch, field);
                    map.as_map_opt().map(|m| Arc::clone(m.entries().column(at)))
                }
            };
            match self.code_strings(p, strings.as_ref(), batch.num_rows())? {
                Coded::Codes(codes, bytes) => {
                    self.parts[p].coded += codes.len() as u64;
                    text_bytes += bytes;
                    coded[index].add(part, codes);
                }
                Coded::Frozen(why) => self.freeze(p, why),
            }
        }
        let forms: Vec<u8> = coded.iter().map(ColumnCodes::form).collect();
        let columns = coded
            .into_iter()
            .zip(self.unified.fields())
            .map(|(codes, field)| match codes {
                ColumnCodes::Column(codes) => Ok(codes),
                ColumnCodes::Map(children) => {
                    conform_map(&map_source(batch, field), field, children)
                }
                ColumnCodes::None => match batch.column_by_name(field.name()) {
                    // A map read with dictionary keys or values none of which are coded now.
                    Some(map)
                        if map.as_map_opt().is_some() && map.data_type() != field.data_type() =>
                    {
                        conform_map(map, field, [None, None])
                    }
                    _ => conform_column(batch, field),
                },
            })
            .collect::<Result<Vec<_>>>()?;
        if self.charge.as_ref().map(Charge::bytes) != Some(self.bytes) {
            self.charge = None;
            self.charge = Some(Charge::new(&self.gauge, self.bytes));
        }
        let schema = self.schema_for(forms);
        let batch =
            RecordBatch::try_new(schema, columns).map_err(|e| Error::arrow("coding a batch", e))?;
        Ok((batch, text_bytes))
    }

    fn freeze(&mut self, p: usize, why: &str) {
        let part = &mut self.parts[p];
        part.frozen = true;
        part.recent = None;
        self.newly_frozen.push(p);
        tracing::debug!(
            column = %self.unified.field(part.index).name(),
            part = ?part.part,
            values = part.values.len(),
            why,
            "strings no longer coded"
        );
    }

    fn schema_for(&mut self, forms: Vec<u8>) -> SchemaRef {
        if let Some((cached, schema)) = &self.schema
            && *cached == forms
        {
            return Arc::clone(schema);
        }
        let fields: Vec<FieldRef> = self
            .unified
            .fields()
            .iter()
            .zip(&forms)
            .map(|(f, &form)| coded_field(f, form))
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            self.unified.metadata().clone(),
        ));
        self.schema = Some((forms, Arc::clone(&schema)));
        schema
    }

    /// Codes one array of strings (`None`: the file lacks the column, so every row is null).
    fn code_strings(&mut self, p: usize, source: Option<&ArrayRef>, rows: usize) -> Result<Coded> {
        let Some(source) = source else {
            return Ok(Coded::Codes(new_null_array(&DataType::UInt32, rows), 0));
        };
        let strings = source.len();
        let name = self.unified.field(self.parts[p].index).name().clone();
        let converting = |e| Error::arrow(format!("coding column {name:?}"), e);
        let most_values = MIN_VALUES.max((self.parts[p].coded as usize + strings) / 4);
        if let Some(dictionary) = source.as_any_dictionary_opt() {
            let values = dictionary.values();
            let known = matches!(&self.parts[p].recent,
                Some(recent) if recent.values.to_data().ptr_eq(&values.to_data()));
            if !known {
                let texts = cast(values, &DataType::Utf8).map_err(converting)?;
                self.parts[p].recent = Some(RecentDictionary {
                    values: Arc::clone(values),
                    codes: vec![UNSEEN; texts.len()],
                    texts,
                });
            }
            let Some(mut recent) = self.parts[p].recent.take() else {
                return Err(Error::invariant("a coded dictionary was not kept"));
            };
            let key_nulls = dictionary.keys().logical_nulls();
            // Readers give Int32 keys; any other key type is cast first.
            let cast_keys;
            let keys = match dictionary.keys().as_primitive_opt::<Int32Type>() {
                Some(keys) => keys,
                None => {
                    cast_keys = cast(dictionary.keys(), &DataType::Int32).map_err(converting)?;
                    cast_keys.as_primitive::<Int32Type>()
                }
            };
            let keys = keys
                .values()
                .iter()
                .map(|&k| usize::try_from(k).unwrap_or(usize::MAX));
            let is_valid = |row: usize| key_nulls.as_ref().is_none_or(|n| n.is_valid(row));
            let texts = recent.texts.as_string::<i32>();
            // First the values the rows use for the first time, in row order (codes are
            // handed out in first-seen order), so that a row group's dictionary costs only
            // the values its rows hold.
            for (row, key) in keys.clone().enumerate() {
                let Some(&known) = recent.codes.get(key) else {
                    if !is_valid(row) {
                        continue;
                    }
                    return Err(Error::Invariant {
                        message: format!("column {name:?}: dictionary key {key} out of range"),
                    });
                };
                if known != UNSEEN || !is_valid(row) {
                    continue;
                }
                recent.codes[key] = if texts.is_null(key) {
                    NULL_VALUE
                } else {
                    match self.intern(p, texts.value(key), most_values) {
                        Ok(code) => code,
                        Err(why) => return Ok(Coded::Frozen(why)),
                    }
                };
            }
            // Then every row's code: a lookup. Null rows are null keys (a Parquet dictionary
            // holds no nulls): their null buffer is the codes' own unless the dictionary
            // does hold a null value.
            let offsets = texts.value_offsets();
            let mut codes = Vec::with_capacity(strings);
            let mut text_bytes = 0u64;
            for (row, key) in keys.clone().enumerate() {
                let code = recent.codes.get(key).copied().unwrap_or(UNSEEN);
                if code < NULL_VALUE && is_valid(row) {
                    text_bytes += (offsets[key + 1] - offsets[key]) as u64;
                    codes.push(code);
                } else {
                    codes.push(0);
                }
            }
            let nulls = match texts.null_count() {
                0 => key_nulls,
                _ => {
                    let valid = keys.enumerate().map(|(row, key)| {
                        is_valid(row) && recent.codes.get(key).is_some_and(|&c| c < NULL_VALUE)
                    });
                    let valid: Vec<bool> = valid.collect();
                    valid.iter().any(|v| !v).then(|| NullBuffer::from(valid))
                }
            };
            self.parts[p].recent = Some(recent);
            let codes = Arc::new(UInt32Array::new(codes.into(), nulls));
            return Ok(Coded::Codes(codes, text_bytes));
        }
        let texts = match source.data_type() {
            DataType::Utf8 => Arc::clone(source),
            _ => cast(source, &DataType::Utf8).map_err(converting)?,
        };
        let mut codes = Vec::with_capacity(strings);
        let mut valid = Vec::with_capacity(strings);
        let mut text_bytes = 0u64;
        for value in texts.as_string::<i32>() {
            let code = match value {
                None => None,
                Some(text) => match self.intern(p, text, most_values) {
                    Ok(code) => {
                        text_bytes += text.len() as u64;
                        Some(code)
                    }
                    Err(why) => return Ok(Coded::Frozen(why)),
                },
            };
            codes.push(code.unwrap_or(0));
            valid.push(code.is_some());
        }
        Ok(Coded::Codes(codes_array(codes, valid), text_bytes))
    }

    /// The code of `text` in part `p`, added if new; `Err` (why) when the part may not hold
    /// another value: it has `most_values`, or the value would pass its share of the cap.
    fn intern(&mut self, p: usize, text: &str, most_values: usize) -> Result<u32, &'static str> {
        let hasher = &self.hasher;
        let part = &mut self.parts[p];
        let hash = hasher.hash_one(text);
        let values = &part.values;
        if let Some(&code) = part
            .table
            .find(hash, |&code| &*values[code as usize] == text)
        {
            return Ok(code);
        }
        if part.values.len() >= most_values.min(NULL_VALUE as usize) {
            return Err(HARDLY_REPEATS);
        }
        let cost = text.len() as u64 + VALUE_OVERHEAD_BYTES;
        if part.bytes + cost > self.part_cap_bytes {
            return Err("its dictionary reached its share of the cap");
        }
        part.bytes += cost;
        self.bytes += cost;
        let code = part.values.len() as u32;
        part.values.push(text.into());
        let values = &part.values;
        part.table
            .insert_unique(hash, code, |&code| hasher.hash_one(&*values[code as usize]));
        Ok(code)
    }

    /// A decoder of the parts frozen since the last call (their dictionaries no longer
    /// change): what turns batches coded before a freeze into the form of the batches after
    /// it. `None` when no part froze.
    pub fn take_frozen(&mut self) -> Option<StringDecoder> {
        if self.newly_frozen.is_empty() {
            return None;
        }
        let frozen = std::mem::take(&mut self.newly_frozen);
        Some(self.decoder_of(|p| frozen.contains(&p)))
    }

    /// The decoder of everything coded so far, charged to the gauge while it lives.
    pub fn decoder(&self) -> StringDecoder {
        self.decoder_of(|_| true)
    }

    fn decoder_of(&self, wanted: impl Fn(usize) -> bool) -> StringDecoder {
        let parts: Vec<DecodedPart> = self
            .parts
            .iter()
            .enumerate()
            .filter(|&(p, _)| wanted(p))
            .map(|(_, p)| DecodedPart {
                index: p.index,
                part: p.part,
                values: Arc::new(StringArray::from_iter_values(p.values.iter().map(|v| &**v))),
            })
            .collect();
        let bytes = parts
            .iter()
            .map(|p| p.values.get_array_memory_size() as u64)
            .sum();
        StringDecoder {
            unified: Arc::clone(&self.unified),
            parts,
            _charge: Charge::new(&self.gauge, bytes),
        }
    }
}

fn codes_array(codes: Vec<u32>, valid: Vec<bool>) -> ArrayRef {
    let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
    Arc::new(UInt32Array::new(codes.into(), nulls))
}

/// What one column of a batch carries as codes.
#[derive(Clone)]
enum ColumnCodes {
    None,
    /// A string column's codes.
    Column(ArrayRef),
    /// The codes of a map's keys and values (`None`: that part goes as strings).
    Map([Option<ArrayRef>; 2]),
}

impl ColumnCodes {
    fn add(&mut self, part: Part, codes: ArrayRef) {
        match part.child() {
            None => *self = ColumnCodes::Column(codes),
            Some(at) => {
                if !matches!(self, ColumnCodes::Map(_)) {
                    *self = ColumnCodes::Map([None, None]);
                }
                if let ColumnCodes::Map(children) = self {
                    children[at] = Some(codes);
                }
            }
        }
    }

    /// The parts carried as codes, as [`Part`] bits.
    fn form(&self) -> u8 {
        match self {
            ColumnCodes::None => 0,
            ColumnCodes::Column(_) => Part::Column.bit(),
            ColumnCodes::Map(children) => [Part::MapKeys, Part::MapValues]
                .iter()
                .zip(children)
                .filter(|(_, codes)| codes.is_some())
                .map(|(part, _)| part.bit())
                .sum(),
        }
    }
}

/// The batch's column for the map `field`, or a null map when the file lacks it (whose
/// entries, none, are coded like any other).
fn map_source(batch: &RecordBatch, field: &Field) -> ArrayRef {
    match batch.column_by_name(field.name()) {
        Some(column) => Arc::clone(column),
        None => new_null_array(field.data_type(), batch.num_rows()),
    }
}

/// The field of a column carried in `form` (a set of [`Part`] bits).
fn coded_field(field: &FieldRef, form: u8) -> FieldRef {
    if form == 0 {
        return Arc::clone(field);
    }
    if form == Part::Column.bit() {
        return Arc::new(Field::new(field.name(), DataType::UInt32, true));
    }
    let coded = map_with_child_types(field.data_type(), |at, child| {
        let part = [Part::MapKeys, Part::MapValues][at];
        match form & part.bit() {
            0 => child.data_type().clone(),
            _ => DataType::UInt32,
        }
    });
    match coded {
        Some(data_type) => Arc::new(field.as_ref().clone().with_data_type(data_type)),
        None => Arc::clone(field),
    }
}

/// `map` with new entry children (`fields`), named and ordered like the map type `like`
/// (writers name a map's entries differently: `key_value`, `entries`, ...).
fn rebuild_map(
    map: &MapArray,
    like: &DataType,
    fields: Fields,
    children: Vec<ArrayRef>,
) -> Result<ArrayRef> {
    let assembling = |e| Error::arrow("assembling a coded map", e);
    let types: Vec<DataType> = fields.iter().map(|f| f.data_type().clone()).collect();
    let Some(DataType::Map(entries_field, sorted)) =
        map_with_child_types(like, |at, _| types[at].clone())
    else {
        return Err(Error::invariant(
            "rebuilding a map like a type that is not a map",
        ));
    };
    let entries = StructArray::try_new(fields, children, map.entries().nulls().cloned())
        .map_err(assembling)?;
    let map = MapArray::try_new(
        entries_field,
        map.offsets().clone(),
        entries,
        map.nulls().cloned(),
        sorted,
    )
    .map_err(assembling)?;
    Ok(Arc::new(map))
}

/// The map `map` in the form of `field` with `codes` in place: each part with codes gets
/// them, every other part is conformed to `field`'s strings (it may arrive as a dictionary or
/// another string encoding), and the names are `field`'s.
fn conform_map(map: &ArrayRef, field: &Field, codes: [Option<ArrayRef>; 2]) -> Result<ArrayRef> {
    let (Some(source), Some((_, children, _))) = (map.as_map_opt(), map_fields(field.data_type()))
    else {
        return Err(Error::invariant("conforming a map that is not a map"));
    };
    let mut fields = Vec::with_capacity(2);
    let mut arrays = Vec::with_capacity(2);
    for ((child, target), codes) in source.entries().columns().iter().zip(children).zip(codes) {
        match codes {
            Some(codes) => {
                fields.push(Arc::new(
                    target.as_ref().clone().with_data_type(DataType::UInt32),
                ));
                arrays.push(codes);
            }
            None => {
                let conformed = conform_array(child, target.data_type()).map_err(|e| {
                    Error::arrow(format!("converting map column {:?}", field.name()), e)
                })?;
                fields.push(Arc::clone(target));
                arrays.push(conformed);
            }
        }
    }
    rebuild_map(source, field.data_type(), fields.into(), arrays)
}

/// One decoded part: where it goes and its values, indexed by code.
#[derive(Debug)]
struct DecodedPart {
    index: usize,
    part: Part,
    values: ArrayRef,
}

/// Turns coded batches back into batches of the unified schema (phase 2).
#[derive(Debug)]
pub struct StringDecoder {
    unified: SchemaRef,
    parts: Vec<DecodedPart>,
    _charge: Charge,
}

impl StringDecoder {
    /// The schema of decoded batches.
    pub fn unified(&self) -> &SchemaRef {
        &self.unified
    }

    /// `batch` with every coded part replaced by its strings.
    pub fn decode(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        if batch.schema() == self.unified {
            return Ok(batch.clone());
        }
        self.decode_to(batch, &self.unified)
    }

    /// `batch` in the form of `target`: the parts of this decoder that `batch` carries as
    /// codes and `target` as strings are decoded; all else stays as it is.
    pub fn decode_to(&self, batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
        let decoding = |e| Error::arrow("decoding a coded column", e);
        let mut columns = batch.columns().to_vec();
        for p in &self.parts {
            let (Some(column), Some(target_field)) =
                (columns.get_mut(p.index), target.fields().get(p.index))
            else {
                continue;
            };
            match p.part {
                Part::Column => {
                    let coded = column.data_type() == &DataType::UInt32;
                    if coded && target_field.data_type() != &DataType::UInt32 {
                        *column =
                            take(p.values.as_ref(), column.as_ref(), None).map_err(decoding)?;
                    }
                }
                Part::MapKeys | Part::MapValues => {
                    let at = usize::from(p.part == Part::MapValues);
                    let (Some(map), Some((_, target_children, _))) =
                        (column.as_map_opt(), map_fields(target_field.data_type()))
                    else {
                        continue;
                    };
                    let entries = map.entries();
                    let coded = entries.column(at).data_type() == &DataType::UInt32;
                    if !coded || target_children[at].data_type() == &DataType::UInt32 {
                        continue;
                    }
                    let mut children = entries.columns().to_vec();
                    let mut fields: Vec<FieldRef> = entries.fields().iter().cloned().collect();
                    children[at] =
                        take(p.values.as_ref(), children[at].as_ref(), None).map_err(decoding)?;
                    fields[at] = Arc::clone(&target_children[at]);
                    *column = rebuild_map(map, target_field.data_type(), fields.into(), children)?;
                }
            }
        }
        RecordBatch::try_new(Arc::clone(target), columns)
            .map_err(|e| Error::arrow("decoding a coded batch", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::schema::conform;
    use arrow_array::{DictionaryArray, Int64Array, LargeStringArray};

    fn unified() -> UnifiedSchema {
        UnifiedSchema {
            schema: Arc::new(Schema::new(vec![
                Field::new("time_unix_nano", DataType::Int64, true),
                Field::new("service.name", DataType::Utf8, true),
                Field::new("host", DataType::Utf8, true),
                Field::new("body", DataType::Utf8, true),
            ])),
            service_index: Some(1),
            time_path: vec![0],
            time_unit: Default::default(),
            sort_paths: vec![vec![1], vec![0]],
        }
    }

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    fn texts(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    fn times(n: usize) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(0..n as i64))
    }

    #[test]
    fn codes_and_decodes_every_encoding_of_a_string_column() {
        let unified = unified();
        let gauge = MemoryGauge::new();
        let mut coder = StringCoder::new(&unified, 1 << 20, &gauge);
        assert_eq!(coder.coded_columns().strings, ["host", "body"]);
        let dictionary: DictionaryArray<Int32Type> = vec![Some("b"), None, Some("a"), Some("b")]
            .into_iter()
            .collect();
        let inputs = vec![
            batch(vec![
                ("time_unix_nano", times(4)),
                (
                    "service.name",
                    texts(&[Some("s"), None, Some("s"), Some("t")]),
                ),
                ("host", Arc::new(dictionary)),
                ("body", texts(&[Some("x"), Some("x"), None, Some("y")])),
            ]),
            // LargeUtf8 host, body missing from this file.
            batch(vec![
                ("time_unix_nano", times(3)),
                (
                    "host",
                    Arc::new(LargeStringArray::from(vec![Some("c"), Some("a"), None])),
                ),
            ]),
        ];
        let mut coded = Vec::new();
        for input in &inputs {
            let (out, _) = coder.code(input).unwrap();
            assert_eq!(out.column(2).data_type(), &DataType::UInt32);
            assert_eq!(out.column(3).data_type(), &DataType::UInt32);
            assert_eq!(
                out.column(1).data_type(),
                &DataType::Utf8,
                "service stays text"
            );
            coded.push(out);
        }
        assert!(gauge.current() > 0, "the dictionaries are charged");
        let decoder = coder.decoder();
        let expected = [
            batch(vec![
                ("time_unix_nano", times(4)),
                (
                    "service.name",
                    texts(&[Some("s"), None, Some("s"), Some("t")]),
                ),
                ("host", texts(&[Some("b"), None, Some("a"), Some("b")])),
                ("body", texts(&[Some("x"), Some("x"), None, Some("y")])),
            ]),
            batch(vec![
                ("time_unix_nano", times(3)),
                ("service.name", texts(&[None, None, None])),
                ("host", texts(&[Some("c"), Some("a"), None])),
                ("body", texts(&[None, None, None])),
            ]),
        ];
        for (coded, expected) in coded.iter().zip(&expected) {
            let decoded = decoder.decode(coded).unwrap();
            assert_eq!(decoded.schema(), unified.schema);
            assert_eq!(decoded.columns(), expected.columns());
        }
    }

    fn distinct_bodies(batch: usize, rows: usize) -> RecordBatch {
        let hosts: Vec<Option<&str>> = (0..rows).map(|i| Some(["h1", "h2"][i % 2])).collect();
        let bodies = (0..rows).map(|i| format!("line {batch}-{i}"));
        self::batch(vec![
            ("time_unix_nano", times(rows)),
            ("host", texts(&hosts)),
            ("body", Arc::new(StringArray::from_iter_values(bodies))),
        ])
    }

    #[test]
    fn a_column_whose_values_do_not_repeat_is_frozen_and_still_decodes() {
        let unified = unified();
        let mut coder = StringCoder::new(&unified, 1 << 20, &MemoryGauge::new());
        // Up to MIN_VALUES distinct values are coded whatever the rows...
        let first = distinct_bodies(0, MIN_VALUES);
        let (coded, _) = coder.code(&first).unwrap();
        assert_eq!(coded.column(3).data_type(), &DataType::UInt32);
        // ...but not more than a quarter of the rows: this batch finds out and keeps its
        // strings, and so does every later one.
        let second = distinct_bodies(1, MIN_VALUES);
        assert!(coder.take_frozen().is_none(), "nothing froze yet");
        let (raw, _) = coder.code(&second).unwrap();
        assert_eq!(raw.column(2).data_type(), &DataType::UInt32, "hosts repeat");
        assert_eq!(raw.column(3).data_type(), &DataType::Utf8);
        assert_eq!(coder.coded_columns().strings, ["host"]);
        // What froze turns the earlier batch into the later batches' form.
        let frozen = coder.take_frozen().expect("body froze");
        let converted = frozen.decode_to(&coded, &raw.schema()).unwrap();
        assert_eq!(converted.schema(), raw.schema());
        assert_eq!(converted.column(2), coded.column(2), "hosts stay coded");
        assert_eq!(converted.column(3).as_ref(), first.column(2).as_ref());
        assert!(coder.take_frozen().is_none(), "taken once");
        let (later, _) = coder.code(&first).unwrap();
        assert_eq!(later.column(3).data_type(), &DataType::Utf8);
        let decoder = coder.decoder();
        assert_eq!(
            decoder.decode(&coded).unwrap().column(3).as_ref(),
            first.column(2).as_ref()
        );
        assert_eq!(
            decoder.decode(&raw).unwrap().column(3).as_ref(),
            second.column(2).as_ref()
        );
        assert_eq!(
            decoder.decode(&later).unwrap().column(2).as_ref(),
            first.column(1).as_ref()
        );
    }

    #[test]
    fn an_input_dictionary_costs_only_the_values_rows_use() {
        let unified = unified();
        let mut coder = StringCoder::new(&unified, 1 << 20, &MemoryGauge::new());
        let texts: Vec<String> = (0..4 * MIN_VALUES).map(|i| format!("line {i}")).collect();
        let values: ArrayRef = Arc::new(StringArray::from_iter_values(texts.iter()));
        // A row group's dictionary of 4096 values of which these rows use three.
        let keys = arrow_array::Int32Array::from(vec![7, 7, 4000, 12, 4000, 7]);
        let bodies = DictionaryArray::<Int32Type>::try_new(keys, values).unwrap();
        let input = batch(vec![
            ("time_unix_nano", times(6)),
            ("body", Arc::new(bodies)),
        ]);
        let (coded, text_bytes) = coder.code(&input).unwrap();
        assert_eq!(coded.column(3).data_type(), &DataType::UInt32);
        assert_eq!(coder.parts[1].values.len(), 3);
        assert_eq!(text_bytes, 6 + 6 + 9 + 7 + 9 + 6);
        let decoded = coder.decoder().decode(&coded).unwrap();
        let expected = cast(input.column(1), &DataType::Utf8).unwrap();
        assert_eq!(decoded.column(3).as_ref(), expected.as_ref());

        // Rows that use more distinct values than a quarter of them freeze the column.
        let keys = arrow_array::Int32Array::from_iter_values(0..2 * MIN_VALUES as i32);
        let values: ArrayRef = Arc::new(StringArray::from_iter_values(texts.iter()));
        let bodies = DictionaryArray::<Int32Type>::try_new(keys, values).unwrap();
        let rows = 2 * MIN_VALUES;
        let input = batch(vec![
            ("time_unix_nano", times(rows)),
            ("body", Arc::new(bodies)),
        ]);
        let (raw, _) = coder.code(&input).unwrap();
        assert_eq!(raw.column(3).data_type(), &DataType::Utf8);
        assert_eq!(coder.coded_columns().strings, ["host"], "body froze");
    }

    #[test]
    fn the_cap_freezes_a_column_mid_batch_and_the_batch_keeps_its_strings() {
        let unified = unified();
        let gauge = MemoryGauge::new();
        // Each column's share (70 bytes) holds the two hosts, not two bodies.
        let cap = 140;
        let mut coder = StringCoder::new(&unified, cap, &gauge);
        let input = distinct_bodies(0, 10);
        let (coded, text_bytes) = coder.code(&input).unwrap();
        assert_eq!(text_bytes, 10 * 2, "the hosts' text");
        assert_eq!(coded.column(2).data_type(), &DataType::UInt32);
        assert_eq!(coded.column(3).data_type(), &DataType::Utf8);
        assert_eq!(coded.column(3).as_ref(), input.column(2).as_ref());
        assert!(gauge.current() <= cap);
        let decoded = coder.decoder().decode(&coded).unwrap();
        assert_eq!(decoded.column(2).as_ref(), input.column(1).as_ref());
    }

    /// A map column; with `dictionary_keys`, its keys come as a dictionary (as a reader
    /// hinted to read them so returns them).
    fn attributes(entries: &[&[(&str, Option<&str>)]], dictionary_keys: bool) -> ArrayRef {
        use arrow_array::builder::{MapBuilder, StringBuilder};
        let mut builder = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        for row in entries {
            for (k, v) in row.iter() {
                builder.keys().append_value(k);
                builder.values().append_option(*v);
            }
            builder.append(!row.is_empty()).unwrap();
        }
        let map = builder.finish();
        if !dictionary_keys {
            return Arc::new(map);
        }
        let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let keys = cast(map.keys(), &dictionary).unwrap();
        let mut fields: Vec<FieldRef> = map.entries().fields().iter().cloned().collect();
        fields[0] = Arc::new(fields[0].as_ref().clone().with_data_type(dictionary));
        let like = map.data_type().clone();
        rebuild_map(
            &map,
            &like,
            fields.into(),
            vec![keys, Arc::clone(map.values())],
        )
        .unwrap()
    }

    #[test]
    fn codes_the_keys_and_values_of_maps() {
        let plain = attributes(&[&[("pid", Some("1")), ("comp", None)], &[]], false);
        let unified = UnifiedSchema {
            schema: Arc::new(Schema::new(vec![
                Field::new("time_unix_nano", DataType::Int64, true),
                Field::new("attrs", plain.data_type().clone(), true),
            ])),
            service_index: None,
            time_path: vec![0],
            time_unit: Default::default(),
            sort_paths: vec![vec![0]],
        };
        let mut coder = StringCoder::new(&unified, 1 << 20, &MemoryGauge::new());
        assert_eq!(coder.coded_columns().map_keys, ["attrs"]);
        assert_eq!(coder.coded_columns().map_values, ["attrs"]);
        let inputs = [
            batch(vec![
                ("time_unix_nano", times(2)),
                ("attrs", Arc::clone(&plain)),
            ]),
            // Dictionary keys, as a reader hinted to read them so returns them.
            batch(vec![
                ("time_unix_nano", times(3)),
                (
                    "attrs",
                    attributes(&[&[("comp", Some("x"))], &[("pid", Some("1"))], &[]], true),
                ),
            ]),
            // No map in this file.
            batch(vec![("time_unix_nano", times(2))]),
            // Another writer's names for the entries, keys and values.
            batch(vec![
                ("time_unix_nano", times(1)),
                ("attrs", {
                    use arrow_array::builder::{MapBuilder, MapFieldNames, StringBuilder};
                    let names = MapFieldNames {
                        entry: "entries".into(),
                        key: "k".into(),
                        value: "v".into(),
                    };
                    let mut builder =
                        MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
                    builder.keys().append_value("pid");
                    builder.values().append_value("7");
                    builder.append(true).unwrap();
                    Arc::new(builder.finish()) as ArrayRef
                }),
            ]),
        ];
        let mut coded = Vec::new();
        for input in &inputs {
            let (out, _) = coder.code(input).unwrap();
            let (_, children, _) = map_fields(out.column(1).data_type()).unwrap();
            assert_eq!(children[0].data_type(), &DataType::UInt32);
            assert_eq!(children[1].data_type(), &DataType::UInt32);
            coded.push(out);
        }
        assert_eq!(
            coded[0].schema(),
            coded[2].schema(),
            "one schema for all batches"
        );
        assert_eq!(coder.parts[0].values.len(), 2, "pid, comp");
        assert_eq!(coder.parts[1].values.len(), 3, "1, x, 7");
        let decoder = coder.decoder();
        for (coded, input) in coded.iter().zip(&inputs) {
            let decoded = decoder.decode(coded).unwrap();
            let expected = conform(input, &unified.schema).unwrap();
            assert_eq!(decoded.columns(), expected.columns());
        }
    }

    #[test]
    fn a_zero_cap_codes_nothing() {
        let unified = unified();
        let coder = StringCoder::new(&unified, 0, &MemoryGauge::new());
        assert_eq!(coder.coded_columns(), DictionaryColumns::default());
    }
}

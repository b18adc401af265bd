//! Run formation (phase 1): buffer decoded rows up to the budget, then sort and spill.
//!
//! Batches arrive in (input ordinal, row ordinal) order. While nothing has been spilled the
//! buffer may grow to the whole budget B: if the inputs end first, the partition fits B and
//! is written straight from memory (skip-spill). Once the buffer passes B, runs are formed
//! from halves of the budget: a full half is handed to a spill thread (gather, write) while
//! the next half fills, so decoding and spilling use both cores and residency stays within
//! B plus one batch. A run may be cut inside an input, whatever the size of that input.
//! Inputs known not to fit B form runs from halves from the first row on
//! ([`RunFormation::spill_from_start`]).
//!
//! Each batch is sorted on its own as it arrives (still in cache from decoding); the gather
//! of a run then reads every batch front to back, like a merge, instead of jumping across
//! the whole buffer.

use std::ops::{BitAnd, BitOr, Shl};
use std::path::PathBuf;
use std::thread::JoinHandle;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;

use crate::error::{Error, Result};
use crate::gauge::{Charge, MemoryGauge};
use crate::scratch::ScratchDir;
use crate::sort::alignment::ServiceCounts;
use crate::sort::gather::{gather_rows, take_rows};
use crate::sort::key::{BatchKeys, SortKey};
use crate::sort::runs::{RunWriter, SortedRun, SpillCompression, StringDecoder, run_batch_rows};
use crate::sort::sink::ChunkSink;

/// Bytes charged per buffered row for the sort: a 16-byte packed key, an 8-byte position,
/// half a packed key of sort scratch and the row's 4-byte service rank.
const SORT_BYTES_PER_ROW: u64 = 36;

struct Buffered {
    batch: RecordBatch,
    /// Bytes of text the batch's coded columns stand for.
    text_bytes: u64,
    keys: BatchKeys,
    ranks: ServiceRanks,
    charge: Charge,
}

/// Decoded rows held in memory, in (input, row) order.
#[derive(Default)]
struct Buffer {
    batches: Vec<Buffered>,
    bytes: u64,
    text_bytes: u64,
    rows: usize,
}

impl Buffer {
    /// Order of the rows by key: (batch, row) pairs.
    fn sorted_order(&self) -> Vec<(usize, usize)> {
        let keys: Vec<(&BatchKeys, &ServiceRanks)> =
            self.batches.iter().map(|b| (&b.keys, &b.ranks)).collect();
        key_order(&keys, true)
    }

    /// Puts every batch in the form of `schema` with `frozen`, recharging what they hold.
    fn convert(
        &mut self,
        frozen: &StringDecoder,
        schema: &SchemaRef,
        gauge: &MemoryGauge,
    ) -> Result<()> {
        let (mut bytes, mut text_bytes) = (0, 0);
        for buffered in &mut self.batches {
            let before = buffered.charge.bytes();
            buffered.batch = frozen.decode_to(&buffered.batch, schema)?;
            let after = crate::gauge::batch_memory_bytes(&buffered.batch)
                + buffered.keys.extra_bytes()
                + SORT_BYTES_PER_ROW * buffered.batch.num_rows() as u64;
            // The strings now held are no longer text to come.
            let decoded = after.saturating_sub(before);
            buffered.text_bytes = buffered.text_bytes.saturating_sub(decoded);
            buffered.charge = Charge::new(gauge, after);
            bytes += after;
            text_bytes += buffered.text_bytes;
        }
        self.bytes = bytes;
        self.text_bytes = text_bytes;
        Ok(())
    }

    /// Moves the leading batches, up to about `bytes` of them (at least one), into a buffer
    /// of their own; the rest stay, in order.
    fn split_front(&mut self, bytes: u64) -> Buffer {
        let mut front = Buffer::default();
        let mut rest = std::mem::take(&mut self.batches).into_iter();
        for buffered in rest.by_ref() {
            front.bytes += buffered.charge.bytes();
            front.text_bytes += buffered.text_bytes;
            front.rows += buffered.batch.num_rows();
            front.batches.push(buffered);
            if front.bytes >= bytes {
                break;
            }
        }
        self.batches = rest.collect();
        self.bytes -= front.bytes;
        self.text_bytes -= front.text_bytes;
        self.rows -= front.rows;
        front
    }

    /// Writes the rows in key order to `sink`, `chunk_rows` at a time, and empties the buffer;
    /// with a `decoder`, coded columns go out as strings.
    fn drain_sorted(
        &mut self,
        chunk_rows: usize,
        sink: &mut dyn ChunkSink,
        decoder: Option<&StringDecoder>,
    ) -> Result<()> {
        let order = self.sorted_order();
        let batches: Vec<&RecordBatch> = self.batches.iter().map(|b| &b.batch).collect();
        for chunk in order.chunks(chunk_rows.max(1)) {
            let out = gather_rows(&batches, chunk)
                .map_err(|e| Error::arrow("gathering sorted rows", e))?;
            match decoder {
                Some(decoder) => sink.write_chunk(&decoder.decode(&out)?)?,
                None => sink.write_chunk(&out)?,
            }
        }
        *self = Buffer::default();
        Ok(())
    }
}

/// The key prefixes (services) of one batch in byte order, and each row's rank among them.
///
/// Computed once per batch (one hash lookup per row); sorting then compares integers, and
/// the ranks of several batches are reconciled through their few distinct prefixes.
struct ServiceRanks {
    /// Per row: 0 for a null prefix (and for a time-only key), else 1 + the prefix's rank
    /// among the batch's prefixes.
    row_ranks: Vec<u32>,
    /// Per rank r >= 1 (at r - 1): a row holding that service.
    representatives: Vec<u32>,
}

impl ServiceRanks {
    fn of(keys: &BatchKeys) -> Self {
        let mut ids: hashbrown::HashMap<&[u8], u32> = hashbrown::HashMap::new();
        let mut first_rows: Vec<u32> = Vec::new();
        let mut row_ids: Vec<u32> = Vec::with_capacity(keys.len());
        for r in 0..keys.len() {
            let id = match keys.prefix(r) {
                None => 0,
                Some(s) => *ids.entry(s).or_insert_with(|| {
                    first_rows.push(r as u32);
                    first_rows.len() as u32
                }),
            };
            row_ids.push(id);
        }
        let service = |row: u32| keys.prefix(row as usize).unwrap_or_default();
        let mut by_name: Vec<u32> = (0..first_rows.len() as u32).collect();
        by_name.sort_unstable_by(|&a, &b| {
            service(first_rows[a as usize]).cmp(service(first_rows[b as usize]))
        });
        let mut rank_of_id = vec![0u32; first_rows.len() + 1];
        for (rank, &id) in by_name.iter().enumerate() {
            rank_of_id[id as usize + 1] = rank as u32 + 1;
        }
        Self {
            row_ranks: row_ids
                .into_iter()
                .map(|id| rank_of_id[id as usize])
                .collect(),
            representatives: by_name.iter().map(|&id| first_rows[id as usize]).collect(),
        }
    }

    /// Adds the batch's rows per service to `counts` (one lookup per distinct service).
    fn count_into(&self, keys: &BatchKeys, counts: &mut ServiceCounts) {
        let mut rows = vec![0u64; self.representatives.len() + 1];
        for &rank in &self.row_ranks {
            rows[rank as usize] += 1;
        }
        if rows[0] > 0 {
            counts.add_rows(None, rows[0]);
        }
        for (&row, &n) in self.representatives.iter().zip(&rows[1..]) {
            counts.add_rows(keys.service(row as usize), n);
        }
    }

    /// The ranks of the batch reordered by `order` (new row i is old row `order[i]`).
    fn permuted(&self, order: &[(usize, usize)]) -> Self {
        let row_ranks: Vec<u32> = order.iter().map(|&(_, r)| self.row_ranks[r]).collect();
        let mut representatives = vec![0u32; self.representatives.len()];
        for (row, &rank) in row_ranks.iter().enumerate().rev() {
            if rank > 0 {
                representatives[rank as usize - 1] = row as u32;
            }
        }
        Self {
            row_ranks,
            representatives,
        }
    }
}

/// Order of the rows of `batches` (taken in order) by key, as (batch, row) pairs.
///
/// Each batch's service ranks are mapped to ranks among all the batches' services, so the
/// sort compares packed integers `(rank, time, position)`; the position makes every key
/// unique and breaks ties in (batch, row) order, so any sort gives the stable order. With
/// `each_sorted`, every batch is already in key order and the sort merges those runs.
fn key_order(batches: &[(&BatchKeys, &ServiceRanks)], each_sorted: bool) -> Vec<(usize, usize)> {
    let mut names: Vec<(&[u8], usize, usize)> = Vec::new();
    for (b, (keys, ranks)) in batches.iter().enumerate() {
        for (r, &row) in ranks.representatives.iter().enumerate() {
            let name = keys.prefix(row as usize).unwrap_or_default();
            names.push((name, b, r + 1));
        }
    }
    names.sort_unstable();
    let mut global: Vec<Vec<u32>> = batches
        .iter()
        .map(|(_, ranks)| vec![0; ranks.representatives.len() + 1])
        .collect();
    let mut rank = 0u32;
    let mut previous: Option<&[u8]> = None;
    for (name, b, r) in names {
        if previous != Some(name) {
            rank += 1;
            previous = Some(name);
        }
        global[b][r] = rank;
    }
    let rows: usize = batches.iter().map(|(k, _)| k.len()).sum();
    let times = batches
        .iter()
        .flat_map(|(k, _)| (0..k.len()).map(|r| k.time(r)));
    let (min_time, max_time) =
        times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let bits = |v: u64| u64::BITS - v.leading_zeros();
    let time_bits = bits(max_time.wrapping_sub(min_time) as u64);
    let position_bits = bits(rows.saturating_sub(1) as u64);
    let keys = PackedKeys {
        batches,
        global: &global,
        min_time,
        time_shift: position_bits,
        rank_shift: time_bits + position_bits,
    };
    // A batch's times span an hour (42 bits): with its few ranks and rows, its keys fit
    // 64 bits, which sort faster than 128.
    if bits(u64::from(rank)) + time_bits + position_bits < u64::BITS {
        keys.order::<u64>(each_sorted)
    } else {
        PackedKeys {
            time_shift: 32,
            rank_shift: 96,
            ..keys
        }
        .order::<u128>(each_sorted)
    }
}

/// Keys packed into one integer `(rank, time - min_time, position)` at the given shifts;
/// the position makes every key unique and breaks ties in (batch, row) order.
struct PackedKeys<'a, 'k> {
    batches: &'a [(&'k BatchKeys, &'k ServiceRanks)],
    global: &'a [Vec<u32>],
    min_time: i64,
    time_shift: u32,
    rank_shift: u32,
}

impl PackedKeys<'_, '_> {
    fn order<K>(&self, each_sorted: bool) -> Vec<(usize, usize)>
    where
        K: Copy + Ord + From<u64> + Shl<u32, Output = K> + BitOr<Output = K> + BitAnd<Output = K>,
        u64: TryFrom<K>,
    {
        let rows = self.batches.iter().map(|(_, r)| r.row_ranks.len()).sum();
        let mut positions: Vec<(u32, u32)> = Vec::with_capacity(rows);
        let mut packed: Vec<K> = Vec::with_capacity(rows);
        for (b, (keys, ranks)) in self.batches.iter().enumerate() {
            let global = &self.global[b];
            for (r, &local) in ranks.row_ranks.iter().enumerate() {
                let time = keys.time(r).wrapping_sub(self.min_time) as u64;
                let rank = u64::from(global[local as usize]);
                let position = positions.len() as u64;
                packed.push(
                    (K::from(rank) << self.rank_shift)
                        | (K::from(time) << self.time_shift)
                        | K::from(position),
                );
                positions.push((b as u32, r as u32));
            }
        }
        if each_sorted {
            // Finds the batches' runs and merges them.
            packed.sort();
        } else {
            packed.sort_unstable();
        }
        let mask = K::from((1u64 << self.time_shift) - 1);
        packed
            .into_iter()
            .map(|k| {
                let position = u64::try_from(k & mask).map_or(0, |p| p as usize);
                let (b, r) = positions[position];
                (b as usize, r as usize)
            })
            .collect()
    }
}

/// Sorts one batch by key (ties in row order), so that the gather of a whole buffer later
/// reads each batch front to back instead of jumping across the buffer: the random access
/// happens here, inside one batch that is still in cache from decoding.
fn sort_batch(
    key: &SortKey,
    batch: RecordBatch,
    keys: BatchKeys,
) -> Result<(RecordBatch, BatchKeys, ServiceRanks)> {
    let ranks = ServiceRanks::of(&keys);
    let order = key_order(&[(&keys, &ranks)], false);
    if order.iter().enumerate().all(|(i, &(_, r))| i == r) {
        return Ok((batch, keys, ranks));
    }
    let indices = UInt32Array::from_iter_values(order.iter().map(|&(_, r)| r as u32));
    let sorted = take_rows(&batch, &indices).map_err(|e| Error::arrow("sorting a batch", e))?;
    let keys = key.keys(&sorted)?;
    Ok((sorted, keys, ranks.permuted(&order)))
}

/// How runs are written.
#[derive(Debug, Clone)]
struct RunSettings {
    batch_target_bytes: u64,
    compression: SpillCompression,
}

/// Sorts a buffer and writes it as one run file.
fn spill_buffer(mut buffer: Buffer, path: PathBuf, settings: &RunSettings) -> Result<SortedRun> {
    // Sized by the rows' width once decoded, which is how the merge will hold them.
    let decoded_bytes = buffer.bytes + buffer.text_bytes;
    let avg_row_bytes = (decoded_bytes / buffer.rows.max(1) as u64).max(1);
    let rows_per_batch = run_batch_rows(settings.batch_target_bytes, avg_row_bytes);
    let Some(schema) = buffer.batches.first().map(|b| b.batch.schema()) else {
        return Err(Error::invariant("spilling an empty buffer"));
    };
    let mut writer = RunWriter::create(path, &schema, settings.compression)?;
    buffer.drain_sorted(rows_per_batch, &mut writer, None)?;
    let mut run = writer.finish()?;
    // The writer saw coded rows; a merge that decodes them holds them at their full width.
    run.max_row_bytes = run.max_row_bytes.max(avg_row_bytes);
    tracing::debug!(rows = run.rows, bytes = run.file_bytes, "spilled run");
    Ok(run)
}

/// The phase-1 buffer and the runs it has spilled.
pub struct RunFormation<'a> {
    key: &'a SortKey,
    settings: RunSettings,
    budget_bytes: u64,
    gauge: &'a MemoryGauge,
    scratch: &'a ScratchDir,
    buffer: Buffer,
    spilling: Option<JoinHandle<Result<SortedRun>>>,
    runs: Vec<SortedRun>,
    services: ServiceCounts,
    /// Runs are formed from halves of the budget from the first row on.
    spill_from_start: bool,
    /// The budget it was given, before any [`RunFormation::reserve`].
    planned_bytes: u64,
}

impl<'a> RunFormation<'a> {
    /// An empty buffer under budget `budget_bytes`, spilling batches of about
    /// `run_batch_target_bytes` decoded bytes.
    pub fn new(
        key: &'a SortKey,
        budget_bytes: u64,
        run_batch_target_bytes: u64,
        compression: SpillCompression,
        gauge: &'a MemoryGauge,
        scratch: &'a ScratchDir,
    ) -> Self {
        Self {
            key,
            settings: RunSettings {
                batch_target_bytes: run_batch_target_bytes.max(1),
                compression,
            },
            budget_bytes,
            gauge,
            scratch,
            buffer: Buffer::default(),
            spilling: None,
            runs: Vec::new(),
            services: ServiceCounts::default(),
            spill_from_start: false,
            planned_bytes: budget_bytes,
        }
    }

    /// Gives `bytes` of the buffer's budget to something else that needs them from now on (a
    /// reader larger than the sort was planned for): the buffer is spilled first when it holds
    /// more than its smaller share, and waited for, so that what it and a run being spilled
    /// hold stays within the smaller budget from here on. `false`, changing nothing, when that
    /// would leave the buffer less than half the budget it was planned with.
    pub fn reserve(&mut self, bytes: u64) -> Result<bool> {
        let left = self.budget_bytes.saturating_sub(bytes);
        if bytes > self.budget_bytes || left < self.planned_bytes / 2 {
            return Ok(false);
        }
        self.budget_bytes = left;
        self.wait_for_spill()?;
        let share = match self.forms_halves() {
            true => self.budget_bytes / 2,
            false => self.budget_bytes,
        };
        if self.buffer.bytes > share {
            self.choose_compression()?;
            let buffer = std::mem::take(&mut self.buffer);
            self.spill_in_background(buffer);
            self.wait_for_spill()?;
        }
        Ok(true)
    }

    /// Forms runs from halves of the budget from the first row on, instead of first
    /// filling the whole budget in case the partition fits it: for inputs known not to fit
    /// (their encoded rows alone exceed the budget), so that spilling starts overlapping
    /// decoding at once. The output does not change, whatever the runs.
    pub fn spill_from_start(mut self) -> Self {
        self.spill_from_start = true;
        self
    }

    /// Adds a conformed batch whose coded columns stand for `text_bytes` of text (see
    /// [`StringCoder`](crate::sort::runs::StringCoder)); spills a run when the buffer passes its
    /// share of the budget. `frozen` decodes the parts that stopped being coded with this
    /// batch, if any.
    pub fn push(
        &mut self,
        batch: RecordBatch,
        text_bytes: u64,
        frozen: Option<&StringDecoder>,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let schema_changed = self
            .buffer
            .batches
            .last()
            .is_some_and(|last| last.batch.schema() != batch.schema());
        if schema_changed {
            // A part stopped being coded, and a run holds one schema. Parts freeze early
            // (within a few batches of seeing their values), while the buffer is small:
            // then its batches take the new form; otherwise the buffer becomes a run.
            let limit = match self.forms_halves() {
                true => self.budget_bytes / 2,
                false => self.budget_bytes,
            };
            match frozen {
                Some(frozen) if self.buffer.bytes + self.buffer.text_bytes <= limit => {
                    self.buffer.convert(frozen, &batch.schema(), self.gauge)?;
                }
                _ => {
                    self.wait_for_spill()?;
                    self.choose_compression()?;
                    let buffer = std::mem::take(&mut self.buffer);
                    self.spill_in_background(buffer);
                }
            }
        }
        let keys = self.key.keys(&batch)?;
        let (batch, keys, ranks) = sort_batch(self.key, batch, keys)?;
        if self.key.has_service() {
            ranks.count_into(&keys, &mut self.services);
        }
        let bytes = crate::gauge::batch_memory_bytes(&batch)
            + keys.extra_bytes()
            + SORT_BYTES_PER_ROW * batch.num_rows() as u64;
        self.buffer.bytes += bytes;
        self.buffer.rows += batch.num_rows();
        self.buffer.text_bytes += text_bytes;
        self.buffer.batches.push(Buffered {
            batch,
            text_bytes,
            keys,
            ranks,
            charge: Charge::new(self.gauge, bytes),
        });
        let halves = self.forms_halves();
        if !halves && self.buffer.bytes > self.budget_bytes {
            // The partition does not fit: from here on runs are formed from halves. The
            // first half spills on the spill thread while the second is already full, so
            // reading waits for one half's spill instead of a whole budget's.
            self.choose_compression()?;
            let front = self.buffer.split_front(self.budget_bytes / 2);
            self.spill_in_background(front);
        } else if halves && self.buffer.bytes > self.budget_bytes / 2 {
            // INVARIANT: at most one half is spilling while the other fills, so the two
            // together stay within B plus one batch.
            self.wait_for_spill()?;
            self.choose_compression()?;
            let buffer = std::mem::take(&mut self.buffer);
            self.spill_in_background(buffer);
        }
        Ok(())
    }

    /// Whether runs are formed from halves of the budget: a run has been spilled or is
    /// being spilled, or the inputs were known not to fit.
    fn forms_halves(&self) -> bool {
        self.spill_from_start || !self.runs.is_empty() || self.spilling.is_some()
    }

    /// Hands `buffer` to the spill thread. INVARIANT: no spill is in progress.
    fn spill_in_background(&mut self, buffer: Buffer) {
        let path = self.scratch.file("run", "arrow");
        let settings = self.settings.clone();
        self.spilling = Some(std::thread::spawn(move || {
            spill_buffer(buffer, path, &settings)
        }));
    }

    /// Switches to compressed runs for good once scratch space runs low.
    fn choose_compression(&mut self) -> Result<()> {
        if self.settings.compression == SpillCompression::None
            && self.scratch.available_bytes()? < 4 * self.buffer.bytes.max(self.budget_bytes)
        {
            tracing::info!("scratch space is getting low: compressing further runs");
            self.settings.compression = SpillCompression::Lz4;
        }
        Ok(())
    }

    /// Rows per service of every batch pushed so far (empty for a time-only key).
    pub fn take_service_counts(&mut self) -> ServiceCounts {
        std::mem::take(&mut self.services)
    }

    /// The compression the next runs use.
    pub fn compression(&self) -> SpillCompression {
        self.settings.compression
    }

    fn wait_for_spill(&mut self) -> Result<()> {
        if let Some(handle) = self.spilling.take() {
            let run = handle
                .join()
                .map_err(|_| Error::invariant("a spill thread panicked"))??;
            self.runs.push(run);
        }
        Ok(())
    }

    /// Ends phase 1. With no run spilled (and `must_spill` false), writes the sorted buffer
    /// straight to `sink`, decoding coded columns with `decoder`, and returns no runs;
    /// otherwise spills the remainder and returns every run in order (still coded).
    pub fn finish(
        mut self,
        output_chunk_rows: usize,
        must_spill: bool,
        sink: &mut dyn ChunkSink,
        decoder: &StringDecoder,
    ) -> Result<FormedRuns> {
        self.wait_for_spill()?;
        if self.runs.is_empty() && !must_spill {
            self.buffer
                .drain_sorted(output_chunk_rows, sink, Some(decoder))?;
            return Ok(FormedRuns {
                runs: Vec::new(),
                spill_bytes: 0,
            });
        }
        if self.buffer.rows > 0 {
            self.choose_compression()?;
            let buffer = std::mem::take(&mut self.buffer);
            let run = spill_buffer(buffer, self.scratch.file("run", "arrow"), &self.settings)?;
            self.runs.push(run);
        }
        let spill_bytes = self.runs.iter().map(|r| r.file_bytes).sum();
        Ok(FormedRuns {
            runs: std::mem::take(&mut self.runs),
            spill_bytes,
        })
    }
}

impl Drop for RunFormation<'_> {
    fn drop(&mut self) {
        // Never leave a spill thread writing into a scratch directory being removed.
        if let Some(handle) = self.spilling.take() {
            let _ = handle.join();
        }
    }
}

/// The outcome of phase 1.
#[derive(Debug)]
pub struct FormedRuns {
    /// Runs in spill order (empty when the partition was written from memory).
    pub runs: Vec<SortedRun>,
    /// Bytes spilled to scratch.
    pub spill_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::schema::UnifiedSchema;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn unified() -> UnifiedSchema {
        UnifiedSchema {
            schema: Arc::new(Schema::new(vec![
                Field::new("service.name", DataType::Utf8, true),
                Field::new("time_unix_nano", DataType::Int64, false),
            ])),
            service_index: Some(0),
            time_path: vec![1],
            time_unit: Default::default(),
            sort_paths: vec![vec![0], vec![1]],
        }
    }

    /// A batch of `rows` rows with services drawn from `services` (null among them) and
    /// times from `times`.
    fn batch(rows: usize, seed: u64, services: u64, times: &dyn Fn(u64) -> i64) -> RecordBatch {
        let mut next = crate::testing::random_stream(seed.max(1));
        let (mut names, mut stamps) = (Vec::new(), Vec::new());
        for _ in 0..rows {
            let s = next() % (services + 1);
            names.push((s > 0).then(|| format!("svc-{s}")));
            stamps.push(times(next()));
        }
        RecordBatch::try_new(
            unified().schema,
            vec![
                Arc::new(StringArray::from(names)),
                Arc::new(Int64Array::from(stamps)),
            ],
        )
        .expect("batch")
    }

    /// The order a plain stable sort by (service bytes, time) gives, as (batch, row).
    fn expected(batches: &[RecordBatch], key: &SortKey) -> Vec<(usize, usize)> {
        let keys: Vec<BatchKeys> = batches.iter().map(|b| key.keys(b).expect("keys")).collect();
        let mut order: Vec<(usize, usize)> = (0..batches.len())
            .flat_map(|b| (0..batches[b].num_rows()).map(move |r| (b, r)))
            .collect();
        order.sort_by(|&(a, i), &(b, j)| keys[a].cmp_rows(i, &keys[b], j));
        order
    }

    fn check(times: &dyn Fn(u64) -> i64, services: u64) {
        let key = SortKey::new(&unified()).unwrap();
        for seed in 1..20 {
            // One unsorted batch.
            let one = batch(500, seed, services, times);
            let keys = key.keys(&one).expect("keys");
            let ranks = ServiceRanks::of(&keys);
            assert_eq!(
                key_order(&[(&keys, &ranks)], false),
                expected(std::slice::from_ref(&one), &key)
            );
            // Several sorted batches, merged.
            let sorted: Vec<(RecordBatch, BatchKeys, ServiceRanks)> = (0..5)
                .map(|b| {
                    let unsorted = batch(50 + 40 * b, seed * 7 + b as u64, services, times);
                    let keys = key.keys(&unsorted).expect("keys");
                    sort_batch(&key, unsorted, keys).expect("sorted")
                })
                .collect();
            let batches: Vec<RecordBatch> = sorted.iter().map(|(b, _, _)| b.clone()).collect();
            let parts: Vec<(&BatchKeys, &ServiceRanks)> =
                sorted.iter().map(|(_, k, r)| (k, r)).collect();
            assert_eq!(key_order(&parts, true), expected(&batches, &key));
        }
    }

    /// Six batches of 2,000 rows within an hour, the bytes they take in a buffer, a budget
    /// they all fit but not half of, a gauge and a decoder.
    fn six_batches() -> (Vec<RecordBatch>, u64, u64, MemoryGauge, StringDecoder) {
        let hour = |r: u64| 1_700_000_000_000_000_000 + (r % 3_600_000) as i64 * 1_000_000;
        let batches: Vec<RecordBatch> = (1..=6).map(|i| batch(2_000, i, 5, &hour)).collect();
        let bytes: u64 = batches
            .iter()
            .map(|b| crate::gauge::batch_memory_bytes(b) + SORT_BYTES_PER_ROW * 2_000)
            .sum();
        let gauge = MemoryGauge::new();
        let decoder = crate::sort::runs::StringCoder::new(&unified(), 0, &gauge).decoder();
        (batches, bytes, bytes + bytes / 10, gauge, decoder)
    }

    /// A formation under `budget` spilling plain runs of batches of an eighth of it.
    fn plain_formation<'a>(
        key: &'a SortKey,
        budget: u64,
        gauge: &'a MemoryGauge,
        scratch: &'a ScratchDir,
    ) -> RunFormation<'a> {
        RunFormation::new(
            key,
            budget,
            budget / 8,
            SpillCompression::None,
            gauge,
            scratch,
        )
    }

    #[test]
    fn spills_from_the_start_only_when_told_and_gives_the_same_rows() {
        let key = SortKey::new(&unified()).unwrap();
        // Everything fits the budget, but not half of it.
        let (batches, _, budget, gauge, decoder) = six_batches();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut outputs = Vec::new();
        for from_start in [false, true] {
            let scratch = ScratchDir::create(dir.path()).expect("scratch");
            let mut formation = plain_formation(&key, budget, &gauge, &scratch);
            if from_start {
                formation = formation.spill_from_start();
            }
            for b in &batches {
                formation.push(b.clone(), 0, None).expect("push");
            }
            let mut sink = crate::sort::sink::VecSink::default();
            let formed = formation
                .finish(1_000, false, &mut sink, &decoder)
                .expect("finish");
            assert_eq!(formed.runs.len(), if from_start { 2 } else { 0 });
            let mut rows = sink.chunks;
            for run in &formed.runs {
                let reader = crate::sort::runs::RunReader::open(&run.path).expect("run");
                rows.extend(reader.map(|b| b.expect("batch")));
            }
            let rows =
                arrow_select::concat::concat_batches(&unified().schema, &rows).expect("rows");
            outputs.push(rows);
        }
        // Sorted in memory, or in two sorted runs: the same rows either way.
        let sorted = |b: &RecordBatch| {
            let order = expected(std::slice::from_ref(b), &key);
            gather_rows(&[b], &order).expect("gather")
        };
        assert_eq!(sorted(&outputs[0]), outputs[0]);
        assert_eq!(sorted(&outputs[1]), outputs[0]);
    }

    #[test]
    fn a_reserve_spills_what_the_smaller_share_cannot_hold_and_keeps_every_row() {
        let key = SortKey::new(&unified()).unwrap();
        let (batches, bytes, budget, gauge, decoder) = six_batches();
        let dir = tempfile::tempdir().expect("tempdir");
        let scratch = ScratchDir::create(dir.path()).expect("scratch");
        let mut formation = plain_formation(&key, budget, &gauge, &scratch);
        for b in &batches[..4] {
            formation.push(b.clone(), 0, None).expect("push");
        }
        assert!(formation.runs.is_empty() && formation.spilling.is_none());
        // Two thirds of the rows are held; half the budget goes: they no longer fit.
        assert!(formation.reserve(budget / 2).expect("reserve"));
        assert_eq!(
            formation.runs.len(),
            1,
            "the buffer was spilled, and waited for"
        );
        assert!(formation.spilling.is_none() && formation.buffer.bytes == 0);
        // Never below half the budget it was planned with.
        assert!(!formation.reserve(budget / 3).expect("reserve"));
        assert_eq!(formation.budget_bytes, budget - budget / 2);
        for b in &batches[4..] {
            formation.push(b.clone(), 0, None).expect("push");
            assert!(formation.buffer.bytes <= formation.budget_bytes / 2 + bytes / 6);
        }
        let mut sink = crate::sort::sink::VecSink::default();
        let formed = formation
            .finish(1_000, false, &mut sink, &decoder)
            .expect("finish");
        let mut rows = 0;
        for run in &formed.runs {
            let reader = crate::sort::runs::RunReader::open(&run.path).expect("run");
            rows += reader.map(|b| b.expect("batch").num_rows()).sum::<usize>();
        }
        assert_eq!(rows, 12_000);
    }

    #[test]
    fn orders_rows_within_an_hour_by_packed_64_bit_keys() {
        // Few distinct times, so equal keys are common and ties must keep row order.
        check(
            &|r| 1_700_000_000_000_000_000 + (r % 40) as i64 * 90_000_000_000,
            6,
        );
    }

    #[test]
    fn orders_rows_over_the_whole_time_range_by_128_bit_keys() {
        let extremes = [i64::MIN, -1, 0, 1, i64::MAX];
        check(&|r| extremes[(r % 5) as usize], 3);
        check(&|r| r as i64, 200);
    }
}

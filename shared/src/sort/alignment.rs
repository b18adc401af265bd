//! Row-group boundaries at service boundaries, so a service's row groups hold only it.
//!
//! Sorted by (service, time), a row group that holds the tail of one service and the head
//! of the next has a time range spanning the whole hour, so every window query for either
//! service must read it. A service large enough to fill half a row group therefore starts
//! and ends its own row groups; small services still share groups. The decision depends
//! only on the row sequence and the per-service row counts of the whole partition, so it is
//! the same whether the rows come from memory or from a merge of spilled runs.

use std::fs::File;

use hashbrown::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_cast::cast;
use arrow_schema::DataType;
use arrow_select::filter::filter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::{Error, Result};
use crate::input::CheckedInput;
use crate::input::column_path::{column_named, resolve};
use crate::input::type_union::time_nanos;
use crate::options::IntegerTimeUnit;
use crate::sort::key::KeyRange;
use crate::sort::sink::ChunkSink;

/// Most distinct services tracked; beyond this (a hostile or unusual partition) boundaries
/// are left to the size rotation alone.
pub const MAX_TRACKED_SERVICES: usize = 1 << 16;

/// Rows per service over the whole partition (nulls under `None`).
#[derive(Debug, Clone, Default)]
pub struct ServiceCounts {
    counts: HashMap<String, u64>,
    nulls: u64,
    overflowed: bool,
}

impl ServiceCounts {
    /// Adds the services of one batch's service column.
    pub fn add(&mut self, services: &dyn Array) {
        let Some(services) = services.as_string_opt::<i32>() else {
            return;
        };
        for i in 0..services.len() {
            self.add_rows(services.is_valid(i).then(|| services.value(i)), 1);
        }
    }

    /// Adds `rows` rows of `service` (`None`: null).
    pub fn add_rows(&mut self, service: Option<&str>, rows: u64) {
        if self.overflowed {
            return;
        }
        let Some(service) = service else {
            self.nulls += rows;
            return;
        };
        // Look up by `&str`: no allocation unless the service is new.
        match self.counts.get_mut(service) {
            Some(n) => *n += rows,
            None => {
                if self.counts.len() >= MAX_TRACKED_SERVICES {
                    self.overflowed = true;
                    self.counts.clear();
                    return;
                }
                self.counts.insert(service.to_string(), rows);
            }
        }
    }

    /// Merges counts taken elsewhere.
    pub fn merge(&mut self, other: ServiceCounts) {
        if other.overflowed {
            self.overflowed = true;
            self.counts.clear();
        }
        if self.overflowed {
            return;
        }
        self.nulls += other.nulls;
        for (service, n) in other.counts {
            *self.counts.entry(service).or_default() += n;
        }
        if self.counts.len() > MAX_TRACKED_SERVICES {
            self.overflowed = true;
            self.counts.clear();
        }
    }

    fn rows(&self, service: Option<&str>) -> u64 {
        match service {
            None => self.nulls,
            Some(s) => self.counts.get(s).copied().unwrap_or(0),
        }
    }

    /// False once too many distinct services were seen to track them.
    pub fn is_complete(&self) -> bool {
        !self.overflowed
    }
}

/// Rows per service of one input (of its selected row groups), reading only its key columns;
/// with `range`, only the rows whose key is in it (`range.1` names the time column).
pub fn count_services(
    input: &CheckedInput,
    service_column: &str,
    range: Option<(&KeyRange, &str, IntegerTimeUnit)>,
) -> Result<ServiceCounts> {
    let mut counts = ServiceCounts::default();
    let file =
        File::open(&input.staged.local).map_err(|e| Error::scratch(&input.staged.local, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| Error::parquet(input.staged.key.to_string(), e))?;
    let Some(index) = builder.schema().index_of(service_column).ok() else {
        return Ok(counts);
    };
    let mut wanted = vec![index];
    if let Some((_, time_column, _)) = range {
        let time = resolve(builder.schema().fields(), time_column).ok_or_else(|| {
            Error::invariant(format!("{} has no column {time_column}", input.staged.key))
        })?;
        wanted.push(time[0]);
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), wanted);
    let mut builder = builder.with_projection(mask).with_batch_size(64 * 1024);
    if let Some(row_groups) = &input.row_groups {
        builder = builder.with_row_groups(row_groups.clone());
    }
    let reader = builder
        .build()
        .map_err(|e| Error::parquet(input.staged.key.to_string(), e))?;
    for batch in reader {
        let batch = batch.map_err(|e| Error::arrow(format!("reading {}", input.staged.key), e))?;
        let column = batch
            .column_by_name(service_column)
            .ok_or_else(|| Error::invariant("the service column went missing"))?;
        let mut services = cast(column, &DataType::Utf8)
            .map_err(|e| Error::arrow("reading the service column", e))?;
        if let Some((range, time_column, time_unit)) = range {
            let time = column_named(&batch, time_column)?
                .ok_or_else(|| Error::invariant("the time column went missing"))?;
            let times = time_nanos(time.as_ref(), time_unit)
                .map_err(|e| Error::arrow("reading the time key", e))?;
            let strings = services.as_string::<i32>();
            let keep: BooleanArray = (0..batch.num_rows())
                .map(|i| {
                    let service = strings.is_valid(i).then(|| strings.value(i).as_bytes());
                    Some(range.contains(service, times.value(i)))
                })
                .collect();
            services = filter(&services, &keep)
                .map_err(|e| Error::arrow("filtering the service column", e))?;
        }
        counts.add(&services);
    }
    Ok(counts)
}

/// A sink adapter that ends the row group wherever a large service starts or ends.
pub struct AligningSink<'a> {
    inner: &'a mut dyn ChunkSink,
    counts: ServiceCounts,
    service_index: usize,
    large_rows: u64,
    current: Option<Option<String>>,
}

impl<'a> AligningSink<'a> {
    /// Wraps `inner`; a service with at least `large_rows` rows gets row groups of its own.
    pub fn new(
        inner: &'a mut dyn ChunkSink,
        counts: ServiceCounts,
        service_index: usize,
        large_rows: u64,
    ) -> Self {
        Self {
            inner,
            counts,
            service_index,
            large_rows: large_rows.max(1),
            current: None,
        }
    }

    fn is_large(&self, service: Option<&str>) -> bool {
        self.counts.rows(service) >= self.large_rows
    }
}

impl ChunkSink for AligningSink<'_> {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        let Some(services) = chunk.column(self.service_index).as_string_opt::<i32>() else {
            return self.inner.write_chunk(chunk);
        };
        let services = services.clone();
        let mut start = 0;
        for i in 0..chunk.num_rows() {
            let service = services.is_valid(i).then(|| services.value(i));
            let changed = match &self.current {
                None => false,
                Some(previous) => previous.as_deref() != service,
            };
            if changed {
                let previous = self.current.as_ref().and_then(|p| p.as_deref());
                if self.is_large(previous) || self.is_large(service) {
                    if i > start {
                        self.inner.write_chunk(&chunk.slice(start, i - start))?;
                    }
                    self.inner.end_row_group()?;
                    start = i;
                }
            }
            if changed || self.current.is_none() {
                // Allocates once per service change, not per row.
                self.current = Some(service.map(str::to_string));
            }
        }
        if chunk.num_rows() > start {
            self.inner
                .write_chunk(&chunk.slice(start, chunk.num_rows() - start))?;
        }
        Ok(())
    }

    fn end_row_group(&mut self) -> Result<()> {
        self.inner.end_row_group()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sort::sink::VecSink;
    use arrow_array::StringArray;
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    struct Recording {
        events: Vec<String>,
    }

    impl ChunkSink for Recording {
        fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
            self.events.push(format!("rows {}", chunk.num_rows()));
            Ok(())
        }
        fn end_row_group(&mut self) -> Result<()> {
            self.events.push("end".into());
            Ok(())
        }
    }

    #[test]
    fn ends_groups_around_large_services_only() {
        let services = StringArray::from(vec!["a", "b", "b", "b", "c", "d"]);
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(services.clone())]).unwrap();
        let mut counts = ServiceCounts::default();
        counts.add(&services);
        let mut recording = Recording { events: Vec::new() };
        let mut sink = AligningSink::new(&mut recording, counts, 0, 3);
        sink.write_chunk(&batch).unwrap();
        // "b" is large: groups end before and after it; a, c, d are small and share.
        assert_eq!(
            recording.events,
            ["rows 1", "end", "rows 3", "end", "rows 2"]
        );
        let _ = VecSink::default();
    }
}

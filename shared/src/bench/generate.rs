//! Realistic synthetic ingest files for a partition, built from real LogHub log lines.
//!
//! Each file is one slice of the hour in append order, the shape ingest really writes: times
//! mostly increasing with a little jitter, services interleaved with Zipf-like volumes (a few
//! huge services, a tiny one), about 0.5% of rows without a service name, and bodies that are
//! real log lines of each service's own dataset with their template parameters re-filled.
//! Everything is a function of the [`GenerateSpec`] and the partition: the same inputs give
//! byte-identical files, because the random numbers are hand-rolled (no crate upgrade can
//! change them) and the writer settings are fixed.
//!
//! This module is behind the `generate` feature so the Lambda functions do not embed the
//! corpus.

mod batch;
mod corpus;
mod service;

use arrow_array::RecordBatch;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

pub use batch::{WIDE_COLUMN_BYTES, WIDE_COLUMNS, ingest_schema};
pub use service::service_names;

use crate::error::{Error, Result};
use crate::partition::{KeyLayout, PartitionId};
use crate::read::inspect::parquet_store_error;
use crate::store::Store;

/// Rows per generated batch (narrow files).
const BATCH_ROWS: usize = 8192;
/// Rows per generated batch (wide files, about 10 KB a row).
const WIDE_BATCH_ROWS: usize = 1024;
/// The generator's writer closes a row group past this encoded size, bounding its memory.
const MAX_ROW_GROUP_BYTES: usize = 64 << 20;

/// What to generate for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateSpec {
    /// Number of ingest files.
    pub files: usize,
    /// Rows in each file.
    pub rows_per_file: usize,
    /// Number of distinct services (see [`service_names`]).
    pub services: usize,
    /// Seed of every random choice; also part of each file name.
    pub seed: u64,
    /// Add [`WIDE_COLUMNS`] text columns `attr_00`.. of about [`WIDE_COLUMN_BYTES`] each.
    pub wide: bool,
}

impl Default for GenerateSpec {
    fn default() -> Self {
        Self {
            files: 8,
            rows_per_file: 10_000,
            services: 12,
            seed: 1,
            wide: false,
        }
    }
}

impl GenerateSpec {
    /// Checks that the spec asks for something.
    pub fn validate(&self) -> Result<()> {
        for (what, n) in [
            ("files", self.files),
            ("rows per file", self.rows_per_file),
            ("services", self.services),
        ] {
            if n == 0 {
                return Err(Error::Config {
                    message: format!("generate: {what} must be at least 1"),
                });
            }
        }
        Ok(())
    }
}

/// What [`generate_partition`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GenerateReport {
    /// Object keys of the files written, in order.
    pub keys: Vec<String>,
    /// Rows written across all files.
    pub rows: u64,
    /// Bytes written across all files.
    pub bytes: u64,
}

/// The base name of generated file `index`: `ingest-<seed>-<000042>.parquet`.
pub fn ingest_file_name(seed: u64, index: usize) -> String {
    format!("ingest-{seed}-{index:06}.parquet")
}

/// Writes `spec.files` ingest files into the partition's ingest directory, one at a time,
/// each streamed to the store as its row groups complete.
pub async fn generate_partition(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    spec: &GenerateSpec,
) -> Result<GenerateReport> {
    spec.validate()?;
    let dir = layout.ingest_dir(partition);
    let mut report = GenerateReport::default();
    for index in 0..spec.files {
        let key = dir.clone().join(ingest_file_name(spec.seed, index));
        let bytes = write_ingest_file(store, &key, partition, spec, index).await?;
        report.rows += spec.rows_per_file as u64;
        report.bytes += bytes;
        report.keys.push(key.to_string());
    }
    Ok(report)
}

/// All rows of generated file `file_index`, in memory (for tests and benchmarks).
pub fn generate_batches(
    partition: &PartitionId,
    spec: &GenerateSpec,
    file_index: usize,
) -> Result<Vec<RecordBatch>> {
    let mut rows = batch::FileRows::new(partition, spec, file_index)?;
    let mut batches = Vec::new();
    while let Some(batch) = rows.next_batch(batch_rows(spec))? {
        batches.push(batch);
    }
    Ok(batches)
}

fn batch_rows(spec: &GenerateSpec) -> usize {
    if spec.wide {
        WIDE_BATCH_ROWS
    } else {
        BATCH_ROWS
    }
}

/// The fixed writer settings of generated files: ZSTD, no declared sort order (ingest files
/// are unsorted), defaults otherwise.
fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_bytes(Some(MAX_ROW_GROUP_BYTES))
        .build()
}

async fn write_ingest_file(
    store: &Store,
    key: &Path,
    partition: &PartitionId,
    spec: &GenerateSpec,
    index: usize,
) -> Result<u64> {
    let mut rows = batch::FileRows::new(partition, spec, index)?;
    let sink = BufWriter::new(std::sync::Arc::clone(store.object_store()), key.clone());
    let mut writer = AsyncArrowWriter::try_new(sink, rows.schema(), Some(writer_properties()))
        .map_err(|e| parquet_store_error("put", key, e))?;
    while let Some(batch) = rows.next_batch(batch_rows(spec))? {
        writer
            .write(&batch)
            .await
            .map_err(|e| parquet_store_error("put", key, e))?;
    }
    writer
        .finish()
        .await
        .map_err(|e| parquet_store_error("put", key, e))?;
    Ok(writer.bytes_written() as u64)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use bytes::Bytes;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    fn partition() -> PartitionId {
        PartitionId::parse("acme", "2026-11-29T10").expect("valid partition")
    }

    fn memory_store() -> Store {
        Store::from_object_store(Arc::new(InMemory::new()), "memory://")
    }

    fn spec(rows_per_file: usize) -> GenerateSpec {
        GenerateSpec {
            files: 3,
            rows_per_file,
            services: 6,
            seed: 42,
            wide: false,
        }
    }

    async fn contents(store: &Store, keys: &[String]) -> Vec<Bytes> {
        let mut out = Vec::new();
        for key in keys {
            let got = store.object_store().get(&Path::from(key.as_str())).await;
            out.push(got.expect("written").bytes().await.expect("readable"));
        }
        out
    }

    #[tokio::test]
    async fn same_spec_gives_identical_bytes() {
        let (a, b) = (memory_store(), memory_store());
        let layout = KeyLayout::default();
        let spec = spec(2000);
        let first = generate_partition(&a, &layout, &partition(), &spec)
            .await
            .unwrap();
        let second = generate_partition(&b, &layout, &partition(), &spec)
            .await
            .unwrap();
        assert_eq!(first, second);
        assert_eq!(first.rows, 6000);
        assert_eq!(
            first.keys[1],
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/ingest-42-000001.parquet"
        );
        let files = contents(&a, &first.keys).await;
        assert_eq!(files, contents(&b, &second.keys).await);
        assert_eq!(
            first.bytes,
            files.iter().map(|f| f.len() as u64).sum::<u64>()
        );
        assert_ne!(files[0], files[1], "each file is its own slice");

        let other_seed = GenerateSpec { seed: 43, ..spec };
        let third = generate_partition(&b, &layout, &partition(), &other_seed)
            .await
            .unwrap();
        assert_ne!(contents(&b, &third.keys).await[0], files[0]);
    }

    #[tokio::test]
    async fn written_files_read_back_unsorted() {
        let store = memory_store();
        let report = generate_partition(&store, &KeyLayout::default(), &partition(), &spec(3000))
            .await
            .unwrap();
        let bytes = contents(&store, &report.keys[..1]).await.remove(0);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        let metadata = reader.metadata().clone();
        assert_eq!(metadata.file_metadata().num_rows(), 3000);
        assert!(
            metadata
                .row_groups()
                .iter()
                .all(|rg| rg.sorting_columns().is_none())
        );
        let rows: usize = reader.build().unwrap().map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 3000);
    }

    #[test]
    fn rows_stay_inside_the_hour_in_append_order() {
        let (start, end) = partition().time_range_nanos();
        let spec = spec(5000);
        let mut previous_max = start;
        for index in 0..spec.files {
            let batches = generate_batches(&partition(), &spec, index).unwrap();
            let times: Vec<i64> = batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            assert_eq!(times.len(), 5000);
            assert!(times.iter().all(|t| (start..end).contains(t)));
            let descents = times.windows(2).filter(|w| w[1] < w[0]).count();
            assert!(descents > 0, "ingest order has jitter");
            let (first, last) = (times[..500].iter().max(), times[4500..].iter().min());
            assert!(first < last, "times rise across the file");
            assert!(*last.unwrap() >= previous_max - 2_000_000_000);
            previous_max = *times.iter().max().unwrap();
        }
    }

    fn service_counts(batches: &[RecordBatch]) -> (HashMap<String, usize>, usize, usize) {
        let mut counts = HashMap::new();
        let (mut nulls, mut switches, mut last) = (0, 0, None::<String>);
        for batch in batches {
            let column = batch.column(1).as_string::<i32>();
            for i in 0..column.len() {
                let name = column.is_valid(i).then(|| column.value(i).to_string());
                match &name {
                    Some(n) => *counts.entry(n.clone()).or_insert(0) += 1,
                    None => nulls += 1,
                }
                if name.is_some() && last.is_some() && name != last {
                    switches += 1;
                }
                last = name.or(last);
            }
        }
        (counts, nulls, switches)
    }

    #[test]
    fn services_are_skewed_interleaved_and_sometimes_null() {
        let spec = GenerateSpec {
            files: 1,
            rows_per_file: 40_000,
            ..spec(0)
        };
        let batches = generate_batches(&partition(), &spec, 0).unwrap();
        let (counts, nulls, switches) = service_counts(&batches);
        let names = service_names(6);
        let largest = counts.get(&names[0]).copied().unwrap_or(0);
        let smallest = counts.get(&names[5]).copied().unwrap_or(0);
        assert!(counts.len() >= 5, "{counts:?}");
        assert!(largest > 30 * smallest.max(1), "{counts:?}");
        assert!(counts.values().all(|&c| c <= largest));
        assert!(
            (40..=400).contains(&nulls),
            "{nulls} null service names of 40000"
        );
        assert!(switches > 10_000, "services interleave: {switches}");
    }

    #[test]
    fn bodies_come_from_each_services_dataset() {
        let spec = GenerateSpec {
            files: 1,
            rows_per_file: 2000,
            ..spec(0)
        };
        let batch = &generate_batches(&partition(), &spec, 0).unwrap()[0];
        let services = batch.column(1).as_string::<i32>();
        let bodies = batch.column(4).as_string::<i32>();
        let tenants = batch.column(5).as_string::<i32>();
        for i in 0..batch.num_rows() {
            assert_eq!(tenants.value(i), "acme");
            assert!(!bodies.value(i).is_empty());
            if services.is_valid(i) && services.value(i) == "spark.executor" {
                assert!(!bodies.value(i).contains("<*>"));
            }
        }
    }

    #[test]
    fn wide_mode_adds_forty_text_columns() {
        let spec = GenerateSpec {
            files: 1,
            rows_per_file: 300,
            wide: true,
            ..spec(0)
        };
        let batches = generate_batches(&partition(), &spec, 0).unwrap();
        let batch = &batches[0];
        assert_eq!(batch.num_columns(), 9 + WIDE_COLUMNS);
        assert_eq!(batch.schema().field(9).name(), "attr_00");
        assert_eq!(batch.schema().field(48).name(), "attr_39");
        for column in &batch.columns()[9..] {
            let text = column.as_string::<i32>();
            let bytes = text.value_data().len() / text.len();
            assert!((240..=WIDE_COLUMN_BYTES).contains(&bytes), "{bytes}");
        }
        let narrow = generate_batches(
            &partition(),
            &GenerateSpec {
                wide: false,
                ..spec
            },
            0,
        );
        assert_eq!(narrow.unwrap()[0].num_columns(), 9);
    }

    #[test]
    fn empty_specs_are_rejected() {
        for bad in [
            GenerateSpec {
                files: 0,
                ..spec(10)
            },
            GenerateSpec {
                services: 0,
                ..spec(10)
            },
            spec(0),
        ] {
            assert!(generate_batches(&partition(), &bad, 0).is_err(), "{bad:?}");
        }
        assert!(generate_batches(&partition(), &spec(10), 3).is_err());
    }
}

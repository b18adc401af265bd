//! The on-disk format of a sorted run: an Arrow IPC stream, LZ4-compressed.
//!
//! Runs are local scratch, never truth: they hold rows already conformed to the output
//! schema, in key order, in batches small enough that a merge of many runs stays within
//! the budget. IPC decodes far faster than Parquet, and a run's bytes reach the output only
//! through its rows, so its encoding cannot affect output bytes.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::CompressionType;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::SchemaRef;

use crate::error::{Error, Result};
use crate::sort::sink::ChunkSink;

/// Whether spilled runs are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpillCompression {
    /// Plain IPC: fastest, uses scratch space equal to the decoded rows.
    None,
    /// LZ4 frames: a few times smaller, for when scratch space is tight.
    Lz4,
}

/// A sorted run spilled to scratch.
#[derive(Debug, Clone)]
pub struct SortedRun {
    /// The run file.
    pub path: PathBuf,
    /// Rows in the run.
    pub rows: u64,
    /// Bytes of the file.
    pub file_bytes: u64,
    /// Decoded bytes of the largest batch written.
    pub max_batch_bytes: u64,
    /// Largest average decoded bytes per row over its batches, to size later merges.
    pub max_row_bytes: u64,
    /// The schema of its batches (coded columns are `UInt32`, see `StringCoder`).
    pub schema: SchemaRef,
}

/// Writes one sorted run.
pub struct RunWriter {
    path: PathBuf,
    writer: StreamWriter<BufWriter<File>>,
    schema: SchemaRef,
    rows: u64,
    max_batch_bytes: u64,
    max_row_bytes: u64,
}

impl RunWriter {
    /// Creates a run file at `path` for batches of `schema`.
    pub fn create(
        path: PathBuf,
        schema: &SchemaRef,
        compression: SpillCompression,
    ) -> Result<Self> {
        let file = File::create(&path).map_err(|e| Error::scratch(&path, e))?;
        let codec = match compression {
            SpillCompression::None => None,
            SpillCompression::Lz4 => Some(CompressionType::LZ4_FRAME),
        };
        let options = IpcWriteOptions::default()
            .try_with_compression(codec)
            .map_err(|e| Error::arrow("configuring the run writer", e))?;
        // Small enough that batch bodies (hundreds of KB) bypass the buffer instead of being
        // copied into it; the small message headers are still gathered.
        let writer = StreamWriter::try_new_with_options(
            BufWriter::with_capacity(64 << 10, file),
            schema,
            options,
        )
        .map_err(|e| Error::arrow(format!("creating run {}", path.display()), e))?;
        Ok(Self {
            path,
            writer,
            schema: Arc::clone(schema),
            rows: 0,
            max_batch_bytes: 0,
            max_row_bytes: 0,
        })
    }

    /// Appends a batch (rows must follow the previous ones in key order).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let bytes = crate::gauge::batch_memory_bytes(batch);
        self.rows += batch.num_rows() as u64;
        self.max_batch_bytes = self.max_batch_bytes.max(bytes);
        self.max_row_bytes = self
            .max_row_bytes
            .max(bytes / (batch.num_rows().max(1) as u64));
        self.writer
            .write(batch)
            .map_err(|e| Error::arrow(format!("writing run {}", self.path.display()), e))
    }

    /// Finishes the file.
    pub fn finish(mut self) -> Result<SortedRun> {
        self.writer
            .finish()
            .map_err(|e| Error::arrow(format!("finishing run {}", self.path.display()), e))?;
        drop(self.writer);
        let file_bytes = std::fs::metadata(&self.path)
            .map_err(|e| Error::scratch(&self.path, e))?
            .len();
        Ok(SortedRun {
            path: self.path,
            rows: self.rows,
            file_bytes,
            max_batch_bytes: self.max_batch_bytes,
            max_row_bytes: self.max_row_bytes,
            schema: self.schema,
        })
    }
}

impl ChunkSink for RunWriter {
    fn write_chunk(&mut self, chunk: &RecordBatch) -> Result<()> {
        self.write(chunk)
    }
}

/// Most rows in one batch of a run: runs of narrow rows are written in batches of this many,
/// smaller than their share of the budget.
pub const MAX_RUN_BATCH_ROWS: usize = 1024;

/// Rows per batch of a run written at `target_bytes` a batch, of rows of `row_bytes`: between
/// one and [`MAX_RUN_BATCH_ROWS`].
pub fn run_batch_rows(target_bytes: u64, row_bytes: u64) -> usize {
    (target_bytes / row_bytes.max(1)).clamp(1, MAX_RUN_BATCH_ROWS as u64) as usize
}

/// Bytes an open run reader holds beside its batch (the budget's plan leaves room for them).
pub use crate::budget::RUN_READ_BUFFER_BYTES;

/// Reads a run back, batch by batch.
pub struct RunReader {
    path: PathBuf,
    reader: StreamReader<BufReader<ReleasingFile>>,
}

impl RunReader {
    /// Opens a run file.
    pub fn open(path: &Path) -> Result<Self> {
        // Writable so the part already read can be released (see `ReleasingFile`).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::scratch(path, e))?;
        let file = ReleasingFile {
            file,
            read: 0,
            released: 0,
        };
        let buffer = RUN_READ_BUFFER_BYTES as usize;
        let reader = StreamReader::try_new(BufReader::with_capacity(buffer, file), None)
            .map_err(|e| Error::arrow(format!("opening run {}", path.display()), e))?;
        Ok(Self {
            path: path.to_path_buf(),
            reader,
        })
    }
}

impl Iterator for RunReader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reader
            .next()
            .map(|r| r.map_err(|e| Error::arrow(format!("reading run {}", self.path.display()), e)))
    }
}

/// Bytes read between two releases of a run's read part.
const RELEASE_STEP: u64 = 8 << 20;

/// A run file read front to back that gives the part already read back to the file system
/// as it goes (a hole punched over it, on Linux). A merge then frees scratch space and page
/// cache while it runs, on the merging thread, instead of all at once when the scratch
/// directory is removed after the last run ends, which would delay the commit.
struct ReleasingFile {
    file: File,
    read: u64,
    released: u64,
}

impl Read for ReleasingFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read += n as u64;
        if self.read - self.released >= RELEASE_STEP {
            // Whole pages only; everything below `read` has been copied out already.
            let end = self.read & !4095;
            release(&self.file, self.released, end);
            self.released = end;
        }
        Ok(n)
    }
}

#[cfg(target_os = "linux")]
fn release(file: &File, start: u64, end: u64) {
    use nix::fcntl::{FallocateFlags, fallocate};
    let (Ok(offset), Ok(len)) = (i64::try_from(start), i64::try_from(end - start)) else {
        return;
    };
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    // A file system without hole punching keeps the bytes until the file is removed.
    let _ = fallocate(file, flags, offset, len);
}

#[cfg(not(target_os = "linux"))]
fn release(_file: &File, _start: u64, _end: u64) {}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    #[test]
    fn runs_round_trip_plain_and_lz4() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("t", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
                Arc::new(Int64Array::from(vec![1, 2, 3])),
            ],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (i, compression) in [SpillCompression::None, SpillCompression::Lz4]
            .into_iter()
            .enumerate()
        {
            let path = dir.path().join(format!("run-{i}.arrow"));
            let mut writer = RunWriter::create(path.clone(), &schema, compression).unwrap();
            writer.write(&batch).unwrap();
            writer.write(&batch.slice(1, 2)).unwrap();
            let run = writer.finish().unwrap();
            assert_eq!(run.rows, 5);
            assert!(run.file_bytes > 0 && run.max_row_bytes > 0);
            let read: Vec<RecordBatch> = RunReader::open(&path)
                .unwrap()
                .map(|b| b.unwrap())
                .collect();
            assert_eq!(read, vec![batch.clone(), batch.slice(1, 2)]);
        }
    }

    /// Reading a run gives its space back as it goes: by the end, most of the file is a hole,
    /// and every batch still reads back whole.
    #[cfg(target_os = "linux")]
    #[test]
    fn reading_a_run_releases_what_was_read() {
        use std::os::unix::fs::MetadataExt;
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..(1 << 17)))],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.arrow");
        let mut writer = RunWriter::create(path.clone(), &schema, SpillCompression::None).unwrap();
        for _ in 0..32 {
            writer.write(&batch).unwrap();
        }
        let run = writer.finish().unwrap();
        assert!(run.file_bytes > 4 * RELEASE_STEP);
        let allocated = |path: &Path| std::fs::metadata(path).unwrap().blocks() * 512;
        assert!(allocated(&path) >= run.file_bytes);
        let mut reader = RunReader::open(&path).unwrap();
        for _ in 0..32 {
            assert_eq!(reader.next().unwrap().unwrap(), batch);
        }
        assert!(reader.next().is_none());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), run.file_bytes);
        assert!(
            allocated(&path) <= RELEASE_STEP + (1 << 20),
            "{} of {} bytes still allocated",
            allocated(&path),
            run.file_bytes
        );
    }
}

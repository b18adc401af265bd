//! Writes the block-layout files other Parquet readers are checked against
//! (`tests/interop/check_readers.py`), and the values they must return.
//!
//! `cargo run --release -p ourios-compaction --example interop_fixtures -- <DIR>` writes, for
//! 1, 4 and 8 row groups per block:
//!
//! - `writer-blocks-N.parquet`: the fixture written by the block writer directly (small pages,
//!   a plain-encoded and a dictionary-encoded string column);
//! - `engine-blocks-N.parquet`: the fixture split over four ingest files and compacted by the
//!   engine (the sort restores the fixture's order: its keys are unique and sorted);
//!
//! and `expected.json`: `{"rows": [...], "services": [...], "start": ns, "files": [{"name",
//! "blocks"}]}`, the fixture's rows as JSON objects (nulls explicit).

use std::path::{Path, PathBuf};

use arrow_array::{RecordBatch, UInt32Array};
use arrow_select::take::take_record_batch;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::output::blocks::{BlockOptions, BlockWriter};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::report::Status;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    FIXTURE_SERVICES, fixture_properties, log_fixture, parquet_bytes, put_bytes,
};
use ourios_compaction::{Error, Result};

/// Rows of the fixture.
const ROWS: usize = 20_000;
/// Row groups per block of the files written.
const BLOCKS: [usize; 3] = [1, 4, 8];
/// Row cap per row group, so every file has many row groups.
const MAX_ROWS: u64 = 700;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: interop_fixtures <DIR>");
        return std::process::ExitCode::from(2);
    };
    match write_all(&dir).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn write_all(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let partition = PartitionId::parse("interop", "2026-11-29T10")?;
    let (start, _) = partition.time_range_nanos();
    let fixture = log_fixture(ROWS, start);
    let mut files = Vec::new();
    for blocks in BLOCKS {
        let name = format!("writer-blocks-{blocks}.parquet");
        write_direct(&fixture, blocks, &dir.join(&name))?;
        files.push(serde_json::json!({"name": name, "blocks": blocks}));
        let name = format!("engine-blocks-{blocks}.parquet");
        write_compacted(&fixture, &partition, blocks, &dir.join(&name)).await?;
        files.push(serde_json::json!({"name": name, "blocks": blocks}));
    }
    let expected = serde_json::json!({
        "rows": rows_json(&fixture)?,
        "services": FIXTURE_SERVICES,
        "start": start,
        "files": files,
    });
    let path = dir.join("expected.json");
    std::fs::write(&path, expected.to_string()).map_err(|e| io(&path, e))?;
    println!(
        "wrote {} files and expected.json to {}",
        files.len(),
        dir.display()
    );
    Ok(())
}

/// The fixture through the block writer, one row group closed every 4,096 rows at most.
fn write_direct(fixture: &RecordBatch, blocks: usize, path: &Path) -> Result<()> {
    let properties = fixture_properties(&fixture.schema(), 1 << 20, Some(MAX_ROWS))?;
    let file = std::fs::File::create(path).map_err(|e| io(path, e))?;
    let mut writer = BlockWriter::try_new(
        file,
        fixture.schema(),
        properties,
        BlockOptions::new(blocks, None),
    )?;
    for start in (0..fixture.num_rows()).step_by(4096) {
        writer.write(&fixture.slice(start, 4096.min(fixture.num_rows() - start)))?;
        writer.flush()?;
    }
    writer.finish()?;
    Ok(())
}

/// The fixture split over four ingest files and compacted into one.
async fn write_compacted(
    fixture: &RecordBatch,
    partition: &PartitionId,
    blocks: usize,
    path: &Path,
) -> Result<()> {
    let root = tempfile::tempdir().map_err(|e| io(Path::new("temporary store"), e))?;
    let store = Store::open(&root.path().to_string_lossy())?;
    let layout = KeyLayout::default();
    let dir = layout.ingest_dir(partition);
    for part in 0..4u32 {
        let rows = UInt32Array::from_iter_values((part..fixture.num_rows() as u32).step_by(4));
        let batch = take_record_batch(fixture, &rows).map_err(|e| Error::Config {
            message: format!("cannot split the fixture: {e}"),
        })?;
        put_bytes(
            &store,
            &format!("{dir}/part-{part}.parquet"),
            parquet_bytes(&[batch], 1_500),
        )
        .await;
    }
    let mut options = CompactOptions::new(root.path().join("scratch"));
    options.settings.row_groups_per_block = blocks;
    options.settings.max_rows_per_row_group = Some(MAX_ROWS);
    let report = compact_partition(&store, &layout, partition, &options).await?;
    let output = match (report.status, report.output) {
        (Status::Compacted, Some(output)) => output,
        (status, _) => {
            return Err(Error::Config {
                message: format!("compaction ended {status:?}: {:?}", report.error),
            });
        }
    };
    let written = root.path().join(output.key.as_str());
    std::fs::copy(&written, path).map_err(|e| io(&written, e))?;
    Ok(())
}

/// The rows of `batch` as JSON objects with every null explicit.
fn rows_json(batch: &RecordBatch) -> Result<serde_json::Value> {
    let mut buffer = Vec::new();
    let mut writer = arrow_json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow_json::writer::JsonArray>(&mut buffer);
    writer
        .write(batch)
        .and_then(|()| writer.finish())
        .map_err(|e| Error::Config {
            message: format!("cannot render the fixture as JSON: {e}"),
        })?;
    drop(writer);
    serde_json::from_slice(&buffer).map_err(|e| Error::Config {
        message: format!("cannot parse the fixture's JSON: {e}"),
    })
}

/// An I/O failure as an error naming what was being done.
fn io(context: &Path, e: std::io::Error) -> Error {
    Error::Config {
        message: format!("{}: {e}", context.display()),
    }
}

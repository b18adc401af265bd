//! Wide files of many rows, inside the memory bound.
//!
//! A writer's memory grows with the columns: each column chunk that compresses a page before
//! its row group closes keeps a ZSTD context sized for its pages (0.66 MB at 64 KiB), and a
//! reader holds every column's dictionary and page of a row group at once. A file of 300
//! distinct int64 columns and 40,000 rows, written as pyarrow writes without dictionaries,
//! took 296 MiB at a 64 MiB budget with row groups of 32 MiB; it must compact inside the
//! 256 MiB function that budget stands for. A file whose dictionaries alone pass the bound is
//! quarantined before any of it is decoded, and the rest of the partition compacts.

use std::path::Path;
use std::sync::Arc;

use crate::cgroup::run_limited;
use crate::common::{command, compact_json, json, partition_dir, report_with_status};
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

const HOUR: &str = "2026-11-29T10";
const MIB: u64 = 1 << 20;
/// The memory of the function a 64 MiB budget stands for.
const LIMIT_BYTES: u64 = 256 * MIB;
/// 2026-11-29T10:00:00Z in nanoseconds.
const HOUR_START_NANOS: i64 = 1_795_946_400_000_000_000;

/// Writes `columns` int64 columns of `rows` distinct values (and the time) into one row group
/// at `path`, ZSTD, with or without dictionaries (a writer's default limit: 1 MiB a column).
fn wide_file(path: &Path, columns: i64, rows: i64, dictionaries: bool) {
    let mut all: Vec<(String, ArrayRef)> = vec![(
        "time_unix_nano".into(),
        Arc::new(Int64Array::from_iter_values(
            (0..rows).map(|r| HOUR_START_NANOS + r * 1_000),
        )),
    )];
    for c in 0..columns {
        all.push((
            format!("c{c}"),
            Arc::new(Int64Array::from_iter_values(
                (0..rows).map(|r| c * 1_000_003 + r * 7_919),
            )),
        ));
    }
    let batch = RecordBatch::try_from_iter(all).expect("batch");
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(dictionaries)
        .set_max_row_group_row_count(Some(rows as usize))
        .build();
    std::fs::create_dir_all(path.parent().expect("partition")).expect("dirs");
    let file = std::fs::File::create(path).expect("file");
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
}

#[test]
fn stress_a_wide_file_of_many_rows_compacts_inside_a_256_mib_function() {
    let dir = tempfile::tempdir().expect("dir");
    wide_file(
        &partition_dir(dir.path(), "wide").join("a.parquet"),
        300,
        40_000,
        false,
    );
    let store = dir.path().to_string_lossy().to_string();
    let mut args = compact_json(&store, "wide", HOUR, "64MiB");
    // Row groups of 32 MiB, the largest the adaptive threshold sets (for hours of 256 MB and
    // more): uncapped, every column's chunk passes its page before the row group closes.
    args.extend_from_slice(&["--rg-bytes", "32MiB"]);
    let limited = run_limited(&command(&args), LIMIT_BYTES);
    let out = &limited.output;
    let report = report_with_status(out, "compacted");
    assert_eq!(report["inputs"]["rows"], 40_000);
    assert_eq!(report["outputs"][0]["rows"], 40_000);
    let rss = report["peak_rss_bytes"].as_u64().expect("rss");
    // 121 MiB measured; 296 MiB before row groups of wide schemas were capped at 32 pages a
    // column and the dictionary sample at a million values.
    assert!(rss < 192 * MIB, "peak RSS {} MiB", rss / MIB);
    match &limited.confinement {
        Ok(usage) => {
            assert_eq!(usage.oom_kills, 0, "OOM-killed in the cgroup");
            eprintln!(
                "peak RSS {} MiB, inside a {} MiB cgroup ({:?}), most memory charged {:?} bytes",
                rss / MIB,
                usage.limit_bytes / MIB,
                usage.version,
                usage.max_usage_bytes
            );
        }
        Err(reason) => eprintln!(
            "\n!!! NOT run inside a {} MiB cgroup ({reason}): only the peak-RSS bound was checked\n",
            LIMIT_BYTES / MIB
        ),
    }
}

#[test]
fn stress_a_file_whose_dictionaries_pass_the_bound_is_quarantined_before_it_is_read() {
    let dir = tempfile::tempdir().expect("dir");
    let part = partition_dir(dir.path(), "dictionaries");
    // 150 dictionaries of 320 KB: 48 MB held at once by a reader, past the 24 MiB a 16 MiB
    // budget leaves a reader of 151 columns.
    wide_file(&part.join("a-dictionaries.parquet"), 150, 40_000, true);
    wide_file(&part.join("b-narrow.parquet"), 3, 1_000, true);
    let store = dir.path().to_string_lossy().to_string();
    let out = command(&compact_json(&store, "dictionaries", HOUR, "16MiB"))
        .output()
        .expect("the CLI starts");
    let report = json(&out);
    assert_eq!(report["status"], "partial", "{report:#}");
    let quarantined = report["quarantined"].as_array().expect("quarantined");
    assert_eq!(quarantined.len(), 1, "{quarantined:#?}");
    let file = quarantined[0]["file"].as_str().expect("file");
    let reason = quarantined[0]["reason"].as_str().expect("reason");
    assert!(file.ends_with("a-dictionaries.parquet"), "{file}");
    assert!(
        reason.contains("row group 0 holds") && reason.contains("pages and dictionaries at once"),
        "{reason}"
    );
    assert_eq!(report["outputs"][0]["rows"], 1_000, "{report:#}");
    // Refused from its page headers: none of its 6 million values was decoded.
    let rss = report["peak_rss_bytes"].as_u64().expect("rss");
    eprintln!("peak RSS {} MiB", rss / MIB);
    assert!(rss < 64 * MIB, "peak RSS {} MiB", rss / MIB);
}

//! The bloat partition of a production failure: 1,555 tiny files whose 8 KiB text bodies compress
//! almost to nothing, about 13 MB of Parquet and 1.5 GiB of decoded rows, compacts at budgets
//! of 32 MiB and 64 MiB with the whole process under 256 MiB, inside a 256 MiB cgroup where
//! the system lets the test create one; and at 64 MiB once more as a 256 MB function runs it
//! (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256`: the merge gives free memory back only while the
//! resident set is above half of that).

use std::sync::Arc;

use crate::cgroup::run_limited;
use crate::common::{command, compact_json, partition_dir, report_with_status};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

const HOUR: &str = "2026-11-29T10";
const MIB: u64 = 1 << 20;
/// The memory of the function the partition must compact in.
const LIMIT_BYTES: u64 = 256 * MIB;
/// The peak RSS the compaction stays under in every run: its live memory (about 90 MB at
/// 64 MiB) with room, or half the function's memory (128 MiB) and one interval's growth when
/// run as the function, well below the limit (it reached 260 MB before the merge gave the
/// allocator's free memory back).
const RSS_BOUND_BYTES: u64 = 160 * MIB;
/// 2026-11-29T10:00:00Z in nanoseconds.
const HOUR_START_NANOS: i64 = 1_795_946_400_000_000_000;
const FILES: usize = 1_555;
const ROWS: usize = 123;
const BODY_BYTES: usize = 8 << 10;

fn bloat_file(file: usize) -> Vec<u8> {
    let services = ["api", "billing", "checkout", "db", "auth"];
    let mut state = (file as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let bodies = (0..ROWS).map(|row| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut body = format!(
            "request {file}-{row} {state:016x}{:016x}",
            state.rotate_left(32)
        );
        while body.len() < BODY_BYTES {
            body.push_str(" GET /api/v1/items?page=1 status=200");
        }
        body.truncate(BODY_BYTES);
        body
    });
    let batch = RecordBatch::try_from_iter([
        (
            "time_unix_nano",
            Arc::new(Int64Array::from_iter_values((0..ROWS).map(|row| {
                HOUR_START_NANOS + ((file * ROWS + row) as i64) * 10_000
            }))) as ArrayRef,
        ),
        (
            "service.name",
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|row| services[(file + row) % services.len()]),
            )),
        ),
        ("body", Arc::new(StringArray::from_iter_values(bodies))),
    ])
    .expect("batch");
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    bytes
}

#[test]
fn stress_the_bloat_partition_compacts_under_256_mib_at_32_and_64_mib_budgets() {
    let dir = tempfile::tempdir().expect("dir");
    // (tenant, budget, function memory in MB when run as that function).
    let runs = [
        ("bloat32", "32MiB", None),
        ("bloat64", "64MiB", None),
        ("bloat64-function", "64MiB", Some("256")),
    ];
    let mut encoded = 0u64;
    for file in 0..FILES {
        let bytes = bloat_file(file);
        encoded += bytes.len() as u64;
        for (tenant, _, _) in runs {
            let part = partition_dir(dir.path(), tenant);
            std::fs::create_dir_all(&part).expect("partition");
            std::fs::write(part.join(format!("part-{file:05}.parquet")), &bytes).expect("file");
        }
    }
    assert!(encoded < 20_000_000, "tiny files: {encoded} bytes");
    let store = dir.path().to_string_lossy().to_string();
    for (tenant, budget, function_mb) in runs {
        let mut compact = command(&compact_json(&store, tenant, HOUR, budget));
        if let Some(mb) = function_mb {
            compact.env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", mb);
        }
        let budget = format!(
            "{budget}{}",
            function_mb.map_or("", |_| " as a 256 MB function")
        );
        let limited = run_limited(&compact, LIMIT_BYTES);
        let out = &limited.output;
        let report = report_with_status(out, "compacted");
        assert!(out.status.success(), "{:?}", out.status);
        assert_eq!(report["inputs"]["rows"], (FILES * ROWS) as u64);
        assert!(
            report["runs_spilled"].as_u64().expect("runs") > 1,
            "{report:#}"
        );
        let rss = report["peak_rss_bytes"].as_u64().expect("rss");
        assert!(
            rss < 256 * MIB,
            "{budget}: peak RSS {} MiB, bound 256 MiB",
            rss / MIB
        );
        assert!(
            rss < RSS_BOUND_BYTES,
            "{budget}: peak RSS {} MiB, bound {} MiB",
            rss / MIB,
            RSS_BOUND_BYTES / MIB
        );
        eprintln!(
            "{budget}: peak RSS {} MiB, {} runs, {} merge passes, {} MiB spilled, {} ms",
            rss / MIB,
            report["runs_spilled"],
            report["merge_passes"],
            report["spill_bytes"].as_u64().unwrap_or(0) / MIB,
            report["duration_ms"]
        );
        match &limited.confinement {
            Ok(usage) => {
                assert_eq!(usage.oom_kills, 0, "{budget}: OOM-killed in the cgroup");
                let max = usage
                    .max_usage_bytes
                    .map_or("not reported".to_string(), |b| format!("{} MiB", b / MIB));
                eprintln!(
                    "{budget}: inside a {} MiB cgroup ({:?}): no OOM kill, most memory charged \
                     (page cache of the spilled runs included) {max}",
                    usage.limit_bytes / MIB,
                    usage.version
                );
            }
            Err(reason) => eprintln!(
                "\n!!! {budget}: NOT run inside a {} MiB cgroup ({reason}): only the peak-RSS \
                 bound was checked\n",
                LIMIT_BYTES / MIB
            ),
        }
    }
}

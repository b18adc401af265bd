//! One rule decides what fits a task's scratch space, for `auto`, the job and the fan-out's
//! groups: a job past it by its pages' uncompressed size fans out instead of failing every
//! attempt, and a readable input too large for any task stays live, uncompacted and reported.

use ourios_compaction::bench::generate::{GenerateReport, GenerateSpec, generate_partition};
use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::partition_files;
use ourios_compaction::options::{CompactOptions, FanOut};
use ourios_compaction::output::threshold::{resolve_row_group_bytes, staged_block_bytes};
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::settings::CompactSettings;
use ourios_compaction::store::Store;
use ourios_compaction::testing::{multi_thread_runtime, test_partition};
use parquet::file::reader::{FileReader, SerializedFileReader};

/// The encoded and uncompressed bytes (its row groups' `total_byte_size`) of a local file.
fn sizes(path: &std::path::Path) -> (u64, u64) {
    let file = std::fs::File::open(path).expect("input file");
    let encoded = file.metadata().expect("metadata").len();
    let reader = SerializedFileReader::new(file).expect("a Parquet file");
    let uncompressed = (reader.metadata().row_groups().iter())
        .map(|g| g.total_byte_size() as u64)
        .sum();
    (encoded, uncompressed)
}

/// An hour generated into a local directory store (inputs read in place: no staged copies).
struct Hour {
    store: Store,
    root: tempfile::TempDir,
    /// Each generation's report, in the order asked.
    generated: Vec<GenerateReport>,
    /// The encoded and uncompressed bytes of every file.
    encoded: u64,
    uncompressed: u64,
}

impl Hour {
    async fn generate(specs: &[GenerateSpec]) -> Hour {
        let root = tempfile::tempdir().expect("store");
        let store = Store::open(root.path().to_str().expect("utf-8 path")).expect("store");
        let (layout, partition) = (KeyLayout::default(), test_partition());
        let (mut generated, mut encoded, mut uncompressed) = (Vec::new(), 0, 0);
        for spec in specs {
            let report = generate_partition(&store, &layout, &partition, spec)
                .await
                .expect("generated");
            for key in &report.keys {
                let (e, u) = sizes(&root.path().join(key));
                encoded += e;
                uncompressed += u;
            }
            generated.push(report);
        }
        Hour {
            store,
            root,
            generated,
            encoded,
            uncompressed,
        }
    }

    async fn compact(&self, options: &CompactOptions) -> CompactionReport {
        let (layout, partition) = (KeyLayout::default(), test_partition());
        compact_partition(&self.store, &layout, &partition, options)
            .await
            .expect("runs")
    }
}

fn spec(files: usize, rows_per_file: usize, seed: u64) -> GenerateSpec {
    GenerateSpec {
        files,
        rows_per_file,
        seed,
        ..GenerateSpec::default()
    }
}

/// The output block a task stages, for inputs of `encoded` bytes under the default settings.
fn block_bytes(encoded: u64) -> u64 {
    let defaults = CompactSettings::new("/tmp");
    let row_group_bytes = resolve_row_group_bytes(defaults.row_group_bytes, encoded);
    staged_block_bytes(row_group_bytes, defaults.row_groups_per_block)
}

fn options(scratch: &std::path::Path, limit: u64) -> CompactOptions {
    let mut options = CompactOptions::new(scratch);
    options.settings.budget_bytes = 1 << 20;
    options.settings.scratch_limit_bytes = Some(limit);
    options.settings.fan_out = FanOut::Auto;
    options.settings.workers = 1;
    options
}

#[test]
fn a_job_past_its_scratch_space_by_its_pages_fans_out_instead_of_failing() {
    multi_thread_runtime(2).block_on(async {
        let hour = Hour::generate(&[spec(2, 40_000, 11)]).await;
        let (encoded, uncompressed) = (hour.encoded, hour.uncompressed);
        // Generated logs expand more than three times: a scratch space between three times
        // the encoded bytes and the uncompressed ones passed the old "3 bytes a byte" guess
        // of `auto`, and failed the job's own check on every attempt.
        assert!(uncompressed > 3 * encoded, "{uncompressed} vs {encoded}");
        let limit = (3 * encoded + uncompressed) / 2;
        let scratch = tempfile::tempdir().expect("scratch");
        // One row group a block: no output block to plan beside the inputs at this size.
        let mut options = options(scratch.path(), limit);
        options.settings.row_groups_per_block = 1;
        let report = hour.compact(&options).await;
        assert_eq!(report.status, Status::Compacted, "{:?}", report.error);
        let ranges = report.fan_out.expect("fanned out").ranges;
        // 7/8 of the space is planned: the tasks the uncompressed bytes take.
        assert_eq!(ranges as u64, uncompressed.div_ceil(limit - limit / 8));
        let rows: u64 = report.outputs.iter().map(|o| o.rows).sum();
        assert_eq!((rows, report.inputs.rows), (80_000, 80_000));
        assert!(report.oversized.is_empty());
    });
}

#[test]
fn a_job_that_does_not_fit_with_the_fan_out_off_fails_saying_so() {
    multi_thread_runtime(2).block_on(async {
        let hour = Hour::generate(&[spec(4, 5_000, 12)]).await;
        // Each file fits a task with its output block; the four together do not.
        let limit = block_bytes(hour.encoded) + hour.uncompressed * 6 / 10;
        let scratch = tempfile::tempdir().expect("scratch");
        let mut options = options(scratch.path(), limit);
        options.settings.fan_out = FanOut::Off;
        let report = hour.compact(&options).await;
        assert_eq!(report.status, Status::Failed);
        assert!(
            report.did_not_fit,
            "the report says a fan-out would split it"
        );
        let error = report.error.expect("an error");
        assert!(error.contains("needs about"), "{error}");
    });
}

#[test]
fn an_input_too_large_for_any_task_stays_live_and_is_reported() {
    multi_thread_runtime(2).block_on(async {
        let hour = Hour::generate(&[spec(4, 1_000, 21), spec(1, 20_000, 22)]).await;
        let (small, large) = (&hour.generated[0], &hour.generated[1]);
        let large_key = &large.keys[0];
        let (large_bytes, large_uncompressed) = sizes(&hour.root.path().join(large_key));
        // The large file alone needs more than a task has (with its output block); the small
        // ones fit one task.
        let block = block_bytes(hour.encoded);
        let limit = block + large_uncompressed - large_uncompressed / 10;
        let scratch = tempfile::tempdir().expect("scratch");
        let options = options(scratch.path(), limit);

        let report = hour.compact(&options).await;
        assert_eq!(report.status, Status::Compacted, "{:?}", report.error);
        assert_eq!(report.oversized.len(), 1, "{:?}", report.oversized);
        let oversized = &report.oversized[0];
        assert_eq!(oversized.file.as_str(), large_key);
        assert_eq!(
            (
                oversized.bytes,
                oversized.scratch_needed_bytes,
                oversized.scratch_bytes
            ),
            (large_bytes, large_uncompressed + block, limit)
        );
        assert_eq!(
            (report.inputs.files, report.inputs.rows),
            (small.keys.len() as u64, small.rows)
        );
        assert!(
            report.quarantined.is_empty(),
            "valid rows are not quarantined"
        );

        // It stays live, beside the output, and every later job leaves it so and says why.
        let files = partition_files(&hour.store, &KeyLayout::default(), &test_partition())
            .await
            .expect("files");
        let live: Vec<&str> = files.live.iter().map(|k| k.as_str()).collect();
        assert!(live.contains(&large_key.as_str()), "{live:?}");
        assert_eq!(live.len(), 2, "{live:?}");
        assert!(files.quarantined.is_empty());
        let again = hour.compact(&options).await;
        assert_eq!(again.status, Status::Noop);
        assert_eq!(again.oversized, report.oversized);

        // With room for it, it is compacted with the rest.
        let roomy = self::options(scratch.path(), 4 * large_uncompressed);
        let last = hour.compact(&roomy).await;
        assert_eq!(last.status, Status::Compacted, "{:?}", last.error);
        assert!(last.oversized.is_empty());
        let rows: u64 = last.outputs.iter().map(|o| o.rows).sum();
        assert_eq!(rows, small.rows + large.rows);
    });
}

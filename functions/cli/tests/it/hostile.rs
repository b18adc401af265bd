//! Hostile files in a partition are quarantined one by one while the rest compacts, and the
//! process stays inside the memory bound: a 300 MiB value compressed to almost nothing, a
//! gzip page that inflates far beyond its header, a footer claiming chunks of 2^50 bytes,
//! 12,000 columns, a schema 2,000 levels deep, a footer declaring 300,000 levels, and two
//! files whose union is wider than the budget allows. A footer that counts no row over pages
//! that hold rows is quarantined and kept, not consumed as an empty file.

use std::path::Path;
use std::sync::Arc;

use crate::common::{compact_json, json, partition_dir, run};
use arrow_array::{ArrayRef, Int8Array, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::metadata::{ParquetMetaDataReader, ParquetMetaDataWriter, RowGroupMetaData};
use parquet::file::properties::WriterProperties;

const HOUR: &str = "2026-11-29T10";
const MIB: u64 = 1 << 20;
/// 2026-11-29T10:00:00Z in nanoseconds.
const HOUR_START_NANOS: i64 = 1_795_946_400_000_000_000;

fn write(path: &Path, batch: &RecordBatch, compression: Compression) {
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_dictionary_enabled(false)
        .build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).expect("writer");
    writer.write(batch).expect("write");
    writer.close().expect("close");
    std::fs::write(path, bytes).expect("file");
}

fn one_row_with_body(body: String) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "time_unix_nano",
            Arc::new(Int64Array::from(vec![HOUR_START_NANOS + 1])) as ArrayRef,
        ),
        ("body", Arc::new(StringArray::from(vec![body]))),
    ])
    .expect("batch")
}

/// Rewrites the varint of field 2 (`uncompressed_page_size`) of the page header at `at` to
/// `declared`, padded to the same length so no offset moves.
fn patch_declared_page_size(bytes: &mut [u8], at: usize, declared: i32) {
    let mut pos = at;
    let skip_varint = |pos: &mut usize, bytes: &[u8]| {
        while bytes[*pos] & 0x80 != 0 {
            *pos += 1;
        }
        *pos += 1;
    };
    // Field 1 (type, i32): header byte and varint.
    assert_eq!(bytes[pos], 0x15, "field 1 of a page header");
    pos += 1;
    skip_varint(&mut pos, bytes);
    assert_eq!(bytes[pos], 0x15, "field 2 of a page header");
    pos += 1;
    let start = pos;
    skip_varint(&mut pos, bytes);
    let len = pos - start;
    let mut zigzag = ((declared << 1) ^ (declared >> 31)) as u32 as u64;
    for i in 0..len {
        let last = i + 1 == len;
        bytes[start + i] = (zigzag & 0x7f) as u8 | if last { 0 } else { 0x80 };
        zigzag >>= 7;
    }
    assert_eq!(zigzag, 0, "the new size fits the old varint's length");
}

fn gzip_bomb(path: &Path) {
    write(
        path,
        &one_row_with_body("a".repeat(400 << 20)),
        Compression::GZIP(GzipLevel::default()),
    );
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&std::fs::File::open(path).expect("open"))
        .expect("metadata");
    let mut bytes = std::fs::read(path).expect("read");
    let body = metadata.row_group(0).column(1);
    let at = body.data_page_offset() as usize;
    patch_declared_page_size(&mut bytes, at, 4_000_000);
    std::fs::write(path, bytes).expect("patched");
}

/// Rewrites the footer of the Parquet file at `path`, each row group through `rewrite`, its
/// pages left as they were written.
fn rewrite_row_groups(path: &Path, rewrite: impl Fn(RowGroupMetaData) -> RowGroupMetaData) {
    let bytes = std::fs::read(path).expect("read");
    let footer_len =
        u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap());
    let data_end = bytes.len() - 8 - footer_len as usize;
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&std::fs::File::open(path).expect("open"))
        .expect("metadata");
    let row_groups = metadata.row_groups().iter().cloned().map(rewrite).collect();
    let metadata = metadata.into_builder().set_row_groups(row_groups).build();
    let mut footer = Vec::new();
    ParquetMetaDataWriter::new(&mut footer, &metadata)
        .finish()
        .expect("footer");
    let mut out = bytes[..data_end].to_vec();
    out.extend_from_slice(&footer);
    std::fs::write(path, out).expect("rewritten");
}

fn absurd_footer(path: &Path) {
    write(
        path,
        &one_row_with_body("small".into()),
        Compression::SNAPPY,
    );
    rewrite_row_groups(path, |rg| {
        let columns = rg
            .columns()
            .iter()
            .map(|c| {
                c.clone()
                    .into_builder()
                    .set_total_uncompressed_size(1 << 50)
                    .build()
                    .expect("column")
            })
            .collect();
        rg.into_builder()
            .set_total_byte_size(1 << 50)
            .set_column_metadata(columns)
            .build()
            .expect("row group")
    });
}

fn many_columns(path: &Path) {
    let mut columns: Vec<(String, ArrayRef)> = vec![(
        "time_unix_nano".into(),
        Arc::new(Int64Array::from(vec![HOUR_START_NANOS + 2])),
    )];
    for i in 0..12_000 {
        columns.push((format!("c{i}"), Arc::new(Int8Array::from(vec![1i8]))));
    }
    write(
        path,
        &RecordBatch::try_from_iter(columns).expect("batch"),
        Compression::SNAPPY,
    );
}

/// One row of `columns` one-byte columns named `{prefix}{i}`: two such files of different
/// prefixes are each fine alone, but their union is too wide for a small budget.
/// `columns` int64 columns `<prefix><i>` of `rows` distinct values, ZSTD: every leaf's reader
/// and writer fill their pages, dictionaries and compression contexts.
fn columns_named(path: &Path, prefix: &str, columns: usize, rows: i64) {
    let mut all: Vec<(String, ArrayRef)> = vec![(
        "time_unix_nano".into(),
        Arc::new(Int64Array::from_iter_values(
            (0..rows).map(|r| HOUR_START_NANOS + r),
        )),
    )];
    for i in 0..columns as i64 {
        all.push((
            format!("{prefix}{i}"),
            Arc::new(Int64Array::from_iter_values(
                (0..rows).map(|r| i * 1_000_003 + r),
            )),
        ));
    }
    write(
        path,
        &RecordBatch::try_from_iter(all).expect("batch"),
        Compression::ZSTD(ZstdLevel::default()),
    );
}

fn deep_nesting(path: &Path) {
    let path = path.to_path_buf();
    // Building and writing the type recurses once per level.
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let mut array: ArrayRef = Arc::new(Int8Array::from(vec![1i8]));
            for _ in 0..2_000 {
                let field = Field::new("n", array.data_type().clone(), true);
                array = Arc::new(StructArray::new(
                    Fields::from(vec![field]),
                    vec![array],
                    None,
                ));
            }
            let schema = Arc::new(Schema::new(vec![
                Field::new("time_unix_nano", DataType::Int64, true),
                Field::new("deep", array.data_type().clone(), true),
            ]));
            let time: ArrayRef = Arc::new(Int64Array::from(vec![HOUR_START_NANOS + 3]));
            let batch = RecordBatch::try_new(schema, vec![time, array]).expect("batch");
            // Without the embedded Arrow schema (whose own decoder limits depth), as writers
            // other than Arrow's write files.
            let options = ArrowWriterOptions::new().with_skip_arrow_metadata(true);
            let mut bytes = Vec::new();
            let mut writer = ArrowWriter::try_new_with_options(&mut bytes, batch.schema(), options)
                .expect("writer");
            writer.write(&batch).expect("write");
            writer.close().expect("close");
            std::fs::write(&path, bytes).expect("file");
        })
        .expect("thread")
        .join()
        .expect("deep file written");
}

/// A file whose footer (compact Thrift, written by hand) declares a schema of 300,000 nested
/// groups in 2.4 MB: a reader that builds the schema tree recursively overflows its stack on it.
fn very_deep_footer(path: &Path) {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn name(out: &mut Vec<u8>, header: u8, text: &str) {
        out.push(header);
        varint(out, text.len() as u64);
        out.extend_from_slice(text.as_bytes());
    }
    const GROUPS: u64 = 300_000;
    // FileMetaData: 1 version, 2 schema (a list of SchemaElement), 3 num_rows, 4 row_groups.
    let mut footer = vec![0x15, 0x02, 0x19, 0xfc];
    varint(&mut footer, GROUPS + 3);
    // The root: name, two children.
    name(&mut footer, 0x48, "schema");
    footer.extend_from_slice(&[0x15, 0x04, 0x00]);
    // A required INT64 time column: type, repetition, name.
    footer.extend_from_slice(&[0x15, 0x04, 0x25, 0x00]);
    name(&mut footer, 0x18, "time_unix_nano");
    footer.push(0x00);
    // Optional groups of one child each: repetition, name, children.
    for _ in 0..GROUPS {
        footer.extend_from_slice(&[0x35, 0x02]);
        name(&mut footer, 0x18, "g");
        footer.extend_from_slice(&[0x15, 0x02, 0x00]);
    }
    // The innermost leaf, then no rows and no row groups.
    footer.extend_from_slice(&[0x15, 0x04, 0x25, 0x02]);
    name(&mut footer, 0x18, "leaf");
    footer.extend_from_slice(&[0x00, 0x16, 0x00, 0x19, 0x0c, 0x00]);
    let mut file = b"PAR1".to_vec();
    file.extend_from_slice(&footer);
    file.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    file.extend_from_slice(b"PAR1");
    std::fs::write(path, file).expect("very deep footer written");
}

/// Writes the hostile partition into the store at `dir`: four generated files of 5,000 rows
/// and the hostile ones beside them.
fn hostile_partition(dir: &Path) {
    let store = dir.to_string_lossy().to_string();
    let out = run(&[
        "generate", "--store", &store, "--tenant", "hostile", "--hour", HOUR, "--files", "4",
        "--rows", "5000",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let part = partition_dir(dir, "hostile");
    write(
        &part.join("big-value.parquet"),
        &one_row_with_body("x".repeat(300 << 20)),
        Compression::ZSTD(ZstdLevel::default()),
    );
    gzip_bomb(&part.join("gzip-bomb.parquet"));
    absurd_footer(&part.join("absurd-footer.parquet"));
    many_columns(&part.join("many-columns.parquet"));
    deep_nesting(&part.join("deep-nesting.parquet"));
    very_deep_footer(&part.join("very-deep-footer.parquet"));
    // At 32 MiB the union may hold 341 leaves: the first file (3,000 rows) joins, the second
    // would take it past.
    columns_named(&part.join("union-a.parquet"), "a", 200, 3000);
    columns_named(&part.join("union-b.parquet"), "b", 100, 10);
    for name in ["big-value.parquet", "gzip-bomb.parquet"] {
        let size = std::fs::metadata(part.join(name)).expect("file").len();
        assert!(size < 2 * MIB, "{name} is small on disk: {size}");
    }
}

/// Compacts the hostile partition at a 32 MiB budget with `extra` arguments and checks that
/// every hostile file is quarantined with its reason, every good row compacted, inside the
/// memory bound.
fn compact_hostile_partition(extra: &[&str]) {
    let dir = tempfile::tempdir().expect("dir");
    hostile_partition(dir.path());
    let store = dir.path().to_string_lossy().to_string();
    let mut args = compact_json(&store, "hostile", HOUR, "32MiB");
    args.extend_from_slice(extra);
    let out = run(&args);
    let report = json(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(report["status"], "partial", "{report:#}\n{stderr}");
    assert_eq!(report["inputs"]["rows"], 4 * 5000 + 3000, "{report:#}");
    // Within the 128 MiB function a 32 MiB budget stands for (a quarter of it).
    let rss = report["peak_rss_bytes"].as_u64().expect("rss");
    assert!(rss < 128 * MIB, "peak RSS {} MiB", rss / MIB);
    let quarantined = report["quarantined"].as_array().expect("quarantined");
    let expected = [
        ("absurd-footer.parquet", "the footer claims"),
        ("big-value.parquet", "more than the"),
        ("deep-nesting.parquet", "levels deep"),
        ("gzip-bomb.parquet", "decompression bomb"),
        ("many-columns.parquet", "leaf columns"),
        (
            "union-b.parquet",
            "leaves, more than the 256 the memory budget allows",
        ),
        ("very-deep-footer.parquet", "levels deep"),
    ];
    assert_eq!(quarantined.len(), expected.len(), "{quarantined:#?}");
    for (entry, (name, words)) in quarantined.iter().zip(expected) {
        let file = entry["file"].as_str().expect("file");
        let reason = entry["reason"].as_str().expect("reason");
        assert!(file.ends_with(name), "{file} is {name}");
        assert!(
            reason.contains(words),
            "{name}: {words:?} not in {reason:?}"
        );
    }
}

#[test]
fn stress_hostile_files_are_quarantined_one_by_one_inside_the_memory_bound() {
    compact_hostile_partition(&[]);
}

/// The same partition fanned out into groups that each see only some of the files: the plan
/// reads every footer (on a stack deep enough for the hostile ones) and refuses the file that
/// would widen the partition's union, as the unfanned job does; the groups quarantine the rest.
#[test]
fn stress_hostile_files_are_quarantined_the_same_when_the_job_fans_out() {
    compact_hostile_partition(&["--fan-out", "3"]);
}

/// A file whose footer counts no row while its chunks and pages hold 1,000 is no empty file:
/// `compact --gc-grace 0s` quarantines it instead of retiring it and collecting it with its
/// rows, the other files compact, and `files` still lists it as quarantined (invariants 1
/// and 7).
#[test]
fn a_footer_counting_no_row_is_quarantined_not_deleted() {
    let (dir, lying_dir) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let generate = |store: &Path, files: &str, rows: &str| {
        let store = store.to_string_lossy().to_string();
        let args = [
            "generate", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--files", files,
            "--rows", rows,
        ];
        let out = run(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    generate(dir.path(), "2", "500");
    generate(lying_dir.path(), "1", "1000");
    let written = std::fs::read_dir(partition_dir(lying_dir.path(), "acme"))
        .expect("partition")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .expect("the generated file");
    let lying = partition_dir(dir.path(), "acme").join("lying-footer.parquet");
    std::fs::copy(&written, &lying).expect("copied");
    rewrite_row_groups(&lying, |rg| {
        rg.into_builder()
            .set_num_rows(0)
            .build()
            .expect("row group")
    });
    let lying_bytes = std::fs::read(&lying).expect("read");

    let store = dir.path().to_string_lossy().to_string();
    let mut args = compact_json(&store, "acme", HOUR, "64MiB");
    args.extend(["--gc-grace", "0s"]);
    let out = run(&args);
    let report = json(&out);
    assert_eq!(report["status"], "partial", "{report:#}");
    assert_eq!(report["inputs"]["rows"], 1000, "{report:#}");
    let quarantined = report["quarantined"].as_array().expect("quarantined");
    assert_eq!(quarantined.len(), 1, "{report:#}");
    let file = quarantined[0]["file"].as_str().expect("file");
    let reason = quarantined[0]["reason"].as_str().expect("reason");
    assert!(file.ends_with("/lying-footer.parquet"), "{file}");
    assert!(reason.contains("counts 0 rows"), "{reason}");
    assert_eq!(report["gc_deleted"], 2, "the two good files");
    assert_eq!(std::fs::read(&lying).expect("kept"), lying_bytes);

    let out = run(&[
        "files", "--store", &store, "--tenant", "acme", "--hour", HOUR, "--json",
    ]);
    let files = json(&out);
    assert_eq!(files["quarantined"][0]["key"], file, "{files:#}");
    assert_eq!(files["live"].as_array().map(Vec::len), Some(1), "{files:#}");
}

//! The block layout: with one row group per block the file is byte-identical to
//! `ArrowWriter`'s; with more, each column's chunks of a block's row groups are contiguous,
//! the footer points at every chunk, page indexes and bloom filters stay valid, values read
//! back unchanged (full, projected, by row group and by page-index row selection), and the
//! bytes depend on nothing but the rows and the settings, wherever the block is staged.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader, StringArray};
use arrow_select::concat::concat_batches;
use bytes::Bytes;
use ourios_compaction::output::blocks::{BlockOptions, BlockWriter, STAGING_MEMORY_BYTES};
use ourios_compaction::testing::{FIXTURE_SERVICES, fixture_properties, log_fixture};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{
    ColumnChunkMetaData, PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader,
};
use parquet::file::properties::{ReaderProperties, WriterProperties};
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::{ReadOptionsBuilder, SerializedFileReader};
use parquet::schema::types::ColumnPath;

const ROWS: usize = 20_000;
const START: i64 = 1_795_946_400_000_000_000;

fn fixture() -> RecordBatch {
    log_fixture(ROWS, START)
}

/// Feeds `batch` in 1,024-row chunks, closing a row group after every `flush_every` chunks
/// (the service boundaries the engine asks for), to `write` and `flush`.
fn feed(
    batch: &RecordBatch,
    flush_every: usize,
    mut write: impl FnMut(&RecordBatch),
    mut flush: impl FnMut(),
) {
    for (i, start) in (0..batch.num_rows()).step_by(1024).enumerate() {
        write(&batch.slice(start, 1024.min(batch.num_rows() - start)));
        if (i + 1) % flush_every == 0 {
            flush();
        }
    }
}

fn write_blocks(
    batch: &RecordBatch,
    props: &WriterProperties,
    options: BlockOptions,
    flush_every: usize,
) -> (Bytes, usize, bool) {
    let mut writer =
        BlockWriter::try_new(Vec::new(), batch.schema(), props.clone(), options).expect("opens");
    let writer_cell = std::cell::RefCell::new(&mut writer);
    feed(
        batch,
        flush_every,
        |b| writer_cell.borrow_mut().write(b).expect("writes"),
        || writer_cell.borrow_mut().flush().expect("flushes"),
    );
    writer.finish().expect("finishes");
    let peak = writer.peak_staged_memory().expect("peak");
    let spilled = writer.staged_in_file().expect("spilled");
    (
        Bytes::from(std::mem::take(writer.inner_mut().expect("the sink"))),
        peak,
        spilled,
    )
}

fn props(row_group_bytes: u64, max_rows: Option<u64>) -> WriterProperties {
    fixture_properties(&fixture().schema(), row_group_bytes, max_rows).expect("properties")
}

fn metadata(bytes: &Bytes) -> ParquetMetaData {
    ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Required)
        .parse_and_finish(bytes)
        .expect("footer and page indexes parse")
}

#[test]
fn the_plain_layout_is_byte_identical_to_arrow_writer() {
    let batch = fixture();
    for (row_group_bytes, max_rows, flush_every) in [
        (64 << 10, None, 5),
        (1 << 20, Some(1500), 3),
        (8 << 10, Some(700), 1000),
    ] {
        let props = props(row_group_bytes, max_rows);
        let (blocks, _, _) = write_blocks(&batch, &props, BlockOptions::default(), flush_every);

        let mut arrow = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(props.clone()))
            .expect("arrow writer");
        let cell = std::cell::RefCell::new(&mut arrow);
        feed(
            &batch,
            flush_every,
            |b| cell.borrow_mut().write(b).expect("writes"),
            || {
                let mut w = cell.borrow_mut();
                if w.in_progress_rows() > 0 {
                    w.flush().expect("flushes");
                }
            },
        );
        let reference = arrow.into_inner().expect("closes");
        assert!(metadata(&blocks).num_row_groups() > 3);
        assert!(
            blocks.as_ref() == reference.as_slice(),
            "row_group_bytes {row_group_bytes}, max_rows {max_rows:?}: plain layout differs from ArrowWriter"
        );
    }
}

/// Start and end of a column chunk.
fn chunk_range(meta: &ParquetMetaData, rg: usize, column: usize) -> (u64, u64) {
    let (start, length) = meta.row_group(rg).column(column).byte_range();
    (start, start + length)
}

/// Checks the block layout of a file written with `n` row groups per block.
fn assert_block_layout(bytes: &Bytes, n: usize) {
    let meta = metadata(bytes);
    let groups = meta.num_row_groups();
    let columns = meta.file_metadata().schema_descr().num_columns();
    assert!(groups > n, "{groups} row groups for blocks of {n}");
    let mut position = 4u64; // after the magic
    for block_start in (0..groups).step_by(n) {
        let block = block_start..(block_start + n).min(groups);
        for column in 0..columns {
            for rg in block.clone() {
                let (start, end) = chunk_range(&meta, rg, column);
                assert_eq!(
                    start, position,
                    "blocks of {n}: row group {rg} column {column} is not contiguous"
                );
                position = end;
            }
        }
        if n == 1 {
            // The plain layout keeps bloom filters right after their row group.
            for column in meta.row_group(block_start).columns() {
                if let (Some(offset), Some(length)) =
                    (column.bloom_filter_offset(), column.bloom_filter_length())
                {
                    assert_eq!(offset as u64, position, "bloom filter after its row group");
                    position += length as u64;
                }
            }
        }
    }
    for (rg, row_group) in meta.row_groups().iter().enumerate() {
        let earliest = (0..columns)
            .map(|c| chunk_range(&meta, rg, c).0)
            .min()
            .expect("columns");
        assert_eq!(
            row_group.file_offset(),
            Some(earliest as i64),
            "row group {rg}"
        );
        let sum: i64 = row_group
            .columns()
            .iter()
            .map(|c| c.compressed_size())
            .sum();
        assert_eq!(row_group.compressed_size(), sum);
        assert_eq!(row_group.ordinal(), Some(rg as i16 as i32));
        for (c, column) in row_group.columns().iter().enumerate() {
            let (start, end) = chunk_range(&meta, rg, c);
            if let Some(dictionary) = column.dictionary_page_offset() {
                assert_eq!(dictionary as u64, start);
                assert!(column.data_page_offset() as u64 > start);
            } else {
                assert_eq!(column.data_page_offset() as u64, start);
            }
            let index = meta
                .page_index_for_row_group(rg)
                .page_locations(c)
                .cloned()
                .expect("an offset index on every column");
            assert_eq!(
                index[0].offset,
                column.data_page_offset(),
                "rg {rg} col {c}"
            );
            let mut page_end = column.data_page_offset() as u64;
            for page in &index {
                assert_eq!(
                    page.offset as u64, page_end,
                    "pages of rg {rg} col {c} in order"
                );
                page_end += page.compressed_page_size as u64;
            }
            assert_eq!(page_end, end, "the pages fill rg {rg} col {c}");
            // Leaves of lists and maps are written without statistics, so without a column
            // index; every other column has one.
            let repeated = column.column_descr().max_rep_level() > 0;
            assert_eq!(
                meta.page_index_for_row_group(rg).column_index(c).is_some(),
                !repeated,
                "a column index on rg {rg} col {c} unless it is repeated"
            );
            if repeated {
                assert!(column.statistics().is_none(), "rg {rg} col {c}");
            }
        }
    }
    if n > 1 {
        // Bloom filters follow the last block, back to back, before the page indexes.
        let mut blooms: Vec<(u64, u64)> = meta
            .row_groups()
            .iter()
            .flat_map(|rg| rg.columns())
            .filter_map(|c| {
                Some((
                    c.bloom_filter_offset()? as u64,
                    c.bloom_filter_length()? as u64,
                ))
            })
            .collect();
        assert_eq!(
            blooms.len(),
            groups,
            "one bloom filter (service.name) per row group"
        );
        blooms.sort();
        for (offset, length) in blooms {
            assert_eq!(offset, position, "bloom filters after the last block");
            position += length;
        }
    }
    let first_index = meta
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns())
        .filter_map(|c| c.column_index_offset())
        .min()
        .expect("page indexes");
    assert_eq!(first_index as u64, position, "page indexes follow");
}

#[test]
fn blocks_keep_each_columns_chunks_contiguous_and_the_footer_exact() {
    let batch = fixture();
    let settings = props(1 << 20, Some(700));
    for n in [1, 2, 4, 8] {
        let (bytes, _, _) = write_blocks(&batch, &settings, BlockOptions::new(n, None), 1000);
        assert_block_layout(&bytes, n);
    }
    // Row groups cut at service boundaries and at the byte threshold too.
    let cut = props(48 << 10, Some(5000));
    let (bytes, _, _) = write_blocks(&batch, &cut, BlockOptions::new(4, None), 3);
    assert_block_layout(&bytes, 4);
}

#[test]
fn bytes_are_the_same_across_runs_and_wherever_a_block_is_staged() {
    let batch = fixture();
    let props = props(1 << 20, Some(700));
    let dir = tempfile::tempdir().expect("dir");
    for n in [1, 4, 8] {
        let (first, memory_peak, spilled) =
            write_blocks(&batch, &props, BlockOptions::new(n, None), 1000);
        assert!(!spilled);
        let (again, _, _) = write_blocks(&batch, &props, BlockOptions::new(n, None), 1000);
        assert_eq!(first, again, "blocks of {n}: two runs differ");
        // Columns encoded on two threads make the same bytes, with or without the dictionary
        // choice.
        let parallel = BlockOptions::new(n, None).with_parallel_encoding(true);
        let (on_two, _, _) = write_blocks(&batch, &props, parallel, 1000);
        assert_eq!(
            on_two, first,
            "blocks of {n}: two encoding threads changed the bytes"
        );
        let sampled = BlockOptions::new(n, None).with_dictionary_sample(2048);
        let (one, _, _) = write_blocks(&batch, &props, sampled.clone(), 1000);
        let (two, _, _) = write_blocks(&batch, &props, sampled.with_parallel_encoding(true), 1000);
        assert_eq!(
            one, two,
            "blocks of {n}: two encoding threads changed the sampled bytes"
        );
        // A 64 KiB memory cap moves every block to the staging file; the open row group's
        // pages wait in a scratch file too.
        let options = BlockOptions {
            row_groups_per_block: n,
            staging_file: Some(dir.path().join(format!("block-{n}.bin"))),
            staging_memory_bytes: 64 << 10,
            page_file: Some(dir.path().join(format!("pages-{n}.bin"))),
            dictionary_sample_rows: 0,
            parallel_encoding: false,
        };
        let (staged, peak, spilled) = write_blocks(&batch, &props, options, 1000);
        assert_eq!(
            staged, first,
            "blocks of {n}: staging in files changed the bytes"
        );
        if n > 1 {
            assert!(spilled, "blocks of {n} outgrow 64 KiB");
            assert!(peak <= 64 << 10, "peak staged memory {peak}");
            assert!(
                memory_peak > 64 << 10,
                "fixture: blocks of {n} are larger than the cap"
            );
            assert!(memory_peak <= STAGING_MEMORY_BYTES);
        }
        assert!(
            !dir.path().join(format!("block-{n}.bin")).exists(),
            "the staging file is removed"
        );
    }
}

/// Writes `batch` in chunks of `chunk_rows` with row groups of at most 3,000 rows, choosing
/// dictionaries from the first 2,048 rows.
fn write_with_dictionary_choice(batch: &RecordBatch, n: usize, chunk_rows: usize) -> Bytes {
    let options = BlockOptions::new(n, None).with_dictionary_sample(2048);
    let mut writer = BlockWriter::try_new(
        Vec::new(),
        batch.schema(),
        props(1 << 20, Some(3000)),
        options,
    )
    .expect("opens");
    for start in (0..batch.num_rows()).step_by(chunk_rows) {
        let rows = chunk_rows.min(batch.num_rows() - start);
        writer.write(&batch.slice(start, rows)).expect("writes");
    }
    writer.finish().expect("finishes");
    Bytes::from(std::mem::take(writer.inner_mut().expect("the sink")))
}

#[test]
fn mostly_distinct_columns_lose_their_dictionary_after_the_first_row_group() {
    let batch = fixture();
    for n in [1, 4] {
        let bytes = write_with_dictionary_choice(&batch, n, 1024);
        let meta = metadata(&bytes);
        assert!(
            meta.num_row_groups() > 3,
            "{} row groups",
            meta.num_row_groups()
        );
        let dictionary =
            |rg: usize, name: &str| chunk(&meta, rg, name).dictionary_page_offset().is_some();
        // (The fixture's properties write `body` without a dictionary throughout.)
        for name in ["time_unix_nano", "duration_ms", "service.name", "status"] {
            assert!(
                dictionary(0, name),
                "blocks of {n}: the first row group codes {name}"
            );
        }
        for rg in 1..meta.num_row_groups() {
            for name in ["time_unix_nano", "body", "duration_ms"] {
                assert!(
                    !dictionary(rg, name),
                    "blocks of {n}: row group {rg} codes {name}"
                );
            }
            for name in ["service.name", "status", "severity", "resource", "tags"] {
                assert!(
                    dictionary(rg, name),
                    "blocks of {n}: row group {rg} lost {name}'s dictionary"
                );
            }
            // Distinct text loses its statistics; the keys and other columns keep theirs.
            assert!(chunk(&meta, rg, "body").statistics().is_none());
            for name in ["service.name", "time_unix_nano", "duration_ms", "status"] {
                assert!(
                    chunk(&meta, rg, name).statistics().is_some(),
                    "blocks of {n}: row group {rg} lost {name}'s statistics"
                );
            }
            // Distinct integers are written as deltas, distinct floats plain.
            let encodings = |name: &str| chunk(&meta, rg, name).encodings().collect::<Vec<_>>();
            assert!(encodings("time_unix_nano").contains(&Encoding::DELTA_BINARY_PACKED));
            assert!(!encodings("duration_ms").contains(&Encoding::DELTA_BINARY_PACKED));
        }
        assert!(chunk(&meta, 0, "body").statistics().is_some());
        assert_eq!(
            read(reader(&bytes)),
            batch.columns(),
            "blocks of {n}: values"
        );
        // Page boundaries follow the writes, so other chunkings may change bytes, but never
        // which chunks have a dictionary.
        for chunk_rows in [1, 37, 4096, ROWS] {
            let other = write_with_dictionary_choice(&batch, n, chunk_rows);
            assert_eq!(
                dictionary_pages(&metadata(&other)),
                dictionary_pages(&meta),
                "blocks of {n}: chunks of {chunk_rows} rows changed the dictionaries"
            );
        }
    }
}

#[test]
fn distinct_text_is_compressed_at_zstd_level_1_once_the_choice_is_made() {
    let batch = fixture();
    let options = BlockOptions::new(1, None).with_dictionary_sample(2048);
    let given = props(1 << 20, Some(3000));
    let mut writer =
        BlockWriter::try_new(Vec::new(), batch.schema(), given.clone(), options).expect("opens");
    let level = |props: &WriterProperties, name: &str| props.compression(&ColumnPath::from(name));
    let level_3 = Compression::ZSTD(ZstdLevel::try_new(3).expect("a level"));
    let level_1 = Compression::ZSTD(ZstdLevel::try_new(1).expect("a level"));
    assert_eq!(level(&given, "body"), level_3, "fixture: ZSTD level 3");
    writer.write(&batch.slice(0, 1024)).expect("writes");
    assert_eq!(
        level(writer.properties(), "body"),
        level_3,
        "before the choice"
    );
    writer.write(&batch.slice(1024, 8192)).expect("writes");
    let chosen = writer.properties();
    assert_eq!(level(chosen, "body"), level_1, "distinct text");
    // Distinct integers, repeating text and the sort keys keep the file's level.
    for name in ["time_unix_nano", "service.name", "status", "severity"] {
        assert_eq!(level(chosen, name), level_3, "{name}");
    }
    writer.finish().expect("finishes");
    let bytes = Bytes::from(std::mem::take(writer.inner_mut().expect("the sink")));
    let meta = metadata(&bytes);
    assert!(meta.num_row_groups() > 1);
    for rg in 0..meta.num_row_groups() {
        assert!(matches!(
            chunk(&meta, rg, "body").compression(),
            Compression::ZSTD(_)
        ));
    }
    assert_eq!(read(reader(&bytes))[0].len(), 9216, "rows read back");
}

/// The chunk of top-level column `name` in row group `rg`.
fn chunk<'a>(meta: &'a ParquetMetaData, rg: usize, name: &str) -> &'a ColumnChunkMetaData {
    (meta.row_group(rg).columns().iter())
        .find(|c| c.column_path().parts().first().is_some_and(|p| p == name))
        .expect("the column is in the file")
}

#[test]
fn a_distinct_sort_key_keeps_its_statistics() {
    let fixture = fixture();
    let schema = fixture.schema();
    let service = schema
        .index_of("service.name")
        .expect("the fixture has services");
    let mut columns = fixture.columns().to_vec();
    columns[service] = Arc::new(StringArray::from_iter_values(
        (0..fixture.num_rows()).map(|i| format!("service-{i:06}")),
    ));
    let batch = RecordBatch::try_new(schema, columns).expect("same schema");
    let meta = metadata(&write_with_dictionary_choice(&batch, 1, 1024));
    for rg in 1..meta.num_row_groups() {
        let service = chunk(&meta, rg, "service.name");
        assert!(service.dictionary_page_offset().is_none(), "row group {rg}");
        let statistics = service.statistics().expect("the sort key keeps statistics");
        assert!(statistics.min_bytes_opt().is_some() && statistics.max_bytes_opt().is_some());
        assert!(chunk(&meta, rg, "body").statistics().is_none());
    }
}

/// For each row group, which column chunks have a dictionary page.
fn dictionary_pages(meta: &ParquetMetaData) -> Vec<Vec<bool>> {
    (meta.row_groups().iter())
        .map(|rg| {
            (rg.columns().iter())
                .map(|c| c.dictionary_page_offset().is_some())
                .collect()
        })
        .collect()
}

fn reader(bytes: &Bytes) -> ParquetRecordBatchReaderBuilder<Bytes> {
    ParquetRecordBatchReaderBuilder::try_new_with_options(
        bytes.clone(),
        ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required),
    )
    .expect("opens")
}

/// The decoded columns (the file's schema also carries its key-value metadata).
fn read(builder: ParquetRecordBatchReaderBuilder<Bytes>) -> Vec<arrow_array::ArrayRef> {
    let reader = builder.with_batch_size(777).build().expect("reader");
    let schema = reader.schema();
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().expect("decodes");
    concat_batches(&schema, &batches)
        .expect("concat")
        .columns()
        .to_vec()
}

#[test]
fn values_read_back_full_projected_by_row_group_and_by_page_selection() {
    let batch = fixture();
    let props = props(1 << 20, Some(700));
    for n in [1, 4, 8] {
        let (bytes, _, _) = write_blocks(&batch, &props, BlockOptions::new(n, None), 1000);
        assert_eq!(
            read(reader(&bytes)),
            batch.columns(),
            "blocks of {n}: full read"
        );

        let builder = reader(&bytes);
        let mask = ProjectionMask::roots(builder.parquet_schema(), [0, 3, 6, 7]);
        let projected = read(builder.with_projection(mask));
        assert_eq!(
            projected,
            batch.project(&[0, 3, 6, 7]).expect("project").columns(),
            "blocks of {n}: projection"
        );

        // Row groups 1 and 5 alone.
        let meta = metadata(&bytes);
        let first_row =
            |rg: usize| -> usize { (0..rg).map(|r| meta.row_group(r).num_rows() as usize).sum() };
        let picked = read(reader(&bytes).with_row_groups(vec![1, 5]));
        let expected = concat_batches(
            &batch.schema(),
            &[1usize, 5]
                .map(|rg| batch.slice(first_row(rg), meta.row_group(rg).num_rows() as usize)),
        )
        .expect("concat");
        assert_eq!(
            picked,
            expected.columns(),
            "blocks of {n}: row groups 1 and 5"
        );

        // A selection that skips whole pages: only the offset index can find the rest.
        let ranges = [(1_500usize, 300usize), (6_100, 2_500), (19_000, 999)];
        let mut selectors = Vec::new();
        let mut at = 0;
        for (start, len) in ranges {
            selectors.push(RowSelector::skip(start - at));
            selectors.push(RowSelector::select(len));
            at = start + len;
        }
        let selected = read(reader(&bytes).with_row_selection(RowSelection::from(selectors)));
        let expected = concat_batches(
            &batch.schema(),
            &ranges.map(|(start, len)| batch.slice(start, len)),
        )
        .expect("concat");
        assert_eq!(
            selected,
            expected.columns(),
            "blocks of {n}: page-index row selection"
        );
    }
}

#[test]
fn bloom_filters_answer_for_present_and_absent_services() {
    let batch = fixture();
    let props = props(1 << 20, Some(700));
    let services = batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .expect("service strings")
        .clone();
    for n in [1, 4, 8] {
        let (bytes, _, _) = write_blocks(&batch, &props, BlockOptions::new(n, None), 1000);
        let options = ReadOptionsBuilder::new()
            .with_reader_properties(
                ReaderProperties::builder()
                    .set_read_bloom_filter(true)
                    .build(),
            )
            .build();
        let file = SerializedFileReader::new_with_options(bytes, options).expect("opens");
        let mut first_row = 0;
        for rg in 0..file.metadata().num_row_groups() {
            let rows = file.metadata().row_group(rg).num_rows() as usize;
            let reader = file.get_row_group(rg).expect("row group");
            let bloom = reader
                .get_column_bloom_filter(0)
                .expect("a bloom filter on service.name");
            let present = services.slice(first_row, rows);
            for service in present.iter().flatten() {
                assert!(
                    bloom.check(&service),
                    "blocks of {n}, rg {rg}: {service} must match"
                );
            }
            for absent in FIXTURE_SERVICES
                .iter()
                .filter(|s| !present.iter().flatten().any(|p| p == **s))
            {
                assert!(
                    !bloom.check(absent),
                    "blocks of {n}, rg {rg}: {absent} must not match"
                );
            }
            assert!(!bloom.check(&"no-such-service"), "blocks of {n}, rg {rg}");
            assert!(
                reader.get_column_bloom_filter(1).is_none(),
                "no bloom on time"
            );
            first_row += rows;
        }
        assert_eq!(first_row, ROWS);
    }
}

/// Writes `batch` in calls of `call_rows` rows, each call's rows in batches of `batch_rows`.
fn write_in_calls(
    batch: &RecordBatch,
    props: &WriterProperties,
    (call_rows, batch_rows): (usize, usize),
    parallel: bool,
) -> Bytes {
    let options = BlockOptions::new(4, None)
        .with_dictionary_sample(4096)
        .with_parallel_encoding(parallel);
    let mut writer =
        BlockWriter::try_new(Vec::new(), batch.schema(), props.clone(), options).expect("opens");
    for start in (0..batch.num_rows()).step_by(call_rows) {
        let call = batch.slice(start, call_rows.min(batch.num_rows() - start));
        let parts: Vec<RecordBatch> = (0..call.num_rows())
            .step_by(batch_rows)
            .map(|s| call.slice(s, batch_rows.min(call.num_rows() - s)))
            .collect();
        writer.write_batches(&parts).expect("writes");
    }
    assert_eq!(writer.rows(), batch.num_rows() as u64);
    writer.finish().expect("finishes");
    Bytes::from(std::mem::take(writer.inner_mut().expect("the sink")))
}

#[test]
fn calls_of_many_batches_keep_every_row_and_the_same_bytes_on_one_thread_or_two() {
    let batch = fixture();
    for (row_group_bytes, max_rows) in [(64 << 10, None), (256 << 10, Some(3000))] {
        let props = props(row_group_bytes, max_rows);
        // One batch per call is what `write` does.
        let single = write_in_calls(&batch, &props, (1024, 1024), false);
        let mut writer = BlockWriter::try_new(
            Vec::new(),
            batch.schema(),
            props.clone(),
            BlockOptions::new(4, None).with_dictionary_sample(4096),
        )
        .expect("opens");
        feed(
            &batch,
            usize::MAX,
            |b| writer.write(b).expect("writes"),
            || {},
        );
        writer.finish().expect("finishes");
        assert!(single.as_ref() == writer.inner_mut().expect("the sink").as_slice());
        for split in [(8192, 1024), (8192, 37), (5000, 999)] {
            let one = write_in_calls(&batch, &props, split, false);
            let two = write_in_calls(&batch, &props, split, true);
            assert!(
                one == two,
                "{split:?}: two encoding threads change the bytes"
            );
            assert!(
                one == write_in_calls(&batch, &props, split, true),
                "{split:?}: rerun differs"
            );
            let meta = metadata(&one);
            assert!(
                meta.num_row_groups() > 3,
                "{} row groups",
                meta.num_row_groups()
            );
            let rows: i64 = meta.row_groups().iter().map(|rg| rg.num_rows()).sum();
            assert_eq!(rows, batch.num_rows() as i64);
            let read: usize = reader(&one)
                .build()
                .expect("reads")
                .map(|b| b.expect("decodes").num_rows())
                .sum();
            assert_eq!(read, batch.num_rows());
        }
    }
}

/// A sink that takes nothing past the magic until its gate opens (or ten seconds pass, so a
/// writer that waits for it fails the test rather than hanging it).
struct GatedSink {
    bytes: Vec<u8>,
    gate: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl std::io::Write for GatedSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() >= 4 {
            let (open, opened) = &*self.gate;
            let guard = open.lock().expect("gate");
            let _ = opened
                .wait_timeout_while(guard, std::time::Duration::from_secs(10), |open| !*open)
                .expect("gate");
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A block whose output takes its time (an upload at the network's pace) does not stop the
/// writer: the next row group is encoded while the block is copied, and the file is the same.
#[test]
fn the_next_row_group_is_encoded_while_a_block_is_copied_out() {
    let batch = fixture();
    let props = props(1 << 30, Some(2048));
    let (expected, _, _) = write_blocks(&batch, &props, BlockOptions::new(2, None), 2);
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let sink = GatedSink {
        bytes: Vec::new(),
        gate: Arc::clone(&gate),
    };
    let mut writer = BlockWriter::try_new(sink, batch.schema(), props, BlockOptions::new(2, None))
        .expect("opens");
    let started = std::time::Instant::now();
    // Two row groups make the first block; the third row group's rows follow while its bytes
    // wait at the gate.
    for start in (0..5120).step_by(1024) {
        writer.write(&batch.slice(start, 1024)).expect("writes");
    }
    assert_eq!(writer.rows(), 5120);
    assert_eq!(writer.row_groups(), 2);
    assert_eq!(writer.in_progress_rows(), 1024);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the writer waited for the block's copy"
    );
    *gate.0.lock().expect("gate") = true;
    gate.1.notify_all();
    for start in (5120..batch.num_rows()).step_by(1024) {
        let rows = 1024.min(batch.num_rows() - start);
        writer.write(&batch.slice(start, rows)).expect("writes");
    }
    writer.finish().expect("finishes");
    let written = std::mem::take(&mut writer.inner_mut().expect("the sink").bytes);
    assert!(written == expected.as_ref(), "the file differs");
}

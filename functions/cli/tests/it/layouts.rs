//! Lakes in other writers' key layouts (`--layout`): Vector's `dt=%Y%m%d/hour=%H` with a
//! tenant level, a plain `%Y/%m/%d/%H` path under a tenant, and Fluent Bit's minute
//! sub-partitions (`hr=%H/min=%M`), whose files in the hour's directory and in its minute
//! directories are one partition, each with and without a tenant level. Each is generated,
//! compacted, listed and queried through its template; templates that cannot work fail at
//! start, naming the problem. The key settings too: sort keys, time columns (in other units,
//! inside structs) and bloom columns.

use std::path::Path;

use crate::common::{json, run, run_ok};
use serde_json::Value;

const HOUR: &str = "2026-11-29T10";

fn ok(args: &[&str]) -> Value {
    json(&run_ok(args))
}

/// The arguments of `command` with a lake's `base` flags and `extra` ones.
fn command_with(command: &str, base: &[&str], extra: &[&str]) -> Vec<String> {
    let mut args = vec![command.to_string()];
    args.extend(base.iter().chain(extra).map(|s| s.to_string()));
    args
}

/// What a run printed, standard output then standard error.
fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file under `dir`, relative to it (none when it is gone).
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    if !dir.exists() {
        return found;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("a directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(dir).expect("under the root");
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn lakes_in_other_layouts_compact_list_and_query_through_their_template() {
    for (layout, hour_dir) in [
        (
            "logs/dt=%Y%m%d/svc={tenant}/hour=%H",
            "logs/dt=20261129/svc=acme/hour=10",
        ),
        ("raw/{tenant}/%Y/%m/%d/%H", "raw/acme/2026/11/29/10"),
        (
            "logs/year=%Y/month=%m/day=%d/tenant={tenant}/hr=%H/min=%M",
            "logs/year=2026/month=11/day=29/tenant=acme/hr=10",
        ),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let store = dir.path().to_string_lossy().into_owned();
        let base = ["--store", store.as_str(), "--layout", layout];
        let partition = ["--tenant", "acme", "--hour", HOUR];
        let with = |command: &str, extra: &[&str]| -> Vec<String> {
            let mut args = vec![command.to_string()];
            args.extend(
                base.iter()
                    .chain(&partition)
                    .chain(extra)
                    .map(|s| s.to_string()),
            );
            args
        };
        let args = with("generate", &["--files", "4", "--rows", "500", "--json"]);
        ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let generated = files_under(&dir.path().join(hour_dir));
        assert_eq!(generated.len(), 4, "{layout}: {generated:?}");
        if layout.contains("%M") {
            // Two of the hour's files sit in minute directories, as Fluent Bit writes them.
            for (file, minute) in generated.iter().take(2).zip(["min=07", "min=42"]) {
                let into = dir.path().join(hour_dir).join(minute);
                std::fs::create_dir_all(&into).expect("a minute directory");
                std::fs::rename(dir.path().join(hour_dir).join(file), into.join(file))
                    .expect("moved into its minute");
            }
        }

        let args = with("compact", &["--json", "--gc-grace", "0s"]);
        let report = ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(report["status"], "compacted", "{layout}: {report}");
        assert_eq!(report["inputs"]["files"], 4, "{layout}: {report}");
        assert_eq!(report["inputs"]["rows"], 2000, "{layout}: {report}");

        let args = with("files", &["--json"]);
        let files = ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let live = files["live"].as_array().expect("live files");
        assert_eq!(live.len(), 1, "{layout}: {files}");
        assert!(
            live[0]
                .as_str()
                .is_some_and(|k| k.starts_with("compacted/")),
            "{layout}: {files}"
        );
        assert!(
            files_under(&dir.path().join(hour_dir)).is_empty(),
            "{layout}: the retired inputs are collected"
        );

        let mut query = ourios_compaction::testing::query_hour_args(&store, "acme");
        query.extend(["--layout", layout, "--limit", "0", "--json"]);
        let query = ok(&query);
        assert_eq!(query["stats"]["rows_matched"], 2000, "{layout}: {query}");
    }
}

/// The writers' own defaults have no tenant level (Firehose's `YYYY/MM/DD/HH/`, Vector's
/// `dt=%Y%m%d/hour=%H`, Fluent Bit's minute directories): a partition is its hour alone, no
/// command needs `--tenant`, and outputs, manifests and job records drop the tenant level.
#[test]
fn lakes_without_a_tenant_level_compact_by_the_hour_alone() {
    for (layout, hour_dir) in [
        ("firehose/%Y/%m/%d/%H", "firehose/2026/11/29/10"),
        ("logs/dt=%Y%m%d/hour=%H", "logs/dt=20261129/hour=10"),
        (
            "logs/year=%Y/month=%m/day=%d/hr=%H/min=%M",
            "logs/year=2026/month=11/day=29/hr=10",
        ),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let store = dir.path().to_string_lossy().into_owned();
        let base = ["--store", store.as_str(), "--layout", layout];
        let with = |command: &str, extra: &[&str]| command_with(command, &base, extra);
        let call = |args: Vec<String>| ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        for (hour, files) in [(HOUR, "4"), ("2026-11-29T11", "2")] {
            call(with(
                "generate",
                &["--hour", hour, "--files", files, "--rows", "500", "--json"],
            ));
        }
        assert_eq!(
            files_under(&dir.path().join(hour_dir)).len(),
            4,
            "{layout}: the hour's files, no tenant level"
        );

        // A tenant where the layout has none is refused, naming the layout.
        let out = run(&with("files", &["--tenant", "acme", "--hour", HOUR])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{layout}: a tenant named");
        assert!(
            stderr.contains("no tenant level") && stderr.contains(layout),
            "{layout}: {stderr}"
        );

        let report = call(with(
            "compact",
            &["--hour", HOUR, "--json", "--gc-grace", "0s"],
        ));
        assert_eq!(report["status"], "compacted", "{layout}: {report}");
        assert_eq!(report["inputs"]["rows"], 2000, "{layout}: {report}");
        // The other hour through a backfill of the range, run here.
        let backfill = call(with(
            "backfill",
            &[
                "--from",
                HOUR,
                "--to",
                "2026-11-29T11",
                "--run-local",
                "--json",
            ],
        ));
        assert_eq!(backfill["scheduled"], 1, "{layout}: {backfill}");
        assert_eq!(
            backfill["partitions"][0]["tenant"],
            Value::Null,
            "{backfill}"
        );
        assert_eq!(
            backfill["partitions"][0]["hour"], "2026-11-29T11",
            "{layout}: {backfill}"
        );

        let own: Vec<String> = files_under(dir.path())
            .into_iter()
            .filter(|f| f.starts_with("compacted/") || f.starts_with("_compaction/manifests/"))
            .collect();
        assert!(!own.is_empty(), "{layout}");
        for key in &own {
            assert!(
                !key.contains("tenant=") && key.contains("/year=2026/month=11/day=29/hour="),
                "{layout}: {key} keeps the project's grammar without a tenant level"
            );
        }

        let files = call(with(
            "files",
            &["--from", HOUR, "--to", "2026-11-29T11", "--json"],
        ));
        let partitions = files["partitions"].as_array().expect("partitions");
        assert_eq!(partitions.len(), 2, "{layout}: {files}");
        for partition in partitions {
            assert_eq!(partition["tenant"], Value::Null, "{files}");
            assert_eq!(partition["live"], 1, "{layout}: {files}");
        }
        let files = call(with("files", &["--hour", HOUR, "--json"]));
        assert_eq!(files["live"].as_array().map(Vec::len), Some(1), "{files}");

        let query = call(with(
            "query",
            &[
                "--from",
                "2026-11-29T10:00:00Z",
                "--to",
                "2026-11-29T12:00:00Z",
                "--limit",
                "0",
                "--json",
            ],
        ));
        assert_eq!(query["stats"]["rows_matched"], 3000, "{layout}: {query}");
        let gc = call(with("gc", &["--grace", "0s", "--json"]));
        assert!(gc.is_object() || gc.is_array(), "{layout}: {gc}");
        assert!(
            files_under(&dir.path().join(hour_dir)).is_empty(),
            "{layout}: the retired inputs are collected"
        );
    }
    // A layout with a tenant level still needs the tenant of a single partition.
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().into_owned();
    let out = run(&["compact", "--store", &store, "--hour", HOUR]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("name the tenant"), "{stderr}");
}

/// Writes a Vector-like batch file: `timestamp` in milliseconds (UTC), `host`, `message` and a
/// 16-byte `trace_id`, rows `first..first + rows` in reverse order (unsorted).
fn write_vector_file(path: &Path, first: i64, rows: i64) {
    use arrow_array::{FixedSizeBinaryArray, StringArray, TimestampMillisecondArray};
    use arrow_schema::{DataType, Field, Schema, TimeUnit};
    let hour_ms = 1_795_946_400_000i64; // 2026-11-29T10:00:00Z
    let ids: Vec<i64> = (first..first + rows).rev().collect();
    let schema = Schema::new(vec![
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("host", DataType::Utf8, true),
        Field::new("message", DataType::Utf8, true),
        Field::new("trace_id", DataType::FixedSizeBinary(16), true),
    ]);
    let batch = arrow_array::RecordBatch::try_new(
        std::sync::Arc::new(schema),
        vec![
            std::sync::Arc::new(
                TimestampMillisecondArray::from_iter_values(
                    ids.iter().map(|i| hour_ms + (i * 7_919) % 3_600_000),
                )
                .with_timezone("UTC"),
            ),
            std::sync::Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("host-{}", i % 5)),
            )),
            std::sync::Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("GET /item/{i} 200")),
            )),
            std::sync::Arc::new(
                FixedSizeBinaryArray::try_from_iter(
                    ids.iter().map(|i| (*i as u128).to_be_bytes().to_vec()),
                )
                .expect("trace ids"),
            ),
        ],
    )
    .expect("a batch");
    write_batch(path, &batch);
}

/// Vector's lake: no tenant, a `timestamp` column and no `service.name`. The sort key, the time
/// column and the bloom columns are settings: the output is sorted by (host, timestamp),
/// declares it in `sorting_columns`, and carries bloom filters on `host` and `trace_id`. A typo
/// in the time column fails the job naming it and quarantines nothing.
#[test]
fn the_sort_key_time_column_and_bloom_columns_are_settings() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().into_owned();
    let hour_dir = dir.path().join("logs/dt=20261129/hour=10");
    for (i, first) in [0, 500, 1000].into_iter().enumerate() {
        write_vector_file(&hour_dir.join(format!("batch-{i}.parquet")), first, 500);
    }
    let base = [
        "--store",
        store.as_str(),
        "--layout",
        "logs/dt=%Y%m%d/hour=%H",
    ];
    let with = |command: &str, extra: &[&str]| command_with(command, &base, extra);

    // A typo, or a text column, fails the job, naming the column, and quarantines nothing.
    for (column, says) in [("timestmap", "is missing"), ("message", "has type Utf8")] {
        let typo = with(
            "compact",
            &["--hour", HOUR, "--time-column", column, "--json"],
        );
        let out = run(&typo.iter().map(String::as_str).collect::<Vec<_>>());
        let text = output_text(&out);
        assert!(
            text.contains(column)
                && text.contains(says)
                && text.contains("nothing was quarantined"),
            "{text}"
        );
        assert_eq!(files_under(&hour_dir).len(), 3, "{text}");
    }
    let files = ok(&with("files", &["--hour", HOUR, "--json"])
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    assert_eq!(
        files["quarantined"].as_array().map(Vec::len),
        Some(0),
        "{files}"
    );

    // A sort key naming a column twice is refused at start, naming it.
    let out = run(&with(
        "compact",
        &["--hour", HOUR, "--sort-key", "host,message,host"],
    )
    .iter()
    .map(String::as_str)
    .collect::<Vec<_>>());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("host,message,host"));

    let keys = [
        "--sort-key",
        "host,timestamp",
        "--bloom-columns",
        "host,trace_id",
    ];
    let compact = with(
        "compact",
        &[
            &["--hour", HOUR, "--json", "--max-rows-per-row-group", "100"][..],
            &keys[..],
        ]
        .concat(),
    );
    let report = ok(&compact.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(report["inputs"]["rows"], 1500, "{report}");
    let key = report["output"]["key"].as_str().expect("an output key");
    let file = std::fs::File::open(dir.path().join(key)).expect("the output");
    let reader = SerializedFileReader::new(file).expect("a Parquet file");
    let metadata = reader.metadata();
    let schema = metadata.file_metadata().schema_descr();
    let index = |name: &str| {
        (0..schema.num_columns())
            .find(|&i| schema.column(i).name() == name)
            .expect("a column")
    };
    let sorting: Vec<usize> = (metadata.row_group(0).sorting_columns())
        .expect("sorting_columns declared")
        .iter()
        .map(|c| c.column_idx as usize)
        .collect();
    assert_eq!(sorting, [index("host"), index("timestamp")]);
    for group in metadata.row_groups() {
        for (name, bloom) in [("host", true), ("trace_id", true), ("message", false)] {
            let chunk = group.column(index(name));
            assert_eq!(chunk.bloom_filter_offset().is_some(), bloom, "{name}");
        }
    }
    // Rows in (host, timestamp) order; the time column keeps the inputs' type.
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(dir.path().join(key)).expect("the output"),
    )
    .expect("a reader");
    assert_eq!(
        builder
            .schema()
            .field_with_name("timestamp")
            .map(|f| f.data_type().clone())
            .ok(),
        Some(arrow_schema::DataType::Timestamp(
            arrow_schema::TimeUnit::Millisecond,
            Some("UTC".into())
        ))
    );
    let rows = builder.build().expect("batches");
    let mut keys_seen = Vec::new();
    for batch in rows {
        let batch = batch.expect("a batch");
        let host = arrow_cast::cast(
            batch.column_by_name("host").expect("host"),
            &arrow_schema::DataType::Utf8,
        )
        .expect("strings");
        let host = host
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .expect("strings");
        let time = arrow_cast::cast(
            batch.column_by_name("timestamp").expect("timestamp"),
            &arrow_schema::DataType::Int64,
        )
        .expect("integers");
        let time = time
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .expect("integers");
        for i in 0..batch.num_rows() {
            keys_seen.push((host.value(i).to_string(), time.value(i)));
        }
    }
    assert_eq!(keys_seen.len(), 1500);
    assert!(
        keys_seen.windows(2).all(|w| w[0] <= w[1]),
        "sorted by (host, timestamp)"
    );

    // `query` prunes with the same key: one host's rows of the hour.
    let query = with(
        "query",
        &[
            &[
                "--service",
                "host-3",
                "--from",
                "2026-11-29T10:00:00Z",
                "--to",
                "2026-11-29T11:00:00Z",
                "--limit",
                "0",
                "--json",
            ][..],
            &keys[..],
        ]
        .concat(),
    );
    let query = ok(&query.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(query["stats"]["rows_matched"], 300, "{query}");

    // `--where`: one trace's lines, found through the bloom filters of the trace id column;
    // filters on a string column and a column no file has.
    let trace = format!("{:032x}", 1234u128);
    let hour = [
        "--from",
        "2026-11-29T10:00:00Z",
        "--to",
        "2026-11-29T11:00:00Z",
    ];
    let filtered = |filters: &[&str]| {
        let mut args = with(
            "query",
            &[&hour[..], &["--limit", "0", "--json"], &keys[..]].concat(),
        );
        for filter in filters {
            args.extend(["--where".to_string(), filter.to_string()]);
        }
        ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let one_trace = filtered(&[&format!("trace_id={trace}")]);
    let stats = &one_trace["stats"];
    assert_eq!(stats["rows_matched"], 1, "{one_trace}");
    assert_eq!(stats["row_groups_total"], 15, "{one_trace}");
    assert!(
        stats["row_groups_pruned_by_bloom"].as_u64() >= Some(10),
        "the trace id's bloom filters skip most row groups: {one_trace}"
    );
    let both = filtered(&["host=host-3", "message=GET /item/8 200"]);
    assert_eq!(both["stats"]["rows_matched"], 1, "{both}");
    let none = filtered(&["host=host-3", "message=GET /item/9 200"]);
    assert_eq!(none["stats"]["rows_matched"], 0, "{none}");
    let absent = filtered(&["no_such_column=x"]);
    assert_eq!(absent["stats"]["rows_matched"], 0, "{absent}");
    let out = run(
        &with("query", &[&hour[..], &["--where", "trace_id=xyz"]].concat())
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("hex"),
        "a bad hex value is named"
    );
}

#[test]
fn a_layout_that_cannot_work_fails_at_start_naming_the_problem() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().into_owned();
    for (layout, says) in [
        ("logs/%Y/%m/%d/{tenant}", "no %H"),
        ("logs/%Y/%m/%d/%H/%Q/{tenant}", "unknown placeholder %Q"),
        ("logs/%Y/%m/%d/%H/min=%M/x", "%M"),
        ("compacted/{tenant}/%Y/%m/%d/%H", "overlaps"),
    ] {
        let out = run(&[
            "files", "--store", &store, "--layout", layout, "--tenant", "acme", "--hour", HOUR,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{layout}");
        assert!(
            stderr.contains(says) && stderr.contains(layout),
            "{layout}: {stderr}"
        );
    }
    let out = run(&[
        "files",
        "--store",
        &store,
        "--layout",
        "logs/{tenant}/%Y/%m/%d/%H",
        "--ingest-prefix",
        "ingest",
        "--tenant",
        "acme",
        "--hour",
        HOUR,
    ]);
    assert!(!out.status.success(), "both a layout and an ingest prefix");
}

/// Firehose names its objects without an extension unless told otherwise: with the default
/// input names they are not inputs and nothing is compacted; with `--input-names '*'` they are
/// (the writer's side files still are not).
#[test]
fn objects_without_an_extension_are_inputs_when_the_input_names_say_so() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().into_owned();
    let layout = "firehose/{tenant}/%Y/%m/%d/%H";
    let hour_dir = dir.path().join("firehose/acme/2026/11/29/10");
    let partition = ["--tenant", "acme", "--hour", HOUR];
    let mut generate = vec!["generate", "--store", &store, "--layout", layout];
    generate.extend(partition);
    generate.extend(["--files", "3", "--rows", "200", "--json"]);
    ok(&generate);
    for file in files_under(&hour_dir) {
        let bare = file.trim_end_matches(".parquet").replace('.', "-");
        std::fs::rename(hour_dir.join(&file), hour_dir.join(bare)).expect("renamed");
    }
    std::fs::write(hour_dir.join("_SUCCESS"), b"").expect("a side file");
    let compact = |names: Option<&str>| {
        let mut args = vec!["compact", "--store", &store, "--layout", layout];
        args.extend(partition);
        args.extend(["--json", "--gc-grace", "0s"]);
        if let Some(names) = names {
            args.extend(["--input-names", names]);
        }
        ok(&args)
    };
    let skipped = compact(None);
    assert_eq!(skipped["inputs"]["files"], 0, "{skipped}");
    let report = compact(Some("*"));
    assert_eq!(report["status"], "compacted", "{report}");
    assert_eq!(
        (&report["inputs"]["files"], &report["inputs"]["rows"]),
        (&Value::from(3), &Value::from(600)),
        "{report}"
    );
    assert_eq!(
        files_under(&hour_dir),
        ["_SUCCESS"],
        "only the side file is left"
    );
}

/// Writes `batch` as a Parquet file at `path`, its directories made.
fn write_batch(path: &Path, batch: &arrow_array::RecordBatch) {
    std::fs::create_dir_all(path.parent().expect("a directory")).expect("directories");
    let file = std::fs::File::create(path).expect("a file");
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).expect("a writer");
    writer.write(batch).expect("written");
    writer.close().expect("closed");
}

/// A Fluent Bit-shaped file (`json_date_format epoch` under its Parquet compression): `date`
/// as Int64 counting `per_second` units a second, rows `first..first + rows` (unsorted), a
/// `log` line naming each.
fn write_epoch_file(path: &Path, first: i64, rows: i64, per_second: i64) {
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    let hour_s = 1_795_946_400i64; // 2026-11-29T10:00:00Z
    let ids: Vec<i64> = (first..first + rows).rev().collect();
    let schema = Schema::new(vec![
        Field::new("date", DataType::Int64, true),
        Field::new("log", DataType::Utf8, true),
    ]);
    let batch = arrow_array::RecordBatch::try_new(
        std::sync::Arc::new(schema),
        vec![
            std::sync::Arc::new(Int64Array::from_iter_values(
                ids.iter().map(|i| (hour_s + i % 3_600) * per_second),
            )),
            std::sync::Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("line {i}")),
            )),
        ],
    )
    .expect("a batch");
    write_batch(path, &batch);
}

/// Integer times in seconds (Fluent Bit's `json_date_format epoch`) with `--time-unit s`: the
/// hour check, the sort, queries and their pruning read them as seconds, and the output keeps
/// them as they are. Without the unit, or with another, every input lies outside the hour: the
/// job fails saying which unit fits and quarantines nothing. A file in milliseconds among
/// files in seconds is quarantined alone, with the same hint. `--time-unit` for
/// `time_unix_nano` is refused at start.
#[test]
fn integer_times_in_seconds_are_read_in_the_unit_the_settings_give() {
    use arrow_array::cast::AsArray;
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().into_owned();
    let hour_dir = dir.path().join("logs/year=2026/month=11/day=29/hr=10");
    for (i, first) in [0, 1200, 2400].into_iter().enumerate() {
        write_epoch_file(&hour_dir.join(format!("{i:02}-epoch")), first, 1200, 1);
    }
    let base = [
        "--store",
        store.as_str(),
        "--layout",
        "logs/year=%Y/month=%m/day=%d/hr=%H/min=%M",
        "--input-names",
        "*",
        "--time-column",
        "date",
    ];
    let with = |command: &str, extra: &[&str]| command_with(command, &base, extra);
    let run_with = |args: &[String]| run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let ok_with = |args: &[String]| ok(&args.iter().map(String::as_str).collect::<Vec<_>>());

    // Read as nanoseconds (the default) or milliseconds, the seconds lie in 1970: a setting's
    // mistake, not bad files.
    for unit in [None, Some("ms")] {
        let mut extra = vec!["--hour", HOUR, "--json"];
        extra.extend(unit.iter().flat_map(|u| ["--time-unit", *u]));
        let out = run_with(&with("compact", &extra));
        let text = output_text(&out);
        assert!(!out.status.success(), "{unit:?}: {text}");
        assert!(
            text.contains("counted in s it lies inside")
                && text.contains("--time-unit")
                && text.contains("nothing was quarantined"),
            "{unit:?}: {text}"
        );
        assert_eq!(files_under(&hour_dir).len(), 3, "{text}");
    }
    // The default time column counts nanoseconds by definition.
    let out = run(&[
        "compact",
        "--store",
        &store,
        "--tenant",
        "acme",
        "--hour",
        HOUR,
        "--time-unit",
        "s",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("time_unix_nano counts nanoseconds"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A file in milliseconds among files in seconds: quarantined alone, with the hint.
    write_epoch_file(&hour_dir.join("min=30/30-millis"), 3600, 100, 1000);
    let seconds = ["--time-unit", "s"];
    let report = ok_with(&with(
        "compact",
        &[
            &["--hour", HOUR, "--json", "--max-rows-per-row-group", "300"][..],
            &seconds[..],
        ]
        .concat(),
    ));
    // Compacted, with one input quarantined.
    assert_eq!(report["status"], "partial", "{report}");
    assert_eq!(report["inputs"]["rows"], 3600, "{report}");
    let quarantined = report["quarantined"].as_array().expect("quarantined");
    assert_eq!(quarantined.len(), 1, "{report}");
    let reason = quarantined[0]["reason"].as_str().expect("a reason");
    assert!(reason.contains("counted in ms it lies inside"), "{reason}");

    // The output keeps Int64 seconds, sorted.
    let key = report["output"]["key"].as_str().expect("an output key");
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(dir.path().join(key)).expect("the output"),
    )
    .expect("a reader");
    assert_eq!(
        builder
            .schema()
            .field_with_name("date")
            .map(|f| f.data_type().clone())
            .ok(),
        Some(arrow_schema::DataType::Int64)
    );
    let mut dates = Vec::new();
    for batch in builder.build().expect("batches") {
        let batch = batch.expect("a batch");
        let column = batch.column_by_name("date").expect("date");
        let values = column.as_primitive::<arrow_array::types::Int64Type>();
        dates.extend((0..values.len()).map(|i| values.value(i)));
    }
    assert_eq!(dates.len(), 3600);
    assert!(dates.windows(2).all(|w| w[0] <= w[1]), "sorted by date");
    assert!(
        dates
            .iter()
            .all(|d| (1_795_946_400..1_795_950_000).contains(d))
    );

    // A ten-minute window, in seconds: the rows of those 600 seconds, found in fewer row
    // groups than the hour's.
    let query = ok_with(&with(
        "query",
        &[
            &[
                "--from",
                "2026-11-29T10:10:00Z",
                "--to",
                "2026-11-29T10:20:00Z",
                "--limit",
                "0",
                "--json",
            ][..],
            &seconds[..],
        ]
        .concat(),
    ));
    let stats = &query["stats"];
    assert_eq!(stats["rows_matched"], 600, "{query}");
    let scanned = stats["row_groups_scanned"].as_u64().expect("scanned");
    let total = stats["row_groups_total"].as_u64().expect("total");
    assert!(
        scanned < total,
        "pruned by the seconds' statistics: {query}"
    );
}

/// Files whose time is a field of a struct (`record.ts`, Timestamp in milliseconds) beside a
/// top-level `service`, `rows` rows from `first` (unsorted), three services in turn. With
/// `null_record`, the first row's `record` is null, and so is its time.
fn write_struct_time_file(path: &Path, first: i64, rows: i64, null_record: bool) {
    use arrow_array::{ArrayRef, StringArray, StructArray, TimestampMillisecondArray};
    use arrow_buffer::NullBuffer;
    use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
    use std::sync::Arc;
    let hour_ms = 1_795_946_400_000i64; // 2026-11-29T10:00:00Z
    let ids: Vec<i64> = (first..first + rows).rev().collect();
    let ts_type = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let inner = Fields::from(vec![
        Field::new("ts", ts_type.clone(), true),
        Field::new("host", DataType::Utf8, true),
    ]);
    let times = TimestampMillisecondArray::from_iter_values(
        ids.iter().map(|i| hour_ms + (i % 3_600) * 1_000),
    )
    .with_timezone("UTC");
    let hosts = StringArray::from_iter_values(ids.iter().map(|i| format!("host-{}", i % 7)));
    let validity = null_record.then(|| NullBuffer::from_iter((0..rows).map(|i| i != 0)));
    let record = StructArray::new(
        inner.clone(),
        vec![Arc::new(times) as ArrayRef, Arc::new(hosts)],
        validity,
    );
    let services = ["api", "db", "web"];
    let schema = Schema::new(vec![
        Field::new("service", DataType::Utf8, true),
        Field::new("record", DataType::Struct(inner), true),
    ]);
    let batch = arrow_array::RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| services[(i % 3) as usize]),
            )),
            Arc::new(record),
        ],
    )
    .expect("a batch");
    write_batch(path, &batch);
}

/// A time column inside a struct, named by its path (`--time-column record.ts`): the hour
/// check, the sort, `sorting_columns` and query pruning find it there, and the output keeps
/// it there in its inputs' type. A row whose struct is null has a null time: its file is
/// quarantined alone. A path that names nothing fails the job and quarantines nothing.
#[test]
fn a_time_column_inside_a_struct_is_found_by_its_path() {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().into_owned();
    let hour_dir = dir.path().join("logs/2026/11/29/10");
    for (i, first) in [0, 1200, 2400].into_iter().enumerate() {
        write_struct_time_file(
            &hour_dir.join(format!("{i:02}.parquet")),
            first,
            1200,
            false,
        );
    }
    let base = |time: &'static str| {
        [
            "--store",
            store.as_str(),
            "--layout",
            "logs/%Y/%m/%d/%H",
            "--sort-key",
            "service,record.ts",
            "--time-column",
            time,
        ]
    };
    let command =
        |name: &str, time: &'static str, extra: &[&str]| command_with(name, &base(time), extra);

    // A path that names no column: the setting's mistake, nothing quarantined.
    let typo = command("compact", "record.tz", &["--hour", HOUR, "--json"]);
    let out = run(&typo.iter().map(String::as_str).collect::<Vec<_>>());
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("\"record.tz\" is missing") && text.contains("nothing was quarantined"),
        "{text}"
    );
    assert_eq!(files_under(&hour_dir).len(), 3, "{text}");

    // One more file whose first row's struct is null: its time is null, so it is quarantined.
    write_struct_time_file(&hour_dir.join("03.parquet"), 0, 10, true);
    let compact = command(
        "compact",
        "record.ts",
        &["--hour", HOUR, "--json", "--max-rows-per-row-group", "300"],
    );
    let report = ok(&compact.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(report["status"], "partial", "{report}");
    assert_eq!(report["inputs"]["rows"], 3600, "{report}");
    let quarantined = report["quarantined"].as_array().expect("quarantined");
    assert_eq!(quarantined.len(), 1, "{report}");
    let reason = quarantined[0]["reason"].as_str().expect("a reason");
    assert!(reason.contains("row 0: record.ts is null"), "{reason}");

    // The output keeps `record` a struct with the time in milliseconds, sorted by (service,
    // time), and declares both key columns, the second by its leaf inside the struct.
    let key = report["output"]["key"].as_str().expect("an output key");
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(dir.path().join(key)).expect("the output"),
    )
    .expect("a reader");
    let descr = builder.metadata().file_metadata().schema_descr_ptr();
    for row_group in builder.metadata().row_groups() {
        let declared: Vec<String> = (row_group.sorting_columns().expect("sorting_columns").iter())
            .map(|c| descr.column(c.column_idx as usize).path().string())
            .collect();
        assert_eq!(declared, ["service", "record.ts"]);
    }
    let mut keys = Vec::new();
    for batch in builder.build().expect("batches") {
        let batch = batch.expect("a batch");
        let services = batch.column_by_name("service").expect("service");
        let services = services.as_string::<i32>();
        let record = batch.column_by_name("record").expect("record");
        let ts = record.as_struct().column_by_name("ts").expect("record.ts");
        assert_eq!(
            ts.data_type(),
            &arrow_schema::DataType::Timestamp(
                arrow_schema::TimeUnit::Millisecond,
                Some("UTC".into())
            )
        );
        let ts = ts.as_primitive::<arrow_array::types::TimestampMillisecondType>();
        assert_eq!(ts.null_count(), 0);
        keys.extend((0..batch.num_rows()).map(|i| (services.value(i).to_string(), ts.value(i))));
    }
    assert_eq!(keys.len(), 3600);
    assert!(
        keys.windows(2).all(|w| w[0] <= w[1]),
        "sorted by (service, record.ts)"
    );

    // A ten-minute window: its rows, found by the struct leaf's statistics in fewer row groups
    // than the hour's.
    let query = command(
        "query",
        "record.ts",
        &[
            "--from",
            "2026-11-29T10:10:00Z",
            "--to",
            "2026-11-29T10:20:00Z",
            "--limit",
            "0",
            "--json",
        ],
    );
    let query = ok(&query.iter().map(String::as_str).collect::<Vec<_>>());
    let stats = &query["stats"];
    assert_eq!(stats["rows_matched"], 600, "{query}");
    let scanned = stats["row_groups_scanned"].as_u64().expect("scanned");
    let total = stats["row_groups_total"].as_u64().expect("total");
    assert!(
        scanned < total,
        "pruned by the time leaf's statistics: {query}"
    );
}

//! Lakes in other writers' key layouts (`--layout`): Vector's `dt=%Y%m%d/hour=%H` with a
//! tenant level, a plain `%Y/%m/%d/%H` path under a tenant, and Fluent Bit's minute
//! sub-partitions (`hr=%H/min=%M`), whose files in the hour's directory and in its minute
//! directories are one partition, each with and without a tenant level. Each is generated,
//! compacted, listed and queried through its template; templates that cannot work fail at
//! start, naming the problem.

use std::path::Path;

use crate::common::{json, run, run_ok};
use serde_json::Value;

const HOUR: &str = "2026-11-29T10";

fn ok(args: &[&str]) -> Value {
    json(&run_ok(args))
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
        let with = |command: &str, extra: &[&str]| -> Vec<String> {
            let mut args = vec![command.to_string()];
            args.extend(base.iter().chain(extra).map(|s| s.to_string()));
            args
        };
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

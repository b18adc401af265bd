//! Partitions written by real writers (pyarrow with every codec and format version, Polars,
//! DuckDB, INT96 and zoned times, nested columns, a file without rows, a conflicting file)
//! compact, and read back equal to their inputs (`tests/interop/writer_corpus.py`).
//!
//! Needs Python with pyarrow, DuckDB and Polars (`$OURIOS_INTEROP_PYTHON`, else `python3`);
//! without them the test fails, naming what to install.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{compact_json, json, run};
use serde_json::Value;

fn python() -> String {
    std::env::var("OURIOS_INTEROP_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn corpus_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/writer_corpus.py")
}

fn corpus(command: &str, store: &Path) -> String {
    let out = Command::new(python())
        .arg(corpus_script())
        .arg(command)
        .arg(store)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "writer_corpus.py {command} failed (it needs pyarrow, duckdb and polars: bash tests/run.sh installs them into .tools/venv):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn files_of_real_writers_compact_and_read_back_equal() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().to_string();
    let partitions: Vec<Value> = corpus("write", dir.path())
        .lines()
        .map(|l| serde_json::from_str(l).expect("a partition line"))
        .collect();
    assert!(partitions.len() >= 7, "{partitions:?}");
    for partition in &partitions {
        let tenant = partition["tenant"].as_str().expect("tenant");
        let hour = partition["hour"].as_str().expect("hour");
        let out = run(&compact_json(&store, tenant, hour, "32MiB"));
        let report = json(&out);
        let expect = partition["expect"].as_str().expect("expect");
        assert_eq!(
            report["status"],
            expect,
            "{tenant}: {report:#}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let quarantined = report["quarantined"].as_array().expect("quarantined");
        match partition["quarantined"].as_str() {
            None => assert!(quarantined.is_empty(), "{tenant}: {quarantined:?}"),
            Some(file) => {
                assert_eq!(quarantined.len(), 1, "{tenant}: {quarantined:?}");
                let entry = &quarantined[0];
                assert!(
                    entry["file"].as_str().expect("file").ends_with(file),
                    "{entry}"
                );
                let reason = entry["reason"].as_str().expect("reason");
                for word in partition["reason_words"].as_array().expect("words") {
                    let word = word.as_str().expect("word");
                    assert!(
                        reason.contains(word),
                        "{tenant}: {word:?} not in {reason:?}"
                    );
                }
            }
        }
    }
    let verified = corpus("verify", dir.path());
    assert_eq!(
        verified.lines().count(),
        partitions.len(),
        "every partition verified:\n{verified}"
    );
}

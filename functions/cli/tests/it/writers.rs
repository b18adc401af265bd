//! Partitions written by real writers (pyarrow with every codec and format version, Polars,
//! DuckDB, INT96 and zoned times, nested columns, a file without rows, a conflicting file, a
//! file whose page checksum, definition levels or list levels were damaged)
//! compact, and read back equal to their inputs (`tests/interop/writer_corpus.py`), in one
//! output and fanned out over ranges.
//!
//! Needs Python with pyarrow, DuckDB and Polars (`$OURIOS_INTEROP_PYTHON`, else `python3`);
//! without them the test fails, naming what to install.

use std::path::Path;

use crate::common::{compact_json, interop_script, json, run};
use serde_json::Value;

fn corpus(command: &str, store: &Path) -> String {
    let store = store.to_string_lossy();
    interop_script(
        "writer_corpus.py",
        &[command, store.as_ref()],
        "pyarrow, duckdb and polars",
    )
}

#[test]
fn files_of_real_writers_compact_and_read_back_equal() {
    let outputs = compact_corpus(&[]);
    assert!(outputs.iter().all(|&n| n == 1), "{outputs:?}");
}

#[test]
fn files_of_real_writers_fanned_out_compact_and_read_back_equal() {
    // The plan reads every footer (its admission) before the groups' own checks: other
    // writers' footers must pass it, and its quarantines must be the unfanned job's.
    let outputs = compact_corpus(&["--fan-out", "2"]);
    assert!(
        outputs.iter().any(|&n| n > 1),
        "no partition split: {outputs:?}"
    );
}

/// Writes the corpus into a fresh store, compacts each partition with `extra` flags, checks
/// each report against what the corpus expects and the outputs against the inputs; returns
/// each partition's number of output files.
fn compact_corpus(extra: &[&str]) -> Vec<usize> {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().to_string();
    let partitions: Vec<Value> = corpus("write", dir.path())
        .lines()
        .map(|l| serde_json::from_str(l).expect("a partition line"))
        .collect();
    assert!(partitions.len() >= 7, "{partitions:?}");
    let mut outputs = Vec::new();
    for partition in &partitions {
        let tenant = partition["tenant"].as_str().expect("tenant");
        let hour = partition["hour"].as_str().expect("hour");
        let mut args = compact_json(&store, tenant, hour, "32MiB");
        args.extend_from_slice(extra);
        let out = run(&args);
        let report = json(&out);
        let expect = partition["expect"].as_str().expect("expect");
        assert_eq!(
            report["status"],
            expect,
            "{tenant} {extra:?}: {report:#}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push(report["outputs"].as_array().expect("outputs").len());
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
                        "{tenant} {extra:?}: {word:?} not in {reason:?}"
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
    outputs
}

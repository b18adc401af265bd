//! What a newcomer sees first: the `demo` table and the log lines on stderr.

use std::process::Output;

use crate::common;

/// Runs the CLI with `args` and extra environment, stderr piped (not a terminal), colours on.
fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = common::command(args);
    command.env_remove("NO_COLOR").envs(env.iter().copied());
    command.output().expect("the CLI starts")
}

#[test]
fn demo_table_columns_line_up_on_every_row() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().join("demo-store");
    let out = run_with_env(&["demo", "--store", &store.to_string_lossy()], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("partition"))
        .expect("a header line");
    let rows: Vec<&str> = lines[header + 1..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    // The globex row has the longest partition name: every row's arrows and status column
    // must stand where the first row's do, and the status under its header.
    let arrows = |l: &str| -> Vec<usize> { l.match_indices(" -> ").map(|(i, _)| i).collect() };
    let status_column = lines[header].find("status").expect("status header");
    for row in &rows {
        assert_eq!(arrows(row), arrows(rows[0]), "{stdout}");
        assert_eq!(arrows(row).len(), 5, "{row}");
        assert_eq!(row.find("compacted"), Some(status_column), "{stdout}");
    }
    assert!(rows.iter().any(|r| r.starts_with("tenant=globex/")));
}

#[test]
fn log_lines_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().expect("dir");
    let store = dir.path().to_string_lossy().to_string();
    let mut args = common::partition_args("generate", &store, "acme");
    args.extend(["--files", "2", "--rows", "50"]);
    assert!(run_with_env(&args, &[]).status.success());
    for log_json in [false, true] {
        let mut args = common::partition_args("compact", &store, "acme");
        if log_json {
            args.insert(0, "--log-json");
        }
        let out = run_with_env(&args, &[("OURIOS_LOG", "debug")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.trim().is_empty(), "debug logging wrote nothing");
        assert!(
            !stderr.contains('\u{1b}'),
            "ANSI escape codes in piped stderr (log_json={log_json}):\n{stderr}"
        );
    }
}

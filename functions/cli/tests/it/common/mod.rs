//! The CLI's own binary run through the fixtures' command-line helpers
//! (`ourios_compaction::testing`, the one home of test fixtures).

use std::path::Path;
use std::process::{Command, Output};

pub use ourios_compaction::testing::{
    compact_json, partition_args, partition_dir, report_with_status, stdout_json as json,
};

/// The binary cargo built for these tests.
fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ourios-compact"))
}

/// The CLI with `args`, without the environment that would change its defaults.
pub fn command(args: &[&str]) -> Command {
    ourios_compaction::testing::cli_command(bin(), args)
}

/// Runs [`command`].
pub fn run(args: &[&str]) -> Output {
    run_with_env(args, &[])
}

/// Runs [`command`], which must succeed (the arguments and stderr in the panic message
/// otherwise).
pub fn run_ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs [`command`] with the variables `env` set.
pub fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    ourios_compaction::testing::run_cli(bin(), args, env)
}

/// Runs `tests/interop/<script>` with `args` under the interoperability Python
/// (`$OURIOS_INTEROP_PYTHON`, else `python3`), which must succeed; its stdout. The panic
/// names the modules it `needs` when it fails.
pub fn interop_script(script: &str, args: &[&str], needs: &str) -> String {
    let python = std::env::var("OURIOS_INTEROP_PYTHON").unwrap_or_else(|_| "python3".into());
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop")
        .join(script);
    let out = Command::new(python)
        .arg(path)
        .args(args)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "{script} {args:?} failed (it needs {needs}: bash tests/run.sh installs them into .tools/venv):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

//! The CLI's own binary run through the fixtures' command-line helpers
//! (`ourios_compaction::testing`, the one home of test fixtures).

use std::path::Path;
use std::process::{Command, Output};

pub use ourios_compaction::testing::{
    compact_json, interop_script, partition_args, partition_dir, report_with_status,
    stdout_json as json,
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

//! Running the `ourios-compact` binary as a child process, as outside tools do: the one home
//! of the command line's test helpers, for the CLI's own tests (the binary cargo built for
//! them) and the S3 suite (the release binary).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The CLI at `bin` with `args`, without the environment that would change its defaults (the
/// store, the layout, the function's memory, the prices).
pub fn cli_command(bin: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(bin);
    command
        .args(args)
        .env_remove("OURIOS_STORE")
        .env_remove("OURIOS_LAYOUT")
        .env_remove("OURIOS_INGEST_PREFIX")
        .env_remove("OURIOS_INPUT_NAMES")
        .env_remove("AWS_LAMBDA_FUNCTION_MEMORY_SIZE");
    for name in crate::cost::PRICE_VARIABLES {
        command.env_remove(name);
    }
    command
}

/// Runs [`cli_command`] with the variables `env` set (or overridden).
pub fn run_cli(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = cli_command(bin, args);
    command.envs(env.iter().copied());
    command.output().expect("the CLI starts")
}

/// The one JSON object on stdout (stderr in the panic message when it is not).
pub fn stdout_json(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is one JSON object ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The JSON report on stdout, after checking its status is `status` (the report and stderr in
/// the panic message when it is not).
pub fn report_with_status(output: &Output, status: &str) -> Value {
    let report = stdout_json(output);
    assert_eq!(
        report["status"],
        status,
        "{report:#}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

/// The arguments of `command` (`generate`, `compact`, ...) for `tenant`'s partition of the
/// test hour (2026-11-29T10) in `store`; callers add their own flags.
pub fn partition_args<'a>(command: &'a str, store: &'a str, tenant: &'a str) -> Vec<&'a str> {
    vec![
        command,
        "--store",
        store,
        "--tenant",
        tenant,
        "--hour",
        "2026-11-29T10",
    ]
}

/// The arguments of `compact` of the partition (`tenant`, `hour`) in `store` at a memory
/// `budget`, reporting in JSON, as a user types them; callers add their own flags.
pub fn compact_json<'a>(
    store: &'a str,
    tenant: &'a str,
    hour: &'a str,
    budget: &'a str,
) -> Vec<&'a str> {
    vec![
        "compact",
        "--store",
        store,
        "--tenant",
        tenant,
        "--hour",
        hour,
        "--memory-budget",
        budget,
        "--json",
    ]
}

/// The CLI's `query` arguments over the whole test hour of `tenant` on `url`.
pub fn query_hour_args<'a>(url: &'a str, tenant: &'a str) -> Vec<&'a str> {
    let (from, to) = ("2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z");
    vec![
        "query", "--store", url, "--tenant", tenant, "--from", from, "--to", to,
    ]
}

/// The directory of `tenant`'s partition for the test hour in the local store `store`.
pub fn partition_dir(store: &Path, tenant: &str) -> PathBuf {
    store.join(format!(
        "data/tenant={tenant}/year=2026/month=11/day=29/hour=10"
    ))
}

//! `ourios-compact`: the compaction engine from the command line, on any store.

mod args;
mod backfill;
mod commands;
mod demo;
mod latency;
mod ranges;
mod table;

use std::process::ExitCode;

use clap::Parser;
use ourios_compaction::logging::{LogStyle, init_tracing};
use ourios_compaction::settings::process_env;

fn main() -> ExitCode {
    ourios_compaction::sort::resources::tune_allocator();
    let cli = args::Cli::parse();
    init_tracing(LogStyle::Cli { json: cli.log_json }, &process_env);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

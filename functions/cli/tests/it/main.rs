//! The command line's integration tests: the `ourios-compact` binary run as a child process,
//! as outside tools run it, one module per concern, compiled as one test binary.
//!
//! Run one module with its path as the filter: `cargo test -p ourios-compact --test it cli::`.
//! The stress shapes (`stress_*`) run release-sized partitions under peak-RSS bounds: `cargo
//! test --profile quick -p ourios-compact --test it stress_` (as the full run does; `--release`
//! runs them faster).

#[path = "common/cgroup.rs"]
mod cgroup;
mod common;

mod backfill;
mod bloat;
mod cli;
mod demo;
mod hostile;
mod layouts;
mod wide;
mod writer_lakes;
mod writers;

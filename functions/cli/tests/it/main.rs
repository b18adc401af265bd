//! The command line's integration tests: the `ourios-compact` binary run as a child process,
//! as outside tools run it, one module per concern, compiled as one test binary.
//!
//! Run one module with its path as the filter: `cargo test -p ourios-compact --test it cli::`.
//! The stress shapes (`stress_*`) need the release build: `cargo test --release -p
//! ourios-compact --test it stress_`.

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
mod writers;

//! The library's integration tests, one module per concern, compiled as one test binary (one
//! link of the Arrow, Parquet and object-store generics instead of one per file).
//!
//! Run one module with its path as the filter: `cargo test -p ourios-compaction --test it fan_out::`.

mod arrivals;
mod bad_inputs;
mod blocks;
mod budget_release;
mod commit_holes;
mod deployment_week;
mod determinism;
mod fan_out;
mod fan_out_tasks;
mod layers;
mod memory_bounds;
mod output_file;
mod output_holds;
mod protocol_simulation;
mod query;
mod read_plan;
mod scratch_fit;
mod simulation;
mod sort_keys;
mod sort_properties;
mod string_codes;
mod symlink_manifests;
mod writer_side_files;

//! Benchmark support: the unsorted rewrite the benchmark compares against, and synthetic
//! realistic ingest files (feature `generate`).

pub mod baseline;
#[cfg(feature = "generate")]
pub mod generate;

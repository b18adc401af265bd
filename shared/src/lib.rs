//! Sorted compaction of Parquet log partitions (skeleton; see the crate doc once complete).

pub mod config;
pub mod error;
pub mod partition;
pub mod store;

pub use error::{Error, ErrorKind, Result};

//! Sorted runs: the scratch directory that owns them, and their on-disk format.

mod formation;
mod run_file;
mod scratch;

pub use formation::{FormedRuns, RunFormation};
pub use run_file::{RunReader, RunWriter, SortedRun, SpillCompression};
pub use scratch::ScratchDir;

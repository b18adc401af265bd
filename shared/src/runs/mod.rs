//! Sorted runs: the scratch directory that owns them, their on-disk format, and the codes
//! that carry repetitive strings through them.

mod formation;
mod run_file;
mod scratch;
mod string_codes;

pub use formation::{FormedRuns, RunFormation};
pub use run_file::{RUN_READ_BUFFER_BYTES, RunReader, RunWriter, SortedRun, SpillCompression};
pub use scratch::ScratchDir;
pub use string_codes::{StringCoder, StringDecoder};

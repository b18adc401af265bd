//! Sorted runs: how they are formed, their on-disk format (in the job's
//! [`ScratchDir`](crate::scratch::ScratchDir)), and the codes that carry repetitive strings
//! through them.

mod formation;
mod run_file;
mod string_codes;

pub use formation::{FormedRuns, RunFormation};
pub use run_file::{
    MAX_RUN_BATCH_ROWS, RUN_READ_BUFFER_BYTES, RunReader, RunWriter, SortedRun, SpillCompression,
    run_batch_rows,
};
pub use string_codes::{StringCoder, StringDecoder};

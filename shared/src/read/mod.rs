//! Reading compacted partitions: footer summaries, row-group pruning, the byte ranges a read
//! fetches, the window query and the full scan.

pub mod inspect;
pub mod planned_reader;
pub mod prune;
pub mod query;
pub mod read_plan;
pub mod scan;

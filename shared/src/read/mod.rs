//! Reading compacted partitions: footer summaries, row-group pruning, the byte ranges a read
//! fetches, the window query, the full scan, and split points of sorted files.

pub mod column_filter;
pub mod inspect;
pub mod planned_reader;
pub mod prune;
pub mod query;
pub mod read_plan;
pub mod scan;
pub mod split;

//! The output file: how sorted rows become row groups, blocks and a Parquet footer.
//!
//! The sort, the layer below, hands its rows in key order and in chunks to the [`writer`],
//! which rotates row groups at the adaptive [`threshold`] and lays them out in [`blocks`], with
//! dictionaries only for the columns whose values repeat ([`dictionary_choice`]).

pub mod blocks;
pub mod dictionary_choice;
pub mod threshold;
pub mod writer;

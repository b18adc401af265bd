//! The output file: how sorted rows become row groups, blocks and a Parquet footer.
//!
//! The sort, the layer below, hands its rows in key order and in chunks to the [`writer`],
//! which rotates row groups at the adaptive [`threshold`] and lays them out in [`blocks`].

pub mod blocks;
pub mod threshold;
pub mod writer;

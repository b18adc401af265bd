//! Sorted, bounded-memory compaction of Parquet log partitions on object storage.
//!
//! Ingest writes many small Parquet files into hour partitions
//! (`<ingest>/tenant=…/year=…/month=…/day=…/hour=…/`). This crate turns a partition into one
//! file sorted by (service, time), with small row groups and declared `sorting_columns`, so a
//! query for one service in a short window reads a handful of row groups instead of the hour.
//! The sort is an external merge sort under a decoded-row budget B: it never holds more than
//! B plus one batch of decoded rows, however large or compressible the inputs are.
//!
//! # Invariants
//!
//! Tests cite these numbers.
//!
//! 1. **Exactly once.** At every instant, crash points included, the live files of a
//!    partition hold every ingested row exactly once ([`manifest::live_set`] is the rule).
//! 2. **One conditional write per commit.** A commit creates the next manifest version with a
//!    create-only write; a lost race is detected, never overwritten ([`manifest::commit`]).
//! 3. **Grace before delete.** Inputs are deleted only after the commit that retires them and
//!    a grace period, measured on the store's clock ([`gc`]).
//! 4. **Convergence.** Any crash leaves a state from which a rerun converges; uncommitted
//!    outputs are swept by [`gc`], and the incomplete uploads of a killed attempt by the next
//!    attempt of its job ([`dispatch::worker`]).
//! 5. **Late files stay live.** Files that land during a compaction are not retired by it.
//! 6. **Idempotence.** Rerunning a job that committed changes nothing (`noop`): each attempt
//!    names its output `part-<hash of the input set>-<job id>`, and the manifest records the
//!    hash, so an attempt whose input set is committed is recognised.
//! 7. **Bad inputs are never lost.** A file that cannot be compacted is recorded with its
//!    reason, left byte-for-byte in place and out of the live set; the rest still compacts.
//! 8. **Bounded memory.** Decoded rows held at once stay within B plus one batch in run
//!    formation and within B (plus one row per run) and one output chunk in the merge,
//!    measured by a [`budget::MemoryGauge`]; the merge's run readers' buffers are taken out of
//!    B, and a batch a run has moved past stays charged until its last rows are gathered.
//! 9. **Determinism.** The same input files give a byte-identical output, whatever the listing
//!    order, budget, spill pattern or thread count.
//! 10. **Keys as themselves.** The key listed is the key read, retired and deleted
//!     ([`store::key_path`], never a re-encoding); a key the store cannot address is reported
//!     and skipped ([`store::Store::list_sorted`], [`raw_s3`] on S3), and never stops other
//!     partitions.
//! 11. **No resurrection.** A commit based on a version older than the last forgetting of
//!     retired files ends `conflict` (the manifest's `forgotten_in` watermark).
//!
//! # Glossary
//!
//! - **partition**: one tenant's hour ([`partition::PartitionId`]).
//! - **live set**: the files a reader must read for a partition right now.
//! - **manifest**: the per-partition record of compacted, retired and quarantined files.
//! - **budget (B)**: bytes of decoded rows the sort may hold.
//! - **run**: a sorted sequence of rows spilled to scratch ([`runs`]).
//! - **string codes**: repetitive strings carried as integers through the sort
//!   ([`runs::StringCoder`]).
//! - **row group threshold**: the output writer's rotation size ([`threshold`]).
//!
//! # Data flow
//!
//! ```text
//! listing + manifest ─► live set ─► stage (download) ─► check (footer, key columns, rows)
//!     ─► schema union ─► run formation (budget B, spill runs) ─► k-way merge (fan-in cap)
//!     ─► output writer (byte-sized chunks, rotation, sorting_columns, blocks) ─► multipart upload
//!     ─► commit (create-only manifest version) ─► garbage collection
//! ```
//!
//! # Modules
//!
//! | module | owns |
//! | --- | --- |
//! | [`compact`] | the driver: one partition, in named steps |
//! | [`partition`] | partition ids and the object-key layout |
//! | [`store`] | store URLs and object-store helpers |
//! | [`raw_s3`] | S3 calls by raw key: listings with unaddressable keys, a job's own incomplete uploads, conditional deletes |
//! | [`config`] | typed settings, sizes and durations |
//! | [`clock`] | the host's wall and monotonic clocks, substitutable in tests |
//! | [`input`] | staging and checking input files |
//! | [`page_check`] | an input's pages checked against what they declare before decoding |
//! | [`schema`] | the union of input schemas |
//! | [`type_union`] | the type rules of the union: unify two types, convert an array to the union |
//! | [`key`] | the clustering key and its order |
//! | [`budget`] | decoded-bytes accounting |
//! | [`runs`] | run formation, run files, the scratch directory, string codes |
//! | [`merge`] | the k-way merge |
//! | [`engine`] | phase 1 and phase 2 of the sort together |
//! | [`threshold`] | the adaptive row-group threshold |
//! | [`writer`] | output writer properties and the writer sink |
//! | [`blocks`] | the block layout: each column's chunks of a block's row groups contiguous |
//! | [`upload`] | streaming multipart upload |
//! | [`manifest`] | manifest versions, commit, the reader rule |
//! | [`gc`] | garbage collection |
//! | [`report`] | the job report |
//! | [`request_counts`] | a store wrapper counting a job's requests by S3 price class |
//! | [`cost`] | a job's cost in dollars: Lambda GB-seconds and S3 requests at published prices |
//! | [`baseline`] | the unsorted rewrite the benchmark compares against |
//! | `generate` | synthetic realistic ingest files (feature `generate`) |
//! | [`inspect`] | footer summaries |
//! | [`prune`] | row-group pruning from footer statistics |
//! | [`events`] | function payloads: envelopes, key decoding, accept/ignore/reject |
//! | [`plan`] | readiness and dispatch decisions (pure) |
//! | [`dispatch`] | job records, the planner's and the compactor's entry points, sweep, backfill |
//! | [`settings`] | the functions' settings from named variables |
//! | [`metrics`] | CloudWatch embedded-metric-format lines |
//! | `logging` | the tracing subscriber the binaries install (feature `logging`) |
//! | [`query`] | the window query with pruning statistics |
//! | [`scan`] | the full scan of some columns of a partition |
//! | [`counting`] | a store wrapper counting read requests |
//! | [`observed_store`] | the pass-through store wrapper that reports each read |
//! | [`read_plan`] | the byte ranges a scan fetches, from footer offsets (fetch blocks) |
//! | [`planned_reader`] | the Parquet reader of one object, serving reads from a read plan |
//! | [`alignment`] | row-group boundaries at large services' edges |
//!
//! The sort runs on a blocking section of a multi-threaded Tokio runtime
//! (`block_in_place`); callers use `#[tokio::main]` or `Builder::new_multi_thread`.

pub mod alignment;
pub mod baseline;
pub mod blocks;
pub mod budget;
pub mod clock;
pub mod compact;
pub mod config;
pub mod cost;
pub mod counting;
pub mod dispatch;
pub mod engine;
pub mod error;
pub mod events;
pub mod gather;
pub mod gc;
#[cfg(feature = "generate")]
pub mod generate;
pub mod input;
pub mod inspect;
pub mod key;
#[cfg(feature = "logging")]
pub mod logging;
pub mod manifest;
pub mod memory;
pub mod merge;
pub mod metrics;
pub mod observed_store;
pub mod page_check;
pub mod partition;
pub mod plan;
pub mod planned_reader;
pub mod prune;
pub mod query;
pub mod raw_s3;
pub mod read_plan;
pub mod report;
pub mod request_counts;
pub mod runs;
pub mod scan;
pub mod schema;
pub mod settings;
pub mod sink;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod threshold;
pub mod type_union;
pub mod upload;
pub mod writer;

pub use error::{Error, ErrorKind, Result};

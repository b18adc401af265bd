//! Sorted, bounded-memory compaction of Parquet log partitions on object storage.
//!
//! Ingest writes many small Parquet files into hour partitions
//! (`<ingest>/tenant=…/year=…/month=…/day=…/hour=…/`). This crate turns a partition into one
//! file sorted by (service, time) (or any configured key), with small row groups and declared
//! `sorting_columns`, so a query for one service in a short window reads a handful of row groups
//! instead of the hour.
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
//!    a grace period, measured on the store's clock ([`manifest::gc`]).
//! 4. **Convergence.** Any crash leaves a state from which a rerun converges; uncommitted
//!    outputs are swept by [`manifest::gc`] once no job at work holds them (a hold written
//!    before the upload starts, renewed while it goes: [`store::upload::Hold`]), so no output
//!    is swept while its commit may still land; the incomplete uploads of a killed attempt
//!    too, once no live attempt can own them (older than the grace), or sooner by the next
//!    attempt of its job ([`serverless::dispatch::job_lifecycle`]).
//! 5. **Late files stay live.** Files that land during a compaction are not retired by it.
//! 6. **Idempotence.** Rerunning a job that committed changes nothing (`noop`): each attempt
//!    names its output `part-<hash of the input set>-<job id>`, and the manifest records the
//!    hash, so an attempt whose input set is committed is recognised.
//! 7. **Bad inputs are never lost.** A file that cannot be compacted is recorded with its
//!    reason, left byte-for-byte in place and out of the live set; the rest still compacts.
//! 8. **Bounded memory.** Decoded rows held at once stay within B plus one batch in run
//!    formation and within B (plus one row per run) and one output chunk in the merge,
//!    measured by a [`gauge::MemoryGauge`]; the merge's run readers' buffers are taken out of
//!    B, and a batch a run has moved past stays charged until its last rows are gathered.
//! 9. **Determinism.** The same input files give a byte-identical output, whatever the listing
//!    order, budget, spill pattern or thread count.
//! 10. **Keys as themselves.** The key listed is the key read, retired and deleted
//!     ([`object_key::ObjectKey`], never a re-encoding); a key the store cannot address is reported
//!     (in the job report when it looks like data) and skipped ([`store::Store::list`],
//!     [`store::raw_s3`] on S3), and never stops other partitions.
//! 11. **No resurrection.** A commit based on a version older than the last forgetting of
//!     retired files ends `conflict` (the manifest's `forgotten_in` watermark).
//!
//! # Glossary
//!
//! - **partition**: one tenant's hour ([`partition::PartitionId`]).
//! - **live set**: the files a reader must read for a partition right now.
//! - **manifest**: the per-partition record of compacted, retired and quarantined files.
//! - **budget (B)**: bytes of decoded rows the sort may hold; [`budget::Budget::plan`] shares it
//!   out.
//! - **run**: a sorted sequence of rows spilled to scratch ([`sort::runs`]).
//! - **string codes**: repetitive strings carried as integers through the sort
//!   ([`sort::runs::StringCoder`]).
//! - **row group threshold**: the output writer's rotation size ([`output::threshold`]).
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
//! Fanned out ([`compact::fan_out`]), groups of inputs are sorted into run objects, the runs'
//! statistics split the key space into ranges, and each range is merged into an output of its
//! own; one commit makes them live together.
//!
//! # Modules
//!
//! The modules form layers, listed here from the ground floor up. A module names modules of
//! its own layer and of lower ones, never of a higher one (`tests/it/layers.rs` checks every
//! `crate::` path), so each layer can be read knowing only the layers below it.
//!
//! | layer | module | owns |
//! | --- | --- | --- |
//! | ground floor | [`error`] | the error type, its kinds and retry classification |
//! | | [`clock`] | the host's wall and monotonic clocks, substitutable in tests |
//! | | [`budget`] | the decoded-row budget B and its plan: every share of B a step may spend, in one table |
//! | | [`options`] | what one compaction is given ([`options::CompactOptions`]), the defaults, the key columns and the sort-key label files declare |
//! | | [`settings`] | what an operator sets: sizes and durations parsed once, the compaction's settings read from variables through one lookup |
//! | | [`cost`] | a job's cost in dollars: Lambda GB-seconds and S3 requests at published prices |
//! | | [`object_key`] | an object's key in the store: built from a listed location, written as the same string, parsed back in one place |
//! | | [`partition`] | partition ids and the object-key layout: every key built and parsed |
//! | | [`key_template`] | the ingest key template (`--layout`): a writer's partitions in keys, formatted and read back |
//! | | [`report`] | the job report |
//! | | [`rng`] | the seeded random numbers of generated data and tests (SplitMix64) |
//! | | [`gauge`] | the memory gauge: decoded bytes held against the budget, with their peak |
//! | | [`scratch`] | a job's local scratch directory |
//! | | [`two_threads`] | independent items worked on two threads, their results in order (the input checks, the output's columns) |
//! | | `logging` | the tracing subscriber the binaries install (feature `logging`) |
//! | store | [`store`] | store URLs and object-store helpers |
//! | | [`store::aws_api`] | signed requests to AWS APIs (S3 by raw key, Step Functions) over object_store's HTTP client and SigV4 signer, retried as the SDKs retry |
//! | | [`store::aws_env`] | the S3 endpoint, region and object_store builder from the AWS environment, empty variables unset |
//! | | [`store::tls`] | the TLS of every HTTPS client: rustls on `ring`, installed once |
//! | | [`store::credentials`] | the credentials of every AWS client: the environment's keys, else the standard AWS chain (feature `credential-chain`) |
//! | | [`store::raw_s3`] | S3 calls by raw key: listings with unaddressable keys, a job's own incomplete uploads, conditional deletes |
//! | | [`store::upload`] | streaming multipart upload |
//! | | [`store::hooked`] | the one store wrapper: a hook per operation, passing through by default; every wrapper below and in `testing` is a set of hooks |
//! | | [`store::counting`] | a store wrapper counting read requests |
//! | | [`store::request_counts`] | a store wrapper counting a job's requests by S3 price class |
//! | input | [`input`] | staging and checking input files, reading them in sized batches |
//! | | [`input::check_pool`] | inputs checked on threads of their own as they are downloaded |
//! | | [`input::column_path`] | columns named by the settings, at the top level or inside structs |
//! | | [`input::page_check`] | an input's pages checked against what they declare before decoding |
//! | | [`input::schema`] | the union of input schemas |
//! | | [`input::type_union`] | the type rules of the union: unify two types, convert an array to the union |
//! | sort | [`sort`] | phase 1 and phase 2 of the sort together |
//! | | [`sort::key`] | the clustering key and its order |
//! | | [`sort::runs`] | sorted runs: `sort::runs::formation` (phase 1), `sort::runs::run_file` (their files), `sort::runs::string_codes` |
//! | | [`sort::merge`] | the k-way merge (`sort::merge::cursor`: one open run) |
//! | | [`sort::gather`] | gathering rows from batches into a new batch |
//! | | [`sort::sink`] | where sorted rows go: the chunk sink, the sink thread |
//! | | [`sort::alignment`] | row-group boundaries at large services' edges |
//! | | [`sort::resources`] | process resources: the allocator, peak RSS, CPU time |
//! | output | [`output`] | the output file |
//! | | [`output::writer`] | output writer properties and the writer sink |
//! | | [`output::threshold`] | the adaptive row-group threshold |
//! | | [`output::dictionary_choice`] | dictionary encoding only for columns whose values repeat |
//! | | [`output::blocks`] | the block layout: each column's chunks of a block's row groups contiguous (`output::blocks::copying`, `output::blocks::encode`, `output::blocks::footer`, `output::blocks::page_store`, `output::blocks::staging`) |
//! | manifest | [`manifest`] | manifest versions (`manifest::commit`), the reader rule (`manifest::live`), releasing quarantined files (`manifest::release`) |
//! | | [`manifest::gc`] | garbage collection |
//! | | [`manifest::symlink`] | symlink manifests: each partition's live URLs for Athena and Trino |
//! | | [`late`] | the late-file policy (when late files are merged into a compacted hour) and the record of the late files checked while they wait |
//! | read | [`read`] | reading compacted partitions |
//! | | [`read::query`] | the window query with pruning statistics |
//! | | [`read::scan`] | the full scan of some columns of a partition |
//! | | [`read::prune`] | row-group pruning from footer statistics |
//! | | [`read::column_filter`] | `query --where column=value`, pruned by statistics and bloom filters |
//! | | [`read::split`] | split points of sorted files into ranges of about equal bytes |
//! | | [`read::read_plan`] | the byte ranges a scan fetches, from footer offsets (fetch blocks) |
//! | | [`read::planned_reader`] | the Parquet reader of one object, serving reads from a read plan |
//! | | [`read::inspect`] | footer summaries |
//! | compact | [`compact`] | the driver: one partition, in named steps, each step a module below |
//! | | `compact::job` | what a job's steps share, and running them under the job's report (counted requests, garbage collection, price) |
//! | | `compact::state` | step 1: the latest manifest and a listing give the live set, the inputs the job wants |
//! | | `compact::staging` | steps 2 and 3: inputs staged (downloaded into scratch) and checked, the bad ones quarantined |
//! | | `compact::sizing` | step 1's plan of scratch space: inputs' footers read when the job could pass a task's space, the one rule of what fits, inputs too large for any task left live |
//! | | `compact::arriving` | steps 2 and 3 beside step 4: a group that downloads its inputs sorted from their footers, each input read once it has arrived and passed its check |
//! | | `compact::writing` | step 4: a group's checked inputs sorted and written into one object, and an output's name |
//! | | `compact::producing` | steps 2 to 4: a group sorted into an output or a run, the job in one task, late files without rows settled |
//! | | `compact::committing` | step 5: the commit of what was produced, the outputs no commit made live deleted |
//! | | [`compact::fan_out`] | one partition fanned out into key ranges: the shape, the groups, the tasks run here, the task entry point of the state machine, the commit of a fanned-out job |
//! | | [`compact::fan_out::tasks`] | the tasks (plan, run, split, merge, gather), each a function of the job's records in the store |
//! | | `compact::fan_out::into_ranges` | late files into a fanned-out hour merged into only the ranges their keys fall in |
//! | | `compact::fan_out::range_read` | one range of a run: its row groups by range requests, its rows counted |
//! | | `compact::fan_out::admission` | the plan's union of columns: every input's footer (those the sizing read reused), the files it refuses quarantined as a one-output job would |
//! | serverless | [`serverless`] | the functions' library side |
//! | | [`serverless::events`] | function payloads: envelopes, key decoding, accept/ignore/reject |
//! | | [`serverless::function_url`] | a function-URL request (MinIO's webhook) answered as an HTTP response, the same for both handlers |
//! | | [`serverless::readiness`] | readiness and dispatch decisions (pure) |
//! | | [`serverless::function_settings`] | the functions' settings from named variables |
//! | | [`serverless::metrics`] | CloudWatch embedded-metric-format lines |
//! | | [`serverless::state_machine`] | starting the fan-out state machine for a job too large for one invocation |
//! | | [`serverless::dispatch`] | job records (`serverless::dispatch::job`), the planner's entry point (`serverless::dispatch::planner`), the compactor's (`serverless::dispatch::compactor`) and its side of a job (`serverless::dispatch::job_lifecycle`: compact, then end the job record), the claim that lets one compactor start a partition's fan-out (`serverless::dispatch::hand_off`), failures that repeat (`serverless::dispatch::failures`: counted, then a quarantine or a parked partition), sweep, backfill |
//! | bench | [`bench`](mod@bench) | benchmark support |
//! | | [`bench::baseline`] | the unsorted rewrite the benchmark and the CLI's `demo` compare against (so not feature-gated) |
//! | | `bench::generate` | synthetic realistic ingest files (feature `generate`): `bench::generate::batch`, `bench::generate::corpus`, `bench::generate::service` |
//! | testing | `testing` | test support (feature `testing`): fixtures (`testing::log_fixture`, `testing::event_files`, `testing::tagged_files`, the command line run as a child process by `testing::cli_process`, the interoperability scripts by `testing::interop`), store hooks (`testing::faulty_store`, `testing::recording_store`, `testing::store_quirks`), the simulations' store with a virtual clock (`testing::virtual_store`) and their seeds, run two at a time (`testing::seeds`) |
//!
//! Where the layers differ from the obvious grouping, the dependencies decide:
//!
//! - The sort's [`sort::key`] is built from the unified schema (input) and only the sort
//!   compares rows, so it is the sort's; the key as files declare it
//!   ([`options::SORT_KEY_METADATA`], [`options::sort_key_label`]) is on the ground floor
//!   beside [`options::KeyColumns`], where the input checks read it and the writer writes it.
//! - [`gauge`] is on the ground floor: the input's batch sizing measures decoded bytes the
//!   way the sort's budget charges them. [`scratch`] is too: run files, staged inputs and the
//!   writer's page file all live in the job's scratch directory.
//! - [`sort::alignment`] and [`sort::sink`] are the sort's: the sort counts services while
//!   it forms runs and wraps its sink in the aligning sink, and both sinks (a run file, the
//!   output writer) implement [`sort::sink::ChunkSink`] where they are defined. So `output`
//!   sits above `sort`: the writer is one of the sort's sinks.
//! - `manifest` needs only the store, and `read` needs the manifest's live set and the
//!   input's type rules; neither is needed by the layers below them.
//! - `serverless` is above [`compact`] because the compactor's entry point runs it; `bench`
//!   and `testing` are above everything and nothing below them names them (test code may
//!   name `testing`).
//!
//! The sort runs on a blocking section of a multi-threaded Tokio runtime
//! (`block_in_place`); callers use `#[tokio::main]` or `Builder::new_multi_thread`.

pub mod bench;
pub mod budget;
pub mod clock;
pub mod compact;
pub mod cost;
pub mod error;
pub mod gauge;
pub mod input;
pub mod key_template;
pub mod late;
#[cfg(feature = "logging")]
pub mod logging;
pub mod manifest;
pub mod object_key;
pub mod options;
pub mod output;
pub mod partition;
pub mod read;
pub mod report;
pub mod rng;
pub mod scratch;
pub mod serverless;
pub mod settings;
pub mod sort;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod two_threads;

pub use error::{Error, ErrorKind, Result};

//! Command-line arguments (the CLI contract: flags and JSON output are relied on by tools).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ourios_compaction::config::DEFAULT_ROW_GROUPS_PER_BLOCK;
use ourios_compaction::cost::ONE_VCPU_FUNCTION_MB;

/// Sorted, bounded-memory compaction of Parquet log partitions.
#[derive(Debug, Parser)]
#[command(name = "ourios-compact", version, about)]
pub struct Cli {
    /// Write logs to stderr as JSON lines (set the level with OURIOS_LOG, e.g. OURIOS_LOG=info).
    #[arg(long, global = true)]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The store and layout every command works on.
#[derive(Debug, Args, Clone)]
pub struct StoreArgs {
    /// Store root: s3://bucket/prefix, file:///abs/dir, a directory path, or memory://.
    #[arg(long, env = "OURIOS_STORE")]
    pub store: String,
    /// Prefix of ingest files under the store root.
    #[arg(long, env = "OURIOS_INGEST_PREFIX", default_value = "data")]
    pub ingest_prefix: String,
}

/// How the compacted file's row groups are cut and laid out.
#[derive(Debug, Args, Clone)]
pub struct LayoutArgs {
    /// Row groups per block: within a block, each column's chunks of the block's row groups
    /// are contiguous, so a remote reader fetches a column of the whole block with one range
    /// request (1: the plain row-major layout).
    #[arg(long, default_value_t = DEFAULT_ROW_GROUPS_PER_BLOCK as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub row_groups_per_block: u64,
    /// Most rows per row group; a row group closes at this or at the byte threshold, whichever
    /// comes first (default: no row cap).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rows_per_row_group: Option<u64>,
}

/// What a job's cost is reckoned for (prices: the `OURIOS_PRICE_*` variables).
#[derive(Debug, Args, Clone)]
pub struct CostArgs {
    /// Memory of the Lambda function the job's cost is reckoned for, in MB (1769 has one
    /// full vCPU).
    #[arg(long, default_value_t = ONE_VCPU_FUNCTION_MB, value_parser = clap::value_parser!(u64).range(1..))]
    pub function_memory: u64,
}

/// One partition.
#[derive(Debug, Args, Clone)]
pub struct PartitionArgs {
    /// Tenant name.
    #[arg(long)]
    pub tenant: String,
    /// Hour, UTC, as YYYY-MM-DDTHH.
    #[arg(long)]
    pub hour: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compact one partition into one sorted file.
    Compact {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        partition: PartitionArgs,
        /// Decoded-row memory budget, e.g. 64MiB (default: a quarter of
        /// AWS_LAMBDA_FUNCTION_MEMORY_SIZE when set, else 64MiB).
        #[arg(long, env = "OURIOS_MEMORY_BUDGET")]
        memory_budget: Option<String>,
        /// Scratch directory for spilled runs and downloaded inputs.
        #[arg(long, env = "OURIOS_SCRATCH")]
        scratch: Option<PathBuf>,
        /// Row-group threshold, e.g. 4MiB (default: adaptive, or OURIOS_COMPACTED_RG_BYTES).
        #[arg(long)]
        rg_bytes: Option<String>,
        #[command(flatten)]
        layout: LayoutArgs,
        /// Grace period before retired inputs are deleted, e.g. 15m.
        #[arg(long, env = "OURIOS_GC_GRACE", default_value = "15m")]
        gc_grace: String,
        #[command(flatten)]
        cost: CostArgs,
        /// Print one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// List the live files of a partition (what a reader must read now).
    Files {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        partition: PartitionArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write realistic synthetic ingest files into a partition.
    Generate {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        partition: PartitionArgs,
        /// Number of files.
        #[arg(long, default_value_t = 10)]
        files: usize,
        /// Rows per file.
        #[arg(long, default_value_t = 10_000)]
        rows: usize,
        /// Number of services.
        #[arg(long, default_value_t = 12)]
        services: usize,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Add 40 attribute columns of about 250 bytes each.
        #[arg(long)]
        wide: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a Parquet file's footer: row groups, key ranges, sort order, bloom filters.
    Inspect {
        /// A local file path, file:///abs/file.parquet or s3://bucket/key.parquet.
        file: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete retired inputs and orphaned outputs past the grace period, and prune old
    /// manifest versions. With --tenant and --hour, one partition (JSON: that partition's
    /// report); otherwise every partition of the tenant(s) and hour(s), found by listing the
    /// manifest and compacted prefixes (JSON: {"partitions": [...], "deleted", "dry_run"}).
    Gc {
        #[command(flatten)]
        store: StoreArgs,
        /// Tenant name (default: every tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// Hour, UTC, as YYYY-MM-DDTHH (default: every hour).
        #[arg(long)]
        hour: Option<String>,
        /// Grace period, e.g. 15m or 0s.
        #[arg(long, default_value = "15m")]
        grace: String,
        /// Only print what would be deleted.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Schedule (write job records for) or run locally the compaction of every partition in an
    /// hour range that has uncompacted files. JSON: {"partitions": [{"tenant", "hour",
    /// "decision", "reason"}], "scheduled", "considered", "dry_run", "run_local"}.
    Backfill {
        #[command(flatten)]
        store: StoreArgs,
        /// Tenant name; repeat for several (default: every tenant under the ingest prefix).
        #[arg(long = "tenant")]
        tenants: Vec<String>,
        /// First hour, UTC, as YYYY-MM-DDTHH (inclusive).
        #[arg(long)]
        from: String,
        /// Last hour, UTC, as YYYY-MM-DDTHH (inclusive).
        #[arg(long)]
        to: String,
        /// Only print what would be scheduled or compacted.
        #[arg(long)]
        dry_run: bool,
        /// Compact here, one partition after another, instead of writing job records.
        #[arg(long)]
        run_local: bool,
        /// Least time between two job records written (rate limit), e.g. 100ms.
        #[arg(long, env = "OURIOS_BACKFILL_INTERVAL", default_value = "100ms")]
        interval: String,
        /// Decoded-row memory budget for --run-local, e.g. 64MiB.
        #[arg(long, env = "OURIOS_MEMORY_BUDGET")]
        memory_budget: Option<String>,
        /// Scratch directory for --run-local.
        #[arg(long, env = "OURIOS_SCRATCH")]
        scratch: Option<PathBuf>,
        #[command(flatten)]
        layout: LayoutArgs,
        #[command(flatten)]
        cost: CostArgs,
        /// Print one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Read one tenant's rows for a service and a time window, pruning with footer statistics.
    Query {
        #[command(flatten)]
        store: StoreArgs,
        /// Tenant name (required: a query never crosses tenants).
        #[arg(long)]
        tenant: String,
        /// Service name (default: every service).
        #[arg(long)]
        service: Option<String>,
        /// Window start, RFC 3339 (inclusive), e.g. 2026-11-29T10:20:00Z.
        #[arg(long)]
        from: String,
        /// Window end, RFC 3339 (exclusive).
        #[arg(long)]
        to: String,
        /// Most rows returned, in (service, time) order; 0 only counts.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print {"rows": [...], "stats": {...}}.
        #[arg(long)]
        json: bool,
    },
    /// The main job end to end on a local directory: generate, compact, compare.
    Demo {
        /// Directory of the demo store (created; reused runs start fresh).
        #[arg(long, default_value = "demo-store")]
        store: PathBuf,
    },
    /// Measure sorted compaction against a plain rewrite of the same partition, and what
    /// each costs per GB next to S3 Tables' managed compaction.
    Bench {
        #[command(flatten)]
        bench: BenchArgs,
        #[command(flatten)]
        cost: CostArgs,
    },
    /// Count the range requests of a one-service window query and of a two-column scan on one
    /// partition compacted with row groups in blocks of each size asked for.
    BenchRanges {
        #[command(flatten)]
        bench: BenchArgs,
        /// Row groups per block of each layout, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
        blocks: Vec<usize>,
        /// Also measure each layout with at most this many rows per row group.
        #[arg(long)]
        max_rows: Option<u64>,
        /// Row-group threshold, e.g. 4MiB (default: adaptive).
        #[arg(long)]
        rg_bytes: Option<String>,
        /// Round trip added to every GET of the queries, e.g. 25ms (a remote store's latency).
        #[arg(long, default_value = "0ms")]
        get_latency: String,
        /// Transfer rate of each GET of the queries, per second, e.g. 100MiB (default: unlimited).
        #[arg(long)]
        get_bandwidth: Option<String>,
    },
}

/// The generated partition a benchmark measures, and how (`bench`, `bench-ranges`).
#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// Directory for the benchmark store.
    #[arg(long, default_value = "bench-store")]
    pub store: PathBuf,
    /// Files in the partition.
    #[arg(long, default_value_t = 60)]
    pub files: usize,
    /// Rows per file.
    #[arg(long, default_value_t = 50_000)]
    pub rows: usize,
    /// Decoded-row memory budget of the compactions.
    #[arg(long, default_value = "64MiB")]
    pub memory_budget: String,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

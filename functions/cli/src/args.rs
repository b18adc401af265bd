//! Command-line arguments (the CLI contract: flags and JSON output are relied on by tools).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ourios_compaction::budget::Budget;
use ourios_compaction::late::{LatePolicy, parse_share};
use ourios_compaction::options::{FanOut, KeyColumns};
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::serverless::function_settings::readiness_from_lookup;
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_compaction::settings::{
    CompactSettings, parse_count, parse_duration, parse_size, positive,
};

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
    /// Prefix of ingest files under the store root, in this project's layout (default data;
    /// a shorthand for --layout 'PREFIX/tenant={tenant}/year=%Y/month=%m/day=%d/hour=%H').
    #[arg(long, env = "OURIOS_INGEST_PREFIX")]
    pub ingest_prefix: Option<String>,
    /// The ingest key template under the store root: %Y %m %d %H (UTC), %M for minute
    /// directories (last), {tenant} before the hour, e.g. 'logs/dt=%Y%m%d/svc={tenant}/hour=%H'
    /// (default: data/tenant={tenant}/year=%Y/month=%m/day=%d/hour=%H).
    #[arg(long, env = "OURIOS_LAYOUT", conflicts_with = "ingest_prefix")]
    pub layout: Option<String>,
    /// Which object names in a partition are inputs: a pattern with * and ? (default
    /// *.parquet; * for writers that add no extension). Names starting with _ or . never are.
    #[arg(long, env = "OURIOS_INPUT_NAMES")]
    pub input_names: Option<String>,
    /// The column that must lie inside the hour: Int64 or UInt64 nanoseconds (or the unit of
    /// --time-unit), or a timestamp of any unit, INT96 included (default time_unix_nano).
    #[arg(long, env = "OURIOS_TIME_COLUMN")]
    pub time_column: Option<String>,
    /// What an integer time column counts since the epoch: s, ms, us or ns (default ns;
    /// timestamps carry their own unit).
    #[arg(long, env = "OURIOS_TIME_UNIT")]
    pub time_unit: Option<String>,
    /// The columns to sort by, comma-separated, each ascending with nulls first: any number,
    /// top-level names or struct paths (default service.name,time_unix_nano; without
    /// --time-column, a key that does not name time_unix_nano ends with the time column).
    #[arg(long, env = "OURIOS_SORT_KEY")]
    pub sort_key: Option<String>,
    /// Columns whose row groups get a bloom filter, comma-separated; a name is a top-level
    /// column, else a path into structs (default: the sort key's string column).
    #[arg(long, env = "OURIOS_BLOOM_COLUMNS")]
    pub bloom_columns: Option<String>,
}

impl StoreArgs {
    /// The key columns these flags set.
    pub fn key_columns(&self) -> ourios_compaction::Result<KeyColumns> {
        KeyColumns::from_settings(
            self.time_column.as_deref(),
            self.sort_key.as_deref(),
            self.bloom_columns.as_deref(),
            self.time_unit.as_deref(),
        )
    }

    /// The key layout these flags set.
    pub fn key_layout(&self) -> ourios_compaction::Result<KeyLayout> {
        KeyLayout::from_settings(
            self.layout.as_deref(),
            self.ingest_prefix.as_deref(),
            self.input_names.as_deref(),
        )
    }
}

/// A size flag: bytes or a number with KiB, MiB or GiB, e.g. `64MiB`.
fn size(raw: &str) -> Result<u64, String> {
    parse_size(raw).map_err(|e| e.to_string())
}

/// The budget flag: a size, e.g. `64MiB` (the one parser every command's budget goes through).
fn budget(raw: &str) -> Result<Budget, String> {
    size(raw).map(Budget::new)
}

/// The decoded-row memory budget of a command that compacts (`compact`, `backfill`, `bench`,
/// `bench-ranges`).
#[derive(Debug, Args, Clone, Copy)]
pub struct BudgetArgs {
    /// Decoded-row memory budget, e.g. 64MiB (default: OURIOS_MEMORY_BUDGET, else a quarter of
    /// AWS_LAMBDA_FUNCTION_MEMORY_SIZE when set, else 64MiB; `bench` and `bench-ranges`:
    /// 64MiB).
    #[arg(long = "memory-budget", value_parser = budget)]
    pub memory_budget: Option<Budget>,
}

impl BudgetArgs {
    /// The budget given, else `default`.
    pub fn or(&self, default: Budget) -> Budget {
        self.memory_budget.unwrap_or(default)
    }
}

/// A positive size flag.
fn positive_size(raw: &str) -> Result<u64, String> {
    parse_size(raw)
        .and_then(positive)
        .map_err(|e| e.to_string())
}

/// A duration flag, e.g. `15m`, `0s`, `100ms`.
fn duration(raw: &str) -> Result<Duration, String> {
    parse_duration(raw).map_err(|e| e.to_string())
}

/// A count flag of at least 1.
fn positive_count(raw: &str) -> Result<usize, String> {
    let n = parse_count(raw)
        .and_then(positive)
        .map_err(|e| e.to_string())?;
    usize::try_from(n).map_err(|_| format!("{raw:?} is too large"))
}

/// A compaction's settings. Each flag overrides the variable named in its help; the
/// variables are read as the compactor function reads them
/// ([`CompactSettings::from_lookup`]), so both have the same defaults.
#[derive(Debug, Args, Clone)]
pub struct SettingsArgs {
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Scratch directory for spilled runs and downloaded inputs (default: OURIOS_SCRATCH, else
    /// TMPDIR, else /tmp).
    #[arg(long)]
    pub scratch: Option<PathBuf>,
    /// Row-group threshold, e.g. 4MiB (default: OURIOS_COMPACTED_RG_BYTES, else adaptive); a
    /// schema of more than 32 leaf columns gets at most 32 of its pages a row group.
    #[arg(long = "rg-bytes", value_parser = positive_size)]
    pub row_group_bytes: Option<u64>,
    #[command(flatten)]
    pub row_groups: RowGroupArgs,
    /// Grace period before retired inputs are deleted, e.g. 15m (default: OURIOS_GC_GRACE,
    /// else 15m).
    #[arg(long, value_parser = duration)]
    pub gc_grace: Option<Duration>,
    #[command(flatten)]
    pub cost: CostArgs,
    #[command(flatten)]
    pub fan_out: FanOutArgs,
}

/// Whether a job fans out into several outputs, and how many of its tasks run at once.
#[derive(Debug, Args, Clone)]
pub struct FanOutArgs {
    /// Fan out: sort groups of inputs into runs, split the key space into ranges of about
    /// equal bytes and merge each range into an output of its own. `auto` fans out only a job
    /// that would not fit one invocation (the scratch limit, the deadline); a number forces
    /// that many ranges; `off` writes one output (default: OURIOS_FAN_OUT, else off).
    #[arg(long, value_parser = fan_out)]
    pub fan_out: Option<FanOut>,
    /// Tasks of a fanned-out job run at once, each holding up to the memory budget; the
    /// outputs are the same bytes whatever the number (default: OURIOS_WORKERS, else 1).
    #[arg(long, value_parser = positive_count)]
    pub workers: Option<usize>,
}

impl FanOutArgs {
    /// Sets the flags given on `settings`.
    fn apply(&self, settings: &mut CompactSettings) {
        if let Some(fan_out) = self.fan_out {
            settings.fan_out = fan_out;
        }
        if let Some(workers) = self.workers {
            settings.workers = workers;
        }
    }
}

/// A fan-out flag: `auto`, `off` or a number of ranges.
fn fan_out(raw: &str) -> Result<FanOut, String> {
    raw.parse()
}

impl SettingsArgs {
    /// The settings from `lookup` (the environment), with these flags winning.
    pub fn settings(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> ourios_compaction::Result<CompactSettings> {
        let mut settings = CompactSettings::from_lookup(lookup)?;
        settings.budget_bytes = self.budget.or(Budget::new(settings.budget_bytes)).bytes();
        if let Some(scratch) = &self.scratch {
            settings.scratch_dir = scratch.clone();
        }
        if self.row_group_bytes.is_some() {
            settings.row_group_bytes = self.row_group_bytes;
        }
        self.row_groups.apply(&mut settings);
        if let Some(grace) = self.gc_grace {
            settings.gc_grace = grace;
        }
        self.cost.apply(&mut settings);
        self.fan_out.apply(&mut settings);
        Ok(settings)
    }
}

/// How the compacted file's row groups are cut and laid out.
#[derive(Debug, Args, Clone)]
pub struct RowGroupArgs {
    /// Row groups per block: within a block, each column's chunks of the block's row groups
    /// are contiguous, so a remote reader fetches a column of the whole block with one range
    /// request (1: the plain row-major layout; default: OURIOS_ROW_GROUPS_PER_BLOCK, else 4).
    #[arg(long, value_parser = positive_count)]
    pub row_groups_per_block: Option<usize>,
    /// Most rows per row group; a row group closes at this or at the byte threshold, whichever
    /// comes first (default: OURIOS_MAX_ROWS_PER_ROW_GROUP, else no row cap).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rows_per_row_group: Option<u64>,
}

impl RowGroupArgs {
    /// Sets the flags given on `settings`.
    fn apply(&self, settings: &mut CompactSettings) {
        if let Some(blocks) = self.row_groups_per_block {
            settings.row_groups_per_block = blocks;
        }
        if self.max_rows_per_row_group.is_some() {
            settings.max_rows_per_row_group = self.max_rows_per_row_group;
        }
    }
}

/// What a job's cost is reckoned for (prices: the `OURIOS_PRICE_*` variables).
#[derive(Debug, Args, Clone)]
pub struct CostArgs {
    /// Memory of the Lambda function the job's cost is reckoned for, in MB (default:
    /// AWS_LAMBDA_FUNCTION_MEMORY_SIZE, else 1769, which has one full vCPU). When given, it
    /// also sizes the output's upload parts (a 64th of it), below 3538 (two vCPUs) the job
    /// works on one thread where it could use two, as such a function has one vCPU, and the
    /// merge gives free memory back only above half of it, as the compactor does.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub function_memory: Option<u64>,
}

impl CostArgs {
    /// Sets the flag, if given, on `settings`.
    pub fn apply(&self, settings: &mut CompactSettings) {
        if let Some(mb) = self.function_memory {
            settings.set_function_memory(mb);
        }
    }
}

/// One partition.
#[derive(Debug, Args, Clone)]
pub struct PartitionArgs {
    /// Tenant name (required when the layout has {tenant}; refused when it has not).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Hour, UTC, as YYYY-MM-DDTHH.
    #[arg(long)]
    pub hour: String,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compact one partition into one sorted file.
    Compact(CompactArgs),
    /// List the live files of a partition or a range of hours (what a reader must read now).
    Files(FilesArgs),
    /// Rewrite the symlink manifests (`_compaction/symlink/<partition>/manifest`, what Athena
    /// and Trino read) of a range of hours from their live sets, as the planner does on each
    /// ingest event: for files landed without the functions. JSON: {"partitions": [{"tenant",
    /// "hour", "symlink": "written" | "unchanged"}]}.
    Symlinks(SymlinksArgs),
    /// Release quarantined files of a partition back into its live set, once what made them
    /// bad is fixed (the function's access to their KMS key, its memory, a newer build): readers
    /// read them again and the next compaction merges them, or quarantines them again if they
    /// are still bad. JSON: {"partition", "released": [{"key", "reason"}], "manifest_version"}.
    Release(ReleaseArgs),
    /// Write realistic synthetic ingest files into a partition.
    Generate(GenerateArgs),
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
    Gc(GcArgs),
    /// Schedule (write job records for) or run locally the compaction of every partition in an
    /// hour range that has uncompacted files. JSON: {"partitions": [{"tenant", "hour",
    /// "decision", "reason"}], "scheduled", "considered", "dry_run", "run_local"}.
    Backfill(BackfillArgs),
    /// Read one tenant's rows for a service and a time window, pruning with footer statistics.
    Query(QueryArgs),
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
    BenchRanges(BenchRangesArgs),
}

/// The arguments of `compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub partition: PartitionArgs,
    #[command(flatten)]
    pub settings: SettingsArgs,
    #[command(flatten)]
    pub late: LateArgs,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The late-file policy of `compact`: applied when a flag or its variable is set, as the
/// functions apply it; otherwise `compact` merges late files at once.
#[derive(Debug, Args, Clone)]
pub struct LateArgs {
    /// The longest a late file (one that landed after the hour closed, into an hour already
    /// compacted) waits before it is merged, e.g. 24h (default: OURIOS_LATE_WAIT; with neither
    /// this nor --late-share set, late files are merged at once).
    #[arg(long, value_parser = duration)]
    pub late_wait: Option<Duration>,
    /// The share of the hour's compacted bytes late files reach to be merged at once, e.g. 0.5
    /// or 50% (default: OURIOS_LATE_SHARE).
    #[arg(long, value_parser = share)]
    pub late_share: Option<f64>,
}

impl LateArgs {
    /// The policy to apply, `None` when neither a flag nor a variable sets one. The lateness
    /// grace that says when an hour closed is `OURIOS_LATENESS_GRACE`'s.
    pub fn readiness(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> ourios_compaction::Result<Option<ReadinessConfig>> {
        if self.late_wait.is_none() && self.late_share.is_none() && !LatePolicy::is_set(lookup) {
            return Ok(None);
        }
        let mut config = readiness_from_lookup(lookup)?;
        if let Some(wait) = self.late_wait {
            config.late.wait = wait;
        }
        if let Some(share) = self.late_share {
            config.late.share = share;
        }
        Ok(Some(config))
    }
}

/// A share flag: a fraction or a percentage.
fn share(raw: &str) -> Result<f64, String> {
    parse_share(raw).map_err(|e| e.to_string())
}

/// The arguments of `files`.
#[derive(Debug, Args)]
pub struct FilesArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Tenant name (every tenant when absent).
    #[arg(long)]
    pub tenant: Option<String>,
    /// One hour, UTC, as YYYY-MM-DDTHH (or a range: --from and --to).
    #[arg(long, conflicts_with_all = ["from", "to"], required_unless_present_all = ["from", "to"])]
    pub hour: Option<String>,
    /// First hour of a range, UTC, as YYYY-MM-DDTHH.
    #[arg(long, requires = "to")]
    pub from: Option<String>,
    /// Last hour of the range (inclusive).
    #[arg(long, requires = "from")]
    pub to: Option<String>,
    /// Print the URL of every live file, one a line and nothing else (`s3://<bucket>/<key>`,
    /// `file://<absolute path>`; keys verbatim): what another engine reads.
    #[arg(long, conflicts_with = "json")]
    pub urls: bool,
    /// Print JSON: `live` (keys), `urls` ([{"url", "bytes", "sorted"}]), `quarantined`,
    /// `unaddressable`, and `manifest_version` for one partition or `partitions` for a range.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `symlinks`.
#[derive(Debug, Args)]
pub struct SymlinksArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Tenant name (every tenant when absent).
    #[arg(long)]
    pub tenant: Option<String>,
    /// First hour, UTC, as YYYY-MM-DDTHH.
    #[arg(long)]
    pub from: String,
    /// Last hour (inclusive).
    #[arg(long)]
    pub to: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub partition: PartitionArgs,
    /// Key of a quarantined file, relative to the store root, as `files` prints it; repeat
    /// for several (default: every quarantined file of the partition).
    #[arg(long = "key")]
    pub keys: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub partition: PartitionArgs,
    /// Number of files.
    #[arg(long, default_value_t = 10)]
    pub files: usize,
    /// Rows per file.
    #[arg(long, default_value_t = 10_000)]
    pub rows: usize,
    /// Number of services.
    #[arg(long, default_value_t = 12)]
    pub services: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Add 40 attribute columns of about 250 bytes each.
    #[arg(long)]
    pub wide: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Tenant name (default: every tenant).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Hour, UTC, as YYYY-MM-DDTHH (default: every hour).
    #[arg(long)]
    pub hour: Option<String>,
    /// Grace period, e.g. 15m or 0s (default: 15m).
    #[arg(long, value_parser = duration)]
    pub grace: Option<Duration>,
    /// Only print what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `backfill`.
#[derive(Debug, Args)]
pub struct BackfillArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Tenant name; repeat for several (default: every tenant under the ingest prefix).
    #[arg(long = "tenant")]
    pub tenants: Vec<String>,
    /// First hour, UTC, as YYYY-MM-DDTHH (inclusive).
    #[arg(long)]
    pub from: String,
    /// Last hour, UTC, as YYYY-MM-DDTHH (inclusive).
    #[arg(long)]
    pub to: String,
    /// Only print what would be scheduled or compacted.
    #[arg(long)]
    pub dry_run: bool,
    /// Compact here, one partition after another, instead of writing job records.
    #[arg(long)]
    pub run_local: bool,
    /// Least time between two job records written (rate limit), e.g. 100ms (default:
    /// OURIOS_BACKFILL_INTERVAL, else 100ms).
    #[arg(long, env = "OURIOS_BACKFILL_INTERVAL", value_parser = duration)]
    pub interval: Option<Duration>,
    /// The compactions' settings, for --run-local.
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Tenant name (required when the layout has {tenant}: a query never crosses tenants).
    #[arg(long)]
    pub tenant: Option<String>,
    /// The value of the sort key's first column other than the time, top-level or inside a
    /// struct (service.name by default; default: every value).
    #[arg(long)]
    pub service: Option<String>,
    /// Only rows whose column holds the value, e.g. trace_id=5b8efff798038103d269b633813fc60c
    /// (hex for binary columns; a struct path such as resource.host.name works too); repeat
    /// for several. Row groups are skipped by statistics and bloom filters.
    #[arg(long = "where", value_name = "COLUMN=VALUE")]
    pub filters: Vec<String>,
    /// Window start, RFC 3339 (inclusive), e.g. 2026-11-29T10:20:00Z.
    #[arg(long)]
    pub from: String,
    /// Window end, RFC 3339 (exclusive).
    #[arg(long)]
    pub to: String,
    /// Most rows returned, in (service, time) order; 0 only counts.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Print {"rows": [...], "stats": {...}}.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `bench-ranges`.
#[derive(Debug, Args)]
pub struct BenchRangesArgs {
    #[command(flatten)]
    pub bench: BenchArgs,
    /// Row groups per block of each layout, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub blocks: Vec<usize>,
    /// Also measure each layout with at most this many rows per row group.
    #[arg(long)]
    pub max_rows: Option<u64>,
    /// Row-group threshold, e.g. 4MiB (default: adaptive).
    #[arg(long = "rg-bytes", value_parser = positive_size)]
    pub row_group_bytes: Option<u64>,
    /// Round trip added to every GET of the queries, e.g. 25ms (a remote store's latency;
    /// default: none).
    #[arg(long, value_parser = duration)]
    pub get_latency: Option<Duration>,
    /// Transfer rate of each GET of the queries, per second, e.g. 100MiB (default: unlimited).
    #[arg(long, value_parser = positive_size)]
    pub get_bandwidth: Option<u64>,
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
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Generate wide rows (40 attribute columns of about 250 bytes each).
    #[arg(long)]
    pub wide: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

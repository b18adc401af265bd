//! Typed, validated settings with units in field names; nothing here reads the environment.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cost::{ONE_VCPU_FUNCTION_MB, Prices};
use crate::error::{Error, Result};

/// Names of the columns the engine interprets; every other column is carried through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumns {
    /// The promoted service column (first sort key), default `service.name`.
    pub service: String,
    /// The event time in Unix nanoseconds (second sort key), default `time_unix_nano`.
    pub time: String,
    /// The optional tenant column checked against the partition, default `tenant_id`.
    pub tenant: String,
}

impl Default for KeyColumns {
    fn default() -> Self {
        Self {
            service: "service.name".to_string(),
            time: "time_unix_nano".to_string(),
            tenant: "tenant_id".to_string(),
        }
    }
}

/// Key-value metadata key naming the sort order of a compacted file.
pub const SORT_KEY_METADATA: &str = "ourios.sort_key";

/// The value of [`SORT_KEY_METADATA`] for a key.
pub fn sort_key_label(keys: &KeyColumns, has_service: bool) -> String {
    if has_service {
        format!("{} ASC NULLS FIRST, {} ASC", keys.service, keys.time)
    } else {
        format!("{} ASC", keys.time)
    }
}

/// Default decoded-row budget when nothing else says: 64 MiB.
pub const DEFAULT_BUDGET_BYTES: u64 = 64 << 20;
/// Smallest budget accepted (tests use tiny budgets to force many runs).
pub const MIN_BUDGET_BYTES: u64 = 16 << 10;
/// Fan-in cap of one merge pass.
pub const DEFAULT_MERGE_FAN_IN: usize = 64;
/// Most rows per output chunk handed to the writer.
pub const OUTPUT_CHUNK_ROWS: usize = 1024;
/// Target encoded bytes of one output chunk: wide rows get fewer rows per chunk, so the
/// chunks queued for the writer stay small whatever the row width.
pub const OUTPUT_CHUNK_BYTES: u64 = 1 << 20;

/// Decoded bytes per batch read from an input under budget `budget_bytes`: a sixteenth of
/// it, between 64 KiB and 8 MiB. The sort and the plain rewrite read alike.
pub fn read_target_bytes(budget_bytes: u64) -> u64 {
    (budget_bytes / 16).clamp(64 << 10, 8 << 20)
}

/// Rows per output chunk for rows of `row_bytes` (the widest input's encoded bytes per
/// row). It depends on the inputs alone, never on the budget or the runs, so output bytes
/// never depend on them either.
pub fn output_chunk_rows(row_bytes: u64) -> usize {
    (OUTPUT_CHUNK_BYTES / row_bytes.max(1)).clamp(16, OUTPUT_CHUNK_ROWS as u64) as usize
}

/// Row groups per output block when nothing else says: 4, chosen by `bench-ranges` (`shared/BENCHMARKS.md`,
/// "Range requests"): a two-column scan makes a third of the GETs of the plain layout and
/// runs in half the time at a 25 ms round trip, while the window query keeps its wall time;
/// 8 saves a few more scan GETs but costs the window more (1 is the plain row-major layout).
pub const DEFAULT_ROW_GROUPS_PER_BLOCK: usize = 4;

/// Inputs a job downloads at once from a remote store.
pub const DEFAULT_PARALLEL_DOWNLOADS: usize = 4;

/// The decoded-row budget for a function of `memory_mib` MiB: a quarter of it, so the
/// budget, one batch, the writer's open row group, the upload buffers and the runtime fit.
pub fn budget_for_function_memory(memory_mib: u64) -> u64 {
    (memory_mib << 20) / 4
}

/// Everything one compaction needs besides the store and the partition.
#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Column names of the keys.
    pub keys: KeyColumns,
    /// Decoded-row budget B in bytes.
    pub budget_bytes: u64,
    /// Scratch directory for downloaded inputs and spilled runs.
    pub scratch_dir: PathBuf,
    /// Explicit row-group threshold (wins over the environment override and the adaptive value).
    pub rg_bytes: Option<u64>,
    /// Operator override of the adaptive threshold (`OURIOS_COMPACTED_RG_BYTES`), read by `main`.
    pub rg_bytes_env: Option<u64>,
    /// Maximum runs merged at once.
    pub merge_fan_in: usize,
    /// Stop before this instant with nothing committed.
    pub deadline: Option<Instant>,
    /// Retired inputs and orphaned outputs older than this are garbage-collected after a commit.
    pub gc_grace: Duration,
    /// Write a progress line to stderr for long work.
    pub progress: bool,
    /// Most bytes this job may write to scratch (default: whatever the file system has free).
    pub scratch_limit_bytes: Option<u64>,
    /// Output row groups per block: within a block each column's chunks are contiguous, so a
    /// remote reader fetches a column of the whole block with one range request (1: plain).
    pub row_groups_per_block: usize,
    /// Most rows per output row group; a row group closes at this or at the byte threshold,
    /// whichever comes first (default: no row cap).
    pub max_rows_per_row_group: Option<u64>,
    /// Carry repetitive string columns as codes while sorting (see
    /// [`StringCoder`](crate::sort::runs::StringCoder)). The output is byte-identical either way;
    /// off only to measure or to compare.
    pub code_strings: bool,
    /// The host's clocks (durations and labels; grace periods use the store's clock).
    pub clock: std::sync::Arc<dyn crate::clock::Clock>,
    /// Names this job (logs, manifest, the output's unique suffix); random when `None`.
    pub job_id: Option<String>,
    /// Memory of the function the job runs in (MB), which its cost is billed for.
    pub function_memory_mb: u64,
    /// Prices the job's cost is reckoned at.
    pub prices: Prices,
    /// Inputs downloaded at once from a remote store (at least 1). One makes a job's store
    /// operations a single sequence, which the protocol simulation replays by seed.
    pub parallel_downloads: usize,
}

impl CompactOptions {
    /// Options with defaults and the given scratch directory.
    pub fn new(scratch_dir: impl Into<PathBuf>) -> Self {
        Self {
            keys: KeyColumns::default(),
            budget_bytes: DEFAULT_BUDGET_BYTES,
            scratch_dir: scratch_dir.into(),
            rg_bytes: None,
            rg_bytes_env: None,
            merge_fan_in: DEFAULT_MERGE_FAN_IN,
            deadline: None,
            gc_grace: Duration::from_secs(15 * 60),
            progress: false,
            scratch_limit_bytes: None,
            row_groups_per_block: DEFAULT_ROW_GROUPS_PER_BLOCK,
            max_rows_per_row_group: None,
            code_strings: true,
            clock: crate::clock::SystemClock::shared(),
            job_id: None,
            function_memory_mb: ONE_VCPU_FUNCTION_MB,
            prices: Prices::default(),
            parallel_downloads: DEFAULT_PARALLEL_DOWNLOADS,
        }
    }

    /// Checks the settings are usable.
    pub fn validate(&self) -> Result<()> {
        if self.budget_bytes < MIN_BUDGET_BYTES {
            return Err(Error::Config {
                message: format!(
                    "memory budget {} bytes is below the minimum of {MIN_BUDGET_BYTES} (16 KiB)",
                    self.budget_bytes
                ),
            });
        }
        if self.merge_fan_in < 2 {
            return Err(Error::Config {
                message: "merge fan-in must be at least 2".into(),
            });
        }
        if matches!(self.rg_bytes, Some(0)) || matches!(self.rg_bytes_env, Some(0)) {
            return Err(Error::Config {
                message: "row-group threshold must be positive".into(),
            });
        }
        if self.row_groups_per_block == 0 {
            return Err(Error::Config {
                message: "row groups per block must be at least 1 (1 is the plain layout)".into(),
            });
        }
        if matches!(self.max_rows_per_row_group, Some(0)) {
            return Err(Error::Config {
                message: "max rows per row group must be positive".into(),
            });
        }
        if self.function_memory_mb == 0 {
            return Err(Error::Config {
                message: "function memory must be at least 1 MB".into(),
            });
        }
        Ok(())
    }
}

/// Parses a byte size: plain bytes or with a `KiB`/`MiB`/`GiB` (or `K`/`M`/`G`, `KB`/`MB`/`GB`,
/// all binary) suffix, e.g. `64MiB`, `512k`, `1048576`.
pub fn parse_size(raw: &str) -> Result<u64> {
    let bad = || Error::Config {
        message: format!(
            "size {raw:?} should be bytes or a number with KiB, MiB or GiB, e.g. 64MiB"
        ),
    };
    let s = raw.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Parses a duration such as `15m`, `0s`, `90s`, `1h`.
pub fn parse_duration(raw: &str) -> Result<Duration> {
    humantime::parse_duration(raw.trim()).map_err(|e| Error::Config {
        message: format!("duration {raw:?}: {e} (use e.g. 15m, 0s, 1h)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (raw, want) in [
            ("1048576", 1 << 20),
            ("64MiB", 64 << 20),
            ("64 MiB", 64 << 20),
            ("512k", 512 << 10),
            ("2GiB", 2 << 30),
            ("1G", 1 << 30),
            ("7B", 7),
        ] {
            assert_eq!(parse_size(raw).unwrap(), want, "{raw}");
        }
        for bad in ["", "MiB", "-1", "1.5MiB", "12TB", "99999999999999999999"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn layout_settings_are_validated() {
        let mut options = CompactOptions::new("/tmp");
        assert_eq!(options.row_groups_per_block, DEFAULT_ROW_GROUPS_PER_BLOCK);
        assert!(options.validate().is_ok());
        options.row_groups_per_block = 0;
        assert!(options.validate().is_err());
        options.row_groups_per_block = 8;
        options.max_rows_per_row_group = Some(0);
        assert!(options.validate().is_err());
        options.max_rows_per_row_group = Some(65_536);
        assert!(options.validate().is_ok());
    }

    #[test]
    fn budget_from_memory() {
        assert_eq!(budget_for_function_memory(256), 64 << 20);
    }
}

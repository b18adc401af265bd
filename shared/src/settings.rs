//! What an operator sets: sizes and durations parsed once, and the compaction's settings
//! ([`CompactSettings`]) read from named variables through one lookup. The CLI and both
//! functions build a job's [`CompactOptions`] from them; the binaries pass the lookup (the
//! environment), and the CLI's flags then override single fields.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cost::{ONE_VCPU_FUNCTION_MB, Prices};
use crate::error::{Error, Result};
use crate::options::{
    CompactOptions, DEFAULT_BUDGET_BYTES, DEFAULT_GC_GRACE, DEFAULT_ROW_GROUPS_PER_BLOCK, FanOut,
    KeyColumns, budget_for_function_memory,
};
use crate::two_threads::two_cores;

/// A variable's value, if set (the binaries pass [`process_env`]).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as a [`Lookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A lookup over fixed `(name, value)` pairs (tests, and callers that carry their own
/// variables).
pub fn fixed_lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let pairs: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

/// Time a compactor keeps free before its invocation's deadline when nothing else says.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_secs(20);

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

/// The value of variable `name` parsed by `parse`, or `default` when it is unset or blank; a
/// bad value fails naming the variable.
pub fn get_or<T>(
    lookup: Lookup<'_>,
    name: &str,
    default: T,
    parse: impl Fn(&str) -> Result<T>,
) -> Result<T> {
    match lookup(name) {
        None => Ok(default),
        Some(raw) if raw.trim().is_empty() => Ok(default),
        Some(raw) => parse(&raw).map_err(|e| Error::Config {
            message: format!("{name}={raw:?}: {e}"),
        }),
    }
}

/// `n` when it is at least 1.
pub fn positive(n: u64) -> Result<u64> {
    if n == 0 {
        return Err(Error::Config {
            message: "must be at least 1".into(),
        });
    }
    Ok(n)
}

/// Parses a whole number.
pub fn parse_count(raw: &str) -> Result<u64> {
    raw.trim().parse().map_err(|_| Error::Config {
        message: format!("{raw:?} is not a whole number"),
    })
}

/// The settings of a compaction, each with its variable. The defaults live in
/// [`crate::options`] and here, once.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactSettings {
    /// Decoded-row budget B (`OURIOS_MEMORY_BUDGET`; else a quarter of the function's memory
    /// when `AWS_LAMBDA_FUNCTION_MEMORY_SIZE` is set, else [`DEFAULT_BUDGET_BYTES`]).
    pub budget_bytes: u64,
    /// Scratch directory (`OURIOS_SCRATCH`, else `TMPDIR`, else `/tmp`).
    pub scratch_dir: PathBuf,
    /// Most bytes a job may spill (`OURIOS_SCRATCH_LIMIT`), else the free space.
    pub scratch_limit_bytes: Option<u64>,
    /// Row-group threshold (`OURIOS_COMPACTED_RG_BYTES`), else adaptive.
    pub row_group_bytes: Option<u64>,
    /// Row groups per block of the output (`OURIOS_ROW_GROUPS_PER_BLOCK`, 1 = plain layout).
    pub row_groups_per_block: usize,
    /// Row cap of an output row group (`OURIOS_MAX_ROWS_PER_ROW_GROUP`), besides the bytes.
    pub max_rows_per_row_group: Option<u64>,
    /// Grace before retired inputs are deleted (`OURIOS_GC_GRACE`).
    pub gc_grace: Duration,
    /// Time kept free before an invocation's deadline (`OURIOS_DEADLINE_MARGIN`).
    pub deadline_margin: Duration,
    /// The function's memory in MB (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`), which jobs are billed
    /// for; one vCPU's worth when unset.
    pub function_memory_mb: u64,
    /// Whether the function's memory was given (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, the CLI's
    /// `--function-memory`) rather than assumed: only then does it size uploads
    /// ([`CompactSettings::upload_memory_bytes`]).
    pub function_memory_given: bool,
    /// Prices of a job's cost (`OURIOS_PRICE_*`, else the published arm64 us-east-1 ones).
    pub prices: Prices,
    /// Whether jobs fan out (`OURIOS_FAN_OUT`: `off`, `auto` or a number of ranges; else off).
    pub fan_out: FanOut,
    /// Tasks of a fanned-out job run at once (`OURIOS_WORKERS`, else 1).
    pub workers: usize,
    /// The merge gives the allocator's free memory back only while the resident set is at
    /// least this: half the function's memory when it is given
    /// ([`CompactSettings::set_function_memory`], `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`; freed pages
    /// below it stay for reuse instead of being faulted in again); else `None`, every half
    /// budget of merged rows.
    pub release_memory_above_bytes: Option<u64>,
    /// The time column, the sort key, the bloom columns and an integer time's unit
    /// (`OURIOS_TIME_COLUMN`, `OURIOS_SORT_KEY`, `OURIOS_BLOOM_COLUMNS`, `OURIOS_TIME_UNIT`;
    /// [`KeyColumns::from_settings`]).
    pub keys: KeyColumns,
}

impl CompactSettings {
    /// The defaults, spilling into `scratch_dir`: what [`CompactSettings::from_lookup`] reads
    /// from an empty environment.
    pub fn new(scratch_dir: impl Into<PathBuf>) -> Self {
        Self {
            budget_bytes: DEFAULT_BUDGET_BYTES,
            scratch_dir: scratch_dir.into(),
            scratch_limit_bytes: None,
            row_group_bytes: None,
            row_groups_per_block: DEFAULT_ROW_GROUPS_PER_BLOCK,
            max_rows_per_row_group: None,
            gc_grace: DEFAULT_GC_GRACE,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            function_memory_mb: ONE_VCPU_FUNCTION_MB,
            function_memory_given: false,
            prices: Prices::default(),
            fan_out: FanOut::Off,
            workers: 1,
            release_memory_above_bytes: None,
            keys: KeyColumns::default(),
        }
    }

    /// Reads the settings through `lookup`.
    pub fn from_lookup(lookup: Lookup<'_>) -> Result<Self> {
        let function_memory_mb = get_or(lookup, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", None, |s| {
            positive(parse_count(s)?).map(Some)
        })?;
        let function_budget =
            function_memory_mb.map_or(DEFAULT_BUDGET_BYTES, budget_for_function_memory);
        let temp_dir = get_or(lookup, "TMPDIR", PathBuf::from("/tmp"), |s| {
            Ok(PathBuf::from(s))
        })?;
        let mut settings = Self {
            budget_bytes: get_or(lookup, "OURIOS_MEMORY_BUDGET", function_budget, parse_size)?,
            scratch_dir: get_or(lookup, "OURIOS_SCRATCH", temp_dir, |s| Ok(PathBuf::from(s)))?,
            scratch_limit_bytes: get_or(lookup, "OURIOS_SCRATCH_LIMIT", None, |s| {
                parse_size(s).map(Some)
            })?,
            row_group_bytes: get_or(lookup, "OURIOS_COMPACTED_RG_BYTES", None, |s| {
                positive(parse_size(s)?).map(Some)
            })?,
            row_groups_per_block: get_or(
                lookup,
                "OURIOS_ROW_GROUPS_PER_BLOCK",
                DEFAULT_ROW_GROUPS_PER_BLOCK,
                |s| positive(parse_count(s)?).map(|n| n as usize),
            )?,
            max_rows_per_row_group: get_or(lookup, "OURIOS_MAX_ROWS_PER_ROW_GROUP", None, |s| {
                positive(parse_count(s)?).map(Some)
            })?,
            gc_grace: get_or(lookup, "OURIOS_GC_GRACE", DEFAULT_GC_GRACE, parse_duration)?,
            deadline_margin: get_or(
                lookup,
                "OURIOS_DEADLINE_MARGIN",
                DEFAULT_DEADLINE_MARGIN,
                parse_duration,
            )?,
            function_memory_mb: ONE_VCPU_FUNCTION_MB,
            function_memory_given: false,
            prices: Prices::from_lookup(lookup)?,
            fan_out: get_or(lookup, "OURIOS_FAN_OUT", FanOut::Off, |s| {
                s.parse().map_err(|message| Error::Config { message })
            })?,
            workers: get_or(lookup, "OURIOS_WORKERS", 1, |s| {
                positive(parse_count(s)?).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            })?,
            release_memory_above_bytes: None,
            keys: KeyColumns::from_settings(
                lookup("OURIOS_TIME_COLUMN").as_deref(),
                lookup("OURIOS_SORT_KEY").as_deref(),
                lookup("OURIOS_BLOOM_COLUMNS").as_deref(),
                lookup("OURIOS_TIME_UNIT").as_deref(),
            )?,
        };
        if let Some(mb) = function_memory_mb {
            settings.set_function_memory(mb);
        }
        Ok(settings)
    }

    /// Runs jobs as a function of `mb` MB runs them (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, the
    /// CLI's `--function-memory`): billed for it, with uploads sized by it, on one
    /// thread below two vCPUs, and free memory given back only above half of it. The budget
    /// stays as set.
    pub fn set_function_memory(&mut self, mb: u64) {
        self.function_memory_mb = mb;
        self.function_memory_given = true;
        // Freed pages below half the memory stay for reuse rather than being faulted in again.
        self.release_memory_above_bytes = Some(mb.saturating_mul(1 << 20) / 2);
    }

    /// Whether the work that can be split over two threads is (the input checks, the output's
    /// encoding): when the process has two cores and, where the function's memory is given,
    /// that memory buys two vCPUs (3,538 MB and more). A function gets one vCPU per 1,769 MB,
    /// so below that a second thread shortens nothing and only adds its overhead to the CPU
    /// billed.
    pub fn two_threads(&self) -> bool {
        two_cores()
            && (!self.function_memory_given || self.function_memory_mb >= 2 * ONE_VCPU_FUNCTION_MB)
    }

    /// The memory an output's upload is sized by ([`crate::store::upload::part_bytes_for`]):
    /// the function's when given, else four budgets (the budget is a quarter of a function's
    /// memory by default).
    pub fn upload_memory_bytes(&self) -> u64 {
        match self.function_memory_given {
            true => self.function_memory_mb.saturating_mul(1 << 20),
            false => self.budget_bytes.saturating_mul(4),
        }
    }

    /// The options of a job under these settings that must stop by `deadline` (less the
    /// margin); `None` for no deadline.
    pub fn options(&self, deadline: Option<Instant>) -> CompactOptions {
        let mut options = CompactOptions::with_settings(self.clone());
        options.deadline = deadline.map(|d| {
            d.checked_sub(self.deadline_margin)
                .unwrap_or_else(Instant::now)
        });
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::fixed_lookup as lookup;

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
    fn a_second_thread_only_where_the_function_buys_a_second_vcpu() {
        let with = |memory: &str| {
            let vars = lookup(&[("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory)]);
            CompactSettings::from_lookup(&vars)
                .expect("settings")
                .two_threads()
        };
        assert!(!with("1769"), "one vCPU");
        assert!(!with("3000"), "less than two vCPUs");
        assert_eq!(with("3538"), two_cores());
        let unknown = CompactSettings::from_lookup(&lookup(&[])).expect("settings");
        assert_eq!(
            unknown.two_threads(),
            two_cores(),
            "the process's cores decide"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn a_function_memory_set_runs_jobs_as_the_variable_does_but_for_the_budget() {
        let from_variable =
            CompactSettings::from_lookup(&lookup(&[("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1769")]))
                .unwrap();
        let mut set = CompactSettings::from_lookup(&lookup(&[])).unwrap();
        set.set_function_memory(1769);
        assert_eq!(set.function_memory_mb, from_variable.function_memory_mb);
        assert!(set.function_memory_given);
        assert_eq!(
            set.release_memory_above_bytes,
            from_variable.release_memory_above_bytes
        );
        assert_eq!(set.release_memory_above_bytes, Some((1769 << 20) / 2));
        assert_eq!(set.two_threads(), from_variable.two_threads());
        assert_eq!(
            set.upload_memory_bytes(),
            from_variable.upload_memory_bytes()
        );
        assert_eq!(set.budget_bytes, DEFAULT_BUDGET_BYTES);
    }

    #[test]
    fn compactor_budget_from_function_memory() {
        let s =
            CompactSettings::from_lookup(&lookup(&[("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")]))
                .unwrap();
        assert_eq!(s.budget_bytes, 256 << 20);
        let s = CompactSettings::from_lookup(&lookup(&[
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
            ("OURIOS_MEMORY_BUDGET", "32MiB"),
        ]))
        .unwrap();
        assert_eq!(s.budget_bytes, 32 << 20);
        // Free memory goes back only above half the function's memory, whatever B is.
        assert_eq!(s.release_memory_above_bytes, Some(512 << 20));
        assert_eq!(
            s.options(None).settings.release_memory_above_bytes,
            Some(512 << 20)
        );
        let unset = CompactSettings::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(unset.release_memory_above_bytes, None);
        assert_eq!(s.scratch_dir, std::path::PathBuf::from("/tmp"));
        assert_eq!(s.row_groups_per_block, DEFAULT_ROW_GROUPS_PER_BLOCK);
        assert_eq!(s.max_rows_per_row_group, None);
        assert!(
            CompactSettings::from_lookup(&lookup(&[("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "big")]))
                .is_err()
        );
    }

    #[test]
    fn compactor_cost_from_function_memory_and_prices() {
        let s = CompactSettings::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(s.function_memory_mb, ONE_VCPU_FUNCTION_MB);
        assert_eq!(s.prices, Prices::default());
        let s = CompactSettings::from_lookup(&lookup(&[
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "3538"),
            ("OURIOS_PRICE_LAMBDA_GB_SECOND", "0.0000166667"),
        ]))
        .unwrap();
        assert_eq!(s.function_memory_mb, 3538);
        assert_eq!(s.prices.lambda_gb_second, 0.000_016_666_7);
        assert_eq!(s.prices.s3_get_request, Prices::default().s3_get_request);
        for (name, value) in [
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "0"),
            ("OURIOS_PRICE_S3_PUT_LIST_REQUEST", "free"),
        ] {
            let e = CompactSettings::from_lookup(&lookup(&[(name, value)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }

    #[test]
    fn block_layout_settings() {
        let s = CompactSettings::from_lookup(&lookup(&[
            ("OURIOS_ROW_GROUPS_PER_BLOCK", "1"),
            ("OURIOS_MAX_ROWS_PER_ROW_GROUP", "65536"),
        ]))
        .unwrap();
        assert_eq!(s.row_groups_per_block, 1);
        assert_eq!(s.max_rows_per_row_group, Some(65536));
        for (name, value) in [
            ("OURIOS_ROW_GROUPS_PER_BLOCK", "0"),
            ("OURIOS_ROW_GROUPS_PER_BLOCK", "four"),
            ("OURIOS_MAX_ROWS_PER_ROW_GROUP", "0"),
        ] {
            let e = CompactSettings::from_lookup(&lookup(&[(name, value)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }

    #[test]
    fn fan_out_settings() {
        let s = CompactSettings::from_lookup(&lookup(&[])).unwrap();
        assert_eq!((s.fan_out, s.workers), (FanOut::Off, 1));
        for (raw, want) in [
            ("auto", FanOut::Auto),
            ("off", FanOut::Off),
            ("1", FanOut::Ranges(1)),
            (" 16 ", FanOut::Ranges(16)),
        ] {
            let s = CompactSettings::from_lookup(&lookup(&[("OURIOS_FAN_OUT", raw)])).unwrap();
            assert_eq!(s.fan_out, want, "{raw}");
        }
        let s = CompactSettings::from_lookup(&lookup(&[("OURIOS_WORKERS", "4")])).unwrap();
        assert_eq!(s.workers, 4);
        for (name, value) in [
            ("OURIOS_FAN_OUT", "0"),
            ("OURIOS_FAN_OUT", "many"),
            ("OURIOS_WORKERS", "0"),
        ] {
            let e = CompactSettings::from_lookup(&lookup(&[(name, value)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }
}

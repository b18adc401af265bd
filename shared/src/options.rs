//! What one compaction is given: [`CompactOptions`], the defaults, and the key columns and
//! sort-key label compacted files declare. Nothing here reads the environment
//! ([`crate::settings`] does, through a lookup).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::settings::CompactSettings;

/// The default and the smallest budget are the budget's own (re-exported for the settings).
pub use crate::budget::{DEFAULT_BUDGET_BYTES, MIN_BUDGET_BYTES};

/// Names of the columns the engine interprets; every other column is carried through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumns {
    /// The key's first column other than the time column, default `service.name`: the column
    /// `query --service` filters, that gets a bloom filter unless others are set, and whose
    /// large values get row groups of their own when the key is (it, time).
    pub service: String,
    /// The column that must lie inside the hour, default `time_unix_nano`.
    pub time: String,
    /// The optional tenant column checked against the partition, default `tenant_id`.
    pub tenant: String,
    /// The columns whose row groups get a bloom filter (`--bloom-columns`,
    /// `OURIOS_BLOOM_COLUMNS`); `None`: the service column's alone.
    pub bloom: Option<Vec<String>>,
    /// The sort key, in order, each column ascending with nulls first; default
    /// `[service, time]`.
    pub sort: Vec<String>,
    /// What an integer in the time column counts (`--time-unit`, `OURIOS_TIME_UNIT`);
    /// timestamps carry their own unit.
    pub time_unit: IntegerTimeUnit,
}

/// The unit of an integer time column: what each integer counts since the Unix epoch
/// (`--time-unit`, `OURIOS_TIME_UNIT`: `s`, `ms`, `us` or `ns`). Writers that turn JSON into
/// Parquet keep epoch times as plain integers (Fluent Bit's `json_date_format epoch` gives
/// seconds, `epoch_ms` milliseconds); a timestamp column carries its unit and ignores this.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IntegerTimeUnit {
    /// `s`.
    Seconds,
    /// `ms`.
    Milliseconds,
    /// `us`.
    Microseconds,
    /// `ns`, the default (OTLP's `time_unix_nano`).
    #[default]
    Nanoseconds,
}

impl IntegerTimeUnit {
    /// Every unit, coarsest first.
    pub const ALL: [Self; 4] = [
        Self::Seconds,
        Self::Milliseconds,
        Self::Microseconds,
        Self::Nanoseconds,
    ];

    /// The unit named `s`, `ms`, `us` or `ns` ([`IntegerTimeUnit::name`]).
    pub fn parse(name: &str) -> crate::Result<Self> {
        let name = name.trim();
        (Self::ALL.into_iter())
            .find(|unit| unit.name() == name)
            .ok_or_else(|| crate::Error::Config {
                message: format!("time unit {name:?}: one of s, ms, us or ns"),
            })
    }

    /// Nanoseconds in one unit.
    pub fn nanos(self) -> i64 {
        match self {
            Self::Seconds => 1_000_000_000,
            Self::Milliseconds => 1_000_000,
            Self::Microseconds => 1_000,
            Self::Nanoseconds => 1,
        }
    }

    /// The unit's name, as [`IntegerTimeUnit::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Seconds => "s",
            Self::Milliseconds => "ms",
            Self::Microseconds => "us",
            Self::Nanoseconds => "ns",
        }
    }
}

/// The default service column.
pub const DEFAULT_SERVICE_COLUMN: &str = "service.name";
/// The default time column: the one whose lake keeps Int64 nanoseconds in its outputs.
pub const DEFAULT_TIME_COLUMN: &str = "time_unix_nano";

impl Default for KeyColumns {
    fn default() -> Self {
        Self {
            service: DEFAULT_SERVICE_COLUMN.to_string(),
            time: DEFAULT_TIME_COLUMN.to_string(),
            tenant: "tenant_id".to_string(),
            bloom: None,
            sort: vec![
                DEFAULT_SERVICE_COLUMN.to_string(),
                DEFAULT_TIME_COLUMN.to_string(),
            ],
            time_unit: IntegerTimeUnit::default(),
        }
    }
}

impl KeyColumns {
    /// The key columns an operator set: the time column (`--time-column`,
    /// `OURIOS_TIME_COLUMN`), the sort key (`--sort-key`, `OURIOS_SORT_KEY`: comma-separated
    /// column names, any number, each ascending with nulls first) and the bloom columns
    /// (`--bloom-columns`, `OURIOS_BLOOM_COLUMNS`, comma-separated) and the unit of an integer
    /// time column (`--time-unit`, `OURIOS_TIME_UNIT`). Empty values count as unset. Without a
    /// time column set, a sort key that does not name `time_unix_nano` ends with the time
    /// column. A key with an empty name or a column named twice is refused, naming it, as is a
    /// unit other than nanoseconds for `time_unix_nano`.
    pub fn from_settings(
        time_column: Option<&str>,
        sort_key: Option<&str>,
        bloom_columns: Option<&str>,
        time_unit: Option<&str>,
    ) -> crate::Result<Self> {
        let list = |v: Option<&str>| -> Option<Vec<String>> {
            let v = v.map(str::trim).filter(|v| !v.is_empty())?;
            Some(v.split(',').map(|c| c.trim().to_string()).collect())
        };
        let bad = |message: String| crate::Error::Config { message };
        let mut keys = Self::default();
        let time_set = time_column.map(str::trim).filter(|t| !t.is_empty());
        if let Some(time) = time_set {
            keys.time = time.to_string();
            keys.sort = vec![keys.service.clone(), keys.time.clone()];
        }
        if let Some(columns) = list(sort_key) {
            let shown = columns.join(",");
            if columns.iter().any(String::is_empty) {
                return Err(bad(format!("sort key {shown:?}: a column name is empty")));
            }
            if let Some(twice) = (columns.iter().enumerate())
                .find(|&(i, c)| columns[..i].contains(c))
                .map(|(_, c)| c)
            {
                return Err(bad(format!("sort key {shown:?} names {twice:?} twice")));
            }
            if time_set.is_none()
                && !columns.iter().any(|c| c == DEFAULT_TIME_COLUMN)
                && let Some(last) = columns.last()
            {
                keys.time = last.clone();
            }
            if let Some(first) = columns.iter().find(|c| **c != keys.time) {
                keys.service = first.clone();
            }
            keys.sort = columns;
        }
        if let Some(columns) = list(bloom_columns) {
            if columns.iter().any(String::is_empty) {
                return Err(bad(format!(
                    "bloom columns {:?}: a column name is empty",
                    columns.join(",")
                )));
            }
            keys.bloom = Some(columns);
        }
        if let Some(unit) = time_unit.map(str::trim).filter(|u| !u.is_empty()) {
            keys.time_unit = IntegerTimeUnit::parse(unit)?;
            if keys.time_in_nanos() && keys.time_unit != IntegerTimeUnit::Nanoseconds {
                return Err(bad(format!(
                    "time unit {unit:?}: {DEFAULT_TIME_COLUMN} counts nanoseconds; name the \
                     time column the unit is for (--time-column)"
                )));
            }
        }
        Ok(keys)
    }

    /// The columns that get a bloom filter: the set ones, else the service column.
    pub fn bloom_columns(&self) -> Vec<&str> {
        match &self.bloom {
            Some(columns) => columns.iter().map(String::as_str).collect(),
            None => vec![self.service.as_str()],
        }
    }

    /// Whether the sort key is (service, time), the key whose split points, service counts
    /// and row-group alignment read the service column's values as bytes.
    pub fn is_service_time(&self) -> bool {
        matches!(self.sort.as_slice(), [s, t] if *s == self.service && *t == self.time)
    }

    /// Whether outputs keep Int64 nanoseconds in the time column (the default time column),
    /// rather than the inputs' logical type.
    pub fn time_in_nanos(&self) -> bool {
        self.time == DEFAULT_TIME_COLUMN
    }
}

/// What a job does with the partition's uncompacted files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobMode {
    /// Merge every live input: a compaction.
    #[default]
    Merge,
    /// Merge nothing: check the uncompacted files no check has passed (the bad quarantined, the
    /// empty retired) and record the others as checked; they wait for the late-file policy
    /// ([`crate::late`]).
    Check,
    /// Merge and check nothing: only the partition's garbage is collected.
    Collect,
    /// Merge only the uncompacted files, into a piece of their own beside the earlier ones,
    /// which stay as they are: an open hour under small-file pressure. The hour is merged
    /// whole once, when it closes, so each byte is written about twice however often the
    /// pressure fires.
    Append,
}

impl JobMode {
    /// True for [`JobMode::Merge`] (what a record written before modes existed asks).
    pub fn is_merge(&self) -> bool {
        *self == JobMode::Merge
    }

    /// True for the modes that write an output: [`JobMode::Merge`] and [`JobMode::Append`].
    pub fn writes(&self) -> bool {
        matches!(self, JobMode::Merge | JobMode::Append)
    }
}

/// Key-value metadata key naming the sort order of a compacted file.
pub const SORT_KEY_METADATA: &str = "ourios.sort_key";

/// The value of [`SORT_KEY_METADATA`] for a key: for (service, time), with the service
/// column or without it (a partition where no input has it is sorted by time alone); for
/// any other key, its columns.
pub fn sort_key_label(keys: &KeyColumns, has_service: bool) -> String {
    if !keys.is_service_time() {
        let columns: Vec<String> = (keys.sort.iter())
            .map(|c| format!("{c} ASC NULLS FIRST"))
            .collect();
        return columns.join(", ");
    }
    if has_service {
        format!("{} ASC NULLS FIRST, {} ASC", keys.service, keys.time)
    } else {
        format!("{} ASC", keys.time)
    }
}

/// Fan-in cap of one merge pass. Run batches are sized for 64 runs a pass; a pass opens more
/// (up to this cap) when their batches are smaller, as narrow rows' are. 512 runs keep one
/// open file each, half the 1,024 descriptors a Lambda function may open.
pub const DEFAULT_MERGE_FAN_IN: usize = 512;
/// Most rows per output chunk handed to the writer.
pub const OUTPUT_CHUNK_ROWS: usize = 1024;
/// Target encoded bytes of one output chunk: wide rows get fewer rows per chunk, so the
/// chunks queued for the writer stay small whatever the row width.
pub const OUTPUT_CHUNK_BYTES: u64 = 1 << 20;

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

/// The least encoded bytes the inputs of a group hold on average for them to be sorted as they
/// arrive ([`CompactOptions::arrive_above_bytes`]). A footer read first costs a GET ($0.0004
/// per 1,000); a MiB takes about 13 ms to download at the 80 MB/s a function gets from S3,
/// which at 1,769 MB costs as much as that GET, and which the sort no longer waits for.
pub const DEFAULT_ARRIVE_ABOVE_BYTES: u64 = 1 << 20;

/// Grace before retired inputs and orphaned outputs are deleted when nothing else says.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(15 * 60);

/// A callback told the rows read so far and the rows of all inputs, as the sort reads them
/// (the CLI draws its progress line with it; the library prints nothing).
#[derive(Clone)]
pub struct Progress(pub std::sync::Arc<dyn Fn(u64, u64) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// The decoded-row budget for a function of `memory_mib` MiB: a quarter of it, so the
/// budget, one batch, the writer's open row group, the upload buffers and the runtime fit.
pub fn budget_for_function_memory(memory_mib: u64) -> u64 {
    (memory_mib << 20) / 4
}

/// Whether a compaction fans out: sorts groups of inputs into runs, splits the key space into
/// ranges of about equal bytes and merges each range into an output of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FanOut {
    /// One output, in one task (the default).
    #[default]
    Off,
    /// Fan out only when the job would not fit one invocation's limits (the scratch limit,
    /// the deadline).
    Auto,
    /// Fan out into this many ranges (and at most as many groups).
    Ranges(usize),
    /// `Auto`, with at least this many ranges: a job whose attempts in one piece ran out of
    /// time or scratch space ([`FanOut::escalated`]).
    AutoAtLeast(usize),
}

impl FanOut {
    /// The fan-out of a job whose last `timed_out` attempts in one invocation ran out of time:
    /// at least 2^`timed_out` ranges (`auto` had judged that it fits, wrongly), or `n` ranges
    /// doubled as often; `off` stays off. A job that times out is never retried with the same
    /// decision.
    pub fn escalated(self, timed_out: u32) -> FanOut {
        if timed_out == 0 {
            return self;
        }
        let factor = 1usize << timed_out.min(10);
        match self {
            FanOut::Off => FanOut::Off,
            FanOut::Auto => FanOut::AutoAtLeast(factor.max(2)),
            FanOut::AutoAtLeast(n) => FanOut::AutoAtLeast(n.max(factor).max(2)),
            FanOut::Ranges(n) => FanOut::Ranges(n.max(1).saturating_mul(factor).max(2)),
        }
    }
}

impl std::str::FromStr for FanOut {
    type Err = String;

    fn from_str(raw: &str) -> std::result::Result<Self, String> {
        match raw.trim() {
            "auto" => Ok(FanOut::Auto),
            "off" => Ok(FanOut::Off),
            n => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(FanOut::Ranges(n)),
                _ => Err(format!(
                    "fan-out {raw:?} is not auto, off or a number of ranges of at least 1"
                )),
            },
        }
    }
}

/// Everything one compaction needs besides the store and the partition: what an operator
/// sets ([`CompactSettings`], nested whole) and what each job decides for itself.
#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// What an operator sets: budget, scratch, output layout, grace, fan-out, cost.
    pub settings: CompactSettings,
    /// Column names of the keys.
    pub keys: KeyColumns,
    /// Most runs merged at once (a pass opens fewer when their batches do not fit the
    /// budget; see [`DEFAULT_MERGE_FAN_IN`]).
    pub merge_fan_in: usize,
    /// Stop before this instant with nothing committed.
    pub deadline: Option<Instant>,
    /// Told how far the sort has read (`None`: nobody asks).
    pub progress: Option<Progress>,
    /// Carry repetitive string columns as codes while sorting (see
    /// [`StringCoder`](crate::sort::runs::StringCoder)). The output is byte-identical either way;
    /// off only to measure or to compare.
    pub code_strings: bool,
    /// The host's clocks (durations and labels; grace periods use the store's clock).
    pub clock: std::sync::Arc<dyn crate::clock::Clock>,
    /// Names this attempt (logs, manifest, the output's unique suffix); random when `None`.
    /// An attempt of a dispatched job is named `<job id>-<random suffix>`.
    pub attempt_id: Option<String>,
    /// Inputs downloaded at once from a remote store (at least 1). One makes a job's store
    /// operations a single sequence (its footers are read one at a time too), which the
    /// protocol simulation replays by seed.
    pub parallel_downloads: usize,
    /// A group of inputs downloaded from a remote store is sorted as they arrive (their footers
    /// read first, one ranged GET each) when they hold at least this many bytes on average
    /// ([`DEFAULT_ARRIVE_ABOVE_BYTES`]); `u64::MAX` stages and checks every input first.
    pub arrive_above_bytes: u64,
    /// This attempt of a dispatched job runs outside a function (the CLI's `backfill
    /// --run-local`): its id is `<job id>-local<random>`, which no function attempt takes for
    /// its own, so a function never aborts its upload, however long it runs.
    pub local_attempt: bool,
    /// What the job does with the uncompacted files: merge them, or only check them or only
    /// collect garbage, as the late-file policy decides; `None`: what the partition's job record
    /// asks of a dispatched job ([`JobMode::Merge`] without one).
    pub mode: Option<JobMode>,
    /// The size of an output's upload parts; `None`: sized to the memory
    /// (`store::upload::part_bytes_for`). Parts under S3's 5 MiB only on stores that
    /// take them: tests in memory make small outputs go up in parts with it.
    pub upload_part_bytes: Option<usize>,
}

impl CompactOptions {
    /// Options with defaults and the given scratch directory.
    pub fn new(scratch_dir: impl Into<PathBuf>) -> Self {
        Self::with_settings(CompactSettings::new(scratch_dir))
    }

    /// Options of a job under `settings`, each job-level choice at its default.
    pub fn with_settings(settings: CompactSettings) -> Self {
        Self {
            keys: settings.keys.clone(),
            settings,
            merge_fan_in: DEFAULT_MERGE_FAN_IN,
            deadline: None,
            progress: None,
            code_strings: true,
            clock: crate::clock::SystemClock::shared(),
            attempt_id: None,
            parallel_downloads: DEFAULT_PARALLEL_DOWNLOADS,
            arrive_above_bytes: DEFAULT_ARRIVE_ABOVE_BYTES,
            local_attempt: false,
            mode: None,
            upload_part_bytes: None,
        }
    }

    /// What the job does: [`CompactOptions::mode`], a merge when nothing says.
    pub fn job_mode(&self) -> JobMode {
        self.mode.unwrap_or_default()
    }

    /// The decoded-row budget B, whose plan says what each step may spend.
    pub fn budget(&self) -> Budget {
        Budget::new(self.settings.budget_bytes)
    }

    /// Checks the settings are usable.
    pub fn validate(&self) -> Result<()> {
        if self.settings.budget_bytes < MIN_BUDGET_BYTES {
            return Err(Error::Config {
                message: format!(
                    "memory budget {} bytes is below the minimum of {MIN_BUDGET_BYTES} (16 KiB)",
                    self.settings.budget_bytes
                ),
            });
        }
        if self.merge_fan_in < 2 {
            return Err(Error::Config {
                message: "merge fan-in must be at least 2".into(),
            });
        }
        if matches!(self.settings.row_group_bytes, Some(0)) {
            return Err(Error::Config {
                message: "row-group threshold must be positive".into(),
            });
        }
        if self.settings.row_groups_per_block == 0 {
            return Err(Error::Config {
                message: "row groups per block must be at least 1 (1 is the plain layout)".into(),
            });
        }
        if matches!(self.settings.max_rows_per_row_group, Some(0)) {
            return Err(Error::Config {
                message: "max rows per row group must be positive".into(),
            });
        }
        if self.settings.workers == 0 {
            return Err(Error::Config {
                message: "workers must be at least 1".into(),
            });
        }
        if self.settings.function_memory_mb == 0 {
            return Err(Error::Config {
                message: "function memory must be at least 1 MB".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_columns_are_settings_and_a_key_has_any_number_of_columns() {
        assert_eq!(
            KeyColumns::from_settings(None, Some(""), Some(" "), None).expect("unset"),
            KeyColumns::default()
        );
        let vector =
            KeyColumns::from_settings(None, Some("host, timestamp"), Some("host,trace_id"), None)
                .expect("Vector's keys");
        assert_eq!(
            (vector.service.as_str(), vector.time.as_str()),
            ("host", "timestamp")
        );
        assert_eq!(vector.bloom_columns(), ["host", "trace_id"]);
        assert_eq!(KeyColumns::default().bloom_columns(), ["service.name"]);
        let time_only =
            KeyColumns::from_settings(Some("ts"), None, None, None).expect("a time column");
        assert_eq!(
            (time_only.service.as_str(), time_only.time.as_str()),
            ("service.name", "ts")
        );
        let both =
            KeyColumns::from_settings(Some("ts"), Some("host,ts"), None, None).expect("both");
        assert_eq!((both.service.as_str(), both.time.as_str()), ("host", "ts"));
        let config = crate::settings::fixed_lookup(&[
            ("OURIOS_TIME_COLUMN", "timestamp"),
            ("OURIOS_SORT_KEY", "host,timestamp"),
            ("OURIOS_BLOOM_COLUMNS", "trace_id"),
        ]);
        let settings = crate::settings::CompactSettings::from_lookup(&config).expect("settings");
        assert_eq!(settings.keys.bloom_columns(), ["trace_id"]);
        assert_eq!(CompactOptions::with_settings(settings).keys.service, "host");
        // Any number of columns; the time column is the key's last unless the key names
        // `time_unix_nano` or the time column is set.
        let three = KeyColumns::from_settings(None, Some("host,status,timestamp"), None, None)
            .expect("three columns");
        assert_eq!(three.sort, ["host", "status", "timestamp"]);
        assert_eq!(
            (three.service.as_str(), three.time.as_str()),
            ("host", "timestamp")
        );
        assert!(!three.is_service_time());
        let no_time =
            KeyColumns::from_settings(Some("ts"), Some("host,status,trace_id"), None, None)
                .expect("a key without the time");
        assert_eq!((no_time.time.as_str(), no_time.sort.len()), ("ts", 3));
        let default_time =
            KeyColumns::from_settings(None, Some("time_unix_nano,host"), None, None).expect("keys");
        assert_eq!(default_time.time, "time_unix_nano");
        assert_eq!(default_time.service, "host");
        assert!(KeyColumns::default().is_service_time() && both.is_service_time());
        assert!(KeyColumns::default().time_in_nanos() && !both.time_in_nanos());
        assert_eq!(
            sort_key_label(&three, true),
            "host ASC NULLS FIRST, status ASC NULLS FIRST, timestamp ASC NULLS FIRST"
        );
        assert_eq!(
            sort_key_label(&KeyColumns::default(), true),
            "service.name ASC NULLS FIRST, time_unix_nano ASC"
        );
        for (time, key, says) in [(None, "a,,b", "empty"), (None, "ts,a,ts", "twice")] {
            let e = KeyColumns::from_settings(time, Some(key), None, None).unwrap_err();
            assert!(
                e.to_string().contains(says) && e.to_string().contains(key),
                "{e}"
            );
        }
    }

    #[test]
    fn an_integer_time_unit_is_named_and_refused_for_nanosecond_columns() {
        let seconds = KeyColumns::from_settings(Some("date"), None, None, Some(" s ")).expect("s");
        assert_eq!(seconds.time_unit, IntegerTimeUnit::Seconds);
        assert_eq!(seconds.time_unit.nanos(), 1_000_000_000);
        for unit in IntegerTimeUnit::ALL {
            assert_eq!(IntegerTimeUnit::parse(unit.name()).expect("a unit"), unit);
        }
        let unset = KeyColumns::from_settings(Some("date"), None, None, Some("")).expect("unset");
        assert_eq!(unset.time_unit, IntegerTimeUnit::Nanoseconds);
        let bad = IntegerTimeUnit::parse("sec").unwrap_err().to_string();
        assert!(
            bad.contains("\"sec\"") && bad.contains("s, ms, us or ns"),
            "{bad}"
        );
        let refused = KeyColumns::from_settings(None, None, None, Some("ms")).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("time_unix_nano counts nanoseconds"),
            "{refused}"
        );
        assert!(KeyColumns::from_settings(None, None, None, Some("ns")).is_ok());
    }

    #[test]
    fn a_job_that_timed_out_fans_out_with_more_ranges_each_time() {
        assert_eq!(FanOut::Auto.escalated(0), FanOut::Auto);
        assert_eq!(FanOut::Auto.escalated(1), FanOut::AutoAtLeast(2));
        assert_eq!(FanOut::Auto.escalated(3), FanOut::AutoAtLeast(8));
        assert_eq!(
            FanOut::AutoAtLeast(16).escalated(1),
            FanOut::AutoAtLeast(16)
        );
        assert_eq!(FanOut::Ranges(3).escalated(1), FanOut::Ranges(6));
        assert_eq!(FanOut::Ranges(1).escalated(1), FanOut::Ranges(2));
        assert_eq!(
            FanOut::Off.escalated(5),
            FanOut::Off,
            "an operator's off stays off"
        );
        assert_eq!(
            FanOut::Auto.escalated(u32::MAX),
            FanOut::AutoAtLeast(1 << 10)
        );
    }

    #[test]
    fn layout_settings_are_validated() {
        let mut options = CompactOptions::new("/tmp");
        assert_eq!(
            options.settings.row_groups_per_block,
            DEFAULT_ROW_GROUPS_PER_BLOCK
        );
        assert!(options.validate().is_ok());
        options.settings.row_groups_per_block = 0;
        assert!(options.validate().is_err());
        options.settings.row_groups_per_block = 8;
        options.settings.max_rows_per_row_group = Some(0);
        assert!(options.validate().is_err());
        options.settings.max_rows_per_row_group = Some(65_536);
        assert!(options.validate().is_ok());
    }

    #[test]
    fn budget_from_memory() {
        assert_eq!(budget_for_function_memory(256), 64 << 20);
    }
}

//! The partition identity and the object-key layout: every key is built and parsed here,
//! and nowhere else.
//!
//! ```text
//! <ingest>/tenant=<T>/year=<YYYY>/month=<MM>/day=<DD>/hour=<HH>/<file>.parquet   ingest files
//! compacted/tenant=<T>/year=…/hour=<HH>/part-<hash>-<job>.parquet                compacted outputs
//! _compaction/manifests/tenant=<T>/year=…/hour=<HH>/v<20 digits>.json            manifest versions
//! _compaction/jobs/tenant=<T>/year=…/hour=<HH>.json                              job records
//! _compaction/clock/tenant=<T>/year=…/hour=<HH>.json                             GC's clock object
//! _compaction/planner/sweep-cursor.json                                          the sweep's cursor
//! ```
//!
//! The ingest line is the default layout; a writer's own is any ingest key template
//! (`--layout`, the `key_template` module), whose literal head is the ingest prefix. Outputs and
//! metadata keep this project's grammar whatever the ingest layout; a layout without
//! `{tenant}` drops the `tenant=<T>/` level from all of them.
//!
//! Compacted outputs and metadata live outside the ingest prefix, so notifications filtered
//! on the ingest prefix never fire for the compactor's own writes. The names of a job's local
//! scratch files (run files, staged inputs) are made here too ([`scratch_file_name`]).

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Timelike, Utc};
use object_store::path::Path;

use crate::error::{Error, Result};
use crate::key_template::KeyTemplate;

/// Nanoseconds in one hour.
pub const HOUR_NANOS: i64 = 3_600_000_000_000;

/// One UTC hour partition, of a tenant when the layout has tenants (`{tenant}` in its
/// template).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId {
    tenant: Option<String>,
    hour_start: DateTime<Utc>,
}

impl PartitionId {
    /// A partition from a tenant name and any instant inside the hour.
    pub fn new(tenant: &str, instant: DateTime<Utc>) -> Result<Self> {
        Self::of(Some(tenant), instant)
    }

    /// A partition of a layout without tenants: the hour alone.
    pub fn hour_only(instant: DateTime<Utc>) -> Result<Self> {
        Self::of(None, instant)
    }

    /// A partition of `tenant` (none for a layout without tenants) and any instant inside the
    /// hour.
    pub fn of(tenant: Option<&str>, instant: DateTime<Utc>) -> Result<Self> {
        if let Some(tenant) = tenant {
            validate_tenant(tenant)?;
        }
        let hour_start = Utc
            .with_ymd_and_hms(
                instant.year(),
                instant.month(),
                instant.day(),
                instant.hour(),
                0,
                0,
            )
            .single()
            .ok_or_else(|| Error::Partition {
                message: format!("{instant} has no hour start"),
            })?;
        Ok(Self {
            tenant: tenant.map(str::to_string),
            hour_start,
        })
    }

    /// A partition from a tenant and an hour written `YYYY-MM-DDTHH` (UTC).
    pub fn parse(tenant: &str, hour: &str) -> Result<Self> {
        Self::new(tenant, parse_hour(hour)?)
    }

    /// A partition from an optional tenant and an hour written `YYYY-MM-DDTHH` (UTC).
    pub fn parse_of(tenant: Option<&str>, hour: &str) -> Result<Self> {
        Self::of(tenant, parse_hour(hour)?)
    }

    /// The tenant name; `None` in a layout without tenants.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The first instant of the hour.
    pub fn hour_start(&self) -> DateTime<Utc> {
        self.hour_start
    }

    /// The hour as `YYYY-MM-DDTHH`.
    pub fn hour_label(&self) -> String {
        self.hour_start.format("%Y-%m-%dT%H").to_string()
    }

    /// The tenant and the hour, for logs and tables: `acme 2026-11-29T10`, or the hour alone.
    pub fn label(&self) -> String {
        match &self.tenant {
            Some(tenant) => format!("{tenant} {}", self.hour_label()),
            None => self.hour_label(),
        }
    }

    /// Half-open `[start, end)` of the hour in Unix nanoseconds.
    pub fn time_range_nanos(&self) -> (i64, i64) {
        let start = self.hour_start.timestamp() * 1_000_000_000;
        (start, start + HOUR_NANOS)
    }

    /// The partition-relative directory: `tenant=…/year=…/month=…/day=…/hour=…`, without the
    /// tenant's level in a layout without tenants.
    pub fn relative_dir(&self) -> String {
        let hour = format!(
            "year={:04}/month={:02}/day={:02}/hour={:02}",
            self.hour_start.year(),
            self.hour_start.month(),
            self.hour_start.day(),
            self.hour_start.hour()
        );
        match &self.tenant {
            Some(tenant) => format!("tenant={tenant}/{hour}"),
            None => hour,
        }
    }

    /// The partition that follows this one for the same tenant.
    pub fn next_hour(&self) -> Self {
        Self {
            tenant: self.tenant.clone(),
            hour_start: self.hour_start + chrono::Duration::hours(1),
        }
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.relative_dir())
    }
}

/// Parses `YYYY-MM-DDTHH` as a UTC hour.
pub fn parse_hour(hour: &str) -> Result<DateTime<Utc>> {
    let bad = || Error::Partition {
        message: format!(
            "hour {hour:?} is not of the form YYYY-MM-DDTHH (UTC), e.g. 2026-11-29T10"
        ),
    };
    let bytes = hour.as_bytes();
    if bytes.len() != 13 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b'T' {
        return Err(bad());
    }
    let num = |range: std::ops::Range<usize>| -> Result<u32> {
        let part = &hour[range];
        if part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (year, month, day, h) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?);
    date_hour(year as i32, month, day, h).ok_or_else(bad)
}

fn date_hour(year: i32, month: u32, day: u32, hour: u32) -> Option<DateTime<Utc>> {
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    let naive = date.and_hms_opt(hour, 0, 0)?;
    Some(Utc.from_utc_datetime(&naive))
}

/// Checks a tenant name: 1–128 of letters, digits, `-`, `_`, `.`, not starting with `.`.
pub fn validate_tenant(tenant: &str) -> Result<()> {
    let ok = !tenant.is_empty()
        && tenant.len() <= 128
        && !tenant.starts_with('.')
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::Partition {
            message: format!(
                "tenant {tenant:?} must be 1-128 letters, digits, '-', '_' or '.', not starting with '.'"
            ),
        })
    }
}

/// The key layout: where each kind of object lives under the store root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyLayout {
    template: KeyTemplate,
    input_names: InputNames,
}

/// Which object names in a partition are inputs (`--input-names`, `OURIOS_INPUT_NAMES`): a
/// pattern of the name, `*` for any run of characters and `?` for one (default `*.parquet`;
/// `*` for writers that add no extension). Whatever the pattern, a name starting with `_` or
/// `.` is a writer's side file and one holding an ASCII control character cannot be addressed:
/// neither is an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputNames(String);

/// The input names when nothing else says.
pub const DEFAULT_INPUT_NAMES: &str = "*.parquet";

impl Default for InputNames {
    fn default() -> Self {
        Self(DEFAULT_INPUT_NAMES.to_string())
    }
}

impl InputNames {
    /// The pattern `pattern`: a file name, not a path.
    pub fn parse(pattern: &str) -> Result<Self> {
        let pattern = pattern.trim();
        if pattern.is_empty() || pattern.contains('/') {
            return Err(Error::Config {
                message: format!(
                    "input names {pattern:?}: a pattern of file names such as *.parquet or *, \
                     not a path"
                ),
            });
        }
        Ok(Self(pattern.to_string()))
    }

    /// The pattern.
    pub fn pattern(&self) -> &str {
        &self.0
    }

    /// Whether `name` (a file name) is an input's.
    pub fn matches(&self, name: &str) -> bool {
        !name.is_empty()
            && !name.starts_with('_')
            && !name.starts_with('.')
            && !name.contains('/')
            && !name.chars().any(|c| c.is_ascii_control())
            && glob(self.0.as_bytes(), name.as_bytes())
    }
}

/// `*` and `?` matching of `name` against `pattern`.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((at, matched)) => {
                    p = at + 1;
                    n = matched + 1;
                    star = Some((at, matched + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Prefix of ingest files under the store root when nothing else says.
pub const DEFAULT_INGEST_PREFIX: &str = "data";

/// Prefix of compacted outputs, outside the ingest prefix.
pub const COMPACTED_PREFIX: &str = "compacted";
/// Prefix of compactor metadata (manifests), outside the ingest prefix.
pub const METADATA_PREFIX: &str = "_compaction";
/// Prefix of every partition's manifest versions.
pub const MANIFESTS_PREFIX: &str = "_compaction/manifests";
/// Prefix of job records under the store root.
pub const JOBS_PREFIX: &str = "_compaction/jobs";
/// Prefix of the markers of partitions with garbage due (`<partition>.json`, dated when it
/// was last left): the sweep finds them whatever the hour's age.
pub const GC_DUE_PREFIX: &str = "_compaction/gc-due";
/// Prefix of the checked-late records of partitions with late files waiting to be merged
/// (`<partition>.json`, [`crate::late::CheckedLate`]): the sweep finds them whatever the hour's
/// age.
pub const LATE_PREFIX: &str = "_compaction/late";
/// Prefix of the failure counts of partitions whose last jobs failed (`<partition>.json`,
/// outside the job prefix so that counting dispatches nothing).
pub const FAILURES_PREFIX: &str = "_compaction/failures";
/// Prefix of the symlink manifests, one directory per partition (Hive's
/// `SymlinkTextInputFormat` reads every file of a table or partition location).
pub const SYMLINK_PREFIX: &str = "_compaction/symlink";
/// Where the sweep stopped when it ran out of time; the next sweep starts after it.
pub const SWEEP_CURSOR_KEY: &str = "_compaction/planner/sweep-cursor.json";

/// This project's partition grammar without its tenant level (the metadata keys of a layout
/// without tenants), as a template under a placeholder head.
const OWN_HOUR_TEMPLATE: &str = "data/year=%Y/month=%m/day=%d/hour=%H";

impl KeyLayout {
    /// This project's layout with its ingest files under `ingest_prefix` (default `data`):
    /// `<ingest_prefix>/tenant={tenant}/year=%Y/month=%m/day=%d/hour=%H`.
    pub fn new(ingest_prefix: &str) -> Result<Self> {
        let bad = |why: String| Error::Config {
            message: format!(
                "ingest prefix {ingest_prefix:?} must be a non-empty path outside \
                 {COMPACTED_PREFIX}/ and {METADATA_PREFIX}/{why}"
            ),
        };
        let trimmed = ingest_prefix.trim_matches('/');
        if trimmed.is_empty() || trimmed.contains('%') || trimmed.contains('{') {
            return Err(bad(String::new()));
        }
        let template = format!("{trimmed}/tenant={{tenant}}/year=%Y/month=%m/day=%d/hour=%H");
        Self::from_template(&template).map_err(|e| bad(format!(" ({e})")))
    }

    /// The layout an operator set: a template (`--layout`, `OURIOS_LAYOUT`), or this project's
    /// layout under another ingest prefix (`--ingest-prefix`, `OURIOS_INGEST_PREFIX`, its
    /// shorthand), or the default; setting both is an error. `input_names` (`--input-names`,
    /// `OURIOS_INPUT_NAMES`) decides which names are inputs. Empty values count as unset.
    pub fn from_settings(
        layout: Option<&str>,
        ingest_prefix: Option<&str>,
        input_names: Option<&str>,
    ) -> Result<Self> {
        fn set(v: Option<&str>) -> Option<&str> {
            v.map(str::trim).filter(|v| !v.is_empty())
        }
        let names = match set(input_names) {
            Some(pattern) => InputNames::parse(pattern)?,
            None => InputNames::default(),
        };
        let layout = match (set(layout), set(ingest_prefix)) {
            (Some(layout), Some(prefix)) => Err(Error::Config {
                message: format!(
                    "both a layout ({layout:?}) and an ingest prefix ({prefix:?}) are set: the \
                     prefix is a shorthand for this project's layout under it; set one"
                ),
            }),
            (Some(layout), None) => Self::from_template(layout),
            (None, Some(prefix)) => Self::new(prefix),
            (None, None) => Ok(Self::default()),
        }?;
        Ok(layout.with_input_names(names))
    }

    /// The layout of an ingest key template (`--layout`, [`KeyTemplate`]). Without `{tenant}`
    /// in it a partition is its hour alone.
    pub fn from_template(template: &str) -> Result<Self> {
        let template = KeyTemplate::parse(template)?;
        Ok(Self {
            template,
            input_names: InputNames::default(),
        })
    }

    /// This layout with `input_names` deciding which names are inputs.
    pub fn with_input_names(mut self, input_names: InputNames) -> Self {
        self.input_names = input_names;
        self
    }

    /// Whether this layout's partitions have a tenant (`{tenant}` in its template).
    pub fn has_tenant(&self) -> bool {
        self.template.has_tenant()
    }

    /// The partition of `tenant` and `hour` (`YYYY-MM-DDTHH`) in this layout: a tenant is
    /// required when the template has `{tenant}` and refused when it has not.
    pub fn partition(&self, tenant: Option<&str>, hour: &str) -> Result<PartitionId> {
        self.partition_at(tenant, parse_hour(hour)?)
    }

    /// [`Self::partition`] of any instant inside the hour.
    pub fn partition_at(
        &self,
        tenant: Option<&str>,
        instant: DateTime<Utc>,
    ) -> Result<PartitionId> {
        self.check(&PartitionId::of(tenant, instant)?)
    }

    /// `partition` when its tenant fits this layout (one when the template has `{tenant}`,
    /// none when it has not); an error that says which otherwise.
    pub fn check(&self, partition: &PartitionId) -> Result<PartitionId> {
        if self.has_tenant() && partition.tenant().is_none() {
            return Err(Error::Config {
                message: format!(
                    "layout {:?} has a tenant level: name the tenant of hour {}",
                    self.template.source(),
                    partition.hour_label()
                ),
            });
        }
        self.refuse_tenant(partition.tenant())?;
        Ok(partition.clone())
    }

    /// An error naming `tenant` when this layout has no tenant level to put it in.
    pub fn refuse_tenant(&self, tenant: Option<&str>) -> Result<()> {
        match tenant {
            Some(tenant) if !self.has_tenant() => Err(Error::Config {
                message: format!(
                    "layout {:?} has no tenant level, but tenant {tenant:?} was named",
                    self.template.source()
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Which object names in a partition are inputs.
    pub fn input_names(&self) -> &InputNames {
        &self.input_names
    }

    /// Whether `name` (a file name) is an input's ([`InputNames::matches`]).
    pub fn is_input_name(&self, name: &str) -> bool {
        self.input_names.matches(name)
    }

    /// The ingest key template.
    pub fn template(&self) -> &KeyTemplate {
        &self.template
    }

    /// The ingest prefix: the template's literal head (no slashes at either end).
    pub fn ingest_prefix(&self) -> &str {
        self.template.head()
    }

    /// Directory of a partition's ingest files (its hour's; files in its minute directories,
    /// when the template has them, belong to it too).
    pub fn ingest_dir(&self, partition: &PartitionId) -> Path {
        Path::from(
            self.template
                .hour_dir(partition.tenant(), partition.hour_start()),
        )
    }

    /// Directory of a partition's compacted outputs.
    pub fn compacted_dir(&self, partition: &PartitionId) -> Path {
        Path::from(format!("{COMPACTED_PREFIX}/{}", partition.relative_dir()))
    }

    /// Prefix of a partition's compacted outputs, ending in `/`.
    pub fn compacted_prefix(&self, partition: &PartitionId) -> String {
        format!("{}/", self.compacted_dir(partition))
    }

    /// Key of an attempt's output: `part-<input set hash>-<attempt id>.parquet` (invariant 6).
    pub fn output_key(
        &self,
        partition: &PartitionId,
        input_set_hash: &str,
        attempt_id: &str,
    ) -> Path {
        Path::from(format!(
            "{}/part-{input_set_hash}-{attempt_id}.parquet",
            self.compacted_dir(partition)
        ))
    }

    /// Key of the sorted run of group `group` of a fanned-out job: under the partition's
    /// compacted directory (`runs/<job>/`), never in a manifest, so GC sweeps a run a crash
    /// left behind as an orphan once the grace has passed.
    pub fn run_key(&self, partition: &PartitionId, job: &str, group: usize) -> Path {
        Path::from(format!(
            "{}/run-{group:05}.parquet",
            self.fan_out_dir(partition, job)
        ))
    }

    /// Directory of every fanned-out job of a partition (`runs/` under its compacted
    /// directory).
    pub fn fan_out_root(&self, partition: &PartitionId) -> Path {
        Path::from(format!("{}/runs", self.compacted_dir(partition)))
    }

    /// Directory of a fanned-out job's runs and task records (`runs/<job>/` under the
    /// partition's compacted directory).
    pub fn fan_out_dir(&self, partition: &PartitionId, job: &str) -> Path {
        self.fan_out_root(partition).join(job)
    }

    /// Key of a partition's hand-off claim (`runs/hand-off.json`): the job whose fan-out
    /// execution is being started, until its plan is written.
    pub fn hand_off_key(&self, partition: &PartitionId) -> Path {
        self.fan_out_root(partition).join("hand-off.json")
    }

    /// Key of the hold job `job` keeps on its output `output_name` (`runs/<job>/holds/<name>`):
    /// GC leaves an unreferenced output alone while a job directory holding it is at work
    /// ([`held_output`]).
    pub fn hold_key(&self, partition: &PartitionId, job: &str, output_name: &str) -> Path {
        Path::from(format!(
            "{}/holds/{output_name}",
            self.fan_out_dir(partition, job)
        ))
    }

    /// Prefix every output key of a partition starts with.
    pub fn output_prefix(&self, partition: &PartitionId) -> String {
        format!("{}/part-", self.compacted_dir(partition))
    }

    /// Directory of a partition's manifest versions.
    pub fn manifest_dir(&self, partition: &PartitionId) -> Path {
        Path::from(format!(
            "{METADATA_PREFIX}/manifests/{}",
            partition.relative_dir()
        ))
    }

    /// Key of a partition's symlink manifest (the live set's URLs, for Hive-family readers):
    /// `_compaction/symlink/tenant=<T>/year=…/month=…/day=…/hour=<HH>/manifest`.
    pub fn symlink_key(&self, partition: &PartitionId) -> Path {
        Path::from(format!(
            "{SYMLINK_PREFIX}/{}/manifest",
            partition.relative_dir()
        ))
    }

    /// Key of one manifest version.
    pub fn manifest_key(&self, partition: &PartitionId, version: u64) -> Path {
        Path::from(format!(
            "{METADATA_PREFIX}/manifests/{}/v{version:020}.json",
            partition.relative_dir()
        ))
    }

    /// Key of the object GC writes to read the store's clock for a partition.
    pub fn clock_key(&self, partition: &PartitionId) -> Path {
        Path::from(format!(
            "{METADATA_PREFIX}/clock/{}.json",
            partition.relative_dir()
        ))
    }

    /// Parses an ingest-file key strictly through the template; it is never normalised. The
    /// file is its name, or `<minute dir>/<name>` for a file in a minute directory.
    pub fn parse_ingest_key(&self, key: &str) -> Result<(PartitionId, String)> {
        let read = self
            .template
            .read_key(key)?
            .ok_or_else(|| Error::Partition {
                message: format!(
                    "key {key:?} is not under the ingest prefix {}/",
                    self.template.head()
                ),
            })?;
        if self.has_tenant() && read.tenant.is_none() {
            return Err(Error::Partition {
                message: format!("key {key:?} names no tenant"),
            });
        }
        let partition = PartitionId::of(read.tenant.as_deref(), read.hour)?;
        if !self.is_input_name(&read.file) {
            return Err(Error::Partition {
                message: format!(
                    "key {key:?}: file name must match the input names {:?}, not start with \
                     '_' or '.', and hold no ASCII control characters",
                    self.input_names.pattern()
                ),
            });
        }
        let file = match read.minute.and_then(|m| self.template.minute_dir(m)) {
            Some(minute) => format!("{minute}/{}", read.file),
            None => read.file,
        };
        Ok((partition, file))
    }
}

/// The directory of the fanned-out job a compacted-directory key belongs to
/// (`compacted/<partition>/runs/<job>`), if any.
pub fn fan_out_job_dir(key: &str) -> Option<&str> {
    let start = key.find("/runs/")? + "/runs/".len();
    let end = start + key[start..].find('/')?;
    Some(&key[..end])
}

/// The job directory and the output file name of a hold key (`…/runs/<job>/holds/<name>`).
pub fn held_output(key: &str) -> Option<(&str, &str)> {
    let dir = fan_out_job_dir(key)?;
    let name = key[dir.len()..].strip_prefix("/holds/")?;
    (!name.is_empty() && !name.contains('/')).then_some((dir, name))
}

/// Version number of a manifest key's file name `v<digits>.json`.
pub fn parse_version(key: &Path) -> Option<u64> {
    let name = key.filename()?;
    let digits = name.strip_prefix('v')?.strip_suffix(".json")?;
    if digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()
    } else {
        None
    }
}

/// True when `key` is the output of a function's attempt of some dispatched job
/// (`part-<input set>-<job id>-<8 hex digits>.parquet`; see [`is_attempt_output`]).
pub fn is_attempt_upload(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .and_then(|name| name.strip_prefix("part-"))
        .and_then(|name| name.split_once('-'))
        .and_then(|(_, attempt)| attempt.rsplit_once('-'))
        .is_some_and(|(job, _)| !job.is_empty() && is_attempt_output(key, job))
}

/// True when `key` is the output of a function's attempt of the dispatched job `job_id`
/// (`part-<input set>-<job id>-<8 hex digits>.parquet`). A local attempt's
/// (`<job id>-local<8 hex digits>`, the CLI's `backfill --run-local`) is not: a function never
/// takes a local attempt's upload for its own.
pub fn is_attempt_output(key: &str, job_id: &str) -> bool {
    key.rsplit('/')
        .next()
        .and_then(|name| name.strip_prefix("part-"))
        .and_then(|name| name.split_once('-'))
        .and_then(|(_, attempt)| attempt.strip_prefix(job_id))
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|rest| rest.strip_suffix(".parquet"))
        .is_some_and(|suffix| suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Key of a partition's job record.
pub fn job_key(partition: &PartitionId) -> String {
    format!("{JOBS_PREFIX}/{}.json", partition.relative_dir())
}

/// Key of a partition's garbage-due marker: a partition whose retired files or orphans GC
/// will delete once past the grace.
pub fn gc_due_key(partition: &PartitionId) -> Path {
    Path::from(format!("{GC_DUE_PREFIX}/{}.json", partition.relative_dir()))
}

/// Parses `_compaction/gc-due/<partition>.json` strictly.
pub fn parse_gc_due_key(key: &str) -> crate::Result<PartitionId> {
    parse_metadata_key(key, GC_DUE_PREFIX)
}

/// Key of a partition's checked-late record: late files that wait to be merged.
pub fn late_key(partition: &PartitionId) -> Path {
    Path::from(format!("{LATE_PREFIX}/{}.json", partition.relative_dir()))
}

/// Key of a partition's failure count: how many times in a row its job failed the same way.
pub fn failures_key(partition: &PartitionId) -> Path {
    Path::from(format!(
        "{FAILURES_PREFIX}/{}.json",
        partition.relative_dir()
    ))
}

/// Parses `_compaction/late/<partition>.json` strictly.
pub fn parse_late_key(key: &str) -> crate::Result<PartitionId> {
    parse_metadata_key(key, LATE_PREFIX)
}

/// Parses `_compaction/jobs/<partition>.json` strictly.
pub fn parse_job_key(key: &str) -> crate::Result<PartitionId> {
    parse_metadata_key(key, JOBS_PREFIX)
}

/// Parses `<prefix>/<partition>.json` strictly.
fn parse_metadata_key(key: &str, prefix: &str) -> crate::Result<PartitionId> {
    let bad = |why: &str| crate::Error::Partition {
        message: format!("key {key:?}: {why}"),
    };
    let dir = key
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.strip_suffix(".json"))
        .ok_or_else(|| {
            bad(&format!(
                "expected {prefix}/[tenant=…/]year=…/hour=<HH>.json"
            ))
        })?;
    // The partition grammar of metadata keys is this project's own, whatever the ingest
    // layout: reuse the default layout's parser (or its tenant-less form's) on the directory
    // with a fixed file name.
    let own = if dir.starts_with("tenant=") {
        KeyLayout::default()
    } else {
        KeyLayout::from_template(OWN_HOUR_TEMPLATE).map_err(|e| bad(&e.to_string()))?
    };
    let probe = format!("{}/{dir}/job.parquet", own.ingest_prefix());
    let (partition, _) = own
        .parse_ingest_key(&probe)
        .map_err(|e| bad(&e.to_string()))?;
    if format!("{prefix}/{}.json", partition.relative_dir()) != key {
        return Err(bad("not in canonical form"));
    }
    debug_assert!(key.starts_with(METADATA_PREFIX));
    Ok(partition)
}

/// The directory of `partition` under `root` (a prefix holding partition directories).
pub fn partition_dir(root: &Path, partition: &PartitionId) -> Path {
    Path::from(format!("{root}/{}", partition.relative_dir()))
}

/// The child directory `<dir>/<name>=<value>` of the partition grammar (`tenant=…`,
/// `year=…`, …).
pub fn field_dir(dir: &Path, name: &str, value: &str) -> Path {
    Path::from(format!("{dir}/{name}={value}"))
}

/// The value of a directory named `<name>=<value>`.
pub fn field_value<'a>(dir_name: &'a str, name: &str) -> Option<&'a str> {
    dir_name.strip_prefix(&format!("{name}="))
}

/// Name of a job's scratch directory: `job-<pid>-<job>-<nonce>`.
pub fn scratch_job_dir_name(pid: u32, job: u64, nonce: u32) -> String {
    format!("job-{pid}-{job}-{nonce:08x}")
}

/// The process id in the name of a job's scratch directory.
pub fn scratch_job_dir_pid(name: &str) -> Option<u32> {
    name.strip_prefix("job-")
        .and_then(|n| n.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
}

/// Name of the `n`th file of a job's scratch directory (run files, the writer's pages).
pub fn scratch_file_name(stem: &str, n: u64, extension: &str) -> String {
    format!("{stem}-{n:06}.{extension}")
}

/// Name of a staged (downloaded) input in a job's scratch directory.
pub fn staged_input_name(ordinal: usize) -> String {
    format!("input-{ordinal:06}.parquet")
}

/// True for a base name the reader rule counts as an ingest file: `*.parquet`, starting with
/// neither `_` nor `.` (DESIGN.md's storage layout). Any other character is the writer's
/// choice (`\`, non-ASCII, C1 controls); a name holding an ASCII control character cannot be
/// addressed by the object store and is reported, not read ([`crate::store::Store::list`]).
pub fn is_ingest_file_name(name: &str) -> bool {
    name.len() > ".parquet".len()
        && name.ends_with(".parquet")
        && !name.starts_with('_')
        && !name.starts_with('.')
        && !name.contains('/')
        && !name.chars().any(|c| c.is_ascii_control())
}

/// True for a writer's side file, given its path under the ingest prefix: a segment (directory
/// or file name) starting with `_` or `.` (`_SUCCESS`, `_committed_*`, `_started_*`,
/// `_temporary/…`, `.part-0000.crc`) or a name ending in `.crc`. Side files are not data:
/// every part of the system ignores them (the README's storage layout).
///
/// INVARIANT: `.` and `..` segments and empty segments are never side files: a key holding
/// them fails the grammar and is rejected, never ignored.
pub fn is_writer_side_file(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return false;
    }
    let side_segment = segments
        .iter()
        .any(|s| s.starts_with('_') || s.starts_with('.'));
    let crc = segments.last().is_some_and(|name| name.ends_with(".crc"));
    side_segment || crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_names_match_their_pattern_and_never_side_files() {
        let default = InputNames::default();
        for (name, input) in [
            ("a.parquet", true),
            ("a.parquet.tmp", false),
            (".parquet", false),
            ("_a.parquet", false),
            (".a.parquet", false),
            ("a", false),
        ] {
            assert_eq!(default.matches(name), input, "{name}");
        }
        let any = InputNames::parse("*").expect("a pattern");
        for (name, input) in [
            ("logs-1-2026-11-29-10-00-00-abc", true),
            ("a.parquet", true),
            ("_SUCCESS", false),
            (".part-0.crc", false),
            ("ctl\u{1}x", false),
        ] {
            assert_eq!(any.matches(name), input, "{name}");
        }
        let firehose = InputNames::parse("stream-?-*").expect("a pattern");
        assert!(firehose.matches("stream-1-2026-abc"));
        assert!(!firehose.matches("stream-12-2026"));
        assert!(!firehose.matches("other-1-2026"));
        for bad in ["", "a/*", "  "] {
            assert!(InputNames::parse(bad).is_err(), "{bad:?}");
        }
        let layout = KeyLayout::from_settings(None, None, Some("*")).expect("a layout");
        let (_, file) = layout
            .parse_ingest_key("data/tenant=a/year=2026/month=11/day=29/hour=10/noext")
            .expect("an input");
        assert_eq!(file, "noext");
        assert!(
            KeyLayout::default()
                .parse_ingest_key("data/tenant=a/year=2026/month=11/day=29/hour=10/noext")
                .is_err()
        );
    }

    #[test]
    fn formats_and_parses_round_trip() {
        let p = PartitionId::parse("acme", "2026-11-29T10").unwrap();
        let layout = KeyLayout::default();
        let key = format!("{}/f1.parquet", layout.ingest_dir(&p));
        assert_eq!(
            key,
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/f1.parquet"
        );
        let (parsed, file) = layout.parse_ingest_key(&key).unwrap();
        assert_eq!(parsed, p);
        assert_eq!(file, "f1.parquet");
        assert_eq!(p.hour_label(), "2026-11-29T10");
    }

    #[test]
    fn partitions_without_a_tenant_drop_its_level_from_every_key() {
        let layout = KeyLayout::from_template("logs/%Y/%m/%d/%H").expect("a layout");
        assert!(!layout.has_tenant());
        let (p, file) = layout
            .parse_ingest_key("logs/2026/11/29/10/firehose-1-2026-11-29-10-00-00.parquet")
            .expect("an ingest key");
        assert_eq!((p.tenant(), p.hour_label()), (None, "2026-11-29T10".into()));
        assert_eq!(file, "firehose-1-2026-11-29-10-00-00.parquet");
        assert_eq!(p.label(), "2026-11-29T10");
        assert_eq!(layout.ingest_dir(&p).as_ref(), "logs/2026/11/29/10");
        let own = "year=2026/month=11/day=29/hour=10";
        assert_eq!(p.relative_dir(), own);
        assert_eq!(
            layout.compacted_dir(&p).as_ref(),
            format!("compacted/{own}")
        );
        assert_eq!(
            layout.manifest_key(&p, 3).as_ref(),
            format!("_compaction/manifests/{own}/v00000000000000000003.json")
        );
        // Metadata keys read back to the same partition, with and without a tenant.
        let with = PartitionId::parse("acme", "2026-11-29T10").expect("a partition");
        for partition in [&p, &with] {
            assert_eq!(
                &parse_job_key(&job_key(partition)).expect("a job key"),
                partition
            );
            assert_eq!(
                &parse_late_key(late_key(partition).as_ref()).expect("a late key"),
                partition
            );
            assert_eq!(
                &parse_gc_due_key(gc_due_key(partition).as_ref()).expect("a due key"),
                partition
            );
        }
        assert!(parse_job_key("_compaction/jobs/year=2026/month=11/day=29/hour=1.json").is_err());
        // A tenant is refused where the layout has none, and required where it has one.
        let refused = layout.partition(Some("acme"), "2026-11-29T10").unwrap_err();
        assert!(refused.to_string().contains("no tenant level"), "{refused}");
        assert_eq!(
            layout.partition(None, "2026-11-29T10").expect("the hour"),
            p
        );
        let required = KeyLayout::default()
            .partition(None, "2026-11-29T10")
            .unwrap_err();
        assert!(
            required.to_string().contains("name the tenant"),
            "{required}"
        );
        assert_eq!(
            KeyLayout::default()
                .partition(Some("acme"), "2026-11-29T10")
                .expect("a partition"),
            with
        );
    }

    #[test]
    fn rejects_bad_keys() {
        let layout = KeyLayout::default();
        for key in [
            "data/tenant=acme/year=2026/month=13/day=29/hour=10/f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=25/f.parquet",
            "data/tenant=acme/year=2026/month=02/day=30/hour=10/f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=1/f.parquet",
            "data/tenant=/year=2026/month=11/day=29/hour=10/f.parquet",
            "data/tenant=.x/year=2026/month=11/day=29/hour=10/f.parquet",
            "data/tenant=a b/year=2026/month=11/day=29/hour=10/f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/_tmp.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/.f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/f.json",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/x/f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10",
            "data/tenant=acme/../year=2026/month=11/day=29/hour=10/f.parquet",
            "compacted/tenant=acme/year=2026/month=11/day=29/hour=10/f.parquet",
            "datax/tenant=acme/year=2026/month=11/day=29/hour=10/f.parquet",
        ] {
            assert!(
                layout.parse_ingest_key(key).is_err(),
                "{key} should be rejected"
            );
        }
    }

    #[test]
    fn ingest_names_are_any_addressable_parquet_name_but_side_files() {
        for name in [
            "f.parquet",
            "back\\slash.parquet",
            "c1\u{85}.parquet",
            "é ~%.parquet",
        ] {
            assert!(is_ingest_file_name(name), "{name:?} is data");
        }
        for name in [
            ".parquet",
            "_f.parquet",
            ".f.parquet",
            "f.json",
            "a/f.parquet",
            "ctl\u{1}.parquet",
            "tab\t.parquet",
        ] {
            assert!(!is_ingest_file_name(name), "{name:?} is not data");
        }
    }

    #[test]
    fn parses_version_names() {
        assert_eq!(
            parse_version(&Path::from("a/v00000000000000000007.json")),
            Some(7)
        );
        assert_eq!(parse_version(&Path::from("a/v7.json")), None);
        assert_eq!(parse_version(&Path::from("a/x.json")), None);
    }

    #[test]
    fn parses_hours_strictly() {
        assert!(parse_hour("2026-11-29T10").is_ok());
        for bad in [
            "2026-11-29",
            "2026-11-29T24",
            "2026-1-29T10",
            "2026-11-29 10",
            "+026-11-29T10",
        ] {
            assert!(parse_hour(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn time_range_is_one_hour() {
        let p = PartitionId::parse("t", "1970-01-01T01").unwrap();
        assert_eq!(p.time_range_nanos(), (HOUR_NANOS, 2 * HOUR_NANOS));
    }

    #[test]
    fn tenant_rules() {
        assert!(validate_tenant("a").is_ok());
        assert!(validate_tenant(&"a".repeat(128)).is_ok());
        assert!(validate_tenant(&"a".repeat(129)).is_err());
        assert!(validate_tenant("a/b").is_err());
        assert!(validate_tenant("é").is_err());
    }
}

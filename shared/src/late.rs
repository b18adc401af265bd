//! The late-file policy: when files that land in an hour already compacted are merged into it.
//!
//! Merging a late file rewrites the outputs it joins, so merging each one as it lands rewrites
//! an hour over and over. Late files wait instead, up to [`LatePolicy::wait`] after the first of
//! them arrived, or until together they reach [`LatePolicy::share`] of the hour's compacted
//! bytes; then they are merged together, once. Waiting costs readers only: late files are live
//! from the moment they land (the reader rule), and a window scans their row groups besides the
//! outputs' until they are merged.
//!
//! Waiting never delays checking: every late file is checked promptly (footer and page walk) by
//! a job that merges nothing, and a bad one is quarantined at once. The files a check passed are
//! recorded in the partition's checked-late record ([`LATE_PREFIX`]), so each is checked once,
//! and the sweep finds the partitions with late files waiting whatever the hour's age.
//!
//! The bound: with the defaults (a day, half the hour), a day of late files trickling into an
//! hour costs one rewrite of it, so compaction writes under twice the hour's compacted bytes
//! while the late bytes stay under the hour's; late bytes enough to reach the share are merged
//! at most at three bytes written for each late byte (the hour plus at least half its size).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::partition::{LATE_PREFIX, PartitionId, late_key};
use crate::settings::{Lookup, get_or, parse_duration};
use crate::store::Store;

/// The longest a late file waits before it is merged when nothing else says.
pub const DEFAULT_LATE_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The share of the hour's compacted bytes late files reach to be merged at once when nothing
/// else says.
pub const DEFAULT_LATE_SHARE: f64 = 0.5;

/// When late files are merged (`OURIOS_LATE_WAIT`, `OURIOS_LATE_SHARE`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatePolicy {
    /// The longest a late file waits before it is merged, from the arrival of the first one
    /// waiting.
    pub wait: Duration,
    /// The share of the hour's compacted bytes that the late files' bytes reach to be merged at
    /// once (0 merges every late file at once).
    pub share: f64,
}

impl Default for LatePolicy {
    fn default() -> Self {
        Self {
            wait: DEFAULT_LATE_WAIT,
            share: DEFAULT_LATE_SHARE,
        }
    }
}

impl LatePolicy {
    /// The policy that merges every late file at once (what a compaction asked for by hand
    /// does).
    pub const AT_ONCE: LatePolicy = LatePolicy {
        wait: Duration::ZERO,
        share: 0.0,
    };

    /// Reads `OURIOS_LATE_WAIT` and `OURIOS_LATE_SHARE` through `lookup`, each defaulting to
    /// `defaults`' value.
    pub fn from_lookup(lookup: Lookup<'_>, defaults: LatePolicy) -> Result<Self> {
        Ok(Self {
            wait: get_or(lookup, "OURIOS_LATE_WAIT", defaults.wait, parse_duration)?,
            share: get_or(lookup, "OURIOS_LATE_SHARE", defaults.share, parse_share)?,
        })
    }

    /// True when `lookup` sets either variable.
    pub fn is_set(lookup: Lookup<'_>) -> bool {
        ["OURIOS_LATE_WAIT", "OURIOS_LATE_SHARE"]
            .iter()
            .any(|name| lookup(name).is_some_and(|v| !v.trim().is_empty()))
    }
}

/// Parses a share: a fraction (`0.5`) or a percentage (`50%`), at least 0.
pub fn parse_share(raw: &str) -> Result<f64> {
    let text = raw.trim();
    let (number, scale) = match text.strip_suffix('%') {
        Some(percent) => (percent.trim(), 100.0),
        None => (text, 1.0),
    };
    let bad = || Error::Config {
        message: format!("{raw:?} is not a share (use a fraction such as 0.5, or 50%)"),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    if !value.is_finite() || value < 0.0 {
        return Err(bad());
    }
    Ok(value / scale)
}

/// What the late files of a compacted hour amount to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LateFiles {
    /// Late files live (uncompacted, not quarantined).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of the hour's live compacted outputs.
    pub compacted_bytes: u64,
    /// When the first of them arrived (the store's date of the oldest).
    pub first_arrived: DateTime<Utc>,
    /// Those no check has passed yet.
    pub unchecked: usize,
}

/// What the policy does with an hour's late files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LateAction {
    /// Merge them now.
    Merge,
    /// Check the files no check has passed yet, merge nothing.
    Check,
    /// Every one is checked: wait.
    Wait,
}

/// Why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LateReason {
    /// Their bytes reached the share of the hour's compacted bytes.
    ShareReached,
    /// The first of them has waited the longest a late file waits.
    WaitOver,
    /// Neither yet.
    Waiting,
}

/// The policy's verdict on an hour's late files, with the facts it weighed (the planner's
/// answer and the job records carry it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LateVerdict {
    /// What is done.
    pub action: LateAction,
    /// Why.
    pub reason: LateReason,
    /// Late files waiting.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of the hour's compacted outputs.
    pub compacted_bytes: u64,
    /// `bytes / compacted_bytes`.
    pub share: f64,
    /// The share that merges at once.
    pub share_limit: f64,
    /// When they are merged at the latest.
    pub merge_at: DateTime<Utc>,
    /// Files not checked yet.
    pub unchecked: usize,
}

/// The policy applied to `late` at `now`.
pub fn decide(policy: &LatePolicy, late: &LateFiles, now: DateTime<Utc>) -> LateVerdict {
    let wait = chrono::Duration::from_std(policy.wait).unwrap_or(chrono::Duration::MAX);
    let merge_at = late
        .first_arrived
        .checked_add_signed(wait)
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    let share = if late.compacted_bytes == 0 {
        f64::INFINITY
    } else {
        late.bytes as f64 / late.compacted_bytes as f64
    };
    let (action, reason) = if share >= policy.share {
        (LateAction::Merge, LateReason::ShareReached)
    } else if now >= merge_at {
        (LateAction::Merge, LateReason::WaitOver)
    } else if late.unchecked > 0 {
        (LateAction::Check, LateReason::Waiting)
    } else {
        (LateAction::Wait, LateReason::Waiting)
    };
    LateVerdict {
        action,
        reason,
        files: late.files,
        bytes: late.bytes,
        compacted_bytes: late.compacted_bytes,
        share,
        share_limit: policy.share,
        merge_at,
        unchecked: late.unchecked,
    }
}

impl std::fmt::Display for LateVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (files, bytes) = (self.files, self.bytes);
        let share = 100.0 * self.share;
        let limit = 100.0 * self.share_limit;
        let merge_at = self.merge_at.format("%Y-%m-%dT%H:%M:%SZ");
        let amount = format!(
            "{files} late file(s) of {bytes} bytes, {share:.1}% of the hour's {} compacted bytes",
            self.compacted_bytes
        );
        match (self.action, self.reason) {
            (LateAction::Merge, LateReason::ShareReached) => {
                write!(f, "{amount}: reached the {limit:.1}% share, merged now")
            }
            (LateAction::Merge, _) => write!(
                f,
                "{amount}: the first has waited the longest a late file waits (until {merge_at}), merged now"
            ),
            (LateAction::Check, _) => write!(
                f,
                "{amount}, under the {limit:.1}% share: {} checked now, merged by {merge_at}",
                self.unchecked
            ),
            (LateAction::Wait, _) => write!(
                f,
                "{amount}, under the {limit:.1}% share and all checked: merged by {merge_at}"
            ),
        }
    }
}

/// Format version of a checked-late record.
pub const CHECKED_LATE_FORMAT: u32 = 1;

/// A late file a check passed, by key and size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CheckedFile {
    /// Key relative to the store root.
    pub key: String,
    /// Its size when checked.
    pub bytes: u64,
}

impl CheckedFile {
    /// The entry of a listed file.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            key: meta.location.to_string(),
            bytes: meta.size,
        }
    }
}

/// The partition's checked-late record `_compaction/late/<partition>.json`: the late files a
/// check passed that wait to be merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedLate {
    /// Format of this document.
    pub format: u32,
    /// The partition, as `tenant=…/…/hour=…`.
    pub partition: String,
    /// The files, by key.
    pub checked: BTreeSet<CheckedFile>,
}

impl CheckedLate {
    /// An empty record of `partition`.
    pub fn new(partition: &PartitionId) -> Self {
        Self {
            format: CHECKED_LATE_FORMAT,
            partition: partition.relative_dir(),
            checked: BTreeSet::new(),
        }
    }

    /// Files of `live` no check has passed.
    pub fn unchecked<'a>(&self, live: &'a [ObjectMeta]) -> Vec<&'a ObjectMeta> {
        live.iter()
            .filter(|m| !self.checked.contains(&CheckedFile::of(m)))
            .collect()
    }

    /// Keeps only the entries of files in `live`.
    pub fn retain_live(&mut self, live: &[ObjectMeta]) {
        let live: BTreeSet<CheckedFile> = live.iter().map(CheckedFile::of).collect();
        self.checked.retain(|c| live.contains(c));
    }
}

/// Reads `partition`'s checked-late record: empty when absent, and when unreadable (a record
/// that cannot be read only costs a second check).
pub async fn read_checked(store: &Store, partition: &PartitionId) -> Result<CheckedLate> {
    let key = late_key(partition);
    let found = match store.get_if_present(&key).await {
        Ok(found) => found,
        Err(object_store::Error::PermissionDenied { .. }) => None,
        Err(e) => return Err(Error::store("get", &key, e)),
    };
    let record = found.and_then(|(_, bytes)| {
        let record = serde_json::from_slice::<CheckedLate>(&bytes).ok();
        if record.is_none() {
            tracing::warn!(key = %key, "the checked-late record is not readable; its files are checked again");
        }
        record
    });
    Ok(record
        .filter(|r| r.format == CHECKED_LATE_FORMAT)
        .unwrap_or_else(|| CheckedLate::new(partition)))
}

/// Writes `partition`'s checked-late record.
pub async fn write_checked(
    store: &Store,
    partition: &PartitionId,
    record: &CheckedLate,
) -> Result<()> {
    let key = late_key(partition);
    // Plain strings and integers always serialize.
    let body = serde_json::to_vec_pretty(record).unwrap_or_default();
    store
        .object_store()
        .put(&key, PutPayload::from(body))
        .await
        .map(drop)
        .map_err(|e| Error::store("put", &key, e))
}

/// Deletes `partition`'s checked-late record once no late file waits; best effort (a record
/// left only costs the sweep a look).
pub async fn forget_checked(store: &Store, partition: &PartitionId) {
    let key = late_key(partition);
    match store.object_store().delete(&key).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => {
            tracing::warn!(key = %key, error = %e, "could not delete the checked-late record")
        }
    }
}

/// The prefix the sweep lists for partitions with late files waiting.
pub fn records_prefix() -> Path {
    Path::from(LATE_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn late(files: usize, bytes: u64, unchecked: usize) -> LateFiles {
        LateFiles {
            files,
            bytes,
            compacted_bytes: 1000,
            first_arrived: at("2026-11-29T12:00:00Z"),
            unchecked,
        }
    }

    #[test]
    fn late_files_wait_for_the_share_or_the_wait() {
        let policy = LatePolicy {
            wait: Duration::from_secs(3600),
            share: 0.5,
        };
        let early = at("2026-11-29T12:30:00Z");
        let cases = [
            (
                late(3, 100, 1),
                early,
                LateAction::Check,
                LateReason::Waiting,
            ),
            (
                late(3, 100, 0),
                early,
                LateAction::Wait,
                LateReason::Waiting,
            ),
            (
                late(3, 499, 0),
                early,
                LateAction::Wait,
                LateReason::Waiting,
            ),
            (
                late(3, 500, 2),
                early,
                LateAction::Merge,
                LateReason::ShareReached,
            ),
            (
                late(1, 1, 1),
                at("2026-11-29T13:00:00Z"),
                LateAction::Merge,
                LateReason::WaitOver,
            ),
        ];
        for (files, now, action, reason) in cases {
            let verdict = decide(&policy, &files, now);
            assert_eq!(
                (verdict.action, verdict.reason),
                (action, reason),
                "{files:?} at {now}: {verdict}"
            );
            assert_eq!(verdict.merge_at, at("2026-11-29T13:00:00Z"));
        }
        // Nothing compacted to weigh against: any late byte is the whole share.
        let empty = LateFiles {
            compacted_bytes: 0,
            ..late(1, 1, 0)
        };
        assert_eq!(decide(&policy, &empty, early).action, LateAction::Merge);
        assert_eq!(
            decide(&LatePolicy::AT_ONCE, &late(1, 0, 0), early).action,
            LateAction::Merge
        );
    }

    #[test]
    fn shares_are_fractions_or_percentages() {
        assert_eq!(parse_share("0.5").unwrap(), 0.5);
        assert_eq!(parse_share(" 25% ").unwrap(), 0.25);
        assert_eq!(parse_share("2").unwrap(), 2.0);
        for bad in ["-0.1", "half", "NaN", "inf", "%"] {
            let err = parse_share(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn the_record_knows_a_file_by_key_and_size() {
        let partition = crate::testing::test_partition();
        let meta = |key: &str, size: u64| ObjectMeta {
            location: Path::from(key),
            last_modified: at("2026-11-29T12:00:00Z"),
            size,
            e_tag: None,
            version: None,
        };
        let live = vec![meta("data/a.parquet", 10), meta("data/b.parquet", 20)];
        let mut record = CheckedLate::new(&partition);
        record.checked.insert(CheckedFile::of(&live[0]));
        record.checked.insert(CheckedFile {
            key: "data/b.parquet".into(),
            bytes: 19,
        });
        record.checked.insert(CheckedFile {
            key: "data/gone.parquet".into(),
            bytes: 5,
        });
        let unchecked: Vec<_> = record.unchecked(&live).iter().map(|m| m.size).collect();
        assert_eq!(
            unchecked,
            [20],
            "a file rewritten with another size is checked again"
        );
        record.retain_live(&live);
        assert_eq!(record.checked.len(), 1);
    }
}

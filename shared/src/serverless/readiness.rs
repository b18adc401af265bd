//! Readiness and dispatch decisions for one partition: pure functions of the listing facts,
//! the manifest, the job record, the clock reading and the settings (`functions/README.md`).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::late::{LateAction, LateFiles, LatePolicy, LateVerdict, decide};
use crate::manifest::{LiveSet, Manifest};
use crate::options::JobMode;
use crate::partition::PartitionId;

/// The readiness thresholds (`OURIOS_LATENESS_GRACE`, `OURIOS_PRESSURE_FILES`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadinessConfig {
    /// How long after an hour closes before it is compacted (late files still land).
    pub lateness_grace: Duration,
    /// Uncompacted files that make an open hour ready (small-file pressure).
    pub pressure_files: usize,
    /// Uncompacted bytes that make an open hour ready.
    pub pressure_bytes: u64,
    /// Hours back from now that the sweep looks at.
    pub sweep_hours: u32,
    /// Age after which a job record is stale and may be replaced; longer than the
    /// compactor's timeout times its attempts.
    pub job_lease: Duration,
    /// The GC grace (`OURIOS_GC_GRACE`): a partition's garbage-due marker older than it gets
    /// a job from the sweep, whose GC deletes what is past it.
    pub gc_grace: Duration,
    /// When late files are merged into a compacted hour (`OURIOS_LATE_WAIT`,
    /// `OURIOS_LATE_SHARE`).
    pub late: LatePolicy,
}

impl Default for ReadinessConfig {
    fn default() -> Self {
        Self {
            lateness_grace: Duration::from_secs(10 * 60),
            pressure_files: 500,
            pressure_bytes: 1 << 30,
            sweep_hours: 48,
            job_lease: Duration::from_secs(60 * 60),
            gc_grace: crate::options::DEFAULT_GC_GRACE,
            late: LatePolicy::default(),
        }
    }
}

/// What the listing and the manifest say about a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFacts {
    /// The partition.
    pub partition: PartitionId,
    /// Live ingest files (not yet compacted, not quarantined).
    pub num_uncompacted_files: usize,
    /// Their bytes.
    pub uncompacted_bytes: u64,
    /// Live compacted files.
    pub num_compacted_files: usize,
    /// Whether the live compacted files came out of one commit (see
    /// [`Manifest::compacted_in_one_piece`]).
    pub compacted_in_one_piece: bool,
    /// Latest manifest version (0: never compacted).
    pub manifest_version: u64,
    /// Bytes of the live compacted files.
    pub compacted_bytes: u64,
    /// When the oldest uncompacted file arrived (the store's date).
    pub first_uncompacted: Option<DateTime<Utc>>,
    /// When the newest uncompacted file arrived (the store's date).
    pub last_uncompacted: Option<DateTime<Utc>>,
    /// Uncompacted files no check has passed (all of them unless the checked-late record says
    /// otherwise).
    pub unchecked_files: usize,
}

impl PartitionFacts {
    /// Facts from the reader rule's live set and the latest manifest.
    pub fn new(partition: &PartitionId, live: &LiveSet, manifest: &Manifest) -> Self {
        Self {
            partition: partition.clone(),
            num_uncompacted_files: live.ingest.len(),
            uncompacted_bytes: live.ingest.iter().map(|m| m.size).sum(),
            num_compacted_files: live.compacted.len(),
            compacted_in_one_piece: manifest.compacted_in_one_piece(),
            manifest_version: manifest.version,
            compacted_bytes: manifest.compacted.iter().map(|c| c.bytes).sum(),
            first_uncompacted: live.ingest.iter().map(|m| m.last_modified).min(),
            last_uncompacted: live.ingest.iter().map(|m| m.last_modified).max(),
            unchecked_files: live.ingest.len(),
        }
    }

    /// Facts of a partition with nothing live.
    pub fn empty(partition: &PartitionId) -> Self {
        Self::new(partition, &LiveSet::default(), &Manifest::empty(""))
    }

    /// True when a compaction would change the live set.
    pub fn has_work(&self) -> bool {
        self.num_uncompacted_files > 0 || !self.compacted_in_one_piece
    }
}

/// The partition's job record, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// No job is scheduled or running.
    Absent,
    /// A job record exists, written at this instant (store clock).
    Present {
        /// When the record was last written.
        written_at: DateTime<Utc>,
    },
    /// The job record says the partition's job was given up after failing the same way on
    /// every attempt (store clock): only a newer file or a request dispatches it again.
    Parked {
        /// When the record was parked.
        since: DateTime<Utc>,
    },
}

/// Why a partition is ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Ready {
    /// The hour closed and the lateness grace passed (files that arrived before it closed
    /// are uncompacted, or the outputs of several commits are to be merged).
    HourClosed,
    /// Late files in an hour already compacted are merged, by the late-file policy.
    LateFiles(LateVerdict),
    /// Late files in an hour already compacted wait, and some are not checked yet: a job
    /// checks them and merges nothing.
    CheckLateFiles(LateVerdict),
    /// The open hour has too many small files.
    SmallFilePressure {
        /// Uncompacted files.
        files: usize,
        /// Their bytes.
        bytes: u64,
    },
    /// An operator asked (backfill): readiness is not checked.
    Requested,
}

impl Ready {
    /// What the job dispatched for this reason does.
    pub fn mode(&self) -> JobMode {
        match self {
            Ready::CheckLateFiles(_) => JobMode::Check,
            Ready::SmallFilePressure { .. } => JobMode::Append,
            _ => JobMode::Merge,
        }
    }

    /// The late-file policy's verdict, when it decided.
    pub fn late(&self) -> Option<&LateVerdict> {
        match self {
            Ready::LateFiles(verdict) | Ready::CheckLateFiles(verdict) => Some(verdict),
            _ => None,
        }
    }
}

/// Why a partition is left alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NotReady {
    /// Nothing uncompacted.
    NothingToCompact,
    /// The hour is open (or in its grace) and below the pressure thresholds.
    HourOpen {
        /// When it becomes ready without more files.
        ready_at: DateTime<Utc>,
    },
    /// A job for the partition is already scheduled or running.
    JobActive {
        /// When its record was written.
        since: DateTime<Utc>,
    },
    /// Late files in an hour already compacted wait to be merged, every one checked.
    LateFilesWait(LateVerdict),
    /// The partition's job failed the same way on every attempt and was given up; no file
    /// arrived since.
    Parked {
        /// When it was given up.
        since: DateTime<Utc>,
    },
}

impl NotReady {
    /// The late-file policy's verdict, when it decided.
    pub fn late(&self) -> Option<&LateVerdict> {
        match self {
            NotReady::LateFilesWait(verdict) => Some(verdict),
            _ => None,
        }
    }
}

/// What to do with a partition.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Create the job record (create-only).
    Dispatch(Ready),
    /// Replace a stale job record (conditional overwrite on its ETag).
    ReplaceStale {
        /// Why the partition is ready.
        ready: Ready,
        /// When the stale record was written.
        stale_since: DateTime<Utc>,
    },
    /// Leave it.
    Skip(NotReady),
}

impl Decision {
    /// The decision's short name for responses and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Dispatch(_) | Decision::ReplaceStale { .. } => "dispatch",
            Decision::Skip(NotReady::NothingToCompact) => "nothing_to_compact",
            Decision::Skip(NotReady::HourOpen { .. } | NotReady::LateFilesWait(_)) => "not_ready",
            Decision::Skip(NotReady::JobActive { .. }) => "job_active",
            Decision::Skip(NotReady::Parked { .. }) => "parked",
        }
    }

    /// The late-file policy's verdict, when it decided.
    pub fn late(&self) -> Option<&LateVerdict> {
        match self {
            Decision::Dispatch(ready) | Decision::ReplaceStale { ready, .. } => ready.late(),
            Decision::Skip(not_ready) => not_ready.late(),
        }
    }
}

impl fmt::Display for Ready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ready::HourClosed => f.write_str("hour closed and lateness grace passed"),
            Ready::LateFiles(verdict) | Ready::CheckLateFiles(verdict) => {
                write!(f, "{verdict}")
            }
            Ready::SmallFilePressure { files, bytes } => {
                write!(
                    f,
                    "small-file pressure: {files} files, {bytes} bytes uncompacted"
                )
            }
            Ready::Requested => f.write_str("requested by backfill"),
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Dispatch(ready) => write!(f, "{ready}"),
            Decision::ReplaceStale { ready, stale_since } => write!(
                f,
                "{ready}; replacing the stale (or parked) job record written at {}",
                stale_since.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            Decision::Skip(NotReady::NothingToCompact) => f.write_str("no uncompacted files"),
            Decision::Skip(NotReady::HourOpen { ready_at }) => write!(
                f,
                "hour still open or in its lateness grace until {} and below the pressure thresholds",
                ready_at.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            Decision::Skip(NotReady::LateFilesWait(verdict)) => write!(f, "{verdict}"),
            Decision::Skip(NotReady::JobActive { since }) => write!(
                f,
                "a job is already scheduled or running (record written at {})",
                since.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            Decision::Skip(NotReady::Parked { since }) => write!(
                f,
                "parked since {}: its job failed the same way on every attempt (the job record \
                 says why); a new file or a request dispatches it again",
                since.format("%Y-%m-%dT%H:%M:%SZ")
            ),
        }
    }
}

/// When `partition` becomes ready by the clock under `config`: its hour's close plus the
/// lateness grace (the latest instant there is, for a grace beyond the calendar).
pub fn ready_at(partition: &PartitionId, config: &ReadinessConfig) -> DateTime<Utc> {
    let grace = chrono::Duration::from_std(config.lateness_grace).unwrap_or(chrono::Duration::MAX);
    (partition.next_hour().hour_start())
        .checked_add_signed(grace)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Whether the partition is ready by the clock and its files, ignoring any job.
pub fn readiness(
    facts: &PartitionFacts,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
) -> Result<Ready, NotReady> {
    if !facts.has_work() {
        return Err(NotReady::NothingToCompact);
    }
    let ready_at = ready_at(&facts.partition, config);
    if now >= ready_at {
        // Files that arrived before the hour closed are its tail, not late: merged now.
        let tail = facts
            .first_uncompacted
            .is_some_and(|first| first < ready_at);
        let Some(first_arrived) = facts.first_uncompacted.filter(|_| !tail) else {
            return Ok(Ready::HourClosed);
        };
        // Pieces the open hour was compacted into are merged at its close, late files or not;
        // an hour with no compacted file (never compacted, or its files all quarantined) has
        // nothing a merge would rewrite.
        if facts.num_compacted_files == 0 || !facts.compacted_in_one_piece {
            return Ok(Ready::HourClosed);
        }
        let late = LateFiles {
            files: facts.num_uncompacted_files,
            bytes: facts.uncompacted_bytes,
            compacted_bytes: facts.compacted_bytes,
            first_arrived,
            unchecked: facts.unchecked_files,
        };
        let verdict = decide(&config.late, &late, now);
        return match verdict.action {
            LateAction::Merge => Ok(Ready::LateFiles(verdict)),
            LateAction::Check => Ok(Ready::CheckLateFiles(verdict)),
            LateAction::Wait => Err(NotReady::LateFilesWait(verdict)),
        };
    }
    if facts.num_uncompacted_files >= config.pressure_files
        || facts.uncompacted_bytes >= config.pressure_bytes
    {
        return Ok(Ready::SmallFilePressure {
            files: facts.num_uncompacted_files,
            bytes: facts.uncompacted_bytes,
        });
    }
    Err(NotReady::HourOpen { ready_at })
}

/// Decides what to do with a partition. `requested` skips the readiness check (backfill)
/// but never the single-flight rule.
pub fn plan_partition(
    facts: &PartitionFacts,
    job: JobState,
    now: DateTime<Utc>,
    config: &ReadinessConfig,
    requested: bool,
) -> Decision {
    // A request merges what is there: an open hour, and late files the policy would keep
    // waiting.
    let ready = match readiness(facts, now, config) {
        Ok(Ready::CheckLateFiles(_)) if requested => Ready::Requested,
        Ok(ready) => ready,
        Err(NotReady::HourOpen { .. } | NotReady::LateFilesWait(_)) if requested => {
            Ready::Requested
        }
        Err(not_ready) => return Decision::Skip(not_ready),
    };
    match job {
        JobState::Absent => Decision::Dispatch(ready),
        JobState::Present { written_at } => {
            let lease =
                chrono::Duration::from_std(config.job_lease).unwrap_or(chrono::Duration::MAX);
            if now - written_at > lease {
                Decision::ReplaceStale {
                    ready,
                    stale_since: written_at,
                }
            } else {
                Decision::Skip(NotReady::JobActive { since: written_at })
            }
        }
        JobState::Parked { since } => {
            let newer_file = facts.last_uncompacted.is_some_and(|t| t > since);
            if requested || newer_file {
                Decision::ReplaceStale {
                    ready,
                    stale_since: since,
                }
            } else {
                Decision::Skip(NotReady::Parked { since })
            }
        }
    }
}

/// The hours the sweep covers: the `hours` whole hours before `now`'s hour, and `now`'s.
pub fn sweep_window(now: DateTime<Utc>, hours: u32) -> Vec<DateTime<Utc>> {
    let Ok(current) = PartitionId::hour_only(now) else {
        return Vec::new();
    };
    let start = current.hour_start();
    (0..=i64::from(hours))
        .rev()
        .map(|back| start - chrono::Duration::hours(back))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(files: usize, bytes: u64, version: u64) -> PartitionFacts {
        PartitionFacts {
            partition: PartitionId::parse("acme", "2026-11-29T10").unwrap(),
            num_uncompacted_files: files,
            uncompacted_bytes: bytes,
            num_compacted_files: usize::from(version > 0),
            compacted_in_one_piece: true,
            manifest_version: version,
            compacted_bytes: 1000 * version,
            first_uncompacted: (files > 0).then(|| at("2026-11-29T10:30:00Z")),
            last_uncompacted: (files > 0).then(|| at("2026-11-29T10:30:00Z")),
            unchecked_files: files,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn readiness_table() {
        let config = ReadinessConfig::default();
        let cases: &[(PartitionFacts, &str, Decision)] = &[
            (
                facts(0, 0, 0),
                "2026-11-30T00:00:00Z",
                Decision::Skip(NotReady::NothingToCompact),
            ),
            (
                facts(3, 300, 0),
                "2026-11-29T10:30:00Z",
                Decision::Skip(NotReady::HourOpen {
                    ready_at: at("2026-11-29T11:10:00Z"),
                }),
            ),
            // Inside the lateness grace: still waiting.
            (
                facts(3, 300, 0),
                "2026-11-29T11:09:59Z",
                Decision::Skip(NotReady::HourOpen {
                    ready_at: at("2026-11-29T11:10:00Z"),
                }),
            ),
            (
                facts(3, 300, 0),
                "2026-11-29T11:10:00Z",
                Decision::Dispatch(Ready::HourClosed),
            ),
            // Compacted at pressure while open: the files of its tail are merged once it closes.
            (
                facts(2, 300, 4),
                "2026-11-29T12:00:00Z",
                Decision::Dispatch(Ready::HourClosed),
            ),
            (
                facts(500, 10, 0),
                "2026-11-29T10:30:00Z",
                Decision::Dispatch(Ready::SmallFilePressure {
                    files: 500,
                    bytes: 10,
                }),
            ),
            (
                facts(1, 1 << 30, 0),
                "2026-11-29T10:30:00Z",
                Decision::Dispatch(Ready::SmallFilePressure {
                    files: 1,
                    bytes: 1 << 30,
                }),
            ),
            // Pieces appended while the hour was open, then a late file: the close merges all.
            (
                PartitionFacts {
                    compacted_in_one_piece: false,
                    first_uncompacted: Some(at("2026-11-29T13:00:00Z")),
                    ..facts(1, 10, 3)
                },
                "2026-11-29T14:00:00Z",
                Decision::Dispatch(Ready::HourClosed),
            ),
            // Compacted and nothing new: nothing to do, however late.
            (
                facts(0, 0, 3),
                "2026-12-29T10:30:00Z",
                Decision::Skip(NotReady::NothingToCompact),
            ),
        ];
        for (facts, now, want) in cases {
            let got = plan_partition(facts, JobState::Absent, at(now), &config, false);
            assert_eq!(&got, want, "{facts:?} at {now}: {got}");
        }
        // Pressure appends a piece; every other reason merges (or checks).
        let pressure = Ready::SmallFilePressure { files: 1, bytes: 1 };
        assert_eq!(pressure.mode(), JobMode::Append);
        assert_eq!(Ready::HourClosed.mode(), JobMode::Merge);
    }

    /// Files that arrive once the hour closed, in an hour already compacted, follow the
    /// late-file policy: checked at once, merged once they reach the share or waited the wait.
    #[test]
    fn late_files_are_checked_at_once_and_merged_by_the_policy() {
        let config = ReadinessConfig {
            late: LatePolicy {
                wait: Duration::from_secs(3600),
                share: 0.5,
            },
            ..ReadinessConfig::default()
        };
        let late = |files: usize, bytes: u64, unchecked: usize| PartitionFacts {
            first_uncompacted: Some(at("2026-11-29T12:00:00Z")),
            unchecked_files: unchecked,
            ..facts(files, bytes, 2)
        };
        let early = at("2026-11-29T12:20:00Z");
        let plan = |facts: &PartitionFacts, now| {
            plan_partition(facts, JobState::Absent, now, &config, false)
        };
        let checked = plan(&late(2, 300, 1), early);
        assert!(
            matches!(checked, Decision::Dispatch(Ready::CheckLateFiles(_))),
            "{checked}"
        );
        let Decision::Dispatch(ready) = &checked else {
            unreachable!()
        };
        assert_eq!(ready.mode(), JobMode::Check);
        assert!(checked.to_string().contains("1 checked now"), "{checked}");

        let waiting = plan(&late(2, 300, 0), early);
        assert_eq!(waiting.label(), "not_ready", "{waiting}");
        let verdict = waiting.late().copied().unwrap();
        assert_eq!(verdict.merge_at, at("2026-11-29T13:00:00Z"));
        assert_eq!(
            (verdict.files, verdict.bytes, verdict.compacted_bytes),
            (2, 300, 2000)
        );

        let share = plan(&late(3, 1000, 0), early);
        assert!(
            matches!(&share, Decision::Dispatch(Ready::LateFiles(v)) if v.reason == crate::late::LateReason::ShareReached),
            "{share}"
        );
        let waited = plan(&late(2, 300, 0), at("2026-11-29T13:00:00Z"));
        assert!(
            matches!(&waited, Decision::Dispatch(r) if r.mode() == JobMode::Merge),
            "{waited}"
        );
        assert!(waited.to_string().contains("merged now"), "{waited}");
    }

    #[test]
    fn an_active_job_blocks_and_a_stale_one_is_replaced() {
        let config = ReadinessConfig::default();
        let f = facts(3, 300, 0);
        let now = at("2026-11-29T12:00:00Z");
        let fresh = JobState::Present {
            written_at: at("2026-11-29T11:30:00Z"),
        };
        assert_eq!(
            plan_partition(&f, fresh, now, &config, false),
            Decision::Skip(NotReady::JobActive {
                since: at("2026-11-29T11:30:00Z")
            })
        );
        let stale = JobState::Present {
            written_at: at("2026-11-29T10:59:59Z"),
        };
        assert_eq!(
            plan_partition(&f, stale, now, &config, false),
            Decision::ReplaceStale {
                ready: Ready::HourClosed,
                stale_since: at("2026-11-29T10:59:59Z")
            }
        );
        // Exactly at the lease: still active.
        let edge = JobState::Present {
            written_at: at("2026-11-29T11:00:00Z"),
        };
        assert_eq!(
            plan_partition(&f, edge, now, &config, false).label(),
            "job_active"
        );
    }

    #[test]
    fn a_request_skips_readiness_but_not_single_flight() {
        let config = ReadinessConfig::default();
        let open = at("2026-11-29T10:05:00Z");
        assert_eq!(
            plan_partition(&facts(1, 1, 0), JobState::Absent, open, &config, true),
            Decision::Dispatch(Ready::Requested)
        );
        assert_eq!(
            plan_partition(&facts(0, 0, 0), JobState::Absent, open, &config, true),
            Decision::Skip(NotReady::NothingToCompact)
        );
        let active = JobState::Present { written_at: open };
        assert_eq!(
            plan_partition(&facts(1, 1, 0), active, open, &config, true).label(),
            "job_active"
        );
        // Late files the policy keeps waiting (checked or not) are merged when asked.
        for unchecked in [0, 1] {
            let waiting = PartitionFacts {
                first_uncompacted: Some(at("2026-11-29T12:00:00Z")),
                unchecked_files: unchecked,
                ..facts(1, 1, 2)
            };
            let later = at("2026-11-29T12:05:00Z");
            let asked = plan_partition(&waiting, JobState::Absent, later, &config, true);
            assert_eq!(asked, Decision::Dispatch(Ready::Requested));
            assert_eq!(
                plan_partition(&waiting, JobState::Absent, later, &config, false).label()
                    == "dispatch",
                unchecked == 1,
                "unasked, only a check is dispatched"
            );
        }
    }

    #[test]
    fn sweep_window_is_bounded_and_ends_now() {
        let window = sweep_window(at("2026-11-29T10:42:00Z"), 2);
        assert_eq!(
            window,
            vec![
                at("2026-11-29T08:00:00Z"),
                at("2026-11-29T09:00:00Z"),
                at("2026-11-29T10:00:00Z")
            ]
        );
    }

    #[test]
    fn a_parked_record_waits_for_a_newer_file_or_a_request() {
        let config = ReadinessConfig::default();
        let now = at("2026-11-30T12:00:00Z");
        let parked_at = at("2026-11-29T13:00:00Z");
        let parked = JobState::Parked { since: parked_at };
        let older = PartitionFacts {
            last_uncompacted: Some(at("2026-11-29T12:59:00Z")),
            ..facts(1, 10, 0)
        };
        assert_eq!(
            plan_partition(&older, parked, now, &config, false),
            Decision::Skip(NotReady::Parked { since: parked_at }),
            "no lease ever makes a parked record stale"
        );
        assert_eq!(
            plan_partition(&older, parked, now, &config, false).label(),
            "parked"
        );
        for (facts, requested) in [
            (older.clone(), true),
            (
                PartitionFacts {
                    last_uncompacted: Some(at("2026-11-29T13:05:00Z")),
                    ..older.clone()
                },
                false,
            ),
        ] {
            assert!(
                matches!(
                    plan_partition(&facts, parked, now, &config, requested),
                    Decision::ReplaceStale { stale_since, .. } if stale_since == parked_at
                ),
                "requested {requested}"
            );
        }
    }
}

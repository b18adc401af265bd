//! The settings both functions read from named variables (store, key layout, readiness);
//! `main` passes the lookup (the environment), so parsing is tested here. The compaction's
//! own settings are [`crate::settings::CompactSettings`], which the CLI shares.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::late::LatePolicy;
use crate::partition::KeyLayout;
use crate::serverless::events::KeyScope;
use crate::serverless::readiness::ReadinessConfig;
use crate::settings::{Lookup, get_or, parse_count, parse_duration, parse_size};
use crate::store::StoreUrl;

/// Least time between two job records a backfill writes when nothing else says.
pub const DEFAULT_BACKFILL_INTERVAL: Duration = Duration::from_millis(100);

/// Settings both functions read (`OURIOS_STORE`, `OURIOS_INGEST_PREFIX`, readiness).
#[derive(Debug, Clone)]
pub struct FunctionSettings {
    /// The store root URL.
    pub store_url: String,
    /// The layout.
    pub layout: KeyLayout,
    /// Bucket and prefix of the root, for event keys.
    pub scope: KeyScope,
    /// Readiness thresholds.
    pub readiness: ReadinessConfig,
    /// Least time between two job records a backfill writes (`OURIOS_BACKFILL_INTERVAL`).
    pub backfill_interval: Duration,
}

impl FunctionSettings {
    /// Reads the settings through `lookup` (a variable's value, if set).
    pub fn from_lookup(lookup: Lookup<'_>) -> Result<Self> {
        let store_url = lookup("OURIOS_STORE")
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| Error::Config {
                message: "OURIOS_STORE is not set; set it to the store root, e.g. s3://logs-bucket"
                    .into(),
            })?;
        let url = StoreUrl::parse(&store_url)?;
        let layout = KeyLayout::from_settings(
            lookup("OURIOS_LAYOUT").as_deref(),
            lookup("OURIOS_INGEST_PREFIX").as_deref(),
            lookup("OURIOS_INPUT_NAMES").as_deref(),
        )?;
        let readiness = readiness_from_lookup(lookup)?;
        Ok(Self {
            store_url,
            layout,
            scope: KeyScope::for_store(&url),
            readiness,
            backfill_interval: get_or(
                lookup,
                "OURIOS_BACKFILL_INTERVAL",
                DEFAULT_BACKFILL_INTERVAL,
                parse_duration,
            )?,
        })
    }
}

/// The readiness thresholds and the late-file policy, read through `lookup` (both functions
/// and the CLI's `compact` read them so).
pub fn readiness_from_lookup(lookup: Lookup<'_>) -> Result<ReadinessConfig> {
    let defaults = ReadinessConfig::default();
    let readiness = ReadinessConfig {
        lateness_grace: get_or(
            lookup,
            "OURIOS_LATENESS_GRACE",
            defaults.lateness_grace,
            parse_duration,
        )?,
        pressure_files: get_or(
            lookup,
            "OURIOS_PRESSURE_FILES",
            defaults.pressure_files as u64,
            parse_count,
        )? as usize,
        pressure_bytes: get_or(
            lookup,
            "OURIOS_PRESSURE_BYTES",
            defaults.pressure_bytes,
            parse_size,
        )?,
        sweep_hours: u32::try_from(get_or(
            lookup,
            "OURIOS_SWEEP_HOURS",
            u64::from(defaults.sweep_hours),
            parse_count,
        )?)
        .map_err(|_| Error::Config {
            message: "OURIOS_SWEEP_HOURS is too large".into(),
        })?,
        job_lease: get_or(
            lookup,
            "OURIOS_JOB_LEASE",
            defaults.job_lease,
            parse_duration,
        )?,
        gc_grace: get_or(lookup, "OURIOS_GC_GRACE", defaults.gc_grace, parse_duration)?,
        late: LatePolicy::from_lookup(lookup, defaults.late)?,
    };
    if readiness.pressure_files == 0
        || readiness.pressure_bytes == 0
        || readiness.job_lease.is_zero()
    {
        return Err(Error::Config {
            message:
                "OURIOS_PRESSURE_FILES, OURIOS_PRESSURE_BYTES and OURIOS_JOB_LEASE must be positive"
                    .into(),
        });
    }
    Ok(readiness)
}

/// Deadlines below this are not Unix milliseconds (2001-09-09) but a duration: cargo-lambda's
/// local emulator sends its timeout (e.g. `600000`) in the deadline header.
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

/// The invocation deadline as an `Instant`, from the runtime's deadline header read at
/// `now_ms` (Unix milliseconds) and `now`.
pub fn deadline_instant(deadline_ms: u64, now_ms: u64, now: Instant) -> Option<Instant> {
    let remaining_ms = if deadline_ms < EPOCH_MS_FLOOR {
        deadline_ms
    } else {
        deadline_ms.saturating_sub(now_ms)
    };
    now.checked_add(Duration::from_millis(remaining_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::fixed_lookup as lookup;

    #[test]
    fn defaults_and_overrides() {
        let s = FunctionSettings::from_lookup(&lookup(&[("OURIOS_STORE", "s3://logs-bucket")]))
            .unwrap();
        assert_eq!(s.layout.ingest_prefix(), "data");
        assert_eq!(s.readiness, ReadinessConfig::default());
        assert_eq!(
            s.scope,
            KeyScope::for_store(&StoreUrl::parse("s3://logs-bucket").unwrap())
        );

        let s = FunctionSettings::from_lookup(&lookup(&[
            ("OURIOS_STORE", "memory://"),
            ("OURIOS_INGEST_PREFIX", "ingest"),
            ("OURIOS_LATENESS_GRACE", "0s"),
            ("OURIOS_PRESSURE_FILES", "3"),
            ("OURIOS_PRESSURE_BYTES", "1MiB"),
            ("OURIOS_SWEEP_HOURS", "2"),
            ("OURIOS_JOB_LEASE", "5m"),
            ("OURIOS_LATE_WAIT", "2h"),
            ("OURIOS_LATE_SHARE", "25%"),
        ]))
        .unwrap();
        assert_eq!(s.layout.ingest_prefix(), "ingest");
        assert_eq!(
            s.readiness,
            ReadinessConfig {
                lateness_grace: Duration::ZERO,
                pressure_files: 3,
                pressure_bytes: 1 << 20,
                sweep_hours: 2,
                job_lease: Duration::from_secs(300),
                gc_grace: crate::options::DEFAULT_GC_GRACE,
                late: LatePolicy {
                    wait: Duration::from_secs(7200),
                    share: 0.25,
                },
            }
        );
    }

    #[test]
    fn a_layout_is_read_and_refused_beside_an_ingest_prefix() {
        let template = "logs/dt=%Y%m%d/svc={tenant}/hour=%H";
        let s = FunctionSettings::from_lookup(&lookup(&[
            ("OURIOS_STORE", "memory://"),
            ("OURIOS_LAYOUT", template),
        ]))
        .unwrap();
        assert_eq!(
            (s.layout.ingest_prefix(), s.layout.template().source()),
            ("logs", template)
        );
        let both = FunctionSettings::from_lookup(&lookup(&[
            ("OURIOS_STORE", "memory://"),
            ("OURIOS_LAYOUT", template),
            ("OURIOS_INGEST_PREFIX", "ingest"),
        ]));
        assert!(both.is_err_and(|e| e.to_string().contains("both a layout")));
        let broken = FunctionSettings::from_lookup(&lookup(&[
            ("OURIOS_STORE", "memory://"),
            ("OURIOS_LAYOUT", "logs/%Y/%m/%d/{tenant}"),
        ]));
        assert!(broken.is_err_and(|e| e.to_string().contains("no %H")));
        let any_name = FunctionSettings::from_lookup(&lookup(&[
            ("OURIOS_STORE", "memory://"),
            ("OURIOS_INPUT_NAMES", "*"),
        ]))
        .unwrap();
        assert!(
            any_name
                .layout
                .is_input_name("logs-2026-11-29-10-00-00-0a1b")
        );
        let default =
            FunctionSettings::from_lookup(&lookup(&[("OURIOS_STORE", "memory://")])).unwrap();
        assert!(
            !default
                .layout
                .is_input_name("logs-2026-11-29-10-00-00-0a1b")
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        assert!(FunctionSettings::from_lookup(&lookup(&[])).is_err());
        for (name, value) in [
            ("OURIOS_LATENESS_GRACE", "soon"),
            ("OURIOS_PRESSURE_FILES", "-1"),
            ("OURIOS_PRESSURE_BYTES", "lots"),
            ("OURIOS_JOB_LEASE", "0s"),
            ("OURIOS_INGEST_PREFIX", "_compaction"),
            ("OURIOS_LATE_WAIT", "tomorrow"),
            ("OURIOS_LATE_SHARE", "-5%"),
        ] {
            let err = FunctionSettings::from_lookup(&lookup(&[
                ("OURIOS_STORE", "memory://"),
                (name, value),
            ]))
            .unwrap_err()
            .to_string();
            assert!(
                err.contains(name) || err.contains(value),
                "{name}={value}: {err}"
            );
        }
    }
}

//! The functions' settings from named variables; `main` passes the lookup (the environment),
//! so parsing is tested here and the environment is read in one place.

use std::time::{Duration, Instant};

use crate::config::{
    DEFAULT_BUDGET_BYTES, DEFAULT_ROW_GROUPS_PER_BLOCK, budget_for_function_memory, parse_duration,
    parse_size,
};
use crate::cost::{ONE_VCPU_FUNCTION_MB, Prices};
use crate::error::{Error, Result};
use crate::partition::Layout;
use crate::serverless::events::KeyScope;
use crate::serverless::readiness::ReadinessConfig;
use crate::store::StoreUrl;

/// Settings both functions read (`OURIOS_STORE`, `OURIOS_INGEST_PREFIX`, readiness).
#[derive(Debug, Clone)]
pub struct FunctionSettings {
    /// The store root URL.
    pub store_url: String,
    /// The layout.
    pub layout: Layout,
    /// Bucket and prefix of the root, for event keys.
    pub scope: KeyScope,
    /// Readiness thresholds.
    pub readiness: ReadinessConfig,
    /// Least time between two job records a backfill writes (`OURIOS_BACKFILL_INTERVAL`).
    pub backfill_interval: Duration,
}

/// Compactor-only settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactorSettings {
    /// Decoded-row budget B.
    pub budget_bytes: u64,
    /// Scratch directory (`OURIOS_SCRATCH`, default `/tmp`).
    pub scratch_dir: String,
    /// Most bytes a job may spill (`OURIOS_SCRATCH_LIMIT`), else the free space.
    pub scratch_limit_bytes: Option<u64>,
    /// Row-group threshold override (`OURIOS_COMPACTED_RG_BYTES`).
    pub rg_bytes_env: Option<u64>,
    /// Row groups per block of the output (`OURIOS_ROW_GROUPS_PER_BLOCK`, 1 = plain layout).
    pub row_groups_per_block: usize,
    /// Row cap of an output row group (`OURIOS_MAX_ROWS_PER_ROW_GROUP`), besides the bytes.
    pub max_rows_per_row_group: Option<u64>,
    /// Grace before retired inputs are deleted (`OURIOS_GC_GRACE`).
    pub gc_grace: Duration,
    /// Time kept free before the invocation deadline (`OURIOS_DEADLINE_MARGIN`).
    pub deadline_margin: Duration,
    /// The function's memory in MB (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`), which jobs are billed
    /// for; one vCPU's worth when unset.
    pub function_memory_mb: u64,
    /// Prices of a job's cost (`OURIOS_PRICE_*`, else the published arm64 us-east-1 ones).
    pub prices: Prices,
}

fn get_or<T>(
    lookup: &dyn Fn(&str) -> Option<String>,
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

fn positive(n: u64) -> Result<u64> {
    if n == 0 {
        return Err(Error::Config {
            message: "must be at least 1".into(),
        });
    }
    Ok(n)
}

fn parse_count(raw: &str) -> Result<u64> {
    raw.trim().parse().map_err(|_| Error::Config {
        message: format!("{raw:?} is not a whole number"),
    })
}

impl FunctionSettings {
    /// Reads the settings through `lookup` (a variable's value, if set).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let store_url = lookup("OURIOS_STORE")
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| Error::Config {
                message: "OURIOS_STORE is not set; set it to the store root, e.g. s3://logs-bucket"
                    .into(),
            })?;
        let url = StoreUrl::parse(&store_url)?;
        let prefix = get_or(lookup, "OURIOS_INGEST_PREFIX", "data".to_string(), |s| {
            Ok(s.to_string())
        })?;
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
        };
        if readiness.pressure_files == 0
            || readiness.pressure_bytes == 0
            || readiness.job_lease.is_zero()
        {
            return Err(Error::Config {
                message: "OURIOS_PRESSURE_FILES, OURIOS_PRESSURE_BYTES and OURIOS_JOB_LEASE must be positive".into(),
            });
        }
        Ok(Self {
            store_url,
            layout: Layout::new(&prefix)?,
            scope: KeyScope::for_store(&url),
            readiness,
            backfill_interval: get_or(
                lookup,
                "OURIOS_BACKFILL_INTERVAL",
                Duration::from_millis(100),
                parse_duration,
            )?,
        })
    }
}

impl CompactorSettings {
    /// Reads the compactor's settings through `lookup`.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let function_memory_mb = match lookup("AWS_LAMBDA_FUNCTION_MEMORY_SIZE") {
            Some(mib) => Some(
                parse_count(&mib)
                    .and_then(positive)
                    .map_err(|e| Error::Config {
                        message: format!("AWS_LAMBDA_FUNCTION_MEMORY_SIZE: {e}"),
                    })?,
            ),
            None => None,
        };
        let function_budget =
            function_memory_mb.map_or(DEFAULT_BUDGET_BYTES, budget_for_function_memory);
        Ok(Self {
            budget_bytes: get_or(lookup, "OURIOS_MEMORY_BUDGET", function_budget, parse_size)?,
            scratch_dir: get_or(lookup, "OURIOS_SCRATCH", "/tmp".to_string(), |s| {
                Ok(s.to_string())
            })?,
            scratch_limit_bytes: get_or(lookup, "OURIOS_SCRATCH_LIMIT", None, |s| {
                parse_size(s).map(Some)
            })?,
            rg_bytes_env: get_or(lookup, "OURIOS_COMPACTED_RG_BYTES", None, |s| {
                parse_size(s).map(Some)
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
            gc_grace: get_or(
                lookup,
                "OURIOS_GC_GRACE",
                Duration::from_secs(15 * 60),
                parse_duration,
            )?,
            deadline_margin: get_or(
                lookup,
                "OURIOS_DEADLINE_MARGIN",
                Duration::from_secs(20),
                parse_duration,
            )?,
            function_memory_mb: function_memory_mb.unwrap_or(ONE_VCPU_FUNCTION_MB),
            prices: Prices::from_lookup(lookup)?,
        })
    }
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
    use std::collections::HashMap;

    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

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
            }
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

    #[test]
    fn compactor_budget_from_function_memory() {
        let s =
            CompactorSettings::from_lookup(&lookup(&[("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")]))
                .unwrap();
        assert_eq!(s.budget_bytes, 256 << 20);
        let s = CompactorSettings::from_lookup(&lookup(&[
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
            ("OURIOS_MEMORY_BUDGET", "32MiB"),
        ]))
        .unwrap();
        assert_eq!(s.budget_bytes, 32 << 20);
        assert_eq!(s.scratch_dir, "/tmp");
        assert_eq!(s.row_groups_per_block, DEFAULT_ROW_GROUPS_PER_BLOCK);
        assert_eq!(s.max_rows_per_row_group, None);
        assert!(
            CompactorSettings::from_lookup(&lookup(&[("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "big")]))
                .is_err()
        );
    }

    #[test]
    fn compactor_cost_from_function_memory_and_prices() {
        let s = CompactorSettings::from_lookup(&lookup(&[])).unwrap();
        assert_eq!(s.function_memory_mb, ONE_VCPU_FUNCTION_MB);
        assert_eq!(s.prices, Prices::default());
        let s = CompactorSettings::from_lookup(&lookup(&[
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
            let e = CompactorSettings::from_lookup(&lookup(&[(name, value)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }

    #[test]
    fn block_layout_settings() {
        let s = CompactorSettings::from_lookup(&lookup(&[
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
            let e = CompactorSettings::from_lookup(&lookup(&[(name, value)])).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
    }
}

//! What a compaction job costs in dollars: Lambda GB-seconds and S3 requests at published
//! prices.
//!
//! Defaults are the published us-east-1 prices for arm64 Lambda and S3 Standard; other
//! regions and architectures override them with [`Prices::from_lookup`] (the `OURIOS_PRICE_*`
//! variables).

use serde::Serialize;

use crate::{Error, Result};

/// Memory of a Lambda function with one full vCPU (MB): the CLI's default function size.
pub const ONE_VCPU_FUNCTION_MB: u64 = 1_769;

/// Prices in US dollars.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prices {
    /// Lambda compute, per GB-second.
    pub lambda_gb_second: f64,
    /// Lambda invocations, per request.
    pub lambda_request: f64,
    /// S3 PUT, COPY, POST and LIST requests, per request.
    pub s3_put_list_request: f64,
    /// S3 GET and HEAD requests, per request.
    pub s3_get_request: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Self {
            lambda_gb_second: 0.000_013_333_4,
            lambda_request: 0.20 / 1_000_000.0,
            s3_put_list_request: 0.005 / 1_000.0,
            s3_get_request: 0.0004 / 1_000.0,
        }
    }
}

/// The variables that override each price (US dollars per unit).
pub const PRICE_VARIABLES: [&str; 4] = [
    "OURIOS_PRICE_LAMBDA_GB_SECOND",
    "OURIOS_PRICE_LAMBDA_REQUEST",
    "OURIOS_PRICE_S3_PUT_LIST_REQUEST",
    "OURIOS_PRICE_S3_GET_REQUEST",
];

impl Prices {
    /// The defaults, each overridden by its `OURIOS_PRICE_*` variable when `lookup` has it.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut prices = Self::default();
        let fields = [
            &mut prices.lambda_gb_second,
            &mut prices.lambda_request,
            &mut prices.s3_put_list_request,
            &mut prices.s3_get_request,
        ];
        for (name, field) in PRICE_VARIABLES.iter().zip(fields) {
            if let Some(raw) = lookup(name) {
                *field = raw
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| Error::Config {
                        message: format!("{name}={raw:?} is not a price (a dollar amount >= 0)"),
                    })?;
            }
        }
        Ok(prices)
    }
}

/// Object-store requests a job made, by price class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    /// GET and HEAD requests (ranged GETs count once each).
    pub get: u64,
    /// PUT requests: single puts, multipart creates, parts and completions, copies.
    pub put: u64,
    /// LIST requests (one per page of a listing).
    pub list: u64,
    /// DELETE requests (free on S3).
    pub delete: u64,
}

impl RequestCounts {
    /// The requests made since `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            get: self.get.saturating_sub(earlier.get),
            put: self.put.saturating_sub(earlier.put),
            list: self.list.saturating_sub(earlier.list),
            delete: self.delete.saturating_sub(earlier.delete),
        }
    }
}

/// The cost of one job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct JobCost {
    /// Lambda compute: the job's duration times the function's memory in GB.
    pub lambda_gb_seconds: f64,
    /// Object-store requests the job made.
    pub requests: RequestCounts,
    /// Compute, one invocation and requests, in US dollars.
    pub usd: f64,
    /// `usd` per GB (10^9 bytes) of encoded input; 0 when there was no input.
    pub usd_per_gb: f64,
}

impl JobCost {
    /// The cost of a job that ran `duration_ms` in a function of `function_memory_mb` MB,
    /// made `requests` and compacted `input_bytes` of encoded input.
    pub fn new(
        prices: &Prices,
        duration_ms: u64,
        function_memory_mb: u64,
        requests: RequestCounts,
        input_bytes: u64,
    ) -> Self {
        // Lambda bills memory in GB of 1,024 MB and duration by the millisecond.
        let lambda_gb_seconds =
            (duration_ms as f64 / 1_000.0) * (function_memory_mb as f64 / 1_024.0);
        let usd = lambda_gb_seconds * prices.lambda_gb_second
            + prices.lambda_request
            + (requests.put + requests.list) as f64 * prices.s3_put_list_request
            + requests.get as f64 * prices.s3_get_request;
        let usd_per_gb = if input_bytes == 0 {
            0.0
        } else {
            usd / (input_bytes as f64 / 1e9)
        };
        Self {
            lambda_gb_seconds,
            requests,
            usd,
            usd_per_gb,
        }
    }
}

/// S3 Tables' managed compaction, for comparison: dollars per GB processed and per 1,000
/// objects processed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ManagedCompactionPrice {
    /// Per GB processed.
    pub usd_per_gb: f64,
    /// Per 1,000 objects processed.
    pub usd_per_1000_objects: f64,
}

/// S3 Tables' sort compaction.
pub const S3_TABLES_SORT: ManagedCompactionPrice = ManagedCompactionPrice {
    usd_per_gb: 0.01,
    usd_per_1000_objects: 0.002,
};

/// S3 Tables' binpack compaction.
pub const S3_TABLES_BINPACK: ManagedCompactionPrice = ManagedCompactionPrice {
    usd_per_gb: 0.005,
    usd_per_1000_objects: 0.002,
};

impl ManagedCompactionPrice {
    /// Dollars per GB of a job over `input_bytes` in `objects` files.
    pub fn usd_per_gb_for(&self, input_bytes: u64, objects: u64) -> f64 {
        if input_bytes == 0 {
            return 0.0;
        }
        let gb = input_bytes as f64 / 1e9;
        (gb * self.usd_per_gb + objects as f64 / 1_000.0 * self.usd_per_1000_objects) / gb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn compute_and_requests_add_up_at_published_prices() {
        let requests = RequestCounts {
            get: 1_000,
            put: 20,
            list: 5,
            delete: 40,
        };
        // 10 s at 1,024 MB is 10 GB-seconds.
        let cost = JobCost::new(&Prices::default(), 10_000, 1_024, requests, 2_000_000_000);
        assert!(close(cost.lambda_gb_seconds, 10.0));
        let expected = 10.0 * 0.000_013_333_4 + 0.2e-6 + 25.0 * 0.005e-3 + 1_000.0 * 0.0004e-3;
        assert!(close(cost.usd, expected), "{} vs {expected}", cost.usd);
        assert!(close(cost.usd_per_gb, expected / 2.0));
        // Deletes are free.
        let fewer = RequestCounts {
            delete: 0,
            ..requests
        };
        let same = JobCost::new(&Prices::default(), 10_000, 1_024, fewer, 2_000_000_000);
        assert!(close(same.usd, cost.usd));
    }

    #[test]
    fn memory_scales_compute_and_no_input_has_no_rate() {
        let small = JobCost::new(
            &Prices::default(),
            1_000,
            1_769,
            RequestCounts::default(),
            0,
        );
        let large = JobCost::new(
            &Prices::default(),
            1_000,
            3_538,
            RequestCounts::default(),
            0,
        );
        assert!(close(
            large.lambda_gb_seconds,
            2.0 * small.lambda_gb_seconds
        ));
        assert_eq!(small.usd_per_gb, 0.0);
    }

    #[test]
    fn prices_are_overridden_by_name_and_checked() {
        let prices = Prices::from_lookup(|name| {
            (name == "OURIOS_PRICE_LAMBDA_GB_SECOND").then(|| "0.0000166667".to_string())
        })
        .expect("a price");
        assert!(close(prices.lambda_gb_second, 0.000_016_666_7));
        assert!(close(
            prices.s3_get_request,
            Prices::default().s3_get_request
        ));
        for bad in ["-1", "NaN", "cheap", "inf"] {
            let err = Prices::from_lookup(|name| {
                (name == "OURIOS_PRICE_S3_GET_REQUEST").then(|| bad.to_string())
            })
            .expect_err(bad);
            assert!(
                err.to_string().contains("OURIOS_PRICE_S3_GET_REQUEST"),
                "{err}"
            );
        }
    }

    #[test]
    fn requests_since_a_snapshot_are_the_difference() {
        let earlier = RequestCounts {
            get: 3,
            put: 1,
            list: 2,
            delete: 0,
        };
        let now = RequestCounts {
            get: 10,
            put: 4,
            list: 2,
            delete: 5,
        };
        assert_eq!(
            now.since(&earlier),
            RequestCounts {
                get: 7,
                put: 3,
                list: 0,
                delete: 5,
            }
        );
        // A snapshot of other counters never makes a negative count.
        assert_eq!(earlier.since(&now).get, 0);
    }

    #[test]
    fn managed_compaction_charges_per_gb_and_per_object() {
        // 1 GB in 1,000 objects: $0.01 + $0.002.
        assert!(close(
            S3_TABLES_SORT.usd_per_gb_for(1_000_000_000, 1_000),
            0.012
        ));
        assert!(close(
            S3_TABLES_BINPACK.usd_per_gb_for(2_000_000_000, 0),
            0.005
        ));
        assert_eq!(S3_TABLES_SORT.usd_per_gb_for(0, 10), 0.0);
    }
}

//! CloudWatch embedded-metric-format (EMF) lines: one JSON object per line on stdout that
//! CloudWatch Logs turns into metrics, with the partition and job as searchable properties.

use serde_json::{Map, Value, json};

use crate::report::CompactionReport;

/// The metric namespace.
pub const NAMESPACE: &str = "Ourios";

/// A metric's unit, as CloudWatch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count.
    Count,
    /// Bytes.
    Bytes,
    /// Milliseconds.
    Milliseconds,
    /// Percent.
    Percent,
    /// A plain number (dollars, GB-seconds).
    None,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Bytes => "Bytes",
            Unit::Milliseconds => "Milliseconds",
            Unit::Percent => "Percent",
            Unit::None => "None",
        }
    }
}

/// One EMF line: `metrics` (counts, or any JSON number) under the dimension `Function`,
/// plus string `properties`.
pub fn emf_line<V: Clone + Into<Value>>(
    function: &str,
    timestamp_ms: i64,
    metrics: &[(&str, Unit, V)],
    properties: &[(&str, &str)],
) -> String {
    let definitions: Vec<Value> = metrics
        .iter()
        .map(|(name, unit, _)| json!({"Name": name, "Unit": unit.name()}))
        .collect();
    let mut line = Map::new();
    line.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": definitions,
            }],
        }),
    );
    line.insert("Function".into(), Value::from(function));
    for (name, _, value) in metrics {
        line.insert((*name).to_string(), value.clone().into());
    }
    for (name, value) in properties {
        line.insert((*name).to_string(), Value::from(*value));
    }
    Value::Object(line).to_string()
}

/// The compactor's EMF line for one report.
pub fn compaction_metrics(
    report: &CompactionReport,
    dispatch_job_id: &str,
    timestamp_ms: i64,
) -> String {
    let status = serde_json::to_value(report.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let rows_out: u64 = report.outputs.iter().map(|o| o.rows).sum();
    let bytes_out: u64 = report.outputs.iter().map(|o| o.bytes).sum();
    let count = |n: u64| Value::from(n);
    let requests = &report.cost.requests;
    emf_line(
        "compactor",
        timestamp_ms,
        &[
            ("RowsIn", Unit::Count, count(report.inputs.rows)),
            ("RowsOut", Unit::Count, count(rows_out)),
            ("BytesIn", Unit::Bytes, count(report.inputs.bytes)),
            ("BytesOut", Unit::Bytes, count(bytes_out)),
            ("FilesIn", Unit::Count, count(report.inputs.files)),
            ("DurationMs", Unit::Milliseconds, count(report.duration_ms)),
            ("CpuMs", Unit::Milliseconds, count(report.cpu_ms)),
            (
                "PeakDecodedBytes",
                Unit::Bytes,
                count(report.peak_decoded_bytes),
            ),
            ("PeakRssBytes", Unit::Bytes, count(report.peak_rss_bytes)),
            (
                "RunsSpilled",
                Unit::Count,
                count(u64::from(report.runs_spilled)),
            ),
            ("SpillBytes", Unit::Bytes, count(report.spill_bytes)),
            (
                "WriteAmplificationPercent",
                Unit::Percent,
                count((report.write_amplification * 100.0).round() as u64),
            ),
            (
                "QuarantinedFiles",
                Unit::Count,
                count(report.quarantined.len() as u64),
            ),
            (
                "OversizedFiles",
                Unit::Count,
                count(report.oversized.len() as u64),
            ),
            (
                "UnaddressableKeys",
                Unit::Count,
                count(report.unaddressable.len() as u64),
            ),
            (
                "LambdaGbSeconds",
                Unit::None,
                Value::from(report.cost.lambda_gb_seconds),
            ),
            ("S3GetRequests", Unit::Count, count(requests.get)),
            ("S3PutRequests", Unit::Count, count(requests.put)),
            ("S3ListRequests", Unit::Count, count(requests.list)),
            ("S3DeleteRequests", Unit::Count, count(requests.delete)),
            ("CostUsd", Unit::None, Value::from(report.cost.usd)),
            (
                "CostUsdPerGb",
                Unit::None,
                Value::from(report.cost.usd_per_gb),
            ),
            (&format!("Status_{status}"), Unit::Count, count(1)),
        ],
        &[
            ("status", &status),
            ("partition", &report.partition),
            ("job_id", dispatch_job_id),
            ("compaction_id", &report.attempt_id),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_declares_every_metric_it_carries() {
        let line = emf_line(
            "planner",
            7,
            &[("Accepted", Unit::Count, 3), ("Ignored", Unit::Count, 1)],
            &[("source", "sqs")],
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["_aws"]["Timestamp"], 7);
        let defs = v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap();
        let names: Vec<&str> = defs.iter().map(|d| d["Name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Accepted", "Ignored"]);
        for name in names {
            assert!(v[name].is_u64(), "{name} has a value");
        }
        assert_eq!(v["Function"], "planner");
        assert_eq!(v["source"], "sqs");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn compaction_line_carries_status_and_partition() {
        let mut report = CompactionReport::new("tenant=a/year=2026/month=11/day=29/hour=10", "c1");
        report.inputs.rows = 42;
        report.status = crate::report::Status::Timeout;
        let v: Value = serde_json::from_str(&compaction_metrics(&report, "j1", 1)).unwrap();
        assert_eq!(v["RowsIn"], 42);
        assert_eq!(v["Status_timeout"], 1);
        assert_eq!(v["status"], "timeout");
        assert_eq!(v["job_id"], "j1");
        assert_eq!(v["partition"], "tenant=a/year=2026/month=11/day=29/hour=10");
    }

    #[test]
    fn compaction_line_carries_cpu_time_and_cost() {
        let mut report = CompactionReport::new("tenant=a/year=2026/month=11/day=29/hour=10", "c1");
        report.inputs.bytes = 500_000_000;
        report.duration_ms = 4_000;
        report.cpu_ms = 6_500;
        let requests = crate::cost::RequestCounts {
            get: 40,
            put: 12,
            list: 3,
            delete: 1,
        };
        report.price(&crate::cost::Prices::default(), 1_769, requests);
        let v: Value = serde_json::from_str(&compaction_metrics(&report, "j1", 1)).unwrap();
        assert_eq!(v["CpuMs"], 6_500);
        assert_eq!(v["S3GetRequests"], 40);
        assert_eq!(v["S3PutRequests"], 12);
        assert_eq!(v["S3ListRequests"], 3);
        assert_eq!(v["S3DeleteRequests"], 1);
        // serde_json reads floats back to within an ulp or so.
        let close = |name: &str, expected: f64| {
            let got = v[name].as_f64().unwrap_or(f64::NAN);
            assert!((got - expected).abs() <= 1e-12 * expected, "{name}: {got}");
        };
        close("LambdaGbSeconds", report.cost.lambda_gb_seconds);
        close("CostUsd", report.cost.usd);
        close("CostUsdPerGb", report.cost.usd_per_gb);
        assert!(report.cost.usd > 0.0 && report.cost.usd_per_gb == report.cost.usd * 2.0);
        let defs = v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap();
        let unit_of = |name: &str| {
            defs.iter()
                .find(|d| d["Name"] == name)
                .map(|d| d["Unit"].clone())
        };
        assert_eq!(unit_of("CostUsd"), Some(Value::from("None")));
        assert_eq!(unit_of("CpuMs"), Some(Value::from("Milliseconds")));
    }
}

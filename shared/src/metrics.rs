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
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Bytes => "Bytes",
            Unit::Milliseconds => "Milliseconds",
            Unit::Percent => "Percent",
        }
    }
}

/// One EMF line: `metrics` under the dimension `Function`, plus string `properties`.
pub fn emf_line(
    function: &str,
    timestamp_ms: i64,
    metrics: &[(&str, Unit, u64)],
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
        line.insert((*name).to_string(), Value::from(*value));
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
    let output = report.output.as_ref();
    emf_line(
        "compactor",
        timestamp_ms,
        &[
            ("RowsIn", Unit::Count, report.inputs.rows),
            ("RowsOut", Unit::Count, output.map_or(0, |o| o.rows)),
            ("BytesIn", Unit::Bytes, report.inputs.bytes),
            ("BytesOut", Unit::Bytes, output.map_or(0, |o| o.bytes)),
            ("FilesIn", Unit::Count, report.inputs.files),
            ("DurationMs", Unit::Milliseconds, report.duration_ms),
            ("PeakDecodedBytes", Unit::Bytes, report.peak_decoded_bytes),
            ("PeakRssBytes", Unit::Bytes, report.peak_rss_bytes),
            ("RunsSpilled", Unit::Count, u64::from(report.runs_spilled)),
            ("SpillBytes", Unit::Bytes, report.spill_bytes),
            (
                "WriteAmplificationPercent",
                Unit::Percent,
                (report.write_amplification * 100.0).round() as u64,
            ),
            (
                "QuarantinedFiles",
                Unit::Count,
                report.quarantined.len() as u64,
            ),
            (&format!("Status_{status}"), Unit::Count, 1),
        ],
        &[
            ("status", &status),
            ("partition", &report.partition),
            ("job_id", dispatch_job_id),
            ("compaction_id", &report.job_id),
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
}

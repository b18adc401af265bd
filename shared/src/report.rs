//! The serializable report of one compaction: CLI output, Lambda response and log record.

use serde::Serialize;

use crate::cost::{JobCost, Prices, RequestCounts};
use crate::object_key::ObjectKey;

/// How a compaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The live inputs were replaced by one sorted file.
    Compacted,
    /// Nothing to do: already compacted, empty, or done by another compactor.
    Noop,
    /// Some inputs were bad and are quarantined in place; the rest were compacted (or, when
    /// none brought a row, the earlier output was kept as it is).
    Partial,
    /// Another compactor retired our inputs first; nothing of ours was committed.
    Conflict,
    /// The job stopped before its deadline with nothing committed.
    Timeout,
    /// The job failed; nothing was committed.
    Failed,
    /// Too large for one invocation: handed to the fan-out state machine, whose commit step
    /// reports the compaction (the compactor's answer only; nothing committed yet).
    FannedOut,
}

impl Status {
    /// The name the reports use (`compacted`, `noop`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Compacted => "compacted",
            Status::Noop => "noop",
            Status::Partial => "partial",
            Status::Conflict => "conflict",
            Status::Timeout => "timeout",
            Status::Failed => "failed",
            Status::FannedOut => "fanned_out",
        }
    }

    /// True for the outcomes a caller treats as success (exit code 0).
    pub fn is_success(self) -> bool {
        matches!(self, Status::Compacted | Status::Noop | Status::Partial)
    }
}

/// Totals of the inputs that went into the output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InputTotals {
    /// Files compacted.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their rows.
    pub rows: u64,
}

/// The written output file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OutputFile {
    /// Key relative to the store root.
    pub key: ObjectKey,
    /// Bytes of the file.
    pub bytes: u64,
    /// Rows in it.
    pub rows: u64,
    /// Row groups in it.
    pub row_groups: u64,
}

/// The shape of a fanned-out job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FanOutShape {
    /// Groups of inputs, each sorted into one run.
    pub groups: usize,
    /// Key ranges, each merged into one output (empty ranges write none).
    pub ranges: usize,
}

/// A bad input left in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Quarantined {
    /// Its key relative to the store root.
    pub file: ObjectKey,
    /// Why it was not compacted.
    pub reason: String,
}

/// A readable input too large for any one task's scratch space: left live and uncompacted
/// (quarantine is for unreadable files; this one's rows are valid and stay readable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OversizedInput {
    /// Its key relative to the store root.
    pub file: ObjectKey,
    /// Its encoded size.
    pub bytes: u64,
    /// Scratch bytes sorting it would take.
    pub scratch_needed_bytes: u64,
    /// Scratch bytes one task has.
    pub scratch_bytes: u64,
}

/// What a job that only checks late files did with them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LateCheck {
    /// Files checked by this job (bad ones are in `quarantined`).
    pub checked: usize,
    /// Late files that passed a check and wait to be merged.
    pub waiting: usize,
}

/// The report of one compaction job.
#[derive(Debug, Clone, Serialize)]
pub struct CompactionReport {
    /// The partition, as `tenant=…/year=…/month=…/day=…/hour=…`.
    pub partition: String,
    /// The outcome.
    pub status: Status,
    /// Inputs compacted.
    pub inputs: InputTotals,
    /// The output, when exactly one was written and committed.
    pub output: Option<OutputFile>,
    /// Every output committed, in key order: empty without one, the key ranges of a
    /// fanned-out job in range order.
    pub outputs: Vec<OutputFile>,
    /// How the job fanned out (`None`: one task, one output).
    pub fan_out: Option<FanOutShape>,
    /// Row-group threshold the writer used (JSON `flush_threshold_bytes`).
    #[serde(rename = "flush_threshold_bytes")]
    pub row_group_bytes: u64,
    /// Decoded-row budget B.
    pub budget_bytes: u64,
    /// Sorted runs spilled to scratch.
    pub runs_spilled: u32,
    /// Merge passes (0 when the partition fit the budget).
    pub merge_passes: u32,
    /// Bytes written to scratch.
    pub spill_bytes: u64,
    /// Most decoded bytes held at once.
    pub peak_decoded_bytes: u64,
    /// Decoded bytes still charged to the budget when the job ended: 0 unless a reservation
    /// leaked (not serialized; tests check it).
    #[serde(skip)]
    pub decoded_bytes_at_end: u64,
    /// Peak resident memory of the process.
    pub peak_rss_bytes: u64,
    /// Wall time of the job.
    pub duration_ms: u64,
    /// CPU time (user and system, all threads) the process spent during the job.
    pub cpu_ms: u64,
    /// What the job cost: its duration in the function's memory, its requests, in dollars.
    pub cost: JobCost,
    /// Inputs quarantined by this job.
    pub quarantined: Vec<Quarantined>,
    /// Readable inputs too large for any task's scratch space, left live and uncompacted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub oversized: Vec<OversizedInput>,
    /// The job did not fit one task's scratch space (a fan-out would split it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub did_not_fit: bool,
    /// A job that only checked late files (the late-file policy keeps them waiting): how many
    /// it checked, and how many wait to be merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_check: Option<LateCheck>,
    /// `*.parquet` keys in the partition directory the store cannot address (an ASCII control
    /// character, an empty or `.` segment): left in place and in no live set until renamed.
    pub unaddressable: Vec<String>,
    /// The attempt's id, written into the manifest (JSON `job_id`).
    #[serde(rename = "job_id")]
    pub attempt_id: String,
    /// Manifest version after the job.
    pub manifest_version: u64,
    /// Objects garbage-collected after the commit.
    pub gc_deleted: usize,
    /// Write amplification of the partition so far: bytes written by its compactions per
    /// byte ingested (from the manifest after the job; 0 before the first compaction).
    pub write_amplification: f64,
    /// For `fanned_out`: the name of the state machine's execution that compacts the
    /// partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<String>,
    /// Why the job failed, conflicted or timed out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The kind of that error (`Transient`, `ResourceExhausted`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::error::ErrorKind>,
    /// The objects that error names, and whether reading them failed: what the compactor
    /// counts a failure that repeats by (not serialized; the error names them).
    #[serde(skip)]
    pub error_objects: (Vec<String>, bool),
}

impl CompactionReport {
    /// An empty report for a partition.
    pub fn new(partition: &str, attempt_id: &str) -> Self {
        Self {
            partition: partition.to_string(),
            status: Status::Noop,
            fan_out: None,
            inputs: InputTotals::default(),
            output: None,
            outputs: Vec::new(),
            row_group_bytes: 0,
            budget_bytes: 0,
            runs_spilled: 0,
            merge_passes: 0,
            spill_bytes: 0,
            peak_decoded_bytes: 0,
            decoded_bytes_at_end: 0,
            peak_rss_bytes: 0,
            duration_ms: 0,
            cpu_ms: 0,
            cost: JobCost::default(),
            quarantined: Vec::new(),
            oversized: Vec::new(),
            did_not_fit: false,
            late_check: None,
            unaddressable: Vec::new(),
            attempt_id: attempt_id.to_string(),
            manifest_version: 0,
            gc_deleted: 0,
            write_amplification: 0.0,
            execution: None,
            error: None,
            error_kind: None,
            error_objects: (Vec::new(), false),
        }
    }

    /// Sets `cost` from the job's duration and encoded input, a function of
    /// `function_memory_mb` MB, the `requests` the job made and `prices`.
    pub fn price(&mut self, prices: &Prices, function_memory_mb: u64, requests: RequestCounts) {
        self.cost = JobCost::new(
            prices,
            self.duration_ms,
            function_memory_mb,
            requests,
            self.inputs.bytes,
        );
    }

    /// The report as JSON with each of its lists (`outputs`, `quarantined`, `unaddressable`)
    /// cut to its first `max_listed` entries, for answers whose size is capped (a Step
    /// Functions task result over 256 KiB fails with `States.DataLimitExceeded`). A cut list's
    /// full length is in `listed_in_full`; the totals (`inputs`, `fan_out`) stay whole.
    pub fn bounded_json(&self, max_listed: usize) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        let mut in_full = serde_json::Map::new();
        for list in ["outputs", "quarantined", "oversized", "unaddressable"] {
            if let Some(entries) = value.get_mut(list).and_then(|v| v.as_array_mut())
                && entries.len() > max_listed
            {
                in_full.insert(list.to_string(), entries.len().into());
                entries.truncate(max_listed);
            }
        }
        if !in_full.is_empty() {
            value["listed_in_full"] = in_full.into();
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_report_lists_at_most_its_limit_and_says_how_many_there_were() {
        let mut report = CompactionReport::new("tenant=a/year=2026/month=11/day=29/hour=10", "j");
        let long_reason = "x".repeat(400);
        for i in 0..20_000 {
            report.quarantined.push(Quarantined {
                file: ObjectKey::parse(&format!("data/tenant=a/q-{i:05}.parquet")).unwrap(),
                reason: long_reason.clone(),
            });
        }
        for i in 0..3 {
            report.outputs.push(OutputFile {
                key: ObjectKey::parse(&format!("compacted/o-{i}.parquet")).unwrap(),
                bytes: 1,
                rows: 1,
                row_groups: 1,
            });
        }
        report.inputs.files = 20_003;
        let bounded = report.bounded_json(100);
        let size = serde_json::to_vec(&bounded).unwrap().len();
        assert!(size < 64 << 10, "{size} bytes");
        assert_eq!(bounded["quarantined"].as_array().unwrap().len(), 100);
        assert_eq!(
            bounded["quarantined"][0]["file"],
            "data/tenant=a/q-00000.parquet"
        );
        assert_eq!(
            bounded["listed_in_full"],
            serde_json::json!({"quarantined": 20_000})
        );
        assert_eq!(
            bounded["outputs"].as_array().unwrap().len(),
            3,
            "short lists stay whole"
        );
        assert_eq!(bounded["inputs"]["files"], 20_003);
        // Nothing cut: the report's own JSON.
        report.quarantined.truncate(5);
        assert_eq!(
            report.bounded_json(100),
            serde_json::to_value(&report).unwrap()
        );
    }
}

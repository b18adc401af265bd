//! The compactor's handler: parse the job (a job record's S3, EventBridge or MinIO event, the
//! same inside a function-URL request, or a direct `{"tenant", "hour"}`), one call to the
//! library's [`Compactor::handle`], answer with the compaction report and log it with an
//! embedded-metric-format line.

use std::time::Instant;

use ourios_compaction::error::InvocationError;
use ourios_compaction::serverless::dispatch::compactor::{CompactorAnswer, FAN_OUT_ANSWER_LISTED};
use ourios_compaction::serverless::events::{Invocation, parse_invocation};
use ourios_compaction::serverless::function_url::answer_request;
use ourios_compaction::serverless::metrics::compaction_metrics;
use serde_json::{Value, json};

pub use ourios_compaction::serverless::dispatch::compactor::Compactor;
pub use ourios_compaction::serverless::function_settings::deadline_instant;

/// Handles one invocation: the report of the job (or `{"reports": [...]}` for several, or
/// `{"ignored": [...]}` when the event held no job). A failed or timed-out job fails the
/// invocation with the report in the error and the failure's kind as its type (Lambda retries
/// it, then the dead-letter destination). A function-URL request gets the same answer as an
/// HTTP response.
pub async fn handle(
    compactor: &Compactor,
    payload: Value,
    deadline: Option<Instant>,
    request_id: &str,
) -> Result<Value, InvocationError> {
    let invocation = parse_invocation(&payload)?;
    let Invocation::Http(request) = invocation else {
        return run(compactor, invocation, deadline, request_id).await;
    };
    let handle = |inner| run(compactor, inner, deadline, request_id);
    let expected = "a job record's notification";
    Ok(answer_request(*request, expected, handle, |_, _| {}).await)
}

/// One call to the library, then the answer: its JSON, a metrics line per job, and the error
/// of a job that did not complete.
async fn run(
    compactor: &Compactor,
    invocation: Invocation,
    deadline: Option<Instant>,
    request_id: &str,
) -> Result<Value, InvocationError> {
    let answer = compactor.handle(invocation, deadline).await?;
    let failure_kind = answer.failure_kind();
    let jobs = match answer {
        CompactorAnswer::Ignored(ignored) => return Ok(json!({ "ignored": ignored })),
        CompactorAnswer::FanOut(answer) => return Ok(answer),
        CompactorAnswer::FanOutCommitted { report, record } => {
            let now_ms = chrono::Utc::now().timestamp_millis();
            println!(
                "{}",
                compaction_metrics(&report, &report.attempt_id, now_ms)
            );
            let full = serde_json::to_string(&report).unwrap_or_default();
            tracing::info!(report = %full, record = ?record, "fan-out commit report");
            let mut answer = report.bounded_json(FAN_OUT_ANSWER_LISTED);
            answer["record"] = serde_json::to_value(record)?;
            return Ok(answer);
        }
        CompactorAnswer::Jobs(jobs) => jobs,
    };
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut reports = Vec::with_capacity(jobs.len());
    let mut failures = Vec::new();
    for job in &jobs {
        let job_id = job
            .dispatch_job_id
            .clone()
            .unwrap_or_else(|| format!("direct-{request_id}"));
        println!("{}", compaction_metrics(&job.report, &job_id, now_ms));
        let mut report = serde_json::to_value(&job.report)?;
        if let Some(failure) = &job.failure {
            report["failure"] = serde_json::to_value(failure)?;
        }
        if !job.is_finished() {
            failures.push(report.clone());
        }
        reports.push(report);
    }
    if let Some(kind) = failure_kind {
        return Err(InvocationError::new(
            kind,
            format!("compaction did not complete: {}", Value::Array(failures)),
        ));
    }
    Ok(match reports.len() {
        1 => reports.remove(0),
        _ => json!({ "reports": reports }),
    })
}

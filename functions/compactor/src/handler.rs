//! The compactor's handler: parse the job (a job record's S3, EventBridge or MinIO event, the
//! same inside a function-URL request, or a direct `{"tenant", "hour"}`), one call to the
//! library's job runner per partition, answer with the compaction report and log it with an
//! embedded-metric-format line.

use std::time::Instant;

use ourios_compaction::config::CompactOptions;
use ourios_compaction::dispatch::worker::{current_job_id, run_compaction_job};
use ourios_compaction::error::{ErrorKind, InvocationError};
use ourios_compaction::events::{
    Classified, HttpRequest, Invocation, KeyScope, Record, Watch, classify, parse_invocation,
};
use ourios_compaction::metrics::compaction_metrics;
use ourios_compaction::partition::{Layout, PartitionId};
use ourios_compaction::plan::ReadinessConfig;
use ourios_compaction::settings::CompactorSettings;
use ourios_compaction::store::Store;
use serde_json::{Value, json};
use tracing::Instrument;

/// Everything the compactor needs, built once by `main`.
#[derive(Debug, Clone)]
pub struct Compactor {
    /// The store root.
    pub store: Store,
    /// The layout.
    pub layout: Layout,
    /// Bucket and prefix of the root, to read job-record keys.
    pub scope: KeyScope,
    /// Budget, scratch and deadline settings.
    pub settings: CompactorSettings,
    /// The planner's readiness rule, to decide whether a finished job re-arms its record.
    pub readiness: ReadinessConfig,
}

impl Compactor {
    /// Compaction options for an invocation ending at `deadline`.
    pub fn options(&self, deadline: Option<Instant>) -> CompactOptions {
        let s = &self.settings;
        let mut options = CompactOptions::new(&s.scratch_dir);
        options.budget_bytes = s.budget_bytes;
        options.scratch_limit_bytes = s.scratch_limit_bytes;
        options.rg_bytes_env = s.rg_bytes_env;
        options.row_groups_per_block = s.row_groups_per_block;
        options.max_rows_per_row_group = s.max_rows_per_row_group;
        options.gc_grace = s.gc_grace;
        options.function_memory_mb = s.function_memory_mb;
        options.prices = s.prices;
        options.deadline = deadline.map(|d| {
            d.checked_sub(s.deadline_margin)
                .unwrap_or_else(Instant::now)
        });
        options
    }
}

pub use ourios_compaction::settings::deadline_instant;

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
    let result = match request.body {
        Ok(Some(inner)) => run(compactor, inner, deadline, request_id).await,
        // A webhook target checking that the endpoint is up.
        Ok(None) if matches!(request.method.as_str(), "GET" | "HEAD") => {
            Ok(json!({ "ready": true }))
        }
        Ok(None) => Err(InvocationError::new(
            ErrorKind::InvalidInput,
            format!(
                "{} request without a body: send a job record's notification",
                request.method
            ),
        )),
        Err(e) => Err(e.into()),
    };
    let (status, body) = match result {
        Ok(body) => (200, body),
        Err(error) => (
            error.kind.http_status(),
            json!({ "error": error.message, "kind": error.kind.name() }),
        ),
    };
    Ok(HttpRequest::answer(status, &body))
}

async fn run(
    compactor: &Compactor,
    invocation: Invocation,
    deadline: Option<Instant>,
    request_id: &str,
) -> Result<Value, InvocationError> {
    let (partitions, ignored) = jobs_of(invocation, compactor)?;
    let options = compactor.options(deadline);
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    let mut failure_kind = None;
    for partition in &partitions {
        let job_id = current_job_id(&compactor.store, partition)
            .await?
            .unwrap_or_else(|| format!("direct-{request_id}"));
        let span = tracing::info_span!("job", partition = %partition, job_id = %job_id);
        let outcome = run_compaction_job(
            &compactor.store,
            &compactor.layout,
            partition,
            &options,
            &compactor.readiness,
        )
        .instrument(span.clone())
        .await?;
        let report = serde_json::to_value(&outcome.report)?;
        span.in_scope(
            || tracing::info!(report = %report, record = ?outcome.record, "compaction report"),
        );
        println!(
            "{}",
            compaction_metrics(
                &outcome.report,
                &job_id,
                chrono::Utc::now().timestamp_millis()
            )
        );
        if !outcome.report.status.is_success()
            && outcome.report.status != ourios_compaction::report::Status::Conflict
        {
            failure_kind = failure_kind.or(outcome.report.error_kind);
            failures.push(report.clone());
        }
        reports.push(report);
    }
    if !failures.is_empty() {
        return Err(InvocationError::new(
            failure_kind.unwrap_or(ErrorKind::Bug),
            format!("compaction did not complete: {}", Value::Array(failures)),
        ));
    }
    Ok(match reports.len() {
        0 => json!({ "ignored": ignored }),
        1 => reports.remove(0),
        _ => json!({ "reports": reports }),
    })
}

/// The partitions an invocation asks to compact, and what it held besides.
fn jobs_of(
    invocation: Invocation,
    compactor: &Compactor,
) -> Result<(Vec<PartitionId>, Vec<Value>), InvocationError> {
    let invalid = |message: String| InvocationError::new(ErrorKind::InvalidInput, message);
    let records: Vec<Record> = match invocation {
        Invocation::Compact { tenant, hour } => {
            return Ok((vec![PartitionId::parse(&tenant, &hour)?], Vec::new()));
        }
        Invocation::Notifications { records, .. } => records,
        Invocation::SqsBatch(messages) => messages.into_iter().flat_map(|m| m.records).collect(),
        Invocation::Backfill(_) | Invocation::Sweep => {
            return Err(invalid(
                "backfills and sweeps go to the planner, not the compactor".into(),
            ));
        }
        Invocation::Http(_) => {
            return Err(invalid(
                "an HTTP request's body must be a notification, not another request".into(),
            ));
        }
    };
    let mut partitions = Vec::new();
    let mut ignored = Vec::new();
    let mut rejected = Vec::new();
    for record in &records {
        match classify(record, &compactor.scope, &compactor.layout, Watch::Jobs) {
            Classified::Accepted { partition, .. } => {
                if !partitions.contains(&partition) {
                    partitions.push(partition);
                }
            }
            Classified::Ignored { item, reason } => {
                tracing::debug!(item, reason = %reason, "ignored");
                ignored.push(json!({ "item": item, "reason": reason.to_string() }));
            }
            Classified::Rejected { item, reason } => rejected.push(format!("{item}: {reason}")),
        }
    }
    if !rejected.is_empty() {
        return Err(invalid(format!(
            "rejected job event record(s): {}",
            rejected.join("; ")
        )));
    }
    Ok((partitions, ignored))
}

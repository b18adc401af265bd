//! The planner's handler: parse the payload, one call to the library's planner, shape the
//! answer (a JSON body, an SQS partial batch response, an HTTP response for a function-URL
//! request, or an error of a kind naming every rejected key).

use std::time::Instant;

use aws_lambda_events::sqs::SqsBatchResponse;
use chrono::{DateTime, Utc};
use ourios_compaction::error::{ErrorKind, InvocationError};
use ourios_compaction::serverless::dispatch::OutcomeDecision;
use ourios_compaction::serverless::dispatch::invocation::{Handled, Planner, PlannerAnswer};
use ourios_compaction::serverless::events::{HttpRequest, Invocation, parse_invocation};
use ourios_compaction::serverless::metrics::{Unit, emf_line};
use serde_json::{Value, json};

/// Handles one invocation. An error fails it: Lambda retries it, then the dead-letter
/// destination, with the error's kind as its type.
pub async fn handle(
    planner: &Planner,
    payload: Value,
    now: DateTime<Utc>,
    deadline: Option<Instant>,
) -> Result<Value, InvocationError> {
    let invocation = match parse_invocation(&payload) {
        Ok(invocation) => invocation,
        Err(e) => {
            tracing::error!(error = %e, "rejected a payload");
            emit(now, 0, 0, 1, 0, "unknown");
            let error = InvocationError::from(e);
            emit_error(now, &error);
            return Err(error);
        }
    };
    let result = match invocation {
        Invocation::Http(request) => Ok(answer_http(planner, *request, now, deadline).await),
        invocation => handle_invocation(planner, invocation, now, deadline).await,
    };
    if let Err(error) = &result {
        emit_error(now, error);
    }
    result
}

/// The body of a function-URL request, handled like the same notification delivered
/// directly, answered as an HTTP response whose status follows the error's kind.
async fn answer_http(
    planner: &Planner,
    request: HttpRequest,
    now: DateTime<Utc>,
    deadline: Option<Instant>,
) -> Value {
    let result = match request.body {
        Ok(Some(invocation)) => handle_invocation(planner, invocation, now, deadline).await,
        Ok(None) if matches!(request.method.as_str(), "GET" | "HEAD") => {
            Ok(json!({ "ready": true }))
        }
        Ok(None) => Err(InvocationError::new(
            ErrorKind::InvalidInput,
            format!(
                "{} request without a body: send an S3 or MinIO notification",
                request.method
            ),
        )),
        Err(e) => {
            tracing::error!(error = %e, "rejected an HTTP request");
            emit(now, 0, 0, 1, 0, "http");
            Err(e.into())
        }
    };
    let (status, body) = match result {
        Ok(body) => (200, body),
        Err(error) => {
            emit_error(now, &error);
            (
                error.kind.http_status(),
                json!({ "error": error.message, "kind": error.kind.name() }),
            )
        }
    };
    HttpRequest::answer(status, &body)
}

async fn handle_invocation(
    planner: &Planner,
    invocation: Invocation,
    now: DateTime<Utc>,
    deadline: Option<Instant>,
) -> Result<Value, InvocationError> {
    let answer = planner.handle_until(invocation, now, deadline).await?;
    match answer {
        PlannerAnswer::Notifications(handled) => {
            emit_handled(&handled, now, "notification");
            let problems: Vec<String> = handled
                .rejected
                .iter()
                .map(|r| format!("rejected {}: {}", r.item, r.reason))
                .chain(
                    handled
                        .failed
                        .iter()
                        .map(|f| format!("dispatch of {} failed: {}", f.item, f.reason)),
                )
                .collect();
            if problems.is_empty() {
                Ok(body(&handled))
            } else {
                // A failed dispatch may succeed on a retry; a rejected key never will.
                let kind = handled
                    .failed
                    .iter()
                    .map(|f| f.kind)
                    .find(|k| *k != ErrorKind::InvalidInput)
                    .unwrap_or(ErrorKind::InvalidInput);
                Err(InvocationError::new(
                    kind,
                    format!(
                        "{} record(s) or partition(s) not handled (accepted partitions were dispatched first): {}",
                        problems.len(),
                        problems.join("; ")
                    ),
                ))
            }
        }
        PlannerAnswer::SqsBatch {
            handled,
            failed_message_ids,
        } => {
            emit_handled(&handled, now, "sqs");
            let mut response = SqsBatchResponse::default();
            response.set_failures(failed_message_ids);
            Ok(serde_json::to_value(response)?)
        }
        PlannerAnswer::Backfill(report) => {
            emit(
                now,
                0,
                0,
                report.failed as u64,
                report.scheduled as u64,
                "backfill",
            );
            Ok(serde_json::to_value(report)?)
        }
        PlannerAnswer::Sweep(report) => {
            let dispatched = report
                .partitions
                .iter()
                .filter(|p| p.is_dispatched())
                .count();
            emit(now, 0, 0, report.failed as u64, dispatched as u64, "sweep");
            let partitions: Vec<_> = report
                .partitions
                .into_iter()
                .filter(|p| p.decision != OutcomeDecision::NothingToCompact)
                .collect();
            Ok(json!({
                "partitions": partitions,
                "failed": report.failed,
                "complete": report.complete,
            }))
        }
    }
}

fn body(handled: &Handled) -> Value {
    json!({ "partitions": handled.partitions, "ignored": handled.ignored })
}

fn emit_handled(handled: &Handled, now: DateTime<Utc>, source: &str) {
    let dispatched = handled
        .partitions
        .iter()
        .filter(|p| p.is_dispatched())
        .count();
    emit(
        now,
        handled.num_accepted as u64,
        handled.ignored.len() as u64,
        (handled.rejected.len() + handled.failed.len()) as u64,
        dispatched as u64,
        source,
    );
}

/// One embedded-metric-format line on stdout.
fn emit(
    now: DateTime<Utc>,
    accepted: u64,
    ignored: u64,
    rejected: u64,
    dispatched: u64,
    source: &str,
) {
    println!(
        "{}",
        emf_line(
            "planner",
            now.timestamp_millis(),
            &[
                ("RecordsAccepted", Unit::Count, accepted),
                ("RecordsIgnored", Unit::Count, ignored),
                ("RecordsRejected", Unit::Count, rejected),
                ("JobsDispatched", Unit::Count, dispatched),
            ],
            &[("source", source)],
        )
    );
}

/// A failed invocation's metric, `Errors_<Kind>`, with the kind as a property too.
fn emit_error(now: DateTime<Utc>, error: &InvocationError) {
    let metric = format!("Errors_{}", error.kind.name());
    println!(
        "{}",
        emf_line(
            "planner",
            now.timestamp_millis(),
            &[(&metric, Unit::Count, 1)],
            &[("error_kind", error.kind.name())],
        )
    );
}

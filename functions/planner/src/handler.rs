//! The planner's handler: parse the payload, one call to the library's planner, shape the
//! answer (a JSON body, an SQS partial batch response, an HTTP response for a function-URL
//! request, or an error of a kind naming every rejected key).

use std::time::Instant;

use aws_lambda_events::sqs::SqsBatchResponse;
use chrono::{DateTime, Utc};
use ourios_compaction::error::InvocationError;
use ourios_compaction::serverless::dispatch::planner::{Planner, PlannerAnswer, PlannerCounts};
use ourios_compaction::serverless::events::{
    HttpRequest, Invocation, NotAnEvent, parse_invocation,
};
use ourios_compaction::serverless::function_url::answer_request;
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
            emit(now, &PlannerCounts::refused_payload("unknown"));
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
    let handle = |invocation| handle_invocation(planner, invocation, now, deadline);
    let on_error = |error: &InvocationError, refused: Option<&NotAnEvent>| {
        if let Some(e) = refused {
            tracing::error!(error = %e, "rejected an HTTP request");
            emit(now, &PlannerCounts::refused_payload("http"));
        }
        emit_error(now, error);
    };
    answer_request(request, "an S3 or MinIO notification", handle, on_error).await
}

async fn handle_invocation(
    planner: &Planner,
    invocation: Invocation,
    now: DateTime<Utc>,
    deadline: Option<Instant>,
) -> Result<Value, InvocationError> {
    let answer = planner.handle_until(invocation, now, deadline).await?;
    emit(now, &answer.counts());
    match answer {
        PlannerAnswer::Notifications(handled) => match handled.failure() {
            Some(error) => Err(error),
            None => Ok(json!({ "partitions": handled.partitions, "ignored": handled.ignored })),
        },
        PlannerAnswer::SqsBatch {
            failed_message_ids, ..
        } => {
            let mut response = SqsBatchResponse::default();
            response.set_failures(failed_message_ids);
            Ok(serde_json::to_value(response)?)
        }
        PlannerAnswer::Backfill(report) => Ok(serde_json::to_value(report)?),
        PlannerAnswer::Sweep(report) => Ok(serde_json::to_value(report.without_idle())?),
    }
}

/// One embedded-metric-format line on stdout.
fn emit(now: DateTime<Utc>, counts: &PlannerCounts) {
    println!(
        "{}",
        emf_line(
            "planner",
            now.timestamp_millis(),
            &[
                ("RecordsAccepted", Unit::Count, counts.accepted),
                ("RecordsIgnored", Unit::Count, counts.ignored),
                ("RecordsRejected", Unit::Count, counts.rejected),
                ("JobsDispatched", Unit::Count, counts.dispatched),
            ],
            &[("source", counts.source)],
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

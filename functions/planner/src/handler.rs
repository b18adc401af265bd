//! The planner's handler: parse the payload, one call to the library's planner, shape the
//! answer (a JSON body, an SQS partial batch response, or an error naming every rejected key).

use aws_lambda_events::sqs::SqsBatchResponse;
use chrono::{DateTime, Utc};
use ourios_compaction::dispatch::invocation::{Handled, Planner, PlannerAnswer};
use ourios_compaction::events::parse_invocation;
use ourios_compaction::metrics::{Unit, emf_line};
use serde_json::{Value, json};

/// The error an invocation fails with: Lambda retries it, then the dead-letter destination.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Handles one invocation.
pub async fn handle(
    planner: &Planner,
    payload: Value,
    now: DateTime<Utc>,
) -> Result<Value, HandlerError> {
    let invocation = match parse_invocation(&payload) {
        Ok(invocation) => invocation,
        Err(e) => {
            tracing::error!(error = %e, "rejected a payload");
            emit(now, 0, 0, 1, 0, "unknown");
            return Err(e.to_string().into());
        }
    };
    let answer = planner.handle(invocation, now).await?;
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
                Err(format!(
                    "{} record(s) or partition(s) not handled (accepted partitions were dispatched first): {}",
                    problems.len(),
                    problems.join("; ")
                )
                .into())
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
            emit(now, 0, 0, 0, report.scheduled as u64, "backfill");
            Ok(serde_json::to_value(report)?)
        }
        PlannerAnswer::Sweep(partitions) => {
            let dispatched = partitions.iter().filter(|p| p.is_dispatched()).count();
            emit(now, 0, 0, 0, dispatched as u64, "sweep");
            let partitions: Vec<_> = partitions
                .into_iter()
                .filter(|p| p.decision != "nothing_to_compact")
                .collect();
            Ok(json!({ "partitions": partitions }))
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

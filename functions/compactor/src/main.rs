//! `ourios-compactor`: the Lambda function that compacts one partition per job within the
//! function's memory, spilling to `/tmp` and stopping before the invocation deadline (`functions/README.md`).

mod handler;
#[cfg(test)]
mod tests;

use std::time::Instant;

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use ourios_compaction::logging::{LogStyle, init_tracing};
use ourios_compaction::serverless::function_settings::FunctionSettings;
use ourios_compaction::serverless::state_machine::FanOutStateMachine;
use ourios_compaction::settings::{CompactSettings, process_env};
use ourios_compaction::store::Store;
use serde_json::Value;

use crate::handler::Compactor;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ourios_compaction::sort::resources::tune_allocator();
    init_tracing(LogStyle::Function, &process_env);
    let settings = FunctionSettings::from_lookup(&process_env)?;
    let compactor = Compactor {
        store: Store::open(&settings.store_url)?,
        layout: settings.layout,
        scope: settings.scope,
        settings: CompactSettings::from_lookup(&process_env)?,
        readiness: settings.readiness,
        state_machine: FanOutStateMachine::from_lookup(&process_env)?,
        clock: ourios_compaction::clock::SystemClock::shared(),
    };
    let compactor = &compactor;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        let deadline = handler::deadline_instant(event.context.deadline, now_ms, Instant::now());
        tracing::info!(
            request_id = %event.context.request_id,
            deadline_ms = event.context.deadline,
            remaining_ms = deadline.map(|d| d.saturating_duration_since(Instant::now()).as_millis() as u64),
            "invocation"
        );
        handler::handle(
            compactor,
            event.payload,
            deadline,
            &event.context.request_id,
        )
        .await
        .map_err(|e| Diagnostic {
            error_type: e.kind.name().to_string(),
            error_message: e.message,
        })
    }))
    .await
}

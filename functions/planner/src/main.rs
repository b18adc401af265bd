//! `ourios-planner`: the Lambda function that turns seal events, sweeps and backfills into
//! at most one compaction job per partition (`functions/README.md`).

mod handler;
#[cfg(test)]
mod tests;

use std::time::Instant;

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use ourios_compaction::logging::{LogStyle, init_tracing};
use ourios_compaction::serverless::dispatch::planner::Planner;
use ourios_compaction::serverless::function_settings::{FunctionSettings, deadline_instant};
use ourios_compaction::settings::process_env;
use ourios_compaction::store::Store;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing(LogStyle::Function, &process_env);
    let settings = FunctionSettings::from_lookup(&process_env)?;
    let planner = Planner {
        store: Store::open(&settings.store_url)?,
        layout: settings.layout,
        scope: settings.scope,
        readiness: settings.readiness,
        backfill_interval: settings.backfill_interval,
    };
    let planner = &planner;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        let deadline = deadline_instant(event.context.deadline, now_ms, Instant::now());
        handler::handle(planner, event.payload, chrono::Utc::now(), deadline)
            .await
            .map_err(|e| Diagnostic {
                error_type: e.kind.name().to_string(),
                error_message: e.message,
            })
    }))
    .await
}

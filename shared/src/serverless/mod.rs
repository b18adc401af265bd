//! The two functions' library side: event payloads, readiness, settings, metrics, and the
//! planner's and the compactor's entry points.

pub mod dispatch;
pub mod events;
pub mod function_settings;
pub mod function_url;
pub mod metrics;
pub mod readiness;
pub mod state_machine;

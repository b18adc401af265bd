//! A function-URL / API Gateway HTTP API request (MinIO's webhook target) answered the same
//! way by every handler: its body handled like the same invocation delivered directly, a probe
//! without a body answered as ready, the outcome shaped as an HTTP response.

use std::future::Future;

use serde_json::{Value, json};

use crate::error::{ErrorKind, InvocationError};
use crate::serverless::events::{HttpRequest, Invocation, NotAnEvent};

/// Answers `request` as an HTTP response: the invocation its body holds goes through `handle`;
/// a GET or HEAD without a body is a webhook target checking that the endpoint is up; any
/// other request without a body is refused, `expected` saying what to send. A failure's status
/// follows its kind; `on_error` sees it first, with the body's parse error when the body
/// itself was refused.
pub async fn answer_request<F, Fut>(
    request: HttpRequest,
    expected: &str,
    handle: F,
    on_error: impl FnOnce(&InvocationError, Option<&NotAnEvent>),
) -> Value
where
    F: FnOnce(Invocation) -> Fut,
    Fut: Future<Output = Result<Value, InvocationError>>,
{
    let (result, refused) = match request.body {
        Ok(Some(invocation)) => (handle(invocation).await, None),
        Ok(None) if matches!(request.method.as_str(), "GET" | "HEAD") => {
            (Ok(json!({ "ready": true })), None)
        }
        Ok(None) => {
            let message = format!("{} request without a body: send {expected}", request.method);
            (
                Err(InvocationError::new(ErrorKind::InvalidInput, message)),
                None,
            )
        }
        Err(e) => (Err(InvocationError::from(e.clone())), Some(e)),
    };
    let (status, body) = match result {
        Ok(body) => (200, body),
        Err(error) => {
            on_error(&error, refused.as_ref());
            (
                error.kind.http_status(),
                json!({ "error": error.message, "kind": error.kind.name() }),
            )
        }
    };
    HttpRequest::answer(status, &body)
}

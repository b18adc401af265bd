//! Signed requests to AWS APIs (S3 by raw key, Step Functions), sent over object_store's HTTP
//! client and signed with its SigV4 signer and credential providers, retried as the AWS SDKs'
//! standard mode retries: at most [`MAX_ATTEMPTS`] attempts, with jittered exponential backoff,
//! for transport errors, 5xx answers and throttling.
//!
//! The project's few calls that object_store cannot make (four S3 operations, one Step
//! Functions action) go through here instead of the generated SDK clients: those compile for
//! minutes per target and add megabytes to the functions' zips for a handful of requests.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use object_store::aws::{AwsAuthorizer, AwsCredentialProvider};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpRequest, ReqwestConnector,
};

use crate::error::{Error, Result};

/// Attempts of one request, the first included (the SDKs' standard retry mode).
pub const MAX_ATTEMPTS: u32 = 3;
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(20);
/// The wait before the second attempt, at most (doubled for each later one, jittered).
const BASE_BACKOFF: Duration = Duration::from_millis(200);

/// A client of one AWS service at one endpoint.
#[derive(Debug, Clone)]
pub struct AwsApi {
    http: HttpClient,
    credentials: AwsCredentialProvider,
    /// The signing name: `s3`, `states`.
    service: &'static str,
    region: String,
    /// Scheme and authority (and any path) requests are sent under, without a trailing `/`.
    base: String,
}

/// A successful answer.
#[derive(Debug)]
pub struct AwsResponse {
    /// Its HTTP status (2xx).
    pub status: u16,
    /// Its body.
    pub body: Bytes,
}

/// A request that failed: the service's answer, or no answer at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsApiError {
    /// The HTTP status, `None` when no answer came (connection, timeout, signing).
    pub status: Option<u16>,
    /// The service's error code (`AccessDenied`, `ExecutionAlreadyExists`), when it gave one.
    pub code: Option<String>,
    /// The service's message, or the transport's error.
    pub message: String,
}

impl std::fmt::Display for AwsApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.status, &self.code) {
            (Some(status), Some(code)) => write!(f, "HTTP {status} {code}: {}", self.message),
            (Some(status), None) => write!(f, "HTTP {status}: {}", self.message),
            (None, _) => write!(f, "no answer: {}", self.message),
        }
    }
}

impl std::error::Error for AwsApiError {}

impl AwsApiError {
    fn transport(message: impl std::fmt::Display) -> Self {
        Self {
            status: None,
            code: None,
            message: message.to_string(),
        }
    }

    /// Whether another attempt may succeed: no answer, a 5xx, or throttling.
    pub fn is_transient(&self) -> bool {
        const THROTTLING: [&str; 8] = [
            "Throttling",
            "ThrottlingException",
            "ThrottledException",
            "TooManyRequestsException",
            "RequestLimitExceeded",
            "RequestThrottled",
            "SlowDown",
            "RequestTimeout",
        ];
        match self.status {
            None => true,
            Some(status) if status == 429 || status >= 500 => true,
            Some(_) => self
                .code
                .as_deref()
                .is_some_and(|c| THROTTLING.contains(&c)),
        }
    }
}

impl AwsApi {
    /// A client of `service` (its signing name) in `region` at `base` (`https://host[:port]`),
    /// signing with `credentials`. Plain HTTP is allowed when `base` says `http://`.
    pub fn new(
        service: &'static str,
        region: &str,
        base: &str,
        credentials: AwsCredentialProvider,
    ) -> Result<Self> {
        crate::store::tls::install_crypto_provider();
        let options = ClientOptions::new().with_allow_http(base.starts_with("http://"));
        let http = ReqwestConnector::default()
            .connect(&options)
            .map_err(|e| Error::Config {
                message: format!("cannot build an HTTP client for {service} at {base}: {e}"),
            })?;
        Ok(Self {
            http,
            credentials,
            service,
            region: region.to_string(),
            base: base.trim_end_matches('/').to_string(),
        })
    }

    /// Sends `method` to `path_and_query` (starting with `/`, already encoded: see
    /// [`uri_encode`]) with `headers` and `body`, retrying transient failures; a non-2xx answer
    /// is an error carrying the service's code and message.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &[(&'static str, &str)],
        body: Bytes,
    ) -> std::result::Result<AwsResponse, AwsApiError> {
        let mut attempt = 1;
        loop {
            match self.attempt(&method, path_and_query, headers, &body).await {
                Err(e) if e.is_transient() && attempt < MAX_ATTEMPTS => {
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
                done => return done,
            }
        }
    }

    async fn attempt(
        &self,
        method: &Method,
        path_and_query: &str,
        headers: &[(&'static str, &str)],
        body: &Bytes,
    ) -> std::result::Result<AwsResponse, AwsApiError> {
        let credential = (self.credentials.get_credential().await)
            .map_err(|e| AwsApiError::transport(format!("no AWS credentials: {e}")))?;
        let mut request: HttpRequest = http::Request::builder()
            .method(method.clone())
            .uri(format!("{}{path_and_query}", self.base))
            .body(body.clone().into())
            .map_err(AwsApiError::transport)?;
        for (name, value) in headers {
            let value = HeaderValue::from_str(value).map_err(AwsApiError::transport)?;
            request
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
        AwsAuthorizer::new(&credential, self.service, &self.region)
            .try_authorize(&mut request, None)
            .map_err(|e| AwsApiError::transport(format!("cannot sign the request: {e}")))?;
        let response = self
            .http
            .execute(request)
            .await
            .map_err(AwsApiError::transport)?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .bytes()
            .await
            .map_err(AwsApiError::transport)?;
        if (200..300).contains(&status) {
            return Ok(AwsResponse { status, body });
        }
        let (code, message) = error_of(&body);
        Err(AwsApiError {
            status: Some(status),
            code,
            message: message.unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string()),
        })
    }
}

/// The wait before attempt `attempt + 1`: full jitter over an exponential cap.
fn backoff(attempt: u32) -> Duration {
    let cap = BASE_BACKOFF
        .saturating_mul(1 << attempt.min(16))
        .min(MAX_BACKOFF);
    cap.mul_f64(rand::random::<f64>())
}

/// The code and message of an error body: S3's XML (`<Code>`, `<Message>`) or a JSON
/// protocol's (`__type`, possibly `prefix#Code`, and `message`).
fn error_of(body: &[u8]) -> (Option<String>, Option<String>) {
    let text = String::from_utf8_lossy(body);
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) {
        let code = json
            .get("__type")
            .or_else(|| json.get("code"))
            .and_then(|c| c.as_str())
            .map(|c| c.rsplit('#').next().unwrap_or(c).to_string());
        let message = json
            .get("message")
            .or_else(|| json.get("Message"))
            .and_then(|m| m.as_str())
            .map(str::to_string);
        return (code, message);
    }
    (xml_element(&text, "Code"), xml_element(&text, "Message"))
}

/// The unescaped text of the first `<name>` element of `xml`.
fn xml_element(xml: &str, name: &str) -> Option<String> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    quick_xml::escape::unescape(&xml[start..end])
        .ok()
        .map(|s| s.into_owned())
}

/// `value` encoded as SigV4 encodes a URI component: every byte but `A-Z a-z 0-9 - _ . ~` (and
/// `/` when `keep_slash`) as `%XX`.
pub fn uri_encode(value: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// A query string (`?a=1&b`) of the pairs whose value is set; a pair `(name, Some(""))` is sent
/// as the bare name (`?uploads`).
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(name, value)| {
            value.map(|v| match v.is_empty() {
                true => uri_encode(name, false),
                false => format!("{}={}", uri_encode(name, false), uri_encode(v, false)),
            })
        })
        .collect();
    match parts.is_empty() {
        true => String::new(),
        false => format!("?{}", parts.join("&")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_encoded_as_sigv4_encodes_them() {
        assert_eq!(uri_encode("a b/c=d~e.f", true), "a%20b/c%3Dd~e.f");
        assert_eq!(uri_encode("a b/c", false), "a%20b%2Fc");
        assert_eq!(uri_encode("x\u{1}é", true), "x%01%C3%A9");
        assert_eq!(
            query(&[
                ("list-type", Some("2")),
                ("continuation-token", None),
                ("prefix", Some("data/t=a b/")),
                ("uploads", Some("")),
            ]),
            "?list-type=2&prefix=data%2Ft%3Da%20b%2F&uploads"
        );
        assert_eq!(query(&[("a", None)]), "");
    }

    #[test]
    fn error_codes_come_from_xml_and_json_bodies() {
        let xml = b"<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code>\
                    <Message>Access &amp; denied</Message></Error>";
        assert_eq!(
            error_of(xml),
            (Some("AccessDenied".into()), Some("Access & denied".into()))
        );
        let json = br#"{"__type":"com.amazonaws.swf.service.v2.model#ExecutionAlreadyExists","message":"exists"}"#;
        assert_eq!(
            error_of(json),
            (Some("ExecutionAlreadyExists".into()), Some("exists".into()))
        );
        assert_eq!(error_of(b"gateway down"), (None, None));
    }

    #[test]
    fn throttling_and_server_errors_are_retried_and_refusals_are_not() {
        let error = |status: Option<u16>, code: Option<&str>| AwsApiError {
            status,
            code: code.map(str::to_string),
            message: String::new(),
        };
        assert!(error(None, None).is_transient());
        assert!(error(Some(503), Some("SlowDown")).is_transient());
        assert!(error(Some(500), None).is_transient());
        assert!(error(Some(400), Some("ThrottlingException")).is_transient());
        assert!(error(Some(429), None).is_transient());
        assert!(!error(Some(403), Some("AccessDenied")).is_transient());
        assert!(!error(Some(412), Some("PreconditionFailed")).is_transient());
        assert!(!error(Some(400), Some("ExecutionAlreadyExists")).is_transient());
        for attempt in 1..10 {
            assert!(backoff(attempt) <= MAX_BACKOFF);
        }
    }
}

//! What a function invocation holds: envelopes unwrapped, keys decoded once, records sorted
//! into accepted, ignored and rejected (`functions/README.md`).
//!
//! Everything here is pure: a JSON payload in, domain values out. The planner and the
//! compactor share the unwrapping (S3 notifications direct or inside SQS or SNS messages,
//! EventBridge events) and differ only in which keys they accept: ingest files for the
//! planner, job records for the compactor.
//!
//! MinIO's notifications (`eventSource` `minio:s3`) are S3 notifications with an `s3:` prefix on
//! the event name, and a function-URL / API Gateway HTTP API request (payload format 2.0) whose
//! body is a notification is MinIO's webhook target delivering one.
//!
//! INVARIANT: a key is decoded exactly once (S3, SNS, SQS, EventBridge and MinIO alike) and then
//! accepted, ignored as a writer side file, or rejected as it is, never normalised.

use crate::compact::fan_out::FanOutTask;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorKind, InvocationError};
use crate::partition::{JOBS_PREFIX, KeyLayout, PartitionId, is_writer_side_file, parse_job_key};
use crate::store::StoreUrl;

/// Where the records of an invocation came from (for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// An S3 event notification delivered straight to the function.
    S3,
    /// S3 notifications inside SNS messages.
    Sns,
    /// An EventBridge event from S3.
    EventBridge,
    /// A MinIO bucket notification.
    Minio,
}

/// One record of an invocation, unwrapped but not yet classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An object event with its key decoded.
    Object {
        /// `ObjectCreated:Put`, `ObjectRemoved:Delete`, ... (EventBridge `Object Created`
        /// becomes `ObjectCreated:<reason>`).
        event_name: String,
        /// The bucket.
        bucket: String,
        /// The key, decoded exactly once.
        key: String,
    },
    /// `s3:TestEvent`, sent once when a notification is configured.
    Test {
        /// The bucket it names.
        bucket: String,
    },
    /// A record that could not be read; `item` describes it for the error message.
    Broken {
        /// The record or key concerned.
        item: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// One SQS message and the records its body holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsMessage {
    /// The message id, reported back in `batchItemFailures`.
    pub message_id: String,
    /// The records of its body (a broken body is one `Broken` record).
    pub records: Vec<Record>,
}

/// A backfill request: schedule every partition of the range that has uncompacted files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    /// Tenants to cover; `None` for every tenant.
    #[serde(default)]
    pub tenants: Option<Vec<String>>,
    /// First hour, `YYYY-MM-DDTHH` (inclusive).
    pub from: String,
    /// Last hour, `YYYY-MM-DDTHH` (inclusive).
    pub to: String,
    /// Only report what would be scheduled.
    #[serde(default)]
    pub dry_run: bool,
}

/// A direct compaction request: `{"tenant": "acme", "hour": "2026-11-29T10"}`, or
/// `{"hour": "2026-11-29T10"}` in a layout without tenants.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct DirectJob {
    #[serde(default)]
    tenant: Option<String>,
    hour: String,
}

/// What one invocation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// Object events (direct S3, SNS or EventBridge); fails as a whole on a rejected record.
    Notifications {
        /// Where they came from.
        source: Source,
        /// The records in delivery order.
        records: Vec<Record>,
    },
    /// An SQS batch; each message fails alone.
    SqsBatch(Vec<SqsMessage>),
    /// A backfill request.
    Backfill(BackfillRequest),
    /// A scheduled sweep (EventBridge `Scheduled Event`, or `{"sweep": {}}`).
    Sweep,
    /// A direct compaction request (operators, tests).
    Compact {
        /// Tenant name as given (none in a layout without tenants).
        tenant: Option<String>,
        /// Hour as given.
        hour: String,
    },
    /// A task of a fanned-out job (`{"fan_out": {...}}`), sent by the state machine.
    FanOut(FanOutTask),
    /// A function-URL or API Gateway HTTP API request (MinIO's webhook target): its body,
    /// unwrapped, or why it is not a notification. The answer is an HTTP response.
    Http(Box<HttpRequest>),
}

/// The parts of an HTTP request event that matter: its method and what its body holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The notification the body holds; `Ok(None)` for a request without a body (a probe).
    pub body: Result<Option<Invocation>, NotAnEvent>,
}

impl HttpRequest {
    /// The function-URL response to this request: `status` with `body` as JSON. `cookies` and
    /// `isBase64Encoded` are spelled out: `cargo lambda watch` takes a response without
    /// `cookies` for a failure and answers 500, which a MinIO webhook retries forever.
    pub fn answer(status: u16, body: &Value) -> Value {
        serde_json::json!({
            "statusCode": status,
            "headers": { "content-type": "application/json" },
            "cookies": [],
            "isBase64Encoded": false,
            "body": body.to_string(),
        })
    }
}

/// Why a payload is not an invocation at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAnEvent(pub String);

impl fmt::Display for NotAnEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "payload is not an event this function handles: {}",
            self.0
        )
    }
}

impl std::error::Error for NotAnEvent {}

impl From<NotAnEvent> for InvocationError {
    fn from(error: NotAnEvent) -> Self {
        Self::new(ErrorKind::InvalidInput, error.to_string())
    }
}

/// Unwraps a payload into an invocation.
pub fn parse_invocation(payload: &Value) -> Result<Invocation, NotAnEvent> {
    let bad = |why: &str| NotAnEvent(why.to_string());
    let Some(object) = payload.as_object() else {
        return Err(bad("expected a JSON object"));
    };
    if let Some(records) = object.get("Records") {
        return parse_records(records);
    }
    if let Some(http) = object.get("requestContext").and_then(|c| c.get("http")) {
        let method = http
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let body = parse_http_body(payload);
        return Ok(Invocation::Http(Box::new(HttpRequest { method, body })));
    }
    if let Some(request) = object.get("backfill") {
        let request: BackfillRequest = serde_json::from_value(request.clone())
            .map_err(|e| NotAnEvent(format!("backfill request: {e}")))?;
        return Ok(Invocation::Backfill(request));
    }
    if object.contains_key("sweep") {
        return Ok(Invocation::Sweep);
    }
    if let Some(task) = object.get("fan_out") {
        let task: FanOutTask = serde_json::from_value(task.clone())
            .map_err(|e| NotAnEvent(format!("fan-out task: {e}")))?;
        return Ok(Invocation::FanOut(task));
    }
    if object.contains_key("tenant") || object.contains_key("hour") {
        let job: DirectJob = serde_json::from_value(payload.clone())
            .map_err(|e| NotAnEvent(format!("compaction request: {e}")))?;
        return Ok(Invocation::Compact {
            tenant: job.tenant,
            hour: job.hour,
        });
    }
    if object.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event") {
        return Ok(Invocation::Sweep);
    }
    match parse_notification(payload) {
        Ok((source, records)) => Ok(Invocation::Notifications { source, records }),
        Err(why) => Err(NotAnEvent(why)),
    }
}

/// The body of an HTTP request event (payload format 2.0): text, or base64 when
/// `isBase64Encoded`; it must hold a notification (S3, MinIO or EventBridge), nothing else.
fn parse_http_body(payload: &Value) -> Result<Option<Invocation>, NotAnEvent> {
    let bad = |why: String| NotAnEvent(format!("HTTP request body: {why}"));
    let text = match payload.get("body") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => text,
        Some(_) => return Err(bad("body is not a string".into())),
    };
    let is_base64 = payload
        .get("isBase64Encoded")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let bytes = if is_base64 {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|e| bad(format!("isBase64Encoded but not base64: {e}")))?
    } else {
        text.as_bytes().to_vec()
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    if let Some(records) = value.get("Records") {
        return match parse_records(records).map_err(|e| bad(e.0))? {
            Invocation::SqsBatch(_) => Err(bad("an SQS batch is not delivered over HTTP".into())),
            notifications => Ok(Some(notifications)),
        };
    }
    parse_notification(&value)
        .map(|(source, records)| Some(Invocation::Notifications { source, records }))
        .map_err(bad)
}

/// `{"Records": [...]}`: an S3 or MinIO notification, an SQS batch or SNS messages, told by
/// the first record's source.
fn parse_records(records: &Value) -> Result<Invocation, NotAnEvent> {
    let Some(records) = records.as_array() else {
        return Err(NotAnEvent("Records is not a list".into()));
    };
    let Some(first) = records.first() else {
        return Err(NotAnEvent("Records is empty".into()));
    };
    match event_source(first) {
        Some("aws:sqs") => {
            let mut messages = Vec::with_capacity(records.len());
            for (i, record) in records.iter().enumerate() {
                let Some(message_id) = record.get("messageId").and_then(Value::as_str) else {
                    return Err(NotAnEvent(format!("SQS record {i} has no messageId")));
                };
                let body = match event_source(record) {
                    Some("aws:sqs") => record.get("body").and_then(Value::as_str),
                    _ => None,
                };
                let records = match body {
                    None => vec![broken(
                        &format!("SQS message {message_id}"),
                        "not an SQS record with a string body",
                    )],
                    Some(body) => parse_embedded(body).unwrap_or_else(|why| {
                        vec![broken(&format!("SQS message {message_id}"), &why)]
                    }),
                };
                messages.push(SqsMessage {
                    message_id: message_id.to_string(),
                    records,
                });
            }
            Ok(Invocation::SqsBatch(messages))
        }
        Some("aws:sns") => {
            let mut out = Vec::new();
            for (i, record) in records.iter().enumerate() {
                let item = format!("SNS record {i}");
                let message = record
                    .get("Sns")
                    .and_then(|s| s.get("Message"))
                    .and_then(Value::as_str);
                match (event_source(record), message) {
                    (Some("aws:sns"), Some(message)) => match parse_embedded(message) {
                        Ok(records) => out.extend(records),
                        Err(why) => out.push(broken(&item, &why)),
                    },
                    _ => out.push(broken(&item, "not an SNS record with a string Message")),
                }
            }
            Ok(Invocation::Notifications {
                source: Source::Sns,
                records: out,
            })
        }
        first_source => Ok(Invocation::Notifications {
            source: if first_source == Some(MINIO_SOURCE) {
                Source::Minio
            } else {
                Source::S3
            },
            records: records
                .iter()
                .enumerate()
                .map(|(i, r)| parse_s3_record(i, r))
                .collect(),
        }),
    }
}

/// `eventSource` of a MinIO notification record.
const MINIO_SOURCE: &str = "minio:s3";

fn event_source(record: &Value) -> Option<&str> {
    record
        .get("eventSource")
        .or_else(|| record.get("EventSource"))
        .and_then(Value::as_str)
}

fn broken(item: &str, reason: &str) -> Record {
    Record::Broken {
        item: item.to_string(),
        reason: reason.to_string(),
    }
}

/// The body of an SQS message or SNS notification: an S3 notification, a test event, an SNS
/// envelope (SNS to SQS without raw delivery) or an EventBridge event.
fn parse_embedded(text: &str) -> Result<Vec<Record>, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("message body is not JSON: {e}"))?;
    if value.get("Type").and_then(Value::as_str) == Some("Notification")
        && let Some(message) = value.get("Message").and_then(Value::as_str)
    {
        // One level of SNS envelope only: a message is never unwrapped twice.
        let inner: Value =
            serde_json::from_str(message).map_err(|e| format!("SNS Message is not JSON: {e}"))?;
        return parse_notification(&inner).map(|(_, records)| records);
    }
    parse_notification(&value).map(|(_, records)| records)
}

/// An S3 notification (`Records` of `aws:s3` or `minio:s3`), `s3:TestEvent`, or an
/// EventBridge S3 event.
fn parse_notification(value: &Value) -> Result<(Source, Vec<Record>), String> {
    if value.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        let bucket = value.get("Bucket").and_then(Value::as_str).unwrap_or("");
        return Ok((
            Source::S3,
            vec![Record::Test {
                bucket: bucket.to_string(),
            }],
        ));
    }
    if let Some(records) = value.get("Records").and_then(Value::as_array) {
        if records.is_empty() {
            return Err("Records is empty".into());
        }
        let parsed = records
            .iter()
            .enumerate()
            .map(|(i, r)| parse_s3_record(i, r))
            .collect();
        let source = match records.first().and_then(event_source) {
            Some(MINIO_SOURCE) => Source::Minio,
            _ => Source::S3,
        };
        return Ok((source, parsed));
    }
    if let Some(detail_type) = value.get("detail-type").and_then(Value::as_str) {
        return if value.get("source").and_then(Value::as_str) == Some("aws.s3") {
            Ok((
                Source::EventBridge,
                vec![parse_eventbridge(detail_type, value)],
            ))
        } else {
            Err(format!(
                "EventBridge event {detail_type:?} from {} is not from S3",
                value
                    .get("source")
                    .and_then(Value::as_str)
                    .unwrap_or("an unknown source")
            ))
        };
    }
    Err("expected an S3, SQS, SNS or EventBridge event, a backfill, a sweep or a job".into())
}

/// One `aws:s3` or `minio:s3` record; its key is URL-encoded (MinIO encodes `/` as `%2F`
/// too), and MinIO's event names carry an `s3:` prefix (`s3:ObjectCreated:Put`).
fn parse_s3_record(index: usize, record: &Value) -> Record {
    let item = format!("S3 record {index}");
    if !matches!(event_source(record), Some("aws:s3" | MINIO_SOURCE)) {
        return broken(&item, "eventSource is neither aws:s3 nor minio:s3");
    }
    let event_name = record
        .get("eventName")
        .and_then(Value::as_str)
        .map(|name| name.strip_prefix("s3:").unwrap_or(name));
    let s3 = record.get("s3");
    let bucket = s3
        .and_then(|s| s.get("bucket"))
        .and_then(|b| b.get("name"))
        .and_then(Value::as_str);
    let key = s3
        .and_then(|s| s.get("object"))
        .and_then(|o| o.get("key"))
        .and_then(Value::as_str);
    match (event_name, bucket, key) {
        (Some(event_name), Some(bucket), Some(raw_key)) => match decode_s3_key(raw_key) {
            Ok(key) => Record::Object {
                event_name: event_name.to_string(),
                bucket: bucket.to_string(),
                key,
            },
            Err(reason) => broken(raw_key, &reason),
        },
        _ => broken(&item, "needs eventName, s3.bucket.name and s3.object.key"),
    }
}

/// An EventBridge event from S3; its key is URL-encoded like a notification's.
fn parse_eventbridge(detail_type: &str, value: &Value) -> Record {
    let detail = value.get("detail");
    let bucket = detail
        .and_then(|d| d.get("bucket"))
        .and_then(|b| b.get("name"))
        .and_then(Value::as_str);
    let key = detail
        .and_then(|d| d.get("object"))
        .and_then(|o| o.get("key"))
        .and_then(Value::as_str);
    let (Some(bucket), Some(raw_key)) = (bucket, key) else {
        return broken(
            &format!("EventBridge {detail_type:?} event"),
            "needs detail.bucket.name and detail.object.key",
        );
    };
    let key = match decode_s3_key(raw_key) {
        Ok(key) => key,
        Err(reason) => return broken(raw_key, &reason),
    };
    let reason = detail
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or("Put");
    let event_name = match detail_type {
        "Object Created" => format!("ObjectCreated:{reason}"),
        other => other.to_string(),
    };
    Record::Object {
        event_name,
        bucket: bucket.to_string(),
        key,
    }
}

/// Decodes an S3 notification key exactly once: `+` is a space, `%XX` a byte, and the bytes
/// must be UTF-8. A malformed escape is an error, never passed through.
pub fn decode_s3_key(raw: &str) -> Result<String, String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| {
                    let h = std::str::from_utf8(h).ok()?;
                    u8::from_str_radix(h, 16)
                        .ok()
                        .filter(|_| h.bytes().all(|b| b.is_ascii_hexdigit()))
                });
                let Some(byte) = hex else {
                    return Err(format!("invalid percent escape at byte {i} of {raw:?}"));
                };
                out.push(byte);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{raw:?} does not decode to UTF-8"))
}

/// Which bucket and key prefix hold the store root, to turn event keys into store keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyScope {
    bucket: Option<String>,
    root_prefix: String,
}

impl KeyScope {
    /// The scope of a store root URL: an S3 root names its bucket and prefix; a local or
    /// in-memory root accepts any bucket and has no prefix (tests and the local loop).
    pub fn for_store(url: &StoreUrl) -> Self {
        match url {
            StoreUrl::S3 { bucket, prefix } => Self {
                bucket: Some(bucket.clone()),
                root_prefix: prefix.clone(),
            },
            StoreUrl::Local(_) | StoreUrl::Memory => Self {
                bucket: None,
                root_prefix: String::new(),
            },
        }
    }

    /// The key relative to the store root: `Ok(None)` when it is outside the root,
    /// `Err` when the bucket is not the store's (a wiring mistake).
    pub fn relative<'k>(&self, bucket: &str, key: &'k str) -> Result<Option<&'k str>, String> {
        if let Some(own) = &self.bucket
            && own != bucket
        {
            return Err(format!(
                "bucket {bucket:?} is not the store's bucket {own:?}"
            ));
        }
        if self.root_prefix.is_empty() {
            return Ok(Some(key));
        }
        Ok(key
            .strip_prefix(self.root_prefix.as_str())
            .and_then(|rest| rest.strip_prefix('/')))
    }
}

/// Why a record was acknowledged without work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IgnoreReason {
    /// `s3:TestEvent`.
    TestEvent,
    /// A key outside the ingest prefix (or the job prefix, for the compactor): the
    /// compactor's own outputs and metadata land there.
    OutsidePrefix,
    /// An event that creates nothing (`ObjectRemoved:*`, ...).
    CreatesNothing,
    /// A writer's side file under the ingest prefix (`_SUCCESS`, `*.crc`, `_temporary/…`):
    /// not data (the README's storage layout).
    WriterSideFile,
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IgnoreReason::TestEvent => "s3:TestEvent",
            IgnoreReason::OutsidePrefix => "outside the prefix this function watches",
            IgnoreReason::CreatesNothing => "event creates no object",
            IgnoreReason::WriterSideFile => "writer side file, not data",
        })
    }
}

/// A record sorted for action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// A valid key: its partition is considered.
    Accepted {
        /// The store-relative key.
        key: String,
        /// Its partition.
        partition: PartitionId,
    },
    /// Acknowledged without work.
    Ignored {
        /// The key, or a description of the record.
        item: String,
        /// Why.
        reason: IgnoreReason,
    },
    /// Broken: reported loudly, never dropped silently.
    Rejected {
        /// The key, or a description of the record.
        item: String,
        /// Why.
        reason: String,
    },
}

/// Which keys a function acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Ingest files (the planner).
    Ingest,
    /// Job records (the compactor).
    Jobs,
}

/// Sorts one record into accepted, ignored or rejected.
pub fn classify(record: &Record, scope: &KeyScope, layout: &KeyLayout, watch: Watch) -> Classified {
    let (event_name, bucket, key) = match record {
        Record::Test { bucket } => {
            return Classified::Ignored {
                item: format!("s3:TestEvent for bucket {bucket:?}"),
                reason: IgnoreReason::TestEvent,
            };
        }
        Record::Broken { item, reason } => {
            return Classified::Rejected {
                item: item.clone(),
                reason: reason.clone(),
            };
        }
        Record::Object {
            event_name,
            bucket,
            key,
        } => (event_name, bucket, key),
    };
    if !event_name.starts_with("ObjectCreated:") {
        return Classified::Ignored {
            item: key.clone(),
            reason: IgnoreReason::CreatesNothing,
        };
    }
    let relative = match scope.relative(bucket, key) {
        Ok(Some(relative)) => relative,
        Ok(None) => {
            return Classified::Ignored {
                item: key.clone(),
                reason: IgnoreReason::OutsidePrefix,
            };
        }
        Err(reason) => {
            return Classified::Rejected {
                item: key.clone(),
                reason,
            };
        }
    };
    let watched = match watch {
        Watch::Ingest => layout.ingest_prefix().to_string(),
        Watch::Jobs => JOBS_PREFIX.to_string(),
    };
    if !relative.starts_with(&format!("{watched}/")) {
        return Classified::Ignored {
            item: key.clone(),
            reason: IgnoreReason::OutsidePrefix,
        };
    }
    if watch == Watch::Ingest && is_writer_side_file(&relative[watched.len() + 1..]) {
        return Classified::Ignored {
            item: key.clone(),
            reason: IgnoreReason::WriterSideFile,
        };
    }
    let parsed = match watch {
        Watch::Ingest => layout.parse_ingest_key(relative).map(|(p, _)| p),
        Watch::Jobs => parse_job_key(relative),
    };
    match parsed {
        Ok(partition) => Classified::Accepted {
            key: relative.to_string(),
            partition,
        },
        Err(e) => Classified::Rejected {
            item: key.clone(),
            reason: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;

//! Decoding, unwrapping and the accept/ignore/reject rules (`functions/README.md`).

use serde_json::json;

use super::*;
use crate::partition::job_key;

const P: &str = "tenant=acme/year=2026/month=11/day=29/hour=10";

fn layout() -> KeyLayout {
    KeyLayout::default()
}

fn any_bucket() -> KeyScope {
    KeyScope::for_store(&StoreUrl::Memory)
}

fn s3_record(name: &str, bucket: &str, key: &str) -> serde_json::Value {
    json!({
        "eventSource": "aws:s3",
        "eventName": name,
        "s3": {"bucket": {"name": bucket}, "object": {"key": key}}
    })
}

fn classify_s3(key: &str, scope: &KeyScope) -> Classified {
    let payload = json!({"Records": [s3_record("ObjectCreated:Put", "logs-bucket", key)]});
    let Ok(Invocation::Notifications { records, .. }) = parse_invocation(&payload) else {
        panic!("an S3 notification parses");
    };
    classify(&records[0], scope, &layout(), Watch::Ingest)
}

/// An object record of `event_name` on `bucket`'s `key`.
fn object_record(event_name: &str, bucket: &str, key: String) -> Record {
    Record::Object {
        event_name: event_name.into(),
        bucket: bucket.into(),
        key,
    }
}

/// Why `record` is ignored when watching `watch` (panics when it is not ignored).
fn ignore_reason(record: &Record, watch: Watch) -> IgnoreReason {
    match classify(record, &any_bucket(), &layout(), watch) {
        Classified::Ignored { reason, .. } => reason,
        other => panic!("not ignored: {other:?}"),
    }
}

#[test]
fn decodes_keys_exactly_once() {
    for (raw, want) in [
        ("data/tenant%3Dacme/x.parquet", "data/tenant=acme/x.parquet"),
        ("batch+0001.parquet", "batch 0001.parquet"),
        ("caf%C3%A9.parquet", "café.parquet"),
        ("a%2Bb.parquet", "a+b.parquet"),
        // Decoded once: a double-encoded `=` stays `%3D`.
        ("tenant%253Dacme", "tenant%3Dacme"),
        ("plain", "plain"),
    ] {
        assert_eq!(decode_s3_key(raw).as_deref(), Ok(want), "{raw}");
    }
    for bad in ["%", "x%2", "%G1", "%C3", "%ff%fe"] {
        assert!(decode_s3_key(bad).is_err(), "{bad} must not decode");
    }
}

#[test]
fn accepts_encoded_ingest_keys() {
    let key = format!("data/{}/batch+1.parquet", P.replace('=', "%3D"));
    match classify_s3(&key, &any_bucket()) {
        Classified::Accepted { key, partition } => {
            assert_eq!(key, format!("data/{P}/batch 1.parquet"));
            assert_eq!(partition.relative_dir(), P);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn keys_of_another_layout_are_read_through_its_template() {
    let layout = KeyLayout::from_template("logs/year=%Y/month=%m/day=%d/svc={tenant}/hr=%H/min=%M")
        .expect("a layout");
    let payload = |key: &str| json!({"Records": [s3_record("ObjectCreated:CompleteMultipartUpload", "logs-bucket", key)]});
    let classify_in = |key: &str| {
        let Ok(Invocation::Notifications { records, .. }) = parse_invocation(&payload(key)) else {
            panic!("an S3 notification parses");
        };
        classify(&records[0], &any_bucket(), &layout, Watch::Ingest)
    };
    for key in [
        "logs/year%3D2026/month%3D11/day%3D29/svc%3Dacme/hr%3D10/min%3D07/abc.parquet",
        "logs/year%3D2026/month%3D11/day%3D29/svc%3Dacme/hr%3D10/abc.parquet",
    ] {
        match classify_in(key) {
            Classified::Accepted { partition, .. } => {
                assert_eq!(partition.relative_dir(), P, "{key}");
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    // This project's layout is outside that one's prefix; a key below it that breaks the
    // template is rejected, naming the layout.
    assert!(matches!(
        classify_in(&format!("data/{P}/x.parquet")),
        Classified::Ignored { .. }
    ));
    match classify_in(
        "logs/year%3D2026/month%3D11/day%3D29/svc%3Dacme/hr%3D10/min%3D61/abc.parquet",
    ) {
        Classified::Rejected { reason, .. } => assert!(reason.contains("logs/year=%Y"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rejects_keys_failing_the_grammar_after_one_decoding() {
    for key in [
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D25/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D13/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3Dacme//year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3D..%2F..%2Fetc/year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/..%2F..%2Fx.parquet",
        "data/tenant%3Dac%24me/year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/f%0A.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/f.json",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/sub/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/.%2F_SUCCESS",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/..%2F_SUCCESS",
        // Double-encoded: after one decoding it is `tenant%3Dacme`, which is not the grammar.
        "data/tenant%253Dacme/year%253D2026/month%253D11/day%253D29/hour%253D10/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet%ZZ",
    ] {
        assert!(
            matches!(classify_s3(key, &any_bucket()), Classified::Rejected { .. }),
            "{key} must be rejected"
        );
    }
}

#[test]
fn ignores_outside_the_ingest_prefix_and_what_creates_nothing() {
    for key in [
        "compacted/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/part-1.parquet",
        "_compaction/manifests/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/v00000000000000000001.json",
        "_compaction/jobs/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10.json",
        "datax/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet",
        "data",
    ] {
        assert_eq!(
            classify_s3(key, &any_bucket()),
            Classified::Ignored {
                item: decode_s3_key(key).unwrap(),
                reason: IgnoreReason::OutsidePrefix
            },
            "{key}"
        );
    }
    let removed = object_record("ObjectRemoved:Delete", "b", format!("data/{P}/f.parquet"));
    assert_eq!(
        ignore_reason(&removed, Watch::Ingest),
        IgnoreReason::CreatesNothing
    );
    let test =
        parse_invocation(&json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"}))
            .unwrap();
    let Invocation::Notifications { records, .. } = test else {
        panic!()
    };
    assert_eq!(
        ignore_reason(&records[0], Watch::Ingest),
        IgnoreReason::TestEvent
    );
}

#[test]
fn store_scope_strips_the_root_and_checks_the_bucket() {
    let scope = KeyScope::for_store(&StoreUrl::parse("s3://logs-bucket/root/dir").unwrap());
    let key = format!("root/dir/data/{}/f.parquet", P.replace('=', "%3D"));
    assert!(matches!(
        classify_s3(&key, &scope),
        Classified::Accepted { .. }
    ));
    // Outside the root: ignored, like any key this function does not watch.
    let other = format!("elsewhere/data/{}/f.parquet", P.replace('=', "%3D"));
    assert!(matches!(
        classify_s3(&other, &scope),
        Classified::Ignored { .. }
    ));
    let wrong_bucket = object_record(
        "ObjectCreated:Put",
        "someone-else",
        format!("root/dir/data/{P}/f.parquet"),
    );
    assert!(matches!(
        classify(&wrong_bucket, &scope, &layout(), Watch::Ingest),
        Classified::Rejected { .. }
    ));
}

#[test]
fn eventbridge_keys_are_decoded_exactly_once() {
    let event = |key: &str| {
        json!({
            "version": "0", "detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b"}, "object": {"key": key}, "reason": "PutObject"}
        })
    };
    let classify_eventbridge = |key: &str| {
        let Ok(Invocation::Notifications { source, records }) = parse_invocation(&event(key))
        else {
            panic!("an EventBridge event parses")
        };
        assert_eq!(source, Source::EventBridge);
        classify(&records[0], &any_bucket(), &layout(), Watch::Ingest)
    };
    // As in S3 notifications: `%3D` is `=`, `+` a space.
    let encoded = format!("data/{}/batch+1.parquet", P.replace('=', "%3D"));
    match classify_eventbridge(&encoded) {
        Classified::Accepted { key, partition } => {
            assert_eq!(key, format!("data/{P}/batch 1.parquet"));
            assert_eq!(partition.relative_dir(), P);
        }
        other => panic!("{other:?}"),
    }
    // Keys without escapes are the same decoded or not.
    assert!(matches!(
        classify_eventbridge(&format!("data/{P}/f.parquet")),
        Classified::Accepted { .. }
    ));
    // Decoded once: a double-encoded `=` stays `%3D` and fails the grammar, loudly.
    let double = format!("data/{}/f.parquet", P.replace('=', "%253D"));
    assert!(matches!(
        classify_eventbridge(&double),
        Classified::Rejected { .. }
    ));
    assert!(matches!(
        classify_eventbridge(&format!("data/{P}/f.parquet%ZZ")),
        Classified::Rejected { .. }
    ));
}

/// A MinIO webhook body as MinIO sends it: Go's `url.QueryEscape` of the key (`/` as `%2F`,
/// `=` as `%3D`, a space as `+`), `s3:`-prefixed event names, top-level `EventName` and `Key`.
fn minio_body(event_name: &str, object: &str) -> serde_json::Value {
    let escaped = object
        .replace('=', "%3D")
        .replace('/', "%2F")
        .replace(' ', "+");
    json!({
        "EventName": event_name,
        "Key": format!("logs-bucket/{object}"),
        "Records": [{
            "eventVersion": "2.0", "eventSource": "minio:s3", "awsRegion": "",
            "eventName": event_name,
            "s3": {"bucket": {"name": "logs-bucket"}, "object": {"key": escaped}}
        }]
    })
}

#[test]
fn minio_notifications_are_accepted() {
    let object = format!("data/{P}/batch 7.parquet");
    let Ok(Invocation::Notifications { source, records }) =
        parse_invocation(&minio_body("s3:ObjectCreated:Put", &object))
    else {
        panic!("a MinIO notification parses")
    };
    assert_eq!(source, Source::Minio);
    assert_eq!(
        records[0],
        object_record("ObjectCreated:Put", "logs-bucket", object.clone())
    );
    match classify(&records[0], &any_bucket(), &layout(), Watch::Ingest) {
        Classified::Accepted { key, partition } => {
            assert_eq!(key, object);
            assert_eq!(partition.relative_dir(), P);
        }
        other => panic!("{other:?}"),
    }
    let Ok(Invocation::Notifications { records, .. }) =
        parse_invocation(&minio_body("s3:ObjectRemoved:Delete", &object))
    else {
        panic!("a MinIO notification parses")
    };
    assert_eq!(
        ignore_reason(&records[0], Watch::Ingest),
        IgnoreReason::CreatesNothing
    );
    // A MinIO key failing the grammar after its one decoding is rejected, naming it.
    let Ok(Invocation::Notifications { records, .. }) = parse_invocation(&minio_body(
        "s3:ObjectCreated:Put",
        &format!("data/{}/f.parquet", P.replace("hour=10", "hour=24")),
    )) else {
        panic!("a MinIO notification parses")
    };
    match classify(&records[0], &any_bucket(), &layout(), Watch::Ingest) {
        Classified::Rejected { item, .. } => assert!(item.contains("hour=24"), "{item}"),
        other => panic!("{other:?}"),
    }
}

fn http_event(body: &str, base64: bool) -> serde_json::Value {
    json!({
        "version": "2.0", "routeKey": "$default", "rawPath": "/", "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/"}},
        "body": body, "isBase64Encoded": base64
    })
}

#[test]
fn http_requests_carry_notifications_in_their_body() {
    use base64::Engine as _;
    let body = minio_body("s3:ObjectCreated:Put", &format!("data/{P}/f.parquet")).to_string();
    let expected = parse_invocation(&serde_json::from_str(&body).unwrap()).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(body.as_bytes());
    for payload in [http_event(&body, false), http_event(&encoded, true)] {
        let Ok(Invocation::Http(request)) = parse_invocation(&payload) else {
            panic!("an HTTP request event parses")
        };
        assert_eq!(request.method, "POST");
        assert_eq!(request.body, Ok(Some(expected.clone())));
    }
    // An S3 notification over HTTP is accepted too.
    let s3 =
        json!({"Records": [s3_record("ObjectCreated:Put", "b", &format!("data/{P}/f.parquet"))]});
    let Ok(Invocation::Http(request)) = parse_invocation(&http_event(&s3.to_string(), false))
    else {
        panic!()
    };
    assert!(matches!(
        request.body,
        Ok(Some(Invocation::Notifications {
            source: Source::S3,
            ..
        }))
    ));
    // A probe without a body; bodies that are not notifications are refused, not panicked on.
    let mut probe = http_event("", false);
    probe["requestContext"]["http"]["method"] = json!("HEAD");
    probe.as_object_mut().unwrap().remove("body");
    let Ok(Invocation::Http(request)) = parse_invocation(&probe) else {
        panic!()
    };
    assert_eq!((request.method.as_str(), request.body), ("HEAD", Ok(None)));
    for (body, base64) in [
        ("not json", false),
        ("%%%", true),
        (
            r#"{"backfill": {"from": "2026-11-29T00", "to": "2026-11-29T01"}}"#,
            false,
        ),
        (
            r#"{"Records": [{"eventSource": "aws:sqs", "messageId": "m", "body": "{}"}]}"#,
            false,
        ),
    ] {
        let Ok(Invocation::Http(request)) = parse_invocation(&http_event(body, base64)) else {
            panic!("{body}")
        };
        assert!(request.body.is_err(), "{body}: {:?}", request.body);
    }
}

#[test]
fn writer_side_files_are_ignored_not_rejected() {
    for file in [
        "_SUCCESS",
        "_committed_123",
        "_started_123",
        "_tmp.parquet",
        ".part-0000.crc",
        "part-0000.snappy.parquet.crc",
        "_temporary/0/_temporary/attempt_1/part-0000.parquet",
    ] {
        let key = format!(
            "data/{}/{}",
            P.replace('=', "%3D"),
            file.replace('/', "%2F")
        );
        assert_eq!(
            classify_s3(&key, &any_bucket()),
            Classified::Ignored {
                item: format!("data/{P}/{file}"),
                reason: IgnoreReason::WriterSideFile
            },
            "{file}"
        );
    }
    // Spark writing the whole prefix: its markers sit above the partitions.
    for key in ["data/_SUCCESS", "data/_temporary/0/tenant%3Dacme/f.parquet"] {
        assert!(matches!(
            classify_s3(key, &any_bucket()),
            Classified::Ignored {
                reason: IgnoreReason::WriterSideFile,
                ..
            }
        ));
    }
}

#[test]
fn unwraps_sqs_sns_and_sns_inside_sqs() {
    let s3 =
        json!({"Records": [s3_record("ObjectCreated:Put", "b", &format!("data/{P}/f.parquet"))]})
            .to_string();
    let sns_envelope = json!({"Type": "Notification", "Message": s3}).to_string();
    let sqs = json!({"Records": [
        {"eventSource": "aws:sqs", "messageId": "m1", "body": s3},
        {"eventSource": "aws:sqs", "messageId": "m2", "body": sns_envelope},
        {"eventSource": "aws:sqs", "messageId": "m3", "body": "not json"},
        {"eventSource": "aws:sqs", "messageId": "m4"},
    ]});
    let Ok(Invocation::SqsBatch(messages)) = parse_invocation(&sqs) else {
        panic!()
    };
    let ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2", "m3", "m4"]);
    assert!(matches!(messages[0].records[..], [Record::Object { .. }]));
    assert_eq!(messages[0].records, messages[1].records);
    assert!(matches!(messages[2].records[..], [Record::Broken { .. }]));
    assert!(matches!(messages[3].records[..], [Record::Broken { .. }]));
    // A batch whose message has no id cannot report it alone: the payload is refused.
    assert!(
        parse_invocation(&json!({"Records": [{"eventSource": "aws:sqs", "body": s3}]})).is_err()
    );

    let sns = json!({"Records": [{"EventSource": "aws:sns", "Sns": {"Message": s3}}]});
    let Ok(Invocation::Notifications { source, records }) = parse_invocation(&sns) else {
        panic!()
    };
    assert_eq!(source, Source::Sns);
    assert!(matches!(records[..], [Record::Object { .. }]));
}

#[test]
fn broken_records_and_non_events() {
    for payload in [
        json!([1, 2]),
        json!("text"),
        json!({"hello": "world"}),
        json!({"Records": []}),
        json!({"Records": "x"}),
        json!({"detail-type": "Object Created", "source": "aws.ec2", "detail": {}}),
        json!({"backfill": {"from": "2026-11-29T10"}}),
        json!({"tenant": "acme"}),
    ] {
        assert!(parse_invocation(&payload).is_err(), "{payload}");
    }
    let broken = json!({"Records": [
        {"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "b"}}},
        {"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": {"object": {"key": 7}, "bucket": {"name": "b"}}},
    ]});
    let Ok(Invocation::Notifications { records, .. }) = parse_invocation(&broken) else {
        panic!()
    };
    for record in &records {
        assert!(matches!(
            classify(record, &any_bucket(), &layout(), Watch::Ingest),
            Classified::Rejected { .. }
        ));
    }
}

#[test]
fn backfill_sweep_and_direct_jobs() {
    let backfill = json!({"backfill": {"tenants": null, "from": "2026-11-29T00", "to": "2026-11-29T23", "dry_run": true}});
    assert_eq!(
        parse_invocation(&backfill),
        Ok(Invocation::Backfill(BackfillRequest {
            tenants: None,
            from: "2026-11-29T00".into(),
            to: "2026-11-29T23".into(),
            dry_run: true
        }))
    );
    let sweep = json!({"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
    assert_eq!(parse_invocation(&sweep), Ok(Invocation::Sweep));
    assert_eq!(
        parse_invocation(&json!({"tenant": "acme", "hour": "2026-11-29T10"})),
        Ok(Invocation::Compact {
            tenant: Some("acme".into()),
            hour: "2026-11-29T10".into()
        })
    );
    // A layout without tenants: the hour alone.
    assert_eq!(
        parse_invocation(&json!({"hour": "2026-11-29T10"})),
        Ok(Invocation::Compact {
            tenant: None,
            hour: "2026-11-29T10".into()
        })
    );
}

#[test]
fn job_keys_round_trip_strictly() {
    let p = PartitionId::parse("acme", "2026-11-29T10").unwrap();
    let key = job_key(&p);
    assert_eq!(key, format!("_compaction/jobs/{P}.json"));
    assert_eq!(parse_job_key(&key).unwrap(), p);
    for bad in [
        "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=25.json",
        "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=10/x.json",
        "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=10",
        "_compaction/jobs/../jobs/tenant=acme/year=2026/month=11/day=29/hour=10.json",
    ] {
        assert!(parse_job_key(bad).is_err(), "{bad}");
    }
    // The compactor watches job records only; ingest keys are not its business.
    let ingest = object_record("ObjectCreated:Put", "b", format!("data/{P}/f.parquet"));
    assert_eq!(
        ignore_reason(&ingest, Watch::Jobs),
        IgnoreReason::OutsidePrefix
    );
}

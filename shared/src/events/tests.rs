//! Decoding, unwrapping and the accept/ignore/reject rules (DESIGN §6).

use serde_json::json;

use super::*;

const P: &str = "tenant=acme/year=2026/month=11/day=29/hour=10";

fn layout() -> Layout {
    Layout::default()
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
fn rejects_keys_failing_the_grammar_after_one_decoding() {
    for key in [
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D25/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D13/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3Dacme//year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3D..%2F..%2Fetc/year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/..%2F..%2Fx.parquet",
        "data/tenant%3Dac%24me/year%3D2026/month%3D11/day%3D29/hour%3D10/f.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/f%0A.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/_tmp.parquet",
        "data/tenant%3Dacme/year%3D2026/month%3D11/day%3D29/hour%3D10/f.json",
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
    let removed = Record::Object {
        event_name: "ObjectRemoved:Delete".into(),
        bucket: "b".into(),
        key: format!("data/{P}/f.parquet"),
    };
    assert!(matches!(
        classify(&removed, &any_bucket(), &layout(), Watch::Ingest),
        Classified::Ignored {
            reason: IgnoreReason::CreatesNothing,
            ..
        }
    ));
    let test =
        parse_invocation(&json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"}))
            .unwrap();
    let Invocation::Notifications { records, .. } = test else {
        panic!()
    };
    assert!(matches!(
        classify(&records[0], &any_bucket(), &layout(), Watch::Ingest),
        Classified::Ignored {
            reason: IgnoreReason::TestEvent,
            ..
        }
    ));
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
    let wrong_bucket = Record::Object {
        event_name: "ObjectCreated:Put".into(),
        bucket: "someone-else".into(),
        key: format!("root/dir/data/{P}/f.parquet"),
    };
    assert!(matches!(
        classify(&wrong_bucket, &scope, &layout(), Watch::Ingest),
        Classified::Rejected { .. }
    ));
}

#[test]
fn eventbridge_keys_are_not_decoded() {
    let event = |key: &str| {
        json!({
            "version": "0", "detail-type": "Object Created", "source": "aws.s3",
            "detail": {"bucket": {"name": "b"}, "object": {"key": key}, "reason": "PutObject"}
        })
    };
    let plain = parse_invocation(&event(&format!("data/{P}/a+b.parquet"))).unwrap();
    let Invocation::Notifications { source, records } = plain else {
        panic!()
    };
    assert_eq!(source, Source::EventBridge);
    match classify(&records[0], &any_bucket(), &layout(), Watch::Ingest) {
        Classified::Accepted { key, .. } => assert_eq!(key, format!("data/{P}/a+b.parquet")),
        other => panic!("{other:?}"),
    }
    // An encoded key in EventBridge is literally `%3D`: rejected, not decoded.
    let encoded =
        parse_invocation(&event(&format!("data/{}/f.parquet", P.replace('=', "%3D")))).unwrap();
    let Invocation::Notifications { records, .. } = encoded else {
        panic!()
    };
    assert!(matches!(
        classify(&records[0], &any_bucket(), &layout(), Watch::Ingest),
        Classified::Rejected { .. }
    ));
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
            tenant: "acme".into(),
            hour: "2026-11-29T10".into()
        })
    );
}

#[test]
fn job_keys_round_trip_strictly() {
    let p = PartitionId::parse("acme", "2026-11-29T10").unwrap();
    let key = job_key(&p);
    assert_eq!(key, format!("_compaction/jobs/{P}.json"));
    assert_eq!(parse_job_key(&key, &layout()).unwrap(), p);
    for bad in [
        "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=25.json",
        "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=10/x.json",
        "_compaction/jobs/tenant=acme/year=2026/month=11/day=29/hour=10",
        "_compaction/jobs/../jobs/tenant=acme/year=2026/month=11/day=29/hour=10.json",
    ] {
        assert!(parse_job_key(bad, &layout()).is_err(), "{bad}");
    }
    // The compactor watches job records only; ingest keys are not its business.
    let ingest = Record::Object {
        event_name: "ObjectCreated:Put".into(),
        bucket: "b".into(),
        key: format!("data/{P}/f.parquet"),
    };
    assert!(matches!(
        classify(&ingest, &any_bucket(), &layout(), Watch::Jobs),
        Classified::Ignored {
            reason: IgnoreReason::OutsidePrefix,
            ..
        }
    ));
}

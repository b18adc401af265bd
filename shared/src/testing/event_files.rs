//! The workspace's `events/` payloads, which the functions' handler tests send one by one.

use std::path::PathBuf;

use serde_json::Value;

/// The workspace's `events/` directory.
pub fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../events")
}

/// Names of every event file (`*.json`), sorted.
pub fn event_file_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(events_dir())
        .expect("events/ exists")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

/// One event file, parsed.
pub fn load_event(name: &str) -> Value {
    let text = std::fs::read_to_string(events_dir().join(name)).expect("event file reads");
    serde_json::from_str(&text).expect("event file is JSON")
}

/// Asserts that a function URL answer has HTTP status `status` and a body containing `part`.
pub fn assert_http_answer(response: &Value, status: u16, part: &str) {
    assert_eq!(response["statusCode"], status, "{response}");
    assert!(
        response["body"].as_str().is_some_and(|b| b.contains(part)),
        "{response}"
    );
}

//! The per-partition manifest: which files are live, and how it changes by conditional write.
//!
//! A partition's manifest is a sequence of immutable versions
//! `_compaction/manifests/<partition>/v<NNNNNNNNNNNNNNNNNNNN>.json`, each created with a
//! create-only write (If-None-Match). The highest version is the state; a commit creates
//! the next version, so of two racing committers exactly one wins and the other sees
//! `AlreadyExists` (invariant 2). This works alike on S3, MinIO, a local
//! directory and in memory. [`gc`] deletes what the versions retired, after the grace period.

mod commit;
pub mod gc;
mod live;
mod release;
pub mod symlink;

pub use commit::{
    CommitOutcome, CommitRequest, commit, list_versions, load_latest, unpruned_until,
};
pub use live::{LiveSet, live_set, unaddressable_inputs};
pub use release::{Released, quarantine_files, release_quarantined};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::object_key::ObjectKey;
use crate::sort::key::{KeyPoint, KeyRange};

/// Format version written into every manifest.
pub const MANIFEST_FORMAT: u32 = 1;

/// One version of a partition's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format of this document.
    pub format: u32,
    /// Version number (1 for the first commit).
    pub version: u64,
    /// The partition, as `tenant=…/year=…/month=…/day=…/hour=…`.
    pub partition: String,
    /// Compacted files that are live.
    pub compacted: Vec<CompactedFile>,
    /// Files retired by a commit: no longer live, deleted after the grace period.
    pub retired: Vec<RetiredFile>,
    /// Ingest files that could not be compacted: left in place, never live again.
    pub quarantined: Vec<QuarantinedFile>,
    /// The attempt that wrote this version (JSON `job_id`).
    #[serde(rename = "job_id")]
    pub attempt_id: String,
    /// When this version was committed (Unix milliseconds, committer's clock; informational:
    /// grace periods use the store's clock, the version's Last-Modified).
    pub committed_at_ms: i64,
    /// The latest version that forgot retired entries (0: none). INVARIANT: a commit based on
    /// a version older than this ends `conflict`: its listing may hold a forgotten input that
    /// it would make live again.
    #[serde(default)]
    pub forgotten_in: u64,
    /// Bytes of ingest files retired by compactions so far (write-amplification denominator).
    #[serde(default)]
    pub ingested_bytes: u64,
    /// Bytes of compacted files written by the commits so far.
    #[serde(default)]
    pub written_bytes: u64,
    /// Unreferenced outputs GC committed to deleting, newest last (at most
    /// [`MAX_CONDEMNED`]). INVARIANT: a commit whose output is named here commits nothing, so
    /// a committer that stalled past its hold can never reference an object GC deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub condemned: Vec<ObjectKey>,
}

/// Condemned outputs a manifest remembers: far more than can be in flight at once.
pub const MAX_CONDEMNED: usize = 1_000;

/// A live compacted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedFile {
    /// Object key relative to the store root.
    pub key: ObjectKey,
    /// Rows in the file.
    pub rows: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Hash of the input set it was compacted from: an attempt whose input set is already
    /// committed under another name is a `noop` (each attempt names its output uniquely).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub input_set: String,
    /// Where it sits in the partition's order, when recorded: the live outputs with ranges are
    /// disjoint key ranges, each from its start to the next one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<OutputRange>,
}

/// The key range of a compacted file, by its start: the range runs to the next file's start.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OutputRange {
    /// The lowest key of the range (`None`: open below, the partition's first file).
    pub start: Option<KeyPoint>,
}

/// A file a commit took out of the live set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredFile {
    /// Object key relative to the store root.
    pub key: ObjectKey,
    /// When it was retired (Unix milliseconds, committer's clock; informational).
    pub retired_at_ms: i64,
    /// The version that retired it: its grace starts at that version's Last-Modified on the
    /// store's clock (0 for entries written before this was recorded: the latest version's).
    #[serde(default)]
    pub retired_in: u64,
}

/// A bad input, recorded with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedFile {
    /// Object key relative to the store root.
    pub key: ObjectKey,
    /// Why it could not be compacted.
    pub reason: String,
}

impl Manifest {
    /// The empty state before any commit (version 0, never written).
    pub fn empty(partition: &str) -> Self {
        Self {
            format: MANIFEST_FORMAT,
            version: 0,
            partition: partition.to_string(),
            compacted: Vec::new(),
            retired: Vec::new(),
            quarantined: Vec::new(),
            attempt_id: String::new(),
            committed_at_ms: 0,
            forgotten_in: 0,
            ingested_bytes: 0,
            written_bytes: 0,
            condemned: Vec::new(),
        }
    }

    /// Encodes as pretty JSON.
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain structs of strings and integers cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Decodes a manifest object, checking its format.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Self> {
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| Error::Manifest {
            key: key.to_string(),
            message: e.to_string(),
        })?;
        if manifest.format != MANIFEST_FORMAT {
            return Err(Error::Manifest {
                key: key.to_string(),
                message: format!(
                    "format {} is not supported (expected {MANIFEST_FORMAT}); upgrade the compactor",
                    manifest.format
                ),
            });
        }
        Ok(manifest)
    }

    /// True when `key` is retired or quarantined (so not live as an ingest file).
    pub fn excludes(&self, key: &str) -> bool {
        self.retired.iter().any(|r| r.key == key) || self.quarantined.iter().any(|q| q.key == key)
    }

    /// True when `key` is a live compacted file or a retired file (not yet past GC).
    pub fn references(&self, key: &str) -> bool {
        self.has_compacted(key) || self.retired.iter().any(|r| r.key == key)
    }

    /// True when `key` is a live compacted file.
    pub fn has_compacted(&self, key: &str) -> bool {
        self.compacted.iter().any(|c| c.key == key)
    }

    /// True when the live compacted files are in one piece: one file, the disjoint key ranges
    /// of one fanned-out job (they share an input set), or files whose recorded ranges follow
    /// each other from an open start ([`Manifest::ranges`]). Nothing is left to merge among
    /// them; other files of several commits are merged by the next compaction.
    pub fn compacted_in_one_piece(&self) -> bool {
        match self.compacted.split_first() {
            None => true,
            Some((first, rest)) => {
                rest.is_empty()
                    || (!first.input_set.is_empty()
                        && rest.iter().all(|c| c.input_set == first.input_set))
                    || self.ranges().is_some()
            }
        }
    }

    /// The live compacted files as disjoint key ranges in key order, when every one has its
    /// range recorded, the first open below and the starts strictly increasing; `None`
    /// otherwise.
    pub fn ranges(&self) -> Option<Vec<(&CompactedFile, KeyRange)>> {
        let starts: Vec<&OutputRange> = (self.compacted.iter())
            .map(|c| c.range.as_ref())
            .collect::<Option<_>>()?;
        let first_open = starts.first().is_some_and(|r| r.start.is_none());
        let increasing = starts.windows(2).all(|w| match (&w[0].start, &w[1].start) {
            (None, Some(_)) => true,
            (Some(a), Some(b)) => a < b,
            _ => false,
        });
        if !first_open || !increasing {
            return None;
        }
        let ends = (starts.iter().skip(1).map(|r| r.start.clone())).chain(std::iter::once(None));
        let ranges = (self.compacted.iter().zip(&starts).zip(ends))
            .map(|((file, start), end)| {
                let range = KeyRange {
                    start: start.start.clone(),
                    end,
                };
                (file, range)
            })
            .collect();
        Some(ranges)
    }

    /// Bytes written by compaction per byte ingested, over the partition's history (0 before
    /// the first compaction).
    pub fn write_amplification(&self) -> f64 {
        if self.ingested_bytes == 0 {
            0.0
        } else {
            self.written_bytes as f64 / self.ingested_bytes as f64
        }
    }

    /// Every key the reader rule keeps out of the live set (retired or quarantined), for
    /// lookups that stay fast however long the lists are.
    pub fn excluded_keys(&self) -> std::collections::HashSet<&str> {
        self.retired
            .iter()
            .map(|r| r.key.as_str())
            .chain(self.quarantined.iter().map(|q| q.key.as_str()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::key;

    /// Reasons with the characters JSON escapes, and non-ASCII ones.
    fn text() -> impl Strategy<Value = String> {
        "[a-z0-9=/._\\-\"\\\\\n\u{e9}\u{1F600}]{0,24}"
    }

    /// Keys of one to three segments with the characters JSON escapes, and non-ASCII ones (a
    /// segment never empty, `.` or `..`, nor holding a control character: no object has one).
    fn object_key() -> impl Strategy<Value = ObjectKey> {
        let segment = "[a-z0-9=_\\-\"\\\\\u{e9}\u{1F600}][a-z0-9=._\\-\"\\\\\u{e9}\u{1F600}]{0,8}";
        prop::collection::vec(segment, 1..4)
            .prop_map(|segments| ObjectKey::parse(&segments.join("/")).expect("a valid key"))
    }

    fn manifests() -> impl Strategy<Value = Manifest> {
        let compacted = (object_key(), any::<u64>(), any::<u64>(), text()).prop_map(
            |(key, rows, bytes, input_set)| CompactedFile {
                key,
                rows,
                bytes,
                input_set,
                range: None,
            },
        );
        let retired = (object_key(), any::<i64>(), any::<u64>()).prop_map(
            |(key, retired_at_ms, retired_in)| RetiredFile {
                key,
                retired_at_ms,
                retired_in,
            },
        );
        let quarantined =
            (object_key(), text()).prop_map(|(key, reason)| QuarantinedFile { key, reason });
        (
            (any::<u64>(), text(), text(), any::<i64>()),
            prop::collection::vec(compacted, 0..4),
            prop::collection::vec(retired, 0..4),
            prop::collection::vec(quarantined, 0..4),
            (any::<u64>(), any::<u64>(), any::<u64>()),
        )
            .prop_map(
                |(
                    (version, partition, attempt_id, committed_at_ms),
                    compacted,
                    retired,
                    quarantined,
                    (forgotten_in, ingested_bytes, written_bytes),
                )| Manifest {
                    format: MANIFEST_FORMAT,
                    version,
                    partition,
                    compacted,
                    retired,
                    quarantined,
                    attempt_id,
                    committed_at_ms,
                    forgotten_in,
                    ingested_bytes,
                    written_bytes,
                    condemned: Vec::new(),
                },
            )
    }

    proptest! {
        /// decode(encode(m)) == m for any manifest, and a manifest of another format is
        /// refused rather than misread.
        #[test]
        fn codec_round_trips_any_manifest(m in manifests(), other_format in 2u32..) {
            let decoded = Manifest::decode("k", &m.encode());
            prop_assert_eq!(decoded.ok(), Some(m.clone()));
            let future = Manifest { format: other_format, ..m };
            prop_assert!(Manifest::decode("k", &future.encode()).is_err());
        }
    }

    #[test]
    fn codec_round_trip() {
        let mut m = Manifest::empty("tenant=a/year=2026/month=11/day=29/hour=10");
        m.version = 3;
        m.compacted.push(CompactedFile {
            key: key("compacted/x.parquet"),
            rows: 10,
            bytes: 100,
            input_set: "abc".into(),
            range: None,
        });
        m.retired.push(RetiredFile {
            key: key("data/y.parquet"),
            retired_at_ms: 5,
            retired_in: 2,
        });
        m.forgotten_in = 2;
        m.ingested_bytes = 7;
        m.written_bytes = 3;
        m.quarantined.push(QuarantinedFile {
            key: key("data/z.parquet"),
            reason: "bad".into(),
        });
        let decoded = Manifest::decode("k", &m.encode()).unwrap();
        assert_eq!(decoded, m);
        assert!(decoded.excludes("data/y.parquet"));
        assert!(decoded.excludes("data/z.parquet"));
        assert!(!decoded.excludes("data/w.parquet"));
    }

    #[test]
    fn decodes_versions_written_before_the_watermark() {
        let old = br#"{"format":1,"version":2,"partition":"p","compacted":[{"key":"c","rows":1,"bytes":1}],
            "retired":[{"key":"r","retired_at_ms":5}],"quarantined":[],"job_id":"j","committed_at_ms":5}"#;
        let m = Manifest::decode("k", old).unwrap();
        assert_eq!((m.forgotten_in, m.retired[0].retired_in), (0, 0));
        assert!(m.compacted[0].input_set.is_empty());
    }

    #[test]
    fn rejects_garbage_and_future_formats() {
        assert!(Manifest::decode("k", b"not json").is_err());
        let mut m = Manifest::empty("p");
        m.format = 99;
        let err = Manifest::decode("k", &m.encode()).unwrap_err();
        assert!(err.to_string().contains("format 99"));
    }
}

/// A live file, with what a reader plans with: its size and whether it is a sorted output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LiveFile {
    /// Object key relative to the store root.
    pub key: ObjectKey,
    /// Its bytes (the manifest's for an output, the listing's for an ingest file).
    pub bytes: u64,
    /// A compacted output: sorted by the key columns and declaring it (`sorting_columns`);
    /// an ingest file is in its writer's order.
    pub sorted: bool,
}

/// The live and quarantined files of a partition right now, read from the store.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartitionFiles {
    /// Keys a reader must read, compacted files first.
    pub live: Vec<ObjectKey>,
    /// The same files with their sizes, in the same order (from the one listing and the
    /// manifest: no request per file).
    #[serde(skip)]
    pub files: Vec<LiveFile>,
    /// Bad inputs left in place, with their reasons.
    pub quarantined: Vec<QuarantinedFile>,
    /// `*.parquet` keys in the partition directory the store cannot address (an ASCII control
    /// character, an empty or `.` segment): in no live set until renamed.
    pub unaddressable: Vec<String>,
    /// The manifest version the answer is based on (0: never compacted).
    pub manifest_version: u64,
}

/// Reads the live set of a partition: the reader rule, used by `files`, the compactor and queries.
pub async fn partition_files(
    store: &crate::store::Store,
    layout: &crate::partition::KeyLayout,
    partition: &crate::partition::PartitionId,
) -> Result<PartitionFiles> {
    let manifest = load_latest(store, layout, partition).await?;
    let dir = layout.ingest_dir(partition);
    let listing = store.list(&dir).await?;
    let mut files = live_files(layout, partition, &manifest, &listing.objects);
    files.unaddressable = unaddressable_inputs(layout, &dir, &listing.unaddressable);
    Ok(files)
}

/// The live set of `partition` from a manifest and a listing of its ingest directory already
/// read, as [`partition_files`] reads it (no key in `unaddressable`: the listing's own).
pub fn live_files(
    layout: &crate::partition::KeyLayout,
    partition: &crate::partition::PartitionId,
    manifest: &Manifest,
    ingest_listing: &[object_store::ObjectMeta],
) -> PartitionFiles {
    let dir = layout.ingest_dir(partition);
    let live = live_set(layout, &dir, ingest_listing, manifest);
    let outputs = (manifest.compacted.iter()).map(|c| LiveFile {
        key: c.key.clone(),
        bytes: c.bytes,
        sorted: true,
    });
    let ingest = (live.ingest.iter()).map(|m| LiveFile {
        key: ObjectKey::from(&m.location),
        bytes: m.size,
        sorted: false,
    });
    PartitionFiles {
        live: live.keys(),
        files: outputs.chain(ingest).collect(),
        quarantined: manifest.quarantined.clone(),
        unaddressable: Vec::new(),
        manifest_version: manifest.version,
    }
}

/// Most partitions (tenants × hours) one [`hours_files`] call reads.
pub const MAX_HOURS_FILES_PARTITIONS: usize = 100_000;

/// The live sets of every partition of the hours `from` to `to` (inclusive, `YYYY-MM-DDTHH`)
/// of `tenant`, or of every tenant (those with an ingest directory or a manifest): in tenant,
/// then hour order, leaving out partitions with no file at all. One listing of the ingest
/// directory and one of the manifests per partition, no request per file.
pub async fn hours_files(
    store: &crate::store::Store,
    layout: &crate::partition::KeyLayout,
    tenant: Option<&str>,
    from: &str,
    to: &str,
) -> Result<Vec<(crate::partition::PartitionId, PartitionFiles)>> {
    use crate::partition::{PartitionId, field_value, parse_hour, validate_tenant};
    let (start, end) = (parse_hour(from)?, parse_hour(to)?);
    if end < start {
        return Err(crate::error::Error::Config {
            message: format!("hour range {from} .. {to} ends before it starts"),
        });
    }
    let tenants: Vec<Option<String>> = match tenant {
        Some(tenant) => {
            validate_tenant(tenant)?;
            layout.check(&PartitionId::new(tenant, start)?)?;
            vec![Some(tenant.to_string())]
        }
        None if !layout.has_tenant() => vec![None],
        None => {
            // Tenants with ingest files (where the layout keeps them, for each hour's
            // directory of tenants) or with manifests (this project's own layout).
            let template = layout.template();
            let mut roots = std::collections::BTreeSet::new();
            let mut hour = start;
            while hour <= end && roots.len() < MAX_HOURS_FILES_PARTITIONS {
                roots.extend(template.tenants_dir(hour));
                hour += chrono::Duration::hours(1);
            }
            let mut tenants = std::collections::BTreeSet::new();
            for root in &roots {
                for dir in store
                    .list_dirs(&object_store::path::Path::from(root.as_str()))
                    .await?
                {
                    tenants.extend(dir.filename().and_then(|n| template.tenant_of_dir(n)));
                }
            }
            let manifests = object_store::path::Path::from(crate::partition::MANIFESTS_PREFIX);
            for dir in store.list_dirs(&manifests).await? {
                let name = dir.filename().and_then(|n| field_value(n, "tenant"));
                if let Some(t) = name.filter(|t| validate_tenant(t).is_ok()) {
                    tenants.insert(t.to_string());
                }
            }
            tenants.into_iter().map(Some).collect()
        }
    };
    let hours = ((end - start).num_hours() + 1) as usize;
    let total = hours.saturating_mul(tenants.len());
    if total > MAX_HOURS_FILES_PARTITIONS {
        return Err(crate::error::Error::Config {
            message: format!(
                "{total} partitions ({} tenants × {hours} hours), more than \
                 {MAX_HOURS_FILES_PARTITIONS}; narrow the range or name the tenant",
                tenants.len()
            ),
        });
    }
    let mut found = Vec::new();
    for tenant in &tenants {
        for h in 0..hours {
            let hour = start + chrono::Duration::hours(h as i64);
            let partition = PartitionId::of(tenant.as_deref(), hour)?;
            let files = partition_files(store, layout, &partition).await?;
            let any = !(files.live.is_empty()
                && files.quarantined.is_empty()
                && files.unaddressable.is_empty());
            if any {
                found.push((partition, files));
            }
        }
    }
    Ok(found)
}

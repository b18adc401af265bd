//! The reader rule: the live files of a partition, from a listing and the latest manifest.
//!
//! Live = the compacted files the manifest lists, plus every ingest file in the partition
//! directory that the manifest neither retired nor quarantined. A file that lands during
//! a compaction is not in the manifest, so it stays live (invariant 5).

use object_store::ObjectMeta;
use object_store::path::Path;

use super::Manifest;
use crate::object_key::ObjectKey;
use crate::partition::{KeyLayout, is_writer_side_file};

/// The files a reader must read for a partition right now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LiveSet {
    /// Live compacted files (keys), in key order.
    pub compacted: Vec<ObjectKey>,
    /// Live ingest files, sorted by key.
    pub ingest: Vec<ObjectMeta>,
}

impl LiveSet {
    /// Every live key: compacted files first, then ingest files by name.
    pub fn keys(&self) -> Vec<ObjectKey> {
        let mut keys = self.compacted.clone();
        keys.extend(self.ingest.iter().map(|m| ObjectKey::from(&m.location)));
        keys
    }

    /// Number of live files.
    pub fn len(&self) -> usize {
        self.compacted.len() + self.ingest.len()
    }

    /// True when nothing is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Applies the reader rule to a listing of the partition's ingest directory `dir` (files in
/// it, and in its minute directories when `layout` has them).
pub fn live_set(
    layout: &KeyLayout,
    dir: &Path,
    ingest_listing: &[ObjectMeta],
    manifest: &Manifest,
) -> LiveSet {
    // In the manifest's order: key order (by range where recorded, else by name).
    let compacted: Vec<ObjectKey> = manifest.compacted.iter().map(|c| c.key.clone()).collect();
    let excluded = manifest.excluded_keys();
    let mut ingest: Vec<ObjectMeta> = ingest_listing
        .iter()
        .filter(|m| {
            m.location
                .filename()
                .is_some_and(|n| layout.is_input_name(n))
        })
        .filter(|m| {
            // Only files directly in the partition directory count, or in its minute
            // directories.
            let in_partition = m.location.prefix_match(dir).is_some_and(|mut rest| {
                match (rest.next(), rest.next(), rest.next()) {
                    (Some(_), None, _) => true,
                    (Some(minute), Some(_), None) => {
                        layout.template().is_minute_dir(minute.as_ref())
                    }
                    _ => false,
                }
            });
            in_partition && !excluded.contains(m.location.as_ref())
        })
        .cloned()
        .collect();
    ingest.sort_by(|a, b| a.location.cmp(&b.location));
    LiveSet { compacted, ingest }
}

/// The keys of a listing of the partition's ingest directory `dir` that the store cannot
/// address ([`crate::store::Listing::unaddressable`]) and that look like data: a name the
/// layout's input names match (control characters aside), not a writer's side file. They are
/// never read, so their rows are in no live set until the object is renamed; reports name them.
pub fn unaddressable_inputs(
    layout: &KeyLayout,
    dir: &Path,
    unaddressable: &[String],
) -> Vec<String> {
    let dir = format!("{dir}/");
    let looks_like_input = |rest: &str| {
        let name = rest.rsplit('/').next().unwrap_or(rest);
        let printable: String = name.chars().filter(|c| !c.is_ascii_control()).collect();
        layout.is_input_name(&printable) && !is_writer_side_file(rest)
    };
    unaddressable
        .iter()
        .filter(|key| key.strip_prefix(&dir).is_some_and(looks_like_input))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_unaddressable_keys_that_look_like_data() {
        let dir = Path::from("data/tenant=a/year=2026/month=01/day=01/hour=00");
        let keys = [
            "data/tenant=a/year=2026/month=01/day=01/hour=00//empty.parquet",
            "data/tenant=a/year=2026/month=01/day=01/hour=00/./dot.parquet",
            "data/tenant=a/year=2026/month=01/day=01/hour=00/ctl\u{1}.parquet",
            "data/tenant=a/year=2026/month=01/day=01/hour=00/_side\u{1}.parquet",
            "data/tenant=a/year=2026/month=01/day=01/hour=00/_temporary/x\u{1}.parquet",
            "data/tenant=a/year=2026/month=01/day=01/hour=00/notes\u{1}.txt",
            "data/tenant=a/year=2026/month=01/day=01/hour=01/ctl\u{1}.parquet",
            "data/tenant=a/year=2026/month=01/day=01/hour=000/ctl\u{1}.parquet",
        ]
        .map(String::from);
        assert_eq!(
            unaddressable_inputs(&KeyLayout::default(), &dir, &keys),
            keys[..3]
        );
    }
}

//! An object's key in the store (not to be confused with the sort key).
//!
//! A key the system holds comes from a listing (or names an object it wrote) and goes into
//! the manifest, the fan-out's state, reports, GC and queries as the same string. Turning a
//! string back into a location happens here only, by parsing, never by re-encoding:
//! `Path::from` percent-encodes `~ % # [ ] { } ^ | * ? " < >` and backtick, so it would
//! address another object (`a~b.parquet` becomes `a%7Eb.parquet`), and the key listed would
//! not be the key deleted (invariant 10).

use std::fmt;
use std::str::FromStr;

use object_store::path::Path;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// An object's key relative to the store root, serialised as the key's string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Path);

impl ObjectKey {
    /// The key of a string listed raw or written by the system (a manifest entry, a task's
    /// state), taken as itself. Fails for a string the store cannot address as itself: an
    /// empty, `.` or `..` segment (a leading or trailing `/` included), or an ASCII control
    /// character.
    pub fn parse(key: &str) -> Result<Self> {
        let parsed = Path::parse(key).and_then(|path| {
            if path.as_ref() == key {
                Ok(path)
            } else {
                Err(object_store::path::Error::EmptySegment {
                    path: key.to_string(),
                })
            }
        });
        parsed.map(Self).map_err(|source| Error::Store {
            operation: "address",
            location: format!("{key:?}"),
            source: object_store::Error::InvalidPath { source },
        })
    }

    /// The location to read, delete or list.
    pub fn location(&self) -> &Path {
        &self.0
    }

    /// The key as the store spells it.
    pub fn as_str(&self) -> &str {
        self.0.as_ref()
    }

    /// The last segment (the file's name).
    pub fn file_name(&self) -> &str {
        self.0.filename().unwrap_or_default()
    }
}

/// A listed location (or one the system names) is a key as it is.
impl From<Path> for ObjectKey {
    fn from(location: Path) -> Self {
        Self(location)
    }
}

impl From<&Path> for ObjectKey {
    fn from(location: &Path) -> Self {
        Self(location.clone())
    }
}

impl From<ObjectKey> for Path {
    fn from(key: ObjectKey) -> Self {
        key.0
    }
}

impl FromStr for ObjectKey {
    type Err = Error;

    fn from_str(key: &str) -> Result<Self> {
        Self::parse(key)
    }
}

/// Read as the string it is (to compare, print or match a prefix); a string becomes a key
/// only through [`ObjectKey::parse`].
impl std::ops::Deref for ObjectKey {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

/// Hashes and compares as its string, so sets of keys answer lookups by `&str`.
impl std::borrow::Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ObjectKey {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ObjectKey {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for ObjectKey {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<ObjectKey> for str {
    fn eq(&self, other: &ObjectKey) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<ObjectKey> for &str {
    fn eq(&self, other: &ObjectKey) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<ObjectKey> for String {
    fn eq(&self, other: &ObjectKey) -> bool {
        self == other.as_str()
    }
}

impl Serialize for ObjectKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ObjectKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let key = String::deserialize(deserializer)?;
        Self::parse(&key).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_written_as_the_string_it_was_listed_as() {
        for key in [
            "data/tenant=a/a~b.parquet",
            "data/x%7Ey #1 [b]{c}^|*?\"<>`.parquet",
            "data/\u{e9}t\u{e9}/\u{1F600}.parquet",
        ] {
            let parsed = ObjectKey::parse(key).unwrap();
            assert_eq!(parsed, key);
            assert_eq!(
                parsed.location().as_ref(),
                key,
                "the location is not re-encoded"
            );
            let json = serde_json::to_string(&parsed).unwrap();
            assert_eq!(json, serde_json::to_string(key).unwrap());
            assert_eq!(serde_json::from_str::<ObjectKey>(&json).unwrap(), parsed);
        }
    }

    #[test]
    fn a_string_no_object_can_have_is_refused_with_its_name() {
        for key in [
            "a//b.parquet",
            "a/./b.parquet",
            "a/../b",
            "a/b\u{1}.parquet",
            "/a/b.parquet",
            "a/b/",
        ] {
            let err = ObjectKey::parse(key).unwrap_err();
            assert!(err.to_string().contains(&format!("{key:?}")), "{err}");
            let json = serde_json::to_string(key).unwrap();
            assert!(serde_json::from_str::<ObjectKey>(&json).is_err());
        }
    }
}

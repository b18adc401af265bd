//! S3 calls by raw key, for what object_store cannot do: list prefixes holding keys it cannot
//! represent, list and abort a job's own incomplete multipart uploads, and delete an object
//! only while it is still the version listed (If-Match).
//!
//! object_store 0.14 turns every listed key into a `Path` and fails the whole listing on one it
//! cannot represent (an empty `//` segment, a `.` or `..` segment, a control character). Here
//! keys come back as the strings S3 holds (`encoding-type=url`, decoded once), so such a key is
//! reported and skipped while the rest of the listing goes on. Credentials, region and
//! endpoint come from the same environment variables object_store reads (`store::aws_env`).

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Region};
use aws_sdk_s3::error::{DisplayErrorContext, SdkError};
use aws_sdk_s3::types::EncodingType;
use object_store::ObjectMeta;
use object_store::path::Path;

use crate::error::{Error, Result};
use crate::object_key::ObjectKey;
use crate::settings::{Lookup, process_env};
use crate::store::{aws_env, credentials};

/// A listing taken by raw key: what can be addressed, and the keys skipped.
#[derive(Debug, Default)]
pub struct RawListing {
    /// Objects whose keys object_store can address, as object metadata.
    pub objects: Vec<ObjectMeta>,
    /// Child directories (delimited listings only) that can be addressed.
    pub dirs: Vec<Path>,
    /// Keys (or directory prefixes) that cannot be addressed, relative to the store root.
    pub skipped: Vec<String>,
}

/// An incomplete multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompleteUpload {
    /// The key the upload would create, relative to the store root.
    pub key: String,
    /// The upload id.
    pub upload_id: String,
    /// When it was initiated, Unix milliseconds on the store's clock (`None` when the store
    /// did not say).
    pub initiated_ms: Option<i64>,
}

/// What a conditional delete found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionalDelete {
    /// The object was the version listed and is gone.
    Deleted,
    /// The object changed since it was listed (412): left in place.
    Changed,
}

/// An S3 client bound to a bucket and the store root's prefix.
#[derive(Debug, Clone)]
pub struct RawS3 {
    client: Client,
    bucket: String,
    /// The store root's key prefix with a trailing `/`, or empty.
    root: String,
}

impl RawS3 {
    /// A client from the standard AWS environment (`AWS_REGION`, `AWS_ENDPOINT_URL[_S3]`) with
    /// the credentials of every AWS client ([`credentials::provider`]: the environment's keys,
    /// else the standard chain when built with it), or `None` when there are none (then only
    /// object_store is used).
    pub fn from_env(bucket: &str, prefix: &str) -> Option<Self> {
        let env: Lookup<'_> = &process_env;
        let credentials = credentials::provider(env)?;
        let region = aws_env::region(env);
        let mut config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region))
            .credentials_provider(credentials);
        if let Some(endpoint) = aws_env::endpoint(env) {
            config = config.endpoint_url(endpoint).force_path_style(true);
        }
        let root = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Some(Self {
            client: Client::from_conf(config.build()),
            bucket: bucket.to_string(),
            root,
        })
    }

    /// Every object under `prefix` (relative to the store root), or with `delimited` only the
    /// objects and child directories directly in it. Keys object_store cannot address are
    /// logged and returned in `skipped`.
    pub async fn list(&self, prefix: &Path, delimited: bool) -> Result<RawListing> {
        let wanted = self.full_key(&dir_prefix(prefix));
        let mut listing = RawListing::default();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&wanted)
                .encoding_type(EncodingType::Url)
                .set_delimiter(delimited.then(|| "/".to_string()))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| sdk_error("list", prefix, e))?;
            for object in page.contents() {
                let Some(key) = object.key().map(percent_decode) else {
                    continue;
                };
                let Some(relative) = self.relative(&key) else {
                    continue;
                };
                let Some(location) = addressable(relative) else {
                    listing.skipped.push(relative.to_string());
                    continue;
                };
                // Grace periods are measured from Last-Modified: never guess it.
                let (Some(last_modified), Some(size)) = (
                    object
                        .last_modified()
                        .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
                    object.size().and_then(|s| u64::try_from(s).ok()),
                ) else {
                    return Err(Error::store(
                        "list",
                        relative,
                        object_store::Error::Generic {
                            store: "S3",
                            source: "the listing gave no Last-Modified or size".into(),
                        },
                    ));
                };
                listing.objects.push(ObjectMeta {
                    location,
                    last_modified,
                    size,
                    e_tag: object.e_tag().map(str::to_string),
                    version: None,
                });
            }
            for dir in page.common_prefixes() {
                let Some(key) = dir.prefix().map(percent_decode) else {
                    continue;
                };
                let Some(relative) = self.relative(&key) else {
                    continue;
                };
                match relative.strip_suffix('/').and_then(addressable) {
                    Some(location) => listing.dirs.push(location),
                    None => listing.skipped.push(relative.to_string()),
                }
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_string()),
                _ => break,
            }
        }
        for key in &listing.skipped {
            tracing::warn!(key = ?key, "skipping a key the store cannot address");
        }
        Ok(listing)
    }

    /// Incomplete multipart uploads whose keys start with `key_prefix` (relative to the root).
    pub async fn incomplete_uploads(&self, key_prefix: &str) -> Result<Vec<IncompleteUpload>> {
        let wanted = self.full_key(key_prefix);
        let mut uploads = Vec::new();
        let (mut key_marker, mut id_marker) = (None, None);
        loop {
            let page = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(&wanted)
                .set_key_marker(key_marker.take())
                .set_upload_id_marker(id_marker.take())
                .send()
                .await
                .map_err(|e| sdk_error("list uploads", key_prefix, e))?;
            for upload in page.uploads() {
                if let (Some(key), Some(upload_id)) = (upload.key(), upload.upload_id())
                    && let Some(relative) = self.relative(key)
                    && relative.starts_with(key_prefix)
                {
                    uploads.push(IncompleteUpload {
                        key: relative.to_string(),
                        upload_id: upload_id.to_string(),
                        initiated_ms: upload.initiated().and_then(|t| t.to_millis().ok()),
                    });
                }
            }
            if page.is_truncated() != Some(true) {
                break;
            }
            key_marker = page.next_key_marker().map(str::to_string);
            id_marker = page.next_upload_id_marker().map(str::to_string);
            if key_marker.is_none() && id_marker.is_none() {
                break;
            }
        }
        Ok(uploads)
    }

    /// Aborts an incomplete multipart upload; its parts are freed and no object appears.
    pub async fn abort_upload(&self, upload: &IncompleteUpload) -> Result<()> {
        self.client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(self.full_key(&upload.key))
            .upload_id(&upload.upload_id)
            .send()
            .await
            .map_err(|e| sdk_error("abort upload", &upload.key, e))?;
        Ok(())
    }

    /// Deletes `key` only while its ETag is `e_tag` (the version a listing saw).
    pub async fn delete_if_match(&self, key: &Path, e_tag: &str) -> Result<ConditionalDelete> {
        let sent = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(self.full_key(key.as_ref()))
            .if_match(e_tag)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(ConditionalDelete::Deleted),
            Err(e) if http_status(&e) == Some(412) => Ok(ConditionalDelete::Changed),
            // Gone already: what a delete wanted.
            Err(e) if http_status(&e) == Some(404) => Ok(ConditionalDelete::Deleted),
            Err(e) => Err(sdk_error("delete", key, e)),
        }
    }

    /// Puts an object at a raw key, which object_store may not be able to address (tests).
    #[cfg(feature = "testing")]
    pub async fn put_raw(&self, key: &str, body: bytes::Bytes) -> Result<()> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .body(body.into())
            .send()
            .await
            .map_err(|e| sdk_error("put", key, e))?;
        Ok(())
    }

    /// Starts a multipart upload at `key` and uploads one part, leaving it incomplete as a
    /// killed uploader would (tests); returns the upload.
    #[cfg(feature = "testing")]
    pub async fn start_incomplete_upload(&self, key: &str) -> Result<IncompleteUpload> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .send()
            .await
            .map_err(|e| sdk_error("create upload", key, e))?;
        let upload_id = created.upload_id().unwrap_or_default().to_string();
        self.client
            .upload_part()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .upload_id(&upload_id)
            .part_number(1)
            .body(bytes::Bytes::from_static(b"a part of a killed upload").into())
            .send()
            .await
            .map_err(|e| sdk_error("upload part", key, e))?;
        Ok(IncompleteUpload {
            key: key.to_string(),
            upload_id,
            initiated_ms: None,
        })
    }

    fn full_key(&self, relative: &str) -> String {
        format!("{}{relative}", self.root)
    }

    fn relative<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(self.root.as_str())
    }
}

/// `prefix/` (or empty for the root), as listings take it.
fn dir_prefix(prefix: &Path) -> String {
    let p = prefix.as_ref();
    if p.is_empty() {
        String::new()
    } else {
        format!("{p}/")
    }
}

/// The path of a raw key when object_store addresses exactly that key.
pub(crate) fn addressable(key: &str) -> Option<Path> {
    ObjectKey::parse(key).ok().map(Path::from)
}

/// Decodes a key S3 returned with `encoding-type=url` (`%XX` escapes, `+` for a space).
fn percent_decode(encoded: &str) -> String {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'+', _, _) => out.push(b' '),
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 2;
            }
            (b, _, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn http_status<E>(error: &SdkError<E>) -> Option<u16> {
    error.raw_response().map(|r| r.status().as_u16())
}

fn sdk_error<E: std::error::Error + Send + Sync + 'static>(
    operation: &'static str,
    location: impl std::fmt::Display,
    error: SdkError<E>,
) -> Error {
    let source = object_store::Error::Generic {
        store: "S3",
        source: DisplayErrorContext(error).to_string().into(),
    };
    Error::store(operation, location, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_url_encoded_keys_once() {
        for (encoded, key) in [
            ("data/a%2Fb", "data/a/b"),
            ("a+b%2Bc", "a b+c"),
            ("z%01.parquet", "z\u{1}.parquet"),
            ("tenant%3Dacme/x%25", "tenant=acme/x%"),
            ("trailing%2", "trailing%2"),
        ] {
            assert_eq!(percent_decode(encoded), key, "{encoded}");
        }
    }

    #[test]
    fn addresses_only_keys_object_store_represents_as_themselves() {
        assert!(addressable("data/a~b.parquet").is_some());
        for key in [
            "data//x",
            "data/./x",
            "data/../x",
            "data/x\u{1}",
            "/data",
            "data/",
        ] {
            assert!(addressable(key).is_none(), "{key:?}");
        }
    }
}

//! S3 calls by raw key, for what object_store cannot do: list prefixes holding keys it cannot
//! represent, list and abort a job's own incomplete multipart uploads, and delete an object
//! only while it is still the version listed (If-Match).
//!
//! object_store 0.14 turns every listed key into a `Path` and fails the whole listing on one it
//! cannot represent (an empty `//` segment, a `.` or `..` segment, a control character). Here
//! keys come back as the strings S3 holds (`encoding-type=url`, decoded once), so such a key is
//! reported and skipped while the rest of the listing goes on. Credentials, region and
//! endpoint come from the same environment variables object_store reads (`store::aws_env`).

use bytes::Bytes;
use http::Method;
use object_store::ObjectMeta;
use object_store::aws::AwsCredentialProvider;
use object_store::path::Path;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::object_key::ObjectKey;
use crate::store::aws_api::{AwsApi, AwsApiError, query, uri_encode};

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
    api: AwsApi,
    /// The path of the bucket under the API's base: `/<bucket>` path-style, empty when the
    /// bucket is the host (virtual-hosted).
    bucket_path: String,
    /// The store root's key prefix with a trailing `/`, or empty.
    root: String,
}

/// A page of ListObjectsV2 (`encoding-type=url`: keys and prefixes come percent-encoded).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ListPage {
    is_truncated: bool,
    next_continuation_token: Option<String>,
    contents: Vec<ListedObject>,
    common_prefixes: Vec<CommonPrefix>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ListedObject {
    key: String,
    last_modified: Option<String>,
    size: Option<u64>,
    #[serde(rename = "ETag")]
    e_tag: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct CommonPrefix {
    prefix: String,
}

/// A page of ListMultipartUploads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct UploadsPage {
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
    #[serde(rename = "Upload")]
    uploads: Vec<ListedUpload>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ListedUpload {
    key: String,
    upload_id: String,
    initiated: Option<String>,
}

impl RawS3 {
    /// A client of `bucket` under `prefix` signing with `credentials` (those of the store's
    /// object_store client, so both always act as the same principal), at `endpoint`
    /// (path-style) when one is set, else at AWS's endpoint for `region`.
    pub fn new(
        bucket: &str,
        prefix: &str,
        region: &str,
        endpoint: Option<&str>,
        credentials: AwsCredentialProvider,
    ) -> Result<Self> {
        // A bucket whose name holds a dot breaks the wildcard certificate of the
        // virtual-hosted name: path-style for it, as for any endpoint given.
        let (base, bucket_path) = match endpoint {
            Some(endpoint) => (endpoint.to_string(), format!("/{bucket}")),
            None if bucket.contains('.') => (
                format!("https://s3.{region}.amazonaws.com"),
                format!("/{bucket}"),
            ),
            None => (
                format!("https://{bucket}.s3.{region}.amazonaws.com"),
                String::new(),
            ),
        };
        let root = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Ok(Self {
            api: AwsApi::new("s3", region, &base, credentials)?,
            bucket_path,
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
            let query = query(&[
                ("list-type", Some("2")),
                ("prefix", Some(&wanted)),
                ("encoding-type", Some("url")),
                ("delimiter", delimited.then_some("/")),
                ("continuation-token", token.as_deref()),
            ]);
            let body = self
                .call(Method::GET, "", &query, &[], Bytes::new())
                .await
                .map_err(|e| api_error("list", prefix, e))?;
            let page: ListPage = parse("list", prefix, &body)?;
            for object in page.contents {
                let key = percent_decode(&object.key);
                let Some(relative) = self.relative(&key) else {
                    continue;
                };
                let Some(location) = addressable(relative) else {
                    listing.skipped.push(relative.to_string());
                    continue;
                };
                // Grace periods are measured from Last-Modified: never guess it.
                let last_modified = (object.last_modified.as_deref())
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&chrono::Utc));
                let (Some(last_modified), Some(size)) = (last_modified, object.size) else {
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
                    e_tag: object.e_tag,
                    version: None,
                });
            }
            for dir in page.common_prefixes {
                let key = percent_decode(&dir.prefix);
                let Some(relative) = self.relative(&key) else {
                    continue;
                };
                match relative.strip_suffix('/').and_then(addressable) {
                    Some(location) => listing.dirs.push(location),
                    None => listing.skipped.push(relative.to_string()),
                }
            }
            match page.next_continuation_token {
                Some(next) if page.is_truncated => token = Some(next),
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
        let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
        loop {
            let query = query(&[
                ("uploads", Some("")),
                ("prefix", Some(&wanted)),
                ("key-marker", key_marker.as_deref()),
                ("upload-id-marker", id_marker.as_deref()),
            ]);
            let body = self
                .call(Method::GET, "", &query, &[], Bytes::new())
                .await
                .map_err(|e| api_error("list uploads", key_prefix, e))?;
            let page: UploadsPage = parse("list uploads", key_prefix, &body)?;
            for upload in page.uploads {
                if let Some(relative) = self.relative(&upload.key)
                    && relative.starts_with(key_prefix)
                {
                    uploads.push(IncompleteUpload {
                        key: relative.to_string(),
                        upload_id: upload.upload_id,
                        initiated_ms: (upload.initiated.as_deref())
                            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                            .map(|t| t.timestamp_millis()),
                    });
                }
            }
            if !page.is_truncated {
                break;
            }
            key_marker = page.next_key_marker.filter(|m| !m.is_empty());
            id_marker = page.next_upload_id_marker.filter(|m| !m.is_empty());
            if key_marker.is_none() && id_marker.is_none() {
                break;
            }
        }
        Ok(uploads)
    }

    /// Aborts an incomplete multipart upload; its parts are freed and no object appears.
    pub async fn abort_upload(&self, upload: &IncompleteUpload) -> Result<()> {
        let query = query(&[("uploadId", Some(&upload.upload_id))]);
        let key = self.full_key(&upload.key);
        self.call(Method::DELETE, &key, &query, &[], Bytes::new())
            .await
            .map_err(|e| api_error("abort upload", &upload.key, e))?;
        Ok(())
    }

    /// Deletes `key` only while its ETag is `e_tag` (the version a listing saw).
    pub async fn delete_if_match(&self, key: &Path, e_tag: &str) -> Result<ConditionalDelete> {
        let full = self.full_key(key.as_ref());
        let sent = (self.call(
            Method::DELETE,
            &full,
            "",
            &[("if-match", e_tag)],
            Bytes::new(),
        ))
        .await;
        match sent {
            Ok(_) => Ok(ConditionalDelete::Deleted),
            Err(e) if e.status == Some(412) => Ok(ConditionalDelete::Changed),
            // Gone already: what a delete wanted.
            Err(e) if e.status == Some(404) => Ok(ConditionalDelete::Deleted),
            Err(e) => Err(api_error("delete", key, e)),
        }
    }

    /// Starts a multipart upload at `key` and uploads one part, leaving it incomplete as a
    /// killed uploader would (tests); returns the upload.
    #[cfg(feature = "testing")]
    pub async fn start_incomplete_upload(&self, key: &str) -> Result<IncompleteUpload> {
        #[derive(Debug, Default, Deserialize)]
        #[serde(rename_all = "PascalCase", default)]
        struct Initiated {
            upload_id: String,
        }
        let full = self.full_key(key);
        let created = self
            .call(Method::POST, &full, "?uploads", &[], Bytes::new())
            .await
            .map_err(|e| api_error("create upload", key, e))?;
        let Initiated { upload_id } = parse("create upload", key, &created)?;
        let part = query(&[("partNumber", Some("1")), ("uploadId", Some(&upload_id))]);
        let body = Bytes::from_static(b"a part of a killed upload");
        self.call(Method::PUT, &full, &part, &[], body)
            .await
            .map_err(|e| api_error("upload part", key, e))?;
        Ok(IncompleteUpload {
            key: key.to_string(),
            upload_id,
            initiated_ms: None,
        })
    }

    /// Sends `method` to the object at `full_key` (the bucket when empty) with `query`.
    async fn call(
        &self,
        method: Method,
        full_key: &str,
        query: &str,
        headers: &[(&'static str, &str)],
        body: Bytes,
    ) -> std::result::Result<Bytes, AwsApiError> {
        let path = format!("{}/{}{query}", self.bucket_path, uri_encode(full_key, true));
        Ok(self.api.send(method, &path, headers, body).await?.body)
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

fn api_error(
    operation: &'static str,
    location: impl std::fmt::Display,
    error: AwsApiError,
) -> Error {
    let source = object_store::Error::Generic {
        store: "S3",
        source: Box::new(error),
    };
    Error::store(operation, location, source)
}

/// An S3 answer's XML body as `T`.
fn parse<T: serde::de::DeserializeOwned>(
    operation: &'static str,
    location: impl std::fmt::Display,
    body: &[u8],
) -> Result<T> {
    let text = String::from_utf8_lossy(body);
    quick_xml::de::from_str(&text).map_err(|e| {
        let source = object_store::Error::Generic {
            store: "S3",
            source: format!("an answer that does not parse: {e}").into(),
        };
        Error::store(operation, location, source)
    })
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
    fn list_pages_parse_as_s3_sends_them() {
        // ListObjectsV2 with encoding-type=url and a delimiter, as S3's API reference shows it.
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>data%2F</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>
  <Delimiter>%2F</Delimiter><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
  <Contents><Key>data%2Fa+b.parquet</Key><LastModified>2026-11-29T10:15:02.000Z</LastModified>
    <ETag>&quot;7e10e7d25dc4581d89b9285be5f384fd&quot;</ETag><Size>434234</Size>
    <StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>data%2Fz%01.parquet</Key><LastModified>2026-11-29T10:16:00.000Z</LastModified>
    <ETag>&quot;e1&quot;</ETag><Size>1</Size></Contents>
  <CommonPrefixes><Prefix>data%2Ftenant%3Dacme%2F</Prefix></CommonPrefixes>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
</ListBucketResult>"#;
        let page: ListPage = parse("list", "data", xml.as_bytes()).expect("parses");
        assert!(page.is_truncated);
        assert_eq!(
            page.next_continuation_token.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
        let keys: Vec<String> = page
            .contents
            .iter()
            .map(|c| percent_decode(&c.key))
            .collect();
        assert_eq!(keys, ["data/a b.parquet", "data/z\u{1}.parquet"]);
        let first = &page.contents[0];
        assert_eq!(
            (
                first.size,
                first.e_tag.as_deref(),
                first.last_modified.as_deref()
            ),
            (
                Some(434234),
                Some("\"7e10e7d25dc4581d89b9285be5f384fd\""),
                Some("2026-11-29T10:15:02.000Z")
            )
        );
        assert_eq!(
            percent_decode(&page.common_prefixes[0].prefix),
            "data/tenant=acme/"
        );

        let empty = r#"<ListBucketResult><Name>b</Name><IsTruncated>false</IsTruncated></ListBucketResult>"#;
        let page: ListPage = parse("list", "data", empty.as_bytes()).expect("parses");
        assert!(!page.is_truncated && page.contents.is_empty() && page.common_prefixes.is_empty());
    }

    #[test]
    fn upload_pages_parse_as_s3_sends_them() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>bucket</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>
  <NextKeyMarker>compacted/b</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker>
  <MaxUploads>1000</MaxUploads><IsTruncated>true</IsTruncated>
  <Upload><Key>compacted/a</Key><UploadId>u1</UploadId>
    <Initiator><ID>arn:aws:iam::1:user/x</ID><DisplayName>x</DisplayName></Initiator>
    <StorageClass>STANDARD</StorageClass><Initiated>2026-11-29T10:15:02.000Z</Initiated></Upload>
  <Upload><Key>compacted/b</Key><UploadId>u2</UploadId><Initiated>2026-11-29T10:16:00.000Z</Initiated></Upload>
</ListMultipartUploadsResult>"#;
        let page: UploadsPage = parse("list uploads", "compacted", xml.as_bytes()).expect("parses");
        assert!(page.is_truncated);
        assert_eq!(
            (
                page.next_key_marker.as_deref(),
                page.next_upload_id_marker.as_deref()
            ),
            (Some("compacted/b"), Some("u2"))
        );
        let uploads: Vec<(&str, &str)> = (page.uploads.iter())
            .map(|u| (u.key.as_str(), u.upload_id.as_str()))
            .collect();
        assert_eq!(uploads, [("compacted/a", "u1"), ("compacted/b", "u2")]);
        assert_eq!(
            page.uploads[1].initiated.as_deref(),
            Some("2026-11-29T10:16:00.000Z")
        );
        let error = parse::<UploadsPage>("list uploads", "compacted", b"<html>proxy</html")
            .expect_err("not S3's answer");
        assert!(error.to_string().contains("list uploads"), "{error}");
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

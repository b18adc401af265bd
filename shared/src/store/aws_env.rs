//! The S3 endpoint and region that both S3 clients (object_store and the raw calls) take
//! from the standard AWS environment, read in one place so the two always agree. A variable set
//! to the empty string counts as unset.

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};

use crate::settings::{Lookup, process_env};
use crate::store::credentials;

/// The region used when neither `AWS_REGION` nor `AWS_DEFAULT_REGION` is set.
pub const DEFAULT_REGION: &str = "us-east-1";

/// The first of `names` set to a non-empty value.
fn first_set(lookup: Lookup<'_>, names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|name| lookup(name).filter(|value| !value.is_empty()))
}

/// The S3 endpoint override (`AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`), if any: MinIO or
/// another S3-compatible server.
pub fn endpoint(lookup: Lookup<'_>) -> Option<String> {
    first_set(lookup, &["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
}

/// The region (`AWS_REGION`, else `AWS_DEFAULT_REGION`, else [`DEFAULT_REGION`]).
pub fn region(lookup: Lookup<'_>) -> String {
    first_set(lookup, &["AWS_REGION", "AWS_DEFAULT_REGION"])
        .unwrap_or_else(|| DEFAULT_REGION.to_string())
}

/// An object_store S3 builder from the process environment, like
/// `AmazonS3Builder::from_env` but with variables set to the empty string left out (an exported
/// empty `AWS_SESSION_TOKEN` or `AWS_ENDPOINT_URL_S3` would otherwise be sent or win over the set
/// one), then with [`region`] and [`endpoint`]. An endpoint is addressed path-style, over
/// plain HTTP when its URL says so. Without keys in the environment, the credentials come from
/// the standard chain when built with it ([`credentials`]).
pub fn object_store_builder() -> AmazonS3Builder {
    crate::store::tls::install_crypto_provider();
    let mut builder = AmazonS3Builder::new();
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        if !name.starts_with("AWS_") || value.is_empty() {
            continue;
        }
        if let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
            builder = builder.with_config(key, value);
        }
    }
    let env: Lookup<'_> = &process_env;
    if !credentials::in_environment(env)
        && let Some(chain) = credentials::chain()
    {
        builder = builder.with_credentials(chain);
    }
    builder = builder.with_region(region(env));
    if let Some(endpoint) = endpoint(env) {
        builder = builder
            .with_config(AmazonS3ConfigKey::S3Endpoint, &endpoint)
            .with_endpoint(&endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false);
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::fixed_lookup;

    #[test]
    fn the_s3_endpoint_wins_over_the_general_one_and_empty_values_count_as_unset() {
        let both = fixed_lookup(&[
            ("AWS_ENDPOINT_URL", "http://general:9000"),
            ("AWS_ENDPOINT_URL_S3", "http://s3:9000"),
        ]);
        assert_eq!(endpoint(&both).as_deref(), Some("http://s3:9000"));
        let empty_s3 = fixed_lookup(&[
            ("AWS_ENDPOINT_URL", "http://general:9000"),
            ("AWS_ENDPOINT_URL_S3", ""),
        ]);
        assert_eq!(endpoint(&empty_s3).as_deref(), Some("http://general:9000"));
        assert_eq!(endpoint(&fixed_lookup(&[("AWS_ENDPOINT_URL", "")])), None);
    }

    #[test]
    fn the_region_falls_back_to_the_default_region_then_us_east_1() {
        let both = fixed_lookup(&[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_DEFAULT_REGION", "us-west-2"),
        ]);
        assert_eq!(region(&both), "eu-west-1");
        let default_only = fixed_lookup(&[("AWS_REGION", ""), ("AWS_DEFAULT_REGION", "us-west-2")]);
        assert_eq!(region(&default_only), "us-west-2");
        assert_eq!(region(&fixed_lookup(&[])), DEFAULT_REGION);
    }
}

//! The credentials of every AWS client (object_store's, the raw S3 calls', Step Functions'): the
//! keys in the environment when it holds them (Lambda's runtime puts the function role's there),
//! else, with the `credential-chain` feature, the standard AWS chain: shared credentials and
//! config files with `AWS_PROFILE`, SSO, `credential_process`, web identity (IRSA), the ECS task
//! role and the instance profile, as the AWS CLI and SDKs resolve them.

use std::sync::Arc;

use object_store::StaticCredentialProvider;
use object_store::aws::{AwsCredential, AwsCredentialProvider};

use crate::settings::Lookup;

/// The credentials provider of every AWS client: the keys of the environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; empty values count as
/// unset), else the standard chain when built with it; `None` when neither.
pub fn provider(lookup: Lookup<'_>) -> Option<AwsCredentialProvider> {
    let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    if let (Some(key_id), Some(secret_key)) =
        (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
    {
        let keys = AwsCredential {
            key_id,
            secret_key,
            token: var("AWS_SESSION_TOKEN"),
        };
        return Some(Arc::new(StaticCredentialProvider::new(keys)));
    }
    chain()
}

/// True when the environment holds keys (object_store then reads them itself).
pub fn in_environment(lookup: Lookup<'_>) -> bool {
    let set = |name: &str| lookup(name).is_some_and(|v| !v.trim().is_empty());
    set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY")
}

/// The standard chain, built on first use.
#[cfg(feature = "credential-chain")]
pub fn chain() -> Option<AwsCredentialProvider> {
    let chain =
        aws_credential_types::provider::SharedCredentialsProvider::new(chain::LazyChain::default());
    Some(Arc::new(chain::ObjectStoreCredentials::new(chain)))
}

/// Without the `credential-chain` feature there is no chain: only the environment's keys.
#[cfg(not(feature = "credential-chain"))]
pub fn chain() -> Option<AwsCredentialProvider> {
    None
}

#[cfg(feature = "credential-chain")]
mod chain {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, SystemTime};

    use async_trait::async_trait;
    use aws_config::default_provider::credentials::DefaultCredentialsChain;
    use aws_config::provider_config::ProviderConfig;
    use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
    use aws_smithy_http_client::tls;
    use object_store::CredentialProvider;
    use object_store::aws::AwsCredential;

    /// The default chain, built (it resolves the profile and region) on first use, in the
    /// runtime that asks.
    #[derive(Debug, Default)]
    pub(super) struct LazyChain(tokio::sync::OnceCell<DefaultCredentialsChain>);

    impl ProvideCredentials for LazyChain {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            future::ProvideCredentials::new(async move {
                let chain = (self.0)
                    .get_or_init(|| {
                        crate::store::tls::install_crypto_provider();
                        let https = aws_smithy_http_client::Builder::new()
                            .tls_provider(tls::Provider::Rustls(
                                tls::rustls_provider::CryptoMode::Ring,
                            ))
                            .build_https();
                        DefaultCredentialsChain::builder()
                            .configure(ProviderConfig::default().with_http_client(https))
                            .build()
                    })
                    .await;
                chain.provide_credentials().await
            })
        }
    }

    /// Credentials this long before their expiry are fetched again.
    const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);

    /// An SDK credentials provider as object_store's, caching what it gives until shortly before
    /// it expires (the SDK clients cache their own).
    #[derive(Debug)]
    pub(super) struct ObjectStoreCredentials {
        provider: SharedCredentialsProvider,
        cached: Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
    }

    impl ObjectStoreCredentials {
        /// Credentials from `provider`.
        pub(super) fn new(provider: SharedCredentialsProvider) -> Self {
            Self {
                provider,
                cached: Mutex::new(None),
            }
        }

        fn fresh(&self) -> Option<Arc<AwsCredential>> {
            let cached = self.cached.lock().ok()?;
            let (credential, expiry) = cached.as_ref()?;
            let valid = expiry.is_none_or(|at| {
                at.duration_since(SystemTime::now())
                    .is_ok_and(|left| left > REFRESH_BEFORE_EXPIRY)
            });
            valid.then(|| Arc::clone(credential))
        }
    }

    #[async_trait]
    impl CredentialProvider for ObjectStoreCredentials {
        type Credential = AwsCredential;

        async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
            if let Some(credential) = self.fresh() {
                return Ok(credential);
            }
            let credentials = (self.provider.provide_credentials().await).map_err(|e| {
                object_store::Error::Generic {
                    store: "S3",
                    source: format!("no AWS credentials from the standard chain: {e}").into(),
                }
            })?;
            let credential = Arc::new(AwsCredential {
                key_id: credentials.access_key_id().to_string(),
                secret_key: credentials.secret_access_key().to_string(),
                token: credentials.session_token().map(str::to_string),
            });
            if let Ok(mut cached) = self.cached.lock() {
                *cached = Some((Arc::clone(&credential), credentials.expiry()));
            }
            Ok(credential)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use aws_credential_types::Credentials;

        #[tokio::test]
        async fn object_store_gets_the_providers_keys_and_keeps_them_until_they_expire() {
            let expiring = Credentials::new(
                "id",
                "secret",
                Some("token".into()),
                Some(SystemTime::now() + Duration::from_secs(3600)),
                "test",
            );
            let store = ObjectStoreCredentials::new(SharedCredentialsProvider::new(expiring));
            let first = store.get_credential().await.unwrap();
            assert_eq!(
                (first.key_id.as_str(), first.token.as_deref()),
                ("id", Some("token"))
            );
            let again = store.get_credential().await.unwrap();
            assert!(Arc::ptr_eq(&first, &again), "cached while it lasts");

            let stale = Credentials::new(
                "old",
                "secret",
                None,
                Some(SystemTime::now() + Duration::from_secs(60)),
                "test",
            );
            let store = ObjectStoreCredentials::new(SharedCredentialsProvider::new(stale));
            let first = store.get_credential().await.unwrap();
            let again = store.get_credential().await.unwrap();
            assert!(
                !Arc::ptr_eq(&first, &again),
                "fetched again near its expiry"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::fixed_lookup;

    #[test]
    fn the_environments_keys_come_first_and_empty_ones_count_as_unset() {
        let keys = fixed_lookup(&[
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", ""),
        ]);
        assert!(in_environment(&keys));
        assert!(provider(&keys).is_some());
        let empty = fixed_lookup(&[("AWS_ACCESS_KEY_ID", ""), ("AWS_SECRET_ACCESS_KEY", "s")]);
        assert!(!in_environment(&empty));
        // Without keys, the chain when built with it.
        assert_eq!(
            provider(&empty).is_some(),
            cfg!(feature = "credential-chain")
        );
    }
}

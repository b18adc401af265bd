//! The standard AWS credential chain every AWS client here signs with (object_store's S3
//! client, the raw S3 calls and Step Functions), resolved as the AWS CLI and SDKs resolve it:
//! the environment's keys, then the shared config and credentials files (`AWS_PROFILE`,
//! `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`; SSO and `credential_process` included),
//! web identity (IRSA), container credentials (ECS task roles, EKS Pod Identity), and the EC2
//! instance profile.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use aws_sdk_s3::config::Region;
use object_store::CredentialProvider;
use object_store::aws::{AwsCredential, AwsCredentialProvider};
use tokio::sync::{Mutex, OnceCell};

/// Credentials that expire sooner than this are fetched again before object_store signs with
/// them (a request signed now may be sent after a few retries).
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);

/// The chain for `region` (its STS and SSO calls; the objects' region is the clients' own),
/// built on its first use: building it is asynchronous, opening a store is not.
pub fn standard_chain(region: &str) -> SharedCredentialsProvider {
    SharedCredentialsProvider::new(LazyChain {
        region: region.to_string(),
        chain: OnceCell::new(),
    })
}

/// `chain` as object_store's credential provider. object_store asks for credentials before
/// each request, and the chain does not cache them (the AWS SDK clients do, around it): they
/// are kept here until shortly before they expire.
pub fn object_store_credentials(chain: SharedCredentialsProvider) -> AwsCredentialProvider {
    Arc::new(ObjectStoreCredentials {
        chain,
        cached: Mutex::new(None),
    })
}

#[derive(Debug)]
struct LazyChain {
    region: String,
    chain: OnceCell<DefaultCredentialsChain>,
}

impl ProvideCredentials for LazyChain {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            let region = Region::new(self.region.clone());
            let build = || DefaultCredentialsChain::builder().region(region).build();
            self.chain
                .get_or_init(build)
                .await
                .provide_credentials()
                .await
        })
    }
}

#[derive(Debug)]
struct ObjectStoreCredentials {
    chain: SharedCredentialsProvider,
    /// The last credentials fetched, with their expiry (`None`: they do not expire).
    cached: Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

#[async_trait::async_trait]
impl CredentialProvider for ObjectStoreCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        let fresh_until = SystemTime::now() + REFRESH_BEFORE_EXPIRY;
        if let Some((credential, expiry)) = cached.as_ref()
            && expiry.is_none_or(|expiry| expiry > fresh_until)
        {
            return Ok(Arc::clone(credential));
        }
        let fetched = self.chain.provide_credentials().await;
        let credentials = fetched.map_err(|e| object_store::Error::Generic {
            store: "S3",
            source: Box::new(e),
        })?;
        let credential = Arc::new(AwsCredential {
            key_id: credentials.access_key_id().to_string(),
            secret_key: credentials.secret_access_key().to_string(),
            token: credentials.session_token().map(str::to_string),
        });
        *cached = Some((Arc::clone(&credential), credentials.expiry()));
        Ok(credential)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::Credentials;

    /// Counts how often the chain behind object_store's provider is asked.
    #[derive(Debug, Clone)]
    struct Counted {
        calls: Arc<std::sync::atomic::AtomicUsize>,
        expiry: Option<SystemTime>,
    }

    impl ProvideCredentials for Counted {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let key = format!("key-{n}");
            let credentials = Credentials::new(key, "secret", None, self.expiry, "test");
            future::ProvideCredentials::ready(Ok(credentials))
        }
    }

    async fn keys_of_two_requests(expiry: Option<SystemTime>) -> (String, String, usize) {
        let counted = Counted {
            calls: Arc::default(),
            expiry,
        };
        let provider = object_store_credentials(SharedCredentialsProvider::new(counted.clone()));
        let first = provider.get_credential().await.expect("credentials");
        let second = provider.get_credential().await.expect("credentials");
        let calls = counted.calls.load(std::sync::atomic::Ordering::SeqCst);
        (first.key_id.clone(), second.key_id.clone(), calls)
    }

    #[tokio::test]
    async fn object_store_reuses_credentials_until_shortly_before_they_expire() {
        let (first, second, calls) = keys_of_two_requests(None).await;
        assert_eq!(
            (first.as_str(), second.as_str(), calls),
            ("key-0", "key-0", 1)
        );
        let later = SystemTime::now() + Duration::from_secs(3600);
        let (_, second, calls) = keys_of_two_requests(Some(later)).await;
        assert_eq!((second.as_str(), calls), ("key-0", 1));
        let soon = SystemTime::now() + Duration::from_secs(60);
        let (_, second, calls) = keys_of_two_requests(Some(soon)).await;
        assert_eq!((second.as_str(), calls), ("key-1", 2));
    }
}

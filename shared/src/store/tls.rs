//! The TLS of every HTTPS client (object_store's, the raw S3 and Step Functions calls', the
//! credential chain's): rustls with the `ring` crypto provider, installed as the process default
//! before a client is built.

use std::sync::Once;

/// Installs `ring` as rustls' process-wide crypto provider, once; a provider another part of
/// the process installed first is left in place. Every HTTPS client of this crate calls it
/// before it is built (reqwest refuses to build a TLS client without one).
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err only when a provider is already installed, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_https_client_builds_once_the_provider_is_installed() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        let options = object_store::ClientOptions::new();
        let client = object_store::client::HttpConnector::connect(
            &object_store::client::ReqwestConnector::default(),
            &options,
        )
        .map(|_| ());
        assert!(client.is_ok(), "{client:?}");
    }
}

//! The one way runguard builds HTTP clients (slurmrestd, alert webhooks, the narrative endpoint): TLS
//! through rustls with the `ring` provider, installed once for the process.

use std::sync::Once;

static PROVIDER: Once = Once::new();

/// Makes `ring` the process's TLS provider, once. Clients built before this would refuse to start.
pub fn install_tls_provider() {
    PROVIDER.call_once(|| {
        // Already installed (by an embedding program) is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client builder with TLS ready; callers add their timeouts.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_tls_provider();
    reqwest::Client::builder()
}

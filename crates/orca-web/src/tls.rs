//! TLS with rustls: certificate and key from PEM files; each connection served over HTTP/1.1.

use std::sync::Arc;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use crate::error::WebError;
use crate::server::TlsFiles;

/// An acceptor for the certificate and key in `files`.
///
/// # Errors
///
/// A file that cannot be read or holds no certificate / key, naming it.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, WebError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| WebError::BadInput(format!("--tls-cert {}: {e}", files.cert.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| WebError::BadInput(format!("--tls-cert {}: {e}", files.cert.display())))?;
    if certs.is_empty() {
        return Err(WebError::BadInput(format!(
            "--tls-cert {}: no certificate in it",
            files.cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| WebError::BadInput(format!("--tls-key {}: {e}", files.key.display())))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| WebError::Internal(format!("tls: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            WebError::BadInput(format!(
                "--tls-cert {} / --tls-key {}: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts TLS connections until `shutdown`.
///
/// # Errors
///
/// Never for one bad connection (logged); only if accepting fails for good.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: CancellationToken,
) -> Result<(), WebError> {
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(
                std::time::Duration::from_secs(10),
                acceptor.accept(stream),
            )
            .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!("tls handshake with {peer} failed: {e}");
                    return;
                }
                Err(_) => return,
            };
            let service = TowerToHyperService::new(app);
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                r = conn => if let Err(e) = r { tracing::debug!("connection from {peer}: {e}"); },
                () = shutdown.cancelled() => {}
            }
        });
    }
}

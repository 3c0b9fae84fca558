//! The HTTP server: routes, the token check on every request, security headers, the bind
//! policy, plain HTTP or TLS.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::WebError;
use crate::state::Web;
use crate::tokens::TokenName;

/// The content security policy: nothing inline, nothing from elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The cookie holding the access token.
pub const COOKIE: &str = "orca_token";

/// TLS certificate and key files (PEM).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
}

/// Refuses a bind that would expose the server without protection: a non-loopback address
/// needs TLS and at least one token. Every request needs a token in any case.
///
/// # Errors
///
/// [`WebError::Refused`], explaining what to do.
pub fn check_bind(addr: SocketAddr, tls: bool, any_token: bool) -> Result<(), WebError> {
    if !any_token {
        return Err(WebError::Refused(
            "no access token exists yet: create one with `orca serve --new-token NAME` (every request needs one)".to_owned(),
        ));
    }
    if !addr.ip().is_loopback() && !tls {
        return Err(WebError::Refused(format!(
            "refusing to serve on {addr} without TLS: tokens and decisions would cross the network in clear text. Give --tls-cert and --tls-key (PEM files), or bind to 127.0.0.1"
        )));
    }
    Ok(())
}

/// The routes.
pub fn router(web: Arc<Web>) -> Router {
    let authed = Router::new()
        .route("/", get(crate::pages::root))
        .route("/inbox", get(crate::pages::inbox))
        .route("/plans", get(crate::pages::plans))
        .route("/plans/{id}", get(crate::pages::plan))
        .route("/plans/{id}/dag.svg", get(crate::pages::plan_svg))
        .route(
            "/plans/{id}/approve",
            get(crate::pages::approve_confirm).post(crate::post::approve),
        )
        .route("/plans/{id}/reject", post(crate::post::reject))
        .route("/plans/{id}/changes", post(crate::post::request_changes))
        .route("/plans/{id}/run", post(crate::post::run))
        .route("/executions", get(crate::pages::executions))
        .route("/executions/{id}", get(crate::pages::execution))
        .route("/executions/{id}/events", get(crate::live::events))
        .route("/executions/{id}/steps/{step}", get(crate::steps::step))
        .route(
            "/executions/{id}/steps/{step}/events",
            get(crate::steps::events),
        )
        .route("/executions/{id}/decide", post(crate::post::decide))
        .route("/executions/{id}/accept", post(crate::results::accept))
        .route("/executions/{id}/discard", post(crate::results::discard))
        .route("/audit", get(crate::audit::audit))
        .route("/api/inbox", get(crate::pages::inbox_json))
        .route("/logout", post(crate::login::logout))
        .layer(middleware::from_fn_with_state(web.clone(), authenticate));
    Router::new()
        .route(
            "/login",
            get(crate::login::login_page).post(crate::login::login_post),
        )
        .route("/static/orca.css", get(css))
        .route("/static/live.js", get(js))
        .merge(authed)
        .layer(middleware::from_fn(headers))
        .with_state(web)
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("static/orca.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("static/live.js"),
    )
        .into_response()
}

/// The secret a request carries: `Authorization: Bearer …`, else the cookie.
pub(crate) fn presented(headers: &HeaderMap) -> Option<String> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some(t) = v.strip_prefix("Bearer ")
    {
        return Some(t.trim().to_owned());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

/// Every request but the login page and the static files needs a valid token; a POST from
/// another origin is refused.
async fn authenticate(State(web): State<Arc<Web>>, mut req: Request, next: Next) -> Response {
    if req.method() == Method::POST && !same_origin(req.headers()) {
        return crate::pages::public_status_page(
            StatusCode::FORBIDDEN,
            "Refused",
            "this form was sent from another site",
        );
    }
    let name: Option<TokenName> = match presented(req.headers()) {
        Some(secret) => match web.tokens.check(&secret) {
            Ok(name) => name,
            Err(e) => {
                tracing::error!("token check failed: {e}");
                return crate::pages::status_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Error",
                    &format!("the token file cannot be read: {e}"),
                );
            }
        },
        None => None,
    };
    match name {
        Some(name) => {
            req.extensions_mut().insert(name);
            next.run(req).await
        }
        None => crate::login::login_needed(),
    }
}

/// `Origin`, when sent, names this host.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .unwrap_or("");
    !host.is_empty() && origin_host == host
}

async fn headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: with it browsers send `Origin: null` on this site's own forms, and
        // the origin check could not tell them from a cross-site post.
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    res
}

/// Serves until `shutdown`: plain HTTP, or TLS when `tls` is given. The background watcher
/// (notifications, expiry) runs alongside.
///
/// # Errors
///
/// Unreadable TLS files, or the server failing.
pub async fn serve(
    web: Arc<Web>,
    listener: TcpListener,
    tls: Option<&TlsFiles>,
    shutdown: CancellationToken,
) -> Result<(), WebError> {
    let watcher = tokio::spawn(crate::notify::watch(web.clone(), shutdown.clone()));
    let closing = web.closing.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        closing.cancel();
    });
    let app = router(web);
    let result = match tls {
        None => axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned())
            .await
            .map_err(|e| WebError::Internal(format!("the server failed: {e}"))),
        Some(files) => {
            let acceptor = crate::tls::acceptor(files)?;
            crate::tls::serve(listener, acceptor, app, shutdown.clone()).await
        }
    };
    shutdown.cancel();
    let _ = watcher.await;
    result
}

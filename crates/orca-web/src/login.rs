//! Signing in and out: the sign-in page (the one page without a token), `/login?token=…`,
//! and forgetting the cookie. These pages are for someone not signed in: no "Sign out".

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use crate::html::{esc, public_page};
use crate::pages::error_response;
use crate::server::COOKIE;
use crate::state::Web;

fn login_form(message: Option<&str>) -> String {
    format!(
        "<h1>Sign in</h1>{}<p>Paste an access token (create one with <code>orca serve --new-token NAME</code>).</p>\
<form class=\"stack\" method=\"post\" action=\"/login\"><input type=\"password\" name=\"token\" autocomplete=\"current-password\" aria-label=\"access token\">\
<p><button type=\"submit\">Sign in</button></p></form>",
        message
            .map(|m| format!("<p class=\"msg bad\">{}</p>", esc(m)))
            .unwrap_or_default()
    )
}

pub(crate) fn login_needed() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(public_page(
            "Sign in",
            &login_form(Some("a valid access token is needed")),
        )),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginQuery {
    token: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

fn sign_in(web: &Web, secret: &str) -> Response {
    match web.tokens.check(secret.trim()) {
        Ok(Some(_)) => {
            let cookie = format!(
                "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age=2592000{}",
                secret.trim(),
                if web.settings.secure_cookie {
                    "; Secure"
                } else {
                    ""
                }
            );
            (
                StatusCode::SEE_OTHER,
                [
                    (header::SET_COOKIE, cookie),
                    (header::LOCATION, "/inbox".to_owned()),
                ],
            )
                .into_response()
        }
        Ok(None) => (
            StatusCode::UNAUTHORIZED,
            Html(public_page(
                "Sign in",
                &login_form(Some("that token is not valid")),
            )),
        )
            .into_response(),
        Err(e) => error_response(&e),
    }
}

pub(crate) async fn login_page(
    State(web): State<Arc<Web>>,
    Query(q): Query<LoginQuery>,
) -> Response {
    match q.token {
        Some(t) => sign_in(&web, &t),
        None => Html(public_page("Sign in", &login_form(None))).into_response(),
    }
}

pub(crate) async fn login_post(State(web): State<Arc<Web>>, Form(f): Form<LoginForm>) -> Response {
    sign_in(&web, &f.token)
}

/// Forgets the cookie (the token itself stays valid: revoke it with `--revoke-token`).
pub(crate) async fn logout() -> Response {
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
            ),
            (header::LOCATION, "/login".to_owned()),
        ],
    )
        .into_response()
}

//! Logging in and out.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use crate::state::AppState;
use crate::ui::{
    SessionForm, UiError, bare_page, check_same_origin, login_form_response, login_response,
    logout_response, parse_form,
};

/// The login form; `csrf` is the value of its double-submit cookie.
pub fn login_page(message: Option<&str>, csrf: &str) -> Response {
    bare_page(
        "Log in",
        html! {
            div.panel.login {
                h1 { "Log in to kairos" }
                p { "Paste an API token. Viewer tokens see everything read-only; admin tokens can act; agent tokens see their agents." }
                @if let Some(m) = message { p.flash.bad #flash { (m) } }
                form method="post" action="/ui/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    label for="token" { "Token" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    button #login type="submit" { "Log in" }
                }
            }
        },
    )
}

pub async fn login_form(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    if state.tokens.is_empty() {
        return Redirect::to("/ui/").into_response();
    }
    login_form_response(&headers, None, axum::http::StatusCode::OK)
}

pub async fn login(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(e) = check_same_origin(&headers) {
        return e.into_response();
    }
    let fields = parse_form(&body);
    login_response(&state, &headers, &fields).await
}

/// Logging out needs no admin role, only a same-origin form with the session's CSRF token; a
/// request without a session just lands on the login page.
pub async fn logout(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    form: Result<SessionForm, UiError>,
) -> Response {
    match form {
        Ok(_) | Err(UiError::Login) => logout_response(&state, &headers).await,
        Err(e) => e.into_response(),
    }
}

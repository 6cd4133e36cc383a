//! The operators' console at `/ui/`: server-rendered HTML (maud) over the same store functions as
//! the API, with the same tokens and roles. Assets are embedded in the binary; pages read fine
//! without JavaScript (a small script only switches timestamps between UTC and local time and
//! selects rows in bulk).
//!
//! # Sessions
//! With `auth_tokens` configured, `/ui/login` takes a token and keeps it in the `kairos_ui`
//! cookie (`HttpOnly; SameSite=Strict; Path=/ui`); every request re-authenticates it, so a token
//! removed from the configuration logs its sessions out at the next restart. In open mode the
//! console, like the API, answers only loopback `Host`s and `Origin`s, and everyone is admin.
//!
//! # Forms
//! Every action is a POST carrying a CSRF token: an HMAC of the session's token (in open mode,
//! of a per-process secret), so it cannot be forged without the token and works on every
//! replica. A POST whose `Origin` is not the page's own host is refused. Viewers see no action
//! buttons, and their POSTs are refused too; agent tokens see only their agents.

mod pages;
mod render;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use hmac::{KeyInit, Mac};
use maud::{DOCTYPE, Markup, html};

use crate::domain::access::{Principal, Role};
use crate::http::error::ApiError;
use crate::http::{AppState, RouteTable};

pub const COOKIE: &str = "kairos_ui";
const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");

pub fn routes(t: RouteTable) -> RouteTable {
    t.add("get", "/ui", get(|| async { Redirect::permanent("/ui/") }))
        .add("get", "/ui/", get(pages::overview))
        .add("get", "/ui/login", get(pages::login_form))
        .add("post", "/ui/login", axum::routing::post(pages::login))
        .add("post", "/ui/logout", axum::routing::post(pages::logout))
        .add("get", "/ui/tasks", get(pages::tasks))
        .add("get", "/ui/tasks/{id}", get(pages::task_detail))
        .add(
            "post",
            "/ui/tasks/{id}/{action}",
            axum::routing::post(pages::task_action),
        )
        .add("get", "/ui/instances", get(pages::instances))
        .add("get", "/ui/instances/{id}", get(pages::instance_detail))
        .add(
            "post",
            "/ui/instances/{id}/{action}",
            axum::routing::post(pages::instance_action),
        )
        .add("get", "/ui/dead", get(pages::dead_queue))
        .add("post", "/ui/dead", axum::routing::post(pages::dead_action))
        .add("get", "/ui/playground", get(pages::playground))
        .add("get", "/ui/assets/app.css", get(css))
        .add("get", "/ui/assets/app.js", get(js))
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A signed-in console user.
#[derive(Clone)]
pub struct Session {
    pub principal: Principal,
    /// The token forms must carry.
    pub csrf: String,
}

impl Session {
    pub fn is_admin(&self) -> bool {
        self.principal.role == Role::Admin
    }
}

/// Why a console request was not served: a page with a status, or a redirect to log in.
pub enum UiError {
    Login,
    Page(StatusCode, String),
}

impl UiError {
    pub fn not_found(what: impl Into<String>) -> Self {
        UiError::Page(StatusCode::NOT_FOUND, what.into())
    }

    pub fn bad_request(what: impl Into<String>) -> Self {
        UiError::Page(StatusCode::UNPROCESSABLE_ENTITY, what.into())
    }

    pub fn forbidden(what: impl Into<String>) -> Self {
        UiError::Page(StatusCode::FORBIDDEN, what.into())
    }
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        let status = e.status();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = %e.detail(), "console page failed");
            return UiError::Page(
                status,
                "the page could not be built; see the server log".into(),
            );
        }
        UiError::Page(status, e.detail())
    }
}

impl From<crate::store::Error> for UiError {
    fn from(e: crate::store::Error) -> Self {
        ApiError::from(e).into()
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        match self {
            UiError::Login => Redirect::to("/ui/login").into_response(),
            UiError::Page(status, message) => {
                let body = bare_page(
                    status.canonical_reason().unwrap_or("Error"),
                    html! {
                        div.panel.error-panel {
                            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
                            p #error { (message) }
                            p { a href="/ui/" { "Back to the overview" } }
                        }
                    },
                );
                (status, body).into_response()
            }
        }
    }
}

pub type UiResult = Result<Response, UiError>;

/// The session cookie's token, if any.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| percent_decode(value))
}

fn percent_decode(s: &str) -> String {
    form_urlencoded::parse(format!("v={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn hmac_hex(key: &[u8], message: &[u8]) -> String {
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(message);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The per-process secret behind open mode's CSRF tokens.
fn open_secret() -> &'static [u8] {
    static SECRET: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| {
        let mut v = uuid::Uuid::new_v4().as_bytes().to_vec();
        v.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        v
    })
}

fn csrf_for(token: Option<&str>) -> String {
    match token {
        Some(t) => hmac_hex(t.as_bytes(), b"kairos-ui-csrf"),
        None => hmac_hex(open_secret(), b"kairos-ui-csrf"),
    }
}

/// Resolve the session of a request: open mode (loopback only), or the cookie's token.
fn session_of(state: &AppState, headers: &HeaderMap) -> Result<Session, UiError> {
    if state.tokens.is_empty() {
        crate::http::auth::open_mode_addressing(headers)?;
        return Ok(Session {
            principal: Principal::open(),
            csrf: csrf_for(None),
        });
    }
    let token = cookie_token(headers).ok_or(UiError::Login)?;
    let principal = state.tokens.authenticate(&token).ok_or(UiError::Login)?;
    Ok(Session {
        principal,
        csrf: csrf_for(Some(&token)),
    })
}

impl FromRequestParts<AppState> for Session {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, UiError> {
        session_of(state, &parts.headers)
    }
}

/// A console form of an admin session (see [`SessionForm`] for the other checks).
pub struct AdminForm {
    pub session: Session,
    pub fields: Vec<(String, String)>,
}

impl AdminForm {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.trim().is_empty())
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Refuse a POST whose `Origin` names another host than the request's own `Host`.
fn check_same_origin(headers: &HeaderMap) -> Result<(), UiError> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let authority = origin.split_once("://").map_or("", |(_, a)| a);
    if authority.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        tracing::warn!(
            origin,
            host,
            reason = "cross-site form",
            "console action refused"
        );
        Err(UiError::forbidden(format!(
            "a form from {origin} may not act on this console"
        )))
    }
}

/// Parse an urlencoded form body.
pub fn parse_form(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A console form of any role, checked: same-origin and the session's CSRF token.
pub struct SessionForm {
    pub session: Session,
    pub fields: Vec<(String, String)>,
}

impl axum::extract::FromRequest<AppState> for SessionForm {
    type Rejection = UiError;

    async fn from_request(req: axum::extract::Request, state: &AppState) -> Result<Self, UiError> {
        let (parts, body) = req.into_parts();
        check_same_origin(&parts.headers)?;
        let session = session_of(state, &parts.headers)?;
        let bytes = axum::body::to_bytes(body, crate::domain::task::MAX_DOCUMENT_BYTES)
            .await
            .map_err(|_| UiError::bad_request("the form is too large"))?;
        let fields = parse_form(&bytes);
        let sent = fields
            .iter()
            .find(|(k, _)| k == "csrf")
            .map_or("", |(_, v)| v.as_str());
        if !constant_time_eq(sent.as_bytes(), session.csrf.as_bytes()) {
            tracing::warn!(principal = %session.principal.label, path = %parts.uri.path(), reason = "missing or wrong CSRF token", "console action refused");
            return Err(UiError::forbidden(
                "the form's CSRF token is missing or wrong; reload the page and try again",
            ));
        }
        Ok(SessionForm { session, fields })
    }
}

impl axum::extract::FromRequest<AppState> for AdminForm {
    type Rejection = UiError;

    async fn from_request(req: axum::extract::Request, state: &AppState) -> Result<Self, UiError> {
        let path = req.uri().path().to_owned();
        let SessionForm { session, fields } = SessionForm::from_request(req, state).await?;
        if !session.is_admin() {
            tracing::warn!(principal = %session.principal.label, path = %path, reason = "role does not allow this", "console action refused");
            return Err(UiError::forbidden(format!(
                "{} {} token may only read",
                crate::domain::text::article(session.principal.role.as_str()),
                session.principal.role.as_str()
            )));
        }
        Ok(AdminForm { session, fields })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `Set-Cookie` value of a session holding `token`.
fn session_cookie(token: &str) -> Option<HeaderValue> {
    let encoded: String = form_urlencoded::byte_serialize(token.as_bytes()).collect();
    HeaderValue::from_str(&format!(
        "{COOKIE}={encoded}; Path=/ui; HttpOnly; SameSite=Strict"
    ))
    .ok()
}

fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static("kairos_ui=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// The navigation's pages: (path, label).
const NAV: [(&str, &str); 5] = [
    ("/ui/", "Overview"),
    ("/ui/tasks", "Tasks"),
    ("/ui/instances", "Instances"),
    ("/ui/dead", "DEAD queue"),
    ("/ui/playground", "Cron playground"),
];

/// A whole console page: navigation, session, the time-zone switch, and `body`.
pub fn page(session: &Session, current: &str, title: &str, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · kairos" }
                link rel="stylesheet" href="/ui/assets/app.css";
                script src="/ui/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/ui/" { "kairos" }
                    nav {
                        @for (path, label) in NAV {
                            a href=(path) class=[(path == current).then_some("current")] { (label) }
                        }
                    }
                    div.session {
                        button #tz-toggle type="button" hidden title="Show times in UTC or in this browser's zone" { "UTC" }
                        span.role #role { (session.principal.label) }
                        form method="post" action="/ui/logout" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            button.link type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    html_response(markup)
}

/// A page without navigation (login, errors before a session exists).
fn bare_page(title: &str, body: Markup) -> Response {
    html_response(html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · kairos" }
                link rel="stylesheet" href="/ui/assets/app.css";
            }
            body { header.top { a.brand href="/ui/" { "kairos" } } main { (body) } }
        }
    })
}

fn html_response(markup: Markup) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        [(
            header::HeaderName::from_static("content-security-policy"),
            "default-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        )],
        markup.into_string(),
    )
        .into_response()
}

/// Answer a login form: 303 to the overview with the session cookie, or the form again.
pub(crate) fn login_response(state: &AppState, token: &str) -> Response {
    if state.tokens.is_empty() {
        return Redirect::to("/ui/").into_response();
    }
    match (state.tokens.authenticate(token), session_cookie(token)) {
        (Some(principal), Some(cookie)) => {
            tracing::info!(principal = %principal.label, "console login");
            let mut resp = Redirect::to("/ui/").into_response();
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
            resp
        }
        _ => {
            tracing::warn!(reason = "unknown token", "console login refused");
            let mut resp = pages::login_page(Some("That token is not valid.")).into_response();
            *resp.status_mut() = StatusCode::UNAUTHORIZED;
            resp
        }
    }
}

pub(crate) fn logout_response() -> Response {
    let mut resp = Redirect::to("/ui/login").into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, clear_cookie());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_tokens_are_read_back_and_csrf_depends_on_the_token() {
        let mut h = HeaderMap::new();
        let cookie = session_cookie("s3cr3t;=x").expect("cookie");
        let pair = cookie
            .to_str()
            .expect("ascii")
            .split(';')
            .next()
            .unwrap_or("");
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {pair}")).expect("header"),
        );
        assert_eq!(cookie_token(&h).as_deref(), Some("s3cr3t;=x"));
        assert_ne!(csrf_for(Some("a")), csrf_for(Some("b")));
        assert_eq!(csrf_for(Some("a")), csrf_for(Some("a")));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn same_origin_check() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(check_same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(check_same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(check_same_origin(&h).is_err());
    }
}

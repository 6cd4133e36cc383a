//! The operators' console at `/ui/`: server-rendered HTML (maud) over the same store functions
//! and `usecases` as the API, with the same tokens and roles; it imports nothing of `http`.
//! Assets are embedded in the binary; pages read fine without JavaScript (a small script only
//! switches timestamps between UTC and local time and selects rows in bulk).
//!
//! # Sessions
//! With `auth_tokens` configured, `/ui/login` takes a token and starts a session
//! (`store::sessions`): a random id in the `kairos_ui` cookie (`HttpOnly; SameSite=Strict;
//! Path=/ui`, and `Secure` when the request came over HTTPS: kairos serves plain HTTP, so that
//! is a TLS-terminating proxy's `X-Forwarded-Proto: https`), and a row in the database holding
//! the id's hash and a proof of the token (an HMAC of the id keyed by the token's SHA-256).
//! Every request looks the session up and finds the configured token the proof belongs to, so
//! a session ends at logout (for every copy of its cookie), after [`SESSION_SECONDS`], or when
//! its token is removed from the configuration (at the next restart). In open mode the
//! console, like the API, answers only loopback `Host`s and `Origin`s, and everyone is admin.
//!
//! The login form is guarded against login CSRF (a foreign page logging the browser in under
//! the attacker's token) by a double-submit token: the form sets a random value in the
//! `kairos_ui_login` cookie (`Path=/ui/login`) and carries it in a hidden field; a login POST
//! whose field and cookie differ, or lack either, is refused. A foreign page can make the
//! browser POST but can neither read nor set that cookie. It works on every replica: the login
//! form's value is kept nowhere on the server.
//!
//! # Forms
//! Every action is a POST carrying a CSRF token: an HMAC of the session's id (in open mode,
//! of a per-process secret), so it cannot be forged without the session id and works on every
//! replica. A POST whose `Origin` is not the page's own host is refused. Viewers see no action
//! buttons, and their POSTs are refused too; agent tokens see only their agents.

mod limits;
mod pages;
mod render;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{KeyInit, Mac};
use maud::{DOCTYPE, Markup, html};

use crate::domain::access::{Principal, Role};
use crate::problem::ApiError;
use crate::route_table::RouteTable;
use crate::state::AppState;

pub const COOKIE: &str = "kairos_ui";
/// The login form's double-submit CSRF cookie.
pub const LOGIN_COOKIE: &str = "kairos_ui_login";
const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");

pub fn routes(t: RouteTable) -> RouteTable {
    t.get("/ui", || async { Redirect::permanent("/ui/") })
        .get("/ui/", pages::overview)
        .get("/ui/login", pages::login_form)
        .post("/ui/login", pages::login)
        .post("/ui/logout", pages::logout)
        .get("/ui/tasks", pages::tasks)
        .get("/ui/tasks/{id}", pages::task_detail)
        .post("/ui/tasks/{id}/{action}", pages::task_action)
        .get("/ui/instances", pages::instances)
        .get("/ui/instances/{id}", pages::instance_detail)
        .post("/ui/instances/{id}/{action}", pages::instance_action)
        .get("/ui/limits", limits::limits_page)
        .post("/ui/limits/{name}/{action}", limits::limit_action)
        .get("/ui/dead", pages::dead_queue)
        .post("/ui/dead", pages::dead_action)
        .get("/ui/playground", pages::playground)
        .get("/ui/assets/app.css", css)
        .get("/ui/assets/app.js", js)
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

/// The value of the request's cookie `name`, if any.
fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| percent_decode(value))
}

/// The request reached the console over HTTPS. kairos itself serves plain HTTP, so only a
/// TLS-terminating proxy can say so: `X-Forwarded-Proto: https`, or `proto=https` in
/// `Forwarded`. Believing a client that claims it is harmless: it only makes its own cookies
/// `Secure`, which its browser then does not send back over plain HTTP.
fn over_https(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get_all("x-forwarded-proto")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next()
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get_all(header::FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next()
        .is_some_and(|first| {
            first.split(';').any(|kv| {
                kv.trim().split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("proto")
                        && v.trim().trim_matches('"').eq_ignore_ascii_case("https")
                })
            })
        });
    forwarded_proto || forwarded
}

/// The attributes of every console cookie.
fn cookie_attributes(path: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("Path={path}; HttpOnly; SameSite=Strict{secure}")
}

/// Bytes as lowercase hex digits.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh random value (256 bits, hex): a session id, a login form's CSRF value.
fn random_hex() -> String {
    hex(&rand::random::<[u8; 32]>())
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
    hex(&mac.finalize().into_bytes())
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

/// The CSRF token of a session (keyed by its id) or, in open mode, of this process.
fn csrf_for(session_id: Option<&str>) -> String {
    match session_id {
        Some(t) => hmac_hex(t.as_bytes(), b"kairos-ui-csrf"),
        None => hmac_hex(open_secret(), b"kairos-ui-csrf"),
    }
}

/// How long a console session lasts after its login.
pub const SESSION_SECONDS: i64 = 12 * 3600;

/// A console session id as its cookie carries it: 64 hex digits.
fn session_id_of(headers: &HeaderMap) -> Option<String> {
    cookie_value(headers, COOKIE)
        .filter(|id| id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The key a session is stored under: the SHA-256 of its id.
fn session_key(id: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(id.as_bytes()).to_vec()
}

/// Resolve the session of a request: open mode (loopback only), or the session its cookie
/// names, while it lasts and the token it logged in with is still configured.
async fn session_of(state: &AppState, headers: &HeaderMap) -> Result<Session, UiError> {
    if state.tokens.is_empty() {
        crate::usecases::access::open_mode_addressing(headers)?;
        return Ok(Session {
            principal: Principal::open(),
            csrf: csrf_for(None),
        });
    }
    let id = session_id_of(headers).ok_or(UiError::Login)?;
    let proof = crate::store::sessions::proof(&state.pool, &session_key(&id))
        .await?
        .ok_or(UiError::Login)?;
    let principal = state
        .tokens
        .of_session(id.as_bytes(), &proof)
        .ok_or(UiError::Login)?;
    Ok(Session {
        principal,
        csrf: csrf_for(Some(&id)),
    })
}

impl FromRequestParts<AppState> for Session {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, UiError> {
        session_of(state, &parts.headers).await
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

/// Refuse a POST that a browser says came from another site: its `Origin` (or, without one,
/// its `Referer`) names another host and port than the request's own `Host`, or its
/// `Sec-Fetch-Site` is `cross-site` or `same-site`. A request with none of them (no browser
/// sends a POST so) still needs the session's CSRF token. The scheme is not compared: behind
/// a proxy that ends TLS, the page is `https` and the request `http`.
fn check_same_origin(headers: &HeaderMap) -> Result<(), UiError> {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let host = text(header::HOST).unwrap_or("");
    let refuse = |from: &str, why: &str| {
        tracing::warn!(from, host, reason = why, "console action refused");
        Err(UiError::forbidden(format!(
            "a form from {from} may not act on this console"
        )))
    };
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && matches!(site.trim(), "cross-site" | "same-site")
    {
        return refuse(site, "cross-site form (Sec-Fetch-Site)");
    }
    let (from, authority) = match (text(header::ORIGIN), text(header::REFERER)) {
        (Some(origin), _) => (origin, origin.split_once("://").map_or("", |(_, a)| a)),
        (None, Some(referer)) => {
            let rest = referer.split_once("://").map_or("", |(_, a)| a);
            (referer, rest.split(['/', '?', '#']).next().unwrap_or(""))
        }
        (None, None) => return Ok(()),
    };
    if authority.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        refuse(from, "cross-site form")
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
        let session = session_of(state, &parts.headers).await?;
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

/// The `Set-Cookie` value of a session with id `id`.
fn session_cookie(id: &str, secure: bool) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; {}",
        cookie_attributes("/ui", secure)
    ))
    .ok()
}

/// The `Set-Cookie` value that ends cookie `name` of `path`.
fn clear_cookie(name: &str, path: &str, secure: bool) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{name}=; {}; Max-Age=0",
        cookie_attributes(path, secure)
    ))
    .ok()
}

/// The navigation's pages: (path, label).
const NAV: [(&str, &str); 6] = [
    ("/ui/", "Overview"),
    ("/ui/tasks", "Tasks"),
    ("/ui/instances", "Instances"),
    ("/ui/limits", "Limits"),
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

/// The login form with `message`, answered with `status`: a fresh double-submit CSRF value in
/// its hidden field and in the `kairos_ui_login` cookie.
pub(crate) fn login_form_response(
    headers: &HeaderMap,
    message: Option<&str>,
    status: StatusCode,
) -> Response {
    let csrf = random_hex();
    let mut resp = pages::login_page(message, &csrf);
    *resp.status_mut() = status;
    if let Ok(cookie) = HeaderValue::from_str(&format!(
        "{LOGIN_COOKIE}={csrf}; {}",
        cookie_attributes("/ui/login", over_https(headers))
    )) {
        resp.headers_mut().append(header::SET_COOKIE, cookie);
    }
    resp
}

/// Answer a login form: 303 to the overview with the session cookie, or the form again (403
/// when its CSRF value does not match its cookie, 401 for an unknown token).
pub(crate) async fn login_response(
    state: &AppState,
    headers: &HeaderMap,
    fields: &[(String, String)],
) -> Response {
    if state.tokens.is_empty() {
        return Redirect::to("/ui/").into_response();
    }
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let sent = field("csrf");
    let expected = cookie_value(headers, LOGIN_COOKIE).unwrap_or_default();
    if sent.is_empty() || !constant_time_eq(sent.as_bytes(), expected.as_bytes()) {
        tracing::warn!(
            reason = "missing or wrong CSRF token",
            "console login refused"
        );
        return login_form_response(
            headers,
            Some("The login form expired or did not come from this console; log in again."),
            StatusCode::FORBIDDEN,
        );
    }
    let token = field("token").trim();
    let secure = over_https(headers);
    let id = random_hex();
    let Some((principal, proof)) = state.tokens.session_proof(token, id.as_bytes()) else {
        tracing::warn!(reason = "unknown token", "console login refused");
        return login_form_response(
            headers,
            Some("That token is not valid."),
            StatusCode::UNAUTHORIZED,
        );
    };
    if let Err(e) = crate::store::sessions::start(
        &state.pool,
        &session_key(&id),
        &proof,
        SESSION_SECONDS as f64,
    )
    .await
    {
        return UiError::from(e).into_response();
    }
    tracing::info!(principal = %principal.label, "console login");
    let mut resp = Redirect::to("/ui/").into_response();
    if let Some(cookie) = session_cookie(&id, secure) {
        resp.headers_mut().append(header::SET_COOKIE, cookie);
    }
    if let Some(done) = clear_cookie(LOGIN_COOKIE, "/ui/login", secure) {
        resp.headers_mut().append(header::SET_COOKIE, done);
    }
    resp
}

/// End the request's session (on the server first, so a copy of the cookie stops working too)
/// and clear its cookie.
pub(crate) async fn logout_response(state: &AppState, headers: &HeaderMap) -> Response {
    if let Some(id) = session_id_of(headers)
        && let Err(e) = crate::store::sessions::end(&state.pool, &session_key(&id)).await
    {
        return UiError::from(e).into_response();
    }
    let mut resp = Redirect::to("/ui/login").into_response();
    if let Some(clear) = clear_cookie(COOKIE, "/ui", over_https(headers)) {
        resp.headers_mut().insert(header::SET_COOKIE, clear);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_read_back_only_in_their_own_shape_and_csrf_depends_on_the_id() {
        let id = "0123456789abcdef".repeat(4);
        let with_cookie = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::COOKIE,
                HeaderValue::from_str(&format!("other=1; {COOKIE}={value}")).expect("header"),
            );
            h
        };
        let cookie = session_cookie(&id, false).expect("cookie");
        assert!(
            cookie
                .to_str()
                .unwrap_or("")
                .starts_with(&format!("{COOKIE}={id}; "))
        );
        assert_eq!(
            session_id_of(&with_cookie(&id)).as_deref(),
            Some(id.as_str())
        );
        // An API token pasted into the cookie (what the cookie held before) is no session id.
        assert_eq!(session_id_of(&with_cookie("s3cr3t-admin-token")), None);
        assert_eq!(session_id_of(&with_cookie(&format!("{id}0"))), None);
        assert_eq!(session_id_of(&with_cookie(&"g".repeat(64))), None);
        assert_ne!(session_key(&id), session_key(&"f".repeat(64)));
        assert_ne!(csrf_for(Some("a")), csrf_for(Some("b")));
        assert_eq!(csrf_for(Some("a")), csrf_for(Some("a")));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn https_is_what_a_proxy_says_it_was() {
        let with = |name: &'static str, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            over_https(&h)
        };
        assert!(!over_https(&HeaderMap::new()));
        assert!(with("x-forwarded-proto", "https"));
        assert!(with("x-forwarded-proto", "HTTPS, http"));
        assert!(!with("x-forwarded-proto", "http"));
        assert!(with(
            "forwarded",
            "for=192.0.2.1;proto=https;by=203.0.113.43"
        ));
        assert!(with("forwarded", "proto=\"https\""));
        assert!(!with("forwarded", "proto=http, proto=https"));
        let secure = session_cookie(&"a".repeat(64), true).expect("cookie");
        assert!(secure.to_str().unwrap_or("").ends_with("; Secure"));
    }

    #[test]
    fn same_origin_check() {
        // The request's own Host, and the headers a browser sent with its POST.
        let allowed = |sent: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
            for (name, value) in sent {
                h.insert(*name, HeaderValue::from_static(value));
            }
            check_same_origin(&h).is_ok()
        };
        assert!(allowed(&[]));
        assert!(allowed(&[("origin", "http://127.0.0.1:8080")]));
        assert!(!allowed(&[("origin", "http://evil.example")]));
        // Without Origin, the Referer's host and port decide.
        assert!(!allowed(&[("referer", "http://evil.example/ui/limits")]));
        assert!(allowed(&[(
            "referer",
            "http://127.0.0.1:8080/ui/limits?x=1"
        )]));
        assert!(!allowed(&[(
            "referer",
            "http://127.0.0.1:8080.evil.example/"
        )]));
        // A browser that says the form came from another site is refused whatever else.
        assert!(!allowed(&[("sec-fetch-site", "cross-site")]));
        assert!(allowed(&[("sec-fetch-site", "same-origin")]));
    }
}

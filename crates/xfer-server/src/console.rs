//! The operator console at `/console`: server-rendered pages over the same service calls
//! as the API, for the people who fix what automation cannot (SPEC's console).
//!
//! Every asset is inside the binary and the Content-Security-Policy allows nothing else.
//! A browser signs in with an API token, exchanged for a session cookie
//! (`console/sign_in.rs`); with no token configured (loopback only) a session of admin
//! scope is opened on the first visit, as the API lets every call through. Reads need a
//! session; every action is a POST form that carries the session's CSRF token and needs
//! the admin scope.

pub mod sign_in;
pub mod view;

use crate::api::App;
use crate::auth::Scope;
use crate::error::ApiError;
use crate::service::{Action, Service};
use crate::transfer_list::{metadata_pair, ListCursor, ListError, TransferFilter};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;
use sign_in::{cookie_id, random_hex, same_secret, SignIn, COOKIE, SIGN_IN_MS};
use std::collections::HashMap;
use std::sync::Arc;
use view::{ListForm, Viewer};
use xfer_core::{AccountId, AssetCode, LowerBound, Timestamp, TransferId, TransferState};
use xfer_engine::ExecError;

type Shared = State<Arc<App>>;

/// Nothing but this server's own files; no inline script or style, no frames, forms
/// only to itself.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const STYLE: &str = include_str!("console/style.css");
const SCRIPT: &str = include_str!("console/app.js");
const PAGE: usize = 50;

/// The console's routes, and `/` sent to it.
pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/", get(|| async { see_other("/console") }))
        .route("/console", get(overview))
        .route("/console/", get(|| async { see_other("/console") }))
        .route("/console/login", get(login_page).post(login))
        .route("/console/logout", post(logout))
        .route(
            "/console/assets/style.css",
            get(|| async { asset(STYLE, "text/css") }),
        )
        .route(
            "/console/assets/app.js",
            get(|| async { asset(SCRIPT, "text/javascript") }),
        )
        .route("/console/stats.json", get(stats_json))
        .route("/console/transfers", get(transfers))
        .route("/console/transfers/{id}", get(transfer))
        .route("/console/transfers/{id}/{action}", post(transfer_action))
        .route("/console/stuck", get(stuck))
        .route("/console/canceled", get(canceled))
        .route("/console/accounts", get(accounts))
        .route("/console/accounts/{id}", get(account))
        .route("/console/accounts/{id}/{action}", post(account_action))
}

fn see_other(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    r
}

/// A page with the console's headers.
fn page(status: StatusCode, markup: Markup) -> Response {
    let mut r = (status, markup.into_string()).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
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
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn session_cookie(id: &str) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={}",
        SIGN_IN_MS / 1000
    ))
    .expect("hex is a header value")
}

/// The session a page is read in: the cookie's, or on a server without tokens a new one
/// of admin scope (set, then the page asked for again); else the way to sign in.
fn gate(app: &App, headers: &HeaderMap, uri: &Uri) -> Result<(String, SignIn), Box<Response>> {
    let now = app.svc.now();
    let cookie = headers.get(header::COOKIE).and_then(|v| v.to_str().ok());
    if let Some(id) = cookie_id(cookie) {
        if let Some(s) = app.sign_ins.get(&id, now) {
            return Ok((id, s));
        }
    }
    if app.tokens.is_empty() {
        let id = app.sign_ins.open(Scope::Admin, now);
        let mut r = see_other(&uri.to_string());
        r.headers_mut()
            .insert(header::SET_COOKIE, session_cookie(&id));
        return Err(Box::new(r));
    }
    Err(Box::new(see_other("/console/login")))
}

/// A POST's session, form and the check of its CSRF token and scope; a refusal is the
/// page to answer (403), and nothing is changed.
fn gate_post(
    app: &App,
    headers: &HeaderMap,
    body: &Bytes,
    needed: Scope,
) -> Result<(String, HashMap<String, String>), Box<Response>> {
    let refuse = |why: &str| {
        Box::new(page(
            StatusCode::FORBIDDEN,
            view::layout(None, "Refused", view::error("forbidden", why)),
        ))
    };
    let cookie = headers.get(header::COOKIE).and_then(|v| v.to_str().ok());
    let Some(id) = cookie_id(cookie) else {
        return Err(refuse("no session: sign in first"));
    };
    let Some(s) = app.sign_ins.get(&id, app.svc.now()) else {
        return Err(refuse("the session has ended: sign in again"));
    };
    let form: HashMap<String, String> = serde_urlencoded::from_bytes(body)
        .map_err(|e| refuse(&format!("the form could not be read: {e}")))?;
    if !form.get("csrf").is_some_and(|t| same_secret(t, &s.csrf)) {
        return Err(refuse(
            "the form's CSRF token is missing or stale: reload the page",
        ));
    }
    if s.scope < needed {
        return Err(refuse(&format!("this action needs the {needed} scope")));
    }
    Ok((id, form))
}

fn viewer<'a>(s: &'a SignIn, app: &App) -> Viewer<'a> {
    Viewer {
        scope: s.scope,
        csrf: &s.csrf,
        flash: s.flash.as_deref(),
        signed_in: !app.tokens.is_empty(),
        catalog: app.svc.catalog_cache().get(),
    }
}

/// A service error's code and message, as the API would write them.
fn code_and_message(e: ExecError) -> (String, String) {
    let api: ApiError = e.into();
    let v = serde_json::to_value(&api).unwrap_or_default();
    let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
    (text("code"), text("message"))
}

/// A service error as the API would write it: its code and message.
fn error_markup(e: ExecError) -> Markup {
    let (code, message) = code_and_message(e);
    view::error(&code, &message)
}

/// What a refused action says: the code and message of its error.
fn refused(what: &str, e: ExecError) -> String {
    let (code, message) = code_and_message(e);
    format!("{what} refused: {code}: {message}")
}

fn error_page(s: &SignIn, app: &App, title: &str, e: ExecError) -> Response {
    let v = viewer(s, app);
    page(
        StatusCode::OK,
        view::layout(Some(&v), title, error_markup(e)),
    )
}

async fn login_page(State(app): Shared) -> Response {
    if app.tokens.is_empty() {
        return see_other("/console");
    }
    page(StatusCode::OK, view::login(None))
}

async fn login(State(app): Shared, body: Bytes) -> Response {
    let form: HashMap<String, String> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
    let scope = form
        .get("token")
        .and_then(|t| app.tokens.scope_of(t.as_bytes()));
    let Some(scope) = scope else {
        return page(
            StatusCode::UNAUTHORIZED,
            view::login(Some("unauthorized: unknown token")),
        );
    };
    let id = app.sign_ins.open(scope, app.svc.now());
    let mut r = see_other("/console");
    r.headers_mut()
        .insert(header::SET_COOKIE, session_cookie(&id));
    r
}

async fn logout(State(app): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let (id, _) = match gate_post(&app, &headers, &body, Scope::Read) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    app.sign_ins.close(&id);
    let mut r = see_other("/console/login");
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "xfer_session=; HttpOnly; SameSite=Strict; Path=/console; Max-Age=0",
        ),
    );
    r
}

async fn overview(State(app): Shared, headers: HeaderMap, uri: Uri) -> Response {
    let (_, s) = match gate(&app, &headers, &uri) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    match app.overview.take(&app.svc).await {
        Ok(stats) => {
            let v = viewer(&s, &app);
            page(
                StatusCode::OK,
                view::layout(
                    Some(&v),
                    "Overview",
                    view::overview(&stats, &app.svc.catalog_cache().get()),
                ),
            )
        }
        Err(e) => error_page(&s, &app, "Overview", e),
    }
}

/// What the overview's chart reads every 2 s: the counters alone (no audit).
async fn stats_json(State(app): Shared, headers: HeaderMap, uri: Uri) -> Response {
    if let Err(r) = gate(&app, &headers, &uri) {
        return *r;
    }
    let m = app.svc.metrics();
    let answered: u64 = m
        .transfers_answered()
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "done" | "canceled" | "held"))
        .map(|(_, n)| n)
        .sum();
    let (count, sum) = m.transfer_latency();
    axum::Json(serde_json::json!({
        "at_ms": app.svc.now().as_ms(),
        "answered": answered,
        "latency_count": count,
        "latency_sum_seconds": sum,
        "in_flight": m.transfers_in_flight(),
    }))
    .into_response()
}

/// A `datetime-local` value (`YYYY-MM-DDTHH:MM[:SS]`, read as UTC) in ms.
fn utc_ms(s: &str) -> Result<u64, String> {
    let long = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    let short = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]");
    let t = time::PrimitiveDateTime::parse(s, long)
        .or_else(|_| time::PrimitiveDateTime::parse(s, short))
        .map_err(|_| format!("{s:?} is not a date and time (YYYY-MM-DDTHH:MM)"))?;
    let ms = t.assume_utc().unix_timestamp_nanos() / 1_000_000;
    u64::try_from(ms).map_err(|_| format!("{s:?} is before 1970"))
}

/// The form's filter, or the field at fault and why.
fn filter_of(f: &ListForm) -> Result<(TransferFilter, usize), (String, String)> {
    fn given(o: &Option<String>) -> Option<&str> {
        o.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }
    let bad = |field: &str, why: String| (field.to_string(), why);
    let state = match given(&f.state) {
        None => None,
        Some(s) => Some(
            serde_json::from_value::<TransferState>(serde_json::json!(s))
                .map_err(|_| bad("state", format!("{s:?} is not a state")))?,
        ),
    };
    let metadata = given(&f.metadata)
        .map(metadata_pair)
        .transpose()
        .map_err(|why| bad("metadata", why))?;
    let limit = match given(&f.limit) {
        None => PAGE,
        Some(l) => match l.parse::<usize>() {
            Ok(n @ 1..=1000) => n,
            _ => return Err(bad("limit", format!("{l:?}: from 1 to 1000"))),
        },
    };
    let filter = TransferFilter {
        state,
        account: given(&f.account)
            .map(|a| AccountId::parse(a, "account"))
            .transpose()
            .map_err(|r| bad("account", r.message.clone()))?,
        asset: given(&f.asset)
            .map(|a| AssetCode::new(a, "asset"))
            .transpose()
            .map_err(|r| bad("asset", r.message.clone()))?,
        id_prefix: given(&f.id_prefix).map(str::to_string),
        metadata,
        created_since: given(&f.since)
            .map(utc_ms)
            .transpose()
            .map_err(|w| bad("since", w))?
            .map(Timestamp),
        created_before: given(&f.until)
            .map(utc_ms)
            .transpose()
            .map_err(|w| bad("until", w))?
            .map(Timestamp),
    };
    Ok((filter, limit))
}

async fn transfers(
    State(app): Shared,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(q): RawQuery,
) -> Response {
    let (_, s) = match gate(&app, &headers, &uri) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let v = viewer(&s, &app);
    let raw = q.unwrap_or_default();
    let form: ListForm = match serde_urlencoded::from_str(&raw) {
        Ok(f) => f,
        Err(e) => {
            let err = view::error("invalid_query", &e.to_string());
            let body = view::transfers(
                &ListForm::default(),
                &[],
                &crate::catalog::Catalog::default(),
                None,
                Some(err),
            );
            return page(
                StatusCode::BAD_REQUEST,
                view::layout(Some(&v), "Transfers", body),
            );
        }
    };
    let shown = |rows: &[xfer_core::TransferRecord], next: Option<String>, err: Option<Markup>| {
        let status = if err.is_some() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        };
        page(
            status,
            view::layout(
                Some(&v),
                "Transfers",
                view::transfers(&form, rows, &v.catalog, next, err),
            ),
        )
    };
    let (filter, limit) = match filter_of(&form) {
        Ok(x) => x,
        Err((field, why)) => {
            return shown(
                &[],
                None,
                Some(view::error("invalid_query", &format!("{field}: {why}"))),
            )
        }
    };
    let shards = app.svc.cluster().shards().len();
    let from = match form.before.as_deref().filter(|b| !b.is_empty()) {
        None => ListCursor::newest(&filter, shards),
        Some(c) => match ListCursor::parse(c, &filter, shards) {
            Ok(c) => c,
            Err(why) => {
                return shown(
                    &[],
                    None,
                    Some(view::error("invalid_query", &format!("before: {why}"))),
                )
            }
        },
    };
    match app.svc.list_transfers(&filter, from, limit).await {
        Ok(p) => {
            let next = p.next.map(|c| {
                let mut pairs: Vec<(String, String)> =
                    serde_urlencoded::from_str(&raw).unwrap_or_default();
                pairs.retain(|(k, _)| k != "before");
                pairs.push(("before".into(), c.to_string()));
                format!(
                    "/console/transfers?{}",
                    serde_urlencoded::to_string(&pairs).unwrap_or_default()
                )
            });
            shown(&p.transfers, next, None)
        }
        Err(ListError::Unsupported(why)) => {
            shown(&[], None, Some(view::error("not_supported", &why)))
        }
        Err(ListError::Exec(e)) => shown(&[], None, Some(error_markup(e))),
    }
}

/// A step of a transfer's timeline, as the page shows it.
pub struct Step {
    /// When (ms).
    pub at: u64,
    /// The state it reached.
    pub state: String,
    /// Who wrote it.
    pub by: Option<String>,
    /// What else it says (a reason, a refund).
    pub note: Option<String>,
}

/// `r`'s timeline as its record keeps it (`xfer_core::Timeline`); a record written before
/// timelines shows its acceptance and where it is now.
pub fn timeline(r: &xfer_core::TransferRecord) -> Vec<Step> {
    let kept = r.timeline.steps();
    if kept.is_empty() {
        let mut steps = vec![Step {
            at: r.created_at.as_ms(),
            state: TransferState::Initial.to_string(),
            by: None,
            note: Some("accepted".into()),
        }];
        if r.state != TransferState::Initial {
            steps.push(Step {
                at: r.updated_at.as_ms(),
                state: r.state.to_string(),
                by: r.owner.as_ref().map(|o| format!("{o} (epoch {})", r.epoch)),
                note: r.reason.as_ref().map(|x| x.to_string()),
            });
        }
        return steps;
    }
    kept.iter()
        .enumerate()
        .map(|(i, s)| Step {
            at: s.at.as_ms(),
            state: s.state.to_string(),
            by: s.owner.as_ref().map(|o| format!("{o} (epoch {})", s.epoch)),
            note: s
                .reason
                .as_ref()
                .map(|x| x.to_string())
                .or_else(|| s.refund.as_ref().map(|x| format!("refunded by {x}")))
                .or_else(|| (i == 0).then(|| "accepted".to_string())),
        })
        .collect()
}

async fn transfer(
    State(app): Shared,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let (_, s) = match gate(&app, &headers, &uri) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let found = async {
        let id = TransferId::parse(&id, "id").map_err(ExecError::from)?;
        let r = app.svc.get_transfer(&id).await?;
        let mut intents = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for p in r.spec.postings.iter() {
            for a in [&p.from, &p.to] {
                if seen.insert(a.clone()) {
                    let state = match app.svc.get_account(a).await {
                        Ok(acc) => acc.intents.get(&r.spec.id).map(|i| i.state),
                        Err(_) => None,
                    };
                    intents.push((a.as_str().to_string(), state));
                }
            }
        }
        // What its refunds not canceled take back (no read without links): the refund
        // form offers the rest.
        let taken = app.svc.refunded_live(&r).await?;
        Ok::<_, ExecError>((r, intents, taken))
    }
    .await;
    match found {
        Ok((r, intents, taken)) => {
            let v = viewer(&s, &app);
            let refund_id = format!("r-{}", random_hex(12));
            page(
                StatusCode::OK,
                view::layout(
                    Some(&v),
                    &format!("Transfer {}", r.spec.id.as_str()),
                    view::transfer(&v, &r, &intents, &taken, &refund_id),
                ),
            )
        }
        Err(e) => error_page(&s, &app, "Transfer", e),
    }
}

/// What an action answered, for the next page: the transfer's new state, or the error.
fn outcome(what: &str, result: Result<xfer_core::TransferRecord, ExecError>) -> String {
    match result {
        Ok(r) => format!("{what}: {} is {}", r.spec.id.as_str(), r.state),
        Err(e) => refused(what, e),
    }
}

async fn transfer_action(
    State(app): Shared,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (sid, form) = match gate_post(&app, &headers, &body, Scope::Admin) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let Ok(tid) = TransferId::parse(&id, "id") else {
        return see_other("/console/transfers");
    };
    let back = format!("/console/transfers/{}", tid.as_str());
    let act = |a: Action| {
        let app = app.clone();
        let tid = tid.clone();
        async move { app.svc.act(tid, a).await.map(|x| x.record().clone()) }
    };
    let (text, to) = match action.as_str() {
        "redrive" => (outcome("Re-drive", act(Action::Redrive).await), back),
        "capture" => (outcome("Capture", act(Action::Capture).await), back),
        "void" => (outcome("Void", act(Action::Void).await), back),
        "extend" => {
            let minutes = form
                .get("minutes")
                .and_then(|m| m.trim().parse::<u64>().ok());
            match minutes {
                Some(m) if m > 0 => {
                    let to = crate::hold::NewExpiry::In(m.saturating_mul(60_000));
                    (
                        outcome("Extend", app.svc.extend(tid.clone(), to).await),
                        back,
                    )
                }
                _ => (
                    "Extend not sent: give the minutes from now, a whole number".to_string(),
                    back,
                ),
            }
        }
        "refund" => refund_from_form(&app, &tid, &form, back).await,
        _ => {
            return page(
                StatusCode::NOT_FOUND,
                view::layout(
                    None,
                    "Not found",
                    view::error("route_not_found", "no such action"),
                ),
            )
        }
    };
    app.sign_ins.flash(&sid, text);
    see_other(&to)
}

async fn stuck(State(app): Shared, headers: HeaderMap, uri: Uri) -> Response {
    let (_, s) = match gate(&app, &headers, &uri) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    match app.svc.stuck(200).await {
        Ok(records) => {
            let now = app.svc.now();
            let rows: Vec<_> = records
                .into_iter()
                .map(|r| {
                    let why = Service::why_stuck(&r, now);
                    (r, why)
                })
                .collect();
            let v = viewer(&s, &app);
            page(
                StatusCode::OK,
                view::layout(Some(&v), "Stuck", view::stuck(&v, &rows)),
            )
        }
        Err(e) => error_page(&s, &app, "Stuck", e),
    }
}

async fn canceled(
    State(app): Shared,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(q): RawQuery,
) -> Response {
    let (_, s) = match gate(&app, &headers, &uri) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let q: HashMap<String, String> =
        serde_urlencoded::from_str(&q.unwrap_or_default()).unwrap_or_default();
    let after = q
        .get("after")
        .and_then(|a| TransferId::parse(a, "after").ok());
    match app.svc.canceled(after, PAGE).await {
        Ok(p) => {
            let next = p
                .next
                .map(|c| format!("/console/canceled?after={}", c.as_str()));
            let v = viewer(&s, &app);
            page(
                StatusCode::OK,
                view::layout(
                    Some(&v),
                    "Canceled",
                    view::canceled(&p.items, next, &v.catalog),
                ),
            )
        }
        Err(e) => error_page(&s, &app, "Canceled", e),
    }
}

async fn accounts(
    State(app): Shared,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(q): RawQuery,
) -> Response {
    let (_, s) = match gate(&app, &headers, &uri) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let q: HashMap<String, String> =
        serde_urlencoded::from_str(&q.unwrap_or_default()).unwrap_or_default();
    let prefix = q
        .get("prefix")
        .map(|p| p.trim().to_string())
        .unwrap_or_default();
    // Ids sort as bytes: the accounts with a prefix start right before it.
    let start = q
        .get("after")
        .cloned()
        .or_else(|| (!prefix.is_empty()).then(|| prefix.clone()));
    let after = start
        .as_deref()
        .and_then(|a| AccountId::parse(a, "after").ok());
    let from_prefix = !q.contains_key("after") && !prefix.is_empty();
    let found = async {
        let mut rows = Vec::new();
        if let (true, Some(a)) = (from_prefix, &after) {
            // The prefix itself may be an account.
            if let Ok(acc) = app.svc.get_account(a).await {
                rows.push(acc);
            }
        }
        let page = app.svc.list_accounts(after.clone(), PAGE).await?;
        let mut next = page.next.map(|n| n.as_str().to_string());
        for a in page.items {
            if a.id.as_str().starts_with(&prefix) {
                rows.push(a);
            } else {
                next = None;
                break;
            }
        }
        Ok::<_, ExecError>((rows, next))
    }
    .await;
    match found {
        Ok((rows, next)) => {
            let next = next.map(|n| {
                format!(
                    "/console/accounts?{}",
                    serde_urlencoded::to_string([
                        ("prefix", prefix.as_str()),
                        ("after", n.as_str())
                    ])
                    .unwrap_or_default()
                )
            });
            let v = viewer(&s, &app);
            page(
                StatusCode::OK,
                view::layout(
                    Some(&v),
                    "Accounts",
                    view::accounts(&prefix, &rows, next, &v.catalog),
                ),
            )
        }
        Err(e) => error_page(&s, &app, "Accounts", e),
    }
}

async fn account(
    State(app): Shared,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let (_, s) = match gate(&app, &headers, &uri) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let q: HashMap<String, String> =
        serde_urlencoded::from_str(&q.unwrap_or_default()).unwrap_or_default();
    let before = q.get("before").and_then(|b| b.parse::<u64>().ok());
    let found = async {
        let id = AccountId::parse(&id, "id").map_err(ExecError::from)?;
        let a = app.svc.get_account(&id).await?;
        let h = app.svc.history(&id, before, PAGE, None).await?;
        let m = app.svc.metadata_of(std::slice::from_ref(&a)).await?;
        Ok::<_, ExecError>((a, h, m.into_values().next().unwrap_or_default()))
    }
    .await;
    match found {
        Ok((a, h, labels)) => {
            let next = h
                .next
                .map(|n| format!("/console/accounts/{}?before={n}", a.id.as_str()));
            let v = viewer(&s, &app);
            page(
                StatusCode::OK,
                view::layout(
                    Some(&v),
                    &format!("Account {}", a.id.as_str()),
                    view::account(&v, &a, &labels, &h.items, next),
                ),
            )
        }
        Err(e) => error_page(&s, &app, "Account", e),
    }
}

async fn account_action(
    State(app): Shared,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (sid, form) = match gate_post(&app, &headers, &body, Scope::Admin) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let Ok(aid) = AccountId::parse(&id, "id") else {
        return see_other("/console/accounts");
    };
    let back = format!("/console/accounts/{}", aid.as_str());
    let said = |what: &str, r: Result<xfer_core::Account, ExecError>| match r {
        Ok(a) => format!(
            "{what}: {} is {}",
            a.id.as_str(),
            format!("{:?}", a.status).to_lowercase()
        ),
        Err(e) => refused(what, e),
    };
    let text = match action.as_str() {
        "close" if form.get("confirm").map(String::as_str) == Some("yes") => {
            said("Close", app.svc.close_account(aid).await)
        }
        "close" => "Close not sent: tick the confirmation first".to_string(),
        "lower_bound" => {
            let text = form.get("lower_bound").map(|s| s.trim()).unwrap_or("");
            // Read in the unit the form was drawn in, not the catalog's of now.
            let decimal = form.get("unit").map(String::as_str) == Some("decimal");
            let bound = match app.svc.get_account(&aid).await {
                Ok(a) if decimal => match app.svc.catalog_for(std::iter::once(&a.asset)).await {
                    Ok(catalog) => {
                        let v = serde_json::Value::from(text);
                        let asset = Some((&a.asset, &*catalog));
                        crate::wire::lower_bound_of(&v, asset, "lower_bound")
                            .map_err(|e| format!("Lower bound refused: {}: {}", e.code, e.message))
                    }
                    Err(e) => Err(refused("Lower bound", e)),
                },
                Ok(_) if text == "unbounded" => Ok(LowerBound::Unbounded),
                Ok(_) => text.parse::<i64>().map(LowerBound::Bounded).map_err(|_| {
                    format!(
                        "Lower bound refused: wrong_type: {text:?} is not a whole number of \
                         minor units or \"unbounded\""
                    )
                }),
                Err(e) => Err(refused("Lower bound", e)),
            };
            match bound {
                Ok(b) => said("Lower bound", app.svc.set_lower_bound(aid, b).await),
                Err(text) => text,
            }
        }
        _ => {
            return page(
                StatusCode::NOT_FOUND,
                view::layout(
                    None,
                    "Not found",
                    view::error("route_not_found", "no such action"),
                ),
            )
        }
    };
    app.sign_ins.flash(&sid, text);
    see_other(&back)
}

/// The refund form sent: confirmed, with its refund id (made when the page was rendered,
/// so that a double submit refunds once) and amounts. The flash text and where to go: the
/// refund when one was made, else `back`.
async fn refund_from_form(
    app: &App,
    original: &TransferId,
    form: &HashMap<String, String>,
    back: String,
) -> (String, String) {
    if form.get("confirm").map(String::as_str) != Some("yes") {
        return ("Refund not sent: tick the confirmation first".into(), back);
    }
    // Amounts are read in the scales of the original's assets, posting by posting.
    let record = match app.svc.get_transfer(original).await {
        Ok(r) => r,
        Err(e) => return (refused("Refund", e), back),
    };
    let assets: Vec<xfer_core::AssetCode> = record
        .spec
        .postings
        .iter()
        .map(|p| p.asset.clone())
        .collect();
    let catalog = match app.svc.catalog_for(assets.iter()).await {
        Ok(c) => c,
        Err(e) => return (refused("Refund", e), back),
    };
    let amounts = match refund_amounts(form, &assets, &catalog) {
        Ok(amounts) => amounts,
        Err(text) => return (text, back),
    };
    let Some(Ok(rid)) = form
        .get("refund_id")
        .map(|r| TransferId::parse(r, "refund_id"))
    else {
        return ("Refund refused: the form has no refund id".into(), back);
    };
    let done = app
        .svc
        .refund(&record, rid.clone(), amounts, String::new())
        .await
        .map(|x| x.record().clone());
    let to = match done {
        Ok(_) => format!("/console/transfers/{}", rid.as_str()),
        Err(_) => back,
    };
    (outcome("Refund", done), to)
}

/// The refund form's amounts, one field `amount{i}` per posting, each in its asset's
/// declared scale (`0.30`; minor units if it is not declared): all blank refunds what is
/// left ([`RefundAmounts::Left`]); otherwise every posting needs one.
fn refund_amounts(
    form: &HashMap<String, String>,
    assets: &[xfer_core::AssetCode],
    catalog: &crate::catalog::Catalog,
) -> Result<crate::refund::RefundAmounts, String> {
    use crate::refund::RefundAmounts;
    let mut given = Vec::new();
    for i in 0.. {
        match form.get(&format!("amount{i}")) {
            Some(text) => given.push(text.trim()),
            None => break,
        }
    }
    if given.iter().all(|t| t.is_empty()) {
        return Ok(RefundAmounts::Left);
    }
    let mut amounts = Vec::new();
    for (i, text) in given.iter().enumerate() {
        let field = format!("amounts[{i}]");
        // Read in the unit the field was drawn in (`unit{i}`), not the catalog's of now.
        let decimal = form.get(&format!("unit{i}")).map(String::as_str) == Some("decimal");
        let read = match assets.get(i) {
            Some(asset) if decimal => catalog.parse_amount(asset, text, &field),
            _ => text
                .parse::<u64>()
                .map_err(|_| {
                    xfer_core::Rejection::new(
                        xfer_core::Code::AmountIsNotANumber,
                        &field,
                        format!("{text:?}: a whole number of minor units"),
                    )
                })
                .and_then(|units| xfer_core::Amount::new(units, &field)),
        };
        let amount = read.map_err(|r| {
            if text.is_empty() {
                format!("Refund not sent: posting {} needs an amount", i + 1)
            } else {
                format!("Refund refused: {}: {}", r.code, r.message)
            }
        })?;
        amounts.push(amount);
    }
    Ok(RefundAmounts::Each(amounts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::refund::RefundAmounts;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A field is read in the unit the form was drawn in, whatever the catalog holds when
    /// it comes back: "3000" drawn as minor units stays 3000, never 3000.00 USD.
    #[test]
    fn refund_amounts_are_read_in_the_unit_their_form_was_drawn_in() {
        let usd = xfer_core::AssetCode::new("USD", "asset").unwrap();
        let declared = Catalog::new([xfer_core::Asset::new("USD", 2).unwrap()]);
        let units = |r: Result<RefundAmounts, String>| match r {
            Ok(RefundAmounts::Each(a)) => a.iter().map(|x| x.units()).collect::<Vec<_>>(),
            other => panic!("{:?}", other.map(|_| ())),
        };
        let minor = form(&[("amount0", "3000"), ("unit0", "minor")]);
        let read = refund_amounts(&minor, std::slice::from_ref(&usd), &declared);
        assert_eq!(units(read), [3000]);
        let decimal = form(&[("amount0", "0.30"), ("unit0", "decimal")]);
        let read = refund_amounts(&decimal, std::slice::from_ref(&usd), &declared);
        assert_eq!(units(read), [30]);
        // Drawn as a decimal, read where the scale is unknown: refused, not guessed.
        let read = refund_amounts(&decimal, std::slice::from_ref(&usd), &Catalog::default());
        assert!(read.is_err_and(|t| t.contains("asset_not_declared")));
        let blank = form(&[("amount0", ""), ("unit0", "decimal")]);
        let read = refund_amounts(&blank, std::slice::from_ref(&usd), &declared);
        assert!(matches!(read, Ok(RefundAmounts::Left)));
    }
}

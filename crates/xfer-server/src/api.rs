//! The HTTP API: the router built from [`ROUTES`], the guard that checks each route's scope,
//! and the handlers.
//!
//! Bodies are read and decoded here (not by axum's extractors) so that every failure,
//! however early, is an [`ApiError`] with its code and field. `api/webhooks.rs` holds the
//! handlers of `/v1/webhooks`.

mod webhooks;

use crate::answer::Answer;
use crate::auth::{Scope, Tokens};
use crate::error::{decode, ApiCode, ApiError};
use crate::feed::{Cursor, FeedEvent, FeedRead};
use crate::metrics::Stopwatch;
pub use crate::routes::{Route, ROUTES};
use crate::service::{Action, Service};
use crate::sink::webhook::Webhooks;
use crate::stats::Overview;
use crate::transfer_list::{metadata_pair, ListCursor, ListError, TransferFilter};
use crate::wire::{
    self, AccountCreate, AccountOut, AssetIn, AssetOut, BatchIn, BatchItemOut, CaptureIn, EventOut,
    ExtendIn, LowerBoundChange, MetadataChange, PostingAmounts, RefundIn, TransferIn, TransferOut,
    BATCH_MAX,
};
use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, Path, RawQuery, Request, State};
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::sync::Arc;
use xfer_core::{AssetCode, LowerBound, Timestamp, TransferState};
use xfer_engine::{Sleeper, TokioSleeper};

/// What every handler shares.
pub struct App {
    /// The service.
    pub svc: Arc<Service>,
    /// The webhook endpoints and their deliveries.
    pub webhooks: Arc<Webhooks>,
    /// Who may call.
    pub tokens: Tokens,
    /// The largest body read.
    pub body_limit: usize,
    /// Turns true when the server stops: long answers (the event stream) end.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// The overview's shard kinds and last audit.
    pub overview: Overview,
    /// The console's signed-in browsers.
    pub sign_ins: crate::console::sign_in::SignIns,
}

type Shared = State<Arc<App>>;
/// What a handler answers: a response, or an error in the documented shape.
type Handled = Result<Response, ApiError>;

/// The router over `app`: exactly the endpoints of [`ROUTES`], each guarded by its scope.
pub fn router(app: Arc<App>) -> Router {
    ROUTES
        .iter()
        .fold(Router::new(), |r, route| {
            r.route(route.path, handler(route.method, route.path))
        })
        .route_layer(middleware::from_fn_with_state(app.clone(), guard))
        .merge(crate::console::router())
        .fallback(|| async {
            ApiError::api(
                ApiCode::RouteNotFound,
                None,
                "no such endpoint; see /v1/openapi.json",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::api(ApiCode::MethodNotAllowed, None, "method not allowed here")
        })
        .layer(middleware::from_fn_with_state(app.clone(), whole_body))
        .with_state(app)
}

/// The handler of one entry of [`ROUTES`]; the router is built from the table, so an
/// endpoint cannot be served without its scope.
fn handler(method: &str, path: &str) -> axum::routing::MethodRouter<Arc<App>> {
    match (method, path) {
        ("GET", "/healthz") => get(healthz),
        ("GET", "/readyz") => get(readyz),
        ("GET", "/metrics") => get(metrics),
        ("GET", "/v1/openapi.json") => get(openapi),
        ("POST", "/v1/assets") => post(declare_asset),
        ("GET", "/v1/assets") => get(list_assets),
        ("GET", "/v1/assets/{code}") => get(get_asset),
        ("POST", "/v1/accounts") => post(create_account),
        ("GET", "/v1/accounts") => get(list_accounts),
        ("GET", "/v1/accounts/{id}") => get(get_account),
        ("POST", "/v1/accounts/{id}/close") => post(close_account),
        ("PUT", "/v1/accounts/{id}/lower_bound") => put(set_lower_bound),
        ("PUT", "/v1/accounts/{id}/metadata") => put(set_account_metadata),
        ("GET", "/v1/accounts/{id}/transfers") => get(account_transfers),
        ("POST", "/v1/transfers") => post(submit),
        ("GET", "/v1/transfers") => get(list_transfers),
        ("POST", "/v1/transfers/batch") => post(submit_batch),
        ("GET", "/v1/transfers/{id}") => get(get_transfer),
        ("POST", "/v1/transfers/{id}/capture") => post(capture),
        ("POST", "/v1/transfers/{id}/void") => post(void),
        ("POST", "/v1/transfers/{id}/extend") => post(extend),
        ("POST", "/v1/transfers/{id}/refund") => post(refund),
        ("POST", "/v1/transfers/{id}/redrive") => post(redrive),
        ("GET", "/v1/events") => get(events),
        ("GET", "/v1/events/stream") => get(events_stream),
        ("GET", "/v1/admin/stuck") => get(stuck),
        ("GET", "/v1/admin/canceled") => get(canceled),
        ("GET", "/v1/audit") => get(audit),
        ("GET", "/v1/stats") => get(stats),
        ("POST", "/v1/webhooks") => post(webhooks::create),
        ("GET", "/v1/webhooks") => get(webhooks::list),
        ("GET", "/v1/webhooks/{id}") => get(webhooks::get),
        ("DELETE", "/v1/webhooks/{id}") => delete(webhooks::delete),
        ("GET", "/v1/webhooks/{id}/dead_letters") => get(webhooks::dead_letters),
        ("POST", "/v1/webhooks/{id}/dead_letters/{event_id}/redeliver") => {
            post(webhooks::redeliver)
        }
        _ => panic!("{method} {path} is in ROUTES without a handler"),
    }
}

/// Reads every request's body (up to the limit) before anything answers, so that a request
/// refused early (auth, route, content type, query) leaves its connection ready for the
/// next request instead of broken by an unread body; a body over the limit is refused with
/// `Connection: close`, unread.
async fn whole_body(State(app): Shared, req: Request, next: Next) -> Response {
    let too_large = || {
        let mut r = ApiError::api(
            ApiCode::BodyTooLarge,
            None,
            format!("the body is larger than {} bytes", app.body_limit),
        )
        .into_response();
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > app.body_limit as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, app.body_limit).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(_) => too_large(),
    }
}

/// The scope `method path` needs: an endpoint served but missing from [`ROUTES`] is
/// refused, never open.
fn scope_of(method: &str, path: &str) -> Result<Option<Scope>, ApiError> {
    ROUTES
        .iter()
        .find(|r| r.path == path && r.method == method)
        .map(|r| r.scope)
        .ok_or_else(|| {
            ApiError::api(
                ApiCode::Forbidden,
                None,
                format!("{method} {path} has no scope in the server's route table: refused"),
            )
        })
}

/// A route's `{id}`, refused in the documented shape when it is not text.
struct IdParam(String);

impl<S: Send + Sync> FromRequestParts<S> for IdParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) => Ok(IdParam(id)),
            Err(e) => Err(ApiError::api(
                ApiCode::InvalidPath,
                Some("id"),
                e.body_text(),
            )),
        }
    }
}

/// Checks the token against the route's scope, then measures and logs the request.
async fn guard(State(app): Shared, matched: MatchedPath, req: Request, next: Next) -> Response {
    let watch = Stopwatch::start();
    let path = matched.as_str().to_string();
    let method = req.method().as_str().to_string();
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let allowed = scope_of(&method, &path)
        .and_then(|needed| needed.map_or(Ok(()), |s| app.tokens.check(header, s)));
    let response = match allowed {
        Err(e) => e.into_response(),
        Ok(()) => next.run(req).await,
    };
    let status = response.status().as_u16();
    app.svc
        .metrics()
        .request(&path, &method, status, watch.seconds());
    tracing::debug!(%method, route = %path, status, ms = watch.seconds() * 1e3, "request");
    response
}

/// Reads a JSON body of at most the configured size.
async fn body<T: DeserializeOwned>(
    app: &App,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    decode_json(headers, &bytes(app, body).await?)
}

/// The request's body, whole: at most the configured size ([`whole_body`] read it already).
async fn bytes(app: &App, body: Body) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, app.body_limit)
        .await
        .map_err(|_| {
            ApiError::api(
                ApiCode::BodyTooLarge,
                None,
                format!("the body is larger than {} bytes", app.body_limit),
            )
        })
}

/// Decodes `bytes` as JSON into `T`, if the content type (when given) is JSON.
fn decode_json<T: DeserializeOwned>(headers: &HeaderMap, bytes: &[u8]) -> Result<T, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        if !ct.starts_with("application/json") {
            return Err(ApiError::api(
                ApiCode::UnsupportedMediaType,
                Some("content-type"),
                format!("{ct:?}: send Content-Type: application/json"),
            ));
        }
    }
    decode(bytes)
}

/// Decodes the query string into `T`; a refusal names the parameter at fault.
fn query<T: DeserializeOwned + Default>(raw: Option<String>) -> Result<T, ApiError> {
    let Some(q) = raw else {
        return Ok(T::default());
    };
    serde_urlencoded::from_str(&q).map_err(|e| {
        // serde_urlencoded's errors name no parameter: the first one refused on its own is.
        let pairs = serde_urlencoded::from_str::<Vec<(String, String)>>(&q).unwrap_or_default();
        let field = pairs
            .into_iter()
            .map(|(k, v)| (k.clone(), [(k, v)]))
            .find(|(_, one)| {
                let one = serde_urlencoded::to_string(one).unwrap_or_default();
                serde_urlencoded::from_str::<T>(&one).is_err()
            });
        ApiError::api(
            ApiCode::InvalidQuery,
            field.as_ref().map(|(k, _)| k.as_str()),
            format!("{q:?}: {e}"),
        )
    })
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitQuery {
    wait: Option<bool>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    after: Option<String>,
    limit: Option<usize>,
}

/// An account's history: pages go backwards (`before` is the last page's `next_before`),
/// optionally only the transfers in one state.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    after: Option<String>,
    before: Option<u64>,
    limit: Option<usize>,
    state: Option<TransferState>,
}

const LIMIT_DEFAULT: usize = 100;
const LIMIT_MAX: usize = 1_000;

impl PageQuery {
    fn limit(&self) -> Result<usize, ApiError> {
        match self.limit.unwrap_or(LIMIT_DEFAULT) {
            0 => Err(ApiError::api(
                ApiCode::InvalidQuery,
                Some("limit"),
                "must be at least 1",
            )),
            n if n > LIMIT_MAX => Err(ApiError::api(
                ApiCode::InvalidQuery,
                Some("limit"),
                format!("{n} is more than {LIMIT_MAX}"),
            )),
            n => Ok(n),
        }
    }
}

fn json_status(status: u16, value: impl serde::Serialize) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    (status, Json(value)).into_response()
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(app): Shared) -> Response {
    if app.svc.is_ready() {
        Json(json!({"status": "ready"})).into_response()
    } else {
        ApiError::api(
            ApiCode::NotReady,
            None,
            "recovering what the last run left; try again shortly",
        )
        .into_response()
    }
}

async fn metrics(State(app): Shared) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.svc.metrics().render(),
    )
        .into_response()
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}

fn account_out(app: &App, a: &xfer_core::Account) -> AccountOut {
    let catalog = app.svc.catalog_cache().get();
    AccountOut::new(a, app.svc.shard_of(&a.id, &a.asset), &catalog)
}

/// A transfer as answered: amounts also in their declared scale.
fn transfer_out(app: &App, r: &xfer_core::TransferRecord) -> TransferOut {
    TransferOut::from(r).with_decimals(&app.svc.catalog_cache().get())
}

/// How a request about one transfer was answered, as [`transfer_out`] shows it.
fn answer_out(app: &App, a: &Answer) -> TransferOut {
    transfer_out(app, a.record())
}

async fn declare_asset(State(app): Shared, headers: HeaderMap, b: Body) -> Handled {
    let req: AssetIn = body(&app, &headers, b).await?;
    let asset = app.svc.declare_asset(req.to_asset()?).await?;
    Ok(json_status(201, AssetOut::from(&asset)))
}

async fn list_assets(State(app): Shared) -> Handled {
    let catalog = app.svc.read_assets().await?;
    let assets: Vec<AssetOut> = catalog.iter().map(AssetOut::from).collect();
    Ok(Json(json!({ "assets": assets })).into_response())
}

async fn get_asset(State(app): Shared, IdParam(code): IdParam) -> Handled {
    let code = AssetCode::new(&code, "code")?;
    let catalog = app.svc.catalog_for(std::iter::once(&code)).await?;
    let asset = catalog.require(&code, "code")?;
    Ok(Json(AssetOut::from(asset)).into_response())
}

/// Account `a` as answered, with its metadata read from its shard.
async fn account_answer(app: &App, a: &xfer_core::Account) -> Result<AccountOut, ApiError> {
    let mut found = app.svc.metadata_of(std::slice::from_ref(a)).await?;
    let metadata = found.remove(&a.id).unwrap_or_default();
    Ok(account_out(app, a).with_metadata(metadata))
}

async fn create_account(State(app): Shared, headers: HeaderMap, b: Body) -> Handled {
    let req: AccountCreate = body(&app, &headers, b).await?;
    let id = wire::account_id(&req.id, "id")?;
    let asset = AssetCode::new(&req.asset, "asset")?;
    let catalog = app.svc.catalog_for(std::iter::once(&asset)).await?;
    let lower_bound = match &req.lower_bound {
        None => LowerBound::default(),
        Some(v) => wire::lower_bound_of(v, Some((&asset, &catalog)), "lower_bound")?,
    };
    let metadata = req
        .metadata
        .as_ref()
        .map(|m| wire::account_metadata(m, "metadata"))
        .transpose()?;
    let a = app.svc.create_account(id, asset, lower_bound).await?;
    // Given again with a create that answers the account, the metadata replaces what it had.
    let out = match metadata {
        Some(m) => {
            app.svc.set_account_metadata(&a, &m).await?;
            account_out(&app, &a).with_metadata(m)
        }
        None => account_answer(&app, &a).await?,
    };
    Ok(json_status(201, out))
}

async fn get_account(State(app): Shared, IdParam(id): IdParam) -> Handled {
    let id = wire::account_id(&id, "id")?;
    let a = app.svc.get_account(&id).await?;
    Ok(Json(account_answer(&app, &a).await?).into_response())
}

async fn set_account_metadata(
    State(app): Shared,
    IdParam(id): IdParam,
    headers: HeaderMap,
    b: Body,
) -> Handled {
    let id = wire::account_id(&id, "id")?;
    let req: MetadataChange = body(&app, &headers, b).await?;
    let metadata = wire::account_metadata(&req.metadata, "metadata")?;
    let a = app.svc.get_account(&id).await?;
    app.svc.set_account_metadata(&a, &metadata).await?;
    Ok(Json(account_out(&app, &a).with_metadata(metadata)).into_response())
}

/// `GET /v1/accounts`: a page in id order, or with `metadata=key=value` only the accounts
/// whose metadata holds it.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountsQuery {
    after: Option<String>,
    limit: Option<usize>,
    metadata: Option<String>,
}

async fn list_accounts(State(app): Shared, RawQuery(q): RawQuery) -> Handled {
    let q: AccountsQuery = query(q)?;
    let limit = PageQuery {
        limit: q.limit,
        ..PageQuery::default()
    }
    .limit()?;
    let after = q
        .after
        .as_deref()
        .map(|a| wire::account_id(a, "after"))
        .transpose()?;
    let (accounts, next) = match q.metadata.as_deref() {
        Some(pair) => {
            let (k, v) = wire::metadata_filter(pair)
                .map_err(|why| ApiError::api(ApiCode::InvalidQuery, Some("metadata"), why))?;
            let page = app
                .svc
                .accounts_with_metadata((&k, &v), after, limit)
                .await?;
            let accounts: Vec<AccountOut> = page
                .items
                .into_iter()
                .map(|(a, m)| account_out(&app, &a).with_metadata(m))
                .collect();
            (accounts, page.next)
        }
        None => {
            let page = app.svc.list_accounts(after, limit).await?;
            let mut found = app.svc.metadata_of(&page.items).await?;
            let accounts: Vec<AccountOut> = page
                .items
                .iter()
                .map(|a| {
                    let m = found.remove(&a.id).unwrap_or_default();
                    account_out(&app, a).with_metadata(m)
                })
                .collect();
            (accounts, page.next)
        }
    };
    let next = next.map(|a| a.to_string());
    Ok(Json(json!({"accounts": accounts, "next_after": next})).into_response())
}

async fn close_account(State(app): Shared, IdParam(id): IdParam) -> Handled {
    let id = wire::account_id(&id, "id")?;
    let a = app.svc.close_account(id).await?;
    Ok(Json(account_answer(&app, &a).await?).into_response())
}

async fn set_lower_bound(
    State(app): Shared,
    IdParam(id): IdParam,
    headers: HeaderMap,
    b: Body,
) -> Handled {
    let id = wire::account_id(&id, "id")?;
    let req: LowerBoundChange = body(&app, &headers, b).await?;
    // A decimal bound is read in the account's asset's scale.
    let lower_bound = if req.lower_bound.is_string() && req.lower_bound != "unbounded" {
        let a = app.svc.get_account(&id).await?;
        let catalog = app.svc.catalog_for(std::iter::once(&a.asset)).await?;
        wire::lower_bound_of(&req.lower_bound, Some((&a.asset, &catalog)), "lower_bound")?
    } else {
        wire::lower_bound(&req.lower_bound, "lower_bound")?
    };
    let a = app.svc.set_lower_bound(id, lower_bound).await?;
    Ok(Json(account_answer(&app, &a).await?).into_response())
}

async fn account_transfers(
    State(app): Shared,
    IdParam(id): IdParam,
    RawQuery(q): RawQuery,
) -> Handled {
    let id = wire::account_id(&id, "id")?;
    let q: HistoryQuery = query(q)?;
    if q.after.is_some() {
        return Err(ApiError::api(
            ApiCode::InvalidQuery,
            Some("after"),
            "history pages go backwards: use `before` (the `next_before` of the last page)",
        ));
    }
    let limit = PageQuery {
        limit: q.limit,
        ..PageQuery::default()
    }
    .limit()?;
    let page = app.svc.history(&id, q.before, limit, q.state).await?;
    let transfers: Vec<TransferOut> = page.items.iter().map(|r| transfer_out(&app, r)).collect();
    Ok(Json(json!({"transfers": transfers, "next_before": page.next})).into_response())
}

/// The cursor `s` names for this server's shards (absent: the start); a bad one is an
/// error on `field`.
fn cursor(app: &App, s: Option<&str>, field: &str) -> Result<Cursor, ApiError> {
    let shards = app.svc.cluster().shards().len();
    match s {
        None => Ok(Cursor::start(shards)),
        Some(s) => Cursor::parse(s, shards)
            .map_err(|why| ApiError::api(ApiCode::InvalidQuery, Some(field), why)),
    }
}

/// A page of the feed, or the error a read that found none answers, on `field`.
async fn feed_page(
    app: &App,
    after: &Cursor,
    limit: usize,
    field: &str,
) -> Result<Vec<FeedEvent>, ApiError> {
    match app.svc.events(after, limit).await? {
        FeedRead::Page(events) => Ok(events),
        FeedRead::Behind {
            shard,
            dropped_through,
        } => Err(ApiError::api(
            ApiCode::CursorExpired,
            Some(field),
            format!(
                "shard {shard} no longer keeps its events through {dropped_through}: \
                 start again from the beginning"
            ),
        )),
        FeedRead::Unsupported(why) => Err(ApiError::api(ApiCode::NotSupported, None, why)),
    }
}

/// A page of the change feed after the cursor `after` (absent: from the start).
async fn events(State(app): Shared, RawQuery(q): RawQuery) -> Handled {
    let q: PageQuery = query(q)?;
    let limit = q.limit()?;
    let mut next = cursor(&app, q.after.as_deref(), "after")?;
    let page = feed_page(&app, &next, limit, "after").await?;
    let events: Vec<EventOut> = page
        .iter()
        .map(|e| {
            next.advance(e);
            EventOut::new(&e.event, e.record.as_ref())
        })
        .collect();
    Ok(Json(json!({"events": events, "next": next.to_string()})).into_response())
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamQuery {
    after: Option<String>,
}

/// Events read per page while streaming, and the wait before looking again when none
/// were new.
const STREAM_PAGE: usize = 256;
const STREAM_IDLE_MS: u64 = 200;

/// The change feed as Server-Sent Events: each event's `id` is the cursor after it, so
/// a client that reconnects with `Last-Event-ID` (or `?after=`) resumes behind it. The
/// stream ends with an `error` event when a read fails, and when the server stops.
async fn events_stream(State(app): Shared, RawQuery(q): RawQuery, headers: HeaderMap) -> Handled {
    let q: StreamQuery = query(q)?;
    let last = match headers.get("last-event-id") {
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::api(
                ApiCode::InvalidQuery,
                Some("Last-Event-ID"),
                "Last-Event-ID is not text",
            )
        })?),
        None => None,
    };
    let (start, field) = match (last, q.after.as_deref()) {
        (Some(id), _) => (Some(id), "Last-Event-ID"),
        (None, after) => (after, "after"),
    };
    let from = cursor(&app, start, field)?;
    // The first page read here: a cursor past retention is an error answer, not a stream.
    let first = feed_page(&app, &from, STREAM_PAGE, field).await?;
    let stream = futures_util::stream::unfold(
        (app, from, std::collections::VecDeque::from(first), false),
        |(app, mut at, mut queued, ended)| async move {
            if ended {
                return None;
            }
            loop {
                if let Some(e) = queued.pop_front() {
                    at.advance(&e);
                    let out = EventOut::new(&e.event, e.record.as_ref());
                    let sse = SseEvent::default()
                        .id(at.to_string())
                        .event(out.kind)
                        .json_data(&out)
                        .unwrap_or_else(|e| SseEvent::default().event("error").data(e.to_string()));
                    return Some((
                        Ok::<_, std::convert::Infallible>(sse),
                        (app, at, queued, false),
                    ));
                }
                if *app.stopping.borrow() {
                    return None;
                }
                match feed_page(&app, &at, STREAM_PAGE, "Last-Event-ID").await {
                    Ok(page) if page.is_empty() => {
                        let mut stopping = app.stopping.clone();
                        tokio::select! {
                            () = TokioSleeper.sleep(STREAM_IDLE_MS) => {}
                            _ = stopping.wait_for(|s| *s) => return None,
                        }
                    }
                    Ok(page) => queued.extend(page),
                    Err(e) => {
                        let body = serde_json::to_string(&e).unwrap_or_default();
                        let sse = SseEvent::default().event("error").data(body);
                        return Some((Ok(sse), (app, at, queued, true)));
                    }
                }
            }
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

async fn submit(State(app): Shared, RawQuery(q): RawQuery, headers: HeaderMap, b: Body) -> Handled {
    let wait = query::<WaitQuery>(q)?.wait.unwrap_or(true);
    let req: TransferIn = body(&app, &headers, b).await?;
    let decimal: Vec<AssetCode> = req.decimal_assets().collect();
    let catalog = app.svc.catalog_for(decimal.iter()).await?;
    let spec = req.to_spec("", &catalog)?;
    let answer = app
        .svc
        .submit(vec![spec], wait)
        .await
        .pop()
        .expect("one answer")?;
    Ok(json_status(status_of(&answer), answer_out(&app, &answer)))
}

async fn submit_batch(
    State(app): Shared,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    b: Body,
) -> Handled {
    let wait = query::<WaitQuery>(q)?.wait.unwrap_or(true);
    let req: BatchIn = body(&app, &headers, b).await?;
    if req.transfers.len() > BATCH_MAX {
        return Err(ApiError::api(
            ApiCode::BatchTooLarge,
            Some("transfers"),
            format!("{} transfers, at most {BATCH_MAX}", req.transfers.len()),
        ));
    }
    let decimal: Vec<AssetCode> = req
        .transfers
        .iter()
        .flat_map(TransferIn::decimal_assets)
        .collect();
    let catalog = app.svc.catalog_for(decimal.iter()).await?;
    let mut results: Vec<Option<BatchItemOut>> = vec![None; req.transfers.len()];
    let (mut slots, mut specs) = (Vec::new(), Vec::new());
    for (i, t) in req.transfers.iter().enumerate() {
        match t.to_spec(&format!("transfers[{i}]."), &catalog) {
            Ok(spec) => {
                slots.push(i);
                specs.push(spec);
            }
            Err(e) => results[i] = Some(item_error(e)),
        }
    }
    for (i, answer) in slots.into_iter().zip(app.svc.submit(specs, wait).await) {
        results[i] = Some(match answer {
            Ok(a) => BatchItemOut {
                status: status_of(&a),
                transfer: Some(answer_out(&app, &a)),
                error: None,
            },
            Err(e) => {
                let mut e = ApiError::from(e);
                e.field = e.field.map(|f| format!("transfers[{i}].{f}"));
                item_error(e)
            }
        });
    }
    let results: Vec<BatchItemOut> = results.into_iter().flatten().collect();
    Ok(Json(json!({ "results": results })).into_response())
}

fn item_error(e: ApiError) -> BatchItemOut {
    BatchItemOut {
        status: e.status().as_u16(),
        transfer: None,
        error: Some(serde_json::to_value(&e).expect("an error serializes")),
    }
}

/// `GET /v1/transfers`: which transfers, and where the page starts (`before`, the last
/// page's `next_before`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<TransferState>,
    account: Option<String>,
    asset: Option<String>,
    id_prefix: Option<String>,
    metadata: Option<String>,
    created_since_ms: Option<u64>,
    created_before_ms: Option<u64>,
    before: Option<String>,
    limit: Option<usize>,
}

impl ListQuery {
    /// The filter it asks for; a refusal names the parameter at fault.
    fn filter(&self) -> Result<TransferFilter, ApiError> {
        let bad = |field: &str, why: String| ApiError::api(ApiCode::InvalidQuery, Some(field), why);
        let metadata = self
            .metadata
            .as_deref()
            .map(metadata_pair)
            .transpose()
            .map_err(|why| bad("metadata", why))?;
        let id_prefix = match self.id_prefix.as_deref() {
            Some("") => return Err(bad("id_prefix", "must not be empty".into())),
            p => p.map(str::to_string),
        };
        if let (Some(a), Some(b)) = (self.created_since_ms, self.created_before_ms) {
            if a >= b {
                return Err(bad(
                    "created_before_ms",
                    format!("{b} is not after created_since_ms {a}"),
                ));
            }
        }
        Ok(TransferFilter {
            state: self.state,
            account: self
                .account
                .as_deref()
                .map(|a| wire::account_id(a, "account"))
                .transpose()?,
            asset: self
                .asset
                .as_deref()
                .map(|a| AssetCode::new(a, "asset"))
                .transpose()?,
            id_prefix,
            metadata,
            created_since: self.created_since_ms.map(Timestamp),
            created_before: self.created_before_ms.map(Timestamp),
        })
    }
}

async fn list_transfers(State(app): Shared, RawQuery(q): RawQuery) -> Handled {
    let q: ListQuery = query(q)?;
    let filter = q.filter()?;
    let limit = PageQuery {
        limit: q.limit,
        ..PageQuery::default()
    }
    .limit()?;
    let shards = app.svc.cluster().shards().len();
    let from = match q.before.as_deref() {
        None => ListCursor::newest(&filter, shards),
        Some(c) => ListCursor::parse(c, &filter, shards)
            .map_err(|why| ApiError::api(ApiCode::InvalidQuery, Some("before"), why))?,
    };
    let page = match app.svc.list_transfers(&filter, from, limit).await {
        Ok(page) => page,
        Err(ListError::Unsupported(why)) => {
            return Err(ApiError::api(ApiCode::NotSupported, None, why))
        }
        Err(ListError::Exec(e)) => return Err(e.into()),
    };
    let transfers: Vec<TransferOut> = page
        .transfers
        .iter()
        .map(|r| transfer_out(&app, r))
        .collect();
    let next = page.next.map(|c| c.to_string());
    Ok(Json(json!({"transfers": transfers, "next_before": next})).into_response())
}

async fn get_transfer(State(app): Shared, IdParam(id): IdParam) -> Handled {
    let id = wire::transfer_id(&id, "id")?;
    let r = app.svc.get_transfer(&id).await?;
    Ok(Json(transfer_out(&app, &r)).into_response())
}

/// The body of an action that takes none: absent, or `{}`. Anything else is refused, not
/// ignored (`{"amount": 5}` to capture must not capture the whole hold).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

/// Refuses a body other than none or `{}` (see [`NoFields`]).
async fn no_fields(app: &App, headers: &HeaderMap, b: Body) -> Result<(), ApiError> {
    let bytes = bytes(app, b).await?;
    if !bytes.trim_ascii().is_empty() {
        decode_json::<NoFields>(headers, &bytes)?;
    }
    Ok(())
}

async fn act(app: &App, id: String, action: Action, headers: HeaderMap, b: Body) -> Handled {
    let id = wire::transfer_id(&id, "id")?;
    no_fields(app, &headers, b).await?;
    let answer: Answer = app.svc.act(id, action).await?;
    Ok(json_status(status_of(&answer), answer_out(app, &answer)))
}

/// Reads the transfer `id` with its postings' assets, in order, and their declarations:
/// what decimal amounts of its postings are read in.
async fn read_with_scales(
    app: &App,
    id: &xfer_core::TransferId,
) -> Result<
    (
        xfer_core::TransferRecord,
        Vec<AssetCode>,
        Arc<crate::catalog::Catalog>,
    ),
    ApiError,
> {
    let r = app.svc.get_transfer(id).await?;
    let assets: Vec<AssetCode> = r.spec.postings.iter().map(|p| p.asset.clone()).collect();
    let catalog = app.svc.catalog_for(assets.iter()).await?;
    Ok((r, assets, catalog))
}

/// No body (or `{}`) captures the hold whole; `amount` or `amounts` capture that much of
/// it and release the rest, in the same posts.
async fn capture(State(app): Shared, IdParam(id): IdParam, headers: HeaderMap, b: Body) -> Handled {
    let id = wire::transfer_id(&id, "id")?;
    let bytes = bytes(&app, b).await?;
    let req: CaptureIn = if bytes.trim_ascii().is_empty() {
        CaptureIn::default()
    } else {
        decode_json(&headers, &bytes)?
    };
    // Decimal amounts are read in the scales of the hold's assets, posting by posting.
    let asked = if req.has_decimals() {
        let (_, assets, catalog) = read_with_scales(&app, &id).await?;
        req.amounts(&assets, &catalog)?
    } else {
        req.amounts(&[], &crate::catalog::Catalog::default())?
    };
    let one = matches!(asked, Some(PostingAmounts::One(_)));
    let action = match asked {
        None => Action::Capture,
        Some(a) => Action::CapturePart(a.into_vec()),
    };
    let answer = match app.svc.act(id, action).await {
        // `amount` was read as the one posting's: a refusal of it names the field sent.
        Err(xfer_engine::ExecError::Rejected(r)) if one && r.field.starts_with("amounts") => {
            return Err(xfer_engine::ExecError::Rejected(r.at("amount")).into())
        }
        other => other?,
    };
    Ok(json_status(status_of(&answer), answer_out(&app, &answer)))
}

async fn void(State(app): Shared, IdParam(id): IdParam, headers: HeaderMap, b: Body) -> Handled {
    act(&app, id, Action::Void, headers, b).await
}

async fn extend(State(app): Shared, IdParam(id): IdParam, headers: HeaderMap, b: Body) -> Handled {
    let id = wire::transfer_id(&id, "id")?;
    let req: ExtendIn = body(&app, &headers, b).await?;
    let r = app.svc.extend(id, req.new_expiry()?).await?;
    Ok(Json(transfer_out(&app, &r)).into_response())
}

async fn redrive(State(app): Shared, IdParam(id): IdParam, headers: HeaderMap, b: Body) -> Handled {
    act(&app, id, Action::Redrive, headers, b).await
}

async fn refund(State(app): Shared, IdParam(id): IdParam, headers: HeaderMap, b: Body) -> Handled {
    let original_id = wire::transfer_id(&id, "original")?;
    let req: RefundIn = body(&app, &headers, b).await?;
    let refund_id = wire::transfer_id(&req.id, "id")?;
    // Decimal amounts are read in the scales of the original's assets, posting by posting;
    // others are checked before the original is read.
    let (original, amounts) = if req.has_decimals() {
        let (original, assets, catalog) = read_with_scales(&app, &original_id).await?;
        let amounts = req.amounts(&assets, &catalog)?;
        (original, amounts)
    } else {
        let amounts = req.amounts(&[], &crate::catalog::Catalog::default())?;
        (app.svc.get_transfer(&original_id).await?, amounts)
    };
    let answer = app
        .svc
        .refund(&original, refund_id, amounts, req.metadata)
        .await?;
    Ok(json_status(status_of(&answer), answer_out(&app, &answer)))
}

/// 200 when it stopped (done, canceled, held), 202 when still running.
fn status_of(answer: &Answer) -> u16 {
    let r = answer.record();
    if r.state.is_terminal() || r.state == TransferState::Held {
        200
    } else {
        202
    }
}

async fn stuck(State(app): Shared, RawQuery(q): RawQuery) -> Handled {
    let q: PageQuery = query(q)?;
    let limit = q.limit()?;
    let now = app.svc.now();
    let records = app.svc.stuck(limit).await?;
    let items: Vec<serde_json::Value> = records
        .iter()
        .map(|r| {
            let why = Service::why_stuck(r, now);
            json!({"transfer": transfer_out(&app, r), "why": why, "lease_until_ms": r.lease_until.as_ms()})
        })
        .collect();
    Ok(Json(json!({ "stuck": items })).into_response())
}

async fn canceled(State(app): Shared, RawQuery(q): RawQuery) -> Handled {
    let q: PageQuery = query(q)?;
    let limit = q.limit()?;
    let after = q
        .after
        .as_deref()
        .map(|a| wire::transfer_id(a, "after"))
        .transpose()?;
    let page = app.svc.canceled(after, limit).await?;
    let transfers: Vec<TransferOut> = page.items.iter().map(|r| transfer_out(&app, r)).collect();
    let next = page.next.map(|c| c.to_string());
    Ok(Json(json!({"transfers": transfers, "next_after": next})).into_response())
}

/// `?replay=true` adds the replay of every balance from the transfers; `grace_ms` is how
/// long past its horizon a tombstone may wait for the sweeper before it is listed.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    replay: Option<bool>,
    grace_ms: Option<u64>,
}

/// The default `grace_ms`: ten minutes, many sweeper passes.
const REPLAY_GRACE_MS: u64 = 600_000;

async fn stats(State(app): Shared, RawQuery(q): RawQuery) -> Handled {
    let _: NoQuery = query(q)?;
    Ok(Json(app.overview.take(&app.svc).await?).into_response())
}

/// The query of an endpoint that takes none: any parameter is refused by name.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoQuery {}

async fn audit(State(app): Shared, RawQuery(q): RawQuery) -> Handled {
    let q: AuditQuery = query(q)?;
    if q.grace_ms.is_some() && q.replay != Some(true) {
        return Err(ApiError::api(
            ApiCode::InvalidQuery,
            Some("grace_ms"),
            "grace_ms applies to a replay: add replay=true".to_string(),
        ));
    }
    let report = app.svc.audit().await?;
    let mut clean = report.is_clean();
    let mut v = serde_json::to_value(&report).expect("a report serializes");
    if q.replay == Some(true) {
        let replay = app
            .svc
            .replay(q.grace_ms.unwrap_or(REPLAY_GRACE_MS))
            .await?;
        clean &= replay.is_clean();
        v["replay"] = serde_json::to_value(&replay).expect("a report serializes");
    }
    v["clean"] = json!(clean);
    Ok(Json(v).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_route_has_a_handler_and_an_unlisted_one_is_refused() {
        for r in ROUTES {
            let _ = handler(r.method, r.path);
            assert_eq!(scope_of(r.method, r.path).ok(), Some(r.scope), "{r:?}");
        }
        let e = scope_of("DELETE", "/v1/transfers/{id}").unwrap_err();
        assert_eq!((e.code, e.status().as_u16()), ("forbidden", 403));
        assert!(scope_of("GET", "/v1/unlisted").is_err());
    }
}

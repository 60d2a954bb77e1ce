//! The handlers of `/v1/webhooks`: registering, listing, reading and removing endpoints,
//! their dead letters and sending one again ([`crate::sink::webhook::Webhooks`] does the
//! work).

use super::{body, json_status, no_fields, query, Handled, IdParam, PageQuery, Shared};
use crate::error::{ApiCode, ApiError};
use crate::sink::webhook::endpoint::EndpointIn;
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::{request::Parts, HeaderMap};
use axum::response::IntoResponse;
use axum::Json;

pub(super) async fn create(State(app): Shared, headers: HeaderMap, b: Body) -> Handled {
    let req: EndpointIn = body(&app, &headers, b).await?;
    Ok(json_status(201, app.webhooks.create(req).await?))
}

pub(super) async fn list(State(app): Shared) -> Handled {
    Ok(Json(app.webhooks.list().await).into_response())
}

pub(super) async fn get(State(app): Shared, IdParam(id): IdParam) -> Handled {
    Ok(Json(app.webhooks.get(&id).await?).into_response())
}

pub(super) async fn delete(State(app): Shared, IdParam(id): IdParam) -> Handled {
    Ok(Json(app.webhooks.delete(&id).await?).into_response())
}

/// A page of dead letters: `after` is the `seq` of the last one seen (`next_after`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadLetterQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

pub(super) async fn dead_letters(
    State(app): Shared,
    IdParam(id): IdParam,
    RawQuery(q): RawQuery,
) -> Handled {
    let q: DeadLetterQuery = query(q)?;
    let limit = PageQuery {
        limit: q.limit,
        ..PageQuery::default()
    }
    .limit()?;
    let page = app
        .webhooks
        .dead_letters(&id, q.after.unwrap_or(0), limit)
        .await?;
    Ok(Json(page).into_response())
}

pub(super) async fn redeliver(
    State(app): Shared,
    Letter(id, event_id): Letter,
    headers: HeaderMap,
    b: Body,
) -> Handled {
    no_fields(&app, &headers, b).await?;
    Ok(Json(app.webhooks.redeliver(&id, &event_id).await?).into_response())
}

/// A route's `{id}` and `{event_id}` (an event id's `/` sent as `%2F`), refused in the
/// documented shape when they are not text.
pub(super) struct Letter(String, String);

impl<S: Send + Sync> FromRequestParts<S> for Letter {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<(String, String)>::from_request_parts(parts, state).await {
            Ok(Path((id, event_id))) => Ok(Letter(id, event_id)),
            Err(e) => Err(ApiError::api(ApiCode::InvalidPath, None, e.body_text())),
        }
    }
}

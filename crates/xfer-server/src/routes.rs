//! [`ROUTES`]: every endpoint and the scope it needs. The router is built from it, the auth
//! guard reads it, and the OpenAPI document describes exactly it.

use crate::auth::Scope;

/// One endpoint.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// `GET`, `POST`, `PUT`, `DELETE`.
    pub method: &'static str,
    /// The path template, as axum and OpenAPI write it.
    pub path: &'static str,
    /// The scope it needs; `None`: open (health, readiness, the OpenAPI document).
    pub scope: Option<Scope>,
}

const fn route(method: &'static str, path: &'static str, scope: Option<Scope>) -> Route {
    Route {
        method,
        path,
        scope,
    }
}

const READ: Option<Scope> = Some(Scope::Read);
const WRITE: Option<Scope> = Some(Scope::Write);
const ADMIN: Option<Scope> = Some(Scope::Admin);

/// Every endpoint. See the module docs.
pub const ROUTES: &[Route] = &[
    route("GET", "/healthz", None),
    route("GET", "/readyz", None),
    route("GET", "/metrics", READ),
    route("GET", "/v1/openapi.json", None),
    route("POST", "/v1/assets", ADMIN),
    route("GET", "/v1/assets", READ),
    route("GET", "/v1/assets/{code}", READ),
    route("POST", "/v1/accounts", WRITE),
    route("GET", "/v1/accounts", READ),
    route("GET", "/v1/accounts/{id}", READ),
    route("POST", "/v1/accounts/{id}/close", ADMIN),
    route("PUT", "/v1/accounts/{id}/lower_bound", ADMIN),
    route("PUT", "/v1/accounts/{id}/metadata", WRITE),
    route("GET", "/v1/accounts/{id}/transfers", READ),
    route("POST", "/v1/transfers", WRITE),
    route("GET", "/v1/transfers", READ),
    route("POST", "/v1/transfers/batch", WRITE),
    route("GET", "/v1/transfers/{id}", READ),
    route("POST", "/v1/transfers/{id}/capture", WRITE),
    route("POST", "/v1/transfers/{id}/void", WRITE),
    route("POST", "/v1/transfers/{id}/extend", WRITE),
    route("POST", "/v1/transfers/{id}/refund", WRITE),
    route("POST", "/v1/transfers/{id}/redrive", ADMIN),
    route("GET", "/v1/events", READ),
    route("GET", "/v1/events/stream", READ),
    route("GET", "/v1/admin/stuck", ADMIN),
    route("GET", "/v1/admin/canceled", ADMIN),
    route("GET", "/v1/audit", ADMIN),
    route("GET", "/v1/stats", READ),
    route("POST", "/v1/webhooks", ADMIN),
    route("GET", "/v1/webhooks", ADMIN),
    route("GET", "/v1/webhooks/{id}", ADMIN),
    route("DELETE", "/v1/webhooks/{id}", ADMIN),
    route("GET", "/v1/webhooks/{id}/dead_letters", ADMIN),
    route(
        "POST",
        "/v1/webhooks/{id}/dead_letters/{event_id}/redeliver",
        ADMIN,
    ),
];

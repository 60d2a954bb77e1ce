//! [`ApiError`]: the one JSON shape every failure of the HTTP API has, and the one place
//! that decides each code's HTTP status.
//!
//! ```json
//! {"code": "exceeds_available", "message": "…", "field": "postings[0].amount"}
//! ```
//!
//! `code` is a stable snake_case sentence: the protocol's [`Code`]s (validation, business
//! refusals, conflicts) plus the API's own ([`ApiCode`]: malformed bodies, auth, limits,
//! store trouble). `field` names the input the error is about, when there is one.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::fmt;
use xfer_core::{Code, Rejection};
use xfer_engine::ExecError;

/// The API's own error codes (the protocol's are [`Code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiCode {
    /// The body is not JSON.
    MalformedJson,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong JSON type.
    WrongType,
    /// A field the endpoint does not know.
    UnknownField,
    /// A value of the right type that is not allowed (an unknown enum word).
    InvalidValue,
    /// The body is bigger than the configured limit.
    BodyTooLarge,
    /// The body is not `application/json`.
    UnsupportedMediaType,
    /// A query parameter is malformed.
    InvalidQuery,
    /// A path segment is malformed (not UTF-8 once percent-decoded).
    InvalidPath,
    /// A batch holds more transfers than allowed.
    BatchTooLarge,
    /// No or an unknown bearer token.
    Unauthorized,
    /// The token lacks the scope the endpoint needs.
    Forbidden,
    /// No such route.
    RouteNotFound,
    /// The route exists, the method does not.
    MethodNotAllowed,
    /// The stores could not be reached; nothing was applied. Retry later.
    Unavailable,
    /// Some steps may have been applied; retry with the same id (a sweeper finishes it).
    OutcomeUnknown,
    /// A store returned damaged data.
    StoreCorrupted,
    /// A store answered what the protocol forbids.
    ProtocolViolation,
    /// The router cannot place a record (configuration).
    Unroutable,
    /// The server is shutting down.
    ShuttingDown,
    /// The server holds as much work as its limits allow; retry after `Retry-After`.
    Overloaded,
    /// Start-up recovery has not finished yet.
    NotReady,
    /// A change-feed cursor older than what the stores keep: events were missed.
    CursorExpired,
    /// A store of this deployment does not offer what was asked.
    NotSupported,
    /// No webhook endpoint has the id.
    WebhookNotFound,
    /// The webhook endpoint holds no dead letter of the event.
    DeadLetterNotFound,
    /// A webhook receiver did not take a delivery (it failed, answered other than 2xx, or
    /// not in time).
    DeliveryFailed,
}

impl ApiCode {
    /// The code's text.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiCode::MalformedJson => "malformed_json",
            ApiCode::MissingField => "missing_field",
            ApiCode::WrongType => "wrong_type",
            ApiCode::UnknownField => "unknown_field",
            ApiCode::InvalidValue => "invalid_value",
            ApiCode::BodyTooLarge => "body_too_large",
            ApiCode::UnsupportedMediaType => "unsupported_media_type",
            ApiCode::InvalidQuery => "invalid_query",
            ApiCode::InvalidPath => "invalid_path",
            ApiCode::BatchTooLarge => "batch_too_large",
            ApiCode::Unauthorized => "unauthorized",
            ApiCode::Forbidden => "forbidden",
            ApiCode::RouteNotFound => "route_not_found",
            ApiCode::MethodNotAllowed => "method_not_allowed",
            ApiCode::Unavailable => "unavailable",
            ApiCode::OutcomeUnknown => "outcome_unknown",
            ApiCode::StoreCorrupted => "store_corrupted",
            ApiCode::ProtocolViolation => "protocol_violation",
            ApiCode::Unroutable => "unroutable",
            ApiCode::ShuttingDown => "shutting_down",
            ApiCode::Overloaded => "overloaded",
            ApiCode::CursorExpired => "cursor_expired",
            ApiCode::NotSupported => "not_supported",
            ApiCode::NotReady => "not_ready",
            ApiCode::WebhookNotFound => "webhook_not_found",
            ApiCode::DeadLetterNotFound => "dead_letter_not_found",
            ApiCode::DeliveryFailed => "delivery_failed",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            ApiCode::MalformedJson
            | ApiCode::MissingField
            | ApiCode::WrongType
            | ApiCode::UnknownField
            | ApiCode::InvalidValue
            | ApiCode::InvalidQuery
            | ApiCode::InvalidPath
            | ApiCode::BatchTooLarge => StatusCode::BAD_REQUEST,
            ApiCode::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiCode::Forbidden => StatusCode::FORBIDDEN,
            ApiCode::RouteNotFound | ApiCode::WebhookNotFound | ApiCode::DeadLetterNotFound => {
                StatusCode::NOT_FOUND
            }
            ApiCode::DeliveryFailed => StatusCode::BAD_GATEWAY,
            ApiCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiCode::Unavailable
            | ApiCode::OutcomeUnknown
            | ApiCode::ShuttingDown
            | ApiCode::Overloaded
            | ApiCode::NotReady => StatusCode::SERVICE_UNAVAILABLE,
            ApiCode::CursorExpired => StatusCode::GONE,
            ApiCode::NotSupported => StatusCode::NOT_IMPLEMENTED,
            ApiCode::StoreCorrupted | ApiCode::ProtocolViolation | ApiCode::Unroutable => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

/// A protocol code or an API code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyCode {
    /// From the protocol (validation, refusals, conflicts).
    Protocol(Code),
    /// From the API layer.
    Api(ApiCode),
}

impl AnyCode {
    /// The code's text.
    pub fn as_str(self) -> &'static str {
        match self {
            AnyCode::Protocol(c) => c.as_str(),
            AnyCode::Api(c) => c.as_str(),
        }
    }

    /// The HTTP status of the code: the one place that decides it.
    pub fn status(self) -> StatusCode {
        match self {
            AnyCode::Api(c) => c.status(),
            AnyCode::Protocol(
                Code::TransferNotFound | Code::AccountNotFound | Code::AssetNotDeclared,
            ) => StatusCode::NOT_FOUND,
            AnyCode::Protocol(c) if c.is_conflict() => StatusCode::CONFLICT,
            AnyCode::Protocol(
                Code::AssetMismatch
                | Code::ExceedsAvailable
                | Code::AccountClosed
                | Code::BalanceWouldOverflow
                | Code::LowerBoundAboveAvailable,
            ) => StatusCode::UNPROCESSABLE_ENTITY,
            AnyCode::Protocol(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// A failed request: code, message and the field it is about. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ApiError {
    /// Stable snake_case code.
    pub code: &'static str,
    /// For people.
    pub message: String,
    /// The input the error is about (`postings[0].amount`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(skip)]
    status: u16,
}

impl ApiError {
    /// An error with `code`, about `field` if given.
    pub fn new(code: AnyCode, field: Option<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            code: code.as_str(),
            message: message.into(),
            field: field.filter(|f| !f.is_empty()),
            status: code.status().as_u16(),
        }
    }

    /// An API-layer error.
    pub fn api(code: ApiCode, field: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError::new(AnyCode::Api(code), field.map(str::to_string), message)
    }

    /// Its HTTP status.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{} ({field}): {}", self.code, self.message),
            None => write!(f, "{}: {}", self.code, self.message),
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        ApiError::new(AnyCode::Protocol(r.code), Some(r.field), r.message)
    }
}

impl From<ExecError> for ApiError {
    fn from(e: ExecError) -> Self {
        let message = e.to_string();
        match e {
            ExecError::Rejected(r) => r.into(),
            ExecError::Unavailable(_) => ApiError::api(ApiCode::Unavailable, None, message),
            ExecError::Busy(_) => ApiError::api(ApiCode::Overloaded, None, message),
            ExecError::Indeterminate(_) => ApiError::api(ApiCode::OutcomeUnknown, None, message),
            ExecError::Corrupted(_) => ApiError::api(ApiCode::StoreCorrupted, None, message),
            ExecError::Violation(_) => ApiError::api(ApiCode::ProtocolViolation, None, message),
            ExecError::Unroutable(_) => ApiError::api(ApiCode::Unroutable, None, message),
        }
    }
}

/// Seconds a client is asked to wait before retrying a `503`.
pub const RETRY_AFTER_S: u32 = 1;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, axum::Json(&self)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(RETRY_AFTER_S),
            );
        }
        response
    }
}

/// Decodes a JSON body into `T`, naming the field of any error (`postings[0].amount`).
pub fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let result: Result<T, _> = serde_path_to_error::deserialize(&mut *de);
    let e = match result {
        // Anything but whitespace after the value is refused, never ignored: a client that
        // sent `{…} xyz` or two objects meant something else than the first object alone.
        Ok(v) => match de.end() {
            Ok(()) => return Ok(v),
            Err(e) => {
                return Err(ApiError::api(
                    ApiCode::MalformedJson,
                    None,
                    format!("{e}: the body must be one JSON value and nothing after it"),
                ))
            }
        },
        Err(e) => e,
    };
    let path = e.path().to_string();
    let field = (path != ".").then_some(path);
    let inner = e.into_inner();
    let text = inner.to_string();
    let code = match inner.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            ApiCode::MalformedJson
        }
        serde_json::error::Category::Io => ApiCode::MalformedJson,
        serde_json::error::Category::Data if text.starts_with("missing field") => {
            ApiCode::MissingField
        }
        serde_json::error::Category::Data if text.starts_with("unknown field") => {
            ApiCode::UnknownField
        }
        serde_json::error::Category::Data if text.starts_with("invalid type") => ApiCode::WrongType,
        serde_json::error::Category::Data => ApiCode::InvalidValue,
    };
    // serde names a missing field in the message, not the path: put it in `field`.
    let field = match (code, text.split('`').nth(1)) {
        (ApiCode::MissingField, Some(name)) => Some(match field {
            Some(parent) => format!("{parent}.{name}"),
            None => name.to_string(),
        }),
        _ => field,
    };
    Err(ApiError::new(AnyCode::Api(code), field, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        amount: u64,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        id: String,
        postings: Vec<Inner>,
    }

    fn err(body: &str) -> ApiError {
        decode::<Outer>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn each_kind_of_bad_json_has_its_code_and_field() {
        let e = err("{\"id\": ");
        assert_eq!((e.code, e.status().as_u16()), ("malformed_json", 400));
        let e = err("{\"postings\": []}");
        assert_eq!((e.code, e.field.as_deref()), ("missing_field", Some("id")));
        let e = err("{\"id\": \"a\", \"postings\": [{}]}");
        assert_eq!(
            (e.code, e.field.as_deref()),
            ("missing_field", Some("postings[0].amount"))
        );
        let e = err("{\"id\": 5, \"postings\": []}");
        assert_eq!((e.code, e.field.as_deref()), ("wrong_type", Some("id")));
        let e = err("{\"id\": \"a\", \"postings\": [], \"x\": 1}");
        assert_eq!(e.code, "unknown_field");
    }

    #[test]
    fn anything_but_whitespace_after_the_value_is_malformed() {
        let one = "{\"id\": \"a\", \"postings\": []}";
        assert!(decode::<Outer>(format!(" {one} \r\n\t").as_bytes()).is_ok());
        for tail in [" xyz", "{\"id\":\"b\"}", ",", "]", "\u{0}", " 1"] {
            let e = err(&format!("{one}{tail}"));
            assert_eq!(
                (e.code, e.status().as_u16()),
                ("malformed_json", 400),
                "{tail:?}"
            );
            assert!(e.message.contains("trailing"), "{}", e.message);
        }
    }

    #[test]
    fn a_503_says_when_to_retry_and_nothing_else_does() {
        for code in [ApiCode::Overloaded, ApiCode::Unavailable, ApiCode::NotReady] {
            let r = ApiError::api(code, None, "x").into_response();
            assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{code:?}");
            let after = r.headers().get(axum::http::header::RETRY_AFTER);
            assert_eq!(after.and_then(|v| v.to_str().ok()), Some("1"), "{code:?}");
        }
        let r = ApiError::api(ApiCode::InvalidQuery, None, "x").into_response();
        assert!(r.headers().get(axum::http::header::RETRY_AFTER).is_none());
    }

    #[test]
    fn statuses_are_decided_by_the_code() {
        assert_eq!(AnyCode::Protocol(Code::TransferNotFound).status(), 404);
        assert_eq!(
            AnyCode::Protocol(Code::IdExistsWithDifferentBody).status(),
            409
        );
        assert_eq!(AnyCode::Protocol(Code::AmountMustBePositive).status(), 400);
        assert_eq!(AnyCode::Protocol(Code::ExceedsAvailable).status(), 422);
        assert_eq!(AnyCode::Api(ApiCode::OutcomeUnknown).status(), 503);
    }
}

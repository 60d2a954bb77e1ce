//! A webhook [`Endpoint`]: where events go, the secret they are signed with and the types
//! it takes; and [`EndpointIn`], the request that registers one, checked field by field.

use super::poster::Target;
use super::signature::hex;
use crate::error::{ApiCode, ApiError};
use ring::rand::{SecureRandom, SystemRandom};
use xfer_store::EventKind;

/// The longest URL taken.
const URL_MAX: usize = 2_048;
/// A secret given by the caller: at least this long (one easier to guess would let anyone
/// sign), at most the longer.
const SECRET_MIN: usize = 16;
const SECRET_MAX: usize = 256;
/// The longest description taken, in characters.
const DESCRIPTION_MAX: usize = 1_024;

/// `POST /v1/webhooks`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointIn {
    url: String,
    secret: Option<String>,
    types: Option<Vec<String>>,
    description: Option<String>,
}

/// A registered endpoint, as `endpoints.json` keeps it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// `wh_` and 24 hex digits.
    pub id: String,
    /// An `http` or `https` URL.
    pub url: String,
    /// The HMAC key of `Xfer-Signature`.
    pub secret: String,
    /// The event types it takes (`None`: every type).
    pub types: Option<Vec<String>>,
    /// The registrant's note.
    pub description: Option<String>,
    /// When it was registered.
    pub created_at_ms: u64,
}

/// An endpoint as the API shows it: never its secret, but at its creation.
#[derive(Debug, serde::Serialize)]
pub struct EndpointOut<'a> {
    id: &'a str,
    url: &'a str,
    types: &'a Option<Vec<String>>,
    description: &'a Option<String>,
    created_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<&'a str>,
}

impl Endpoint {
    /// Whether it takes events of type `kind`.
    pub fn wants(&self, kind: &str) -> bool {
        self.types
            .as_ref()
            .is_none_or(|types| types.iter().any(|t| t == kind))
    }

    /// The API's view, with the secret only when `with_secret`.
    pub fn out(&self, with_secret: bool) -> EndpointOut<'_> {
        EndpointOut {
            id: &self.id,
            url: &self.url,
            types: &self.types,
            description: &self.description,
            created_at_ms: self.created_at_ms,
            secret: with_secret.then_some(self.secret.as_str()),
        }
    }

    /// Where its URL points (checked when it was registered).
    pub fn target(&self) -> Result<Target, String> {
        Target::parse(&self.url)
    }
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::api(ApiCode::InvalidValue, Some(field), message)
}

impl EndpointIn {
    /// The endpoint this asks for, registered at `now_ms` under a new id, with a new secret
    /// when none was given. An error names the field; nothing was made.
    pub fn endpoint(self, now_ms: u64) -> Result<Endpoint, ApiError> {
        if self.url.len() > URL_MAX {
            return Err(invalid(
                "url",
                format!("{} bytes, at most {URL_MAX}", self.url.len()),
            ));
        }
        Target::parse(&self.url).map_err(|why| invalid("url", why))?;
        if let Some(s) = &self.secret {
            if !(SECRET_MIN..=SECRET_MAX).contains(&s.len()) {
                return Err(invalid(
                    "secret",
                    format!(
                        "{} bytes: give {SECRET_MIN} to {SECRET_MAX}, or none to have one made",
                        s.len()
                    ),
                ));
            }
            if !s.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(
                    "secret",
                    "printable ASCII without spaces only (it travels in configuration files)",
                ));
            }
        }
        let types = match self.types {
            None => None,
            Some(types) if types.is_empty() => {
                return Err(invalid(
                    "types",
                    "an empty list takes nothing: list types, or leave it out for every type",
                ))
            }
            Some(types) => {
                let mut kept: Vec<String> = Vec::with_capacity(types.len());
                for (i, t) in types.into_iter().enumerate() {
                    if EventKind::from_word(&t).is_none() {
                        let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.word()).collect();
                        return Err(invalid(
                            &format!("types[{i}]"),
                            format!("{t:?} is no event type; one of {}", known.join(", ")),
                        ));
                    }
                    if !kept.contains(&t) {
                        kept.push(t);
                    }
                }
                Some(kept)
            }
        };
        if let Some(d) = &self.description {
            let n = d.chars().count();
            if n > DESCRIPTION_MAX {
                return Err(invalid(
                    "description",
                    format!("{n} characters, at most {DESCRIPTION_MAX}"),
                ));
            }
        }
        let secret = match self.secret {
            Some(s) => s,
            None => format!("whsec_{}", random_hex(32)?),
        };
        Ok(Endpoint {
            id: format!("wh_{}", random_hex(12)?),
            url: self.url,
            secret,
            types,
            description: self.description,
            created_at_ms: now_ms,
        })
    }
}

/// `bytes` random bytes from the operating system, as hex.
fn random_hex(bytes: usize) -> Result<String, ApiError> {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new().fill(&mut buf).map_err(|_| {
        ApiError::api(
            ApiCode::Unavailable,
            None,
            "the system's random source failed",
        )
    })?;
    Ok(hex(&buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(json: serde_json::Value) -> Result<Endpoint, ApiError> {
        crate::error::decode::<EndpointIn>(json.to_string().as_bytes())?.endpoint(7)
    }

    #[test]
    fn a_request_is_checked_field_by_field() {
        let e = ask(serde_json::json!({"url": "https://h.example/in"})).unwrap();
        assert!(e.id.starts_with("wh_") && e.id.len() == 27, "{}", e.id);
        assert!(e.secret.starts_with("whsec_") && e.secret.len() == 70);
        assert_eq!((e.types, e.created_at_ms), (None, 7));
        let e = ask(
            serde_json::json!({"url": "http://h/", "types": ["done", "canceled", "done"],
                                       "secret": "0123456789abcdef", "description": "ledger"}),
        )
        .unwrap();
        assert_eq!(
            e.types,
            Some(vec!["done".to_string(), "canceled".to_string()])
        );
        assert!(e.wants("done") && !e.wants("accepted"));
        assert_eq!(e.secret, "0123456789abcdef");
        let two = ask(serde_json::json!({"url": "http://h/"})).unwrap();
        let three = ask(serde_json::json!({"url": "http://h/"})).unwrap();
        assert!(two.id != three.id && two.secret != three.secret);

        for (body, code, field) in [
            (serde_json::json!({}), "missing_field", "url"),
            (serde_json::json!({"url": 5}), "wrong_type", "url"),
            (
                serde_json::json!({"url": "ftp://h/"}),
                "invalid_value",
                "url",
            ),
            (
                serde_json::json!({"url": "http://h/", "types": []}),
                "invalid_value",
                "types",
            ),
            (
                serde_json::json!({"url": "http://h/", "types": ["done", "paid"]}),
                "invalid_value",
                "types[1]",
            ),
            (
                serde_json::json!({"url": "http://h/", "secret": "short"}),
                "invalid_value",
                "secret",
            ),
            (
                serde_json::json!({"url": "http://h/", "secret": "with spaces 0123456"}),
                "invalid_value",
                "secret",
            ),
            (
                serde_json::json!({"url": "http://h/", "description": "x".repeat(1_025)}),
                "invalid_value",
                "description",
            ),
            (
                serde_json::json!({"url": "http://h/", "events": ["done"]}),
                "unknown_field",
                "events",
            ),
        ] {
            let e = ask(body.clone()).unwrap_err();
            assert_eq!((e.code, e.field.as_deref()), (code, Some(field)), "{body}");
            assert_eq!(e.status().as_u16(), 400);
        }
    }

    #[test]
    fn the_api_shows_the_secret_only_when_asked() {
        let e = ask(serde_json::json!({"url": "http://h/"})).unwrap();
        let shown = serde_json::to_value(e.out(false)).unwrap();
        assert!(shown.get("secret").is_none(), "{shown}");
        assert_eq!(shown["types"], serde_json::Value::Null);
        let created = serde_json::to_value(e.out(true)).unwrap();
        assert_eq!(created["secret"], serde_json::json!(e.secret));
    }
}

//! [`Client`]: a small HTTP/JSON client of the xfer API (the CLI, the demos and the tests
//! use it). Plain HTTP/1.1 with kept-alive connections; put TLS in front of the server with
//! a proxy if the network needs it.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Http;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// An answer: the status and the JSON body (`null` when the body is not JSON; the text is
/// in `text`).
#[derive(Clone, Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body, parsed.
    pub body: Value,
    /// The body as text.
    pub text: String,
}

impl Answer {
    /// 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error code of a failed request (`""` if none).
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    /// The body if 2xx, else an error naming status, code, field and message.
    pub fn ok(self) -> Result<Value, String> {
        if self.is_success() {
            return Ok(self.body);
        }
        let field = match self.body["field"].as_str() {
            Some(f) => format!(" ({f})"),
            None => String::new(),
        };
        match self.body["code"].as_str() {
            Some(code) => Err(format!(
                "{} {code}{field}: {}",
                self.status,
                self.body["message"].as_str().unwrap_or("")
            )),
            None => Err(format!("{} {}", self.status, self.text)),
        }
    }
}

/// A client of one server. Cheap to clone (connections are shared).
#[derive(Clone)]
pub struct Client {
    http: Http<HttpConnector, Full<Bytes>>,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client of the server at `url` (`http://127.0.0.1:7700`), sending `token` if given.
    pub fn new(url: &str, token: Option<String>) -> Result<Client, String> {
        let base = url.trim_end_matches('/').to_string();
        let uri: hyper::Uri = base.parse().map_err(|e| format!("--url {url:?}: {e}"))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(format!(
                "--url {url:?}: expected http://host:port (put TLS in a proxy in front)"
            ));
        }
        let http = Http::builder(TokioExecutor::new())
            .pool_max_idle_per_host(256)
            .build_http();
        Ok(Client { http, base, token })
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer, String> {
        self.send(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Answer, String> {
        self.send(Method::POST, path, Some(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Answer, String> {
        self.send(Method::PUT, path, Some(body)).await
    }

    /// A request with a JSON body, or none.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, String> {
        let bytes = match body {
            Some(v) => serde_json::to_vec(v).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        let ct = body.map(|_| "application/json");
        self.raw(method, path, ct, bytes).await
    }

    /// A request with any body and content type (tests send malformed bodies with it).
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Answer, String> {
        let mut req = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.base));
        if let Some(ct) = content_type {
            req = req.header(hyper::header::CONTENT_TYPE, ct);
        }
        if let Some(t) = &self.token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = self.http.request(req).await.map_err(|e| {
            if e.is_connect() {
                format!(
                    "cannot reach xfer at {}: is `xfer serve` running there? (--url, XFER_URL)",
                    self.base
                )
            } else {
                format!("{method} {}{path}: {e}", self.base)
            }
        })?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {path}: reading the answer: {e}"))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer { status, body, text })
    }
}

/// Percent-encodes an id for a URL path segment.
pub fn segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

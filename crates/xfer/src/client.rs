//! [`Client`]: a small HTTP/JSON client of the xfer API (the CLI, the demos and the tests
//! use it). Plain HTTP/1.1 with kept-alive connections; put TLS in front of the server with
//! a proxy if the network needs it.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Http;
use hyper_util::rt::{TokioExecutor, TokioIo};
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
        Err(self.refusal())
    }

    /// The error a failed request answers: status, code, field and message.
    fn refusal(&self) -> String {
        let field = match self.body["field"].as_str() {
            Some(f) => format!(" ({f})"),
            None => String::new(),
        };
        match self.body["code"].as_str() {
            Some(code) => format!(
                "{} {code}{field}: {}",
                self.status,
                self.body["message"].as_str().unwrap_or("")
            ),
            None => format!("{} {}", self.status, self.text),
        }
    }

    /// The answer of `status` with body `bytes`.
    fn parse(status: u16, bytes: &[u8]) -> Answer {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let body = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        Answer { status, body, text }
    }
}

/// `req` with its content type, the bearer token and the body.
fn request(
    mut req: hyper::http::request::Builder,
    content_type: Option<&str>,
    token: Option<&str>,
    body: Vec<u8>,
) -> Result<Request<Full<Bytes>>, String> {
    if let Some(ct) = content_type {
        req = req.header(hyper::header::CONTENT_TYPE, ct);
    }
    if let Some(t) = token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    req.body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())
}

/// The status and the whole body of `resp`, the answer to `what` (named only on error).
async fn read(
    resp: hyper::Response<hyper::body::Incoming>,
    what: impl FnOnce() -> String,
) -> Result<(u16, Bytes), String> {
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{}: reading the answer: {e}", what()))?;
    Ok((status, body.to_bytes()))
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
        let req = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.base));
        let req = request(req, content_type, self.token.as_deref(), body)?;
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
        let (status, bytes) = read(resp, || format!("{method} {path}")).await?;
        Ok(Answer::parse(status, &bytes))
    }

    /// A connection of its own to the server (see [`Connection`]).
    pub async fn connect(&self) -> Result<Connection, String> {
        let uri: hyper::Uri = self
            .base
            .parse()
            .map_err(|e| format!("{}: {e}", self.base))?;
        let authority = uri
            .authority()
            .map(|a| a.to_string())
            .ok_or_else(|| format!("{}: no host", self.base))?;
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| format!("cannot reach xfer at {}: {e}", self.base))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("{}: TCP_NODELAY: {e}", self.base))?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("{}: HTTP/1.1 handshake: {e}", self.base))?;
        // The connection's I/O runs in a task of its own; it ends when `send` is dropped.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Connection {
            send,
            base: self.base.clone(),
            authority,
            token: self.token.clone(),
        })
    }
}

/// One kept-alive HTTP/1.1 connection, one request at a time, taken from no pool: a client
/// that owns its connection, as each of `xfer bench --via http`'s clients does (the pooled
/// [`Client`] spent about a tenth of that benchmark's CPU checking connections out and in).
pub struct Connection {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    base: String,
    authority: String,
    token: Option<String>,
}

impl Connection {
    /// `POST path` with a JSON body already encoded: the body of a 2xx answer, for the
    /// caller to decode into what it expects; else an error as [`Answer::ok`] makes it.
    pub async fn post_json(&mut self, path: &str, body: Vec<u8>) -> Result<Bytes, String> {
        let what = || format!("POST {}{path}", self.base);
        self.send
            .ready()
            .await
            .map_err(|e| format!("{}: the connection closed: {e}", what()))?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(hyper::header::HOST, &self.authority);
        let req = request(req, Some("application/json"), self.token.as_deref(), body)?;
        let resp = self
            .send
            .send_request(req)
            .await
            .map_err(|e| format!("{}: {e}", what()))?;
        match read(resp, what).await? {
            (200..=299, bytes) => Ok(bytes),
            (status, bytes) => Err(Answer::parse(status, &bytes).refusal()),
        }
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

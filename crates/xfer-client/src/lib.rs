//! [`Client`]: a small HTTP/JSON client of the xfer API (the CLI, the demos and the tests
//! use it). Plain HTTP/1.1 with kept-alive connections; put TLS in front of the server with
//! a proxy if the network needs it.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Http;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// The request methods of [`Client::raw`] and [`Client::send`].
pub use hyper::Method;

/// An answer: the status and the JSON body (`null` when the body is not JSON; the text is
/// in `text`).
#[derive(Clone, Debug)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// The body, parsed.
    pub body: Value,
    /// The body as text.
    pub text: String,
}

impl Response {
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
    fn parse(status: u16, bytes: &[u8]) -> Response {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let body = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        Response { status, body, text }
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
    pub async fn get(&self, path: &str) -> Result<Response, String> {
        self.send(Method::GET, path, None).await
    }

    /// POST `body` encoded as JSON (a request type of the API's, e.g. `TransferIn`).
    pub async fn post_body(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<Response, String> {
        let body = serde_json::to_value(body).map_err(|e| format!("POST {path}: {e}"))?;
        self.post(path, &body).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Response, String> {
        self.send(Method::POST, path, Some(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Response, String> {
        self.send(Method::PUT, path, Some(body)).await
    }

    /// A request with a JSON body, or none.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response, String> {
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
    ) -> Result<Response, String> {
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
        Ok(Response::parse(status, &bytes))
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
        let mut head = format!("host: {authority}\r\n");
        if let Some(token) = &self.token {
            head.push_str(&format!("authorization: Bearer {token}\r\n"));
        }
        Ok(Connection {
            stream,
            base: self.base.clone(),
            head,
            out: Vec::with_capacity(1024),
            input: Vec::with_capacity(4096),
        })
    }
}

/// One kept-alive HTTP/1.1 connection, one request at a time, taken from no pool: a client
/// that owns its connection, as each of `xfer bench --via http`'s clients does, spends no
/// CPU checking connections out and in as the pooled [`Client`] does.
///
/// It writes each request itself and reads the answer with `httparse` (hyper's own
/// parser), in the caller's task, because hyper's client connection runs its I/O in a task
/// of its own, two hand-overs per request, on CPU that a benchmark's client shares with the
/// server it measures (`docs/benchmarks.md#bench-http-client`). It speaks only what it
/// needs: an answer must carry a `content-length` (every xfer answer does).
pub struct Connection {
    stream: tokio::net::TcpStream,
    base: String,
    /// The header lines every request carries: host, and the token if any.
    head: String,
    /// The request being written, kept for its room.
    out: Vec<u8>,
    /// What was read of the answer, kept for its room.
    input: Vec<u8>,
}

/// The most header lines an answer may have.
const ANSWER_HEADERS_MAX: usize = 32;

/// The most bytes an answer's head may take.
const ANSWER_HEAD_MAX: usize = 64 * 1024;

/// The most bytes an answer's body may take (a batch of 8,192 transfers answers a few
/// MiB).
const ANSWER_BODY_MAX: usize = 64 * 1024 * 1024;

impl Connection {
    /// `POST path` with a JSON body already encoded: the body of a 2xx answer, for the
    /// caller to decode into what it expects; else an error as [`Response::ok`] makes it.
    pub async fn post_json(&mut self, path: &str, body: Vec<u8>) -> Result<&[u8], String> {
        use std::io::Write as _;
        use tokio::io::AsyncWriteExt;
        let what = |base: &str| format!("POST {base}{path}");
        self.out.clear();
        write!(
            self.out,
            "POST {path} HTTP/1.1\r\n{}content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            self.head,
            body.len()
        )
        .expect("writing to a vector cannot fail");
        self.out.extend_from_slice(&body);
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| format!("{}: sending: {e}", what(&self.base)))?;
        self.input.clear();
        let (status, start, len) = loop {
            self.read_more(path, "the connection closed").await?;
            if let Some(head) =
                parse_head(&self.input).map_err(|e| format!("{}: {e}", what(&self.base)))?
            {
                break head;
            }
        };
        while self.input.len() < start + len {
            self.input.reserve(start + len - self.input.len());
            self.read_more(path, "the connection closed within the answer")
                .await?;
        }
        if self.input.len() > start + len {
            return Err(format!(
                "{}: {} bytes past the answer's content-length",
                what(&self.base),
                self.input.len() - start - len
            ));
        }
        let bytes = &self.input[start..];
        match status {
            200..=299 => Ok(bytes),
            _ => Err(Response::parse(status, bytes).refusal()),
        }
    }

    /// Reads what the server sent next onto `input`; an error naming the request (`POST
    /// path`) if that fails or the connection closed (`closed`).
    async fn read_more(&mut self, path: &str, closed: &str) -> Result<(), String> {
        use tokio::io::AsyncReadExt;
        match self.stream.read_buf(&mut self.input).await {
            Ok(0) => Err(format!("POST {}{path}: {closed}", self.base)),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("POST {}{path}: reading the answer: {e}", self.base)),
        }
    }
}

/// An answer's status, where its body starts and how long it is, once `input` holds its
/// whole head (`None` until then).
fn parse_head(input: &[u8]) -> Result<Option<(u16, usize, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; ANSWER_HEADERS_MAX];
    let mut answer = httparse::Response::new(&mut headers);
    let start = match answer.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if input.len() > ANSWER_HEAD_MAX => {
            return Err(format!(
                "an answer's head longer than {ANSWER_HEAD_MAX} bytes"
            ))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("unreadable answer: {e}")),
    };
    let status = answer.code.ok_or("an answer without a status")?;
    let len = answer
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .ok_or("an answer without a content-length")?;
    let bad = || format!("content-length {:?}", String::from_utf8_lossy(len.value));
    let digits = len.value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let len = std::str::from_utf8(digits)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n <= ANSWER_BODY_MAX)
        .ok_or_else(|| format!("{} (at most {ANSWER_BODY_MAX} bytes)", bad()))?;
    Ok(Some((status, start, len)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn an_answers_head_is_read_once_whole() {
        let answer =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        for cut in 0..answer.len() - 2 {
            let head = parse_head(&answer[..cut]).expect("a prefix is no error");
            assert_eq!(head, None, "cut at {cut}");
        }
        assert_eq!(
            parse_head(&answer[..]),
            Ok(Some((200, answer.len() - 2, 2)))
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 204 No Content\r\n\r\n"),
            Err("an answer without a content-length".into())
        );
        for bad in ["x", "+5", "-1", "", "99999999999999999999999"] {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {bad}\r\n\r\n");
            let err = parse_head(head.as_bytes()).unwrap_err();
            assert!(err.contains(&format!("content-length {bad:?}")), "{err}");
        }
        let too_long = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            ANSWER_BODY_MAX + 1
        );
        assert!(parse_head(too_long.as_bytes())
            .unwrap_err()
            .contains("at most"));
        assert!(parse_head(b"HTTZ/1.1 200 OK\r\n\r\n")
            .unwrap_err()
            .contains("unreadable answer"));
        let endless = [b"HTTP/1.1 200 OK\r\nx: ".as_slice(), &[b'y'; 70_000]].concat();
        assert!(parse_head(&endless).unwrap_err().contains("longer than"));
    }

    /// A server that reads one request per entry of `answers` and writes its answer in
    /// pieces of `piece` bytes; it answers what each request was.
    async fn server(
        answers: Vec<Vec<u8>>,
        piece: usize,
    ) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut seen = Vec::new();
            for answer in answers {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                // The test requests' bodies are `{}`: the request ends with them.
                while !req.ends_with(b"\r\n\r\n{}") {
                    let n = s.read(&mut buf).await.expect("read");
                    assert!(n > 0, "the client closed");
                    req.extend_from_slice(&buf[..n]);
                }
                seen.push(String::from_utf8(req).expect("text"));
                for chunk in answer.chunks(piece) {
                    s.write_all(chunk).await.expect("write");
                    s.flush().await.expect("flush");
                    tokio::task::yield_now().await;
                }
            }
            seen
        });
        (url, task)
    }

    #[tokio::test]
    async fn a_connection_sends_requests_and_reads_answers_in_pieces() {
        let answer = |status: &str, body: &str| {
            format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        let ok = answer("200 OK", r#"{"state":"done"}"#);
        let refused = answer(
            "422 Unprocessable Entity",
            r#"{"code":"insufficient_funds","field":"amount","message":"short"}"#,
        );
        for piece in [1, 7, 4096] {
            let (url, task) = server(vec![ok.clone(), refused.clone(), ok.clone()], piece).await;
            let client = Client::new(&url, Some("tok".into())).expect("client");
            let mut conn = client.connect().await.expect("connect");
            let body = conn.post_json("/v1/transfers", b"{}".to_vec()).await;
            assert_eq!(body, Ok(&b"{\"state\":\"done\"}"[..]), "piece {piece}");
            let err = conn
                .post_json("/v1/transfers", b"{}".to_vec())
                .await
                .unwrap_err();
            assert_eq!(
                err, "422 insufficient_funds (amount): short",
                "piece {piece}"
            );
            let body = conn.post_json("/v1/x", b"{}".to_vec()).await;
            assert_eq!(body, Ok(&b"{\"state\":\"done\"}"[..]), "piece {piece}");
            let seen = task.await.expect("server");
            let host = url.trim_start_matches("http://");
            assert_eq!(
                seen[2],
                format!("POST /v1/x HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer tok\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}")
            );
        }
    }

    #[tokio::test]
    async fn a_connection_refuses_answers_it_cannot_read_whole() {
        let cases: [(&[u8], &str); 3] = [
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}",
                "the connection closed within the answer",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n{}",
                "1 bytes past the answer's content-length",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
                "an answer without a content-length",
            ),
        ];
        for (answer, why) in cases {
            let (url, task) = server(vec![answer.to_vec()], 4096).await;
            let mut conn = Client::new(&url, None)
                .expect("client")
                .connect()
                .await
                .expect("connect");
            let read = conn.post_json("/v1/transfers", b"{}".to_vec()).await;
            let seen = task.await.expect("server");
            let err = read.unwrap_err();
            assert!(
                err.starts_with(&format!("POST {url}/v1/transfers: ")),
                "{err}"
            );
            assert!(err.ends_with(why), "{err}");
            assert!(!seen[0].contains("authorization"), "{}", seen[0]);
        }
    }
}

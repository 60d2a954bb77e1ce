//! [`Poster`]: POSTs to one endpoint over one HTTP/1.1 connection kept open between
//! deliveries, opened again once it closed or failed; `https` through rustls, trusting the
//! operating system's certificate authorities (Mozilla's, compiled in, where it has none).
//! It has no timeout of its own: the caller bounds each attempt and drops the future, and a
//! connection is kept only after a complete answer.

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::{self, pki_types::ServerName, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// The most of an answer's body read (to keep the connection for the next request). None
/// of it is kept: a failure's message, shown over the API, names the status only, so that a
/// URL pointed inside the network cannot be used to read what answers there.
const ANSWER_MAX: usize = 8 << 10;

/// Where an endpoint's URL points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    https: bool,
    /// The host to connect to (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// The `Host` header: the URL's host and port as written.
    authority: String,
    /// The path and query requested.
    path: String,
}

impl Target {
    /// The target of `url`, an absolute `http` or `https` URL with a host and no
    /// credentials; the error says what is wrong with it.
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("https") => true,
            Some(s) if s.eq_ignore_ascii_case("http") => false,
            Some(s) => return Err(format!("{url:?}: the scheme {s:?} is not http or https")),
            None => return Err(format!("{url:?}: give an absolute http:// or https:// URL")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{url:?} names no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "{url:?} carries credentials; the endpoint's secret signs each request instead"
            ));
        }
        if url.contains('#') {
            return Err(format!("{url:?}: a fragment is never sent; remove it"));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{url:?} names no host"));
        }
        Ok(Target {
            https,
            host: host.to_string(),
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
            authority: authority.as_str().to_string(),
            path: uri
                .path_and_query()
                .map_or("/".to_string(), |p| p.as_str().to_string()),
        })
    }
}

/// An answer: its status.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
}

/// An open connection; dropped, it closes.
struct Conn {
    send: http1::SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// POSTs to one [`Target`]. See the module docs.
pub struct Poster {
    target: Target,
    kept: Option<Conn>,
}

impl Poster {
    /// No connection yet.
    pub fn new(target: Target) -> Poster {
        Poster { target, kept: None }
    }

    /// POSTs `body` as JSON with `headers` (names in lower case) and answers the status. A kept connection the
    /// receiver closed meanwhile fails before any answer: the request is sent once more on
    /// a new one.
    pub async fn post(
        &mut self,
        headers: &[(&'static str, String)],
        body: Bytes,
    ) -> Result<Answer, String> {
        if let Some(conn) = self.kept.take() {
            if let Ok(answer) = self.send(conn, headers, body.clone()).await {
                return Ok(answer);
            }
        }
        let conn = self.connect().await?;
        self.send(conn, headers, body).await
    }

    async fn send(
        &mut self,
        mut conn: Conn,
        headers: &[(&'static str, String)],
        body: Bytes,
    ) -> Result<Answer, String> {
        conn.send
            .ready()
            .await
            .map_err(|e| format!("connection to {}: {e}", self.target.authority))?;
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.target.path.as_str())
            .header(HOST, self.target.authority.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(
                USER_AGENT,
                concat!("xfer-webhooks/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(body))
            .map_err(|e| format!("request: {e}"))?;
        for (name, value) in headers {
            let value = HeaderValue::from_str(value).map_err(|e| format!("header {name}: {e}"))?;
            request
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
        let response = conn
            .send
            .send_request(request)
            .await
            .map_err(|e| format!("{}: {e}", self.target.authority))?;
        let status = response.status().as_u16();
        // The body is read whole (up to a bound) so that the connection can carry the next
        // request; a longer one, or one that fails, costs the connection, not the answer.
        let read = Limited::new(response.into_body(), ANSWER_MAX)
            .collect()
            .await;
        if read.is_ok() && !conn.send.is_closed() {
            self.kept = Some(conn);
        }
        Ok(Answer { status })
    }

    async fn connect(&self) -> Result<Conn, String> {
        let t = &self.target;
        let tcp = tokio::net::TcpStream::connect((t.host.as_str(), t.port))
            .await
            .map_err(|e| format!("connect to {}: {e}", t.authority))?;
        let _ = tcp.set_nodelay(true);
        if !t.https {
            return handshake(tcp, &t.authority).await;
        }
        let name = ServerName::try_from(t.host.clone())
            .map_err(|e| format!("{}: not a TLS server name: {e}", t.host))?;
        let tls = TlsConnector::from(tls_config()?)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", t.authority))?;
        handshake(tls, &t.authority).await
    }
}

async fn handshake<I>(io: I, authority: &str) -> Result<Conn, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Header names as they are usually written (`Xfer-Signature`), for receivers that
    // compare them as written.
    let (send, connection) = http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP with {authority}: {e}"))?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(Conn { send, task })
}

/// The TLS settings every endpoint shares, built once: rustls with ring, the operating
/// system's trusted certificate authorities (an operator's own CA added there is trusted),
/// or Mozilla's when the system has none.
fn tls_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let (added, _) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if added == 0 {
                tracing::warn!(
                    "no trusted certificate authorities found on this system: webhooks over \
                     https trust Mozilla's (install ca-certificates to use the system's)"
                );
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                .map_err(|e| format!("TLS settings: {e}"))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_an_absolute_http_or_https_url_with_a_host_and_no_credentials() {
        let t = Target::parse("https://hooks.example.com/in?x=1").unwrap();
        assert_eq!(
            (t.https, t.host.as_str(), t.port, t.path.as_str()),
            (true, "hooks.example.com", 443, "/in?x=1")
        );
        let t = Target::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            (t.https, t.port, t.path.as_str(), t.authority.as_str()),
            (false, 8080, "/", "127.0.0.1:8080")
        );
        let t = Target::parse("http://[::1]:9/h").unwrap();
        assert_eq!((t.host.as_str(), t.authority.as_str()), ("::1", "[::1]:9"));
        for bad in [
            "",
            "hooks.example.com/in",
            "/in",
            "ftp://example.com/",
            "file:///etc/passwd",
            "http://user:pw@example.com/",
            "http://example.com/#part",
            "http:// example.com/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn tls_trusts_some_authorities() {
        assert!(tls_config().is_ok());
    }

    #[tokio::test]
    async fn https_speaks_tls_before_anything_else() {
        // A plain HTTP server on the other end: the TLS handshake fails, nothing is posted
        // in clear.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut s, _) = listener.accept().await.unwrap();
            let mut first = [0u8; 1];
            s.read_exact(&mut first).await.unwrap();
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await;
            first[0]
        });
        let mut p = Poster::new(Target::parse(&format!("https://localhost:{port}/")).unwrap());
        let e = p
            .post(&[], Bytes::from_static(b"{}"))
            .await
            .expect_err("no TLS server there");
        assert!(e.contains("TLS"), "{e}");
        // 0x16: a TLS handshake record (the ClientHello).
        assert_eq!(server.await.unwrap(), 0x16);
    }
}

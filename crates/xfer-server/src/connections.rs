//! [`Limited`]: the server's listener with a bound on open connections. A connection past
//! the bound is answered `503 Service Unavailable` with `Retry-After` in the API's error
//! shape and closed, so that a flood of clients costs a refusal each, never unbounded
//! memory, and the connections already open keep being served.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use xfer_engine::{Sleeper, TokioSleeper};

/// Seconds a refused client is asked to wait.
const RETRY_AFTER_S: u32 = 1;

/// Refusals being written at once; past them a connection is closed unanswered, so that a
/// flood costs no more than this many small tasks.
const REFUSALS_MAX: usize = 64;

/// A TCP listener that holds one permit per open connection.
pub struct Limited {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    refusals: Arc<Semaphore>,
    max: usize,
}

impl Limited {
    /// `listener`, with at most `max` connections open at once.
    pub fn new(listener: TcpListener, max: usize) -> Limited {
        Limited {
            listener,
            permits: Arc::new(Semaphore::new(max)),
            refusals: Arc::new(Semaphore::new(REFUSALS_MAX)),
            max,
        }
    }
}

/// An accepted connection and its permit, given back when the connection is dropped.
pub struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl axum::serve::Listener for Limited {
    type Io = Counted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Counted, SocketAddr) {
        loop {
            let (stream, addr) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or the like: wait instead of spinning, as axum's
                    // own TCP listener does.
                    tracing::warn!(error = %e, "accepting a connection");
                    TokioSleeper.sleep(50).await;
                    continue;
                }
            };
            match self.permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    return (
                        Counted {
                            stream,
                            _permit: permit,
                        },
                        addr,
                    )
                }
                Err(_) => {
                    tracing::debug!(%addr, max = self.max, "connection refused: at the limit");
                    if let Ok(refusing) = self.refusals.clone().try_acquire_owned() {
                        let max = self.max;
                        tokio::spawn(async move {
                            refuse(stream, max).await;
                            drop(refusing);
                        });
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Answers a connection over the limit and closes it, without reading its request.
async fn refuse(mut stream: TcpStream, max: usize) {
    let body = format!(
        r#"{{"code":"too_many_connections","message":"the server has {max} connections open, its limit; retry after {RETRY_AFTER_S} s"}}"#
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: {RETRY_AFTER_S}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    // Then what the client sent is read and dropped until it closes (a socket closed with
    // unread bytes resets the connection, which can destroy the answer before the client
    // reads it). A client that neither reads nor closes is dropped after a second; at most
    // 64 KiB are read.
    let answer = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut read = 0;
        while read < 64 << 10 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => read += n,
            }
        }
        Ok::<(), io::Error>(())
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), answer).await;
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

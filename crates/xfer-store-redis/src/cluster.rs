//! A Redis Cluster connection that starts again from the configured nodes once it has lost
//! every node.
//!
//! Why: redis-rs 1.8.1's async Cluster connection can be left knowing no node at all after
//! every master restarted at once. A reconnect from the initial nodes that finds the nodes
//! up but fails its slot refresh leaves an empty slot map; the repairs then drop every node
//! missing from that map; and the slot refresh that follows, having no node to ask, fails at
//! once and is retried at once, for good. Every call then answers `ClusterConnectionNotFound`
//! ("No connections found") and the connection's task spins, logging "slot refresh
//! failed" without end, while the server answers 503. A connection can also be left
//! answering no call at all after the Cluster is back, so a call timeout replaces it too.
//! `crates/xfer/tests/workers.rs` covers both (`…_redis_cluster_killed_under_load_…`,
//! `every_redis_shard_reaches_its_cluster_again_after_every_master_restarts`).
//!
//! What: [`RenewingCluster`] hands out the current connection with its generation. A call
//! that fails with `ClusterConnectionNotFound`, or gets no answer within the call timeout,
//! asks for a new connection from the client (connecting to the configured nodes afresh);
//! one call at a time does, and waits for it (at most the connect timeout) before it
//! answers; the others go on failing meanwhile (their callers retry). A call that timed out
//! may still be applied: the store answers it `Indeterminate` either way. Dropping the last
//! handle of the old connection aborts its task. While the Cluster is down the new
//! connection cannot be made and the old one stays.

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, RedisError, RedisResult};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A Cluster connection, replaced when it reports that it knows no node or answers nothing
/// in time (see the module docs).
pub(crate) struct RenewingCluster {
    client: ClusterClient,
    connect_timeout: Duration,
    /// The connection and its generation (0 for the first, one more per replacement).
    current: Mutex<(u64, ClusterConnection)>,
    /// True while a call is making a new connection.
    renewing: AtomicBool,
    /// How many times the connection was replaced.
    renewals: AtomicU64,
}

impl RenewingCluster {
    /// Connects through `client`, waiting at most `connect_timeout`.
    pub(crate) async fn connect(
        client: ClusterClient,
        connect_timeout: Duration,
    ) -> RedisResult<RenewingCluster> {
        let conn = connect(&client, connect_timeout).await?;
        Ok(RenewingCluster {
            client,
            connect_timeout,
            current: Mutex::new((0, conn)),
            renewing: AtomicBool::new(false),
            renewals: AtomicU64::new(0),
        })
    }

    /// `f` on the current connection, waiting at most `within`: `None` when no answer came
    /// in time. The connection is replaced when it answered `ClusterConnectionNotFound` or
    /// nothing in time.
    pub(crate) async fn call<T, F, Fut>(&self, within: Duration, f: F) -> Option<RedisResult<T>>
    where
        F: FnOnce(ClusterConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = self.get();
        let answer = tokio::time::timeout(within, f(conn)).await.ok();
        let lost = match &answer {
            None => true,
            Some(Err(e)) => e.kind() == ErrorKind::ClusterConnectionNotFound,
            Some(Ok(_)) => false,
        };
        if lost {
            self.renew(generation).await;
        }
        answer
    }

    /// The connection to call now, and its generation (for [`RenewingCluster::renew`]).
    fn get(&self) -> (u64, ClusterConnection) {
        let current = self.current.lock().expect("the Cluster connection lock");
        (current.0, current.1.clone())
    }

    /// How many times the connection was replaced since it was opened.
    pub(crate) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Replaces the connection of `generation` with a new one, unless it was replaced
    /// already or another call is at it. While no node answers, it stays as it is.
    async fn renew(&self, generation: u64) {
        if self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        // Cleared however this future ends (it may be dropped at a call's timeout).
        let _renewing = Renewing(&self.renewing);
        if self.get().0 != generation {
            return;
        }
        let Ok(conn) = connect(&self.client, self.connect_timeout).await else {
            return;
        };
        let mut current = self.current.lock().expect("the Cluster connection lock");
        if current.0 == generation {
            *current = (generation + 1, conn);
            self.renewals.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A new connection through `client`, or the error (no answer within `timeout` is one).
async fn connect(client: &ClusterClient, timeout: Duration) -> RedisResult<ClusterConnection> {
    tokio::time::timeout(timeout, client.get_async_connection())
        .await
        .map_err(|_| RedisError::from((ErrorKind::Io, "no Cluster node answered in time")))?
}

/// Clears the flag it holds when dropped.
struct Renewing<'a>(&'a AtomicBool);

impl Drop for Renewing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

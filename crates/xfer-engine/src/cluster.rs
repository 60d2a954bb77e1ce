//! [`Cluster`]: the shards and the router that places records on them, and the one place
//! requests leave the engine.
//!
//! ```text
//!   requests (any shards, any transfers)
//!        │ route each op (Router), group by shard, keep order within a shard
//!        ▼
//!   shard 0: execute([..])   shard 1: execute([..])   ...   one batch per shard,
//!        └──────────────── join_all ────────────────┘        all shards at once
//!        ▼
//!   one result per request, in request order
//! ```
//!
//! A batch is one round trip; each op in it stays atomic on its own record and nothing more
//! (see [`Store`]). When every shard appends to one log ([`Store::log`]),
//! [`Cluster::execute_ahead`] lets them answer before their sync, with the LSN to
//! wait for ([`Cluster::wait_durable`]) before acknowledging anything. A failed batch fails
//! every request in it: the caller cannot tell which
//! prefix was applied, and need not, because every protocol step is idempotent. The engine
//! never spawns tasks: the per-shard calls are futures joined in the caller's task.

use crate::machine::Request;
use crate::router::{RouteError, Router};
use futures_util::future::join_all;
use std::sync::Arc;
use xfer_store::{answered_durable, same_log, Op, Reply, SharedLog, Store, StoreError};

/// Proof that the shards' log is durable up to [`Durable::lsn`]. Only a log that said
/// so makes one ([`Cluster::wait_durable`], [`Cluster::sync_durable`], [`Durable::of`]):
/// outcomes answered ahead of the sync ([`crate::Drive::synced`]) are released against it,
/// never against a promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Durable {
    lsn: u64,
}

impl Durable {
    /// The proof for `lsn` if `log` says it is durable now (LSN 0 always is).
    pub fn of(log: &dyn SharedLog, lsn: u64) -> Option<Durable> {
        (lsn == 0 || log.is_durable(lsn)).then_some(Durable { lsn })
    }

    /// The LSN known durable.
    pub fn lsn(self) -> u64 {
        self.lsn
    }

    /// True if everything up to `lsn` is durable.
    pub fn covers(self, lsn: u64) -> bool {
        lsn <= self.lsn
    }

    /// What a wait for the log (`synced`) says of answers resting on `lsn`: `Ok` only if it
    /// proved them durable.
    pub fn cover(synced: &Result<Durable, StoreError>, lsn: u64) -> Result<(), StoreError> {
        match synced {
            Ok(d) if d.covers(lsn) => Ok(()),
            Ok(d) => Err(StoreError::Indeterminate(format!(
                "the log is durable up to {}, not {lsn}: nothing ahead of it is told",
                d.lsn
            ))),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The shards and their router.
pub struct Cluster {
    shards: Vec<Arc<dyn Store>>,
    router: Router,
    /// The log every shard appends to, if they all share one.
    log: Option<Arc<dyn SharedLog>>,
}

/// The result of one request: the store's reply, or why its batch failed.
pub type Sent = Result<Reply, StoreError>;

impl Cluster {
    /// Shard `i` of `shards` is the router's shard `i`. Panics when the counts differ (a
    /// configuration error caught at start-up).
    pub fn new(shards: Vec<Arc<dyn Store>>, router: Router) -> Cluster {
        assert!(
            shards.len() == router.shards(),
            "{} stores for a router over {} shards",
            shards.len(),
            router.shards()
        );
        let first = shards.first().and_then(|s| s.log());
        let log = first.filter(|l| {
            shards
                .iter()
                .all(|s| s.log().is_some_and(|o| same_log(&o, l)))
        });
        Cluster {
            shards,
            router,
            log,
        }
    }

    /// True if every shard appends to one log, so that answers may come before the sync
    /// ([`Cluster::execute_ahead`]).
    pub fn pipelined(&self) -> bool {
        self.log.is_some()
    }

    /// The log every shard appends to, if they all share one.
    pub fn log(&self) -> Option<&Arc<dyn SharedLog>> {
        self.log.as_ref()
    }

    /// The router.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The shards, by index.
    pub fn shards(&self) -> &[Arc<dyn Store>] {
        &self.shards
    }

    /// Sends `requests`, one batch per shard, all shards concurrently, and answers one
    /// result per request in the same order, each durable. If any op cannot be routed
    /// nothing is sent.
    pub async fn execute(&self, requests: &[Request]) -> Result<Vec<Sent>, RouteError> {
        let (sent, _) = self.send(requests, false).await?;
        Ok(sent)
    }

    /// As [`Cluster::execute`], but when every shard appends to one log the answers may
    /// come before they are durable: with them comes the LSN (0: none) that
    /// [`Cluster::wait_durable`] must reach before anything they led to is acknowledged.
    /// Otherwise it is `execute`, with LSN 0.
    pub async fn execute_ahead(
        &self,
        requests: &[Request],
    ) -> Result<(Vec<Sent>, u64), RouteError> {
        self.send(requests, self.pipelined()).await
    }

    /// Waits until the shards' log is durable up to `lsn` (0: at once).
    pub async fn wait_durable(&self, lsn: u64) -> Result<Durable, StoreError> {
        if lsn > 0 {
            self.shared_log(lsn)?.wait_durable(lsn).await?;
        }
        Ok(Durable { lsn })
    }

    /// As [`Cluster::wait_durable`], syncing in the calling thread (blocking it) where the
    /// shards can ([`SharedLog::sync_durable`]); `None` where they cannot.
    pub fn sync_durable(&self, lsn: u64) -> Option<Result<Durable, StoreError>> {
        let synced = match lsn {
            0 => Ok(()),
            _ => match self.shared_log(lsn) {
                Ok(log) => log.sync_durable(lsn)?,
                Err(e) => Err(e),
            },
        };
        Some(synced.map(|()| Durable { lsn }))
    }

    /// True if the shards' log is durable up to `lsn` now.
    pub fn is_durable(&self, lsn: u64) -> bool {
        lsn == 0 || self.log.as_ref().is_some_and(|l| l.is_durable(lsn))
    }

    /// The shared log, asked about `lsn`: only a shared log hands out LSNs above 0.
    fn shared_log(&self, lsn: u64) -> Result<&Arc<dyn SharedLog>, StoreError> {
        self.log.as_ref().ok_or_else(|| {
            StoreError::Corrupted(format!(
                "asked to wait for LSN {lsn} of shards that share no log"
            ))
        })
    }

    /// One batch per shard: `execute_ahead` on each if `ahead`, else `execute`; the
    /// results in request order, and the highest LSN answered.
    async fn send(
        &self,
        requests: &[Request],
        ahead: bool,
    ) -> Result<(Vec<Sent>, u64), RouteError> {
        let groups = self.group(requests.iter().map(|r| &r.op))?;
        let calls = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .map(|(s, g)| {
                let shard = &self.shards[s];
                async move {
                    // Borrowed where the shard answers ahead of its log (it applies and logs
                    // them in place); copied for a store that keeps what it is given.
                    let result = if ahead {
                        let ops: Vec<&Op> = g.iter().map(|i| &requests[*i].op).collect();
                        shard.execute_ahead(&ops).await
                    } else {
                        let ops: Vec<Op> = g.iter().map(|i| requests[*i].op.clone()).collect();
                        answered_durable(shard.execute(ops)).await
                    };
                    (s, result)
                }
            });
        let mut out: Vec<Option<Sent>> = vec![None; requests.len()];
        let mut lsn = 0;
        for (shard, result) in join_all(calls).await {
            let members = &groups[shard];
            let result = result.map(|(replies, at)| {
                lsn = lsn.max(at);
                replies
            });
            match result {
                Ok(replies) if replies.len() == members.len() => {
                    for (i, reply) in members.iter().zip(replies) {
                        out[*i] = Some(Ok(reply));
                    }
                }
                Ok(replies) => {
                    let e = StoreError::Corrupted(format!(
                        "shard {shard} answered {} replies to {} ops",
                        replies.len(),
                        members.len()
                    ));
                    members.iter().for_each(|i| out[*i] = Some(Err(e.clone())));
                }
                Err(e) => members.iter().for_each(|i| out[*i] = Some(Err(e.clone()))),
            }
        }
        // Every request belongs to exactly one non-empty group, so every slot is filled.
        let out = out
            .into_iter()
            .map(|s| s.expect("every request was sent in a batch"))
            .collect();
        Ok((out, lsn))
    }

    /// Sends one op on its own (a batch of one).
    pub async fn execute_one(&self, op: Op) -> Result<Sent, RouteError> {
        let mut out = self.execute(&[Request { tag: 0, op }]).await?;
        Ok(out.pop().expect("one result per request"))
    }

    /// Request indexes per shard, in request order. Each shard's list is made as long as
    /// it will be, counted first, so that no list of any round grows by doubling
    /// (`docs/benchmarks.md#cluster-group-presized`).
    fn group<'a>(
        &self,
        ops: impl ExactSizeIterator<Item = &'a Op>,
    ) -> Result<Vec<Vec<usize>>, RouteError> {
        let mut of = Vec::with_capacity(ops.len());
        let mut counts = vec![0usize; self.shards.len()];
        for op in ops {
            let shard = self.router.shard_of_op(op)?;
            counts[shard] += 1;
            of.push(shard);
        }
        let mut groups: Vec<Vec<usize>> = counts.into_iter().map(Vec::with_capacity).collect();
        for (i, shard) in of.into_iter().enumerate() {
            groups[shard].push(i);
        }
        Ok(groups)
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("shards", &self.shards.len())
            .field("router", &self.router)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use xfer_core::{AccountId, AssetCode, LowerBound, ManualClock, Timestamp};
    use xfer_store::{AccountOp, ExecuteHook, Intercept, MemoryStore};

    #[tokio::test(flavor = "current_thread")]
    async fn one_batch_per_shard_and_results_in_request_order() {
        let clock = Arc::new(ManualClock::at(Timestamp(1)));
        // Each shard records the size of every batch it gets.
        let sizes: Vec<Arc<Mutex<Vec<usize>>>> = (0..3).map(|_| Arc::default()).collect();
        let stores: Vec<Arc<Intercept<MemoryStore>>> = sizes
            .iter()
            .map(|seen| {
                let seen = seen.clone();
                let hook: ExecuteHook<MemoryStore> = Box::new(move |inner, ops| {
                    seen.lock().expect("test lock").push(ops.len());
                    inner.execute(ops)
                });
                Arc::new(Intercept::new(MemoryStore::new(clock.clone()), hook))
            })
            .collect();
        let shards = stores.iter().map(|s| s.clone() as Arc<dyn Store>).collect();
        let cluster = Cluster::new(shards, Router::hash(3));
        let usd = AssetCode::new("USD", "asset").expect("valid");
        let requests: Vec<Request> = (0..30)
            .map(|i| {
                let id = AccountId::new(&format!("a{i}")).expect("valid");
                let op = AccountOp::Create {
                    asset: usd.clone(),
                    lower_bound: LowerBound::default(),
                };
                Request {
                    tag: i,
                    op: Op::Account(id, op),
                }
            })
            .collect();
        let results = cluster.execute(&requests).await.expect("routable");
        for (i, r) in results.iter().enumerate() {
            match r {
                Ok(Reply::Account(a)) => assert_eq!(a.id.as_str(), format!("a{i}")),
                other => panic!("request {i}: {other:?}"),
            }
        }
        let batches: Vec<Vec<usize>> = sizes
            .iter()
            .map(|s| s.lock().expect("test lock").clone())
            .collect();
        assert!(
            batches.iter().all(|b| b.len() == 1),
            "one execute per shard: {batches:?}"
        );
        assert_eq!(batches.iter().map(|b| b[0]).sum::<usize>(), 30);
    }
}

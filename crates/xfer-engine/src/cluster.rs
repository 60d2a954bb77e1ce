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
//! (see [`Store`]). A failed batch fails every request in it: the caller cannot tell which
//! prefix was applied, and need not, because every protocol step is idempotent. The engine
//! never spawns tasks: the per-shard calls are futures joined in the caller's task.

use crate::machine::Request;
use crate::router::{RouteError, Router};
use futures_util::future::join_all;
use std::sync::Arc;
use xfer_store::{Op, Reply, Store, StoreError};

/// The shards and their router.
pub struct Cluster {
    shards: Vec<Arc<dyn Store>>,
    router: Router,
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
        Cluster { shards, router }
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
    /// result per request in the same order. If any op cannot be routed nothing is sent.
    pub async fn execute(&self, requests: &[Request]) -> Result<Vec<Sent>, RouteError> {
        let groups = self.group(requests.iter().map(|r| &r.op))?;
        let calls = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .map(|(s, g)| {
                let ops: Vec<Op> = g.iter().map(|i| requests[*i].op.clone()).collect();
                async move { (s, self.shards[s].execute(ops).await) }
            });
        let mut out: Vec<Option<Sent>> = vec![None; requests.len()];
        for (shard, result) in join_all(calls).await {
            let members = &groups[shard];
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
        Ok(out
            .into_iter()
            .map(|s| s.expect("every request was sent in a batch"))
            .collect())
    }

    /// Sends one op on its own (a batch of one).
    pub async fn execute_one(&self, op: Op) -> Result<Sent, RouteError> {
        let mut out = self.execute(&[Request { tag: 0, op }]).await?;
        Ok(out.pop().expect("one result per request"))
    }

    /// Request indexes per shard, in request order.
    fn group<'a>(&self, ops: impl Iterator<Item = &'a Op>) -> Result<Vec<Vec<usize>>, RouteError> {
        let mut groups = vec![Vec::new(); self.shards.len()];
        for (i, op) in ops.enumerate() {
            groups[self.router.shard_of_op(op)?].push(i);
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

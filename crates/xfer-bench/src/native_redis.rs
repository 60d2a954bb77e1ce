//! `xfer bench --baseline redis`: the same workload as one Redis function call per transfer,
//! the way an application without xfer would write a transfer on Redis, for a same-run
//! comparison on the server xfer ran on (the first `--redis-url`; one server, not a
//! Cluster).
//!
//! The function checks that the record is new and the debit available, then debits,
//! credits and writes the transfer's record, atomically on the server (`NATIVE`). Accounts
//! are hashes `xfer_bench_native:a:<id>` funded as the workload's (`usd-0`, `usd-1`, …),
//! records `xfer_bench_native:t:<id>`; every key of that prefix is deleted before and after
//! the run. Each client has a connection of its own.

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use xfer_core::{TransferSpec, TransferState};

const PREFIX: &str = "xfer_bench_native";

/// The transfer function: KEYS the debited and credited accounts and the record; ARGV the
/// amount. Amounts and balances stay below 2^53 (exact as Lua numbers).
const NATIVE: &str = r#"#!lua name=xfer_bench_native
redis.register_function('xfer_bench_native_transfer', function(keys, args)
  if redis.call('EXISTS', keys[3]) == 1 then
    return 'duplicate'
  end
  local amount = tonumber(args[1])
  local balance = tonumber(redis.call('HGET', keys[1], 'balance'))
  if not balance or balance < amount then
    return 'insufficient'
  end
  redis.call('HINCRBY', keys[1], 'balance', -amount)
  redis.call('HINCRBY', keys[2], 'balance', amount)
  redis.call('HSET', keys[3], 'from', keys[1], 'to', keys[2], 'amount', args[1])
  return 'done'
end)
"#;

/// Native Redis transfers on one server.
#[derive(Clone)]
pub struct NativeRedis {
    connections: Arc<Vec<MultiplexedConnection>>,
    next: Arc<AtomicUsize>,
}

fn failed(what: &str) -> impl Fn(redis::RedisError) -> String + '_ {
    move |e| format!("redis baseline: {what}: {e}")
}

impl NativeRedis {
    /// Loads the function, empties the prefix and funds `accounts` accounts, with `clients`
    /// connections; answers the server's `appendonly` and `appendfsync`, to print beside
    /// the figures.
    pub async fn setup(
        url: &str,
        accounts: u64,
        clients: usize,
    ) -> Result<(NativeRedis, String), String> {
        let client = redis::Client::open(url).map_err(failed(url))?;
        let mut connections = Vec::with_capacity(clients);
        for _ in 0..clients.max(1) {
            let c = client
                .get_multiplexed_async_connection()
                .await
                .map_err(failed("connecting"))?;
            connections.push(c);
        }
        let native = NativeRedis {
            connections: Arc::new(connections),
            next: Arc::new(AtomicUsize::new(0)),
        };
        let mut c = native.connection();
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(NATIVE)
            .query_async::<String>(&mut c)
            .await
            .map_err(failed("FUNCTION LOAD"))?;
        native.clear().await?;
        let ids: Vec<u64> = (0..accounts).collect();
        for chunk in ids.chunks(1_000) {
            let mut pipe = redis::pipe();
            for i in chunk {
                pipe.hset(
                    account_key(&format!("usd-{i}")),
                    "balance",
                    1_000_000_000_000u64,
                )
                .ignore();
            }
            pipe.query_async::<()>(&mut c)
                .await
                .map_err(failed("funding"))?;
        }
        let mut durability = Vec::new();
        for name in ["appendonly", "appendfsync"] {
            let v: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut c)
                .await
                .map_err(failed("CONFIG GET"))?;
            durability.push(format!("{name}={}", v.get(1).map_or("?", String::as_str)));
        }
        Ok((native, durability.join(" ")))
    }

    fn connection(&self) -> MultiplexedConnection {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.connections[n % self.connections.len()].clone()
    }

    /// Deletes every key of the baseline's prefix.
    pub async fn clear(&self) -> Result<(), String> {
        let mut c = self.connection();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{PREFIX}:*"))
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut c)
                .await
                .map_err(failed("SCAN"))?;
            if !keys.is_empty() {
                c.unlink::<_, ()>(keys).await.map_err(failed("UNLINK"))?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// One transfer as one function call: `Done`, or `Canceled` for insufficient funds.
    pub async fn transfer(&self, s: &TransferSpec) -> Result<TransferState, String> {
        let [p] = s.postings.as_slice() else {
            return Err("the baseline runs single-posting transfers only".into());
        };
        let mut c = self.connection();
        let answer: String = redis::cmd("FCALL")
            .arg("xfer_bench_native_transfer")
            .arg(3)
            .arg(account_key(p.from.as_str()))
            .arg(account_key(p.to.as_str()))
            .arg(format!("{PREFIX}:t:{}", s.id))
            .arg(p.amount.units())
            .query_async(&mut c)
            .await
            .map_err(failed("FCALL"))?;
        match answer.as_str() {
            "done" | "duplicate" => Ok(TransferState::Done),
            "insufficient" => Ok(TransferState::Canceled),
            other => Err(format!("redis baseline: the function answered {other:?}")),
        }
    }
}

fn account_key(id: &str) -> String {
    format!("{PREFIX}:a:{id}")
}

//! Fresh shards (unique prefixes) on the test servers for each test, deleted when the test
//! ends. The servers are those `scripts/services` starts: Redis on 127.0.0.1:6379
//! (`XFER_TEST_REDIS_URL`) and a Cluster of three masters on 127.0.0.1:7001-7003
//! (`XFER_TEST_REDIS_CLUSTER`, comma-separated). A server that cannot be reached fails the
//! test; it never skips.

#![allow(dead_code)] // each test file uses its own part

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use xfer_store_redis::{RedisConfig, RedisStore};

pub fn url() -> String {
    std::env::var("XFER_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub fn cluster_nodes() -> Vec<String> {
    std::env::var("XFER_TEST_REDIS_CLUSTER")
        .unwrap_or_else(|_| {
            "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".into()
        })
        .split(',')
        .map(str::to_string)
        .collect()
}

/// Where the shards of one test live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Single,
    Cluster,
}

/// Fresh shards for one test, deleted when it ends (also when it fails).
pub struct Shards {
    server: Server,
    prefix: String,
    made: AtomicUsize,
    opened: Mutex<Vec<RedisConfig>>,
}

impl Shards {
    pub fn new(server: Server, test: &str) -> Shards {
        Shards {
            server,
            prefix: format!("t_{test}_{}", std::process::id()),
            made: AtomicUsize::new(0),
            opened: Mutex::new(vec![]),
        }
    }

    pub fn config(&self) -> RedisConfig {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}_{n}", self.prefix);
        match self.server {
            Server::Single => RedisConfig::new(url(), prefix),
            Server::Cluster => RedisConfig::cluster(cluster_nodes(), prefix),
        }
    }

    pub async fn open(&self) -> RedisStore {
        self.open_with(|_| {}).await
    }

    pub async fn open_with(&self, tune: impl FnOnce(&mut RedisConfig)) -> RedisStore {
        let mut cfg = self.config();
        tune(&mut cfg);
        self.opened.lock().unwrap().push(cfg.clone());
        match RedisStore::open(&cfg).await {
            Ok(s) => s,
            Err(e) => panic!(
                "{e} (nodes {:?}; run scripts/services to start Redis)",
                cfg.nodes
            ),
        }
    }
}

impl Shards {
    /// Destroys every shard opened so far (on a single server) and answers the keys under
    /// their tags that are left.
    pub async fn destroy_and_find_left(&self) -> Vec<String> {
        assert_eq!(self.server, Server::Single, "SCAN reaches one server");
        let opened = std::mem::take(&mut *self.opened.lock().unwrap());
        let client = redis::Client::open(url()).expect("a client");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let mut left = Vec::new();
        for cfg in opened {
            let store = RedisStore::open(&cfg).await.expect("reopen");
            store.destroy().await.expect("destroy");
            let pattern = format!("{{{}}}*", cfg.prefix);
            let mut keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut c)
                .await
                .expect("KEYS");
            left.append(&mut keys);
        }
        left
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        let opened = std::mem::take(&mut *self.opened.lock().unwrap());
        // The test's runtime is gone or going; clean up from a small one of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                for cfg in opened {
                    if let Ok(s) = RedisStore::open(&cfg).await {
                        let _ = s.destroy().await;
                    }
                }
            });
        })
        .join();
    }
}

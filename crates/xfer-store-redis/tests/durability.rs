//! What the store says about the server's persistence (so `xfer serve` can warn loudly),
//! and clear errors for a server that cannot be reached or a bad setting.

mod common;
use common::{cluster_nodes, Server, Shards};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use xfer_store::database::OpenFailure;
use xfer_store_redis::{OpenError, RedisConfig, RedisStore};

/// A private redis-server on a free port, with no persistence, killed on drop.
struct Private {
    child: Child,
    port: u16,
    _dir: std::path::PathBuf,
}

impl Private {
    fn start() -> Private {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("xfer-redis-durability-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/services installs it)");
        Private {
            child,
            port,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

#[allow(clippy::disallowed_methods)] // waiting for a child process to listen
async fn open_when_up(url: &str) -> RedisStore {
    for _ in 0..100 {
        if let Ok(s) = RedisStore::open(&RedisConfig::new(url, "durability")).await {
            return s;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the private redis-server at {url} did not come up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_synced_appends_is_reported_and_one_with_them_is_not() {
    let server = Private::start();
    let store = open_when_up(&server.url()).await;
    let d = store.durability().await;
    assert_eq!(d.len(), 1);
    assert!(!d[0].is_durable(), "{d:?}");
    let w = d[0].warning().expect("a warning");
    assert!(
        w.contains("appendonly=no") && w.contains("LOST"),
        "the warning says what is wrong and what it risks: {w}"
    );

    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    for (k, v) in [("appendonly", "yes"), ("appendfsync", "always")] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let d = store.durability().await;
    assert!(d[0].is_durable() && d[0].warning().is_none(), "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_the_cluster_is_checked() {
    let shards = Shards::new(Server::Cluster, "durable");
    let store = shards.open().await;
    let d = store.durability().await;
    assert_eq!(
        d.len(),
        3,
        "three masters: {d:?} (nodes {:?})",
        cluster_nodes()
    );
    assert!(
        d.iter().all(|m| m.is_durable()),
        "scripts/services starts the cluster with appendonly yes, appendfsync always: {d:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_and_a_bad_prefix_are_clear_errors() {
    let mut cfg = RedisConfig::new("redis://127.0.0.1:1", "p");
    cfg.connect_timeout = std::time::Duration::from_secs(2);
    match RedisStore::open(&cfg).await {
        Err(OpenError {
            failure: OpenFailure::Unreachable(m),
            ..
        }) => assert!(!m.is_empty()),
        other => panic!("expected Unreachable, got {other:?}"),
    }
    let cfg = RedisConfig::new(common::url(), "a{b");
    match RedisStore::open(&cfg).await {
        Err(
            e @ OpenError {
                failure:
                    OpenFailure::Config {
                        field: "prefix", ..
                    },
                ..
            },
        ) => {
            assert!(e.to_string().contains("hash tag"), "{e}")
        }
        other => panic!("expected a prefix error, got {other:?}"),
    }
    let cfg = RedisConfig::new("http://127.0.0.1:6379", "p");
    match RedisStore::open(&cfg).await {
        Err(
            e @ OpenError {
                failure: OpenFailure::Config { field: "url", .. },
                ..
            },
        ) => {
            assert!(e.to_string().contains("not a Redis URL"), "{e}")
        }
        other => panic!("expected a url error, got {other:?}"),
    }
}

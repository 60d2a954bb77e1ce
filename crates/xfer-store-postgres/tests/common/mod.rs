//! Fresh schemas on the test server for each test, dropped when the test ends.

#![allow(dead_code)] // each test file uses its own part

use std::sync::atomic::{AtomicUsize, Ordering};
use xfer_store_postgres::{PostgresConfig, PostgresStore};

pub fn url() -> String {
    std::env::var("XFER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/xfer_test".into())
}

/// Fresh schemas for one test run, dropped when it ends (also when it fails).
pub struct Schemas {
    prefix: String,
    made: AtomicUsize,
}

impl Schemas {
    pub fn new(test: &str) -> Schemas {
        Schemas {
            prefix: format!("t_{test}_{}", std::process::id()),
            made: AtomicUsize::new(0),
        }
    }

    pub async fn open(&self) -> PostgresStore {
        self.open_with_pool(8).await
    }

    pub async fn open_with_pool(&self, pool_size: usize) -> PostgresStore {
        self.open_with(|cfg| cfg.pool_size = pool_size).await.0
    }

    /// A store with `tune` applied to its configuration, and its schema's name.
    pub async fn open_with(
        &self,
        tune: impl FnOnce(&mut PostgresConfig),
    ) -> (PostgresStore, String) {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let mut cfg = PostgresConfig::new(url(), format!("{}_{n}", self.prefix));
        tune(&mut cfg);
        match PostgresStore::open(&cfg).await {
            Ok(s) => (s, cfg.schema),
            Err(e) => panic!(
                "{e} (url {}; run scripts/services to start PostgreSQL)",
                url()
            ),
        }
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        let n = self.made.load(Ordering::Relaxed);
        let url = url();
        let prefix = self.prefix.clone();
        // The test's runtime is gone or going; drop the schemas from a small one of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                else {
                    return;
                };
                tokio::spawn(conn);
                for i in 0..n {
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {prefix}_{i} CASCADE"))
                        .await;
                }
            })
        })
        .join();
    }
}

//! Fresh databases on the test server for each test, dropped when the test ends.

#![allow(dead_code)] // each test file uses its own part

use mysql_async::prelude::Queryable;
use std::sync::atomic::{AtomicUsize, Ordering};
use xfer_store_mysql::{MysqlConfig, MysqlStore};

pub fn url() -> String {
    std::env::var("XFER_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// Fresh databases for one test run, dropped when it ends (also when it fails).
pub struct Databases {
    prefix: String,
    made: AtomicUsize,
}

impl Databases {
    pub fn new(test: &str) -> Databases {
        Databases {
            prefix: format!("t_{test}_{}", std::process::id()),
            made: AtomicUsize::new(0),
        }
    }

    pub async fn open(&self) -> MysqlStore {
        self.open_with(|_| {}).await.0
    }

    /// A store with `tune` applied to its configuration, and its database's name.
    pub async fn open_with(&self, tune: impl FnOnce(&mut MysqlConfig)) -> (MysqlStore, String) {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let mut cfg = MysqlConfig::new(url(), format!("{}_{n}", self.prefix));
        tune(&mut cfg);
        match MysqlStore::open(&cfg).await {
            Ok(s) => (s, cfg.database),
            Err(e) => panic!("{e} (url {}; run scripts/services to start MariaDB)", url()),
        }
    }
}

impl Drop for Databases {
    fn drop(&mut self) {
        let n = self.made.load(Ordering::Relaxed);
        let prefix = self.prefix.clone();
        // The test's runtime is gone or going; drop the databases from a small one of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let Ok(mut conn) = mysql_async::Conn::from_url(url()).await else {
                    return;
                };
                for i in 0..n {
                    let _ = conn
                        .query_drop(format!("DROP DATABASE IF EXISTS `{prefix}_{i}`"))
                        .await;
                }
                let _ = conn.disconnect().await;
            })
        })
        .join();
    }
}

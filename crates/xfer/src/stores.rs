//! The shards a configuration names, opened: the embedded store's data directory, or
//! PostgreSQL schemas spread over the listed databases. [`Opened`] is what the server runs
//! on and how it is closed.

use crate::config::{ServeConfig, StoreKind};
use crate::metrics::Stopwatch;
use std::sync::Arc;
use xfer_core::Clock;
use xfer_store::Store;
use xfer_store_embedded::{Embedded, EmbeddedConfig};
use xfer_store_postgres::{PostgresConfig, PostgresStore};

/// Opened shards, in shard order.
pub struct Opened {
    /// One store per shard.
    pub shards: Vec<Arc<dyn Store>>,
    closer: Closer,
}

enum Closer {
    Embedded(Embedded),
    Nothing,
}

impl Opened {
    /// Closes what needs closing (the embedded store writes a last checkpoint); blocking.
    pub fn close(self) -> Result<(), String> {
        drop(self.shards);
        match self.closer {
            Closer::Embedded(store) => store.close().map_err(|e| e.to_string()),
            Closer::Nothing => Ok(()),
        }
    }
}

/// The schema of PostgreSQL shard `n`.
pub fn postgres_schema(n: usize) -> String {
    format!("xfer_shard_{n}")
}

/// Opens the configured shards (recovering the embedded store; migrating PostgreSQL).
pub async fn open(cfg: &ServeConfig, clock: Arc<dyn Clock>) -> Result<Opened, String> {
    let watch = Stopwatch::start();
    match cfg.store {
        StoreKind::Embedded => {
            let dir = cfg.data_dir.clone();
            let store_cfg = EmbeddedConfig {
                shards: cfg.shards,
                ..EmbeddedConfig::default()
            };
            let (store, report) = tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("data directory {}: {e}", dir.display()))?;
                Embedded::open(&dir, store_cfg, clock)
                    .map_err(|e| format!("data directory {}: {e}", dir.display()))
            })
            .await
            .map_err(|e| e.to_string())??;
            tracing::info!(
                data_dir = %cfg.data_dir.display(),
                shards = cfg.shards,
                accounts = report.accounts,
                replayed = report.replayed,
                torn_tail = ?report.torn_tail,
                ms = (watch.seconds() * 1e3) as u64,
                "store opened"
            );
            let shards = store
                .shards()
                .into_iter()
                .map(|s| s as Arc<dyn Store>)
                .collect();
            Ok(Opened {
                shards,
                closer: Closer::Embedded(store),
            })
        }
        StoreKind::Postgres => {
            let mut shards: Vec<Arc<dyn Store>> = Vec::new();
            for n in 0..usize::from(cfg.shards) {
                let url = &cfg.postgres_urls[n % cfg.postgres_urls.len()];
                let mut pg = PostgresConfig::new(url.clone(), postgres_schema(n));
                // Every call the coalescer lets through, plus the sweeper's scans.
                pg.pool_size = cfg.store_calls_per_shard + 2;
                let store = PostgresStore::open(&pg)
                    .await
                    .map_err(|e| format!("shard {n}: {e}"))?;
                tracing::info!(shard = n, at = store.name(), "postgres shard opened");
                shards.push(Arc::new(store));
            }
            tracing::info!(
                shards = cfg.shards,
                databases = cfg.postgres_urls.len(),
                ms = (watch.seconds() * 1e3) as u64,
                "store opened"
            );
            Ok(Opened {
                shards,
                closer: Closer::Nothing,
            })
        }
    }
}

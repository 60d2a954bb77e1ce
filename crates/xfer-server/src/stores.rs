//! The shards a configuration names, opened: the embedded store's data directory,
//! PostgreSQL schemas spread over the listed databases, MySQL and MongoDB databases spread
//! over the listed servers, Redis key prefixes spread over the listed servers (or one
//! Cluster), or an explicit `[[shard]]` list that mixes them (each shard its own store;
//! `[[route]]` rules place accounts). [`Opened`] is what the server runs on and how it is
//! closed.

use crate::config::{ServeConfig, ShardSpec, StoreKind};
use crate::metrics::Stopwatch;
use std::sync::Arc;
use xfer_core::Clock;
use xfer_store::Store;
use xfer_store_embedded::{Embedded, EmbeddedConfig};
use xfer_store_mongo::{MongoConfig, MongoStore};
use xfer_store_mysql::{MysqlConfig, MysqlStore};
use xfer_store_postgres::{PostgresConfig, PostgresStore};
use xfer_store_redis::{RedisConfig, RedisStore};

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
    /// The embedded store's count of log syncs, if there is one.
    pub fn log_syncs(&self) -> Option<xfer_store_embedded::SyncCount> {
        match &self.closer {
            Closer::Embedded(store) => Some(store.log_syncs()),
            Closer::Nothing => None,
        }
    }

    /// Closes what needs closing (the embedded store writes a last checkpoint); blocking.
    pub fn close(self) -> Result<(), String> {
        drop(self.shards);
        match self.closer {
            Closer::Embedded(store) => store.close().map_err(|e| e.to_string()),
            Closer::Nothing => Ok(()),
        }
    }
}

/// The schema of PostgreSQL shard `n`; also the database of MySQL and MongoDB shard `n`
/// and the hash tag of Redis shard `n`.
pub fn postgres_schema(n: usize) -> String {
    format!("xfer_shard_{n}")
}

/// Where the Redis shard `spec`, number `n` in the list, lives (`None` for other stores).
pub fn redis_config(spec: &ShardSpec, n: usize) -> Option<RedisConfig> {
    let ShardSpec::Redis {
        url,
        cluster,
        prefix,
    } = spec
    else {
        return None;
    };
    let prefix = prefix.clone().unwrap_or_else(|| postgres_schema(n));
    Some(match url {
        Some(url) => RedisConfig::new(url.clone(), prefix),
        None => RedisConfig::cluster(cluster.clone(), prefix),
    })
}

/// The shard list a configuration describes: its explicit `[[shard]]` list, or `shards`
/// shards of `store`.
pub fn layout(cfg: &ServeConfig) -> Vec<ShardSpec> {
    if !cfg.layout.is_empty() {
        return cfg.layout.clone();
    }
    (0..usize::from(cfg.shards))
        .map(|n| match cfg.store {
            StoreKind::Embedded => ShardSpec::Embedded,
            StoreKind::Postgres => ShardSpec::Postgres {
                url: cfg.postgres_urls[n % cfg.postgres_urls.len()].clone(),
                schema: None,
            },
            StoreKind::Mysql => ShardSpec::Mysql {
                url: cfg.mysql_urls[n % cfg.mysql_urls.len()].clone(),
                database: None,
            },
            StoreKind::Mongodb => ShardSpec::Mongodb {
                url: cfg.mongodb_urls[n % cfg.mongodb_urls.len()].clone(),
                database: None,
            },
            StoreKind::Redis if cfg.redis_cluster => ShardSpec::Redis {
                url: None,
                cluster: cfg.redis_urls.clone(),
                prefix: None,
            },
            StoreKind::Redis => ShardSpec::Redis {
                url: Some(cfg.redis_urls[n % cfg.redis_urls.len()].clone()),
                cluster: vec![],
                prefix: None,
            },
        })
        .collect()
}

/// Opens the configured shards (recovering the embedded store; migrating PostgreSQL), in
/// the order of [`layout`].
pub async fn open(cfg: &ServeConfig, clock: Arc<dyn Clock>) -> Result<Opened, String> {
    let watch = Stopwatch::start();
    let layout = layout(cfg);
    let embedded_count = layout
        .iter()
        .filter(|s| matches!(s, ShardSpec::Embedded))
        .count();
    let mut embedded = match embedded_count {
        0 => None,
        n => Some(open_embedded(cfg, clock.clone(), n).await?),
    };
    let mut embedded_shards = embedded
        .as_ref()
        .map(|e| e.shards())
        .unwrap_or_default()
        .into_iter();
    let mut shards: Vec<Arc<dyn Store>> = Vec::with_capacity(layout.len());
    let mut warned = std::collections::BTreeSet::new();
    for (n, spec) in layout.iter().enumerate() {
        match spec {
            ShardSpec::Embedded => {
                let s = embedded_shards
                    .next()
                    .expect("one embedded shard per entry");
                shards.push(s);
            }
            ShardSpec::Postgres { url, schema } => {
                let schema = schema.clone().unwrap_or_else(|| postgres_schema(n));
                let mut pg = PostgresConfig::new(url.clone(), schema);
                // Every call the coalescer lets through, plus the sweeper's scans.
                pg.pool_size = cfg.store_calls_per_shard + 2;
                let store = match PostgresStore::open(&pg).await {
                    Ok(s) => s,
                    Err(e) => return fail(embedded.take(), format!("shard {n}: {e}")).await,
                };
                tracing::info!(shard = n, at = store.name(), "postgres shard opened");
                shards.push(Arc::new(store));
            }
            ShardSpec::Mysql { url, database } => {
                let database = database.clone().unwrap_or_else(|| postgres_schema(n));
                let mut my = MysqlConfig::new(url.clone(), database);
                // Every call the coalescer lets through, plus the sweeper's scans.
                my.pool_size = cfg.store_calls_per_shard + 2;
                let store = match MysqlStore::open(&my).await {
                    Ok(s) => s,
                    Err(e) => return fail(embedded.take(), format!("shard {n}: {e}")).await,
                };
                // Loudly, at every start, once per server: acknowledged transfers are only as
                // safe as the server.
                match store.durability().await {
                    Ok(d) => {
                        if let Some(w) = d.warning() {
                            if warned.insert(url.clone()) {
                                tracing::warn!(shard = n, "{w}");
                            }
                        }
                        tracing::info!(
                            shard = n,
                            at = store.name(),
                            version = d.version,
                            "mysql shard opened"
                        );
                    }
                    Err(e) => return fail(embedded.take(), format!("shard {n}: {e}")).await,
                }
                shards.push(Arc::new(store));
            }
            ShardSpec::Mongodb { url, database } => {
                let database = database.clone().unwrap_or_else(|| postgres_schema(n));
                let mut mc = MongoConfig::new(url.clone(), database);
                // A batch updates its documents at once: room for every call the coalescer
                // lets through to carry a few.
                mc.pool_size =
                    u32::try_from(8 * (cfg.store_calls_per_shard + 2)).unwrap_or(u32::MAX);
                let store = match MongoStore::open(&mc, clock.clone()).await {
                    Ok(s) => s,
                    Err(e) => return fail(embedded.take(), format!("shard {n}: {e}")).await,
                };
                match store.durability().await {
                    Ok(d) => {
                        if let Some(w) = d.warning() {
                            if warned.insert(url.clone()) {
                                tracing::warn!(shard = n, "{w}");
                            }
                        }
                        tracing::info!(
                            shard = n,
                            at = store.name(),
                            version = d.version,
                            topology = d.topology,
                            "mongodb shard opened"
                        );
                    }
                    Err(e) => return fail(embedded.take(), format!("shard {n}: {e}")).await,
                }
                shards.push(Arc::new(store));
            }
            ShardSpec::Redis { .. } => {
                let rc = redis_config(spec, n).expect("a redis shard");
                let store = match RedisStore::open(&rc).await {
                    Ok(s) => s,
                    Err(e) => return fail(embedded.take(), format!("shard {n}: {e}")).await,
                };
                // Loudly, at every start, once per master: acknowledged transfers are only as
                // safe as the server.
                for d in store.durability().await {
                    if let Some(w) = d.warning() {
                        if warned.insert(d.node.clone()) {
                            tracing::warn!(shard = n, "{w}");
                        }
                    }
                }
                tracing::info!(shard = n, store = ?store, "redis shard opened");
                shards.push(Arc::new(store));
            }
        }
    }
    tracing::info!(
        shards = shards.len(),
        embedded = embedded_count,
        databases = shards.len() - embedded_count,
        ms = (watch.seconds() * 1e3) as u64,
        "store opened"
    );
    Ok(Opened {
        shards,
        closer: match embedded {
            Some(e) => Closer::Embedded(e),
            None => Closer::Nothing,
        },
    })
}

/// Drops the MySQL and MongoDB databases `layout` names (other shards are left alone): the
/// bench's and the demos' own databases, after a run.
pub async fn drop_databases(layout: &[ShardSpec]) -> Result<(), String> {
    for spec in layout {
        match spec {
            ShardSpec::Mysql {
                url,
                database: Some(db),
            } => {
                let store = MysqlStore::open(&MysqlConfig::new(url.clone(), db.clone()))
                    .await
                    .map_err(|e| e.to_string())?;
                store.destroy().await.map_err(|e| e.to_string())?;
            }
            ShardSpec::Mongodb {
                url,
                database: Some(db),
            } => {
                let cfg = MongoConfig::new(url.clone(), db.clone());
                let store = MongoStore::open(&cfg, Arc::new(xfer_core::SystemClock))
                    .await
                    .map_err(|e| e.to_string())?;
                store.destroy().await.map_err(|e| e.to_string())?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Closes the embedded store opened so far, then answers the error that stopped the opening.
async fn fail(embedded: Option<Embedded>, error: String) -> Result<Opened, String> {
    if let Some(e) = embedded {
        let _ = tokio::task::spawn_blocking(move || e.close()).await;
    }
    Err(error)
}

/// The embedded store in `data_dir` with `count` shards.
async fn open_embedded(
    cfg: &ServeConfig,
    clock: Arc<dyn Clock>,
    count: usize,
) -> Result<Embedded, String> {
    let watch = Stopwatch::start();
    let dir = cfg.data_dir.clone();
    let store_cfg = EmbeddedConfig {
        shards: u16::try_from(count).map_err(|_| "too many embedded shards")?,
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
        shards = count,
        accounts = report.accounts,
        replayed = report.replayed,
        torn_tail = ?report.torn_tail,
        ms = (watch.seconds() * 1e3) as u64,
        "embedded store opened"
    );
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_shard_n_lives_on_url_n_mod_the_count_in_its_default_database() {
        let cfg = ServeConfig {
            store: StoreKind::Mysql,
            shards: 3,
            mysql_urls: vec!["mysql://a:1".into(), "mysql://b:2".into()],
            ..ServeConfig::default()
        };
        let urls: Vec<String> = layout(&cfg)
            .into_iter()
            .map(|s| match s {
                ShardSpec::Mysql {
                    url,
                    database: None,
                } => url,
                other => panic!("not a mysql shard in its default database: {other:?}"),
            })
            .collect();
        assert_eq!(urls, ["mysql://a:1", "mysql://b:2", "mysql://a:1"]);
    }
}

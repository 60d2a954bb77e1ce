//! `xfer serve` and `xfer worker` as a library: the HTTP API over the engine, its
//! configuration and the stores it opens. The `xfer` binary runs it; tests start the real
//! server in-process (`Server::start` on port 0) and talk to it over HTTP.
//!
//! Imports go one way, down this list:
//!
//! | module | what |
//! |---|---|
//! | `server` | start, serve and stop gracefully; what every process runs over the shards |
//! | `worker` | `xfer worker`: sweeps without an API |
//! | `console` | the operator console at `/console`: pages over the service, sessions from tokens, CSRF-checked actions |
//! | `api` | the router built from `routes`, the scope guard, the handlers |
//! | `openapi` | the OpenAPI document |
//! | `routes` | every endpoint and the scope it needs |
//! | `sink` | the change feed published at least once (NATS JetStream, RabbitMQ, webhooks), each cursor in a file |
//! | `connections` | the listener's bound on open connections |
//! | `listings` | accounts, history, canceled transfers and the audit, as the service's |
//! | `stats` | the overview: answers and latency, in flight, stuck, canceled in the last hour, the audit, each shard's health |
//! | `transfer_list` | transfers newest first, filtered: each shard's feed read backwards, or an account's history |
//! | `feed` | the change feed, every shard's merged after a cursor, as the service's |
//! | `service` | what handlers call: submit, settle, reads, sweeps; results and `ExecError`, no status |
//! | `answer` | how one transfer request was answered |
//! | `stores` | opening the configured shards (embedded, PostgreSQL, MySQL, MongoDB, Redis, mixed); dropping a run's own databases |
//! | `config` | the settings: defaults, file, environment, flags |
//! | `auth` | bearer tokens and scopes |
//! | `metrics` | Prometheus metrics |
//! | `wire` | request and response JSON, and the checks that turn requests into domain values |
//! | `catalog` | the declared assets as this process knows them, and decimal amounts in their scale |
//! | `error` | `ApiError`: the one error shape and the one code → status mapping |

pub mod answer;
pub mod api;
pub mod auth;
pub mod catalog;
pub mod config;
pub mod connections;
pub mod console;
pub mod error;
pub mod feed;
pub mod hold;
pub mod listings;
pub mod metrics;
pub mod openapi;
pub mod refund;
pub mod routes;
pub mod server;
pub mod service;
pub mod sink;
pub mod stats;
pub mod stores;
pub mod transfer_list;
pub mod wire;
pub mod worker;

pub use config::ServeConfig;
pub use server::Server;

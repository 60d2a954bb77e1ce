//! `xfer serve`, the `xfer` command line and the demos, as a library so that tests start
//! the real server in-process (`Server::start` on port 0) and talk to it over HTTP.
//!
//! | module | what |
//! |---|---|
//! | `config` | `xfer serve`'s settings: defaults, file, environment, flags |
//! | `auth` | bearer tokens and scopes |
//! | `error` | `ApiError`: the one error shape and the one code → status mapping |
//! | `wire` | request and response JSON, and the checks that turn requests into domain values |
//! | `service` | what handlers call: submit (with pre-checks), settle, reads, sweeps |
//! | `combine` | concurrent small submits driven together as one batch |
//! | `api` | the routes table and the handlers |
//! | `openapi` | the OpenAPI document |
//! | `metrics` | Prometheus metrics |
//! | `server` | start, serve and stop gracefully |
//! | `connections` | the listener's bound on open connections |
//! | `client` | an HTTP client of the API |
//! | `cli` | the `xfer` command |
//! | `bench` | `xfer bench`: throughput and latency on the embedded store, library or HTTP |
//! | `demo` | `xfer demo bank / flash-sale / points-and-cash` |

pub mod api;
pub mod auth;
pub mod baseline;
pub mod bench;
pub mod cli;
pub mod client;
pub mod combine;
pub mod config;
pub mod connections;
pub mod demo;
pub mod error;
pub mod metrics;
pub mod openapi;
pub mod server;
pub mod service;
pub mod stores;
pub mod wire;
pub mod worker;

pub use client::Client;
pub use config::ServeConfig;
pub use server::Server;

//! Where the clients submit: the engine as a library, or the HTTP API, and the states
//! they read back.

use crate::baseline::Native;
use crate::latency::*;
use crate::native_mysql::NativeMysql;
use crate::native_redis::NativeRedis;
use serde_json::{json, Value};
use std::sync::Arc;
use xfer_client::{Client, Connection};
use xfer_core::{TransferId, TransferKind, TransferSpec, TransferState};
use xfer_engine::{Machine, Outcome};
use xfer_server::server::Server;
use xfer_server::wire::{BatchIn, TransferIn};

/// Of a transfer answered, the bench reads only its state.
#[derive(serde::Deserialize)]
pub(crate) struct Stated {
    pub(crate) state: TransferState,
}

#[derive(serde::Deserialize)]
pub(crate) struct BatchAnswer {
    pub(crate) results: Vec<BatchItem>,
}

#[derive(serde::Deserialize)]
pub(crate) struct BatchItem {
    pub(crate) transfer: Option<Stated>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// Where requests go.
#[derive(Clone)]
pub(crate) enum Target {
    Library(Arc<Server>),
    Http(Client),
    Native(Native),
    NativeRedis(NativeRedis),
    NativeMysql(NativeMysql),
}

impl Target {
    /// Submits `specs` (and captures the holds) and answers the final states; a library
    /// target tells `decisions` of each decision. Over HTTP the submit goes on the
    /// client's own connection `conn`, the captures over the shared client, at once.
    pub(crate) async fn run(
        &self,
        conn: Option<&mut Connection>,
        specs: Vec<TransferSpec>,
        decisions: &DecidedClock,
    ) -> Result<Vec<TransferState>, String> {
        let holds = matches!(
            specs.first().map(|s| s.kind),
            Some(TransferKind::Hold { .. })
        );
        let ids: Vec<TransferId> = specs.iter().map(|s| s.id.clone()).collect();
        let mut states = match self {
            Target::Library(s) => {
                let e = s.service().executor();
                finished_states(e.submit_many_observed(specs, Some(decisions)).await)?
            }
            Target::Http(_) => {
                let conn = conn.ok_or("an HTTP client needs its connection")?;
                http_submit(conn, &specs).await?
            }
            Target::Native(n) => {
                let mut out = Vec::with_capacity(specs.len());
                for s in &specs {
                    out.push(n.transfer(s).await?);
                }
                return Ok(out);
            }
            Target::NativeRedis(n) => {
                let mut out = Vec::with_capacity(specs.len());
                for s in &specs {
                    out.push(n.transfer(s).await?);
                }
                return Ok(out);
            }
            Target::NativeMysql(n) => {
                let mut out = Vec::with_capacity(specs.len());
                for s in &specs {
                    out.push(n.transfer(s).await?);
                }
                return Ok(out);
            }
        };
        if holds {
            let held: Vec<TransferId> = ids
                .into_iter()
                .zip(&states)
                .filter(|(_, s)| **s == TransferState::Held)
                .map(|(id, _)| id)
                .collect();
            let captured = match self {
                Target::Library(s) => {
                    let e = s.service().executor();
                    let now = e.clock().now();
                    let starts = held
                        .iter()
                        .map(|id| Machine::capture(id.clone(), e.owner().clone(), now, *e.config()))
                        .collect();
                    finished_states(e.drive(starts).await)?
                }
                Target::Native(_) | Target::NativeRedis(_) | Target::NativeMysql(_) => {
                    unreachable!("answered above")
                }
                Target::Http(c) => {
                    let calls = held.iter().map(|id| async move {
                        let path = format!(
                            "/v1/transfers/{}/capture",
                            xfer_client::segment(id.as_str())
                        );
                        c.post(&path, &json!({})).await
                    });
                    let mut out = Vec::new();
                    for a in futures_util::future::join_all(calls).await {
                        out.push(state_of(&a?.ok()?)?);
                    }
                    out
                }
            };
            let mut captured = captured.into_iter();
            for s in states.iter_mut().filter(|s| **s == TransferState::Held) {
                *s = captured.next().unwrap_or(*s);
            }
        }
        Ok(states)
    }
}

pub(crate) fn finished_states(
    outcomes: Vec<Result<Outcome, xfer_engine::ExecError>>,
) -> Result<Vec<TransferState>, String> {
    outcomes
        .into_iter()
        .map(|o| match o.map_err(|e| e.to_string())? {
            Outcome::Finished(r) | Outcome::Held(r) | Outcome::Left(r) => Ok(r.state),
            other => Err(format!("{other:?}")),
        })
        .collect()
}

pub(crate) fn state_of(v: &Value) -> Result<TransferState, String> {
    let s = v["state"].as_str().unwrap_or("");
    serde_json::from_value(json!(s)).map_err(|_| format!("no state in {v}"))
}

pub(crate) async fn http_submit(
    conn: &mut Connection,
    specs: &[TransferSpec],
) -> Result<Vec<TransferState>, String> {
    let (path, body) = match specs {
        [one] => ("/v1/transfers", serde_json::to_vec(&TransferIn::from(one))),
        _ => {
            let transfers = specs.iter().map(TransferIn::from).collect();
            (
                "/v1/transfers/batch",
                serde_json::to_vec(&BatchIn { transfers }),
            )
        }
    };
    let bytes = conn
        .post_json(path, body.map_err(|e| e.to_string())?)
        .await?;
    let unreadable = |e: serde_json::Error| format!("POST {path}: answer unreadable: {e}");
    if specs.len() == 1 {
        let t: Stated = serde_json::from_slice(bytes).map_err(unreadable)?;
        return Ok(vec![t.state]);
    }
    let answer: BatchAnswer = serde_json::from_slice(bytes).map_err(unreadable)?;
    answer
        .results
        .into_iter()
        .map(|r| match r.transfer {
            Some(t) => Ok(t.state),
            None => Err(format!(
                "batch item failed: {}",
                r.error.unwrap_or(Value::Null)
            )),
        })
        .collect()
}

//! `xfer webhook`: the webhook endpoints of a server (admin), as a client of
//! `/v1/webhooks`: register one, list, show how its deliveries go, remove it, read its dead
//! letters and send one again.

use crate::table::{print_json, table, text};
use clap::Subcommand;
use serde_json::{json, Value};
use xfer_client::{segment, Client};

/// Webhook subcommands.
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Register an endpoint: every change from now on (of the given types) is POSTed to it,
    /// signed with its secret (printed once, here).
    Add {
        /// Where to POST: http:// or https:// (not `url`: that is the server's flag).
        #[arg(value_name = "URL")]
        endpoint: String,
        /// Only these event types (repeat the flag): accepted, held, captured, voided,
        /// expired, done, canceled, refunded. Default: every type.
        #[arg(long = "type")]
        types: Vec<String>,
        /// The HMAC key (default: one made by the server).
        #[arg(long)]
        secret: Option<String>,
        /// A note for people.
        #[arg(long)]
        description: Option<String>,
    },
    /// List the endpoints (without secrets).
    List,
    /// Show an endpoint and how its deliveries went.
    Show {
        /// Its id.
        id: String,
    },
    /// Remove an endpoint (its deliveries stop; its dead letters are deleted).
    Remove {
        /// Its id.
        id: String,
    },
    /// The events an endpoint could not be sent after every attempt, oldest first.
    DeadLetters {
        /// Its id.
        id: String,
        /// Continue after this number (the previous page's `next_after`).
        #[arg(long)]
        after: Option<u64>,
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Send a dead letter once more, now; delivered, it leaves the list.
    Redeliver {
        /// The endpoint's id.
        id: String,
        /// The event's id (`<transfer>/<type>`).
        event: String,
    },
}

fn endpoints_table(items: &[Value]) {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|w| {
            let types = match w["types"].as_array() {
                Some(t) => t.iter().map(text).collect::<Vec<_>>().join(","),
                None => "all".to_string(),
            };
            vec![
                text(&w["id"]),
                text(&w["url"]),
                types,
                text(&w["description"]),
            ]
        })
        .collect();
    table(&["ID", "URL", "TYPES", "DESCRIPTION"], &rows);
}

/// Runs `command` against the server of `client`.
pub async fn run(command: WebhookCommand, client: &Client, json_out: bool) -> Result<(), String> {
    let path = |id: &str| format!("/v1/webhooks/{}", segment(id));
    match command {
        WebhookCommand::Add {
            endpoint,
            types,
            secret,
            description,
        } => {
            let mut body = json!({"url": endpoint});
            if !types.is_empty() {
                body["types"] = json!(types);
            }
            if let Some(s) = secret {
                body["secret"] = json!(s);
            }
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            let w = client.post("/v1/webhooks", &body).await?.ok()?;
            if json_out {
                print_json(&w);
            } else {
                endpoints_table(std::slice::from_ref(&w));
                println!("secret (shown only now): {}", text(&w["secret"]));
            }
        }
        WebhookCommand::List => {
            let page = client.get("/v1/webhooks").await?.ok()?;
            if json_out {
                print_json(&page);
            } else {
                endpoints_table(page["webhooks"].as_array().map_or(&[], |v| v));
            }
        }
        WebhookCommand::Show { id } => {
            let w = client.get(&path(&id)).await?.ok()?;
            if json_out {
                print_json(&w);
            } else {
                endpoints_table(std::slice::from_ref(&w));
                let s = &w["status"];
                let running = match &s["halted"] {
                    Value::String(why) => format!("halted: {why}"),
                    _ => "running".to_string(),
                };
                println!(
                    "{running}; delivered {}, failed attempts {}, dead letters {}; last error: {}",
                    text(&s["delivered"]),
                    text(&s["failed_attempts"]),
                    text(&s["dead_letters"]),
                    text(&s["last_error"])
                );
            }
        }
        WebhookCommand::Remove { id } => {
            let gone = client
                .send(xfer_client::Method::DELETE, &path(&id), None)
                .await?
                .ok()?;
            if json_out {
                print_json(&gone);
            } else {
                println!("removed {id}");
            }
        }
        WebhookCommand::DeadLetters { id, after, limit } => {
            let mut p = format!("{}/dead_letters?limit={limit}", path(&id));
            if let Some(a) = after {
                p.push_str(&format!("&after={a}"));
            }
            let page = client.get(&p).await?.ok()?;
            if json_out {
                print_json(&page);
            } else {
                let rows: Vec<Vec<String>> = page["dead_letters"]
                    .as_array()
                    .map_or(&[][..], |v| v)
                    .iter()
                    .map(|l| {
                        vec![
                            text(&l["seq"]),
                            text(&l["event_id"]),
                            text(&l["attempts"]),
                            text(&l["last_error"]),
                        ]
                    })
                    .collect();
                table(&["SEQ", "EVENT", "ATTEMPTS", "LAST ERROR"], &rows);
                if let Some(next) = page["next_after"].as_u64() {
                    println!("more: --after {next}");
                }
            }
        }
        WebhookCommand::Redeliver { id, event } => {
            let p = format!("{}/dead_letters/{}/redeliver", path(&id), segment(&event));
            let a = client.post(&p, &json!({})).await?.ok()?;
            if json_out {
                print_json(&a);
            } else {
                println!("{event}: delivered, out of the dead letters");
            }
        }
    }
    Ok(())
}

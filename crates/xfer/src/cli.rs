//! The `xfer` command line: `serve`, the API's operations against a server (`--url`,
//! `--token`), printed as readable tables or, with `--json`, as the API's JSON, and the
//! demos.

use crate::demo::DemoCommand;
pub use crate::remote::Remote;
use crate::table::{
    accounts_table, assets_table, audit_table, print_json, table, text, transfers_table,
};
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};
use xfer_client::{segment, Client};
use xfer_server::config::ServeArgs;
use xfer_server::wire::{
    AccountCreate, AssetIn, CaptureIn, ExtendIn, HoldIn, MetadataChange, PostingIn, RefundIn,
    TransferIn,
};

/// The `xfer` command.
#[derive(Debug, Parser)]
#[command(
    name = "xfer",
    version,
    about = "Atomic transfers between accounts on stores that only update one record atomically"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// How to reach the server.
    #[command(flatten)]
    pub remote: Remote,
}

impl Cli {
    /// Parses the command line, refusing a client flag given to a subcommand that would
    /// ignore it (see [`misplaced_flag`]).
    pub fn parse_checked() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().get_matches();
        if let Some(message) = misplaced_flag(&matches) {
            Cli::command()
                .error(clap::error::ErrorKind::ArgumentConflict, message)
                .exit();
        }
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// The flags each subcommand ignores, by clap id, with the flag it takes instead. The
/// client's flags (`--url`, `--token`, `--json`) are global so that they may stand anywhere
/// on a client command's line, and `worker` shares serve's settings: given where they do
/// nothing, they would be ignored silently (`serve --token` would start without auth).
const IGNORED: &[(&str, &str, &str, &str)] = &[
    // (subcommand, id, flag, what to do instead)
    ("serve", "token", "--token", SERVER_TOKENS),
    (
        "serve",
        "url",
        "--url",
        "the address to listen on is `--listen ADDR`",
    ),
    (
        "serve",
        "json",
        "--json",
        "JSON log lines are `--log-format json`",
    ),
    ("worker", "token", "--token", SERVER_TOKENS),
    ("worker", "url", "--url", WORKER_NO_API),
    (
        "worker",
        "json",
        "--json",
        "JSON log lines are `--log-format json`",
    ),
    ("worker", "listen", "--listen", WORKER_NO_API),
    ("worker", "tokens", "--auth-token", WORKER_NO_API),
    (
        "worker",
        "body_limit_bytes",
        "--body-limit-bytes",
        WORKER_NO_API,
    ),
    (
        "worker",
        "shutdown_grace_ms",
        "--shutdown-grace-ms",
        WORKER_NO_API,
    ),
    (
        "worker",
        "max_connections",
        "--max-connections",
        WORKER_NO_API,
    ),
    ("bench", "token", "--token", BENCH_OWN_SERVER),
    ("bench", "url", "--url", BENCH_OWN_SERVER),
    ("demo", "json", "--json", "a demo prints its own report"),
    (
        "consume",
        "json",
        "--json",
        "the consumer publishes the API's JSON; its log is text",
    ),
];

const SERVER_TOKENS: &str = "it is the client's bearer token; the server's tokens are \
                             `--auth-token SECRET:read,write` (repeat it, or XFER_TOKENS)";
const WORKER_NO_API: &str = "a worker serves no API; it is a setting of `xfer serve`";
const BENCH_OWN_SERVER: &str = "the bench runs its own stores and server; see `xfer bench --help`";

/// A flag given on the command line to a subcommand that would ignore it (see `IGNORED`;
/// a demo takes `--url` and `--token` only with `--remote`), as an error that names the
/// flag that works there. The environment (`XFER_URL`, `XFER_TOKEN`) is ambient and not
/// checked.
pub fn misplaced_flag(matches: &clap::ArgMatches) -> Option<String> {
    let (name, sub) = matches.subcommand()?;
    let given = |id: &str| {
        [matches, sub].iter().any(|m| {
            m.try_get_raw(id).is_ok()
                && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
        })
    };
    let refuse = |flag: &str, instead: &str| {
        Some(format!(
            "`{flag}` does not apply to `xfer {name}`: {instead}"
        ))
    };
    if let Some((_, _, flag, instead)) = IGNORED
        .iter()
        .find(|(command, id, _, _)| *command == name && given(id))
    {
        return refuse(flag, instead);
    }
    let remote = sub.subcommand().is_some_and(|(_, demo)| {
        demo.try_get_one::<bool>("remote")
            .is_ok_and(|r| r == Some(&true))
    });
    match ["url", "token"].into_iter().find(|id| given(id)) {
        Some(id) if name == "demo" && !remote => refuse(
            &format!("--{id}"),
            "a demo starts its own server unless given `--remote`, which uses the server \
             at --url",
        ),
        _ => None,
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: the HTTP API, executors and the sweeper (on the embedded store by
    /// default, or on PostgreSQL, MySQL, MongoDB or Redis with --store).
    Serve(ServeArgs),
    /// Run a worker: executor and sweeper passes over shards that servers share (--store
    /// postgres, mysql, mongodb or redis: an embedded data directory belongs to one
    /// process), no API;
    /// takes serve's store and timing settings. Any number may run.
    Worker(ServeArgs),
    /// Declare, list or show assets (an account's asset must be declared first).
    #[command(subcommand)]
    Asset(AssetCommand),
    /// Create, show, list or close accounts.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Move money: one posting (--from/--to/--asset/--amount) or several (--posting).
    Transfer(TransferArgs),
    /// Reserve a transfer until it is captured, voided or expires.
    Hold {
        /// The transfer.
        #[command(flatten)]
        transfer: TransferArgs,
        /// How long the hold lives uncaptured, in ms.
        #[arg(long, default_value_t = 60_000)]
        ttl_ms: u64,
    },
    /// Capture a hold (post it), whole or in part.
    Capture {
        /// The hold's id.
        id: String,
        /// Capture in part: how much to post, in minor units or as a decimal in the asset's
        /// scale (`12.34`), once per posting of the hold, in order; the rest is released in
        /// the same step (default: everything).
        #[arg(long = "amount", value_name = "AMOUNT")]
        amounts: Vec<String>,
    },
    /// Void a hold (release it).
    Void {
        /// The hold's id.
        id: String,
    },
    /// Move a hold's expiry later, before it passes.
    Extend {
        /// The hold's id.
        id: String,
        /// The new expiry, in milliseconds since the Unix epoch.
        #[arg(long, conflicts_with = "ttl_ms", required_unless_present = "ttl_ms")]
        expires_at_ms: Option<u64>,
        /// The new expiry, this many milliseconds from the server's now.
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// Refund a done transfer with a linked, offsetting transfer.
    Refund {
        /// The done transfer.
        id: String,
        /// The refund's own id, its idempotency key (default: `<id>.refund`; needed with
        /// `--amount`, since one transfer may have several partial refunds).
        #[arg(long)]
        refund_id: Option<String>,
        /// A partial refund: how much to move back, in minor units or as a decimal in the
        /// asset's scale (`12.34`), once per posting of the original, in order (default:
        /// everything). Needs `--refund-id`.
        #[arg(long = "amount", value_name = "AMOUNT", requires = "refund_id")]
        amounts: Vec<String>,
        /// Client data for the refund.
        #[arg(long, default_value = "")]
        metadata: String,
    },
    /// Re-drive an unfinished transfer now (admin).
    Redrive {
        /// The transfer's id.
        id: String,
    },
    /// Show one transfer.
    Get {
        /// The transfer's id.
        id: String,
    },
    /// Every transfer that names an account, whatever its end, newest first.
    History {
        /// The account.
        account: String,
        /// Continue from this cursor (the `next_before` of the previous page).
        #[arg(long)]
        before: Option<u64>,
        /// Page size.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Only transfers in this state (done, canceled, held, …).
        #[arg(long)]
        state: Option<String>,
    },
    /// Transfers newest first, filtered (back to the change feed's retention; by --account
    /// on every store).
    Transfers {
        /// Only transfers now in this state (done, canceled, held, …).
        #[arg(long)]
        state: Option<String>,
        /// Only transfers with a posting from or to this account.
        #[arg(long)]
        account: Option<String>,
        /// Only transfers with a posting of this asset.
        #[arg(long)]
        asset: Option<String>,
        /// Only transfers whose id starts with this.
        #[arg(long)]
        id_prefix: Option<String>,
        /// Only transfers whose metadata (a JSON object) has key=value.
        #[arg(long)]
        metadata: Option<String>,
        /// Only transfers accepted at or after this time (ms since the epoch).
        #[arg(long)]
        created_since_ms: Option<u64>,
        /// Only transfers accepted before this time (ms since the epoch).
        #[arg(long)]
        created_before_ms: Option<u64>,
        /// Continue from this cursor (the `next_before` of the previous page).
        #[arg(long)]
        before: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Totals per asset, transfers in flight, leaks (admin). Exits 3 if not clean.
    Audit {
        /// Also compute every balance again from zero out of the transfer records and name
        /// the accounts that differ (reads every transfer: minutes on a large store).
        #[arg(long)]
        replay: bool,
        /// With --replay: how long past its horizon a tombstone may wait for the sweeper
        /// before it is listed as overdue (default ten minutes).
        #[arg(long, requires = "replay")]
        grace_ms: Option<u64>,
    },
    /// Unfinished transfers nobody is finishing (admin).
    Stuck {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Canceled transfers with their reasons (admin).
    Canceled {
        /// Continue after this id.
        #[arg(long)]
        after: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// The articles' scenarios, end to end, finishing with the audit.
    #[command(subcommand)]
    Demo(DemoCommand),
    /// Register, list, show and remove webhook endpoints; read and resend their dead
    /// letters (admin).
    #[command(subcommand)]
    Webhook(crate::webhook::WebhookCommand),
    /// Take transfer requests (the JSON of `POST /v1/transfers`) from a NATS JetStream
    /// stream or a RabbitMQ queue, submit each to the server at --url by its id (a message
    /// delivered again is answered from the record, never applied twice), publish its
    /// outcome, and only then acknowledge it; invalid requests go to the dead letters with
    /// their error.
    Consume(crate::consume::ConsumeArgs),
    /// Throughput and latency on a fresh store (embedded by default, or PostgreSQL, MySQL,
    /// MongoDB or Redis with --store), as a library or over HTTP, beside an optional native
    /// baseline.
    Bench(xfer_bench::bench::BenchArgs),
}

/// Asset subcommands.
#[derive(Debug, Subcommand)]
pub enum AssetCommand {
    /// Declare an asset with its scale (again with the same scale: answers it; a
    /// declaration never changes).
    Declare {
        /// Its code (USD, POINTS, SKU-42, …).
        code: String,
        /// Decimal places of its minor unit: USD 2, JPY 0, BTC 8.
        #[arg(long)]
        scale: u64,
    },
    /// List the declared assets.
    List,
    /// Show one declared asset.
    Show {
        /// Its code.
        code: String,
    },
}

/// Account subcommands.
#[derive(Debug, Subcommand)]
pub enum AccountCommand {
    /// Create an account (again with the same asset and bound: answers it).
    Create {
        /// Its id.
        id: String,
        /// Its asset (USD, POINTS, SKU-42, …).
        #[arg(long)]
        asset: String,
        /// An integer of minor units (0 or below) or `unbounded` (an issuer).
        #[arg(long)]
        lower_bound: Option<String>,
        /// A label as KEY=VALUE (owner, tier, …); repeat for several.
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
    },
    /// Replace an account's labels with those given (none: remove them all).
    Label {
        /// Its id.
        id: String,
        /// A label as KEY=VALUE; repeat for several.
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
    },
    /// Show an account.
    Show {
        /// Its id.
        id: String,
    },
    /// List accounts in id order.
    List {
        /// Continue after this id.
        #[arg(long)]
        after: Option<String>,
        /// Only accounts labelled KEY=VALUE.
        #[arg(long, value_name = "KEY=VALUE")]
        metadata: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Close an account (admin); waits for its transfers in flight.
    Close {
        /// Its id.
        id: String,
    },
}

/// A transfer's fields on the command line.
#[derive(Clone, Debug, Args)]
pub struct TransferArgs {
    /// The idempotency key (default: generated; pass one to make retries safe).
    #[arg(long)]
    pub id: Option<String>,
    /// Debited account.
    #[arg(long, requires_all = ["to", "asset", "amount"], conflicts_with = "posting")]
    pub from: Option<String>,
    /// Credited account.
    #[arg(long)]
    pub to: Option<String>,
    /// Asset code.
    #[arg(long)]
    pub asset: Option<String>,
    /// Minor units (cents for USD: `1234`), or a decimal in the asset's declared scale
    /// (`12.34`).
    #[arg(long)]
    pub amount: Option<String>,
    /// A posting as FROM,TO,ASSET,AMOUNT (AMOUNT as --amount); repeat for several.
    #[arg(long)]
    pub posting: Vec<String>,
    /// Client data (an order number).
    #[arg(long, default_value = "")]
    pub metadata: String,
    /// How long prepares may take, in ms.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Answer once accepted instead of waiting for the outcome.
    #[arg(long)]
    pub no_wait: bool,
}

impl TransferArgs {
    fn body(&self, hold_ttl_ms: Option<u64>) -> Result<TransferIn, String> {
        let mut postings = Vec::new();
        if let (Some(from), Some(to), Some(asset), Some(amount)) =
            (&self.from, &self.to, &self.asset, &self.amount)
        {
            postings.push(PostingIn {
                amount: amount_value(amount),
                ..PostingIn::new(from, to, asset, 0)
            });
        }
        for p in &self.posting {
            let parts: Vec<&str> = p.split(',').collect();
            let [from, to, asset, amount] = parts.as_slice() else {
                return Err(format!("--posting {p:?}: expected FROM,TO,ASSET,AMOUNT"));
            };
            postings.push(PostingIn {
                amount: amount_value(amount),
                ..PostingIn::new(from, to, asset, 0)
            });
        }
        if postings.is_empty() {
            return Err("give --from, --to, --asset and --amount, or --posting".to_string());
        }
        Ok(TransferIn {
            id: self.id.clone().unwrap_or_else(generated_id),
            postings,
            metadata: self.metadata.clone(),
            hold: hold_ttl_ms.map(|ttl_ms| HoldIn { ttl_ms }),
            timeout_ms: self.timeout_ms,
        })
    }
}

/// A fresh id for a transfer the user did not name: process id and wall time.
/// Labels typed as KEY=VALUE, as the API's metadata map (the server checks them).
fn labels(typed: &[String]) -> Result<serde_json::Map<String, Value>, String> {
    typed
        .iter()
        .map(|t| match t.split_once('=') {
            Some((k, v)) => Ok((k.to_string(), Value::from(v))),
            None => Err(format!("--meta {t:?}: expected KEY=VALUE")),
        })
        .collect()
}

/// An amount as typed: an integer goes as minor units, anything else as a decimal string
/// the server reads in the asset's scale (and refuses, naming the field, if it is not one).
fn amount_value(typed: &str) -> Value {
    match typed.parse::<serde_json::Number>() {
        Ok(n) if !n.is_f64() => Value::Number(n),
        _ => Value::from(typed),
    }
}

fn generated_id() -> String {
    use xfer_core::Clock;
    let now = xfer_core::SystemClock.now().as_ms();
    format!("cli-{now}-{}", std::process::id())
}

/// Runs a client command; `Ok(code)` is the process exit code.
pub async fn run(command: Command, remote: &Remote) -> Result<i32, String> {
    let client = Client::new(&remote.url, remote.token.clone())?;
    let json_out = remote.json;
    let print_transfer = |v: &Value| {
        if json_out {
            print_json(v);
        } else {
            transfers_table(std::slice::from_ref(v));
        }
    };
    let print_asset = |v: &Value| {
        if json_out {
            print_json(v);
        } else {
            assets_table(std::slice::from_ref(v));
        }
    };
    let print_account = |v: &Value| {
        if json_out {
            print_json(v);
        } else {
            accounts_table(std::slice::from_ref(v));
        }
    };
    match command {
        Command::Serve(_) | Command::Worker(_) | Command::Demo(_) | Command::Consume(_) => {
            unreachable!("handled by main")
        }
        Command::Bench(args) => {
            let report = xfer_bench::bench::run(args).await?;
            if json_out {
                print_json(&serde_json::to_value(&report).map_err(|e| e.to_string())?);
            } else {
                xfer_bench::bench::print(&report);
            }
        }
        Command::Account(AccountCommand::Create {
            id,
            asset,
            lower_bound,
            meta,
        }) => {
            let body = AccountCreate {
                id,
                asset,
                lower_bound: lower_bound.map(|b| match b.parse::<i64>() {
                    Ok(n) => Value::from(n),
                    Err(_) => Value::from(b),
                }),
                metadata: (!meta.is_empty()).then(|| labels(&meta)).transpose()?,
            };
            print_account(&client.post_body("/v1/accounts", &body).await?.ok()?);
        }
        Command::Account(AccountCommand::Label { id, meta }) => {
            let path = format!("/v1/accounts/{}/metadata", segment(&id));
            let body = MetadataChange {
                metadata: labels(&meta)?,
            };
            let body = serde_json::to_value(&body).map_err(|e| e.to_string())?;
            print_account(&client.put(&path, &body).await?.ok()?);
        }
        Command::Account(AccountCommand::Show { id }) => {
            let path = format!("/v1/accounts/{}", segment(&id));
            print_account(&client.get(&path).await?.ok()?);
        }
        Command::Webhook(w) => crate::webhook::run(w, &client, json_out).await?,
        Command::Asset(AssetCommand::Declare { code, scale }) => {
            let body = AssetIn { code, scale };
            print_asset(&client.post_body("/v1/assets", &body).await?.ok()?);
        }
        Command::Asset(AssetCommand::List) => {
            let v = client.get("/v1/assets").await?.ok()?;
            if json_out {
                print_json(&v);
            } else {
                assets_table(v["assets"].as_array().map_or(&[][..], |a| a));
            }
        }
        Command::Asset(AssetCommand::Show { code }) => {
            let path = format!("/v1/assets/{}", segment(&code));
            print_asset(&client.get(&path).await?.ok()?);
        }
        Command::Account(AccountCommand::List {
            after,
            metadata,
            limit,
        }) => {
            let base = match metadata {
                Some(pair) => format!("/v1/accounts?metadata={}", segment(&pair)),
                None => "/v1/accounts".to_string(),
            };
            let page = (base.as_str(), "accounts", accounts_table as fn(&[Value]));
            print_page(&client, page, after, limit, json_out).await?;
        }
        Command::Account(AccountCommand::Close { id }) => {
            let path = format!("/v1/accounts/{}/close", segment(&id));
            print_account(&client.post(&path, &json!({})).await?.ok()?);
        }
        Command::Transfer(t) => {
            let body = t.body(None)?;
            let wait = if t.no_wait { "?wait=false" } else { "" };
            print_transfer(
                &client
                    .post_body(&format!("/v1/transfers{wait}"), &body)
                    .await?
                    .ok()?,
            );
        }
        Command::Hold { transfer, ttl_ms } => {
            let body = transfer.body(Some(ttl_ms))?;
            let wait = if transfer.no_wait { "?wait=false" } else { "" };
            print_transfer(
                &client
                    .post_body(&format!("/v1/transfers{wait}"), &body)
                    .await?
                    .ok()?,
            );
        }
        Command::Capture { id, amounts } => {
            let path = format!("/v1/transfers/{}/capture", segment(&id));
            let mut units: Vec<Value> = amounts.iter().map(|a| amount_value(a)).collect();
            let body = CaptureIn {
                amount: (units.len() == 1).then(|| units.remove(0)),
                amounts: (units.len() > 1).then_some(units),
            };
            print_transfer(&client.post_body(&path, &body).await?.ok()?);
        }
        Command::Void { id } => {
            let path = format!("/v1/transfers/{}/void", segment(&id));
            print_transfer(&client.post(&path, &json!({})).await?.ok()?);
        }
        Command::Redrive { id } => {
            let path = format!("/v1/transfers/{}/redrive", segment(&id));
            print_transfer(&client.post(&path, &json!({})).await?.ok()?);
        }
        Command::Extend {
            id,
            expires_at_ms,
            ttl_ms,
        } => {
            let path = format!("/v1/transfers/{}/extend", segment(&id));
            let body = ExtendIn {
                expires_at_ms,
                ttl_ms,
            };
            print_transfer(&client.post_body(&path, &body).await?.ok()?);
        }
        Command::Refund {
            id,
            refund_id,
            amounts,
            metadata,
        } => {
            let refund_id = refund_id.unwrap_or_else(|| format!("{id}.refund"));
            let path = format!("/v1/transfers/{}/refund", segment(&id));
            let mut units: Vec<Value> = amounts.iter().map(|a| amount_value(a)).collect();
            let body = RefundIn {
                id: refund_id,
                amount: (units.len() == 1).then(|| units.remove(0)),
                amounts: (units.len() > 1).then_some(units),
                metadata,
            };
            print_transfer(&client.post_body(&path, &body).await?.ok()?);
        }
        Command::Get { id } => {
            let path = format!("/v1/transfers/{}", segment(&id));
            print_transfer(&client.get(&path).await?.ok()?);
        }
        Command::History {
            account,
            before,
            limit,
            state,
        } => {
            let mut path = format!("/v1/accounts/{}/transfers?limit={limit}", segment(&account));
            if let Some(b) = before {
                path.push_str(&format!("&before={b}"));
            }
            if let Some(s) = state {
                path.push_str(&format!("&state={}", segment(&s)));
            }
            let page = client.get(&path).await?.ok()?;
            if json_out {
                print_json(&page);
            } else {
                transfers_table(page["transfers"].as_array().map_or(&[], |v| v));
                if let Some(next) = page["next_before"].as_u64() {
                    println!("more: --before {next}");
                }
            }
        }
        Command::Transfers {
            state,
            account,
            asset,
            id_prefix,
            metadata,
            created_since_ms,
            created_before_ms,
            before,
            limit,
        } => {
            let mut query: Vec<(&str, String)> = vec![("limit", limit.to_string())];
            let given = [
                ("state", state),
                ("account", account),
                ("asset", asset),
                ("id_prefix", id_prefix),
                ("metadata", metadata),
                ("created_since_ms", created_since_ms.map(|n| n.to_string())),
                (
                    "created_before_ms",
                    created_before_ms.map(|n| n.to_string()),
                ),
                ("before", before),
            ];
            query.extend(given.into_iter().filter_map(|(k, v)| Some((k, v?))));
            let query: Vec<String> = query
                .iter()
                .map(|(k, v)| format!("{k}={}", segment(v)))
                .collect();
            let query = query.join("&");
            let page = client.get(&format!("/v1/transfers?{query}")).await?.ok()?;
            if json_out {
                print_json(&page);
            } else {
                transfers_table(page["transfers"].as_array().map_or(&[], |v| v));
                if let Some(next) = page["next_before"].as_str() {
                    println!("more: --before {next}");
                }
            }
        }
        Command::Audit { replay, grace_ms } => {
            let mut path = "/v1/audit".to_string();
            if replay {
                path.push_str("?replay=true");
            }
            if let Some(ms) = grace_ms {
                path.push_str(&format!("&grace_ms={ms}"));
            }
            let report = client.get(&path).await?.ok()?;
            if json_out {
                print_json(&report);
            } else {
                audit_table(&report);
            }
            if report["clean"] != json!(true) {
                return Ok(3);
            }
        }
        Command::Stuck { limit } => {
            let page = client
                .get(&format!("/v1/admin/stuck?limit={limit}"))
                .await?
                .ok()?;
            if json_out {
                print_json(&page);
            } else {
                let items = page["stuck"].as_array().map_or(&[][..], |v| v);
                let rows: Vec<Vec<String>> = items
                    .iter()
                    .map(|i| {
                        vec![
                            text(&i["transfer"]["id"]),
                            text(&i["transfer"]["state"]),
                            text(&i["why"]),
                        ]
                    })
                    .collect();
                table(&["ID", "STATE", "WHY"], &rows);
            }
        }
        Command::Canceled { after, limit } => {
            let page = (
                "/v1/admin/canceled",
                "transfers",
                transfers_table as fn(&[Value]),
            );
            print_page(&client, page, after, limit, json_out).await?;
        }
    }
    Ok(0)
}

/// Gets one page of a list read with `after`/`limit` and prints its `key` rows with `rows`
/// (or the JSON), then the cursor of the next page.
async fn print_page(
    client: &Client,
    (base, key, rows): (&str, &str, fn(&[Value])),
    after: Option<String>,
    limit: usize,
    json_out: bool,
) -> Result<(), String> {
    let sep = if base.contains('?') { '&' } else { '?' };
    let mut path = format!("{base}{sep}limit={limit}");
    if let Some(a) = after {
        path.push_str(&format!("&after={}", segment(&a)));
    }
    let page = client.get(&path).await?.ok()?;
    if json_out {
        print_json(&page);
    } else {
        rows(page[key].as_array().map_or(&[], |v| v));
        if let Some(next) = page["next_after"].as_str() {
            println!("more: --after {next}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_subcommand_argument_hides_a_global_flag() {
        // An argument named like a global flag (`url`, `token`, `json`) takes its id, and
        // clap then refuses the global flag on that subcommand's line.
        fn walk(c: &clap::Command, globals: &[String], path: &str) {
            for sub in c.get_subcommands() {
                let here = format!("{path} {}", sub.get_name());
                for a in sub.get_arguments().filter(|a| !a.is_global_set()) {
                    let id = a.get_id().as_str();
                    assert!(
                        !globals.iter().any(|g| g == id),
                        "`{here}` has an argument `{id}`"
                    );
                }
                walk(sub, globals, &here);
            }
        }
        let cli = Cli::command();
        let globals: Vec<String> = cli
            .get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(globals.contains(&"url".to_string()), "{globals:?}");
        walk(&cli, &globals, "xfer");
    }

    #[test]
    fn postings_parse_from_flags() {
        let cli = Cli::parse_from([
            "xfer",
            "transfer",
            "--id",
            "t1",
            "--posting",
            "a,b,USD,5",
            "--posting",
            "c,d,EUR,7",
        ]);
        let Command::Transfer(t) = cli.command else {
            panic!("a transfer")
        };
        let body = serde_json::to_value(t.body(None).unwrap()).unwrap();
        assert_eq!(body["postings"][1]["amount"], 7);
        assert_eq!(body["id"], "t1");
        assert!(
            body.get("hold").is_none() && body.get("timeout_ms").is_none(),
            "{body}"
        );
        let bad = TransferArgs {
            posting: vec!["a,b,USD".into()],
            ..t
        };
        assert!(bad.body(None).unwrap_err().contains("FROM,TO,ASSET,AMOUNT"));
    }

    fn misplaced(args: &[&str]) -> Option<String> {
        use clap::CommandFactory;
        let m = Cli::command()
            .try_get_matches_from(std::iter::once("xfer").chain(args.iter().copied()))
            .expect("the line parses");
        misplaced_flag(&m)
    }

    #[test]
    fn a_client_flag_given_where_it_does_nothing_is_refused_naming_the_flag_that_works() {
        let e = misplaced(&["serve", "--token", "0123456789abcdef:admin"]).expect("refused");
        assert!(e.contains("--auth-token SECRET:read,write"), "{e}");
        let e = misplaced(&["--token", "0123456789abcdef:admin", "serve"]).expect("refused");
        assert!(e.contains("--auth-token"), "{e}");
        let e = misplaced(&["serve", "--url", "http://x"]).expect("refused");
        assert!(e.contains("--listen ADDR"), "{e}");
        for flag in [
            &["--url", "http://x"][..],
            &["--listen", "0.0.0.0:1"],
            &["--auth-token", "0123456789abcdef:read"],
        ] {
            let line = [&["worker"][..], flag].concat();
            let e = misplaced(&line).expect("refused");
            assert!(e.contains(flag[0]) && e.contains("serves no API"), "{e}");
        }
        assert!(misplaced(&["demo", "bank", "--json"]).is_some());
        let e = misplaced(&["serve", "--json"]).expect("refused");
        assert!(e.contains("--log-format json"), "{e}");
        assert!(misplaced(&["bench", "--token", "t"]).is_some());
        let e = misplaced(&["demo", "bank", "--url", "http://x"]).expect("refused");
        assert!(e.contains("--remote"), "{e}");
        // Where they apply, they pass.
        for ok in [
            &["serve", "--auth-token", "0123456789abcdef:admin"][..],
            &[
                "account", "list", "--token", "t", "--url", "http://x", "--json",
            ],
            &["--token", "t", "get", "t1"],
            &[
                "demo", "bank", "--remote", "--url", "http://x", "--token", "t",
            ],
            &["bench", "--json"],
        ] {
            assert_eq!(misplaced(ok), None, "{ok:?}");
        }
    }
}

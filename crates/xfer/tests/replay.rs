//! `xfer audit --replay` end to end: a store at rest replays clean; a copy of its data
//! directory with one balance edited behind xfer's back (as an operator's mistake or a
//! restore from mismatched backups would leave it) is refused with exit code 3, naming the
//! account, what it holds and what its transfers add up to.

mod common;

use common::Serve;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use xfer_core::AccountId;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_store::shard::MemoryShard;
use xfer_store_embedded::tables::Tables;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Adds `by` to `account`'s balance in the checkpoint tables of the (closed) data
/// directory `dir`, as a hand edit of the store would.
fn edit_balance(dir: &Path, account: &str, by: i64) {
    let tables = Tables::open(&dir.join("tables")).expect("the tables");
    let shards = tables.shard_count().expect("meta").expect("shards");
    let id = AccountId::new(account).expect("an id");
    for s in 0..shards {
        let meta = tables.shard_meta(s).expect("meta");
        let mut shard = MemoryShard::new();
        tables.load(s, &meta, &mut shard).expect("load");
        if let Some(a) = shard.account(&id) {
            let mut a = a.clone();
            a.balance += by;
            let mut batch = tables.begin_batch(shards);
            tables.add_accounts(&mut batch, s, [(id.clone(), Some(Arc::new(a)))]);
            tables.commit(batch).expect("commit");
            tables.flush().expect("flush");
            return;
        }
    }
    panic!("no account {account} in {}", dir.display());
}

/// `xfer audit --replay` (with `--json` if asked) against `url`: exit code and stdout.
fn audit(url: &str, json: bool) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer"));
    cmd.args(["audit", "--replay", "--url", url])
        .env_remove("XFER_TOKEN");
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("xfer audit runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_edited_in_a_copy_of_the_data_directory_is_named_by_the_replay() {
    let dir = tempfile::tempdir().expect("a directory");
    let (data, copy) = (dir.path().join("data"), dir.path().join("copy"));
    let serve = Serve::start(&data, dir.path(), 0);
    serve.ready().await;
    let c = serve.client();
    let usd = c
        .post("/v1/assets", &json!({"code": "USD", "scale": 2}))
        .await;
    assert_eq!(usd.expect("declare USD").status, 201, "declare USD");
    for (id, bound) in [
        ("issuer", json!("unbounded")),
        ("alice", json!(0)),
        ("bob", json!(0)),
    ] {
        let a = c
            .post(
                "/v1/accounts",
                &json!({"id": id, "asset": "USD", "lower_bound": bound}),
            )
            .await
            .expect("create");
        assert_eq!(a.status, 201, "{}", a.text);
    }
    let pay = |id: &str, from: &str, to: &str, amount: u64| json!({"id": id, "postings": [{"from": from, "to": to, "asset": "USD", "amount": amount}]});
    for body in [
        pay("fund", "issuer", "alice", 100),
        pay("t1", "alice", "bob", 30),
        pay("t2", "bob", "alice", 5),
        pay("too-much", "bob", "alice", 500),
    ] {
        let a = c.post("/v1/transfers", &body).await.expect("transfer");
        assert_eq!(a.status, 200, "{}", a.text);
    }
    let refund = c
        .post("/v1/transfers/t2/refund", &json!({"id": "t2-refund"}))
        .await
        .expect("refund");
    assert_eq!(refund.body["state"], "done", "{}", refund.text);
    // Older than the replay's allowance for clocks ahead: every account is compared.
    TokioSleeper
        .sleep(xfer_engine::replay::CLOCK_SLACK_MS + 100)
        .await;
    assert!(
        serve.terminate().success(),
        "a clean shutdown (a last checkpoint)"
    );

    copy_dir(&data, &copy);
    edit_balance(&copy, "bob", 7);

    // The original: every balance is what its transfers add up to.
    let serve = Serve::start(&data, dir.path(), 1);
    serve.ready().await;
    let url = serve.client().url().to_string();
    let (code, out) = audit(&url, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 differ"), "{out}");
    let (_, out) = audit(&url, true);
    let report: Value = serde_json::from_str(&out).expect("JSON");
    let replay = &report["replay"];
    assert_eq!(replay["done"], 4, "fund, t1, t2, t2's refund: {report}");
    assert_eq!(replay["transfers"], 5, "{report}");
    assert_eq!(replay["accounts_compared"], 3, "{report}");
    assert_eq!(report["clean"], true, "{report}");
    assert!(serve.terminate().success());

    // The copy: bob holds 7 more than his transfers (30) explain.
    let serve = Serve::start(&copy, dir.path(), 2);
    serve.ready().await;
    let url = serve.client().url().to_string();
    let (code, out) = audit(&url, false);
    assert_eq!(code, 3, "not clean: {out}");
    let row = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("bob"))
        .unwrap_or_else(|| panic!("bob's row: {out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["bob", "USD", "37", "30"], "{out}");
    assert!(out.contains("1 differ"), "{out}");
    let (_, out) = audit(&url, true);
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        report["replay"]["differences"],
        json!([{"account": "bob", "asset": "USD", "balance": 37, "replayed": 30}]),
        "{report}"
    );
    assert_eq!(report["clean"], false);
    assert!(serve.terminate().success());
}

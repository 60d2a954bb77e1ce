//! The operator console (`/console`, served by `xfer serve`) in a real browser: headless
//! Chromium driven through chromedriver (WebDriver) by fantoccini, against the real
//! `xfer serve` binary started as a child process.
//!
//! - `console_signs_in_filters_and_shows_a_transfer_and_its_timeline`: the redirects to the
//!   login page, a refused token, sign-in, the overview, every page of the navigation, the
//!   transfers' filters (state, id prefix, a refused filter, the next page), one transfer
//!   and its timeline, an account, the transfers page at phone width, sign-out; a
//!   screenshot of each page in `target/console-screenshots/` (and, with
//!   `XFER_UPDATE_SCREENSHOT=1`, the overview's in `docs/console.png`);
//! - `a_stuck_transfer_is_redriven_from_the_console`: transfers left unfinished by an
//!   `xfer serve` killed with SIGKILL (PostgreSQL shards, a second server whose sweeper does
//!   not run again) are listed as stuck and re-driven from the Stuck page;
//! - `refunding_twice_quickly_refunds_once`: the Refund form sent twice at once, then once
//!   more, moves the money back once;
//! - `a_read_session_sees_no_buttons_and_a_post_without_csrf_is_refused`.
//!
//! Needs chromedriver and Chromium (`/usr/bin/chromedriver`, `/usr/bin/chromium`, or
//! `XFER_TEST_CHROMEDRIVER` and `XFER_TEST_CHROMIUM`; `.ci/run` installs Debian's
//! `chromium` and `chromium-driver`): without them the tests fail, they do not skip.

mod common;

use common::{postgres_admin, postgres_base, reap, Serve};
use fantoccini::elements::Element;
use fantoccini::{ClientBuilder, Locator};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use xfer_client::{segment, Client};
use xfer_engine::{Sleeper, TokioSleeper};

/// The admin token every test's server accepts (at least 16 bytes).
const ADMIN: &str = "console-admin-token-0001";
/// A read-only token.
const READER: &str = "console-read-token-00001";
/// How long a wait for the browser (an element, a page) lasts before the test fails.
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_signs_in_filters_and_shows_a_transfer_and_its_timeline() {
    let (tmp, serve, api) = opened().await;
    for n in 1..=3 {
        pay(&api, &format!("pay-{n}"), "alice", "bob", 10, "done").await;
    }
    // Past alice's balance: canceled (exceeds_available).
    pay(&api, "pay-big", "alice", "bob", 1_000_000, "canceled").await;
    hold(&api, "hold-1", "alice", "bob", 5).await;
    // alice: 900 - 30 = 870 posted, 5 reserved.

    let b = Browser::open(serve.url(), tmp.path()).await;
    // No session: `/` goes to /console, which goes to the login page.
    b.go("/").await;
    b.wait_path(
        |p| p == "/console/login",
        "GET / without a session ends on /console/login",
    )
    .await;
    let token = b.el("form#login input[name=token]").await;
    assert_eq!(
        token.attr("type").await.expect("type").as_deref(),
        Some("password"),
        "the token field is a password field"
    );
    b.el("form#login button[type=submit]").await;
    b.shot("login").await;
    // Every console page without a session goes to the login page too.
    for page in [
        "/console/transfers",
        "/console/accounts/alice",
        "/console/stuck",
    ] {
        b.go(page).await;
        b.wait_path(
            |p| p == "/console/login",
            &format!("{page} without a session"),
        )
        .await;
    }

    // A wrong token: the login page again, with an error.
    b.fill("form#login input[name=token]", "not-a-token-of-this-server")
        .await;
    b.click("form#login button[type=submit]").await;
    let error = b.text("#error").await;
    assert!(!error.is_empty(), "a refused token shows #error");
    assert_eq!(b.path().await, "/console/login");
    assert!(
        b.wd.get_all_cookies()
            .await
            .expect("cookies")
            .iter()
            .all(|c| c.value().is_empty()),
        "a refused token sets no session cookie"
    );

    b.sign_in(ADMIN).await;
    let cookies = b.wd.get_all_cookies().await.expect("cookies");
    assert!(
        cookies.iter().any(
            |c| c.http_only() == Some(true) && format!("{:?}", c.same_site()) == "Some(Strict)"
        ),
        "the session cookie is HttpOnly and SameSite=Strict: {cookies:?}"
    );
    assert!(
        b.text("#whoami").await.contains("admin"),
        "#whoami names admin"
    );

    // The overview.
    for id in ["#in-flight", "#stuck-count", "#canceled-hour"] {
        b.el(id).await;
    }
    assert_eq!(
        number(&b.text("#stuck-count").await),
        Some(0),
        "#stuck-count"
    );
    let canceled = number(&b.text("#canceled-hour").await);
    assert!(
        canceled.is_some_and(|n| n >= 1),
        "#canceled-hour counts pay-big: {canceled:?}"
    );
    assert!(
        b.text("#audit").await.contains("clean"),
        "#audit says clean"
    );
    assert!(b.text("table#assets").await.contains("USD"), "table#assets");
    let reachable = b.texts("table#shards tr td.reachable").await;
    assert!(!reachable.is_empty(), "table#shards has a row per shard");
    assert!(
        reachable.iter().all(|r| r == "yes"),
        "every shard reachable: {reachable:?}"
    );
    // The chart is redrawn by its script (every 2 s) while transfers go on: three redraws,
    // so that the screenshot shows a line.
    let mut chart = b.outer_html("svg#rate-chart").await;
    let mut redraws = 0;
    for n in 0..60 {
        pay(&api, &format!("tick-{n}"), "bank", "carol", 1, "done").await;
        TokioSleeper.sleep(250).await;
        let now = b.outer_html("svg#rate-chart").await;
        if now != chart {
            chart = now;
            redraws += 1;
            if redraws == 3 {
                break;
            }
        }
    }
    assert_eq!(
        redraws, 3,
        "svg#rate-chart is redrawn every 2 s: {redraws} redraws in 15 s"
    );
    b.shot("overview").await;
    if std::env::var("XFER_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        let png = b.wd.screenshot().await.expect("a screenshot");
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/console.png");
        std::fs::write(&docs, png).unwrap_or_else(|e| panic!("{}: {e}", docs.display()));
    }

    // Transfers: everything, then filtered by state and id prefix.
    b.click("a#nav-transfers").await;
    b.wait_path(|p| p.starts_with("/console/transfers"), "a#nav-transfers")
        .await;
    let all = b.row_ids("table#transfers").await;
    assert!(
        all.iter().any(|id| id.starts_with("tick-")),
        "the newest transfers are listed: {all:?}"
    );
    b.shot("transfers").await;
    b.filter(&[
        ("state", "done"),
        ("id_prefix", "pay-"),
        ("metadata", "test=console"),
    ])
    .await;
    assert_eq!(
        b.row_ids("table#transfers")
            .await
            .into_iter()
            .collect::<BTreeSet<_>>(),
        set(&["pay-1", "pay-2", "pay-3"]),
        "state=done id_prefix=pay- metadata=test=console"
    );
    let states = b.texts("table#transfers tr.transfer td.state").await;
    assert!(
        states.len() == 3 && states.iter().all(|s| s == "done"),
        "{states:?}"
    );
    b.filter(&[("state", "canceled"), ("metadata", "")]).await;
    assert_eq!(
        b.row_ids("table#transfers").await,
        vec!["pay-big".to_string()]
    );
    b.filter(&[("state", "held"), ("id_prefix", ""), ("account", "alice")])
        .await;
    assert_eq!(
        b.row_ids("table#transfers").await,
        vec!["hold-1".to_string()]
    );
    // By account and asset, then accepted since a time to come: nothing.
    b.filter(&[("state", ""), ("account", "carol"), ("asset", "USD")])
        .await;
    let ticks = b.row_ids("table#transfers").await;
    assert!(
        !ticks.is_empty() && ticks.iter().all(|id| id.starts_with("tick-")),
        "account=carol: {ticks:?}"
    );
    b.filter(&[("since", "2099-01-01T00:00")]).await;
    assert_eq!(
        b.row_ids("table#transfers").await,
        Vec::<String>::new(),
        "since 2099"
    );
    // A filter the API refuses: its code and message in #error.
    b.filter(&[
        ("since", ""),
        ("account", ""),
        ("asset", ""),
        ("metadata", "no-equals-sign"),
    ])
    .await;
    let error = b.text("#error").await;
    assert!(error.contains("invalid_query"), "#error: {error:?}");
    // Pages: two of the four pay- transfers, then the next two (the limit field's kind,
    // a number or a list, is the page's choice: the query is given directly).
    b.el("form#filter [name=limit]").await;
    b.go("/console/transfers?id_prefix=pay-&limit=2").await;
    let first = b.row_ids("table#transfers").await;
    assert_eq!(first.len(), 2, "limit=2: {first:?}");
    let before = b.path().await;
    b.click("a#next-page").await;
    b.wait_path(|p| p != before, "a#next-page").await;
    b.el("table#transfers").await;
    let second = b.row_ids("table#transfers").await;
    let mut both: BTreeSet<String> = first.iter().cloned().collect();
    both.extend(second.iter().cloned());
    assert_eq!(
        both,
        set(&["pay-1", "pay-2", "pay-3", "pay-big"]),
        "two pages of two: {first:?} then {second:?}"
    );

    // At phone width the list is still a table.
    b.wd.set_window_size(390, 844).await.expect("window size");
    b.go("/console/transfers?id_prefix=pay-").await;
    let table = b.el("table#transfers").await;
    assert!(
        table.is_displayed().await.expect("displayed"),
        "table#transfers shown at 390 px"
    );
    assert_eq!(b.row_ids("table#transfers").await.len(), 4);
    b.shot("transfers-phone").await;
    b.wd.set_window_size(1280, 800).await.expect("window size");

    // One transfer, from its link.
    b.go("/console/transfers?id_prefix=pay-2").await;
    b.click(r#"tr.transfer[data-id="pay-2"] a.transfer-link"#)
        .await;
    b.wait_path(|p| p == "/console/transfers/pay-2", "a.transfer-link")
        .await;
    assert!(
        b.text("#transfer-id").await.contains("pay-2"),
        "#transfer-id"
    );
    assert_eq!(b.text("#state").await, "done", "#state");
    let postings = b.text("table#postings").await;
    assert!(
        postings.contains("alice") && postings.contains("bob") && postings.contains("10"),
        "table#postings: {postings:?}"
    );
    let steps = b.attrs("ol#timeline li", "data-state").await;
    assert!(steps.len() >= 2, "the timeline has its steps: {steps:?}");
    assert!(
        matches!(steps[0].as_str(), "initial" | "pending"),
        "the timeline starts accepted: {steps:?}"
    );
    assert_eq!(steps.last().map(String::as_str), Some("done"), "{steps:?}");
    let intents = b.intents().await;
    assert!(
        intents.len() == 2
            && intents.iter().all(|(_, state)| {
                matches!(state.as_str(), "open" | "posted" | "released" | "none")
            }),
        "table#intents: a row for alice and one for bob: {intents:?}"
    );
    b.el("form#refund").await;
    b.none("form#capture").await;
    b.none("form#void").await;
    b.shot("transfer").await;

    // A hold: its capture and void forms, no refund.
    b.go("/console/transfers/hold-1").await;
    assert_eq!(b.text("#state").await, "held");
    let intents = b.intents().await;
    assert!(
        intents
            .iter()
            .any(|(a, state)| a == "alice" && state == "open"),
        "hold-1 reserves on alice: {intents:?}"
    );
    b.el("form#redrive").await;
    b.el("form#capture").await;
    b.el("form#void").await;
    b.none("form#refund").await;
    b.shot("transfer-held").await;
    // Extended: the hold expires 90 minutes from now instead.
    let before = transfer(&api, "hold-1").await["hold_expires_at_ms"]
        .as_u64()
        .expect("an expiry");
    b.fill("form#extend input[name=minutes]", "90").await;
    b.click("form#extend [type=submit]").await;
    let outcome = b.text("#outcome").await;
    assert!(
        outcome.contains("held"),
        "#outcome after extend: {outcome:?}"
    );
    let after = transfer(&api, "hold-1").await["hold_expires_at_ms"]
        .as_u64()
        .expect("an expiry");
    assert!(
        after > before + 60 * 60_000,
        "extended from {before} to {after}"
    );

    // Stuck: nothing.
    b.click("a#nav-stuck").await;
    b.wait_path(|p| p.starts_with("/console/stuck"), "a#nav-stuck")
        .await;
    b.el("table#stuck").await;
    assert_eq!(b.row_ids("table#stuck").await, Vec::<String>::new());
    b.shot("stuck").await;

    // Canceled: pay-big and why.
    b.click("a#nav-canceled").await;
    b.wait_path(|p| p.starts_with("/console/canceled"), "a#nav-canceled")
        .await;
    b.el("table#canceled").await;
    assert_eq!(
        b.row_ids("table#canceled").await,
        vec!["pay-big".to_string()]
    );
    let reason = b
        .text(r#"table#canceled tr.transfer[data-id="pay-big"] .reason"#)
        .await;
    assert!(
        reason.contains("exceeds_available"),
        "td.reason: {reason:?}"
    );
    b.shot("canceled").await;

    // Accounts: searched by prefix, then one.
    b.click("a#nav-accounts").await;
    b.wait_path(|p| p.starts_with("/console/accounts"), "a#nav-accounts")
        .await;
    let ids = b.attrs("table#accounts tr.account", "data-id").await;
    for id in ["alice", "bank", "bob", "carol"] {
        assert!(ids.iter().any(|i| i == id), "{id} listed: {ids:?}");
    }
    b.shot("accounts").await;
    b.fill("form#account-search input[name=prefix]", "ali")
        .await;
    b.click("form#account-search [type=submit]").await;
    b.wait_path(|p| p.contains("prefix=ali"), "form#account-search")
        .await;
    assert_eq!(
        b.attrs("table#accounts tr.account", "data-id").await,
        vec!["alice".to_string()]
    );
    b.click(r#"tr.account[data-id="alice"] a.account-link"#)
        .await;
    b.wait_path(|p| p == "/console/accounts/alice", "a.account-link")
        .await;
    let balances = b.text("#balances").await;
    assert!(
        balances.contains("8.70 USD") && balances.contains("8.65 USD"),
        "#balances in USD's scale: 8.70 posted, 8.65 available: {balances:?}"
    );
    let history: BTreeSet<String> = b.row_ids("table#history").await.into_iter().collect();
    for id in ["fund-alice", "pay-1", "pay-2", "pay-3", "hold-1"] {
        assert!(history.contains(id), "{id} in alice's history: {history:?}");
    }
    b.el("form#close").await;
    // The bound is shown and taken in USD's scale: -1.50 is a credit line of 150 cents.
    let bound = "form#lower-bound input[name=lower_bound]";
    assert_eq!(
        b.el(bound)
            .await
            .prop("value")
            .await
            .ok()
            .flatten()
            .as_deref(),
        Some("0.00")
    );
    b.fill(bound, "-1.50").await;
    b.click("form#lower-bound [type=submit]").await;
    assert!(
        b.text("#outcome").await.contains("Lower bound"),
        "the outcome"
    );
    b.go("/console/accounts/alice").await;
    assert_eq!(b.text("#lower-bound-value").await, "-1.50");
    let a = api.get("/v1/accounts/alice").await.expect("alice").ok();
    assert_eq!(a.expect("alice")["lower_bound"], json!(-150));
    b.shot("account").await;

    // Sign out: the pages are closed again.
    b.click("form#logout button").await;
    b.wait_path(|p| p == "/console/login", "sign-out").await;
    b.go("/console").await;
    b.wait_path(|p| p == "/console/login", "/console after sign-out")
        .await;
    close(b, serve).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stuck_transfer_is_redriven_from_the_console() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let database = format!("xfer_console_{}", std::process::id());
    postgres_admin(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).await;
    postgres_admin(&format!("CREATE DATABASE {database}")).await;
    let url = format!("{}/{database}", postgres_base());
    let store = |dir: &str| {
        let mut args = vec![
            "--store".to_string(),
            "postgres".into(),
            "--postgres-url".into(),
            url.clone(),
            "--data-dir".into(),
            tmp.path().join(dir).display().to_string(),
            "--lease-ms".into(),
            "1000".into(),
        ];
        args.extend(token_args());
        args
    };
    // The console's server: its sweeper runs once, at start, and not again for an hour, so
    // what another server leaves unfinished stays stuck (after 200 ms past its lease).
    let mut args = store("console");
    args.extend(["--sweep-interval-ms", "3600000", "--stuck-after-ms", "200"].map(String::from));
    let console = serve(&args, tmp.path(), "console");
    console.ready().await;
    let api = admin_client(&console);
    create(&api, "issuer", json!("unbounded")).await;
    for i in 0..8 {
        create(&api, &format!("c{i}"), json!(0)).await;
        pay(
            &api,
            &format!("fund-{i}"),
            "issuer",
            &format!("c{i}"),
            100_000,
            "done",
        )
        .await;
    }

    // Another server under load (answers before the transfers finish), killed.
    let mut stuck = Vec::new();
    for attempt in 0..4 {
        let mut args = store(&format!("victim-{attempt}"));
        args.extend(["--sweep-interval-ms", "3600000"].map(String::from));
        let victim = serve(&args, tmp.path(), &format!("victim-{attempt}"));
        victim.ready().await;
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..16u64 {
            let (c, stop) = (admin_client(&victim), stop.clone());
            tasks.spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let from = (t + n) % 8;
                    let to = (from + 1 + n % 7) % 8;
                    let body = json!({
                        "id": format!("s{attempt}-{t}-{n}"),
                        "postings": [{"from": format!("c{from}"), "to": format!("c{to}"),
                                      "asset": "USD", "amount": 1 + n % 50}],
                    });
                    if c.post("/v1/transfers?wait=false", &body).await.is_err() {
                        return;
                    }
                }
            });
        }
        TokioSleeper.sleep(600).await;
        tokio::task::spawn_blocking(move || victim.kill())
            .await
            .expect("killed");
        stop.store(true, Ordering::Relaxed);
        while let Some(r) = tasks.join_next().await {
            r.expect("a client task");
        }
        // Stuck once the victim's lease (1 s) lapsed, and 200 ms more.
        for _ in 0..40 {
            TokioSleeper.sleep(100).await;
            let a = api.get("/v1/admin/stuck").await.expect("stuck");
            assert_eq!(a.status, 200, "{}", a.text);
            stuck = a.body["stuck"].as_array().cloned().unwrap_or_default();
            if !stuck.is_empty() {
                break;
            }
        }
        if !stuck.is_empty() {
            break;
        }
        println!("attempt {attempt}: the killed server left nothing unfinished; again");
    }
    assert!(
        !stuck.is_empty(),
        "four servers killed under load left nothing stuck; log:\n{}",
        console.log_text()
    );
    println!("{} transfers stuck", stuck.len());

    let b = Browser::open(console.url(), tmp.path()).await;
    b.sign_in(ADMIN).await;
    // Not asserted: the overview's count is the last sweep's, and this server's sweeper
    // ran once, before anything was stuck.
    println!("#stuck-count: {}", b.text("#stuck-count").await);
    b.click("a#nav-stuck").await;
    b.wait_path(|p| p.starts_with("/console/stuck"), "a#nav-stuck")
        .await;
    b.el("table#stuck").await;
    let rows = b.row_ids("table#stuck").await;
    let listed: BTreeSet<String> = stuck
        .iter()
        .map(|s| s["transfer"]["id"].as_str().expect("an id").to_string())
        .collect();
    // Every row is one the killed server left (ids s<attempt>-…), the API's among them.
    assert!(
        !rows.is_empty()
            && rows.iter().all(|id| id.starts_with('s'))
            && rows.iter().any(|id| listed.contains(id)),
        "table#stuck lists the stuck transfers: {rows:?}, API: {listed:?}"
    );
    let id = rows[0].clone();
    let row = format!(r#"table#stuck tr.transfer[data-id="{id}"]"#);
    let why = b.text(&format!("{row} .why")).await;
    assert!(!why.is_empty(), "td.why says why {id} is stuck");
    b.shot("stuck-before-redrive").await;
    b.click(&format!("{row} form.redrive button")).await;
    let outcome = b.text("#outcome").await;
    assert!(
        outcome.contains("done") || outcome.contains("canceled"),
        "#outcome after re-driving {id}: {outcome:?}"
    );
    b.shot("stuck-redriven").await;
    let t = api
        .get(&format!("/v1/transfers/{}", segment(&id)))
        .await
        .expect("GET")
        .ok()
        .expect("the transfer");
    assert!(
        t["state"] == "done" || t["state"] == "canceled",
        "{id} finished by the re-drive: {t}"
    );
    b.go("/console/stuck").await;
    b.el("table#stuck").await;
    let after = b.row_ids("table#stuck").await;
    assert!(!after.contains(&id), "{id} left Stuck: {after:?}");
    b.close().await;
    drop(console);
    postgres_admin(&format!("DROP DATABASE {database} WITH (FORCE)")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunding_twice_quickly_refunds_once() {
    let (tmp, serve, api) = opened().await;
    pay(&api, "buy-1", "alice", "bob", 100, "done").await;
    assert_eq!(
        (balance(&api, "alice").await, balance(&api, "bob").await),
        (800, 100)
    );

    let b = Browser::open(serve.url(), tmp.path()).await;
    b.sign_in(ADMIN).await;
    b.go("/console/transfers/buy-1").await;
    assert_eq!(b.text("#state").await, "done");
    let first_id = b.value("form#refund input[name=refund_id]").await;
    assert!(!first_id.is_empty(), "form#refund has a refund_id");
    b.el("form#refund input[name=csrf]").await;

    // Unconfirmed: nothing happens (the browser or the server refuses it).
    b.click("form#refund [type=submit]").await;
    TokioSleeper.sleep(1_500).await;
    let t = transfer(&api, "buy-1").await;
    assert!(
        t["refunded_by"].is_null(),
        "refunded without confirmation: {t}"
    );
    assert_eq!(balance(&api, "alice").await, 800);

    // Confirmed, and sent twice at once (two POSTs of the same form in flight together),
    // then once more by its button.
    b.go("/console/transfers/buy-1").await;
    let refund_id = b.value("form#refund input[name=refund_id]").await;
    assert_ne!(refund_id, first_id, "each page has a fresh refund_id");
    let confirm = b.el("form#refund input[name=confirm]").await;
    confirm.click().await.expect("check confirm");
    assert_eq!(
        confirm.prop("checked").await.expect("checked").as_deref(),
        Some("true")
    );
    let statuses =
        b.wd.execute_async(
            "const done = arguments[arguments.length - 1];
             const f = document.querySelector('form#refund');
             const send = () => fetch(f.action, {method: 'POST', credentials: 'same-origin',
                 body: new URLSearchParams(new FormData(f))}).then(r => r.status, e => String(e));
             Promise.all([send(), send()]).then(done);",
            vec![],
        )
        .await
        .expect("two POSTs at once");
    println!("the two concurrent refund POSTs were answered {statuses}");
    b.click("form#refund [type=submit]").await;
    let outcome = b.text("#outcome").await;
    assert!(
        outcome.contains("done"),
        "#outcome after the refund: {outcome:?}"
    );
    b.shot("refund-outcome").await;

    // A second page, its own refund_id: refused (already refunded), or no form at all.
    b.go("/console/transfers/buy-1").await;
    b.el("#state").await;
    if !b.all("form#refund").await.is_empty() {
        b.click("form#refund input[name=confirm]").await;
        b.click("form#refund [type=submit]").await;
        b.el("#outcome").await;
    }

    let t = transfer(&api, "buy-1").await;
    let refunds = refunds_of(&api, "buy-1").await;
    assert_eq!(refunds.len(), 1, "exactly one refund of buy-1: {refunds:?}");
    assert_eq!(t["refunded_by"], json!(refunds[0]), "{t}");
    assert_eq!(
        refunds[0], refund_id,
        "the refund is the first page's refund_id"
    );
    assert_eq!(transfer(&api, &refunds[0]).await["state"], "done");
    assert_eq!(
        (balance(&api, "alice").await, balance(&api, "bob").await),
        (900, 0),
        "the money moved back once"
    );
    close(b, serve).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_refunds_from_the_console_move_back_what_is_asked_and_no_more() {
    let (tmp, serve, api) = opened().await;
    pay(&api, "buy-2", "alice", "bob", 100, "done").await;
    let b = Browser::open(serve.url(), tmp.path()).await;
    b.sign_in(ADMIN).await;
    let refund = |amount: &'static str| {
        let b = &b;
        async move {
            b.go("/console/transfers/buy-2").await;
            b.fill("form#refund input[name=amount0]", amount).await;
            b.click("form#refund input[name=confirm]").await;
            b.click("form#refund [type=submit]").await;
            b.text("#outcome").await
        }
    };
    // Amounts in USD's scale, as the form shows them: 0.30 is 30 cents.
    let outcome = refund("0.301").await;
    assert!(
        outcome.contains("amount_has_too_many_decimals"),
        "finer than a cent: {outcome:?}"
    );
    let outcome = refund("0.30").await;
    assert!(outcome.contains("done"), "30 of 100: {outcome:?}");
    b.go("/console/transfers/buy-2").await;
    let links = b.text("#refunds").await;
    assert!(links.contains("0.30 USD"), "#refunds: {links:?}");
    let label = b.text("form#refund label").await;
    assert!(label.contains("0.70 USD"), "70 left: {label:?}");
    b.shot("partial-refund").await;
    let outcome = refund("0.80").await;
    assert!(
        outcome.contains("refund_exceeds_original"),
        "80 more of 100: {outcome:?}"
    );
    // Blank: what is left, the last 70.
    let outcome = refund("").await;
    assert!(outcome.contains("done"), "the last 70: {outcome:?}");
    b.go("/console/transfers/buy-2").await;
    b.el("#refunds").await;
    assert!(
        b.all("form#refund").await.is_empty(),
        "no refund form once everything is moved back"
    );
    let refunds = refunds_of(&api, "buy-2").await;
    assert_eq!(refunds.len(), 2, "{refunds:?}");
    assert_eq!(
        (balance(&api, "alice").await, balance(&api, "bob").await),
        (900, 0),
        "30 and 70 moved back"
    );
    close(b, serve).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_session_sees_no_buttons_and_a_post_without_csrf_is_refused() {
    let (tmp, serve, api) = opened().await;
    pay(&api, "buy-1", "alice", "bob", 100, "done").await;
    hold(&api, "hold-1", "alice", "bob", 5).await;
    let addr = serve.url().trim_start_matches("http://").to_string();

    // The admin's forms, and what they send.
    let b = Browser::open(serve.url(), tmp.path()).await;
    b.sign_in(ADMIN).await;
    b.go("/console/transfers/hold-1").await;
    b.el("form#redrive").await;
    b.el("form#capture").await;
    let void = b.form("form#void").await;
    b.go("/console/accounts/alice").await;
    b.el("form#close").await;
    b.el("form#lower-bound").await;
    b.go("/console/transfers/buy-1").await;
    b.click("form#refund input[name=confirm]").await;
    let refund = b.form("form#refund").await;
    let admin = b.cookie_header().await;
    assert!(
        refund
            .fields
            .iter()
            .any(|(k, v)| k == "csrf" && !v.is_empty()),
        "form#refund carries a csrf field: {:?}",
        refund.fields
    );

    // Without the csrf field, with a wrong one, without a session: refused, nothing done.
    let without = refund.without("csrf");
    let (status, text) = post(&addr, &refund.path, Some(&admin), &without).await;
    assert_eq!(status, 403, "refund without csrf: {text}");
    let forged = refund.with("csrf", "forged-csrf-0000000000000000");
    let (status, text) = post(&addr, &refund.path, Some(&admin), &forged).await;
    assert_eq!(status, 403, "refund with a wrong csrf: {text}");
    let (status, text) = post(&addr, &void.path, Some(&admin), &void.without("csrf")).await;
    assert_eq!(status, 403, "void without csrf: {text}");
    let (status, text) = post(&addr, &refund.path, None, &refund.fields).await;
    assert!(
        status == 403 || status == 303,
        "refund without a session: {status} {text}"
    );
    let t = transfer(&api, "buy-1").await;
    assert!(t["refunded_by"].is_null(), "a refused POST refunded: {t}");
    assert_eq!(transfer(&api, "hold-1").await["state"], "held");
    assert_eq!(
        (balance(&api, "alice").await, balance(&api, "bob").await),
        (800, 100)
    );
    // The same request with its csrf is carried out: the refusals were the csrf's.
    let (status, text) = post(&addr, &refund.path, Some(&admin), &refund.fields).await;
    assert!(
        status == 303 || status == 200,
        "refund with csrf: {status} {text}"
    );
    let t = transfer(&api, "buy-1").await;
    assert!(
        t["refunded_by"].is_string(),
        "the POST with csrf refunds: {t}"
    );

    // A read session: every page, and no action form.
    b.click("form#logout button").await;
    b.wait_path(|p| p == "/console/login", "sign-out").await;
    b.sign_in(READER).await;
    assert!(
        b.text("#whoami").await.contains("read"),
        "#whoami names read"
    );
    let forms = [
        "form#redrive",
        "form#refund",
        "form#capture",
        "form#void",
        "form#extend",
        "form.redrive",
        "form#close",
        "form#lower-bound",
    ];
    for page in [
        "/console",
        "/console/transfers",
        "/console/transfers/buy-1",
        "/console/transfers/hold-1",
        "/console/stuck",
        "/console/canceled",
        "/console/accounts",
        "/console/accounts/alice",
    ] {
        b.go(page).await;
        b.el("#whoami").await;
        assert_eq!(b.path().await, page, "a read session sees {page}");
        for f in forms {
            assert!(
                b.all(f).await.is_empty(),
                "a read session sees {f} on {page}"
            );
        }
    }
    b.go("/console/transfers/hold-1").await;
    assert_eq!(b.text("#state").await, "held");
    b.shot("transfer-read-session").await;
    let reader = b.cookie_header().await;
    let (status, text) = post(&addr, &void.path, Some(&reader), &void.without("csrf")).await;
    assert_eq!(status, 403, "a read session's void without csrf: {text}");
    let (status, text) = post(&addr, &void.path, Some(&reader), &void.fields).await;
    assert_eq!(
        status, 403,
        "a read session's void with the admin's csrf: {text}"
    );
    assert_eq!(transfer(&api, "hold-1").await["state"], "held");
    close(b, serve).await;
}

// ---------------------------------------------------------------------------------------
// The server and its API.
// ---------------------------------------------------------------------------------------

/// One `xfer serve` process with the flags given (and `--listen 127.0.0.1:0`).
/// `xfer serve` on the embedded store in `dir/data`, with both tokens.
fn embedded(dir: &Path, name: &str) -> Serve {
    let data = dir.join("data").display().to_string();
    let mut args = vec!["--data-dir".to_string(), data];
    args.extend(token_args());
    serve(&args, dir, name)
}

/// `xfer serve ARGS` (logs to `logs/NAME.log`), with no timing but the test's own.
fn serve(args: &[String], logs: &Path, name: &str) -> Serve {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Serve::start_args(&args, logs, name)
}

/// A client of `s` with the admin token.
/// An embedded `xfer serve` ready, with the opening accounts, and an admin client of it.
async fn opened() -> (tempfile::TempDir, Serve, Client) {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let serve = embedded(tmp.path(), "serve");
    serve.ready().await;
    let api = admin_client(&serve);
    opening(&api).await;
    (tmp, serve, api)
}

/// Closes the browser, then stops the server, which must exit cleanly.
async fn close(b: Browser, serve: Serve) {
    b.close().await;
    let status = serve.terminate();
    assert!(status.success(), "{status}");
}

fn admin_client(s: &Serve) -> Client {
    s.client_with(Some(ADMIN))
}

fn token_args() -> Vec<String> {
    vec![
        "--auth-token".into(),
        format!("{ADMIN}:admin"),
        "--auth-token".into(),
        format!("{READER}:read"),
    ]
}

async fn create(c: &Client, id: &str, lower_bound: Value) {
    let usd = c
        .post("/v1/assets", &json!({"code": "USD", "scale": 2}))
        .await;
    assert_eq!(usd.expect("declare USD").status, 201, "declare USD");
    let a = c
        .post(
            "/v1/accounts",
            &json!({"id": id, "asset": "USD", "lower_bound": lower_bound}),
        )
        .await
        .expect("create an account");
    assert_eq!(a.status, 201, "create {id}: {}", a.text);
}

/// bank (unbounded), alice (funded with 900), bob, carol.
async fn opening(c: &Client) {
    create(c, "bank", json!("unbounded")).await;
    for id in ["alice", "bob", "carol"] {
        create(c, id, json!(0)).await;
    }
    pay(c, "fund-alice", "bank", "alice", 900, "done").await;
}

/// Submits a transfer and waits for its outcome, which must be `state`.
async fn pay(c: &Client, id: &str, from: &str, to: &str, amount: u64, state: &str) {
    let body = json!({"id": id, "postings": [{"from": from, "to": to, "asset": "USD", "amount": amount}],
                      "metadata": json!({"test": "console"}).to_string()});
    let a = c.post("/v1/transfers", &body).await.expect("a transfer");
    assert_eq!(
        (a.status, a.body["state"].as_str()),
        (200, Some(state)),
        "{id}: {}",
        a.text
    );
}

/// A hold of `amount` for ten minutes.
async fn hold(c: &Client, id: &str, from: &str, to: &str, amount: u64) {
    let body = json!({"id": id, "postings": [{"from": from, "to": to, "asset": "USD", "amount": amount}],
                      "hold": {"ttl_ms": 600_000}});
    let a = c.post("/v1/transfers", &body).await.expect("a hold");
    assert_eq!(
        (a.status, a.body["state"].as_str()),
        (200, Some("held")),
        "{id}: {}",
        a.text
    );
}

async fn transfer(c: &Client, id: &str) -> Value {
    c.get(&format!("/v1/transfers/{}", segment(id)))
        .await
        .expect("GET a transfer")
        .ok()
        .unwrap_or_else(|e| panic!("{id}: {e}"))
}

async fn balance(c: &Client, id: &str) -> i64 {
    let a = c
        .get(&format!("/v1/accounts/{id}"))
        .await
        .expect("GET an account")
        .ok()
        .unwrap_or_else(|e| panic!("{id}: {e}"));
    a["balance"].as_i64().expect("a balance")
}

/// The ids of every listed transfer that refunds `id`.
async fn refunds_of(c: &Client, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut path = "/v1/transfers?limit=1000".to_string();
    loop {
        let page = c
            .get(&path)
            .await
            .expect("GET /v1/transfers")
            .ok()
            .expect("a page");
        for t in page["transfers"].as_array().expect("transfers") {
            if t["refund_of"] == id {
                out.push(t["id"].as_str().expect("an id").to_string());
            }
        }
        match page["next_before"].as_str() {
            Some(next) => path = format!("/v1/transfers?limit=1000&before={next}"),
            None => return out,
        }
    }
}

/// One POST of a form (`application/x-www-form-urlencoded`) on its own connection, with
/// the session cookie if given; answers the status and the whole response.
async fn post(
    addr: &str,
    path: &str,
    cookie: Option<&str>,
    fields: &[(String, String)],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = form_encode(fields);
    let cookie = cookie.map_or(String::new(), |c| format!("cookie: {c}\r\n"));
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\norigin: http://{addr}\r\n{cookie}\
         content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("a connection");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request is sent");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("the response");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    (status, text)
}

fn form_encode(fields: &[(String, String)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", url_encode(k), url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// `s` percent-encoded as a form's value (what browsers leave as is: letters, digits,
/// `*-._`; the tests' values have no spaces).
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'_' | b'.' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The first number in `text` (`"3 stuck"` → 3).
fn number(text: &str) -> Option<u64> {
    let digits: String = text
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------
// The browser.
// ---------------------------------------------------------------------------------------

/// chromedriver on a free loopback port, in a process group of its own (with the
/// browsers it starts): dropped, the whole group is killed, so that a failed test leaves no
/// Chromium behind.
struct Chromedriver {
    child: Child,
    port: u16,
}

impl Chromedriver {
    fn start(logs: &Path) -> Chromedriver {
        let binary = std::env::var("XFER_TEST_CHROMEDRIVER")
            .unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        assert!(
            Path::new(&binary).exists(),
            "{binary} is missing: the console tests need chromedriver and Chromium \
             (apt-get install chromium chromium-driver, as .ci/run does)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = logs.join(format!("chromedriver-{port}.log"));
        let child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{binary} does not start: {e}"));
        let mut driver = Chromedriver { child, port };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return driver;
            }
            if let Ok(Some(status)) = driver.child.try_wait() {
                panic!(
                    "{binary} exited ({status}); log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        reap(&mut driver.child);
        panic!("{binary} does not answer on port {port} after 10 s");
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        // The group chromedriver leads (its id): chromedriver and the browsers it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        reap(&mut self.child);
    }
}

/// A form as the browser would send it: where to, and its fields.
struct Form {
    path: String,
    fields: Vec<(String, String)>,
}

impl Form {
    fn without(&self, name: &str) -> Vec<(String, String)> {
        self.fields
            .iter()
            .filter(|(k, _)| k != name)
            .cloned()
            .collect()
    }

    fn with(&self, name: &str, value: &str) -> Vec<(String, String)> {
        let mut out = self.without(name);
        out.push((name.to_string(), value.to_string()));
        out
    }
}

/// One headless Chromium session on the console at `base`.
struct Browser {
    wd: fantoccini::Client,
    base: String,
    /// Chromium's profile.
    _profile: tempfile::TempDir,
    _driver: Chromedriver,
}

impl Browser {
    async fn open(base: &str, logs: &Path) -> Browser {
        let driver = Chromedriver::start(logs);
        let chromium =
            std::env::var("XFER_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        assert!(
            Path::new(&chromium).exists(),
            "{chromium} is missing: apt-get install chromium chromium-driver, as .ci/run does"
        );
        let profile = tempfile::tempdir().expect("a profile dir");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--window-size=1280,800",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let wd = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .unwrap_or_else(|e| panic!("no browser session from chromedriver: {e}"));
        Browser {
            wd,
            base: base.trim_end_matches('/').to_string(),
            _profile: profile,
            _driver: driver,
        }
    }

    async fn close(self) {
        let _ = self.wd.clone().close().await;
    }

    async fn go(&self, path: &str) {
        let url = format!("{}{path}", self.base);
        self.wd
            .goto(&url)
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    }

    /// The current page's path and query.
    async fn path(&self) -> String {
        let url = self.wd.current_url().await.expect("the current URL");
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        }
    }

    /// Where the browser is and the start of the page, for failure messages.
    async fn context(&self) -> String {
        let url = self
            .wd
            .current_url()
            .await
            .map_or_else(|e| e.to_string(), |u| u.to_string());
        let source = self.wd.source().await.unwrap_or_default();
        let start: String = source.chars().take(2_000).collect();
        format!("at {url}; page:\n{start}")
    }

    /// Waits until the current path (and query) satisfies `ok`.
    async fn wait_path(&self, ok: impl Fn(&str) -> bool, what: &str) {
        for _ in 0..(WAIT.as_millis() / 50) {
            if ok(&self.path().await) {
                return;
            }
            TokioSleeper.sleep(50).await;
        }
        panic!("{what}: not reached; {}", self.context().await);
    }

    /// The element `css`, waited for.
    async fn el(&self, css: &str) -> Element {
        match self
            .wd
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
        {
            Ok(e) => e,
            Err(e) => panic!("{css}: {e}; {}", self.context().await),
        }
    }

    /// Every element `css` on the page now.
    async fn all(&self, css: &str) -> Vec<Element> {
        self.wd
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
    }

    /// Fails if `css` is on the page.
    async fn none(&self, css: &str) {
        if !self.all(css).await.is_empty() {
            panic!("{css} should not be shown; {}", self.context().await);
        }
    }

    /// The text of `css` (waited for), trimmed.
    async fn text(&self, css: &str) -> String {
        let e = self.el(css).await;
        e.text()
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .trim()
            .to_string()
    }

    /// The texts of every `css` now, trimmed.
    async fn texts(&self, css: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in self.all(css).await {
            out.push(e.text().await.expect("text").trim().to_string());
        }
        out
    }

    /// The attribute `name` of every `css` now.
    async fn attrs(&self, css: &str, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in self.all(css).await {
            out.push(
                e.attr(name)
                    .await
                    .expect("an attribute")
                    .unwrap_or_default(),
            );
        }
        out
    }

    /// The `data-id` of each `tr.transfer` of the table `table` (waited for), in order.
    async fn row_ids(&self, table: &str) -> Vec<String> {
        self.el(table).await;
        self.attrs(&format!("{table} tr.transfer"), "data-id").await
    }

    /// The rows of `table#intents` (waited for): each account and its intent's state.
    async fn intents(&self) -> Vec<(String, String)> {
        self.el("table#intents").await;
        let mut out = Vec::new();
        for row in self.all("table#intents tbody tr").await {
            let cells = row.find_all(Locator::Css("td")).await.expect("cells");
            let mut texts = Vec::new();
            for c in cells {
                texts.push(c.text().await.expect("text").trim().to_string());
            }
            if let [account, .., state] = texts.as_slice() {
                out.push((account.clone(), state.clone()));
            }
        }
        out
    }

    /// The `value` of the input `css` (waited for).
    async fn value(&self, css: &str) -> String {
        let e = self.el(css).await;
        e.prop("value")
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .unwrap_or_default()
    }

    async fn outer_html(&self, css: &str) -> String {
        self.el(css).await.html(false).await.expect("html")
    }

    async fn click(&self, css: &str) {
        let e = self.el(css).await;
        if let Err(err) = e.click().await {
            panic!("click {css}: {err}; {}", self.context().await);
        }
    }

    async fn fill(&self, css: &str, value: &str) {
        let e = self.el(css).await;
        e.clear()
            .await
            .unwrap_or_else(|e| panic!("clear {css}: {e}"));
        if !value.is_empty() {
            e.send_keys(value)
                .await
                .unwrap_or_else(|e| panic!("type into {css}: {e}"));
        }
    }

    /// Sets fields of `form#filter` (a `select` by value, the others typed), submits it,
    /// and waits for the page it asks for.
    async fn filter(&self, fields: &[(&str, &str)]) {
        let before = self.path().await;
        for (name, value) in fields {
            let css = format!("form#filter [name={name}]");
            let e = self.el(&css).await;
            let kind = e.attr("type").await.expect("a type").unwrap_or_default();
            if e.tag_name().await.expect("a tag") == "select" {
                e.select_by_value(value)
                    .await
                    .unwrap_or_else(|e| panic!("select {value:?} in {css}: {e}"));
            } else if kind == "datetime-local" {
                // Typed, it would depend on the browser's locale.
                self.wd
                    .execute(
                        "document.querySelector(arguments[0]).value = arguments[1];",
                        vec![json!(css), json!(value)],
                    )
                    .await
                    .unwrap_or_else(|e| panic!("set {css}: {e}"));
            } else {
                self.fill(&css, value).await;
            }
        }
        self.click("form#filter button[type=submit]").await;
        let want: Vec<String> = fields
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={}", url_encode(v)))
            .collect();
        self.wait_path(
            |p| {
                p != before
                    && p.starts_with("/console/transfers?")
                    && want.iter().all(|w| p.contains(w.as_str()))
            },
            &format!("form#filter with {fields:?}"),
        )
        .await;
    }

    /// Signs in with `token` on the login page; waits for the overview.
    async fn sign_in(&self, token: &str) {
        self.go("/console/login").await;
        self.fill("form#login input[name=token]", token).await;
        self.click("form#login button[type=submit]").await;
        self.wait_path(|p| p == "/console", "sign-in lands on /console")
            .await;
        self.el("#whoami").await;
    }

    /// The action (path) and the fields `form_css` would send now.
    async fn form(&self, form_css: &str) -> Form {
        let form = self.el(form_css).await;
        let action = form
            .prop("action")
            .await
            .expect("action")
            .unwrap_or_default();
        let path = action
            .strip_prefix(&self.base)
            .unwrap_or_else(|| panic!("{form_css} posts to {action:?}, not on {}", self.base))
            .to_string();
        let method = form
            .attr("method")
            .await
            .expect("method")
            .unwrap_or_default();
        assert!(
            method.eq_ignore_ascii_case("post"),
            "{form_css} is a POST form: {method:?}"
        );
        let fields = self
            .wd
            .execute(
                "return Array.from(new FormData(document.querySelector(arguments[0])).entries())
                     .map(([k, v]) => [k, String(v)]);",
                vec![json!(form_css)],
            )
            .await
            .expect("the form's fields");
        let fields = fields
            .as_array()
            .expect("pairs")
            .iter()
            .map(|p| {
                (
                    p[0].as_str().expect("a name").to_string(),
                    p[1].as_str().expect("a value").to_string(),
                )
            })
            .collect();
        Form { path, fields }
    }

    /// The browser's cookies for the console, as a `cookie` header.
    async fn cookie_header(&self) -> String {
        let cookies = self.wd.get_all_cookies().await.expect("cookies");
        assert!(!cookies.is_empty(), "no session cookie");
        cookies
            .iter()
            .map(|c| format!("{}={}", c.name(), c.value()))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The page's screenshot in `<target>/console-screenshots/NAME.png`.
    async fn shot(&self, name: &str) {
        let png = self.wd.screenshot().await.expect("a screenshot");
        let dir = screenshots_dir();
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let file = dir.join(format!("{name}.png"));
        std::fs::write(&file, png).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
}

/// `$CARGO_TARGET_DIR/console-screenshots` (a relative one taken from the workspace, as
/// cargo does), by default the workspace's `target/console-screenshots`.
fn screenshots_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if Path::new(&t).is_absolute() => PathBuf::from(t),
        Some(t) => workspace.join(t),
        None => workspace.join("target"),
    };
    target.join("console-screenshots")
}

//! The console's HTML: one function per page, over the layout. Every value is escaped by
//! maud; the only script is `app.js` (the overview's chart), allowed by the
//! Content-Security-Policy as `'self'`.

use crate::auth::Scope;
use crate::catalog::Catalog;
use crate::stats::Stats;
use maud::{html, Markup, DOCTYPE};
use xfer_core::{Account, IntentState, LowerBound, TransferRecord, TransferState};

/// What every page knows of who is looking.
pub struct Viewer<'a> {
    /// The session's scope.
    pub scope: Scope,
    /// Its CSRF token, for the forms.
    pub csrf: &'a str,
    /// The last action's outcome, shown once.
    pub flash: Option<&'a str>,
    /// Sign-in is on (tokens configured): show sign out.
    pub signed_in: bool,
    /// The declared assets: amounts in their scale.
    pub catalog: std::sync::Arc<Catalog>,
}

impl Viewer<'_> {
    fn admin(&self) -> bool {
        self.scope >= Scope::Admin
    }
}

/// A time (ms since the epoch) as a UTC date.
pub fn when(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let f = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]"
    );
    t.format(&f).unwrap_or_default()
}

/// An amount with its asset, in the asset's declared scale (minor units if it is not
/// declared), its whole part grouped by thousands.
pub fn amount(n: i128, asset: &str, catalog: &Catalog) -> String {
    let code = xfer_core::AssetCode::new(asset, "asset").ok();
    let text = code
        .and_then(|c| catalog.decimal(&c, n.abs()))
        .unwrap_or_else(|| n.unsigned_abs().to_string());
    let (digits, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(fraction);
    }
    format!("{}{out} {asset}", if n < 0 { "-" } else { "" })
}

/// Account `a`'s lower bound as the form shows and takes it: in its asset's declared
/// scale, minor units if it is not declared, or `unbounded`.
fn bound_in(a: &Account, catalog: &Catalog) -> String {
    match a.lower_bound {
        LowerBound::Bounded(n) => catalog
            .decimal(&a.asset, i128::from(n))
            .unwrap_or_else(|| n.to_string()),
        LowerBound::Unbounded => "unbounded".into(),
    }
}

fn csrf(v: &Viewer<'_>) -> Markup {
    html! { input type="hidden" name="csrf" value=(v.csrf); }
}

/// The page around `body`.
pub fn layout(v: Option<&Viewer<'_>>, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · xfer" }
                link rel="stylesheet" href="/console/assets/style.css";
            }
            body {
                header {
                    a.brand href="/console" { "xfer" }
                    @if let Some(v) = v {
                        nav {
                            a #nav-overview href="/console" { "Overview" }
                            a #nav-transfers href="/console/transfers" { "Transfers" }
                            a #nav-stuck href="/console/stuck" { "Stuck" }
                            a #nav-canceled href="/console/canceled" { "Canceled" }
                            a #nav-accounts href="/console/accounts" { "Accounts" }
                        }
                        span #whoami { (v.scope.as_str()) }
                        @if v.signed_in {
                            form #logout method="post" action="/console/logout" {
                                (csrf(v))
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    @if let Some(text) = v.and_then(|v| v.flash) {
                        p #outcome .outcome { (text) }
                    }
                    (body)
                }
            }
        }
    }
}

/// The sign-in form, with why the last try failed.
pub fn login(error: Option<&str>) -> Markup {
    layout(
        None,
        "Sign in",
        html! {
            @if let Some(e) = error { p #error .error { (e) } }
            form #login method="post" action="/console/login" {
                label { "Token " input type="password" name="token" autocomplete="off" required; }
                button type="submit" { "Sign in" }
            }
            p .hint { "Sign in with an API token: a read token sees, an admin token can act." }
        },
    )
}

/// An error page's body: the code and message, as the API would answer them.
pub fn error(code: &str, message: &str) -> Markup {
    html! { p #error .error { strong { (code) } ": " (message) } }
}

/// The overview.
pub fn overview(s: &Stats, catalog: &Catalog) -> Markup {
    html! {
        section .cards {
            div .card { span .label { "Transfers/s" } span #rate .big { "…" } }
            div .card { span .label { "Mean latency" } span #latency .big { "…" } }
            div .card { span .label { "In flight" } span #in-flight .big { (s.in_flight) } }
            div .card { span .label { "Stuck" } a href="/console/stuck" { span #stuck-count .big { (s.stuck) } } }
            div .card {
                span .label { "Canceled, last hour" }
                a href="/console/canceled" {
                    span #canceled-hour .big {
                        @match s.canceled_last_hour { Some(n) => (n), None => "n/a" }
                    }
                }
            }
            div .card {
                span .label { "Audit" }
                span #audit .big .(if s.clean { "ok" } else { "bad" }) {
                    @if s.clean { "clean" } @else { "LEAKS: " (s.audit.leaks.len()) }
                }
            }
        }
        // The chart's points come from /console/stats.json every 2 s (app.js).
        figure {
            svg #rate-chart viewBox="0 0 600 120" preserveAspectRatio="none" role="img" aria-label="transfers per second" {
                polyline #rate-line points="" {}
            }
            figcaption { "Transfers answered per second, the last two minutes" }
        }
        h2 { "Totals per asset" }
        table #assets {
            thead { tr { th { "Asset" } th { "Accounts" } th { "Sum of balances" } th { "Reserved" } th { "Incoming" } } }
            tbody {
                @for a in &s.audit.assets {
                    tr {
                        td { (a.asset) }
                        td .num { (a.accounts) }
                        td .num { (amount(a.balance, &a.asset, catalog)) }
                        td .num { (amount(a.reserved, &a.asset, catalog)) }
                        td .num { (amount(a.incoming, &a.asset, catalog)) }
                    }
                }
            }
        }
        @if !s.audit.in_flight.is_empty() {
            p { "In flight on the stores: "
                @for (state, n) in &s.audit.in_flight { span .pill { (state) " " (n) } " " } }
        }
        h2 { "Shards" }
        table #shards {
            thead { tr { th { "Shard" } th { "Store" } th { "Reachable" } th { "Round trip" } } }
            tbody {
                @for sh in &s.shards {
                    tr {
                        td { (sh.shard) }
                        td { (sh.store) }
                        td .reachable .(if sh.reachable { "ok" } else { "bad" }) {
                            @if sh.reachable { "yes" } @else { "no" }
                        }
                        td {
                            @match (&sh.round_trip_ms, &sh.error) {
                                (Some(ms), _) => (format!("{ms:.2} ms")),
                                (None, Some(e)) => (e),
                                _ => "",
                            }
                        }
                    }
                }
            }
        }
        script src="/console/assets/app.js" {}
    }
}

fn state_class(s: TransferState) -> &'static str {
    match s {
        TransferState::Done => "ok",
        TransferState::Canceled | TransferState::Canceling => "bad",
        _ => "warn",
    }
}

fn postings_summary(r: &TransferRecord, catalog: &Catalog) -> Markup {
    html! {
        @for p in r.spec.postings.iter() {
            div { (p.from.as_str()) " → " (p.to.as_str()) " " (amount(i128::from(p.amount.units()), p.asset.as_str(), catalog)) }
        }
    }
}

/// A table of transfers, each row linking to its page.
pub fn transfer_rows(
    id: &str,
    rows: &[TransferRecord],
    catalog: &Catalog,
    extra: &dyn Fn(&TransferRecord) -> Markup,
) -> Markup {
    html! {
        div .scroll {
            table id=(id) {
                thead { tr { th { "Id" } th { "State" } th { "Postings" } th { "Accepted (UTC)" } th {} } }
                tbody {
                    @for r in rows {
                        tr .transfer data-id=(r.spec.id.as_str()) {
                            td { a .transfer-link href=(format!("/console/transfers/{}", r.spec.id.as_str())) { (r.spec.id.as_str()) } }
                            td .state .(state_class(r.state)) { (r.state.to_string()) }
                            td { (postings_summary(r, catalog)) }
                            td { (when(r.created_at.as_ms())) }
                            td { (extra(r)) }
                        }
                    }
                }
            }
        }
        @if rows.is_empty() { p .empty { "None." } }
    }
}

/// The transfers page's filters, as given back to the form.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListForm {
    /// See `TransferFilter`.
    pub state: Option<String>,
    /// See `TransferFilter`.
    pub account: Option<String>,
    /// See `TransferFilter`.
    pub asset: Option<String>,
    /// See `TransferFilter`.
    pub id_prefix: Option<String>,
    /// `key=value`.
    pub metadata: Option<String>,
    /// `datetime-local`, UTC.
    pub since: Option<String>,
    /// `datetime-local`, UTC.
    pub until: Option<String>,
    /// Page size.
    pub limit: Option<String>,
    /// The cursor.
    pub before: Option<String>,
}

/// The transfers page.
pub fn transfers(
    form: &ListForm,
    rows: &[TransferRecord],
    catalog: &Catalog,
    next: Option<String>,
    error: Option<Markup>,
) -> Markup {
    let val = |o: &Option<String>| o.clone().unwrap_or_default();
    let states = [
        "",
        "initial",
        "pending",
        "held",
        "applied",
        "canceling",
        "done",
        "canceled",
    ];
    html! {
        form #filter .filters method="get" action="/console/transfers" {
            label { "State " select name="state" {
                @for s in states {
                    option value=(s) selected[form.state.as_deref().unwrap_or("") == s] { (if s.is_empty() { "any" } else { s }) }
                }
            } }
            label { "Account " input name="account" value=(val(&form.account)); }
            label { "Asset " input name="asset" value=(val(&form.asset)) size="8"; }
            label { "Id prefix " input name="id_prefix" value=(val(&form.id_prefix)); }
            label { "Metadata " input name="metadata" placeholder="key=value" value=(val(&form.metadata)); }
            label { "Since (UTC) " input type="datetime-local" step="1" name="since" value=(val(&form.since)); }
            label { "Until (UTC) " input type="datetime-local" step="1" name="until" value=(val(&form.until)); }
            label { "Per page " input type="number" name="limit" min="1" max="1000" value=(form.limit.clone().unwrap_or_else(|| "50".into())) size="5"; }
            button type="submit" { "Filter" }
        }
        @if let Some(e) = error { (e) }
        (transfer_rows("transfers", rows, catalog, &|_| html! {}))
        @if let Some(next) = next {
            a #next-page .button href=(next) { "Older →" }
        }
    }
}

/// One transfer: postings, state, timeline, each account's intent, and the actions an
/// admin may take.
pub fn transfer(
    v: &Viewer<'_>,
    r: &TransferRecord,
    intents: &[(String, Option<IntentState>)],
    taken: &[u64],
    refund_id: &str,
) -> Markup {
    let id = r.spec.id.as_str();
    let action = |what: &str| format!("/console/transfers/{id}/{what}");
    html! {
        dl .facts {
            dt { "Id" } dd #transfer-id { (id) }
            dt { "State" } dd #state .(state_class(r.state)) { (r.state.to_string()) }
            dt { "Kind" } dd { (if matches!(r.spec.kind, xfer_core::TransferKind::Hold { .. }) { "hold" } else { "transfer" }) }
            @if let Some(reason) = &r.reason { dt { "Reason" } dd #reason { (reason.to_string()) } }
            @if let Some(of) = &r.spec.refund_of {
                dt { "Refund of" } dd { a href=(format!("/console/transfers/{}", of.as_str())) { (of.as_str()) } }
            }
            @if let Some(by) = &r.refunded_by {
                dt { "Refunded by" } dd #refunded-by { a href=(format!("/console/transfers/{}", by.as_str())) { (by.as_str()) } }
                dt { "Refunds" } dd #refunds {
                    @for (i, link) in r.refund_links().iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(format!("/console/transfers/{}", link.refund.as_str())) { (link.refund.as_str()) }
                        " ("
                        @for (j, (a, p)) in link.amounts.iter().zip(r.spec.postings.iter()).enumerate() {
                            @if j > 0 { ", " }
                            (amount(i128::from(a.units()), p.asset.as_str(), &v.catalog))
                        }
                        ")"
                    }
                }
            }
            dt { "Accepted (UTC)" } dd { (when(r.created_at.as_ms())) }
            dt { "Last change (UTC)" } dd { (when(r.updated_at.as_ms())) }
            dt { "Deadline (UTC)" } dd { (when(r.deadline.as_ms())) }
            @if let Some(h) = r.hold_expires_at { dt { "Hold expires (UTC)" } dd { (when(h.as_ms())) } }
            dt { "Owner" } dd { (r.owner.as_ref().map_or("none".to_string(), |o| o.to_string())) " · epoch " (r.epoch) }
            dt { "Metadata" } dd { code { (r.spec.metadata) } }
        }
        h2 { "Postings" }
        div .scroll { table #postings {
            thead { tr { th { "From" } th { "To" } th { "Amount" } @if !r.captured.is_empty() { th { "Captured" } } } }
            tbody { @for (i, p) in r.spec.postings.iter().enumerate() {
                tr {
                    td { a href=(format!("/console/accounts/{}", p.from.as_str())) { (p.from.as_str()) } }
                    td { a href=(format!("/console/accounts/{}", p.to.as_str())) { (p.to.as_str()) } }
                    td .num { (amount(i128::from(p.amount.units()), p.asset.as_str(), &v.catalog)) }
                    @if let Some(c) = r.captured.get(i) {
                        td .num .captured { (amount(i128::from(c.units()), p.asset.as_str(), &v.catalog)) }
                    }
                }
            } }
        } }
        h2 { "Timeline" }
        ol #timeline {
            @for step in super::timeline(r) {
                li data-state=(step.state) {
                    span .when { (when(step.at)) } " "
                    strong { (step.state) }
                    @if let Some(by) = &step.by { " by " (by) }
                    @if let Some(note) = &step.note { " · " (note) }
                }
            }
        }
        h2 { "Intents" }
        div .scroll { table #intents {
            thead { tr { th { "Account" } th { "Intent" } } }
            tbody { @for (account, state) in intents {
                tr { td { (account) } td .intent { (match state {
                    Some(IntentState::Open) => "open",
                    Some(IntentState::Posted) => "posted",
                    Some(IntentState::Released) => "released",
                    None => "none",
                }) } }
            } }
        } }
        @if v.admin() {
            h2 { "Actions" }
            div .actions {
                @if !r.state.is_terminal() {
                    form #redrive method="post" action=(action("redrive")) {
                        (csrf(v)) button type="submit" { "Re-drive" }
                    }
                }
                @if r.state == TransferState::Held {
                    form #capture method="post" action=(action("capture")) {
                        (csrf(v)) button type="submit" { "Capture" }
                    }
                    form #void method="post" action=(action("void")) {
                        (csrf(v)) button type="submit" .danger { "Void" }
                    }
                    form #extend method="post" action=(action("extend")) {
                        (csrf(v))
                        label { "Expire in " input type="number" min="1" name="minutes" required; " minutes" }
                        button type="submit" { "Extend" }
                    }
                }
                @if r.state == TransferState::Done && r.spec.refund_of.is_none() && refundable(r, taken) {
                    form #refund method="post" action=(action("refund")) {
                        (csrf(v))
                        input type="hidden" name="refund_id" value=(refund_id);
                        @for (i, (p, taken)) in r.moved_postings().iter().zip(taken).enumerate() {
                            label {
                                "Move back of " (p.from.as_str()) " → " (p.to.as_str())
                                " (" (amount(i128::from(p.amount.units().saturating_sub(*taken)), p.asset.as_str(), &v.catalog)) " left), "
                                // The unit the field was drawn in goes with it, so that it is read
                                // the same way whatever the catalog learns meanwhile.
                                @if v.catalog.get(&p.asset).is_some() {
                                    "in " (p.asset.as_str()) " "
                                    input type="hidden" name=(format!("unit{i}")) value="decimal";
                                    input type="text" inputmode="decimal" pattern="[0-9]+([.][0-9]+)?" name=(format!("amount{i}")) placeholder="what is left";
                                } @else {
                                    "minor units "
                                    input type="hidden" name=(format!("unit{i}")) value="minor";
                                    input type="number" min="1" name=(format!("amount{i}")) placeholder="what is left";
                                }
                            }
                        }
                        label { input type="checkbox" name="confirm" value="yes" required; " Refund " (id) " (blank amounts: what is left of every posting)" }
                        button type="submit" .danger { "Refund" }
                    }
                }
            }
        }
    }
}

/// The stuck transfers, each with why and (admin) a re-drive.
pub fn stuck(v: &Viewer<'_>, rows: &[(TransferRecord, String)]) -> Markup {
    let records: Vec<TransferRecord> = rows.iter().map(|(r, _)| r.clone()).collect();
    let why = |r: &TransferRecord| {
        rows.iter()
            .find(|(x, _)| x.spec.id == r.spec.id)
            .map(|(_, w)| w.clone())
            .unwrap_or_default()
    };
    html! {
        p .hint { "Unfinished past their lease or hold: the sweeper finishes them on its next pass; re-drive one now." }
        (transfer_rows("stuck", &records, &v.catalog, &|r| html! {
            span .why { (why(r)) }
            @if v.admin() {
                form .redrive method="post" action=(format!("/console/transfers/{}/redrive", r.spec.id.as_str())) {
                    (csrf(v)) button type="submit" { "Re-drive" }
                }
            }
        }))
    }
}

/// The canceled transfers with their reasons.
pub fn canceled(rows: &[TransferRecord], next: Option<String>, catalog: &Catalog) -> Markup {
    html! {
        (transfer_rows("canceled", rows, catalog, &|r| html! {
            span .reason { (r.reason.as_ref().map(|x| x.to_string()).unwrap_or_default()) }
        }))
        @if let Some(next) = next { a #next-page .button href=(next) { "More →" } }
    }
}

/// The accounts page: a search by id prefix and a page of accounts.
pub fn accounts(prefix: &str, rows: &[Account], next: Option<String>, catalog: &Catalog) -> Markup {
    html! {
        form #account-search .filters method="get" action="/console/accounts" {
            label { "Id starts with " input name="prefix" value=(prefix); }
            button type="submit" { "Search" }
        }
        div .scroll { table #accounts {
            thead { tr { th { "Id" } th { "Asset" } th { "Balance" } th { "Available" } th { "Status" } } }
            tbody { @for a in rows {
                tr .account data-id=(a.id.as_str()) {
                    td { a .account-link href=(format!("/console/accounts/{}", a.id.as_str())) { (a.id.as_str()) } }
                    td { (a.asset.as_str()) }
                    td .num { (amount(i128::from(a.balance), a.asset.as_str(), catalog)) }
                    td .num { (amount(a.available(), a.asset.as_str(), catalog)) }
                    td { (format!("{:?}", a.status).to_lowercase()) }
                }
            } }
        } }
        @if rows.is_empty() { p .empty { "None." } }
        @if let Some(next) = next { a #next-page .button href=(next) { "More →" } }
    }
}

/// One account: balances, open intents, history, and (admin) close and the lower bound.
pub fn account(
    v: &Viewer<'_>,
    a: &Account,
    labels: &xfer_store::Metadata,
    history: &[TransferRecord],
    next: Option<String>,
) -> Markup {
    let asset = a.asset.as_str();
    let id = a.id.as_str();
    html! {
        dl #balances .facts {
            dt { "Asset" } dd { (asset) }
            dt { "Status" } dd #account-status { (format!("{:?}", a.status).to_lowercase()) }
            dt { "Posted" } dd .num { (amount(i128::from(a.balance), asset, &v.catalog)) }
            dt { "Reserved" } dd .num { (amount(i128::from(a.reserved), asset, &v.catalog)) }
            dt { "Incoming" } dd .num { (amount(i128::from(a.incoming), asset, &v.catalog)) }
            dt { "Available" } dd .num #available { (amount(a.available(), asset, &v.catalog)) }
            dt { "Lower bound" } dd #lower-bound-value { (bound_in(a, &v.catalog)) }
            dt { "Labels" } dd #labels {
                @if labels.is_empty() { "none" }
                @for (k, val) in labels { span .label { (k) "=" (val) } " " }
            }
        }
        h2 { "Open intents" }
        ul #open-intents {
            @for (t, i) in a.intents.iter().filter(|(_, i)| i.state == IntentState::Open) {
                li { a href=(format!("/console/transfers/{}", t.as_str())) { (t.as_str()) }
                     " debit " (amount(i128::from(i.debit), asset, &v.catalog)) ", credit " (amount(i128::from(i.credit), asset, &v.catalog)) }
            }
        }
        h2 { "History, newest first" }
        (transfer_rows("history", history, &v.catalog, &|_| html! {}))
        @if let Some(next) = next { a #next-page .button href=(next) { "Older →" } }
        @if v.admin() {
            h2 { "Actions" }
            div .actions {
                form #lower-bound method="post" action=(format!("/console/accounts/{id}/lower_bound")) {
                    (csrf(v))
                    input type="hidden" name="unit" value=(if v.catalog.get(&a.asset).is_some() { "decimal" } else { "minor" });
                    label { "Lower bound " input name="lower_bound" value=(bound_in(a, &v.catalog)) size="12"; }
                    button type="submit" { "Change" }
                }
                form #close method="post" action=(format!("/console/accounts/{id}/close")) {
                    (csrf(v))
                    label { input type="checkbox" name="confirm" value="yes" required; " Close " (id) }
                    button type="submit" .danger { "Close" }
                }
            }
        }
    }
}

/// Whether a refund fits: every posting keeps something not taken back by refunds that
/// were not canceled (`taken`), since a refund moves back at least 1 of each.
fn refundable(r: &TransferRecord, taken: &[u64]) -> bool {
    r.moved_postings()
        .iter()
        .zip(taken)
        .all(|(p, taken)| *taken < p.amount.units())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_show_in_the_declared_scale_grouped_by_thousands() {
        let catalog = Catalog::new([xfer_core::Asset::new("USD", 2).unwrap()]);
        assert_eq!(amount(123_456_789, "USD", &catalog), "1,234,567.89 USD");
        assert_eq!(amount(-5, "USD", &catalog), "-0.05 USD");
        assert_eq!(amount(1_234_567, "SKU-1", &catalog), "1,234,567 SKU-1");
        assert_eq!(amount(-1_000, "SKU-1", &catalog), "-1,000 SKU-1");
    }
}

//! Readable tables of the API's JSON: accounts, transfers and the audit, as the CLI and the
//! demos print them.

use serde_json::Value;

/// Prints a JSON value, indented.
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// A JSON value as table text: strings bare, null as `-`.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints rows under headers, columns padded to their widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// `v[key]` in its asset's scale where the answer gives it (`key_decimal`), else as sent.
fn amount_text(v: &Value, key: &str) -> String {
    match &v[format!("{key}_decimal")] {
        Value::String(d) => d.clone(),
        _ => text(&v[key]),
    }
}

/// An account's metadata as `k=v,k2=v2` (`-` for none).
fn labels_text(m: &Value) -> String {
    match m.as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".to_string(),
    }
}

/// Prints declared assets.
pub fn assets_table(assets: &[Value]) {
    let rows: Vec<Vec<String>> = assets
        .iter()
        .map(|a| vec![text(&a["code"]), text(&a["scale"])])
        .collect();
    table(&["CODE", "SCALE"], &rows);
}

/// Prints accounts, amounts in their asset's scale where it is declared.
pub fn accounts_table(accounts: &[Value]) {
    let rows: Vec<Vec<String>> = accounts
        .iter()
        .map(|a| {
            vec![
                text(&a["id"]),
                text(&a["asset"]),
                amount_text(a, "balance"),
                amount_text(a, "reserved"),
                amount_text(a, "incoming"),
                amount_text(a, "available"),
                text(&a["lower_bound"]),
                text(&a["status"]),
                text(&a["in_flight"]),
                text(&a["shard"]),
                labels_text(&a["metadata"]),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "ASSET",
            "BALANCE",
            "RESERVED",
            "INCOMING",
            "AVAILABLE",
            "BOUND",
            "STATUS",
            "IN FLIGHT",
            "SHARD",
            "LABELS",
        ],
        &rows,
    );
}

/// Prints transfers, amounts in their asset's scale where it is declared.
pub fn transfers_table(transfers: &[Value]) {
    let rows: Vec<Vec<String>> = transfers
        .iter()
        .map(|t| {
            let postings: Vec<String> = t["postings"]
                .as_array()
                .map_or(&[][..], |v| v)
                .iter()
                .map(|p| {
                    // A hold captured in part: what moved of what was held.
                    let moved = match p["captured"] {
                        Value::Null => amount_text(p, "amount"),
                        _ => format!(
                            "{} (of {})",
                            amount_text(p, "captured"),
                            amount_text(p, "amount")
                        ),
                    };
                    format!(
                        "{moved} {} {}->{}",
                        text(&p["asset"]),
                        text(&p["from"]),
                        text(&p["to"])
                    )
                })
                .collect();
            let reason = match &t["reason"] {
                Value::Null => "-".to_string(),
                r => text(&r["message"]),
            };
            vec![
                text(&t["id"]),
                text(&t["state"]),
                text(&t["kind"]),
                postings.join("; "),
                reason,
            ]
        })
        .collect();
    table(&["ID", "STATE", "KIND", "POSTINGS", "REASON"], &rows);
}

/// Prints an audit report.
pub fn audit_table(report: &Value) {
    let rows: Vec<Vec<String>> = report["assets"]
        .as_array()
        .map_or(&[][..], |v| v)
        .iter()
        .map(|a| {
            let conserved = match &a["conserved"] {
                Value::Bool(true) => "yes",
                Value::Bool(false) => "NO",
                _ => "in flight",
            };
            vec![
                text(&a["asset"]),
                text(&a["accounts"]),
                text(&a["balance"]),
                text(&a["reserved"]),
                text(&a["incoming"]),
                conserved.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "ASSET",
            "ACCOUNTS",
            "BALANCE SUM",
            "RESERVED",
            "INCOMING",
            "CONSERVED",
        ],
        &rows,
    );
    let in_flight: Vec<String> = report["in_flight"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
        .unwrap_or_default();
    println!(
        "in flight: {}; open intents: {}; tombstones: {}",
        if in_flight.is_empty() {
            "none".to_string()
        } else {
            in_flight.join(" ")
        },
        text(&report["open_intents"]),
        text(&report["tombstones"])
    );
    let leaks = report["leaks"].as_array().map_or(&[][..], |v| v);
    if leaks.is_empty() {
        println!("audit: clean");
    } else {
        for l in leaks {
            println!(
                "LEAK {} {}: {}",
                text(&l["kind"]),
                text(&l["subject"]),
                text(&l["detail"])
            );
        }
        println!("audit: {} leaks", leaks.len());
    }
    if !report["replay"].is_null() {
        replay_table(&report["replay"]);
    }
}

/// What `GET /v1/audit?replay=true` found: the accounts whose balance differs from what
/// their transfers add up to, and the tombstones left past their horizon.
fn replay_table(r: &Value) {
    let rows: Vec<Vec<String>> = r["differences"]
        .as_array()
        .map_or(&[][..], |v| v)
        .iter()
        .map(|d| {
            vec![
                text(&d["account"]),
                text(&d["asset"]),
                text(&d["balance"]),
                text(&d["replayed"]),
            ]
        })
        .collect();
    if !rows.is_empty() {
        table(&["ACCOUNT", "ASSET", "BALANCE", "REPLAYED"], &rows);
    }
    for o in r["overdue_tombstones"].as_array().map_or(&[][..], |v| v) {
        println!(
            "OVERDUE tombstone of {} on {} (horizon {} ms)",
            text(&o["transfer"]),
            text(&o["account"]),
            text(&o["horizon_ms"])
        );
    }
    println!(
        "replay: {} transfers read, {} done replayed; {} accounts compared, {} busy; \
         {} differ; {} tombstones overdue",
        text(&r["transfers"]),
        text(&r["done"]),
        text(&r["accounts_compared"]),
        text(&r["accounts_busy"]),
        text(&r["differences_total"]),
        text(&r["overdue_tombstones_total"])
    );
}

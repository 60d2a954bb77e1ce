//! Every protocol step as one atomic single-document update: a `findOneAndUpdate` on the
//! record's `_id` with an update pipeline (MongoDB 4.2+) that computes the step's condition
//! (`_ok`, or `_case` where a step has several ways to succeed) from the document itself and
//! writes the step's effect only where it holds. No step reads and then writes, so a hot
//! account costs one update per step and never a retry.
//!
//! Only the success of a step is written here. The document comes back as it is after the
//! update; a step that changed it leaves its token in `_op` (`{k: token, o: outcome}`), and
//! one that did not left the document exactly as the step found it, atomically, so the
//! store answers it with `xfer_store::record`'s own rules on that document (`answer.rs`).
//! The failure rules (which refusal, which repeat) therefore exist once, in Rust.
//!
//! Why a pipeline and not a filter: with the condition in the filter, a step that does not
//! apply finds nothing, and the document read afterwards may already be another step's.
//!
//! Numbers: sums are checked in Decimal128 (`$toDecimal`) before they are stored as Int64,
//! so no stored number ever overflows (an Int64 `$add` that overflows would become a
//! double). Ids in `intents` keys have `.` written `~` (`documents.rs`).

use crate::documents::{amount_i64, amounts_bson, intent_key, json, ms};
use mongodb::bson::{doc, Bson, Document};
use xfer_core::{CancelReason, LowerBound, Timestamp, TransferState, TIMELINE_STEPS_MAX};
use xfer_store::{AccountOp, TransferOp};

/// One step's update: the pipeline, and whether an absent document is created.
pub(crate) struct Update {
    pub pipeline: Vec<Document>,
    pub upsert: bool,
}

const MAX: i64 = i64::MAX;

fn dec(e: impl Into<Bson>) -> Bson {
    Bson::Document(doc! {"$toDecimal": e.into()})
}

/// An amount as an exact Decimal128 (an amount may exceed Int64 before its sums are
/// checked).
fn amount(n: u64) -> Bson {
    dec(n.to_string())
}

fn long(e: impl Into<Bson>) -> Bson {
    Bson::Document(doc! {"$toLong": e.into()})
}

/// `then` where the stage's `_ok` holds, else `otherwise`.
fn when_ok(then: impl Into<Bson>, otherwise: impl Into<Bson>) -> Bson {
    Bson::Document(doc! {"$cond": ["$_ok", then.into(), otherwise.into()]})
}

fn marker(token: i64, outcome: impl Into<Bson>) -> Document {
    doc! {"k": token, "o": outcome.into()}
}

/// How a step says what it did. Most leave their token in `_op`; a prepare, post or
/// release appends to `_r` (see [`chain`]): `{o: outcome}` where it applied, else `{f: the
/// account's fields and the step's intent as the step found them}`.
pub(crate) enum Record {
    /// `_op: {k: token, o: outcome}` where the step applied.
    Marker(i64),
    /// An entry appended to `_r`, with this snapshot where the step did not apply.
    Appended(Document),
}

impl Record {
    fn field(&self) -> &'static str {
        match self {
            Record::Marker(_) => "_op",
            Record::Appended(_) => "_r",
        }
    }

    /// The field's new value: `applied` says whether the step applied.
    fn value(&self, applied: Bson, outcome: Bson) -> Bson {
        match self {
            Record::Marker(token) => {
                Bson::Document(doc! {"$cond": [applied, marker(*token, outcome), "$_op"]})
            }
            Record::Appended(snapshot) => {
                let entry = doc! {"$cond": [applied, {"o": outcome}, {"f": snapshot.clone()}]};
                Bson::Document(doc! {"$concatArrays": [{"$ifNull": ["$_r", []]}, [entry]]})
            }
        }
    }
}

/// The fields an account step's refusal rules read, as the step finds them (`intents.<t>`
/// only its own).
pub(crate) fn snapshot(key: &str) -> Document {
    doc! {
        "status": "$status", "asset": "$asset", "balance": "$balance", "reserved": "$reserved",
        "incoming": "$incoming", "lower_bound": "$lower_bound", "intent": intent_path(key),
    }
}

/// One update applying several account steps (prepares, posts, releases) of one account in
/// order: each finds the document as the one before left it, and appends its entry to `_r`.
/// A hot account's document is then rewritten once per batch, not once per step.
pub(crate) fn chain(steps: impl IntoIterator<Item = Update>) -> Update {
    let mut pipeline = vec![doc! {"$set": {"_r": []}}];
    let mut upsert = false;
    for step in steps {
        pipeline.extend(step.pipeline);
        upsert |= step.upsert;
    }
    Update { pipeline, upsert }
}

/// The pipeline of a step with one way to succeed: `_ok` from `condition`, then `set`
/// (each field's new value where `_ok` holds; unchanged otherwise), then the record.
fn guarded(condition: Bson, set: Document, record: Record, outcome: &str) -> Vec<Document> {
    let mut effect = Document::new();
    for (field, value) in set {
        let old = format!("${field}");
        effect.insert(field, when_ok(value, old));
    }
    effect.insert(record.field(), record.value("$_ok".into(), outcome.into()));
    vec![
        doc! {"$set": {"_ok": condition}},
        doc! {"$set": effect},
        doc! {"$unset": "_ok"},
    ]
}

fn bound(lb: LowerBound) -> Bson {
    match lb {
        LowerBound::Bounded(n) => Bson::Int64(n),
        LowerBound::Unbounded => Bson::Null,
    }
}

fn intent_path(key: &str) -> String {
    format!("$intents.{key}")
}

/// `$intents` with the entry `key` replaced by `value`.
fn with_intent(key: &str, value: impl Into<Bson>) -> Bson {
    let mut entry = Document::new();
    entry.insert(key, value.into());
    Bson::Document(doc! {"$mergeObjects": [{"$ifNull": ["$intents", {}]}, entry]})
}

/// The intent `key` with its state set to `state`.
fn intent_state(key: &str, state: &str) -> Bson {
    Bson::Document(doc! {"$mergeObjects": [intent_path(key), {"s": state}]})
}

/// The earliest tombstone horizon, with `horizon` added.
fn tomb_min_with(horizon: impl Into<Bson>) -> Bson {
    Bson::Document(doc! {"$min": [{"$ifNull": ["$tomb_min", MAX]}, horizon.into()]})
}

fn next_hseq() -> Bson {
    Bson::Document(doc! {"$add": [{"$ifNull": ["$hseq", 0_i64]}, 1_i64]})
}

/// The update for an account step, at the store's clock `now`; `None` for a read.
/// A prepare, post or release records into `_r` (so that it can share an update with
/// others, [`chain`]); the other steps leave `token` in `_op`.
pub(crate) fn account(op: &AccountOp, now: Timestamp, token: i64) -> Option<Update> {
    let no_upsert = |pipeline| {
        Some(Update {
            pipeline,
            upsert: false,
        })
    };
    match op {
        AccountOp::Get => None,
        AccountOp::Create { asset, lower_bound } => {
            let case = doc! {"$switch": {
                "branches": [
                    {"case": {"$eq": [{"$type": "$status"}, "missing"]}, "then": "new"},
                    {"case": {"$eq": ["$status", "unopened"]}, "then": "open"},
                ],
                "default": "none",
            }};
            let is = |c: &str| doc! {"$eq": ["$_case", c]};
            let new_or = |v: Bson, otherwise: Bson| doc! {"$cond": [is("new"), v, otherwise]};
            let changed = doc! {"$ne": ["$_case", "none"]};
            let opened = |v: Bson, field: &str| {
                doc! {"$cond": [changed.clone(), v, format!("${field}")]}
            };
            Some(Update {
                pipeline: vec![
                    doc! {"$set": {"_case": case}},
                    doc! {"$set": {
                        // Over a placeholder, keep the tombstones: a late prepare must
                        // still find them.
                        "status": opened("open".into(), "status"),
                        "asset": opened(asset.as_str().into(), "asset"),
                        "lower_bound": opened(bound(*lower_bound), "lower_bound"),
                        "balance": new_or(0_i64.into(), "$balance".into()),
                        "reserved": new_or(0_i64.into(), "$reserved".into()),
                        "incoming": new_or(0_i64.into(), "$incoming".into()),
                        "intents": new_or(Bson::Document(Document::new()), "$intents".into()),
                        "hseq": new_or(0_i64.into(), "$hseq".into()),
                        "_op": {"$cond": [changed.clone(), marker(token, "created"), "$_op"]},
                    }},
                    doc! {"$unset": "_case"},
                ],
                upsert: true,
            })
        }
        AccountOp::Prepare {
            transfer,
            asset,
            debit,
            credit,
            deadline,
            horizon,
        } => {
            let key = intent_key(transfer);
            let (d, c) = (amount(*debit), amount(*credit));
            let reserved = doc! {"$add": [dec("$reserved"), d.clone()]};
            let incoming = doc! {"$add": [dec("$incoming"), c.clone()]};
            let available = doc! {"$subtract": [{"$subtract": [dec("$balance"), dec("$reserved")]}, dec("$lower_bound")]};
            // Record.rs's order does not matter here: every failure changes nothing.
            let condition = doc! {"$and": [
                {"$eq": [{"$type": intent_path(&key)}, "missing"]},
                now < *deadline,
                {"$eq": ["$status", "open"]},
                {"$eq": ["$asset", asset.as_str()]},
                {"$or": [{"$eq": ["$lower_bound", Bson::Null]}, {"$lte": [d.clone(), available]}]},
                // Every number the record will ever hold must fit an Int64 (see record.rs).
                {"$lte": [reserved.clone(), dec(MAX)]},
                {"$lte": [incoming.clone(), dec(MAX)]},
                {"$gte": [{"$subtract": [dec("$balance"), reserved.clone()]}, dec(i64::MIN)]},
                {"$lte": [{"$add": [dec("$balance"), incoming.clone()]}, dec(MAX)]},
            ]};
            let intent = doc! {
                "d": long(d), "c": long(c), "s": "open", "h": ms(*horizon), "q": next_hseq(),
            };
            let set = doc! {
                "reserved": long(reserved),
                "incoming": long(incoming),
                "intents": with_intent(&key, intent),
                "hseq": next_hseq(),
            };
            let record = Record::Appended(snapshot(&key));
            no_upsert(guarded(condition.into(), set, record, "prepared"))
        }
        AccountOp::Post { transfer, .. } => {
            let key = intent_key(transfer);
            let field = |f: &str| format!("{}.{f}", intent_path(&key));
            let condition = doc! {"$eq": [field("s"), "open"]};
            let set = doc! {
                "reserved": {"$subtract": ["$reserved", field("d")]},
                "incoming": {"$subtract": ["$incoming", field("c")]},
                "balance": {"$add": ["$balance", {"$subtract": [field("c"), field("d")]}]},
                "intents": with_intent(&key, intent_state(&key, "posted")),
                "tomb_min": tomb_min_with(field("h")),
            };
            let record = Record::Appended(snapshot(&key));
            no_upsert(guarded(condition.into(), set, record, "posted"))
        }
        AccountOp::PostPart {
            transfer,
            debit,
            credit,
            ..
        } => {
            // As a post, moving `debit` and `credit` (compared as Decimal128: they may
            // exceed Int64) and giving the rest of the intent back. Where the condition
            // holds they are at most the intent's, so the Int64 sums below are those of a
            // post of a smaller intent, exact; elsewhere they are never written.
            let key = intent_key(transfer);
            let field = |f: &str| format!("{}.{f}", intent_path(&key));
            let condition = doc! {"$and": [
                {"$eq": [field("s"), "open"]},
                {"$lte": [amount(*debit), dec(field("d"))]},
                {"$lte": [amount(*credit), dec(field("c"))]},
            ]};
            let int64 = |n: u64| i64::try_from(n).unwrap_or(MAX);
            let set = doc! {
                "reserved": {"$subtract": ["$reserved", field("d")]},
                "incoming": {"$subtract": ["$incoming", field("c")]},
                "balance": {"$add": ["$balance", int64(*credit) - int64(*debit)]},
                "intents": with_intent(&key, intent_state(&key, "posted")),
                "tomb_min": tomb_min_with(field("h")),
            };
            let record = Record::Appended(snapshot(&key));
            no_upsert(guarded(condition.into(), set, record, "posted"))
        }
        AccountOp::Release {
            transfer,
            asset,
            horizon,
        } => {
            let key = intent_key(transfer);
            let field = |f: &str| format!("{}.{f}", intent_path(&key));
            let case = doc! {"$switch": {
                "branches": [
                    {"case": {"$eq": [{"$type": "$status"}, "missing"]}, "then": "new"},
                    {"case": {"$eq": [{"$type": intent_path(&key)}, "missing"]}, "then": "mark"},
                    {"case": {"$eq": [field("s"), "open"]}, "then": "release"},
                ],
                "default": "none",
            }};
            let is = |c: &str| doc! {"$eq": ["$_case", c]};
            // A mark on an opened account, before its horizon, is the account's first write
            // for the transfer: it is listed in the history (see record.rs).
            let listed =
                doc! {"$and": [is("mark"), {"$ne": ["$status", "unopened"]}, now < *horizon]};
            let mark =
                |q: Bson| doc! {"d": 0_i64, "c": 0_i64, "s": "released", "h": ms(*horizon), "q": q};
            let pick = |new: Bson, mark_: Bson, release: Bson, field: &str| {
                doc! {"$switch": {
                    "branches": [
                        {"case": is("new"), "then": new},
                        {"case": is("mark"), "then": mark_},
                        {"case": is("release"), "then": release},
                    ],
                    "default": format!("${field}"),
                }}
            };
            let same = |f: &str| Bson::String(format!("${f}"));
            let q = doc! {"$cond": [listed.clone(), next_hseq(), "$$REMOVE"]};
            let set = doc! {
                // A release may reach an account nobody created yet: it leaves a
                // placeholder that holds the mark, so a prepare arriving after the creation
                // finds it.
                "status": pick("unopened".into(), same("status"), same("status"), "status"),
                "asset": pick(asset.as_str().into(), same("asset"), same("asset"), "asset"),
                "lower_bound": pick(0_i64.into(), same("lower_bound"), same("lower_bound"), "lower_bound"),
                "balance": pick(0_i64.into(), same("balance"), same("balance"), "balance"),
                "reserved": pick(0_i64.into(), same("reserved"),
                    doc! {"$subtract": ["$reserved", field("d")]}.into(), "reserved"),
                "incoming": pick(0_i64.into(), same("incoming"),
                    doc! {"$subtract": ["$incoming", field("c")]}.into(), "incoming"),
                "intents": pick(
                    with_intent(&key, mark(Bson::String("$$REMOVE".into()))),
                    with_intent(&key, mark(q.into())),
                    with_intent(&key, intent_state(&key, "released")),
                    "intents"),
                "hseq": pick(0_i64.into(),
                    doc! {"$cond": [listed, next_hseq(), "$hseq"]}.into(), same("hseq"), "hseq"),
                "tomb_min": pick(ms(*horizon).into(), tomb_min_with(ms(*horizon)),
                    tomb_min_with(field("h")), "tomb_min"),
                "_r": Record::Appended(snapshot(&key)).value(
                    doc! {"$ne": ["$_case", "none"]}.into(),
                    doc! {"$cond": [is("release"), "released", "marked"]}.into(),
                ),
            };
            Some(Update {
                pipeline: vec![
                    doc! {"$set": {"_case": case}},
                    doc! {"$set": set},
                    doc! {"$unset": "_case"},
                ],
                upsert: true,
            })
        }
        AccountOp::Close => {
            let open_intents = doc! {"$filter": {
                "input": {"$objectToArray": {"$ifNull": ["$intents", {}]}},
                "cond": {"$eq": ["$$this.v.s", "open"]},
            }};
            let condition = doc! {"$and": [
                {"$eq": ["$status", "open"]},
                {"$eq": [{"$size": open_intents}, 0]},
            ]};
            no_upsert(guarded(
                condition.into(),
                doc! {"status": "closed"},
                Record::Marker(token),
                "closed",
            ))
        }
        AccountOp::SetLowerBound { lower_bound } => {
            let within = match lower_bound {
                LowerBound::Unbounded => Bson::Boolean(true),
                LowerBound::Bounded(n) => doc! {"$gte": [
                    {"$subtract": [{"$subtract": [dec("$balance"), dec("$reserved")]}, dec(*n)]},
                    dec(0_i64),
                ]}
                .into(),
            };
            let condition = doc! {"$and": [{"$ne": ["$status", "unopened"]}, within]};
            let set = doc! {"lower_bound": bound(*lower_bound)};
            no_upsert(guarded(
                condition.into(),
                set,
                Record::Marker(token),
                "bound",
            ))
        }
    }
}

/// What `timeline::step_of` compares, as the step finds the document: `_was`, its state,
/// epoch and refund link, and its timeline (one written before timelines: its one step as
/// it is, `timeline::derived`).
fn was() -> Document {
    let derived = vec![Bson::Document(step_doc("$updated_at", "$refunded_by"))];
    doc! {"$set": {"_was": {
        "s": "$state", "e": "$epoch", "r": "$refunded_by",
        "tl": {"$ifNull": ["$timeline", derived]},
    }}}
}

/// A timeline step of the document as the stage before left it, at `at`, carrying `refund`
/// (`TransferRecord::step_at`: the reason only on a step to canceling or canceled).
fn step_doc(at: &str, refund: impl Into<Bson>) -> Document {
    doc! {
        "at": at, "state": "$state", "owner": "$owner", "epoch": "$epoch",
        "reason": {"$cond": [in_states(&["canceling", "canceled"]), "$reason", Bson::Null]},
        "refund": refund.into(),
    }
}

/// `timeline::step_of` from `_was` to the document as the step left it, appended in the
/// same update (`$concatArrays`), past 16 steps without the oldest after the first
/// (`$slice`); then `_was` goes.
fn timeline_step() -> Vec<Document> {
    let push = |step: Document| {
        let kept = doc! {"$cond": [
            {"$gte": [{"$size": "$_was.tl"}, TIMELINE_STEPS_MAX as i64]},
            {"$concatArrays": [
                {"$slice": ["$_was.tl", 1]},
                {"$slice": ["$_was.tl", 2, TIMELINE_STEPS_MAX as i64 - 2]},
            ]},
            "$_was.tl",
        ]};
        doc! {"$concatArrays": [kept, [step]]}
    };
    let moved = doc! {"$or": [
        {"$ne": ["$state", "$_was.s"]},
        {"$ne": ["$epoch", "$_was.e"]},
    ]};
    let linked = doc! {"$and": [
        {"$ne": ["$refunded_by", Bson::Null]},
        {"$ne": ["$refunded_by", "$_was.r"]},
    ]};
    vec![
        doc! {"$set": {"timeline": {"$switch": {
            "branches": [
                {"case": moved, "then": push(step_doc("$updated_at", Bson::Null))},
                {"case": linked, "then": push(step_doc("$updated_at", "$refunded_by"))},
            ],
            "default": {"$ifNull": ["$timeline", "$$REMOVE"]},
        }}}},
        doc! {"$unset": "_was"},
    ]
}

/// `TransferRecord::wake_at` of the document as the stage before left it.
fn wake() -> Document {
    doc! {"$set": {"wake": {"$switch": {
        "branches": [
            {"case": {"$in": ["$state", ["done", "canceled"]]}, "then": "$$REMOVE"},
            {"case": {"$eq": ["$state", "held"]},
             "then": {"$max": ["$lease_until", {"$ifNull": ["$hold_expires_at", MAX]}]}},
        ],
        "default": "$lease_until",
    }}}}
}

/// The transfer has an escalation.
fn escalated() -> Document {
    doc! {"$ne": [{"$ifNull": ["$escalation", Bson::Null]}, Bson::Null]}
}

fn is_state(s: &str) -> Document {
    doc! {"$eq": ["$state", s]}
}

fn in_states(states: &[&str]) -> Document {
    doc! {"$in": ["$state", states]}
}

fn ownership(set: &mut Document, owner: &str, now: Timestamp, lease_until: Timestamp) {
    set.insert("owner", owner);
    set.insert("lease_until", ms(lease_until));
    set.insert("epoch", doc! {"$add": ["$epoch", 1_i64]});
    set.insert("updated_at", ms(now));
}

/// A posting's JSON (`Posting`'s, as `reversed` holds it) is `{<shape>,"amount":<digits>}`:
/// ids and asset codes hold no brace or quote, so this finds each posting of `reversed`, its
/// shape (from, to and asset) and its amount's digits.
const POSTING: &str = r#"\{([^{}]*),"amount":(\d+)\}"#;

/// The fields a refund link's stages add (`link_refund`), unset before its update ends.
const LINK_FIELDS: [&str; 4] = ["_lf", "_ls", "_ll", "_lk"];

/// The shape of a posting as [`POSTING`] finds it in `reversed`.
fn shape(p: &xfer_core::Posting) -> String {
    let text = json(p);
    let inner = text.strip_prefix('{').unwrap_or(&text);
    match inner.rsplit_once(",\"amount\":") {
        Some((shape, _)) => shape.to_string(),
        None => unreachable!("a posting's JSON ends with its amount: {text}"),
    }
}

/// The total of the `i`th amounts of the links in `links`, in Decimal128 (a link without
/// one adds 0).
fn taken(links: &str, i: usize) -> Bson {
    let nth = doc! {"$ifNull": [{"$arrayElemAt": ["$$this.amounts", i as i64]}, 0_i64]};
    Bson::Document(doc! {"$reduce": {
        "input": links,
        "initialValue": dec(0_i64),
        "in": {"$add": ["$$value", dec(nth)]},
    }})
}

/// `TransferOp::LinkRefund` (record.rs `link_refund`) as one update: the condition, the
/// fields written, and the stages before that read the original's amounts (`_lf`), its
/// postings' shapes (`_ls`), its links (`_ll`) and those kept (`_lk`): `LINK_FIELDS`.
/// The amounts are read from `reversed`'s text as Decimal128, exactly, or where the
/// original is a hold captured in part are its `captured` ones; the links are
/// `refunds` (`{refund, amounts: [Int64]}`), or in a document written before partial
/// refunds that has `refunded_by` set, its one refund of everything.
fn link_refund(
    refund: &xfer_core::TransferId,
    replacing: &[xfer_core::TransferId],
    postings: &[xfer_core::Posting],
    now: Timestamp,
) -> (Bson, Document, Vec<Document>) {
    let found = doc! {"$regexFindAll": {"input": "$reversed", "regex": POSTING}};
    let nth = |field: &str, i: usize| doc! {"$arrayElemAt": [field, i as i64]};
    let old_link = doc! {
        "refund": "$refunded_by",
        "amounts": {"$map": {"input": "$_lf", "in": long("$$this")}},
    };
    let written_before = doc! {"$and": [
        {"$eq": [{"$size": {"$ifNull": ["$refunds", []]}}, 0]},
        {"$ne": [{"$ifNull": ["$refunded_by", Bson::Null]}, Bson::Null]},
    ]};
    let replaced: Vec<&str> = replacing.iter().map(|r| r.as_str()).collect();
    // What each posting moved: `reversed`'s amounts, or of a hold captured in part its
    // `captured` (`TransferRecord::moved_postings`).
    let moved = doc! {"$cond": [
        {"$eq": [{"$type": "$captured"}, "array"]},
        {"$map": {"input": {"$ifNull": ["$captured", []]}, "in": dec("$$this")}},
        {"$map": {"input": found.clone(), "in": dec(nth("$$this.captures", 1))}},
    ]};
    let prepare = vec![
        doc! {"$set": {
            "_lf": moved,
            "_ls": {"$map": {"input": found, "in": nth("$$this.captures", 0)}},
        }},
        doc! {"$set": {"_ll": {"$cond": [
            written_before,
            [old_link],
            {"$ifNull": ["$refunds", []]},
        ]}}},
        doc! {"$set": {"_lk": {"$filter": {
            "input": "$_ll",
            "cond": {"$not": [{"$in": ["$$this.refund", replaced]}]},
        }}}},
    ];
    let shapes: Vec<String> = postings.iter().map(shape).collect();
    let mut within = vec![];
    let (mut full, mut room) = (vec![], vec![]);
    for (i, p) in postings.iter().enumerate() {
        let a = amount(p.amount.units());
        let of = nth("$_lf", i);
        within.push(Bson::Document(doc! {"$lte": [a.clone(), of.clone()]}));
        full.push(Bson::Document(doc! {"$eq": [taken("$_lk", i), of.clone()]}));
        room.push(Bson::Document(
            doc! {"$lte": [{"$add": [taken("$_lk", i), a]}, of]},
        ));
    }
    let linked = doc! {"$map": {"input": "$_ll", "in": "$$this.refund"}};
    // In record.rs's order, though only the conjunction matters here: the refusal's code
    // comes from the rules on the document left as it was (`answer.rs`).
    let condition = doc! {"$and": [
        is_state("done"),
        // The original's postings in order, each reversed, of at most its amount.
        {"$eq": ["$_ls", shapes]},
        {"$and": within},
        // Not a repeat.
        {"$not": [{"$in": [refund.as_str(), linked]}]},
        // The links kept do not take everything back already, nor more with this one.
        {"$not": [{"$and": full}]},
        {"$and": room},
        {"$lt": [{"$size": "$_lk"}, xfer_core::REFUNDS_MAX as i64]},
    ]};
    let link = doc! {
        "refund": refund.as_str(),
        "amounts": postings.iter().map(|p| amount_i64(p.amount)).collect::<Vec<_>>(),
    };
    let set = doc! {
        "refunds": {"$concatArrays": ["$_lk", [link]]},
        "refunded_by": refund.as_str(),
        "updated_at": ms(now),
    };
    (Bson::Document(condition), set, prepare)
}

/// The update for a transfer step, at the store's clock `store_now`; `None` for a read or
/// an insert (an `insertOne`).
pub(crate) fn transfer(op: &TransferOp, store_now: Timestamp, token: i64) -> Option<Update> {
    // The stages that compute what a refund link's condition reads (`LINK_FIELDS`).
    let mut prepare = Vec::new();
    let (condition, set, outcome) = match op {
        TransferOp::Get | TransferOp::Insert(_) | TransferOp::OnePhase(_) => return None,
        TransferOp::Extend { until, now } => {
            // As for a capture, the store's clock judges the expiry too; an expiry at or
            // past `until` stays (a repeat; never brought forward). Only the expiry and
            // `updated_at` change: `wake` below follows the new expiry, and no timeline
            // step is written (no state, epoch or refund link moves).
            let judge = ms((*now).max(store_now));
            let condition = doc! {"$and": [
                is_state("held"),
                {"$ne": ["$hold_expires_at", Bson::Null]},
                {"$gt": ["$hold_expires_at", judge]},
                {"$lt": ["$hold_expires_at", ms(*until)]},
            ]};
            let set = doc! {"hold_expires_at": ms(*until), "updated_at": ms(*now)};
            (Bson::from(condition), set, "extended")
        }
        TransferOp::Claim {
            owner,
            now,
            lease_until,
        } => {
            let lapsed = doc! {"$lte": ["$lease_until", ms(*now)]};
            let condition = doc! {"$or": [
                is_state("initial"),
                {"$and": [in_states(&["pending", "applied", "canceling"]), lapsed.clone()]},
                {"$and": [
                    is_state("held"), lapsed,
                    {"$ne": ["$hold_expires_at", Bson::Null]},
                    {"$lte": ["$hold_expires_at", ms(*now)]},
                ]},
            ]};
            let mut set = doc! {
                "state": {"$switch": {
                    "branches": [
                        {"case": is_state("initial"), "then": "pending"},
                        {"case": is_state("held"), "then": "canceling"},
                    ],
                    "default": "$state",
                }},
                "reason": {"$cond": [is_state("held"), json(&CancelReason::Expired), "$reason"]},
            };
            ownership(&mut set, owner.as_str(), *now, *lease_until);
            (Bson::from(condition), set, "claimed")
        }
        TransferOp::Decide {
            epoch,
            to,
            reason,
            now,
        } => {
            let to_ok = matches!(
                to,
                TransferState::Applied | TransferState::Held | TransferState::Canceling
            );
            let epoch = i64::try_from(*epoch).unwrap_or(-1);
            let condition = doc! {"$and": [is_state("pending"), {"$eq": ["$epoch", epoch]}, to_ok]};
            let set = doc! {
                "state": crate::documents::state_word(*to),
                "reason": reason.as_ref().map(json),
                "updated_at": ms(*now),
            };
            (Bson::from(condition), set, "decided")
        }
        TransferOp::Capture {
            owner,
            now,
            lease_until,
        }
        | TransferOp::CapturePart {
            owner,
            now,
            lease_until,
            ..
        } => {
            // A capture resent long after it was made cannot beat the expiry: the store's
            // clock judges too.
            let judge = ms((*now).max(store_now));
            let expired = doc! {"$and": [
                {"$ne": ["$hold_expires_at", Bson::Null]},
                {"$lte": ["$hold_expires_at", judge]},
            ]};
            let condition = doc! {"$and": [is_state("held"), {"$not": [expired]}]};
            let mut set = doc! {"state": "applied"};
            // A capture in part keeps its amounts (Int64), written only by the step that
            // captures; none given means all of each posting, as a plain capture.
            if let TransferOp::CapturePart { amounts, .. } = op {
                let kept = match amounts.is_empty() {
                    true => Bson::String("$$REMOVE".into()),
                    false => Bson::Array(amounts_bson(amounts)),
                };
                set.insert("captured", kept);
            }
            ownership(&mut set, owner.as_str(), *now, *lease_until);
            (Bson::from(condition), set, "captured")
        }
        TransferOp::Void {
            owner,
            now,
            lease_until,
        } => {
            let mut set = doc! {"state": "canceling", "reason": json(&CancelReason::Voided)};
            ownership(&mut set, owner.as_str(), *now, *lease_until);
            (Bson::from(is_state("held")), set, "voided")
        }
        TransferOp::Finish { now } => {
            let set = doc! {
                "state": {"$cond": [is_state("applied"), "done", "canceled"]},
                "owner": Bson::Null,
                "updated_at": ms(*now),
            };
            (in_states(&["applied", "canceling"]).into(), set, "finished")
        }
        TransferOp::LinkRefund {
            refund,
            replacing,
            postings,
            now,
        } => {
            let (condition, set, stages) = link_refund(refund, replacing, postings, *now);
            prepare = stages;
            (condition, set, "linked")
        }
        TransferOp::Redrive { now } => {
            // The lease lapses now (a lapsed one stays as it is) and the escalation goes: an
            // escalated record is re-driven even when its lease lapsed already.
            let condition = doc! {"$and": [
                {"$not": [in_states(&["done", "canceled"])]},
                {"$or": [{"$gt": ["$lease_until", ms(*now)]}, escalated()]},
            ]};
            let set = doc! {
                "lease_until": {"$min": ["$lease_until", ms(*now)]},
                "escalation": "$$REMOVE",
            };
            (Bson::from(condition), set, "redriven")
        }
        TransferOp::Escalate { escalation } => {
            // A mark for a person, once, on a record not terminal. Nothing else changes (not
            // `updated_at`; `wake` and the timeline below find nothing moved). It is JSON
            // text, which starts with `{`: a literal, never a field path or a variable,
            // whatever the error says.
            let condition = doc! {"$and": [
                {"$not": [in_states(&["done", "canceled"])]},
                {"$not": [escalated()]},
            ]};
            let set = doc! {"escalation": json(escalation)};
            (Bson::from(condition), set, "escalated")
        }
    };
    let mut pipeline = vec![was()];
    let prepared = !prepare.is_empty();
    pipeline.extend(prepare);
    pipeline.extend(guarded(condition, set, Record::Marker(token), outcome));
    if prepared {
        pipeline.push(doc! {"$unset": LINK_FIELDS.to_vec()});
    }
    pipeline.push(wake());
    pipeline.extend(timeline_step());
    Some(Update {
        pipeline,
        upsert: false,
    })
}

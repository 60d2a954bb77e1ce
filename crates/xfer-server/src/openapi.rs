//! The OpenAPI 3.1 document served at `/v1/openapi.json`. Written by hand from the same
//! [`ROUTES`] table the router uses; a test checks that the two list
//! exactly the same operations.

use crate::routes::ROUTES;
use serde_json::{json, Map, Value};

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn body(name: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema_ref(name)}}})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn error_response() -> Value {
    ok("An error: see `code` and `field`", schema_ref("Error"))
}

fn param(name: &str, location: &str, schema: Value, description: &str) -> Value {
    json!({"name": name, "in": location, "required": location == "path",
           "schema": schema, "description": description})
}

fn id_param(what: &str) -> Value {
    param(
        "id",
        "path",
        json!({"type": "string", "minLength": 1, "maxLength": 64}),
        what,
    )
}

fn wait_param() -> Value {
    param(
        "wait",
        "query",
        json!({"type": "boolean", "default": true}),
        "true: answer with the outcome; false: answer 202 once durably accepted",
    )
}

fn limit_param() -> Value {
    param(
        "limit",
        "query",
        json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
        "page size",
    )
}

fn page_params(cursor: &str, cursor_schema: Value) -> Vec<Value> {
    let cursor = param(
        cursor,
        "query",
        cursor_schema,
        "cursor from the previous page",
    );
    vec![cursor, limit_param()]
}

/// What each operation of [`ROUTES`] does: (summary, parameters, request body, 2xx response).
fn operation(method: &str, path: &str) -> (&'static str, Vec<Value>, Option<Value>, Value) {
    let transfer = || {
        ok(
            "The transfer (202 while it is still running)",
            schema_ref("Transfer"),
        )
    };
    let account = || ok("The account", schema_ref("Account"));
    match (method, path) {
        ("GET", "/healthz") => (
            "Liveness",
            vec![],
            None,
            ok("Alive", json!({"type": "object"})),
        ),
        ("GET", "/readyz") => (
            "Readiness: start-up recovery finished",
            vec![],
            None,
            ok("Ready", json!({"type": "object"})),
        ),
        ("GET", "/metrics") => (
            "Prometheus metrics (OpenMetrics text)",
            vec![],
            None,
            json!({"description": "Metrics", "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}}),
        ),
        ("GET", "/v1/openapi.json") => (
            "This document",
            vec![],
            None,
            ok("OpenAPI 3.1", json!({"type": "object"})),
        ),
        ("POST", "/v1/assets") => (
            "Declare an asset with its scale (the same again answers it; another scale is 409 asset_declared_with_another_scale: a declaration never changes)",
            vec![],
            Some(body("AssetIn")),
            ok("Declared", schema_ref("Asset")),
        ),
        ("GET", "/v1/assets") => (
            "The declared assets, in code order",
            vec![],
            None,
            ok(
                "Every declared asset",
                json!({"type": "object", "properties": {
                "assets": {"type": "array", "items": schema_ref("Asset")}}}),
            ),
        ),
        ("GET", "/v1/assets/{code}") => (
            "One declared asset (404 asset_not_declared)",
            vec![param(
                "code",
                "path",
                json!({"type": "string", "pattern": "^[A-Z0-9_-]{1,16}$"}),
                "asset code",
            )],
            None,
            ok("The asset", schema_ref("Asset")),
        ),
        ("POST", "/v1/accounts") => (
            "Create an account of a declared asset (404 asset_not_declared otherwise; the same id, asset and bound again answers it)",
            vec![],
            Some(body("AccountCreate")),
            ok("Created", schema_ref("Account")),
        ),
        ("GET", "/v1/accounts") => (
            "List accounts in id order (with `metadata=key=value`, only those whose metadata holds it)",
            {
                let mut params = page_params("after", json!({"type": "string"}));
                params.push(param(
                    "metadata",
                    "query",
                    json!({"type": "string"}),
                    "key=value: only accounts whose metadata maps key to value",
                ));
                params
            },
            None,
            ok(
                "A page",
                json!({"type": "object", "properties": {
                "accounts": {"type": "array", "items": schema_ref("Account")},
                "next_after": {"type": ["string", "null"]}}}),
            ),
        ),
        ("GET", "/v1/accounts/{id}") => (
            "Get an account: balance, reserved, incoming, available",
            vec![id_param("account id")],
            None,
            account(),
        ),
        ("PUT", "/v1/accounts/{id}/metadata") => (
            "Replace an account's metadata (`{}` removes it)",
            vec![id_param("account id")],
            Some(body("MetadataChange")),
            account(),
        ),
        ("POST", "/v1/accounts/{id}/close") => (
            "Close an account (waits for, then refuses with, transfers in flight)",
            vec![id_param("account id")],
            None,
            account(),
        ),
        ("PUT", "/v1/accounts/{id}/lower_bound") => (
            "Change the lower bound (refused if the account would be below it)",
            vec![id_param("account id")],
            Some(body("LowerBoundChange")),
            account(),
        ),
        ("GET", "/v1/accounts/{id}/transfers") => (
            "Every transfer that names the account (as debited or credited), whatever its \
             end, newest first by when it first touched the account; `state` keeps one state",
            [
                vec![id_param("account id")],
                page_params("before", json!({"type": "integer"})),
                vec![param(
                    "state",
                    "query",
                    json!({"type": "string", "enum": ["initial", "pending", "held", "applied",
                        "canceling", "done", "canceled"]}),
                    "only transfers now in this state",
                )],
            ]
            .concat(),
            None,
            ok(
                "A page",
                json!({"type": "object", "properties": {
                "transfers": {"type": "array", "items": schema_ref("Transfer")},
                "next_before": {"type": ["integer", "null"]}}}),
            ),
        ),
        ("POST", "/v1/transfers") => (
            "Submit a transfer or a hold",
            vec![wait_param()],
            Some(body("TransferIn")),
            transfer(),
        ),
        ("GET", "/v1/transfers") => (
            "Transfers, newest first by when they were accepted, filtered (every filter given \
             must hold). Read from each shard's change feed backwards, so as far back as the \
             feed's retention; with `account`, from the account's history instead (all of it). \
             A page reads a bounded number of entries: it may hold fewer than `limit` and \
             still name `next_before`; `next_before` is null at the end. 501 `not_supported` \
             without `account` on a store that keeps no change feed (MySQL, MongoDB)",
            [
                page_params("before", json!({"type": "string"})),
                vec![
                    param(
                        "state",
                        "query",
                        json!({"type": "string", "enum": ["initial", "pending", "held", "applied",
                            "canceling", "done", "canceled"]}),
                        "only transfers now in this state",
                    ),
                    param(
                        "account",
                        "query",
                        json!({"type": "string"}),
                        "only transfers with a posting from or to this account",
                    ),
                    param(
                        "asset",
                        "query",
                        json!({"type": "string"}),
                        "only transfers with a posting of this asset",
                    ),
                    param(
                        "id_prefix",
                        "query",
                        json!({"type": "string"}),
                        "only transfers whose id starts with this",
                    ),
                    param(
                        "metadata",
                        "query",
                        json!({"type": "string"}),
                        "`key=value`: only transfers whose metadata is a JSON object whose `key` \
                         is `value` (a string's value, or any other value's JSON text)",
                    ),
                    param(
                        "created_since_ms",
                        "query",
                        json!({"type": "integer"}),
                        "only transfers accepted at or after this time (ms since the epoch)",
                    ),
                    param(
                        "created_before_ms",
                        "query",
                        json!({"type": "integer"}),
                        "only transfers accepted before this time (ms since the epoch)",
                    ),
                ],
            ]
            .concat(),
            None,
            ok(
                "A page",
                json!({"type": "object", "properties": {
                "transfers": {"type": "array", "items": schema_ref("Transfer")},
                "next_before": {"type": ["string", "null"]}}}),
            ),
        ),
        ("POST", "/v1/transfers/batch") => (
            "Submit up to 8,192 transfers; each result has its own status",
            vec![wait_param()],
            Some(body("Batch")),
            ok(
                "One result per transfer, in order",
                json!({"type": "object", "properties": {
                "results": {"type": "array", "items": schema_ref("BatchItem")}}}),
            ),
        ),
        ("GET", "/v1/transfers/{id}") => (
            "Get a transfer",
            vec![id_param("transfer id")],
            None,
            transfer(),
        ),
        ("POST", "/v1/transfers/{id}/capture") => (
            "Capture a hold: post it, whole (no body, or `{}`) or in part (`amount` of a hold \
             of one posting, `amounts` one per posting in order, each at most the posting's: \
             400 `capture_exceeds_hold` naming the field otherwise, nothing written); the rest \
             of a hold captured in part is released by the same posts, and its postings show \
             `captured`. Capturing a captured hold again with the same amounts answers it as \
             the first capture did (200, or 202 while it posts); other amounts, or a whole \
             capture of a hold captured in part, are refused with 409 `hold_already_captured`; \
             a voided hold with 409 `hold_already_voided`, an expired one with 409 \
             `hold_expired`, a transfer that is no hold (or a hold canceled before it was \
             held) with 409 `transfer_is_not_held`. Refunds of a hold captured in part move \
             back at most what it captured",
            vec![id_param("hold id")],
            Some(json!({"required": false, "content": {"application/json": {"schema": schema_ref("Capture")}}})),
            transfer(),
        ),
        ("POST", "/v1/transfers/{id}/void") => (
            "Void a hold: release it. Voiding a voided hold again answers it as the first void \
             did; a captured hold is refused with 409 `hold_already_captured`, an expired one \
             with 409 `hold_expired`, a transfer that is no hold with 409 \
             `transfer_is_not_held`",
            vec![id_param("hold id")],
            None,
            transfer(),
        ),
        ("POST", "/v1/transfers/{id}/extend") => (
            "Move a held transfer's expiry later, before it passes: to `expires_at_ms`, or \
             `ttl_ms` from the server's now (at most 30 days ahead). The same \
             `expires_at_ms` again answers the hold (a retry of `ttl_ms` moves it again: \
             retry with `expires_at_ms`); an expiry is never brought forward \
             (`hold_expiry_out_of_range`). Refused 409 `hold_expired` once it expired, \
             `hold_already_captured` / `hold_already_voided` once settled, \
             `transfer_is_not_held` for a transfer or a hold not held yet",
            vec![id_param("hold id")],
            Some(body("Extend")),
            transfer(),
        ),
        ("POST", "/v1/transfers/{id}/refund") => (
            "Refund a done transfer, whole or in part, with a linked, offsetting transfer. \
             Several partial refunds may follow one another; together they never move back \
             more than the original moved, posting by posting (409 \
             `refund_exceeds_original`; `original_already_refunded` once all is moved back; \
             `too_many_refunds` past 16). A canceled refund's share may be refunded again. \
             Without `amount` or `amounts` (or with them null) every posting is refunded whole",
            vec![id_param("the done transfer")],
            Some(body("Refund")),
            transfer(),
        ),
        ("POST", "/v1/transfers/{id}/redrive") => (
            "Re-drive an unfinished transfer now",
            vec![id_param("transfer id")],
            None,
            transfer(),
        ),
        ("GET", "/v1/events") => (
            "The change feed: every transfer's observable changes, oldest first per shard",
            page_params(
                "after",
                json!({"type": "string", "pattern": "^[0-9.]+(_[0-9.]+)*$",
                       "description": "one position per shard, `_` between; 410 \
                        `cursor_expired` once a shard no longer keeps its events"}),
            ),
            None,
            ok(
                "A page",
                json!({"type": "object", "properties": {
                "events": {"type": "array", "items": schema_ref("Event")},
                "next": {"type": "string", "description": "pass as `after` for the next page"}}}),
            ),
        ),
        ("GET", "/v1/events/stream") => (
            "The change feed as Server-Sent Events, resumed from `Last-Event-ID` (or `after`)",
            vec![param(
                "after",
                "query",
                json!({"type": "string"}),
                "a cursor to start after (`Last-Event-ID` wins when both are sent)",
            )],
            None,
            ok(
                "`text/event-stream`: each event's `id` is the cursor after it, `event` its \
                 type, `data` the Event; an `error` event ends the stream",
                json!({"type": "string"}),
            ),
        ),
        ("GET", "/v1/admin/stuck") => (
            "Unfinished transfers whose owner lapsed long ago, with why",
            vec![limit_param()],
            None,
            ok("Stuck transfers", json!({"type": "object"})),
        ),
        ("GET", "/v1/admin/canceled") => (
            "Canceled transfers with their reasons, in id order",
            page_params("after", json!({"type": "string"})),
            None,
            ok(
                "A page",
                json!({"type": "object", "properties": {
                "transfers": {"type": "array", "items": schema_ref("Transfer")},
                "next_after": {"type": ["string", "null"]}}}),
            ),
        ),
        ("GET", "/v1/stats") => (
            "The overview the console shows: transfers this process answered by outcome and \
             their submit-to-outcome times (a count and a sum: a rate or a mean is the \
             difference of two overviews over the time between them), transfers in flight \
             and stuck, transfers canceled in the last hour (from the change feed; null on a \
             store without one), the audit (reused for 10 s) and its verdict, and each \
             shard's store, reachability and round trip",
            vec![],
            None,
            ok(
                "The overview",
                json!({"type": "object", "properties": {
                "at_ms": {"type": "integer"},
                "answered": {"type": "object", "additionalProperties": {"type": "integer"}},
                "latency_count": {"type": "integer"},
                "latency_sum_seconds": {"type": "number"},
                "in_flight": {"type": "integer"},
                "stuck": {"type": "integer"},
                "canceled_last_hour": {"type": ["integer", "null"]},
                "audit": {"type": "object"},
                "clean": {"type": "boolean"},
                "shards": {"type": "array", "items": {"type": "object", "properties": {
                    "shard": {"type": "integer"},
                    "store": {"type": "string"},
                    "reachable": {"type": "boolean"},
                    "round_trip_ms": {"type": ["number", "null"]},
                    "error": {"type": ["string", "null"]}}}}}}),
            ),
        ),
        ("GET", "/v1/audit") => (
            "Totals per asset, transfers in flight, leaks found; with `replay=true`, every \
             account's balance computed again from zero out of the transfer records (the \
             accounts that differ, money moved to accounts that do not exist) and the \
             tombstones left past their horizon. Exact at rest; under load accounts with \
             money moving are not compared (`accounts_busy`)",
            vec![
                param(
                    "replay",
                    "query",
                    json!({"type": "boolean", "default": false}),
                    "Replay every balance from the transfers",
                ),
                param(
                    "grace_ms",
                    "query",
                    json!({"type": "integer", "minimum": 0, "default": 600_000}),
                    "With replay: how long past its horizon a tombstone may wait for the \
                     sweeper before it is listed as overdue",
                ),
            ],
            None,
            ok(
                "The audit; `clean` is false on any leak or difference",
                json!({"type": "object", "properties": {
                "clean": {"type": "boolean"},
                "assets": {"type": "array"},
                "in_flight": {"type": "object"},
                "leaks": {"type": "array"},
                "replay": {"type": "object", "properties": {
                    "transfers": {"type": "integer"},
                    "done": {"type": "integer"},
                    "accounts_compared": {"type": "integer"},
                    "accounts_busy": {"type": "integer"},
                    "differences": {"type": "array", "items": {"type": "object",
                        "properties": {"account": {"type": "string"},
                            "asset": {"type": "string"},
                            "balance": {"type": "integer"},
                            "replayed": {"type": "integer"}}}},
                    "differences_total": {"type": "integer"},
                    "overdue_tombstones": {"type": "array", "items": {"type": "object",
                        "properties": {"account": {"type": "string"},
                            "transfer": {"type": "string"},
                            "horizon_ms": {"type": "integer"}}}},
                    "overdue_tombstones_total": {"type": "integer"}}}}}),
            ),
        ),
        ("POST", "/v1/webhooks") => (
            "Register a webhook endpoint: every change made from now on (of the listed types) \
             is POSTed to it as an Event, signed (`Xfer-Signature: t=<unix s>,v1=<hex \
             HMAC-SHA256(secret, \"<t>.<body>\")>`), retried with backoff, and set aside as a \
             dead letter after the last attempt. The secret is shown only in this answer; \
             `501 not_supported` on a store without a change feed",
            vec![],
            Some(body("WebhookIn")),
            ok("Registered", schema_ref("WebhookCreated")),
        ),
        ("GET", "/v1/webhooks") => (
            "List webhook endpoints (without secrets), oldest first",
            vec![],
            None,
            ok(
                "Every endpoint",
                json!({"type": "object", "properties": {
                "webhooks": {"type": "array", "items": schema_ref("Webhook")}}}),
            ),
        ),
        ("GET", "/v1/webhooks/{id}") => (
            "Get a webhook endpoint and how its deliveries went since the server started",
            vec![id_param("webhook id")],
            None,
            ok("The endpoint", schema_ref("WebhookWithStatus")),
        ),
        ("DELETE", "/v1/webhooks/{id}") => (
            "Remove a webhook endpoint: its deliveries stop (an attempt under way is given \
             up), its dead letters are deleted",
            vec![id_param("webhook id")],
            None,
            ok(
                "Removed",
                json!({"type": "object", "properties": {
                "id": {"type": "string"}, "deleted": {"const": true}}}),
            ),
        ),
        ("GET", "/v1/webhooks/{id}/dead_letters") => (
            "Events the endpoint did not take after every attempt, oldest first",
            [
                vec![id_param("webhook id")],
                page_params(
                    "after",
                    json!({"type": "integer", "minimum": 0,
                    "description": "the `seq` of the last dead letter seen (`next_after`)"}),
                ),
            ]
            .concat(),
            None,
            ok(
                "A page",
                json!({"type": "object", "properties": {
                "dead_letters": {"type": "array", "items": schema_ref("DeadLetter")},
                "next_after": {"type": ["integer", "null"]}}}),
            ),
        ),
        ("POST", "/v1/webhooks/{id}/dead_letters/{event_id}/redeliver") => (
            "Send a dead letter to its endpoint once more, now: delivered (2xx), it leaves the \
             list; otherwise `502 delivery_failed` says why and it stays",
            vec![
                id_param("webhook id"),
                param(
                    "event_id",
                    "path",
                    json!({"type": "string"}),
                    "the event's id, its `/` sent as `%2F` (`t1%2Fdone`)",
                ),
            ],
            None,
            ok(
                "Delivered",
                json!({"type": "object", "properties": {
                "event_id": {"type": "string"}, "delivered": {"const": true}}}),
            ),
        ),
        _ => ("", vec![], None, json!({})),
    }
}

fn schemas() -> Value {
    let id = json!({"type": "string", "pattern": "^[A-Za-z0-9_:.-]{1,64}$"});
    let amount = json!({"oneOf": [
        {"type": "integer", "minimum": 1, "maximum": i64::MAX,
         "description": "minor units of the asset (cents for USD)"},
        {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$",
         "description": "a decimal in the declared asset's scale (\"12.34\" USD is 1234 cents); more decimals than the scale is 400 amount_has_too_many_decimals"}]});
    let account_metadata = json!({"type": "object", "maxProperties": 16,
        "propertyNames": {"pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "additionalProperties": {"type": "string", "description": "at most 256 bytes"},
        "description": "labels (owner, tier, …), kept beside the account; filter a listing with metadata=key=value"});
    let decimal = |of: &str| json!({"type": "string", "description": format!("{of} in the asset's declared scale; absent if the asset is not declared")});
    let bound = json!({"oneOf": [{"type": "integer"}, {"const": "unbounded"},
        {"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]+)?$",
         "description": "a decimal in the asset's declared scale (\"-50.00\")"}]});
    let event_type = json!({"enum": ["accepted", "held", "captured", "voided", "expired", "done",
                                     "canceled", "refunded"]});
    let webhook = json!({"type": "object", "properties": {
        "id": {"type": "string", "description": "`wh_` and 24 hex digits"},
        "url": {"type": "string"},
        "types": {"type": ["array", "null"], "items": event_type.clone(),
                  "description": "null: every type"},
        "description": {"type": ["string", "null"]},
        "created_at_ms": {"type": "integer"}}});
    // Apart: one `json!` of every schema would pass the macro's recursion limit.
    let account = json!({"type": "object", "properties": {
            "id": {"type": "string"}, "asset": {"type": "string"},
            "balance": {"type": "integer"}, "reserved": {"type": "integer"},
            "incoming": {"type": "integer"}, "available": {"type": ["integer", "null"]},
            "lower_bound": bound, "status": {"enum": ["open", "closed"]},
            "in_flight": {"type": "integer"}, "shard": {"type": "integer"},
            "scale": {"type": "integer", "description": "the asset's declared scale; absent if it is not declared"},
            "balance_decimal": decimal("balance"), "reserved_decimal": decimal("reserved"),
            "incoming_decimal": decimal("incoming"), "available_decimal": decimal("available"),
            "metadata": account_metadata.clone()}});
    let asset_in = json!({"type": "object", "required": ["code", "scale"], "additionalProperties": false,
            "properties": {"code": {"type": "string", "pattern": "^[A-Z0-9_-]{1,16}$"},
                           "scale": {"type": "integer", "minimum": 0, "maximum": 18,
                                     "description": "decimal places of the minor unit: USD 2, JPY 0, BTC 8"}}});
    let refund = json!({"type": "object", "required": ["id"], "additionalProperties": false,
            "properties": {"id": id, "metadata": {"type": "string"},
                "amount": {"allOf": [amount.clone()],
                    "description": "a partial refund of a transfer of one posting: how much to move back"},
                "amounts": {"type": "array", "items": amount.clone(),
                    "description": "a partial refund: how much to move back of each of the original's postings, in order"}}});
    let capture = json!({"type": "object", "additionalProperties": false,
            "description": "empty: capture the hold whole",
            "properties": {
                "amount": {"allOf": [amount.clone()],
                    "description": "a capture in part of a hold of one posting: how much to post"},
                "amounts": {"type": "array", "items": amount.clone(),
                    "description": "a capture in part: how much to post of each of the hold's postings, in order"}}});
    let posting_out = json!({"type": "object", "properties": {"from": id, "to": id, "asset": {"type": "string"},
            "amount": {"type": "integer", "description": "minor units"},
            "amount_decimal": decimal("amount"),
            "captured": {"type": "integer", "description": "of a hold captured in part: what moved, in minor units (the rest was released); absent when the whole amount moves"},
            "captured_decimal": decimal("captured")}});
    let escalation = json!({"type": "object", "description": "escalated to a person: its recovery kept failing (a protocol violation or a damaged record at once, other failures after --escalate-after sweeps in a row); sweepers leave it alone until it is re-driven. Absent otherwise",
        "properties": {"attempts": {"type": "integer"}, "error": {"type": "string"}, "at_ms": {"type": "integer"}}});
    let timeline = json!({"type": "array", "maxItems": 16,
        "description": "every state it passed through, oldest first, each as one write left its record: the first step (accepted) and the latest, at most 16; older steps in the middle are dropped",
        "items": {"type": "object", "required": ["at_ms", "state", "owner", "epoch"], "properties": {
            "at_ms": {"type": "integer", "description": "when, on the writer's clock"},
            "state": {"enum": ["initial", "pending", "applied", "held", "canceling", "done", "canceled"]},
            "owner": {"type": ["string", "null"], "description": "the executor that owns it after the step"},
            "epoch": {"type": "integer"},
            "reason": {"type": "object", "description": "on a step to canceling or canceled: why", "properties": {
                "code": {"type": "string"}, "account": {"type": "string"}, "message": {"type": "string"}}},
            "refund_id": {"type": "string", "description": "on a refund link: the refund"}}}});
    let mut all = json!({
        "Error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"type": "string", "description": "stable snake_case code"},
            "message": {"type": "string"},
            "field": {"type": "string", "description": "the input concerned, e.g. postings[0].amount"}}},
        "AccountCreate": {"type": "object", "required": ["id", "asset"], "additionalProperties": false,
            "properties": {"id": id, "asset": {"type": "string", "pattern": "^[A-Z0-9_-]{1,16}$"},
                           "lower_bound": bound, "metadata": account_metadata.clone()}},
        "LowerBoundChange": {"type": "object", "required": ["lower_bound"], "additionalProperties": false,
            "properties": {"lower_bound": bound}},
        "Account": account,
        "Posting": {"type": "object", "required": ["from", "to", "asset", "amount"], "additionalProperties": false,
            "properties": {"from": id, "to": id, "asset": {"type": "string"}, "amount": amount.clone()}},
        "TransferIn": {"type": "object", "required": ["id", "postings"], "additionalProperties": false,
            "properties": {
                "id": id,
                "postings": {"type": "array", "minItems": 1, "maxItems": 64, "items": schema_ref("Posting")},
                "metadata": {"type": "string", "maxLength": 2048},
                "hold": {"type": "object", "required": ["ttl_ms"], "properties": {"ttl_ms": {"type": "integer"}}},
                "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 3_600_000, "default": 5000}}},
        "Batch": {"type": "object", "required": ["transfers"], "additionalProperties": false,
            "properties": {"transfers": {"type": "array", "maxItems": 8192, "items": schema_ref("TransferIn")}}},
        "BatchItem": {"type": "object", "properties": {
            "status": {"type": "integer"}, "transfer": schema_ref("Transfer"), "error": schema_ref("Error")}},
        "Event": {"type": "object", "properties": {
            "id": {"type": "string", "description": "stable: transfer/type(/refund); drop duplicates by it"},
            "type": event_type,
            "state": {"enum": ["pending", "applied", "held", "canceling", "done", "canceled"]},
            "transfer_id": {"type": "string"},
            "at_ms": {"type": "integer"},
            "refund_id": {"type": ["string", "null"]},
            "transfer": {"oneOf": [schema_ref("Transfer"), {"type": "null"}]}}},
        "WebhookIn": {"type": "object", "required": ["url"], "additionalProperties": false,
            "properties": {
                "url": {"type": "string", "format": "uri", "maxLength": 2048,
                        "description": "http:// or https:// (the system's certificate authorities)"},
                "secret": {"type": "string", "minLength": 16, "maxLength": 256, "pattern": "^[!-~]+$",
                           "description": "the HMAC key, as given; by default `whsec_` and 64 hex digits, made here"},
                "types": {"type": "array", "minItems": 1, "items": event_type.clone(),
                          "description": "the event types delivered; by default every type"},
                "description": {"type": "string", "maxLength": 1024}}},
        "Webhook": webhook.clone(),
        "WebhookCreated": {"allOf": [schema_ref("Webhook"), {"type": "object", "required": ["secret"],
            "properties": {"secret": {"type": "string", "description": "shown only here"}}}]},
        "WebhookWithStatus": {"allOf": [schema_ref("Webhook"), {"type": "object", "properties": {
            "status": {"type": "object", "properties": {
                "running": {"type": "boolean", "description": "false: delivery stopped, `halted` says why"},
                "halted": {"type": ["string", "null"],
                           "description": "why delivery stopped or never started (its cursor or dead letters could not be read at start); null while running"},
                "delivered": {"type": "integer"},
                "failed_attempts": {"type": "integer"},
                "last_error": {"type": ["string", "null"]},
                "last_error_at_ms": {"type": ["integer", "null"]},
                "last_delivered_at_ms": {"type": ["integer", "null"]},
                "dead_letters": {"type": ["integer", "null"], "description": "in the list now (null: the list could not be read)"}}}}}]},
        "DeadLetter": {"type": "object", "properties": {
            "seq": {"type": "integer"},
            "event_id": {"type": "string"},
            "type": event_type,
            "attempts": {"type": "integer"},
            "last_error": {"type": "string"},
            "at_ms": {"type": "integer", "description": "when it was set aside"},
            "body": schema_ref("Event")}},
        "Extend": {"type": "object", "additionalProperties": false,
            "description": "exactly one of the two",
            "properties": {
                "expires_at_ms": {"type": "integer", "description": "the new expiry, ms since the Unix epoch"},
                "ttl_ms": {"type": "integer", "description": "the new expiry, this long from the server's now"}}},
        "Refund": refund,
        "Capture": capture,
        "Transfer": {"type": "object", "properties": {
            "id": {"type": "string"},
            "state": {"enum": ["initial", "pending", "applied", "held", "canceling", "done", "canceled"]},
            "kind": {"enum": ["transfer", "hold"]},
            "postings": {"type": "array", "items": schema_ref("PostingOut")},
            "metadata": {"type": "string"},
            "refund_of": {"type": ["string", "null"]},
            "refunded_by": {"type": ["string", "null"], "description": "the latest refund linked"},
            "refunds": {"type": "array", "description": "the refunds linked, oldest first", "items": {
                "type": "object", "properties": {"id": {"type": "string"},
                    "amounts": {"type": "array", "items": {"type": "integer"},
                        "description": "moved back of each posting, in order"}}}},
            "reason": {"type": ["object", "null"], "properties": {
                "code": {"type": "string"}, "account": {"type": "string"}, "message": {"type": "string"}}},
            "created_at_ms": {"type": "integer"}, "updated_at_ms": {"type": "integer"},
            "deadline_ms": {"type": "integer"}, "hold_expires_at_ms": {"type": ["integer", "null"]},
            "timeline": timeline, "escalation": escalation}}
    });
    let more = json!({
        "AssetIn": asset_in,
        "Asset": {"type": "object", "properties": {"code": {"type": "string"}, "scale": {"type": "integer"}}},
        "PostingOut": posting_out,
        "MetadataChange": {"type": "object", "required": ["metadata"], "additionalProperties": false,
            "properties": {"metadata": account_metadata.clone()}},
    });
    if let (Some(all), Value::Object(more)) = (all.as_object_mut(), more) {
        all.extend(more);
    }
    all
}

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let (summary, parameters, request, response) = operation(r.method, r.path);
        let mut op = json!({
            "summary": summary,
            "parameters": parameters,
            "responses": {"2XX": response, "4XX": error_response(), "5XX": error_response()},
        });
        if let Some(b) = request {
            op["requestBody"] = b;
        }
        if let Some(scope) = r.scope {
            op["security"] = json!([{"bearer": [scope.as_str()]}]);
        }
        let entry = paths.entry(r.path.to_string()).or_insert_with(|| json!({}));
        entry[r.method.to_ascii_lowercase()] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "xfer",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Atomic transfers across shards that only update one record atomically. \
                Amounts are integers of the asset's minor unit. Tokens: `read` < `write` < `admin`."
        },
        "paths": paths,
        "components": {
            "schemas": schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_with_a_summary() {
        let doc = document();
        let mut documented = 0;
        for r in ROUTES {
            let op = &doc["paths"][r.path][r.method.to_ascii_lowercase()];
            assert!(
                op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{} {} has no summary",
                r.method,
                r.path
            );
            documented += 1;
        }
        let in_doc: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_object().unwrap().len())
            .sum();
        assert_eq!(in_doc, documented);
    }

    #[test]
    fn every_path_parameter_is_declared_under_its_name() {
        let doc = document();
        for r in ROUTES {
            let op = &doc["paths"][r.path][r.method.to_ascii_lowercase()];
            let declared: Vec<&str> = op["parameters"]
                .as_array()
                .map_or(&[][..], |v| v)
                .iter()
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str())
                .collect();
            let named: Vec<&str> = r
                .path
                .split('/')
                .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            assert_eq!(declared, named, "{} {}", r.method, r.path);
        }
    }
}

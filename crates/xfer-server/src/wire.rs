//! The API's JSON: request bodies as they arrive (plain strings and numbers, so every check
//! can name its field and use the protocol's own codes) and the responses built from
//! records. Converting a request into a domain value is where bad input is refused.
//!
//! Amounts are JSON integers counting the asset's minor unit (cents for `USD`): exact, no
//! floating point. A posting's amount may also be a decimal string in its declared asset's
//! scale (`"12.34"`); answers add each amount as such a string (`amount_decimal`,
//! `balance_decimal`, …) where the asset is declared. Times are milliseconds since the Unix
//! epoch.

use crate::catalog::Catalog;
use crate::error::{ApiCode, ApiError};
use crate::hold::NewExpiry;
use crate::refund::RefundAmounts;
use serde::{Deserialize, Serialize};
use xfer_core::amount::AMOUNT_MAX;
use xfer_core::{
    Account, AccountId, AccountStatus, Amount, Asset, AssetCode, CancelReason, Code, LowerBound,
    Posting, Postings, Rejection, TransferId, TransferKind, TransferRecord, TransferSpec,
    TransferState,
};

/// How long prepares may take when a request does not say.
pub const TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// The most transfers in one batch request.
pub const BATCH_MAX: usize = 8_192;

/// `POST /v1/accounts`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AccountCreate {
    /// The account's id.
    pub id: String,
    /// The asset it holds.
    pub asset: String,
    /// An integer (0 or below; negative is a credit line) or `"unbounded"` (an issuer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<serde_json::Value>,
    /// Labels (owner, tier, …): see [`account_metadata`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `PUT /v1/accounts/{id}/metadata`: the whole map, replacing the one held (`{}` removes it).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataChange {
    /// See [`account_metadata`].
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// The most entries an account's metadata holds.
pub const ACCOUNT_METADATA_ENTRIES_MAX: usize = 16;
/// The longest key of an account's metadata.
pub const ACCOUNT_METADATA_KEY_MAX: usize = 64;
/// The longest value of an account's metadata, in bytes.
pub const ACCOUNT_METADATA_VALUE_MAX: usize = 256;

/// A listing's `metadata=key=value` filter, held to the rules of what may be stored (so no
/// key or value a store cannot take reaches one), or why not.
pub fn metadata_filter(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected key=value"))?;
    let mut one = serde_json::Map::new();
    one.insert(key.to_string(), serde_json::Value::from(value));
    account_metadata(&one, "metadata").map_err(|e| e.message)?;
    Ok((key.to_string(), value.to_string()))
}

/// An account's metadata as sent: at most [`ACCOUNT_METADATA_ENTRIES_MAX`] entries, each
/// key 1 to [`ACCOUNT_METADATA_KEY_MAX`] of `A-Z a-z 0-9 _ -`, each value a string of at most
/// [`ACCOUNT_METADATA_VALUE_MAX`] bytes with no control character. `field` names the map
/// (`metadata`).
pub fn account_metadata(
    m: &serde_json::Map<String, serde_json::Value>,
    field: &str,
) -> Result<xfer_store::Metadata, ApiError> {
    if m.len() > ACCOUNT_METADATA_ENTRIES_MAX {
        return Err(Rejection::new(
            Code::MetadataTooLarge,
            field,
            format!(
                "{} entries, at most {ACCOUNT_METADATA_ENTRIES_MAX}",
                m.len()
            ),
        )
        .into());
    }
    let mut out = xfer_store::Metadata::new();
    for (k, v) in m {
        let at = format!("{field}.{k}");
        let key_ok = !k.is_empty()
            && k.len() <= ACCOUNT_METADATA_KEY_MAX
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !key_ok {
            return Err(Rejection::new(
                Code::MetadataKeyIsInvalid,
                at,
                format!("{k:?}: a key is 1 to {ACCOUNT_METADATA_KEY_MAX} of A-Z a-z 0-9 _ -"),
            )
            .into());
        }
        let serde_json::Value::String(text) = v else {
            return Err(ApiError::api(
                ApiCode::WrongType,
                Some(&at),
                format!("{v} is not a string: metadata values are text"),
            ));
        };
        // Control characters have no place in a label, and PostgreSQL's jsonb stores no NUL.
        if text.chars().any(char::is_control) {
            return Err(Rejection::new(
                Code::MetadataValueIsInvalid,
                at,
                format!("{text:?} holds a control character"),
            )
            .into());
        }
        if text.len() > ACCOUNT_METADATA_VALUE_MAX {
            return Err(Rejection::new(
                Code::MetadataTooLarge,
                at,
                format!("{} bytes, at most {ACCOUNT_METADATA_VALUE_MAX}", text.len()),
            )
            .into());
        }
        out.insert(k.clone(), text.clone());
    }
    Ok(out)
}

/// `POST /v1/assets`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AssetIn {
    /// Its code: 1 to 16 of `A-Z 0-9 - _`.
    pub code: String,
    /// Decimal places of its minor unit, 0 to 18 (USD 2, JPY 0, BTC 8).
    pub scale: u64,
}

impl AssetIn {
    /// The asset this declares, or the bad field.
    pub fn to_asset(&self) -> Result<Asset, ApiError> {
        let code = AssetCode::new(&self.code, "code")?;
        let scale = u8::try_from(self.scale)
            .ok()
            .filter(|s| *s <= xfer_core::amount::ASSET_SCALE_MAX)
            .ok_or_else(|| {
                Rejection::new(
                    Code::AssetScaleOutOfRange,
                    "scale",
                    format!(
                        "{} decimal places, at most {}",
                        self.scale,
                        xfer_core::amount::ASSET_SCALE_MAX
                    ),
                )
            })?;
        Ok(Asset::new(code.as_str(), scale)?)
    }
}

/// A declared asset as answered.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct AssetOut {
    /// Its code.
    pub code: String,
    /// Decimal places of its minor unit.
    pub scale: u8,
}

impl From<&Asset> for AssetOut {
    fn from(a: &Asset) -> AssetOut {
        AssetOut {
            code: a.code.to_string(),
            scale: a.scale,
        }
    }
}

/// `PUT /v1/accounts/{id}/lower_bound`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LowerBoundChange {
    /// An integer or `"unbounded"`.
    pub lower_bound: serde_json::Value,
}

/// One posting as sent.
#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PostingIn {
    /// Debited account.
    pub from: String,
    /// Credited account.
    pub to: String,
    /// Asset code.
    pub asset: String,
    /// Minor units, a positive integer; or a decimal string in the declared asset's scale.
    pub amount: serde_json::Value,
}

/// A hold's options.
#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct HoldIn {
    /// Lifetime from creation; uncaptured holds are voided after it.
    pub ttl_ms: u64,
}

/// `POST /v1/transfers` (and each item of a batch).
#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct TransferIn {
    /// The idempotency key.
    pub id: String,
    /// 1 to 64 postings.
    pub postings: Vec<PostingIn>,
    /// Opaque client data, at most 2,048 bytes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metadata: String,
    /// Present for a hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldIn>,
    /// How long prepares may take (default 5,000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl PostingIn {
    /// A posting of `amount` minor units, as a client sends it.
    pub fn new(from: &str, to: &str, asset: &str, amount: u64) -> PostingIn {
        PostingIn {
            from: from.to_string(),
            to: to.to_string(),
            asset: asset.to_string(),
            amount: serde_json::Value::from(amount),
        }
    }
}

impl From<&TransferSpec> for TransferIn {
    /// The request that asks for `spec` (what a client such as `xfer bench` sends); the
    /// timeout is left out at the API's default.
    fn from(spec: &TransferSpec) -> TransferIn {
        TransferIn {
            id: spec.id.to_string(),
            postings: spec
                .postings
                .iter()
                .map(|p| {
                    PostingIn::new(
                        p.from.as_str(),
                        p.to.as_str(),
                        p.asset.as_str(),
                        p.amount.units(),
                    )
                })
                .collect(),
            metadata: spec.metadata.clone(),
            hold: match spec.kind {
                TransferKind::Hold { ttl_ms } => Some(HoldIn { ttl_ms }),
                TransferKind::Transfer => None,
            },
            timeout_ms: (spec.timeout_ms != TIMEOUT_MS_DEFAULT).then_some(spec.timeout_ms),
        }
    }
}

/// `POST /v1/transfers/batch`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchIn {
    /// The transfers, at most [`BATCH_MAX`].
    pub transfers: Vec<TransferIn>,
}

/// `POST /v1/transfers/{id}/refund`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RefundIn {
    /// The refund's own id (its idempotency key).
    pub id: String,
    /// A partial refund of a transfer of one posting: how much to move back, in minor
    /// units or as a decimal string in the asset's scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<serde_json::Value>,
    /// A partial refund: how much of each of the original's postings, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amounts: Option<Vec<serde_json::Value>>,
    /// Opaque client data.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metadata: String,
}

impl RefundIn {
    /// True if an amount is a decimal string (read in the original's assets' scales).
    pub fn has_decimals(&self) -> bool {
        any_decimal(&self.amount, &self.amounts)
    }

    /// How much it asks to move back (neither `amount` nor `amounts`: everything).
    /// `assets` are the original's postings' assets, needed only for decimal amounts.
    pub fn amounts(
        &self,
        assets: &[AssetCode],
        catalog: &Catalog,
    ) -> Result<RefundAmounts, ApiError> {
        let asked = posting_amounts(&self.amount, &self.amounts, assets, catalog, "original")?;
        Ok(match asked {
            None => RefundAmounts::Whole,
            Some(PostingAmounts::One(a)) => RefundAmounts::One(a),
            Some(PostingAmounts::Each(each)) => RefundAmounts::Each(each),
        })
    }
}

/// Amounts asked of a transfer's postings: `amount` of its one posting, or `amounts`, one
/// for each, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostingAmounts {
    /// `amount`.
    One(Amount),
    /// `amounts`.
    Each(Vec<Amount>),
}

impl PostingAmounts {
    /// The amounts, in posting order.
    pub fn into_vec(self) -> Vec<Amount> {
        match self {
            PostingAmounts::One(a) => vec![a],
            PostingAmounts::Each(each) => each,
        }
    }
}

/// True if `amount` or one of `amounts` is a decimal string.
fn any_decimal(
    amount: &Option<serde_json::Value>,
    amounts: &Option<Vec<serde_json::Value>>,
) -> bool {
    let each = amounts.iter().flatten();
    amount.iter().chain(each).any(|v| v.is_string())
}

/// Reads `amount` or `amounts` (neither: `None`), each in minor units or as a decimal
/// string in the scale of its posting's asset (`assets`, needed only for decimals; `whose`
/// names the transfer they are read against in a refusal).
fn posting_amounts(
    amount: &Option<serde_json::Value>,
    amounts: &Option<Vec<serde_json::Value>>,
    assets: &[AssetCode],
    catalog: &Catalog,
    whose: &str,
) -> Result<Option<PostingAmounts>, ApiError> {
    let one = |i: usize, v: &serde_json::Value, field: &str| match assets.get(i) {
        Some(asset) => amount_of(v, asset, catalog, field),
        None if v.is_string() => Err(ApiError::api(
            ApiCode::InvalidValue,
            Some(field),
            format!("the {whose} has no such posting to read this decimal in its asset's scale"),
        )),
        None => units(v, field),
    };
    match (amount, amounts) {
        (None, None) => Ok(None),
        (Some(a), None) => Ok(Some(PostingAmounts::One(one(0, a, "amount")?))),
        (None, Some(each)) if each.is_empty() => Err(ApiError::api(
            ApiCode::InvalidValue,
            Some("amounts"),
            format!("no amounts: give one for each of the {whose}'s postings"),
        )),
        (None, Some(each)) => Ok(Some(PostingAmounts::Each(
            each.iter()
                .enumerate()
                .map(|(i, a)| one(i, a, &format!("amounts[{i}]")))
                .collect::<Result<_, _>>()?,
        ))),
        (Some(_), Some(_)) => Err(ApiError::api(
            ApiCode::InvalidValue,
            Some("amounts"),
            "give `amount` or `amounts`, not both",
        )),
    }
}

/// `POST /v1/transfers/{id}/capture`: no body (or `{}`) captures the hold whole; `amount`
/// (a hold of one posting) or `amounts` (one per posting, in order) capture that much and
/// release the rest.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureIn {
    /// Of a hold of one posting, how much to capture, in minor units or as a decimal
    /// string in the asset's scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<serde_json::Value>,
    /// Of each posting, in order, how much to capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amounts: Option<Vec<serde_json::Value>>,
}

impl CaptureIn {
    /// True if an amount is a decimal string (read in the hold's assets' scales).
    pub fn has_decimals(&self) -> bool {
        any_decimal(&self.amount, &self.amounts)
    }

    /// What it asks to capture (`None`: the whole hold). `assets` are the hold's postings'
    /// assets, needed only for decimal amounts.
    pub fn amounts(
        &self,
        assets: &[AssetCode],
        catalog: &Catalog,
    ) -> Result<Option<PostingAmounts>, ApiError> {
        posting_amounts(&self.amount, &self.amounts, assets, catalog, "hold")
    }
}

/// `POST /v1/transfers/{id}/extend`: exactly one of the two.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendIn {
    /// The hold's new expiry, in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The hold's new expiry, this many milliseconds from the server's now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

impl ExtendIn {
    /// Where the hold's new expiry is.
    pub fn new_expiry(&self) -> Result<NewExpiry, ApiError> {
        match (self.expires_at_ms, self.ttl_ms) {
            (Some(at), None) => Ok(NewExpiry::At(xfer_core::Timestamp(at))),
            (None, Some(ms)) => Ok(NewExpiry::In(ms)),
            (None, None) => Err(ApiError::api(
                ApiCode::MissingField,
                Some("expires_at_ms"),
                "give the new expiry: `expires_at_ms`, or `ttl_ms` from now",
            )),
            (Some(_), Some(_)) => Err(ApiError::api(
                ApiCode::InvalidValue,
                Some("ttl_ms"),
                "give `expires_at_ms` or `ttl_ms`, not both",
            )),
        }
    }
}

/// Parses an account id from `field`.
pub fn account_id(s: &str, field: &str) -> Result<AccountId, ApiError> {
    Ok(AccountId::parse(s, field)?)
}

/// Parses a transfer id from `field`.
pub fn transfer_id(s: &str, field: &str) -> Result<TransferId, ApiError> {
    Ok(TransferId::parse(s, field)?)
}

/// Parses a lower bound: an integer or `"unbounded"`.
pub fn lower_bound(v: &serde_json::Value, field: &str) -> Result<LowerBound, ApiError> {
    lower_bound_of(v, None, field)
}

/// Parses a lower bound of an account of `asset`: also a decimal string in the scale
/// `catalog` declares for it (`"-50.00"`).
pub fn lower_bound_of(
    v: &serde_json::Value,
    asset: Option<(&AssetCode, &Catalog)>,
    field: &str,
) -> Result<LowerBound, ApiError> {
    match v {
        serde_json::Value::String(s) if s == "unbounded" => Ok(LowerBound::Unbounded),
        // A word other than `unbounded` is the wrong kind of value, not a bad decimal.
        serde_json::Value::String(s)
            if asset.is_some()
                && s.strip_prefix('-')
                    .unwrap_or(s)
                    .starts_with(|c: char| c.is_ascii_digit()) =>
        {
            let (code, catalog) = asset.expect("matched");
            let (negative, magnitude) = match s.strip_prefix('-') {
                Some(m) => (true, m),
                None => (false, s.as_str()),
            };
            let units = match catalog.parse_amount(code, magnitude, field) {
                Ok(a) => a.signed(),
                // Zero reads as "not positive": as a bound it is just 0.
                Err(r) if r.code == Code::AmountMustBePositive => 0,
                Err(r) => return Err(r.into()),
            };
            Ok(LowerBound::Bounded(if negative { -units } else { units }))
        }
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(units) => Ok(LowerBound::Bounded(units)),
            None => Err(Rejection::new(
                Code::LowerBoundOutOfRange,
                field,
                format!(
                    "{n} is not an integer between {} and {}",
                    i64::MIN,
                    i64::MAX
                ),
            )
            .into()),
        },
        other => Err(ApiError::api(
            ApiCode::WrongType,
            Some(field),
            format!(
                "{other} is neither an integer, a decimal in the asset's scale nor \"unbounded\""
            ),
        )),
    }
}

/// Parses an amount: a positive integer of minor units no larger than [`AMOUNT_MAX`].
pub fn amount(n: &serde_json::Number, field: &str) -> Result<Amount, ApiError> {
    if let Some(units) = n.as_u64() {
        return Ok(Amount::new(units, field)?);
    }
    if let Some(units) = n.as_i64() {
        return Ok(Amount::from_i128(i128::from(units), field)?);
    }
    // Not an i64 nor a u64: a fraction, an integer written with a point or an exponent
    // (`10.0`, `1e3`), or an integer too large for either, which serde_json reads as a float.
    let f = n.as_f64().unwrap_or(f64::NAN);
    let r = if f < 0.0 {
        Rejection::new(
            Code::AmountMustBePositive,
            field,
            format!("{n} is negative"),
        )
    } else if f.is_finite() && f >= AMOUNT_MAX as f64 {
        Rejection::new(
            Code::AmountExceedsMaximum,
            field,
            format!("{n} is above the maximum {AMOUNT_MAX}"),
        )
    } else {
        Rejection::new(
            Code::AmountIsNotANumber,
            field,
            format!(
                "{n}: an amount is an integer count of the asset's minor unit \
                 (cents for USD), written without a decimal point or an exponent"
            ),
        )
    };
    Err(r.into())
}

/// Parses a posting's amount of `asset`: an integer of minor units, or a decimal string in
/// the scale `catalog` declares for `asset`.
pub fn amount_of(
    v: &serde_json::Value,
    asset: &AssetCode,
    catalog: &Catalog,
    field: &str,
) -> Result<Amount, ApiError> {
    match v {
        serde_json::Value::String(text) => Ok(catalog.parse_amount(asset, text, field)?),
        v => units(v, field),
    }
}

/// Parses an amount that is not a decimal string: an integer of minor units.
fn units(v: &serde_json::Value, field: &str) -> Result<Amount, ApiError> {
    match v {
        serde_json::Value::Number(n) => amount(n, field),
        other => Err(ApiError::api(
            ApiCode::WrongType,
            Some(field),
            format!(
                "{other} is neither an integer of minor units nor a decimal string like \"12.34\""
            ),
        )),
    }
}

impl TransferIn {
    /// The asset codes of the postings whose amount is a decimal string (their scale must
    /// be known before [`TransferIn::to_spec`]).
    pub fn decimal_assets(&self) -> impl Iterator<Item = AssetCode> + '_ {
        self.postings
            .iter()
            .filter(|p| p.amount.is_string())
            .filter_map(|p| AssetCode::new(&p.asset, "asset").ok())
    }

    /// The transfer this asks for, or the first bad field. `prefix` names the item of a
    /// batch (`transfers[3].`); `catalog` gives the scales of decimal amounts.
    pub fn to_spec(&self, prefix: &str, catalog: &Catalog) -> Result<TransferSpec, ApiError> {
        let id = transfer_id(&self.id, &format!("{prefix}id"))?;
        let mut postings = Postings::with_capacity(self.postings.len());
        for (i, p) in self.postings.iter().enumerate() {
            let at = |name: &str| format!("{prefix}postings[{i}].{name}");
            let asset = AssetCode::new(&p.asset, &at("asset"))?;
            postings.push(Posting {
                from: account_id(&p.from, &at("from"))?,
                to: account_id(&p.to, &at("to"))?,
                amount: amount_of(&p.amount, &asset, catalog, &at("amount"))?,
                asset,
            });
        }
        let spec = TransferSpec {
            id,
            postings,
            metadata: self.metadata.clone(),
            kind: match &self.hold {
                Some(h) => TransferKind::Hold { ttl_ms: h.ttl_ms },
                None => TransferKind::Transfer,
            },
            refund_of: None,
            timeout_ms: self.timeout_ms.unwrap_or(TIMEOUT_MS_DEFAULT),
        };
        spec.validate().map_err(|r| {
            let field = format!("{prefix}{}", r.field);
            ApiError::from(r.at(&field))
        })?;
        Ok(spec)
    }
}

/// One posting as answered.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct PostingOut {
    /// Debited account.
    pub from: String,
    /// Credited account.
    pub to: String,
    /// Asset code.
    pub asset: String,
    /// Minor units.
    pub amount: u64,
    /// The amount in the asset's declared scale (`"12.34"`); absent if it is not declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_decimal: Option<String>,
    /// Of a hold captured in part: what moved, in minor units (the rest of `amount` was
    /// released); absent when the whole amount moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured: Option<u64>,
    /// `captured` in the asset's declared scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_decimal: Option<String>,
}

/// A refund linked to the transfer it moves back.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct RefundOut {
    /// The refund's id.
    pub id: String,
    /// How much it moves back of each of the original's postings, in order.
    pub amounts: Vec<u64>,
}

/// Why a transfer was canceled.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct ReasonOut {
    /// `exceeds_available`, `account_closed`, `deadline_passed`, `voided`, `hold_expired`, …
    pub code: String,
    /// The account that refused, when one did.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub account: Option<String>,
    /// For people.
    pub message: String,
}

/// A transfer as answered.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct TransferOut {
    /// Its id.
    pub id: String,
    /// `initial`, `pending`, `applied`, `held`, `canceling`, `done` or `canceled`.
    pub state: String,
    /// `transfer` or `hold`.
    pub kind: String,
    /// What moves.
    pub postings: Vec<PostingOut>,
    /// Client data.
    pub metadata: String,
    /// For a refund: the transfer it reverses.
    pub refund_of: Option<String>,
    /// For a refunded transfer: its latest refund.
    pub refunded_by: Option<String>,
    /// For a refunded transfer: its refunds, oldest first, each with how much it moves
    /// back of each posting (a refund canceled since keeps its link until another replaces
    /// it).
    pub refunds: Vec<RefundOut>,
    /// For a canceled (or canceling) transfer: why.
    pub reason: Option<ReasonOut>,
    /// Accepted at.
    pub created_at_ms: u64,
    /// Last change at.
    pub updated_at_ms: u64,
    /// Prepares are refused from this instant on.
    pub deadline_ms: u64,
    /// For a hold: when it expires uncaptured.
    pub hold_expires_at_ms: Option<u64>,
    /// Every state it passed through, oldest first: its first step (accepted) and its
    /// latest, at most 16 (older steps in the middle are dropped).
    #[serde(default)]
    pub timeline: Vec<StepOut>,
    /// Escalated to a person: its recovery kept failing, and sweepers leave it alone until
    /// it is re-driven (`POST /v1/transfers/{id}/redrive`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<EscalationOut>,
}

/// Why and since when a transfer waits for a person.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct EscalationOut {
    /// Failed recoveries in a row when it was escalated.
    pub attempts: u32,
    /// The last failure.
    pub error: String,
    /// When it was escalated.
    pub at_ms: u64,
}

/// One step of a transfer's timeline: its record as one write left it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct StepOut {
    /// When, on the writer's clock (as `updated_at_ms`).
    pub at_ms: u64,
    /// The state after the write.
    pub state: String,
    /// The executor that owns it after the write (none once finished).
    pub owner: Option<String>,
    /// The owner's epoch after the write.
    pub epoch: u64,
    /// On a step to `canceling` or `canceled`: why.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<ReasonOut>,
    /// On a refund link's step: the refund.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub refund_id: Option<String>,
}

/// One change-feed event as the API writes it.
#[derive(Debug, Serialize)]
pub struct EventOut {
    /// Stable: the transfer, the type, and for a refund the refund (`t1/done`,
    /// `t1/refunded/r1`); a receiver drops duplicates by it.
    pub id: String,
    /// `accepted`, `held`, `captured`, `voided`, `expired`, `done`, `canceled`, `refunded`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The state the change moved the transfer to (`accepted`: `pending`; `refunded`: it
    /// stays `done`).
    pub state: &'static str,
    /// The transfer.
    pub transfer_id: String,
    /// When the change was made (the writer's clock).
    pub at_ms: u64,
    /// For `refunded`: the refund.
    pub refund_id: Option<String>,
    /// The transfer as it was when the event was read: its postings, metadata and, if
    /// canceled, why (its state may be later than the event's).
    pub transfer: Option<TransferOut>,
}

impl EventOut {
    /// `e` with its transfer's record, if the store still has it.
    pub fn new(e: &xfer_store::Event, record: Option<&TransferRecord>) -> EventOut {
        use xfer_store::EventKind as K;
        let state = match e.kind {
            K::Accepted => TransferState::Pending,
            K::Held => TransferState::Held,
            K::Captured => TransferState::Applied,
            K::Voided | K::Expired => TransferState::Canceling,
            K::Done | K::Refunded => TransferState::Done,
            K::Canceled => TransferState::Canceled,
        };
        EventOut {
            id: e.id(),
            kind: e.kind.word(),
            state: state.as_str(),
            transfer_id: e.transfer.to_string(),
            at_ms: e.at.as_ms(),
            refund_id: e.refund.as_ref().map(|r| r.to_string()),
            transfer: record.map(TransferOut::from),
        }
    }
}

impl From<&TransferRecord> for TransferOut {
    fn from(r: &TransferRecord) -> Self {
        TransferOut {
            id: r.spec.id.to_string(),
            state: r.state.as_str().to_string(),
            kind: match r.spec.kind {
                TransferKind::Transfer => "transfer",
                TransferKind::Hold { .. } => "hold",
            }
            .to_string(),
            postings: r
                .spec
                .postings
                .iter()
                .enumerate()
                .map(|(i, p)| PostingOut {
                    from: p.from.to_string(),
                    to: p.to.to_string(),
                    asset: p.asset.to_string(),
                    amount: p.amount.units(),
                    amount_decimal: None,
                    captured: r.captured.get(i).map(|a| a.units()),
                    captured_decimal: None,
                })
                .collect(),
            metadata: r.spec.metadata.clone(),
            refund_of: r.spec.refund_of.as_ref().map(|t| t.to_string()),
            refunded_by: r.refunded_by.as_ref().map(|t| t.to_string()),
            refunds: r
                .refund_links()
                .iter()
                .map(|l| RefundOut {
                    id: l.refund.to_string(),
                    amounts: l.amounts.iter().map(|a| a.units()).collect(),
                })
                .collect(),
            reason: r.reason.as_ref().map(reason),
            created_at_ms: r.created_at.as_ms(),
            updated_at_ms: r.updated_at.as_ms(),
            deadline_ms: r.deadline.as_ms(),
            hold_expires_at_ms: r.hold_expires_at.map(|t| t.as_ms()),
            timeline: r
                .timeline
                .steps()
                .iter()
                .map(|s| StepOut {
                    at_ms: s.at.as_ms(),
                    state: s.state.as_str().to_string(),
                    owner: s.owner.as_ref().map(|o| o.to_string()),
                    epoch: s.epoch,
                    reason: s.reason.as_deref().map(reason),
                    refund_id: s.refund.as_ref().map(|r| r.to_string()),
                })
                .collect(),
            escalation: r.escalation.as_ref().map(|e| EscalationOut {
                attempts: e.attempts,
                error: e.error.clone(),
                at_ms: e.at.as_ms(),
            }),
        }
    }
}

impl TransferOut {
    /// The same, each posting's amount also shown in its asset's declared scale.
    pub fn with_decimals(mut self, catalog: &Catalog) -> TransferOut {
        for p in &mut self.postings {
            if let Ok(code) = AssetCode::new(&p.asset, "asset") {
                p.amount_decimal = catalog.decimal(&code, i128::from(p.amount));
                p.captured_decimal = p
                    .captured
                    .and_then(|c| catalog.decimal(&code, i128::from(c)));
            }
        }
        self
    }
}

fn reason(r: &CancelReason) -> ReasonOut {
    let (code, account) = match r {
        CancelReason::Refused { account, code } => (code.as_str(), Some(account.to_string())),
        CancelReason::DeadlinePassed => ("deadline_passed", None),
        CancelReason::Voided => ("voided", None),
        CancelReason::Expired => ("hold_expired", None),
        CancelReason::RefundRefused { code } => (code.as_str(), None),
    };
    ReasonOut {
        code: code.to_string(),
        account,
        message: r.to_string(),
    }
}

/// An account as answered.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct AccountOut {
    /// Its id.
    pub id: String,
    /// Its asset.
    pub asset: String,
    /// Posted balance.
    pub balance: i64,
    /// Prepared debits not yet posted.
    pub reserved: i64,
    /// Prepared credits not yet posted (not available).
    pub incoming: i64,
    /// `balance - reserved - lower_bound`; `null` for an unbounded account.
    pub available: Option<i128>,
    /// An integer or `"unbounded"`.
    pub lower_bound: serde_json::Value,
    /// `open` or `closed`.
    pub status: String,
    /// Transfers in flight on it.
    pub in_flight: u64,
    /// The shard that holds it.
    pub shard: usize,
    /// Its asset's declared scale; absent (with the decimals below) if it is not declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<u8>,
    /// `balance` in the asset's scale (`"12.34"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance_decimal: Option<String>,
    /// `reserved` in the asset's scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_decimal: Option<String>,
    /// `incoming` in the asset's scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming_decimal: Option<String>,
    /// `available` in the asset's scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_decimal: Option<String>,
    /// Its labels (`{}` when it has none).
    #[serde(default)]
    pub metadata: xfer_store::Metadata,
}

impl AccountOut {
    /// The same with its metadata.
    pub fn with_metadata(mut self, metadata: xfer_store::Metadata) -> AccountOut {
        self.metadata = metadata;
        self
    }

    /// The answer for `a`, held on `shard`, with decimals where `catalog` declares its asset.
    pub fn new(a: &Account, shard: usize, catalog: &Catalog) -> AccountOut {
        let asset = catalog.get(&a.asset);
        let decimal = |units: i128| asset.map(|x| x.format(units));
        let available = match a.lower_bound {
            LowerBound::Bounded(_) => Some(a.available()),
            LowerBound::Unbounded => None,
        };
        AccountOut {
            scale: asset.map(|x| x.scale),
            balance_decimal: decimal(i128::from(a.balance)),
            reserved_decimal: decimal(i128::from(a.reserved)),
            incoming_decimal: decimal(i128::from(a.incoming)),
            available_decimal: available.and_then(decimal),
            id: a.id.to_string(),
            asset: a.asset.to_string(),
            balance: a.balance,
            reserved: a.reserved,
            incoming: a.incoming,
            available,
            lower_bound: match a.lower_bound {
                LowerBound::Bounded(b) => serde_json::Value::from(b),
                LowerBound::Unbounded => serde_json::Value::from("unbounded"),
            },
            status: match a.status {
                AccountStatus::Open => "open",
                AccountStatus::Closed => "closed",
                AccountStatus::Unopened => "unopened",
            }
            .to_string(),
            in_flight: a.open_intents() as u64,
            shard,
            metadata: xfer_store::Metadata::new(),
        }
    }
}

/// One result of a batch: the transfer, or the error of that item alone.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct BatchItemOut {
    /// The HTTP status this item would have had alone.
    pub status: u16,
    /// The transfer, when there is one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub transfer: Option<TransferOut>,
    /// The error, when there is one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> serde_json::Number {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn amounts_are_positive_integers_within_the_maximum() {
        assert_eq!(amount(&n("12"), "a").unwrap().units(), 12);
        let code = |t: &str| amount(&n(t), "postings[0].amount").unwrap_err().code;
        assert_eq!(code("0"), "amount_must_be_positive");
        assert_eq!(code("-5"), "amount_must_be_positive");
        assert_eq!(code("9223372036854775808"), "amount_exceeds_maximum");
        assert_eq!(code("100000000000000000000000"), "amount_exceeds_maximum");
        assert_eq!(code("1.5"), "amount_is_not_a_number");
        // An integer written as a float is not above any maximum: say what an amount is.
        for t in ["1e3", "10.0", "1E2", "0.0", "9007199254740993.0"] {
            let e = amount(&n(t), "postings[0].amount").unwrap_err();
            assert_eq!(e.code, "amount_is_not_a_number", "{t}");
            assert!(
                e.message
                    .contains("integer count of the asset's minor unit"),
                "{t}: {}",
                e.message
            );
        }
        assert_eq!(code("1e30"), "amount_exceeds_maximum");
        assert_eq!(code("-1e3"), "amount_must_be_positive");
        assert_eq!(
            amount(&n("0"), "postings[0].amount")
                .unwrap_err()
                .field
                .as_deref(),
            Some("postings[0].amount")
        );
    }

    #[test]
    fn a_batch_item_names_its_index() {
        let t = TransferIn {
            id: "t".into(),
            postings: vec![PostingIn {
                from: "a".into(),
                to: "a".into(),
                asset: "USD".into(),
                amount: serde_json::Value::Number(n("1")),
            }],
            metadata: String::new(),
            hold: None,
            timeout_ms: None,
        };
        let e = t.to_spec("transfers[3].", &Catalog::default()).unwrap_err();
        assert_eq!(e.code, "accounts_must_be_different");
        assert_eq!(e.field.as_deref(), Some("transfers[3].postings[0].to"));
    }
}

//! Named rejections. A [`Rejection`] means the request was refused for a reason the caller
//! can read and fix, and that it changed nothing. Codes are snake_case sentences, stable
//! across versions, and each rejection names the field it is about.

use std::fmt;

/// Why a request was refused. The text form ([`Code::as_str`]) is part of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // each variant's doc is its snake_case sentence, listed in `as_str`.
pub enum Code {
    IdMustNotBeEmpty,
    IdTooLong,
    IdHasInvalidCharacter,
    AssetCodeIsInvalid,
    AssetScaleOutOfRange,
    AmountIsNotANumber,
    AmountHasTooManyDecimals,
    AmountMustBePositive,
    AmountExceedsMaximum,
    AccountsMustBeDifferent,
    PostingsMustNotBeEmpty,
    TooManyPostings,
    AccountUsedWithTwoAssets,
    MetadataTooLarge,
    TimeoutOutOfRange,
    HoldExpiryOutOfRange,
    LowerBoundOutOfRange,
    AssetMismatch,
    ExceedsAvailable,
    AccountClosed,
    AccountNotFound,
    BalanceWouldOverflow,
    IdExistsWithDifferentBody,
    AccountExistsWithDifferentBody,
    AccountHasTransfersInFlight,
    LowerBoundAboveAvailable,
    TransferNotFound,
    TransferIsNotHeld,
    HoldExpired,
    HoldAlreadyCaptured,
    HoldAlreadyVoided,
    OriginalIsNotDone,
    OriginalAlreadyRefunded,
    RefundMustReverseOriginal,
    RefundExceedsOriginal,
    TooManyRefunds,
    AssetNotDeclared,
    AssetDeclaredWithAnotherScale,
    MetadataKeyIsInvalid,
    MetadataValueIsInvalid,
    CaptureExceedsHold,
    CaptureMustMatchHold,
}

impl Code {
    /// The stable snake_case name of this code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::IdMustNotBeEmpty => "id_must_not_be_empty",
            Code::IdTooLong => "id_too_long",
            Code::IdHasInvalidCharacter => "id_has_invalid_character",
            Code::AssetCodeIsInvalid => "asset_code_is_invalid",
            Code::AssetScaleOutOfRange => "asset_scale_out_of_range",
            Code::AmountIsNotANumber => "amount_is_not_a_number",
            Code::AmountHasTooManyDecimals => "amount_has_too_many_decimals",
            Code::AmountMustBePositive => "amount_must_be_positive",
            Code::AmountExceedsMaximum => "amount_exceeds_maximum",
            Code::AccountsMustBeDifferent => "accounts_must_be_different",
            Code::PostingsMustNotBeEmpty => "postings_must_not_be_empty",
            Code::TooManyPostings => "too_many_postings",
            Code::AccountUsedWithTwoAssets => "account_used_with_two_assets",
            Code::MetadataTooLarge => "metadata_too_large",
            Code::TimeoutOutOfRange => "timeout_out_of_range",
            Code::HoldExpiryOutOfRange => "hold_expiry_out_of_range",
            Code::LowerBoundOutOfRange => "lower_bound_out_of_range",
            Code::AssetMismatch => "asset_mismatch",
            Code::ExceedsAvailable => "exceeds_available",
            Code::AccountClosed => "account_closed",
            Code::AccountNotFound => "account_not_found",
            Code::BalanceWouldOverflow => "balance_would_overflow",
            Code::IdExistsWithDifferentBody => "id_exists_with_different_body",
            Code::AccountExistsWithDifferentBody => "account_exists_with_different_body",
            Code::AccountHasTransfersInFlight => "account_has_transfers_in_flight",
            Code::LowerBoundAboveAvailable => "lower_bound_above_available",
            Code::TransferNotFound => "transfer_not_found",
            Code::TransferIsNotHeld => "transfer_is_not_held",
            Code::HoldExpired => "hold_expired",
            Code::HoldAlreadyCaptured => "hold_already_captured",
            Code::HoldAlreadyVoided => "hold_already_voided",
            Code::OriginalIsNotDone => "original_is_not_done",
            Code::OriginalAlreadyRefunded => "original_already_refunded",
            Code::RefundMustReverseOriginal => "refund_must_reverse_original",
            Code::RefundExceedsOriginal => "refund_exceeds_original",
            Code::TooManyRefunds => "too_many_refunds",
            Code::AssetNotDeclared => "asset_not_declared",
            Code::AssetDeclaredWithAnotherScale => "asset_declared_with_another_scale",
            Code::MetadataKeyIsInvalid => "metadata_key_is_invalid",
            Code::MetadataValueIsInvalid => "metadata_value_is_invalid",
            Code::CaptureExceedsHold => "capture_exceeds_hold",
            Code::CaptureMustMatchHold => "capture_must_match_hold",
        }
    }

    /// True for conflicts with existing state (HTTP 409), false for bad input (HTTP 422).
    pub fn is_conflict(self) -> bool {
        matches!(
            self,
            Code::IdExistsWithDifferentBody
                | Code::AccountExistsWithDifferentBody
                | Code::AccountHasTransfersInFlight
                | Code::TransferIsNotHeld
                | Code::HoldExpired
                | Code::HoldAlreadyCaptured
                | Code::HoldAlreadyVoided
                | Code::OriginalIsNotDone
                | Code::OriginalAlreadyRefunded
                | Code::RefundExceedsOriginal
                | Code::TooManyRefunds
                | Code::AssetDeclaredWithAnotherScale
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused request: the code, the field it is about (JSON-path-like, e.g.
/// `postings[1].amount`; empty when it is about the whole request) and a human sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// What went wrong.
    pub code: Code,
    /// Where: the request field at fault, or empty.
    pub field: String,
    /// Why, for a human.
    pub message: String,
}

impl Rejection {
    /// A rejection of `field` for `code`, explained by `message`.
    pub fn new(code: Code, field: impl Into<String>, message: impl Into<String>) -> Self {
        Rejection {
            code,
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same rejection, about `field` instead.
    pub fn at(mut self, field: &str) -> Self {
        self.field = field.to_string();
        self
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.code, self.message)
        } else {
            write!(f, "{} ({}): {}", self.code, self.field, self.message)
        }
    }
}

impl std::error::Error for Rejection {}

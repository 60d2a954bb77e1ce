//! Exact money. An [`Amount`] is a positive integer count of an asset's minor unit (cents
//! for `USD` at scale 2, single items for `SKU-42` at scale 0). There are no floats anywhere
//! in xfer. Balances are `i64` and every sum is checked: an overflow is a rejection, never a
//! wrap.

use crate::rejection::{Code, Rejection};
use std::fmt;
use std::sync::Arc;

/// The largest amount one posting may move: `i64::MAX`, so that any single amount fits a
/// signed balance and the SQL `bigint` of the PostgreSQL backend.
pub const AMOUNT_MAX: u64 = i64::MAX as u64;

/// The longest asset code, in bytes.
pub const ASSET_CODE_LEN_MAX: usize = 16;

/// A positive amount in minor units, at most [`AMOUNT_MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(u64);

impl Amount {
    /// Validates `units`; the rejection names `field`.
    pub fn new(units: u64, field: &str) -> Result<Amount, Rejection> {
        if units == 0 {
            return Err(Rejection::new(
                Code::AmountMustBePositive,
                field,
                "0 moves nothing",
            ));
        }
        if units > AMOUNT_MAX {
            return Err(Rejection::new(
                Code::AmountExceedsMaximum,
                field,
                format!("{units} is above the maximum {AMOUNT_MAX}"),
            ));
        }
        Ok(Amount(units))
    }

    /// Validates a signed input (as JSON may carry): negative amounts are refused by name.
    pub fn from_i128(units: i128, field: &str) -> Result<Amount, Rejection> {
        if units < 0 {
            return Err(Rejection::new(
                Code::AmountMustBePositive,
                field,
                format!("{units} is negative: swap from and to instead"),
            ));
        }
        let units = u64::try_from(units).map_err(|_| {
            Rejection::new(
                Code::AmountExceedsMaximum,
                field,
                format!("{units} is too large"),
            )
        })?;
        Amount::new(units, field)
    }

    /// The amount in minor units.
    pub fn units(self) -> u64 {
        self.0
    }

    /// The amount as a signed balance delta (never overflows: `units <= i64::MAX`).
    pub fn signed(self) -> i64 {
        self.0 as i64
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An asset's code: 1..=16 bytes of `[A-Z0-9_-]`, e.g. `USD`, `POINTS`, `SKU-42`. Its scale
/// (decimal places of the minor unit) belongs to the asset registry of the service; the
/// protocol only needs codes to match.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AssetCode(Arc<str>);

impl AssetCode {
    /// Validates `code`; the rejection names `field`.
    pub fn new(code: &str, field: &str) -> Result<AssetCode, Rejection> {
        let ok = !code.is_empty()
            && code.len() <= ASSET_CODE_LEN_MAX
            && code
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            return Err(Rejection::new(
                Code::AssetCodeIsInvalid,
                field,
                format!("{code:?}: use 1 to {ASSET_CODE_LEN_MAX} of A-Z 0-9 - _"),
            ));
        }
        Ok(AssetCode(Arc::from(code)))
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AssetCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AssetCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_positive_and_bounded() {
        assert_eq!(
            Amount::new(0, "amount").unwrap_err().code,
            Code::AmountMustBePositive
        );
        assert_eq!(
            Amount::from_i128(-5, "a").unwrap_err().code,
            Code::AmountMustBePositive
        );
        assert_eq!(
            Amount::new(AMOUNT_MAX + 1, "a").unwrap_err().code,
            Code::AmountExceedsMaximum
        );
        assert_eq!(
            Amount::from_i128(i128::MAX, "a").unwrap_err().code,
            Code::AmountExceedsMaximum
        );
        assert_eq!(Amount::new(AMOUNT_MAX, "a").unwrap().signed(), i64::MAX);
    }

    #[test]
    fn asset_codes_are_validated() {
        assert!(AssetCode::new("SKU-42", "asset").is_ok());
        let r = AssetCode::new("usd", "postings[0].asset").unwrap_err();
        assert_eq!(
            (r.code, r.field.as_str()),
            (Code::AssetCodeIsInvalid, "postings[0].asset")
        );
        assert!(AssetCode::new("", "asset").is_err());
        assert!(AssetCode::new(&"A".repeat(17), "asset").is_err());
    }
}

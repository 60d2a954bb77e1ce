//! Exact money. An [`Amount`] is a positive integer count of an asset's minor unit (cents
//! for `USD` at scale 2, single items for `SKU-42` at scale 0). There are no floats anywhere
//! in xfer. Balances are `i64` and every sum is checked: an overflow is a rejection, never a
//! wrap.

use crate::rejection::{Code, Rejection};
use std::fmt;

/// The largest amount one posting may move: `i64::MAX`, so that any single amount fits a
/// signed balance and the SQL `bigint` of the PostgreSQL backend.
pub const AMOUNT_MAX: u64 = i64::MAX as u64;

/// The longest asset code, in bytes.
pub const ASSET_CODE_LEN_MAX: usize = 16;

/// A positive amount in minor units, at most [`AMOUNT_MAX`].
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "u64", into = "u64")]
pub struct Amount(u64);

impl TryFrom<u64> for Amount {
    type Error = Rejection;
    fn try_from(units: u64) -> Result<Amount, Rejection> {
        Amount::new(units, "amount")
    }
}

impl From<Amount> for u64 {
    fn from(a: Amount) -> u64 {
        a.0
    }
}

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
///
/// Held inline, its bytes zero-padded (a code has no zero byte): cloning one touches no
/// shared reference count, whose cache line every op, leg and intent would otherwise bounce
/// between the cores (`docs/benchmarks.md`).
///
/// Its order is its text's: a code has no zero byte, so where one code ends and the other
/// goes on, the padding's zero sorts the shorter first, as text does.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AssetCode([u8; ASSET_CODE_LEN_MAX]);

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
        let mut bytes = [0; ASSET_CODE_LEN_MAX];
        bytes[..code.len()].copy_from_slice(code.as_bytes());
        Ok(AssetCode(bytes))
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        // ASCII, copied whole from a `&str` in `new` and never changed.
        std::str::from_utf8(self.as_bytes()).expect("an asset code is the bytes of a str")
    }

    /// The code's bytes, without the padding.
    fn as_bytes(&self) -> &[u8] {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        &self.0[..len]
    }
}

// Hashed as its text.
impl std::hash::Hash for AssetCode {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

crate::id::serde_as_validated_str!(AssetCode, |s| AssetCode::new(s, "asset"), |a| a.as_bytes());

impl fmt::Display for AssetCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for AssetCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_str())
    }
}

/// The most decimal places an asset's minor unit may have (10^18 fits an `i64`).
pub const ASSET_SCALE_MAX: u8 = 18;

/// An asset: its code and its scale, the number of decimal places of its minor unit (`USD`
/// has scale 2: 1 unit = 0.01 USD; `POINTS` and `SKU-42` have scale 0). Converts between
/// decimal text and exact minor units, never through floating point.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Asset {
    /// Its code.
    pub code: AssetCode,
    /// Decimal places of the minor unit, 0..=[`ASSET_SCALE_MAX`].
    pub scale: u8,
}

impl Asset {
    /// Validates `code` and `scale`.
    pub fn new(code: &str, scale: u8) -> Result<Asset, Rejection> {
        let code = AssetCode::new(code, "asset.code")?;
        if scale > ASSET_SCALE_MAX {
            return Err(Rejection::new(
                Code::AssetScaleOutOfRange,
                "asset.scale",
                format!("{scale} decimal places, at most {ASSET_SCALE_MAX}"),
            ));
        }
        Ok(Asset { code, scale })
    }

    /// Parses a positive decimal such as `"12.34"` into minor units (1234 at scale 2).
    /// Refuses signs other than none, exponents, separators, and more decimals than the
    /// scale, naming `field`.
    pub fn parse_amount(&self, text: &str, field: &str) -> Result<Amount, Rejection> {
        let nan = || {
            Rejection::new(
                Code::AmountIsNotANumber,
                field,
                format!("{text:?} is not a decimal like 12.34"),
            )
        };
        if let Some(rest) = text.strip_prefix('-') {
            if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                return Err(Rejection::new(
                    Code::AmountMustBePositive,
                    field,
                    format!("{text} is negative"),
                ));
            }
        }
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty()
            || !digits(int)
            || !digits(frac)
            || (text.contains('.') && frac.is_empty())
        {
            return Err(nan());
        }
        if frac.len() > self.scale as usize {
            return Err(Rejection::new(
                Code::AmountHasTooManyDecimals,
                field,
                format!(
                    "{text} has {} decimals; {} has {}",
                    frac.len(),
                    self.code,
                    self.scale
                ),
            ));
        }
        let too_big = || {
            Rejection::new(
                Code::AmountExceedsMaximum,
                field,
                format!("{text} is too large"),
            )
        };
        let mut units: u128 = 0;
        for b in int
            .bytes()
            .chain(frac.bytes())
            .chain(std::iter::repeat_n(b'0', self.scale as usize - frac.len()))
        {
            units = units
                .checked_mul(10)
                .and_then(|u| u.checked_add((b - b'0') as u128))
                .ok_or_else(too_big)?;
            if units > AMOUNT_MAX as u128 {
                return Err(too_big());
            }
        }
        Amount::new(units as u64, field)
    }

    /// Formats minor units as a decimal: `-5` at scale 2 is `"-0.05"`.
    pub fn format(&self, units: i128) -> String {
        let sign = if units < 0 { "-" } else { "" };
        let digits = units.unsigned_abs().to_string();
        let scale = self.scale as usize;
        if scale == 0 {
            return format!("{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_exactly() {
        let usd = Asset::new("USD", 2).unwrap();
        assert_eq!(usd.parse_amount("12.34", "a").unwrap().units(), 1234);
        assert_eq!(usd.parse_amount("12.3", "a").unwrap().units(), 1230);
        assert_eq!(usd.parse_amount("12", "a").unwrap().units(), 1200);
        assert_eq!(usd.parse_amount("0.01", "a").unwrap().units(), 1);
        let code = |t: &str| usd.parse_amount(t, "postings[0].amount").unwrap_err().code;
        assert_eq!(code("12.345"), Code::AmountHasTooManyDecimals);
        assert_eq!(code("-1"), Code::AmountMustBePositive);
        assert_eq!(code("0.00"), Code::AmountMustBePositive);
        for bad in [
            "", ".5", "5.", "1e5", "1,000", "+1", " 1", "0x10", "NaN", "1.2.3",
        ] {
            assert_eq!(code(bad), Code::AmountIsNotANumber, "{bad:?}");
        }
        assert_eq!(code("92233720368547758.08"), Code::AmountExceedsMaximum);
        assert_eq!(
            usd.parse_amount("92233720368547758.07", "a")
                .unwrap()
                .units(),
            AMOUNT_MAX
        );
        assert_eq!(code(&"9".repeat(60)), Code::AmountExceedsMaximum);
    }

    #[test]
    fn decimals_format_exactly() {
        let usd = Asset::new("USD", 2).unwrap();
        assert_eq!(usd.format(1234), "12.34");
        assert_eq!(usd.format(-5), "-0.05");
        assert_eq!(usd.format(0), "0.00");
        assert_eq!(Asset::new("POINTS", 0).unwrap().format(-42), "-42");
        assert_eq!(
            Asset::new("X", 19).unwrap_err().code,
            Code::AssetScaleOutOfRange
        );
        let wide = Asset::new("X", 18).unwrap();
        assert_eq!(wide.format(i64::MIN as i128), "-9.223372036854775808");
    }

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

    /// Held inline and zero-padded, a code is still its text: in JSON, in a binary format,
    /// in order, in equality and in hash.
    #[test]
    fn asset_codes_are_their_text_in_every_form_and_order() {
        fn hash<T: std::hash::Hash + ?Sized>(v: &T) -> u64 {
            use std::hash::Hasher;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            v.hash(&mut h);
            h.finish()
        }
        let texts = [
            "A",
            "AB",
            "ABC",
            "B",
            "USD",
            "USD2",
            "X_1-Z",
            &"Z".repeat(16),
        ];
        for a in texts {
            let code = AssetCode::new(a, "asset").unwrap();
            assert_eq!(code.as_str(), a);
            assert_eq!(code.to_string(), a);
            assert_eq!(hash(&code), hash(a));
            assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{a}\""));
            let back: AssetCode = serde_json::from_str(&format!("\"{a}\"")).unwrap();
            assert_eq!(back, code);
            for b in texts {
                let other = AssetCode::new(b, "asset").unwrap();
                assert_eq!(code.cmp(&other), a.cmp(b), "{a} against {b}");
                assert_eq!(code == other, a == b);
            }
        }
    }
}

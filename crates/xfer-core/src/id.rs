//! Validated identifiers. An id is 1..=[`ID_LEN_MAX`] bytes of `[A-Za-z0-9_:.-]`: printable,
//! safe in URLs, SQL literals and Redis hash tags, and short enough to keep intents cheap.

use crate::rejection::{Code, Rejection};
use std::fmt;
use std::sync::Arc;

/// The longest id, in bytes.
pub const ID_LEN_MAX: usize = 64;

fn validate(field: &'static str, s: &str) -> Result<(), Rejection> {
    if s.is_empty() {
        return Err(Rejection::new(
            Code::IdMustNotBeEmpty,
            field,
            "an id needs 1 or more bytes",
        ));
    }
    if s.len() > ID_LEN_MAX {
        return Err(Rejection::new(
            Code::IdTooLong,
            field,
            format!("{} bytes, at most {ID_LEN_MAX}", s.len()),
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_:.-".contains(*c)))
    {
        return Err(Rejection::new(
            Code::IdHasInvalidCharacter,
            field,
            format!("{c:?} is not one of A-Z a-z 0-9 _ : . -"),
        ));
    }
    Ok(())
}

/// Serde for a string newtype that must be validated when read: written as its text, read
/// through `$parse` so that a decoded value is as valid as a constructed one.
macro_rules! serde_as_validated_str {
    ($name:ident, $parse:expr) => {
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visit;
                impl serde::de::Visitor<'_> for Visit {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a valid ", stringify!($name)))
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        let parse: fn(&str) -> Result<$name, crate::Rejection> = $parse;
                        parse(v).map_err(E::custom)
                    }
                }
                d.deserialize_str(Visit)
            }
        }
    };
}
pub(crate) use serde_as_validated_str;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates `s`; the rejection names the field `
            #[doc = $field]
            /// `.
            pub fn new(s: &str) -> Result<Self, Rejection> {
                Self::parse(s, $field)
            }

            /// Validates `s`, naming `field` in a rejection (e.g. `postings[2].from`).
            pub fn parse(s: &str, field: &str) -> Result<Self, Rejection> {
                validate("", s).map_err(|r| r.at(field))?;
                Ok(Self(Arc::from(s)))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        serde_as_validated_str!($name, $name::new);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", &*self.0)
            }
        }
    };
}

id_type!(
    /// An account's id, chosen by whoever creates the account (e.g. `cash:alice`).
    AccountId,
    "account_id"
);
id_type!(
    /// A transfer's id, chosen by the client: the idempotency key.
    TransferId,
    "id"
);
id_type!(
    /// The executor (process and incarnation) that holds a transfer's lease.
    OwnerId,
    "owner"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated_with_the_field_named() {
        assert!(AccountId::new("cash:alice-1.x_y").is_ok());
        let r = AccountId::parse("", "postings[0].from").unwrap_err();
        assert_eq!(
            (r.code, r.field.as_str()),
            (Code::IdMustNotBeEmpty, "postings[0].from")
        );
        let r = TransferId::new(&"x".repeat(65)).unwrap_err();
        assert_eq!((r.code, r.field.as_str()), (Code::IdTooLong, "id"));
        assert!(TransferId::new(&"x".repeat(64)).is_ok());
        let r = TransferId::new("a b").unwrap_err();
        assert_eq!(r.code, Code::IdHasInvalidCharacter);
        assert!(TransferId::new("é").is_err());
    }
}

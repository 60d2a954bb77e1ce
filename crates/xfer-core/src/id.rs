//! Validated identifiers. An id is 1..=[`ID_LEN_MAX`] bytes of `[A-Za-z0-9_:.-]`: printable,
//! safe in URLs, SQL literals and Redis hash tags, and short enough to keep intents cheap.

use crate::rejection::{Code, Rejection};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU64;
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

/// Eight bytes from `at`, most significant first: comparing two of these as numbers
/// compares the bytes in text order.
#[inline(always)]
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

/// `a == b`, eight bytes at a time, inline (ids are at most [`ID_LEN_MAX`] bytes).
#[inline]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return tail(a, 0, n) == tail(b, 0, n);
    }
    let mut i = 0;
    while i + 8 <= n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    // The last word overlaps bytes already found equal.
    i == n || word(a, n - 8) == word(b, n - 8)
}

/// Bytes `from..to` (fewer than eight) as one number, most significant first.
#[inline(always)]
fn tail(b: &[u8], from: usize, to: usize) -> u64 {
    b[from..to].iter().fold(0, |w, &c| (w << 8) | u64::from(c))
}

/// `a.cmp(b)` in byte order (what `str` and `[u8]` answer), eight bytes at a time, inline.
#[inline]
pub(crate) fn bytes_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let (x, y) = (word(a, i), word(b, i));
        if x != y {
            return x.cmp(&y);
        }
        i += 8;
    }
    // Fewer than eight bytes left of the common length: the last word (overlapping bytes
    // already found equal), or, if shorter than a word, those bytes as one number each.
    let (x, y) = if i == n {
        (0, 0)
    } else if n >= 8 {
        (word(a, n - 8), word(b, n - 8))
    } else {
        (tail(a, i, n), tail(b, i, n))
    };
    x.cmp(&y).then(a.len().cmp(&b.len()))
}

/// Serde for a string newtype that must be validated when read: written as its text, read
/// through `$parse` so that a decoded value is as valid as a constructed one. A binary
/// format (postcard: the log and the tables) is handed the text's bytes (`$bytes`) instead
/// of the text: postcard writes both the same way (length, then the bytes), and the bytes
/// of an inline id need no UTF-8 check, which writing the text would do for every id
/// written (`docs/benchmarks.md#ids-as-bytes`).
macro_rules! serde_as_validated_str {
    ($name:ident, $parse:expr, $bytes:expr) => {
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.serialize_str(self.as_str())
                } else {
                    let bytes: fn(&$name) -> &[u8] = $bytes;
                    s.serialize_bytes(bytes(self))
                }
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

/// Ids of at most this many bytes are held inline, in the id itself.
pub const ID_INLINE_MAX: usize = 23;

/// An id held inline: 24 bytes in memory order, its length (never 0: an id is not empty),
/// then its bytes, zero-padded. Three words, so that the compiler copies one as three
/// words: a copy in odd pieces, read back at once in other pieces, cannot be forwarded from
/// the CPU's store buffer and waits for every older store to reach the cache
/// (`docs/benchmarks.md`).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
struct Inline {
    /// Bytes 0..8: the length, then the id's bytes 0..7. Never 0, which is where the
    /// enum keeps the shared form's tag (a niche): `Text` stays 24 bytes.
    head: NonZeroU64,
    /// Bytes 8..24: the id's bytes 7..23.
    rest: [u64; 2],
}

impl Inline {
    /// `s` inline, if it fits and is not empty.
    fn new(s: &str) -> Option<Inline> {
        if s.is_empty() || s.len() > ID_INLINE_MAX {
            return None;
        }
        let mut all = [0u8; 24];
        all[0] = s.len() as u8;
        all[1..=s.len()].copy_from_slice(s.as_bytes());
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&all[at..at + 8]);
            u64::from_ne_bytes(w)
        };
        Some(Inline {
            head: NonZeroU64::new(word(0)).expect("the length byte is not 0"),
            rest: [word(8), word(16)],
        })
    }

    /// The 24 bytes in memory order.
    #[inline(always)]
    fn all(&self) -> &[u8; 24] {
        // SAFETY: `Inline` is `repr(C)` of three 8-byte integers: 24 bytes, no padding,
        // every byte initialized. `[u8; 24]` has alignment 1 and takes any bytes, and the
        // reference borrows `self`, so it lives no longer and nothing writes meanwhile.
        // Why not safe code: a copy of the bytes (`to_ne_bytes`) cannot be borrowed as
        // the id's `&str`, and holding the bytes as an array (safe to borrow) gives the
        // enum no niche in a word, so the tag goes back into a byte of its own.
        #[allow(unsafe_code)]
        unsafe {
            &*(self as *const Inline).cast::<[u8; 24]>()
        }
    }

    #[inline(always)]
    fn as_bytes(&self) -> &[u8] {
        let all = self.all();
        &all[1..=usize::from(all[0])]
    }

    /// The three words as numbers that compare as the text does: its bytes in order,
    /// most significant first (the length byte shifted out; ids hold no 0 byte, so the
    /// zero padding orders a prefix first).
    #[inline(always)]
    fn order(&self) -> (u64, u64, u64) {
        let be = |w: u64| u64::from_be_bytes(w.to_ne_bytes());
        (be(self.head.get()) << 8, be(self.rest[0]), be(self.rest[1]))
    }
}

/// An id's bytes: inline when short (the common case: `usd-1234`, an order number), so
/// that hashing, comparing and cloning one reads no other memory and touches no shared
/// reference count; shared (`Arc<str>`) when longer. The same text always takes the same
/// form (only [`Text::new`] makes one), so the form never decides equality.
#[derive(Clone)]
enum Text {
    Inline(Inline),
    Shared(Arc<str>),
}

impl Text {
    fn new(s: &str) -> Text {
        match Inline::new(s) {
            Some(i) => Text::Inline(i),
            None => Text::Shared(Arc::from(s)),
        }
    }

    #[inline(always)]
    fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Inline(i) => i.as_bytes(),
            Text::Shared(s) => s.as_bytes(),
        }
    }

    #[inline(always)]
    fn as_str(&self) -> &str {
        match self {
            // The bytes of a `&str`, copied whole in `new` and never changed (ASCII, at
            // that): the check is of at most 23 bytes.
            Text::Inline(i) => {
                std::str::from_utf8(i.as_bytes()).expect("an id is the bytes of a str")
            }
            Text::Shared(s) => s,
        }
    }

    #[inline(always)]
    fn eq(&self, other: &Text) -> bool {
        match (self, other) {
            (Text::Inline(a), Text::Inline(b)) => a == b,
            (Text::Shared(a), Text::Shared(b)) => bytes_eq(a.as_bytes(), b.as_bytes()),
            // The same text always takes the same form.
            _ => false,
        }
    }

    #[inline(always)]
    fn cmp(&self, other: &Text) -> Ordering {
        match (self, other) {
            (Text::Inline(a), Text::Inline(b)) => a.order().cmp(&b.order()),
            _ => bytes_cmp(self.as_bytes(), other.as_bytes()),
        }
    }

    #[inline(always)]
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            // Equal ids are equal words (the same text always takes the same form). Not as
            // `str` hashes: so no id type may be looked up by its text (no `Borrow<str>`,
            // no `Equivalent<str>`), or such lookups would miss.
            Text::Inline(i) => {
                h.write_u64(i.head.get());
                h.write_u64(i.rest[0]);
                h.write_u64(i.rest[1]);
            }
            // As `str` hashes (its bytes, then 0xff).
            Text::Shared(s) => {
                h.write(s.as_bytes());
                h.write_u8(0xff);
            }
        }
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(Text);

        // Ids are compared all the time (the keys of every hash map once the hash matches,
        // the shard's ordered indexes): inline ones by their three words, shared ones by
        // [`bytes_eq`] and [`bytes_cmp`], not by a call to the C library's memcmp. The
        // order is the text's byte order, as `str`'s.
        impl PartialEq for $name {
            #[inline]
            fn eq(&self, other: &Self) -> bool {
                self.0.eq(&other.0)
            }
        }

        impl Eq for $name {}

        impl PartialOrd for $name {
            #[inline]
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $name {
            #[inline]
            fn cmp(&self, other: &Self) -> Ordering {
                self.0.cmp(&other.0)
            }
        }

        impl Hash for $name {
            #[inline]
            fn hash<H: Hasher>(&self, h: &mut H) {
                self.0.hash(h)
            }
        }

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
                Ok(Self(Text::new(s)))
            }

            /// The id as text.
            #[inline]
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }

            /// The id's bytes (its text's, without checking them again).
            #[inline]
            pub fn as_bytes(&self) -> &[u8] {
                self.0.as_bytes()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        serde_as_validated_str!($name, $name::new, $name::as_bytes);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", self.as_str())
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
    fn ids_are_text_in_json_and_their_bytes_are_their_texts() {
        for s in ["a", "usd-1234", &"x".repeat(40)] {
            let id = TransferId::new(s).unwrap();
            assert_eq!(id.as_bytes(), s.as_bytes());
            assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{s}\""));
            let back: TransferId = serde_json::from_str(&format!("\"{s}\"")).unwrap();
            assert_eq!(back, id);
        }
    }

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

    #[test]
    fn ids_compare_and_equal_as_their_text_does() {
        fn hash<T: Hash + ?Sized>(v: &T) -> u64 {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            v.hash(&mut h);
            h.finish()
        }
        // Lengths around the eight-byte words, shared prefixes, and every byte the
        // alphabet allows at the position where two ids first differ.
        let alphabet: Vec<char> = ('0'..='9')
            .chain('A'..='Z')
            .chain('a'..='z')
            .chain("_:.-".chars())
            .collect();
        let mut texts = vec![];
        // 22..=24: inline ids against shared ones (`ID_INLINE_MAX` is 23).
        for len in [0usize, 1, 2, 7, 8, 9, 15, 16, 17, 20, 21, 22, 23, 31, 63] {
            let base = "x".repeat(len);
            texts.push(base.clone());
            for c in [alphabet[0], 'm', alphabet[alphabet.len() - 1]] {
                texts.push(format!("{base}{c}"));
                texts.push(format!("{base}{c}zz"));
            }
        }
        for (i, a) in alphabet.iter().enumerate() {
            texts.push(format!("pre-fix-{a}"));
            texts.push(format!("{}{a}", "q".repeat(i % 12)));
        }
        let ids: Vec<(String, Option<TransferId>)> = texts
            .iter()
            .map(|t| (t.clone(), TransferId::new(t).ok()))
            .collect();
        for (ta, a) in &ids {
            for (tb, b) in &ids {
                let want = ta.cmp(tb);
                assert_eq!(
                    bytes_cmp(ta.as_bytes(), tb.as_bytes()),
                    want,
                    "{ta:?} {tb:?}"
                );
                assert_eq!(
                    bytes_eq(ta.as_bytes(), tb.as_bytes()),
                    ta == tb,
                    "{ta:?} {tb:?}"
                );
                if let (Some(a), Some(b)) = (a, b) {
                    assert_eq!(a.cmp(b), want, "{ta:?} {tb:?}");
                    assert_eq!(a == b, ta == tb, "{ta:?} {tb:?}");
                    // Another allocation of the same text is the same id.
                    assert_eq!(a, &TransferId::new(ta).expect("valid"));
                    // Equal ids hash equal, inline or shared; different ones do not.
                    assert_eq!(hash(a) == hash(b), ta == tb, "{ta:?} {tb:?}");
                    assert_eq!(hash(a), hash(&TransferId::new(ta).expect("valid")));
                }
            }
        }
    }

    #[test]
    fn an_id_is_three_words_and_holds_up_to_23_bytes_inline() {
        assert_eq!(std::mem::size_of::<TransferId>(), 24);
        for len in 1..=ID_LEN_MAX {
            let text = "7".repeat(len);
            let id = TransferId::new(&text).unwrap();
            assert_eq!(
                matches!(id.0, Text::Inline(_)),
                len <= ID_INLINE_MAX,
                "{len}"
            );
            assert_eq!(id.as_str(), text);
            assert_eq!(id.as_bytes(), text.as_bytes());
            assert_eq!(id.clone(), id);
        }
    }

    #[test]
    fn byte_comparisons_agree_with_slices_at_every_length_and_position() {
        // Every length 0..=65 (past ID_LEN_MAX), one byte moved up or down at every
        // position (inside a word, in the overlapping last word, in the short tail), and
        // every prefix of each: the inline comparisons answer what `[u8]` answers.
        let base: Vec<u8> = (0..65u8).map(|i| b'A' + i % 26).collect();
        for len in 0..=base.len() {
            let a = &base[..len];
            let mut others: Vec<Vec<u8>> = (0..=len).map(|p| base[..p].to_vec()).collect();
            for pos in 0..len {
                for delta in [1i16, -1] {
                    let mut b = a.to_vec();
                    b[pos] = (b[pos] as i16 + delta) as u8;
                    others.push(b);
                }
            }
            others.push([a, b"z"].concat());
            for b in &others {
                assert_eq!(bytes_cmp(a, b), a.cmp(b.as_slice()), "{a:?} {b:?}");
                assert_eq!(bytes_cmp(b, a), b.as_slice().cmp(a), "{b:?} {a:?}");
                assert_eq!(bytes_eq(a, b), a == b.as_slice(), "{a:?} {b:?}");
            }
        }
    }
}

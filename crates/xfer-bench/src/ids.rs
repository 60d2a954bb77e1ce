//! Transfer ids as the bench makes them: in counting order per client, or scattered over
//! the key range as random ids are, written on the stack.

use clap::ValueEnum;
use xfer_core::TransferId;

/// How the bench names its transfers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Ids {
    /// `b<client>-<n>`: a client's ids in counting order, so the ids of one checkpoint
    /// are neighbours in the tables keyed by id (the `done` table).
    Sequential,
    /// Sixteen hex digits, a bijective mix of client and count: unique, and spread over
    /// the whole key range as random ids are.
    Scattered,
}

/// The id of `client`'s `n`th transfer, written digit by digit into a buffer on the stack,
/// so that making one allocates no `String` as `format!` would
/// (`docs/benchmarks.md#bench-clients`).
pub(crate) fn transfer_id(ids: Ids, client: u64, n: u64) -> TransferId {
    let mut text = IdText::default();
    match ids {
        Ids::Sequential => {
            text.push(b'b');
            text.decimal(client);
            text.push(b'-');
            text.decimal(n);
        }
        Ids::Scattered => {
            // splitmix64's finalizer: xor-shifts and odd multiplications, each invertible,
            // so distinct inputs (n < 2^40, client < 2^24) give distinct ids.
            let mut z = (client << 40) ^ n;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            text.hex16(z ^ (z >> 31));
        }
    }
    TransferId::new(text.as_str()).expect("a bench id is valid")
}

/// An id's text as [`transfer_id`] and [`Names`] write it: at most 42 bytes ("b", twenty
/// digits, "-", twenty digits; an asset code of at most sixteen letters, "-", twenty digits).
#[derive(Clone)]
pub(crate) struct IdText {
    pub(crate) bytes: [u8; 42],
    pub(crate) len: usize,
}

impl Default for IdText {
    fn default() -> Self {
        IdText {
            bytes: [0; 42],
            len: 0,
        }
    }
}

impl IdText {
    pub(crate) fn push(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    /// `v` in decimal, without leading zeros.
    pub(crate) fn decimal(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &d in &digits[i..] {
            self.push(d);
        }
    }

    /// `v` as sixteen lower-case hex digits.
    pub(crate) fn hex16(&mut self, v: u64) {
        for shift in (0..16).rev() {
            self.push(b"0123456789abcdef"[(v >> (4 * shift)) as usize & 0xf]);
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).expect("ASCII digits and letters")
    }
}

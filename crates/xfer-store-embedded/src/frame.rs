//! Record framing. Every record in a log segment is
//!
//! ```text
//! | len: u32 LE | crc: u32 LE | lsn: u64 LE | payload: len bytes |
//!   crc = crc32c(len ‖ lsn ‖ payload)
//! ```
//!
//! The checksum covers the length and the sequence number too, so a torn or flipped length
//! is caught, and a stale record left in a reused region cannot pass for the next one. An
//! empty payload is never written, so zero-filled space never parses as a record.

/// Bytes of framing before the payload.
pub const OVERHEAD: usize = 16;
/// The largest payload one record may carry.
pub const PAYLOAD_MAX: usize = 64 << 20;

/// Appends the frame of `payload` with sequence number `lsn` to `out`.
pub fn encode(out: &mut Vec<u8>, lsn: u64, payload: &[u8]) {
    assert!(!payload.is_empty(), "empty payloads are never framed");
    assert!(payload.len() <= PAYLOAD_MAX, "payload over PAYLOAD_MAX");
    let len = (payload.len() as u32).to_le_bytes();
    let lsn = lsn.to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&len), &lsn), payload);
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&lsn);
    out.extend_from_slice(payload);
}

/// Why bytes at an offset are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// Fewer bytes left than a header, or than the length promises.
    Short,
    /// A length of zero or over [`PAYLOAD_MAX`].
    Length,
    /// The checksum does not match.
    Checksum,
}

/// A record read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Its sequence number.
    pub lsn: u64,
    /// Its payload.
    pub payload: &'a [u8],
    /// Bytes it occupies, framing included.
    pub size: usize,
}

/// Reads the record starting at the beginning of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Frame<'_>, Bad> {
    if bytes.len() < OVERHEAD {
        return Err(Bad::Short);
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > PAYLOAD_MAX {
        return Err(Bad::Length);
    }
    if bytes.len() < OVERHEAD + len {
        return Err(Bad::Short);
    }
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    let lsn_bytes = &bytes[8..16];
    let payload = &bytes[OVERHEAD..OVERHEAD + len];
    let actual = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&bytes[0..4]), lsn_bytes),
        payload,
    );
    if actual != crc {
        return Err(Bad::Checksum);
    }
    let lsn = u64::from_le_bytes(lsn_bytes.try_into().expect("8 bytes"));
    Ok(Frame {
        lsn,
        payload,
        size: OVERHEAD + len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_every_flipped_bit_is_caught() {
        let mut buf = Vec::new();
        encode(&mut buf, 42, b"hello");
        let f = decode(&buf).unwrap();
        assert_eq!(
            (f.lsn, f.payload, f.size),
            (42, &b"hello"[..], OVERHEAD + 5)
        );
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    decode(&bad).is_err(),
                    "flip of bit {bit} in byte {byte} passed"
                );
            }
        }
        for cut in 0..buf.len() {
            assert_eq!(decode(&buf[..cut]), Err(Bad::Short), "cut at {cut}");
        }
        assert_eq!(
            decode(&[0u8; 64]),
            Err(Bad::Length),
            "zeros are not a record"
        );
    }
}

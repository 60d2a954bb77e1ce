//! The `Xfer-Signature` header: HMAC-SHA256 with the endpoint's secret over
//! `"<timestamp>.<body>"`, so that a receiver knows the body came from xfer unchanged and
//! when it was signed (an old request replayed fails the receiver's age check).

use ring::hmac;

/// The header's value for `body` signed at `timestamp` (unix seconds):
/// `t=<timestamp>,v1=<lowercase hex of the MAC>`.
pub fn header(secret: &str, timestamp: u64, body: &[u8]) -> String {
    format!("t={timestamp},v1={}", hex(&mac(secret, timestamp, body)))
}

/// HMAC-SHA256 keyed with the secret's bytes, as given, over `"<timestamp>.<body>"`.
pub fn mac(secret: &str, timestamp: u64, body: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    ctx.sign().as_ref().to_vec()
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mac_is_hmac_sha256_of_the_timestamp_a_dot_and_the_body() {
        // Computed independently: Python's hmac.new(secret, b"1700000000." + body, sha256).
        let body = br#"{"id":"t1/done","type":"done"}"#;
        assert_eq!(
            header("whsec_0123456789abcdef", 1_700_000_000, body),
            "t=1700000000,v1=dc4fff1f5bfd6c9806f15967d396ddea57f4ef6bf5c54b52a7f24156c4bc377a"
        );
        // One byte changed anywhere changes it.
        assert_ne!(
            header("whsec_0123456789abcdef", 1_700_000_001, body),
            header("whsec_0123456789abcdef", 1_700_000_000, body)
        );
        assert_ne!(
            header("whsec_0123456789abcdeF", 1_700_000_000, body),
            header("whsec_0123456789abcdef", 1_700_000_000, body)
        );
    }

    #[test]
    fn the_primitive_is_hmac_sha256() {
        // RFC 4231, test case 2.
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"Jefe");
        let tag = hmac::sign(&key, b"what do ya want for nothing?");
        assert_eq!(
            hex(tag.as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }
}

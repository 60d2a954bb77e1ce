//! The console's sign-ins: a bearer token exchanged once for a random id in an HttpOnly,
//! SameSite=Strict cookie, kept in memory with the token's scope and a CSRF token that
//! every state-changing form carries back. A restart signs everyone out.

use crate::auth::Scope;
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::HashMap;
use std::sync::Mutex;
use xfer_core::Timestamp;

/// The sign-in cookie's name.
pub const COOKIE: &str = "xfer_session";
/// How long a sign-in lasts.
pub const SIGN_IN_MS: u64 = 8 * 3_600_000;
/// SignIns kept at most: past it, the oldest go first.
const SIGN_INS_MAX: usize = 10_000;

/// One signed-in browser.
#[derive(Clone, Debug)]
pub struct SignIn {
    /// What its token may do.
    pub scope: Scope,
    /// The token its forms must send back.
    pub csrf: String,
    /// When it ends.
    pub expires: Timestamp,
    /// What the last action did, shown once on the next page.
    pub flash: Option<String>,
}

/// Every sign-in, by id.
#[derive(Default)]
pub struct SignIns {
    map: Mutex<HashMap<String, SignIn>>,
}

/// `n` random bytes as hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl SignIns {
    /// A new sign-in of `scope` from `now`: its id.
    pub fn open(&self, scope: Scope, now: Timestamp) -> String {
        let id = random_hex(32);
        let mut map = self.map.lock().expect("not poisoned");
        map.retain(|_, s| s.expires > now);
        if map.len() >= SIGN_INS_MAX {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            id.clone(),
            SignIn {
                scope,
                csrf: random_hex(32),
                expires: Timestamp(now.as_ms() + SIGN_IN_MS),
                flash: None,
            },
        );
        id
    }

    /// The live sign-in `id`, taking its flash message.
    pub fn get(&self, id: &str, now: Timestamp) -> Option<SignIn> {
        let mut map = self.map.lock().expect("not poisoned");
        match map.get_mut(id) {
            Some(s) if s.expires > now => {
                let out = s.clone();
                s.flash = None;
                Some(out)
            }
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// Leaves `text` for sign-in `id`'s next page.
    pub fn flash(&self, id: &str, text: String) {
        if let Some(s) = self.map.lock().expect("not poisoned").get_mut(id) {
            s.flash = Some(text);
        }
    }

    /// Ends sign-in `id`.
    pub fn close(&self, id: &str) {
        self.map.lock().expect("not poisoned").remove(id);
    }
}

/// The sign-in id in a `Cookie` header, if any.
pub fn cookie_id(header: Option<&str>) -> Option<String> {
    header?
        .split(';')
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// Compares two secrets in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_lives_until_it_expires_or_closes_and_its_flash_shows_once() {
        let s = SignIns::default();
        let id = s.open(Scope::Read, Timestamp(1_000));
        assert_eq!(id.len(), 64);
        let got = s.get(&id, Timestamp(2_000)).expect("live");
        assert_eq!(got.scope, Scope::Read);
        s.flash(&id, "done".into());
        assert_eq!(
            s.get(&id, Timestamp(2_000)).unwrap().flash.as_deref(),
            Some("done")
        );
        assert_eq!(s.get(&id, Timestamp(2_000)).unwrap().flash, None);
        assert!(
            s.get(&id, Timestamp(1_000 + SIGN_IN_MS)).is_none(),
            "expired"
        );
        let other = s.open(Scope::Admin, Timestamp(1_000));
        s.close(&other);
        assert!(s.get(&other, Timestamp(1_000)).is_none(), "closed");
        assert!(s.get("nope", Timestamp(1_000)).is_none());
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(
            cookie_id(Some("a=1; xfer_session=abc; b=2")).as_deref(),
            Some("abc")
        );
        assert_eq!(cookie_id(Some("xfer_sessionx=abc")), None);
        assert_eq!(cookie_id(None), None);
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}

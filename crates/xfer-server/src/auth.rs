//! Bearer tokens with scopes. Every `/v1` endpoint needs one [`Scope`]: `read` (get and
//! list), `write` (create accounts, submit, capture, void, refund) or `admin` (close an
//! account, change a lower bound, re-drive, stuck/canceled lists, audit). `admin` grants
//! `write`, and `write` grants `read`. With no token configured auth is off, and the server
//! refuses to listen anywhere but loopback (see `config.rs`).

use crate::error::{ApiCode, ApiError};
use std::fmt;

/// The shortest token accepted: guessing one must be hopeless.
pub const TOKEN_LEN_MIN: usize = 16;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Read accounts and transfers.
    Read,
    /// Create accounts, submit and settle transfers.
    Write,
    /// Operate: close accounts, bounds, re-drive, admin lists, audit.
    Admin,
}

impl Scope {
    /// `read`, `write` or `admin`.
    pub fn parse(s: &str) -> Result<Scope, String> {
        match s {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            "admin" => Ok(Scope::Admin),
            other => Err(format!("{other:?} is not a scope (read, write, admin)")),
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One configured token.
#[derive(Clone)]
pub struct Token {
    secret: Vec<u8>,
    scopes: Vec<Scope>,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("Token")
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// A token `secret` with `scopes`.
    pub fn new(secret: &str, scopes: Vec<Scope>) -> Result<Token, String> {
        if secret.len() < TOKEN_LEN_MIN {
            return Err(format!(
                "the token is {} bytes; use at least {TOKEN_LEN_MIN}",
                secret.len()
            ));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
            return Err("a token is printable ASCII without spaces or ':'".to_string());
        }
        if scopes.is_empty() {
            return Err("a token needs at least one scope".to_string());
        }
        Ok(Token {
            secret: secret.as_bytes().to_vec(),
            scopes,
        })
    }

    /// Parses `SECRET:scope,scope`.
    pub fn parse_flag(text: &str) -> Result<Token, String> {
        let (secret, scopes) = text
            .rsplit_once(':')
            .ok_or_else(|| "expected SECRET:scope[,scope…]".to_string())?;
        let scopes = scopes
            .split(',')
            .map(Scope::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Token::new(secret, scopes)
    }

    fn grants(&self, needed: Scope) -> bool {
        self.scopes.iter().any(|s| *s >= needed)
    }
}

/// The configured tokens.
#[derive(Clone, Debug, Default)]
pub struct Tokens(Vec<Token>);

impl Tokens {
    /// These tokens.
    pub fn new(tokens: Vec<Token>) -> Tokens {
        Tokens(tokens)
    }

    /// No token: auth is off.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The widest scope the token `secret` grants (`None`: no such token), compared as
    /// [`Tokens::check`] compares.
    pub fn scope_of(&self, secret: &[u8]) -> Option<Scope> {
        let mut found: Option<&Token> = None;
        for t in &self.0 {
            if constant_time_eq(&t.secret, secret) {
                found = Some(t);
            }
        }
        found.and_then(|t| t.scopes.iter().max().copied())
    }

    /// Checks an `Authorization` header value against `needed`.
    pub fn check(&self, header: Option<&[u8]>, needed: Scope) -> Result<(), ApiError> {
        if self.is_empty() {
            return Ok(());
        }
        let presented = header.and_then(bearer).ok_or_else(|| {
            ApiError::api(
                ApiCode::Unauthorized,
                Some("authorization"),
                "send `Authorization: Bearer <token>`",
            )
        })?;
        // Compare against every token in constant time per token, so timing tells nothing
        // about which bytes matched.
        let mut found: Option<&Token> = None;
        for t in &self.0 {
            if constant_time_eq(&t.secret, presented) {
                found = Some(t);
            }
        }
        match found {
            None => Err(ApiError::api(
                ApiCode::Unauthorized,
                Some("authorization"),
                "unknown token",
            )),
            Some(t) if t.grants(needed) => Ok(()),
            Some(_) => Err(ApiError::api(
                ApiCode::Forbidden,
                None,
                format!("this endpoint needs the {needed} scope"),
            )),
        }
    }
}

/// The credentials of a `Bearer` header: the scheme is case-insensitive and one or more
/// spaces follow it (RFC 9110 §11.1, RFC 6750 §2.1).
fn bearer(header: &[u8]) -> Option<&[u8]> {
    let space = header.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = header.split_at(space);
    let token = rest.trim_ascii_start();
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty()).then_some(token)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_unknown_tokens_are_refused() {
        let tokens = Tokens::new(vec![
            Token::parse_flag("reader-0123456789:read").unwrap(),
            Token::parse_flag("writer-0123456789:write").unwrap(),
        ]);
        let check = |h: Option<&str>, s| tokens.check(h.map(str::as_bytes), s).map_err(|e| e.code);
        assert_eq!(check(Some("Bearer reader-0123456789"), Scope::Read), Ok(()));
        assert_eq!(
            check(Some("Bearer reader-0123456789"), Scope::Write),
            Err("forbidden")
        );
        assert_eq!(check(Some("Bearer writer-0123456789"), Scope::Read), Ok(()));
        assert_eq!(
            check(Some("Bearer writer-0123456789"), Scope::Admin),
            Err("forbidden")
        );
        assert_eq!(check(Some("Bearer nope"), Scope::Read), Err("unauthorized"));
        // The scheme is case-insensitive, and more than one space may follow it.
        for h in [
            "bearer reader-0123456789",
            "BEARER reader-0123456789",
            "Bearer  reader-0123456789",
        ] {
            assert_eq!(check(Some(h), Scope::Read), Ok(()), "{h}");
        }
        for h in [
            "Basic reader-0123456789",
            "Bearer",
            "Bearer ",
            "Bearerreader-0123456789",
            "reader-0123456789",
        ] {
            assert_eq!(check(Some(h), Scope::Read), Err("unauthorized"), "{h}");
        }
        assert_eq!(check(None, Scope::Read), Err("unauthorized"));
        assert_eq!(Tokens::default().check(None, Scope::Admin), Ok(()));
    }

    #[test]
    fn weak_tokens_are_refused() {
        assert!(Token::parse_flag("short:read").is_err());
        assert!(Token::parse_flag("0123456789abcdef").is_err());
        assert!(Token::parse_flag("0123456789abcdef:root").is_err());
    }
}

//! The JSON web token runguard sends to slurmrestd (`X-SLURM-USER-TOKEN`), from where the site keeps
//! it: an environment variable or a file that a cron job or a credential helper rewrites with a fresh
//! `scontrol token`. Tokens expire (`scontrol token lifespan=...`), so the source is read again when
//! the token runs out and whenever slurmrestd turns it away; a file is always current, a variable
//! only as current as the environment runguard was started with.
//!
//! The expiry is the `exp` claim of the token's payload, read without checking the signature: only
//! Slurm can check it, runguard only needs to know when to look for a new one.

use std::fmt;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

/// Read the source again this long before the token's `exp`, so that no request leaves with a token
/// that expires on its way.
const EXPIRY_MARGIN_SECS: i64 = 30;

/// Where the token comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// No token: rest_auth/local on a unix socket, or a site where slurmrestd needs none.
    None,
    /// This value, for the life of the client (it cannot be renewed).
    Fixed(String),
    /// The environment variable of this name (`SLURM_JWT`, as `scontrol token` prints it).
    Env(String),
    /// A file holding the token, alone or as `SLURM_JWT=...` (the line `scontrol token` prints).
    File(PathBuf),
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::None => f.write_str("None"),
            TokenSource::Fixed(_) => f.write_str("Fixed(<redacted>)"),
            TokenSource::Env(name) => write!(f, "Env({name:?})"),
            TokenSource::File(path) => write!(f, "File({path:?})"),
        }
    }
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::None => f.write_str("no token"),
            TokenSource::Fixed(_) => f.write_str("the token runguard was given"),
            TokenSource::Env(name) => write!(f, "the token in ${name}"),
            TokenSource::File(path) => write!(f, "the token in {}", path.display()),
        }
    }
}

/// Why the source gave no token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("${0} is not set")]
    Unset(String),
    #[error("cannot read the token file {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("the token file {0} is empty")]
    Empty(PathBuf),
}

impl TokenSource {
    /// Reads the token now.
    pub fn read(&self) -> Result<Option<String>, TokenError> {
        match self {
            TokenSource::None => Ok(None),
            TokenSource::Fixed(token) => Ok(Some(token.clone())),
            TokenSource::Env(name) => match std::env::var(name) {
                Ok(value) if !value.trim().is_empty() => Ok(Some(token_text(&value))),
                _ => Err(TokenError::Unset(name.clone())),
            },
            TokenSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|err| TokenError::Unreadable {
                    path: path.clone(),
                    message: err.to_string(),
                })?;
                let token = token_text(&text);
                if token.is_empty() {
                    return Err(TokenError::Empty(path.clone()));
                }
                Ok(Some(token))
            }
        }
    }

    /// Whether reading again can give another token.
    pub fn renewable(&self) -> bool {
        matches!(self, TokenSource::Env(_) | TokenSource::File(_))
    }
}

/// The token in what a file or variable holds: surrounding blanks and a `SLURM_JWT=` prefix dropped.
fn token_text(text: &str) -> String {
    let text = text.trim();
    let text = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'))
        .unwrap_or("");
    text.strip_prefix("SLURM_JWT=")
        .unwrap_or(text)
        .trim()
        .to_string()
}

/// What runguard reads in a token without verifying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claims {
    /// A JWT whose payload has this `exp`.
    Expires(DateTime<Utc>),
    /// A JWT without an `exp` claim (it never expires as far as runguard can tell).
    NoExpiry,
    /// Not three base64url parts with a JSON payload: Slurm will refuse it.
    NotAJwt,
}

impl Claims {
    /// Reads the payload of `token` (the part between the two dots).
    pub fn of(token: &str) -> Self {
        let mut parts = token.split('.');
        let (Some(_header), Some(payload), Some(_signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Claims::NotAJwt;
        };
        // Some encoders pad; base64url proper does not.
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')) else {
            return Claims::NotAJwt;
        };
        let Ok(Value::Object(payload)) = serde_json::from_slice::<Value>(&bytes) else {
            return Claims::NotAJwt;
        };
        match payload.get("exp").and_then(Value::as_i64) {
            Some(exp) => DateTime::from_timestamp(exp, 0).map_or(Claims::NotAJwt, Claims::Expires),
            None => Claims::NoExpiry,
        }
    }

    /// Whether the token is past (or within the margin of) its expiry at `now`.
    pub fn expired_at(self, now: DateTime<Utc>) -> bool {
        match self {
            Claims::Expires(exp) => now + TimeDelta::seconds(EXPIRY_MARGIN_SECS) >= exp,
            Claims::NoExpiry | Claims::NotAJwt => false,
        }
    }
}

/// The token last read from a source, and when to read it again.
#[derive(Clone)]
pub struct TokenCache {
    source: TokenSource,
    current: Option<(String, Claims)>,
    /// Why the last read gave nothing.
    failure: Option<TokenError>,
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCache")
            .field("source", &self.source)
            .field("claims", &self.current.as_ref().map(|(_, claims)| claims))
            .field("failure", &self.failure)
            .finish()
    }
}

impl TokenCache {
    pub fn new(source: TokenSource) -> Self {
        Self {
            source,
            current: None,
            failure: None,
        }
    }

    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// The token to send at `now`: the one read before while it lasts, else a fresh read.
    pub fn token_at(&mut self, now: DateTime<Utc>) -> Option<String> {
        let stale = match &self.current {
            None => true,
            Some((_, claims)) => self.source.renewable() && claims.expired_at(now),
        };
        if stale {
            self.reread();
        }
        self.current.as_ref().map(|(token, _)| token.clone())
    }

    /// Reads the source again; whether the token changed.
    pub fn reread(&mut self) -> bool {
        let before = self.current.as_ref().map(|(token, _)| token.clone());
        match self.source.read() {
            Ok(Some(token)) => {
                let claims = Claims::of(&token);
                self.current = Some((token, claims));
                self.failure = None;
            }
            Ok(None) => {
                self.current = None;
                self.failure = None;
            }
            Err(err) => {
                self.current = None;
                self.failure = Some(err);
            }
        }
        let after = self.current.as_ref().map(|(token, _)| token.as_str());
        before.as_deref() != after
    }

    /// What is wrong with the token at `now`, in words for a credential error; `None` when nothing
    /// runguard can see is wrong (Slurm may still refuse it: a wrong key, a revoked user).
    pub fn fault_at(&self, now: DateTime<Utc>) -> Option<String> {
        if let Some(failure) = &self.failure {
            return Some(failure.to_string());
        }
        let (_, claims) = self.current.as_ref()?;
        match claims {
            Claims::NotAJwt => Some(format!(
                "{} is not a JSON web token (three base64url parts)",
                self.source
            )),
            Claims::Expires(exp) if *exp <= now => Some(format!(
                "{} expired at {}",
                self.source,
                exp.format("%Y-%m-%d %H:%M:%S UTC")
            )),
            _ => None,
        }
    }

    /// The current token's value, to keep it out of messages.
    pub fn secret(&self) -> Option<&str> {
        self.current.as_ref().map(|(token, _)| token.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token as `scontrol token username=nobody lifespan=60` printed it on Slurm 22.05.8 (the key it
    /// was signed with was thrown away): `{"exp":1795473376,"iat":1795473316,"sun":"nobody"}`.
    const MINTED: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3OTU0NzMzNzYsImlhdCI6MTc5NTQ3MzMxNiwic3VuIjoibm9ib2R5In0.KO-aJUZfBDWO-a4UFT8B4mSEDIo1wd09ik2S0ZrRcNY";

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    #[test]
    fn the_expiry_is_read_from_the_payload_without_the_key() {
        assert_eq!(Claims::of(MINTED), Claims::Expires(at(1_795_473_376)));
        assert!(!Claims::of(MINTED).expired_at(at(1_795_473_316)));
        // Within the margin counts as expired: the next request would arrive too late.
        assert!(Claims::of(MINTED).expired_at(at(1_795_473_376 - 10)));
        assert_eq!(Claims::of("garbage"), Claims::NotAJwt);
        assert_eq!(Claims::of("a.!!!.c"), Claims::NotAJwt);
        let no_exp = format!("x.{}.y", URL_SAFE_NO_PAD.encode(br#"{"sun":"nobody"}"#));
        assert_eq!(Claims::of(&no_exp), Claims::NoExpiry);
    }

    #[test]
    fn a_token_file_may_hold_what_scontrol_token_prints() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwt");
        std::fs::write(&path, format!("SLURM_JWT={MINTED}\n")).unwrap();
        let source = TokenSource::File(path.clone());
        assert_eq!(source.read().unwrap().as_deref(), Some(MINTED));
        std::fs::write(&path, "\n  \n").unwrap();
        assert_eq!(source.read(), Err(TokenError::Empty(path.clone())));
        let missing = TokenSource::File(dir.path().join("none"));
        assert!(matches!(missing.read(), Err(TokenError::Unreadable { .. })));
    }

    #[test]
    fn an_expired_token_is_read_again_and_a_fresh_one_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwt");
        std::fs::write(&path, MINTED).unwrap();
        let mut cache = TokenCache::new(TokenSource::File(path.clone()));
        let before = at(1_795_473_316);
        assert_eq!(cache.token_at(before).as_deref(), Some(MINTED));

        // Rewritten while the old one still lasts: not read until it runs out (or Slurm refuses it).
        let fresh = format!(
            "h.{}.s",
            URL_SAFE_NO_PAD.encode(br#"{"exp":1795480000,"sun":"nobody"}"#)
        );
        std::fs::write(&path, &fresh).unwrap();
        assert_eq!(cache.token_at(before).as_deref(), Some(MINTED));
        let after = at(1_795_473_400);
        assert_eq!(cache.token_at(after).as_deref(), Some(fresh.as_str()));
        assert_eq!(cache.fault_at(after), None);
    }

    #[test]
    fn what_is_wrong_with_a_token_is_said_without_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwt");
        std::fs::write(&path, MINTED).unwrap();
        let mut cache = TokenCache::new(TokenSource::File(path.clone()));
        let late = at(1_795_473_400);
        cache.token_at(late);
        let fault = cache.fault_at(late).unwrap();
        assert!(fault.contains("expired at 2026-11-23 "), "{fault}");
        assert!(!fault.contains(MINTED));

        std::fs::write(&path, "not-a-token").unwrap();
        assert!(cache.reread());
        let fault = cache.fault_at(late).unwrap();
        assert!(fault.contains("is not a JSON web token"), "{fault}");

        std::fs::remove_file(&path).unwrap();
        assert!(cache.reread());
        assert_eq!(cache.token_at(late), None);
        assert!(cache.fault_at(late).unwrap().contains("cannot read"));
        assert!(!format!("{cache:?}").contains(MINTED));
        assert_eq!(
            format!("{:?}", TokenSource::Fixed(MINTED.into())),
            "Fixed(<redacted>)"
        );
    }
}

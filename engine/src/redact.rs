//! Keeps secrets (webhook URLs, tokens, passwords) out of everything runguard prints, stores as a
//! message, or sends to a third party: log lines, error messages, alert bodies, narrative prompts.
//!
//! Two layers: the secrets runguard itself was given (config values and environment variables it read)
//! are replaced wherever they appear, and text that looks like a credential (`token=…`, `Bearer …`,
//! passwords in URLs, Slack hook paths) is masked even when runguard never knew the value.

use std::sync::LazyLock;

use regex::Regex;

/// What a secret is replaced with.
pub const MASK: &str = "[redacted]";

/// Known secret values shorter than this are not masked on their own: masking "a" or "x1" would
/// garble ordinary text and protect nothing.
const SHORTEST_SECRET: usize = 6;

/// `key=value` / `key: value` pairs whose key names a credential.
static CREDENTIAL_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b([\w.-]*?(?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd|pwd|authorization))(["']?\s*[:=]\s*["']?)([^\s"',;&]+)"#,
    )
    .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
});

/// `Bearer <token>` and `Basic <credentials>` as sent in an Authorization header.
static AUTH_SCHEME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer|basic)\s+([A-Za-z0-9._~+/=-]{8,})")
        .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
});

/// The password of `scheme://user:password@host`.
static URL_PASSWORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)@")
        .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
});

/// Webhook URLs whose path is the secret (Slack, Discord, Mattermost-style hooks).
static HOOK_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(https?://[^/\s]*(?:hooks?|webhooks?)[^/\s]*/|https?://[^/\s]+/(?:services|hooks|webhooks|api/webhooks)/)[^\s\x22']+")
        .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
});

/// Masks known secrets and anything shaped like a credential.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so that a secret containing another is masked whole.
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|secret| secret.chars().count() >= SHORTEST_SECRET)
            .collect();
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets.dedup();
        Self { secrets }
    }

    /// Adds a secret learnt later (a token read from the environment, say).
    pub fn add(&mut self, secret: &str) {
        if secret.chars().count() >= SHORTEST_SECRET && !self.secrets.iter().any(|s| s == secret) {
            self.secrets.push(secret.to_string());
            self.secrets
                .sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        }
    }

    /// `text` with every known secret and every credential-shaped part replaced by [`MASK`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        redact_patterns(&out)
    }
}

/// Masks what looks like a credential, without any known secret.
pub fn redact_patterns(text: &str) -> String {
    let text = HOOK_PATH.replace_all(text, format!("${{1}}{MASK}"));
    let text = URL_PASSWORD.replace_all(&text, format!("${{1}}{MASK}@"));
    let text = AUTH_SCHEME.replace_all(&text, format!("${{1}} {MASK}"));
    CREDENTIAL_PAIR
        .replace_all(&text, format!("${{1}}${{2}}{MASK}"))
        .into_owned()
}

/// A URL reduced to what can be shown: its scheme, host and port; the path and query (where
/// webhook secrets live) are masked.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return MASK.to_string();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // user:password@ is dropped whole.
    let host = authority.rsplit('@').next().unwrap_or_default();
    if rest.len() > authority.len() {
        format!("{scheme}://{host}/{MASK}")
    } else {
        format!("{scheme}://{host}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_secrets_are_masked_wherever_they_appear() {
        let redactor = Redactor::new(["s3cr3t-token-value".to_string(), "ab".to_string()]);
        assert_eq!(
            redactor.redact("sending with s3cr3t-token-value failed; ab stays"),
            "sending with [redacted] failed; ab stays"
        );
    }

    #[test]
    fn a_longer_secret_containing_a_shorter_one_is_masked_whole() {
        let redactor = Redactor::new(["abcdef".to_string(), "abcdefghijkl".to_string()]);
        assert_eq!(redactor.redact("x abcdefghijkl y"), "x [redacted] y");
    }

    #[test]
    fn credential_shaped_text_is_masked_without_knowing_the_value() {
        let text = "export WANDB_API_KEY=0123abcd token: xyz987654 password='hunter22' \
                    Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig \
                    https://bot:pa55word@mail.example.com:465/x";
        let redacted = redact_patterns(text);
        for secret in [
            "0123abcd",
            "xyz987654",
            "hunter22",
            "eyJhbGciOiJIUzI1NiJ9",
            "pa55word",
        ] {
            assert!(!redacted.contains(secret), "{secret} in {redacted}");
        }
        assert!(redacted.contains("mail.example.com"), "{redacted}");
    }

    #[test]
    fn webhook_paths_are_masked() {
        let redacted =
            redact_patterns("POST https://hooks.slack.com/services/T000/B000/XXXXXXXX failed: 404");
        assert_eq!(
            redacted,
            "POST https://hooks.slack.com/[redacted] failed: 404"
        );
    }

    #[test]
    fn a_url_shows_only_its_host() {
        assert_eq!(
            redact_url("https://hooks.slack.com/services/T0/B0/abc?x=1"),
            "https://hooks.slack.com/[redacted]"
        );
        assert_eq!(
            redact_url("http://user:pw@127.0.0.1:8080"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(redact_url("not a url"), MASK);
    }

    #[test]
    fn ordinary_log_lines_are_left_alone() {
        let line =
            "iteration 120/1000 | consumed samples: 960 | elapsed time per iteration (ms): 812.3";
        assert_eq!(redact_patterns(line), line);
        assert_eq!(Redactor::new(Vec::new()).redact(line), line);
    }
}

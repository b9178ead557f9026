//! The `[alerts]` section: where alerts go, which ones, and how hard delivery tries.

use serde::{Deserialize, Serialize};

use crate::model::{AlertEvent, Severity};

/// How alerts are delivered; channels are listed as `[[alerts.channels]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// The same alert (channel, event, workflow and title) again within this window is not sent again.
    pub dedupe_window_secs: u64,
    /// At most this many alerts per channel within `rate_window_secs`. Beyond it, info and warning
    /// alerts are dropped (and counted); critical ones wait for room.
    pub rate_limit: u32,
    pub rate_window_secs: u64,
    /// The first retry of a failed delivery waits this long; each next one twice as long, up to
    /// `retry_max_secs`.
    pub retry_initial_secs: u64,
    pub retry_max_secs: u64,
    /// A delivery is given up after this many tries.
    pub max_attempts: u32,
    /// One try of one delivery gives up after this long.
    pub timeout_secs: u64,
    /// When the headless engine stops, undelivered alerts get this long to go out; what is still
    /// undelivered then stays in the store for the next start.
    pub flush_on_exit_secs: u64,
    pub channels: Vec<ChannelConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            dedupe_window_secs: 600,
            rate_limit: 30,
            rate_window_secs: 3600,
            retry_initial_secs: 5,
            retry_max_secs: 600,
            max_attempts: 10,
            timeout_secs: 10,
            flush_on_exit_secs: 5,
            channels: Vec::new(),
        }
    }
}

/// The kinds of channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// The alert as a JSON object, POSTed to `url`.
    Webhook,
    /// A Slack-compatible incoming webhook (`text` and `blocks`), POSTed to `url`.
    Slack,
    /// Mail over SMTP.
    Email,
    /// A program run with `argv` (never through a shell), the alert as JSON on its stdin.
    Command,
}

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpSecurity {
    /// Plain SMTP (a relay on the same host or a trusted network).
    None,
    /// Plain connection upgraded with STARTTLS (port 587).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
}

/// One alert channel. Secrets come from the file or, better, from the environment (`*_env` names the
/// variable); either way they are redacted wherever runguard prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// Shown in logs and `runguard alerts`; unique.
    pub name: String,
    pub kind: ChannelKind,
    /// Only these events (empty: every event but `notice`).
    #[serde(default)]
    pub events: Vec<AlertEvent>,
    /// Only workflows whose name contains one of these (empty: all).
    #[serde(default)]
    pub workflows: Vec<String>,
    /// Only alerts at least this severe.
    #[serde(default = "default_min_severity")]
    pub min_severity: Severity,
    /// Webhook and Slack: the URL, or the variable holding it.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub url_env: Option<String>,
    /// Webhook: a bearer token sent as `Authorization`, from this variable.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Email.
    #[serde(default)]
    pub smtp_host: Option<String>,
    #[serde(default)]
    pub smtp_port: Option<u16>,
    #[serde(default)]
    pub smtp_security: SmtpSecurity,
    #[serde(default)]
    pub smtp_user: Option<String>,
    #[serde(default)]
    pub smtp_password: Option<String>,
    #[serde(default)]
    pub smtp_password_env: Option<String>,
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub to: Vec<String>,
    /// Command: the program and its arguments; `{event}`, `{severity}`, `{workflow}`, `{title}` in an
    /// argument are replaced by the alert's values (each argument stays one argument).
    #[serde(default)]
    pub argv: Vec<String>,
}

fn default_min_severity() -> Severity {
    Severity::Info
}

impl ChannelConfig {
    /// The config's own mistakes, found before anything is sent.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if name.trim().is_empty() {
            return Err("a channel needs a name".to_string());
        }
        match self.kind {
            ChannelKind::Webhook | ChannelKind::Slack => {
                if self.url.is_none() && self.url_env.is_none() {
                    return Err(format!("channel {name}: needs url or url_env"));
                }
                if let Some(url) = &self.url
                    && !(url.starts_with("http://") || url.starts_with("https://"))
                {
                    return Err(format!(
                        "channel {name}: url must start with http:// or https://"
                    ));
                }
            }
            ChannelKind::Email => {
                if self.smtp_host.is_none() {
                    return Err(format!("channel {name}: needs smtp_host"));
                }
                if self.from.is_none() || self.to.is_empty() {
                    return Err(format!("channel {name}: needs from and at least one to"));
                }
            }
            ChannelKind::Command => {
                if self.argv.is_empty() {
                    return Err(format!("channel {name}: needs argv (the program first)"));
                }
            }
        }
        Ok(())
    }

    /// Whether an alert passes this channel's filter.
    pub fn wants(&self, event: AlertEvent, severity: Severity, workflow: Option<&str>) -> bool {
        let event_ok = if self.events.is_empty() {
            event != AlertEvent::Notice
        } else {
            self.events.contains(&event)
        };
        let workflow_ok = self.workflows.is_empty()
            || workflow
                .is_some_and(|name| self.workflows.iter().any(|w| name.contains(w.as_str())));
        event_ok && workflow_ok && severity >= self.min_severity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(toml_text: &str) -> ChannelConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_channel_filters_by_event_severity_and_workflow() {
        let slack = channel(
            r#"name = "team"
kind = "slack"
url_env = "HOOK"
events = ["failure", "stopped"]
workflows = ["llama"]
min_severity = "warning""#,
        );
        assert!(slack.wants(AlertEvent::Failure, Severity::Critical, Some("llama-70b")));
        assert!(!slack.wants(AlertEvent::Recovered, Severity::Critical, Some("llama-70b")));
        assert!(!slack.wants(AlertEvent::Failure, Severity::Info, Some("llama-70b")));
        assert!(!slack.wants(AlertEvent::Failure, Severity::Critical, Some("gpt-small")));
        assert!(!slack.wants(AlertEvent::Failure, Severity::Critical, None));
    }

    #[test]
    fn without_an_event_list_everything_but_notices_goes() {
        let all = channel("name = \"all\"\nkind = \"command\"\nargv = [\"true\"]");
        assert!(all.wants(AlertEvent::Recovered, Severity::Info, None));
        assert!(!all.wants(AlertEvent::Notice, Severity::Info, None));
    }

    #[test]
    fn a_channel_missing_what_it_needs_is_named() {
        let err = channel("name = \"mail\"\nkind = \"email\"\nsmtp_host = \"localhost\"")
            .validate()
            .unwrap_err();
        assert!(err.contains("mail") && err.contains("from"), "{err}");
        let err = channel("name = \"hook\"\nkind = \"webhook\"\nurl = \"ftp://x\"")
            .validate()
            .unwrap_err();
        assert!(err.contains("http"), "{err}");
    }
}

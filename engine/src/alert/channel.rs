//! The channels an alert can go out on: a JSON webhook, a Slack-compatible webhook, mail over SMTP,
//! and a user's command run as argv. Each try ends within its timeout, succeeded, failed for now
//! (tried again later) or refused for good.

use std::process::Stdio;
use std::time::Duration;

use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::AlertError;
use super::config::{ChannelConfig, ChannelKind, SmtpSecurity};
use super::payload::Alert;
use crate::redact::{Redactor, redact_url};

/// Slack refuses a section text longer than 3000 characters.
const SLACK_SECTION_CHARS: usize = 2900;
/// Slack refuses a header longer than 150 characters.
const SLACK_HEADER_CHARS: usize = 150;
/// How much of a failing command's stderr is kept in the error.
const STDERR_TAIL_BYTES: usize = 400;

/// Why a try failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Worth another try later (down, slow, overloaded, rate limited by the receiver).
    Transient(String),
    /// Trying again cannot help (the receiver refused the request, the program does not exist).
    Permanent(String),
}

impl SendError {
    pub fn message(&self) -> &str {
        match self {
            Self::Transient(message) | Self::Permanent(message) => message,
        }
    }
}

/// The header of a webhook request naming the alert it carries, the same on every try of it.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// The key of alert `alert_id` on `channel`: one per delivery, stable across retries and restarts.
pub fn idempotency_key(channel: &str, alert_id: i64) -> String {
    format!("runguard-{channel}-{alert_id}")
}

enum Target {
    Webhook {
        url: String,
        token: Option<String>,
        slack: bool,
        client: reqwest::Client,
    },
    Email {
        transport: Box<AsyncSmtpTransport<Tokio1Executor>>,
        from: Mailbox,
        to: Vec<Mailbox>,
    },
    Command {
        argv: Vec<String>,
    },
}

/// A channel ready to send: its secrets read, its client built.
pub struct Channel {
    pub config: ChannelConfig,
    target: Target,
    timeout: Duration,
}

impl Channel {
    /// Resolves the channel's secrets (config or environment) and adds them to `redactor`.
    pub fn resolve(
        config: &ChannelConfig,
        timeout: Duration,
        redactor: &mut Redactor,
    ) -> Result<Self, AlertError> {
        let name = config.name.clone();
        let secret = |value: &Option<String>,
                      env: &Option<String>,
                      what: &str|
         -> Result<Option<String>, AlertError> {
            if let Some(value) = value {
                return Ok(Some(value.clone()));
            }
            let Some(variable) = env else {
                return Ok(None);
            };
            match std::env::var(variable) {
                Ok(value) if !value.is_empty() => Ok(Some(value)),
                _ => Err(AlertError::Channel {
                    channel: name.clone(),
                    message: format!("{what} is to come from ${variable}, which is not set"),
                }),
            }
        };
        let target = match config.kind {
            ChannelKind::Webhook | ChannelKind::Slack => {
                let url = secret(&config.url, &config.url_env, "the URL")?.ok_or_else(|| {
                    AlertError::Channel {
                        channel: name.clone(),
                        message: "needs url or url_env".to_string(),
                    }
                })?;
                redactor.add(&url);
                let token = secret(&None, &config.token_env, "the token")?;
                if let Some(token) = &token {
                    redactor.add(token);
                }
                let client = crate::http::client_builder()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .build()
                    .map_err(|err| AlertError::Channel {
                        channel: name.clone(),
                        message: format!("HTTP client: {}", err.without_url()),
                    })?;
                Target::Webhook {
                    url,
                    token,
                    slack: config.kind == ChannelKind::Slack,
                    client,
                }
            }
            ChannelKind::Email => {
                let invalid = |message: String| AlertError::Channel {
                    channel: name.clone(),
                    message,
                };
                let host = config
                    .smtp_host
                    .clone()
                    .ok_or_else(|| invalid("needs smtp_host".to_string()))?;
                let password = secret(
                    &config.smtp_password,
                    &config.smtp_password_env,
                    "the SMTP password",
                )?;
                if let Some(password) = &password {
                    redactor.add(password);
                }
                crate::http::install_tls_provider();
                let mut builder = match config.smtp_security {
                    SmtpSecurity::None => {
                        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&host)
                    }
                    SmtpSecurity::Starttls => {
                        AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&host)
                            .map_err(|err| invalid(format!("smtp_host {host}: {err}")))?
                    }
                    SmtpSecurity::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&host)
                        .map_err(|err| invalid(format!("smtp_host {host}: {err}")))?,
                };
                if let Some(port) = config.smtp_port {
                    builder = builder.port(port);
                }
                if let Some(user) = &config.smtp_user {
                    builder = builder
                        .credentials(Credentials::new(user.clone(), password.unwrap_or_default()));
                }
                let transport = builder.timeout(Some(timeout)).build();
                let mailbox = |address: &str| {
                    address
                        .parse::<Mailbox>()
                        .map_err(|err| invalid(format!("address {address:?}: {err}")))
                };
                let from = mailbox(config.from.as_deref().unwrap_or_default())?;
                let to = config
                    .to
                    .iter()
                    .map(|address| mailbox(address))
                    .collect::<Result<Vec<_>, _>>()?;
                Target::Email {
                    transport: Box::new(transport),
                    from,
                    to,
                }
            }
            ChannelKind::Command => {
                if config.argv.is_empty() {
                    return Err(AlertError::Channel {
                        channel: name,
                        message: "needs argv".to_string(),
                    });
                }
                Target::Command {
                    argv: config.argv.clone(),
                }
            }
        };
        Ok(Self {
            config: config.clone(),
            target,
            timeout,
        })
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Where the channel sends, fit to print (no secret).
    pub fn describe(&self) -> String {
        match &self.target {
            Target::Webhook { url, slack, .. } => format!(
                "{} {}",
                if *slack { "slack" } else { "webhook" },
                redact_url(url)
            ),
            Target::Email { to, .. } => format!(
                "email via {} to {}",
                self.config.smtp_host.as_deref().unwrap_or_default(),
                to.iter()
                    .map(|mailbox| mailbox.email.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Target::Command { argv } => format!("command {}", argv[0]),
        }
    }

    /// One try; the message of an error may hold secrets until the caller redacts it.
    pub async fn send(&self, alert: &Alert) -> Result<String, SendError> {
        match &self.target {
            Target::Webhook {
                url,
                token,
                slack,
                client,
            } => {
                let body = if *slack {
                    slack_message(alert)
                } else {
                    serde_json::to_value(alert)
                        .map_err(|err| SendError::Permanent(format!("encoding the alert: {err}")))?
                };
                // A crash between a send and its record sends again after the restart: the same key
                // both times lets the receiver keep one.
                let mut request = client
                    .post(url)
                    .header(IDEMPOTENCY_HEADER, idempotency_key(self.name(), alert.id))
                    .json(&body);
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|err| SendError::Transient(describe_http_error(err, self.timeout)))?;
                let status = response.status();
                if status.is_success() {
                    return Ok(format!("HTTP {}", status.as_u16()));
                }
                let text = response.text().await.unwrap_or_default();
                let message = format!(
                    "HTTP {}: {}",
                    status.as_u16(),
                    text.chars().take(200).collect::<String>().trim()
                );
                if status.is_server_error()
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT
                {
                    Err(SendError::Transient(message))
                } else {
                    Err(SendError::Permanent(message))
                }
            }
            Target::Email {
                transport,
                from,
                to,
            } => {
                let mut message = Message::builder()
                    .from(from.clone())
                    .subject(single_line(&format!("[runguard] {}", alert.title)));
                for mailbox in to {
                    message = message.to(mailbox.clone());
                }
                let message = message
                    .header(ContentType::TEXT_PLAIN)
                    .body(alert.text())
                    .map_err(|err| SendError::Permanent(format!("building the mail: {err}")))?;
                // lettre's own timeout covers each SMTP step; this bounds the whole exchange.
                match tokio::time::timeout(self.timeout * 2, transport.send(message)).await {
                    Ok(Ok(response)) => Ok(format!("SMTP {}", response.code())),
                    Ok(Err(err)) if err.is_permanent() => {
                        Err(SendError::Permanent(format!("SMTP: {err}")))
                    }
                    Ok(Err(err)) => Err(SendError::Transient(format!("SMTP: {err}"))),
                    Err(_) => Err(SendError::Transient(format!(
                        "SMTP: no answer within {} s",
                        (self.timeout * 2).as_secs()
                    ))),
                }
            }
            Target::Command { argv } => self.run_command(argv, alert).await,
        }
    }

    async fn run_command(&self, argv: &[String], alert: &Alert) -> Result<String, SendError> {
        let workflow = alert
            .workflow
            .as_ref()
            .map(|w| w.name.clone())
            .unwrap_or_default();
        let fill = |arg: &str| {
            arg.replace("{event}", alert.event.as_str())
                .replace("{severity}", alert.severity.as_str())
                .replace("{workflow}", &workflow)
                .replace("{title}", &alert.title)
        };
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(argv[1..].iter().map(|arg| fill(arg)))
            .env("RUNGUARD_ALERT_EVENT", alert.event.as_str())
            .env("RUNGUARD_ALERT_SEVERITY", alert.severity.as_str())
            .env("RUNGUARD_ALERT_TITLE", &alert.title)
            .env("RUNGUARD_ALERT_WORKFLOW", &workflow)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|err| SendError::Permanent(format!("cannot run {}: {err}", argv[0])))?;
        let payload = serde_json::to_vec(alert)
            .map_err(|err| SendError::Permanent(format!("encoding the alert: {err}")))?;
        let run = async {
            if let Some(mut stdin) = child.stdin.take() {
                // A program that does not read its input is fine.
                let _ = stdin.write_all(&payload).await;
                drop(stdin);
            }
            child.wait_with_output().await
        };
        match tokio::time::timeout(self.timeout, run).await {
            Ok(Ok(output)) if output.status.success() => Ok(format!("{} exited 0", argv[0])),
            Ok(Ok(output)) => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let tail: String = stderr
                    .chars()
                    .rev()
                    .take(STDERR_TAIL_BYTES)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                Err(SendError::Transient(format!(
                    "{} {}: {}",
                    argv[0],
                    output.status,
                    tail.trim()
                )))
            }
            Ok(Err(err)) => Err(SendError::Transient(format!("{}: {err}", argv[0]))),
            // The child is killed when dropped with the timed-out future.
            Err(_) => Err(SendError::Transient(format!(
                "{} did not finish within {} s",
                argv[0],
                self.timeout.as_secs()
            ))),
        }
    }
}

/// A failed HTTP call in words, with its cause, and without the URL (the secret of a webhook).
fn describe_http_error(err: reqwest::Error, timeout: Duration) -> String {
    if err.is_timeout() {
        return format!("no answer within {} s", timeout.as_secs());
    }
    let what = if err.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    let err = err.without_url();
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    match causes.last() {
        Some(root) => format!("{what}: {root}"),
        None => format!("{what}: {err}"),
    }
}

/// A Slack incoming-webhook message: `text` for notifications, blocks for the channel.
fn slack_message(alert: &Alert) -> serde_json::Value {
    let text = alert.text();
    let details: String = text
        .lines()
        .skip(1)
        .collect::<Vec<_>>()
        .join("\n")
        .chars()
        .take(SLACK_SECTION_CHARS)
        .collect();
    let header: String = alert.title.chars().take(SLACK_HEADER_CHARS).collect();
    let mut blocks = vec![json!({
        "type": "header",
        "text": {"type": "plain_text", "text": header},
    })];
    if !details.trim().is_empty() {
        blocks.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": format!("```{}```", details.replace("```", "'''"))},
        }));
    }
    json!({
        "text": format!("[{}] {}", alert.severity.as_str(), alert.title),
        "blocks": blocks,
    })
}

/// A mail subject is one line.
fn single_line(text: &str) -> String {
    text.split(['\r', '\n'])
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AlertEvent, Severity};

    fn alert(title: &str) -> Alert {
        Alert {
            id: 1,
            event: AlertEvent::Stopped,
            severity: Severity::Critical,
            time: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default(),
            title: title.to_string(),
            body: "crash loop".to_string(),
            workflow: None,
            failure: None,
            attribution: None,
            actions: Vec::new(),
            see_more: Vec::new(),
        }
    }

    #[test]
    fn a_slack_message_has_text_and_bounded_blocks() {
        let message = slack_message(&alert(&"x".repeat(400)));
        assert!(
            message["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("[critical] xxx")
        );
        assert_eq!(
            message["blocks"][0]["text"]["text"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .count(),
            SLACK_HEADER_CHARS
        );
        assert!(
            message["blocks"][1]["text"]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("crash loop")
        );
    }

    #[test]
    fn a_subject_is_one_line() {
        assert_eq!(single_line("a\r\nb\nc"), "a b c");
    }

    #[test]
    fn a_channel_whose_secret_variable_is_unset_is_refused_by_name() {
        let config: ChannelConfig = toml::from_str(
            "name = \"hook\"\nkind = \"webhook\"\nurl_env = \"RUNGUARD_TEST_SURELY_UNSET_HOOK\"",
        )
        .unwrap_or_else(|err| unreachable!("{err}"));
        let err = Channel::resolve(&config, Duration::from_secs(1), &mut Redactor::default())
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("hook") && err.contains("RUNGUARD_TEST_SURELY_UNSET_HOOK"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_command_gets_the_alert_on_stdin_and_its_arguments_filled() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| unreachable!("{err}"));
        let out = dir.path().join("out");
        let config: ChannelConfig = toml::from_str(&format!(
            "name = \"cmd\"\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"cat > {}; echo \\\"$1\\\" >> {}\", \"sh\", \"{{severity}}: {{title}}\"]",
            out.display(),
            out.display()
        ))
        .unwrap_or_else(|err| unreachable!("{err}"));
        let channel = Channel::resolve(&config, Duration::from_secs(5), &mut Redactor::default())
            .unwrap_or_else(|err| unreachable!("{err}"));
        let sent = channel.send(&alert("train; rm -rf /")).await;
        assert!(sent.is_ok(), "{sent:?}");
        let written = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(written.contains("\"event\":\"stopped\""), "{written}");
        // The title stays one argument: nothing in it runs.
        assert!(
            written.ends_with("critical: train; rm -rf /\n"),
            "{written}"
        );
    }

    #[tokio::test]
    async fn a_failing_or_missing_command_is_an_error_of_the_right_kind() {
        let failing: ChannelConfig = toml::from_str(
            "name = \"f\"\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"echo boom >&2; exit 3\"]",
        )
        .unwrap_or_else(|err| unreachable!("{err}"));
        let channel = Channel::resolve(&failing, Duration::from_secs(5), &mut Redactor::default())
            .unwrap_or_else(|err| unreachable!("{err}"));
        match channel.send(&alert("t")).await {
            Err(SendError::Transient(message)) => assert!(message.contains("boom"), "{message}"),
            other => panic!("{other:?}"),
        }
        let missing: ChannelConfig =
            toml::from_str("name = \"m\"\nkind = \"command\"\nargv = [\"/nonexistent/notify\"]")
                .unwrap_or_else(|err| unreachable!("{err}"));
        let channel = Channel::resolve(&missing, Duration::from_secs(5), &mut Redactor::default())
            .unwrap_or_else(|err| unreachable!("{err}"));
        assert!(matches!(
            channel.send(&alert("t")).await,
            Err(SendError::Permanent(_))
        ));
    }

    #[tokio::test]
    async fn a_slow_command_is_stopped_at_the_timeout() {
        let slow: ChannelConfig =
            toml::from_str("name = \"s\"\nkind = \"command\"\nargv = [\"sleep\", \"30\"]")
                .unwrap_or_else(|err| unreachable!("{err}"));
        let channel = Channel::resolve(&slow, Duration::from_millis(300), &mut Redactor::default())
            .unwrap_or_else(|err| unreachable!("{err}"));
        match channel.send(&alert("t")).await {
            Err(SendError::Transient(message)) => {
                assert!(message.contains("did not finish"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}

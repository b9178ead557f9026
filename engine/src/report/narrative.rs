//! An optional narrative of each failure, written by a language model behind an OpenAI-compatible
//! chat-completions endpoint from the report's own evidence.
//!
//! The model only reads: it gets the rule-based report of one failure, with every known secret and
//! everything shaped like a credential masked and the whole cut to a bounded size, and what it writes
//! is appended to the report under [`super::NARRATIVE_LABEL`]. Nothing it says reaches a decision; the
//! engine never asks it. A timeout, an HTTP error or an answer that is not a usable narrative leaves the
//! rule-based report as it is, with the (redacted) reason. An accepted narrative is kept in the store
//! so that the cockpit shows it without the network and the endpoint is asked once per failure.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{FailureReport, NARRATIVE_LABEL, NarrativeStatus, Report};
use crate::config::NarrativeConfig;
use crate::model::Narrative;
use crate::redact::{MASK, Redactor, redact_url};
use crate::store::{Store, StoreError};

/// What the model is asked to do with the bundle.
const SYSTEM_PROMPT: &str = "You explain failures of distributed GPU training jobs to the engineers \
who run them. You are given runguard's rule-based recovery report of one failure: the evidence log \
lines, the attribution, the actions taken and not taken, and the downtime. Write a short narrative \
(at most 200 words, plain text, no headings) of what most likely happened, in what order, and what an \
engineer should check next. Use only the report, and say so when the evidence is thin or points \
elsewhere than the attribution. Do not invent log lines, nodes or commands. Secrets in the report were \
replaced by [redacted].";

/// A narrative longer than this is not a short account: something went wrong on the other side.
const MAX_NARRATIVE_CHARS: usize = 8000;

/// An answer larger than this is not read to its end.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A narrative with more than this share of control or replacement characters is not text.
const MAX_UNPRINTABLE_SHARE: f64 = 0.1;

/// Why there is no narrative this time. Shown to the user (redacted) in place of the narrative.
#[derive(Debug, thiserror::Error)]
pub enum NarrativeError {
    #[error("narrative endpoint {endpoint}: must start with http:// or https://")]
    NotHttp { endpoint: String },
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    #[error("no answer within {seconds} s")]
    Timeout { seconds: u64 },
    #[error("cannot reach the endpoint: {0}")]
    Transport(String),
    #[error("the endpoint answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the answer is larger than {limit} bytes")]
    AnswerTooLarge { limit: usize },
    #[error("the answer is not JSON: {0}")]
    NotJson(String),
    #[error("the answer has no choices[0].message.content text")]
    NoContent,
    #[error("the narrative is empty")]
    Empty,
    #[error("the narrative is {chars} characters long, more than {limit}")]
    TooLong { chars: usize, limit: usize },
    #[error("the narrative is mostly unprintable characters")]
    Unprintable,
}

impl NarrativeError {
    /// The endpoint itself failed, not one answer of it: asking again for the next failure of the same
    /// report would only make the user wait as long again.
    fn endpoint_failed(&self) -> bool {
        matches!(
            self,
            Self::NotHttp { .. }
                | Self::Client(_)
                | Self::Timeout { .. }
                | Self::Transport(_)
                | Self::Status { .. }
        )
    }
}

/// Asks the configured endpoint for narratives.
pub struct Narrator {
    endpoint: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
    max_bundle_bytes: usize,
    redactor: Redactor,
    client: reqwest::Client,
}

impl Narrator {
    /// A narrator for the `[narrative]` config, with `api_key` the value of its `api_key_env`
    /// variable (read by the caller); `None` when no endpoint is configured.
    pub fn from_config(
        config: &NarrativeConfig,
        api_key: Option<String>,
    ) -> Result<Option<Self>, NarrativeError> {
        let Some(endpoint) = config.endpoint.clone() else {
            return Ok(None);
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(NarrativeError::NotHttp {
                endpoint: redact_url(&endpoint),
            });
        }
        let api_key = api_key.filter(|key| !key.trim().is_empty());
        let mut redactor = Redactor::default();
        if let Some(key) = &api_key {
            redactor.add(key);
        }
        let timeout = Duration::from_secs(config.timeout_secs.max(1));
        let client = crate::http::client_builder()
            .timeout(timeout)
            .build()
            .map_err(|err| NarrativeError::Client(err.to_string()))?;
        Ok(Some(Self {
            endpoint,
            model: config.model.clone().unwrap_or_default(),
            api_key,
            timeout,
            max_bundle_bytes: config.max_bundle_bytes,
            redactor,
            client,
        }))
    }

    /// Which model, where: kept with each narrative. The endpoint's path is left out.
    pub fn source(&self) -> String {
        let host = redact_url(&self.endpoint);
        let host = host.trim_end_matches(&format!("/{MASK}"));
        format!("model {} at {host}", self.model)
    }

    /// `text` with the API key and anything shaped like a credential masked.
    pub fn redact(&self, text: &str) -> String {
        self.redactor.redact(text)
    }

    /// What the model reads about one failure: the rule-based report of that failure alone (with the
    /// warnings of its attempt), secrets masked, at most `max_bundle_bytes` long.
    pub fn bundle(&self, report: &Report, failure: &FailureReport) -> String {
        let mut alone = failure.clone();
        alone.narrative = None;
        let one = Report {
            generated_at: report.generated_at,
            workflow: report.workflow.clone(),
            failures: vec![alone],
            warnings: report
                .warnings
                .iter()
                .filter(|warning| warning.attempt == failure.attempt)
                .cloned()
                .collect(),
            phases: None,
        };
        bounded(
            &self.redact(&super::render::text(&one)),
            self.max_bundle_bytes,
        )
    }

    /// Sends `bundle` and returns the narrative the model wrote, redacted and stripped of control
    /// characters, or why there is none.
    pub async fn ask(&self, bundle: &str) -> Result<String, NarrativeError> {
        let body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": bundle},
            ],
            "temperature": 0,
        });
        let mut request = self.client.post(&self.endpoint).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let mut response = request.send().await.map_err(|err| self.transport(&err))?;
        let status = response.status();
        let mut answer = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| self.transport(&err))? {
            answer.extend_from_slice(&chunk);
            if answer.len() > MAX_ANSWER_BYTES {
                return Err(NarrativeError::AnswerTooLarge {
                    limit: MAX_ANSWER_BYTES,
                });
            }
        }
        if !status.is_success() {
            // Shown in a terminal: the other side's control characters stay out.
            let text = String::from_utf8_lossy(&answer);
            let body: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
            return Err(NarrativeError::Status {
                status: status.as_u16(),
                body: body.trim().to_string(),
            });
        }
        let narrative = narrative_of(&answer)?;
        Ok(self.redact(&narrative))
    }

    fn transport(&self, err: &reqwest::Error) -> NarrativeError {
        if err.is_timeout() {
            return NarrativeError::Timeout {
                seconds: self.timeout.as_secs(),
            };
        }
        // reqwest's own message is generic; the cause (connection refused, ...) is below it.
        let mut causes = vec![err.to_string()];
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        NarrativeError::Transport(causes.join(": "))
    }
}

/// `text` cut to at most `max_bytes` on a character boundary, with a marker saying it was cut.
fn bounded(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let marker = format!("\n[… cut here: the bundle is limited to {max_bytes} bytes]\n");
    let mut end = max_bytes.saturating_sub(marker.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

/// The narrative in a chat-completions answer, or why the answer is not one.
fn narrative_of(answer: &[u8]) -> Result<String, NarrativeError> {
    let value: Value =
        serde_json::from_slice(answer).map_err(|err| NarrativeError::NotJson(err.to_string()))?;
    let content = value
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or(NarrativeError::NoContent)?;
    let content = content.trim();
    if content.is_empty() {
        return Err(NarrativeError::Empty);
    }
    let chars = content.chars().count();
    if chars > MAX_NARRATIVE_CHARS {
        return Err(NarrativeError::TooLong {
            chars,
            limit: MAX_NARRATIVE_CHARS,
        });
    }
    let unprintable = content
        .chars()
        .filter(|c| (c.is_control() && *c != '\n' && *c != '\t') || *c == '\u{FFFD}')
        .count();
    if unprintable as f64 > chars as f64 * MAX_UNPRINTABLE_SHARE {
        return Err(NarrativeError::Unprintable);
    }
    // A terminal must not receive escape sequences from a third party.
    let printable: String = content
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect();
    Ok(printable.trim().to_string())
}

/// Asks for a narrative of every failure of `report` that has none yet, keeps each accepted one in the
/// store (so it is not asked for again) and puts it in the report; a failure whose narrative could not
/// be had is marked unavailable with the redacted reason. After the endpoint itself failed (timeout,
/// connection, HTTP error) the remaining failures are not asked, so a dead endpoint costs one timeout.
pub async fn complete(
    report: &mut Report,
    narrator: &Narrator,
    store: &mut Store,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let workflow_id = report.workflow.id;
    let mut endpoint_failure: Option<String> = None;
    for index in 0..report.failures.len() {
        if report.failures[index].narrative.is_some() {
            continue;
        }
        if let Some(reason) = &endpoint_failure {
            report.failures[index].narrative = Some(NarrativeStatus::Unavailable {
                reason: format!("not asked, the endpoint failed for an earlier failure: {reason}"),
            });
            continue;
        }
        let bundle = narrator.bundle(report, &report.failures[index]);
        let status = match narrator.ask(&bundle).await {
            Ok(text) => {
                let narrative = Narrative {
                    workflow_id,
                    anomaly_id: report.failures[index].anomaly_id,
                    source: narrator.source(),
                    text,
                    created_at: now,
                };
                store.write(|db| db.save_narrative(&narrative))?;
                NarrativeStatus::Written {
                    label: NARRATIVE_LABEL,
                    source: narrative.source,
                    text: narrative.text,
                    created_at: now,
                }
            }
            Err(err) => {
                let reason = narrator.redact(&err.to_string());
                if err.endpoint_failed() {
                    endpoint_failure = Some(reason.clone());
                }
                NarrativeStatus::Unavailable { reason }
            }
        };
        report.failures[index].narrative = Some(status);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{recovered_once, t};

    fn narrator(key: Option<&str>, max_bundle_bytes: usize) -> Narrator {
        let config = NarrativeConfig {
            endpoint: Some("http://127.0.0.1:9/v1/chat/completions".into()),
            model: Some("test-model".into()),
            max_bundle_bytes,
            ..NarrativeConfig::default()
        };
        Narrator::from_config(&config, key.map(str::to_string))
            .unwrap()
            .unwrap()
    }

    fn answer(content: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]
        }))
        .unwrap()
    }

    #[test]
    fn no_endpoint_means_no_narrator_and_https_is_refused_in_this_build() {
        assert!(
            Narrator::from_config(&NarrativeConfig::default(), None)
                .unwrap()
                .is_none()
        );
        let config = NarrativeConfig {
            endpoint: Some("ftp://api.example.com/v1/chat/completions".into()),
            model: Some("m".into()),
            ..NarrativeConfig::default()
        };
        let err = Narrator::from_config(&config, None).err().unwrap();
        assert!(err.to_string().contains("must start with http://"), "{err}");
    }

    #[test]
    fn the_bundle_masks_the_api_key_and_credentials_but_keeps_the_evidence() {
        let mut history = recovered_once();
        history.anomalies[1].evidence = vec![
            "[rank0]: NCCL WARN NET/IB : Got completion from peer node-07 with status 12".into(),
            "[rank0]: launcher env WANDB_API_KEY=3f9c2a7e51d04b8c9e6f".into(),
            "[rank0]: resolved endpoint token sk-local-5d1c9e2b7a for the tracker".into(),
        ];
        let report = Report::from_history(&history, t(5000));
        let narrator = narrator(Some("sk-local-5d1c9e2b7a"), 16 * 1024);
        let bundle = narrator.bundle(&report, &report.failures[0]);
        assert!(
            bundle.contains("Got completion from peer node-07"),
            "{bundle}"
        );
        assert!(bundle.contains("WANDB_API_KEY=[redacted]"), "{bundle}");
        assert!(!bundle.contains("3f9c2a7e51d04b8c9e6f"), "{bundle}");
        assert!(!bundle.contains("sk-local-5d1c9e2b7a"), "{bundle}");
        // Only the failure asked about, with the warnings of its attempt.
        assert!(
            bundle.contains("Failure 1 of 1: crash of attempt 0"),
            "{bundle}"
        );
        assert!(bundle.contains("straggler"), "{bundle}");
    }

    #[test]
    fn a_long_bundle_is_cut_on_a_character_boundary_with_a_marker() {
        let mut history = recovered_once();
        history.anomalies[1].evidence = (0..400)
            .map(|n| format!("[rank{n}]: ошибка NCCL на узле node-07 — попытка {n}"))
            .collect();
        let report = Report::from_history(&history, t(5000));
        let bundle = narrator(None, 2048).bundle(&report, &report.failures[0]);
        assert!(bundle.len() <= 2048, "{}", bundle.len());
        assert!(
            bundle.ends_with("[… cut here: the bundle is limited to 2048 bytes]\n"),
            "{bundle}"
        );
        assert!(
            bundle.starts_with("Recovery report: workflow 1 llama"),
            "{bundle}"
        );
        assert_eq!(bounded("short", 2048), "short");
        // A cut inside a multi-byte character steps back to its start.
        let cut = bounded(&"é".repeat(600), 1100);
        assert!(cut.len() <= 1100 && cut.starts_with("éé"), "{cut}");
    }

    #[test]
    fn a_chat_completion_answer_gives_its_content_without_control_characters() {
        let text = narrative_of(&answer(
            "  node-07 lost its InfiniBand link.\n\u{1b}[31mCheck the port.\u{7}  ",
        ))
        .unwrap();
        assert_eq!(
            text,
            "node-07 lost its InfiniBand link.\n[31mCheck the port."
        );
    }

    #[test]
    fn answers_that_are_not_a_usable_narrative_are_refused_with_the_reason() {
        let refused = |body: &[u8]| narrative_of(body).unwrap_err();
        assert!(matches!(
            refused(b"<html>Bad gateway</html>"),
            NarrativeError::NotJson(_)
        ));
        assert!(matches!(
            refused(br#"{"choices": []}"#),
            NarrativeError::NoContent
        ));
        assert!(matches!(
            refused(br#"{"choices": [{"message": {"content": null}}]}"#),
            NarrativeError::NoContent
        ));
        assert!(matches!(refused(&answer(" \n\t ")), NarrativeError::Empty));
        assert!(matches!(
            refused(&answer(&"word ".repeat(2000))),
            NarrativeError::TooLong { chars: 9999, .. }
        ));
        assert!(matches!(
            refused(&answer("ok\u{0}\u{1}\u{2}\u{3}\u{fffd}\u{fffd}")),
            NarrativeError::Unprintable
        ));
    }

    #[test]
    fn the_source_names_the_model_and_the_host_only() {
        assert_eq!(
            narrator(None, 4096).source(),
            "model test-model at http://127.0.0.1:9"
        );
    }

    #[tokio::test]
    async fn an_endpoint_that_refuses_connections_leaves_the_report_rule_based() {
        let mut store = Store::open_in_memory().unwrap();
        let history = recovered_once();
        let mut report = Report::from_history(&history, t(5000));
        // Port 9 (discard) on the loopback has nothing listening.
        let narrator = narrator(Some("sk-local-5d1c9e2b7a"), 4096);
        complete(&mut report, &narrator, &mut store, t(5000))
            .await
            .unwrap();
        match &report.failures[0].narrative {
            Some(NarrativeStatus::Unavailable { reason }) => {
                assert!(reason.contains("cannot reach the endpoint"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(store.db().narratives(1).unwrap().is_empty());
    }
}

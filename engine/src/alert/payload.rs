//! What an alert carries: the notification, and from the store the failure, its attribution with the
//! evidence, the actions taken or proposed, and the commands to see more. Built once when the alert is
//! queued and stored with it, so a delivery after a restart sends what was true when it happened.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{
    ActionState, AlertEvent, AnomalyKind, Notification, Severity, WorkflowId, WorkflowStatus,
};
use crate::redact::Redactor;
use crate::store::{Db, StoreError};

/// At most this many evidence lines travel with an alert; the report has them all.
const MAX_EVIDENCE_LINES: usize = 12;
/// Each carried line is cut to this many characters.
const MAX_LINE_CHARS: usize = 400;

/// One alert, as every channel renders it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// The notification it came from.
    pub id: i64,
    pub event: AlertEvent,
    pub severity: Severity,
    pub time: DateTime<Utc>,
    pub title: String,
    pub body: String,
    pub workflow: Option<WorkflowInfo>,
    pub failure: Option<FailureInfo>,
    pub attribution: Option<AttributionInfo>,
    pub actions: Vec<ActionInfo>,
    /// Commands that show more, e.g. `runguard status 3`.
    pub see_more: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowInfo {
    pub id: WorkflowId,
    pub name: String,
    pub backend: String,
    pub job_id: Option<String>,
    pub status: WorkflowStatus,
    pub status_reason: Option<String>,
    pub requeues_used: u32,
    pub requeue_limit: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureInfo {
    pub attempt_index: u32,
    pub kind: AnomalyKind,
    pub time: DateTime<Utc>,
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributionInfo {
    pub category: String,
    pub component: String,
    pub culprit_node: Option<String>,
    pub culprit_rank: Option<u32>,
    pub confidence: f64,
    pub recoverable: bool,
    pub explanation: String,
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionInfo {
    pub id: i64,
    pub kind: String,
    pub state: ActionState,
    pub permitted: bool,
    pub why: String,
    /// The exact command it runs (or would have run).
    pub command: String,
    pub result: Option<String>,
}

impl Alert {
    /// The alert for `notification` (`system_max_requeues` bounds the job's own limit), with what the store knows about its workflow's latest failure.
    pub fn build(
        db: &Db<'_>,
        notification: &Notification,
        system_max_requeues: u32,
    ) -> Result<Self, StoreError> {
        let mut alert = Alert {
            id: notification.id,
            event: notification.event,
            severity: notification.severity,
            time: notification.time,
            title: notification.title.clone(),
            body: notification.body.clone(),
            workflow: None,
            failure: None,
            attribution: None,
            actions: Vec::new(),
            see_more: Vec::new(),
        };
        let Some(workflow_id) = notification.workflow_id else {
            return Ok(alert);
        };
        let Some(workflow) = db.workflow(workflow_id)? else {
            return Ok(alert);
        };
        let attempts = db.attempts(workflow_id)?;
        let latest = attempts.last();
        alert.workflow = Some(WorkflowInfo {
            id: workflow.id,
            name: workflow.name.clone(),
            backend: workflow.backend.to_string(),
            job_id: latest.map(|attempt| attempt.job_id.clone()),
            status: workflow.status,
            status_reason: workflow.status_reason.clone(),
            requeues_used: workflow.requeues_used,
            requeue_limit: workflow
                .limits
                .max_requeue_times
                .map_or(system_max_requeues, |job| job.min(system_max_requeues)),
        });
        // The anomaly this alert is about: the warning's own kind, else the latest failure.
        let anomalies = db.anomalies(workflow_id)?;
        let wanted = |kind: AnomalyKind| match notification.event {
            AlertEvent::CheckpointStall => kind == AnomalyKind::CheckpointStall,
            AlertEvent::ThroughputDrop => kind == AnomalyKind::ThroughputDrop,
            AlertEvent::Straggler => kind == AnomalyKind::Straggler,
            AlertEvent::StuckPending => kind == AnomalyKind::StuckPending,
            AlertEvent::Completed | AlertEvent::Notice => false,
            _ => matches!(
                kind,
                AnomalyKind::Crash | AnomalyKind::Hang | AnomalyKind::CrashLoop
            ),
        };
        let anomaly = anomalies
            .iter()
            .rev()
            .find(|anomaly| wanted(anomaly.kind) && anomaly.time <= notification.time);
        if let Some(anomaly) = anomaly {
            alert.failure = Some(FailureInfo {
                attempt_index: anomaly.attempt_index,
                kind: anomaly.kind,
                time: anomaly.time,
                summary: anomaly.summary.clone(),
            });
            let attribution = db
                .attributions(workflow_id)?
                .into_iter()
                .rev()
                .find(|a| a.attempt_index == anomaly.attempt_index);
            let evidence = attribution
                .as_ref()
                .map(|a| a.evidence.clone())
                .filter(|lines| !lines.is_empty())
                .unwrap_or_else(|| anomaly.evidence.clone());
            if let Some(attribution) = attribution {
                alert.attribution = Some(AttributionInfo {
                    category: attribution.category.clone(),
                    component: attribution.component.as_str().to_string(),
                    culprit_node: attribution.culprit.node.clone(),
                    culprit_rank: attribution.culprit.rank,
                    confidence: attribution.confidence,
                    recoverable: attribution.recoverable,
                    explanation: attribution.explanation.clone(),
                    evidence: bounded(&evidence),
                });
            } else if !evidence.is_empty() {
                alert.body = format!("{}\n{}", alert.body, bounded(&evidence).join("\n"));
            }
            alert.actions = db
                .actions(workflow_id)?
                .into_iter()
                .filter(|action| action.attempt_index == anomaly.attempt_index)
                .map(|action| ActionInfo {
                    id: action.id,
                    kind: action.kind.as_str().to_string(),
                    state: action.state,
                    permitted: action.permitted,
                    why: action.why,
                    command: action.command.unwrap_or_default(),
                    result: action.result,
                })
                .collect();
        }
        alert
            .see_more
            .push(format!("runguard status {workflow_id}"));
        alert
            .see_more
            .push(format!("runguard report {workflow_id}"));
        for action in alert
            .actions
            .iter()
            .filter(|action| action.state == ActionState::Proposed)
        {
            alert
                .see_more
                .push(format!("runguard approve {}", action.id));
        }
        if let Some(log) = attempts
            .iter()
            .rev()
            .find(|attempt| {
                alert
                    .failure
                    .as_ref()
                    .is_none_or(|failure| failure.attempt_index == attempt.index)
            })
            .and_then(|attempt| attempt.log_path.as_deref())
        {
            alert.see_more.push(format!(
                "runguard explain {}",
                shell_quoted(&log.to_string_lossy())
            ));
        }
        Ok(alert)
    }

    /// The same alert with every secret masked in every text it carries.
    pub fn redacted(mut self, redactor: &Redactor) -> Self {
        let mask = |text: &mut String| *text = redactor.redact(text);
        mask(&mut self.title);
        mask(&mut self.body);
        if let Some(workflow) = &mut self.workflow
            && let Some(reason) = &mut workflow.status_reason
        {
            mask(reason);
        }
        if let Some(failure) = &mut self.failure {
            mask(&mut failure.summary);
        }
        if let Some(attribution) = &mut self.attribution {
            mask(&mut attribution.explanation);
            attribution.evidence.iter_mut().for_each(mask);
        }
        for action in &mut self.actions {
            mask(&mut action.why);
            mask(&mut action.command);
            if let Some(result) = &mut action.result {
                mask(result);
            }
        }
        self.see_more.iter_mut().for_each(mask);
        self
    }

    /// Identical alerts share this key: the same event about the same workflow with the same title.
    pub fn dedupe_key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.event.as_str(),
            self.workflow
                .as_ref()
                .map(|w| w.id.to_string())
                .unwrap_or_default(),
            self.title
        )
    }

    /// The alert as readable text (mail body, Slack message, a command's environment).
    pub fn text(&self) -> String {
        let mut out = format!(
            "[{}] {}\n",
            self.severity.as_str().to_uppercase(),
            self.title
        );
        if !self.body.trim().is_empty() {
            out.push_str(self.body.trim_end());
            out.push('\n');
        }
        if let Some(workflow) = &self.workflow {
            out.push_str(&format!(
                "\nWorkflow {} ({}) on {}{}: {}{}; requeues {}/{}\n",
                workflow.id,
                workflow.name,
                workflow.backend,
                workflow
                    .job_id
                    .as_deref()
                    .map(|job| format!(", job {job}"))
                    .unwrap_or_default(),
                workflow.status.as_str(),
                workflow
                    .status_reason
                    .as_deref()
                    .map(|reason| format!(" ({reason})"))
                    .unwrap_or_default(),
                workflow.requeues_used,
                workflow.requeue_limit,
            ));
        }
        if let Some(failure) = &self.failure {
            out.push_str(&format!(
                "Failure: {} of attempt {} at {}: {}\n",
                failure.kind.as_str(),
                failure.attempt_index,
                failure.time.format("%Y-%m-%d %H:%M:%S UTC"),
                failure.summary
            ));
        }
        if let Some(attribution) = &self.attribution {
            let culprit = match (&attribution.culprit_node, attribution.culprit_rank) {
                (Some(node), Some(rank)) => format!(", culprit {node} (rank {rank})"),
                (Some(node), None) => format!(", culprit {node}"),
                (None, Some(rank)) => format!(", culprit rank {rank}"),
                (None, None) => String::new(),
            };
            out.push_str(&format!(
                "Attribution: {} ({}){culprit}, confidence {:.0}%, {}\n",
                attribution.category,
                attribution.component,
                attribution.confidence * 100.0,
                if attribution.recoverable {
                    "recoverable"
                } else {
                    "not recoverable"
                }
            ));
            if !attribution.evidence.is_empty() {
                out.push_str("Evidence:\n");
                for line in &attribution.evidence {
                    out.push_str(&format!("  > {line}\n"));
                }
            }
        }
        if !self.actions.is_empty() {
            out.push_str("Actions:\n");
            for action in &self.actions {
                out.push_str(&format!("  {}\n", action_line(action)));
            }
        }
        if !self.see_more.is_empty() {
            out.push_str(&format!("More: {}\n", self.see_more.join("  ·  ")));
        }
        out
    }
}

/// One action as a line: what happened to it, or what would have run.
pub fn action_line(action: &ActionInfo) -> String {
    match action.state {
        ActionState::Done => format!(
            "done: {} — {}",
            action.kind,
            action.result.as_deref().unwrap_or(&action.command)
        ),
        ActionState::Failed => format!(
            "failed: {} — {}",
            action.kind,
            action.result.as_deref().unwrap_or_default()
        ),
        ActionState::Proposed if !action.permitted => format!(
            "not permitted, would have run: {} (action {}: {})",
            action.command, action.id, action.why
        ),
        ActionState::Proposed => format!(
            "waiting for approval: {} (action {}: {})",
            action.command, action.id, action.why
        ),
        state => format!(
            "{}: {} — {}",
            state.as_str(),
            action.kind,
            action.result.as_deref().unwrap_or(&action.command)
        ),
    }
}

fn bounded(lines: &[String]) -> Vec<String> {
    let skip = lines.len().saturating_sub(MAX_EVIDENCE_LINES);
    lines
        .iter()
        .skip(skip)
        .map(|line| crate::text::ellipsize(line, MAX_LINE_CHARS))
        .collect()
}

/// A path as the user would type it after the command (quoted when it holds a space or quote).
fn shell_quoted(path: &str) -> String {
    if path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%=,".contains(c))
    {
        path.to_string()
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert() -> Alert {
        Alert {
            id: 7,
            event: AlertEvent::Failure,
            severity: Severity::Critical,
            time: DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default(),
            title: "llama: crash attributed to nccl_timeout on n2".to_string(),
            body: "requeue from the last checkpoint excluding n2".to_string(),
            workflow: Some(WorkflowInfo {
                id: 3,
                name: "llama".to_string(),
                backend: "slurm".to_string(),
                job_id: Some("1234".to_string()),
                status: WorkflowStatus::Recovering,
                status_reason: None,
                requeues_used: 1,
                requeue_limit: 3,
            }),
            failure: Some(FailureInfo {
                attempt_index: 0,
                kind: AnomalyKind::Crash,
                time: DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default(),
                summary: "job 1234 failed".to_string(),
            }),
            attribution: Some(AttributionInfo {
                category: "nccl_timeout".to_string(),
                component: "network".to_string(),
                culprit_node: Some("n2".to_string()),
                culprit_rank: Some(5),
                confidence: 0.85,
                recoverable: true,
                explanation: "a collective timed out".to_string(),
                evidence: vec!["5: NCCL WARN timeout token=abcdef123".to_string()],
            }),
            actions: vec![ActionInfo {
                id: 9,
                kind: "drain_node".to_string(),
                state: ActionState::Proposed,
                permitted: false,
                why: "take n2 out".to_string(),
                command: "scontrol update NodeName=n2 State=DRAIN".to_string(),
                result: None,
            }],
            see_more: vec!["runguard status 3".to_string()],
        }
    }

    #[test]
    fn the_text_names_failure_culprit_evidence_and_what_would_have_run() {
        let text = alert().text();
        assert!(text.starts_with("[CRITICAL] llama: crash"), "{text}");
        assert!(
            text.contains("culprit n2 (rank 5), confidence 85%"),
            "{text}"
        );
        assert!(text.contains("> 5: NCCL WARN timeout"), "{text}");
        assert!(
            text.contains("not permitted, would have run: scontrol update NodeName=n2 State=DRAIN"),
            "{text}"
        );
        assert!(text.contains("More: runguard status 3"), "{text}");
    }

    #[test]
    fn redaction_reaches_the_evidence() {
        let redacted = alert().redacted(&Redactor::default());
        let evidence = &redacted
            .attribution
            .unwrap_or_else(|| unreachable!())
            .evidence;
        assert_eq!(evidence[0], "5: NCCL WARN timeout token=[redacted]");
    }

    #[test]
    fn long_evidence_is_bounded() {
        let lines: Vec<String> = (0..40)
            .map(|i| format!("line {i} {}", "x".repeat(900)))
            .collect();
        let kept = bounded(&lines);
        assert_eq!(kept.len(), MAX_EVIDENCE_LINES);
        assert!(kept[0].starts_with("line 28 "));
        assert!(
            kept.iter()
                .all(|line| line.chars().count() <= MAX_LINE_CHARS + 1)
        );
    }

    #[test]
    fn paths_are_quoted_only_when_needed() {
        assert_eq!(shell_quoted("/logs/run_1.log"), "/logs/run_1.log");
        assert_eq!(shell_quoted("/my logs/it's.log"), r"'/my logs/it'\''s.log'");
    }
}

//! The node ledger in the loop: incidents recorded as the engine learns them (attributed failures,
//! node signals), each node moved between its states, and what a move calls for — a quarantined node
//! kept out of enrolled pending jobs, drained where the whitelist allows, checked until it passes and
//! then let back with exactly runguard's own marks undone.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::journal::Planning;
use super::nodes::run_node_command;
use super::{Engine, EngineError, EngineEvent};
use crate::ledger::{self, Rules};
use crate::model::{
    ActionKind, ActionParams, ActionState, AlertEvent, Attempt, Attribution, IncidentSource,
    JobState, NodeIncident, NodeRecord, NodeState, Notification, Severity, Workflow,
    WorkflowStatus,
};
use crate::telemetry::node_signals::NodeSignal;

/// Evidence lines kept with an incident.
const INCIDENT_EVIDENCE_LINES: usize = 5;

impl Engine {
    /// The incident an attributed failure is against its culprit node, when the category is evidence
    /// about the node itself and the node is inside the attempt's allocation.
    pub(super) fn attribution_incident(
        attempt: &Attempt,
        attribution: &Attribution,
    ) -> Option<NodeIncident> {
        let node = attribution.culprit.node.as_ref()?;
        if !attempt.nodes.contains(node) {
            return None;
        }
        let weight = Rules::standard().attribution_weight(&attribution.category)?;
        Some(NodeIncident {
            id: 0,
            node: node.clone(),
            time: attribution.time,
            source: IncidentSource::Attribution,
            kind: attribution.category.clone(),
            weight,
            fatal: weight >= Rules::standard().quarantine_score,
            workflow_id: Some(attempt.workflow_id),
            attempt_index: Some(attempt.index),
            job_id: Some(attempt.job_id.clone()),
            evidence: attribution
                .evidence
                .iter()
                .take(INCIDENT_EVIDENCE_LINES)
                .cloned()
                .collect(),
        })
    }

    /// The incidents a node's signals are, attached to the first attempt running on it; `source`
    /// tells a kernel log's events from a status command's report.
    pub(super) fn signal_incidents(
        node: &str,
        attempts: &[(Workflow, Attempt)],
        signals: &[NodeSignal],
        source: IncidentSource,
        now: DateTime<Utc>,
    ) -> Vec<NodeIncident> {
        let attempt = attempts.first().map(|(_, attempt)| attempt);
        signals
            .iter()
            .filter_map(|signal| {
                let (kind, weight) = Rules::standard().signal_weight(signal);
                (weight > 0.0).then(|| NodeIncident {
                    id: 0,
                    node: node.to_string(),
                    time: signal.time.unwrap_or(now),
                    source,
                    kind,
                    weight,
                    fatal: signal.fatal,
                    workflow_id: attempt.map(|a| a.workflow_id),
                    attempt_index: attempt.map(|a| a.index),
                    job_id: attempt.map(|a| a.job_id.clone()),
                    evidence: vec![signal.text.chars().take(1024).collect()],
                })
            })
            .collect()
    }

    /// Records incidents and moves their nodes; a node quarantined now gets a drain planned (under the
    /// workflow whose job showed the fault) where the backend can drain.
    pub(super) fn note_incidents(
        &mut self,
        incidents: Vec<NodeIncident>,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        if incidents.is_empty() {
            return Ok(());
        }
        let schedule = self.config.ledger.schedule();
        let backend = std::sync::Arc::clone(&self.backend);
        let drain = self.config.recovery.drain_culprit_nodes && backend.capabilities().drain;
        let policy = self.policy.clone();
        let mut events = Vec::new();
        self.store.write(|db| {
            let mut touched: Vec<(String, Option<i64>, Option<u32>)> = Vec::new();
            for incident in &incidents {
                // A GPU status command reports a lasting condition again at every probe: it is one
                // incident until it changes or an hour has passed.
                if incident.source == IncidentSource::GpuStatus
                    && db
                        .last_node_incident(&incident.node, &incident.kind)?
                        .is_some_and(|last| {
                            last.evidence == incident.evidence
                                && incident.time - last.time < chrono::TimeDelta::hours(1)
                        })
                {
                    continue;
                }
                if db.insert_node_incident(incident)?
                    && !touched.iter().any(|(node, _, _)| *node == incident.node)
                {
                    touched.push((
                        incident.node.clone(),
                        incident.workflow_id,
                        incident.attempt_index,
                    ));
                }
            }
            for (node, workflow_id, attempt_index) in touched {
                let mut record = db
                    .node_record(&node)?
                    .unwrap_or_else(|| NodeRecord::new(&node, now));
                let history = db.node_incidents(&node)?;
                let left =
                    ledger::reassess(&mut record, &history, now, Rules::standard(), &schedule);
                db.upsert_node_record(&record)?;
                let Some(left) = left else {
                    continue;
                };
                db.journal(
                    workflow_id,
                    now,
                    &format!(
                        "node {node}: {} → {} ({})",
                        left.as_str(),
                        record.state.as_str(),
                        record.reason
                    ),
                    &[],
                )?;
                events.push(EngineEvent::NodeStateChanged {
                    node: node.clone(),
                    state: record.state,
                    reason: record.reason.clone(),
                });
                if record.state != NodeState::Quarantined {
                    continue;
                }
                db.insert_notification(&Notification {
                    id: 0,
                    workflow_id,
                    time: now,
                    event: AlertEvent::NodeQuarantined,
                    severity: Severity::Warning,
                    title: format!("node {node} quarantined"),
                    body: format!(
                        "{}\nIt is kept out of every requeue and resubmission, and of enrolled \
                         pending jobs, until a health check passes.",
                        record.reason
                    ),
                })?;
                let Some(workflow) = workflow_id.map(|id| db.workflow(id)).transpose()?.flatten()
                else {
                    continue;
                };
                let drained_already = db.actions(workflow.id)?.iter().any(|action| {
                    action.kind == ActionKind::DrainNode
                        && action.params.node.as_deref() == Some(node.as_str())
                        && !matches!(
                            action.state,
                            ActionState::Rejected | ActionState::Failed | ActionState::Superseded
                        )
                });
                if drain && !drained_already {
                    let reason = format!("runguard: quarantined ({})", first_words(&record.reason));
                    Planning::new(db, backend.as_ref(), &policy, now, &mut events).plan(
                        &workflow,
                        attempt_index.unwrap_or(0),
                        ActionKind::DrainNode,
                        ActionParams {
                            node: Some(node.clone()),
                            reason: Some(reason),
                            ..ActionParams::default()
                        },
                        format!(
                            "node {node} is quarantined ({}): take it out of scheduling until its \
                             health check passes",
                            record.reason
                        ),
                        &[],
                    )?;
                }
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        self.policy.quarantined = self.store.db().quarantined_nodes()?;
        Ok(())
    }

    /// A running attempt one of whose nodes the ledger quarantined while it ran, for a fatal event
    /// its kernel log showed during the run (a GPU lost, an uncorrectable ECC error): the run cannot
    /// go on there, so it is a failure now rather than when its collectives time out minutes later. A
    /// status report's error counters may date from before the run, and a job's own failure is
    /// decided when it ends: neither ends a run that may be making progress.
    pub(super) fn quarantined_under(
        &self,
        attempt: &Attempt,
    ) -> Result<Option<String>, EngineError> {
        if attempt.state != JobState::Running || self.policy.quarantined.is_empty() {
            return Ok(None);
        }
        let db = self.store.db();
        let mut found = Vec::new();
        for node in attempt
            .nodes
            .iter()
            .filter(|n| self.policy.quarantined.contains(n))
        {
            let Some(start) = attempt.start_time else {
                continue;
            };
            let Some(record) = db.node_record(node)? else {
                continue;
            };
            let event = db.node_incidents(node)?.into_iter().any(|incident| {
                incident.fatal
                    && incident.source == IncidentSource::NodeSignal
                    && incident.time >= start
            });
            if record.since >= start && event {
                found.push(format!("{node} ({})", record.reason));
            }
        }
        Ok((!found.is_empty()).then(|| {
            format!(
                "job {} (attempt {}) is running on a node quarantined under it: {}",
                attempt.job_id,
                attempt.index,
                found.join("; ")
            )
        }))
    }

    /// Once per full pass: nodes move with time (incidents fade, probations end), due health checks
    /// run, quarantined nodes are kept out of enrolled pending jobs and off runs that started on them.
    pub(super) async fn tend_ledger(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let records = self.store.db().node_records()?;
        self.policy.quarantined = self.store.db().quarantined_nodes()?;
        if records.is_empty() {
            return Ok(());
        }
        let schedule = self.config.ledger.schedule();
        let mut events = Vec::new();
        // Only a suspect (its incidents fade) or a node on probation (it ends) moves with time: a
        // healthy node's score only falls, and a quarantined one waits for its check.
        let moving = records
            .into_iter()
            .filter(|record| matches!(record.state, NodeState::Suspect | NodeState::Probation));
        self.store.write(|db| {
            for mut record in moving {
                let history = db.node_incidents(&record.node)?;
                if let Some(left) =
                    ledger::reassess(&mut record, &history, now, Rules::standard(), &schedule)
                {
                    db.upsert_node_record(&record)?;
                    db.journal(
                        None,
                        now,
                        &format!(
                            "node {}: {} → {} ({})",
                            record.node,
                            left.as_str(),
                            record.state.as_str(),
                            record.reason
                        ),
                        &[],
                    )?;
                    events.push(EngineEvent::NodeStateChanged {
                        node: record.node.clone(),
                        state: record.state,
                        reason: record.reason.clone(),
                    });
                }
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        self.policy.quarantined = self.store.db().quarantined_nodes()?;
        self.check_quarantined(now).await?;
        self.undo_marks(now)?;
        self.keep_out_of_jobs(now)?;
        Ok(())
    }

    /// Runs the health check of every quarantined node whose check is due; a pass returns it to
    /// service on probation and undoes runguard's own marks on it.
    async fn check_quarantined(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let command = self.config.ledger.health_check.clone();
        if command.is_empty() || self.outage.is_some() {
            return Ok(());
        }
        let timeout = Duration::from_secs(self.config.ledger.health_check_timeout_secs.max(1));
        let schedule = self.config.ledger.schedule();
        let due: Vec<NodeRecord> = self
            .store
            .db()
            .node_records()?
            .into_iter()
            .filter(|record| {
                record.state == NodeState::Quarantined
                    && record.next_check_at.is_none_or(|at| at <= now)
            })
            .collect();
        for mut record in due {
            let result = run_node_command(&command, &record.node, timeout).await;
            let now = self.clock.now();
            let passed = result.is_ok();
            let outcome = match &result {
                Ok(_) => "passed".to_string(),
                Err(message) => format!("failed: {message}"),
            };
            ledger::after_check(&mut record, passed, now, &schedule);
            let mut events = Vec::new();
            self.store.write(|db| {
                db.upsert_node_record(&record)?;
                db.journal(
                    None,
                    now,
                    &format!(
                        "node {}: health check {outcome}; {}",
                        record.node,
                        match record.next_check_at {
                            Some(at) if !passed =>
                                format!("next check at {}", at.format("%H:%M:%S")),
                            _ => record.reason.clone(),
                        }
                    ),
                    &[],
                )?;
                if passed {
                    events.push(EngineEvent::NodeStateChanged {
                        node: record.node.clone(),
                        state: record.state,
                        reason: record.reason.clone(),
                    });
                    db.insert_notification(&Notification {
                        id: 0,
                        workflow_id: None,
                        time: now,
                        event: AlertEvent::NodeReturned,
                        severity: Severity::Info,
                        title: format!("node {} back in service", record.node),
                        body: record.reason.clone(),
                    })?;
                }
                Ok(())
            })?;
            self.pending_events.extend(events);
            self.flush_events();
        }
        self.policy.quarantined = self.store.db().quarantined_nodes()?;
        Ok(())
    }

    /// Plans the undoing of what runguard did to the nodes it let back (a passed check, the user's
    /// release): its own drain, and the exclusions it added to pending jobs. Nothing anyone else set
    /// is touched, and each undoing is planned once per return.
    fn undo_marks(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let backend = std::sync::Arc::clone(&self.backend);
        let policy = self.policy.clone();
        let mut events = Vec::new();
        self.store.write(|db| {
            // Only nodes that carry a mark of runguard's: its drain, or an exclusion it added.
            let excluded = db.nodes_with_exclusions()?;
            let returned = db.node_records()?.into_iter().filter(|record| {
                record.state != NodeState::Quarantined
                    && (record.drain_reason.is_some() || excluded.contains(&record.node))
            });
            for record in returned {
                let node = record.node.clone();
                let planned_since_return =
                    |actions: &[crate::model::Action], kind: ActionKind, job: Option<&str>| {
                        actions.iter().any(|action| {
                            action.kind == kind
                                && action.params.node.as_deref() == Some(node.as_str())
                                && (job.is_none() || action.params.job_id.as_deref() == job)
                                && !action.params.exclude_nodes.contains(&node)
                                && action.created_at >= record.since
                        })
                    };
                if let Some(reason) = &record.drain_reason {
                    // Under the workflow that drained it.
                    let drains = db.actions_of_kind(ActionKind::DrainNode)?;
                    let drained_by = drains.iter().rev().find(|action| {
                        action.state == ActionState::Done
                            && action.params.node.as_deref() == Some(node.as_str())
                    });
                    let resumes = db.actions_of_kind(ActionKind::ResumeNode)?;
                    if let Some(action) = drained_by
                        && !planned_since_return(&resumes, ActionKind::ResumeNode, None)
                        && let Some(workflow) = db.workflow(action.workflow_id)?
                    {
                        Planning::new(db, backend.as_ref(), &policy, now, &mut events).plan(
                            &workflow,
                            action.attempt_index,
                            ActionKind::ResumeNode,
                            ActionParams {
                                node: Some(node.clone()),
                                reason: Some(reason.clone()),
                                ..ActionParams::default()
                            },
                            format!(
                                "node {node} is back in service ({}): return it to scheduling, \
                                 undoing only the drain runguard set (reason {reason:?})",
                                record.reason
                            ),
                            &[],
                        )?;
                    }
                }
                for added in db.exclusions_of_node(&node)? {
                    let Some(workflow) = db.workflow(added.workflow_id)? else {
                        db.remove_exclusion(&node, &added.job_id)?;
                        continue;
                    };
                    let latest = db.attempts(workflow.id)?.pop();
                    let Some(attempt) =
                        latest.filter(|a| a.job_id == added.job_id && a.state == JobState::Pending)
                    else {
                        // The job started or ended: the exclusion is history.
                        db.remove_exclusion(&node, &added.job_id)?;
                        continue;
                    };
                    let actions = db.actions(workflow.id)?;
                    if planned_since_return(
                        &actions,
                        ActionKind::UpdateExclusions,
                        Some(&attempt.job_id),
                    ) {
                        continue;
                    }
                    Planning::new(db, backend.as_ref(), &policy, now, &mut events).plan(
                        &workflow,
                        attempt.index,
                        ActionKind::UpdateExclusions,
                        ActionParams {
                            job_id: Some(attempt.job_id.clone()),
                            node: Some(node.clone()),
                            exclude_nodes: attempt
                                .excluded_nodes
                                .iter()
                                .filter(|n| **n != node)
                                .cloned()
                                .collect(),
                            reason: Some(format!("{node} is back in service")),
                            ..ActionParams::default()
                        },
                        format!(
                            "node {node} is back in service: take away the exclusion runguard \
                             added to pending job {}",
                            attempt.job_id
                        ),
                        &[],
                    )?;
                }
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }

    /// The user let a quarantined node back (`runguard nodes --release NODE`).
    pub(super) fn release_node(
        &mut self,
        node: &str,
        now: DateTime<Utc>,
    ) -> Result<String, EngineError> {
        let schedule = self.config.ledger.schedule();
        let mut events = Vec::new();
        let outcome = self
            .store
            .write(|db| release_in(db, node, now, &schedule, &mut events))?;
        self.pending_events.extend(events);
        self.flush_events();
        self.policy.quarantined = self.store.db().quarantined_nodes()?;
        Ok(outcome)
    }

    /// Every enrolled job still pending gets the quarantined nodes added to its exclusions; a run
    /// that started on a quarantined node before that could happen is requeued off it at once.
    fn keep_out_of_jobs(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let quarantined = self.policy.quarantined.clone();
        if quarantined.is_empty() {
            return Ok(());
        }
        let backend = std::sync::Arc::clone(&self.backend);
        let can_exclude = backend.capabilities().update_exclusions;
        let policy = self.policy.clone();
        let mut events = Vec::new();
        self.store.write(|db| {
            for mut workflow in db.workflows()? {
                if !workflow.status.is_active() || workflow.status == WorkflowStatus::CredentialError
                {
                    continue;
                }
                let Some(attempt) = db.attempts(workflow.id)?.pop() else {
                    continue;
                };
                let actions = db.actions(workflow.id)?;
                let open = |kind: ActionKind, node: Option<&str>| {
                    actions.iter().any(|action| {
                        action.kind == kind
                            && action.attempt_index == attempt.index
                            && (node.is_none() || action.params.node.as_deref() == node)
                            && matches!(
                                action.state,
                                ActionState::Proposed
                                    | ActionState::Approved
                                    | ActionState::Executing
                            )
                    })
                };
                match attempt.state {
                    JobState::Pending if can_exclude => {
                        let added = db.exclusions_of_workflow(workflow.id)?;
                        for node in &quarantined {
                            if attempt.excluded_nodes.contains(node)
                                || open(ActionKind::UpdateExclusions, Some(node))
                                || added
                                    .iter()
                                    .any(|a| a.node == *node && a.job_id == attempt.job_id)
                            {
                                continue;
                            }
                            let mut exclude = attempt.excluded_nodes.clone();
                            exclude.push(node.clone());
                            Planning::new(db, backend.as_ref(), &policy, now, &mut events).plan(
                                &workflow,
                                attempt.index,
                                ActionKind::UpdateExclusions,
                                ActionParams {
                                    job_id: Some(attempt.job_id.clone()),
                                    node: Some(node.clone()),
                                    exclude_nodes: exclude,
                                    reason: Some(format!("{node} is quarantined")),
                                    ..ActionParams::default()
                                },
                                format!(
                                    "node {node} is quarantined: keep pending job {} off it",
                                    attempt.job_id
                                ),
                                &[],
                            )?;
                        }
                    }
                    JobState::Running => {
                        let on: Vec<&String> = attempt
                            .nodes
                            .iter()
                            .filter(|node| quarantined.contains(node))
                            .collect();
                        if on.is_empty()
                            || db.attempt_handled(workflow.id, attempt.index)?
                            || open(ActionKind::Requeue, None)
                            || open(ActionKind::Resubmit, None)
                        {
                            continue;
                        }
                        // Only a run that started after the quarantine: one already running there when
                        // the node was quarantined is the failure's own, decided as such.
                        let mut started_after = false;
                        for node in &on {
                            if let Some(record) = db.node_record(node)?
                                && attempt.start_time.is_some_and(|start| start >= record.since)
                            {
                                started_after = true;
                            }
                        }
                        if !started_after {
                            continue;
                        }
                        let mut exclude = attempt.excluded_nodes.clone();
                        for node in &quarantined {
                            if !exclude.contains(node) {
                                exclude.push(node.clone());
                            }
                        }
                        let names = on.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(",");
                        let kind = if backend.capabilities().requeue {
                            ActionKind::Requeue
                        } else {
                            ActionKind::Resubmit
                        };
                        Planning::new(db, backend.as_ref(), &policy, now, &mut events).plan(
                            &workflow,
                            attempt.index,
                            kind,
                            ActionParams {
                                job_id: Some(attempt.job_id.clone()),
                                exclude_nodes: exclude.clone(),
                                restart_count: Some(attempt.restart_count),
                                reason: Some(format!("started on quarantined {names}")),
                                ..ActionParams::default()
                            },
                            format!(
                                "job {} started on quarantined {names} before runguard could keep it \
                                 off: {} it excluding {}",
                                attempt.job_id,
                                kind.as_str(),
                                exclude.join(",")
                            ),
                            &[],
                        )?;
                        // The run is ended on purpose: its end needs no decision of its own.
                        db.mark_attempt_handled(workflow.id, attempt.index)?;
                        super::set_status(
                            db,
                            &mut workflow,
                            WorkflowStatus::Recovering,
                            Some(format!("moving off quarantined {names}")),
                            now,
                        )?;
                    }
                    _ => {}
                }
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }

    /// The ledger's side of an action that finished: a drain stands with runguard's reason, an
    /// exclusion was added or taken away, a node runguard drained is back.
    pub(super) fn ledger_after_action(
        db: &crate::store::Db<'_>,
        action: &crate::model::Action,
        now: DateTime<Utc>,
    ) -> Result<(), crate::store::StoreError> {
        let Some(node) = action.params.node.clone() else {
            return Ok(());
        };
        match action.kind {
            ActionKind::DrainNode => {
                let mut record = db
                    .node_record(&node)?
                    .unwrap_or_else(|| NodeRecord::new(&node, now));
                // A drain already standing keeps its reason (the scheduler keeps the first one too).
                if record.drain_reason.is_none() {
                    record.drain_reason = action.params.reason.clone();
                    record.updated_at = now;
                }
                db.upsert_node_record(&record)
            }
            ActionKind::ResumeNode => {
                if let Some(mut record) = db.node_record(&node)? {
                    record.drain_reason = None;
                    record.updated_at = now;
                    db.upsert_node_record(&record)?;
                }
                Ok(())
            }
            ActionKind::UpdateExclusions => {
                let job_id = action.params.job_id.clone().unwrap_or_default();
                if action.params.exclude_nodes.contains(&node) {
                    db.add_exclusion(&crate::model::AddedExclusion {
                        node,
                        workflow_id: action.workflow_id,
                        job_id,
                        added_at: now,
                    })
                } else {
                    db.remove_exclusion(&node, &job_id)
                }
            }
            _ => Ok(()),
        }
    }
}

/// Lets a quarantined node back on the user's word: on probation, as after a passed check. The
/// engine undoes runguard's marks on it at its next pass.
pub fn release_in(
    db: &crate::store::Db<'_>,
    node: &str,
    now: DateTime<Utc>,
    schedule: &ledger::Schedule,
    events: &mut Vec<EngineEvent>,
) -> Result<String, crate::store::StoreError> {
    let Some(mut record) = db.node_record(node)? else {
        return Ok(format!("node {node} is not in the ledger"));
    };
    if ledger::release(&mut record, now, schedule).is_none() {
        return Ok(format!(
            "node {node} is {}, not quarantined; nothing to do",
            record.state.as_str()
        ));
    }
    db.upsert_node_record(&record)?;
    db.journal(
        None,
        now,
        &format!("node {node}: quarantined → probation ({})", record.reason),
        &[],
    )?;
    events.push(EngineEvent::NodeStateChanged {
        node: node.to_string(),
        state: record.state,
        reason: record.reason.clone(),
    });
    Ok(format!("node {node} released: {}", record.reason))
}

/// The first words of a reason, for a drain reason the scheduler shows in its narrow columns.
fn first_words(reason: &str) -> String {
    let mut words = String::new();
    for word in reason.split_whitespace() {
        if words.len() + word.len() > 48 {
            break;
        }
        if !words.is_empty() {
            words.push(' ');
        }
        words.push_str(word);
    }
    words.trim_end_matches([':', ',', ';']).to_string()
}

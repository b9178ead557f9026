//! Dead nodes, early: a node under a running watched job that the scheduler says no longer answers, is
//! DOWN or FAILs is a node failure of that job now. Slurm itself waits for `SlurmdTimeout` and then for
//! the job to end NODE_FAIL before it requeues; the run is lost meanwhile.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{Engine, EngineError, with_timeout};
use crate::model::{Attempt, EvidenceLine, JobState, Workflow};

impl Engine {
    /// Asks the scheduler about the nodes of the running watched jobs, when a node query is due.
    pub(super) async fn check_nodes(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        if !self.pace.nodes_due(now) {
            return Ok(());
        }
        let backend = self.backend.kind();
        let mut nodes: Vec<String> = Vec::new();
        let mut running = Vec::new();
        let active = self.active_attempts()?;
        let watched: Vec<bool> = active
            .attempts
            .iter()
            .map(|(workflow, attempt)| {
                workflow.backend == backend && attempt.state == JobState::Running
            })
            .collect();
        for (workflow, attempt) in active.attempts.iter().filter(|(workflow, attempt)| {
            workflow.backend == backend && attempt.state == JobState::Running
        }) {
            running.push((workflow.id, attempt.index));
        }
        for (node, indexes) in &active.by_node {
            if indexes
                .iter()
                .any(|index| watched.get(*index).copied().unwrap_or(false))
            {
                nodes.push(node.clone());
            }
        }
        // What was heard of attempts that no longer run is of no use.
        self.silence.retain(|key, _| running.contains(key));
        if nodes.is_empty() {
            self.dead_nodes.clear();
            return Ok(());
        }
        self.pace.nodes_asked(now);
        match with_timeout(self.backend.dead_nodes(&nodes)).await {
            Ok(Some(dead)) => {
                self.dead_nodes = dead.into_iter().collect::<HashMap<_, _>>();
                Ok(())
            }
            Ok(None) => Ok(()),
            // A failed node query is no evidence about the nodes: the last answer is forgotten, not
            // acted on, and the listing's own outage handling covers a controller that is down.
            Err(err) => {
                self.dead_nodes.clear();
                self.warn(
                    "backend_unavailable",
                    format!("reading the state of nodes {}: {err}", nodes.join(",")),
                    now,
                )
            }
        }
    }

    /// Notes which nodes of the attempt its log just heard from (ranks map to nodes in blocks of
    /// `gpus_per_node`, as srun and torchrun lay them out).
    pub(super) fn hear_ranks(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        ranks: &[u32],
        now: DateTime<Utc>,
    ) {
        if attempt.state != JobState::Running || attempt.nodes.len() < 2 {
            return;
        }
        let per_node = workflow.spec.ranks_per_node();
        let silence = self
            .silence
            .entry((attempt.workflow_id, attempt.index))
            .or_default();
        for rank in ranks {
            if let Some(node) = attempt.nodes.get((rank / per_node) as usize) {
                silence.heard(node, *rank, now);
            }
        }
    }

    /// The nodes of a running attempt that are dead: what the scheduler last said of them, or their
    /// ranks gone quiet while the others go on.
    pub(super) fn dead_nodes_of(
        &self,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Vec<(String, String)> {
        if attempt.state != JobState::Running {
            return Vec::new();
        }
        let mut dead: Vec<(String, String)> = attempt
            .nodes
            .iter()
            .filter_map(|node| {
                self.dead_nodes
                    .get(node)
                    .map(|state| (node.clone(), state.clone()))
            })
            .collect();
        let threshold = self.config.detect.node_silence_secs;
        if threshold > 0
            && let Some(silence) = self.silence.get(&(attempt.workflow_id, attempt.index))
        {
            for quiet in silence.quiet(now, threshold) {
                if attempt.nodes.contains(&quiet.node)
                    && !dead.iter().any(|(n, _)| *n == quiet.node)
                {
                    dead.push((
                        quiet.node,
                        format!(
                            "not responding: its ranks wrote nothing for {} s while the other nodes' ranks went on",
                            quiet.silent_secs
                        ),
                    ));
                }
            }
        }
        dead
    }

    /// Records why a running attempt failed although the scheduler still says it runs: the evidence
    /// lines that attribution reads, kept with the attempt for the report and `explain`.
    pub(super) fn record_dead_nodes(
        &mut self,
        attempt: &Attempt,
        dead: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<String, EngineError> {
        let lines: Vec<EvidenceLine> = dead
            .iter()
            .map(|(node, state)| EvidenceLine {
                time: now,
                rank: None,
                text: format!(
                    "scheduler: node {node} of job {} is no longer usable ({state})",
                    attempt.job_id
                ),
            })
            .collect();
        self.store.write(|db| {
            for line in &lines {
                db.insert_evidence_line(attempt.workflow_id, attempt.index, line)?;
            }
            Ok(())
        })?;
        let names: Vec<&str> = dead.iter().map(|(node, _)| node.as_str()).collect();
        Ok(format!(
            "job {} (attempt {}) is running on a dead node: {} ({})",
            attempt.job_id,
            attempt.index,
            names.join(","),
            dead.iter()
                .map(|(_, state)| state.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    }
}

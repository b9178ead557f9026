//! What the capacity report reads: each listing of the jobs and of the nodes as the engine saw it, and
//! the history of attempts and recoveries gathered into one [`CapacityHistory`].

use chrono::{DateTime, Utc};
use rusqlite::params;

use super::{Db, StoreError, time_from_text, time_to_text};
use crate::capacity::{
    CapacityHistory, Instant, NodeSample, NodeUse, QueueSample, QueueWait, RecoveryTime, RunSpan,
};
use crate::model::{ActionState, Attempt, WorkflowId};
use crate::report::WorkflowHistory;
use crate::report::downtime::{self, GapKind};

impl Db<'_> {
    /// Records one listing of the jobs: the instant and every job it showed.
    pub fn record_job_listing<'s>(
        &self,
        instant: &Instant,
        jobs: impl Iterator<Item = &'s QueueSample>,
    ) -> Result<(), StoreError> {
        let time = time_to_text(instant.time);
        self.execute(
            "INSERT OR REPLACE INTO capacity_listings (time, seconds) VALUES (?1, ?2)",
            params![time, instant.seconds],
        )?;
        let mut insert = self.conn.prepare_cached(
            "INSERT OR REPLACE INTO capacity_jobs (time, job_id, partition, pending, reason, gpus) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for job in jobs {
            insert.execute(params![
                time,
                job.job_id,
                job.partition,
                job.pending,
                job.reason,
                job.gpus
            ])?;
        }
        Ok(())
    }

    /// Records one listing of the nodes (every sample of one time).
    pub fn record_node_listing(&self, nodes: &[NodeSample]) -> Result<(), StoreError> {
        let mut insert = self.conn.prepare_cached(
            "INSERT OR REPLACE INTO capacity_nodes \
             (time, seconds, node, partition, state, gpus, gpus_allocated, reason) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for node in nodes {
            insert.execute(params![
                time_to_text(node.time),
                node.seconds,
                node.node,
                node.partition.as_deref().unwrap_or(""),
                node.state.as_str(),
                node.gpus,
                node.gpus_allocated,
                node.reason
            ])?;
        }
        Ok(())
    }

    /// Forgets the listings recorded before `before`; how many listings of the jobs went.
    pub fn forget_listings_before(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        let before = time_to_text(before);
        let gone = self.execute(
            "DELETE FROM capacity_listings WHERE time < ?1",
            params![before],
        )?;
        self.conn
            .execute("DELETE FROM capacity_jobs WHERE time < ?1", params![before])?;
        self.execute(
            "DELETE FROM capacity_nodes WHERE time < ?1",
            params![before],
        )?;
        Ok(gone)
    }

    /// When the jobs were first recorded, if ever.
    pub fn first_job_listing(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.last_time("SELECT MIN(time) FROM capacity_listings")
    }

    /// When the jobs were last recorded, if ever.
    pub fn last_job_listing(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.last_time("SELECT MAX(time) FROM capacity_listings")
    }

    /// When the nodes were last recorded, if ever.
    pub fn last_node_listing(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.last_time("SELECT MAX(time) FROM capacity_nodes")
    }

    fn last_time(&self, sql: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        let text: Option<String> = self.query_row(sql, [], |row| row.get(0))?;
        text.as_deref().map(time_from_text).transpose()
    }

    /// Everything recorded between `from` and `to` that the capacity report reads. Quarantine spans are
    /// read from the node listings (drains carrying runguard's mark).
    pub fn capacity_history(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<CapacityHistory, StoreError> {
        let (from_text, to_text) = (time_to_text(from), time_to_text(to));
        let instants = self.select_rows(
            "SELECT time, seconds FROM capacity_listings WHERE time >= ?1 AND time < ?2 ORDER BY time",
            params![from_text, to_text],
            |row| {
                Ok(Instant {
                    time: time_from_text(&row.get::<_, String>(0)?)?,
                    seconds: row.get(1)?,
                })
            },
        )?;
        let queue = self.select_rows(
            "SELECT time, job_id, partition, pending, reason, gpus FROM capacity_jobs \
             WHERE time >= ?1 AND time < ?2 ORDER BY time",
            params![from_text, to_text],
            |row| {
                Ok(QueueSample {
                    time: time_from_text(&row.get::<_, String>(0)?)?,
                    job_id: row.get(1)?,
                    partition: row.get(2)?,
                    pending: row.get(3)?,
                    reason: row.get(4)?,
                    gpus: row.get(5)?,
                })
            },
        )?;
        let nodes = self.select_rows(
            "SELECT time, seconds, node, partition, state, gpus, gpus_allocated, reason \
             FROM capacity_nodes WHERE time >= ?1 AND time < ?2 ORDER BY time, node",
            params![from_text, to_text],
            |row| {
                let state: String = row.get(4)?;
                let partition: String = row.get(3)?;
                Ok(NodeSample {
                    time: time_from_text(&row.get::<_, String>(0)?)?,
                    seconds: row.get(1)?,
                    node: row.get(2)?,
                    partition: (!partition.is_empty()).then_some(partition),
                    state: NodeUse::parse(&state)
                        .ok_or_else(|| StoreError::Corrupt(format!("node state {state:?}")))?,
                    gpus: row.get(5)?,
                    gpus_allocated: row.get(6)?,
                    reason: row.get(7)?,
                })
            },
        )?;
        let mut history = CapacityHistory {
            quarantines: crate::capacity::quarantines_from_node_samples(&nodes),
            instants,
            queue,
            nodes,
            ..CapacityHistory::default()
        };
        self.ledger_quarantines(&mut history, from, to)?;
        self.attempt_history(&mut history, from, to)?;
        Ok(history)
    }

    /// The node ledger's quarantines still standing, for nodes whose drain (when runguard may not
    /// drain) the listings cannot show: from when the ledger quarantined them.
    fn ledger_quarantines(
        &self,
        history: &mut CapacityHistory,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        for record in self.node_records()? {
            if record.state != crate::model::NodeState::Quarantined || record.since >= to {
                continue;
            }
            let start = record.since.max(from);
            let covered = history.quarantines.iter().any(|span| {
                span.node == record.node
                    && span.from <= start
                    && span.to.is_none_or(|end| end > start)
            });
            if covered {
                continue;
            }
            let gpus = history
                .nodes
                .iter()
                .filter(|sample| sample.node == record.node)
                .map(|sample| sample.gpus)
                .max()
                .unwrap_or(0);
            history.quarantines.push(crate::capacity::QuarantineSpan {
                node: record.node,
                gpus,
                from: start,
                to: None,
            });
        }
        Ok(())
    }

    /// Waits, running spans and recoveries of the attempts that touch `[from, to)`.
    fn attempt_history(
        &self,
        history: &mut CapacityHistory,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let workflows = self.workflows()?;
        let mut attempts: std::collections::HashMap<WorkflowId, Vec<Attempt>> =
            std::collections::HashMap::new();
        for attempt in self.all_attempts()? {
            attempts
                .entry(attempt.workflow_id)
                .or_default()
                .push(attempt);
        }
        for workflow in workflows {
            let Some(of_workflow) = attempts.remove(&workflow.id) else {
                continue;
            };
            let touches = |a: &Attempt| {
                let begin = a.submit_time.or(a.start_time);
                let end = a.end_time;
                begin.is_some_and(|b| b < to) && end.is_none_or(|e| e >= from)
            };
            if !of_workflow.iter().any(touches) {
                continue;
            }
            let partition = workflow.spec.partition.clone();
            for attempt in &of_workflow {
                if let Some(submitted) = attempt.submit_time {
                    history.waits.push(QueueWait {
                        partition: partition.clone(),
                        gpus: attempt.gpus,
                        submitted,
                        started: attempt.start_time,
                        requeued: attempt.index > 0,
                    });
                }
                if let (Some(start), Some(end)) =
                    (attempt.start_time, downtime::running_end(attempt, to))
                {
                    let nodes = if attempt.nodes.is_empty() {
                        workflow.spec.nodes
                    } else {
                        attempt.nodes.len() as u32
                    };
                    history.runs.push(RunSpan { nodes, start, end });
                }
            }
            if !of_workflow.iter().any(|a| a.state.is_failure()) {
                continue;
            }
            let gpus_of: std::collections::HashMap<u32, u32> =
                of_workflow.iter().map(|a| (a.index, a.gpus)).collect();
            let full = WorkflowHistory {
                requeue_limit: 0,
                attempts: of_workflow,
                checkpoints: self.checkpoints(workflow.id)?,
                throughput: self.throughput(workflow.id)?,
                anomalies: self.anomalies(workflow.id)?,
                attributions: Vec::new(),
                actions: self.actions(workflow.id)?,
                journal: Vec::new(),
                narratives: Vec::new(),
                ledger_rate: None,
                workflow,
            };
            history.save_minutes.extend(
                crate::detect::sections::save_durations(&full.checkpoints, &full.throughput)
                    .into_iter()
                    .map(|secs| secs / 60.0),
            );
            for recovery in downtime::recoveries(&full, to) {
                // Only a restart runguard completed saved anything.
                let restarted = full.actions.iter().any(|action| {
                    action.attempt_index == recovery.failed_attempt
                        && action.kind.restarts_the_run()
                        && action.state == ActionState::Done
                }) && recovery
                    .gap(GapKind::Requeue)
                    .is_some_and(|gap| !gap.ongoing);
                let response = restarted.then(|| {
                    [GapKind::Detection, GapKind::Analysis, GapKind::Requeue]
                        .into_iter()
                        .filter_map(|kind| recovery.gap(kind))
                        .map(|gap| gap.duration())
                        .fold(chrono::TimeDelta::zero(), |sum, d| sum + d)
                });
                history.recoveries.push(RecoveryTime {
                    failed_at: recovery.failed_at,
                    gpus: gpus_of.get(&recovery.failed_attempt).copied().unwrap_or(0),
                    response,
                    checkpoint_load: recovery
                        .gap(GapKind::CheckpointLoad)
                        .filter(|gap| !gap.ongoing)
                        .map(|gap| gap.duration()),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::TimeDelta;

    use crate::capacity::simulated;
    use crate::store::Store;

    #[test]
    fn a_simulated_stretch_reads_back_as_it_was_generated() {
        let start = chrono::DateTime::parse_from_rfc3339("2026-03-02T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let month = simulated::month(11, start, 4);
        let mut store = Store::open_in_memory().unwrap();
        month.store(&mut store).unwrap();
        let history = store.db().capacity_history(month.start, month.end).unwrap();
        assert_eq!(history.instants, month.instants);
        assert_eq!(history.queue.len(), month.queue.len());
        assert_eq!(history.nodes.len(), month.node_samples.len());
        // The drains carrying runguard's mark are the generated quarantines; the maintenance is not.
        assert_eq!(history.quarantines, month.quarantines);
        let failures: Vec<_> = month
            .jobs
            .iter()
            .flat_map(|job| &job.attempts)
            .filter_map(|a| Some((a.ended?, a.failure.as_ref()?)))
            .collect();
        assert!(!failures.is_empty());
        assert_eq!(history.recoveries.len(), failures.len());
        for (ended, failure) in failures {
            let recovery = history
                .recoveries
                .iter()
                .find(|r| r.failed_at == ended)
                .unwrap();
            assert_eq!(recovery.response, Some(failure.requeued - ended));
        }
        let attempts: usize = month.jobs.iter().map(|j| j.attempts.len()).sum();
        assert_eq!(history.waits.len(), attempts);
        assert!(
            history
                .runs
                .iter()
                .all(|r| r.end - r.start >= TimeDelta::zero())
        );
    }

    #[test]
    fn listings_before_a_time_are_forgotten_with_their_jobs_and_nodes() {
        let start = chrono::DateTime::parse_from_rfc3339("2026-03-02T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let month = simulated::month(3, start, 2);
        let mut store = Store::open_in_memory().unwrap();
        month.store(&mut store).unwrap();
        let cut = start + TimeDelta::days(1);
        let gone = store.db().forget_listings_before(cut).unwrap();
        assert_eq!(gone, 24 * 12);
        assert_eq!(store.db().first_job_listing().unwrap(), Some(cut));
        let left = store.db().capacity_history(start, month.end).unwrap();
        assert_eq!(left.instants.len(), 24 * 12);
        assert!(left.queue.iter().all(|s| s.time >= cut));
        assert!(left.nodes.iter().all(|s| s.time >= cut));
    }
}

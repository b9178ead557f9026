//! The invariants of a chaos trial, checked on what the scheduler and the store say once the engine
//! has settled: gathered into [`Facts`] first, so the checker itself can be tested on facts made by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

/// One job as the scheduler records it.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerJob {
    pub job_id: String,
    pub restart_count: u32,
    /// Ended successfully.
    pub completed: bool,
    /// Held (by anyone): a requeue left half done.
    pub held: bool,
}

/// One action as the store records it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAction {
    pub id: i64,
    pub workflow_id: i64,
    pub attempt_index: i64,
    pub kind: String,
    pub state: String,
}

/// One alert delivery as the store records it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDelivery {
    pub notification_id: i64,
    pub channel: String,
    pub event: String,
    pub state: String,
}

/// Everything the invariants look at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub jobs: Vec<SchedulerJob>,
    /// Failures the scenario injects into each job.
    pub injected: BTreeMap<String, u32>,
    /// Per workflow: its status and the job ids of its attempts, in order.
    pub workflows: Vec<(i64, String, Vec<String>)>,
    pub actions: Vec<StoredAction>,
    /// (workflow, attempt index) of every failure recorded.
    pub failures: Vec<(i64, i64)>,
    /// Notification ids with their event.
    pub notifications: Vec<(i64, String)>,
    pub deliveries: Vec<StoredDelivery>,
    /// Idempotency keys the receiver saw, with how many requests carried each.
    pub received: BTreeMap<String, usize>,
}

/// The actions that restart a run; each one is a failure recovered.
const RESTARTS: [&str; 3] = ["requeue", "resubmit", "recreate"];

impl Facts {
    /// Every way the facts break the guarantees, in words; empty when none.
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        // Every failure recovered exactly once; the run completed.
        for job in &self.jobs {
            let injected = self.injected.get(&job.job_id).copied().unwrap_or(0);
            if job.restart_count != injected {
                found.push(format!(
                    "job {} restarted {} times for {injected} failures",
                    job.job_id, job.restart_count
                ));
            }
            if !job.completed {
                found.push(format!("job {} did not complete", job.job_id));
            }
            if job.held {
                found.push(format!("job {} is left held", job.job_id));
            }
        }
        for (workflow, status, attempts) in &self.workflows {
            if status != "completed" {
                found.push(format!("workflow {workflow} is {status}, not completed"));
            }
            let job_restarts: u32 = self
                .jobs
                .iter()
                .filter(|job| attempts.contains(&job.job_id))
                .map(|job| job.restart_count)
                .sum();
            let done: Vec<&StoredAction> = self
                .actions
                .iter()
                .filter(|action| {
                    action.workflow_id == *workflow
                        && action.state == "done"
                        && RESTARTS.contains(&action.kind.as_str())
                })
                .collect();
            // No action run twice, none lost: the scheduler's restarts are the store's done actions.
            if done.len() as u32 != job_restarts {
                found.push(format!(
                    "workflow {workflow}: the scheduler restarted it {job_restarts} times, the store has {} done restarts",
                    done.len()
                ));
            }
            let mut per_attempt = BTreeSet::new();
            for action in &done {
                if !per_attempt.insert(action.attempt_index) {
                    found.push(format!(
                        "workflow {workflow}: attempt {} was restarted twice",
                        action.attempt_index
                    ));
                }
            }
            // No decision lost or taken twice: each attempt but the last failed once, and only once.
            let mut failed = BTreeMap::new();
            for (failed_workflow, attempt) in &self.failures {
                if failed_workflow == workflow {
                    *failed.entry(*attempt).or_insert(0) += 1;
                }
            }
            for attempt in 0..attempts.len().saturating_sub(1) as i64 {
                match failed.get(&attempt) {
                    None => found.push(format!(
                        "workflow {workflow}: attempt {attempt} was restarted with no failure recorded"
                    )),
                    Some(n) if *n > 1 => found.push(format!(
                        "workflow {workflow}: attempt {attempt} has {n} failures recorded"
                    )),
                    Some(_) => {}
                }
            }
        }
        for action in &self.actions {
            if matches!(action.state.as_str(), "approved" | "executing") {
                found.push(format!(
                    "action {} ({}) is left {}",
                    action.id, action.kind, action.state
                ));
            }
        }
        // No alert lost: each notification but a notice is queued, and each queued one is delivered
        // (or dropped on purpose as a duplicate); the receiver saw each delivered one.
        for (notification, event) in &self.notifications {
            if event == "notice" {
                continue;
            }
            if !self
                .deliveries
                .iter()
                .any(|delivery| delivery.notification_id == *notification)
            {
                found.push(format!(
                    "notification {notification} ({event}) was never queued"
                ));
            }
        }
        let mut expected = BTreeSet::new();
        for delivery in &self.deliveries {
            match delivery.state.as_str() {
                "delivered" => {
                    expected.insert(key(&delivery.channel, delivery.notification_id));
                }
                "dropped" => {}
                state => found.push(format!(
                    "alert {} ({}) is {state}",
                    delivery.notification_id, delivery.event
                )),
            }
        }
        for key in &expected {
            if !self.received.contains_key(key) {
                found.push(format!(
                    "alert {key} is recorded delivered but never arrived"
                ));
            }
        }
        // No alert sent twice: the receiver keeps one request per key, so a key must name one alert.
        for key in self.received.keys() {
            if !expected.contains(key) {
                found.push(format!(
                    "the receiver got {key:?}, which no delivered alert has"
                ));
            }
        }
        found
    }

    /// Requests the receiver got again for a key it already had (a crash between a send and its
    /// record); the key lets the receiver keep one.
    pub fn repeats(&self) -> usize {
        self.received.values().map(|n| n - 1).sum()
    }
}

/// The idempotency key the engine sends with alert `notification` on `channel`.
pub fn key(channel: &str, notification: i64) -> String {
    format!("runguard-{channel}-{notification}")
}

/// The store's side of the facts.
pub fn read_store(db: &Path, facts: &mut Facts) -> rusqlite::Result<()> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let mut workflows = conn.prepare("SELECT id, status FROM workflows ORDER BY id")?;
    let rows: Vec<(i64, String)> = workflows
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (id, status) in rows {
        let mut attempts =
            conn.prepare("SELECT job_id FROM attempts WHERE workflow_id = ?1 ORDER BY idx")?;
        let jobs = attempts
            .query_map([id], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        facts.workflows.push((id, status, jobs));
    }
    let mut actions = conn
        .prepare("SELECT id, workflow_id, attempt_index, kind, state FROM actions ORDER BY id")?;
    facts.actions = actions
        .query_map([], |row| {
            Ok(StoredAction {
                id: row.get(0)?,
                workflow_id: row.get(1)?,
                attempt_index: row.get(2)?,
                kind: row.get(3)?,
                state: row.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    // A failure is recorded as an anomaly with its attribution, in one transaction.
    let mut failures = conn.prepare(
        "SELECT workflow_id, attempt_index FROM attributions ORDER BY workflow_id, attempt_index",
    )?;
    facts.failures = failures
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut notifications = conn.prepare("SELECT id, event FROM notifications ORDER BY id")?;
    facts.notifications = notifications
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut deliveries = conn.prepare(
        "SELECT notification_id, channel, event, state FROM alert_deliveries ORDER BY id",
    )?;
    facts.deliveries = deliveries
        .query_map([], |row| {
            Ok(StoredDelivery {
                notification_id: row.get(0)?,
                channel: row.get(1)?,
                event: row.get(2)?,
                state: row.get(3)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(())
}

/// The simulated cluster's own record (`state.json`): its jobs, their restarts and how they ended.
pub fn read_sim_state(path: &Path) -> Result<Vec<SchedulerJob>, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("{}: {err}", path.display()))?;
    let state: serde_json::Value =
        serde_json::from_str(&text).map_err(|err| format!("{}: {err}", path.display()))?;
    let jobs = state["jobs"]
        .as_array()
        .ok_or_else(|| format!("{}: no jobs", path.display()))?;
    Ok(jobs
        .iter()
        .map(|job| SchedulerJob {
            job_id: job["id"].to_string(),
            restart_count: job["restart_count"].as_u64().unwrap_or(u64::MAX) as u32,
            completed: job["phase"] == "Completed",
            // The simulated scheduler has no holds: its requeue is one step.
            held: false,
        })
        .collect())
}

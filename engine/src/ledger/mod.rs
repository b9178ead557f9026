//! The node ledger as pure functions: a node's score from its incidents, and the moves between its
//! states (healthy → suspect → quarantined → probation → healthy). No I/O and no clock of its own: the
//! engine records incidents, calls these, and carries out what a move asks for.

mod rules;

pub use rules::Rules;

use chrono::{DateTime, TimeDelta, Utc};

use crate::model::{NodeIncident, NodeRecord, NodeState};

/// When quarantined nodes are checked and how long their probation lasts (`[ledger]` of the config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// First health check after a node is quarantined.
    pub first_check: TimeDelta,
    /// Longest wait between two checks of a node that keeps failing them (the wait doubles).
    pub max_check_interval: TimeDelta,
    /// Probation after the first return to service; doubled with every later quarantine.
    pub probation: TimeDelta,
}

/// A node's score at `now`: the weights of the incidents counted since its last return to service, each
/// halved every half-life.
pub fn score(
    record: &NodeRecord,
    incidents: &[NodeIncident],
    now: DateTime<Utc>,
    rules: &Rules,
) -> f64 {
    let half_life = rules.half_life_hours.max(0.01) * 3600.0;
    counted(record, incidents)
        .map(|incident| {
            let age = (now - incident.time).num_milliseconds().max(0) as f64 / 1000.0;
            incident.weight * 0.5f64.powf(age / half_life)
        })
        .sum()
}

/// The incidents that still count: those since the node last returned to service.
fn counted<'a>(
    record: &'a NodeRecord,
    incidents: &'a [NodeIncident],
) -> impl Iterator<Item = &'a NodeIncident> {
    incidents.iter().filter(move |incident| {
        incident.node == record.node && record.counted_from.is_none_or(|from| incident.time >= from)
    })
}

/// Moves `record` to the state its incidents call for at `now`; returns the state it left, when it
/// moved. A quarantined node stays quarantined whatever its score: only a passed health check (or the
/// user) lets it back.
pub fn reassess(
    record: &mut NodeRecord,
    incidents: &[NodeIncident],
    now: DateTime<Utc>,
    rules: &Rules,
    schedule: &Schedule,
) -> Option<NodeState> {
    let before = record.state;
    match record.state {
        NodeState::Quarantined => return None,
        NodeState::Probation => {
            let relapse = counted(record, incidents)
                .filter(|incident| incident.time >= record.since)
                .find(|incident| {
                    incident.fatal || incident.weight >= rules.probation_relapse_weight
                });
            if let Some(incident) = relapse {
                let reason = format!(
                    "{} again during probation ({})",
                    incident.kind,
                    describe(incident)
                );
                quarantine(record, reason, now, schedule);
            } else if record.probation_until.is_some_and(|until| now >= until) {
                record.state = NodeState::Healthy;
                record.reason = "probation passed without a new fault".to_string();
                record.probation_until = None;
                record.since = now;
            }
        }
        NodeState::Healthy | NodeState::Suspect => {
            let total = score(record, incidents, now, rules);
            let fatal = counted(record, incidents).find(|incident| incident.fatal);
            if let Some(incident) = fatal {
                let reason = format!("fatal {}: {}", incident.kind, describe(incident));
                quarantine(record, reason, now, schedule);
            } else if total >= rules.quarantine_score {
                let reason = format!(
                    "score {total:.1} ≥ {:.1}: {}",
                    rules.quarantine_score,
                    summary(record, incidents)
                );
                quarantine(record, reason, now, schedule);
            } else if total >= rules.suspect_score {
                if record.state != NodeState::Suspect {
                    record.state = NodeState::Suspect;
                    record.since = now;
                }
                record.reason = format!("score {total:.1}: {}", summary(record, incidents));
            } else if record.state == NodeState::Suspect {
                record.state = NodeState::Healthy;
                record.reason = format!("score {total:.1}: old incidents have faded");
                record.since = now;
            }
        }
    }
    record.updated_at = now;
    (record.state != before).then_some(before)
}

/// A health check of a quarantined node ended: passed, it returns to service on probation (longer with
/// every quarantine); failed, it is checked again after twice the last wait.
pub fn after_check(
    record: &mut NodeRecord,
    passed: bool,
    now: DateTime<Utc>,
    schedule: &Schedule,
) -> Option<NodeState> {
    if record.state != NodeState::Quarantined {
        return None;
    }
    if passed {
        return_to_service(record, "the health check passed", now, schedule);
        return Some(NodeState::Quarantined);
    }
    record.failed_checks = record.failed_checks.saturating_add(1);
    let doubled = schedule.first_check * 2i32.saturating_pow(record.failed_checks.min(20));
    record.next_check_at = Some(now + doubled.min(schedule.max_check_interval));
    record.updated_at = now;
    None
}

/// The user let a quarantined node back (`runguard nodes --release`): as a passed check would.
pub fn release(
    record: &mut NodeRecord,
    now: DateTime<Utc>,
    schedule: &Schedule,
) -> Option<NodeState> {
    if record.state != NodeState::Quarantined {
        return None;
    }
    return_to_service(record, "released by the user", now, schedule);
    Some(NodeState::Quarantined)
}

fn return_to_service(record: &mut NodeRecord, why: &str, now: DateTime<Utc>, schedule: &Schedule) {
    let factor = 2i32.saturating_pow(record.quarantines.saturating_sub(1).min(20));
    let probation = schedule.probation * factor;
    record.state = NodeState::Probation;
    record.since = now;
    record.counted_from = Some(now);
    record.next_check_at = None;
    record.failed_checks = 0;
    record.probation_until = Some(now + probation);
    record.reason = format!(
        "{why}; on probation for {} h",
        (probation.num_minutes() as f64 / 60.0 * 10.0).round() / 10.0
    );
    record.updated_at = now;
}

fn quarantine(record: &mut NodeRecord, reason: String, now: DateTime<Utc>, schedule: &Schedule) {
    record.state = NodeState::Quarantined;
    record.since = now;
    record.reason = reason;
    record.quarantines = record.quarantines.saturating_add(1);
    record.failed_checks = 0;
    record.probation_until = None;
    record.next_check_at = Some(now + schedule.first_check);
}

fn describe(incident: &NodeIncident) -> String {
    let job = incident
        .job_id
        .as_deref()
        .map(|job| format!(" under job {job}"))
        .unwrap_or_default();
    format!("{}{job}", incident.source.as_str().replace('_', " "))
}

/// The kinds of the counted incidents, most frequent first: `nccl_timeout ×2, thermal`.
fn summary(record: &NodeRecord, incidents: &[NodeIncident]) -> String {
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for incident in counted(record, incidents) {
        match kinds.iter_mut().find(|(kind, _)| *kind == incident.kind) {
            Some((_, count)) => *count += 1,
            None => kinds.push((incident.kind.clone(), 1)),
        }
    }
    kinds.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    kinds
        .iter()
        .map(|(kind, count)| match count {
            1 => kind.clone(),
            n => format!("{kind} ×{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;

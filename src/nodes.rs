//! `runguard nodes`: the node ledger as a table or JSON — each node's state, score and why, and its
//! history of incidents.

use chrono::{DateTime, Utc};
use serde::Serialize;

use runguard_engine::ledger::{self, Rules};
use runguard_engine::model::{NodeIncident, NodeRecord};
use runguard_engine::store::{Db, StoreError};

/// Incidents listed per node, newest first.
pub const HISTORY: usize = 20;

/// One node of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeView {
    #[serde(flatten)]
    pub record: NodeRecord,
    /// Its score now (incidents since its last return, aged).
    pub score: f64,
    pub incident_count: usize,
    /// The latest incidents, newest first.
    pub incidents: Vec<NodeIncident>,
}

/// Every node the ledger knows, quarantined first, then by score.
pub fn report(db: &Db<'_>, now: DateTime<Utc>) -> Result<Vec<NodeView>, StoreError> {
    let mut views = Vec::new();
    for record in db.node_records()? {
        let incidents = db.node_incidents(&record.node)?;
        let score = ledger::score(&record, &incidents, now, Rules::standard());
        views.push(NodeView {
            score: (score * 100.0).round() / 100.0,
            incident_count: incidents.len(),
            incidents: incidents.into_iter().rev().take(HISTORY).collect(),
            record,
        });
    }
    views.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then(b.score.total_cmp(&a.score))
            .then(a.record.node.cmp(&b.record.node))
    });
    Ok(views)
}

fn rank(view: &NodeView) -> u8 {
    use runguard_engine::model::NodeState::*;
    match view.record.state {
        Quarantined => 0,
        Probation => 1,
        Suspect => 2,
        Healthy => 3,
    }
}

/// The table `runguard nodes` prints.
pub fn render(views: &[NodeView], now: DateTime<Utc>) -> String {
    if views.is_empty() {
        return "no node has had an incident yet\n".to_string();
    }
    let mut out = format!(
        "{:<16} {:<12} {:>6} {:>9}  {:<10} {:<20} reason\n",
        "node", "state", "score", "incidents", "since", "next"
    );
    for view in views {
        let record = &view.record;
        let next = match (record.next_check_at, record.probation_until) {
            (Some(at), _) => format!("check {}", ago(at, now)),
            (None, Some(until)) => format!("free {}", ago(until, now)),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{:<16} {:<12} {:>6.1} {:>9}  {:<10} {:<20} {}\n",
            record.node,
            record.state.as_str(),
            view.score,
            view.incident_count,
            ago(record.since, now),
            next,
            record.reason
        ));
        if let Some(reason) = &record.drain_reason {
            out.push_str(&format!("{:<16} drained by runguard: {reason}\n", ""));
        }
        for incident in view.incidents.iter().take(5) {
            out.push_str(&format!("{:<16} {}\n", "", incident_line(incident)));
        }
    }
    out
}

/// One incident as a line: `03-01 12:00:00 xid_79  6.0 node_signal (job 4201)`.
pub fn incident_line(incident: &NodeIncident) -> String {
    format!(
        "{} {:<18} {:>4.1} {}{}",
        incident.time.format("%m-%d %H:%M:%S"),
        incident.kind,
        incident.weight,
        incident.source.as_str(),
        incident
            .job_id
            .as_deref()
            .map(|job| format!(" (job {job})"))
            .unwrap_or_default()
    )
}

/// `5m ago`, `in 2h`.
fn ago(time: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - time).num_seconds();
    let (amount, future) = (secs.unsigned_abs(), secs < 0);
    let text = match amount {
        0..60 => format!("{amount}s"),
        60..3600 => format!("{}m", amount / 60),
        3600..86400 => format!("{}h", amount / 3600),
        _ => format!("{}d", amount / 86400),
    };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeDelta, TimeZone};
    use runguard_engine::model::{IncidentSource, NodeState};

    #[test]
    fn quarantined_nodes_come_first_with_their_history() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let mut quarantined = NodeRecord::new("n2", now - TimeDelta::minutes(10));
        quarantined.state = NodeState::Quarantined;
        quarantined.reason = "fatal xid_79".into();
        quarantined.next_check_at = Some(now + TimeDelta::minutes(5));
        quarantined.drain_reason = Some("runguard: quarantined (fatal xid_79)".into());
        let views = vec![NodeView {
            record: quarantined,
            score: 6.0,
            incident_count: 1,
            incidents: vec![NodeIncident {
                id: 1,
                node: "n2".into(),
                time: now - TimeDelta::minutes(10),
                source: IncidentSource::NodeSignal,
                kind: "xid_79".into(),
                weight: 6.0,
                fatal: true,
                workflow_id: Some(1),
                attempt_index: Some(0),
                job_id: Some("4201".into()),
                evidence: vec![],
            }],
        }];
        let text = render(&views, now);
        assert!(text.contains("n2               quarantined"), "{text}");
        assert!(text.contains("check in 5m"), "{text}");
        assert!(text.contains("drained by runguard"), "{text}");
        assert!(
            text.contains("xid_79") && text.contains("(job 4201)"),
            "{text}"
        );
    }
}

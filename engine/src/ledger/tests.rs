use chrono::{DateTime, TimeDelta, TimeZone, Utc};

use super::*;
use crate::model::IncidentSource;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

fn schedule() -> Schedule {
    Schedule {
        first_check: TimeDelta::minutes(5),
        max_check_interval: TimeDelta::hours(1),
        probation: TimeDelta::hours(24),
    }
}

fn incident(kind: &str, weight: f64, fatal: bool, at: DateTime<Utc>) -> NodeIncident {
    NodeIncident {
        id: 0,
        node: "n2".to_string(),
        time: at,
        source: IncidentSource::Attribution,
        kind: kind.to_string(),
        weight,
        fatal,
        workflow_id: Some(1),
        attempt_index: Some(0),
        job_id: Some("42".to_string()),
        evidence: Vec::new(),
    }
}

#[test]
fn one_fatal_gpu_fault_quarantines_the_node_at_once() {
    let mut record = NodeRecord::new("n2", t0());
    let incidents = [incident("xid_79", 6.0, true, t0())];
    let left = reassess(
        &mut record,
        &incidents,
        t0(),
        Rules::standard(),
        &schedule(),
    );
    assert_eq!(left, Some(NodeState::Healthy));
    assert_eq!(record.state, NodeState::Quarantined);
    assert_eq!(record.quarantines, 1);
    assert_eq!(record.next_check_at, Some(t0() + TimeDelta::minutes(5)));
    assert!(record.reason.contains("xid_79"), "{}", record.reason);
}

#[test]
fn a_node_only_named_in_a_timeout_is_suspect_and_repeated_suspicion_quarantines_it() {
    let rules = Rules::standard();
    let mut record = NodeRecord::new("n2", t0());
    let mut incidents = vec![incident("nccl_timeout", 1.0, false, t0())];
    reassess(&mut record, &incidents, t0(), rules, &schedule());
    assert_eq!(record.state, NodeState::Suspect);
    // Six more within the hour: repeated suspicion (the first have faded a little meanwhile).
    for minutes in 1..=6 {
        let at = t0() + TimeDelta::minutes(minutes * 10);
        incidents.push(incident("nccl_timeout", 1.0, false, at));
        reassess(&mut record, &incidents, at, rules, &schedule());
    }
    assert_eq!(record.state, NodeState::Quarantined, "{}", record.reason);
    assert!(
        record.reason.contains("nccl_timeout ×7"),
        "{}",
        record.reason
    );
}

#[test]
fn incidents_fade_with_their_half_life_and_a_suspect_becomes_healthy_again() {
    let rules = Rules::standard();
    let mut record = NodeRecord::new("n2", t0());
    let incidents = [incident("nvlink", 3.0, false, t0())];
    reassess(&mut record, &incidents, t0(), rules, &schedule());
    assert_eq!(record.state, NodeState::Suspect);
    let half_life = TimeDelta::minutes((rules.half_life_hours * 60.0) as i64);
    let halved = score(&record, &incidents, t0() + half_life, rules);
    assert!((halved - 1.5).abs() < 1e-6, "{halved}");
    let later = t0() + half_life * 3;
    let left = reassess(&mut record, &incidents, later, rules, &schedule());
    assert_eq!(left, Some(NodeState::Suspect));
    assert_eq!(record.state, NodeState::Healthy);
}

#[test]
fn a_quarantined_node_stays_out_until_a_check_passes_then_serves_a_probation() {
    let rules = Rules::standard();
    let mut record = NodeRecord::new("n2", t0());
    let incidents = [incident("xid_79", 6.0, true, t0())];
    reassess(&mut record, &incidents, t0(), rules, &schedule());
    // A month later the score has faded, but nothing has shown the node is well.
    let month = t0() + TimeDelta::days(30);
    assert_eq!(
        reassess(&mut record, &incidents, month, rules, &schedule()),
        None
    );
    assert_eq!(record.state, NodeState::Quarantined);

    // Failed checks back off: 10, 20, 40 minutes, then the hour's cap.
    let mut now = t0() + TimeDelta::minutes(5);
    for expected in [10, 20, 40, 60, 60] {
        after_check(&mut record, false, now, &schedule());
        assert_eq!(
            record.next_check_at,
            Some(now + TimeDelta::minutes(expected))
        );
        now += TimeDelta::minutes(expected);
    }
    assert_eq!(
        after_check(&mut record, true, now, &schedule()),
        Some(NodeState::Quarantined)
    );
    assert_eq!(record.state, NodeState::Probation);
    assert_eq!(record.probation_until, Some(now + TimeDelta::hours(24)));
    // The fault before the return no longer counts.
    assert_eq!(score(&record, &incidents, now, rules), 0.0);
    let after = now + TimeDelta::hours(25);
    assert_eq!(
        reassess(&mut record, &incidents, after, rules, &schedule()),
        Some(NodeState::Probation)
    );
    assert_eq!(record.state, NodeState::Healthy);
}

#[test]
fn a_node_that_fails_again_during_probation_goes_back_for_a_longer_probation() {
    let rules = Rules::standard();
    let mut record = NodeRecord::new("n2", t0());
    let mut incidents = vec![incident("xid_79", 6.0, true, t0())];
    reassess(&mut record, &incidents, t0(), rules, &schedule());
    let back = t0() + TimeDelta::hours(1);
    after_check(&mut record, true, back, &schedule());
    assert_eq!(record.probation_until, Some(back + TimeDelta::hours(24)));

    // A timeout that only names the node during probation is enough to send it back.
    let relapse = back + TimeDelta::hours(2);
    incidents.push(incident("nccl_timeout", 1.0, false, relapse));
    let left = reassess(&mut record, &incidents, relapse, rules, &schedule());
    assert_eq!(left, Some(NodeState::Probation));
    assert_eq!(record.state, NodeState::Quarantined);
    assert_eq!(record.quarantines, 2);
    assert!(
        record.reason.contains("during probation"),
        "{}",
        record.reason
    );

    let again = relapse + TimeDelta::hours(1);
    after_check(&mut record, true, again, &schedule());
    assert_eq!(record.probation_until, Some(again + TimeDelta::hours(48)));
}

#[test]
fn a_small_precursor_during_probation_does_not_send_the_node_back() {
    let rules = Rules::standard();
    let mut record = NodeRecord::new("n2", t0());
    let mut incidents = vec![incident("xid_79", 6.0, true, t0())];
    reassess(&mut record, &incidents, t0(), rules, &schedule());
    let back = t0() + TimeDelta::hours(1);
    release(&mut record, back, &schedule());
    assert_eq!(record.state, NodeState::Probation);
    incidents.push(incident(
        "ecc_correctable",
        0.5,
        false,
        back + TimeDelta::hours(1),
    ));
    reassess(
        &mut record,
        &incidents,
        back + TimeDelta::hours(1),
        rules,
        &schedule(),
    );
    assert_eq!(record.state, NodeState::Probation);
}

#[test]
fn other_nodes_incidents_do_not_count() {
    let rules = Rules::standard();
    let record = NodeRecord::new("n3", t0());
    let incidents = [incident("xid_79", 6.0, true, t0())];
    assert_eq!(score(&record, &incidents, t0(), rules), 0.0);
}

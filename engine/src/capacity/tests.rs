//! The report on one hand-built day whose every figure can be checked with a pencil (the comments do).
#![allow(clippy::unwrap_used)]

use chrono::{DateTime, TimeDelta, Utc};

use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(&format!("2026-03-{text}:00Z"))
        .unwrap()
        .with_timezone(&Utc)
}

fn day() -> Window {
    Window {
        from: at("02T00:00"),
        to: at("03T00:00"),
    }
}

fn wait(partition: &str, submitted: &str, started: Option<&str>) -> QueueWait {
    QueueWait {
        partition: Some(partition.to_string()),
        gpus: 8,
        submitted: at(submitted),
        started: started.map(at),
        requeued: false,
    }
}

fn job(time: &str, id: &str, pending: bool, gpus: u32) -> QueueSample {
    QueueSample {
        time: at(time),
        job_id: id.to_string(),
        partition: Some("train".to_string()),
        pending,
        reason: pending.then(|| "Resources".to_string()),
        gpus,
    }
}

fn node(
    time: &str,
    name: &str,
    partition: &str,
    state: NodeUse,
    reason: Option<&str>,
) -> NodeSample {
    NodeSample {
        time: at(time),
        seconds: 3600.0,
        node: name.to_string(),
        partition: Some(partition.to_string()),
        state,
        gpus: 8,
        gpus_allocated: if state == NodeUse::Allocated { 8 } else { 0 },
        reason: reason.map(str::to_string),
    }
}

fn recovery(failed: &str, response_minutes: i64, gpus: u32, load_minutes: i64) -> RecoveryTime {
    RecoveryTime {
        failed_at: at(failed),
        gpus,
        response: Some(TimeDelta::minutes(response_minutes)),
        checkpoint_load: Some(TimeDelta::minutes(load_minutes)),
    }
}

/// One Monday: train jobs wait 60, 20 and 10 min, a debug job 5, one train job still waits; at 09:00
/// a train job waits for 16 GPUs while n2's 8 are free and n4 is quarantined until 15:00; two
/// recoveries, one faster than the two-hour baseline and one slower.
fn monday() -> CapacityHistory {
    let nodes_at_nine = vec![
        node("02T09:00", "n1", "train", NodeUse::Allocated, None),
        node("02T09:00", "n2", "train", NodeUse::Idle, None),
        node("02T09:00", "n3", "debug", NodeUse::Idle, None),
        node(
            "02T09:00",
            "n4",
            "train",
            NodeUse::Drained,
            Some("runguard: gpu"),
        ),
    ];
    let nodes_at_three = ["n1", "n2", "n4"]
        .into_iter()
        .map(|n| node("02T15:00", n, "train", NodeUse::Idle, None))
        .chain([node("02T15:00", "n3", "debug", NodeUse::Idle, None)]);
    let nodes: Vec<NodeSample> = nodes_at_nine.into_iter().chain(nodes_at_three).collect();
    CapacityHistory {
        waits: vec![
            wait("train", "02T09:00", Some("02T10:00")),
            wait("train", "02T09:30", Some("02T09:50")),
            wait("train", "02T14:00", Some("02T14:10")),
            wait("debug", "02T09:00", Some("02T09:05")),
            wait("train", "02T23:00", None),
            wait("train", "01T09:00", Some("01T12:00")),
        ],
        instants: vec![
            Instant {
                time: at("02T09:00"),
                seconds: 3600.0,
            },
            Instant {
                time: at("02T15:00"),
                seconds: 3600.0,
            },
        ],
        queue: vec![
            job("02T09:00", "a", true, 16),
            job("02T09:00", "b", false, 16),
        ],
        quarantines: quarantines_from_node_samples(&nodes),
        nodes,
        recoveries: vec![
            recovery("02T09:10", 10, 16, 6),
            recovery("02T23:59", 150, 8, 4),
            recovery("01T12:00", 10, 8, 4),
        ],
        runs: vec![
            RunSpan {
                nodes: 2,
                start: at("02T00:00"),
                end: at("02T20:00"),
            },
            RunSpan {
                nodes: 1,
                start: at("02T12:00"),
                end: at("03T12:00"),
            },
        ],
        save_minutes: Vec::new(),
    }
}

fn report() -> CapacityReport {
    build(&monday(), day(), saved::DEFAULT_BASELINE, at("03T00:00"))
}

fn close(actual: f64, expected: f64) {
    assert!(
        (actual - expected).abs() < 1e-9,
        "{actual} is not {expected}"
    );
}

#[test]
fn waits_by_partition_and_hour_of_day() {
    let waits = report().waits;
    // 60, 20, 10 and 5 min started; the train job of the day before is outside the window.
    assert_eq!(waits.all.started, 4);
    assert_eq!(waits.all.still_waiting, 1);
    close(waits.all.mean_minutes, 23.75);
    close(waits.all.median_minutes, 10.0);
    close(waits.all.p90_minutes, 60.0);
    let train = waits
        .partitions
        .iter()
        .find(|p| p.partition == "train")
        .unwrap();
    assert_eq!((train.started, train.still_waiting), (3, 1));
    close(train.median_minutes, 20.0);
    close(train.by_hour[9].unwrap(), 40.0);
    close(train.by_hour[14].unwrap(), 10.0);
    assert_eq!(train.by_hour[10], None);
    // One pending job for one hour: all of it `Resources`.
    assert_eq!(waits.reasons.len(), 1);
    close(waits.reasons[0].job_hours, 1.0);
    close(waits.reasons[0].share, 1.0);
}

#[test]
fn the_peak_is_the_hour_demand_exceeded_the_gpus_in_service() {
    let peaks = report().peaks;
    // 09:00: 16 running + 16 waiting against n1, n2, n3 in service (24); 15:00: nothing asked, 32 in service.
    close(peaks.demand_by_hour[9], 32.0);
    close(peaks.capacity_by_hour[9].unwrap(), 24.0);
    close(peaks.capacity_by_hour[15].unwrap(), 32.0);
    assert_eq!(peaks.windows.len(), 1);
    assert_eq!(
        peaks.windows[0].hours,
        peaks::HourSpan { start: 9, end: 10 }
    );
    assert_eq!(peaks.quiet_slot, Some(peaks::HourSpan { start: 0, end: 4 }));
}

#[test]
fn idle_gpus_while_jobs_wait_count_only_nodes_that_could_run_them() {
    let idle = report().idle;
    // n2 (train, 8 free) for the hour job a waited; n3 is debug and n4 drained.
    close(idle.idle_while_waiting_gpu_hours, 8.0);
    close(idle.hours_with_waiting, 1.0);
    close(idle.idle_while_waiting_by_hour[9].unwrap(), 8.0);
    let hours = |state| {
        idle.gpu_hours_by_state
            .iter()
            .find(|s| s.state == state)
            .unwrap()
            .gpu_hours
    };
    close(hours(NodeUse::Allocated), 8.0);
    close(hours(NodeUse::Idle), 48.0);
    close(hours(NodeUse::Drained), 8.0);
    close(hours(NodeUse::Down), 0.0);
}

#[test]
fn lost_capacity_is_the_quarantine_spans_in_gpu_hours() {
    let report = report();
    // n4 drained by runguard from 09:00 until the 15:00 listing showed it back: 6 h × 8 GPUs.
    assert_eq!(report.lost.spans, 1);
    close(report.lost.gpu_hours, 48.0);
    // Of 32 GPUs listed × 24 h.
    close(report.lost_share, 48.0 / 768.0);
}

#[test]
fn an_administrators_drain_is_not_a_quarantine() {
    let nodes = vec![
        node(
            "02T09:00",
            "n5",
            "train",
            NodeUse::Drained,
            Some("maintenance"),
        ),
        node("02T10:00", "n5", "train", NodeUse::Idle, None),
        node(
            "02T11:00",
            "n6",
            "train",
            NodeUse::Down,
            Some("runguard: gpu"),
        ),
    ];
    let spans = quarantines_from_node_samples(&nodes);
    assert_eq!(spans.len(), 1);
    assert_eq!((spans[0].node.as_str(), spans[0].to), ("n6", None));
}

#[test]
fn saved_downtime_is_measured_against_the_baseline() {
    let saved = report().saved;
    // 120 − 10 = 110 min on 16 GPUs; the 150 min response saved nothing; the day before is outside.
    assert_eq!(saved.recoveries, 2);
    close(saved.saved_hours, 110.0 / 60.0);
    close(saved.saved_gpu_hours, 110.0 / 60.0 * 16.0);
    close(saved.mean_response_minutes, 80.0);
    close(saved.baseline_minutes, 120.0);
}

#[test]
fn recommendations_carry_their_formulas_figures() {
    let recommendations = report().recommendations;
    let pool = recommendations.reserve_pool.unwrap();
    // One failure in 24 h, out 6 h: μ = 0.25; P(0) = 0.78, P(≤1) = 0.97.
    assert_eq!(pool.failures, 1);
    close(pool.mean_out_at_once, 0.25);
    assert_eq!(pool.nodes, 1);
    let checkpoints = recommendations.checkpoints.unwrap();
    // Two failures in 40 + 12 node-hours; C = median(6, 4) by nearest rank = 4 min.
    close(checkpoints.cost_minutes, 4.0);
    assert_eq!(checkpoints.cost_measured_as, "load");
    close(checkpoints.failures_per_node_hour, 2.0 / 52.0);
    let one = &checkpoints.by_size[0];
    assert_eq!(one.nodes, 1);
    close(one.mtbf_hours, 26.0);
    close(one.interval_minutes, (2.0f64 * 4.0 * 26.0 * 60.0).sqrt());
    let peak = recommendations.peak_hours.unwrap();
    assert_eq!(peak.peak.start, 9);
    // The train partition is further over (32 asked for against 16) than the cluster (32 against
    // 24); its jobs submitted at 09:00 waited 60 and 20 min.
    assert_eq!(peak.partition.as_deref(), Some("train"));
    close(peak.peak_wait_minutes.unwrap(), 40.0);
    assert_eq!(recommendations.sentences.len(), 4);
    assert!(recommendations.sentences[0].contains("09:00–10:00 UTC"));
    assert!(recommendations.sentences[1].contains("keep 1 node spare"));
}

#[test]
fn an_empty_history_reports_nothing_to_recommend() {
    let report = build(
        &CapacityHistory::default(),
        day(),
        saved::DEFAULT_BASELINE,
        at("03T00:00"),
    );
    assert_eq!(report.waits.all.started, 0);
    assert!(report.peaks.windows.is_empty());
    assert_eq!(report.peaks.quiet_slot, None);
    assert_eq!(report.recommendations.reserve_pool, None);
    assert_eq!(report.recommendations.checkpoints, None);
    assert_eq!(report.recommendations.sentences.len(), 3);
}

#[test]
fn the_simulated_month_is_the_same_for_the_same_seed() {
    let a = simulated::month(7, at("02T00:00"), 3);
    let b = simulated::month(7, at("02T00:00"), 3);
    assert_eq!(a, b);
    assert_ne!(a.jobs, simulated::month(8, at("02T00:00"), 3).jobs);
    assert_eq!(a.instants.len(), 3 * 24 * 12);
}

#[test]
fn rare_failures_need_no_reserve_and_say_so() {
    let mut history = monday();
    history.quarantines = vec![QuarantineSpan {
        node: "n4".into(),
        gpus: 8,
        from: at("02T09:00"),
        to: Some(at("02T09:30")),
    }];
    let report = build(&history, day(), saved::DEFAULT_BASELINE, at("03T00:00"));
    // μ = 1/24 × 0.5 h ≈ 0.02: P(0) ≈ 0.98 already covers 95% of hours.
    assert_eq!(report.recommendations.reserve_pool.unwrap().nodes, 0);
    assert!(report.recommendations.sentences[1].starts_with("Reserve pool: no spare node"));
}

#[test]
fn time_slots_are_not_advised_when_the_quiet_hours_wait_as_long() {
    let mut history = monday();
    // A job submitted at 01:00, in the quiet slot, waits five hours.
    history
        .waits
        .push(wait("train", "02T01:00", Some("02T06:00")));
    let report = build(&history, day(), saved::DEFAULT_BASELINE, at("03T00:00"));
    let advice = report.recommendations.peak_hours.unwrap();
    close(advice.quiet_wait_minutes.unwrap(), 300.0);
    assert!(
        report.recommendations.sentences[0].contains("time slots would not help"),
        "{}",
        report.recommendations.sentences[0]
    );
}

#[test]
fn a_node_listed_without_a_partition_can_run_any_waiting_job() {
    let mut history = monday();
    for node in &mut history.nodes {
        node.partition = None;
    }
    let report = build(&history, day(), saved::DEFAULT_BASELINE, at("03T00:00"));
    // n2 and n3 (8 free GPUs each) both count now.
    close(report.idle.idle_while_waiting_gpu_hours, 16.0);
}

#[test]
fn a_partition_can_peak_while_the_cluster_does_not() {
    let mut history = monday();
    // Two more debug nodes idle at 09:00: 40 GPUs in service against 32 asked for, but the train
    // partition's 16 (n1, n2) against its jobs' 32.
    for name in ["n5", "n6"] {
        history
            .nodes
            .push(node("02T09:00", name, "debug", NodeUse::Idle, None));
    }
    let report = build(&history, day(), saved::DEFAULT_BASELINE, at("03T00:00"));
    assert!(report.peaks.windows.is_empty());
    let train = report
        .peaks
        .partitions
        .iter()
        .find(|p| p.partition == "train")
        .unwrap();
    close(train.demand_by_hour[9], 32.0);
    close(train.capacity_by_hour[9].unwrap(), 16.0);
    assert_eq!(
        train.windows[0].hours,
        peaks::HourSpan { start: 9, end: 10 }
    );
    let advice = report.recommendations.peak_hours.unwrap();
    assert_eq!(advice.partition.as_deref(), Some("train"));
    // Train jobs submitted at 09:00 waited 60 and 20 min.
    close(advice.peak_wait_minutes.unwrap(), 40.0);
    assert!(
        report.recommendations.sentences[0]
            .starts_with("Peak hours of partition train: 09:00–10:00 UTC")
    );
}

#[test]
fn requeued_attempts_waits_are_shown_apart() {
    let mut history = monday();
    history.waits[1].requeued = true;
    let report = build(&history, day(), saved::DEFAULT_BASELINE, at("03T00:00"));
    let requeued = &report.waits.requeued;
    assert_eq!((requeued.started, requeued.still_waiting), (1, 0));
    close(requeued.median_minutes, 20.0);
    // Still counted with every other attempt.
    assert_eq!(report.waits.all.started, 4);
}

#[test]
fn a_recovery_runguard_did_not_restart_saved_nothing() {
    let mut history = monday();
    history.recoveries[0].response = None;
    let report = build(&history, day(), saved::DEFAULT_BASELINE, at("03T00:00"));
    // Only the 150 min response is left, which saved nothing; the failure still counts for λ.
    assert_eq!(report.saved.recoveries, 1);
    close(report.saved.saved_hours, 0.0);
    close(
        report
            .recommendations
            .checkpoints
            .unwrap()
            .failures_per_node_hour,
        2.0 / 52.0,
    );
}

#[test]
fn a_measured_save_is_the_checkpoint_cost_where_there_is_one() {
    let mut history = monday();
    // Saves of 1, 2 and 9 minutes: the median, 2, rather than the 4-minute loads.
    history.save_minutes = vec![9.0, 1.0, 2.0];
    let checkpoints = build(&history, day(), saved::DEFAULT_BASELINE, at("03T00:00"))
        .recommendations
        .checkpoints
        .unwrap();
    close(checkpoints.cost_minutes, 2.0);
    assert_eq!(checkpoints.cost_measured_as, "save");
    close(
        checkpoints.by_size[0].interval_minutes,
        (2.0f64 * 2.0 * 26.0 * 60.0).sqrt(),
    );
}

use super::*;
use crate::report::fixtures::{attempt, sample, t};

/// NCCL's completion error as node-07's rank 52 prints it when its link to node-08 dies.
const IB_STATUS_12: &str = "node-07:31337:32014 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.8<52347> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.7 remoteGidsfe80::";

fn catalog() -> Catalog {
    Catalog::builtin().unwrap()
}

fn line(at: i64, rank: u32, text: &str) -> EvidenceLine {
    EvidenceLine {
        time: t(at),
        rank: Some(rank),
        text: text.to_string(),
    }
}

/// A report every `gap` s from 0 to `until`, iteration by iteration.
fn reports(gap: i64, until: i64) -> Vec<ThroughputSample> {
    (1..=until / gap)
        .map(|n| sample(0, n as u64, n * gap, 400.0))
        .collect()
}

/// A running attempt on node-05..08 whose last report arrived at `progress` and whose log last grew
/// at `log`.
fn running(progress: i64, log: i64) -> Attempt {
    let mut running = attempt(0, JobState::Running, [Some(0), Some(0), None]);
    running.nodes = ["node-05", "node-06", "node-07", "node-08"]
        .map(String::from)
        .to_vec();
    running.last_iteration = Some(50);
    running.last_progress_time = Some(t(progress));
    running.last_log_time = Some(t(log));
    running
}

/// The engine looking at the attempt at each of `times` (seconds), as it does every poll: when the
/// rule first fires, and what it says.
fn first_finding(
    attempt: &Attempt,
    lines: &[EvidenceLine],
    progress: &[ThroughputSample],
    times: impl IntoIterator<Item = i64>,
) -> Option<(i64, Finding)> {
    let catalog = catalog();
    let mut tracker = FatalLineTracker::default();
    times.into_iter().find_map(|now| {
        tracker
            .observe(
                attempt,
                &RunningLog { lines, progress },
                &catalog,
                t(now),
                &DetectConfig::default(),
            )
            .map(|finding| (now, finding))
    })
}

#[test]
fn a_fatal_ib_error_then_silence_fires_once_the_window_has_passed() {
    // A report every 2 s: the window is twice that, 4 s.
    let progress = reports(2, 100);
    let lines = [line(101, 52, IB_STATUS_12)];
    let attempt = running(100, 101);
    let (at, finding) =
        first_finding(&attempt, &lines, &progress, 101..200).expect("fires after 4 s");
    assert_eq!(at, 105);
    assert_eq!(finding.kind, AnomalyKind::Hang);
    assert_eq!(finding.node.as_deref(), Some("node-07"));
    assert!(
        finding.summary.contains("(status 12) on node-07")
            && finding.summary.contains("no progress for 4 s since")
            && finding.summary.contains("confirmation window 4 s"),
        "{}",
        finding.summary
    );
    assert!(finding.evidence[0].starts_with("52: node-07:"));
}

#[test]
fn a_fatal_line_followed_by_progress_never_fires() {
    let before = reports(2, 100);
    let lines = [line(101, 52, IB_STATUS_12)];
    let catalog = catalog();
    let config = DetectConfig::default();
    let mut tracker = FatalLineTracker::default();
    let mut look = |attempt: &Attempt, progress: &[ThroughputSample], now: i64| {
        tracker.observe(
            attempt,
            &RunningLog {
                lines: &lines,
                progress,
            },
            &catalog,
            t(now),
            &config,
        )
    };
    // Read at 101 and 103, within the window...
    assert!(look(&running(100, 101), &before, 101).is_none());
    assert!(look(&running(100, 101), &before, 103).is_none());
    // ...then the run went on: reports at 102 and 104, and it is simply between reports after.
    let mut after = before.clone();
    after.push(sample(0, 51, 102, 400.0));
    after.push(sample(0, 52, 104, 400.0));
    for now in [105, 110, 200, 5000] {
        assert!(look(&running(104, 104), &after, now).is_none(), "at {now}");
    }
}

#[test]
fn a_warning_that_is_not_fatal_never_fires() {
    let progress = reports(2, 100);
    let attempt = running(100, 101);
    for text in [
        // A connect NCCL retries.
        "node-07:31337:32014 [4] NCCL WARN Call to connect returned Connection refused, retrying",
        // A completion error whose status the catalog does not hold fatal.
        "node-07:31337:32014 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.8<52347> with status=1 opcode=0 len=0 vendor err 0 (Recv)",
        "NCCL INFO transport/net.cc:1298 -> 6",
    ] {
        let lines = [line(101, 52, text)];
        assert!(
            first_finding(&attempt, &lines, &progress, [101, 110, 5000]).is_none(),
            "{text}"
        );
    }
}

#[test]
fn each_fatal_form_the_catalog_marks_fires() {
    let progress = reports(2, 100);
    let attempt = running(100, 101);
    for text in [
        "node-07:31337:32014 [4] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5 ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "[rank3]:[E105 08:01:41.000000000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.",
    ] {
        let lines = [line(101, 3, text)];
        assert!(
            first_finding(&attempt, &lines, &progress, [101, 110]).is_some(),
            "{text}"
        );
    }
}

#[test]
fn a_line_from_before_the_last_report_is_history() {
    // An error at 50, then progress until 100: the silence after 100 is not the error's doing.
    let progress = reports(2, 100);
    let lines = [line(50, 52, IB_STATUS_12)];
    assert!(first_finding(&running(100, 100), &lines, &progress, [150, 200, 300]).is_none());
}

#[test]
fn the_window_counts_from_when_the_line_was_read_not_from_its_inherited_stamp() {
    // The line has no stamp of its own and carries the report's (100), but the engine reads it only
    // at 130: that it stopped the run is confirmed 4 s later, not at once.
    let progress = reports(2, 100);
    let lines = [line(100, 52, IB_STATUS_12)];
    let attempt = running(100, 130);
    let (at, finding) = first_finding(&attempt, &lines, &progress, (130..200).step_by(5))
        .expect("fires once confirmed");
    assert_eq!(at, 135);
    assert!(
        finding.summary.contains("read at 2026-01-05 08:02:10 UTC"),
        "{}",
        finding.summary
    );
}

#[test]
fn a_line_replaced_by_another_restarts_the_window() {
    let progress = reports(2, 100);
    let attempt = running(100, 101);
    let catalog = catalog();
    let mut tracker = FatalLineTracker::default();
    let config = DetectConfig::default();
    let mut look = |lines: &[EvidenceLine], now: i64| {
        tracker.observe(
            &attempt,
            &RunningLog {
                lines,
                progress: &progress,
            },
            &catalog,
            t(now),
            &config,
        )
    };
    assert!(look(&[line(101, 52, IB_STATUS_12)], 101).is_none());
    // The evidence was trimmed and another fatal line is the first now: it is new at 103.
    let other = "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.";
    assert!(look(&[line(102, 3, other)], 103).is_none());
    assert!(look(&[line(102, 3, other)], 106).is_none());
    assert!(look(&[line(102, 3, other)], 107).is_some());
}

#[test]
fn the_window_is_twice_the_median_gap_within_its_bounds() {
    let config = DetectConfig::default();
    assert_eq!(confirmation_window(&reports(1, 60), &config).secs, 3);
    assert_eq!(confirmation_window(&reports(2, 60), &config).secs, 4);
    let slow = confirmation_window(&reports(60, 600), &config);
    assert_eq!(slow.secs, 5, "{slow:?}");
    assert!(slow.basis.contains("at most"), "{slow:?}");
    let unknown = confirmation_window(&reports(60, 60), &config);
    assert_eq!(unknown.secs, 5);
    let wider = DetectConfig {
        fatal_confirm_max_secs: 300,
        ..DetectConfig::default()
    };
    assert_eq!(confirmation_window(&reports(60, 600), &wider).secs, 120);
}

#[test]
fn the_rule_is_off_at_a_zero_bound_and_for_an_attempt_not_running() {
    let progress = reports(2, 100);
    let lines = [line(101, 52, IB_STATUS_12)];
    let off = DetectConfig {
        fatal_confirm_max_secs: 0,
        ..DetectConfig::default()
    };
    let log = RunningLog {
        lines: &lines,
        progress: &progress,
    };
    let mut tracker = FatalLineTracker::default();
    for now in [101, 500] {
        assert!(
            tracker
                .observe(&running(100, 101), &log, &catalog(), t(now), &off)
                .is_none()
        );
    }
    assert!(tracker.is_idle());
    let mut ended = running(100, 101);
    ended.state = JobState::Failed;
    assert!(first_finding(&ended, &lines, &progress, [101, 500]).is_none());
}

#[test]
fn the_host_and_status_are_read_from_nccl_s_own_words() {
    assert_eq!(reporting_host(IB_STATUS_12), Some("node-07"));
    assert_eq!(reporting_host("NCCL WARN NET/IB : Got completion"), None);
    assert_eq!(reporting_host("a:b:c [0] NCCL WARN x"), None);
    assert_eq!(completion_status(IB_STATUS_12), Some(12));
    assert_eq!(
        completion_status("NET/IB : Got completion with error 13, opcode 0"),
        Some(13)
    );
    assert_eq!(completion_status("ncclRemoteError"), None);
}

#[test]
fn a_pending_confirmation_says_when_its_window_ends() {
    // A report every 2 s: the window is 4 s from when the line was read (103), not from its stamp.
    let progress = reports(2, 100);
    let lines = [line(101, 52, IB_STATUS_12)];
    let attempt = running(100, 101);
    let catalog = catalog();
    let log = RunningLog {
        lines: &lines,
        progress: &progress,
    };
    let config = DetectConfig::default();
    let mut tracker = FatalLineTracker::default();
    assert_eq!(tracker.due(), None);
    assert!(
        tracker
            .observe(&attempt, &log, &catalog, t(103), &config)
            .is_none()
    );
    assert_eq!(tracker.due(), Some(t(107)));
    // Looking again before then changes nothing; at the end it fires and nothing is pending.
    assert!(
        tracker
            .observe(&attempt, &log, &catalog, t(106), &config)
            .is_none()
    );
    assert_eq!(tracker.due(), Some(t(107)));
    assert!(
        tracker
            .observe(&attempt, &log, &catalog, t(107), &config)
            .is_some()
    );
    assert_eq!(tracker.due(), None);
    // Progress after the line: nothing pending either.
    let mut tracker = FatalLineTracker::default();
    let mut resumed = progress.clone();
    resumed.push(sample(0, 51, 102, 400.0));
    let log = RunningLog {
        lines: &lines,
        progress: &resumed,
    };
    assert!(
        tracker
            .observe(&attempt, &log, &catalog, t(103), &config)
            .is_none()
    );
    assert_eq!(tracker.due(), None);
}

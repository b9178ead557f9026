//! Correlation: attributions read together instead of one failure at a time.
//!
//! - Across attempts of one job: failures at about the same training step with different messages are
//!   one root cause. On different nodes each time, the cause follows the step, not the hardware (a bad
//!   batch, a code path): requeueing cannot help. On a node common to them all, that node is the culprit.
//! - Across jobs: several jobs failing on one node within a window point at the node, not at N bugs.

use chrono::{DateTime, TimeDelta, Utc};

use crate::model::{Attempt, Attribution, Component};

/// An earlier failure, with the attempt it ended.
#[derive(Debug, Clone)]
pub struct PastFailure<'a> {
    pub attempt: &'a Attempt,
    pub attribution: &'a Attribution,
}

/// Steps within this fraction of each other count as "about the same step".
const SAME_STEP_FRACTION: f64 = 0.02;
/// ...or within this many iterations, for short runs.
const SAME_STEP_ITERATIONS: u64 = 20;
/// Failures of other jobs on one node within this window point at the node.
pub const NODE_WINDOW: TimeDelta = TimeDelta::minutes(30);
/// How many other jobs must have failed on the node.
const NODE_FAILURES: usize = 2;

fn about_the_same(a: u64, b: u64) -> bool {
    let gap = a.abs_diff(b);
    gap <= SAME_STEP_ITERATIONS || (gap as f64) <= SAME_STEP_FRACTION * a.max(b) as f64
}

/// Folds this attempt's failure together with the job's earlier ones, when they failed at about the
/// same step with different messages. Returns the adjusted attribution, or None when nothing correlates.
pub fn across_attempts(
    current: &Attempt,
    attribution: &Attribution,
    earlier: &[PastFailure<'_>],
) -> Option<Attribution> {
    let step = current.last_iteration?;
    let same_step: Vec<&PastFailure<'_>> = earlier
        .iter()
        .filter(|past| past.attempt.index != current.index)
        .filter(|past| {
            past.attempt
                .last_iteration
                .is_some_and(|s| about_the_same(s, step))
        })
        .collect();
    if same_step.is_empty()
        || same_step
            .iter()
            .all(|past| past.attribution.category == attribution.category)
    {
        return None;
    }
    let mut folded = attribution.clone();
    let common_node = current.nodes.iter().find(|node| {
        same_step
            .iter()
            .all(|past| past.attempt.nodes.contains(node))
    });
    let steps: Vec<String> = same_step
        .iter()
        .map(|past| {
            format!(
                "attempt {} failed at iteration {} ({})",
                past.attempt.index,
                past.attempt.last_iteration.unwrap_or(0),
                past.attribution.category
            )
        })
        .collect();
    match common_node {
        Some(node) => {
            folded.culprit.node = Some(node.clone());
            folded.confidence = (folded.confidence + 0.1).min(0.95);
            folded.explanation = format!(
                "{} Earlier attempts failed at about the same step with other messages ({}), each time \
                 with {node} in the allocation: one fault on {node}, showing different symptoms.",
                folded.explanation,
                steps.join("; ")
            );
        }
        None => {
            folded.recoverable = false;
            folded.component = Component::Application;
            folded.explanation = format!(
                "{} Earlier attempts failed at about the same step on other nodes ({}): the failure \
                 follows the training step, not the hardware (a bad batch or a code path at that \
                 step), so requeueing again will not help.",
                folded.explanation,
                steps.join("; ")
            );
        }
    }
    folded
        .evidence
        .push(format!("correlated: {}", steps.join("; ")));
    Some(folded)
}

/// A failure of another job.
#[derive(Debug, Clone)]
pub struct OtherFailure<'a> {
    pub workflow_id: i64,
    pub nodes: &'a [String],
    pub time: DateTime<Utc>,
    /// What that failure was attributed to.
    pub category: &'a str,
    pub component: Component,
}

/// Whether a failure of this component says something about the node it ran on: the GPU, the network
/// link, the node itself or its storage, or nothing known. An application bug, bad data, a memory
/// limit or the scheduler's own decision is no evidence against a node.
pub fn speaks_of_node(component: Component) -> bool {
    matches!(
        component,
        Component::Gpu
            | Component::Network
            | Component::Infrastructure
            | Component::Storage
            | Component::None
    )
}

/// When other jobs failed on one of this attempt's nodes within [`NODE_WINDOW`] for reasons that speak
/// of the node, that node is the culprit and the failure is the node's: returns the adjusted
/// attribution. A failure that is not the node's own kind (an application error, an OOM) keeps its
/// attribution and recoverability; the correlation is reported beside it.
pub fn across_jobs(
    current: &Attempt,
    attribution: &Attribution,
    others: &[OtherFailure<'_>],
    now: DateTime<Utc>,
) -> Option<Attribution> {
    let recent: Vec<&OtherFailure<'_>> = others
        .iter()
        .filter(|other| other.workflow_id != current.workflow_id)
        .filter(|other| now - other.time <= NODE_WINDOW)
        .filter(|other| speaks_of_node(other.component))
        .collect();
    let (node, jobs) = current
        .nodes
        .iter()
        .map(|node| {
            let mut jobs: Vec<(i64, &str)> = recent
                .iter()
                .filter(|other| other.nodes.contains(node))
                .map(|other| (other.workflow_id, other.category))
                .collect();
            jobs.sort_unstable();
            jobs.dedup_by_key(|(workflow_id, _)| *workflow_id);
            (node, jobs)
        })
        .max_by_key(|(_, jobs)| jobs.len())?;
    if jobs.len() < NODE_FAILURES {
        return None;
    }
    let used = format!(
        "correlated: workflows {} also failed on {node}",
        jobs.iter()
            .map(|(id, category)| format!("{id} ({category})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut folded = attribution.clone();
    if !folded.recoverable || !speaks_of_node(folded.component) {
        // Beside, not over: what this job's own evidence says stands.
        folded.explanation = format!(
            "{} {} other jobs failed on {node} in the last {} minutes for reasons of the node; this \
             failure is not one, so it is not put on the node.",
            folded.explanation,
            jobs.len(),
            NODE_WINDOW.num_minutes()
        );
        folded.evidence.push(used);
        return Some(folded);
    }
    folded.culprit.node = Some(node.clone());
    if folded.component == Component::None {
        folded.category = "node_failure".to_string();
        folded.component = Component::Infrastructure;
    }
    folded.confidence = folded.confidence.max(0.8);
    folded.explanation = format!(
        "{} {} other jobs failed on {node} in the last {} minutes: the node is at fault, not each job.",
        folded.explanation,
        jobs.len(),
        NODE_WINDOW.num_minutes()
    );
    folded.evidence.push(used);
    Some(folded)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{Culprit, JobState};

    fn t(minutes: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
            + TimeDelta::minutes(minutes)
    }

    fn attempt(workflow_id: i64, index: u32, step: u64, nodes: &[&str]) -> Attempt {
        Attempt {
            workflow_id,
            index,
            job_id: "1".into(),
            restart_count: index,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            gpus: 16,
            state: JobState::Failed,
            state_raw: "FAILED".into(),
            reason: None,
            submit_time: None,
            start_time: None,
            end_time: None,
            exit_code: Some(1),
            excluded_nodes: vec![],
            log_path: None,
            last_log_time: None,
            last_iteration: Some(step),
            last_progress_time: None,
            updated_at: t(0),
        }
    }

    /// A plain attribution of workflow 1's first attempt (the policy tests start from it too).
    pub(crate) fn attribution(
        category: &str,
        component: Component,
        recoverable: bool,
    ) -> Attribution {
        Attribution {
            id: 0,
            workflow_id: 1,
            attempt_index: 0,
            category: category.into(),
            component,
            culprit: Culprit::default(),
            confidence: 0.6,
            recoverable,
            signature: None,
            explanation: "base.".into(),
            evidence: vec![],
            time: t(0),
            remedies: vec![],
        }
    }

    /// Folds a GPU fault of `second` into the NCCL timeout of `first`, an earlier attempt.
    fn fold(first: &Attempt, second: &Attempt) -> Option<Attribution> {
        let first_cause = attribution("nccl_timeout", Component::Network, true);
        let second_cause = attribution("gpu_fault", Component::Gpu, true);
        across_attempts(
            second,
            &second_cause,
            &[PastFailure {
                attempt: first,
                attribution: &first_cause,
            }],
        )
    }

    #[test]
    fn failures_at_the_same_step_on_other_nodes_follow_the_step_not_the_hardware() {
        let first = attempt(1, 0, 5000, &["node-01", "node-02"]);
        let second = attempt(1, 1, 5010, &["node-03", "node-04"]);
        let folded = fold(&first, &second).unwrap();
        assert!(!folded.recoverable);
        assert!(folded.explanation.contains("follows the training step"));
    }

    #[test]
    fn failures_at_the_same_step_with_a_node_in_common_blame_that_node() {
        let first = attempt(1, 0, 5000, &["node-01", "node-07"]);
        let second = attempt(1, 1, 4990, &["node-02", "node-07"]);
        let folded = fold(&first, &second).unwrap();
        assert_eq!(folded.culprit.node.as_deref(), Some("node-07"));
        assert!(folded.recoverable);
    }

    #[test]
    fn different_steps_or_the_same_message_do_not_correlate() {
        let first = attempt(1, 0, 1000, &["node-01"]);
        let second = attempt(1, 1, 5000, &["node-02"]);
        assert!(fold(&first, &second).is_none());
        let cause = attribution("nccl_timeout", Component::Network, true);
        let past = [PastFailure {
            attempt: &first,
            attribution: &cause,
        }];
        let same_step = attempt(1, 1, 1000, &["node-02"]);
        assert!(across_attempts(&same_step, &cause, &past).is_none());
    }

    #[test]
    fn several_jobs_failing_on_one_node_blame_the_node() {
        let current = attempt(3, 0, 100, &["node-05", "node-09"]);
        let cause = attribution("unknown", Component::None, true);
        let nodes_a = vec!["node-09".to_string(), "node-10".to_string()];
        let nodes_b = vec!["node-09".to_string()];
        let others = [
            OtherFailure {
                workflow_id: 1,
                nodes: &nodes_a,
                time: t(-10),
                category: "xid_79",
                component: Component::Gpu,
            },
            OtherFailure {
                workflow_id: 2,
                nodes: &nodes_b,
                time: t(-20),
                category: "unknown",
                component: Component::None,
            },
        ];
        let folded = across_jobs(&current, &cause, &others, t(0)).unwrap();
        assert_eq!(folded.culprit.node.as_deref(), Some("node-09"));
        assert_eq!(folded.category, "node_failure");
        // Outside the window, or only one other job: no correlation.
        assert!(across_jobs(&current, &cause, &others, t(60)).is_none());
        assert!(across_jobs(&current, &cause, &others[..1], t(0)).is_none());
    }

    #[test]
    fn a_failure_that_is_not_the_nodes_keeps_its_attribution_and_an_app_error_is_no_evidence() {
        let current = attempt(3, 0, 100, &["node-05", "node-09"]);
        let nodes = vec!["node-09".to_string()];
        let other = |workflow_id, category, component| OtherFailure {
            workflow_id,
            nodes: &nodes,
            time: t(-10),
            category,
            component,
        };
        let node_faults = [
            other(1, "xid_79", Component::Gpu),
            other(2, "nccl_error", Component::Network),
        ];
        // An OOM on a node where others had node faults: still an OOM, not recoverable, no culprit.
        let oom = attribution("host_oom", Component::HostMemory, false);
        let beside = across_jobs(&current, &oom, &node_faults, t(0)).unwrap();
        assert_eq!(beside.category, "host_oom");
        assert!(!beside.recoverable);
        assert_eq!(beside.culprit.node, oom.culprit.node);
        assert!(
            beside
                .evidence
                .iter()
                .any(|line| line.contains("1 (xid_79), 2 (nccl_error)")),
            "{:?}",
            beside.evidence
        );
        // Other jobs' application errors and OOMs say nothing about the node.
        let not_the_node = [
            other(1, "app_exception", Component::Application),
            other(2, "host_oom", Component::HostMemory),
        ];
        let unknown = attribution("unknown", Component::None, true);
        assert!(across_jobs(&current, &unknown, &not_the_node, t(0)).is_none());
    }
}

//! What the API server says about a workload as evidence lines in the form the catalog reads.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::events::{EventIndex, Listed};
use super::*;
use super::{nodes::*, pods::*, snapshot::*};

/// One line of evidence from the API (statuses, events, node conditions), in the form the signature
/// catalog reads: `kubernetes: TYPE REASON KIND/NAME: MESSAGE`. `key` says whether it was written already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceLine {
    pub key: String,
    pub text: String,
}

pub(super) fn line(kind_type: &str, reason: &str, object: &str, message: &str) -> String {
    let message: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("kubernetes: {kind_type} {reason} {object}: {message}")
}

/// What the API says about this incarnation of the workload that the logs may not: failed
/// containers, stuck pulls, lost nodes, the workload's failure condition and the events about it.
pub fn evidence(
    kind: WorkloadKind,
    workload: &Value,
    pods: &[&Value],
    nodes: &[Value],
    events: &EventIndex,
) -> Vec<EvidenceLine> {
    let mut out = Vec::new();
    let name = str_at(workload, "/metadata/name").unwrap_or_default();
    let uid = str_at(workload, "/metadata/uid").unwrap_or_default();
    let created = time_at(workload, "/metadata/creationTimestamp");
    for pod in pods {
        let pod_name = str_at(pod, "/metadata/name").unwrap_or_default();
        let pod_uid = str_at(pod, "/metadata/uid").unwrap_or(pod_name);
        let on_node = str_at(pod, "/spec/nodeName")
            .map(|node| format!(" on node {node}"))
            .unwrap_or_default();
        for status in containers(pod) {
            let container = str_at(status, "/name").unwrap_or_default();
            let restarts = status
                .get("restartCount")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            for (which, terminated) in [
                ("state", at(status, "/state/terminated")),
                ("last", at(status, "/lastState/terminated")),
            ] {
                let Some(terminated) = terminated else {
                    continue;
                };
                let code = terminated
                    .get("exitCode")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if code == 0 {
                    continue;
                }
                let reason = str_at(terminated, "/reason").unwrap_or("Error");
                let finished = str_at(terminated, "/finishedAt").unwrap_or_default();
                out.push(EvidenceLine {
                    key: format!("terminated/{pod_uid}/{container}/{finished}/{which}{restarts}"),
                    text: line(
                        "Warning",
                        reason,
                        &format!("pod/{pod_name}"),
                        &format!(
                            "container {container} terminated with exit code {code}{on_node}{}",
                            str_at(terminated, "/message")
                                .map(|m| format!(": {m}"))
                                .unwrap_or_default()
                        ),
                    ),
                });
            }
            if let Some(waiting) = at(status, "/state/waiting")
                && let Some(reason) = str_at(waiting, "/reason")
                // A first ErrImagePull often passes (a registry hiccup); the back-off that follows
                // a repeated one does not.
                && STUCK_WAITING.contains(&reason)
            {
                out.push(EvidenceLine {
                    key: format!("waiting/{pod_uid}/{container}/{reason}"),
                    text: line(
                        "Warning",
                        reason,
                        &format!("pod/{pod_name}"),
                        str_at(waiting, "/message").unwrap_or(reason),
                    ),
                });
            }
        }
        if let Some(node_name) = str_at(pod, "/spec/nodeName")
            && let Some(node) = node_named(nodes, node_name)
            && let Some((status, reason, message)) = node_readiness(node)
            && status != "True"
        {
            out.push(EvidenceLine {
                key: format!("node/{node_name}/{status}/{reason}"),
                text: line(
                    "Warning",
                    "NodeNotReady",
                    &format!("node/{node_name}"),
                    &format!("Ready={status} ({reason}): {message}"),
                ),
            });
        }
    }
    // The nodes' health conditions set by node health tools (NVSentinel, gpud, the node problem
    // detector): any condition besides the kubelet's own that is True.
    let kubelet_conditions = KUBELET_CONDITIONS;
    let pod_nodes: BTreeSet<&str> = pods
        .iter()
        .filter_map(|pod| str_at(pod, "/spec/nodeName"))
        .collect();
    for node_name in &pod_nodes {
        let Some(node) = node_named(nodes, node_name) else {
            continue;
        };
        for condition in at(node, "/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let condition_type = str_at(condition, "/type").unwrap_or_default();
            if kubelet_conditions.contains(&condition_type)
                || str_at(condition, "/status") != Some("True")
            {
                continue;
            }
            out.push(EvidenceLine {
                key: format!(
                    "condition/{node_name}/{condition_type}/{}",
                    str_at(condition, "/lastTransitionTime").unwrap_or_default()
                ),
                text: line(
                    "Warning",
                    condition_type,
                    &format!("node/{node_name}"),
                    str_at(condition, "/message")
                        .or(str_at(condition, "/reason"))
                        .unwrap_or(condition_type),
                ),
            });
        }
    }
    // The workload's own failure.
    let (state, state_raw, reason) = workload_state(kind, workload);
    if state.is_failure() {
        let message = match kind {
            WorkloadKind::RayJob => str_at(workload, "/status/message"),
            _ => at(workload, "/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| str_at(c, "/type") == Some("Failed"))
                .and_then(|c| str_at(c, "/message")),
        }
        .unwrap_or(&state_raw);
        let reason = reason.unwrap_or_else(|| state_raw.clone());
        out.push(EvidenceLine {
            key: format!("workload/{uid}/{reason}"),
            text: line(
                "Warning",
                &reason,
                &format!("{}/{name}", kind.short()),
                message,
            ),
        });
    }
    // Events about the workload, its pods and their nodes, since this incarnation was created.
    let pod_names: BTreeSet<&str> = pods
        .iter()
        .filter_map(|pod| str_at(pod, "/metadata/name"))
        .collect();
    let namespace = str_at(workload, "/metadata/namespace").unwrap_or("default");
    // The events about its pods, their nodes and the workload itself, in the listing's order.
    let mut relevant: Vec<Listed> = pod_names
        .iter()
        .flat_map(|pod| events.about("Pod", namespace, pod))
        .chain(pod_nodes.iter().flat_map(|node| events.about_node(node)))
        .chain(events.about(kind.kind(), namespace, name))
        .copied()
        .collect();
    relevant.sort_unstable_by_key(|(place, _)| *place);
    relevant.dedup_by_key(|(place, _)| *place);
    let mut about: Vec<(DateTime<Utc>, EvidenceLine)> = relevant
        .into_iter()
        .filter_map(|(_, event)| {
            let object_kind = str_at(event, "/involvedObject/kind").unwrap_or_default();
            let object_name = str_at(event, "/involvedObject/name").unwrap_or_default();
            let when = time_at(event, "/lastTimestamp")
                .or_else(|| time_at(event, "/eventTime"))
                .or_else(|| time_at(event, "/metadata/creationTimestamp"))?;
            if created.is_some_and(|created| when < created) {
                return None;
            }
            let event_type = str_at(event, "/type").unwrap_or("Normal");
            let reason = str_at(event, "/reason").unwrap_or("Event");
            let count = event.get("count").and_then(Value::as_u64).unwrap_or(1);
            Some((
                when,
                EvidenceLine {
                    key: format!(
                        "event/{}/{count}",
                        str_at(event, "/metadata/uid")
                            .or(str_at(event, "/metadata/name"))
                            .unwrap_or_default()
                    ),
                    text: line(
                        event_type,
                        reason,
                        &format!("{}/{object_name}", object_kind.to_ascii_lowercase()),
                        str_at(event, "/message").unwrap_or_default(),
                    ),
                },
            ))
        })
        .collect();
    about.sort_by_key(|(when, _)| *when);
    out.extend(about.into_iter().map(|(_, line)| line));
    out
}

/// Conditions of the kubelet's own: the node's state, not a health tool's finding about it.
const KUBELET_CONDITIONS: [&str; 5] = [
    "Ready",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
];

/// What the API says about a node itself, as the lines of its node log, which the engine reads as it
/// reads a kernel log (Xid, ECC, thermal, NVLink words become node signals): the conditions node
/// health tools set (NVSentinel, gpud, the node problem detector) while they are True, and the
/// Warning events about the node. Each line is stamped with its time in the syslog form
/// (`2026-01-05T08:00:20Z NODE kubernetes: Warning TYPE node/NODE: MESSAGE`), so that a condition
/// set long ago weighs as old.
pub fn node_lines(node: &Value, events: &EventIndex) -> Vec<EvidenceLine> {
    let Some(name) = str_at(node, "/metadata/name") else {
        return Vec::new();
    };
    let stamped = |time: Option<DateTime<Utc>>, text: String| match time {
        Some(time) => format!(
            "{} {name} {text}",
            time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        None => format!("{name} {text}"),
    };
    let mut out = Vec::new();
    for condition in at(node, "/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let condition_type = str_at(condition, "/type").unwrap_or_default();
        if condition_type.is_empty()
            || KUBELET_CONDITIONS.contains(&condition_type)
            || str_at(condition, "/status") != Some("True")
        {
            continue;
        }
        let since = time_at(condition, "/lastTransitionTime")
            .or_else(|| time_at(condition, "/lastHeartbeatTime"));
        out.push(EvidenceLine {
            key: format!(
                "condition/{condition_type}/{}",
                str_at(condition, "/lastTransitionTime").unwrap_or_default()
            ),
            text: stamped(
                since,
                line(
                    "Warning",
                    condition_type,
                    &format!("node/{name}"),
                    str_at(condition, "/message")
                        .or(str_at(condition, "/reason"))
                        .unwrap_or(condition_type),
                ),
            ),
        });
    }
    let mut about: Vec<(Option<DateTime<Utc>>, EvidenceLine)> = events
        .about_node(name)
        .iter()
        .filter(|(_, event)| str_at(event, "/type") == Some("Warning"))
        .map(|(_, event)| {
            let when = time_at(event, "/lastTimestamp")
                .or_else(|| time_at(event, "/eventTime"))
                .or_else(|| time_at(event, "/metadata/creationTimestamp"));
            let count = event.get("count").and_then(Value::as_u64).unwrap_or(1);
            let reason = str_at(event, "/reason").unwrap_or("Event");
            (
                when,
                EvidenceLine {
                    key: format!(
                        "event/{}/{count}",
                        str_at(event, "/metadata/uid")
                            .or(str_at(event, "/metadata/name"))
                            .unwrap_or_default()
                    ),
                    text: stamped(
                        when,
                        line(
                            "Warning",
                            reason,
                            &format!("node/{name}"),
                            str_at(event, "/message").unwrap_or(reason),
                        ),
                    ),
                },
            )
        })
        .collect();
    about.sort_by_key(|(when, _)| *when);
    out.extend(about.into_iter().map(|(_, line)| line));
    out
}

//! Nodes as a workload sees them: ready or not, usable for scheduling.

use serde_json::Value;

use super::*;

/// The Ready condition of a node: (status, reason, message).
pub fn node_readiness(node: &Value) -> Option<(String, String, String)> {
    at(node, "/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|condition| condition.get("type").and_then(Value::as_str) == Some("Ready"))
        .map(|condition| {
            let field = |key: &str| {
                condition
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (field("status"), field("reason"), field("message"))
        })
}

pub(super) fn node_named<'a>(nodes: &'a [Value], name: &str) -> Option<&'a Value> {
    nodes
        .iter()
        .find(|node| str_at(node, "/metadata/name") == Some(name))
}

/// A node that can take pods now: Ready, schedulable, and without a NoSchedule/NoExecute taint.
pub fn node_usable(node: &Value) -> bool {
    let ready = node_readiness(node).is_some_and(|(status, _, _)| status == "True");
    let cordoned = at(node, "/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tainted = at(node, "/spec/taints")
        .and_then(Value::as_array)
        .is_some_and(|taints| {
            taints.iter().any(|taint| {
                matches!(
                    taint.get("effect").and_then(Value::as_str),
                    Some("NoSchedule" | "NoExecute")
                ) && !str_at(taint, "/key").is_some_and(|key| {
                    key.starts_with("nvidia.com/gpu") && str_at(taint, "/value").is_none()
                })
            })
        });
    ready && !cordoned && !tainted
}

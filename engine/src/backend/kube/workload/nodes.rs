//! Nodes as a workload sees them: ready or not (which replicas a node can take: `placement`).

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

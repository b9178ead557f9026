//! Draining a node on Kubernetes: cordon it and taint it `runguard.io/suspect:NoSchedule`, keeping the
//! taints others set.

use serde_json::{Value, json};

use super::backend::{KubeBackend, SUSPECT_TAINT};
use super::workload::str_at;

impl KubeBackend {
    pub(super) fn cordon_patch(&self, node: &str, reason: &str) -> Value {
        let mut taints: Vec<Value> = self
            .nodes
            .store
            .state()
            .iter()
            .find(|object| object.metadata.name.as_deref() == Some(node))
            .and_then(|object| object.data.pointer("/spec/taints").cloned())
            .and_then(|taints| taints.as_array().cloned())
            .unwrap_or_default();
        taints.retain(|taint| str_at(taint, "/key") != Some(SUSPECT_TAINT));
        taints.push(json!({
            "key": SUSPECT_TAINT,
            "value": taint_value(reason),
            "effect": "NoSchedule",
        }));
        json!({"spec": {"unschedulable": true, "taints": taints}})
    }
}

/// A reason as a taint value: at most 63 characters of letters, digits, `-`, `_` and `.`.
pub(super) fn taint_value(reason: &str) -> String {
    let cleaned: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    trimmed
        .chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_becomes_a_valid_taint_value() {
        assert_eq!(
            taint_value("runguard: node_failure on n2"),
            "runguard--node_failure-on-n2"
        );
        assert_eq!(taint_value(&"x".repeat(100)).len(), 63);
        assert_eq!(taint_value("  :xid_79: "), "xid_79");
    }
}

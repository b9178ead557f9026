//! Draining a node on Kubernetes: cordon it and taint it `runguard.io/suspect:NoSchedule`, keeping the
//! taints others set; and undoing exactly that once the node is back in service.

use serde_json::{Value, json};

use super::backend::{KubeBackend, SUSPECT_TAINT};
use super::workload::str_at;

/// Set on a node runguard cordoned itself (it was schedulable before): only then does runguard
/// uncordon it.
pub const CORDONED_ANNOTATION: &str = "runguard.io/cordoned";

impl KubeBackend {
    /// The node as the watchers have it: its spec and status, and whether runguard cordoned it.
    fn node_object(&self, node: &str) -> Option<(Value, bool)> {
        self.nodes
            .store
            .state()
            .iter()
            .find(|object| object.metadata.name.as_deref() == Some(node))
            .map(|object| {
                let cordoned_by_us = object
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|annotations| annotations.contains_key(CORDONED_ANNOTATION));
                (object.data.clone(), cordoned_by_us)
            })
    }

    pub(super) fn cordon_patch(&self, node: &str, reason: &str) -> Value {
        let object = self.node_object(node).map(|(object, _)| object);
        let mut taints: Vec<Value> = object
            .as_ref()
            .and_then(|object| object.pointer("/spec/taints").cloned())
            .and_then(|taints| taints.as_array().cloned())
            .unwrap_or_default();
        taints.retain(|taint| str_at(taint, "/key") != Some(SUSPECT_TAINT));
        taints.push(json!({
            "key": SUSPECT_TAINT,
            "value": taint_value(reason),
            "effect": "NoSchedule",
        }));
        let already_cordoned = object
            .as_ref()
            .and_then(|object| object.pointer("/spec/unschedulable"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut patch = json!({"spec": {"unschedulable": true, "taints": taints}});
        if !already_cordoned {
            patch["metadata"] = json!({"annotations": {CORDONED_ANNOTATION: "true"}});
        }
        patch
    }

    /// What undoes runguard's drain of `node` with `reason`: its own taint removed (others kept), and
    /// the cordon lifted only when runguard set it. `None` when the node carries no taint of
    /// runguard's with that reason: nothing of runguard's to undo.
    pub(super) fn uncordon_patch(&self, node: &str, reason: &str) -> Option<Value> {
        let (object, cordoned_by_us) = self.node_object(node)?;
        let taints: Vec<Value> = object
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let ours = |taint: &Value| {
            str_at(taint, "/key") == Some(SUSPECT_TAINT)
                && str_at(taint, "/value") == Some(taint_value(reason).as_str())
        };
        if !taints.iter().any(ours) {
            return None;
        }
        let kept: Vec<Value> = taints.into_iter().filter(|taint| !ours(taint)).collect();
        let mut patch = json!({"spec": {"taints": kept}});
        if cordoned_by_us {
            patch["spec"]["unschedulable"] = json!(false);
            patch["metadata"] = json!({"annotations": {CORDONED_ANNOTATION: null}});
        }
        Some(patch)
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

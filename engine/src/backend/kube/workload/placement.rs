//! Which nodes can run a workload's pods, as the scheduler decides it: a node counts when it matches a
//! replica's node selector and required node affinity, has the allocatable resources the replica asks
//! for, and every NoSchedule/NoExecute taint on it is tolerated by the replica's pod template. GPU pools
//! taint their nodes (`nvidia.com/gpu=present:NoSchedule`) and their workloads tolerate it: a taint is
//! a node's property to match, not a sign that the node is unusable.
//!
//! Two answers: the nodes that can take a replica *now* (Ready, schedulable, no taint of a passing state
//! either), and the nodes that *fit* the workload at all (a NotReady, cordoned or pressured node comes
//! back; a node the autoscaler is removing does not).

use std::collections::BTreeMap;

use serde_json::Value;

use super::nodes::node_readiness;
use super::{WorkloadKind, at, str_at};
use crate::backend::NodeCapacity;

/// Taints that say what state a node is in now, not what may run on it: the node lifecycle
/// controller's, the cloud provider's before a node is initialised, and runguard's own suspect mark
/// (a person clears it once the node is checked). A node with only these untolerated fits a workload,
/// though it cannot take it now.
const PASSING_TAINTS: [&str; 3] = [
    "node.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/uninitialized",
    super::super::backend::SUSPECT_TAINT,
];

/// What one replica of a workload asks of a node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replica {
    /// Resources a pod requests, by name (`nvidia.com/gpu`, `cpu` in cores, `memory` in bytes).
    pub requests: BTreeMap<String, f64>,
    pub node_selector: BTreeMap<String, String>,
    /// Required node-affinity terms (any one must match); `None` when the template has none.
    pub terms: Option<Vec<Value>>,
    pub tolerations: Vec<Value>,
}

impl Replica {
    /// The replica of a pod template (`{metadata, spec}`).
    pub fn of_template(template: &Value) -> Self {
        let spec = template.get("spec").unwrap_or(&Value::Null);
        Self {
            requests: pod_requests(spec),
            node_selector: at(spec, "/nodeSelector")
                .and_then(Value::as_object)
                .map(|labels| {
                    labels
                        .iter()
                        .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
            terms: at(
                spec,
                "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
            )
            .and_then(Value::as_array)
            .cloned(),
            tolerations: at(spec, "/tolerations")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// The node matches this replica whatever its state: labels, affinity, allocatable resources, and
    /// every taint other than a passing one tolerated.
    pub fn fits(&self, node: &Value) -> bool {
        self.matches_labels(node)
            && self.has_room(node)
            && taints(node)
                .filter(|taint| !is_passing(taint))
                .all(|taint| self.tolerates(taint))
    }

    /// The node can take this replica now: it fits, is Ready and schedulable, and every taint on it
    /// (passing ones too) is tolerated.
    pub fn fits_now(&self, node: &Value) -> bool {
        let ready = node_readiness(node).is_some_and(|(status, _, _)| status == "True");
        let cordoned = at(node, "/spec/unschedulable")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        ready
            && !cordoned
            && self.matches_labels(node)
            && self.has_room(node)
            && taints(node).all(|taint| self.tolerates(taint))
    }

    fn matches_labels(&self, node: &Value) -> bool {
        let labels = at(node, "/metadata/labels").and_then(Value::as_object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        let selected = self
            .node_selector
            .iter()
            .all(|(key, value)| label(key) == Some(value.as_str()));
        let name = str_at(node, "/metadata/name").unwrap_or_default();
        // Terms are ORed; a template without required affinity takes any node.
        let affine = self
            .terms
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|term| term_matches(term, &label, name)));
        selected && affine
    }

    fn has_room(&self, node: &Value) -> bool {
        let allocatable = at(node, "/status/allocatable");
        self.requests.iter().all(|(resource, wanted)| {
            *wanted <= 0.0
                || allocatable
                    .and_then(|a| a.get(resource))
                    .and_then(quantity_of)
                    .is_some_and(|has| has >= *wanted)
        })
    }

    fn tolerates(&self, taint: &Value) -> bool {
        self.tolerations
            .iter()
            .any(|toleration| tolerates(toleration, taint))
    }
}

/// The replicas of a workload: one per pod template (a PyTorchJob's master and workers, a JobSet's
/// replicated jobs).
pub fn replicas(kind: WorkloadKind, workload: &Value) -> Vec<Replica> {
    kind.templates(workload)
        .into_iter()
        .map(|(template, _)| Replica::of_template(template))
        .collect()
}

/// The nodes that can take one of `replicas` now and those that fit one at all. A node counts when it
/// suits any replica: the policy compares the count with the nodes the job needs.
pub fn capacity(replicas: &[Replica], nodes: &[Value], min_nodes: Option<u32>) -> NodeCapacity {
    let mut capacity = NodeCapacity {
        min_nodes,
        ..NodeCapacity::default()
    };
    for node in nodes {
        let Some(name) = str_at(node, "/metadata/name") else {
            continue;
        };
        if replicas.iter().any(|replica| replica.fits(node)) {
            capacity.fitting.push(name.to_string());
            if replicas.iter().any(|replica| replica.fits_now(node)) {
                capacity.now.push(name.to_string());
            }
        }
    }
    capacity
}

/// The fewest nodes an elastic workload runs on, when it is one: a PyTorchJob's
/// `elasticPolicy.minReplicas`.
pub fn elastic_min(kind: WorkloadKind, workload: &Value) -> Option<u32> {
    match kind {
        WorkloadKind::PyTorchJob => at(workload, "/spec/elasticPolicy/minReplicas")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok()),
        _ => None,
    }
}

fn taints(node: &Value) -> impl Iterator<Item = &Value> {
    at(node, "/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|taint| {
            // PreferNoSchedule only steers the scheduler; it never keeps a pod off.
            matches!(str_at(taint, "/effect"), Some("NoSchedule" | "NoExecute"))
        })
}

fn is_passing(taint: &Value) -> bool {
    let key = str_at(taint, "/key").unwrap_or_default();
    PASSING_TAINTS.iter().any(|passing| {
        if passing.ends_with('/') {
            key.starts_with(passing)
        } else {
            key == *passing
        }
    })
}

/// Whether `toleration` tolerates `taint`, as the scheduler reads it: the effect matches (or the
/// toleration names none), and the key with `Exists` or the key and value with `Equal` (the default)
/// match; `Exists` without a key tolerates everything.
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = str_at(toleration, "/effect").unwrap_or_default();
    if !effect.is_empty() && Some(effect) != str_at(taint, "/effect") {
        return false;
    }
    let key = str_at(toleration, "/key").unwrap_or_default();
    let taint_key = str_at(taint, "/key").unwrap_or_default();
    match str_at(toleration, "/operator").unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint_key,
        "Equal" => {
            key == taint_key
                && str_at(toleration, "/value").unwrap_or_default()
                    == str_at(taint, "/value").unwrap_or_default()
        }
        _ => false,
    }
}

/// One node-selector term: every expression on labels and on fields must hold; a term with none
/// matches no node (as the API documents it).
fn term_matches<'a>(term: &Value, label: &impl Fn(&str) -> Option<&'a str>, name: &str) -> bool {
    let expressions = at(term, "/matchExpressions").and_then(Value::as_array);
    let fields = at(term, "/matchFields").and_then(Value::as_array);
    let empty = expressions.is_none_or(Vec::is_empty) && fields.is_none_or(Vec::is_empty);
    if empty {
        return false;
    }
    let on_labels = expressions.into_iter().flatten().all(|expression| {
        let key = str_at(expression, "/key").unwrap_or_default();
        expression_holds(expression, label(key))
    });
    let on_fields = fields.into_iter().flatten().all(|expression| {
        // `metadata.name` is the one field node affinity may name.
        let value = (str_at(expression, "/key") == Some("metadata.name")).then_some(name);
        expression_holds(expression, value)
    });
    on_labels && on_fields
}

fn expression_holds(expression: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = at(expression, "/values")
        .and_then(Value::as_array)
        .map(|values| values.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let number = |text: &str| text.parse::<i64>().ok();
    match str_at(expression, "/operator").unwrap_or_default() {
        "In" => value.is_some_and(|value| values.contains(&value)),
        "NotIn" => value.is_none_or(|value| !values.contains(&value)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(number), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(number), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b)
        }
        // An operator the API does not know keeps the pod off, as the scheduler's validation would.
        _ => false,
    }
}

/// What a pod requests, by resource: the sum over its containers (a request, else the limit, which
/// the API server copies into the request) or the largest init container's, whichever is more.
fn pod_requests(spec: &Value) -> BTreeMap<String, f64> {
    let container_requests = |container: &Value| {
        let mut requests: BTreeMap<String, f64> = BTreeMap::new();
        for key in ["/resources/limits", "/resources/requests"] {
            // Requests come second and win where both are given.
            if let Some(map) = at(container, key).and_then(Value::as_object) {
                for (resource, amount) in map {
                    if let Some(amount) = quantity_of(amount) {
                        requests.insert(resource.clone(), amount);
                    }
                }
            }
        }
        requests
    };
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for container in at(spec, "/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (resource, amount) in container_requests(container) {
            *total.entry(resource).or_default() += amount;
        }
    }
    for init in at(spec, "/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (resource, amount) in container_requests(init) {
            let entry = total.entry(resource).or_default();
            *entry = entry.max(amount);
        }
    }
    total
}

/// A resource quantity (`8`, `191450m`, `2010398012Ki`, `1.5Gi`, `1e3`) as a number of units; `None`
/// for text that is no quantity.
pub fn quantity_of(value: &Value) -> Option<f64> {
    if let Some(number) = value.as_f64() {
        return Some(number);
    }
    let text = value.as_str()?.trim();
    const SUFFIXES: [(&str, f64); 16] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("", 1.0),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix)
            && !number.is_empty()
            && number
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E'))
            && let Ok(number) = number.parse::<f64>()
        {
            return Some(number * factor);
        }
    }
    None
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;

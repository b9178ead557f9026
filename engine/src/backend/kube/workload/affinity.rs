//! Node exclusions in a pod spec's node affinity: `kubernetes.io/hostname NotIn [...]` in every
//! required node-selector term (terms are ORed, so each must carry it), merged with what the user
//! wrote and taken away again without touching it.

use serde_json::{Map, Value, json};

use super::{HOSTNAME_LABEL, str_at};

const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";

fn is_exclusion(expression: &Value) -> bool {
    str_at(expression, "/key") == Some(HOSTNAME_LABEL)
        && str_at(expression, "/operator") == Some("NotIn")
}

/// The object under `key`, made one when missing or not an object.
fn object<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = parent.entry(key.to_string()).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    match slot {
        Value::Object(map) => map,
        _ => unreachable!("made an object just above"),
    }
}

/// Adds `add` to and takes `remove` from the nodes a pod spec (`{affinity, containers, ...}`)
/// excludes. Added nodes go into the hostname `NotIn` expression of every required term (one is made
/// where a term has none, and a term where there is none); removed ones leave every such expression.
/// An expression, term or affinity left empty by a removal goes with it, so that taking back what was
/// added restores the spec as it was; the user's own terms, expressions and values stay as written.
pub fn update_exclusions(pod_spec: &mut Value, add: &[String], remove: &[String]) {
    let add: Vec<&String> = add.iter().filter(|node| !remove.contains(node)).collect();
    if add.is_empty() && remove.is_empty() {
        return;
    }
    let Some(spec) = pod_spec.as_object_mut() else {
        return;
    };
    if add.is_empty() {
        // Nothing to add: nothing is made, only what holds a removed node is changed.
        let has_terms = spec
            .get("affinity")
            .and_then(|a| a.get("nodeAffinity"))
            .and_then(|n| n.get(REQUIRED))
            .and_then(|r| r.get("nodeSelectorTerms"))
            .is_some_and(Value::is_array);
        if !has_terms {
            return;
        }
    }
    let affinity = object(spec, "affinity");
    let node_affinity = object(affinity, "nodeAffinity");
    let required = object(node_affinity, REQUIRED);
    let terms = required
        .entry("nodeSelectorTerms".to_string())
        .or_insert_with(|| json!([]));
    if !terms.is_array() {
        *terms = json!([]);
    }
    let Some(terms) = terms.as_array_mut() else {
        return;
    };
    if terms.is_empty() && !add.is_empty() {
        terms.push(json!({"matchExpressions": []}));
    }
    let mut emptied_terms = Vec::new();
    for (index, term) in terms.iter_mut().enumerate() {
        let Some(term) = term.as_object_mut() else {
            continue;
        };
        let expressions = term
            .entry("matchExpressions".to_string())
            .or_insert_with(|| json!([]));
        if !expressions.is_array() {
            *expressions = json!([]);
        }
        let Some(expressions) = expressions.as_array_mut() else {
            continue;
        };
        let had_expressions = !expressions.is_empty();
        let mut emptied = false;
        for expression in expressions.iter_mut().filter(|e| is_exclusion(e)) {
            if let Some(values) = expression.get_mut("values").and_then(Value::as_array_mut) {
                let before = values.len();
                values.retain(|value| {
                    value
                        .as_str()
                        .is_none_or(|node| !remove.iter().any(|r| r == node))
                });
                emptied |= before > 0 && values.is_empty();
            }
        }
        if emptied {
            expressions.retain(|expression| {
                !is_exclusion(expression)
                    || expression
                        .get("values")
                        .and_then(Value::as_array)
                        .is_none_or(|values| !values.is_empty())
            });
        }
        if !add.is_empty() {
            match expressions.iter_mut().find(|e| is_exclusion(e)) {
                Some(expression) => {
                    let values = expression
                        .as_object_mut()
                        .map(|e| e.entry("values".to_string()).or_insert_with(|| json!([])));
                    if let Some(values) = values {
                        if !values.is_array() {
                            *values = json!([]);
                        }
                        if let Some(values) = values.as_array_mut() {
                            for node in &add {
                                if !values.iter().any(|v| v.as_str() == Some(node.as_str())) {
                                    values.push(json!(node));
                                }
                            }
                        }
                    }
                }
                None => expressions.push(json!({
                    "key": HOSTNAME_LABEL,
                    "operator": "NotIn",
                    "values": add,
                })),
            }
        }
        let fields = term
            .get("matchFields")
            .and_then(Value::as_array)
            .is_some_and(|fields| !fields.is_empty());
        let left = term
            .get("matchExpressions")
            .and_then(Value::as_array)
            .is_some_and(|expressions| !expressions.is_empty());
        if !left {
            if had_expressions && !fields {
                emptied_terms.push(index);
            } else {
                // An empty list beside fields (or made above for nothing) requires nothing: not
                // left behind.
                term.remove("matchExpressions");
            }
        }
    }
    if emptied_terms.is_empty() {
        return;
    }
    for index in emptied_terms.into_iter().rev() {
        terms.remove(index);
    }
    if !terms.is_empty() {
        return;
    }
    // No term left: the requirement, and whatever holds nothing else, goes.
    required.remove("nodeSelectorTerms");
    if required.is_empty() {
        node_affinity.remove(REQUIRED);
    }
    if node_affinity.is_empty() {
        affinity.remove("nodeAffinity");
    }
    if affinity.is_empty() {
        spec.remove("affinity");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kube::workload::excluded_nodes;

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    fn template(spec: Value) -> Value {
        json!({"spec": spec})
    }

    #[test]
    fn an_exclusion_added_to_a_spec_without_affinity_is_taken_back_to_the_spec_as_it_was() {
        let original = json!({"containers": [{"name": "pytorch"}]});
        let mut spec = original.clone();
        update_exclusions(&mut spec, &nodes(&["gpu-spot-1"]), &[]);
        assert_eq!(
            spec["affinity"],
            json!({"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["gpu-spot-1"]}]}]}}})
        );
        update_exclusions(&mut spec, &[], &nodes(&["gpu-spot-1"]));
        assert_eq!(spec, original);
    }

    #[test]
    fn every_term_of_the_user_gets_the_exclusion_and_keeps_its_own_expressions() {
        let mut spec = json!({"affinity": {
            "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a3"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["spare-1"]}]},
            ]}, "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]},
            "podAntiAffinity": {"x": 1},
        }});
        let original = spec.clone();
        update_exclusions(&mut spec, &nodes(&["n2", "n3"]), &[]);
        let terms = &spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"];
        assert_eq!(terms.as_array().map(Vec::len), Some(2), "{terms}");
        for term in terms.as_array().into_iter().flatten() {
            assert!(
                term.to_string().contains(
                    r#"{"key":"kubernetes.io/hostname","operator":"NotIn","values":["n2","n3"]}"#
                ),
                "{term}"
            );
        }
        assert_eq!(
            excluded_nodes(&template(spec.clone())),
            nodes(&["n2", "n3"])
        );
        // Adding again changes nothing; taking both back restores every term as the user wrote it.
        let twice = {
            let mut again = spec.clone();
            update_exclusions(&mut again, &nodes(&["n3"]), &[]);
            again
        };
        assert_eq!(twice, spec);
        update_exclusions(&mut spec, &[], &nodes(&["n2", "n3"]));
        assert_eq!(spec, original);
    }

    #[test]
    fn taking_away_runguard_s_node_keeps_the_user_s_own_exclusion_in_the_same_expression() {
        let mut spec = json!({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["gpu-node-5"]}]},
        ]}}}});
        update_exclusions(&mut spec, &nodes(&["gpu-spot-1"]), &[]);
        assert_eq!(
            excluded_nodes(&template(spec.clone())),
            nodes(&["gpu-node-5", "gpu-spot-1"])
        );
        update_exclusions(&mut spec, &[], &nodes(&["gpu-spot-1"]));
        assert_eq!(
            spec,
            json!({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["gpu-node-5"]}]},
            ]}}}}),
            "the user's exclusion stays as written"
        );
    }

    #[test]
    fn a_removal_from_a_spec_that_never_excluded_the_node_makes_nothing() {
        let original = json!({"containers": [], "affinity": {"podAffinity": {}}});
        let mut spec = original.clone();
        update_exclusions(&mut spec, &[], &nodes(&["n1"]));
        assert_eq!(spec, original);
        let fields_only = json!({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]}}}});
        let mut spec = fields_only.clone();
        update_exclusions(&mut spec, &[], &nodes(&["n1"]));
        assert_eq!(spec, fields_only);
    }

    #[test]
    fn a_node_both_added_and_removed_is_removed() {
        let mut spec = json!({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["n1"]}]}]}}}});
        update_exclusions(&mut spec, &nodes(&["n1", "n2"]), &nodes(&["n1"]));
        assert_eq!(excluded_nodes(&template(spec)), nodes(&["n2"]));
    }
}

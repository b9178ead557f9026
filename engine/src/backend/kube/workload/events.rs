//! The cluster's events indexed by the object they are about, built once a pass: each workload and
//! each node then reads its own events instead of scanning all of them (ten thousand events times a
//! thousand workloads a pass at scale).

use std::collections::HashMap;

use serde_json::Value;

use super::str_at;

/// Events by involved object: (kind, namespace, name) → events with their place in the listing, in
/// that order, so that events gathered from several objects can be put back in the listing's order.
/// Node events are cluster-scoped; their namespace is whatever the event says (usually empty or
/// `default`), so nodes have their own map by name.
/// An event and its place in the listing.
pub type Listed<'a> = (usize, &'a Value);

#[derive(Debug, Default)]
pub struct EventIndex<'a> {
    /// kind → namespace → name → events (nested, so that any borrowed name looks them up).
    by_object: HashMap<&'a str, HashMap<&'a str, HashMap<&'a str, Vec<Listed<'a>>>>>,
    by_node: HashMap<&'a str, Vec<Listed<'a>>>,
}

impl<'a> EventIndex<'a> {
    pub fn new(events: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut index = Self::default();
        for (place, event) in events.into_iter().enumerate() {
            let kind = str_at(event, "/involvedObject/kind").unwrap_or_default();
            let name = str_at(event, "/involvedObject/name").unwrap_or_default();
            if kind == "Node" {
                index.by_node.entry(name).or_default().push((place, event));
                continue;
            }
            let namespace = str_at(event, "/involvedObject/namespace").unwrap_or_default();
            index
                .by_object
                .entry(kind)
                .or_default()
                .entry(namespace)
                .or_default()
                .entry(name)
                .or_default()
                .push((place, event));
        }
        index
    }

    /// The events about one namespaced object.
    pub fn about(&self, kind: &str, namespace: &str, name: &str) -> &[Listed<'a>] {
        self.by_object
            .get(kind)
            .and_then(|namespaces| namespaces.get(namespace))
            .and_then(|names| names.get(name))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The events about one node.
    pub fn about_node(&self, name: &str) -> &[Listed<'a>] {
        self.by_node
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(kind: &str, namespace: &str, name: &str, reason: &str) -> Value {
        json!({"involvedObject": {"kind": kind, "namespace": namespace, "name": name},
               "reason": reason})
    }

    #[test]
    fn each_object_reads_its_own_events_in_listing_order() {
        let events = vec![
            event("Pod", "team-a", "train-0", "Scheduled"),
            event("Pod", "team-b", "train-0", "OtherNamespace"),
            event("Node", "", "gpu-1", "NodeNotReady"),
            event("Pod", "team-a", "train-0", "BackOff"),
            event("PyTorchJob", "team-a", "train", "JobFailed"),
        ];
        let index = EventIndex::new(&events);
        let reasons = |found: &[Listed]| -> Vec<String> {
            found
                .iter()
                .filter_map(|(_, event)| str_at(event, "/reason"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            reasons(index.about("Pod", "team-a", "train-0")),
            ["Scheduled", "BackOff"]
        );
        assert_eq!(
            reasons(index.about("Pod", "team-b", "train-0")),
            ["OtherNamespace"]
        );
        assert_eq!(
            reasons(index.about("PyTorchJob", "team-a", "train")),
            ["JobFailed"]
        );
        assert_eq!(reasons(index.about_node("gpu-1")), ["NodeNotReady"]);
        assert_eq!(index.about("Pod", "team-a", "train-0")[1].0, 3);
        assert!(index.about("Pod", "team-a", "train-1").is_empty());
        assert!(index.about_node("gpu-2").is_empty());
    }
}

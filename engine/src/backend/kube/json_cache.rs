//! The watch caches' objects as JSON, converted once per version of each object: a pass over ten
//! thousand pods read every pod anew each time, though almost none had changed since the last pass.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::api::DynamicObject;
use serde_json::Value;

use crate::sync::lock;

/// Object key (uid, else namespace/name) → (resourceVersion, its JSON).
#[derive(Debug, Default)]
pub struct JsonCache {
    converted: Mutex<HashMap<String, (String, Arc<Value>)>>,
}

impl JsonCache {
    /// `objects` as JSON, in their order: an object whose resourceVersion is the one converted last
    /// time is not converted again. Objects gone from `objects` are forgotten. An object without a
    /// resourceVersion (which the API server always sets) is converted every time.
    pub fn values(&self, objects: &[Arc<DynamicObject>]) -> Vec<Arc<Value>> {
        let mut converted = lock(&self.converted);
        let mut seen = HashSet::with_capacity(objects.len());
        let mut out = Vec::with_capacity(objects.len());
        for object in objects {
            let meta = &object.metadata;
            let key = meta.uid.clone().unwrap_or_else(|| {
                format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                )
            });
            let version = meta.resource_version.as_deref();
            if let (Some(version), Some((known, value))) = (version, converted.get(&key))
                && known == version
            {
                out.push(Arc::clone(value));
                seen.insert(key);
                continue;
            }
            let Ok(value) = serde_json::to_value(object.as_ref()) else {
                continue;
            };
            let value = Arc::new(value);
            if let Some(version) = version {
                converted.insert(key.clone(), (version.to_string(), Arc::clone(&value)));
                seen.insert(key);
            }
            out.push(value);
        }
        converted.retain(|key, _| seen.contains(key));
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(uid: &str, version: Option<&str>, phase: &str) -> Arc<DynamicObject> {
        let mut value = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{uid}"), "namespace": "ml", "uid": uid},
            "status": {"phase": phase},
        });
        if let Some(version) = version {
            value["metadata"]["resourceVersion"] = json!(version);
        }
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn phases(values: &[Arc<Value>]) -> Vec<&str> {
        values
            .iter()
            .map(|value| value["status"]["phase"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn an_object_is_converted_again_only_when_its_version_changes() {
        let cache = JsonCache::default();
        let first = cache.values(&[
            pod("a", Some("1"), "Running"),
            pod("b", Some("1"), "Running"),
        ]);
        assert_eq!(phases(&first), ["Running", "Running"]);
        // The same version: the same conversion, even if the object were to say otherwise.
        let again = cache.values(&[pod("a", Some("1"), "Failed"), pod("b", Some("2"), "Failed")]);
        assert!(Arc::ptr_eq(&first[0], &again[0]));
        assert_eq!(phases(&again), ["Running", "Failed"]);
    }

    #[test]
    fn objects_gone_are_forgotten_and_unversioned_ones_never_kept() {
        let cache = JsonCache::default();
        cache.values(&[pod("a", Some("1"), "Running"), pod("b", None, "Running")]);
        assert_eq!(lock(&cache.converted).len(), 1);
        cache.values(&[pod("b", None, "Failed")]);
        assert!(lock(&cache.converted).is_empty());
        let unversioned = cache.values(&[pod("b", None, "Succeeded")]);
        assert_eq!(phases(&unversioned), ["Succeeded"]);
    }
}

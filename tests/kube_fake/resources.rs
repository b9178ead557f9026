//! The kinds the fake serves and the discovery documents that describe them, shaped as a real API
//! server answers `/api`, `/apis`, `/api/v1` and `/apis/{group}/{version}`.

use serde_json::{Value, json};

/// One served resource: where it lives in the API and what a client may do with it.
#[derive(Debug)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Subresources served under `{plural}/{name}/{subresource}`.
    pub subresources: &'static [&'static str],
    /// Field selector labels beyond `metadata.name` and `metadata.namespace`, each with the path it
    /// reads in the object.
    pub field_labels: &'static [(&'static str, &'static str)],
}

const FULL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

const POD_FIELDS: &[(&str, &str)] = &[
    ("spec.nodeName", "spec.nodeName"),
    ("spec.restartPolicy", "spec.restartPolicy"),
    ("spec.schedulerName", "spec.schedulerName"),
    ("spec.serviceAccountName", "spec.serviceAccountName"),
    ("spec.hostNetwork", "spec.hostNetwork"),
    ("status.phase", "status.phase"),
    ("status.podIP", "status.podIP"),
    ("status.nominatedNodeName", "status.nominatedNodeName"),
];

const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject.kind", "involvedObject.kind"),
    ("involvedObject.namespace", "involvedObject.namespace"),
    ("involvedObject.name", "involvedObject.name"),
    ("involvedObject.uid", "involvedObject.uid"),
    ("involvedObject.apiVersion", "involvedObject.apiVersion"),
    (
        "involvedObject.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("involvedObject.fieldPath", "involvedObject.fieldPath"),
    ("reason", "reason"),
    ("reportingComponent", "reportingComponent"),
    ("source", "source.component"),
    ("type", "type"),
];

/// Every resource the fake serves. Indexes into this table identify a resource elsewhere.
pub const RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        subresources: &["log", "status", "exec"],
        field_labels: POD_FIELDS,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        subresources: &["status"],
        field_labels: &[("spec.unschedulable", "spec.unschedulable")],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
        field_labels: EVENT_FIELDS,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        subresources: &["status"],
        field_labels: &[("status.phase", "status.phase")],
    },
    ResourceType {
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind: "Job",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        subresources: &["status"],
        field_labels: &[("status.successful", "status.succeeded")],
    },
    ResourceType {
        group: "kubeflow.org",
        version: "v1",
        plural: "pytorchjobs",
        singular: "pytorchjob",
        kind: "PyTorchJob",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &["status"],
        field_labels: &[],
    },
    ResourceType {
        group: "ray.io",
        version: "v1",
        plural: "rayjobs",
        singular: "rayjob",
        kind: "RayJob",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        subresources: &["status"],
        field_labels: &[],
    },
    ResourceType {
        group: "ray.io",
        version: "v1",
        plural: "rayclusters",
        singular: "raycluster",
        kind: "RayCluster",
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        subresources: &["status"],
        field_labels: &[],
    },
    // The three below as their projects' published CRDs declare them (kubernetes-sigs/jobset
    // `config/components/crd`, kubeflow/trainer `manifests/base/crds`, kubernetes-sigs/kueue
    // `config/components/crd`, the served storage version of each).
    ResourceType {
        group: "jobset.x-k8s.io",
        version: "v1alpha2",
        plural: "jobsets",
        singular: "jobset",
        kind: "JobSet",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &["status"],
        field_labels: &[],
    },
    ResourceType {
        group: "trainer.kubeflow.org",
        version: "v1alpha1",
        plural: "trainjobs",
        singular: "trainjob",
        kind: "TrainJob",
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &["status"],
        field_labels: &[],
    },
    ResourceType {
        group: "kueue.x-k8s.io",
        version: "v1beta2",
        plural: "workloads",
        singular: "workload",
        kind: "Workload",
        namespaced: true,
        short_names: &["kwl", "kueueworkload", "kueueworkloads"],
        categories: &[],
        subresources: &["status"],
        field_labels: &[],
    },
];

/// Index of the namespaces resource, which the store consults when objects are created.
pub fn namespaces() -> usize {
    by_plural("", "namespaces").expect("the resource table serves namespaces")
}

impl ResourceType {
    /// `v1` for the core group, `group/version` otherwise, as in an object's `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `pytorchjobs.kubeflow.org`, as the server names a resource in error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Writes to the main resource leave `.status` alone and writes to `/status` change only it.
    pub fn has_status_subresource(&self) -> bool {
        self.subresources.contains(&"status")
    }

    /// The object path a field selector label reads, or None when the server rejects the label.
    pub fn field_path(&self, label: &str) -> Option<&'static str> {
        match label {
            "metadata.name" => Some("metadata.name"),
            "metadata.namespace" => Some("metadata.namespace"),
            _ => self
                .field_labels
                .iter()
                .find(|(name, _)| *name == label)
                .map(|(_, path)| *path),
        }
    }
}

pub fn by_plural(group: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|resource| resource.group == group && resource.plural == plural)
}

pub fn by_group_version_plural(group: &str, version: &str, plural: &str) -> Option<usize> {
    by_plural(group, plural).filter(|&index| RESOURCES[index].version == version)
}

/// The resource an object's `apiVersion` and `kind` name.
pub fn by_api_version_kind(api_version: &str, kind: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|resource| resource.api_version() == api_version && resource.kind == kind)
}

/// The resource a test names by kind (`Pod`), plural (`pods`) or short name (`po`), any case.
pub fn by_any_name(name: &str) -> Option<usize> {
    let wanted = name.to_ascii_lowercase();
    RESOURCES.iter().position(|resource| {
        resource.kind.to_ascii_lowercase() == wanted
            || resource.plural == wanted
            || resource.singular == wanted
            || resource.short_names.contains(&wanted.as_str())
    })
}

fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&str> = RESOURCES
        .iter()
        .map(|resource| resource.group)
        .filter(|group| !group.is_empty())
        .collect();
    groups.dedup();
    groups
}

fn versions_of(group: &str) -> Vec<&'static str> {
    let mut versions: Vec<&str> = RESOURCES
        .iter()
        .filter(|resource| resource.group == group)
        .map(|resource| resource.version)
        .collect();
    versions.dedup();
    versions
}

pub fn serves_group_version(group: &str, version: &str) -> bool {
    RESOURCES
        .iter()
        .any(|resource| resource.group == group && resource.version == version)
}

/// `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ]
    })
}

fn api_group(group: &str) -> Value {
    let versions: Vec<Value> = versions_of(group)
        .into_iter()
        .map(|version| json!({"groupVersion": format!("{group}/{version}"), "version": version}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": preferred,
    })
}

/// `GET /apis`.
pub fn api_group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().map(api_group).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`, or None for a group the fake does not serve.
pub fn api_group_document(group: &str) -> Option<Value> {
    if !groups().contains(&group) {
        return None;
    }
    let mut document = api_group(group);
    document["kind"] = json!("APIGroup");
    document["apiVersion"] = json!("v1");
    Some(document)
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`: each resource, then its subresources.
pub fn api_resource_list(group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for resource in RESOURCES
        .iter()
        .filter(|resource| resource.group == group && resource.version == version)
    {
        let mut entry = json!({
            "name": resource.plural,
            "singularName": resource.singular,
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": FULL_VERBS,
        });
        if !resource.short_names.is_empty() {
            entry["shortNames"] = json!(resource.short_names);
        }
        if !resource.categories.is_empty() {
            entry["categories"] = json!(resource.categories);
        }
        resources.push(entry);
        for subresource in resource.subresources {
            let verbs: &[&str] = if *subresource == "status" {
                &["get", "patch", "update"]
            } else {
                &["get"]
            };
            resources.push(json!({
                "name": format!("{}/{}", resource.plural, subresource),
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": if *subresource == "log" { "Pod" } else { resource.kind },
                "verbs": verbs,
            }));
        }
    }
    let mut document = json!({
        "kind": "APIResourceList",
        "groupVersion": if group.is_empty() { version.to_string() } else { format!("{group}/{version}") },
        "resources": resources,
    });
    if !group.is_empty() {
        document["apiVersion"] = json!("v1");
    }
    document
}

/// `GET /version`: the kubectl that picks a binary by server version needs it.
pub fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.4",
        "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
        "gitTreeState": "clean",
        "buildDate": "2025-04-22T16:02:27Z",
        "goVersion": "go1.23.6",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

//! What the fake cluster holds: objects with their server-set metadata, one resourceVersion counter
//! shared by all of them (as etcd's revision is), the history of changes watches replay, and pod logs.

use std::collections::{BTreeMap, HashMap, VecDeque};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::resources::{self, RESOURCES, ResourceType};
use super::status::ApiError;

/// How many changes watches can replay; older resourceVersions get `410 Expired`.
const KEPT_HISTORY: usize = 10_000;

/// Namespaces every cluster starts with.
const INITIAL_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Characters of generated name suffixes, as the API server picks them (no vowels, no look-alikes).
const NAME_SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn wire_name(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One write, as a watch replays it.
#[derive(Debug, Clone)]
pub struct Change {
    pub resource_version: u64,
    pub resource: usize,
    pub kind: ChangeKind,
    /// The object before the write; None for creations.
    pub previous: Option<Value>,
    /// The object after the write; for deletions its last state with the deletion's resourceVersion.
    pub object: Value,
}

/// Who writes, which decides how much of the object the server takes from the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// An API client: the server sets uid and creationTimestamp and checks resourceVersion.
    Client,
    /// The test describing the cluster: uid, creationTimestamp and status are taken as given, so
    /// fixtures keep their owner references and ages.
    Scenario,
}

/// Which parts of an object an update changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource: everything but `.status` where the resource has a status subresource.
    Main,
    /// The `/status` subresource: only `.status`.
    Status,
    /// Everything, as a controller or kubelet would leave it.
    Whole,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub time: DateTime<Utc>,
    pub text: String,
}

/// Namespace, pod and container.
pub type ContainerKey = (String, String, String);

/// Namespace (empty for cluster-scoped objects) and name.
type ObjectKey = (String, String);

#[derive(Debug)]
pub struct Store {
    objects: Vec<BTreeMap<ObjectKey, Value>>,
    resource_version: u64,
    history: VecDeque<Change>,
    /// The newest resourceVersion whose change is no longer in `history`.
    compacted_through: u64,
    serial: u64,
    logs: HashMap<ContainerKey, Vec<LogLine>>,
    previous_logs: HashMap<ContainerKey, Vec<LogLine>>,
    /// Counts appended log lines, so followers know when to look again.
    pub log_serial: u64,
}

pub fn timestamp(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// The object without the fields that are not its desired state, to tell whether `generation` moves.
fn desired_state(object: &Value) -> Value {
    let mut state = object.clone();
    if let Value::Object(fields) = &mut state {
        fields.remove("metadata");
        fields.remove("status");
        fields.remove("kind");
        fields.remove("apiVersion");
    }
    state
}

impl Store {
    pub fn new() -> Self {
        let mut store = Store {
            objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
            resource_version: 0,
            history: VecDeque::new(),
            compacted_through: 0,
            serial: 0,
            logs: HashMap::new(),
            previous_logs: HashMap::new(),
            log_serial: 0,
        };
        for namespace in INITIAL_NAMESPACES {
            store.ensure_namespace(namespace);
        }
        store
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    fn next_resource_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn next_uid(&mut self) -> String {
        self.serial += 1;
        format!("0f4a1c2e-5b6d-4e7f-8a9b-{:012x}", self.serial)
    }

    fn name_suffix(&mut self) -> String {
        self.serial += 1;
        let mut remaining = self.serial;
        let base = NAME_SUFFIX_ALPHABET.len() as u64;
        (0..5)
            .map(|_| {
                let character = NAME_SUFFIX_ALPHABET[(remaining % base) as usize] as char;
                remaining /= base;
                character
            })
            .collect()
    }

    fn record(&mut self, change: Change) {
        self.history.push_back(change);
        while self.history.len() > KEPT_HISTORY {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted_through = dropped.resource_version;
            }
        }
    }

    /// Forgets all history, as etcd compaction does: watches from any earlier resourceVersion expire.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted_through = self.resource_version;
    }

    /// Changes after `resource_version`, or `410 Expired` when some of them were forgotten.
    pub fn changes_after(&self, resource_version: u64) -> Result<Vec<&Change>, ApiError> {
        if resource_version < self.compacted_through {
            return Err(ApiError::expired(
                resource_version,
                self.compacted_through + 1,
            ));
        }
        Ok(self
            .history
            .iter()
            .filter(|change| change.resource_version > resource_version)
            .collect())
    }

    pub fn get(&self, resource: usize, namespace: &str, name: &str) -> Option<&Value> {
        self.objects[resource].get(&(namespace.to_string(), name.to_string()))
    }

    /// Objects of one resource, ordered by namespace then name; `None` means all namespaces.
    pub fn list(&self, resource: usize, namespace: Option<&str>) -> Vec<&Value> {
        self.objects[resource]
            .iter()
            .filter(|((object_namespace, _), _)| {
                namespace.is_none_or(|wanted| wanted == object_namespace)
            })
            .map(|(_, object)| object)
            .collect()
    }

    fn ensure_namespace(&mut self, namespace: &str) {
        if namespace.is_empty() || self.get(resources::namespaces(), "", namespace).is_some() {
            return;
        }
        let object = json!({"metadata": {"name": namespace}});
        // A namespace object never fails to be created when it does not exist yet.
        let _ = self.create(resources::namespaces(), "", object, Writer::Scenario);
    }

    /// Creates an object in `namespace` (empty for cluster-scoped resources).
    pub fn create(
        &mut self,
        resource: usize,
        namespace: &str,
        mut object: Value,
        writer: Writer,
    ) -> Result<Value, ApiError> {
        let resource_type = &RESOURCES[resource];
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        if !object["metadata"].is_object() {
            object["metadata"] = json!({});
        }
        let body_namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        if resource_type.namespaced {
            if !body_namespace.is_empty() && body_namespace != namespace {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            if self.get(resources::namespaces(), "", namespace).is_none() {
                if writer == Writer::Client {
                    let namespaces = &RESOURCES[resources::namespaces()];
                    return Err(ApiError::not_found(namespaces, namespace));
                }
                self.ensure_namespace(namespace);
            }
            object["metadata"]["namespace"] = json!(namespace);
        } else if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("namespace");
        }
        let mut name = name_of(&object).to_string();
        if name.is_empty() {
            let Some(prefix) = object["metadata"]["generateName"]
                .as_str()
                .map(str::to_string)
            else {
                return Err(ApiError::invalid(
                    resource_type,
                    "",
                    format!(
                        "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                        resource_type.kind
                    ),
                ));
            };
            name = format!("{prefix}{}", self.name_suffix());
            object["metadata"]["name"] = json!(name);
        }
        if self.get(resource, namespace, &name).is_some() {
            return Err(ApiError::already_exists(resource_type, &name));
        }

        object["kind"] = json!(resource_type.kind);
        object["apiVersion"] = json!(resource_type.api_version());
        let keeps_given = writer == Writer::Scenario;
        if !(keeps_given && object["metadata"]["uid"].is_string()) {
            object["metadata"]["uid"] = json!(self.next_uid());
        }
        if !(keeps_given && object["metadata"]["creationTimestamp"].is_string()) {
            object["metadata"]["creationTimestamp"] = json!(timestamp(Utc::now()));
        }
        if !(keeps_given && object["metadata"]["generation"].is_u64()) {
            object["metadata"]["generation"] = json!(1);
        }
        if resource == resources::namespaces() {
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            if object["spec"]["finalizers"].is_null() {
                object["spec"]["finalizers"] = json!(["kubernetes"]);
            }
            if object["status"]["phase"].is_null() {
                object["status"]["phase"] = json!("Active");
            }
        }
        if resource_type.kind == "Pod" && object["status"]["phase"].is_null() {
            object["status"]["phase"] = json!("Pending");
        }
        let resource_version = self.next_resource_version();
        object["metadata"]["resourceVersion"] = json!(resource_version.to_string());
        self.objects[resource].insert((namespace.to_string(), name), object.clone());
        self.record(Change {
            resource_version,
            resource,
            kind: ChangeKind::Added,
            previous: None,
            object: object.clone(),
        });
        Ok(object)
    }

    /// Replaces the stored object's `part` with the given one's. A write that changes nothing is not
    /// a change: no new resourceVersion, no watch event, as on a real server.
    pub fn update(
        &mut self,
        resource: usize,
        namespace: &str,
        name: &str,
        object: Value,
        part: Part,
        writer: Writer,
    ) -> Result<Value, ApiError> {
        let resource_type = &RESOURCES[resource];
        let Some(stored) = self.get(resource, namespace, name).cloned() else {
            return Err(ApiError::not_found(resource_type, name));
        };
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let given_name = name_of(&object);
        if !given_name.is_empty() && given_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({given_name}) does not match the name on the URL ({name})"
            )));
        }
        if writer == Writer::Client
            && let Some(expected) = object["metadata"]["resourceVersion"].as_str()
            && expected
                != stored["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
        {
            return Err(ApiError::conflict(resource_type, name));
        }
        if writer == Writer::Client && part != Part::Status {
            immutable_fields(resource_type, name, &stored, &object)?;
        }

        let mut updated = match part {
            Part::Status => {
                let mut updated = stored.clone();
                updated["status"] = object["status"].clone();
                updated
            }
            Part::Main | Part::Whole => {
                let mut updated = object;
                if part == Part::Main && resource_type.has_status_subresource() {
                    match stored.get("status") {
                        Some(status) => updated["status"] = status.clone(),
                        None => {
                            if let Some(fields) = updated.as_object_mut() {
                                fields.remove("status");
                            }
                        }
                    }
                }
                if !updated["metadata"].is_object() {
                    updated["metadata"] = json!({});
                }
                updated
            }
        };
        if updated["status"].is_null()
            && let Some(fields) = updated.as_object_mut()
        {
            fields.remove("status");
        }
        updated["kind"] = json!(resource_type.kind);
        updated["apiVersion"] = json!(resource_type.api_version());
        for server_owned in ["uid", "creationTimestamp", "resourceVersion", "name"] {
            updated["metadata"][server_owned] = stored["metadata"][server_owned].clone();
        }
        if resource_type.namespaced {
            updated["metadata"]["namespace"] = json!(namespace);
        }
        let generation = stored["metadata"]["generation"].as_u64().unwrap_or(1);
        updated["metadata"]["generation"] = if desired_state(&updated) == desired_state(&stored) {
            json!(generation)
        } else {
            json!(generation + 1)
        };
        if updated == stored {
            return Ok(stored);
        }
        let resource_version = self.next_resource_version();
        updated["metadata"]["resourceVersion"] = json!(resource_version.to_string());
        self.objects[resource].insert((namespace.to_string(), name.to_string()), updated.clone());
        self.record(Change {
            resource_version,
            resource,
            kind: ChangeKind::Modified,
            previous: Some(stored),
            object: updated.clone(),
        });
        Ok(updated)
    }

    /// Creates the object or replaces it whole, as a test describing the cluster wants.
    pub fn apply(&mut self, object: Value) -> Result<Value, ApiError> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let resource = resources::by_api_version_kind(api_version, kind).ok_or_else(|| {
            ApiError::bad_request(format!(
                "no served resource has apiVersion {api_version:?} and kind {kind:?}"
            ))
        })?;
        let namespace = if RESOURCES[resource].namespaced {
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        let name = name_of(&object).to_string();
        if !name.is_empty() && self.get(resource, &namespace, &name).is_some() {
            self.update(
                resource,
                &namespace,
                &name,
                object,
                Part::Whole,
                Writer::Scenario,
            )
        } else {
            self.create(resource, &namespace, object, Writer::Scenario)
        }
    }

    /// Deletes an object at once; with `cascade`, also what it owns (by ownerReferences) and, for a
    /// namespace, everything in it, as the garbage collector and namespace controller would.
    pub fn delete(
        &mut self,
        resource: usize,
        namespace: &str,
        name: &str,
        cascade: bool,
    ) -> Result<Value, ApiError> {
        let Some(removed) =
            self.objects[resource].remove(&(namespace.to_string(), name.to_string()))
        else {
            return Err(ApiError::not_found(&RESOURCES[resource], name));
        };
        let resource_version = self.next_resource_version();
        let mut deleted = removed.clone();
        deleted["metadata"]["resourceVersion"] = json!(resource_version.to_string());
        self.record(Change {
            resource_version,
            resource,
            kind: ChangeKind::Deleted,
            previous: Some(removed.clone()),
            object: deleted.clone(),
        });
        if RESOURCES[resource].kind == "Pod" {
            self.logs
                .retain(|(log_namespace, pod, _), _| !(log_namespace == namespace && pod == name));
            self.previous_logs
                .retain(|(log_namespace, pod, _), _| !(log_namespace == namespace && pod == name));
        }
        if cascade {
            let uid = removed["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let is_namespace = resource == resources::namespaces();
            let mut dependents = Vec::new();
            for (dependent_resource, objects) in self.objects.iter().enumerate() {
                for ((dependent_namespace, dependent_name), object) in objects {
                    let owned = object["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|owners| {
                            owners.iter().any(|owner| owner["uid"] == json!(uid))
                        });
                    let contained = is_namespace && dependent_namespace == name;
                    if owned || contained {
                        dependents.push((
                            dependent_resource,
                            dependent_namespace.clone(),
                            dependent_name.clone(),
                        ));
                    }
                }
            }
            for (dependent_resource, dependent_namespace, dependent_name) in dependents {
                // A dependent may already be gone through another owner deleted in this cascade.
                let _ = self.delete(
                    dependent_resource,
                    &dependent_namespace,
                    &dependent_name,
                    true,
                );
            }
        }
        Ok(deleted)
    }

    pub fn append_log(&mut self, container: ContainerKey, line: LogLine) {
        self.logs.entry(container).or_default().push(line);
        self.log_serial += 1;
    }

    pub fn set_previous_log(&mut self, container: ContainerKey, lines: Vec<LogLine>) {
        self.previous_logs.insert(container, lines);
        self.log_serial += 1;
    }

    /// Lines of a container's current run, or of its previous run.
    pub fn log_lines(&self, container: &ContainerKey, previous: bool) -> Option<&Vec<LogLine>> {
        if previous {
            self.previous_logs.get(container)
        } else {
            self.logs.get(container)
        }
    }
}

/// `value` without the fields at `paths` (each a list of keys), for comparing what may not change.
fn without(value: &Value, paths: &[&[&str]]) -> Value {
    let mut value = value.clone();
    for path in paths {
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let mut at = Some(&mut value);
        for key in parents {
            at = at.and_then(|inner| inner.get_mut(*key));
        }
        if let Some(object) = at.and_then(Value::as_object_mut) {
            object.remove(*last);
        }
    }
    value
}

/// The parts of a Pod and a Job that the API server does not let an update change: a pod's spec but
/// its images, active deadline, tolerations, grace period and scheduling gates (its node affinity
/// above all); a Job's pod template, but for the scheduling directives (node selector, affinity,
/// tolerations, scheduling gates, template labels and annotations) of a Job that is suspended and
/// has never started (what Kueue relies on).
fn immutable_fields(
    resource: &ResourceType,
    name: &str,
    stored: &Value,
    object: &Value,
) -> Result<(), ApiError> {
    match (resource.group, resource.kind) {
        ("", "Pod") => {
            let comparable = |pod: &Value| {
                let mut spec = without(
                    &pod["spec"],
                    &[
                        &["activeDeadlineSeconds"],
                        &["tolerations"],
                        &["terminationGracePeriodSeconds"],
                        &["schedulingGates"],
                    ],
                );
                for list in ["containers", "initContainers"] {
                    for container in spec[list].as_array_mut().into_iter().flatten() {
                        if let Some(container) = container.as_object_mut() {
                            container.remove("image");
                        }
                    }
                }
                spec
            };
            if object.get("spec").is_some() && comparable(stored) != comparable(object) {
                return Err(ApiError::invalid(
                    resource,
                    name,
                    format!(
                        "Pod \"{name}\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
                    ),
                ));
            }
        }
        ("batch", "Job") => {
            let before = &stored["spec"]["template"];
            let after = &object["spec"]["template"];
            if object.get("spec").is_none() || before == after {
                return Ok(());
            }
            let directives: [&[&str]; 6] = [
                &["metadata", "labels"],
                &["metadata", "annotations"],
                &["spec", "nodeSelector"],
                &["spec", "affinity"],
                &["spec", "tolerations"],
                &["spec", "schedulingGates"],
            ];
            let suspended_unstarted =
                stored["spec"]["suspend"] == json!(true) && stored["status"]["startTime"].is_null();
            if !suspended_unstarted || without(before, &directives) != without(after, &directives) {
                return Err(ApiError::invalid(
                    resource,
                    name,
                    format!(
                        "Job.batch \"{name}\" is invalid: spec.template: Invalid value: core.PodTemplateSpec{{...}}: field is immutable"
                    ),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

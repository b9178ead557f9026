//! Server-side printing: the `meta.k8s.io/v1` `Table` a client gets when it asks for
//! `application/json;as=Table`, as `kubectl get` does for its human-readable output.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::resources::ResourceType;

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowObject {
    None,
    Metadata,
    Object,
}

impl RowObject {
    pub fn from_query(value: Option<&str>) -> Self {
        match value {
            Some("None") => RowObject::None,
            Some("Object") => RowObject::Object,
            _ => RowObject::Metadata,
        }
    }
}

/// Whether the request's Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Ages as the server prints them: `45s`, `3m20s`, `5h10m`, `2d3h`, `400d`, `2y30d`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    let seconds = seconds.max(0);
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            rest => format!("{minutes}m{rest}s"),
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            rest => format!("{hours}h{rest}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        match days % 365 {
            0 => format!("{years}y"),
            rest => format!("{years}y{rest}d"),
        }
    } else {
        format!("{years}y")
    }
}

fn age_of(timestamp: &Value, now: DateTime<Utc>) -> String {
    timestamp
        .as_str()
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|time| human_duration((now - time.with_timezone(&Utc)).num_seconds()))
        .unwrap_or_else(|| "<unknown>".to_string())
}

fn column(name: &str, format: &str, priority: u8, description: &str) -> Value {
    json!({
        "name": name,
        "type": "string",
        "format": format,
        "description": description,
        "priority": priority,
    })
}

fn columns(resource: &ResourceType) -> Vec<Value> {
    let name = column("Name", "name", 0, "Name must be unique within a namespace.");
    let age = column(
        "Age",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    match resource.kind {
        "Pod" => vec![
            name,
            column(
                "Ready",
                "",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            column(
                "Status",
                "",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            column(
                "Restarts",
                "",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            age,
            column("IP", "", 1, "IP address allocated to the pod."),
            column("Node", "", 1, "Name of the node the pod is scheduled on."),
        ],
        "Node" => vec![
            name,
            column("Status", "", 0, "The status of the node"),
            column("Roles", "", 0, "The roles of the node"),
            age,
            column("Version", "", 0, "Kubelet Version reported by the node."),
            column("Internal-IP", "", 1, "List of internal IPs for the node."),
        ],
        "Namespace" => vec![
            name,
            column("Status", "", 0, "The status of the namespace"),
            age,
        ],
        "Event" => vec![
            column(
                "Last Seen",
                "",
                0,
                "Time when last this event was observed.",
            ),
            column(
                "Type",
                "",
                0,
                "Type of this event (Normal, Warning), new types could be added in the future.",
            ),
            column(
                "Reason",
                "",
                0,
                "This should be a short, machine understandable string that gives the reason for this event being generated.",
            ),
            column("Object", "", 0, "The object that this event is about."),
            column(
                "Message",
                "",
                0,
                "A human-readable description of the status of this operation.",
            ),
        ],
        "Job" => vec![
            name,
            column(
                "Completions",
                "",
                0,
                "The desired number of successfully finished pods the job should be run with.",
            ),
            age,
        ],
        "PyTorchJob" | "TrainJob" => vec![name, column("State", "", 0, ""), age],
        "JobSet" => vec![
            name,
            column("TerminalState", "", 0, "Final state of JobSet"),
            column("Restarts", "", 0, "Number of restarts"),
            column("Completed", "", 0, ""),
            column("Suspended", "", 0, "JobSet suspended"),
            age,
        ],
        "Workload" => vec![
            name,
            column(
                "Queue",
                "",
                0,
                "Name of the queue this workload was submitted to",
            ),
            column(
                "Reserved in",
                "",
                0,
                "Name of the ClusterQueue where the workload is reserving quota",
            ),
            column("Admitted", "", 0, "Admission status"),
            column("Finished", "", 0, "Workload finished"),
            age,
        ],
        "RayJob" => vec![
            name,
            column("Job Status", "", 0, ""),
            column("Deployment Status", "", 0, ""),
            age,
        ],
        _ => vec![name, age],
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The STATUS column of `kubectl get pods`: a container's waiting or terminated reason wins over
/// the phase, and a pod being deleted is Terminating.
fn pod_status(pod: &Value) -> String {
    let mut reason = pod["status"]["reason"]
        .as_str()
        .or_else(|| pod["status"]["phase"].as_str())
        .unwrap_or("Unknown")
        .to_string();
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for status in statuses.iter().rev() {
        let state = &status["state"];
        if let Some(waiting) = state["waiting"]["reason"]
            .as_str()
            .filter(|reason| !reason.is_empty())
        {
            reason = waiting.to_string();
        } else if let Some(terminated) = state["terminated"]["reason"]
            .as_str()
            .filter(|reason| !reason.is_empty())
        {
            reason = terminated.to_string();
        } else if state["terminated"].is_object() {
            reason = match state["terminated"]["signal"].as_i64() {
                Some(signal) if signal != 0 => format!("Signal:{signal}"),
                _ => format!("ExitCode:{}", text(&state["terminated"]["exitCode"])),
            };
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".to_string();
    }
    reason
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = statuses
        .iter()
        .filter(|status| status["ready"] == json!(true))
        .count();
    let restarts: u64 = statuses
        .iter()
        .map(|status| status["restartCount"].as_u64().unwrap_or(0))
        .sum();
    let or_none = |value: &Value| match text(value) {
        empty if empty.is_empty() => "<none>".to_string(),
        found => found,
    };
    vec![
        json!(format!("{ready}/{total}")),
        json!(pod_status(pod)),
        json!(restarts.to_string()),
        Value::Null,
        json!(or_none(&pod["status"]["podIP"])),
        json!(or_none(&pod["spec"]["nodeName"])),
    ]
}

fn node_cells(node: &Value) -> Vec<Value> {
    let conditions = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut status: Vec<String> = conditions
        .iter()
        .filter(|condition| condition["type"] == json!("Ready"))
        .map(|condition| {
            if condition["status"] == json!("True") {
                "Ready".to_string()
            } else {
                "NotReady".to_string()
            }
        })
        .collect();
    if status.is_empty() {
        status.push("Unknown".to_string());
    }
    if node["spec"]["unschedulable"] == json!(true) {
        status.push("SchedulingDisabled".to_string());
    }
    let mut roles: Vec<String> = node["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(key, value)| {
                    key.strip_prefix("node-role.kubernetes.io/")
                        .map(str::to_string)
                        .or_else(|| (key == "kubernetes.io/role").then(|| text(value)))
                })
                .filter(|role| !role.is_empty())
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    let internal_ip = node["status"]["addresses"]
        .as_array()
        .and_then(|addresses| {
            addresses
                .iter()
                .find(|address| address["type"] == json!("InternalIP"))
                .map(|address| text(&address["address"]))
        })
        .unwrap_or_else(|| "<none>".to_string());
    vec![
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        Value::Null,
        json!(text(&node["status"]["nodeInfo"]["kubeletVersion"])),
        json!(internal_ip),
    ]
}

fn event_cells(event: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let seen = [
        &event["lastTimestamp"],
        &event["eventTime"],
        &event["firstTimestamp"],
    ]
    .into_iter()
    .find(|time| time.is_string())
    .map_or_else(|| "<unknown>".to_string(), |time| age_of(time, now));
    let involved = &event["involvedObject"];
    vec![
        json!(seen),
        json!(text(&event["type"])),
        json!(text(&event["reason"])),
        json!(format!(
            "{}/{}",
            text(&involved["kind"]).to_ascii_lowercase(),
            text(&involved["name"])
        )),
        json!(text(&event["message"])),
    ]
}

/// One row's cells; `Value::Null` marks where the age goes.
fn kind_cells(resource: &ResourceType, object: &Value, now: DateTime<Utc>) -> Vec<Value> {
    match resource.kind {
        "Pod" => pod_cells(object),
        "Node" => node_cells(object),
        "Namespace" => vec![json!(text(&object["status"]["phase"])), Value::Null],
        "Event" => event_cells(object, now),
        "Job" => vec![
            json!(format!(
                "{}/{}",
                object["status"]["succeeded"].as_u64().unwrap_or(0),
                object["spec"]["completions"].as_u64().unwrap_or(1)
            )),
            Value::Null,
        ],
        "JobSet" => vec![
            json!(text(&object["status"]["terminalState"])),
            json!(text(&object["status"]["restarts"])),
            json!(condition_status(object, "Completed")),
            json!(text(&object["spec"]["suspend"])),
            Value::Null,
        ],
        "Workload" => vec![
            json!(text(&object["spec"]["queueName"])),
            json!(text(&object["status"]["admission"]["clusterQueue"])),
            json!(condition_status(object, "Admitted")),
            json!(condition_status(object, "Finished")),
            Value::Null,
        ],
        "PyTorchJob" | "TrainJob" => {
            let state = object["status"]["conditions"]
                .as_array()
                .and_then(|conditions| conditions.last())
                .map(|condition| text(&condition["type"]))
                .unwrap_or_default();
            vec![json!(state), Value::Null]
        }
        "RayJob" => vec![
            json!(text(&object["status"]["jobStatus"])),
            json!(text(&object["status"]["jobDeploymentStatus"])),
            Value::Null,
        ],
        _ => vec![Value::Null],
    }
}

/// The status of the condition of type `kind`, as a printer column's JSONPath filter reads it.
fn condition_status(object: &Value, kind: &str) -> String {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|condition| condition["type"] == kind)
        .map(|condition| text(&condition["status"]))
        .unwrap_or_default()
}

fn row(resource: &ResourceType, object: &Value, include: RowObject, now: DateTime<Utc>) -> Value {
    let age = age_of(&object["metadata"]["creationTimestamp"], now);
    let mut cells = Vec::new();
    if resource.kind != "Event" {
        cells.push(object["metadata"]["name"].clone());
    }
    cells.extend(
        kind_cells(resource, object, now)
            .into_iter()
            .map(|cell| if cell.is_null() { json!(age) } else { cell }),
    );
    let mut row = json!({"cells": cells});
    match include {
        RowObject::None => {}
        RowObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object["metadata"],
            });
        }
        RowObject::Object => row["object"] = object.clone(),
    }
    row
}

/// A Table of `objects`; `resource_version` goes in its list metadata.
pub fn table(
    resource: &ResourceType,
    objects: &[&Value],
    include: RowObject,
    resource_version: Option<u64>,
) -> Value {
    let now = Utc::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| row(resource, object, include, now))
        .collect();
    let metadata = match resource_version {
        Some(version) => json!({"resourceVersion": version.to_string()}),
        None => json!({}),
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(resource),
        "rows": rows,
    })
}

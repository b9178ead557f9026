//! `pods/{name}/log`: a container's lines as `text/plain`, optionally timestamped the way the kubelet
//! does it, and with `follow=true` kept open for lines appended later until the container's run
//! ends (its status shows it terminated) or the pod is deleted.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use hyper::body::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::body::{self, Chunk, ResponseBody};
use super::resources::{self, RESOURCES};
use super::shared::{OpenStream, Shared};
use super::status::ApiError;
use super::store::{ContainerKey, LogLine, Store};
use super::watch::{Wake, Wakeups};

#[derive(Debug, Clone)]
pub struct LogRequest {
    pub container: ContainerKey,
    pub follow: bool,
    pub timestamps: bool,
    pub since: Option<DateTime<Utc>>,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
    pub previous: bool,
}

/// The kubelet's fixed-width RFC 3339 time with nanoseconds.
pub fn kubelet_timestamp(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
}

fn pods() -> usize {
    resources::by_plural("", "pods").expect("the resource table serves pods")
}

fn container_names(pod: &Value, field: &str) -> Vec<String> {
    pod["spec"][field]
        .as_array()
        .map(|containers| {
            containers
                .iter()
                .filter_map(|container| container["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Which container of the pod a request means, refused as the API server and kubelet refuse it.
pub fn resolve_container(
    store: &Store,
    namespace: &str,
    pod_name: &str,
    requested: Option<&str>,
    previous: bool,
) -> Result<ContainerKey, ApiError> {
    let pod = store
        .get(pods(), namespace, pod_name)
        .ok_or_else(|| ApiError::not_found(&RESOURCES[pods()], pod_name))?;
    let containers = container_names(pod, "containers");
    let mut valid = containers.clone();
    valid.extend(container_names(pod, "initContainers"));
    valid.extend(container_names(pod, "ephemeralContainers"));
    let container = match requested.filter(|name| !name.is_empty()) {
        Some(name) if valid.iter().any(|valid_name| valid_name == name) => name.to_string(),
        Some(name) => {
            return Err(ApiError::bad_request(format!(
                "container {name} is not valid for pod {pod_name}"
            )));
        }
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    let key = (
        namespace.to_string(),
        pod_name.to_string(),
        container.clone(),
    );
    let status = ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|field| pod["status"][field].as_array())
        .flatten()
        .find(|status| status["name"].as_str() == Some(container.as_str()));
    let last_terminated =
        status.is_some_and(|status| status["lastState"]["terminated"].is_object());
    if previous {
        if store.log_lines(&key, true).is_none() && !last_terminated {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
            )));
        }
    } else if let Some(waiting) = status
        .map(|status| &status["state"]["waiting"])
        .filter(|waiting| waiting.is_object())
        && !last_terminated
    {
        let reason = match waiting["reason"].as_str().unwrap_or_default() {
            "ErrImagePull" | "ImagePullBackOff" => "trying and failing to pull image".to_string(),
            "" => "ContainerCreating".to_string(),
            other => other.to_string(),
        };
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {reason}"
        )));
    }
    Ok(key)
}

impl LogRequest {
    fn wanted(&self, line: &LogLine) -> bool {
        self.since.is_none_or(|since| line.time >= since)
    }

    fn format(&self, line: &LogLine) -> String {
        let mut text = String::new();
        if self.timestamps {
            text.push_str(&kubelet_timestamp(line.time));
            text.push(' ');
        }
        text.push_str(&line.text);
        text.push('\n');
        text
    }
}

/// Starts the stream on the server's runtime and returns its body.
pub fn start(shared: Arc<Shared>, request: LogRequest) -> ResponseBody {
    let (sender, body) = body::stream();
    tokio::spawn(run(shared, request, sender));
    body
}

/// Sends lines until `limitBytes` is reached; false once the stream should end.
async fn send_lines(
    request: &LogRequest,
    lines: &[LogLine],
    sent_bytes: &mut usize,
    sender: &mpsc::Sender<Chunk>,
) -> bool {
    for line in lines.iter().filter(|line| request.wanted(line)) {
        let mut text = request.format(line);
        if let Some(limit) = request.limit_bytes {
            let room = limit.saturating_sub(*sent_bytes);
            if text.len() >= room {
                text.truncate(room);
                let _ = sender.send(Ok(Bytes::from(text))).await;
                return false;
            }
        }
        *sent_bytes += text.len();
        if sender.send(Ok(Bytes::from(text))).await.is_err() {
            return false;
        }
    }
    true
}

/// Whether the container's current run is over, after which the kubelet ends a followed log.
fn run_is_over(store: &Store, container: &ContainerKey) -> bool {
    let (namespace, pod, name) = container;
    let Some(pod) = store.get(pods(), namespace, pod) else {
        return true;
    };
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|field| pod["status"][field].as_array())
        .flatten()
        .find(|status| status["name"].as_str() == Some(name.as_str()))
        .is_some_and(|status| status["state"]["terminated"].is_object())
}

async fn run(shared: Arc<Shared>, request: LogRequest, sender: mpsc::Sender<Chunk>) {
    let _open = request
        .follow
        .then(|| OpenStream::log_follow(shared.clone()));
    let mut appends = shared.subscribe_log_appends();
    let mut wakeups = Wakeups::subscribe(&shared);
    let (existing, mut next_index, mut over) = shared.read(|store| {
        let lines = store
            .log_lines(&request.container, request.previous)
            .cloned()
            .unwrap_or_default();
        let wanted: Vec<LogLine> = lines
            .iter()
            .filter(|line| request.wanted(line))
            .cloned()
            .collect();
        let first = request
            .tail_lines
            .map_or(0, |tail| wanted.len().saturating_sub(tail));
        (
            wanted[first..].to_vec(),
            lines.len(),
            run_is_over(store, &request.container),
        )
    });
    let mut sent_bytes = 0;
    if !send_lines(&request, &existing, &mut sent_bytes, &sender).await
        || !request.follow
        || request.previous
    {
        return;
    }
    while !over {
        match wakeups.next(&sender, appends.changed()).await {
            Wake::Changed | Wake::Own(Ok(())) => {}
            Wake::Own(Err(_)) | Wake::Over => return,
        }
        let appended;
        (appended, over) = shared.read(|store| {
            let appended = store
                .log_lines(&request.container, false)
                .and_then(|lines| lines.get(next_index..))
                .map(<[LogLine]>::to_vec)
                .unwrap_or_default();
            (appended, run_is_over(store, &request.container))
        });
        next_index += appended.len();
        if !send_lines(&request, &appended, &mut sent_bytes, &sender).await {
            return;
        }
    }
}

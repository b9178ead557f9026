//! The fake API server checked over plain HTTP, request by request, so that a failure points at the
//! server and not at a client library: discovery, selectors, pagination, writes and patches, watches
//! and their resumption, logs, refusals and the request record.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::kube_fake::FakeKube;
use crate::support::FIXTURE_NODE_STATUSES;

const READ_TIMEOUT: Duration = Duration::from_secs(10);

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn send_request(
    kube: &FakeKube,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", kube.port())).unwrap();
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let mut head =
        format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    if let Some(body) = body {
        stream.write_all(body.as_bytes()).unwrap();
    }
    stream
}

fn read_head(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            return (status, headers);
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
}

/// Reads one chunk of a chunked body; None at its end.
fn read_chunk(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut size_line = String::new();
    reader.read_line(&mut size_line).ok()?;
    let size = usize::from_str_radix(size_line.trim(), 16).ok()?;
    let mut chunk = vec![0; size + 2];
    reader.read_exact(&mut chunk).ok()?;
    chunk.truncate(size);
    (size > 0).then_some(chunk)
}

fn call_with(
    kube: &FakeKube,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Reply {
    let stream = send_request(kube, method, target, headers, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let chunked = headers
        .iter()
        .any(|(name, value)| name.eq_ignore_ascii_case("transfer-encoding") && value == "chunked");
    let mut body = Vec::new();
    if chunked {
        while let Some(chunk) = read_chunk(&mut reader) {
            body.extend(chunk);
        }
    } else {
        reader.read_to_end(&mut body).unwrap();
    }
    Reply {
        status,
        headers,
        body,
    }
}

const AUTHORIZED: (&str, &str) = ("Authorization", "Bearer fake-token");

fn get(kube: &FakeKube, target: &str) -> Reply {
    call_with(kube, "GET", target, &[AUTHORIZED], None)
}

fn send_json(
    kube: &FakeKube,
    method: &str,
    target: &str,
    content_type: &str,
    body: &Value,
) -> Reply {
    call_with(
        kube,
        method,
        target,
        &[AUTHORIZED, ("Content-Type", content_type)],
        Some(&body.to_string()),
    )
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// An open watch read event by event.
struct WatchStream {
    reader: BufReader<TcpStream>,
    pending: String,
}

impl WatchStream {
    fn open(kube: &FakeKube, target: &str) -> WatchStream {
        let stream = send_request(kube, "GET", target, &[AUTHORIZED], None);
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader);
        assert_eq!(status, 200, "watch {target}");
        assert!(
            headers
                .iter()
                .any(|(name, value)| name.eq_ignore_ascii_case("content-type")
                    && value == "application/json")
        );
        WatchStream {
            reader,
            pending: String::new(),
        }
    }

    /// The next event, or None when the stream ended (cleanly or not).
    fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(newline) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=newline).collect();
                return Some(serde_json::from_str(line.trim()).unwrap());
            }
            let chunk = read_chunk(&mut self.reader)?;
            self.pending.push_str(&String::from_utf8(chunk).unwrap());
        }
    }

    fn next_summary(&mut self) -> Option<(String, String)> {
        self.next().map(|event| {
            (
                event["type"].as_str().unwrap().to_string(),
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
    }
}

fn pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    })
}

#[test]
fn discovery_documents_describe_the_served_resources() {
    let kube = FakeKube::start();
    let api = get(&kube, "/api").json();
    assert_eq!(api["kind"], "APIVersions");
    assert_eq!(api["versions"], json!(["v1"]));

    let groups = get(&kube, "/apis").json();
    assert_eq!(groups["kind"], "APIGroupList");
    let group_names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|group| group["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        group_names,
        [
            "batch",
            "kubeflow.org",
            "ray.io",
            "jobset.x-k8s.io",
            "trainer.kubeflow.org",
            "kueue.x-k8s.io"
        ]
    );
    assert_eq!(
        groups["groups"][5]["preferredVersion"],
        json!({"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"})
    );
    assert_eq!(
        groups["groups"][1]["preferredVersion"],
        json!({"groupVersion": "kubeflow.org/v1", "version": "v1"})
    );

    let core = get(&kube, "/api/v1").json();
    assert_eq!(core["kind"], "APIResourceList");
    assert_eq!(core["groupVersion"], "v1");
    let resource = |list: &Value, name: &str| -> Value {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|resource| resource["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from {list}"))
    };
    let pods = resource(&core, "pods");
    assert_eq!(pods["singularName"], "pod");
    assert_eq!(pods["namespaced"], true);
    assert_eq!(pods["kind"], "Pod");
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert!(pods["verbs"].as_array().unwrap().contains(&json!("watch")));
    assert_eq!(resource(&core, "pods/log")["verbs"], json!(["get"]));
    assert_eq!(
        resource(&core, "pods/status")["verbs"],
        json!(["get", "patch", "update"])
    );
    assert_eq!(resource(&core, "nodes")["shortNames"], json!(["no"]));
    assert_eq!(resource(&core, "nodes")["namespaced"], false);
    resource(&core, "nodes/status");
    resource(&core, "events");
    resource(&core, "namespaces");

    let kubeflow = get(&kube, "/apis/kubeflow.org/v1").json();
    assert_eq!(kubeflow["groupVersion"], "kubeflow.org/v1");
    assert_eq!(resource(&kubeflow, "pytorchjobs")["kind"], "PyTorchJob");
    let ray = get(&kube, "/apis/ray.io/v1").json();
    resource(&ray, "rayjobs");
    resource(&ray, "rayclusters");
    assert_eq!(
        resource(&get(&kube, "/apis/batch/v1").json(), "jobs")["kind"],
        "Job"
    );

    assert_eq!(get(&kube, "/apis/apps/v1").status, 404);
    assert_eq!(get(&kube, "/openapi/v3").status, 404);
}

#[test]
fn aggregated_discovery_requests_get_the_legacy_document_as_plain_json() {
    let kube = FakeKube::start();
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let reply = call_with(
        &kube,
        "GET",
        "/apis",
        &[AUTHORIZED, ("Accept", accept)],
        None,
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json()["kind"], "APIGroupList");
}

#[test]
fn a_wrong_token_or_expired_credentials_are_unauthorized() {
    let kube = FakeKube::start();
    let wrong = call_with(
        &kube,
        "GET",
        "/api/v1/nodes",
        &[("Authorization", "Bearer stale")],
        None,
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(
        wrong.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
    assert_eq!(get(&kube, "/api/v1/nodes").status, 200);
    // kubectl sends no credentials over plain HTTP; they pass.
    assert_eq!(
        call_with(&kube, "GET", "/api/v1/nodes", &[], None).status,
        200
    );
    kube.unauthorized(true);
    assert_eq!(get(&kube, "/api/v1/nodes").status, 401);
    assert_eq!(
        call_with(&kube, "GET", "/api/v1/nodes", &[], None).status,
        401
    );
    kube.unauthorized(false);
    assert_eq!(get(&kube, "/api/v1/nodes").status, 200);
}

#[test]
fn lists_have_the_list_kind_resource_version_and_namespace_scope() {
    let kube = FakeKube::with_every_fixture();
    let pods = get(&kube, "/api/v1/namespaces/ml/pods").json();
    assert_eq!(pods["kind"], "PodList");
    assert_eq!(pods["apiVersion"], "v1");
    assert_eq!(
        pods["metadata"]["resourceVersion"],
        kube.resource_version().to_string()
    );
    assert!(names(&pods).contains(&"llama-pretrain-master-0".to_string()));
    // Built-in kinds list their items without kind; custom resources keep it.
    assert!(pods["items"][0].get("kind").is_none());
    let jobs = get(&kube, "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs").json();
    assert_eq!(jobs["kind"], "PyTorchJobList");
    assert_eq!(
        names(&jobs),
        ["bert-finetune", "llama-pretrain", "resnet-eval"]
    );
    assert_eq!(jobs["items"][0]["kind"], "PyTorchJob");

    assert_eq!(
        names(&get(&kube, "/api/v1/namespaces/default/pods").json()),
        Vec::<String>::new()
    );
    let all_pods = get(&kube, "/api/v1/pods").json();
    assert_eq!(names(&all_pods).len(), names(&pods).len());
    let nodes = get(&kube, "/api/v1/nodes").json();
    assert_eq!(nodes["kind"], "NodeList");
    assert_eq!(
        names(&nodes),
        [
            "gpu-node-1",
            "gpu-node-2",
            "gpu-node-3",
            "gpu-node-4",
            "gpu-node-5",
            "gpu-spot-1"
        ]
    );
    let events = get(&kube, "/api/v1/events").json();
    assert!(names(&events).len() >= 10);
}

#[test]
fn label_selectors_support_every_operator() {
    let kube = FakeKube::start();
    kube.apply(pod(
        "a",
        json!({"tier": "gpu", "rank": "0", "spot": "true"}),
    ));
    kube.apply(pod("b", json!({"tier": "gpu", "rank": "1"})));
    kube.apply(pod("c", json!({"tier": "cpu", "rank": "2"})));
    kube.apply(pod("d", json!({})));
    let select = |selector: &str| {
        let encoded: String = selector
            .bytes()
            .map(|byte| match byte {
                b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' => (byte as char).to_string(),
                other => format!("%{other:02X}"),
            })
            .collect();
        let reply = get(
            &kube,
            &format!("/api/v1/namespaces/ml/pods?labelSelector={encoded}"),
        );
        assert_eq!(reply.status, 200, "{selector}: {}", reply.text());
        names(&reply.json())
    };
    assert_eq!(select("tier=gpu"), ["a", "b"]);
    assert_eq!(select("tier==gpu"), ["a", "b"]);
    assert_eq!(select("tier!=gpu"), ["c", "d"]);
    assert_eq!(select("tier in (gpu, cpu)"), ["a", "b", "c"]);
    assert_eq!(select("rank notin (0,1)"), ["c", "d"]);
    assert_eq!(select("spot"), ["a"]);
    assert_eq!(select("!spot"), ["b", "c", "d"]);
    assert_eq!(select("tier=gpu,!spot"), ["b"]);
    assert_eq!(select("tier in (gpu),rank in (1,2)"), ["b"]);
    assert_eq!(select("rank>0"), ["b", "c"]);
    assert_eq!(select(""), ["a", "b", "c", "d"]);
    let invalid = get(
        &kube,
        "/api/v1/namespaces/ml/pods?labelSelector=tier%20in%20gpu)",
    );
    assert_eq!(invalid.status, 400);
    assert_eq!(invalid.json()["reason"], "BadRequest");
}

#[test]
fn field_selectors_read_the_indexed_fields() {
    let kube = FakeKube::with_every_fixture();
    let select = |path: &str| {
        let reply = get(&kube, path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        names(&reply.json())
    };
    assert_eq!(
        select("/api/v1/namespaces/ml/pods?fieldSelector=spec.nodeName%3Dgpu-node-2"),
        ["llama-pretrain-worker-0"]
    );
    assert_eq!(
        select("/api/v1/pods?fieldSelector=status.phase%3DFailed"),
        ["bert-finetune-master-0", "bert-finetune-worker-0"]
    );
    assert_eq!(
        select("/api/v1/namespaces/ml/pods?fieldSelector=metadata.name%3Dnccl-tests-x7k2p"),
        ["nccl-tests-x7k2p"]
    );
    let running_elsewhere = select(
        "/api/v1/namespaces/ml/pods?fieldSelector=status.phase%3DRunning,spec.nodeName!%3Dgpu-node-1",
    );
    assert!(running_elsewhere.contains(&"llama-pretrain-worker-0".to_string()));
    assert!(!running_elsewhere.contains(&"llama-pretrain-master-0".to_string()));
    assert_eq!(
        get(&kube, "/api/v1/namespaces/ml/pytorchjobs").status,
        404,
        "pytorchjobs are not core resources"
    );
    assert_eq!(
        select("/apis/kubeflow.org/v1/pytorchjobs?fieldSelector=metadata.namespace%3Dml").len(),
        3
    );

    let events_about = select(
        "/api/v1/namespaces/ml/events?fieldSelector=involvedObject.kind%3DPod,involvedObject.name%3Dnccl-tests-x7k2p",
    );
    assert_eq!(events_about.len(), 5);
    let pod_uid = kube.get("Pod", "ml", "nccl-tests-x7k2p").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        select(&format!(
            "/api/v1/events?fieldSelector=involvedObject.uid%3D{pod_uid}"
        ))
        .len(),
        5
    );
    assert_eq!(
        select(
            "/api/v1/events?fieldSelector=involvedObject.namespace%3Dml,involvedObject.kind!%3DPod"
        )
        .len(),
        0
    );
    assert_eq!(
        select("/api/v1/events?fieldSelector=involvedObject.kind%3DNode").len(),
        2
    );

    let unsupported = get(
        &kube,
        "/api/v1/namespaces/ml/pods?fieldSelector=spec.priority%3D0",
    );
    assert_eq!(unsupported.status, 400);
    assert_eq!(
        unsupported.json()["message"],
        "field label not supported: spec.priority"
    );
}

#[test]
fn limit_and_continue_page_through_a_list() {
    let kube = FakeKube::start();
    for index in 0..5 {
        kube.apply(pod(&format!("p{index}"), json!({})));
    }
    let first = get(&kube, "/api/v1/namespaces/ml/pods?limit=2").json();
    assert_eq!(names(&first), ["p0", "p1"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let token = first["metadata"]["continue"].as_str().unwrap();
    let second = get(
        &kube,
        &format!("/api/v1/namespaces/ml/pods?limit=2&continue={token}"),
    )
    .json();
    assert_eq!(names(&second), ["p2", "p3"]);
    let token = second["metadata"]["continue"].as_str().unwrap();
    let last = get(
        &kube,
        &format!("/api/v1/namespaces/ml/pods?limit=2&continue={token}"),
    )
    .json();
    assert_eq!(names(&last), ["p4"]);
    assert!(last["metadata"].get("continue").is_none());
    assert_eq!(
        get(&kube, "/api/v1/namespaces/ml/pods?continue=zz").status,
        400
    );
}

#[test]
fn create_get_replace_and_conflicts_behave_like_the_api_server() {
    let kube = FakeKube::start();
    kube.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}));
    let created = send_json(
        &kube,
        "POST",
        "/api/v1/namespaces/ml/pods",
        "application/json",
        &pod("p", json!({"app": "x"})),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let created = created.json();
    let metadata = &created["metadata"];
    assert_eq!(metadata["namespace"], "ml");
    assert!(metadata["uid"].as_str().unwrap().len() == 36);
    assert!(
        metadata["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert_eq!(metadata["generation"], 1);
    assert_eq!(created["status"]["phase"], "Pending");
    let version: u64 = metadata["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let mismatched = send_json(
        &kube,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        &pod("r", json!({})),
    );
    assert_eq!(mismatched.status, 400);
    assert_eq!(
        mismatched.json()["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    let duplicate = send_json(
        &kube,
        "POST",
        "/api/v1/namespaces/ml/pods",
        "application/json",
        &pod("p", json!({})),
    );
    assert_eq!(duplicate.status, 409);
    assert_eq!(
        duplicate.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"p\" already exists", "reason": "AlreadyExists",
               "details": {"name": "p", "kind": "pods"}, "code": 409})
    );
    let mut elsewhere = pod("q", json!({}));
    elsewhere["metadata"]["namespace"] = json!("nowhere");
    let missing_namespace = send_json(
        &kube,
        "POST",
        "/api/v1/namespaces/nowhere/pods",
        "application/json",
        &elsewhere,
    );
    assert_eq!(missing_namespace.status, 404);
    assert_eq!(
        missing_namespace.json()["message"],
        "namespaces \"nowhere\" not found"
    );

    let missing = get(
        &kube,
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/nope",
    );
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pytorchjobs.kubeflow.org \"nope\" not found", "reason": "NotFound",
               "details": {"name": "nope", "group": "kubeflow.org", "kind": "pytorchjobs"}, "code": 404})
    );

    let mut replacement = created.clone();
    replacement["metadata"]["labels"]["app"] = json!("y");
    replacement["spec"]["containers"][0]["image"] = json!("busybox:2");
    replacement["status"]["phase"] = json!("Running");
    let replaced = send_json(
        &kube,
        "PUT",
        "/api/v1/namespaces/ml/pods/p",
        "application/json",
        &replacement,
    )
    .json();
    assert_eq!(replaced["metadata"]["labels"]["app"], "y");
    assert_eq!(replaced["metadata"]["generation"], 2);
    assert_eq!(
        replaced["status"]["phase"], "Pending",
        "the main resource ignores status"
    );
    let newer: u64 = replaced["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(newer > version);

    let stale = send_json(
        &kube,
        "PUT",
        "/api/v1/namespaces/ml/pods/p",
        "application/json",
        &replacement,
    );
    assert_eq!(stale.status, 409);
    assert_eq!(stale.json()["reason"], "Conflict");

    let mut status_update = replaced.clone();
    status_update["status"]["phase"] = json!("Running");
    let updated = send_json(
        &kube,
        "PUT",
        "/api/v1/namespaces/ml/pods/p/status",
        "application/json",
        &status_update,
    )
    .json();
    assert_eq!(updated["status"]["phase"], "Running");
    assert_eq!(updated["metadata"]["generation"], 2);
    assert_eq!(
        get(&kube, "/api/v1/namespaces/ml/pods/p/status").json()["status"]["phase"],
        "Running"
    );
}

#[test]
fn patches_merge_replace_lists_and_apply_json_patch_operations() {
    let kube = FakeKube::with_every_fixture();
    let cordoned = send_json(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-1",
        "application/strategic-merge-patch+json",
        &json!({"spec": {"unschedulable": true}}),
    );
    assert_eq!(cordoned.status, 200, "{}", cordoned.text());
    assert_eq!(
        kube.get("nodes", "", "gpu-node-1").unwrap()["spec"]["unschedulable"],
        true
    );
    assert_eq!(
        kube.get("nodes", "", "gpu-node-1").unwrap()["spec"]["podCIDR"],
        "10.244.1.0/24",
        "a merge patch leaves other fields alone"
    );

    let taint =
        json!({"key": "runguard.io/quarantined", "value": "xid-79", "effect": "NoSchedule"});
    let tainted = send_json(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-2",
        "application/merge-patch+json",
        &json!({"spec": {"taints": [taint]}}),
    )
    .json();
    assert_eq!(
        tainted["spec"]["taints"],
        json!([taint]),
        "lists are replaced whole"
    );

    let relabelled = send_json(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-3",
        "application/json-patch+json",
        &json!([
            {"op": "add", "path": "/metadata/labels/runguard.io~1state", "value": "drained"},
            {"op": "replace", "path": "/spec/podCIDR", "value": "10.244.99.0/24"},
            {"op": "remove", "path": "/spec/taints/0"},
            {"op": "add", "path": "/spec/taints/-", "value": taint},
        ]),
    )
    .json();
    assert_eq!(
        relabelled["metadata"]["labels"]["runguard.io/state"],
        "drained"
    );
    assert_eq!(relabelled["spec"]["podCIDR"], "10.244.99.0/24");
    assert_eq!(relabelled["spec"]["taints"][0]["effect"], "NoExecute");
    assert_eq!(relabelled["spec"]["taints"][1], taint);

    let failing = send_json(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-3",
        "application/json-patch+json",
        &json!([{"op": "add", "path": "/metadata/labels/x", "value": "1"}, {"op": "remove", "path": "/spec/nothing"}]),
    );
    assert_eq!(failing.status, 422);
    assert!(
        kube.get("nodes", "", "gpu-node-3").unwrap()["metadata"]["labels"]
            .get("x")
            .is_none()
    );

    let status_patch = send_json(
        &kube,
        "PATCH",
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain/status",
        "application/merge-patch+json",
        &json!({"status": {"replicaStatuses": {"Worker": {"active": 1, "failed": 1}}}}),
    )
    .json();
    assert_eq!(
        status_patch["status"]["replicaStatuses"]["Worker"]["failed"],
        1
    );
    let ignored = send_json(
        &kube,
        "PATCH",
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
        "application/merge-patch+json",
        &json!({"metadata": {"annotations": {"runguard.io/attempt": "2"}}, "status": {"startTime": null}}),
    )
    .json();
    assert_eq!(
        ignored["metadata"]["annotations"]["runguard.io/attempt"],
        "2"
    );
    assert!(
        ignored["status"]["startTime"].is_string(),
        "the main resource ignores status"
    );

    let unknown = call_with(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-1",
        &[AUTHORIZED, ("Content-Type", "text/plain")],
        Some("{}"),
    );
    assert_eq!(unknown.status, 415);
}

#[test]
fn deleting_a_workload_deletes_what_it_owns() {
    let kube = FakeKube::with_every_fixture();
    let deleted = call_with(
        &kube,
        "DELETE",
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
        &[AUTHORIZED],
        None,
    );
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.json()["metadata"]["name"], "llama-pretrain");
    let remaining = names(&get(&kube, "/api/v1/namespaces/ml/pods?labelSelector=training.kubeflow.org%2Fjob-name%3Dllama-pretrain").json());
    assert!(remaining.is_empty(), "{remaining:?}");
    assert!(kube.get("Pod", "ml", "bert-finetune-worker-0").is_some());

    assert!(kube.delete("RayJob", "ml", "ray-tune-sweep").is_some());
    assert!(
        kube.get("RayCluster", "ml", "ray-tune-sweep-raycluster-7xk2f")
            .is_none()
    );
    assert!(
        kube.list("Pod", "ml")
            .iter()
            .all(|pod| pod["metadata"]["labels"].get("ray.io/cluster").is_none())
    );

    let orphaning = call_with(
        &kube,
        "DELETE",
        "/apis/batch/v1/namespaces/ml/jobs/nccl-tests",
        &[AUTHORIZED, ("Content-Type", "application/json")],
        Some(r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Orphan"}"#),
    );
    assert_eq!(orphaning.status, 200);
    assert!(kube.get("Pod", "ml", "nccl-tests-x7k2p").is_some());
    assert_eq!(
        call_with(
            &kube,
            "DELETE",
            "/apis/batch/v1/namespaces/ml/jobs/nccl-tests",
            &[AUTHORIZED],
            None
        )
        .status,
        404
    );
}

#[test]
fn watch_sends_changes_after_the_resource_version_and_follows_new_ones() {
    let kube = FakeKube::start();
    kube.apply(pod("before", json!({"app": "train"})));
    let since = kube.resource_version();
    kube.apply(pod("missed", json!({"app": "train"})));
    kube.apply(pod("other", json!({"app": "serve"})));

    let mut watch = WatchStream::open(
        &kube,
        &format!(
            "/api/v1/namespaces/ml/pods?watch=1&resourceVersion={since}&labelSelector=app%3Dtrain&allowWatchBookmarks=true"
        ),
    );
    assert_eq!(
        watch.next_summary(),
        Some(("ADDED".into(), "missed".into()))
    );
    assert!(kube.wait_until(READ_TIMEOUT, |kube| kube.open_watches() == 1));
    kube.modify("Pod", "ml", "before", |pod| {
        pod["status"]["phase"] = json!("Running")
    });
    let modified = watch.next().unwrap();
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["status"]["phase"], "Running");
    assert_eq!(modified["object"]["kind"], "Pod");
    assert_eq!(
        modified["object"]["metadata"]["resourceVersion"],
        kube.resource_version().to_string()
    );

    // Leaving the selection reads as a deletion, entering it as an addition.
    kube.modify("Pod", "ml", "before", |pod| {
        pod["metadata"]["labels"]["app"] = json!("serve")
    });
    assert_eq!(
        watch.next_summary(),
        Some(("DELETED".into(), "before".into()))
    );
    kube.modify("Pod", "ml", "other", |pod| {
        pod["metadata"]["labels"]["app"] = json!("train")
    });
    assert_eq!(watch.next_summary(), Some(("ADDED".into(), "other".into())));
    kube.delete("Pod", "ml", "missed");
    let deleted = watch.next().unwrap();
    assert_eq!(deleted["type"], "DELETED");
    assert_eq!(
        deleted["object"]["metadata"]["resourceVersion"],
        kube.resource_version().to_string()
    );
}

#[test]
fn watch_without_resource_version_starts_with_the_current_objects() {
    let kube = FakeKube::start();
    kube.apply(pod("a", json!({})));
    kube.apply(pod("b", json!({})));
    let mut watch = WatchStream::open(
        &kube,
        "/api/v1/namespaces/ml/pods?watch=true&resourceVersion=0",
    );
    assert_eq!(watch.next_summary(), Some(("ADDED".into(), "a".into())));
    assert_eq!(watch.next_summary(), Some(("ADDED".into(), "b".into())));

    let mut streaming = WatchStream::open(
        &kube,
        "/api/v1/namespaces/ml/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    );
    assert_eq!(streaming.next_summary(), Some(("ADDED".into(), "a".into())));
    assert_eq!(streaming.next_summary(), Some(("ADDED".into(), "b".into())));
    let bookmark = streaming.next().unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(
        bookmark["object"]["metadata"]["resourceVersion"],
        kube.resource_version().to_string()
    );
}

#[test]
fn a_cut_watch_resumes_from_the_last_resource_version_seen() {
    let kube = FakeKube::start();
    kube.apply(pod("first", json!({})));
    let start = kube.resource_version();
    let mut watch = WatchStream::open(
        &kube,
        &format!("/api/v1/namespaces/ml/pods?watch=true&resourceVersion={start}"),
    );
    assert!(kube.wait_until(READ_TIMEOUT, |kube| kube.open_watches() == 1));
    kube.apply(pod("second", json!({})));
    let seen = watch.next().unwrap();
    let last_seen = seen["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    kube.cut_log_streams();
    assert!(watch.next().is_none(), "the stream is cut");
    assert!(kube.wait_until(READ_TIMEOUT, |kube| kube.open_watches() == 0));
    kube.apply(pod("while-away", json!({})));

    let mut resumed = WatchStream::open(
        &kube,
        &format!("/api/v1/namespaces/ml/pods?watch=true&resourceVersion={last_seen}"),
    );
    assert_eq!(
        resumed.next_summary(),
        Some(("ADDED".into(), "while-away".into()))
    );
}

#[test]
fn a_watch_from_forgotten_history_gets_410_expired() {
    let kube = FakeKube::start();
    kube.apply(pod("a", json!({})));
    let old = kube.resource_version();
    kube.apply(pod("b", json!({})));
    kube.compact_history();
    let mut watch = WatchStream::open(
        &kube,
        &format!("/api/v1/namespaces/ml/pods?watch=true&resourceVersion={old}"),
    );
    let error = watch.next().unwrap();
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["kind"], "Status");
    assert_eq!(error["object"]["status"], "Failure");
    assert_eq!(error["object"]["reason"], "Expired");
    assert_eq!(error["object"]["code"], 410);
    assert!(watch.next().is_none());

    let current = kube.resource_version();
    let mut fresh = WatchStream::open(
        &kube,
        &format!("/api/v1/namespaces/ml/pods?watch=true&resourceVersion={current}"),
    );
    kube.apply(pod("c", json!({})));
    assert_eq!(fresh.next_summary(), Some(("ADDED".into(), "c".into())));
}

#[test]
fn a_watch_ends_at_its_timeout_with_a_bookmark() {
    let kube = FakeKube::start();
    let version = kube.resource_version();
    let mut watch = WatchStream::open(
        &kube,
        &format!(
            "/api/v1/nodes?watch=true&resourceVersion={version}&timeoutSeconds=1&allowWatchBookmarks=true"
        ),
    );
    let bookmark = watch.next().unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Node");
    assert_eq!(
        bookmark["object"]["metadata"]["resourceVersion"],
        version.to_string()
    );
    assert!(watch.next().is_none());
}

#[test]
fn logs_are_plain_text_with_kubelet_timestamps_tail_and_since() {
    let kube = FakeKube::with_every_fixture();
    let pod = "llama-pretrain-master-0";
    let early = chrono::DateTime::parse_from_rfc3339("2025-06-10T09:00:00.5Z")
        .unwrap()
        .to_utc();
    let late = chrono::DateTime::parse_from_rfc3339("2025-06-10T09:30:00Z")
        .unwrap()
        .to_utc();
    kube.append_log_at("ml", pod, "pytorch", early, "step 100 loss 2.31");
    kube.append_log_at("ml", pod, "pytorch", late, "step 200 loss 2.05");
    kube.append_log("ml", pod, "pytorch", "step 300 loss 1.98");

    let plain = get(
        &kube,
        &format!("/api/v1/namespaces/ml/pods/{pod}/log?container=pytorch"),
    );
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-type"), Some("text/plain"));
    assert_eq!(plain.header("transfer-encoding"), Some("chunked"));
    assert_eq!(
        plain.text(),
        "step 100 loss 2.31\nstep 200 loss 2.05\nstep 300 loss 1.98\n"
    );
    assert_eq!(
        get(&kube, &format!("/api/v1/namespaces/ml/pods/{pod}/log"))
            .text()
            .lines()
            .count(),
        3,
        "a single-container pod needs no container parameter"
    );

    let stamped = get(
        &kube,
        &format!(
            "/api/v1/namespaces/ml/pods/{pod}/log?container=pytorch&timestamps=true&tailLines=2"
        ),
    );
    let lines: Vec<&str> = stamped
        .body
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0],
        "2025-06-10T09:30:00.000000000Z step 200 loss 2.05"
    );
    let (stamp, text) = lines[1].split_once(' ').unwrap();
    assert_eq!(text, "step 300 loss 1.98");
    assert!(
        chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
        "{stamp}"
    );

    let since = get(
        &kube,
        &format!(
            "/api/v1/namespaces/ml/pods/{pod}/log?container=pytorch&sinceTime=2025-06-10T09:15:00Z"
        ),
    );
    assert_eq!(since.text().lines().count(), 2);

    let wrong = get(
        &kube,
        &format!("/api/v1/namespaces/ml/pods/{pod}/log?container=trainer"),
    );
    assert_eq!(wrong.status, 400);
    assert_eq!(
        wrong.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "container trainer is not valid for pod llama-pretrain-master-0",
               "reason": "BadRequest", "code": 400})
    );
    let missing_pod = get(&kube, "/api/v1/namespaces/ml/pods/nope/log");
    assert_eq!(missing_pod.status, 404);
    assert_eq!(missing_pod.json()["message"], "pods \"nope\" not found");
    let pulling = get(
        &kube,
        "/api/v1/namespaces/ml/pods/nccl-tests-x7k2p/log?container=nccl",
    );
    assert_eq!(pulling.status, 400);
    assert_eq!(
        pulling.json()["message"],
        "container \"nccl\" in pod \"nccl-tests-x7k2p\" is waiting to start: trying and failing to pull image"
    );

    let no_previous = get(
        &kube,
        &format!("/api/v1/namespaces/ml/pods/{pod}/log?container=pytorch&previous=true"),
    );
    assert_eq!(no_previous.status, 400);
    kube.set_previous_log(
        "ml",
        "llama-pretrain-worker-0",
        "pytorch",
        &["NCCL error: unhandled system error"],
    );
    let previous = get(
        &kube,
        "/api/v1/namespaces/ml/pods/llama-pretrain-worker-0/log?container=pytorch&previous=true",
    );
    assert_eq!(previous.text(), "NCCL error: unhandled system error\n");
}

#[test]
fn followed_logs_stream_appended_lines_until_cut() {
    let kube = FakeKube::with_every_fixture();
    let pod = "llama-pretrain-worker-1";
    kube.append_log("ml", pod, "pytorch", "before");
    let stream = send_request(
        &kube,
        "GET",
        &format!("/api/v1/namespaces/ml/pods/{pod}/log?container=pytorch&follow=true"),
        &[AUTHORIZED],
        None,
    );
    let mut reader = BufReader::new(stream);
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 200);
    assert_eq!(read_chunk(&mut reader).unwrap(), b"before\n");
    assert!(kube.wait_until(READ_TIMEOUT, |kube| kube.open_log_follows() == 1));
    kube.append_log("ml", pod, "pytorch", "after");
    assert_eq!(read_chunk(&mut reader).unwrap(), b"after\n");
    kube.cut_log_streams();
    assert!(read_chunk(&mut reader).is_none());
    assert!(kube.wait_until(READ_TIMEOUT, |kube| kube.open_log_follows() == 0));
}

#[test]
fn a_followed_log_ends_with_the_containers_run() {
    let kube = FakeKube::with_every_fixture();
    kube.append_log(
        "ml",
        "bert-finetune-worker-0",
        "pytorch",
        "CUDA out of memory",
    );
    let finished = get(
        &kube,
        "/api/v1/namespaces/ml/pods/bert-finetune-worker-0/log?follow=true",
    );
    assert_eq!(
        finished.text(),
        "CUDA out of memory\n",
        "an exited container's log ends at once"
    );

    let pod = "llama-pretrain-master-0";
    let stream = send_request(
        &kube,
        "GET",
        &format!("/api/v1/namespaces/ml/pods/{pod}/log?follow=true"),
        &[AUTHORIZED],
        None,
    );
    let mut reader = BufReader::new(stream);
    assert_eq!(read_head(&mut reader).0, 200);
    assert!(kube.wait_until(READ_TIMEOUT, |kube| kube.open_log_follows() == 1));
    kube.append_log("ml", pod, "pytorch", "last words");
    assert_eq!(read_chunk(&mut reader).unwrap(), b"last words\n");
    kube.patch_status(
        "Pod",
        "ml",
        pod,
        json!({"phase": "Failed", "containerStatuses": [{"name": "pytorch", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}),
    );
    assert!(
        read_chunk(&mut reader).is_none(),
        "the stream ends with the run"
    );

    let deleted = "llama-pretrain-worker-1";
    let stream = send_request(
        &kube,
        "GET",
        &format!("/api/v1/namespaces/ml/pods/{deleted}/log?follow=true"),
        &[AUTHORIZED],
        None,
    );
    let mut reader = BufReader::new(stream);
    assert_eq!(read_head(&mut reader).0, 200);
    assert!(kube.wait_until(READ_TIMEOUT, |kube| kube.open_log_follows() == 1));
    kube.delete("Pod", "ml", deleted);
    assert!(
        read_chunk(&mut reader).is_none(),
        "the stream ends with the pod"
    );
}

#[test]
fn forbidden_verbs_get_the_rbac_message() {
    let kube = FakeKube::with_every_fixture();
    kube.forbid("patch", "nodes");
    kube.forbid("get", "pods/log");
    kube.forbid("list", "pytorchjobs");
    let refused = send_json(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-1",
        "application/merge-patch+json",
        &json!({"spec": {"unschedulable": true}}),
    );
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "nodes \"gpu-node-1\" is forbidden: User \"system:serviceaccount:ml:runguard\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope",
               "reason": "Forbidden", "details": {"name": "gpu-node-1", "kind": "nodes"}, "code": 403})
    );
    assert!(
        kube.get("Node", "", "gpu-node-1").unwrap()["spec"]
            .get("unschedulable")
            .is_none()
    );
    assert_eq!(
        get(
            &kube,
            "/api/v1/namespaces/ml/pods/llama-pretrain-master-0/log"
        )
        .json()["message"],
        "pods \"llama-pretrain-master-0\" is forbidden: User \"system:serviceaccount:ml:runguard\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"ml\""
    );
    assert_eq!(
        get(&kube, "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs").json()["message"],
        "pytorchjobs.kubeflow.org is forbidden: User \"system:serviceaccount:ml:runguard\" cannot list resource \"pytorchjobs\" in API group \"kubeflow.org\" in the namespace \"ml\""
    );
    assert_eq!(
        get(&kube, "/api/v1/namespaces/ml/pods/llama-pretrain-master-0").status,
        200
    );
    kube.allow("patch", "nodes");
    let allowed = send_json(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-1",
        "application/merge-patch+json",
        &json!({"spec": {"unschedulable": true}}),
    );
    assert_eq!(allowed.status, 200);
}

#[test]
fn every_request_is_recorded_with_its_decoded_query_and_body() {
    let kube = FakeKube::with_every_fixture();
    kube.clear_requests();
    get(
        &kube,
        "/api/v1/namespaces/ml/pods?labelSelector=training.kubeflow.org%2Freplica-type%3Dworker&limit=500",
    );
    send_json(
        &kube,
        "PATCH",
        "/api/v1/nodes/gpu-node-1",
        "application/strategic-merge-patch+json",
        &json!({"spec": {"unschedulable": true}}),
    );
    let requests = kube.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[0].path, "/api/v1/namespaces/ml/pods");
    assert_eq!(
        requests[0].query,
        [
            (
                "labelSelector".to_string(),
                "training.kubeflow.org/replica-type=worker".to_string()
            ),
            ("limit".to_string(), "500".to_string())
        ]
    );
    assert_eq!(requests[0].body, None);
    assert_eq!(requests[1].method, "PATCH");
    assert_eq!(
        requests[1].content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    assert_eq!(
        requests[1].body,
        Some(json!({"spec": {"unschedulable": true}}))
    );
    kube.clear_requests();
    assert!(kube.requests().is_empty());
}

#[test]
fn tables_print_what_kubectl_shows() {
    let kube = FakeKube::with_every_fixture();
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let table = call_with(
        &kube,
        "GET",
        "/api/v1/nodes",
        &[AUTHORIZED, ("Accept", accept)],
        None,
    )
    .json();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    let headers: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|column| column["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        headers,
        ["Name", "Status", "Roles", "Age", "Version", "Internal-IP"]
    );
    let statuses: Vec<(&str, &str)> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["cells"][0].as_str().unwrap(),
                row["cells"][1].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(statuses, FIXTURE_NODE_STATUSES);
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    let pods = call_with(
        &kube,
        "GET",
        "/api/v1/namespaces/ml/pods",
        &[AUTHORIZED, ("Accept", accept)],
        None,
    )
    .json();
    let row = pods["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["cells"][0] == "bert-finetune-worker-0")
        .unwrap()
        .clone();
    assert_eq!(row["cells"][1], "0/1");
    assert_eq!(row["cells"][2], "OOMKilled");
}

#[test]
fn every_fixture_loads_with_its_owner_references_intact() {
    let kube = FakeKube::with_every_fixture();
    let workloads: Vec<Value> = ["PyTorchJob", "Job", "RayJob", "RayCluster"]
        .into_iter()
        .flat_map(|kind| kube.list(kind, "ml"))
        .collect();
    for pod in kube.list("Pod", "ml") {
        let owner = &pod["metadata"]["ownerReferences"][0];
        assert_eq!(owner["controller"], true);
        assert!(
            workloads
                .iter()
                .any(|workload| workload["metadata"]["uid"] == owner["uid"]
                    && workload["kind"] == owner["kind"]),
            "{} has no owner among the fixtures",
            pod["metadata"]["name"]
        );
    }
    let opted_in: Vec<&str> = workloads
        .iter()
        .filter(|workload| workload["metadata"]["labels"]["runguard.io/enabled"] == "true")
        .map(|workload| workload["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        opted_in,
        [
            "bert-finetune",
            "llama-pretrain",
            "nccl-tests",
            "ray-tune-sweep"
        ]
    );
    assert_eq!(
        kube.get("PyTorchJob", "ml", "resnet-eval").unwrap()["metadata"]["labels"]
            .get("runguard.io/enabled"),
        None
    );
    let preempted = kube.load_fixture("pod-preempted.json");
    assert_eq!(
        preempted[0]["status"]["conditions"][0]["reason"],
        "PreemptionByScheduler"
    );
}

/// An exec over a WebSocket offering `protocols`; the messages the server sent until it closed,
/// after sending `send` (binary) first.
fn exec_over_websocket(
    kube: &FakeKube,
    target: &str,
    protocols: &str,
    send: &[Vec<u8>],
) -> Result<(String, Vec<Vec<u8>>), tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::{Message, client};
    let mut request = format!("ws://127.0.0.1:{}{target}", kube.port())
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
    let stream = TcpStream::connect(("127.0.0.1", kube.port())).unwrap();
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let (mut socket, response) = client::client(request, stream).map_err(|error| match error {
        tokio_tungstenite::tungstenite::HandshakeError::Failure(error) => error,
        tokio_tungstenite::tungstenite::HandshakeError::Interrupted(_) => {
            panic!("a blocking handshake was interrupted")
        }
    })?;
    let protocol = response
        .headers()
        .get("Sec-WebSocket-Protocol")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    for message in send {
        socket.send(Message::binary(message.clone())).unwrap();
    }
    let mut received = Vec::new();
    loop {
        match socket.read() {
            Ok(Message::Binary(data)) => received.push(data.to_vec()),
            Ok(Message::Close(frame)) => {
                assert_eq!(
                    frame.map(|frame| u16::from(frame.code)),
                    Some(1000),
                    "closed normally"
                );
                break;
            }
            Ok(_) => {}
            Err(error) => panic!("reading the exec: {error}"),
        }
    }
    Ok((protocol, received))
}

fn exec_status(messages: &[Vec<u8>]) -> Value {
    let status = messages
        .iter()
        .find(|message| message.first() == Some(&3))
        .expect("a message on the status channel");
    serde_json::from_slice(&status[1..]).unwrap()
}

#[test]
fn exec_speaks_the_channel_subprotocols_over_a_websocket_and_understands_only_kill() {
    let kube = FakeKube::with_every_fixture();
    let exec = "/api/v1/namespaces/ml/pods/llama-pretrain-master-0/exec";
    // v4 when the client offers only v4: an empty message on stdout says the streams are up, the
    // status is a metav1.Status in JSON on channel 3, and the signal reached the main process.
    let (protocol, messages) = exec_over_websocket(
        &kube,
        &format!("{exec}?command=kill&command=-s&command=USR1&command=1&container=pytorch&stdout=true&stderr=true"),
        "v4.channel.k8s.io",
        &[],
    )
    .unwrap();
    assert_eq!(protocol, "v4.channel.k8s.io");
    assert_eq!(messages[0], vec![1], "{messages:?}");
    assert_eq!(
        exec_status(&messages),
        json!({"metadata": {}, "status": "Success"})
    );
    let received = kube.signals_received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        (received[0].pod.as_str(), received[0].signal.as_str()),
        ("llama-pretrain-master-0", "USR1")
    );

    // v5 in the client's order of preference; the client's CLOSE of its stdin is understood. A
    // command the container does not have exits 127 with the runtime's words on stderr.
    let (protocol, messages) = exec_over_websocket(
        &kube,
        &format!("{exec}?command=nvidia-smi&command=-q&stdin=true&stderr=true"),
        "v5.channel.k8s.io, v4.channel.k8s.io",
        &[vec![0, b'x'], vec![255, 0]],
    )
    .unwrap();
    assert_eq!(protocol, "v5.channel.k8s.io");
    assert_eq!(
        messages[0],
        vec![2],
        "stderr is the lowest channel read: {messages:?}"
    );
    let stderr: Vec<u8> = messages
        .iter()
        .filter(|message| message.first() == Some(&2))
        .flat_map(|message| message[1..].to_vec())
        .collect();
    assert!(
        String::from_utf8_lossy(&stderr)
            .contains("exec: \"nvidia-smi\": executable file not found in $PATH"),
        "{}",
        String::from_utf8_lossy(&stderr)
    );
    let status = exec_status(&messages);
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "ExitCode", "message": "127"}])
    );
    assert!(
        kube.wait_until(READ_TIMEOUT, |kube| kube.execs().len() == 2),
        "{:?}",
        kube.execs()
    );
    let record = kube.execs()[1].clone();
    assert_eq!(record.container, "pytorch", "the pod's only container");
    assert_eq!(record.closed_by_client, vec![0]);
    assert_eq!(record.exit_code, 127);
    assert_eq!(kube.signals_received().len(), 1);

    // Another PID, or a signal Linux does not have, is kill's own failure.
    for (command, said) in [
        (
            "command=kill&command=-USR1&command=7",
            "kill: (7) - No such process",
        ),
        (
            "command=kill&command=-s&command=SIGNOPE&command=1",
            "kill: unknown signal name: SIGNOPE",
        ),
    ] {
        let (_, messages) = exec_over_websocket(
            &kube,
            &format!("{exec}?{command}&stderr=true"),
            "v5.channel.k8s.io",
            &[],
        )
        .unwrap();
        assert_eq!(
            exec_status(&messages)["details"]["causes"][0]["message"],
            "1"
        );
        assert!(
            messages.iter().any(|message| message.first() == Some(&2)
                && String::from_utf8_lossy(&message[1..]).contains(said)),
            "{said}: {messages:?}"
        );
    }
    assert_eq!(kube.signals_received().len(), 1);
}

#[test]
fn exec_refuses_what_the_api_server_refuses_before_upgrading() {
    let kube = FakeKube::with_every_fixture();
    let exec = "/api/v1/namespaces/ml/pods/llama-pretrain-master-0/exec";
    // Not an upgrade.
    let plain = get(&kube, &format!("{exec}?command=kill&stdout=true"));
    assert_eq!(plain.status, 400);
    assert_eq!(plain.json()["message"], "Upgrade request required");
    // No subprotocol the server speaks.
    let refused = |target: &str, protocols: &str| -> (u16, Value) {
        match exec_over_websocket(&kube, target, protocols, &[]) {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => (
                response.status().as_u16(),
                serde_json::from_slice(response.body().as_deref().unwrap_or_default())
                    .unwrap_or(Value::Null),
            ),
            other => panic!("{target} with {protocols}: not refused: {other:?}"),
        }
    };
    let (code, status) = refused(
        &format!("{exec}?command=kill&stdout=true"),
        "channel.k8s.io",
    );
    assert_eq!(code, 400);
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("supports [v5.channel.k8s.io v4.channel.k8s.io]"),
        "{status}"
    );
    let v5 = "v5.channel.k8s.io";
    let (code, status) = refused(
        &format!("{exec}?command=kill&stdout=true&container=sidecar"),
        v5,
    );
    assert_eq!(code, 400);
    assert_eq!(
        status["message"],
        "container sidecar is not valid for pod llama-pretrain-master-0"
    );
    let (code, status) = refused(&format!("{exec}?stdout=true"), v5);
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some("you must specify at least 1 command"))
    );
    let (code, _) = refused(
        "/api/v1/namespaces/ml/pods/nobody/exec?command=kill&stdout=true",
        v5,
    );
    assert_eq!(code, 404);
    // A container that is not running has no process to signal.
    let (code, status) = refused(
        "/api/v1/namespaces/ml/pods/nccl-tests-x7k2p/exec?command=kill&stdout=true",
        v5,
    );
    assert_eq!(code, 400, "{status}");
    kube.forbid("create", "pods/exec");
    let (code, status) = refused(&format!("{exec}?command=kill&stdout=true"), v5);
    assert_eq!(code, 403);
    assert_eq!(status["reason"], "Forbidden");
    assert!(kube.signals_received().is_empty());
}

#[test]
fn a_pod_s_affinity_and_a_started_job_s_template_cannot_change_a_suspended_job_s_directives_can() {
    let kube = FakeKube::with_every_fixture();
    let merge = "application/merge-patch+json";
    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-spot-1"]}]}]}}});
    let pod = send_json(
        &kube,
        "PATCH",
        "/api/v1/namespaces/ml/pods/llama-pretrain-worker-1",
        merge,
        &json!({"spec": {"affinity": affinity}}),
    );
    assert_eq!(pod.status, 422);
    assert!(
        pod.json()["message"]
            .as_str()
            .unwrap_or_default()
            .contains("pod updates may not change fields other than"),
        "{}",
        pod.text()
    );
    // The fixture's Job has started: its template is immutable.
    let job = "/apis/batch/v1/namespaces/ml/jobs/nccl-tests";
    let started = send_json(
        &kube,
        "PATCH",
        job,
        merge,
        &json!({"spec": {"template": {"spec": {"affinity": affinity}}}}),
    );
    assert_eq!(started.status, 422, "{}", started.text());
    assert!(
        started.text().contains("field is immutable"),
        "{}",
        started.text()
    );
    // Suspended before it ever started (as Kueue creates it): the scheduling directives may change,
    // nothing else of the template.
    kube.modify("Job", "ml", "nccl-tests", |job| {
        job["spec"]["suspend"] = json!(true);
        if let Some(status) = job["status"].as_object_mut() {
            status.remove("startTime");
        }
    });
    let directives = send_json(
        &kube,
        "PATCH",
        job,
        merge,
        &json!({"spec": {"template": {"spec": {"affinity": affinity}}}}),
    );
    assert_eq!(directives.status, 200, "{}", directives.text());
    assert_eq!(
        directives.json()["spec"]["template"]["spec"]["affinity"],
        affinity
    );
    let image = send_json(
        &kube,
        "PATCH",
        job,
        merge,
        &json!({"spec": {"template": {"spec": {"containers": [{"name": "nccl", "image": "other:1"}]}}}}),
    );
    assert_eq!(image.status, 422, "{}", image.text());
}

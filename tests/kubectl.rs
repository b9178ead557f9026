//! The fake API server of tests/kube_fake checked by a client nobody here wrote: the real `kubectl`,
//! pointed at it with the kubeconfig it writes, must list, print tables, watch, read and follow
//! logs, cordon, and report refusals with the server's own words.
//!
//! Skipped with a message where kubectl is not on PATH (Debian's `kubernetes-client` provides it);
//! RUNGUARD_REQUIRE_KUBECTL=1 turns a skip into a failure.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::kube_fake::FakeKube;
use crate::support::FIXTURE_NODE_STATUSES;
use crate::support::available;

/// How long one kubectl command may take before the test gives up on it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a streaming kubectl may take to show an expected line.
const LINE_TIMEOUT: Duration = Duration::from_secs(20);

fn find_kubectl() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.is_file())
}

fn kubectl_or_skip() -> Option<PathBuf> {
    let found = find_kubectl();
    available(
        found.is_some(),
        "RUNGUARD_REQUIRE_KUBECTL",
        "kubectl not found on PATH (apt-get install kubernetes-client)",
    );
    found
}

/// Reads a pipe to its end on a thread of its own.
fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        pipe.read_to_end(&mut bytes).unwrap();
        bytes
    })
}

/// A fake cluster holding every fixture, and kubectl pointed at it.
struct Lab {
    kube: FakeKube,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    /// kubectl's HOME and discovery cache, so nothing of the user's is read or written.
    home: tempfile::TempDir,
}

impl Lab {
    fn start() -> Option<Lab> {
        let kubectl = kubectl_or_skip()?;
        let kube = FakeKube::with_every_fixture();
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = kube.kubeconfig(home.path());
        Some(Lab {
            kube,
            kubectl,
            kubeconfig,
            home,
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        // kubectl's own flags go before a `--`: what follows it is the command exec runs.
        let split = args
            .iter()
            .position(|arg| *arg == "--")
            .unwrap_or(args.len());
        let mut command = Command::new(&self.kubectl);
        command
            .args(&args[..split])
            .arg("--request-timeout=10s")
            .arg(format!(
                "--cache-dir={}",
                self.home.path().join("cache").display()
            ))
            .args(&args[split..])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs kubectl to the end, killing it if it outlives COMMAND_TIMEOUT. Its output is read while
    /// it runs, so a large one does not stall it on a full pipe.
    fn run(&self, args: &[&str]) -> Output {
        let mut child = self.command(args).spawn().unwrap();
        let stdout = drain(child.stdout.take().unwrap());
        let stderr = drain(child.stderr.take().unwrap());
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("kubectl {args:?} did not finish within {COMMAND_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        }
    }

    /// Runs kubectl and returns its standard output, failing on a non-zero exit.
    fn stdout(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}\nrequests: {:#?}",
            String::from_utf8_lossy(&output.stderr),
            self.kube.requests()
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.stdout(args)).unwrap()
    }

    /// Starts a kubectl that keeps printing; its stdout lines arrive on the returned channel.
    fn stream(&self, args: &[&str]) -> Streaming {
        let mut child = self.command(args).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Streaming { child, lines }
    }
}

/// A running kubectl, killed when dropped.
struct Streaming {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Streaming {
    /// Reads lines until one equals `wanted`; fails with what was read otherwise.
    fn wait_for_line(&mut self, wanted: &str) {
        let deadline = Instant::now() + LINE_TIMEOUT;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line == wanted => return,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        let mut stderr = String::new();
        let _ = self.child.kill();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        panic!("kubectl never printed {wanted:?}; it printed {seen:?}, stderr: {stderr}");
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn item_names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap())
        .collect()
}

fn wait_for(kube: &FakeKube, what: &str, condition: impl Fn(&FakeKube) -> bool) {
    assert!(
        kube.wait_until(LINE_TIMEOUT, condition),
        "timed out waiting for {what}"
    );
}

#[test]
fn get_pods_as_json_lists_the_fixture_pods() {
    let Some(lab) = Lab::start() else { return };
    let pods = lab.json(&["get", "pods", "-n", "ml", "-o", "json"]);
    assert_eq!(pods["kind"], "List");
    assert_eq!(
        item_names(&pods),
        [
            "bert-finetune-master-0",
            "bert-finetune-worker-0",
            "llama-pretrain-master-0",
            "llama-pretrain-worker-0",
            "llama-pretrain-worker-1",
            "nccl-tests-x7k2p",
            "ray-tune-sweep-raycluster-7xk2f-gpu-group-worker-8h4tq",
            "ray-tune-sweep-raycluster-7xk2f-head-c9x2p",
            "resnet-eval-master-0",
            "resnet-eval-worker-0",
        ]
    );
    let oom_killed = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pod| pod["metadata"]["name"] == "bert-finetune-worker-0")
        .unwrap();
    assert_eq!(oom_killed["kind"], "Pod");
    assert_eq!(
        oom_killed["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
        "OOMKilled"
    );
    assert_eq!(
        oom_killed["metadata"]["labels"]["training.kubeflow.org/replica-type"],
        "worker"
    );
}

#[test]
fn get_pytorchjobs_as_json_reads_the_custom_resources() {
    let Some(lab) = Lab::start() else { return };
    let jobs = lab.json(&["get", "pytorchjobs", "-n", "ml", "-o", "json"]);
    assert_eq!(
        item_names(&jobs),
        ["bert-finetune", "llama-pretrain", "resnet-eval"]
    );
    let llama = &jobs["items"][1];
    assert_eq!(llama["apiVersion"], "kubeflow.org/v1");
    assert_eq!(llama["kind"], "PyTorchJob");
    assert_eq!(llama["metadata"]["labels"]["runguard.io/enabled"], "true");
    assert_eq!(
        llama["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"],
        2
    );
    assert_eq!(llama["status"]["conditions"][1]["type"], "Running");
}

#[test]
fn trainjobs_jobsets_and_kueue_workloads_read_and_print_as_their_crds_declare() {
    let Some(lab) = Lab::start() else { return };
    lab.kube.load_fixture("trainjob-running.json");
    let trainjobs = lab.json(&[
        "get",
        "trainjobs.trainer.kubeflow.org",
        "-n",
        "ml",
        "-o",
        "json",
    ]);
    assert_eq!(item_names(&trainjobs), ["qwen-sft"]);
    assert_eq!(trainjobs["items"][0]["spec"]["trainer"]["numNodes"], 3);
    let jobset = lab.json(&["get", "jobset", "qwen-sft", "-n", "ml", "-o", "json"]);
    assert_eq!(jobset["apiVersion"], "jobset.x-k8s.io/v1alpha2");
    assert_eq!(jobset["metadata"]["ownerReferences"][0]["kind"], "TrainJob");
    // The pods of the JobSet, by its label, as its controller selects them.
    let pods = lab.json(&[
        "get",
        "pods",
        "-n",
        "ml",
        "-l",
        "jobset.sigs.k8s.io/jobset-name=qwen-sft",
        "-o",
        "json",
    ]);
    assert_eq!(item_names(&pods).len(), 3);
    // Kueue's short name and its printer columns.
    let table = lab.stdout(&["get", "kwl", "-n", "ml"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"
        ]
    );
    let row = lines.next().unwrap_or_default();
    assert!(
        row.starts_with("trainjob-qwen-sft-5b1e2")
            && row.contains("research-h100")
            && row.contains("True"),
        "{table}"
    );
    let jobsets = lab.stdout(&["get", "jobsets", "-n", "ml"]);
    assert!(jobsets.contains("SUSPENDED"), "{jobsets}");
}

#[test]
fn a_label_selector_picks_the_worker_pods() {
    let Some(lab) = Lab::start() else { return };
    let names = lab.stdout(&[
        "get",
        "pods",
        "-n",
        "ml",
        "-l",
        "training.kubeflow.org/replica-type=worker",
        "-o",
        "name",
    ]);
    assert_eq!(
        names,
        "pod/bert-finetune-worker-0\npod/llama-pretrain-worker-0\npod/llama-pretrain-worker-1\npod/resnet-eval-worker-0\n"
    );
    let request = lab
        .kube
        .requests()
        .into_iter()
        .find(|request| request.path == "/api/v1/namespaces/ml/pods")
        .unwrap();
    assert_eq!(
        request.query_value("labelSelector"),
        Some("training.kubeflow.org/replica-type=worker")
    );
}

#[test]
fn get_nodes_prints_the_server_side_table() {
    let Some(lab) = Lab::start() else { return };
    let table = lab.stdout(&["get", "nodes"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    let statuses: Vec<(&str, &str)> = rows[1..].iter().map(|row| (row[0], row[1])).collect();
    assert_eq!(statuses, FIXTURE_NODE_STATUSES);
    assert!(rows[1..].iter().all(|row| row[4] == "v1.30.5"));
}

#[test]
fn a_watch_prints_a_pod_applied_while_it_runs() {
    let Some(lab) = Lab::start() else { return };
    let mut watch = lab.stream(&["get", "pods", "-n", "ml", "-w", "-o", "name"]);
    watch.wait_for_line("pod/resnet-eval-worker-0");
    wait_for(&lab.kube, "kubectl to open its watch", |kube| {
        kube.open_watches() == 1
    });
    let mut new_pod = crate::kube_fake::fixture("pytorchjob-running.json")
        .into_iter()
        .find(|object| object["metadata"]["name"] == "llama-pretrain-worker-1")
        .unwrap();
    new_pod["metadata"]["name"] = json!("llama-pretrain-worker-2");
    new_pod["metadata"]["uid"] = json!("6f1d1c8e-3a52-4c11-9c7a-0d2b5e8f4a10");
    new_pod["metadata"]["labels"]["training.kubeflow.org/replica-index"] = json!("2");
    lab.kube.apply(new_pod);
    watch.wait_for_line("pod/llama-pretrain-worker-2");

    let watch_request = lab
        .kube
        .requests()
        .into_iter()
        .find(|request| request.query_value("watch") == Some("true"))
        .unwrap();
    assert_eq!(watch_request.path, "/api/v1/namespaces/ml/pods");
    assert!(watch_request.query_value("resourceVersion").is_some());
}

#[test]
fn logs_print_the_appended_lines() {
    let Some(lab) = Lab::start() else { return };
    let pod = "llama-pretrain-master-0";
    lab.kube
        .append_log("ml", pod, "pytorch", "[rank0] step 1000 loss 2.113");
    lab.kube
        .append_log("ml", pod, "pytorch", "[rank0] saved checkpoint step-1000");
    let printed = lab.stdout(&["logs", "-n", "ml", pod, "-c", "pytorch"]);
    assert_eq!(
        printed,
        "[rank0] step 1000 loss 2.113\n[rank0] saved checkpoint step-1000\n"
    );
    let tail = lab.stdout(&[
        "logs",
        "-n",
        "ml",
        pod,
        "-c",
        "pytorch",
        "--tail=1",
        "--timestamps",
    ]);
    let (stamp, line) = tail.trim_end().split_once(' ').unwrap();
    assert_eq!(line, "[rank0] saved checkpoint step-1000");
    assert!(
        chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
        "{stamp}"
    );
}

#[test]
fn followed_logs_show_a_line_appended_later() {
    let Some(lab) = Lab::start() else { return };
    let pod = "llama-pretrain-worker-0";
    lab.kube
        .append_log("ml", pod, "pytorch", "[rank8] step 1000 loss 2.113");
    let mut follow = lab.stream(&["logs", "-f", "-n", "ml", pod, "-c", "pytorch"]);
    follow.wait_for_line("[rank8] step 1000 loss 2.113");
    wait_for(&lab.kube, "kubectl to follow the log", |kube| {
        kube.open_log_follows() == 1
    });
    lab.kube
        .append_log("ml", pod, "pytorch", "[rank8] step 1010 loss 2.109");
    follow.wait_for_line("[rank8] step 1010 loss 2.109");
}

#[test]
fn cordon_patches_the_node_unschedulable() {
    let Some(lab) = Lab::start() else { return };
    lab.kube.clear_requests();
    let printed = lab.stdout(&["cordon", "gpu-node-2"]);
    assert_eq!(printed, "node/gpu-node-2 cordoned\n");
    let node = lab.kube.get("Node", "", "gpu-node-2").unwrap();
    assert_eq!(node["spec"]["unschedulable"], true);
    assert_eq!(
        node["spec"]["taints"][0]["key"], "nvidia.com/gpu-xid-error",
        "the taints stay"
    );
    let patch = lab
        .kube
        .requests()
        .into_iter()
        .find(|request| request.method == "PATCH")
        .expect("kubectl sent a PATCH");
    assert_eq!(patch.path, "/api/v1/nodes/gpu-node-2");
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    assert_eq!(patch.body, Some(json!({"spec": {"unschedulable": true}})));
}

#[test]
fn a_forbidden_cordon_prints_the_servers_message() {
    let Some(lab) = Lab::start() else { return };
    lab.kube.forbid("patch", "nodes");
    // kubectl 1.32 reports a refused cordon as `error: unable to cordon node "gpu-node-1": ...`
    // and still exits 0, so only the message is checked.
    let output = lab.run(&["cordon", "gpu-node-1"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "nodes \"gpu-node-1\" is forbidden: User \"system:serviceaccount:ml:runguard\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        ),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&output.stdout).contains("cordoned"));
    let node = lab.kube.get("Node", "", "gpu-node-1").unwrap();
    assert!(node["spec"].get("unschedulable").is_none());
}

#[test]
fn server_errors_reach_kubectl_with_their_reason() {
    let Some(lab) = Lab::start() else { return };
    let missing = lab.run(&["get", "pytorchjob", "-n", "ml", "gpt-nope"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains(
            "Error from server (NotFound): pytorchjobs.kubeflow.org \"gpt-nope\" not found"
        ),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );

    let pulling = lab.run(&["logs", "-n", "ml", "nccl-tests-x7k2p"]);
    assert!(!pulling.status.success());
    assert!(
        String::from_utf8_lossy(&pulling.stderr).contains(
            "Error from server (BadRequest): container \"nccl\" in pod \"nccl-tests-x7k2p\" is waiting to start: trying and failing to pull image"
        ),
        "{}",
        String::from_utf8_lossy(&pulling.stderr)
    );

    lab.kube.unauthorized(true);
    let refused = lab.run(&["get", "pods", "-n", "ml"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("You must be logged in to the server"),
        "{stderr}"
    );
}

#[test]
fn kubectl_finds_the_resources_through_discovery() {
    let Some(lab) = Lab::start() else { return };
    let resources = lab.stdout(&["api-resources", "--no-headers", "-o", "name"]);
    for expected in [
        "pods",
        "nodes",
        "events",
        "namespaces",
        "jobs.batch",
        "pytorchjobs.kubeflow.org",
        "rayjobs.ray.io",
        "rayclusters.ray.io",
        "jobsets.jobset.x-k8s.io",
        "trainjobs.trainer.kubeflow.org",
        "workloads.kueue.x-k8s.io",
    ] {
        assert!(
            resources.lines().any(|line| line == expected),
            "{expected} missing from {resources}"
        );
    }
    let short = lab.stdout(&[
        "get",
        "po",
        "-n",
        "ml",
        "-o",
        "name",
        "--field-selector=spec.nodeName=gpu-node-2",
    ]);
    assert_eq!(short, "pod/llama-pretrain-worker-0\n");
}

#[test]
fn exec_sends_a_signal_to_the_container_s_main_process_over_a_websocket() {
    let Some(lab) = Lab::start() else { return };
    let pod = "llama-pretrain-master-0";
    // The training process saves when it gets SIGUSR1, as Lightning and NeMo do.
    lab.kube.on_signal(|signal, log| {
        if signal.signal == "USR1" {
            log.append("saving checkpoint at iteration 500 to /checkpoints (SIGUSR1)");
        }
    });
    lab.kube.clear_requests();
    let output = lab.run(&[
        "exec", "-n", "ml", pod, "-c", "pytorch", "--", "kill", "-s", "USR1", "1",
    ]);
    assert!(
        output.status.success(),
        "kubectl exec failed: {}\nrequests: {:#?}",
        String::from_utf8_lossy(&output.stderr),
        lab.kube.requests()
    );
    let received = lab.kube.signals_received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(
        (
            received[0].pod.as_str(),
            received[0].container.as_str(),
            received[0].signal.as_str()
        ),
        (pod, "pytorch", "USR1")
    );
    assert_eq!(
        lab.stdout(&["logs", "-n", "ml", pod, "-c", "pytorch"]),
        "saving checkpoint at iteration 500 to /checkpoints (SIGUSR1)\n"
    );
    // kubectl asked for the exec over a WebSocket with the channel subprotocols, argv in order, and
    // never fell back to SPDY.
    let execs: Vec<_> = lab
        .kube
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with("/exec"))
        .collect();
    assert_eq!(execs.len(), 1, "{execs:#?}");
    let exec = &execs[0];
    assert_eq!(exec.path, format!("/api/v1/namespaces/ml/pods/{pod}/exec"));
    assert_eq!(exec.upgrade.as_deref(), Some("websocket"), "{exec:#?}");
    let offered = exec.protocols.clone().unwrap_or_default();
    assert!(offered.contains("v5.channel.k8s.io"), "{offered}");
    let command: Vec<&str> = exec
        .query
        .iter()
        .filter(|(key, _)| key == "command")
        .map(|(_, value)| value.as_str())
        .collect();
    assert_eq!(command, ["kill", "-s", "USR1", "1"]);
    assert_eq!(exec.query_value("container"), Some("pytorch"));
    wait_for(&lab.kube, "the exec's record", |kube| {
        !kube.execs().is_empty()
    });
    let record = &lab.kube.execs()[0];
    assert_eq!(record.protocol, "v5.channel.k8s.io");
    assert_eq!(record.exit_code, 0);

    // `kill -SIG 1` is the same; any other command fails as in a container without it, and kubectl
    // exits with its status.
    let short = lab.run(&[
        "exec", "-n", "ml", pod, "-c", "pytorch", "--", "kill", "-TERM", "1",
    ]);
    assert!(
        short.status.success(),
        "{}",
        String::from_utf8_lossy(&short.stderr)
    );
    assert_eq!(lab.kube.signals_received()[1].signal, "TERM");
    let other = lab.run(&["exec", "-n", "ml", pod, "-c", "pytorch", "--", "nvidia-smi"]);
    assert_eq!(other.status.code(), Some(127), "{other:?}");
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        stderr.contains("\"nvidia-smi\": executable file not found in $PATH"),
        "{stderr}"
    );
    assert!(
        stderr.contains("command terminated with exit code 127"),
        "{stderr}"
    );
    let wrong_pid = lab.run(&[
        "exec", "-n", "ml", pod, "-c", "pytorch", "--", "kill", "-s", "USR1", "42",
    ]);
    assert_eq!(wrong_pid.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&wrong_pid.stderr).contains("kill: (42) - No such process"),
        "{}",
        String::from_utf8_lossy(&wrong_pid.stderr)
    );
    assert_eq!(
        lab.kube.signals_received().len(),
        2,
        "no signal from the failed ones"
    );

    // RBAC's refusal reads as the API server words it.
    lab.kube.forbid("create", "pods/exec");
    let refused = lab.run(&[
        "exec", "-n", "ml", pod, "-c", "pytorch", "--", "kill", "-s", "USR1", "1",
    ]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(
            "cannot create resource \"pods/exec\" in API group \"\" in the namespace \"ml\""
        ),
        "{stderr}"
    );
    assert_eq!(lab.kube.signals_received().len(), 2);
}

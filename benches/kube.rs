//! The Kubernetes backend at scale: 1,000 watched pods (125 PyTorchJobs of 8 replicas) on the
//! in-process API server of `tests/kube_fake/`, every pod writing a log line a second and the cluster
//! sending events, watched by a real `runguard run --auto` process. Reports the engine process's CPU
//! and memory while it follows all of it, and the time from a pod's terminal status arriving to the
//! recovery action being proposed (the action's row in the store). The nodes are a GPU pool as GKE
//! runs one, each tainted `nvidia.com/gpu=present:NoSchedule`, and the workloads tolerate the taint,
//! so each proposal matches the job's pods to every node; the time of that match alone for one job
//! over the pool is reported too.
//!
//! `cargo bench --bench kube`; `RUNGUARD_BENCH_PODS=10000 cargo bench --bench kube` for 10,000 pods
//! (1,250 jobs on 1,250 nodes: the pool grows with the pods, eight a node).

#[path = "../tests/kube_fake/mod.rs"]
mod kube_fake;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube_fake::FakeKube;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_runguard");
const REPLICAS: usize = 8;

/// Pods watched: `RUNGUARD_BENCH_PODS`, 1,000 by default, in jobs of [`REPLICAS`].
fn pods_from_env() -> usize {
    std::env::var("RUNGUARD_BENCH_PODS")
        .ok()
        .and_then(|value| value.parse::<usize>().ok())
        .filter(|pods| *pods >= REPLICAS * FAILURES)
        .unwrap_or(1_000)
}
const MEASURE: Duration = Duration::from_secs(30);
const FAILURES: usize = 5;

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
        },
    })
}

fn job(number: usize, nodes: usize) -> (Value, Vec<Value>) {
    let name = format!("train-{number:03}");
    let uid = format!("00000000-0000-4000-8000-{number:012}");
    let template = json!({"spec": {"containers": [{
        "name": "pytorch", "image": "registry.example.com/train:1",
        "args": ["--num-workers", "8"],
        "resources": {"limits": {"nvidia.com/gpu": 8}},
    }], "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}});
    let workload = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "ml", "uid": uid,
                     "creationTimestamp": "2026-01-05T08:00:00Z",
                     "labels": {"runguard.io/enabled": "true"}},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
            "Worker": {"replicas": REPLICAS - 1, "restartPolicy": "Never", "template": template},
        }},
        "status": {"startTime": "2026-01-05T08:00:05Z", "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"},
        ]},
    });
    let pods = (0..REPLICAS)
        .map(|replica| {
            let (role, index) = if replica == 0 {
                ("master", 0)
            } else {
                ("worker", replica - 1)
            };
            // Eight pods a node, one job's replicas on consecutive nodes.
            let node = format!("gpu-{:03}", (number * REPLICAS + replica) % nodes);
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": format!("{name}-{role}-{index}"), "namespace": "ml",
                    "uid": format!("{uid}-{replica}"),
                    "labels": {"training.kubeflow.org/job-name": name,
                               "training.kubeflow.org/replica-type": role,
                               "training.kubeflow.org/replica-index": index.to_string()},
                    "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                         "name": name, "uid": uid, "controller": true}],
                },
                "spec": {"nodeName": node, "containers": [{"name": "pytorch", "image": "train:1"}]},
                "status": {"phase": "Running", "startTime": "2026-01-05T08:00:10Z",
                           "containerStatuses": [{"name": "pytorch", "ready": true, "restartCount": 0,
                               "state": {"running": {"startedAt": "2026-01-05T08:00:10Z"}}}]},
            })
        })
        .collect();
    (workload, pods)
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .map(|pair| pair.iter().filter_map(|f| f.parse::<f64>().ok()).sum())
        .unwrap_or_default();
    // Linux reports in clock ticks, 100 per second on every platform this runs on.
    ticks / 100.0
}

fn memory_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_default()
}

fn store_json(dir: &Path, args: &[&str]) -> Value {
    let output = Command::new(BIN)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--db")
        .arg(dir.join("runguard.sqlite"))
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("runguard {args:?}: {err}"));
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

/// The store's view of one workflow's actions, read directly (cheaper than `runguard status`); the
/// store is opened once, as opening takes the write lock for a moment.
fn has_action(store: &runguard_engine::store::Store, name: &str) -> bool {
    let db = store.db();
    let Ok(workflows) = db.workflows() else {
        return false;
    };
    workflows
        .iter()
        .find(|workflow| workflow.name == name)
        .is_some_and(|workflow| {
            db.actions(workflow.id)
                .is_ok_and(|actions| !actions.is_empty())
        })
}

struct Engine(Child);

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// The mean time to match one job's pods to every node of the pool (which can take it now, which
/// could ever), over many runs.
fn placement_time(nodes: &[Value]) -> (Duration, usize) {
    use runguard_engine::backend::kube::workload::{WorkloadKind, placement};
    let (workload, _) = job(0, nodes.len());
    let replicas = placement::replicas(WorkloadKind::PyTorchJob, &workload);
    const RUNS: u32 = 2_000;
    let start = Instant::now();
    let mut fitting = 0;
    for _ in 0..RUNS {
        let capacity = placement::capacity(&replicas, std::hint::black_box(nodes), None);
        fitting = capacity.fitting.len();
    }
    (start.elapsed() / RUNS, fitting)
}

fn main() {
    let jobs = pods_from_env() / REPLICAS;
    // Eight pods a node; 128 nodes at least, the pool of the default run.
    let nodes = jobs.max(128);
    let kube = FakeKube::start();
    for index in 0..nodes {
        kube.apply(node(&format!("gpu-{index:03}")));
    }
    let mut pod_names = Vec::new();
    for index in 0..jobs {
        let (workload, pods) = job(index, nodes);
        kube.apply(workload);
        for pod in pods {
            pod_names.push(
                pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            kube.apply(pod);
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
    let kubeconfig = kube.kubeconfig(dir.path());
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[backend]\nkind = \"kubernetes\"\n\n[kubernetes]\nkubeconfig = \"{}\"\ndata_dir = \"{}\"\n",
            kubeconfig.display(),
            dir.path().join("kube").display()
        ),
    )
    .unwrap_or_else(|err| panic!("{err}"));

    // Every pod writes a line a second; one event a second somewhere in the cluster.
    let kube = Arc::new(kube);
    let running = Arc::new(AtomicBool::new(true));
    let writer_thread = {
        let running = Arc::clone(&running);
        let feeder = Arc::clone(&kube);
        let names = pod_names.clone();
        std::thread::spawn(move || {
            let mut step = 0u64;
            while running.load(Ordering::Relaxed) {
                let started = Instant::now();
                step += 1;
                for name in &names {
                    feeder.append_log(
                        "ml",
                        name,
                        "pytorch",
                        &format!(
                            " iteration {step:>6}/100000 | consumed samples: {} | elapsed time per iteration (ms): 998.1 | throughput per GPU (TFLOP/s/GPU): 187.4 | lm loss: 2.4817E+00 |",
                            step * 512
                        ),
                    );
                }
                feeder.apply(json!({
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": format!("train-000-master-0.{step}"), "namespace": "ml"},
                    "involvedObject": {"kind": "Pod", "name": "train-000-master-0", "namespace": "ml"},
                    "reason": "Pulled", "type": "Normal", "count": 1,
                    "message": "Container image already present on machine",
                    "lastTimestamp": chrono::Utc::now().to_rfc3339(),
                }));
                std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
            }
        })
    };

    let engine = Engine(
        Command::new(BIN)
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .arg("--db")
            .arg(dir.path().join("runguard.sqlite"))
            .args(["run", "--auto"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("{err}")),
    );
    let pid = engine.0.id();
    let db = dir.path().join("runguard.sqlite");

    let start = Instant::now();
    loop {
        let status = store_json(dir.path(), &["status", "--json"]);
        let enrolled = status["workflows"].as_array().map_or(0, Vec::len);
        if enrolled == jobs {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300 + jobs as u64 / 2),
            "only {enrolled} of {jobs} workflows enrolled"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let enrolled_after = start.elapsed();
    // Let the followers connect and catch up before measuring.
    std::thread::sleep(Duration::from_secs(10));
    let (cpu_before, wall_before) = (cpu_seconds(pid), Instant::now());
    std::thread::sleep(MEASURE);
    let cpu = (cpu_seconds(pid) - cpu_before) / wall_before.elapsed().as_secs_f64();
    let rss = memory_kib(pid, "VmRSS:");
    let lines_written: usize = std::fs::read_dir(dir.path().join("kube/logs/ml"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| {
                    std::fs::read_to_string(entry.path().join("restart-0.log")).ok()
                })
                .map(|text| text.lines().count())
                .sum()
        })
        .unwrap_or_default();

    // Failures: a worker's container ends, then the operator marks the job failed.
    let mut latencies = Vec::new();
    let mut missed = Vec::new();
    let store = runguard_engine::store::Store::open(&db).unwrap_or_else(|err| panic!("{err}"));
    for index in 0..FAILURES {
        let name = format!("train-{:03}", jobs - 1 - index);
        // The failing rank says why before its container ends, as a real one does.
        kube.append_log(
            "ml",
            &format!("{name}-worker-2"),
            "pytorch",
            "[rank24]:[E1122 06:24:44.904112234 ProcessGroupNCCL.cpp:632] [Rank 24] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600050 milliseconds before timing out.",
        );
        std::thread::sleep(Duration::from_millis(200));
        kube.modify("Pod", "ml", &format!("{name}-worker-2"), |pod| {
            pod["status"]["phase"] = json!("Failed");
            pod["status"]["containerStatuses"][0]["state"] = json!({"terminated": {
                "reason": "Error", "exitCode": 1, "finishedAt": chrono::Utc::now().to_rfc3339()}});
        });
        let failed_at = Instant::now();
        kube.modify("PyTorchJob", "ml", &name, |job| {
            job["status"]["conditions"] = json!([{
                "type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
                "message": format!("PyTorchJob ml/{name} is failed because 1 Worker replica(s) failed."),
            }]);
        });
        let mut acted = true;
        while !has_action(&store, &name) {
            if failed_at.elapsed() > Duration::from_secs(60) {
                acted = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if acted {
            latencies.push(failed_at.elapsed().as_secs_f64());
        } else {
            missed.push(name);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let peak = memory_kib(pid, "VmHWM:");
    running.store(false, Ordering::Relaxed);
    drop(engine);
    let _ = writer_thread.join();
    latencies.sort_by(f64::total_cmp);

    println!(
        "runguard kube benchmark: {jobs} PyTorchJobs, {} pods, {nodes} nodes",
        jobs * REPLICAS
    );
    println!(
        "  every pod writes 1 log line/s ({} lines/s), plus 1 event/s",
        jobs * REPLICAS
    );
    println!(
        "  all {jobs} workflows enrolled after {:.1} s",
        enrolled_after.as_secs_f64()
    );
    println!(
        "  engine CPU while following: {:.1} % of one core (over {} s)",
        cpu * 100.0,
        MEASURE.as_secs()
    );
    println!(
        "  engine memory: {} MB resident, {} MB peak",
        rss / 1024,
        peak / 1024
    );
    println!("  log lines in the unified logs after the window: {lines_written}");
    println!(
        "  pod's terminal status → action proposed: min {:.3} s, median {:.3} s, max {:.3} s ({} of {FAILURES} failures acted on; goal < 1 s)",
        latencies.first().copied().unwrap_or_default(),
        latencies
            .get(latencies.len() / 2)
            .copied()
            .unwrap_or_default(),
        latencies.last().copied().unwrap_or_default(),
        latencies.len()
    );
    if !missed.is_empty() {
        println!(
            "  no action within 60 s of the failure for {} of {FAILURES}: {}",
            missed.len(),
            missed.join(", ")
        );
    }
    let pool: Vec<Value> = (0..nodes)
        .map(|index| node(&format!("gpu-{index:03}")))
        .collect();
    let (per_job, fitting) = placement_time(&pool);
    println!(
        "  matching one job's pods to the {nodes} tainted nodes: {:.1} µs ({fitting} fit)",
        per_job.as_secs_f64() * 1e6
    );
}

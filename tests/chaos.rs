//! A handful of chaos trials: the headless engine on the simulated cluster aborted at named points
//! (and killed at random moments) and restarted, then checked against the cluster's record and the
//! store. `cargo bench --bench chaos` runs hundreds; these keep the guarantees in every test run.

use std::path::Path;
use std::time::Duration;

use crate::support::chaos::check::{Facts, SchedulerJob, StoredAction, StoredDelivery, key};
use crate::support::chaos::{Kill, SimTrial, Stop, run_sim_trial};
use crate::support::cli::BIN;

/// Simulated seconds per real second: fast, and still slow enough for a loaded machine's engine.
const SPEED: u32 = 400;

fn trial(seed: u64, scenario: &'static str, kills: Vec<Kill>) -> SimTrial {
    SimTrial {
        seed,
        scenario,
        injected: 1,
        speed: SPEED,
        kills,
    }
}

fn assert_clean(trial: &SimTrial) {
    let outcome = run_sim_trial(Path::new(BIN), trial);
    assert!(
        outcome.violations.is_empty(),
        "{trial:?}\nstops: {:?}\n{:#?}",
        outcome.stops,
        outcome.violations
    );
    let aborted = outcome
        .stops
        .iter()
        .filter(|stop| matches!(stop, Stop::Aborted(_)))
        .count();
    let planned = trial
        .kills
        .iter()
        .filter(|kill| matches!(kill, Kill::At { .. }))
        .count();
    assert_eq!(aborted, planned, "{trial:?}: {:?}", outcome.stops);
    assert_eq!(outcome.recovery_secs.len(), 1, "{outcome:?}");
}

#[test]
fn killed_after_the_failure_is_recorded_and_before_the_requeue_records_it_recovers_once() {
    assert_clean(&trial(
        1,
        "xid79",
        vec![
            Kill::At {
                point: "failure_recorded",
                passage: 1,
            },
            Kill::At {
                point: "action_ran",
                passage: 1,
            },
        ],
    ));
}

#[test]
fn killed_while_the_requeue_is_marked_executing_recovers_once() {
    assert_clean(&trial(
        2,
        "nccl-timeout",
        vec![Kill::At {
            point: "action_executing",
            passage: 1,
        }],
    ));
}

#[test]
fn killed_between_an_alert_sent_and_its_record_the_receiver_keeps_one() {
    assert_clean(&trial(
        3,
        "xid79",
        vec![
            Kill::At {
                point: "alert_sent",
                passage: 1,
            },
            Kill::At {
                point: "alert_sent",
                passage: 2,
            },
        ],
    ));
}

#[test]
fn killed_inside_store_writes_and_at_random_moments_loses_nothing() {
    assert_clean(&trial(
        4,
        "nccl-timeout",
        vec![
            Kill::At {
                point: "store_commit",
                passage: 40,
            },
            Kill::After(Duration::from_millis(1500)),
            // Low passages, so that a slow machine's engine, which ticks less often, passes them.
            Kill::At {
                point: "store_commit",
                passage: 60,
            },
        ],
    ));
}

#[test]
fn a_seeded_random_trial_keeps_the_invariants() {
    let trial = SimTrial::planned(5, SPEED);
    let outcome = run_sim_trial(Path::new(BIN), &trial);
    assert!(
        outcome.violations.is_empty(),
        "{trial:?}\n{:#?}",
        outcome.violations
    );
}

#[test]
fn an_engine_restarted_at_once_waits_for_the_lock_the_dead_one_left_behind() {
    use runguard_engine::store::lock::EngineLock;

    use crate::support::chaos::Sandbox;

    let sandbox = Sandbox::new(Path::new(BIN));
    sandbox.write_config(&format!(
        "[sim]\nscenario = \"xid79\"\nspeed = {SPEED}.0\ndir = \"{}\"\n",
        sandbox.dir.path().join("sim").display()
    ));
    // The lock is still held when the engine starts (as by a process the dead engine was
    // starting), and let go a second later.
    let held = EngineLock::acquire(&sandbox.db()).unwrap();
    let mut engine = sandbox.spawn(0, &[]);
    std::thread::sleep(Duration::from_secs(1));
    drop(held);
    let start = std::time::Instant::now();
    let completed = || {
        rusqlite::Connection::open(sandbox.db())
            .and_then(|db| {
                db.query_row(
                    "SELECT COUNT(*) FROM workflows WHERE status = 'completed'",
                    [],
                    |row| row.get::<_, i64>(0),
                )
            })
            .is_ok_and(|n| n > 0)
    };
    while !completed() {
        assert!(
            engine.try_wait().unwrap().is_none(),
            "the engine gave up: {}",
            std::fs::read_to_string(sandbox.dir.path().join("engine-0.log")).unwrap_or_default()
        );
        assert!(start.elapsed() < Duration::from_secs(120), "never settled");
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::support::chaos::terminate(&mut engine);
}

/// Facts of a clean trial: one job failed once and was requeued once, every alert arrived once.
fn clean_facts() -> Facts {
    let mut facts = Facts {
        jobs: vec![SchedulerJob {
            job_id: "1".into(),
            restart_count: 1,
            completed: true,
            held: false,
        }],
        workflows: vec![(1, "completed".into(), vec!["1".into(), "1".into()])],
        actions: vec![StoredAction {
            id: 1,
            workflow_id: 1,
            attempt_index: 0,
            kind: "requeue".into(),
            state: "done".into(),
        }],
        failures: vec![(1, 0)],
        notifications: vec![(1, "failure".into()), (2, "recovered".into())],
        deliveries: vec![
            StoredDelivery {
                notification_id: 1,
                channel: "hook".into(),
                event: "failure".into(),
                state: "delivered".into(),
            },
            StoredDelivery {
                notification_id: 2,
                channel: "hook".into(),
                event: "recovered".into(),
                state: "delivered".into(),
            },
        ],
        ..Facts::default()
    };
    facts.injected.insert("1".into(), 1);
    facts.received.insert(key("hook", 1), 1);
    facts.received.insert(key("hook", 2), 2);
    facts
}

#[test]
fn the_checker_passes_a_clean_trial_and_counts_a_repeat_the_key_absorbs() {
    let facts = clean_facts();
    assert_eq!(facts.violations(), Vec::<String>::new());
    assert_eq!(facts.repeats(), 1);
}

/// A way to break clean facts, and the words of the violation it must raise.
type Breakage = (&'static str, fn(&mut Facts));

#[test]
fn the_checker_catches_each_broken_guarantee() {
    let broken: [Breakage; 9] = [
        ("restarted 2 times", |f| f.jobs[0].restart_count = 2),
        ("did not complete", |f| f.jobs[0].completed = false),
        ("left held", |f| f.jobs[0].held = true),
        ("attempt 0 was restarted twice", |f| {
            let again = f.actions[0].clone();
            f.actions.push(StoredAction { id: 2, ..again });
            f.jobs[0].restart_count = 2;
            f.injected.insert("1".into(), 2);
        }),
        ("no failure recorded", |f| f.failures.clear()),
        ("2 failures recorded", |f| f.failures.push((1, 0))),
        ("left approved", |f| f.actions[0].state = "approved".into()),
        ("never arrived", |f| {
            f.received.remove(&key("hook", 1));
        }),
        ("never queued", |f| {
            f.deliveries.remove(1);
            f.received.remove(&key("hook", 2));
        }),
    ];
    for (expected, breaks) in broken {
        let mut facts = clean_facts();
        breaks(&mut facts);
        let found = facts.violations();
        assert!(
            found.iter().any(|violation| violation.contains(expected)),
            "{expected:?} not caught: {found:#?}"
        );
    }
}

/// The Kubernetes API server gone in the middle of a recovery (the stand-in closing every
/// connection), for `RUNGUARD_OUTAGE_SECS` (12; 120 for the two-minute case): the engine backs off
/// instead of calling in a loop, runs nothing twice, and completes the recovery once it is back.
#[cfg(feature = "kubernetes")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_api_gone_mid_recovery_is_backed_off_and_the_recovery_completes_after() {
    use std::sync::Arc;
    use std::time::Instant;

    use runguard_engine::backend::kube::KubeBackend;
    use runguard_engine::clock::RealClock;
    use runguard_engine::config::BackendKind;
    use runguard_engine::model::{ActionKind, ActionState};
    use serde_json::json;

    use crate::kube_fake::FakeKube;
    use crate::support::EngineRig;
    use crate::support::backend::{Accepting, ScriptedBackend};

    let outage = Duration::from_secs(
        std::env::var("RUNGUARD_OUTAGE_SECS")
            .ok()
            .and_then(|secs| secs.parse().ok())
            .unwrap_or(12),
    );
    let kube = FakeKube::start();
    kube.load_fixture("nodes.json");
    kube.load_fixture("pytorchjob-running.json");
    // Healthy nodes to re-create the job on.
    kube.modify("Node", "", "gpu-node-2", |node| {
        let conditions = node["status"]["conditions"].as_array_mut().unwrap();
        conditions.retain(|condition| condition["type"] != "GpuXidError");
        node["spec"]["taints"] = json!([]);
    });
    let template = kube.get("Node", "", "gpu-node-1").unwrap();
    for name in ["gpu-node-6", "gpu-node-7"] {
        let mut node = template.clone();
        node["metadata"] = json!({"name": name, "labels": {"kubernetes.io/hostname": name}});
        kube.apply(node);
    }
    let mut rig = EngineRig::default();
    let kubeconfig = kube.kubeconfig(rig.path());
    rig.config.backend.kind = BackendKind::Kubernetes;
    rig.config.kubernetes.kubeconfig = Some(kubeconfig);
    rig.config.kubernetes.data_dir = Some(rig.path().join("kube"));
    rig.config.kubernetes.sync_timeout_secs = 10;
    rig.config.engine.poll_interval_secs = 1.0;
    rig.config.engine.max_backoff_secs = 8;
    rig.config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Cancel];
    let backend = Arc::new(
        KubeBackend::connect(&rig.config.kubernetes, rig.path().join("kube"))
            .await
            .unwrap(),
    );
    // Recorded, to count the engine's own calls apart from the watchers' reconnections.
    let recorded = Arc::new(ScriptedBackend::wrapping(
        backend,
        Accepting,
        Arc::new(RealClock),
    ));
    let mut engine = rig.engine_in_real_time(Arc::clone(&recorded));
    let requeues = |rig: &EngineRig, state: ActionState| {
        rig.status()
            .workflows
            .iter()
            .flat_map(|view| view.actions.iter())
            .filter(|action| action.kind == ActionKind::Requeue && action.state == state)
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while rig.status().workflows.is_empty() {
        assert!(Instant::now() < deadline, "never enrolled");
        engine.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The node under the job is lost; the API server goes away as the engine comes to act on it.
    kube.modify("Node", "", "gpu-spot-1", |node| {
        for condition in node["status"]["conditions"].as_array_mut().unwrap() {
            if condition["type"] == "Ready" {
                *condition = json!({
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": "2025-06-10T09:00:00Z",
                    "lastTransitionTime": "2025-06-10T09:00:40Z",
                });
            }
        }
    });
    let writes_before = kube
        .requests()
        .iter()
        .filter(|request| request.method != "GET")
        .count();
    // Down right after the first step of the re-creation (the old job deleted).
    kube.refuse_connections_after_writes(1);
    while !kube.is_refusing() {
        assert!(Instant::now() < deadline, "the recovery never began");
        engine.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let down = Instant::now();
    let calls_before = recorded.calls().len();
    let mut ticks = 0;
    while down.elapsed() < outage {
        engine.tick().await.unwrap();
        ticks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = kube.refused_connections();
    let calls = recorded.calls().len() - calls_before;
    let decided = requeues(&rig, ActionState::Approved);
    kube.accept_connections();
    eprintln!(
        "outage of {} s: {ticks} engine ticks, {calls} scheduler calls by the engine, {refused} connections refused (the watchers' reconnections included)",
        outage.as_secs()
    );
    assert_eq!(
        decided,
        1,
        "the requeue is decided and waits: {:#?}",
        rig.status().workflows
    );
    assert_eq!(requeues(&rig, ActionState::Done), 0);
    // Backoff: the poll interval doubled after each failure up to the cap, so a few calls to reach
    // the cap and then one per cap; never one per tick.
    let poll = rig.config.engine.poll_interval_secs;
    let cap = rig.config.engine.max_backoff_secs as f64;
    let bound = 2 + (cap / poll).log2().ceil() as usize + (outage.as_secs_f64() / cap) as usize;
    assert!(
        (1..=bound).contains(&calls),
        "{calls} scheduler calls in {} s of outage ({ticks} ticks), at most {bound} expected",
        outage.as_secs()
    );
    assert!(refused > 0, "nothing tried to connect during the outage");

    let back = Instant::now();
    while requeues(&rig, ActionState::Done) == 0 {
        assert!(
            back.elapsed() < Duration::from_secs(60),
            "the recovery did not complete: {:#?}",
            rig.status().workflows
        );
        engine.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "recovery completed {:.1} s after the API server came back",
        back.elapsed().as_secs_f64()
    );
    for _ in 0..20 {
        engine.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let writes: Vec<String> = kube
        .requests()
        .iter()
        .filter(|request| request.method != "GET")
        .skip(writes_before)
        .map(|request| format!("{} {}", request.method, request.path))
        .collect();
    assert_eq!(
        writes,
        vec![
            // Answered; the server went down before the pod stuck on the lost node was deleted
            // (its garbage collector took it with the job meanwhile).
            "DELETE /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
            // The re-creation finished from the saved spec: the delete asked again finds nothing
            // (404), the new incarnation is created once.
            "DELETE /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
            "POST /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs",
        ],
        "the re-creation finished once, nothing else written"
    );
    assert!(
        kube.get("PyTorchJob", "ml", "llama-pretrain").is_some(),
        "the job exists again"
    );
    assert_eq!(requeues(&rig, ActionState::Done), 1);
    assert_eq!(requeues(&rig, ActionState::Approved), 0);
}

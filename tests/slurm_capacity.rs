//! Too few nodes now is a reason to wait, not to give up, on a real Slurm (tests/slurm/cluster.sh):
//! a job that needs every node of the partition fails while an administrator has one node drained;
//! runguard requeues it anyway, says it waits for capacity, and the job runs again once the node is
//! back. Skipped with a message where Slurm is not installed (RUNGUARD_REQUIRE_SLURM=1 fails instead).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::CliSandbox;
use crate::support::slurm::{
    Cluster, HeadlessEngine, TRAIN_SH, job_logs, one_at_a_time, status, strings,
};

/// Polls `runguard status --json` until `done` holds for the first workflow, for at most `within`.
fn wait_for(
    sandbox: &CliSandbox,
    cluster: &Cluster,
    within: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < within {
        if let Some(status) = status(sandbox, cluster) {
            if done(&status) {
                return status;
            }
            last = status;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "timed out waiting for {what}: {:#}\n{}\nengine: {}",
        last["workflows"][0],
        job_logs(sandbox.path()),
        std::fs::read_to_string(sandbox.path().join("engine.err")).unwrap_or_default()
    );
}

/// `scontrol update` of a node, as the administrator runs it.
fn set_node(cluster: &Cluster, node: &str, state: &[&str]) {
    let output = cluster
        .command("scontrol")
        .args(["update", &format!("nodename={node}")])
        .args(state)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "scontrol update {node} {state:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The job's state and reason as squeue prints them (`PENDING ReqNodeNotAvail, ...`).
fn queue_state(cluster: &Cluster, job_id: &str) -> String {
    let output = cluster
        .command("squeue")
        .args(["--noheader", "--jobs", job_id, "--format=%T %r"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[test]
fn a_job_needing_every_node_waits_for_a_drained_node_and_runs_again_when_it_is_back() {
    if !crate::support::slurm::available(&[]) {
        return;
    }
    let _one_at_a_time = one_at_a_time();
    let sandbox = CliSandbox::default();
    let cluster = Cluster::start(&sandbox.path().join("slurm"));
    std::fs::create_dir(sandbox.path().join("ckpt")).unwrap();
    sandbox.write_config(
        "[engine]\npoll_interval_secs = 0.5\nheartbeat_timeout_secs = 10\n\n\
         [backend]\nkind = \"slurm\"\n\n[recovery]\nwhitelist = [\"requeue\", \"cancel\"]\n",
    );
    // All four nodes of partition gpu; the run goes silent at iteration 15 on its first attempt (a
    // hang names no node, so none is excluded).
    let script = sandbox.path().join("train.sbatch");
    let logs = sandbox.path().display().to_string();
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n\
             #SBATCH --comment='{{\"APS\": {{\"auto_resume_mode\": \"requeue\", \"max_requeue_times\": 3}}}}'\n\
             #SBATCH -N 4\n\
             #SBATCH -o {logs}/%x_%j.log\n\
             export CKPT_DIR={logs}/ckpt FAIL=hang FAIL_AT=15 ITERS=30\n\
             srun -l bash {TRAIN_SH}\n"
        ),
    )
    .unwrap();
    let _engine = HeadlessEngine::start(&sandbox, &cluster, &[]);
    let submitted = cluster
        .command("sbatch")
        .args(["--parsable", "-J", "whole-partition"])
        .arg(&script)
        .current_dir(sandbox.path())
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let job_id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();

    // Once the run has its first checkpoint, an administrator drains n4 for maintenance: the running
    // job keeps it, a new start cannot have it.
    let start = Instant::now();
    while !sandbox.path().join("ckpt/iter_0000010").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no checkpoint: {}",
            job_logs(sandbox.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    set_node(&cluster, "n4", &["state=drain", "reason=maintenance"]);

    // The hang is requeued though only three of the four nodes it needs are usable now.
    let waiting = wait_for(
        &sandbox,
        &cluster,
        Duration::from_secs(90),
        "the requeue waiting for capacity",
        |status| {
            let workflow = &status["workflows"][0];
            workflow["attempts"]
                .as_array()
                .is_some_and(|a| a.len() == 2)
                && workflow["status_reason"]
                    .as_str()
                    .is_some_and(|reason| reason.starts_with("waiting for capacity"))
        },
    );
    let workflow = &waiting["workflows"][0];
    assert_eq!(workflow["status"], "recovering", "{workflow:#}");
    assert_eq!(workflow["anomalies"][0]["kind"], "hang");
    let reason = workflow["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("waiting for capacity: 3 of the 4 nodes in partition gpu"),
        "{reason}"
    );
    assert!(reason.contains("it needs 4"), "{reason}");
    assert!(
        strings(&workflow["attempts"][1]["excluded_nodes"]).is_empty(),
        "{workflow:#}"
    );
    let alerts: Vec<&Value> = waiting["notifications"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            n["event"] == "recovering"
                && n["body"]
                    .as_str()
                    .is_some_and(|body| body.contains("waiting for capacity"))
        })
        .collect();
    assert_eq!(alerts.len(), 1, "{:#}", waiting["notifications"]);
    // Slurm keeps it pending for the drained node.
    let start = Instant::now();
    let mut queued = queue_state(&cluster, &job_id);
    while !queued.starts_with("PENDING") && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(250));
        queued = queue_state(&cluster, &job_id);
    }
    assert!(queued.starts_with("PENDING"), "{queued}");
    std::thread::sleep(Duration::from_secs(3));
    let still = queue_state(&cluster, &job_id);
    assert!(still.starts_with("PENDING"), "{still}");

    // n4 is back: the job runs on all four nodes from its checkpoint and completes.
    set_node(&cluster, "n4", &["state=resume"]);
    let done = wait_for(
        &sandbox,
        &cluster,
        Duration::from_secs(120),
        "the run to complete",
        |status| status["workflows"][0]["status"] == "completed",
    );
    let workflow = &done["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    assert_eq!(
        strings(&attempts[1]["nodes"]),
        ["n1", "n2", "n3", "n4"],
        "{workflow:#}"
    );
    let logs = job_logs(sandbox.path());
    assert!(
        logs.contains("successfully loaded checkpoint from"),
        "{logs}"
    );
}

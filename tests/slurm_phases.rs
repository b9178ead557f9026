//! Multiphase workflows against a real Slurm: `runguard submit` submits the first phase, the engine
//! submits each later one once the one before it completed; a phase that fails once on a bad node is
//! requeued off it and completes, and a phase that fails for good stops the phases after it.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::slurm::{
    Cluster, HeadlessEngine, TRAIN_SH, job_logs, one_at_a_time, status, strings,
};
use crate::support::{CliSandbox, stderr, stdout};

fn slurm_available() -> bool {
    crate::support::slurm::available(&[])
}

/// A phase's batch script: train.sh on every node, resuming from the phase's own checkpoint
/// directory (runguard passes it as RUNGUARD_CHECKPOINT_DIR), with the run settings of its
/// arguments (`ITERS=20 FAIL=nccl ...`).
fn phase_script(sandbox: &CliSandbox) -> String {
    let dir = sandbox.path().display();
    format!(
        "#!/bin/bash\n\
         #SBATCH -o {dir}/%x_%j.log\n\
         export CKPT_DIR=\"$RUNGUARD_CHECKPOINT_DIR\" ITERS=10 CKPT_EVERY=5 STEP_SECS=0.05\n\
         if [ $# -gt 0 ]; then export \"$@\"; fi\n\
         echo \"phase $RUNGUARD_PHASE starts\"\n\
         srun -l bash {TRAIN_SH}\n"
    )
}

/// A three-phase workflow file whose middle phase runs with `extend_args`.
fn workflow_file(extend_args: &str) -> String {
    format!(
        "name = \"llama\"\n\n\
         [[phase]]\nname = \"pretrain\"\nsbatch = \"phase.sbatch\"\nnodes = 1\n\
         checkpoint_dir = \"ckpt/pretrain\"\n\n\
         [[phase]]\nname = \"extend\"\nsbatch = \"phase.sbatch\"\nargs = [{extend_args}]\n\
         nodes = 2\nmin_nodes = 1\nmax_failures = 2\ncheckpoint_dir = \"ckpt/extend\"\n\n\
         [[phase]]\nname = \"eval\"\nsbatch = \"phase.sbatch\"\nnodes = 1\n\
         checkpoint_dir = \"ckpt/eval\"\n"
    )
}

/// What a finished multiphase run left.
struct Finished {
    status: Value,
    logs: String,
    sandbox: CliSandbox,
}

impl Finished {
    fn multiphase(&self) -> &Value {
        &self.status["multiphases"][0]
    }

    fn phase(&self, index: usize) -> &Value {
        &self.multiphase()["phases"][index]
    }

    /// The workflow that followed phase `index`'s job.
    fn run_of(&self, index: usize) -> &Value {
        let id = &self.phase(index)["workflow_id"];
        self.status["workflows"]
            .as_array()
            .and_then(|workflows| workflows.iter().find(|workflow| &workflow["id"] == id))
            .unwrap_or(&Value::Null)
    }

    fn context(&self) -> String {
        format!(
            "{:#}\n{}\nengine: {}",
            self.status,
            self.logs,
            std::fs::read_to_string(self.sandbox.path().join("engine.err")).unwrap_or_default()
        )
    }
}

/// Submits the three-phase workflow with `runguard submit` and runs the headless engine until it is
/// no longer running.
fn run_workflow(extend_args: &str) -> Finished {
    run_workflow_file(&workflow_file(extend_args), |_| {})
}

/// Submits the workflow `text` with `runguard submit` once `prepare` has shaped the cluster, and
/// runs the headless engine until it is no longer running.
fn run_workflow_file(text: &str, prepare: impl FnOnce(&Cluster)) -> Finished {
    let _one_at_a_time = one_at_a_time();
    let sandbox = CliSandbox::default();
    std::fs::set_permissions(sandbox.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let cluster = Cluster::start(&sandbox.path().join("slurm"));
    sandbox.write_config(
        "[engine]\npoll_interval_secs = 0.5\n\n[backend]\nkind = \"slurm\"\n\n\
         [recovery]\nwhitelist = [\"requeue\", \"cancel\", \"submit\"]\n",
    );
    std::fs::write(sandbox.path().join("phase.sbatch"), phase_script(&sandbox)).unwrap();
    let file = sandbox.path().join("workflow.toml");
    std::fs::write(&file, text).unwrap();
    prepare(&cluster);

    let dry = sandbox
        .command()
        .current_dir(sandbox.path())
        .env("SLURM_CONF", &cluster.conf)
        .env("PATH", &cluster.path)
        .args(["submit", "--dry-run"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(stdout(&dry).contains(" phases,"), "{}", stdout(&dry));
    assert!(
        status(&sandbox, &cluster)
            .is_none_or(|status| status["multiphases"].as_array().is_none_or(Vec::is_empty)),
        "a dry run stored something"
    );

    let submitted = sandbox
        .command()
        .current_dir(sandbox.path())
        .env("SLURM_CONF", &cluster.conf)
        .env("PATH", &cluster.path)
        .arg("submit")
        .arg(&file)
        .output()
        .unwrap();
    assert!(submitted.status.success(), "{}", stderr(&submitted));
    assert!(
        stdout(&submitted).contains("as job"),
        "{}",
        stdout(&submitted)
    );

    let _engine = HeadlessEngine::start(&sandbox, &cluster, &[]);
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < Duration::from_secs(240) {
        if let Some(status) = status(&sandbox, &cluster) {
            let done = status["multiphases"][0]["state"]
                .as_str()
                .is_some_and(|state| state != "running");
            last = status;
            if done {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let logs = job_logs(sandbox.path());
    Finished {
        status: last,
        logs,
        sandbox,
    }
}

#[test]
fn a_phase_failing_on_a_bad_node_is_requeued_off_it_and_the_next_phase_starts_after_it() {
    if !slurm_available() {
        return;
    }
    let finished = run_workflow(r#""ITERS=30", "FAIL=nccl", "FAIL_AT=15", "FAIL_NODE=n2""#);
    let context = || finished.context();
    if std::env::var_os("SHOW").is_some() {
        eprintln!("{}", context());
    }
    assert_eq!(finished.multiphase()["state"], "succeeded", "{}", context());
    for index in 0..3 {
        assert_eq!(finished.phase(index)["state"], "succeeded", "{}", context());
    }
    // Phase 2 failed once on n2, was requeued under its job id without n2, and completed.
    let extend = finished.run_of(1);
    let attempts = extend["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(attempts.len(), 2, "{}", context());
    assert_eq!(attempts[0]["job_id"], attempts[1]["job_id"]);
    assert!(strings(&attempts[0]["nodes"]).contains(&"n2".to_string()));
    assert!(strings(&attempts[1]["excluded_nodes"]).contains(&"n2".to_string()));
    assert!(!strings(&attempts[1]["nodes"]).contains(&"n2".to_string()));
    assert_eq!(extend["attributions"][0]["culprit"]["node"], "n2");
    assert_eq!(finished.phase(1)["attempts"], 2);
    // It resumed from its own checkpoints, and so did nothing else.
    assert_eq!(extend["last_checkpoint_iteration"], 30, "{}", context());
    let extend_ckpt = finished.sandbox.path().join("ckpt/extend");
    assert!(extend_ckpt.join("iter_0000030").exists());
    assert!(
        !finished
            .sandbox
            .path()
            .join("ckpt/eval/iter_0000030")
            .exists()
    );
    // Phase 3 was submitted only after phase 2 completed.
    let extend_end = attempts[1]["end_time"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let eval = finished.run_of(2);
    let eval_submit = eval["attempts"][0]["submit_time"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !extend_end.is_empty() && eval_submit >= extend_end,
        "eval submitted at {eval_submit}, extend ended at {extend_end}\n{}",
        context()
    );
    let pretrain_end = finished.run_of(0)["attempts"][0]["end_time"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let extend_submit = attempts[0]["submit_time"].as_str().unwrap_or_default();
    assert!(extend_submit >= pretrain_end.as_str(), "{}", context());
    // Each phase's job was submitted by runguard with its enrolment.
    let eval_job: u64 = eval["attempts"][0]["job_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .unwrap_or_default();
    let extend_job: u64 = attempts[0]["job_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .unwrap_or_default();
    assert!(eval_job > extend_job, "{}", context());
    assert!(
        finished.logs.contains("phase eval starts"),
        "{}",
        finished.logs
    );
}

#[test]
fn a_phase_that_fails_for_good_stops_the_phases_after_it() {
    if !slurm_available() {
        return;
    }
    // A Python exception is not recoverable by a requeue: the phase fails for good at once.
    let finished = run_workflow(r#""FAIL=exception", "FAIL_AT=5""#);
    let context = || finished.context();
    assert_eq!(finished.multiphase()["state"], "failed", "{}", context());
    assert_eq!(finished.phase(0)["state"], "succeeded", "{}", context());
    assert_eq!(finished.phase(1)["state"], "failed", "{}", context());
    assert_eq!(finished.phase(2)["state"], "skipped", "{}", context());
    let skipped_because = finished.phase(2)["reason"].as_str().unwrap_or_default();
    assert!(
        skipped_because.contains("\"extend\" failed"),
        "{}",
        context()
    );
    // The last phase never started: no run, no job, no log line.
    assert!(finished.phase(2)["workflow_id"].is_null(), "{}", context());
    assert!(
        strings(&finished.phase(2)["job_ids"]).is_empty(),
        "{}",
        context()
    );
    assert!(
        !finished.logs.contains("phase eval starts"),
        "{}",
        finished.logs
    );
    assert_eq!(finished.run_of(1)["succeeded"], false, "{}", context());
    // The report of the failed phase's run shows where it stopped the workflow.
    let run = finished.phase(1)["workflow_id"].to_string();
    let report = stdout(&finished.sandbox.run(&["report", &run]));
    assert!(report.contains("Phases of llama (failed"), "{report}");
    assert!(report.contains("3. eval — skipped"), "{report}");
}

#[test]
fn a_phase_restarts_on_fewer_nodes_down_to_its_minimum() {
    if !slurm_available() {
        return;
    }
    // n3 and n4 are drained by an administrator: once n2 is excluded, only n1 is left.
    let text = "name = \"llama\"\n\n\
                [[phase]]\nname = \"extend\"\nsbatch = \"phase.sbatch\"\n\
                args = [\"ITERS=30\", \"FAIL=nccl\", \"FAIL_AT=15\", \"FAIL_NODE=n2\"]\n\
                nodes = 2\nmin_nodes = 1\ncheckpoint_dir = \"ckpt/extend\"\n";
    let finished = run_workflow_file(text, |cluster| {
        for node in ["n3", "n4"] {
            let drained = cluster
                .command("scontrol")
                .args([
                    "update",
                    &format!("NodeName={node}"),
                    "State=DRAIN",
                    "Reason=admin: maintenance",
                ])
                .status()
                .unwrap();
            assert!(drained.success());
        }
    });
    let context = || finished.context();
    assert_eq!(finished.multiphase()["state"], "succeeded", "{}", context());
    let attempts = finished.run_of(0)["attempts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(attempts.len(), 2, "{}", context());
    assert_eq!(
        strings(&attempts[0]["nodes"]),
        ["n1", "n2"],
        "{}",
        context()
    );
    // Restarted without n2 on the one node left, as its minimum allows.
    assert_eq!(strings(&attempts[1]["nodes"]), ["n1"], "{}", context());
    assert_eq!(
        finished.run_of(0)["last_checkpoint_iteration"],
        30,
        "{}",
        context()
    );
}

//! The Slurm backend against a real single-host Slurm (Debian's slurm-wlm, started by
//! tests/slurm/cluster.sh), end to end: the real `runguard run --auto` binary watches jobs that run
//! tests/slurm/train.sh — Megatron-style logs, checkpoint files, resume from the newest — and fail as
//! each case asks. Skipped with a message where Slurm is not installed; CI sets
//! RUNGUARD_REQUIRE_SLURM=1 so that a skip fails there instead.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::CliSandbox;
use crate::support::slurm::{
    AS_NOBODY, Cluster, TRAIN_SH, completed_workflow, job_logs, one_at_a_time, processes_with_env,
    status, strings,
};

fn slurm_available() -> bool {
    crate::support::slurm::available(&[])
}

/// A batch script running train.sh on `nodes` nodes, enrolled with `max_requeue_times`, with the
/// failure and run settings of `env` (`FAIL=nccl FAIL_AT=15 ...`).
fn job_script(nodes: u32, max_requeue_times: u32, env: &str) -> String {
    format!(
        "#!/bin/bash\n\
         #SBATCH --comment='{{\"APS\": {{\"auto_resume_mode\": \"requeue\", \"max_requeue_times\": {max_requeue_times}}}}}'\n\
         #SBATCH -N {nodes}\n\
         #SBATCH -o LOGDIR/%x_%j.log\n\
         export CKPT_DIR=LOGDIR/ckpt {env}\n\
         srun -l bash {TRAIN_SH}\n"
    )
}

/// How a case runs, besides its job script.
struct Case<'a> {
    script: String,
    /// The `[recovery]` whitelist, as TOML.
    whitelist: &'a str,
    /// Extra config sections or keys, appended after `[recovery]` (may open other sections).
    config: &'a str,
    /// Extra lines of the `[engine]` section.
    engine: &'a str,
    /// The engine and the job run as user nobody, without operator rights.
    as_nobody: bool,
    /// This node stops answering (its slurmd is stopped) once the run has saved its first checkpoint.
    node_dies: Option<&'a str>,
    /// The batch script's own arguments.
    args: &'a [&'a str],
}

impl<'a> Case<'a> {
    fn new(script: String) -> Self {
        Self {
            script,
            whitelist: r#"["requeue", "cancel"]"#,
            config: "",
            engine: "",
            as_nobody: false,
            node_dies: None,
            args: &[],
        }
    }
}

/// What a finished case left.
struct Finished {
    status: Value,
    /// The job's log (the last attempt's: Slurm starts the file again on a requeue).
    logs: String,
    checkpoints: Vec<String>,
}

/// Runs the headless engine against a fresh cluster with the case's job submitted, until the workflow
/// completes.
fn run_case(case: Case<'_>) -> Finished {
    let _one_at_a_time = one_at_a_time();
    // World-searchable and (for nobody's runs) world-writable: the job and the engine write here.
    let sandbox = CliSandbox::default();
    std::fs::set_permissions(sandbox.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let cluster = Cluster::start_with(
        &sandbox.path().join("slurm"),
        if case.node_dies.is_some() { 10 } else { 30 },
    );
    std::fs::create_dir(sandbox.path().join("ckpt")).unwrap();
    std::fs::set_permissions(
        sandbox.path().join("ckpt"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    sandbox.write_config(&format!(
        "[engine]\npoll_interval_secs = 0.5\n{}\n\n[backend]\nkind = \"slurm\"\n\n[recovery]\nwhitelist = {}\n{}\n",
        case.engine, case.whitelist, case.config
    ));
    let script = sandbox.path().join("train.sbatch");
    std::fs::write(
        &script,
        case.script
            .replace("LOGDIR", &sandbox.path().display().to_string()),
    )
    .unwrap();
    let as_user = |program: &str| {
        let mut command = if case.as_nobody {
            let mut command = cluster.command(AS_NOBODY[0]);
            command.args(&AS_NOBODY[1..]).arg(program);
            command
        } else {
            cluster.command(program)
        };
        command.current_dir(sandbox.path());
        command
    };
    let launcher: &[&str] = if case.as_nobody { &AS_NOBODY } else { &[] };
    let mut engine: Child = sandbox
        .command_via(launcher)
        .current_dir(sandbox.path())
        .env("SLURM_CONF", &cluster.conf)
        .env("PATH", &cluster.path)
        .args(["run", "--auto"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(sandbox.path().join("engine.err")).unwrap())
        .spawn()
        .unwrap();
    let submitted = as_user("sbatch")
        .args(["--parsable", "-J", "llama-test"])
        .arg(&script)
        .args(case.args)
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let start = Instant::now();
    let mut last = None;
    let mut node_stopped = false;
    let mut frozen: Vec<u32> = Vec::new();
    while start.elapsed() < Duration::from_secs(150) {
        if let Some(node) = case.node_dies
            && !node_stopped
            && sandbox.path().join("ckpt/iter_0000010").exists()
        {
            // The node's slurmd and the job's rank on it freeze, as on a node that hangs (the rank
            // told by its node and this test's submit directory: another test run's cluster may
            // have an n2 too).
            let slurmd = std::fs::read_to_string(cluster.dir.join(format!("slurmd-{node}.pid")))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            frozen.push(slurmd);
            frozen.extend(processes_with_env(&[
                &format!("SLURMD_NODENAME={node}"),
                &format!("SLURM_SUBMIT_DIR={}", sandbox.path().display()),
            ]));
            assert!(frozen.len() > 1, "no process of the job found on {node}");
            for pid in &frozen {
                let _ = Command::new("kill")
                    .args(["-STOP", &pid.to_string()])
                    .status();
            }
            node_stopped = true;
        }
        if let Some(status) = status(&sandbox, &cluster)
            && status["workflows"][0]["status"] == "completed"
        {
            last = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let _ = engine.kill();
    let _ = engine.wait();
    for pid in &frozen {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let logs = job_logs(sandbox.path());
    let mut checkpoints: Vec<String> = std::fs::read_dir(sandbox.path().join("ckpt"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("iter_"))
        .collect();
    checkpoints.sort();
    let status = last.unwrap_or_else(|| {
        panic!(
            "did not complete: {:#?}\n{}\nengine: {}",
            status(&sandbox, &cluster),
            logs,
            std::fs::read_to_string(sandbox.path().join("engine.err")).unwrap_or_default()
        )
    });
    Finished {
        status,
        logs,
        checkpoints,
    }
}

/// The run fails once at iteration 15 with NCCL errors that the rank on n2 reports.
fn nccl_on_n2() -> String {
    job_script(2, 3, "FAIL=nccl FAIL_AT=15 FAIL_NODE=n2")
}

/// Case 1: requeued without n2, the new attempt resumes from the checkpoint of iteration 10.
fn assert_requeued_without_n2_and_resumed(finished: &Finished) {
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    assert_eq!(attempts[0]["job_id"], attempts[1]["job_id"]);
    assert_eq!(workflow["attributions"][0]["category"], "nccl_timeout");
    assert_eq!(workflow["attributions"][0]["culprit"]["node"], "n2");
    assert!(strings(&attempts[0]["nodes"]).contains(&"n2".to_string()));
    assert!(strings(&attempts[1]["excluded_nodes"]).contains(&"n2".to_string()));
    assert!(!strings(&attempts[1]["nodes"]).contains(&"n2".to_string()));
    assert_eq!(workflow["requeues_used"], 1);
    assert_eq!(workflow["last_checkpoint_iteration"], 30, "{workflow:#}");
    assert!(
        finished
            .logs
            .contains("successfully loaded checkpoint from")
            && finished.logs.contains("at iteration 10"),
        "{}",
        finished.logs
    );
    assert!(
        !finished.logs.contains("iteration        1/"),
        "the new attempt started over: {}",
        finished.logs
    );
    assert_eq!(
        finished.checkpoints,
        ["iter_0000010", "iter_0000020", "iter_0000030"]
    );
}

#[test]
fn an_nccl_failure_on_n2_is_requeued_without_n2_and_resumes_from_its_checkpoint() {
    if !slurm_available() {
        return;
    }
    assert_requeued_without_n2_and_resumed(&run_case(Case::new(nccl_on_n2())));
}

#[test]
fn the_same_recovery_reading_scontrol_show_job_instead_of_squeue_json() {
    if !slurm_available() {
        return;
    }
    assert_requeued_without_n2_and_resumed(&run_case(Case {
        config: "\n[slurm]\nlisting = \"scontrol\"\n",
        ..Case::new(nccl_on_n2())
    }));
}

#[test]
fn a_node_that_stops_answering_is_excluded_and_the_run_goes_on_without_it() {
    if !slurm_available() {
        return;
    }
    // A long run, so that it is still going when n2 stops answering after the first checkpoint.
    let finished = run_case(Case {
        node_dies: Some("n2"),
        ..Case::new(job_script(2, 3, "ITERS=40 STEP_SECS=0.5"))
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    // Requeued under its id (by runguard, or by Slurm once it declared n2 down), or, when the ended
    // job was still kept on the frozen n2, left completing there while the run went on as a new job.
    let first = attempts[0]["state"].as_str().unwrap_or_default();
    let moved = attempts[0]["job_id"] != attempts[1]["job_id"];
    assert!(
        first == "requeued" || (moved && ["completing", "cancelled", "node_fail"].contains(&first)),
        "{workflow:#}"
    );
    assert_eq!(workflow["attributions"][0]["category"], "node_failure");
    assert_eq!(
        workflow["attributions"][0]["culprit"]["node"], "n2",
        "{:#}",
        workflow["attributions"][0]
    );
    assert!(strings(&attempts[1]["excluded_nodes"]).contains(&"n2".to_string()));
    assert!(!strings(&attempts[1]["nodes"]).contains(&"n2".to_string()));
    assert!(
        finished
            .logs
            .contains("successfully loaded checkpoint from"),
        "{}",
        finished.logs
    );
}

#[test]
fn in_resubmit_mode_the_batch_script_is_submitted_again_without_n2() {
    if !slurm_available() {
        return;
    }
    let finished = run_case(Case {
        whitelist: r#"["resubmit", "cancel"]"#,
        config: "mode = \"resubmit\"",
        ..Case::new(nccl_on_n2())
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    assert_ne!(attempts[0]["job_id"], attempts[1]["job_id"], "a new job id");
    assert_eq!(attempts[1]["index"], 1);
    assert!(strings(&attempts[1]["excluded_nodes"]).contains(&"n2".to_string()));
    assert!(!strings(&attempts[1]["nodes"]).contains(&"n2".to_string()));
    assert_eq!(workflow["last_checkpoint_iteration"], 30, "{workflow:#}");
    assert!(
        finished.logs.contains("at iteration 10"),
        "the resubmitted job resumes: {}",
        finished.logs
    );
}

#[test]
fn a_dataloader_killed_for_memory_is_submitted_again_with_fewer_workers_on_the_same_nodes() {
    if !slurm_available() || !crate::support::slurm::torch_available() {
        return;
    }
    // Real PyTorch: more than 4 workers die of SIGKILL and PyTorch reports the worker killed.
    let train =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm/dataloader_train.py");
    let script = format!(
        "#!/bin/bash\n\
         #SBATCH --comment='{{\"APS\": {{\"auto_resume_mode\": \"requeue\", \"max_requeue_times\": 3}}}}'\n\
         #SBATCH -o LOGDIR/%x_%j.log\n\
         export OMP_NUM_THREADS=1\n\
         /usr/bin/python3 {} \"$@\"\n",
        train.display()
    );
    let finished = run_case(Case {
        whitelist: r#"["requeue", "cancel", "recreate"]"#,
        args: &["--num-workers", "8", "--steps", "12"],
        ..Case::new(script)
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(
        workflow["succeeded"], true,
        "{workflow:#}\n{}",
        finished.logs
    );
    assert_eq!(workflow["attributions"][0]["category"], "dataloader_oom");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    assert_ne!(attempts[0]["job_id"], attempts[1]["job_id"], "a new job");
    // Memory is not the node's fault: nothing is excluded.
    assert!(
        strings(&attempts[1]["excluded_nodes"]).is_empty(),
        "{workflow:#}"
    );
    let recreate = workflow["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|action| action["kind"] == "recreate")
        .unwrap_or_else(|| panic!("no recreate: {workflow:#}"));
    let detail = recreate["result"].as_str().unwrap_or_default();
    // 22.05 lists the script with its arguments, later releases the script alone.
    let diff = if crate::support::slurm::release() == "22.05" {
        "argument --num-workers 8 → --num-workers 4"
    } else {
        "environment + DATALOADER_NUM_WORKERS=4"
    };
    assert!(detail.contains(diff), "the diff is shown: {detail}");
    assert!(
        finished.logs.contains("training with 4 DataLoader workers")
            && finished.logs.contains("training done"),
        "{}",
        finished.logs
    );
}

#[test]
fn with_over_eviction_an_ib_error_every_node_reports_restarts_the_run_on_other_nodes() {
    if !slurm_available() {
        return;
    }
    let finished = run_case(Case {
        config: "exclude_suspects = true",
        ..Case::new(job_script(2, 3, "FAIL=nccl FAIL_AT=15 FAIL_NODE=every"))
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let culprit = &workflow["attributions"][0]["culprit"];
    assert_eq!(
        culprit["node"],
        Value::Null,
        "nothing singles out one: {:#}",
        workflow["attributions"][0]
    );
    let attempts = workflow["attempts"].as_array().unwrap();
    let first = strings(&attempts[0]["nodes"]);
    let mut suspects = strings(&culprit["suspects"]);
    suspects.sort();
    assert_eq!(suspects, first, "{culprit}");
    let excluded = strings(&attempts[1]["excluded_nodes"]);
    assert!(
        first.iter().all(|node| excluded.contains(node)),
        "both excluded: {workflow:#}"
    );
    assert!(
        strings(&attempts[1]["nodes"])
            .iter()
            .all(|node| !first.contains(node)),
        "{workflow:#}"
    );
    assert!(
        workflow["journal"]
            .as_array()
            .unwrap()
            .iter()
            .any(|entry| entry.to_string().contains("over-eviction")),
        "{workflow:#}"
    );
}

#[test]
fn every_job_of_a_watched_partition_is_enrolled_without_a_comment() {
    if !slurm_available() {
        return;
    }
    let script = nccl_on_n2()
        .lines()
        .filter(|line| !line.contains("--comment"))
        .collect::<Vec<_>>()
        .join("\n");
    let finished = run_case(Case {
        config: "\n[slurm]\npartitions = [\"gpu\"]\n",
        ..Case::new(script)
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    assert_eq!(workflow["requeues_used"], 1);
    // Without max_requeue_times of its own, the system's limit applies.
    assert_eq!(workflow["requeue_limit"], 24, "{workflow:#}");
}

#[test]
fn a_python_exception_on_slurm_is_not_requeued() {
    if !slurm_available() {
        return;
    }
    let finished = run_case(Case::new(job_script(1, 3, "FAIL=exception FAIL_AT=15")));
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], false, "{workflow:#}");
    assert_eq!(workflow["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(workflow["requeues_used"], 0);
    assert_eq!(workflow["attributions"][0]["category"], "app_exception");
    let reason = workflow["status_reason"].as_str().unwrap();
    assert!(reason.contains("not recoverable"), "{reason}");
    assert!(
        workflow["attributions"][0]["explanation"]
            .as_str()
            .is_some_and(|text| !text.is_empty())
    );
}

#[test]
fn three_failures_without_a_new_checkpoint_stop_as_a_crash_loop() {
    if !slurm_available() {
        return;
    }
    // Fails at iteration 5 on every attempt, before its first checkpoint (10).
    let finished = run_case(Case::new(job_script(
        1,
        10,
        "FAIL=nccl FAIL_AT=5 FAIL_ON=always",
    )));
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], false, "{workflow:#}");
    assert_eq!(
        workflow["attempts"].as_array().unwrap().len(),
        3,
        "{workflow:#}"
    );
    assert_eq!(workflow["requeues_used"], 2);
    let reason = workflow["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("crash loop: 3 consecutive failed attempts"),
        "{reason}"
    );
    assert!(finished.checkpoints.is_empty());
}

#[test]
fn an_ib_error_on_n2_that_leaves_the_run_hung_is_requeued_without_n2_before_any_silence_bound() {
    if !slurm_available() {
        return;
    }
    // Silence alone would take ten minutes here: only the fatal line can end the hung run in time.
    let finished = run_case(Case {
        engine: "heartbeat_timeout_secs = 600",
        config: "[detect]\nstep_timeout_floor_secs = 600\n",
        ..Case::new(job_script(2, 3, "FAIL=ib_hang FAIL_AT=15 FAIL_NODE=n2"))
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(
        workflow["succeeded"], true,
        "{workflow:#}\n{}",
        finished.logs
    );
    assert_eq!(workflow["anomalies"][0]["kind"], "hang");
    let summary = workflow["anomalies"][0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("printed a fatal") && summary.contains("(status 12) on n2"),
        "{summary}"
    );
    assert_eq!(workflow["attributions"][0]["category"], "ib_link");
    assert_eq!(workflow["attributions"][0]["culprit"]["node"], "n2");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    assert!(strings(&attempts[1]["excluded_nodes"]).contains(&"n2".to_string()));
    assert!(
        finished.logs.contains("at iteration 10"),
        "{}",
        finished.logs
    );
}

#[test]
fn a_silent_slurm_job_is_detected_as_hung_ended_and_requeued() {
    if !slurm_available() {
        return;
    }
    let finished = run_case(Case {
        engine: "heartbeat_timeout_secs = 10",
        ..Case::new(job_script(1, 3, "FAIL=hang FAIL_AT=15"))
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    assert_eq!(workflow["anomalies"][0]["kind"], "hang");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}\n{}", finished.logs);
    assert_eq!(attempts[0]["state"], "requeued");
    assert!(
        finished.logs.contains("at iteration 10"),
        "{}",
        finished.logs
    );
    let done = workflow["journal"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["decision"].as_str())
        .any(|decision| decision.contains("ended the running job"));
    assert!(done, "{workflow:#}");
}

#[test]
fn max_requeue_times_from_the_comment_stops_the_recovery() {
    if !slurm_available() {
        return;
    }
    // Fails at iteration 15 every time, after a new checkpoint: only the requeue limit stops it.
    let finished = run_case(Case::new(job_script(
        1,
        1,
        "FAIL=nccl FAIL_AT=15 FAIL_ON=always",
    )));
    let workflow = &finished.status["workflows"][0];
    assert_eq!(
        workflow["attempts"].as_array().unwrap().len(),
        2,
        "{workflow:#}"
    );
    assert_eq!(workflow["requeues_used"], 1);
    let reason = workflow["status_reason"].as_str().unwrap();
    assert!(reason.contains("requeue limit reached: 1 of 1"), "{reason}");
}

#[test]
fn as_a_user_without_operator_rights_the_drain_is_recorded_as_would_have_done() {
    if !slurm_available() {
        return;
    }
    let finished = run_case(Case {
        whitelist: r#"["requeue", "cancel", "drain_node"]"#,
        as_nobody: true,
        ..Case::new(nccl_on_n2())
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let actions = workflow["actions"].as_array().unwrap();
    let drain = actions
        .iter()
        .find(|action| action["kind"] == "drain_node")
        .unwrap_or_else(|| panic!("{workflow:#}"));
    assert_eq!(drain["state"], "failed", "{drain:#}");
    let result = drain["result"].as_str().unwrap();
    assert!(
        result.starts_with("would have done `scontrol update NodeName=n2 State=DRAIN")
            && result.contains("Invalid user id"),
        "{result}"
    );
    let requeue = actions
        .iter()
        .find(|action| action["kind"] == "requeue")
        .unwrap();
    assert_eq!(requeue["state"], "done", "{requeue:#}");
}

#[test]
fn a_job_named_with_runguard_watch_is_recovered_without_an_enrolment_comment() {
    if !slurm_available() {
        return;
    }
    let _one_at_a_time = one_at_a_time();
    let sandbox =
        CliSandbox::new("[engine]\npoll_interval_secs = 0.5\n\n[backend]\nkind = \"slurm\"\n");
    let cluster = Cluster::start(&sandbox.path().join("slurm"));
    std::fs::create_dir(sandbox.path().join("ckpt")).unwrap();
    let runguard = |args: &[&str]| {
        let mut command = sandbox.command();
        command
            .args(args)
            .env("SLURM_CONF", &cluster.conf)
            .env("PATH", &cluster.path);
        command
    };
    let mut engine = runguard(&["run", "--auto"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // No APS comment: not enrolled until watched. Held, so that it cannot fail before it is watched.
    let script = job_script(2, 3, "FAIL=nccl FAIL_AT=15 FAIL_NODE=n2")
        .lines()
        .filter(|line| !line.contains("--comment"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("LOGDIR", &sandbox.path().display().to_string());
    std::fs::write(sandbox.path().join("train.sbatch"), script).unwrap();
    let submitted = cluster
        .command("sbatch")
        .args(["--parsable", "--hold", "-J", "unenrolled"])
        .arg(sandbox.path().join("train.sbatch"))
        .output()
        .unwrap();
    let job_id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_secs(2));
    let before = status(&sandbox, &cluster).unwrap_or_default();
    assert!(
        before["workflows"]
            .as_array()
            .is_none_or(|workflows| workflows.is_empty()),
        "{before:#}"
    );
    let watch = runguard(&["watch", &job_id]).output().unwrap();
    assert!(watch.status.success(), "{watch:?}");
    assert_eq!(
        String::from_utf8_lossy(&watch.stdout).trim(),
        format!("watching slurm job {job_id}")
    );
    cluster
        .command("scontrol")
        .args(["release", &job_id])
        .status()
        .unwrap();
    let workflow = completed_workflow(&sandbox, &cluster, Duration::from_secs(90));
    let _ = engine.kill();
    let _ = engine.wait();
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    assert_eq!(workflow["attempts"][0]["job_id"], job_id.as_str());
    assert_eq!(workflow["requeues_used"], 1);
    let listed = runguard(&["watch", "--list"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), job_id);
}

#[test]
fn an_ended_job_s_attempts_are_read_from_the_controller_s_jobcomp_file() {
    if !slurm_available() {
        return;
    }
    use runguard_engine::backend::slurm::api::SlurmApi;
    use runguard_engine::backend::slurm::cli::{Listing, SlurmCli};
    use runguard_engine::model::JobState;

    let _one_at_a_time = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(&dir.path().join("slurm"));
    let submitted = cluster
        .command("sbatch")
        .args([
            "--parsable",
            "-N",
            "2",
            "-o",
            "/dev/null",
            "--wrap",
            "exit 3",
        ])
        .output()
        .unwrap();
    let job_id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();
    let start = Instant::now();
    let jobcomp = cluster.dir.join("log/jobcomp.txt");
    while start.elapsed() < Duration::from_secs(30)
        && !std::fs::read_to_string(&jobcomp).is_ok_and(|text| text.contains("FAILED"))
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    // The tools find the file through `scontrol show config`, as on a cluster that was not told.
    let cli = SlurmCli::new(Duration::from_secs(10), Listing::Auto)
        .with_slurm_conf(Some(cluster.conf.clone()))
        .with_bin_dir(cluster.bin_dir.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let history = runtime
        .block_on(cli.history(&job_id))
        .unwrap()
        .expect("a history from the jobcomp file");
    assert_eq!(history.len(), 1, "{history:#?}");
    let attempt = &history[0];
    assert_eq!(attempt.state, JobState::Failed);
    assert_eq!(attempt.exit_code, Some(3));
    assert_eq!(attempt.nodes, ["n1", "n2"]);
}

//! The node ledger against a real Slurm: a GPU lost on n2 under a running job moves the run off n2 at
//! once, a job submitted afterwards never runs there although runguard may not drain it, and n2 comes
//! back once its health check passes, with an administrator's drain of another node left alone.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::slurm::{
    Cluster, HeadlessEngine, TRAIN_SH, job_logs, one_at_a_time, status, strings,
};
use crate::support::{CliSandbox, stdout};

fn slurm_available() -> bool {
    crate::support::slurm::available(&[])
}

/// An enrolled batch job of `nodes` nodes running train.sh with `env`, checkpointing into `ckpt`.
fn script(sandbox: &CliSandbox, nodes: u32, ckpt: &str, env: &str, extra: &str) -> String {
    let dir = sandbox.path().display();
    format!(
        "#!/bin/bash\n\
         #SBATCH --comment='{{\"APS\": {{\"auto_resume_mode\": \"requeue\", \"max_requeue_times\": 3}}}}'\n\
         #SBATCH -N {nodes}\n\
         #SBATCH -o {dir}/%x_%j.log\n\
         {extra}\
         export CKPT_DIR={dir}/{ckpt} {env}\n\
         srun -l bash {TRAIN_SH}\n"
    )
}

fn squeue_field(cluster: &Cluster, job: &str, format: &str) -> String {
    let output = cluster
        .command("squeue")
        .args(["--noheader", "--jobs", job, "--format", format])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// `scontrol show job` of one job as one line.
fn show_job(cluster: &Cluster, job: &str) -> String {
    let output = cluster
        .command("scontrol")
        .args(["show", "job", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).replace('\n', " ")
}

fn nodes_json(sandbox: &CliSandbox) -> Value {
    serde_json::from_str(&stdout(&sandbox.run(&["nodes", "--json"]))).unwrap_or(Value::Null)
}

fn node_state(sandbox: &CliSandbox, node: &str) -> Option<String> {
    nodes_json(sandbox)
        .as_array()?
        .iter()
        .find(|entry| entry["node"] == node)
        .and_then(|entry| entry["state"].as_str().map(str::to_string))
}

/// Waits up to `within` for `done`, then says what it saw.
fn wait(
    within: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let start = Instant::now();
    while start.elapsed() < within {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{what} did not happen within {within:?}\n{}", context());
}

#[test]
fn a_gpu_lost_on_n2_keeps_every_job_off_n2_until_its_health_check_passes() {
    if !slurm_available() {
        return;
    }
    let _one_at_a_time = one_at_a_time();
    let sandbox = CliSandbox::default();
    std::fs::set_permissions(sandbox.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let cluster = Cluster::start(&sandbox.path().join("slurm"));
    for dir in ["ckpt-a", "ckpt-b", "kern", "healthy"] {
        std::fs::create_dir(sandbox.path().join(dir)).unwrap();
    }
    for node in ["n1", "n2", "n3", "n4"] {
        std::fs::write(sandbox.path().join(format!("kern/{node}.log")), "").unwrap();
    }
    let dir = sandbox.path().display().to_string();
    sandbox.write_config(&format!(
        "[engine]\npoll_interval_secs = 0.5\n\n[backend]\nkind = \"slurm\"\n\n\
         [recovery]\nwhitelist = [\"requeue\", \"cancel\", \"update_exclusions\"]\n\n\
         [telemetry]\nnode_log_pattern = \"{dir}/kern/{{node}}.log\"\n\n\
         [ledger]\nhealth_check = [\"test\", \"-e\", \"{dir}/healthy/{{node}}\"]\n\
         first_check_secs = 2\nmax_check_interval_secs = 4\n"
    ));
    // An administrator's drain, which runguard must leave as it is.
    let drained = cluster
        .command("scontrol")
        .args([
            "update",
            "NodeName=n4",
            "State=DRAIN",
            "Reason=admin: bad fan",
        ])
        .status()
        .unwrap();
    assert!(drained.success());
    let _engine = HeadlessEngine::start(&sandbox, &cluster, &[]);
    let submit = |name: &str, text: String| {
        let path = sandbox.path().join(format!("{name}.sbatch"));
        std::fs::write(&path, text).unwrap();
        let output = cluster
            .command("sbatch")
            .args(["--parsable", "-J", name])
            .arg(&path)
            .current_dir(sandbox.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    let job_a = submit(
        "job-a",
        script(&sandbox, 2, "ckpt-a", "ITERS=60 STEP_SECS=0.2", ""),
    );
    let context = || {
        format!(
            "{:#}\n{}\nengine: {}",
            status(&sandbox, &cluster).unwrap_or_default(),
            job_logs(sandbox.path()),
            std::fs::read_to_string(sandbox.path().join("engine.err")).unwrap_or_default()
        )
    };
    wait(
        Duration::from_secs(60),
        "job A's first checkpoint",
        || sandbox.path().join("ckpt-a/iter_0000010").exists(),
        context,
    );
    assert_eq!(squeue_field(&cluster, &job_a, "%N"), "n[1-2]");

    // n2 loses a GPU while job A runs on it.
    let stamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
    std::fs::write(
        sandbox.path().join("kern/n2.log"),
        format!("{stamp} n2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n"),
    )
    .unwrap();
    wait(
        Duration::from_secs(60),
        "n2's quarantine",
        || node_state(&sandbox, "n2").as_deref() == Some("quarantined"),
        context,
    );
    // The run goes on off n2: requeued under its id, or, when Slurm keeps the ended job on n2 until it
    // declares the node down, as the job runguard resubmitted (the workflow's newest attempt either way).
    wait(
        Duration::from_secs(60),
        "job A running again off n2",
        || {
            status(&sandbox, &cluster).is_some_and(|status| {
                status["workflows"].as_array().is_some_and(|workflows| {
                    workflows.iter().any(|w| {
                        let attempts = w["attempts"].as_array().cloned().unwrap_or_default();
                        let newest = attempts.last().cloned().unwrap_or_default();
                        let nodes = strings(&newest["nodes"]);
                        w["attempts"][0]["job_id"] == job_a.as_str()
                            && attempts.len() >= 2
                            && matches!(newest["state"].as_str(), Some("running" | "completed"))
                            && !nodes.is_empty()
                            && !nodes.contains(&"n2".to_string())
                    })
                })
            })
        },
        context,
    );
    // Job B, enrolled and submitted afterwards, waits for nodes: only n2 is free (n4 is drained), and
    // once A ends, without runguard, the scheduler would give it n1 and n2.
    let job_b = submit(
        "job-b",
        script(&sandbox, 2, "ckpt-b", "ITERS=10 STEP_SECS=0.1", ""),
    );
    wait(
        Duration::from_secs(60),
        "job B's exclusion of n2",
        || show_job(&cluster, &job_b).contains("ExcNodeList=n2"),
        || show_job(&cluster, &job_b),
    );
    wait(
        Duration::from_secs(120),
        "job A completing off n2",
        || {
            status(&sandbox, &cluster).is_some_and(|status| {
                status["workflows"].as_array().is_some_and(|workflows| {
                    workflows.iter().any(|w| {
                        w["attempts"][0]["job_id"] == job_a.as_str() && w["succeeded"] == true
                    })
                })
            })
        },
        context,
    );
    wait(
        Duration::from_secs(120),
        "job B completing",
        || {
            status(&sandbox, &cluster).is_some_and(|status| {
                status["workflows"].as_array().is_some_and(|workflows| {
                    workflows.iter().any(|w| {
                        w["attempts"][0]["job_id"] == job_b.as_str() && w["succeeded"] == true
                    })
                })
            })
        },
        context,
    );
    let status = status(&sandbox, &cluster).unwrap();
    let workflows = status["workflows"].as_array().unwrap();
    let workflow_of = |job: &str| {
        workflows
            .iter()
            .find(|w| w["attempts"][0]["job_id"] == job)
            .unwrap()
    };
    let a = workflow_of(&job_a);
    assert_eq!(a["attributions"][0]["category"], "xid_79", "{a:#}");
    assert_eq!(a["attributions"][0]["culprit"]["node"], "n2", "{a:#}");
    let a_attempts = a["attempts"].as_array().unwrap();
    assert_eq!(a_attempts.len(), 2, "{a:#}");
    assert!(strings(&a_attempts[0]["nodes"]).contains(&"n2".to_string()));
    assert!(
        !strings(&a_attempts[1]["nodes"]).contains(&"n2".to_string()),
        "{a:#}"
    );
    let b = workflow_of(&job_b);
    for attempt in b["attempts"].as_array().unwrap() {
        assert!(
            !strings(&attempt["nodes"]).contains(&"n2".to_string()),
            "{b:#}"
        );
    }
    // Drain was not whitelisted: proposed, never run.
    assert!(
        !show_node(&cluster, "n2").contains("DRAIN"),
        "{}",
        show_node(&cluster, "n2")
    );
    assert_eq!(node_state(&sandbox, "n2").as_deref(), Some("quarantined"));

    // The health check passes: n2 is back, on probation; the administrator's drain of n4 stays.
    std::fs::write(sandbox.path().join("healthy/n2"), "").unwrap();
    wait(
        Duration::from_secs(30),
        "n2's return",
        || node_state(&sandbox, "n2").as_deref() == Some("probation"),
        || format!("{:#}", nodes_json(&sandbox)),
    );
    let n4 = show_node(&cluster, "n4");
    assert!(
        n4.contains("DRAIN") && n4.contains("admin: bad fan"),
        "{n4}"
    );
}

fn show_node(cluster: &Cluster, node: &str) -> String {
    let output = cluster
        .command("scontrol")
        .args(["show", "node", node])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).replace('\n', " ")
}

//! One log per attempt: a job requeued under its id writes every run to one output file, and each
//! line belongs to exactly one attempt (appended, truncated, or a file of each attempt's own).

use std::path::{Path, PathBuf};

use runguard_engine::model::JobState;

use crate::support::{EngineRig, append, job, queued_again};

fn iterations(from: u64, to: u64) -> String {
    (from..=to)
        .map(|i| format!("iteration {i}/100 | loss 1.0\n"))
        .collect()
}

/// Job 4201 running on n1 and n2, its log `train-4201.out` holding `text`: the log's path.
fn running_4201(rig: &EngineRig, text: &str) -> PathBuf {
    let log = rig.path().join("train-4201.out");
    append(&log, text);
    rig.backend
        .add([job("4201").running_on(["n1", "n2"]).log(&log)]);
    log
}

/// Job 4201 ran to iteration 25 in `log`, then was requeued by the scheduler and runs again;
/// `second_run` writes the new run's lines. Returns the attempts' last iterations and evidence.
async fn requeued(second_run: impl FnOnce(&Path)) -> (Vec<Option<u64>>, Vec<Vec<String>>) {
    let rig = EngineRig::default();
    let log = running_4201(&rig, &iterations(1, 20));
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    append(&log, &iterations(21, 25));
    append(
        &log,
        "RuntimeError: NCCL communicator was aborted on rank 1\n",
    );
    // Requeued by the scheduler (a node failure): pending under the same id, one restart more.
    rig.backend.update("4201", |job| queued_again(job, 1, None));
    rig.step(&mut engine, 5).await;
    second_run(&log);
    rig.backend.update("4201", |job| {
        job.state = JobState::Running;
        job.state_raw = "RUNNING".into();
        job.nodes = vec!["n3".into(), "n4".into()];
    });
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    let db = rig.store();
    let db = db.db();
    let attempts = db.attempts(1).unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    let evidence = attempts
        .iter()
        .map(|a| {
            db.evidence_lines(1, a.index)
                .unwrap()
                .into_iter()
                .map(|line| line.text)
                .collect()
        })
        .collect();
    (
        attempts.iter().map(|a| a.last_iteration).collect(),
        evidence,
    )
}

#[tokio::test]
async fn appended_the_new_attempt_reads_only_what_follows_the_old_one() {
    let (last, evidence) = requeued(|log| {
        append(log, "resuming from iteration 20\n");
        append(log, &iterations(21, 23));
        append(
            log,
            "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        );
    })
    .await;
    assert_eq!(last, [Some(25), Some(23)]);
    assert!(
        evidence[0].iter().all(|l| !l.contains("illegal memory")),
        "{evidence:?}"
    );
    assert!(
        evidence[1].iter().all(|l| !l.contains("NCCL communicator")),
        "{evidence:?}"
    );
    assert!(
        evidence[1].iter().any(|l| l.contains("illegal memory")),
        "{evidence:?}"
    );
}

#[tokio::test]
async fn truncated_the_old_attempt_keeps_what_it_read_and_the_new_one_reads_from_the_start() {
    let (last, evidence) = requeued(|log| {
        // Slurm's default open mode: the file is truncated when the new run starts, and the new run
        // writes more than the old offset before anyone looks.
        let mut text = String::from("resuming from iteration 20\n");
        text.push_str(&iterations(21, 60));
        std::fs::write(log, text).unwrap();
    })
    .await;
    assert_eq!(last, [Some(25), Some(60)]);
    assert!(
        evidence[0].iter().any(|l| l.contains("NCCL communicator")),
        "{evidence:?}"
    );
    assert!(
        evidence[1].iter().all(|l| !l.contains("NCCL communicator")),
        "{evidence:?}"
    );
}

#[tokio::test]
async fn with_a_file_per_attempt_each_attempt_reads_its_own() {
    // AJR's layout: {name}_{jobid}_{datetime}.log in a directory of the user's, one file a run.
    let mut rig = EngineRig::default();
    let dir = rig.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    rig.config.telemetry.log_dir = Some(dir.clone());
    let stdout = rig.path().join("slurm-4201.out");
    append(&stdout, "srun: job step started\n");
    let first = dir.join("train-4201_4201_2026-11-23T10-00-00.log");
    append(&first, &iterations(1, 25));
    rig.backend
        .add([job("4201").running_on(["n1", "n2"]).log(&stdout)]);
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    rig.backend.update("4201", |job| queued_again(job, 1, None));
    rig.step(&mut engine, 5).await;
    let second = dir.join("train-4201_4201_2026-11-23T10-15-00.log");
    append(&second, &iterations(21, 30));
    rig.backend.update("4201", |job| {
        job.state = JobState::Running;
        job.state_raw = "RUNNING".into();
        job.nodes = vec!["n3".into(), "n4".into()];
        job.start_time = Some(crate::support::start_time() + chrono::TimeDelta::minutes(15));
    });
    for _ in 0..2 {
        rig.step(&mut engine, 5).await;
    }
    let attempts = rig.store().db().attempts(1).unwrap();
    assert_eq!(attempts[0].log_path.as_deref(), Some(first.as_path()));
    assert_eq!(attempts[1].log_path.as_deref(), Some(second.as_path()));
    assert_eq!(attempts[0].last_iteration, Some(25));
    assert_eq!(attempts[1].last_iteration, Some(30));
}

#[tokio::test]
async fn a_message_a_terminal_wrapped_is_read_whole_across_wake_ups() {
    // A log captured from a terminal 64 columns wide: each line cut at the width, its rest on the
    // next line; the halves of the error say nothing a signature knows.
    let at_64_columns = |text: &str| -> Vec<String> {
        (text.as_bytes().chunks(64))
            .map(|part| format!("{}\n", String::from_utf8_lossy(part)))
            .collect()
    };
    let progress = at_64_columns(
        "iteration 10 | consumed samples: 640 | elapsed time per iteration (ms): 512.3 | lm loss 2.5",
    );
    let mut lines = [progress.clone(), progress].concat();
    lines.extend(at_64_columns(
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.14.3",
    ));
    let at_once = attributed_when_written_in(&[&lines.concat()]).await;
    assert_eq!(at_once, "nccl_error");
    // The first wake-up's lines show the width; the error's other lines come one a wake-up.
    let first = lines[..5].concat();
    let pieces: Vec<&str> = std::iter::once(first.as_str())
        .chain(lines[5..].iter().map(String::as_str))
        .collect();
    assert_eq!(attributed_when_written_in(&pieces).await, at_once);
}

/// The category the engine attributes job 4201's failure to, its log written as `pieces`, one wake-up
/// after each.
async fn attributed_when_written_in(pieces: &[&str]) -> String {
    let rig = EngineRig::default();
    let log = running_4201(&rig, &iterations(1, 10));
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    for piece in pieces {
        append(&log, piece);
        rig.step(&mut engine, 1).await;
    }
    rig.backend.fail("4201");
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    let store = rig.store();
    let attributions = store.db().attributions(1).unwrap();
    let attribution = attributions.last().expect("the failure is attributed");
    attribution.category.clone()
}

#[tokio::test]
async fn a_traceback_written_across_wake_ups_is_read_as_one() {
    // An out-of-memory error in the backward pass: its frames say so (activations, not the model).
    let lines = [
        "Traceback (most recent call last):\n",
        "  File \"main.py\", line 357, in train\n",
        "    loss.backward()\n",
        "  File \"/opt/py/site-packages/torch/_tensor.py\", line 521, in backward\n",
        "    torch.autograd.backward(\n",
        "  File \"/opt/py/site-packages/torch/autograd/__init__.py\", line 289, in backward\n",
        "    _engine_run_backward(\n",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.\n",
    ];
    let at_once = attributed_when_written_in(&[&lines.concat()]).await;
    assert_eq!(at_once, "activation_oom");
    assert_eq!(attributed_when_written_in(&lines).await, at_once);
    // A traceback whose header was never written (the log began inside it): its frames before the
    // exception line are looked back at across the wake-ups too.
    assert_eq!(attributed_when_written_in(&lines[1..]).await, at_once);
}

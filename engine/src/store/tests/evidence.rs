//! Checkpoints, throughput, anomalies, attributions, tracebacks, the journal and warnings.

use super::fixtures::*;
use crate::model::{
    ActionState, Anomaly, AnomalyKind, Attribution, Checkpoint, JournalEntry, ThroughputSample,
};
use crate::store::{CheckpointCount, WorkflowSummary};

#[test]
fn progress_reads_back_and_sums_up_per_workflow() {
    let (mut store, id) = store_with_a_workflow();
    let checkpoint = |attempt_index, iteration, secs| Checkpoint {
        workflow_id: id,
        attempt_index,
        iteration,
        time: at(secs),
        path: format!("/ckpt/iter_{iteration}"),
    };
    let sample = |iteration, tflops_per_gpu, rank: Option<u32>| ThroughputSample {
        workflow_id: id,
        attempt_index: 0,
        time: at(iteration as i64),
        iteration,
        tflops_per_gpu,
        rank,
        node: rank.map(|rank| format!("node-{rank:02}")),
    };
    let checkpoints = vec![
        checkpoint(0, 100, 60),
        checkpoint(0, 200, 70),
        checkpoint(1, 300, 90),
    ];
    let samples: Vec<_> = (1..=5)
        .map(|n| sample(n * 10, 100.0 + n as f64, (n % 2 == 0).then_some(n as u32)))
        .collect();
    store
        .write(|db| {
            for checkpoint in &checkpoints {
                db.insert_checkpoint(checkpoint)?;
            }
            for sample in &samples {
                db.insert_throughput(sample)?;
            }
            db.insert_action(&action(id, ActionState::Proposed, 41))?;
            db.insert_anomaly(&anomaly(id, AnomalyKind::Hang, 80))?;
            Ok(())
        })
        .unwrap();
    assert_eq!(store.db().checkpoints(id).unwrap(), checkpoints);
    assert_eq!(
        store.db().checkpoint_counts().unwrap(),
        vec![
            CheckpointCount {
                workflow_id: id,
                attempt_index: 0,
                count: 2,
                last: Some(at(70)),
            },
            CheckpointCount {
                workflow_id: id,
                attempt_index: 1,
                count: 1,
                last: Some(at(90)),
            },
        ]
    );
    assert_eq!(
        store.db().workflow_summary(id).unwrap(),
        WorkflowSummary {
            checkpoints: 3,
            last_checkpoint_iteration: Some(300),
            anomalies: 1,
            pending_approvals: 1,
        }
    );
    assert_eq!(
        store.db().workflow_summary(id + 1).unwrap(),
        WorkflowSummary::default()
    );
    assert_eq!(store.db().throughput(id).unwrap(), samples);
    assert_eq!(
        store.db().throughput_window(id, 0, 2, 2).unwrap(),
        (samples[..2].to_vec(), samples[3..].to_vec())
    );
    assert_eq!(
        store.db().throughput_window(id, 1, 2, 2).unwrap(),
        (Vec::new(), Vec::new())
    );
}

#[test]
fn anomalies_and_attributions_read_back_per_workflow_and_all_at_once() {
    let (mut store, id) = store_with_a_workflow();
    let (hang, crash, early, late) = store
        .write(|db| {
            Ok((
                db.insert_anomaly(&anomaly(id, AnomalyKind::Hang, 80))?,
                db.insert_anomaly(&anomaly(id, AnomalyKind::Crash, 85))?,
                db.insert_attribution(&attribution(id, 86))?,
                db.insert_attribution(&attribution(id, 96))?,
            ))
        })
        .unwrap();
    let anomalies = vec![
        Anomaly {
            id: hang,
            ..anomaly(id, AnomalyKind::Hang, 80)
        },
        Anomaly {
            id: crash,
            ..anomaly(id, AnomalyKind::Crash, 85)
        },
    ];
    assert_eq!(store.db().anomalies(id).unwrap(), anomalies);
    assert_eq!(store.db().all_anomalies().unwrap(), anomalies);
    assert!(store.db().anomalies(id + 1).unwrap().is_empty());
    assert!(store.db().anomaly_raised(id, 1, AnomalyKind::Hang).unwrap());
    assert!(!store.db().anomaly_raised(id, 0, AnomalyKind::Hang).unwrap());
    assert!(
        !store
            .db()
            .anomaly_raised(id, 1, AnomalyKind::Straggler)
            .unwrap()
    );
    let attributions = vec![
        Attribution {
            id: early,
            ..attribution(id, 86)
        },
        Attribution {
            id: late,
            ..attribution(id, 96)
        },
    ];
    assert_eq!(store.db().attributions(id).unwrap(), attributions);
    assert_eq!(store.db().all_attributions().unwrap(), attributions);
    assert_eq!(
        store.db().attributions_since(at(90)).unwrap(),
        attributions[1..]
    );
    assert!(store.db().attributions_since(at(100)).unwrap().is_empty());
}

#[test]
fn tracebacks_journal_and_warnings_read_back() {
    let (mut store, id) = store_with_a_workflow();
    let lines = [
        "Traceback (most recent call last):".to_string(),
        "RuntimeError: NCCL".into(),
    ];
    assert_eq!(store.db().last_traceback(id, 0).unwrap(), None);
    store
        .write(|db| {
            db.insert_traceback(id, 0, None, "ValueError", "bad", &lines[..1])?;
            db.insert_traceback(id, 0, Some(3), "RuntimeError", "NCCL", &lines)?;
            db.insert_traceback(id, 1, None, "ValueError", "bad", &lines)?;
            db.journal(Some(id), at(100), "requeue", &["hang".to_string()])?;
            db.journal(None, at(101), "started", &[])?;
            db.count_warning("bad_line", "first", at(102))?;
            db.count_warning("bad_line", "second", at(103))?;
            db.add_warnings("squeue", 0, "never", at(104))?;
            db.add_warnings("dropped", 5, "five at once", at(105))
        })
        .unwrap();
    assert_eq!(
        store.db().last_traceback(id, 0).unwrap(),
        Some(vec![
            "3: Traceback (most recent call last):".to_string(),
            "3: RuntimeError: NCCL".to_string(),
        ])
    );
    assert_eq!(
        store.db().last_traceback(id, 1).unwrap(),
        Some(lines.to_vec())
    );
    let entries = store.db().journal_entries(id).unwrap();
    assert_eq!(
        entries,
        vec![JournalEntry {
            id: entries[0].id,
            workflow_id: Some(id),
            time: at(100),
            decision: "requeue".into(),
            evidence: vec!["hang".into()],
        }]
    );
    assert_eq!(
        store.db().warnings().unwrap(),
        vec![
            ("bad_line".to_string(), 2, "second".to_string()),
            ("dropped".to_string(), 5, "five at once".to_string()),
        ]
    );
}

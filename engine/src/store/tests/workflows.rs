//! Workflows, their attempts, how far their logs were read, and the jobs watched by reference.

use super::fixtures::*;
use crate::model::{Attempt, JobState, Workflow, WorkflowStatus};
use crate::store::Store;

#[test]
fn a_workflow_reads_back_as_written_and_updates_in_place() {
    let (mut store, id) = store_with_a_workflow();
    let stored = Workflow {
        id,
        ..recovering_workflow()
    };
    assert_eq!(store.db().workflow(id).unwrap(), Some(stored.clone()));
    assert_eq!(store.db().workflows().unwrap(), vec![stored.clone()]);
    assert_eq!(store.db().workflow(id + 1).unwrap(), None);
    let changed = Workflow {
        status: WorkflowStatus::Completed,
        status_reason: None,
        succeeded: true,
        requeues_used: 3,
        updated_at: at(50),
        ..stored.clone()
    };
    store.write(|db| db.update_workflow(&changed)).unwrap();
    assert_eq!(store.db().workflow(id).unwrap(), Some(changed));
    let missing = Workflow {
        id: id + 1,
        ..stored
    };
    let err = store
        .write(|db| db.update_workflow(&missing))
        .unwrap_err()
        .to_string();
    assert_eq!(err, format!("no such workflow: {}", id + 1));
    assert_eq!(
        store
            .write(|db| db.delete_workflows_of_backend("sim"))
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .write(|db| db.delete_workflows_of_backend("slurm"))
            .unwrap(),
        1
    );
    assert!(store.db().workflows().unwrap().is_empty());
}

#[test]
fn attempts_read_back_by_workflow_by_job_and_all_at_once() {
    let (mut store, id) = store_with_a_workflow();
    let first = attempt(id, 0, "4200");
    let second = Attempt {
        reason: None,
        exit_code: None,
        log_path: None,
        last_iteration: None,
        end_time: None,
        ..attempt(id, 1, "4200")
    };
    store
        .write(|db| {
            db.save_attempt(&first)?;
            db.save_attempt(&second)
        })
        .unwrap();
    assert_eq!(
        store.db().attempts(id).unwrap(),
        vec![first.clone(), second.clone()]
    );
    assert_eq!(
        store.db().all_attempts().unwrap(),
        vec![first.clone(), second.clone()]
    );
    assert_eq!(
        store.db().attempt_by_job("slurm", "4200").unwrap(),
        Some(second.clone())
    );
    assert_eq!(store.db().attempt_by_job("sim", "4200").unwrap(), None);
    assert_eq!(store.db().attempt_by_job("slurm", "4201").unwrap(), None);
    let replaced = Attempt {
        state: JobState::Running,
        state_raw: "RUNNING".into(),
        ..first.clone()
    };
    store.write(|db| db.save_attempt(&replaced)).unwrap();
    assert_eq!(store.db().attempts(id).unwrap(), vec![replaced, second]);
}

#[test]
fn offsets_and_handled_marks_start_empty_and_keep_what_is_set() {
    let (mut store, id) = store_with_a_workflow();
    store
        .write(|db| db.save_attempt(&attempt(id, 0, "4200")))
        .unwrap();
    assert_eq!(store.db().log_offset(id, 0).unwrap(), (0, None));
    assert_eq!(store.db().log_offset(id, 1).unwrap(), (0, None));
    store
        .write(|db| db.set_log_offset(id, 0, 4096, Some("dev:ino")))
        .unwrap();
    assert_eq!(
        store.db().log_offset(id, 0).unwrap(),
        (4096, Some("dev:ino".into()))
    );
    assert!(!store.db().attempt_handled(id, 0).unwrap());
    store.write(|db| db.mark_attempt_handled(id, 0)).unwrap();
    assert!(store.db().attempt_handled(id, 0).unwrap());
    assert!(!store.db().attempt_handled(id, 1).unwrap());
    assert_eq!(
        store.db().file_offset("/var/log/kern.log").unwrap(),
        (0, None)
    );
    store
        .write(|db| db.set_file_offset("/var/log/kern.log", 10, None))
        .unwrap();
    store
        .write(|db| db.set_file_offset("/var/log/kern.log", 20, Some("7:9")))
        .unwrap();
    assert_eq!(
        store.db().file_offset("/var/log/kern.log").unwrap(),
        (20, Some("7:9".into()))
    );
}

#[test]
fn watched_jobs_are_added_once_and_removed() {
    let mut store = Store::open_in_memory().unwrap();
    let mut watch = |backend: &str, job_ref: &str, secs| {
        store
            .write(|db| db.add_watched(backend, job_ref, at(secs)))
            .unwrap()
    };
    assert!(watch("slurm", "4300", 2));
    assert!(watch("slurm", "4200", 1));
    assert!(!watch("slurm", "4200", 3));
    assert!(watch("k8s", "ns/job", 1));
    assert_eq!(
        store.db().watched_jobs("slurm").unwrap(),
        vec!["4200", "4300"]
    );
    let mut unwatch = |job_ref: &str| {
        store
            .write(|db| db.remove_watched("slurm", job_ref))
            .unwrap()
    };
    assert!(unwatch("4200"));
    assert!(!unwatch("4200"));
    assert_eq!(store.db().watched_jobs("slurm").unwrap(), vec!["4300"]);
}

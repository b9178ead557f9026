//! Tests of the store as a whole: opening, migrating, transactions, concurrent processes.

// Every kind of row, written and read back field for field.
mod actions;
mod evidence;
mod fixtures;
mod notifications;
mod workflows;

use super::*;
use crate::model::{BackendKind, JobSpec, RecoveryLimits, Workflow};

/// A plain enabled workflow, for tests of the store's parts.
pub(crate) fn workflow() -> Workflow {
    Workflow::enrolled(
        "run",
        BackendKind::Sim,
        JobSpec::default(),
        RecoveryLimits::default(),
        Utc::now(),
    )
}

#[test]
fn reopening_keeps_the_data_and_does_not_rerun_migrations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/runguard.sqlite");
    let id = {
        let mut store = Store::open(&path).unwrap();
        store.write(|db| db.insert_workflow(&workflow())).unwrap()
    };
    let store = Store::open(&path).unwrap();
    assert_eq!(store.db().workflow(id).unwrap().unwrap().name, "run");
    let mode: String = store
        .conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn the_change_mark_moves_with_a_change_by_this_connection_or_another_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runguard.sqlite");
    let mut reader = Store::open(&path).unwrap();
    let mut writer = Store::open(&path).unwrap();
    let first = reader.change_mark().unwrap();
    reader.db().workflows().unwrap();
    assert_eq!(
        reader.change_mark().unwrap(),
        first,
        "a read changes nothing"
    );
    writer.write(|db| db.insert_workflow(&workflow())).unwrap();
    let second = reader.change_mark().unwrap();
    assert_ne!(second, first, "another connection's commit");
    assert_eq!(reader.change_mark().unwrap(), second);
    reader.write(|db| db.insert_workflow(&workflow())).unwrap();
    assert_ne!(reader.change_mark().unwrap(), second, "its own commit");
}

#[test]
fn a_store_from_a_newer_version_is_refused_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runguard.sqlite");
    drop(Store::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = Store::open(&path).err().unwrap().to_string();
    assert!(err.contains("upgrade runguard"), "{err}");
}

#[test]
fn a_failed_change_leaves_nothing_behind() {
    let mut store = Store::open_in_memory().unwrap();
    let result: Result<(), StoreError> = store.write(|db| {
        db.insert_workflow(&workflow())?;
        Err(StoreError::Corrupt("abort".into()))
    });
    assert!(result.is_err());
    assert!(store.db().workflows().unwrap().is_empty());
}

#[test]
fn a_reader_sees_committed_state_while_another_connection_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runguard.sqlite");
    let mut writer = Store::open(&path).unwrap();
    let reader = Store::open(&path).unwrap();
    writer.write(|db| db.insert_workflow(&workflow())).unwrap();
    assert_eq!(reader.db().workflows().unwrap().len(), 1);
}

#[test]
fn processes_opening_a_new_store_at_the_same_moment_all_get_it() {
    // The engine creating its store while `runguard status` polls for it.
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("runguard-{round}.sqlite"));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
        let openers: Vec<_> = (0..6)
            .map(|_| {
                let (path, barrier) = (path.clone(), std::sync::Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut store = Store::open(&path)?;
                    store.write(|db| db.insert_workflow(&workflow()))
                })
            })
            .collect();
        for opener in openers {
            opener.join().unwrap().unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.db().workflows().unwrap().len(), 6);
    }
}

#[test]
fn evidence_lines_are_bounded_per_attempt() {
    let mut store = Store::open_in_memory().unwrap();
    let id = store.write(|db| db.insert_workflow(&workflow())).unwrap();
    store
        .write(|db| {
            for n in 0..1000 {
                db.insert_evidence_line(
                    id,
                    0,
                    &EvidenceLine {
                        time: Utc::now(),
                        rank: Some(n),
                        text: format!("line {n}"),
                    },
                )?;
            }
            Ok(())
        })
        .unwrap();
    let lines = store.db().evidence_lines(id, 0).unwrap();
    assert!(lines.len() <= 400);
    assert_eq!(lines.last().unwrap().text, "line 999");
}

#[test]
fn a_corrupt_row_is_an_error_not_a_panic() {
    let mut store = Store::open_in_memory().unwrap();
    let id = store.write(|db| db.insert_workflow(&workflow())).unwrap();
    store
        .conn
        .execute(
            "UPDATE workflows SET status = 'exploded' WHERE id = ?1",
            [id],
        )
        .unwrap();
    let err = store.db().workflow(id).unwrap_err().to_string();
    assert!(err.contains("exploded"), "{err}");
}

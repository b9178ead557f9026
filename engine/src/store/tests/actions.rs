//! Actions, the commands other processes queue for them, and rows this version cannot read.

use super::fixtures::*;
use crate::model::{Action, ActionState};
use crate::store::{Command, CommandKind};

#[test]
fn actions_read_back_by_id_workflow_state_and_recency() {
    let (mut store, id) = store_with_a_workflow();
    let (proposed, done, failed) = store
        .write(|db| {
            Ok((
                db.insert_action(&action(id, ActionState::Proposed, 41))?,
                db.insert_action(&action(id, ActionState::Done, 43))?,
                db.insert_action(&action(id, ActionState::Failed, 42))?,
            ))
        })
        .unwrap();
    let read = |action_id, state, updated| Action {
        id: action_id,
        ..action(id, state, updated)
    };
    let all = vec![
        read(proposed, ActionState::Proposed, 41),
        read(done, ActionState::Done, 43),
        read(failed, ActionState::Failed, 42),
    ];
    assert_eq!(store.db().action(done).unwrap(), Some(all[1].clone()));
    assert_eq!(store.db().action(failed + 1).unwrap(), None);
    assert_eq!(store.db().actions(id).unwrap(), all);
    assert_eq!(store.db().all_actions().unwrap(), all);
    assert_eq!(
        store.db().actions_in_state(ActionState::Proposed).unwrap(),
        vec![all[0].clone()]
    );
    assert_eq!(
        store.db().recent_finished_actions(5).unwrap(),
        vec![all[1].clone(), all[2].clone()]
    );
    assert_eq!(
        store.db().recent_finished_actions(1).unwrap(),
        vec![all[1].clone()]
    );
    let mut approved = all[0].clone();
    approved.state = ActionState::Approved;
    approved.result = Some("requeued".into());
    approved.updated_at = at(44);
    store.write(|db| db.update_action(&approved)).unwrap();
    assert_eq!(store.db().action(proposed).unwrap(), Some(approved.clone()));
    approved.id = failed + 1;
    let err = store
        .write(|db| db.update_action(&approved))
        .unwrap_err()
        .to_string();
    assert_eq!(err, format!("no such action: {}", failed + 1));
}

#[test]
fn commands_wait_until_finished_with_an_outcome() {
    let (mut store, _, action_id) = store_with_an_action();
    let (approve, reject) = store
        .write(|db| {
            Ok((
                db.push_command(CommandKind::Approve, action_id, at(50))?,
                db.push_command(CommandKind::Reject, action_id, at(51))?,
            ))
        })
        .unwrap();
    assert_eq!(
        store.db().pending_commands().unwrap(),
        vec![
            Command {
                id: approve,
                kind: CommandKind::Approve,
                action_id,
                node: None,
            },
            Command {
                id: reject,
                kind: CommandKind::Reject,
                action_id,
                node: None,
            },
        ]
    );
    assert_eq!(store.db().command_outcome(approve).unwrap(), None);
    store
        .write(|db| db.finish_command(approve, "approved"))
        .unwrap();
    assert_eq!(
        store.db().command_outcome(approve).unwrap(),
        Some("approved".into())
    );
    assert_eq!(store.db().pending_commands().unwrap().len(), 1);
}

#[test]
fn corrupt_values_are_errors_that_name_them() {
    let (mut store, id, action_id) = store_with_an_action();
    store
        .write(|db| db.push_command(CommandKind::Approve, action_id, at(50)))
        .unwrap();
    let corrupt = |sql: &str| store.conn.execute(sql, []).unwrap();
    corrupt("UPDATE actions SET kind = 'teleport'");
    corrupt("UPDATE commands SET kind = 'shrug'");
    corrupt("UPDATE workflows SET spec = '{not json'");
    let err = store.db().actions(id).unwrap_err().to_string();
    assert!(err.contains("action kind \"teleport\""), "{err}");
    let err = store.db().pending_commands().unwrap_err().to_string();
    assert!(err.contains("command kind \"shrug\""), "{err}");
    let err = store.db().workflows().unwrap_err().to_string();
    assert!(err.contains("{not json"), "{err}");
    corrupt("UPDATE actions SET kind = 'requeue', updated_at = 'yesterday'");
    let err = store.db().action(action_id).unwrap_err().to_string();
    assert!(err.contains("time \"yesterday\""), "{err}");
}

//! Notifications.

use super::fixtures::*;
use crate::model::{AlertEvent, Notification, Severity};

#[test]
fn notifications_read_back_newest_first_or_after_an_id() {
    let (mut store, id) = store_with_a_workflow();
    let notification = |workflow_id, severity, event, secs| Notification {
        id: 0,
        workflow_id,
        time: at(secs),
        event,
        severity,
        title: format!("title {secs}"),
        body: format!("body {secs}"),
    };
    assert_eq!(store.db().last_notification_id().unwrap(), 0);
    let written = [
        notification(Some(id), Severity::Critical, AlertEvent::Failure, 1),
        notification(None, Severity::Info, AlertEvent::Notice, 2),
        notification(Some(id), Severity::Warning, AlertEvent::Straggler, 3),
    ];
    let ids: Vec<i64> = store
        .write(|db| written.iter().map(|n| db.insert_notification(n)).collect())
        .unwrap();
    let read: Vec<Notification> = written
        .iter()
        .zip(&ids)
        .map(|(n, &id)| Notification { id, ..n.clone() })
        .collect();
    assert_eq!(store.db().last_notification_id().unwrap(), ids[2]);
    assert_eq!(
        store.db().notifications(2).unwrap(),
        vec![read[2].clone(), read[1].clone()]
    );
    assert_eq!(
        store.db().notifications_after(ids[0], 10).unwrap(),
        read[1..]
    );
    assert_eq!(store.db().notifications_after(0, 1).unwrap(), read[..1]);
    // An event name written by a newer version reads as a plain notice.
    store
        .conn
        .execute(
            "UPDATE notifications SET event = 'from_the_future' WHERE id = ?1",
            [ids[0]],
        )
        .unwrap();
    assert_eq!(
        store.db().notifications_after(0, 1).unwrap()[0].event,
        AlertEvent::Notice
    );
}

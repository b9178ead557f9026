//! `?watch=true`: a stream of `{"type":...,"object":...}` lines, one per change after the requested
//! resourceVersion that the request's selectors let through.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::body::{self, Chunk, ResponseBody};
use super::resources::RESOURCES;
use super::selectors::Selection;
use super::shared::{OpenStream, Shared};
use super::store::{Change, ChangeKind};
use super::table::{self, RowObject};

/// The annotation a bookmark carries when it closes the initial events of a streaming list.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

#[derive(Debug, Clone)]
pub struct WatchRequest {
    pub resource: usize,
    /// None watches all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    pub selection: Selection,
    /// Replay changes after this resourceVersion; None first sends the current objects as ADDED.
    pub since: Option<u64>,
    /// `sendInitialEvents=true`: current objects as ADDED, then a bookmark marking their end.
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Duration,
    /// Events carry one-row Tables instead of objects, for `kubectl get -w`'s printing.
    pub table: Option<RowObject>,
}

impl WatchRequest {
    fn in_scope(&self, object: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|namespace| object["metadata"]["namespace"].as_str() == Some(namespace))
    }

    fn printed(&self, object: &Value) -> Value {
        match self.table {
            Some(include) => table::table(&RESOURCES[self.resource], &[object], include, None),
            None => object.clone(),
        }
    }

    fn event(&self, kind: &str, object: &Value) -> Value {
        json!({"type": kind, "object": self.printed(object)})
    }

    fn bookmark(&self, resource_version: u64, initial_events_end: bool) -> Value {
        let resource = &RESOURCES[self.resource];
        let mut metadata = json!({"resourceVersion": resource_version.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
        }
        json!({
            "type": "BOOKMARK",
            "object": {"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata}
        })
    }

    /// The event a change shows this watcher. An object that starts or stops matching the
    /// selectors is ADDED or DELETED for it, as the API server's watch cache reports it.
    fn event_for(&self, change: &Change) -> Option<Value> {
        if change.resource != self.resource || !self.in_scope(&change.object) {
            return None;
        }
        let matches_now = self.selection.matches(&change.object);
        let matched_before = change
            .previous
            .as_ref()
            .is_some_and(|previous| self.selection.matches(previous));
        match change.kind {
            ChangeKind::Added => matches_now.then(|| self.event("ADDED", &change.object)),
            ChangeKind::Deleted => {
                (matched_before || matches_now).then(|| self.event("DELETED", &change.object))
            }
            ChangeKind::Modified => match (matched_before, matches_now) {
                (true, true) => Some(self.event("MODIFIED", &change.object)),
                (false, true) => Some(self.event("ADDED", &change.object)),
                (true, false) => {
                    let mut last_match = change.previous.clone().unwrap_or_default();
                    last_match["metadata"]["resourceVersion"] =
                        json!(change.resource_version.to_string());
                    Some(self.event("DELETED", &last_match))
                }
                (false, false) => None,
            },
        }
    }
}

fn line(event: &Value) -> Bytes {
    let mut text = event.to_string();
    text.push('\n');
    Bytes::from(text)
}

/// Starts the stream on the server's runtime and returns its body.
pub fn start(shared: Arc<Shared>, request: WatchRequest) -> ResponseBody {
    let (sender, body) = body::stream();
    tokio::spawn(run(shared, request, sender));
    body
}

async fn send(sender: &mpsc::Sender<Chunk>, event: &Value) -> bool {
    sender.send(Ok(line(event))).await.is_ok()
}

/// What wakes a streaming body (a watch, a followed log) that waits for more to send.
pub(super) struct Wakeups {
    changes: tokio::sync::watch::Receiver<u64>,
    cuts: tokio::sync::watch::Receiver<u64>,
}

/// What a streaming body woke up for.
pub(super) enum Wake<T> {
    /// The store changed.
    Changed,
    /// The body's own event happened first.
    Own(T),
    /// The stream is over: the store is gone, the client went away, or the test cut the stream
    /// (the cut has been sent).
    Over,
}

impl Wakeups {
    pub(super) fn subscribe(shared: &Shared) -> Self {
        Self {
            changes: shared.subscribe_changes(),
            cuts: shared.subscribe_cuts(),
        }
    }

    /// Waits for a change to the store, for `own`, or for the end of the stream.
    pub(super) async fn next<T>(
        &mut self,
        sender: &mpsc::Sender<Chunk>,
        own: impl Future<Output = T>,
    ) -> Wake<T> {
        tokio::select! {
            changed = self.changes.changed() => match changed {
                Ok(()) => Wake::Changed,
                Err(_) => Wake::Over,
            },
            own = own => Wake::Own(own),
            _ = self.cuts.changed() => {
                let _ = sender.send(Err(body::cut())).await;
                Wake::Over
            }
            _ = sender.closed() => Wake::Over,
        }
    }
}

async fn run(shared: Arc<Shared>, request: WatchRequest, sender: mpsc::Sender<Chunk>) {
    let _open = OpenStream::watch(shared.clone());
    // Subscribed before the first read, so a change made in between still wakes the loop.
    let mut wakeups = Wakeups::subscribe(&shared);
    let deadline = Instant::now() + request.timeout;

    let (mut sent_through, initial_events) = shared.read(|store| match request.since {
        Some(resource_version) if !request.send_initial_events => (resource_version, Vec::new()),
        _ => {
            let current: Vec<Value> = store
                .list(request.resource, request.namespace.as_deref())
                .into_iter()
                .filter(|object| request.selection.matches(object))
                .map(|object| request.event("ADDED", object))
                .collect();
            (store.resource_version(), current)
        }
    });
    for event in &initial_events {
        if !send(&sender, event).await {
            return;
        }
    }
    if request.send_initial_events
        && request.bookmarks
        && !send(&sender, &request.bookmark(sent_through, true)).await
    {
        return;
    }

    loop {
        let batch = shared.read(|store| {
            store.changes_after(sent_through).map(|changes| {
                let events: Vec<Value> = changes
                    .into_iter()
                    .filter_map(|change| request.event_for(change))
                    .collect();
                (events, store.resource_version())
            })
        });
        match batch {
            Ok((events, latest)) => {
                for event in &events {
                    if !send(&sender, event).await {
                        return;
                    }
                }
                sent_through = sent_through.max(latest);
            }
            Err(expired) => {
                send(
                    &sender,
                    &json!({"type": "ERROR", "object": expired.to_status()}),
                )
                .await;
                return;
            }
        }
        match wakeups
            .next(&sender, tokio::time::sleep_until(deadline))
            .await
        {
            Wake::Changed => {}
            Wake::Own(()) => {
                if request.bookmarks {
                    send(&sender, &request.bookmark(sent_through, false)).await;
                }
                return;
            }
            Wake::Over => return,
        }
    }
}

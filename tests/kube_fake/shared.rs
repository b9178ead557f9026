//! State shared by the server's tasks and the test driving the scenario, with the signals that wake
//! open watch and log streams.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::watch;

use super::exec::ExecState;
use super::store::Store;

/// One request as the client sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// Query parameters in order, percent-decoded.
    pub query: Vec<(String, String)>,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    /// The `Authorization` header; kubectl sends none over plain HTTP.
    pub authorization: Option<String>,
    /// The body parsed as JSON, or as a JSON string when it is not JSON; None when empty.
    pub body: Option<Value>,
    /// The `Upgrade` header: `websocket` for a streaming request (exec) over a WebSocket.
    pub upgrade: Option<String>,
    /// The subprotocols the client offered (`Sec-WebSocket-Protocol`), as it sent them.
    pub protocols: Option<String>,
}

impl RecordedRequest {
    /// The first value of a query parameter.
    pub fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// What the RBAC and authentication stand-ins refuse.
#[derive(Debug, Default)]
pub struct Access {
    /// (verb, resource) pairs refused with 403; the resource may name a subresource (`pods/log`)
    /// and the verb may be `*`.
    pub forbidden: HashSet<(String, String)>,
    /// Every request is refused with 401, as with expired credentials.
    pub unauthorized: bool,
    /// Resources (plurals) answered 404, as on a cluster without their CRD.
    pub absent: HashSet<String>,
}

impl Access {
    pub fn refuses(&self, verb: &str, resource: &str) -> bool {
        self.forbidden
            .contains(&(verb.to_string(), resource.to_string()))
            || self
                .forbidden
                .contains(&("*".to_string(), resource.to_string()))
    }
}

pub struct Shared {
    store: Mutex<Store>,
    /// Carries the store's resourceVersion; watches wake when it moves.
    changes: watch::Sender<u64>,
    /// Carries the count of appended log lines; followers wake when it moves.
    log_appends: watch::Sender<u64>,
    /// Moves when the test cuts every open stream.
    cuts: watch::Sender<u64>,
    pub access: Mutex<Access>,
    pub requests: Mutex<Vec<RecordedRequest>>,
    /// The execs run, the signals received and the test's handler for them.
    pub exec: Mutex<ExecState>,
    pub open_watches: AtomicUsize,
    pub open_log_follows: AtomicUsize,
    /// The API server is down: every connection is closed as soon as it is made, and every open
    /// one soon after (see [`Shared::down_for`]).
    pub refusing: AtomicBool,
    down_since: Mutex<Option<std::time::Instant>>,
    /// Connections closed that way.
    pub refused: AtomicUsize,
    /// Writes still answered before the server goes down by itself (0: it does not).
    pub down_after_writes: AtomicUsize,
    /// `127.0.0.1:PORT`, which `/api` reports.
    pub address: String,
}

/// Locks even after a panic elsewhere, so one failed assertion does not cascade into every other.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub fn new(address: String) -> Self {
        Shared {
            store: Mutex::new(Store::new()),
            changes: watch::Sender::new(0),
            log_appends: watch::Sender::new(0),
            cuts: watch::Sender::new(0),
            access: Mutex::new(Access::default()),
            requests: Mutex::new(Vec::new()),
            exec: Mutex::new(ExecState::default()),
            open_watches: AtomicUsize::new(0),
            open_log_follows: AtomicUsize::new(0),
            refusing: AtomicBool::new(false),
            down_since: Mutex::new(None),
            refused: AtomicUsize::new(0),
            down_after_writes: AtomicUsize::new(0),
            address,
        }
    }

    pub fn read<T>(&self, reading: impl FnOnce(&Store) -> T) -> T {
        reading(&lock(&self.store))
    }

    /// Runs a change on the store, then wakes the streams that may have something new to send.
    pub fn write<T>(&self, change: impl FnOnce(&mut Store) -> T) -> T {
        let (result, resource_version, log_serial) = {
            let mut store = lock(&self.store);
            let result = change(&mut store);
            (result, store.resource_version(), store.log_serial)
        };
        self.changes.send_if_modified(|current| {
            let moved = *current != resource_version;
            *current = resource_version;
            moved
        });
        self.log_appends.send_if_modified(|current| {
            let moved = *current != log_serial;
            *current = log_serial;
            moved
        });
        result
    }

    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub fn subscribe_log_appends(&self) -> watch::Receiver<u64> {
        self.log_appends.subscribe()
    }

    pub fn subscribe_cuts(&self) -> watch::Receiver<u64> {
        self.cuts.subscribe()
    }

    pub fn cut_streams(&self) {
        self.cuts.send_modify(|generation| *generation += 1);
    }

    /// Whether the server is down (see [`Shared::refusing`]).
    pub fn is_refusing(&self) -> bool {
        self.refusing.load(Ordering::SeqCst)
    }

    /// Counts a write answered; the last one [`Shared::down_after_writes`] allows takes the server
    /// down just after its answer has gone out.
    pub fn write_answered(self: &Arc<Self>) {
        let left = self.down_after_writes.load(Ordering::SeqCst);
        if left == 0 {
            return;
        }
        self.down_after_writes.store(left - 1, Ordering::SeqCst);
        if left == 1 {
            self.set_refusing(true);
        }
    }

    /// Goes down or comes back up.
    pub fn set_refusing(&self, refusing: bool) {
        *lock(&self.down_since) = refusing.then(std::time::Instant::now);
        self.refusing.store(refusing, Ordering::SeqCst);
    }

    /// Down for `at_least` already: long enough for an answer given just before to have gone out.
    pub fn down_for(&self, at_least: std::time::Duration) -> bool {
        lock(&self.down_since).is_some_and(|since| since.elapsed() >= at_least)
    }

    pub fn record(&self, request: RecordedRequest) {
        lock(&self.requests).push(request);
    }
}

/// Counts a stream as open for as long as it lives.
pub struct OpenStream {
    shared: Arc<Shared>,
    follows_logs: bool,
}

impl OpenStream {
    pub fn watch(shared: Arc<Shared>) -> Self {
        shared.open_watches.fetch_add(1, Ordering::SeqCst);
        OpenStream {
            shared,
            follows_logs: false,
        }
    }

    pub fn log_follow(shared: Arc<Shared>) -> Self {
        shared.open_log_follows.fetch_add(1, Ordering::SeqCst);
        OpenStream {
            shared,
            follows_logs: true,
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let counter = if self.follows_logs {
            &self.shared.open_log_follows
        } else {
            &self.shared.open_watches
        };
        counter.fetch_sub(1, Ordering::SeqCst);
    }
}

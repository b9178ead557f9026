//! An in-process Kubernetes API server for tests: plain HTTP on 127.0.0.1, the real wire format
//! (discovery, lists, watches, patches, `Status` errors, pod logs), state the test shapes from
//! fixtures and Rust, and a record of every request the client made.
//!
//! ```ignore
//! mod kube_fake; // tests/main.rs; a bench: #[path = "../tests/kube_fake/mod.rs"]
//!
//! let kube = kube_fake::FakeKube::start();
//! kube.load_fixture("pytorchjob-running.json");
//! let kubeconfig = kube.kubeconfig(dir.path());
//! ```

// The tests and the bench that include this module each use a different part of it.
#![allow(dead_code)]

mod body;
mod exec;
mod logs;
mod patch;
mod resources;
mod selectors;
mod server;
mod shared;
mod status;
mod store;
mod table;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::oneshot;

pub use exec::{ContainerLog, ExecRecord, ReceivedSignal};
pub use shared::RecordedRequest;

use resources::RESOURCES;
use shared::{Shared, lock};
use store::{LogLine, Part, Writer};

/// Where the fixture files live.
pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kube");

/// Every fixture file, in an order that loads each object after what it refers to.
pub const EVERY_FIXTURE: [&str; 7] = [
    "nodes.json",
    "pytorchjob-running.json",
    "pytorchjob-failed-oom.json",
    "pytorchjob-unlabeled.json",
    "batch-job.json",
    "rayjob.json",
    "events.json",
];

/// A running fake API server; it stops, closing every connection, when dropped.
pub struct FakeKube {
    shared: Arc<Shared>,
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The objects of a fixture file: one object, or the items of a `List`.
pub fn fixture(file: &str) -> Vec<Value> {
    let path = Path::new(FIXTURES).join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read fixture {}: {error}", path.display()));
    let document: Value = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("fixture {} is not JSON: {error}", path.display()));
    match document["items"].as_array() {
        Some(items)
            if document["kind"]
                .as_str()
                .is_some_and(|kind| kind.ends_with("List")) =>
        {
            items.clone()
        }
        _ => vec![document],
    }
}

/// The resource a test names by kind, plural or short name; an unknown one is a mistake in the test.
fn resource_named(kind: &str) -> usize {
    resources::by_any_name(kind).unwrap_or_else(|| {
        let served: Vec<&str> = RESOURCES.iter().map(|resource| resource.kind).collect();
        panic!("the fake API server serves no kind {kind:?}; it serves {served:?}")
    })
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => panic!("the fake API server cannot listen: {error}"),
    };
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                if shared.is_refusing() {
                    shared.refused.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let shared = shared.clone();
                tokio::spawn(async move {
                    let down = shared.clone();
                    let service = service_fn(move |request| server::handle(shared.clone(), request));
                    // A client hanging up mid-request is its own business; a server going down
                    // closes the connection, kept-alive or streaming.
                    tokio::select! {
                        _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .with_upgrades() => {}
                        _ = async {
                            while !down.down_for(Duration::from_millis(50)) {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        } => {}
                    }
                });
            }
        }
    }
}

impl FakeKube {
    /// The bearer token the kubeconfig carries; another is refused with 401. None passes, since
    /// kubectl sends no credentials over plain HTTP.
    pub const TOKEN: &str = server::TOKEN;
    /// The user named in 403 messages.
    pub const USER: &str = status::USER;

    /// Listens on a free port of 127.0.0.1 and serves on a thread with its own runtime, so it works
    /// from plain and async tests alike. Panics when no socket, thread or runtime can be had.
    pub fn start() -> FakeKube {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0 for the fake API server");
        listener
            .set_nonblocking(true)
            .expect("make the fake API server's socket non-blocking");
        let port = listener
            .local_addr()
            .expect("the fake API server's address")
            .port();
        let shared = Arc::new(Shared::new(format!("127.0.0.1:{port}")));
        let (stop, stopped) = oneshot::channel();
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fake-kube-apiserver".to_string())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the fake API server");
                runtime.block_on(serve(listener, serving, stopped));
                // Dropping the runtime here ends every open connection and stream.
            })
            .expect("start the fake API server's thread");
        FakeKube {
            shared,
            port,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Writes `dir/kubeconfig`: cluster and context `fake`, namespace `default`, bearer token `TOKEN`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {url}
contexts:
- name: fake
  context:
    cluster: fake
    namespace: default
    user: fake
current-context: fake
users:
- name: fake
  user:
    token: {token}
preferences: {{}}
",
            url = self.url(),
            token = Self::TOKEN
        );
        std::fs::write(&path, text)
            .unwrap_or_else(|error| panic!("cannot write {}: {error}", path.display()));
        path
    }

    /// Creates the object or replaces it whole (status included), as the cluster's controllers
    /// would leave it. uid and creationTimestamp are kept when given; resourceVersion is the
    /// server's. A namespace that does not exist yet is created. An apply that changes nothing is
    /// no change (no new resourceVersion, no watch event), as on a real server. Returns the stored
    /// object.
    pub fn apply(&self, object: Value) -> Value {
        let description = format!("{} {}", object["kind"], object["metadata"]["name"]);
        self.shared
            .write(|store| store.apply(object))
            .unwrap_or_else(|error| panic!("cannot apply {description}: {}", error.message))
    }

    /// A server holding every fixture.
    pub fn with_every_fixture() -> FakeKube {
        let kube = Self::start();
        for file in EVERY_FIXTURE {
            kube.load_fixture(file);
        }
        kube
    }

    /// Applies every object of a fixture file in order and returns them as stored.
    pub fn load_fixture(&self, file: &str) -> Vec<Value> {
        fixture(file)
            .into_iter()
            .map(|object| self.apply(object))
            .collect()
    }

    /// One object; `namespace` is empty for cluster-scoped kinds. `kind` is a kind (`Pod`),
    /// plural (`pods`) or short name (`po`).
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = resource_named(kind);
        self.shared
            .read(|store| store.get(resource, namespace, name).cloned())
    }

    /// Objects of a kind in a namespace, or in all namespaces when `namespace` is empty.
    pub fn list(&self, kind: &str, namespace: &str) -> Vec<Value> {
        let resource = resource_named(kind);
        let namespace = Some(namespace).filter(|namespace| !namespace.is_empty());
        self.shared.read(|store| {
            store
                .list(resource, namespace)
                .into_iter()
                .cloned()
                .collect()
        })
    }

    /// Changes an object in place (any part of it) and stores it as one MODIFIED change.
    pub fn modify(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Value {
        let resource = resource_named(kind);
        self.shared
            .write(|store| {
                let mut object = store
                    .get(resource, namespace, name)
                    .cloned()
                    .ok_or_else(|| status::ApiError::not_found(&RESOURCES[resource], name))?;
                change(&mut object);
                store.update(
                    resource,
                    namespace,
                    name,
                    object,
                    Part::Whole,
                    Writer::Scenario,
                )
            })
            .unwrap_or_else(|error| {
                panic!("cannot modify {kind} {namespace}/{name}: {}", error.message)
            })
    }

    /// Merges `status` into the object's `.status` (RFC 7386), as a controller's status update.
    pub fn patch_status(&self, kind: &str, namespace: &str, name: &str, status: Value) -> Value {
        self.modify(kind, namespace, name, |object| {
            patch::merge_patch(&mut object["status"], &status);
        })
    }

    /// Deletes an object and, as the garbage collector would, what it owns. Returns its last state.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = resource_named(kind);
        self.shared
            .write(|store| store.delete(resource, namespace, name, true))
            .ok()
    }

    /// The resourceVersion of the latest change.
    pub fn resource_version(&self) -> u64 {
        self.shared.read(store::Store::resource_version)
    }

    /// Forgets the change history, so watches from any earlier resourceVersion get `410 Expired`.
    pub fn compact_history(&self) {
        self.shared.write(store::Store::compact);
    }

    /// Appends a line to a container's log, stamped with the server clock.
    pub fn append_log(&self, namespace: &str, pod: &str, container: &str, line: &str) {
        self.append_log_at(namespace, pod, container, Utc::now(), line);
    }

    /// Appends a line to a container's log with the given time.
    pub fn append_log_at(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        time: DateTime<Utc>,
        line: &str,
    ) {
        let key = (
            namespace.to_string(),
            pod.to_string(),
            container.to_string(),
        );
        let line = LogLine {
            time,
            text: line.to_string(),
        };
        self.shared.write(|store| store.append_log(key, line));
    }

    /// Sets what `previous=true` returns: the log of the container's previous run.
    pub fn set_previous_log(&self, namespace: &str, pod: &str, container: &str, lines: &[&str]) {
        let key = (
            namespace.to_string(),
            pod.to_string(),
            container.to_string(),
        );
        let now = Utc::now();
        let lines = lines
            .iter()
            .map(|text| LogLine {
                time: now,
                text: text.to_string(),
            })
            .collect();
        self.shared
            .write(|store| store.set_previous_log(key, lines));
    }

    /// Drops every open watch and followed log mid-stream, as a broken connection would; clients
    /// must notice and resume.
    pub fn cut_log_streams(&self) {
        self.shared.cut_streams();
    }

    /// Goes down: every open connection is closed and every new one closed at once (counted), as
    /// an API server that is gone, until [`FakeKube::accept_connections`].
    pub fn refuse_connections(&self) {
        self.shared.set_refusing(true);
    }

    /// Goes down like [`FakeKube::refuse_connections`] right after answering the next `writes`
    /// requests that are not GETs: in the middle of what the client was doing.
    pub fn refuse_connections_after_writes(&self, writes: usize) {
        self.shared
            .down_after_writes
            .store(writes, Ordering::SeqCst);
    }

    /// Whether the server is down now.
    pub fn is_refusing(&self) -> bool {
        self.shared.is_refusing()
    }

    /// Comes back up.
    pub fn accept_connections(&self) {
        self.shared.set_refusing(false);
    }

    /// Connections closed while down.
    pub fn refused_connections(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Refuses `verb` (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection` or `*`) on `resource` (`nodes`, `pods/log`, `pytorchjobs`) with 403.
    pub fn forbid(&self, verb: &str, resource: &str) {
        lock(&self.shared.access)
            .forbidden
            .insert((verb.to_string(), resource.to_string()));
    }

    /// Lifts a refusal set by `forbid`.
    pub fn allow(&self, verb: &str, resource: &str) {
        lock(&self.shared.access)
            .forbidden
            .remove(&(verb.to_string(), resource.to_string()));
    }

    /// Answers 404 to every request for `plural` (`trainjobs`), as a cluster without its CRD does.
    pub fn without_kind(&self, plural: &str) {
        lock(&self.shared.access).absent.insert(plural.to_string());
    }

    /// While set, every request is refused with 401, as with expired credentials.
    pub fn unauthorized(&self, refuse: bool) {
        lock(&self.shared.access).unauthorized = refuse;
    }

    /// Every request made so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// Calls `handler` each time a container's main process receives a signal through exec (`kill
    /// -s USR1 1`), on the server's thread, with the container's log to write to as the process
    /// would (a training process saving a checkpoint on SIGUSR1). One handler; a new one replaces it.
    pub fn on_signal(
        &self,
        handler: impl Fn(&ReceivedSignal, &ContainerLog) + Send + Sync + 'static,
    ) {
        lock(&self.shared.exec).handler = Some(Arc::new(handler));
    }

    /// The signals containers' main processes received so far, in order.
    pub fn signals_received(&self) -> Vec<ReceivedSignal> {
        lock(&self.shared.exec).signals.clone()
    }

    /// The execs run so far, each recorded once its connection is over.
    pub fn execs(&self) -> Vec<ExecRecord> {
        lock(&self.shared.exec).records.clone()
    }

    /// Watch streams open now.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    /// `follow=true` log streams open now.
    pub fn open_log_follows(&self) -> usize {
        self.shared.open_log_follows.load(Ordering::SeqCst)
    }

    /// Polls `condition` until it holds or `timeout` passes; tells which. It sleeps the calling
    /// thread, so an async test whose client runs on the same thread should poll with tokio instead.
    pub fn wait_until(&self, timeout: Duration, condition: impl Fn(&FakeKube) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if condition(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

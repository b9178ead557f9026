//! The watchers: connecting to the API server and keeping the workloads, pods, events and nodes in
//! memory through reflectors (watch streams, never polling), and telling when they are ready.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use super::KubernetesConfig;
use super::backend::KubeBackend;
use super::json_cache::JsonCache;
use super::logs::LogHub;
use super::workload::WorkloadKind;
use crate::backend::BackendError;
use crate::sync::lock;

/// The streams without which no job can be followed: while one fails, the scheduler is unavailable.
pub(super) const CORE_STREAMS: [&str; 2] = ["pods", "nodes"];

/// What the watchers last heard from the API server, per stream.
#[derive(Debug, Default)]
pub(super) struct WatchHealth {
    /// The server refused the credentials (401) or the permissions (403), with its message.
    pub(super) refused: HashMap<String, String>,
    /// Other errors, with their message.
    pub(super) failing: HashMap<String, String>,
    /// Kinds the API server does not serve (404: their CRD is not installed).
    pub(super) absent: BTreeSet<String>,
}

/// One resource watched in one namespace (or all).
pub(super) struct Watched {
    pub(super) store: Store<DynamicObject>,
    /// The stream's label in [`WatchHealth`].
    pub(super) label: String,
}

impl KubeBackend {
    /// Connects with the kubeconfig (or the pod's service account) and starts the watchers.
    pub async fn connect(
        config: &KubernetesConfig,
        data_dir: PathBuf,
    ) -> Result<Self, BackendError> {
        let options = kube::config::KubeConfigOptions {
            context: config.context.clone(),
            ..Default::default()
        };
        let client_config = match &config.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|err| {
                    BackendError::Invalid(format!("kubeconfig {}: {err}", path.display()))
                })?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|err| {
                        BackendError::Invalid(format!("kubeconfig {}: {err}", path.display()))
                    })?
            }
            None if config.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|err| BackendError::Invalid(format!("kubeconfig: {err}")))?,
            None => kube::Config::infer().await.map_err(|err| {
                BackendError::Invalid(format!(
                    "no kubeconfig and not inside a pod (set kubernetes.kubeconfig): {err}"
                ))
            })?,
        };
        let default_namespace = client_config.default_namespace.clone();
        crate::http::install_tls_provider();
        let client = Client::try_from(client_config)
            .map_err(|err| BackendError::transport("Kubernetes client", err))?;
        Ok(Self::start(client, config, data_dir, default_namespace).await)
    }

    /// Starts the watchers over an existing client.
    pub async fn start(
        client: Client,
        config: &KubernetesConfig,
        data_dir: PathBuf,
        default_namespace: String,
    ) -> Self {
        let health = Arc::new(Mutex::new(WatchHealth::default()));
        let waker: Arc<Mutex<Option<Arc<tokio::sync::Notify>>>> = Arc::new(Mutex::new(None));
        let jobs_changed = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        let namespaces: Vec<Option<String>> = if config.namespaces.is_empty() {
            vec![None]
        } else {
            config.namespaces.iter().cloned().map(Some).collect()
        };
        let mut resources = HashMap::new();
        let mut watch = |resource: ApiResource, namespace: Option<&str>, label: String| {
            resources.insert(label.clone(), resource.clone());
            let waker = Arc::clone(&waker);
            let jobs_changed = Arc::clone(&jobs_changed);
            // Events are evidence only; a change of anything else may call for a decision.
            let wakes = label != "events";
            // A pod or a workload that changed is listed at once; nodes change all the time (their
            // status heartbeats) and are read with the poll's listing.
            let lists = wakes && label != "nodes";
            let api: Api<DynamicObject> = match namespace {
                Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let writer = reflector::store::Writer::new(resource.clone());
            let store = writer.as_reader();
            let health = Arc::clone(&health);
            let watched_label = label.clone();
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff();
            tasks.push(tokio::spawn(async move {
                stream
                    .for_each(|event| {
                        let mut health = lock(&health);
                        match event {
                            Ok(_) => {
                                health.refused.remove(&label);
                                health.failing.remove(&label);
                                health.absent.remove(&label);
                                if lists {
                                    jobs_changed.store(true, Ordering::Relaxed);
                                }
                                if wakes && let Some(waker) = lock(&waker).as_ref() {
                                    waker.notify_one();
                                }
                            }
                            Err(err) => {
                                let status = match &err {
                                    watcher::Error::InitialListFailed(kube::Error::Api(status))
                                    | watcher::Error::WatchStartFailed(kube::Error::Api(status))
                                    | watcher::Error::WatchFailed(kube::Error::Api(status)) => {
                                        Some((status.code, status.message.clone()))
                                    }
                                    watcher::Error::WatchError(status) => {
                                        Some((status.code, status.message.clone()))
                                    }
                                    _ => None,
                                };
                                match status {
                                    Some((401 | 403, message)) => {
                                        health.refused.insert(label.clone(), message);
                                    }
                                    Some((404, _)) => {
                                        health.absent.insert(label.clone());
                                    }
                                    _ => {
                                        health.failing.insert(label.clone(), err.to_string());
                                    }
                                }
                            }
                        }
                        futures::future::ready(())
                    })
                    .await;
            }));
            Watched {
                store,
                label: watched_label,
            }
        };
        let mut workloads = Vec::new();
        for kind in WorkloadKind::ALL {
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(kind.group(), kind.version(), kind.kind()),
                kind.plural(),
            );
            let watched = namespaces
                .iter()
                .map(|ns| {
                    watch(
                        resource.clone(),
                        ns.as_deref(),
                        format!("{}s", kind.short()),
                    )
                })
                .collect();
            workloads.push((kind, watched));
        }
        let pod_resource = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let pods = namespaces
            .iter()
            .map(|ns| watch(pod_resource.clone(), ns.as_deref(), "pods".to_string()))
            .collect();
        let event_resource = ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
        let events = namespaces
            .iter()
            .map(|ns| watch(event_resource.clone(), ns.as_deref(), "events".to_string()))
            .collect();
        let node_resource = ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&());
        let nodes = watch(node_resource, None, "nodes".to_string());
        let watched = config.watch.iter().cloned().collect();
        Self {
            client,
            config: config.clone(),
            data_dir,
            default_namespace,
            cluster: config.context.clone(),
            workloads,
            pods,
            events,
            nodes,
            health,
            resources,
            waker,
            jobs_changed,
            watched: Mutex::new(watched),
            ending: Mutex::new(HashMap::new()),
            saved: Mutex::new(HashMap::new()),
            pod_json: JsonCache::default(),
            node_json: JsonCache::default(),
            workload_json: JsonCache::default(),
            event_json: JsonCache::default(),
            logs: Arc::new(LogHub::default()),
            tasks,
        }
    }

    /// Waits for the first listing of every watcher; reports a refusal or an unreachable server.
    pub(super) async fn ready(&self) -> Result<(), BackendError> {
        let all = self
            .workloads
            .iter()
            .flat_map(|(_, stores)| stores.iter())
            .chain(self.pods.iter())
            .chain(self.events.iter())
            .chain(std::iter::once(&self.nodes));
        let timeout = Duration::from_secs(self.config.sync_timeout_secs.max(1));
        let deadline = tokio::time::Instant::now() + timeout;
        'streams: for watched in all {
            // A kind the cluster does not have (no CRD: the server answers 404) never becomes ready:
            // it is skipped as soon as the server says so, not waited for on every listing.
            loop {
                if lock(&self.health).absent.contains(&watched.label) {
                    break;
                }
                let step = Duration::from_millis(100)
                    .min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                match tokio::time::timeout(step, watched.store.wait_until_ready()).await {
                    Ok(_) => break,
                    Err(_) if tokio::time::Instant::now() < deadline => {}
                    Err(_) => break 'streams,
                }
            }
        }
        // A watch that resumes after a refusal or an outage of the API server says nothing until an
        // object changes (which, in a quiet cluster, may be never): whether the credentials work
        // again, or the server is back, is asked directly, with the smallest listing of each kind.
        let unhealthy: Vec<String> = {
            let health = lock(&self.health);
            health
                .refused
                .keys()
                .chain(
                    health
                        .failing
                        .keys()
                        .filter(|label| CORE_STREAMS.contains(&label.as_str())),
                )
                .cloned()
                .collect()
        };
        for label in unhealthy {
            let Some(resource) = self.resources.get(&label) else {
                continue;
            };
            let api: Api<DynamicObject> = match self.config.namespaces.first() {
                Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, resource),
                None => Api::all_with(self.client.clone(), resource),
            };
            if api
                .list_metadata(&ListParams::default().limit(1))
                .await
                .is_ok()
            {
                let mut health = lock(&self.health);
                health.refused.remove(&label);
                health.failing.remove(&label);
            }
        }
        let health = lock(&self.health);
        if let Some((stream, message)) = health.refused.iter().next() {
            return Err(BackendError::Credentials(format!(
                "the API server refused to list {stream}: {message}"
            )));
        }
        let core_failing = CORE_STREAMS
            .iter()
            .find_map(|stream| health.failing.get(*stream).map(|m| (stream, m)));
        if let Some((stream, message)) = core_failing {
            return Err(BackendError::Unavailable(format!(
                "watching {stream}: {message}"
            )));
        }
        Ok(())
    }
}

//! The Kubernetes backend: reflectors (watch streams, never polling, started in `watch.rs`) keep the
//! workloads, their pods, the events and the nodes in memory; the engine's listing reads them. Actions
//! are API calls: re-creating a workload from its saved spec, cordoning and tainting a node, deleting a
//! workload.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::Value;

use super::KubernetesConfig;
use super::errors::{action_error, api_error};
use super::json_cache::JsonCache;
use super::logs::{Follow, LogHub};
use super::recreate::{clean, next_incarnation, restart_outcome, spec_diff};
use super::suspend;
use super::watch::{WatchHealth, Watched};
use super::workload::{
    self, EventIndex, PodIndex, WorkloadKind, WorkloadRef, at, enrolled, evidence, placement,
    pods_of, snapshot, str_at,
};
use crate::backend::{
    ActionOutcome, Backend, BackendError, Can, Capabilities, JobSnapshot, NewJob, NodeCapacity,
};
use crate::model::BackendKind;
use crate::model::{ActionKind, ActionParams, SpecChange};
use crate::sync::lock;

/// How long an ended workload waits for its last log lines before its end is reported.
const LOG_SETTLE: Duration = Duration::from_secs(3);

/// The taint runguard puts on a node it takes out of scheduling.
pub const SUSPECT_TAINT: &str = "runguard.io/suspect";

/// Kubernetes through its API server.
pub struct KubeBackend {
    pub(super) client: Client,
    pub(super) config: KubernetesConfig,
    pub(super) data_dir: PathBuf,
    pub(super) default_namespace: String,
    pub(super) cluster: Option<String>,
    pub(super) workloads: Vec<(WorkloadKind, Vec<Watched>)>,
    pub(super) pods: Vec<Watched>,
    pub(super) events: Vec<Watched>,
    pub(super) nodes: Watched,
    pub(super) health: Arc<Mutex<WatchHealth>>,
    /// The resource behind each watch label, to ask about it directly.
    pub(super) resources: HashMap<String, ApiResource>,
    /// The engine's waker, once it has given it.
    pub(super) waker: Arc<Mutex<Option<Arc<tokio::sync::Notify>>>>,
    /// A pod or a workload changed since the engine last asked ([`Backend::take_jobs_changed`]).
    pub(super) jobs_changed: Arc<AtomicBool>,
    pub(super) watched: Mutex<BTreeSet<String>>,
    /// When each ended workload was first seen ended (see `settle`).
    pub(super) ending: Mutex<HashMap<String, std::time::Instant>>,
    /// The resourceVersion whose spec was last saved, per workload.
    pub(super) saved: Mutex<HashMap<String, String>>,
    /// The pods, nodes and workloads as JSON, converted once per version.
    pub(super) pod_json: JsonCache,
    pub(super) node_json: JsonCache,
    pub(super) workload_json: JsonCache,
    pub(super) event_json: JsonCache,
    pub(super) logs: Arc<LogHub>,
    pub(super) tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for KubeBackend {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl KubeBackend {
    /// The namespace a `KIND/NAME` reference without one falls in.
    pub fn default_namespace(&self) -> &str {
        &self.default_namespace
    }

    /// Containers whose logs are followed now.
    pub fn following(&self) -> usize {
        self.logs.following()
    }

    pub(super) fn values(stores: &[Watched]) -> Vec<Value> {
        stores
            .iter()
            .flat_map(|watched| watched.store.state())
            .filter_map(|object| serde_json::to_value(object.as_ref()).ok())
            .collect()
    }

    /// The pods whose labels name `workload` (or its Ray cluster), read in full: one workload's
    /// pods without converting every pod of the cluster, which at ten thousand pods took most of a
    /// second. [`pods_of`] then picks this incarnation's in rank order, as from all of them.
    pub(super) fn pods_labelled_for(&self, workload: &Value) -> Vec<Value> {
        let namespace = str_at(workload, "/metadata/namespace").unwrap_or("default");
        let names: Vec<&str> = [
            str_at(workload, "/metadata/name"),
            str_at(workload, "/status/rayClusterName"),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.pods
            .iter()
            .flat_map(|watched| watched.store.state())
            .filter(|pod| {
                pod.metadata.namespace.as_deref().unwrap_or("default") == namespace
                    && pod
                        .metadata
                        .labels
                        .as_ref()
                        .is_some_and(|labels| workload::labelled_for(labels, &names))
            })
            .filter_map(|pod| serde_json::to_value(pod.as_ref()).ok())
            .collect()
    }

    /// The nodes of these names, read in full.
    pub(super) fn nodes_named<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<Value> {
        let names: BTreeSet<&str> = names.into_iter().collect();
        self.nodes
            .store
            .state()
            .into_iter()
            .filter(|node| {
                node.metadata
                    .name
                    .as_deref()
                    .is_some_and(|name| names.contains(name))
            })
            .filter_map(|node| serde_json::to_value(node.as_ref()).ok())
            .collect()
    }

    /// A workload that just ended is shown as ending until its containers' last log lines are
    /// written (or `LOG_SETTLE` passes): the kubelet's verdict can arrive before the lines that
    /// explain it, and the failure is decided once, on the evidence there is.
    fn settle(&self, snapshot: &mut JobSnapshot, pods: &[&Value]) {
        let mut ending = lock(&self.ending);
        if !snapshot.state.is_terminal() {
            ending.remove(&snapshot.job_id);
            return;
        }
        let since = *ending
            .entry(snapshot.job_id.clone())
            .or_insert_with(std::time::Instant::now);
        // Only the pods that ended hold the lines that explain the end; the others may well go on
        // writing until they are stopped.
        let uids: Vec<&str> = pods
            .iter()
            .filter(|pod| workload::pod_ended(pod))
            .filter_map(|pod| str_at(pod, "/metadata/uid"))
            .collect();
        if since.elapsed() < LOG_SETTLE && self.logs.streaming(&uids) {
            snapshot.reason = Some(format!(
                "{} (reading the last log lines)",
                snapshot.state_raw
            ));
            snapshot.state = crate::model::JobState::Completing;
            // Nothing else may change before the settling is over: the engine looks again at its
            // next tick rather than at its next poll.
            self.jobs_changed.store(true, Ordering::Relaxed);
            if let Some(waker) = lock(&self.waker).as_ref() {
                waker.notify_one();
            }
        }
    }

    fn workload_values(&self) -> Vec<(WorkloadKind, Arc<Value>)> {
        let objects: Vec<(WorkloadKind, Arc<DynamicObject>)> = self
            .workloads
            .iter()
            .flat_map(|(kind, stores)| {
                stores
                    .iter()
                    .flat_map(|watched| watched.store.state())
                    .map(move |object| (*kind, object))
            })
            .collect();
        let values = self.workload_json.values(
            &objects
                .iter()
                .map(|(_, object)| Arc::clone(object))
                .collect::<Vec<_>>(),
        );
        objects
            .into_iter()
            .map(|(kind, _)| kind)
            .zip(values)
            .collect()
    }

    /// The workload as the watchers have it now.
    pub(super) fn cached_workload(&self, reference: &WorkloadRef) -> Option<Value> {
        self.workloads
            .iter()
            .filter(|(kind, _)| *kind == reference.kind)
            .flat_map(|(_, stores)| stores.iter())
            .flat_map(|watched| watched.store.state())
            .find(|object| {
                object.metadata.name.as_deref() == Some(reference.name.as_str())
                    && object.metadata.namespace.as_deref() == Some(reference.namespace.as_str())
            })
            .and_then(|object| serde_json::to_value(object.as_ref()).ok())
    }

    fn wanted(&self, reference: &WorkloadRef, workload: &Value) -> bool {
        // A TrainJob's JobSet is watched as its TrainJob.
        if reference.kind == WorkloadKind::JobSet && workload::owned_by(workload, "TrainJob") {
            return false;
        }
        // A RayJob's cluster is watched as its RayJob.
        if reference.kind == WorkloadKind::RayCluster && workload::owned_by(workload, "RayJob") {
            return false;
        }
        enrolled(workload) || lock(&self.watched).contains(&reference.id())
    }

    /// The JobSet that runs a TrainJob's pods (it has the TrainJob's name), as the watchers have it.
    pub(super) fn jobset_of(&self, reference: &WorkloadRef) -> Option<Value> {
        if reference.kind != WorkloadKind::TrainJob {
            return None;
        }
        self.cached_workload(&WorkloadRef {
            kind: WorkloadKind::JobSet,
            ..reference.clone()
        })
    }

    /// The node's log: its health conditions and Warning events as lines (`node_lines`), which the
    /// engine reads as the node's kernel log.
    fn node_log_path(&self, node: &str) -> PathBuf {
        self.data_dir.join("nodes").join(format!("{node}.log"))
    }

    fn log_path(&self, reference: &WorkloadRef, restart: u32) -> PathBuf {
        self.data_dir
            .join("logs")
            .join(&reference.namespace)
            .join(format!("{}-{}", reference.kind.short(), reference.name))
            .join(format!("restart-{restart}.log"))
    }

    fn resource(kind: WorkloadKind) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(kind.group(), kind.version(), kind.kind()),
            kind.plural(),
        )
    }

    pub(super) fn workload_api(&self, reference: &WorkloadRef) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &reference.namespace,
            &Self::resource(reference.kind),
        )
    }

    fn pod_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn node_api(&self) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
        )
    }

    /// Replaces the workload with `manifest`: deletes it, force-deletes its pods `stuck` on a lost
    /// node, waits (bounded) for it to be gone and creates the manifest.
    pub(super) async fn replace(
        &self,
        reference: &WorkloadRef,
        manifest: Value,
        stuck: &[String],
    ) -> Result<(), BackendError> {
        let request = Self::recreate_request(reference);
        let api = self.workload_api(reference);
        match api
            .delete(&reference.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(action_error(err, &request)),
        }
        let pod_api = self.pod_api(&reference.namespace);
        for pod in stuck {
            let force = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::background()
            };
            if let Err(err) = pod_api.delete(pod, &force).await {
                tracing::warn!(pod, %err, "deleting a pod stuck on a lost node");
            }
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(self.config.recreate_timeout_secs);
        loop {
            match api.get_opt(&reference.name).await {
                Ok(None) => break,
                Ok(Some(_)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Some(_)) => {
                    return Err(BackendError::Unavailable(format!(
                        "{} was deleted but is still there after {} s (finalizers?); it is \
                         re-created on the next try",
                        reference.id(),
                        self.config.recreate_timeout_secs
                    )));
                }
                Err(err) => return Err(api_error(err)),
            }
        }
        let object: DynamicObject = serde_json::from_value(manifest)
            .map_err(|err| BackendError::Invalid(format!("the new manifest: {err}")))?;
        api.create(&PostParams::default(), &object)
            .await
            .map_err(|err| action_error(err, &request))?;
        Ok(())
    }

    /// Refuses a workload that neither opted in nor is watched: runguard does not touch it.
    pub(super) fn may_touch(
        &self,
        reference: &WorkloadRef,
        workload: &Value,
    ) -> Result<(), BackendError> {
        if enrolled(workload) || lock(&self.watched).contains(&reference.id()) {
            return Ok(());
        }
        Err(BackendError::Invalid(format!(
            "{} did not opt in (label {}=true) and is not watched: runguard does not touch it",
            reference.id(),
            workload::ENABLED_LABEL
        )))
    }

    pub(super) fn reference(&self, job_id: &str) -> Result<WorkloadRef, BackendError> {
        WorkloadRef::parse(job_id, &self.default_namespace).ok_or_else(|| {
            BackendError::Invalid(format!(
                "{job_id:?} is not a workload reference (KIND/NAMESPACE/NAME, e.g. pytorchjob/ml/llama)"
            ))
        })
    }
}

#[async_trait]
impl Backend for KubeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Kubernetes
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::of(&[
            Can::Requeue,
            Can::Resubmit,
            Can::Recreate,
            Can::Drain,
            Can::UsableNodes,
            Can::Signal,
            Can::UpdateExclusions,
        ])
    }

    async fn list_jobs(&self) -> Result<Vec<JobSnapshot>, BackendError> {
        self.ready().await?;
        let pods: Vec<_> = self
            .pods
            .iter()
            .flat_map(|watched| watched.store.state())
            .collect();
        let pods = self.pod_json.values(&pods);
        let index = PodIndex::new(pods.iter().map(|pod| pod.as_ref()));
        let nodes = self.node_json.values(&self.nodes.store.state());
        // Each workload is shown the nodes its pods are on, looked up by name: searching the whole
        // pool for each pod cost ten thousand pods times a thousand nodes a pass.
        let node_by_name: HashMap<&str, &Value> = nodes
            .iter()
            .filter_map(|node| str_at(node, "/metadata/name").map(|name| (name, node.as_ref())))
            .collect();
        let events: Vec<_> = self
            .events
            .iter()
            .flat_map(|watched| watched.store.state())
            .collect();
        let events = self.event_json.values(&events);
        let events = EventIndex::new(events.iter().map(|event| event.as_ref()));
        let mut snapshots = Vec::new();
        // The nodes the watched workloads' pods are on: their node logs are written below.
        let mut their_node_names: BTreeSet<String> = BTreeSet::new();
        for (kind, workload) in self.workload_values() {
            let Some(reference) = WorkloadRef::of(kind, &workload) else {
                continue;
            };
            if !self.wanted(&reference, &workload) {
                continue;
            }
            let restart = workload::restart_count(&workload);
            let log = self.log_path(&reference, restart);
            // The unified log is runguard's own file: it exists from the listing on, so that a
            // workload whose pods write nothing reads as silent, not as a log that cannot be found
            // (which would be left unread and never called hung). Should it fail, that warning says so.
            if !log.exists()
                && let Some(dir) = log.parent()
                && std::fs::create_dir_all(dir).is_ok()
            {
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log);
            }
            let mine = pods_of(kind, &workload, &index);
            let mut their_nodes: Vec<Value> = Vec::new();
            for name in mine.iter().filter_map(|pod| str_at(pod, "/spec/nodeName")) {
                if let Some(node) = node_by_name.get(name)
                    && !their_nodes
                        .iter()
                        .any(|known| str_at(known, "/metadata/name") == Some(name))
                {
                    their_nodes.push((*node).clone());
                }
            }
            their_node_names.extend(
                their_nodes
                    .iter()
                    .filter_map(|node| str_at(node, "/metadata/name"))
                    .map(str::to_string),
            );
            let Some(mut snapshot) = snapshot(
                kind,
                &workload,
                &mine,
                &their_nodes,
                Some(log.clone()),
                self.cluster.as_deref(),
            ) else {
                continue;
            };
            self.settle(&mut snapshot, &mine);
            self.save_spec(&reference, &workload).await;
            let lines = evidence(kind, &workload, &mine, &their_nodes, &events);
            if let Err(err) = self.logs.write_evidence(&log, &lines).await {
                tracing::warn!(log = %log.display(), %err, "writing evidence");
            }
            let pod_api = self.pod_api(&reference.namespace);
            // A pod's lines carry the global rank of its first process (torchrun's node rank times
            // its processes per node), so that ranks map to pods as they map to nodes on Slurm.
            let ranks_per_pod = snapshot.spec.gpus_per_node.max(1);
            for (pod_rank, pod) in workload::ranked(&mine) {
                let rank = pod_rank.saturating_mul(ranks_per_pod);
                let Some(pod_name) = str_at(pod, "/metadata/name") else {
                    continue;
                };
                let started = at(pod, "/status/containerStatuses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|status| {
                        at(status, "/state/running").is_some()
                            || at(status, "/state/terminated").is_some()
                    })
                    .filter_map(|status| str_at(status, "/name"));
                for container in started {
                    self.logs.ensure_followed(
                        pod_api.clone(),
                        Follow {
                            namespace: reference.namespace.clone(),
                            pod: pod_name.to_string(),
                            pod_uid: str_at(pod, "/metadata/uid").unwrap_or(pod_name).to_string(),
                            container: container.to_string(),
                            rank,
                            log: log.clone(),
                        },
                    );
                }
            }
            snapshots.push(snapshot);
        }
        for name in &their_node_names {
            if let Some(node) = node_by_name.get(name.as_str()) {
                let path = self.node_log_path(name);
                let lines = workload::evidence::node_lines(node, &events);
                if let Err(err) = self.logs.write_evidence(&path, &lines).await {
                    tracing::warn!(log = %path.display(), %err, "writing a node's signals");
                }
            }
        }
        Ok(snapshots)
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobSnapshot>, BackendError> {
        let reference = self.reference(job_id)?;
        self.ready().await?;
        let Some(workload) = self.cached_workload(&reference) else {
            return Ok(None);
        };
        let pods = self.pods_labelled_for(&workload);
        let restart = workload::restart_count(&workload);
        let mine = pods_of(reference.kind, &workload, &PodIndex::new(&pods));
        let nodes = self.nodes_named(mine.iter().filter_map(|pod| str_at(pod, "/spec/nodeName")));
        Ok(snapshot(
            reference.kind,
            &workload,
            &mine,
            &nodes,
            Some(self.log_path(&reference, restart)),
            self.cluster.as_deref(),
        ))
    }

    async fn requeue(
        &self,
        job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.recreate(job_id, exclude, &[]).await
    }

    async fn recreate(
        &self,
        job_id: &str,
        exclude: &[String],
        changes: &[SpecChange],
    ) -> Result<ActionOutcome, BackendError> {
        let reference = self.reference(job_id)?;
        let current = self.current_spec(&reference).await?;
        self.may_touch(&reference, &current)?;
        let restart = workload::restart_count(&current) + 1;
        let jobset = self.jobset_of(&reference);
        let manifest = next_incarnation(
            reference.kind,
            &current,
            jobset.as_ref(),
            restart,
            exclude,
            changes,
        );
        // Pods of the old incarnation on a node that is gone never finish terminating: they are
        // deleted at once, as the node cannot confirm it anyway.
        let pods = self.pods_labelled_for(&current);
        let mine = pods_of(reference.kind, &current, &PodIndex::new(&pods));
        let nodes = self.nodes_named(mine.iter().filter_map(|pod| str_at(pod, "/spec/nodeName")));
        let stuck: Vec<String> = mine
            .into_iter()
            .filter(|pod| {
                str_at(pod, "/spec/nodeName").is_some_and(|node| {
                    nodes
                        .iter()
                        .find(|n| str_at(n, "/metadata/name") == Some(node))
                        .and_then(workload::node_readiness)
                        .is_some_and(|(status, _, _)| status != "True")
                })
            })
            .filter_map(|pod| str_at(pod, "/metadata/name").map(str::to_string))
            .collect();
        if let Some(patch) =
            suspend::in_place_patch(reference.kind, &current, &manifest, exclude, changes)
        {
            return self
                .restart_in_place(&reference, &patch, &stuck, restart, exclude, changes)
                .await;
        }
        self.replace(&reference, manifest, &stuck).await?;
        Ok(restart_outcome(
            format!("re-created {} as restart {restart}", reference.id()),
            exclude,
            changes,
            None,
            &stuck,
        ))
    }

    async fn resubmit(
        &self,
        spec: &crate::model::JobSpec,
        _exclude: &[String],
        _tag: &str,
    ) -> Result<ActionOutcome, BackendError> {
        Err(BackendError::Invalid(format!(
            "a Kubernetes workload is re-created, not resubmitted ({}): use mode = \"requeue\"",
            spec.name
        )))
    }

    async fn submit(&self, job: &NewJob) -> Result<ActionOutcome, BackendError> {
        let (reference, manifest) = super::submit::manifest(job, &self.default_namespace)?;
        let request = format!("POST {}", reference.kind.path(&reference.namespace, None));
        let object: DynamicObject = serde_json::from_value(manifest)
            .map_err(|err| BackendError::Invalid(format!("the manifest of {}: {err}", job.name)))?;
        self.workload_api(&reference)
            .create(&PostParams::default(), &object)
            .await
            .map_err(|err| action_error(err, &request))?;
        Ok(ActionOutcome {
            detail: format!("created {} for {}", reference.id(), job.name),
            new_job_id: Some(reference.id()),
        })
    }

    fn submit_command(&self, job: &NewJob) -> String {
        match super::submit::manifest(job, &self.default_namespace) {
            Ok((reference, _)) => format!(
                "POST {} (the manifest with label {}=true and annotation {})",
                reference.kind.path(&reference.namespace, None),
                workload::ENABLED_LABEL,
                super::submit::TAG_ANNOTATION
            ),
            Err(err) => format!("(cannot create: {err})"),
        }
    }

    async fn cancel(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        let reference = self.reference(job_id)?;
        let request = format!(
            "DELETE {}",
            reference
                .kind
                .path(&reference.namespace, Some(&reference.name))
        );
        match self
            .workload_api(&reference)
            .delete(&reference.name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(ActionOutcome {
                detail: format!("deleted {}", reference.id()),
                new_job_id: None,
            }),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(ActionOutcome {
                detail: format!("{} was already gone", reference.id()),
                new_job_id: None,
            }),
            Err(err) => Err(action_error(err, &request)),
        }
    }

    async fn set_exclusions(
        &self,
        job_id: &str,
        nodes: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.exclude_from_pending(job_id, nodes).await
    }

    async fn signal_job(&self, job_id: &str, signal: &str) -> Result<ActionOutcome, BackendError> {
        self.send_signal(job_id, signal).await
    }

    fn lists_from_cache(&self) -> bool {
        // The reflectors' stores: a listing asks the API server nothing.
        true
    }

    fn take_jobs_changed(&self) -> bool {
        self.jobs_changed.swap(false, Ordering::Relaxed)
    }

    fn can_signal(&self, job_id: &str) -> bool {
        super::signal::takes_signal(job_id, self.default_namespace())
    }

    async fn drain_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        let patch = self.cordon_patch(node, reason);
        let request = format!("PATCH /api/v1/nodes/{node} (merge) {patch}");
        self.node_api()
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|err| action_error(err, &request))?;
        Ok(ActionOutcome {
            detail: format!("cordoned {node} and tainted it {SUSPECT_TAINT}:NoSchedule"),
            new_job_id: None,
        })
    }

    async fn resume_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        let Some(patch) = self.uncordon_patch(node, reason) else {
            return Ok(ActionOutcome {
                detail: format!(
                    "{node} carries no {SUSPECT_TAINT} taint of runguard's for {reason:?}: nothing to undo"
                ),
                new_job_id: None,
            });
        };
        let request = format!("PATCH /api/v1/nodes/{node} (merge) {patch}");
        self.node_api()
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|err| action_error(err, &request))?;
        let uncordoned = patch.pointer("/spec/unschedulable").is_some();
        Ok(ActionOutcome {
            detail: format!(
                "removed runguard's {SUSPECT_TAINT} taint from {node}{}",
                if uncordoned {
                    " and lifted the cordon it set"
                } else {
                    "; the cordon someone else set stays"
                }
            ),
            new_job_id: None,
        })
    }

    fn command_for(&self, kind: ActionKind, params: &ActionParams) -> String {
        let job_id = params.job_id.as_deref().unwrap_or_default();
        let reference = WorkloadRef::parse(job_id, &self.default_namespace);
        match (kind, reference) {
            (ActionKind::Requeue | ActionKind::Recreate, Some(reference)) => {
                let mut command = Self::recreate_request(&reference);
                // The diff against the workload as the watchers have it now.
                let current = self.cached_workload(&reference).or_else(|| {
                    std::fs::read_to_string(self.spec_file(&reference))
                        .ok()
                        .and_then(|text| serde_json::from_str(&text).ok())
                });
                if let Some(current) = current {
                    let restart = workload::restart_count(&current) + 1;
                    let next = next_incarnation(
                        reference.kind,
                        &current,
                        self.jobset_of(&reference).as_ref(),
                        restart,
                        &params.exclude_nodes,
                        &params.changes,
                    );
                    if let Some(patch) = suspend::in_place_patch(
                        reference.kind,
                        &current,
                        &next,
                        &params.exclude_nodes,
                        &params.changes,
                    ) {
                        // Suspended with its new spec for Kueue to admit again, not re-created.
                        command = format!(
                            "{}; Kueue admits it again and resumes it",
                            Self::in_place_request(&reference, &patch)
                        );
                    }
                    command.push_str(" with the spec changed:\n");
                    command.push_str(&spec_diff(&clean(reference.kind, &current), &next));
                }
                command
            }
            (ActionKind::CheckpointNow, _) => {
                self.signal_commands(job_id, params.signal.as_deref().unwrap_or("USR1"))
            }
            (ActionKind::UpdateExclusions, Some(reference)) => {
                self.exclusion_command(&reference, &params.exclude_nodes)
            }
            (ActionKind::Cancel, Some(reference)) => format!(
                "DELETE {}",
                reference
                    .kind
                    .path(&reference.namespace, Some(&reference.name))
            ),
            (ActionKind::DrainNode, _) => {
                let node = params.node.as_deref().unwrap_or("<node>");
                let patch = self.cordon_patch(node, params.reason.as_deref().unwrap_or("runguard"));
                format!("PATCH /api/v1/nodes/{node} (merge) {patch}")
            }
            (ActionKind::ResumeNode, _) => {
                let node = params.node.as_deref().unwrap_or("<node>");
                match self.uncordon_patch(node, params.reason.as_deref().unwrap_or("runguard")) {
                    Some(patch) => format!("PATCH /api/v1/nodes/{node} (merge) {patch}"),
                    None => format!("(nothing of runguard's to undo on {node})"),
                }
            }
            (kind, _) => format!(
                "({} is not available on Kubernetes for {job_id})",
                kind.as_str()
            ),
        }
    }

    fn node_log(&self, node: &str) -> Option<PathBuf> {
        Some(self.node_log_path(node))
    }

    fn set_waker(&self, waker: Arc<tokio::sync::Notify>) {
        *lock(&self.waker) = Some(waker);
    }

    fn set_watched(&self, job_refs: &[String]) {
        let mut watched = lock(&self.watched);
        watched.clear();
        watched.extend(self.config.watch.iter().cloned());
        watched.extend(job_refs.iter().filter_map(|reference| {
            WorkloadRef::parse(reference, &self.default_namespace).map(|r| r.id())
        }));
    }

    async fn node_inventory(&self) -> Result<Option<crate::capacity::NodeListing>, BackendError> {
        Ok(self.node_listing())
    }

    async fn usable_nodes(
        &self,
        job_id: &str,
        _spec: &crate::model::JobSpec,
    ) -> Result<Option<NodeCapacity>, BackendError> {
        let reference = self.reference(job_id)?;
        // The workload as it is, else as it was saved: which nodes suit it depends on its templates.
        let workload = match self.cached_workload(&reference) {
            Some(workload) => workload,
            None => match self.current_spec(&reference).await {
                Ok(workload) => workload,
                Err(BackendError::NoSuchJob(_)) => return Ok(None),
                Err(err) => return Err(err),
            },
        };
        // A TrainJob's pods are its JobSet's: without it, which nodes suit them cannot be told.
        let replicas = match self.jobset_of(&reference) {
            Some(jobset) => placement::replicas(WorkloadKind::JobSet, &jobset),
            None => placement::replicas(reference.kind, &workload),
        };
        if replicas.is_empty() {
            return Ok(None);
        }
        let nodes = Self::values(std::slice::from_ref(&self.nodes));
        Ok(Some(placement::capacity(
            &replicas,
            &nodes,
            placement::elastic_min(reference.kind, &workload),
        )))
    }
}

/// Where the Kubernetes backend writes pod logs and saved specs when the config does not say.
pub fn default_data_dir(store_path: &Path) -> PathBuf {
    store_path
        .parent()
        .map(|dir| dir.join("kube"))
        .unwrap_or_else(|| PathBuf::from("kube"))
}

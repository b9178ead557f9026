//! The domain model: workflows, their attempts and everything the engine learns or decides about them.
//!
//! Plain data with serde; no I/O lives here. The store persists these types and the frontends display them.

mod action;
mod attempt;
mod evidence;
mod narrative;
mod node;
mod phase;
mod remedy;
mod workflow;

pub use action::{Action, ActionKind, ActionParams, ActionState, SpecChange};
pub use attempt::{Attempt, JobState};
pub use evidence::{
    AlertEvent, Anomaly, AnomalyKind, Attribution, Checkpoint, Component, Culprit, EvidenceLine,
    JournalEntry, Notification, Severity, ThroughputSample,
};
pub use narrative::Narrative;
pub use node::{AddedExclusion, IncidentSource, NodeIncident, NodeRecord, NodeState};
pub use phase::{
    Multiphase, MultiphaseId, MultiphaseState, Phase, PhaseJob, PhaseSpec, PhaseState,
};
pub use remedy::{MicroBatch, Remedy, RemedyKind, RemedyParams, Toleration};
pub use workflow::{BackendKind, JobSpec, RecoveryLimits, Workflow, WorkflowStatus};

/// Store-assigned identifier of a workflow.
pub type WorkflowId = i64;
/// Store-assigned identifier of an action.
pub type ActionId = i64;

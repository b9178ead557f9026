//! Multiphase workflows: the workflow file, and the pure rule that moves phases forward. The engine
//! (`engine::phases`) applies the rule each pass; the store keeps the phases.

pub mod advance;
pub mod file;
pub mod record;

pub use advance::{RunOutcome, Step, advance};
pub use file::{WorkflowFile, WorkflowFileError};

/// The environment variable that tells a phase's job where its own checkpoints are.
pub const CHECKPOINT_DIR_ENV: &str = "RUNGUARD_CHECKPOINT_DIR";
/// The environment variable that tells a phase's job which phase it runs.
pub const PHASE_ENV: &str = "RUNGUARD_PHASE";

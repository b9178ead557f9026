//! runguard's engine: it watches distributed training runs on a scheduler, detects failures, attributes
//! them to a cause and a culprit, and recovers the run from its last checkpoint on healthy nodes.
//!
//! The engine is a library with no UI code; the CLI, the headless mode and the TUI drive it through
//! events out and commands in.

pub mod alert;
pub mod attribute;
pub mod backend;
pub mod clock;
pub mod config;
pub mod detect;
pub mod engine;
pub mod explain;
pub mod headless;
pub mod http;
pub mod metrics;
pub mod model;
pub mod paths;
pub mod recover;
pub mod redact;
pub mod report;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod tui;

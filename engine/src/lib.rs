//! runguard's engine: it watches distributed training runs on a scheduler, detects failures, attributes
//! them to a cause and a culprit, and recovers the run from its last checkpoint on healthy nodes.
//!
//! The path of a decision reads in the module names: `telemetry` and `backend` observe, `detect` and
//! `attribute` interpret, `recover` decides (pure functions), `engine` runs the loop and acts, `store`
//! journals. This crate has no UI: the `runguard` binary's cockpit and headless mode drive it through
//! events out and commands in.

pub mod alert;
pub mod attribute;
pub mod backend;
pub mod capacity;
pub mod chaos;
pub mod clock;
pub mod config;
pub mod detect;
pub mod engine;
pub mod explain;
pub mod http;
pub mod ledger;
pub mod metrics;
pub mod model;
pub mod paths;
pub mod phases;
pub mod recover;
pub mod redact;
#[cfg(feature = "sim")]
pub mod replay;
pub mod report;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod text;

//! Telemetry: turning log bytes into typed records the detectors and attribution read.
//!
//! `line` frames one raw line (rank label, timestamp), `record` recognises what it says,
//! `tail` follows a log file incrementally from a persisted offset.

pub mod discover;
pub mod ib_port;
pub mod line;
pub mod line_facts;
pub mod node_signals;
pub mod pipeline;
pub mod readings;
pub mod record;
pub mod step_timing;
pub mod straggler_report;
pub mod structured;
pub mod tail;
pub mod traceback;
pub mod watch;
pub mod whole_file;
pub mod xid;

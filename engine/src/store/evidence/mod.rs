//! What the engine learned about a run: its progress (checkpoints, throughput), the log lines and
//! tracebacks it kept, the anomalies raised, the attributions made and the journal of decisions.

mod anomalies;
mod attributions;
mod checkpoints;
mod journal;
mod lines;
mod throughput;
mod tracebacks;

pub use checkpoints::CheckpointCount;

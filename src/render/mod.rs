//! Text renderings of what the engine crate computes for `runguard explain` and `runguard eval`.

pub mod eval;
pub mod explain;

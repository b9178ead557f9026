//! Slurm: reading what the scheduler says. The parsers here are the first part of the Slurm backend;
//! the command runner and the `Backend` implementation build on them.

pub mod backend;
pub mod comment;
pub mod hostlist;
pub mod squeue;

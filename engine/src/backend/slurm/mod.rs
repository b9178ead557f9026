//! Slurm: the parsers of what the scheduler says, the two ways to reach it (command-line tools and
//! slurmrestd) behind [`api::SlurmApi`], and the `Backend` built on them.

pub mod api;
pub mod backend;
pub mod cli;
pub mod comment;
pub mod hostlist;
pub mod inventory;
pub mod jobcomp;
pub mod json;
pub mod rest;
pub mod sacct;
pub mod scontrol;
pub mod squeue;
pub mod submit;
pub mod token;
pub mod via_rest;
pub mod words;

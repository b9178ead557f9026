//! The integration tests, one binary: each file of `tests/` is a module of it, sharing `support/`
//! and the Kubernetes API stand-in of `kube_fake/`. `cargo test NAME` runs the tests whose name
//! contains NAME; `cargo test --test integration slurm::` one file's.
//!
//! A module that needs a backend left out of the build (`--no-default-features --features slurm`)
//! is left out with it.

// A build without some backend leaves some of the shared helpers unused.
#![cfg_attr(
    not(all(feature = "slurm", feature = "kubernetes", feature = "sim")),
    allow(dead_code, unused_imports)
)]

mod kube_fake;
mod support;

#[cfg(feature = "sim")]
mod alerts;
mod attempt_logs;
mod capacity;
#[cfg(feature = "sim")]
mod chaos;
#[cfg(feature = "sim")]
mod cli;
#[cfg(feature = "sim")]
mod cockpit;
mod correlation;
mod dead_nodes;
mod detectors;
#[cfg(feature = "sim")]
mod engine_scenarios;
mod eval;
mod kube_fake_selftest;
mod kubectl;
#[cfg(feature = "kubernetes")]
mod kubernetes;
#[cfg(feature = "sim")]
mod metrics;
mod node_ledger;
mod pace;
mod phases;
mod proactive;
#[cfg(feature = "sim")]
mod replay;
mod report;
mod signatures;
#[cfg(feature = "slurm")]
mod slurm;
#[cfg(feature = "slurm")]
mod slurm_capacity;
#[cfg(feature = "slurm")]
mod slurm_ddp;
#[cfg(feature = "slurm")]
mod slurm_ledger;
#[cfg(feature = "slurm")]
mod slurm_phases;
#[cfg(feature = "slurm")]
mod slurmrestd;

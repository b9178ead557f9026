//! The embedded simulated cluster.

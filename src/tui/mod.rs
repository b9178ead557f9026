//! The cockpit: an interactive terminal frontend. It reads the store, draws, and turns keys into
//! actions; approvals go to the engine through the store's command table, so the process that runs the
//! engine and one that only views it behave the same. The engine never imports this module.

pub mod app;
pub mod columns;
pub mod log_view;
pub mod panes;
pub mod run;
pub mod snapshot;
pub mod theme;

#[cfg(all(test, feature = "sim"))]
mod tests;

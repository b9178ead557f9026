//! What runguard reports about a workflow: everything recorded about it ([`WorkflowHistory`]) and where
//! its time went after each failure ([`downtime`]), for the frontends to show.

pub mod downtime;
mod history;

pub use history::WorkflowHistory;

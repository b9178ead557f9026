//! Recovery: the policy that turns an attributed failure into intents, and the execution of approved ones.

pub mod overrides;
pub mod policy;

pub use policy::{Decision, Intent, Policy, decide};

//! runguard's frontends over the engine crate (`runguard-engine`): the composition root that builds an
//! engine from a config, headless mode, the cockpit, and the text renderings of status, explain, eval and
//! the recovery report. The binary (`main.rs`) is the command line over these.

pub mod capacity;
pub mod compose;
pub mod headless;
pub mod nodes;
pub mod phases;
pub mod render;
#[cfg(feature = "sim")]
pub mod replay;
pub mod status;
pub mod submit;
pub mod tui;

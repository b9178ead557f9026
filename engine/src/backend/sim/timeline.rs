//! The sim's accelerated timeline, kept in `timeline.json` so a restarted engine continues the same
//! simulated time instead of jumping back to the start.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::clock::{AcceleratedClock, Clock};

use super::SimError;
use super::files::{TIMELINE_FILE, load_state, write_atomic};

/// Where every fresh simulated timeline starts: Monday 2026-01-05 08:00:00 UTC.
const SIM_EPOCH_SECS: i64 = 1_767_600_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Timeline {
    /// Simulated time at `real_origin`.
    sim_origin: DateTime<Utc>,
    real_origin: DateTime<Utc>,
    /// Simulated seconds per real second.
    speed: f64,
}

/// The sim's clock: loads `<dir>/timeline.json` or starts a new timeline at the sim epoch. A different
/// `speed` rebases the timeline at the current simulated time, so time never jumps.
pub fn timeline(dir: &Path, speed: f64) -> Result<AcceleratedClock, SimError> {
    if !(speed.is_finite() && speed > 0.0) {
        return Err(SimError::Speed(speed));
    }
    fs::create_dir_all(dir).map_err(|err| SimError::io(dir, err))?;
    let path = dir.join(TIMELINE_FILE);
    let stored: Option<Timeline> = match fs::read(&path) {
        Ok(bytes) => Some(
            serde_json::from_slice(&bytes).map_err(|err| SimError::State {
                path: path.clone(),
                message: err.to_string(),
            })?,
        ),
        Err(err) if err.kind() == ErrorKind::NotFound => None,
        Err(err) => return Err(SimError::io(path, err)),
    };
    let now = Utc::now();
    let timeline = match stored {
        Some(stored) if same_speed(stored.speed, speed) => stored,
        Some(stored) => {
            let current =
                AcceleratedClock::new(stored.sim_origin, stored.real_origin, stored.speed).now();
            save(
                &path,
                Timeline {
                    sim_origin: current,
                    real_origin: now,
                    speed,
                },
            )?
        }
        None => save(
            &path,
            Timeline {
                sim_origin: fresh_origin(dir),
                real_origin: now,
                speed,
            },
        )?,
    };
    Ok(AcceleratedClock::new(
        timeline.sim_origin,
        timeline.real_origin,
        timeline.speed,
    ))
}

/// Where a new timeline starts: the sim epoch, or where a sim whose timeline file was lost had got to,
/// so its jobs do not stand still until the clock catches up with them.
fn fresh_origin(dir: &Path) -> DateTime<Utc> {
    let epoch = DateTime::from_timestamp(SIM_EPOCH_SECS, 0).unwrap_or(DateTime::UNIX_EPOCH);
    let reached = load_state(dir)
        .ok()
        .flatten()
        .and_then(|state| DateTime::from_timestamp_millis(state.now_ms));
    reached.map_or(epoch, |reached| reached.max(epoch))
}

fn same_speed(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn save(path: &Path, timeline: Timeline) -> Result<Timeline, SimError> {
    let bytes = serde_json::to_vec_pretty(&timeline).map_err(|err| SimError::State {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    write_atomic(path, &bytes)?;
    Ok(timeline)
}

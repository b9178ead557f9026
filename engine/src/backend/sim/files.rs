//! The sim's files: appending log lines, the checkpoint tracker files and the atomically replaced
//! `state.json` that says how much of each log is committed.
//!
//! A log is only ever written at its committed length, so lines written by a process that died before
//! it saved the state are cut off and written again, identically, by the next one.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::SimError;
use super::cluster::{World, checkpoint_dir};
use super::state::SimState;

pub(super) const STATE_FILE: &str = "state.json";
pub(super) const TIMELINE_FILE: &str = "timeline.json";
const TRACKER_FILE: &str = "latest_checkpointed_iteration.txt";
/// Directories the sim owns inside its directory.
const OWNED_DIRS: [&str; 3] = ["logs", "nodes", "checkpoints"];

/// What an advance or an action produced, waiting to be written by [`commit`].
#[derive(Debug, Default)]
pub(super) struct Output {
    /// Bytes to append, per file relative to the sim directory.
    pub appends: BTreeMap<String, Vec<u8>>,
    /// Workloads whose checkpoint tracker file must be rewritten.
    pub trackers: BTreeSet<String>,
    /// The state changed and must be saved.
    pub changed: bool,
}

impl Output {
    pub fn append(&mut self, file: &str, text: &str) {
        self.appends
            .entry(file.to_string())
            .or_default()
            .extend_from_slice(text.as_bytes());
        self.changed = true;
    }

    /// Makes sure the file exists after the next commit, even if nothing is written to it yet.
    pub fn touch(&mut self, file: &str) {
        self.appends.entry(file.to_string()).or_default();
        self.changed = true;
    }
}

/// Writes what `out` holds, then the state that covers it.
pub(super) fn commit(world: &mut World, out: &mut Output) -> Result<(), SimError> {
    if !out.changed {
        return Ok(());
    }
    while let Some((file, bytes)) = out.appends.pop_first() {
        let committed = world.state.files.get(&file).copied().unwrap_or(0);
        match append_at(&world.dir.join(&file), committed, &bytes) {
            Ok(length) => {
                world.state.files.insert(file, length);
            }
            Err(err) => {
                out.appends.insert(file, bytes);
                return Err(err);
            }
        }
    }
    while let Some(name) = out.trackers.pop_first() {
        if let Err(err) = write_tracker(world, &name) {
            out.trackers.insert(name);
            return Err(err);
        }
    }
    let bytes = serde_json::to_vec(&world.state).map_err(|err| SimError::State {
        path: world.dir.join(STATE_FILE),
        message: err.to_string(),
    })?;
    write_atomic(&world.dir.join(STATE_FILE), &bytes)?;
    out.changed = false;
    Ok(())
}

/// Writes `bytes` at offset `committed` of `path` (cutting anything after it); returns the new length.
fn append_at(path: &Path, committed: u64, bytes: &[u8]) -> Result<u64, SimError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|err| SimError::io(parent, err))?;
    }
    let io = |err| SimError::io(path, err);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io)?;
    let length = file.metadata().map_err(io)?.len();
    let start = if length < committed {
        tracing::warn!(path = %path.display(), length, committed, "sim log is shorter than its state says; continuing at its end");
        length
    } else {
        committed
    };
    if length != start {
        file.set_len(start).map_err(io)?;
    }
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    Ok(start + bytes.len() as u64)
}

/// Megatron's tracker file: the iteration of the workload's latest complete checkpoint.
fn write_tracker(world: &World, workload_name: &str) -> Result<(), SimError> {
    let Some(workload) = world.scenario.workload_index(workload_name) else {
        return Ok(());
    };
    let Some(iteration) = world.state.checkpoints.get(workload_name) else {
        return Ok(());
    };
    let dir = PathBuf::from(world.checkpoint_dir(workload));
    fs::create_dir_all(&dir).map_err(|err| SimError::io(&dir, err))?;
    write_atomic(&dir.join(TRACKER_FILE), iteration.to_string().as_bytes())
}

/// Writes a file whole, through a temporary file and a rename, so readers never see half of it.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SimError> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    fs::write(&temporary, bytes).map_err(|err| SimError::io(&temporary, err))?;
    fs::rename(&temporary, path).map_err(|err| SimError::io(path, err))
}

/// The persisted state, if there is one.
pub(super) fn load_state(dir: &Path) -> Result<Option<SimState>, SimError> {
    let path = dir.join(STATE_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(SimError::io(path, err)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|err| SimError::State {
            path,
            message: err.to_string(),
        })
}

/// Brings the files back to what the loaded state covers: logs cut to their committed length, tracker
/// files rewritten.
pub(super) fn restore(world: &mut World) -> Result<(), SimError> {
    for (file, committed) in world.state.files.iter_mut() {
        let path = world.dir.join(file);
        let length = match fs::metadata(&path) {
            Ok(metadata) => metadata.len(),
            Err(err) if err.kind() == ErrorKind::NotFound => {
                tracing::warn!(path = %path.display(), "sim log is missing; it starts again empty");
                *committed = 0;
                continue;
            }
            Err(err) => return Err(SimError::io(path, err)),
        };
        if length > *committed {
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|err| SimError::io(&path, err))?;
            file.set_len(*committed)
                .map_err(|err| SimError::io(&path, err))?;
        } else if length < *committed {
            tracing::warn!(path = %path.display(), length, committed = *committed, "sim log is shorter than its state says");
            *committed = length;
        }
    }
    let names: Vec<String> = world.state.checkpoints.keys().cloned().collect();
    for name in names {
        write_tracker(world, &name)?;
    }
    Ok(())
}

/// Removes the state, logs and default checkpoints of a sim (and the timeline, when asked).
pub(super) fn clear(dir: &Path, timeline: bool) -> Result<(), SimError> {
    let mut files = vec![STATE_FILE.to_string(), format!("{STATE_FILE}.tmp")];
    if timeline {
        files.extend([TIMELINE_FILE.to_string(), format!("{TIMELINE_FILE}.tmp")]);
    }
    for file in files {
        let path = dir.join(file);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(SimError::io(path, err)),
        }
    }
    for owned in OWNED_DIRS {
        let path = dir.join(owned);
        match fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(SimError::io(path, err)),
        }
    }
    Ok(())
}

/// Removes tracker files a previous run left in checkpoint directories outside the sim directory.
pub(super) fn forget_checkpoints(world: &World) -> Result<(), SimError> {
    for spec in &world.scenario.jobs {
        let path = PathBuf::from(checkpoint_dir(&world.dir, spec)).join(TRACKER_FILE);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(SimError::io(path, err)),
        }
    }
    Ok(())
}

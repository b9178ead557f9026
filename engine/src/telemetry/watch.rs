//! Wake-ups when a followed log changes (inotify through `notify`), so a new line is read within a
//! fraction of a second. Polling stays the ground truth: cluster file systems (NFS, Lustre, GPFS) often
//! deliver no events, and every file is still read once per poll interval; between two, a wake-up reads
//! only the files that changed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

/// Watches the directories of the followed files and signals `wake` when one of the files changes.
pub struct LogWatcher {
    watcher: Option<RecommendedWatcher>,
    /// Directories with an active watch.
    directories: HashSet<PathBuf>,
    /// The files whose changes wake the engine; shared with the event handler thread.
    files: Arc<Mutex<HashSet<PathBuf>>>,
    /// Followed files that changed since [`LogWatcher::take_changed`] was last called.
    changed: Arc<Mutex<HashSet<PathBuf>>>,
    wake: Arc<Notify>,
}

impl std::fmt::Debug for LogWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWatcher")
            .field("events", &self.watcher.is_some())
            .field("directories", &self.directories)
            .finish_non_exhaustive()
    }
}

impl Default for LogWatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl LogWatcher {
    /// A watcher that never wakes: following by polling only.
    pub fn polling_only() -> Self {
        Self {
            watcher: None,
            directories: HashSet::new(),
            files: Arc::default(),
            changed: Arc::default(),
            wake: Arc::new(Notify::new()),
        }
    }

    /// A watcher; without inotify (limits reached, unsupported platform) it only ever polls.
    pub fn new() -> Self {
        let files: Arc<Mutex<HashSet<PathBuf>>> = Arc::default();
        let changed: Arc<Mutex<HashSet<PathBuf>>> = Arc::default();
        let wake = Arc::new(Notify::new());
        let handler_files = Arc::clone(&files);
        let handler_changed = Arc::clone(&changed);
        let handler_wake = Arc::clone(&wake);
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else {
                return;
            };
            if matches!(event.kind, EventKind::Access(_)) {
                return;
            }
            let followed = crate::sync::lock(&handler_files);
            let mut hit = false;
            for path in event.paths.iter().filter(|path| followed.contains(*path)) {
                crate::sync::lock(&handler_changed).insert(path.clone());
                hit = true;
            }
            if hit {
                handler_wake.notify_one();
            }
        });
        let watcher = match watcher {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                tracing::warn!(%err, "no file events; following logs by polling only");
                None
            }
        };
        Self {
            watcher,
            directories: HashSet::new(),
            files,
            changed,
            wake,
        }
    }

    /// The followed files that changed since the last call, as absolute paths; `None` without file
    /// events (everything must then be read).
    pub fn take_changed(&self) -> Option<HashSet<PathBuf>> {
        self.watcher.as_ref()?;
        Some(std::mem::take(&mut *crate::sync::lock(&self.changed)))
    }

    /// Resolves when a followed file changed since the last wake-up.
    pub fn wake(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// Whether file events are available (else only polling).
    pub fn has_events(&self) -> bool {
        self.watcher.is_some()
    }

    /// Sets the files to follow. Their directories are watched (not the files), so a file that appears
    /// late or is replaced by rotation is still seen.
    pub fn follow<'p>(&mut self, paths: impl IntoIterator<Item = &'p Path>) {
        let wanted: HashSet<PathBuf> = paths.into_iter().map(absolute).collect();
        let directories: HashSet<PathBuf> = wanted
            .iter()
            .filter_map(|path| path.parent().map(Path::to_path_buf))
            .collect();
        *crate::sync::lock(&self.files) = wanted;
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        for gone in self.directories.difference(&directories) {
            let _ = watcher.unwatch(gone);
        }
        self.directories.retain(|dir| directories.contains(dir));
        for dir in directories {
            // A directory that does not exist yet is retried on the next call.
            if !self.directories.contains(&dir)
                && watcher.watch(&dir, RecursiveMode::NonRecursive).is_ok()
            {
                self.directories.insert(dir);
            }
        }
    }
}

/// `path` made absolute, as the watcher reports changed files.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_write_to_a_followed_file_wakes_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let followed = dir.path().join("train.log");
        let other = dir.path().join("other.log");
        std::fs::write(&followed, b"").unwrap();
        let mut watcher = LogWatcher::new();
        if !watcher.has_events() {
            return; // nothing to test where inotify is unavailable
        }
        watcher.follow([followed.as_path()]);
        let wake = watcher.wake();

        std::fs::write(&other, b"noise\n").unwrap();
        let woke = tokio::time::timeout(Duration::from_millis(300), wake.notified()).await;
        assert!(woke.is_err(), "an unrelated file woke the engine");

        std::fs::write(&followed, b"iteration 1\n").unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
        assert!(woke.is_ok(), "a write to the followed file did not wake");
        let changed = watcher.take_changed().unwrap();
        assert_eq!(changed, HashSet::from([absolute(&followed)]));
        assert!(watcher.take_changed().unwrap().is_empty(), "taken once");
    }

    #[tokio::test]
    async fn a_file_that_appears_later_wakes_too() {
        let dir = tempfile::tempdir().unwrap();
        let late = dir.path().join("late.log");
        let mut watcher = LogWatcher::new();
        if !watcher.has_events() {
            return;
        }
        watcher.follow([late.as_path()]);
        let wake = watcher.wake();
        std::fs::write(&late, b"hello\n").unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
        assert!(woke.is_ok());
    }
}

//! Wake-ups when a followed log changes (inotify), so a new line is read within a
//! fraction of a second. Polling stays the ground truth: cluster file systems (NFS, Lustre, GPFS) often
//! deliver no events, and every file is still read once per poll interval; between two, a wake-up reads
//! only the files that changed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::Notify;

/// What wakes the engine: a followed file written, truncated, created or moved into place. Not its
/// opening or closing, which every read of runguard's own (and every writer's open) would report.
const MASK: WatchMask = WatchMask::MODIFY
    .union(WatchMask::CREATE)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE)
    .union(WatchMask::ONLYDIR);

/// What the watcher and its reading thread share.
#[derive(Default)]
struct Shared {
    /// The files whose changes wake the engine.
    files: Mutex<HashSet<PathBuf>>,
    /// The watched directories by watch descriptor id, as the events name them.
    directories: Mutex<HashMap<i32, PathBuf>>,
    /// Followed files that changed since [`LogWatcher::take_changed`] was last called.
    changed: Mutex<HashSet<PathBuf>>,
    /// Set when the watcher is dropped: the thread ends at its next event.
    stopping: AtomicBool,
    wake: Arc<Notify>,
}

/// Watches the directories of the followed files and signals `wake` when one of the files changes.
pub struct LogWatcher {
    /// The inotify instance until the first watch starts the thread that reads it.
    idle: Option<Inotify>,
    /// Adds and removes watches; `None` without inotify (polling only).
    watches: Option<Watches>,
    /// Directories with a watch this watcher added.
    directories: HashMap<PathBuf, WatchDescriptor>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LogWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWatcher")
            .field("events", &self.watches.is_some())
            .field("directories", &self.directories.keys())
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
            idle: None,
            watches: None,
            directories: HashMap::new(),
            shared: Arc::default(),
        }
    }

    /// A watcher; without inotify (limits reached, unsupported platform) it only ever polls.
    pub fn new() -> Self {
        match Inotify::init() {
            Ok(inotify) => Self {
                watches: Some(inotify.watches()),
                idle: Some(inotify),
                directories: HashMap::new(),
                shared: Arc::default(),
            },
            Err(err) => {
                tracing::warn!(%err, "no file events; following logs by polling only");
                Self::polling_only()
            }
        }
    }

    /// The followed files that changed since the last call, as absolute paths; `None` without file
    /// events (everything must then be read).
    pub fn take_changed(&self) -> Option<HashSet<PathBuf>> {
        self.watches.as_ref()?;
        Some(std::mem::take(&mut *crate::sync::lock(
            &self.shared.changed,
        )))
    }

    /// Resolves when a followed file changed since the last wake-up.
    pub fn wake(&self) -> Arc<Notify> {
        Arc::clone(&self.shared.wake)
    }

    /// Whether file events are available (else only polling).
    pub fn has_events(&self) -> bool {
        self.watches.is_some()
    }

    /// Sets the files to follow. Their directories are watched (not the files), so a file that appears
    /// late or is replaced by rotation is still seen.
    pub fn follow<'p>(&mut self, paths: impl IntoIterator<Item = &'p Path>) {
        let wanted: HashSet<PathBuf> = paths.into_iter().map(absolute).collect();
        let directories: HashSet<PathBuf> = wanted
            .iter()
            .filter_map(|path| path.parent().map(Path::to_path_buf))
            .collect();
        *crate::sync::lock(&self.shared.files) = wanted;
        let Some(watches) = self.watches.as_mut() else {
            return;
        };
        // A watch the kernel ended (its directory removed) is added again once the directory is back.
        {
            let live = crate::sync::lock(&self.shared.directories);
            self.directories
                .retain(|_, wd| live.contains_key(&wd.get_watch_descriptor_id()));
        }
        let gone: Vec<PathBuf> = self
            .directories
            .keys()
            .filter(|dir| !directories.contains(*dir))
            .cloned()
            .collect();
        for dir in gone {
            if let Some(wd) = self.directories.remove(&dir) {
                crate::sync::lock(&self.shared.directories).remove(&wd.get_watch_descriptor_id());
                let _ = watches.remove(wd);
            }
        }
        for dir in directories {
            if self.directories.contains_key(&dir) {
                continue;
            }
            // A directory that does not exist yet is retried on the next call.
            let Ok(wd) = watches.add(&dir, MASK) else {
                continue;
            };
            crate::sync::lock(&self.shared.directories)
                .insert(wd.get_watch_descriptor_id(), dir.clone());
            self.directories.insert(dir, wd);
            if let Some(inotify) = self.idle.take() {
                let shared = Arc::clone(&self.shared);
                let started = std::thread::Builder::new()
                    .name("runguard-log-events".into())
                    .spawn(move || read_events(inotify, &shared));
                if let Err(err) = started {
                    tracing::warn!(%err, "no file events; following logs by polling only");
                }
            }
        }
    }
}

impl Drop for LogWatcher {
    /// Removing the watches makes the kernel send the thread one last event each, after which it
    /// sees `stopping` and ends (a watcher that never watched has no thread: its fd just closes).
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(watches) = self.watches.as_mut() {
            for (_, wd) in self.directories.drain() {
                let _ = watches.remove(wd);
            }
        }
    }
}

/// The reading thread: marks the followed files events name as changed and wakes the engine once
/// per batch of events.
fn read_events(mut inotify: Inotify, shared: &Shared) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let events = match inotify.read_events_blocking(&mut buffer) {
            Ok(events) => events,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::warn!(%err, "file events stopped; following logs by polling only");
                return;
            }
        };
        let mut hit = false;
        {
            let files = crate::sync::lock(&shared.files);
            let mut directories = crate::sync::lock(&shared.directories);
            let mut changed = crate::sync::lock(&shared.changed);
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    // Events were lost: any followed file may have changed.
                    changed.extend(files.iter().cloned());
                    hit = true;
                    continue;
                }
                let id = event.wd.get_watch_descriptor_id();
                if event.mask.contains(EventMask::IGNORED) {
                    directories.remove(&id);
                    continue;
                }
                let (Some(dir), Some(name)) = (directories.get(&id), event.name) else {
                    continue;
                };
                let path = dir.join(name);
                if files.contains(&path) {
                    changed.insert(path);
                    hit = true;
                }
            }
        }
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        if hit {
            shared.wake.notify_one();
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

    #[tokio::test]
    async fn reading_a_followed_file_does_not_wake_but_truncating_it_does() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("train.log");
        std::fs::write(&log, b"iteration 1\n").unwrap();
        let mut watcher = LogWatcher::new();
        if !watcher.has_events() {
            return;
        }
        watcher.follow([log.as_path()]);
        let wake = watcher.wake();
        let _ = std::fs::read(&log).unwrap();
        let woke = tokio::time::timeout(Duration::from_millis(300), wake.notified()).await;
        assert!(woke.is_err(), "runguard's own read woke the engine");
        std::fs::File::create(&log).unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
        assert!(woke.is_ok(), "a truncation did not wake");
    }

    #[tokio::test]
    async fn a_directory_removed_and_made_again_is_watched_again() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let log = logs.join("train.log");
        let mut watcher = LogWatcher::new();
        if !watcher.has_events() {
            return;
        }
        watcher.follow([log.as_path()]);
        std::fs::remove_dir(&logs).unwrap();
        // The kernel ends the watch; the thread hears it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::fs::create_dir(&logs).unwrap();
        watcher.follow([log.as_path()]);
        let wake = watcher.wake();
        std::fs::write(&log, b"hello\n").unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
        assert!(woke.is_ok(), "the directory made again was not watched");
        assert_eq!(
            watcher.take_changed().unwrap(),
            HashSet::from([absolute(&log)])
        );
    }
}

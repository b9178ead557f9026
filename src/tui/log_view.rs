//! The log view's state: the end of the focused attempt's log, read again each second, followed unless
//! the user scrolled away, with the lines that look like errors found for `n`/`N`.

use std::path::{Path, PathBuf};

use runguard_engine::telemetry::tail::read_end;

/// At most this much of the end of a log is read: the view is for the recent past; `less` is for the rest.
pub const TAIL_BYTES: u64 = 512 * 1024;

/// Words that make a line worth jumping to.
const ERROR_MARKERS: [&str; 10] = [
    "error",
    "Error",
    "ERROR",
    "Traceback",
    "Exception",
    "NCCL WARN",
    "Watchdog caught",
    "Xid",
    "CUDA out of memory",
    "Killed",
];

/// What the log view shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogView {
    pub path: Option<PathBuf>,
    pub lines: Vec<String>,
    /// The first line shown.
    pub top: usize,
    /// Keep the end in view as lines arrive.
    pub follow: bool,
    /// Why nothing can be shown.
    pub problem: Option<String>,
}

impl LogView {
    pub fn new() -> Self {
        Self {
            follow: true,
            ..Self::default()
        }
    }

    /// Reads the end of `path` again (a new path starts at its end, following).
    pub fn reload(&mut self, path: Option<&Path>, height: usize) {
        if self.path.as_deref() != path {
            *self = Self::new();
            self.path = path.map(Path::to_path_buf);
        }
        let Some(path) = path else {
            self.problem = Some("the scheduler named no log for this attempt".into());
            self.lines.clear();
            return;
        };
        match read_end(path, TAIL_BYTES) {
            Ok(text) => {
                self.problem = None;
                self.lines = text.lines().map(str::to_string).collect();
            }
            Err(err) => {
                self.problem = Some(format!("{}: {err}", path.display()));
                self.lines.clear();
            }
        }
        if self.follow {
            self.top = self.lines.len().saturating_sub(height);
        }
        self.top = self.top.min(self.lines.len().saturating_sub(1));
    }

    /// Scrolls by `by` lines; scrolling up stops following, reaching the end starts it again.
    pub fn scroll(&mut self, by: i64, height: usize) {
        let last_top = self.lines.len().saturating_sub(height);
        self.top = (self.top as i64 + by).clamp(0, last_top as i64) as usize;
        self.follow = self.top >= last_top;
    }

    /// Jumps to the next (or previous) line that looks like an error; false when there is none.
    pub fn jump_to_error(&mut self, forward: bool) -> bool {
        let found = if forward {
            (self.top + 1..self.lines.len()).find(|&i| is_error(&self.lines[i]))
        } else {
            (0..self.top).rev().find(|&i| is_error(&self.lines[i]))
        };
        match found {
            Some(line) => {
                self.top = line;
                self.follow = false;
                true
            }
            None => false,
        }
    }
}

/// Whether a log line looks like an error.
pub fn is_error(line: &str) -> bool {
    ERROR_MARKERS.iter().any(|marker| line.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_end_until_scrolled_up_and_jumps_between_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.log");
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!("iteration {i}\n"));
            if i == 40 || i == 70 {
                text.push_str("RuntimeError: CUDA error: an illegal memory access\n");
            }
        }
        std::fs::write(&path, &text).unwrap();
        let mut view = LogView::new();
        view.reload(Some(&path), 10);
        assert_eq!(view.lines.len(), 102);
        assert_eq!(view.top, 92);
        view.scroll(-50, 10);
        assert!(!view.follow);
        assert_eq!(view.top, 42);
        assert!(view.jump_to_error(true));
        assert!(view.lines[view.top].contains("RuntimeError"));
        assert_eq!(view.top, 72);
        assert!(view.jump_to_error(false));
        assert_eq!(view.top, 41);
        std::fs::write(&path, format!("{text}more\n")).unwrap();
        view.reload(Some(&path), 10);
        assert_eq!(view.top, 41, "a user who scrolled away is not moved");
        view.scroll(1000, 10);
        assert!(view.follow);
    }

    #[test]
    fn a_missing_or_garbled_log_is_a_message_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut view = LogView::new();
        view.reload(Some(&dir.path().join("gone.log")), 10);
        assert!(view.problem.is_some());
        let path = dir.path().join("bad.log");
        std::fs::write(&path, b"ok\n\xff\xfe broken\n").unwrap();
        view.reload(Some(&path), 10);
        assert_eq!(view.lines.len(), 2);
        view.reload(None, 10);
        assert!(view.problem.unwrap().contains("no log"));
    }
}

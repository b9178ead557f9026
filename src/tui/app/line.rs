//! The search (`/`) and command (`:`) lines: opening one, typing, confirming, dismissing. The search
//! narrows the overview as it is typed; a command runs when confirmed.

use super::{App, Effect, Mode};
use crate::tui::snapshot::Snapshot;

impl App {
    pub(super) fn start_search(&mut self) {
        self.mode = Mode::Search;
        self.input = self.search.clone();
    }

    pub(super) fn start_command(&mut self) {
        self.mode = Mode::Command;
        self.input.clear();
    }

    pub(super) fn type_char(&mut self, c: char) {
        self.input.push(c);
        self.searched();
    }

    pub(super) fn erase(&mut self) {
        self.input.pop();
        self.searched();
    }

    /// While searching, the overview shows what the line says, from its first row.
    fn searched(&mut self) {
        if self.mode == Mode::Search {
            self.search = self.input.clone();
            self.cursor = 0;
        }
    }

    /// Enter: a search stays, a command runs.
    pub(super) fn confirm(&mut self, snapshot: &Snapshot) -> Effect {
        let mode = std::mem::replace(&mut self.mode, Mode::Normal);
        if mode == Mode::Command {
            let line = std::mem::take(&mut self.input);
            return self.command(&line, snapshot);
        }
        Effect::None
    }

    /// Esc: the line closes; a search is undone.
    pub(super) fn dismiss(&mut self) {
        if self.mode == Mode::Search {
            self.search.clear();
        }
        self.mode = Mode::Normal;
        self.input.clear();
    }
}

//! The cockpit's state and its one way to change: [`App::update`] with a [`UiAction`]. Keys, mouse
//! clicks, the `:` command line and tests all produce the same actions, so each behaviour is tested once.
//!
//! The state is here; what each family of actions does is in a file of its own: `navigate` (cursor,
//! panes, report, log), `rows` (search, filters, sort, focus), `line` (the `/` and `:` lines),
//! `command` (the `:` commands), `decide` (approve, reject).

use std::cell::Cell;
use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use ratatui::crossterm::event::KeyEvent;

pub use super::columns::{Column, DEFAULT_COLUMNS};
use super::keys;
use super::log_view::LogView;
use super::snapshot::Snapshot;
use runguard_engine::model::{ActionId, WorkflowId};

mod command;
mod decide;
mod line;
mod navigate;
mod rows;

pub use command::COMMANDS;
pub use rows::{RowOrder, duration_of};

/// The panes, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Overview,
    Details,
    Charts,
    Timeline,
    Approvals,
    Notifications,
    Log,
    Compare,
    Nodes,
    Capacity,
}

impl Pane {
    pub const ALL: [Pane; 10] = [
        Pane::Overview,
        Pane::Details,
        Pane::Charts,
        Pane::Timeline,
        Pane::Approvals,
        Pane::Notifications,
        Pane::Log,
        Pane::Compare,
        Pane::Nodes,
        Pane::Capacity,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Pane::Overview => "Workflows",
            Pane::Details => "Details",
            Pane::Charts => "Charts",
            Pane::Timeline => "Timeline",
            Pane::Approvals => "Approvals",
            Pane::Notifications => "Notifications",
            Pane::Log => "Log",
            Pane::Compare => "Compare",
            Pane::Nodes => "Nodes",
            Pane::Capacity => "Usage",
        }
    }

    /// The title on a narrow terminal.
    pub fn short_title(self) -> &'static str {
        match self {
            Pane::Overview => "Jobs",
            Pane::Details => "Info",
            Pane::Charts => "Chart",
            Pane::Timeline => "Time",
            Pane::Approvals => "Appr",
            Pane::Notifications => "Note",
            Pane::Log => "Log",
            Pane::Compare => "Cmp",
            Pane::Nodes => "Node",
            Pane::Capacity => "Use",
        }
    }
}

/// What the keyboard is typing into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// `/`: incremental search by name or job id.
    Search,
    /// `:`: a command.
    Command,
}

/// Everything the user can ask for.
#[derive(Debug, Clone, PartialEq)]
pub enum UiAction {
    Quit,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    NextPane,
    PreviousPane,
    Show(Pane),
    /// Open the focused row's details.
    Enter,
    Back,
    ToggleSelect,
    /// Sort by a column; again on the same column reverses the order.
    SortBy(Column),
    /// Sort by the next visible column (the `s` key).
    SortNext,
    ToggleDurationFormat,
    ToggleSubmittedFormat,
    ToggleUpdatedFormat,
    StartSearch,
    StartCommand,
    Type(char),
    Erase,
    /// Enter in the search or command line.
    Confirm,
    /// Esc in the search or command line.
    Dismiss,
    Approve,
    Reject,
    Refresh,
    Detach,
    ToggleHelp,
    /// Notifications of every user, or only the current one.
    ToggleAllUsers,
    /// Click on a row of the overview (its index among the visible rows).
    ClickRow(usize),
    /// In the log: the next or previous line that looks like an error.
    NextError,
    PreviousError,
    /// In the log: keep its end in view.
    Follow,
    /// Open the recovery report of the focused workflow, or close it.
    ToggleReport,
}

/// What the runner must do after an update.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    None,
    Quit,
    Approve(ActionId),
    Reject(ActionId),
    Refresh,
    Detach,
    SetTheme(String),
    /// The visible columns changed: keep them in the config.
    SaveColumns(Vec<Column>),
}

/// Narrowing of the overview by exact values (`:filter state=failed`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filters {
    pub state: Option<String>,
    pub user: Option<String>,
    pub partition: Option<String>,
    pub backend: Option<String>,
}

/// The recovery report overlay: whose report, and how far it is scrolled.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportView {
    pub workflow_id: WorkflowId,
    /// The first row shown.
    pub scroll: usize,
    /// The furthest scroll that still fills the overlay, as the last frame measured it (the rows
    /// depend on the terminal's width, which only drawing knows).
    pub max_scroll: Cell<usize>,
}

/// The cockpit's state between two frames.
#[derive(Debug, Clone)]
pub struct App {
    pub pane: Pane,
    pub mode: Mode,
    pub input: String,
    pub search: String,
    pub filters: Filters,
    pub columns: Vec<Column>,
    pub sort: Option<(Column, bool)>,
    /// Cursor among the visible overview rows.
    pub cursor: usize,
    /// Cursor among the approvals.
    pub approval_cursor: usize,
    /// Workflow and attempt of the selected rows (compare).
    pub selected: BTreeSet<(WorkflowId, u32)>,
    pub duration_clock: bool,
    pub submitted_elapsed: bool,
    pub updated_elapsed: bool,
    pub help: bool,
    pub all_users: bool,
    /// The user the notifications are filtered to by default.
    pub user: String,
    /// A line for the status bar (result of a command, an error).
    pub message: Option<String>,
    /// The engine runs in this process (false: a viewer of another process's engine).
    pub owns_engine: bool,
    /// The focused attempt's log, when the log pane shows it.
    pub log: LogView,
    /// Lines the log pane shows at once (from the last frame).
    pub log_height: usize,
    /// The recovery report overlay, while it is open (`R`).
    pub report: Option<ReportView>,
}

impl App {
    pub fn new(user: String, owns_engine: bool) -> Self {
        Self {
            pane: Pane::Overview,
            mode: Mode::Normal,
            input: String::new(),
            search: String::new(),
            filters: Filters::default(),
            columns: DEFAULT_COLUMNS.to_vec(),
            sort: None,
            cursor: 0,
            approval_cursor: 0,
            selected: BTreeSet::new(),
            duration_clock: true,
            submitted_elapsed: false,
            updated_elapsed: true,
            help: false,
            all_users: false,
            user,
            message: None,
            owns_engine,
            log: LogView::new(),
            log_height: 20,
            report: None,
        }
    }

    /// The action of a key, as the key table ([`keys::KEYS`]) has it where the cockpit is now.
    pub fn action_for_key(&self, key: KeyEvent) -> Option<UiAction> {
        keys::action_for(keys::Context::of(self), &key)
    }

    /// Applies one action; the effect is for the runner (the store, the terminal, the engine).
    pub fn update(&mut self, action: UiAction, snapshot: &Snapshot, now: DateTime<Utc>) -> Effect {
        self.message = None;
        match action {
            UiAction::Quit => return Effect::Quit,
            UiAction::Refresh => return Effect::Refresh,
            UiAction::Detach => return Effect::Detach,
            UiAction::Up => self.move_cursor(-1, snapshot, now),
            UiAction::Down => self.move_cursor(1, snapshot, now),
            UiAction::PageUp => self.move_cursor(-20, snapshot, now),
            UiAction::PageDown => self.move_cursor(20, snapshot, now),
            UiAction::Top => self.move_cursor(i64::MIN / 2, snapshot, now),
            UiAction::Bottom => self.move_cursor(i64::MAX / 2, snapshot, now),
            UiAction::NextPane => self.cycle_pane(1),
            UiAction::PreviousPane => self.cycle_pane(Pane::ALL.len() - 1),
            UiAction::Show(pane) => self.pane = pane,
            UiAction::Enter => self.enter(snapshot, now),
            UiAction::Back => self.back(),
            UiAction::ClickRow(index) => self.click_row(index, snapshot, now),
            UiAction::ToggleSelect => self.toggle_select(snapshot, now),
            UiAction::ToggleReport => self.toggle_report(snapshot, now),
            UiAction::NextError => self.jump_to_error(true),
            UiAction::PreviousError => self.jump_to_error(false),
            UiAction::Follow => self.follow_log(),
            UiAction::SortBy(column) => self.sort_by(column),
            UiAction::SortNext => self.sort_next(),
            UiAction::StartSearch => self.start_search(),
            UiAction::StartCommand => self.start_command(),
            UiAction::Type(c) => self.type_char(c),
            UiAction::Erase => self.erase(),
            UiAction::Confirm => return self.confirm(snapshot),
            UiAction::Dismiss => self.dismiss(),
            UiAction::Approve => return self.decide_focused(true, snapshot, now),
            UiAction::Reject => return self.decide_focused(false, snapshot, now),
            UiAction::ToggleDurationFormat => self.duration_clock = !self.duration_clock,
            UiAction::ToggleSubmittedFormat => self.submitted_elapsed = !self.submitted_elapsed,
            UiAction::ToggleUpdatedFormat => self.updated_elapsed = !self.updated_elapsed,
            UiAction::ToggleHelp => self.help = !self.help,
            UiAction::ToggleAllUsers => self.all_users = !self.all_users,
        }
        Effect::None
    }
}

//! The cockpit's state and its one way to change: [`App::update`] with a [`UiAction`]. Keys, mouse
//! clicks, the `:` command line and tests all produce the same actions, so each behaviour is tested once.

use std::cell::Cell;
use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use ratatui::crossterm::event::KeyEvent;

pub use super::columns::{Column, DEFAULT_COLUMNS};
use super::keys;
use super::log_view::LogView;
use super::snapshot::{AttemptRow, Snapshot};
use runguard_engine::model::{ActionId, JobState, WorkflowId};

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
}

impl Pane {
    pub const ALL: [Pane; 8] = [
        Pane::Overview,
        Pane::Details,
        Pane::Charts,
        Pane::Timeline,
        Pane::Approvals,
        Pane::Notifications,
        Pane::Log,
        Pane::Compare,
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

    /// The overview's rows after search, filters and sort: grouped by workflow, newest first, unless a
    /// column sort is chosen.
    pub fn visible_rows<'s>(
        &self,
        snapshot: &'s Snapshot,
        now: DateTime<Utc>,
    ) -> Vec<&'s AttemptRow> {
        let needle = self.search.to_lowercase();
        let mut rows: Vec<&AttemptRow> = snapshot
            .rows
            .iter()
            .filter(|row| {
                needle.is_empty()
                    || row.workflow.to_lowercase().contains(&needle)
                    || row.attempt.job_id.contains(&needle)
            })
            .filter(|row| {
                let f = &self.filters;
                f.state.as_deref().is_none_or(|s| {
                    row.attempt.state.as_str() == s || row.attempt.state_raw.eq_ignore_ascii_case(s)
                }) && f.user.as_deref().is_none_or(|u| row.user == u)
                    && f.partition
                        .as_deref()
                        .is_none_or(|p| row.partition.as_deref() == Some(p))
                    && f.backend.as_deref().is_none_or(|b| row.backend == b)
            })
            .collect();
        match self.sort {
            None => rows.sort_by(|a, b| {
                b.workflow_id
                    .cmp(&a.workflow_id)
                    .then(b.attempt.index.cmp(&a.attempt.index))
            }),
            Some((column, descending)) => {
                rows.sort_by(|a, b| {
                    let order = column.order(a, b, now);
                    if descending { order.reverse() } else { order }
                });
            }
        }
        rows
    }

    /// Applies one action; the effect is for the runner (the store, the terminal, the engine).
    pub fn update(&mut self, action: UiAction, snapshot: &Snapshot, now: DateTime<Utc>) -> Effect {
        self.message = None;
        let rows = self.visible_rows(snapshot, now).len();
        let approvals = snapshot.approvals.len();
        match action {
            UiAction::Quit => return Effect::Quit,
            UiAction::Up => self.move_cursor(-1, rows, approvals),
            UiAction::Down => self.move_cursor(1, rows, approvals),
            UiAction::PageUp => self.move_cursor(-20, rows, approvals),
            UiAction::PageDown => self.move_cursor(20, rows, approvals),
            UiAction::Top => self.move_cursor(i64::MIN / 2, rows, approvals),
            UiAction::Bottom => self.move_cursor(i64::MAX / 2, rows, approvals),
            UiAction::NextPane | UiAction::PreviousPane => {
                let at = Pane::ALL.iter().position(|p| *p == self.pane).unwrap_or(0);
                let step = if action == UiAction::NextPane {
                    1
                } else {
                    Pane::ALL.len() - 1
                };
                self.pane = Pane::ALL[(at + step) % Pane::ALL.len()];
            }
            UiAction::Show(pane) => self.pane = pane,
            UiAction::Enter => {
                if self.pane == Pane::Overview && rows > 0 {
                    self.pane = Pane::Details;
                }
            }
            UiAction::Back => {
                if self.pane != Pane::Overview {
                    self.pane = Pane::Overview;
                } else if !self.search.is_empty() {
                    self.search.clear();
                }
            }
            UiAction::ToggleSelect => {
                if let Some(row) = self.focused(snapshot, now) {
                    let key = (row.workflow_id, row.attempt.index);
                    if !self.selected.remove(&key) {
                        self.selected.insert(key);
                    }
                }
            }
            UiAction::SortBy(column) => self.sort_by(column),
            UiAction::SortNext => {
                let sortable: Vec<Column> = self
                    .columns
                    .iter()
                    .copied()
                    .filter(|c| *c != Column::Select)
                    .collect();
                let next = match self.sort {
                    None => sortable.first().copied(),
                    Some((current, _)) => sortable
                        .iter()
                        .position(|c| *c == current)
                        .and_then(|at| sortable.get(at + 1).copied()),
                };
                match next {
                    Some(column) => self.sort = Some((column, false)),
                    None => self.sort = None,
                }
                self.message = Some(self.sort_label());
            }
            UiAction::ToggleDurationFormat => self.duration_clock = !self.duration_clock,
            UiAction::ToggleSubmittedFormat => self.submitted_elapsed = !self.submitted_elapsed,
            UiAction::ToggleUpdatedFormat => self.updated_elapsed = !self.updated_elapsed,
            UiAction::StartSearch => {
                self.mode = Mode::Search;
                self.input = self.search.clone();
            }
            UiAction::StartCommand => {
                self.mode = Mode::Command;
                self.input.clear();
            }
            UiAction::Type(c) => {
                self.input.push(c);
                if self.mode == Mode::Search {
                    self.search = self.input.clone();
                    self.cursor = 0;
                }
            }
            UiAction::Erase => {
                self.input.pop();
                if self.mode == Mode::Search {
                    self.search = self.input.clone();
                    self.cursor = 0;
                }
            }
            UiAction::Confirm => {
                let mode = std::mem::replace(&mut self.mode, Mode::Normal);
                if mode == Mode::Command {
                    let line = std::mem::take(&mut self.input);
                    return self.command(&line, snapshot);
                }
            }
            UiAction::Dismiss => {
                if self.mode == Mode::Search {
                    self.search.clear();
                }
                self.mode = Mode::Normal;
                self.input.clear();
            }
            UiAction::Approve | UiAction::Reject => {
                let Some(approval) = self.focused_approval(snapshot, now) else {
                    self.message = Some("no proposed action here".to_string());
                    return Effect::None;
                };
                let id = approval.action.id;
                return if action == UiAction::Approve {
                    self.message = Some(format!("approving action {id}…"));
                    Effect::Approve(id)
                } else {
                    self.message = Some(format!("rejecting action {id}…"));
                    Effect::Reject(id)
                };
            }
            UiAction::Refresh => return Effect::Refresh,
            UiAction::Detach => return Effect::Detach,
            UiAction::ToggleHelp => self.help = !self.help,
            UiAction::ToggleReport => {
                if self.report.take().is_none() {
                    match self.focused(snapshot, now) {
                        Some(row) => {
                            self.report = Some(ReportView {
                                workflow_id: row.workflow_id,
                                scroll: 0,
                                max_scroll: Cell::new(0),
                            });
                        }
                        None => self.message = Some("no workflow to report on".into()),
                    }
                }
            }
            UiAction::ToggleAllUsers => self.all_users = !self.all_users,
            UiAction::NextError | UiAction::PreviousError => {
                if self.pane == Pane::Log && !self.log.jump_to_error(action == UiAction::NextError)
                {
                    self.message = Some("no more error lines that way".into());
                }
            }
            UiAction::Follow => {
                if self.pane == Pane::Log {
                    self.log.follow = true;
                    self.log.scroll(i64::MAX / 2, self.log_height);
                }
            }
            UiAction::ClickRow(index) => {
                // The rows are hidden under the report.
                if index < rows && self.report.is_none() {
                    if self.cursor == index {
                        self.pane = Pane::Details;
                    }
                    self.cursor = index;
                }
            }
        }
        Effect::None
    }

    fn move_cursor(&mut self, by: i64, rows: usize, approvals: usize) {
        if let Some(report) = &mut self.report {
            let last = report.max_scroll.get() as i64;
            report.scroll = (report.scroll as i64).saturating_add(by).clamp(0, last) as usize;
            return;
        }
        if self.pane == Pane::Log {
            self.log.scroll(by, self.log_height);
            return;
        }
        let (cursor, len) = match self.pane {
            Pane::Approvals => (&mut self.approval_cursor, approvals),
            _ => (&mut self.cursor, rows),
        };
        let last = len.saturating_sub(1) as i64;
        *cursor = (*cursor as i64).saturating_add(by).clamp(0, last.max(0)) as usize;
    }

    fn sort_by(&mut self, column: Column) {
        self.sort = match self.sort {
            Some((current, descending)) if current == column => Some((column, !descending)),
            _ => Some((column, false)),
        };
        self.message = Some(self.sort_label());
    }

    fn sort_label(&self) -> String {
        match self.sort {
            None => "sorted by workflow, newest first".to_string(),
            Some((column, descending)) => format!(
                "sorted by {}{}",
                column.name(),
                if descending { ", descending" } else { "" }
            ),
        }
    }

    /// The overview row under the cursor.
    pub fn focused<'s>(
        &self,
        snapshot: &'s Snapshot,
        now: DateTime<Utc>,
    ) -> Option<&'s AttemptRow> {
        let rows = self.visible_rows(snapshot, now);
        rows.get(self.cursor.min(rows.len().saturating_sub(1)))
            .copied()
    }

    /// The approval the keys act on: the one under the cursor in the approvals pane, elsewhere the
    /// oldest one of the focused workflow.
    pub fn focused_approval<'s>(
        &self,
        snapshot: &'s Snapshot,
        now: DateTime<Utc>,
    ) -> Option<&'s super::snapshot::Approval> {
        if self.pane == Pane::Approvals {
            return snapshot.approvals.get(
                self.approval_cursor
                    .min(snapshot.approvals.len().saturating_sub(1)),
            );
        }
        let row = self.focused(snapshot, now)?;
        snapshot
            .approvals
            .iter()
            .find(|a| a.action.workflow_id == row.workflow_id)
    }

    /// Runs a `:` command.
    fn command(&mut self, line: &str, snapshot: &Snapshot) -> Effect {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else {
            return Effect::None;
        };
        let rest: Vec<&str> = words.collect();
        match name {
            "q" | "quit" => return Effect::Quit,
            "detach" => return Effect::Detach,
            "refresh" => return Effect::Refresh,
            "help" => self.help = true,
            "sort" => match rest.first() {
                None => {
                    self.sort = None;
                    self.message = Some(self.sort_label());
                }
                Some(column) => match Column::parse(column) {
                    Some(column) => {
                        self.sort = Some((column, rest.get(1) == Some(&"desc")));
                        self.message = Some(self.sort_label());
                    }
                    None => {
                        self.message = Some(format!("no column {column:?}: {}", Column::names()))
                    }
                },
            },
            "filter" => {
                if rest.is_empty() {
                    self.filters = Filters::default();
                    self.message = Some("filters cleared".to_string());
                }
                for pair in rest {
                    let Some((key, value)) = pair.split_once('=') else {
                        self.message = Some(format!(
                            "{pair:?}: use key=value (state, user, partition, backend)"
                        ));
                        return Effect::None;
                    };
                    let value = (!value.is_empty()).then(|| value.to_string());
                    match key {
                        "state" => self.filters.state = value,
                        "user" => self.filters.user = value,
                        "partition" => self.filters.partition = value,
                        "backend" => self.filters.backend = value,
                        _ => {
                            self.message = Some(format!(
                                "no filter {key:?} (state, user, partition, backend)"
                            ));
                            return Effect::None;
                        }
                    }
                }
                self.cursor = 0;
            }
            "theme" => match rest.first() {
                Some(theme) => return Effect::SetTheme(theme.to_string()),
                None => self.message = Some("usage: :theme dark|light|high-contrast".to_string()),
            },
            "columns" => {
                let mut columns = Vec::new();
                for name in &rest {
                    match Column::parse(name) {
                        Some(column) if !columns.contains(&column) => columns.push(column),
                        Some(_) => {}
                        None => {
                            self.message = Some(format!("no column {name:?}: {}", Column::names()));
                            return Effect::None;
                        }
                    }
                }
                if columns.is_empty() {
                    columns = DEFAULT_COLUMNS.to_vec();
                }
                self.columns = columns.clone();
                return Effect::SaveColumns(columns);
            }
            "approve" | "reject" => {
                let Some(id) = rest.first().and_then(|id| id.parse::<ActionId>().ok()) else {
                    self.message = Some(format!("usage: :{name} ACTION_ID"));
                    return Effect::None;
                };
                if !snapshot.approvals.iter().any(|a| a.action.id == id) {
                    self.message = Some(format!("action {id} is not waiting for approval"));
                    return Effect::None;
                }
                return if name == "approve" {
                    Effect::Approve(id)
                } else {
                    Effect::Reject(id)
                };
            }
            other => {
                self.message = Some(format!(
                    "unknown command :{other} (q, sort, filter, columns, theme, approve, reject, detach, refresh, help)"
                ));
            }
        }
        Effect::None
    }
}

/// How long an attempt ran (until now when it still runs).
pub fn duration_of(row: &AttemptRow, now: DateTime<Utc>) -> Option<chrono::TimeDelta> {
    let start = row.attempt.start_time?;
    let end = if row.attempt.state.is_terminal() || row.attempt.state == JobState::Requeued {
        row.attempt.end_time.unwrap_or(now)
    } else {
        now
    };
    Some((end - start).max(chrono::TimeDelta::zero()))
}

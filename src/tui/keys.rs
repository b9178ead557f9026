//! Every key of the cockpit, in one table: where it acts, the action it produces, how the `?` help
//! and the status line show it, and whether it acts on the cluster or the engine. The key dispatch,
//! the help and the hints are all read from [`KEYS`].

use std::sync::LazyLock;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::app::{App, Mode, Pane, UiAction};
use Binding as B;
use UiAction as A;

/// Where a key acts. The cockpit is in one at a time: [`Context::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// The panes, with no overlay and no line open.
    Panes,
    /// The recovery report over the pane (`R`).
    Report,
    /// The help over everything (`?`).
    Help,
    /// Typing in the search (`/`) or command (`:`) line.
    Line,
}

impl Context {
    pub const ALL: [Context; 4] = [
        Context::Panes,
        Context::Report,
        Context::Help,
        Context::Line,
    ];

    /// The context of `app`'s keys: a line being typed first, then the help, then the report.
    pub fn of(app: &App) -> Context {
        if app.mode != Mode::Normal {
            Context::Line
        } else if app.help {
            Context::Help
        } else if app.report.is_some() {
            Context::Report
        } else {
            Context::Panes
        }
    }

    /// How the help names it.
    pub fn name(self) -> &'static str {
        match self {
            Context::Panes => "in the panes",
            Context::Report => "in the report",
            Context::Help => "in this help",
            Context::Line => "typing after / or :",
        }
    }
}

/// A key: its code, and whether Ctrl is held. Other modifiers are not told apart (Shift is in the
/// character: `R`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub code: KeyCode,
    pub ctrl: bool,
}

impl Key {
    pub fn matches(self, event: &KeyEvent) -> bool {
        self.code == event.code && self.ctrl == event.modifiers.contains(KeyModifiers::CONTROL)
    }

    /// As the help shows it.
    pub fn name(self) -> String {
        let name = match self.code {
            KeyCode::Char(' ') => "Space",
            KeyCode::Char(c) => return self.with_ctrl(&c.to_string()),
            KeyCode::Up => "↑",
            KeyCode::Down => "↓",
            KeyCode::PageUp => "PgUp",
            KeyCode::PageDown => "PgDn",
            KeyCode::Home => "Home",
            KeyCode::End => "End",
            KeyCode::Tab => "Tab",
            KeyCode::BackTab => "Shift-Tab",
            KeyCode::Enter => "Enter",
            KeyCode::Esc => "Esc",
            KeyCode::Backspace => "Backspace",
            other => return self.with_ctrl(&format!("{other:?}")),
        };
        self.with_ctrl(name)
    }

    fn with_ctrl(self, name: &str) -> String {
        if self.ctrl {
            format!("Ctrl-{name}")
        } else {
            name.to_string()
        }
    }
}

/// How an entry shows in the help or in the status line's hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// Not shown (the hints only: every key is in the help).
    Hidden,
    /// On its own, with this text.
    Own(&'static str),
    /// Its keys join the entry before, whose text speaks for both (`j/k move`).
    WithPrevious,
}

/// One entry of the table: keys, where they act, what they do.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub keys: &'static [Key],
    pub contexts: &'static [Context],
    pub action: UiAction,
    pub help: Text,
    pub hint: Text,
    /// Acts on the cluster or the engine (approve, reject, detach): the help marks it.
    pub dangerous: bool,
}

impl Binding {
    const fn new(keys: &'static [Key], contexts: &'static [Context], action: UiAction) -> Self {
        Self {
            keys,
            contexts,
            action,
            help: Text::Hidden,
            hint: Text::Hidden,
            dangerous: false,
        }
    }

    const fn help(mut self, text: &'static str) -> Self {
        self.help = Text::Own(text);
        self
    }

    /// In the help on the line of the entry before.
    const fn help_with_previous(mut self) -> Self {
        self.help = Text::WithPrevious;
        self
    }

    const fn hint(mut self, text: &'static str) -> Self {
        self.hint = Text::Own(text);
        self
    }

    /// In the hints with the entry before.
    const fn hint_with_previous(mut self) -> Self {
        self.hint = Text::WithPrevious;
        self
    }

    const fn dangerous(mut self) -> Self {
        self.dangerous = true;
        self
    }
}

const fn ch(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        ctrl: false,
    }
}

const fn ctrl(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        ctrl: true,
    }
}

const fn code(code: KeyCode) -> Key {
    Key { code, ctrl: false }
}

const PANES: &[Context] = &[Context::Panes];
/// The moves scroll the report too.
const MOVES: &[Context] = &[Context::Panes, Context::Report];
const OVERLAYS: &[Context] = &[Context::Panes, Context::Report, Context::Help];
const EVERYWHERE: &[Context] = &Context::ALL;

/// Every key, in the order of the help.
#[rustfmt::skip]
pub static KEYS: &[Binding] = &[
    B::new(&[ch('j'), code(KeyCode::Down)], MOVES, A::Down).help("move").hint("move"),
    B::new(&[ch('k'), code(KeyCode::Up)], MOVES, A::Up).help_with_previous().hint_with_previous(),
    B::new(&[code(KeyCode::PageDown)], MOVES, A::PageDown).help("page"),
    B::new(&[code(KeyCode::PageUp)], MOVES, A::PageUp).help_with_previous(),
    B::new(&[ctrl('d'), ctrl('f')], EVERYWHERE, A::PageDown).help("page, also while typing"),
    B::new(&[ctrl('u'), ctrl('b')], EVERYWHERE, A::PageUp).help_with_previous(),
    B::new(&[ch('g'), code(KeyCode::Home)], MOVES, A::Top).help("first / last"),
    B::new(&[ch('G'), code(KeyCode::End)], MOVES, A::Bottom).help_with_previous(),
    B::new(&[code(KeyCode::Tab)], PANES, A::NextPane).help("next / previous pane"),
    B::new(&[code(KeyCode::BackTab)], PANES, A::PreviousPane).help_with_previous(),
    B::new(&[ch('1')], PANES, A::Show(Pane::Overview)).help("the pane of that number on the tab bar"),
    B::new(&[ch('2')], PANES, A::Show(Pane::Details)).help_with_previous(),
    B::new(&[ch('3')], PANES, A::Show(Pane::Charts)).help_with_previous(),
    B::new(&[ch('4')], PANES, A::Show(Pane::Timeline)).help_with_previous(),
    B::new(&[ch('5')], PANES, A::Show(Pane::Approvals)).help_with_previous(),
    B::new(&[ch('6')], PANES, A::Show(Pane::Notifications)).help_with_previous(),
    B::new(&[ch('7')], PANES, A::Show(Pane::Log)).help_with_previous(),
    B::new(&[ch('8')], PANES, A::Show(Pane::Compare)).help_with_previous(),
    B::new(&[ch('9')], PANES, A::Show(Pane::Nodes)).help_with_previous(),
    B::new(&[ch('0')], PANES, A::Show(Pane::Capacity)).help_with_previous(),
    B::new(&[ch('L')], PANES, A::Show(Pane::Log)).help("the focused attempt's log"),
    B::new(&[ch('c')], PANES, A::Show(Pane::Compare)).help("compare the selected attempts side by side"),
    B::new(&[ch('n')], PANES, A::NextError).help("log: next / previous error, follow the end"),
    B::new(&[ch('N')], PANES, A::PreviousError).help_with_previous(),
    B::new(&[ch('f')], PANES, A::Follow).help_with_previous(),
    B::new(&[code(KeyCode::Enter), ch('l')], PANES, A::Enter).help("details of the focused attempt").hint("details"),
    B::new(&[ch('R')], PANES, A::ToggleReport).help("recovery report of the focused workflow"),
    B::new(&[code(KeyCode::Esc), ch('h')], PANES, A::Back).help("back to the workflows"),
    B::new(&[ch(' ')], PANES, A::ToggleSelect).help("select for comparison"),
    B::new(&[ch('s')], PANES, A::SortNext).help("sort by the next column (again: off)"),
    B::new(&[ch('t')], PANES, A::ToggleDurationFormat).help("duration: DD HH:MM:SS / seconds"),
    B::new(&[ch('T')], PANES, A::ToggleSubmittedFormat).help("submitted: time / elapsed"),
    B::new(&[ch('U')], PANES, A::ToggleUpdatedFormat).help("last update: time / elapsed"),
    B::new(&[ch('a')], PANES, A::Approve).help("approve / reject the proposed action").hint("approve").dangerous(),
    B::new(&[ch('x')], PANES, A::Reject).help_with_previous().hint("reject").dangerous(),
    B::new(&[ch('/')], PANES, A::StartSearch).help("search by name or job id").hint("search"),
    B::new(&[ch(':')], PANES, A::StartCommand).help("command line").hint("command"),
    B::new(&[ch('A')], PANES, A::ToggleAllUsers).help("notifications: mine / everyone's"),
    B::new(&[ch('r')], PANES, A::Refresh).help("refresh"),
    B::new(&[ch('D')], PANES, A::Detach).help("detach: leave the engine running headless").hint("detach").dangerous(),
    B::new(&[ch('?')], OVERLAYS, A::ToggleHelp).help("this help").hint("keys"),
    B::new(&[ch('q')], PANES, A::Quit).help("quit").hint("quit"),
    B::new(&[ctrl('c')], EVERYWHERE, A::Quit).help_with_previous(),
    B::new(&[ch('R'), code(KeyCode::Esc), ch('q'), ch('h')], &[Context::Report], A::ToggleReport).help("close"),
    B::new(&[ch(' ')], &[Context::Report], A::PageDown).help("page down"),
    B::new(&[code(KeyCode::Esc), ch('q')], &[Context::Help], A::ToggleHelp).help("close"),
    B::new(&[code(KeyCode::Enter)], &[Context::Line], A::Confirm).help("confirm"),
    B::new(&[code(KeyCode::Esc)], &[Context::Line], A::Dismiss).help("cancel"),
    B::new(&[code(KeyCode::Backspace)], &[Context::Line], A::Erase).help("erase"),
];

/// The action of `event` in `context`. In the search and command lines a character no entry binds is
/// typed.
pub fn action_for(context: Context, event: &KeyEvent) -> Option<UiAction> {
    let bound = KEYS
        .iter()
        .find(|b| b.contexts.contains(&context) && b.keys.iter().any(|k| k.matches(event)));
    if let Some(binding) = bound {
        return Some(binding.action.clone());
    }
    match event.code {
        KeyCode::Char(c)
            if context == Context::Line && !event.modifiers.contains(KeyModifiers::CONTROL) =>
        {
            Some(UiAction::Type(c))
        }
        _ => None,
    }
}

/// A line of the help: keys and what they do.
#[derive(Debug, Clone, PartialEq)]
pub struct HelpRow {
    pub keys: String,
    pub what: String,
    pub dangerous: bool,
    /// The entries it shows.
    pub bindings: Vec<&'static Binding>,
}

/// The help's lines: a line for each entry (with those that join it) that acts in the panes, then a
/// line for each other context with its own keys.
pub fn help_rows() -> Vec<HelpRow> {
    let mut rows = Vec::new();
    let mut elsewhere: Vec<(&'static [Context], HelpRow)> = Vec::new();
    for group in groups(|b| b.help) {
        let (first, text) = group[0];
        let keys = label(&group.iter().map(|(b, _)| *b).collect::<Vec<_>>());
        let row = HelpRow {
            keys,
            what: text.to_string(),
            dangerous: group.iter().any(|(b, _)| b.dangerous),
            bindings: group.iter().map(|(b, _)| *b).collect(),
        };
        if first.contexts.contains(&Context::Panes) {
            rows.push(row);
            continue;
        }
        let item = format!("{} {}", row.keys, row.what);
        match elsewhere.iter_mut().find(|(c, _)| *c == first.contexts) {
            Some((_, line)) => {
                line.what = format!("{} · {item}", line.what);
                line.dangerous |= row.dangerous;
                line.bindings.extend(row.bindings);
            }
            None => {
                let names: Vec<&str> = first.contexts.iter().map(|c| c.name()).collect();
                elsewhere.push((
                    first.contexts,
                    HelpRow {
                        keys: names.join(", "),
                        what: item,
                        ..row
                    },
                ));
            }
        }
    }
    rows.extend(elsewhere.into_iter().map(|(_, row)| row));
    rows
}

/// The status line's key hints, as `j/k move · Enter details · …`.
pub fn hints() -> &'static str {
    static HINTS: LazyLock<String> = LazyLock::new(|| {
        groups(|b| b.hint)
            .into_iter()
            .filter(|group| group[0].0.contexts.contains(&Context::Panes))
            .map(|group| {
                let keys: Vec<String> = group.iter().map(|(b, _)| b.keys[0].name()).collect();
                format!("{} {}", keys.join("/"), group[0].1)
            })
            .collect::<Vec<_>>()
            .join(" · ")
    });
    &HINTS
}

/// The entries shown by `text` in table order, each with the ones that join it.
fn groups(text: impl Fn(&Binding) -> Text) -> Vec<Vec<(&'static Binding, &'static str)>> {
    let mut groups: Vec<Vec<(&'static Binding, &'static str)>> = Vec::new();
    for binding in KEYS {
        match text(binding) {
            Text::Hidden => {}
            Text::Own(own) => groups.push(vec![(binding, own)]),
            Text::WithPrevious => {
                if let Some(group) = groups.last_mut() {
                    let own = group[0].1;
                    group.push((binding, own));
                }
            }
        }
    }
    groups
}

/// The keys of entries shown together: `Enter/l` for one entry; for several with as many keys each,
/// their first keys, then their second keys (`j/k ↓/↑`); a run of digits as a range (`1-8`).
pub fn label(bindings: &[&Binding]) -> String {
    let mut parts = Vec::new();
    for run in bindings.chunk_by(|a, b| a.keys.len() == b.keys.len()) {
        if let [one] = run {
            parts.push(join(one.keys.iter().copied()));
            continue;
        }
        for at in 0..run[0].keys.len() {
            parts.push(join(run.iter().map(|b| b.keys[at])));
        }
    }
    parts.join(" ")
}

/// Keys joined by `/`, a repeated `Ctrl-` left out (`Ctrl-d/u`), consecutive digits as a range in
/// keyboard order (`1-9`, and `1-0` when 0 follows 9 as it does on the keyboard).
fn join(keys: impl Iterator<Item = Key>) -> String {
    let keys: Vec<Key> = keys.collect();
    let digits: Option<Vec<u32>> = keys
        .iter()
        .map(|k| match k.code {
            // On the keyboard 0 comes after 9.
            KeyCode::Char('0') if !k.ctrl => Some(10),
            KeyCode::Char(c) if !k.ctrl => c.to_digit(10),
            _ => None,
        })
        .collect();
    if let Some(digits) = digits
        && digits.len() > 2
        && digits.windows(2).all(|w| w[1] == w[0] + 1)
    {
        return format!("{}-{}", digits[0], digits[digits.len() - 1] % 10);
    }
    let mut text = String::new();
    for (at, key) in keys.iter().enumerate() {
        if at > 0 {
            text.push('/');
        }
        let name = key.name();
        match name.strip_prefix("Ctrl-") {
            Some(rest) if at > 0 && keys[at - 1].ctrl => text.push_str(rest),
            _ => text.push_str(&name),
        }
    }
    text
}

#[cfg(test)]
mod tests;

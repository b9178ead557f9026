use std::cell::Cell;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::*;
use crate::tui::app::{App, Mode, ReportView};
use crate::tui::panes::help;
use crate::tui::theme::Theme;

/// An app whose keys act in `context`.
fn app_in(context: Context) -> App {
    let mut app = App::new("alice".into(), true);
    match context {
        Context::Panes => {}
        Context::Report => {
            app.report = Some(ReportView {
                workflow_id: 1,
                scroll: 0,
                max_scroll: Cell::new(0),
            })
        }
        Context::Help => app.help = true,
        Context::Line => app.mode = Mode::Search,
    }
    assert_eq!(Context::of(&app), context);
    app
}

/// The event a terminal sends for `key`: Shift comes with capitals and Shift-Tab.
fn event(key: Key) -> KeyEvent {
    let mut modifiers = KeyModifiers::NONE;
    if key.ctrl {
        modifiers |= KeyModifiers::CONTROL;
    }
    if matches!(key.code, KeyCode::Char(c) if c.is_uppercase()) || key.code == KeyCode::BackTab {
        modifiers |= KeyModifiers::SHIFT;
    }
    KeyEvent::new(key.code, modifiers)
}

/// Whether a help label such as `j/k ↓/↑`, `Ctrl-d/u` or `1-8` lists `key`.
fn lists(label: &str, key: Key) -> bool {
    let name = key.name();
    let tokens = label
        .split(' ')
        .flat_map(|t| std::iter::once(t).chain(t.split('/')));
    tokens.into_iter().any(|token| {
        token == name
            || (key.ctrl && Some(token) == name.strip_prefix("Ctrl-"))
            || match (token.split_once('-'), key.code) {
                (Some((from, to)), KeyCode::Char(c)) if c.is_ascii_digit() => {
                    // In keyboard order: 0 after 9.
                    let place =
                        |d: &str| d.parse::<u32>().ok().map(|n| if n == 0 { 10 } else { n });
                    let key = if c == '0' {
                        10
                    } else {
                        c.to_digit(10).unwrap_or(0)
                    };
                    from.len() == 1
                        && to.len() == 1
                        && place(from)
                            .zip(place(to))
                            .is_some_and(|(from, to)| (from..=to).contains(&key))
                }
                _ => false,
            }
    })
}

fn rendered_help() -> String {
    let theme = Theme::load("dark", None).unwrap();
    crate::tui::drawn_text(100, 60, |frame| help::draw(frame, frame.area(), &theme))
}

#[test]
fn every_key_is_in_the_help_and_dispatches_to_its_action() {
    let rows = help_rows();
    let text = rendered_help();
    for row in &rows {
        let line = format!("{:<21} {}", row.keys, row.what);
        assert!(text.contains(&line), "{line:?} missing:\n{text}");
    }
    for binding in KEYS {
        assert!(
            binding.help != Text::Hidden,
            "{binding:?} is not in the help"
        );
        let shown: Vec<&HelpRow> = rows
            .iter()
            .filter(|row| row.bindings.iter().any(|b| std::ptr::eq(*b, binding)))
            .collect();
        assert_eq!(shown.len(), 1, "{binding:?} in {shown:?}");
        let row = shown[0];
        for key in binding.keys {
            let label = if binding.contexts.contains(&Context::Panes) {
                row.keys.clone()
            } else {
                row.what.clone()
            };
            assert!(lists(&label, *key), "{} not in {label:?}", key.name());
            for context in binding.contexts {
                let app = app_in(*context);
                assert_eq!(
                    app.action_for_key(event(*key)),
                    Some(binding.action.clone()),
                    "{} in {context:?}",
                    key.name()
                );
            }
        }
    }
}

#[test]
fn no_two_entries_of_a_context_share_a_key() {
    for context in Context::ALL {
        let mut seen: Vec<(Key, &Binding)> = Vec::new();
        for binding in KEYS.iter().filter(|b| b.contexts.contains(&context)) {
            for key in binding.keys {
                if let Some((_, other)) = seen.iter().find(|(k, _)| k == key) {
                    panic!(
                        "{} in {context:?}: {:?} and {:?}",
                        key.name(),
                        other.action,
                        binding.action
                    );
                }
                seen.push((*key, binding));
            }
        }
    }
}

#[test]
fn the_help_shows_keys_together_and_marks_what_acts_on_the_cluster() {
    let rows = help_rows();
    let row = |what: &str| rows.iter().find(|r| r.what.starts_with(what)).unwrap();
    assert_eq!(row("move").keys, "j/k ↓/↑");
    assert_eq!(row("page, also").keys, "Ctrl-d/u Ctrl-f/b");
    assert_eq!(row("first").keys, "g/G Home/End");
    assert_eq!(row("the pane of that number").keys, "1-0");
    assert_eq!(row("details").keys, "Enter/l");
    assert_eq!(row("quit").keys, "q/Ctrl-c");
    let decide = row("approve / reject the proposed action");
    assert_eq!(decide.keys, "a/x");
    assert!(decide.dangerous && row("detach").dangerous && !row("refresh").dangerous);
    let report = rows.iter().find(|r| r.keys == "in the report").unwrap();
    assert_eq!(report.what, "R/Esc/q/h close · Space page down");
}

#[test]
fn the_hints_read_as_before() {
    assert_eq!(
        hints(),
        "j/k move · Enter details · a approve · x reject · / search · : command · D detach · ? keys · q quit"
    );
}

#[test]
fn in_a_line_characters_are_typed_but_not_with_ctrl() {
    let app = app_in(Context::Line);
    let key = |code, modifiers| app.action_for_key(KeyEvent::new(code, modifiers));
    assert_eq!(
        key(KeyCode::Char('q'), KeyModifiers::NONE),
        Some(UiAction::Type('q'))
    );
    assert_eq!(
        key(KeyCode::Char('Q'), KeyModifiers::SHIFT),
        Some(UiAction::Type('Q'))
    );
    assert_eq!(key(KeyCode::Char('x'), KeyModifiers::CONTROL), None);
    assert_eq!(
        key(KeyCode::Char('c'), KeyModifiers::CONTROL),
        Some(UiAction::Quit)
    );
    assert_eq!(key(KeyCode::F(1), KeyModifiers::NONE), None);
    // Outside a line, an unbound key does nothing.
    let app = app_in(Context::Panes);
    assert_eq!(
        app.action_for_key(KeyEvent::new(KeyCode::Char('z'), KeyModifiers::NONE)),
        None
    );
}

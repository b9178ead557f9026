//! The `:` command line: `:sort`, `:filter`, `:columns`, `:theme`, `:approve`, `:reject`, `:detach`,
//! `:refresh`, `:help`, `:q`.

use super::{App, Column, DEFAULT_COLUMNS, Effect, Filters};
use crate::tui::snapshot::Snapshot;

/// The commands, as the help shows them.
pub const COMMANDS: [(&str, &str); 4] = [
    (
        ":sort COL [desc]",
        "sort by a column (:sort alone: by workflow)",
    ),
    (
        ":filter k=v …",
        "state, user, partition, backend (:filter alone clears)",
    ),
    (
        ":columns COL …",
        "shown columns in order (saved in the config)",
    ),
    (":theme NAME", "dark, light, high-contrast, or your own"),
];

impl App {
    /// Runs a `:` command.
    pub(super) fn command(&mut self, line: &str, snapshot: &Snapshot) -> Effect {
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
                return self.decide_by_id(name == "approve", rest.first().copied(), snapshot);
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

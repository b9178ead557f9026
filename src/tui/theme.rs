//! Colour themes, kept as data: the built-in `themes/*.toml` and the user's own in the config
//! directory's `themes/`. `NO_COLOR` turns every colour off and leaves emphasis to bold and reverse.

use std::path::Path;

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;

use runguard_engine::model::{JobState, WorkflowStatus};

/// The built-in themes, by name.
const BUILTIN: [(&str, &str); 3] = [
    ("dark", include_str!("../../themes/dark.toml")),
    ("light", include_str!("../../themes/light.toml")),
    (
        "high-contrast",
        include_str!("../../themes/high-contrast.toml"),
    ),
];

/// A theme that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ThemeError {
    #[error(
        "no theme named {0:?} (built in: dark, light, high-contrast; or a file in the config's themes/)"
    )]
    Unknown(String),
    #[error("theme {name}: {message}")]
    Invalid { name: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThemeFile {
    name: String,
    colors: Colors,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Colors {
    background: String,
    text: String,
    muted: String,
    accent: String,
    selection: String,
    selection_text: String,
    running: String,
    pending: String,
    completed: String,
    failed: String,
    recovering: String,
    anomaly: String,
    approval: String,
}

/// The colours of the cockpit.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    pub name: String,
    pub background: Color,
    pub text: Color,
    pub muted: Color,
    pub accent: Color,
    pub selection: Color,
    pub selection_text: Color,
    pub running: Color,
    pub pending: Color,
    pub completed: Color,
    pub failed: Color,
    pub recovering: Color,
    pub anomaly: Color,
    pub approval: Color,
    /// `NO_COLOR`: every colour is the terminal's own.
    pub monochrome: bool,
}

impl Theme {
    /// The theme called `name`: a file `name.toml` in `user_dir` first, then a built-in one.
    pub fn load(name: &str, user_dir: Option<&Path>) -> Result<Self, ThemeError> {
        if let Some(dir) = user_dir {
            let path = dir.join(format!("{name}.toml"));
            if let Ok(text) = std::fs::read_to_string(&path) {
                return Self::parse(name, &text);
            }
        }
        let (_, text) = BUILTIN
            .iter()
            .find(|(builtin, _)| *builtin == name)
            .ok_or_else(|| ThemeError::Unknown(name.to_string()))?;
        Self::parse(name, text)
    }

    /// Names of the built-in themes.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN.iter().map(|(name, _)| *name)
    }

    fn parse(name: &str, text: &str) -> Result<Self, ThemeError> {
        let invalid = |message: String| ThemeError::Invalid {
            name: name.to_string(),
            message,
        };
        let file: ThemeFile = toml::from_str(text).map_err(|err| invalid(err.to_string()))?;
        let c = &file.colors;
        let color = |key: &str, value: &str| {
            value
                .parse::<Color>()
                .map_err(|_| invalid(format!("colors.{key}: {value:?} is not a colour")))
        };
        Ok(Self {
            name: file.name,
            background: color("background", &c.background)?,
            text: color("text", &c.text)?,
            muted: color("muted", &c.muted)?,
            accent: color("accent", &c.accent)?,
            selection: color("selection", &c.selection)?,
            selection_text: color("selection_text", &c.selection_text)?,
            running: color("running", &c.running)?,
            pending: color("pending", &c.pending)?,
            completed: color("completed", &c.completed)?,
            failed: color("failed", &c.failed)?,
            recovering: color("recovering", &c.recovering)?,
            anomaly: color("anomaly", &c.anomaly)?,
            approval: color("approval", &c.approval)?,
            monochrome: false,
        })
    }

    /// The same theme without colours, for `NO_COLOR`.
    pub fn without_colors(mut self) -> Self {
        for color in [
            &mut self.background,
            &mut self.text,
            &mut self.muted,
            &mut self.accent,
            &mut self.selection,
            &mut self.selection_text,
            &mut self.running,
            &mut self.pending,
            &mut self.completed,
            &mut self.failed,
            &mut self.recovering,
            &mut self.anomaly,
            &mut self.approval,
        ] {
            *color = Color::Reset;
        }
        self.monochrome = true;
        self
    }

    /// Plain text.
    pub fn text(&self) -> Style {
        Style::default().fg(self.text).bg(self.background)
    }

    pub fn muted(&self) -> Style {
        let style = Style::default().fg(self.muted);
        if self.monochrome {
            style.add_modifier(Modifier::DIM)
        } else {
            style
        }
    }

    /// Titles, keys, the focused pane's border.
    pub fn accent(&self) -> Style {
        Style::default()
            .fg(self.accent)
            .add_modifier(Modifier::BOLD)
    }

    /// The row under the cursor.
    pub fn selected(&self) -> Style {
        if self.monochrome {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default().fg(self.selection_text).bg(self.selection)
        }
    }

    pub fn anomaly(&self) -> Style {
        Style::default()
            .fg(self.anomaly)
            .add_modifier(Modifier::BOLD)
    }

    pub fn approval(&self) -> Style {
        Style::default()
            .fg(self.approval)
            .add_modifier(Modifier::BOLD)
    }

    /// A job state in its colour.
    pub fn state(&self, state: JobState) -> Style {
        let color = match state {
            JobState::Running | JobState::Completing => self.running,
            JobState::Pending | JobState::Requeued | JobState::Suspended => self.pending,
            JobState::Completed => self.completed,
            _ if state.is_failure() => self.failed,
            _ => self.text,
        };
        Style::default().fg(color)
    }

    /// A workflow status in its colour.
    pub fn status(&self, status: WorkflowStatus) -> Style {
        let color = match status {
            WorkflowStatus::Enabled => self.running,
            WorkflowStatus::Pending => self.pending,
            WorkflowStatus::Recovering => self.recovering,
            WorkflowStatus::CredentialError => self.failed,
            WorkflowStatus::Completed => self.completed,
        };
        Style::default().fg(color)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_theme_loads() {
        for name in Theme::builtin_names() {
            let theme = Theme::load(name, None).unwrap();
            assert_eq!(theme.name, name);
        }
        assert_eq!(Theme::load("dark", None).unwrap().failed, Color::Red);
    }

    #[test]
    fn a_user_theme_wins_and_a_broken_one_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let dark = include_str!("../../themes/dark.toml");
        std::fs::write(
            dir.path().join("mine.toml"),
            dark.replace("name = \"dark\"", "name = \"mine\""),
        )
        .unwrap();
        assert_eq!(Theme::load("mine", Some(dir.path())).unwrap().name, "mine");
        std::fs::write(
            dir.path().join("broken.toml"),
            dark.replace("failed = \"red\"", "failed = \"reddish\""),
        )
        .unwrap();
        let err = Theme::load("broken", Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("colors.failed"), "{err}");
        assert!(Theme::load("nope", None).is_err());
    }

    #[test]
    fn no_color_leaves_only_emphasis() {
        let theme = Theme::load("dark", None).unwrap().without_colors();
        assert_eq!(theme.state(JobState::Failed).fg, Some(Color::Reset));
        assert!(theme.selected().add_modifier.contains(Modifier::REVERSED));
    }
}

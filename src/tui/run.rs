//! The cockpit's process: the terminal, the input thread, the engine on its own task when this process
//! may run it (else a viewer of the engine that holds the store's lock), and the hand-over to a
//! detached headless engine (`:detach`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event, KeyEventKind, MouseButton, MouseEventKind,
};
use ratatui::crossterm::execute;
use tokio::sync::{mpsc, oneshot};

use super::app::{App, Column, Effect, Pane, UiAction};
use super::panes;
use super::snapshot::Snapshot;
use super::theme::{Theme, ThemeError};
use std::sync::Arc;

use crate::compose::{ComposeError, Services, build_engine, viewer_clock};
use runguard_engine::clock::Clock;
use runguard_engine::config::Config;
use runguard_engine::recover::Policy;
use runguard_engine::store::lock::{EngineLock, LockError};
use runguard_engine::store::{CommandKind, Store, StoreError};

/// Why the cockpit could not run.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Engine(#[from] ComposeError),
    #[error(transparent)]
    Theme(#[from] ThemeError),
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
    #[error("detaching: {0}")]
    Detach(String),
}

/// How the cockpit starts.
#[derive(Debug, Clone)]
pub struct CockpitOptions {
    pub store_path: PathBuf,
    /// The config file the user named, passed on to a detached engine.
    pub config_path: Option<PathBuf>,
    /// Whitelisted actions run without approval (like `run --auto`).
    pub auto: bool,
    pub theme: String,
    pub columns: Vec<Column>,
    /// Where the user's themes are (`themes/` in the config directory).
    pub themes_dir: Option<PathBuf>,
    /// Where the chosen columns and theme are kept.
    pub preferences: Option<PathBuf>,
}

/// How the cockpit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Quit,
    /// The engine goes on in a detached headless process.
    Detached {
        pid: u32,
        log: PathBuf,
    },
}

/// Runs the cockpit until the user quits or detaches.
pub async fn run(config: Config, options: CockpitOptions) -> Result<Exit, TuiError> {
    let mut theme = Theme::load(&options.theme, options.themes_dir.as_deref())?;
    if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        theme = theme.without_colors();
    }
    let lock = match EngineLock::acquire(&options.store_path) {
        Ok(lock) => Some(lock),
        Err(LockError::Held { .. }) => None,
        Err(err) => return Err(err.into()),
    };
    // The engine runs on its own task: the UI never waits for the scheduler.
    let mut engine_task = None;
    // Times are the engine's: the simulated cluster runs on its own timeline.
    let clock: Arc<dyn Clock>;
    let mut waker = None;
    let mut services = None;
    if lock.is_some() {
        let mut engine =
            build_engine(config.clone(), &options.store_path, options.auto, false).await?;
        services = Some(Services::start(&config, &options.store_path).await?);
        clock = Arc::clone(engine.clock());
        waker = Some(engine.waker());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            engine
                .run(
                    async {
                        let _ = stopped.await;
                    },
                    false,
                )
                .await
        });
        engine_task = Some((task, stop));
    } else {
        clock = viewer_clock(&config, &options.store_path)?;
    }
    let store = Store::open(&options.store_path)?;
    let policy = Policy::from_config(&config.recovery, !options.auto);
    let user = std::env::var("USER").unwrap_or_default();
    let mut app = App::new(user, lock.is_some());
    app.columns = options.columns.clone();

    let (keys, mut events) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(event) = event::read() {
            if keys.send(event).is_err() {
                return;
            }
        }
    });

    let mut terminal = ratatui::init();
    let _ = execute!(std::io::stdout(), EnableMouseCapture);
    let session = Session {
        clock: clock.as_ref(),
        store: &store,
        policy: &policy,
        options: &options,
        waker: waker.as_deref(),
    };
    let outcome = interact(&mut terminal, &session, &mut app, &mut theme, &mut events).await;
    let _ = execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();

    let outcome = outcome?;
    if let Some((task, stop)) = engine_task {
        let _ = stop.send(());
        let _ = task.await;
    }
    if let Some(services) = services {
        services.stop().await;
    }
    drop(lock);
    match outcome {
        Effect::Detach if app.owns_engine => detach(&options).await,
        _ => Ok(Exit::Quit),
    }
}

/// What the loop reads from: the engine's clock, the store, the policy, the options.
#[derive(Clone, Copy)]
struct Session<'a> {
    clock: &'a dyn Clock,
    store: &'a Store,
    policy: &'a Policy,
    options: &'a CockpitOptions,
    /// Wakes the engine of this process for an early tick (a viewer has none).
    waker: Option<&'a tokio::sync::Notify>,
}

/// The loop: draw when something changed, read the store every second, turn input into actions.
async fn interact(
    terminal: &mut ratatui::DefaultTerminal,
    session: &Session<'_>,
    app: &mut App,
    theme: &mut Theme,
    events: &mut mpsc::UnboundedReceiver<Event>,
) -> Result<Effect, TuiError> {
    let Session {
        clock,
        store,
        policy,
        options,
        waker,
    } = *session;
    let mut snapshot = Snapshot::load(&store.db(), policy, None)?;
    let focus = |app: &App, snapshot: &Snapshot| {
        app.focused(snapshot, clock.now())
            .map(|row| row.workflow_id)
    };
    if let Some(id) = focus(app, &snapshot) {
        snapshot.ensure_detail(&store.db(), policy, id)?;
    }
    let mut refresh = tokio::time::interval(Duration::from_secs(1));
    let mut dirty = true;
    loop {
        if dirty {
            let now = clock.now();
            terminal.draw(|frame| panes::draw(frame, app, &snapshot, theme, now))?;
            dirty = false;
        }
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { return Ok(Effect::Quit) };
                let action = match event {
                    Event::Key(key) if key.kind != KeyEventKind::Release => app.action_for_key(key),
                    Event::Mouse(mouse) => match mouse.kind {
                        MouseEventKind::ScrollDown => Some(UiAction::Down),
                        MouseEventKind::ScrollUp => Some(UiAction::Up),
                        // The overview's rows start below the tabs, the border and the header.
                        MouseEventKind::Down(MouseButton::Left) if app.pane == Pane::Overview && mouse.row >= 3 => {
                            Some(UiAction::ClickRow(usize::from(mouse.row - 3)))
                        }
                        // A click on a heading sorts by its column.
                        MouseEventKind::Down(MouseButton::Left) if app.pane == Pane::Overview && mouse.row == 2 => {
                            let width = terminal.size().map(|size| size.width).unwrap_or(80);
                            panes::overview::column_at(app, width, mouse.column).map(UiAction::SortBy)
                        }
                        _ => None,
                    },
                    Event::Resize(..) => {
                        dirty = true;
                        None
                    }
                    _ => None,
                };
                let Some(action) = action else { continue };
                dirty = true;
                let now = clock.now();
                let showing_log = app.pane == Pane::Log;
                match app.update(action, &snapshot, now) {
                    Effect::None => {}
                    Effect::Quit => return Ok(Effect::Quit),
                    Effect::Detach => {
                        if app.owns_engine {
                            return Ok(Effect::Detach);
                        }
                        app.message = Some("the engine already runs in another process; q leaves it running".into());
                    }
                    Effect::Refresh => {
                        snapshot = Snapshot::load(&store.db(), policy, focus(app, &snapshot))?;
                    }
                    Effect::Approve(id) => queue(store, CommandKind::Approve, id, app, waker)?,
                    Effect::Reject(id) => queue(store, CommandKind::Reject, id, app, waker)?,
                    Effect::SetTheme(name) => match Theme::load(&name, options.themes_dir.as_deref()) {
                        Ok(new) => {
                            *theme = if theme.monochrome { new.without_colors() } else { new };
                            save_preferences(options, app, theme);
                            app.message = Some(format!("theme {name}"));
                        }
                        Err(err) => app.message = Some(err.to_string()),
                    },
                    Effect::SaveColumns(_) => {
                        save_preferences(options, app, theme);
                        app.message = Some("columns saved".into());
                    }
                }
                // The cursor may be on another workflow now, or several are compared: read them first.
                if let Some(id) = focus(app, &snapshot) {
                    snapshot.ensure_detail(&store.db(), policy, id)?;
                }
                ensure_shown(app, &mut snapshot, store, policy)?;
                if app.pane == Pane::Log && !showing_log {
                    reload_log(app, &snapshot, terminal, clock);
                }
            }
            _ = refresh.tick() => {
                let focused = focus(app, &snapshot);
                snapshot.reload(store, policy, focused)?;
                if app.pane == Pane::Log {
                    reload_log(app, &snapshot, terminal, clock);
                }
                // Durations and "ago" columns move every second; the terminal only receives changed cells.
                dirty = true;
                ensure_shown(app, &mut snapshot, store, policy)?;
            }
        }
    }
}

/// In the compare pane, reads every workflow of the selected attempts; with the report open, its
/// workflow, which the cursor may have left when new attempts moved the rows.
fn ensure_shown(
    app: &App,
    snapshot: &mut Snapshot,
    store: &Store,
    policy: &Policy,
) -> Result<(), StoreError> {
    if let Some(view) = &app.report {
        snapshot.ensure_detail(&store.db(), policy, view.workflow_id)?;
    }
    if app.pane == Pane::Capacity {
        super::panes::capacity::ensure(snapshot, &store.db())?;
    }
    if app.pane != Pane::Compare {
        return Ok(());
    }
    for (id, _) in &app.selected {
        snapshot.ensure_detail(&store.db(), policy, *id)?;
    }
    Ok(())
}

/// Reads the focused attempt's log again, sized to the terminal.
fn reload_log(
    app: &mut App,
    snapshot: &Snapshot,
    terminal: &ratatui::DefaultTerminal,
    clock: &dyn Clock,
) {
    // The tabs, the status line and the pane's border.
    app.log_height = terminal
        .size()
        .map(|size| usize::from(size.height.saturating_sub(4)))
        .unwrap_or(20);
    let path = app
        .focused(snapshot, clock.now())
        .and_then(|row| row.attempt.log_path.clone());
    let height = app.log_height;
    app.log.reload(path.as_deref(), height);
}

/// Queues an approval or rejection for the engine, which applies it on its next tick.
fn queue(
    store: &Store,
    kind: CommandKind,
    id: i64,
    app: &mut App,
    waker: Option<&tokio::sync::Notify>,
) -> Result<(), TuiError> {
    store.db().push_command(kind, id, Utc::now())?;
    if let Some(waker) = waker {
        waker.notify_one();
    }
    app.message = Some(format!(
        "{} of action {id} sent to the engine",
        kind.as_str()
    ));
    Ok(())
}

/// Keeps the columns and the theme for the next start.
fn save_preferences(options: &CockpitOptions, app: &App, theme: &Theme) {
    let Some(path) = &options.preferences else {
        return;
    };
    let columns: Vec<&str> = app.columns.iter().map(|c| c.name()).collect();
    let text = format!(
        "# Written by the cockpit (:columns, :theme).\ntheme = {:?}\ncolumns = {:?}\n",
        theme.name, columns
    );
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(err) = std::fs::write(path, text) {
        tracing::warn!(%err, path = %path.display(), "saving the cockpit's preferences");
    }
}

/// The arguments of the detached engine: the cockpit's config and store, and its mode — `--auto` only
/// when the cockpit runs with it, so detaching never lets actions run that were waiting for approval.
fn detached_args(options: &CockpitOptions) -> Vec<std::ffi::OsString> {
    let mut args = Vec::new();
    if let Some(config) = &options.config_path {
        args.push("--config".into());
        args.push(config.clone().into_os_string());
    }
    args.push("--db".into());
    args.push(options.store_path.clone().into_os_string());
    args.push("run".into());
    if options.auto {
        args.push("--auto".into());
    }
    args
}

/// Hands the engine to a detached `runguard run` process (in the cockpit's mode) and waits until it
/// holds the lock.
async fn detach(options: &CockpitOptions) -> Result<Exit, TuiError> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|err| TuiError::Detach(err.to_string()))?;
    let log = options
        .store_path
        .parent()
        .unwrap_or(Path::new("."))
        .join("runguard-engine.log");
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|err| TuiError::Detach(format!("{}: {err}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(|err| TuiError::Detach(err.to_string()))?;
    let mut command = std::process::Command::new(exe);
    command
        .args(detached_args(options))
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: closing the SSH session (SIGHUP to the terminal's group) leaves it running.
        .process_group(0);
    let child = command
        .spawn()
        .map_err(|err| TuiError::Detach(err.to_string()))?;
    let pid = child.id();
    // The new engine writes its pid into the lock file once it holds the lock.
    let holder = format!("pid {pid}");
    for _ in 0..300 {
        if EngineLock::recorded_holder(&options.store_path).as_deref() == Some(holder.as_str()) {
            return Ok(Exit::Detached { pid, log });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(TuiError::Detach(format!(
        "the headless engine (pid {pid}) did not take the store's lock; see {}",
        log.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(auto: bool) -> CockpitOptions {
        CockpitOptions {
            store_path: PathBuf::from("/data/runguard.sqlite"),
            config_path: Some(PathBuf::from("/etc/runguard.toml")),
            auto,
            theme: "dark".into(),
            columns: Vec::new(),
            themes_dir: None,
            preferences: None,
        }
    }

    #[test]
    fn the_detached_engine_runs_in_the_cockpit_s_mode() {
        let args = |auto| {
            detached_args(&options(auto))
                .into_iter()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            args(false),
            [
                "--config",
                "/etc/runguard.toml",
                "--db",
                "/data/runguard.sqlite",
                "run"
            ]
        );
        assert_eq!(args(true).last().map(String::as_str), Some("--auto"));
    }
}

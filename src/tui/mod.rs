//! The cockpit: an interactive terminal frontend. It reads the store, draws, and turns keys into
//! actions; approvals go to the engine through the store's command table, so the process that runs the
//! engine and one that only views it behave the same. The engine never imports this module.

pub mod app;
pub mod columns;
pub mod keys;
pub mod log_view;
pub mod panes;
pub mod run;
pub mod snapshot;
pub mod theme;

#[cfg(all(test, feature = "sim"))]
mod tests;

/// The text of a `width`×`height` frame drawn by `draw`, a line per row.
#[cfg(test)]
pub(crate) fn drawn_text(
    width: u16,
    height: u16,
    draw: impl FnOnce(&mut ratatui::Frame<'_>),
) -> String {
    let backend = ratatui::backend::TestBackend::new(width, height);
    let mut terminal = ratatui::Terminal::new(backend).unwrap();
    terminal.draw(draw).unwrap();
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

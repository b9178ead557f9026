//! Where runguard keeps its files by default: the XDG data and config directories.

use std::path::PathBuf;

use directories::ProjectDirs;

fn project_dirs() -> Option<ProjectDirs> {
    ProjectDirs::from("", "", "runguard")
}

/// `config.toml` in the XDG config directory (`~/.config/runguard/config.toml`).
pub fn default_config_file() -> Option<PathBuf> {
    project_dirs().map(|dirs| dirs.config_dir().join("config.toml"))
}

/// The XDG data directory (`~/.local/share/runguard`), falling back to the working directory.
pub fn data_dir() -> PathBuf {
    project_dirs()
        .map(|dirs| dirs.data_dir().to_path_buf())
        .unwrap_or_else(|| PathBuf::from(".runguard"))
}

/// The default store file.
pub fn default_store_file() -> PathBuf {
    data_dir().join("runguard.sqlite")
}

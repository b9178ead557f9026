//! The exclusive lock that lets only one engine act on a store at a time.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Another engine holds the store, or the lock file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another runguard engine{holder} is already acting on {store}; stop it first, or watch it read-only with `runguard status`"
    )]
    Held { store: PathBuf, holder: String },
    #[error("cannot use the lock file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Held while an engine runs; released when dropped (or when the process dies, since it is an OS lock).
#[derive(Debug)]
pub struct EngineLock {
    _file: File,
    path: PathBuf,
}

impl EngineLock {
    /// The lock file that belongs to a store file.
    pub fn path_for(store: &Path) -> PathBuf {
        let mut name = store.as_os_str().to_owned();
        name.push(".lock");
        PathBuf::from(name)
    }

    /// Takes the lock of `store` or says who holds it.
    pub fn acquire(store: &Path) -> Result<Self, LockError> {
        let path = Self::path_for(store);
        let io_error = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_error)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(LockError::Held {
                    store: store.to_path_buf(),
                    holder: if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" ({holder})")
                    },
                });
            }
            Err(TryLockError::Error(err)) => return Err(io_error(err)),
        }
        // Record who holds it, for the message the next engine prints.
        file.set_len(0).map_err(io_error)?;
        file.seek(SeekFrom::Start(0)).map_err(io_error)?;
        writeln!(file, "pid {}", std::process::id()).map_err(io_error)?;
        file.flush().map_err(io_error)?;
        Ok(Self { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who the lock file says holds the lock (`pid 4242`), read without taking it: trying to take it
    /// to find out could make a starting engine find it held and give up.
    pub fn recorded_holder(store: &Path) -> Option<String> {
        let text = std::fs::read_to_string(Self::path_for(store)).ok()?;
        let holder = text.trim();
        (!holder.is_empty()).then(|| holder.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_engine_is_refused_with_the_holder_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("runguard.sqlite");
        let first = EngineLock::acquire(&store).unwrap();
        let err = EngineLock::acquire(&store).unwrap_err().to_string();
        assert!(err.contains("already acting"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        EngineLock::acquire(&store).unwrap();
    }
}

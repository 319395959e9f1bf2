//! One writer per directory: an advisory lock on `DIR/.lock`, taken by every command that
//! writes a run directory (`train`, `average`, an experiment for its folder and each of its
//! runs, the course for its folder) and held until it ends. A second writer is refused at
//! once, naming the directory and the holder's process id.
//!
//! The lock is the operating system's (`flock` on Unix, `LockFileEx` on Windows, through
//! [`File::try_lock`]): it dies with the process that holds it, so a writer killed at any
//! moment never blocks the next one. The file itself only carries the holder's id for the
//! message, and is emptied when the lock is released; it is left in place (removing it would
//! let two writers lock two different files of the same name), and a file left behind is no
//! lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The lock file's name inside the directory it guards.
pub const LOCK_FILE: &str = ".lock";

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "{dir} is being written by another s2s process{}: one process at a time writes a directory; wait for it to end (or stop it), or use another directory",
        pid.map(|p| format!(" (PID {p})")).unwrap_or_default()
    )]
    Held {
        /// The directory.
        dir: PathBuf,
        /// The holder's process id, as it wrote it (absent while it is still writing it).
        pid: Option<u32>,
    },
    /// The lock file could not be opened or locked.
    #[error("{path}: cannot take the directory's lock: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The directory could not be made (a file in its way is named, with the remedy).
    #[error(transparent)]
    Dir(#[from] s2s_data::DataError),
}

/// A held lock on a directory; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DirLock {
    /// Open for as long as the lock is held: closing it releases the lock.
    file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Locks the existing directory `dir` for writing, or says who holds it. Never waits.
    pub fn acquire(dir: &Path) -> Result<DirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io { path: path.clone(), source };
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LockError::Held { dir: dir.to_path_buf(), pid: holder(&path) });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // The id is for the message a second writer prints; failing to write it (a full disk)
        // leaves the lock held all the same.
        let _ = file.set_len(0).and_then(|()| writeln!(file, "{}", std::process::id()));
        Ok(DirLock { file, dir: dir.to_path_buf() })
    }

    /// [`DirLock::acquire`], creating `dir` (and its parents) first.
    pub fn create(dir: &Path) -> Result<DirLock, LockError> {
        s2s_data::create_dir_all(dir)?;
        Self::acquire(dir)
    }

    /// The directory it guards.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for DirLock {
    /// Empties the file before closing it releases the lock, so that the next holder's id is
    /// the only one a refused writer can read (a killed holder's stays until the next takes it).
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

/// The id the holder of `path`'s lock wrote into it. It writes it just after taking the lock,
/// so an empty (or half-written) file is read again for a moment before giving up.
fn holder(path: &Path) -> Option<u32> {
    for _ in 0..50 {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()) {
            return Some(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("s2s-lock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// A second lock on a held directory is refused at once with the holder's id (this process:
    /// the lock belongs to the open file, not to the process), and taken once the first is dropped.
    #[test]
    fn a_second_writer_is_refused_until_the_first_lets_go() {
        let dir = fresh("held");
        let first = DirLock::create(&dir).unwrap();
        assert_eq!(first.dir(), dir);
        let text = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        let e = DirLock::acquire(&dir).unwrap_err();
        match &e {
            LockError::Held { dir: d, pid } => {
                assert_eq!(d, &dir);
                assert_eq!(*pid, Some(std::process::id()));
            }
            other => panic!("{other}"),
        }
        let message = e.to_string();
        assert!(message.contains(&dir.display().to_string()), "{message}");
        assert!(message.contains(&format!("(PID {})", std::process::id())), "{message}");
        drop(first);
        assert_eq!(std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap(), "", "emptied on release");
        let again = DirLock::acquire(&dir).unwrap();
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A lock file left behind by a process that is gone (any content, a longer id than ours
    /// included) is no lock: it is taken and rewritten with this process's id.
    #[test]
    fn a_lock_file_left_behind_does_not_block() {
        let dir = fresh("stale");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(LOCK_FILE), "4294967295\nleft over\n").unwrap();
        let lock = DirLock::acquire(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        drop(lock);
        std::fs::write(dir.join(LOCK_FILE), "not a number").unwrap();
        DirLock::acquire(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A directory that is not there (`acquire`) or cannot be made (`create`, a file in the
    /// way) is an error naming the path, and creates nothing.
    #[test]
    fn a_missing_or_blocked_directory_is_named() {
        let dir = fresh("missing");
        let e = DirLock::acquire(&dir).unwrap_err();
        assert!(matches!(e, LockError::Io { .. }), "{e}");
        assert!(e.to_string().contains(&dir.join(LOCK_FILE).display().to_string()), "{e}");
        assert!(!dir.exists());
        std::fs::write(&dir, "a file").unwrap();
        let e = DirLock::create(&dir.join("run")).unwrap_err().to_string();
        assert!(e.contains(&dir.display().to_string()) && e.contains("is a file"), "{e}");
        let _ = std::fs::remove_file(&dir);
    }
}

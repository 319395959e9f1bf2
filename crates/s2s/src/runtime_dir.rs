//! A usable `XDG_RUNTIME_DIR`, so that opening a Vulkan adapter prints nothing.
//!
//! Mesa's Vulkan drivers (lavapipe among them) probe for a Wayland display while wgpu lists
//! adapters, and libwayland prints `error: XDG_RUNTIME_DIR is invalid or not set in the
//! environment.` to stderr at each probe when the variable is unset or not an absolute path —
//! 4 to 6 lines before every `--device auto` command on a server, a container or under `sudo`,
//! where no login session sets it. The command then works as it would anyway: the lines are
//! noise, and read as an error. So at start, before any adapter is opened, a variable that is
//! unset or does not name a writable directory is pointed at a private directory of this user
//! (`$TMPDIR/s2s-runtime-UID`, mode 0700, checked to be ours and not a link), as a login
//! session would provide; nothing is ever put in it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Sets `XDG_RUNTIME_DIR` to [`private_dir`] under the temp dir when [`unusable`] says the
/// current value will not do; leaves it alone when it will, or when no private directory can be
/// had (the noise is harmless).
///
/// # Safety
/// Changes the environment: call it before any other thread exists.
pub unsafe fn ensure() {
    let current = std::env::var_os("XDG_RUNTIME_DIR");
    if unusable(current.as_deref()).is_none() {
        return;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if let Ok(dir) = private_dir(&std::env::temp_dir(), uid) {
        // SAFETY: the caller guarantees that no other thread reads the environment.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", dir) };
    }
}

/// Why `value` will not do as `XDG_RUNTIME_DIR`, or `None` when it will: it must be set, an
/// absolute path (libwayland's test), and a directory this process can write to.
pub fn unusable(value: Option<&OsStr>) -> Option<&'static str> {
    let Some(value) = value else { return Some("unset") };
    let path = Path::new(value);
    if !path.is_absolute() {
        return Some("not an absolute path");
    }
    if !path.is_dir() {
        return Some("not a directory");
    }
    let Ok(c) = std::ffi::CString::new(value.as_bytes()) else { return Some("not a path") };
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Some("not writable");
    }
    None
}

/// `base/s2s-runtime-UID`, created with mode 0700 if missing, and checked to be a directory
/// (not a link) owned by `uid` and closed to everyone else (a group or other bit set by hand is
/// taken away); an error when it is anything else — another user's, say, made first to catch
/// what this user would put there.
pub fn private_dir(base: &Path, uid: u32) -> std::io::Result<PathBuf> {
    let dir = base.join(format!("s2s-runtime-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(&dir)?;
    let refuse = |why: &str| Err(std::io::Error::other(format!("{}: {why}", dir.display())));
    if !m.file_type().is_dir() {
        return refuse("not a directory");
    }
    if m.uid() != uid {
        return refuse("owned by another user");
    }
    if m.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("s2s-runtime-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_unset_relative_missing_or_file_value_is_replaced_and_a_writable_directory_kept() {
        let d = scratch("choice");
        let file = d.join("file");
        std::fs::write(&file, "").unwrap();
        assert_eq!(unusable(None), Some("unset"));
        assert_eq!(unusable(Some(OsStr::new(""))), Some("not an absolute path"));
        assert_eq!(unusable(Some(OsStr::new("run/user/1000"))), Some("not an absolute path"));
        assert_eq!(unusable(Some(d.join("missing").as_os_str())), Some("not a directory"));
        assert_eq!(unusable(Some(file.as_os_str())), Some("not a directory"));
        assert_eq!(unusable(Some(d.as_os_str())), None);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Root may write anywhere: only another user can see a read-only directory refused.
            let ro = d.join("ro");
            std::fs::create_dir(&ro).unwrap();
            std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
            assert_eq!(unusable(Some(ro.as_os_str())), Some("not writable"));
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_private_directory_is_the_users_own_and_closed_to_others() {
        let d = scratch("private");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let dir = private_dir(&d, uid).unwrap();
        assert_eq!(dir, d.join(format!("s2s-runtime-{uid}")));
        let m = std::fs::symlink_metadata(&dir).unwrap();
        assert!(m.is_dir() && m.uid() == uid && m.mode() & 0o777 == 0o700, "{:o}", m.mode());
        assert_eq!(unusable(Some(dir.as_os_str())), None, "what it chose will do");
        // Again: the same directory; opened to others by hand: closed again.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(private_dir(&d, uid).unwrap(), dir);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        // A directory at another user's name is not theirs (it is ours): refused, not used.
        let other_user = uid.wrapping_add(1);
        assert!(private_dir(&d, other_user).is_err_and(|e| e.to_string().contains("another user")));
        // A link or a file in its place: refused.
        let other = scratch("private-target");
        let link_base = scratch("private-link");
        std::os::unix::fs::symlink(&other, link_base.join(format!("s2s-runtime-{uid}"))).unwrap();
        assert!(private_dir(&link_base, uid).is_err_and(|e| e.to_string().contains("not a directory")));
        let file_base = scratch("private-file");
        std::fs::write(file_base.join(format!("s2s-runtime-{uid}")), "").unwrap();
        assert!(private_dir(&file_base, uid).is_err());
        for p in [d, other, link_base, file_base] {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

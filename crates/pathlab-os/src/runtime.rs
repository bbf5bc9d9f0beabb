//! Where running emulators leave their control sockets and locks (what a killed run left
//! is found by [`crate::clean`]).
//!
//! Everything lives under one directory (`/run/pathlab`, or `$PATHLAB_RUNTIME_DIR`):
//! `emulate/NAME.sock` is an emulator's control socket, `locks/` holds one lock file per
//! interface an emulator forwards. Locks are `flock`s, which the kernel releases when the
//! process dies, so a killed emulator never keeps an interface busy.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// The directory for sockets and locks.
pub fn runtime_dir() -> PathBuf {
    std::env::var_os("PATHLAB_RUNTIME_DIR")
        .map_or_else(|| PathBuf::from("/run/pathlab"), PathBuf::from)
}

/// The control socket of the emulator called `name`.
pub fn control_socket_path(name: &str) -> PathBuf {
    runtime_dir().join("emulate").join(format!("{name}.sock"))
}

/// Checks that an emulator name is usable in a file name: 1 to 32 letters, digits, `-`, `_`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "emulator name '{name}' must be 1 to 32 letters, digits, '-' or '_'"
        ))
    }
}

/// Takes the lock of interface `ifindex` in the calling thread's namespace. Returns the
/// open lock file, or `None` if another process holds it, with the lock's path.
pub fn lock_interface(ifindex: u32) -> io::Result<(Option<File>, PathBuf)> {
    let netns = fs::metadata("/proc/thread-self/ns/net")?.ino();
    let dir = runtime_dir().join("locks");
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("netns-{netns}-if-{ifindex}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => Ok((Some(file), path)),
        Err(fs::TryLockError::WouldBlock) => Ok((None, path)),
        Err(fs::TryLockError::Error(error)) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(validate_name("wan-1").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("../x").is_err());
        assert!(validate_name(&"a".repeat(33)).is_err());
    }
}

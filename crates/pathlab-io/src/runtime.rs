//! Where running emulators leave their control sockets and locks, and how `lab clean`
//! finds what a killed run left.
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

/// What [`clean`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleaned {
    /// Control sockets no emulator (and stats sockets no tunnel) answers on any more.
    pub sockets: Vec<PathBuf>,
    /// Lock files no process holds.
    pub locks: Vec<PathBuf>,
    /// Named namespaces (`/run/netns/pathlab-*`) removed.
    pub namespaces: Vec<String>,
    /// Interfaces (`pl-*`) removed from the current namespace.
    pub interfaces: Vec<String>,
    /// nftables tables (`pathlab-*`) of dead shells removed from the current namespace.
    pub nat_tables: Vec<String>,
}

/// Removes what killed pathlab runs left: stale control sockets, unheld locks, named
/// namespaces with pathlab's prefix, and `pl-` interfaces and `pathlab-` nftables tables
/// in this namespace whose owner is gone. Live emulators and shells are not touched.
pub fn clean() -> io::Result<Cleaned> {
    let mut cleaned = Cleaned::default();
    // Emulators' control sockets and tunnels' stats sockets.
    for kind in ["emulate", "bond"] {
        let Ok(entries) = fs::read_dir(runtime_dir().join(kind)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "sock")
                && std::os::unix::net::UnixStream::connect(&path).is_err()
            {
                fs::remove_file(&path)?;
                cleaned.sockets.push(path);
            }
        }
    }
    if let Ok(entries) = fs::read_dir(runtime_dir().join("locks")) {
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(file) = File::open(&path) else {
                continue;
            };
            if file.try_lock().is_ok() {
                fs::remove_file(&path)?;
                cleaned.locks.push(path);
            }
        }
    }
    if let Ok(entries) = fs::read_dir("/run/netns") {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("pathlab-") {
                let path = entry.path();
                let _ = crate::sys::unmount_detach(&path.to_string_lossy());
                fs::remove_file(&path)?;
                cleaned.namespaces.push(name);
            }
        }
    }
    let mut netlink = crate::netlink::Netlink::open()?;
    for link in netlink.links()? {
        if let Some(pid) = link.name.strip_prefix("pl-").and_then(owner_pid) {
            if !crate::sys::process_exists(pid) {
                netlink.delete_link(link.index)?;
                cleaned.interfaces.push(link.name);
            }
        }
    }
    for table in crate::nat::tables()? {
        if let Some(pid) = table
            .strip_prefix(crate::nat::TABLE_PREFIX)
            .and_then(owner_pid)
        {
            if !crate::sys::process_exists(pid) {
                crate::nat::delete_table(&table)?;
                cleaned.nat_tables.push(table);
            }
        }
    }
    Ok(cleaned)
}

/// The pid in an interface name pathlab made: `pl-<pid>-<role>`.
fn owner_pid(rest: &str) -> Option<u32> {
    rest.split('-').next()?.parse().ok()
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

    #[test]
    fn owner_pid_is_read_from_interface_names() {
        assert_eq!(owner_pid("1234-o"), Some(1234));
        assert_eq!(owner_pid("x-o"), None);
    }
}

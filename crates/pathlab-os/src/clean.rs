//! `pathlab lab clean`: what killed pathlab runs left behind (stale sockets and locks under
//! the runtime directory, named namespaces, `pl-` interfaces, nftables tables), removed
//! when its owner is gone. It reads the runtime directory ([`crate::runtime`]) and the NAT
//! tables ([`crate::nat`]); neither of those knows about it.

use std::fs::{self, File};
use std::io;
use std::path::PathBuf;

use crate::runtime::runtime_dir;

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
    fn owner_pid_is_read_from_interface_names() {
        assert_eq!(owner_pid("1234-o"), Some(1234));
        assert_eq!(owner_pid("x-o"), None);
    }
}

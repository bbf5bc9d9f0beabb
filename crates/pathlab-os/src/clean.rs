//! `pathlab lab clean`: what killed pathlab runs left behind, removed when its owner is
//! gone, and nothing else: stale sockets and locks under the runtime directory, the
//! nftables tables of killed shells, and the IPv4 forwarding they turned on. It reads the
//! runtime directory ([`crate::runtime`]) and the NAT tables ([`crate::nat`]); neither of
//! those knows about it.
//!
//! It also puts back the interfaces killed emulators had swapped for a stand-in
//! (`emulate --iface`, [`crate::interpose`]), from their records. Other namespaces and
//! interfaces are not its business: pathlab's namespaces are anonymous (they go with the
//! last process or descriptor holding them) and its interfaces live in them or are TUN
//! devices that go with their descriptor, so a killed run leaves none. A
//! named namespace or an interface whose name looks like pathlab's was made by someone
//! else and is left alone. A table is deleted only if pathlab recorded making it
//! ([`crate::runtime::record_table`]), as a name alone can be anyone's.

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
    /// nftables tables of killed shells removed from the current namespace.
    pub nat_tables: Vec<String>,
    /// Records of killed shells' tables whose namespace is gone, and the tables with it.
    pub records: Vec<PathBuf>,
    /// Forwarding locks of killed shells: IPv4 forwarding set back to what it was before
    /// them where the lock is of the current namespace.
    pub forwarding: Vec<PathBuf>,
    /// Interfaces killed emulators had swapped (`emulate --iface`), put back as they were.
    pub interfaces: Vec<crate::interpose::Restored>,
    /// Swaps whose records were refused or whose undoing failed: reported, not undone.
    pub not_restored: Vec<crate::interpose::NotRestored>,
    /// Table records refused (another user's, writable by others, a link, not a record).
    pub refused: Vec<crate::runtime::Refused>,
}

impl Cleaned {
    /// Whether something could not be cleaned (a record refused, a swap not undone).
    pub fn failed(&self) -> bool {
        !self.not_restored.is_empty() || !self.refused.is_empty()
    }
}

/// Removes what killed pathlab runs left: stale control sockets, unheld locks, and in this
/// namespace the nftables tables and IPv4 forwarding of shells that were killed. Live
/// emulators and shells, and whatever pathlab did not record making, are not touched. A
/// swap or a record that cannot be undone or trusted is reported ([`Cleaned::failed`]),
/// and the rest is still cleaned.
pub fn clean() -> io::Result<Cleaned> {
    // Before the locks: each swap's interface lock proves its emulator is gone.
    let restores = crate::interpose::restore_killed();
    let mut cleaned = Cleaned {
        interfaces: restores.restored,
        not_restored: restores.failed,
        ..Cleaned::default()
    };
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
    let here = crate::runtime::current_netns()?;
    let mut tables = None;
    let records = crate::runtime::table_records()?;
    cleaned.refused = records.refused;
    for (path, record) in records.found {
        if record.owner.is_alive() {
            continue;
        }
        if record.netns == here {
            let tables = match &mut tables {
                Some(tables) => tables,
                None => tables.insert(crate::nat::tables()?),
            };
            if tables.contains(&record.table) {
                crate::nat::delete_table(&record.table)?;
                cleaned.nat_tables.push(record.table);
            }
            fs::remove_file(&path)?;
        } else if namespace_gone(record.netns) {
            fs::remove_file(&path)?;
            cleaned.records.push(path);
        }
        // Otherwise the table is in a namespace still alive: `lab clean` run there
        // deletes it.
    }
    cleaned.forwarding = crate::nat::restore_forwarding_of_killed_shells(namespace_gone)?;
    Ok(cleaned)
}

/// Whether no process is in the network namespace of inode `netns`, none holds a
/// descriptor of it and nothing is mounted on it (`ip netns add`): it is gone, with
/// everything in it. Where that cannot be read (another process's descriptors without
/// the right to), it counts as alive, so what it holds is left alone.
fn namespace_gone(netns: u64) -> bool {
    matches!(crate::netns::locate(netns), crate::netns::Located::Gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_gone_only_when_nothing_holds_it() {
        let here = crate::runtime::current_netns().unwrap();
        assert!(!namespace_gone(here), "this thread is in it");
        // Inodes of namespaces come from the kernel's proc inode numbers, which start at
        // 0xF0000000: 1 is never one.
        assert!(namespace_gone(1));
    }
}

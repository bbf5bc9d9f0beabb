//! The record of a swap, step by step, and its undoing from whatever step it reached.
//!
//! The record names the step being taken and is written (a new file, synced, renamed over
//! the old, the directory synced) before the step is taken: a run killed anywhere leaves a
//! record whose step is either done or not begun, and [`undo`] works from both. It looks
//! at what is there rather than trusting the step alone: the stand-in is deleted through
//! its other end in the holder (deleting one end of a veth deletes both), so its index,
//! which a run killed while making it never recorded, is never needed.
//!
//! Records are read only from a directory owned by root or this user that no one else may
//! write in, and only when the file itself is (`runtime::trusted_records`); a record's
//! holder must be the file beside it of the same stem, so no record can have root unmount
//! or unlink anything else.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::rtnl::reapply;
use crate::netlink::Netlink;
use crate::netns::{Located, Netns};
use crate::runtime::{self, Owner};

/// The format of the record on disk (2: the step; 1, without it, is read too).
pub(super) const RECORD_VERSION: u32 = 2;

/// A step of the swap, in the order taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Making the holder namespace and bind-mounting it beside the record.
    Holder,
    /// Moving the interface into the holder (the kernel takes its addresses and routes).
    Move,
    /// Making the stand-in veth in the interface's place, its other end in the holder.
    Standin,
    /// Bringing up the emulator's two ports in the holder.
    Ports,
    /// Giving the stand-in the interface's addresses, routes, neighbours and sysctls.
    Addresses,
    /// Done: the emulator runs.
    Running,
}

impl Step {
    /// Every step, in the order taken.
    pub const ALL: [Step; 6] = [
        Step::Holder,
        Step::Move,
        Step::Standin,
        Step::Ports,
        Step::Addresses,
        Step::Running,
    ];

    /// Its name in the record and in `PATHLAB_TEST_DIE_AT_STEP`.
    pub fn name(self) -> &'static str {
        match self {
            Step::Holder => "holder",
            Step::Move => "move",
            Step::Standin => "standin",
            Step::Ports => "ports",
            Step::Addresses => "addresses",
            Step::Running => "running",
        }
    }

    /// What a version-1 record, which does not say, is taken to have reached: the undo
    /// looks at what is there, and puts the interface's addresses back if it is.
    fn unknown() -> Step {
        Step::Addresses
    }
}

/// Test builds only (the `test-hooks` feature, which the end-to-end tests turn on): the
/// process kills itself (SIGKILL) at the point `PATHLAB_TEST_DIE_AT_STEP` names: `STEP`
/// once step STEP is recorded and before it is taken, `STEP+` once it is taken and before
/// the next is recorded ([`Step::name`]). Any other build has no such point.
#[cfg(feature = "test-hooks")]
pub(super) fn test_die_at(step: Step, taken: bool) {
    let Some(wanted) = std::env::var_os("PATHLAB_TEST_DIE_AT_STEP") else {
        return;
    };
    let here = format!("{}{}", step.name(), if taken { "+" } else { "" });
    if wanted == here.as_str() {
        let _ = crate::sys::kill(std::process::id(), libc::SIGKILL);
        loop {
            std::thread::park();
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
pub(super) fn test_die_at(_step: Step, _taken: bool) {}

/// Test builds only (the `test-hooks` feature): whether `PATHLAB_TEST_NO_GUARDIAN=1` asks
/// `emulate --iface` to start no guardian, for the tests of what `lab clean` alone undoes.
/// Always false in any other build.
pub fn test_without_guardian() -> bool {
    cfg!(feature = "test-hooks")
        && std::env::var_os("PATHLAB_TEST_NO_GUARDIAN").is_some_and(|v| v == "1")
}

/// What NS had on the interface, where the parts of the swap are and the step it is at.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Record {
    pub(super) version: u32,
    /// The step being taken (those before it are done).
    #[serde(default = "Step::unknown")]
    pub(super) step: Step,
    /// The namespace as the user named it, its file and its inode.
    pub(super) netns: String,
    pub(super) netns_path: PathBuf,
    pub(super) netns_inode: u64,
    pub(super) interface: String,
    pub(super) index: u32,
    /// Its MAC address: what tells it from another interface that took its name.
    #[serde(default)]
    pub(super) mac: Vec<u8>,
    pub(super) up: bool,
    pub(super) master: Option<u32>,
    /// Raw rtnetlink bodies (fixed part and attributes) as NS's dumps gave them.
    pub(super) addresses: Vec<Vec<u8>>,
    pub(super) routes: Vec<Vec<u8>>,
    pub(super) neighbours: Vec<Vec<u8>>,
    /// (`ipv4` or `ipv6`, file under `conf/IF/`, value).
    pub(super) sysctls: Vec<(String, String, String)>,
    /// The holder's bind mount: the record's own path with `.netns` for `.json`.
    pub(super) holder: PathBuf,
    /// The veth end in the holder.
    pub(super) inside: String,
    pub(super) owner: Owner,
    /// The emulator's name (`--name`), for the message of a second one.
    pub(super) emulator: String,
}

impl Record {
    /// `IF in NS`, for messages.
    fn shown(&self) -> String {
        format!("{} in {}", self.interface, self.netns)
    }

    /// Why the record at `path` must not be acted on, if it must not: a holder anywhere
    /// but beside it (root unmounts and unlinks it), names that are no interface's (they
    /// reach paths under /proc/sys), a version this pathlab does not read.
    fn refusal(&self, path: &Path) -> Option<String> {
        if !(1..=RECORD_VERSION).contains(&self.version) {
            return Some(format!(
                "record version {}, not one this pathlab reads",
                self.version
            ));
        }
        let beside = path.with_extension("netns");
        if self.holder != beside {
            return Some(format!(
                "its holder {} is not {} (a holder is only ever the file beside its record)",
                self.holder.display(),
                beside.display()
            ));
        }
        if fs::symlink_metadata(&self.holder).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(format!(
                "its holder {} is a symbolic link",
                self.holder.display()
            ));
        }
        for name in [&self.interface, &self.inside] {
            if !is_interface_name(name) {
                return Some(format!("{name:?} is not an interface name"));
            }
        }
        None
    }
}

/// Whether `name` can be an interface's: 1 to 15 bytes, no `/`, no whitespace or control
/// characters, not `.` or `..` (the kernel's `dev_valid_name`).
fn is_interface_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

/// Writes `record` to `path` so that a crash at any instant leaves the old record or the
/// new one, whole: a new file beside it (created, never an existing one followed), synced,
/// renamed over it, and the directory synced.
pub(super) fn write_record(path: &Path, record: &Record) -> io::Result<()> {
    let text = serde_json::to_vec(record).map_err(io::Error::other)?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::other(format!("{} is no file", path.display())));
    };
    let temporary = format!("{}.tmp", name.to_string_lossy());
    // One a run killed while writing left: the directory is this user's alone (0700).
    match fs::remove_file(parent.join(&temporary)) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let dir = crate::files::Dir::open(parent).map_err(io::Error::other)?;
    let mut file = dir.create_new(&temporary).map_err(io::Error::other)?;
    file.write_all(&text)?;
    file.sync_all()?;
    fs::rename(parent.join(&temporary), path)?;
    File::open(parent)?.sync_all()
}

/// Undoes a swap from whatever step it reached: the stand-in deleted, the real interface
/// back in NS with what it had, the holder unmounted and the record removed. `holder` is
/// opened from the record when not given. An error leaves the record (and the holder, if
/// the interface could not leave it), so that undoing again starts where this stopped.
pub(super) fn undo(
    record: &Record,
    ns: Option<&Netns>,
    holder: Option<&Netns>,
    path: &Path,
) -> io::Result<Vec<String>> {
    let opened;
    let holder = match holder {
        Some(holder) => Some(holder),
        None => {
            opened = open_holder(&record.holder)?;
            opened.as_ref()
        }
    };
    let notes = match ns {
        Some(ns) => put_back(record, ns, holder)?,
        None => vec![format!(
            "namespace '{}' is gone; so is what it held",
            record.netns
        )],
    };
    // Unmounted, the holder goes with its last descriptor, as the namespace would have.
    let _ = crate::sys::unmount_detach(&record.holder.to_string_lossy());
    remove_if_there(&record.holder)?;
    if let Some(name) = path.file_name() {
        remove_if_there(&path.with_file_name(format!("{}.tmp", name.to_string_lossy())))?;
    }
    fs::remove_file(path)?;
    Ok(notes)
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// The holder at `path`, if a namespace is mounted there: a file the run was killed
/// before mounting on (the same device as its directory) or no file is no holder.
fn open_holder(path: &Path) -> io::Result<Option<Netns>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let parent = path
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_owned);
    if meta.file_type().is_symlink() || meta.dev() == fs::metadata(parent)?.dev() {
        return Ok(None);
    }
    Netns::open_nofollow(path).map(Some)
}

/// The stand-in deleted (through its other end, `inside`, in the holder), the interface
/// moved back from the holder to `ns`, and given back what it had there.
fn put_back(record: &Record, ns: &Netns, holder: Option<&Netns>) -> io::Result<Vec<String>> {
    if let Some(holder) = holder {
        holder.run(|| -> io::Result<()> {
            let mut netlink = Netlink::open()?;
            if let Some(inside) = netlink.link_by_name(&record.inside)? {
                netlink.delete_link(inside.index)?;
            }
            match netlink.link_by_name(&record.interface)? {
                Some(link) => netlink.move_to_netns(link.index, ns.fd()),
                None => Ok(()),
            }
        })??;
    }
    let step = record.step;
    ns.run(|| {
        let mut netlink = Netlink::open()?;
        let here = netlink.link_by_name(&record.interface)?;
        Ok(match here {
            // It never left.
            Some(_) if step == Step::Holder => Vec::new(),
            Some(link) if record.mac.is_empty() || link.mac == record.mac => {
                reapply(record, link.index)?
            }
            Some(_) => vec![format!(
                "'{}' in namespace '{}' is another interface now (another MAC address): \
                 left as it is",
                record.interface, record.netns
            )],
            None => vec![format!(
                "'{}' itself is gone (deleted while emulated), so it is not put back",
                record.interface
            )],
        })
    })?
}

/// The record's namespace: at the file it was named by if that still holds it, otherwise
/// wherever it still is (a mount, a process, a descriptor).
fn find_namespace(record: &Record) -> Located {
    if let Ok(ns) = Netns::open(&record.netns_path) {
        if ns.inode().is_ok_and(|inode| inode == record.netns_inode) {
            return Located::Found(ns);
        }
    }
    crate::netns::locate(record.netns_inode)
}

/// What [`restore_killed`] put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// `IF in NS`.
    pub interface: String,
    /// The step the swap had reached.
    pub step: Step,
    /// What could not be restored exactly.
    pub notes: Vec<String>,
}

/// A record [`restore_killed`] could not act on, or failed to undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRestored {
    /// The record's file (or the directory, when it could not be read at all).
    pub record: PathBuf,
    /// `IF in NS`, when the record could be read.
    pub interface: Option<String>,
    /// Why.
    pub why: String,
}

/// What [`restore_killed`] did: each record is undone or reported, never one for another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restores {
    /// Interfaces put back.
    pub restored: Vec<Restored>,
    /// Records refused or failed.
    pub failed: Vec<NotRestored>,
}

/// Undoes the swaps of emulators that were killed (records whose interface lock nobody
/// holds), for `pathlab lab clean`. Running emulators' swaps are left alone; a record that
/// is refused or whose undoing fails is reported, and the others are still undone.
pub fn restore_killed() -> Restores {
    restore_where(None)
}

/// [`restore_killed`] for the swaps of one emulator only, once it is gone (its guardian).
pub(super) fn restore_killed_of(owner: &Owner) -> Restores {
    restore_where(Some(owner))
}

fn restore_where(only: Option<&Owner>) -> Restores {
    let dir = super::dir();
    let mut out = Restores::default();
    let records = match runtime::trusted_records::<Record>(&dir) {
        Ok(records) => records,
        Err(error) => {
            out.failed.push(NotRestored {
                record: dir,
                interface: None,
                why: error.to_string(),
            });
            return out;
        }
    };
    if only.is_none() {
        out.failed
            .extend(records.refused.into_iter().map(|refused| NotRestored {
                record: refused.path,
                interface: None,
                why: refused.why,
            }));
    }
    for (path, record) in records.found {
        if only.is_some_and(|owner| *owner != record.owner) || record.owner.is_alive() {
            continue;
        }
        match restore_one(&path, &record) {
            Ok(Some(restored)) => out.restored.push(restored),
            Ok(None) => {}
            Err(why) => out.failed.push(NotRestored {
                record: path,
                interface: Some(record.shown()),
                why,
            }),
        }
    }
    out
}

/// Undoes the swap of one killed emulator's record, if it is to be trusted and no one
/// holds the interface's lock. `None`: left for later (alive where this cannot see).
fn restore_one(path: &Path, record: &Record) -> Result<Option<Restored>, String> {
    if let Some(why) = record.refusal(path) {
        return Err(why);
    }
    // The lock, taken in the namespace, proves no emulator holds it; a namespace that is
    // gone has no one to hold it.
    let ns = match find_namespace(record) {
        Located::Found(ns) => Some(ns),
        Located::Gone => None,
        // Perhaps alive where this cannot see: left for a `lab clean` that can.
        Located::Unknown => return Ok(None),
    };
    let lock = match &ns {
        Some(ns) => {
            let index = record.index;
            match ns.run(|| runtime::lock_interface(index)) {
                Ok(Ok((Some(lock), _))) => Some(lock),
                Ok(Ok((None, _))) => return Ok(None),
                Ok(Err(error)) | Err(error) => {
                    return Err(format!("locking the interface: {error}"));
                }
            }
        }
        None => None,
    };
    let notes = undo(record, ns.as_ref(), None, path)
        .map_err(|error| format!("undoing the swap (at step {}): {error}", record.step.name()))?;
    drop(lock);
    Ok(Some(Restored {
        interface: record.shown(),
        step: record.step,
        notes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_interface_names_pass() {
        assert!(is_interface_name("eth0"));
        assert!(is_interface_name("inside0"));
        for bad in ["", ".", "..", "a/b", "a b", "sixteen-bytes-xx", "x\n"] {
            assert!(!is_interface_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn steps_are_in_the_order_taken_with_the_names_the_hooks_use() {
        let names: Vec<&str> = Step::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            ["holder", "move", "standin", "ports", "addresses", "running"]
        );
        assert!(Step::ALL.windows(2).all(|w| w[0] < w[1]));
        for step in Step::ALL {
            let text = serde_json::to_string(&step).unwrap();
            assert_eq!(text, format!("\"{}\"", step.name()));
        }
    }
}

//! An emulator put in front of someone else's interface (`pathlab emulate --netns NS
//! --iface IF`), with nothing in the kernel but veth and network namespaces.
//!
//! The interface is swapped, not filtered: IF leaves NS for a namespace of pathlab's own
//! (the *holder*), and in NS a veth takes its place with its name, interface index, MAC,
//! MTU, addresses, routes (every table), permanent neighbours, bridge and per-interface
//! sysctls. The veth's other end (`inside`) is in the holder beside IF, and the emulator
//! bridges the two: what NS sends through IF leaves through `inside`, crosses the
//! emulator and goes out on the real IF; what arrives on IF crosses back. NS's programs
//! see the same interface; the kernel's qdiscs are never involved, so no netem is needed.
//!
//! Each step of the swap ([`Step`]) is written to a record under the runtime directory
//! before it is taken, and the holder is bind-mounted beside it: SIGTERM undoes it at once
//! ([`Interposed::restore`]); after SIGKILL the emulator's guardian ([`Guardian`], a
//! process that outlives it) undoes it from the record within milliseconds, and failing
//! that `pathlab lab clean` does ([`restore_killed`]), from whichever step the record
//! names. The interface's lock ([`crate::runtime::lock_interface`] of IF's index in NS) is
//! held all along, so a second emulator on the same interface, of either kind, is refused.
//!
//! What is not carried over: what other programs hold by the old device (an XDP program, a
//! tc filter, a packet socket bound to it) stays with the real IF in the holder; IPv6
//! addresses come back without duplicate address detection (`nodad`), since they were
//! already checked.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::netlink::{LinkInfo, Netlink};
use crate::netns::{NamespaceRef, Netns};
use crate::runtime::{self, Owner};

mod guardian;
mod record;
mod rtnl;

pub use guardian::{guard, Guardian, STAND_DOWN};
pub use record::{restore_killed, test_without_guardian, NotRestored, Restored, Restores, Step};
use record::{test_die_at, undo, write_record, Record, RECORD_VERSION};
use rtnl::{reapply, snapshot};
pub use rtnl::{view, InterfaceView};

/// The name of the veth end in the holder, facing NS (`inside0` if IF is called that).
const INSIDE: &str = "inside";

const ARPHRD_ETHER: u16 = 1;

/// Why an interface could not be taken over.
#[derive(Debug, thiserror::Error)]
pub enum InterposeError {
    /// The namespace cannot be opened.
    #[error("no network namespace '{netns}'")]
    NoNamespace {
        /// As the user named it.
        netns: String,
        /// Why.
        source: io::Error,
    },
    /// No interface of that name in the namespace.
    #[error("no interface '{iface}' in namespace '{netns}' (it has: {})", .available.join(", "))]
    NoInterface {
        /// The name asked for.
        iface: String,
        /// The namespace.
        netns: String,
        /// The interfaces it has.
        available: Vec<String>,
    },
    /// Another emulator has it.
    #[error(
        "interface '{iface}' in namespace '{netns}' is already emulated{} (lock {})",
        .by.as_ref().map(|by| format!(" by {by}")).unwrap_or_default(), .lock.display()
    )]
    Busy {
        /// The interface.
        iface: String,
        /// The namespace.
        netns: String,
        /// Who, when the record says.
        by: Option<String>,
        /// The lock held.
        lock: PathBuf,
    },
    /// A killed emulator left it swapped.
    #[error(
        "interface '{iface}' in namespace '{netns}' was left swapped by a killed emulator \
         (record {}); `pathlab lab clean` restores it", .record.display()
    )]
    Stale {
        /// The interface.
        iface: String,
        /// The namespace.
        netns: String,
        /// The record left.
        record: PathBuf,
    },
    /// The kernel would not let it leave its namespace.
    #[error(
        "interface '{iface}' cannot leave namespace '{netns}' (a bridge, a loopback or \
         another interface bound to its namespace cannot be emulated in place; emulate one \
         of its ports instead)"
    )]
    CannotMove {
        /// The interface.
        iface: String,
        /// The namespace.
        netns: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// Not an Ethernet interface.
    #[error(
        "interface '{iface}' has no Ethernet address (kind {kind}): only an Ethernet \
         interface (a veth, VXLAN, macvlan, a NIC) can be emulated in place"
    )]
    NotEthernet {
        /// The interface.
        iface: String,
        /// Its kind.
        kind: String,
    },
    /// A step failed (the swap is undone before this is returned).
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

impl InterposeError {
    /// Whether the user's words were wrong (a missing namespace or interface, one already
    /// taken), not the machine: the command line says so with exit status 2.
    pub fn is_usage(&self) -> bool {
        !matches!(self, InterposeError::Io { .. })
    }
}

fn failed(what: impl Into<String>) -> impl FnOnce(io::Error) -> InterposeError {
    let what = what.into();
    move |source| InterposeError::Io { what, source }
}

/// An interface with an emulator's holder in front of it; undone by [`Interposed::restore`]
/// or, failing that, when dropped.
#[derive(Debug)]
pub struct Interposed {
    record: Record,
    path: PathBuf,
    ns: Netns,
    holder: Netns,
    lock: Option<File>,
    notes: Vec<String>,
    done: bool,
}

impl Interposed {
    /// The namespace the emulator's two ports are in.
    pub fn holder(&self) -> &Netns {
        &self.holder
    }

    /// The port facing NS: what NS sends through the interface comes out here.
    pub fn inside(&self) -> &str {
        &self.record.inside
    }

    /// The port on the wire: the real interface.
    pub fn outside(&self) -> &str {
        &self.record.interface
    }

    /// What could not be carried over exactly (a sysctl the stand-in refused, the index
    /// taken), one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Records that step `step` is being taken (the ones before it are done).
    fn begin(&mut self, step: Step) -> Result<(), InterposeError> {
        self.record.step = step;
        write_record(&self.path, &self.record).map_err(failed("writing the record"))?;
        test_die_at(step, false);
        Ok(())
    }

    /// Puts the interface back in NS as it was and removes the holder and the record.
    /// Returns what could not be restored exactly.
    pub fn restore(mut self) -> io::Result<Vec<String>> {
        self.done = true;
        let lock = self.lock.take();
        let result = undo(&self.record, Some(&self.ns), Some(&self.holder), &self.path);
        drop(lock);
        result
    }
}

impl Drop for Interposed {
    fn drop(&mut self) {
        if !self.done {
            let _ = undo(&self.record, Some(&self.ns), Some(&self.holder), &self.path);
        }
    }
}

/// The directory of records and holders.
fn dir() -> PathBuf {
    runtime::runtime_dir().join("interpose")
}

/// Puts a holder in front of interface `iface` of namespace `netns` (the calling thread's
/// own if `None`), for emulator `emulator`. Each step is recorded before it is taken.
pub fn interpose(
    netns: Option<&NamespaceRef>,
    iface: &str,
    emulator: &str,
) -> Result<Interposed, InterposeError> {
    let (ns, netns_name, netns_path) = open_namespace(netns)?;
    let netns_inode = ns
        .inode()
        .map_err(failed("reading the namespace's inode"))?;
    let in_ns = |what: &str| in_namespace(what, &netns_name);
    let link = ethernet_link(&ns, &netns_name, iface)?;
    let stem = format!("netns-{netns_inode}-if-{}", link.index);
    let path = runtime::private_dir(&dir())
        .map_err(failed("making the runtime directory"))?
        .join(format!("{stem}.json"));
    let lock = lock_unswapped(&ns, &netns_name, iface, link.index, &path)?;
    let (addresses, routes, neighbours, sysctls) = ns
        .run(|| snapshot(link.index, iface))
        .and_then(|r| r)
        .map_err(in_ns("reading the interface's addresses and routes"))?;
    let record = Record {
        version: RECORD_VERSION,
        step: Step::Holder,
        netns: netns_name.clone(),
        netns_path,
        netns_inode,
        interface: iface.to_owned(),
        index: link.index,
        mac: link.mac.clone(),
        up: link.up,
        master: link.master,
        addresses,
        routes,
        neighbours,
        sysctls,
        holder: path.with_extension("netns"),
        inside: if iface == INSIDE {
            format!("{INSIDE}0")
        } else {
            INSIDE.to_owned()
        },
        owner: Owner::this_process().map_err(failed("reading this process's start"))?,
        emulator: emulator.to_owned(),
    };
    let mut interposed = hold(record, path, &ns, lock)?;
    // From here a failure drops `interposed`, which undoes what was done.
    interposed.begin(Step::Move)?;
    ns.run(|| Netlink::open()?.move_to_netns(link.index, interposed.holder.fd()))
        .and_then(|r| r)
        .map_err(|source| InterposeError::CannotMove {
            iface: iface.to_owned(),
            netns: netns_name.clone(),
            source,
        })?;
    test_die_at(Step::Move, true);
    interposed.begin(Step::Standin)?;
    let standin =
        make_standin(&interposed, &ns, &link).map_err(in_ns("making the stand-in veth"))?;
    test_die_at(Step::Standin, true);
    if standin != link.index {
        interposed.notes.push(format!(
            "interface index {} was taken; the stand-in is {standin}",
            link.index
        ));
    }
    interposed.begin(Step::Ports)?;
    interposed
        .holder
        .run(|| ports_up(iface, &interposed.record.inside))
        .and_then(|r| r)
        .map_err(failed("bringing up the emulator's ports"))?;
    test_die_at(Step::Ports, true);
    interposed.begin(Step::Addresses)?;
    let notes = ns
        .run(|| reapply(&interposed.record, standin))
        .and_then(|r| r)
        .map_err(in_ns(
            "giving the stand-in the interface's addresses and routes",
        ))?;
    interposed.notes.extend(notes);
    test_die_at(Step::Addresses, true);
    interposed.begin(Step::Running)?;
    Ok(interposed)
}

/// Brings up the emulator's two ports, `iface` and `inside`, in the calling thread's
/// namespace (the holder), without the IPv6 link-local addresses they would otherwise
/// announce themselves with.
fn ports_up(iface: &str, inside: &str) -> io::Result<()> {
    let mut netlink = Netlink::open()?;
    let mut ports = Vec::new();
    for name in [iface, inside] {
        let link = netlink
            .link_by_name(name)?
            .ok_or_else(|| io::Error::other(format!("'{name}' is not in the holder")))?;
        ports.push(link.index);
    }
    // Silent even where the holder's IPv6 could not be turned off (make_holder).
    netlink.set_up_without_link_local(&ports)
}

/// The error of a step done in namespace `netns_name`: "`what` in namespace 'NS'".
fn in_namespace(what: &str, netns_name: &str) -> impl FnOnce(io::Error) -> InterposeError {
    failed(format!("{what} in namespace '{netns_name}'"))
}

/// Opens the namespace the user named (the calling thread's own if `None`), with its name
/// for messages and the file it is at.
fn open_namespace(
    netns: Option<&NamespaceRef>,
) -> Result<(Netns, String, PathBuf), InterposeError> {
    Ok(match netns {
        Some(reference) => (
            reference
                .open()
                .map_err(|source| InterposeError::NoNamespace {
                    netns: reference.to_string(),
                    source,
                })?,
            reference.to_string(),
            reference.path(),
        ),
        None => (
            Netns::current().map_err(failed("opening this namespace"))?,
            "this one".to_owned(),
            PathBuf::from(format!("/proc/{}/ns/net", std::process::id())),
        ),
    })
}

/// Interface `iface` of namespace `ns` (named `netns_name`), which must be there and be an
/// Ethernet interface.
fn ethernet_link(ns: &Netns, netns_name: &str, iface: &str) -> Result<LinkInfo, InterposeError> {
    let links = ns
        .run(|| Netlink::open()?.links())
        .and_then(|r| r)
        .map_err(in_namespace("listing interfaces", netns_name))?;
    let Some(link) = links.iter().find(|l| l.name == iface).cloned() else {
        return Err(InterposeError::NoInterface {
            iface: iface.to_owned(),
            netns: netns_name.to_owned(),
            available: links.into_iter().map(|l| l.name).collect(),
        });
    };
    if link.hardware != ARPHRD_ETHER {
        return Err(InterposeError::NotEthernet {
            iface: iface.to_owned(),
            kind: link.kind.unwrap_or_else(|| "none".to_owned()),
        });
    }
    Ok(link)
}

/// Takes the lock of interface `index` of namespace `ns`, which no other emulator may hold
/// and no killed one may have left swapped (its record at `path`).
fn lock_unswapped(
    ns: &Netns,
    netns_name: &str,
    iface: &str,
    index: u32,
    path: &Path,
) -> Result<File, InterposeError> {
    let (lock, lock_path) = ns
        .run(|| runtime::lock_interface(index))
        .and_then(|r| r)
        .map_err(in_namespace("locking the interface", netns_name))?;
    let Some(lock) = lock else {
        let by = runtime::trusted_records::<Record>(&dir())
            .map(|records| records.found)
            .unwrap_or_default()
            .into_iter()
            .find(|(p, _)| *p == path)
            .map(|(_, r)| format!("emulator '{}' (pid {})", r.emulator, r.owner.pid));
        return Err(InterposeError::Busy {
            iface: iface.to_owned(),
            netns: netns_name.to_owned(),
            by,
            lock: lock_path,
        });
    };
    if path.exists() {
        return Err(InterposeError::Stale {
            iface: iface.to_owned(),
            netns: netns_name.to_owned(),
            record: path.to_owned(),
        });
    }
    Ok(lock)
}

/// Writes `record` (at its first step, [`Step::Holder`]) to `path`, then makes the holder
/// it names (removing the record again if that fails): from the [`Interposed`] returned, a
/// failure undoes the swap when dropped.
fn hold(
    record: Record,
    path: PathBuf,
    ns: &Netns,
    lock: File,
) -> Result<Interposed, InterposeError> {
    write_record(&path, &record).map_err(failed("writing the record"))?;
    test_die_at(Step::Holder, false);
    let holder = match make_holder(&record.holder) {
        Ok(holder) => holder,
        Err(error) => {
            let _ = fs::remove_file(&path);
            return Err(InterposeError::Io {
                what: "making the emulator's namespace".to_owned(),
                source: error,
            });
        }
    };
    test_die_at(Step::Holder, true);
    let ns_kept = ns.try_clone().map_err(failed("holding the namespace"))?;
    Ok(Interposed {
        record,
        path,
        ns: ns_kept,
        holder,
        lock: Some(lock),
        notes: Vec::new(),
        done: false,
    })
}

/// Makes, in namespace `ns`, a veth in the place of interface `link` (now in the holder)
/// with its name, index (if free), MAC and MTU, the other end beside it in the holder.
/// Returns the stand-in's index.
fn make_standin(interposed: &Interposed, ns: &Netns, link: &LinkInfo) -> io::Result<u32> {
    let holder_fd = interposed.holder.fd();
    let inside = &interposed.record.inside;
    let iface = &interposed.record.interface;
    let created = ns
        .run(|| {
            let mut netlink = Netlink::open()?;
            match netlink.create_veth_as(iface, link.index, &link.mac, link.mtu, inside, holder_fd)
            {
                Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                    netlink.create_veth_as(iface, 0, &link.mac, link.mtu, inside, holder_fd)?;
                }
                other => other?,
            }
            netlink.link_by_name(iface)
        })
        .and_then(|r| r)?;
    Ok(created
        .ok_or_else(|| io::Error::other("the stand-in veth is not there"))?
        .index)
}

/// A new namespace for the emulator's ports, with IPv6 off (the real interface must say
/// nothing of its own there) and bind-mounted at `path` so that a killed run leaves it
/// where `lab clean` finds it.
fn make_holder(path: &Path) -> io::Result<Netns> {
    let holder = Netns::new()?;
    for key in ["all", "default"] {
        match holder.set_sysctl(&format!("net/ipv6/conf/{key}/disable_ipv6"), "1") {
            // /proc/sys read-only, as in a container that is not privileged: the ports
            // come up with no IPv6 address generation instead (interpose), as silent.
            Err(error) if error.raw_os_error() == Some(libc::EROFS) => {}
            other => other?,
        }
    }
    // Made here, never an existing file or link followed.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(path)?;
    let target = path.to_string_lossy().into_owned();
    holder
        .run(|| crate::sys::bind_mount("/proc/thread-self/ns/net", &target))
        .and_then(|r| r)
        .inspect_err(|_| {
            let _ = fs::remove_file(path);
        })?;
    Ok(holder)
}

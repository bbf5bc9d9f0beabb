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
//! Everything needed to undo it is written to a record under the runtime directory
//! before anything changes, and the holder is bind-mounted beside it: SIGTERM undoes it
//! at once ([`Interposed::restore`]), and after SIGKILL `pathlab lab clean` finds the
//! record and the holder and undoes it ([`restore_killed`]). The interface's lock
//! ([`crate::runtime::lock_interface`] of IF's index in NS) is held all along, so a second
//! emulator on the same interface, of either kind, is refused.
//!
//! What is not carried over: what other programs hold by the old device (an XDP program, a
//! tc filter, a packet socket bound to it) stays with the real IF in the holder; IPv6
//! addresses come back without duplicate address detection (`nodad`), since they were
//! already checked.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::netlink::{self, LinkInfo, Netlink, RawFlags};
use crate::netns::{Located, NamespaceRef, Netns};
use crate::runtime::{self, Owner};

/// The format of the record on disk.
const RECORD_VERSION: u32 = 1;

/// The name of the veth end in the holder, facing NS (`inside0` if IF is called that).
const INSIDE: &str = "inside";

const ARPHRD_ETHER: u16 = 1;
const AF_INET: u8 = libc::AF_INET as u8;
const AF_INET6: u8 = libc::AF_INET6 as u8;
const IFA_FLAGS: u16 = 8;
const IFA_F_NODAD: u8 = 0x02;
const RTA_OIF: u16 = 4;
const RTA_MULTIPATH: u16 = 9;
const RTA_CACHEINFO: u16 = 12;
const RTPROT_KERNEL: u8 = 2;
const RTM_F_CLONED: u32 = 0x200;
const NUD_PERMANENT: u16 = 0x80;
/// The sysctl that makes the kernel generate IPv6 addresses: written last, once the
/// addresses are back, so that it adds none of its own.
const ADDR_GEN_MODE: &str = "addr_gen_mode";

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

/// What NS had on the interface, and where the parts of the swap are: the record written
/// before anything changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    version: u32,
    /// The namespace as the user named it, its file and its inode.
    netns: String,
    netns_path: PathBuf,
    netns_inode: u64,
    interface: String,
    index: u32,
    up: bool,
    master: Option<u32>,
    /// The stand-in's index, once it exists (IF's own unless that was taken).
    standin: Option<u32>,
    /// Raw rtnetlink bodies (fixed part and attributes) as NS's dumps gave them.
    addresses: Vec<Vec<u8>>,
    routes: Vec<Vec<u8>>,
    neighbours: Vec<Vec<u8>>,
    /// (`ipv4` or `ipv6`, file under `conf/IF/`, value).
    sysctls: Vec<(String, String, String)>,
    /// The holder's bind mount.
    holder: PathBuf,
    /// The veth end in the holder.
    inside: String,
    owner: Owner,
    /// The emulator's name (`--name`), for the message of a second one.
    emulator: String,
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
/// own if `None`), for emulator `emulator`.
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
        netns: netns_name.clone(),
        netns_path,
        netns_inode,
        interface: iface.to_owned(),
        index: link.index,
        up: link.up,
        master: link.master,
        standin: None,
        addresses,
        routes,
        neighbours,
        sysctls,
        holder: dir().join(format!("{stem}.netns")),
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
    let standin = move_behind_standin(&interposed, &ns, &netns_name, iface, &link)?;
    interposed.record.standin = Some(standin);
    write_record(&interposed.path, &interposed.record).map_err(failed("writing the record"))?;
    if standin != link.index {
        interposed.notes.push(format!(
            "interface index {} was taken; the stand-in is {standin}",
            link.index
        ));
    }
    let inside = interposed.record.inside.clone();
    interposed
        .holder
        .run(|| {
            let mut netlink = Netlink::open()?;
            let mut ports = Vec::new();
            for name in [iface, inside.as_str()] {
                let link = netlink
                    .link_by_name(name)?
                    .ok_or_else(|| io::Error::other(format!("'{name}' is not in the holder")))?;
                ports.push(link.index);
            }
            // Silent even where the holder's IPv6 could not be turned off (make_holder).
            netlink.set_up_without_link_local(&ports)
        })
        .and_then(|r| r)
        .map_err(failed("bringing up the emulator's ports"))?;
    let notes = ns
        .run(|| reapply(&interposed.record, standin))
        .and_then(|r| r)
        .map_err(in_ns(
            "giving the stand-in the interface's addresses and routes",
        ))?;
    interposed.notes.extend(notes);
    Ok(interposed)
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

/// Writes `record` to `path`, then makes the holder it names (removing the record again if
/// that fails): from the [`Interposed`] returned, a failure undoes the swap when dropped.
fn hold(
    record: Record,
    path: PathBuf,
    ns: &Netns,
    lock: File,
) -> Result<Interposed, InterposeError> {
    write_record(&path, &record).map_err(failed("writing the record"))?;
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

/// Moves interface `link` (`iface` of namespace `ns`, named `netns_name`) into the holder
/// and puts a veth in its place with its name, index (if free), MAC and MTU, the other end
/// beside it in the holder. Returns the stand-in's index.
fn move_behind_standin(
    interposed: &Interposed,
    ns: &Netns,
    netns_name: &str,
    iface: &str,
    link: &LinkInfo,
) -> Result<u32, InterposeError> {
    ns.run(|| Netlink::open()?.move_to_netns(link.index, interposed.holder.fd()))
        .and_then(|r| r)
        .map_err(|source| InterposeError::CannotMove {
            iface: iface.to_owned(),
            netns: netns_name.to_owned(),
            source,
        })?;
    let holder_fd = interposed.holder.fd();
    let inside = interposed.record.inside.clone();
    let created = ns
        .run(|| {
            let mut netlink = Netlink::open()?;
            match netlink.create_veth_as(iface, link.index, &link.mac, link.mtu, &inside, holder_fd)
            {
                Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                    netlink.create_veth_as(iface, 0, &link.mac, link.mtu, &inside, holder_fd)?;
                }
                other => other?,
            }
            netlink.link_by_name(iface)
        })
        .and_then(|r| r)
        .map_err(in_namespace("making the stand-in veth", netns_name))?;
    Ok(created
        .ok_or_else(|| io::Error::other("the stand-in veth is not there"))
        .map_err(in_namespace("making the stand-in veth", netns_name))?
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
    File::create(path)?;
    let target = path.to_string_lossy().into_owned();
    holder
        .run(|| crate::sys::bind_mount("/proc/thread-self/ns/net", &target))
        .and_then(|r| r)
        .inspect_err(|_| {
            let _ = fs::remove_file(path);
        })?;
    Ok(holder)
}

fn write_record(path: &Path, record: &Record) -> io::Result<()> {
    let text = serde_json::to_string(record).map_err(io::Error::other)?;
    let temporary = path.with_extension("tmp");
    fs::write(&temporary, text)?;
    fs::rename(&temporary, path)
}

type Snapshot = (
    Vec<Vec<u8>>,
    Vec<Vec<u8>>,
    Vec<Vec<u8>>,
    Vec<(String, String, String)>,
);

/// Interface `index`'s addresses, the routes through it that the kernel does not make by
/// itself, its permanent neighbours and its sysctls, in the calling thread's namespace.
fn snapshot(index: u32, name: &str) -> io::Result<Snapshot> {
    let mut netlink = Netlink::open()?;
    let addresses = netlink
        .dump_raw(netlink::RTM_GETADDR, &[0u8; 8])?
        .into_iter()
        .filter(|body| body.len() >= 8 && read_u32(body, 4) == index)
        .collect();
    let routes = routes(&mut netlink, index, false)?;
    let neighbours = netlink
        .dump_raw(netlink::RTM_GETNEIGH, &[0u8; 12])?
        .into_iter()
        .filter(|body| {
            body.len() >= 12
                && read_u32(body, 4) == index
                && u16::from_ne_bytes([body[8], body[9]]) & NUD_PERMANENT != 0
        })
        .collect();
    let mut sysctls = Vec::new();
    for family in ["ipv4", "ipv6"] {
        let Ok(entries) = fs::read_dir(format!("/proc/sys/net/{family}/conf/{name}")) else {
            continue;
        };
        for entry in entries.flatten() {
            let key = entry.file_name().to_string_lossy().into_owned();
            if let Ok(value) = fs::read_to_string(entry.path()) {
                sysctls.push((family.to_owned(), key, value.trim_end().to_owned()));
            }
        }
    }
    sysctls.sort();
    Ok((addresses, routes, neighbours, sysctls))
}

/// The routes of every table through interface `index`; with `kernel`, also those the
/// kernel made itself (for addresses), which it makes again.
fn routes(netlink: &mut Netlink, index: u32, kernel: bool) -> io::Result<Vec<Vec<u8>>> {
    let mut routes = Vec::new();
    for family in [AF_INET, AF_INET6] {
        let mut fixed = [0u8; 12];
        fixed[0] = family;
        routes.extend(
            netlink
                .dump_raw(netlink::RTM_GETROUTE, &fixed)?
                .into_iter()
                .filter(|body| route_through(body, index, kernel)),
        );
    }
    Ok(routes)
}

/// An interface as its namespace's programs see it: what a swap must keep and a restore
/// must give back (the tests compare them before, during and after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceView {
    /// Name.
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// MAC address.
    pub mac: Vec<u8>,
    /// MTU.
    pub mtu: u32,
    /// Administratively up.
    pub up: bool,
    /// Its bridge.
    pub master: Option<u32>,
    /// Addresses and prefix lengths, sorted.
    pub addresses: Vec<(std::net::IpAddr, u8)>,
    /// Routes of every table through it (the kernel's too), as rtnetlink bodies without
    /// their statistics, sorted.
    pub routes: Vec<Vec<u8>>,
    /// Permanent neighbours, as rtnetlink bodies without their statistics, sorted.
    pub neighbours: Vec<Vec<u8>>,
    /// Its sysctls: (`ipv4` or `ipv6`, name, value).
    pub sysctls: Vec<(String, String, String)>,
}

/// Interface `name` of the calling thread's namespace, if it is there.
pub fn view(name: &str) -> io::Result<Option<InterfaceView>> {
    const NDA_CACHEINFO: u16 = 3;
    const NDA_PROBES: u16 = 4;
    let mut netlink = Netlink::open()?;
    let Some(link) = netlink.link_by_name(name)? else {
        return Ok(None);
    };
    let (_, _, neighbours, sysctls) = snapshot(link.index, name)?;
    let mut addresses: Vec<_> = netlink
        .addresses()?
        .into_iter()
        .filter(|a| a.index == link.index)
        .map(|a| (a.address, a.prefix_len))
        .collect();
    addresses.sort();
    let mut routes: Vec<Vec<u8>> = routes(&mut netlink, link.index, true)?
        .iter()
        .map(|body| route_for(body, link.index, link.index))
        .collect();
    routes.sort();
    let mut neighbours: Vec<Vec<u8>> = neighbours
        .iter()
        .map(|body| {
            let mut out = body[..12].to_vec();
            for (kind, at, len) in attribute_spans(body, 12) {
                if kind != NDA_CACHEINFO && kind != NDA_PROBES {
                    out.extend_from_slice(&body[at - 4..at + len]);
                    while !out.len().is_multiple_of(4) {
                        out.push(0);
                    }
                }
            }
            out
        })
        .collect();
    neighbours.sort();
    Ok(Some(InterfaceView {
        name: link.name,
        index: link.index,
        mac: link.mac,
        mtu: link.mtu,
        up: link.up,
        master: link.master,
        addresses,
        routes,
        neighbours,
        sysctls,
    }))
}

fn read_u32(body: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(body[at..at + 4].try_into().expect("4 bytes"))
}

/// The attributes of a body after its fixed part of `fixed` bytes, with where each one's
/// payload starts: `(kind, payload offset, payload length)`.
fn attribute_spans(body: &[u8], fixed: usize) -> Vec<(u16, usize, usize)> {
    let mut spans = Vec::new();
    let mut at = fixed;
    while at + 4 <= body.len() {
        let len = usize::from(u16::from_ne_bytes([body[at], body[at + 1]]));
        let kind = u16::from_ne_bytes([body[at + 2], body[at + 3]]) & 0x3fff;
        if len < 4 || at + len > body.len() {
            break;
        }
        spans.push((kind, at + 4, len - 4));
        at += len.next_multiple_of(4);
    }
    spans
}

/// Whether a route dump's entry goes out through interface `index` and, unless `kernel`,
/// is one a program or a person made (the kernel makes the rest again with the
/// addresses).
fn route_through(body: &[u8], index: u32, kernel: bool) -> bool {
    if body.len() < 12
        || (body[5] == RTPROT_KERNEL && !kernel)
        || read_u32(body, 8) & RTM_F_CLONED != 0
    {
        return false;
    }
    attribute_spans(body, 12)
        .into_iter()
        .any(|(kind, at, len)| match kind {
            RTA_OIF => len >= 4 && read_u32(body, at) == index,
            RTA_MULTIPATH => {
                nexthops(&body[at..at + len]).any(|hop| read_u32(body, at + hop) == index)
            }
            _ => false,
        })
}

/// The offsets of the interface indices of a `RTA_MULTIPATH` payload's nexthops
/// (`struct rtnexthop`: length, flags, hops, ifindex, then attributes).
fn nexthops(payload: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + 8 > payload.len() {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([payload[at], payload[at + 1]]));
        if len < 8 || at + len > payload.len() {
            return None;
        }
        let ifindex = at + 4;
        at += len.next_multiple_of(4);
        Some(ifindex)
    })
}

/// An address dump's entry as a request adding it on interface `to` (IPv6 without
/// duplicate address detection: it was checked when it was first added).
fn address_for(body: &[u8], to: u32) -> Vec<u8> {
    let mut out = body.to_vec();
    out[4..8].copy_from_slice(&to.to_ne_bytes());
    if out[0] == AF_INET6 {
        out[2] |= IFA_F_NODAD;
        for (kind, at, len) in attribute_spans(body, 8) {
            if kind == IFA_FLAGS && len >= 4 {
                let flags = read_u32(&out, at) | u32::from(IFA_F_NODAD);
                out[at..at + 4].copy_from_slice(&flags.to_ne_bytes());
            }
        }
    }
    out
}

/// A route dump's entry as a request adding it through interface `to` instead of `from`,
/// without the statistics only a dump carries.
fn route_for(body: &[u8], from: u32, to: u32) -> Vec<u8> {
    let mut out = body[..12].to_vec();
    for (kind, at, len) in attribute_spans(body, 12) {
        if kind == RTA_CACHEINFO {
            continue;
        }
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        let start = out.len();
        out.extend_from_slice(&body[at - 4..at + len]);
        let payload = start + 4;
        match kind {
            RTA_OIF if len >= 4 && read_u32(&out, payload) == from => {
                out[payload..payload + 4].copy_from_slice(&to.to_ne_bytes());
            }
            RTA_MULTIPATH => {
                let hops: Vec<usize> = nexthops(&body[at..at + len]).collect();
                for hop in hops {
                    if read_u32(&out, payload + hop) == from {
                        out[payload + hop..payload + hop + 4].copy_from_slice(&to.to_ne_bytes());
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A neighbour dump's entry as a request adding it on interface `to`.
fn neighbour_for(body: &[u8], to: u32) -> Vec<u8> {
    let mut out = body.to_vec();
    out[4..8].copy_from_slice(&to.to_ne_bytes());
    out
}

/// Gives interface `index` (in the calling thread's namespace, named as the record's)
/// what the record says the interface had: sysctls, bridge, state, addresses, neighbours,
/// routes. Returns what could not be given.
fn reapply(record: &Record, index: u32) -> io::Result<Vec<String>> {
    let mut notes = Vec::new();
    let name = &record.interface;
    // The generation mode last: with the addresses back it adds none of its own.
    let (early, late): (Vec<_>, Vec<_>) = record
        .sysctls
        .iter()
        .partition(|(_, key, _)| key != ADDR_GEN_MODE);
    let write_sysctls = |list: Vec<&(String, String, String)>, notes: &mut Vec<String>| {
        for (family, key, value) in list {
            let path = format!("/proc/sys/net/{family}/conf/{name}/{key}");
            let now = fs::read_to_string(&path).map(|v| v.trim_end().to_owned());
            if now.as_deref().is_ok_and(|now| now == value) {
                continue;
            }
            if let Err(error) = fs::write(&path, value) {
                notes.push(format!(
                    "{family} {key} stays {} ({error})",
                    now.unwrap_or_default()
                ));
            }
        }
    };
    // While it is down: IPv6 must be set up as it was before the interface comes up.
    let mut netlink = Netlink::open()?;
    write_sysctls(early, &mut notes);
    if let Some(master) = record.master {
        if let Err(error) = netlink.set_master(index, master) {
            notes.push(format!("not back in its bridge ({error})"));
        }
    }
    if record.up {
        netlink.set_up(index, true)?;
    }
    let mut failures = Vec::new();
    for body in &record.addresses {
        if let Err(error) = netlink.request_raw(
            netlink::RTM_NEWADDR,
            RawFlags::Create,
            &address_for(body, index),
        ) {
            if error.raw_os_error() != Some(libc::EEXIST) {
                failures.push(format!("an address ({error})"));
            }
        }
    }
    for body in &record.neighbours {
        if let Err(error) = netlink.request_raw(
            netlink::RTM_NEWNEIGH,
            RawFlags::Create,
            &neighbour_for(body, index),
        ) {
            if error.raw_os_error() != Some(libc::EEXIST) {
                failures.push(format!("a neighbour ({error})"));
            }
        }
    }
    // A route may need another (a gateway reached through a route of its own): add what
    // can be added, again, until a pass adds nothing.
    let mut pending: Vec<Vec<u8>> = record
        .routes
        .iter()
        .map(|body| route_for(body, record.index, index))
        .collect();
    loop {
        let before = pending.len();
        let mut errors = Vec::new();
        pending.retain(|body| {
            match netlink.request_raw(netlink::RTM_NEWROUTE, RawFlags::Create, body) {
                Ok(()) => false,
                Err(error) if error.raw_os_error() == Some(libc::EEXIST) => false,
                Err(error) => {
                    errors.push(error);
                    true
                }
            }
        });
        if pending.is_empty() || pending.len() == before {
            failures.extend(errors.into_iter().map(|e| format!("a route ({e})")));
            break;
        }
    }
    // Through netlink: it works where /proc/sys is read-only (a container).
    for (_, key, value) in late {
        let now = fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{name}/{key}"));
        if now.is_ok_and(|now| now.trim_end() == value) {
            continue;
        }
        let set = value
            .parse::<u8>()
            .map_err(io::Error::other)
            .and_then(|mode| netlink.set_addr_gen_mode(index, mode));
        if let Err(error) = set {
            notes.push(format!("ipv6 {key} stays as it is, not {value} ({error})"));
        }
    }
    notes.extend(failures.into_iter().map(|f| format!("not restored: {f}")));
    Ok(notes)
}

/// Undoes a swap as far as it went: the stand-in deleted, the real interface back in NS
/// with what it had, the holder unmounted and the record removed.
fn undo(
    record: &Record,
    ns: Option<&Netns>,
    holder: Option<&Netns>,
    path: &Path,
) -> io::Result<Vec<String>> {
    let mut notes = Vec::new();
    let opened_holder;
    let holder = match holder {
        Some(holder) => Some(holder),
        None => {
            opened_holder = Netns::open(&record.holder).ok();
            opened_holder.as_ref()
        }
    };
    match ns {
        Some(ns) => {
            if let Some(standin) = record.standin {
                ns.run(|| {
                    let mut netlink = Netlink::open()?;
                    let ours = netlink.links()?.into_iter().find(|l| {
                        l.index == standin
                            && l.name == record.interface
                            && l.kind.as_deref() == Some("veth")
                    });
                    match ours {
                        Some(link) => netlink.delete_link(link.index),
                        None => Ok(()),
                    }
                })??;
            }
            let back = match holder {
                Some(holder) => holder.run(|| {
                    let mut netlink = Netlink::open()?;
                    match netlink.link_by_name(&record.interface)? {
                        Some(link) => netlink.move_to_netns(link.index, ns.fd()).map(|()| true),
                        None => Ok(false),
                    }
                })??,
                None => false,
            };
            if back {
                let more = ns.run(|| {
                    let index = Netlink::open()?
                        .link_by_name(&record.interface)?
                        .ok_or_else(|| io::Error::other("the interface did not arrive"))?
                        .index;
                    reapply(record, index)
                })??;
                notes.extend(more);
            } else {
                notes.push(format!(
                    "'{}' itself is gone (deleted while emulated), so it is not put back",
                    record.interface
                ));
            }
        }
        None => notes.push(format!(
            "namespace '{}' is gone; so is what it held",
            record.netns
        )),
    }
    // Unmounted, the holder goes with its last descriptor, as the namespace would have.
    let _ = crate::sys::unmount_detach(&record.holder.to_string_lossy());
    let _ = fs::remove_file(&record.holder);
    fs::remove_file(path)?;
    Ok(notes)
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
    /// What could not be restored exactly.
    pub notes: Vec<String>,
}

/// Undoes the swaps of emulators that were killed (records whose interface lock nobody
/// holds), for `pathlab lab clean`. Running emulators' swaps are left alone.
pub fn restore_killed() -> io::Result<Vec<Restored>> {
    let mut restored = Vec::new();
    for (path, record) in runtime::trusted_records::<Record>(&dir())? {
        if record.version != RECORD_VERSION || record.owner.is_alive() {
            continue;
        }
        // The lock, taken in the namespace, proves no emulator holds it; a namespace that is
        // gone has no one to hold it.
        let ns = match find_namespace(&record) {
            Located::Found(ns) => Some(ns),
            Located::Gone => None,
            // Perhaps alive where this cannot see: left for a `lab clean` that can.
            Located::Unknown => continue,
        };
        let lock = match &ns {
            Some(ns) => {
                let index = record.index;
                match ns.run(|| runtime::lock_interface(index))?? {
                    (Some(lock), _) => Some(lock),
                    (None, _) => continue,
                }
            }
            None => None,
        };
        let notes = undo(&record, ns.as_ref(), None, &path)?;
        drop(lock);
        restored.push(Restored {
            interface: format!("{} in {}", record.interface, record.netns),
            notes,
        });
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        out
    }

    fn route(protocol: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![AF_INET, 24, 0, 0, 254, protocol, 0, 1, 0, 0, 0, 0];
        for a in attrs {
            body.extend_from_slice(a);
        }
        body
    }

    fn nexthop(ifindex: u32) -> Vec<u8> {
        let mut hop = 8u16.to_ne_bytes().to_vec();
        hop.extend_from_slice(&[0, 0]);
        hop.extend_from_slice(&ifindex.to_ne_bytes());
        hop
    }

    #[test]
    fn a_route_through_the_interface_is_taken_and_moved_to_the_stand_in() {
        let body = route(
            4,
            &[
                attr(1, &[198, 18, 5, 0]),
                attr(RTA_CACHEINFO, &[0; 32]),
                attr(RTA_OIF, &7u32.to_ne_bytes()),
            ],
        );
        assert!(route_through(&body, 7, false));
        assert!(!route_through(&body, 8, false));
        let moved = route_for(&body, 7, 9);
        let spans = attribute_spans(&moved, 12);
        // The destination kept, the statistics dropped, the interface changed.
        assert_eq!(spans.len(), 2);
        assert_eq!(&moved[spans[0].1..spans[0].1 + 4], &[198, 18, 5, 0]);
        assert_eq!(spans[1].0, RTA_OIF);
        assert_eq!(read_u32(&moved, spans[1].1), 9);
        // What the kernel made with an address is made again by the kernel.
        assert!(!route_through(
            &route(RTPROT_KERNEL, &[attr(RTA_OIF, &7u32.to_ne_bytes())]),
            7,
            false
        ));
    }

    #[test]
    fn a_multipath_route_has_only_its_hop_through_the_interface_moved() {
        let mut hops = nexthop(3);
        hops.extend(nexthop(7));
        let body = route(4, &[attr(RTA_MULTIPATH, &hops)]);
        assert!(route_through(&body, 7, false));
        assert!(route_through(&body, 3, false));
        let moved = route_for(&body, 7, 9);
        let (_, at, len) = attribute_spans(&moved, 12)[0];
        let indices: Vec<u32> = nexthops(&moved[at..at + len])
            .map(|hop| read_u32(&moved, at + hop))
            .collect();
        assert_eq!(indices, vec![3, 9]);
    }

    #[test]
    fn an_ipv6_address_comes_back_without_duplicate_detection() {
        let mut body = vec![AF_INET6, 64, 0x80, 0];
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend(attr(IFA_FLAGS, &0x80u32.to_ne_bytes()));
        let out = address_for(&body, 9);
        assert_eq!(read_u32(&out, 4), 9);
        assert_eq!(out[2], 0x80 | IFA_F_NODAD);
        assert_eq!(read_u32(&out, 12), 0x80 | u32::from(IFA_F_NODAD));
        let mut v4 = vec![AF_INET, 24, 0x80, 0];
        v4.extend_from_slice(&7u32.to_ne_bytes());
        assert_eq!(address_for(&v4, 9)[2], 0x80);
    }

    #[test]
    fn bad_attribute_lengths_end_the_walk() {
        let mut body = route(4, &[attr(RTA_OIF, &7u32.to_ne_bytes())]);
        body.extend_from_slice(&[200, 0, 4, 0]);
        assert_eq!(attribute_spans(&body, 12).len(), 1);
        assert_eq!(nexthops(&[4, 0, 0, 0, 0, 0, 0, 0]).count(), 0);
    }
}

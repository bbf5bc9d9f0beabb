//! What an interface has in its namespace, read and given again through rtnetlink: its
//! addresses, the routes through it (every table), its permanent neighbours and sysctls,
//! as raw rtnetlink bodies rewritten for another interface index; and the view the tests
//! compare before, during and after a swap.

use std::fs;
use std::io;

use super::record::Record;
use crate::netlink::{self, Netlink, RawFlags};

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

/// An interface's addresses, routes, neighbours and sysctls ([`snapshot`]).
pub(super) type Snapshot = (
    Vec<Vec<u8>>,
    Vec<Vec<u8>>,
    Vec<Vec<u8>>,
    Vec<(String, String, String)>,
);

/// Interface `index`'s addresses, the routes through it that the kernel does not make by
/// itself, its permanent neighbours and its sysctls, in the calling thread's namespace.
pub(super) fn snapshot(index: u32, name: &str) -> io::Result<Snapshot> {
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
pub(super) fn reapply(record: &Record, index: u32) -> io::Result<Vec<String>> {
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
    let addresses = record.addresses.iter().map(|body| address_for(body, index));
    let neighbours = record
        .neighbours
        .iter()
        .map(|body| neighbour_for(body, index));
    for (kind, body, what) in addresses
        .map(|body| (netlink::RTM_NEWADDR, body, "an address"))
        .chain(neighbours.map(|body| (netlink::RTM_NEWNEIGH, body, "a neighbour")))
    {
        if let Err(error) = netlink.request_raw(kind, RawFlags::Create, &body) {
            if error.raw_os_error() != Some(libc::EEXIST) {
                failures.push(format!("{what} ({error})"));
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

//! rtnetlink: links, addresses and routes, spoken directly to the kernel.
//!
//! pathlab configures its own interfaces instead of calling `ip`, so a machine needs
//! nothing but pathlab. A [`Netlink`] socket belongs to the network namespace of the thread
//! that opened it; open one per namespace (see [`crate::netns::Netns::run`]).

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::sys;

const NLMSG_HDR_LEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
/// Dumps links (`ifinfomsg`).
pub const RTM_GETLINK: u16 = 18;
/// Adds an address (`ifaddrmsg`), as an address dump replies.
pub const RTM_NEWADDR: u16 = 20;
/// Dumps addresses (`ifaddrmsg`).
pub const RTM_GETADDR: u16 = 22;
/// Adds a route (`rtmsg`), as a route dump replies.
pub const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
/// Dumps routes (one family per request: `rtmsg` with `rtm_family` set).
pub const RTM_GETROUTE: u16 = 26;
/// Dumps neighbours (`ndmsg`).
pub const RTM_GETNEIGH: u16 = 30;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_STATS64: u16 = 23;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_AF_SPEC: u16 = 26;
const IFLA_INET6_ADDR_GEN_MODE: u16 = 8;
/// No IPv6 address of the interface's own (no link-local address).
const IN6_ADDR_GEN_MODE_NONE: u8 = 1;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFF_UP: u32 = 0x1;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_F_NODAD: u8 = 0x02;

/// Adds a neighbour (`ndmsg`), as a neighbour dump replies.
pub const RTM_NEWNEIGH: u16 = 28;

const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NUD_PERMANENT: u16 = 0x80;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_TABLE: u16 = 15;
const RT_TABLE_UNSPEC: u8 = 0;
/// The main routing table, the one `ip route` shows.
pub const RT_TABLE_MAIN: u32 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
/// In a delete request: whatever scope the route has.
const RT_SCOPE_NOWHERE: u8 = 255;
const RTN_UNICAST: u8 = 1;

const FRA_SRC: u16 = 2;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
const FRA_OIFNAME: u16 = 17;
const FR_ACT_TO_TBL: u8 = 1;

/// The longest interface name Linux takes, in bytes (`IFNAMSIZ` less the NUL).
pub const MAX_INTERFACE_NAME_LEN: usize = 15;

/// Why a string cannot name a network interface (the kernel's `dev_valid_name`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadInterfaceName {
    /// The name is empty.
    #[error("the interface name is empty")]
    Empty,
    /// The name is longer than [`MAX_INTERFACE_NAME_LEN`]; the kernel would cut it, and
    /// the cut name may be another interface's.
    #[error("interface name '{0}' is {len} bytes long; Linux allows at most 15", len = .0.len())]
    TooLong(String),
    /// `.` and `..` are reserved.
    #[error("interface name '{0}' is reserved")]
    Reserved(String),
    /// The name holds a character Linux refuses.
    #[error("interface name '{0}' contains '/', ':', whitespace or NUL, which Linux refuses")]
    BadCharacter(String),
}

/// Checks that `name` can be an interface name, before the kernel sees it.
pub fn check_interface_name(name: &str) -> Result<(), BadInterfaceName> {
    if name.is_empty() {
        return Err(BadInterfaceName::Empty);
    }
    if name.len() > MAX_INTERFACE_NAME_LEN {
        return Err(BadInterfaceName::TooLong(name.to_owned()));
    }
    if name == "." || name == ".." {
        return Err(BadInterfaceName::Reserved(name.to_owned()));
    }
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
    {
        return Err(BadInterfaceName::BadCharacter(name.to_owned()));
    }
    Ok(())
}

/// A route, for [`Netlink::new_route`] and [`Netlink::delete_route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix; `None` for the default route of the family.
    pub destination: Option<(IpAddr, u8)>,
    /// Next hop; `None` for a destination directly on the interface's link.
    pub gateway: Option<IpAddr>,
    /// The interface the route leaves through.
    pub interface: u32,
    /// IPv6 (the family of a default route without gateway cannot be told otherwise).
    pub ipv6: bool,
    /// Routing table ([`RT_TABLE_MAIN`] for the main one).
    pub table: u32,
    /// Metric (preference, lower wins); `None` for the kernel's default (0 for IPv4, 1024
    /// for IPv6).
    pub metric: Option<u32>,
}

/// What a policy-routing rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSelector {
    /// Flows whose output interface is already chosen as this one: sockets bound to it
    /// with `SO_BINDTODEVICE` (`ip rule add oif NAME`).
    OutputInterface(String),
    /// Flows from this source address (`ip rule add from ADDRESS`), which is also what the
    /// kernel's reverse-path filter looks up for packets arriving to that address.
    Source(IpAddr),
}

/// A policy-routing rule sending the flows it selects to a routing table, for
/// [`Netlink::new_rule`] and [`Netlink::delete_rule`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// IPv6 rules (the rule lists of the two families are separate).
    pub ipv6: bool,
    /// What the rule matches.
    pub selector: RuleSelector,
    /// The table the selected flows look their routes up in.
    pub table: u32,
    /// Its place in the rule list (lower first; the main table's rule is at 32766).
    pub priority: u32,
}

/// A network interface as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Link kind (`veth`, `tun`, ...), when the driver reports one.
    pub kind: Option<String>,
    /// Whether the interface is administratively up.
    pub up: bool,
    /// MTU in bytes.
    pub mtu: u32,
    /// Hardware address.
    pub mac: Vec<u8>,
    /// Packets received, as the kernel counts them (a GRO/TSO super-packet counts once).
    pub rx_packets: u64,
    /// Packets sent, as the kernel counts them.
    pub tx_packets: u64,
    /// Packets the kernel dropped on receive.
    pub rx_dropped: u64,
    /// The bridge (or bond) it is a port of.
    pub master: Option<u32>,
    /// Its hardware type (`ARPHRD_*`: 1 for Ethernet, 772 for loopback).
    pub hardware: u16,
    /// A VXLAN device's remote address (the far end of its tunnel), if it has one.
    pub remote: Option<IpAddr>,
}

/// What a [`Netlink::request_raw`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawFlags {
    /// Create, and fail with `EEXIST` if it is there.
    Create,
    /// Change what is there.
    Change,
}

/// An address on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressInfo {
    /// Interface index.
    pub index: u32,
    /// The address.
    pub address: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
}

/// A route-netlink socket.
#[derive(Debug)]
pub struct Netlink {
    socket: OwnedFd,
    seq: u32,
    buffer: Vec<u8>,
}

/// A netlink message under construction: header, fixed part, attributes.
pub(crate) struct Message {
    bytes: Vec<u8>,
    nests: Vec<usize>,
}

impl Message {
    pub(crate) fn new(kind: u16, flags: u16, fixed: &[u8]) -> Message {
        let mut bytes = vec![0u8; NLMSG_HDR_LEN];
        bytes[4..6].copy_from_slice(&kind.to_ne_bytes());
        bytes[6..8].copy_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        bytes.extend_from_slice(fixed);
        Message {
            bytes,
            nests: Vec::new(),
        }
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    pub(crate) fn attr(&mut self, kind: u16, payload: &[u8]) -> &mut Message {
        self.pad();
        let len = (4 + payload.len()) as u16;
        self.bytes.extend_from_slice(&len.to_ne_bytes());
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self.bytes.extend_from_slice(payload);
        self
    }

    pub(crate) fn attr_str(&mut self, kind: u16, text: &str) -> &mut Message {
        let mut payload = text.as_bytes().to_vec();
        payload.push(0);
        self.attr(kind, &payload)
    }

    pub(crate) fn begin_nest(&mut self, kind: u16) -> &mut Message {
        self.pad();
        self.nests.push(self.bytes.len());
        self.bytes.extend_from_slice(&[0, 0]);
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self
    }

    pub(crate) fn end_nest(&mut self) -> &mut Message {
        let start = self.nests.pop().expect("end_nest without begin_nest");
        self.pad();
        let len = (self.bytes.len() - start) as u16;
        self.bytes[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    /// Raw bytes inside the current nest (a fixed struct at the start of a nested message,
    /// as VETH_INFO_PEER carries an ifinfomsg).
    fn raw(&mut self, payload: &[u8]) -> &mut Message {
        self.bytes.extend_from_slice(payload);
        self
    }

    /// Whether the kernel acknowledges this message when it succeeds (an error is always
    /// answered).
    fn set_ack(&mut self, ack: bool) {
        let mut flags = u16::from_ne_bytes([self.bytes[6], self.bytes[7]]);
        if ack {
            flags |= NLM_F_ACK;
        } else {
            flags &= !NLM_F_ACK;
        }
        self.bytes[6..8].copy_from_slice(&flags.to_ne_bytes());
    }

    fn finish(mut self, seq: u32) -> Vec<u8> {
        self.pad();
        let len = self.bytes.len() as u32;
        self.bytes[0..4].copy_from_slice(&len.to_ne_bytes());
        self.bytes[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.bytes
    }
}

fn ifinfomsg(index: u32, flags: u32, change: u32) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[0] = libc::AF_UNSPEC as u8;
    bytes[4..8].copy_from_slice(&index.to_ne_bytes());
    bytes[8..12].copy_from_slice(&flags.to_ne_bytes());
    bytes[12..16].copy_from_slice(&change.to_ne_bytes());
    bytes
}

/// An RTM_NEWLINK request creating interface `name` of `kind`, with the IFLA_LINKINFO
/// nest left open for kind-specific data.
fn new_link(name: &str, kind: &str) -> Message {
    let mut message = Message::new(
        RTM_NEWLINK,
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        &ifinfomsg(0, 0, 0),
    );
    message.attr_str(IFLA_IFNAME, name);
    message
        .begin_nest(IFLA_LINKINFO)
        .attr_str(IFLA_INFO_KIND, kind);
    message
}

fn ip_bytes(address: IpAddr) -> Vec<u8> {
    match address {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

fn family(address: IpAddr) -> u8 {
    match address {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

/// The remote address in a VXLAN device's `IFLA_INFO_DATA` (IPv4 or IPv6).
fn vxlan_remote(data: &[u8]) -> Option<IpAddr> {
    const IFLA_VXLAN_GROUP: u16 = 2;
    const IFLA_VXLAN_GROUP6: u16 = 16;
    attributes(data).find_map(|(kind, value)| match (kind, value.len()) {
        (IFLA_VXLAN_GROUP, 4) => Some(IpAddr::from(<[u8; 4]>::try_from(value).ok()?)),
        (IFLA_VXLAN_GROUP6, 16) => Some(IpAddr::from(<[u8; 16]>::try_from(value).ok()?)),
        _ => None,
    })
}

/// Iterates over the attributes in `bytes` as (kind, payload).
pub fn attributes(mut bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if bytes.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([bytes[0], bytes[1]]) as usize;
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        if len < 4 || len > bytes.len() {
            return None;
        }
        let payload = &bytes[4..len];
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
        Some((kind, payload))
    })
}

/// The string attribute `kind` among `bytes`, if present.
pub(crate) fn string_attribute(bytes: &[u8], kind: u16) -> Option<String> {
    attributes(bytes)
        .find(|(k, _)| *k == kind)
        .map(|(_, payload)| c_string(payload))
}

fn c_string(payload: &[u8]) -> String {
    let end = payload
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(payload.len());
    String::from_utf8_lossy(&payload[..end]).into_owned()
}

impl Netlink {
    /// Opens a route-netlink socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Netlink> {
        Netlink::open_protocol(libc::NETLINK_ROUTE)
    }

    /// Opens a netlink socket of another family (`NETLINK_NETFILTER` for nftables).
    pub fn open_protocol(protocol: libc::c_int) -> io::Result<Netlink> {
        let socket = sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, protocol)?;
        sys::bind_netlink(socket.as_fd(), 0)?;
        Ok(Netlink {
            socket,
            seq: 1,
            buffer: vec![0; 64 * 1024],
        })
    }

    fn send(&mut self, message: Message) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let bytes = message.finish(self.seq);
        sys::send(self.socket.as_fd(), &bytes, 0)?;
        Ok(self.seq)
    }

    /// Sends several messages in one datagram (an nftables batch) and waits for the
    /// acknowledgement of the last one that asks for it; the first error wins.
    pub(crate) fn batch(&mut self, messages: Vec<Message>) -> io::Result<()> {
        let mut bytes = Vec::new();
        for message in messages {
            self.seq = self.seq.wrapping_add(1);
            bytes.extend(message.finish(self.seq));
        }
        sys::send(self.socket.as_fd(), &bytes, 0)?;
        // The batch-end message carries the last sequence number and is not acknowledged;
        // the one before it is the last acknowledged.
        self.wait_ack(self.seq.wrapping_sub(1))
    }

    /// Sends `messages` in order, many to a datagram, and waits for each datagram's last
    /// one only: the kernel handles a datagram's messages one after the other and answers
    /// only the last (and any that failed), so thousands of requests cost a few system
    /// calls and the answers never fill the socket. The first error wins.
    pub(crate) fn requests(
        &mut self,
        messages: impl IntoIterator<Item = Message>,
    ) -> io::Result<()> {
        /// Bytes of requests per datagram: well under the socket's send buffer.
        const DATAGRAM_BYTES: usize = 32 * 1024;
        let mut datagram = Vec::new();
        let mut pending: Option<Message> = None;
        for message in messages {
            if let Some(mut previous) = pending.take() {
                if datagram.len() + previous.bytes.len() + message.bytes.len() > DATAGRAM_BYTES {
                    self.send_datagram(&mut datagram, previous)?;
                } else {
                    previous.set_ack(false);
                    self.seq = self.seq.wrapping_add(1);
                    datagram.extend(previous.finish(self.seq));
                }
            }
            pending = Some(message);
        }
        match pending {
            Some(last) => self.send_datagram(&mut datagram, last),
            None => Ok(()),
        }
    }

    /// Sends the requests in `datagram` followed by `last`, acknowledged, and waits for
    /// its acknowledgement; `datagram` is left empty.
    fn send_datagram(&mut self, datagram: &mut Vec<u8>, mut last: Message) -> io::Result<()> {
        last.set_ack(true);
        self.seq = self.seq.wrapping_add(1);
        datagram.extend(last.finish(self.seq));
        sys::send(self.socket.as_fd(), datagram, 0)?;
        datagram.clear();
        self.wait_ack(self.seq)
    }

    /// Sends a request and waits for its acknowledgement.
    pub(crate) fn request(&mut self, message: Message) -> io::Result<()> {
        let seq = self.send(message)?;
        self.wait_ack(seq)
    }

    /// Reads acknowledgements until the one for `seq`; an error for any earlier message
    /// is returned at once.
    fn wait_ack(&mut self, seq: u32) -> io::Result<()> {
        loop {
            let n = sys::recv(self.socket.as_fd(), &mut self.buffer, 0)?;
            let mut offset = 0;
            while offset + NLMSG_HDR_LEN <= n {
                let header = &self.buffer[offset..];
                let len = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
                let kind = u16::from_ne_bytes([header[4], header[5]]);
                let reply_seq = u32::from_ne_bytes(header[8..12].try_into().expect("4 bytes"));
                if len < NLMSG_HDR_LEN {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "short netlink message",
                    ));
                }
                if kind == NLMSG_ERROR {
                    let code = i32::from_ne_bytes(header[16..20].try_into().expect("4 bytes"));
                    if code != 0 {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    if reply_seq == seq {
                        return Ok(());
                    }
                }
                offset += len.next_multiple_of(4);
            }
        }
    }

    /// A dump of any netlink family: the payloads (after the netlink header) of the replies.
    pub fn dump_raw(&mut self, kind: u16, fixed: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self.dump(kind, fixed)
    }

    /// Sends a dump request and collects the payloads (after the netlink header) of its
    /// replies.
    fn dump(&mut self, kind: u16, fixed: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        let seq = self.send(Message::new(kind, NLM_F_DUMP, fixed))?;
        let mut replies = Vec::new();
        loop {
            let n = sys::recv(self.socket.as_fd(), &mut self.buffer, 0)?;
            let mut offset = 0;
            while offset + NLMSG_HDR_LEN <= n {
                let header = &self.buffer[offset..n];
                let len = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
                let kind = u16::from_ne_bytes([header[4], header[5]]);
                let reply_seq = u32::from_ne_bytes(header[8..12].try_into().expect("4 bytes"));
                if len < NLMSG_HDR_LEN || len > header.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "bad netlink message length",
                    ));
                }
                if reply_seq == seq {
                    match kind {
                        NLMSG_DONE => return Ok(replies),
                        NLMSG_ERROR => {
                            let code =
                                i32::from_ne_bytes(header[16..20].try_into().expect("4 bytes"));
                            return Err(io::Error::from_raw_os_error(-code));
                        }
                        _ => replies.push(header[NLMSG_HDR_LEN..len].to_vec()),
                    }
                }
                offset += len.next_multiple_of(4);
            }
        }
    }

    /// Creates a veth pair: `name` here, `peer` in `peer_netns` (here if `None`).
    pub fn create_veth(
        &mut self,
        name: &str,
        peer: &str,
        peer_netns: Option<BorrowedFd<'_>>,
    ) -> io::Result<()> {
        let mut message = new_link(name, "veth");
        message
            .begin_nest(IFLA_INFO_DATA)
            .begin_nest(VETH_INFO_PEER);
        message.raw(&ifinfomsg(0, 0, 0)).attr_str(IFLA_IFNAME, peer);
        if let Some(netns) = peer_netns {
            message.attr(IFLA_NET_NS_FD, &(netns.as_raw_fd() as u32).to_ne_bytes());
        }
        message.end_nest().end_nest().end_nest();
        self.request(message)
    }

    /// Creates a veth pair whose end `name` takes interface index `index` here, `mac` and
    /// `mtu`, its peer `peer` in `peer_netns`: a stand-in for an interface that left, seen
    /// by the namespace's programs as the same one. `EBUSY` if the index is taken.
    pub fn create_veth_as(
        &mut self,
        name: &str,
        index: u32,
        mac: &[u8],
        mtu: u32,
        peer: &str,
        peer_netns: BorrowedFd<'_>,
    ) -> io::Result<()> {
        let mut message = Message::new(
            RTM_NEWLINK,
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            &ifinfomsg(index, 0, 0),
        );
        message.attr_str(IFLA_IFNAME, name);
        message.attr(IFLA_ADDRESS, mac);
        message.attr(IFLA_MTU, &mtu.to_ne_bytes());
        message
            .begin_nest(IFLA_LINKINFO)
            .attr_str(IFLA_INFO_KIND, "veth")
            .begin_nest(IFLA_INFO_DATA)
            .begin_nest(VETH_INFO_PEER);
        message.raw(&ifinfomsg(0, 0, 0)).attr_str(IFLA_IFNAME, peer);
        message.attr(IFLA_MTU, &mtu.to_ne_bytes());
        message.attr(
            IFLA_NET_NS_FD,
            &(peer_netns.as_raw_fd() as u32).to_ne_bytes(),
        );
        message.end_nest().end_nest().end_nest();
        self.request(message)
    }

    /// Sends a request whose body (fixed part and attributes, as a dump replied it and
    /// [`crate::interpose`] rewrote it) is `body`, and waits for its acknowledgement.
    pub fn request_raw(&mut self, kind: u16, flags: RawFlags, body: &[u8]) -> io::Result<()> {
        let flags = match flags {
            RawFlags::Create => NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            RawFlags::Change => NLM_F_ACK,
        };
        self.request(Message::new(kind, flags, body))
    }

    /// Creates a VXLAN device `name` (as meshnet makes a link between machines): network
    /// identifier `vni`, its packets to `remote` from `local` on UDP port `port`, through
    /// interface `underlay` (an index here).
    pub fn create_vxlan(
        &mut self,
        name: &str,
        vni: u32,
        local: IpAddr,
        remote: IpAddr,
        port: u16,
        underlay: u32,
    ) -> io::Result<()> {
        const IFLA_VXLAN_ID: u16 = 1;
        const IFLA_VXLAN_GROUP: u16 = 2;
        const IFLA_VXLAN_LINK: u16 = 3;
        const IFLA_VXLAN_LOCAL: u16 = 4;
        const IFLA_VXLAN_PORT: u16 = 15;
        const IFLA_VXLAN_GROUP6: u16 = 16;
        const IFLA_VXLAN_LOCAL6: u16 = 17;
        let (group, local_kind) = match remote {
            IpAddr::V4(_) => (IFLA_VXLAN_GROUP, IFLA_VXLAN_LOCAL),
            IpAddr::V6(_) => (IFLA_VXLAN_GROUP6, IFLA_VXLAN_LOCAL6),
        };
        let mut message = new_link(name, "vxlan");
        message
            .begin_nest(IFLA_INFO_DATA)
            .attr(IFLA_VXLAN_ID, &vni.to_ne_bytes())
            .attr(group, &ip_bytes(remote))
            .attr(local_kind, &ip_bytes(local))
            .attr(IFLA_VXLAN_LINK, &underlay.to_ne_bytes())
            .attr(IFLA_VXLAN_PORT, &port.to_be_bytes())
            .end_nest()
            .end_nest();
        self.request(message)
    }

    /// Creates a macvlan device `name` in bridge mode on interface `lower` (an index here).
    pub fn create_macvlan(&mut self, name: &str, lower: u32) -> io::Result<()> {
        const IFLA_LINK: u16 = 5;
        const IFLA_MACVLAN_MODE: u16 = 1;
        const MACVLAN_MODE_BRIDGE: u32 = 4;
        let mut message = new_link(name, "macvlan");
        message
            .begin_nest(IFLA_INFO_DATA)
            .attr(IFLA_MACVLAN_MODE, &MACVLAN_MODE_BRIDGE.to_ne_bytes())
            .end_nest()
            .end_nest();
        message.attr(IFLA_LINK, &lower.to_ne_bytes());
        self.request(message)
    }

    /// Creates a bridge device.
    pub fn create_bridge(&mut self, name: &str) -> io::Result<()> {
        let mut message = new_link(name, "bridge");
        message.end_nest();
        self.request(message)
    }

    /// Makes interface `index` a port of bridge `master`.
    pub fn set_master(&mut self, index: u32, master: u32) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_ACK, &ifinfomsg(index, 0, 0));
        message.attr(IFLA_MASTER, &master.to_ne_bytes());
        self.request(message)
    }

    /// Adds a permanent neighbour (ARP or NDP) entry: `address` is at `mac` on `index`.
    pub fn add_neighbor(&mut self, index: u32, address: IpAddr, mac: &[u8]) -> io::Result<()> {
        self.request(neighbor_message(index, address, mac))
    }

    /// Adds permanent neighbour entries (index, address, MAC), as [`Netlink::add_neighbor`],
    /// many to a system call.
    pub fn add_neighbors<'a>(
        &mut self,
        neighbors: impl IntoIterator<Item = (u32, IpAddr, &'a [u8])>,
    ) -> io::Result<()> {
        self.requests(
            neighbors
                .into_iter()
                .map(|(index, address, mac)| neighbor_message(index, address, mac)),
        )
    }

    /// Sets an interface up or down.
    pub fn set_up(&mut self, index: u32, up: bool) -> io::Result<()> {
        self.request(up_message(index, up))
    }

    /// Brings interfaces up without an IPv6 address of their own: no link-local address,
    /// so no route, duplicate address detection or solicitation of its own either (the
    /// interfaces' IPv6 addresses and routes are given). Each first gets IPv6 address
    /// generation mode "none" (as `ip link set IF addrgenmode none`, through netlink
    /// rather than the `addr_gen_mode` sysctl: a sysctl's path is looked up among the
    /// entries of every namespace that has one of that name, which costs milliseconds
    /// once there are thousands), then goes up; many to a system call.
    pub fn set_up_without_link_local(&mut self, indices: &[u32]) -> io::Result<()> {
        self.requests(indices.iter().flat_map(|&index| {
            [
                addr_gen_mode_message(index, IN6_ADDR_GEN_MODE_NONE),
                up_message(index, true),
            ]
        }))
    }

    /// Sets an interface's IPv6 address generation mode (the `addr_gen_mode` sysctl's
    /// values: 0 EUI-64, 1 none, 2 stable privacy, 3 random) through netlink, which works
    /// where `/proc/sys` is mounted read-only (a container that is not privileged).
    pub fn set_addr_gen_mode(&mut self, index: u32, mode: u8) -> io::Result<()> {
        self.request(addr_gen_mode_message(index, mode))
    }

    /// Sets an interface's MTU.
    pub fn set_mtu(&mut self, index: u32, mtu: u32) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_ACK, &ifinfomsg(index, 0, 0));
        message.attr(IFLA_MTU, &mtu.to_ne_bytes());
        self.request(message)
    }

    /// Sets an interface's MAC address (a replacement interface can take its
    /// predecessor's, so that its neighbours' entries stay right).
    pub fn set_mac(&mut self, index: u32, mac: &[u8]) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_ACK, &ifinfomsg(index, 0, 0));
        message.attr(IFLA_ADDRESS, mac);
        self.request(message)
    }

    /// Moves an interface into another network namespace.
    pub fn move_to_netns(&mut self, index: u32, netns: BorrowedFd<'_>) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_ACK, &ifinfomsg(index, 0, 0));
        message.attr(IFLA_NET_NS_FD, &(netns.as_raw_fd() as u32).to_ne_bytes());
        self.request(message)
    }

    /// Deletes an interface (both ends, for a veth).
    pub fn delete_link(&mut self, index: u32) -> io::Result<()> {
        self.request(Message::new(
            RTM_DELLINK,
            NLM_F_ACK,
            &ifinfomsg(index, 0, 0),
        ))
    }

    /// Every interface in this namespace.
    pub fn links(&mut self) -> io::Result<Vec<LinkInfo>> {
        let replies = self.dump(RTM_GETLINK, &ifinfomsg(0, 0, 0))?;
        let mut links = Vec::new();
        for reply in replies {
            if reply.len() < 16 {
                continue;
            }
            let index = u32::from_ne_bytes(reply[4..8].try_into().expect("4 bytes"));
            let flags = u32::from_ne_bytes(reply[8..12].try_into().expect("4 bytes"));
            let mut link = LinkInfo {
                index,
                name: String::new(),
                kind: None,
                up: flags & IFF_UP != 0,
                mtu: 0,
                mac: Vec::new(),
                rx_packets: 0,
                tx_packets: 0,
                rx_dropped: 0,
                master: None,
                hardware: u16::from_ne_bytes([reply[2], reply[3]]),
                remote: None,
            };
            for (kind, payload) in attributes(&reply[16..]) {
                match kind {
                    IFLA_IFNAME => link.name = c_string(payload),
                    IFLA_MTU if payload.len() >= 4 => {
                        link.mtu = u32::from_ne_bytes(payload[..4].try_into().expect("4 bytes"));
                    }
                    IFLA_ADDRESS => link.mac = payload.to_vec(),
                    IFLA_MASTER if payload.len() >= 4 => {
                        link.master = Some(u32::from_ne_bytes(
                            payload[..4].try_into().expect("4 bytes"),
                        ));
                    }
                    IFLA_STATS64 if payload.len() >= 56 => {
                        let counter = |i: usize| {
                            u64::from_ne_bytes(
                                payload[i * 8..i * 8 + 8].try_into().expect("8 bytes"),
                            )
                        };
                        link.rx_packets = counter(0);
                        link.tx_packets = counter(1);
                        link.rx_dropped = counter(6);
                    }
                    IFLA_LINKINFO => {
                        for (inner, value) in attributes(payload) {
                            if inner == IFLA_INFO_KIND {
                                link.kind = Some(c_string(value));
                            }
                            if inner == IFLA_INFO_DATA && link.kind.as_deref() == Some("vxlan") {
                                link.remote = vxlan_remote(value);
                            }
                        }
                    }
                    _ => {}
                }
            }
            links.push(link);
        }
        Ok(links)
    }

    /// The interface called `name`, if there is one.
    pub fn link_by_name(&mut self, name: &str) -> io::Result<Option<LinkInfo>> {
        Ok(self.links()?.into_iter().find(|link| link.name == name))
    }

    /// Every address in this namespace.
    pub fn addresses(&mut self) -> io::Result<Vec<AddressInfo>> {
        let replies = self.dump(RTM_GETADDR, &[0u8; 8])?;
        let mut addresses = Vec::new();
        for reply in replies {
            if reply.len() < 8 {
                continue;
            }
            let prefix_len = reply[1];
            let index = u32::from_ne_bytes(reply[4..8].try_into().expect("4 bytes"));
            for (kind, payload) in attributes(&reply[8..]) {
                let address = match payload.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(payload).expect("4 bytes")),
                    16 => IpAddr::from(<[u8; 16]>::try_from(payload).expect("16 bytes")),
                    _ => continue,
                };
                if kind == IFA_ADDRESS {
                    addresses.push(AddressInfo {
                        index,
                        address,
                        prefix_len,
                    });
                }
            }
        }
        Ok(addresses)
    }

    /// Adds an address to an interface (IPv6 without duplicate address detection, so it is
    /// usable at once). With `peer`, the address is point-to-point (as on a TUN device).
    pub fn add_address(
        &mut self,
        index: u32,
        address: IpAddr,
        prefix_len: u8,
        peer: Option<IpAddr>,
    ) -> io::Result<()> {
        self.request(address_message(index, address, prefix_len, peer))
    }

    /// Adds addresses (index, address, prefix length), as [`Netlink::add_address`] without
    /// a peer, many to a system call.
    pub fn add_addresses(
        &mut self,
        addresses: impl IntoIterator<Item = (u32, IpAddr, u8)>,
    ) -> io::Result<()> {
        self.requests(
            addresses.into_iter().map(|(index, address, prefix_len)| {
                address_message(index, address, prefix_len, None)
            }),
        )
    }

    /// Adds a route to `destination` (`None`: the default route) through `gateway` or,
    /// without one, directly out of interface `index`, to the main table.
    pub fn add_route(
        &mut self,
        destination: Option<(IpAddr, u8)>,
        gateway: Option<IpAddr>,
        index: u32,
        ipv6: bool,
    ) -> io::Result<()> {
        self.new_route(&Route {
            destination,
            gateway,
            interface: index,
            ipv6,
            table: RT_TABLE_MAIN,
            metric: None,
        })
    }

    /// Adds a route (`ip route add`); an identical one already there is an error
    /// (`EEXIST`).
    pub fn new_route(&mut self, route: &Route) -> io::Result<()> {
        self.request(new_route_message(route))
    }

    /// Adds routes, as [`Netlink::new_route`], many to a system call.
    pub fn new_routes<'a>(
        &mut self,
        routes: impl IntoIterator<Item = &'a Route>,
    ) -> io::Result<()> {
        self.requests(routes.into_iter().map(new_route_message))
    }

    /// Deletes a route (`ip route del`); a missing one is an error (`ESRCH`).
    pub fn delete_route(&mut self, route: &Route) -> io::Result<()> {
        self.request(route_message(
            RTM_DELROUTE,
            NLM_F_ACK,
            route,
            RT_SCOPE_NOWHERE,
        ))
    }

    /// Adds a policy-routing rule (`ip rule add`).
    pub fn new_rule(&mut self, rule: &Rule) -> io::Result<()> {
        self.request(rule_message(
            RTM_NEWRULE,
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            rule,
        ))
    }

    /// Deletes a policy-routing rule (`ip rule del`); a missing one is an error
    /// (`ENOENT`).
    pub fn delete_rule(&mut self, rule: &Rule) -> io::Result<()> {
        self.request(rule_message(RTM_DELRULE, NLM_F_ACK, rule))
    }
}

/// An RTM_NEWLINK request setting interface `index` up or down.
/// An RTM_NEWLINK request: interface `index`'s IPv6 address generation mode is `mode`.
fn addr_gen_mode_message(index: u32, mode: u8) -> Message {
    let mut message = Message::new(RTM_NEWLINK, NLM_F_ACK, &ifinfomsg(index, 0, 0));
    message
        .begin_nest(IFLA_AF_SPEC)
        .begin_nest(libc::AF_INET6 as u16)
        .attr(IFLA_INET6_ADDR_GEN_MODE, &[mode])
        .end_nest()
        .end_nest();
    message
}

fn up_message(index: u32, up: bool) -> Message {
    Message::new(
        RTM_NEWLINK,
        NLM_F_ACK,
        &ifinfomsg(index, if up { IFF_UP } else { 0 }, IFF_UP),
    )
}

/// An RTM_NEWNEIGH request: `address` is at `mac` on `index`, for good.
fn neighbor_message(index: u32, address: IpAddr, mac: &[u8]) -> Message {
    let mut fixed = [0u8; 12];
    fixed[0] = family(address);
    fixed[4..8].copy_from_slice(&index.to_ne_bytes());
    fixed[8..10].copy_from_slice(&NUD_PERMANENT.to_ne_bytes());
    let mut message = Message::new(RTM_NEWNEIGH, NLM_F_ACK | NLM_F_CREATE, &fixed);
    message.attr(NDA_DST, &ip_bytes(address));
    message.attr(NDA_LLADDR, mac);
    message
}

/// An RTM_NEWADDR request (IPv6 without duplicate address detection).
fn address_message(index: u32, address: IpAddr, prefix_len: u8, peer: Option<IpAddr>) -> Message {
    let mut fixed = [0u8; 8];
    fixed[0] = family(address);
    fixed[1] = prefix_len;
    fixed[2] = if address.is_ipv6() { IFA_F_NODAD } else { 0 };
    fixed[3] = RT_SCOPE_UNIVERSE;
    fixed[4..8].copy_from_slice(&index.to_ne_bytes());
    let mut message = Message::new(RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, &fixed);
    message.attr(IFA_LOCAL, &ip_bytes(address));
    message.attr(IFA_ADDRESS, &ip_bytes(peer.unwrap_or(address)));
    message
}

/// An RTM_NEWROUTE request that fails if the route is there.
fn new_route_message(route: &Route) -> Message {
    let scope = if route.gateway.is_some() {
        RT_SCOPE_UNIVERSE
    } else {
        RT_SCOPE_LINK
    };
    route_message(
        RTM_NEWROUTE,
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        route,
        scope,
    )
}

/// The one-byte table field of `rtmsg` and `fib_rule_hdr`: tables above 255 only fit the
/// 32-bit attribute, which is always sent as well.
fn table_byte(table: u32) -> u8 {
    u8::try_from(table).unwrap_or(RT_TABLE_UNSPEC)
}

/// An RTM_NEWROUTE or RTM_DELROUTE request (`struct rtmsg`, then attributes).
fn route_message(kind: u16, flags: u16, route: &Route, scope: u8) -> Message {
    let mut fixed = [0u8; 12];
    fixed[0] = if route.ipv6 {
        libc::AF_INET6 as u8
    } else {
        libc::AF_INET as u8
    };
    fixed[1] = route.destination.map_or(0, |(_, len)| len);
    fixed[4] = table_byte(route.table);
    fixed[5] = RTPROT_STATIC;
    fixed[6] = scope;
    fixed[7] = RTN_UNICAST;
    let mut message = Message::new(kind, flags, &fixed);
    message.attr(RTA_TABLE, &route.table.to_ne_bytes());
    if let Some((address, _)) = route.destination {
        message.attr(RTA_DST, &ip_bytes(address));
    }
    if let Some(gateway) = route.gateway {
        message.attr(RTA_GATEWAY, &ip_bytes(gateway));
    }
    if let Some(metric) = route.metric {
        message.attr(RTA_PRIORITY, &metric.to_ne_bytes());
    }
    message.attr(RTA_OIF, &route.interface.to_ne_bytes());
    message
}

/// An RTM_NEWRULE or RTM_DELRULE request (`struct fib_rule_hdr`, then attributes).
fn rule_message(kind: u16, flags: u16, rule: &Rule) -> Message {
    let mut fixed = [0u8; 12];
    fixed[0] = if rule.ipv6 {
        libc::AF_INET6 as u8
    } else {
        libc::AF_INET as u8
    };
    if let RuleSelector::Source(address) = rule.selector {
        fixed[2] = if address.is_ipv6() { 128 } else { 32 };
    }
    fixed[4] = table_byte(rule.table);
    fixed[7] = FR_ACT_TO_TBL;
    let mut message = Message::new(kind, flags, &fixed);
    message.attr(FRA_TABLE, &rule.table.to_ne_bytes());
    message.attr(FRA_PRIORITY, &rule.priority.to_ne_bytes());
    match &rule.selector {
        RuleSelector::OutputInterface(name) => {
            message.attr_str(FRA_OIFNAME, name);
        }
        RuleSelector::Source(address) => {
            message.attr(FRA_SRC, &ip_bytes(*address));
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_attributes_have_their_lengths_patched_and_padding() {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_ACK, &ifinfomsg(0, 0, 0));
        message.attr_str(IFLA_IFNAME, "ab");
        message
            .begin_nest(IFLA_LINKINFO)
            .attr_str(IFLA_INFO_KIND, "veth")
            .end_nest();
        let bytes = message.finish(7);
        assert_eq!(
            u32::from_ne_bytes(bytes[0..4].try_into().unwrap()) as usize,
            bytes.len()
        );
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 7);
        let attrs: Vec<_> = attributes(&bytes[32..]).collect();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0], (IFLA_IFNAME, &b"ab\0"[..]));
        assert_eq!(attrs[1].0, IFLA_LINKINFO);
        // The nest holds one attribute: 4-byte header + "veth\0" padded to 8 = 12 bytes.
        assert_eq!(attrs[1].1.len(), 12);
        let inner: Vec<_> = attributes(attrs[1].1).collect();
        assert_eq!(inner, vec![(IFLA_INFO_KIND, &b"veth\0"[..])]);
    }

    #[test]
    fn attribute_iterator_stops_at_bad_lengths() {
        assert_eq!(attributes(&[8, 0, 1, 0, 1]).count(), 0);
        assert_eq!(attributes(&[2, 0, 1, 0]).count(), 0);
    }
}

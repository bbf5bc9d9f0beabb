//! Line sockets: one UDP socket per line of a multi-line site, each sending and receiving
//! through its own interface only, so that every line reaches the same server address at
//! once (what `pathlab bond` carries its tunnel over).
//!
//! [`line_socket`] restricts a socket to one interface with `SO_BINDTODEVICE`. Two sockets
//! bound to different interfaces may even share a local port. With batched I/O
//! ([`RecvBatch`], [`send_batch`], [`send_batch_to`]) a line costs one system call per
//! batch, and allocates nothing per packet.
//!
//! # What `SO_BINDTODEVICE` needs from routing
//!
//! Binding a socket to an interface does not route it: the kernel still looks up a route,
//! restricted to routes whose next hop leaves through that interface (the lookup's output
//! interface is the bound one). Tested in namespaces (the tests below), on Linux 6.18:
//!
//! - A destination on the interface's own subnet needs nothing more: the connected route
//!   the address brought is enough.
//! - A destination beyond the line's gateway needs a route through that gateway out of
//!   that interface. Without one, IPv6 fails at once (`ENETUNREACH`); IPv4 assumes the
//!   destination is on the link and asks for it by ARP, which no real modem answers, so
//!   the datagrams vanish without an error.
//! - The route may be in any table the bound flow reaches. Either one default route per
//!   line in the main table with distinct metrics (the lookup skips the routes through
//!   other interfaces, even more specific ones, and backtracks to the line's own), or, not
//!   touching what unbound traffic does, [`LineRoute`]: a default route through the
//!   gateway in a table of the line's own plus a rule `oif INTERFACE lookup TABLE`.
//! - Strict reverse-path filtering (`rp_filter = 1`, RHEL's default) drops the replies on
//!   every line but the one the main table's default route uses: it checks the reply's
//!   source against the main table, as unbound traffic. A rule `from LINE_ADDRESS lookup
//!   TABLE` makes the check find the line's route; [`LineRoute`] adds one for each address
//!   the interface has. Loose filtering (`rp_filter = 2`, most distributions) and IPv6
//!   need no such rule.
//!
//! So a multi-line client does, per line, in netlink terms: `RTM_NEWROUTE` (table T,
//! `RTA_GATEWAY` the line's gateway, `RTA_OIF` its interface, no destination),
//! `RTM_NEWRULE` (`FRA_OIFNAME` the interface, `FRA_TABLE` T) and `RTM_NEWRULE`
//! (`FRA_SRC` each line address, `FRA_TABLE` T), per family. [`LineRoute`] does exactly
//! that and undoes it on drop.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};

use pathlab_os::netlink::{
    check_interface_name, BadInterfaceName, Netlink, Route, Rule, RuleSelector,
};
use pathlab_os::sys;

pub use pathlab_os::sys::{
    Datagram, RecvBatch, Train, MAX_BATCH, MAX_TRAIN_BYTES, MAX_TRAIN_SEGMENTS,
};

/// Send and receive buffer asked for on each line socket: 4 MiB holds about 30 ms of a
/// 1 Gbit/s line, so a tunnel thread that is descheduled for a moment loses nothing.
/// Beyond `wmem_max`/`rmem_max` it takes CAP_NET_ADMIN (`SO_*BUFFORCE`); without it the
/// kernel grants up to those limits.
pub const LINE_BUFFER_BYTES: usize = 4 << 20;

/// Where a rule [`LineRoute`] adds sits among the policy-routing rules: before the main
/// table's (32766), after the local table's (0).
pub const LINE_RULE_PRIORITY: u32 = 1000;

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of `address`.
    pub fn of(address: IpAddr) -> Family {
        match address {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// The family's unspecified address (`0.0.0.0`, `::`).
    pub fn unspecified(self) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}

/// Why a line socket or a line's routing cannot be set up. Returned inside an
/// [`io::Error`] (of the kind given per variant); `error.get_ref()` and
/// `downcast_ref::<LineError>()` recover it.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// The name cannot be an interface name (`InvalidInput`).
    #[error("line: {0}")]
    BadName(BadInterfaceName),
    /// No interface has that name in this network namespace (`NotFound`).
    #[error("line '{interface}': no interface of that name in this network namespace")]
    NoSuchInterface {
        /// The interface asked for.
        interface: String,
    },
    /// The local address is of the other family (`InvalidInput`).
    #[error("line '{interface}': local address {local} is not {family} like the remote side")]
    FamilyMismatch {
        /// The interface.
        interface: String,
        /// The local address given.
        local: SocketAddr,
        /// The remote family given.
        family: &'static str,
    },
    /// Binding to the interface was refused (`PermissionDenied`).
    #[error("line '{interface}': binding a socket to the interface needs CAP_NET_RAW (root)")]
    NeedsNetRaw {
        /// The interface.
        interface: String,
    },
    /// The local address cannot be bound (`AddrNotAvailable`, `AddrInUse`, ...).
    #[error("line '{interface}': cannot bind local address {local}: {error}")]
    Bind {
        /// The interface.
        interface: String,
        /// The local address given.
        local: SocketAddr,
        /// The error.
        error: io::Error,
    },
    /// A system call failed (the error's own kind).
    #[error("line '{interface}': {what}: {error}")]
    Io {
        /// The interface.
        interface: String,
        /// What was being done, naming the value involved.
        what: String,
        /// The error.
        error: io::Error,
    },
}

impl From<LineError> for io::Error {
    fn from(error: LineError) -> io::Error {
        let kind = match &error {
            LineError::BadName(_) | LineError::FamilyMismatch { .. } => io::ErrorKind::InvalidInput,
            LineError::NoSuchInterface { .. } => io::ErrorKind::NotFound,
            LineError::NeedsNetRaw { .. } => io::ErrorKind::PermissionDenied,
            LineError::Bind { error, .. } | LineError::Io { error, .. } => error.kind(),
        };
        io::Error::new(kind, error)
    }
}

/// A non-blocking UDP socket of `remote_family` that sends and receives only through
/// `interface` (`SO_BINDTODEVICE`, set before binding, so sockets on different interfaces
/// may share a port), bound to `local` or, without it, to the family's unspecified address
/// and a port the kernel picks. Its buffers are [`LINE_BUFFER_BYTES`] or as much as the
/// host allows. IPv6 sockets are IPv6 only. Routing beyond the interface's subnet needs a
/// route through it: see the module's doc and [`LineRoute`]. The error is a [`LineError`]
/// naming the interface.
pub fn line_socket(
    interface: &str,
    local: Option<SocketAddr>,
    remote_family: Family,
) -> io::Result<UdpSocket> {
    line_socket_named(interface, local, remote_family).map_err(io::Error::from)
}

fn line_socket_named(
    interface: &str,
    local: Option<SocketAddr>,
    family: Family,
) -> Result<UdpSocket, LineError> {
    check_interface_name(interface).map_err(LineError::BadName)?;
    if let Some(local) = local {
        if Family::of(local.ip()) != family {
            return Err(LineError::FamilyMismatch {
                interface: interface.to_owned(),
                local,
                family: family.name(),
            });
        }
    }
    let failed = |what: &str| {
        let interface = interface.to_owned();
        let what = what.to_owned();
        move |error| LineError::Io {
            interface,
            what,
            error,
        }
    };
    let socket: OwnedFd = sys::udp_socket_nonblocking(family == Family::V6)
        .map_err(failed("opening a UDP socket"))?;
    sys::bind_to_device(socket.as_fd(), interface).map_err(|error| {
        let interface = interface.to_owned();
        match error.raw_os_error() {
            Some(libc::ENODEV) => LineError::NoSuchInterface { interface },
            Some(libc::EPERM) => LineError::NeedsNetRaw { interface },
            _ => LineError::Io {
                interface,
                what: "binding the socket to the interface".to_owned(),
                error,
            },
        }
    })?;
    // DF on, the kernel's cached path MTU ignored: the tunnel probes each line's path MTU
    // itself, and a datagram too big for a hop must vanish, not be fragmented on the way.
    sys::set_df_probe(socket.as_fd(), family == Family::V6)
        .map_err(failed("setting DF for path MTU probing"))?;
    sys::grow_send_buffer(socket.as_fd(), LINE_BUFFER_BYTES)
        .map_err(failed("growing the send buffer"))?;
    sys::grow_receive_buffer(socket.as_fd(), LINE_BUFFER_BYTES)
        .map_err(failed("growing the receive buffer"))?;
    let local = local.unwrap_or(SocketAddr::new(family.unspecified(), 0));
    sys::bind(socket.as_fd(), local).map_err(|error| LineError::Bind {
        interface: interface.to_owned(),
        local,
        error,
    })?;
    Ok(UdpSocket::from(socket))
}

/// Asks for the arrival interface and destination address of every datagram `socket`
/// receives, which [`Datagram::interface`] and [`Datagram::destination`] then report
/// (a server learns which of its addresses and links a line's packets came in by, and
/// answers from that address with [`Train::from`]). On an IPv6 socket that takes IPv4
/// too, IPv4 datagrams report their destination IPv4-mapped.
pub fn enable_packet_info(socket: &UdpSocket) -> io::Result<()> {
    let ipv6 = socket.local_addr()?.is_ipv6();
    sys::enable_packet_info(socket.as_fd(), ipv6)
}

/// The send and receive buffers the kernel granted `socket`, bytes: twice what was asked,
/// the kernel's bookkeeping share included.
pub fn buffer_sizes(socket: &UdpSocket) -> io::Result<(usize, usize)> {
    sys::buffer_sizes(socket.as_fd())
}

/// Receives what is waiting on `socket` into `batch`, without blocking, in one
/// `recvmmsg(2)`: the number of datagrams (0 when none); read them with
/// [`RecvBatch::datagrams`].
pub fn recv_batch(socket: &UdpSocket, batch: &mut RecvBatch) -> io::Result<usize> {
    batch.recv(socket.as_fd())
}

/// Sends each of `packets` as one datagram on a connected socket, in `sendmmsg(2)` calls
/// of up to [`MAX_BATCH`]; returns how many the kernel took, from the first (fewer when
/// the send buffer filled: `WouldBlock` only if none went).
pub fn send_batch(socket: &UdpSocket, packets: &[&[u8]]) -> io::Result<usize> {
    sys::send_batch(socket.as_fd(), packets)
}

/// Sends each packet to its own destination (an unconnected socket, as a server's), in
/// `sendmmsg(2)` calls of up to [`MAX_BATCH`]; returns how many the kernel took, from the
/// first.
pub fn send_batch_to(socket: &UdpSocket, packets: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
    sys::send_batch_to(socket.as_fd(), packets)
}

/// Asks the kernel to hand `socket`'s datagrams in trains (UDP GRO): read them with
/// [`Datagram::segments`].
pub fn enable_udp_gro(socket: &UdpSocket) -> io::Result<()> {
    sys::enable_udp_gro(socket.as_fd())
}

/// Sends `trains` of `datagrams` in one `sendmmsg(2)`, a GSO train (several datagrams of
/// one size but the last, to one destination) as one message: it crosses the stack as one
/// packet. Returns how many trains the kernel took, from the first; `EIO`/`EINVAL` on a
/// GSO train means the socket's device or kernel cannot take them (send one datagram per
/// train).
pub fn send_trains(socket: &UdpSocket, datagrams: &[&[u8]], trains: &[Train]) -> io::Result<usize> {
    sys::send_trains(socket.as_fd(), datagrams, trains)
}

/// Whether a failed [`send_trains`] of a GSO train means the socket cannot take trains
/// (`EIO`: its device has no checksum offload; `EINVAL`, `ENOPROTOOPT`, `EOPNOTSUPP`: no
/// UDP GSO in this kernel), rather than a failure of this one train.
pub fn is_gso_refusal(error: &io::Error) -> bool {
    sys::is_gso_refusal(error)
}

/// One line's routing for sockets bound to its interface: a default route through the
/// line's gateway in routing table `table`, a rule `oif INTERFACE lookup TABLE`, and a
/// rule `from ADDRESS lookup TABLE` for each address of the gateway's family the interface
/// has now (IPv6 link-local ones aside), so strict reverse-path filtering accepts the
/// replies. Unbound traffic is not affected. Everything is removed when this drops, in the
/// namespace it was added in, whichever thread drops it.
#[derive(Debug)]
pub struct LineRoute {
    netlink: Netlink,
    route: Route,
    rules: Vec<Rule>,
}

impl LineRoute {
    /// Adds the route and rules for `interface` in the calling thread's namespace. The
    /// table should be one nothing else uses (1 to 252 or above 255); if a step fails,
    /// what was added is removed again. The error is a [`LineError`] naming the interface.
    pub fn add(interface: &str, gateway: IpAddr, table: u32) -> io::Result<LineRoute> {
        LineRoute::add_named(interface, gateway, table).map_err(io::Error::from)
    }

    fn add_named(interface: &str, gateway: IpAddr, table: u32) -> Result<LineRoute, LineError> {
        check_interface_name(interface).map_err(LineError::BadName)?;
        let failed = |what: String| {
            let interface = interface.to_owned();
            move |error| LineError::Io {
                interface,
                what,
                error,
            }
        };
        let mut netlink = Netlink::open().map_err(failed("opening netlink".to_owned()))?;
        let link = netlink
            .link_by_name(interface)
            .map_err(failed("listing interfaces".to_owned()))?
            .ok_or_else(|| LineError::NoSuchInterface {
                interface: interface.to_owned(),
            })?;
        let ipv6 = gateway.is_ipv6();
        let sources: Vec<IpAddr> = netlink
            .addresses()
            .map_err(failed("listing addresses".to_owned()))?
            .into_iter()
            .filter(|a| a.index == link.index && a.address.is_ipv6() == ipv6)
            .map(|a| a.address)
            .filter(|address| !is_ipv6_link_local(*address))
            .collect();
        let route = Route {
            destination: None,
            gateway: Some(gateway),
            interface: link.index,
            ipv6,
            table,
            metric: None,
        };
        if let Err(error) = netlink.new_route(&route) {
            // A client killed with SIGKILL left its route behind: ours replaces it.
            if error.raw_os_error() != Some(libc::EEXIST) {
                return Err(failed(format!(
                    "adding a default route via {gateway} to table {table}"
                ))(error));
            }
            let _ = netlink.delete_route(&route);
            netlink.new_route(&route).map_err(failed(format!(
                "replacing the default route via {gateway} in table {table}"
            )))?;
        }
        // From here on, dropping `line_route` undoes what was added so far.
        let mut line_route = LineRoute {
            netlink,
            route,
            rules: Vec::new(),
        };
        let selectors = std::iter::once(RuleSelector::OutputInterface(interface.to_owned()))
            .chain(sources.into_iter().map(RuleSelector::Source));
        for selector in selectors {
            let rule = Rule {
                ipv6,
                selector,
                table,
                priority: LINE_RULE_PRIORITY,
            };
            let what = match &rule.selector {
                RuleSelector::OutputInterface(name) => format!("adding rule oif {name}"),
                RuleSelector::Source(address) => format!("adding rule from {address}"),
            };
            line_route
                .netlink
                .new_rule(&rule)
                .map_err(failed(format!("{what} lookup {table}")))?;
            line_route.rules.push(rule);
        }
        Ok(line_route)
    }

    /// The route added.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The rules added.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

impl Drop for LineRoute {
    fn drop(&mut self) {
        // Best effort: the interface may be gone already, taking its route with it.
        for rule in self.rules.drain(..).rev() {
            let _ = self.netlink.delete_rule(&rule);
        }
        let _ = self.netlink.delete_route(&self.route);
    }
}

fn is_ipv6_link_local(address: IpAddr) -> bool {
    matches!(address, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use pathlab_os::netns::Netns;
    use pathlab_os::testing::privileged;

    /// The server's address, on its loopback: beyond both lines' gateways, as a real
    /// server is beyond a site's modems.
    const SERVER_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
    const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 100, 0, 0, 0, 1);
    const SERVER_PORT: u16 = 7000;

    /// Line `k` (1 or 2): client interface `c{k}` at 198.18.k.2 and 2001:2:0:k::2, wired
    /// to the server's `s{k}` at 198.18.k.1 and 2001:2:0:k::1, the line's gateway.
    struct Lines {
        client: Netns,
        server: Netns,
    }

    fn line_address(k: u8, family: Family, host: u8) -> IpAddr {
        match family {
            Family::V4 => IpAddr::V4(Ipv4Addr::new(198, 18, k, host)),
            Family::V6 => IpAddr::V6(Ipv6Addr::new(
                0x2001,
                2,
                0,
                u16::from(k),
                0,
                0,
                0,
                u16::from(host),
            )),
        }
    }

    fn server_address(family: Family) -> IpAddr {
        match family {
            Family::V4 => IpAddr::V4(SERVER_V4),
            Family::V6 => IpAddr::V6(SERVER_V6),
        }
    }

    impl Lines {
        /// Two veth pairs between a client and a server namespace. The client's main table
        /// routes everything through line 1, as a site's default route does; strict
        /// reverse-path filtering is on. The server answers ARP only for addresses on the
        /// interface asked (`arp_ignore = 1`), as a modem does, so a client that takes the
        /// server for a neighbour on line 2 gets no answer.
        fn build() -> io::Result<Lines> {
            let lines = Lines {
                client: Netns::new()?,
                server: Netns::new()?,
            };
            lines
                .client
                .set_sysctl("net/ipv4/conf/all/rp_filter", "1")?;
            lines
                .server
                .set_sysctl("net/ipv4/conf/all/arp_ignore", "1")?;
            let server_fd = lines.server.fd();
            lines.client.run(|| -> io::Result<()> {
                let mut netlink = Netlink::open()?;
                for k in 1..=2u8 {
                    let name = format!("c{k}");
                    netlink.create_veth(&name, &format!("s{k}"), Some(server_fd))?;
                    let index = sys::if_nametoindex(&name)?;
                    for family in [Family::V4, Family::V6] {
                        let prefix_len = if family == Family::V4 { 24 } else { 64 };
                        netlink.add_address(index, line_address(k, family, 2), prefix_len, None)?;
                    }
                    netlink.set_up(index, true)?;
                }
                let c1 = sys::if_nametoindex("c1")?;
                netlink.add_route(None, Some(line_address(1, Family::V4, 1)), c1, false)?;
                netlink.add_route(None, Some(line_address(1, Family::V6, 1)), c1, true)?;
                Ok(())
            })??;
            lines.server.run(|| -> io::Result<()> {
                let mut netlink = Netlink::open()?;
                for k in 1..=2u8 {
                    let index = sys::if_nametoindex(&format!("s{k}"))?;
                    netlink.add_address(index, line_address(k, Family::V4, 1), 24, None)?;
                    netlink.add_address(index, line_address(k, Family::V6, 1), 64, None)?;
                    netlink.set_up(index, true)?;
                }
                netlink.add_address(1, IpAddr::V4(SERVER_V4), 32, None)?;
                netlink.add_address(1, IpAddr::V6(SERVER_V6), 128, None)
            })??;
            Ok(lines)
        }

        /// The server's socket, with packet info on.
        fn server_socket(&self, family: Family) -> UdpSocket {
            let address = SocketAddr::new(server_address(family), SERVER_PORT);
            let socket = self
                .server
                .run(|| UdpSocket::bind(address))
                .unwrap()
                .unwrap();
            socket.set_nonblocking(true).unwrap();
            enable_packet_info(&socket).unwrap();
            socket
        }

        fn server_index(&self, name: &str) -> u32 {
            self.server
                .run(|| sys::if_nametoindex(name))
                .unwrap()
                .unwrap()
        }

        /// The line routes of both lines, in tables 101 and 102.
        fn route_lines(&self, family: Family) -> Vec<LineRoute> {
            (1..=2u8)
                .map(|k| {
                    self.client
                        .run(|| {
                            LineRoute::add(
                                &format!("c{k}"),
                                line_address(k, family, 1),
                                100 + u32::from(k),
                            )
                        })
                        .unwrap()
                        .unwrap()
                })
                .collect()
        }
    }

    /// One datagram as the server saw it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Seen {
        payload: Vec<u8>,
        source: SocketAddr,
        interface: Option<u32>,
        destination: Option<IpAddr>,
    }

    /// Everything that reaches `socket` within `wait`, `want` datagrams at most.
    fn receive(socket: &UdpSocket, want: usize, wait: Duration) -> Vec<Seen> {
        receive_as(socket, want, wait, 2048, |d| {
            [Seen {
                payload: d.data.to_vec(),
                source: d.source,
                interface: d.interface,
                destination: d.destination,
            }]
        })
    }

    /// What reaches `socket` within `wait`, read in batches (messages of up to
    /// `message_bytes`), each message as `seen` takes it down: as any number of items (one,
    /// or a GRO message's segments, say), until `want` items are in.
    fn receive_as<T, Items: IntoIterator<Item = T>>(
        socket: &UdpSocket,
        want: usize,
        wait: Duration,
        message_bytes: usize,
        mut seen: impl FnMut(sys::Datagram<'_>) -> Items,
    ) -> Vec<T> {
        let mut batch = RecvBatch::new(MAX_BATCH, message_bytes);
        let mut got = Vec::new();
        let deadline = Instant::now() + wait;
        while got.len() < want && Instant::now() < deadline {
            let mut ready = [false];
            sys::poll_readable(
                &[socket.as_fd()],
                Some(Duration::from_millis(20)),
                &mut ready,
            )
            .unwrap();
            recv_batch(socket, &mut batch).unwrap();
            got.extend(batch.datagrams().flat_map(&mut seen));
        }
        got
    }

    #[test]
    fn gso_trains_arrive_as_their_datagrams_with_and_without_gro() {
        let Some(_guard) = privileged("gso_trains_arrive_as_their_datagrams_with_and_without_gro")
        else {
            return;
        };
        let lines = Lines::build().expect("namespaces build");
        for family in [Family::V4, Family::V6] {
            let _routes = lines.route_lines(family);
            let to = SocketAddr::new(server_address(family), SERVER_PORT);
            // Seven datagrams: three full trains' worth of one size, a short last one, then
            // one alone; each numbered in its first byte.
            let buffers: Vec<Vec<u8>> = [1200, 1200, 1200, 300, 1200, 1200, 80]
                .iter()
                .enumerate()
                .map(|(i, &len)| vec![i as u8; len])
                .collect();
            let datagrams: Vec<&[u8]> = buffers.iter().map(Vec::as_slice).collect();
            let trains = [
                Train {
                    to,
                    first: 0,
                    count: 4,
                    segment_size: Some(1200),
                    from: None,
                },
                Train {
                    to,
                    first: 4,
                    count: 2,
                    segment_size: Some(1200),
                    from: None,
                },
                Train {
                    to,
                    first: 6,
                    count: 1,
                    segment_size: None,
                    from: None,
                },
            ];
            for gro in [false, true] {
                let server = lines.server_socket(family);
                if gro {
                    enable_udp_gro(&server).unwrap();
                }
                let line = lines
                    .client
                    .run(|| line_socket("c1", None, family))
                    .unwrap()
                    .unwrap();
                // Neighbour discovery (and IPv6 duplicate address detection) first.
                let mut warm = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(3);
                while warm.is_empty() && Instant::now() < deadline {
                    line.send_to(b"warm", to).unwrap();
                    warm = receive(&server, 1, Duration::from_millis(100));
                }
                assert!(!warm.is_empty(), "{family:?}: the line works");
                // Warm-ups held while the neighbour was resolved may still come.
                receive(&server, usize::MAX, Duration::from_millis(50));
                assert_eq!(send_trains(&line, &datagrams, &trains).unwrap(), 3);
                let mut messages = 0;
                let wait = Duration::from_secs(2);
                let got = receive_as(&server, buffers.len(), wait, 65_536, |datagram| {
                    messages += 1;
                    datagram.segments().map(<[u8]>::to_vec).collect::<Vec<_>>()
                });
                let summary = |all: &[Vec<u8>]| -> Vec<(usize, u8)> {
                    all.iter().map(|d| (d.len(), d[0])).collect()
                };
                assert_eq!(
                    summary(&got),
                    summary(&buffers),
                    "{family:?}, GRO {gro}: every datagram, in order"
                );
                assert_eq!(got, buffers);
                if !gro {
                    assert_eq!(messages, buffers.len(), "without GRO, one message each");
                }
            }
        }
    }

    #[test]
    fn each_line_reaches_the_same_server_address_through_its_own_interface() {
        let Some(_guard) =
            privileged("each_line_reaches_the_same_server_address_through_its_own_interface")
        else {
            return;
        };
        let lines = Lines::build().expect("namespaces build");
        let s1 = lines.server_index("s1");
        let s2 = lines.server_index("s2");
        for family in [Family::V4, Family::V6] {
            let server = lines.server_socket(family);
            let server_address = SocketAddr::new(server_address(family), SERVER_PORT);
            let open = |interface: &'static str, port: u16| {
                let local = SocketAddr::new(family.unspecified(), port);
                lines
                    .client
                    .run(move || line_socket(interface, Some(local), family))
                    .unwrap()
                    .unwrap()
            };
            let line1 = open("c1", 0);
            // Bound to its interface before its port, line 2 may share line 1's port.
            let line2 = open("c2", line1.local_addr().unwrap().port());

            // Without a route through line 2, line 2 does not reach the server: IPv6 says
            // so, IPv4 asks ARP for the server on line 2's link and loses the datagram.
            let without_route = line2.send_to(b"no route", server_address);
            match family {
                Family::V6 => assert_eq!(
                    without_route.unwrap_err().kind(),
                    io::ErrorKind::NetworkUnreachable
                ),
                Family::V4 => {
                    without_route.unwrap();
                    let seen = receive(&server, 1, Duration::from_millis(300));
                    assert_eq!(seen, [], "line 2 reached the server without a route");
                }
            }

            let routes = lines.route_lines(family);
            line1.connect(server_address).unwrap();
            let on_line1: Vec<&[u8]> = vec![b"line 1"; 5];
            assert_eq!(send_batch(&line1, &on_line1).unwrap(), 5);
            let on_line2: Vec<(SocketAddr, &[u8])> = vec![(server_address, b"line 2"); 5];
            assert_eq!(send_batch_to(&line2, &on_line2).unwrap(), 5);

            let seen = receive(&server, 10, Duration::from_secs(2));
            assert_eq!(seen.len(), 10, "{family:?}: {seen:?}");
            for datagram in &seen {
                let (k, interface) = if datagram.payload == b"line 1" {
                    (1, s1)
                } else {
                    (2, s2)
                };
                assert_eq!(datagram.interface, Some(interface), "{datagram:?}");
                assert_eq!(
                    datagram.source.ip(),
                    line_address(k, family, 2),
                    "{datagram:?}"
                );
                assert_eq!(
                    datagram.destination,
                    Some(server_address.ip()),
                    "{datagram:?}"
                );
            }
            // The replies come back on each line, past strict reverse-path filtering.
            let replies: Vec<(SocketAddr, &[u8])> = seen
                .iter()
                .map(|d| (d.source, d.payload.as_slice()))
                .collect();
            assert_eq!(send_batch_to(&server, &replies).unwrap(), 10);
            for (line, payload) in [(&line1, b"line 1"), (&line2, b"line 2")] {
                let back = receive(line, 5, Duration::from_secs(2));
                assert_eq!(back.len(), 5, "{family:?} replies on {payload:?}: {back:?}");
                assert!(back
                    .iter()
                    .all(|d| d.payload == payload && d.source == server_address));
            }

            // Dropping the routes takes them away again: line 2 cannot reach the server,
            // and the same routes and rules can be added anew (an identical one left
            // behind would make that fail with EEXIST).
            drop(routes);
            if family == Family::V6 {
                assert_eq!(
                    line2.send_to(b"gone", server_address).unwrap_err().kind(),
                    io::ErrorKind::NetworkUnreachable
                );
            }
            drop(lines.route_lines(family));
        }
    }

    /// A host with two addresses of each family, 198.18.0.1 and .2, 2001:2::1 and ::2, on
    /// its loopback: what a multi-homed server looks like to sockets bound to a wildcard.
    fn multihomed_host() -> io::Result<Netns> {
        let host = pathlab_os::testing::netns_with_loopback()?;
        host.run(|| -> io::Result<()> {
            let mut netlink = Netlink::open()?;
            let lo = sys::if_nametoindex("lo")?;
            for family in [Family::V4, Family::V6] {
                let prefix_len = if family == Family::V4 { 32 } else { 128 };
                for host in 1..=2 {
                    netlink.add_address(lo, host_address(family, host), prefix_len, None)?;
                }
            }
            Ok(())
        })??;
        Ok(host)
    }

    /// Address `host` (1 or 2) of [`multihomed_host`].
    fn host_address(family: Family, host: u8) -> IpAddr {
        match family {
            Family::V4 => IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)),
            Family::V6 => IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, u16::from(host))),
        }
    }

    /// How a wildcard-bound server socket is made and which traffic it gets.
    #[derive(Debug, Clone, Copy)]
    enum Wildcard {
        /// `0.0.0.0`, IPv4 traffic.
        V4,
        /// `[::]`, IPv6 traffic.
        V6,
        /// `[::]`, IPv4 traffic: a fresh namespace's `bindv6only` is 0, so `[::]` bound as
        /// `run_server` binds it (std's `UdpSocket::bind`) takes IPv4 too, IPv4-mapped.
        V6TakingV4,
    }

    impl Wildcard {
        /// The socket's family, the traffic's family and the port.
        fn families_and_port(self) -> (Family, Family, u16) {
            match self {
                Wildcard::V4 => (Family::V4, Family::V4, 7100),
                Wildcard::V6 => (Family::V6, Family::V6, 7101),
                Wildcard::V6TakingV4 => (Family::V6, Family::V4, 7102),
            }
        }

        /// An address of the traffic's family as the server's socket shows it.
        fn seen(self, address: IpAddr) -> IpAddr {
            match (self, address) {
                (Wildcard::V6TakingV4, IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
                _ => address,
            }
        }
    }

    /// Sends `datagrams` from `server` as one train to `to` (a GSO train when there are
    /// several, all but the last `segment_size` long), from `from`, and returns the
    /// sources `client` sees them come from.
    fn reply(
        server: &UdpSocket,
        client: &UdpSocket,
        to: SocketAddr,
        from: Option<IpAddr>,
        datagrams: &[&[u8]],
    ) -> Vec<SocketAddr> {
        let train = Train {
            to,
            first: 0,
            count: datagrams.len(),
            segment_size: (datagrams.len() > 1).then(|| datagrams[0].len() as u16),
            from,
        };
        assert_eq!(send_trains(server, datagrams, &[train]).unwrap(), 1);
        let back = receive(client, datagrams.len(), Duration::from_secs(2));
        let payloads: Vec<&[u8]> = back.iter().map(|d| d.payload.as_slice()).collect();
        assert_eq!(
            payloads, datagrams,
            "every datagram of the reply from {from:?}"
        );
        back.iter().map(|d| d.source).collect()
    }

    /// A server socket of `family` bound to the wildcard address and `port` in `host`,
    /// non-blocking, asking for every datagram's packet info, GRO trains and timestamps.
    fn wildcard_server(host: &Netns, family: Family, port: u16) -> UdpSocket {
        let server = host
            .run(|| UdpSocket::bind((family.unspecified(), port)))
            .unwrap()
            .unwrap();
        server.set_nonblocking(true).unwrap();
        // Everything the server's control buffers must hold at once: timestamps, GRO
        // segment sizes and packet info.
        enable_packet_info(&server).unwrap();
        enable_udp_gro(&server).unwrap();
        sys::enable_receive_timestamps(server.as_fd()).unwrap();
        server
    }

    /// What the wildcard test compares of a received message: each segment's length and
    /// first byte, the segment size, whether it has a kernel timestamp, its source, its
    /// arrival interface and its destination address.
    type MessageSeen = (
        Vec<(usize, u8)>,
        Option<usize>,
        bool,
        SocketAddr,
        Option<u32>,
        Option<IpAddr>,
    );

    /// The messages of the first batch that brings `server` any within 2 s (none if
    /// nothing came), as [`MessageSeen`].
    fn first_messages(server: &UdpSocket) -> Vec<MessageSeen> {
        receive_as(server, 1, Duration::from_secs(2), 65_536, |d| {
            [(
                d.segments().map(|s| (s.len(), s[0])).collect::<Vec<_>>(),
                d.segment_size,
                d.kernel_ns.is_some(),
                d.source,
                d.interface,
                d.destination,
            )]
        })
    }

    #[test]
    fn a_wildcard_bound_server_answers_from_the_address_each_datagram_came_to() {
        let test = "a_wildcard_bound_server_answers_from_the_address_each_datagram_came_to";
        let Some(_guard) = privileged(test) else {
            return;
        };
        let host = multihomed_host().expect("namespace builds");
        for wildcard in [Wildcard::V4, Wildcard::V6, Wildcard::V6TakingV4] {
            let (socket_family, family, port) = wildcard.families_and_port();
            let (first, second) = (host_address(family, 1), host_address(family, 2));
            let server = wildcard_server(&host, socket_family, port);
            // The client is the host itself, from its first address; so routing answers
            // it from that address, not from the second one it wrote to.
            let client = host.run(|| UdpSocket::bind((first, 0))).unwrap().unwrap();
            client.set_nonblocking(true).unwrap();
            let client_address = client.local_addr().unwrap();
            let to_second = SocketAddr::new(second, port);

            // A GSO train, so it arrives as one message with a segment size and the packet
            // info both.
            let train = Train {
                to: to_second,
                first: 0,
                count: 3,
                segment_size: Some(1000),
                from: None,
            };
            let (full, short) = (vec![7u8; 1000], vec![8u8; 400]);
            let hello: [&[u8]; 3] = [&full, &full, &short];
            assert_eq!(send_trains(&client, &hello, &[train]).unwrap(), 1);
            let got = first_messages(&server);
            assert_eq!(
                got,
                [(
                    vec![(1000, 7), (1000, 7), (400, 8)],
                    Some(1000),
                    true,
                    SocketAddr::new(wildcard.seen(first), client_address.port()),
                    Some(1),
                    Some(wildcard.seen(second)),
                )],
                "{wildcard:?}: one GRO message with its timestamp, source and packet info"
            );
            let seen_source = got[0].3;
            let local = got[0].5.unwrap();

            // Routing's pick, without `from`: the client's own address, which it did not
            // write to; a connected client socket, a NAT or a stateful firewall drops such
            // an answer.
            let answered_from = |from: Option<IpAddr>, datagrams: &[&[u8]]| {
                reply(&server, &client, seen_source, from, datagrams)
            };
            let one: [&[u8]; 1] = [b"answer"];
            let three: [&[u8]; 3] = [&[1; 900], &[2; 900], &[3; 10]];
            for datagrams in [&one[..], &three[..]] {
                let n = datagrams.len();
                assert_eq!(
                    answered_from(None, datagrams),
                    vec![SocketAddr::new(first, port); n],
                    "{wildcard:?}, {n} datagrams: routing picks the client's own address"
                );
                assert_eq!(
                    answered_from(Some(local), datagrams),
                    vec![to_second; n],
                    "{wildcard:?}, {n} datagrams: sent from the address they came to"
                );
            }
            if let Wildcard::V6TakingV4 = wildcard {
                // The IPv4 address unmapped says the same.
                assert_eq!(answered_from(Some(second), &one), [to_second]);
            }
            // An address the host does not have is refused, not replaced by routing's pick.
            let elsewhere = host_address(family, 3);
            let train = Train {
                to: seen_source,
                first: 0,
                count: 1,
                segment_size: None,
                from: Some(elsewhere),
            };
            let error = send_trains(&server, &one, &[train]).unwrap_err();
            // Linux 6.18 says ENETUNREACH for IPv4 (IPv4-mapped too), EINVAL for IPv6.
            assert!(
                matches!(
                    error.kind(),
                    io::ErrorKind::InvalidInput | io::ErrorKind::NetworkUnreachable
                ),
                "{wildcard:?}: {error}"
            );
        }
    }

    #[test]
    fn bad_interfaces_are_refused_naming_them() {
        // Looking an interface up changes nothing: this runs as any user, in this
        // namespace.
        let error = line_socket("pl-absent-7q", None, Family::V4).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            error.to_string(),
            "line 'pl-absent-7q': no interface of that name in this network namespace"
        );
        assert!(matches!(
            error.get_ref().and_then(|e| e.downcast_ref::<LineError>()),
            Some(LineError::NoSuchInterface { interface }) if interface == "pl-absent-7q"
        ));
        let error = line_socket("pl-much-too-long-name", None, Family::V6).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(
            error
                .to_string()
                .contains("'pl-much-too-long-name' is 21 bytes long"),
            "{error}"
        );
        let local: SocketAddr = "198.18.1.2:0".parse().unwrap();
        let error = line_socket("lo", Some(local), Family::V6).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            error.to_string(),
            "line 'lo': local address 198.18.1.2:0 is not IPv6 like the remote side"
        );
        let error = LineRoute::add("pl-absent-7q", "198.18.1.1".parse().unwrap(), 101).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(error.to_string().contains("'pl-absent-7q'"), "{error}");
    }

    #[test]
    fn line_buffers_go_beyond_the_host_limits_with_cap_net_admin_and_fall_back_without() {
        let test =
            "line_buffers_go_beyond_the_host_limits_with_cap_net_admin_and_fall_back_without";
        let Some(_guard) = privileged(test) else {
            return;
        };
        let netns = Netns::new().expect("namespace");
        let socket = netns
            .run(|| line_socket("lo", None, Family::V4))
            .unwrap()
            .unwrap();
        assert_eq!(
            buffer_sizes(&socket).unwrap(),
            (2 * LINE_BUFFER_BYTES, 2 * LINE_BUFFER_BYTES)
        );
        assert_eq!(
            socket.recv(&mut [0u8; 8]).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        let limit = |name: &str| -> usize {
            std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let unprivileged = netns
            .run(|| {
                sys::drop_cap_net_admin_in_this_thread().expect("capset");
                line_socket("lo", None, Family::V6)
            })
            .unwrap()
            .expect("without CAP_NET_ADMIN the buffers fall back to the plain options");
        assert_eq!(
            buffer_sizes(&unprivileged).unwrap(),
            (
                2 * LINE_BUFFER_BYTES.min(limit("wmem_max")),
                2 * LINE_BUFFER_BYTES.min(limit("rmem_max"))
            )
        );
    }
}

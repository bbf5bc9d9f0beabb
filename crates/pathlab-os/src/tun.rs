//! TUN devices: an interface whose packets a program reads and writes, bare IP datagrams
//! one per `read`/`write`.
//!
//! A [`Tun`] is the tunnel end of `pathlab bond`: what the host routes into the device is
//! read here and carried over the lines; what arrives over the lines is written here and
//! the host receives it as if from a wire. The device is created with `IFF_TUN |
//! IFF_NO_PI` (no packet-info prefix: byte 0 is the IP version nibble), one queue
//! (no `IFF_MULTI_QUEUE`) and `IFF_TUN_EXCL` (an interface of the same name is an error,
//! never silently attached to), set to its MTU and brought up. It is not persistent: the
//! kernel deletes it, with its addresses and routes, when the descriptor closes, that is
//! when the [`Tun`] drops or the process dies.
//!
//! Configuration goes through a netlink socket opened with the device, so it reaches the
//! device's network namespace whichever thread calls later. This module does not choose
//! addresses or routes, and does not fragment or reassemble: a packet longer than the
//! MTU is the caller's to avoid. With [`Tun::create_offloaded`] the host hands the device
//! TCP super-packets (TSO, as to a NIC) and takes them back (as from GRO): this module cuts
//! and joins them, so its caller still sees packets of at most the MTU.
//!
//! [`Tun::create_tap`] makes a TAP device instead (`IFF_TAP | IFF_NO_PI`): the same
//! descriptor, reads and writes, but each carries a whole Ethernet frame, VLAN tags in
//! its bytes (the kernel puts a tag it kept aside back into the frame it hands the reader),
//! up to the MTU plus the Ethernet header and tags. A TAP is typically a bridge port
//! ([`Tun::join_bridge`]). It has no offloads here: frames go one per read and write.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::netlink::{check_interface_name, BadInterfaceName, Netlink};
use crate::sys;
use pathlab_core::wire::offload::{self, Framing, VnetHeader};

/// The smallest MTU a TUN device takes (IPv4's minimum datagram, RFC 791).
pub const MIN_TUN_MTU: u32 = 68;
/// The largest MTU a TUN device takes.
pub const MAX_TUN_MTU: u32 = 65_535;
/// The smallest MTU that keeps IPv6 on the device (RFC 8200 section 5); below it the
/// kernel takes IPv6 off the interface.
pub const MIN_IPV6_MTU: u32 = 1280;

/// Why a TUN device cannot be created or configured. Returned inside an [`io::Error`]
/// (of the kind given per variant); `error.get_ref()` and `downcast_ref::<TunError>()`
/// recover it.
#[derive(Debug, thiserror::Error)]
pub enum TunError {
    /// The name cannot be an interface name (`InvalidInput`).
    #[error("cannot create TUN device: {0}")]
    BadName(BadInterfaceName),
    /// The MTU is outside what a TUN device takes (`InvalidInput`).
    #[error(
        "cannot create TUN device '{name}' with MTU {mtu}: a TUN device takes 68 to 65535 bytes"
    )]
    BadMtu {
        /// The device.
        name: String,
        /// The MTU asked for.
        mtu: u32,
    },
    /// `/dev/net/tun` is missing: no TUN driver in this kernel or container (`NotFound`).
    #[error(
        "cannot create TUN device '{name}': /dev/net/tun does not exist or has no driver \
         (load the module with `modprobe tun`, or give the container the device)"
    )]
    NoTunDriver {
        /// The device.
        name: String,
    },
    /// Creating a device needs CAP_NET_ADMIN (`PermissionDenied`).
    #[error("cannot create TUN device '{name}': it needs CAP_NET_ADMIN (run as root)")]
    NeedsNetAdmin {
        /// The device.
        name: String,
    },
    /// An interface of that name exists already (`AlreadyExists`).
    #[error("cannot create TUN device '{name}': an interface with that name already exists")]
    NameTaken {
        /// The device.
        name: String,
    },
    /// A prefix length beyond the address's bits (`InvalidInput`).
    #[error("TUN device '{name}': prefix length {prefix_len} is too long for {address}")]
    BadPrefix {
        /// The device.
        name: String,
        /// The address or destination given.
        address: IpAddr,
        /// The prefix length given.
        prefix_len: u8,
    },
    /// A route's destination has bits set past its prefix length (`InvalidInput`).
    #[error(
        "TUN device '{name}': route destination {address}/{prefix_len} has host bits set \
         (did you mean {network}/{prefix_len}?)"
    )]
    HostBitsSet {
        /// The device.
        name: String,
        /// The destination given.
        address: IpAddr,
        /// Its prefix length.
        prefix_len: u8,
        /// The destination with the host bits cleared.
        network: IpAddr,
    },
    /// A system call failed (the error's own kind).
    #[error("TUN device '{name}': {what}: {error}")]
    Io {
        /// The device.
        name: String,
        /// What was being done, naming the value involved.
        what: String,
        /// The error.
        error: io::Error,
    },
}

impl From<TunError> for io::Error {
    fn from(error: TunError) -> io::Error {
        let kind = match &error {
            TunError::BadName(_)
            | TunError::BadMtu { .. }
            | TunError::BadPrefix { .. }
            | TunError::HostBitsSet { .. } => io::ErrorKind::InvalidInput,
            TunError::NoTunDriver { .. } => io::ErrorKind::NotFound,
            TunError::NeedsNetAdmin { .. } => io::ErrorKind::PermissionDenied,
            TunError::NameTaken { .. } => io::ErrorKind::AlreadyExists,
            TunError::Io { error, .. } => error.kind(),
        };
        io::Error::new(kind, error)
    }
}

/// A TUN device this process created; deleted by the kernel when this drops.
#[derive(Debug)]
pub struct Tun {
    name: String,
    index: u32,
    mtu: u32,
    fd: OwnedFd,
    netlink: Netlink,
    /// Created with [`Tun::create_offloaded`]: reads and writes carry a vnet header.
    offloaded: bool,
    /// Created with [`Tun::create_tap`]: Ethernet frames, not IP packets.
    tap: bool,
}

/// Writes one IP packet into a TUN device's descriptor (after an empty vnet header when the
/// device is offloaded); returns the packet bytes written.
fn send_on(fd: BorrowedFd<'_>, offloaded: bool, packet: &[u8]) -> io::Result<usize> {
    if offloaded {
        let written = sys::write_two(fd, &[0; sys::VNET_HDR_LEN], packet)?;
        return Ok(written.saturating_sub(sys::VNET_HDR_LEN));
    }
    sys::write(fd, packet)
}

/// The sending side of a [`Tun`], for another thread (a duplicate of its descriptor).
#[derive(Debug)]
pub struct TunSender {
    fd: OwnedFd,
    offloaded: bool,
}

impl TunSender {
    /// As [`Tun::send`].
    pub fn send(&self, packet: &[u8]) -> io::Result<usize> {
        send_on(self.fd.as_fd(), self.offloaded, packet)
    }
}

/// The longest read of an offloaded [`Tun`]: a vnet header and a 64 KB super-packet.
pub const OFFLOADED_READ_BYTES: usize = sys::VNET_HDR_LEN + 65_535;

impl Tun {
    /// Creates TUN device `name` in the calling thread's network namespace, with a
    /// non-blocking descriptor, MTU `mtu`, and the link up. A `%d` in `name` lets the
    /// kernel number it ([`Tun::name`] says what it chose). The error is a [`TunError`]
    /// naming the device.
    pub fn create(name: &str, mtu: u32) -> io::Result<Tun> {
        Tun::create_named(name, mtu, false, false).map_err(io::Error::from)
    }

    /// A TAP device `name`, as [`Tun::create`] makes a TUN device: each read and write is
    /// one Ethernet frame (VLAN tags included) of up to `mtu` bytes of payload. No offloads.
    pub fn create_tap(name: &str, mtu: u32) -> io::Result<Tun> {
        Tun::create_named(name, mtu, true, false).map_err(io::Error::from)
    }

    /// [`Tun::create`], with offloads: the host may hand the device TCP super-packets of up
    /// to 64 KB and leave checksums to fill, as to a NIC with TSO and checksum offload
    /// (`IFF_VNET_HDR`, `TUNSETOFFLOAD`), so its TCP stack works per 64 KB rather than per
    /// packet; [`Tun::recv_packets`] cuts them back into packets of at most the MTU, and
    /// [`Tun::send_packets`] writes runs of one TCP flow's segments as one super-packet
    /// the host takes in one pass (as GRO would have made them).
    pub fn create_offloaded(name: &str, mtu: u32) -> io::Result<Tun> {
        Tun::create_named(name, mtu, false, true).map_err(io::Error::from)
    }

    fn create_named(name: &str, mtu: u32, tap: bool, offloaded: bool) -> Result<Tun, TunError> {
        check_interface_name(name).map_err(TunError::BadName)?;
        if !(MIN_TUN_MTU..=MAX_TUN_MTU).contains(&mtu) {
            return Err(TunError::BadMtu {
                name: name.to_owned(),
                mtu,
            });
        }
        let (fd, name) = sys::tun_create(name, tap, offloaded).map_err(|error| {
            let name = name.to_owned();
            match error.raw_os_error() {
                Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => TunError::NoTunDriver { name },
                Some(libc::EPERM | libc::EACCES) => TunError::NeedsNetAdmin { name },
                Some(libc::EBUSY | libc::EEXIST) => TunError::NameTaken { name },
                _ => TunError::Io {
                    name,
                    what: "opening /dev/net/tun and creating the device".to_owned(),
                    error,
                },
            }
        })?;
        let failed = |what: String| {
            let name = name.clone();
            move |error| TunError::Io { name, what, error }
        };
        sys::set_nonblocking(fd.as_fd()).map_err(failed("making it non-blocking".to_owned()))?;
        if offloaded {
            // A kernel without TSO on TUN still takes the vnet header: reads then carry
            // plain packets, and writes may still be super-packets.
            let _ = sys::tun_set_offload(fd.as_fd());
        }
        let index = sys::if_nametoindex(&name).map_err(failed("finding its index".to_owned()))?;
        let mut netlink = Netlink::open().map_err(failed("opening netlink".to_owned()))?;
        netlink
            .set_mtu(index, mtu)
            .map_err(failed(format!("setting its MTU to {mtu}")))?;
        netlink
            .set_up(index, true)
            .map_err(failed("bringing it up".to_owned()))?;
        Ok(Tun {
            name,
            index,
            mtu,
            fd,
            netlink,
            offloaded,
            tap,
        })
    }

    /// Whether it is a TAP device (Ethernet frames) rather than a TUN device (IP packets).
    pub fn is_tap(&self) -> bool {
        self.tap
    }

    /// Makes the device a port of the existing bridge `bridge` (a TAP carrying a LAN's
    /// frames to the far end of a tunnel).
    pub fn join_bridge(&mut self, bridge: &str) -> io::Result<()> {
        let failed = |what: String| {
            let name = self.name.clone();
            move |error| io::Error::from(TunError::Io { name, what, error })
        };
        let master = self
            .netlink
            .link_by_name(bridge)
            .map_err(failed(format!("finding bridge '{bridge}'")))?
            .ok_or_else(|| {
                failed(format!("finding bridge '{bridge}'"))(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no interface of that name",
                ))
            })?;
        self.netlink
            .set_master(self.index, master.index)
            .map_err(failed(format!("joining bridge '{bridge}'")))
    }

    /// The device's name (the kernel's choice when the name asked for had a `%d`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device's interface index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The MTU it was created with, bytes: the longest packet [`Tun::send`] may write and
    /// [`Tun::recv`] returns.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Sets the device's MTU (68 to 65535 bytes).
    pub fn set_mtu(&mut self, mtu: u32) -> io::Result<()> {
        if !(MIN_TUN_MTU..=MAX_TUN_MTU).contains(&mtu) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a TUN device takes an MTU of {MIN_TUN_MTU} to {MAX_TUN_MTU} bytes, not {mtu}"
                ),
            ));
        }
        self.netlink.set_mtu(self.index, mtu)?;
        self.mtu = mtu;
        Ok(())
    }

    /// Reads one packet the host sent into the device (an IPv4 or IPv6 datagram, no
    /// prefix); `WouldBlock` when none is waiting. A buffer shorter than the packet gets
    /// its start and the rest is lost: give at least [`Tun::mtu`] bytes.
    pub fn recv(&self, buffer: &mut [u8]) -> io::Result<usize> {
        debug_assert!(
            !self.offloaded,
            "an offloaded device is read with recv_packets"
        );
        sys::read(self.fd.as_fd(), buffer)
    }

    /// Writes one packet (an IPv4 or IPv6 datagram, no prefix) for the host to receive
    /// from the device. The kernel checks it as it would a packet from a wire: a bad
    /// header or checksum is dropped there, not reported here; a first nibble other than
    /// 4 or 6 is `InvalidInput`.
    pub fn send(&self, packet: &[u8]) -> io::Result<usize> {
        send_on(self.fd.as_fd(), self.offloaded, packet)
    }

    /// A handle that writes packets into the device from another thread.
    pub fn sender(&self) -> io::Result<TunSender> {
        Ok(TunSender {
            fd: self.fd.try_clone()?,
            offloaded: self.offloaded,
        })
    }

    /// Reads what the host sent into the device, one read, and hands `emit` the IP packets
    /// in it, each at most the MTU: a super-packet of an offloaded device cut into its
    /// segments, its checksums completed. Returns how many; `WouldBlock` when nothing waits.
    /// `buffer` takes the read: [`OFFLOADED_READ_BYTES`] for an offloaded device, the MTU
    /// otherwise. A super-packet that cannot be cut (offload metadata that does not match
    /// the packet) is dropped, as a NIC would: 0. The packets are written into buffers taken
    /// from `pool`.
    pub fn recv_packets(
        &self,
        buffer: &mut [u8],
        pool: &mut pathlab_core::buffers::BufferPool,
        mut emit: impl FnMut(Vec<u8>),
    ) -> io::Result<usize> {
        let len = sys::read(self.fd.as_fd(), buffer)?;
        if !self.offloaded {
            emit(pool.copy_of(&buffer[..len]));
            return Ok(1);
        }
        let Some(header) = buffer.get(..sys::VNET_HDR_LEN) else {
            return Ok(0);
        };
        let vnet = VnetHeader::parse(header.try_into().expect("10 bytes"));
        let packet = &buffer[sys::VNET_HDR_LEN..len];
        Ok(offload::to_wire_packets(packet, Framing::Ip, &vnet, pool, &mut emit).unwrap_or(0))
    }

    /// Writes `packets` (IPv4 or IPv6 datagrams) for the host to receive, as
    /// [`Tun::send`] does each; an offloaded device takes each run of one TCP flow's
    /// consecutive segments as one super-packet (one write, one pass through the host's
    /// stack). A packet the device refuses (a full queue) is dropped, as by a NIC.
    pub fn send_packets(&self, packets: &[&[u8]]) {
        if !self.offloaded {
            for packet in packets {
                let _ = self.send(packet);
            }
            return;
        }
        let mut rest = packets;
        while !rest.is_empty() {
            let run = offload::coalescable_run_framed(rest, Framing::Ip).max(1);
            if run == 1 {
                let _ = self.send(rest[0]);
            } else {
                let (packet, vnet) = offload::build_gso_framed(&rest[..run], Framing::Ip);
                let _ = sys::write_two(self.fd.as_fd(), &vnet.to_bytes(), &packet);
            }
            rest = &rest[run..];
        }
    }

    /// Adds `address`/`prefix_len` to the device, which also routes that prefix into it
    /// (IPv6 without duplicate address detection, usable at once; IPv6 needs an MTU of at
    /// least [`MIN_IPV6_MTU`]).
    pub fn add_address(&mut self, address: IpAddr, prefix_len: u8) -> io::Result<()> {
        self.check_prefix(address, prefix_len)?;
        self.netlink
            .add_address(self.index, address, prefix_len, None)
            .map_err(|error| {
                io::Error::from(TunError::Io {
                    name: self.name.clone(),
                    what: format!("adding address {address}/{prefix_len}"),
                    error,
                })
            })
    }

    /// Routes `destination`/`prefix_len` into the device (a direct route, no gateway: the
    /// device is point-to-point), in the main table.
    pub fn add_route(&mut self, destination: IpAddr, prefix_len: u8) -> io::Result<()> {
        self.check_prefix(destination, prefix_len)?;
        let network = network_of(destination, prefix_len);
        if network != destination {
            return Err(TunError::HostBitsSet {
                name: self.name.clone(),
                address: destination,
                prefix_len,
                network,
            }
            .into());
        }
        self.netlink
            .add_route(
                Some((destination, prefix_len)),
                None,
                self.index,
                destination.is_ipv6(),
            )
            .map_err(|error| {
                io::Error::from(TunError::Io {
                    name: self.name.clone(),
                    what: format!("adding a route to {destination}/{prefix_len}"),
                    error,
                })
            })
    }

    fn check_prefix(&self, address: IpAddr, prefix_len: u8) -> Result<(), TunError> {
        let bits = if address.is_ipv6() { 128 } else { 32 };
        if prefix_len > bits {
            return Err(TunError::BadPrefix {
                name: self.name.clone(),
                address,
                prefix_len,
            });
        }
        Ok(())
    }
}

/// `address` with every bit past `prefix_len` cleared (`prefix_len` within the family's
/// bits).
fn network_of(address: IpAddr, prefix_len: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix_len))
                .unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix_len))
                .unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::netns::Netns;
    use crate::testing::privileged;
    use pathlab_core::wire;
    use pathlab_core::wire::ipv4::Ipv4Packet;
    use pathlab_core::wire::ipv6::{self, Ipv6Packet};
    use pathlab_core::wire::udp::{self, UdpDatagram};

    /// A UDP datagram from `source` to `destination` in an IPv4 or IPv6 packet, with
    /// correct checksums.
    fn udp_packet(source: SocketAddr, destination: SocketAddr, payload: &[u8]) -> Vec<u8> {
        udp::ip_packet(source, destination, payload)
            .unwrap_or_else(|| panic!("{source} and {destination} are of different families"))
    }

    /// A UDP datagram read from the device: its IP version, source, destination and
    /// payload, if the packet is UDP with a correct checksum.
    fn parse_udp(packet: &[u8]) -> Option<(u8, SocketAddr, SocketAddr, &[u8])> {
        let (version, source, destination, segment): (u8, IpAddr, IpAddr, &[u8]) =
            match wire::ip_version(packet)? {
                4 => {
                    let ip = Ipv4Packet::new_checked(packet).ok()?;
                    let total = usize::from(ip.total_len());
                    if ip.protocol() != wire::PROTOCOL_UDP || total > packet.len() {
                        return None;
                    }
                    let segment = &packet[ip.header_len()..total];
                    (4, ip.source().into(), ip.destination().into(), segment)
                }
                _ => {
                    let ip = Ipv6Packet::new_checked(packet).ok()?;
                    let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
                    if ip.next_header() != wire::PROTOCOL_UDP || end > packet.len() {
                        return None;
                    }
                    let segment = &packet[ipv6::HEADER_LEN..end];
                    (6, ip.source().into(), ip.destination().into(), segment)
                }
            };
        let datagram = UdpDatagram::new_checked(segment).ok()?;
        if udp::checksum_of(source, destination, segment) != 0 {
            return None;
        }
        Some((
            version,
            SocketAddr::new(source, datagram.source_port()),
            SocketAddr::new(destination, datagram.destination_port()),
            datagram.into_payload(),
        ))
    }

    /// Reads packets from the device until a UDP datagram to `destination` comes (the
    /// kernel also sends its own: IPv6 router solicitations, MLD reports), for 2 s at most.
    fn read_udp_to(tun: &Tun, destination: SocketAddr) -> (u8, SocketAddr, Vec<u8>) {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut buffer = vec![0u8; tun.mtu() as usize];
        while Instant::now() < deadline {
            let mut ready = [false];
            sys::poll_readable(&[tun.as_fd()], Some(Duration::from_millis(50)), &mut ready)
                .expect("poll");
            match tun.recv(&mut buffer) {
                Ok(n) => {
                    if let Some((version, source, to, payload)) = parse_udp(&buffer[..n]) {
                        if to == destination {
                            return (version, source, payload.to_vec());
                        }
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => panic!("reading {}: {error}", tun.name()),
            }
        }
        panic!(
            "no UDP datagram to {destination} came out of {}",
            tun.name()
        );
    }

    const TUN_NAME: &str = "pl-tun0";
    const TUN_MTU: u32 = 1400;
    const TUN_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);
    const PEER_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
    const TUN_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 7, 0, 0, 0, 1);
    const PEER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 7, 0, 0, 0, 2);

    /// A TUN device in a fresh namespace, with 198.18.7.1/24 and 2001:2:0:7::1/64.
    fn tun_in(netns: &Netns) -> Tun {
        netns
            .run(|| -> io::Result<Tun> {
                let mut tun = Tun::create(TUN_NAME, TUN_MTU)?;
                tun.add_address(IpAddr::V4(TUN_V4), 24)?;
                tun.add_address(IpAddr::V6(TUN_V6), 64)?;
                Ok(tun)
            })
            .expect("enter the namespace")
            .expect("TUN device is created and configured")
    }

    #[test]
    fn tun_carries_udp_both_ways_over_ipv4_and_ipv6() {
        let Some(_guard) = privileged("tun_carries_udp_both_ways_over_ipv4_and_ipv6") else {
            return;
        };
        let netns = Netns::new().expect("namespace");
        let tun = tun_in(&netns);
        for (local, peer) in [
            (IpAddr::V4(TUN_V4), IpAddr::V4(PEER_V4)),
            (IpAddr::V6(TUN_V6), IpAddr::V6(PEER_V6)),
        ] {
            let expected_version = if local.is_ipv4() { 4 } else { 6 };
            // Out of the host, into the device: the exact datagram the socket sent.
            let socket = netns
                .run(|| UdpSocket::bind(SocketAddr::new(local, 0)))
                .unwrap()
                .unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let destination = SocketAddr::new(peer, 4000);
            socket
                .send_to(b"out through the tunnel", destination)
                .unwrap();
            let (version, source, payload) = read_udp_to(&tun, destination);
            assert_eq!(version, expected_version);
            assert_eq!(source, socket.local_addr().unwrap());
            assert_eq!(payload, b"out through the tunnel");
            // Into the host from the device: a datagram we built reaches the socket.
            let from = SocketAddr::new(peer, 4001);
            let packet = udp_packet(from, socket.local_addr().unwrap(), b"in from the tunnel");
            assert_eq!(tun.send(&packet).unwrap(), packet.len());
            let mut buffer = [0u8; 64];
            let (n, sender) = socket.recv_from(&mut buffer).expect("the datagram arrives");
            assert_eq!(&buffer[..n], b"in from the tunnel");
            assert_eq!(sender, from);
        }
    }

    #[test]
    fn tun_is_up_with_its_mtu_and_vanishes_when_dropped() {
        let Some(_guard) = privileged("tun_is_up_with_its_mtu_and_vanishes_when_dropped") else {
            return;
        };
        let netns = Netns::new().expect("namespace");
        let link = || {
            netns
                .run(|| Netlink::open()?.link_by_name(TUN_NAME))
                .unwrap()
                .unwrap()
        };
        let tun = tun_in(&netns);
        let shown = link().expect("the device is listed");
        assert_eq!(shown.index, tun.index());
        assert_eq!(shown.mtu, TUN_MTU);
        assert!(shown.up);
        assert_eq!(shown.kind.as_deref(), Some("tun"));
        // Non-blocking: once what the kernel sent of its own is read, reading says so.
        let mut buffer = vec![0u8; TUN_MTU as usize];
        let empty = (0..100).find_map(|_| tun.recv(&mut buffer).err());
        assert_eq!(empty.map(|e| e.kind()), Some(io::ErrorKind::WouldBlock));
        drop(tun);
        // No waiting: the kernel unregisters a non-persistent device as its last
        // descriptor closes.
        assert_eq!(link(), None, "the device outlived its descriptor");
    }

    #[test]
    fn a_tap_carries_ethernet_frames_joins_a_bridge_and_vanishes_when_dropped() {
        let Some(_guard) = privileged("a_tap_carries_ethernet_frames_joins_a_bridge") else {
            return;
        };
        let netns = Netns::new().expect("namespace");
        let (mut tap, shown) = netns
            .run(|| {
                let mut netlink = Netlink::open().unwrap();
                netlink.create_bridge("pl-br").unwrap();
                let mut tap = Tun::create_tap(TUN_NAME, 1408).unwrap();
                tap.join_bridge("pl-br").unwrap();
                let shown = netlink.link_by_name(TUN_NAME).unwrap().unwrap();
                (tap, shown)
            })
            .unwrap();
        assert!(tap.is_tap());
        assert_eq!((shown.mtu, shown.up), (1408, true));
        assert_eq!(shown.kind.as_deref(), Some("tun"));
        let missing = tap.join_bridge("pl-none").unwrap_err();
        assert!(missing.to_string().contains("pl-none"), "{missing}");
        // A write is one whole frame (here an ARP frame behind an 802.1Q tag), taken as
        // from a wire.
        let mut frame = vec![0xff; 6];
        frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x81, 0x00, 0x00, 0x0a, 0x08, 0x06]);
        frame.extend_from_slice(&[0; 28]);
        assert_eq!(tap.send(&frame).unwrap(), frame.len());
        drop(tap);
        let gone = netns
            .run(|| Netlink::open()?.link_by_name(TUN_NAME))
            .unwrap()
            .unwrap();
        assert_eq!(gone, None, "the device outlived its descriptor");
    }

    #[test]
    fn bad_names_and_mtus_are_refused_naming_the_input() {
        let error = Tun::create("pl-a-name-too-long", 1500).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(
            matches!(
                error.get_ref().and_then(|e| e.downcast_ref::<TunError>()),
                Some(TunError::BadName(BadInterfaceName::TooLong(name))) if name == "pl-a-name-too-long"
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "cannot create TUN device: interface name 'pl-a-name-too-long' is 18 bytes long; \
             Linux allows at most 15"
        );
        for bad in ["", "a/b", "a b", ".."] {
            let error = Tun::create(bad, 1500).unwrap_err();
            assert_eq!(
                error.kind(),
                io::ErrorKind::InvalidInput,
                "{bad:?}: {error}"
            );
        }
        let error = Tun::create("pl-tun0", 20).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(
            error.to_string().contains("'pl-tun0' with MTU 20"),
            "{error}"
        );
    }

    #[test]
    fn taken_names_and_missing_privileges_are_refused_naming_the_device() {
        let Some(_guard) =
            privileged("taken_names_and_missing_privileges_are_refused_naming_the_device")
        else {
            return;
        };
        let netns = Netns::new().expect("namespace");
        let _tun = tun_in(&netns);
        for taken in [TUN_NAME, "lo"] {
            let error = netns.run(|| Tun::create(taken, 1500)).unwrap().unwrap_err();
            assert_eq!(
                error.kind(),
                io::ErrorKind::AlreadyExists,
                "{taken}: {error}"
            );
            assert_eq!(
                error.to_string(),
                format!(
                    "cannot create TUN device '{taken}': an interface with that name already exists"
                )
            );
        }
        // Capabilities are per thread: this one drops CAP_NET_ADMIN and ends.
        let error = netns
            .run(|| {
                sys::drop_cap_net_admin_in_this_thread().expect("capset");
                Tun::create("pl-tun1", 1500)
            })
            .unwrap()
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
        assert_eq!(
            error.to_string(),
            "cannot create TUN device 'pl-tun1': it needs CAP_NET_ADMIN (run as root)"
        );
    }

    #[test]
    fn routes_into_the_device_need_a_network_address() {
        let Some(_guard) = privileged("routes_into_the_device_need_a_network_address") else {
            return;
        };
        let netns = Netns::new().expect("namespace");
        let mut tun = tun_in(&netns);
        let error = tun
            .add_route("198.18.9.1".parse().unwrap(), 24)
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(
            error.to_string().contains("did you mean 198.18.9.0/24"),
            "{error}"
        );
        let error = tun
            .add_route("198.18.9.0".parse().unwrap(), 33)
            .unwrap_err();
        assert!(error.to_string().contains("prefix length 33"), "{error}");
        tun.add_route("198.18.9.0".parse().unwrap(), 24).unwrap();
        tun.add_route("2001:2:0:9::".parse().unwrap(), 64).unwrap();
        // A datagram to the routed prefix comes out of the device.
        let socket = netns
            .run(|| UdpSocket::bind(SocketAddr::new(IpAddr::V4(TUN_V4), 0)))
            .unwrap()
            .unwrap();
        let destination: SocketAddr = "198.18.9.77:4000".parse().unwrap();
        socket.send_to(b"routed", destination).unwrap();
        let (_, _, payload) = read_udp_to(&tun, destination);
        assert_eq!(payload, b"routed");
    }
}

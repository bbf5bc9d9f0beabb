//! The h1 - r - h2 line that tests and benchmarks put the emulator (or the kernel) in.
//!
//! Three fresh namespaces; h1's `eth0` is wired to r's `r-h1`, h2's `eth0` to r's `r-h2`.
//! h1 and h2 share one subnet from the benchmarking ranges (198.18.0.0/24 and 2001:2::/64,
//! RFC 2544 and RFC 5180), so whatever joins r's two ports at layer 2 connects them: a
//! pathlab emulator, or a kernel bridge to compare against. Dropping the [`Line`] destroys
//! the namespaces and every interface in them; a killed process leaves nothing either.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::netlink::{LinkInfo, Netlink};
use crate::netns::Netns;
use crate::tcp_socket::{self, BufferLimit, TcpSocketOptions};

/// What joins r's two ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Middle {
    /// Nothing yet: the ports are up, without addresses or IPv6, for an emulator to open.
    Emulator,
    /// A kernel bridge `br0` over both ports (the reference to compare against).
    KernelBridge,
}

/// Three namespaces in a line.
#[derive(Debug)]
pub struct Line {
    /// The left host.
    pub h1: Netns,
    /// The middle box.
    pub r: Netns,
    /// The right host.
    pub h2: Netns,
}

/// r's port towards h1.
pub const R_PORT_H1: &str = "r-h1";
/// r's port towards h2.
pub const R_PORT_H2: &str = "r-h2";
/// The hosts' interface name.
pub const HOST_PORT: &str = "eth0";

/// h1's IPv4 address.
pub const H1_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// h2's IPv4 address.
pub const H2_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// h1's IPv6 address.
pub const H1_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 1);
/// h2's IPv6 address.
pub const H2_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 2);

fn link(netlink: &mut Netlink, name: &str) -> io::Result<LinkInfo> {
    netlink
        .link_by_name(name)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface {name}")))
}

impl Line {
    /// Builds the line. With `static_neighbors`, h1 and h2 know each other's MAC
    /// addresses from the start (no ARP or neighbour discovery crosses r, so a lossy link
    /// cannot lose them).
    pub fn build(middle: Middle, static_neighbors: bool) -> io::Result<Line> {
        let line = Line {
            h1: Netns::new()?,
            r: Netns::new()?,
            h2: Netns::new()?,
        };
        // r sends nothing of its own on the ports: no IPv6 (router solicitations, MLD).
        line.r.set_sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
        line.r
            .set_sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
        for (host, port) in [(&line.h1, R_PORT_H1), (&line.h2, R_PORT_H2)] {
            let r_fd = line.r.fd();
            host.run(|| Netlink::open()?.create_veth(HOST_PORT, port, Some(r_fd)))??;
        }
        line.r.run(|| -> io::Result<()> {
            let mut netlink = Netlink::open()?;
            let ports = [
                link(&mut netlink, R_PORT_H1)?,
                link(&mut netlink, R_PORT_H2)?,
            ];
            if middle == Middle::KernelBridge {
                netlink.create_bridge("br0")?;
                let bridge = link(&mut netlink, "br0")?;
                for port in &ports {
                    netlink.set_master(port.index, bridge.index)?;
                }
                netlink.set_up(bridge.index, true)?;
            }
            for port in &ports {
                netlink.set_up(port.index, true)?;
            }
            Ok(())
        })??;
        let mut macs = Vec::new();
        for (host, v4, v6) in [(&line.h1, H1_V4, H1_V6), (&line.h2, H2_V4, H2_V6)] {
            let mac = host.run(|| -> io::Result<Vec<u8>> {
                let mut netlink = Netlink::open()?;
                let eth = link(&mut netlink, HOST_PORT)?;
                netlink.add_address(eth.index, IpAddr::V4(v4), 24, None)?;
                netlink.add_address(eth.index, IpAddr::V6(v6), 64, None)?;
                netlink.set_up(eth.index, true)?;
                Ok(eth.mac)
            })??;
            macs.push(mac);
        }
        if static_neighbors {
            for (host, peer_mac, peer_v4, peer_v6) in [
                (&line.h1, &macs[1], H2_V4, H2_V6),
                (&line.h2, &macs[0], H1_V4, H1_V6),
            ] {
                host.run(|| -> io::Result<()> {
                    let mut netlink = Netlink::open()?;
                    let eth = link(&mut netlink, HOST_PORT)?;
                    netlink.add_neighbor(eth.index, IpAddr::V4(peer_v4), peer_mac)?;
                    netlink.add_neighbor(eth.index, IpAddr::V6(peer_v6), peer_mac)
                })??;
            }
        }
        Ok(line)
    }

    /// The kernel's view of an interface of a namespace of the line (its counters).
    pub fn interface(netns: &Netns, name: &str) -> io::Result<LinkInfo> {
        netns.run(|| link(&mut Netlink::open()?, name))?
    }
}

/// Whether a bulk transfer's receiver checks the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Every byte against the sender's pattern.
    EveryByte,
    /// Nothing (for throughput measurements).
    Nothing,
}

/// The byte at `offset` of a bulk transfer.
fn pattern_byte(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// Socket settings of a bulk transfer.
#[derive(Debug, Clone, Default)]
pub struct BulkOptions {
    /// Send and receive buffers of both ends, bytes (forced past the sysctl maxima).
    pub window: Option<usize>,
    /// The sender's congestion control.
    pub congestion: Option<String>,
    /// From h2 to h1 instead.
    pub reverse: bool,
}

/// A TCP bulk transfer from h1 to h2 in progress (see [`Line::start_tcp_bulk`]).
#[derive(Debug)]
pub struct BulkTransfer {
    sender: std::thread::JoinHandle<io::Result<()>>,
    receiver: std::thread::JoinHandle<io::Result<f64>>,
}

impl BulkTransfer {
    /// Waits for the end and returns the goodput in bytes per second the receiver saw
    /// after the warm-up.
    pub fn finish(self) -> io::Result<f64> {
        self.sender.join().expect("sender does not panic")?;
        self.receiver.join().expect("receiver does not panic")
    }
}

impl Line {
    /// Starts a TCP bulk transfer from h1 to h2 (or back, [`BulkOptions::reverse`]) on
    /// `port` for `duration`; bytes received
    /// during the first `warmup` (slow start) are not counted. With [`Check::EveryByte`]
    /// the receiver checks every byte against the pattern the sender wrote and fails the
    /// transfer on a mismatch (which costs the receiver about a core at 10 Gbit/s).
    pub fn start_tcp_bulk(
        &self,
        port: u16,
        duration: std::time::Duration,
        warmup: std::time::Duration,
        check: Check,
    ) -> io::Result<BulkTransfer> {
        self.start_tcp_bulk_with(port, duration, warmup, check, &BulkOptions::default())
    }

    /// [`Line::start_tcp_bulk`] with socket buffers and a congestion control.
    pub fn start_tcp_bulk_with(
        &self,
        port: u16,
        duration: std::time::Duration,
        warmup: std::time::Duration,
        check: Check,
        options: &BulkOptions,
    ) -> io::Result<BulkTransfer> {
        use std::io::{Read, Write};
        let (sending, receiving, to) = if options.reverse {
            (&self.h2, &self.h1, H1_V4)
        } else {
            (&self.h1, &self.h2, H2_V4)
        };
        let address = std::net::SocketAddr::new(IpAddr::V4(to), port);
        let window = options.window;
        // The receiver's buffer before it listens: the window scale goes out in the SYN-ACK.
        let receiver_options = TcpSocketOptions {
            receive_buffer_bytes: window,
            buffer_limit: BufferLimit::Forced,
            ..TcpSocketOptions::default()
        };
        let listener = receiving.run(|| tcp_socket::listen(address, &receiver_options))??;
        let receiver = std::thread::spawn(move || -> io::Result<f64> {
            let (mut stream, _) = listener.accept()?;
            let start = std::time::Instant::now();
            let mut buffer = vec![0u8; 1 << 16];
            let mut counted = 0u64;
            let mut since = None;
            let mut offset = 0u64;
            loop {
                let n = stream.read(&mut buffer)?;
                if n == 0 {
                    break;
                }
                // A transfer through an emulator must arrive intact.
                let checked = if check == Check::EveryByte { n } else { 0 };
                for (i, &byte) in buffer[..checked].iter().enumerate() {
                    if byte != pattern_byte(offset + i as u64) {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("byte {} of the transfer is corrupted", offset + i as u64),
                        ));
                    }
                }
                offset += n as u64;
                if start.elapsed() >= warmup {
                    since.get_or_insert_with(std::time::Instant::now);
                    counted += n as u64;
                }
            }
            let elapsed = since.map_or(0.0, |s: std::time::Instant| s.elapsed().as_secs_f64());
            Ok(if elapsed > 0.0 {
                counted as f64 / elapsed
            } else {
                0.0
            })
        });
        let sender_options = TcpSocketOptions {
            send_buffer_bytes: window,
            receive_buffer_bytes: window,
            buffer_limit: BufferLimit::Forced,
            congestion: options.congestion.clone(),
            ..TcpSocketOptions::default()
        };
        let mut stream = sending.run(|| tcp_socket::connect(address, None, &sender_options))??;
        let sender = std::thread::spawn(move || -> io::Result<()> {
            // 251 is prime, so the pattern repeats every 251 bytes and a 64 KB chunk starts
            // at a different phase each time: a misplaced segment shows.
            let mut chunk = vec![0u8; 1 << 16];
            let mut offset = 0u64;
            let start = std::time::Instant::now();
            while start.elapsed() < duration {
                // The pattern only where the receiver checks it: writing it costs the
                // sender a quarter of a core at 5 Gbit/s, taken from the emulator.
                if check == Check::EveryByte || offset == 0 {
                    for (i, byte) in chunk.iter_mut().enumerate() {
                        *byte = pattern_byte(offset + i as u64);
                    }
                }
                stream.write_all(&chunk)?;
                offset += chunk.len() as u64;
            }
            Ok(())
        });
        Ok(BulkTransfer { sender, receiver })
    }

    /// Sends UDP datagrams of `payload` bytes from h1 to h2 at `rate_bps` for `duration`, each stamped with its send time, and returns each
    /// received datagram's one-way delay (the hosts share one clock).
    pub fn udp_one_way_delays(
        &self,
        port: u16,
        rate_bps: f64,
        payload: usize,
        duration: std::time::Duration,
    ) -> io::Result<Vec<std::time::Duration>> {
        let address = std::net::SocketAddr::new(IpAddr::V4(H2_V4), port);
        let receiver_socket = self.h2.run(|| std::net::UdpSocket::bind(address))??;
        receiver_socket.set_read_timeout(Some(std::time::Duration::from_millis(500)))?;
        let epoch = std::time::Instant::now();
        let receiver = std::thread::spawn(move || {
            let mut delays = Vec::new();
            let mut buffer = vec![0u8; 65_536];
            while let Ok(n) = receiver_socket.recv(&mut buffer) {
                let now = epoch.elapsed().as_nanos() as u64;
                if n >= 8 {
                    let sent = u64::from_be_bytes(buffer[..8].try_into().expect("8 bytes"));
                    delays.push(std::time::Duration::from_nanos(now.saturating_sub(sent)));
                }
            }
            delays
        });
        let sender = self.h1.run(|| std::net::UdpSocket::bind("0.0.0.0:0"))??;
        sender.connect(address)?;
        let interval = std::time::Duration::from_secs_f64(payload as f64 * 8.0 / rate_bps);
        let mut datagram = vec![0u8; payload];
        let start = std::time::Instant::now();
        // Whatever is due goes out every 250 us: the average rate is exact and the sender
        // sleeps in between instead of taking a core from the emulator.
        let mut next = start;
        while start.elapsed() < duration {
            std::thread::sleep(std::time::Duration::from_micros(250));
            while next <= std::time::Instant::now() {
                datagram[..8].copy_from_slice(&(epoch.elapsed().as_nanos() as u64).to_be_bytes());
                let _ = sender.send(&datagram);
                next += interval;
            }
        }
        Ok(receiver.join().expect("receiver does not panic"))
    }
}

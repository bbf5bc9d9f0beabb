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
        line.r.set_sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
        for (host, port) in [(&line.h1, R_PORT_H1), (&line.h2, R_PORT_H2)] {
            let r_fd = line.r.fd();
            host.run(|| Netlink::open()?.create_veth(HOST_PORT, port, Some(r_fd)))??;
        }
        line.r.run(|| -> io::Result<()> {
            let mut netlink = Netlink::open()?;
            let ports = [link(&mut netlink, R_PORT_H1)?, link(&mut netlink, R_PORT_H2)?];
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
            for (host, peer_mac, peer_v4, peer_v6) in [(&line.h1, &macs[1], H2_V4, H2_V6), (&line.h2, &macs[0], H1_V4, H1_V6)] {
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

//! An experiment's nodes and links, built: one anonymous network namespace per node, a
//! veth pair per plain link, and for an emulated link a namespace of its own (the
//! "cable") holding the emulator between two veth pairs, so that each direction of the
//! link is one direction of the emulator. Addresses come from the benchmarking ranges
//! (link i: 198.18.0.0/15's i-th /24 and 2001:2:0:i::/64, its first node .1, the second
//! .2), every node forwards, and routes follow the fewest hops. Neighbours are static:
//! no ARP or neighbour discovery crosses an emulator, so a lossy link cannot lose them.
//!
//! The namespaces are held by file descriptors only: dropping the [`Topology`] (or the
//! process dying) destroys them and every interface in them; nothing is left to clean.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use pathlab_io::netlink::{LinkInfo, Netlink};
use pathlab_io::netns::Netns;

use crate::spec::{first_hops_and_distances, Experiment};

/// The cable namespace's port towards a link's first node.
pub const CABLE_A: &str = "a";
/// The cable namespace's port towards a link's second node.
pub const CABLE_B: &str = "b";

/// The addresses of link `index`'s two ends, IPv4 and IPv6.
pub fn link_addresses(index: usize) -> [(Ipv4Addr, Ipv6Addr); 2] {
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (index as u32) * 256;
    let v6 = |host: u16| Ipv6Addr::new(0x2001, 2, 0, index as u16, 0, 0, 0, host);
    [
        (Ipv4Addr::from(base + 1), v6(1)),
        (Ipv4Addr::from(base + 2), v6(2)),
    ]
}

/// A node's interface towards `peer`.
pub fn port_name(peer: &str) -> String {
    format!("to-{peer}")
}

/// The built experiment.
#[derive(Debug)]
pub struct Topology {
    /// One namespace per node, in the experiment's order.
    pub nodes: Vec<Netns>,
    /// Per link, the namespace its emulator runs in (emulated links only).
    pub cables: Vec<Option<Netns>>,
}

fn interface(netlink: &mut Netlink, name: &str) -> io::Result<LinkInfo> {
    netlink
        .link_by_name(name)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface {name}")))
}

impl Topology {
    /// Builds every namespace, link, address, neighbour and route of `experiment`.
    pub fn build(experiment: &Experiment) -> io::Result<Topology> {
        let names: Vec<&str> = experiment.nodes.iter().map(|n| n.name.as_str()).collect();
        let mut nodes = Vec::new();
        for _ in &experiment.nodes {
            let netns = Netns::new()?;
            netns.set_sysctl("net/ipv4/ip_forward", "1")?;
            netns.set_sysctl("net/ipv6/conf/all/forwarding", "1")?;
            nodes.push(netns);
        }
        let mut cables = Vec::new();
        for (i, link) in experiment.links.iter().enumerate() {
            let (a, b) = (&nodes[link.a], &nodes[link.b]);
            let (to_b, to_a) = (port_name(names[link.b]), port_name(names[link.a]));
            if link.emulated(&experiment.events, i) {
                let cable = Netns::new()?;
                // The cable sends nothing of its own: no IPv6 (solicitations, MLD).
                cable.set_sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
                cable.set_sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
                let cable_fd = cable.fd();
                a.run(|| Netlink::open()?.create_veth(&to_b, CABLE_A, Some(cable_fd)))??;
                b.run(|| Netlink::open()?.create_veth(&to_a, CABLE_B, Some(cable_fd)))??;
                cable.run(|| -> io::Result<()> {
                    let mut netlink = Netlink::open()?;
                    for port in [CABLE_A, CABLE_B] {
                        let info = interface(&mut netlink, port)?;
                        netlink.set_up(info.index, true)?;
                    }
                    Ok(())
                })??;
                cables.push(Some(cable));
            } else {
                let b_fd = b.fd();
                a.run(|| Netlink::open()?.create_veth(&to_b, &to_a, Some(b_fd)))??;
                cables.push(None);
            }
            let ends = link_addresses(i);
            let mut macs = Vec::new();
            for (node, port, (v4, v6)) in [(a, &to_b, ends[0]), (b, &to_a, ends[1])] {
                macs.push(node.run(|| -> io::Result<Vec<u8>> {
                    let mut netlink = Netlink::open()?;
                    let info = interface(&mut netlink, port)?;
                    netlink.add_address(info.index, IpAddr::V4(v4), 24, None)?;
                    netlink.add_address(info.index, IpAddr::V6(v6), 64, None)?;
                    netlink.set_up(info.index, true)?;
                    Ok(info.mac)
                })??);
            }
            for (node, port, peer_mac, (v4, v6)) in
                [(a, &to_b, &macs[1], ends[1]), (b, &to_a, &macs[0], ends[0])]
            {
                node.run(|| -> io::Result<()> {
                    let mut netlink = Netlink::open()?;
                    let info = interface(&mut netlink, port)?;
                    netlink.add_neighbor(info.index, IpAddr::V4(v4), peer_mac)?;
                    netlink.add_neighbor(info.index, IpAddr::V6(v6), peer_mac)
                })??;
            }
        }
        let topology = Topology { nodes, cables };
        topology.add_routes(experiment, &names)?;
        Ok(topology)
    }

    /// For every node, a route to every link it is not on, through its first hop there.
    fn add_routes(&self, experiment: &Experiment, names: &[&str]) -> io::Result<()> {
        let links = &experiment.links;
        for (node, netns) in self.nodes.iter().enumerate() {
            let (hops, distance) = first_hops_and_distances(links, self.nodes.len(), node);
            let mut routes = Vec::new();
            for (i, link) in links.iter().enumerate() {
                if link.a == node || link.b == node {
                    continue;
                }
                // Towards the nearer end of the link: a subnet is one hop from either of
                // its nodes (with two paths to a server, each router sends a line's
                // traffic straight to it, not back through the site).
                let nearer = if distance[link.b] < distance[link.a] {
                    link.b
                } else {
                    link.a
                };
                let Some(first) = hops[nearer] else {
                    continue;
                };
                let via = &links[first];
                let (peer, peer_end) = if via.a == node {
                    (via.b, 1)
                } else {
                    (via.a, 0)
                };
                let gateway = link_addresses(first)[peer_end];
                let destination = link_addresses(i)[0];
                routes.push((port_name(names[peer]), destination, gateway));
            }
            netns.run(|| -> io::Result<()> {
                let mut netlink = Netlink::open()?;
                for (port, (dest_v4, dest_v6), (gw_v4, gw_v6)) in &routes {
                    let info = interface(&mut netlink, port)?;
                    let net_v4 = Ipv4Addr::from(u32::from(*dest_v4) & !0xff);
                    let mut net_v6 = dest_v6.segments();
                    net_v6[4..].fill(0);
                    netlink.add_route(
                        Some((IpAddr::V4(net_v4), 24)),
                        Some(IpAddr::V4(*gw_v4)),
                        info.index,
                        false,
                    )?;
                    netlink.add_route(
                        Some((IpAddr::V6(Ipv6Addr::from(net_v6)), 64)),
                        Some(IpAddr::V6(*gw_v6)),
                        info.index,
                        true,
                    )?;
                }
                Ok(())
            })??;
        }
        Ok(())
    }

    /// The IPv4 address other nodes reach `node` at: its end of its first link.
    pub fn address(experiment: &Experiment, node: usize) -> Option<Ipv4Addr> {
        experiment
            .links
            .iter()
            .enumerate()
            .find(|(_, l)| l.a == node || l.b == node)
            .map(|(i, l)| link_addresses(i)[usize::from(l.b == node)].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_get_their_own_slash_24_and_slash_64() {
        assert_eq!(
            link_addresses(0),
            [
                (
                    Ipv4Addr::new(198, 18, 0, 1),
                    "2001:2:0:0::1".parse().unwrap()
                ),
                (
                    Ipv4Addr::new(198, 18, 0, 2),
                    "2001:2:0:0::2".parse().unwrap()
                )
            ]
        );
        assert_eq!(link_addresses(3)[1].0, Ipv4Addr::new(198, 18, 3, 2));
        assert_eq!(link_addresses(300)[0].0, Ipv4Addr::new(198, 19, 44, 1));
        assert_eq!(
            link_addresses(511)[1].1,
            "2001:2:0:1ff::2".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(port_name("router-12345"), "to-router-12345");
        assert!(port_name("router-12345").len() <= 15);
    }
}

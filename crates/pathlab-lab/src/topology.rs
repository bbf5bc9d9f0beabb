//! An experiment's nodes and links, built: one anonymous network namespace per node, a
//! veth pair per plain link, and for an emulated link a namespace of its own (the
//! "cable") holding the emulator between two veth pairs, so that each direction of the
//! link is one direction of the emulator. Addresses come from the benchmarking ranges
//! ([`Addressing`]: link i gets the i-th /24 of 198.18.0.0/15, or the i-th /30 in a lab
//! of more than 512 links, and 2001:2:0:i::/64; its first node .1, the second .2), every
//! node of two links or more forwards, and routes follow the fewest hops ([`node_routes`]: a node with one
//! link only needs a default route). Neighbours are static: no ARP or neighbour
//! discovery crosses an emulator, so a lossy link cannot lose them.
//!
//! A lab of more than [`SWITCHBOARD_FROM`] emulated links puts every cable's two ports in
//! one namespace instead, the switchboard (`c{link}a`, `c{link}b`), read and written
//! through a few sockets shared by all ([`pathlab_emulator::switchboard`]): a namespace
//! and its sockets per link would be 10,000 of each for 10,000 links.
//!
//! The namespaces are held by file descriptors only: dropping the [`Topology`] (or the
//! process dying) destroys them and every interface in them; nothing is left to clean.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr};

use pathlab_os::netlink::{Netlink, Route, RT_TABLE_MAIN};
use pathlab_os::netns::Netns;

use crate::addressing::Addressing;
use crate::spec::{first_hops_and_distances, Experiment, Link};

/// The cable namespace's port towards a link's first node.
pub const CABLE_A: &str = "a";
/// The cable namespace's port towards a link's second node.
pub const CABLE_B: &str = "b";

/// Above this many emulated links, a lab's cables are on one switchboard.
pub const SWITCHBOARD_FROM: usize = 64;

/// Link `link`'s port on the switchboard towards its first node (`end` 0) or its second.
pub fn board_port(link: usize, end: usize) -> String {
    format!("c{link}{}", if end == 0 { 'a' } else { 'b' })
}

/// Whether `experiment`'s cables go on one switchboard ([`SWITCHBOARD_FROM`]).
pub fn uses_switchboard(experiment: &Experiment) -> bool {
    emulated(experiment).iter().filter(|&&e| e).count() > SWITCHBOARD_FROM
}

/// Per link, whether an emulator sits on it.
pub fn emulated(experiment: &Experiment) -> Vec<bool> {
    (0..experiment.links.len())
        .map(|i| experiment.links[i].emulated(&experiment.events, i))
        .collect()
}

/// A node's interface towards `peer`.
pub fn port_name(peer: &str) -> String {
    format!("to-{peer}")
}

/// A route a node needs, IPv4 and IPv6 alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRoute {
    /// The link whose subnets it leads to; `None`: the default route.
    pub to_link: Option<usize>,
    /// The link it leaves the node by (the node is one of its ends).
    pub via_link: usize,
    /// The node at that link's other end, the gateway.
    pub peer: usize,
}

/// The routes `node` needs so that every link it can reach is reached in the fewest hops:
/// none to its own links (they are on its interfaces); for a stub (a node with one link
/// whose peer has others) one default route through that peer, which is every path's
/// first hop; for any other node a route to each link it is not on, through the first
/// hop towards the link's nearer end. A stub's peer never sends back to it what is not
/// for its link, so the default cannot loop.
pub fn node_routes(links: &[Link], nodes: usize, node: usize) -> Vec<NodeRoute> {
    let own: Vec<usize> = (0..links.len())
        .filter(|&i| links[i].a == node || links[i].b == node)
        .collect();
    let other_end = |link: &Link| if link.a == node { link.b } else { link.a };
    if let [only] = own[..] {
        let peer = other_end(&links[only]);
        let peer_has_others = links
            .iter()
            .enumerate()
            .any(|(i, l)| i != only && (l.a == peer || l.b == peer));
        return if peer_has_others {
            vec![NodeRoute {
                to_link: None,
                via_link: only,
                peer,
            }]
        } else {
            Vec::new()
        };
    }
    let (hops, distance) = first_hops_and_distances(links, nodes, node);
    let mut routes = Vec::new();
    for (i, link) in links.iter().enumerate() {
        if link.a == node || link.b == node {
            continue;
        }
        // Towards the nearer end of the link: a subnet is one hop from either of its
        // nodes (with two paths to a server, each router sends a line's traffic straight
        // to it, not back through the site).
        let nearer = if distance[link.b] < distance[link.a] {
            link.b
        } else {
            link.a
        };
        let Some(first) = hops[nearer] else {
            continue;
        };
        routes.push(NodeRoute {
            to_link: Some(i),
            via_link: first,
            peer: other_end(&links[first]),
        });
    }
    routes
}

/// One route of a node as it is installed, IPv4 or IPv6: what [`Topology::build`] gives the
/// kernel and an exported lab's node config lists, so both have the same routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledRoute {
    /// The destination prefix (address, length); `None`: the default route.
    pub destination: Option<(IpAddr, u8)>,
    /// The gateway: the peer's address on the link the route leaves by.
    pub gateway: IpAddr,
    /// The link it leaves by.
    pub via_link: usize,
    /// Which end of that link the node is (0: `a`, 1: `b`), so which of its ports.
    pub end: usize,
}

/// Every route `node` installs: for each of [`node_routes`], its IPv4 route then its IPv6
/// one, to the link's subnets (or the default) through the peer's addresses on the link it
/// leaves by.
pub fn installed_routes(
    links: &[Link],
    addressing: Addressing,
    nodes: usize,
    node: usize,
) -> Vec<InstalledRoute> {
    let mut installed = Vec::new();
    for route in node_routes(links, nodes, node) {
        let end = usize::from(links[route.via_link].b == node);
        let (gateway_v4, gateway_v6) = addressing.ends(route.via_link)[1 - end];
        let (v4, v6) = match route.to_link {
            Some(to) => {
                let (net_v4, len_v4) = addressing.v4_subnet(to);
                let (net_v6, len_v6) = addressing.v6_subnet(to);
                (
                    Some((IpAddr::V4(net_v4), len_v4)),
                    Some((IpAddr::V6(net_v6), len_v6)),
                )
            }
            None => (None, None),
        };
        for (destination, gateway) in [(v4, IpAddr::V4(gateway_v4)), (v6, IpAddr::V6(gateway_v6))] {
            installed.push(InstalledRoute {
                destination,
                gateway,
                via_link: route.via_link,
                end,
            });
        }
    }
    installed
}

/// The built experiment.
#[derive(Debug)]
pub struct Topology {
    /// One namespace per node, in the experiment's order.
    pub nodes: Vec<Netns>,
    /// Per link, the namespace its emulator runs in (emulated links only, without a
    /// switchboard).
    pub cables: Vec<Option<Netns>>,
    /// The switchboard holding every emulated link's ports ([`board_port`]), if the lab
    /// has one ([`uses_switchboard`]).
    pub board: Option<Netns>,
    /// Per link, whether an emulator sits on it.
    pub emulated: Vec<bool>,
}

/// Writes a sysctl of the calling thread's namespace (`net/ipv4/ip_forward`).
fn set_sysctl(key: &str, value: &str) -> io::Result<()> {
    std::fs::write(format!("/proc/sys/{key}"), value)
}

/// Every interface of the calling thread's namespace, by name: (index, MAC).
fn interfaces(netlink: &mut Netlink) -> io::Result<HashMap<String, (u32, Vec<u8>)>> {
    Ok(netlink
        .links()?
        .into_iter()
        .map(|link| (link.name, (link.index, link.mac)))
        .collect())
}

fn missing(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no interface {name}"))
}

impl Topology {
    /// Builds every namespace, link, address, neighbour and route of `experiment`. The
    /// work inside each namespace is done in one visit with one netlink socket: every
    /// visit is a thread entering the namespace, and a lab of 1,000 links has 2,001.
    pub fn build(experiment: &Experiment) -> io::Result<Topology> {
        let links = &experiment.links;
        let nodes = (0..experiment.nodes.len())
            .map(|_| Netns::new())
            .collect::<io::Result<Vec<_>>>()?;
        let emulated = emulated(experiment);
        let board = uses_switchboard(experiment).then(Netns::new).transpose()?;
        let cables = (0..links.len())
            .map(|i| {
                (emulated[i] && board.is_none())
                    .then(Netns::new)
                    .transpose()
            })
            .collect::<io::Result<Vec<_>>>()?;

        let wiring = Wiring::new(experiment, &nodes, &emulated);
        // The veths: the switchboard or a cable makes both of an emulated link's, its
        // ports up; a node makes those of the plain links it is the first end of.
        if let Some(board) = &board {
            wiring.board_veths(board)?;
        }
        wiring.cable_veths(&cables)?;
        wiring.plain_veths()?;
        let ports = wiring.address_ports()?;
        wiring.neighbours_and_routes(&ports)?;
        Ok(Topology {
            nodes,
            cables,
            board,
            emulated,
        })
    }

    /// The IPv4 address other nodes reach `node` at: its end of its first link.
    pub fn address(experiment: &Experiment, node: usize) -> Option<Ipv4Addr> {
        let addressing = Addressing::for_links(experiment.links.len());
        experiment
            .links
            .iter()
            .enumerate()
            .find(|(_, l)| l.a == node || l.b == node)
            .map(|(i, l)| addressing.ends(i)[usize::from(l.b == node)].0)
    }
}

/// A link's two ports, by end: each one's interface index and MAC.
type LinkPorts = [(u32, Vec<u8>); 2];

/// What every step of [`Topology::build`] after making the namespaces reads: the links,
/// their addresses, each node's link ends and namespace, and which links are emulated.
struct Wiring<'a> {
    links: &'a [Link],
    addressing: Addressing,
    names: Vec<&'a str>,
    /// A node's links, in the file's order: (link, which end the node is).
    ends_of: Vec<Vec<(usize, usize)>>,
    nodes: &'a [Netns],
    emulated: &'a [bool],
}

impl<'a> Wiring<'a> {
    /// The wiring of `experiment` between its nodes' namespaces `nodes`.
    fn new(experiment: &'a Experiment, nodes: &'a [Netns], emulated: &'a [bool]) -> Wiring<'a> {
        let links = &experiment.links;
        let names: Vec<&str> = experiment.nodes.iter().map(|n| n.name.as_str()).collect();
        let mut ends_of: Vec<Vec<(usize, usize)>> = vec![Vec::new(); names.len()];
        for (i, link) in links.iter().enumerate() {
            ends_of[link.a].push((i, 0));
            ends_of[link.b].push((i, 1));
        }
        Wiring {
            links,
            addressing: Addressing::for_links(links.len()),
            names,
            ends_of,
            nodes,
            emulated,
        }
    }

    /// A node's port on link `i`, end `end`: named after the node at the other end.
    fn port(&self, i: usize, end: usize) -> String {
        let link = &self.links[i];
        port_name(self.names[if end == 0 { link.b } else { link.a }])
    }

    /// Makes both veths of every emulated link in the switchboard, its ports up and the
    /// other ends in the nodes; the switchboard has no IPv6.
    fn board_veths(&self, board: &Netns) -> io::Result<()> {
        board.run(|| -> io::Result<()> {
            set_sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
            set_sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
            let mut netlink = Netlink::open()?;
            for (i, link) in self.links.iter().enumerate() {
                if !self.emulated[i] {
                    continue;
                }
                for (end, node) in [link.a, link.b].into_iter().enumerate() {
                    netlink.create_veth(
                        &board_port(i, end),
                        &self.port(i, end),
                        Some(self.nodes[node].fd()),
                    )?;
                }
            }
            for link in netlink.links()? {
                if link.index != 1 {
                    netlink.set_up(link.index, true)?;
                }
            }
            Ok(())
        })??;
        Ok(())
    }

    /// Makes each cable's two veths, its ports up and the other ends in the link's nodes.
    fn cable_veths(&self, cables: &[Option<Netns>]) -> io::Result<()> {
        for (i, cable) in cables.iter().enumerate() {
            let Some(cable) = cable else { continue };
            let link = &self.links[i];
            let (a, b) = (self.nodes[link.a].fd(), self.nodes[link.b].fd());
            cable.run(|| -> io::Result<()> {
                // The cable sends nothing of its own: no IPv6 (solicitations, MLD).
                set_sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
                set_sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
                let mut netlink = Netlink::open()?;
                netlink.create_veth(CABLE_A, &self.port(i, 0), Some(a))?;
                netlink.create_veth(CABLE_B, &self.port(i, 1), Some(b))?;
                let ports = interfaces(&mut netlink)?;
                for name in [CABLE_A, CABLE_B] {
                    let (index, _) = ports.get(name).ok_or_else(|| missing(name))?;
                    netlink.set_up(*index, true)?;
                }
                Ok(())
            })??;
        }
        Ok(())
    }

    /// Makes the veth of each plain link in its first node, the other end in its second.
    fn plain_veths(&self) -> io::Result<()> {
        for (node, netns) in self.nodes.iter().enumerate() {
            let plain: Vec<usize> = self.ends_of[node]
                .iter()
                .filter(|&&(i, end)| end == 0 && !self.emulated[i])
                .map(|&(i, _)| i)
                .collect();
            if plain.is_empty() {
                continue;
            }
            netns.run(|| -> io::Result<()> {
                let mut netlink = Netlink::open()?;
                for &i in &plain {
                    let peer = self.nodes[self.links[i].b].fd();
                    netlink.create_veth(&self.port(i, 0), &self.port(i, 1), Some(peer))?;
                }
                Ok(())
            })??;
        }
        Ok(())
    }

    /// In each node: forwarding on, its ports addressed and up. Gives every port's index
    /// and MAC, per link and end, for the neighbours and routes.
    fn address_ports(&self) -> io::Result<Vec<LinkPorts>> {
        let mut ports: Vec<LinkPorts> = vec![Default::default(); self.links.len()];
        for (node, netns) in self.nodes.iter().enumerate() {
            let found = netns.run(|| -> io::Result<Vec<(u32, Vec<u8>)>> {
                // A node of one link has nowhere else to forward to. Its namespace gets no
                // sysctl at all: a sysctl's path is looked up among the entries of every
                // namespace that has written one of that name, so 10,000 hosts writing the
                // same three took most of a 10,000-link lab's build.
                if self.ends_of[node].len() > 1 {
                    set_sysctl("net/ipv4/ip_forward", "1")?;
                    set_sysctl("net/ipv6/conf/all/forwarding", "1")?;
                }
                let mut netlink = Netlink::open()?;
                let present = interfaces(&mut netlink)?;
                let mut found = Vec::new();
                // Every port up before any address: each interface that comes up (and
                // each carrier that follows) makes the kernel walk every IPv6 route of
                // the namespace, so a router of 3,000 ports that came up one by one among
                // its growing routes took 26 s. No IPv6 link-local addresses either (their
                // routes and duplicate address detection are more of the same): the lab's
                // neighbours and routes are on the links' own addresses.
                for &(i, end) in &self.ends_of[node] {
                    let name = self.port(i, end);
                    let (index, mac) = present.get(&name).ok_or_else(|| missing(&name))?;
                    found.push((*index, mac.clone()));
                }
                let indices: Vec<u32> = found.iter().map(|(index, _)| *index).collect();
                netlink.set_up_without_link_local(&indices)?;
                netlink.add_addresses(self.ends_of[node].iter().zip(&found).flat_map(
                    |(&(i, end), (index, _))| {
                        let (v4, v6) = self.addressing.ends(i)[end];
                        [
                            (*index, IpAddr::V4(v4), self.addressing.v4_prefix_len()),
                            (*index, IpAddr::V6(v6), self.addressing.v6_subnet(i).1),
                        ]
                    },
                ))?;
                Ok(found)
            })??;
            for (&(i, end), port) in self.ends_of[node].iter().zip(found) {
                ports[i][end] = port;
            }
        }
        Ok(ports)
    }

    /// In each node: its peers' neighbour entries and its routes.
    fn neighbours_and_routes(&self, ports: &[LinkPorts]) -> io::Result<()> {
        for (node, netns) in self.nodes.iter().enumerate() {
            let routes = installed_routes(self.links, self.addressing, self.nodes.len(), node);
            netns.run(|| -> io::Result<()> {
                let mut netlink = Netlink::open()?;
                netlink.add_neighbors(self.ends_of[node].iter().flat_map(|&(i, end)| {
                    let (index, _) = ports[i][end];
                    let (_, peer_mac) = &ports[i][1 - end];
                    let (v4, v6) = self.addressing.ends(i)[1 - end];
                    [
                        (index, IpAddr::V4(v4), peer_mac.as_slice()),
                        (index, IpAddr::V6(v6), peer_mac.as_slice()),
                    ]
                }))?;
                let routes: Vec<Route> = routes
                    .iter()
                    .map(|route| Route {
                        destination: route.destination,
                        gateway: Some(route.gateway),
                        interface: ports[route.via_link][route.end].0,
                        ipv6: route.gateway.is_ipv6(),
                        table: RT_TABLE_MAIN,
                        metric: None,
                    })
                    .collect();
                netlink.new_routes(&routes)
            })??;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_core::LinkSpec;

    #[test]
    fn port_names_fit_an_interface_name() {
        assert_eq!(port_name("router-12345"), "to-router-12345");
        assert!(port_name("router-12345").len() <= 15);
    }

    #[test]
    fn every_end_lies_in_its_own_subnet_inside_the_range_and_no_two_subnets_meet() {
        let (range, range_len) = Addressing::V4_RANGE;
        let in_prefix = |address: Ipv4Addr, (net, len): (Ipv4Addr, u8)| {
            let mask = u32::MAX << (32 - len);
            u32::from(address) & mask == u32::from(net)
        };
        for links in [2, 512, 513, 1000, Addressing::MAX_LINKS] {
            let addressing = Addressing::for_links(links);
            let mut networks = std::collections::BTreeSet::new();
            for i in 0..links {
                let subnet = addressing.v4_subnet(i);
                assert!(in_prefix(subnet.0, (range, range_len)), "{links}: {i}");
                // Subnets of one length that differ in their network address are disjoint.
                assert!(networks.insert(subnet.0), "{links}: {i}");
                for (v4, v6) in addressing.ends(i) {
                    assert!(in_prefix(v4, subnet), "{links}: {i}");
                    assert_ne!(v4, subnet.0, "not the network address");
                    let broadcast = u32::from(subnet.0) | !(u32::MAX << (32 - subnet.1));
                    assert_ne!(u32::from(v4), broadcast, "not the broadcast address");
                    assert_eq!(v6.segments()[..4], [0x2001, 2, 0, i as u16]);
                }
            }
        }
    }

    fn link(a: usize, b: usize) -> Link {
        Link {
            name: format!("{a}-{b}"),
            a,
            b,
            forward: LinkSpec::default(),
            reverse: LinkSpec::default(),
        }
    }

    fn default_via(link: usize, peer: usize) -> NodeRoute {
        NodeRoute {
            to_link: None,
            via_link: link,
            peer,
        }
    }

    #[test]
    fn in_a_star_each_host_has_one_default_route_and_the_hub_none() {
        // Node 0 the hub, hosts 1..=1000: 2 routes per host (v4 and v6 from one entry)
        // instead of a route to each of the 999 other links.
        let links: Vec<Link> = (1..=1000).map(|host| link(0, host)).collect();
        assert!(node_routes(&links, 1001, 0).is_empty());
        for host in [1, 2, 500, 1000] {
            assert_eq!(
                node_routes(&links, 1001, host),
                vec![default_via(host - 1, 0)]
            );
        }
    }

    #[test]
    fn two_nodes_alone_need_no_route_and_a_line_routes_through_its_routers() {
        assert!(node_routes(&[link(0, 1)], 2, 0).is_empty());
        assert!(node_routes(&[link(0, 1)], 2, 1).is_empty());
        // h1(0) - r1(1) - r2(2) - h2(3): the hosts default to their router; each router
        // routes the far host's link through the other router.
        let line = [link(0, 1), link(1, 2), link(2, 3)];
        assert_eq!(node_routes(&line, 4, 0), vec![default_via(0, 1)]);
        assert_eq!(node_routes(&line, 4, 3), vec![default_via(2, 2)]);
        assert_eq!(
            node_routes(&line, 4, 1),
            vec![NodeRoute {
                to_link: Some(2),
                via_link: 1,
                peer: 2
            }]
        );
        assert_eq!(
            node_routes(&line, 4, 2),
            vec![NodeRoute {
                to_link: Some(0),
                via_link: 1,
                peer: 1
            }]
        );
    }

    /// Follows `node_routes` hop by hop from `from` until a node on `to_link`; the hops
    /// taken, or `None` if a node had no route (or the walk looped).
    fn walk(links: &[Link], nodes: usize, from: usize, to_link: usize) -> Option<usize> {
        let mut node = from;
        for hops in 0..=nodes {
            if links[to_link].a == node || links[to_link].b == node {
                return Some(hops);
            }
            let routes = node_routes(links, nodes, node);
            let route = routes
                .iter()
                .find(|r| r.to_link == Some(to_link))
                .or_else(|| routes.iter().find(|r| r.to_link.is_none()))?;
            node = route.peer;
        }
        None
    }

    #[test]
    fn every_link_is_reached_in_the_fewest_hops_with_default_routes_at_the_stubs() {
        // A tree: core 0; routers 1, 2 under it; hosts 3, 4 under 1 and 5, 6, 7 under 2;
        // a second path 2 - 8 - 1 (a ring through 8) and a stub 9 on 8.
        let links = vec![
            link(0, 1),
            link(0, 2),
            link(1, 3),
            link(1, 4),
            link(2, 5),
            link(2, 6),
            link(2, 7),
            link(2, 8),
            link(8, 1),
            link(8, 9),
        ];
        let nodes = 10;
        for from in 0..nodes {
            let (_, distance) = first_hops_and_distances(&links, nodes, from);
            for (i, l) in links.iter().enumerate() {
                // A link's subnet is reached at the nearer of its two ends.
                let fewest = distance[l.a].min(distance[l.b]);
                assert_eq!(
                    walk(&links, nodes, from, i),
                    Some(fewest),
                    "from {from} to link {i}"
                );
            }
        }
        for stub in [3, 4, 5, 6, 7, 9] {
            let routes = node_routes(&links, nodes, stub);
            assert_eq!(routes.len(), 1, "{stub}: {routes:?}");
            assert_eq!(routes[0].to_link, None);
        }
    }
}

//! A virtual-time network of sans-IO endpoints joined by emulated links.
//!
//! Each endpoint (a [`Node`]) has numbered ports; a [`Network`] joins a port of one node to a
//! port of another with a [`Link`] each way, and steps virtual time from one event to the
//! next: an endpoint's deadline or a link's. It is quinn's `Pair::step` generalised to any
//! number of endpoints and links, so a protocol (the bonding tunnel, the measurement
//! dialogue) is tested through the same link models the emulator runs, exactly and with no
//! sockets, root or sleeps.
//!
//! The network does not own the nodes: [`Network::run_until`] borrows them, so a test reads
//! and changes their state between runs, and changes a link's spec at run time
//! ([`Network::link_mut`]) to make a line fail and come back.

use crate::link::Link;
use crate::packet::{Ecn, Packet};
use crate::spec::LinkSpec;
use crate::time::Instant;

/// A sans-IO endpoint the network steps.
pub trait Node {
    /// A datagram arrives on `port` at `now`.
    fn handle(&mut self, now: Instant, port: usize, data: Vec<u8>);
    /// The next datagram to send at `now` and the port it leaves by; called until `None`.
    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)>;
    /// When the node next needs to be polled even if nothing arrives.
    fn poll_at(&self) -> Option<Instant>;
}

/// Where a wire starts or ends: a node and one of its ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Port {
    /// Index of the node in the slice given to [`Network::run_until`].
    pub node: usize,
    /// The node's port number.
    pub port: usize,
}

impl Port {
    /// Port `port` of node `node`.
    pub const fn new(node: usize, port: usize) -> Port {
        Port { node, port }
    }
}

/// Identifies one direction of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WireId(usize);

#[derive(Debug)]
struct Wire {
    from: Port,
    to: Port,
    link: Link,
}

/// Counters of what the network did with datagrams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetworkCounters {
    /// Datagrams sent by a port no wire starts at (lost, as on an unplugged port).
    pub unconnected: u64,
    /// Datagrams delivered to a node.
    pub delivered: u64,
}

/// Links between nodes' ports, stepped in virtual time.
#[derive(Debug)]
pub struct Network {
    wires: Vec<Wire>,
    now: Instant,
    overhead_bytes: u32,
    counters: NetworkCounters,
}

/// Most events one instant may hold before the network decides a node never settles.
const MAX_EVENTS_PER_INSTANT: usize = 10_000_000;

impl Network {
    /// An empty network at time zero. Each datagram occupies its length plus
    /// `overhead_bytes` on a link (28 for IPv4 and UDP headers, 42 with Ethernet's), so
    /// rates count what a real line carries.
    pub fn new(overhead_bytes: u32) -> Network {
        Network {
            wires: Vec::new(),
            now: Instant::ZERO,
            overhead_bytes,
            counters: NetworkCounters::default(),
        }
    }

    /// The network's current time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// What the network did with datagrams so far.
    pub fn counters(&self) -> NetworkCounters {
        self.counters
    }

    /// Joins `a` and `b` with `forward` from `a` to `b` and `reverse` back; returns the two
    /// directions' ids. `seed` seeds the links' randomness.
    pub fn connect(
        &mut self,
        a: Port,
        b: Port,
        forward: &LinkSpec,
        reverse: &LinkSpec,
        seed: u64,
    ) -> Result<(WireId, WireId), crate::link::LinkError> {
        let forward = Link::new(forward, seed)?;
        let reverse = Link::new(reverse, seed ^ 0x9e37_79b9_7f4a_7c15)?;
        self.wires.push(Wire {
            from: a,
            to: b,
            link: forward,
        });
        self.wires.push(Wire {
            from: b,
            to: a,
            link: reverse,
        });
        Ok((WireId(self.wires.len() - 2), WireId(self.wires.len() - 1)))
    }

    /// The link of one direction, to read its counters and records or change its spec.
    pub fn link_mut(&mut self, wire: WireId) -> &mut Link {
        &mut self.wires[wire.0].link
    }

    /// The link of one direction.
    pub fn link(&self, wire: WireId) -> &Link {
        &self.wires[wire.0].link
    }

    /// Runs until `end`: delivers what the links release, sends what the nodes transmit,
    /// and jumps to the next deadline, until none is left before `end`. Time then stands
    /// at `end`.
    ///
    /// # Panics
    /// If the nodes keep producing events at one instant without end (a node whose
    /// `poll_at` stays in the past while it has nothing to do).
    pub fn run_until(&mut self, end: Instant, nodes: &mut [&mut dyn Node]) {
        let mut idle_wakeups = 0usize;
        loop {
            self.settle(nodes);
            let next = nodes
                .iter()
                .filter_map(|node| node.poll_at())
                .chain(self.wires.iter().filter_map(|wire| wire.link.poll_at()))
                .min();
            if !advance(&mut self.now, next, end, &mut idle_wakeups) {
                self.settle(nodes);
                return;
            }
        }
    }

    /// Handles everything due at the current instant, until nothing more is.
    fn settle(&mut self, nodes: &mut [&mut dyn Node]) {
        let now = self.now;
        let mut events = 0usize;
        loop {
            let mut moved = false;
            for (index, node) in nodes.iter_mut().enumerate() {
                while let Some((port, data)) = node.poll_transmit(now) {
                    moved = true;
                    events += 1;
                    let from = Port::new(index, port);
                    match self.wires.iter_mut().find(|wire| wire.from == from) {
                        Some(wire) => {
                            let len = u32::try_from(data.len())
                                .unwrap_or(u32::MAX)
                                .saturating_add(self.overhead_bytes);
                            let mut packet = Packet::synthetic(now, len, 0, Ecn::NotEct);
                            packet.data = data;
                            wire.link.enqueue(now, packet);
                        }
                        None => self.counters.unconnected += 1,
                    }
                }
            }
            for wire in &mut self.wires {
                while let Some(packet) = wire.link.dequeue(now) {
                    moved = true;
                    events += 1;
                    self.counters.delivered += 1;
                    nodes[wire.to.node].handle(now, wire.to.port, packet.data);
                }
            }
            assert!(
                events < MAX_EVENTS_PER_INSTANT,
                "the network's nodes never settle at {now}"
            );
            if !moved {
                return;
            }
        }
    }
}

/// One step of a discrete-event loop that runs until `end`: moves `now` on to the next
/// deadline `next` (the earliest of everything's `poll_at`) and returns `true`, or, with
/// no deadline left before `end`, to `end` and returns `false` (the loop then handles
/// what is due there and stops). `idle_wakeups` counts the deadlines in a row that did not
/// move time on.
///
/// # Panics
/// After 1,000 such deadlines: something keeps its `poll_at` in the past while it has
/// nothing to do, and the loop would spin.
pub fn advance(
    now: &mut Instant,
    next: Option<Instant>,
    end: Instant,
    idle_wakeups: &mut usize,
) -> bool {
    match next {
        Some(at) if at <= end => {
            // A deadline that does not move time on must be followed by work; a node
            // whose deadline stays in the past with nothing to do would spin.
            if at <= *now {
                *idle_wakeups += 1;
                assert!(
                    *idle_wakeups < 1_000,
                    "a node's poll_at stays at {at} (now {now}) with nothing to do"
                );
            } else {
                *idle_wakeups = 0;
            }
            *now = (*now).max(at);
            true
        }
        _ => {
            *now = (*now).max(end);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `count` datagrams of `len` bytes at `start`, and records when datagrams arrive.
    struct Burst {
        start: Instant,
        count: usize,
        len: usize,
        arrivals: Vec<(Instant, usize)>,
    }

    impl Node for Burst {
        fn handle(&mut self, now: Instant, _port: usize, data: Vec<u8>) {
            self.arrivals.push((now, data.len()));
        }
        fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
            if now >= self.start && self.count > 0 {
                self.count -= 1;
                Some((0, vec![0; self.len]))
            } else {
                None
            }
        }
        fn poll_at(&self) -> Option<Instant> {
            (self.count > 0).then_some(self.start)
        }
    }

    #[test]
    fn a_burst_crosses_a_bottleneck_at_its_rate_and_delay() {
        let mut net = Network::new(28);
        let spec = LinkSpec::parse("delay 10ms rate 1mbit").unwrap();
        let idle = LinkSpec::parse("").unwrap();
        net.connect(Port::new(0, 0), Port::new(1, 0), &spec, &idle, 1)
            .unwrap();
        let mut sender = Burst {
            start: Instant::from_millis(5),
            count: 10,
            len: 1222,
            arrivals: Vec::new(),
        };
        let mut receiver = Burst {
            start: Instant::MAX,
            count: 0,
            len: 0,
            arrivals: Vec::new(),
        };
        net.run_until(Instant::from_secs(1), &mut [&mut sender, &mut receiver]);
        // Each 1250-byte datagram takes 10 ms at 1 Mbit/s; the k-th leaves the queue at
        // 5 + 10k ms and arrives 10 ms later.
        assert_eq!(receiver.arrivals.len(), 10);
        for (k, (at, len)) in receiver.arrivals.iter().enumerate() {
            assert_eq!(*len, 1222);
            let expected = Instant::from_millis(5 + 10 * (k as u64 + 1) + 10);
            assert_eq!(*at, expected, "datagram {k}");
        }
        assert_eq!(net.now(), Instant::from_secs(1));
        assert_eq!(net.counters().delivered, 10);
    }

    #[test]
    fn datagrams_from_an_unconnected_port_are_counted_lost() {
        let mut net = Network::new(0);
        let mut sender = Burst {
            start: Instant::ZERO,
            count: 3,
            len: 10,
            arrivals: Vec::new(),
        };
        net.run_until(Instant::from_millis(1), &mut [&mut sender]);
        assert_eq!(net.counters().unconnected, 3);
    }
}

//! The tunnel's ends as [`pathlab_bond::sim`]'s nodes, each counting the datagrams it
//! sends and receives on its lines by kind.

use pathlab_bond::wire::{Header, Kind};
use pathlab_core::harness::Node;
use pathlab_core::Instant;

/// Datagrams by [`Kind`] (indexed by its value; 0 for one that does not parse).
pub type ByKind = [u64; 6];

fn kind_of(datagram: &[u8]) -> usize {
    Header::decode(datagram).map_or(0, |h| h.kind as usize)
}

/// Datagrams of `kind`.
pub fn of(counts: &ByKind, kind: Kind) -> u64 {
    counts[kind as usize]
}

/// A tunnel end whose datagrams (on every port but 0, its TUN side) are counted by kind.
#[derive(Debug)]
pub struct Tapped<N> {
    pub node: N,
    pub sent: ByKind,
    pub received: ByKind,
}

impl<N> Tapped<N> {
    pub fn new(node: N) -> Tapped<N> {
        Tapped {
            node,
            sent: ByKind::default(),
            received: ByKind::default(),
        }
    }
}

impl<N: Node> Node for Tapped<N> {
    fn handle(&mut self, now: Instant, port: usize, data: Vec<u8>) {
        if port != 0 {
            self.received[kind_of(&data)] += 1;
        }
        self.node.handle(now, port, data);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        let (port, data) = self.node.poll_transmit(now)?;
        if port != 0 {
            self.sent[kind_of(&data)] += 1;
        }
        Some((port, data))
    }

    fn poll_at(&self) -> Option<Instant> {
        self.node.poll_at()
    }
}

//! The tunnel's ends as nodes, as [`pathlab_bond::sim`]'s, but each polled for its timers
//! only when they fall due (a week of events costs half the time), and each counting the
//! datagrams it sends and receives by kind.

use pathlab_bond::sim::line_address;
use pathlab_bond::wire::{Header, Kind};
use pathlab_bond::{Address, Bond, Server};
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

/// The client: TUN side on port 0, line `k` on port `k + 1`.
#[derive(Debug)]
pub struct ClientEnd {
    pub bond: Bond,
    pub sent: ByKind,
    pub received: ByKind,
    buf: Vec<u8>,
}

impl ClientEnd {
    pub fn new(bond: Bond) -> ClientEnd {
        ClientEnd {
            bond,
            sent: ByKind::default(),
            received: ByKind::default(),
            buf: Vec::new(),
        }
    }
}

impl Node for ClientEnd {
    fn handle(&mut self, now: Instant, port: usize, mut data: Vec<u8>) {
        if port == 0 {
            self.bond.handle_inner(now, data);
        } else {
            self.received[kind_of(&data)] += 1;
            self.bond.handle_datagram(now, &mut data);
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if self.bond.poll_at().is_some_and(|at| at <= now) {
            self.bond.handle_timeout(now);
        }
        if let Some(packet) = self.bond.poll_deliver() {
            return Some((0, packet));
        }
        let transmit = self.bond.poll_transmit(now, &mut self.buf)?;
        self.sent[kind_of(&self.buf)] += 1;
        Some((usize::from(transmit.line) + 1, self.buf.clone()))
    }

    fn poll_at(&self) -> Option<Instant> {
        self.bond.poll_at()
    }
}

/// The server of one client: TUN side on port 0, the client's line `k` on port `k + 1`.
#[derive(Debug)]
pub struct ServerEnd {
    pub server: Server,
    pub sent: ByKind,
    pub received: ByKind,
    buf: Vec<u8>,
}

impl ServerEnd {
    pub fn new(server: Server) -> ServerEnd {
        ServerEnd {
            server,
            sent: ByKind::default(),
            received: ByKind::default(),
            buf: Vec::new(),
        }
    }
}

impl Node for ServerEnd {
    fn handle(&mut self, now: Instant, port: usize, mut data: Vec<u8>) {
        if port == 0 {
            self.server.handle_inner(now, data);
        } else {
            self.received[kind_of(&data)] += 1;
            let from = Address {
                remote: line_address(0, port - 1),
                local: None,
            };
            self.server.handle_datagram(now, from, &mut data);
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if self.server.poll_at().is_some_and(|at| at <= now) {
            self.server.handle_timeout(now);
        }
        if let Some(packet) = self.server.poll_deliver() {
            return Some((0, packet));
        }
        let to = self.server.poll_transmit(now, &mut self.buf)?;
        self.sent[kind_of(&self.buf)] += 1;
        let line = (0..8)
            .find(|&k| line_address(0, k) == to.remote)
            .expect("one of the client's lines");
        Some((line + 1, self.buf.clone()))
    }

    fn poll_at(&self) -> Option<Instant> {
        self.server.poll_at()
    }
}

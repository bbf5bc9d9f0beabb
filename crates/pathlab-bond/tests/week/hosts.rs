//! The hosts behind the tunnel's ends: numbered packets on a few flows, TCP segments
//! (whose headers the tunnel compresses) and UDP datagrams, with their IPv4 checksums;
//! each arrival checked against its flow's numbers.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use pathlab_core::harness::Node;
use pathlab_core::wire::checksum::{checksum_add, checksum_finish};
use pathlab_core::{Duration, Instant};

/// One numbered flow a host sends.
#[derive(Debug, Clone, Copy)]
pub struct FlowSpec {
    /// Its source port (what tells the flows apart at the receiver).
    pub port: u16,
    /// TCP segments (else UDP datagrams).
    pub tcp: bool,
    /// IP packet length.
    pub len: usize,
    /// One packet this often.
    pub every: Duration,
}

/// What a host saw of one flow.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen {
    pub packets: u64,
    pub highest: u64,
    /// Packets whose number was not above every number before it: a duplicate or one
    /// out of order.
    pub not_increasing: u64,
}

/// A host: sends numbered packets on its flows until `stop`, checks what arrives.
#[derive(Debug)]
pub struct Host {
    source: Ipv4Addr,
    destination: Ipv4Addr,
    flows: Vec<(FlowSpec, Instant, u64)>,
    stop: Instant,
    pub sent: u64,
    pub seen: HashMap<u16, Seen>,
}

const IP_HEADER: usize = 20;
const TCP_HEADER: usize = 20;
const UDP_HEADER: usize = 8;
const PORT_AT: std::ops::Range<usize> = 20..22;

/// Where the number lies in a packet of `protocol`.
fn number_at(protocol: u8) -> usize {
    IP_HEADER
        + if protocol == 6 {
            TCP_HEADER
        } else {
            UDP_HEADER
        }
}

/// Packet `number` of `flow` from `source` to `destination`: a TCP segment (its sequence
/// number growing by its payload each packet) or a UDP datagram (no checksum), the number
/// first in its payload, the IPv4 header's checksum right.
pub fn packet(source: Ipv4Addr, destination: Ipv4Addr, flow: FlowSpec, number: u64) -> Vec<u8> {
    let protocol: u8 = if flow.tcp { 6 } else { 17 };
    let at = number_at(protocol);
    let len = flow.len.max(at + 8);
    let mut p = vec![0u8; len];
    p[..IP_HEADER].copy_from_slice(&[
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[4..6].copy_from_slice(&(number as u16).to_be_bytes());
    p[12..16].copy_from_slice(&source.octets());
    p[16..20].copy_from_slice(&destination.octets());
    let sum = checksum_finish(checksum_add(0, &p[..IP_HEADER]));
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[PORT_AT].copy_from_slice(&flow.port.to_be_bytes());
    p[22..24].copy_from_slice(&5000u16.to_be_bytes());
    p[at..at + 8].copy_from_slice(&number.to_be_bytes());
    if flow.tcp {
        let payload = (len - at) as u32;
        p[24..28].copy_from_slice(&(number as u32).wrapping_mul(payload).to_be_bytes());
        p[28..32].copy_from_slice(&1u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x18;
        p[34..36].copy_from_slice(&1024u16.to_be_bytes());
        let l4 = &p[IP_HEADER..];
        let sum = checksum_add(0, &p[12..20]) + 6 + l4.len() as u64 + checksum_add(0, l4);
        let checksum = checksum_finish(sum);
        p[36..38].copy_from_slice(&checksum.to_be_bytes());
    } else {
        p[24..26].copy_from_slice(&((len - IP_HEADER) as u16).to_be_bytes());
    }
    p
}

impl Host {
    pub fn new(source: Ipv4Addr, destination: Ipv4Addr, flows: &[FlowSpec], stop: Instant) -> Host {
        let flows = flows
            .iter()
            .enumerate()
            .map(|(k, f)| {
                let start = Instant::ZERO + Duration::from_millis(1_000 + 130 * k as u64);
                (*f, start, 0)
            })
            .collect();
        Host {
            source,
            destination,
            flows,
            stop,
            sent: 0,
            seen: HashMap::new(),
        }
    }

    pub fn received(&self) -> u64 {
        self.seen.values().map(|s| s.packets).sum()
    }

    pub fn not_increasing(&self) -> u64 {
        self.seen.values().map(|s| s.not_increasing).sum()
    }
}

impl Node for Host {
    fn handle(&mut self, _now: Instant, _port: usize, data: Vec<u8>) {
        let at = number_at(data[9]);
        let port = u16::from_be_bytes(data[PORT_AT].try_into().unwrap());
        let number = u64::from_be_bytes(data[at..at + 8].try_into().unwrap());
        let seen = self.seen.entry(port).or_default();
        seen.packets += 1;
        if number <= seen.highest {
            seen.not_increasing += 1;
        }
        seen.highest = seen.highest.max(number);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        for (flow, next, number) in &mut self.flows {
            if now >= *next && now < self.stop {
                *number += 1;
                *next += flow.every;
                self.sent += 1;
                return Some((0, packet(self.source, self.destination, *flow, *number)));
            }
        }
        None
    }

    fn poll_at(&self) -> Option<Instant> {
        self.flows
            .iter()
            .map(|(_, next, _)| *next)
            .filter(|next| *next < self.stop)
            .min()
    }
}

//! FQ-CoDel, RFC 8290: flows hashed into queues, served by deficit round robin with new
//! flows first, each queue managed by its own CoDel.
//!
//! When the whole scheduler is over its limit, packets are dropped from the head of the
//! queue holding the most bytes, up to `drop_batch` packets or half of that queue, as
//! Linux does (RFC 8290 section 4.1).

use std::collections::VecDeque;

use super::codel::CodelState;
use super::fifo::Fifo;
use super::{Limits, Queue};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::FqCodelConfig;
use crate::time::Instant;
use crate::verdict::{DropReason, Verdicts};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    New,
    Old,
}

#[derive(Debug, Default)]
struct Flow {
    fifo: Fifo,
    codel: CodelState,
    deficit: i64,
    list: Option<List>,
}

/// Flow-queue CoDel.
#[derive(Debug)]
pub struct FqCodel {
    flows: Vec<Flow>,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    config: FqCodelConfig,
    limits: Limits,
    perturbation: u64,
    packets: usize,
    bytes: u64,
}

impl FqCodel {
    /// An FQ-CoDel scheduler; `rng` draws the hash perturbation.
    pub fn new(config: FqCodelConfig, limits: Limits, mut rng: Rng) -> FqCodel {
        let flows = config.flows.max(1);
        FqCodel {
            flows: (0..flows).map(|_| Flow::default()).collect(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            config,
            limits,
            perturbation: rng.next_u64(),
            packets: 0,
            bytes: 0,
        }
    }

    fn bucket(&self, flow: u64) -> usize {
        // A multiplicative hash of the perturbed flow, reduced without modulo bias.
        let mixed = (flow ^ self.perturbation).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((u128::from(mixed) * self.flows.len() as u128) >> 64) as usize
    }

    /// Drops from the fattest queue until `drop_batch` packets or half its bytes are gone.
    fn drop_from_fattest(&mut self, now: Instant, verdicts: &mut Verdicts) {
        let Some(fattest) = (0..self.flows.len()).max_by_key(|&i| self.flows[i].fifo.len_bytes())
        else {
            return;
        };
        let flow = &mut self.flows[fattest];
        let threshold = flow.fifo.len_bytes() / 2;
        let (mut dropped_packets, mut dropped_bytes) = (0, 0);
        while dropped_packets < self.config.drop_batch.max(1) && dropped_bytes < threshold.max(1) {
            let Some(packet) = flow.fifo.pop() else {
                break;
            };
            dropped_packets += 1;
            dropped_bytes += u64::from(packet.len_bytes);
            verdicts.drop_packet(packet, DropReason::QueueFull, now);
        }
        self.packets -= dropped_packets as usize;
        self.bytes -= dropped_bytes;
    }
}

impl Queue for FqCodel {
    fn enqueue(&mut self, now: Instant, mut packet: Packet, verdicts: &mut Verdicts) {
        if !self.limits.admits(0, 0, packet.len_bytes) {
            verdicts.drop_packet(packet, DropReason::QueueFull, now);
            return;
        }
        let index = self.bucket(packet.flow);
        packet.enqueued = now;
        self.packets += 1;
        self.bytes += u64::from(packet.len_bytes);
        let flow = &mut self.flows[index];
        flow.fifo.push(packet);
        if flow.list.is_none() {
            flow.list = Some(List::New);
            flow.deficit = i64::from(self.config.quantum);
            self.new_flows.push_back(index as u32);
        }
        while self.over_limit() {
            self.drop_from_fattest(now, verdicts);
        }
    }

    fn dequeue(&mut self, now: Instant, verdicts: &mut Verdicts) -> Option<Packet> {
        loop {
            let (list, index) = if let Some(&index) = self.new_flows.front() {
                (List::New, index)
            } else if let Some(&index) = self.old_flows.front() {
                (List::Old, index)
            } else {
                return None;
            };
            let flow = &mut self.flows[index as usize];
            if flow.deficit <= 0 {
                flow.deficit += i64::from(self.config.quantum);
                flow.list = Some(List::Old);
                self.pop_list(list);
                self.old_flows.push_back(index);
                continue;
            }
            let before = (flow.fifo.len_packets(), flow.fifo.len_bytes());
            let packet = flow
                .codel
                .dequeue(now, &self.config.codel, &mut flow.fifo, verdicts);
            self.packets -= before.0 - flow.fifo.len_packets();
            self.bytes -= before.1 - flow.fifo.len_bytes();
            match packet {
                Some(packet) => {
                    flow.deficit -= i64::from(packet.len_bytes);
                    return Some(packet);
                }
                None => {
                    // An empty new flow goes to the old list so it cannot starve old flows by
                    // re-entering as new (RFC 8290 section 4.2); an empty old flow leaves.
                    flow.list = (list == List::New).then_some(List::Old);
                    self.pop_list(list);
                    if list == List::New {
                        self.old_flows.push_back(index);
                    }
                }
            }
        }
    }

    fn len_packets(&self) -> usize {
        self.packets
    }

    fn len_bytes(&self) -> u64 {
        self.bytes
    }

    fn drain(&mut self) -> Vec<Packet> {
        let mut packets: Vec<Packet> = self
            .flows
            .iter_mut()
            .flat_map(|flow| {
                flow.list = None;
                flow.fifo.drain_all()
            })
            .collect();
        packets.sort_by_key(|p| (p.enqueued, p.id));
        self.new_flows.clear();
        self.old_flows.clear();
        self.packets = 0;
        self.bytes = 0;
        packets
    }
}

impl FqCodel {
    fn pop_list(&mut self, list: List) {
        match list {
            List::New => self.new_flows.pop_front(),
            List::Old => self.old_flows.pop_front(),
        };
    }

    fn over_limit(&self) -> bool {
        self.packets > self.limits.packets as usize
            || self.limits.bytes.is_some_and(|limit| self.bytes > limit)
    }
}

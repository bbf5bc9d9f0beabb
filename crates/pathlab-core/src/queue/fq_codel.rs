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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Ecn, FlowHash};
    use crate::queue::testing::{run, Source};
    use crate::units::BitsPerSec;

    const LINE: BitsPerSec = BitsPerSec::mbit(10);

    /// A packet of flow `flow` and `bytes` (not ECN-capable) enqueued at `now`.
    fn arrive(
        queue: &mut FqCodel,
        now: Instant,
        (flow, bytes): (FlowHash, u32),
        verdicts: &mut Verdicts,
    ) {
        queue.enqueue(
            now,
            Packet::synthetic(now, bytes, flow, Ecn::NotEct),
            verdicts,
        );
    }

    fn fq(packets: u32) -> FqCodel {
        let fq = FqCodel::new(
            FqCodelConfig::default(),
            Limits {
                packets,
                bytes: None,
            },
            Rng::seed_from(7),
        );
        assert_ne!(fq.bucket(1), fq.bucket(2), "the test needs two queues");
        fq
    }

    /// A sparse flow (100 B every 10 ms) beside a bulk flow offering twice the line rate.
    ///
    /// RFC 8290 section 4.2 (and 1.3): a flow with no queue, once the scheduler has found
    /// it empty and removed it, enters the new list on its next packet and is served before
    /// any old flow. The bulk flow alone is on the old list; after the sparse packet is
    /// sent, the sparse flow is moved to the old list's tail and removed as soon as the
    /// round reaches it, after at most quantum + one packet of bulk (2 x 1.2 ms), long
    /// before its next packet 10 ms later. So each sparse packet waits only for the bulk
    /// packet being transmitted when it arrives: sojourn < 1500 x 8 / 10 Mbit/s = 1.2 ms.
    #[test]
    fn fq_codel_sparse_flow_skips_the_bulk_queue() {
        let mut queue = fq(10_240);
        let mut sparse = Source::cbr(2, 100, BitsPerSec::kbit(80));
        sparse.start = Instant::from_micros(333);
        let sources = [Source::cbr(1, 1500, BitsPerSec::mbit(20)), sparse];
        let out = run(&mut queue, &sources, LINE, Instant::from_secs(20), 1);
        let one_bulk_packet = LINE.serialization_time(1500);
        // Skip the first sparse packet: at 333 us the bulk flow is itself still new and
        // spends its first quantum (two packets) ahead of it.
        let sparse_sojourns = out.sojourns(Some(2), Instant::from_millis(5));
        assert!(sparse_sojourns.len() >= 1998);
        assert!(sparse_sojourns.iter().all(|s| *s < one_bulk_packet));
        assert!(out.drops.iter().all(|d| d.flow == 1));
    }

    /// Deficit round robin with a byte quantum gives backlogged flows equal bytes whatever
    /// their packet sizes (RFC 8290 section 4, after Shreedhar and Varghese 1996): each
    /// flow's lead is bounded by quantum + one packet, so over 30 s at 10 Mbit/s
    /// (37.5 MB) the shares differ by far less than 1%.
    #[test]
    fn fq_codel_gives_backlogged_flows_equal_bytes() {
        let mut queue = fq(10_240);
        let sources = [
            Source::cbr(1, 1500, BitsPerSec::mbit(10)),
            Source::cbr(2, 300, BitsPerSec::mbit(10)),
        ];
        let out = run(&mut queue, &sources, LINE, Instant::from_secs(30), 1);
        let from = Instant::from_secs(1);
        let (a, b) = (out.bytes_of(1, from), out.bytes_of(2, from));
        let ratio = a as f64 / b as f64;
        assert!((ratio - 1.0).abs() < 0.01, "{a} vs {b}");
    }

    /// Overflow drops come from the flow with the most bytes, a batch at a time: up to
    /// drop_batch packets or half its backlog (RFC 8290 section 4.1, Linux's batch drop).
    #[test]
    fn fq_codel_overflow_drops_the_fattest_flow() {
        let mut queue = fq(100);
        let mut verdicts = Verdicts::default();
        let now = Instant::ZERO;
        for _ in 0..80 {
            arrive(&mut queue, now, (1, 1500), &mut verdicts);
        }
        for _ in 0..21 {
            arrive(&mut queue, now, (2, 100), &mut verdicts);
        }
        // 101 > 100 packets: half of flow 1's 120,000 bytes is 40 packets (< 64).
        assert_eq!(verdicts.dropped.len(), 40);
        assert!(verdicts
            .dropped
            .iter()
            .all(|d| d.packet.flow == 1 && d.reason == DropReason::QueueFull));
        assert_eq!(
            (queue.len_packets(), queue.len_bytes()),
            (61, 40 * 1500 + 2100)
        );

        // Under load: a flow under its fair share never loses a packet to overflow.
        let mut queue = fq(200);
        let sources = [
            Source::cbr(1, 1500, BitsPerSec::mbit(30)),
            Source::poisson(2, 500, BitsPerSec::mbit(3)),
        ];
        let out = run(&mut queue, &sources, LINE, Instant::from_secs(10), 1);
        assert!(out.drops_for(DropReason::QueueFull) > 1000);
        assert!(out.drops.iter().all(|d| d.flow == 1));
    }

    /// RFC 8290 section 4.2: a new flow that empties goes to the old list (so it cannot
    /// come back as new at once), and an empty old flow leaves the lists.
    #[test]
    fn fq_codel_moves_an_emptied_new_flow_to_the_old_list() {
        let mut queue = fq(100);
        let mut verdicts = Verdicts::default();
        let now = Instant::ZERO;
        let a = queue.bucket(1);
        arrive(&mut queue, now, (1, 100), &mut verdicts);
        assert_eq!(queue.flows[a].list, Some(List::New));
        assert!(queue.dequeue(now, &mut verdicts).is_some());
        // Another flow keeps the scheduler busy, so the walk stops after flow 1 moved.
        arrive(&mut queue, now, (2, 100), &mut verdicts);
        assert_eq!(queue.dequeue(now, &mut verdicts).map(|p| p.flow), Some(2));
        assert_eq!(queue.flows[a].list, Some(List::Old));
        // A packet now joins flow 1 on the old list, behind nobody but not as new.
        arrive(&mut queue, now, (1, 100), &mut verdicts);
        assert_eq!(queue.flows[a].list, Some(List::Old));
        assert!(queue.dequeue(now, &mut verdicts).is_some());
        assert!(queue.dequeue(now, &mut verdicts).is_none());
        assert!(queue
            .flows
            .iter()
            .all(|f| f.list.is_none() || f.fifo.len_packets() == 0));
        assert!(queue.new_flows.is_empty() && queue.old_flows.is_empty());
    }
}

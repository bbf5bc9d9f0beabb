//! Links: the stages of one direction composed, with counters and the per-packet record.
//!
//! A packet crosses a [`Link`] in this order:
//!
//! 1. **impairments**, instantly on arrival: loss (or ECN mark), duplication, corruption;
//! 2. the **bottleneck**: a queue ([`crate::queue`]) in front of a serializer whose timing a
//!    rate model gives (fixed, scheduled, trace; and a packet rate, `pps`, beside or
//!    instead of them). Without a rate there is no bottleneck and no queue: packets go
//!    straight on;
//! 3. **delay**: propagation delay with jitter, and reordering;
//! 4. **slotting**, if asked.
//!
//! This is netem's order, with one deliberate difference: the queue limit bounds only the
//! packets waiting for the bottleneck, not those in propagation. netem counts delayed
//! packets against `limit`, so `delay 100ms` at 1 Gbit/s silently drops with the default
//! limit of 1000; a wire does not.
//!
//! Usage: call [`Link::enqueue`] for each arriving packet, [`Link::dequeue`] until it returns
//! `None`, and come back at [`Link::poll_at`]. Every call takes the current time, which must
//! never go backwards. Internal events (a transmission ending, a delay expiring) are
//! processed at their exact virtual instants whenever the link is next called, so the
//! outcome does not depend on how late the caller is.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::packet::{Ecn, Packet};
use crate::queue::{self, Queue};
use crate::record::{PacketRecord, Recorder};
use crate::rng::Rng;
use crate::spec::LinkSpec;
use crate::stage::delay::DelayStage;
use crate::stage::impair::{Corrupt, Duplicate};
use crate::stage::loss::LossStage;
use crate::stage::rate::{RateError, RateModel};
use crate::stage::slot::SlotStage;
use crate::stage::Stage;
use crate::time::{Duration, Instant};
use crate::units::BitsPerSec;
use crate::verdict::{DropReason, Dropped, Verdicts};

/// Why a link cannot be built from a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The rate part of the spec cannot be used.
    #[error(transparent)]
    Rate(#[from] RateError),
}

/// Packet and byte counts of a link since it was built.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    /// Packets that arrived.
    pub packets_in: u64,
    /// Bytes that arrived.
    pub bytes_in: u64,
    /// Packets that left.
    pub packets_out: u64,
    /// Bytes that left.
    pub bytes_out: u64,
    /// Packets dropped, by reason (indexed by [`DropReason::index`]).
    pub dropped_packets: [u64; DropReason::ALL.len()],
    /// Bytes dropped, by reason.
    pub dropped_bytes: [u64; DropReason::ALL.len()],
    /// Packets marked CE instead of being dropped.
    pub ce_marked: u64,
    /// Copies made by `duplicate`.
    pub duplicated: u64,
    /// Packets with a flipped bit.
    pub corrupted: u64,
    /// Packets sent ahead of their turn by `reorder`.
    pub reordered: u64,
}

impl LinkCounters {
    /// Packets dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_packets.iter().sum()
    }

    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped_packets[reason.index()]
    }
}

/// The queue and the serializer behind it.
#[derive(Debug)]
struct Bottleneck {
    queue: Box<dyn Queue>,
    rate: RateModel,
    /// The latest instant the serializer's state was evaluated at.
    cursor: Instant,
    /// Packets being serialized or waiting in the ring below the discipline, with the
    /// instant their last bit leaves.
    in_service: VecDeque<(Instant, Packet)>,
    /// The spec's `ring`: how long before its transmission can start a packet leaves the
    /// discipline (zero: as it starts).
    ring: Duration,
    /// The instant [`serve`] last ran to: a packet that arrived then, into an empty
    /// discipline, leaves it no earlier.
    evaluated: Instant,
}

impl Bottleneck {
    fn new(queue: Box<dyn Queue>, rate: RateModel, spec: &LinkSpec) -> Bottleneck {
        Bottleneck {
            queue,
            rate,
            cursor: Instant::ZERO,
            in_service: VecDeque::new(),
            ring: spec.queue.ring.unwrap_or(Duration::ZERO),
            evaluated: Instant::ZERO,
        }
    }

    /// When the next transmission may start, if a packet is waiting.
    fn next_start(&self) -> Option<Instant> {
        (!self.queue.is_empty()).then(|| self.rate.next_start(self.cursor))
    }

    /// The next packet's transmission start, and when it leaves the discipline: then
    /// without a ring, else `ring` before (and not before [`Bottleneck::evaluated`]).
    fn next_commit(&self) -> Option<(Instant, Instant)> {
        let start = self.next_start()?;
        if self.ring == Duration::ZERO {
            return Some((start, start));
        }
        Some((start, (start - self.ring).max(self.evaluated)))
    }
}

/// Counters and per-packet records: the link's ground truth.
#[derive(Debug, Default)]
struct Truth {
    counters: LinkCounters,
    recorder: Option<Recorder>,
    /// Dropped packets kept for the caller, when asked (see [`Link::keep_dropped`]).
    dropped: Option<Vec<Dropped>>,
}

impl Truth {
    fn record(&mut self, id: u64) -> Option<&mut PacketRecord> {
        self.recorder.as_mut().and_then(|r| r.get_mut(id))
    }

    fn arrive(&mut self, packet: &Packet, duplicate_of: Option<u64>) {
        if duplicate_of.is_none() {
            self.counters.packets_in += 1;
            self.counters.bytes_in += u64::from(packet.len_bytes);
        }
        if let Some(recorder) = &mut self.recorder {
            recorder.start(PacketRecord {
                id: packet.id,
                tag: packet.tag,
                flow: packet.flow,
                len_bytes: packet.len_bytes,
                arrived: packet.arrival,
                ecn_on_arrival: packet.ecn,
                queue_len_on_arrival: None,
                dequeued: None,
                transmitted: None,
                departed: None,
                dropped: None,
                duplicate_of,
                ce_marked: false,
                corrupted: false,
                sent: None,
            });
        }
    }

    /// Counts and records the drops and marks a stage call produced.
    fn settle(&mut self, verdicts: &mut Verdicts) {
        self.counters.ce_marked += std::mem::take(&mut verdicts.ce_marked);
        for dropped in verdicts.dropped.drain(..) {
            let index = dropped.reason.index();
            self.counters.dropped_packets[index] += 1;
            self.counters.dropped_bytes[index] += u64::from(dropped.packet.len_bytes);
            if let Some(record) = self.record(dropped.packet.id) {
                record.dropped = Some((dropped.at, dropped.reason));
            }
            if let Some(kept) = &mut self.dropped {
                kept.push(dropped);
            }
        }
    }

    fn depart(&mut self, at: Instant, packet: &Packet) {
        self.counters.packets_out += 1;
        self.counters.bytes_out += u64::from(packet.len_bytes);
        if let Some(record) = self.record(packet.id) {
            record.departed = Some(at);
            record.ce_marked = packet.ecn == Ecn::Ce && record.ecn_on_arrival != Ecn::Ce;
            record.corrupted = packet.corrupted;
        }
    }
}

/// One direction of a path.
#[derive(Debug)]
pub struct Link {
    spec: LinkSpec,
    loss: Option<LossStage>,
    duplicate: Option<Duplicate>,
    corrupt: Option<Corrupt>,
    bottleneck: Option<Bottleneck>,
    delay: Option<DelayStage>,
    slot: Option<SlotStage>,
    /// Packets that have left the last stage, with their departure instant.
    ready: VecDeque<(Instant, Packet)>,
    verdicts: Verdicts,
    truth: Truth,
    last_id: u64,
    now: Instant,
    /// Scratch space for packets moving between stages, with the instant they moved.
    moving: Vec<(Instant, Packet)>,
    /// Seeds the stages built when the spec changes at run time.
    rebuild_rng: Rng,
    /// Delay and slot stages of earlier specs, still releasing the packets they held.
    retired_delays: Vec<DelayStage>,
    retired_slots: Vec<SlotStage>,
}

impl Link {
    /// Builds a link from a spec. Randomness is seeded by the spec's `seed` if it has one,
    /// else by `seed`; the same seed and the same arrivals give the same run.
    pub fn new(spec: &LinkSpec, seed: u64) -> Result<Link, LinkError> {
        let mut rng = Rng::seed_from(spec.seed.unwrap_or(seed));
        let bottleneck = RateModel::for_link(spec)?
            .map(|rate| Bottleneck::new(queue::build(&spec.queue, rng.fork()), rate, spec));
        let delay =
            (spec.delay.is_some() || spec.reorder.is_some() || spec.delay_quantiles.is_some())
                .then(|| {
                    let stage = DelayStage::new(spec.delay, spec.reorder, rng.fork());
                    match &spec.delay_quantiles {
                        Some(quantiles) => stage.replaying(quantiles),
                        None => stage,
                    }
                });
        Ok(Link {
            loss: spec
                .loss
                .map(|loss| LossStage::new(loss, spec.ecn, rng.fork())),
            duplicate: spec
                .duplicate
                .map(|chance| Duplicate::new(chance, rng.fork())),
            corrupt: spec.corrupt.map(|chance| Corrupt::new(chance, rng.fork())),
            bottleneck,
            delay,
            slot: spec.slot.map(|slot| SlotStage::new(slot, rng.fork())),
            spec: spec.clone(),
            ready: VecDeque::new(),
            verdicts: Verdicts::default(),
            truth: Truth::default(),
            last_id: 0,
            now: Instant::ZERO,
            moving: Vec::new(),
            rebuild_rng: rng,
            retired_delays: Vec::new(),
            retired_slots: Vec::new(),
        })
    }

    /// Changes what the link does from `now` on, as `tc qdisc change` does, without losing
    /// the packets it holds:
    /// - packets being serialized finish at their times, and packets already past the
    ///   bottleneck keep the delay and slot they were given (so after a delay decrease new
    ///   packets may overtake them, as after a route change);
    /// - the queue is kept as it is when the queue spec is unchanged; otherwise its packets
    ///   move, oldest first, into the new discipline (which may drop them if its limit is
    ///   smaller) and their sojourn counts from the change;
    /// - a new rate starts at `now` (a schedule's first step begins then);
    /// - counters, ids and the record continue.
    pub fn set_spec(&mut self, now: Instant, spec: &LinkSpec) -> Result<(), LinkError> {
        self.advance(now);
        let seed = self.rebuild_rng.next_u64();
        let fresh = Link::new(spec, seed)?;
        let retiring = &mut self.truth.counters;
        retiring.duplicated += self.duplicate.as_ref().map_or(0, |d| d.duplicated);
        retiring.corrupted += self.corrupt.as_ref().map_or(0, |c| c.corrupted);
        retiring.reordered += self.delay.as_ref().map_or(0, |d| d.reordered);
        self.loss = fresh.loss;
        self.duplicate = fresh.duplicate;
        self.corrupt = fresh.corrupt;
        let same_queue = self.spec.queue == spec.queue;
        let same_rate = self.spec.rate == spec.rate && self.spec.packet_rate == spec.packet_rate;
        let mut orphans = Vec::new();
        self.bottleneck = match (self.bottleneck.take(), fresh.bottleneck) {
            (Some(old), Some(mut new)) => {
                let wire_free = old.in_service.back().map_or(now, |(end, _)| *end).max(now);
                if same_rate {
                    new.rate = old.rate;
                } else {
                    new.rate = new.rate.with_origin(now);
                }
                new.cursor = old.cursor.max(wire_free);
                new.in_service = old.in_service;
                new.evaluated = old.evaluated;
                if same_queue {
                    new.queue = old.queue;
                } else {
                    let mut old_queue = old.queue;
                    for mut packet in old_queue.drain() {
                        // The new discipline counts sojourn from now; the truth keeps the
                        // time already waited.
                        packet.queue_delay += now.saturating_since(packet.enqueued);
                        new.queue.enqueue(now, packet, &mut self.verdicts);
                        self.truth.settle(&mut self.verdicts);
                    }
                }
                Some(new)
            }
            (Some(mut old), None) => {
                // No bottleneck any more: what it held goes on at once, in order, and the
                // record says the transmission ended now.
                for (_, packet) in old.in_service.drain(..) {
                    if let Some(record) = self.truth.record(packet.id) {
                        record.transmitted = Some(now);
                    }
                    orphans.push(packet);
                }
                orphans.extend(old.queue.drain());
                None
            }
            (None, Some(mut new)) => {
                new.rate = new.rate.with_origin(now);
                new.cursor = now;
                Some(new)
            }
            (None, None) => None,
        };
        if let Some(old) = std::mem::replace(&mut self.delay, fresh.delay) {
            if old.len_packets() > 0 {
                self.retired_delays.push(old);
            }
        }
        if let Some(old) = std::mem::replace(&mut self.slot, fresh.slot) {
            if old.len_packets() > 0 {
                self.retired_slots.push(old);
            }
        }
        self.spec = spec.clone();
        for packet in orphans {
            self.after_bottleneck(now, packet);
        }
        self.advance(now);
        Ok(())
    }

    /// Starts keeping a [`PacketRecord`] for every packet from now on.
    pub fn record(&mut self) {
        self.truth.recorder.get_or_insert_with(Recorder::new);
    }

    /// Stops recording (the records not drained are dropped with the recorder).
    pub fn stop_recording(&mut self) {
        self.truth.recorder = None;
    }

    /// Keeps every dropped packet from now on, for [`Link::take_dropped`] (an emulator
    /// writes them to a capture; a simulation attributes them to their load).
    pub fn keep_dropped(&mut self) {
        self.truth.dropped.get_or_insert_with(Vec::new);
    }

    /// The packets dropped since the last call, in drop order (empty unless
    /// [`Link::keep_dropped`] was called).
    pub fn take_dropped(&mut self) -> Vec<Dropped> {
        self.truth
            .dropped
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The records kept so far (see [`Link::record`]).
    pub fn recorder(&mut self) -> Option<&mut Recorder> {
        self.truth.recorder.as_mut()
    }

    /// The spec this link runs.
    pub fn spec(&self) -> &LinkSpec {
        &self.spec
    }

    /// Counters since the link was built.
    pub fn counters(&self) -> LinkCounters {
        let mut counters = self.truth.counters.clone();
        // The truth holds what stages replaced by `set_spec` counted; add the live ones.
        counters.duplicated += self.duplicate.as_ref().map_or(0, |d| d.duplicated);
        counters.corrupted += self.corrupt.as_ref().map_or(0, |c| c.corrupted);
        counters.reordered += self.delay.as_ref().map_or(0, |d| d.reordered);
        counters
    }

    /// The latest instant the link has been called at: it takes no packet before it.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Packets waiting in the bottleneck queue (not counting the one being serialized).
    pub fn queue_len_packets(&self) -> usize {
        self.bottleneck
            .as_ref()
            .map_or(0, |b| b.queue.len_packets())
    }

    /// Bytes waiting in the bottleneck queue.
    pub fn queue_len_bytes(&self) -> u64 {
        self.bottleneck.as_ref().map_or(0, |b| b.queue.len_bytes())
    }

    /// Packets inside the link: queued, being serialized, delayed, slotted or ready.
    pub fn in_flight(&self) -> usize {
        self.bottleneck
            .as_ref()
            .map_or(0, |b| b.queue.len_packets() + b.in_service.len())
            + self.delay.as_ref().map_or(0, Stage::len_packets)
            + self.slot.as_ref().map_or(0, Stage::len_packets)
            + self
                .retired_delays
                .iter()
                .map(Stage::len_packets)
                .sum::<usize>()
            + self
                .retired_slots
                .iter()
                .map(Stage::len_packets)
                .sum::<usize>()
            + self.ready.len()
    }

    /// The bottleneck's byte rate in force at `now`, if the link has one (a link limited
    /// only by `pps` has none).
    pub fn rate_at(&self, now: Instant) -> Option<BitsPerSec> {
        self.bottleneck.as_ref().and_then(|b| b.rate.rate_at(now))
    }

    /// Takes a packet arriving at `now`.
    pub fn enqueue(&mut self, now: Instant, mut packet: Packet) {
        self.advance(now);
        packet.id = self.next_id();
        packet.arrival = now;
        packet.queue_delay = Duration::ZERO;
        self.truth.arrive(&packet, None);
        if let Some(mtu) = self.spec.mtu {
            // The MTU counts the IP packet; the frame's Ethernet header comes on top.
            if packet.len_bytes > mtu + crate::wire::ethernet::HEADER_LEN as u32 {
                self.verdicts.drop_packet(packet, DropReason::Mtu, now);
                self.truth.settle(&mut self.verdicts);
                return;
            }
        }

        let packet = match &mut self.loss {
            Some(loss) => {
                loss.enqueue(now, packet, &mut self.verdicts);
                let kept = loss.dequeue(now);
                self.truth.settle(&mut self.verdicts);
                kept
            }
            None => Some(packet),
        };
        let Some(packet) = packet else { return };

        let mut moving = std::mem::take(&mut self.moving);
        match &mut self.duplicate {
            Some(duplicate) => {
                let original = packet.id;
                duplicate.enqueue(now, packet, &mut self.verdicts);
                // The first packet out is the original; any other is a copy with its own id.
                while let Some(mut copy) = duplicate.dequeue(now) {
                    if !moving.is_empty() {
                        self.last_id += 1;
                        copy.id = self.last_id;
                        self.truth.arrive(&copy, Some(original));
                    }
                    moving.push((now, copy));
                }
            }
            None => moving.push((now, packet)),
        }
        for (_, packet) in moving.drain(..) {
            let packet = match &mut self.corrupt {
                Some(corrupt) => {
                    corrupt.enqueue(now, packet, &mut self.verdicts);
                    corrupt.dequeue(now).expect("corruption keeps the packet")
                }
                None => packet,
            };
            self.enter_bottleneck(now, packet);
        }
        self.moving = moving;
        self.advance(now);
    }

    /// A packet that has left the link by `now`, if any. Call until `None`.
    pub fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        self.dequeue_timed(now).map(|(_, packet)| packet)
    }

    /// As [`Link::dequeue`], with the instant the packet left the link in the model; an
    /// emulator that sends it later than that knows by how much it was late.
    pub fn dequeue_timed(&mut self, now: Instant) -> Option<(Instant, Packet)> {
        self.advance(now);
        let (at, _) = self.ready.front()?;
        if *at > now {
            return None;
        }
        self.ready.pop_front()
    }

    /// When the link next needs to be called (a packet will leave, or an internal event is
    /// due), or `None` if it is empty. May be earlier than a departure: calling then is cheap.
    pub fn poll_at(&self) -> Option<Instant> {
        let candidates = [
            self.ready.front().map(|(t, _)| *t),
            self.bottleneck
                .as_ref()
                .and_then(|b| b.in_service.front().map(|(t, _)| *t)),
            self.bottleneck.as_ref().and_then(Bottleneck::next_start),
            self.delay.as_ref().and_then(Stage::poll_at),
            self.slot.as_ref().and_then(Stage::poll_at),
        ];
        let retired = self
            .retired_delays
            .iter()
            .filter_map(Stage::poll_at)
            .chain(self.retired_slots.iter().filter_map(Stage::poll_at));
        candidates.into_iter().flatten().chain(retired).min()
    }

    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    fn enter_bottleneck(&mut self, now: Instant, packet: Packet) {
        match &mut self.bottleneck {
            Some(bottleneck) => {
                let queued = bottleneck.queue.len_packets() as u32;
                if let Some(record) = self.truth.record(packet.id) {
                    record.queue_len_on_arrival = Some(queued);
                }
                if bottleneck.queue.is_empty() {
                    bottleneck.cursor = bottleneck.cursor.max(now);
                }
                bottleneck.queue.enqueue(now, packet, &mut self.verdicts);
                self.truth.settle(&mut self.verdicts);
            }
            None => self.after_bottleneck(now, packet),
        }
    }

    /// Hands a packet whose last bit left the bottleneck at `at` to the delay stage.
    fn after_bottleneck(&mut self, at: Instant, packet: Packet) {
        match &mut self.delay {
            Some(delay) => delay.enqueue(at, packet, &mut self.verdicts),
            None => self.after_delay(at, packet),
        }
    }

    fn after_delay(&mut self, at: Instant, packet: Packet) {
        if let Some(slot) = &mut self.slot {
            slot.enqueue(at, packet, &mut self.verdicts);
        } else {
            self.truth.depart(at, &packet);
            self.ready.push_back((at, packet));
        }
    }

    /// Runs every internal event due at or before `now`, each at its own instant.
    fn advance(&mut self, now: Instant) {
        debug_assert!(now >= self.now, "time went backwards: {now} < {}", self.now);
        self.now = self.now.max(now);
        let mut moving = std::mem::take(&mut self.moving);

        if let Some(bottleneck) = &mut self.bottleneck {
            serve(
                bottleneck,
                now,
                &mut self.verdicts,
                &mut self.truth,
                &mut moving,
            );
            for (at, packet) in moving.drain(..) {
                self.after_bottleneck(at, packet);
            }
        }
        release_all(&mut self.delay, &mut self.retired_delays, now, &mut moving);
        for (at, packet) in moving.drain(..) {
            self.after_delay(at, packet);
        }
        release_all(&mut self.slot, &mut self.retired_slots, now, &mut moving);
        for (at, packet) in moving.drain(..) {
            self.truth.depart(at, &packet);
            self.ready.push_back((at, packet));
        }
        self.moving = moving;
    }
}

/// Takes what a stage of the link (`current`, where it has one) and the stages `set_spec`
/// retired in its place release by `now`.
#[inline]
fn release_all<S: Stage>(
    current: &mut Option<S>,
    retired: &mut Vec<S>,
    now: Instant,
    out: &mut Vec<(Instant, Packet)>,
) {
    if let Some(stage) = current {
        release(stage, now, out);
    }
    if !retired.is_empty() {
        release_retired(retired, now, out);
    }
}

/// Takes what stages retired by `set_spec` release by `now`, merged in time order with what
/// `out` already holds, and forgets the ones that are empty. Off the hot path: retired
/// stages exist only for a while after a change.
#[cold]
#[inline(never)]
fn release_retired<S: Stage>(retired: &mut Vec<S>, now: Instant, out: &mut Vec<(Instant, Packet)>) {
    for stage in retired.iter_mut() {
        release(stage, now, out);
    }
    retired.retain(|stage| stage.len_packets() > 0);
    out.sort_by_key(|(at, _)| *at);
}

/// Takes every packet `stage` releases by `now`, with its release instant.
fn release(stage: &mut impl Stage, now: Instant, out: &mut Vec<(Instant, Packet)>) {
    while let Some(at) = stage.poll_at().filter(|at| *at <= now) {
        match stage.dequeue(at) {
            Some(packet) => out.push((at, packet)),
            None => break,
        }
    }
}

/// Runs the bottleneck's transmissions up to `now`; packets whose last bit has left go to
/// `out` with that instant.
fn serve(
    bottleneck: &mut Bottleneck,
    now: Instant,
    verdicts: &mut Verdicts,
    truth: &mut Truth,
    out: &mut Vec<(Instant, Packet)>,
) {
    loop {
        let next = bottleneck
            .next_commit()
            .filter(|(_, commit)| *commit <= now);
        // Transmissions that end by the next commit (or by now) leave first, in order.
        let horizon = next.map_or(now, |(_, commit)| commit);
        while bottleneck
            .in_service
            .front()
            .is_some_and(|(end, _)| *end <= horizon)
        {
            out.push(bottleneck.in_service.pop_front().expect("front exists"));
        }
        let Some((start, commit)) = next else { break };
        let ready = bottleneck.cursor;
        bottleneck.cursor = start;
        let packet = bottleneck.queue.dequeue(commit, verdicts);
        truth.settle(verdicts);
        let Some(mut packet) = packet else {
            // A queue returns nothing only when empty; stop rather than spin if one errs.
            if bottleneck.queue.is_empty() {
                continue;
            }
            debug_assert!(false, "queue returned None while holding packets");
            break;
        };
        // Plus any wait carried over from a discipline replaced by `set_spec`; the ring's
        // is the transmission's.
        packet.queue_delay += commit.saturating_since(packet.enqueued);
        let end = bottleneck
            .rate
            .transmit_ready(ready, start, packet.len_bytes);
        if let Some(record) = truth.record(packet.id) {
            record.dequeued = Some(commit);
            record.transmitted = Some(end);
        }
        bottleneck.in_service.push_back((end, packet));
    }
    bottleneck.evaluated = bottleneck.evaluated.max(now);
}

/// Two links, one per direction.
#[derive(Debug)]
pub struct Path {
    /// From side A to side B.
    pub forward: Link,
    /// From side B to side A.
    pub reverse: Link,
}

impl Path {
    /// A path whose directions run their own specs, seeded independently from `seed`.
    pub fn new(forward: &LinkSpec, reverse: &LinkSpec, seed: u64) -> Result<Path, LinkError> {
        let mut rng = Rng::seed_from(seed);
        Ok(Path {
            forward: Link::new(forward, rng.next_u64())?,
            reverse: Link::new(reverse, rng.next_u64())?,
        })
    }

    /// The earlier of the two links' next deadlines.
    pub fn poll_at(&self) -> Option<Instant> {
        match (self.forward.poll_at(), self.reverse.poll_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{DelaySpec, Distribution, FixedRate, QueueSpec, RateSpec};
    use crate::units::Probability;

    fn spec() -> LinkSpec {
        LinkSpec {
            delay: Some(DelaySpec {
                delay: Duration::from_millis(7),
                jitter: Duration::ZERO,
                correlation: Probability::ZERO,
                distribution: Distribution::Uniform,
            }),
            rate: Some(RateSpec::Fixed(FixedRate {
                rate: BitsPerSec::mbit(10),
                packet_overhead: 0,
                cell_size: 0,
                cell_overhead: 0,
            })),
            queue: QueueSpec {
                limit_packets: Some(20),
                ..QueueSpec::default()
            },
            ..LinkSpec::default()
        }
    }

    /// Offers 15 Mbit/s of 1500-byte packets for `packets` packets; `poll_every` is how often
    /// the caller comes back to dequeue (`None`: exactly at every `poll_at`).
    fn drive(packets: u64, poll_every: Option<Duration>) -> (Link, Vec<(Instant, u64)>) {
        let mut link = Link::new(&spec(), 9).expect("valid");
        link.record();
        let gap = Duration::from_nanos(800_000); // 1500 B at 15 Mbit/s
        let mut departures = Vec::new();
        let mut next_arrival = Instant::ZERO;
        let mut sent = 0;
        let mut next_poll = Instant::ZERO;
        loop {
            let due = match poll_every {
                None => link.poll_at(),
                Some(_) => Some(next_poll),
            };
            let now = if sent < packets {
                due.map_or(next_arrival, |d| d.min(next_arrival))
            } else {
                match due {
                    Some(d) if link.in_flight() > 0 => d,
                    _ => break,
                }
            };
            while let Some(packet) = link.dequeue(now) {
                departures.push((now, packet.id));
            }
            if sent < packets && now == next_arrival {
                link.enqueue(
                    now,
                    Packet::synthetic(now, 1500, 1, crate::packet::Ecn::NotEct),
                );
                sent += 1;
                next_arrival = now + gap;
            }
            if let Some(every) = poll_every {
                if now == next_poll {
                    next_poll = now + every;
                }
            }
        }
        (link, departures)
    }

    #[test]
    fn records_are_consistent_and_account_for_every_packet() {
        let (mut link, departures) = drive(2_000, None);
        let counters = link.counters();
        let records = link.recorder().expect("recording").drain_finished();
        assert_eq!(records.len(), 2_000);
        assert_eq!(
            counters.packets_in,
            counters.packets_out + counters.dropped_total()
        );
        assert_eq!(departures.len() as u64, counters.packets_out);
        let serialization = BitsPerSec::mbit(10).serialization_time(1500);
        for record in &records {
            match (record.departed, record.dropped) {
                (Some(departed), None) => {
                    let dequeued = record.dequeued.expect("went through the queue");
                    let transmitted = record.transmitted.expect("was transmitted");
                    assert!(record.arrived <= dequeued);
                    assert_eq!(transmitted - dequeued, serialization);
                    assert_eq!(departed - transmitted, Duration::from_millis(7));
                }
                (None, Some((at, reason))) => {
                    assert_eq!(reason, DropReason::QueueFull);
                    assert_eq!(at, record.arrived);
                    assert_eq!(record.queue_len_on_arrival, Some(20));
                }
                other => panic!(
                    "packet {} neither departed nor dropped: {other:?}",
                    record.id
                ),
            }
        }
    }

    /// The model processes internal events at their own instants, so a caller that comes
    /// back late (every 5 ms, like a coarse timer) sees the same departure times as one
    /// that calls exactly at every deadline; only the moment it learns of them differs.
    #[test]
    fn outcome_does_not_depend_on_how_late_the_caller_is() {
        let (mut exact, _) = drive(1_000, None);
        let (mut late, _) = drive(1_000, Some(Duration::from_millis(5)));
        let exact = exact.recorder().expect("recording").drain_all();
        let late = late.recorder().expect("recording").drain_all();
        assert_eq!(exact, late);
    }

    /// `emulate set` at the model level: after a change from 20 ms to 80 ms every packet
    /// sent after the change takes 80 ms and every packet sent before it still takes
    /// 20 ms; after the change back, new packets (20 ms) overtake those still on the
    /// 80 ms path, as after a route change.
    #[test]
    fn set_spec_changes_delay_from_the_next_packet_on() {
        let spec = |ms: u64| LinkSpec::parse(&format!("delay {ms}ms")).expect("valid");
        let mut link = Link::new(&spec(20), 1).expect("valid");
        let mut owd = Vec::new();
        let mut now = Instant::ZERO;
        for i in 0..300u64 {
            match i {
                100 => link.set_spec(now, &spec(80)).expect("valid"),
                200 => link.set_spec(now, &spec(20)).expect("valid"),
                _ => {}
            }
            let mut packet = Packet::synthetic(now, 100, 0, crate::packet::Ecn::NotEct);
            packet.tag = i as u32;
            link.enqueue(now, packet);
            now += Duration::from_millis(10);
            while let Some(at) = link.poll_at().filter(|at| *at <= now) {
                while let Some(packet) = link.dequeue(at) {
                    owd.push((packet.tag, at - packet.arrival));
                }
            }
        }
        while let Some(at) = link.poll_at() {
            while let Some(packet) = link.dequeue(at) {
                owd.push((packet.tag, at - packet.arrival));
            }
        }
        assert_eq!(owd.len(), 300);
        for (tag, delay) in &owd {
            let expected = if (100..200).contains(tag) { 80 } else { 20 };
            assert_eq!(*delay, Duration::from_millis(expected), "packet {tag}");
        }
        let order: Vec<u32> = owd.iter().map(|(tag, _)| *tag).collect();
        assert!(
            order.windows(2).any(|w| w[0] > w[1]),
            "new packets overtake after 80 -> 20"
        );
    }

    /// `mtu 1400` passes a 1400-byte IP packet (a 1414-byte frame) and drops one byte more,
    /// counted and recorded as `mtu`.
    #[test]
    fn mtu_drops_longer_packets_and_says_why() {
        let mut link = Link::new(&LinkSpec::parse("mtu 1400").expect("valid"), 1).expect("valid");
        link.record();
        for len in [1414, 1415, 100, 1514] {
            link.enqueue(
                Instant::ZERO,
                Packet::synthetic(Instant::ZERO, len, 0, crate::packet::Ecn::NotEct),
            );
        }
        let mut passed = Vec::new();
        while let Some(packet) = link.dequeue(Instant::ZERO) {
            passed.push(packet.len_bytes);
        }
        assert_eq!(passed, vec![1414, 100]);
        let counters = link.counters();
        assert_eq!(counters.dropped(DropReason::Mtu), 2);
        assert_eq!(counters.dropped_total(), 2);
        let records = link.recorder().expect("recording").drain_all();
        let dropped: Vec<u32> = records
            .iter()
            .filter(|r| r.dropped.map(|d| d.1) == Some(DropReason::Mtu))
            .map(|r| r.len_bytes)
            .collect();
        assert_eq!(dropped, vec![1415, 1514]);
    }
}

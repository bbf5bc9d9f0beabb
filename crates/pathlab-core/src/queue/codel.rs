//! CoDel, RFC 8289: drop at dequeue when the minimum sojourn time over an interval has
//! stayed above target, at a rate that grows as the square root of the drop count.
//!
//! [`CodelState`] is the RFC's per-queue state machine (section 5's `dodequeue` and
//! `dequeue`), written against [`CodelQueue`] so FQ-CoDel runs one per flow.

use super::fifo::Fifo;
use super::{Limits, Queue};
use crate::packet::Packet;
use crate::spec::CodelConfig;
use crate::time::{Duration, Instant};
use crate::verdict::{DropReason, Verdicts};

/// Largest packet the RFC's `maxpacket` check allows for: one full Ethernet frame. CoDel
/// never drops when no more than this is queued, since the link is then not the cause.
pub const MAX_PACKET_BYTES: u64 = 1514;

/// What CoDel needs of the queue it manages.
pub trait CodelQueue {
    /// Removes the head packet.
    fn pop(&mut self) -> Option<Packet>;
    /// Bytes still queued.
    fn bytes(&self) -> u64;
}

/// The per-queue CoDel state machine (RFC 8289 section 5).
#[derive(Debug, Clone, Default)]
pub struct CodelState {
    /// When the sojourn time first went (and stayed) above target, plus one interval.
    first_above_time: Option<Instant>,
    /// When the next drop is due while dropping.
    drop_next: Instant,
    /// Drops since entering the dropping state.
    count: u32,
    /// `count` when the dropping state was last entered.
    lastcount: u32,
    dropping: bool,
}

impl CodelState {
    /// Packets dropped since the dropping state was last entered.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether CoDel is in its dropping state.
    pub fn is_dropping(&self) -> bool {
        self.dropping
    }

    fn control_law(t: Instant, interval: Duration, count: u32) -> Instant {
        t + Duration::from_secs_f64(interval.as_secs_f64() / f64::from(count.max(1)).sqrt())
    }

    /// The RFC's `dodequeue`: the head packet and whether it may be dropped.
    fn dodequeue(
        &mut self,
        now: Instant,
        config: &CodelConfig,
        queue: &mut impl CodelQueue,
        verdicts: &mut Verdicts,
    ) -> (Option<Packet>, bool) {
        let Some(mut packet) = queue.pop() else {
            self.first_above_time = None;
            return (None, false);
        };
        let sojourn = now.saturating_since(packet.enqueued);
        if let Some(threshold) = config.ce_threshold {
            if sojourn > threshold && packet.mark_ce() {
                verdicts.ce_marked += 1;
            }
        }
        let mut ok_to_drop = false;
        if sojourn < config.target || queue.bytes() <= MAX_PACKET_BYTES {
            self.first_above_time = None;
        } else {
            match self.first_above_time {
                None => self.first_above_time = Some(now + config.interval),
                Some(first_above) => ok_to_drop = now >= first_above,
            }
        }
        (Some(packet), ok_to_drop)
    }

    /// The RFC's `dequeue`: the next packet to send, dropping (or, with ECN, marking) as the
    /// control law says.
    pub fn dequeue(
        &mut self,
        now: Instant,
        config: &CodelConfig,
        queue: &mut impl CodelQueue,
        verdicts: &mut Verdicts,
    ) -> Option<Packet> {
        let (mut packet, mut ok_to_drop) = self.dodequeue(now, config, queue, verdicts);
        let Some(head) = packet.take() else {
            self.dropping = false;
            return None;
        };
        packet = Some(head);
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                let current = packet.take().expect("a packet is held while dropping");
                self.count += 1;
                if let Some(marked) =
                    verdicts.drop_or_mark(current, DropReason::Codel, now, config.ecn)
                {
                    // A marked packet is sent; the next mark is scheduled as a drop would be.
                    self.drop_next = Self::control_law(self.drop_next, config.interval, self.count);
                    return Some(marked);
                }
                (packet, ok_to_drop) = self.dodequeue(now, config, queue, verdicts);
                if ok_to_drop {
                    self.drop_next = Self::control_law(self.drop_next, config.interval, self.count);
                } else {
                    self.dropping = false;
                }
            }
        } else if ok_to_drop {
            let current = packet.take().expect("checked above");
            let marked = verdicts.drop_or_mark(current, DropReason::Codel, now, config.ecn);
            if marked.is_some() {
                packet = marked;
            } else {
                (packet, _) = self.dodequeue(now, config, queue, verdicts);
            }
            self.dropping = true;
            // Re-entering soon after leaving: resume near the drop rate that worked.
            let delta = self.count.saturating_sub(self.lastcount);
            self.count = 1;
            if delta > 1
                && now.saturating_since(self.drop_next) < config.interval.saturating_mul(16)
            {
                self.count = delta;
            }
            self.drop_next = Self::control_law(now, config.interval, self.count);
            self.lastcount = self.count;
        }
        packet
    }
}

/// A single FIFO managed by CoDel.
#[derive(Debug)]
pub struct Codel {
    fifo: Fifo,
    state: CodelState,
    config: CodelConfig,
    limits: Limits,
}

impl Codel {
    /// A CoDel queue.
    pub fn new(config: CodelConfig, limits: Limits) -> Codel {
        Codel {
            fifo: Fifo::default(),
            state: CodelState::default(),
            config,
            limits,
        }
    }

    /// The state machine, for inspection.
    pub fn state(&self) -> &CodelState {
        &self.state
    }
}

impl Queue for Codel {
    fn enqueue(&mut self, now: Instant, packet: Packet, verdicts: &mut Verdicts) {
        self.fifo.offer(now, packet, self.limits, verdicts);
    }

    fn dequeue(&mut self, now: Instant, verdicts: &mut Verdicts) -> Option<Packet> {
        self.state
            .dequeue(now, &self.config, &mut self.fifo, verdicts)
    }

    held_in_fifo!(fifo);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::queue::testing::{quantile, run, Source};
    use crate::queue::TailDrop;
    use crate::units::BitsPerSec;

    const LINE: BitsPerSec = BitsPerSec::mbit(10);

    fn limits(packets: u32) -> Limits {
        Limits {
            packets,
            bytes: None,
        }
    }

    /// Unresponsive CBR at 15 Mbit/s into 10 Mbit/s, 1500 B packets, limit 1000.
    ///
    /// Theory (RFC 8289 sections 5.4-5.5). The excess arrival rate is
    /// e = (15 - 10) Mbit/s / 12,000 bit = 416.7 packets/s. In the dropping state the
    /// control law drops sqrt(count) / interval packets per second, so drops only match
    /// the excess once count >= (e x interval)^2 = 1736, reached from count 1 after
    /// sum 1..1736 of interval / sqrt(k) ~= 2 interval sqrt(1736) = 8.3 s (the ramp-up).
    /// After that the queue does not settle near target: each dropping episode ends when
    /// the queue drains below target, and the next one restarts at count = delta, the
    /// drops of the previous episode. With s = sqrt(count) growing as t / (2 interval),
    /// the backlog over an episode is Q(s) = Q0 + (s0 - S)^2 - (s - S)^2, S = e interval
    /// = 41.7, a parabola in time; the periodic orbit (s1^2 = 2 s0^2) has slope -1.9 in
    /// the return map, so it is unstable and the backlog swings between ~0 and a peak
    /// bounded by the limit. Over a parabolic hump the backlog exceeds 3/4 of its peak
    /// half of the time, so the median sojourn is at most 3/4 of the peak, itself at most
    /// the limit's delay: median <= 0.75 x 1000 x 1500 x 8 / 10 Mbit/s = 900 ms, against
    /// exactly 1.2 s for tail drop. Every episode ends below target, and one lasts at most
    /// 2 interval (s1 - s0) with s0 >= 1 and (s1 - S)^2 <= limit, i.e. 14.5 s, so every
    /// 16 s window sees a sojourn under target. The limit only bites at the peaks: after
    /// the ramp-up, overflow drops stay under 5% of CoDel's.
    #[test]
    fn codel_against_unresponsive_overload() {
        let sources = [Source::cbr(1, 1500, BitsPerSec::mbit(15))];
        let end = Instant::from_secs(60);
        let ramp_up = Instant::from_secs(10);
        let full_queue = Duration::from_millis(1200); // 1000 x 1500 x 8 / 10 Mbit/s

        let mut tail = TailDrop::new(limits(1000));
        let tail_out = run(&mut tail, &sources, LINE, end, 1);
        let tail_median = quantile(tail_out.sojourns(None, ramp_up), 0.5);
        let one_packet = LINE.serialization_time(1500);
        assert!(tail_median <= full_queue && tail_median + one_packet >= full_queue);

        let mut codel = Codel::new(CodelConfig::default(), limits(1000));
        let out = run(&mut codel, &sources, LINE, end, 1);
        let median = quantile(out.sojourns(None, ramp_up), 0.5);
        assert!(
            median.as_secs_f64() <= 0.75 * full_queue.as_secs_f64(),
            "median sojourn {median:?}"
        );
        for window in 0..3 {
            let from = Instant::from_secs(10 + window * 16);
            let lowest = out
                .departures
                .iter()
                .filter(|d| d.at >= from && d.at < from + Duration::from_secs(16))
                .map(|d| d.sojourn)
                .min()
                .expect("the line is busy");
            assert!(
                lowest < Duration::from_millis(5),
                "window {window}: {lowest:?}"
            );
        }
        // The line never idles: 10 Mbit/s for the 50 s after the ramp-up, to a packet.
        let delivered = out.bytes_of(1, ramp_up);
        assert!(delivered.abs_diff(LINE.bytes_in(end - ramp_up)) <= 1500);
        // Every packet is accounted for, and the control law (not overflow) does the
        // dropping once it has ramped up.
        assert_eq!(
            out.offered as usize,
            out.departures.len() + out.drops.len() + codel.len_packets()
        );
        let late_overflow = out
            .drops
            .iter()
            .filter(|d| d.flow == 1 && d.at >= ramp_up && d.reason == DropReason::QueueFull)
            .count();
        let late_codel = out
            .drops
            .iter()
            .filter(|d| d.at >= ramp_up && d.reason == DropReason::Codel)
            .count();
        assert!(
            late_overflow * 20 < late_codel,
            "{late_overflow} vs {late_codel}"
        );
    }

    /// Below capacity the sojourn never stays above target for an interval: no drops.
    #[test]
    fn codel_never_drops_below_capacity() {
        for source in [
            Source::cbr(1, 1500, BitsPerSec::kbit(9_500)),
            Source::poisson(1, 1500, BitsPerSec::mbit(5)),
        ] {
            let mut codel = Codel::new(CodelConfig::default(), limits(1000));
            let out = run(&mut codel, &[source], LINE, Instant::from_secs(60), 2);
            assert!(
                out.drops.is_empty(),
                "{source:?}: {} drops",
                out.drops.len()
            );
            assert!(out.departures.len() > 20_000);
        }
    }

    /// RFC 8289 section 5.4: the first drop comes one interval after the sojourn first
    /// reached target; drop n + 1 is due interval / sqrt(n) after drop n (count = n after
    /// n drops; from the first drop's instant, then from each due time, as drop_next
    /// advances from itself), and happens at the first dequeue at or after it. At 20 Mbit/s into 10 Mbit/s the backlog never
    /// drains in 3 s (the law drops at most sqrt(225) / 100 ms = 150/s against an excess
    /// of 833/s), so CoDel stays in its dropping state throughout.
    #[test]
    fn codel_drop_times_follow_the_control_law() {
        let mut codel = Codel::new(CodelConfig::default(), limits(100_000));
        let sources = [Source::cbr(1, 1500, BitsPerSec::mbit(20))];
        let out = run(&mut codel, &sources, LINE, Instant::from_secs(3), 1);
        let service = LINE.serialization_time(1500).as_secs_f64();
        let drops: Vec<f64> = out.drops.iter().map(|d| d.at.as_secs_f64()).collect();
        assert!(out.drops.iter().all(|d| d.reason == DropReason::Codel));
        // Sojourn grows by half a service time per packet: it first reaches 5 ms at the
        // departure of packet k = ceil(5 ms / 0.6 ms) = 9, leaving at 9 x 1.2 ms.
        let first_above = 9.0 * service;
        let due = first_above + 0.1;
        assert!(drops[0] >= due - 1e-9 && drops[0] < due + service + 1e-9);
        // Entering the dropping state schedules the next drop from now, not from the due
        // time (the pseudo-code's control_law(now, count)).
        let mut due = drops[0];
        assert!(drops.len() > 100, "{} drops", drops.len());
        for (n, &at) in drops.iter().enumerate().skip(1) {
            due += 0.1 / (n as f64).sqrt();
            assert!(
                at >= due - 1e-6 && at < due + service + 1e-6,
                "drop {n} at {at}, due {due}"
            );
        }
        assert!(codel.state().is_dropping());
    }

    /// RFC 8289 section 5.5: re-entering the dropping state within 16 intervals of the
    /// last drop_next restarts at count = count - lastcount (the drops of the previous
    /// episode), not at 1.
    #[test]
    fn codel_restores_count_when_reentering_soon() {
        let config = CodelConfig::default();
        let mut codel = Codel::new(config, limits(100_000));
        let mut verdicts = Verdicts::default();
        let fill = |codel: &mut Codel, at: Instant, verdicts: &mut Verdicts| {
            for _ in 0..2000 {
                codel.enqueue(at, Packet::synthetic(at, 1500, 0, Ecn::NotEct), verdicts);
            }
        };
        fill(&mut codel, Instant::ZERO, &mut verdicts);
        let mut now = Instant::ZERO;
        while now < Instant::from_millis(600) {
            now += Duration::from_millis(1);
            codel.dequeue(now, &mut verdicts);
        }
        let first_episode_count = codel.state().count();
        let drops = verdicts.dropped.len() as u32;
        // The entry drop sets count to 1; each later drop adds one.
        assert_eq!(first_episode_count, drops);
        assert!(first_episode_count > 2);
        // Empty the queue: an empty dequeue leaves the dropping state.
        codel.drain();
        assert!(codel.dequeue(now, &mut verdicts).is_none());
        assert!(!codel.state().is_dropping());
        // Refill 200 ms later; the next entry is about 300 ms after drop_next.
        now += Duration::from_millis(200);
        fill(&mut codel, now, &mut verdicts);
        verdicts.dropped.clear();
        while verdicts.dropped.is_empty() {
            now += Duration::from_millis(1);
            codel.dequeue(now, &mut verdicts);
        }
        assert_eq!(codel.state().count(), first_episode_count - 1);
    }

    /// With ECN, ECN-capable packets are marked where they would be dropped, and
    /// `ce_threshold` marks every packet that waited longer than it.
    #[test]
    fn codel_marks_instead_of_dropping() {
        let mut source = Source::cbr(1, 1500, BitsPerSec::mbit(12));
        source.ecn = Ecn::Ect0;
        let config = CodelConfig {
            ecn: true,
            ..CodelConfig::default()
        };
        let mut codel = Codel::new(config, limits(100_000));
        let out = run(&mut codel, &[source], LINE, Instant::from_secs(10), 1);
        assert_eq!(out.drops_for(DropReason::Codel), 0);
        assert!(out.ce_marked > 10);

        let config = CodelConfig {
            ce_threshold: Some(Duration::from_millis(1)),
            ..CodelConfig::default()
        };
        let mut codel = Codel::new(config, limits(100_000));
        let out = run(&mut codel, &[source], LINE, Instant::from_secs(1), 1);
        for departure in &out.departures {
            assert_eq!(departure.ce, departure.sojourn > Duration::from_millis(1));
        }
    }

    /// RFC 8289 section 5.2: with no more than one MTU queued the link is not the cause
    /// of the delay, so CoDel never drops, however long that packet waits.
    #[test]
    fn codel_never_drops_with_only_one_packet_queued() {
        let mut codel = Codel::new(CodelConfig::default(), limits(1000));
        let mut verdicts = Verdicts::default();
        for i in 0..1000 {
            let at = Instant::from_millis(i * 60);
            codel.enqueue(
                at,
                Packet::synthetic(at, 1500, 0, Ecn::NotEct),
                &mut verdicts,
            );
            codel.dequeue(at + Duration::from_millis(50), &mut verdicts);
        }
        assert!(verdicts.dropped.is_empty());
    }
}

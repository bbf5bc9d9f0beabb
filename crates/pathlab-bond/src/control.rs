//! The per-line rate controller: pace each line just fast enough that its bottleneck queue
//! (the modem's buffer) holds about `target` of delay, from the one-way delay the receiver
//! reports.
//!
//! The receiver reports, every few tens of milliseconds, the lowest one-way delay sample it
//! saw on the line (its clock minus our timestamp, so the clocks' offset is in it) and how
//! many bytes arrived. The controller keeps the base delay (the minimum over a sliding
//! history, [`pathlab_probe::owd::BaseDelay`], as the seed asks because the clocks drift) and
//! reads the line's queueing delay as `sample - base`. The queue of a line fed at rate `r`
//! and drained at its capacity `C` grows as `dq/dt = r/C - 1`; choosing
//!
//! ```text
//! r = C_est x (1 + (target - q) / tau)
//! ```
//!
//! makes `dq/dt = -(q - target) / tau`: the queue settles at `target` with time constant
//! `tau`. While a queue shows (more than [`BUSY_QUEUE`] of the target), `C_est` is the
//! delivery rate the receiver measured, which a busy bottleneck makes exactly `C`. With no
//! queue the line is not full, the delivery rate is our own sending rate, and the same
//! formula grows it by `(target - q) / tau` per report: a gentle multiplicative probe (5%
//! per report with the defaults), which is how the line keeps probing for more. That pace
//! holds up to the capacity the line showed the last time it held a queue; beyond it the
//! step is taken per round trip, not per report, since the report that would stop it comes
//! a round trip late (a 70 ms line probed per report went 20% past its rate: queue peaks of
//! 28 ms).
//!
//! The probe stops at the first sign of a queue, not at the target: a probe that ran on
//! until the queue passed the target compounded 5% per report on a line that was already
//! full (the rate integrates the queue's error and the queue integrates the rate's: an
//! undamped loop), so each time a line filled up it went 15-20% past its rate before a
//! report a round trip late stopped it. Measured in virtual time on the `bond` recipe's
//! lines with a bulk flow of 8 to 14 Mbit/s (the surviving lines' 9 Mbit/s, give or take)
//! when the 12 Mbit/s line is cut: a call's one-way delay p99 after the cut 36-51 ms; with
//! the probe stopping at a quarter of the target, 27-33 ms (the fastest surviving line is
//! 20 ms away, the target 5 ms).
//!
//! A line that was not busy and becomes busy starts from at most twice what it delivered
//! (or the initial rate, or the capacity it showed): a rate it kept while idle was never
//! tested, and a line that sat idle at 8.4 Mbit/s beside a faster one doubled to 20 Mbit/s
//! when that one was cut, on a 6 Mbit/s line (a 53 ms queue). This is RFC 7661's rule that
//! a congestion window an idle sender did not use is not validated. After an idle spell of
//! [`IDLE_SPELL`] the rule holds until the line shows a queue, not for one report: a line
//! idle beside a faster one, cut to 1 Mbit/s by the rule, then ramped at twice the rate per
//! round trip from a rate its reports showed 100 ms late, and reached 16.7 Mbit/s on a
//! 6 Mbit/s line when the faster one was cut (a 38 ms queue under a call). So its ramp
//! grows from what it delivered, at most [`UNTESTED_RATE_GAIN`] of it, and the first sign
//! of a queue ([`BUSY_QUEUE`]) ends it: the backlog the cut moved onto it is there to fill
//! it. A line that showed its capacity (a queue of full datagrams) has tested that rate and
//! restarts at it at once, as a TCP sender keeps a congestion window it validated (RFC
//! 7661); a queue of small datagrams since (a packet limit's) does not unsay it. Restarting
//! from twice what it delivered, a TCP flow through the tunnel after a few seconds' idle
//! went at 1 Mbit/s for 0.75 s and took 3.5 s to reach 16 of its 18 Mbit/s; restarting at
//! the capacity, 8 Mbit/s in its first 250 ms and 18.7 after 2 s. Not a rate it carried
//! without a queue: from there the ramp's doubling, seen a report window late, went 1.56x
//! past a 6 Mbit/s line and put a 41 ms p99 on the call the cut moved to it (30 allowed).
//! Only for a line that was busy before its idle spell: one idle since the session
//! began starts as any line starts (held to twice what it delivered, a line idle for the
//! 2 s before its first flow carried 1.53-2.99 of its 3 Mbit/s on a machine with a busy
//! loop per core, against 2.99-3.00 as a start).
//!
//! A probe is held to what its feedback can stop: the delivery rate shows a change of the
//! sending rate a round trip and half its window late (the feedback lag), so a line paced
//! at `C_est x (1 + (target - q) / lag)` adds at most `target - q` of queue before a
//! report can stop it, if it was full. The per-round-trip probe beyond the capacity a line
//! showed went 13% past a 6 Mbit/s line's rate before its queue showed (3% per report over
//! a 40 ms round trip, seen 90 ms late): a 13 ms queue under a call. Not while ramping (a
//! line's start must keep pace with a TCP flow's), nor on a line paced in datagrams (its
//! bytes grow as packing fills its datagrams).
//!
//! Rates and bytes are the line's as its modem counts them: the receiver reports UDP
//! payloads and datagrams, and the controller adds [`RateController::set_overhead_bytes`]
//! (UDP and IP headers and the line's framing) per datagram, so the delivery rate is what
//! the modem forwarded and a rate `r` paces the line to exactly what a modem of rate `r`
//! carries, whatever the datagrams' sizes.
//!
//! A modem may also forward a bounded number of packets per second, whatever their size
//! (seed 000's ADSL modems: about 6,500). A pacer of bytes alone cannot hold such a line:
//! while data waits, datagrams are full and few; once the backlog empties, each small inner
//! packet leaves alone, the packet rate jumps past the modem's, a queue of 100 ms builds
//! and the rate is cut, the backlog grows again (measured in virtual time: 200-byte UDP
//! over 1,000 packets/s swung between 1.3 and 10 Mbit/s every 1.2 s, queue peaks of
//! 100 ms). So once a line shows a queue while its datagrams are small (their mean below
//! [`SMALL_DATAGRAMS`], half, of the largest it sent), the controller also paces its datagrams
//! ([`RateController::packet_rate`]): set from the datagrams the receiver counted, by the
//! same rule and factor as the bytes, so whichever of the two the modem runs out of first
//! holds the queue at target. A queue of full datagrams is a queue of bytes: the packet
//! limit is lifted. A line that never showed a queue of small datagrams has none.
//!
//! This is LEDBAT (RFC 6817) applied to a rate instead of a window: the same off-target
//! signal `(target - q)`, a target of a few ms instead of LEDBAT's 100 ms (a bonded line must
//! stay responsive, not just yield), and a set point from the measured delivery rate rather
//! than an additive window step, so it converges in a fraction of a second rather than over
//! many round trips. glorytun's "rate auto" judges congestion from the dispersion of a 100 ms
//! beat (rate = 7/8 of the received rate when receiving takes 1.125x longer than sending)
//! and cake-autorate from ping RTT growth of 30 ms: both react only once a queue tens of ms
//! long exists; the one-way delay sees a queue of one packet.
//!
//! Two more rules:
//! - **Loss** above [`LOSS_THRESHOLD`] in a report without a queue is a policer (a token
//!   bucket drops, it does not delay): the rate falls to what was delivered.
//! - **Drain**: a standing queue of `target` never drains, so it would end up in the base
//!   delay, and the base would creep up with every new target on top of it (LEDBAT's
//!   latecomer problem). Every [`ControllerConfig::drain_every`] the line runs at 3/4 of the
//!   delivery rate for a short while, its queue empties, and the base is measured clean. A
//!   line not kept busy drains by itself: its period restarts at each such report, so a
//!   drain never falls on a restart (3/4 of the little a flow's first round trips
//!   delivered: after 40 s idle, the tunnel's lines of 6 and 3 Mbit/s restarted at 3.2 and
//!   0.8, and a TCP flow carried 55% of its rate in its first second).
//! - **A queue that does not drain is a new base.** Above target the rate is set below the
//!   delivery rate, so a queue of ours empties within a few `tau`. One that stays above
//!   target for [`ControllerConfig::rebase_after`] (30 `tau`) without moving (its lowest
//!   samples within two targets of each other) is the path's delay grown for good (a 4G
//!   handover, a rerouted backhaul), not a queue: the base history restarts from those
//!   samples and the line ramps up again, instead of starving until the old base leaves
//!   the 30 s history. A bloated queue of someone else's moves with their sawtooth and is
//!   not taken for a base.

use pathlab_core::{BitsPerSec, Duration, Instant};
use pathlab_probe::owd::BaseDelay;

use crate::wire::Feedback;

/// Loss in one report, without a queue, above which the line is taken to be policed.
pub const LOSS_THRESHOLD: f64 = 0.05;
/// The delivery rate is measured over at least this long: over one 25 ms report a 1 Mbit/s
/// line delivers 2 frames, or 1, or 3 (a rate off by half either way), over 100 ms 8 to 9.
pub const DELIVERY_WINDOW: Duration = Duration::from_millis(100);
/// Datagrams delivered at a queue whose mean is below this fraction of the largest the line
/// sent are small: the queue may be the modem's packet limit, and the line is paced in
/// datagrams too.
pub const SMALL_DATAGRAMS: f64 = 0.5;
/// The lowest packet rate a line is paced at, datagrams per second (a keepalive every
/// 50 ms and a report every 25 ms are 60).
pub const MIN_PACKET_RATE: f64 = 100.0;
/// A queue of more than this fraction of the target shows that the bottleneck is busy: the
/// delivery rate is its capacity (see the module's doc). Not less: the lowest one-way delay
/// of a report over a jittery line is above the line's base even when the line is idle
/// (uniform 10 ms jitter, `tests/protocol.rs`'s reordering lines).
pub const BUSY_QUEUE: f64 = 0.25;
/// A line that becomes busy after it was not starts from at most this multiple of what it
/// delivered (see the module's doc).
pub const UNTESTED_RATE_GAIN: f64 = 2.0;
/// A line not busy for this long that becomes busy restarts as RFC 7661 restarts a
/// congestion window not validated: it grows from what it delivers until it shows a queue
/// (see the module's doc). A second, as RFC 7661's shortest pipeACK sampling period.
pub const IDLE_SPELL: Duration = Duration::from_secs(1);
/// Reports kept to measure the delivery rate over [`DELIVERY_WINDOW`].
const DELIVERY_HISTORY: usize = 32;

/// The controller's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerConfig {
    /// The queueing delay each line is held at.
    pub target: Duration,
    /// The time constant the queue converges to target with (at least; twice the line's
    /// round trip if that is longer, to stay stable with the feedback's delay).
    pub tau: Duration,
    /// The rate a line starts at.
    pub initial_rate: BitsPerSec,
    /// The rate no line goes below.
    pub min_rate: BitsPerSec,
    /// The rate no line goes above (the line's nominal rate, if the user gave it).
    pub max_rate: Option<BitsPerSec>,
    /// How often the line drains its queue to measure the base delay clean.
    pub drain_every: Duration,
    /// How long the base delay's history is.
    pub base_history: Duration,
    /// How long a queue above target that does not move is taken for a queue before it is
    /// taken for a new base delay.
    pub rebase_after: Duration,
}

impl Default for ControllerConfig {
    fn default() -> ControllerConfig {
        ControllerConfig {
            target: Duration::from_millis(5),
            tau: Duration::from_millis(100),
            initial_rate: BitsPerSec(1_000_000),
            min_rate: BitsPerSec(64_000),
            max_rate: None,
            drain_every: Duration::from_secs(10),
            base_history: Duration::from_secs(30),
            rebase_after: Duration::from_secs(3),
        }
    }
}

/// The controller's phase, for stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the first report.
    Starting,
    /// Holding the queue at target.
    Tracking,
    /// Running below the delivery rate so the queue empties.
    Draining,
}

/// What the previous report said, to difference cumulative counters against.
#[derive(Debug, Clone, Copy)]
struct Previous {
    report_ns: u64,
    received_bytes: u64,
    received_packets: u64,
    highest_seq: u64,
}

/// One line's rate controller.
#[derive(Debug, Clone)]
pub struct RateController {
    config: ControllerConfig,
    rate_bps: f64,
    base: BaseDelay,
    previous: Option<Previous>,
    /// Recent reports, oldest first, to measure the delivery rate over a window.
    history: std::collections::VecDeque<Previous>,
    queue_delay: Duration,
    /// Lowest raw one-way delay of the last report (ns, offset included).
    owd_raw_ns: Option<i64>,
    delivery_bps: f64,
    /// Datagrams per second the receiver counted over the delivery window.
    delivery_pps: f64,
    /// Datagrams per second the line is paced at, once it showed a queue.
    packet_rate: Option<f64>,
    /// Datagrams we sent since the previous report.
    sent_packets: u64,
    /// The largest datagram we sent (line bytes).
    largest_datagram: f64,
    loss: f64,
    srtt: Option<Duration>,
    /// Bytes we sent since the previous report, to tell a full line from an idle one.
    sent_bytes: u64,
    sent_since: Instant,
    phase: Phase,
    /// The rate when the line went down, while it is down.
    rate_before_down: Option<f64>,
    /// Starting: the rate doubles every round trip while the line takes it all without a
    /// queue (TCP's slow start), until a queue of half the target or loss shows.
    ramping: bool,
    next_drain: Instant,
    drain_until: Instant,
    /// Since when the queue has stayed above target, and the lowest and highest one-way
    /// delay samples since (ns, offset included).
    stuck: Option<(Instant, i64, i64)>,
    /// Times the base delay restarted from a queue that did not drain.
    base_resets: u64,
    /// Bytes the line's modem counts per datagram beyond its UDP payload.
    overhead_bytes: u64,
    /// What the line delivered the last time it held a queue: its capacity then (line bits
    /// per second; 0 before it held one).
    capacity_bps: f64,
    /// Since when the line has not been busy (`None`: busy at the previous report); a rate
    /// it did not use is untested.
    idle_since: Option<Instant>,
    /// Busy again after an idle spell of [`IDLE_SPELL`], and no queue shown since: the
    /// rate grows from what the line delivered, not from the rate it kept (see the
    /// module's doc).
    validating_after_idle: bool,
    /// Whether the line was ever busy: a line idle since the session began (a flow not
    /// yet on it) starts as any line starts, not as a restart (see the module's doc).
    has_been_busy: bool,
}

impl RateController {
    /// A controller for a line that starts at `now`.
    pub fn new(config: ControllerConfig, now: Instant) -> RateController {
        let bucket = Duration::from_secs(1);
        let buckets = (config.base_history.as_nanos() / bucket.as_nanos()).max(1) as usize;
        RateController {
            rate_bps: clamp_rate(&config, config.initial_rate.as_f64()),
            base: BaseDelay::new(bucket.as_nanos(), buckets),
            previous: None,
            history: std::collections::VecDeque::new(),
            queue_delay: Duration::ZERO,
            owd_raw_ns: None,
            delivery_bps: 0.0,
            delivery_pps: 0.0,
            packet_rate: None,
            sent_packets: 0,
            largest_datagram: 0.0,
            loss: 0.0,
            srtt: None,
            sent_bytes: 0,
            sent_since: now,
            phase: Phase::Starting,
            rate_before_down: None,
            ramping: true,
            next_drain: now + config.drain_every,
            drain_until: now,
            stuck: None,
            base_resets: 0,
            overhead_bytes: 0,
            capacity_bps: 0.0,
            idle_since: None,
            validating_after_idle: false,
            has_been_busy: false,
            config,
        }
    }

    /// Sets the bytes the line's modem counts per datagram beyond its UDP payload (UDP and
    /// IP headers, framing), which reports do not count.
    pub fn set_overhead_bytes(&mut self, overhead_bytes: usize) {
        self.overhead_bytes = overhead_bytes as u64;
    }

    /// The rate to pace the line at (line bytes: see the module's doc).
    pub fn rate(&self) -> BitsPerSec {
        BitsPerSec(self.rate_bps as u64)
    }

    /// The datagrams per second the line is paced at besides its rate, once it showed a
    /// queue (see the module's doc); `None`: no packet limit.
    pub fn packet_rate(&self) -> Option<f64> {
        self.packet_rate
    }

    /// The datagrams per second the receiver counted over the last delivery window.
    pub fn delivery_packet_rate(&self) -> f64 {
        self.delivery_pps
    }

    /// The line's queueing delay at the last report.
    pub fn queue_delay(&self) -> Duration {
        self.queue_delay
    }

    /// The rate the receiver saw over the last report's interval (line bytes).
    pub fn delivery_rate(&self) -> BitsPerSec {
        BitsPerSec(self.delivery_bps as u64)
    }

    /// The loss fraction of the last report's interval.
    pub fn loss(&self) -> f64 {
        self.loss
    }

    /// The base one-way delay, offset included (ns): comparable between the lines of one
    /// direction, since they share both clocks.
    pub fn base_owd_ns(&self) -> Option<i64> {
        self.base.base()
    }

    /// Times the base delay restarted because a queue above target did not drain (the
    /// path's delay grew for good).
    pub fn base_resets(&self) -> u64 {
        self.base_resets
    }

    /// The latest one-way delay (base plus queue), offset included.
    pub fn owd_ns(&self) -> Option<i64> {
        self.owd_raw_ns
    }

    /// The one-way delay a datagram sent now is expected to see (offset included), for the
    /// scheduler: the base delay plus the target queue the controller holds the line at,
    /// plus only the part of the measured queue beyond four targets.
    ///
    /// The measured queue is a report old, and the report a one-way delay later still: a
    /// scheduler that moved traffic away from a line whose queue it saw grow would empty
    /// it by the time it knew, and back (measured in the `bond` recipe: the 3 Mbit/s line
    /// swung between 3.3 and 1.1 Mbit/s every 300 ms and carried 83% of its rate). Holding
    /// the queue at target is the controller's job; the scheduler splits by the rates, and
    /// steers away only from a queue far past target (a line that just got worse).
    pub fn scheduling_owd_ns(&self) -> Option<i64> {
        let base = self.base.base()?;
        let target = self.config.target.as_nanos() as i64;
        let queue = i64::try_from(self.queue_delay.as_nanos()).unwrap_or(i64::MAX);
        let excess = queue.saturating_sub(target.saturating_mul(4)).max(0);
        // Saturating: `base` is the peer's figure (bounded where the line takes it, and
        // again here).
        Some(base.saturating_add(target).saturating_add(excess))
    }

    /// The controller's phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The line's smoothed round trip, if measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// A round-trip sample of the line (from an echoed timestamp).
    pub fn on_rtt(&mut self, sample: Duration) {
        self.srtt = Some(match self.srtt {
            None => sample,
            Some(srtt) => Duration::from_nanos((srtt.as_nanos() * 7 + sample.as_nanos()) / 8),
        });
    }

    /// We sent `len_bytes` on the line (line bytes, overhead included).
    pub fn on_sent(&mut self, len_bytes: usize) {
        self.sent_bytes += len_bytes as u64;
        self.sent_packets += 1;
        self.largest_datagram = self.largest_datagram.max(len_bytes as f64);
    }

    /// Forgets what the line was like (it went down and came back): the base is measured
    /// anew and the rate restarts from half of what it was.
    pub fn restart(&mut self, now: Instant) {
        self.base.clear();
        self.previous = None;
        self.history.clear();
        self.owd_raw_ns = None;
        self.queue_delay = Duration::ZERO;
        // From half the rate it had when it went down (a line that comes back is likely the
        // line it was), and never below the initial rate: a line paced too slowly gets no
        // traffic from the scheduler, so it would never show it can do more.
        let before = self.rate_before_down.take().unwrap_or(self.rate_bps);
        self.rate_bps = clamp_rate(
            &self.config,
            (before / 2.0).max(self.config.initial_rate.as_f64()),
        );
        self.phase = Phase::Starting;
        self.ramping = true;
        self.validating_after_idle = false;
        self.packet_rate = None;
        self.sent_bytes = 0;
        self.sent_packets = 0;
        self.sent_since = now;
    }

    /// The line went down: what it could do is kept for when it comes back, and reports
    /// that straddle the outage (all loss, nothing delivered) must not count.
    pub fn suspend(&mut self) {
        if self.rate_before_down.is_none() {
            self.rate_before_down = Some(self.rate_bps);
        }
        self.previous = None;
        self.history.clear();
    }

    /// The receiver's report on this line.
    pub fn on_feedback(&mut self, now: Instant, report: &Feedback) {
        self.on_feedback_excusing(now, report, |_, _| 0);
    }

    /// The receiver's report on this line; `excused(from, to)` counts the datagrams with a
    /// seq in `(from, to]` that were not meant to arrive (path MTU probes too big for the
    /// path): they are not loss.
    pub fn on_feedback_excusing(
        &mut self,
        now: Instant,
        report: &Feedback,
        excused: impl FnOnce(u64, u64) -> u64,
    ) {
        if report.samples > 0 {
            self.base.add(report.report_ns, report.owd_min_ns);
            self.owd_raw_ns = Some(report.owd_min_ns);
        }
        let Some(previous) = self.previous else {
            self.previous = Some(Previous::of(report));
            self.phase = Phase::Tracking;
            self.sent_bytes = 0;
            self.sent_packets = 0;
            self.sent_since = now;
            return;
        };
        if report.report_ns <= previous.report_ns
            || report.received_bytes < previous.received_bytes
            || report.received_packets < previous.received_packets
        {
            return; // a report older than one already used (or a peer's counters gone back)
        }
        self.previous = Some(Previous::of(report));
        if self.history.len() == DELIVERY_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(previous);
        // The delivery rate since the latest report at least a window old (or the oldest).
        let window = DELIVERY_WINDOW.as_nanos();
        let since = self
            .history
            .iter()
            .rev()
            .find(|p| report.report_ns.saturating_sub(p.report_ns) >= window)
            .or(self.history.front())
            .copied()
            .unwrap_or(previous);
        let interval_s = (report.report_ns - since.report_ns) as f64 / 1e9;
        // Payload bytes plus each datagram's overhead: what the line's modem forwarded.
        let delivered_bytes = report
            .received_bytes
            .saturating_sub(since.received_bytes)
            .saturating_add(
                report
                    .received_packets
                    .saturating_sub(since.received_packets)
                    .saturating_mul(self.overhead_bytes),
            );
        self.delivery_bps = delivered_bytes as f64 * 8.0 / interval_s;
        self.delivery_pps = report
            .received_packets
            .saturating_sub(since.received_packets) as f64
            / interval_s;
        let expected = report
            .highest_seq
            .saturating_sub(previous.highest_seq)
            .saturating_sub(excused(previous.highest_seq, report.highest_seq));
        let received = report
            .received_packets
            .saturating_sub(previous.received_packets);
        self.loss = if expected == 0 {
            0.0
        } else {
            1.0 - (received.min(expected) as f64 / expected as f64)
        };
        if let (Some(base), Some(owd)) = (self.base.base(), self.owd_raw_ns) {
            // The lowest sample's own serialization (12 ms for a full datagram at 1 Mbit/s)
            // is not queue: taken out at the rate the line delivers, which is its capacity
            // while a queue exists (and, on an idle line, a rate so low it takes the whole
            // sample out: no queue, which is right).
            let serialization = if self.delivery_bps > 0.0 && report.samples > 0 {
                (f64::from(report.owd_min_len) + self.overhead_bytes as f64) * 8.0
                    / self.delivery_bps
                    * 1e9
            } else {
                0.0
            };
            let queue = (owd.saturating_sub(base) as f64 - serialization).max(0.0);
            self.queue_delay = Duration::from_nanos(queue as u64);
            if report.samples > 0 {
                self.watch_for_new_base(now, report.report_ns, owd);
            }
        }
        // Whether we kept the line busy: sent at least 3/4 of what the rate allowed.
        let span = now.saturating_since(self.sent_since).as_secs_f64();
        let allowed = self.rate_bps / 8.0 * span;
        // Or its packet pacer: sent at least 3/4 of the datagrams it allowed.
        let packets_allowed = self.packet_rate.map_or(f64::INFINITY, |pps| pps * span);
        let busy = self.sent_bytes as f64 >= 0.75 * allowed
            || self.sent_packets as f64 >= 0.75 * packets_allowed;
        self.sent_bytes = 0;
        self.sent_packets = 0;
        self.sent_since = now;
        self.update_rate(now, busy, span);
        if busy {
            self.idle_since = None;
            self.has_been_busy = true;
        } else if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// A queue above target that stays put for `rebase_after` is the path's new delay: the
    /// base restarts from the samples of that time (see the module's doc).
    fn watch_for_new_base(&mut self, now: Instant, report_ns: u64, owd: i64) {
        if self.queue_delay <= self.config.target {
            self.stuck = None;
            return;
        }
        let (since, low, high) = match self.stuck {
            Some((since, low, high)) => (since, low.min(owd), high.max(owd)),
            None => (now, owd, owd),
        };
        let spread = high.saturating_sub(low);
        let still = spread <= self.config.target.saturating_mul(2).as_nanos() as i64;
        if !still {
            // It moves: a queue (ours draining, or someone else's sawtooth). Watch afresh.
            self.stuck = Some((now, owd, owd));
            return;
        }
        self.stuck = Some((since, low, high));
        if now.saturating_since(since) >= self.config.rebase_after {
            self.base.clear();
            self.base.add(report_ns, low);
            self.queue_delay = Duration::ZERO;
            self.ramping = true;
            self.stuck = None;
            self.base_resets += 1;
        }
    }

    fn update_rate(&mut self, now: Instant, busy: bool, span_s: f64) {
        let tau = self.tau().as_secs_f64();
        let target = self.config.target.as_secs_f64();
        let queue = self.queue_delay.as_secs_f64();
        if self.phase == Phase::Draining && now >= self.drain_until {
            self.phase = Phase::Tracking;
            self.next_drain = now + self.config.drain_every;
        }
        if self.phase == Phase::Tracking && !busy && queue <= BUSY_QUEUE * target {
            // Not kept busy, its queue gone: it drained by itself, and its reports measure
            // the base clean, which is what a drain is for. The next one is a drain's
            // period of busy time away, not due at the first busy report after a long idle
            // spell, where 3/4 of the little a flow's first round trips delivered would
            // cut a restart to a trickle (see the module's doc).
            self.next_drain = now + self.config.drain_every;
        }
        if self.phase == Phase::Tracking && now >= self.next_drain && busy {
            self.phase = Phase::Draining;
            // Long enough for a target's worth of queue to empty at a quarter of the rate,
            // and for the reports of the empty queue to come back.
            let hold = self.srtt.unwrap_or(Duration::from_millis(50))
                + self.config.target.saturating_mul(4);
            self.drain_until = now + hold.max(Duration::from_millis(50));
        }
        let delivery = self.delivery_bps;
        let delivery_pps = self.delivery_pps;
        if queue > target / 2.0 || self.loss > LOSS_THRESHOLD {
            self.ramping = false;
        }
        // Each rule sets the rate of bytes and, the same way, the rate of datagrams.
        let (rate, packet_rate) = if self.phase == Phase::Draining {
            (
                0.75 * delivery.max(self.config.min_rate.as_f64()),
                self.packet_rate.map(|_| 0.75 * delivery_pps),
            )
        } else if queue > BUSY_QUEUE * target {
            // The bottleneck is busy: the delivery rate is its capacity, in bytes and, when
            // the datagrams were small, in datagrams (a modem that ran out of packets, not
            // bytes). Full datagrams say nothing of a packet limit: a line of bulk traffic
            // is held by its bytes alone (pinning its datagrams to what full ones made cost
            // one TCP flow over the `bond` recipe's lines 82% of the lines' sum, not 90%).
            let factor = (1.0 + (target - queue) / tau).max(0.5);
            let small = delivery_pps > 0.0
                && delivery / 8.0 / delivery_pps < SMALL_DATAGRAMS * self.largest_datagram;
            // A queue of small datagrams may be the modem's packet limit: its bytes are
            // not the line's capacity, nor do they unsay the capacity full datagrams
            // showed (what a restart after an idle spell may take at once).
            if !small {
                self.capacity_bps = delivery;
            }
            if self.validating_after_idle {
                // The first sign of a queue ends a restart's ramp, not half the target: the
                // line's backlog is already there to fill it (see the module's doc).
                self.ramping = false;
                self.validating_after_idle = false;
            }
            (delivery * factor, small.then_some(delivery_pps * factor))
        } else if self.loss > LOSS_THRESHOLD && busy {
            // A policer: we sent at the rate, it delivered less. (On a line we hardly fed,
            // one datagram lost of the few sent is no such sign, and what it delivered is
            // what we sent, not what it can do: see the idle rule.)
            (
                delivery.min(self.rate_bps),
                self.packet_rate.map(|pps| delivery_pps.min(pps)),
            )
        } else if busy {
            self.probe(now, span_s)
        } else if self.rate_bps < self.config.initial_rate.as_f64() {
            // An idle line below the initial rate may be idle *because* it is paced so
            // slowly that the scheduler finds every other line sooner: it would never show
            // it can do more (measured: a 3 Mbit/s line cut to 0.11 by a drain or a loss on
            // a few datagrams stayed there for the rest of a run). It probes back up to the
            // initial rate by the same 5% per report, 1.1 s from a tenth of it.
            let factor = 1.0 + (target - queue) / tau;
            (
                (self.rate_bps * factor).min(self.config.initial_rate.as_f64()),
                self.packet_rate,
            )
        } else {
            // An idle line tells nothing about its capacity: keep the rate.
            (self.rate_bps, self.packet_rate)
        };
        self.rate_bps = clamp_rate(&self.config, rate);
        self.packet_rate = packet_rate.map(|pps| {
            if pps.is_nan() {
                MIN_PACKET_RATE
            } else {
                pps.max(MIN_PACKET_RATE)
            }
        });
    }

    /// The rate of a busy line that shows no queue: the ramp while it starts, the probe
    /// once it held a queue (see the module's doc), each held to what its feedback can stop.
    fn probe(&mut self, now: Instant, span_s: f64) -> (f64, Option<f64>) {
        let tau = self.tau().as_secs_f64();
        let target = self.config.target.as_secs_f64();
        let queue = self.queue_delay.as_secs_f64();
        let delivery = self.delivery_bps;
        let factor = if self.ramping {
            // Slow start: twice the rate per round trip (at most per report), from what
            // the line took. From the initial 1 Mbit/s a 12 Mbit/s line is full in 4
            // round trips instead of 50 reports (1.3 s) of the 5% probe below, while a
            // TCP flow's own slow start, which the tunnel must not cut short, is under
            // way.
            let rtt = self
                .srtt
                .unwrap_or(Duration::from_millis(100))
                .as_secs_f64()
                .max(0.005);
            2f64.powf((span_s / rtt).min(1.0))
        } else {
            1.0 + (target - queue) / tau
        };
        let from = self.rate_bps.max(delivery);
        let mut rate = from * factor;
        // The rate it kept while idle is untested (see the module's doc): for one report
        // after any idle report, and after a long idle spell until the line shows a queue.
        let tested = (UNTESTED_RATE_GAIN * delivery)
            .max(self.config.initial_rate.as_f64())
            .max(self.capacity_bps);
        let idle_for = self.idle_since.map(|since| now.saturating_since(since));
        if self.has_been_busy && idle_for.is_some_and(|idle| idle >= IDLE_SPELL) {
            // A restart: from the capacity the line showed (a rate it carried), or what it
            // delivers (see the module's doc).
            rate = rate.max(self.capacity_bps);
            if rate > tested {
                self.validating_after_idle = true;
            }
        }
        if self.validating_after_idle || idle_for.is_some() {
            rate = rate.min(tested);
        }
        if !self.ramping && rate > self.capacity_bps && self.capacity_bps > 0.0 {
            // Back up to the capacity the line showed last at the per-report pace, and
            // beyond it at that pace per round trip: a probe for more that a report a
            // round trip late cannot stop before it overshoots (5% per report over a
            // 70 ms line grew its rate 20% past its 3 Mbit/s before the queue was
            // seen: queue peaks of 28 ms every 0.45 s, measured in the peer benchmark).
            let rtt = self.srtt.map_or(0.0, Duration::as_secs_f64);
            let per_round_trip = if rtt > span_s {
                1.0 + (factor - 1.0) * span_s / rtt
            } else {
                factor
            };
            rate = rate.min(from.max(self.capacity_bps) * per_round_trip);
        }
        if !self.ramping && self.packet_rate.is_none() {
            // What its feedback can stop (see the module's doc). A line paced in datagrams
            // is held by them, not by its bytes (its bytes grow as packing fills them).
            let ceiling = delivery * (1.0 + (target - queue).max(0.0) / self.feedback_lag_s());
            // Not below what it showed it can carry (a line busy again after an idle
            // spell delivers little for a while), nor below the initial rate; and never
            // below its rate now: the ceiling holds a probe's growth, it does not cut a
            // line the scheduler fed less than its rate (a line counts as busy fed at 3/4
            // of its rate, and its delivery, so its ceiling, is then below that rate:
            // with a busy loop per core, the ipv6 test's 3 Mbit/s line carried 1.53-2.99
            // Mbit/s with the ceiling free to cut, 2.54-2.88 with this alone).
            let shown = self
                .capacity_bps
                .max(self.config.initial_rate.as_f64())
                .max(self.rate_bps);
            rate = rate.min(ceiling.max(shown));
        }
        (
            rate,
            self.packet_rate
                .map(|pps| pps.max(self.delivery_pps) * factor),
        )
    }

    /// How late the delivery rate shows a change of the sending rate, seconds: a round trip
    /// (the datagrams' way there and the report's way back) and half the window it is
    /// measured over.
    fn feedback_lag_s(&self) -> f64 {
        self.srtt
            .unwrap_or(Duration::from_millis(100))
            .as_secs_f64()
            + DELIVERY_WINDOW.as_secs_f64() / 2.0
    }

    /// The convergence time constant: the configured one, or twice the round trip.
    fn tau(&self) -> Duration {
        let rtt = self.srtt.unwrap_or(Duration::ZERO);
        self.config.tau.max(rtt.saturating_mul(2))
    }

    /// Reports kept to measure the delivery rate (at most a fixed number; the base
    /// delay's buckets are a fixed ring too).
    pub fn history_len(&self) -> usize {
        self.history.len()
    }
}

impl Previous {
    fn of(report: &Feedback) -> Previous {
        Previous {
            report_ns: report.report_ns,
            received_bytes: report.received_bytes,
            received_packets: report.received_packets,
            highest_seq: report.highest_seq,
        }
    }
}

fn clamp_rate(config: &ControllerConfig, rate: f64) -> f64 {
    let max = config.max_rate.map_or(f64::INFINITY, BitsPerSec::as_f64);
    if rate.is_nan() {
        return config.min_rate.as_f64();
    }
    rate.clamp(config.min_rate.as_f64(), max.max(config.min_rate.as_f64()))
}

#[cfg(test)]
mod tests;

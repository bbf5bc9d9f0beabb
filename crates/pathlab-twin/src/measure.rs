//! What `pathlab twin` sends in each direction, and what it makes of what arrived: the
//! plan of its phases (sans-IO: sizes, rates and counts from the time given, the highest
//! rate allowed and a rough capacity) and the estimate of one direction from the phases'
//! samples, with what it could not learn said in words.
//!
//! A direction's phases, in order:
//! 1. **Low load**: small probes at a rate far below the path's, for most of the time:
//!    the clocks (drift), the base delay, the delay's variation and the loss.
//! 2. **Saturation** (not with `--gentle`): full-size probes at 1.5 times the rough
//!    capacity (never above the highest rate allowed) for a few seconds: the bottleneck's
//!    rate, the buffer in front of it, how it drops, the rate over time. A rough capacity
//!    whose 1.5 times is above the rate allowed is still probed, at the rate allowed: the
//!    rough figure may be wrong (on a busy machine the capacity phase missed a 10 Mbit/s
//!    token bucket behind a gigabit veth in 2 of 8 runs and said 695-875 Mbit/s), and the
//!    probes find a bottleneck below the rate allowed whatever the figure said. One that
//!    built no queue (the rough figure too low) is sent again faster ([`escalate`]).
//! 3. **Small packets** (not with `--gentle`): the smallest probes at 1.5 times what the
//!    byte rate would carry of them: a packet-rate limit (the seed's modem).

use std::fmt::Write as _;

use pathlab_core::quantile;

use crate::assemble::DirectionEstimates;
use crate::bottleneck::{bottleneck_rate_beside, packet_rate, PacketRate};
use crate::buffer::buffer;
use crate::calibrate::{calibrated_rate, steady_goodput, TcpRun};
use crate::delay::{base_delay, delay_variation};
use crate::figure::Figure;
use crate::isolation::{isolation, MIN_SPARSE_SAMPLES};
use crate::loss::fit_loss;
use crate::queued::longest_queued;
use crate::restart::{self, RestartFit};
use crate::samples::{after_drain, Clocks, Sample};
use crate::trace::{
    delivery_trace, may_move, moves, RateOverTime, MAY_MOVE, MIN_JUDGED, MOVING_FAST,
    MOVING_VARIATION, WINDOW_NS,
};

/// Bytes of each low-load probe's UDP payload.
pub const LOW_LOAD_PAYLOAD: u32 = 200;
/// The low-load probes' rate, packets per second (at 200 bytes, 320 kbit/s of payload).
pub const LOW_LOAD_PPS: f64 = 200.0;
/// The low-load phase's rate is at most this share of the highest rate allowed.
pub const LOW_LOAD_SHARE: f64 = 0.1;
/// How much faster than the rough capacity the saturating phase sends.
pub const OVERFEED: f64 = 1.5;
/// The saturating and small-packet phases' length, seconds: enough to fill a 0.6 s modem
/// buffer overfed by half and keep it full for seconds.
pub const SATURATION_S: f64 = 4.0;
/// The longer saturating phase's length, seconds, when the first one's rate may move
/// ([`longer_phase`]): long enough for [`crate::trace::MIN_JUDGED`] windows of 2 s, and a
/// delivery trace of a cellular line's seconds of moves (at most half a direction's time).
pub const LONGER_S: f64 = 15.0;
/// The fewest queued packets of a first phase for a longer one.
pub const MIN_QUEUED: usize = 10;
/// How much faster than the first phase's fastest 100 ms window the longer phase sends:
/// its queue then holds through a moving rate's peaks (a cellular line's reach twice its
/// mean and more).
pub const LONGER_OVERFEED: f64 = 2.0;
/// The small-packet phase's length, seconds.
pub const SMALL_S: f64 = 2.0;
/// How much faster a saturating phase that built no queue is sent again ([`escalate`]).
pub const ESCALATION: f64 = 4.0;
/// How many times at most a saturating phase is sent again, faster ([`escalate`]).
pub const MAX_ESCALATIONS: usize = 2;
/// The shortest measurement a direction takes, seconds: its low load at least 5 s.
pub const MIN_LOW_LOAD_S: f64 = 5.0;
/// Points of the delay's empirical distribution (quantiles at 0, 1/N, ..., 1): every 1%,
/// so that one late probe of a low load's 1,000 (a stall of the machine, 140 ms) is
/// replayed for 1% of the twin's packets, above their p99. At every 5% (20 points, before
/// 2026-12-07) it was 5% of them up to 5.8 ms late even with the top segment's mean kept
/// (`crate::delay`), and the bond's twin's loaded round trips' p95 was +13% both ways.
pub const VARIATION_POINTS: usize = 100;
/// The sparse flow beside a saturating phase, probes per second
/// ([`crate::isolation`]): at 200 bytes, 80 kbit/s.
pub const SPARSE_PPS: f64 = 50.0;
/// Above the low-load deviations' [`QUEUED_QUANTILE`], a packet waited in a queue: this
/// margin, ns.
pub const QUEUED_MARGIN_NS: f64 = 100_000.0;

/// The low-load deviations' quantile that a queued packet's delay is above (with
/// [`QUEUED_MARGIN_NS`]): the 99th, so that ten late probes of 1,000 (a busy machine's,
/// not the path's queue) do not hide the queue.
pub const QUEUED_QUANTILE: f64 = 0.99;

/// One phase of probes: their UDP payload, their rate (bits/s of payload) and how many.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// UDP payload bytes of each probe.
    pub payload_bytes: u32,
    /// Bits per second of UDP payload.
    pub rate_bps: f64,
    /// Probes to send.
    pub count: u64,
}

impl Phase {
    /// Probes of `payload_bytes` at `pps` a second for `seconds` (at least one).
    fn at(payload_bytes: u32, pps: f64, seconds: f64) -> Phase {
        Phase {
            payload_bytes,
            rate_bps: pps * f64::from(payload_bytes) * 8.0,
            count: ((pps * seconds).round() as u64).max(1),
        }
    }

    /// How long it takes, seconds.
    pub fn seconds(&self) -> f64 {
        self.count as f64 * f64::from(self.payload_bytes) * 8.0 / self.rate_bps
    }
}

/// What a direction's plan starts from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanInput {
    /// Seconds the whole direction may take.
    pub seconds: f64,
    /// The highest rate allowed, bits/s of UDP payload (the user's `--max-rate` and the
    /// server's own bound, the lower).
    pub max_rate_bps: f64,
    /// The largest UDP payload the path carries unfragmented.
    pub full_payload: u32,
    /// The smallest probe's payload.
    pub small_payload: u32,
    /// Bytes a probe counts for at the bottleneck beyond its payload (UDP, IP, Ethernet).
    pub overhead_bytes: u32,
}

/// The phases of one direction; what cannot be learned within the bounds is said.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Always.
    pub low_load: Phase,
    /// `None` with `--gentle`, or when the rough capacity is not below the highest rate
    /// allowed (the path could not be overfed: [`Plan::cannot`] says so).
    pub saturation: Option<Phase>,
    /// As `saturation`.
    pub small: Option<Phase>,
    /// What this plan will not learn, and why.
    pub cannot: Vec<String>,
}

/// The low-load phase of `input`: at most [`LOW_LOAD_SHARE`] of the rate allowed, for
/// what the other phases leave of the time.
pub fn low_load(input: &PlanInput, gentle: bool) -> Phase {
    let others = if gentle { 0.0 } else { SATURATION_S + SMALL_S };
    let seconds = (input.seconds - others).max(MIN_LOW_LOAD_S);
    let bits = f64::from(LOW_LOAD_PAYLOAD) * 8.0;
    let pps = LOW_LOAD_PPS.min(LOW_LOAD_SHARE * input.max_rate_bps / bits);
    Phase::at(LOW_LOAD_PAYLOAD, pps.max(1.0), seconds)
}

/// The phases of a direction whose rough capacity (bits/s at the bottleneck, from packet
/// trains) is `capacity_bps`; none but the low load when `gentle`.
pub fn plan(input: &PlanInput, capacity_bps: Option<f64>, gentle: bool) -> Plan {
    let mut cannot = Vec::new();
    let low_load = low_load(input, gentle);
    if gentle {
        cannot.push(
            "--gentle: the bottleneck's rate, its packet-rate limit, its buffer and how it \
             drops (they take overfeeding the path)"
                .to_owned(),
        );
        return Plan {
            low_load,
            saturation: None,
            small: None,
            cannot,
        };
    }
    let Some(capacity_bps) = capacity_bps.filter(|c| c.is_finite() && *c > 0.0) else {
        cannot.push("the bottleneck: packet trains found no capacity to overfeed".to_owned());
        return Plan {
            low_load,
            saturation: None,
            small: None,
            cannot,
        };
    };
    let full = input.full_payload;
    let frame = |payload: u32| f64::from(payload + input.overhead_bytes);
    // Payload bits/s of full-size probes that put OVERFEED x the capacity on the line.
    let mut wanted = OVERFEED * capacity_bps * f64::from(full) / frame(full);
    if wanted > input.max_rate_bps {
        cannot.push(format!(
            "a bottleneck above {:.2} Mbit/s: overfeeding a path of about {:.2} Mbit/s takes \
             {:.2} Mbit/s of probes, above the {:.2} allowed (--max-rate or the server's \
             bound); the probes go at that, and find a bottleneck below it",
            input.max_rate_bps / 1e6,
            capacity_bps / 1e6,
            wanted / 1e6,
            input.max_rate_bps / 1e6
        ));
        wanted = input.max_rate_bps;
    }
    let saturation = Phase::at(full, wanted / (f64::from(full) * 8.0), SATURATION_S);
    let small_pps = OVERFEED * capacity_bps / (frame(input.small_payload) * 8.0);
    let small_rate = small_pps * f64::from(input.small_payload) * 8.0;
    let small = if small_rate <= input.max_rate_bps {
        Some(Phase::at(input.small_payload, small_pps, SMALL_S))
    } else {
        cannot.push(format!(
            "a packet-rate limit: {small_pps:.0} small probes a second are above the rate \
             allowed"
        ));
        None
    };
    Plan {
        low_load,
        saturation: Some(saturation),
        small,
        cannot,
    }
}

/// What a direction's phases brought back, as samples.
#[derive(Debug, Clone, Default)]
pub struct DirectionSamples {
    /// The low-load phase's.
    pub low_load: Vec<Sample>,
    /// The saturating phase's, if it ran.
    pub saturation: Option<Vec<Sample>>,
    /// The longer saturating phase's, if it ran ([`longer_phase`]).
    pub longer: Option<Vec<Sample>>,
    /// The small-packet phase's, if it ran.
    pub small: Option<Vec<Sample>>,
    /// A sparse flow's, sent beside the (last) saturating phase: [`SPARSE_PPS`] probes a
    /// second of [`LOW_LOAD_PAYLOAD`] bytes, in a session of their own.
    pub sparse: Option<Vec<Sample>>,
    /// A bulk TCP transfer over the path after the saturating phases
    /// ([`crate::calibrate`]), if it ran.
    pub tcp: Option<TcpRun>,
    /// Another after [`crate::restart::IDLE_BEFORE_S`] of pings alone: how the path
    /// restarts ([`crate::restart`]), if it ran.
    pub tcp_after_idle: Option<TcpRun>,
    /// The timestamps' resolution, ns.
    pub resolution_ns: f64,
}

/// A direction as estimated: the figures, the delivery trace's text when the rate moves
/// (its file name is the caller's to choose and set in `estimates.trace_file`), the clocks
/// and what could not be learned.
#[derive(Debug, Clone)]
pub struct Estimated {
    /// For [`crate::assemble::direction`].
    pub estimates: DirectionEstimates,
    /// The drift-corrected raw base (`received - sent`, offset in it), ns: the two
    /// directions' sum is the base round trip, whatever the clocks' offset.
    pub base_raw_ns: f64,
    /// The delivery trace, mahimahi's format, when the rate moved.
    pub trace: Option<String>,
    /// What could not be learned, and why.
    pub cannot: Vec<String>,
}

/// Estimates a direction from its samples; `offset_ns` is the clocks' offset (receiver
/// minus sender, as [`split_offset`] finds it) and `offset_uncertainty_ns` how well it is
/// known. `None` when no low-load probe arrived.
pub fn estimate(
    samples: &DirectionSamples,
    offset_ns: f64,
    offset_uncertainty_ns: f64,
) -> Option<Estimated> {
    let low = &after_drain(&samples.low_load);
    let clocks = Clocks::from_low_load(low)?;
    let mut cannot = Vec::new();
    let variation = delay_variation(low, &clocks, VARIATION_POINTS);
    let queued_ns = queued_threshold_ns(low, &clocks);
    let median_ns = variation
        .as_ref()
        .and_then(|v| v.quantiles.get(VARIATION_POINTS / 2))
        .map_or(0.0, |q| q.value_ns);
    let mut ordered: Vec<&Sample> = low.iter().collect();
    ordered.sort_by_key(|s| s.seq);
    let lost: Vec<bool> = ordered.iter().map(|s| s.received_ns.is_none()).collect();
    let loss = fit_loss(&lost);
    let resolution = samples.resolution_ns;
    let rate_bps = samples.saturation.as_deref().and_then(|saturated| {
        let sparse = samples.sparse.as_deref().unwrap_or_default();
        saturation_rate(saturated, sparse, &clocks, queued_ns, resolution)
            .map_err(|why| cannot.push(why))
            .ok()
    });
    let packet_rate = match (&rate_bps, samples.small.as_deref()) {
        (Some(rate), Some(small)) => packet_rate(small, &clocks, queued_ns, resolution, rate.value),
        _ => None,
    };
    // Under a packet-rate limit each sparse probe beside the saturating ones took a slot of
    // the bottleneck's time, not its bytes' time: the rate again, with that counted.
    let rate_bps = match (
        &packet_rate,
        samples.saturation.as_deref(),
        samples.sparse.as_deref(),
    ) {
        (Some(PacketRate::Limited { pps }), Some(saturated), Some(sparse)) => {
            let slot_bytes = rate_bps.as_ref().map_or(0.0, |r| r.value / 8.0 / pps.value);
            bottleneck_rate_beside(
                saturated, sparse, slot_bytes, &clocks, queued_ns, resolution,
            )
            .or(rate_bps)
        }
        _ => rate_bps,
    };
    let Replayed {
        rate_bps,
        trace,
        tcp_goodput_bps,
        restart,
    } = replayed(rate_bps, samples, &clocks, queued_ns);
    // Beside a moving rate the small packets met one moment of it, not the rate they are
    // weighed against: the cellular twin down had `pps 23860` (2026-12-07).
    let packet_rate = match (packet_rate, &trace) {
        (Some(PacketRate::Limited { .. }), Some(_)) => {
            cannot.push(
                "a packet-rate limit: the rate moves, and the small packets' rate then is no \
                 measure of one against it"
                    .to_owned(),
            );
            None
        }
        (packet_rate, _) => packet_rate,
    };
    let buffer = match (&rate_bps, samples.saturation.as_deref()) {
        (Some(rate), Some(saturated)) => {
            buffer(saturated, &clocks, rate, median_ns, loss.rate.value)
        }
        _ => None,
    };
    let isolation = match (
        &rate_bps,
        samples.saturation.as_deref(),
        samples.sparse.as_deref(),
    ) {
        (Some(_), Some(saturated), Some(sparse)) => {
            let found = isolation(saturated, sparse, &clocks, queued_ns, median_ns);
            if found.is_none() {
                cannot.push(format!(
                    "whether the queue keeps flows apart: fewer than {MIN_SPARSE_SAMPLES} of \
                     the sparse flow's probes arrived while the saturating ones queued (a \
                     full FIFO drops most of them)"
                ));
            }
            found
        }
        _ => None,
    };
    let estimates = DirectionEstimates {
        base_delay_ns: base_delay(&clocks, offset_ns, offset_uncertainty_ns, resolution),
        probe_bytes: low.first().map_or(0, |s| s.len_bytes),
        variation,
        loss,
        rate_bps,
        packet_rate,
        buffer,
        isolation,
        tcp_goodput_bps,
        restart,
        trace_file: None,
    };
    Some(Estimated {
        estimates,
        base_raw_ns: clocks.base_raw_ns,
        trace,
        cannot,
    })
}

/// The rate as the twin replays it: fixed, or a delivery trace where it moves
/// ([`moving_trace`]); a fixed rate raised where bulk TCP went faster than it carries TCP
/// ([`crate::calibrate`]).
struct Replayed {
    rate_bps: Option<Figure>,
    trace: Option<String>,
    tcp_goodput_bps: Option<Figure>,
    restart: Option<RestartFit>,
}

fn replayed(
    mut rate_bps: Option<Figure>,
    samples: &DirectionSamples,
    clocks: &Clocks,
    queued_ns: f64,
) -> Replayed {
    // A direction without a rate has no trace either (its spec would not name it).
    let trace = match (rate_bps.as_mut(), samples.saturation.as_deref()) {
        (Some(rate), Some(saturated)) => {
            let longer = samples.longer.as_deref();
            moving_trace(rate, saturated, longer, clocks, queued_ns)
        }
        _ => None,
    };
    let tcp_goodput_bps = samples.tcp.as_ref().and_then(steady_goodput);
    if let (Some(rate), Some(goodput), Some(tcp), None) =
        (rate_bps.as_mut(), &tcp_goodput_bps, &samples.tcp, &trace)
    {
        if let Some(raised) = calibrated_rate(rate, goodput, tcp) {
            *rate = raised;
        }
    }
    // A fixed rate only: a trace replays the rate's moves itself. Why no restart is
    // copied goes with the goodput it was judged against.
    let mut tcp_goodput_bps = tcp_goodput_bps;
    let runs = samples.tcp.as_ref().zip(samples.tcp_after_idle.as_ref());
    let restart = match (&rate_bps, &mut tcp_goodput_bps, runs, &trace) {
        (Some(_), Some(goodput), Some((warm, cold)), None) => restart::fit(cold, warm, goodput)
            .map_err(|why| write!(goodput.how, "; {why}").unwrap_or(()))
            .ok(),
        _ => None,
    };
    Replayed {
        rate_bps,
        trace,
        tcp_goodput_bps,
        restart,
    }
}

/// The delivery trace of the longer saturating phase when the rate moves in it
/// ([`moves`]), else `None`; `rate`'s `how` says how much the phases' windows
/// varied, and what that made of it.
fn moving_trace(
    rate: &mut Figure,
    saturated: &[Sample],
    longer: Option<&[Sample]>,
    clocks: &Clocks,
    queued_ns: f64,
) -> Option<String> {
    let (may, first) = may_move(saturated, clocks, queued_ns);
    describe(&mut rate.how, "; its", &first);
    let (verdict, trace) = match (may, longer) {
        (false, _) => (
            format!(
                "at most {:.0}%, each 100 ms overfed: a fixed rate",
                MAY_MOVE * 100.0
            ),
            None,
        ),
        (true, None) => (
            "it may move, but no longer phase ran: a fixed rate".to_owned(),
            None,
        ),
        (true, Some(longer)) => {
            let run = longest_queued(longer, clocks, queued_ns);
            let (moving, [fast, long]) = moves(&run);
            describe(&mut rate.how, "; a longer phase's", &fast);
            let _ = write!(
                rate.how,
                ", its {} of {} ms by {:.1}%",
                long.judged_windows,
                long.judged_ms(),
                long.judged_variation * 100.0
            );
            if moving {
                let said = format!(
                    "above {:.0}% or {:.0}%: replayed as a delivery trace",
                    MOVING_FAST * 100.0,
                    MOVING_VARIATION * 100.0
                );
                (said, delivery_trace(&run))
            } else if long.judged_windows < MIN_JUDGED {
                let said = format!(
                    "too few ({}, {MIN_JUDGED} at least) to judge: a fixed rate",
                    long.judged_windows
                );
                (said, None)
            } else {
                let said = format!(
                    "at most {:.0}% and {:.0}%: a fixed rate",
                    MOVING_FAST * 100.0,
                    MOVING_VARIATION * 100.0
                );
                (said, None)
            }
        }
    };
    let _ = write!(rate.how, ", {verdict}");
    trace
}

/// Appends to `how` what `over_time` says: `whose` windows of 100 ms and of its judged
/// length, and how much each varied.
fn describe(how: &mut String, whose: &str, over_time: &RateOverTime) {
    let _ = write!(
        how,
        "{whose} {} windows of {} ms varied by {:.1}% (sd over mean), its {} of {} ms by \
         {:.1}%",
        over_time.windows_bps.len(),
        WINDOW_NS / 1_000_000,
        over_time.variation * 100.0,
        over_time.judged_windows,
        over_time.judged_ms(),
        over_time.judged_variation * 100.0,
    );
}

/// The longer saturating phase after the first one `phase` (sent after the low load
/// `low_load`) when its rate may move ([`may_move`]): [`LONGER_S`] (at most half the
/// direction's time) at [`LONGER_OVERFEED`] times its fastest 100 ms window (never slower
/// than `phase`, never above the rate allowed); `None` when it may not, or built no queue
/// (fewer than [`MIN_QUEUED`] packets waited: the path may be faster than the rate allowed).
pub fn longer_phase(
    input: &PlanInput,
    phase: &Phase,
    low_load: &[Sample],
    saturated: &[Sample],
) -> Option<Phase> {
    let low = after_drain(low_load);
    let clocks = Clocks::from_low_load(&low)?;
    let queued_ns = queued_threshold_ns(&low, &clocks);
    let (may, over_time) = may_move(saturated, &clocks, queued_ns);
    if !may || longest_queued(saturated, &clocks, queued_ns).len() < MIN_QUEUED {
        return None;
    }
    let full = f64::from(phase.payload_bytes);
    let payload_share = full / (full + f64::from(input.overhead_bytes));
    let rate_bps = (LONGER_OVERFEED * over_time.highest_bps() * payload_share)
        .max(phase.rate_bps)
        .min(input.max_rate_bps);
    let seconds = longer_seconds(input.seconds);
    Some(Phase::at(
        phase.payload_bytes,
        rate_bps / (full * 8.0),
        seconds,
    ))
}

/// How long a longer saturating phase takes when a direction has `seconds`: [`LONGER_S`],
/// at most half of them.
pub fn longer_seconds(seconds: f64) -> f64 {
    LONGER_S.min(seconds / 2.0)
}

/// The relative delay above which a packet waited in a queue: the low-load deviations'
/// [`QUEUED_QUANTILE`], plus [`QUEUED_MARGIN_NS`].
///
/// Not their largest: on a busy machine one low-load probe of 1,000 came 77.7 ms late
/// (the others within 0.3 ms), above the 52 ms a kernel tbf's full queue held, and the
/// twin found no queue in its saturating phases, escalated to the rate allowed and wrote
/// no rate (tests/twin.rs beside the other tests, 2026-12-07).
fn queued_threshold_ns(low: &[Sample], clocks: &Clocks) -> f64 {
    let mut deviations: Vec<f64> = low.iter().filter_map(|s| clocks.relative_ns(s)).collect();
    deviations.sort_by(f64::total_cmp);
    quantile::of_sorted(&deviations, QUEUED_QUANTILE).unwrap_or(0.0) + QUEUED_MARGIN_NS
}

/// The bottleneck's rate from a saturating phase, or why it has none: deliveries as fast
/// as the probes were sent say the path carried them all, queue or not (a bigger probe's
/// own serialization can read as a queue).
fn saturation_rate(
    saturated: &[Sample],
    sparse: &[Sample],
    clocks: &Clocks,
    queued_ns: f64,
    resolution_ns: f64,
) -> Result<Figure, String> {
    let found = bottleneck_rate_beside(saturated, sparse, 0.0, clocks, queued_ns, resolution_ns);
    let sent = sent_rate_bps(saturated);
    match found {
        Some(rate) if sent.is_none_or(|sent| rate.value < 0.98 * sent) => Ok(rate),
        found => Err(format!(
            "the bottleneck's rate: the saturating probes built no queue (sent at {:.2} \
             Mbit/s of frames, {}: the path carried them all, or the sender fell behind)",
            sent.unwrap_or(0.0) / 1e6,
            found.map_or("fewer than 10 of them queued".to_owned(), |f| format!(
                "delivered at {:.2}",
                f.value / 1e6
            ))
        )),
    }
}

/// The saturating phase to send next when `phase` (sent after the low load `low_load`)
/// built no queue: [`ESCALATION`] times faster, within the rate allowed; `None` when it
/// found the bottleneck or already went at the rate allowed. The caller sends at most
/// [`MAX_ESCALATIONS`] and estimates from the last.
///
/// The rough capacity that sized `phase` can be far too low as well as too high: through
/// the bond over three lines (12, 6 and 3 Mbit/s) the packet trains found 3.4 to 4.4
/// Mbit/s in some runs, 19 in others, because the tunnel's line controllers pace idle lines
/// low and ramp up under load (what a short train does not wait for); 1.5 times that built
/// no queue and the twin had no rate.
pub fn escalate(
    input: &PlanInput,
    phase: &Phase,
    low_load: &[Sample],
    saturated: &[Sample],
    resolution_ns: f64,
) -> Option<Phase> {
    if queue_built(low_load, saturated, resolution_ns)?
        || phase.rate_bps >= input.max_rate_bps * 0.999
    {
        return None;
    }
    let rate_bps = (phase.rate_bps * ESCALATION).min(input.max_rate_bps);
    let bits = f64::from(phase.payload_bytes) * 8.0;
    Some(Phase::at(
        phase.payload_bytes,
        rate_bps / bits,
        SATURATION_S,
    ))
}

/// Whether a saturating phase (sent after the low load `low_load`) built a queue, and so
/// found a bottleneck below the rate it was sent at; `None` when no low-load probe
/// arrived (nothing to tell a queue by).
pub fn queue_built(low_load: &[Sample], saturated: &[Sample], resolution_ns: f64) -> Option<bool> {
    let clocks = Clocks::from_low_load(low_load)?;
    let queued_ns = queued_threshold_ns(low_load, &clocks);
    Some(saturation_rate(saturated, &[], &clocks, queued_ns, resolution_ns).is_ok())
}

/// The sparse flow sent beside a saturating phase `saturation` ([`crate::isolation`]):
/// [`SPARSE_PPS`] probes a second of [`LOW_LOAD_PAYLOAD`] bytes for as long.
pub fn sparse_beside(saturation: &Phase) -> Phase {
    Phase::at(LOW_LOAD_PAYLOAD, SPARSE_PPS, saturation.seconds())
}

/// The small-packet phase after an escalated saturating phase `saturation`: sized, as
/// [`plan`] sizes it, from the capacity that phase was sent at 1.5 times; `None` when it
/// would go above the rate allowed.
pub fn small_after(input: &PlanInput, saturation: &Phase) -> Option<Phase> {
    let full = f64::from(saturation.payload_bytes);
    let frames_bps = saturation.rate_bps * (full + f64::from(input.overhead_bytes)) / full;
    plan(input, Some(frames_bps / OVERFEED), false).small
}

/// Bits per second the phase's frames were sent at, from its first send to its last.
fn sent_rate_bps(samples: &[Sample]) -> Option<f64> {
    let first = samples.iter().map(|s| s.sent_ns).min()?;
    let last = samples.iter().map(|s| s.sent_ns).max()?;
    let bits: f64 = samples
        .iter()
        .skip(1)
        .map(|s| f64::from(s.len_bytes) * 8.0)
        .sum();
    (last > first).then(|| bits / ((last - first) as f64 * 1e-9))
}

/// The clocks' offset (the far end's clock minus this one's, ns) and how well it is
/// known, from the two directions' raw bases (`received - sent`, drift removed; up:
/// far minus near, down: near minus far) and their probes' serialization at the
/// bottleneck each way. Their sum is the base round trip, exact; how it splits is not
/// measurable end to end: the split assumed is equal propagation both ways (the
/// serialization differences taken out), known within a tenth of the round trip's
/// propagation either way, the asymmetry routes commonly show.
pub fn split_offset(
    up_raw_ns: f64,
    down_raw_ns: f64,
    up_serial_ns: f64,
    down_serial_ns: f64,
) -> (f64, f64) {
    let propagation = ((up_raw_ns + down_raw_ns) - up_serial_ns - down_serial_ns).max(0.0);
    let offset = ((up_raw_ns - up_serial_ns) - (down_raw_ns - down_serial_ns)) / 2.0;
    (offset, propagation * 0.1 / 2.0)
}

/// A probe's serialization at the bottleneck, ns: `frame_bytes` at `rate`, or the
/// packet-rate limit's slot where that is longer; 0 where neither was learned.
pub fn serialization_ns(estimates: &DirectionEstimates) -> f64 {
    let bytes_ns = estimates.rate_bps.as_ref().map_or(0.0, |rate| {
        f64::from(estimates.probe_bytes) * 8.0 / rate.value * 1e9
    });
    let slot_ns = match &estimates.packet_rate {
        Some(PacketRate::Limited { pps }) => 1e9 / pps.value,
        _ => 0.0,
    };
    bytes_ns.max(slot_ns)
}

/// The samples of a phase whose receiver recorded `arrivals` (sequence number, sent and
/// received times, ns) of `sent` probes of `frame_bytes`: one sample a probe, in sequence
/// order; a lost probe's send time is put between its neighbours' (the schedule is even).
pub fn samples_of(arrivals: &[(u64, u64, u64)], sent: u64, frame_bytes: u32) -> Vec<Sample> {
    let mut by_seq: Vec<Option<(u64, u64)>> = vec![None; sent as usize];
    for &(seq, sent_ns, received_ns) in arrivals {
        if let Some(slot) = by_seq.get_mut(seq as usize) {
            slot.get_or_insert((sent_ns, received_ns));
        }
    }
    let known: Vec<(usize, u64)> = by_seq
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|(sent_ns, _)| (i, sent_ns)))
        .collect();
    let interval_ns = match (known.first(), known.last()) {
        (Some(&(i0, t0)), Some(&(i1, t1))) if i1 > i0 => (t1 - t0) as f64 / (i1 - i0) as f64,
        _ => 0.0,
    };
    let anchor = known.first().copied().unwrap_or((0, 0));
    by_seq
        .iter()
        .enumerate()
        .map(|(i, s)| Sample {
            seq: i as u64,
            sent_ns: s.map_or_else(
                || {
                    let t = anchor.1 as f64 + (i as f64 - anchor.0 as f64) * interval_ns;
                    t.max(0.0) as u64
                },
                |(sent_ns, _)| sent_ns,
            ),
            len_bytes: frame_bytes,
            received_ns: s.map(|(_, received_ns)| received_ns),
        })
        .collect()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod twin_tests;

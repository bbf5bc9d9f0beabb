//! Link specifications: what one direction of a path does to packets.
//!
//! The syntax is netem's, as users paste it after `tc qdisc add dev X root netem`, plus
//! pathlab's additions (`queue ...`, byte limits, `trace`, `schedule`, `pps`, `preset`,
//! `distance`). [`LinkSpec::parse`] turns text into a validated [`LinkSpec`]; its `Display`
//! prints the canonical form, which parses back to the same spec (a preset and a distance
//! are printed as what they expand to).

mod display;
mod distance;
mod parse;
pub mod preset;
pub mod tc;
pub mod trace;
mod units;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use distance::{propagation_delay, FIBRE_KM_PER_MS, MAX_KM, ROUTE_FACTOR};
pub use parse::SpecError;

use crate::time::Duration;
use crate::units::{BitsPerSec, PacketsPerSec, Probability};

/// Everything one direction of a link does, in pipeline order: impairments (loss,
/// duplicate, corrupt), the bottleneck queue and its rate, then delay with jitter and
/// reordering, then slotting.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkSpec {
    /// Constant delay plus jitter.
    pub delay: Option<DelaySpec>,
    /// The delay's variation as an empirical distribution (`quantiles T0 T1 ... TN`),
    /// added to `delay` in place of a jitter.
    pub delay_quantiles: Option<DelayQuantiles>,
    /// Packet loss model.
    pub loss: Option<LossSpec>,
    /// Mark ECN-capable packets CE instead of dropping them when `loss` hits (netem `ecn`).
    pub ecn: bool,
    /// Packet duplication.
    pub duplicate: Option<Chance>,
    /// Single-bit corruption.
    pub corrupt: Option<Chance>,
    /// netem-style reordering: some packets skip the delay.
    pub reorder: Option<ReorderSpec>,
    /// Bottleneck rate: fixed, scheduled, or a trace.
    pub rate: Option<RateSpec>,
    /// Per-packet service limit of the bottleneck (`pps N`): a packet occupies it for at
    /// least 1/N s, however short its serialization at `rate`; alone (no `rate`), for
    /// exactly 1/N s.
    pub packet_rate: Option<PacketsPerSec>,
    /// A token bucket in front of a fixed `rate` (`rate R burst SIZE [peakrate P]`, as
    /// tc's tbf): the rate becomes the bucket's, the line's own is the peak (none: a
    /// burst leaves back to back).
    pub bucket: Option<TokenBucket>,
    /// A fixed `rate` that restarts slowly after an idle spell (`restart FROM RAMP [idle
    /// IDLE]`): see [`RestartSpec`].
    pub restart: Option<RestartSpec>,
    /// Slotted delivery (netem `slot`).
    pub slot: Option<SlotSpec>,
    /// The queue in front of the rate stage.
    pub queue: QueueSpec,
    /// The largest IP packet the link carries, bytes (`mtu 1400`): a longer one is dropped
    /// silently, as by a router whose "fragmentation needed" messages are filtered. The
    /// frame's 14-byte Ethernet header does not count (a 1500-byte MTU passes 1514-byte
    /// frames); a VLAN tag does.
    pub mtu: Option<u32>,
    /// Seed for the link's random choices (netem `seed`); `None` lets the caller choose.
    pub seed: Option<u64>,
}

/// The smallest `mtu` a spec may set: IPv4's minimum (RFC 791).
pub const MIN_MTU: u32 = 68;

impl LinkSpec {
    /// Parses a link specification in netem syntax plus pathlab's additions.
    pub fn parse(text: &str) -> Result<LinkSpec, SpecError> {
        parse::parse(text)
    }

    /// The mean one-way delay the spec adds besides queueing and slots (zero without a
    /// `delay`), with the mean of its `quantiles`.
    pub fn one_way_delay(&self) -> Duration {
        let variation = self
            .delay_quantiles
            .as_ref()
            .map_or(Duration::ZERO, DelayQuantiles::mean);
        self.delay.map_or(Duration::ZERO, |d| d.delay) + variation
    }

    /// Whether the spec does nothing at all to packets (an empty spec).
    pub fn is_passthrough(&self) -> bool {
        *self == LinkSpec::default()
    }

    /// Whether the link has a bottleneck (a queue in front of a server): a byte rate, a
    /// packet rate, or both. Without one, packets never queue.
    pub fn has_bottleneck(&self) -> bool {
        self.rate.is_some() || self.packet_rate.is_some()
    }

    /// How fast the bottleneck passes frames of `frame_bytes`, in bits of those frames per
    /// second: the rate less what its `OVERHEAD` and cells add to each frame (netem's
    /// accounting), or the packet-rate limit where that binds first (`pps`: N frames a
    /// second, whatever their size). `None` without a bottleneck or with one that varies
    /// (a schedule, a trace): no one figure to judge by.
    pub fn frame_rate_bps(&self, frame_bytes: f64) -> Option<f64> {
        let per_packet = self.packet_rate.map(|n| 1.0 / f64::from(n.get()));
        let serialization = match &self.rate {
            Some(RateSpec::Fixed(fixed)) => {
                Some(fixed.accounted_bytes(frame_bytes as u32) as f64 * 8.0 / fixed.rate.as_f64())
            }
            Some(_) => return None,
            None => None,
        };
        let service_s = match (serialization, per_packet) {
            (Some(s), Some(p)) => s.max(p),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => return None,
        };
        Some(frame_bytes * 8.0 / service_s)
    }

    /// The highest rate the bottleneck serves at (a schedule's highest step, a token
    /// bucket's peak), if it has a known one (`None`: no rate, a trace, whose rate is the
    /// caller's to load, or a bucket without a peak, whose bursts leave back to back).
    pub fn peak_rate(&self) -> Option<BitsPerSec> {
        if let Some(bucket) = self.bucket {
            return bucket.peak;
        }
        match &self.rate {
            Some(RateSpec::Fixed(fixed)) => Some(fixed.rate),
            Some(RateSpec::Schedule(schedule)) => schedule.rates.iter().copied().max(),
            Some(RateSpec::Trace(_)) | None => None,
        }
    }
}

/// Shape of the jitter distribution (netem `distribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Uniform over `[delay - jitter, delay + jitter]` (netem's default without a table).
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
    /// Pareto (heavy tail), scaled to standard deviation `jitter`.
    Pareto,
    /// netem's mix of Pareto and normal, scaled to standard deviation `jitter`.
    ParetoNormal,
}

/// `delay TIME [JITTER [CORRELATION]] [distribution NAME]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelaySpec {
    /// Mean one-way delay.
    pub delay: Duration,
    /// Jitter: half-width for uniform, standard deviation for the others.
    #[serde(default)]
    pub jitter: Duration,
    /// Correlation of successive jitter samples, in `[0, 1]`.
    #[serde(default)]
    pub correlation: Probability,
    /// Jitter distribution.
    #[serde(default)]
    pub distribution: Distribution,
}

/// The most quantiles `quantiles` takes: a percentile apiece and both ends, ten times
/// over (a measured distribution needs no more; the parser's work stays bounded).
pub const MAX_DELAY_QUANTILES: usize = 1001;

/// `quantiles T0 T1 ... TN`: the delay's variation as an empirical distribution, given by
/// its quantiles at equal steps of probability (`T0` at 0, `Ti` at `i / N`, `TN` at 1),
/// non-decreasing, 2 to [`MAX_DELAY_QUANTILES`] of them. Each packet draws a probability
/// uniformly and gets `delay` plus the quantile there, interpolated linearly between the
/// two listed around it: a measured distribution replayed as measured (`pathlab twin`
/// writes one), not a normal or Pareto fitted to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayQuantiles {
    /// The quantiles, in order.
    pub quantiles: Vec<Duration>,
}

impl DelayQuantiles {
    /// The mean of the distribution they describe (linear between the quantiles).
    pub fn mean(&self) -> Duration {
        let steps = self.quantiles.len().saturating_sub(1).max(1) as u128;
        let sum: u128 = self
            .quantiles
            .windows(2)
            .map(|w| u128::from(w[0].as_nanos()) + u128::from(w[1].as_nanos()))
            .sum();
        Duration::from_nanos(u64::try_from(sum / (2 * steps)).unwrap_or(u64::MAX))
    }
}

/// A probability with an optional correlation to the previous decision (netem's
/// `duplicate P [CORR]`, `corrupt P [CORR]`, `loss random P [CORR]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chance {
    /// Long-run probability of the event.
    pub probability: Probability,
    /// Correlation with the previous decision, in `[0, 1]`.
    #[serde(default)]
    pub correlation: Probability,
}

/// Loss models (netem `loss random|state|gemodel`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "model")]
pub enum LossSpec {
    /// Independent (or correlated) loss with probability `probability`.
    Random(Chance),
    /// netem's 4-state Markov model (`loss state p13 [p31 [p32 [p23 [p14]]]]`):
    /// 1 = good reception, 2 = good reception within a burst, 3 = burst loss,
    /// 4 = isolated loss. A packet is lost when the chain enters state 3 or 4.
    State {
        /// Probability of going from state 1 to 3 (a burst starts).
        p13: Probability,
        /// From 3 to 1 (the burst ends). Default `1 - p13`.
        p31: Probability,
        /// From 3 to 2 (a good packet inside the burst). Default 0.
        p32: Probability,
        /// From 2 to 3 (back to losing inside the burst). Default 1.
        p23: Probability,
        /// From 1 to 4 (an isolated loss). Default 0.
        p14: Probability,
    },
    /// Gilbert-Elliott (`loss gemodel p [r [1-h [1-k]]]`): a good and a bad state.
    GilbertElliott {
        /// Probability of going from good to bad.
        p: Probability,
        /// Probability of going from bad to good. Default `1 - p`.
        r: Probability,
        /// Loss probability in the bad state (`1-h`). Default 100%.
        loss_in_bad: Probability,
        /// Loss probability in the good state (`1-k`). Default 0%.
        loss_in_good: Probability,
    },
}

/// `reorder P [CORR] [gap N]`: with gap N, after N-1 delayed packets the next one is sent
/// without delay with probability P (netem semantics; gap defaults to 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReorderSpec {
    /// Probability that an eligible packet skips the delay.
    pub probability: Probability,
    /// Correlation with the previous decision.
    #[serde(default)]
    pub correlation: Probability,
    /// Only every `gap`-th packet is eligible (at least 1).
    pub gap: u32,
}

/// The bottleneck's rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum RateSpec {
    /// `rate RATE [PACKETOVERHEAD [CELLSIZE [CELLOVERHEAD]]]`.
    Fixed(FixedRate),
    /// `schedule STEP RATE...`: the rate changes every STEP, holding the last one
    /// (`schedule ... loop` repeats instead).
    Schedule(RateSchedule),
    /// `trace FILE`: a mahimahi trace, one delivery opportunity per line.
    Trace(TraceRef),
}

/// A token bucket (`burst SIZE [peakrate P]` after a fixed rate, as tc's tbf): it holds
/// `burst_bytes` of tokens when full and gains them at the rate; a frame leaves when the
/// bucket holds its accounted bytes, and takes them. Over a long run the rate holds;
/// after a pause, up to `burst_bytes` leave at `peak` (or back to back without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBucket {
    /// The bucket's size, bytes: at least one full frame.
    pub burst_bytes: u32,
    /// The line's own rate, above the bucket's; `None`: no limit on a burst's pace.
    #[serde(default)]
    pub peak: Option<BitsPerSec>,
}

/// A bottleneck that restarts slowly after an idle spell (`restart FROM RAMP [idle
/// IDLE]` beside a fixed rate): once it has been used less than half the time for
/// `idle`, its next packet finds it at `from` of its rate, which climbs in a straight
/// line to the whole rate over `ramp`. What a path whose capacity is handed out by a
/// controller does after a pause (a bonding tunnel's line controllers, a cellular
/// scheduler, TCP's own restart after idle, RFC 7661): a transfer's first second goes
/// slower than the rest. `idle` defaults to 1 s, the least retransmission timeout after
/// which TCP restarts from its initial window (RFC 5681 section 4.1, RFC 6298).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartSpec {
    /// The share of the rate the line restarts at, above 0 and at most 1.
    pub from: f64,
    /// How long the rate takes to climb from `from` to all of it (at most
    /// [`MAX_RESTART_TIME`]).
    pub ramp: Duration,
    /// How long the line must be (mostly) unused to restart, at least 1 ms, at most
    /// [`MAX_RESTART_TIME`].
    #[serde(default = "RestartSpec::default_idle")]
    pub idle: Duration,
}

impl RestartSpec {
    /// The idle spell after which a line restarts when the spec does not say.
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(1);

    fn default_idle() -> Duration {
        RestartSpec::DEFAULT_IDLE
    }
}

/// The longest ramp or idle spell a `restart` may give.
pub const MAX_RESTART_TIME: Duration = Duration::from_secs(60);

/// The largest bucket a spec may give (1 GiB): a cable plan's boost is tens of MB.
pub const MAX_BURST_BYTES: u32 = 1 << 30;

/// A fixed serialization rate with netem's per-packet accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedRate {
    /// Line rate.
    pub rate: BitsPerSec,
    /// Bytes added to (or, negative, removed from) every packet before accounting.
    #[serde(default)]
    pub packet_overhead: i32,
    /// Link-layer cell size in bytes (ATM: 53); 0 for none.
    #[serde(default)]
    pub cell_size: u32,
    /// Bytes of overhead per cell.
    #[serde(default)]
    pub cell_overhead: i32,
}

impl FixedRate {
    /// The bytes a packet of `len_bytes` counts for on the line, as netem's
    /// `packet_time_ns`: `len + packet_overhead` (not below 0); with a cell size,
    /// `ceil(that / cell_size)` cells of `cell_size + cell_overhead` bytes each. ATM
    /// (`48 5`): cells of 48 bytes of payload, 53 on the wire.
    pub fn accounted_bytes(&self, len_bytes: u32) -> u64 {
        let mut accounted = (i64::from(len_bytes) + i64::from(self.packet_overhead)).max(0);
        if self.cell_size > 0 {
            let cell_size = i64::from(self.cell_size);
            let cells = (accounted + cell_size - 1) / cell_size;
            accounted = cells
                .saturating_mul(cell_size + i64::from(self.cell_overhead))
                .max(0);
        }
        // Not negative, so it fits.
        accounted as u64
    }

    /// How long a packet of `len_bytes` takes on the line: its accounted bits over the
    /// rate, rounded up to the nanosecond. A zero rate never finishes.
    pub fn serialization_time(&self, len_bytes: u32) -> Duration {
        self.rate
            .serialization_time(self.accounted_bytes(len_bytes))
    }
}

/// A rate that steps through `rates`, one every `step`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSchedule {
    /// How long each rate lasts.
    pub step: Duration,
    /// The rates, in order (at least one).
    pub rates: Vec<BitsPerSec>,
    /// Start over after the last rate instead of holding it.
    #[serde(default)]
    pub repeat: bool,
}

/// A mahimahi trace named by a file, and its contents once loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRef {
    /// The file as the user named it.
    pub path: String,
    /// The parsed trace; the core does no I/O, so the caller loads it
    /// (see [`trace::Trace::parse`]).
    #[serde(skip)]
    pub trace: Option<Arc<trace::Trace>>,
}

/// `slot MIN [MAX] [packets N] [bytes N]` or
/// `slot distribution NAME DELAY JITTER [packets N] [bytes N]`: packets leave only at slot
/// boundaries, at most `max_packets`/`max_bytes` per slot (Wi-Fi, DOCSIS, LTE grants).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotSpec {
    /// How the gap between slots is drawn.
    pub interval: SlotInterval,
    /// Most packets released per slot.
    #[serde(default)]
    pub max_packets: Option<u32>,
    /// Most bytes released per slot.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

/// How long the gap between two slots is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum SlotInterval {
    /// Uniform in `[min, max]`.
    Uniform {
        /// Shortest gap.
        min: Duration,
        /// Longest gap.
        max: Duration,
    },
    /// Drawn from a distribution with mean `delay` and spread `jitter`.
    Distribution {
        /// Shape.
        distribution: Distribution,
        /// Mean gap.
        delay: Duration,
        /// Spread (as for [`DelaySpec::jitter`]).
        jitter: Duration,
    },
}

/// The queue in front of the bottleneck rate.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueSpec {
    /// Most packets held (`limit N`); `None` means the discipline's default
    /// (1000 as netem, 10240 for fq_codel).
    pub limit_packets: Option<u32>,
    /// Most bytes held (`limit 150kb`); `None` means no byte limit.
    pub limit_bytes: Option<u64>,
    /// How the queue drops or marks.
    pub discipline: Discipline,
    /// A FIFO below the discipline that holds up to this much of transmission (`ring
    /// 5ms`), as a device's transmit ring or a modem's buffer below a router's qdisc: a
    /// packet leaves the discipline once the bottleneck will be free within this time, and
    /// waits its turn there. `None`: a packet leaves the discipline as its transmission
    /// starts. At most [`MAX_RING`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring: Option<Duration>,
}

/// The longest `ring` a spec takes.
pub const MAX_RING: Duration = Duration::from_secs(10);

impl QueueSpec {
    /// The packet limit in force: the configured one or the discipline's default.
    pub fn effective_limit_packets(&self) -> u32 {
        self.limit_packets.unwrap_or(match self.discipline {
            Discipline::FqCodel(_) => 10_240,
            _ => 1_000,
        })
    }
}

/// Queue disciplines.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Discipline {
    /// Drop arrivals when full (`queue taildrop`, `queue fifo`); netem's behaviour.
    #[default]
    TailDrop,
    /// Drop the oldest packet when full (`queue headdrop`).
    HeadDrop,
    /// Random Early Detection (`queue red ...`).
    Red(RedConfig),
    /// Controlled Delay, RFC 8289 (`queue codel ...`).
    Codel(CodelConfig),
    /// Flow-queue CoDel, RFC 8290 (`queue fq_codel ...`).
    FqCodel(FqCodelConfig),
    /// Proportional Integral controller Enhanced, RFC 8033 (`queue pie ...`).
    Pie(PieConfig),
}

/// RED parameters (Floyd and Jacobson 1993; tc-red(8) names).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedConfig {
    /// Average backlog in bytes below which nothing is dropped (`min`).
    pub min_bytes: u64,
    /// Average backlog in bytes at which the drop probability reaches `max_probability` (`max`).
    pub max_bytes: u64,
    /// Drop probability at `max_bytes` (`probability`, default 2%).
    pub max_probability: Probability,
    /// EWMA weight of the average backlog (`weight`, or derived from `burst` as tc does).
    pub weight: f64,
    /// Typical packet size in bytes, used to age the average over idle time (`avpkt`).
    pub avpkt_bytes: u32,
    /// Mark ECN-capable packets instead of dropping (`ecn`).
    pub ecn: bool,
    /// Between max and 2 x max, rise from `max_probability` to 1 instead of jumping (`gentle`).
    pub gentle: bool,
    /// Drop even ECN-capable packets above max (`harddrop`).
    pub harddrop: bool,
}

impl Default for RedConfig {
    fn default() -> RedConfig {
        RedConfig {
            min_bytes: 0,
            max_bytes: 0,
            max_probability: Probability::new(0.02).expect("2% is a probability"),
            weight: 0.002,
            avpkt_bytes: 1000,
            ecn: false,
            gentle: false,
            harddrop: false,
        }
    }
}

/// CoDel parameters (RFC 8289 section 4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CodelConfig {
    /// Acceptable standing queue delay (`target`, default 5 ms).
    pub target: Duration,
    /// Window over which the minimum sojourn must exceed target (`interval`, default 100 ms).
    pub interval: Duration,
    /// Mark ECN-capable packets instead of dropping (`ecn`; `noecn` to turn off).
    pub ecn: bool,
    /// Mark CE above this sojourn without waiting for the control law (`ce_threshold`).
    pub ce_threshold: Option<Duration>,
}

impl Default for CodelConfig {
    fn default() -> CodelConfig {
        CodelConfig {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            ecn: false,
            ce_threshold: None,
        }
    }
}

/// FQ-CoDel parameters (RFC 8290 section 5.1 and Linux defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FqCodelConfig {
    /// Number of flow queues (`flows`, default 1024).
    pub flows: u32,
    /// Bytes a flow may send per round (`quantum`, default 1514).
    pub quantum: u32,
    /// CoDel parameters shared by every flow queue (default ECN on, as Linux).
    pub codel: CodelConfig,
    /// Most packets dropped at once from the fattest flow when the queue is full
    /// (`drop_batch`, default 64).
    pub drop_batch: u32,
}

impl Default for FqCodelConfig {
    fn default() -> FqCodelConfig {
        FqCodelConfig {
            flows: 1024,
            quantum: 1514,
            codel: CodelConfig {
                ecn: true,
                ..CodelConfig::default()
            },
            drop_batch: 64,
        }
    }
}

/// PIE parameters (RFC 8033 section 4 and Linux defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PieConfig {
    /// Target queueing delay (`target`, default 15 ms).
    pub target: Duration,
    /// How often the drop probability is updated (`tupdate`, default 15 ms).
    pub tupdate: Duration,
    /// Weight of the delay error (`alpha`, default 0.125 per second).
    pub alpha: f64,
    /// Weight of the delay trend (`beta`, default 1.25 per second).
    pub beta: f64,
    /// Burst allowance after idle (`max_burst`, default 150 ms).
    pub max_burst: Duration,
    /// Mark ECN-capable packets while the drop probability is under 10% (`ecn`).
    pub ecn: bool,
    /// Scale the drop probability by packet size (`bytemode`).
    pub bytemode: bool,
    /// Estimate queue delay from the departure rate (RFC 8033 section 5.3) instead of
    /// per-packet timestamps (`dq_rate_estimator`).
    pub dq_rate_estimator: bool,
}

impl Default for PieConfig {
    fn default() -> PieConfig {
        PieConfig {
            target: Duration::from_millis(15),
            tupdate: Duration::from_millis(15),
            alpha: 0.125,
            beta: 1.25,
            max_burst: Duration::from_millis(150),
            ecn: false,
            bytemode: false,
            dq_rate_estimator: false,
        }
    }
}

/// Parses a rate as tc writes it (`10mbit`, `1.5gbit`, `10M`; `mbps` is megabytes/s).
pub fn parse_rate(text: &str) -> Result<BitsPerSec, SpecError> {
    units::rate(text).map_err(|problem| match problem {
        units::RateProblem::NoUnit => SpecError::RateWithoutUnit(text.to_owned()),
        units::RateProblem::NotARate => SpecError::Expected {
            what: "a rate like 10mbit",
            after: "rate".into(),
            got: text.to_owned(),
        },
    })
}

/// Parses a time as tc writes it (`25ms`, `1.5s`; a bare number is microseconds).
pub fn parse_time(text: &str) -> Result<Duration, SpecError> {
    units::time(text).ok_or_else(|| SpecError::Expected {
        what: "a time like 25ms",
        after: "time".into(),
        got: text.to_owned(),
    })
}

/// Parses a time as a user types it on a command line or in an experiment file: `10s`,
/// `250ms`, `1.5s`, and a bare number is seconds (as in iperf3 and ping; inside a SPEC a
/// bare number is microseconds, as tc reads it).
pub fn parse_time_secs(text: &str) -> Result<Duration, SpecError> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
            Ok(Duration::from_secs_f64(seconds))
        }
        Ok(_) => Err(SpecError::Expected {
            what: "a time like 10s",
            after: "time".into(),
            got: text.to_owned(),
        }),
        Err(_) => parse_time(text),
    }
}

/// Parses a size as tc writes it (`1500`, `64kb` = 65536 bytes).
pub fn parse_size(text: &str) -> Result<u64, SpecError> {
    units::size(text).ok_or_else(|| SpecError::Expected {
        what: "a size like 1500 or 64kb",
        after: "size".into(),
        got: text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_rate(spec: &str) -> Option<f64> {
        LinkSpec::parse(spec).unwrap().frame_rate_bps(1514.0)
    }

    #[test]
    fn the_frame_rate_is_the_rate_less_overhead_and_cells_or_the_packet_rate() {
        assert_eq!(frame_rate("rate 10mbit"), Some(10e6));
        // 1514 + 8 bytes accounted: 1514/1522 of the line carries the frames.
        let with_overhead = frame_rate("rate 10mbit 8").unwrap();
        assert!((with_overhead - 10e6 * 1514.0 / 1522.0).abs() < 1e-6);
        // ATM: ceil((1514 + 8) / 48) = 32 cells of 53 bytes.
        let atm = frame_rate("rate 10mbit 8 48 5").unwrap();
        assert!((atm - 10e6 * 1514.0 / (32.0 * 53.0)).abs() < 1e-6);
        // 100 full frames a second bind before 10 Mbit/s (825 would not).
        assert_eq!(
            frame_rate("rate 10mbit pps 100"),
            Some(100.0 * 1514.0 * 8.0)
        );
        assert_eq!(frame_rate("rate 10mbit pps 1000"), Some(10e6));
        assert_eq!(frame_rate("pps 100"), Some(100.0 * 1514.0 * 8.0));
        assert_eq!(frame_rate("delay 10ms"), None);
        assert_eq!(frame_rate("schedule 1s 10mbit 20mbit"), None);
    }
}

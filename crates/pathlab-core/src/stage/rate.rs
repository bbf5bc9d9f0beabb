//! Rate models the bottleneck serializes with: fixed (netem's overhead and cells),
//! scheduled, and mahimahi traces.
//!
//! # Driving a [`RateModel`]
//!
//! The link asks [`RateModel::next_start`] when the head of its queue may start (the line
//! is free and, for traces, an opportunity with budget is there), dequeues the packet from
//! its queue *at that instant* (so AQMs see the exact sojourn), then calls
//! [`RateModel::transmit`] with that start, which returns when the packet's last bit has
//! left. All times are exact integer nanoseconds; a packet that can never finish gives
//! [`Instant::MAX`].
//!
//! # Fixed (`rate RATE [PACKETOVERHEAD [CELLSIZE [CELLOVERHEAD]]]`)
//!
//! As netem's `packet_time_ns` ([`FixedRate::accounted_bytes`]): the accounted length is
//! `len + packet_overhead` (not below 0); with a cell size, `cells = ceil(len' /
//! cell_size)` and the accounted length becomes `cells * (cell_size + cell_overhead)`.
//! The serialization time is the accounted bits over the rate, rounded up to the
//! nanosecond. `next_start(now) = max(now, busy_until)`. A zero rate never finishes.
//!
//! # Restart after idle (`rate RATE restart FROM RAMP [idle IDLE]`)
//!
//! A fixed rate without a bucket may restart slowly: after an idle spell it serves at a
//! share of itself that climbs to the whole over the ramp ([`super::restart`]).
//!
//! # Packet rate (`pps N`)
//!
//! A per-packet service limit beside any of the byte rates, or alone: no packet starts
//! less than 1/N s ([`PacketsPerSec::interval`]) after the previous one started, and none
//! finishes sooner than 1/N s after its start. With a fixed rate, a packet's service time
//! is therefore `max(accounted bits / rate, 1/N)`: small packets leave at N per second,
//! large ones at the byte rate, crossing where `accounted bytes = rate / (8 N)`. Without
//! a byte rate, every packet takes exactly 1/N s.
//!
//! # Token bucket (`rate R burst SIZE [peakrate P]`)
//!
//! As tc's tbf: a bucket of `SIZE` bytes of tokens, full at the start, gains them at `R`
//! (in the fixed rate's accounted bytes, overheads and cells included) up to `SIZE`. The
//! head of the queue is taken when the previous frame has left ([`RateModel::next_start`]),
//! as tbf peeks its child, and leaves once the bucket holds its accounted bytes, which it
//! takes; then it is serialized at `P`, or takes no time without a peak (a burst leaves
//! back to back, as through a tbf on a fast device). A long run leaves at `R`; a burst after
//! an idle time carries up to `SIZE` bytes more. Tokens count in bits x 1e9, exactly. A
//! frame larger than the bucket (the spec refuses a bucket under one full frame) waits for
//! a full bucket and empties it.
//!
//! # Schedule (`schedule STEP RATE... [loop]`)
//!
//! Rate `i` holds over `[origin + i step, origin + (i + 1) step)`; after the last one the
//! last rate holds forever, or with `repeat` the list starts over. The origin is
//! [`Instant::ZERO`] unless [`RateModel::with_origin`] moves it (before the origin, the
//! first rate holds). A transmission that spans a change is integrated exactly over the
//! pieces (bits times nanoseconds in 128-bit integers). Rate 0 is an outage: `next_start`
//! never starts a packet inside one (the packet waits in the queue, where its AQM sees
//! it), and a packet already on the line when an outage begins finishes after it.
//!
//! # Trace (`trace FILE`, mahimahi)
//!
//! Each line of a mahimahi trace is one delivery opportunity, an integer number of
//! milliseconds after the start; the trace loops with period = the last timestamp (so a
//! trace starting at 0 and ending at `P` has two opportunities at `P`, `P`+`0`, as in
//! mahimahi). Each opportunity may carry [`MAHIMAHI_OPPORTUNITY_BYTES`] = 1514 bytes, one
//! full-size Ethernet frame (mahimahi counts 1504: a 1500-byte IP packet plus its 4-byte
//! TUN header; pathlab carries Ethernet frames, so one frame per opportunity keeps the
//! meaning "one MTU-sized packet per line"). As in mahimahi's link queue:
//!
//! - budget not used at an opportunity is lost (the line does not save it up);
//! - several small packets may share one opportunity;
//! - a packet larger than the budget uses the rest of one opportunity and then as many
//!   following ones as it needs, and leaves at the one that carries its last byte;
//! - an opportunity at time `T` serves only packets that started at or before `T`;
//! - under a packet rate (`pps N`), which holds each start 1/N after the previous one, a
//!   packet that waited in the queue behind the previous one may take an opportunity at
//!   `T` if it starts before `T` + 1 ms (one that arrived later, none before it came): a
//!   trace's timestamps are whole milliseconds, and the opportunities stacked at one
//!   stand for that millisecond's. Without this a fast trace with a packet rate carried
//!   one frame per millisecond (11.55 Mbit/s of a 92.36 Mbit/s trace with `pps 86921`),
//!   every later packet's start past the stack.
//!
//! `next_start(now)` is the first opportunity at or after `now` with budget left (the
//! packet's start is that opportunity), and `transmit(start, len)` consumes budget from
//! there on and returns the time of the opportunity that carries the last byte.
//! `rate_at` is the long-run average, `opportunities x bytes x 8 / period`.

use std::sync::Arc;

use super::restart::Restart;
pub use crate::spec::trace::{Trace, TraceError};
use crate::spec::{FixedRate, LinkSpec, RateSpec, RestartSpec, TokenBucket};
use crate::time::{Duration, Instant};
use crate::units::{BitsPerSec, PacketsPerSec};

/// Bytes one mahimahi delivery opportunity carries: one full-size Ethernet frame.
pub const MAHIMAHI_OPPORTUNITY_BYTES: u32 = 1514;

/// Why a rate spec cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// A `trace FILE` whose contents were not loaded by the caller.
    #[error("trace '{0}' was not loaded")]
    TraceNotLoaded(String),
    /// A schedule without any rate.
    #[error("schedule has no rates: expected at least one rate after the step")]
    EmptySchedule,
    /// A schedule whose step is zero.
    #[error("schedule step is 0: each rate must last a positive time")]
    ZeroStep,
    /// A trace whose opportunities carry no bytes.
    #[error("trace opportunities must carry at least 1 byte")]
    ZeroOpportunity,
    /// A token bucket on a schedule or a trace, or one of 0 bytes.
    #[error("a token bucket needs a fixed rate and at least one byte")]
    Bucket,
    /// A `restart` on anything but a fixed rate without a bucket.
    #[error("'restart' needs a fixed rate without a bucket")]
    Restart,
}

#[derive(Debug, Clone)]
enum Model {
    Fixed {
        fixed: FixedRate,
        busy_until: Instant,
        /// A slow restart after idle spells (`restart`), if the spec has one.
        restart: Option<Box<Restart>>,
    },
    /// No byte rate: only a packet rate limits the server.
    Unlimited,
    Schedule {
        step_ns: u64,
        rates: Vec<u64>,
        repeat: bool,
        origin: Instant,
        /// Bits times nanoseconds one whole cycle carries, times 1e9 (see `integrate`).
        cycle_capacity: u128,
        busy_until: Instant,
    },
    Trace {
        trace: Arc<Trace>,
        bytes_per_opportunity: u32,
        origin: Instant,
        /// Index (over all loops) of the opportunity in use.
        cursor: u64,
        /// Bytes left at `cursor`.
        budget_left: u32,
    },
}

/// The packet-rate limit (`pps N`) in force beside a byte rate.
#[derive(Debug, Clone, Copy)]
struct PacketLimit {
    /// 1/N, rounded up to the nanosecond.
    interval: Duration,
    /// The previous packet's start plus `interval`: no packet starts before it.
    free_at: Instant,
}

/// A token bucket in front of the line (see the module's docs).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// The token rate and how a frame's bytes are counted.
    accounting: FixedRate,
    /// Tokens when full, bits x 1e9.
    capacity: u128,
    /// Tokens at `at`, bits x 1e9.
    tokens: u128,
    /// When the last frame left (it took its tokens then): no frame is taken before.
    at: Instant,
}

/// Bits x 1e9 in `bytes`.
fn token_units(bytes: u64) -> u128 {
    u128::from(bytes) * 8 * 1_000_000_000
}

impl Bucket {
    fn new(accounting: FixedRate, spec: TokenBucket) -> Bucket {
        let capacity = token_units(u64::from(spec.burst_bytes));
        Bucket {
            accounting,
            capacity,
            tokens: capacity,
            at: Instant::ZERO,
        }
    }

    /// A frame of `len_bytes` taken at `t`: when it may leave, its tokens taken then.
    fn take(&mut self, t: Instant, len_bytes: u32) -> Instant {
        let t = t.max(self.at);
        let rate = u128::from(self.accounting.rate.bits_per_sec());
        let gained = rate.saturating_mul(u128::from((t - self.at).as_nanos()));
        let tokens = self.tokens.saturating_add(gained).min(self.capacity);
        let need = token_units(self.accounting.accounted_bytes(len_bytes)).min(self.capacity);
        let leave = if tokens >= need {
            self.tokens = tokens - need;
            t
        } else if rate == 0 {
            return Instant::MAX;
        } else {
            let wait_ns = (need - tokens).div_ceil(rate);
            let wait = Duration::from_nanos(u64::try_from(wait_ns).unwrap_or(u64::MAX));
            let full = tokens
                .saturating_add(rate.saturating_mul(wait_ns))
                .min(self.capacity);
            self.tokens = full - need;
            t + wait
        };
        self.at = leave;
        leave
    }
}

/// The serializer's timing.
#[derive(Debug, Clone)]
pub struct RateModel {
    model: Model,
    packet_limit: Option<PacketLimit>,
    bucket: Option<Bucket>,
}

impl RateModel {
    /// The bottleneck a link spec describes: its byte rate and packet rate, either or
    /// both; `None` when it has neither (no bottleneck).
    pub fn for_link(spec: &LinkSpec) -> Result<Option<RateModel>, RateError> {
        let model = match (&spec.rate, spec.packet_rate, spec.bucket) {
            (None, None, _) => return Ok(None),
            (None, Some(_), _) => RateModel {
                model: Model::Unlimited,
                packet_limit: None,
                bucket: None,
            },
            (Some(RateSpec::Fixed(fixed)), _, Some(bucket)) => {
                if spec.restart.is_some() {
                    return Err(RateError::Restart);
                }
                RateModel::with_bucket(*fixed, bucket)?
            }
            (Some(_), _, Some(_)) => return Err(RateError::Bucket),
            (Some(rate), _, None) => match spec.restart {
                Some(restart) => RateModel::new(rate)?.with_restart(restart)?,
                None => RateModel::new(rate)?,
            },
        };
        Ok(Some(match spec.packet_rate {
            Some(packet_rate) => model.with_packet_rate(packet_rate),
            None => model,
        }))
    }

    /// A token bucket of `bucket` filled at `fixed`'s rate (and counting bytes as it
    /// does), in front of a line at the bucket's peak.
    pub fn with_bucket(fixed: FixedRate, bucket: TokenBucket) -> Result<RateModel, RateError> {
        if bucket.burst_bytes == 0 {
            return Err(RateError::Bucket);
        }
        let model = match bucket.peak {
            Some(peak) => Model::Fixed {
                fixed: FixedRate {
                    rate: peak,
                    ..fixed
                },
                busy_until: Instant::ZERO,
                restart: None,
            },
            None => Model::Unlimited,
        };
        Ok(RateModel {
            model,
            packet_limit: None,
            bucket: Some(Bucket::new(fixed, bucket)),
        })
    }

    /// Makes a fixed rate restart slowly after idle spells (`restart`); call it before
    /// the first packet. Any other model refuses it.
    pub fn with_restart(mut self, spec: RestartSpec) -> Result<RateModel, RateError> {
        match (&mut self.model, self.bucket) {
            (Model::Fixed { restart, .. }, None) => {
                *restart = Some(Box::new(Restart::new(spec)));
                Ok(self)
            }
            _ => Err(RateError::Restart),
        }
    }

    /// Adds a packet-rate limit (`pps N`) to the model; call it before the first packet.
    pub fn with_packet_rate(mut self, packet_rate: PacketsPerSec) -> RateModel {
        self.packet_limit = Some(PacketLimit {
            interval: packet_rate.interval(),
            free_at: Instant::ZERO,
        });
        self
    }

    /// The model a spec describes.
    pub fn new(spec: &RateSpec) -> Result<RateModel, RateError> {
        let model = match spec {
            RateSpec::Fixed(fixed) => Model::Fixed {
                fixed: *fixed,
                busy_until: Instant::ZERO,
                restart: None,
            },
            RateSpec::Schedule(schedule) => {
                if schedule.rates.is_empty() {
                    return Err(RateError::EmptySchedule);
                }
                if schedule.step.is_zero() {
                    return Err(RateError::ZeroStep);
                }
                let step_ns = schedule.step.as_nanos();
                let rates: Vec<u64> = schedule.rates.iter().map(|r| r.bits_per_sec()).collect();
                let cycle_capacity = rates
                    .iter()
                    .map(|&r| u128::from(r) * u128::from(step_ns))
                    .sum();
                Model::Schedule {
                    step_ns,
                    rates,
                    repeat: schedule.repeat,
                    origin: Instant::ZERO,
                    cycle_capacity,
                    busy_until: Instant::ZERO,
                }
            }
            RateSpec::Trace(trace) => match &trace.trace {
                Some(loaded) => {
                    return RateModel::from_trace(Arc::clone(loaded), MAHIMAHI_OPPORTUNITY_BYTES)
                }
                None => return Err(RateError::TraceNotLoaded(trace.path.clone())),
            },
        };
        Ok(RateModel {
            model,
            packet_limit: None,
            bucket: None,
        })
    }

    /// A trace model whose opportunities carry `bytes_per_opportunity` bytes each.
    pub fn from_trace(
        trace: Arc<Trace>,
        bytes_per_opportunity: u32,
    ) -> Result<RateModel, RateError> {
        if bytes_per_opportunity == 0 {
            return Err(RateError::ZeroOpportunity);
        }
        if trace.opportunities.is_empty() || trace.period.is_zero() {
            return Err(RateError::TraceNotLoaded("(empty trace)".to_owned()));
        }
        Ok(RateModel {
            model: Model::Trace {
                trace,
                bytes_per_opportunity,
                origin: Instant::ZERO,
                cursor: 0,
                budget_left: bytes_per_opportunity,
            },
            packet_limit: None,
            bucket: None,
        })
    }

    /// Moves the instant schedules and traces count from (default [`Instant::ZERO`]);
    /// call it before the first packet. No effect on a fixed rate.
    pub fn with_origin(mut self, start: Instant) -> RateModel {
        match &mut self.model {
            Model::Fixed { .. } | Model::Unlimited => {}
            Model::Schedule { origin, .. } | Model::Trace { origin, .. } => *origin = start,
        }
        self
    }

    /// Earliest instant at or after `now` (when the packet is ready: queued, and the
    /// previous one started) at which a packet may start.
    pub fn next_start(&self, now: Instant) -> Instant {
        if let (Model::Trace { .. }, Some(limit)) = (&self.model, self.packet_limit) {
            // A packet the packet rate holds back may take an opportunity of the
            // millisecond it starts in (see the module's docs).
            let start = now.max(limit.free_at);
            return self
                .bytes_next_start(trace_lookup_from(now, start, limit))
                .max(start);
        }
        let now = match self.packet_limit {
            Some(limit) => now.max(limit.free_at),
            None => now,
        };
        let now = match self.bucket {
            Some(bucket) => now.max(bucket.at),
            None => now,
        };
        self.bytes_next_start(now)
    }

    /// [`RateModel::next_start`] as the byte rate alone says.
    fn bytes_next_start(&self, now: Instant) -> Instant {
        match &self.model {
            Model::Unlimited => now,
            Model::Fixed { busy_until, .. } => now.max(*busy_until),
            Model::Schedule { busy_until, .. } => self.schedule_skip_outage(now.max(*busy_until)),
            Model::Trace {
                trace,
                origin,
                cursor,
                budget_left,
                ..
            } => {
                let index = first_usable(trace, *origin, *cursor, *budget_left, now);
                opportunity_time(trace, *origin, index)
            }
        }
    }

    /// A packet of `len_bytes` starts at `start` (from `next_start`); returns when its
    /// last bit has left. A start earlier than the end of the previous transmission is
    /// moved to it (transmissions never overlap). [`RateModel::transmit_ready`] for a
    /// packet ready before its start.
    pub fn transmit(&mut self, start: Instant, len_bytes: u32) -> Instant {
        self.transmit_ready(start, start, len_bytes)
    }

    /// [`RateModel::transmit`] of a packet ready at `ready` (the instant given to
    /// `next_start`): under a packet rate it may take a trace's opportunity between
    /// `ready` and `start` of the millisecond it starts in (see the module's docs).
    pub fn transmit_ready(&mut self, ready: Instant, start: Instant, len_bytes: u32) -> Instant {
        let start = match self.bucket {
            Some(_) => {
                let free = self.next_start(start);
                match &mut self.bucket {
                    Some(bucket) => bucket.take(free, len_bytes),
                    None => free,
                }
            }
            None => start,
        };
        let Some(limit) = self.packet_limit else {
            return self.bytes_transmit(start, len_bytes);
        };
        let start = start.max(limit.free_at);
        let from = match self.model {
            Model::Trace { .. } => trace_lookup_from(ready.min(start), start, limit),
            _ => start,
        };
        let bytes_end = self.bytes_transmit(from, len_bytes);
        let free_at = start + limit.interval;
        self.packet_limit = Some(PacketLimit { free_at, ..limit });
        bytes_end.max(free_at)
    }

    /// [`RateModel::transmit`] as the byte rate alone says.
    fn bytes_transmit(&mut self, start: Instant, len_bytes: u32) -> Instant {
        match &mut self.model {
            Model::Unlimited => start,
            Model::Fixed {
                fixed,
                busy_until,
                restart,
            } => {
                let start = start.max(*busy_until);
                *busy_until = match restart {
                    Some(restart) => restart.transmit(fixed, start, len_bytes),
                    None => start + fixed.serialization_time(len_bytes),
                };
                *busy_until
            }
            Model::Schedule { busy_until, .. } => {
                let start = start.max(*busy_until);
                let finish = self.integrate(start, len_bytes);
                if let Model::Schedule { busy_until, .. } = &mut self.model {
                    *busy_until = finish;
                }
                finish
            }
            Model::Trace {
                trace,
                bytes_per_opportunity,
                origin,
                cursor,
                budget_left,
            } => {
                let index = first_usable(trace, *origin, *cursor, *budget_left, start);
                let available = if index == *cursor {
                    *budget_left
                } else {
                    *bytes_per_opportunity
                };
                let (last, left) = if len_bytes <= available {
                    (index, available - len_bytes)
                } else {
                    let remaining = u64::from(len_bytes - available);
                    let per_opportunity = u64::from(*bytes_per_opportunity);
                    let extra = remaining.div_ceil(per_opportunity);
                    // Less than one opportunity's budget, so it fits a u32.
                    let left = (extra * per_opportunity - remaining) as u32;
                    (index.saturating_add(extra), left)
                };
                *cursor = last;
                *budget_left = left;
                opportunity_time(trace, *origin, last)
            }
        }
    }

    /// The line rate in force at `now` (for traces, the long-run average; for a token
    /// bucket, its rate, which a long run gets); `None` when only a packet rate limits the
    /// bottleneck.
    pub fn rate_at(&self, now: Instant) -> Option<BitsPerSec> {
        if let Some(bucket) = self.bucket {
            return Some(bucket.accounting.rate);
        }
        Some(match &self.model {
            Model::Unlimited => return None,
            Model::Fixed { fixed, .. } => fixed.rate,
            Model::Schedule { .. } => BitsPerSec(self.schedule_segment(now).0),
            Model::Trace {
                trace,
                bytes_per_opportunity,
                ..
            } => {
                let bits = trace.opportunities.len() as u128
                    * u128::from(*bytes_per_opportunity)
                    * 8
                    * 1_000_000_000;
                let rate = bits / u128::from(trace.period.as_nanos().max(1));
                BitsPerSec(u64::try_from(rate).unwrap_or(u64::MAX))
            }
        })
    }

    /// For a schedule: the rate at `t` and the end of its segment (`Instant::MAX` when
    /// it holds forever).
    fn schedule_segment(&self, t: Instant) -> (u64, Instant) {
        let Model::Schedule {
            step_ns,
            rates,
            repeat,
            origin,
            ..
        } = &self.model
        else {
            return (0, Instant::MAX);
        };
        if t < *origin {
            return (rates[0], *origin + Duration::from_nanos(*step_ns));
        }
        let segment = (t - *origin).as_nanos() / step_ns;
        let count = rates.len() as u64;
        let end =
            *origin + Duration::from_nanos(segment.saturating_add(1).saturating_mul(*step_ns));
        if segment < count {
            let index = segment as usize;
            if index + 1 == rates.len() && !*repeat {
                (rates[index], Instant::MAX)
            } else {
                (rates[index], end)
            }
        } else if *repeat {
            (rates[(segment % count) as usize], end)
        } else {
            (rates[rates.len() - 1], Instant::MAX)
        }
    }

    /// Moves `t` past any outage (rate 0) it falls in; `Instant::MAX` if the line never
    /// comes back.
    fn schedule_skip_outage(&self, mut t: Instant) -> Instant {
        let count = match &self.model {
            Model::Schedule { rates, .. } => rates.len(),
            _ => return t,
        };
        // At most one full cycle of segments needs to be looked at.
        for _ in 0..=count {
            let (rate, end) = self.schedule_segment(t);
            if rate > 0 {
                return t;
            }
            if end == Instant::MAX {
                return Instant::MAX;
            }
            t = end;
        }
        Instant::MAX
    }

    /// When `len_bytes` starting at `start` finish under the schedule.
    fn integrate(&self, start: Instant, len_bytes: u32) -> Instant {
        let Model::Schedule {
            step_ns,
            rates,
            repeat,
            origin,
            cycle_capacity,
            ..
        } = &self.model
        else {
            return Instant::MAX;
        };
        // Work in bits x 1e9: a rate of R bit/s over d ns carries R x d of these.
        let mut work = u128::from(len_bytes) * 8 * 1_000_000_000;
        let mut t = start;
        loop {
            if work == 0 {
                return t;
            }
            // With `repeat`, skip whole cycles at once when the packet needs several.
            if *repeat && t >= *origin {
                let cycle_ns = u128::from(*step_ns) * rates.len() as u128;
                let into_cycle = u128::from((t - *origin).as_nanos()) % cycle_ns;
                if into_cycle == 0 && work > *cycle_capacity {
                    if *cycle_capacity == 0 {
                        return Instant::MAX;
                    }
                    let cycles = (work - 1) / *cycle_capacity;
                    let span = u128::from(*step_ns) * rates.len() as u128 * cycles;
                    let Ok(span) = u64::try_from(span) else {
                        return Instant::MAX;
                    };
                    work -= cycles * *cycle_capacity;
                    t += Duration::from_nanos(span);
                    if t == Instant::MAX {
                        return Instant::MAX;
                    }
                }
            }
            let (rate, end) = self.schedule_segment(t);
            let span = (end - t).as_nanos();
            let capacity = u128::from(rate) * u128::from(span);
            if capacity >= work {
                let nanos = work.div_ceil(u128::from(rate));
                return t + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            }
            if end == Instant::MAX {
                return Instant::MAX;
            }
            work -= capacity;
            t = end;
        }
    }
}

/// Where a packet ready at `ready` and held by the packet rate `limit` until `start`
/// looks for a trace's opportunity (see the module's docs): none more than a millisecond
/// before its start, and none before it arrived. A packet ready when the one before it
/// started (`ready` is that start: it waited in the queue behind it) may take what is
/// left of that one's millisecond; the spent opportunities before are skipped anyway.
fn trace_lookup_from(ready: Instant, start: Instant, limit: PacketLimit) -> Instant {
    let resolution = Duration::from_millis(1);
    let within = Instant::from_nanos(start.as_nanos().saturating_sub(resolution.as_nanos() - 1));
    let previous_start = Instant::from_nanos(
        limit
            .free_at
            .as_nanos()
            .saturating_sub(limit.interval.as_nanos()),
    );
    if ready <= previous_start {
        within
    } else {
        ready.max(within)
    }
}

/// Absolute time of opportunity `index` (counted over all loops), saturating.
fn opportunity_time(trace: &Trace, origin: Instant, index: u64) -> Instant {
    let count = trace.opportunities.len() as u64;
    let cycle = index / count;
    let offset = trace.opportunities[(index % count) as usize];
    origin + trace.period.saturating_mul(cycle) + offset
}

/// Index of the first opportunity at or after `t` (counted over all loops).
fn first_at_or_after(trace: &Trace, origin: Instant, t: Instant) -> u64 {
    if t <= origin {
        return 0;
    }
    let count = trace.opportunities.len() as u64;
    let period = trace.period.as_nanos();
    let relative = (t - origin).as_nanos();
    let mut cycle = relative / period;
    // At an exact multiple of the period, the previous loop's last opportunities (at
    // offset `period`) come first.
    if relative.is_multiple_of(period) && cycle > 0 {
        cycle -= 1;
    }
    let within = Duration::from_nanos(relative - cycle * period);
    let j = trace.opportunities.partition_point(|&o| o < within) as u64;
    // `within <= period` and the last opportunity is the period, so `j < count`.
    cycle.saturating_mul(count).saturating_add(j)
}

/// Index of the first opportunity at or after `now` that still has budget, given the
/// cursor (opportunities before it are spent, later ones are fresh).
fn first_usable(
    trace: &Trace,
    origin: Instant,
    cursor: u64,
    budget_left: u32,
    now: Instant,
) -> u64 {
    if opportunity_time(trace, origin, cursor) >= now {
        if budget_left > 0 {
            cursor
        } else {
            cursor.saturating_add(1)
        }
    } else {
        first_at_or_after(trace, origin, now).max(cursor.saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{FixedRate, RateSchedule, TraceRef};

    fn fixed(rate: BitsPerSec, overhead: i32, cell: u32, cell_overhead: i32) -> RateModel {
        RateModel::new(&RateSpec::Fixed(FixedRate {
            rate,
            packet_overhead: overhead,
            cell_size: cell,
            cell_overhead,
        }))
        .unwrap()
    }

    fn schedule(step: Duration, rates: &[BitsPerSec], repeat: bool) -> RateModel {
        RateModel::new(&RateSpec::Schedule(RateSchedule {
            step,
            rates: rates.to_vec(),
            repeat,
        }))
        .unwrap()
    }

    #[test]
    fn a_link_specs_restart_slows_the_first_second_after_idle() {
        // 12 Mbit/s from 25% over 1 s: a backlog's first second carries 62.5% of 1.5 MB.
        let spec = LinkSpec::parse("rate 12mbit restart 25% 1s").unwrap();
        let mut model = RateModel::for_link(&spec).unwrap().unwrap();
        let (mut t, mut bytes) = (Instant::ZERO, 0u64);
        while t < Instant::from_secs(1) {
            t = model.transmit(model.next_start(t), 1500);
            bytes += 1500;
        }
        assert!((bytes as f64 - 0.625 * 1.5e6).abs() <= 1500.0, "{bytes}");
        let with_bucket = LinkSpec {
            bucket: Some(TokenBucket {
                burst_bytes: 64_000,
                peak: None,
            }),
            ..spec
        };
        assert_eq!(
            RateModel::for_link(&with_bucket).unwrap_err(),
            RateError::Restart
        );
    }

    /// `model`'s rate at each instant: `(at, Mbit/s)`.
    fn assert_rates_mbit(model: &RateModel, expected: &[(Instant, u64)]) {
        for &(at, mbit) in expected {
            assert_eq!(model.rate_at(at), Some(BitsPerSec::mbit(mbit)), "at {at}");
        }
    }

    fn trace_model(text: &str) -> RateModel {
        let trace = Trace::parse(text).unwrap();
        RateModel::new(&RateSpec::Trace(TraceRef {
            path: "test".into(),
            trace: Some(Arc::new(trace)),
        }))
        .unwrap()
    }

    /// A FIFO serializer, as the link serves packets (arrival, len) in order: each is
    /// ready at its arrival or when the one before it started, whichever is later, starts
    /// at `next_start` of that and leaves at `transmit_ready`'s answer.
    fn serialize(model: &mut RateModel, packets: &[(Instant, u32)]) -> Vec<Instant> {
        let mut started = Instant::ZERO;
        packets
            .iter()
            .map(|&(arrival, len)| {
                let ready = arrival.max(started);
                started = model.next_start(ready);
                model.transmit_ready(ready, started, len)
            })
            .collect()
    }

    #[test]
    fn fixed_rate_accounts_overhead_and_cells_like_netem() {
        let mut model = fixed(BitsPerSec::mbit(1), 14, 48, 5);
        // 1000 + 14 = 1014 bytes -> ceil(1014 / 48) = 22 cells of 53 bytes = 1166 bytes
        // = 9328 bits at 1 Mbit/s = 9.328 ms (netem packet_time_ns).
        let done = model.transmit(Instant::ZERO, 1000);
        assert_eq!(done, Instant::from_micros(9_328));
        assert_eq!(model.next_start(Instant::from_millis(1)), done);
        assert_eq!(
            model.next_start(Instant::from_millis(20)),
            Instant::from_millis(20)
        );
        // A back-to-back stream delivers exactly the rate: 1000 packets of 1250 bytes at
        // 10 Mbit/s take 1000 x 1 ms.
        let mut model = fixed(BitsPerSec::mbit(10), 0, 0, 0);
        let out = serialize(&mut model, &vec![(Instant::ZERO, 1250); 1000]);
        assert_eq!(out[999], Instant::from_secs(1));
        // Negative overhead never makes a negative length; a zero rate never finishes.
        let mut model = fixed(BitsPerSec::mbit(1), -2000, 0, 0);
        assert_eq!(model.transmit(Instant::ZERO, 100), Instant::ZERO);
        let mut model = fixed(BitsPerSec(0), 0, 0, 0);
        assert_eq!(model.transmit(Instant::ZERO, 100), Instant::MAX);
        assert_eq!(model.next_start(Instant::ZERO), Instant::MAX);
    }

    #[test]
    fn a_packet_rate_holds_back_every_kind_of_rate() {
        let ms = Instant::from_millis;
        let pps_1000 = PacketsPerSec(1000);
        // 10 Mbit/s and 1000 packets/s: 100 bytes take 80 us on the line but 1 ms of the
        // packet rate; 12 500 bytes take 10 ms, more than 1 ms.
        let mut model = fixed(BitsPerSec::mbit(10), 0, 0, 0).with_packet_rate(pps_1000);
        let out = serialize(
            &mut model,
            &[
                (Instant::ZERO, 100),
                (Instant::ZERO, 100),
                (Instant::ZERO, 12_500),
                (Instant::ZERO, 100),
            ],
        );
        assert_eq!(out, [ms(1), ms(2), ms(12), ms(13)]);
        // The same under a schedule that holds 10 Mbit/s.
        let mut model = schedule(Duration::from_secs(1), &[BitsPerSec::mbit(10)], false)
            .with_packet_rate(pps_1000);
        let out = serialize(&mut model, &[(Instant::ZERO, 100), (Instant::ZERO, 12_500)]);
        assert_eq!(out, [ms(1), ms(11)]);
        // Alone: exactly 1 ms per packet whatever its size; an idle server starts at once.
        let spec = LinkSpec::parse("pps 1000").unwrap();
        let mut alone = RateModel::for_link(&spec).unwrap().expect("a bottleneck");
        let out = serialize(
            &mut alone,
            &[(Instant::ZERO, 1), (Instant::ZERO, 65_535), (ms(5), 100)],
        );
        assert_eq!(out, [ms(1), ms(2), ms(6)]);
        assert_eq!(alone.rate_at(Instant::ZERO), None);
        // A trace (opportunities at 1 and 10 ms, looping every 10 ms) with 500 packets/s:
        // the first small packet takes the opportunity at 1 ms and occupies the server
        // until 3 ms; the next may start only then, at the next opportunity (10 ms), and
        // holds the server until 12 ms; the third waits for 20 ms.
        let mut model = trace_model("1\n10\n").with_packet_rate(PacketsPerSec(500));
        let out = serialize(&mut model, &[(Instant::ZERO, 100); 3]);
        assert_eq!(out, [ms(3), ms(12), ms(22)]);
        // Opportunities stacked at one millisecond are that millisecond's: a packet held
        // back by the packet rate takes the next one of the stack if it starts within the
        // millisecond. Three a millisecond with 10 000 packets/s: three leave 0.1 ms apart
        // from each opportunity's millisecond, the fourth waits for the next one.
        let mut model = trace_model("1\n1\n1\n2\n2\n2\n").with_packet_rate(PacketsPerSec(10_000));
        let out = serialize(&mut model, &[(Instant::ZERO, 1514); 7]);
        let us = Instant::from_micros;
        assert_eq!(
            out,
            [
                us(1_100),
                us(1_200),
                us(1_300),
                us(2_100),
                us(2_200),
                us(2_300),
                us(3_100)
            ]
        );
        // A packet that arrives after an opportunity never takes it, packet rate or not.
        let mut model = trace_model("1\n1\n2\n").with_packet_rate(PacketsPerSec(10_000));
        let out = serialize(&mut model, &[(Instant::ZERO, 1514), (us(1_050), 1514)]);
        assert_eq!(out, [us(1_100), us(2_100)]);
        // No rate and no packet rate: no bottleneck.
        let spec = LinkSpec::parse("delay 5ms").unwrap();
        assert!(RateModel::for_link(&spec).unwrap().is_none());
    }

    #[test]
    fn schedule_changes_rate_at_the_boundaries_and_integrates_across_them() {
        let step = Duration::from_millis(100);
        let mut model = schedule(step, &[BitsPerSec::mbit(10), BitsPerSec::mbit(1)], false);
        assert_rates_mbit(
            &model,
            &[
                (Instant::from_nanos(99_999_999), 10),
                (Instant::from_millis(100), 1),
                (Instant::from_secs(100), 1),
            ],
        );
        // 1514 bytes starting at 99 ms: 1 ms at 10 Mbit/s carries 10 000 bits; the other
        // 12 112 - 10 000 = 2112 bits take 2.112 ms at 1 Mbit/s: done at 102.112 ms.
        let done = model.transmit(Instant::from_millis(99), 1514);
        assert_eq!(done, Instant::from_micros(102_112));
        // Entirely inside the second segment: 1514 bytes at 1 Mbit/s = 12.112 ms.
        let done = model.transmit(Instant::from_millis(200), 1514);
        assert_eq!(done, Instant::from_micros(212_112));

        // Repeating with an outage: 8 Mbit/s for 10 ms, then down for 10 ms.
        let step = Duration::from_millis(10);
        let mut model = schedule(step, &[BitsPerSec::mbit(8), BitsPerSec(0)], true);
        // A packet cannot start during the outage: it waits for 20 ms.
        assert_eq!(
            model.next_start(Instant::from_millis(15)),
            Instant::from_millis(20)
        );
        // 25 000 bytes = 200 000 bits = 25 ms of line time at 8 Mbit/s: 10 ms in each of
        // the first two up-periods, the last 5 ms in the third: done at 40 + 5 = 45 ms.
        assert_eq!(
            model.transmit(Instant::ZERO, 25_000),
            Instant::from_millis(45)
        );
        // A huge packet skips whole cycles: 1 GB = 8e9 bits = 1000 s of line time =
        // 100 000 up-periods of 10 ms.
        let start = Instant::from_millis(60);
        let done = model.transmit(start, 1_000_000_000);
        // From 60 ms: up-period k (k = 0..) is [60 + 20k, 70 + 20k) ms; 100 000 of them
        // end at 60 + 20 x 99 999 + 10 = 2 000 050 ms.
        assert_eq!(done, Instant::from_millis(2_000_050));

        // An outage that never ends.
        let mut dead = schedule(step, &[BitsPerSec::mbit(1), BitsPerSec(0)], false);
        assert_eq!(dead.next_start(Instant::from_millis(30)), Instant::MAX);
        assert_eq!(dead.transmit(Instant::from_millis(5), 10_000), Instant::MAX);
        let mut zero = schedule(step, &[BitsPerSec(0)], true);
        assert_eq!(zero.transmit(Instant::ZERO, 1), Instant::MAX);
        assert!(RateModel::new(&RateSpec::Schedule(RateSchedule {
            step,
            rates: vec![],
            repeat: false
        }))
        .is_err());
    }

    #[test]
    fn origin_shifts_the_schedule() {
        let model = schedule(
            Duration::from_millis(10),
            &[BitsPerSec::mbit(1), BitsPerSec::mbit(2)],
            false,
        )
        .with_origin(Instant::from_secs(5));
        assert_rates_mbit(
            &model,
            &[
                (Instant::from_secs(1), 1),
                (Instant::from_millis(5_009), 1),
                (Instant::from_millis(5_010), 2),
            ],
        );
    }

    #[test]
    fn trace_delivers_full_frames_exactly_at_its_opportunities_looping() {
        let mut model = trace_model("# a comment\n0\n5\n5\n\n12  # period\n");
        // Average: 4 opportunities x 1514 B x 8 / 12 ms = 4 037 333 bit/s.
        assert_eq!(model.rate_at(Instant::ZERO), Some(BitsPerSec(4_037_333)));
        let out = serialize(&mut model, &[(Instant::ZERO, 1514); 12]);
        let expected: Vec<Instant> = [0, 5, 5, 12, 12, 17, 17, 24, 24, 29, 29, 36]
            .iter()
            .map(|&ms| Instant::from_millis(ms))
            .collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn trace_budget_is_shared_split_and_lost() {
        let mut model = trace_model("1\n2\n3\n10\n");
        // Three 500-byte packets share the opportunity at 1 ms (1500 <= 1514); the
        // fourth does not fit the 14 bytes left: it starts there and ends at 2 ms.
        let out = serialize(&mut model, &[(Instant::ZERO, 500); 4]);
        assert_eq!(out, [1, 1, 1, 2].map(Instant::from_millis));
        // 2 ms has 1514 - 486 = 1028 bytes left; a packet arriving at 2.5 ms cannot use
        // them (unused budget is lost): a 3000-byte packet takes 3 ms (1514 bytes) and
        // 10 ms (1486 bytes), and leaves at 10 ms with 28 bytes left there.
        assert_eq!(
            model.next_start(Instant::from_micros(2_500)),
            Instant::from_millis(3)
        );
        let out = serialize(&mut model, &[(Instant::from_micros(2_500), 3000)]);
        assert_eq!(out, [Instant::from_millis(10)]);
        // 28 bytes left at 10 ms: a 28-byte packet fits, the next goes to 11 ms (loop).
        let out = serialize(
            &mut model,
            &[
                (Instant::from_millis(10), 28),
                (Instant::from_millis(10), 1),
            ],
        );
        assert_eq!(out, [Instant::from_millis(10), Instant::from_millis(11)]);
        // Far in the future: the loop arithmetic jumps (1 000 000 periods of 10 ms).
        let out = serialize(&mut model, &[(Instant::from_nanos(10_000_000_000_500), 1)]);
        assert_eq!(out, [Instant::from_nanos(10_000_001_000_000)]);
    }

    #[test]
    fn trace_files_are_checked_with_line_numbers() {
        assert_eq!(Trace::parse(""), Err(TraceError::Empty));
        assert_eq!(Trace::parse("# only\n\n"), Err(TraceError::Empty));
        for (text, line, not_a_number) in [
            ("1\n2\nx3\n", 3, "x3"),
            ("1\n-2\n", 2, "-2"),
            ("1.5\n", 1, "1.5"),
        ] {
            let text_of_line = not_a_number.into();
            assert_eq!(
                Trace::parse(text),
                Err(TraceError::NotANumber {
                    line,
                    text: text_of_line
                })
            );
        }
        assert_eq!(
            Trace::parse("5\n\n4\n"),
            Err(TraceError::Decreasing {
                line: 3,
                value_ms: 4,
                previous_ms: 5
            })
        );
        assert_eq!(
            Trace::parse("0\n0\n"),
            Err(TraceError::ZeroPeriod { line: 2 })
        );
        assert!(matches!(
            Trace::parse("99999999999999999999\n"),
            Err(TraceError::TooLarge { line: 1, .. })
        ));
        let message = Trace::parse("1\nabc\n").unwrap_err().to_string();
        assert!(
            message.contains("line 2") && message.contains("abc"),
            "{message}"
        );
        // For a reader who may not read the file: the line and the problem, never its text.
        for (text, line) in [
            ("1\nSECRET\n", 2),
            ("99999999999999999999\n", 1),
            ("7\n3\n", 2),
        ] {
            let error = Trace::parse(text).unwrap_err();
            let message = error.without_contents();
            assert!(message.contains(&format!("line {line} ")), "{message}");
            for word in text.lines().filter(|w| *w != "1") {
                assert!(!message.contains(word), "{message} quotes {word}");
            }
        }
        let trace = Trace::parse("0\n3\n3\n7").unwrap();
        assert_eq!(trace.period, Duration::from_millis(7));
        assert_eq!(trace.opportunities.len(), 4);
        assert!(matches!(
            RateModel::new(&RateSpec::Trace(TraceRef {
                path: "x.trace".into(),
                trace: None
            })),
            Err(RateError::TraceNotLoaded(path)) if path == "x.trace"
        ));
    }

    fn bucket(spec: &str) -> RateModel {
        RateModel::for_link(&LinkSpec::parse(spec).unwrap())
            .unwrap()
            .unwrap()
    }

    /// When each of `count` frames of `len` bytes, all queued at `at`, leaves.
    fn departures(model: &mut RateModel, at: Instant, count: usize, len: u32) -> Vec<Instant> {
        let mut now = at;
        (0..count)
            .map(|_| {
                let end = model.transmit(model.next_start(now), len);
                now = end;
                end
            })
            .collect()
    }

    #[test]
    fn a_bucket_lets_its_burst_go_back_to_back_then_holds_the_rate() {
        // 10 frames of tokens at 10 Mbit/s: a frame's tokens take 1514 x 8 / 1e7 s.
        let per_frame = Duration::from_nanos(1_211_200);
        let frames = |n: u64| Duration::from_nanos(1_211_200 * n);
        let mut model = bucket("rate 10mbit burst 15140");
        let out = departures(&mut model, Instant::ZERO, 30, 1514);
        assert!(out[..10].iter().all(|&t| t == Instant::ZERO), "{out:?}");
        for (k, &t) in out.iter().enumerate().skip(10) {
            assert_eq!(t, Instant::ZERO + frames(k as u64 - 9), "frame {k}");
        }
        // Idle long enough to fill it, and no longer counts: ten again, not more.
        let later = out[29] + Duration::from_secs(10);
        let again = departures(&mut model, later, 11, 1514);
        assert!(again[..10].iter().all(|&t| t == later));
        assert_eq!(again[10], later + per_frame);
        // Half refilled: five.
        let soon = again[10] + frames(5);
        let half = departures(&mut model, soon, 6, 1514);
        assert!(half[..5].iter().all(|&t| t == soon), "{half:?}");
        assert_eq!(half[5], soon + per_frame);
        assert_eq!(model.rate_at(soon), Some(BitsPerSec::mbit(10)));
    }

    #[test]
    fn with_a_peak_the_burst_is_serialized_at_it_and_lasts_as_tbfs_does() {
        // 20 Mbit/s, 64 KB, peak 100 Mbit/s: while the burst lasts a frame takes
        // 121.12 us at the peak and the bucket loses 1514 B less what 20 Mbit/s refills
        // meanwhile (302.8 B): it lasts B / (1514 - 302.8) frames after the first ~ 54.
        let mut model = bucket("rate 20mbit burst 64kb peakrate 100mbit");
        let out = departures(&mut model, Instant::ZERO, 400, 1514);
        let at_peak = Duration::from_nanos(121_120);
        let burst = out
            .windows(2)
            .take_while(|w| w[1] - w[0] == at_peak)
            .count()
            + 1;
        let theory = 65_536.0 / (1514.0 - 302.8);
        assert!(
            (burst as f64 - theory).abs() <= 2.0,
            "{burst} frames at the peak, theory {theory:.1}"
        );
        // Then the rate: 605.6 us a frame, exactly, from the second frame after the burst.
        let sustained = Duration::from_nanos(605_600);
        assert!(out[burst + 1..]
            .windows(2)
            .all(|w| w[1] - w[0] == sustained));
        // Over the run: all the bytes less the bucket at the rate.
        let bits = 400.0 * 1514.0 * 8.0;
        let expected_s = (bits - 65_536.0 * 8.0) / 20e6;
        let took_s = (out[399] - Instant::ZERO).as_secs_f64();
        assert!(
            (took_s - expected_s).abs() < 2e-3,
            "{took_s} against {expected_s}"
        );
    }

    #[test]
    fn a_bucket_counts_bytes_as_its_rate_does_and_takes_no_head_early() {
        // ATM cells: a 1000-byte frame counts 1166 bytes (see the fixed-rate test).
        let mut model = bucket("rate 1mbit 14 48 5 burst 1600");
        assert_eq!(
            model.transmit(model.next_start(Instant::ZERO), 1000),
            Instant::ZERO
        );
        // 434 bytes left; the next needs 732 more: 5.856 ms at 1 Mbit/s.
        let second = model.transmit(model.next_start(Instant::ZERO), 1000);
        assert_eq!(second, Instant::from_micros(5_856));
        // The queue's head is not taken before the frame in the bucket has left.
        assert_eq!(model.next_start(Instant::ZERO), second);
        // A frame larger than the bucket waits for a full one and empties it.
        let mut model = bucket("rate 8mbit burst 1514");
        assert_eq!(model.transmit(Instant::ZERO, 9000), Instant::ZERO);
        assert_eq!(
            model.transmit(Instant::ZERO, 9000),
            Instant::from_micros(1_514)
        );
        // On a schedule or a trace, or of nothing, it is refused.
        let mut spec = LinkSpec::parse("schedule 1s 10mbit").unwrap();
        spec.bucket = Some(TokenBucket {
            burst_bytes: 5000,
            peak: None,
        });
        assert_eq!(RateModel::for_link(&spec).err(), Some(RateError::Bucket));
        let fixed = FixedRate {
            rate: BitsPerSec::mbit(1),
            packet_overhead: 0,
            cell_size: 0,
            cell_overhead: 0,
        };
        let empty = TokenBucket {
            burst_bytes: 0,
            peak: None,
        };
        assert_eq!(
            RateModel::with_bucket(fixed, empty).err(),
            Some(RateError::Bucket)
        );
    }

    #[test]
    fn extreme_values_do_not_panic() {
        for mut model in [
            fixed(BitsPerSec(1), i32::MAX, u32::MAX, i32::MIN),
            fixed(BitsPerSec(u64::MAX), i32::MIN, 1, i32::MAX),
            schedule(Duration::MAX, &[BitsPerSec(1), BitsPerSec(0)], true),
            schedule(Duration::from_nanos(1), &[BitsPerSec(u64::MAX)], true),
            trace_model("18446744073709\n"),
            trace_model("1\n"),
            fixed(BitsPerSec(1), 0, 0, 0).with_packet_rate(PacketsPerSec(1)),
            fixed(BitsPerSec(u64::MAX), 0, 0, 0).with_packet_rate(PacketsPerSec::MAX),
            RateModel::for_link(&LinkSpec::parse("pps 1").unwrap())
                .unwrap()
                .unwrap(),
            bucket("rate 1bit burst 1gb"),
            bucket("rate 1000gbit burst 1514 peakrate 2000gbit"),
            bucket("rate 1kbit 100 burst 2kb pps 1"),
        ] {
            for start in [Instant::ZERO, Instant::from_secs(1), Instant::MAX] {
                let begin = model.next_start(start);
                let _ = model.transmit(begin, u32::MAX);
                let _ = model.transmit(Instant::MAX, 0);
                let _ = model.rate_at(start);
            }
        }
    }
}

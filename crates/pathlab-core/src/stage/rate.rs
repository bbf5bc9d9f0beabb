//! Rate models the bottleneck serializes with.
//!
//! - **Fixed** (`rate RATE [OVERHEAD [CELLSIZE [CELLOVERHEAD]]]`): a packet of `len` bytes
//!   occupies the line for `len'` x 8 / rate, where `len' = len + overhead` and, with cells,
//!   `len' = ceil(len' / cellsize) x (cellsize + celloverhead)`, as netem accounts it.
//! - **Schedule** (`schedule STEP RATE...`): rate *i* holds over `[i x STEP, (i+1) x STEP)`,
//!   then the last one holds (or the list repeats with `loop`). A transmission that spans a
//!   change is integrated exactly over the pieces; a 0 rate is an outage.
//! - **Trace** (mahimahi): each line is one delivery opportunity, in integer milliseconds,
//!   and the trace loops with the last line's time as its period. An opportunity carries
//!   [`BYTES_PER_OPPORTUNITY`] bytes, one full-size Ethernet frame (mahimahi's 1504 was a
//!   1500-byte IP packet plus its 4-byte TUN header; pathlab's emulator carries frames).
//!   Several small packets may share an opportunity; budget an opportunity does not use is
//!   lost; a larger packet takes several. An opportunity at `T` serves packets waiting at `T`.

use std::sync::Arc;

use crate::spec::{FixedRate, RateSchedule, RateSpec};
use crate::time::{Duration, Instant};
use crate::units::BitsPerSec;

/// Bytes one trace opportunity carries.
pub const BYTES_PER_OPPORTUNITY: u32 = 1514;

/// A mahimahi trace: delivery opportunities (offsets within a period), looping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity times within one period, in non-decreasing order.
    pub opportunities: Vec<Duration>,
    /// Length of one period (the last line's time).
    pub period: Duration,
}

/// Why a trace file was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The file has no opportunities.
    #[error("trace is empty: expected one delivery time in milliseconds per line")]
    Empty,
    /// A line is not a whole number of milliseconds.
    #[error("line {line}: expected a whole number of milliseconds, got '{text}'")]
    NotMillis {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A time earlier than the line before.
    #[error("line {line}: {millis} ms is earlier than the line before; times must not decrease")]
    Decreasing {
        /// 1-based line number.
        line: usize,
        /// The time on that line.
        millis: u64,
    },
    /// The last time is zero, so the trace has no period.
    #[error("the last line must be after 0 ms: it is the trace's period")]
    ZeroPeriod,
}

impl Trace {
    /// Parses a mahimahi trace: one integer millisecond timestamp per line; blank lines and
    /// `#` comments are ignored.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut opportunities = Vec::new();
        let mut last = 0;
        for (index, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let millis: u64 = line.parse().ok().filter(|m| *m < 1 << 40).ok_or_else(|| {
                TraceError::NotMillis {
                    line: index + 1,
                    text: raw.to_owned(),
                }
            })?;
            if millis < last {
                return Err(TraceError::Decreasing {
                    line: index + 1,
                    millis,
                });
            }
            last = millis;
            opportunities.push(Duration::from_millis(millis));
        }
        if opportunities.is_empty() {
            return Err(TraceError::Empty);
        }
        if last == 0 {
            return Err(TraceError::ZeroPeriod);
        }
        Ok(Trace {
            opportunities,
            period: Duration::from_millis(last),
        })
    }

    /// The instant of the `k`-th opportunity since the start (counting over periods).
    fn opportunity(&self, k: u64) -> Instant {
        let n = self.opportunities.len() as u64;
        let period = (k / n).saturating_mul(self.period.as_nanos());
        Instant::from_nanos(period) + self.opportunities[(k % n) as usize]
    }

    /// The index of the first opportunity at or after `now`. An opportunity at the period's
    /// end (offset == period) belongs to the cycle before, so the search starts there.
    fn first_at_or_after(&self, now: Instant) -> u64 {
        let n = self.opportunities.len() as u64;
        let period = self.period.as_nanos();
        let mut cycle = (now.as_nanos() / period).saturating_sub(1);
        loop {
            let offset = Duration::from_nanos(now.as_nanos().saturating_sub(cycle * period));
            let within = self.opportunities.partition_point(|t| *t < offset) as u64;
            if within < n {
                return cycle * n + within;
            }
            cycle += 1;
        }
    }
}

/// Why a rate spec cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// A `trace FILE` whose contents were not loaded by the caller.
    #[error("trace '{0}' was not loaded")]
    TraceNotLoaded(String),
    /// A schedule without rates.
    #[error("a schedule needs at least one rate")]
    EmptySchedule,
}

#[derive(Debug, Clone)]
enum Kind {
    Fixed(FixedRate),
    Schedule(RateSchedule),
    Trace {
        trace: Arc<Trace>,
        /// The opportunity in use and the bytes it has left.
        current: Option<(u64, u32)>,
    },
}

/// The serializer's timing: when a packet may start and when its last bit leaves.
#[derive(Debug, Clone)]
pub struct RateModel {
    kind: Kind,
    busy_until: Instant,
}

impl RateModel {
    /// The model a spec describes.
    pub fn new(spec: &RateSpec) -> Result<RateModel, RateError> {
        let kind = match spec {
            RateSpec::Fixed(fixed) => Kind::Fixed(*fixed),
            RateSpec::Schedule(schedule) if schedule.rates.is_empty() => {
                return Err(RateError::EmptySchedule)
            }
            RateSpec::Schedule(schedule) => Kind::Schedule(schedule.clone()),
            RateSpec::Trace(reference) => Kind::Trace {
                trace: reference
                    .trace
                    .clone()
                    .ok_or_else(|| RateError::TraceNotLoaded(reference.path.clone()))?,
                current: None,
            },
        };
        Ok(RateModel {
            kind,
            busy_until: Instant::ZERO,
        })
    }

    /// Earliest instant at or after `now` at which a packet may start.
    pub fn next_start(&self, now: Instant) -> Instant {
        let now = now.max(self.busy_until);
        match &self.kind {
            Kind::Trace { trace, current } => trace.opportunity(Self::usable(trace, *current, now)),
            _ => now,
        }
    }

    /// The first opportunity at or after `now` with budget left.
    fn usable(trace: &Trace, current: Option<(u64, u32)>, now: Instant) -> u64 {
        let first = trace.first_at_or_after(now);
        match current {
            Some((k, left)) if k >= first => {
                if left > 0 {
                    k
                } else {
                    k + 1
                }
            }
            _ => first,
        }
    }

    /// A packet of `len_bytes` starts at `start` (from `next_start`); returns when its
    /// last bit has left, or [`Instant::MAX`] if it never can.
    pub fn transmit(&mut self, start: Instant, len_bytes: u32) -> Instant {
        let end = match &mut self.kind {
            Kind::Fixed(fixed) => {
                start
                    + fixed
                        .rate
                        .serialization_time(accounted_len(fixed, len_bytes))
            }
            Kind::Schedule(schedule) => schedule_end(schedule, start, u64::from(len_bytes) * 8),
            Kind::Trace { trace, current } => {
                let mut k = Self::usable(trace, *current, start);
                let mut left = match *current {
                    Some((ck, left)) if ck == k => left,
                    _ => BYTES_PER_OPPORTUNITY,
                };
                let mut remaining = len_bytes;
                loop {
                    let take = remaining.min(left);
                    remaining -= take;
                    left -= take;
                    if remaining == 0 {
                        break;
                    }
                    k += 1;
                    left = BYTES_PER_OPPORTUNITY;
                }
                *current = Some((k, left));
                // The next packet may use the rest of this opportunity, at its instant.
                return trace.opportunity(k);
            }
        };
        self.busy_until = end;
        end
    }

    /// The line rate in force at `now` (for a trace, its long-run average).
    pub fn rate_at(&self, now: Instant) -> BitsPerSec {
        match &self.kind {
            Kind::Fixed(fixed) => fixed.rate,
            Kind::Schedule(schedule) => schedule_rate(schedule, now).0,
            Kind::Trace { trace, .. } => {
                let bits = trace.opportunities.len() as u128
                    * u128::from(BYTES_PER_OPPORTUNITY)
                    * 8
                    * 1_000_000_000;
                BitsPerSec((bits / u128::from(trace.period.as_nanos())) as u64)
            }
        }
    }
}

/// netem's per-packet accounting: overhead, then whole cells.
fn accounted_len(fixed: &FixedRate, len_bytes: u32) -> u64 {
    let len = (i64::from(len_bytes) + i64::from(fixed.packet_overhead)).max(0) as u64;
    if fixed.cell_size == 0 {
        return len;
    }
    let cells = len.div_ceil(u64::from(fixed.cell_size));
    let cell = (i64::from(fixed.cell_size) + i64::from(fixed.cell_overhead)).max(0) as u64;
    cells * cell
}

/// The rate of a schedule at `t` and when it next changes (`Instant::MAX`: never).
fn schedule_rate(schedule: &RateSchedule, t: Instant) -> (BitsPerSec, Instant) {
    let step = schedule.step.as_nanos().max(1);
    let index = t.as_nanos() / step;
    let count = schedule.rates.len() as u64;
    let next_change = Instant::from_nanos((index + 1).saturating_mul(step));
    if index < count {
        let holds_forever = index == count - 1 && !schedule.repeat;
        let change = if holds_forever {
            Instant::MAX
        } else {
            next_change
        };
        (schedule.rates[index as usize], change)
    } else if schedule.repeat {
        (schedule.rates[(index % count) as usize], next_change)
    } else {
        (schedule.rates[(count - 1) as usize], Instant::MAX)
    }
}

/// When `bits` started at `start` are all sent under a schedule.
fn schedule_end(schedule: &RateSchedule, start: Instant, bits: u64) -> Instant {
    let mut t = start;
    // bits x 1e9, so a segment's capacity in bits x 1e9 is rate x nanoseconds: no rounding.
    let mut remaining = u128::from(bits) * 1_000_000_000;
    loop {
        let (rate, change) = schedule_rate(schedule, t);
        let rate = u128::from(rate.bits_per_sec());
        if rate == 0 {
            if change == Instant::MAX {
                return Instant::MAX;
            }
            t = change;
            continue;
        }
        let needed = remaining.div_ceil(rate);
        let span = u128::from(change.as_nanos() - t.as_nanos());
        if needed <= span {
            return Instant::from_nanos(t.as_nanos().saturating_add(needed as u64));
        }
        remaining -= span * rate;
        t = change;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TraceRef;

    fn fixed(rate: BitsPerSec, overhead: i32, cell: u32, cell_overhead: i32) -> RateModel {
        RateModel::new(&RateSpec::Fixed(FixedRate {
            rate,
            packet_overhead: overhead,
            cell_size: cell,
            cell_overhead,
        }))
        .expect("valid")
    }

    #[test]
    fn fixed_rate_accounts_overhead_and_cells_as_netem() {
        // 1500 + 20 bytes at 10 Mbit/s = 1.216 ms.
        let mut model = fixed(BitsPerSec::mbit(10), 20, 0, 0);
        assert_eq!(
            model.transmit(Instant::ZERO, 1500),
            Instant::from_nanos(1_216_000)
        );
        assert_eq!(
            model.next_start(Instant::ZERO),
            Instant::from_nanos(1_216_000)
        );
        // ATM: 100 bytes + 8 = 108 -> 3 cells of 48 -> 3 x 53 = 159 bytes at 1 Mbit/s.
        let mut atm = fixed(BitsPerSec::mbit(1), 8, 48, 5);
        assert_eq!(
            atm.transmit(Instant::ZERO, 100),
            Instant::from_nanos(1_272_000)
        );
    }

    fn schedule(rates: &[u64], repeat: bool) -> RateModel {
        RateModel::new(&RateSpec::Schedule(RateSchedule {
            step: Duration::from_secs(1),
            rates: rates.iter().map(|r| BitsPerSec::mbit(*r)).collect(),
            repeat,
        }))
        .expect("valid")
    }

    #[test]
    fn schedule_integrates_across_a_change() {
        let mut model = schedule(&[10, 1], false);
        // 1250 bytes = 10,000 bits starting 0.5 ms before the change: 5,000 bits at
        // 10 Mbit/s by 1 s, the other 5,000 at 1 Mbit/s take 5 ms more.
        let start = Instant::from_micros(999_500);
        assert_eq!(model.transmit(start, 1250), Instant::from_micros(1_005_000));
        assert_eq!(model.rate_at(Instant::from_secs(7)), BitsPerSec::mbit(1));
        let looping = schedule(&[10, 1], true);
        assert_eq!(looping.rate_at(Instant::from_secs(2)), BitsPerSec::mbit(10));
    }

    #[test]
    fn schedule_outages_wait_and_a_final_outage_never_ends() {
        let mut model = schedule(&[0, 8], false);
        // 1000 bytes at 8 Mbit/s after the 1 s outage: 1 ms.
        assert_eq!(
            model.transmit(Instant::ZERO, 1000),
            Instant::from_millis(1001)
        );
        let mut dead = schedule(&[8, 0], false);
        assert_eq!(dead.transmit(Instant::from_secs(1), 1), Instant::MAX);
    }

    fn trace_model(text: &str) -> RateModel {
        RateModel::new(&RateSpec::Trace(TraceRef {
            path: "t".into(),
            trace: Some(Arc::new(Trace::parse(text).expect("valid"))),
        }))
        .expect("loaded")
    }

    #[test]
    fn trace_delivers_at_its_opportunities_and_loops() {
        let mut model = trace_model("2\n2\n5\n");
        let mut departures = Vec::new();
        let mut now = Instant::ZERO;
        for _ in 0..6 {
            let start = model.next_start(now);
            departures.push(model.transmit(start, 1514).as_nanos() / 1_000_000);
            now = start;
        }
        assert_eq!(departures, vec![2, 2, 5, 7, 7, 10]);
        assert_eq!(
            model.rate_at(Instant::ZERO),
            BitsPerSec(3 * 1514 * 8 * 1000 / 5)
        );
    }

    #[test]
    fn small_packets_share_an_opportunity_and_big_ones_span_several() {
        let mut model = trace_model("1\n2\n3\n4\n");
        let first = model.next_start(Instant::ZERO);
        assert_eq!(model.transmit(first, 700), Instant::from_millis(1));
        let second = model.next_start(first);
        assert_eq!(second, first, "the rest of the opportunity is usable");
        assert_eq!(model.transmit(second, 700), Instant::from_millis(1));
        // 114 bytes left at 1 ms; 3000 bytes need them plus two more opportunities.
        let third = model.next_start(second);
        assert_eq!(model.transmit(third, 3000), Instant::from_millis(3));
        // A packet arriving after an unused opportunity waits for the next one.
        assert_eq!(
            model.next_start(Instant::from_micros(3500)),
            Instant::from_millis(4)
        );
    }

    #[test]
    fn bad_traces_name_the_line() {
        assert_eq!(Trace::parse(""), Err(TraceError::Empty));
        assert_eq!(Trace::parse("# only a comment\n"), Err(TraceError::Empty));
        assert_eq!(Trace::parse("0\n0\n"), Err(TraceError::ZeroPeriod));
        assert_eq!(
            Trace::parse("1\n\nx2\n"),
            Err(TraceError::NotMillis {
                line: 3,
                text: "x2".into()
            })
        );
        assert_eq!(
            Trace::parse("5\n3\n"),
            Err(TraceError::Decreasing { line: 2, millis: 3 })
        );
        let error = Trace::parse("1\n-4\n").expect_err("negative").to_string();
        assert!(error.contains("line 2") && error.contains("-4"), "{error}");
    }
}

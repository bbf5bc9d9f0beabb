//! Rate models the bottleneck serializes with: fixed (netem's overhead and cells),
//! scheduled, and mahimahi traces. STUB until implemented.

use crate::spec::RateSpec;
use crate::time::{Duration, Instant};
use crate::units::BitsPerSec;

/// A mahimahi trace: delivery opportunities (ms offsets), looping with the last as period.
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
}

impl Trace {
    /// Parses a mahimahi trace (one integer millisecond timestamp per line).
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let _ = text;
        Err(TraceError::Empty)
    }
}

/// Why a rate spec cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// A `trace FILE` whose contents were not loaded by the caller.
    #[error("trace '{0}' was not loaded")]
    TraceNotLoaded(String),
}

/// The serializer's timing.
#[derive(Debug, Clone)]
pub struct RateModel {
    rate: BitsPerSec,
    busy_until: Instant,
}

impl RateModel {
    /// The model a spec describes.
    pub fn new(spec: &RateSpec) -> Result<RateModel, RateError> {
        match spec {
            RateSpec::Fixed(fixed) => Ok(RateModel {
                rate: fixed.rate,
                busy_until: Instant::ZERO,
            }),
            RateSpec::Schedule(schedule) => Ok(RateModel {
                rate: schedule.rates[0],
                busy_until: Instant::ZERO,
            }),
            RateSpec::Trace(trace) => Err(RateError::TraceNotLoaded(trace.path.clone())),
        }
    }

    /// Earliest instant at or after `now` at which a packet may start.
    pub fn next_start(&self, now: Instant) -> Instant {
        now.max(self.busy_until)
    }

    /// A packet of `len_bytes` starts at `start` (from `next_start`); returns when its
    /// last bit has left.
    pub fn transmit(&mut self, start: Instant, len_bytes: u32) -> Instant {
        self.busy_until = start + self.rate.serialization_time(u64::from(len_bytes));
        self.busy_until
    }

    /// The line rate in force at `now` (for traces, the long-run average).
    pub fn rate_at(&self, now: Instant) -> BitsPerSec {
        let _ = now;
        self.rate
    }
}

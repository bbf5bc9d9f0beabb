//! A fixed rate that restarts slowly after an idle spell (`restart FROM RAMP [idle IDLE]`,
//! [`RestartSpec`]).
//!
//! # Idle
//!
//! The line counts its busy time in windows of `idle / 4`; a window it was busy in for
//! half its length or more is *used*. A packet that starts `idle` or more after the end of
//! the last used window (and after the start of the ramp in force) restarts the line; so
//! does the first packet of all (a line starts cold). A sparse flow (a ping beside nothing)
//! never uses a window: a line that carries only pings is idle, as a bonding tunnel's line
//! controller counts a line that sends far below its rate as idle.
//!
//! # The ramp
//!
//! From the restart's instant `o`, the rate is `R (from + (1 - from) (t - o) / ramp)` until
//! `o + ramp`, then `R`. A packet of `B` accounted bits starting at `s` ends at the `t`
//! where the rate's integral from `s` reaches `B`: inside the ramp the root of a quadratic,
//! after it `B / R`, across its end the two joined. The time is rounded up to the
//! nanosecond and never less than the packet's time at the whole rate.

use crate::spec::{FixedRate, RestartSpec};
use crate::time::{Duration, Instant};

/// The ramp's state beside a fixed rate.
#[derive(Debug, Clone)]
pub struct Restart {
    spec: RestartSpec,
    /// `idle / 4`, at least 1 ns: the windows busy time is counted in.
    window: Duration,
    /// When the ramp in force began; `None` before the first packet.
    origin: Option<Instant>,
    /// The end of the last window the line was busy half of or more.
    used_until: Option<Instant>,
    /// The start of the window being counted.
    window_start: Instant,
    /// Busy time in that window.
    busy: Duration,
}

impl Restart {
    /// A line that has not carried a packet yet (its first restarts it).
    pub fn new(spec: RestartSpec) -> Restart {
        Restart {
            spec,
            window: Duration::from_nanos((spec.idle.as_nanos() / 4).max(1)),
            origin: None,
            used_until: None,
            window_start: Instant::ZERO,
            busy: Duration::ZERO,
        }
    }

    /// A packet of `len_bytes` starting at `start` on `fixed`'s line: when its last bit
    /// leaves. `start` is at or after the previous packet's end.
    pub fn transmit(&mut self, fixed: &FixedRate, start: Instant, len_bytes: u32) -> Instant {
        self.close_windows(start);
        // Warm while the ramp began, or the line was last used, less than `idle` ago.
        let warm = self
            .origin
            .max(self.used_until)
            .is_some_and(|since| start.saturating_since(since) < self.spec.idle);
        let origin = match self.origin {
            Some(origin) if warm => origin,
            _ => start,
        };
        self.origin = Some(origin);
        let whole = fixed.serialization_time(len_bytes);
        let time = match self.ramp_time(fixed, start - origin, len_bytes) {
            Some(ramped) => ramped.max(whole),
            None => whole,
        };
        if time == Duration::MAX {
            return Instant::MAX;
        }
        self.busy = Duration::from_nanos(self.busy.as_nanos().saturating_add(time.as_nanos()));
        start.saturating_add(time)
    }

    /// Ends the windows that ended by `now`, marking the used one.
    fn close_windows(&mut self, now: Instant) {
        let end = self.window_start.saturating_add(self.window);
        if now < end {
            return;
        }
        if self.busy.as_nanos().saturating_mul(2) >= self.window.as_nanos() {
            self.used_until = Some(end);
        }
        self.busy = Duration::ZERO;
        let passed = (now - self.window_start).as_nanos() / self.window.as_nanos();
        self.window_start = self.window_start.saturating_add(Duration::from_nanos(
            passed.saturating_mul(self.window.as_nanos()),
        ));
    }

    /// How long a packet of `len_bytes` takes starting `into` the ramp, if it starts inside
    /// it (`None` after it: the whole rate's time).
    fn ramp_time(&self, fixed: &FixedRate, into: Duration, len_bytes: u32) -> Option<Duration> {
        let ramp = self.spec.ramp.as_nanos() as f64;
        let x0 = into.as_nanos() as f64;
        if x0 >= ramp || self.spec.from >= 1.0 {
            return None;
        }
        let rate = fixed.rate.as_f64() * 1e-9; // bits per ns
        if rate <= 0.0 {
            return Some(Duration::MAX);
        }
        let bits = fixed.accounted_bytes(len_bytes) as f64 * 8.0;
        let from = self.spec.from;
        // Bits carried between x0 and x (ns into the ramp, both inside it):
        // rate (from (x - x0) + slope / 2 (x^2 - x0^2)), slope = (1 - from) / ramp.
        let half_slope = (1.0 - from) / (2.0 * ramp);
        let carried = |x: f64| rate * (from * x + half_slope * x * x);
        let to_ramp_end = carried(ramp) - carried(x0);
        let end = if bits >= to_ramp_end {
            ramp + (bits - to_ramp_end) / rate
        } else {
            // half_slope x^2 + from x - (bits / rate + from x0 + half_slope x0^2) = 0.
            let c = bits / rate + from * x0 + half_slope * x0 * x0;
            2.0 * c / (from + (from * from + 4.0 * half_slope * c).sqrt())
        };
        let nanos = (end - x0).ceil();
        Some(if nanos >= u64::MAX as f64 {
            Duration::MAX
        } else {
            Duration::from_nanos(nanos as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::BitsPerSec;

    fn line(mbit: u64) -> FixedRate {
        FixedRate {
            rate: BitsPerSec::mbit(mbit),
            packet_overhead: 0,
            cell_size: 0,
            cell_overhead: 0,
        }
    }

    fn spec(from: f64, ramp_ms: u64, idle_ms: u64) -> RestartSpec {
        RestartSpec {
            from,
            ramp: Duration::from_millis(ramp_ms),
            idle: Duration::from_millis(idle_ms),
        }
    }

    /// Bytes a backlog of full frames gets through from `start` until `until`, frame
    /// after frame; the end of the last.
    fn backlog(
        model: &mut Restart,
        fixed: &FixedRate,
        start: Instant,
        until: Instant,
    ) -> (u64, Instant) {
        let (mut bytes, mut t) = (0, start);
        loop {
            let end = model.transmit(fixed, t, 1500);
            if end > until {
                return (bytes, t);
            }
            bytes += 1500;
            t = end;
        }
    }

    #[test]
    fn a_backlog_after_idle_carries_the_ramps_integral_then_the_whole_rate() {
        // 12 Mbit/s from 25% over 1 s: the first second carries (0.25 + 1) / 2 of 12
        // Mbit, the next the whole 12.
        let fixed = line(12);
        let mut model = Restart::new(spec(0.25, 1000, 1000));
        let (first, end) = backlog(&mut model, &fixed, Instant::ZERO, Instant::from_secs(1));
        let expected = 12e6 / 8.0 * 0.625;
        assert!(
            (first as f64 - expected).abs() <= 1500.0,
            "{first} of {expected}"
        );
        let (second, _) = backlog(&mut model, &fixed, end, Instant::from_secs(2));
        assert!(
            (second as f64 - 1.5e6).abs() <= 1500.0,
            "{second} of 1.5 MB"
        );
    }

    #[test]
    fn a_packet_at_the_start_goes_at_from_and_one_past_the_ramp_at_the_rate() {
        let fixed = line(10);
        let mut model = Restart::new(spec(0.5, 100, 1000));
        // 1500 bytes at 5 Mbit/s (and a hair faster as the ramp climbs): about 2.4 ms.
        let first = model.transmit(&fixed, Instant::ZERO, 1500) - Instant::ZERO;
        assert!(
            first > Duration::from_micros(2_350) && first < Duration::from_micros(2_400),
            "{first}"
        );
        // Past the ramp, busy all along: the whole rate's 1.2 ms.
        let (_, t) = backlog(
            &mut model,
            &fixed,
            Instant::ZERO + first,
            Instant::from_millis(150),
        );
        let end = model.transmit(&fixed, t, 1500);
        assert_eq!(end - t, fixed.serialization_time(1500));
    }

    #[test]
    fn only_an_idle_spell_restarts_the_line_and_pings_do_not_keep_it_warm() {
        let fixed = line(10);
        let mut model = Restart::new(spec(0.2, 500, 1000));
        let (_, t) = backlog(&mut model, &fixed, Instant::ZERO, Instant::from_secs(2));
        // 0.9 s quiet: still warm.
        let at = t + Duration::from_millis(900);
        let end = model.transmit(&fixed, at, 1500);
        assert_eq!(end - at, fixed.serialization_time(1500));
        // A ping every 10 ms for 1.2 s: the line is unused; the first ping past 1 s since
        // the backlog (its last used window) finds it restarted, at a fifth of its rate.
        let mut at = end;
        let normal = fixed.serialization_time(100).as_nanos() as f64;
        let mut slow = None;
        for _ in 0..120 {
            at += Duration::from_millis(10);
            let slowdown = (model.transmit(&fixed, at, 100) - at).as_nanos() as f64 / normal;
            if slowdown > 1.0 && slow.is_none() {
                slow = Some((at, slowdown));
            }
        }
        let (at, slowdown) = slow.expect("the line restarted");
        assert!(
            at >= t + Duration::from_secs(1) && at < t + Duration::from_millis(1010),
            "restarted at {at}, the backlog ended at {t}"
        );
        assert!((slowdown - 5.0).abs() < 0.1, "{slowdown}");
    }

    #[test]
    fn a_line_busy_more_than_half_the_time_stays_warm() {
        // 60% busy: a frame every 2 ms at 10 Mbit/s (1.2 ms each), for 5 s.
        let fixed = line(10);
        let mut model = Restart::new(spec(0.2, 200, 1000));
        let mut at = Instant::from_secs(1);
        for _ in 0..2500 {
            let end = model.transmit(&fixed, at, 1500);
            if at > Instant::from_millis(1500) {
                assert_eq!(end - at, fixed.serialization_time(1500), "at {at}");
            }
            at += Duration::from_millis(2);
        }
    }

    #[test]
    fn without_a_ramp_to_climb_the_rate_is_the_lines() {
        let fixed = line(10);
        let mut model = Restart::new(spec(1.0, 1000, 1000));
        let end = model.transmit(&fixed, Instant::ZERO, 1500);
        assert_eq!(end - Instant::ZERO, fixed.serialization_time(1500));
        let stopped = line(0);
        let mut model = Restart::new(spec(0.5, 1000, 1000));
        assert_eq!(model.transmit(&stopped, Instant::ZERO, 1500), Instant::MAX);
    }
}

//! The one clock: the only place pathlab asks the OS for the time.
//!
//! Models take `now` as a [`pathlab_core::Instant`] (integer ns from a zero); a [`Clock`]
//! maps the monotonic clock onto that time line and knows the wall-clock time of its zero,
//! so a result, a recording and the kernel's packet stamps (on `CLOCK_REALTIME`) line up.

use std::sync::OnceLock;

use pathlab_core::Instant;

/// The wall-clock time now, ns since the Unix epoch (`CLOCK_REALTIME`: the clock results,
/// recordings, probe timestamps and the kernel's packet stamps are on).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The wall-clock time now in whole seconds since the Unix epoch (file names, a result's
/// creation time).
pub fn unix_now_secs() -> u64 {
    unix_now_ns() / 1_000_000_000
}

/// A monotonic clock whose [`Instant::ZERO`] is when it started, with the wall-clock time
/// of that zero.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: std::time::Instant,
    /// Wall-clock time of [`Instant::ZERO`], in ns since the Unix epoch.
    pub zero_unix_ns: u64,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        let zero_unix_ns = unix_now_ns();
        Clock {
            start: std::time::Instant::now(),
            zero_unix_ns,
        }
    }

    /// The process's clock, whose zero is the first time it was asked for (the
    /// measurement sessions' time line).
    pub fn process() -> &'static Clock {
        static PROCESS: OnceLock<Clock> = OnceLock::new();
        PROCESS.get_or_init(Clock::start)
    }

    /// The current instant.
    pub fn now(&self) -> Instant {
        self.at(std::time::Instant::now())
    }

    /// The instant of a reading of the monotonic clock (the zero when it is before it).
    pub fn at(&self, time: std::time::Instant) -> Instant {
        Instant::from_nanos(time.saturating_duration_since(self.start).as_nanos() as u64)
    }

    /// The reading of the monotonic clock at an instant.
    pub fn monotonic(&self, at: Instant) -> std::time::Instant {
        self.start + std::time::Duration::from_nanos(at.as_nanos())
    }

    /// Wall-clock ns since the Unix epoch of an instant.
    pub fn unix_ns(&self, at: Instant) -> u64 {
        self.zero_unix_ns + at.as_nanos()
    }

    /// How long from now until `at` (zero if it is past).
    pub fn until(&self, at: Instant) -> std::time::Duration {
        at.saturating_since(self.now()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_monotonic_readings_map_both_ways() {
        let clock = Clock::start();
        let later = clock.monotonic(Instant::from_nanos(1_500_000));
        assert_eq!(clock.at(later), Instant::from_nanos(1_500_000));
        assert_eq!(
            clock.unix_ns(Instant::from_nanos(7)),
            clock.zero_unix_ns + 7
        );
        // Readings before the zero are the zero, not a wrap.
        if let Some(before) = later.checked_sub(std::time::Duration::from_secs(1)) {
            assert_eq!(clock.at(before), Instant::ZERO);
        }
        assert_eq!(clock.until(Instant::ZERO), std::time::Duration::ZERO);
    }
}

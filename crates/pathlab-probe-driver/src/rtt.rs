//! `pathlab rtt`'s run: one isochronous round-trip test against a server. The estimators
//! are [`pathlab_probe::rtt`]; this module connects and runs the test.

use std::time::Duration;

use pathlab_probe::rtt::RttReport;

use crate::{Partial, ServerTarget};

/// What `pathlab rtt` measures: the server and the requests.
#[derive(Debug, Clone)]
pub struct RttConfig {
    /// The server to measure against.
    pub target: ServerTarget,
    /// Time between requests.
    pub interval: Duration,
    /// Each request's UDP payload (replies are the same size).
    pub probe_bytes: u32,
    /// Requests to send.
    pub count: u64,
}

impl RttConfig {
    /// How many requests one every `interval` fit in `time`: at least one.
    pub fn count_for(time: Duration, interval: Duration) -> u64 {
        (time.as_nanos() / interval.as_nanos().max(1)).max(1) as u64
    }

    /// How long the test lasts: its requests at its interval.
    pub fn test_length(&self) -> Duration {
        self.interval
            .saturating_mul(u32::try_from(self.count).unwrap_or(u32::MAX))
    }
}

/// Runs `config`'s test; `on_start` hears how long it lasts once the server accepted it.
///
/// A test that fails part way keeps every request sent and reply received until then
/// ([`crate::Client::round_trip_or_partial`]).
pub fn run(
    config: &RttConfig,
    on_start: &mut dyn FnMut(Duration),
) -> Result<RttReport, Partial<RttReport>> {
    let client = config.target.connect()?;
    on_start(config.test_length());
    client.round_trip_or_partial(config.interval, config.probe_bytes, config.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_the_intervals_that_fit_and_never_zero() {
        let ms = Duration::from_millis;
        assert_eq!(RttConfig::count_for(Duration::from_secs(10), ms(10)), 1000);
        assert_eq!(RttConfig::count_for(ms(25), ms(10)), 2);
        assert_eq!(RttConfig::count_for(ms(5), ms(10)), 1);
    }

    #[test]
    fn a_loopback_run_answers_every_request() {
        let server = crate::loopback::Running::start();
        let config = RttConfig {
            target: server.target(),
            interval: Duration::from_millis(2),
            probe_bytes: 64,
            count: 20,
        };
        let mut lengths = Vec::new();
        let report = run(&config, &mut |length| lengths.push(length)).expect("loopback rtt");
        assert_eq!(lengths, [Duration::from_millis(40)]);
        assert_eq!((report.sent, report.replies), (20, 20));
    }
}

//! `pathlab owd`'s run: one one-way test per direction asked for, in turn, each on a fresh
//! control connection. The estimators are [`pathlab_probe::owd`]; this module connects,
//! runs the tests and keeps what a run that fails part way measured.

use std::time::Duration;

use pathlab_core::BitsPerSec;
use pathlab_probe::control::Direction;
use pathlab_probe::owd::OneWayResult;

use crate::{Partial, ServerTarget};

/// What `pathlab owd` measures, checked: the server, the probes and the directions.
#[derive(Debug, Clone)]
pub struct OwdConfig {
    /// The server to measure against.
    pub target: ServerTarget,
    /// The probes' rate, counting their UDP payload.
    pub rate: BitsPerSec,
    /// Each probe's UDP payload, at least [`OwdConfig::MIN_PROBE_BYTES`].
    pub probe_bytes: u32,
    /// Probes sent in each direction.
    pub count: u64,
    /// The directions to test, in this order.
    pub directions: Vec<Direction>,
    /// Packets per window of the queue verdict's trend test.
    pub window: usize,
}

impl OwdConfig {
    /// The smallest probe: its header alone ([`pathlab_probe::probe::HEADER_LEN`]).
    pub const MIN_PROBE_BYTES: u32 = pathlab_probe::probe::HEADER_LEN as u32;

    /// How many probes of `probe_bytes` at `rate` fill `time`: at least one, so that a
    /// test shorter than one probe's interval still sends a probe.
    pub fn count_for(time: Duration, rate: BitsPerSec, probe_bytes: u32) -> u64 {
        let interval_s = f64::from(probe_bytes) * 8.0 / rate.as_f64();
        ((time.as_secs_f64() / interval_s).round() as u64).max(1)
    }

    /// How long each direction's test lasts: its probes at its rate.
    pub fn test_length(&self) -> Duration {
        Duration::from_secs_f64(
            self.count as f64 * f64::from(self.probe_bytes) * 8.0 / self.rate.as_f64(),
        )
    }
}

/// What an `owd` run tells its caller as it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwdEvent {
    /// The test of `direction` was accepted and begins; it lasts about `length`.
    Started {
        /// Its direction.
        direction: Direction,
        /// How long its probes take to send.
        length: Duration,
    },
}

/// Runs `config`'s tests in turn; `on_event` hears of each as it begins.
///
/// A failure ends the run, keeping the directions that finished and what a downward test
/// cut short received ([`crate::OneWayTest::run_or_partial`]); `measured` is `None` when
/// that is nothing.
pub fn run(
    config: &OwdConfig,
    on_event: &mut dyn FnMut(OwdEvent),
) -> Result<Vec<OneWayResult>, Partial<Vec<OneWayResult>>> {
    let mut results = Vec::with_capacity(config.directions.len());
    for &direction in &config.directions {
        let outcome = config
            .target
            .connect()
            .map_err(Partial::nothing)
            .and_then(|client| {
                on_event(OwdEvent::Started {
                    direction,
                    length: config.test_length(),
                });
                client.one_way_or_partial(
                    direction,
                    config.rate.bits_per_sec(),
                    config.probe_bytes,
                    config.count,
                    config.window,
                )
            });
        match outcome {
            Ok(result) => results.push(result),
            Err(partial) => {
                results.extend(partial.measured.map(|result| *result));
                return Err(Partial {
                    error: partial.error,
                    measured: (!results.is_empty()).then(|| Box::new(results)),
                });
            }
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_fills_the_time_at_the_rate_and_is_never_zero() {
        // 1 Mbit/s of 1250-byte probes is one every 10 ms: 100 in a second.
        let rate = BitsPerSec(1_000_000);
        assert_eq!(
            OwdConfig::count_for(Duration::from_secs(1), rate, 1250),
            100
        );
        assert_eq!(
            OwdConfig::count_for(Duration::from_millis(1), rate, 1250),
            1
        );
    }

    #[test]
    fn a_loopback_run_measures_each_direction_in_turn() {
        let server = crate::loopback::Running::start();
        let config = OwdConfig {
            target: server.target(),
            rate: BitsPerSec(1_000_000),
            probe_bytes: 125,
            count: 50,
            directions: vec![Direction::Up, Direction::Down],
            window: 10,
        };
        assert_eq!(config.test_length(), Duration::from_millis(50));
        let mut started = Vec::new();
        let results = run(&config, &mut |event| started.push(event)).expect("loopback owd");
        let directions: Vec<Direction> = results.iter().map(|r| r.direction).collect();
        assert_eq!(directions, [Direction::Up, Direction::Down]);
        assert!(results.iter().all(|r| r.sequence.sent == 50));
        assert_eq!(
            started,
            [Direction::Up, Direction::Down].map(|direction| OwdEvent::Started {
                direction,
                length: Duration::from_millis(50)
            })
        );
    }

    #[test]
    fn a_run_that_cannot_connect_measured_nothing() {
        let config = OwdConfig {
            target: crate::loopback::nobody(),
            rate: BitsPerSec(1_000_000),
            probe_bytes: 125,
            count: 5,
            directions: vec![Direction::Up],
            window: 10,
        };
        let partial = run(&config, &mut |_| panic!("no test starts")).unwrap_err();
        assert!(partial.measured.is_none());
        assert!(matches!(
            partial.error,
            crate::MeasureError::Unreachable { .. }
        ));
    }
}

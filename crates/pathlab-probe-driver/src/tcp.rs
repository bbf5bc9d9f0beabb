//! `pathlab tcp`'s run: one bulk TCP test against a server ([`crate::streams`] runs its
//! streams; `pathlab tcp --rfc6349` is [`crate::rfc6349`]).

use std::time::Duration;

use pathlab_probe::tcp::TcpTestReport;

use crate::{Partial, ServerTarget, TcpTest};

/// What `pathlab tcp` measures: the server and the test.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// The server to measure against.
    pub target: ServerTarget,
    /// The streams, their direction, length, intervals and socket options.
    pub test: TcpTest,
}

/// Runs `config`'s test; `on_start` hears how long it lasts once connected.
///
/// A test that fails part way keeps this end's side of each stream until then
/// ([`crate::Client::tcp_or_partial`]).
pub fn run(
    config: &TcpConfig,
    on_start: &mut dyn FnMut(Duration),
) -> Result<TcpTestReport, Partial<TcpTestReport>> {
    let client = config.target.connect()?;
    on_start(config.test.duration);
    client.tcp_or_partial(&config.test)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TcpOptions;
    use pathlab_probe::control::TcpDirection;

    #[test]
    fn a_loopback_run_reports_each_stream_in_its_direction() {
        let server = crate::loopback::Running::start();
        let config = TcpConfig {
            target: server.target(),
            test: TcpTest {
                streams: 2,
                direction: TcpDirection::Both,
                duration: Duration::from_millis(300),
                interval: Duration::from_millis(100),
                sample_every: Duration::from_millis(10),
                options: TcpOptions::default(),
            },
        };
        let report = run(&config, &mut |length| {
            assert_eq!(length, Duration::from_millis(300));
        })
        .expect("loopback tcp");
        assert_eq!((report.up.len(), report.down.len()), (2, 2));
        assert!(report.up_bps > 0.0 && report.down_bps > 0.0);
    }
}

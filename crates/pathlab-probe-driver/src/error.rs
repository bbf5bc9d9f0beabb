//! Why a measurement failed, and what it had measured by then.

use std::io;
use std::time::Duration;

use pathlab_probe::session::SessionError;
use pathlab_probe::tcp::Starved;

/// Why a measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The server cannot be reached.
    #[error("cannot reach a pathlab server at {address}: {why}")]
    Unreachable {
        /// What was tried.
        address: String,
        /// Why (said in the message, so not a `source`: it would be printed twice).
        why: io::Error,
    },
    /// The host name does not resolve.
    #[error("cannot resolve '{0}'")]
    Resolve(String),
    /// The dialogue failed: the peer refused, timed out, closed, broke the protocol or
    /// reported an error (said as the session says it).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The server is shutting down (said to its clients, which see it as
    /// [`SessionError::Remote`]).
    #[error("the server is shutting down")]
    Stopped,
    /// The server sent no welcome, or no answer to a request, in time: it accepted the
    /// connection (its kernel did) but is frozen, overloaded, or cut off.
    #[error("the server stopped answering: no {what} within {:.0} s", within.as_secs_f64())]
    NoAnswer {
        /// What was awaited.
        what: &'static str,
        /// How long.
        within: Duration,
    },
    /// A running test's server went silent (frozen, or gone without closing the
    /// connection) or closed the connection before the test's results.
    #[error("{0}")]
    Interrupted(Interruption),
    /// A TCP test's upward stream got none of its data through for so long that the
    /// server's results, which wait for every stream's end, did not come within the
    /// grace: a queue or the path starved it. A result of the path rather than a failure
    /// of the test: what got through, and the gap, are in the partial result.
    #[error("{0}")]
    Starved(Starvation),
    /// A socket call failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// How a server failed a running test, and when: what [`MeasureError::Interrupted`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct Interruption {
    /// Whether the server closed the connection (it stopped or crashed); else it went
    /// silent (frozen, or gone without a word: a host that left the network).
    pub closed: bool,
    /// Seconds from the test's start (the server's accept) to when the client gave up or
    /// saw the connection close.
    pub at_s: f64,
    /// Seconds from the test's start to the last sign of the server: a control message, a
    /// probe or reply, data received, data it took; `None` when it gave none during the
    /// test (an upward one-way test's receiver says nothing until the end).
    pub last_heard_s: Option<f64>,
    /// What the client waited for: "results", "answer to a path MTU probe".
    pub awaited: &'static str,
    /// The bound the wait had, as said in the message: "within 10 s of its end".
    pub bound: String,
}

impl std::fmt::Display for Interruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.closed {
            write!(
                f,
                "the server closed the connection {:.1} s into the test, before its {} (it \
                 stopped or crashed)",
                self.at_s, self.awaited
            )
        } else {
            match self.last_heard_s {
                Some(heard) => {
                    write!(f, "the server stopped answering {heard:.1} s into the test")?;
                }
                None => write!(f, "the server stopped answering during the test")?,
            }
            write!(
                f,
                " (no {} {}; it is frozen, overloaded or unreachable)",
                self.awaited, self.bound
            )
        }
    }
}

/// Which upward streams of a TCP test were starved, and how: what
/// [`MeasureError::Starved`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct Starvation {
    /// Each starved stream's index and record, in index order.
    pub streams: Vec<(u32, Starved)>,
}

impl std::fmt::Display for Starvation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let indexes: Vec<String> = self.streams.iter().map(|(i, _)| i.to_string()).collect();
        let longest = self
            .streams
            .iter()
            .map(|&(_, starved)| starved)
            .max_by_key(|s| s.longest_gap_ns)
            .unwrap_or_default();
        write!(
            f,
            "upward stream{} {} {} from {:.1} s into the test (retransmissions went \
             unanswered: a queue or the path dropped what was sent), so the server's \
             results, which wait for every stream's end, never came",
            if indexes.len() == 1 { "" } else { "s" },
            indexes.join(", "),
            longest.summary(),
            longest.gap_from_ns as f64 * 1e-9,
        )
    }
}

/// A test (or a procedure of several) that ended early: why, and what it had measured by
/// then, for `--save` to keep.
#[derive(Debug)]
pub struct Partial<T, E = MeasureError> {
    /// Why it ended.
    pub error: E,
    /// What it measured before (none when nothing was: an upward one-way test whose
    /// receiver's records never came, a test that never started). Boxed: a result is
    /// large, and an error is passed up through every step.
    pub measured: Option<Box<T>>,
}

impl<T, E> Partial<T, E> {
    /// An error with nothing measured.
    pub fn nothing(error: E) -> Partial<T, E> {
        Partial {
            error,
            measured: None,
        }
    }
}

impl<T> From<MeasureError> for Partial<T> {
    fn from(error: MeasureError) -> Partial<T> {
        Partial::nothing(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interruption_says_what_happened_when_and_the_bound() {
        let frozen = Interruption {
            closed: false,
            at_s: 13.0,
            last_heard_s: Some(3.21),
            awaited: "results",
            bound: "within 10 s of its end".into(),
        };
        assert_eq!(
            frozen.to_string(),
            "the server stopped answering 3.2 s into the test (no results within 10 s of its \
             end; it is frozen, overloaded or unreachable)"
        );
        let unheard = Interruption {
            last_heard_s: None,
            ..frozen.clone()
        };
        assert!(unheard
            .to_string()
            .starts_with("the server stopped answering during the test (no results"));
        let killed = Interruption {
            closed: true,
            at_s: 1.04,
            ..frozen
        };
        assert_eq!(
            killed.to_string(),
            "the server closed the connection 1.0 s into the test, before its results (it \
             stopped or crashed)"
        );
    }

    #[test]
    fn a_starvation_says_which_streams_for_how_long_and_since_when() {
        let starved = |gap_s: u64, from_s: u64| Starved {
            longest_gap_ns: gap_s * 1_000_000_000,
            gap_from_ns: from_s * 1_000_000_000,
        };
        let one = Starvation {
            streams: vec![(0, starved(20, 5))],
        };
        assert_eq!(
            one.to_string(),
            "upward stream 0 starved: no data for 20.0 s from 5.0 s into the test \
             (retransmissions went unanswered: a queue or the path dropped what was sent), \
             so the server's results, which wait for every stream's end, never came"
        );
        let two = Starvation {
            streams: vec![(1, starved(12, 8)), (3, starved(17, 3))],
        };
        assert!(two
            .to_string()
            .starts_with("upward streams 1, 3 starved: no data for 17.0 s from 3.0 s"));
    }
}

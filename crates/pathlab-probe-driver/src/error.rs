//! Why a measurement failed, and what it had measured by then.

use std::io;
use std::time::Duration;

use pathlab_probe::session::SessionError;

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
}

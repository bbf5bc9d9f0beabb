//! pathlab-probe-driver: the sockets of the measurement commands: `pathlab server` and its clients.
//!
//! The dialogue, its limits and authentication, and what the data plane accepts are the
//! state machines of [`pathlab_probe::session`]; every estimator is in `pathlab-probe` too.
//! This crate is their driver: it moves control bytes over TCP and probes over UDP, reads
//! the clock, paces probes (sleeping until 200 us before each send and spinning the rest),
//! and takes receive times from the kernel (`SO_TIMESTAMPNS`).
//!
//! The server runs every connection's handshake in one event loop (no thread per idle
//! connection), bounded overall and per source address; an accepted test runs on a thread
//! of its own, at most `--max-tests` of them.
//!
//! Layer: the driver of `pathlab-probe`, over `pathlab-os` (sockets, the clock) and
//! `pathlab-http` (the server's `/metrics`). The client and server ([`client`],
//! [`server`]) drive the control dialogue ([`conn`]) and the data plane ([`probes`] for
//! UDP, [`streams`] for TCP); [`capacity`], [`bloat`], [`rfc6349`] and [`blocks`] are the
//! multi-step tests built on them, [`ping`] an ICMP pinger, [`sockdiag`] the kernel's view
//! of other programs' sockets for `inspect`.
//!
//! Each client command's run is here too, behind a configuration the command line builds
//! ([`owd::OwdConfig`], [`rtt::RttConfig`], [`tcp::TcpConfig`],
//! [`capacity::CapacityConfig`], [`bloat::BloatConfig`], [`rfc6349::Rfc6349Config`], each
//! naming its [`ServerTarget`]): it connects, runs the tests in turn, tells its caller of
//! its progress through a callback and returns what it measured, or an error that keeps
//! what it had measured. It prints nothing; the command prints and saves. So are
//! `tune`'s measurements and its read of the host's settings ([`tune::TuneConfig`]) and
//! `inspect`'s watch ([`inspect::InspectConfig`]); the server's is [`ServerConfig`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bloat;
pub mod blocks;
pub mod capacity;
pub mod client;
mod conn;
pub mod counters;
mod error;
pub mod inspect;
#[cfg(test)]
mod loopback;
pub mod mtu;
pub mod owd;
pub mod ping;
pub mod probes;
pub mod rfc6349;
pub mod rtt;
pub mod server;
pub mod sockdiag;
pub mod streams;
mod target;
pub mod tcp;
pub mod tune;
pub mod twin;

pub use client::{Client, OneWayTest, ProbeArrivals, CONNECT_TIMEOUT};
pub use counters::{metrics, MeasurementServerCounters, RefusalReason, TestKind, TestOutcome};
pub use error::{Interruption, MeasureError, Partial, Starvation};
pub use pathlab_probe::session::MAX_STREAMS;
pub use server::{Server, ServerConfig};
pub use streams::{TcpOptions, TcpTest};
pub use target::ServerTarget;

pub(crate) use conn::{
    clock, prepare_probe_socket, random, timed_out, until, Conn, Control, STRAGGLERS_STD,
    TEST_GRACE_STD,
};

/// The server's default TCP port.
pub const DEFAULT_PORT: u16 = 4920;

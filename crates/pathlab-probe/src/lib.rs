//! pathlab-probe: the measurement protocol and estimators, sans-IO.
//!
//! Wire formats ([`probe`] for UDP probes, [`control`] for the TCP control connection),
//! optional pre-shared-key authentication ([`auth`]), and the estimators that turn what a
//! receiver recorded into figures: loss, duplicates and reordering ([`sequence`], RFC
//! 4737), interarrival jitter (RFC 3550) and one-way delay deviation with a queue verdict
//! ([`owd`]), the packetization-layer path MTU search ([`mtu`], RFC 4821), capacity and
//! available bandwidth from packet dispersion and self-loading streams ([`capacity`]), and
//! latency under load graded as a bufferbloat test does ([`bloat`]). Nothing here opens a
//! socket or reads a clock: timestamps come in as numbers, so every estimator is tested
//! against a link simulated in virtual time.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod bloat;
pub mod capacity;
pub mod control;
pub mod mtu;
pub mod owd;
pub mod probe;
pub mod rfc6349;
pub mod rtt;
pub mod sequence;
pub mod session;
pub mod shaper;
pub mod tcp;

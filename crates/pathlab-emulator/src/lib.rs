//! pathlab-emulator: the emulator, which drives `pathlab-core`'s links between real
//! interfaces.
//!
//! Layer: the driver of `pathlab-core`, over `pathlab-os` (packet sockets, TUN, offloads,
//! the clock) and `pathlab-http` (the control address). It reads frames and the clock and
//! hands them to a `pathlab_core::Link` per direction: ports ([`port`]: AF_PACKET rings,
//! sockets or TUN), the forwarding loop ([`emulator`]), the one-port VLAN box ([`vlan`]), a lab's cables on one namespace ([`switchboard`]),
//! how late it sends against its model ([`fidelity`]), its control socket ([`control`]),
//! its HTTP API, page and metrics ([`api`]) on its control address ([`address`]), requests
//! to a running emulator ([`client`]), one `pathlab emulate` run from its configuration
//! ([`session`]), a program behind an emulated link ([`shell`]), and specs loaded with
//! their trace files ([`spec`]). It decides nothing about a packet itself: every verdict
//! is the link model's.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod api;
pub mod client;
pub mod control;
pub mod emulator;
pub mod fidelity;
pub mod guardian;
pub mod port;
pub mod session;
pub mod shell;
pub mod spec;
pub mod switchboard;
pub mod vlan;

pub use spec::{load_spec, load_spec_in, load_trace, LoadSpecError, MAX_TRACE_BYTES};

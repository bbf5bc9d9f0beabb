//! pathlab-bond-driver: the bonding tunnel's driver, which runs `pathlab-bond`'s endpoints
//! over real lines.
//!
//! Layer: the driver of `pathlab-bond`, over `pathlab-os` (sockets, TUN, rtnetlink, the
//! clock) and `pathlab-http` (its `/metrics`). [`tunnel`] is the event loop of `pathlab
//! bond server|client` (TUN device, line sockets, stats socket, signals), [`line`] the UDP
//! sockets bound one to each line, [`metrics`] the tunnel's Prometheus exposition.
//! [`config`] checks what an end is asked to run and resolves it into the loop's options,
//! and [`launch`] starts the loop (the capability checked, the signals blocked). It
//! decides nothing: scheduling, pacing, reordering, fairness and the handshake are the
//! protocol crate's.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod launch;
pub mod line;
pub mod metrics;
pub mod tunnel;

//! pathlab-bond: the sans-IO bonding protocol.
//!
//! A site with several slow lines (ADSL, cable, 4G) carries its IP traffic through a TUN
//! device, over UDP on every line at once, to a server that puts it back together. This
//! crate is the state machine of both ends: the wire format and its authenticated
//! encryption, the per-line rate controller that watches each line's one-way delay, the
//! scheduler that sends each piece where it arrives first, the receiver's reorder buffer,
//! and the fair sharing of the tunnel between users by volume, each flow in its own order.
//!
//! Sessions open with a Noise IKpsk2 handshake (WireGuard's pattern, from the `snow`
//! crate), roll their keys over inside the session (a smaller Noise handshake every two
//! minutes, [`rekey`]), recover on their own when the server restarts or forgets them, and
//! keep each client to its own inner addresses.
//!
//! It performs no I/O, reads no clock and starts no thread: every entry point takes `now`
//! (a [`pathlab_core::Instant`]), and randomness (keys, nonces, session ids) comes from the
//! caller. `pathlab-bond-driver` drives it with a TUN device and one UDP socket per line; tests drive
//! it through emulated links in virtual time.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod class;
pub mod control;
pub mod crypto;
pub mod endpoint;
pub mod entropy;
pub mod fair;
pub mod handshake;
pub mod headers;
pub mod inner;
pub mod line;
pub mod peers;
pub mod pmtu;
pub mod ratelimit;
pub mod rekey;
pub mod reorder;
pub mod replay;
pub mod sched;
pub mod server;
pub mod sim;
pub mod sizes;
pub mod stats;
pub mod wire;

pub use endpoint::{Bond, BondConfig, BondCounters, Entropy, Received, Transmit};
pub use handshake::{ClientKeys, PublicKey, SecretKey, ServerKeys};
pub use server::{Address, BondServerCounters, Peers, Server, ServerConfig};
pub use sizes::StateSizes;

//! pathlab-os: the only crate of pathlab that calls the operating system directly.
//!
//! Layer: the bottom of the IO side. It holds the syscalls ([`sys`], the only `unsafe` in
//! pathlab), rtnetlink ([`netlink`]), network namespaces ([`netns`]), nftables NAT
//! ([`nat`]), TUN devices ([`tun`]), runtime files and locks ([`runtime`]) and their
//! cleanup ([`clean`]),
//! process helpers ([`process`]), the one clock ([`clock`]), the files opened on someone
//! else's word (keys, tokens, names inside a directory given at start: [`files`]), TCP
//! sockets set up before they connect or listen ([`tcp_socket`]), and the fixtures tests
//! and benchmarks build namespaces with ([`testing`], [`topology`]). It does not know what
//! an emulator, a measurement or a tunnel is: the driver crates (`pathlab-emulator`,
//! `pathlab-probe-driver`, `pathlab-bond-driver`) are built on it.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod clean;
pub mod clock;
pub mod files;
pub mod interpose;
pub mod local_socket;
pub mod nat;
pub mod netlink;
pub mod netns;
pub mod process;
pub mod runtime;
pub mod scheduling;
pub mod sys;
pub mod tcp_socket;
pub mod testing;
pub mod topology;
pub mod tun;

pub use clock::{unix_now_ns, unix_now_secs, Clock};
pub use process::{
    die_with_spawner, kill, missing_capabilities, read_termination_signal, require_net_admin,
    terminate, termination_signals, wait_for_termination, Capability, NeedsNetAdmin,
};

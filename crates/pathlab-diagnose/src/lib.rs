//! pathlab-diagnose: what limits a TCP transfer and why, sans-IO.
//!
//! Packet captures read from bytes, pcap and pcapng ([`capture`]); what each TCP
//! connection in one did and what limited it, tcptrace-style ([`tcpflow`], `pathlab
//! analyze`); what limits a live transfer, from the `tcp_info` its kernel keeps
//! ([`diagnosis`], `pathlab inspect`); and a host's settings against a path's rate and
//! round trip, seed 001's checklist ([`tune`]). It builds on `pathlab-probe`'s estimators
//! (RFC 6349's figures, round-trip statistics, capacity) and, like it, opens no socket and
//! reads no clock or file: the drivers and the command line hand it bytes and samples.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod capture;
pub mod diagnosis;
pub mod tcpflow;
pub mod tune;

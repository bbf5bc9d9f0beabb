//! A snapshot of a tunnel end for `pathlab bond stats`, JSON and reports.

use serde::{Deserialize, Serialize};

use crate::control::Phase;
use crate::endpoint::{Bond, BondCounters};
use crate::fair::FairCounters;
use crate::line::{LineCounters, LineState};
use crate::reorder::ReorderCounters;
use crate::server::{BondServerCounters, Server};

/// One line as its sender sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineStats {
    /// The line's index.
    pub index: u8,
    /// The interface (filled in by the driver; empty on the server).
    #[serde(default)]
    pub interface: String,
    /// The address the line last heard its peer from, in an authenticated datagram (filled
    /// in by the client's driver: which of a multi-homed server's addresses answers).
    #[serde(default)]
    pub peer_address: String,
    /// Up or down.
    pub state: LineState,
    /// Times the line's base delay restarted because a queue above target did not drain
    /// (the path's delay grew for good).
    #[serde(default)]
    pub base_resets: u64,
    /// The rate the controller paces the line at, bits/s of the line's bytes (UDP payload,
    /// UDP and IP headers, the line's framing: what its modem counts).
    pub rate_bps: u64,
    /// The rate the peer received over the last report, bits/s of the line's bytes.
    pub delivery_bps: u64,
    /// The datagrams per second the controller paces the line at besides its rate, once
    /// the line showed a queue (a modem may forward a bounded number of packets per
    /// second); absent before.
    #[serde(default)]
    pub packet_rate_pps: Option<f64>,
    /// The datagrams per second the peer received over the last report.
    #[serde(default)]
    pub delivery_pps: f64,
    /// Bytes the line's modem counts per datagram beyond its UDP payload: UDP and IP
    /// headers and the line's framing.
    #[serde(default)]
    pub overhead_bytes: usize,
    /// The line's queueing delay at the last report, ms.
    pub queue_delay_ms: f64,
    /// The line's one-way delay above the lowest of all lines (the clocks' offset is
    /// unknown, their difference is not), ms.
    pub relative_owd_ms: Option<f64>,
    /// Smoothed round trip, ms.
    pub srtt_ms: Option<f64>,
    /// Loss over the last report's interval.
    pub loss: f64,
    /// Whether the controller is draining the line's queue to measure its base delay.
    pub draining: bool,
    /// The largest datagram (UDP payload) the line sends: what its path MTU search proved.
    #[serde(default)]
    pub payload_limit_bytes: usize,
    /// Whether its path MTU search is under way.
    #[serde(default)]
    pub mtu_searching: bool,
    /// Path MTU probes sent and lost (too big, or lost).
    #[serde(default)]
    pub mtu_probes: (u64, u64),
    /// Counters.
    pub counters: LineCounters,
}

/// One session end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStats {
    /// The session id (0 until the client is welcomed).
    pub session: u32,
    /// Whether keys are agreed.
    pub open: bool,
    /// Its lines.
    pub lines: Vec<LineStats>,
    /// Counters of the session end.
    pub counters: BondCounters,
    /// The fair ingress queue's counters.
    pub fair: FairCounters,
    /// Bytes waiting in the ingress queue.
    pub backlog_bytes: u64,
    /// The reorder buffer's counters.
    pub reorder: ReorderCounters,
    /// How long the reorder buffer waits for a gap, ms.
    pub reorder_timeout_ms: f64,
    /// The client's peer name at the server (empty at the client).
    #[serde(default)]
    pub peer: String,
}

/// A snapshot of a tunnel process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BondStats {
    /// "client" or "server".
    pub role: String,
    /// The name `pathlab bond stats --name` finds it by.
    pub name: String,
    /// Seconds since it started.
    pub uptime_s: f64,
    /// Its sessions (one for a client).
    pub sessions: Vec<SessionStats>,
    /// The server's own counters.
    #[serde(default)]
    pub server: Option<BondServerCounters>,
}

impl SessionStats {
    /// A snapshot of `bond`.
    pub fn of(bond: &Bond) -> SessionStats {
        let lowest = bond
            .lines()
            .iter()
            .filter_map(|l| l.controller().owd_ns())
            .min();
        SessionStats {
            session: bond.session().unwrap_or(0),
            open: bond.is_open(),
            lines: bond
                .lines()
                .iter()
                .map(|line| {
                    let controller = line.controller();
                    LineStats {
                        index: line.index,
                        interface: String::new(),
                        peer_address: String::new(),
                        base_resets: controller.base_resets(),
                        state: line.state(),
                        rate_bps: controller.rate().0,
                        delivery_bps: controller.delivery_rate().0,
                        packet_rate_pps: controller.packet_rate(),
                        delivery_pps: controller.delivery_packet_rate(),
                        overhead_bytes: line.framing().overhead_bytes(),
                        queue_delay_ms: controller.queue_delay().as_millis_f64(),
                        relative_owd_ms: controller
                            .owd_ns()
                            .zip(lowest)
                            .map(|(owd, low)| owd.saturating_sub(low) as f64 / 1e6),
                        srtt_ms: controller.srtt().map(pathlab_core::Duration::as_millis_f64),
                        loss: controller.loss(),
                        draining: controller.phase() == Phase::Draining,
                        payload_limit_bytes: line.payload_limit(),
                        mtu_searching: line.mtu().searching(),
                        mtu_probes: line.mtu().probes(),
                        counters: line.counters(),
                    }
                })
                .collect(),
            counters: bond.counters(),
            fair: bond.fair().counters(),
            backlog_bytes: bond.fair().backlog_bytes(),
            reorder: bond.reorder().counters(),
            reorder_timeout_ms: bond.reorder().timeout().as_millis_f64(),
            peer: String::new(),
        }
    }
}

impl BondStats {
    /// A snapshot of a client whose lines are `interfaces` and last heard the server from
    /// `peers`.
    pub fn client(
        name: &str,
        uptime_s: f64,
        bond: &Bond,
        interfaces: &[String],
        peers: &[Option<std::net::SocketAddr>],
    ) -> BondStats {
        let mut session = SessionStats::of(bond);
        for (line, interface) in session.lines.iter_mut().zip(interfaces) {
            line.interface.clone_from(interface);
        }
        for (line, peer) in session.lines.iter_mut().zip(peers) {
            line.peer_address = peer.map(|p| p.to_string()).unwrap_or_default();
        }
        BondStats {
            role: "client".into(),
            name: name.into(),
            uptime_s,
            sessions: vec![session],
            server: None,
        }
    }

    /// A snapshot of a server.
    pub fn server(name: &str, uptime_s: f64, server: &Server) -> BondStats {
        let mut sessions: Vec<SessionStats> = server
            .sessions()
            .map(|(_, peer, bond)| SessionStats {
                peer: peer.to_owned(),
                ..SessionStats::of(bond)
            })
            .collect();
        sessions.sort_by_key(|s| s.session);
        BondStats {
            role: "server".into(),
            name: name.into(),
            uptime_s,
            sessions,
            server: Some(server.counters()),
        }
    }
}

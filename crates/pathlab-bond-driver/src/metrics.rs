//! The Prometheus exposition of a bonding tunnel (`pathlab bond ... --metrics`): a pure
//! function of the [`BondStats`] snapshot `pathlab bond stats -J` prints, so the two say
//! the same numbers. Units are converted to the exposition's base units (seconds, bytes),
//! nothing else.

use pathlab_bond::line::LineState;
use pathlab_bond::stats::{BondStats, LineStats, SessionStats};
use pathlab_http::prometheus::{Exposition, Kind, Metric};

/// The per-line families (a line without a value, as `bond stats` prints "-", has no
/// sample).
const LINE_FAMILIES: &[Metric<LineStats>] = &[
    Metric::gauge(
        "pathlab_bond_line_up",
        "1 when the line is up, 0 when it was declared down (silent too long).",
        |l| Some(f64::from(u8::from(l.state == LineState::Up))),
    ),
    Metric::counter(
        "pathlab_bond_line_sent_packets_total",
        "Datagrams sent on the line.",
        |l| Some(l.counters.sent_packets as f64),
    ),
    Metric::counter(
        "pathlab_bond_line_sent_bytes_total",
        "UDP payload bytes sent on the line.",
        |l| Some(l.counters.sent_bytes as f64),
    ),
    Metric::counter(
        "pathlab_bond_line_received_packets_total",
        "Datagrams received on the line and authenticated.",
        |l| Some(l.counters.received_packets as f64),
    ),
    Metric::counter(
        "pathlab_bond_line_received_bytes_total",
        "UDP payload bytes received on the line and authenticated.",
        |l| Some(l.counters.received_bytes as f64),
    ),
    Metric::counter(
        "pathlab_bond_line_replays_total",
        "Datagrams on the line refused as replays.",
        |l| Some(l.counters.replays as f64),
    ),
    Metric::counter(
        "pathlab_bond_line_went_down_total",
        "Times the line was declared down.",
        |l| Some(l.counters.went_down as f64),
    ),
    Metric::counter(
        "pathlab_bond_line_came_back_total",
        "Times the line came back up.",
        |l| Some(l.counters.came_back as f64),
    ),
    Metric::counter(
        "pathlab_bond_line_base_resets_total",
        "Times the line's base delay restarted: a queue above target that did not drain \
             was the path's delay grown for good.",
        |l| Some(l.base_resets as f64),
    ),
    Metric::gauge(
        "pathlab_bond_line_rate_bytes_per_second",
        "The rate the line's controller paces it at, bytes/s as its modem counts them \
             (UDP payload, UDP and IP headers, the line's framing; bond stats: rate, in bits/s).",
        |l| Some(l.rate_bps as f64 / 8.0),
    ),
    Metric::gauge(
        "pathlab_bond_line_delivery_rate_bytes_per_second",
        "The rate the peer received on the line over its last report, bytes/s as its \
             modem counts them (bond stats: achieved, in bits/s).",
        |l| Some(l.delivery_bps as f64 / 8.0),
    ),
    Metric::gauge(
        "pathlab_bond_line_packet_rate_per_second",
        "The datagrams per second the line's controller paces it at besides its rate, \
             once the line showed a queue (absent before).",
        |l| l.packet_rate_pps,
    ),
    Metric::counter(
        "pathlab_bond_line_control_only_packets_total",
        "Datagrams sent on the line with no inner data (reports, keepalives, probes that \
             found no data datagram to ride on).",
        |l| Some(l.counters.control_only_packets as f64),
    ),
    Metric::gauge(
        "pathlab_bond_line_queue_delay_seconds",
        "The line's queueing delay at its last report.",
        |l| Some(l.queue_delay_ms / 1e3),
    ),
    Metric::gauge(
        "pathlab_bond_line_relative_owd_seconds",
        "The line's one-way delay above the lowest of the session's lines (absent until \
             measured).",
        |l| l.relative_owd_ms.map(|ms| ms / 1e3),
    ),
    Metric::gauge(
        "pathlab_bond_line_rtt_seconds",
        "The line's smoothed round-trip time (absent until measured).",
        |l| l.srtt_ms.map(|ms| ms / 1e3),
    ),
    Metric::gauge(
        "pathlab_bond_line_loss_ratio",
        "The line's loss over its last report's interval, 0 to 1.",
        |l| Some(l.loss),
    ),
    Metric::gauge(
        "pathlab_bond_line_draining",
        "1 while the controller drains the line's queue to measure its base delay.",
        |l| Some(f64::from(u8::from(l.draining))),
    ),
    Metric::gauge(
        "pathlab_bond_line_payload_limit_bytes",
        "The largest datagram (UDP payload) the line sends, as its path MTU search proved.",
        |l| Some(l.payload_limit_bytes as f64),
    ),
];

/// The per-session families, a sample each.
const SESSION_FAMILIES: &[Metric<SessionStats>] = &[
    Metric::gauge(
        "pathlab_bond_session_open",
        "1 once the session's keys are agreed.",
        |s| Some(f64::from(u8::from(s.open))),
    ),
    Metric::counter(
        "pathlab_bond_ingress_packets_total",
        "Inner packets accepted into the fair ingress queue.",
        |s| Some(s.fair.packets_in as f64),
    ),
    Metric::counter(
        "pathlab_bond_ce_marked_packets_total",
        "Inner packets CoDel marked CE instead of dropping them.",
        |s| Some(s.fair.ce_marked as f64),
    ),
    Metric::gauge(
        "pathlab_bond_backlog_bytes",
        "Bytes waiting in the ingress queue.",
        |s| Some(s.backlog_bytes as f64),
    ),
    Metric::counter(
        "pathlab_bond_compressed_packets_total",
        "Inner packets sent compressed (LZ4 shrank them).",
        |s| Some(s.counters.compressed as f64),
    ),
    Metric::counter(
        "pathlab_bond_compression_saved_bytes_total",
        "Bytes compression saved.",
        |s| Some(s.counters.compression_saved_bytes as f64),
    ),
    Metric::counter(
        "pathlab_bond_header_compressed_packets_total",
        "Inner packets sent with compressed IP/TCP or IP/UDP headers.",
        |s| Some(s.counters.headers_compressed as f64),
    ),
    Metric::counter(
        "pathlab_bond_header_compression_saved_bytes_total",
        "Bytes header compression saved.",
        |s| Some(s.counters.headers_saved_bytes as f64),
    ),
    Metric::counter(
        "pathlab_bond_header_full_packets_total",
        "Inner packets sent whole to establish a header-compression reference.",
        |s| Some(s.counters.headers_full_sent as f64),
    ),
    Metric::gauge(
        "pathlab_bond_header_contexts",
        "Flows the header compressor holds a context for.",
        |s| Some(s.counters.headers_contexts as f64),
    ),
    Metric::counter(
        "pathlab_bond_header_references_acknowledged_total",
        "Header-compression references of the peer this end stored and acknowledged.",
        |s| Some(s.counters.headers_acks_sent as f64),
    ),
    Metric::counter(
        "pathlab_bond_reordered_packets_total",
        "Inner packets delivered after waiting for a predecessor in the reorder buffer.",
        |s| Some(s.reorder.reordered as f64),
    ),
    Metric::counter(
        "pathlab_bond_reorder_delivered_packets_total",
        "Inner packets the reorder buffer delivered.",
        |s| Some(s.reorder.delivered as f64),
    ),
    Metric::counter(
        "pathlab_bond_reorder_gaps_skipped_total",
        "Gaps the reorder buffer gave up waiting for.",
        |s| Some(s.reorder.gaps_skipped as f64),
    ),
    Metric::gauge(
        "pathlab_bond_reorder_timeout_seconds",
        "How long the reorder buffer waits for a gap.",
        |s| Some(s.reorder_timeout_ms / 1e3),
    ),
];

/// The exposition of `stats`. Per-line series are labelled `session` (8 hex digits),
/// `line` (its index) and `interface` (empty on a server); per-session ones `session`.
pub fn metrics(stats: &BondStats) -> String {
    let mut e = Exposition::new();
    e.family(
        "pathlab_bond_info",
        Kind::Gauge,
        "1, labelled with the tunnel's role (client or server) and name.",
    )
    .sample(&[("role", &stats.role), ("name", &stats.name)], 1.0);
    e.family(
        "pathlab_bond_uptime_seconds",
        Kind::Gauge,
        "Seconds since the tunnel started.",
    )
    .sample(&[], stats.uptime_s);
    e.family(
        "pathlab_bond_sessions",
        Kind::Gauge,
        "Sessions the tunnel has (a client has one).",
    )
    .sample(&[], stats.sessions.len() as f64);
    let ids: Vec<String> = stats
        .sessions
        .iter()
        .map(|s| format!("{:08x}", s.session))
        .collect();
    line_metrics(&mut e, stats, &ids);
    session_metrics(&mut e, stats, &ids);
    if let Some(server) = &stats.server {
        server_metrics(&mut e, server);
    }
    e.finish()
}

/// The per-line families, labelled with the line's session (`ids`, in order), index and
/// interface.
fn line_metrics(e: &mut Exposition, stats: &BondStats, ids: &[String]) {
    let indices: Vec<Vec<String>> = stats
        .sessions
        .iter()
        .map(|s| s.lines.iter().map(|l| l.index.to_string()).collect())
        .collect();
    let mut lines = Vec::new();
    for ((session, id), indices) in stats.sessions.iter().zip(ids).zip(&indices) {
        for (line, index) in session.lines.iter().zip(indices) {
            let labels = [
                ("session", id.as_str()),
                ("line", index.as_str()),
                ("interface", line.interface.as_str()),
            ];
            lines.push((labels, line));
        }
    }
    e.metrics(LINE_FAMILIES, &lines);
    e.family(
        "pathlab_bond_line_mtu_probes_total",
        Kind::Counter,
        "Path MTU probes the line sent (result=sent) and that were too big or lost \
         (result=lost).",
    );
    for &([session, index, interface], line) in &lines {
        let (sent, lost) = line.mtu_probes;
        for (result, value) in [("sent", sent), ("lost", lost)] {
            e.sample(
                &[session, index, interface, ("result", result)],
                value as f64,
            );
        }
    }
}

/// The per-session families, labelled with the session (`ids`, in order): what went
/// through and what was dropped or refused, then [`session_life_metrics`].
fn session_metrics(e: &mut Exposition, stats: &BondStats, ids: &[String]) {
    let sessions: Vec<_> = stats.sessions.iter().zip(ids).collect();
    by_label(
        e,
        &sessions,
        (
            "pathlab_bond_inner_packets_total",
            "Inner packets the session took from the TUN device (direction=from_tun) and \
             handed to it (direction=to_tun): the tunnel's totals.",
        ),
        "direction",
        |session| {
            [
                ("from_tun", session.counters.inner_in),
                ("to_tun", session.counters.inner_out),
            ]
        },
    );
    by_label(
        e,
        &sessions,
        (
            "pathlab_bond_dropped_packets_total",
            "Inner packets the session dropped, by reason: codel (the fair queue's AQM), \
             overflow (the queue was full), oversized (too long for the wire), no_line (no \
             line was up), decompress (failed to decompress), incomplete (fragments never \
             came), header_context (header-compressed against a reference not held), \
             header_decode (header-compressed and did not decode or failed its checksum).",
        ),
        "reason",
        |session| {
            [
                ("codel", session.fair.codel_dropped),
                ("overflow", session.fair.overflow_dropped),
                ("oversized", session.fair.oversized_dropped),
                ("no_line", session.counters.no_line_dropped),
                ("decompress", session.counters.decompress_failures),
                ("incomplete", session.reorder.fragments_timed_out),
                ("header_context", session.counters.headers_missing_context),
                ("header_decode", session.counters.headers_decode_failed),
            ]
        },
    );
    by_label(
        e,
        &sessions,
        (
            "pathlab_bond_rejected_datagrams_total",
            "Datagrams (or fragments) the session refused, by reason: auth (failed \
             authentication), malformed (did not parse), replay, late_fragment (for a packet \
             already delivered or skipped), bad_fragment (did not fit its packet).",
        ),
        "reason",
        |session| {
            [
                ("auth", session.counters.auth_failures),
                ("malformed", session.counters.malformed),
                ("replay", session.counters.replays),
                ("late_fragment", session.reorder.late_fragments),
                ("bad_fragment", session.reorder.bad_fragments),
            ]
        },
    );
    session_life_metrics(e, &sessions);
}

/// A counter family (`name`, `help`) broken down by `label`: for each of `sessions` (with
/// its id), a sample per `(label's value, count)` that `split` gives.
fn by_label<const N: usize>(
    e: &mut Exposition,
    sessions: &[(&SessionStats, &String)],
    (name, help): (&str, &str),
    label: &str,
    split: impl Fn(&SessionStats) -> [(&'static str, u64); N],
) {
    e.family(name, Kind::Counter, help);
    for &(session, id) in sessions {
        for (value_of_label, count) in split(session) {
            e.sample(&[("session", id), (label, value_of_label)], count as f64);
        }
    }
}

/// The traffic classes' families: packets per class, and what redundancy cost.
fn class_metrics(e: &mut Exposition, sessions: &[(&SessionStats, &String)]) {
    by_label(
        e,
        sessions,
        (
            "pathlab_bond_class_packets_total",
            "Inner packets this end sent, by traffic class (--class): bulk (spread over the \
             lines), interactive (one copy at once on the line of earliest arrival), redundant \
             (a copy on each of the two lines of earliest arrival).",
        ),
        "class",
        |session| {
            let counters = &session.counters;
            [
                ("bulk", counters.class_bulk),
                ("interactive", counters.class_interactive),
                ("redundant", counters.class_redundant),
            ]
        },
    );
    by_label(
        e,
        sessions,
        (
            "pathlab_bond_redundant_copies_total",
            "The redundant class's second copies: sent (by this end), dropped (copies of \
             packets already received, dropped by this end's reorder buffer), express_dropped \
             (interactive or redundant packets this end dropped: their queue full or a second \
             late).",
        ),
        "event",
        |session| {
            [
                ("sent", session.counters.redundant_copies),
                ("dropped", session.reorder.duplicates),
                ("express_dropped", session.counters.express_dropped),
            ]
        },
    );
}

/// The per-session families of a session's life: its handshakes, what its bounds gave up,
/// and those of one sample.
fn session_life_metrics(e: &mut Exposition, sessions: &[(&SessionStats, &String)]) {
    by_label(
        e,
        sessions,
        (
            "pathlab_bond_handshakes_total",
            "A client's session life: handshakes started (an Initiation on every line), \
             reconnects (sessions opened after the first: the server restarted or forgot the \
             session, or every line was down too long), cookies received (the server was under \
             load), stale signals received (the server knew no such session).",
        ),
        "event",
        |session| {
            [
                ("started", session.counters.handshakes),
                ("reconnect", session.counters.reconnects),
                ("cookie", session.counters.cookies),
                ("stale", session.counters.stale_signals),
            ]
        },
    );
    by_label(
        e,
        sessions,
        (
            "pathlab_bond_rekeys_total",
            "A session's keys rolled over inside it: done (the keys replaced; a server counts \
             when the client's first datagram under the new keys came), started (a client's \
             rekey handshakes, retries included).",
        ),
        "event",
        |session| {
            [
                ("done", session.counters.rekeys),
                ("started", session.counters.rekey_handshakes),
            ]
        },
    );
    class_metrics(e, sessions);
    by_label(
        e,
        sessions,
        (
            "pathlab_bond_bounds_total",
            "What a session's bounds gave up or refused: evicted (reassembly full, oldest \
             packet given up), duplicate_fragment (counted once), refused_report (a peer report \
             that could not be true), stream_reclaimed (an idle user's stream id freed), \
             stream_shared (every id held: a user shared one), new_session (a packet half sent \
             when a new session began).",
        ),
        "what",
        |session| {
            [
                ("evicted", session.reorder.evicted),
                ("duplicate_fragment", session.reorder.duplicate_fragments),
                (
                    "refused_report",
                    session
                        .lines
                        .iter()
                        .map(|l| l.counters.refused_reports)
                        .sum(),
                ),
                ("stream_reclaimed", session.fair.streams_reclaimed),
                ("stream_shared", session.fair.streams_shared),
                ("new_session", session.fair.new_session_dropped),
            ]
        },
    );
    let labelled: Vec<_> = sessions
        .iter()
        .map(|&(session, id)| ([("session", id.as_str())], session))
        .collect();
    e.metrics(SESSION_FAMILIES, &labelled);
}

/// The server's own families.
fn server_metrics(e: &mut Exposition, server: &pathlab_bond::server::BondServerCounters) {
    e.family(
        "pathlab_bond_server_sessions_opened_total",
        Kind::Counter,
        "Sessions the server opened.",
    )
    .sample(&[], server.sessions_opened as f64);
    e.family(
        "pathlab_bond_server_sessions_ended_total",
        Kind::Counter,
        "Sessions forgotten after the idle timeout or closed by their client.",
    )
    .sample(&[], server.sessions_ended as f64);
    e.family(
        "pathlab_bond_server_refused_total",
        Kind::Counter,
        "Hellos refused because --max-clients sessions were open.",
    )
    .sample(&[], server.refused_full as f64);
    e.family(
        "pathlab_bond_server_rejected_datagrams_total",
        Kind::Counter,
        "Datagrams refused before reaching a session: auth (a hello with another key, \
         data for no session), malformed.",
    )
    .sample(&[("reason", "auth")], server.auth_failures as f64)
    .sample(&[("reason", "malformed")], server.malformed as f64);
    e.family(
        "pathlab_bond_server_handshakes_total",
        Kind::Counter,
        "Initiations by outcome: accepted (a Response sent), copy (another line's copy \
         of one already answered), replay (a timestamp not newer than the peer's last, or \
         than a forgotten key's floor), unknown_peer (a key that is no peer), cookie (under \
         load: a CookieReply sent instead), rate_limited (under load, a valid cookie, but \
         its source over 20 a second).",
    )
    .sample(&[("outcome", "accepted")], server.handshakes as f64)
    .sample(&[("outcome", "copy")], server.hello_copies as f64)
    .sample(&[("outcome", "replay")], server.replayed_hellos as f64)
    .sample(&[("outcome", "unknown_peer")], server.unknown_peers as f64)
    .sample(&[("outcome", "rate_limited")], server.rate_limited as f64)
    .sample(&[("outcome", "cookie")], server.cookies_sent as f64);
    e.family(
        "pathlab_bond_server_session_events_total",
        Kind::Counter,
        "Sessions that closed (the client sent Close), were replaced (the same client's \
         new session), or expired unconfirmed (no Data came under their keys); stale \
         signals sent (Data for a session the server does not know).",
    )
    .sample(&[("event", "closed")], server.sessions_closed as f64)
    .sample(&[("event", "replaced")], server.sessions_replaced as f64)
    .sample(
        &[("event", "unconfirmed")],
        server.unconfirmed_expired as f64,
    )
    .sample(&[("event", "stale_sent")], server.stale_sent as f64);
    e.family(
        "pathlab_bond_server_spoofed_packets_total",
        Kind::Counter,
        "Inner packets whose source lies outside their client's allowed prefixes, dropped.",
    )
    .sample(&[], server.spoofed_sources as f64);
    e.family(
        "pathlab_bond_server_unroutable_packets_total",
        Kind::Counter,
        "Inner packets from the TUN device that no session claims.",
    )
    .sample(&[], server.unroutable as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_bond::endpoint::BondCounters;
    use pathlab_bond::fair::FairCounters;
    use pathlab_bond::line::LineCounters;
    use pathlab_bond::reorder::ReorderCounters;
    use pathlab_bond::BondServerCounters;
    use pathlab_http::prometheus::parse;

    fn line(index: u8, interface: &str, state: LineState, srtt_ms: Option<f64>) -> LineStats {
        LineStats {
            index,
            interface: interface.into(),
            peer_address: String::new(),
            base_resets: 0,
            state,
            rate_bps: 8_000_000,
            delivery_bps: 4_000_000,
            packet_rate_pps: None,
            delivery_pps: 0.0,
            overhead_bytes: 42,
            queue_delay_ms: 2.5,
            relative_owd_ms: srtt_ms.map(|_| 0.0),
            srtt_ms,
            loss: 0.01,
            draining: false,
            payload_limit_bytes: 1472,
            mtu_searching: false,
            mtu_probes: (3, 1),
            counters: LineCounters {
                sent_packets: 100 + u64::from(index),
                sent_bytes: 120_000,
                received_packets: 90,
                received_bytes: 100_000,
                replays: 1,
                went_down: u64::from(state == LineState::Down),
                came_back: 0,
                refused_reports: 0,
                control_only_packets: 0,
            },
        }
    }

    fn session(id: u32, lines: Vec<LineStats>) -> SessionStats {
        SessionStats {
            session: id,
            open: true,
            lines,
            counters: BondCounters {
                inner_in: 500,
                inner_out: 400,
                auth_failures: 2,
                no_line_dropped: 5,
                ..BondCounters::default()
            },
            fair: FairCounters {
                packets_in: 500,
                codel_dropped: 7,
                ..FairCounters::default()
            },
            backlog_bytes: 3000,
            reorder: ReorderCounters {
                delivered: 400,
                reordered: 9,
                ..ReorderCounters::default()
            },
            reorder_timeout_ms: 12.0,
            peer: String::new(),
        }
    }

    fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let families = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        pathlab_http::prometheus::value(&families, name, labels)
    }

    #[test]
    fn a_client_reads_back_as_bond_stats_says_in_base_units() {
        let stats = BondStats {
            role: "client".into(),
            name: "bond0".into(),
            uptime_s: 12.5,
            sessions: vec![session(
                0xab,
                vec![
                    line(0, "isp0", LineState::Up, Some(21.0)),
                    line(1, "isp1", LineState::Down, None),
                ],
            )],
            server: None,
        };
        let text = metrics(&stats);
        let families = parse(&text).unwrap();
        assert!(families.iter().all(|f| !f.help.is_empty()));
        let of = |interface| [("session", "000000ab"), ("interface", interface)];
        assert_eq!(
            sample(&text, "pathlab_bond_line_up", &of("isp0")),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "pathlab_bond_line_up", &of("isp1")),
            Some(0.0)
        );
        assert_eq!(
            sample(&text, "pathlab_bond_line_sent_packets_total", &of("isp1")),
            Some(101.0)
        );
        assert_eq!(
            sample(
                &text,
                "pathlab_bond_line_rate_bytes_per_second",
                &of("isp0")
            ),
            Some(1_000_000.0)
        );
        assert_eq!(
            sample(&text, "pathlab_bond_line_rtt_seconds", &of("isp0")),
            Some(0.021)
        );
        assert_eq!(
            sample(&text, "pathlab_bond_line_rtt_seconds", &of("isp1")),
            None,
            "no RTT yet: no sample, as stats prints '-'"
        );
        assert_eq!(
            sample(&text, "pathlab_bond_line_queue_delay_seconds", &of("isp0")),
            Some(0.0025)
        );
        assert_eq!(
            sample(
                &text,
                "pathlab_bond_dropped_packets_total",
                &[("reason", "codel")]
            ),
            Some(7.0)
        );
        assert_eq!(
            sample(
                &text,
                "pathlab_bond_inner_packets_total",
                &[("direction", "to_tun")]
            ),
            Some(400.0)
        );
        assert_eq!(
            sample(&text, "pathlab_bond_reorder_timeout_seconds", &[]),
            Some(0.012)
        );
        assert_eq!(
            sample(&text, "pathlab_bond_info", &[("role", "client")]),
            Some(1.0)
        );
        assert!(sample(&text, "pathlab_bond_server_sessions_opened_total", &[]).is_none());
    }

    #[test]
    fn a_server_labels_each_session_and_adds_its_own_counters() {
        let stats = BondStats {
            role: "server".into(),
            name: "bond-srv".into(),
            uptime_s: 3.0,
            sessions: vec![
                session(1, vec![line(0, "", LineState::Up, Some(5.0))]),
                session(2, vec![line(0, "", LineState::Up, Some(6.0))]),
            ],
            server: Some(BondServerCounters {
                sessions_opened: 2,
                refused_full: 1,
                malformed: 4,
                rate_limited: 7,
                ..BondServerCounters::default()
            }),
        };
        let text = metrics(&stats);
        assert_eq!(sample(&text, "pathlab_bond_sessions", &[]), Some(2.0));
        assert_eq!(
            sample(
                &text,
                "pathlab_bond_line_rtt_seconds",
                &[("session", "00000002")]
            ),
            Some(0.006)
        );
        assert_eq!(
            sample(&text, "pathlab_bond_server_sessions_opened_total", &[]),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                "pathlab_bond_server_rejected_datagrams_total",
                &[("reason", "malformed")]
            ),
            Some(4.0)
        );
        assert_eq!(
            sample(
                &text,
                "pathlab_bond_server_handshakes_total",
                &[("outcome", "rate_limited")]
            ),
            Some(7.0)
        );
    }

    #[test]
    fn a_tunnel_without_sessions_still_parses() {
        let stats = BondStats {
            role: "server".into(),
            name: "idle".into(),
            uptime_s: 0.5,
            sessions: Vec::new(),
            server: Some(BondServerCounters::default()),
        };
        parse(&metrics(&stats)).unwrap();
    }
}

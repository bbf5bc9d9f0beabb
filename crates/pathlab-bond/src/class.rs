//! Traffic classes: how an inner packet crosses the lines.
//!
//! - [`TrafficClass::Bulk`] (what every packet did before classes): queued in the fair
//!   queue with its flow, spread over the lines by earliest arrival ([`crate::sched`]).
//! - [`TrafficClass::Interactive`]: one copy, on the line where it lands first, sent at
//!   once: it never waits behind another flow in the fair queue, nor for a pacer (it
//!   borrows at most a frame's time from the line's, as a sparse flow's packet does).
//! - [`TrafficClass::Redundant`]: as interactive, and a second copy on the line where it
//!   lands second. The far end's reorder buffer keeps the first copy to arrive and drops
//!   (and counts) the other ([`crate::reorder::ReorderCounters::duplicates`]): a call
//!   loses nothing when one line dies, before the line is even declared dead.
//!
//! The class is chosen per packet by the first [`ClassRule`] that matches (rules given with
//! `--class`, at either end: the client classifies what goes up, the server what comes
//! down). A packet no rule matches gets the default: `redundant` for voice (DSCP EF, 46)
//! and for a *small constant-rate UDP flow* (a call, a game: every packet at most
//! [`SMALL_PACKET_BYTES`], at most [`MAX_STEADY_PPS`] packets a second at a steady pace,
//! seen for [`STEADY_AFTER_PACKETS`] packets); `bulk` for everything else. A last rule
//! `bulk:any` turns the default off.
//!
//! A rule is `CLASS:MATCH[,MATCH...]`: `CLASS` is `bulk`, `interactive` or `redundant`;
//! each `MATCH` is `udp`, `tcp`, `icmp`, `proto=N` (0-255), `port=A[-B]` (either port),
//! `sport=A[-B]`, `dport=A[-B]` (0-65535), `dscp=N[-M]` (0-63, or `ef`), or `any`. All of
//! a rule's matches must hold. At most [`MAX_RULES`] rules.

use std::collections::HashMap;

use pathlab_core::wire;
use pathlab_core::{Duration, Instant, Packet};

/// How a packet crosses the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrafficClass {
    /// The fair queue, spread over the lines by earliest arrival.
    #[default]
    Bulk,
    /// One copy at once on the line of earliest arrival.
    Interactive,
    /// A copy on each of the two lines of earliest arrival, at once.
    Redundant,
}

impl TrafficClass {
    /// The class's name in rules and stats.
    pub fn name(self) -> &'static str {
        match self {
            TrafficClass::Bulk => "bulk",
            TrafficClass::Interactive => "interactive",
            TrafficClass::Redundant => "redundant",
        }
    }
}

/// Most rules a tunnel end takes.
pub const MAX_RULES: usize = 64;
/// The default's small packet: at most this many bytes (IP header included).
pub const SMALL_PACKET_BYTES: usize = 300;
/// The default's constant-rate flow: at most this many packets a second.
pub const MAX_STEADY_PPS: u32 = 100;
/// The default looks at a UDP flow this many packets before calling it steady.
pub const STEADY_AFTER_PACKETS: u32 = 5;
/// DSCP Expedited Forwarding (RFC 3246), voice.
pub const DSCP_EF: u8 = 46;
/// Flows the default's detector follows at once; beyond it new flows are bulk until old
/// ones idle out.
pub const MAX_TRACKED_FLOWS: usize = 4096;

/// An inclusive range of values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The lowest.
    pub low: u16,
    /// The highest.
    pub high: u16,
}

impl Range {
    fn contains(self, value: u16) -> bool {
        (self.low..=self.high).contains(&value)
    }
}

/// One condition of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Every packet.
    Any,
    /// The IP protocol (IPv6: the first header's next header).
    Protocol(u8),
    /// Either port (TCP or UDP).
    Port(Range),
    /// The source port.
    SourcePort(Range),
    /// The destination port.
    DestinationPort(Range),
    /// The DSCP (0-63).
    Dscp(Range),
}

/// A rule: a class, and the matches a packet must all meet to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassRule {
    /// The class it gives.
    pub class: TrafficClass,
    /// What a packet must meet (all of them).
    pub matches: Vec<Match>,
}

/// What a classifier reads of an inner IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketFacts {
    /// The IP protocol (None: not IP).
    pub protocol: Option<u8>,
    /// The DSCP.
    pub dscp: u8,
    /// Source and destination ports (TCP and UDP).
    pub ports: Option<(u16, u16)>,
    /// The IP packet's length.
    pub len: usize,
}

impl PacketFacts {
    /// The facts of an IP packet (`ip`: from its IP header on).
    pub fn of_ip(ip: &[u8]) -> PacketFacts {
        let mut facts = PacketFacts {
            len: ip.len(),
            ..PacketFacts::default()
        };
        let (protocol, dscp, header_len) = match wire::ip_version(ip) {
            Some(4) if ip.len() >= 20 => {
                let header_len = usize::from(ip[0] & 0x0f) * 4;
                // A fragment after the first carries no ports.
                let later_fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff != 0;
                let header_len = if later_fragment {
                    usize::MAX
                } else {
                    header_len
                };
                (ip[9], ip[1] >> 2, header_len)
            }
            Some(6) if ip.len() >= 40 => (ip[6], ((ip[0] & 0x0f) << 2) | (ip[1] >> 6), 40),
            _ => return facts,
        };
        facts.protocol = Some(protocol);
        facts.dscp = dscp;
        if matches!(protocol, wire::PROTOCOL_TCP | wire::PROTOCOL_UDP) {
            if let Some(ports) = ip.get(header_len..header_len.saturating_add(4)) {
                facts.ports = Some((
                    u16::from_be_bytes([ports[0], ports[1]]),
                    u16::from_be_bytes([ports[2], ports[3]]),
                ));
            }
        }
        facts
    }
}

impl Match {
    fn holds(self, facts: &PacketFacts) -> bool {
        match self {
            Match::Any => true,
            Match::Protocol(p) => facts.protocol == Some(p),
            Match::Port(r) => facts
                .ports
                .is_some_and(|(s, d)| r.contains(s) || r.contains(d)),
            Match::SourcePort(r) => facts.ports.is_some_and(|(s, _)| r.contains(s)),
            Match::DestinationPort(r) => facts.ports.is_some_and(|(_, d)| r.contains(d)),
            Match::Dscp(r) => facts.protocol.is_some() && r.contains(u16::from(facts.dscp)),
        }
    }
}

impl ClassRule {
    /// Whether a packet of `facts` meets every match.
    pub fn holds(&self, facts: &PacketFacts) -> bool {
        self.matches.iter().all(|m| m.holds(facts))
    }

    /// Parses a rule (`redundant:udp,dport=5060-5061`); the error names what is wrong.
    pub fn parse(text: &str) -> Result<ClassRule, String> {
        let (class, rest) = text.split_once(':').unwrap_or((text, ""));
        let class = match class.trim() {
            "bulk" => TrafficClass::Bulk,
            "interactive" => TrafficClass::Interactive,
            "redundant" => TrafficClass::Redundant,
            other => {
                return Err(format!(
                    "unknown class {other:?} (bulk, interactive or redundant)"
                ))
            }
        };
        if rest.trim().is_empty() {
            return Err(format!(
                "no match after \"{}:\" (e.g. udp, dport=5060, dscp=46, or any)",
                class.name()
            ));
        }
        let matches = rest
            .split(',')
            .map(|m| parse_match(m.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ClassRule { class, matches })
    }
}

/// Parses rules (as `--class` gives them, in order), at most [`MAX_RULES`]; the error
/// names the rule and what is wrong with it.
pub fn parse_rules<S: AsRef<str>>(texts: &[S]) -> Result<Vec<ClassRule>, String> {
    if texts.len() > MAX_RULES {
        return Err(format!(
            "--class: at most {MAX_RULES} rules, {} given",
            texts.len()
        ));
    }
    texts
        .iter()
        .map(|t| {
            let t = t.as_ref();
            ClassRule::parse(t).map_err(|e| format!("--class {t:?}: {e}"))
        })
        .collect()
}

fn parse_match(text: &str) -> Result<Match, String> {
    let (key, value) = match text.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (text, None),
    };
    let range = |max: u16| -> Result<Range, String> {
        let value = value.ok_or_else(|| format!("{key} needs a value ({key}=N or {key}=A-B)"))?;
        let number = |s: &str| -> Result<u16, String> {
            s.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= u32::from(max))
                .map(|n| n as u16)
                .ok_or_else(|| format!("{key} {s:?} is not a number from 0 to {max}"))
        };
        let (low, high) = match value.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(value)?, number(value)?),
        };
        if low > high {
            return Err(format!("{key} range {value:?} runs backwards"));
        }
        Ok(Range { low, high })
    };
    Ok(match key {
        "any" if value.is_none() => Match::Any,
        "udp" if value.is_none() => Match::Protocol(wire::PROTOCOL_UDP),
        "tcp" if value.is_none() => Match::Protocol(wire::PROTOCOL_TCP),
        "icmp" if value.is_none() => Match::Protocol(1),
        "proto" => Match::Protocol(range(255)?.low_only(key)?),
        "port" => Match::Port(range(u16::MAX)?),
        "sport" => Match::SourcePort(range(u16::MAX)?),
        "dport" => Match::DestinationPort(range(u16::MAX)?),
        "dscp" if value == Some("ef") => Match::Dscp(Range {
            low: u16::from(DSCP_EF),
            high: u16::from(DSCP_EF),
        }),
        "dscp" => Match::Dscp(range(63)?),
        "" => return Err("an empty match".to_owned()),
        _ => {
            return Err(format!(
            "unknown match {text:?} (udp, tcp, icmp, proto=N, port=, sport=, dport=, dscp=, any)"
        ))
        }
    })
}

impl Range {
    /// The one value of a range that must not be one (a protocol).
    fn low_only(self, key: &str) -> Result<u8, String> {
        if self.low == self.high {
            Ok(self.low as u8)
        } else {
            Err(format!("{key} takes one number, not a range"))
        }
    }
}

/// What the default's detector knows of one UDP flow.
#[derive(Debug, Clone, Copy)]
struct FlowPace {
    last_at: Instant,
    packets: u32,
    /// Mean gap between packets (EWMA, ns) and its mean deviation.
    gap_ns: f64,
    deviation_ns: f64,
    /// A packet larger than [`SMALL_PACKET_BYTES`] came.
    large: bool,
}

impl FlowPace {
    fn steady(&self) -> bool {
        let min_gap = 1e9 / f64::from(MAX_STEADY_PPS) * 0.9;
        self.packets >= STEADY_AFTER_PACKETS
            && !self.large
            && self.gap_ns >= min_gap
            && self.gap_ns <= 1e9
            && self.deviation_ns <= self.gap_ns * 0.5
    }
}

/// Counters of the classifier, packets per class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ClassCounters {
    /// Packets classed bulk.
    pub bulk: u64,
    /// Packets classed interactive.
    pub interactive: u64,
    /// Packets classed redundant.
    pub redundant: u64,
    /// Second copies of redundant packets sent (fewer than `redundant` when one line was
    /// up).
    pub redundant_copies: u64,
    /// Interactive and redundant packets dropped because their queue was full.
    pub express_dropped: u64,
}

/// Chooses each inner packet's class: the rules, then the default.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    rules: Vec<ClassRule>,
    flows: HashMap<u64, FlowPace>,
    counters: ClassCounters,
}

/// How long a flow the detector follows may be silent before it is forgotten.
const FLOW_IDLE: Duration = Duration::from_secs(2);

impl Classifier {
    /// A classifier with `rules` (first match wins) before the default.
    pub fn new(rules: Vec<ClassRule>) -> Classifier {
        Classifier {
            rules,
            ..Classifier::default()
        }
    }

    /// The counters.
    pub fn counters(&self) -> ClassCounters {
        self.counters
    }

    /// Counts redundant packets' second copies sent.
    pub fn count_copies(&mut self, copies: u64) {
        self.counters.redundant_copies += copies;
    }

    /// Counts express packets dropped (their queue full, or too late).
    pub fn count_express_dropped(&mut self, dropped: u64) {
        self.counters.express_dropped += dropped;
    }

    /// Flows the default's detector follows now.
    pub fn tracked_flows(&self) -> usize {
        self.flows.len()
    }

    /// The class of `packet` (an inner packet as [`crate::inner::packet`] made it), at `now`.
    pub fn classify(&mut self, now: Instant, packet: &Packet) -> TrafficClass {
        let facts = packet.ip_offset().map_or_else(PacketFacts::default, |o| {
            PacketFacts::of_ip(&packet.data[o..])
        });
        let class = self.class_of(now, packet.flow, &facts);
        match class {
            TrafficClass::Bulk => self.counters.bulk += 1,
            TrafficClass::Interactive => self.counters.interactive += 1,
            TrafficClass::Redundant => self.counters.redundant += 1,
        }
        class
    }

    fn class_of(&mut self, now: Instant, flow: u64, facts: &PacketFacts) -> TrafficClass {
        if let Some(rule) = self.rules.iter().find(|r| r.holds(facts)) {
            return rule.class;
        }
        if facts.protocol.is_some() && facts.dscp == DSCP_EF {
            return TrafficClass::Redundant;
        }
        if facts.protocol != Some(wire::PROTOCOL_UDP) {
            return TrafficClass::Bulk;
        }
        if self.pace(now, flow, facts.len) {
            TrafficClass::Redundant
        } else {
            TrafficClass::Bulk
        }
    }

    /// Follows a UDP flow's pace; whether it is small and steady.
    fn pace(&mut self, now: Instant, flow: u64, len: usize) -> bool {
        if !self.flows.contains_key(&flow) && self.flows.len() >= MAX_TRACKED_FLOWS {
            self.flows
                .retain(|_, f| now.saturating_since(f.last_at) < FLOW_IDLE);
            if self.flows.len() >= MAX_TRACKED_FLOWS {
                return false;
            }
        }
        let large = len > SMALL_PACKET_BYTES;
        let pace = self.flows.entry(flow).or_insert(FlowPace {
            last_at: now,
            packets: 0,
            gap_ns: 0.0,
            deviation_ns: 0.0,
            large,
        });
        let gap = now.saturating_since(pace.last_at);
        if pace.packets > 0 && gap >= FLOW_IDLE {
            // Back after a silence: judged afresh.
            *pace = FlowPace {
                last_at: now,
                packets: 0,
                gap_ns: 0.0,
                deviation_ns: 0.0,
                large,
            };
        }
        let gap_ns = gap.as_nanos() as f64;
        match pace.packets {
            0 => {}
            1 => pace.gap_ns = gap_ns,
            _ => {
                pace.deviation_ns += ((gap_ns - pace.gap_ns).abs() - pace.deviation_ns) / 4.0;
                pace.gap_ns += (gap_ns - pace.gap_ns) / 8.0;
            }
        }
        pace.packets = pace.packets.saturating_add(1);
        pace.large |= large;
        pace.last_at = now;
        pace.steady()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn udp(len: usize, dport: u16, dscp: u8) -> Packet {
        let mut data =
            crate::inner::ipv4_udp(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), len);
        data[1] = dscp << 2;
        data[22..24].copy_from_slice(&dport.to_be_bytes());
        Packet::from_ip(Instant::ZERO, data)
    }

    #[test]
    fn rules_parse_and_match() {
        let rules = parse_rules(&[
            "redundant:udp,dport=5060-5061",
            "interactive:dscp=34",
            "bulk:tcp",
        ])
        .unwrap();
        let mut c = Classifier::new(rules);
        assert_eq!(
            c.classify(Instant::ZERO, &udp(1000, 5061, 0)),
            TrafficClass::Redundant
        );
        assert_eq!(
            c.classify(Instant::ZERO, &udp(1000, 5062, 34)),
            TrafficClass::Interactive
        );
        assert_eq!(
            c.classify(Instant::ZERO, &udp(1000, 5062, 0)),
            TrafficClass::Bulk
        );
        assert_eq!(
            ClassRule::parse("bulk:port=80,dscp=ef").unwrap().matches,
            vec![
                Match::Port(Range { low: 80, high: 80 }),
                Match::Dscp(Range { low: 46, high: 46 })
            ]
        );
        assert_eq!(c.counters().redundant, 1);
        assert_eq!(c.counters().interactive, 1);
        assert_eq!(c.counters().bulk, 1);
    }

    #[test]
    fn malformed_rules_name_the_problem() {
        for (rule, problem) in [
            ("fast:udp", "unknown class"),
            ("redundant", "no match"),
            ("redundant:", "no match"),
            ("redundant:udp,", "empty match"),
            ("redundant:dport=70000", "0 to 65535"),
            ("redundant:dport=9-3", "backwards"),
            ("redundant:dscp=64", "0 to 63"),
            ("redundant:dport", "needs a value"),
            ("redundant:proto=1-6", "one number"),
            ("redundant:sctp", "unknown match"),
            ("redundant:udp=1", "unknown match"),
            ("redundant:port=-1", "not a number"),
        ] {
            let error = parse_rules(&[rule]).unwrap_err();
            assert!(error.contains(problem), "{rule}: {error}");
            assert!(error.contains(rule), "{rule}: {error}");
        }
        let many = vec!["bulk:tcp"; MAX_RULES + 1];
        assert!(parse_rules(&many).unwrap_err().contains("at most 64"));
        assert!(parse_rules(&vec!["bulk:tcp"; MAX_RULES]).is_ok());
    }

    #[test]
    fn the_default_takes_voice_and_small_steady_udp_flows() {
        let mut c = Classifier::default();
        assert_eq!(
            c.classify(Instant::ZERO, &udp(1200, 9, DSCP_EF)),
            TrafficClass::Redundant
        );
        // A call: 160 bytes of payload every 20 ms: redundant from its fifth packet.
        let call = udp(188, 4000, 0);
        let classes: Vec<_> = (0..10)
            .map(|k| c.classify(Instant::from_millis(20 * k), &call))
            .collect();
        assert!(classes[..4].iter().all(|&k| k == TrafficClass::Bulk));
        assert!(classes[4..].iter().all(|&k| k == TrafficClass::Redundant));
        // Large packets, or too fast: bulk.
        let mut c = Classifier::default();
        let video = udp(1200, 4001, 0);
        assert!(
            (0..20).all(|k| c.classify(Instant::from_millis(20 * k), &video) == TrafficClass::Bulk)
        );
        let fast = udp(200, 4002, 0);
        assert!(
            (0..50).all(|k| c.classify(Instant::from_millis(2 * k), &fast) == TrafficClass::Bulk)
        );
        // A bursty flow: bulk.
        let bursty = udp(200, 4003, 0);
        let times = [0, 1, 2, 300, 301, 302, 900, 901, 902, 1500];
        assert!(times
            .iter()
            .all(|&t| c.classify(Instant::from_millis(t), &bursty) == TrafficClass::Bulk));
        // `bulk:any` last turns the default off.
        let mut c = Classifier::new(parse_rules(&["bulk:any"]).unwrap());
        assert_eq!(
            c.classify(Instant::ZERO, &udp(100, 9, DSCP_EF)),
            TrafficClass::Bulk
        );
    }

    #[test]
    fn the_detector_is_bounded() {
        let mut c = Classifier::default();
        for k in 0..(MAX_TRACKED_FLOWS as u64 + 100) {
            let mut p = udp(100, 9, 0);
            p.flow = k;
            c.classify(Instant::ZERO, &p);
        }
        assert_eq!(c.tracked_flows(), MAX_TRACKED_FLOWS);
        let mut p = udp(100, 9, 0);
        p.flow = u64::MAX;
        c.classify(Instant::from_secs(3), &p);
        assert_eq!(c.tracked_flows(), 1);
    }
}

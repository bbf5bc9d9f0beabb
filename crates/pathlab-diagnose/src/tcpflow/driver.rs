//! A whole capture through the analysis: read, decode, analyze, with what could not be
//! read counted and named rather than fatal.

use pathlab_core::heap::Earliest;
use pathlab_core::Instant;
use serde::{Deserialize, Serialize};

use super::{Analyzer, AnalyzerConfig, ConnectionReport};
use crate::capture::{decode, CaptureError, CaptureReader, Format};

/// Segments held back to put a capture merged from several interfaces (or written by
/// several threads) back in time order.
const REORDER_DEPTH: usize = 4096;

/// The most decode problems the analysis names one by one (the rest are counted).
const NAMED_PROBLEMS: usize = 10;

/// What `pathlab analyze` found in a capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureAnalysis {
    /// The capture's format.
    pub format: Format,
    /// Packets read.
    pub packets: u64,
    /// TCP segments among them.
    pub tcp_segments: u64,
    /// Packets whose headers could not be read (cut short by the snaplen, malformed, an
    /// unknown link type).
    pub undecodable: u64,
    /// Packets the capture says the emulator dropped at the capture point.
    pub dropped_at_capture: u64,
    /// The first packet's time, ns since the Unix epoch; every other time is from it.
    pub start_unix_ns: u64,
    /// What went wrong on the way, in words (the first problems, a truncated file).
    pub warnings: Vec<String>,
    /// Every TCP connection, in the order they began.
    pub connections: Vec<ConnectionReport>,
}

/// Reads the capture in `bytes` and analyzes its TCP connections.
///
/// A file that is not a capture at all is an error. A capture that breaks part way (a file
/// cut while it was written) is analyzed up to the break, with a warning naming it.
pub fn analyze_capture(
    bytes: &[u8],
    config: AnalyzerConfig,
) -> Result<CaptureAnalysis, CaptureError> {
    let mut reader = CaptureReader::new(bytes)?;
    let mut analyzer = Analyzer::new(config);
    let mut analysis = CaptureAnalysis {
        format: reader.format(),
        packets: 0,
        tcp_segments: 0,
        undecodable: 0,
        dropped_at_capture: 0,
        start_unix_ns: 0,
        warnings: Vec::new(),
        connections: Vec::new(),
    };
    let mut start: Option<u64> = None;
    let mut last_ns = 0u64;
    let mut untimed = 0u64;
    let mut time_order = TimeOrder::default();
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(packet)) => packet,
            Ok(None) => break,
            Err(error) if analysis.packets > 0 => {
                analysis.warnings.push(format!(
                    "the capture breaks off after {} packets ({error}): analyzed what came \
                     before",
                    analysis.packets
                ));
                break;
            }
            Err(error) => return Err(error),
        };
        analysis.packets += 1;
        let timestamp_ns = match packet.timestamp_ns {
            Some(ns) => ns,
            None => {
                untimed += 1;
                last_ns
            }
        };
        let start_ns = *start.get_or_insert(timestamp_ns);
        last_ns = last_ns.max(timestamp_ns);
        let dropped = packet.dropped_by_emulator();
        analysis.dropped_at_capture += u64::from(dropped);
        match decode(packet.link_type, packet.data, packet.original_len) {
            Ok(Some(segment)) => {
                analysis.tcp_segments += 1;
                time_order.held.push(Held {
                    key: (timestamp_ns, analysis.packets),
                    value: (segment, dropped),
                });
                if time_order.held.len() > REORDER_DEPTH {
                    time_order.release(&mut analyzer, start_ns);
                }
            }
            Ok(None) => {}
            Err(problem) => {
                analysis.undecodable += 1;
                if analysis.undecodable as usize <= NAMED_PROBLEMS {
                    analysis
                        .warnings
                        .push(format!("packet {}: {problem}", analysis.packets));
                }
            }
        }
    }
    while !time_order.held.is_empty() {
        time_order.release(&mut analyzer, start.unwrap_or(0));
    }
    add_count_warnings(&mut analysis, untimed, time_order.backwards);
    analysis.start_unix_ns = start.unwrap_or(0);
    analysis.connections = analyzer.finish();
    Ok(analysis)
}

/// Adds the warnings that count what went wrong over the whole capture: the packets that
/// could not be decoded (when more than were named one by one), the packets without a
/// timestamp (`untimed`), and the segments too far out of time order to be put back
/// (`backwards`).
fn add_count_warnings(analysis: &mut CaptureAnalysis, untimed: u64, backwards: u64) {
    if analysis.undecodable as usize > NAMED_PROBLEMS {
        analysis.warnings.push(format!(
            "{} packets in all could not be decoded",
            analysis.undecodable
        ));
    }
    if untimed > 0 {
        analysis.warnings.push(format!(
            "{untimed} packets (simple packet blocks) carry no timestamp: each is taken as seen \
             with the packet before it"
        ));
    }
    if backwards > 0 {
        analysis.warnings.push(format!(
            "{backwards} TCP segments are earlier than one {REORDER_DEPTH} segments before them \
             in the file: each is taken as seen with the latest before it"
        ));
    }
}

/// A decoded segment waiting for its turn in time order: its timestamp, then its place
/// in the capture; the segment, and whether the emulator dropped it.
type Held = Earliest<(u64, u64), (crate::capture::TcpSegment, bool)>;

/// Decoded segments put back in time order before the analyzer sees them.
#[derive(Debug, Default)]
struct TimeOrder {
    /// The segments not yet given, earliest first.
    held: std::collections::BinaryHeap<Held>,
    /// The latest timestamp given so far.
    released_ns: u64,
    /// Segments earlier than one already given.
    backwards: u64,
}

impl TimeOrder {
    /// Gives the earliest held segment to the analyzer (times counted from `start_ns`);
    /// one earlier than a segment already given is taken as seen with it.
    fn release(&mut self, analyzer: &mut Analyzer, start_ns: u64) {
        if let Some(Held {
            key: (timestamp_ns, _),
            value: (segment, dropped),
        }) = self.held.pop()
        {
            if timestamp_ns < self.released_ns {
                self.backwards += 1;
            }
            self.released_ns = self.released_ns.max(timestamp_ns);
            let now = Instant::from_nanos(self.released_ns.saturating_sub(start_ns));
            analyzer.handle_segment(now, &segment, dropped);
        }
    }
}

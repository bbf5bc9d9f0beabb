//! The emulator's recording: the ground truth of every packet, streamed as JSON lines.
//!
//! A recording is written while the emulator runs, so a run that is stopped at any point
//! leaves a readable file. The first line is a [`RecordingHeader`] (magic, version, the
//! directions and their specs, the wall-clock time of the emulator's time zero); every
//! other line is one [`RecordingLine`]: a packet's record, a queue-length sample, or a spec
//! change. Times are nanoseconds since the emulator started.

use std::io::{self, BufRead, Write};

use pathlab_core::record::PacketRecord;
use pathlab_core::time::Instant;
use serde::{Deserialize, Serialize};

use crate::ResultError;

/// The magic string of a recording's header line.
pub const RECORDING_MAGIC: &str = "pathlab-recording";

/// The newest recording version this build writes and reads.
pub const RECORDING_VERSION: u32 = 1;

/// One direction of an emulator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionInfo {
    /// Where packets come from (an interface name).
    pub from: String,
    /// Where they go.
    pub to: String,
    /// The spec at the start, in canonical form.
    pub spec: String,
}

/// The first line of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingHeader {
    /// Always [`RECORDING_MAGIC`].
    pub magic: String,
    /// Format version.
    pub version: u32,
    /// Version of pathlab that wrote it.
    pub pathlab_version: String,
    /// The command line.
    #[serde(default)]
    pub command: Vec<String>,
    /// Wall-clock time (ns since the Unix epoch) of the emulator's time zero.
    pub clock_zero_unix_ns: u64,
    /// The directions, indexed by the `dir` of each line.
    pub directions: Vec<DirectionInfo>,
    /// Interval of the queue-length samples.
    pub queue_sample_interval_ns: u64,
}

/// One line after the header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum RecordingLine {
    /// What happened to one packet (written once its fate is known).
    Packet {
        /// Direction index.
        dir: u8,
        /// The record.
        #[serde(flatten)]
        record: PacketRecord,
    },
    /// The bottleneck queue of one direction at one instant.
    Queue {
        /// Direction index.
        dir: u8,
        /// When.
        at: Instant,
        /// Packets waiting.
        packets: u32,
        /// Bytes waiting.
        bytes: u64,
    },
    /// The spec of a direction changed (`emulate set`).
    Spec {
        /// Direction index.
        dir: u8,
        /// When.
        at: Instant,
        /// The new spec, canonical.
        spec: String,
    },
}

impl RecordingLine {
    /// The line with every time in it `by` later: a recording moved to another
    /// recording's time zero.
    pub fn shifted(mut self, by: pathlab_core::time::Duration) -> RecordingLine {
        match &mut self {
            RecordingLine::Packet { record, .. } => {
                record.arrived += by;
                for at in [
                    &mut record.dequeued,
                    &mut record.transmitted,
                    &mut record.departed,
                    &mut record.sent,
                ]
                .into_iter()
                .flatten()
                {
                    *at += by;
                }
                if let Some((at, _)) = &mut record.dropped {
                    *at += by;
                }
            }
            RecordingLine::Queue { at, .. } | RecordingLine::Spec { at, .. } => *at += by,
        }
        self
    }

    /// Its direction.
    pub fn dir(&self) -> u8 {
        match self {
            RecordingLine::Packet { dir, .. }
            | RecordingLine::Queue { dir, .. }
            | RecordingLine::Spec { dir, .. } => *dir,
        }
    }

    /// The line as direction `dir`.
    pub fn with_dir(mut self, to: u8) -> RecordingLine {
        match &mut self {
            RecordingLine::Packet { dir, .. }
            | RecordingLine::Queue { dir, .. }
            | RecordingLine::Spec { dir, .. } => *dir = to,
        }
        self
    }
}

/// A recording read back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recording {
    /// The header.
    pub header: Option<RecordingHeader>,
    /// Every line, in file order.
    pub lines: Vec<RecordingLine>,
}

impl Recording {
    /// The packet records of direction `dir`.
    pub fn packets(&self, dir: u8) -> impl Iterator<Item = &PacketRecord> {
        self.lines.iter().filter_map(move |line| match line {
            RecordingLine::Packet { dir: d, record } if *d == dir => Some(record),
            _ => None,
        })
    }

    /// The drops of direction `dir` for `reason`, grouped into episodes: a drop more than
    /// `gap` after the previous one starts a new episode. Each is (first, last) drop.
    pub fn drop_episodes(
        &self,
        dir: u8,
        reason: pathlab_core::verdict::DropReason,
        gap: pathlab_core::time::Duration,
    ) -> Vec<(Instant, Instant)> {
        let mut drops: Vec<Instant> = self
            .packets(dir)
            .filter_map(|p| p.dropped.filter(|(_, r)| *r == reason).map(|(at, _)| at))
            .collect();
        drops.sort_unstable();
        let mut episodes: Vec<(Instant, Instant)> = Vec::new();
        for at in drops {
            match episodes.last_mut() {
                Some((_, last)) if at - *last <= gap => *last = at,
                _ => episodes.push((at, at)),
            }
        }
        episodes
    }

    /// The queue samples of direction `dir`, as (instant, packets, bytes).
    pub fn queue_samples(&self, dir: u8) -> impl Iterator<Item = (Instant, u32, u64)> + '_ {
        self.lines.iter().filter_map(move |line| match line {
            RecordingLine::Queue {
                dir: d,
                at,
                packets,
                bytes,
            } if *d == dir => Some((*at, *packets, *bytes)),
            _ => None,
        })
    }
}

/// Writes the header line.
pub fn write_header(writer: &mut impl Write, header: &RecordingHeader) -> io::Result<()> {
    serde_json::to_writer(&mut *writer, header)?;
    writer.write_all(b"\n")
}

/// Writes one line.
pub fn write_line(writer: &mut impl Write, line: &RecordingLine) -> io::Result<()> {
    serde_json::to_writer(&mut *writer, line)?;
    writer.write_all(b"\n")
}

/// Reads a recording. A last line cut short (the emulator was killed while writing) is
/// ignored; any other bad line is an error naming its line number.
pub fn read_recording(reader: impl BufRead) -> Result<Recording, ResultError> {
    let mut recording = Recording::default();
    let mut lines = reader.lines().enumerate().peekable();
    let Some((_, first)) = lines.next() else {
        return Err(ResultError::Empty);
    };
    let first = first.map_err(ResultError::Io)?;
    let header: RecordingHeader = serde_json::from_str(&first).map_err(ResultError::Malformed)?;
    if header.magic != RECORDING_MAGIC {
        return Err(ResultError::WrongMagic(header.magic));
    }
    if header.version > RECORDING_VERSION {
        return Err(ResultError::TooNew {
            found: header.version,
        });
    }
    recording.header = Some(header);
    while let Some((index, line)) = lines.next() {
        let line = line.map_err(ResultError::Io)?;
        match serde_json::from_str::<RecordingLine>(&line) {
            Ok(parsed) => recording.lines.push(parsed),
            Err(_) if lines.peek().is_none() => break,
            Err(error) => {
                return Err(ResultError::BadLine {
                    line: index + 1,
                    source: error,
                })
            }
        }
    }
    Ok(recording)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_core::packet::Ecn;
    use pathlab_core::verdict::DropReason;

    fn header() -> RecordingHeader {
        RecordingHeader {
            magic: RECORDING_MAGIC.into(),
            version: RECORDING_VERSION,
            pathlab_version: "test".into(),
            command: vec![],
            clock_zero_unix_ns: 1,
            directions: vec![DirectionInfo {
                from: "a".into(),
                to: "b".into(),
                spec: "delay 10ms".into(),
            }],
            queue_sample_interval_ns: 10_000_000,
        }
    }

    #[test]
    fn lines_round_trip_and_a_cut_last_line_is_ignored() {
        let record = PacketRecord {
            id: 3,
            tag: 0,
            flow: 9,
            len_bytes: 1514,
            arrived: Instant::from_nanos(5),
            ecn_on_arrival: Ecn::NotEct,
            queue_len_on_arrival: Some(2),
            dequeued: None,
            transmitted: None,
            departed: None,
            dropped: Some((Instant::from_nanos(5), DropReason::QueueFull)),
            duplicate_of: None,
            ce_marked: false,
            corrupted: false,
            sent: None,
        };
        let sent = PacketRecord {
            id: 4,
            dropped: None,
            departed: Some(Instant::from_nanos(40)),
            sent: Some(Instant::from_nanos(41)),
            ..record.clone()
        };
        let lines = vec![
            RecordingLine::Packet { dir: 0, record },
            RecordingLine::Packet {
                dir: 0,
                record: sent,
            },
            RecordingLine::Queue {
                dir: 0,
                at: Instant::from_nanos(7),
                packets: 2,
                bytes: 3028,
            },
        ];
        let mut bytes = Vec::new();
        write_header(&mut bytes, &header()).unwrap();
        for line in &lines {
            write_line(&mut bytes, line).unwrap();
        }
        bytes.extend_from_slice(b"{\"type\":\"queue\",\"dir\":0,\"at");
        let read = read_recording(&bytes[..]).unwrap();
        assert_eq!(read.header, Some(header()));
        assert_eq!(read.lines, lines);
        assert_eq!(read.packets(0).count(), 2);
        // A record without `sent` (one written before it was recorded) reads as not sent.
        let old = br#"{"type":"packet","dir":1,"id":1,"tag":0,"flow":0,"len_bytes":60,"arrived":1,"ecn_on_arrival":"not-ect","queue_len_on_arrival":null,"dequeued":null,"transmitted":null,"departed":2,"dropped":null,"duplicate_of":null,"ce_marked":false,"corrupted":false}"#;
        let line: RecordingLine = serde_json::from_slice(old).unwrap();
        assert!(matches!(line, RecordingLine::Packet { record, .. } if record.sent.is_none()));
        assert_eq!(
            read.queue_samples(0).collect::<Vec<_>>(),
            vec![(Instant::from_nanos(7), 2, 3028)]
        );
    }

    #[test]
    fn bad_files_get_named_errors() {
        assert!(matches!(read_recording(&b""[..]), Err(ResultError::Empty)));
        assert!(matches!(
            read_recording(&b"{\"magic\":\"x\",\"version\":1,\"pathlab_version\":\"\",\"clock_zero_unix_ns\":0,\"directions\":[],\"queue_sample_interval_ns\":1}\n"[..]),
            Err(ResultError::WrongMagic(_))
        ));
        let mut bytes = Vec::new();
        write_header(&mut bytes, &header()).unwrap();
        bytes.extend_from_slice(b"garbage\n{\"type\":\"spec\",\"dir\":0,\"at\":1,\"spec\":\"\"}\n");
        assert!(matches!(
            read_recording(&bytes[..]),
            Err(ResultError::BadLine { line: 2, .. })
        ));
    }
}

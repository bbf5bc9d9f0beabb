//! The ground truth of a link: what happened to every packet, and when.
//!
//! A [`PacketRecord`] says when a packet arrived, when it left the queue (started
//! transmission), when its last bit was serialized, when it left the delay stage, when it
//! left the link, or when and why it was dropped. Measurement code is tested against these.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::packet::{Ecn, FlowHash};
use crate::time::Instant;
use crate::verdict::DropReason;

/// What happened to one packet on one link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketRecord {
    /// The link's sequence number for the packet.
    pub id: u64,
    /// The caller's tag.
    pub tag: u32,
    /// Flow hash.
    pub flow: FlowHash,
    /// Length in bytes.
    pub len_bytes: u32,
    /// When it entered the link.
    pub arrived: Instant,
    /// Its ECN field when it arrived.
    pub ecn_on_arrival: Ecn,
    /// Packets in the bottleneck queue just before it arrived there (None: no bottleneck,
    /// or dropped before the queue).
    pub queue_len_on_arrival: Option<u32>,
    /// When it left the bottleneck queue and started transmission.
    pub dequeued: Option<Instant>,
    /// When its last bit left the bottleneck (serialization done).
    pub transmitted: Option<Instant>,
    /// When it left the link.
    pub departed: Option<Instant>,
    /// When and why it was dropped.
    pub dropped: Option<(Instant, DropReason)>,
    /// The id of the packet it is a copy of, for duplicates.
    pub duplicate_of: Option<u64>,
    /// Whether it was marked CE on this link.
    pub ce_marked: bool,
    /// Whether a bit was flipped on this link.
    pub corrupted: bool,
}

impl PacketRecord {
    /// Whether the packet's fate is known (it departed or was dropped).
    pub fn is_finished(&self) -> bool {
        self.departed.is_some() || self.dropped.is_some()
    }
}

/// Records of a link's packets, indexed by id; finished records can be drained in order.
#[derive(Debug, Default)]
pub struct Recorder {
    records: VecDeque<PacketRecord>,
    /// Id of `records[0]`.
    first_id: u64,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// Starts the record of a packet; ids must arrive in increasing order without gaps.
    pub(crate) fn start(&mut self, record: PacketRecord) {
        if self.records.is_empty() {
            self.first_id = record.id;
        }
        debug_assert_eq!(record.id, self.first_id + self.records.len() as u64);
        self.records.push_back(record);
    }

    /// The record of packet `id`, if still held.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut PacketRecord> {
        let index = id.checked_sub(self.first_id)?;
        self.records.get_mut(usize::try_from(index).ok()?)
    }

    /// All records still held, in id order.
    pub fn records(&self) -> impl Iterator<Item = &PacketRecord> {
        self.records.iter()
    }

    /// Removes and returns the records, in id order, up to the first unfinished one (so a
    /// long-running emulator can stream them to a file).
    pub fn drain_finished(&mut self) -> Vec<PacketRecord> {
        let finished = self
            .records
            .iter()
            .position(|r| !r.is_finished())
            .unwrap_or(self.records.len());
        self.first_id += finished as u64;
        self.records.drain(..finished).collect()
    }

    /// Removes and returns every record, finished or not.
    pub fn drain_all(&mut self) -> Vec<PacketRecord> {
        self.first_id += self.records.len() as u64;
        self.records.drain(..).collect()
    }
}

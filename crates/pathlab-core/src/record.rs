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
    /// When the emulator handed it to the kernel to send: `departed` plus how late the
    /// emulator was (the model's time of a packet is exact; this is the wire's). `None`
    /// in virtual time, for a packet not sent, and in recordings written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Instant>,
}

impl PacketRecord {
    /// Whether the packet's fate is known (it departed or was dropped).
    pub fn is_finished(&self) -> bool {
        self.departed.is_some() || self.dropped.is_some()
    }
}

/// Records of a link's packets, indexed by id; finished records can be drained in order.
///
/// A driver that reports its sends ([`Recorder::await_sends`]) has a departed packet's
/// record held until it said what became of the send ([`Recorder::note_sent`]), so that a
/// record drained while its packet waits in the driver is not written without its `sent`.
#[derive(Debug, Default)]
pub struct Recorder {
    records: VecDeque<PacketRecord>,
    /// Whether the driver reported each record's send (as `records`).
    reported: VecDeque<bool>,
    /// Whether departed records wait for their send's report.
    awaits_sends: bool,
    /// Id of `records[0]`.
    first_id: u64,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// From now on, a departed packet's record is finished only once the driver reported
    /// its send ([`Recorder::note_sent`]). Every packet the link lets leave must then be
    /// reported, or the records behind it are held until [`Recorder::drain_all`].
    pub fn await_sends(&mut self) {
        self.awaits_sends = true;
    }

    /// Starts the record of a packet; ids must arrive in increasing order without gaps.
    pub(crate) fn start(&mut self, record: PacketRecord) {
        if self.records.is_empty() {
            self.first_id = record.id;
        }
        debug_assert_eq!(record.id, self.first_id + self.records.len() as u64);
        self.records.push_back(record);
        self.reported.push_back(false);
    }

    fn index(&self, id: u64) -> Option<usize> {
        let index = usize::try_from(id.checked_sub(self.first_id)?).ok()?;
        (index < self.records.len()).then_some(index)
    }

    /// The record of packet `id`, if still held.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut PacketRecord> {
        let index = self.index(id)?;
        self.records.get_mut(index)
    }

    /// Reports what became of the send of packet `id`, which the link let leave: handed to
    /// the kernel at `at` ([`PacketRecord::sent`]), or `None` when the send failed. A
    /// record no longer held is left alone.
    pub fn note_sent(&mut self, id: u64, at: Option<Instant>) {
        let Some(index) = self.index(id) else {
            return;
        };
        self.records[index].sent = at;
        self.reported[index] = true;
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
            .zip(&self.reported)
            .position(|(r, &reported)| {
                // A departed packet may still wait in the driver for its send.
                let sent_or_not_awaited = reported || !self.awaits_sends || r.dropped.is_some();
                !(r.is_finished() && sent_or_not_awaited)
            })
            .unwrap_or(self.records.len());
        self.first_id += finished as u64;
        self.reported.drain(..finished);
        self.records.drain(..finished).collect()
    }

    /// Removes and returns every record, finished or not.
    pub fn drain_all(&mut self) -> Vec<PacketRecord> {
        self.first_id += self.records.len() as u64;
        self.reported.clear();
        self.records.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u64) -> PacketRecord {
        PacketRecord {
            id,
            tag: 0,
            flow: 0,
            len_bytes: 100,
            arrived: Instant::from_nanos(id),
            ecn_on_arrival: Ecn::NotEct,
            queue_len_on_arrival: None,
            dequeued: None,
            transmitted: None,
            departed: None,
            dropped: None,
            duplicate_of: None,
            ce_marked: false,
            corrupted: false,
            sent: None,
        }
    }

    #[test]
    fn a_departed_record_waits_for_its_send_only_when_the_driver_reports_sends() {
        for awaits in [false, true] {
            let mut recorder = Recorder::new();
            if awaits {
                recorder.await_sends();
            }
            for id in 1..=4 {
                recorder.start(record(id));
            }
            recorder.get_mut(1).unwrap().departed = Some(Instant::from_nanos(10));
            recorder.get_mut(2).unwrap().departed = Some(Instant::from_nanos(11));
            recorder.get_mut(3).unwrap().dropped =
                Some((Instant::from_nanos(3), DropReason::QueueFull));
            recorder.note_sent(1, Some(Instant::from_nanos(12)));
            let drained: Vec<u64> = recorder.drain_finished().iter().map(|r| r.id).collect();
            // Waiting in the driver, packet 2 holds its record and those behind it.
            assert_eq!(drained, if awaits { vec![1] } else { vec![1, 2, 3] });
            if awaits {
                // A failed send finishes the record without a `sent`.
                recorder.note_sent(2, None);
                let drained = recorder.drain_finished();
                assert_eq!(drained.iter().map(|r| r.id).collect::<Vec<_>>(), [2, 3]);
                assert_eq!(drained[0].sent, None);
            }
            // A report for a record no longer held changes nothing.
            recorder.note_sent(1, Some(Instant::from_nanos(20)));
            let rest = recorder.drain_all();
            assert_eq!(rest.iter().map(|r| r.id).collect::<Vec<_>>(), [4]);
            assert_eq!(rest[0].sent, None);
        }
    }
}

//! What a [`Bond`] sends: the scheduler's choice of line, and the datagrams it builds.

use pathlab_core::{BitsPerSec, Duration, Instant};

use super::{Bond, State, Transmit, DEFAULT_MAX_PAYLOAD};
use crate::class::TrafficClass;
use crate::line::{Line, Sent};
use crate::sched::{self, Choice, LineView, SchedulerKind};
use crate::wire::{self, Frame, Header, Kind};

/// What a datagram carries besides its line's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// As much queued data as fits.
    All,
    /// Only the packets of streams that just became active.
    NewStreams,
    /// No data (a keepalive or a report).
    Nothing,
    /// A path MTU probe: zeros (a Padding frame) to this many bytes of UDP payload, no
    /// report.
    Probe(usize),
    /// A Close frame only.
    Close,
    /// Express packets of this class, in at most this many bytes of frames (what the
    /// redundant copy's line takes).
    Express(TrafficClass, usize),
    /// The last express datagram's frames again (a redundant copy), nothing else.
    Copy,
}

impl Bond {
    pub(super) fn poll_transmit_open(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let timers = self.config.timers;
        self.send_at = None;
        // A rekey's frame cannot wait for data: it goes now, with data if the scheduler
        // would give the line some anyway.
        if let Some(j) = self.control_line() {
            let with_data = self.lines[j].is_up() && self.line_may_send(now, j);
            let fill = if with_data { Fill::All } else { Fill::Nothing };
            if let Some(transmit) = self.build(now, j, fill, buf) {
                return Some(transmit);
            }
            self.control_out[j].clear();
        }
        // A path MTU probe first: a few per search, and the search holds data back to what
        // is proven.
        for j in 0..self.lines.len() {
            if let Some(size) = self.lines[j].probe_due(now) {
                if let Some(transmit) = self.build(now, j, Fill::Probe(size), buf) {
                    return Some(transmit);
                }
            }
        }
        // Control that cannot wait: a report that found no data datagram of its line to
        // ride on within its grace, a keepalive of a line silent for the keepalive
        // interval. It goes now, with data if the scheduler would give the line some
        // anyway. (A report that is due but may still wait rides on the line's next data
        // datagram: `build` adds it to any datagram of its line.)
        if let Some(j) = (0..self.lines.len()).find(|&j| self.lines[j].must_send(now, &timers)) {
            let with_data = self.lines[j].is_up() && self.line_may_send(now, j);
            return self.build(
                now,
                j,
                if with_data { Fill::All } else { Fill::Nothing },
                buf,
            );
        }
        if let Some(transmit) = self.poll_express(now, buf) {
            return Some(transmit);
        }
        if self.fair.is_empty() {
            return None;
        }
        // A sparse flow's packet (a ping, an ACK, a DNS query) need not wait for the
        // pacer: it goes now, alone in a short datagram, on the line where it lands first,
        // borrowing at most one frame's time from that line's pacer. Its bytes are charged
        // to the pacer, so the line's rate holds: a flow that keeps coming back as new
        // finds the pacer in debt and waits like everyone else.
        if self.config.scheduler == SchedulerKind::Delay && self.fair.has_new_streams() {
            let views: Vec<Option<LineView>> = self
                .views()
                .into_iter()
                .map(|v| {
                    v.filter(|v| v.ready_at <= now + frame_time(v.rate_bps))
                        .map(|v| LineView { ready_at: now, ..v })
                })
                .collect();
            if let Choice::Send(j) = sched::earliest_arrival(now, &views, 200, 200, Duration::ZERO)
            {
                return self.build(now, j, Fill::NewStreams, buf);
            }
        }
        let line = self.scheduled_line(now)?;
        self.build(now, line, Fill::All, buf)
    }

    /// An express datagram ([`crate::class`]): a redundant packet's copy owed to its second
    /// line, or the express packets at the front of their queue, at once on the line where
    /// they land first (each line's pacer forgiven a frame's time, as for a sparse flow),
    /// with the copy owed to the line where they land second if they are redundant.
    fn poll_express(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(j) = self.copy_out.take() {
            if self.lines[j].is_up() {
                if let Some(transmit) = self.build(now, j, Fill::Copy, buf) {
                    return Some(transmit);
                }
            }
        }
        let (class, expired) = self.fair.next_express(now);
        self.classifier.count_express_dropped(expired);
        let class = class?;
        let views: Vec<Option<LineView>> = self
            .views()
            .into_iter()
            .map(|v| {
                v.map(|v| LineView {
                    ready_at: v.ready_at - frame_time(v.rate_bps),
                    ..v
                })
            })
            .collect();
        let ranked = sched::by_arrival(now, &views, self.fair.express_bytes().min(1500));
        let Some(&first) = ranked.first() else {
            self.counters.no_line_dropped += self.fair.drop_express();
            return None;
        };
        let second = ranked
            .get(1)
            .copied()
            .filter(|_| class == TrafficClass::Redundant);
        let room = second.map_or(usize::MAX, |j| {
            self.lines[j]
                .payload_limit()
                .saturating_sub(wire::DATA_OVERHEAD_BYTES)
        });
        let transmit = self.build(now, first, Fill::Express(class, room), buf);
        if transmit.is_none() {
            // The session cannot seal: what waits would wait for ever.
            self.counters.no_line_dropped += self.fair.drop_express();
            return None;
        }
        if second.is_some() {
            self.classifier.count_copies(self.express_began);
        }
        self.copy_out = second;
        transmit
    }

    /// The line the scheduler gives the queued data's next datagram at `now`; `None` when
    /// it must wait (until `send_at`) or no line is up (the backlog is dropped then).
    fn scheduled_line(&mut self, now: Instant) -> Option<usize> {
        match self.config.scheduler {
            SchedulerKind::Delay => self.earliest_arrival_line(now),
            SchedulerKind::RoundRobin => self.round_robin_line(now),
            SchedulerKind::WeightedRoundRobin => self.weighted_round_robin_line(now),
        }
    }

    /// The delay scheduler's line: where the next datagram of data would arrive first.
    fn earliest_arrival_line(&mut self, now: Instant) -> Option<usize> {
        let len = self.fair.backlog_bytes().min(
            self.lines
                .iter()
                .map(Line::payload_limit)
                .max()
                .unwrap_or(DEFAULT_MAX_PAYLOAD) as u64,
        ) as usize;
        match sched::earliest_arrival(
            now,
            &self.views(),
            len,
            self.fair.backlog_bytes(),
            self.config.controller.target.saturating_mul(2),
        ) {
            Choice::Send(j) => Some(j),
            Choice::Wait(at) => {
                self.send_at = Some(at);
                None
            }
            Choice::NoLine => {
                self.drop_backlog(now);
                None
            }
        }
    }

    /// The round-robin scheduler's line: the next line up after the last one's.
    fn round_robin_line(&mut self, now: Instant) -> Option<usize> {
        let up: Vec<usize> = (0..self.lines.len())
            .filter(|&j| self.lines[j].is_up())
            .collect();
        if up.is_empty() {
            self.drop_backlog(now);
            return None;
        }
        self.round_robin_next = (self.round_robin_next + 1) % self.lines.len();
        Some(
            *up.iter()
                .find(|&&j| j >= self.round_robin_next)
                .unwrap_or(&up[0]),
        )
    }

    /// The weighted round-robin scheduler's line: the lines up, weighted by their
    /// configured rates (1 when none is given).
    fn weighted_round_robin_line(&mut self, now: Instant) -> Option<usize> {
        let weights: Vec<Option<f64>> = self
            .lines
            .iter()
            .enumerate()
            .map(|(j, l)| {
                l.is_up().then(|| {
                    self.config
                        .line_rates
                        .get(j)
                        .copied()
                        .flatten()
                        .map_or(1.0, BitsPerSec::as_f64)
                })
            })
            .collect();
        let line = self.wrr.pick(&weights);
        if line.is_none() {
            self.drop_backlog(now);
        }
        line
    }

    /// Whether line `j` may carry data at `now` under the scheduler.
    pub(super) fn line_may_send(&self, now: Instant, j: usize) -> bool {
        if self.fair.is_empty() {
            return false;
        }
        match self.config.scheduler {
            SchedulerKind::Delay => {
                let len = self
                    .fair
                    .backlog_bytes()
                    .min(self.lines[j].payload_limit() as u64) as usize;
                sched::earliest_arrival(
                    now,
                    &self.views(),
                    len,
                    self.fair.backlog_bytes(),
                    self.config.controller.target.saturating_mul(2),
                ) == Choice::Send(j)
            }
            SchedulerKind::RoundRobin | SchedulerKind::WeightedRoundRobin => true,
        }
    }

    pub(super) fn views(&self) -> Vec<Option<LineView>> {
        let fallback = self
            .lines
            .iter()
            .filter_map(|l| l.controller().scheduling_owd_ns())
            .min()
            .unwrap_or(0);
        self.lines
            .iter()
            .map(|line| {
                line.is_up().then(|| LineView {
                    ready_at: line.ready_at(),
                    rate_bps: line.controller().rate().as_f64().max(1.0),
                    // A line not measured yet is taken as good as the best: it gets
                    // traffic, and so a measurement.
                    owd_ns: line.controller().scheduling_owd_ns().unwrap_or(fallback),
                })
            })
            .collect()
    }

    pub(super) fn drop_backlog(&mut self, now: Instant) {
        // No line is up: what waits would only grow stale. Drop it, counted.
        let mut dropped = self.fair.drop_express();
        while !self.fair.is_empty() {
            let before = self.fair.backlog_bytes();
            self.fair.fill(now, usize::MAX / 2, |_| dropped += 1);
            if self.fair.backlog_bytes() == before {
                break;
            }
        }
        self.counters.no_line_dropped += dropped;
    }

    /// Writes a Data datagram for line `j`: its report and echo if due, then what `fill`
    /// says (fragments, or a probe's padding), sealed.
    pub(super) fn build(
        &mut self,
        now: Instant,
        j: usize,
        fill: Fill,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let State::Open { session, keys } = &mut self.state else {
            return None;
        };
        let timers = self.config.timers;
        let line = &mut self.lines[j];
        let header = Header {
            kind: Kind::Data,
            line: line.index,
            session: *session,
            seq: line.next_seq()?,
        };
        header.encode(buf);
        wire::encode_data_prefix(now.as_nanos(), buf);
        let probe = matches!(fill, Fill::Probe(_));
        // A copy carries its frames only, so it fits where the first copy's frames did.
        let bare = probe || fill == Fill::Copy;
        if !bare
            && fill != Fill::Close
            && (line.report_due(now, &timers) || line.keepalive_due(now, &timers))
        {
            // A probe's acknowledgement before the report that counts it: the peer then
            // tells a probe too big for the path from a lost datagram.
            if let Some(ack) = line.take_probe_ack() {
                ack.encode(buf);
            }
            for frame in line.take_report(now) {
                frame.encode(buf);
            }
        }
        let capacity = line.payload_limit().saturating_sub(wire::TAG_BYTES);
        let control = &mut self.control_out[j];
        if !bare && fill != Fill::Close && buf.len() + control.len() <= capacity {
            buf.extend_from_slice(control);
            control.clear();
        }
        if !matches!(fill, Fill::Close | Fill::Copy) && self.decompressor.has_acks() {
            // The references this end stored, so the peer compresses against them.
            let room = capacity.saturating_sub(buf.len() + wire::HEADER_ACKS_HEADER_BYTES)
                / wire::HEADER_ACK_BYTES;
            self.decompressor
                .take_acks(room.min(wire::MAX_HEADER_ACKS), &mut self.acks);
            if let Some(acks) = wire::HeaderAcks::build(&self.acks, &mut self.coded) {
                Frame::HeaderAcks(acks).encode(buf);
            }
        }
        let budget = capacity.saturating_sub(buf.len());
        let before_fill = buf.len();
        let write = |fragment: wire::Fragment<'_>| Frame::Fragment(fragment).encode(buf);
        match fill {
            Fill::All => {
                self.fair.fill(now, budget, write);
            }
            Fill::NewStreams => {
                self.fair.fill_new(now, budget, write);
            }
            Fill::Express(class, room) => {
                let frames = &mut self.express_frames;
                frames.clear();
                self.express_began =
                    self.fair
                        .fill_express(now, budget.min(room), class, |fragment| {
                            Frame::Fragment(fragment).encode(frames);
                        });
                buf.extend_from_slice(frames);
            }
            Fill::Copy => buf.extend_from_slice(&self.express_frames),
            Fill::Nothing => {}
            Fill::Close => Frame::Close.encode(buf),
            Fill::Probe(size) => {
                let zeros =
                    size.saturating_sub(buf.len() + wire::PADDING_HEADER_BYTES + wire::TAG_BYTES);
                Frame::Padding(u16::try_from(zeros).unwrap_or(u16::MAX)).encode(buf);
            }
        }
        keys.seal(&header, buf).ok()?;
        if probe {
            line.on_probe_sent(header.seq, buf.len(), now);
        }
        let sent = Sent {
            data: matches!(
                fill,
                Fill::All | Fill::NewStreams | Fill::Express(..) | Fill::Copy
            ) && buf.len() > before_fill,
            paced: self.config.scheduler == SchedulerKind::Delay,
        };
        line.on_sent(now, buf.len(), sent);
        Some(Transmit { line: line.index })
    }
}

/// The time a full-size frame takes at `rate_bps`.
fn frame_time(rate_bps: f64) -> Duration {
    Duration::from_secs_f64(1514.0 * 8.0 / rate_bps.max(1.0))
}

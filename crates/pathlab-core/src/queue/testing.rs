//! A virtual-time test bench for queue disciplines: sources of synthetic packets feed a
//! [`Queue`], and a server drains it at a fixed line rate, calling `dequeue` exactly when
//! the line is free, as the link does.
//!
//! Everything is deterministic: time is virtual, Poisson gaps come from a seeded [`Rng`].

use super::Queue;
use crate::packet::{Ecn, Packet};
use crate::rng::Rng;
use crate::time::{Duration, Instant};
use crate::units::BitsPerSec;
use crate::verdict::{DropReason, Verdicts};

/// How a source spaces its packets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Spacing {
    /// Constant bit rate: one packet every `gap`.
    Constant(Duration),
    /// Poisson arrivals with mean gap `mean`.
    Poisson(Duration),
}

/// A stream of equal-sized packets of one flow, sent from `start` until `stop`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source {
    pub flow: u64,
    pub len_bytes: u32,
    pub ecn: Ecn,
    pub spacing: Spacing,
    pub start: Instant,
    pub stop: Instant,
}

impl Source {
    /// A constant-bit-rate source of `len_bytes` packets at `rate`, for the whole run.
    pub(crate) fn cbr(flow: u64, len_bytes: u32, rate: BitsPerSec) -> Source {
        Source {
            flow,
            len_bytes,
            ecn: Ecn::NotEct,
            spacing: Spacing::Constant(rate.serialization_time(u64::from(len_bytes))),
            start: Instant::ZERO,
            stop: Instant::MAX,
        }
    }

    /// A Poisson source of `len_bytes` packets with mean rate `rate`.
    pub(crate) fn poisson(flow: u64, len_bytes: u32, rate: BitsPerSec) -> Source {
        Source {
            spacing: Spacing::Poisson(rate.serialization_time(u64::from(len_bytes))),
            ..Source::cbr(flow, len_bytes, rate)
        }
    }
}

/// A packet that left the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Departure {
    pub flow: u64,
    pub len_bytes: u32,
    /// When the server took it (start of transmission).
    pub at: Instant,
    /// Time it waited in the queue.
    pub sojourn: Duration,
    pub ce: bool,
}

/// A packet the queue dropped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drop {
    pub flow: u64,
    pub at: Instant,
    pub reason: DropReason,
}

/// Everything a run produced.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub offered: u64,
    pub departures: Vec<Departure>,
    pub drops: Vec<Drop>,
    pub ce_marked: u64,
}

impl Outcome {
    /// Drops for `reason`.
    pub(crate) fn drops_for(&self, reason: DropReason) -> usize {
        self.drops.iter().filter(|d| d.reason == reason).count()
    }

    /// Bytes delivered by `flow` at or after `from`.
    pub(crate) fn bytes_of(&self, flow: u64, from: Instant) -> u64 {
        self.departures
            .iter()
            .filter(|d| d.flow == flow && d.at >= from)
            .map(|d| u64::from(d.len_bytes))
            .sum()
    }

    /// Sojourn times of `flow`'s packets (any flow if `None`) that left at or after `from`.
    pub(crate) fn sojourns(&self, flow: Option<u64>, from: Instant) -> Vec<Duration> {
        self.departures
            .iter()
            .filter(|d| d.at >= from && flow.is_none_or(|f| f == d.flow))
            .map(|d| d.sojourn)
            .collect()
    }
}

/// The `q`-quantile (0..=1) of `values`, sorted here, by [`crate::quantile::of_sorted`];
/// zero when empty.
pub(crate) fn quantile(mut values: Vec<Duration>, q: f64) -> Duration {
    values.sort_unstable();
    crate::quantile::of_sorted(&values, q).unwrap_or(Duration::ZERO)
}

/// Feeds `sources` into `queue`, served at `line` until `end`. At equal instants arrivals
/// come before the server, so a packet arriving as the line frees can leave at once.
pub(crate) fn run<Q: Queue + ?Sized>(
    queue: &mut Q,
    sources: &[Source],
    line: BitsPerSec,
    end: Instant,
    seed: u64,
) -> Outcome {
    run_observed(queue, sources, line, end, seed, |_, _| {})
}

/// [`run`], calling `observe(queue, now)` after every arrival and every dequeue.
pub(crate) fn run_observed<Q: Queue + ?Sized>(
    queue: &mut Q,
    sources: &[Source],
    line: BitsPerSec,
    end: Instant,
    seed: u64,
    mut observe: impl FnMut(&Q, Instant),
) -> Outcome {
    let mut rng = Rng::seed_from(seed);
    let mut next_arrival: Vec<Instant> = sources.iter().map(|s| s.start).collect();
    let mut outcome = Outcome::default();
    let mut verdicts = Verdicts::default();
    // When the line is next free; `None` while it idles on an empty queue.
    let mut line_free: Option<Instant> = Some(Instant::ZERO);
    let mut id = 0;
    loop {
        let arrival = next_arrival
            .iter()
            .enumerate()
            .filter(|&(i, at)| *at < sources[i].stop && *at < end)
            .min_by_key(|&(_, at)| *at);
        let service = line_free.filter(|at| *at < end);
        match (arrival, service) {
            (None, None) => break,
            (Some((index, &at)), service) if service.is_none_or(|s| at <= s) => {
                let source = &sources[index];
                id += 1;
                let mut packet = Packet::synthetic(at, source.len_bytes, source.flow, source.ecn);
                packet.id = id;
                outcome.offered += 1;
                queue.enqueue(at, packet, &mut verdicts);
                next_arrival[index] = at
                    + match source.spacing {
                        Spacing::Constant(gap) => gap,
                        Spacing::Poisson(mean) => {
                            Duration::from_secs_f64(mean.as_secs_f64() * rng.exponential())
                        }
                    };
                if line_free.is_none() {
                    line_free = Some(at);
                }
                observe(queue, at);
            }
            (_, Some(now)) => {
                match queue.dequeue(now, &mut verdicts) {
                    Some(packet) => {
                        outcome.departures.push(Departure {
                            flow: packet.flow,
                            len_bytes: packet.len_bytes,
                            at: now,
                            sojourn: now.saturating_since(packet.enqueued),
                            ce: packet.ecn == Ecn::Ce,
                        });
                        line_free =
                            Some(now + line.serialization_time(u64::from(packet.len_bytes)));
                    }
                    None => line_free = None,
                }
                observe(queue, now);
            }
            (Some(_), None) => unreachable!("a lone arrival matches the arm above"),
        }
        outcome
            .drops
            .extend(verdicts.dropped.drain(..).map(|d| Drop {
                flow: d.packet.flow,
                at: d.at,
                reason: d.reason,
            }));
        outcome.ce_marked += std::mem::take(&mut verdicts.ce_marked);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{Codel, FqCodel, Limits, Pie, Red};
    use crate::spec::{CodelConfig, FqCodelConfig, PieConfig, RedConfig};
    use crate::units::Probability;

    fn every_aqm(limits: Limits) -> Vec<Box<dyn Queue>> {
        let red = RedConfig {
            min_bytes: 3000,
            max_bytes: 9000,
            max_probability: Probability::new(0.1).expect("a probability"),
            ..RedConfig::default()
        };
        vec![
            Box::new(Codel::new(CodelConfig::default(), limits)),
            Box::new(FqCodel::new(
                FqCodelConfig::default(),
                limits,
                Rng::seed_from(1),
            )),
            Box::new(Pie::new(PieConfig::default(), limits, Rng::seed_from(1))),
            Box::new(Red::new(red, limits, Rng::seed_from(1))),
        ]
    }

    /// Limit 1, byte limits smaller than a packet, mixed sizes, and a huge burst: no
    /// panic, limits hold after every call, every packet is delivered, dropped or held.
    #[test]
    fn aqms_survive_edge_cases() {
        let cases = [
            Limits {
                packets: 1,
                bytes: None,
            },
            Limits {
                packets: 1000,
                bytes: Some(3000),
            },
            Limits {
                packets: 1000,
                bytes: Some(1000), // smaller than the 1500 B packets
            },
            Limits {
                packets: 100_000,
                bytes: None,
            },
        ];
        for limits in cases {
            for mut queue in every_aqm(limits) {
                let mut burst = Source::cbr(1, 1500, BitsPerSec::gbit(10));
                burst.stop = Instant::from_millis(20); // ~16,700 packets at once
                let mut small = Source::poisson(2, 64, BitsPerSec::mbit(2));
                small.ecn = Ecn::Ect0;
                let sources = [burst, small, Source::cbr(3, 9000, BitsPerSec::mbit(5))];
                let end = Instant::from_secs(5);
                let out = run_observed(
                    queue.as_mut(),
                    &sources,
                    BitsPerSec::mbit(10),
                    end,
                    4,
                    |q, _| {
                        assert!(q.len_packets() <= limits.packets as usize, "{q:?}");
                        assert!(limits.bytes.is_none_or(|b| q.len_bytes() <= b));
                    },
                );
                let held = queue.len_packets();
                assert_eq!(
                    out.offered as usize,
                    out.departures.len() + out.drops.len() + held,
                    "{limits:?} {queue:?}"
                );
                let drained = queue.drain();
                assert_eq!(drained.len(), held);
                assert_eq!((queue.len_packets(), queue.len_bytes()), (0, 0));
            }
        }
    }
}

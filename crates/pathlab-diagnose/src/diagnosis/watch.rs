//! Connections watched over time, and the report of a watch.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{interval, verdict, Interval, SocketSample, Verdict};

/// One connection over a watch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionReport {
    /// The first look at it.
    pub first: SocketSample,
    /// The last look at it.
    pub last: SocketSample,
    /// What each interval between two looks showed.
    pub intervals: Vec<Interval>,
    /// What limited it over the whole watch.
    pub verdict: Verdict,
    /// It was gone (closed) before the watch ended.
    pub closed: bool,
}

/// A `pathlab inspect` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InspectReport {
    /// How often it looked, ns.
    pub interval_ns: u64,
    /// How long it watched, ns.
    pub duration_ns: u64,
    /// Every connection it saw, in the order it first saw them.
    pub connections: Vec<ConnectionReport>,
}

/// Connections watched over time: feed it each look at the sockets, get what each interval
/// showed, and the report with verdicts at the end.
#[derive(Debug, Default)]
pub struct Watch {
    connections: Vec<Tracked>,
    by_key: std::collections::HashMap<(u64, SocketAddr, SocketAddr), usize>,
    last_at_ns: u64,
}

#[derive(Debug)]
struct Tracked {
    first: SocketSample,
    last: SocketSample,
    intervals: Vec<Interval>,
    seen_at_ns: u64,
}

impl Watch {
    /// A watch that has seen nothing yet.
    pub fn new() -> Watch {
        Watch::default()
    }

    /// Takes one look at the sockets (all stamped with the same instant) and returns the
    /// interval each connection seen before showed since then, by its index in the report.
    pub fn observe(&mut self, samples: Vec<SocketSample>) -> Vec<(usize, Interval)> {
        let mut new = Vec::new();
        for sample in samples {
            self.last_at_ns = self.last_at_ns.max(sample.at_ns);
            let key = (sample.cookie, sample.local, sample.remote);
            match self.by_key.get(&key) {
                Some(&index) => {
                    let tracked = &mut self.connections[index];
                    if let Some(interval) = interval(&tracked.last, &sample) {
                        tracked.intervals.push(interval.clone());
                        new.push((index, interval));
                    }
                    tracked.seen_at_ns = sample.at_ns;
                    tracked.last = sample;
                }
                None => {
                    self.by_key.insert(key, self.connections.len());
                    self.connections.push(Tracked {
                        first: sample.clone(),
                        seen_at_ns: sample.at_ns,
                        last: sample,
                        intervals: Vec::new(),
                    });
                }
            }
        }
        new
    }

    /// The last look at connection `index` (as [`Watch::observe`] numbers them).
    pub fn last(&self, index: usize) -> &SocketSample {
        &self.connections[index].last
    }

    /// How many connections it has seen.
    pub fn len(&self) -> usize {
        self.connections.len()
    }

    /// Whether it has seen none.
    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// The report: every connection with its intervals and verdict.
    pub fn report(&self, interval_ns: u64) -> InspectReport {
        let start = self
            .connections
            .iter()
            .map(|c| c.first.at_ns)
            .min()
            .unwrap_or(0);
        InspectReport {
            interval_ns,
            duration_ns: self.last_at_ns.saturating_sub(start),
            connections: self
                .connections
                .iter()
                .map(|c| ConnectionReport {
                    first: c.first.clone(),
                    last: c.last.clone(),
                    intervals: c.intervals.clone(),
                    verdict: verdict(&c.first, &c.last, &c.intervals),
                    closed: c.seen_at_ns < self.last_at_ns,
                })
                .collect(),
        }
    }
}

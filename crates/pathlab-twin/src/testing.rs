//! Paths of known parameters for the estimators' tests: packets sent through
//! `pathlab-core`'s own link model in virtual time, as a measurement would send them.

use pathlab_core::packet::Ecn;
use pathlab_core::{Instant, Link, LinkSpec, Packet};

use crate::samples::Sample;

/// Sends `(sent_ns, len_bytes)` packets, in order of time, through a link built from
/// `spec` (seeded by `seed`) and returns what a receiver on the same clock saw.
pub fn through(spec: &LinkSpec, seed: u64, sends: &[(u64, u32)]) -> Vec<Sample> {
    through_flows(spec, seed, &[sends.to_vec()]).remove(0)
}

/// [`through`] for flows sent at once, each in order of time and a flow of its own to a
/// flow-queueing discipline: what the receiver saw of each, in the same order.
pub fn through_flows(spec: &LinkSpec, seed: u64, flows: &[Vec<(u64, u32)>]) -> Vec<Vec<Sample>> {
    let mut link = Link::new(spec, seed).expect("a valid spec");
    let mut samples: Vec<Vec<Sample>> = flows
        .iter()
        .map(|sends| {
            sends
                .iter()
                .enumerate()
                .map(|(seq, &(sent_ns, len_bytes))| Sample {
                    seq: seq as u64,
                    sent_ns,
                    len_bytes,
                    received_ns: None,
                })
                .collect()
        })
        .collect();
    // Every packet in order of sending: (time, flow, its index in the flow); the tag is
    // its place in this list.
    let mut order: Vec<(u64, usize, usize)> = flows
        .iter()
        .enumerate()
        .flat_map(|(flow, sends)| {
            sends
                .iter()
                .enumerate()
                .map(move |(i, &(sent_ns, _))| (sent_ns, flow, i))
        })
        .collect();
    order.sort_unstable();
    let collect = |link: &mut Link, now: Instant, samples: &mut Vec<Vec<Sample>>| {
        while let Some((at, packet)) = link.dequeue_timed(now) {
            let (_, flow, i) = order[packet.tag as usize];
            samples[flow][i].received_ns = Some(at.as_nanos());
        }
    };
    for (tag, &(sent_ns, flow, i)) in order.iter().enumerate() {
        let now = Instant::from_nanos(sent_ns);
        collect(&mut link, now, &mut samples);
        let len_bytes = flows[flow][i].1;
        let mut packet = Packet::synthetic(now, len_bytes, flow as u64 + 1, Ecn::NotEct);
        packet.tag = tag as u32;
        link.enqueue(now, packet);
    }
    collect(&mut link, Instant::MAX, &mut samples);
    samples
}

/// `count` packets of `len_bytes` sent every `interval_ns` from `start_ns`.
pub fn paced(start_ns: u64, count: u64, interval_ns: u64, len_bytes: u32) -> Vec<(u64, u32)> {
    (0..count)
        .map(|i| (start_ns + i * interval_ns, len_bytes))
        .collect()
}

/// `duration_ns` of packets of `len_bytes` at `rate_bps` (bits of those packets).
pub fn at_rate(start_ns: u64, duration_ns: u64, rate_bps: f64, len_bytes: u32) -> Vec<(u64, u32)> {
    let interval_ns = (f64::from(len_bytes) * 8.0 / rate_bps * 1e9).round() as u64;
    paced(start_ns, duration_ns / interval_ns, interval_ns, len_bytes)
}

/// A spec from text.
pub fn spec(text: &str) -> LinkSpec {
    LinkSpec::parse(text).expect("a valid spec")
}

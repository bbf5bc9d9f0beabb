//! Paths of known parameters for the estimators' tests: packets sent through
//! `pathlab-core`'s own link model in virtual time, as a measurement would send them.

use pathlab_core::packet::Ecn;
use pathlab_core::{Instant, Link, LinkSpec, Packet};

use crate::samples::Sample;

/// Sends `(sent_ns, len_bytes)` packets, in order of time, through a link built from
/// `spec` (seeded by `seed`) and returns what a receiver on the same clock saw.
pub fn through(spec: &LinkSpec, seed: u64, sends: &[(u64, u32)]) -> Vec<Sample> {
    let mut link = Link::new(spec, seed).expect("a valid spec");
    let mut samples: Vec<Sample> = sends
        .iter()
        .enumerate()
        .map(|(seq, &(sent_ns, len_bytes))| Sample {
            seq: seq as u64,
            sent_ns,
            len_bytes,
            received_ns: None,
        })
        .collect();
    let collect = |link: &mut Link, now: Instant, samples: &mut Vec<Sample>| {
        while let Some((at, packet)) = link.dequeue_timed(now) {
            let sample = &mut samples[packet.tag as usize];
            sample.received_ns = Some(at.as_nanos());
        }
    };
    for (seq, &(sent_ns, len_bytes)) in sends.iter().enumerate() {
        let now = Instant::from_nanos(sent_ns);
        collect(&mut link, now, &mut samples);
        let mut packet = Packet::synthetic(now, len_bytes, 0, Ecn::NotEct);
        packet.tag = seq as u32;
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

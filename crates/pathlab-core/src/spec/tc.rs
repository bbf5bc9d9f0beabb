//! The `tc` commands that do what a spec does, on a kernel that has netem and the AQM
//! qdiscs, for users who want to reproduce a pathlab link on a Linux router.
//!
//! One direction is the egress of one device. The netem part of a spec (delay, jitter,
//! loss, duplicate, corrupt, reorder, slot, a fixed rate, a packet limit) is one `netem`
//! qdisc, as the syntax is netem's. A queue discipline other than tail drop, or a byte
//! limit, needs a real queue in front of a rate: netem becomes the root with an htb child
//! holding the rate and the AQM as htb's leaf (netem is classful with one child; putting
//! netem under an AQM is not possible). That order delays packets before the bottleneck
//! instead of after it, which changes nothing for a constant delay. What tc cannot express
//! (traces, schedules, packet rates, some parameters) is listed in `caveats`.
//!
//! The alternative of netem on the other side of an `ifb` device (`ingress` + `mirred`)
//! was not taken: it moves the delay and loss onto the device's ingress, i.e. onto the
//! other direction, so one direction would no longer be one device's egress. An empty spec
//! gives a netem that does nothing (`tc qdisc replace dev DEV root netem`) rather than
//! `tc qdisc del`, so the commands are the same shape for every spec and replace whatever
//! was there.

use std::fmt::Write as _;

use super::parse::red_weight;
use super::{Discipline, FixedRate, LinkSpec, QueueSpec, RateSpec, RedConfig, TokenBucket};
use crate::format::{self, Digits};
use crate::time::Duration;
use crate::units::FRAME_BYTES;

/// Bytes of payload in an ATM cell (netem's CELLSIZE for ATM).
const ATM_CELL_PAYLOAD: u32 = 48;
/// Bytes of header in an ATM cell (netem's CELLOVERHEAD for ATM): 53-byte cells.
const ATM_CELL_HEADER: i32 = 5;

/// Commands for one device, and what they do not reproduce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcCommands {
    /// Shell commands, in order.
    pub commands: Vec<String>,
    /// Differences between the commands and pathlab's link, one sentence each.
    pub caveats: Vec<String>,
}

/// The tc commands that make the egress of `dev` behave like `spec`.
pub fn to_tc_commands(spec: &LinkSpec, dev: &str) -> TcCommands {
    let mut out = TcCommands::default();
    if let Some(mtu) = spec.mtu {
        out.commands
            .push(format!("ip link set dev {dev} mtu {mtu}"));
        out.caveats.push(format!(
            "the kernel enforces mtu {mtu} on {dev}'s own packets with an ICMP error or fragments, where pathlab drops longer packets silently (a black hole that only packetization-layer MTU discovery finds)"
        ));
    }
    let fixed_rate = match &spec.rate {
        Some(RateSpec::Fixed(fixed)) => Some(*fixed),
        Some(RateSpec::Schedule(schedule)) => {
            out.caveats.push(format!(
                "tc has no rate schedule; the commands use the first rate ({}); change it every {} with `tc qdisc change` (or `tc class change` for htb)",
                schedule.rates[0], schedule.step
            ));
            Some(FixedRate {
                rate: schedule.rates[0],
                packet_overhead: 0,
                cell_size: 0,
                cell_overhead: 0,
            })
        }
        Some(RateSpec::Trace(trace)) => {
            out.caveats.push(format!(
                "tc cannot replay a mahimahi trace ({}); the commands leave the rate out",
                trace.path
            ));
            None
        }
        None => None,
    };
    left_out(spec, fixed_rate, &mut out);
    if let (Some(bucket), Some(fixed)) = (spec.bucket, fixed_rate) {
        with_tbf(spec, dev, fixed, bucket, &mut out);
        return out;
    }
    let needs_real_queue =
        !matches!(spec.queue.discipline, Discipline::TailDrop) || spec.queue.limit_bytes.is_some();
    if needs_real_queue && fixed_rate.is_none() {
        out.caveats.push(
            if spec.packet_rate.is_some() {
                "the queue discipline and byte limit only act in front of a rate; tc has no packet rate to put them in front of, so they are left out"
            } else {
                "the queue discipline and byte limit only act in front of a rate; without one pathlab never queues, so they are left out"
            }
            .into(),
        );
    }
    if needs_real_queue {
        if let Some(rate) = fixed_rate {
            with_aqm(spec, dev, rate, &mut out);
            return out;
        }
    }
    netem_caveats(spec, &mut out);
    let mut netem = netem_part(spec);
    netem.rate = fixed_rate.map(RateSpec::Fixed);
    let delay = spec.delay.map(|d| d.delay);
    match (delay, fixed_rate) {
        (Some(delay), Some(fixed)) if !delay.is_zero() => {
            netem.queue.limit_packets = Some(limit_with_delay_line(
                spec.queue.effective_limit_packets(),
                fixed,
                delay,
                &mut out,
            ));
        }
        (Some(delay), None) if !delay.is_zero() => {
            let limit = spec.queue.effective_limit_packets();
            let rate_bps = f64::from(limit) * FRAME_BYTES * 8.0 / delay.as_secs_f64();
            let mbit = format::in_mbit_per_sec(rate_bps, Digits::fixed(0));
            out.caveats.push(format!(
                "netem's limit ({limit}) counts the packets in its delay line: above {mbit} Mbit/s of full-size frames ({limit} x 1514 B per {delay}) it drops, where pathlab does not"
            ));
        }
        _ => {}
    }
    out.commands.push(
        format!("tc qdisc replace dev {dev} root netem {netem}")
            .trim_end()
            .to_owned(),
    );
    out
}

/// What tc has no word for, said as caveats: a packet-rate limit, a ring below the qdisc.
fn left_out(spec: &LinkSpec, fixed_rate: Option<FixedRate>, out: &mut TcCommands) {
    if let Some(packet_rate) = spec.packet_rate {
        let faster = match fixed_rate {
            Some(fixed) => format!(
                "packets that take under {} at {} ({} bytes as the rate counts them) pass faster than pathlab lets them",
                packet_rate.interval(),
                fixed.rate,
                fixed.rate.as_f64() / (8.0 * f64::from(packet_rate.get())),
            ),
            None => "packets pass without pathlab's queue in front of it".to_owned(),
        };
        out.caveats.push(format!(
            "netem has no packet-rate limit (nor has htb or tbf: they count bytes): 'pps {packet_rate}' is left out, so {faster}"
        ));
    }
    if let Some(restart) = spec.restart {
        out.caveats.push(format!(
            "tc has no slow restart after an idle spell: 'restart' is left out, so a transfer after {} idle gets the whole rate at once where pathlab starts it at {} and climbs over {}",
            restart.idle,
            format::percent_as_is(restart.from * 100.0, Digits::up_to(6)),
            restart.ramp
        ));
    }
    if let Some(ring) = spec.queue.ring {
        out.caveats.push(format!(
            "tc sets no ring below a qdisc (a driver's, or BQL's limit on it): 'ring {ring}' is left out, so a packet beside a busy flow waits up to {ring} less than under pathlab"
        ));
    }
}

/// Packets of `FRAME_BYTES` that `rate` sends in `delay`, rounded up: what a delay line
/// behind (or in front of) that rate holds when the rate is saturated.
fn packets_in_delay_line(rate: FixedRate, delay: Duration) -> u32 {
    (rate.rate.as_f64() * delay.as_secs_f64() / (FRAME_BYTES * 8.0)).ceil() as u32
}

/// netem's `limit` for a queue of `queue_packets` behind `rate` with `delay`: netem counts
/// every packet it holds, the delay line included, so the packets in flight are added.
fn limit_with_delay_line(
    queue_packets: u32,
    rate: FixedRate,
    delay: Duration,
    out: &mut TcCommands,
) -> u32 {
    let in_flight = packets_in_delay_line(rate, delay);
    let limit = queue_packets.saturating_add(in_flight);
    out.caveats.push(format!(
        "netem's limit counts the packets in its delay line too: {limit} = pathlab's queue of {queue_packets} + {in_flight} full-size packets in flight at {} over {delay}",
        rate.rate
    ));
    limit
}

/// netem's `seed` is not pathlab's generator: say what it does and does not reproduce.
fn netem_caveats(spec: &LinkSpec, out: &mut TcCommands) {
    if let Some(quantiles) = &spec.delay_quantiles {
        out.caveats.push(format!(
            "netem cannot replay a measured delay distribution ('quantiles'): its mean, {}, is added to the delay, without the variation",
            quantiles.mean()
        ));
    }
    if let Some(seed) = spec.seed {
        out.caveats.push(format!(
            "netem's seed {seed} (Linux and iproute2 6.7 or newer) makes its loss and corruption repeatable, with netem's own generator: the pattern is not pathlab's, and delay jitter stays unseeded"
        ));
    }
}

/// The parts of `spec` netem expresses itself (no rate, no queue discipline).
fn netem_part(spec: &LinkSpec) -> LinkSpec {
    let delay = match (spec.delay, &spec.delay_quantiles) {
        (Some(mut delay), Some(quantiles)) => {
            delay.delay += quantiles.mean();
            Some(delay)
        }
        (delay, _) => delay,
    };
    LinkSpec {
        delay,
        delay_quantiles: None,
        rate: None,
        packet_rate: None,
        bucket: None,
        restart: None,
        // `ip link set ... mtu` (netem has no such option).
        mtu: None,
        queue: QueueSpec {
            limit_packets: spec.queue.limit_packets,
            ..QueueSpec::default()
        },
        ..spec.clone()
    }
}

/// netem as the root, if the spec has netem parts, holding only the delay line (the
/// queue's limit belongs to the qdisc under it, but netem's default of 1000 would drop
/// once rate x delay exceeds it); the commands that put `child` (`htb default 1`) under it,
/// or at the root; returns the child's handle.
fn netem_over(
    spec: &LinkSpec,
    dev: &str,
    rate: FixedRate,
    child: &str,
    out: &mut TcCommands,
) -> &'static str {
    netem_caveats(spec, out);
    let mut netem = netem_part(spec);
    netem.queue.limit_packets = match spec.delay.map(|d| d.delay) {
        Some(delay) if !delay.is_zero() => Some(limit_with_delay_line(
            spec.queue.effective_limit_packets(),
            rate,
            delay,
            out,
        )),
        _ => None,
    };
    if netem.is_passthrough() {
        out.commands
            .push(format!("tc qdisc replace dev {dev} root handle 1: {child}"));
        "1:"
    } else {
        out.commands.push(format!(
            "tc qdisc replace dev {dev} root handle 1: netem {netem}"
        ));
        out.commands.push(format!(
            "tc qdisc add dev {dev} parent 1: handle 2: {child}"
        ));
        "2:"
    }
}

/// htb's and tbf's words for netem's per-packet accounting: `overhead N`, and
/// `linklayer atm` for ATM's cells (a caveat for other cells).
fn accounting_words(rate: FixedRate, qdisc: &str, out: &mut TcCommands) -> String {
    let mut words = String::new();
    if rate.packet_overhead != 0 {
        let _ = write!(words, " overhead {}", rate.packet_overhead);
    }
    // netem's cells carry CELLSIZE bytes and cost CELLSIZE + CELLOVERHEAD on the line, so
    // ATM (48 bytes of payload in a 53-byte cell) is `48 5`: exactly `linklayer atm`.
    if (rate.cell_size, rate.cell_overhead) == (ATM_CELL_PAYLOAD, ATM_CELL_HEADER) {
        words.push_str(" linklayer atm");
    } else if rate.cell_size != 0 {
        out.caveats.push(format!(
            "{qdisc} knows only ATM's cells (48 bytes of payload in 53, netem's `48 5`); cells of {} + {} bytes are left out",
            rate.cell_size, rate.cell_overhead
        ));
    }
    words
}

/// netem (if the spec has netem parts) with tbf as its child, holding the token bucket
/// and, for tail drop, the queue (tbf's limit is in bytes); another queue discipline or a
/// byte limit goes under tbf as its leaf.
fn with_tbf(
    spec: &LinkSpec,
    dev: &str,
    rate: FixedRate,
    bucket: TokenBucket,
    out: &mut TcCommands,
) {
    let limit_bytes = spec
        .queue
        .limit_bytes
        .unwrap_or(u64::from(spec.queue.effective_limit_packets()) * FRAME_BYTES as u64);
    let mut tbf = format!("tbf rate {} burst {}", rate.rate, bucket.burst_bytes);
    if let Some(peak) = bucket.peak {
        let frame = spec.mtu.map_or(FRAME_BYTES as u32, |mtu| mtu + 14);
        let _ = write!(tbf, " peakrate {peak} mtu {frame}");
    }
    let _ = write!(tbf, " limit {limit_bytes}");
    tbf.push_str(&accounting_words(rate, "tbf", out));
    let parent = netem_over(spec, dev, rate, &tbf, out);
    if spec.queue.limit_bytes.is_none() && spec.queue.limit_packets.is_some() {
        out.caveats.push(format!(
            "tbf's limit counts bytes: {limit_bytes} is pathlab's {} packets of 1514 bytes",
            spec.queue.effective_limit_packets()
        ));
    }
    if !matches!(spec.queue.discipline, Discipline::TailDrop) {
        let leaf = leaf(spec, rate, out);
        out.commands.push(format!(
            "tc qdisc add dev {dev} parent {parent}1 handle 10: {leaf}"
        ));
    }
}

/// netem (if the spec has netem parts) with htb as its child, the AQM as htb's leaf.
fn with_aqm(spec: &LinkSpec, dev: &str, rate: FixedRate, out: &mut TcCommands) {
    let htb_parent = netem_over(spec, dev, rate, "htb default 1", out);
    let class = format!("{htb_parent}1");
    let mut htb = format!(
        "tc class add dev {dev} parent {htb_parent} classid {class} htb rate {} ceil {}",
        rate.rate, rate.rate
    );
    htb.push_str(&accounting_words(rate, "htb", out));
    out.commands.push(htb);
    out.caveats.push(
        "htb is a token bucket: it can pass a burst of a few packets at line rate, where pathlab serializes every packet at the rate".into(),
    );
    let leaf = leaf(spec, rate, out);
    out.commands.push(format!(
        "tc qdisc add dev {dev} parent {class} handle 10: {leaf}"
    ));
}

/// The qdisc that holds the spec's queue under a rate: its discipline with its limit.
fn leaf(spec: &LinkSpec, rate: FixedRate, out: &mut TcCommands) -> String {
    let limit = spec.queue.effective_limit_packets();
    match &spec.queue.discipline {
        Discipline::TailDrop => match spec.queue.limit_bytes {
            Some(bytes) => {
                if spec.queue.limit_packets.is_some() {
                    out.caveats
                        .push("bfifo limits bytes only; the packet limit is left out".into());
                }
                format!("bfifo limit {bytes}")
            }
            None => format!("pfifo limit {limit}"),
        },
        Discipline::HeadDrop => format!("pfifo_head_drop limit {limit}"),
        Discipline::Codel(codel) => {
            let mut words = format!(
                "codel limit {limit} target {} interval {}",
                codel.target, codel.interval
            );
            if let Some(threshold) = codel.ce_threshold {
                let _ = write!(words, " ce_threshold {threshold}");
            }
            words.push_str(if codel.ecn { " ecn" } else { " noecn" });
            words
        }
        Discipline::FqCodel(fq) => {
            let mut words = format!(
                "fq_codel limit {limit} flows {} quantum {} target {} interval {} drop_batch {}",
                fq.flows, fq.quantum, fq.codel.target, fq.codel.interval, fq.drop_batch
            );
            if let Some(threshold) = fq.codel.ce_threshold {
                let _ = write!(words, " ce_threshold {threshold}");
            }
            words.push_str(if fq.codel.ecn { " ecn" } else { " noecn" });
            words
        }
        Discipline::Pie(pie) => {
            // tc-pie takes alpha and beta in units of 1/16 (2 and 20 are RFC 8033's 0.125
            // and 1.25).
            let mut words = format!(
                "pie limit {limit} target {} tupdate {} alpha {} beta {}",
                pie.target,
                pie.tupdate,
                (pie.alpha * 16.0).round(),
                (pie.beta * 16.0).round()
            );
            for (flag, name) in [
                (pie.ecn, "ecn"),
                (pie.bytemode, "bytemode"),
                (pie.dq_rate_estimator, "dq_rate_estimator"),
            ] {
                if flag {
                    words.push(' ');
                    words.push_str(name);
                }
            }
            if pie.max_burst != super::PieConfig::default().max_burst {
                out.caveats.push(format!(
                    "tc-pie has no max_burst; Linux uses 150 ms, not {}",
                    pie.max_burst
                ));
            }
            words
        }
        Discipline::Red(red) => red_leaf(red, &spec.queue, rate, out),
    }
}

fn red_leaf(red: &RedConfig, queue: &QueueSpec, rate: FixedRate, out: &mut TcCommands) -> String {
    let limit_bytes = queue
        .limit_bytes
        .unwrap_or(u64::from(queue.effective_limit_packets()) * FRAME_BYTES as u64);
    let min_packets = red.min_bytes as f64 / f64::from(red.avpkt_bytes.max(1));
    // tc derives the weight from `burst`; find a burst that gives ours.
    let burst = (1..=100_000u32).find(|&b| red_weight(f64::from(b), min_packets) == red.weight);
    let mut words = format!(
        "red limit {limit_bytes} min {} max {} avpkt {} probability {}",
        red.min_bytes,
        red.max_bytes,
        red.avpkt_bytes,
        red.max_probability.get()
    );
    match burst {
        Some(burst) => {
            let _ = write!(words, " burst {burst}");
        }
        None => out.caveats.push(format!(
            "no tc-red burst gives the weight {}; tc will pick its own",
            red.weight
        )),
    }
    let _ = write!(words, " bandwidth {}", rate.rate);
    for (flag, name) in [(red.ecn, "ecn"), (red.harddrop, "harddrop")] {
        if flag {
            words.push(' ');
            words.push_str(name);
        }
    }
    if red.gentle {
        out.caveats.push("tc-red has no gentle mode (Linux RED drops or marks every packet above max); pathlab's gentle ramp from max to 2 x max is left out".into());
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tc(spec: &str) -> TcCommands {
        to_tc_commands(&LinkSpec::parse(spec).expect("valid spec"), "eth1")
    }

    #[test]
    fn pure_netem_is_one_line() {
        let out =
            tc("delay 20ms 5ms 25% distribution normal loss 1% duplicate 0.5% reorder 10% gap 5");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem delay 20ms 5ms 25% distribution normal loss 1% duplicate 0.5% reorder 10% gap 5"]
        );
        assert_eq!(out.caveats.len(), 1, "{:?}", out.caveats);
        assert!(out.caveats[0].contains("delay line"));
    }

    #[test]
    fn a_slow_restart_is_left_out_with_a_caveat() {
        let out = tc("rate 20mbit restart 40% 1500ms");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem rate 20mbit"]
        );
        assert!(
            out.caveats
                .iter()
                .any(|c| c.contains("'restart' is left out")
                    && c.contains("at 40% and climbs over 1500ms")),
            "{:?}",
            out.caveats
        );
    }

    #[test]
    fn measured_quantiles_become_their_mean_with_a_caveat() {
        let out = tc("delay 20ms quantiles 0 1ms 3ms loss 1%");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem delay 21250us loss 1%"]
        );
        assert!(
            out.caveats.iter().any(|c| c.contains("'quantiles'")),
            "{:?}",
            out.caveats
        );
    }

    #[test]
    fn delay_with_rate_grows_netems_limit_by_the_packets_in_flight() {
        // 10 Mbit/s x 100 ms = 1 Mbit = 82.6 frames of 1514 bytes -> 83.
        let out = tc("delay 100ms rate 10mbit limit 100");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem delay 100ms rate 10mbit limit 183"]
        );
        assert!(
            out.caveats[0].contains("183 = pathlab's queue of 100 + 83"),
            "{:?}",
            out.caveats
        );
    }

    #[test]
    fn a_bucket_is_tbf_under_netem_with_its_limit_in_bytes_and_any_aqm_under_it() {
        let out = tc("rate 20mbit burst 20kb limit 40");
        assert_eq!(
            out.commands,
            vec![
                "tc qdisc replace dev eth1 root handle 1: tbf rate 20mbit burst 20480 limit 60560"
            ]
        );
        assert!(
            out.caveats[0].contains("60560 is pathlab's 40 packets"),
            "{:?}",
            out.caveats
        );
        // 20 Mbit/s x 15 ms = 24.8 frames -> 25 in netem's delay line, beside fq_codel's
        // 10240.
        let out =
            tc("delay 15ms rate 20mbit 14 burst 64kb peakrate 100mbit limit 100b queue fq_codel");
        assert_eq!(
            out.commands,
            vec![
                "tc qdisc replace dev eth1 root handle 1: netem delay 15ms limit 10265",
                "tc qdisc add dev eth1 parent 1: handle 2: tbf rate 20mbit burst 65536 peakrate 100mbit mtu 1514 limit 100 overhead 14",
                "tc qdisc add dev eth1 parent 2:1 handle 10: fq_codel limit 10240 flows 1024 quantum 1514 target 5ms interval 100ms drop_batch 64 ecn",
            ]
        );
        // The mtu is the device's, not netem's (tc refuses `netem mtu`).
        let out = tc("rate 1mbit 0 48 5 burst 3000 peakrate 2mbit mtu 1400");
        assert!(
            !out.commands.iter().any(|c| c.contains("netem")),
            "{:?}",
            out.commands
        );
        assert!(
            out.commands[1].ends_with(
                "tbf rate 1mbit burst 3000 peakrate 2mbit mtu 1414 limit 1514000 linklayer atm"
            ),
            "{:?}",
            out.commands
        );
    }

    #[test]
    fn empty_spec_is_a_netem_that_does_nothing() {
        let out = tc("");
        assert_eq!(out.commands, vec!["tc qdisc replace dev eth1 root netem"]);
        assert!(out.caveats.is_empty());
    }

    #[test]
    fn codel_goes_under_htb_under_netem() {
        let out = tc("delay 20ms loss 1% rate 10mbit limit 100 queue codel target 10ms");
        assert_eq!(
            out.commands,
            vec![
                // 10 Mbit/s x 20 ms / (1514 x 8 bit) = 16.5 -> 17 in flight, + 100 queued.
                "tc qdisc replace dev eth1 root handle 1: netem delay 20ms loss 1% limit 117",
                "tc qdisc add dev eth1 parent 1: handle 2: htb default 1",
                "tc class add dev eth1 parent 2: classid 2:1 htb rate 10mbit ceil 10mbit",
                "tc qdisc add dev eth1 parent 2:1 handle 10: codel limit 100 target 10ms interval 100ms noecn",
            ]
        );
        assert!(out.caveats.iter().any(|c| c.contains("token bucket")));
    }

    #[test]
    fn aqm_without_netem_parts_puts_htb_at_the_root() {
        let out = tc("rate 50mbit queue fq_codel");
        assert_eq!(
            out.commands,
            vec![
                "tc qdisc replace dev eth1 root handle 1: htb default 1",
                "tc class add dev eth1 parent 1: classid 1:1 htb rate 50mbit ceil 50mbit",
                "tc qdisc add dev eth1 parent 1:1 handle 10: fq_codel limit 10240 flows 1024 quantum 1514 target 5ms interval 100ms drop_batch 64 ecn",
            ]
        );
    }

    #[test]
    fn pie_scales_alpha_and_beta_as_tc_does() {
        let out = tc("rate 10mbit queue pie ecn");
        assert!(
            out.commands[2]
                .ends_with("pie limit 1000 target 15ms tupdate 15ms alpha 2 beta 20 ecn"),
            "{:?}",
            out.commands
        );
    }

    #[test]
    fn headdrop_and_byte_limits_use_the_fifo_qdiscs() {
        assert!(tc("rate 1mbit limit 20 queue headdrop").commands[2]
            .ends_with("pfifo_head_drop limit 20"));
        let bytes = tc("rate 1mbit limit 30000b");
        assert!(
            bytes.commands[2].ends_with("bfifo limit 30000"),
            "{:?}",
            bytes.commands
        );
    }

    #[test]
    fn red_gets_a_burst_that_reproduces_its_weight() {
        let spec = LinkSpec::parse(
            "rate 10mbit queue red min 30000 max 90000 avpkt 1000 burst 55 probability 2%",
        )
        .unwrap();
        let out = to_tc_commands(&spec, "eth1");
        let leaf = &out.commands[2];
        assert!(
            leaf.contains("red limit 1514000 min 30000 max 90000 avpkt 1000 probability 0.02"),
            "{leaf}"
        );
        let burst: f64 = leaf
            .split(" burst ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let Discipline::Red(red) = spec.queue.discipline else {
            unreachable!()
        };
        assert_eq!(
            red_weight(burst, 30.0),
            red.weight,
            "the printed burst gives the same weight"
        );
    }

    #[test]
    fn what_tc_cannot_do_is_said() {
        let schedule = tc("schedule 1s 10mbit 1mbit");
        assert_eq!(
            schedule.commands,
            vec!["tc qdisc replace dev eth1 root netem rate 10mbit"]
        );
        assert!(schedule.caveats[0].contains("no rate schedule"));
        let no_rate = tc("queue codel");
        assert!(no_rate
            .caveats
            .iter()
            .any(|c| c.contains("only act in front of a rate")));
    }

    const HTB_BURST: &str = "htb is a token bucket: it can pass a burst of a few packets at line rate, where pathlab serializes every packet at the rate";

    #[test]
    fn loss_models_and_ecn_are_netems_own_words() {
        assert_eq!(
            tc("delay 10ms loss state 1% 10% 5% 20% 0.1% ecn").commands,
            vec![
                "tc qdisc replace dev eth1 root netem delay 10ms loss state 1% 10% 5% 20% 0.1% ecn"
            ]
        );
        // tc-netem(8): loss gemodel p [r [1-h [1-k]]].
        let gemodel = tc("loss gemodel 1% 10% 70% 0.1%");
        assert_eq!(
            gemodel.commands,
            vec!["tc qdisc replace dev eth1 root netem loss gemodel 1% 10% 70% 0.1%"]
        );
        assert!(gemodel.caveats.is_empty(), "{:?}", gemodel.caveats);
    }

    #[test]
    fn duplicate_and_corrupt_keep_their_correlation() {
        let out = tc("corrupt 0.1% 25% duplicate 1% 10%");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem duplicate 1% 10% corrupt 0.1% 25%"]
        );
        assert!(out.caveats.is_empty());
    }

    #[test]
    fn rate_overhead_and_cells_follow_netems_positional_syntax() {
        // tc-netem(8): rate RATE [PACKETOVERHEAD [CELLSIZE [CELLOVERHEAD]]].
        assert_eq!(
            tc("rate 10mbit 20 53 5").commands,
            vec!["tc qdisc replace dev eth1 root netem rate 10mbit 20 53 5"]
        );
    }

    #[test]
    fn a_ring_is_left_out_and_said_so() {
        let out = tc("rate 10mbit queue fq_codel ring 5ms");
        assert!(out.commands.iter().all(|c| !c.contains("ring")));
        assert_eq!(
            out.caveats[0],
            "tc sets no ring below a qdisc (a driver's, or BQL's limit on it): 'ring 5ms' is left out, so a packet beside a busy flow waits up to 5ms less than under pathlab"
        );
        assert!(tc("rate 10mbit queue fq_codel")
            .caveats
            .iter()
            .all(|c| !c.contains("ring")));
    }

    #[test]
    fn a_packet_rate_is_left_out_and_said_so() {
        let out = tc("rate 10mbit pps 5000");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem rate 10mbit"]
        );
        // 10e6 / (8 x 5000) = 250 bytes: below it the packet rate binds in pathlab.
        assert_eq!(
            out.caveats,
            vec!["netem has no packet-rate limit (nor has htb or tbf: they count bytes): 'pps 5000' is left out, so packets that take under 200us at 10mbit (250 bytes as the rate counts them) pass faster than pathlab lets them"]
        );
        let alone = tc("pps 6500 delay 10ms");
        assert_eq!(
            alone.commands,
            vec!["tc qdisc replace dev eth1 root netem delay 10ms"]
        );
        assert!(alone.caveats[0].contains("'pps 6500' is left out"));
        let with_aqm = tc("rate 10mbit pps 5000 queue codel");
        assert!(with_aqm.caveats[0].contains("'pps 5000' is left out"));
        assert!(with_aqm.commands.iter().all(|c| !c.contains("pps")));
    }

    #[test]
    fn slots_both_forms() {
        assert_eq!(
            tc("slot 800us 1ms packets 32 bytes 64000b").commands,
            vec!["tc qdisc replace dev eth1 root netem slot 800us 1ms packets 32 bytes 64000b"]
        );
        assert_eq!(
            tc("slot distribution pareto 1ms 500us").commands,
            vec!["tc qdisc replace dev eth1 root netem slot distribution pareto 1ms 500us"]
        );
    }

    #[test]
    fn seed_is_passed_on_with_what_it_does_not_reproduce() {
        let out = tc("loss 1% seed 42");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem loss 1% seed 42"]
        );
        assert_eq!(out.caveats.len(), 1);
        assert!(out.caveats[0].contains("seed 42 (Linux and iproute2 6.7 or newer)"));
        assert!(out.caveats[0].contains("not pathlab's"));
    }

    #[test]
    fn a_trace_is_left_out_and_named() {
        let out = tc("trace /tmp/up.trace delay 5ms");
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem delay 5ms"]
        );
        assert_eq!(
            out.caveats[0],
            "tc cannot replay a mahimahi trace (/tmp/up.trace); the commands leave the rate out"
        );
        // 1000 x 1514 B x 8 / 5 ms = 2422.4 Mbit/s.
        assert!(
            out.caveats[1].contains("above 2422 Mbit/s"),
            "{:?}",
            out.caveats
        );
    }

    #[test]
    fn aqm_behind_a_long_delay_line_grows_netems_limit() {
        // Regression: netem in front of htb kept its default limit of 1000 and dropped
        // once rate x delay exceeded it. 1 Gbit/s x 100 ms / (1514 x 8 bit) = 8256.3 -> 8257.
        let out = tc("delay 100ms rate 1gbit queue codel");
        assert_eq!(
            out.commands,
            vec![
                "tc qdisc replace dev eth1 root handle 1: netem delay 100ms limit 9257",
                "tc qdisc add dev eth1 parent 1: handle 2: htb default 1",
                "tc class add dev eth1 parent 2: classid 2:1 htb rate 1gbit ceil 1gbit",
                "tc qdisc add dev eth1 parent 2:1 handle 10: codel limit 1000 target 5ms interval 100ms noecn",
            ]
        );
        assert_eq!(
            out.caveats,
            vec![
                "netem's limit counts the packets in its delay line too: 9257 = pathlab's queue of 1000 + 8257 full-size packets in flight at 1gbit over 100ms".to_owned(),
                HTB_BURST.to_owned(),
            ]
        );
    }

    #[test]
    fn byte_limit_with_a_packet_limit_says_which_one_is_kept() {
        let out = tc("rate 10mbit limit 40 limit 60000b");
        assert_eq!(
            out.commands,
            vec![
                "tc qdisc replace dev eth1 root handle 1: htb default 1",
                "tc class add dev eth1 parent 1: classid 1:1 htb rate 10mbit ceil 10mbit",
                "tc qdisc add dev eth1 parent 1:1 handle 10: bfifo limit 60000",
            ]
        );
        assert_eq!(
            out.caveats[1],
            "bfifo limits bytes only; the packet limit is left out"
        );
    }

    #[test]
    fn htb_takes_atm_cells_only() {
        // netem's `48 5` (tc-netem(8): "ATM for example has an payload cellsize of 48
        // bytes and 5 byte per cell header") is htb's `linklayer atm`: ceil(len / 48)
        // cells of 53 bytes, nothing left out.
        let atm = tc("rate 10mbit 20 48 5 queue codel");
        assert_eq!(
            atm.commands[1],
            "tc class add dev eth1 parent 1: classid 1:1 htb rate 10mbit ceil 10mbit overhead 20 linklayer atm"
        );
        assert!(atm.caveats[0].starts_with("htb is a token bucket"));
        // 53-byte cells costing 58 are not ATM's.
        let other = tc("rate 10mbit 20 53 5 queue codel");
        assert_eq!(
            other.commands[1],
            "tc class add dev eth1 parent 1: classid 1:1 htb rate 10mbit ceil 10mbit overhead 20"
        );
        assert_eq!(
            other.caveats[0],
            "htb knows only ATM's cells (48 bytes of payload in 53, netem's `48 5`); cells of 53 + 5 bytes are left out"
        );
    }

    #[test]
    fn red_gentle_is_a_caveat() {
        let out = tc("rate 10mbit queue red min 30000 max 90000 gentle");
        assert!(out.commands[2].contains(" red limit 1514000 min 30000 max 90000 "));
        assert!(!out.commands[2].contains("gentle"));
        assert!(out.caveats[1].starts_with("tc-red has no gentle mode"));
    }

    #[test]
    fn schedule_under_an_aqm_uses_the_first_rate() {
        let out = tc("schedule 500ms 20mbit 5mbit loop queue pie");
        assert_eq!(
            out.commands,
            vec![
                "tc qdisc replace dev eth1 root handle 1: htb default 1",
                "tc class add dev eth1 parent 1: classid 1:1 htb rate 20mbit ceil 20mbit",
                "tc qdisc add dev eth1 parent 1:1 handle 10: pie limit 1000 target 15ms tupdate 15ms alpha 2 beta 20",
            ]
        );
        assert!(out.caveats[0]
            .starts_with("tc has no rate schedule; the commands use the first rate (20mbit)"));
    }

    const EVERYTHING: &str = "delay 30ms 3ms 20% distribution pareto loss 0.5% 25% ecn duplicate 0.2% corrupt 0.01% reorder 5% 50% gap 3 rate 20mbit 14 slot 1ms 2ms packets 8 limit 50 seed 7";
    // 20 Mbit/s x 30 ms / (1514 x 8 bit) = 49.5 -> 50 packets in flight, + the queue of 50.
    const EVERYTHING_LIMIT: &str = "netem's limit counts the packets in its delay line too: 100 = pathlab's queue of 50 + 50 full-size packets in flight at 20mbit over 30ms";
    const EVERYTHING_SEED: &str = "netem's seed 7 (Linux and iproute2 6.7 or newer) makes its loss and corruption repeatable, with netem's own generator: the pattern is not pathlab's, and delay jitter stays unseeded";

    #[test]
    fn everything_netem_has_in_one_line() {
        let out = tc(EVERYTHING);
        assert_eq!(
            out.commands,
            vec!["tc qdisc replace dev eth1 root netem delay 30ms 3ms 20% distribution pareto loss 0.5% 25% ecn duplicate 0.2% corrupt 0.01% reorder 5% 50% gap 3 rate 20mbit 14 slot 1ms 2ms packets 8 limit 100 seed 7"]
        );
        assert_eq!(out.caveats, vec![EVERYTHING_SEED, EVERYTHING_LIMIT]);
    }

    #[test]
    fn everything_with_an_aqm() {
        let out = tc(&format!("{EVERYTHING} queue fq_codel target 2ms"));
        assert_eq!(
            out.commands,
            vec![
                "tc qdisc replace dev eth1 root handle 1: netem delay 30ms 3ms 20% distribution pareto loss 0.5% 25% ecn duplicate 0.2% corrupt 0.01% reorder 5% 50% gap 3 slot 1ms 2ms packets 8 limit 100 seed 7",
                "tc qdisc add dev eth1 parent 1: handle 2: htb default 1",
                "tc class add dev eth1 parent 2: classid 2:1 htb rate 20mbit ceil 20mbit overhead 14",
                "tc qdisc add dev eth1 parent 2:1 handle 10: fq_codel limit 50 flows 1024 quantum 1514 target 2ms interval 100ms drop_batch 64 ecn",
            ]
        );
        assert_eq!(
            out.caveats,
            vec![EVERYTHING_SEED, EVERYTHING_LIMIT, HTB_BURST]
        );
    }
}

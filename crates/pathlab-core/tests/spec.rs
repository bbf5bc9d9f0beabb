//! The link-spec parser: what users paste parses, prints back canonically, and bad input
//! is rejected with a message that names the token.

use pathlab_core::spec::{Discipline, Distribution, LossSpec, RateSpec, SlotInterval};
use pathlab_core::{BitsPerSec, Duration, LinkSpec, PacketsPerSec};
use proptest::prelude::*;

fn parse(text: &str) -> LinkSpec {
    LinkSpec::parse(text).unwrap_or_else(|e| panic!("'{text}' should parse: {e}"))
}

fn percent(p: pathlab_core::Probability) -> f64 {
    (p.percent() * 1e6).round() / 1e6
}

#[test]
fn the_netem_example_parses_field_by_field() {
    let spec = parse(
        "delay 25ms 5ms 25% distribution normal loss 0.5% 25% duplicate 1% corrupt 0.1% \
         reorder 25% 50% gap 5 rate 10mbit 20 1500 limit 100",
    );
    let delay = spec.delay.expect("delay");
    assert_eq!(delay.delay, Duration::from_millis(25));
    assert_eq!(delay.jitter, Duration::from_millis(5));
    assert_eq!(percent(delay.correlation), 25.0);
    assert_eq!(delay.distribution, Distribution::Normal);
    let Some(LossSpec::Random(loss)) = spec.loss else {
        panic!("random loss")
    };
    assert_eq!(
        (percent(loss.probability), percent(loss.correlation)),
        (0.5, 25.0)
    );
    assert_eq!(percent(spec.duplicate.expect("dup").probability), 1.0);
    assert_eq!(percent(spec.corrupt.expect("corrupt").probability), 0.1);
    let reorder = spec.reorder.expect("reorder");
    assert_eq!(
        (
            percent(reorder.probability),
            percent(reorder.correlation),
            reorder.gap
        ),
        (25.0, 50.0, 5)
    );
    let Some(RateSpec::Fixed(rate)) = spec.rate else {
        panic!("fixed rate")
    };
    assert_eq!(rate.rate, BitsPerSec::mbit(10));
    assert_eq!((rate.packet_overhead, rate.cell_size), (20, 1500));
    assert_eq!(spec.queue.limit_packets, Some(100));
}

#[test]
fn pathlab_additions_parse() {
    let codel = parse("rate 10mbit queue codel target 2ms interval 50ms ecn");
    let Discipline::Codel(config) = codel.queue.discipline else {
        panic!("codel")
    };
    assert_eq!(config.target, Duration::from_millis(2));
    assert_eq!(config.interval, Duration::from_millis(50));
    assert!(config.ecn);

    let red = parse("rate 10mbit queue red min 30kb max 90kb probability 2% avpkt 1000 ecn");
    let Discipline::Red(config) = red.queue.discipline else {
        panic!("red")
    };
    assert_eq!((config.min_bytes, config.max_bytes), (30 * 1024, 90 * 1024));
    assert!(config.ecn);
    // tc_red's weight for burst (2 min + max) / (3 avpkt) = 51.2 packets: 2^-5.
    assert_eq!(config.weight, 1.0 / 32.0);

    let fq = parse("queue fq_codel flows 256 quantum 300 noecn rate 1gbit");
    let Discipline::FqCodel(config) = fq.queue.discipline else {
        panic!("fq_codel")
    };
    assert_eq!(
        (config.flows, config.quantum, config.codel.ecn),
        (256, 300, false)
    );
    assert_eq!(fq.queue.effective_limit_packets(), 10_240);

    let pie = parse("queue pie target 20ms tupdate 30ms alpha 0.25 beta 2.5 ecn");
    let Discipline::Pie(config) = pie.queue.discipline else {
        panic!("pie")
    };
    assert_eq!(
        (config.target, config.alpha, config.beta),
        (Duration::from_millis(20), 0.25, 2.5)
    );

    let limits = parse("limit 150kb limit 100");
    assert_eq!(limits.queue.limit_bytes, Some(150 * 1024));
    assert_eq!(limits.queue.limit_packets, Some(100));

    let Some(RateSpec::Trace(trace)) = parse("trace my.trace").rate else {
        panic!("trace")
    };
    assert_eq!(trace.path, "my.trace");

    let Some(RateSpec::Schedule(schedule)) =
        parse("schedule 5s 100mbit 10mbit 1mbit 50mbit 1mbit 100mbit").rate
    else {
        panic!("schedule")
    };
    assert_eq!(schedule.step, Duration::from_secs(5));
    assert_eq!(schedule.rates.len(), 6);
    assert!(!schedule.repeat);

    let slot = parse("slot 10ms 20ms packets 5 bytes 64kb")
        .slot
        .expect("slot");
    assert_eq!(
        slot.interval,
        SlotInterval::Uniform {
            min: Duration::from_millis(10),
            max: Duration::from_millis(20)
        }
    );
    assert_eq!((slot.max_packets, slot.max_bytes), (Some(5), Some(65_536)));

    let Some(LossSpec::State { p31, p23, .. }) = parse("loss state 1%").loss else {
        panic!("state")
    };
    assert_eq!((percent(p31), percent(p23)), (99.0, 100.0));
    assert_eq!(
        parse("rate 1mbps").rate,
        parse("rate 8mbit").rate,
        "mbps is bytes, as tc"
    );
    assert_eq!(
        parse("delay 100").delay.expect("d").delay,
        Duration::from_micros(100)
    );
}

#[test]
fn a_packet_rate_parses_in_every_spelling_and_prints_as_a_count() {
    for text in [
        "pps 6500",
        "pps 6.5k",
        "pps 6.5kpps",
        "pps 6500pps",
        "pps 6.5K",
    ] {
        let spec = parse(text);
        assert_eq!(spec.packet_rate, Some(PacketsPerSec(6500)), "{text}");
        assert_eq!(spec.to_string(), "pps 6500", "{text}");
    }
    // Beside a byte rate (with ATM cells), in any order.
    let spec = parse("pps 1M rate 11mbit 12 48 5");
    assert_eq!(spec.packet_rate, Some(PacketsPerSec(1_000_000)));
    assert_eq!(spec.to_string(), "rate 11mbit 12 48 5 pps 1000000");
    assert!(spec.has_bottleneck() && parse("pps 1").has_bottleneck());
    assert!(!parse("delay 1ms").has_bottleneck());
}

#[test]
fn a_ring_parses_prints_back_and_is_bounded() {
    let spec = parse("rate 10mbit queue fq_codel ring 5ms");
    assert_eq!(spec.queue.ring, Some(Duration::from_millis(5)));
    assert_eq!(spec.to_string(), "rate 10mbit queue fq_codel ring 5ms");
    assert_eq!(parse("rate 1mbit ring 0").queue.ring, None);
    assert_eq!(
        parse("rate 1mbit ring 10s").queue.ring,
        Some(Duration::from_secs(10))
    );
    for bad in [
        "rate 1mbit ring 11s",
        "rate 1mbit ring",
        "rate 1mbit ring 1ms ring 2ms",
    ] {
        assert!(LinkSpec::parse(bad).is_err(), "{bad}");
    }
}

const EXAMPLES: &[&str] = &[
    "",
    "delay 25ms 5ms 25% distribution normal loss 0.5% 25% duplicate 1% corrupt 0.1% reorder 25% 50% gap 5 rate 10mbit 20 1500 limit 100",
    "delay 5ms rate 10mbit limit 1000 queue codel target 5ms interval 100ms",
    "rate 10mbit queue red min 30kb max 90kb probability 2% avpkt 1000 ecn gentle",
    "rate 100mbit queue fq_codel flows 1024 quantum 1514 ce_threshold 1ms",
    "rate 100mbit queue pie target 15ms bytemode dq_rate_estimator",
    "limit 150kb queue headdrop rate 1gbit",
    "trace FILE",
    "schedule 5s 100mbit 10mbit 1mbit 50mbit 1mbit 100mbit loop",
    "slot distribution pareto 10ms 5ms packets 4",
    "loss gemodel 1% 10% 70% 0.1% ecn",
    "loss state 1% 30% 10% 40% 0.1%",
    "rate 1mbit 8 48 5 seed 42",
    "delay 10ms mtu 1400 seed 3",
    "rate 20mbit limit 3mb queue fq_codel ring 5ms",
    "preset lte loss 2%",
    "preset cable-up queue fq_codel limit 100",
    "preset leo distribution pareto distance 1000km",
    "delay 5ms 2ms distance 6000km",
    "rate 10mbit pps 5000 limit 50",
    "delay 5ms pps 6.5k queue codel",
    "rate 20mbit burst 20kb limit 40",
    "delay 15ms rate 20mbit burst 64kb peakrate 100mbit queue fq_codel",
    "rate 1mbit 8 48 5 burst 3000 pps 100",
    "rate 5mbit burst 1314 mtu 1300",
    "delay 10ms rate 20mbit restart 40% 1500ms",
    "rate 20mbit 8 restart 12.5% 2s idle 250ms pps 1000",
];

#[test]
fn canonical_form_round_trips() {
    for text in EXAMPLES {
        let spec = parse(text);
        let canonical = spec.to_string();
        let again = parse(&canonical);
        assert_eq!(again, spec, "'{text}' -> '{canonical}'");
        assert_eq!(again.to_string(), canonical);
        let json = serde_json::to_string(&spec).expect("serializes");
        let from_json: LinkSpec = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(from_json, spec, "JSON of '{text}'");
    }
    assert_eq!(parse("").to_string(), "");
}

/// Specs with a bad delay, loss, queue or other keyword that must be rejected, each with
/// a part of the message its error must contain.
fn bad_delay_loss_and_queue_inputs() -> &'static [(&'static str, &'static str)] {
    &[
        ("loss 150%", "loss must be between 0% and 100%, got 150%"),
        (
            "delay fast",
            "expected a time like 25ms after 'delay', got 'fast'",
        ),
        (
            "delya 10ms",
            "unknown keyword 'delya' (did you mean 'delay'?)",
        ),
        ("delay 1ms delay 2ms", "'delay' is given twice"),
        ("reorder 10%", "reordering needs a delay"),
        ("delay 1ms gap 3", "'gap' needs 'reorder'"),
        ("ecn", "needs a 'loss' model"),
        ("delay 10ms distribution gaussian", "got 'gaussian'"),
        ("delay 10ms distribution normal", "needs a jitter"),
        ("duplicate -1%", "got '-1%'"),
        ("limit lots", "got 'lots'"),
        ("limit 10 limit 20", "'limit PACKETS' is given twice"),
        ("queue wfq", "got 'wfq'"),
        ("queue red min 90kb max 30kb", "must be below its max"),
        ("seed x", "got 'x'"),
        ("mtu 40", "mtu must be 68 to 65535 bytes, got 40"),
        ("mtu 100kb", "got 100kb"),
        ("mtu big", "got 'big'"),
        ("preset lte4", "unknown preset 'lte4' (did you mean 'lte'?)"),
        ("loss 1% preset lte", "'preset' must come first"),
        ("distance -1km", "distance must be between 0 and 40075 km"),
        ("distance 6000", "got '6000'"),
        (
            "corrupt 200",
            "corrupt must be between 0% and 100%, got 200",
        ),
    ]
}

/// Specs with a bad rate, schedule, trace, slot, packet rate or token bucket that must be
/// rejected, each with a part of the message its error must contain.
fn bad_pacing_inputs() -> &'static [(&'static str, &'static str)] {
    &[
        (
            "rate",
            "'rate' needs a rate like 10mbit, but the spec ended",
        ),
        ("rate 1000", "rate needs a unit like 10mbit, got '1000'"),
        ("rate 10furlongs", "got '10furlongs'"),
        (
            "rate 1mbit trace x",
            "only one of 'rate', 'schedule' and 'trace'",
        ),
        (
            "schedule 0s 1mbit",
            "the schedule step must be longer than zero",
        ),
        ("slot 20ms 10ms", "below its minimum"),
        (
            "pps 0",
            "'pps' must be a whole number of packets per second from 1 to 1000000000, got 0",
        ),
        (
            "pps -3",
            "'pps' must be a whole number of packets per second from 1 to 1000000000, got -3",
        ),
        ("pps 6.5", "got 6.5"),
        ("pps 2000M", "from 1 to 1000000000, got 2000M"),
        ("pps 2G", "after 'pps', got '2G'"),
        (
            "rate 1mbit pps",
            "'pps' needs a packet rate like 6500 or 6.5k, but the spec ended",
        ),
        (
            "pps abc",
            "expected a packet rate like 6500 or 6.5k after 'pps', got 'abc'",
        ),
        ("pps 10mbit", "after 'pps', got '10mbit'"),
        ("pps 1 pps 2", "'pps' is given twice"),
        ("ppd 100", "unknown keyword 'ppd' (did you mean 'pps'?)"),
        (
            "rate 20mbit burst 1000",
            "burst 1000 bytes is smaller than one full frame (1514 bytes with mtu 1500)",
        ),
        (
            "rate 5mbit burst 1313 mtu 1300",
            "(1314 bytes with mtu 1300)",
        ),
        (
            "rate 20mbit burst 64kb peakrate 10mbit",
            "peakrate 10mbit must be above the rate (20mbit)",
        ),
        ("rate 20mbit burst 64kb peakrate 20mbit", "must be above"),
        (
            "rate 20mbit burst 2gb",
            "burst must be at most 1gb, got 2gb",
        ),
        (
            "rate 20mbit burst",
            "'burst' needs a size like 1500 or 64kb, but the spec ended",
        ),
        ("rate 20mbit burst fast", "after 'burst', got 'fast'"),
        ("rate 20mbit peakrate 100mbit", "'peakrate' needs a bucket"),
        (
            "delay 5ms burst 10kb",
            "'burst' belongs right after a fixed rate",
        ),
        (
            "schedule 1s 10mbit burst 10kb",
            "'burst' belongs right after",
        ),
        ("rate 1mbit burst 10kb peakrate", "'peakrate' needs a rate"),
    ]
}

/// Specs with a bad `restart`, each with a part of the message its error must contain.
fn bad_restart_inputs() -> &'static [(&'static str, &'static str)] {
    &[
        (
            "restart 50% 1s",
            "'restart' needs a fixed rate without a bucket",
        ),
        (
            "rate 10mbit burst 64kb restart 50% 1s",
            "'restart' needs a fixed rate without a bucket",
        ),
        (
            "schedule 1s 10mbit restart 50% 1s",
            "'restart' needs a fixed rate",
        ),
        (
            "rate 10mbit restart 0% 1s",
            "restart's share of the rate must be above 0% and at most 100%, got 0%",
        ),
        ("rate 10mbit restart 120% 1s", "got 120%"),
        (
            "rate 10mbit restart 50% 61s",
            "restart's ramp must be at most 60s",
        ),
        (
            "rate 10mbit restart 50% 1s idle 0ms",
            "restart's idle spell must be from 1ms to 60s",
        ),
        (
            "rate 10mbit restart 50%",
            "'restart' needs a time like 25ms",
        ),
        ("rate 10mbit restart fast 1s", "after 'restart', got 'fast'"),
        (
            "rate 10mbit restart 50% 1s restart 50% 1s",
            "'restart' is given twice",
        ),
    ]
}

#[test]
fn bad_input_names_the_token() {
    for &(text, message) in bad_delay_loss_and_queue_inputs()
        .iter()
        .chain(bad_pacing_inputs())
        .chain(bad_restart_inputs())
    {
        let error = LinkSpec::parse(text).expect_err(text).to_string();
        assert!(error.contains(message), "'{text}': got \"{error}\"");
    }
}

proptest! {
    /// Token soup from the spec's own vocabulary never panics, and whatever parses prints
    /// a canonical form that parses back to itself.
    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(prop::sample::select(vec![
        "delay", "10ms", "5ms", "0", "25%", "150%", "-3", "distribution", "normal", "pareto",
        "loss", "random", "state", "gemodel", "1%", "ecn", "duplicate", "corrupt", "reorder",
        "gap", "5", "rate", "10mbit", "1000", "schedule", "1s", "loop", "trace", "f", "slot",
        "packets", "bytes", "64kb", "limit", "queue", "red", "codel", "fq_codel", "pie",
        "min", "max", "target", "interval", "flows", "quantum", "seed", "mtu", "1400", "99999999999999999999",
        "pps", "6.5k", "2G", "-1", "burst", "peakrate", "100mbit", "restart", "idle",
        "1e309", "nan", "%", "", "preset", "lte", "adsl-up", "wifi-up", "distance", "6000km", "-3km",
    ]), 0..24)) {
        let text = tokens.join(" ");
        if let Ok(spec) = LinkSpec::parse(&text) {
            let canonical = spec.to_string();
            let again = LinkSpec::parse(&canonical).expect("canonical form parses");
            prop_assert_eq!(again.to_string(), canonical);
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,80}") {
        let _ = LinkSpec::parse(&text);
    }
}

#[test]
fn delay_quantiles_parse_print_back_and_are_bounded() {
    let spec = parse("delay 20ms quantiles 0 150us 0.4ms 1ms 3ms loss 1%");
    let quantiles = &spec.delay_quantiles.as_ref().expect("quantiles").quantiles;
    assert_eq!(quantiles.len(), 5);
    assert_eq!(quantiles[2], Duration::from_micros(400));
    assert_eq!(spec.delay.expect("delay").delay, Duration::from_millis(20));
    assert_eq!(
        spec.to_string(),
        "delay 20ms quantiles 0ms 150us 400us 1ms 3ms loss 1%"
    );
    assert_eq!(parse(&spec.to_string()), spec);
    // Mean: the average of the four steps' midpoints, (75 + 275 + 700 + 2000) / 4 us.
    assert_eq!(
        spec.one_way_delay(),
        Duration::from_millis(20) + Duration::from_nanos(762_500)
    );
    // Without a delay, the delay is 0 plus the variation.
    assert_eq!(
        parse("quantiles 0 1ms").delay.expect("delay").delay,
        Duration::ZERO
    );
    for (bad, says) in [
        ("delay 20ms quantiles 0 2ms 1ms", "must not decrease"),
        ("delay 20ms quantiles 1ms", "at least two times"),
        ("delay 20ms quantiles loss 1%", "at least two times"),
        ("delay 20ms 2ms quantiles 0 1ms", "without a jitter"),
        ("delay 20ms quantiles 0 1ms quantiles 0 1ms", "twice"),
    ] {
        let error = LinkSpec::parse(bad).expect_err(bad).to_string();
        assert!(error.contains(says), "'{bad}': {error}");
    }
    let many = format!("delay 1ms quantiles {}", "1ms ".repeat(1002));
    let error = LinkSpec::parse(&many)
        .expect_err("1002 quantiles")
        .to_string();
    assert!(error.contains("2 to 1001"), "{error}");
    assert!(LinkSpec::parse(&format!("delay 1ms quantiles {}", "1ms ".repeat(1001))).is_ok());
}

//! Tests of the triage, the parsers and the watch, against hand-built `tcp_info`.

use super::tcp_info::field;
use super::*;

/// A tcp_info of `len` bytes with the fields the triage reads.
struct Raw(Vec<u8>);

impl Raw {
    fn new(len: usize) -> Raw {
        Raw(vec![0; len])
    }
    fn u32(mut self, at: usize, v: u32) -> Raw {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, at: usize, v: u64) -> Raw {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn sample(at_ms: u64, info: TcpInfo) -> SocketSample {
    SocketSample {
        at_ns: at_ms * 1_000_000,
        local: "198.18.0.1:40000".parse().unwrap(),
        remote: "198.18.0.2:5201".parse().unwrap(),
        cookie: 1,
        inode: 7,
        uid: 0,
        send_queue: 0,
        recv_queue: 0,
        congestion: Some("cubic".into()),
        info: Some(info),
        memory: None,
    }
}

/// A sender's tcp_info at `t_ms` with `acked` bytes and the three time counters (us).
fn sender(acked: u64, busy: u64, rwnd: u64, sndbuf: u64) -> TcpInfo {
    TcpInfo::parse(
        &Raw::new(field::LEN)
            .u32(field::SND_MSS, 1448)
            .u32(field::RTT, 20_000)
            .u32(field::MIN_RTT, 20_000)
            .u32(field::SND_CWND, 10)
            .u32(field::SND_SSTHRESH, INFINITE_SSTHRESH)
            .u32(field::SND_WND, 65_536)
            .u32(field::UNACKED, 45)
            .u64(field::BYTES_ACKED, acked)
            .u64(field::BYTES_SENT, acked)
            .u64(field::BUSY_TIME, busy)
            .u64(field::RWND_LIMITED, rwnd)
            .u64(field::SNDBUF_LIMITED, sndbuf)
            .0,
    )
}

#[test]
fn fields_are_read_at_the_kernels_offsets_and_a_short_struct_leaves_the_rest_zero() {
    let raw = Raw::new(field::LEN)
        .u32(field::SND_CWND, 17)
        .u32(field::SND_WND, 123_456)
        .u64(field::BUSY_TIME, 99)
        .u64(field::BYTES_RETRANS, 5);
    let mut bytes = raw.0;
    bytes[field::STATE] = 1;
    bytes[field::WSCALE] = 0x72; // rcv 7, snd 2
    let info = TcpInfo::parse(&bytes);
    assert_eq!(
        (
            info.state_name(),
            info.snd_cwnd,
            info.snd_wnd,
            info.busy_time_us
        ),
        ("established", 17, 123_456, 99)
    );
    assert_eq!((info.snd_wscale, info.rcv_wscale), (2, 7));
    assert!(info.has_limits() && info.has_peer_window());
    let old = TcpInfo::parse(&bytes[..field::BUSY_TIME]);
    assert_eq!((old.snd_cwnd, old.busy_time_us, old.snd_wnd), (17, 0, 0));
    assert!(!old.has_limits());
}

#[test]
fn each_share_of_the_time_gives_its_verdict_with_the_cap_it_implies() {
    // 1 s watched; 64 KiB window at 20 ms caps at 26.2 Mbit/s.
    let start = sender(0, 0, 0, 0);
    // The verdict on a second from `start` to `end`, no events.
    let over_a_second = |end| verdict(&sample(0, start), &sample(1000, end), &[]);
    let window = over_a_second(sender(3_000_000, 990_000, 900_000, 0));
    assert_eq!(window.limit, Limit::ReceiverWindow);
    assert!((window.share - 0.9).abs() < 1e-9);
    let cap = window.cap_bps.unwrap();
    assert!((cap - 65_536.0 * 8.0 / 0.020).abs() < 1.0, "{cap}");
    assert!(window.sentence.contains("64 KiB"), "{}", window.sentence);
    let capped = window.sentence.contains("26.21 Mbit/s");
    assert!(capped, "{}", window.sentence);
    assert!((window.throughput_bps - 24e6).abs() < 1.0);

    let buffer = over_a_second(sender(1_000_000, 1_000_000, 0, 700_000));
    assert_eq!(buffer.limit, Limit::SendBuffer);
    assert!((buffer.limits.congestion - 0.3).abs() < 1e-9);

    let app = over_a_second(sender(100_000, 150_000, 0, 0));
    assert_eq!(app.limit, Limit::Application);
    assert!((app.share - 0.85).abs() < 1e-9);
    let named = app.sentence.starts_with("application-limited 85%");
    assert!(named, "{}", app.sentence);

    let network = over_a_second(sender(9_000_000, 1_000_000, 50_000, 0));
    assert_eq!(network.limit, Limit::Congestion);
    assert!((network.share - 0.95).abs() < 1e-9);
}

#[test]
fn shares_always_add_up_to_the_interval_even_when_counters_overshoot_it() {
    let limits = Limits::from_deltas(1000.0, 1200.0, 700.0, 900.0);
    let sum = limits.receiver_window + limits.send_buffer + limits.congestion + limits.application;
    assert!((sum - 1.0).abs() < 1e-12);
    assert_eq!(limits.application, 0.0);
    assert_eq!(limits.congestion, 0.0);
    assert_eq!(limits.send_buffer, 0.3);
}

#[test]
fn a_finite_ssthresh_without_any_loss_is_named_as_cached() {
    let mut info = sender(0, 0, 0, 0);
    info.snd_ssthresh = 1000;
    assert_eq!(cached_ssthresh(&info, &info), Some(1_448_000));
    let later = TcpInfo {
        bytes_acked: 5_000_000,
        bytes_sent: 5_000_000,
        busy_time_us: 1_000_000,
        ..info
    };
    let v = verdict(&sample(0, info), &sample(1000, later), &[]);
    assert_eq!(v.limit, Limit::Congestion);
    assert!(
        v.sentence.contains("cached ssthresh of 1.38 MiB"),
        "{}",
        v.sentence
    );
    let lost = TcpInfo {
        total_retrans: 1,
        ..later
    };
    assert_eq!(cached_ssthresh(&info, &lost), None, "a loss explains it");
    assert_eq!(
        cached_ssthresh(&later, &later),
        None,
        "first seen after sending more than the threshold: set later (idle, app-limited)"
    );
}

#[test]
fn selectors_read_ss_words_and_say_what_they_cannot_read() {
    let s = sample(0, TcpInfo::default());
    for (filter, expected) in [
        ("", true),
        ("dport = :5201", true),
        ("sport 40000 and dst 198.18.0.0/15", true),
        ("port 5201", true),
        ("port 22", false),
        ("src 198.18.0.2", false),
        ("dst == 198.18.0.2/32 and sport eq :40000", true),
        ("dst 2001:2::/48", false),
    ] {
        assert_eq!(
            Selector::parse(filter).unwrap().matches(&s),
            expected,
            "{filter}"
        );
    }
    for (bad, says) in [
        ("dport", "needs a value"),
        ("dport = :ssh", "not a port number"),
        ("dst 198.18.0.0/33", "prefix length beyond 32"),
        ("sport 1 or sport 2", "only terms joined by `and`"),
        ("state established", "expected sport"),
    ] {
        let error = Selector::parse(bad).unwrap_err();
        assert!(error.contains(says), "{bad}: {error}");
    }
    let mapped = SocketSample {
        local: "[::ffff:198.18.0.1]:40000".parse().unwrap(),
        ..s
    };
    assert!(Selector::parse("src 198.18.0.0/24")
        .unwrap()
        .matches(&mapped));
}

#[test]
fn a_watch_follows_each_socket_by_its_cookie_and_marks_those_that_closed() {
    let mut watch = Watch::new();
    let a = |t: u64, acked: u64| sample(t, sender(acked, t * 1000, 0, 0));
    let b = |t: u64| SocketSample {
        cookie: 2,
        ..sample(t, sender(0, 0, 0, 0))
    };
    assert!(watch.observe(vec![a(0, 0), b(0)]).is_empty());
    let first = watch.observe(vec![a(100, 1_250_000), b(100)]);
    assert_eq!(first.len(), 2);
    assert!((first[0].1.throughput_bps - 100e6).abs() < 1.0);
    watch.observe(vec![a(200, 2_500_000)]);
    let report = watch.report(100_000_000);
    assert_eq!(report.connections.len(), 2);
    assert_eq!(report.duration_ns, 200_000_000);
    assert!(!report.connections[0].closed && report.connections[1].closed);
    assert_eq!(report.connections[0].intervals.len(), 2);
    assert_eq!(report.connections[0].verdict.limit, Limit::Congestion);
}

#[test]
fn a_receiving_end_says_so_and_what_its_window_allows() {
    let mut a = TcpInfo::parse(&Raw::new(field::LEN).u32(field::RTT, 40_000).0);
    a.rcv_wnd = 131_072;
    let b = TcpInfo {
        bytes_received: 2_500_000,
        ..a
    };
    let v = verdict(&sample(0, a), &sample(1000, b), &[]);
    assert_eq!(v.limit, Limit::Receiving);
    assert!((v.cap_bps.unwrap() - 131_072.0 * 8.0 / 0.04).abs() < 1.0);
    let idle = verdict(&sample(0, a), &sample(1000, a), &[]);
    assert_eq!(idle.limit, Limit::Idle);
}

#[test]
fn busy_time_the_kernel_left_to_congestion_goes_to_the_bound_that_held_at_both_looks() {
    // The transfer of the namespace test: a 41 KB window at 20 ms, cwnd 72 segments; the
    // kernel's clocks said 44% rwnd-limited, 56% just busy.
    let window_held = |t: u64, busy: u64, rwnd: u64| {
        let mut info = sender(t * 2_100, busy, rwnd, 0);
        info.snd_wnd = 41_992;
        info.snd_cwnd = 72;
        info.unacked = 29; // 41,992 B in flight
        sample(t, info)
    };
    let (a, b) = (window_held(0, 0, 0), window_held(1000, 1_000_000, 440_000));
    let i = interval(&a, &b).unwrap();
    assert!(
        (i.limits.receiver_window - 1.0).abs() < 1e-9,
        "{:?}",
        i.limits
    );
    assert_eq!(i.limits.congestion, 0.0);
    let v = verdict(&a, &b, &[i]);
    assert_eq!(v.limit, Limit::ReceiverWindow);

    // Without the window held at the first look (in flight far below it), the kernel's
    // split stands.
    let mut early = window_held(0, 0, 0);
    early.info.as_mut().unwrap().unacked = 3;
    let i = interval(&early, &b).unwrap();
    assert!((i.limits.receiver_window - 0.44).abs() < 1e-9);

    // A full 32 KiB send buffer, 22 segments in flight, both windows far larger.
    let buffer_held = |t: u64, busy: u64| {
        let mut info = sender(t * 1_600, busy, 0, 50_000 * t / 1000);
        info.snd_wnd = 3 << 20;
        info.snd_cwnd = 94;
        info.unacked = 22;
        SocketSample {
            memory: Some(SocketMemory {
                sndbuf: 32_768,
                wmem_queued: 31_000,
                ..SocketMemory::default()
            }),
            ..sample(t, info)
        }
    };
    let i = interval(&buffer_held(0, 0), &buffer_held(1000, 1_000_000)).unwrap();
    assert!((i.limits.send_buffer - 1.0).abs() < 1e-9, "{:?}", i.limits);
    // Half empty: not the buffer.
    let mut roomy = buffer_held(1000, 1_000_000);
    roomy.memory.as_mut().unwrap().wmem_queued = 16_000;
    let i = interval(&buffer_held(0, 0), &roomy).unwrap();
    assert!((i.limits.send_buffer - 0.05).abs() < 1e-9, "{:?}", i.limits);
}

#[test]
fn an_application_waiting_for_answers_is_named_though_the_kernel_counts_it_busy() {
    // 16 KiB blocks at 50 ms: 11 segments in flight the whole time, the congestion window
    // at 38 and the peer's 3 MiB both open, nothing unsent; the kernel says 100% busy.
    let waiting = |t: u64, busy: u64| {
        let mut info = sender(t * 250, busy, 0, 0);
        info.snd_wnd = 3 << 20;
        info.snd_cwnd = 38;
        info.unacked = 11;
        sample(t, info)
    };
    let (a, b) = (waiting(0, 0), waiting(1000, 1_000_000));
    let i = interval(&a, &b).unwrap();
    assert!((i.limits.application - 1.0).abs() < 1e-9, "{:?}", i.limits);
    assert_eq!(verdict(&a, &b, &[i]).limit, Limit::Application);
    // Data waiting unsent is not the application's doing.
    let mut queued = waiting(1000, 1_000_000);
    queued.info.as_mut().unwrap().notsent_bytes = 100_000;
    let i = interval(&a, &queued).unwrap();
    assert_eq!(i.limits.application, 0.0);
}

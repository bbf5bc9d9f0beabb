//! The forwarding loop's own tests: the batching rule and the receive-time dating.

use super::*;

/// An Ethernet + IPv4 + TCP segment of flow `port` (the source port), with sequence
/// number `seq`, IP id `id` and `len` bytes of payload.
fn tcp_segment(port: u16, seq: u32, id: u16, len: usize) -> Vec<u8> {
    let mut frame = vec![0u8; 14 + 20 + 32 + len];
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = 14;
    frame[ip] = 0x45;
    frame[ip + 2..ip + 4].copy_from_slice(&((20 + 32 + len) as u16).to_be_bytes());
    frame[ip + 4..ip + 6].copy_from_slice(&id.to_be_bytes());
    frame[ip + 8] = 64;
    frame[ip + 9] = 6;
    frame[ip + 12..ip + 16].copy_from_slice(&[198, 18, 0, 1]);
    frame[ip + 16..ip + 20].copy_from_slice(&[198, 18, 0, 2]);
    let l4 = 34;
    frame[l4..l4 + 2].copy_from_slice(&port.to_be_bytes());
    frame[l4 + 2..l4 + 4].copy_from_slice(&80u16.to_be_bytes());
    frame[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
    frame[l4 + 12] = 8 << 4; // 32-byte header (timestamps)
    frame[l4 + 13] = 0x10; // ACK
    frame
}

fn source_port(packet: &Packet) -> u16 {
    u16::from_be_bytes([packet.data[34], packet.data[35]])
}

/// Runs `link` as a worker would, passing at the instants `passes` (sorted), feeding it
/// `arrivals` (instant, packet) as they come; returns (model departure, sent at, id,
/// run it left in) of every packet.
fn drive(
    link: &mut Link,
    arrivals: Vec<(Instant, Packet)>,
    passes: &[Instant],
) -> Vec<(Instant, Instant, u64, usize, u16)> {
    let mut arrivals = arrivals.into_iter().peekable();
    let mut due = Vec::new();
    let mut sent = Vec::new();
    let mut run_number = 0;
    for &pass in passes {
        while let Some((at, _)) = arrivals.peek() {
            if *at > pass {
                break;
            }
            let (_, packet) = arrivals.next().expect("peeked");
            link.enqueue(pass, packet);
        }
        take_due(link, pass, &mut due);
        let mut start = 0;
        while start < due.len() {
            let run = next_run(&due[start..], true);
            for (at, packet) in &due[start..start + run] {
                sent.push((*at, pass, packet.id, run_number, source_port(packet)));
            }
            run_number += 1;
            start += run;
        }
    }
    sent
}

#[test]
fn a_frame_enters_the_link_when_it_arrived_within_what_the_link_allows() {
    let ms = Instant::from_millis;
    assert_eq!(arrival(ms(10), 0, ms(9)), ms(10), "read at once");
    assert_eq!(arrival(ms(10), 3_000_000, ms(2)), ms(7), "waited 3 ms");
    assert_eq!(
        arrival(ms(10), 3_000_000, ms(8)),
        ms(8),
        "the link is past it"
    );
    assert_eq!(arrival(ms(10), 30_000_000, Instant::ZERO), Instant::ZERO);
    assert_eq!(arrival(ms(10), 0, ms(10)), ms(10));
}

#[test]
fn frames_leave_at_the_first_pass_after_their_instant_in_order_glued_per_flow() {
    // 1 Gbit/s: a 1514-byte frame takes 12.1 us. Two flows' segments arrive in a
    // burst; passes come every 50 us with a jitter, as a busy worker's would.
    let spec = LinkSpec::parse("rate 1gbit delay 1ms").unwrap();
    let mut link = Link::new(&spec, 1).unwrap();
    let mut arrivals = Vec::new();
    // Bursts of four segments of each flow, alternating, each flow's in sequence.
    for i in 0..40u16 {
        let flow = if (i / 4) % 2 == 0 { 1000 } else { 2000 };
        let k = u32::from((i / 8) * 4 + i % 4);
        let frame = tcp_segment(flow, 1 + k * 1448, k as u16, 1448);
        arrivals.push((
            Instant::from_micros(u64::from(i)),
            Packet::from_ethernet(Instant::ZERO, frame),
        ));
    }
    let passes: Vec<Instant> = (0..400u64)
        .map(|k| Instant::from_micros(k * 50 + (k * 37) % 23))
        .collect();
    let sent = drive(&mut link, arrivals, &passes);
    assert_eq!(sent.len(), 40, "every frame leaves");
    let mut last_id = 0;
    for &(due, at, id, _, _) in &sent {
        assert!(
            at >= due,
            "frame {id} left at {at}, before its instant {due}"
        );
        // The pass it left in is the first at or after its instant.
        let first = passes.iter().find(|p| **p >= due).expect("a pass after");
        assert_eq!(at, *first, "frame {id} waited for a later pass");
        assert!(id > last_id, "frame {id} overtook {last_id}");
        last_id = id;
    }
    // Frames due in the same pass that belong to one flow and follow each other in
    // sequence left as one super-packet; no run mixes flows.
    let runs: std::collections::BTreeSet<usize> = sent.iter().map(|s| s.3).collect();
    assert!(runs.len() < sent.len(), "some frames were glued");
    for run in runs {
        let members: Vec<_> = sent.iter().filter(|s| s.3 == run).collect();
        assert!(
            members.iter().all(|m| m.1 == members[0].1),
            "a run is one pass"
        );
        assert!(
            members.iter().all(|m| m.4 == members[0].4),
            "a run is one flow"
        );
    }
    // Without GSO every frame goes alone.
    let mut due = vec![(
        Instant::ZERO,
        Packet::from_ethernet(Instant::ZERO, tcp_segment(1, 1, 0, 1448)),
    )];
    due.push((
        Instant::ZERO,
        Packet::from_ethernet(Instant::ZERO, tcp_segment(1, 1449, 1, 1448)),
    ));
    assert_eq!(next_run(&due, true), 2);
    assert_eq!(next_run(&due, false), 1);
    due[0].1.corrupted = true;
    assert_eq!(next_run(&due, true), 1, "a corrupted frame goes alone");
}

//! `pathlab bond`'s header compression end to end: a download over two asymmetric lines
//! (8 Mbit/s down, 1 Mbit/s up each, as ADSL lines are), through the tunnel with header
//! compression on and off, and over each line alone; the bond's own counts of the bytes
//! each way against the format's arithmetic.

use std::path::Path;

use crate::util::emulated::privileged_paired;
use crate::util::lab_results::{json_out, lab_goodput, run_spec};
use crate::util::TempDir;

/// Two lines from `site` (line 0 through isp0, line 1 through isp1) to `srv`; first a CUBIC
/// download over each line alone (both at once: they share no link), then through the tunnel with header compression on, then
/// off (the client's `--header-compression off`: it neither compresses its ACKs nor
/// acknowledges the server's references, so the server sends whole packets too). The
/// first tunnel starts 2 s after the last line's own flow: started as that flow ended, the
/// second line went down at once and the server sent nothing down it for the whole run,
/// in 2 runs of 4 (7 Mbit/s instead of 14, whichever setting came first). The second
/// client has an inner address and a TUN device of its own (a lingering first session
/// cannot take its traffic).
const ASYMMETRIC: &str = r#"
name = "bond-headers"
duration = "40s"
quick = "40s"
[[node]]
name = "site"
[[node]]
name = "isp0"
kind = "router"
[[node]]
name = "isp1"
kind = "router"
[[node]]
name = "srv"
[[link]]
between = ["site", "isp0"]
spec = "delay 10ms rate 1mbit limit 60"
reverse = "delay 10ms rate 8mbit limit 300"
[[link]]
between = ["site", "isp1"]
spec = "delay 15ms rate 1mbit limit 60"
reverse = "delay 15ms rate 8mbit limit 300"
[[link]]
between = ["isp0", "srv"]
[[link]]
between = ["isp1", "srv"]
[[workload]]
name = "key"
kind = "command"
from = "srv"
duration = "1s"
command = ["{pathlab}", "bond", "key", "{out}/bond.key"]
[[workload]]
name = "bond-server"
kind = "command"
from = "srv"
start = "1s"
command = ["{pathlab}", "bond", "server", "--listen", "198.18.2.2:7000", "--psk", "{out}/bond.key", "--address", "198.19.0.1/24", "--name", "NAME-srv"]
[[workload]]
name = "alone-0"
kind = "tcp"
from = "srv"
to = "site"
address = "198.18.0.1"
start = "2s"
duration = "8s"
congestion = "cubic"
[[workload]]
name = "alone-1"
kind = "tcp"
from = "srv"
to = "site"
address = "198.18.1.1"
start = "2s"
duration = "8s"
congestion = "cubic"
[[workload]]
name = "client-on"
kind = "command"
from = "site"
start = "12s"
duration = "13s"
command = ["{pathlab}", "bond", "client", "198.18.2.2:7000", "--line", "to-isp0", "--line", "to-isp1,via=198.18.1.2", "--psk", "{out}/bond.key", "--address", "198.19.0.2/24", "--name", "NAME-on", "-J"]
[[workload]]
name = "tunnel-on"
kind = "tcp"
from = "srv"
to = "site"
address = "198.19.0.2"
start = "14s"
duration = "10s"
congestion = "cubic"
[[workload]]
name = "client-off"
kind = "command"
from = "site"
start = "26s"
duration = "13s"
command = ["{pathlab}", "bond", "client", "198.18.2.2:7000", "--line", "to-isp0", "--line", "to-isp1,via=198.18.1.2", "--psk", "{out}/bond.key", "--address", "198.19.0.3/24", "--tun", "bond1", "--name", "NAME-off", "--header-compression", "off", "-J"]
[[workload]]
name = "tunnel-off"
kind = "tcp"
from = "srv"
to = "site"
address = "198.19.0.3"
start = "28s"
duration = "10s"
congestion = "cubic"
"#;

/// What a client's session did, from its final stats.
#[derive(Debug)]
struct Session {
    /// Inner packets it sent up (the download's ACKs) and delivered down.
    inner_up: u64,
    inner_down: u64,
    /// UDP payload bytes its lines sent up and received down.
    bytes_up: u64,
    bytes_down: u64,
    counters: serde_json::Value,
}

fn session(out: &Path, client: &str) -> Session {
    let stats = json_out(out, client);
    let session = &stats["sessions"][0];
    let lines = session["lines"].as_array().expect("lines");
    let sum = |field: &str| {
        lines
            .iter()
            .map(|l| l["counters"][field].as_u64().unwrap())
            .sum()
    };
    let counters = session["counters"].clone();
    Session {
        inner_up: counters["inner_in"].as_u64().unwrap(),
        inner_down: counters["inner_out"].as_u64().unwrap(),
        bytes_up: sum("sent_bytes"),
        bytes_down: sum("received_bytes"),
        counters,
    }
}

#[test]
fn header_compression_over_asymmetric_lines_cuts_what_the_acks_take_up() {
    let Some(_serial) = privileged_paired("header_compression_over_asymmetric_lines") else {
        return;
    };
    let dir = TempDir::new("bond-headers");
    let out = dir.path("run");
    run_spec(&dir, ASYMMETRIC, &out);
    // Steady state: each flow without its first 2 s (slow start) and its last second.
    let alone = [
        lab_goodput(&out, "alone-0", 2.0, 7.0),
        lab_goodput(&out, "alone-1", 2.0, 7.0),
    ];
    let sum_alone = alone[0] + alone[1];
    let on = lab_goodput(&out, "tunnel-on", 2.0, 9.0);
    let off = lab_goodput(&out, "tunnel-off", 2.0, 9.0);
    let (with, without) = (session(&out, "client-on"), session(&out, "client-off"));
    let per_packet = |bytes: u64, packets: u64| bytes as f64 / packets.max(1) as f64;
    let up_on = per_packet(with.bytes_up, with.inner_up);
    let up_off = per_packet(without.bytes_up, without.inner_up);
    let down_on = per_packet(with.bytes_down, with.inner_down);
    let down_off = per_packet(without.bytes_down, without.inner_down);
    eprintln!(
        "goodput: alone {:.2} + {:.2} = {sum_alone:.2} Mbit/s; tunnel, headers compressed {on:.2} ({:.1}%), not {off:.2} ({:.1}%)",
        alone[0],
        alone[1],
        100.0 * on / sum_alone,
        100.0 * off / sum_alone
    );
    eprintln!(
        "up: {up_on:.1} bytes per inner packet with, {up_off:.1} without ({} and {} packets, {} and {} bytes); down: {down_on:.1} and {down_off:.1}",
        with.inner_up, without.inner_up, with.bytes_up, without.bytes_up
    );
    eprintln!("client's counters with compression: {}", with.counters);
    // Nothing was dropped for want of a reference or for failing to decode, and most of
    // the ACKs went compressed (the first of each flow's round trips go whole).
    let c = &with.counters;
    assert_eq!(c["headers_decode_failed"], 0);
    let compressed = c["headers_compressed"].as_u64().unwrap();
    assert!(
        compressed > with.inner_up * 9 / 10,
        "{compressed} of {} compressed",
        with.inner_up
    );
    assert!(
        c["headers_acks_sent"].as_u64().unwrap() > 0,
        "the server's references acknowledged"
    );
    assert_eq!(without.counters["headers_compressed"], 0);
    assert_eq!(without.counters["headers_acks_sent"], 0);
    // The arithmetic of the format: an ACK with timestamps is 52 bytes of IPv4 and TCP,
    // compressed 9 (a byte for the kind, the context, the generation, the IP ID, the ack
    // in strides and each timestamp, two for the checksum): 43 less. A little less on
    // average: a renewal (3 bytes) and a HeaderAcks frame (5) about once a round trip, the
    // first round trip's packets whole, ACKs with SACK blocks (options raw). At least 35
    // bytes less per inner packet up; the same for each data segment down, once the
    // segment's own length is taken out: with compression the TUN's MTU is
    // BULK_TCP_SAVED_BYTES larger (a full segment still fills one datagram), so each
    // carries that much more payload.
    let longer = pathlab_bond::headers::BULK_TCP_SAVED_BYTES as f64;
    assert!(
        up_on < up_off - 35.0,
        "up: {up_on:.1} against {up_off:.1} bytes"
    );
    assert!(
        down_on - longer < down_off - 35.0,
        "down: {down_on:.1} (segments {longer} bytes longer) against {down_off:.1} bytes"
    );
    // The compressed tunnel carries most of what the lines carry alone (the tunnel's own
    // 46 bytes a datagram are 3% of a line). The uncompressed run is reported, not held
    // to it: in 2 runs of 9, both while other labs ran on the machine, its download (the
    // second session) starved for most of its 10 s (3.97 Mbit/s once), which its bytes
    // per packet above do not depend on; not understood yet.
    assert!(
        on > 0.85 * sum_alone,
        "compression on: {on:.2} of {sum_alone:.2} Mbit/s"
    );
}

//! Path MTU discovery and capacity estimation through the emulator, against its truth:
//! the MTU its links enforce, the rate they serialize at, the drops they recorded.
//!
//! They need CAP_NET_ADMIN: without it they fail when `CI=true` and skip elsewhere.

use pathlab_core::verdict::DropReason;
use pathlab_probe::control::Direction;

mod util;
use util::emulated::{privileged, with_server_in_h2, Lab};

#[test]
fn path_mtu_search_finds_each_directions_mtu_to_the_byte_without_icmp() {
    let Some(_serial) =
        privileged("path_mtu_search_finds_each_directions_mtu_to_the_byte_without_icmp")
    else {
        return;
    };
    // The veth line carries 1500 bytes; the emulator then narrows each direction on its
    // own, dropping longer packets without a word (no ICMP: only probing finds it).
    for (up_spec, down_spec, up_mtu, down_mtu) in [
        ("delay 5ms", "delay 5ms", 1500, 1500),
        ("delay 5ms mtu 1400", "delay 5ms mtu 1280", 1400, 1280),
    ] {
        let mut lab = Lab::start("path-mtu", up_spec, &["--reverse", down_spec], true);
        let up = with_server_in_h2(&lab, |client| client.path_mtu(Direction::Up));
        let down = with_server_in_h2(&lab, |client| client.path_mtu(Direction::Down));
        let (_, recording) = lab.stop();
        eprintln!("'{up_spec}' / '{down_spec}': up {up:?}, down {down:?}");
        assert_eq!((up.mtu_bytes, down.mtu_bytes), (up_mtu, down_mtu));
        assert_eq!(up.local_mtu_bytes, 1500);
        assert_eq!(down.local_mtu_bytes, 1500);
        // Every probe that vanished is one the emulator dropped for its size (nothing
        // else drops on these links), and each size judged too big vanished three times.
        for (direction, found) in [(0, &up), (1, &down)] {
            let dropped = recording
                .packets(direction)
                .filter(|r| r.dropped.map(|d| d.1) == Some(DropReason::Mtu))
                .count() as u32;
            assert_eq!(dropped, found.lost, "direction {direction}");
            assert_eq!(found.lost % pathlab_probe::mtu::TRIES, 0);
        }
    }
}

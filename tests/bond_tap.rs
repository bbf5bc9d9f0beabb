//! `pathlab bond --tap` in namespaces (issue 28, item 4): one LAN across the tunnel, VLAN
//! tags and all.
//!
//! A site and a server namespace joined by two lines (veth pairs, line `k`: 198.18.1k.1 at
//! the site, 198.18.1k.2 at the server, the server's address 198.18.0.1 on its `lo`). At
//! each end the bond's TAP is a port of a bridge whose other port is a veth to a host
//! namespace (`ha` at the site, `hb` behind the server): ha - brc - TAP == lines == TAP -
//! brs - hb.
//!
//! The kernel here has neither the 8021q module nor bridge VLAN filtering
//! (`ip link add br0 type bridge vlan_filtering 1` answers "Operation not supported"), so
//! no host can be put in a VLAN. The bridges forward tagged frames as they are, and the
//! test is the VLAN hosts itself: it sends ICMP echo requests in tagged frames from a
//! packet socket in `ha`, and a packet socket in `hb` answers them in frames with the same
//! tags. It checks each VLAN's pings are answered and every frame arrives with the tags it
//! was sent with (the kernel takes the outer tag out of a received frame into its metadata:
//! it is read back from `PACKET_AUXDATA`).

use crate::util;

use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::util::emulated::privileged_paired;
use crate::util::tunnel::{echo, Tunnel};
use crate::util::TempDir;
use pathlab_core::wire::checksum::{checksum_add, checksum_finish};
use pathlab_core::wire::ethernet::{self, EthernetFrame, TPID_8021AD, TPID_8021Q};
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;
use pathlab_os::sys;

const SERVER_LO: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const LINES: usize = 2;
/// The hosts' own addresses on the untagged LAN (their kernels answer each other).
const HA: Ipv4Addr = Ipv4Addr::new(198, 18, 40, 1);
const HB: Ipv4Addr = Ipv4Addr::new(198, 18, 40, 2);
/// Pings per VLAN, one every 20 ms.
const PINGS: usize = 20;

fn line_site(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + k as u8, 1)
}

fn line_srv(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + k as u8, 2)
}

/// One VLAN's test hosts: the tags their frames carry (outermost first, TPID and VID), a
/// MAC and an address at each end.
#[derive(Debug, Clone, Copy)]
struct Vlan {
    tags: &'static [(u16, u16)],
    mac_a: [u8; 6],
    mac_b: [u8; 6],
    ip_a: Ipv4Addr,
    ip_b: Ipv4Addr,
}

/// VLAN 10 and 20 (802.1Q), and VLAN 10 inside service VLAN 100 (802.1ad, QinQ). The same
/// addresses in VLAN 10 and 20: only the tags tell them apart.
const VLANS: [Vlan; 3] = [
    Vlan {
        tags: &[(TPID_8021Q, 10)],
        mac_a: [2, 0, 0, 0, 10, 0xa],
        mac_b: [2, 0, 0, 0, 10, 0xb],
        ip_a: Ipv4Addr::new(198, 18, 41, 1),
        ip_b: Ipv4Addr::new(198, 18, 41, 2),
    },
    Vlan {
        tags: &[(TPID_8021Q, 20)],
        mac_a: [2, 0, 0, 0, 20, 0xa],
        mac_b: [2, 0, 0, 0, 20, 0xb],
        ip_a: Ipv4Addr::new(198, 18, 41, 1),
        ip_b: Ipv4Addr::new(198, 18, 41, 2),
    },
    Vlan {
        tags: &[(TPID_8021AD, 100), (TPID_8021Q, 10)],
        mac_a: [2, 0, 0, 1, 10, 0xa],
        mac_b: [2, 0, 0, 1, 10, 0xb],
        ip_a: Ipv4Addr::new(198, 18, 42, 1),
        ip_b: Ipv4Addr::new(198, 18, 42, 2),
    },
];

/// The namespaces: site, server, and a host behind each.
struct Sites {
    site: Netns,
    srv: Netns,
    ha: Netns,
    hb: Netns,
}

fn up(nl: &mut Netlink, name: &str) -> u32 {
    let link = nl.link_by_name(name).unwrap().unwrap();
    nl.set_up(link.index, true).unwrap();
    link.index
}

impl Sites {
    fn build() -> Sites {
        let site = pathlab_os::testing::netns_with_loopback().unwrap();
        let srv = pathlab_os::testing::netns_with_loopback().unwrap();
        let ha = pathlab_os::testing::netns_with_loopback().unwrap();
        let hb = pathlab_os::testing::netns_with_loopback().unwrap();
        let (srv_fd, ha_fd, hb_fd) = (
            srv.try_clone().unwrap(),
            ha.try_clone().unwrap(),
            hb.try_clone().unwrap(),
        );
        site.run(move || {
            let mut nl = Netlink::open().unwrap();
            for k in 0..LINES {
                nl.create_veth(&format!("line{k}"), &format!("isp{k}"), Some(srv_fd.fd()))
                    .unwrap();
                let index = up(&mut nl, &format!("line{k}"));
                nl.add_address(index, line_site(k).into(), 24, None)
                    .unwrap();
            }
            lan(&mut nl, "brc", ha_fd.fd());
        })
        .unwrap();
        srv.run(move || {
            let mut nl = Netlink::open().unwrap();
            for k in 0..LINES {
                let index = up(&mut nl, &format!("isp{k}"));
                nl.add_address(index, line_srv(k).into(), 24, None).unwrap();
            }
            let lo = nl.link_by_name("lo").unwrap().unwrap();
            nl.add_address(lo.index, SERVER_LO.into(), 32, None)
                .unwrap();
            lan(&mut nl, "brs", hb_fd.fd());
        })
        .unwrap();
        for (host, address) in [(&ha, HA), (&hb, HB)] {
            host.run(move || {
                let mut nl = Netlink::open().unwrap();
                let index = up(&mut nl, "eth0");
                nl.add_address(index, address.into(), 24, None).unwrap();
            })
            .unwrap();
        }
        Sites { site, srv, ha, hb }
    }

    fn line_args() -> Vec<String> {
        (0..LINES)
            .flat_map(|k| ["--line".to_owned(), format!("line{k},via={}", line_srv(k))])
            .collect()
    }
}

/// In the calling namespace: bridge `bridge` with a port `lan`, a veth whose peer is `eth0`
/// in `host`. The bond's TAP joins the bridge when it starts (`--bridge`).
fn lan(nl: &mut Netlink, bridge: &str, host: std::os::fd::BorrowedFd<'_>) {
    nl.create_bridge(bridge).unwrap();
    let bridge_index = up(nl, bridge);
    nl.create_veth("lan", "eth0", Some(host)).unwrap();
    let lan = up(nl, "lan");
    nl.set_master(lan, bridge_index).unwrap();
}

/// A packet socket on `eth0` of `host`, every protocol, non-blocking, with `PACKET_AUXDATA`
/// (the tag the kernel took off a received frame).
fn packet_socket(host: &Netns) -> OwnedFd {
    host.run(|| {
        let fd = sys::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK,
            i32::from((libc::ETH_P_ALL as u16).to_be()),
        )
        .unwrap();
        let index = sys::if_nametoindex("eth0").unwrap();
        sys::bind_packet(fd.as_fd(), index).unwrap();
        sys::enable_packet_auxdata(fd.as_fd()).unwrap();
        fd
    })
    .unwrap()
}

/// An Ethernet frame with `tags` around an IPv4 ICMP echo (`request`: type 8, else 0).
fn icmp_frame(
    tags: &[(u16, u16)],
    (mac_from, mac_to): ([u8; 6], [u8; 6]),
    (from, to): (Ipv4Addr, Ipv4Addr),
    request: bool,
    seq: u16,
) -> Vec<u8> {
    let mut icmp = vec![if request { 8 } else { 0 }, 0, 0, 0, 0x12, 0x34];
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(&[0x5a; 56]);
    let sum = checksum_finish(checksum_add(0, &icmp));
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 1, 0, 0];
    ip[2..4].copy_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&from.octets());
    ip.extend_from_slice(&to.octets());
    let sum = checksum_finish(checksum_add(0, &ip));
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut frame = Vec::new();
    frame.extend_from_slice(&mac_to);
    frame.extend_from_slice(&mac_from);
    for &(tpid, vid) in tags {
        frame.extend_from_slice(&tpid.to_be_bytes());
        frame.extend_from_slice(&vid.to_be_bytes());
    }
    frame.extend_from_slice(&ethernet::ETHERTYPE_IPV4.to_be_bytes());
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&icmp);
    frame
}

/// A received ICMP echo: its tags as sent (the one the kernel kept aside put back in
/// front), its MACs, addresses, type and sequence number.
#[derive(Debug, Clone, PartialEq)]
struct Echo {
    tags: Vec<(u16, u16)>,
    macs: ([u8; 6], [u8; 6]),
    addresses: (Ipv4Addr, Ipv4Addr),
    request: bool,
    seq: u16,
}

fn parse_echo(data: &[u8], kept_aside: Option<(u16, u16)>) -> Option<Echo> {
    let frame = EthernetFrame::new_checked(data).ok()?;
    let mut tags: Vec<(u16, u16)> = kept_aside
        .map(|(tci, tpid)| (tpid, tci & ethernet::VID_MASK))
        .into_iter()
        .collect();
    tags.extend(frame.vlan_tags().map(|t| (t.tpid, t.vid())));
    if frame.ethertype() != ethernet::ETHERTYPE_IPV4 {
        return None;
    }
    let ip = frame.payload();
    let header = usize::from(ip.first()? & 0x0f) * 4;
    if ip.get(9) != Some(&1) {
        return None;
    }
    let icmp = ip.get(header..)?;
    let request = match icmp.first()? {
        8 => true,
        0 => false,
        _ => return None,
    };
    let address = |at: usize| -> Option<Ipv4Addr> {
        Some(<[u8; 4]>::try_from(ip.get(at..at + 4)?).ok()?.into())
    };
    Some(Echo {
        tags,
        macs: (frame.source(), frame.destination()),
        addresses: (address(12)?, address(16)?),
        request,
        seq: u16::from_be_bytes(icmp.get(6..8)?.try_into().ok()?),
    })
}

/// Receives what waits on `fd` until `until`, passing each echo to `each`.
fn receive_echoes(fd: &OwnedFd, until: Instant, mut each: impl FnMut(Echo)) {
    let mut batch = sys::PacketBatch::new(16, 2048).unwrap();
    while Instant::now() < until {
        let received = batch.recv(fd.as_fd(), 16).unwrap_or(0);
        for frame in batch.frames() {
            if let Some(echo) = parse_echo(frame.data, frame.vlan) {
                each(echo);
            }
        }
        if received == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Numbered UDP datagrams from `ha` to an echo in `hb` (the hosts' kernels, untagged, ARP
/// across the tunnel first): how many came back of `count`.
fn udp_echoes(sites: &Sites, count: u64) -> u64 {
    let echoer = echo(&sites.hb, HB, 7);
    let answered = sites
        .ha
        .run(move || {
            let socket = UdpSocket::bind((HA, 0)).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut answered = 0;
            let mut buf = [0u8; 64];
            for n in 0..count {
                socket.send_to(&n.to_be_bytes(), (HB, 7)).unwrap();
                if let Ok(len) = socket.recv(&mut buf) {
                    answered += u64::from(len == 8);
                }
            }
            let _ = socket.send_to(b"stop", (HB, 7));
            answered
        })
        .unwrap();
    echoer.join().unwrap();
    answered
}

#[test]
fn tap_carries_two_vlans_and_qinq_across_the_tunnel_with_their_tags_intact() {
    let Some(_serial) = privileged_paired("tap_carries_two_vlans_and_qinq_across_the_tunnel")
    else {
        return;
    };
    let dir = TempDir::new("bond-tap");
    // Keys, not a shared one: the server's one --peer owns the bridge.
    let keys = TapKeys::make(&dir);
    let sites = Sites::build();
    let server = start_the_tap_server(&sites, &keys);
    let client = start_the_tap_client(&sites, &keys);
    server.wait_for("1 client(s) connected");
    // The default MTU: 1472-byte datagrams less the tunnel's 46 bytes, the Ethernet
    // header and one VLAN tag.
    client.wait_for("tapc is up, MTU 1408");

    // The hosts' kernels, untagged: ARP and UDP across the bridged tunnel.
    let answered = udp_echoes(&sites, 10);
    eprintln!("untagged UDP between the hosts' kernels: {answered} of 10 answered");
    assert_eq!(answered, 10, "untagged UDP across the TAPs");

    // Tagged: hb's packet socket answers each ping in its VLAN, with the request's tags.
    let (ha_socket, hb_socket) = (packet_socket(&sites.ha), packet_socket(&sites.hb));
    let (requests, replies) = ping_in_each_vlan(&ha_socket, hb_socket);
    check_each_vlan_crossed_with_its_tags(&requests, &replies);
    check_the_final_counters(server, client);
    drop(sites);
}

/// Each end's key file and public key.
struct TapKeys {
    server: (String, String),
    client: (String, String),
}

impl TapKeys {
    fn make(dir: &TempDir) -> TapKeys {
        let make = |name: &str| {
            let path = dir.path(name).to_str().unwrap().to_owned();
            let output = util::emulated::pathlab(&["bond", "key", &path]);
            assert!(output.status.success(), "{output:?}");
            (
                path,
                String::from_utf8_lossy(&output.stdout).trim().to_owned(),
            )
        };
        TapKeys {
            server: make("server.key"),
            client: make("client.key"),
        }
    }
}

/// The options both ends share: a TAP device `tap` in the bridge `bridge`, final stats as
/// JSON.
fn tap_args(tap: &str, bridge: &str) -> Vec<String> {
    ["--tap", "--tun", tap, "--bridge", bridge, "-J"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

/// The server end in `sites.srv`, its TAP `taps` in the bridge `brs`, the client its one
/// peer; returns once it is up.
fn start_the_tap_server(sites: &Sites, keys: &TapKeys) -> Tunnel {
    let mut server_args = vec![
        "server".to_owned(),
        "--listen".to_owned(),
        format!("{SERVER_LO}:7000"),
        "--key".to_owned(),
        keys.server.0.clone(),
        "--peer".to_owned(),
        format!("site,key={}", keys.client.1),
    ];
    server_args.extend(tap_args("taps", "brs"));
    let server = Tunnel::start(&sites.srv, &server_args);
    server.wait_for("is up");
    server
}

/// The client end in `sites.site` over every line, its TAP `tapc` in the bridge `brc`;
/// returns once its session is open.
fn start_the_tap_client(sites: &Sites, keys: &TapKeys) -> Tunnel {
    let mut client_args = vec![
        "client".to_owned(),
        format!("{SERVER_LO}:7000"),
        "--key".to_owned(),
        keys.client.0.clone(),
        "--server-key".to_owned(),
        keys.server.1.clone(),
    ];
    client_args.extend(Sites::line_args());
    client_args.extend(tap_args("tapc", "brc"));
    let client = Tunnel::start(&sites.site, &client_args);
    client.wait_for("session");
    client
}

/// Pings from ha's packet socket `ha_socket` in every VLAN, [`PINGS`] times, while
/// `hb_socket` answers each request in its VLAN with the request's tags: the requests hb
/// saw and the replies ha saw.
fn ping_in_each_vlan(ha_socket: &OwnedFd, hb_socket: OwnedFd) -> (Vec<Echo>, Vec<Echo>) {
    let deadline = Instant::now() + Duration::from_secs(PINGS as u64 / 50 * 3 + 3);
    let responder = std::thread::spawn(move || {
        let mut requests: Vec<Echo> = Vec::new();
        receive_echoes(&hb_socket, deadline, |echo| {
            if !echo.request {
                return; // its own answers, seen going out
            }
            let reply = icmp_frame(
                &echo.tags,
                (echo.macs.1, echo.macs.0),
                (echo.addresses.1, echo.addresses.0),
                false,
                echo.seq,
            );
            sys::send(hb_socket.as_fd(), &reply, 0).unwrap();
            requests.push(echo);
        });
        requests
    });
    let ha_sender = ha_socket.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for seq in 0..PINGS as u16 {
            for vlan in VLANS {
                let request = icmp_frame(
                    vlan.tags,
                    (vlan.mac_a, vlan.mac_b),
                    (vlan.ip_a, vlan.ip_b),
                    true,
                    seq,
                );
                sys::send(ha_sender.as_fd(), &request, 0).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut replies: Vec<Echo> = Vec::new();
    receive_echoes(ha_socket, deadline, |echo| {
        if !echo.request {
            replies.push(echo);
        }
    });
    sender.join().unwrap();
    let requests = responder.join().unwrap();
    (requests, replies)
}

/// Each VLAN's requests arrived at hb and its answers at ha, every one with its tags and
/// addresses unchanged; nothing arrived that was not sent.
fn check_each_vlan_crossed_with_its_tags(requests: &[Echo], replies: &[Echo]) {
    for (k, vlan) in VLANS.iter().enumerate() {
        let expected = |request: bool| Echo {
            tags: vlan.tags.to_vec(),
            macs: if request {
                (vlan.mac_a, vlan.mac_b)
            } else {
                (vlan.mac_b, vlan.mac_a)
            },
            addresses: if request {
                (vlan.ip_a, vlan.ip_b)
            } else {
                (vlan.ip_b, vlan.ip_a)
            },
            request,
            seq: 0,
        };
        let mine = |echoes: &[Echo], request: bool| -> Vec<u16> {
            let want = expected(request);
            echoes
                .iter()
                .filter(|e| e.macs == want.macs)
                .inspect(|e| {
                    assert_eq!(
                        (&e.tags, e.addresses),
                        (&want.tags, want.addresses),
                        "VLAN {k}: a frame of its MACs arrived changed"
                    );
                })
                .map(|e| e.seq)
                .collect()
        };
        let (asked, answered) = (mine(requests, true), mine(replies, false));
        eprintln!(
            "VLAN tags {}: {} of {PINGS} requests arrived at hb with their tags, {} answers at ha",
            vlan.tags
                .iter()
                .map(|(tpid, vid)| format!("{tpid:#06x}/{vid}"))
                .collect::<Vec<_>>()
                .join(" "),
            asked.len(),
            answered.len()
        );
        let all: Vec<u16> = (0..PINGS as u16).collect();
        assert_eq!(asked, all, "VLAN {:?}: requests", vlan.tags);
        assert_eq!(answered, all, "VLAN {:?}: answers", vlan.tags);
    }
    // Nothing arrived that was not sent: every echo is one of the VLANs' own.
    for echo in requests.iter().chain(replies) {
        assert!(
            VLANS.iter().any(|v| v.tags == echo.tags.as_slice()
                && (echo.macs == (v.mac_a, v.mac_b) || echo.macs == (v.mac_b, v.mac_a))),
            "a frame no VLAN sent: {echo:?}"
        );
    }
}

/// Stops the `server` first (a client that stops first closes its session there), then
/// the `client`: each carried every ping's frames, by its final stats.
fn check_the_final_counters(server: Tunnel, client: Tunnel) {
    let final_stats = |tunnel: Tunnel| {
        let (status, stdout) = tunnel.stop_with_output();
        assert!(status.success(), "{status:?}");
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()
    };
    let server_stats = final_stats(server);
    let client_stats = final_stats(client);
    let inner = |stats: &serde_json::Value, field: &str| {
        stats["sessions"][0]["counters"][field].as_u64().unwrap()
    };
    let frames = PINGS as u64 * VLANS.len() as u64;
    eprintln!(
        "client: {} frames in, {} out; server: {} in, {} out",
        inner(&client_stats, "inner_in"),
        inner(&client_stats, "inner_out"),
        inner(&server_stats, "inner_in"),
        inner(&server_stats, "inner_out"),
    );
    assert!(inner(&client_stats, "inner_in") >= frames);
    assert!(inner(&server_stats, "inner_out") >= frames);
}

#[test]
fn tap_options_that_make_no_sense_exit_2_naming_them() {
    let dir = TempDir::new("bond-tap-usage");
    let key = dir.path("bond.key");
    let output = util::emulated::pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let key = key.to_str().unwrap();
    let public = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let peer = |name: &str, allowed: &str| format!("{name},key={public}{allowed}");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "server",
                "--listen",
                "127.0.0.1:7000",
                "--psk",
                key,
                "--tap",
                "--route",
                "198.18.5.0/24",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            "--route",
        ),
        (
            vec![
                "server".to_owned(),
                "--listen".to_owned(),
                "127.0.0.1:7000".to_owned(),
                "--key".to_owned(),
                key.to_owned(),
                "--tap".to_owned(),
                "--peer".to_owned(),
                peer("a", ""),
                "--peer".to_owned(),
                format!("b,key={}", "11".repeat(32)),
            ],
            "2 peers",
        ),
        (
            vec![
                "server".to_owned(),
                "--listen".to_owned(),
                "127.0.0.1:7000".to_owned(),
                "--key".to_owned(),
                key.to_owned(),
                "--tap".to_owned(),
                "--peer".to_owned(),
                peer("a", ",allowed=198.18.5.0/24"),
            ],
            "allowed=",
        ),
        (
            vec![
                "client",
                "127.0.0.1:7000",
                "--psk",
                key,
                "--line",
                "lo",
                "--bridge",
                "br0",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            "--tap",
        ),
    ];
    // Keys that roll over faster than 10 s, or at no time at all (issue 40).
    let rekey = ["1s", "soon"].map(|after| {
        (
            [
                "client",
                "127.0.0.1:7000",
                "--psk",
                key,
                "--line",
                "lo",
                "--rekey-after",
                after,
            ]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>(),
            "--rekey-after",
        )
    });
    for (args, named) in cases.into_iter().chain(rekey) {
        let mut full = vec!["bond"];
        full.extend(args.iter().map(String::as_str));
        let output = util::emulated::pathlab(&full);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?} should name {named}: {stderr}"
        );
    }
}

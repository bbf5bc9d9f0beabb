//! `pathlab bond` left running, in namespaces (issue 27): a server killed with SIGKILL and
//! restarted is back within a second; a server listening on 0.0.0.0 whose address is on
//! `lo`, behind three lines, answers from that address; two clients with keys of their own,
//! one sending from the other's inner addresses, are kept apart.
//!
//! The site and the server are two namespaces joined by three veth pairs (line `k`:
//! 198.18.1k.1 at the site, 198.18.1k.2 at the server). Inner traffic is UDP between the
//! tunnel's addresses, echoed by a thread in the server's namespace.

use crate::util;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::util::emulated::privileged_paired;
use crate::util::tunnel::{echo, Tunnel};
use crate::util::TempDir;
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;

const SERVER_LO: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

/// The two namespaces and their lines.
struct Sites {
    site: Netns,
    srv: Netns,
    lines: usize,
}

fn line_site(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + k as u8, 1)
}

fn line_srv(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + k as u8, 2)
}

impl Sites {
    /// `lines` veth pairs between a site and a server namespace; the server's tunnel
    /// address 198.18.0.1 on its `lo`.
    fn build(lines: usize) -> Sites {
        let site = pathlab_os::testing::netns_with_loopback().unwrap();
        let srv = pathlab_os::testing::netns_with_loopback().unwrap();
        let srv_fd = srv.try_clone().unwrap();
        site.run(move || {
            let mut nl = Netlink::open().unwrap();
            for k in 0..lines {
                nl.create_veth(&format!("line{k}"), &format!("isp{k}"), Some(srv_fd.fd()))
                    .unwrap();
                let link = nl.link_by_name(&format!("line{k}")).unwrap().unwrap();
                nl.add_address(link.index, line_site(k).into(), 24, None)
                    .unwrap();
                nl.set_up(link.index, true).unwrap();
            }
        })
        .unwrap();
        srv.run(move || {
            let mut nl = Netlink::open().unwrap();
            for k in 0..lines {
                let link = nl.link_by_name(&format!("isp{k}")).unwrap().unwrap();
                nl.add_address(link.index, line_srv(k).into(), 24, None)
                    .unwrap();
                nl.set_up(link.index, true).unwrap();
            }
            let lo = nl.link_by_name("lo").unwrap().unwrap();
            nl.add_address(lo.index, SERVER_LO.into(), 32, None)
                .unwrap();
        })
        .unwrap();
        Sites { site, srv, lines }
    }

    /// `--line lineK,via=GATEWAY` for every line: the server's address is beyond each.
    fn line_args(&self) -> Vec<String> {
        (0..self.lines)
            .flat_map(|k| ["--line".to_owned(), format!("line{k},via={}", line_srv(k))])
            .collect()
    }
}

/// Sends a numbered datagram every `every` from `from` to `to` in `netns` for `total`;
/// returns, per datagram, when it was sent and when its echo came back (if it did).
fn probe(
    netns: &Netns,
    from: Ipv4Addr,
    to: SocketAddr,
    every: Duration,
    total: Duration,
) -> Vec<(Instant, Option<Instant>)> {
    netns
        .run(move || {
            let socket = UdpSocket::bind((from, 0)).unwrap();
            socket.set_nonblocking(true).unwrap();
            let start = Instant::now();
            let mut sent: Vec<(Instant, Option<Instant>)> = Vec::new();
            let mut buf = [0u8; 64];
            while start.elapsed() < total {
                let n = sent.len() as u64;
                let _ = socket.send_to(&n.to_be_bytes(), to);
                sent.push((Instant::now(), None));
                let until = Instant::now() + every;
                while Instant::now() < until {
                    while let Ok((len, _)) = socket.recv_from(&mut buf) {
                        if len == 8 {
                            let k = u64::from_be_bytes(buf[..8].try_into().unwrap()) as usize;
                            if let Some(entry) = sent.get_mut(k) {
                                entry.1.get_or_insert(Instant::now());
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let _ = socket.send_to(b"stop", to);
            sent
        })
        .unwrap()
}

fn write_key(dir: &TempDir, name: &str) -> (String, String) {
    let path = dir.path(name);
    let output = util::emulated::pathlab(&["bond", "key", path.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    (
        path.to_str().unwrap().to_owned(),
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    )
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_server_killed_and_restarted_carries_traffic_again_within_a_second() {
    let Some(_serial) = privileged_paired("a_server_killed_and_restarted") else {
        return;
    };
    let dir = TempDir::new("bond-restart");
    let (key, _) = write_key(&dir, "bond.key");
    let sites = Sites::build(3);
    let server_args = args(&[
        "server",
        "--listen",
        "0.0.0.0:7000",
        "--psk",
        &key,
        "--address",
        "198.19.0.1/24",
        "--name",
        "restart-srv",
    ]);
    let mut server = Tunnel::start(&sites.srv, &server_args);
    server.wait_for("server listening");
    let mut client_args = args(&["client", "198.18.0.1:7000", "--psk", &key]);
    client_args.extend(sites.line_args());
    client_args.extend(args(&[
        "--address",
        "198.19.0.2/24",
        "--name",
        "restart-cl",
    ]));
    let client = Tunnel::start(&sites.site, &client_args);
    client.wait_for("session");
    let echoer = echo(&sites.srv, Ipv4Addr::new(198, 19, 0, 1), 9000);
    let to = SocketAddr::from(([198, 19, 0, 1], 9000));
    let (sites_probe, kill_after) = (sites.site.try_clone().unwrap(), Duration::from_secs(2));
    let prober = std::thread::spawn(move || {
        probe(
            &sites_probe,
            Ipv4Addr::new(198, 19, 0, 2),
            to,
            Duration::from_millis(10),
            Duration::from_secs(6),
        )
    });
    std::thread::sleep(kill_after);
    server.kill();
    std::thread::sleep(Duration::from_millis(500));
    let restarted_at = Instant::now();
    let restarted = Tunnel::start(&sites.srv, &server_args);
    restarted.wait_for("server listening");
    let listening_at = Instant::now();
    let samples = prober.join().unwrap();
    echoer.join().unwrap();
    let first_back = samples
        .iter()
        .filter(|(sent, _)| *sent >= restarted_at)
        .find_map(|(_, back)| *back)
        .expect("traffic flows again after the restart");
    let after = first_back.saturating_duration_since(restarted_at);
    let lost_before = samples
        .iter()
        .filter(|(sent, back)| {
            restarted_at
                .checked_sub(Duration::from_millis(600))
                .is_some_and(|t| *sent < t)
                && back.is_none()
        })
        .count();
    eprintln!(
        "first echo {:.0} ms after the restart ({:.0} ms after it listened); {lost_before} lost before the kill",
        after.as_secs_f64() * 1e3,
        first_back.saturating_duration_since(listening_at).as_secs_f64() * 1e3,
    );
    assert!(after < Duration::from_secs(1), "{after:?}");
    // After recovery, the echoes keep coming.
    let late: Vec<_> = samples
        .iter()
        .filter(|(sent, _)| *sent > first_back + Duration::from_millis(100))
        .collect();
    let answered = late.iter().filter(|(_, back)| back.is_some()).count();
    assert!(
        late.len() >= 10 && answered * 10 >= late.len() * 8,
        "{answered} of {} ({} samples in all, the first at {:?} before the restart, the last {:?} after): {:?}",
        late.len(),
        samples.len(),
        restarted_at.saturating_duration_since(samples[0].0),
        samples.last().unwrap().0.saturating_duration_since(restarted_at),
        client.log.lines()
    );
    let stats = sites
        .site
        .run(|| pathlab_bond_driver::tunnel::request_stats("restart-cl"))
        .unwrap()
        .unwrap();
    assert_eq!(
        stats.sessions[0].counters.reconnects, 1,
        "{:?}",
        stats.sessions[0].counters
    );
    drop(client);
    drop(restarted);
}

#[test]
fn a_server_on_0_0_0_0_with_its_address_on_lo_answers_from_it_over_three_lines() {
    let Some(_serial) = privileged_paired("a_server_on_0_0_0_0") else {
        return;
    };
    let dir = TempDir::new("bond-lo");
    let (key, _) = write_key(&dir, "bond.key");
    let sites = Sites::build(3);
    let server = Tunnel::start(
        &sites.srv,
        &args(&[
            "server",
            "--listen",
            "0.0.0.0:7000",
            "--psk",
            &key,
            "--address",
            "198.19.0.1/24",
            "--name",
            "lo-srv",
        ]),
    );
    server.wait_for("server listening");
    let mut client_args = args(&["client", "198.18.0.1:7000", "--psk", &key]);
    client_args.extend(sites.line_args());
    client_args.extend(args(&["--address", "198.19.0.2/24", "--name", "lo-cl"]));
    let mut client = Tunnel::start(&sites.site, &client_args);
    client.wait_for("session");
    let echoer = echo(&sites.srv, Ipv4Addr::new(198, 19, 0, 1), 9001);
    let samples = probe(
        &sites.site,
        Ipv4Addr::new(198, 19, 0, 2),
        SocketAddr::from(([198, 19, 0, 1], 9001)),
        Duration::from_millis(5),
        Duration::from_secs(2),
    );
    echoer.join().unwrap();
    let answered = samples.iter().filter(|(_, back)| back.is_some()).count();
    assert!(
        answered * 10 >= samples.len() * 9,
        "{answered} of {}",
        samples.len()
    );
    let stats = sites
        .site
        .run(|| pathlab_bond_driver::tunnel::request_stats("lo-cl"))
        .unwrap()
        .unwrap();
    // Every line heard the server, from the address it wrote to (on lo), not from the
    // address of the interface the route picks (198.18.1k.2): the server answered each
    // datagram from the address it came to.
    for line in &stats.sessions[0].lines {
        assert!(line.counters.received_packets > 10, "{line:?}");
        assert_eq!(line.peer_address, "198.18.0.1:7000", "{line:?}");
    }
    // A clean stop sends a Close: the server frees the slot at once.
    assert!(client.stop().success());
    server.wait_for("0 client(s) connected");
}

#[test]
fn two_clients_with_their_own_keys_are_kept_apart() {
    let Some(_serial) = privileged_paired("two_clients_with_their_own_keys") else {
        return;
    };
    let dir = TempDir::new("bond-peers");
    let (server_key, server_public) = write_key(&dir, "server.key");
    let (a_key, a_public) = write_key(&dir, "a.key");
    let (b_key, b_public) = write_key(&dir, "b.key");
    let sites = Sites::build(2);
    let site_b = pathlab_os::testing::netns_with_loopback().unwrap();
    let server = start_the_peers_server(&sites, &server_key, &a_public, &b_public);
    // Site A on line 0; site B (its own namespace) reaches the server over line 1, moved.
    move_line_1_to_site_b(&sites, &site_b);
    let client_a = start_client_a(&sites, &a_key, &server_public);
    let client_b = start_client_b(&site_b, &b_key, &server_public);
    server.wait_for("2 client(s) connected");
    let (own, spoofing, honest) = probe_from_a_as_itself_and_as_b_and_from_b(&sites, &site_b);
    check_only_the_spoofed_traffic_is_dropped(&sites, &own, &spoofing, &honest);
    drop(client_a);
    drop(client_b);
    drop(server);
}

/// The server of two peers with their own keys, site A (`a_public`, 198.19.1.0/24) and
/// site B (`b_public`, 198.19.2.0/24), in `sites.srv`; returns once both are known.
fn start_the_peers_server(
    sites: &Sites,
    server_key: &str,
    a_public: &str,
    b_public: &str,
) -> Tunnel {
    let server = Tunnel::start(
        &sites.srv,
        &args(&[
            "server",
            "--listen",
            "0.0.0.0:7000",
            "--key",
            server_key,
            "--peer",
            &format!("site-a,key={a_public},allowed=198.19.1.0/24"),
            "--peer",
            &format!("site-b,key={b_public},allowed=198.19.2.0/24"),
            "--address",
            "198.19.1.1/24",
            "--address",
            "198.19.2.1/24",
            "--name",
            "peers-srv",
        ]),
    );
    server.wait_for("2 peer(s)");
    server
}

/// Moves line 1 from `sites.site` into `site_b` and gives it site B's line address.
fn move_line_1_to_site_b(sites: &Sites, site_b: &Netns) {
    let b_fd = site_b.try_clone().unwrap();
    sites
        .site
        .run(move || {
            let mut nl = Netlink::open().unwrap();
            let link = nl.link_by_name("line1").unwrap().unwrap();
            nl.move_to_netns(link.index, b_fd.fd()).unwrap();
        })
        .unwrap();
    site_b
        .run(|| {
            let mut nl = Netlink::open().unwrap();
            let link = nl.link_by_name("line1").unwrap().unwrap();
            nl.add_address(link.index, line_site(1).into(), 24, None)
                .unwrap();
            nl.set_up(link.index, true).unwrap();
        })
        .unwrap();
}

/// Site A's client, on line 0 with its key `a_key`, claiming site B's address too;
/// returns once its session is open.
fn start_client_a(sites: &Sites, a_key: &str, server_public: &str) -> Tunnel {
    let client_a = Tunnel::start(
        &sites.site,
        &args(&[
            "client",
            "198.18.0.1:7000",
            "--key",
            a_key,
            "--server-key",
            server_public,
            "--line",
            &format!("line0,via={}", line_srv(0)),
            "--address",
            "198.19.1.2/24",
            // Site A also claims site B's address: what it sends from there is dropped.
            "--address",
            "198.19.2.2/24",
            "--name",
            "peers-a",
        ]),
    );
    client_a.wait_for("session");
    client_a
}

/// Site B's client in `site_b`, on line 1 with its key `b_key`; returns once its session
/// is open.
fn start_client_b(site_b: &Netns, b_key: &str, server_public: &str) -> Tunnel {
    let client_b = Tunnel::start(
        site_b,
        &args(&[
            "client",
            "198.18.0.1:7000",
            "--key",
            b_key,
            "--server-key",
            server_public,
            "--line",
            &format!("line1,via={}", line_srv(1)),
            "--address",
            "198.19.2.3/24",
            "--name",
            "peers-b",
        ]),
    );
    client_b.wait_for("session");
    client_b
}

/// One probe's samples, as [`probe`] gives them: when each datagram went, and when its
/// echo came back.
type ProbeSamples = Vec<(Instant, Option<Instant>)>;

/// Probes the server's echoes through the tunnel from site A's own address, from A as
/// site B's address, and (meanwhile) from site B: the three probes' samples, in that
/// order.
fn probe_from_a_as_itself_and_as_b_and_from_b(
    sites: &Sites,
    site_b: &Netns,
) -> (ProbeSamples, ProbeSamples, ProbeSamples) {
    let echo_a = echo(&sites.srv, Ipv4Addr::new(198, 19, 1, 1), 9002);
    let echo_b = echo(&sites.srv, Ipv4Addr::new(198, 19, 2, 1), 9003);
    let to_b = SocketAddr::from(([198, 19, 2, 1], 9003));
    let site_b_probe = site_b.try_clone().unwrap();
    let honest_b = std::thread::spawn(move || {
        probe(
            &site_b_probe,
            Ipv4Addr::new(198, 19, 2, 3),
            to_b,
            Duration::from_millis(10),
            Duration::from_secs(2),
        )
    });
    // A's own address works; A's use of B's prefix reaches nothing.
    let own = probe(
        &sites.site,
        Ipv4Addr::new(198, 19, 1, 2),
        SocketAddr::from(([198, 19, 1, 1], 9002)),
        Duration::from_millis(10),
        Duration::from_secs(1),
    );
    let spoofing = probe(
        &sites.site,
        Ipv4Addr::new(198, 19, 2, 2),
        SocketAddr::from(([198, 19, 2, 1], 9003)),
        Duration::from_millis(10),
        Duration::from_secs(1),
    );
    let honest = honest_b.join().unwrap();
    echo_a.join().unwrap();
    // The spoofer's "stop" never arrived either: B's prober sent its own.
    echo_b.join().unwrap();
    (own, spoofing, honest)
}

/// A's own address works, A's use of B's prefix reached nothing (the server counted it
/// spoofed) and B's traffic still reached B; the server holds one session per peer.
fn check_only_the_spoofed_traffic_is_dropped(
    sites: &Sites,
    own: &[(Instant, Option<Instant>)],
    spoofing: &[(Instant, Option<Instant>)],
    honest: &[(Instant, Option<Instant>)],
) {
    let count = |samples: &[(Instant, Option<Instant>)]| {
        samples.iter().filter(|(_, back)| back.is_some()).count()
    };
    eprintln!(
        "A own {}/{}, A as B {}/{}, B {}/{}",
        count(own),
        own.len(),
        count(spoofing),
        spoofing.len(),
        count(honest),
        honest.len()
    );
    assert!(count(own) * 10 >= own.len() * 9);
    assert_eq!(count(spoofing), 0, "nothing from B's prefix through A");
    assert!(
        count(honest) * 10 >= honest.len() * 9,
        "B's traffic still reaches B"
    );
    let stats = sites
        .srv
        .run(|| pathlab_bond_driver::tunnel::request_stats("peers-srv"))
        .unwrap()
        .unwrap();
    let server_counters = stats.server.unwrap();
    assert!(
        server_counters.spoofed_sources as usize >= spoofing.len() - 5,
        "{server_counters:?}"
    );
    let mut peers: Vec<&str> = stats.sessions.iter().map(|s| s.peer.as_str()).collect();
    peers.sort_unstable();
    assert_eq!(peers, ["site-a", "site-b"]);
}

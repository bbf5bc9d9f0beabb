//! `pathlab server` under abuse, on loopback and bounded in time: 2,000 idle connections,
//! one address over its `--max-clients`, garbage on TCP and on a test's UDP port; a real
//! client still gets an exact result, the server's threads and memory stay bounded, and
//! SIGTERM ends it (and tells a running test's client) promptly.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pathlab_probe::control::{Direction, Refusal};
use pathlab_probe::session::SessionError;
use pathlab_probe_driver::{Client, MeasureError};

use crate::util::server_process::ServerProcess;
use crate::util::TestLock;

/// A TCP connection to `server` from `source` (a loopback address of 127/8).
fn connect_from(source: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    pathlab_os::testing::tcp_connect_from(IpAddr::V4(source), server)
}

/// Whether the server closed `stream` (reads its end of file, or a reset), within 10 s.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sink = [0u8; 4096];
    loop {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}

#[test]
fn the_server_holds_under_two_thousand_idle_connections_and_garbage_and_stops_at_sigterm() {
    // 2,000 connections and garbage load the machine: never beside a timing test.
    let _lock = TestLock::shared();
    pathlab_os::testing::raise_open_files_limit();
    let server = ServerProcess::start(&["--max-clients", "8", "--max-handshakes", "256"]);
    let started = Instant::now();
    // 2,000 idle connections from 250 addresses, 8 each (within --max-clients).
    let mut idle = Vec::new();
    for i in 0..2000u32 {
        let source = Ipv4Addr::new(127, 0, 2 + (i / 8 / 250) as u8, 1 + ((i / 8) % 250) as u8);
        idle.push(connect_from(source, server.address).expect("connects"));
    }
    // One address over its bound: 8 held, the rest refused with the reason.
    let mut crowd: Vec<TcpStream> = (0..20)
        .map(|_| connect_from(Ipv4Addr::new(127, 0, 9, 1), server.address).unwrap())
        .collect();
    // Garbage on TCP: a frame claiming 4 GB, random bytes, a hello with a bad nonce.
    let mut garbage = Vec::new();
    for (i, bytes) in [
        vec![0xff, 0xff, 0xff, 0xff, 2, 0],
        (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
        {
            let body = br#"{"type":"hello","software":"x","nonce":"zz","authenticated":false}"#;
            let mut frame = ((body.len() + 10) as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            frame.extend_from_slice(body);
            frame
        },
    ]
    .into_iter()
    .enumerate()
    {
        let mut stream =
            connect_from(Ipv4Addr::new(127, 0, 10, 1 + i as u8), server.address).expect("connects");
        stream.write_all(&bytes).unwrap();
        garbage.push(stream);
    }
    // A real client, with garbage sprayed at its test's UDP port while it runs.
    let test = Client::connect(&server.address.to_string(), None, Duration::from_secs(10))
        .expect("a real client gets through")
        .start_one_way(Direction::Up, 2_000_000, 200, 1000, 50)
        .expect("its test is accepted");
    let (threads, rss_kib) = server.threads_and_rss();
    let sprayer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..500u32 {
        let junk: Vec<u8> = (0..200u32)
            .map(|j| (i ^ j).wrapping_mul(31) as u8)
            .collect();
        sprayer.send_to(&junk, test.server_probe_address()).unwrap();
    }
    let result = test.run().expect("the real test ends with its result");
    assert_eq!(result.sequence.received, 1000, "every probe counted");
    assert_eq!(result.rejected, 500, "every garbage datagram rejected");
    eprintln!(
        "2,000 idle connections + garbage: server {threads} threads, {:.1} MiB resident ({:.1} s in)",
        rss_kib as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    );
    // Threads: the main one and the running test's (the handshakes need none).
    assert!(
        threads <= 4,
        "{threads} threads with 2,000 idle connections"
    );
    assert!(rss_kib < 64 * 1024, "{rss_kib} KiB resident");
    // The crowd: 12 of 20 refused, each told why.
    let mut refusals = 0;
    for stream in &mut crowd {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        if String::from_utf8_lossy(&bytes).contains("too-many-clients") {
            refusals += 1;
        }
    }
    assert_eq!(refusals, 12, "the 9th to 20th connection from one address");
    // The garbage connections are closed by the server.
    for stream in &mut garbage {
        assert!(closed_by_server(stream));
    }
    // SIGTERM during a test: the client hears why, and the server exits.
    let long = std::thread::spawn({
        let address = server.address.to_string();
        move || {
            Client::connect(&address, None, Duration::from_secs(10))
                .and_then(|client| client.one_way(Direction::Up, 1_000_000, 200, 20_000, 50))
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut server = server;
    let (status, took) = server.terminate(Duration::from_secs(10));
    eprintln!("SIGTERM to exit: {:.0} ms", took.as_secs_f64() * 1e3);
    assert!(status.success(), "{status:?}");
    match long.join().unwrap() {
        Err(MeasureError::Session(SessionError::Remote { message: why, .. })) => {
            assert!(why.contains("shutting down"), "{why}");
        }
        other => panic!("the running test's client was not told: {other:?}"),
    }
    let log = server.log_lines();
    let stop = log
        .iter()
        .find(|line| line.starts_with("pathlab server: stopped"))
        .expect("a stop line");
    eprintln!("{stop}");
    assert!(stop.contains("12 over --max-clients"), "{stop}");
    drop(idle);
}

#[test]
fn a_refusal_for_too_many_connections_is_a_clear_error() {
    let server = ServerProcess::start(&["--max-clients", "1"]);
    let _held = TcpStream::connect(server.address).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    match Client::connect(&server.address.to_string(), None, Duration::from_secs(5)) {
        Err(MeasureError::Session(SessionError::Refused(Refusal::TooManyClients {
            max_clients: 1,
        }))) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
}

//! The TCP sockets of a network namespace, any process's, as the kernel describes them
//! (NETLINK_SOCK_DIAG, `ss`'s source): addresses, queues, `tcp_info`, congestion control
//! and memory, for `pathlab inspect`.
//!
//! The kernel gives every socket's `tcp_info` to any caller; what needs privileges is
//! finding a process's sockets (`/proc/PID/fd` of another user's process) and looking
//! into another network namespace (`setns`, CAP_SYS_ADMIN). [`process_sockets`] says
//! which it was when it cannot.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use pathlab_diagnose::diagnosis::{SocketMemory, SocketSample, TcpInfo};

use pathlab_os::netlink::{attributes, Netlink};

/// `SOCK_DIAG_BY_FAMILY`: the request type of an inet dump.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// Attributes of a reply (`INET_DIAG_*`).
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_SKMEMINFO: u16 = 7;
/// `idiag_ext` asks for attribute N with bit N - 1.
const EXTENSIONS: u8 =
    (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1)) | (1 << (INET_DIAG_SKMEMINFO - 1));
/// Every state a connection moves data in or winds down from (`1 << TCP_*`): established,
/// syn-sent, syn-recv, fin-wait-1, fin-wait-2, close-wait, last-ack, closing. Listening,
/// time-wait and closed sockets carry no transfer.
const STATES: u32 =
    (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 8) | (1 << 9) | (1 << 11);

/// `struct inet_diag_msg`: offsets, and its length (attributes follow).
mod msg {
    pub const FAMILY: usize = 0;
    pub const SPORT: usize = 4;
    pub const DPORT: usize = 6;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
    pub const COOKIE: usize = 44;
    pub const RQUEUE: usize = 56;
    pub const WQUEUE: usize = 60;
    pub const UID: usize = 64;
    pub const INODE: usize = 68;
    pub const LEN: usize = 72;
}

/// Every TCP socket of the calling thread's network namespace (IPv4 and IPv6) in the states
/// of a transfer, stamped `at_ns`.
pub fn tcp_sockets(at_ns: u64) -> io::Result<Vec<SocketSample>> {
    let mut netlink = Netlink::open_protocol(libc::NETLINK_SOCK_DIAG)?;
    let mut samples = Vec::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        // struct inet_diag_req_v2: family, protocol, extensions, pad, states, and a zero
        // socket id (every socket).
        let mut request = vec![0u8; 56];
        request[0] = family;
        request[1] = libc::IPPROTO_TCP as u8;
        request[2] = EXTENSIONS;
        request[4..8].copy_from_slice(&STATES.to_ne_bytes());
        for reply in netlink.dump_raw(SOCK_DIAG_BY_FAMILY, &request)? {
            if let Some(sample) = parse_reply(&reply, at_ns) {
                samples.push(sample);
            }
        }
    }
    Ok(samples)
}

/// One `inet_diag_msg` with its attributes; `None` for a reply too short or of another
/// family.
fn parse_reply(bytes: &[u8], at_ns: u64) -> Option<SocketSample> {
    let header = bytes.get(..msg::LEN)?;
    let family = i32::from(header[msg::FAMILY]);
    let address = |at: usize| -> Option<IpAddr> {
        match family {
            libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::from(
                <[u8; 4]>::try_from(&header[at..at + 4]).ok()?,
            ))),
            libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(
                <[u8; 16]>::try_from(&header[at..at + 16]).ok()?,
            ))),
            _ => None,
        }
    };
    let port = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
    let word = |at: usize| u32::from_ne_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let mut sample = SocketSample {
        at_ns,
        local: SocketAddr::new(address(msg::SRC)?, port(msg::SPORT)),
        remote: SocketAddr::new(address(msg::DST)?, port(msg::DPORT)),
        cookie: u64::from(word(msg::COOKIE)) | (u64::from(word(msg::COOKIE + 4)) << 32),
        inode: u64::from(word(msg::INODE)),
        uid: word(msg::UID),
        send_queue: word(msg::WQUEUE),
        recv_queue: word(msg::RQUEUE),
        congestion: None,
        info: None,
        memory: None,
    };
    for (kind, payload) in attributes(&bytes[msg::LEN..]) {
        match kind {
            INET_DIAG_INFO => sample.info = Some(TcpInfo::parse(payload)),
            INET_DIAG_CONG => {
                let end = payload
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(payload.len());
                sample.congestion = Some(String::from_utf8_lossy(&payload[..end]).into_owned());
            }
            INET_DIAG_SKMEMINFO => sample.memory = Some(SocketMemory::parse(payload)),
            _ => {}
        }
    }
    Some(sample)
}

/// The inodes of the sockets process `pid` holds open (its `/proc/PID/fd` links of the form
/// `socket:[N]`). Reading another user's process needs root (or CAP_SYS_PTRACE): the error
/// says so.
pub fn process_sockets(pid: u32) -> io::Result<HashSet<u64>> {
    let dir = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&dir).map_err(|error| {
        let why = match error.kind() {
            io::ErrorKind::NotFound => format!("no process {pid}"),
            io::ErrorKind::PermissionDenied => format!(
                "cannot read {dir}: process {pid} belongs to another user; run as its owner or \
                 as root to see its sockets"
            ),
            _ => format!("cannot read {dir}: {error}"),
        };
        io::Error::new(error.kind(), why)
    })?;
    let mut inodes = HashSet::new();
    for entry in entries.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue; // closed meanwhile
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|n| n.parse().ok())
        {
            inodes.insert(inode);
        }
    }
    Ok(inodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_connection_of_this_process_is_found_with_its_tcp_info_queues_and_memory() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let mut client = std::net::TcpStream::connect(server).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        client.write_all(&vec![7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 1000];
        accepted.read_exact(&mut got).unwrap();
        let local = client.local_addr().unwrap();
        let samples = tcp_sockets(5).unwrap();
        let mine = samples
            .iter()
            .find(|s| s.local == local && s.remote == server)
            .expect("the client's socket is listed");
        let info = mine.info.expect("tcp_info");
        assert_eq!(info.state_name(), "established");
        assert!(info.bytes_acked >= 1000, "{}", info.bytes_acked);
        assert!(mine.congestion.is_some());
        assert!(mine.memory.expect("memory").sndbuf > 0);
        assert_eq!(mine.at_ns, 5);
        let peer = samples
            .iter()
            .find(|s| s.local == server && s.remote == local)
            .expect("the accepted socket is listed");
        assert!(
            peer.recv_queue > 0,
            "99,000 bytes wait unread at the server: {}",
            peer.recv_queue
        );
        let inodes = process_sockets(std::process::id()).unwrap();
        assert!(inodes.contains(&mine.inode) && inodes.contains(&peer.inode));
        assert!(process_sockets(u32::MAX).is_err());
    }

    #[test]
    fn an_ipv6_connection_is_found_with_its_addresses() {
        let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
            // A machine without IPv6 on loopback has nothing to find.
            pathlab_os::testing::skipped(
                "an_ipv6_connection_is_found_with_its_addresses",
                "no IPv6 on loopback",
            );
            return;
        };
        let server = listener.local_addr().unwrap();
        let mut client = std::net::TcpStream::connect(server).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        client.write_all(b"hello").unwrap();
        let mut got = [0u8; 5];
        accepted.read_exact(&mut got).unwrap();
        let local = client.local_addr().unwrap();
        let mine = tcp_sockets(0)
            .unwrap()
            .into_iter()
            .find(|s| s.local == local && s.remote == server)
            .expect("the IPv6 socket is listed");
        assert!(mine.local.is_ipv6());
        assert!(mine.info.expect("tcp_info").bytes_acked >= 5);
    }
}

//! What namespace tests share, pathlab-io's own and the end-to-end tests in `tests/`: the
//! privileged-test gate.

/// The namespace tests build interfaces on a 2-core machine: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether the test may run (with the serializing guard): CAP_NET_ADMIN is needed; without
/// it the test panics in CI and is skipped elsewhere.
pub fn privileged(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if crate::require_net_admin("the namespace tests").is_ok() {
        return Some(
            ONE_AT_A_TIME
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: CI=true but this process lacks CAP_NET_ADMIN; CI must run the tests as root"
    );
    skipped(test, "needs CAP_NET_ADMIN (run the tests as root; CI does)");
    None
}

/// Says that `test` skipped and why: straight to stderr, past the test harness's capture,
/// so it is seen; and appended to the file `PATHLAB_SKIP_LOG` names, if any, which
/// `scripts/test` counts at the end of the run.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write as _;
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("PATHLAB_SKIP_LOG") {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// A TCP connection to `server` from the local address `source` (a loopback address of
/// 127/8, say, to look like many clients).
pub fn tcp_connect_from(
    source: std::net::IpAddr,
    server: std::net::SocketAddr,
) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::AsFd as _;
    let domain = if server.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let socket = crate::sys::socket(domain, libc::SOCK_STREAM, 0)?;
    crate::sys::bind(socket.as_fd(), std::net::SocketAddr::new(source, 0))?;
    crate::sys::connect(socket.as_fd(), server)?;
    Ok(std::net::TcpStream::from(socket))
}

pub use crate::sys::{raise_open_files_limit, send_signal};

/// A TCP listener on `address` whose sockets get a receive buffer of `bytes`
/// (`SO_RCVBUF`, set before `listen` so the accepted connections inherit it and their
/// window scale follows from it): a receiver whose window limits its sender.
pub fn tcp_listener_with_receive_buffer(
    address: std::net::SocketAddr,
    bytes: u32,
) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsFd as _;
    let domain = if address.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let socket = crate::sys::socket(domain, libc::SOCK_STREAM, 0)?;
    crate::sys::setsockopt(
        socket.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        &(bytes as libc::c_int),
    )?;
    crate::sys::bind(socket.as_fd(), address)?;
    crate::sys::listen(socket.as_fd(), 16)?;
    Ok(std::net::TcpListener::from(socket))
}

//! What namespace tests share, the crates' own and the end-to-end tests in `tests/`: the
//! privileged-test gate, the TCP sockets they measure with (made by [`tcp_socket`]), and
//! a scratch directory for the tests of files.

use crate::tcp_socket::{self, BufferLimit, TcpSocketOptions};

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
    tcp_socket::connect(server, Some(source), &TcpSocketOptions::default())
}

/// A TCP listener on `address` whose connections get a receive buffer of `receive` bytes
/// (as SO_RCVBUF: the kernel doubles it; past `rmem_max` with CAP_NET_ADMIN), set before
/// the handshake so the window scale follows it.
pub fn tcp_listen_with_receive_buffer(
    address: std::net::SocketAddr,
    receive: Option<usize>,
) -> std::io::Result<std::net::TcpListener> {
    let options = TcpSocketOptions {
        receive_buffer_bytes: receive,
        buffer_limit: BufferLimit::Forced,
        ..TcpSocketOptions::default()
    };
    tcp_socket::listen(address, &options)
}

/// A TCP connection to `server` with a send buffer of `send` bytes (as SO_SNDBUF; past
/// `wmem_max` with CAP_NET_ADMIN) and the congestion control `congestion`, where given,
/// set before it connects.
pub fn tcp_connect_with(
    server: std::net::SocketAddr,
    send: Option<usize>,
    congestion: Option<&str>,
) -> std::io::Result<std::net::TcpStream> {
    let options = TcpSocketOptions {
        send_buffer_bytes: send,
        buffer_limit: BufferLimit::Forced,
        congestion: congestion.map(str::to_owned),
        ..TcpSocketOptions::default()
    };
    tcp_socket::connect(server, None, &options)
}

pub use crate::sys::{raise_open_files_limit, send_signal};

/// A new network namespace with its loopback up (a fresh one has it down): what a test
/// that runs a program on 127.0.0.1 in a namespace of its own needs.
pub fn netns_with_loopback() -> std::io::Result<crate::netns::Netns> {
    let netns = crate::netns::Netns::new()?;
    netns.run(|| {
        let mut netlink = crate::netlink::Netlink::open()?;
        let lo = netlink
            .link_by_name("lo")?
            .ok_or_else(|| std::io::Error::other("no loopback"))?;
        netlink.set_up(lo.index, true)
    })??;
    Ok(netns)
}

/// A named network namespace, `/run/netns/NAME`, made as `ip netns add` makes one (a new
/// namespace bind-mounted on a file there) and deleted when dropped: something of
/// someone else's that `lab clean` must leave alone.
#[derive(Debug)]
pub struct NamedNetns {
    path: std::path::PathBuf,
}

impl NamedNetns {
    /// Makes `/run/netns/NAME`.
    pub fn add(name: &str) -> std::io::Result<NamedNetns> {
        let dir = std::path::Path::new("/run/netns");
        std::fs::create_dir_all(dir)?;
        let path = dir.join(name);
        std::fs::File::create_new(&path)?;
        let named = NamedNetns { path };
        let target = named.path.to_string_lossy().into_owned();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    crate::sys::unshare_netns()?;
                    crate::sys::bind_mount("/proc/thread-self/ns/net", &target)
                })
                .join()
                .expect("namespace thread does not panic")
        })?;
        Ok(named)
    }

    /// Its file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Whether it is still a namespace: its file is there with a namespace mounted on it
    /// (nsfs, another device than the directory's).
    pub fn exists(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        let device = |path: &std::path::Path| std::fs::metadata(path).map(|m| m.dev());
        match (device(&self.path), self.path.parent().map(device)) {
            (Ok(file), Some(Ok(dir))) => file != dir,
            _ => false,
        }
    }
}

impl Drop for NamedNetns {
    fn drop(&mut self) {
        let _ = crate::sys::unmount_detach(&self.path.to_string_lossy());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A scratch directory for one test, under the system's temporary directory, removed
/// when dropped: the crates' unit tests and the end-to-end tests (as `util::TempDir`) use
/// this one.
#[derive(Debug)]
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    /// A fresh, empty directory named after `name` and this process.
    pub fn new(name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("pathlab-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("can create a temp dir");
        ScratchDir(dir)
    }

    /// Its path.
    pub fn root(&self) -> &std::path::Path {
        &self.0
    }

    /// The path of `file` inside it.
    pub fn path(&self, file: &str) -> std::path::PathBuf {
        self.0.join(file)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

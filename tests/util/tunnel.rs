//! What the bond tests in namespaces share: a `pathlab bond` process, its stderr followed,
//! killed on drop; a UDP echo inside a namespace.

use std::net::{Ipv4Addr, UdpSocket};
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

use pathlab_os::netns::Netns;

use super::emulated::PATHLAB;
use super::output::OutputLog;

/// `pathlab bond ARGS` in a namespace; killed (and waited for) on drop.
pub struct Tunnel {
    pub child: Child,
    pub log: OutputLog,
}

impl Tunnel {
    /// Starts `pathlab bond` with `args` in `netns` (stdout kept for [`Tunnel::stop_with_output`]).
    pub fn start(netns: &Netns, args: &[impl AsRef<std::ffi::OsStr>]) -> Tunnel {
        let mut command = netns.command(PATHLAB);
        command
            .arg("bond")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        pathlab_os::die_with_spawner(&mut command);
        let mut child = command.spawn().expect("pathlab bond starts");
        let log = OutputLog::follow(&mut child);
        Tunnel { child, log }
    }

    /// Waits for a stderr line that contains `what`, and returns it.
    pub fn wait_for(&self, what: &str) -> String {
        self.log.wait_for_line(what, Duration::from_secs(10))
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as a user stops it, and its exit status.
    pub fn stop(&mut self) -> ExitStatus {
        pathlab_os::testing::send_signal(self.child.id(), super::emulated::libc_sigterm()).unwrap();
        self.child.wait().unwrap()
    }

    /// SIGTERM; its exit status and what it printed on stdout (the final stats).
    pub fn stop_with_output(mut self) -> (ExitStatus, String) {
        pathlab_os::testing::send_signal(self.child.id(), super::emulated::libc_sigterm()).unwrap();
        let mut text = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
        }
        (self.child.wait().unwrap(), text)
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An echo of UDP datagrams on `address:port` in `netns`, until the returned socket's
/// peer stops sending (a thread; it ends when the test sends "stop").
pub fn echo(netns: &Netns, address: Ipv4Addr, port: u16) -> std::thread::JoinHandle<()> {
    let netns = netns.try_clone().unwrap();
    let (ready, bound) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        netns.enter().unwrap();
        let socket = UdpSocket::bind((address, port)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        ready.send(()).unwrap();
        let mut buf = [0u8; 2048];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            if &buf[..len] == b"stop" {
                return;
            }
            let _ = socket.send_to(&buf[..len], from);
        }
    });
    bound.recv().unwrap();
    handle
}

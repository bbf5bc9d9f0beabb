//! Network namespaces, held by file descriptor.
//!
//! pathlab's namespaces are anonymous: a [`Netns`] is an open `/proc/thread-self/ns/net`
//! descriptor, and the kernel destroys the namespace, with every veth and address in it,
//! when the last descriptor or process inside it goes away. So a run that is killed with
//! SIGKILL leaves nothing behind, and `ip netns list` never shows pathlab's namespaces.
//! Work inside a namespace happens on a thread that entered it ([`Netns::run`]) or in a
//! child process that enters it before exec ([`Netns::command`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::Command;

use crate::netlink::Netlink;
use crate::sys;

/// A network namespace, alive while this value (or a process inside it) is.
#[derive(Debug)]
pub struct Netns {
    fd: OwnedFd,
}

impl Netns {
    /// The namespace the calling thread is in.
    pub fn current() -> io::Result<Netns> {
        let file = File::open("/proc/thread-self/ns/net")?;
        Ok(Netns { fd: file.into() })
    }

    /// A new, empty namespace with its loopback interface up.
    pub fn new() -> io::Result<Netns> {
        let netns = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    sys::unshare_netns()?;
                    Netns::current()
                })
                .join()
                .expect("namespace thread does not panic")
        })?;
        netns.run(|| {
            let mut netlink = Netlink::open()?;
            netlink.set_up(1, true)
        })??;
        Ok(netns)
    }

    /// Opens the namespace a file names (`/run/netns/NAME`, `/proc/PID/ns/net`).
    pub fn open(path: &Path) -> io::Result<Netns> {
        let file = File::open(path)?;
        Ok(Netns { fd: file.into() })
    }

    /// Runs `work` on a thread inside this namespace and returns its result. Sockets the
    /// work opens stay in this namespace wherever they are used later.
    pub fn run<T: Send>(&self, work: impl FnOnce() -> T + Send) -> io::Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    sys::setns_net(self.fd.as_fd())?;
                    Ok(work())
                })
                .join()
                .expect("work inside a namespace does not panic")
        })
    }

    /// Moves the calling thread into this namespace for good (for a thread that lives
    /// inside it, such as a test's traffic source).
    pub fn enter(&self) -> io::Result<()> {
        sys::setns_net(self.fd.as_fd())
    }

    /// A command whose process starts inside this namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        sys::command_in_netns(&mut command, self.fd.as_raw_fd());
        command
    }

    /// Writes a sysctl under `/proc/sys/net` as seen from inside this namespace
    /// (`net/ipv6/conf/all/disable_ipv6`).
    pub fn set_sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        let path = format!("/proc/sys/{key}");
        self.run(|| std::fs::write(&path, value))?
    }

    /// A second handle on the same namespace (for a thread that enters it later).
    pub fn try_clone(&self) -> io::Result<Netns> {
        Ok(Netns {
            fd: self.fd.try_clone()?,
        })
    }

    /// The namespace's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The namespace's inode number, which identifies it (as `ls -l /proc/PID/ns/net` shows).
    pub fn inode(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let file = File::from(self.fd.try_clone()?);
        Ok(file.metadata()?.ino())
    }
}

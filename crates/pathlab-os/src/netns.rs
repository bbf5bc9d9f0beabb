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

    /// Opens the namespace a file names without following a symbolic link there (a
    /// holder found on a record's word).
    pub(crate) fn open_nofollow(path: &Path) -> io::Result<Netns> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
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

/// Where a namespace known by its inode was found ([`locate`]).
#[derive(Debug)]
pub enum Located {
    /// Held by a process, a descriptor or a mount: opened from there.
    Found(Netns),
    /// Nothing holds it: it is gone, with everything in it.
    Gone,
    /// Not found where it could be read, but some processes could not be read (their
    /// descriptors, without the right to): it may still be alive.
    Unknown,
}

/// Finds the network namespace of inode `inode` wherever it is still held: a bind mount
/// (`ip netns add`, a holder of pathlab's own), a process or one of its threads in it, or
/// a descriptor of it.
pub fn locate(inode: u64) -> Located {
    let wanted = format!("net:[{inode}]");
    // A bind mount keeps a namespace without any process (mountinfo's root field, then
    // its mount point).
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mounts.lines() {
        let mut fields = line.split(' ').skip(3);
        if let (Some(root), Some(point)) = (fields.next(), fields.next()) {
            if root == wanted {
                if let Ok(netns) = Netns::open(Path::new(point)) {
                    return Located::Found(netns);
                }
            }
        }
    }
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Located::Unknown;
    };
    let mut unreadable = false;
    let is_it = |path: &Path| {
        std::fs::read_link(path).is_ok_and(|target| target.as_os_str() == wanted.as_str())
    };
    for process in processes.flatten() {
        let dir = process.path();
        if !process
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        // Threads enter namespaces of their own (`Netns::run`); a process that ended
        // while this looked holds nothing.
        let (threads, descriptors) = match (
            std::fs::read_dir(dir.join("task")),
            std::fs::read_dir(dir.join("fd")),
        ) {
            (Ok(threads), Ok(descriptors)) => (threads, descriptors),
            (Err(e), _) | (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => continue,
            _ => {
                unreadable = true;
                continue;
            }
        };
        let found = threads
            .flatten()
            .map(|t| t.path().join("ns/net"))
            .chain(descriptors.flatten().map(|d| d.path()))
            .find(|path| is_it(path));
        if let Some(path) = found {
            if let Ok(netns) = Netns::open(&path) {
                if netns.inode().is_ok_and(|i| i == inode) {
                    return Located::Found(netns);
                }
            }
        }
    }
    if unreadable {
        Located::Unknown
    } else {
        Located::Gone
    }
}

/// The largest process id Linux gives (`PID_MAX_LIMIT` on 64-bit).
pub const PID_MAX: u32 = 4_194_304;

/// A network namespace as a user names it (`pathlab emulate --netns`): an `ip netns` name
/// (its file in `/run/netns`), a path to a namespace file (anything with a `/`: a bind
/// mount, `/proc/PID/ns/net`), or `pid:PID`, the namespace of a process (a container's, a
/// pod's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceRef {
    /// `ip netns` NAME.
    Named(String),
    /// A namespace file.
    Path(std::path::PathBuf),
    /// The namespace process PID is in.
    Pid(u32),
}

/// Why a namespace's name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceRefError {
    /// Nothing given.
    #[error("an empty namespace name")]
    Empty,
    /// `pid:` followed by no process id, or one Linux never gives.
    #[error("'{0}' is not a process id (pid:1 to pid:{PID_MAX})")]
    BadPid(String),
    /// An `ip netns` name that is not a file name.
    #[error("'{0}' is not an `ip netns` name (at most 255 bytes, not . or .., no NUL)")]
    BadName(String),
}

impl std::str::FromStr for NamespaceRef {
    type Err = NamespaceRefError;

    fn from_str(text: &str) -> Result<NamespaceRef, NamespaceRefError> {
        if text.is_empty() {
            return Err(NamespaceRefError::Empty);
        }
        if let Some(digits) = text.strip_prefix("pid:") {
            // The number's own digits: no sign, no leading zero.
            let canonical = digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
            return match digits.parse::<u32>() {
                Ok(pid @ 1..=PID_MAX) if canonical => Ok(NamespaceRef::Pid(pid)),
                _ => Err(NamespaceRefError::BadPid(digits.to_owned())),
            };
        }
        if text.contains('/') {
            return Ok(NamespaceRef::Path(text.into()));
        }
        if text.len() > 255 || text == "." || text == ".." || text.contains('\0') {
            return Err(NamespaceRefError::BadName(text.to_owned()));
        }
        Ok(NamespaceRef::Named(text.to_owned()))
    }
}

impl NamespaceRef {
    /// The file that holds the namespace.
    pub fn path(&self) -> std::path::PathBuf {
        match self {
            NamespaceRef::Named(name) => Path::new("/run/netns").join(name),
            NamespaceRef::Path(path) => path.clone(),
            NamespaceRef::Pid(pid) => format!("/proc/{pid}/ns/net").into(),
        }
    }

    /// Opens the namespace.
    pub fn open(&self) -> io::Result<Netns> {
        Netns::open(&self.path())
    }
}

impl std::fmt::Display for NamespaceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamespaceRef::Named(name) => f.write_str(name),
            NamespaceRef::Path(path) => write!(f, "{}", path.display()),
            NamespaceRef::Pid(pid) => write!(f, "pid:{pid}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_named_by_ip_netns_name_path_or_pid() {
        let parse = |text: &str| text.parse::<NamespaceRef>();
        assert_eq!(
            parse("clab-lab-r1"),
            Ok(NamespaceRef::Named("clab-lab-r1".into()))
        );
        assert_eq!(
            parse("clab-lab-r1").unwrap().path(),
            Path::new("/run/netns/clab-lab-r1")
        );
        assert_eq!(
            parse("/var/run/docker/netns/abc").unwrap().path(),
            Path::new("/var/run/docker/netns/abc")
        );
        assert_eq!(parse("pid:4242"), Ok(NamespaceRef::Pid(4242)));
        assert_eq!(
            parse("pid:4242").unwrap().path(),
            Path::new("/proc/4242/ns/net")
        );
        assert_eq!(parse("pid:4242").unwrap().to_string(), "pid:4242");
        // Refused with the reason: nothing, no pid, a pid Linux never gives, a name that
        // is not a file name.
        assert_eq!(parse(""), Err(NamespaceRefError::Empty));
        for bad in [
            "pid:",
            "pid:0",
            "pid:-1",
            "pid:+5",
            "pid:007",
            "pid:4194305",
            "pid:x",
        ] {
            assert!(
                matches!(parse(bad), Err(NamespaceRefError::BadPid(_))),
                "{bad}: {:?}",
                parse(bad)
            );
        }
        for bad in [".", "..", &"n".repeat(256)] {
            assert!(
                matches!(parse(bad), Err(NamespaceRefError::BadName(_))),
                "{bad}"
            );
        }
    }
}

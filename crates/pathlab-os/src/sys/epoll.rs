//! An epoll set, for a forwarding thread that serves many ports: which of them have frames
//! waiting, without looking at each.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;

/// A level-triggered epoll set whose entries carry a caller's token.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    /// Descriptors in the set.
    registered: usize,
    /// Room for one event per descriptor, reused.
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// An empty set.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the result is a fresh descriptor we own.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: `fd` was just returned by epoll_create1(2) and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            registered: 0,
            events: Vec::new(),
        })
    }

    /// Watches `fd` for readability (and errors), reporting `token`.
    pub fn add(&mut self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: a live descriptor and an initialized event.
        cvt(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &raw mut event,
            )
        })?;
        self.registered += 1;
        Ok(())
    }

    /// Stops watching `fd` (a descriptor already closed is gone from the set by itself).
    pub fn delete(&mut self, fd: BorrowedFd<'_>) {
        // SAFETY: a live descriptor; the event argument is ignored for DEL.
        let result = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
        if result == 0 {
            self.registered -= 1;
        }
    }

    /// The tokens of the descriptors that are readable now (or have an error), without
    /// waiting, appended to `ready`.
    pub fn ready(&mut self, ready: &mut Vec<u64>) -> io::Result<()> {
        let capacity = self.registered.max(1);
        self.events
            .resize(capacity, libc::epoll_event { events: 0, u64: 0 });
        // SAFETY: `events` has room for `capacity` entries; a zero timeout does not block.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                capacity as libc::c_int,
                0,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            return if error.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(error)
            };
        }
        ready.extend(self.events[..n as usize].iter().map(|event| event.u64));
        Ok(())
    }
}

impl AsFd for Epoll {
    /// Polls readable when a descriptor of the set is.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

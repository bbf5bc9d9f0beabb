//! A lab's cables on one switchboard: every emulated link's two ports are interfaces of one
//! namespace, read through one packet socket per forwarding thread and sent through one
//! socket for all, instead of a namespace and two sockets per link.
//!
//! A lab of 10,000 links cannot hold a namespace, a receiving socket and a sending socket
//! per port: with a namespace per node that is about 9 open files per link, and a process
//! may typically open 20,000. Here the sockets are bound to every interface of the
//! switchboard's namespace at once; a socket filter ([`sys::attach_share_filter`]) gives
//! forwarding thread `k` of `n` the frames of the interfaces whose index is `k` modulo
//! `n`, and the thread hands each frame to its port by the interface it came in on
//! ([`SharedReceiver::receive`], [`Port::push`]). The emulators on the switchboard go on
//! the thread that reads their ports ([`SharedReceiver::share`]). What a port sends goes
//! out through the one sending socket, addressed to its interface.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use pathlab_core::buffers::BufferPool;
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;
use pathlab_os::sys;

use crate::port::{
    Framing, PacketTx, Port, PortError, ReceiveCounts, SharedReceiver, Transmit, RING_FRAME_SIZE,
    SOCKET_BATCH,
};

/// What one receiving socket of the switchboard may hold waiting: the frames of every port
/// of its thread together.
pub const RECEIVE_BUFFER_BYTES: usize = 64 << 20;

/// Wire frames a port keeps that its thread has read for it and its link has not taken
/// yet; beyond, they are dropped and counted as the port's `ring_full`.
pub const INBOX_FRAMES: usize = 4096;

/// One namespace holding every cable's ports, with the sockets its forwarding threads
/// read and send through.
#[derive(Debug)]
pub struct Switchboard {
    netns: Arc<Netns>,
    /// Its interfaces' indices by name, read once: a lookup per port would list 20,000
    /// interfaces 20,000 times.
    indices: std::collections::HashMap<String, u32>,
    receivers: Vec<Arc<SharedReceiver>>,
    tx: Arc<OwnedFd>,
}

impl Switchboard {
    /// The switchboard of namespace `netns`, every interface of which is a cable's port,
    /// for a pool of `shares` forwarding threads: a receiving socket per thread, bound to
    /// every interface, and one sending socket.
    pub fn open(netns: Netns, shares: usize) -> io::Result<Switchboard> {
        let shares = shares.max(1);
        let (receivers, tx, indices) = netns.run(|| -> io::Result<_> {
            let mut receivers = Vec::with_capacity(shares);
            for share in 0..shares {
                let socket = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?;
                sys::setsockopt(
                    socket.as_fd(),
                    libc::SOL_PACKET,
                    sys::PACKET_VNET_HDR,
                    &1i32,
                )?;
                sys::setsockopt(
                    socket.as_fd(),
                    libc::SOL_PACKET,
                    sys::PACKET_IGNORE_OUTGOING,
                    &1i32,
                )?;
                sys::attach_share_filter(socket.as_fd(), shares as u32, share as u32)?;
                sys::enable_packet_auxdata(socket.as_fd())?;
                sys::grow_receive_buffer(socket.as_fd(), RECEIVE_BUFFER_BYTES)?;
                // Index 0: every interface of the namespace.
                sys::bind_packet(socket.as_fd(), 0)?;
                receivers.push(Arc::new(SharedReceiver::new(
                    share,
                    socket,
                    sys::PacketBatch::new(SOCKET_BATCH, RING_FRAME_SIZE)?,
                )));
            }
            let tx = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?;
            sys::setsockopt(tx.as_fd(), libc::SOL_PACKET, sys::PACKET_VNET_HDR, &1i32)?;
            let indices = Netlink::open()?
                .links()?
                .into_iter()
                .map(|link| (link.name, link.index))
                .collect();
            Ok((receivers, tx, indices))
        })??;
        Ok(Switchboard {
            netns: Arc::new(netns),
            indices,
            receivers,
            tx: Arc::new(tx),
        })
    }

    /// The namespace the ports are in.
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// The port on the switchboard's interface `interface` (one it had when it was
    /// opened), called `name` in the emulator's counters.
    pub fn port(&self, name: &str, interface: &str) -> Result<BoardPort, PortError> {
        let index = *self
            .indices
            .get(interface)
            .ok_or_else(|| PortError::NoSuchInterface {
                name: interface.to_owned(),
                hint: " on the switchboard".to_owned(),
            })?;
        let receiver = &self.receivers[index as usize % self.receivers.len()];
        Ok(BoardPort {
            name: name.to_owned(),
            ifindex: index,
            receiver: Arc::clone(receiver),
            inbox: VecDeque::new(),
            dropped: 0,
            tx: Arc::clone(&self.tx),
            netns: Arc::clone(&self.netns),
        })
    }
}

/// A cable's port on the [`Switchboard`]: its frames arrive through its thread's shared
/// socket, its frames leave through the switchboard's one sending socket.
#[derive(Debug)]
pub struct BoardPort {
    name: String,
    ifindex: u32,
    receiver: Arc<SharedReceiver>,
    /// Wire frames read for it, with their receive time and whether each begins what
    /// the kernel received.
    inbox: VecDeque<(Vec<u8>, Option<u64>, bool)>,
    /// Frames dropped because the inbox was full, not yet reported.
    dropped: u64,
    tx: Arc<OwnedFd>,
    netns: Arc<Netns>,
}

impl Port for BoardPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn framing(&self) -> Framing {
        Framing::Ethernet
    }

    fn pollable(&self) -> BorrowedFd<'_> {
        self.receiver.pollable()
    }

    fn receive_timed(
        &mut self,
        budget: usize,
        pool: &mut BufferPool,
        deliver: &mut dyn FnMut(Vec<u8>, Option<u64>),
    ) -> io::Result<ReceiveCounts> {
        let _ = pool;
        let mut counts = ReceiveCounts {
            ring_full: std::mem::take(&mut self.dropped),
            ..ReceiveCounts::default()
        };
        // Whole frames: the segments of a super-packet go together.
        while let Some((_, _, first)) = self.inbox.front() {
            if *first && counts.frames as usize >= budget {
                break;
            }
            let (frame, at, first) = self.inbox.pop_front().expect("a front");
            counts.frames += u64::from(first);
            counts.segments += 1;
            deliver(frame, at);
        }
        Ok(counts)
    }

    fn transmitter(&self) -> io::Result<Box<dyn Transmit>> {
        Ok(Box::new(PacketTx {
            socket: Arc::clone(&self.tx),
            ifindex: Some(self.ifindex),
        }))
    }

    fn exists(&self) -> bool {
        crate::port::interface_exists_in(&self.netns, self.ifindex)
    }

    fn shared_receiver(&self) -> Option<(Arc<SharedReceiver>, u32)> {
        Some((Arc::clone(&self.receiver), self.ifindex))
    }

    fn push(&mut self, frame: Vec<u8>, received: Option<u64>, first: bool) {
        if self.inbox.len() >= INBOX_FRAMES {
            self.dropped += u64::from(first);
            return;
        }
        self.inbox.push_back((frame, received, first));
    }
}

//! The two kinds of port an emulator forwards between: a network interface opened at layer
//! 2 (AF_PACKET) and a TUN device (layer 3).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use pathlab_core::buffers::BufferPool;
use pathlab_core::wire::ethernet;
use pathlab_core::wire::offload::{self, VnetHeader};
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;
use pathlab_os::sys;
use pathlab_os::tun::Tun;

/// How the frames of a port begin: Ethernet (AF_PACKET ports) or bare IP (TUN ports), as
/// the offload code reads them.
pub use pathlab_core::wire::offload::Framing;

/// What a receive pass saw besides the frames it delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveCounts {
    /// Frames read from the port (a super-packet counts once).
    pub frames: u64,
    /// Wire frames delivered (a super-packet counts as its segments).
    pub segments: u64,
    /// Frames dropped because they were cut short or their offload metadata was bad.
    pub malformed: u64,
    /// Drops the kernel reported because the port could not take more: with a ring, the
    /// frames that said frames were lost before them (the ring was full); reading the
    /// socket, the frames dropped (its buffer was full).
    pub ring_full: u64,
}

impl std::ops::AddAssign for ReceiveCounts {
    fn add_assign(&mut self, other: ReceiveCounts) {
        self.frames += other.frames;
        self.segments += other.segments;
        self.malformed += other.malformed;
        self.ring_full += other.ring_full;
    }
}

/// A place frames come from and go to.
pub trait Port: Send {
    /// The interface's name.
    fn name(&self) -> &str;
    /// How its frames begin.
    fn framing(&self) -> Framing;
    /// A descriptor that polls readable when frames are waiting.
    fn pollable(&self) -> BorrowedFd<'_>;
    /// Reads up to `budget` waiting frames and passes each wire frame to `deliver`, in a
    /// buffer taken from `pool` (the caller gives it back once the frame is sent), with
    /// when the kernel received it (ns since the Unix epoch, `CLOCK_REALTIME`) where the
    /// port knows it.
    fn receive_timed(
        &mut self,
        budget: usize,
        pool: &mut BufferPool,
        deliver: &mut dyn FnMut(Vec<u8>, Option<u64>),
    ) -> io::Result<ReceiveCounts>;
    /// [`Port::receive_timed`] without the receive times.
    fn receive(
        &mut self,
        budget: usize,
        pool: &mut BufferPool,
        deliver: &mut dyn FnMut(Vec<u8>),
    ) -> io::Result<ReceiveCounts> {
        self.receive_timed(budget, pool, &mut |frame, _| deliver(frame))
    }
    /// A sending half of the port, independent of it: the thread that forwards the other
    /// direction sends through it while this port's thread receives. Made again after a
    /// [`Port::reopen`].
    fn transmitter(&self) -> io::Result<Box<dyn Transmit>>;
    /// The error the port's receive descriptor has pending, taken (cleared): what a poll
    /// that woke without frames reported. `None` when there is none.
    fn take_error(&mut self) -> Option<io::Error> {
        None
    }
    /// Whether the port's interface still exists.
    fn exists(&self) -> bool {
        true
    }
    /// After its interface disappeared: opens the port again on the interface that now
    /// has its name, set up as when it was first opened. `Ok(false)` while no interface
    /// has the name; an error when one has but cannot be opened (down, busy), so the
    /// caller can say why it still waits. A port whose device cannot disappear never has
    /// one come back.
    fn reopen(&mut self) -> Result<bool, PortError> {
        Ok(false)
    }
    /// The receiving socket this port shares with others, if it shares one (a
    /// switchboard's, [`crate::switchboard`]), and the interface index that marks its
    /// frames there: the forwarding thread then reads that socket once for all its ports
    /// and hands each its frames ([`Port::push`]); the port's own receive only takes what
    /// was handed to it.
    fn shared_receiver(&self) -> Option<(Arc<SharedReceiver>, u32)> {
        None
    }
    /// Takes a wire frame its shared receiver read for it, with its receive time; `first`
    /// when it begins what the kernel received (the segments of a super-packet follow).
    fn push(&mut self, frame: Vec<u8>, received: Option<u64>, first: bool) {
        let _ = (frame, received, first);
    }
}

/// A receiving socket several ports share (a switchboard's, [`crate::switchboard`]): the
/// frames of the ports of one forwarding thread, each marked with the interface it came in
/// on.
#[derive(Debug)]
pub struct SharedReceiver {
    share: usize,
    socket: OwnedFd,
    batch: Mutex<sys::PacketBatch>,
}

impl SharedReceiver {
    /// A shared receiver on `socket` (bound and filtered already) for forwarding thread
    /// `share`, reading into `batch`.
    pub fn new(share: usize, socket: OwnedFd, batch: sys::PacketBatch) -> SharedReceiver {
        SharedReceiver {
            share,
            socket,
            batch: Mutex::new(batch),
        }
    }

    /// The forwarding thread (its index in the pool) this socket's ports must be served
    /// by.
    pub fn share(&self) -> usize {
        self.share
    }

    /// Its socket, to poll.
    pub fn pollable(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Reads up to `budget` waiting frames and passes each wire frame to `deliver` with
    /// the interface it came in on, its receive time, and whether it is the first wire
    /// frame of what the kernel received (a super-packet is cut into several). Returns
    /// the frames read and how many were malformed or dropped by the kernel.
    pub fn receive(
        &self,
        budget: usize,
        pool: &mut BufferPool,
        deliver: &mut dyn FnMut(u32, Vec<u8>, Option<u64>, bool),
    ) -> io::Result<ReceiveCounts> {
        let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
        let mut counts = ReceiveCounts::default();
        while (counts.frames as usize) < budget {
            let wanted = (budget - counts.frames as usize).min(batch.slots());
            let received = batch.recv(self.socket.as_fd(), wanted)?;
            for frame in batch.frames() {
                counts.frames += 1;
                if frame.truncated {
                    counts.malformed += 1;
                    continue;
                }
                let mut first = true;
                let ifindex = frame.ifindex;
                deliver_frame(
                    frame.data,
                    frame.wire_len,
                    frame.vlan,
                    frame.received_unix_ns,
                    &mut counts,
                    pool,
                    &mut |wire, at| {
                        deliver(ifindex, wire, at, first);
                        first = false;
                    },
                );
            }
            if received < wanted {
                break;
            }
        }
        if counts.frames > 0 {
            counts.ring_full += sys::packet_drops(self.socket.as_fd())?;
        }
        Ok(counts)
    }
}

/// A boxed port is a port: an emulator can join two kinds (an interface and a VLAN of a
/// trunk, a TUN device and an interface).
impl Port for Box<dyn Port> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn framing(&self) -> Framing {
        (**self).framing()
    }

    fn pollable(&self) -> BorrowedFd<'_> {
        (**self).pollable()
    }

    fn receive_timed(
        &mut self,
        budget: usize,
        pool: &mut BufferPool,
        deliver: &mut dyn FnMut(Vec<u8>, Option<u64>),
    ) -> io::Result<ReceiveCounts> {
        (**self).receive_timed(budget, pool, deliver)
    }

    fn transmitter(&self) -> io::Result<Box<dyn Transmit>> {
        (**self).transmitter()
    }

    fn take_error(&mut self) -> Option<io::Error> {
        (**self).take_error()
    }

    fn exists(&self) -> bool {
        (**self).exists()
    }

    fn reopen(&mut self) -> Result<bool, PortError> {
        (**self).reopen()
    }

    fn shared_receiver(&self) -> Option<(Arc<SharedReceiver>, u32)> {
        (**self).shared_receiver()
    }

    fn push(&mut self, frame: Vec<u8>, received: Option<u64>, first: bool) {
        (**self).push(frame, received, first);
    }
}

/// The sending half of a port.
pub trait Transmit: Send {
    /// Sends one frame.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Whether [`Transmit::send_gso`] works on this port.
    fn can_send_gso(&self) -> bool {
        false
    }
    /// Sends a GSO super-packet, which the kernel or the NIC cuts into wire frames as
    /// `vnet` says.
    fn send_gso(&mut self, packet: &[u8], vnet: &VnetHeader) -> io::Result<()> {
        let _ = (packet, vnet);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    /// Sends a run of one flow's TCP segments that [`offload::coalescable_run`] accepted
    /// (at least two) as one GSO super-packet.
    fn send_run(&mut self, frames: &[&[u8]]) -> io::Result<()> {
        let (packet, vnet) = offload::build_gso(frames);
        self.send_gso(&packet, &vnet)
    }
}

/// Why a port cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// No interface has that name in this namespace.
    #[error("no interface named '{name}' in this network namespace{hint}")]
    NoSuchInterface {
        /// The name asked for.
        name: String,
        /// Names that do exist.
        hint: String,
    },
    /// The interface is down, so nothing could cross it.
    #[error("interface '{0}' is down; bring it up first")]
    Down(String),
    /// The loopback interface loops sent frames back; it cannot be a bridge port.
    #[error("'{0}' is a loopback interface; an emulator needs two interfaces that lead somewhere")]
    Loopback(String),
    /// Another pathlab emulator is forwarding this interface.
    #[error("interface '{name}' is busy: another pathlab emulator holds it (lock {lock})")]
    Busy {
        /// The interface.
        name: String,
        /// Its lock file.
        lock: PathBuf,
    },
    /// A system call failed.
    #[error("{what} on '{name}': {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The interface.
        name: String,
        /// The error.
        source: io::Error,
    },
}

/// How a packet port receives, chosen per link direction ([`ReceiveMode::for_link`]).
///
/// A ring's memory is fixed and large: each frame slot is 68 KB (a GSO super-packet fits
/// whole; the kernel allocates each in a 128 KB block), so a ring of 512 frames maps 35 MB
/// and takes 64 MB of the machine, per direction, from the moment the port opens; a lab
/// of 100 links held 6.8 GB of rings. Reading the socket's own buffer costs memory only
/// while frames wait in it (and a batch of slots whose pages are touched only by what
/// arrives), for a system call per batch.
///
/// And a ring stalls the machine as it is made: the kernel zeroes its 64 MB inside one
/// `setsockopt`, with no point where it lets another thread run on a kernel without
/// preemption (`PREEMPT_NONE`, the default of server kernels and of this project's
/// machines). Every emulator that started on the machine held a core for 15-166 ms,
/// real-time forwarding threads of other emulators on it included (`perf sched`: their
/// wake-ups waited 47-163 ms, and so did the core's migration thread): a lab running
/// beside a test that started an emulator was sent late by p99 42 ms and up to 147 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveMode {
    /// A TPACKET_V2 ring shared with the kernel: no system call per frame.
    Ring {
        /// Frames in the ring.
        frames: usize,
    },
    /// `recvmmsg` from the packet socket's receive buffer, [`SOCKET_BATCH`] frames a call.
    Socket {
        /// The most the frames waiting in the socket may take (`SO_RCVBUF`, which the
        /// kernel counts with its own overhead: a 1514-byte frame takes about 2.3 KB).
        buffer_bytes: usize,
    },
}

/// Frames one `recvmmsg` takes in [`ReceiveMode::Socket`]: 8 slots of 68 KB, whose pages
/// take memory only once frames were written to them (a port that only sees pings uses
/// one page of each slot it used).
pub const SOCKET_BATCH: usize = 8;

impl ReceiveMode {
    /// The traffic a ring or socket buffer holds at the link's rate, ns.
    pub const BACKLOG_NS: u64 = 10_000_000;
    /// The fastest rate whose links read the socket rather than a ring: above it the
    /// ring's saved system calls pay (measured in docs/performance.md, Labs of many links).
    pub const SOCKET_MAX_BPS: u64 = 1_000_000_000;
    const MIN_FRAMES: usize = 512;
    const MAX_FRAMES: usize = 4096;
    const MIN_SOCKET_BYTES: usize = 4 << 20;
    const MAX_SOCKET_BYTES: usize = 64 << 20;
    /// A link without a rate's socket buffer: 512 frames of up to 64 KB, as a ring of the
    /// smallest size held (TCP sends GSO frames of 64 KB through a link without a rate at
    /// 10-15 Gbit/s here: 20 ms of them).
    pub const UNRATED_SOCKET_BYTES: usize = 32 << 20;

    /// The mode for traffic entering a link with `spec`: a ring of
    /// [`ReceiveMode::ring_for_link`]'s size when its rate is above
    /// [`ReceiveMode::SOCKET_MAX_BPS`], else (a slower rate, or none) the socket.
    ///
    /// A link without a rate read its socket as fast as a ring: one TCP flow through an
    /// empty spec, three rounds of 4 s through each, twice: 11.0-13.6 Gbit/s through a
    /// ring and 10.7-14.5 through the socket (GSO frames of 64 KB, 30,000 a second: the
    /// system calls do not count), while the ring stalled every other thread on its core
    /// as it was made.
    pub fn for_link(spec: &pathlab_core::LinkSpec) -> ReceiveMode {
        match spec.peak_rate() {
            Some(rate) if rate.bits_per_sec() > Self::SOCKET_MAX_BPS => {
                ReceiveMode::ring_for_link(spec)
            }
            _ => ReceiveMode::socket_for_link(spec),
        }
    }

    /// A ring for `spec`: what arrives at the link's rate in [`ReceiveMode::BACKLOG_NS`]
    /// of 1514-byte frames, at least 512 (6 ms at 1 Gbit/s; a ring for a link without a
    /// rate has 512), at most 4096: a 4 Gbit/s link's 3303 frames take 225 MB per direction.
    /// At 4 Gbit/s a ring of 512 overflowed in TCP's slow start (the kernel dropped
    /// 25,000 bursts of frames the model never saw).
    pub fn ring_for_link(spec: &pathlab_core::LinkSpec) -> ReceiveMode {
        ReceiveMode::Ring {
            frames: Self::frames_for(spec),
        }
    }

    /// The socket for `spec`: a buffer for twice what the ring would hold in 1514-byte
    /// frames at the link's rate (the kernel's overhead per frame), at least 4 MiB, at
    /// most 64 MiB; without a rate, what the smallest ring held of GSO frames
    /// ([`ReceiveMode::UNRATED_SOCKET_BYTES`]). It is only a bound: frames take memory
    /// while they wait.
    pub fn socket_for_link(spec: &pathlab_core::LinkSpec) -> ReceiveMode {
        let buffer_bytes = if spec.peak_rate().is_some() {
            (Self::frames_for(spec) * 1514 * 2)
                .clamp(Self::MIN_SOCKET_BYTES, Self::MAX_SOCKET_BYTES)
        } else {
            Self::UNRATED_SOCKET_BYTES
        };
        ReceiveMode::Socket { buffer_bytes }
    }

    fn frames_for(spec: &pathlab_core::LinkSpec) -> usize {
        spec.peak_rate().map_or(Self::MIN_FRAMES, |rate| {
            let bytes = rate.bits_per_sec() as f64 / 8.0 * (Self::BACKLOG_NS as f64 * 1e-9);
            ((bytes / 1514.0).ceil() as usize).clamp(Self::MIN_FRAMES, Self::MAX_FRAMES)
        })
    }
}

impl Default for ReceiveMode {
    /// What a link without a rate reads: the socket, with
    /// [`ReceiveMode::UNRATED_SOCKET_BYTES`] of buffer.
    fn default() -> ReceiveMode {
        ReceiveMode::Socket {
            buffer_bytes: ReceiveMode::UNRATED_SOCKET_BYTES,
        }
    }
}

/// Ring frame size and socket slot size: a 64 KB GSO super-packet with its headers and
/// vnet header fits whole.
pub(crate) const RING_FRAME_SIZE: usize = 17 * 4096;

/// Where a packet port's frames come from.
#[derive(Debug)]
pub(crate) enum Receiver {
    Ring(sys::RxRing),
    Socket {
        socket: OwnedFd,
        batch: sys::PacketBatch,
    },
}

/// Which received frames a [`Receiver`] delivers, and with what tag: all of them, each
/// with the VLAN tag the kernel took off put back in its bytes (`None`); or only those
/// whose tag (or its absence) the function accepts, without it (a VLAN port's).
pub(crate) type Untag<'a> = Option<&'a dyn Fn(Option<(u16, u16)>) -> bool>;

impl Receiver {
    pub(crate) fn socket(&self) -> BorrowedFd<'_> {
        match self {
            Receiver::Ring(ring) => ring.socket(),
            Receiver::Socket { socket, .. } => socket.as_fd(),
        }
    }

    /// The error its socket has pending, taken (cleared): [`Port::take_error`] of a port
    /// that receives through it.
    pub(crate) fn take_error(&self) -> Option<io::Error> {
        match sys::take_socket_error(self.socket()) {
            Ok(0) => None,
            Ok(code) => Some(io::Error::from_raw_os_error(code)),
            Err(error) => Some(error),
        }
    }

    /// Opens the receiving socket of interface `index` (`name` for errors) as `mode` says,
    /// with `filter` attached if given, bound and promiscuous.
    pub(crate) fn open(
        name: &str,
        index: u32,
        mode: ReceiveMode,
        filter: Option<sys::VlanFilter>,
    ) -> Result<Receiver, PortError> {
        // Protocol 0 until bound: a socket opened for every protocol would take every
        // interface's frames at once, and binding it to one interface would then wait for
        // an RCU grace period (synchronize_net) to take its hook back, milliseconds each:
        // half a minute for the 2,000 ports of a 1,000-link lab.
        let rx_socket = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)
            .map_err(io_error("opening a packet socket", name))?;
        // The options must be set before the ring exists and before bind, so that no frame
        // arrives without them.
        sys::setsockopt(
            rx_socket.as_fd(),
            libc::SOL_PACKET,
            sys::PACKET_VNET_HDR,
            &1i32,
        )
        .map_err(io_error("enabling vnet headers", name))?;
        sys::setsockopt(
            rx_socket.as_fd(),
            libc::SOL_PACKET,
            sys::PACKET_IGNORE_OUTGOING,
            &1i32,
        )
        .map_err(io_error("ignoring outgoing frames", name))?;
        if let Some(filter) = filter {
            sys::attach_vlan_filter(rx_socket.as_fd(), filter)
                .map_err(io_error("attaching the VLAN filter", name))?;
        }
        let rx = match mode {
            ReceiveMode::Ring { frames } => Receiver::Ring(
                sys::RxRing::new(rx_socket, RING_FRAME_SIZE, frames)
                    .map_err(io_error("mapping the receive ring", name))?,
            ),
            ReceiveMode::Socket { buffer_bytes } => {
                // The ring's frame header says what auxdata says: the length on the wire
                // and the VLAN tag the driver took off.
                sys::enable_packet_auxdata(rx_socket.as_fd())
                    .map_err(io_error("enabling packet auxdata", name))?;
                sys::grow_receive_buffer(rx_socket.as_fd(), buffer_bytes)
                    .map_err(io_error("sizing the receive buffer", name))?;
                Receiver::Socket {
                    socket: rx_socket,
                    batch: sys::PacketBatch::new(SOCKET_BATCH, RING_FRAME_SIZE)
                        .map_err(io_error("mapping the receive slots", name))?,
                }
            }
        };
        sys::bind_packet(rx.socket(), index).map_err(io_error("binding", name))?;
        sys::packet_promiscuous(rx.socket(), index)
            .map_err(io_error("entering promiscuous mode", name))?;
        Ok(rx)
    }

    /// Reads up to `budget` waiting frames, each to `deliver` as wire frames with its
    /// receive time, its VLAN tag as `untag` says.
    pub(crate) fn receive_timed(
        &mut self,
        budget: usize,
        pool: &mut BufferPool,
        untag: Untag<'_>,
        deliver: &mut dyn FnMut(Vec<u8>, Option<u64>),
    ) -> io::Result<ReceiveCounts> {
        let mut counts = ReceiveCounts::default();
        // The tag to put back, or none; `None` overall: the frame is not delivered.
        let tag_of = |vlan: Option<(u16, u16)>| match untag {
            None => Some(vlan),
            Some(accept) => accept(vlan).then_some(None),
        };
        match self {
            Receiver::Ring(ring) => {
                for _ in 0..budget {
                    let Some(frame) = ring.next_frame() else {
                        break;
                    };
                    counts.frames += 1;
                    if frame.losing {
                        counts.ring_full += 1;
                    }
                    let Some(vlan) = tag_of(frame.vlan) else {
                        continue;
                    };
                    let at = Some(frame.received_unix_ns);
                    deliver_frame(
                        frame.data,
                        frame.wire_len,
                        vlan,
                        at,
                        &mut counts,
                        pool,
                        deliver,
                    );
                }
            }
            Receiver::Socket { socket, batch } => {
                while (counts.frames as usize) < budget {
                    let wanted = (budget - counts.frames as usize).min(batch.slots());
                    let received = batch.recv(socket.as_fd(), wanted)?;
                    for frame in batch.frames() {
                        counts.frames += 1;
                        if frame.truncated {
                            counts.malformed += 1;
                            continue;
                        }
                        let Some(vlan) = tag_of(frame.vlan) else {
                            continue;
                        };
                        let at = frame.received_unix_ns;
                        deliver_frame(
                            frame.data,
                            frame.wire_len,
                            vlan,
                            at,
                            &mut counts,
                            pool,
                            deliver,
                        );
                    }
                    if received < wanted {
                        break; // drained
                    }
                }
                if counts.frames > 0 {
                    // Drops happen while frames wait, so only a pass that found some can
                    // follow them.
                    counts.ring_full += sys::packet_drops(socket.as_fd())?;
                }
            }
        }
        Ok(counts)
    }
}

/// Finds interface `name` in the calling thread's namespace, one a port can open: it
/// exists, is not the loopback, and is up.
pub(crate) fn usable_link(name: &str) -> Result<pathlab_os::netlink::LinkInfo, PortError> {
    let mut netlink = Netlink::open().map_err(io_error("opening netlink", name))?;
    let links = netlink
        .links()
        .map_err(io_error("listing interfaces", name))?;
    let Some(link) = links.iter().find(|link| link.name == name) else {
        let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
        return Err(PortError::NoSuchInterface {
            name: name.to_owned(),
            hint: format!(" (there are: {})", names.join(", ")),
        });
    };
    if link.name == "lo" || link.kind.as_deref() == Some("loopback") || link.index == 1 {
        return Err(PortError::Loopback(name.to_owned()));
    }
    if !link.up {
        return Err(PortError::Down(name.to_owned()));
    }
    Ok(link.clone())
}

/// Opens the sending socket of interface `index` (`name` for errors). It receives nothing:
/// protocol 0 binds it to no traffic. It takes a vnet header before every frame, so that
/// runs of segments can go out as one GSO packet.
pub(crate) fn open_sender(name: &str, index: u32) -> Result<OwnedFd, PortError> {
    let tx = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)
        .map_err(io_error("opening a packet socket", name))?;
    sys::setsockopt(tx.as_fd(), libc::SOL_PACKET, sys::PACKET_VNET_HDR, &1i32)
        .map_err(io_error("enabling vnet headers", name))?;
    sys::bind_packet_protocol(tx.as_fd(), index, 0).map_err(io_error("binding", name))?;
    Ok(tx)
}

/// One received frame (vnet header, then Ethernet) into wire frames for `deliver`.
pub(crate) fn deliver_frame(
    data: &[u8],
    wire_len: u32,
    vlan: Option<(u16, u16)>,
    received_unix_ns: Option<u64>,
    counts: &mut ReceiveCounts,
    pool: &mut BufferPool,
    deliver: &mut dyn FnMut(Vec<u8>, Option<u64>),
) {
    if data.len() < sys::VNET_HDR_LEN + ethernet::HEADER_LEN
        || wire_len as usize + sys::VNET_HDR_LEN > data.len()
    {
        counts.malformed += 1;
        return;
    }
    let vnet = VnetHeader::parse(data[..sys::VNET_HDR_LEN].try_into().expect("10 bytes"));
    let mut emit = |mut wire: Vec<u8>| {
        if let Some((tci, tpid)) = vlan {
            offload::insert_vlan_tag(&mut wire, tci, tpid);
        }
        deliver(wire, received_unix_ns);
    };
    match offload::to_wire_packets(
        &data[sys::VNET_HDR_LEN..],
        Framing::Ethernet,
        &vnet,
        pool,
        &mut emit,
    ) {
        Ok(n) => counts.segments += n as u64,
        Err(_) => counts.malformed += 1,
    }
}

/// An interface opened at layer 2: a receive ring or socket ([`ReceiveMode`]; with vnet
/// headers, not seeing what it sends itself, promiscuous while open) and a socket to send
/// on.
#[derive(Debug)]
pub struct PacketPort {
    name: String,
    /// Interface index.
    pub ifindex: u32,
    /// MTU in bytes.
    pub mtu: u32,
    rx: Receiver,
    mode: ReceiveMode,
    /// Shared with the sending halves ([`Port::transmitter`]): a duplicate descriptor each
    /// was two more open files per link in a lab.
    tx: Arc<OwnedFd>,
    /// The interface's lock; `None` once released for a [`Port::reopen`].
    lock: Option<(File, PathBuf)>,
    /// The namespace the port was opened in: the thread that forwards may be in another
    /// (a lab opens its cables' ports from inside their namespaces), and the interface's
    /// name and index only mean something in this one.
    netns: Netns,
}

impl PacketPort {
    fn unlock(&mut self) {
        if let Some((file, path)) = self.lock.take() {
            // Unlinked while still held, so no other process can have locked it meanwhile.
            let _ = std::fs::remove_file(path);
            drop(file);
        }
    }
}

impl Drop for PacketPort {
    fn drop(&mut self) {
        self.unlock();
    }
}

/// Whether interface `ifindex` of namespace `netns` still exists: [`Port::exists`] of a
/// port on it. A namespace that cannot be entered says yes, rather than end an emulator
/// wrongly.
pub(crate) fn interface_exists_in(netns: &Netns, ifindex: u32) -> bool {
    netns.run(|| sys::interface_exists(ifindex)).unwrap_or(true)
}

pub(crate) fn io_error<'a>(
    what: &'static str,
    name: &'a str,
) -> impl FnOnce(io::Error) -> PortError + 'a {
    move |source| PortError::Io {
        what,
        name: name.to_owned(),
        source,
    }
}

impl PacketPort {
    /// Opens interface `name` in the calling thread's network namespace, receiving as a
    /// link without a rate does ([`ReceiveMode::default`]).
    pub fn open(name: &str) -> Result<PacketPort, PortError> {
        PacketPort::open_with(name, ReceiveMode::default())
    }

    /// Opens interface `name`, receiving as `mode` says.
    pub fn open_with(name: &str, mode: ReceiveMode) -> Result<PacketPort, PortError> {
        let link = usable_link(name)?;
        let (lock, lock_path) =
            pathlab_os::runtime::lock_interface(link.index).map_err(io_error("locking", name))?;
        let Some(lock) = lock else {
            return Err(PortError::Busy {
                name: name.to_owned(),
                lock: lock_path,
            });
        };
        let rx = Receiver::open(name, link.index, mode, None)?;
        let tx = open_sender(name, link.index)?;
        Ok(PacketPort {
            name: name.to_owned(),
            ifindex: link.index,
            mtu: link.mtu,
            rx,
            mode,
            tx: Arc::new(tx),
            lock: Some((lock, lock_path)),
            netns: Netns::current().map_err(io_error("opening its network namespace", name))?,
        })
    }
}

impl Port for PacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn framing(&self) -> Framing {
        Framing::Ethernet
    }

    fn pollable(&self) -> BorrowedFd<'_> {
        self.rx.socket()
    }

    fn receive_timed(
        &mut self,
        budget: usize,
        pool: &mut BufferPool,
        deliver: &mut dyn FnMut(Vec<u8>, Option<u64>),
    ) -> io::Result<ReceiveCounts> {
        self.rx.receive_timed(budget, pool, None, deliver)
    }

    fn transmitter(&self) -> io::Result<Box<dyn Transmit>> {
        Ok(Box::new(PacketTx {
            socket: Arc::clone(&self.tx),
            ifindex: None,
        }))
    }

    fn exists(&self) -> bool {
        interface_exists_in(&self.netns, self.ifindex)
    }

    fn reopen(&mut self) -> Result<bool, PortError> {
        let name = self.name.clone();
        let entering = || io_error("entering its network namespace", &name);
        let present = self
            .netns
            .run(|| sys::if_nametoindex(&name).is_ok())
            .map_err(entering())?;
        if !present {
            return Ok(false);
        }
        // The old lock goes first: the new interface may have been given the old index,
        // whose lock file a second flock from this process would find busy.
        self.unlock();
        let mode = self.mode;
        *self = self
            .netns
            .run(|| PacketPort::open_with(&name, mode))
            .map_err(entering())??;
        Ok(true)
    }

    fn take_error(&mut self) -> Option<io::Error> {
        self.rx.take_error()
    }
}

/// The sending half of a packet socket, shared: a [`PacketPort`]'s (its socket bound to its
/// interface) or a switchboard port's (the switchboard's one socket, each frame addressed
/// to the port's interface); each frame preceded by a vnet header.
#[derive(Debug)]
pub(crate) struct PacketTx {
    /// The send socket.
    pub(crate) socket: Arc<OwnedFd>,
    /// The interface each frame is addressed to; `None`: the one the socket is bound to.
    pub(crate) ifindex: Option<u32>,
}

impl Transmit for PacketTx {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.send_gso(frame, &VnetHeader::default())
    }

    fn can_send_gso(&self) -> bool {
        true
    }

    fn send_gso(&mut self, packet: &[u8], vnet: &VnetHeader) -> io::Result<()> {
        sys::send_gather(
            self.socket.as_fd(),
            self.ifindex,
            &[&vnet.to_bytes(), packet],
        )
        .map(drop)
    }

    /// Gathers the super-packet from the frames where they are: its vnet header, its
    /// headers, then each segment's payload, in one `sendmsg` (no copy in user space).
    fn send_run(&mut self, frames: &[&[u8]]) -> io::Result<()> {
        let (headers, vnet) = offload::gso_headers(frames, Framing::Ethernet);
        let vnet = vnet.to_bytes();
        let (parts, n) = gso_parts(&vnet, &headers, frames);
        sys::send_gather(self.socket.as_fd(), self.ifindex, &parts[..n]).map(drop)
    }
}

/// The parts of a super-packet gathered from a run of frames where they are: its vnet
/// header, its headers, then each segment's payload; and how many parts there are.
fn gso_parts<'a>(
    vnet: &'a [u8],
    headers: &'a [u8],
    frames: &[&'a [u8]],
) -> ([&'a [u8]; sys::GATHER_MAX], usize) {
    let mut parts: [&[u8]; sys::GATHER_MAX] = [&[]; sys::GATHER_MAX];
    parts[0] = vnet;
    parts[1] = headers;
    for (part, frame) in parts[2..].iter_mut().zip(frames) {
        *part = &frame[headers.len()..];
    }
    (parts, 2 + frames.len().min(sys::GATHER_MAX - 2))
}

/// A TUN device as an emulator port: bare IP datagrams, one read or write per packet.
/// The device exists while the port is open.
#[derive(Debug)]
pub struct TunPort {
    tun: Tun,
    /// The read buffer.
    buffer: Vec<u8>,
}

/// The MTU a TUN port is created with: Ethernet's, as the kernel's default for TUN.
pub const TUN_PORT_MTU: u32 = 1500;

impl TunPort {
    /// Creates a TUN device called `name` in the calling thread's network namespace, up,
    /// with an MTU of [`TUN_PORT_MTU`].
    pub fn create(name: &str) -> io::Result<TunPort> {
        Ok(TunPort::from(Tun::create(name, TUN_PORT_MTU)?))
    }
}

impl From<Tun> for TunPort {
    fn from(tun: Tun) -> TunPort {
        TunPort {
            tun,
            buffer: vec![0; 65_536],
        }
    }
}

impl Port for TunPort {
    fn name(&self) -> &str {
        self.tun.name()
    }

    fn framing(&self) -> Framing {
        Framing::Ip
    }

    fn pollable(&self) -> BorrowedFd<'_> {
        self.tun.as_fd()
    }

    /// No receive times: a TUN device's `read` gives none.
    fn receive_timed(
        &mut self,
        budget: usize,
        pool: &mut BufferPool,
        deliver: &mut dyn FnMut(Vec<u8>, Option<u64>),
    ) -> io::Result<ReceiveCounts> {
        let mut counts = ReceiveCounts::default();
        for _ in 0..budget {
            match self.tun.recv(&mut self.buffer) {
                Ok(0) => break,
                Ok(n) => {
                    counts.frames += 1;
                    counts.segments += 1;
                    deliver(pool.copy_of(&self.buffer[..n]), None);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(error),
            }
        }
        Ok(counts)
    }

    fn transmitter(&self) -> io::Result<Box<dyn Transmit>> {
        Ok(Box::new(TunTx(self.tun.sender()?)))
    }
}

/// A [`TunPort`]'s sending half.
#[derive(Debug)]
struct TunTx(pathlab_os::tun::TunSender);

impl Transmit for TunTx {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.0.send(frame).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::ReceiveMode;
    use pathlab_core::LinkSpec;

    fn mode(spec: &str) -> ReceiveMode {
        ReceiveMode::for_link(&LinkSpec::parse(spec).unwrap())
    }

    fn frames(spec: &str) -> usize {
        match ReceiveMode::ring_for_link(&LinkSpec::parse(spec).unwrap()) {
            ReceiveMode::Ring { frames } => frames,
            ReceiveMode::Socket { .. } => unreachable!(),
        }
    }

    #[test]
    fn rings_hold_ten_milliseconds_of_the_links_rate_within_bounds() {
        // 4 Gbit/s for 10 ms: 5 MB, 3303 frames of 1514 bytes.
        assert_eq!(frames("rate 4gbit delay 40ms"), 3303);
        assert_eq!(frames("rate 10mbit"), 512);
        assert_eq!(frames(""), 512);
        assert_eq!(frames("rate 40gbit"), 4096);
        // A schedule's highest step.
        assert_eq!(frames("schedule 1s 10mbit 2gbit 100mbit"), 1652);
    }

    #[test]
    fn links_up_to_1_gbits_or_without_a_rate_read_the_socket_and_faster_ones_a_ring() {
        assert_eq!(
            mode("rate 4gbit delay 40ms"),
            ReceiveMode::Ring { frames: 3303 }
        );
        assert_eq!(
            mode("delay 1ms"),
            ReceiveMode::Socket {
                buffer_bytes: 32 << 20
            }
        );
        assert_eq!(mode(""), ReceiveMode::default());
        // A schedule counts by its highest step.
        assert_eq!(
            mode("schedule 1s 10mbit 2gbit"),
            ReceiveMode::Ring { frames: 1652 }
        );
        // 512 frames x 1514 B x 2 = 1.5 MB: the 4 MiB floor.
        assert_eq!(
            mode("rate 10mbit delay 5ms"),
            ReceiveMode::Socket {
                buffer_bytes: 4 << 20
            }
        );
        // 1 Gbit/s: 826 frames in 10 ms, x 1514 B x 2 = 2.5 MB, still the floor.
        assert_eq!(
            mode("rate 1gbit"),
            ReceiveMode::Socket {
                buffer_bytes: 4 << 20
            }
        );
        assert_eq!(
            ReceiveMode::socket_for_link(&LinkSpec::parse("rate 40gbit").unwrap()),
            ReceiveMode::Socket {
                buffer_bytes: 4096 * 1514 * 2
            }
        );
    }
}

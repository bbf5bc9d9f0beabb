//! Receiving from a packet socket's own buffer, several frames per `recvmmsg(2)`: the
//! alternative to a [`super::RxRing`] that costs memory only while frames wait in the
//! kernel, not the ring's fixed tens of MB.

#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::BorrowedFd;

use super::setsockopt;

/// `PACKET_AUXDATA`: a `tpacket_auxdata` with every frame (its length on the wire, the
/// VLAN tag the driver took off).
const PACKET_AUXDATA: libc::c_int = 8;
/// `PACKET_STATISTICS`: the socket's frame and drop counters since the last read.
const PACKET_STATISTICS: libc::c_int = 6;

/// `struct tpacket_auxdata` (the kernel's field names).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(clippy::struct_field_names)]
struct TpacketAuxdata {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
}

/// `struct tpacket_stats` (the kernel's field names).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(clippy::struct_field_names)]
struct TpacketStats {
    tp_packets: u32,
    tp_drops: u32,
}

/// Control buffer per slot, in u64 words for alignment: a `cmsghdr` (16 bytes) with a
/// `tpacket_auxdata` (20, to 40 in all) and one with a `timespec` (16, to 32), with room
/// to spare.
const CONTROL_WORDS: usize = 12;

/// Turns on the frame metadata [`PacketBatch`] reads: `PACKET_AUXDATA`, and
/// `SO_TIMESTAMPNS` (when the kernel received each frame).
pub fn enable_packet_auxdata(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(fd, libc::SOL_PACKET, PACKET_AUXDATA, &1i32)?;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1i32)
}

/// Frames the kernel dropped on this packet socket since the last call (its receive
/// buffer was full), read and reset with `PACKET_STATISTICS`.
pub fn packet_drops(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: TpacketStats is plain data (two u32).
    let (stats, _) = unsafe {
        super::getsockopt_plain::<TpacketStats>(fd, libc::SOL_PACKET, PACKET_STATISTICS)
    }?;
    Ok(u64::from(stats.tp_drops))
}

/// One frame of a [`PacketBatch`].
#[derive(Debug, Clone, Copy)]
pub struct PacketFrame<'a> {
    /// What was copied: the vnet header (with `PACKET_VNET_HDR` on), then the frame.
    pub data: &'a [u8],
    /// Bytes the packet had (more than `data` holds after its vnet header when
    /// truncated).
    pub wire_len: u32,
    /// A VLAN tag the driver took off the frame (tci, tpid), to put back.
    pub vlan: Option<(u16, u16)>,
    /// The frame was longer than the slot.
    pub truncated: bool,
    /// When the kernel received it (`CLOCK_REALTIME`, ns since the Unix epoch), if it said.
    pub received_unix_ns: Option<u64>,
    /// The interface it arrived on (a socket bound to every interface sees several).
    pub ifindex: u32,
}

/// What the kernel filled in for one slot.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    len: usize,
    auxdata: TpacketAuxdata,
    truncated: bool,
    received_unix_ns: Option<u64>,
    ifindex: u32,
}

/// Room for `slots` frames of up to `slot_len` bytes, received with one `recvmmsg(2)`.
/// The slots are an anonymous mapping, so only the pages frames were written to take
/// memory: a port that sees a few small frames costs a few pages, not `slots x slot_len`.
#[derive(Debug)]
pub struct PacketBatch {
    map: *mut u8,
    slot_len: usize,
    slots: usize,
    controls: Vec<[u64; CONTROL_WORDS]>,
    /// Where each slot's frame came from.
    names: Vec<libc::sockaddr_ll>,
    received: Vec<Slot>,
}

// SAFETY: the mapping belongs to the batch alone and is only reached through `&mut self`
// (receiving) or `&self` (reading what was received).
unsafe impl Send for PacketBatch {}

impl PacketBatch {
    /// Room for `slots` (1 to [`super::MAX_BATCH`]) frames of `slot_len` bytes each.
    pub fn new(slots: usize, slot_len: usize) -> io::Result<PacketBatch> {
        let slots = slots.clamp(1, super::MAX_BATCH);
        assert!(slot_len > 0);
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                slots * slot_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketBatch {
            map: map.cast(),
            slot_len,
            slots,
            controls: vec![[0; CONTROL_WORDS]; slots],
            // SAFETY: sockaddr_ll is plain data; all-zero is valid.
            names: vec![unsafe { zeroed() }; slots],
            received: Vec::with_capacity(slots),
        })
    }

    /// How many frames one [`PacketBatch::recv`] can take.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Receives up to `max` waiting frames (at most [`PacketBatch::slots`]) without
    /// blocking: the number received, 0 when none waited. Allocates nothing.
    pub fn recv(&mut self, fd: BorrowedFd<'_>, max: usize) -> io::Result<usize> {
        self.received.clear();
        let slots = max.clamp(1, self.slots);
        let mut iovecs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; super::MAX_BATCH];
        for (i, iov) in iovecs[..slots].iter_mut().enumerate() {
            // SAFETY: slot i lies inside the mapping (i < self.slots).
            iov.iov_base = unsafe { self.map.add(i * self.slot_len) }.cast();
            iov.iov_len = self.slot_len;
        }
        // SAFETY: mmsghdr is plain data; all-zero is valid.
        let mut headers: [libc::mmsghdr; super::MAX_BATCH] = unsafe { zeroed() };
        for (i, header) in headers[..slots].iter_mut().enumerate() {
            header.msg_hdr.msg_iov = &raw mut iovecs[i];
            header.msg_hdr.msg_iovlen = 1;
            header.msg_hdr.msg_control = self.controls[i].as_mut_ptr().cast();
            header.msg_hdr.msg_controllen = size_of::<[u64; CONTROL_WORDS]>() as _;
            header.msg_hdr.msg_name = (&raw mut self.names[i]).cast();
            header.msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        }
        // SAFETY: the first `slots` headers point into the mapping, `self.controls` and
        // `self.names`, which outlive the call, with the lengths given.
        let result = unsafe { super::recvmmsg_now(fd, &mut headers[..slots]) }?;
        for (i, header) in headers[..result].iter().enumerate() {
            // SAFETY: the kernel filled this header; its control buffer is in `self`.
            let (auxdata, received_unix_ns) = unsafe { control(&header.msg_hdr) };
            self.received.push(Slot {
                len: (header.msg_len as usize).min(self.slot_len),
                auxdata: auxdata.unwrap_or_default(),
                truncated: header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                received_unix_ns,
                ifindex: self.names[i].sll_ifindex as u32,
            });
        }
        Ok(self.received.len())
    }

    /// The frames of the last [`PacketBatch::recv`], in arrival order.
    pub fn frames(&self) -> impl Iterator<Item = PacketFrame<'_>> {
        self.received.iter().enumerate().map(|(i, slot)| {
            // SAFETY: slot i lies inside the mapping and the kernel wrote `slot.len`
            // (at most `slot_len`) bytes of it; the borrow of `self` keeps the next recv
            // from overwriting it while the frame lives.
            let data =
                unsafe { std::slice::from_raw_parts(self.map.add(i * self.slot_len), slot.len) };
            let aux = slot.auxdata;
            PacketFrame {
                data,
                wire_len: aux.tp_len,
                vlan: super::ring::vlan_tag(aux.tp_status, aux.tp_vlan_tci, aux.tp_vlan_tpid),
                truncated: slot.truncated,
                received_unix_ns: slot.received_unix_ns,
                ifindex: slot.ifindex,
            }
        })
    }
}

impl Drop for PacketBatch {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no frame borrows outlive `self`.
        unsafe {
            libc::munmap(self.map.cast(), self.slots * self.slot_len);
        }
    }
}

/// The `PACKET_AUXDATA` and `SCM_TIMESTAMPNS` messages of a received frame, where the
/// kernel attached them.
///
/// # Safety
/// `message` must be a header `recvmmsg` filled, its control buffer still alive.
unsafe fn control(message: &libc::msghdr) -> (Option<TpacketAuxdata>, Option<u64>) {
    let (mut auxdata, mut received) = (None, None);
    // SAFETY: the caller guarantees the header and its control buffer; CMSG_* walk only
    // within msg_controllen, and each payload is read unaligned after its length is
    // checked.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(message);
        while !cmsg.is_null() {
            let header = &*cmsg;
            let fits = |len: usize| header.cmsg_len as usize >= libc::CMSG_LEN(len as u32) as usize;
            if header.cmsg_level == libc::SOL_PACKET
                && header.cmsg_type == PACKET_AUXDATA
                && fits(size_of::<TpacketAuxdata>())
            {
                auxdata = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<TpacketAuxdata>(),
                ));
            } else if header.cmsg_level == libc::SOL_SOCKET
                && header.cmsg_type == libc::SCM_TIMESTAMPNS
                && fits(size_of::<libc::timespec>())
            {
                let at = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                received = Some(at.tv_sec as u64 * 1_000_000_000 + at.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(message, cmsg);
        }
    }
    (auxdata, received)
}

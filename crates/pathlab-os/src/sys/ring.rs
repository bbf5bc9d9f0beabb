//! A `PACKET_RX_RING` (TPACKET_V2) shared with the kernel.
//!
//! V2 and not V3: a V3 block reaches user space only when it is full or when its retire
//! timer fires, and that timer counts in milliseconds, so at low rates a V3 ring delays
//! packets by up to a millisecond; the emulator's timing budget is 50 us. V2 hands over
//! each frame as soon as the kernel has written it.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::setsockopt;

/// `struct tpacket2_hdr`, at the start of every frame (the kernel's field names).
#[repr(C)]
#[allow(clippy::struct_field_names)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_LOSING: u32 = 1 << 2;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// `struct tpacket_req` (the kernel's field names).
#[repr(C)]
#[allow(clippy::struct_field_names)]
#[derive(Clone, Copy)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

/// A receive ring mapped from a packet socket.
#[derive(Debug)]
pub struct RxRing {
    socket: OwnedFd,
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    frame_count: usize,
    next: usize,
}

// SAFETY: the mapping belongs to the ring alone; frames are handed out by `&mut self`.
unsafe impl Send for RxRing {}

/// One received frame, borrowed from the ring until dropped.
#[derive(Debug)]
pub struct RxFrame<'a> {
    /// The bytes captured, starting `vnet_len` bytes before the Ethernet header when the
    /// socket has `PACKET_VNET_HDR` on.
    pub data: &'a [u8],
    /// Bytes the packet had on the wire (more than `data` when truncated).
    pub wire_len: u32,
    /// A VLAN tag the driver took off the frame (tci, tpid), to put back.
    pub vlan: Option<(u16, u16)>,
    /// Whether the kernel dropped packets because the ring was full since the last frame.
    pub losing: bool,
    /// When the kernel received the frame (`CLOCK_REALTIME`), ns since the Unix epoch.
    pub received_unix_ns: u64,
    status: &'a AtomicU32,
}

impl Drop for RxFrame<'_> {
    fn drop(&mut self) {
        // Hand the frame back; Release orders our reads of it before the kernel's reuse.
        self.status.store(TP_STATUS_KERNEL, Ordering::Release);
    }
}

impl RxRing {
    /// Sets up a TPACKET_V2 receive ring of `frame_count` frames of `frame_size` bytes
    /// on `socket` (which must not be bound yet, so no packet bypasses the ring).
    pub fn new(socket: OwnedFd, frame_size: usize, frame_count: usize) -> io::Result<RxRing> {
        let page = page_size();
        assert!(
            frame_size.is_multiple_of(16) && frame_size >= 2048,
            "frame size must be a multiple of 16"
        );
        // One frame per block keeps blocks small enough to allocate; a block is a whole
        // number of pages.
        let block_size = frame_size.div_ceil(page) * page;
        let frames_per_block = block_size / frame_size;
        let block_count = frame_count.div_ceil(frames_per_block);
        let frame_count = block_count * frames_per_block;
        setsockopt(
            socket.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &TPACKET_V2,
        )?;
        let request = TpacketReq {
            tp_block_size: block_size as u32,
            tp_block_nr: block_count as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frame_count as u32,
        };
        setsockopt(
            socket.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &request,
        )?;
        let map_len = block_size * block_count;
        // SAFETY: mapping a packet ring of exactly the size we asked the kernel for.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                socket.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // With one or more frames per block and blocks back to back, frame i starts at
        // (i / per_block) * block_size + (i % per_block) * frame_size.
        assert!(frames_per_block >= 1);
        Ok(RxRing {
            socket,
            map: map.cast(),
            map_len,
            frame_size: if frames_per_block == 1 {
                block_size
            } else {
                frame_size
            },
            frame_count,
            next: 0,
        })
    }

    /// The socket, for binding, options and poll.
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// The next frame the kernel has filled, if any. Frames come in ring order; drop the
    /// frame to give it back before asking for the next.
    pub fn next_frame(&mut self) -> Option<RxFrame<'_>> {
        let offset = self.next * self.frame_size;
        // No reference to the header yet: the kernel may be writing it. Only raw pointers
        // until the acquire load of its status says the frame is ours.
        #[allow(clippy::cast_ptr_alignment)]
        // frames start at multiples of 16 in a page-aligned map
        // SAFETY: `offset` is inside the mapping (next < frame_count, frames back to back),
        // and the 32-byte header lies within the frame.
        let header_ptr = unsafe { self.map.add(offset) }.cast::<Tpacket2Hdr>();
        // SAFETY: a place expression through the raw pointer, no reference created; the
        // field is aligned for u32 (the header is aligned to 16) and valid for as long as
        // the mapping, which outlives the frame's borrow of `self`. The kernel writes it
        // concurrently, so it is only ever accessed through this atomic.
        let status =
            unsafe { AtomicU32::from_ptr(std::ptr::addr_of_mut!((*header_ptr).tp_status)) };
        let value = status.load(Ordering::Acquire);
        if value & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: TP_STATUS_USER, read with Acquire: the kernel finished writing the frame
        // and will not touch it until the status goes back to KERNEL (when the frame is
        // dropped). A copy, so no reference to shared memory lives on.
        let header = unsafe { std::ptr::read(header_ptr) };
        self.next = (self.next + 1) % self.frame_count;
        let mac = header.tp_mac as usize;
        let snaplen = header.tp_snaplen as usize;
        // tp_mac points at the Ethernet header; with PACKET_VNET_HDR the virtio header sits
        // just before it, and the caller asks for it by reading before `mac`.
        let start = mac.saturating_sub(super::VNET_HDR_LEN);
        let end = (mac + snaplen).min(self.frame_size);
        // SAFETY: [start, end) lies inside this frame, which the kernel handed to us
        // (TP_STATUS_USER) and will not touch until the status goes back to KERNEL.
        let data = unsafe { std::slice::from_raw_parts(self.map.add(offset + start), end - start) };
        let vlan = vlan_tag(value, header.tp_vlan_tci, header.tp_vlan_tpid);
        Some(RxFrame {
            data,
            wire_len: header.tp_len,
            vlan,
            losing: value & TP_STATUS_LOSING != 0,
            received_unix_ns: u64::from(header.tp_sec) * 1_000_000_000 + u64::from(header.tp_nsec),
            status,
        })
    }
}

/// The VLAN tag a frame's status says the driver took off: (tci, tpid), the tpid 802.1Q's
/// when the kernel does not say. The ring's frame header and `PACKET_AUXDATA` carry the
/// same status bits and fields.
pub(super) fn vlan_tag(status: u32, tci: u16, tpid: u16) -> Option<(u16, u16)> {
    (status & TP_STATUS_VLAN_VALID != 0).then(|| {
        let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
            tpid
        } else {
            pathlab_core::wire::ethernet::TPID_8021Q
        };
        (tci, tpid)
    })
}

/// The system's page size (a ring's blocks are whole pages: 4 KiB on most machines, 16 or
/// 64 KiB on some ARM and POWER kernels).
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the running system; no memory is involved.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096)
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no frame borrows outlive `self`.
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

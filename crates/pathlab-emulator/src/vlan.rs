//! A one-port VLAN box: two VLANs of one trunk interface as an emulator's two ports
//! (`pathlab emulate --trunk IF --vlans A,B`), without the kernel's 8021q module.
//!
//! A switch sends the box the frames of VLAN A and VLAN B tagged on one port; the box
//! sends each VLAN's frames back tagged with the other's ID, so the switch delivers them
//! into the other VLAN, through the link model. Each [`VlanPort`] is one VLAN's view of
//! the trunk:
//!
//! - **Receiving**, the kernel has already taken the 802.1Q tag out of the frame's bytes
//!   into the skb (`__netif_receive_skb_core` untags before any packet socket sees the
//!   frame), and reports it beside the frame (`tp_vlan_tci` in the ring's frame header,
//!   or `PACKET_AUXDATA` for the socket). A socket filter on each port's socket keeps
//!   only its VLAN's frames, in the kernel ([`pathlab_os::sys::VlanFilter`]): untagged frames,
//!   other VLANs, 802.1ad outer tags, frames to the reserved link-local addresses (STP,
//!   LACP, LLDP) and what this host sent never reach it.
//! - **The link model** gets the frame as it was inside the VLAN, without a tag: the
//!   size a `rate` counts is the untagged frame's, as on the client's and the server's
//!   access ports and as netem on a `eth0.5` VLAN device counts it, so a spec means the
//!   same through `--trunk` as through `--between`. A capture shows the frames so, on
//!   interfaces named `IF.A` and `IF.B`.
//! - **Sending**, the tag of the port's VLAN is written into the frame after the MAC
//!   addresses (priority 0), gathered by `writev` without copying the frame; a GSO
//!   super-packet gets it in its headers, which the kernel copies into every segment.
//!   The tagged frame is 4 bytes longer than the interface's MTU allows for an untagged
//!   one, which 802.1Q and the kernel allow (up to 1522 bytes on a 1500-byte MTU).
//!
//! The sending socket never sees its own frames come back: the receiving sockets ignore
//! outgoing frames (`PACKET_IGNORE_OUTGOING`, and the filter again).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use crate::port::{self, Port, PortError, ReceiveCounts, ReceiveMode, Receiver, Transmit};
use pathlab_core::buffers::BufferPool;
use pathlab_core::wire::ethernet::{VlanTag, TPID_8021Q, VLAN_TAG_LEN, VLAN_TAG_OFFSET};
use pathlab_core::wire::offload::{self, Framing, VnetHeader};
use pathlab_os::netns::Netns;
use pathlab_os::sys;

/// Why a VLAN setting is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VlanError {
    /// Not two IDs separated by a comma.
    #[error("expected exactly two VLAN IDs separated by a comma (like 5,6), got '{0}'")]
    NotTwo(String),
    /// Not a number from 1 to 4094.
    #[error(
        "'{0}' is not a VLAN ID: IDs are 1 to 4094 (0 marks a priority-only tag, 4095 is \
         reserved)"
    )]
    NotAnId(String),
    /// The same ID twice: a VLAN cannot be bridged to itself.
    #[error("expected two different VLAN IDs, got {0} twice")]
    Same(u16),
    /// The native VLAN is not one of the two.
    #[error("the untagged frames' VLAN {untagged} is not one of the bridged VLANs {a},{b}")]
    UntaggedNotBridged {
        /// The native VLAN asked for.
        untagged: u16,
        /// The first bridged VLAN.
        a: u16,
        /// The second.
        b: u16,
    },
}

/// Reads a VLAN ID, 1 to 4094.
pub fn parse_vid(text: &str) -> Result<u16, VlanError> {
    text.trim()
        .parse::<u16>()
        .ok()
        .filter(|vid| (1..=4094).contains(vid))
        .ok_or_else(|| VlanError::NotAnId(text.trim().to_owned()))
}

/// The two VLANs a trunk emulator bridges, and which of them (if any) the trunk carries
/// untagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrunkVlans {
    /// Direction 0 goes from `vlans[0]` to `vlans[1]`.
    pub vlans: [u16; 2],
    /// The VLAN untagged (and priority-tagged) frames belong to, whose frames leave
    /// untagged; `None`: untagged frames are not forwarded.
    pub untagged: Option<u16>,
}

impl TrunkVlans {
    /// Reads `A,B`: two different VLAN IDs.
    pub fn parse(text: &str) -> Result<TrunkVlans, VlanError> {
        let ids: Vec<&str> = text.split(',').collect();
        let [a, b] = ids[..] else {
            return Err(VlanError::NotTwo(text.to_owned()));
        };
        let vlans = [parse_vid(a)?, parse_vid(b)?];
        if vlans[0] == vlans[1] {
            return Err(VlanError::Same(vlans[0]));
        }
        Ok(TrunkVlans {
            vlans,
            untagged: None,
        })
    }

    /// The same VLANs with `untagged` (one of them) as the trunk's untagged VLAN.
    pub fn with_untagged(self, untagged: Option<u16>) -> Result<TrunkVlans, VlanError> {
        let [a, b] = self.vlans;
        match untagged {
            Some(vid) if vid != a && vid != b => Err(VlanError::UntaggedNotBridged {
                untagged: vid,
                a,
                b,
            }),
            _ => Ok(TrunkVlans { untagged, ..self }),
        }
    }
}

/// The name a VLAN port goes by (in stats, recordings, captures): `IF.VID`, as the
/// kernel's 8021q devices are usually named.
pub fn port_name(trunk: &str, vid: u16) -> String {
    format!("{trunk}.{vid}")
}

/// The lock of a trunk interface, which both of its VLAN ports hold: the same lock as a
/// [`port::PacketPort`]'s, so one emulator has the interface.
#[derive(Debug)]
struct TrunkLock {
    path: PathBuf,
    _file: File,
}

impl Drop for TrunkLock {
    fn drop(&mut self) {
        // Unlinked while still held, so no other process can have locked it meanwhile.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One VLAN of a trunk interface as a port: it receives that VLAN's frames without their
/// tag and sends frames with it (none when the VLAN is the trunk's untagged one).
#[derive(Debug)]
pub struct VlanPort {
    name: String,
    /// The trunk's interface index.
    pub ifindex: u32,
    /// The VLAN.
    pub vid: u16,
    /// Whether this VLAN's frames cross the trunk untagged.
    pub untagged: bool,
    rx: Receiver,
    tx: OwnedFd,
    _lock: Arc<TrunkLock>,
    netns: Netns,
}

/// Opens the two VLAN ports of trunk interface `trunk` in the calling thread's namespace:
/// `vlans.vlans[i]` receiving as `modes[i]` says.
pub fn open_trunk(
    trunk: &str,
    vlans: TrunkVlans,
    modes: [ReceiveMode; 2],
) -> Result<[VlanPort; 2], PortError> {
    let link = port::usable_link(trunk)?;
    let (lock, path) = pathlab_os::runtime::lock_interface(link.index)
        .map_err(port::io_error("locking", trunk))?;
    let Some(file) = lock else {
        return Err(PortError::Busy {
            name: trunk.to_owned(),
            lock: path,
        });
    };
    let lock = Arc::new(TrunkLock { path, _file: file });
    let netns = || Netns::current().map_err(port::io_error("opening its network namespace", trunk));
    let open = |vid: u16, mode: ReceiveMode| -> Result<VlanPort, PortError> {
        let untagged = vlans.untagged == Some(vid);
        let filter = sys::VlanFilter { vid, untagged };
        Ok(VlanPort {
            name: port_name(trunk, vid),
            ifindex: link.index,
            vid,
            untagged,
            rx: Receiver::open(trunk, link.index, mode, Some(filter))?,
            tx: port::open_sender(trunk, link.index)?,
            _lock: Arc::clone(&lock),
            netns: netns()?,
        })
    };
    Ok([
        open(vlans.vlans[0], modes[0])?,
        open(vlans.vlans[1], modes[1])?,
    ])
}

/// Whether a frame the kernel received with `tag` (tci, tpid; `None`: untagged) belongs
/// to VLAN `vid` (`untagged`: the trunk's untagged VLAN): what the socket filter lets
/// through, checked again.
fn is_ours(vid: u16, untagged: bool, tag: Option<(u16, u16)>) -> bool {
    match tag.map(|(tci, tpid)| VlanTag { tpid, tci }) {
        None => untagged,
        Some(tag) if tag.tpid == TPID_8021Q => match tag.vid() {
            0 => untagged,
            tagged => tagged == vid,
        },
        Some(_) => false,
    }
}

impl Port for VlanPort {
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
        let (vid, untagged) = (self.vid, self.untagged);
        let ours = move |tag| is_ours(vid, untagged, tag);
        self.rx.receive_timed(budget, pool, Some(&ours), deliver)
    }

    fn transmitter(&self) -> io::Result<Box<dyn Transmit>> {
        Ok(Box::new(VlanTx {
            socket: self.tx.try_clone()?,
            tag: (!self.untagged).then(|| tag_bytes(self.vid)),
        }))
    }

    fn exists(&self) -> bool {
        port::interface_exists_in(&self.netns, self.ifindex)
    }

    fn take_error(&mut self) -> Option<io::Error> {
        self.rx.take_error()
    }
}

/// The 802.1Q tag of VLAN `vid`, priority 0, as it goes into a frame.
pub fn tag_bytes(vid: u16) -> [u8; VLAN_TAG_LEN] {
    VlanTag::dot1q(vid).to_bytes()
}

/// A [`VlanPort`]'s sending half: its send socket (a duplicate descriptor), writing its
/// VLAN's tag into every frame after the MAC addresses.
#[derive(Debug)]
struct VlanTx {
    socket: OwnedFd,
    /// `None`: the VLAN leaves untagged.
    tag: Option<[u8; VLAN_TAG_LEN]>,
}

/// `vnet` for the packet once a tag is in it: the offsets into it move by the tag.
fn shifted(vnet: &VnetHeader) -> VnetHeader {
    let shift = |offset: u16| {
        if offset == 0 {
            0
        } else {
            offset + VLAN_TAG_LEN as u16
        }
    };
    VnetHeader {
        hdr_len: shift(vnet.hdr_len),
        csum_start: shift(vnet.csum_start),
        ..*vnet
    }
}

impl Transmit for VlanTx {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.send_gso(frame, &VnetHeader::default())
    }

    fn can_send_gso(&self) -> bool {
        true
    }

    fn send_gso(&mut self, packet: &[u8], vnet: &VnetHeader) -> io::Result<()> {
        match &self.tag {
            Some(tag) if packet.len() >= VLAN_TAG_OFFSET => {
                let vnet = shifted(vnet).to_bytes();
                let parts: [&[u8]; 4] = [
                    &vnet,
                    &packet[..VLAN_TAG_OFFSET],
                    tag,
                    &packet[VLAN_TAG_OFFSET..],
                ];
                sys::send_gather(self.socket.as_fd(), None, &parts).map(drop)
            }
            _ => sys::send_gather(self.socket.as_fd(), None, &[&vnet.to_bytes(), packet]).map(drop),
        }
    }

    /// Gathers the super-packet from the frames where they are, as a
    /// [`port::PacketPort`]'s sending half does, with the tag between its MAC addresses
    /// and the rest of its headers.
    fn send_run(&mut self, frames: &[&[u8]]) -> io::Result<()> {
        let (headers, vnet) = offload::gso_headers(frames, Framing::Ethernet);
        let (vnet, tag): ([u8; 10], &[u8]) = match &self.tag {
            Some(tag) => (shifted(&vnet).to_bytes(), tag),
            None => (vnet.to_bytes(), &[]),
        };
        let mut parts: [&[u8]; sys::GATHER_MAX] = [&[]; sys::GATHER_MAX];
        parts[..4].copy_from_slice(&[
            &vnet,
            &headers[..VLAN_TAG_OFFSET],
            tag,
            &headers[VLAN_TAG_OFFSET..],
        ]);
        for (part, frame) in parts[4..].iter_mut().zip(frames) {
            *part = &frame[headers.len()..];
        }
        sys::send_gather(self.socket.as_fd(), None, &parts[..4 + frames.len()]).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlans_are_two_different_ids_from_1_to_4094() {
        assert_eq!(
            TrunkVlans::parse("5,6"),
            Ok(TrunkVlans {
                vlans: [5, 6],
                untagged: None
            })
        );
        assert_eq!(TrunkVlans::parse(" 4094 , 1 ").unwrap().vlans, [4094, 1]);
        for (text, error) in [
            ("5,5", VlanError::Same(5)),
            ("5", VlanError::NotTwo("5".into())),
            ("5,6,7", VlanError::NotTwo("5,6,7".into())),
            ("0,6", VlanError::NotAnId("0".into())),
            ("5,4095", VlanError::NotAnId("4095".into())),
            ("5,six", VlanError::NotAnId("six".into())),
        ] {
            assert_eq!(TrunkVlans::parse(text), Err(error), "{text}");
        }
        let vlans = TrunkVlans::parse("5,6").unwrap();
        assert_eq!(vlans.with_untagged(Some(6)).unwrap().untagged, Some(6));
        assert_eq!(
            vlans.with_untagged(Some(7)),
            Err(VlanError::UntaggedNotBridged {
                untagged: 7,
                a: 5,
                b: 6
            })
        );
    }

    #[test]
    fn a_port_takes_its_vlans_8021q_frames_and_untagged_ones_only_if_native() {
        assert!(is_ours(5, false, Some((5, 0x8100))));
        assert!(is_ours(5, false, Some((0xA005, 0x8100))), "any priority");
        assert!(!is_ours(5, false, Some((6, 0x8100))));
        assert!(!is_ours(5, false, Some((5, 0x88A8))));
        assert!(!is_ours(5, false, None));
        assert!(!is_ours(5, false, Some((0x2000, 0x8100))));
        assert!(is_ours(5, true, None));
        assert!(is_ours(5, true, Some((0x2000, 0x8100))));
        assert!(!is_ours(5, true, Some((7, 0x8100))));
    }

    #[test]
    fn the_tag_is_8021q_with_priority_0() {
        assert_eq!(tag_bytes(5), [0x81, 0x00, 0x00, 0x05]);
        assert_eq!(tag_bytes(4094), [0x81, 0x00, 0x0F, 0xFE]);
    }

    #[test]
    fn offsets_into_a_tagged_packet_move_by_the_tag() {
        let vnet = VnetHeader {
            flags: 1,
            gso_type: 1,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let moved = shifted(&vnet);
        assert_eq!((moved.hdr_len, moved.csum_start), (70, 38));
        assert_eq!((moved.gso_size, moved.csum_offset), (1448, 16));
        assert_eq!(shifted(&VnetHeader::default()), VnetHeader::default());
    }
}

//! A classic BPF socket filter that lets a packet socket see one VLAN of a trunk: the
//! kernel drops every other frame before copying it, so the two sockets of a VLAN box
//! each get only their own VLAN's frames.
//!
//! The filter reads the tag where the kernel keeps it on receive: `__netif_receive_skb_core`
//! takes an 802.1Q or 802.1ad tag out of the frame into the skb's metadata before packet
//! sockets see it (without the 8021q module too), so the frame's bytes no longer hold it;
//! the ancillary loads `SKF_AD_VLAN_TAG_PRESENT`, `SKF_AD_VLAN_TPID` and `SKF_AD_VLAN_TAG`
//! read that metadata (Linux 4.5 for the TPID).

#![allow(unsafe_code)]

use std::io;
use std::os::fd::BorrowedFd;

use pathlab_core::wire::ethernet;

use super::setsockopt;

/// `PACKET_OUTGOING`: a frame this host sent.
pub(super) const PACKET_OUTGOING: u32 = 4;
/// The first four bytes of the IEEE 802.1D reserved group addresses 01-80-C2-00-00-00 to
/// 0F (STP, pause, LACP, 802.1X, LLDP): frames for the link they arrived on, which no
/// bridge forwards.
const RESERVED_GROUP_PREFIX: u32 = 0x0180_C200;

/// What [`attach_vlan_filter`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanFilter {
    /// The VLAN ID (1 to 4094) whose 802.1Q-tagged frames pass.
    pub vid: u16,
    /// Whether untagged and priority-tagged (VID 0) frames pass too: the trunk's native
    /// VLAN is this one.
    pub untagged: bool,
}

pub(super) fn statement(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

pub(super) fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The ancillary load of `what` (an `SKF_AD_*` offset).
pub(super) fn load_ancillary(what: libc::c_int) -> libc::sock_filter {
    statement(
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        (libc::SKF_AD_OFF + what) as u32,
    )
}

/// The filter's program. Jumps are relative to the next instruction; the two returns are
/// the last instructions (`ACCEPT`, `DROP`).
fn program(filter: VlanFilter) -> Vec<libc::sock_filter> {
    const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const JSET: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
    // Instruction indices, so each jump's offset is `target - (index + 1)`.
    const ACCEPT: u8 = 14;
    const DROP: u8 = 15;
    const UNTAGGED: u8 = 13;
    let to = |from: u8, target: u8| target - (from + 1);
    let untagged_verdict = if filter.untagged { ACCEPT } else { DROP };
    let program = vec![
        // 0-1: never what this host sent (PACKET_IGNORE_OUTGOING says so too).
        load_ancillary(libc::SKF_AD_PKTTYPE),
        jump(JEQ, PACKET_OUTGOING, to(1, DROP), 0),
        // 2-5: never the reserved link-local group addresses.
        statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jump(JEQ, RESERVED_GROUP_PREFIX, 0, to(3, 6)),
        statement(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, 4),
        jump(JSET, 0xFFF0, 0, to(5, DROP)),
        // 6-7: tagged or not.
        load_ancillary(libc::SKF_AD_VLAN_TAG_PRESENT),
        jump(JEQ, 0, to(7, UNTAGGED), 0),
        // 8-12: 802.1Q with this VID; VID 0 (priority tag only) counts as untagged.
        load_ancillary(libc::SKF_AD_VLAN_TPID),
        jump(JEQ, u32::from(ethernet::TPID_8021Q), 0, to(9, DROP)),
        load_ancillary(libc::SKF_AD_VLAN_TAG),
        statement(
            libc::BPF_ALU | libc::BPF_AND | libc::BPF_K,
            u32::from(ethernet::VID_MASK),
        ),
        jump(JEQ, u32::from(filter.vid), to(12, ACCEPT), 0),
        // 13 (UNTAGGED, and VID 0 falls through to here from 12 only when it is 0).
        jump(JEQ, 0, to(13, untagged_verdict), to(13, DROP)),
        // 14: ACCEPT the whole frame; 15: DROP.
        statement(libc::BPF_RET | libc::BPF_K, u32::MAX),
        statement(libc::BPF_RET | libc::BPF_K, 0),
    ];
    debug_assert_eq!(program.len(), usize::from(DROP) + 1);
    program
}

/// Attaches the filter to a packet socket (before it is bound, so no frame arrives
/// unfiltered).
pub fn attach_vlan_filter(fd: BorrowedFd<'_>, filter: VlanFilter) -> io::Result<()> {
    attach(fd, program(filter))
}

/// Attaches a classic BPF `program` to a socket.
pub(super) fn attach(fd: BorrowedFd<'_>, mut program: Vec<libc::sock_filter>) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // The kernel copies the program during the call; `program` outlives it.
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// Runs a classic BPF program as the kernel's interpreter would for the instructions
/// pathlab's filters use: loads of the frame's bytes and of the metadata `ancillary` gives
/// (an `SKF_AD_*` offset to its value), AND and MOD by a constant, JEQ and JSET, RET. The
/// verdict is whether the frame passes. The filters' tests judge their programs with it.
#[cfg(test)]
pub(super) fn interpret(
    program: &[libc::sock_filter],
    frame: &[u8],
    ancillary: &dyn Fn(libc::c_int) -> u32,
) -> bool {
    let (mut a, mut pc) = (0u32, 0usize);
    loop {
        let insn = program[pc];
        let code = u32::from(insn.code);
        pc += 1;
        match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                a = match insn.k.checked_sub(libc::SKF_AD_OFF as u32) {
                    Some(what) => ancillary(what as libc::c_int),
                    None => {
                        let at = insn.k as usize;
                        u32::from_be_bytes(frame[at..at + 4].try_into().expect("4 bytes"))
                    }
                };
            }
            c if c == libc::BPF_LD | libc::BPF_H | libc::BPF_ABS => {
                let at = insn.k as usize;
                a = u32::from(u16::from_be_bytes([frame[at], frame[at + 1]]));
            }
            c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= insn.k,
            c if c == libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K => a %= insn.k,
            c if c & 0x07 == libc::BPF_JMP => {
                let taken = if c & 0xf0 == libc::BPF_JSET {
                    a & insn.k != 0
                } else {
                    a == insn.k
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            c if c == libc::BPF_RET | libc::BPF_K => return insn.k != 0,
            other => panic!("unexpected instruction {other:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on a frame's first six bytes and its metadata; the verdict is
    /// whether it passes.
    fn passes(filter: VlanFilter, dst: [u8; 6], outgoing: bool, tag: Option<(u16, u16)>) -> bool {
        interpret(&program(filter), &dst, &|what| match what {
            libc::SKF_AD_PKTTYPE => {
                if outgoing {
                    PACKET_OUTGOING
                } else {
                    0
                }
            }
            libc::SKF_AD_VLAN_TAG_PRESENT => u32::from(tag.is_some()),
            libc::SKF_AD_VLAN_TPID => u32::from(tag.map_or(0, |t| t.1)),
            libc::SKF_AD_VLAN_TAG => u32::from(tag.map_or(0, |t| t.0)),
            other => panic!("unexpected ancillary load {other}"),
        })
    }

    const HOST: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
    const STP: [u8; 6] = [0x01, 0x80, 0xC2, 0, 0, 0];
    const LLDP: [u8; 6] = [0x01, 0x80, 0xC2, 0, 0, 0x0E];
    const NOT_RESERVED: [u8; 6] = [0x01, 0x80, 0xC2, 0, 0, 0x20];

    #[test]
    fn only_its_vlans_tagged_frames_pass_unless_untagged_is_its_own() {
        let vlan5 = VlanFilter {
            vid: 5,
            untagged: false,
        };
        assert!(passes(vlan5, HOST, false, Some((5, 0x8100))));
        // The priority bits do not matter.
        assert!(passes(vlan5, HOST, false, Some((0xE005, 0x8100))));
        assert!(!passes(vlan5, HOST, false, Some((6, 0x8100))));
        assert!(!passes(vlan5, HOST, false, Some((7, 0x8100))));
        assert!(!passes(vlan5, HOST, false, Some((5, 0x88A8))), "802.1ad");
        assert!(!passes(vlan5, HOST, false, None), "untagged");
        assert!(!passes(vlan5, HOST, false, Some((0x2000, 0x8100))), "VID 0");
        assert!(!passes(vlan5, HOST, true, Some((5, 0x8100))), "sent here");
        assert!(!passes(vlan5, STP, false, Some((5, 0x8100))));
        assert!(!passes(vlan5, LLDP, false, Some((5, 0x8100))));
        assert!(passes(vlan5, NOT_RESERVED, false, Some((5, 0x8100))));
        let native5 = VlanFilter {
            vid: 5,
            untagged: true,
        };
        assert!(passes(native5, HOST, false, None));
        assert!(
            passes(native5, HOST, false, Some((0x2000, 0x8100))),
            "VID 0"
        );
        assert!(passes(native5, HOST, false, Some((5, 0x8100))));
        assert!(!passes(native5, HOST, false, Some((6, 0x8100))));
        assert!(!passes(native5, STP, false, None), "the switch's BPDUs");
        assert!(!passes(native5, HOST, true, None));
    }
}

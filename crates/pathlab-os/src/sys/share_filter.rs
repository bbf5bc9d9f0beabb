//! A classic BPF socket filter that splits the frames of every interface of a namespace
//! between several packet sockets by interface index: socket `share` of `shares` sees the
//! frames of the interfaces whose index leaves remainder `share` when divided by
//! `shares`. A lab's switchboard (all its cables' ports in one namespace) reads through one
//! socket per forwarding thread this way, and each thread gets the frames of the ports it
//! serves and no others, without a socket per port.

use std::io;
use std::os::fd::BorrowedFd;

use super::vlan_filter::{attach, jump, load_ancillary, statement, PACKET_OUTGOING};

/// The program: never what this host sent; the interface index modulo `shares` must be
/// `share`. Instructions 5 and 6 are the verdicts.
fn program(shares: u32, share: u32) -> Vec<libc::sock_filter> {
    const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    vec![
        load_ancillary(libc::SKF_AD_PKTTYPE),
        jump(JEQ, PACKET_OUTGOING, 4, 0),
        load_ancillary(libc::SKF_AD_IFINDEX),
        statement(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, shares.max(1)),
        jump(JEQ, share, 0, 1),
        statement(libc::BPF_RET | libc::BPF_K, u32::MAX),
        statement(libc::BPF_RET | libc::BPF_K, 0),
    ]
}

/// Attaches the filter to a packet socket (before it is bound, so no frame arrives
/// unfiltered): it sees the frames of interfaces whose index is `share` modulo `shares`.
pub fn attach_share_filter(fd: BorrowedFd<'_>, shares: u32, share: u32) -> io::Result<()> {
    attach(fd, program(shares, share))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the frame of interface `ifindex` passes socket `share`'s program.
    fn passes(shares: u32, share: u32, ifindex: u32, outgoing: bool) -> bool {
        let program = program(shares, share);
        super::super::vlan_filter::interpret(&program, &[], &|what| match what {
            libc::SKF_AD_PKTTYPE => {
                if outgoing {
                    PACKET_OUTGOING
                } else {
                    0
                }
            }
            libc::SKF_AD_IFINDEX => ifindex,
            other => panic!("unexpected ancillary load {other}"),
        })
    }

    #[test]
    fn each_interface_goes_to_exactly_one_share_and_nothing_sent_here_to_any() {
        for shares in 1..=4 {
            for ifindex in 1..200 {
                let takers: Vec<u32> = (0..shares)
                    .filter(|&share| passes(shares, share, ifindex, false))
                    .collect();
                assert_eq!(
                    takers,
                    vec![ifindex % shares],
                    "{shares} shares, index {ifindex}"
                );
                assert!((0..shares).all(|share| !passes(shares, share, ifindex, true)));
            }
        }
    }
}

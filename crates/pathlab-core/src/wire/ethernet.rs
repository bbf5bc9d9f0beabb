//! Ethernet II frames: the header's size, the EtherTypes pathlab reads, the VLAN tag
//! protocol identifiers it skips, and [`EthernetFrame`], a checked view that finds the
//! EtherType behind any VLAN tags.
//!
//! The link model's flow classification, the offload code and the capture decoder all
//! read frames through this one view, so they accept the same tags: 802.1Q (0x8100),
//! 802.1ad (0x88A8) and the pre-standard QinQ TPID 0x9100 that some switches still send,
//! stacked in any order, up to [`MAX_VLAN_TAGS`].

use super::u16_at;

/// Offsets of the header's fields (IEEE 802.3 clause 3.2, Ethernet II framing).
mod field {
    /// A field's byte range.
    pub type Field = core::ops::Range<usize>;

    /// Destination MAC address.
    pub const DESTINATION: Field = 0..6;
    /// Source MAC address.
    pub const SOURCE: Field = 6..12;
    /// The EtherType of an untagged frame; in a tagged one, the first tag's TPID.
    pub const ETHERTYPE: Field = 12..14;

    /// Within a VLAN tag: the tag protocol identifier.
    pub const TAG_TPID: Field = 0..2;
    /// Within a VLAN tag: the tag control information (priority, DEI, VLAN ID).
    pub const TAG_TCI: Field = 2..4;
}

/// Bytes of an untagged Ethernet header: two MAC addresses and the EtherType (14).
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// Bytes of a MAC address.
pub const ADDRESS_LEN: usize = field::DESTINATION.end;
/// Bytes one VLAN tag adds to a frame: its TPID and its TCI (4).
pub const VLAN_TAG_LEN: usize = field::TAG_TCI.end;
/// Where a VLAN tag goes in a frame: after the two MAC addresses (12).
pub const VLAN_TAG_OFFSET: usize = field::SOURCE.end;
/// More VLAN tags than this in one frame is a corrupt frame (real networks stack two,
/// rarely three); the bound also keeps a frame made of tags from being walked for long.
pub const MAX_VLAN_TAGS: usize = 4;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;

/// Tag protocol identifier of an IEEE 802.1Q (customer) VLAN tag.
pub const TPID_8021Q: u16 = 0x8100;
/// Tag protocol identifier of an IEEE 802.1ad (service, outer QinQ) VLAN tag.
pub const TPID_8021AD: u16 = 0x88A8;
/// Tag protocol identifier of pre-standard QinQ outer tags (Cisco, Juniper and Linux's
/// `vlan_proto` accept it).
pub const TPID_QINQ_9100: u16 = 0x9100;
/// Every tag protocol identifier [`EthernetFrame`] skips.
pub const VLAN_TPIDS: [u16; 3] = [TPID_8021Q, TPID_8021AD, TPID_QINQ_9100];

/// The VLAN ID bits of a tag control information field (the low 12).
pub const VID_MASK: u16 = 0x0FFF;

/// Whether `ethertype` is in fact a VLAN tag's protocol identifier (one of
/// [`VLAN_TPIDS`]).
pub const fn is_vlan_tpid(ethertype: u16) -> bool {
    matches!(ethertype, TPID_8021Q | TPID_8021AD | TPID_QINQ_9100)
}

/// Why bytes are not an Ethernet frame [`EthernetFrame`] can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EthernetError {
    /// Shorter than the 14-byte untagged header.
    #[error("a {len}-byte frame is shorter than the {HEADER_LEN}-byte Ethernet header")]
    Truncated {
        /// The frame's length, bytes.
        len: usize,
    },
    /// The frame ends inside a VLAN tag (before the EtherType or TPID that follows it).
    #[error("a {len}-byte frame ends inside its VLAN tag {tag}")]
    TruncatedTag {
        /// The frame's length, bytes.
        len: usize,
        /// Which tag is cut, counting the outermost as 1.
        tag: usize,
    },
    /// More than [`MAX_VLAN_TAGS`] tags.
    #[error("more than {MAX_VLAN_TAGS} VLAN tags")]
    TooManyTags,
}

/// One VLAN tag of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Tag protocol identifier (one of [`VLAN_TPIDS`] in a frame the view read).
    pub tpid: u16,
    /// Tag control information: priority (3 bits), drop eligible (1), VLAN ID (12).
    pub tci: u16,
}

impl VlanTag {
    /// The 802.1Q tag of VLAN `vid`, priority 0.
    pub const fn dot1q(vid: u16) -> VlanTag {
        VlanTag {
            tpid: TPID_8021Q,
            tci: vid & VID_MASK,
        }
    }

    /// The VLAN ID (0: a priority tag, no VLAN).
    pub const fn vid(self) -> u16 {
        self.tci & VID_MASK
    }

    /// The tag's four bytes as they go into a frame at [`VLAN_TAG_OFFSET`].
    pub const fn to_bytes(self) -> [u8; VLAN_TAG_LEN] {
        let [tpid_hi, tpid_lo] = self.tpid.to_be_bytes();
        let [tci_hi, tci_lo] = self.tci.to_be_bytes();
        [tpid_hi, tpid_lo, tci_hi, tci_lo]
    }
}

/// A checked view of an Ethernet II frame: its MAC addresses, the VLAN tags after them,
/// and the EtherType and payload behind the tags.
///
/// [`EthernetFrame::new_checked`] walks the tags once and checks every byte the
/// accessors read is there, so they do not fail or panic afterwards. The view borrows
/// (or owns) the buffer as it is and allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
    /// How many VLAN tags follow the MAC addresses, at most [`MAX_VLAN_TAGS`].
    vlan_tag_count: usize,
    /// The EtherType behind the tags, read once by the walk that found them.
    ethertype: u16,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Reads `buffer` as an Ethernet frame, skipping the VLAN tags (any of [`VLAN_TPIDS`],
    /// up to [`MAX_VLAN_TAGS`]) to the EtherType.
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>, EthernetError> {
        let bytes = buffer.as_ref();
        let len = bytes.len();
        if len < HEADER_LEN {
            return Err(EthernetError::Truncated { len });
        }
        let mut ethertype = u16_at(bytes, field::ETHERTYPE.start);
        let mut vlan_tag_count = 0;
        while is_vlan_tpid(ethertype) {
            if vlan_tag_count == MAX_VLAN_TAGS {
                return Err(EthernetError::TooManyTags);
            }
            vlan_tag_count += 1;
            let at = ethertype_offset(vlan_tag_count);
            let Some(&[high, low]) = bytes.get(at..at + 2) else {
                return Err(EthernetError::TruncatedTag {
                    len,
                    tag: vlan_tag_count,
                });
            };
            ethertype = u16::from_be_bytes([high, low]);
        }
        Ok(EthernetFrame {
            buffer,
            vlan_tag_count,
            ethertype,
        })
    }

    /// The destination MAC address.
    pub fn destination(&self) -> [u8; ADDRESS_LEN] {
        self.address(field::DESTINATION)
    }

    /// The source MAC address.
    pub fn source(&self) -> [u8; ADDRESS_LEN] {
        self.address(field::SOURCE)
    }

    /// How many VLAN tags the frame carries (0: untagged).
    pub fn vlan_tag_count(&self) -> usize {
        self.vlan_tag_count
    }

    /// The VLAN tags, outermost first.
    pub fn vlan_tags(&self) -> impl Iterator<Item = VlanTag> + '_ {
        let bytes = self.buffer.as_ref();
        (0..self.vlan_tag_count).map(move |index| {
            let tag = VLAN_TAG_OFFSET + index * VLAN_TAG_LEN;
            VlanTag {
                tpid: u16_at(bytes, tag + field::TAG_TPID.start),
                tci: u16_at(bytes, tag + field::TAG_TCI.start),
            }
        })
    }

    /// The EtherType behind the VLAN tags: what the payload is.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// Where the payload starts: after the header and the VLAN tags.
    pub fn payload_offset(&self) -> usize {
        HEADER_LEN + self.vlan_tag_count * VLAN_TAG_LEN
    }

    /// The bytes after the header and the VLAN tags (an IP packet, for IP EtherTypes).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_offset()..]
    }

    /// The buffer the view was made from.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn address(&self, range: field::Field) -> [u8; ADDRESS_LEN] {
        self.buffer.as_ref()[range]
            .try_into()
            .expect("an address field is ADDRESS_LEN bytes")
    }
}

/// Where the EtherType (or the next tag's TPID) is in a frame with `tags` VLAN tags.
const fn ethertype_offset(tags: usize) -> usize {
    field::ETHERTYPE.start + tags * VLAN_TAG_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESTINATION: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    const SOURCE: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const PAYLOAD: [u8; 5] = [0x45, 1, 2, 3, 4];

    /// A frame from the test's addresses, then `tags` (tpid, tci), `ethertype` and
    /// `payload`.
    fn frame(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut frame = [DESTINATION, SOURCE].concat();
        for &(tpid, tci) in tags {
            frame.extend(VlanTag { tpid, tci }.to_bytes());
        }
        frame.extend(ethertype.to_be_bytes());
        frame.extend(payload);
        frame
    }

    fn tags_of(frame: &EthernetFrame<&Vec<u8>>) -> Vec<(u16, u16)> {
        frame.vlan_tags().map(|tag| (tag.tpid, tag.tci)).collect()
    }

    #[test]
    fn untagged_frame_reads_addresses_ethertype_and_payload() {
        let bytes = frame(&[], ETHERTYPE_IPV4, &PAYLOAD);
        let view = EthernetFrame::new_checked(&bytes).unwrap();
        assert_eq!(view.destination(), DESTINATION);
        assert_eq!(view.source(), SOURCE);
        assert_eq!(view.vlan_tag_count(), 0);
        assert_eq!(tags_of(&view), []);
        assert_eq!(view.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(view.payload_offset(), 14);
        assert_eq!(view.payload(), PAYLOAD);
        assert_eq!(view.into_inner(), &bytes);
    }

    #[test]
    fn one_8021q_tag_is_skipped() {
        let bytes = frame(&[(TPID_8021Q, 0xA005)], ETHERTYPE_IPV6, &PAYLOAD);
        let view = EthernetFrame::new_checked(&bytes).unwrap();
        assert_eq!(tags_of(&view), [(0x8100, 0xA005)]);
        assert_eq!(
            view.vlan_tags().next().unwrap().vid(),
            5,
            "priority 5 masked off"
        );
        assert_eq!(view.ethertype(), ETHERTYPE_IPV6);
        assert_eq!(view.payload_offset(), 18);
        assert_eq!(view.payload(), PAYLOAD);
        assert_eq!((view.destination(), view.source()), (DESTINATION, SOURCE));
    }

    #[test]
    fn qinq_8021ad_outer_and_8021q_inner_tags_are_skipped_outermost_first() {
        let bytes = frame(
            &[(TPID_8021AD, 100), (TPID_8021Q, 5)],
            ETHERTYPE_IPV4,
            &PAYLOAD,
        );
        let view = EthernetFrame::new_checked(&bytes).unwrap();
        assert_eq!(tags_of(&view), [(0x88A8, 100), (0x8100, 5)]);
        assert_eq!(view.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(view.payload_offset(), 22);
        assert_eq!(view.payload(), PAYLOAD);
    }

    #[test]
    fn pre_standard_qinq_9100_tags_are_skipped_alone_and_stacked() {
        let alone = frame(&[(TPID_QINQ_9100, 7)], ETHERTYPE_IPV4, &PAYLOAD);
        let view = EthernetFrame::new_checked(&alone).unwrap();
        assert_eq!(tags_of(&view), [(0x9100, 7)]);
        assert_eq!(view.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(view.payload(), PAYLOAD);
        let stacked = frame(
            &[(TPID_QINQ_9100, 7), (TPID_8021Q, 8)],
            ETHERTYPE_IPV6,
            &PAYLOAD,
        );
        let view = EthernetFrame::new_checked(&stacked).unwrap();
        assert_eq!(tags_of(&view), [(0x9100, 7), (0x8100, 8)]);
        assert_eq!(view.ethertype(), ETHERTYPE_IPV6);
    }

    #[test]
    fn a_header_with_no_payload_is_a_frame_and_other_ethertypes_pass_through() {
        let bytes = frame(&[(TPID_8021Q, 1)], 0x0806, &[]);
        let view = EthernetFrame::new_checked(&bytes).unwrap();
        assert_eq!(view.ethertype(), 0x0806, "ARP");
        assert_eq!(view.payload(), [0u8; 0]);
    }

    #[test]
    fn every_length_short_of_the_header_is_truncated() {
        let bytes = frame(&[], ETHERTYPE_IPV4, &[]);
        for len in 0..HEADER_LEN {
            assert_eq!(
                EthernetFrame::new_checked(&bytes[..len]).unwrap_err(),
                EthernetError::Truncated { len },
                "{len} bytes"
            );
        }
        assert!(EthernetFrame::new_checked(&bytes[..HEADER_LEN]).is_ok());
    }

    #[test]
    fn every_length_inside_a_tag_is_a_truncated_tag() {
        let bytes = frame(&[(TPID_8021AD, 100), (TPID_8021Q, 5)], ETHERTYPE_IPV4, &[]);
        for len in HEADER_LEN..bytes.len() {
            let tag = (len - HEADER_LEN) / VLAN_TAG_LEN + 1;
            assert_eq!(
                EthernetFrame::new_checked(&bytes[..len]).unwrap_err(),
                EthernetError::TruncatedTag { len, tag },
                "{len} bytes"
            );
        }
        assert!(EthernetFrame::new_checked(&bytes[..]).is_ok());
    }

    #[test]
    fn a_frame_of_only_tags_is_refused_after_max_vlan_tags() {
        // A jumbo frame of nothing but 802.1Q tags: the walk stops at the bound, not the
        // end of the frame.
        let tags = vec![(TPID_8021Q, 5); 9000 / VLAN_TAG_LEN];
        let bytes = frame(&tags, TPID_8021Q, &[]);
        assert_eq!(
            EthernetFrame::new_checked(&bytes).unwrap_err(),
            EthernetError::TooManyTags
        );
        // The most tags that are allowed, in every TPID, still read.
        let most = [
            (TPID_8021AD, 1),
            (TPID_QINQ_9100, 2),
            (TPID_8021Q, 3),
            (TPID_8021Q, 4),
        ];
        assert_eq!(most.len(), MAX_VLAN_TAGS);
        let bytes = frame(&most, ETHERTYPE_IPV4, &PAYLOAD);
        let view = EthernetFrame::new_checked(&bytes).unwrap();
        assert_eq!(tags_of(&view), most);
        assert_eq!(view.payload(), PAYLOAD);
        // Only tags, cut where the EtherType would be: a truncated tag, not a panic.
        let cut = &frame(&most, ETHERTYPE_IPV4, &[])[..HEADER_LEN + 3 * VLAN_TAG_LEN];
        assert_eq!(
            EthernetFrame::new_checked(cut).unwrap_err(),
            EthernetError::TruncatedTag {
                len: cut.len(),
                tag: 4
            }
        );
    }

    #[test]
    fn tpids_and_tag_bytes_are_the_standards() {
        for tpid in VLAN_TPIDS {
            assert!(is_vlan_tpid(tpid), "{tpid:#06x}");
        }
        for ethertype in [ETHERTYPE_IPV4, ETHERTYPE_IPV6, 0x0806, 0x88CC] {
            assert!(!is_vlan_tpid(ethertype), "{ethertype:#06x}");
        }
        assert_eq!(VlanTag::dot1q(4094).to_bytes(), [0x81, 0x00, 0x0F, 0xFE]);
        assert_eq!(VlanTag::dot1q(0xF005).vid(), 5);
        assert_eq!((HEADER_LEN, VLAN_TAG_LEN, VLAN_TAG_OFFSET), (14, 4, 12));
    }

    #[test]
    fn the_view_works_over_owned_and_mutable_buffers() {
        let mut bytes = frame(&[(TPID_8021Q, 9)], ETHERTYPE_IPV4, &PAYLOAD);
        assert_eq!(
            EthernetFrame::new_checked(&mut bytes[..])
                .unwrap()
                .payload_offset(),
            18
        );
        let owned = EthernetFrame::new_checked(bytes).unwrap();
        assert_eq!(owned.payload(), PAYLOAD);
    }
}

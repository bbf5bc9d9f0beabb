//! The Internet checksum (RFC 1071): the one definition the emulator's offloads, the ping
//! and the bond's header compression share.

/// Adds `data` to a one's-complement sum (RFC 1071), treating it as big-endian 16-bit words.
///
/// Eight bytes at a time with an end-around carry (RFC 1071 section 2 (B), "byte order
/// independence" and "parallel summation": 2^64 is 1 modulo 2^16 - 1, so 64-bit words sum
/// to the same checksum as 16-bit ones), folded to 33 bits before it is added to `sum`.
pub fn checksum_add(sum: u64, data: &[u8]) -> u64 {
    let mut wide: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_be_bytes(chunk.try_into().expect("8 bytes"));
        let (total, carry) = wide.overflowing_add(word);
        wide = total + u64::from(carry);
    }
    let mut narrow = (wide >> 32) + (wide & 0xffff_ffff);
    let mut pairs = chunks.remainder().chunks_exact(2);
    for pair in &mut pairs {
        narrow += u64::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = pairs.remainder() {
        narrow += u64::from(*last) << 8;
    }
    sum + narrow
}

/// Folds a one's-complement sum to 16 bits and complements it (the value stored in a header).
pub fn checksum_finish(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A header's checksum after one of its 16-bit words changed from `old` to `new`, without
/// summing the header again (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')).
pub fn checksum_update(sum: u16, old: u16, new: u16) -> u16 {
    checksum_finish(u64::from(!sum) + u64::from(!old) + u64::from(new))
}

//! Frame buffers kept for reuse, so the forwarding path does not allocate per packet
//! (STYLE rule 15): a port cuts received frames into buffers it takes from its pool, and
//! the thread that sent them gives them back.
//!
//! Without it, a 4 Gbit/s emulator allocated and freed 330,000 buffers a second, and the
//! allocator returned and took back their pages from the kernel: page faults and page
//! clearing were 12% of the forwarding thread's time.

use crate::{Duration, Instant};

/// Capacity every pooled buffer gets at least: an Ethernet frame of a 1500-byte MTU with a
/// VLAN tag (1518 bytes), rounded up, so a buffer that carried an ACK can carry a full
/// segment next without growing.
pub const FRAME_CAPACITY: usize = 1536;

/// Buffers larger than this are not kept (a jumbo frame's or a whole super-packet's): they
/// are rare, and keeping them would hold their memory.
const LARGEST_KEPT: usize = 16 * 1024;

/// Fewest and most free buffers a pool that follows its link keeps (96 KiB and 96 MiB).
const FOLLOW_LEAST: usize = 64;
const FOLLOW_MOST: usize = 65_536;

/// How long a pool that follows its link remembers the most packets the link held: a
/// window, and the one before. Cubic's window at 4 Gbit/s and 80 ms grows back over tens
/// of seconds after a loss.
const FOLLOW_WINDOW: Duration = Duration::from_secs(30);

/// A free list of byte buffers, bounded in count.
#[derive(Debug)]
pub struct BufferPool {
    free: Vec<Vec<u8>>,
    keep: usize,
    /// For [`BufferPool::follow`]: the most packets held in this window and the last,
    /// and when this window ends.
    peaks: [usize; 2],
    window_end: Option<Instant>,
}

impl BufferPool {
    /// A pool that keeps at most `keep` free buffers (each at most 16 KiB): what one pass
    /// of its port's fastest traffic frees, so memory follows the link.
    pub fn new(keep: usize) -> BufferPool {
        BufferPool {
            free: Vec::new(),
            keep,
            peaks: [0; 2],
            window_end: None,
        }
    }

    /// Bounds the pool by what its link needs: `held` is how many packets the link holds at
    /// `now` (queued and in flight, and those just sent, whose buffers come back in one
    /// go: a pass through an empty spec sends thousands), and the pool keeps as many free buffers as the link
    /// held at its fullest over the last 30 to 60 s (at least 64, at most 65,536), so a
    /// link that fills again after emptying finds its buffers, and an idle one gives its
    /// memory back. Without it a 4 Gbit/s link whose TCP load swings between empty and
    /// 24,000 packets spent a fifth of its thread faulting in fresh pages from the
    /// allocator.
    pub fn follow(&mut self, now: Instant, held: usize) {
        let end = *self.window_end.get_or_insert(now + FOLLOW_WINDOW);
        if now >= end {
            self.peaks = [held, self.peaks[0]];
            self.window_end = Some(now + FOLLOW_WINDOW);
        } else {
            self.peaks[0] = self.peaks[0].max(held);
        }
        let keep = self.peaks[0]
            .max(self.peaks[1])
            .clamp(FOLLOW_LEAST, FOLLOW_MOST);
        if keep != self.keep {
            self.set_keep(keep);
        }
    }

    /// An empty buffer with room for at least `capacity` bytes (and at least
    /// [`FRAME_CAPACITY`]).
    pub fn take(&mut self, capacity: usize) -> Vec<u8> {
        match self.free.pop() {
            Some(mut buffer) => {
                buffer.clear();
                buffer.reserve(capacity);
                buffer
            }
            None => Vec::with_capacity(capacity.max(FRAME_CAPACITY)),
        }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buffer = self.take(bytes.len());
        buffer.extend_from_slice(bytes);
        buffer
    }

    /// Keeps at most `keep` free buffers from now on, dropping those beyond.
    pub fn set_keep(&mut self, keep: usize) {
        self.keep = keep;
        if self.free.len() > keep {
            self.free.truncate(keep);
            self.free.shrink_to(keep);
        }
    }

    /// Takes `buffer` back for a later [`BufferPool::take`]; drops it when the pool is
    /// full or the buffer is too large to keep.
    pub fn give(&mut self, buffer: Vec<u8>) {
        if self.free.len() < self.keep && buffer.capacity() <= LARGEST_KEPT {
            self.free.push(buffer);
        }
    }

    /// How many free buffers it holds.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }
}

impl Default for BufferPool {
    /// A pool of at most 256 buffers (384 KiB).
    fn default() -> BufferPool {
        BufferPool::new(256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_comes_back_empty_with_its_memory_and_the_pool_keeps_no_more_than_its_bound() {
        let mut pool = BufferPool::new(2);
        let mut first = pool.take(100);
        assert!(first.capacity() >= FRAME_CAPACITY);
        first.extend_from_slice(&[7; 1500]);
        let address = first.as_ptr();
        pool.give(first);
        let again = pool.take(1514);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), address, "the same memory is reused");
        pool.give(again);
        pool.give(vec![0; 10]);
        pool.give(vec![0; 10]);
        assert_eq!(pool.len(), 2, "the third is dropped");
        pool.set_keep(1);
        assert_eq!(pool.len(), 1, "a lower bound drops what is beyond");
        let mut large = BufferPool::new(8);
        large.give(Vec::with_capacity(LARGEST_KEPT + 1));
        assert!(large.is_empty(), "a super-packet's buffer is not kept");
        assert_eq!(large.copy_of(&[1, 2, 3]), vec![1, 2, 3]);
    }

    #[test]
    fn a_following_pool_keeps_what_its_link_held_at_most_over_the_last_window_and_gives_the_rest_back(
    ) {
        let mut pool = BufferPool::new(0);
        let at = |s: u64| Instant::ZERO + Duration::from_secs(s);
        pool.follow(at(0), 10);
        assert_eq!(pool.keep, FOLLOW_LEAST, "never fewer than the least");
        pool.follow(at(5), 5000);
        pool.follow(at(6), 0);
        assert_eq!(pool.keep, 5000, "the peak of this window");
        for _ in 0..5000 {
            pool.give(Vec::with_capacity(FRAME_CAPACITY));
        }
        assert_eq!(pool.len(), 5000);
        pool.follow(at(31), 100);
        assert_eq!(pool.keep, 5000, "still remembered in the next window");
        pool.follow(at(61), 100);
        assert_eq!(pool.keep, 100, "forgotten two windows later");
        assert_eq!(pool.len(), 100, "and the buffers beyond given back");
        pool.follow(at(62), 1_000_000);
        assert_eq!(pool.keep, FOLLOW_MOST, "never more than the most");
    }
}

//! The fair queue's entries, for [`crate::sizes`].

use super::FairQueue;
use crate::sizes::StateSizes;

impl FairQueue {
    /// Adds its entries to `sizes`: its tables' (flows at most
    /// [`super::table::MAX_STREAM_IDS`], each user's at most
    /// [`super::table::MAX_FLOWS_PER_USER`]; idle ones given back after `stream_idle`), the
    /// packets waiting (within `limit_bytes`), and its lists of users.
    pub fn state_sizes(&self, sizes: &mut StateSizes) {
        self.table.state_sizes(sizes);
        sizes.add(
            "fair.user_lists",
            self.new_users.len() + self.old_users.len() + self.prompt.len(),
        );
    }
}

//! Links: the stages of one direction composed, with counters and the per-packet record.

use crate::spec::LinkSpec;

/// One direction of a path.
#[derive(Debug)]
pub struct Link {
    spec: LinkSpec,
}

impl Link {
    /// The spec this link runs.
    pub fn spec(&self) -> &LinkSpec {
        &self.spec
    }
}

/// Two links, one per direction.
#[derive(Debug)]
pub struct Path {
    /// From side A to side B.
    pub forward: Link,
    /// From side B to side A.
    pub reverse: Link,
}

//! pathlab-engines: a lab run by other engines, one node to a pod or container.
//!
//! A lab that `pathlab lab` builds from namespaces on one machine can also run across the
//! pods of KNE or the containers of containerlab: [`export`] writes the engine's topology
//! and each node's config from a spec, [`node`] is `pathlab node` (one node of the lab in
//! its pod or container: its halves of the lab's links, its workloads, its control API),
//! and [`collect`] is `pathlab lab collect` (it starts every node's run together and
//! gathers their recordings into one lab run, as a one-machine run writes it). The
//! experiments themselves (specs, workloads, recipes) are `pathlab-lab`'s.

#![forbid(unsafe_code)]

pub mod collect;
pub mod export;
pub mod node;

/// The first 40 characters of outside text (a node's, a configuration's), escaped, for an
/// error message.
pub(crate) fn excerpt(text: &str) -> String {
    let mut cut: String = text.chars().take(40).collect();
    if cut.len() < text.len() {
        cut.push_str("...");
    }
    cut.escape_debug().to_string()
}

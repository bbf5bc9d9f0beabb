//! Placeholder; the link benchmark comes with the link.
fn main() {}

//! The pathlab command line.
fn main() {}

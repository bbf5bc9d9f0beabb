//! The hostile-input tests that need the machine to themselves.

mod local;

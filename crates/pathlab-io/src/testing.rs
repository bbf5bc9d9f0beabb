//! What namespace tests share, pathlab-io's own and the end-to-end tests in `tests/`: the
//! privileged-test gate.

/// The namespace tests build interfaces on a 2-core machine: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether the test may run (with the serializing guard): CAP_NET_ADMIN is needed; without
/// it the test panics in CI and is skipped elsewhere.
pub fn privileged(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if crate::require_net_admin("the namespace tests").is_ok() {
        return Some(
            ONE_AT_A_TIME
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: CI=true but this process lacks CAP_NET_ADMIN; CI must run the tests as root"
    );
    eprintln!("SKIPPED {test}: needs CAP_NET_ADMIN (run the tests as root; CI does)");
    None
}

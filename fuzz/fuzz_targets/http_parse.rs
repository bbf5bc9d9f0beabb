//! Any bytes from a peer of a control or metrics address (`pathlab_http`) are a
//! request, a need for more bytes or an error with its status, never a panic; the same for
//! a response read by `emulate set --remote`, and for a Prometheus exposition read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathlab_http::{parse_request, parse_response, Parsed, MAX_BODY};

fuzz_target!(|data: &[u8]| {
    match parse_request(data) {
        Ok(Parsed::Complete(request, used)) => {
            assert!(used <= data.len());
            assert!(request.body.len() <= MAX_BODY);
            assert!(request.path.starts_with('/'));
        }
        Ok(Parsed::Incomplete { .. }) => {}
        Err(error) => assert!(matches!(error.status(), 400 | 413 | 431 | 501)),
    }
    for closed in [false, true] {
        if let Ok(Parsed::Complete(_, used)) = parse_response(data, closed) {
            assert!(used <= data.len());
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = pathlab_http::prometheus::parse(text);
    }
});

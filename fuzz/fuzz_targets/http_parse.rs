//! Any bytes from a peer of a control or metrics address (`pathlab_http`) are a
//! request, a need for more bytes or an error with its status, never a panic; the same for
//! a response read by `emulate set --remote` or `lab collect` (whole, or its head before a
//! body streamed to disk, within the bound asked), and for a Prometheus exposition read
//! back.
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
    if let Ok(Some(head)) = pathlab_http::message::parse_response_head(data, 4096) {
        assert!(head.head_len <= data.len());
        assert!(head.length.is_none_or(|length| length <= 4096));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = pathlab_http::prometheus::parse(text);
    }
});

//! The twin file: a file is refused with the line and field when a figure is missing or
//! malformed.

use super::*;

#[test]
fn a_missing_or_malformed_figure_is_refused_with_its_line_and_field() {
    let small = TwinFile::parse(EXAMPLE).unwrap();
    assert_eq!(small.down.figures["loss_percent"].value, 0.0);
    for (edit, line, says) in [
        (("value = 1.0, low = 0.8", "value = 1.0, low = 1.1"), 8, "up.figures.loss_percent"),
        (("spec = \"delay 10ms\"", "spec = \"delay 10parsecs\""), 11, "down.spec"),
        (("how = \"counted\" }\n\n", "how = \"\" }\n\n"), 8, "'how'"),
        (("base_delay_ms = { value = 10.0, low = 9.99, high = 10.01, how = \"least delay\" }\nloss_percent = { value = 0,", "loss_percent = { value = 0,"), 13, "down.figures.base_delay_ms"),
        (("value = 10.0, low = 9.99", "value = \"ten\", low = 9.99"), 7, "invalid type"),
        (("version = 1", "version = 2"), 1, "version 2"),
        (("loss_percent = { value = 0,", "loss_pct = { value = 0,"), 15, "not a figure"),
        (("[up]\n", "[up]\nspeck = 1\n"), 4, "unknown field"),
    ] {
        let text = EXAMPLE.replacen(edit.0, edit.1, 1);
        assert_ne!(text, EXAMPLE, "{edit:?}");
        let error = TwinFile::parse(&text).expect_err(edit.1);
        let message = error.to_string();
        let found_line = match &error {
            TwinError::Toml { line, .. } | TwinError::Field { line, .. } => *line,
        };
        assert!(message.contains(says), "{edit:?}: {message}");
        assert_eq!(found_line, line, "{edit:?}: {message}");
    }
}

#[test]
fn a_trace_the_twin_names_is_found_beside_it() {
    let text = EXAMPLE.replacen(
        "spec = \"delay 10ms\"",
        "spec = \"delay 10ms trace down.trace\"",
        1,
    );
    let twin = TwinFile::parse(&text).unwrap();
    let beside = twin.down.spec_beside(std::path::Path::new("/twins/office"));
    assert_eq!(beside, "delay 10ms trace /twins/office/down.trace");
    let absolute = text.replacen("trace down.trace", "trace /traces/lte.trace", 1);
    let twin = TwinFile::parse(&absolute).unwrap();
    let kept = twin.down.spec_beside(std::path::Path::new("/twins/office"));
    assert_eq!(kept, "delay 10ms trace /traces/lte.trace");
}

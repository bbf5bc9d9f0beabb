//! The report as a person sees it: headless Chromium opens `report.html` from disk, and every
//! image must load with no script error.
//!
//! Needs Debian's `chromium`, which `.ci/run` installs before the tests (a test never
//! changes the host). Without it the test fails in CI (`CI=true`) and elsewhere says
//! SKIPPED and why. With Chromium there it takes a few seconds.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util;
use crate::util::browser::find_chromium;
use crate::util::{TempDir, TestLock};

/// Runs Chromium headless on `page` and returns the DOM it ended with; killed after 90 s.
fn dump_dom(browser: &str, page: &Path, scratch: &Path) -> String {
    // To a file: the DOM with its inline images is far more than a pipe holds.
    std::fs::create_dir_all(scratch).expect("creates chromium's directory");
    let dom_path = scratch.join("dom.html");
    let dom_file = std::fs::File::create(&dom_path).expect("creates the DOM file");
    let mut child = Command::new(browser)
        .args(util::browser::HEADLESS)
        .arg("--virtual-time-budget=10000")
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("profile").display()
        ))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdout(dom_file)
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().expect("waiting for chromium").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish rendering the report within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::read_to_string(&dom_path).expect("chromium's DOM")
}

/// Sets the title to `IMAGES n BROKEN b` once the page has loaded, or to `ERROR ...` on a
/// script or resource error.
const CHECK: &str = "<script>\
window.addEventListener('error',function(e){document.title='ERROR '+(e.message||(e.target&&e.target.src)||'resource');},true);\
window.addEventListener('load',function(){var all=Array.prototype.slice.call(document.images);\
var broken=all.filter(function(i){return !i.complete||i.naturalWidth===0;}).length;\
if(document.title.indexOf('ERROR')!==0){document.title='IMAGES '+all.length+' BROKEN '+broken;}});\
</script>";

#[test]
fn every_image_of_the_report_loads_in_a_browser() {
    let Some(browser) = find_chromium() else {
        let why = "chromium is not installed (.ci/run puts Debian's chromium package there before the tests)";
        assert!(
            std::env::var("CI").map_or(true, |ci| ci != "true"),
            "CI must run the browser test: {why}"
        );
        pathlab_os::testing::skipped("every_image_of_the_report_loads_in_a_browser", why);
        return;
    };
    // Chromium takes the machine for a while: never beside a timing test.
    let _lock = TestLock::shared();
    let dir = TempDir::new("report-browser");
    for queue in [10, 50] {
        util::lab_fixture::write_lab_run(&dir.path(&format!("sweep/queue-{queue}")), queue);
    }
    let sweep = dir.path("sweep");
    let output = Command::new(env!("CARGO_BIN_EXE_pathlab"))
        .args(["report", sweep.to_str().expect("utf-8"), "--compare"])
        .output()
        .expect("pathlab runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let html = std::fs::read_to_string(sweep.join("report.html")).expect("the page");
    let expected = html.matches("<img ").count();
    assert!(expected >= 10, "only {expected} images");

    // The page itself has no script; a copy for the test gets one that reports back.
    let checked = sweep.join("check.html");
    std::fs::write(
        &checked,
        html.replacen("</body>", &format!("{CHECK}</body>"), 1),
    )
    .expect("writes the copy");
    let dom = dump_dom(browser, &checked, &dir.path("chromium"));
    let title = dom
        .split("<title>")
        .nth(1)
        .and_then(|rest| rest.split("</title>").next())
        .unwrap_or_else(|| panic!("no title in what chromium rendered: {dom:.300}"));
    assert_eq!(title, format!("IMAGES {expected} BROKEN 0"));
}

//! The crate graph stays layered as docs/architecture.md draws it: each crate depends only
//! on the crates its row there lists and its lib.rs opens with the job the row gives, sans-IO crates (`pathlab-core`,
//! `pathlab-probe`, `pathlab-diagnose`, `pathlab-bond`) on no IO crate and on nothing that binds the OS, their code reads no clock and opens no socket,
//! and no crate's top-level modules import each other in a cycle.
//!
//! The graph comes from `cargo metadata`, the code is read as text with comments and
//! strings left out: a new `Instant::now()` in pathlab-probe, a `pathlab-os` dependency of
//! pathlab-bond, or `a` using `crate::b` while `b` uses `crate::a` fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The sans-IO crates: they take `now` and bytes and never touch the OS.
const PROTOCOL_CRATES: [&str; 5] = [
    "pathlab-core",
    "pathlab-probe",
    "pathlab-diagnose",
    "pathlab-bond",
    "pathlab-twin",
];

/// External crates that bind the OS: a protocol crate has none of them, not even for tests.
const OS_BINDINGS: [&str; 7] = [
    "libc",
    "nix",
    "rustix",
    "socket2",
    "mio",
    "tokio",
    "async-std",
];

/// Sockets: neither a protocol crate's code nor the binary's opens one.
const SOCKETS: [&str; 6] = [
    "UdpSocket",
    "TcpStream",
    "TcpListener",
    "UnixStream",
    "UnixListener",
    "UnixDatagram",
];

/// What else a protocol crate's code may not say (outside comments and strings): reading a
/// clock, a thread, a process, a file, raw OS calls.
const FORBIDDEN_IN_PROTOCOLS: [&str; 8] = [
    "Instant::now",
    "SystemTime",
    "UNIX_EPOCH",
    "std::thread",
    "std::process",
    "std::fs",
    "std::os::",
    "libc::",
];

/// What else the binary's code may not say: each command parses into a configuration that
/// a library crate runs, and the binary prints what comes back (issue 38); processes,
/// namespaces, netlink and raw OS calls are the libraries'.
const FORBIDDEN_IN_THE_BINARY: [&str; 5] = [
    "Command::new",
    "Netns::",
    "Netlink::",
    "libc::",
    "pathlab_os::sys::",
];

#[derive(Debug)]
struct Package {
    name: String,
    /// The directory of its Cargo.toml.
    dir: PathBuf,
    /// (dependency name, kind: "normal", "dev" or "build").
    dependencies: Vec<(String, String)>,
}

fn workspace() -> Vec<Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| Package {
            name: package["name"].as_str().expect("name").to_owned(),
            dir: Path::new(package["manifest_path"].as_str().expect("manifest"))
                .parent()
                .expect("dir")
                .to_owned(),
            dependencies: package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|d| {
                    let kind = d["kind"].as_str().unwrap_or("normal").to_owned();
                    (d["name"].as_str().expect("name").to_owned(), kind)
                })
                .collect(),
        })
        .collect()
}

/// A crate's row in docs/architecture.md's table: its job and what it may depend on.
#[derive(Debug)]
struct Row {
    job: String,
    may_depend_on: BTreeSet<String>,
}

/// The table of docs/architecture.md: `| `crate` | job | short names, or - |`.
fn architecture() -> BTreeMap<String, Row> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let text = std::fs::read_to_string(&path).expect("docs/architecture.md");
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        let [first, job, depends] = cells[..] else {
            continue;
        };
        let Some(name) = first
            .strip_prefix("| `")
            .and_then(|n| n.strip_suffix('`'))
            .filter(|n| n.starts_with("pathlab"))
        else {
            continue;
        };
        let depends = depends.trim_end_matches('|').trim();
        let may_depend_on = if depends == "-" {
            BTreeSet::new()
        } else {
            depends
                .split(", ")
                .map(|short| format!("pathlab-{short}"))
                .collect()
        };
        rows.insert(
            name.to_owned(),
            Row {
                job: job.to_owned(),
                may_depend_on,
            },
        );
    }
    rows
}

#[test]
fn each_crate_depends_only_on_what_the_architecture_page_allows() {
    let rows = architecture();
    let packages = workspace();
    let names: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let listed: BTreeSet<&str> = rows.keys().map(String::as_str).collect();
    assert_eq!(
        names, listed,
        "every workspace crate has its row in docs/architecture.md's table"
    );
    let mut wrong = Vec::new();
    for package in &packages {
        let allowed = &rows[&package.name].may_depend_on;
        for (dependency, kind) in &package.dependencies {
            if kind == "normal"
                && names.contains(dependency.as_str())
                && !allowed.contains(dependency)
            {
                wrong.push(format!("{} -> {dependency}", package.name));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against the layers: {wrong:?}"
    );
}

#[test]
fn each_crate_root_opens_with_its_job_as_the_architecture_page_says() {
    let rows = architecture();
    let mut wrong = Vec::new();
    for package in workspace() {
        let root = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|file| package.dir.join(file))
            .find(|path| path.exists())
            .expect("a crate root");
        let text = std::fs::read_to_string(&root).expect("read");
        // The first paragraph of the crate's `//!` doc, as one line.
        let first: Vec<&str> = text
            .lines()
            .map_while(|line| line.strip_prefix("//!"))
            .map(str::trim)
            .take_while(|line| !line.is_empty())
            .collect();
        let expected = format!("{}: {}", package.name, rows[&package.name].job);
        if !first.join(" ").starts_with(&expected) {
            wrong.push(format!(
                "{}: '{}' does not open with '{expected}'",
                root.display(),
                first.join(" ")
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn protocol_crates_depend_on_no_io_crate_and_nothing_that_binds_the_os() {
    let packages = workspace();
    let io_crates: BTreeSet<&str> = packages
        .iter()
        .map(|p| p.name.as_str())
        .filter(|name| !PROTOCOL_CRATES.contains(name) && *name != "pathlab-results")
        .collect();
    assert!(io_crates.contains("pathlab-os"), "{io_crates:?}");
    let mut wrong = Vec::new();
    for package in packages
        .iter()
        .filter(|p| PROTOCOL_CRATES.contains(&p.name.as_str()))
    {
        for (dependency, kind) in &package.dependencies {
            if io_crates.contains(dependency.as_str()) || OS_BINDINGS.contains(&dependency.as_str())
            {
                wrong.push(format!("{} -> {dependency} ({kind})", package.name));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "protocol crates must stay sans-IO: {wrong:?}"
    );
}

#[test]
fn protocol_crates_read_no_clock_and_open_no_socket() {
    let packages = workspace();
    let mut found = Vec::new();
    let mut files = 0;
    for package in packages
        .iter()
        .filter(|p| PROTOCOL_CRATES.contains(&p.name.as_str()))
    {
        for dir in ["src", "tests"] {
            for file in rust_files(&package.dir.join(dir)) {
                files += 1;
                let code = code_only(&std::fs::read_to_string(&file).expect("read"));
                for (number, line) in code.lines().enumerate() {
                    for word in forbidden_in(line) {
                        found.push(format!("{}:{}: {word}", file.display(), number + 1));
                    }
                }
            }
        }
    }
    assert!(
        files > 50,
        "the protocol crates' files were found ({files})"
    );
    assert!(
        found.is_empty(),
        "protocol crates touching the OS: {found:#?}"
    );
}

#[test]
fn no_crate_has_a_cycle_of_top_level_modules() {
    let mut cycles = Vec::new();
    for package in workspace() {
        let graph = module_graph(&package.dir.join("src"));
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{}: {}", package.name, cycle.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "module cycles: {cycles:?}");
}

/// What tells a file of code that calls the OS: the words a sans-IO crate may not say,
/// and pathlab-os's own syscall layer.
const OS_WORDS: [&str; 3] = ["sys::", "netlink", "RawFd"];

#[test]
fn every_file_of_pathlab_os_calls_the_os() {
    let os = workspace()
        .into_iter()
        .find(|p| p.name == "pathlab-os")
        .expect("pathlab-os");
    let files = rust_files(&os.dir.join("src"));
    assert!(
        files.len() > 20,
        "pathlab-os's files were found ({})",
        files.len()
    );
    let sans_io: Vec<String> = files
        .iter()
        .filter(|file| !file.ends_with("lib.rs"))
        .filter(|file| !calls_the_os(&std::fs::read_to_string(file).expect("read")))
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        sans_io.is_empty(),
        "files of pathlab-os that call no OS function belong in a sans-IO crate \
         (pathlab-core's wire, say): {sans_io:?}"
    );
}

/// Whether `text`'s code (not its comments or strings) says a word of the OS.
fn calls_the_os(text: &str) -> bool {
    let code = code_only(text);
    code.lines()
        .any(|line| !forbidden_in(line).is_empty() || OS_WORDS.iter().any(|w| line.contains(w)))
}

#[test]
fn the_architecture_page_names_every_command_and_no_other() {
    let help = std::process::Command::new(crate::util::emulated::PATHLAB)
        .arg("--help")
        .output()
        .expect("pathlab --help");
    let commands = subcommands(&String::from_utf8_lossy(&help.stdout));
    assert!(commands.len() > 15, "{commands:?}");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let page = std::fs::read_to_string(&path).expect("docs/architecture.md");
    let (missing, unknown) = command_mismatch(&commands, &page);
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/architecture.md's command table leaves out {missing:?} and names {unknown:?}, \
         which the CLI does not have"
    );
}

/// The subcommands `pathlab --help` lists (its `Commands:` section, less `help`).
fn subcommands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

/// The commands `commands` that the command table of an architecture page (`page`) leaves
/// out, and those it names that are not among them. The table is the page's first, its
/// rows a crate's job and the commands it serves, and the paragraph after it names the
/// rest; a command is a backquoted word (the first of `tcp --rfc6349`) that is not a
/// crate.
fn command_mismatch(commands: &BTreeSet<String>, page: &str) -> (Vec<String>, Vec<String>) {
    let section = page.split("\n## ").next().unwrap_or_default();
    let named: BTreeSet<String> = section
        .lines()
        .filter(|line| line.starts_with("| `pathlab"))
        .chain(section.split("\n\n").filter(|p| p.starts_with("Under the")))
        .flat_map(|text| text.split('`').skip(1).step_by(2))
        .filter_map(|code| code.split_whitespace().next())
        .filter(|word| {
            !word.starts_with("pathlab")
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
        .map(String::from)
        .collect();
    (
        commands.difference(&named).cloned().collect(),
        named.difference(commands).cloned().collect(),
    )
}

#[test]
fn the_binary_only_parses_runs_a_library_and_prints() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let files = rust_files(&dir);
    for file in &files {
        let code = code_only(&std::fs::read_to_string(file).expect("read"));
        for (number, line) in code.lines().enumerate() {
            for word in binary_forbidden_in(line) {
                found.push(format!("{}:{}: {word}", file.display(), number + 1));
            }
        }
    }
    assert!(
        files.len() > 20,
        "the binary's files were found ({})",
        files.len()
    );
    assert!(
        found.is_empty(),
        "the binary doing a library's work: {found:#?}"
    );
}

fn binary_forbidden_in(line: &str) -> Vec<&'static str> {
    SOCKETS
        .iter()
        .chain(&FORBIDDEN_IN_THE_BINARY)
        .copied()
        .filter(|word| line.contains(word))
        .collect()
}

/// The checks themselves catch what they are for (a test that cannot fail is a defect).
#[test]
fn the_checks_catch_a_clock_a_socket_and_a_cycle() {
    let code = code_only(
        "// Instant::now() in a comment is fine\n\
         let s = \"UdpSocket in a string is fine\";\n\
         let t = std::time::Instant::now();\n\
         let u = std::net::UdpSocket::bind(a);\n",
    );
    let lines: Vec<Vec<&str>> = code.lines().map(forbidden_in).collect();
    assert_eq!(lines[0], Vec::<&str>::new());
    assert_eq!(lines[1], Vec::<&str>::new());
    assert_eq!(lines[2], vec!["Instant::now"]);
    assert_eq!(lines[3], vec!["UdpSocket"]);
    // The binary: a socket or a netlink request is a library's; a socket address is input.
    assert_eq!(
        binary_forbidden_in("let s = std::net::TcpStream::connect(a)?;"),
        vec!["TcpStream"]
    );
    assert_eq!(
        binary_forbidden_in("Netlink::open()?.set_up(i, true)"),
        vec!["Netlink::"]
    );
    assert!(binary_forbidden_in("let a: std::net::SocketAddr = text.parse()?;").is_empty());
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &[][..]),
    ]
    .iter()
    .map(|(m, to)| (m.to_string(), to.iter().map(ToString::to_string).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).map(|c| c.len()), Some(4)); // a -> b -> c -> a
    let mut acyclic = graph.clone();
    acyclic.get_mut("c").expect("c").clear();
    assert_eq!(find_cycle(&acyclic), None);
    assert_eq!(
        crate_modules_used("use crate::{a::X, b};\nlet y = crate::c::f(); crate::d!();"),
        ["a", "b", "c", "d"].map(String::from).into()
    );
    // A file of sans-IO code (offload's segmentation was one) is told from one that calls
    // the OS, whatever its comments say.
    assert!(!calls_the_os(
        "// sys::send in a comment\nfn sum(a: u8) -> u8 { a }\n"
    ));
    assert!(calls_the_os("let n = sys::send(fd, &b, 0)?;\n"));
    assert!(calls_the_os("let f = std::fs::File::open(p)?;\n"));
    // A command the table leaves out, and one it names that the CLI lacks.
    let help =
        "Usage: pathlab <COMMAND>\n\nCommands:\n  spec  Check\n  owd   One-way\n            \
                more\n  help  Print\n\nOptions:\n  -h\n";
    let commands = subcommands(help);
    assert_eq!(commands, ["owd", "spec"].map(String::from).into());
    let page = "# x\n\n| model | driver | commands |\n|---|---|---|\n\
                | `pathlab-core`: the model | `pathlab-emulator` | `spec`, `rfc6349 --x` |\n\n\
                Under the drivers are `pathlab-os` and `sim`.\n\n## The crate graph\n`owd`\n";
    assert_eq!(
        command_mismatch(&commands, page),
        (
            vec!["owd".to_owned()],
            vec!["rfc6349".to_owned(), "sim".to_owned()]
        )
    );
}

fn forbidden_in(line: &str) -> Vec<&'static str> {
    SOCKETS
        .iter()
        .chain(&FORBIDDEN_IN_PROTOCOLS)
        .copied()
        .filter(|word| line.contains(word))
        .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The code with comments and the contents of string and char literals blanked out (line
/// breaks kept, so line numbers hold). Raw strings count as strings.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(bytes.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(bytes.len(), |n| i + n + 2);
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
            i = end;
        } else if let Some(hashes) = raw_string_start(rest) {
            let open = 2 + hashes;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = rest[open..]
                .find(&close)
                .map_or(bytes.len(), |n| i + open + n + close.len());
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
            i = end;
        } else if rest.starts_with("'\"'") || rest.starts_with("'\\\"'") {
            // The char literal '"' (or '\"') opens no string.
            i += if rest.starts_with("'\"'") { 3 } else { 4 };
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.extend(text[i..j.min(bytes.len())].chars().filter(|&c| c == '\n'));
            i = (j + 1).min(bytes.len());
        } else {
            let c = rest.chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br##"`...: the number of hashes of a raw string starting here.
fn raw_string_start(rest: &str) -> Option<usize> {
    let rest = rest.strip_prefix('b').unwrap_or(rest);
    let rest = rest.strip_prefix('r')?;
    let hashes = rest.bytes().take_while(|&b| b == b'#').count();
    (rest.as_bytes().get(hashes) == Some(&b'"')).then_some(hashes)
}

/// Each top-level module of a crate (a file or directory under src/) and the top-level
/// modules it names through `crate::`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).expect("under src");
        let first = relative.components().next().expect("a component");
        let module = Path::new(first.as_os_str())
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&file).expect("read"));
        let used = crate_modules_used(&code);
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(used.into_iter().filter(|m| *m != module));
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for targets in graph.values_mut() {
        targets.retain(|m| modules.contains(m));
    }
    graph
}

/// The first path segments after `crate::`, including those inside `use crate::{a, b::c}`.
fn crate_modules_used(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // A group: its top-level items, separated by commas at depth zero.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() {
                            used.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                used.insert(name);
            }
        }
    }
    used
}

/// A cycle in the graph, as the modules along it with the first repeated at the end.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search with colours: 0 unseen, 1 on the stack, 2 done.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        colour.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match colour.get(next).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|m| m == next).expect("on stack");
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, graph, colour, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        colour.insert(node.to_owned(), 2);
        None
    }
    let mut colour = BTreeMap::new();
    for node in graph.keys() {
        if colour.get(node).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(node, graph, &mut colour, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

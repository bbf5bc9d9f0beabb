//! Every link of `README.md`, `CHANGELOG.md` and `docs/*.md` leads somewhere: a relative
//! link's file exists, and its `#anchor` is a heading of that file as GitHub names it
//! (lowercase, spaces to `-`, punctuation other than `-` and `_` left out, `-1`, `-2` after
//! a repeated heading). Links to `http://`, `https://` and `mailto:` are not followed, so
//! the test needs no network and no privilege. Text in code blocks and code spans is not a
//! link. A failure lists every broken link with its page, line, text and target.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Targets that are not files of the repository.
const EXTERNAL: [&str; 3] = ["http://", "https://", "mailto:"];

/// A link of a page: its line (from 1), its text and its target as written.
#[derive(Debug)]
struct Link {
    line: usize,
    text: String,
    target: String,
}

/// The repository's root: the end-to-end tests' manifest is `crates/pathlab/Cargo.toml`.
fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the manifest lies two directories under the repository's root")
        .to_path_buf();
    assert!(
        root.join("README.md").is_file(),
        "no README.md in {}, taken for the repository's root",
        root.display()
    );
    root
}

/// The pages whose links are checked: `README.md`, `CHANGELOG.md` and every `docs/*.md`.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ can be listed")
        .map(|entry| entry.expect("an entry of docs/").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    let mut pages = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    pages.extend(docs);
    pages
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// `path` as the repository names it, for messages.
fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The opening of a fenced code block: its mark (`` ` `` or `~`) and how many of them.
fn fence_opening(trimmed: &str) -> Option<(char, usize)> {
    let mark = trimmed.chars().next().filter(|&c| c == '`' || c == '~')?;
    let run = trimmed.chars().take_while(|&c| c == mark).count();
    (run >= 3).then_some((mark, run))
}

/// A page's lines, those of fenced code blocks (fences included) made empty.
fn outside_fences(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some((mark, len)) = fence {
            // The marks are ASCII: `run` characters are `run` bytes.
            let run = trimmed.chars().take_while(|&c| c == mark).count();
            if run >= len && trimmed[run..].trim().is_empty() {
                fence = None;
            }
            lines.push(String::new());
        } else if let Some(opening) = fence_opening(trimmed) {
            fence = Some(opening);
            lines.push(String::new());
        } else {
            lines.push(line.to_owned());
        }
    }
    lines
}

/// How many backticks follow one another from `from`.
fn backtick_run(chars: &[char], from: usize) -> usize {
    chars[from..].iter().take_while(|&&c| c == '`').count()
}

/// Where the next run of exactly `len` backticks from `from` starts.
fn closing_run(chars: &[char], from: usize, len: usize) -> Option<usize> {
    let mut at = from;
    while at < chars.len() {
        if chars[at] == '`' {
            let run = backtick_run(chars, at);
            if run == len {
                return Some(at);
            }
            at += run;
        } else {
            at += 1;
        }
    }
    None
}

/// `text` with every code span (a run of backticks to the next run of as many) made
/// spaces, line breaks kept; a run that nothing closes is text, as markdown reads it.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let mut at = 0;
    while at < chars.len() {
        if chars[at] != '`' {
            at += 1;
            continue;
        }
        let run = backtick_run(&chars, at);
        if let Some(close) = closing_run(&chars, at + run, run) {
            for c in &mut out[at..close + run] {
                if *c != '\n' {
                    *c = ' ';
                }
            }
            at = close + run;
        } else {
            at += run;
        }
    }
    out.into_iter().collect()
}

/// A page's prose: its lines outside fenced code blocks, code spans made spaces. A code
/// span may run over lines, never past a blank line.
fn prose(text: &str) -> Vec<String> {
    let mut lines = outside_fences(text);
    let mut start = 0;
    while start < lines.len() {
        if lines[start].trim().is_empty() {
            start += 1;
            continue;
        }
        let mut end = start;
        while end < lines.len() && !lines[end].trim().is_empty() {
            end += 1;
        }
        let paragraph = blank_code_spans(&lines[start..end].join("\n"));
        for (line, blanked) in lines[start..end].iter_mut().zip(paragraph.split('\n')) {
            blanked.clone_into(line);
        }
        start = end;
    }
    lines
}

/// Where the `[` is that the `]` at `close` ends, brackets inside counted.
fn link_opening(line: &str, close: usize) -> Option<usize> {
    let mut depth = 0_usize;
    for (at, c) in line[..close].char_indices().rev() {
        match c {
            ']' => depth += 1,
            '[' if depth == 0 => return Some(at),
            '[' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The links `[text](target)` of a page's prose, images included.
fn links(page: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (index, line) in prose(page).iter().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find("](") {
            let close = from + at;
            let after = &line[close + 2..];
            let end = after
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(after.len());
            let text = link_opening(line, close).map_or("", |open| &line[open + 1..close]);
            found.push(Link {
                line: index + 1,
                text: text.to_owned(),
                target: after[..end].to_owned(),
            });
            from = close + 2 + end;
        }
    }
    found
}

/// The text of an ATX heading (`## Text`), without a closing run of `#`.
fn heading(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let text = &rest[level..];
    if !text.is_empty() && !text.starts_with([' ', '\t']) {
        return None;
    }
    let text = text.trim();
    let open = text.trim_end_matches('#');
    if open.is_empty() || open.ends_with([' ', '\t']) {
        Some(open.trim_end())
    } else {
        Some(text)
    }
}

/// A heading's anchor as GitHub makes it: lowercase, spaces to `-`, every character that
/// is not a letter, a digit, `-` or `_` left out.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c == ' ' {
                Some('-')
            } else if c == '-' || c == '_' || c.is_alphanumeric() {
                Some(c)
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a page's headings; a repeated one gets `-1`, `-2`, ... as on GitHub.
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in outside_fences(text) {
        let Some(title) = heading(&line) else {
            continue;
        };
        let base = slug(title);
        let count = seen.entry(base.clone()).or_insert(0);
        let anchor = if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// What is wrong with a link of `page` to `target`, if anything. `cache` keeps the anchors
/// of the pages read so far.
fn problem(
    root: &Path,
    page: &Path,
    target: &str,
    cache: &mut BTreeMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    if EXTERNAL
        .into_iter()
        .any(|scheme| target.starts_with(scheme))
    {
        return None;
    }
    if target.is_empty() {
        return Some("the link has no target".to_owned());
    }
    let (path, anchor) = target
        .split_once('#')
        .map_or((target, None), |(path, anchor)| (path, Some(anchor)));
    let file = if path.is_empty() {
        page.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        root.join(from_root)
    } else {
        page.parent()
            .expect("a page lies in a directory")
            .join(path)
    };
    if !file.exists() {
        return Some(format!("{} does not exist", relative(root, &file)));
    }
    // Without an anchor, an existing file is all a link needs.
    let anchor = anchor?;
    if file.extension().is_none_or(|ext| ext != "md") {
        return Some(format!(
            "#{anchor} points into {}, which is not a markdown page",
            relative(root, &file)
        ));
    }
    let known = cache
        .entry(file.clone())
        .or_insert_with(|| heading_anchors(&read(&file)));
    if known.contains(anchor) {
        None
    } else {
        Some(format!(
            "{} has no heading whose anchor is #{anchor}",
            relative(root, &file)
        ))
    }
}

#[test]
fn every_link_of_the_readme_the_changelog_and_the_docs_resolves() {
    let root = repo_root();
    let mut cache = BTreeMap::new();
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in pages(&root) {
        for link in links(&read(&page)) {
            checked += 1;
            if let Some(wrong) = problem(&root, &page, &link.target, &mut cache) {
                broken.push(format!(
                    "{}:{}: [{}]({}): {wrong}",
                    relative(&root, &page),
                    link.line,
                    link.text,
                    link.target
                ));
            }
        }
    }
    assert!(
        checked > 0,
        "no link found in README.md, CHANGELOG.md and docs/*.md: the link finder is broken"
    );
    assert!(
        broken.is_empty(),
        "{} of the {checked} links of README.md, CHANGELOG.md and docs/*.md lead nowhere:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn headings_get_the_anchors_github_gives_them() {
    assert_eq!(
        slug("Security: what `--psk` protects, and what it does not"),
        "security-what---psk-protects-and-what-it-does-not"
    );
    assert_eq!(slug("Metrics (`--metrics ADDR`)"), "metrics---metrics-addr");
    assert_eq!(
        slug("Against Linux MPTCP (`benches/bond_mptcp.py`)"),
        "against-linux-mptcp-benchesbond_mptcppy"
    );
    assert_eq!(heading("## Title ##"), Some("Title"));
    assert_eq!(heading("#hashtag"), None);
    assert_eq!(heading("    # indented code"), None);
    let page = "# Title\n\n## Figures\n\n```sh\n# a comment, not a heading\n```\n\n## Figures\n";
    let expected: BTreeSet<String> = ["title", "figures", "figures-1"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(heading_anchors(page), expected);
}

#[test]
fn text_in_code_is_not_a_link() {
    let page = "See [the spec](docs/spec.md#units) and `[not](a-link)`.\n\
                ```md\n[nor](this)\n```\n\
                A span `over\n[two](lines)` is code.\n\n\
                [one](a.md) and [![an image](img.png)](b.md#x) on one line\n";
    let found_links = links(page);
    let found: Vec<(usize, &str, &str)> = found_links
        .iter()
        .map(|link| (link.line, link.text.as_str(), link.target.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (1, "the spec", "docs/spec.md#units"),
            (8, "one", "a.md"),
            (8, "an image", "img.png"),
            (8, "![an image](img.png)", "b.md#x"),
        ]
    );
}

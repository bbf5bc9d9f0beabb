//! A report page of figures and CSV files for a result that is not a lab run (`pathlab
//! inspect`'s watch, `pathlab analyze`'s capture): a heading, a line of what was run, a
//! summary table, then a section per subject with its text, figures and data files.

use std::fmt::Write as _;
use std::path::Path;

use super::figures::Figure;
use super::html::{escape, figure, table, STYLE};
use super::{draw_all, write, ReportError, ReportFiles};

/// One subject of the page (a connection, a flow).
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Its heading.
    pub heading: String,
    /// A paragraph under it (a verdict).
    pub text: String,
    /// Its figures.
    pub figures: Vec<Figure>,
    /// Its data: file name (in `csv/`) and contents.
    pub csv: Vec<(String, String)>,
}

/// Writes `report.html` with its figures (PNG and SVG in `plots/`) and CSV files (in
/// `csv/`) into `out_dir`.
pub fn write_page(
    title: &str,
    intro: &str,
    summary: (&[&str], Vec<Vec<String>>),
    sections: Vec<Section>,
    out_dir: &Path,
) -> Result<ReportFiles, ReportError> {
    let mut files = ReportFiles {
        html: out_dir.join("report.html"),
        ..ReportFiles::default()
    };
    let mut body = String::new();
    for section in sections {
        let mut names = Vec::new();
        for (name, contents) in &section.csv {
            let path = out_dir.join("csv").join(name);
            write(&path, contents.as_bytes())?;
            files.csv.push(path);
            names.push(format!("csv/{name}"));
        }
        let drawn = draw_all(section.figures, &out_dir.join("plots"), &mut files)?;
        let _ = writeln!(
            body,
            "<h2>{}</h2><p>{}</p>",
            escape(&section.heading),
            escape(&section.text)
        );
        if !names.is_empty() {
            let _ = writeln!(
                body,
                "<p class=\"files\">data: {}</p>",
                escape(&names.join(", "))
            );
        }
        for f in &drawn {
            figure(&mut body, f);
        }
    }
    let mut page = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>{STYLE}</style></head><body><h1>{}</h1><p>{}</p>",
        escape(title),
        escape(title),
        escape(intro)
    );
    let (head, rows) = summary;
    if !rows.is_empty() {
        table(&mut page, head, &rows);
    }
    page.push_str(&body);
    page.push_str("</body></html>\n");
    write(&files.html, page.as_bytes())?;
    Ok(files)
}

//! The figures table every bench prints: notes, headed sections, and rows
//! of a measured value against its target, marked met or MISSED.
#![allow(dead_code)]

use std::io::Write;

/// `1234567.8` as `1,234,568`.
pub fn thousands(x: f64) -> String {
    let s = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

enum Line {
    Note(String),
    Head(String),
    Row {
        name: String,
        value: String,
        target: String,
        ok: Option<bool>,
    },
    Detail(String),
}

pub struct Table {
    lines: Vec<Line>,
    name_width: usize,
    value_width: usize,
    /// Also say each line on stderr as it comes (for long runs).
    progress: bool,
}

impl Table {
    pub fn new(name_width: usize, value_width: usize, progress: bool) -> Table {
        Table {
            lines: Vec::new(),
            name_width,
            value_width,
            progress,
        }
    }

    pub fn note(&mut self, s: String) {
        if self.progress {
            eprintln!("{s}");
        }
        self.lines.push(Line::Note(s));
    }

    pub fn head(&mut self, s: &str) {
        self.lines.push(Line::Head(s.to_string()));
    }

    pub fn row(&mut self, name: &str, value: String, target: String, ok: Option<bool>) {
        if self.progress {
            eprintln!("  {name}: {value}");
        }
        self.lines.push(Line::Row {
            name: name.to_string(),
            value,
            target,
            ok,
        });
    }

    pub fn detail(&mut self, s: String) {
        if self.progress {
            eprintln!("{s}");
        }
        self.lines.push(Line::Detail(s));
    }

    pub fn print(&self) {
        let (nw, vw) = (self.name_width, self.value_width);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out);
        for l in &self.lines {
            let _ = match l {
                Line::Note(s) | Line::Detail(s) => writeln!(out, "{s}"),
                Line::Head(s) => writeln!(out, "\n== {s}\n{:<nw$} {:<vw$} target", "", "measured"),
                Line::Row {
                    name,
                    value,
                    target,
                    ok,
                } => writeln!(
                    out,
                    "{name:<nw$} {value:<vw$} {target:<14} {}",
                    match ok {
                        Some(true) => "met",
                        Some(false) => "MISSED",
                        None => "",
                    }
                ),
            };
        }
    }
}

//! The architecture test: layers point down, and no two top-level modules
//! import each other.
//!
//! The one list of layers is the table under "## Layers" in
//! `docs/ARCHITECTURE.md`; this test reads it, maps every file of `src/`
//! to its layer by module prefix (the longest row that is a prefix of the
//! file's module path wins, so a new file falls in by its folder), reads
//! every `crate::…` path in the code (`use` lines, paths in expressions,
//! `$crate::` in macros, `super::` that leaves a top-level module, and
//! `holdfast::` in the binary's files) and fails on:
//!
//! * an import from a lower layer to a higher one, naming the file, the
//!   line and both layers, unless the doc lists it among the imports that
//!   go up until their part of issue 28 lands (a listed import that no
//!   longer occurs fails too, so the list only shrinks);
//! * a circle between two top-level modules, whatever their layers;
//! * files of one folder that import each other in a circle, unless the
//!   doc names them under "### Circles inside a folder" (a named circle
//!   that no longer exists fails too);
//! * a file or an imported module that no row of the table names.
//!
//! Code under `#[cfg(test)]` is not held to the layers: a unit test may
//! drive a whole config or the daemon, as the tests in `tests/` do.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One row of the layer table: a module prefix and its layer.
#[derive(Debug, Clone)]
struct Row {
    prefix: Vec<String>,
    layer: u32,
    name: String,
}

/// An import the doc allows to go up until the named work lands.
#[derive(Debug)]
struct Exception {
    from: Vec<String>,
    to: Vec<String>,
    used: bool,
}

/// One `crate::…` path found in a file.
#[derive(Debug, Clone)]
struct Import {
    file: String,
    line: usize,
    from: Vec<String>,
    to: Vec<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn layers_point_down_and_nothing_imports_in_a_circle() {
    let doc = fs::read_to_string(root().join("docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md holds the layer table");
    let (rows, mut exceptions) = layer_table(&doc);
    let (imports, modules) = imports_of(&root().join("src"));
    let mut problems = check(&rows, &mut exceptions, &imports);
    problems.extend(check_folders(
        &folder_circles_allowed(&doc),
        &imports,
        &modules,
    ));
    assert!(
        problems.is_empty(),
        "{} problem(s) with the layers of docs/ARCHITECTURE.md:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The checks themselves, apart from reading files, so that the unit tests
/// below can feed them made-up imports.
fn check(rows: &[Row], exceptions: &mut [Exception], imports: &[Import]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut graph: BTreeMap<String, BTreeMap<String, Import>> = BTreeMap::new();
    for i in imports {
        let (Some(from), Some(to)) = (row_of(rows, &i.from), row_of(rows, &i.to)) else {
            let which = if row_of(rows, &i.from).is_none() {
                &i.from
            } else {
                &i.to
            };
            problems.push(format!(
                "{}:{}: module `{}` is in no row of the layer table: add it to \"## Layers\" in \
                 docs/ARCHITECTURE.md",
                i.file,
                i.line,
                which.join("::")
            ));
            continue;
        };
        if let Some(e) = exceptions
            .iter_mut()
            .find(|e| starts_with(&i.from, &e.from) && starts_with(&i.to, &e.to))
        {
            e.used = true;
            continue;
        }
        if from.layer < to.layer {
            problems.push(format!(
                "{}:{}: `{}` (layer {}, {}) imports `{}` (layer {}, {}): a lower layer must \
                 not import a higher one; move what both need below both",
                i.file,
                i.line,
                i.from.join("::"),
                from.layer,
                from.name,
                i.to.join("::"),
                to.layer,
                to.name
            ));
        }
        if i.from[0] != i.to[0] {
            graph
                .entry(i.from[0].clone())
                .or_default()
                .entry(i.to[0].clone())
                .or_insert_with(|| i.clone());
        }
    }
    for e in exceptions.iter().filter(|e| !e.used) {
        problems.push(format!(
            "docs/ARCHITECTURE.md lists `{}` -> `{}` as an import that goes up, but no file \
             makes it any more: remove the row",
            e.from.join("::"),
            e.to.join("::")
        ));
    }
    for (group, circle) in circles(&graph) {
        let mut steps = Vec::new();
        for (a, b) in circle.iter().zip(circle.iter().cycle().skip(1)) {
            let i = &graph[a][b];
            steps.push(format!(
                "`{a}` -> `{b}` ({}:{}: `{}`)",
                i.file,
                i.line,
                i.to.join("::")
            ));
        }
        problems.push(format!(
            "top-level modules import each other in a circle: {}; one of these imports must go \
             (modules that reach each other: {})",
            steps.join(", "),
            group.join(", ")
        ));
    }
    problems
}

fn starts_with(path: &[String], prefix: &[String]) -> bool {
    path.len() >= prefix.len() && path[..prefix.len()] == *prefix
}

/// The row of the longest prefix of `module`.
fn row_of<'a>(rows: &'a [Row], module: &[String]) -> Option<&'a Row> {
    rows.iter()
        .filter(|r| starts_with(module, &r.prefix))
        .max_by_key(|r| r.prefix.len())
}

/// The rows of the table under "## Layers" (`| 1 | `seglog`, `pool` | name |
/// …`) and those under "### Imports that go up" (`| `from` | `to` | …`).
fn layer_table(doc: &str) -> (Vec<Row>, Vec<Exception>) {
    let mut rows = Vec::new();
    let mut exceptions = Vec::new();
    let mut section = "";
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ").or(line.strip_prefix("### ")) {
            section = if h.starts_with("Layers") {
                "layers"
            } else if h.starts_with("Imports that go up") {
                "up"
            } else {
                ""
            };
            continue;
        }
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !line.trim_start().starts_with('|') || cells.len() < 3 {
            continue;
        }
        match section {
            "layers" => {
                let Ok(layer) = cells[0].parse::<u32>() else {
                    continue;
                };
                for m in code_spans(cells[1]) {
                    rows.push(Row {
                        prefix: m.split("::").map(str::to_string).collect(),
                        layer,
                        name: cells[2].to_string(),
                    });
                }
            }
            "up" => {
                let (from, to) = (code_spans(cells[0]), code_spans(cells[1]));
                if let (Some(from), Some(to)) = (from.first(), to.first()) {
                    exceptions.push(Exception {
                        from: from.split("::").map(str::to_string).collect(),
                        to: to.split("::").map(str::to_string).collect(),
                        used: false,
                    });
                }
            }
            _ => {}
        }
    }
    assert!(
        rows.len() >= 10,
        "docs/ARCHITECTURE.md: no layer table found under \"## Layers\" (rows like \
         `| 1 | `seglog`, `pool` | the shared kits |`)"
    );
    (rows, exceptions)
}

/// The groups of files under "### Circles inside a folder" that may import
/// each other (`| `seglog::block`, `seglog::format` | why |`).
fn folder_circles_allowed(doc: &str) -> Vec<BTreeSet<Vec<String>>> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in doc.lines() {
        if line.starts_with('#') {
            inside = line.starts_with("### Circles inside a folder");
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if inside && line.trim_start().starts_with('|') && cells.len() >= 2 {
            let group: BTreeSet<Vec<String>> = code_spans(cells[0])
                .into_iter()
                .map(|m| m.split("::").map(str::to_string).collect())
                .collect();
            if group.len() >= 2 {
                out.push(group);
            }
        }
    }
    out
}

/// Files of one folder that import each other (through any number of
/// siblings) and that `allowed` does not name; and named groups that no
/// longer import each other. `modules` are the files' module paths.
fn check_folders(
    allowed: &[BTreeSet<Vec<String>>],
    imports: &[Import],
    modules: &BTreeSet<Vec<String>>,
) -> Vec<String> {
    // The file a path lands in: the longest prefix that is a file.
    let file_of = |path: &[String]| -> Option<Vec<String>> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| modules.contains(p))
    };
    let mut graph: BTreeMap<String, BTreeMap<String, Import>> = BTreeMap::new();
    for i in imports {
        let (Some(from), Some(to)) = (file_of(&i.from), file_of(&i.to)) else {
            continue;
        };
        let siblings = from.len() == to.len() && from[..from.len() - 1] == to[..to.len() - 1];
        if siblings && from != to {
            graph
                .entry(from.join("::"))
                .or_default()
                .entry(to.join("::"))
                .or_insert_with(|| i.clone());
        }
    }
    let mut problems = Vec::new();
    let mut used = vec![false; allowed.len()];
    for (group, circle) in circles(&graph) {
        let group: BTreeSet<Vec<String>> = group
            .iter()
            .map(|m| m.split("::").map(str::to_string).collect())
            .collect();
        if let Some(k) = allowed.iter().position(|a| group.is_subset(a)) {
            used[k] = true;
            continue;
        }
        let mut steps = Vec::new();
        for (a, b) in circle.iter().zip(circle.iter().cycle().skip(1)) {
            let i = &graph[a][b];
            steps.push(format!("`{a}` -> `{b}` ({}:{})", i.file, i.line));
        }
        let members: Vec<String> = group.iter().map(|m| m.join("::")).collect();
        problems.push(format!(
            "files of one folder import each other in a circle: {} (files that reach each \
             other: {}); break it (move the shared type or constant below both) or name and \
             justify it under \"### Circles inside a folder\" in docs/ARCHITECTURE.md",
            steps.join(", "),
            members.join(", ")
        ));
    }
    for (a, _) in allowed.iter().zip(&used).filter(|(_, u)| !**u) {
        let names: Vec<String> = a.iter().map(|m| m.join("::")).collect();
        problems.push(format!(
            "docs/ARCHITECTURE.md names a circle of {} that no longer exists: remove the row",
            names.join(", ")
        ));
    }
    problems
}

/// The `code` spans of a table cell.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// One circle per group of top-level modules that reach each other (a
/// strongly connected component of more than one module): the shortest
/// way around from its first module, so that one upward import that ties
/// many modules together is reported once.
fn circles(graph: &BTreeMap<String, BTreeMap<String, Import>>) -> Vec<(Vec<String>, Vec<String>)> {
    let nodes: BTreeSet<&String> = graph
        .iter()
        .flat_map(|(a, to)| std::iter::once(a).chain(to.keys()))
        .collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(at) = stack.pop() {
            for next in graph.get(&at).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out = Vec::new();
    let mut done: BTreeSet<&String> = BTreeSet::new();
    for &start in &nodes {
        if done.contains(start) || !reaches[start].contains(start) {
            continue;
        }
        let group: Vec<&String> = nodes
            .iter()
            .copied()
            .filter(|n| reaches[start].contains(*n) && reaches[*n].contains(start))
            .collect();
        done.extend(group.iter().copied());
        if let Some(circle) = shortest_circle(graph, start) {
            out.push((group.iter().map(|n| n.to_string()).collect(), circle));
        }
    }
    out
}

fn shortest_circle(
    graph: &BTreeMap<String, BTreeMap<String, Import>>,
    start: &String,
) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(at) = queue.pop_front() {
        for next in graph.get(&at).into_iter().flat_map(|m| m.keys()) {
            if next == start {
                let mut path = vec![at.clone()];
                while let Some(prev) = came_from.get(path.last().expect("non-empty")) {
                    path.push(prev.clone());
                }
                path.reverse();
                return Some(path);
            }
            if !came_from.contains_key(next) && next != start {
                came_from.insert(next.clone(), at.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

/// Every path into the crate from the files under `src`, test code left out.
fn imports_of(src: &Path) -> (Vec<Import>, BTreeSet<Vec<String>>) {
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    let lexed: BTreeMap<PathBuf, Vec<Token>> = files
        .iter()
        .map(|f| {
            let text = fs::read_to_string(f).expect("a source file is UTF-8");
            (f.clone(), lex(&text))
        })
        .collect();
    let test_files = test_files(src, &lexed);
    let modules = lexed.keys().map(|f| module_of(src, f)).collect();
    let mut out = Vec::new();
    for (file, tokens) in &lexed {
        if test_files.contains(file) {
            continue;
        }
        let module = module_of(src, file);
        let rel = file
            .strip_prefix(root())
            .unwrap_or(file)
            .display()
            .to_string();
        out.extend(paths_in(tokens, &module, &rel));
    }
    assert!(
        out.len() > 200,
        "only {} crate paths found in src/: the reader of this test is broken",
        out.len()
    );
    (out, modules)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `src/sinks/file/config.rs` is
/// `sinks::file::config`; the crate roots are `lib` and `main`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src/");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.len() > 1 && parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// A string literal's text as written (for `#[path = "…"]`).
    Str(String),
    /// `::`
    Path,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
    /// Inside an item under `#[cfg(test)]`.
    test: bool,
    /// The inline modules (`mod name { … }`) around it, outermost first.
    inline: Vec<String>,
}

/// The tokens that matter here: identifiers, `::` and punctuation;
/// comments, strings, characters and numbers left out.
fn lex(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let push = |out: &mut Vec<Token>, tok, line| {
        out.push(Token {
            tok,
            line,
            test: false,
            inline: Vec::new(),
        })
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied().unwrap_or('\0');
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&c, i) {
            // r"…", r#"…"#, br#"…"#: no escapes, ends at `"` and the hashes.
            i += hashes.0;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes.1))
                .collect();
            while i < c.len() && !c[i..].starts_with(&closing) {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            i += closing.len();
        } else if ch == '"' || (ch == 'b' && next == '"') {
            i += if ch == 'b' { 2 } else { 1 };
            let start = i;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                line += usize::from(c.get(i) == Some(&'\n'));
                i += 1;
            }
            let text: String = c[start..i.min(c.len())].iter().collect();
            push(&mut out, Tok::Str(text), line);
            i += 1;
        } else if ch == '\'' || (ch == 'b' && next == '\'') {
            let q = if ch == 'b' { i + 1 } else { i };
            if c.get(q + 1) == Some(&'\\') {
                // '\n', '\u{…}', '\''
                i = q + 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(q + 2) == Some(&'\'') {
                i = q + 3;
            } else {
                // A lifetime or a label: its name follows as an identifier.
                i = q + 1;
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // r#type: a raw identifier.
            if word == "r" && c.get(i) == Some(&'#') {
                i += 1;
                continue;
            }
            push(&mut out, Tok::Ident(word), line);
        } else if ch == ':' && next == ':' {
            push(&mut out, Tok::Path, line);
            i += 2;
        } else {
            push(&mut out, Tok::Punct(ch), line);
            i += 1;
        }
    }
    mark_test_items(&mut out);
    mark_inline_modules(&mut out);
    out
}

/// Gives each token the inline modules around it, so that `super::` in
/// one resolves from there.
fn mark_inline_modules(t: &mut [Token]) {
    let mut depth = 0;
    // (name, the brace depth inside it)
    let mut open: Vec<(String, usize)> = Vec::new();
    for k in 0..t.len() {
        match &t[k].tok {
            Tok::Punct('{') => {
                depth += 1;
                if k >= 2 {
                    if let (Tok::Ident(m), Tok::Ident(name)) = (&t[k - 2].tok, &t[k - 1].tok) {
                        if m == "mod" {
                            open.push((name.clone(), depth));
                        }
                    }
                }
            }
            Tok::Punct('}') => {
                if open.last().is_some_and(|(_, d)| *d == depth) {
                    open.pop();
                }
                depth -= 1;
            }
            _ => {}
        }
        t[k].inline = open.iter().map(|(n, _)| n.clone()).collect();
    }
}

/// At `i`, a raw (byte) string's opening: its length and its hashes.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    // Not the end of an identifier (`bar"…"` is not a raw string).
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&x| x == '#').count();
    (c.get(j + hashes) == Some(&'"')).then_some((j + hashes + 1 - i, hashes))
}

/// Whether the attribute whose `[` is at `open` is a `cfg` that holds
/// only with `test` (`cfg(test)`, `cfg(all(test, …))`, not `cfg(not(test))`),
/// and the index just past its `]`.
fn cfg_test_attribute(t: &[Token], open: usize) -> (bool, usize) {
    let mut depth = 0;
    let mut functions: Vec<String> = Vec::new();
    let mut is_cfg = false;
    let mut test = false;
    let mut i = open;
    while i < t.len() {
        match &t[i].tok {
            Tok::Punct('[') => depth += 1,
            Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    return (is_cfg && test, i + 1);
                }
            }
            Tok::Punct('(') => {
                let f = match i.checked_sub(1).map(|p| &t[p].tok) {
                    Some(Tok::Ident(name)) => name.clone(),
                    _ => String::new(),
                };
                functions.push(f);
            }
            Tok::Punct(')') => {
                functions.pop();
            }
            Tok::Ident(name) if name == "cfg" && i == open + 1 => is_cfg = true,
            Tok::Ident(name) if name == "test" && !functions.iter().any(|f| f == "not") => {
                test = true
            }
            _ => {}
        }
        i += 1;
    }
    (false, i)
}

/// Marks the tokens of every item under `#[cfg(test)]`: up to its first
/// `;` or the `}` closing its first `{`.
fn mark_test_items(t: &mut [Token]) {
    let mut i = 0;
    while i < t.len() {
        if t[i].tok != Tok::Punct('#') || t.get(i + 1).map(|x| &x.tok) != Some(&Tok::Punct('[')) {
            i += 1;
            continue;
        }
        let (test, after) = cfg_test_attribute(t, i + 1);
        if !test {
            i = after;
            continue;
        }
        let mut j = after;
        let mut depth = 0;
        while j < t.len() {
            match t[j].tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Tok::Punct(';') if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        let end = j.min(t.len() - 1);
        for tok in &mut t[i..=end] {
            tok.test = true;
        }
        i = j + 1;
    }
}

/// The files compiled only for tests: declared with `#[cfg(test)] mod x;`
/// (with its `#[path]`, if any), and everything below them.
fn test_files(src: &Path, lexed: &BTreeMap<PathBuf, Vec<Token>>) -> BTreeSet<PathBuf> {
    // Each file's child files, with whether the declaration is a test's.
    let mut children: BTreeMap<PathBuf, Vec<(PathBuf, bool)>> = BTreeMap::new();
    for (file, t) in lexed {
        let dir = file.parent().expect("a file has a directory");
        let stem = file.file_stem().expect("a file name").to_string_lossy();
        let own_dir = if ["mod", "lib", "main"].contains(&stem.as_ref()) {
            dir.to_path_buf()
        } else {
            dir.join(stem.as_ref())
        };
        for k in 0..t.len().saturating_sub(2) {
            let (Tok::Ident(m), Tok::Ident(name), Tok::Punct(';')) =
                (&t[k].tok, &t[k + 1].tok, &t[k + 2].tok)
            else {
                continue;
            };
            if m != "mod" {
                continue;
            }
            let child = match path_attribute(t, k) {
                Some(p) => dir.join(p),
                None if own_dir.join(format!("{name}.rs")).exists() => {
                    own_dir.join(format!("{name}.rs"))
                }
                None => own_dir.join(name).join("mod.rs"),
            };
            children
                .entry(file.clone())
                .or_default()
                .push((child, t[k].test));
        }
    }
    let mut tests = BTreeSet::new();
    // From the crate roots down: a test's children are tests.
    let mut stack: Vec<(PathBuf, bool)> = ["lib.rs", "main.rs"]
        .iter()
        .map(|r| (src.join(r), false))
        .collect();
    while let Some((file, test)) = stack.pop() {
        if test {
            tests.insert(file.clone());
        }
        for (child, child_test) in children.get(&file).into_iter().flatten() {
            stack.push((child.clone(), test || *child_test));
        }
    }
    tests
}

/// The `#[path = "…"]` on the `mod` at `k`, looking back over its
/// attributes (and its `pub`) to the end of the item before.
fn path_attribute(t: &[Token], k: usize) -> Option<String> {
    let mut j = k;
    while j >= 3 {
        match &t[j - 1].tok {
            Tok::Punct(';') | Tok::Punct('{') | Tok::Punct('}') => return None,
            Tok::Str(p)
                if t[j - 2].tok == Tok::Punct('=')
                    && t[j - 3].tok == Tok::Ident("path".to_string()) =>
            {
                return Some(p.clone());
            }
            _ => {}
        }
        j -= 1;
    }
    None
}

/// The crate paths in a file's code, resolved to module paths.
fn paths_in(t: &[Token], module: &[String], file: &str) -> Vec<Import> {
    let mut out = Vec::new();
    for k in 0..t.len() {
        if t[k].test || t.get(k + 1).map(|x| &x.tok) != Some(&Tok::Path) {
            continue;
        }
        // Not the tail of a longer path (`a::crate` does not occur, but
        // `x::super` would not be ours either).
        if k > 0 && t[k - 1].tok == Tok::Path {
            continue;
        }
        let base: Vec<String> = match &t[k].tok {
            Tok::Ident(w) if w == "crate" => Vec::new(),
            Tok::Ident(w) if w == "holdfast" && ["main", "cli"].contains(&module[0].as_str()) => {
                Vec::new()
            }
            Tok::Ident(w) if w == "super" => {
                let mut up = module.to_vec();
                up.extend(t[k].inline.iter().cloned());
                let mut j = k;
                while matches!(&t[j].tok, Tok::Ident(w) if w == "super")
                    && t.get(j + 1).map(|x| &x.tok) == Some(&Tok::Path)
                {
                    up.pop();
                    j += 2;
                }
                up
            }
            _ => continue,
        };
        let mut start = k + 2;
        while let Some(Token {
            tok: Tok::Ident(w), ..
        }) = t.get(start)
        {
            if w != "super" || t.get(start + 1).map(|x| &x.tok) != Some(&Tok::Path) {
                break;
            }
            start += 2;
        }
        let mut paths = Vec::new();
        use_tree(t, start, base, &mut paths);
        for to in paths.into_iter().filter(|p| !p.is_empty()) {
            // `crate::x` in the crate root's own items (none today) and
            // `self` leave the module unchanged.
            out.push(Import {
                file: file.to_string(),
                line: t[k].line,
                from: module.to_vec(),
                to,
            });
        }
    }
    out
}

/// Reads a path or a use tree (`a::b::{c, d::{e, f}}`) from `i`, adding
/// each full path to `out`; returns the index after it.
fn use_tree(
    t: &[Token],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        match t.get(i).map(|x| &x.tok) {
            Some(Tok::Ident(w)) => {
                if w != "self" {
                    prefix.push(w.clone());
                }
                i += 1;
                if t.get(i).map(|x| &x.tok) == Some(&Tok::Path) {
                    i += 1;
                    continue;
                }
                out.push(prefix);
                return i;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match t.get(i).map(|x| &x.tok) {
                        Some(Tok::Punct('}')) | None => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        _ => {
                            let before = i;
                            i = use_tree(t, i, prefix.clone(), out);
                            if i == before {
                                i += 1;
                            }
                        }
                    }
                }
            }
            Some(Tok::Punct('*')) => {
                out.push(prefix);
                return i + 1;
            }
            _ => {
                out.push(prefix);
                return i;
            }
        }
    }
}

#[cfg(test)]
mod reader {
    use super::*;

    fn rows() -> Vec<Row> {
        layer_table(
            "## Layers\n\n| layer | modules | name |\n|--|--|--|\n\
             | 1 | `seglog`, `pool` | kits |\n| 2 | `metrics` | metrics |\n\
             | 3 | `checking` | checking |\n| 4 | `component` | contract |\n\
             | 5 | `sources`, `sinks` | components |\n| 6 | `config`, `registry` | assembly |\n\
             | 7 | `daemon`, `main`, `lib` | top |\n| 7 | `cli` | top |\n\
             | 7 | `inspect` | top |\n| 7 | `logging` | top |\n\n\
             ### Imports that go up\n\n| from | to | until |\n|--|--|--|\n\
             | `sources::x` | `config` | part 3 |\n",
        )
        .0
    }

    fn imports(text: &str, module: &[&str]) -> Vec<Vec<String>> {
        let module: Vec<String> = module.iter().map(|m| m.to_string()).collect();
        paths_in(&lex(text), &module, "f.rs")
            .into_iter()
            .map(|i| i.to)
            .collect()
    }

    #[test]
    fn use_trees_comments_strings_and_tests() {
        let found = imports(
            "use crate::{a::{b, c::D}, e};\n// use crate::no;\n/* crate::no /* nested */ */\n\
             let s = \"crate::no\"; let r = r#\"crate::no\"#; let c = '\"'; let l: &'a str;\n\
             fn f() { crate::f::g(); }\n#[cfg(test)]\nmod tests { use crate::no; }\n\
             #[cfg(not(test))]\nuse crate::h;\n#[cfg(all(test, feature = \"x\"))]\nuse crate::no;\n\
             let glob = \"/var/log/*.log\"; use crate::i::*;",
            &["x"],
        );
        let want: Vec<Vec<String>> = [
            &["a", "b"][..],
            &["a", "c", "D"],
            &["e"],
            &["f", "g"],
            &["h"],
            &["i"],
        ]
        .iter()
        .map(|p| p.iter().map(|s| s.to_string()).collect())
        .collect();
        assert_eq!(found, want);
    }

    #[test]
    fn super_resolves_from_the_file_and_its_inline_modules() {
        assert_eq!(
            imports("use super::x;", &["sinks", "file"]),
            [["sinks", "x"]]
        );
        assert_eq!(
            imports("use super::config::X;", &["sinks"]),
            [["config", "X"]]
        );
        assert_eq!(
            imports("mod inner { use super::X; }", &["pool"]),
            [["pool", "X"]]
        );
        assert_eq!(
            imports(
                "mod inner { fn f() { super::super::seglog::Log::open(); } }",
                &["pool"]
            ),
            [["seglog", "Log", "open"]]
        );
    }

    fn import(from: &str, to: &str) -> Import {
        Import {
            file: "src/f.rs".into(),
            line: 3,
            from: from.split("::").map(str::to_string).collect(),
            to: to.split("::").map(str::to_string).collect(),
        }
    }

    #[test]
    fn an_upward_import_names_file_line_and_both_layers() {
        let problems = check(
            &rows(),
            &mut [],
            &[import("sinks::file", "config::Settings")],
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("src/f.rs:3: `sinks::file` (layer 5, components) imports `config::Settings` (layer 6, assembly)"),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn a_circle_at_one_layer_fails_and_a_listed_exception_passes_once_used() {
        let problems = check(
            &rows(),
            &mut [],
            &[
                import("sources::a", "sinks::b"),
                import("sinks::c", "sources::d"),
            ],
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("circle"), "{}", problems[0]);
        let (rows, mut exceptions) = layer_table(
            "## Layers\n| 1 | `a`, `b`, `c`, `d`, `e`, `f`, `g`, `h`, `i` | low |\n| 2 | `z` | high |\n\
             ### Imports that go up\n| `a::x` | `z` | soon |\n| `b` | `z` | stale |\n",
        );
        let problems = check(&rows, &mut exceptions, &[import("a::x::y", "z::w")]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("`b` -> `z`"), "{}", problems[0]);
    }

    #[test]
    fn files_of_one_folder_in_a_circle_fail_unless_named() {
        let modules: BTreeSet<Vec<String>> = ["seglog::a", "seglog::b", "seglog::c", "sinks::a"]
            .iter()
            .map(|m| m.split("::").map(str::to_string).collect())
            .collect();
        let imports = [
            import("seglog::a", "seglog::b::X"),
            import("seglog::b", "seglog::a::Y"),
            import("seglog::c", "seglog::a::Z"),
            import("sinks::a", "seglog::a::Z"),
        ];
        let problems = check_folders(&[], &imports, &modules);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("`seglog::a` -> `seglog::b`"),
            "{}",
            problems[0]
        );
        let named = |ms: &[&str]| -> BTreeSet<Vec<String>> {
            ms.iter()
                .map(|m| m.split("::").map(str::to_string).collect())
                .collect()
        };
        let allowed = [
            named(&["seglog::a", "seglog::b"]),
            named(&["sinks::a", "sinks::b"]),
        ];
        let problems = check_folders(&allowed, &imports, &modules);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("sinks::a, sinks::b"),
            "{}",
            problems[0]
        );
    }
}

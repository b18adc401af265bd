//! The layers of the crate (the crate doc's module map): every module file of `src/` belongs to
//! one layer, and names only modules of its own layer or of lower ones.
//!
//! A reference is a `crate::<module>` path anywhere in the code (`use` items, inline paths,
//! `crate::{…}` groups, and `super::` chains that climb to the crate root); comments and
//! string literals are not code. The one exception: code under `#[cfg(test)]` (an inline test
//! module, or a module file declared under it) may also name the test support module
//! `testing`, the top layer, as the crate's own tests always do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers from the ground floor up, each with the top-level modules it holds.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "ground floor",
        &[
            "budget",
            "clock",
            "cost",
            "error",
            "gauge",
            "key_template",
            "logging",
            "object_key",
            "options",
            "partition",
            "report",
            "rng",
            "scratch",
            "settings",
            "two_threads",
        ],
    ),
    ("store", &["store"]),
    ("input", &["input"]),
    ("sort", &["sort"]),
    ("output", &["output"]),
    ("manifest", &["manifest", "late"]),
    ("read", &["read"]),
    ("compact", &["compact"]),
    ("serverless", &["serverless"]),
    ("bench", &["bench"]),
    ("testing", &["testing"]),
];

/// What the crate root re-exports from the ground floor (`crate::Result`).
const ROOT_ITEMS: &[&str] = &["Error", "ErrorKind", "Result"];

/// The test support module, which test code of any layer may name.
const TEST_SUPPORT: &str = "testing";

/// The steps of the compaction driver (`compact/mod.rs`), each a module of `compact/`, in the
/// order they may name each other: a step names only the steps before it, never a later one
/// nor the driver, so nothing in `compact/` imports in a circle.
const COMPACT_STEPS: &[&str] = &[
    "job",
    "state",
    "staging",
    "sizing",
    "arriving",
    "writing",
    "producing",
    "committing",
    "fan_out",
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Layer index (0 = ground floor) of each top-level module.
fn layer_of_module() -> BTreeMap<&'static str, usize> {
    let mut map = BTreeMap::new();
    for (layer, (_, modules)) in LAYERS.iter().enumerate() {
        for module in *modules {
            assert!(
                map.insert(*module, layer).is_none(),
                "{module} is in two layers"
            );
        }
    }
    map
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file relative to `src/` (`sort/runs/mod.rs` is `sort::runs`).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The source with comments, string literals and character literals blanked out (newlines
/// and code kept, so braces and paths stay where they were).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"') | Some('#'))
            && !(i >= 1
                && is_ident_char_at(&chars, i - 1)
                && !(chars[i - 1] == 'b' && (i < 2 || !is_ident_char_at(&chars, i - 2))))
        {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                blank(&mut out, chars[j]);
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    blank(&mut out, c);
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'), or else a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                out.push_str("' '");
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident_char_at(chars: &[char], at: usize) -> bool {
    chars[at].is_alphanumeric() || chars[at] == '_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn ident_at(code: &[u8], at: usize) -> &str {
    let end = (at..code.len())
        .find(|&j| !is_ident_char(code[j]))
        .unwrap_or(code.len());
    std::str::from_utf8(&code[at..end]).unwrap()
}

fn skip_space(code: &[u8], mut at: usize) -> usize {
    while at < code.len() && code[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// The matching close of the brace at `open`.
fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (j, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Byte ranges of `#[cfg(test)] mod x { … }`, and the names of `#[cfg(test)] mod x;`.
fn test_code(code: &str) -> (Vec<(usize, usize)>, Vec<String>) {
    let bytes = code.as_bytes();
    let mut ranges = Vec::new();
    let mut files = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let mut j = skip_space(bytes, at + "#[cfg(test)]".len());
        // Further attributes.
        while bytes.get(j) == Some(&b'#') {
            while j < bytes.len() && bytes[j] != b']' {
                j += 1;
            }
            j = skip_space(bytes, j + 1);
        }
        if code[j..].starts_with("pub ") {
            j = skip_space(bytes, j + 4);
        }
        if !code[j..].starts_with("mod ") {
            continue;
        }
        let name_at = skip_space(bytes, j + 4);
        let name = ident_at(bytes, name_at);
        let after = skip_space(bytes, name_at + name.len());
        match bytes.get(after) {
            Some(b'{') => ranges.push((at, matching_brace(bytes, after))),
            Some(b';') => files.push(name.to_string()),
            _ => {}
        }
    }
    (ranges, files)
}

/// Every top-level module the code names, with the byte offset where it does.
fn crate_references(code: &str, depth: usize) -> Vec<(usize, String)> {
    references_under(code, "crate::", |climbs| climbs >= depth)
}

/// The first segments of the paths the code names under the module `root` (`crate::` or
/// `crate::compact::`), and of the `super::` chains whose number of climbs `reaches` it.
fn references_under(
    code: &str,
    root: &str,
    reaches: impl Fn(usize) -> bool,
) -> Vec<(usize, String)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let boundary = |at: usize| at == 0 || !(is_ident_char(bytes[at - 1]) || bytes[at - 1] == b'$');
    for (at, _) in code.match_indices(root) {
        if !boundary(at) {
            continue;
        }
        found.extend(path_heads(bytes, at + root.len()));
    }
    for (at, _) in code.match_indices("super::") {
        if !boundary(at) || (at >= 2 && &code[at - 2..at] == "::") {
            continue;
        }
        let mut j = at;
        let mut climbs = 0;
        while code[j..].starts_with("super::") {
            climbs += 1;
            j = skip_space(bytes, j + "super::".len());
        }
        if reaches(climbs) {
            found.extend(path_heads(bytes, j));
        }
    }
    found
}

/// The first segments of the path or `{…}` group of paths at `at`.
fn path_heads(bytes: &[u8], at: usize) -> Vec<(usize, String)> {
    let at = skip_space(bytes, at);
    if bytes.get(at) != Some(&b'{') {
        let head = ident_at(bytes, at);
        return if head.is_empty() {
            Vec::new()
        } else {
            vec![(at, head.to_string())]
        };
    }
    let close = matching_brace(bytes, at);
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut expect_head = true;
    let mut j = at + 1;
    while j < close {
        match bytes[j] {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b',' if depth == 0 => expect_head = true,
            c if expect_head && depth == 0 && is_ident_char(c) => {
                let head = ident_at(bytes, j);
                heads.push((j, head.to_string()));
                expect_head = false;
                j += head.len();
                continue;
            }
            _ => {}
        }
        j += 1;
    }
    heads
}

/// Module files declared under `#[cfg(test)]` (`#[cfg(test)] mod tests;`).
fn test_module_files(src: &Path, files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut test_files = BTreeSet::new();
    for file in files {
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let relative = file.strip_prefix(src).unwrap();
        let dir = if relative
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
        {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for name in test_code(&code).1 {
            test_files.insert(dir.join(format!("{name}.rs")));
            test_files.insert(dir.join(&name).join("mod.rs"));
        }
    }
    test_files
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

#[test]
fn modules_import_only_their_own_or_lower_layers() {
    let layers = layer_of_module();
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "found too few files under {}",
        src.display()
    );

    let test_files = test_module_files(&src, &files);

    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let path = module_path(relative);
        let shown = format!("src/{}", relative.display());
        let Some(top) = path.first() else {
            continue; // lib.rs: the crate root declares the layers, it belongs to none.
        };
        let Some(&layer) = layers.get(top.as_str()) else {
            violations.push(format!(
                "{shown}: module `{top}` is in no layer (add it to LAYERS here and to the crate doc)"
            ));
            continue;
        };
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let whole_file_is_test = test_files.contains(file);
        let (test_ranges, _) = test_code(&code);
        for (at, head) in crate_references(&code, path.len()) {
            let referenced = if ROOT_ITEMS.contains(&head.as_str()) {
                0
            } else if let Some(&l) = layers.get(head.as_str()) {
                l
            } else {
                violations.push(format!(
                    "{shown}:{}: names `crate::{head}`, which is in no layer",
                    line_of(&code, at)
                ));
                continue;
            };
            if referenced <= layer {
                continue;
            }
            let in_test =
                whole_file_is_test || test_ranges.iter().any(|&(s, e)| s <= at && at <= e);
            if in_test && head == TEST_SUPPORT {
                continue;
            }
            violations.push(format!(
                "{shown}:{}: the {} layer imports `crate::{head}` from the higher {} layer",
                line_of(&code, at),
                LAYERS[layer].0,
                LAYERS[referenced].0
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "modules import from higher layers:\n{}",
        violations.join("\n")
    );
}

#[test]
fn every_layer_module_is_declared_and_every_declared_module_has_a_layer() {
    let layers = layer_of_module();
    let lib = code_only(&std::fs::read_to_string(src_dir().join("lib.rs")).unwrap());
    let mut declared = BTreeSet::new();
    for line in lib.lines() {
        let line = line.trim();
        let rest = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "));
        if let Some(name) = rest.and_then(|r| r.strip_suffix(';')) {
            declared.insert(name.trim().to_string());
        }
    }
    let in_layers: BTreeSet<String> = layers.keys().map(|m| m.to_string()).collect();
    let unlayered: Vec<_> = declared.difference(&in_layers).collect();
    let stale: Vec<_> = in_layers.difference(&declared).collect();
    assert!(
        unlayered.is_empty(),
        "modules lib.rs declares that no layer covers: {unlayered:?}"
    );
    assert!(
        stale.is_empty(),
        "layer modules lib.rs does not declare: {stale:?}"
    );
}

/// Every module of `compact/` the code names: `crate::compact::<step>` paths and groups, and
/// `super::` chains that climb from a file at `depth` to `compact`.
fn compact_references(code: &str, depth: usize) -> Vec<(usize, String)> {
    references_under(code, "crate::compact::", |climbs| climbs + 1 == depth)
}

#[test]
fn the_compaction_steps_name_only_earlier_steps_and_never_the_driver() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src.join("compact"), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let path = module_path(relative);
        let shown = format!("src/{}", relative.display());
        let Some(step) = path.get(1) else {
            continue; // compact/mod.rs: the driver names every step.
        };
        let Some(rank) = COMPACT_STEPS.iter().position(|s| s == step) else {
            violations.push(format!(
                "{shown}: `compact::{step}` is not in COMPACT_STEPS (add it there and to the \
                 crate doc)"
            ));
            continue;
        };
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        for (at, head) in compact_references(&code, path.len()) {
            let line = line_of(&code, at);
            match COMPACT_STEPS.iter().position(|s| *s == head) {
                Some(named) if named <= rank => {}
                Some(_) => violations.push(format!(
                    "{shown}:{line}: step `{step}` names the later step `compact::{head}`"
                )),
                None => violations.push(format!(
                    "{shown}:{line}: step `{step}` names `compact::{head}` of the driver"
                )),
            }
        }
    }
    assert!(
        violations.is_empty(),
        "compaction steps that name a later step or the driver:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_crate_doc_names_every_module() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let doc: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let test_files = test_module_files(&src, &files);
    let mut missing = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let path = module_path(relative);
        if path.is_empty() || test_files.contains(file) {
            continue;
        }
        let name = path.join("::");
        if !doc.contains(&format!("`{name}`")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "modules the crate doc's module map does not name: {missing:?}"
    );
}

#[test]
fn the_scanner_sees_paths_groups_and_test_code() {
    let code = code_only(
        "use crate::{a::b, c, d::{e, f}};\n// crate::commented\nlet s = \"crate::quoted\";\n\
         fn g<'a>(x: &'a str) -> char { crate::h::i(); 'c' }\n\
         #[cfg(test)]\nmod tests {\n    use crate::testing::x;\n}\n#[cfg(test)]\nmod more;\n",
    );
    let heads: Vec<String> = crate_references(&code, 1)
        .into_iter()
        .map(|(_, h)| h)
        .collect();
    assert_eq!(heads, ["a", "c", "d", "h", "testing"]);
    let (ranges, files) = test_code(&code);
    assert_eq!(ranges.len(), 1);
    assert_eq!(files, ["more"]);
    let testing_at = code.find("crate::testing").unwrap();
    assert!(ranges[0].0 <= testing_at && testing_at <= ranges[0].1);
    let climbing = code_only("use super::super::store::Store;");
    let heads: Vec<String> = crate_references(&climbing, 2)
        .into_iter()
        .map(|(_, h)| h)
        .collect();
    assert_eq!(heads, ["store"]);
    let steps = code_only(
        "use crate::compact::{job::JobContext, state};\nuse super::super::writing::Written;\n\
         use super::admission::admit;\n",
    );
    let heads: Vec<String> = compact_references(&steps, 3)
        .into_iter()
        .map(|(_, h)| h)
        .collect();
    assert_eq!(heads, ["job", "state", "writing"]);
}

//! The layout CONTRIBUTING.md describes, checked: the top-level modules of `src/` import each other
//! without a cycle (a module only uses modules below it), and no source file grows past 800
//! lines unless it is listed here with the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Files allowed past the limit, with why (none today; an entry that no longer needs it fails).
const LONG_FILES: [(&str, &str); 0] = [];
const MAX_LINES: usize = 800;

/// The layers of `src/`, bottom first (CONTRIBUTING.md "Architecture", src/lib.rs): a module may
/// use only modules before it.
const ORDER: [&str; 33] = [
    "spa",
    "lock",
    "rundir",
    "checkpoint",
    "tensorboard",
    "plot",
    "tokenizer",
    "progress",
    "parallel",
    "tags",
    "config",
    "kernels",
    "metrics",
    "heads",
    "backend",
    "memory",
    "data",
    "optim",
    "model",
    "dark",
    "eval",
    "intervene",
    "generate",
    "recorder",
    "run",
    "dist",
    "train",
    "interop",
    "analysis",
    "sweep",
    "report",
    "bench",
    "commands",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`src/model/cache.rs` → `model`).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The modules named after `crate::` in code (comments dropped), including the members of
/// `use crate::{a, b::c}` groups.
fn crate_references(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// A cycle in the graph, if there is one.
fn find_cycle(deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        u: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(u.to_string(), 1);
        stack.push(u.to_string());
        for v in deps.get(u).into_iter().flatten() {
            match state.get(v.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|x| x == v).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(v.clone());
                    return Some(cycle);
                }
                0 if deps.contains_key(v) => {
                    if let Some(c) = visit(v, deps, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(u.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for u in deps.keys() {
        if state.get(u.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(u, deps, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_module_graph_has_no_cycle_and_files_stay_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut too_long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rel = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let lines = text.lines().count();
        let listed = LONG_FILES.iter().any(|(p, _)| *p == rel);
        if lines > MAX_LINES && !listed {
            too_long.push(format!("{rel}: {lines} lines"));
        }
        if lines <= MAX_LINES && listed {
            too_long.push(format!(
                "{rel}: {lines} lines, listed as long: drop the entry"
            ));
        }
        let top = top_module(&src, f);
        if top == "main" || top == "lib" {
            continue;
        }
        let refs = crate_references(&text);
        let entry = deps.entry(top.clone()).or_default();
        entry.extend(refs.into_iter().filter(|m| *m != top));
    }
    assert!(deps.len() >= 20, "found only {:?}", deps.keys());
    assert!(
        deps["train"].contains("model") && deps["commands"].contains("train"),
        "the parser sees imports: {deps:?}"
    );
    if let Some(cycle) = find_cycle(&deps) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
    let rank = |m: &str| ORDER.iter().position(|x| *x == m);
    let mut upward = Vec::new();
    for (m, uses) in &deps {
        let r = rank(m).unwrap_or_else(|| panic!("module `{m}` is not in ORDER (the layer list)"));
        for u in uses.iter().filter(|u| rank(u).is_some_and(|ru| ru > r)) {
            upward.push(format!("{m} → {u}"));
        }
    }
    assert!(
        upward.is_empty(),
        "imports that go up the layer order (CONTRIBUTING.md \"Architecture\"): {upward:?}"
    );
    assert!(
        too_long.is_empty(),
        "files over {MAX_LINES} lines (split them or list them with a reason): {too_long:?}"
    );
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
        None
    );
    let c = find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])).unwrap();
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4);
    assert_eq!(
        crate_references(
            "use crate::{data, model::Lm};\n// crate::train\nlet x = crate::eval::f();"
        ),
        ["data", "eval", "model"].map(String::from).into()
    );
}

//! Every `sinklab …` command line of the documentation parses with the real command line
//! (`sinklab::commands::Cli`, clap), so that the docs cannot drift from `--help`.
//!
//! Where: README.md, CONTRIBUTING.md and every `docs/**/*.md`; in fenced code blocks (every
//! line, `\` continuations joined, commands after `&&`, `||`, `;` or `|` too) and in inline code
//! spans that start with `sinklab ` (or `cargo run --release -- `, or either after `VAR=value`
//! assignments). A `cargo run --release -- ARGS` line is checked as `sinklab ARGS`.
//!
//! The rule for what is not a command:
//! - a synopsis line, one with `[`, `|`, `…` or `...` outside quotes and comments
//!   (`sinklab eval RUN_DIR|CHECKPOINT [--json]`), is skipped and counted; the count must stay
//!   small, and every skipped line is printed;
//! - a word in capitals only (`N`, `RUN`, `RUN_DIR`, `SEED`) is a placeholder for a value and is
//!   checked as `1`; `EXP.toml` or `runs/NAME` are paths and are checked as written;
//! - a span that only names a command (`sinklab check`, `sinklab data bench`) or the program
//!   (`sinklab`) is checked as `sinklab check --help`: the name must exist.
//!
//! The test fails with the file, the line and clap's error for every other line that does not
//! parse.

use clap::Parser;
use clap::error::ErrorKind;
use sinklab::commands::Cli;
use std::path::{Path, PathBuf};

/// The most synopsis lines the docs may hold (today: the command table of docs/README.md, a few
/// `sinklab …` references in prose and a handful of option lists).
const MAX_SKIPPED: usize = 40;

/// A line or span of the docs that holds a command, where it was found.
struct Found {
    file: String,
    line: usize,
    text: String,
}

/// The files whose commands are checked.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut dirs = vec![root.join("docs")];
    let mut docs = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
    }
    docs.sort();
    files.extend(docs);
    files
}

/// Every fenced line (continuations joined) and every inline code span of a Markdown text,
/// with the line it starts on.
fn candidates(file: &str, text: &str) -> Vec<Found> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut prose = String::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if marker.len() >= 3
            && fence
                .as_ref()
                .is_none_or(|f| marker.starts_with(f.as_str()))
        {
            if let Some((start, joined)) = pending.take() {
                out.push(Found {
                    file: file.into(),
                    line: start,
                    text: joined,
                });
            }
            fence = if fence.is_some() { None } else { Some(marker) };
            prose.push('\n');
            continue;
        }
        if fence.is_some() {
            let (start, mut joined) = pending.take().unwrap_or((n, String::new()));
            joined.push_str(line);
            match joined.strip_suffix('\\') {
                Some(head) => pending = Some((start, format!("{head} "))),
                None => out.push(Found {
                    file: file.into(),
                    line: start,
                    text: joined,
                }),
            }
            prose.push('\n');
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    // inline code spans: a run of n backticks up to the next run of exactly n
    let b = prose.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let run = b[i..].iter().take_while(|c| **c == b'`').count();
        let start = i + run;
        let mut j = start;
        let mut close = None;
        while j < b.len() {
            if b[j] == b'`' {
                let r = b[j..].iter().take_while(|c| **c == b'`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        let Some(end) = close else {
            i = start;
            continue;
        };
        let span = prose[start..end].replace('\n', " ").replace("\\|", "|");
        if starts_like_command(&span) {
            out.push(Found {
                file: file.into(),
                line: prose[..i].matches('\n').count() + 1,
                text: span.trim().to_string(),
            });
        }
        i = end + run;
    }
    out
}

/// Text that starts as a command does (after `VAR=value` assignments): `sinklab …` or
/// `cargo run --release -- …`.
fn starts_like_command(text: &str) -> bool {
    let mut rest = text.trim_start();
    while let Some((word, tail)) = rest.split_once(char::is_whitespace) {
        match word.split_once('=') {
            Some((k, _)) if is_name(k) => rest = tail.trim_start(),
            _ => break,
        }
    }
    rest == "sinklab" || rest.starts_with("sinklab ") || rest.starts_with("cargo run --release -- ")
}

/// A shell-like split: words (quotes and backslashes resolved), the operators `&&`, `||`, `;`,
/// `|`, `&` as `None`, comments dropped; and whether a synopsis mark (`[`, `|`, `…`, `...`)
/// stands outside quotes and comments.
fn split(line: &str) -> Result<(Vec<Option<String>>, bool), String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut synopsis = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => word.push(x),
                        None => return Err("unclosed '".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$' | '`')) => word.push(x),
                            Some(x) => {
                                word.push('\\');
                                word.push(x);
                            }
                            None => return Err("unclosed \"".into()),
                        },
                        Some(x) => word.push(x),
                        None => return Err("unclosed \"".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(x) = chars.next() {
                    word.push(x);
                }
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(Some(std::mem::take(&mut word)));
                    in_word = false;
                }
            }
            '&' if in_word && word.ends_with(['>', '<']) => word.push(c),
            '&' | '|' | ';' => {
                if c == '|' {
                    synopsis = true;
                }
                if in_word {
                    words.push(Some(std::mem::take(&mut word)));
                    in_word = false;
                }
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                words.push(None);
            }
            c => {
                let mut ahead = chars.clone();
                let ellipsis = c == '.' && ahead.next() == Some('.') && ahead.next() == Some('.');
                if c == '[' || c == '…' || ellipsis {
                    synopsis = true;
                }
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(Some(word));
    }
    Ok((words, synopsis))
}

/// The argument vectors (program name first, as `sinklab`) of the sinklab commands in a split
/// line: each segment between operators, after `VAR=value` assignments, that is `sinklab …` or
/// `cargo run --release -- …`; redirections dropped.
fn commands(words: &[Option<String>]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for segment in words.split(Option::is_none) {
        let mut w: Vec<&str> = segment.iter().map(|w| w.as_deref().unwrap()).collect();
        while w
            .first()
            .is_some_and(|x| x.split_once('=').is_some_and(|(k, _)| is_name(k)))
        {
            w.remove(0);
        }
        let args: &[&str] = match w.as_slice() {
            ["sinklab", rest @ ..] => rest,
            ["cargo", "run", "--release", "--", rest @ ..] => rest,
            _ => continue,
        };
        let mut argv = vec!["sinklab".to_string()];
        let mut skip_next = false;
        for a in args {
            if std::mem::take(&mut skip_next) {
                continue;
            }
            let redirect = a.trim_start_matches(|c: char| c.is_ascii_digit());
            if redirect.starts_with('>') || redirect.starts_with('<') {
                skip_next = redirect.trim_start_matches(['>', '<', '&']).is_empty();
                continue;
            }
            argv.push(if is_placeholder(a) {
                "1".into()
            } else {
                a.to_string()
            });
        }
        out.push(argv);
    }
    out
}

/// A shell variable name.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// A word in capitals only (`N`, `RUN_DIR`): a placeholder for a value.
fn is_placeholder(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// A command written only by its name (`sinklab check`, `sinklab data bench`), or the program
/// alone (`sinklab`).
fn names_only(argv: &[String]) -> bool {
    (1..=3).contains(&argv.len())
        && argv[1..]
            .iter()
            .all(|w| !w.starts_with('-') && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
}

#[test]
fn every_documented_command_line_parses_with_the_real_cli() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = Vec::new();
    let mut skipped = Vec::new();
    let mut failures = Vec::new();
    for path in doc_files(root) {
        let name = path.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        for found in candidates(&name, &text) {
            let Found { file, line, text } = found;
            let (words, synopsis) = match split(&text) {
                Ok(s) => s,
                Err(e) => {
                    if starts_like_command(&text) {
                        failures.push(format!("{file}:{line}: `{text}`: {e}"));
                    }
                    continue;
                }
            };
            let argvs = commands(&words);
            if argvs.is_empty() {
                continue;
            }
            if synopsis {
                skipped.push(format!("{file}:{line}: `{text}`"));
                continue;
            }
            for mut argv in argvs {
                let name_only = names_only(&argv);
                if name_only {
                    argv.push("--help".into());
                }
                match Cli::try_parse_from(&argv) {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                        ) => {}
                    Err(e) => {
                        let kind = e.kind();
                        let msg = e.render().to_string();
                        let first = msg.lines().next().unwrap_or_default();
                        failures.push(format!(
                            "{file}:{line}: `{text}`\n    parsed as {argv:?}: {kind:?}: {first}"
                        ));
                        continue;
                    }
                }
                checked.push(format!("{file}:{line}: {}", argv[1..].join(" ")));
            }
        }
    }
    println!(
        "{} command lines parsed, {} synopsis lines skipped:",
        checked.len(),
        skipped.len()
    );
    for s in &skipped {
        println!("  skipped {s}");
    }
    assert!(
        failures.is_empty(),
        "{} documented command lines do not parse (fix the docs to what `--help` accepts):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        skipped.len() <= MAX_SKIPPED,
        "{} synopsis lines skipped, more than {MAX_SKIPPED}: write commands that parse, or \
         raise the bound with a reason:\n{}",
        skipped.len(),
        skipped.join("\n")
    );
    // the extraction finds the commands it should: the README's first, and many more
    assert!(
        checked.iter().any(
            |c| c.starts_with("README.md:") && c.ends_with("train experiments/quickstart.toml")
        ),
        "{checked:#?}"
    );
    assert!(
        checked.len() >= 60,
        "only {} commands found: {checked:#?}",
        checked.len()
    );
}

#[test]
fn the_splitter_reads_quotes_comments_operators_and_placeholders() {
    let (w, syn) = split(
        r#"A=1 sinklab train x.toml --set 'model.attention.normaliser={kind="relu"}' && sinklab report "runs/a b" # [not] a synopsis"#,
    )
    .unwrap();
    assert!(!syn);
    let argvs = commands(&w);
    assert_eq!(
        argvs,
        [
            vec![
                "sinklab",
                "train",
                "x.toml",
                "--set",
                r#"model.attention.normaliser={kind="relu"}"#
            ],
            vec!["sinklab", "report", "runs/a b"],
        ]
    );
    let (w, syn) = split("sinklab eval RUN_DIR|CHECKPOINT [--json]").unwrap();
    assert!(syn && !commands(&w).is_empty());
    let (w, _) = split("cargo run --release -- heads RUN --n N > log 2>&1").unwrap();
    assert_eq!(commands(&w), [vec!["sinklab", "heads", "1", "--n", "1"]]);
    assert!(names_only(&[
        "sinklab".into(),
        "data".into(),
        "bench".into()
    ]));
    assert!(!names_only(&[
        "sinklab".into(),
        "train".into(),
        "x.toml".into()
    ]));
    assert!(split("sinklab train 'x").is_err());
}

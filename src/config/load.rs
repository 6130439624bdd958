//! Loading an experiment file: the `base` chain, deep merge, `--set` overrides,
//! dependent defaults, and deserialization that collects every structural error.

use super::schema::*;
use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in an experiment file.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: String,
    /// Dotted TOML path, e.g. `model.n_heads`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: `{}`: {}", self.file, self.path, self.message)
        }
    }
}

/// Every problem found in one or more files.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "{n} error{} in experiment configuration:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Where each key of a merged table came from: dotted path → file (or `--set …`), the last
/// writer winning, so that an error names the file that holds the mistake.
pub type Origins = std::collections::HashMap<String, String>;

fn record(origins: &mut Origins, prefix: &str, table: &toml::Table, source: &str) {
    for (k, v) in table {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if let toml::Value::Table(t) = v {
            record(origins, &path, t, source);
        }
        origins.insert(path, source.to_string());
    }
}

/// The source of the longest recorded prefix of `path`, else `default`.
fn origin(origins: &Origins, path: &str, default: &str) -> String {
    let segs: Vec<&str> = path.split('.').collect();
    (1..=segs.len())
        .rev()
        .find_map(|i| origins.get(&segs[..i].join(".")))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// "not valid TOML at line L, column C: message" for a parse error of `text`.
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    let at = match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!(" at line {line}, column {col}")
        }
        None => String::new(),
    };
    format!(
        "not valid TOML{at}: {}",
        e.message().trim().replace('\n', "; ")
    )
}

/// Read a file and its `base` chain into one merged TOML table.
fn load_merged(
    path: &Path,
    chain: &mut Vec<PathBuf>,
    origins: &mut Origins,
) -> Result<toml::Table, ConfigError> {
    let file = path.display().to_string();
    let err = |path: &str, message: String| ConfigError {
        file: file.clone(),
        path: path.into(),
        message,
    };
    let canonical = path
        .canonicalize()
        .map_err(|e| err("", format!("cannot read file: {e}")))?;
    if let Some(i) = chain.iter().position(|c| c == &canonical) {
        let mut cycle: Vec<String> = chain[i..].iter().map(|p| p.display().to_string()).collect();
        cycle.push(canonical.display().to_string());
        return Err(err(
            "base",
            format!("inheritance cycle: {}", cycle.join(" → ")),
        ));
    }
    chain.push(canonical);
    let text =
        std::fs::read_to_string(path).map_err(|e| err("", format!("cannot read file: {e}")))?;
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| err("", syntax_error(&text, &e)))?;
    match table.remove("base") {
        None => {
            record(origins, "", &table, &file);
            Ok(table)
        }
        Some(toml::Value::String(base)) => {
            let base_path = path.parent().unwrap_or(Path::new(".")).join(&base);
            let mut merged = load_merged(&base_path, chain, origins).map_err(|mut e| {
                if e.path.is_empty() && e.message.starts_with("cannot read") {
                    e = err(
                        "base",
                        format!("base file `{}`: {}", base_path.display(), e.message),
                    );
                }
                e
            })?;
            record(origins, "", &table, &file);
            deep_merge(&mut merged, table);
            Ok(merged)
        }
        Some(other) => Err(err(
            "base",
            format!(
                "found {} `{other}`, expected a string: the path of a base experiment file",
                other.type_str()
            ),
        )),
    }
}

/// Merge `over` into `base`: tables merge key by key, anything else is replaced. A table whose
/// `kind` differs from the base table's `kind` replaces it wholesale.
pub fn deep_merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => {
                let kind_changed = o.get("kind").is_some() && o.get("kind") != b.get("kind");
                if kind_changed {
                    *b = o;
                } else {
                    deep_merge(b, o);
                }
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Apply one `a.b.c=value` override. The value is parsed as a TOML value (`3e-4`, `true`,
/// `[1, 2]`, `{ kind = "nope" }`); anything that is not valid TOML is taken as a string.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> Result<(), String> {
    apply_override_from(table, assignment, &mut Origins::new())
}

/// [`apply_override`], recording `--set` as the origin of the keys it sets.
fn apply_override_from(
    table: &mut toml::Table,
    assignment: &str,
    origins: &mut Origins,
) -> Result<(), String> {
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| format!("--set `{assignment}`: expected KEY=VALUE, e.g. optim.lr=1e-3"))?;
    let key = key.trim();
    let raw = raw.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(format!(
            "--set `{assignment}`: empty key segment in `{key}`"
        ));
    }
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let segments: Vec<&str> = key.split('.').collect();
    let mut over = toml::Table::new();
    let mut cursor = &mut over;
    for seg in &segments[..segments.len() - 1] {
        cursor = cursor
            .entry(seg.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("fresh table");
    }
    cursor.insert(segments[segments.len() - 1].to_string(), value);
    record(origins, "", &over, &format!("--set `{assignment}`"));
    deep_merge(table, over);
    Ok(())
}

/// The valid `kind`s of the tagged enum at `segs`, found by asking the schema about an
/// impossible one (empty when there is no tagged enum there).
fn choices(table: &toml::Table, segs: &[String]) -> Vec<String> {
    let mut probe = table.clone();
    let Some((last, init)) = segs.split_last() else {
        return Vec::new();
    };
    let mut cursor = &mut probe;
    for seg in init {
        match cursor.get_mut(seg) {
            Some(toml::Value::Table(t)) => cursor = t,
            _ => return Vec::new(),
        }
    }
    let mut bad = toml::Table::new();
    bad.insert("kind".into(), toml::Value::String("\u{1}".into()));
    cursor.insert(last.clone(), toml::Value::Table(bad));
    match first_error(&probe) {
        Some((_, m)) if m.starts_with("unknown variant") => m
            .split_once("expected ")
            .map(|(_, list)| {
                list.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The first structural error of a merged table: its serde path and the first line of its
/// message.
fn first_error(table: &toml::Table) -> Option<(Vec<String>, String)> {
    match serde_path_to_error::deserialize::<_, Experiment>(toml::Value::Table(table.clone())) {
        Ok(_) => None,
        Err(e) => Some((
            path_segments(e.path()),
            e.inner()
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
        )),
    }
}

/// The value at a serde path.
fn value_at<'a>(table: &'a toml::Table, segs: &[String]) -> Option<&'a toml::Value> {
    let (first, rest) = segs.split_first()?;
    rest.iter()
        .try_fold(table.get(first)?, |v, seg| v.as_table()?.get(seg))
}

/// The key an error belongs to. serde reads a `kind`-tagged table from a buffer, so its path
/// stops at the table: an error in `slot = { kind = "k_bias", value = "zero" }` names `…slot`.
/// Inside such a table the culprit is the key whose removal changes the error (descending
/// while it is a table); a missing key belongs to the innermost table that, given the key,
/// stops missing it.
fn locate(table: &toml::Table, segs: &[String], msg: &str) -> Vec<String> {
    let tagged = |at: &[String]| matches!(value_at(table, at), Some(toml::Value::Table(t)) if t.contains_key("kind"));
    if !tagged(segs) {
        return segs.to_vec();
    }
    let same = |probe: &toml::Table| first_error(probe).is_some_and(|(_, m)| m == msg);
    if let Some(field) = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next())
    {
        // tables below segs, innermost first
        let mut inner = Vec::new();
        let mut stack = vec![segs.to_vec()];
        while let Some(at) = stack.pop() {
            if let Some(toml::Value::Table(t)) = value_at(table, &at) {
                for (k, v) in t {
                    if v.is_table() {
                        let mut p = at.clone();
                        p.push(k.clone());
                        inner.push(p.clone());
                        stack.push(p);
                    }
                }
            }
        }
        inner.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for at in inner {
            let mut probe = table.clone();
            let mut p = at.clone();
            p.push(field.to_string());
            set_at(&mut probe, &p, toml::Value::String("\u{1}".into()));
            if !same(&probe) {
                return at;
            }
        }
        return segs.to_vec();
    }
    let mut at = segs.to_vec();
    while let Some(toml::Value::Table(t)) = value_at(table, &at) {
        let culprit = t.keys().filter(|k| *k != "kind").find(|k| {
            let mut probe = table.clone();
            let mut p = at.clone();
            p.push(k.to_string());
            remove_at(&mut probe, &p);
            !same(&probe)
        });
        match culprit {
            Some(k) => at.push(k.clone()),
            None => break,
        }
    }
    at
}

/// Set the value at a path whose tables exist.
fn set_at(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let Some((last, init)) = path.split_last() else {
        return;
    };
    let mut cursor = table;
    for seg in init {
        match cursor.get_mut(seg) {
            Some(toml::Value::Table(t)) => cursor = t,
            _ => return,
        }
    }
    cursor.insert(last.clone(), value);
}

/// "expected a table like value = { kind = "zero" }; valid kinds: zero, e1, ones" for a
/// non-table `found` where the tagged enum at `segs` is expected.
fn tagged_table_expected(table: &toml::Table, segs: &[String], found: &str) -> String {
    let kinds = choices(table, segs);
    if kinds.is_empty() {
        return "expected a table { kind = \"…\" } (see docs/experiments.md)".into();
    }
    // the string the user wrote, when it names a kind, else the first kind
    let written = found
        .strip_prefix("string \"")
        .and_then(|r| r.strip_suffix('"'));
    let example = written
        .filter(|w| kinds.iter().any(|k| k == w))
        .unwrap_or(&kinds[0]);
    let key = segs.last().map_or("", String::as_str);
    format!(
        "expected a table like {key} = {{ kind = \"{example}\" }}; valid kinds: {}",
        kinds.join(", ")
    )
}

/// Remove the value at a serde path from a table; returns false when the path does not exist.
fn remove_at(table: &mut toml::Table, path: &[String]) -> bool {
    let Some((last, init)) = path.split_last() else {
        return false;
    };
    let mut cursor = table;
    for seg in init {
        match cursor.get_mut(seg) {
            Some(toml::Value::Table(t)) => cursor = t,
            _ => return false,
        }
    }
    cursor.remove(last).is_some()
}

fn path_segments(path: &serde_path_to_error::Path) -> Vec<String> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|seg| match seg {
            Segment::Map { key } => Some(key.clone()),
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// Rewrite serde's messages in the terms a user of the file needs.
fn explain(message: &str) -> String {
    let m = message.trim();
    if let Some(rest) = m.strip_prefix("unknown variant ") {
        return format!("unknown choice {rest}");
    }
    if let Some(rest) = m.strip_prefix("invalid type: ") {
        let rest = rest
            .replace("expected f64", "expected a number")
            .replace("expected usize", "expected a non-negative integer")
            .replace("expected u64", "expected a non-negative integer")
            .replace("expected u32", "expected a non-negative integer");
        return format!("wrong type: {rest}");
    }
    m.to_string()
}

/// Deserialize a merged table, collecting every structural error: unknown keys, wrong types,
/// unknown enum choices. Each failing key is removed and deserialization retried, so one
/// mistake does not hide the next.
fn deserialize_all(
    file: &str,
    mut table: toml::Table,
    origins: &Origins,
) -> Result<Experiment, ConfigErrors> {
    let mut errors = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    for _ in 0..256 {
        let value = toml::Value::Table(table.clone());
        match serde_path_to_error::deserialize::<_, Experiment>(value) {
            Ok(exp) => {
                return if errors.is_empty() {
                    Ok(exp)
                } else {
                    Err(ConfigErrors(errors))
                };
            }
            Err(e) => {
                let full_msg = e.inner().to_string();
                let msg = full_msg.lines().next().unwrap_or_default().to_string();
                let mut segs = locate(&table, &path_segments(e.path()), &msg);
                // serde reports an unknown field at the parent's path; name the field itself.
                if let Some(field) = msg
                    .strip_prefix("unknown field `")
                    .and_then(|r| r.split('`').next())
                {
                    if segs.last().map(String::as_str) != Some(field) {
                        segs.push(field.to_string());
                    }
                    let message = match msg.split_once(", expected ") {
                        Some((_, valid)) => format!("unknown key; valid keys here: {valid}"),
                        None => "unknown key; this table takes no key but `kind`".into(),
                    };
                    errors.push(ConfigError {
                        file: origin(origins, &segs.join("."), file),
                        path: segs.join("."),
                        message,
                    });
                } else if let Some(field) = msg
                    .strip_prefix("missing field `")
                    .and_then(|r| r.split('`').next())
                {
                    let mut full = segs.clone();
                    full.push(field.to_string());
                    // A required field that was removed because of an earlier error is not a
                    // second mistake. Either way, drop the incomplete table and go on.
                    if !removed.contains(&full.join(".")) {
                        errors.push(ConfigError {
                            file: origin(origins, &segs.join("."), file),
                            path: full.join("."),
                            message: "missing required key".into(),
                        });
                    }
                } else {
                    let mut message = explain(&msg);
                    if let Some((before, _)) = message.split_once("expected internally tagged enum")
                    {
                        let found = before
                            .trim_start_matches("wrong type: ")
                            .trim_end_matches(", ");
                        message =
                            format!("{before}{}", tagged_table_expected(&table, &segs, found));
                    }
                    errors.push(ConfigError {
                        file: origin(origins, &segs.join("."), file),
                        path: segs.join("."),
                        message,
                    });
                }
                removed.push(segs.join("."));
                if !remove_at(&mut table, &segs) {
                    return Err(ConfigErrors(errors));
                }
            }
        }
    }
    Err(ConfigErrors(errors))
}

/// Load an experiment file with its base chain and overrides, and validate it.
pub fn load(path: &Path, overrides: &[String]) -> Result<Experiment, ConfigErrors> {
    let file = path.display().to_string();
    let mut origins = Origins::new();
    let mut table =
        load_merged(path, &mut Vec::new(), &mut origins).map_err(|e| ConfigErrors(vec![e]))?;
    let mut errors = Vec::new();
    for o in overrides {
        if let Err(message) = apply_override_from(&mut table, o, &mut origins) {
            errors.push(ConfigError {
                file: "--set".into(),
                path: String::new(),
                message,
            });
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    from_table_with(&file, table, &origins)
}

/// An experiment file merged with its base chain, before deserialization (for sweeps).
pub fn load_table(path: &Path) -> Result<toml::Table, ConfigErrors> {
    load_merged(path, &mut Vec::new(), &mut Origins::new()).map_err(|e| ConfigErrors(vec![e]))
}

/// Deserialize and validate a merged experiment table; errors name `file`.
pub fn from_table(file: &str, table: toml::Table) -> Result<Experiment, ConfigErrors> {
    from_table_with(file, table, &Origins::new())
}

/// [`from_table`] naming, for each error, the file (or `--set`) its key came from.
fn from_table_with(
    file: &str,
    mut table: toml::Table,
    origins: &Origins,
) -> Result<Experiment, ConfigErrors> {
    fill_dependent_defaults(&mut table);
    let exp = deserialize_all(file, table, origins)?;
    let problems = exp.validate();
    if problems.is_empty() {
        Ok(exp)
    } else {
        Err(ConfigErrors(
            problems
                .into_iter()
                .map(|(path, message)| ConfigError {
                    file: origin(origins, &path, file),
                    path,
                    message,
                })
                .collect(),
        ))
    }
}

/// Parse an experiment from a TOML string (no base, no overrides); used for `resolved.toml`.
pub fn from_str(name: &str, text: &str) -> Result<Experiment, ConfigErrors> {
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: name.into(),
            path: String::new(),
            message: syntax_error(text, &e),
        }])
    })?;
    from_table(name, table)
}

/// Fill the defaults that depend on other keys into a merged experiment table, before it is
/// deserialized (so that `resolved.toml` records them): `data.synthetic.length` =
/// `model.ctx + 1`; `metrics.heads.n` from [`HeadMetricsConfig::fitting`] (or
/// `metrics.heads.enabled = false` where no probe fits); a SAS / SAS-P block without `beta_ff`
/// gets `{ init = sas_beta_ff_init(model.n_layers), trainable = true }`; a `scalable_softmax`
/// normaliser without `init` gets [`ssmax_init`]`(model.ctx)`. Values of the wrong
/// type are left alone for deserialization to report.
fn fill_dependent_defaults(table: &mut toml::Table) {
    // data.synthetic.length: model.ctx + 1 (one training window per generated record)
    let ctx = match table.get("model").and_then(|m| m.get("ctx")) {
        Some(toml::Value::Integer(c)) if *c > 0 => *c,
        _ => ModelConfig::default().ctx as i64,
    };
    if let Some(toml::Value::Table(data)) = table.get_mut("data")
        && let Some(toml::Value::Table(syn)) = data.get_mut("synthetic")
        && !syn.contains_key("length")
    {
        syn.insert("length".into(), toml::Value::Integer(ctx + 1));
    }
    // metrics.heads.n: the longest repeat probe [first, R, R] that fits the probe length
    let probe_len = match table.get("metrics").and_then(|m| m.get("probe_len")) {
        Some(toml::Value::Integer(p)) if *p > 0 => *p,
        _ => MetricsConfig::default().probe_len as i64,
    };
    // a synthetic task's probe draws its n distinct tokens (and a first one) from few tokens
    let task_vocab = table
        .get("data")
        .and_then(|d| d.get("synthetic"))
        .map(|syn| match syn.get("chain").and_then(toml::Value::as_str) {
            Some("shakespeare_chars") => SHAKESPEARE_CHARS as i64,
            _ => match syn.get("vocab") {
                Some(toml::Value::Integer(v)) => *v,
                _ => RepeatTask::default().vocab as i64,
            },
        });
    let fit = HeadMetricsConfig::fitting(
        ctx as usize,
        probe_len as usize,
        task_vocab.map(|v| v.max(0) as usize),
    );
    let metrics = table
        .entry("metrics")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(metrics) = metrics
        && let toml::Value::Table(heads) = metrics
            .entry("heads")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        && !heads.contains_key("n")
    {
        if fit.enabled {
            heads.insert("n".into(), toml::Value::Integer(fit.n as i64));
        } else if !heads.contains_key("enabled") {
            // no repeat probe fits (model.ctx < 5 or a task of 2 tokens): off, and said so in
            // resolved.toml
            heads.insert("enabled".into(), toml::Value::Boolean(false));
        }
    }
    let Some(toml::Value::Table(model)) = table.get_mut("model") else {
        return;
    };
    // model.attention.normaliser.init of scalable_softmax: 1 / ln(model.ctx)
    if let Some(toml::Value::Table(att)) = model.get_mut("attention")
        && let Some(toml::Value::Table(norm)) = att.get_mut("normaliser")
        && norm.get("kind").and_then(toml::Value::as_str) == Some("scalable_softmax")
        && !norm.contains_key("init")
    {
        norm.insert(
            "init".into(),
            toml::Value::Float(ssmax_init(ctx.max(1) as usize)),
        );
    }
    let n_layers = match model.get("n_layers") {
        Some(toml::Value::Integer(n)) if *n > 0 => *n as usize,
        _ => ModelConfig::default().n_layers,
    };
    let Some(toml::Value::Table(block)) = model.get_mut("block") else {
        return;
    };
    let is_sas = matches!(
        block.get("kind").and_then(toml::Value::as_str),
        Some("sas" | "sas_p")
    );
    if is_sas && !block.contains_key("beta_ff") {
        let mut gain = toml::Table::new();
        gain.insert(
            "init".into(),
            toml::Value::Float(sas_beta_ff_init(n_layers)),
        );
        gain.insert("trainable".into(), toml::Value::Boolean(true));
        block.insert("beta_ff".into(), toml::Value::Table(gain));
    }
}

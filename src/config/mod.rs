//! Experiment files: a strict, typed TOML schema.
//!
//! An experiment file is plain data. It may name a `base = "other.toml"` (resolved relative to
//! the file) that it deep-merges over; `--set a.b.c=value` overrides are applied last. Tables
//! that carry a `kind` key (the tagged enums below) are replaced wholesale when an override
//! changes the `kind`, so that switching a variant never inherits the old variant's fields.
//!
//! Parsing never stops at the first problem: [`load`] collects every unknown key, wrong type,
//! out-of-range value and impossible combination, each with the file, the TOML path, what was
//! found and what would be valid ([`ConfigErrors`]). Nothing falls back to a default silently:
//! defaults exist only for keys that are absent, and `resolved.toml` in every run directory
//! records the full resolved configuration.

mod attention;
mod load;
mod model;
mod schema;
#[cfg(test)]
mod tests;
mod validate;
mod validate_data;
mod validate_remedies;
mod validate_skipless;

pub use load::*;
pub use schema::*;

/// A name that is one ordinary path component: non-empty, letters, digits, '-', '_' and '.',
/// and not made of dots only (so not `.` or `..`). Run and sweep directories are named so.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !name.chars().all(|c| c == '.')
}

/// The differences between two configurations as TOML tables, one line per key by its dotted
/// path: `model.attention.normaliser.kind: "softmax" → "relu"`, `… (added) = v`, `… (removed)`.
/// Tables are compared key by key, so a value that appears elsewhere in the file (another
/// table's `kind = "relu"`) does not hide a change.
pub fn diff(old: &toml::Table, new: &toml::Table) -> Vec<String> {
    fn walk(prefix: &str, old: &toml::Table, new: &toml::Table, out: &mut Vec<String>) {
        let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        for k in keys {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match (old.get(k), new.get(k)) {
                (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
                    walk(&path, a, b, out)
                }
                (Some(a), Some(b)) if a != b => out.push(format!("{path}: {a} → {b}")),
                (Some(_), Some(_)) => {}
                (None, Some(b)) => out.push(format!("{path} (added) = {b}")),
                (Some(a), None) => out.push(format!("{path} (removed; was {a})")),
                (None, None) => {}
            }
        }
    }
    let mut out = Vec::new();
    walk("", old, new, &mut out);
    out
}

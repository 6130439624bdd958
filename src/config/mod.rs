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

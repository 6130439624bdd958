//! The files of a run directory (`runs/NAME/`), each named in one place: every module that
//! reads or writes one asks [`RunDir`] for its path.
//!
//! ```text
//! runs/NAME/
//!   resolved.toml          the experiment as resolved (every default filled in)
//!   provenance.json        revision, build, device, start and resumes
//!   tokenizer.json         the tokenizer the run trained with
//!   data.json              the corpus fingerprint a resume checks
//!   metrics.jsonl          one tags::Record per line
//!   summary.json           first and last loss, steps, tokens/s
//!   events.out.tfevents.*  TensorBoard
//!   checkpoints/step_NNNNNNNN/
//!   analysis/step_NNNNNNNN/  what the analyses of that checkpoint write
//!   plots/                 `sinklab report RUN`
//! ```

use std::path::{Path, PathBuf};

/// A run directory; the methods name its files.
#[derive(Debug, Clone, Copy)]
pub struct RunDir<'a>(pub &'a Path);

pub const RESOLVED: &str = "resolved.toml";
pub const PROVENANCE: &str = "provenance.json";
pub const TOKENIZER: &str = "tokenizer.json";
pub const DATA: &str = "data.json";
pub const METRICS: &str = "metrics.jsonl";
pub const SUMMARY: &str = "summary.json";
pub const CHECKPOINTS: &str = "checkpoints";

/// The files and directories a start writes into a run directory before its first checkpoint
/// (besides `checkpoints/` and TensorBoard's `events.out.tfevents.*`).
pub const START_FILES: [&str; 6] = [RESOLVED, PROVENANCE, TOKENIZER, DATA, METRICS, SUMMARY];

/// `step_NNNNNNNN`: how a checkpoint's directory, and its analyses' directory, are named.
pub fn step_name(step: u64) -> String {
    format!("step_{step:08}")
}

/// The step of a `step_NNNNNNNN` name.
pub fn parse_step_name(name: &str) -> Option<u64> {
    name.strip_prefix("step_")?.parse().ok()
}

impl<'a> RunDir<'a> {
    pub fn path(self) -> &'a Path {
        self.0
    }

    pub fn resolved(self) -> PathBuf {
        self.0.join(RESOLVED)
    }

    pub fn provenance(self) -> PathBuf {
        self.0.join(PROVENANCE)
    }

    pub fn tokenizer(self) -> PathBuf {
        self.0.join(TOKENIZER)
    }

    pub fn data(self) -> PathBuf {
        self.0.join(DATA)
    }

    pub fn metrics(self) -> PathBuf {
        self.0.join(METRICS)
    }

    pub fn summary(self) -> PathBuf {
        self.0.join(SUMMARY)
    }

    pub fn checkpoints(self) -> PathBuf {
        self.0.join(CHECKPOINTS)
    }

    /// The checkpoint of `step`.
    pub fn checkpoint(self, step: u64) -> PathBuf {
        self.checkpoints().join(step_name(step))
    }

    /// Where the analyses of the checkpoint of `step` write by default.
    pub fn analysis(self, step: u64) -> PathBuf {
        self.0.join("analysis").join(step_name(step))
    }

    /// Where `sinklab report RUN` writes by default.
    pub fn plots(self) -> PathBuf {
        self.0.join("plots")
    }
}

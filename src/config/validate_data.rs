//! Checks of a corpus given as files (`[data.sources.NAME]`) and of the tokenizer sample.

use super::schema::*;

impl Experiment {
    /// Checks of `data.sources` and the tokenizer sample (`data.tokenizer.sample_*`).
    pub(super) fn validate_data_sources(&self, bad: &mut dyn FnMut(&str, String)) {
        let d = &self.data;
        if let TokenizerConfig::Bpe {
            sample_bytes,
            sample_documents,
            ..
        } = d.tokenizer
        {
            for (key, v) in [
                ("sample_bytes", sample_bytes),
                ("sample_documents", sample_documents),
            ] {
                if v == Some(0) {
                    bad(
                        &format!("data.tokenizer.{key}"),
                        "found 0, expected a positive number (or leave it out to train on the \
                         whole training split)"
                            .into(),
                    );
                }
            }
            if sample_bytes.is_some() && sample_documents.is_some() {
                bad(
                    "data.tokenizer.sample_documents",
                    "given with sample_bytes; the sample is counted in one of them".into(),
                );
            }
        }
        if d.sources.is_empty() {
            return;
        }
        if d.corpus != DataConfig::default().corpus {
            bad(
                "data.sources",
                format!(
                    "data.corpus = {:?} and data.sources both name a corpus; keep one",
                    d.corpus
                ),
            );
        }
        if d.synthetic.is_some() {
            bad(
                "data.sources",
                "a generated task (data.synthetic) brings its own tokens; leave data.sources out"
                    .into(),
            );
        }
        for (name, s) in &d.sources {
            let p = |k: &str| format!("data.sources.{name}{k}");
            if !crate::config::is_plain_name(name) {
                bad(
                    &p(""),
                    format!(
                        "domain name `{name}`: expected letters, digits, '-', '_' or '.' (it names \
                         the domain's shard directory)"
                    ),
                );
            }
            if s.files.is_empty() {
                bad(
                    &p(".files"),
                    "empty; expected at least one file, directory or glob pattern".into(),
                );
            }
            if s.files.iter().any(|f| f.trim().is_empty()) {
                bad(
                    &p(".files"),
                    "an empty path; expected a file, directory or glob".into(),
                );
            }
            if s.text_field.is_empty() {
                bad(
                    &p(".text_field"),
                    "empty; expected the JSONL field or Parquet column holding the text (\"text\")"
                        .into(),
                );
            }
        }
    }
}

//! Checks of a corpus given as files (`[data.sources.NAME]`), of the tokenizer sample and of
//! a generated task (`data.synthetic`).

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

    /// Checks of a generated task (`data.synthetic`) and its combinations with the rest.
    pub(super) fn validate_synthetic(&self, bad: &mut dyn FnMut(&str, String)) {
        let (d, m) = (&self.data, &self.model);
        if let Some(task) = &d.synthetic {
            let dflt = DataConfig::default();
            if d.corpus != dflt.corpus || d.tokenizer != dflt.tokenizer {
                bad(
                    "data.synthetic",
                    "a generated task brings its own tokens: leave data.corpus and data.tokenizer unset".into(),
                );
            }
            let p = |k: &str| format!("data.synthetic.{k}");
            if task.sequences() == 0 {
                bad(&p("sequences"), "found 0, expected at least 1".into());
            }
            if let Some(len) = task.length()
                && len < m.ctx + 1
            {
                bad(
                    &p("length"),
                    format!(
                        "found {len}, expected at least model.ctx + 1 = {} (one training window)",
                        m.ctx + 1
                    ),
                );
            }
        }
        if let Some(SyntheticConfig::Repeat(r)) = &d.synthetic {
            let p = |k: &str| format!("data.synthetic.{k}");
            if r.vocab < 2 || r.vocab > 65_000 {
                bad(
                    &p("vocab"),
                    format!("found {}, expected 2..=65000", r.vocab),
                );
            }
            if r.min_segment == 0 {
                bad(&p("min_segment"), "found 0, expected at least 1".into());
            }
            if r.max_segment < r.min_segment {
                bad(
                    &p("max_segment"),
                    format!(
                        "found {}, expected at least min_segment = {}",
                        r.max_segment, r.min_segment
                    ),
                );
            }
            for (key, v) in [
                ("copy_probability", r.copy_probability),
                ("skip_bigram", r.skip_bigram),
            ] {
                if !(0.0..=1.0).contains(&v) {
                    bad(&p(key), format!("found {v}, expected 0 ≤ p ≤ 1"));
                }
            }
        }
        if let Some(SyntheticConfig::BigramBackcopy(bb)) = &d.synthetic {
            let p = |k: &str| format!("data.synthetic.{k}");
            if bb.vocab < 2 || bb.vocab > 65_000 {
                bad(
                    &p("vocab"),
                    format!("found {}, expected 2..=65000", bb.vocab),
                );
            }
            if bb.triggers == 0 || bb.triggers >= bb.chain_vocab() {
                bad(
                    &p("triggers"),
                    format!(
                        "found {}, expected 1..{} (fewer than the chain's {} tokens)",
                        bb.triggers,
                        bb.chain_vocab(),
                        bb.chain_vocab()
                    ),
                );
            }
            if bb.chain == BbChain::ShakespeareChars {
                let dflt = BigramBackcopy::default();
                for (key, set) in [
                    ("vocab", bb.vocab != dflt.vocab),
                    ("zipf", bb.zipf != dflt.zipf),
                    ("concentration", bb.concentration != dflt.concentration),
                ] {
                    if set {
                        bad(
                            &p(key),
                            format!(
                                "not used with chain = \"shakespeare_chars\" (its {SHAKESPEARE_CHARS} \
                                 characters and their bigram come from the embedded text): \
                                 remove it, or use chain = \"zipf\""
                            ),
                        );
                    }
                }
            }
            if bb.offsets.is_empty() || bb.offsets.contains(&0) {
                bad(
                    &p("offsets"),
                    format!(
                        "found {:?}, expected a non-empty list of offsets ≥ 1",
                        bb.offsets
                    ),
                );
            }
            if !(bb.zipf >= 0.0 && bb.zipf.is_finite()) {
                bad(
                    &p("zipf"),
                    format!("found {}, expected a finite number ≥ 0", bb.zipf),
                );
            }
            if !(bb.concentration > 0.0 && bb.concentration.is_finite()) {
                bad(
                    &p("concentration"),
                    format!("found {}, expected a finite number > 0", bb.concentration),
                );
            }
        }
    }
}

//! GPT-2 small against the field's published numbers (docs/reference.md §11): its induction
//! heads, its previous-token head and TransformerLens's 8-prompt IOI logit difference, through
//! `sinklab import`, `sinklab heads` and `sinklab patch`.
//!
//! The weights are not in the repository and not reachable from CI, so every test here is
//! `#[ignore]`d: cargo lists them as ignored (skipped), never as passed. Run them with a Hugging
//! Face `gpt2` directory (config.json, model.safetensors, tokenizer.json, e.g. a snapshot of
//! openai-community/gpt2):
//!
//! ```sh
//! SINKLAB_GPT2=/path/to/gpt2 cargo test --release -- --ignored gpt2
//! ```
//!
//! Run with `--ignored` but without `SINKLAB_GPT2` (or with an incomplete directory, or another
//! GPT-2 size), they fail, saying what is missing.

use crate::common::{self, read_json};
use sinklab::analysis::heads::HeadsReport;
use sinklab::analysis::patch::PatchReport;
use std::path::{Path, PathBuf};

/// The environment variable naming the Hugging Face `gpt2` directory.
const GPT2_VAR: &str = "SINKLAB_GPT2";

/// What `sinklab import` reads from a Hugging Face directory.
const HF_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// Context of the imported run: the repeat probe is 2·50 + 1 = 101 tokens, the IOI prompts 15.
const CTX: &str = "128";

/// TransformerLens's 8 IOI prompts ("Exploratory Analysis Demo"), with its BOS written out.
const IOI_PROMPTS: &str = "docs/prompts/ioi_gpt2.jsonl";

/// The Hugging Face `gpt2` directory of `SINKLAB_GPT2`; panics (the test fails, it does not
/// pass) when the variable is unset, a file is missing or the model is not GPT-2 small.
fn gpt2_dir() -> PathBuf {
    let Some(dir) = std::env::var_os(GPT2_VAR) else {
        panic!(
            "{GPT2_VAR} is not set: these tests need GPT-2 small's weights. Point {GPT2_VAR} at a \
             Hugging Face `gpt2` directory ({}) and run \
             `{GPT2_VAR}=/path/to/gpt2 cargo test --release -- --ignored gpt2`",
            HF_FILES.join(", ")
        )
    };
    let dir = PathBuf::from(dir);
    let missing: Vec<&str> = HF_FILES
        .iter()
        .copied()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "{GPT2_VAR}={}: missing {} (a Hugging Face `gpt2` directory has {})",
        dir.display(),
        missing.join(", "),
        HF_FILES.join(", ")
    );
    // The published head labels are GPT-2 small's (12 layers × 12 heads; medium is 24 × 16).
    let cfg = read_json(&dir.join("config.json"));
    let shape = (cfg["n_layer"].as_u64(), cfg["n_head"].as_u64());
    assert_eq!(
        shape,
        (Some(12), Some(12)),
        "{GPT2_VAR}={}: config.json gives (n_layer, n_head) = {shape:?}; GPT-2 small has (12, 12)",
        dir.display()
    );
    dir
}

/// `sinklab import` of the GPT-2 directory into `dir/runs/gpt2` (ctx [`CTX`]).
fn import_gpt2(dir: &Path) -> PathBuf {
    let src = gpt2_dir();
    let run = dir.join("runs/gpt2");
    let (code, text) = common::sinklab_output(
        None,
        &[
            "import",
            src.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "--ctx",
            CTX,
        ],
    );
    assert_eq!(code, 0, "sinklab import {}: {text}", src.display());
    run
}

/// Turn on `data.bos` in an imported run's resolved.toml. GPT-2's tokenizer adds no BOS, so
/// the import records `bos = false`; TransformerLens prepends `<|endoftext|>` (`to_tokens`'s
/// default `prepend_bos = True`) and ARENA's induction probe is [BOS, R, R], so the head probes
/// here start with BOS as theirs do.
fn prepend_bos(run: &Path) {
    let path = run.join("resolved.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    // The [data] table: from its header to the next table header.
    let start = text.find("\n[data]\n").expect("a [data] table") + 1;
    let end = start + 1 + text[start + 1..].find("\n[").expect("a table after [data]");
    let data = &text[start..end];
    assert_eq!(
        data.matches("\nbos = false").count(),
        1,
        "{}: expected `bos = false` in [data]:\n{data}",
        path.display()
    );
    let data = data.replacen("\nbos = false", "\nbos = true", 1);
    std::fs::write(&path, format!("{}{data}{}", &text[..start], &text[end..])).unwrap();
}

/// `sinklab heads RUN` with `extra` options; the report read back as its typed struct.
fn heads(run: &Path, out: &Path, extra: &[&str]) -> HeadsReport {
    let mut args = vec![
        "heads",
        run.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, text) = common::sinklab_output(None, &args);
    assert_eq!(code, 0, "sinklab {}: {text}", args.join(" "));
    serde_json::from_str(&std::fs::read_to_string(out.join("heads_repeat.json")).unwrap()).unwrap()
}

/// Every head `L.H` with its score, highest first.
fn ranked(rows: &[Vec<f64>]) -> Vec<(String, f64)> {
    let mut all: Vec<(String, f64)> = rows
        .iter()
        .enumerate()
        .flat_map(|(l, hs)| {
            hs.iter()
                .enumerate()
                .map(move |(h, &s)| (format!("{l}.{h}"), s))
        })
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    all
}

fn show(r: &[(String, f64)]) -> String {
    r.iter()
        .map(|(h, s)| format!("{h} {s:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// GPT-2 small's induction heads and its previous-token head.
///
/// - Induction heads 5.1, 5.5, 6.9, 7.2, 7.10: ARENA (chapter 1.2, "Intro to Mechanistic
///   Interpretability", induction heads in GPT-2 small) with Neel Nanda's induction mosaic:
///   the mean attention on the stripe `q → q − (n − 1)` of [BOS, R, R], R = 50 random tokens.
///   That is sinklab's primary induction score on its repeat probe (`--measure primary`, n = 50;
///   docs/reference.md §11), not TransformerLens's `detect_head`. A public reproduction with
///   the same measure (GitHub designer-coderajay/induction-head-detector) finds exactly these
///   five as GPT-2 small's highest (5.5 0.93, 6.9 0.91, 7.10 0.91, 5.1 0.91, 7.2 0.83), so
///   they must be sinklab's top five.
/// - Previous-token head 4.11: TransformerLens's Head_Detector_Demo ("L4H11 … is pretty much
///   perfect", "L4H11 emerges again as the dominant head") with `detect_head`'s default
///   measure, `mul` without exclusions: sinklab's `--measure tl-mul --exclude none`; on the
///   repeat probe it must be the top previous-token head.
#[test]
#[ignore = "needs GPT-2 small: set SINKLAB_GPT2=<HF dir> and run cargo test -- --ignored gpt2"]
fn gpt2_small_published_induction_and_previous_token_heads() {
    let dir = tempfile::tempdir().unwrap();
    let run = import_gpt2(dir.path());
    prepend_bos(&run);

    let r = heads(&run, &dir.path().join("primary"), &["--n", "50"]);
    assert_eq!((r.n_layers, r.n_heads), (12, 12));
    assert_eq!(r.probe.first, "BOS", "the probe is [BOS, R, R] as ARENA's");
    let induction = ranked(&r.score(sinklab::heads::Score::Induction));
    let mut top5: Vec<&str> = induction[..5].iter().map(|(h, _)| h.as_str()).collect();
    top5.sort();
    assert_eq!(
        top5,
        ["5.1", "5.5", "6.9", "7.10", "7.2"],
        "GPT-2 small's top five induction heads (ARENA: 5.1, 5.5, 6.9, 7.2, 7.10); sinklab's \
         top ten: {}",
        show(&induction[..10])
    );

    let r = heads(
        &run,
        &dir.path().join("tl_mul"),
        &["--measure", "tl-mul", "--exclude", "none"],
    );
    let previous = ranked(&r.score(sinklab::heads::Score::Previous));
    assert_eq!(
        previous[0].0,
        "4.11",
        "GPT-2 small's top previous-token head (TransformerLens's head detector: 4.11); \
         sinklab's top five: {}",
        show(&previous[..5])
    );
}

/// TransformerLens's 8 IOI prompts ("Exploratory Analysis Demo"; the same prompts and pairs
/// in its "Activation Patching in TL Demo"): clean logit difference 3.5519 and corrupted
/// −3.5519 (printed `:.4f` by the activation-patching demo; per prompt 3.337, 3.202, 2.709,
/// 3.797, 1.720, 5.281, 2.601, 5.767, mean 3.552, in the exploratory demo). Each corrupted
/// prompt is its pair's other prompt with the same answers, so corrupted = −clean exactly.
///
/// Tolerance ±0.01, two-sided: the published value is rounded to 1e-4; TransformerLens folds
/// the layer norms and centres the unembedding (exact in real arithmetic: the logit
/// difference is unchanged) and sums in another order, which moves an fp32 logit difference
/// of GPT-2 small by an estimated 1e-4 (not measured: no GPT-2 here). ±0.01 is 0.3 % of the
/// value; a wrong tokenization, a missing BOS or a wrong position embedding should move it by
/// far more (also not measured).
#[test]
#[ignore = "needs GPT-2 small: set SINKLAB_GPT2=<HF dir> and run cargo test -- --ignored gpt2"]
fn gpt2_small_ioi_clean_logit_difference_is_transformerlens() {
    let dir = tempfile::tempdir().unwrap();
    let run = import_gpt2(dir.path());
    let out = dir.path().join("patch");
    let args = [
        "patch",
        run.to_str().unwrap(),
        "--prompts",
        IOI_PROMPTS,
        "--site",
        "z",
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, text) = common::sinklab_output(None, &args);
    assert_eq!(code, 0, "sinklab {}: {text}", args.join(" "));
    let r: PatchReport =
        serde_json::from_str(&std::fs::read_to_string(out.join("patch.json")).unwrap()).unwrap();
    // TransformerLens: 8 prompts of 15 tokens with its BOS (`[8, 15, 768]` residual stream).
    assert_eq!((r.count, r.len), (8, 15), "prompts × tokens");

    // GPT-2's ids of the answers, as TransformerLens prints them (`answer_token_indices`).
    let tok = tokenizers::Tokenizer::from_file(gpt2_dir().join("tokenizer.json")).unwrap();
    let id = |s: &str| tok.encode(s, false).unwrap().get_ids().to_vec();
    let names = [
        (" Mary", 5335),
        (" John", 1757),
        (" Tom", 4186),
        (" James", 3700),
        (" Dan", 6035),
        (" Sid", 15686),
        (" Martin", 5780),
        (" Amy", 14235),
    ];
    let ids: Vec<(&str, Vec<u32>, u32)> = names.iter().map(|&(n, t)| (n, id(n), t)).collect();

    let published = 3.5519;
    let tol = 0.01;
    assert!(
        (r.clean - published).abs() <= tol && (r.corrupt + published).abs() <= tol,
        "IOI logit difference: clean {:.4}, corrupted {:.4}; TransformerLens 3.5519 and -3.5519 \
         (±{tol}). Answer ids (sinklab's tokenizer, TransformerLens's): {ids:?}",
        r.clean,
        r.corrupt
    );
    for (name, got, want) in &ids {
        assert_eq!(got, &vec![*want], "{name:?}");
    }
}

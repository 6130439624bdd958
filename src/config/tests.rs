//! Tests of loading, merging and validation.

use super::*;
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn defaults_validate_and_roundtrip() {
    let exp = from_str("x.toml", "").unwrap();
    assert_eq!(exp, Experiment::default());
    let again = from_str("resolved.toml", &exp.to_toml()).unwrap();
    assert_eq!(exp, again);
}

#[test]
fn sas_beta_ff_defaults_to_the_depth_rule_and_stays_overridable() {
    let sas = |extra: &str| {
        let text = format!(
            "[model]\nn_layers = 2\nblock = {{ kind = \"sas\"{extra} }}\n[model.attention]\n\
             query_init = \"zero\"\nshaping = {{ kind = \"shaped\" }}\n\
             value_output = {{ kind = \"identity\" }}\n"
        );
        from_str("sas.toml", &text).unwrap_or_else(|e| panic!("{e}"))
    };
    // 0.1·√(18/2) = 0.3, trainable; written out in resolved.toml.
    let exp = sas("");
    let BlockConfig::Sas { beta_ff } = exp.model.block else {
        panic!("sas block")
    };
    assert!((beta_ff.init - 0.3).abs() < 1e-12 && beta_ff.trainable);
    assert!(exp.to_toml().contains("beta_ff"), "{}", exp.to_toml());
    assert!((sas_beta_ff_init(18) - 0.1).abs() < 1e-12);
    // An explicit value wins.
    let exp = sas(", beta_ff = { init = 0.05 }");
    let BlockConfig::Sas { beta_ff } = exp.model.block else {
        panic!("sas block")
    };
    assert_eq!((beta_ff.init, beta_ff.trainable), (0.05, false));
}

#[test]
fn collects_every_error_with_paths() {
    let text = r#"
[model]
d_modle = 64
n_heads = "four"
positions = { kind = "rope", base = 10000.0, theta = 0.5 }
[optim]
lr = -1.0
schedule = { kind = "cosine", warmup = 10 }
[train]
stepz = 3
"#;
    let err = from_str("bad.toml", text).unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"model.d_modle"), "{err}");
    assert!(paths.contains(&"model.n_heads"), "{err}");
    assert!(paths.contains(&"model.positions.theta"), "{err}");
    assert!(paths.contains(&"optim.schedule.kind"), "{err}");
    assert!(paths.contains(&"train.stepz"), "{err}");
    assert_eq!(err.0.len(), 5, "{err}");
    let text = err.to_string();
    assert!(text.contains("bad.toml"), "{text}");
    assert!(text.contains("d_model"), "valid keys are listed: {text}");
    assert!(
        text.contains("warmup_cosine"),
        "valid choices are listed: {text}"
    );
}

#[test]
fn range_and_combination_errors() {
    let text = r#"
[model]
d_model = 100
n_heads = 3
ctx = 32
[data]
random_tokens = [1, 40]
bos = true
[optim]
lr = 0.0
betas = [0.9, 1.0]
[train]
batch_tokens = 1000
micro_batch = 4
"#;
    let err = from_str("r.toml", text).unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "model.n_heads",
        "data.random_tokens.0",
        "data.random_tokens.1",
        "optim.lr",
        "optim.betas.1",
        "train.batch_tokens",
        "metrics.probe_len",
    ] {
        assert!(paths.contains(&want), "missing {want}: {err}");
    }
}

#[test]
fn impossible_attention_combinations_are_rejected_with_reasons() {
    let text = r#"
[model]
positions = { kind = "alibi" }
[model.attention]
normaliser = { kind = "linear", feature_map = "mlp", normaliser = "none" }
slot = { kind = "sink_logit" }
kernel = "fused"
"#;
    let err = from_str("combo.toml", text).unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
    for want in ["model.positions", "model.attention.slot"] {
        assert!(paths.contains(&want), "missing {want}: {err}");
    }
    let msg = err.to_string();
    assert!(msg.contains("no logits"), "{msg}");
    assert!(msg.contains("normalised attention"), "{msg}");
    let text = r#"
[model]
positions = { kind = "relative", buckets = 5, max_distance = 1 }
[model.attention]
normaliser = { kind = "sigmoid", bias = "ln(T)" }
slot = { kind = "k_bias", value = { kind = "zero" }, learnable_dims = 4, trainable = false }
mask = { kind = "prefix", p = 0 }
row_scale = 0.0
"#;
    let err = from_str("combo2.toml", text).unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "model.positions.buckets",
        "model.attention.normaliser.bias",
        "model.attention.slot.learnable_dims",
        "model.attention.mask.p",
        "model.attention.row_scale",
    ] {
        assert!(paths.contains(&want), "missing {want}: {err}");
    }
    assert!(err.to_string().contains("both fixed"), "{err}");
    // the sigmoid bias accepts a number or exactly "-ln(T)"
    let ok = from_str(
        "ok.toml",
        "[model.attention]\nnormaliser = { kind = \"sigmoid\", bias = \"-ln(T)\" }\n",
    )
    .unwrap();
    let NormaliserConfig::Sigmoid { bias } = &ok.model.attention.normaliser else {
        panic!()
    };
    assert!((bias.resolve(128).unwrap() + 128f64.ln()).abs() < 1e-12);
    let err = from_str(
        "r.toml",
        "[model]\npositions = { kind = \"rope\", base = 10000.0, fraction = 0.01 }\n",
    )
    .unwrap_err();
    assert_eq!(err.0[0].path, "model.positions.fraction", "{err}");
}

#[test]
fn base_inheritance_deep_merge_and_kind_switch() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "base.toml",
        "[model]\nd_model = 64\nn_heads = 2\npositions = { kind = \"rope\", base = 500.0 }\n[optim]\nlr = 1e-3\n",
    );
    let child = write(
        dir.path(),
        "child.toml",
        "base = \"base.toml\"\n[model]\nn_heads = 4\npositions = { kind = \"nope\" }\n",
    );
    let exp = load(&child, &["optim.lr=2e-3".into(), "run.name=abc".into()]).unwrap();
    assert_eq!(exp.model.d_model, 64);
    assert_eq!(exp.model.n_heads, 4);
    assert_eq!(exp.model.positions, PositionsConfig::Nope {});
    assert!((exp.optim.lr - 2e-3).abs() < 1e-15);
    assert_eq!(exp.run.name, "abc");
}

#[test]
fn override_errors_and_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.toml", "base = \"b.toml\"\n");
    write(dir.path(), "b.toml", "base = \"a.toml\"\n");
    let err = load(&a, &[]).unwrap_err();
    assert!(err.to_string().contains("cycle"), "{err}");
    let ok = write(dir.path(), "ok.toml", "");
    let err = load(&ok, &["optim.lr".into()]).unwrap_err();
    assert!(err.to_string().contains("KEY=VALUE"), "{err}");
    let err = load(&ok, &["optim.lrr=1".into()]).unwrap_err();
    assert_eq!(err.0[0].path, "optim.lrr");
}

#[test]
fn the_sum_kernel_normaliser_needs_elu1_and_the_eps_grid_needs_the_headline_eps() {
    let sum = |fm: &str| {
        format!(
            "[model.attention]\nnormaliser = {{ kind = \"linear\", feature_map = \"{fm}\", \
             normaliser = \"sum\" }}\n"
        )
    };
    assert!(from_str("elu1.toml", &sum("elu1")).is_ok());
    for fm in ["identity", "mlp"] {
        let err = from_str("sum.toml", &sum(fm)).unwrap_err();
        assert_eq!(err.0.len(), 1, "{err}");
        assert_eq!(
            err.0[0].path, "model.attention.normaliser.normaliser",
            "{err}"
        );
        assert!(err.to_string().contains("elu1"), "{err}");
    }
    // the default grid holds the headline ε; a grid without it is refused, naming the key
    let d = Experiment::default();
    assert!(d.metrics.eps.contains(&HEADLINE_EPS), "{:?}", d.metrics.eps);
    let err = from_str("eps.toml", "[metrics]\neps = [0.2, 0.5]\n").unwrap_err();
    assert_eq!(err.0.len(), 1, "{err}");
    assert_eq!(err.0[0].path, "metrics.eps", "{err}");
    assert!(err.to_string().contains("lacks 0.3"), "{err}");
    assert!(from_str("eps.toml", "[metrics]\neps = [0.3]\n").is_ok());
}

#[test]
fn diff_names_changed_keys_by_path_even_when_the_new_line_exists_elsewhere() {
    let old: toml::Table = toml::from_str(
        "[model.ffn]\nkind = \"relu\"\n[model.attention.normaliser]\nkind = \"softmax\"\n\
         [optim]\nlr = 0.003\nbetas = [0.9, 0.99]\n",
    )
    .unwrap();
    let new: toml::Table = toml::from_str(
        "[model.ffn]\nkind = \"relu\"\n[model.attention.normaliser]\nkind = \"relu\"\n\
         [optim]\nlr = 0.003\nbetas = [0.9, 0.95]\nwarm = 1\n",
    )
    .unwrap();
    let d = super::diff(&old, &new);
    assert_eq!(
        d,
        vec![
            "model.attention.normaliser.kind: \"softmax\" → \"relu\"".to_string(),
            "optim.betas: [0.9, 0.99] → [0.9, 0.95]".to_string(),
            "optim.warm (added) = 1".to_string(),
        ]
    );
    assert!(super::diff(&old, &old).is_empty());
    assert_eq!(super::diff(&new, &old)[2], "optim.warm (removed; was 1)");
}

#[test]
fn a_non_table_where_a_kind_table_belongs_names_its_key_and_the_table_form() {
    let err = |text: &str| from_str("t.toml", text).unwrap_err();
    // a string inside a tagged table: the key inside it, not the outer table's kinds
    let e = err("[model.attention]\nslot = { kind = \"k_bias\", value = \"zero\" }\n");
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!(e.0[0].path, "model.attention.slot.value", "{e}");
    assert!(
        e.0[0].message.contains(
            "expected a table like value = { kind = \"zero\" }; valid kinds: zero, e1, ones"
        ),
        "{e}"
    );
    assert!(!e.0[0].message.contains("sink_logit"), "{e}");
    // a string at the top of a tagged key, a number, a string that is no kind
    let e = err("[model.attention]\nslot = \"none\"\n[model]\nnorm = 5\n");
    let by_path = |p: &str| {
        e.0.iter()
            .find(|x| x.path == p)
            .unwrap_or_else(|| panic!("{p}: {e}"))
            .message
            .clone()
    };
    assert!(
        by_path("model.attention.slot").contains(
            "string \"none\", expected a table like slot = { kind = \"none\" }; valid kinds: \
             none, sink_logit, kv_bias, k_bias, v_bias, memory_kv"
        ),
        "{e}"
    );
    assert!(
        by_path("model.norm").contains(
            "integer `5`, expected a table like norm = { kind = \"rms_norm\" }; valid kinds: \
             rms_norm, layer_norm, none"
        ),
        "{e}"
    );
    // other mistakes inside tagged tables are located too: an unknown choice, a missing key,
    // an unknown key two tables down
    let cases = [
        (
            "[model.attention]\nnormaliser = { kind = \"linear\", feature_map = \"x\", normaliser = \"none\" }\n",
            "model.attention.normaliser.feature_map",
            "unknown choice `x`",
        ),
        (
            "[model.attention]\nslot = { kind = \"k_bias\", value = { kind = \"e1\" } }\n",
            "model.attention.slot.value.m",
            "missing required key",
        ),
        (
            "[model.attention]\nslot = { kind = \"k_bias\", value = { kind = \"zero\", m = 1.0 } }\n",
            "model.attention.slot.value.m",
            "unknown key; this table takes no key but `kind`",
        ),
        (
            "[model]\nblock = { kind = \"pre_norm\", gains = { alpha_sa = { init = \"x\" } } }\n",
            "model.block.gains.alpha_sa.init",
            "expected a number",
        ),
    ];
    for (text, path, want) in cases {
        let e = err(text);
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].path, path, "{e}");
        assert!(e.0[0].message.contains(want), "{e}");
    }
}

/// `key = { kind = "…", a = 1, … }` tables of the block in docs/experiments.md whose values
/// are all TOML: (section, key, the inline table).
fn readme_default_tables() -> Vec<(String, String, String)> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/experiments.md"))
            .unwrap();
    let block = readme
        .split("# Experiment files")
        .nth(1)
        .and_then(|r| r.split("```toml").nth(1))
        .and_then(|r| r.split("```").next())
        .expect("docs/experiments.md's experiment-file block");
    let mut out = Vec::new();
    let mut section = String::new();
    for line in block.lines() {
        if let Some(s) = line.strip_prefix('[') {
            section = s.split(']').next().unwrap().to_string();
        }
        // `key = { kind … }`, and `| { kind … }` for another choice of the same key
        let mut rest = line;
        let mut key = String::new();
        while let Some(i) = rest.find("{ kind") {
            let before = rest[..i].trim_end();
            if let Some(b) = before.strip_suffix('=') {
                key = b.trim_end().rsplit([' ', ',']).next().unwrap().to_string();
            } else if !before.ends_with('|') {
                key.clear();
            }
            let table = &rest[i..];
            let end = table.find('}').map_or(table.len(), |e| e + 1);
            if !key.is_empty() {
                out.push((section.clone(), key.clone(), table[..end].to_string()));
            }
            rest = &table[end..];
        }
    }
    out
}

#[test]
fn the_readme_defaults_are_the_defaults_of_a_table_given_only_its_kind() {
    let mut checked = Vec::new();
    for (section, key, table) in readme_default_tables() {
        let full = format!("[{section}]\n{key} = {table}\n");
        // a table naming what it is with words (`path`, `model.ctx + 1`) is not a default
        let Ok(documented) = from_str("readme.toml", &full) else {
            continue;
        };
        let kind = table.split('"').nth(1).unwrap();
        let bare = from_str(
            "bare.toml",
            &format!("[{section}]\n{key} = {{ kind = \"{kind}\" }}\n"),
        )
        .unwrap_or_else(|e| panic!("{key} = {{ kind = \"{kind}\" }} alone: {e}"));
        assert_eq!(bare, documented, "docs/experiments.md: {key} = {table}");
        checked.push(key);
    }
    for key in ["norm", "positions", "schedule"] {
        assert!(
            checked.iter().any(|k| k == key),
            "{key} not found in {checked:?}"
        );
    }
    // both choices of the optimiser
    assert_eq!(
        checked.iter().filter(|k| *k == "algorithm").count(),
        2,
        "{checked:?}"
    );
    // and the defaults docs/experiments.md states in words
    let exp = from_str(
        "x.toml",
        "[data]\ntokenizer = { kind = \"bpe\" }\n[model]\nnorm = { kind = \"layer_norm\" }\n\
         [optim]\nschedule = { kind = \"constant\" }\n",
    )
    .unwrap();
    assert_eq!(exp.data.tokenizer, TokenizerConfig::default());
    assert_eq!(exp.model.norm, NormConfig::LayerNorm { eps: 1e-5 });
    assert_eq!(exp.optim.schedule, ScheduleConfig::Constant { warmup: 100 });
    let rope = from_str("r.toml", "[model]\npositions = { kind = \"rope\" }\n").unwrap();
    assert_eq!(rope.model.positions, PositionsConfig::default());
}

#[test]
fn the_repeat_task_and_the_live_head_probe_are_checked() {
    // defaults: n follows ctx and probe_len, and a task's vocabulary; off where nothing fits
    let exp = from_str(
        "a.toml",
        "[model]\nctx = 32\n[train]\nbatch_tokens = 512\n[metrics]\nprobe_len = 20\n",
    )
    .unwrap();
    assert_eq!((exp.metrics.heads.enabled, exp.metrics.heads.n), (true, 9));
    let exp = from_str(
        "b.toml",
        "[data]\nsynthetic = { kind = \"repeat\", vocab = 6 }\n[model]\nctx = 64\n",
    )
    .unwrap();
    assert_eq!(exp.metrics.heads.n, 5);
    assert!(exp.to_toml().contains("n = 5"), "{}", exp.to_toml());
    let exp = from_str(
        "c.toml",
        "[model]\nctx = 4\n[train]\nbatch_tokens = 64\n[metrics]\nprobe_len = 4\nk_max = 4\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!exp.metrics.heads.enabled);
    // every bad value named by its path
    let text = r#"
[data]
synthetic = { kind = "repeat", vocab = 1, min_segment = 5, max_segment = 3, copy_probability = 1.5, skip_bigram = -0.1, sequences = 0, length = 10 }
[model]
ctx = 32
[train]
batch_tokens = 512
[metrics]
probe_len = 16
heads = { n = 16, sequences = 0 }
"#;
    let e = from_str("bad.toml", text).unwrap_err().to_string();
    for want in [
        "data.synthetic.vocab",
        "data.synthetic.max_segment",
        "data.synthetic.copy_probability",
        "data.synthetic.skip_bigram",
        "data.synthetic.sequences",
        "data.synthetic.length",
        "metrics.heads.n",
        "metrics.heads.sequences",
    ] {
        assert!(e.contains(want), "{want} missing in:\n{e}");
    }
    assert!(e.contains("2 ≤ n ≤ (model.ctx − 1) / 2 = 15"), "{e}");
    let e = from_str("u.toml", "[metrics.heads]\nevery = 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("metrics.heads") && e.contains("every"), "{e}");
}

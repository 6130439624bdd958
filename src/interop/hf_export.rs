//! `sinklab export`: a run whose model is exactly a LLaMA becomes a Hugging Face model directory
//! (`config.json`, `model.safetensors`, `tokenizer.json`, `tokenizer_config.json`,
//! `generation_config.json`) that transformers' `AutoModelForCausalLM` and every tool built on
//! it load. With q/k/v biases (and no other bias) the directory is a Qwen2 model, the LLaMA
//! variant that has exactly those.
//!
//! "Exactly" is checked, not assumed: the run's model configuration must equal the one a LLaMA
//! of the same sizes maps to on import ([`LlamaShape::model`]), up to what does not change the
//! function (initialisation, the attention kernel) and the RoPE pairing (adjacent pairs are
//! permuted to halves, llama.cpp's permutation undone). Every other difference (a sink slot, a
//! gate, post-norm, another normaliser, a mask window, block gains ≠ 1 …) is listed in the
//! error. Every parameter must be consumed by the mapping.

use super::{LlamaShape, transpose};
use crate::checkpoint::{self, HostTensor};
use crate::config::{Experiment, HeadKind, NormConfig, PositionsConfig, RopePairing};
use crate::rundir::RunDir;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// What `export` wrote.
pub struct ExportSummary {
    pub model_type: &'static str,
    pub tensors: usize,
    pub params: usize,
}

/// The LLaMA description of `exp.model`, or every reason it is not one.
fn llama_shape(exp: &Experiment, vocab: usize) -> Result<LlamaShape> {
    let m = &exp.model;
    let (rope_base, pairing) = match &m.positions {
        PositionsConfig::Rope {
            base,
            fraction,
            pairing,
        } if *fraction == 1.0 => (*base, *pairing),
        _ => (10000.0, RopePairing::Halves), // reported as a difference below
    };
    let rms_eps = match m.norm {
        NormConfig::RmsNorm { eps } => eps,
        _ => 1e-5,
    };
    let shape = LlamaShape {
        d_model: m.d_model,
        n_layers: m.n_layers,
        n_heads: m.n_heads,
        n_kv_heads: m.kv_heads(),
        d_ff: m.d_ff,
        max_positions: m.ctx,
        rope_base,
        rms_eps,
        vocab,
        tied: m.head == HeadKind::Tied,
        qkv_bias: m.qkv_bias,
    };
    let mut want = shape.model(m.ctx);
    // What does not change the function the weights compute.
    want.init_std = m.init_std;
    want.w_down_init_std = m.w_down_init_std;
    want.vocab_size = m.vocab_size;
    want.attention.kernel = m.attention.kernel;
    want.attention.query_init = m.attention.query_init;
    if let PositionsConfig::Rope { pairing: p, .. } = &mut want.positions {
        *p = pairing;
    }
    let (got, want) = (
        toml::Value::try_from(m).context("serialising the model configuration")?,
        toml::Value::try_from(&want).context("serialising the LLaMA configuration")?,
    );
    let mut diffs = Vec::new();
    differences("model", &got, &want, &mut diffs);
    if !diffs.is_empty() {
        bail!(
            "this model is not a LLaMA, so it has no exact Hugging Face LLaMA form: {}",
            diffs.join("; ")
        );
    }
    Ok(shape)
}

/// Every TOML path where `got` differs from `want`, with both values.
fn differences(path: &str, got: &toml::Value, want: &toml::Value, out: &mut Vec<String>) {
    match (got, want) {
        (toml::Value::Table(g), toml::Value::Table(w)) => {
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (g.get(k), w.get(k)) {
                    (Some(a), Some(b)) => differences(&p, a, b, out),
                    (Some(a), None) => out.push(format!("`{p}` = {a} (a LLaMA has none)")),
                    (None, Some(b)) => out.push(format!("`{p}` is missing (a LLaMA has {b})")),
                    (None, None) => {}
                }
            }
        }
        _ if got != want => out.push(format!("`{path}` = {got} (a LLaMA needs {want})")),
        _ => {}
    }
}

/// Export the checkpoint `ckpt` of the run in `run_dir` to the Hugging Face directory `out`
/// (which must not exist; written under a temporary name and renamed into place).
pub fn export(run_dir: &Path, ckpt: &Path, out: &Path) -> Result<ExportSummary> {
    if out.exists() {
        bail!("{}: already exists; choose another --out", out.display());
    }
    let resolved = RunDir(run_dir).resolved();
    let text = std::fs::read_to_string(&resolved)
        .with_context(|| format!("reading {}", resolved.display()))?;
    let exp = crate::config::from_str(&resolved.display().to_string(), &text)?;
    let mut w = checkpoint::load_safetensors(&ckpt.join("model.safetensors"))?;
    let vocab = w
        .get("embed")
        .map(|t| t.shape[0])
        .ok_or_else(|| anyhow!("{}: no `embed` tensor", ckpt.display()))?;
    let shape = llama_shape(&exp, vocab)?;
    let adjacent = matches!(
        exp.model.positions,
        PositionsConfig::Rope {
            pairing: RopePairing::Adjacent,
            ..
        }
    );
    let hd = exp.model.d_head();
    let mut take = |name: &str| -> Result<HostTensor> {
        w.remove(name)
            .ok_or_else(|| anyhow!("{}: tensor `{name}` is missing", ckpt.display()))
    };
    // sinklab [in, out] → torch [out, in]; Q/K rows of adjacent pairs (GGUF's layout) are
    // moved to the halves layout as on GGUF import.
    let qk = |t: &HostTensor, heads: usize| {
        let t = transpose(t);
        if adjacent {
            super::gguf::unpermute(&t, heads, hd)
        } else {
            t
        }
    };
    let qk_bias = |t: HostTensor, heads: usize| {
        if adjacent {
            super::gguf::unpermute(&t, heads, hd)
        } else {
            t
        }
    };
    let mut hf: BTreeMap<String, HostTensor> = BTreeMap::new();
    hf.insert("model.embed_tokens.weight".into(), take("embed")?);
    for l in 0..shape.n_layers {
        let (p, q) = (format!("blocks.{l}."), format!("model.layers.{l}."));
        hf.insert(
            format!("{q}input_layernorm.weight"),
            take(&format!("{p}norm1.gain"))?,
        );
        hf.insert(
            format!("{q}self_attn.q_proj.weight"),
            qk(&take(&format!("{p}attn.wq.weight"))?, shape.n_heads),
        );
        hf.insert(
            format!("{q}self_attn.k_proj.weight"),
            qk(&take(&format!("{p}attn.wk.weight"))?, shape.n_kv_heads),
        );
        hf.insert(
            format!("{q}self_attn.v_proj.weight"),
            transpose(&take(&format!("{p}attn.wv.weight"))?),
        );
        hf.insert(
            format!("{q}self_attn.o_proj.weight"),
            transpose(&take(&format!("{p}attn.wo.weight"))?),
        );
        if shape.qkv_bias {
            for (s, heads) in [
                ("q", shape.n_heads),
                ("k", shape.n_kv_heads),
                ("v", usize::MAX),
            ] {
                let b = take(&format!("{p}attn.w{s}.bias"))?;
                let b = if heads == usize::MAX {
                    b
                } else {
                    qk_bias(b, heads)
                };
                hf.insert(format!("{q}self_attn.{s}_proj.bias"), b);
            }
        }
        hf.insert(
            format!("{q}post_attention_layernorm.weight"),
            take(&format!("{p}norm2.gain"))?,
        );
        for (s, t) in [("gate", "w_gate"), ("up", "w_up"), ("down", "w_down")] {
            hf.insert(
                format!("{q}mlp.{s}_proj.weight"),
                transpose(&take(&format!("{p}mlp.{t}.weight"))?),
            );
        }
    }
    hf.insert("model.norm.weight".into(), take("norm_f.gain")?);
    if !shape.tied {
        hf.insert("lm_head.weight".into(), transpose(&take("head.weight")?));
    }
    if !w.is_empty() {
        bail!(
            "{}: parameters with no place in a LLaMA: {}",
            ckpt.display(),
            w.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    // The run's tokenizer: its own copy in the run directory (training and import put one
    // there), with the begin/end tokens the run names.
    let tok_path = RunDir(run_dir).tokenizer();
    let tokenizer = match &exp.data.tokenizer {
        crate::config::TokenizerConfig::File { bos, eot, .. } => {
            crate::tokenizer::Tokenizer::load_named(&tok_path, bos, eot)
        }
        _ => crate::tokenizer::Tokenizer::load(&tok_path),
    }
    .with_context(|| format!("{}: the run's tokenizer", run_dir.display()))?;
    let (bos, eos) = (tokenizer.bos_id, tokenizer.eot_id);
    let token = |id: u32| tokenizer.token(id);
    let model_type = if shape.qkv_bias { "qwen2" } else { "llama" };
    let mut config = serde_json::json!({
        "architectures": [if shape.qkv_bias { "Qwen2ForCausalLM" } else { "LlamaForCausalLM" }],
        "model_type": model_type,
        "hidden_size": shape.d_model,
        "intermediate_size": shape.d_ff,
        "num_hidden_layers": shape.n_layers,
        "num_attention_heads": shape.n_heads,
        "num_key_value_heads": shape.n_kv_heads,
        "head_dim": hd,
        "hidden_act": "silu",
        "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_base,
        "rope_scaling": null,
        "max_position_embeddings": shape.max_positions,
        "tie_word_embeddings": shape.tied,
        "vocab_size": vocab,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
        "initializer_range": exp.model.resolved_init_std(),
        "use_cache": true,
    });
    if shape.qkv_bias {
        config["use_sliding_window"] = false.into();
        config["sliding_window"] = serde_json::Value::Null;
    } else {
        config["attention_bias"] = false.into();
        config["mlp_bias"] = false.into();
        config["pretraining_tp"] = 1.into();
    }
    let tokenizer_config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token(bos),
        "eos_token": token(eos),
        "add_bos_token": exp.data.bos,
        "model_max_length": shape.max_positions,
        "clean_up_tokenization_spaces": false,
    });
    let generation = serde_json::json!({"bos_token_id": bos, "eos_token_id": eos});
    let params = hf.values().map(|t| t.data.len()).sum();
    let parent = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("--out {}: expected a directory name", out.display()))?;
    let tmp = parent.join(format!(".{name}.exporting.{}", std::process::id()));
    std::fs::remove_dir_all(&tmp).ok();
    let written = (|| -> Result<()> {
        std::fs::create_dir_all(&tmp)?;
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".to_string(), "pt".to_string()); // transformers checks it
        checkpoint::save_safetensors(&tmp.join("model.safetensors"), &hf, Some(meta))?;
        let json = |v: &serde_json::Value| serde_json::to_string_pretty(v).map(String::into_bytes);
        checkpoint::write_atomic(&tmp.join("config.json"), &json(&config)?)?;
        checkpoint::write_atomic(
            &tmp.join("tokenizer_config.json"),
            &json(&tokenizer_config)?,
        )?;
        checkpoint::write_atomic(&tmp.join("generation_config.json"), &json(&generation)?)?;
        std::fs::copy(&tok_path, tmp.join("tokenizer.json"))
            .with_context(|| format!("copying {}", tok_path.display()))?;
        Ok(())
    })();
    checkpoint::publish_dir(written, &tmp, out, "the export")?;
    Ok(ExportSummary {
        model_type,
        tensors: hf.len(),
        params,
    })
}

//! Hugging Face model directories: `config.json`, `model.safetensors` (or shards with
//! `model.safetensors.index.json`) and `tokenizer.json`, for the LLaMA family (`llama`,
//! `mistral`, `qwen2`; SmolLM is `llama`), `gpt2` and `gpt_neox` (Pythia). docs/formats.md
//! lists every tensor name, layout and configuration field this reads.
//!
//! Layouts: `nn.Linear` stores `[out, in]` and is transposed to sinklab's `[in, out]`; GPT-2's
//! `Conv1D` already stores `[in, out]`; GPT-NeoX interleaves q, k, v per head in
//! `query_key_value` (`[head, {q, k, v}, head_dim]` rows). Hugging Face checkpoints rotate
//! halves, sinklab's default RoPE pairing, so Q and K are used as stored.

use super::{Imported, LlamaLayer, LlamaShape, insert_llama_layer, transpose};
use crate::checkpoint::HostTensor;
use crate::config::{
    BlockConfig, FfnConfig, HeadKind, MaskConfig, ModelConfig, NormConfig, PositionsConfig,
    RopePairing,
};
use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Buffers some checkpoints carry that are not parameters (attention masks, RoPE frequencies).
const BUFFER_SUFFIXES: [&str; 5] = [
    ".attn.bias",
    ".attn.masked_bias",
    ".attention.bias",
    ".attention.masked_bias",
    ".rotary_emb.inv_freq",
];

/// Every tensor of the checkpoint (all shards), as f32, by name; buffers left out.
/// Tensors by name, and (file name, sha256) of every file read.
type Tensors = (BTreeMap<String, HostTensor>, Vec<(String, String)>);

fn read_tensors(dir: &Path) -> Result<Tensors> {
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<std::path::PathBuf> = if index.exists() {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(&index)
                .with_context(|| format!("reading {}", index.display()))?,
        )
        .with_context(|| format!("{}: not JSON", index.display()))?;
        let map = v["weight_map"]
            .as_object()
            .ok_or_else(|| anyhow!("{}: no `weight_map` object", index.display()))?;
        let mut shards: Vec<String> = map
            .values()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect();
        shards.sort();
        shards.dedup();
        shards.into_iter().map(|s| dir.join(s)).collect()
    } else if dir.join("model.safetensors").exists() {
        vec![dir.join("model.safetensors")]
    } else {
        bail!(
            "{}: no model.safetensors or model.safetensors.index.json (pytorch_model.bin is not \
             supported: convert it to safetensors)",
            dir.display()
        );
    };
    let mut out = BTreeMap::new();
    let mut hashes = Vec::new();
    for f in &files {
        let file = std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
        // SAFETY: read-only map of a file sinklab does not modify while reading.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("memory-mapping {}", f.display()))?;
        let st = safetensors::SafeTensors::deserialize(&map)
            .with_context(|| format!("{}: not a safetensors file", f.display()))?;
        for (name, view) in st.tensors() {
            if BUFFER_SUFFIXES.iter().any(|s| name.ends_with(s)) {
                continue;
            }
            let data = to_f32(view.dtype(), view.data())
                .map_err(|e| anyhow!("{}: tensor `{name}`: {e}", f.display()))?;
            if out.contains_key(&name) {
                bail!("{}: tensor `{name}` appears in two shards", f.display());
            }
            out.insert(
                name,
                HostTensor {
                    shape: view.shape().to_vec(),
                    data,
                },
            );
        }
        hashes.push((
            f.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            super::file_sha256(f)?,
        ));
    }
    Ok((out, hashes))
}

fn to_f32(dtype: safetensors::Dtype, b: &[u8]) -> std::result::Result<Vec<f32>, String> {
    use safetensors::Dtype;
    Ok(match dtype {
        Dtype::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => b
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        Dtype::BF16 => b
            .chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
            .collect(),
        Dtype::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
            .collect(),
        other => return Err(format!("dtype {other:?} (expected F32, F16, BF16 or F64)")),
    })
}

/// The configuration as read, with typed accessors that name the file and the field.
struct Config<'a> {
    v: &'a Value,
    file: String,
}

impl Config<'_> {
    fn usize(&self, keys: &[&str]) -> Result<usize> {
        self.opt_usize(keys)?
            .ok_or_else(|| anyhow!("{}: `{}` is missing", self.file, keys.join("` / `")))
    }
    fn opt_usize(&self, keys: &[&str]) -> Result<Option<usize>> {
        for k in keys {
            match &self.v[*k] {
                Value::Null => continue,
                x => {
                    return x
                        .as_u64()
                        .map(|u| Some(u as usize))
                        .ok_or_else(|| anyhow!("{}: `{k}` = {x} is not an integer", self.file));
                }
            }
        }
        Ok(None)
    }
    fn f64(&self, keys: &[&str], default: f64) -> Result<f64> {
        for k in keys {
            let x = self.lookup(k);
            if !x.is_null() {
                return x
                    .as_f64()
                    .ok_or_else(|| anyhow!("{}: `{k}` = {x} is not a number", self.file));
            }
        }
        Ok(default)
    }
    fn bool(&self, key: &str, default: bool) -> bool {
        self.v[key].as_bool().unwrap_or(default)
    }
    fn str(&self, key: &str) -> Option<&str> {
        self.v[key].as_str()
    }
    /// `a.b` looks inside a nested object (transformers v5's `rope_parameters`).
    fn lookup(&self, key: &str) -> &Value {
        key.split('.').fold(self.v, |v, k| &v[k])
    }
    /// RoPE scaling must be absent (or "default").
    fn no_rope_scaling(&self) -> Result<()> {
        for key in ["rope_scaling", "rope_parameters"] {
            let s = &self.v[key];
            let kind = s["rope_type"].as_str().or(s["type"].as_str());
            if !s.is_null() && kind.is_some_and(|k| k != "default") {
                bail!(
                    "{}: `{key}` = {s} is not supported (sinklab's RoPE has no scaling)",
                    self.file
                );
            }
        }
        Ok(())
    }
}

/// Read a Hugging Face model directory.
pub fn read(dir: &Path, log: &mut dyn FnMut(&str)) -> Result<Imported> {
    let t0 = std::time::Instant::now();
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path)
        .with_context(|| format!("{}: not a Hugging Face model directory", dir.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", cfg_path.display()))?;
    let c = Config {
        v: &v,
        file: cfg_path.display().to_string(),
    };
    let model_type = c.str("model_type").unwrap_or_default().to_string();
    let (tensors, hashes) = read_tensors(dir)?;
    let (model, weights, max_positions) = match model_type.as_str() {
        "llama" | "mistral" | "qwen2" => llama_family(&c, &model_type, tensors)?,
        "gpt2" => gpt2(&c, tensors)?,
        "gpt_neox" => gpt_neox(&c, tensors)?,
        other => bail!(
            "{}: model_type {other:?} is not supported; sinklab imports llama, mistral, qwen2 \
             (and SmolLM, which is llama), gpt2 and gpt_neox (Pythia)",
            c.file
        ),
    };
    // The tokenizer, as the model directory ships it.
    let tok_path = dir.join("tokenizer.json");
    let tokenizer_json = std::fs::read_to_string(&tok_path)
        .with_context(|| format!("{}: a tokenizer.json is needed", dir.display()))?;
    let tok = tokenizers::Tokenizer::from_file(&tok_path)
        .map_err(|e| anyhow!("{}: {e}", tok_path.display()))?;
    let name_of = |key: &str| -> Option<String> {
        let id = match &v[key] {
            Value::Array(a) => a.first()?.as_u64()?,
            x => x.as_u64()?,
        };
        tok.id_to_token(id as u32)
    };
    let eos = name_of("eos_token_id")
        .or_else(|| tok.id_to_token(0))
        .ok_or_else(|| anyhow!("{}: no eos_token_id and no token 0", c.file))?;
    let bos = name_of("bos_token_id").unwrap_or_else(|| eos.clone());
    let eot = if tok.token_to_id("<|endoftext|>").is_some() {
        "<|endoftext|>".to_string()
    } else {
        eos.clone()
    };
    // Trained with BOS when the tokenizer's post-processor prepends it.
    let adds_bos = tok
        .encode("a", true)
        .ok()
        .and_then(|e| e.get_ids().first().copied())
        .is_some_and(|id| Some(id) == tok.token_to_id(&bos));
    log(&format!(
        "{}: {model_type}, {} × d {}, {}{}, vocab {}; read in {:.1} s",
        dir.display(),
        crate::progress::count(model.n_layers, "layer", None),
        model.d_model,
        crate::progress::count(model.n_heads, "head", None),
        model
            .n_kv_heads
            .map_or(String::new(), |k| format!(" / {k} kv")),
        model.vocab_size.unwrap_or(0),
        t0.elapsed().as_secs_f64()
    ));
    let source = serde_json::json!({
        "format": "huggingface",
        "path": dir.canonicalize().unwrap_or(dir.to_path_buf()),
        "model_type": model_type,
        "files": hashes.into_iter().collect::<BTreeMap<_, _>>(),
        "max_positions": max_positions,
    });
    Ok(Imported {
        model,
        weights,
        tokenizer_json,
        bos,
        eot,
        adds_bos,
        source,
    })
}

/// Take a tensor by name, checking its shape.
fn take(
    t: &mut BTreeMap<String, HostTensor>,
    name: &str,
    shape: &[usize],
    file: &str,
) -> Result<HostTensor> {
    let x = t
        .remove(name)
        .ok_or_else(|| anyhow!("{file}: tensor `{name}` is missing"))?;
    if x.shape != shape {
        bail!(
            "{file}: tensor `{name}` has shape {:?}, expected {shape:?} for this configuration",
            x.shape
        );
    }
    Ok(x)
}

/// Every tensor must have been used.
fn no_leftovers(t: &BTreeMap<String, HostTensor>, file: &str) -> Result<()> {
    if !t.is_empty() {
        let names: Vec<&String> = t.keys().take(8).collect();
        bail!(
            "{file}: {} tensors sinklab does not understand: {names:?}",
            t.len()
        );
    }
    Ok(())
}

fn activation(c: &Config, key: &str, default: &str) -> Result<FfnConfig> {
    match c.str(key).unwrap_or(default) {
        "gelu" => Ok(FfnConfig::Gelu {}),
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(FfnConfig::GeluTanh {}),
        "relu" => Ok(FfnConfig::Relu {}),
        other => bail!(
            "{}: `{key}` = {other:?} is not supported here (gelu, gelu_new, relu)",
            c.file
        ),
    }
}

fn llama_family(
    c: &Config,
    model_type: &str,
    mut t: BTreeMap<String, HostTensor>,
) -> Result<(ModelConfig, BTreeMap<String, HostTensor>, usize)> {
    let file = c.file.clone();
    c.no_rope_scaling()?;
    if c.str("hidden_act").is_some_and(|a| a != "silu") {
        bail!(
            "{file}: hidden_act {:?} is not supported (silu)",
            c.str("hidden_act")
        );
    }
    let d = c.usize(&["hidden_size"])?;
    let n_heads = c.usize(&["num_attention_heads"])?;
    let n_kv = c.opt_usize(&["num_key_value_heads"])?.unwrap_or(n_heads);
    if let Some(hd) = c.opt_usize(&["head_dim"])?
        && hd * n_heads != d
    {
        bail!(
            "{file}: head_dim = {hd} differs from hidden_size / num_attention_heads = {}; \
             sinklab's attention uses d_model / n_heads per head",
            d / n_heads.max(1)
        );
    }
    if model_type == "qwen2" && c.bool("use_sliding_window", false) {
        bail!("{file}: use_sliding_window = true is not supported");
    }
    let vocab = t
        .get("model.embed_tokens.weight")
        .map(|x| x.shape[0])
        .ok_or_else(|| anyhow!("{file}: tensor `model.embed_tokens.weight` is missing"))?;
    let tied_default = false;
    let tied = c.bool("tie_word_embeddings", tied_default);
    let attention_bias = model_type == "llama" && c.bool("attention_bias", false);
    let mlp_bias = model_type == "llama" && c.bool("mlp_bias", false);
    let shape = LlamaShape {
        d_model: d,
        n_layers: c.usize(&["num_hidden_layers"])?,
        n_heads,
        n_kv_heads: n_kv,
        d_ff: c.usize(&["intermediate_size"])?,
        max_positions: c.usize(&["max_position_embeddings"])?,
        rope_base: c.f64(&["rope_theta", "rope_parameters.rope_theta"], 10000.0)?,
        rms_eps: c.f64(&["rms_norm_eps"], 1e-6)?,
        vocab,
        tied,
        qkv_bias: model_type == "qwen2",
    };
    shape.check(Path::new(&file))?;
    let hd = d / n_heads;
    let kvd = n_kv * hd;
    let mut w = BTreeMap::new();
    w.insert(
        "embed".to_string(),
        take(&mut t, "model.embed_tokens.weight", &[vocab, d], &file)?,
    );
    // A tied model's stored head is the embedding again: Hugging Face re-ties it.
    if tied {
        t.remove("lm_head.weight");
    }
    for l in 0..shape.n_layers {
        let p = format!("model.layers.{l}.");
        let mut g = |part: &str, s: &[usize]| take(&mut t, &format!("{p}{part}"), s, &file);
        let qkv_bias = if shape.qkv_bias || attention_bias {
            Some([
                g("self_attn.q_proj.bias", &[d])?,
                g("self_attn.k_proj.bias", &[kvd])?,
                g("self_attn.v_proj.bias", &[kvd])?,
            ])
        } else {
            None
        };
        let layer = LlamaLayer {
            attn_norm: g("input_layernorm.weight", &[d])?,
            q: g("self_attn.q_proj.weight", &[d, d])?,
            k: g("self_attn.k_proj.weight", &[kvd, d])?,
            v: g("self_attn.v_proj.weight", &[kvd, d])?,
            o: g("self_attn.o_proj.weight", &[d, d])?,
            qkv_bias,
            mlp_norm: g("post_attention_layernorm.weight", &[d])?,
            gate: g("mlp.gate_proj.weight", &[shape.d_ff, d])?,
            up: g("mlp.up_proj.weight", &[shape.d_ff, d])?,
            down: g("mlp.down_proj.weight", &[d, shape.d_ff])?,
        };
        let o_bias = attention_bias
            .then(|| g("self_attn.o_proj.bias", &[d]))
            .transpose()?;
        let mlp_biases = mlp_bias
            .then(|| -> Result<_> {
                Ok([
                    g("mlp.gate_proj.bias", &[shape.d_ff])?,
                    g("mlp.up_proj.bias", &[shape.d_ff])?,
                    g("mlp.down_proj.bias", &[d])?,
                ])
            })
            .transpose()?;
        insert_llama_layer(&mut w, l, layer);
        let b = format!("blocks.{l}.");
        if let Some(ob) = o_bias {
            w.insert(format!("{b}attn.wo.bias"), ob);
        }
        if let Some([bg, bu, bd]) = mlp_biases {
            w.insert(format!("{b}mlp.w_gate.bias"), bg);
            w.insert(format!("{b}mlp.w_up.bias"), bu);
            w.insert(format!("{b}mlp.w_down.bias"), bd);
        }
    }
    w.insert(
        "norm_f.gain".to_string(),
        take(&mut t, "model.norm.weight", &[d], &file)?,
    );
    if !tied {
        let head = take(&mut t, "lm_head.weight", &[vocab, d], &file)?;
        w.insert("head.weight".to_string(), transpose(&head));
    }
    no_leftovers(&t, &file)?;
    let mut model = shape.model(shape.max_positions);
    // Llama with attention or MLP biases: sinklab's all-linear biases (the ones this checkpoint
    // lacks are zero-filled by `interop::import`).
    model.bias = attention_bias || mlp_bias;
    if model.bias {
        model.qkv_bias = false;
    }
    if model_type == "mistral"
        && let Some(win) = c.opt_usize(&["sliding_window"])?
        && win < shape.max_positions
    {
        model.attention.mask = MaskConfig::SlidingWindow { w: win };
    }
    Ok((model, w, shape.max_positions))
}

fn gpt2(
    c: &Config,
    mut t: BTreeMap<String, HostTensor>,
) -> Result<(ModelConfig, BTreeMap<String, HostTensor>, usize)> {
    let file = c.file.clone();
    if c.bool("scale_attn_by_inverse_layer_idx", false) || !c.bool("scale_attn_weights", true) {
        bail!(
            "{file}: scale_attn_by_inverse_layer_idx / scale_attn_weights other than the \
             defaults are not supported"
        );
    }
    let d = c.usize(&["n_embd", "hidden_size"])?;
    let n_layers = c.usize(&["n_layer", "num_hidden_layers"])?;
    let n_heads = c.usize(&["n_head", "num_attention_heads"])?;
    let n_pos = c.usize(&["n_positions", "max_position_embeddings"])?;
    let f = c.opt_usize(&["n_inner"])?.unwrap_or(4 * d);
    let eps = c.f64(&["layer_norm_epsilon"], 1e-5)?;
    let tied = c.bool("tie_word_embeddings", true);
    let p = if t.keys().any(|k| k.starts_with("transformer.")) {
        "transformer."
    } else {
        ""
    };
    let vocab = t
        .get(&format!("{p}wte.weight"))
        .map(|x| x.shape[0])
        .ok_or_else(|| anyhow!("{file}: tensor `{p}wte.weight` is missing"))?;
    let mut w = BTreeMap::new();
    let mut g = |name: &str, s: &[usize]| take(&mut t, &format!("{p}{name}"), s, &file);
    w.insert("embed".to_string(), g("wte.weight", &[vocab, d])?);
    w.insert("pos_embed".to_string(), g("wpe.weight", &[n_pos, d])?);
    for l in 0..n_layers {
        let h = format!("h.{l}.");
        let b = format!("blocks.{l}.");
        w.insert(
            format!("{b}norm1.gain"),
            g(&format!("{h}ln_1.weight"), &[d])?,
        );
        w.insert(format!("{b}norm1.bias"), g(&format!("{h}ln_1.bias"), &[d])?);
        // Conv1D: [in, out], already sinklab's layout; c_attn's columns are q | k | v.
        let qkv = g(&format!("{h}attn.c_attn.weight"), &[d, 3 * d])?;
        let qkv_b = g(&format!("{h}attn.c_attn.bias"), &[3 * d])?;
        for (i, name) in ["wq", "wk", "wv"].into_iter().enumerate() {
            let mut m = Vec::with_capacity(d * d);
            for r in 0..d {
                m.extend_from_slice(&qkv.data[r * 3 * d + i * d..r * 3 * d + (i + 1) * d]);
            }
            w.insert(
                format!("{b}attn.{name}.weight"),
                HostTensor {
                    shape: vec![d, d],
                    data: m,
                },
            );
            w.insert(
                format!("{b}attn.{name}.bias"),
                HostTensor {
                    shape: vec![d],
                    data: qkv_b.data[i * d..(i + 1) * d].to_vec(),
                },
            );
        }
        w.insert(
            format!("{b}attn.wo.weight"),
            g(&format!("{h}attn.c_proj.weight"), &[d, d])?,
        );
        w.insert(
            format!("{b}attn.wo.bias"),
            g(&format!("{h}attn.c_proj.bias"), &[d])?,
        );
        w.insert(
            format!("{b}norm2.gain"),
            g(&format!("{h}ln_2.weight"), &[d])?,
        );
        w.insert(format!("{b}norm2.bias"), g(&format!("{h}ln_2.bias"), &[d])?);
        w.insert(
            format!("{b}mlp.w_up.weight"),
            g(&format!("{h}mlp.c_fc.weight"), &[d, f])?,
        );
        w.insert(
            format!("{b}mlp.w_up.bias"),
            g(&format!("{h}mlp.c_fc.bias"), &[f])?,
        );
        w.insert(
            format!("{b}mlp.w_down.weight"),
            g(&format!("{h}mlp.c_proj.weight"), &[f, d])?,
        );
        w.insert(
            format!("{b}mlp.w_down.bias"),
            g(&format!("{h}mlp.c_proj.bias"), &[d])?,
        );
    }
    w.insert("norm_f.gain".to_string(), g("ln_f.weight", &[d])?);
    w.insert("norm_f.bias".to_string(), g("ln_f.bias", &[d])?);
    if tied {
        t.remove("lm_head.weight");
    } else {
        let head = take(&mut t, "lm_head.weight", &[vocab, d], &file)?;
        w.insert("head.weight".to_string(), transpose(&head));
    }
    no_leftovers(&t, &file)?;
    let model = ModelConfig {
        d_model: d,
        n_layers,
        n_heads,
        d_ff: f,
        ctx: n_pos,
        norm: NormConfig::LayerNorm { eps },
        ffn: activation(c, "activation_function", "gelu_new")?,
        positions: PositionsConfig::Learned {},
        block: BlockConfig::default(),
        head: if tied {
            HeadKind::Tied
        } else {
            HeadKind::Untied
        },
        bias: true,
        vocab_size: Some(vocab),
        ..ModelConfig::default()
    };
    Ok((model, w, n_pos))
}

fn gpt_neox(
    c: &Config,
    mut t: BTreeMap<String, HostTensor>,
) -> Result<(ModelConfig, BTreeMap<String, HostTensor>, usize)> {
    let file = c.file.clone();
    c.no_rope_scaling()?;
    let d = c.usize(&["hidden_size"])?;
    let n_layers = c.usize(&["num_hidden_layers"])?;
    let n_heads = c.usize(&["num_attention_heads"])?;
    let f = c.usize(&["intermediate_size"])?;
    let n_pos = c.usize(&["max_position_embeddings"])?;
    let eps = c.f64(&["layer_norm_eps"], 1e-5)?;
    let pct = c.f64(
        &["rotary_pct", "rope_parameters.partial_rotary_factor"],
        0.25,
    )?;
    let base = c.f64(
        &[
            "rotary_emb_base",
            "rope_theta",
            "rope_parameters.rope_theta",
        ],
        10000.0,
    )?;
    let parallel = c.bool("use_parallel_residual", true);
    let tied = c.bool("tie_word_embeddings", false);
    let hd = d / n_heads.max(1);
    let rot = (hd as f64 * pct) as usize;
    if !rot.is_multiple_of(2) || crate::config::rope_dims(hd, pct) != rot {
        bail!("{file}: rotary_pct {pct} of head_dim {hd} rotates {rot} dims, an odd number");
    }
    let vocab = t
        .get("gpt_neox.embed_in.weight")
        .map(|x| x.shape[0])
        .ok_or_else(|| anyhow!("{file}: tensor `gpt_neox.embed_in.weight` is missing"))?;
    let mut w = BTreeMap::new();
    let mut g = |name: &str, s: &[usize]| take(&mut t, name, s, &file);
    w.insert(
        "embed".to_string(),
        g("gpt_neox.embed_in.weight", &[vocab, d])?,
    );
    for l in 0..n_layers {
        let p = format!("gpt_neox.layers.{l}.");
        let b = format!("blocks.{l}.");
        w.insert(
            format!("{b}norm1.gain"),
            g(&format!("{p}input_layernorm.weight"), &[d])?,
        );
        w.insert(
            format!("{b}norm1.bias"),
            g(&format!("{p}input_layernorm.bias"), &[d])?,
        );
        w.insert(
            format!("{b}norm2.gain"),
            g(&format!("{p}post_attention_layernorm.weight"), &[d])?,
        );
        w.insert(
            format!("{b}norm2.bias"),
            g(&format!("{p}post_attention_layernorm.bias"), &[d])?,
        );
        // Rows are [head, {q, k, v}, head_dim].
        let qkv = g(&format!("{p}attention.query_key_value.weight"), &[3 * d, d])?;
        let qkv_b = g(&format!("{p}attention.query_key_value.bias"), &[3 * d])?;
        for (s, name) in ["wq", "wk", "wv"].into_iter().enumerate() {
            let mut m = Vec::with_capacity(d * d);
            let mut bias = Vec::with_capacity(d);
            for h in 0..n_heads {
                for j in 0..hd {
                    let r = h * 3 * hd + s * hd + j;
                    m.extend_from_slice(&qkv.data[r * d..(r + 1) * d]);
                    bias.push(qkv_b.data[r]);
                }
            }
            let torch = HostTensor {
                shape: vec![d, d],
                data: m,
            };
            w.insert(format!("{b}attn.{name}.weight"), transpose(&torch));
            w.insert(
                format!("{b}attn.{name}.bias"),
                HostTensor {
                    shape: vec![d],
                    data: bias,
                },
            );
        }
        w.insert(
            format!("{b}attn.wo.weight"),
            transpose(&g(&format!("{p}attention.dense.weight"), &[d, d])?),
        );
        w.insert(
            format!("{b}attn.wo.bias"),
            g(&format!("{p}attention.dense.bias"), &[d])?,
        );
        w.insert(
            format!("{b}mlp.w_up.weight"),
            transpose(&g(&format!("{p}mlp.dense_h_to_4h.weight"), &[f, d])?),
        );
        w.insert(
            format!("{b}mlp.w_up.bias"),
            g(&format!("{p}mlp.dense_h_to_4h.bias"), &[f])?,
        );
        w.insert(
            format!("{b}mlp.w_down.weight"),
            transpose(&g(&format!("{p}mlp.dense_4h_to_h.weight"), &[d, f])?),
        );
        w.insert(
            format!("{b}mlp.w_down.bias"),
            g(&format!("{p}mlp.dense_4h_to_h.bias"), &[d])?,
        );
    }
    w.insert(
        "norm_f.gain".to_string(),
        g("gpt_neox.final_layer_norm.weight", &[d])?,
    );
    w.insert(
        "norm_f.bias".to_string(),
        g("gpt_neox.final_layer_norm.bias", &[d])?,
    );
    if tied {
        t.remove("embed_out.weight");
    } else {
        let head = take(&mut t, "embed_out.weight", &[vocab, d], &file)?;
        w.insert("head.weight".to_string(), transpose(&head));
    }
    no_leftovers(&t, &file)?;
    let model = ModelConfig {
        d_model: d,
        n_layers,
        n_heads,
        d_ff: f,
        ctx: n_pos,
        norm: NormConfig::LayerNorm { eps },
        ffn: activation(c, "hidden_act", "gelu")?,
        positions: PositionsConfig::Rope {
            base,
            fraction: pct,
            pairing: RopePairing::Halves,
        },
        block: if parallel {
            BlockConfig::Parallel {
                gains: Default::default(),
                separate_norms: true,
            }
        } else {
            BlockConfig::default()
        },
        head: if tied {
            HeadKind::Tied
        } else {
            HeadKind::Untied
        },
        bias: true,
        vocab_size: Some(vocab),
        ..ModelConfig::default()
    };
    Ok((model, w, n_pos))
}

//! Pretrained checkpoints in and out. `sinklab import`: a pretrained checkpoint becomes an
//! ordinary run directory, so that `eval`, `analyze`, `dark`, `stream-eval`, `generate` and
//! `train` take it unchanged. `sinklab export` ([`hf_export`]): a run whose model is exactly a
//! LLaMA (or Qwen2) becomes a Hugging Face model directory.
//!
//! Sources: a Hugging Face model directory (`config.json`, `model.safetensors` or a sharded
//! index, `tokenizer.json`) of the LLaMA family (llama, mistral, qwen2; SmolLM is llama), GPT-2
//! or GPT-NeoX / Pythia ([`hf`]); or a GGUF file of the llama architecture ([`gguf`], the
//! tokenizer rebuilt from its metadata by [`gguf_tokenizer`]). Every tensor is converted to
//! sinklab's names and layout (linear weights `[d_in, d_out]`), checked against the model the
//! resolved configuration builds (every name, every shape), and written as step 0's checkpoint.
//! docs/formats.md records the conventions of both formats.
//!
//! The run directory is assembled under a temporary name next to its destination and renamed
//! into place, so a failed import leaves nothing that looks like a run.

pub mod gguf;
pub mod gguf_tokenizer;
pub mod hf;
pub mod hf_export;

use crate::backend::Provenance;
use crate::checkpoint::{self, HostTensor};
use crate::config::{
    BlockConfig, DataConfig, Experiment, FfnConfig, HeadKind, HeadMetricsConfig, MetricsConfig,
    ModelConfig, NormConfig, OptimConfig, PositionsConfig, RopePairing, RunConfig, ScheduleConfig,
    TokenizerConfig, TrainConfig,
};
use crate::model::Lm;
use crate::run::{CheckpointState, DirState};
use crate::rundir::{self, RunDir};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A checkpoint read from its source, converted to sinklab's parameters.
pub struct Imported {
    /// The model with the zoo's choices (its `vocab_size` is the embedding's rows).
    pub model: ModelConfig,
    /// Every parameter, by sinklab name, `[d_in, d_out]` for linear weights.
    pub weights: BTreeMap<String, HostTensor>,
    /// `tokenizer.json` text (loads in Python's `tokenizers`).
    pub tokenizer_json: String,
    /// Begin-of-sequence and end-of-document token strings of the tokenizer.
    pub bos: String,
    pub eot: String,
    /// Whether the model was trained with a BOS token in front of every sequence.
    pub adds_bos: bool,
    /// What was read: format, architecture, files and their sha256.
    pub source: serde_json::Value,
}

/// The parts of a LLaMA-family checkpoint's configuration sinklab needs.
#[derive(Debug, Clone)]
pub struct LlamaShape {
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_ff: usize,
    pub max_positions: usize,
    pub rope_base: f64,
    pub rms_eps: f64,
    pub vocab: usize,
    pub tied: bool,
    pub qkv_bias: bool,
}

impl LlamaShape {
    /// The zoo's description: pre-norm RMSNorm blocks, SwiGLU, RoPE rotating halves (the
    /// Hugging Face layout; GGUF's adjacent-pair Q/K are un-permuted on import), grouped-query
    /// attention where KV < H, q/k/v biases for Qwen2.
    pub fn model(&self, ctx: usize) -> ModelConfig {
        ModelConfig {
            d_model: self.d_model,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            n_kv_heads: (self.n_kv_heads != self.n_heads).then_some(self.n_kv_heads),
            d_ff: self.d_ff,
            ctx,
            norm: NormConfig::RmsNorm { eps: self.rms_eps },
            input_norm: None,
            ffn: FfnConfig::Swiglu {},
            positions: PositionsConfig::Rope {
                base: self.rope_base,
                fraction: 1.0,
                pairing: RopePairing::Halves,
            },
            block: BlockConfig::default(),
            head: if self.tied {
                HeadKind::Tied
            } else {
                HeadKind::Untied
            },
            bias: false,
            qkv_bias: self.qkv_bias,
            vocab_size: Some(self.vocab),
            ..ModelConfig::default()
        }
    }

    /// Check the shape against what sinklab's attention supports.
    pub fn check(&self, file: &Path) -> Result<()> {
        if self.n_heads == 0 || !self.d_model.is_multiple_of(self.n_heads) {
            bail!(
                "{}: hidden size {} is not a multiple of {} heads",
                file.display(),
                self.d_model,
                self.n_heads
            );
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            bail!(
                "{}: {} key/value heads do not divide {} query heads",
                file.display(),
                self.n_kv_heads,
                self.n_heads
            );
        }
        Ok(())
    }
}

/// Source tensors of one LLaMA-family layer in Hugging Face layout (torch `[out, in]`).
pub struct LlamaLayer {
    pub attn_norm: HostTensor,
    pub q: HostTensor,
    pub k: HostTensor,
    pub v: HostTensor,
    pub o: HostTensor,
    pub qkv_bias: Option<[HostTensor; 3]>,
    pub mlp_norm: HostTensor,
    pub gate: HostTensor,
    pub up: HostTensor,
    pub down: HostTensor,
}

/// `[out, in]` → `[in, out]`.
pub fn transpose(t: &HostTensor) -> HostTensor {
    let [r, c] = t.shape[..] else {
        panic!("transpose of a rank-{} tensor", t.shape.len())
    };
    let mut data = vec![0f32; r * c];
    for i in 0..r {
        for j in 0..c {
            data[j * r + i] = t.data[i * c + j];
        }
    }
    HostTensor {
        shape: vec![c, r],
        data,
    }
}

/// Put one LLaMA-family layer's tensors under sinklab's names.
pub fn insert_llama_layer(w: &mut BTreeMap<String, HostTensor>, l: usize, t: LlamaLayer) {
    let p = format!("blocks.{l}.");
    w.insert(format!("{p}norm1.gain"), t.attn_norm);
    w.insert(format!("{p}attn.wq.weight"), transpose(&t.q));
    w.insert(format!("{p}attn.wk.weight"), transpose(&t.k));
    w.insert(format!("{p}attn.wv.weight"), transpose(&t.v));
    w.insert(format!("{p}attn.wo.weight"), transpose(&t.o));
    if let Some([bq, bk, bv]) = t.qkv_bias {
        w.insert(format!("{p}attn.wq.bias"), bq);
        w.insert(format!("{p}attn.wk.bias"), bk);
        w.insert(format!("{p}attn.wv.bias"), bv);
    }
    w.insert(format!("{p}norm2.gain"), t.mlp_norm);
    w.insert(format!("{p}mlp.w_gate.weight"), transpose(&t.gate));
    w.insert(format!("{p}mlp.w_up.weight"), transpose(&t.up));
    w.insert(format!("{p}mlp.w_down.weight"), transpose(&t.down));
}

/// Read any supported source.
pub fn read(src: &Path, log: &mut dyn FnMut(&str)) -> Result<Imported> {
    if src.is_dir() {
        hf::read(src, log)
    } else if src.extension().is_some_and(|e| e == "gguf") {
        gguf::read(src, log)
    } else if !src.exists() {
        bail!("{}: no such file or directory", src.display())
    } else {
        bail!(
            "{}: not a Hugging Face model directory (with config.json) or a .gguf file",
            src.display()
        )
    }
}

/// The experiment of an imported model: the model as read, the embedded corpus through the
/// model's own tokenizer (saved in the run directory), BOS as the model was trained, and
/// fine-tuning defaults (small constant LR, no weight decay) for `train` with `init_from`.
pub fn experiment(imp: &Imported, out: &Path, ctx: usize) -> Result<Experiment> {
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("--out {}: expected runs/NAME", out.display()))?
        .to_string();
    let parent = out.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut model = imp.model.clone();
    model.ctx = ctx;
    let exp = Experiment {
        run: RunConfig {
            name,
            out_dir: parent,
            ..RunConfig::default()
        },
        data: DataConfig {
            tokenizer: TokenizerConfig::File {
                path: RunDir(out).tokenizer(),
                bos: imp.bos.clone(),
                eot: imp.eot.clone(),
            },
            bos: imp.adds_bos,
            ..DataConfig::default()
        },
        model,
        optim: OptimConfig {
            lr: 1e-4,
            weight_decay: 0.0,
            schedule: ScheduleConfig::Constant { warmup: 10 },
            ..OptimConfig::default()
        },
        train: TrainConfig {
            steps: 100,
            batch_tokens: 4 * ctx,
            micro_batch: 1,
            eval_every: 50,
            eval_sequences: 16,
            checkpoint_every: 50,
            ..TrainConfig::default()
        },
        metrics: MetricsConfig {
            probe_len: 64.min(ctx),
            k_max: 10.min(64.min(ctx)),
            heads: HeadMetricsConfig::fitting(ctx, 64.min(ctx), None),
            ..MetricsConfig::default()
        },
    };
    let problems = exp.validate();
    if !problems.is_empty() {
        bail!(
            "the imported model maps to an invalid sinklab configuration: {}",
            problems
                .iter()
                .map(|(p, m)| format!("`{p}`: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(exp)
}

/// What `import` wrote.
pub struct ImportSummary {
    pub run_dir: PathBuf,
    pub params: usize,
    pub exp: Experiment,
}

/// Import `src` into the run directory `out` (which must not exist), with training context
/// `ctx` (default: the model's maximum positions, at most 2048); the run records `run_device`
/// (default flex) as its device, while the conversion itself runs on `device`.
pub fn import(
    src: &Path,
    out: &Path,
    ctx: Option<usize>,
    run_device: Option<crate::config::DeviceKind>,
    device: &burn::tensor::Device,
    log: &mut dyn FnMut(&str),
) -> Result<ImportSummary> {
    // The run directory is locked from the start (one writer at a time); it may exist only
    // empty or holding what a start that never reached a checkpoint left.
    let refuse_existing = |out: &Path| -> Result<()> {
        match crate::run::dir_state(out) {
            DirState::Empty | DirState::Stub => Ok(()),
            DirState::Run => bail!(
                "{}: already holds a run; choose another --out (import never overwrites a run)",
                out.display()
            ),
            DirState::Foreign(names) => bail!(
                "{}: holds files sinklab did not write ({}); choose another --out",
                out.display(),
                names.join(", ")
            ),
        }
    };
    if let Some(holder) = crate::lock::holder(out) {
        return Err(crate::lock::Busy {
            dir: out.to_path_buf(),
            holder: Some(holder),
            advice: None,
        }
        .into());
    }
    refuse_existing(out)?;
    let created = !out.exists();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let lock = crate::lock::acquire(out, "import");
    let lock = match lock.and_then(|l| refuse_existing(out).map(|_| l)) {
        Ok(l) => l,
        Err(e) => {
            if created && !crate::lock::is_busy(&e) {
                std::fs::remove_file(out.join(crate::lock::LOCK_FILE)).ok();
                std::fs::remove_dir(out).ok();
            }
            return Err(e);
        }
    };
    let imported = import_locked(src, out, ctx, run_device, device, log);
    if imported.is_err() && created {
        // Nothing of a failed import stays (the lock file goes last, the lock still held).
        crate::run::clear_stub(out);
        std::fs::remove_file(out.join(crate::lock::LOCK_FILE)).ok();
        std::fs::remove_dir(out).ok();
    }
    drop(lock);
    imported
}

/// [`import`] once `out` is locked.
fn import_locked(
    src: &Path,
    out: &Path,
    ctx: Option<usize>,
    run_device: Option<crate::config::DeviceKind>,
    device: &burn::tensor::Device,
    log: &mut dyn FnMut(&str),
) -> Result<ImportSummary> {
    let imp = read(src, log)?;
    let max_ctx = imp.source["max_positions"].as_u64().unwrap_or(2048) as usize;
    let ctx = match ctx {
        Some(c) if c < 2 || c > max_ctx => {
            bail!("--ctx {c}: expected 2 ≤ ctx ≤ {max_ctx} (the model's maximum positions)")
        }
        Some(c) => c,
        None => max_ctx.min(2048),
    };
    let mut exp = experiment(&imp, out, ctx)?;
    if let Some(d) = run_device {
        exp.run.device = d;
    }
    let mut weights = imp.weights;
    // GPT-2's learned positions are a (n_positions, d) table: keep the first ctx rows.
    if let Some(pe) = weights.get_mut("pos_embed") {
        let d = pe.shape[1];
        pe.data.truncate(ctx * d);
        pe.shape[0] = ctx;
    }
    // `model.bias = true` is one flag for every linear layer; a checkpoint with biases on some
    // of them (GPT-NeoX's head has none, Llama's `attention_bias` leaves the MLP without) gets
    // zeros for the rest: the same function.
    if exp.model.bias {
        let shapes = Lm::param_shapes(&exp.model, exp.model.vocab_size.unwrap_or(0), device);
        let mut zeroed = Vec::new();
        for (name, shape) in shapes {
            if name.ends_with(".bias") && !weights.contains_key(&name) {
                let n = shape.iter().product();
                weights.insert(
                    name.clone(),
                    HostTensor {
                        shape,
                        data: vec![0.0; n],
                    },
                );
                zeroed.push(name);
            }
        }
        if !zeroed.is_empty() {
            log(&format!(
                "zero biases where the checkpoint has none: {}",
                zeroed.join(", ")
            ));
        }
    }
    check_against_model(&exp, &weights, src, device)?;
    let params: usize = weights.values().map(|t| t.data.len()).sum();
    let parent = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let tmp = parent.join(format!(
        ".{}.importing.{}",
        exp.run.name,
        std::process::id()
    ));
    std::fs::remove_dir_all(&tmp).ok();
    let written = (|| -> Result<()> {
        std::fs::create_dir_all(&tmp)?;
        checkpoint::write_atomic(&RunDir(&tmp).tokenizer(), imp.tokenizer_json.as_bytes())?;
        // The tokenizer is validated by loading it as sinklab will.
        let tok =
            crate::tokenizer::Tokenizer::load_named(&RunDir(&tmp).tokenizer(), &imp.bos, &imp.eot)?;
        log(&format!(
            "tokenizer: {} ids (model vocabulary {}), bos {:?}, end of document {:?}",
            tok.vocab_size(),
            exp.model.vocab_size.unwrap_or(0),
            imp.bos,
            imp.eot
        ));
        checkpoint::write_atomic(&RunDir(&tmp).resolved(), exp.to_toml().as_bytes())?;
        let prov = Provenance::collect(&exp, None);
        let mut prov = serde_json::to_value(&prov)?;
        prov["imported_from"] = imp.source.clone();
        checkpoint::write_atomic(
            &RunDir(&tmp).provenance(),
            serde_json::to_string_pretty(&prov)?.as_bytes(),
        )?;
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".to_string(), "sinklab".to_string());
        meta.insert("step".to_string(), "0".to_string());
        meta.insert(
            "layout".to_string(),
            "linear weights are [d_in, d_out]".to_string(),
        );
        meta.insert(
            "imported_from".to_string(),
            imp.source["path"].as_str().unwrap_or("").to_string(),
        );
        let state = CheckpointState {
            first_loss: None,
            step: 0,
            adam_t: 0,
            seed: exp.run.seed,
            config_digest: crate::run::config_digest(&exp),
            vocab_size: exp.model.vocab_size.unwrap_or(0),
            loss_scale: None,
        };
        checkpoint::commit_checkpoint(
            &tmp,
            0,
            &[
                (
                    "model.safetensors",
                    checkpoint::FileBody::Tensors(&weights, Some(meta)),
                ),
                (
                    "optim.safetensors",
                    checkpoint::FileBody::Tensors(&BTreeMap::new(), None),
                ),
                (
                    "state.json",
                    checkpoint::FileBody::Bytes(serde_json::to_vec_pretty(&state)?),
                ),
            ],
            1,
        )?;
        Ok(())
    })();
    // Into the locked directory: an earlier start's stub files replaced, the checkpoint last
    // (a run directory is a run once its checkpoint is there).
    let moved = written.and_then(|_| {
        crate::run::clear_stub(out);
        for name in [
            rundir::TOKENIZER,
            rundir::RESOLVED,
            rundir::PROVENANCE,
            rundir::CHECKPOINTS,
        ] {
            std::fs::rename(tmp.join(name), out.join(name))
                .with_context(|| format!("moving the imported {name} into {}", out.display()))?;
        }
        Ok(())
    });
    std::fs::remove_dir_all(&tmp).ok();
    moved?;
    exp.run.out_dir = parent.to_path_buf();
    Ok(ImportSummary {
        run_dir: out.to_path_buf(),
        params,
        exp,
    })
}

/// Every parameter of the model `exp` builds is in `weights` with its shape, and nothing else.
fn check_against_model(
    exp: &Experiment,
    weights: &BTreeMap<String, HostTensor>,
    src: &Path,
    device: &burn::tensor::Device,
) -> Result<()> {
    let want = Lm::param_shapes(&exp.model, exp.model.vocab_size.unwrap_or(0), device);
    let mut problems = Vec::new();
    for (name, shape) in &want {
        match weights.get(name) {
            None => problems.push(format!("missing `{name}` {shape:?}")),
            Some(t) if &t.shape != shape => problems.push(format!(
                "`{name}` has shape {:?}, the model needs {shape:?}",
                t.shape
            )),
            Some(_) => {}
        }
    }
    for name in weights.keys() {
        if !want.contains_key(name) {
            problems.push(format!("`{name}` has no place in the model"));
        }
    }
    if !problems.is_empty() {
        bail!(
            "{}: the converted tensors do not fit the model: {}",
            src.display(),
            problems.join("; ")
        );
    }
    Ok(())
}

pub use crate::checkpoint::file_sha256;

//! The training loop: orchestration only. Modules compute (`model`), the optimizer updates
//! (`optim`), metric maths are pure (`metrics`), writers record (`Recorder`).
//!
//! Run directory layout:
//! ```text
//! runs/NAME/resolved.toml      the full resolved experiment (written before step 0)
//! runs/NAME/provenance.json    git revision, features, device, seed, argv, versions
//! runs/NAME/tokenizer.json     the tokenizer (loads in Python's `tokenizers`)
//! runs/NAME/metrics.jsonl      one JSON object per record: {"step", "time", "scalars": {...}}
//! runs/NAME/tb/                TensorBoard event files
//! runs/NAME/checkpoints/step_NNNNNNNN/{model.safetensors, optim.safetensors, state.json}
//! ```

use crate::backend::{self, Provenance};
use crate::checkpoint::{self, HostTensor};
use crate::config::{self, DeviceKind, Experiment};
use crate::data::{self, Batch, Dataset, Sampler};
use crate::metrics::{Array, LayerArrays, Proxy, SinkReport, split_attention};
use crate::model::{self, Lm};
use crate::optim::{self, AdamW, GradAccumulator};
use crate::parallel::{self, Workers};
use crate::tensorboard::{EventWriter, heatmap_rgb};
use anyhow::{Context, Result, anyhow, bail};
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options of `sinklab train` beyond the experiment file.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from the newest checkpoint in the run directory.
    pub resume: bool,
    /// Stop (after checkpointing) once this many optimizer steps are done, as if killed.
    pub stop_after: Option<u64>,
    /// No progress bar (logs only).
    pub quiet: bool,
}

/// What a finished (or stopped) run reports.
#[derive(Debug, Clone, Serialize)]
pub struct TrainSummary {
    pub run_dir: PathBuf,
    pub steps_done: u64,
    pub first_loss: Option<f64>,
    pub last_loss: Option<f64>,
    pub last_val_loss: Option<f64>,
    pub last_sink1: Option<f64>,
    pub tokens_per_s: f64,
    /// Stopped early by an interrupt (Ctrl-C / SIGINT / SIGTERM) after checkpointing.
    pub interrupted: bool,
}

/// Set by a signal handler: the training loop checkpoints after the current step and returns
/// with `interrupted` set, so that `--resume` continues exactly.
pub static INTERRUPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn interrupted() -> bool {
    INTERRUPT.load(std::sync::atomic::Ordering::SeqCst)
}

/// `state.json` inside a checkpoint.
#[derive(Debug, Serialize, Deserialize)]
pub struct CheckpointState {
    /// Optimizer steps completed; the data position is a pure function of it.
    pub step: u64,
    pub adam_t: u64,
    pub seed: u64,
    pub config_digest: String,
    pub vocab_size: usize,
}

/// Writes scalars to TensorBoard and `metrics.jsonl` together.
pub struct Recorder {
    tb: EventWriter,
    jsonl: std::fs::File,
    start: Instant,
}

impl Recorder {
    fn open(run_dir: &Path, resume_step: Option<u64>) -> Result<Self> {
        let path = run_dir.join("metrics.jsonl");
        // On resume, drop records written after the checkpoint (they will be written again).
        if let Some(step) = resume_step
            && path.exists()
        {
            let kept: String = std::fs::read_to_string(&path)?
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .ok()
                        .and_then(|v| v["step"].as_u64())
                        .is_some_and(|s| s <= step)
                })
                .map(|l| format!("{l}\n"))
                .collect();
            checkpoint::write_atomic(&path, kept.as_bytes())?;
        }
        let jsonl = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let mut tb = EventWriter::create(&run_dir.join("tb"))
            .with_context(|| format!("creating TensorBoard writer in {}", run_dir.display()))?;
        // A session start at the resume step makes TensorBoard's Python loader drop any points
        // a killed run wrote after its last checkpoint.
        tb.add_session_start(resume_step.unwrap_or(0) as i64)?;
        Ok(Self {
            tb,
            jsonl,
            start: Instant::now(),
        })
    }

    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> Result<()> {
        self.tb.add_scalars(step as i64, values)?;
        let map: serde_json::Map<String, serde_json::Value> = values
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .collect();
        let line = serde_json::json!({
            "step": step,
            "time": self.start.elapsed().as_secs_f64(),
            "scalars": map,
        });
        writeln!(self.jsonl, "{line}")?;
        Ok(())
    }

    fn sink_map(&mut self, step: u64, report: &SinkReport) -> Result<()> {
        let rows = report.importance_first.len();
        let cols = report.importance_first.first().map_or(0, Vec::len);
        let values: Vec<f64> = report.importance_first.iter().flatten().copied().collect();
        let (w, h, px) = heatmap_rgb(&values, rows, cols, 16, 0.0, 1.0);
        self.tb
            .add_image_rgb("sink/importance_first_map", step as i64, w, h, &px)?;
        self.tb
            .add_histogram("sink/importance_first_hist", step as i64, &values)?;
        Ok(())
    }

    fn text(&mut self, tag: &str, text: &str) -> Result<()> {
        self.tb.add_text(tag, 0, text)?;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.tb.flush()?;
        self.jsonl.flush()?;
        Ok(())
    }
}

/// Parameter-name suffixes of the scalar and per-head gains (REFERENCE §2–3).
const GAIN_SUFFIXES: [&str; 11] = [
    ".alpha_sa",
    ".beta_sa",
    ".alpha_ff",
    ".beta_ff",
    ".shape_alpha",
    ".shape_beta",
    ".shape_gamma",
    ".wv.alpha",
    ".wv.beta",
    ".wo.alpha",
    ".wo.beta",
];

/// Every gain of the model as TensorBoard scalars: `gains/blocks.3.beta_ff` for a scalar gain,
/// `gains/blocks.3.attn.shape_alpha/h0` for head 0 of a per-head one. Constant gains (not
/// parameters, or parameters that are never trained) are included once they are parameters.
pub fn gain_scalars(model: &Lm) -> Vec<(String, f64)> {
    let gains = optim::export_params_where(model, &|name| {
        GAIN_SUFFIXES.iter().any(|s| name.ends_with(s))
    });
    let mut out = Vec::new();
    for (name, t) in gains {
        if t.data.len() == 1 {
            out.push((format!("gains/{name}"), t.data[0] as f64));
        } else {
            for (h, v) in t.data.iter().enumerate() {
                out.push((format!("gains/{name}/h{h}"), *v as f64));
            }
        }
    }
    out
}

/// Token ids and loss mask of a batch as device tensors.
pub fn batch_tensors(b: &Batch, device: &Device) -> (Tensor<2, Int>, Tensor<2, Int>, Tensor<2>) {
    let shape = [b.batch, b.len];
    let x: Vec<i64> = b.inputs.iter().map(|&t| t as i64).collect();
    let y: Vec<i64> = b.targets.iter().map(|&t| t as i64).collect();
    (
        Tensor::from_data(TensorData::new(x, shape), device),
        Tensor::from_data(TensorData::new(y, shape), device),
        Tensor::from_data(TensorData::new(b.loss_mask.clone(), shape), device),
    )
}

fn slice_batch(b: &Batch, from: usize, to: usize) -> Batch {
    let l = b.len;
    Batch {
        batch: to - from,
        len: l,
        inputs: b.inputs[from * l..to * l].to_vec(),
        targets: b.targets[from * l..to * l].to_vec(),
        loss_mask: b.loss_mask[from * l..to * l].to_vec(),
        domains: b.domains[from..to].to_vec(),
    }
}

/// Forward and backward over the micro-batches of one optimizer step: gradients summed over
/// micro-batches and the step's mean loss. Each micro-batch's loss is divided by the step's
/// total number of counted targets, so the sum is the mean over the whole step. Micro-batches
/// run concurrently on `workers` (each on its own replica of the model); gradients and losses
/// are summed in micro-batch order, so the result does not depend on the number of workers.
pub fn gradients(
    model: &Lm,
    batches: &[Batch],
    device: &Device,
    workers: &Workers,
) -> (GradAccumulator, f64) {
    let denom: f64 = batches
        .iter()
        .flat_map(|b| b.loss_mask.iter())
        .map(|&m| m as f64)
        .sum();
    let parts = workers.map(batches.len(), |i| {
        let (replica, dev) = match workers.device_of(i) {
            // A copy of the weights on the worker's device (a leaf of its own graph there).
            Some(d) => (parallel::replica(&model.clone().fork(d)), d),
            None => (parallel::replica(model), device),
        };
        let (x, y, m) = batch_tensors(&batches[i], dev);
        let loss = model::masked_nll(replica.forward(x), y, m, denom.max(1.0));
        let mut grads = GradAccumulator::default();
        grads.add(&replica, &loss.backward());
        let grads = if dev == device {
            grads
        } else {
            grads.to_device(device)
        };
        (grads, loss.into_scalar::<f32>() as f64)
    });
    let mut grads = GradAccumulator::default();
    let mut loss = 0.0;
    for (g, l) in parts {
        grads.merge(g);
        loss += l;
    }
    (grads, loss)
}

/// Mean next-token loss of a fixed batch, without gradients, in chunks of `chunk` sequences.
pub fn eval_loss(model: &Lm, batch: &Batch, chunk: usize, device: &Device) -> f64 {
    eval_loss_filtered(model, batch, chunk, device, None)
}

/// [`eval_loss`] with a residual-stream filter applied (dark-signal experiments).
pub fn eval_loss_filtered(
    model: &Lm,
    batch: &Batch,
    chunk: usize,
    device: &Device,
    filter: Option<&model::StreamFilter>,
) -> f64 {
    let model = model.valid();
    let denom: f64 = batch.loss_mask.iter().map(|&m| m as f64).sum();
    let mut total = 0.0;
    let mut from = 0;
    while from < batch.batch {
        let to = (from + chunk).min(batch.batch);
        let (x, y, m) = batch_tensors(&slice_batch(batch, from, to), device);
        let logits = match filter {
            Some(f) => model.forward_filtered(x, f),
            None => model.forward(x),
        };
        let loss = model::masked_nll(logits, y, m, denom);
        total += loss.into_scalar::<f32>() as f64;
        from = to;
    }
    total
}

fn concat_arrays(parts: Vec<Array>) -> Array {
    let mut shape = parts[0].shape.clone();
    shape[0] = parts.iter().map(|p| p.shape[0]).sum();
    let data = parts.into_iter().flat_map(|p| p.data).collect();
    Array::new(shape, data)
}

/// Run the probe set through the probe path and compute every sink metric.
pub fn probe_metrics(
    model: &Lm,
    probe: &Batch,
    chunk: usize,
    exp: &Experiment,
    device: &Device,
) -> SinkReport {
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let layers = probe_layers(model, probe, chunk, proxy, device, None, false);
    SinkReport::compute(&layers, &exp.metrics.eps, exp.metrics.k_max)
}

/// Host copies of every layer's probe tensors for a batch (attention through `proxy`, split
/// into real-token attention and slot mass), with an optional residual-stream filter; queries
/// only when `queries` is set.
pub fn probe_layers(
    model: &Lm,
    probe: &Batch,
    chunk: usize,
    proxy: Proxy,
    device: &Device,
    filter: Option<&model::StreamFilter>,
    queries: bool,
) -> Vec<LayerArrays> {
    let model = model.valid();
    let n_layers = model.blocks.len();
    #[derive(Default)]
    struct Acc {
        attn: Vec<Array>,
        mass: Vec<Array>,
        queries: Vec<Array>,
        keys: Vec<Array>,
        values: Vec<Array>,
        hidden: Vec<Array>,
        gate: (f64, usize),
    }
    let mut per_layer: Vec<Acc> = (0..n_layers).map(|_| Acc::default()).collect();
    let mut has_slots = proxy == Proxy::ImplicitSlot;
    let mut from = 0;
    while from < probe.batch {
        let to = (from + chunk).min(probe.batch);
        let (x, _, _) = batch_tensors(&slice_batch(probe, from, to), device);
        let (_, layers) = model.forward_probe_filtered(x, filter);
        for (acc, p) in per_layer.iter_mut().zip(layers) {
            let w = to_array(p.attn.expect("the probe path records attention weights"));
            has_slots |= p.slot_cols + p.sink_tokens > 0;
            let (attn, mass) = split_attention(&w, p.slot_cols, p.sink_tokens, proxy);
            acc.attn.push(attn);
            acc.mass.push(mass);
            if queries {
                acc.queries.push(to_array(p.queries.expect("queries")));
            }
            acc.keys.push(to_array(p.keys.expect("keys")));
            acc.values.push(to_array(p.values.expect("values")));
            acc.hidden.push(to_array(p.hidden.expect("hidden")));
            if let Some(g) = p.gate {
                let g = to_array(g);
                acc.gate.0 += g.data.iter().map(|&x| x as f64).sum::<f64>();
                acc.gate.1 += g.data.len();
            }
        }
        from = to;
    }
    per_layer
        .into_iter()
        .map(|acc| LayerArrays {
            attn: concat_arrays(acc.attn),
            slot_mass: has_slots.then(|| concat_arrays(acc.mass)),
            queries: queries.then(|| concat_arrays(acc.queries)),
            keys: concat_arrays(acc.keys),
            values: concat_arrays(acc.values),
            hidden: concat_arrays(acc.hidden),
            gate_mean: (acc.gate.1 > 0).then(|| acc.gate.0 / acc.gate.1 as f64),
        })
        .collect()
}

/// A device tensor's host copy.
pub fn to_array<const D: usize>(t: Tensor<D>) -> Array {
    let shape = t.dims().to_vec();
    Array::new(
        shape,
        t.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32"),
    )
}

/// sha256 of the resolved config text: a checkpoint only resumes the run it belongs to.
pub fn config_digest(exp: &Experiment) -> String {
    use sha2::{Digest, Sha256};
    data::hex(&Sha256::digest(exp.to_toml().as_bytes()))
}

/// `(run directory, checkpoint directory)` for a checkpoint directory or a run directory (whose
/// newest checkpoint is taken).
pub fn locate_checkpoint(path: &Path) -> Result<(PathBuf, PathBuf)> {
    if path.join("state.json").exists() {
        let run_dir = path.parent().and_then(Path::parent).ok_or_else(|| {
            anyhow!(
                "{}: checkpoint is not inside a run directory",
                path.display()
            )
        })?;
        Ok((run_dir.to_path_buf(), path.to_path_buf()))
    } else {
        let (_, c) = checkpoint::list_checkpoints(path).pop().ok_or_else(|| {
            anyhow!(
                "{}: no checkpoint found (expected a run directory or checkpoints/step_N)",
                path.display()
            )
        })?;
        Ok((path.to_path_buf(), c))
    }
}

/// Load a model from a checkpoint directory (or the newest checkpoint of a run directory).
pub fn load_checkpoint(
    path: &Path,
    device: &Device,
) -> Result<(Experiment, Lm, PathBuf, CheckpointState)> {
    let (run_dir, ckpt) = locate_checkpoint(path)?;
    let resolved = run_dir.join("resolved.toml");
    let text = std::fs::read_to_string(&resolved)
        .with_context(|| format!("reading {}", resolved.display()))?;
    let exp = config::from_str(&resolved.display().to_string(), &text)?;
    let state: CheckpointState =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("state.json"))?)?;
    let model = Lm::new(&exp.model, state.vocab_size, exp.run.seed, device);
    let weights = checkpoint::load_safetensors(&ckpt.join("model.safetensors"))?;
    let model =
        optim::import_params(model, &weights).map_err(|e| anyhow!("{}: {e}", ckpt.display()))?;
    Ok((exp, model, run_dir, state))
}

/// A progress bar on stderr for `total` units of `what` (hidden when stderr is not a terminal).
pub fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} {{pos}}/{{len}} [{{bar:30}}] eta {{eta}}"
        ))
        .expect("template")
        .progress_chars("=> "),
    );
    b
}

/// A trained run opened for analysis: its config, model, data and device.
pub struct OpenRun {
    pub exp: Experiment,
    pub model: Lm,
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub state: CheckpointState,
    pub data: data::Dataset,
    pub device: Device,
}

/// Open a run directory (newest checkpoint) or checkpoint directory on `device` (default: the
/// run's own device), and prepare its data. A relative data cache directory is relative to
/// where training ran; from elsewhere the shards are rebuilt (deterministically) next to the
/// run instead.
pub fn open_run(
    path: &Path,
    device: Option<DeviceKind>,
    log: &mut dyn FnMut(&str),
) -> Result<OpenRun> {
    let (run_dir0, ckpt) = locate_checkpoint(path)?;
    let resolved = run_dir0.join("resolved.toml");
    let text = std::fs::read_to_string(&resolved).with_context(|| {
        format!(
            "{}: no resolved.toml (not a sinklab run directory)",
            run_dir0.display()
        )
    })?;
    let exp0 = config::from_str(&resolved.display().to_string(), &text)?;
    let device = backend::device(device.unwrap_or(exp0.run.device))?;
    let (exp, model, run_dir, state) = load_checkpoint(&ckpt, &device)?;
    let mut d = exp.data.clone();
    if !d.cache_dir.is_absolute() && !d.cache_dir.exists() {
        d.cache_dir = run_dir.join("_cache");
    }
    let data = data::Dataset::prepare(&d, log)?;
    Ok(OpenRun {
        exp,
        model,
        run_dir,
        checkpoint: ckpt,
        state,
        data,
        device,
    })
}

/// Train an experiment end to end.
pub fn train(
    exp: &Experiment,
    opts: &TrainOptions,
    log: &mut dyn FnMut(&str),
) -> Result<TrainSummary> {
    let run_dir = exp.run_dir();
    let resolved_path = run_dir.join("resolved.toml");
    let existing = checkpoint::list_checkpoints(&run_dir);
    let resume_from = if opts.resume {
        if resolved_path.exists() {
            let prev = std::fs::read_to_string(&resolved_path)?;
            let now = exp.to_toml();
            // Compare after re-reading the old file with today's defaults, so that a setting
            // added to sinklab since the run started (absent there, default here) still matches.
            let prev_now = toml::from_str::<toml::Table>(&prev)
                .ok()
                .and_then(|t| crate::config::from_table("resolved.toml", t).ok())
                .map(|e| e.to_toml());
            if prev != now && prev_now.as_deref() != Some(now.as_str()) {
                let old_lines: std::collections::HashSet<&str> =
                    prev_now.as_deref().unwrap_or(&prev).lines().collect();
                let changed: Vec<&str> = now
                    .lines()
                    .filter(|l| !old_lines.contains(l))
                    .take(8)
                    .collect();
                bail!(
                    "{}: --resume with a configuration that differs from the run's resolved.toml \
                     (new or changed lines: {}); resume with the same file and --set flags, or \
                     choose a new run.name",
                    run_dir.display(),
                    changed.join(" | ")
                );
            }
        }
        existing.last().cloned()
    } else {
        if !existing.is_empty() || resolved_path.exists() {
            bail!(
                "run directory {} already holds a run; pass --resume to continue it, or choose another \
                 run.name (e.g. --set run.name=NEW)",
                run_dir.display()
            );
        }
        None
    };
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    if resume_from.is_none() {
        // A fresh start (also `--resume` of a run killed before its first checkpoint): records
        // of an earlier attempt would duplicate steps.
        std::fs::remove_file(run_dir.join("metrics.jsonl")).ok();
        std::fs::remove_dir_all(run_dir.join("tb")).ok();
    }
    let resumed_step = resume_from.as_ref().map(|(s, _)| *s);
    checkpoint::write_atomic(&resolved_path, exp.to_toml().as_bytes())?;
    let prov = Provenance::collect(exp.run.device, exp.run.seed, resumed_step);
    let prov_name = match resumed_step {
        None => "provenance.json".to_string(),
        Some(s) => format!("provenance.resume_{s:08}.json"),
    };
    checkpoint::write_atomic(
        &run_dir.join(prov_name),
        serde_json::to_string_pretty(&prov)?.as_bytes(),
    )?;

    let data = Dataset::prepare(&exp.data, log)?;
    std::fs::copy(
        data.dir.join("tokenizer.json"),
        run_dir.join("tokenizer.json"),
    )?;
    let vocab = data.vocab_size();
    let base_device = backend::device(exp.run.device)?;
    let device = base_device.clone().autodiff();
    let mut model = Lm::new(&exp.model, vocab, exp.run.seed, &device);
    let mut adam = AdamW::new(&exp.optim);
    let mut start_step = 0;
    if let Some((step, dir)) = &resume_from {
        let state: CheckpointState =
            serde_json::from_str(&std::fs::read_to_string(dir.join("state.json"))?)?;
        if state.config_digest != config_digest(exp) {
            bail!(
                "{}: checkpoint belongs to another configuration",
                dir.display()
            );
        }
        let weights = checkpoint::load_safetensors(&dir.join("model.safetensors"))?;
        model =
            optim::import_params(model, &weights).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
        adam.import(
            &checkpoint::load_safetensors(&dir.join("optim.safetensors"))?,
            state.adam_t,
            &device,
        );
        start_step = *step;
        log(&format!("resuming {} from step {step}", run_dir.display()));
    }
    let n_params = model::count_params(&model);
    log(&format!(
        "model: {n_params} parameters ({} non-embedding), vocab {vocab}, device {}",
        model::non_embedding_params(&model),
        exp.run.device.name()
    ));

    let sampler = Sampler::new(&data, &exp.data, exp.model.ctx, exp.run.seed)?;
    let ignored = exp.model.attention.mask.ignored_targets();
    let mut val =
        data::validation_batch(&data, exp.train.eval_sequences, exp.model.ctx, exp.data.bos)?;
    data::ignore_first_targets(&mut val, ignored);
    let mut probe = data::validation_batch(
        &data,
        exp.metrics.probe_sequences,
        exp.metrics.probe_len,
        exp.data.bos,
    )?;
    sampler.apply_token_changes(&mut probe);
    let mut rec = Recorder::open(&run_dir, resumed_step)?;
    if resumed_step.is_none() {
        rec.text(
            "config/resolved_toml",
            &format!("```\n{}\n```", exp.to_toml()),
        )?;
        rec.text(
            "config/provenance",
            &format!("```\n{}\n```", serde_json::to_string_pretty(&prov)?),
        )?;
    }
    let chunk = exp.train.micro_batch;
    let total = exp.train.steps;
    let accum = exp.accumulation();
    let workers = if exp.run.devices > 1 {
        let devices = backend::devices(exp.run.device, exp.run.devices)?;
        Workers::for_devices(devices.into_iter().map(|d| d.autodiff()).collect())
    } else {
        Workers::for_device(exp.run.device == config::DeviceKind::Flex, accum)
    };
    log(&format!(
        "{} micro-batch{} of {} sequences per step on {} worker{} × {} thread{}",
        accum,
        if accum == 1 { "" } else { "es" },
        exp.train.micro_batch,
        workers.len(),
        if workers.len() == 1 { "" } else { "s" },
        workers.threads_per_worker(),
        if workers.threads_per_worker() == 1 {
            ""
        } else {
            "s"
        },
    ));
    let tokens_per_step = exp.train.batch_tokens as f64;

    let mut summary = TrainSummary {
        run_dir: run_dir.clone(),
        steps_done: start_step,
        first_loss: None,
        last_loss: None,
        last_val_loss: None,
        last_sink1: None,
        tokens_per_s: 0.0,
        interrupted: false,
    };
    let eval =
        |model: &Lm, step: u64, rec: &mut Recorder, summary: &mut TrainSummary| -> Result<()> {
            let v = eval_loss(model, &val, chunk, &base_device);
            rec.scalars(step, &[("val/loss".to_string(), v)])?;
            summary.last_val_loss = Some(v);
            Ok(())
        };
    let probe_all =
        |model: &Lm, step: u64, rec: &mut Recorder, summary: &mut TrainSummary| -> Result<()> {
            let report = probe_metrics(model, &probe, chunk, exp, &base_device);
            let mut scalars = report.scalars();
            scalars.extend(gain_scalars(model));
            rec.scalars(step, &scalars)?;
            rec.sink_map(step, &report)?;
            rec.flush()?;
            summary.last_sink1 = report.sink1();
            Ok(())
        };
    if start_step == 0 {
        eval(&model, 0, &mut rec, &mut summary)?;
        probe_all(&model, 0, &mut rec, &mut summary)?;
    }

    let bar = if opts.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} step {pos}/{len} [{bar:30}] {msg} eta {eta}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b.set_position(start_step);
        b
    };
    let t0 = Instant::now();
    let mut window = (Instant::now(), 0u64);
    let mut last_tps = 0.0;
    for step in start_step..total {
        let lr = optim::learning_rate(&exp.optim, step, total);
        let batches: Vec<Batch> = (0..accum)
            .map(|m| {
                let mut b = sampler.batch(&data, step, m, exp.train.micro_batch);
                data::ignore_first_targets(&mut b, ignored);
                b
            })
            .collect();
        let (grads, loss) = gradients(&model, &batches, &device, &workers);
        let gnorm = grads.global_norm();
        if !loss.is_finite() || !gnorm.is_finite() {
            bar.abandon();
            bail!(
                "non-finite {} at step {step} (loss {loss}, grad norm {gnorm}); stopping. The last good \
                 checkpoint stays in {}; lower optim.lr or tighten optim.grad_clip",
                if loss.is_finite() {
                    "gradient norm"
                } else {
                    "loss"
                },
                run_dir.join("checkpoints").display()
            );
        }
        model = adam.step(
            model,
            &grads,
            lr,
            optim::clip_scale(gnorm, exp.optim.grad_clip),
        );
        let done = step + 1;
        summary.steps_done = done;
        summary.first_loss.get_or_insert(loss);
        summary.last_loss = Some(loss);

        window.1 += 1;
        if done % exp.train.log_every == 0 || done == total {
            let dt = window.0.elapsed().as_secs_f64();
            last_tps = tokens_per_step * window.1 as f64 / dt.max(1e-9);
            window = (Instant::now(), 0);
            rec.scalars(
                done,
                &[
                    ("train/loss".into(), loss),
                    ("train/lr".into(), lr),
                    ("train/grad_norm".into(), gnorm),
                    ("train/tokens_per_s".into(), last_tps),
                    ("train/tokens_seen".into(), tokens_per_step * done as f64),
                ],
            )?;
            if opts.quiet {
                log(&format!(
                    "step {done}/{total} loss {loss:.4} lr {lr:.2e} gnorm {gnorm:.3} {last_tps:.0} tok/s"
                ));
            }
        }
        bar.set_message(format!("loss {loss:.4} | {last_tps:.0} tok/s"));
        bar.inc(1);

        let last = done == total;
        let signalled = interrupted();
        let stopping = opts.stop_after == Some(done) || signalled;
        let eval_due = done % exp.train.eval_every == 0 || last;
        let probe_due = done % exp.metrics.every == 0 || last;
        if eval_due {
            eval(&model, done, &mut rec, &mut summary)?;
        }
        if probe_due {
            probe_all(&model, done, &mut rec, &mut summary)?;
        }
        if eval_due || probe_due {
            let mut parts = Vec::new();
            if eval_due {
                parts.push(format!(
                    "val loss {:.4}",
                    summary.last_val_loss.unwrap_or(f64::NAN)
                ));
            }
            if probe_due {
                parts.push(format!(
                    "Sink1(eps=0.3) {:.1}%",
                    summary.last_sink1.unwrap_or(f64::NAN)
                ));
            }
            let msg = format!("step {done}: {}", parts.join(", "));
            if opts.quiet {
                log(&msg);
            } else {
                bar.println(msg);
            }
        }
        if done % exp.train.checkpoint_every == 0 || last || stopping {
            save_checkpoint(&run_dir, exp, &model, &adam, done, vocab)?;
        }
        if stopping && !last {
            rec.flush()?;
            summary.interrupted = signalled;
            let why = if signalled {
                "interrupted"
            } else {
                "--stop-after"
            };
            bar.abandon_with_message(format!("stopped after step {done} ({why})"));
            break;
        }
    }
    bar.finish();
    rec.flush()?;
    let steps_run = summary.steps_done - start_step;
    summary.tokens_per_s =
        tokens_per_step * steps_run as f64 / t0.elapsed().as_secs_f64().max(1e-9);
    let s = serde_json::to_string_pretty(&summary)?;
    checkpoint::write_atomic(&run_dir.join("summary.json"), s.as_bytes())?;
    Ok(summary)
}

fn save_checkpoint(
    run_dir: &Path,
    exp: &Experiment,
    model: &Lm,
    adam: &AdamW,
    step: u64,
    vocab: usize,
) -> Result<()> {
    let weights: BTreeMap<String, HostTensor> = optim::export_params(model);
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "sinklab".to_string());
    meta.insert("step".to_string(), step.to_string());
    meta.insert(
        "layout".to_string(),
        "linear weights are [d_in, d_out]".to_string(),
    );
    let state = CheckpointState {
        step,
        adam_t: adam.t,
        seed: exp.run.seed,
        config_digest: config_digest(exp),
        vocab_size: vocab,
    };
    checkpoint::commit_checkpoint(
        run_dir,
        step,
        &[
            (
                "model.safetensors",
                checkpoint::safetensors_bytes(&weights, Some(meta))?,
            ),
            (
                "optim.safetensors",
                checkpoint::safetensors_bytes(&adam.export(), None)?,
            ),
            ("state.json", serde_json::to_vec_pretty(&state)?),
        ],
        exp.train.keep_checkpoints,
    )?;
    Ok(())
}

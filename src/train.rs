//! The training loop: orchestration only. The run directory is prepared and checkpointed by
//! [`crate::run`], batches come from [`crate::data`], the model computes ([`crate::model`]), the
//! optimizer updates ([`crate::optim`]), evaluation and probes are [`crate::eval`], metric maths
//! are pure ([`crate::metrics`]) and [`Recorder`] writes.

use crate::backend;
use crate::config::{self, Experiment, Precision};
use crate::data::{self, Batch, Dataset, Sampler};
use crate::dist::{self, World};
use crate::eval::{eval_loss, probe_metrics};
use crate::metrics::HEADLINE_EPS;
use crate::model::{self, Lm};
use crate::optim::{self, LossScale, Optimizer};
use crate::parallel::Workers;
use crate::recorder::Recorder;
use crate::run;
use crate::rundir::RunDir;
use crate::tags::{Scalar, Tag};
use anyhow::{Context, Result, anyhow, bail};
use burn::tensor::Device;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

mod step;
pub use step::{StepLoss, attention_path, gradients, gradients_of, update_on_device};

/// Options of `sinklab train` beyond the experiment file.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from the newest checkpoint in the run directory.
    pub resume: bool,
    /// Stop (after checkpointing) once this many optimizer steps are done, as if killed.
    pub stop_after: Option<u64>,
    /// No progress bar (logs only).
    pub quiet: bool,
    /// Start even when the memory estimate exceeds what the device has (`--skip-memory-check`).
    pub skip_memory_check: bool,
}

/// What a finished (or stopped) run reports.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TrainSummary {
    pub run_dir: PathBuf,
    pub steps_done: u64,
    pub first_loss: Option<f64>,
    pub last_loss: Option<f64>,
    pub last_val_loss: Option<f64>,
    /// The step `last_val_loss` was measured at.
    #[serde(default)]
    pub last_val_step: Option<u64>,
    pub last_sink1: Option<f64>,
    pub tokens_per_s: f64,
    /// Stopped before its last step after checkpointing: by an interrupt (Ctrl-C / SIGINT /
    /// SIGTERM) or `--stop-after` (`stop_reason` says which); `--resume` continues it.
    /// Summaries written before this field existed read as not interrupted.
    #[serde(default)]
    pub interrupted: bool,
    /// `"signal"` or `"stop_after"` when `interrupted`.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The run's total steps (`train.steps`).
    #[serde(default)]
    pub total_steps: u64,
}

/// The summary of `exp`'s run if it already finished (its newest checkpoint is the last step,
/// with the same configuration); `--resume` of such a run is a no-op.
fn already_finished(exp: &Experiment) -> Result<Option<TrainSummary>> {
    let run_dir = exp.run_dir();
    let Some((last, dir)) = crate::checkpoint::list_checkpoints(&run_dir).pop() else {
        return Ok(None);
    };
    let intact =
        crate::checkpoint::verify_checkpoint(&dir).is_ok() && run::read_state(&dir).is_ok();
    if last != exp.train.steps || !intact {
        return Ok(None);
    }
    run::check_same_config(exp, &RunDir(&run_dir).resolved())?;
    let summary = std::fs::read_to_string(RunDir(&run_dir).summary())
        .ok()
        .and_then(|t| serde_json::from_str::<TrainSummary>(&t).ok());
    Ok(Some(summary.unwrap_or_else(|| {
        TrainSummary::empty(run_dir.clone(), exp.train.steps)
    })))
}

impl TrainSummary {
    /// A summary with no numbers yet, at `steps_done`.
    fn empty(run_dir: PathBuf, steps_done: u64) -> Self {
        TrainSummary {
            run_dir,
            steps_done,
            first_loss: None,
            last_loss: None,
            last_val_loss: None,
            last_val_step: None,
            last_sink1: None,
            tokens_per_s: 0.0,
            interrupted: false,
            stop_reason: None,
            total_steps: steps_done,
        }
    }
}

/// Set by a signal handler: the training loop checkpoints after the current step and returns
/// with `interrupted` set, so that `--resume` continues exactly.
pub static INTERRUPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn interrupted() -> bool {
    INTERRUPT.load(std::sync::atomic::Ordering::SeqCst)
}

/// Parameter-name suffixes of the scalar and per-head gains (docs/reference.md §2–3).
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
pub fn gain_scalars(model: &Lm) -> Vec<(Tag, f64)> {
    let gains = optim::export_params_where(model, &|name| {
        GAIN_SUFFIXES.iter().any(|s| name.ends_with(s))
    });
    let mut out = Vec::new();
    for (name, t) in gains {
        if t.data.len() == 1 {
            let tag = Tag::Gain {
                param: name,
                head: None,
            };
            out.push((tag, t.data[0] as f64));
        } else {
            for (h, v) in t.data.iter().enumerate() {
                let tag = Tag::Gain {
                    param: name.clone(),
                    head: Some(h),
                };
                out.push((tag, *v as f64));
            }
        }
    }
    out
}

/// Everything a run holds while it trains.
struct Trainer<'a> {
    exp: &'a Experiment,
    run_dir: PathBuf,
    data: Dataset,
    sampler: Sampler,
    /// Validation sequences with the training data's token changes; the unchanged text too
    /// when there are changes.
    val: Batch,
    val_plain: Option<Batch>,
    /// The validation batch split by target kind on a synthetic task, with each part's metric
    /// name: copy / bigram targets (Bigram-Backcopy), repeated / fresh (repeat); split once.
    val_parts: Vec<(Scalar, Batch)>,
    probe: Batch,
    /// The live head scores' repeat probe (`metrics.heads`), when enabled.
    head_probe: Option<Batch>,
    adam: Optimizer,
    /// The autodiff device training runs on, and its plain counterpart for evaluation.
    device: Device,
    base_device: Device,
    workers: Workers,
    /// The MPI ranks training this run (one process: a world of one).
    world: &'a World,
    rec: Recorder,
    vocab: usize,
    start_step: u64,
    summary: TrainSummary,
    /// Dynamic loss scaling (`train.precision = "f16"` only).
    loss_scale: Option<LossScale>,
}

/// One optimizer step's numbers.
struct StepStats {
    loss: f64,
    lr: f64,
    gnorm: f64,
}

/// `train.init_from`: every parameter found in `src` with the same shape replaces the fresh
/// one; the rest stay fresh and are named in the log.
fn init_from(model: Lm, src: &std::path::Path, log: &mut dyn FnMut(&str)) -> Result<Lm> {
    let (_, ckpt) = run::locate_checkpoint(src)
        .with_context(|| format!("train.init_from = {}", src.display()))?;
    let mut from = crate::checkpoint::load_safetensors(&ckpt.join("model.safetensors"))?;
    let fresh = crate::optim::export_params(&model);
    let (mut merged, mut kept_fresh, mut problems) = (BTreeMap::new(), Vec::new(), Vec::new());
    let mut loaded = 0usize;
    for (name, t) in fresh {
        match from.remove(&name) {
            Some(s) if s.shape == t.shape => {
                loaded += s.data.len();
                merged.insert(name, s);
            }
            Some(s) => {
                problems.push(format!(
                    "`{name}` is {:?} there, {:?} here",
                    s.shape, t.shape
                ));
                merged.insert(name, t);
            }
            None => {
                kept_fresh.push(name.clone());
                merged.insert(name, t);
            }
        }
    }
    problems.extend(
        from.keys()
            .map(|n| format!("`{n}` has no place in this model")),
    );
    if !problems.is_empty() {
        bail!(
            "train.init_from = {}: the checkpoint does not fit this model: {}",
            ckpt.display(),
            problems.join("; ")
        );
    }
    let model = crate::optim::import_params_owned(model, merged).map_err(|e| anyhow!(e))?;
    log(&format!(
        "init_from {}: {loaded} values loaded; initialised fresh: {}",
        ckpt.display(),
        if kept_fresh.is_empty() {
            "nothing".to_string()
        } else {
            kept_fresh.join(", ")
        }
    ));
    Ok(model)
}

impl<'a> Trainer<'a> {
    /// Prepare the run directory, the data, the model (restored from the newest checkpoint
    /// when resuming), the fixed validation and probe batches, the writers and the workers.
    fn open(
        exp: &'a Experiment,
        start: &run::Start,
        memory: &crate::memory::Check,
        world: &'a World,
        log: &mut dyn FnMut(&str),
    ) -> Result<(Self, Lm)> {
        for w in &start.warnings {
            log(w);
        }
        let run_dir = start.run_dir.clone();
        // the device first: a backend that is not compiled in fails before any data work
        let base_device = backend::device_at(exp.run.device, world.gpu_index())?;
        backend::check_precision(exp.run.device, &base_device, exp.train.precision)?;
        let data = Dataset::prepare(&exp.data, log)?;
        if world.is_root() {
            std::fs::copy(
                data.dir.join("tokenizer.json"),
                RunDir(&run_dir).tokenizer(),
            )?;
            run::record_prepared_data(&run_dir, &data)?;
        }
        let vocab = exp.model.vocab_size.unwrap_or(data.vocab_size());
        if vocab < data.vocab_size() {
            bail!(
                "model.vocab_size = {vocab} is smaller than the tokenizer's {} ids",
                data.vocab_size()
            );
        }
        let device = base_device.clone().autodiff();
        let mut model = Lm::new(&exp.model, vocab, exp.run.seed, &device);
        let mut adam = Optimizer::new(&exp.optim);
        let mut start_step = 0;
        let mut loss_scale = (exp.train.precision == Precision::F16).then(LossScale::new);
        let mut first_loss = None;
        if let Some((_, dir)) = &start.resume_from {
            let state = run::read_state(dir)?;
            if let Some(ls) = state.loss_scale {
                loss_scale = Some(ls);
            }
            // the run's first loss, not the resumed segment's
            first_loss = state.first_loss;
            let (restored, step) = run::restore(
                exp,
                start.previous_digest.as_deref(),
                dir,
                model,
                &mut adam,
                &device,
            )?;
            model = restored;
            start_step = step;
            log(&format!("resuming {} from step {step}", run_dir.display()));
        } else if let Some(src) = &exp.train.init_from {
            model = init_from(model, src, log)?;
        }
        if let Some(patterns) = &exp.train.trainable {
            let (frozen_model, trainable, frozen) = optim::freeze(model, patterns)?;
            model = frozen_model;
            log(&format!(
                "trainable: {trainable} parameters (train.trainable = {patterns:?}); frozen: {frozen}"
            ));
        }
        log(&format!(
            "model: {} parameters ({} non-embedding), vocab {vocab}, device {}, precision {}",
            model::count_params(&model),
            model::non_embedding_params(&model),
            exp.run.device.name(),
            exp.train.precision.name()
        ));
        log(&memory.line());
        if let Some(k) = crate::kernels::summary(&exp.model, exp.run.device, exp.train.precision) {
            log(&k);
        }
        if let Some(line) = attention_path(exp, &device) {
            log(&line);
        }
        let sampler = Sampler::new(&data, &exp.data, exp.model.ctx, exp.run.seed)?;
        let mut val_plain =
            data::validation_batch(&data, exp.train.eval_sequences, exp.model.ctx, exp.data.bos)?;
        data::ignore_first_targets(&mut val_plain, exp.model.attention.mask.ignored_targets());
        // The validation loss is measured on sequences with the training data's token changes
        // (a fixed or random token), as trained; runs with such changes also log the loss on
        // the unchanged text as `val/loss_unchanged`.
        let mut val = val_plain.clone();
        sampler.apply_token_changes(&mut val);
        let val_plain = sampler.has_token_changes().then_some(val_plain);
        let mut val_parts = Vec::new();
        if let Some((copy, bigram)) = data::split_targets(&exp.data, &val) {
            val_parts.extend([(Scalar::BbLossCopy, copy), (Scalar::BbLossBigram, bigram)]);
        }
        if let Some((repeated, fresh)) = data::split_repeated(&exp.data, &val) {
            val_parts.extend([
                (Scalar::RepeatLossRepeated, repeated),
                (Scalar::RepeatLossFresh, fresh),
            ]);
        }
        let mut probe = data::validation_batch(
            &data,
            exp.metrics.probe_sequences,
            exp.metrics.probe_len,
            exp.data.bos,
        )?;
        sampler.apply_token_changes(&mut probe);
        let head_probe = data::repeat::live_probe(&exp.metrics.heads, &data, exp.data.bos)?;
        let mut rec = match world.is_root() {
            true => Recorder::open(&run_dir, start.resumed_step())?,
            false => Recorder::disabled(), // rank 0 is the one writer
        };
        if start.resume_from.is_none() {
            rec.text(
                "config/resolved_toml",
                &format!("```\n{}\n```", exp.to_toml()),
            )?;
            rec.text(
                "config/provenance",
                &format!(
                    "```\n{}\n```",
                    serde_json::to_string_pretty(&start.provenance)?
                ),
            )?;
        }
        let accum = exp.accumulation();
        let mine = dist::share(accum, world.rank(), world.size()).len();
        let workers = Workers::for_device(exp.run.device == config::DeviceKind::Flex, mine);
        let plural = |n: usize, s: &'static str| if n == 1 { "" } else { s };
        log(&format!(
            "{accum} micro-batch{} of {} sequences per step{} on {} worker{} × {} thread{}",
            plural(accum, "es"),
            exp.train.micro_batch,
            dist::ranks_note(world, mine),
            workers.len(),
            plural(workers.len(), "s"),
            workers.threads_per_worker(),
            plural(workers.threads_per_worker(), "s"),
        ));
        let mut summary = TrainSummary::empty(run_dir.clone(), start_step);
        summary.total_steps = exp.train.steps;
        summary.first_loss = first_loss;
        Ok((
            Self {
                exp,
                run_dir,
                data,
                sampler,
                val,
                val_plain,
                val_parts,
                probe,
                head_probe,
                adam,
                device,
                base_device,
                workers,
                world,
                rec,
                vocab,
                start_step,
                summary,
                loss_scale,
            },
            model,
        ))
    }

    /// Optimizer step `step` (0-based): the micro-batches' gradients, clipping, AdamW. The
    /// model is taken and given back (AdamW consumes it, so that parameters it alone holds are
    /// updated in place); the training loop owns it between steps.
    fn step(&mut self, model: Lm, step: u64) -> Result<(Lm, StepStats)> {
        let exp = self.exp;
        let lr = optim::learning_rate(&exp.optim, step, exp.train.steps);
        let ignored = exp.model.attention.mask.ignored_targets();
        let batches: Vec<Batch> = (0..exp.accumulation())
            .map(|m| {
                let mut b = self
                    .sampler
                    .batch(&self.data, step, m, exp.train.micro_batch);
                data::ignore_first_targets(&mut b, ignored);
                b
            })
            .collect();
        let scale = self.loss_scale.as_ref().map_or(1.0, |l| l.scale);
        let (grads, loss) = gradients_of(
            &model,
            &batches,
            dist::share(batches.len(), self.world.rank(), self.world.size()),
            &self.device,
            &self.workers,
            exp.train.precision,
            scale,
        );
        if self.on_device_step() {
            let (model, loss, gnorm) =
                update_on_device(model, &mut self.adam, &grads, loss, lr, exp.optim.grad_clip);
            if !loss.is_finite() || !gnorm.is_finite() {
                bail!("{}", self.non_finite(step, loss, gnorm));
            }
            let s = &mut self.summary;
            s.steps_done = step + 1;
            s.first_loss.get_or_insert(loss);
            s.last_loss = Some(loss);
            return Ok((model, StepStats { loss, lr, gnorm }));
        }
        let loss = loss.read();
        // summed over the MPI ranks (a no-op for one process)
        let (grads, loss) = dist::sum_gradients(self.world, grads, loss, step)?;
        let gnorm = grads.global_norm() / scale;
        if let Some(ls) = &mut self.loss_scale {
            // f16: a step that overflowed is skipped and the scale halved
            if !ls.update(loss.is_finite() && gnorm.is_finite()) {
                if ls.scale < LossScale::MIN {
                    bail!(
                        "train.precision = \"f16\": the loss scale fell to {:.1e} after {} \
                         skipped steps at step {step}: the model overflows f16 at any scale; \
                         use \"bf16\" or \"f32\"",
                        ls.scale,
                        ls.skipped
                    );
                }
                self.summary.steps_done = step + 1;
                return Ok((model, StepStats { loss, lr, gnorm }));
            }
        }
        if !loss.is_finite() || !gnorm.is_finite() {
            bail!("{}", self.non_finite(step, loss, gnorm));
        }
        let model = self.adam.step(
            model,
            &grads,
            lr,
            optim::clip_scale(gnorm, exp.optim.grad_clip) / scale,
        );
        let s = &mut self.summary;
        s.steps_done = step + 1;
        s.first_loss.get_or_insert(loss);
        s.last_loss = Some(loss);
        Ok((model, StepStats { loss, lr, gnorm }))
    }

    /// Whether this run's steps keep their reductions on the device ([`update_on_device`]):
    /// on a GPU, except under f16 loss scaling, whose skip-or-update decision reads the loss
    /// and the norm before the update, and except with several MPI ranks, whose gradient sum
    /// goes through the host anyway. On the CPU the host reads are free and the f64 norm of
    /// the CPU kernels is kept.
    fn on_device_step(&self) -> bool {
        !backend::is_cpu(&self.base_device) && self.loss_scale.is_none() && self.world.size() == 1
    }

    /// The error of a non-finite loss or gradient norm at `step`.
    fn non_finite(&self, step: u64, loss: f64, gnorm: f64) -> String {
        let last_good = match crate::checkpoint::list_checkpoints(&self.run_dir).pop() {
            Some((s, dir)) => format!(
                "the last good checkpoint (step {s}) stays in {}",
                dir.display()
            ),
            None => "no checkpoint was written before it".to_string(),
        };
        format!(
            "non-finite {} at step {step} (loss {loss}, grad norm {gnorm}); stopping; \
             {last_good}. Lower optim.lr or tighten optim.grad_clip",
            if loss.is_finite() {
                "gradient norm"
            } else {
                "loss"
            },
        )
    }

    /// `val/loss` (and `val/loss_unchanged`) at `step` (rank 0 alone).
    fn evaluate(&mut self, model: &Lm, step: u64) -> Result<()> {
        if !self.world.is_root() {
            return Ok(());
        }
        let chunk = self.exp.train.micro_batch;
        let v = eval_loss(model, &self.val, chunk, &self.base_device);
        let mut scalars = vec![(Scalar::ValLoss.into(), v)];
        if let Some(plain) = &self.val_plain {
            let u = eval_loss(model, plain, chunk, &self.base_device);
            scalars.push((Scalar::ValLossUnchanged.into(), u));
        }
        for (name, part) in &self.val_parts {
            let l = eval_loss(model, part, chunk, &self.base_device);
            scalars.push(((*name).into(), l));
        }
        self.rec.scalars(step, &scalars)?;
        self.summary.last_val_loss = Some(v);
        self.summary.last_val_step = Some(step);
        Ok(())
    }

    /// Every sink metric and gain on the probe set at `step`, the per-head sink map, and the
    /// live head scores with their maps (`metrics.heads`). Rank 0 alone.
    fn probe(&mut self, model: &Lm, step: u64) -> Result<()> {
        if !self.world.is_root() {
            return Ok(());
        }
        let chunk = self.exp.train.micro_batch;
        let report = probe_metrics(model, &self.probe, chunk, self.exp, &self.base_device);
        let mut scalars = report.scalars();
        scalars.extend(gain_scalars(model));
        let proxy = crate::metrics::Proxy::for_normaliser(&self.exp.model.attention.normaliser);
        let heads = self.head_probe.as_ref().map(|hp| {
            crate::eval::heads::head_scores(
                model,
                hp,
                chunk,
                proxy,
                crate::heads::Measure::Primary,
                &self.base_device,
                &mut |_| {},
            )
        });
        if let Some(layers) = &heads {
            scalars.extend(crate::heads::live_scalars(layers));
        }
        self.rec.scalars(step, &scalars)?;
        self.rec.sink_map(step, &report, proxy)?;
        if let Some(layers) = &heads {
            self.rec.head_maps(step, layers)?;
        }
        self.rec.flush()?;
        self.summary.last_sink1 = report.sink1();
        Ok(())
    }
}

/// Train an experiment end to end: every step, the training scalars every `log_every`, the
/// validation loss every `eval_every`, the probes every `metrics.every`, a checkpoint every
/// `checkpoint_every` (and at the last step, and before stopping on a signal).
pub fn train(
    exp: &Experiment,
    opts: &TrainOptions,
    log: &mut dyn FnMut(&str),
) -> Result<TrainSummary> {
    train_in(&World::single(), exp, opts, log)
}

/// [`train`] as one rank of `world` (`mpirun -np N sinklab train`: [`crate::dist`]); rank 0
/// writes everything, the summary every rank returns has the losses of the whole step.
pub fn train_in(
    world: &World,
    exp: &Experiment,
    opts: &TrainOptions,
    log: &mut dyn FnMut(&str),
) -> Result<TrainSummary> {
    if opts.resume
        && let Some(done) = already_finished(exp)?
    {
        log(&format!(
            "{} already finished all {}; nothing to do (its files are unchanged). To train \
             on from its weights, start a new run with --set 'train.init_from=\"{}\"'",
            done.run_dir.display(),
            crate::progress::count(done.steps_done, "step", None),
            done.run_dir.display()
        ));
        return Ok(done);
    }
    if let Some((path, m)) = exp.init_from_problem() {
        bail!("`{path}`: {m}");
    }
    // Memory first: a run that cannot fit is refused before anything is written or built.
    let trainable = crate::model::trainable_elements(exp)?;
    let memory = crate::memory::preflight(exp, opts.skip_memory_check, trainable)?;
    // The run directory, locked for the whole of this function (`start.lock`; by rank 0).
    let start = dist::start(world, exp, opts.resume, &dist::device_name(world, exp))?;
    // A fresh start that fails before step 0 is recorded leaves nothing behind (and one killed
    // before its first checkpoint leaves files the next start replaces).
    let discard = |e: anyhow::Error| {
        run::discard_stub(&start);
        e
    };
    let (mut t, mut model) = Trainer::open(exp, &start, &memory, world, log).map_err(discard)?;
    let (start_step, total) = (t.start_step, exp.train.steps);
    dist::check_weights(world, &model, start_step, log).map_err(discard)?;
    if start_step == 0 {
        let first = t.evaluate(&model, 0).and_then(|_| t.probe(&model, 0));
        if let Err(e) = first {
            drop(t);
            return Err(discard(e));
        }
    }
    // A terminal gets a progress bar; without one (CI, nohup, a sweep child) progress comes as
    // about 20 plain lines; --quiet prints only the evaluation and probe lines.
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let show_bar = !opts.quiet && tty;
    let line_every = (!opts.quiet && !tty).then(|| exp.train.log_every.max(total / 20).max(1));
    let bar = if !show_bar {
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
    let tokens_per_step = exp.train.batch_tokens as f64;
    let t0 = Instant::now();
    let mut window = (Instant::now(), 0u64);
    let mut last_tps = 0.0;
    for step in start_step..total {
        let (stepped, StepStats { loss, lr, gnorm }) =
            t.step(model, step).inspect_err(|_| bar.abandon())?;
        model = stepped;
        let done = step + 1;
        window.1 += 1;
        if done % exp.train.log_every == 0 || done == total {
            last_tps =
                tokens_per_step * window.1 as f64 / window.0.elapsed().as_secs_f64().max(1e-9);
            window = (Instant::now(), 0);
            let mut scalars: Vec<(Tag, f64)> = vec![
                (Scalar::TrainLr.into(), lr),
                (Scalar::TrainTokensPerS.into(), last_tps),
                (
                    Scalar::TrainTokensSeen.into(),
                    tokens_per_step * done as f64,
                ),
            ];
            // a step f16 loss scaling skipped has no finite loss or gradient norm to record
            if loss.is_finite() && gnorm.is_finite() {
                scalars.push((Scalar::TrainLoss.into(), loss));
                scalars.push((Scalar::TrainGradNorm.into(), gnorm));
            }
            if let Some(ls) = &t.loss_scale {
                scalars.push((Scalar::TrainLossScale.into(), ls.scale));
                scalars.push((Scalar::TrainSkippedSteps.into(), ls.skipped as f64));
            }
            t.rec.scalars(done, &scalars)?;
        }
        if let Some(k) = line_every
            && (done % k == 0 || done == total)
        {
            let rate = (done - start_step) as f64 / t0.elapsed().as_secs_f64().max(1e-9);
            log(&format!(
                "step {done}/{total} loss {loss:.4} lr {lr:.2e} gnorm {gnorm:.3} {last_tps:.0} tok/s, eta {:.0} s",
                (total - done) as f64 / rate.max(1e-9)
            ));
        }
        bar.set_message(format!("loss {loss:.4} | {last_tps:.0} tok/s"));
        bar.inc(1);

        let last = done == total;
        let signalled = world.any(interrupted()); // every rank stops at the same step
        let stopping = opts.stop_after == Some(done) || signalled;
        let mut parts = Vec::new();
        if done % exp.train.eval_every == 0 || last {
            t.evaluate(&model, done)?;
            parts.push(format!(
                "val loss {:.4}",
                t.summary.last_val_loss.unwrap_or(f64::NAN)
            ));
        }
        if done % exp.metrics.every == 0 || last {
            t.probe(&model, done)?;
            parts.push(format!(
                "Sink1(eps={HEADLINE_EPS}) {:.1}%",
                t.summary.last_sink1.unwrap_or(f64::NAN)
            ));
        }
        if !parts.is_empty() {
            let msg = format!("step {done}: {}", parts.join(", "));
            if show_bar {
                bar.println(msg);
            } else {
                log(&msg);
            }
        }
        if done % exp.train.checkpoint_every == 0 || last || stopping {
            dist::check_weights(world, &model, done, log)?;
            // events and records up to this step reach the disk before the checkpoint that a
            // resume starts from
            t.rec.flush()?;
            if world.is_root() {
                run::save_checkpoint(
                    &t.run_dir,
                    exp,
                    &model,
                    &t.adam,
                    run::Reached {
                        step: done,
                        vocab: t.vocab,
                        loss_scale: t.loss_scale.as_ref(),
                        first_loss: t.summary.first_loss,
                    },
                )?;
            }
        }
        if stopping && !last {
            t.rec.flush()?;
            t.summary.interrupted = true;
            t.summary.stop_reason = Some(if signalled { "signal" } else { "stop_after" }.into());
            let why = if signalled {
                "interrupted"
            } else {
                "--stop-after"
            };
            bar.abandon_with_message(format!("stopped after step {done} ({why})"));
            break;
        }
    }
    bar.finish_and_clear();
    t.rec.flush()?;
    let mut summary = t.summary;
    let steps_run = summary.steps_done - start_step;
    summary.tokens_per_s =
        tokens_per_step * steps_run as f64 / t0.elapsed().as_secs_f64().max(1e-9);
    if world.is_root() {
        let s = serde_json::to_string_pretty(&summary)?;
        crate::checkpoint::write_atomic(&RunDir(&t.run_dir).summary(), s.as_bytes())?;
    }
    world.barrier(); // no rank ends (and no launcher kills the job) while rank 0 writes
    Ok(summary)
}

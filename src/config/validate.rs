//! Range and combination checks of a deserialized experiment: every problem at once, each
//! with its TOML path and what would be valid.

use super::schema::*;
use crate::rundir::RunDir;

/// `x > bound`, false for NaN (so `!greater(x, b)` also rejects NaN).
fn greater(x: f64, bound: f64) -> bool {
    x > bound
}

impl Experiment {
    /// `train.init_from` names a run or checkpoint directory that exists on this machine: a
    /// check of the machine, like the corpus files (`train` and `check` make it; `check
    /// --schema-only` does not). (TOML path, message) when it does not.
    pub fn init_from_problem(&self) -> Option<(String, String)> {
        let p = self.train.init_from.as_ref()?;
        (!RunDir(p).resolved().exists() && !p.join("model.safetensors").exists()).then(|| {
            (
                "train.init_from".to_string(),
                format!(
                    "found {:?}, which is neither a run directory (with resolved.toml) nor a \
                     checkpoint directory (with model.safetensors); give runs/NAME, \
                     runs/NAME/checkpoints/step_N or a directory `sinklab import` wrote",
                    p.display().to_string()
                ),
            )
        })
    }

    /// Range and combination checks. Returns (TOML path, message) for every problem.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        let mut bad = |p: &str, m: String| v.push((p.to_string(), m));
        let m = &self.model;
        let d = &self.data;
        let o = &self.optim;
        let t = &self.train;
        let mt = &self.metrics;

        if self.run.devices != 1 {
            bad(
                "run.devices",
                format!(
                    "found {}, expected 1: a process trains on one device. For several GPUs or \
                     machines start one MPI rank per GPU, `mpirun -np N sinklab train FILE` \
                     (each rank takes the GPU of its local rank; a sinklab built with \
                     `--features mpi`; docs/distributed.md); on the CPU one process already \
                     uses every core",
                    self.run.devices
                ),
            );
        }
        if !crate::config::is_plain_name(&self.run.name) {
            bad(
                "run.name",
                format!(
                    "found `{}`, expected a non-empty name of letters, digits, '-', '_' or '.', \
                     not only dots (the run directory is run.out_dir/run.name and must stay inside it)",
                    self.run.name
                ),
            );
        }
        for (p, val, min) in [
            ("model.d_model", m.d_model, 1),
            ("model.n_layers", m.n_layers, 1),
            ("model.n_heads", m.n_heads, 1),
            ("model.d_ff", m.d_ff, 1),
            ("model.ctx", m.ctx, 2),
            ("train.micro_batch", t.micro_batch, 1),
            ("train.batch_tokens", t.batch_tokens, 1),
            ("train.eval_sequences", t.eval_sequences, 1),
            ("train.keep_checkpoints", t.keep_checkpoints, 1),
            ("metrics.probe_sequences", mt.probe_sequences, 1),
            ("metrics.probe_len", mt.probe_len, 2),
            ("metrics.k_max", mt.k_max, 1),
        ] {
            if val < min {
                bad(p, format!("found {val}, expected an integer ≥ {min}"));
            }
        }
        for (p, val) in [
            ("train.steps", t.steps),
            ("train.eval_every", t.eval_every),
            ("train.checkpoint_every", t.checkpoint_every),
            ("train.log_every", t.log_every),
            ("metrics.every", mt.every),
        ] {
            if val == 0 {
                bad(p, "found 0, expected an integer ≥ 1".into());
            }
        }
        if m.n_heads > 0 && !m.d_model.is_multiple_of(m.n_heads) {
            bad(
                "model.n_heads",
                format!(
                    "d_model = {} is not divisible by n_heads = {}; choose n_heads among the divisors of d_model",
                    m.d_model, m.n_heads
                ),
            );
        }
        let heads_ok = m.n_heads > 0 && m.d_model.is_multiple_of(m.n_heads);
        let dh = if heads_ok { m.d_head() } else { 0 };
        if let Some(kv) = m.n_kv_heads {
            if kv == 0 || !m.n_heads.is_multiple_of(kv) {
                bad(
                    "model.n_kv_heads",
                    format!(
                        "found {kv}, expected a divisor of n_heads = {} (each key/value head \
                         serves n_heads / n_kv_heads query heads)",
                        m.n_heads
                    ),
                );
            }
            if kv < m.n_heads && m.attention.value_output != (ValueOutputConfig::Dense {}) {
                bad(
                    "model.n_kv_heads",
                    "grouped-query attention needs dense value/output matrices (attention.\
                     value_output = { kind = \"dense\" }): reparameterised and identity W_V \
                     are d × d"
                        .into(),
                );
            }
        }
        match m.positions {
            PositionsConfig::Rope { base, fraction, .. } => {
                if !greater(base, 1.0) {
                    bad(
                        "model.positions.base",
                        format!("found {base}, expected a number > 1"),
                    );
                }
                if !(fraction > 0.0 && fraction <= 1.0) {
                    bad(
                        "model.positions.fraction",
                        format!("found {fraction}, expected 0 < fraction ≤ 1"),
                    );
                } else if heads_ok && rope_dims(dh, fraction) < 2 {
                    bad(
                        "model.positions.fraction",
                        format!(
                            "fraction {fraction} of d_head = {dh} rotates no pair of dimensions; \
                             raise it to at least {}",
                            2.0 / dh as f64
                        ),
                    );
                }
            }
            PositionsConfig::Relative {
                buckets,
                max_distance,
            } => {
                if buckets < 4 || !buckets.is_multiple_of(2) {
                    bad(
                        "model.positions.buckets",
                        format!("found {buckets}, expected an even number ≥ 4"),
                    );
                } else if max_distance <= buckets / 4 {
                    bad(
                        "model.positions.max_distance",
                        format!(
                            "found {max_distance}, expected > buckets/4 = {} (the exact buckets)",
                            buckets / 4
                        ),
                    );
                }
            }
            PositionsConfig::Nope {}
            | PositionsConfig::Sinusoidal {}
            | PositionsConfig::Learned {}
            | PositionsConfig::Alibi {} => {}
        }
        if let PositionsConfig::Sinusoidal {} = m.positions
            && !m.d_model.is_multiple_of(2)
        {
            bad(
                "model.positions",
                format!(
                    "sinusoidal positions need an even d_model, found {}",
                    m.d_model
                ),
            );
        }
        for (path, norm) in [
            ("model.norm", Some(&m.norm)),
            ("model.input_norm", m.input_norm.as_ref()),
        ] {
            match norm {
                Some(NormConfig::RmsNorm { eps } | NormConfig::LayerNorm { eps })
                    if !greater(*eps, 0.0) =>
                {
                    bad(
                        &format!("{path}.eps"),
                        format!("found {eps}, expected a number > 0"),
                    );
                }
                Some(NormConfig::None {}) if path == "model.input_norm" => bad(
                    "model.input_norm",
                    "kind = \"none\" here means no input norm: omit the table instead".into(),
                ),
                _ => {}
            }
        }
        for (path, std) in [
            ("model.init_std", m.init_std),
            ("model.w_down_init_std", m.w_down_init_std),
        ] {
            if let Some(s) = std
                && !(s > 0.0 && s.is_finite())
            {
                bad(path, format!("found {s}, expected a finite number > 0"));
            }
        }
        if m.w_down_init_std.is_some() && m.ffn == (FfnConfig::None {}) {
            bad(
                "model.w_down_init_std",
                "ffn = none has no W_down to initialise; remove the key".into(),
            );
        }
        let gains: Vec<(&str, Gain)> = match &m.block {
            BlockConfig::PreNorm { gains } => vec![
                ("alpha_sa", gains.alpha_sa),
                ("beta_sa", gains.beta_sa),
                ("alpha_ff", gains.alpha_ff),
                ("beta_ff", gains.beta_ff),
            ],
            BlockConfig::Parallel { gains, .. } => vec![
                ("alpha", gains.alpha),
                ("beta_sa", gains.beta_sa),
                ("beta_ff", gains.beta_ff),
            ],
            BlockConfig::PostNorm {} => vec![],
            BlockConfig::Sas { beta_ff } => vec![("beta_ff", *beta_ff)],
            BlockConfig::SasP { beta_sa, beta_ff } => {
                vec![("beta_sa", *beta_sa), ("beta_ff", *beta_ff)]
            }
        };
        let gains_path = |name: &str| match m.block {
            BlockConfig::Sas { .. } | BlockConfig::SasP { .. } => format!("model.block.{name}"),
            _ => format!("model.block.gains.{name}"),
        };
        for (name, g) in &gains {
            if m.ffn == (FfnConfig::None {}) && name.ends_with("_ff") && g.trainable {
                bad(
                    &format!("{}.trainable", gains_path(name)),
                    "ffn = none leaves no feed-forward sub-block for this gain to scale; \
                     make it a constant (trainable = false)"
                        .into(),
                );
            }
        }
        for (name, g) in gains {
            if !g.init.is_finite() {
                bad(
                    &format!("{}.init", gains_path(name)),
                    format!("found {}, expected a finite number", g.init),
                );
            }
        }
        if m.sink_tokens > 1024 {
            bad(
                "model.sink_tokens",
                format!("found {}, expected 0..=1024", m.sink_tokens),
            );
        }
        self.validate_attention(&mut bad, dh);
        self.validate_skipless(&mut bad);
        self.validate_remedies(&mut bad);
        self.validate_data_sources(&mut bad);

        // data
        if !(d.val_fraction > 0.0 && d.val_fraction < 0.5) {
            bad(
                "data.val_fraction",
                format!("found {}, expected a number in (0, 0.5)", d.val_fraction),
            );
        }
        if let TokenizerConfig::Bpe { vocab_size, .. } = d.tokenizer
            && !(260..=65535).contains(&vocab_size)
        {
            bad(
                "data.tokenizer.vocab_size",
                format!("found {vocab_size}, expected 260..=65535 (256 bytes + specials + merges)"),
            );
        }
        if d.token_budget == Some(0) {
            bad(
                "data.token_budget",
                "found 0, expected a positive number of tokens".into(),
            );
        }
        if let Some(mix) = &d.mixture {
            for (k, w) in mix {
                if !(*w >= 0.0 && w.is_finite()) {
                    bad(
                        &format!("data.mixture.{k}"),
                        format!("found {w}, expected a finite weight ≥ 0"),
                    );
                }
            }
            if mix.values().all(|w| *w <= 0.0) {
                bad(
                    "data.mixture",
                    "all weights are 0: at least one domain needs weight > 0".into(),
                );
            }
        }
        let seq_positions = m.ctx;
        for (i, p) in d.random_tokens.iter().enumerate() {
            if *p < 1 || *p > seq_positions {
                bad(
                    &format!("data.random_tokens.{i}"),
                    format!(
                        "found position {p}, expected 1..={seq_positions} (1-based, within model.ctx)"
                    ),
                );
            }
            if d.bos && *p == 1 {
                bad(
                    &format!("data.random_tokens.{i}"),
                    "position 1 holds the BOS token when data.bos = true; use a position ≥ 2 or set bos = false".into(),
                );
            }
        }
        if let Some(ft) = &d.fixed_token {
            if ft.position < 1 || ft.position > seq_positions {
                bad(
                    "data.fixed_token.position",
                    format!("found {}, expected 1..={seq_positions}", ft.position),
                );
            }
            if d.bos && ft.position == 1 {
                bad(
                    "data.fixed_token.position",
                    "position 1 holds the BOS token when data.bos = true; use a position ≥ 2 or set bos = false".into(),
                );
            }
            if d.random_tokens.contains(&ft.position) {
                bad(
                    "data.fixed_token.position",
                    format!(
                        "position {} is also listed in data.random_tokens",
                        ft.position
                    ),
                );
            }
        }
        self.validate_synthetic(&mut bad);

        // optim
        if !(o.lr > 0.0 && o.lr.is_finite()) {
            bad(
                "optim.lr",
                format!("found {}, expected a finite number > 0", o.lr),
            );
        }
        for (i, b) in o.betas.iter().enumerate() {
            if !(0.0..1.0).contains(b) {
                bad(
                    &format!("optim.betas.{i}"),
                    format!("found {b}, expected 0 ≤ β < 1"),
                );
            }
        }
        if !greater(o.eps, 0.0) {
            bad(
                "optim.eps",
                format!("found {}, expected a number > 0", o.eps),
            );
        }
        if let Algorithm::Sgd { momentum } = o.algorithm {
            if !(0.0..1.0).contains(&momentum) {
                bad(
                    "optim.algorithm.momentum",
                    format!("found {momentum}, expected 0 ≤ μ < 1"),
                );
            }
            let adam = OptimConfig::default();
            for (path, set) in [
                ("optim.betas", o.betas != adam.betas),
                ("optim.eps", o.eps != adam.eps),
            ] {
                if set {
                    bad(
                        path,
                        "is an AdamW setting; SGD (optim.algorithm) does not use it: remove it"
                            .into(),
                    );
                }
            }
        }
        if !(o.weight_decay >= 0.0 && o.weight_decay.is_finite()) {
            bad(
                "optim.weight_decay",
                format!("found {}, expected a finite number ≥ 0", o.weight_decay),
            );
        }
        if let Some(c) = o.grad_clip
            && !greater(c, 0.0)
        {
            bad(
                "optim.grad_clip",
                format!("found {c}, expected a number > 0 (omit the key for no clipping)"),
            );
        }
        let (warmup, min_lr) = match o.schedule {
            ScheduleConfig::Constant { warmup } => (warmup, None),
            ScheduleConfig::WarmupCosine { warmup, min_lr }
            | ScheduleConfig::WarmupLinear { warmup, min_lr } => (warmup, Some(min_lr)),
        };
        if warmup >= t.steps.max(1) && t.steps > 0 {
            bad(
                "optim.schedule.warmup",
                format!(
                    "found {warmup}, expected fewer warmup steps than train.steps = {}",
                    t.steps
                ),
            );
        }
        if let Some(min_lr) = min_lr
            && !(min_lr >= 0.0 && min_lr <= o.lr)
        {
            bad(
                "optim.schedule.min_lr",
                format!("found {min_lr}, expected 0 ≤ min_lr ≤ optim.lr = {}", o.lr),
            );
        }

        // train
        let seq_tokens = t.micro_batch * m.ctx;
        if seq_tokens > 0 && !t.batch_tokens.is_multiple_of(seq_tokens) {
            bad(
                "train.batch_tokens",
                format!(
                    "found {}, expected a multiple of micro_batch × ctx = {} × {} = {seq_tokens}",
                    t.batch_tokens, t.micro_batch, m.ctx
                ),
            );
        }

        // metrics
        if mt.probe_len > m.ctx {
            bad(
                "metrics.probe_len",
                format!("found {}, expected ≤ model.ctx = {}", mt.probe_len, m.ctx),
            );
        }
        if mt.k_max > mt.probe_len {
            bad(
                "metrics.k_max",
                format!(
                    "found {}, expected ≤ metrics.probe_len = {}",
                    mt.k_max, mt.probe_len
                ),
            );
        }
        if mt.eps.is_empty() {
            bad(
                "metrics.eps",
                format!("empty list: give at least one threshold, e.g. [{HEADLINE_EPS}]"),
            );
        }
        if !mt.eps.is_empty() && !mt.eps.contains(&HEADLINE_EPS) {
            bad(
                "metrics.eps",
                format!(
                    "{:?} lacks {HEADLINE_EPS}, the headline ε: training logs, summaries, sweep \
                     HParams and reports show Sink₁ at ε = {HEADLINE_EPS}; add it to the list",
                    mt.eps
                ),
            );
        }
        for (i, e) in mt.eps.iter().enumerate() {
            if !(*e > 0.0 && *e < 1.0) {
                bad(
                    &format!("metrics.eps.{i}"),
                    format!("found {e}, expected 0 < ε < 1"),
                );
            }
        }
        let hm = &mt.heads;
        if hm.enabled {
            let n = hm.n;
            if n < 2 || 2 * n + 1 > m.ctx {
                bad(
                    "metrics.heads.n",
                    format!(
                        "found {n}, expected 2 ≤ n ≤ (model.ctx − 1) / 2 = {} (the probe [first, R, R] \
                         has 2n + 1 tokens); or metrics.heads.enabled = false",
                        (m.ctx.max(1) - 1) / 2
                    ),
                );
            }
            if hm.sequences == 0 {
                bad(
                    "metrics.heads.sequences",
                    "found 0, expected an integer ≥ 1".into(),
                );
            }
        }
        v
    }

    /// Checks of `[model.attention]` and its combinations with the rest of the model.
    fn validate_attention(&self, bad: &mut dyn FnMut(&str, String), dh: usize) {
        let m = &self.model;
        let a = &m.attention;
        let norm_name = normaliser_name(&a.normaliser);
        if !(a.row_scale > 0.0 && a.row_scale.is_finite()) {
            bad(
                "model.attention.row_scale",
                format!("found {}, expected a finite number > 0", a.row_scale),
            );
        }
        match &a.normaliser {
            NormaliserConfig::SoftmaxN { n } if !(*n >= 0.0 && n.is_finite()) => {
                bad(
                    "model.attention.normaliser.n",
                    format!("found {n}, expected a finite number ≥ 0 (1 = off-by-one)"),
                );
            }
            NormaliserConfig::Linear {
                feature_map,
                normaliser: KernelNorm::Sum,
            } if *feature_map != FeatureMap::Elu1 => bad(
                "model.attention.normaliser.normaliser",
                format!(
                    "\"sum\" divides by the row sum, which is only positive for the non-negative \
                     elu1 feature map; with feature_map = \"{}\" use \"max_abs_sum\" or \"none\"",
                    match feature_map {
                        FeatureMap::Identity => "identity",
                        FeatureMap::Mlp => "mlp",
                        FeatureMap::Elu1 => "elu1",
                    }
                ),
            ),
            NormaliserConfig::Sigmoid { bias } => match bias.resolve(m.ctx) {
                Some(b) if b.is_finite() => {}
                _ => bad(
                    "model.attention.normaliser.bias",
                    format!(
                        "found {bias:?}, expected a finite number or the string \"{}\"",
                        SigmoidBias::NEG_LN_T
                    ),
                ),
            },
            _ => {}
        }
        let uses_logits = a.normaliser.uses_logits();
        if !uses_logits
            && matches!(
                m.positions,
                PositionsConfig::Alibi {} | PositionsConfig::Relative { .. }
            )
        {
            bad(
                "model.positions",
                format!(
                    "{} positions add a bias to the attention logits, but a linear-kernel \
                     attention has no logits; use nope, sinusoidal, learned or rope with it, or a \
                     logit-based normaliser (softmax, softmax_n, sigmoid, elu1)",
                    positions_name(&m.positions)
                ),
            );
        }
        let slot_std = |bad: &mut dyn FnMut(&str, String), std: f64| {
            if !(std > 0.0 && std.is_finite()) {
                bad(
                    "model.attention.slot.init_std",
                    format!("found {std}, expected a finite number > 0"),
                );
            }
        };
        match &a.slot {
            SlotConfig::None {} => {}
            SlotConfig::SinkLogit { init, .. } => {
                if !a.normaliser.is_normalised() {
                    bad(
                        "model.attention.slot",
                        format!(
                            "a learned sink logit only takes mass from a normalised attention \
                             (softmax, softmax_n, sigmoid_normalised, elu1_normalised); with the \
                             unnormalised {norm_name} its column would change nothing"
                        ),
                    );
                }
                if !init.is_finite() {
                    bad(
                        "model.attention.slot.init",
                        format!("found {init}, expected a finite number"),
                    );
                }
            }
            SlotConfig::KvBias { init_std, .. } | SlotConfig::VBias { init_std, .. } => {
                slot_std(bad, *init_std)
            }
            SlotConfig::KBias {
                init_std,
                value,
                learnable_dims,
                trainable,
                ..
            } => {
                slot_std(bad, *init_std);
                if let KBiasValue::E1 { m: mm } | KBiasValue::Ones { m: mm } = value
                    && !mm.is_finite()
                {
                    bad(
                        "model.attention.slot.value.m",
                        format!("found {mm}, expected a finite number"),
                    );
                }
                match (learnable_dims, trainable) {
                    (Some(_), false) => bad(
                        "model.attention.slot.learnable_dims",
                        "the K bias is both fixed (trainable = false) and partly learnable \
                         (learnable_dims); drop one of the two"
                            .into(),
                    ),
                    (Some(da), true) if dh > 0 && !(1..=dh).contains(da) => bad(
                        "model.attention.slot.learnable_dims",
                        format!("found {da}, expected 1..={dh} (d_head)"),
                    ),
                    _ => {}
                }
            }
            SlotConfig::MemoryKv { n, init_std } => {
                slot_std(bad, *init_std);
                if !(1..=1024).contains(n) {
                    bad(
                        "model.attention.slot.n",
                        format!("found {n}, expected 1..=1024 memory key/value pairs"),
                    );
                }
            }
        }
        let ctx = m.ctx;
        match a.mask {
            MaskConfig::Causal {} => {}
            MaskConfig::Prefix { p } => {
                if !(1..=ctx).contains(&p) {
                    bad(
                        "model.attention.mask.p",
                        format!("found {p}, expected 1..={ctx} (model.ctx)"),
                    );
                }
            }
            MaskConfig::SlidingWindow { w } => {
                if w < 1 {
                    bad(
                        "model.attention.mask.w",
                        "found 0, expected a window ≥ 1 (the query itself)".into(),
                    );
                }
            }
            MaskConfig::SinksWindow { sinks, w } => {
                if w < 1 {
                    bad(
                        "model.attention.mask.w",
                        "found 0, expected a window ≥ 1 (the query itself)".into(),
                    );
                }
                if sinks < 1 {
                    bad(
                        "model.attention.mask.sinks",
                        "found 0, expected ≥ 1 (with no sinks use sliding_window)".into(),
                    );
                }
            }
        }
        // kernel = "fused" on a model the kernel does not cover runs the explicit path and says
        // so (crate::kernels, `sinklab check`).
    }
}

//! AdamW with decoupled weight decay and a per-parameter decay policy, global-norm gradient
//! clipping, learning-rate schedules, and named access to a module's parameters.
//!
//! Burn's built-in clipping is per tensor and its AdamW decays every parameter alike, so the
//! update is written here (PyTorch's `torch.optim.AdamW` semantics):
//!
//! ```text
//! g ← g · min(1, clip / ‖g_all‖₂)                  # global norm over all parameters
//! m ← β₁ m + (1−β₁) g;   v ← β₂ v + (1−β₂) g²
//! p ← p (1 − lr·wd_p) − lr · (m / (1−β₁ᵗ)) / (sqrt(v / (1−β₂ᵗ)) + ε)
//! ```
//!
//! Parameters are named by their module path (`blocks.0.attn.wq`); optimizer state is keyed by
//! that name, so a checkpoint is plain named tensors.

use crate::checkpoint::{HostTensor, TensorSource};
use crate::config::{Algorithm, DecayPolicy, OptimConfig, ScheduleConfig};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod grads;
pub use grads::{GradAccumulator, GradScale, clip_scale, clip_scale_on_device};

/// Learning rate at optimizer step `step` (0-based) of `total` steps.
pub fn learning_rate(cfg: &OptimConfig, step: u64, total: u64) -> f64 {
    let peak = cfg.lr;
    let warm = |w: u64| {
        if w > 0 && step < w {
            Some(peak * (step + 1) as f64 / w as f64)
        } else {
            None
        }
    };
    match cfg.schedule {
        ScheduleConfig::Constant { warmup } => warm(warmup).unwrap_or(peak),
        ScheduleConfig::WarmupCosine { warmup, min_lr } => warm(warmup).unwrap_or_else(|| {
            let span = total.saturating_sub(warmup + 1).max(1) as f64;
            let frac = ((step - warmup) as f64 / span).min(1.0);
            min_lr + 0.5 * (peak - min_lr) * (1.0 + (std::f64::consts::PI * frac).cos())
        }),
        ScheduleConfig::WarmupLinear { warmup, min_lr } => warm(warmup).unwrap_or_else(|| {
            let span = total.saturating_sub(warmup + 1).max(1) as f64;
            let frac = ((step - warmup) as f64 / span).min(1.0);
            peak + (min_lr - peak) * frac
        }),
    }
}

/// Dynamic loss scaling for `train.precision = "f16"` (PyTorch's `GradScaler` with its
/// defaults): the loss is multiplied by `scale` before the backward pass so that small
/// gradients survive f16's range, and the gradients are divided by it before clipping and the
/// update. A step whose scaled loss or gradients are not finite is skipped (no update; the data
/// position still advances) and the scale halved; after `GROWTH_INTERVAL` finite steps in a row
/// it doubles. Saved in every checkpoint's `state.json`, so a resume continues exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossScale {
    pub scale: f64,
    /// Finite steps since the last change of `scale`.
    pub good_steps: u64,
    /// Steps skipped so far.
    pub skipped: u64,
}

impl LossScale {
    pub const INIT: f64 = 65536.0;
    pub const GROWTH_INTERVAL: u64 = 2000;
    /// Below this (f16's smallest subnormal) the model overflows f16 whatever the scale.
    pub const MIN: f64 = 5.960_464_477_539_063e-8;

    pub fn new() -> Self {
        Self {
            scale: Self::INIT,
            good_steps: 0,
            skipped: 0,
        }
    }

    /// Record whether this step's loss and gradients were finite; returns whether to apply
    /// the update.
    pub fn update(&mut self, finite: bool) -> bool {
        if finite {
            self.good_steps += 1;
            if self.good_steps == Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good_steps = 0;
            }
        } else {
            self.scale *= 0.5;
            self.good_steps = 0;
            self.skipped += 1;
        }
        finite
    }
}

impl Default for LossScale {
    fn default() -> Self {
        Self::new()
    }
}

/// Does weight decay apply to this parameter? `matrices_only` decays the weight matrices of
/// linear layers (`*.weight`, the head included) and of the linear-kernel feature MLP
/// (`*.phi.w1`, `*.phi.w2`), never norms, gains, biases, embeddings (token, position, sink
/// tokens) or slot parameters (sink logit, k*, v*, V bias, memory K/V).
pub fn decays(policy: DecayPolicy, name: &str, rank: usize) -> bool {
    match policy {
        DecayPolicy::All => true,
        DecayPolicy::MatricesOnly => {
            rank == 2
                && (name.ends_with(".weight")
                    || name.ends_with(".phi.w1")
                    || name.ends_with(".phi.w2"))
        }
    }
}

/// Tracks the module path during a visit/map.
#[derive(Default)]
struct PathStack(Vec<Option<String>>);

/// Fields that hold an axis module (an enum owning its variant's parameters): they and the
/// variant name are left out of parameter names, so that checkpoints keep the flat names
/// (`blocks.0.attn.k_star`, not `blocks.0.attn.slot.KeyValue.k_star`; `blocks.0.mlp.w_up`, not
/// `blocks.0.mlp.up.Gated.w_up`).
const TRANSPARENT_FIELDS: [(&str, &str); 3] = [
    ("Struct:Attention", "slot"),
    ("Struct:Attention", "shaping"),
    ("Struct:Mlp", "up"),
];

impl PathStack {
    /// Enter a module field (`container` is Burn's `Struct:Name` or `Enum:Name`).
    fn enter(&mut self, name: &str, container: &str) {
        let transparent =
            container.starts_with("Enum:") || TRANSPARENT_FIELDS.contains(&(container, name));
        self.0.push((!transparent).then(|| name.to_string()));
    }
    fn exit(&mut self) {
        self.0.pop();
    }
    fn name(&self) -> String {
        self.0
            .iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// Every parameter as a host tensor, by name.
pub fn export_params<M: Module>(module: &M) -> BTreeMap<String, HostTensor> {
    export_params_where(module, &|_| true)
}

/// Every parameter's name and shape, without initializing lazy parameters.
pub fn param_shapes<M: Module>(module: &M) -> BTreeMap<String, Vec<usize>> {
    struct V {
        path: PathStack,
        out: BTreeMap<String, Vec<usize>>,
    }
    impl ModuleVisitor for V {
        fn enter_module(&mut self, name: &str, container: &str) {
            self.path.enter(name, container);
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.exit();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.out
                .insert(self.path.name(), param.lazy_shape().to_vec());
        }
    }
    let mut v = V {
        path: PathStack::default(),
        out: BTreeMap::new(),
    };
    module.visit(&mut v);
    v.out
}

/// The parameters whose name passes `keep`, as host tensors (only those are copied).
pub fn export_params_where<M: Module>(
    module: &M,
    keep: &dyn Fn(&str) -> bool,
) -> BTreeMap<String, HostTensor> {
    struct V<'a> {
        path: PathStack,
        out: BTreeMap<String, HostTensor>,
        keep: &'a dyn Fn(&str) -> bool,
    }
    impl ModuleVisitor for V<'_> {
        fn enter_module(&mut self, name: &str, container: &str) {
            self.path.enter(name, container);
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.exit();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if !(self.keep)(&self.path.name()) {
                return;
            }
            let t = param.val();
            let shape = t.dims().to_vec();
            let data = t
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .expect("f32 data");
            self.out
                .insert(self.path.name(), HostTensor { shape, data });
        }
    }
    let mut v = V {
        path: PathStack::default(),
        out: BTreeMap::new(),
        keep,
    };
    module.visit(&mut v);
    v.out
}

/// Replace every parameter by the host tensor of the same name. Fails on a missing name, an
/// extra name or a shape mismatch.
pub fn import_params<M: Module>(
    module: M,
    tensors: &BTreeMap<String, HostTensor>,
) -> Result<M, String> {
    import_params_owned(module, tensors.clone())
}

/// [`import_params`] consuming the tensors, each moved onto the device as its parameter is
/// reached (a parameter never read before, as in [`crate::model::Lm::skeleton`], is replaced
/// without being materialised first... beyond a zero tensor of its shape).
pub fn import_params_owned<M: Module>(
    module: M,
    tensors: BTreeMap<String, HostTensor>,
) -> Result<M, String> {
    let mut tensors = tensors;
    import_params_from(module, &mut tensors)
}

/// [`import_params_owned`] from any [`TensorSource`], one tensor in flight: each is taken from
/// the source as its parameter is reached and moved to the device before the next is read.
pub fn import_params_from<M: Module>(module: M, src: &mut dyn TensorSource) -> Result<M, String> {
    struct Mp<'a> {
        path: PathStack,
        src: &'a mut dyn TensorSource,
        errors: Vec<String>,
    }
    impl ModuleMapper for Mp<'_> {
        fn enter_module(&mut self, name: &str, container: &str) {
            self.path.enter(name, container);
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.exit();
        }
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let name = self.path.name();
            let want = param.lazy_shape().to_vec();
            let h = match self.src.take(&name) {
                Ok(Some(h)) => h,
                Ok(None) => {
                    self.errors.push(format!("missing tensor `{name}`"));
                    return param;
                }
                Err(e) => {
                    self.errors.push(format!("{e:#}"));
                    return param;
                }
            };
            if h.shape != want {
                self.errors.push(format!(
                    "tensor `{name}`: shape {:?} in file, model expects {want:?}",
                    h.shape
                ));
                return param;
            }
            let (id, tensor, mapper) = param.consume();
            let device = tensor.device();
            let grad = tensor.is_require_grad();
            drop(tensor);
            let mut new: Tensor<D> = Tensor::from_data(TensorData::new(h.data, h.shape), &device);
            if grad {
                new = new.require_grad();
            }
            Param::from_mapped_value(id, new, mapper)
        }
    }
    let mut m = Mp {
        path: PathStack::default(),
        src,
        errors: vec![],
    };
    let module = module.map(&mut m);
    for k in m.src.rest() {
        m.errors.push(format!(
            "unexpected tensor `{k}` (not a parameter of this model)"
        ));
    }
    if m.errors.is_empty() {
        Ok(module)
    } else {
        Err(m.errors.join("; "))
    }
}

/// Optimiser state per parameter name (flattened) and the step count: AdamW's first and
/// second moments (`m`, `v`), or SGD's momentum buffer (in `m`).
pub struct Optimizer {
    pub cfg: OptimConfig,
    pub t: u64,
    pub m: BTreeMap<String, Tensor<1>>,
    pub v: BTreeMap<String, Tensor<1>>,
}

/// `train.trainable`: every float parameter whose name matches none of `patterns` (`*` any run
/// of characters) is made a constant — no gradient, so no optimizer state and no update. Returns
/// the module and the (trainable, frozen) element counts; a pattern matching nothing, or an
/// invalid one, is an error naming it and some of the names.
pub fn freeze<M: Module>(module: M, patterns: &[String]) -> anyhow::Result<(M, usize, usize)> {
    let compiled = trainable_patterns(patterns)?;
    struct Fr<'a> {
        path: PathStack,
        patterns: &'a [glob::Pattern],
        used: Vec<bool>,
        names: Vec<String>,
        counts: (usize, usize),
    }
    impl ModuleMapper for Fr<'_> {
        fn enter_module(&mut self, name: &str, container: &str) {
            self.path.enter(name, container);
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.exit();
        }
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let name = self.path.name();
            let mut hit = false;
            for (i, p) in self.patterns.iter().enumerate() {
                if p.matches(&name) {
                    self.used[i] = true;
                    hit = true;
                }
            }
            self.names.push(name);
            let (id, tensor, mapper) = param.consume();
            let n = tensor.shape().num_elements();
            let t = if hit {
                self.counts.0 += n;
                tensor
            } else {
                self.counts.1 += n;
                tensor.detach().set_require_grad(false)
            };
            Param::from_mapped_value(id, t, mapper)
        }
    }
    let mut fr = Fr {
        path: PathStack::default(),
        patterns: &compiled,
        used: vec![false; compiled.len()],
        names: vec![],
        counts: (0, 0),
    };
    let module = module.map(&mut fr);
    if let Some(i) = fr.used.iter().position(|u| !u) {
        let shown: Vec<&str> = fr.names.iter().take(12).map(String::as_str).collect();
        anyhow::bail!(
            "train.trainable: pattern {:?} matches no parameter of this model; its parameters are named like {}{}",
            patterns[i],
            shown.join(", "),
            if fr.names.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        );
    }
    Ok((module, fr.counts.0, fr.counts.1))
}

/// `train.trainable`'s patterns compiled (`*` any run of characters), or an error naming the
/// invalid one.
pub fn trainable_patterns(patterns: &[String]) -> anyhow::Result<Vec<glob::Pattern>> {
    patterns
        .iter()
        .map(|p| {
            glob::Pattern::new(p).map_err(|e| {
                anyhow::anyhow!("train.trainable: pattern {p:?} is not valid ({e}); use `*` for any run of characters, e.g. \"blocks.*.attn.sink_logit\"")
            })
        })
        .collect()
}

impl Optimizer {
    pub fn new(cfg: &OptimConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            t: 0,
            m: BTreeMap::new(),
            v: BTreeMap::new(),
        }
    }

    /// One update of every parameter that has a gradient; gradients are scaled by `grad_scale`
    /// (the clipping factor), a number on the host or a one-element tensor on the gradients'
    /// device (a GPU step reads nothing back before its update).
    pub fn step<M: Module>(
        &mut self,
        module: M,
        grads: &GradAccumulator,
        lr: f64,
        grad_scale: impl Into<GradScale>,
    ) -> M {
        self.t += 1;
        let scale = grad_scale.into();
        // the scale as the kernel takes it: one tensor for every parameter of the step
        let scale_tensor = grads.grads.values().next().map(|g| match &scale {
            GradScale::Host(s) => {
                Tensor::<1>::from_data(TensorData::new(vec![*s as f32], [1]), &g.device())
            }
            GradScale::Device(t) => (**t).clone(),
        });
        struct Mp<'a> {
            path: PathStack,
            opt: &'a mut Optimizer,
            grads: &'a GradAccumulator,
            lr: f64,
            scale: GradScale,
            scale_tensor: Option<Tensor<1>>,
        }
        impl ModuleMapper for Mp<'_> {
            fn enter_module(&mut self, name: &str, container: &str) {
                self.path.enter(name, container);
            }
            fn exit_module(&mut self, _: &str, _: &str) {
                self.path.exit();
            }
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                let name = self.path.name();
                let Some(g) = self.grads.grads.get(&name) else {
                    return param;
                };
                let (id, tensor, mapper) = param.consume();
                let c = &self.opt.cfg;
                if let Algorithm::Sgd { momentum } = c.algorithm {
                    // g ← g + wd·p; b ← μ b + g (b = g at the first step); p ← p − lr·b
                    let shape = tensor.dims();
                    let n = g.dims()[0];
                    let p = tensor.inner().reshape([n]);
                    let mut g = self.scale.apply(g.clone(), true);
                    if decays(c.decay, &name, D) && c.weight_decay != 0.0 {
                        g = g + p.clone() * c.weight_decay;
                    }
                    let b = match self.opt.m.remove(&name) {
                        Some(b) if momentum != 0.0 => b * momentum + g,
                        _ => g,
                    };
                    let p = p - b.clone() * self.lr;
                    if momentum != 0.0 {
                        self.opt.m.insert(name, b);
                    }
                    let new = Tensor::<D>::from_inner(p.reshape(shape)).require_grad();
                    return Param::from_mapped_value(id, new, mapper);
                }
                let [b1, b2] = c.betas;
                let t = self.opt.t as i32;
                let shape = tensor.dims();
                let n = g.dims()[0];
                let p = tensor.inner().reshape([n]);
                // m̂/(sqrt(v̂)+ε) = m·c₁ / (sqrt(v)·c₂ + ε) with c₁ = 1/(1−β₁ᵗ), c₂ = 1/sqrt(1−β₂ᵗ):
                // the bias corrections fold into scalars (as in PyTorch's implementation).
                let c1 = 1.0 / (1.0 - b1.powi(t));
                let c2 = 1.0 / (1.0 - b2.powi(t)).sqrt();
                let wd = if decays(c.decay, &name, D) {
                    c.weight_decay
                } else {
                    0.0
                };
                if let (Ok(_), Some(scale)) = (
                    crate::kernels::adamw::choose(&p.device()),
                    self.scale_tensor.as_ref(),
                ) {
                    // one pass, the same f32 operations as below (crate::kernels::adamw)
                    let zeros = || Tensor::<1>::zeros([n], &p.device());
                    let m = self.opt.m.remove(&name).unwrap_or_else(zeros);
                    let v = self.opt.v.remove(&name).unwrap_or_else(zeros);
                    let args = crate::kernels::adamw::AdamArgs {
                        b1: b1 as f32,
                        one_minus_b1: (1.0 - b1) as f32,
                        b2: b2 as f32,
                        one_minus_b2: (1.0 - b2) as f32,
                        decay: (1.0 - self.lr * wd) as f32,
                        c2: c2 as f32,
                        eps: c.eps as f32,
                        step: (self.lr * c1) as f32,
                    };
                    // the state and the gradient may come from an autodiff device (resumed
                    // runs, accumulated gradients); the update is outside autodiff
                    let (p, m, v) = crate::kernels::adamw::adamw(
                        p,
                        g.clone().inner(),
                        m.inner(),
                        v.inner(),
                        scale.clone(),
                        args,
                    );
                    self.opt.m.insert(name.clone(), m);
                    self.opt.v.insert(name, v);
                    let new = Tensor::<D>::from_inner(p.reshape(shape)).require_grad();
                    return Param::from_mapped_value(id, new, mapper);
                }
                let g = self.scale.apply(g.clone(), false);
                let m = match self.opt.m.remove(&name) {
                    Some(m) => m * b1 + g.clone() * (1.0 - b1),
                    None => g.clone() * (1.0 - b1),
                };
                let v = match self.opt.v.remove(&name) {
                    Some(v) => v * b2 + g.square() * (1.0 - b2),
                    None => g.square() * (1.0 - b2),
                };
                let mut p = p;
                if wd != 0.0 {
                    p = p * (1.0 - self.lr * wd);
                }
                let p = p - m.clone() / (v.clone().sqrt() * c2 + c.eps) * (self.lr * c1);
                self.opt.m.insert(name.clone(), m);
                self.opt.v.insert(name, v);
                let new = Tensor::<D>::from_inner(p.reshape(shape)).require_grad();
                Param::from_mapped_value(id, new, mapper)
            }
        }
        let mut mp = Mp {
            path: PathStack::default(),
            opt: self,
            grads,
            lr,
            scale,
            scale_tensor,
        };
        module.map(&mut mp)
    }

    /// The state as host tensors (`m.NAME`, `v.NAME`), for checkpoints.
    pub fn export(&self) -> BTreeMap<String, HostTensor> {
        let mut out = BTreeMap::new();
        for (prefix, map) in [("m", &self.m), ("v", &self.v)] {
            for (k, t) in map {
                let data = t
                    .to_data()
                    .convert::<f32>()
                    .try_into_vec::<f32>()
                    .expect("f32");
                out.insert(
                    format!("{prefix}.{k}"),
                    HostTensor {
                        shape: vec![data.len()],
                        data,
                    },
                );
            }
        }
        out
    }

    pub fn import(&mut self, tensors: &BTreeMap<String, HostTensor>, t: u64, device: &Device) {
        self.t = t;
        self.m.clear();
        self.v.clear();
        for (k, h) in tensors {
            let tensor =
                Tensor::<1>::from_data(TensorData::new(h.data.clone(), [h.data.len()]), device);
            if let Some(name) = k.strip_prefix("m.") {
                self.m.insert(name.to_string(), tensor);
            } else if let Some(name) = k.strip_prefix("v.") {
                self.v.insert(name.to_string(), tensor);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(schedule: ScheduleConfig) -> OptimConfig {
        OptimConfig {
            lr: 1e-3,
            schedule,
            ..OptimConfig::default()
        }
    }

    #[test]
    fn schedules() {
        let c = cfg(ScheduleConfig::Constant { warmup: 10 });
        assert!((learning_rate(&c, 0, 100) - 1e-4).abs() < 1e-15);
        assert!((learning_rate(&c, 9, 100) - 1e-3).abs() < 1e-15);
        assert!((learning_rate(&c, 99, 100) - 1e-3).abs() < 1e-15);
        let c = cfg(ScheduleConfig::WarmupCosine {
            warmup: 10,
            min_lr: 1e-4,
        });
        assert!((learning_rate(&c, 10, 101) - 1e-3).abs() < 1e-12);
        assert!((learning_rate(&c, 55, 101) - 5.5e-4).abs() < 1e-12);
        assert!((learning_rate(&c, 100, 101) - 1e-4).abs() < 1e-12);
        let c = cfg(ScheduleConfig::WarmupLinear {
            warmup: 0,
            min_lr: 0.0,
        });
        assert!((learning_rate(&c, 0, 11) - 1e-3).abs() < 1e-12);
        assert!((learning_rate(&c, 5, 11) - 5e-4).abs() < 1e-12);
        assert!((learning_rate(&c, 10, 11) - 0.0).abs() < 1e-12);
    }

    #[test]
    fn decay_policy() {
        assert!(decays(DecayPolicy::All, "blocks.0.norm1.gain", 1));
        assert!(!decays(DecayPolicy::MatricesOnly, "blocks.0.norm1.gain", 1));
        assert!(!decays(DecayPolicy::MatricesOnly, "embed", 2));
        assert!(!decays(DecayPolicy::MatricesOnly, "pos_embed", 2));
        assert!(!decays(DecayPolicy::MatricesOnly, "sink_tokens", 2));
        assert!(!decays(
            DecayPolicy::MatricesOnly,
            "blocks.0.attn.k_star",
            2
        ));
        assert!(!decays(
            DecayPolicy::MatricesOnly,
            "blocks.0.attn.wq.bias",
            1
        ));
        assert!(!decays(DecayPolicy::MatricesOnly, "blocks.0.alpha_sa", 1));
        assert!(decays(
            DecayPolicy::MatricesOnly,
            "blocks.3.attn.wq.weight",
            2
        ));
        assert!(decays(
            DecayPolicy::MatricesOnly,
            "blocks.3.attn.gate.weight",
            2
        ));
        assert!(decays(DecayPolicy::MatricesOnly, "blocks.1.attn.phi.w2", 2));
        assert!(decays(DecayPolicy::MatricesOnly, "head.weight", 2));
        assert!(decays(DecayPolicy::All, "blocks.0.attn.sink_logit", 1));
    }

    #[test]
    fn loss_scale_halves_on_overflow_skips_and_doubles_after_the_growth_interval() {
        let mut ls = LossScale::new();
        assert!(!ls.update(false));
        assert_eq!((ls.scale, ls.skipped, ls.good_steps), (32768.0, 1, 0));
        for i in 0..LossScale::GROWTH_INTERVAL - 1 {
            assert!(ls.update(true), "step {i}");
        }
        assert_eq!(ls.scale, 32768.0);
        assert!(ls.update(true));
        assert_eq!((ls.scale, ls.good_steps, ls.skipped), (65536.0, 0, 1));
        // an overflow resets the run of good steps
        for _ in 0..10 {
            ls.update(true);
        }
        ls.update(false);
        assert_eq!((ls.scale, ls.good_steps, ls.skipped), (32768.0, 0, 2));
    }
}

//! Gradients between the backward and the update: summed over micro-batches by parameter name
//! ([`GradAccumulator`]), their global norm, and the factor clipping scales them by — on the host
//! ([`clip_scale`]) or on their device ([`clip_scale_on_device`], [`GradScale`]).

use super::PathStack;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor};
use std::collections::BTreeMap;

/// The factor that scales gradients to global norm `clip` (1 when within it or unclipped).
pub fn clip_scale(grad_norm: f64, clip: Option<f64>) -> f64 {
    match clip {
        Some(c) if grad_norm > c => c / (grad_norm + 1e-6),
        _ => 1.0,
    }
}

/// [`clip_scale`] as a one-element tensor on the norm's device, computed there (a GPU step
/// never reads the norm back before its update).
pub fn clip_scale_on_device(grad_norm: Tensor<1>, clip: Option<f64>) -> Tensor<1> {
    let ones = Tensor::<1>::ones([1], &grad_norm.device());
    match clip {
        Some(c) => {
            let over = grad_norm.clone().greater_elem(c);
            ones.mask_where(over, (grad_norm + 1e-6).recip() * c)
        }
        None => ones,
    }
}

/// Flattened gradients by parameter name, summed over micro-batches.
#[derive(Default)]
pub struct GradAccumulator {
    pub grads: BTreeMap<String, Tensor<1>>,
}

impl GradAccumulator {
    /// Add the gradients of `module`'s parameters from one backward pass.
    pub fn add<M: Module>(&mut self, module: &M, grads: &Gradients) {
        struct V<'a> {
            path: PathStack,
            grads: &'a Gradients,
            acc: &'a mut BTreeMap<String, Tensor<1>>,
        }
        impl ModuleVisitor for V<'_> {
            fn enter_module(&mut self, name: &str, container: &str) {
                self.path.enter(name, container);
            }
            fn exit_module(&mut self, _: &str, _: &str) {
                self.path.exit();
            }
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if let Some(g) = param.val().grad(self.grads) {
                    let n = g.shape().num_elements();
                    let g = g.reshape([n]);
                    let name = self.path.name();
                    let sum = match self.acc.remove(&name) {
                        Some(prev) => prev + g,
                        None => g,
                    };
                    self.acc.insert(name, sum);
                }
            }
        }
        module.visit(&mut V {
            path: PathStack::default(),
            grads,
            acc: &mut self.grads,
        });
    }

    /// Add another accumulator's gradients (name by name).
    pub fn merge(&mut self, other: GradAccumulator) {
        for (name, g) in other.grads {
            let sum = match self.grads.remove(&name) {
                Some(prev) => prev + g,
                None => g,
            };
            self.grads.insert(name, sum);
        }
    }

    /// Global L2 norm of all gradients as a one-element tensor on their device, nothing read
    /// back (a GPU step: [`crate::train::update_on_device`]); squares summed in f32.
    pub fn global_norm_on_device(&self) -> Tensor<1> {
        self.grads
            .values()
            .map(|g| g.clone().square().sum())
            .reduce(|a, b| a + b)
            .expect("at least one gradient")
            .sqrt()
    }

    /// Global L2 norm of all gradients (one host read; on the CPU kernels' device one pass
    /// per gradient, its squares summed in f64).
    pub fn global_norm(&self) -> f64 {
        #[cfg(feature = "flex")]
        if self
            .grads
            .values()
            .next()
            .is_some_and(|g| crate::kernels::on_device(&g.device()))
        {
            let total: f64 = self
                .grads
                .values()
                .map(|g| crate::kernels::ops::sum_squares(g.clone().inner()) as f64)
                .sum();
            return total.sqrt();
        }
        let mut total: Option<Tensor<1>> = None;
        for g in self.grads.values() {
            let s = g.clone().square().sum();
            total = Some(match total {
                Some(t) => t + s,
                None => s,
            });
        }
        total
            .map(|t| t.into_scalar::<f32>() as f64)
            .unwrap_or(0.0)
            .sqrt()
    }
}

/// The factor an update scales the gradients by (global-norm clipping, f16 loss scaling): a
/// number on the host, or a one-element tensor on the gradients' device that no one reads back.
#[derive(Debug, Clone)]
pub enum GradScale {
    Host(f64),
    Device(Box<Tensor<1>>),
}

impl From<f64> for GradScale {
    fn from(s: f64) -> Self {
        GradScale::Host(s)
    }
}

impl GradScale {
    /// `g` scaled: a host factor of 1 leaves it untouched, unless `always` (SGD multiplied
    /// even by 1, and keeps doing so bit for bit).
    pub(super) fn apply(&self, g: Tensor<1>, always: bool) -> Tensor<1> {
        match self {
            GradScale::Host(s) if *s != 1.0 || always => g * *s,
            GradScale::Host(_) => g,
            GradScale::Device(t) => g * (**t).clone(),
        }
    }
}

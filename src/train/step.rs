//! One optimizer step's parts: the micro-batches' gradients and losses ([`gradients`]), the
//! update with every reduction on the device on a GPU ([`update_on_device`]), and which way a
//! GPU computes attention at the run's shape ([`attention_path`]).

use crate::config::{Experiment, Precision};
use crate::data::Batch;
use crate::eval::batch_tensors;
use crate::model::{self, Lm};
use crate::optim::{self, GradAccumulator, Optimizer};
use crate::parallel::{self, Workers};
use burn::tensor::Device;

/// Forward and backward over the micro-batches of one optimizer step: gradients summed over
/// micro-batches and the step's mean loss ([`gradients_of`] every micro-batch).
pub fn gradients(
    model: &Lm,
    batches: &[Batch],
    device: &Device,
    workers: &Workers,
    precision: Precision,
    loss_scale: f64,
) -> (GradAccumulator, StepLoss) {
    let all = 0..batches.len();
    gradients_of(model, batches, all, device, workers, precision, loss_scale)
}

/// Forward and backward over the micro-batches `share` of one optimizer step's `batches` (all
/// of them, or an MPI rank's block: [`crate::dist::share`]): their gradients summed and their
/// part of the step's mean loss. Each micro-batch's loss is divided by the step's total number
/// of counted targets, so the sum is the mean over the whole step. Micro-batches run
/// concurrently on `workers` (each on its own replica of the model); gradients and losses are
/// summed in micro-batch order, so the result does not depend on the number of workers.
/// The forward's matrix products run in `precision` (mixed precision; the gradients are f32);
/// the backward starts from the loss times `loss_scale` (f16 loss scaling: the gradients come
/// back multiplied by it, the returned loss does not).
pub fn gradients_of(
    model: &Lm,
    batches: &[Batch],
    share: std::ops::Range<usize>,
    device: &Device,
    workers: &Workers,
    precision: Precision,
    loss_scale: f64,
) -> (GradAccumulator, StepLoss) {
    let denom: f64 = batches
        .iter()
        .flat_map(|b| b.loss_mask.iter())
        .map(|&m| m as f64)
        .sum();
    let mine = &batches[share];
    let parts = workers.map(mine.len(), |i| {
        let replica = parallel::replica(model);
        let (x, y, m) = batch_tensors(&mine[i], device);
        // The f32 leaves (`replica`) receive the gradients; the forward casts them at each
        // matrix product when `precision` is not f32.
        let logits = replica
            .clone()
            .with_precision(precision)
            .forward_for_loss(x);
        let loss = model::masked_nll(logits, y, m, denom.max(1.0));
        let mut grads = GradAccumulator::default();
        let backward = if loss_scale == 1.0 {
            loss.backward()
        } else {
            (loss.clone() * loss_scale).backward()
        };
        grads.add(&replica, &backward);
        (grads, loss.inner())
    });
    let mut grads = GradAccumulator::default();
    let mut losses = Vec::with_capacity(parts.len());
    for (g, l) in parts {
        grads.merge(g);
        losses.push(l);
    }
    (grads, StepLoss(losses))
}

/// A step's loss: each micro-batch's share, on the device (see [`gradients`]).
pub struct StepLoss(Vec<burn::tensor::Tensor<1>>);

impl StepLoss {
    /// The shares read back one by one and summed in f64, in micro-batch order.
    pub fn read(self) -> f64 {
        self.0
            .into_iter()
            .map(|l| l.into_scalar::<f32>() as f64)
            .sum()
    }
    /// The shares summed on the device (nothing is read).
    pub fn on_device(self) -> burn::tensor::Tensor<1> {
        self.0
            .into_iter()
            .reduce(|a, b| a + b)
            .expect("a step has at least one micro-batch")
    }
}

/// Global-norm clipping and the optimizer's update with every reduction on the device (a GPU
/// step): the norm, the clipping factor and AdamW are queued behind the backward, and one read
/// brings back the step's loss and gradient norm once the update is queued — no other value
/// crosses to the host inside a step. Returns the updated model, the loss and the norm.
pub fn update_on_device(
    model: Lm,
    adam: &mut Optimizer,
    grads: &GradAccumulator,
    loss: StepLoss,
    lr: f64,
    clip: Option<f64>,
) -> (Lm, f64, f64) {
    let norm = grads.global_norm_on_device();
    let scale = optim::clip_scale_on_device(norm.clone(), clip);
    let model = adam.step(model, grads, lr, optim::GradScale::Device(Box::new(scale)));
    let read = burn::tensor::Tensor::cat(vec![loss.on_device(), norm], 0)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("two f32 values");
    (model, read[0] as f64, read[1] as f64)
}

/// On a GPU, which way the attention of this run's shape is faster — the tiled kernel or the
/// explicit path — measured now ([`model::time_attention`]) and kept for the run; the start
/// line that says so. None where the kernel does not run (the CPU half needs no choice).
pub fn attention_path(exp: &Experiment, device: &Device) -> Option<String> {
    use crate::kernels::{Half, attention};
    let compute = model::compute_dtype(exp.train.precision);
    if !attention::measure_paths() {
        return (attention::choose(&exp.model, exp.run.device, exp.train.precision)
            == Ok(Half::Cube))
        .then(|| {
            format!(
                "attention: the tiled kernel, not measured against the explicit path ({}=kernel)",
                attention::PATH_SWITCH
            )
        });
    }
    let (shape, m) =
        model::time_attention(&exp.model, exp.train.micro_batch, compute, device, 2, 5)?;
    Some(format!(
        "attention at {} × {} heads × {} rows × {} keys, d_h {}, {}: {}: {} runs",
        m.batch,
        shape.heads,
        shape.rows,
        shape.cols,
        shape.width,
        shape.precision.name(),
        m.line(),
        if m.kernel_wins() {
            "the tiled kernel"
        } else {
            "the explicit path"
        }
    ))
}

//! The softmax cross-entropy kernel as one Burn operation ([`XentOps`], Burn's
//! `#[backend_extension]`, the shape of [`super::attention_op`]): a forward that returns what
//! its backward needs, that backward, implemented per backend — `Flex` by the host code of
//! [`super::cpu::xent`] (f32 logits), the CubeCL backends by [`super::cube::xent`] (f32, f16
//! or bf16 logits) — and the differentiable operation ([`XentOps::fused_xent`]) that records
//! the backward on `Autodiff`. Which half runs a call, if any: [`super::xent::choose`].
//!
//! ```text
//! forward:  (logits (N, V), targets (N), weights (N)) → (loss (1), lse (N))
//! backward: (logits, targets, weights, lse, ∂loss (1)) → ∂logits (N, V), in the logits' dtype
//! ```

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, Backend, Dispatch, backend_extension};
use burn::tensor::{Int, Tensor};

/// The output metadata of the forward under Burn's fusion: the loss (1) and lse (N), in f32.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn forward_meta(
    logits: &burn::backend::fusion::custom::TensorSpec,
    _targets: &burn::backend::fusion::custom::TensorSpec,
    _weights: &burn::backend::fusion::custom::TensorSpec,
) -> (
    burn::backend::fusion::custom::TensorSpec,
    burn::backend::fusion::custom::TensorSpec,
) {
    use burn::backend::fusion::custom::TensorSpec;
    let n = logits.shape.as_slice()[0];
    let f32 = burn::tensor::DType::F32;
    (
        TensorSpec::new(burn::tensor::Shape::from(vec![1]), f32),
        TensorSpec::new(burn::tensor::Shape::from(vec![n]), f32),
    )
}

/// The cross-entropy kernel's two halves and the differentiable operation.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    Cube: cfg(any(feature = "wgpu", feature = "cuda")),
    Fusion: cfg(any(feature = "wgpu", feature = "cuda")),
    Autodiff
)]
pub trait XentOps: Backend {
    /// (loss (1), lse (N)): `Σ_i w_i (−log softmax(x_i)[t_i])` and each row's log-sum-exp.
    #[fusion(meta = forward_meta)]
    fn xent_forward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// ∂logits (N, V) for the loss's upstream gradient `grad` (1).
    #[fusion(meta = |logits, _t, _w, _lse, _g| logits.clone())]
    fn xent_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self>;

    /// The loss alone: the operation the model calls (differentiable on `Autodiff`).
    #[fusion(default)]
    fn fused_xent(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::xent_forward(logits, targets, weights).0
    }
}

#[cfg(feature = "flex")]
impl XentOps for burn::backend::flex::Flex {
    fn xent_forward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        use super::ops::{flex, host, host_ids, two};
        let [n, v] = two(&logits);
        let (loss, lse) =
            super::cpu::xent::forward(&host(&logits), v, &host_ids(&targets), &host(&weights));
        (flex(vec![loss as f32], &[1]), flex(lse, &[n]))
    }

    fn xent_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        use super::ops::{host, host_ids, owned_as, two};
        let [n, v] = two(&logits);
        let g = host(&grad)[0];
        let (t, w, lse) = (host_ids(&targets), host(&weights), host(&lse));
        let mut dx = owned_as(logits, &[n, v], "cross-entropy: logits (N, V)"); // ∂x over x
        super::cpu::xent::backward(dx.storage_mut::<f32>(), v, &t, &w, &lse, g);
        dx
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl XentOps for burn_cubecl::CubeBackend {
    fn xent_forward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        super::cube::xent::forward(logits, targets, weights)
    }

    fn xent_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        super::cube::xent::backward(logits, targets, weights, lse, grad)
    }
}

impl<B: XentOps, C: CheckpointStrategy> XentOps for Autodiff<B, C> {
    // The two halves on autodiff tensors run untracked (only the backward node calls them).
    fn xent_forward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (loss, lse) =
            B::xent_forward(logits.into_primitive(), targets, weights.into_primitive());
        (
            FloatTensor::<Self>::new(loss),
            FloatTensor::<Self>::new(lse),
        )
    }

    fn xent_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        FloatTensor::<Self>::new(B::xent_backward(
            logits.into_primitive(),
            targets,
            weights.into_primitive(),
            lse.into_primitive(),
            grad.into_primitive(),
        ))
    }

    fn fused_xent(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct XentBackward;
        type Saved<B> = (FloatTensor<B>, IntTensor<B>, FloatTensor<B>, FloatTensor<B>);
        impl<B: XentOps> Backward<B, 1> for XentBackward {
            type State = Saved<B>;
            fn backward(self, ops: Ops<Saved<B>, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let (x, t, w, lse) = ops.state;
                if let [Some(node)] = ops.parents {
                    grads.register::<B>(node.id, B::xent_backward(x, t, w, lse, grad));
                }
            }
        }
        let node = logits.node();
        let x = logits.into_primitive();
        let w = weights.into_primitive(); // data, not differentiated
        let (loss, lse) = B::xent_forward(x.clone(), targets.clone(), w.clone());
        match XentBackward.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((x, targets, w, lse), loss),
            OpsKind::UnTracked(prep) => prep.finish(loss),
        }
    }
}

/// [`XentOps::fused_xent`] on tensors: logits (N, V), targets (N), weights (N) → (1).
pub fn cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>, weights: Tensor<1>) -> Tensor<1> {
    Tensor::from_dispatch(<Dispatch as XentOps>::fused_xent(
        logits.into_dispatch(),
        targets.into_dispatch(),
        weights.into_dispatch(),
    ))
}

//! The fused attention kernel as one Burn operation ([`AttentionOps`], Burn's
//! `#[backend_extension]`): a forward that returns what its backward needs and that backward,
//! implemented per backend — `Flex` by the tiled host code of [`super::cpu::attention`], the
//! CubeCL backends (`wgpu`, `cuda`; with Burn's fusion, which defers them like any other op)
//! by the kernels of [`super::cube::attention`] — and the differentiable operation
//! ([`AttentionOps::fused_attention`]) that records the backward on `Autodiff`.
//!
//! ```text
//! forward:  (q (B, H, Q, D), k, v (B, H, C, D), z (H)) → (o (B, H, Q, D), lse (B, H, Q))
//! backward: (q, k, v, z, o, lse, ∂o) → (∂q, ∂k, ∂v, ∂z)
//! ```

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, backend_extension};
use burn::tensor::Tensor;
use std::sync::Arc;

pub use super::attention::{Alibi, Tiles};

/// What the attention kernel needs besides q, k, v and the extra logit (see
/// [`super::cpu::attention`]): the score scale, the visible key columns of every query row,
/// and an additive logit bias (ALiBi), shared by the batch.
#[derive(Debug, Clone)]
pub struct AttnArgs {
    /// Multiplies q·k (1/√d_h).
    pub scale: f32,
    /// Per query row, up to two half-open runs `[start, end)` of visible key columns (an
    /// empty run is `[0, 0]`).
    pub runs: Arc<Vec<[[u32; 2]; 2]>>,
    /// ALiBi's bias as the CPU half reads it: (H, Q, C) row-major, added to the scaled scores
    /// of visible keys; None: no bias.
    pub bias: Option<Arc<Vec<f32>>>,
    /// The same bias as the CubeCL half computes it in its tiles: the slopes and where the
    /// positions start. Present exactly when `bias` is ([`super::attention::Plan::new`]).
    pub alibi: Option<Alibi>,
    /// The CubeCL half's block and tile sizes: chosen for the device, or fixed (tests).
    pub tiles: Tiles,
}

/// The output metadata of the forward under Burn's fusion: o like q, lse (B, H, Q).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn forward_meta(
    q: &burn::backend::fusion::custom::TensorSpec,
    _k: &burn::backend::fusion::custom::TensorSpec,
    _v: &burn::backend::fusion::custom::TensorSpec,
    _z: &burn::backend::fusion::custom::TensorSpec,
    _args: &AttnArgs,
) -> (
    burn::backend::fusion::custom::TensorSpec,
    burn::backend::fusion::custom::TensorSpec,
) {
    let d = q.shape.as_slice();
    let lse = burn::backend::fusion::custom::TensorSpec::new(
        burn::tensor::Shape::from(d[..3].to_vec()),
        burn::tensor::DType::F32, // in f32 whatever q is stored in
    );
    (q.clone(), lse)
}

/// The attention kernel's two halves and the differentiable operation.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    Cube: cfg(any(feature = "wgpu", feature = "cuda")),
    Fusion: cfg(any(feature = "wgpu", feature = "cuda")),
    Autodiff
)]
pub trait AttentionOps: Backend {
    /// (o (B, H, Q, D), lse (B, H, Q)): softmax attention of q (B, H, Q, D) over the visible
    /// keys of k, v (B, H, C, D) plus one extra logit z_h per row whose value is 0 (−inf:
    /// none); lse = log(e^z_h + Σ_j e^s_ij). o is stored like q, lse in f32. The CPU half
    /// takes f32 only; the CubeCL half also f16/bf16 q, k, v (f32 arithmetic inside).
    #[fusion(meta = forward_meta)]
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        args: AttnArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// (∂q, ∂k, ∂v, ∂z) for ∂o, from the forward's inputs, o and lse.
    #[allow(clippy::too_many_arguments)]
    #[fusion(meta = |q, k, v, z, _o, _lse, _g, _args| (q.clone(), k.clone(), v.clone(), z.clone()))]
    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: AttnArgs,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    );

    /// o alone: the operation the model calls (differentiable on `Autodiff`).
    #[fusion(default)]
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        args: AttnArgs,
    ) -> FloatTensor<Self> {
        Self::attention_forward(q, k, v, z, args).0
    }
}

#[cfg(feature = "flex")]
impl AttentionOps for burn::backend::flex::Flex {
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        args: AttnArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        use super::cpu::attention::{Dims, forward};
        use super::ops::{flex, host};
        use super::views::{flex4, like, st, strided};
        use burn::backend::TensorMetadata;
        let dims = Dims::of(q.shape().as_slice(), k.shape().as_slice());
        let [b, h, nq, d] = [dims.b, dims.h, dims.q, dims.d];
        let ((qt, qv), (kt, kv), (vt, vv)) = (strided(&q), strided(&k), strided(&v));
        let ov = like(qv, h, nq, d);
        let (out, lse) = forward(
            st(&qt, qv),
            st(&kt, kv),
            st(&vt, vv),
            &host(&z),
            dims,
            &args,
            ov,
        );
        (flex4(out, [b, h, nq, d], ov), flex(lse, &[b, h, nq]))
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: AttnArgs,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    ) {
        use super::cpu::attention::{Dims, Saved, backward};
        use super::ops::{flex, host};
        use super::views::{flex4, like, st, strided};
        use burn::backend::TensorMetadata;
        let dims = Dims::of(q.shape().as_slice(), k.shape().as_slice());
        let (b, h, nq, c, d) = (dims.b, dims.h, dims.q, dims.c, dims.d);
        let ((qt, qv), (kt, kv), (vt, vv)) = (strided(&q), strided(&k), strided(&v));
        let ((ot, ov), (gt, gv)) = (strided(&out), strided(&grad));
        let views = (like(qv, h, nq, d), like(kv, h, c, d), like(vv, h, c, d));
        let g = backward(
            Saved {
                q: st(&qt, qv),
                k: st(&kt, kv),
                v: st(&vt, vv),
                z: &host(&z),
                out: st(&ot, ov),
                lse: &host(&lse),
            },
            st(&gt, gv),
            dims,
            &args,
            views,
        );
        (
            flex4(g.dq, [b, h, nq, d], views.0),
            flex4(g.dk, [b, h, c, d], views.1),
            flex4(g.dv, [b, h, c, d], views.2),
            flex(g.dz, &[h]),
        )
    }
}

impl<B: AttentionOps, C: CheckpointStrategy> AttentionOps for Autodiff<B, C> {
    // The two halves on autodiff tensors run untracked (only the backward node calls them).
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        args: AttnArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (o, lse) = B::attention_forward(
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            z.into_primitive(),
            args,
        );
        (FloatTensor::<Self>::new(o), FloatTensor::<Self>::new(lse))
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: AttnArgs,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    ) {
        let (dq, dk, dv, dz) = B::attention_backward(
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            z.into_primitive(),
            out.into_primitive(),
            lse.into_primitive(),
            grad.into_primitive(),
            args,
        );
        let w = FloatTensor::<Self>::new;
        (w(dq), w(dk), w(dv), w(dz))
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        args: AttnArgs,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct AttentionBackward;
        type Saved<B> = ([FloatTensor<B>; 6], AttnArgs);
        impl<B: AttentionOps> Backward<B, 4> for AttentionBackward {
            type State = Saved<B>;
            fn backward(self, ops: Ops<Saved<B>, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let ([q, k, v, z, out, lse], args) = ops.state;
                let (dq, dk, dv, dz) = B::attention_backward(q, k, v, z, out, lse, grad, args);
                for (parent, g) in ops.parents.into_iter().zip([dq, dk, dv, dz]) {
                    if let Some(node) = parent {
                        grads.register::<B>(node.id, g);
                    }
                }
            }
        }
        let nodes = [q.node(), k.node(), v.node(), z.node()];
        let (q, k, v, z) = (
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            z.into_primitive(),
        );
        let (out, lse) =
            B::attention_forward(q.clone(), k.clone(), v.clone(), z.clone(), args.clone());
        match AttentionBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(([q, k, v, z, out.clone(), lse], args), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}

/// [`AttentionOps::fused_attention`] on tensors: q (B, H, Q, D), k and v (B, H, C, D), z (H).
pub fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    z: Tensor<1>,
    args: AttnArgs,
) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as AttentionOps>::fused_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        z.into_dispatch(),
        args,
    ))
}

//! The kernels as Burn operations: a backend extension ([`KernelOps`], Burn's
//! `#[backend_extension]`) with a CPU half on `Flex` and a hand-written backward on `Autodiff`,
//! and the `Tensor` functions the model calls.
//!
//! Two traits split the work. [`KernelPrimitives`] is what a backend implements: each kernel's
//! forward (returning what its backward needs) and backward, on the backend's own tensors —
//! `Flex` by the host code of [`super::cpu`] (the GPU issue adds the `Cube` half beside it).
//! [`KernelOps`] is the dispatched, differentiable operation: on a plain backend it runs the
//! forward, on `Autodiff<B>` it runs the forward and records a backward node that calls
//! `B`'s backward. Only devices [`super::runs_on`] accepts reach these functions; any other
//! device keeps the explicit path (calling an extension on an unlisted backend panics).

use super::cpu;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor, Layout};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, Backend, DType, Dispatch, TensorMetadata, backend_extension};
use burn::tensor::{Int, Shape, Tensor};
use std::sync::Arc;

/// What the attention kernel needs besides q, k, v and the extra logit (see
/// [`cpu::attention`]): the score scale, the visible key columns of every query row, and an
/// additive logit bias (ALiBi), shared by the batch.
#[derive(Debug, Clone)]
pub struct AttnArgs {
    /// Multiplies q·k (1/√d_h).
    pub scale: f32,
    /// Per query row, up to two half-open runs `[start, end)` of visible key columns (an
    /// empty run is `[0, 0]`).
    pub runs: Arc<Vec<[[u32; 2]; 2]>>,
    /// (H, Q, C) row-major, added to the scaled scores of visible keys; None: no bias.
    pub bias: Option<Arc<Vec<f32>>>,
}

/// The per-backend half of every kernel (host tensors in, host tensors out).
pub trait KernelPrimitives: Backend {
    /// Attention forward: (out (B, H, Q, D), lse (B, H, Q)).
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        args: &AttnArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// Attention backward: (∂q, ∂k, ∂v, ∂z).
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: &AttnArgs,
    ) -> [FloatTensor<Self>; 4];
    /// Cross-entropy forward: (loss (1), lse (N)).
    fn xent_forward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// Cross-entropy backward: ∂logits (N, V) for the loss gradient `grad` (1).
    fn xent_backward(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self>;
}

/// The dispatched, differentiable kernels.
#[backend_extension(Flex, Autodiff)]
pub trait KernelOps: Backend {
    /// q (B, H, Q, D), k and v (B, H, C, D), z (H) → (B, H, Q, D): softmax attention over the
    /// visible keys plus one extra logit z_h per row whose value is 0 (−inf: none).
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        z: FloatTensor<Self>,
        args: AttnArgs,
    ) -> FloatTensor<Self>;
    /// logits (N, V), targets (N), weights (N) → `Σ_i w_i (−log softmax(x_i)[t_i])` (1).
    fn fused_xent(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> FloatTensor<Self>;
}

impl KernelOps for Flex {
    fn fused_attention(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        z: FlexTensor,
        args: AttnArgs,
    ) -> FlexTensor {
        Self::attention_forward(q, k, v, z, &args).0
    }
    fn fused_xent(logits: FlexTensor, targets: FlexTensor, weights: FlexTensor) -> FlexTensor {
        Self::xent_forward(logits, targets, weights).0
    }
}

impl<B: KernelPrimitives, C: CheckpointStrategy> KernelOps for Autodiff<B, C> {
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
        impl<B: KernelPrimitives> Backward<B, 4> for AttentionBackward {
            type State = Saved<B>;
            fn backward(self, ops: Ops<Saved<B>, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let ([q, k, v, z, out, lse], args) = ops.state;
                let d = B::attention_backward(q, k, v, z, out, lse, grad, &args);
                for (parent, g) in ops.parents.into_iter().zip(d) {
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
        let (out, lse) = B::attention_forward(q.clone(), k.clone(), v.clone(), z.clone(), &args);
        match AttentionBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(([q, k, v, z, out.clone(), lse], args), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn fused_xent(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct XentBackward;
        type Saved<B> = (FloatTensor<B>, IntTensor<B>, FloatTensor<B>, FloatTensor<B>);
        impl<B: KernelPrimitives> Backward<B, 1> for XentBackward {
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

/// A Flex tensor's f32 values in row-major order (copied only when not contiguous).
fn host(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    assert_eq!(t.dtype(), DType::F32, "the CPU kernels run in f32");
    match t.as_slice::<f32>() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(t.to_contiguous().storage::<f32>().to_vec()),
    }
}

/// A Flex integer tensor's values as u32 (token ids).
fn host_ids(t: &FlexTensor) -> Vec<u32> {
    let t = t.to_contiguous();
    match t.dtype() {
        DType::I64 => t.storage::<i64>().iter().map(|&x| x as u32).collect(),
        DType::I32 => t.storage::<i32>().iter().map(|&x| x as u32).collect(),
        DType::U32 => t.storage::<u32>().to_vec(),
        other => panic!("token ids of dtype {other:?}"),
    }
}

/// A contiguous f32 Flex tensor of `shape` holding `data`.
fn flex(data: Vec<f32>, shape: &[usize]) -> FlexTensor {
    let shape = Shape::from(shape.to_vec());
    let bytes = burn::tensor::Bytes::from_elems(data);
    FlexTensor::new(bytes, Layout::contiguous(shape), DType::F32)
}

impl KernelPrimitives for Flex {
    fn attention_forward(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        z: FlexTensor,
        args: &AttnArgs,
    ) -> (FlexTensor, FlexTensor) {
        let dims = cpu::attention::Dims::of(q.shape().as_slice(), k.shape().as_slice());
        let (out, lse) =
            cpu::attention::forward(&host(&q), &host(&k), &host(&v), &host(&z), dims, args);
        let [b, h, nq, d] = [dims.b, dims.h, dims.q, dims.d];
        (flex(out, &[b, h, nq, d]), flex(lse, &[b, h, nq]))
    }

    fn attention_backward(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        z: FlexTensor,
        out: FlexTensor,
        lse: FlexTensor,
        grad: FlexTensor,
        args: &AttnArgs,
    ) -> [FlexTensor; 4] {
        let dims = cpu::attention::Dims::of(q.shape().as_slice(), k.shape().as_slice());
        let g = cpu::attention::backward(
            cpu::attention::Saved {
                q: &host(&q),
                k: &host(&k),
                v: &host(&v),
                z: &host(&z),
                out: &host(&out),
                lse: &host(&lse),
            },
            &host(&grad),
            dims,
            args,
        );
        let (b, h, nq, c, d) = (dims.b, dims.h, dims.q, dims.c, dims.d);
        [
            flex(g.dq, &[b, h, nq, d]),
            flex(g.dk, &[b, h, c, d]),
            flex(g.dv, &[b, h, c, d]),
            flex(g.dz, &[h]),
        ]
    }

    fn xent_forward(
        logits: FlexTensor,
        targets: FlexTensor,
        weights: FlexTensor,
    ) -> (FlexTensor, FlexTensor) {
        let [n, v] = two(&logits);
        let (loss, lse) =
            cpu::xent::forward(&host(&logits), v, &host_ids(&targets), &host(&weights));
        (flex(vec![loss as f32], &[1]), flex(lse, &[n]))
    }

    fn xent_backward(
        logits: FlexTensor,
        targets: FlexTensor,
        weights: FlexTensor,
        lse: FlexTensor,
        grad: FlexTensor,
    ) -> FlexTensor {
        let [n, v] = two(&logits);
        let g = host(&grad)[0];
        let dx = cpu::xent::backward(
            &host(&logits),
            v,
            &host_ids(&targets),
            &host(&weights),
            &host(&lse),
            g,
        );
        flex(dx, &[n, v])
    }
}

/// The two dimensions of a matrix.
fn two(t: &FlexTensor) -> [usize; 2] {
    match t.shape().as_slice() {
        &[n, v] => [n, v],
        d => panic!("expected a matrix, got shape {d:?}"),
    }
}

/// [`KernelOps::fused_attention`] on tensors: q (B, H, Q, D), k and v (B, H, C, D), z (H).
pub fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    z: Tensor<1>,
    args: AttnArgs,
) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as KernelOps>::fused_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        z.into_dispatch(),
        args,
    ))
}

/// [`KernelOps::fused_xent`] on tensors: logits (N, V), targets (N), weights (N) → (1).
pub fn cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>, weights: Tensor<1>) -> Tensor<1> {
    Tensor::from_dispatch(<Dispatch as KernelOps>::fused_xent(
        logits.into_dispatch(),
        targets.into_dispatch(),
        weights.into_dispatch(),
    ))
}

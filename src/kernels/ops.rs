//! The CPU kernels as Burn operations: a backend extension ([`KernelOps`], Burn's
//! `#[backend_extension]`) with a CPU half on `Flex` and a hand-written backward on `Autodiff`,
//! and the `Tensor` functions the model calls. (The attention kernel, which also has a `Cube`
//! half, is its own extension: [`super::attention_op`].)
//!
//! Two traits split the work. [`KernelPrimitives`] is what a backend implements: each kernel's
//! forward (returning what its backward needs) and backward, on the backend's own tensors —
//! `Flex` by the host code of [`super::cpu`]. [`KernelOps`] is the dispatched, differentiable
//! operation: on a plain backend it runs the forward, on `Autodiff<B>` it runs the forward and
//! records a backward node that calls `B`'s backward. Only devices [`super::runs_on`] accepts
//! reach these functions; any other device keeps the explicit path (calling an extension on an
//! unlisted backend panics).

use super::cpu;
use super::cpu::attention::View;
use super::views::{flex4, strided};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor, Layout};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, Backend, DType, Dispatch, TensorMetadata, backend_extension};
use burn::tensor::{Int, Shape, Tensor};

pub use super::attention_op::AttnArgs;

/// The activation of a gated feed-forward product ([`cpu::glu`]).
pub use cpu::glu::Act;
/// How a linear kernel's weight is stored ([`cpu::linear`]).
pub use cpu::linear::WeightLayout;

/// The rotated width r and the pairing of a rotary embedding ([`cpu::rope`]).
#[derive(Debug, Clone, Copy)]
pub struct RopeArgs {
    pub r: usize,
    pub pairing: cpu::rope::Pairing,
}

/// A normalisation's kind and ε ([`cpu::norm`]).
#[derive(Debug, Clone, Copy)]
pub struct NormArgs {
    pub kind: cpu::norm::Kind,
    pub eps: f32,
}

/// The per-backend half of every kernel (host tensors in, host tensors out).
pub trait KernelPrimitives: Backend {
    /// x (N, in) · W (W stored as `lay` says).
    fn linear_forward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        lay: WeightLayout,
    ) -> FloatTensor<Self>;
    /// (∂x, ∂W) for ∂y; ∂x needs W and ∂W needs x: each only when its input is given.
    fn linear_backward(
        x: Option<FloatTensor<Self>>,
        w: Option<FloatTensor<Self>>,
        grad: FloatTensor<Self>,
        lay: WeightLayout,
        d_in: usize,
    ) -> (Option<FloatTensor<Self>>, Option<FloatTensor<Self>>);
    /// act(a) ⊙ b.
    fn glu_forward(a: FloatTensor<Self>, b: FloatTensor<Self>, act: Act) -> FloatTensor<Self>;
    /// (∂a, ∂b).
    fn glu_backward(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        act: Act,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// Norm forward: (y (N, d), r (N)).
    fn norm_forward(
        x: FloatTensor<Self>,
        g: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: NormArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// (∂x, ∂g, ∂b) (∂b zeros for RMSNorm).
    fn norm_backward(
        x: FloatTensor<Self>,
        g: FloatTensor<Self>,
        r: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        args: NormArgs,
    ) -> [FloatTensor<Self>; 3];
    /// x (B, H, S, d) rotated by the tables cos, sin (S, r/2) (row (b, h, s) at position s);
    /// by −θ when `inverse` (the backward).
    fn rope_apply(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        args: RopeArgs,
        inverse: bool,
    ) -> FloatTensor<Self>;
}

/// The dispatched, differentiable kernels.
#[backend_extension(Flex, Autodiff)]
pub trait KernelOps: Backend {
    /// x (N, in), W (in, out) or Wᵀ (out, in) as `lay` says → x W (N, out).
    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        lay: WeightLayout,
    ) -> FloatTensor<Self>;
    /// a, b (N, F) → act(a) ⊙ b.
    fn fused_glu(a: FloatTensor<Self>, b: FloatTensor<Self>, act: Act) -> FloatTensor<Self>;
    /// x (N, d), gain g (d), bias b (d; unused by RMSNorm) → the normalised rows.
    fn fused_norm(
        x: FloatTensor<Self>,
        g: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: NormArgs,
    ) -> FloatTensor<Self>;
    /// x (B, H, S, d), constant tables cos, sin (S, r/2) → x rotated (row (b, h, s) at
    /// position s).
    fn fused_rope(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        args: RopeArgs,
    ) -> FloatTensor<Self>;
}

impl KernelOps for Flex {
    fn fused_rope(x: FlexTensor, cos: FlexTensor, sin: FlexTensor, args: RopeArgs) -> FlexTensor {
        Self::rope_apply(x, cos, sin, args, false)
    }
    fn fused_linear(x: FlexTensor, w: FlexTensor, lay: WeightLayout) -> FlexTensor {
        Self::linear_forward(x, w, lay)
    }
    fn fused_glu(a: FlexTensor, b: FlexTensor, act: Act) -> FlexTensor {
        Self::glu_forward(a, b, act)
    }
    fn fused_norm(x: FlexTensor, g: FlexTensor, b: FlexTensor, args: NormArgs) -> FlexTensor {
        Self::norm_forward(x, g, b, args).0
    }
}

impl<B: KernelPrimitives, C: CheckpointStrategy> KernelOps for Autodiff<B, C> {
    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        lay: WeightLayout,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct LinearBackward;
        type Saved<B> = (
            Option<FloatTensor<B>>,
            Option<FloatTensor<B>>,
            WeightLayout,
            usize,
        );
        impl<B: KernelPrimitives> Backward<B, 2> for LinearBackward {
            type State = Saved<B>;
            fn backward(self, ops: Ops<Saved<B>, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let [nx, nw] = ops.parents;
                // ∂x needs W, ∂W needs x: the state holds what the tracked parents need
                let (x, w, lay, d_in) = ops.state;
                let (dx, dw) = B::linear_backward(x, w, grad, lay, d_in);
                for (node, g) in [(nx, dx), (nw, dw)] {
                    if let (Some(node), Some(g)) = (node, g) {
                        grads.register::<B>(node.id, g);
                    }
                }
            }
        }
        let (x_tracked, w_tracked) = (x.is_tracked(), w.is_tracked());
        let d_in = x.shape()[1];
        let nodes = [x.node(), w.node()];
        let (x, w) = (x.into_primitive(), w.into_primitive());
        let y = B::linear_forward(x.clone(), w.clone(), lay);
        match LinearBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(
                (w_tracked.then_some(x), x_tracked.then_some(w), lay, d_in),
                y,
            ),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_glu(a: FloatTensor<Self>, b: FloatTensor<Self>, act: Act) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct GluBackward;
        type Saved<B> = (FloatTensor<B>, FloatTensor<B>, Act);
        impl<B: KernelPrimitives> Backward<B, 2> for GluBackward {
            type State = Saved<B>;
            fn backward(self, ops: Ops<Saved<B>, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let (a, b, act) = ops.state;
                let (da, db) = B::glu_backward(a, b, grad, act);
                for (node, g) in ops.parents.into_iter().zip([da, db]) {
                    if let Some(node) = node {
                        grads.register::<B>(node.id, g);
                    }
                }
            }
        }
        let nodes = [a.node(), b.node()];
        let (a, b) = (a.into_primitive(), b.into_primitive());
        let h = B::glu_forward(a.clone(), b.clone(), act);
        match GluBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((a, b, act), h),
            OpsKind::UnTracked(prep) => prep.finish(h),
        }
    }

    fn fused_norm(
        x: FloatTensor<Self>,
        g: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: NormArgs,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct NormBackward;
        type Saved<B> = ([FloatTensor<B>; 3], NormArgs);
        impl<B: KernelPrimitives> Backward<B, 3> for NormBackward {
            type State = Saved<B>;
            fn backward(self, ops: Ops<Saved<B>, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let ([x, g, r], args) = ops.state;
                let d = B::norm_backward(x, g, r, grad, args);
                for (node, g) in ops.parents.into_iter().zip(d) {
                    if let Some(node) = node {
                        grads.register::<B>(node.id, g);
                    }
                }
            }
        }
        let nodes = [x.node(), g.node(), b.node()];
        let (x, g, b) = (x.into_primitive(), g.into_primitive(), b.into_primitive());
        let (y, r) = B::norm_forward(x.clone(), g.clone(), b, args);
        match NormBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(([x, g, r], args), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_rope(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        args: RopeArgs,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct RopeBackward;
        type Saved<B> = (FloatTensor<B>, FloatTensor<B>, RopeArgs);
        impl<B: KernelPrimitives> Backward<B, 1> for RopeBackward {
            type State = Saved<B>;
            fn backward(self, ops: Ops<Saved<B>, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let (cos, sin, args) = ops.state;
                if let [Some(node)] = ops.parents {
                    // the tables are constants: only x has a gradient (rotation by −θ)
                    grads.register::<B>(node.id, B::rope_apply(grad, cos, sin, args, true));
                }
            }
        }
        let nodes = [x.node()];
        let (x, cos, sin) = (
            x.into_primitive(),
            cos.into_primitive(),
            sin.into_primitive(),
        );
        let y = B::rope_apply(x, cos.clone(), sin.clone(), args, false);
        match RopeBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((cos, sin, args), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }
}

/// A Flex tensor's f32 values in row-major order (copied only when not contiguous).
pub(super) fn host(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    assert_eq!(t.dtype(), DType::F32, "the CPU kernels run in f32");
    match t.as_slice::<f32>() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(t.to_contiguous().storage::<f32>().to_vec()),
    }
}

/// A Flex integer tensor's values as u32 (token ids).
pub(super) fn host_ids(t: &FlexTensor) -> Vec<u32> {
    let t = t.to_contiguous();
    match t.dtype() {
        DType::I64 => t.storage::<i64>().iter().map(|&x| x as u32).collect(),
        DType::I32 => t.storage::<i32>().iter().map(|&x| x as u32).collect(),
        DType::U32 => t.storage::<u32>().to_vec(),
        other => panic!("token ids of dtype {other:?}"),
    }
}

/// A contiguous f32 Flex tensor of `shape` holding `data`.
pub(super) fn flex(data: Vec<f32>, shape: &[usize]) -> FlexTensor {
    let shape = Shape::from(shape.to_vec());
    let bytes = burn::tensor::Bytes::from_elems(data);
    FlexTensor::new(bytes, Layout::contiguous(shape), DType::F32)
}

impl KernelPrimitives for Flex {
    fn linear_forward(x: FlexTensor, w: FlexTensor, lay: WeightLayout) -> FlexTensor {
        let [n, d_in] = two(&x);
        let d_out = w.shape().num_elements() / d_in;
        let y = cpu::linear::forward(&host(&x), &host(&w), lay, n, d_in, d_out);
        flex(y, &[n, d_out])
    }

    fn linear_backward(
        x: Option<FlexTensor>,
        w: Option<FlexTensor>,
        grad: FlexTensor,
        lay: WeightLayout,
        d_in: usize,
    ) -> (Option<FlexTensor>, Option<FlexTensor>) {
        let [n, d_out] = two(&grad);
        let g = host(&grad);
        let dx = w.map(|w| {
            let dx = cpu::linear::grad_x(&g, &host(&w), lay, n, d_in, d_out);
            flex(dx, &[n, d_in])
        });
        let dw = x.map(|x| {
            let dw = cpu::linear::grad_w(&host(&x), &g, lay, n, d_in, d_out);
            match lay {
                WeightLayout::InOut => flex(dw, &[d_in, d_out]),
                WeightLayout::OutIn => flex(dw, &[d_out, d_in]),
            }
        });
        (dx, dw)
    }

    fn glu_forward(a: FlexTensor, b: FlexTensor, act: Act) -> FlexTensor {
        let shape = a.shape().to_vec();
        flex(cpu::glu::forward(act, &host(&a), &host(&b)), &shape)
    }

    fn glu_backward(
        a: FlexTensor,
        b: FlexTensor,
        grad: FlexTensor,
        act: Act,
    ) -> (FlexTensor, FlexTensor) {
        let shape = a.shape().to_vec();
        let mut da = owned_as(grad, &shape, "glu: ∂h is shaped like a"); // ∂a over ∂h
        let db = cpu::glu::backward(act, &host(&a), &host(&b), da.storage_mut::<f32>());
        (da, flex(db, &shape))
    }

    fn norm_forward(
        x: FlexTensor,
        g: FlexTensor,
        b: FlexTensor,
        args: NormArgs,
    ) -> (FlexTensor, FlexTensor) {
        let [n, d] = two(&x);
        let bias = host(&b);
        let (y, r) = cpu::norm::forward(args.kind, &host(&x), &host(&g), Some(&bias), d, args.eps);
        (flex(y, &[n, d]), flex(r, &[n]))
    }

    fn norm_backward(
        x: FlexTensor,
        g: FlexTensor,
        r: FlexTensor,
        grad: FlexTensor,
        args: NormArgs,
    ) -> [FlexTensor; 3] {
        let [n, d] = two(&x);
        let mut dx = owned_as(grad, &[n, d], "norm: ∂y is shaped like x"); // ∂x over ∂y
        let (dg, db) = cpu::norm::backward(
            args.kind,
            &host(&x),
            &host(&g),
            &host(&r),
            dx.storage_mut::<f32>(),
            d,
        );
        [
            dx,
            flex(dg, &[d]),
            flex(db.unwrap_or_else(|| vec![0.0; d]), &[d]),
        ]
    }

    fn rope_apply(
        x: FlexTensor,
        cos: FlexTensor,
        sin: FlexTensor,
        args: RopeArgs,
        inverse: bool,
    ) -> FlexTensor {
        let [b, h, s, d] = match x.shape().as_slice() {
            &[b, h, s, d] => [b, h, s, d],
            other => panic!("rope: expected (B, H, S, d), got {other:?}"),
        };
        // Heads split off a linear layer's output are (B, S, H, d) in storage: rotated where
        // they lie (the H rows of a position share its angles) and returned in that layout.
        let (xt, view) = strided(&x);
        let (xt, view, group) = if view == View::seq_major(h, s, d) {
            (xt, view, h)
        } else if view == View::heads_major(h, s, d) {
            (xt, view, 1)
        } else {
            (x.to_contiguous(), View::heads_major(h, s, d), 1)
        };
        let y = cpu::rope::apply(
            &xt.storage::<f32>()[..b * h * s * d],
            &host(&cos),
            &host(&sin),
            d,
            args.r,
            group,
            args.pairing,
            inverse,
        );
        flex4(y, [b, h, s, d], view)
    }
}

/// The two dimensions of a matrix.
pub(super) fn two(t: &FlexTensor) -> [usize; 2] {
    match t.shape().as_slice() {
        &[n, v] => [n, v],
        d => panic!("expected a matrix, got shape {d:?}"),
    }
}

/// [`KernelOps::fused_rope`] on tensors: x (B, H, S, d), cos and sin (S, r/2) → (B, H, S, d).
pub fn rope(x: Tensor<4>, cos: Tensor<2>, sin: Tensor<2>, args: RopeArgs) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as KernelOps>::fused_rope(
        x.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        args,
    ))
}

/// [`KernelOps::fused_linear`] on tensors: x (N, in), W (in, out) or (out, in) as `lay` says
/// → (N, out).
pub fn linear(x: Tensor<2>, w: Tensor<2>, lay: WeightLayout) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as KernelOps>::fused_linear(
        x.into_dispatch(),
        w.into_dispatch(),
        lay,
    ))
}

/// [`KernelOps::fused_glu`] on tensors: a, b (N, F) → act(a) ⊙ b.
pub fn glu(a: Tensor<2>, b: Tensor<2>, act: Act) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as KernelOps>::fused_glu(
        a.into_dispatch(),
        b.into_dispatch(),
        act,
    ))
}

/// [`KernelOps::fused_norm`] on tensors: x (N, d), g (d), b (d) → (N, d).
pub fn norm(x: Tensor<2>, g: Tensor<1>, b: Tensor<1>, args: NormArgs) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as KernelOps>::fused_norm(
        x.into_dispatch(),
        g.into_dispatch(),
        b.into_dispatch(),
        args,
    ))
}

/// Operations outside autodiff: an evaluation's loss, a gradient's sum of squares.
#[backend_extension(Flex)]
pub trait UpdateOps: Backend {
    /// The head and cross-entropy of an evaluation: h (N, d), the head's weight as `lay` says,
    /// targets (N), weights (N) → `Σ_i w_i (−log softmax(h_i W)[t_i])` (1) ([`cpu::head_xent`]).
    fn head_xent(
        h: FloatTensor<Self>,
        w: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weights: FloatTensor<Self>,
        lay: WeightLayout,
    ) -> FloatTensor<Self>;
    /// `Σ x_i²` of a gradient (any shape) in one pass → (1), summed in f64.
    fn sum_squares(x: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// A contiguous f32 Flex tensor that owns its buffer alone (copied otherwise), for in-place
/// updates and for backwards that write their result over an input they read last (no
/// allocation, no zero-fill): no tensor anyone else holds is ever written. Its `storage_mut`
/// then never copies.
pub(super) fn owned(t: FlexTensor) -> FlexTensor {
    let exact = t.is_contiguous()
        && t.layout().start_offset() == 0
        && t.bytes().len() == t.shape().num_elements() * 4;
    if exact && t.is_unique() {
        t
    } else {
        flex(host(&t).into_owned(), t.shape().as_slice())
    }
}

/// [`owned`] for a backward that writes its result over an input of a known shape (panics
/// with `what` if the input has another).
pub(super) fn owned_as(t: FlexTensor, shape: &[usize], what: &str) -> FlexTensor {
    let t = owned(t);
    assert_eq!(t.shape().as_slice(), shape, "{what}");
    t
}

impl UpdateOps for Flex {
    fn head_xent(
        h: FlexTensor,
        w: FlexTensor,
        targets: FlexTensor,
        weights: FlexTensor,
        lay: WeightLayout,
    ) -> FlexTensor {
        let [n, d] = two(&h);
        let v = w.shape().num_elements() / d;
        let loss = cpu::head_xent::loss(
            &host(&h),
            &host(&w),
            lay,
            n,
            d,
            v,
            &host_ids(&targets),
            &host(&weights),
        );
        flex(vec![loss as f32], &[1])
    }

    fn sum_squares(x: FlexTensor) -> FlexTensor {
        use rayon::prelude::*;
        // per-chunk partial sums added in chunk order: the same value on any number of threads
        let parts: Vec<f64> = host(&x)
            .par_chunks(1 << 16)
            .map(|c| super::simd::dot_f64(c, c))
            .collect();
        flex(vec![parts.iter().sum::<f64>() as f32], &[1])
    }
}

/// [`UpdateOps::sum_squares`] on a tensor → `Σ x²` (f64 inside, returned as f32).
pub fn sum_squares(x: Tensor<1>) -> f32 {
    Tensor::<1>::from_dispatch(<Dispatch as UpdateOps>::sum_squares(x.into_dispatch()))
        .into_scalar::<f32>()
}

/// [`UpdateOps::head_xent`] on tensors (outside autodiff): h (N, d), W (d, V) or (V, d) as
/// `lay` says, targets (N), weights (N) → (1).
pub fn head_cross_entropy(
    h: Tensor<2>,
    w: Tensor<2>,
    targets: Tensor<1, Int>,
    weights: Tensor<1>,
    lay: WeightLayout,
) -> Tensor<1> {
    Tensor::from_dispatch(<Dispatch as UpdateOps>::head_xent(
        h.into_dispatch(),
        w.into_dispatch(),
        targets.into_dispatch(),
        weights.into_dispatch(),
        lay,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel writes over a buffer only when nothing else reads it: a shared tensor (a view
    /// or a clone) is copied and keeps its values; a lone contiguous one is handed over as is.
    #[test]
    fn owned_never_overwrites_a_shared_buffer() {
        let t = flex((0..6).map(|i| i as f32).collect(), &[2, 3]);
        let view = t.clone();
        let mut w = owned(t);
        w.storage_mut::<f32>().fill(-1.0);
        assert_eq!(host(&view).to_vec(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(host(&w).to_vec(), vec![-1.0; 6]);

        let lone = flex(vec![7.0; 6], &[3, 2]);
        let at = lone.storage::<f32>().as_ptr();
        let mut w = owned(lone);
        assert_eq!(
            w.storage_mut::<f32>().as_ptr(),
            at,
            "a lone buffer is reused"
        );

        // a transposed view of a lone buffer is not row-major: copied in row-major order
        let lone = flex((0..6).map(|i| i as f32).collect(), &[2, 3]);
        let tr = lone.transpose(0, 1);
        drop(lone);
        let w = owned(tr);
        assert_eq!(w.shape().as_slice(), &[3, 2]);
        assert_eq!(host(&w).to_vec(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    }

    /// The one-pass sum of squares against f64, over more elements than one task's chunk
    /// and a tail.
    #[test]
    fn sum_squares_matches_f64() {
        let n = 3 * (1 << 16) + 123;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 97.0)
            .collect();
        let want: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
        let t = Tensor::<1>::from_data(
            burn::tensor::TensorData::new(x, [n]),
            &burn::tensor::Device::flex(),
        );
        let got = sum_squares(t) as f64;
        assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
    }
}

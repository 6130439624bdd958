//! AdamW as one Burn operation outside autodiff ([`AdamOps`], Burn's `#[backend_extension]`,
//! the shape of [`super::attention_op`] without a backward): the CPU half on `Flex`
//! ([`super::cpu::adamw`]) and the CubeCL half ([`super::cube::adamw`]). See
//! [`super::adamw`] for the maths and the choice of half.
//!
//! ```text
//! (p, g, m, v (n), scale (1)) → (p, m, v)
//! ```

use super::adamw::AdamArgs;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::Tensor;

/// AdamW's two halves.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    Cube: cfg(any(feature = "wgpu", feature = "cuda")),
    Fusion: cfg(any(feature = "wgpu", feature = "cuda"))
)]
pub trait AdamOps: Backend {
    /// AdamW on flat p, g, m, v (n), the gradient scaled by `scale`'s one value → (p, m, v).
    #[fusion(meta = |p, _g, m, v, _s, _a| (p.clone(), m.clone(), v.clone()))]
    fn adamw_update(
        p: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        args: AdamArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
}

#[cfg(feature = "flex")]
impl AdamOps for burn::backend::flex::Flex {
    fn adamw_update(
        p: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        args: AdamArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use super::ops::{host, owned};
        let (mut p, mut m, mut v) = (owned(p), owned(m), owned(v));
        let (g, s) = (host(&g), host(&scale)[0]);
        super::cpu::adamw::update(
            p.storage_mut::<f32>(),
            &g,
            m.storage_mut::<f32>(),
            v.storage_mut::<f32>(),
            s,
            args,
        );
        (p, m, v)
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl AdamOps for burn_cubecl::CubeBackend {
    fn adamw_update(
        p: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        args: AdamArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        super::cube::adamw::update(p, g, m, v, scale, args)
    }
}

/// [`AdamOps::adamw_update`] on tensors (n) → (p, m, v).
pub fn adamw(
    p: Tensor<1>,
    g: Tensor<1>,
    m: Tensor<1>,
    v: Tensor<1>,
    scale: Tensor<1>,
    args: AdamArgs,
) -> (Tensor<1>, Tensor<1>, Tensor<1>) {
    let (p, m, v) = <Dispatch as AdamOps>::adamw_update(
        p.into_dispatch(),
        g.into_dispatch(),
        m.into_dispatch(),
        v.into_dispatch(),
        scale.into_dispatch(),
        args,
    );
    (
        Tensor::from_dispatch(p),
        Tensor::from_dispatch(m),
        Tensor::from_dispatch(v),
    )
}

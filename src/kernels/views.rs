//! Views of Flex tensors for the CPU kernels: a 4-d tensor's storage with the strides through
//! which (B, H, N, D) reaches into it, and outputs built in the layout their input had, so heads
//! split off a linear layer's output are neither copied into (B, H, N, D) order nor back
//! (`docs/reference.md` §12, "Where the heads lie").

use super::cpu::attention::{Strided, View};
use burn::backend::TensorMetadata;
use burn::backend::flex::{FlexTensor, Layout};
use burn::tensor::{DType, Shape};

/// A 4-d Flex tensor's storage and how (B, H, N, D) reaches into it: its own strides when the
/// last dimension is unit-stride and none is negative (the kernel reads heads split off a
/// linear layer's output in place), else a contiguous copy.
pub(crate) fn strided(t: &FlexTensor) -> (FlexTensor, View) {
    let (shape, layout) = (t.shape(), t.layout());
    let st = layout.strides();
    match (shape.as_slice(), st) {
        (&[_, _, _, _], &[sb, sh, rs, 1]) if sb >= 0 && sh >= 0 && rs >= 0 => (
            t.clone(),
            View {
                off: layout.start_offset(),
                sb: sb as usize,
                sh: sh as usize,
                rs: rs as usize,
            },
        ),
        (&[_, h, n, d], _) => (t.to_contiguous(), View::heads_major(h, n, d)),
        (other, _) => panic!("attention kernel: expected a 4-d tensor, got {other:?}"),
    }
}

/// The kernel's view of a tensor [`strided`] returned.
pub(crate) fn st(t: &FlexTensor, view: View) -> Strided<'_> {
    Strided {
        data: t.storage::<f32>(),
        view,
    }
}

/// The layout an output shaped like an input takes: sequence-major when the input is (its
/// gradient then flows back through the head split without a copy), else heads-major.
pub(crate) fn like(view: View, h: usize, n: usize, d: usize) -> View {
    if view == View::seq_major(h, n, d) {
        view
    } else {
        View::heads_major(h, n, d)
    }
}

/// A Flex f32 tensor (B, H, N, D) holding `data` stored through `view` (heads- or sequence-major).
pub(crate) fn flex4(data: Vec<f32>, [b, h, n, d]: [usize; 4], view: View) -> FlexTensor {
    debug_assert!(view == View::seq_major(h, n, d) || view == View::heads_major(h, n, d));
    let strides = [view.sb, view.sh, view.rs, 1].map(|x| x as isize).to_vec();
    FlexTensor::new(
        burn::tensor::Bytes::from_elems(data),
        Layout::new(Shape::from(vec![b, h, n, d]), strides, 0),
        DType::F32,
    )
}

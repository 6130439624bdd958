//! GFLOP/s of the `gemm` crate (the products behind Burn's CPU matmul and sinklab's CPU kernels)
//! on the SmolLM2 shape's and the natural-text model's products, on one thread and on every
//! core; one JSON line per (threads, shape). `scripts/bench_gemm.py` runs it beside PyTorch's
//! `torch.mm` (MKL) on the same shapes.
//!
//!     cargo run --release --example bench_gemm

use std::time::Instant;

/// (m, n, k): C (m × n) = A (m × k) · B (k × n), all row-major.
const SHAPES: [(usize, usize, usize); 8] = [
    (1024, 576, 576),   // SmolLM2 shape: q / o projections of 2 × 512 tokens
    (1024, 192, 576),   // k / v (3 KV heads of 64)
    (1024, 1536, 576),  // SwiGLU up / gate
    (1024, 576, 1536),  // SwiGLU down
    (1024, 49152, 576), // the tied head's logits
    (2048, 128, 128),   // natural text: projections of 16 × 128 tokens
    (2048, 512, 128),   // its FFN in
    (2048, 2048, 128),  // its head
];

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, cores] {
        for &(m, n, k) in &SHAPES {
            let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
            let mut c = vec![0f32; m * n];
            let par = if threads == 1 {
                gemm::Parallelism::None
            } else {
                gemm::Parallelism::Rayon(threads)
            };
            let mut run = || unsafe {
                // SAFETY: a, b, c hold m × k, k × n, m × n row-major values.
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    k as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    par,
                )
            };
            for _ in 0..3 {
                run();
            }
            let flop = 2.0 * (m * n * k) as f64;
            let iters = ((4e10 / flop) as usize).max(3);
            let t = Instant::now();
            for _ in 0..iters {
                run();
            }
            let gflops = flop * iters as f64 / t.elapsed().as_secs_f64() / 1e9;
            println!(
                "{{\"threads\": {threads}, \"m\": {m}, \"n\": {n}, \"k\": {k}, \"gflops\": {gflops:.1}}}"
            );
        }
    }
}

//! GFLOP/s of the `gemm` crate (the products behind Burn's CPU matmul and sinklab's CPU kernels)
//! on the SmolLM2 shape's and the natural-text model's products, on one thread and on every
//! core; one JSON line per (threads, shape). `scripts/bench_gemm.py` runs it beside PyTorch's
//! `torch.mm` (MKL) on the same shapes; beside it sinklab's packed AVX2 products
//! (`kernels::cpu::sgemm`) where the CPU has AVX2 and FMA.
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

/// GFLOP/s of `run` (one product per call), after 3 untimed calls.
fn rate(flop: f64, mut run: impl FnMut()) -> f64 {
    for _ in 0..3 {
        run();
    }
    let iters = ((4e10 / flop) as usize).max(3);
    let t = Instant::now();
    for _ in 0..iters {
        run();
    }
    flop * iters as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    use sinklab::kernels::cpu::sgemm;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, cores] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        for &(m, n, k) in &SHAPES {
            let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
            let mut c = vec![0f32; m * n];
            let par = if threads == 1 {
                gemm::Parallelism::None
            } else {
                gemm::Parallelism::Rayon(threads)
            };
            let flop = 2.0 * (m * n * k) as f64;
            let gflops = pool.install(|| {
                rate(flop, || unsafe {
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
                })
            });
            // sinklab's packed AVX2 products (`kernels::cpu::sgemm`), where the CPU has them
            let packed = sgemm::supported().then(|| {
                pool.install(|| {
                    rate(flop, || unsafe {
                        // SAFETY: as above; AVX2 and FMA checked.
                        sgemm::product(
                            (m, n, k),
                            (c.as_mut_ptr(), n, false),
                            (a.as_ptr(), k as isize, 1),
                            (b.as_ptr(), n as isize, 1),
                            1.0,
                            threads,
                        )
                    })
                })
            });
            let packed = packed.map_or("null".to_string(), |g| format!("{g:.1}"));
            println!(
                "{{\"threads\": {threads}, \"m\": {m}, \"n\": {n}, \"k\": {k}, \"gflops\": {gflops:.1}, \"packed_gflops\": {packed}}}"
            );
        }
    }
}

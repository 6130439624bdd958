//! Cached decoding (docs/reference.md §6): for every shipped zoo and skipless variant, token-by-token
//! decoding with a KV cache (and a chunked prefill) reproduces the uncached forward; streaming
//! with S + W ≥ length equals dense; with eviction, a one-layer model (whose keys and values
//! depend only on the token, so a re-rotated cache is exact) equals a fresh forward over the
//! kept tokens; sampling is reproducible and respects top-k.

use crate::common::{self, tensor_values};

use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use sinklab::config::{self, Experiment, MaskConfig};
use sinklab::generate::{self, Sampling};
use sinklab::model::{CachePolicy, Lm};

const VOCAB: usize = 61;

fn random_tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..VOCAB as u32)).collect()
}

fn ids(t: &[u32], dev: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = t.iter().map(|&x| x as i64).collect();
    Tensor::from_data(TensorData::new(v, [1, t.len()]), dev)
}

/// A shipped experiment shrunk to 2 layers and a short context, with larger weights so that
/// attention is far from uniform (a cache bug then moves the logits visibly).
fn shrunk(path: &std::path::Path, ctx: usize, layers: usize) -> Experiment {
    let mut e = config::load(path, &[]).unwrap_or_else(|e| panic!("{e}"));
    e.model.n_layers = layers;
    e.model.ctx = ctx;
    e.model.init_std = Some(0.3);
    if let MaskConfig::SlidingWindow { w } = &mut e.model.attention.mask {
        *w = (*w).min(5);
    }
    if let MaskConfig::SinksWindow { sinks, w } = &mut e.model.attention.mask {
        *sinks = (*sinks).min(2);
        *w = (*w).min(5);
    }
    e
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn cached_decoding_equals_the_uncached_forward_for_every_variant() {
    let dev = common::device();
    let ctx = 12;
    let toks = random_tokens(ctx, 3);
    let mut files = common::experiment_files("experiments/zoo");
    files.extend(common::experiment_files("experiments/skipless"));
    let mut checked = 0;
    for path in &files {
        let e = shrunk(path, ctx, 2);
        let model = Lm::new(&e.model, VOCAB, 7, &dev);
        let full = tensor_values(model.forward(ids(&toks, &dev)));
        let spread = full.iter().fold(0f32, |m, x| m.max(x.abs()));
        let mut cache = match model.cache(CachePolicy::DENSE) {
            Ok(c) => c,
            Err(err) => {
                // Only the bidirectional prefix mask may refuse, and it must say why.
                assert!(
                    matches!(e.model.attention.mask, MaskConfig::Prefix { .. }),
                    "{}: {err}",
                    path.display()
                );
                assert!(err.to_string().contains("prefix"), "{err}");
                continue;
            }
        };
        // Prefill 5 tokens in one call, then one token at a time.
        let mut got = tensor_values(
            model
                .forward_cached(ids(&toks[..5], &dev), &mut cache)
                .unwrap(),
        );
        for t in &toks[5..] {
            got.extend(tensor_values(
                model.forward_cached(ids(&[*t], &dev), &mut cache).unwrap(),
            ));
        }
        let d = max_diff(&full, &got);
        assert!(
            d <= 2e-4 * spread.max(1.0),
            "{}: cached vs uncached logits differ by {d} (spread {spread})",
            path.display()
        );
        assert!(spread > 0.1, "{}: logits are degenerate", path.display());
        assert_eq!(cache.len(), ctx);
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} variants checked");
    // Past the context the dense cache refuses rather than inventing positions.
    let e = shrunk(&files[0], ctx, 2);
    let model = Lm::new(&e.model, VOCAB, 7, &dev);
    let mut cache = model.cache(CachePolicy::DENSE).unwrap();
    model.forward_cached(ids(&toks, &dev), &mut cache).unwrap();
    let err = model
        .forward_cached(ids(&toks[..1], &dev), &mut cache)
        .unwrap_err();
    assert!(err.to_string().contains("model.ctx"), "{err}");
}

#[test]
fn streaming_without_eviction_equals_dense() {
    let dev = common::device();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    for name in [
        "natural_text.toml",
        "zoo/kv_bias.toml",
        "zoo/sink_token.toml",
        "zoo/sigmoid.toml",
    ] {
        let e = shrunk(&root.join(name), 16, 2);
        let model = Lm::new(&e.model, VOCAB, 9, &dev);
        let toks = random_tokens(16, 4);
        let dense = generate::dense_nll(&model, &toks, &dev).unwrap();
        for policy in [
            CachePolicy::DENSE,
            CachePolicy {
                sinks: 4,
                window: Some(12),
            },
            CachePolicy {
                sinks: 0,
                window: Some(16),
            },
        ] {
            let s = generate::stream_nll(&model, &toks, policy, &dev, &mut |_| {}).unwrap();
            assert_eq!(s.len(), 15);
            for (a, b) in dense.iter().zip(&s) {
                assert!((a - b).abs() < 1e-4, "{name} {policy:?}: {a} vs {b}");
            }
        }
        // The re-computation reference equals dense within the context too.
        let r = generate::recompute_nll(&model, &toks, 16, 4, &dev, &mut |_| {}).unwrap();
        for (a, b) in dense.iter().zip(&r) {
            assert!((a - b).abs() < 1e-4, "{name} recompute: {a} vs {b}");
        }
    }
}

/// One layer: a token's cached key (before RoPE) and value depend only on the token, so the
/// evicted, re-rotated cache must give exactly the forward over [first S ; last W] tokens.
/// Absolute positions (sinusoidal, learned) live in the embedding: the cache re-embeds what it
/// keeps, which gives the same equality at any depth (checked with 1 and 2 layers).
#[test]
fn eviction_with_rerotation_matches_a_fresh_forward_over_the_kept_tokens() {
    let dev = common::device();
    let mut checked_dense = 0;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    for (name, layers) in [
        ("natural_text.toml", 1),
        ("zoo/alibi.toml", 1),
        ("zoo/nope.toml", 1),
        ("zoo/relative.toml", 1),
        ("zoo/kv_bias.toml", 1),
        ("zoo/sink_token.toml", 1),
        ("zoo/sinusoidal.toml", 1),
        ("zoo/learned.toml", 1),
        ("zoo/sinusoidal.toml", 2),
        ("zoo/learned.toml", 2),
    ] {
        let e = shrunk(&root.join(name), 10, layers);
        let model = Lm::new(&e.model, VOCAB, 5, &dev);
        let toks = random_tokens(30, 8);
        let (s, w) = (2, 6);
        let policy = CachePolicy {
            sinks: s,
            window: Some(w),
        };
        let streamed = generate::stream_nll(&model, &toks, policy, &dev, &mut |_| {}).unwrap();
        for i in [s + w, 17, 28] {
            // token i+1 from the cache after tokens[..=i]: kept = first s and last w of them
            let mut kept: Vec<u32> = toks[..s].to_vec();
            kept.extend_from_slice(&toks[i + 1 - w..=i]);
            let logits = tensor_values(model.forward(ids(&kept, &dev)));
            let last = &logits[logits.len() - VOCAB..];
            let want = generate::nll(last, toks[i + 1]);
            assert!(
                (streamed[i] - want).abs() < 1e-4,
                "{name} at {i}: streamed {} vs fresh forward {want}",
                streamed[i]
            );
        }
        // Window only differs from window + sinks once tokens are evicted.
        let window_only = generate::stream_nll(
            &model,
            &toks,
            CachePolicy {
                sinks: 0,
                window: Some(s + w),
            },
            &dev,
            &mut |_| {},
        )
        .unwrap();
        assert!(
            (window_only[7] - streamed[7]).abs() < 1e-4,
            "{name}: identical before eviction"
        );
        assert!(
            (window_only[20] - streamed[20]).abs() > 1e-6,
            "{name}: eviction has an effect"
        );
        // stream-eval decodes the first s + w tokens once and forks that dense cache into each
        // policy: bit-identical to decoding every policy from scratch.
        let mut shared = model.cache(CachePolicy::DENSE).unwrap();
        let head = generate::continue_nll(&model, &mut shared, &toks[..=s + w], &dev, &mut |_| {})
            .unwrap();
        let mut forked = shared.fork(policy).unwrap();
        let rest =
            generate::continue_nll(&model, &mut forked, &toks[s + w..], &dev, &mut |_| {}).unwrap();
        let joined: Vec<f64> = head.iter().copied().chain(rest).collect();
        assert_eq!(joined, streamed, "{name}: forked after the shared prefix");
        // stream-eval's shared prefix is one prefill, and its dense row one forward: each
        // equals token-by-token decoding up to rounding
        let mut prefilled = model.cache(CachePolicy::DENSE).unwrap();
        let pre = generate::prefill_nll(&model, &mut prefilled, &toks[..=s + w], &dev).unwrap();
        // dense past model.ctx where the positions extend (as stream-eval does)
        let mut long = Lm::new(&e.model, VOCAB, 5, &dev);
        let extended = long.extend_positions(toks.len()).is_ok();
        let close = |a: &[f64], b: &[f64], what: &str| {
            assert_eq!(a.len(), b.len(), "{name}: {what}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                    "{name}, {what}, token {i}: {x} vs {y}"
                );
            }
        };
        close(&pre, &head, "prefill vs token by token");
        if extended {
            let tbt = generate::stream_nll(&long, &toks, CachePolicy::DENSE, &dev, &mut |_| {});
            let fwd = generate::forward_nll(&long, &toks, &dev);
            close(
                &fwd.unwrap(),
                &tbt.unwrap(),
                "dense forward vs token by token",
            );
            checked_dense += 1;
        }
        assert!(shared.fork(policy).is_ok());
        let mut longer = model.cache(CachePolicy::DENSE).unwrap();
        generate::continue_nll(&model, &mut longer, &toks[..=s + w + 1], &dev, &mut |_| {})
            .unwrap();
        assert!(
            longer.fork(policy).is_err(),
            "{name}: a cache past the budget cannot fork"
        );
        // The evicting policies of one budget decoded together as the rows of one cache
        // (stream-eval): each row equals its policy decoded alone.
        let budget = s + w;
        let row_policies: Vec<CachePolicy> = [0, 1, 2, 4]
            .map(|k| CachePolicy {
                sinks: k,
                window: Some(budget - k),
            })
            .to_vec();
        let mut rows = shared.fork_rows(&row_policies).unwrap();
        let together = generate::continue_nll_rows(
            &model,
            &mut rows,
            row_policies.len(),
            &toks[s + w..],
            &dev,
            &mut |_| {},
        )
        .unwrap();
        for (p, got) in row_policies.iter().zip(&together) {
            let mut alone = shared.fork(*p).unwrap();
            let want =
                generate::continue_nll(&model, &mut alone, &toks[s + w..], &dev, &mut |_| {})
                    .unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{name}, {p:?}, token {i}: together {g} vs alone {w}"
                );
            }
        }
        let mixed = [
            policy,
            CachePolicy {
                sinks: 0,
                window: Some(budget + 1),
            },
        ];
        assert!(
            shared.fork_rows(&mixed).is_err(),
            "{name}: one budget per cache"
        );
        assert!(
            shared.fork_rows(&[CachePolicy::DENSE]).is_err(),
            "{name}: rows evict"
        );
    }
    // the models whose positions extend past model.ctx (all but the absolute ones)
    assert!(
        checked_dense >= 6,
        "dense forward checked on {checked_dense} models"
    );
}

/// StreamingLLM's dense control runs past the training context where the positions are
/// defined (RoPE, ALiBi, sinusoids, ...), and equals the full forward there; learned absolute
/// positions refuse.
#[test]
fn dense_decoding_past_the_training_context() {
    let dev = common::device();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let toks = random_tokens(21, 6);
    for name in ["natural_text.toml", "zoo/alibi.toml", "zoo/sinusoidal.toml"] {
        let e = shrunk(&root.join(name), 8, 2);
        let mut model = Lm::new(&e.model, VOCAB, 2, &dev);
        assert!(model.fixed_length().is_none(), "{name}");
        let mut cache = model.cache(CachePolicy::DENSE).unwrap();
        let err = model
            .forward_cached(ids(&toks[..9], &dev), &mut cache)
            .unwrap_err();
        assert!(err.to_string().contains("model.ctx = 8"), "{name}: {err}");
        model.extend_positions(toks.len()).unwrap();
        let streamed =
            generate::stream_nll(&model, &toks, CachePolicy::DENSE, &dev, &mut |_| {}).unwrap();
        let full = tensor_values(model.forward(ids(&toks[..20], &dev)));
        for (i, s) in streamed.iter().enumerate() {
            let want = generate::nll(&full[i * VOCAB..(i + 1) * VOCAB], toks[i + 1]);
            assert!((s - want).abs() < 1e-4, "{name} at {i}: {s} vs {want}");
        }
    }
    let e = shrunk(&root.join("zoo/learned.toml"), 8, 2);
    let mut model = Lm::new(&e.model, VOCAB, 2, &dev);
    let err = model.extend_positions(20).unwrap_err().to_string();
    assert!(err.contains("learned absolute positions"), "{err}");
}

#[test]
fn sampling_is_seeded_greedy_is_argmax_and_top_k_is_respected() {
    let row = [0.1f32, 3.0, -1.0, 2.5, 0.0];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let greedy = Sampling {
        temperature: 0.0,
        top_k: 0,
        seed: 0,
    };
    assert_eq!(generate::sample(&row, &greedy, &mut rng), 1);
    let top2 = Sampling {
        temperature: 5.0,
        top_k: 2,
        seed: 0,
    };
    let mut seen = [0usize; 5];
    for _ in 0..2000 {
        seen[generate::sample(&row, &top2, &mut rng) as usize] += 1;
    }
    assert_eq!(seen[0] + seen[2] + seen[4], 0, "{seen:?}");
    // p(1)/p(3) = exp(0.5/5) = 1.105: about 1050 / 950 of 2000
    assert!((950..1150).contains(&seen[1]), "{seen:?}");
    let dev = common::device();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let e = shrunk(&root.join("natural_text.toml"), 16, 2);
    let model = Lm::new(&e.model, VOCAB, 9, &dev);
    let s = Sampling {
        temperature: 1.0,
        top_k: 10,
        seed: 42,
    };
    let a = generate::generate(&model, &[1, 2, 3], 8, &s, CachePolicy::DENSE, &dev).unwrap();
    let b = generate::generate(&model, &[1, 2, 3], 8, &s, CachePolicy::DENSE, &dev).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.len(), 8);
    // Greedy generation with the cache equals greedy generation by full forwards.
    let g = generate::generate(&model, &[1, 2, 3], 6, &greedy, CachePolicy::DENSE, &dev).unwrap();
    let mut seq = vec![1u32, 2, 3];
    for _ in 0..6 {
        let logits = tensor_values(model.forward(ids(&seq, &dev)));
        let last = &logits[logits.len() - VOCAB..];
        seq.push(generate::sample(last, &greedy, &mut rng));
    }
    assert_eq!(g, seq[3..]);
}

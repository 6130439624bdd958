//! Identities of the model zoo (STYLE habit 8): at special parameter values a variant equals the
//! baseline or a simpler variant; masked attention entries are exactly 0 for every normaliser;
//! gradients reach every trainable parameter and are finite; and a finite-difference check of
//! each custom normaliser's backward pass.

use crate::common;
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use sinklab::checkpoint::HostTensor;
use sinklab::config::{self, Experiment};
use sinklab::model::{Lm, masked_nll};
use sinklab::optim::{self, GradAccumulator};
use std::collections::BTreeMap;

const VOCAB: usize = 29;

/// An experiment whose `[model]` is the tiny base below with `model` (TOML lines of `[model]`)
/// and `attention` (lines of `[model.attention]`) merged over it.
pub(crate) fn exp(model: &str, attention: &str) -> Experiment {
    let base = "[model]\nd_model = 16\nn_layers = 2\nn_heads = 2\nd_ff = 24\nctx = 7\n\
                [train]\nbatch_tokens = 112\nmicro_batch = 16\n\
                [metrics]\nprobe_len = 7\nk_max = 3\n";
    let mut table: toml::Table = toml::from_str(base).unwrap();
    let delta = format!("[model]\n{model}\n[model.attention]\n{attention}\n");
    let delta: toml::Table = toml::from_str(&delta).unwrap_or_else(|e| panic!("{e}\n{delta}"));
    config::deep_merge(&mut table, delta);
    let text = toml::to_string(&table).unwrap();
    config::from_str("identity.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

pub(crate) fn build(e: &Experiment, dev: &Device) -> Lm {
    Lm::new(&e.model, VOCAB, 11, dev)
}

pub(crate) fn tokens(dev: &Device, seed: u64) -> Tensor<2, Int> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let data: Vec<i64> = (0..2 * 7).map(|_| rng.gen_range(0..VOCAB as i64)).collect();
    Tensor::from_data(TensorData::new(data, [2, 7]), dev)
}

pub(crate) fn logits(m: &Lm, dev: &Device) -> Vec<f32> {
    m.forward(tokens(dev, 5))
        .into_data()
        .try_to_vec::<f32>()
        .unwrap()
}

pub(crate) fn assert_same(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    let worst = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(worst <= tol, "{what}: max |difference| {worst} > {tol}");
    // and the check is not vacuous: logits vary
    let spread = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(spread > 0.1, "{what}: logits are all near 0");
}

pub(crate) fn params(m: &Lm) -> BTreeMap<String, HostTensor> {
    optim::export_params(m)
}

#[test]
fn softmax_n_with_n_0_is_softmax() {
    let dev = common::device();
    let a = build(&exp("", "normaliser = { kind = \"softmax\" }"), &dev);
    let b = build(
        &exp("", "normaliser = { kind = \"softmax_n\", n = 0.0 }"),
        &dev,
    );
    assert_same(&logits(&a, &dev), &logits(&b, &dev), 1e-5, "softmax_0");
}

#[test]
fn off_by_one_equals_a_zero_sink_logit_and_a_zero_kv_bias() {
    let dev = common::device();
    let one = logits(
        &build(
            &exp("", "normaliser = { kind = \"softmax_n\", n = 1.0 }"),
            &dev,
        ),
        &dev,
    );
    let z = logits(
        &build(
            &exp(
                "",
                "slot = { kind = \"sink_logit\", init = 0.0, trainable = false }",
            ),
            &dev,
        ),
        &dev,
    );
    let kv = logits(
        &build(
            &exp(
                "",
                "slot = { kind = \"k_bias\", value = { kind = \"zero\" }, trainable = false }",
            ),
            &dev,
        ),
        &dev,
    );
    assert_same(&one, &z, 1e-5, "softmax_1 vs sink logit 0");
    assert_same(&one, &kv, 1e-5, "softmax_1 vs k* = v* = 0");
    // and off-by-one really differs from softmax
    let soft = logits(&build(&exp("", ""), &dev), &dev);
    let diff = one
        .iter()
        .zip(&soft)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff > 1e-3, "softmax_1 equals softmax: {diff}");
}

#[test]
fn a_zero_sink_token_acts_as_off_by_one_and_no_sink_tokens_is_the_baseline() {
    let dev = common::device();
    for positions in ["{ kind = \"nope\" }", "{ kind = \"rope\", base = 10000.0 }"] {
        let base = exp(&format!("positions = {positions}"), "");
        let none = exp(&format!("positions = {positions}\nsink_tokens = 0"), "");
        assert_eq!(params(&build(&base, &dev)), params(&build(&none, &dev)));
        // One sink token whose embedding is 0: its hidden state stays 0 in every layer (no
        // biases), so every query sees an extra key with logit 0 and value 0: softmax_1.
        let sink = exp(&format!("positions = {positions}\nsink_tokens = 1"), "");
        let mut w = params(&build(&sink, &dev));
        w.get_mut("sink_tokens").unwrap().data.fill(0.0);
        let m = optim::import_params(build(&sink, &dev), &w).unwrap();
        let one = exp(
            &format!("positions = {positions}"),
            "normaliser = { kind = \"softmax_n\", n = 1.0 }",
        );
        // RoPE rotates the real tokens by positions 1..T instead of 0..T−1: relative angles are
        // unchanged, so the logits agree.
        assert_same(
            &logits(&m, &dev),
            &logits(&build(&one, &dev), &dev),
            2e-5,
            &format!("zero sink token vs softmax_1 ({positions})"),
        );
    }
}

#[test]
fn prefix_1_and_windows_of_at_least_t_are_causal() {
    let dev = common::device();
    let causal = logits(&build(&exp("", ""), &dev), &dev);
    for mask in [
        "{ kind = \"prefix\", p = 1 }",
        "{ kind = \"sliding_window\", w = 7 }",
        "{ kind = \"sliding_window\", w = 100 }",
        "{ kind = \"sinks_window\", sinks = 2, w = 7 }",
    ] {
        let m = build(&exp("", &format!("mask = {mask}")), &dev);
        assert_same(&causal, &logits(&m, &dev), 1e-6, mask);
    }
    // and a real window differs
    let w = build(
        &exp("", "mask = { kind = \"sliding_window\", w = 2 }"),
        &dev,
    );
    let diff = causal
        .iter()
        .zip(&logits(&w, &dev))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff > 1e-3, "window 2 equals causal");
}

#[test]
fn a_zero_gate_halves_the_output_and_unit_gains_are_the_plain_block() {
    let dev = common::device();
    for gate in ["headwise", "elementwise"] {
        let g = exp("", &format!("gate = {{ kind = \"{gate}\" }}"));
        let mut w = params(&build(&g, &dev));
        for (k, v) in w.iter_mut() {
            if k.contains(".gate.") {
                v.data.fill(0.0); // σ(0) = 1/2
            }
        }
        let gated = optim::import_params(build(&g, &dev), &w).unwrap();
        let plain = exp("", "");
        let mut pw = params(&build(&plain, &dev));
        for (k, v) in pw.iter_mut() {
            if k.ends_with("attn.wo.weight") {
                v.data.iter_mut().for_each(|x| *x *= 0.5);
            }
        }
        let halved = optim::import_params(build(&plain, &dev), &pw).unwrap();
        assert_same(
            &logits(&gated, &dev),
            &logits(&halved, &dev),
            1e-5,
            &format!("{gate} gate at 0 vs W_O/2"),
        );
    }
    let gains = "block = { kind = \"pre_norm\", gains = { alpha_sa = { trainable = true }, \
                 beta_sa = { trainable = true }, alpha_ff = { trainable = true }, \
                 beta_ff = { trainable = true } } }";
    assert_same(
        &logits(&build(&exp("", ""), &dev), &dev),
        &logits(&build(&exp(gains, ""), &dev), &dev),
        1e-6,
        "trainable gains at 1",
    );
}

/// Every variant the tests below sweep: (name, `[model]` lines, `[model.attention]` lines).
fn variants() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        ("softmax", "", ""),
        (
            "softmax_n",
            "",
            "normaliser = { kind = \"softmax_n\", n = 1.0 }",
        ),
        (
            "sigmoid",
            "",
            "normaliser = { kind = \"sigmoid\", bias = \"-ln(T)\" }",
        ),
        (
            "sigmoid_normalised",
            "",
            "normaliser = { kind = \"sigmoid_normalised\" }",
        ),
        ("elu1", "", "normaliser = { kind = \"elu1\" }"),
        (
            "elu1_normalised",
            "",
            "normaliser = { kind = \"elu1_normalised\" }",
        ),
        (
            "linear_identity",
            "",
            "normaliser = { kind = \"linear\", feature_map = \"identity\", normaliser = \"max_abs_sum\" }",
        ),
        (
            "linear_elu1",
            "",
            "normaliser = { kind = \"linear\", feature_map = \"elu1\", normaliser = \"none\" }",
        ),
        (
            "linear_mlp",
            "",
            "normaliser = { kind = \"linear\", feature_map = \"mlp\", normaliser = \"max_abs_sum\" }",
        ),
        ("row_scale", "", "row_scale = 0.5"),
        ("sink_logit", "", "slot = { kind = \"sink_logit\" }"),
        ("kv_bias", "", "slot = { kind = \"kv_bias\" }"),
        (
            "k_bias",
            "",
            "slot = { kind = \"k_bias\", value = { kind = \"e1\", m = 2.0 }, learnable_dims = 3 }",
        ),
        ("v_bias", "", "slot = { kind = \"v_bias\", shared = true }"),
        ("memory_kv", "", "slot = { kind = \"memory_kv\", n = 2 }"),
        ("gate_headwise", "", "gate = { kind = \"headwise\" }"),
        ("gate_elementwise", "", "gate = { kind = \"elementwise\" }"),
        ("gate_per_token", "", "gate = { kind = \"per_token\" }"),
        ("gate_sparse", "", "gate = { kind = \"sparse\", dims = 5 }"),
        ("softpick", "", "normaliser = { kind = \"softpick\" }"),
        (
            "clipped_softmax",
            "",
            "normaliser = { kind = \"clipped_softmax\", gamma = -0.3, zeta = 1.3 }",
        ),
        (
            "scalable_softmax",
            "",
            "normaliser = { kind = \"scalable_softmax\", init = 0.8 }",
        ),
        (
            "scalable_softmax_memory_prefix",
            "",
            "normaliser = { kind = \"scalable_softmax\", per_head = false, init = 0.8 }\n\
             slot = { kind = \"memory_kv\", n = 2 }\nmask = { kind = \"prefix\", p = 3 }",
        ),
        ("sink_tokens", "sink_tokens = 2", ""),
        ("prefix", "", "mask = { kind = \"prefix\", p = 3 }"),
        ("window", "", "mask = { kind = \"sliding_window\", w = 3 }"),
        (
            "sinks_window",
            "",
            "mask = { kind = \"sinks_window\", sinks = 1, w = 2 }",
        ),
        ("nope", "positions = { kind = \"nope\" }", ""),
        ("sinusoidal", "positions = { kind = \"sinusoidal\" }", ""),
        ("learned", "positions = { kind = \"learned\" }", ""),
        ("alibi", "positions = { kind = \"alibi\" }", ""),
        (
            "rope_half",
            "positions = { kind = \"rope\", base = 10000.0, fraction = 0.5 }",
            "",
        ),
        (
            "relative",
            "positions = { kind = \"relative\", buckets = 8, max_distance = 16 }",
            "",
        ),
        ("post_norm", "block = { kind = \"post_norm\" }", ""),
        (
            "parallel",
            "block = { kind = \"parallel\", gains = { alpha = { init = 0.9, trainable = true }, beta_ff = { init = 1.1, trainable = true } } }",
            "",
        ),
        (
            "layer_norm",
            "norm = { kind = \"layer_norm\", eps = 1e-5 }",
            "",
        ),
        ("relu", "ffn = { kind = \"relu\" }", ""),
        ("gelu", "ffn = { kind = \"gelu\" }", ""),
        ("silu", "ffn = { kind = \"silu\" }", ""),
        ("geglu", "ffn = { kind = \"geglu\" }", ""),
        ("reglu", "ffn = { kind = \"reglu\" }", ""),
        (
            "gpt2",
            "norm = { kind = \"layer_norm\", eps = 1e-5 }\npositions = { kind = \"learned\" }\nffn = { kind = \"gelu\" }\nbias = true\nhead = \"tied\"",
            "",
        ),
    ]
}

#[test]
fn masked_entries_are_exactly_zero_for_every_normaliser() {
    let dev = common::device();
    for (name, model, attention) in variants() {
        let e = exp(model, attention);
        let m = build(&e, &dev);
        let (_, layers) = m.forward_probe(tokens(&dev, 2));
        let mask = e.model.attention.mask;
        for p in &layers {
            let w = p.attn.clone().unwrap();
            let [b, h, s, c] = w.dims();
            let data = w.into_data().try_to_vec::<f32>().unwrap();
            let n = p.sink_tokens;
            for r in 0..b * h * s {
                let qi = r % s;
                for kj in 0..c - p.slot_cols {
                    let visible = match (qi < n, kj < n) {
                        (true, true) => kj <= qi,
                        (true, false) => false,
                        (false, true) => true,
                        (false, false) => mask.allows(qi - n, kj - n),
                    };
                    let x = data[r * c + p.slot_cols + kj];
                    if !visible {
                        assert_eq!(x, 0.0, "{name}: query {qi} key {kj} is masked");
                    }
                    assert!(x.is_finite(), "{name}: non-finite weight");
                }
            }
        }
    }
}

#[test]
fn gradients_reach_every_trainable_parameter_and_are_finite() {
    let dev = common::device().autodiff();
    for (name, model, attention) in variants() {
        let e = exp(model, attention);
        let m = build(&e, &dev);
        let x = tokens(&dev, 3);
        let y = tokens(&dev, 4);
        let mask = Tensor::<2>::ones([2, 7], &dev);
        let loss = masked_nll(m.forward(x), y, mask, 14.0);
        let mut acc = GradAccumulator::default();
        acc.add(&m, &loss.backward());
        let all = params(&m);
        for k in all.keys() {
            let constant = k.ends_with("v_star") && attention.contains("k_bias");
            match acc.grads.get(k) {
                Some(g) => {
                    let g = g.to_data().try_to_vec::<f32>().unwrap();
                    assert!(g.iter().all(|x| x.is_finite()), "{name}: {k} non-finite");
                    let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
                    assert!(norm > 0.0, "{name}: {k} has a zero gradient");
                    assert!(!constant, "{name}: constant {k} got a gradient");
                }
                None => assert!(constant, "{name}: {k} got no gradient"),
            }
        }
    }
}

/// Central finite differences of the f32 forward against autodiff, on the parameters whose
/// gradients are largest, for each custom normaliser and the sink slots.
#[test]
fn finite_differences_agree_with_autodiff_for_every_custom_normaliser() {
    let dev = common::device();
    let ad = dev.clone().autodiff();
    let cases = [
        (
            "softmax_n",
            "normaliser = { kind = \"softmax_n\", n = 1.0 }",
        ),
        (
            "sigmoid",
            "normaliser = { kind = \"sigmoid\", bias = -1.0 }",
        ),
        (
            "sigmoid_normalised",
            "normaliser = { kind = \"sigmoid_normalised\" }",
        ),
        ("elu1", "normaliser = { kind = \"elu1\" }"),
        (
            "elu1_normalised",
            "normaliser = { kind = \"elu1_normalised\" }",
        ),
        (
            "linear_identity",
            "normaliser = { kind = \"linear\", feature_map = \"identity\", normaliser = \"max_abs_sum\" }",
        ),
        (
            "linear_elu1",
            "normaliser = { kind = \"linear\", feature_map = \"elu1\", normaliser = \"none\" }",
        ),
        (
            "linear_mlp",
            "normaliser = { kind = \"linear\", feature_map = \"mlp\", normaliser = \"max_abs_sum\" }",
        ),
        ("sink_logit", "slot = { kind = \"sink_logit\", init = 0.5 }"),
        ("kv_bias", "slot = { kind = \"kv_bias\", init_std = 0.5 }"),
        ("softpick", "normaliser = { kind = \"softpick\" }"),
        (
            "clipped_softmax",
            "normaliser = { kind = \"clipped_softmax\", gamma = -0.1, zeta = 1.1 }",
        ),
        (
            "scalable_softmax",
            "normaliser = { kind = \"scalable_softmax\", init = 0.8 }",
        ),
        ("gate_per_token", "gate = { kind = \"per_token\" }"),
    ];
    for (name, attention) in cases {
        let e = exp("d_model = 8\nd_ff = 12", attention);
        let x = tokens(&dev, 8);
        let y = tokens(&dev, 9);
        let loss_of = |w: &BTreeMap<String, HostTensor>| -> f64 {
            let m = optim::import_params(build(&e, &dev), w).unwrap();
            let mask = Tensor::<2>::ones([2, 7], &dev);
            masked_nll(m.forward(x.clone()), y.clone(), mask, 14.0).into_scalar::<f32>() as f64
        };
        let m = build(&e, &ad);
        let w0 = params(&m);
        let xa = Tensor::<2, Int>::from_data(x.to_data(), &ad);
        let ya = Tensor::<2, Int>::from_data(y.to_data(), &ad);
        let loss = masked_nll(m.forward(xa), ya, Tensor::ones([2, 7], &ad), 14.0);
        let mut acc = GradAccumulator::default();
        acc.add(&m, &loss.backward());
        // the 12 largest gradient entries over the attention parameters of layer 1
        let mut entries: Vec<(String, usize, f64)> = Vec::new();
        for (k, g) in &acc.grads {
            if !k.starts_with("blocks.1.attn") {
                continue;
            }
            for (i, v) in g.to_data().try_to_vec::<f32>().unwrap().iter().enumerate() {
                entries.push((k.clone(), i, *v as f64));
            }
        }
        entries.sort_by(|a, b| b.2.abs().partial_cmp(&a.2.abs()).unwrap());
        assert!(entries.len() >= 12, "{name}");
        // f32 forward: a step of 1e-3 keeps rounding error near 1e-4; the ReLU of the MLP
        // kernel and the |·| and max(·, 1) of max_abs_sum are kinks, and a step that crosses one
        // is off by a few percent (2e-3 did, for one entry of linear_mlp; 1e-3 did for another
        // once the loss was the fused cross-entropy: one-sided slopes 0.1445 and 0.1550 around
        // an autodiff 0.1451). Such an entry is measured again with a quarter step, whose
        // rounding error is four times larger (≈ 1e-3).
        let fd_at = |k: &str, i: usize, h: f64| {
            let mut wp = w0.clone();
            wp.get_mut(k).unwrap().data[i] += h as f32;
            let mut wm = w0.clone();
            wm.get_mut(k).unwrap().data[i] -= h as f32;
            (loss_of(&wp) - loss_of(&wm)) / (2.0 * h)
        };
        for (k, i, g) in entries.into_iter().take(12) {
            let fd = fd_at(&k, i, 1e-3);
            if (fd - g).abs() <= 0.03 * g.abs() + 2e-4 {
                continue;
            }
            let fd4 = fd_at(&k, i, 2.5e-4);
            assert!(
                (fd4 - g).abs() <= 0.03 * g.abs() + 1e-3,
                "{name}: d loss / d {k}[{i}]: autodiff {g}, finite differences {fd} (step \
                 1e-3), {fd4} (step 2.5e-4)"
            );
        }
    }
}

/// The normalised sigmoid and elu+1 are computed as softmax(log σ(s)) and softmax(log elu1(s)):
/// with logits near −100 the quotient σ(s)/Σσ(s) underflows to 0/0 and its backward divides by
/// zero (the CPU attention_ops sweep stopped on a NaN gradient at step 118). Queries and keys
/// scaled ×300 put the logits in the hundreds; weights and gradients stay finite and rows sum to 1.
#[test]
fn normalised_sigmoid_and_elu1_survive_huge_logits() {
    let dev = common::device().autodiff();
    for attention in [
        "normaliser = { kind = \"sigmoid_normalised\" }",
        "normaliser = { kind = \"elu1_normalised\" }",
    ] {
        let e = exp("", attention);
        let mut w = params(&build(&e, &dev));
        let mut largest = 0f32;
        for (k, t) in w.iter_mut() {
            if k.ends_with("attn.wq.weight") || k.ends_with("attn.wk.weight") {
                t.data.iter_mut().for_each(|x| *x *= 300.0);
                largest = t.data.iter().fold(largest, |a, x| a.max(x.abs()));
            }
        }
        assert!(
            largest > 50.0,
            "{attention}: the scaled weights are not large"
        );
        let m = optim::import_params(build(&e, &dev), &w).unwrap();
        let (logits, probes) = m.forward_probe(tokens(&dev, 3));
        let mut largest_logit = 0f32;
        for p in &probes {
            let a = p
                .attn
                .clone()
                .unwrap()
                .to_data()
                .try_to_vec::<f32>()
                .unwrap();
            let c = p.attn.clone().unwrap().dims()[3];
            for row in a.chunks(c) {
                let s: f32 = row.iter().sum();
                assert!((s - 1.0).abs() < 1e-4, "{attention}: a row sums to {s}");
            }
            let (q, k) = (p.queries.clone().unwrap(), p.keys.clone().unwrap());
            let dh = q.dims()[3] as f32;
            let s = q.matmul(k.swap_dims(2, 3)).abs().max().into_scalar::<f32>() / dh.sqrt();
            largest_logit = largest_logit.max(s);
        }
        assert!(
            largest_logit > 100.0,
            "{attention}: logits only reach {largest_logit}"
        );
        let mask = Tensor::<2>::ones([2, 7], &dev);
        let loss = masked_nll(logits, tokens(&dev, 4), mask, 14.0);
        assert!(loss.clone().into_scalar::<f32>().is_finite(), "{attention}");
        let mut acc = GradAccumulator::default();
        acc.add(&m, &loss.backward());
        for (k, g) in &acc.grads {
            let g = g.to_data().try_to_vec::<f32>().unwrap();
            assert!(
                g.iter().all(|x| x.is_finite()),
                "{attention}: {k} non-finite"
            );
        }
    }
}

/// The analysis probes one layer and one chunk at a time (`Lm::probe_by_layer`, so a pretrained
/// model's analysis holds one layer's tensors); the evaluation forms logits a block of positions
/// at a time. Both must equal the one-piece forward pass for every variant: the layer-by-layer
/// probe bit for bit (same operations, chunks of 2 over 5 sequences against one batch), the
/// report reduced layer by layer equal to the report of all layers, the chunked NLL within f32
/// rounding of the one-piece loss.
#[test]
fn layer_by_layer_probes_and_chunked_losses_equal_the_whole_pass() {
    use sinklab::data::Batch;
    use sinklab::eval::{ProbeSpec, batch_tensors, probe_layers, probe_report, to_array};
    use sinklab::metrics::{Proxy, SinkReport, split_attention};
    let dev = common::device();
    let (b, t) = (5, 7);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let ids: Vec<u32> = (0..b * t).map(|_| rng.gen_range(0..VOCAB as u32)).collect();
    let mut mask = vec![1.0f32; b * t];
    mask[3] = 0.0;
    let batch = Batch {
        batch: b,
        len: t,
        targets: ids.iter().map(|&x| (x + 1) % VOCAB as u32).collect(),
        inputs: ids,
        loss_mask: mask,
        domains: vec![0; b],
    };
    let mut checked = 0;
    for (name, model, attention) in variants() {
        let e = exp(model, attention);
        let m = build(&e, &dev);
        let proxy = Proxy::for_normaliser(&e.model.attention.normaliser);
        let spec = ProbeSpec::new(&batch, 2, proxy, &dev);
        let streamed = probe_layers(&m, spec.with_queries(true));
        let (x, y, lm) = batch_tensors(&batch, &dev);
        let (logits, whole) = m.forward_probe(x.clone());
        assert_eq!(streamed.len(), whole.len(), "{name}");
        for (l, (s, w)) in streamed.iter().zip(whole).enumerate() {
            let wa = to_array(w.attn.unwrap());
            let (attn, mass) = split_attention(&wa, w.slot_cols, w.sink_tokens, proxy);
            assert_eq!(s.attn, attn, "{name} layer {l} attention");
            if let Some(sm) = &s.slot_mass {
                assert_eq!(sm, &mass, "{name} layer {l} slot mass");
            }
            assert_eq!(s.keys, to_array(w.keys.unwrap()), "{name} layer {l} keys");
            assert_eq!(
                s.values,
                to_array(w.values.unwrap()),
                "{name} layer {l} values"
            );
            assert_eq!(
                s.queries.as_ref().unwrap(),
                &to_array(w.queries.unwrap()),
                "{name} {l} q"
            );
            assert_eq!(
                s.hidden,
                to_array(w.hidden.unwrap()),
                "{name} layer {l} hidden"
            );
        }
        let eps = [0.1, 0.3];
        let report = probe_report(&m, spec, (&eps, 3), None);
        assert_eq!(report, SinkReport::compute(&streamed, &eps, 3), "{name}");
        let denom = batch.loss_mask.iter().sum::<f32>() as f64;
        let one = masked_nll(logits, y.clone(), lm.clone(), denom).into_scalar::<f32>() as f64;
        // at most 6 × 29 logits at once: one position at a time for 5 sequences
        let chunked = m.nll(x, y, lm, denom, None, 2 * 3 * VOCAB);
        assert!(one > 1.0 && one < 10.0, "{name}: loss {one}");
        assert!(
            (chunked - one).abs() <= 2e-6 * one,
            "{name}: {chunked} vs {one}"
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} variants");
}

/// Elements of the parameters that require a gradient.
fn trained_elements(m: &Lm) -> usize {
    use burn::module::{Module, ModuleVisitor, Param};
    struct V(usize);
    impl ModuleVisitor for V {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            let t = p.val();
            if t.is_require_grad() {
                self.0 += t.shape().num_elements();
            }
        }
    }
    let mut v = V(0);
    m.visit(&mut v);
    v.0
}

/// `kernel = "fused"` on every zoo variant: where the fused attention kernel covers the model
/// (sinklab::kernels::attention::covers) its logits and the gradients of every parameter equal
/// the explicit path's; where it does not, the explicit path runs (bit-identical) and the
/// summary `check` prints names the reason.
#[test]
fn the_fused_kernel_agrees_with_the_explicit_path_or_falls_back_and_says_so() {
    let dev = common::device().autodiff();
    let mut covered = Vec::new();
    for (name, model, attention) in variants() {
        let manual = exp(model, &format!("{attention}\nkernel = \"manual\""));
        let fused = exp(model, &format!("{attention}\nkernel = \"fused\""));
        let summary = sinklab::kernels::summary(
            &fused.model,
            sinklab::config::DeviceKind::Flex,
            sinklab::config::Precision::F32,
        )
        .unwrap();
        let (a, b) = (build(&manual, &dev), build(&fused, &dev));
        let (la, lb) = (logits(&a, &dev), logits(&b, &dev));
        match sinklab::kernels::attention::covers(&fused.model) {
            Ok(()) => {
                covered.push(name);
                assert!(summary.contains("the fused kernel"), "{name}: {summary}");
                for (i, (x, y)) in la.iter().zip(&lb).enumerate() {
                    assert!(
                        (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
                        "{name}: logit {i} {x} vs {y}"
                    );
                }
                let grads = |m: &Lm| {
                    let mask = Tensor::<2>::ones([2, 7], &dev);
                    let loss = masked_nll(m.forward(tokens(&dev, 3)), tokens(&dev, 4), mask, 14.0);
                    let mut acc = GradAccumulator::default();
                    acc.add(m, &loss.backward());
                    acc.grads
                };
                let (ga, gb) = (grads(&a), grads(&b));
                // every trained parameter (constants such as a K bias's fixed v* have none)
                let trained = trained_elements(&a);
                assert_eq!(
                    ga.values()
                        .map(|g| g.to_data().num_elements())
                        .sum::<usize>(),
                    trained,
                    "{name}: every trained parameter"
                );
                assert_eq!(
                    ga.keys().collect::<Vec<_>>(),
                    gb.keys().collect::<Vec<_>>(),
                    "{name}"
                );
                for (k, g) in &ga {
                    let g = g.to_data().try_to_vec::<f32>().unwrap();
                    let h = gb[k].to_data().try_to_vec::<f32>().unwrap();
                    let scale = g.iter().fold(0f32, |m, x| m.max(x.abs()));
                    for (x, y) in g.iter().zip(&h) {
                        assert!(
                            (x - y).abs() <= 1e-4 * scale + 1e-7,
                            "{name}: ∂{k} {x} vs {y}"
                        );
                    }
                }
            }
            Err(why) => {
                assert!(!why.is_empty(), "{name}");
                assert!(
                    summary.contains("does not cover") && summary.contains(&why[0]),
                    "{name}: {summary}"
                );
                assert_eq!(la, lb, "{name}: the explicit path runs");
            }
        }
    }
    for want in [
        "softmax",
        "softmax_n",
        "sink_logit",
        "kv_bias",
        "k_bias",
        "v_bias",
        "memory_kv",
        "row_scale",
        "gate_headwise",
        "gate_per_token",
        "gate_sparse",
        "scalable_softmax",
        "scalable_softmax_memory_prefix",
        "sink_tokens",
        "prefix",
        "window",
        "sinks_window",
        "alibi",
        "rope_half",
        "learned",
    ] {
        assert!(
            covered.contains(&want),
            "the kernel covers {want}: {covered:?}"
        );
    }
    for not in [
        "sigmoid",
        "elu1_normalised",
        "linear_mlp",
        "relative",
        "softpick",
        "clipped_softmax",
    ] {
        assert!(!covered.contains(&not), "the kernel does not cover {not}");
    }
}

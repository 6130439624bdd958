//! Identities of the newer sink remedies (STYLE habit 8; docs/reference.md §1.1–1.2): at special
//! parameter values each equals the baseline or a simpler variant, softpick can output exactly
//! nothing, and Scalable-Softmax in the fused kernel equals the explicit path across kernel
//! blocks. (Masked entries, gradient reach, finite differences and fused-against-explicit on the
//! tiny model: the variant list of `zoo_identities`; goldens: `zoo_golden`.)

use crate::common;
use crate::zoo_identities::{assert_same, build, exp, logits, params, tokens};
use burn::tensor::{Int, Tensor, TensorData};
use sinklab::model::{Lm, masked_nll};
use sinklab::optim::{self, GradAccumulator};

/// `model`'s parameters with every tensor whose name contains `part` replaced by `f(name, x)`.
fn with(m: Lm, part: &str, f: impl Fn(&str, &mut Vec<f32>)) -> Lm {
    let mut w = params(&m);
    for (k, v) in w.iter_mut() {
        if k.contains(part) {
            f(k, &mut v.data);
        }
    }
    optim::import_params(m, &w).unwrap()
}

#[test]
fn clipped_softmax_without_stretch_is_softmax() {
    let dev = common::device();
    let soft = logits(&build(&exp("", ""), &dev), &dev);
    let clipped = exp(
        "",
        "normaliser = { kind = \"clipped_softmax\", gamma = 0.0, zeta = 1.0 }",
    );
    // the explicit path against the fused kernel of the softmax model: rounding only
    assert_same(
        &soft,
        &logits(&build(&clipped, &dev), &dev),
        1e-5,
        "γ = 0, ζ = 1",
    );
    // and Bondarenko et al.'s γ = −0.025 changes the logits
    let theirs = exp("", "normaliser = { kind = \"clipped_softmax\" }");
    let l = logits(&build(&theirs, &dev), &dev);
    let diff = l
        .iter()
        .zip(&soft)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff > 1e-4, "γ = −0.025 equals softmax: {diff}");
}

/// σ = 1 / ln T with every query seeing all T keys (prefix p = T) is softmax; σ = 0 is uniform
/// attention, softmax with W_Q = 0.
#[test]
fn scalable_softmax_is_softmax_at_one_over_ln_t_and_uniform_at_zero() {
    let dev = common::device();
    let t = 7.0f64;
    let prefix = "mask = { kind = \"prefix\", p = 7 }";
    let soft = logits(&build(&exp("", prefix), &dev), &dev);
    let ss = exp(
        "",
        &format!(
            "{prefix}\nnormaliser = {{ kind = \"scalable_softmax\", init = {}, trainable = false }}",
            1.0 / t.ln()
        ),
    );
    assert_same(&soft, &logits(&build(&ss, &dev), &dev), 2e-5, "σ = 1/ln T");
    let zero_q = logits(&build(&exp("", "query_init = \"zero\""), &dev), &dev);
    for per_head in [true, false] {
        let s0 = exp(
            "",
            &format!(
                "normaliser = {{ kind = \"scalable_softmax\", init = 0.0, per_head = {per_head} }}"
            ),
        );
        assert_same(&zero_q, &logits(&build(&s0, &dev), &dev), 1e-6, "σ = 0");
    }
    // the default σ is 1 / ln(model.ctx)
    let d = exp("", "normaliser = { kind = \"scalable_softmax\" }");
    match d.model.attention.normaliser {
        sinklab::config::NormaliserConfig::ScalableSoftmax { init, per_head, .. } => {
            assert!((init - 1.0 / t.ln()).abs() < 1e-12 && per_head, "{init}")
        }
        ref n => panic!("{n:?}"),
    }
}

/// With W_Q = 0 every logit is 0, so every softpick weight is ReLU(e⁰ − 1) = 0: attention adds
/// nothing, exactly the model with W_O = 0. With real logits a softpick row sums to at most 1.
#[test]
fn softpick_at_zero_logits_outputs_nothing() {
    let dev = common::device();
    let sp = exp(
        "",
        "normaliser = { kind = \"softpick\" }\nquery_init = \"zero\"",
    );
    let plain = with(
        build(&exp("", "query_init = \"zero\""), &dev),
        "attn.wo",
        |_, x| x.fill(0.0),
    );
    assert_same(
        &logits(&build(&sp, &dev), &dev),
        &logits(&plain, &dev),
        1e-6,
        "softpick at W_Q = 0 vs W_O = 0",
    );
    let (_, layers) = build(&sp, &dev).forward_probe(tokens(&dev, 2));
    for p in &layers {
        let w = p
            .attn
            .clone()
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert!(w.iter().all(|&x| x == 0.0), "all-zero rows");
    }
    let sp = exp("", "normaliser = { kind = \"softpick\" }");
    let (_, layers) = build(&sp, &dev).forward_probe(tokens(&dev, 2));
    let (mut zeros, mut partial) = (0, 0);
    for p in &layers {
        let w = p.attn.clone().unwrap();
        let c = w.dims()[3];
        for row in w.into_data().try_to_vec::<f32>().unwrap().chunks(c) {
            let sum: f32 = row.iter().sum();
            assert!(
                sum <= 1.0 + 1e-6 && row.iter().all(|&x| x >= 0.0),
                "{row:?}"
            );
            zeros += row.iter().filter(|&&x| x == 0.0).count();
            partial += usize::from(sum < 0.999);
        }
    }
    assert!(
        zeros > 0 && partial > 0,
        "softpick zeroes some weights and rows"
    );
}

/// Zero gate weights (and a zero bias) give σ(0) = 1/2 everywhere: the per-token and sparse
/// gates then halve the output (the plain model with W_O halved); a sparse gate on all d
/// dimensions is Qwen's headwise gate without a bias, weights shared.
#[test]
fn zero_gates_halve_the_output_and_a_full_sparse_gate_is_headwise() {
    let dev = common::device();
    let halved = logits(
        &with(build(&exp("", ""), &dev), "attn.wo", |_, x| {
            x.iter_mut().for_each(|v| *v *= 0.5)
        }),
        &dev,
    );
    for gate in [
        "{ kind = \"per_token\", init = 0.5 }",
        "{ kind = \"sparse\" }",
    ] {
        let g = build(&exp("", &format!("gate = {gate}")), &dev);
        let g = with(g, ".gate.", |_, x| x.fill(0.0));
        assert_same(&logits(&g, &dev), &halved, 1e-5, gate);
    }
    // per_token's bias starts at logit(init): σ(b) = 0.25
    let pt = build(&exp("", "gate = { kind = \"per_token\" }"), &dev);
    let b = &params(&pt)["blocks.0.attn.gate.bias"];
    assert!(
        b.data
            .iter()
            .all(|&x| (x as f64 - (1.0f64 / 3.0).ln()).abs() < 1e-6)
    );
    // the sparse gate starts at exactly 0 (gate 0.5), a weight of (dims, H)
    let sp = build(&exp("", "gate = { kind = \"sparse\", dims = 5 }"), &dev);
    let w = &params(&sp)["blocks.0.attn.gate.weight"];
    assert_eq!(w.shape, vec![5, 2]);
    assert!(w.data.iter().all(|&x| x == 0.0));
    // sparse with dims = d on the headwise gate's weights
    let hw = build(&exp("", "gate = { kind = \"headwise\" }"), &dev);
    let hw_w = params(&hw)["blocks.0.attn.gate.weight"].clone();
    let hw_w1 = params(&hw)["blocks.1.attn.gate.weight"].clone();
    let full = build(&exp("", "gate = { kind = \"sparse\", dims = 16 }"), &dev);
    let full = with(full, ".gate.", |k, x| {
        let src = if k.starts_with("blocks.0") {
            &hw_w
        } else {
            &hw_w1
        };
        x.copy_from_slice(&src.data)
    });
    assert_same(
        &logits(&full, &dev),
        &logits(&hw, &dev),
        1e-6,
        "sparse (d) vs headwise",
    );
}

/// Scalable-Softmax in the fused kernel (q scaled before it) equals the explicit path at a
/// length of several kernel blocks (150 queries, 64-row query blocks), with sink tokens, a key
/// slot and a sliding window: logits and every gradient, σ's included.
#[test]
fn scalable_softmax_in_the_fused_kernel_equals_the_explicit_path() {
    let dev = common::device().autodiff();
    let t = 150;
    let text = |kernel: &str| {
        format!(
            "[model]\nd_model = 16\nn_layers = 2\nn_heads = 2\nd_ff = 24\nctx = 150\n\
             sink_tokens = 1\n[model.attention]\nkernel = \"{kernel}\"\n\
             normaliser = {{ kind = \"scalable_softmax\", init = 0.6 }}\n\
             slot = {{ kind = \"kv_bias\" }}\nmask = {{ kind = \"sliding_window\", w = 90 }}\n\
             [train]\nbatch_tokens = 2400\nmicro_batch = 16\n"
        )
    };
    let parse = |kernel| sinklab::config::from_str("ssmax.toml", &text(kernel)).unwrap();
    let (manual, fused) = (parse("manual"), parse("fused"));
    assert!(sinklab::kernels::attention::covers(&fused.model).is_ok());
    let x: Vec<i64> = (0..2 * t as i64).map(|i| (i * 7 + i / 5) % 29).collect();
    let x = Tensor::<2, Int>::from_data(TensorData::new(x, [2, t]), &dev);
    let y = x.clone().slice([0..2, 1..t]);
    let run = |e| {
        let m = build(e, &dev);
        let logits = m.forward(x.clone()).slice([0..2, 0..t - 1]);
        let l = logits.clone().into_data().try_to_vec::<f32>().unwrap();
        let loss = masked_nll(logits, y.clone(), Tensor::ones([2, t - 1], &dev), 298.0);
        let mut acc = GradAccumulator::default();
        acc.add(&m, &loss.backward());
        (l, acc.grads)
    };
    let ((la, ga), (lb, gb)) = (run(&manual), run(&fused));
    assert_same(&la, &lb, 1e-4, "logits");
    assert!(ga.contains_key("blocks.1.attn.ssmax_scale"));
    assert_eq!(ga.keys().collect::<Vec<_>>(), gb.keys().collect::<Vec<_>>());
    for (k, g) in &ga {
        let g = g.to_data().try_to_vec::<f32>().unwrap();
        let h = gb[k].to_data().try_to_vec::<f32>().unwrap();
        let scale = g.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, b) in g.iter().zip(&h) {
            assert!((a - b).abs() <= 2e-4 * scale + 1e-7, "∂{k}: {a} vs {b}");
        }
    }
}

/// Queries and keys ×300 put softpick's logits in the hundreds: e^s would overflow f32, the
/// shifted form does not; weights and gradients stay finite.
#[test]
fn softpick_survives_huge_logits() {
    let dev = common::device().autodiff();
    let e = exp("", "normaliser = { kind = \"softpick\" }");
    let m = with(build(&e, &dev), "attn.w", |k, x| {
        if k.contains(".wq.") || k.contains(".wk.") {
            x.iter_mut().for_each(|v| *v *= 300.0)
        }
    });
    let loss = masked_nll(
        m.forward(tokens(&dev, 3)),
        tokens(&dev, 4),
        Tensor::ones([2, 7], &dev),
        14.0,
    );
    let l = loss.clone().into_scalar::<f32>();
    assert!(l.is_finite(), "loss {l}");
    let mut acc = GradAccumulator::default();
    acc.add(&m, &loss.backward());
    for (k, g) in &acc.grads {
        let g = g.to_data().try_to_vec::<f32>().unwrap();
        assert!(g.iter().all(|x| x.is_finite()), "{k}");
    }
}

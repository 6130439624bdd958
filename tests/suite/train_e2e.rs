//! End-to-end: a tiny real training run on the embedded corpus, resume equality, non-finite
//! loss handling, and the files a run writes, read back by the real tools (Python's
//! `tensorboard`, `tokenizers` and `safetensors`).

use crate::common;

use common::*;
use sha2::Digest;
use sinklab::config::Precision::F32;
use sinklab::tokenizer::BYTE_VOCAB;
use sinklab::train;

#[test]
fn smoke_run_learns_and_writes_metrics_tensorboard_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(
        dir.path(),
        "smoke",
        &[
            "train.steps=40",
            "train.eval_every=20",
            "train.checkpoint_every=20",
            "metrics.every=20",
        ],
    );
    let s = train::train(&exp, &quiet(), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    assert_eq!(s.steps_done, 40);

    // The loss fell: byte-level text starts at ln(BYTE_VOCAB) = ln 258 ≈ 5.55 and a few dozen
    // steps of AdamW reach well under 4.
    let losses = series(&run, "train/loss");
    assert_eq!(losses.len(), 40);
    let first = losses[0].1;
    let last = losses[39].1;
    assert!((5.0..6.0).contains(&first), "initial loss {first}");
    assert!(last < first - 1.0 && last > 1.0, "loss {first} -> {last}");
    let val = series(&run, "val/loss");
    assert_eq!(val.iter().map(|v| v.0).collect::<Vec<_>>(), vec![0, 20, 40]);
    assert!(val[2].1 < val[0].1 - 1.0, "val loss {val:?}");

    // Sink metrics at every probe step, within their ranges.
    for tag in [
        "sink/rate_eps0.3/pos01",
        "sink/rate_eps0.8/pos10",
        "sink/importance_first/layer01_head03",
        "act/norm_ratio/layer00",
        "act/massive_count/layer01",
        "attn/entropy/layer01",
        "kv/key_norm_first/layer00",
    ] {
        let v = series(&run, tag);
        assert_eq!(
            v.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![0, 20, 40],
            "{tag}"
        );
        assert!(
            v.iter().all(|x| x.1.is_finite() && x.1 >= 0.0),
            "{tag}: {v:?}"
        );
    }
    for (_, r) in series(&run, "sink/rate_eps0.3/pos01") {
        assert!((0.0..=100.0).contains(&r));
    }
    // At init every row is near-uniform over visible keys: the mean row entropy of the probe
    // is just below its maximum, the mean of ln(t) over t = 1..16 (≈ 1.92 nats), and never above.
    let e0 = series(&run, "attn/entropy/layer00")[0].1;
    let uniform: f64 = (1..=16).map(|t| (t as f64).ln()).sum::<f64>() / 16.0;
    assert!(
        e0 <= uniform + 1e-9 && e0 > uniform - 0.15,
        "entropy at init {e0} vs uniform {uniform}"
    );

    // Run files.
    for f in [
        "resolved.toml",
        "provenance.json",
        "tokenizer.json",
        "summary.json",
    ] {
        assert!(run.join(f).exists(), "{f}");
    }
    let prov: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("provenance.json")).unwrap())
            .unwrap();
    assert_eq!(prov["seed"], 1);
    assert_eq!(prov["device"], "flex");
    assert_eq!(prov["burn_version"], "0.22.1");
    let ckpts = sinklab::checkpoint::list_checkpoints(&run);
    assert_eq!(ckpts.iter().map(|c| c.0).collect::<Vec<_>>(), vec![20, 40]);

    // TensorBoard: the real reader sees exactly what metrics.jsonl recorded.
    let mut scalars = serde_json::Map::new();
    for tag in [
        "train/loss",
        "val/loss",
        "sink/rate_eps0.3/pos01",
        "act/norm_ratio/layer01",
    ] {
        let pts: Vec<serde_json::Value> = series(&run, tag)
            .into_iter()
            .map(|(s, v)| serde_json::json!([s, v]))
            .collect();
        scalars.insert(tag.into(), pts.into());
    }
    // One probe step's (layer × head) values of a per-head metric, from metrics.jsonl, and an
    // image's expected entry.
    let rows_at = |step: u64, tag: &dyn Fn(usize, usize) -> String| -> Vec<Vec<f64>> {
        (0..2)
            .map(|l| {
                (0..4)
                    .map(|h| {
                        let v = series(&run, &tag(l, h));
                        v.iter().find(|p| p.0 == step).unwrap().1
                    })
                    .collect()
            })
            .collect()
    };
    let entry = |step: u64, png: &[u8]| {
        let (w, h) = sinklab::plot::png_size(png).unwrap();
        let sha = sinklab::checkpoint::hex(&sha2::Sha256::digest(png));
        (w, h, serde_json::json!([step, w, h, sha]))
    };
    let steps = [0u64, 20, 40];
    // The sink map of each probe step: the labelled heat map of that step's α₁ (2 layers × 4
    // heads), byte for byte as the recorder renders it from the values metrics.jsonl holds.
    let maps: Vec<serde_json::Value> = steps
        .iter()
        .map(|&step| {
            let rows = rows_at(step, &|l, h| {
                format!("sink/importance_first/layer{l:02}_head{h:02}")
            });
            let png =
                sinklab::recorder::sink_map_png(&rows, sinklab::metrics::Proxy::Weights).unwrap();
            let (w, h, e) = entry(step, &png);
            // a chart with title, ticks, values and colour bar, not a 64 × 32 block image
            assert!(w >= 300 && h >= 150, "sink map {w} x {h}");
            e
        })
        .collect();
    // The live head scores (metrics.heads, on by default): every score of every head at every
    // probe step, and each score's map rendered from those values, byte for byte.
    let mut images = serde_json::Map::new();
    images.insert("sink/importance_first_map".into(), maps.into());
    for s in sinklab::heads::Score::LIVE {
        for (l, h) in (0..2).flat_map(|l| (0..4).map(move |h| (l, h))) {
            let n = series(&run, &s.tag(l, h).to_string()).len();
            assert_eq!(n, 3, "{} at every probe step", s.tag(l, h));
        }
        let maps: Vec<serde_json::Value> = steps
            .iter()
            .map(|&step| {
                let rows = rows_at(step, &|l, h| s.tag(l, h).to_string());
                let png = sinklab::recorder::score_map(&rows, s, "repeat probe").unwrap();
                entry(step, &png).2
            })
            .collect();
        images.insert(format!("heads/{}_map", s.name()), maps.into());
        let tag = s.tag(1, 2).to_string();
        let pts: Vec<serde_json::Value> = series(&run, &tag)
            .into_iter()
            .map(|(s, v)| serde_json::json!([s, v]))
            .collect();
        scalars.insert(tag, pts.into());
    }
    let expected = serde_json::json!({
        "scalars": scalars,
        "images": images,
        "rel_tol": 1e-6,
    });
    let exp_path = dir.path().join("expected.json");
    std::fs::write(&exp_path, expected.to_string()).unwrap();
    let (ok, out) = run_python(
        "check_tensorboard.py",
        &[run.to_str().unwrap(), exp_path.to_str().unwrap()],
    );
    assert!(ok, "TensorBoard check failed:\n{out}");

    // The checkpoint loads in Python's safetensors with the same values, and the tokenizer
    // gives the same ids in Python's tokenizers.
    let ck = &ckpts[1].1;
    let sample = "Shall I compare thee to a summer's day?\nThou art more lovely <|endoftext|>";
    let (ok, out) = run_python(
        "check_run_files.py",
        &[
            ck.join("model.safetensors").to_str().unwrap(),
            run.join("tokenizer.json").to_str().unwrap(),
            sample,
        ],
    );
    assert!(ok, "run-file check failed:\n{out}");
    let py: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let weights = sinklab::checkpoint::load_safetensors(&ck.join("model.safetensors")).unwrap();
    assert_eq!(py["tensors"].as_object().unwrap().len(), weights.len());
    for (name, t) in &weights {
        let p = &py["tensors"][name];
        let shape: Vec<usize> = p["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(shape, t.shape, "{name}");
        let sum: f64 = t.data.iter().map(|&x| x as f64).sum();
        assert!(
            (p["sum"].as_f64().unwrap() - sum).abs() <= 1e-9 * (1.0 + sum.abs()),
            "{name}"
        );
    }
    let tok = sinklab::tokenizer::Tokenizer::load(&run.join("tokenizer.json")).unwrap();
    let ids: Vec<u64> = py["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let rust_ids: Vec<u64> = tok
        .encode(sample)
        .unwrap()
        .into_iter()
        .map(u64::from)
        .collect();
    assert_eq!(ids, rust_ids);

    // `eval` reproduces the final validation loss from the checkpoint.
    let device = sinklab::backend::device(exp.run.device).unwrap();
    let (exp2, model, _, state) = sinklab::run::load_checkpoint(&run, &device).unwrap();
    assert_eq!(state.step, 40);
    let data = sinklab::data::Dataset::prepare(&exp2.data, &mut |_| {}).unwrap();
    let vb =
        sinklab::data::validation_batch(&data, exp2.train.eval_sequences, exp2.model.ctx, true)
            .unwrap();
    let v = sinklab::eval::eval_loss(&model, &vb, 4, &device);
    assert!(
        (v - val[2].1).abs() < 1e-5,
        "eval {v} vs logged {}",
        val[2].1
    );

    // ... and so does the `sinklab eval` command, with the same sink metrics as the last probe.
    let (code, out, err) = sinklab_in(None, &["eval", run.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["step"], 40);
    assert!((j["val_loss"].as_f64().unwrap() - val[2].1).abs() < 1e-5);
    let s1 = series(&run, "sink/rate_eps0.3/pos01")[2].1;
    assert_eq!(j["scalars"]["sink/rate_eps0.3/pos01"].as_f64().unwrap(), s1);
    let nr = series(&run, "act/norm_ratio/layer01")[2].1;
    let got = j["scalars"]["act/norm_ratio/layer01"].as_f64().unwrap();
    assert!((got - nr).abs() < 1e-6 * nr.abs().max(1.0), "{got} vs {nr}");
}

#[test]
fn resume_reproduces_every_later_loss() {
    let dir = tempfile::tempdir().unwrap();
    let full = tiny_experiment(dir.path(), "full", &[]);
    let whole = train::train(&full, &quiet(), &mut |_| {}).unwrap();

    let cut = tiny_experiment(dir.path(), "cut", &[]);
    let mut opts = quiet();
    opts.stop_after = Some(3);
    let s = train::train(&cut, &opts, &mut |_| {}).unwrap();
    assert_eq!(s.steps_done, 3);
    assert_eq!(series(&cut.run_dir(), "train/loss").len(), 3);
    // Without --resume an existing run directory is refused.
    let err = train::train(&cut, &quiet(), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("--resume"), "{err}");
    opts.stop_after = None;
    opts.resume = true;
    let resumed = train::train(&cut, &opts, &mut |_| {}).unwrap();
    // the summary's first loss is step 1's, carried in the checkpoint across the resume
    assert!(whole.first_loss.is_some());
    assert_eq!(resumed.first_loss, whole.first_loss);

    let a = series(&full.run_dir(), "train/loss");
    let b = series(&cut.run_dir(), "train/loss");
    assert_eq!(a.len(), 8);
    assert_eq!(
        a, b,
        "losses after resume must equal the uninterrupted run's"
    );
    let va = series(&full.run_dir(), "val/loss");
    let vb = series(&cut.run_dir(), "val/loss");
    assert_eq!(va, vb);
    let sa = series(&full.run_dir(), "sink/rate_eps0.2/pos01");
    assert_eq!(sa, series(&cut.run_dir(), "sink/rate_eps0.2/pos01"));

    // Resuming with a different configuration is refused.
    let other = tiny_experiment(dir.path(), "cut", &["optim.weight_decay=0.5"]);
    let err = train::train(&other, &opts, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("differs"), "{err}");
    assert!(err.contains("optim.weight_decay: 0.1 → 0.5"), "{err}");

    // A resolved.toml written before a setting existed (here run.devices, absent = default)
    // still resumes.
    let rp = cut.run_dir().join("resolved.toml");
    let text = std::fs::read_to_string(&rp).unwrap();
    let older = text.replace("devices = 1\n", "");
    assert_ne!(older, text);
    std::fs::write(&rp, older).unwrap();
    train::train(&cut, &opts, &mut |_| {}).unwrap();
    assert_eq!(series(&cut.run_dir(), "train/loss"), a);

    // …and so do its checkpoints, which carry the digest of that older text: a run stopped at
    // step 3 by an earlier sinklab (simulated: resolved.toml without `devices`, the state's
    // digest that text's, no SHA256SUMS) resumes and ends exactly as the uninterrupted run.
    let old = tiny_experiment(dir.path(), "old", &[]);
    let mut stop = quiet();
    stop.stop_after = Some(3);
    train::train(&old, &stop, &mut |_| {}).unwrap();
    let rp = old.run_dir().join("resolved.toml");
    let older = std::fs::read_to_string(&rp)
        .unwrap()
        .replace("devices = 1\n", "");
    std::fs::write(&rp, &older).unwrap();
    let digest = {
        use sha2::{Digest, Sha256};
        sinklab::data::hex(&Sha256::digest(older.as_bytes()))
    };
    for (_, ckpt) in sinklab::checkpoint::list_checkpoints(&old.run_dir()) {
        let p = ckpt.join("state.json");
        let mut state: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        state["config_digest"] = digest.clone().into();
        std::fs::write(&p, serde_json::to_string(&state).unwrap()).unwrap();
        // that sinklab wrote no checksums
        std::fs::remove_file(ckpt.join("SHA256SUMS")).unwrap();
    }
    train::train(&old, &opts, &mut |_| {}).unwrap();
    assert_eq!(series(&old.run_dir(), "train/loss"), a);
}

#[test]
fn non_finite_loss_stops_and_keeps_the_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // A huge learning rate blows the weights up within a few steps after warmup.
    let exp = tiny_experiment(
        dir.path(),
        "diverge",
        &["train.steps=50", "train.checkpoint_every=1"],
    );
    let mut exp = exp;
    exp.optim.lr = 1e30;
    exp.optim.grad_clip = None;
    let err = train::train(&exp, &quiet(), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("non-finite"), "{err}");
    let ckpts = sinklab::checkpoint::list_checkpoints(&exp.run_dir());
    assert!(!ckpts.is_empty(), "checkpoints before the failure survive");
    let losses = series(&exp.run_dir(), "train/loss");
    assert!(losses.iter().all(|(_, l)| l.is_finite()), "{losses:?}");
    let last_ckpt = ckpts.last().unwrap().0;
    assert_eq!(
        last_ckpt,
        losses.last().unwrap().0,
        "the last logged finite step was checkpointed"
    );
}

/// Micro-batches run concurrently on CPU workers; the summed gradients and the loss must be
/// bit-identical whatever the number of workers, and equal (to rounding) one pass over the
/// whole batch.
#[test]
fn data_parallel_gradients_do_not_depend_on_the_worker_count() {
    use rand::{Rng, SeedableRng};
    use sinklab::data::Batch;
    use sinklab::model::Lm;
    use sinklab::parallel::Workers;

    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(dir.path(), "dp", &[]);
    let device = common::device().autodiff();
    let model = Lm::new(&exp.model, BYTE_VOCAB, 3, &device);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let (b, t) = (3, exp.model.ctx);
    let micro: Vec<Batch> = (0..4)
        .map(|_| Batch {
            batch: b,
            len: t,
            inputs: (0..b * t)
                .map(|_| rng.gen_range(2..BYTE_VOCAB as u32))
                .collect(),
            targets: (0..b * t)
                .map(|_| rng.gen_range(2..BYTE_VOCAB as u32))
                .collect(),
            loss_mask: (0..b * t).map(|i| (i % 5 != 0) as u8 as f32).collect(),
            domains: vec![0; b],
        })
        .collect();
    let host = |g: &sinklab::optim::GradAccumulator| -> Vec<(String, Vec<f32>)> {
        g.grads
            .iter()
            .map(|(k, v)| (k.clone(), v.to_data().try_to_vec::<f32>().unwrap()))
            .collect()
    };
    let (g1, l1) = train::gradients(&model, &micro, &device, &Workers::new(4, 1), F32, 1.0);
    let l1 = l1.read();
    assert_eq!(host(&g1).len(), 2 * 9 + 3, "every parameter has a gradient");
    for threads in [2, 3, 4] {
        let (g, l) = train::gradients(&model, &micro, &device, &Workers::new(4, threads), F32, 1.0);
        assert_eq!(
            l.read().to_bits(),
            l1.to_bits(),
            "loss with {threads} threads"
        );
        assert_eq!(host(&g), host(&g1), "gradients with {threads} threads");
    }
    // One pass over the 12 sequences gives the same mean loss and gradients to rounding.
    let whole = Batch {
        batch: 4 * b,
        len: t,
        inputs: micro.iter().flat_map(|m| m.inputs.clone()).collect(),
        targets: micro.iter().flat_map(|m| m.targets.clone()).collect(),
        loss_mask: micro.iter().flat_map(|m| m.loss_mask.clone()).collect(),
        domains: vec![0; 4 * b],
    };
    let (gw, lw) = train::gradients(&model, &[whole], &device, &Workers::new(1, 1), F32, 1.0);
    let lw = lw.read();
    assert!((lw - l1).abs() < 1e-5 * lw, "loss {lw} vs {l1}");
    assert!(
        (5.0..6.0).contains(&lw),
        "initial loss near ln {BYTE_VOCAB}: {lw}"
    );
    for ((k, a), (_, c)) in host(&gw).iter().zip(host(&g1).iter()) {
        let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
        for (x, y) in a.iter().zip(c) {
            assert!((x - y).abs() <= 1e-4 * scale, "{k}: {x} vs {y}");
        }
    }
}

/// Data parallelism over MPI ranks (`crate::dist`): each rank computes the gradients of its
/// block of micro-batches (`train::gradients_of` over `dist::share`), the blocks' sums are
/// added. Two blocks of one micro-batch each give the one-process gradients bit for bit (one
/// addition, commutative); two blocks of two agree to f32 rounding (the additions regroup).
/// `run.devices > 1` is refused, naming mpirun.
#[test]
fn gradients_of_rank_blocks_add_up_to_the_step() {
    use sinklab::dist::share;
    use sinklab::parallel::Workers;
    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(dir.path(), "ddp", &[]);
    let dev = common::device().autodiff();
    let data = sinklab::data::Dataset::prepare(&exp.data, &mut |_| {}).unwrap();
    let model = sinklab::model::Lm::new(&exp.model, data.vocab_size(), 3, &dev);
    let batches: Vec<_> = (0..4)
        .map(|i| sinklab::data::validation_batch(&data, 2 + i, 16, true).unwrap())
        .collect();
    let one = Workers::new(1, 1);
    let host = |g: &sinklab::optim::GradAccumulator| -> Vec<(String, Vec<f32>)> {
        g.grads
            .iter()
            .map(|(k, v)| (k.clone(), v.to_data().try_to_vec::<f32>().unwrap()))
            .collect()
    };
    for accum in [2, 4] {
        let step = &batches[..accum];
        let (whole, lw) = train::gradients(&model, step, &dev, &one, F32, 1.0);
        let lw = lw.read();
        assert_eq!(
            (share(accum, 0, 2), share(accum, 1, 2)),
            (0..accum / 2, accum / 2..accum)
        );
        let parts: Vec<_> = (0..2)
            .map(|r| train::gradients_of(&model, step, share(accum, r, 2), &dev, &one, F32, 1.0))
            .collect();
        let mut sum = sinklab::optim::GradAccumulator::default();
        let mut loss = 0.0;
        for (g, l) in parts {
            sum.merge(g);
            loss += l.read();
        }
        assert!(
            (loss - lw).abs() <= 1e-12 * lw.abs(),
            "{accum}: {loss} vs {lw}"
        );
        for ((k, a), (_, b)) in host(&whole).iter().zip(host(&sum).iter()) {
            if accum == 2 {
                assert_eq!(a, b, "{k}: one micro-batch per rank gives the same bits");
            }
            let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-6 * scale, "{accum} {k}: {x} vs {y}");
            }
        }
    }
    let err = sinklab::config::load(&dir.path().join("ddp.toml"), &["run.devices=2".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("run.devices")
            && err.contains("found 2, expected 1")
            && err.contains("mpirun -np N"),
        "{err}"
    );
}

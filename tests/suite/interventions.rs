//! Interventions on the one forward (`src/intervene/`, docs/reference.md §11): the ablation
//! edits against the independent NumPy reference on every model-zoo variant
//! (`scripts/reference_interventions.py` → tests/fixtures/interventions_golden.json) and on
//! SmolLM2-135M (`scripts/fetch_smollm2.sh`, as the import tests), and the invariants: zero-ablating z_h is zeroing
//! W_O's rows of head h, move-to-first on a head that already sits on the first token changes
//! nothing, clean→clean patching gives 1 and corrupt→corrupt 0, patching a key/value group
//! changes only its own query heads; the logit-difference ablation scan against the NumPy
//! reference, and ablating a head whose layer cannot reach the logits changes nothing.

use burn::tensor::{Int, Tensor, TensorData};
use serde_json::Value;
use sinklab::data::Batch;
use sinklab::intervene::ablate::{Ablation, hooks_for};
use sinklab::intervene::patch::{PatchSpec, normalise, patch_each, patch_hooks};
use sinklab::intervene::{AblationKind, Metric, Positions, Prepared, Scoring, Unit};
use sinklab::model::{HeadSite, Lm, Site, StreamSite};

use crate::common;
use common::fixture::{assert_close, floats, int_rows};

fn batch_of(tokens: &[i64], shape: [usize; 2]) -> Batch {
    let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    let mut targets: Vec<u32> = ids[1..].to_vec();
    targets.push(0);
    Batch {
        batch: shape[0],
        len: shape[1],
        inputs: ids,
        targets,
        loss_mask: vec![1.0; shape[0] * shape[1]],
        domains: vec![0; shape[0]],
    }
}

fn loss_scoring(b: &Batch) -> Scoring {
    Scoring {
        metric: Metric::Loss,
        weights: Positions::All.weights(b),
        answers: None,
    }
}

const SITES: [Site; 3] = [
    Site::Head(HeadSite::Z),
    Site::Head(HeadSite::K),
    Site::Head(HeadSite::V),
];

/// The logits (copies·B, T, V) of `p`'s batch with each set of units ablated.
fn ablated_logits(p: &Prepared, kind: AblationKind, sets: &[Vec<Unit>]) -> Vec<f32> {
    let ab = Ablation::new(kind, p.batch.batch, 0, None);
    let (start, mut hooks) = hooks_for(p, &ab, sets).unwrap().unwrap();
    let end = p.walk_copies(start, sets.len(), &mut hooks);
    let n = p.model.cfg.sink_tokens;
    let s = end.dims()[1];
    common::tensor_values(p.model.unembed(end.narrow(1, n, s - n)))
}

#[test]
fn ablations_match_the_numpy_reference_on_every_variant() {
    let zoo = common::golden("zoo_golden.json");
    let want = common::golden("interventions_golden.json");
    let dev = common::device();
    let cases = want["cases"].as_array().unwrap();
    assert_eq!(cases.len(), zoo["cases"].as_array().unwrap().len());
    for (case, w) in zoo["cases"].as_array().unwrap().iter().zip(cases) {
        let name = case["name"].as_str().unwrap();
        assert_eq!(w["name"], case["name"]);
        let (m, _) = common::zoo::model(case, &dev);
        let (tok, shape) = int_rows(&case["tokens"]);
        let b = batch_of(&tok, shape);
        let p = Prepared::new(&m, &b, &SITES, loss_scoring(&b), &dev).unwrap();
        let (layer, head) = (1, w["head"].as_u64().unwrap() as usize);
        let runs = [
            ("z_zero", AblationKind::Zero, Unit::Head { layer, head }),
            ("z_mean", AblationKind::Mean, Unit::Head { layer, head }),
            (
                "z_resample",
                AblationKind::Resample,
                Unit::Head { layer, head },
            ),
            (
                "pattern_move-to-first",
                AblationKind::MoveToFirst,
                Unit::Head { layer, head },
            ),
            (
                "kv_zero",
                AblationKind::Zero,
                Unit::KvGroup { layer, group: 0 },
            ),
            (
                "kv_mean",
                AblationKind::Mean,
                Unit::KvGroup { layer, group: 0 },
            ),
            (
                "kv_resample",
                AblationKind::Resample,
                Unit::KvGroup { layer, group: 0 },
            ),
        ];
        for (key, kind, unit) in runs {
            let got = ablated_logits(&p, kind, &[vec![unit]]);
            let expect = floats(&w[key]);
            let scale = expect.iter().fold(0f64, |a, x| a.max(x.abs()));
            assert_close(&got, &expect, 1e-4, 1e-5 * scale, &format!("{name}: {key}"));
        }
        // Several sets in one walk (copies of the batch) give each set's own logits.
        let both = ablated_logits(
            &p,
            AblationKind::Zero,
            &[
                vec![Unit::Head { layer, head }],
                vec![Unit::KvGroup { layer, group: 0 }],
            ],
        );
        let half = both.len() / 2;
        assert_close(&both[..half], &floats(&w["z_zero"]), 1e-4, 1e-4, name);
        assert_close(&both[half..], &floats(&w["kv_zero"]), 1e-4, 1e-4, name);
    }
}

#[test]
fn zero_ablating_z_is_zeroing_the_heads_rows_of_w_o() {
    let zoo = common::golden("zoo_golden.json");
    let dev = common::device();
    let mut checked = 0;
    for case in zoo["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut weights = common::zoo::weights(case);
        let key = "blocks.1.attn.wo.weight";
        if !weights.contains_key(key) || weights.contains_key("blocks.1.attn.wo.w_init") {
            continue; // no W_O, or a reparameterised one
        }
        let (m, exp) = common::zoo::model(case, &dev);
        let (d, dh) = (exp.model.d_model, exp.model.d_head());
        let head = 1;
        let (tok, shape) = int_rows(&case["tokens"]);
        let b = batch_of(&tok, shape);
        let p = Prepared::new(&m, &b, &[], loss_scoring(&b), &dev).unwrap();
        let ablated = ablated_logits(
            &p,
            AblationKind::Zero,
            &[vec![Unit::Head { layer: 1, head }]],
        );
        let wo = weights.get_mut(key).unwrap();
        for r in head * dh..(head + 1) * dh {
            wo.data[r * d..(r + 1) * d].fill(0.0);
        }
        let (m2, _) = common::zoo::model_with(case, &weights, &dev);
        let x = Tensor::<2, Int>::from_data(TensorData::new(tok.clone(), shape), &dev);
        let zeroed = common::tensor_values(m2.forward(x.clone()));
        let plain = common::tensor_values(m.forward(x));
        let diff =
            |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            diff(&ablated, &zeroed) <= 1e-6,
            "{name}: {}",
            diff(&ablated, &zeroed)
        );
        assert!(
            diff(&ablated, &plain) > 1e-4,
            "{name}: the ablation changed nothing"
        );
        checked += 1;
    }
    assert!(checked >= 50, "{checked} variants with a dense W_O");
}

/// `sinklab ablate --metric logit-diff` at the library level, on every zoo variant: the clean
/// logit difference and the zero-ablation scan of every head against the NumPy reference
/// (`logit_diff` in interventions_golden.json), each Δ = ablated − baseline against the
/// reference's, an empty set giving the baseline exactly, and, with W_O of layer 0 zeroed (so
/// nothing its heads write reaches the last position's logits), layer 0's row of the scan 0.
#[test]
fn logit_diff_ablation_scan_matches_the_numpy_reference_and_a_cut_off_layer_moves_nothing() {
    use sinklab::intervene::ablate::{ablate_sets, scan};
    let zoo = common::golden("zoo_golden.json");
    let want = common::golden("interventions_golden.json");
    let dev = common::device();
    let mut cut = 0;
    for (case, w) in zoo["cases"]
        .as_array()
        .unwrap()
        .iter()
        .zip(want["cases"].as_array().unwrap())
    {
        let name = case["name"].as_str().unwrap();
        let ld = &w["logit_diff"];
        let answers: Vec<(u32, u32)> = ld["answers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_u64().unwrap() as u32))
            .collect();
        let (tok, shape) = int_rows(&case["tokens"]);
        let b = batch_of(&tok, shape);
        let scoring = Scoring {
            metric: Metric::LogitDiff,
            weights: Positions::Last.weights(&b),
            answers: Some(answers),
        };
        // f32 logits: an absolute floor scaled by the logits' size, 1e-4 relative beyond it
        let scale = floats(&w["baseline"])
            .iter()
            .fold(0f64, |a, x| a.max(x.abs()));
        let (atol, rtol) = (1e-5 * scale, 1e-4);
        let close = |got: f64, want: f64, what: &str| {
            assert!(
                (got - want).abs() <= atol + rtol * want.abs(),
                "{name}: {what}: got {got}, want {want}"
            );
        };
        let (m, exp) = common::zoo::model(case, &dev);
        let p = Prepared::new(&m, &b, &[], scoring.clone(), &dev).unwrap();
        let base = p.metric();
        let want_base = ld["baseline"].as_f64().unwrap();
        close(base, want_base, "clean logit difference");
        let ab = Ablation::new(AblationKind::Zero, b.batch, 0, None);
        let got = scan(&p, &ab, false, &mut |_| {}).unwrap();
        let want_scan = ld["zero_scan"].as_array().unwrap();
        assert_eq!(got.len(), want_scan.len(), "{name}: layers");
        for (l, row) in got.iter().enumerate() {
            for (h, &v) in row.iter().enumerate() {
                let wv = want_scan[l][h].as_f64().unwrap();
                close(v, wv, &format!("ablated {l}.{h}"));
                close(v - base, wv - want_base, &format!("Δ {l}.{h}"));
            }
        }
        assert!(
            got.iter().flatten().any(|v| (v - base).abs() > 1e-4),
            "{name}: no ablation moved the logit difference"
        );
        let none = ablate_sets(&p, &ab, &[vec![]], &mut |_| {}).unwrap();
        assert_eq!(none, vec![base], "{name}: ablating nothing");

        // Layer 0's W_O zeroed: its heads cannot reach the logits, so ablating any moves nothing.
        let mut weights = common::zoo::weights(case);
        let key = "blocks.0.attn.wo.weight";
        if !weights.contains_key(key) || weights.contains_key("blocks.0.attn.wo.w_init") {
            continue; // no W_O, or a reparameterised one
        }
        weights.get_mut(key).unwrap().data.fill(0.0);
        let (m2, _) = common::zoo::model_with(case, &weights, &dev);
        let p2 = Prepared::new(&m2, &b, &[], scoring, &dev).unwrap();
        let base2 = p2.metric();
        let got2 = scan(&p2, &ab, false, &mut |_| {}).unwrap();
        for (h, &v) in got2[0].iter().enumerate() {
            assert!(
                (v - base2).abs() <= 1e-6 * (1.0 + base2.abs()),
                "{name}: head 0.{h} of the cut-off layer moved the logit difference {base2} to {v}"
            );
        }
        assert!(
            got2[1..].iter().flatten().any(|v| (v - base2).abs() > 1e-4),
            "{name}: later layers still matter"
        );
        assert_eq!(exp.model.n_layers, got2.len());
        cut += 1;
    }
    assert!(cut >= 50, "{cut} variants with a dense W_O");
}

/// A one-layer model whose head 0 puts all of every row on token 0 (α₁ = 1 exactly): its
/// first token's key is huge along the direction every query points to.
#[test]
fn move_to_first_on_a_head_already_on_the_first_token_changes_nothing() {
    let dev = common::device();
    let toml = "[model]\nd_model = 8\nn_layers = 1\nn_heads = 2\nd_ff = 8\nctx = 6\n\
                norm = { kind = \"none\" }\npositions = { kind = \"nope\" }\n\
                [train]\nbatch_tokens = 6\nmicro_batch = 1\n[metrics]\nprobe_len = 6\nk_max = 2\n";
    let exp = sinklab::config::from_str("first", toml).unwrap();
    let m = Lm::new(&exp.model, 6, 0, &dev);
    let mut w = sinklab::optim::export_params(&m);
    // embeddings: token 0 has 100 in dim 0; every token has 1 in dim 1; dims 2.. random-ish
    let e = w.get_mut("embed").unwrap();
    for t in 0..6 {
        e.data[t * 8] = if t == 0 { 100.0 } else { 0.0 };
        e.data[t * 8 + 1] = 1.0;
    }
    // head 0 (dims 0..4): q_0 = 10 · x_1, k_0 = x_0; nothing else
    for name in ["blocks.0.attn.wq.weight", "blocks.0.attn.wk.weight"] {
        let wt = w.get_mut(name).unwrap();
        for r in 0..8 {
            wt.data[r * 8..r * 8 + 4].fill(0.0);
        }
        if name.contains("wq") {
            wt.data[8] = 10.0; // row 1 (x_1) → column 0 (q dim 0)
        } else {
            wt.data[0] = 1.0; // row 0 (x_0) → column 0 (k dim 0)
        }
    }
    let m = sinklab::optim::import_params(m, &w).unwrap();
    let tok: Vec<i64> = vec![0, 3, 1, 4, 1, 5, 0, 2, 2, 5, 3, 1];
    let b = batch_of(&tok, [2, 6]);
    let p = Prepared::new(
        &m,
        &b,
        &[Site::Head(HeadSite::Pattern)],
        loss_scoring(&b),
        &dev,
    )
    .unwrap();
    let pattern = common::tensor_values(p.heads(0, HeadSite::Pattern).unwrap());
    for bh in [0, 2] {
        // batch 0 and 1, head 0: every row is exactly (1, 0, …)
        for q in 0..6 {
            let row = &pattern[(bh * 6 + q) * 6..][..6];
            assert_eq!(row[0], 1.0, "row {q}: {row:?}");
            assert!(row[1..].iter().all(|&x| x == 0.0));
        }
    }
    let moved = ablated_logits(
        &p,
        AblationKind::MoveToFirst,
        &[vec![Unit::Head { layer: 0, head: 0 }]],
    );
    let x = Tensor::<2, Int>::from_data(TensorData::new(tok, [2, 6]), &dev);
    let plain = common::tensor_values(m.forward(x));
    // equal up to rounding: the edited pattern takes the explicit attention path, the plain
    // forward the fused kernel
    assert_eq!(moved.len(), plain.len());
    for (a, b) in moved.iter().zip(&plain) {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "move-to-first on a head with α₁ = 1: {a} vs {b}"
        );
    }
    let other = ablated_logits(
        &p,
        AblationKind::MoveToFirst,
        &[vec![Unit::Head { layer: 0, head: 1 }]],
    );
    assert_ne!(
        other, plain,
        "move-to-first on the other head does change the logits"
    );
}

/// The repeat task's clean and corrupted prompts on a zoo model: clean [0, A, A[..n−1]]
/// (answer A[n−1]); corrupted with A[n−1] in the first copy replaced by W (answer W).
fn patch_prompts(vocab: u32, t: usize) -> (Batch, Batch, Vec<(u32, u32)>) {
    let n = (t - 1) / 2 + 1;
    let mut clean = Vec::new();
    let mut corrupt = Vec::new();
    let mut answers = Vec::new();
    for s in 0..2u32 {
        let a: Vec<u32> = (0..n as u32)
            .map(|i| 1 + (i * 3 + s * 5) % (vocab - 2))
            .collect();
        let wrong = 1 + (a[n - 1] + 1) % (vocab - 1);
        let mut c = vec![0];
        c.extend(&a);
        c.extend(&a[..n - 1]);
        c.truncate(t);
        let mut k = c.clone();
        k[n] = wrong;
        answers.push((a[n - 1], wrong));
        clean.extend(c);
        corrupt.extend(k);
    }
    let mk = |ids: Vec<u32>| batch_of(&ids.iter().map(|&x| x as i64).collect::<Vec<_>>(), [2, t]);
    (mk(clean), mk(corrupt), answers)
}

#[test]
fn clean_patches_give_one_corrupt_patches_zero_and_kv_patches_stay_in_their_group() {
    let zoo = common::golden("zoo_golden.json");
    let dev = common::device();
    let all_sites: Vec<Site> = Site::ALL
        .into_iter()
        .filter(|s| *s != Site::Head(HeadSite::Gate))
        .collect();
    for case in zoo["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        if ![
            "baseline",
            "gqa_kv1",
            "gqa_kv2_qkv_bias",
            "slot_kv_bias",
            "sink_tokens_2_rope",
            "block_parallel",
        ]
        .contains(&name)
        {
            continue;
        }
        let (m, exp) = common::zoo::model(case, &dev);
        let vocab = case["vocab"].as_u64().unwrap() as u32;
        let (clean, corrupt, answers) = patch_prompts(vocab, exp.model.ctx);
        let scoring = |b: &Batch| Scoring {
            metric: Metric::LogitDiff,
            weights: Positions::Last.weights(b),
            answers: Some(answers.clone()),
        };
        let sites: Vec<Site> = all_sites
            .iter()
            .copied()
            .filter(|s| *s != Site::Stream(StreamSite::ResidMid) || !name.contains("parallel"))
            .collect();
        let c = Prepared::new(&m, &clean, &sites, scoring(&clean), &dev).unwrap();
        let k = Prepared::new(&m, &corrupt, &sites, scoring(&corrupt), &dev).unwrap();
        let (ld_clean, ld_corr) = (c.metric(), k.metric());
        assert!(
            (ld_clean - ld_corr).abs() > 1e-4,
            "{name}: the prompts do not differ"
        );
        let mut patches = Vec::new();
        for layer in 0..exp.model.n_layers {
            for &site in &sites {
                let heads = match site {
                    Site::Head(HeadSite::K | HeadSite::V) => exp.model.kv_heads(),
                    Site::Head(_) => exp.model.n_heads,
                    Site::Stream(_) => 0,
                };
                let idx: Vec<Option<usize>> = if heads == 0 {
                    vec![None]
                } else {
                    (0..heads).map(Some).collect()
                };
                for index in idx {
                    for position in [None, Some(exp.model.ctx - 1), Some(2)] {
                        patches.push(PatchSpec {
                            layer,
                            site,
                            index,
                            position,
                        });
                    }
                }
            }
        }
        // clean into clean: every patch leaves the clean logit difference (normalised 1), up to
        // f32 rounding: the patched walk runs the batch as copies, and the CPU kernels' matrix
        // products round rows in larger batches differently (≈ 1e-7 of the logit difference)
        let close = |v: f64, want: f64| (v - want).abs() <= 2e-6 * (1.0 + want.abs());
        let cc = patch_each(&c, &c, &patches, &mut |_| {}).unwrap();
        for (s, v) in patches.iter().zip(&cc) {
            let x = normalise(*v, ld_corr, ld_clean);
            assert!(
                close(*v, ld_clean),
                "{name}: clean→clean {s:?} gives {x} ({v} vs {ld_clean})"
            );
        }
        let kk = patch_each(&k, &k, &patches, &mut |_| {}).unwrap();
        for (s, v) in patches.iter().zip(&kk) {
            let x = normalise(*v, ld_corr, ld_clean);
            assert!(
                close(*v, ld_corr),
                "{name}: corrupt→corrupt {s:?} gives {x} ({v} vs {ld_corr})"
            );
        }
        // denoising everything at resid_pre of layer 0 restores the clean run: 1
        let all = PatchSpec {
            layer: 0,
            site: Site::Stream(StreamSite::ResidPre),
            index: None,
            position: None,
        };
        let v = patch_each(&k, &c, &[all], &mut |_| {}).unwrap()[0];
        assert!(
            (normalise(v, ld_corr, ld_clean) - 1.0).abs() < 1e-4,
            "{name}: full denoise"
        );
        // a key/value group's patch changes z only in the query heads that read the group
        let (h, kv) = (exp.model.n_heads, exp.model.kv_heads());
        for site in [HeadSite::K, HeadSite::V] {
            for g in 0..kv {
                let spec = PatchSpec {
                    layer: 1,
                    site: Site::Head(site),
                    index: Some(g),
                    position: None,
                };
                let (start, hooks) = patch_hooks(&c, &k, &[spec]).unwrap();
                let mut hooks = hooks.record(1, Site::Head(HeadSite::Z));
                c.walk_copies(start, 1, &mut hooks);
                let z = common::tensor_values(hooks.heads[&(1, HeadSite::Z)].clone());
                let z0 = common::tensor_values(c.heads(1, HeadSite::Z).unwrap());
                let per = z.len() / (2 * h);
                for bi in 0..2 {
                    for hi in 0..h {
                        let at = (bi * h + hi) * per;
                        let same = z[at..at + per] == z0[at..at + per];
                        let ours = hi / (h / kv) == g;
                        assert_eq!(same, !ours, "{name}: {site:?} group {g} → head {hi}");
                    }
                }
            }
        }
    }
}

/// SmolLM2-135M (GQA 9/3): a few heads' z interventions and one key/value group against the
/// NumPy reference running the imported checkpoint in float64 (`common::smollm2`).
#[test]
fn ablations_on_smollm2_match_the_numpy_reference() {
    let gguf = common::smollm2();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("smol");
    let (code, out) = common::sinklab_output(
        None,
        &[
            "import",
            gguf.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "--ctx",
            "64",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let tokens: Vec<Vec<u32>> = vec![
        vec![504, 3458, 282, 6326, 314, 2273, 30, 378, 3458],
        vec![1648, 1032, 253, 1345, 28, 5249, 30, 1648, 1032],
    ];
    let heads = [(3usize, 1usize), (17, 4)];
    let groups = [(5usize, 2usize)];
    let (ok, json) = common::run_python(
        "reference_interventions.py",
        &[
            "--run",
            run.to_str().unwrap(),
            "--tokens",
            &serde_json::to_string(&tokens).unwrap(),
            "--heads",
            "3:1,17:4",
            "--groups",
            "5:2",
        ],
    );
    assert!(ok, "{json}");
    let want: Value = serde_json::from_str(&json).unwrap();
    let opened = sinklab::run::open_run(&run, None, &mut |_| {}).unwrap();
    let m = &opened.model;
    let flat: Vec<i64> = tokens.iter().flatten().map(|&t| t as i64).collect();
    let b = batch_of(&flat, [2, 9]);
    let p = Prepared::new(m, &b, &SITES, loss_scoring(&b), &dev_of(&opened)).unwrap();
    let v = m.embed.dims()[0];
    let last = |logits: Vec<f32>| -> Vec<f32> {
        (0..2)
            .flat_map(|s| logits[(s * 9 + 8) * v..(s * 9 + 9) * v].to_vec())
            .collect()
    };
    let mut checked = 0;
    for r in want["runs"].as_array().unwrap() {
        let (layer, index) = (
            r["layer"].as_u64().unwrap() as usize,
            r["index"].as_u64().unwrap() as usize,
        );
        let kind = match r["kind"].as_str().unwrap() {
            "zero" => AblationKind::Zero,
            "mean" => AblationKind::Mean,
            "resample" => AblationKind::Resample,
            _ => AblationKind::MoveToFirst,
        };
        let unit = if r["site"] == "kv" {
            Unit::KvGroup {
                layer,
                group: index,
            }
        } else {
            Unit::Head { layer, head: index }
        };
        let got = last(ablated_logits(&p, kind, &[vec![unit]]));
        let expect: Vec<f64> = r["last"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|x| x.as_array().unwrap().iter().map(|y| y.as_f64().unwrap()))
            .collect();
        let scale = expect.iter().fold(0f64, |a, x| a.max(x.abs()));
        assert_close(
            &got,
            &expect,
            1e-4,
            1e-4 * scale,
            &format!("SmolLM2 {r:?}", r = (&r["site"], &r["kind"], layer, index)),
        );
        checked += 1;
    }
    assert_eq!(checked, heads.len() * 4 + groups.len() * 3);
}

fn dev_of(r: &sinklab::run::OpenRun) -> burn::tensor::Device {
    r.device.clone()
}

/// `sinklab ablate` and `sinklab patch` on a small trained GQA run (4 query heads, 2 key/value
/// groups): typed reports whose numbers agree with each other (a named set's Δ is the scan's
/// cell, each control's Δ the scan's cell of its head), the exact patching identities at layer 0
/// (only the corrupted position differs there), directional addition of the clean − corrupted
/// difference equal to the patch, and clear errors for input that does not fit.
#[test]
fn ablate_and_patch_commands_agree_with_themselves_and_refuse_what_does_not_fit() {
    use sinklab::analysis::ablate::AblateReport;
    use sinklab::analysis::ablate::MeanFrom;
    use sinklab::analysis::patch::PatchReport;
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(dir.path(), "iv", &["model.n_kv_heads=2"]);
    sinklab::train::train(&exp, &common::quiet(), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    let run = run.to_str().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let json = |args: &[&str]| -> String {
        let mut a = args.to_vec();
        // several calls repeat a computation (and so a file name) on purpose
        a.extend(["--out", o, "--json", "--force"]);
        let (code, text, err) = common::sinklab_in(None, &a);
        assert_eq!(code, 0, "{a:?}: {err}");
        text
    };
    let close = |a: f64, b: f64, what: &str| {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{what}: {a} vs {b}"
        );
    };

    // Every head on its own: a 2 × 4 Δ map with each head's dormancy, and its PNG, named by
    // what was computed (task, units, kind, metric).
    let (code, text) = common::sinklab_output(None, &["ablate", run, "--n", "15", "--out", o]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("largest Δ") && text.contains("dormant heads"),
        "{text}"
    );
    let scan_file = out.join("ablate_repeat_all_zero_loss.json");
    let scan: AblateReport =
        serde_json::from_str(&std::fs::read_to_string(&scan_file).unwrap()).unwrap();
    assert!(out.join("ablate_repeat_all_zero_loss_delta.png").exists());
    assert_eq!(
        scan.files,
        vec![
            "ablate_repeat_all_zero_loss_delta.png",
            "ablate_repeat_all_zero_loss.json"
        ]
    );
    // The same analysis again does not replace its report without --force (and computes
    // nothing); with --force it does.
    let before = std::fs::metadata(&scan_file).unwrap().modified().unwrap();
    let (code, text) = common::sinklab_output(None, &["ablate", run, "--n", "15", "--out", o]);
    assert_ne!(code, 0);
    assert!(
        text.contains("ablate_repeat_all_zero_loss.json exists") && text.contains("--force"),
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(&scan_file).unwrap().modified().unwrap(),
        before
    );
    let (code, text) =
        common::sinklab_output(None, &["ablate", run, "--n", "15", "--out", o, "--force"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!((scan.sequences, scan.len), (8, 31));
    assert!(
        scan.baseline > 0.5 && scan.baseline < 8.0,
        "{}",
        scan.baseline
    );
    let cells = scan.scan.clone().unwrap();
    assert_eq!(cells.len(), 2);
    assert!(cells.iter().all(|r| r.len() == 4));
    assert!(cells.iter().flatten().all(|d| d.is_finite()));
    assert!(
        cells.iter().flatten().any(|d| d.abs() > 1e-5),
        "zero ablation moved nothing: {cells:?}"
    );
    let d = scan.dormancy.as_ref().unwrap();
    assert_eq!(d.dormant.heads + d.active.heads, 8);

    // `bench --heads`: from layer 0 or restarted at the layer, one head per walk or batched,
    // give the same losses (its times are a benchmark's, not asserted).
    let (code, text, err) = common::sinklab_in(
        None,
        &[
            "bench", run, "--heads", "--n", "15", "--layer", "1", "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let b: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            &b["layers"],
            &b["heads_per_layer"],
            &b["layer"],
            &b["tokens"]
        ),
        (&2.into(), &4.into(), &1.into(), &31.into())
    );
    let diff = b["max_abs_diff"].as_f64().unwrap();
    assert!(diff <= 1e-5, "the four ways differ by {diff}");
    let (code, text) = common::sinklab_output(None, &["bench", run, "--heads", "--layer", "2"]);
    assert_ne!(code, 0);
    assert!(
        text.contains("--layer 2: the model has layers 0..2"),
        "{text}"
    );

    // A named head against its matched-random heads: the same Δ as the scan's. Its layer has 3
    // other heads, so --controls 5 finds 3 distinct sets and uses all of them (the exact
    // distribution), never one twice.
    let named: AblateReport = serde_json::from_str(&json(&[
        "ablate",
        run,
        "--n",
        "15",
        "--heads",
        "1:0",
        "--controls",
        "5",
    ]))
    .unwrap();
    let n = named.named.unwrap();
    close(named.baseline, scan.baseline, "baseline");
    close(n.delta, cells[1][0], "named 1.0");
    assert_eq!((n.controls.len(), n.distinct_sets, n.exact), (3, 3, true));
    let mut drawn: Vec<&String> = n.control_sets.iter().map(|s| &s[0]).collect();
    drawn.sort();
    assert_eq!(drawn, vec!["1.1", "1.2", "1.3"], "each other head once");
    for (set, delta) in n.control_sets.iter().zip(&n.controls) {
        assert_eq!(set.len(), 1);
        let (l, h) = set[0].split_once('.').unwrap();
        assert_eq!(l, "1", "controls come from the named head's layer");
        assert_ne!(h, "0", "controls avoid the named head");
        close(*delta, cells[1][h.parse::<usize>().unwrap()], &set[0]);
    }
    let below = n.controls.iter().filter(|&&c| c < n.delta).count() as f64;
    let equal = n.controls.iter().filter(|&&c| c == n.delta).count() as f64;
    close(
        n.percentile,
        100.0 * (below + 0.5 * equal) / 3.0,
        "percentile",
    );
    assert!(
        out.join("ablate_repeat_set-1.0_zero_loss_controls.png")
            .exists()
    );
    // the scan's report is still there beside the named set's
    assert!(scan_file.exists() && out.join("ablate_repeat_set-1.0_zero_loss.json").exists());

    // Key/value groups: a 2 × 2 map; a mean ablation names and records its reference set.
    let groups: AblateReport = serde_json::from_str(&json(&[
        "ablate",
        run,
        "--n",
        "15",
        "--heads",
        "kv all",
        "--kind",
        "mean",
        "--mean-from",
        "task",
        "--positions",
        "last",
    ]))
    .unwrap();
    assert!(groups.groups);
    let g = groups.scan.unwrap();
    assert_eq!((g.len(), g[0].len()), (2, 2));
    let r = groups.mean_from.unwrap();
    assert_eq!((r.sequences, r.len), (8, 31));
    assert_ne!(
        r.seed,
        groups.sequences as u64 + 12345,
        "a seed is recorded"
    );
    // the last position alone: a different baseline than the second half's
    assert!((groups.baseline - scan.baseline).abs() > 1e-6);

    // KL of the clean distribution against itself is 0, and positive once a head is ablated.
    let kl: AblateReport = serde_json::from_str(&json(&[
        "ablate", run, "--n", "15", "--metric", "kl", "--kind", "resample",
    ]))
    .unwrap();
    assert!(kl.baseline.abs() < 1e-6, "{}", kl.baseline);
    assert!(kl.scan.unwrap().iter().flatten().all(|&d| d >= -1e-6));
    assert_eq!(kl.resample_perm.as_ref().map(Vec::len), Some(8));

    // Patching resid_pre by layer × position: at layer 0 only position n (the corrupted token)
    // differs, so patching it gives exactly 1 and every other position 0. Directional addition
    // of the one prompt's clean − corrupted difference at layer 1's last position is the patch.
    let p: PatchReport = serde_json::from_str(&json(&[
        "patch",
        run,
        "--n",
        "10",
        "--sequences",
        "1",
        "--site",
        "resid_pre",
        "--add",
        "mean-diff",
        "--at",
        "1:resid_pre",
        "--scales",
        "0,1",
    ]))
    .unwrap();
    assert_eq!((p.count, p.len), (1, 20));
    assert_eq!(p.normalised.len(), 2);
    for (i, &v) in p.normalised[0].iter().enumerate() {
        let want = if i == 10 { 1.0 } else { 0.0 };
        assert!((v - want).abs() < 1e-4, "layer 0 position {i}: {v}");
    }
    let a = p.addition.as_ref().unwrap();
    assert!(a.norm > 0.0);
    assert!(a.normalised[0].abs() < 1e-5, "{:?}", a.normalised);
    close(a.normalised[1], p.normalised[1][19], "addition = patch");
    let stem = "patch_repeat_resid_pre_layer-position_denoise_logit-diff_add-resid_pre-l1";
    for f in ["_map.png", "_addition.png", "_direction.json", ".json"] {
        assert!(out.join(format!("{stem}{f}")).exists(), "{stem}{f}");
    }

    // Four repeat prompts on this small model: their clean and corrupted metrics differ by less
    // than two standard errors, so patch refuses to normalise by the gap (and writes nothing).
    let (code, text) = common::sinklab_output(
        None,
        &[
            "patch",
            run,
            "--n",
            "10",
            "--site",
            "k",
            "--sequences",
            "4",
            "--out",
            o,
        ],
    );
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("within noise"), "{text}");
    assert!(text.contains("standard error"), "{text}");
    assert!(
        !out.join("patch_repeat_k_head_denoise_logit-diff.json")
            .exists()
    );

    // k by head on the GQA model: one column per key/value group; noising mirrors denoising
    // at layer 0 position n.
    let k: PatchReport = serde_json::from_str(&json(&[
        "patch",
        run,
        "--n",
        "10",
        "--site",
        "k",
        "--sequences",
        "1",
    ]))
    .unwrap();
    assert_eq!(k.column_labels, vec!["0", "1"]);
    assert!(k.normalised.iter().flatten().all(|v| v.is_finite()));
    let noise: PatchReport = serde_json::from_str(&json(&[
        "patch",
        run,
        "--n",
        "10",
        "--site",
        "resid_pre",
        "--direction",
        "noise",
        "--sequences",
        "1",
    ]))
    .unwrap();
    for (i, &v) in noise.normalised[0].iter().enumerate() {
        let want = if i == 10 { 0.0 } else { 1.0 };
        assert!((v - want).abs() < 1e-4, "noising position {i}: {v}");
    }

    // Prompts from a file (byte tokenizer: one token per character). On this small model two
    // different pairs' gaps differ by more than their mean (patch would refuse them as noise,
    // as above), so the file holds one pair twice: standard error 0, the gap its own.
    let prompts = dir.path().join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"clean\": \"the cat sat\", \"corrupt\": \"the dog sat\", \"answer\": \".\", \"wrong\": \"!\"}\n\
         {\"clean\": \"the cat sat\", \"corrupt\": \"the dog sat\", \"answer\": \".\", \"wrong\": \"!\"}\n",
    )
    .unwrap();
    let f: PatchReport = serde_json::from_str(&json(&[
        "patch",
        run,
        "--prompts",
        prompts.to_str().unwrap(),
        "--by",
        "head-position",
        "--layers",
        "1",
    ]))
    .unwrap();
    assert_eq!((f.count, f.len), (2, 12));
    assert_eq!(f.row_labels, vec!["1.0", "1.1", "1.2", "1.3"]);
    assert_eq!(f.column_labels.len(), 12);

    // `ablate --metric logit-diff` on the same prompts: ablating nothing is patch's clean
    // logit difference; a named head's Δ is its scan cell, each control's the cell of its head.
    let pf = prompts.to_str().unwrap();
    let ablate_prompts = |extra: &[&str]| -> AblateReport {
        let mut a = vec!["ablate", run, "--task", "prompts", pf];
        a.extend(extra);
        serde_json::from_str(&json(&a)).unwrap()
    };
    let ld = ablate_prompts(&["--metric", "logit-diff"]);
    assert_eq!((ld.sequences, ld.len), (2, 12));
    assert_eq!(
        (ld.metric, ld.positions),
        (Metric::LogitDiff, Positions::Last)
    );
    close(ld.baseline, f.clean, "ablate's baseline = patch's clean");
    let cells = ld.scan.clone().unwrap();
    assert!(cells.len() == 2 && cells.iter().all(|r| r.len() == 4));
    assert!(cells.iter().flatten().all(|d| d.is_finite()));
    assert!(cells.iter().flatten().any(|d| d.abs() > 1e-4), "{cells:?}");
    let named = ablate_prompts(&[
        "--metric",
        "logit-diff",
        "--heads",
        "1:2",
        "--controls",
        "3",
    ]);
    let n = named.named.unwrap();
    close(n.delta, cells[1][2], "named 1.2 = its scan cell");
    close(named.baseline, ld.baseline, "the same baseline");
    for (set, &d) in n.control_sets.iter().zip(&n.controls) {
        let h: usize = set[0].strip_prefix("1.").unwrap().parse().unwrap();
        close(d, cells[1][h], &format!("control {set:?}"));
    }
    // every --positions reads the answer, the one counted target of a prompt
    let all = ablate_prompts(&[
        "--metric",
        "logit-diff",
        "--positions",
        "all",
        "--heads",
        "1:2",
    ]);
    close(
        all.named.unwrap().delta,
        cells[1][2],
        "--positions all = last",
    );
    // key/value groups, mean over the corrupted prompts, resample between the two prompts
    let kv = ablate_prompts(&["--metric", "logit-diff", "--heads", "kv all"]);
    let g = kv.scan.unwrap();
    assert!(
        g.len() == 2
            && g.iter()
                .all(|r| r.len() == 2 && r.iter().all(|d| d.is_finite()))
    );
    let mean = ablate_prompts(&[
        "--metric",
        "logit-diff",
        "--kind",
        "mean",
        "--mean-from",
        "task",
    ]);
    let r = mean.mean_from.unwrap();
    assert_eq!((r.from, r.sequences, r.len), (MeanFrom::Task, 2, 12));
    close(mean.baseline, ld.baseline, "mean: the same baseline");
    let res = ablate_prompts(&["--metric", "logit-diff", "--kind", "resample"]);
    assert_eq!(res.resample_perm, Some(vec![1, 0]));
    // the loss metric on prompts is patch's loss of the answer
    let loss = ablate_prompts(&["--metric", "loss", "--heads", "1:2"]);
    let pl: PatchReport = serde_json::from_str(&json(&[
        "patch",
        run,
        "--prompts",
        pf,
        "--metric",
        "loss",
        "--layers",
        "1",
    ]))
    .unwrap();
    close(
        loss.baseline,
        pl.clean,
        "ablate's loss = patch's clean loss",
    );
    let (code, text) = common::sinklab_output(
        None,
        &[
            "ablate",
            run,
            "--task",
            "prompts",
            pf,
            "--metric",
            "logit-diff",
            "--out",
            o,
            "--force",
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("largest drops (most negative Δ)"), "{text}");
    let one = dir.path().join("one.jsonl");
    std::fs::write(
        &one,
        "{\"clean\": \"ab\", \"corrupt\": \"ac\", \"answer\": \"c\", \"wrong\": \"d\"}\n",
    )
    .unwrap();
    let one = one.to_str().unwrap();

    let bad = dir.path().join("bad.jsonl");
    for (lines, want) in [
        (
            "{\"clean\": \"ab\", \"corrupt\": \"abc\", \"answer\": \"c\", \"wrong\": \"d\"}",
            "needs equal lengths",
        ),
        (
            "{\"clean\": \"ab\", \"corrupt\": \"ac\", \"answer\": \"cd\", \"wrong\": \"d\"}",
            "an answer must be one token",
        ),
        ("{\"clean\": \"ab\"}", "expected {\"clean\", \"corrupt\""),
    ] {
        std::fs::write(&bad, lines).unwrap();
        let (code, text) = common::sinklab_output(
            None,
            &["patch", run, "--out", o, "--prompts", bad.to_str().unwrap()],
        );
        assert_ne!(code, 0, "{lines}");
        assert!(text.contains(want), "{lines}: {text}");
    }
    for (args, want) in [
        (
            vec!["ablate", "--heads", "5:0"],
            "the model has layers 0..2",
        ),
        (
            vec!["ablate", "--heads", "1-2"],
            "expected `all`, `L:H,L:H`",
        ),
        (vec!["ablate", "--heads", "kv 0:2"], "key/value groups 0..2"),
        (
            vec!["ablate", "--heads", "kv 0:1", "--kind", "move-to-first"],
            "not on a key/value group",
        ),
        (vec!["ablate", "--kind", "half"], "move-to-first"),
        (vec!["ablate", "--task", "bb"], "trained on Bigram-Backcopy"),
        (vec!["ablate", "--task", "poem"], "valid tasks are"),
        (
            vec!["ablate", "--metric", "logit-diff"],
            "needs an answer and a wrong answer per prompt: use --task prompts",
        ),
        (
            vec!["ablate", "--task", "prompts", pf, "--sequences", "4"],
            "--sequences: --task prompts takes every prompt",
        ),
        (
            vec!["ablate", "--task", "prompts", one, "--kind", "resample"],
            "needs at least 2 sequences, the task has 1",
        ),
        (
            vec!["ablate", "--mean-from", "task"],
            "--mean-from names the reference set of --kind mean",
        ),
        (vec!["ablate", "--n", "40"], "use --n ≤ 15"),
        (
            vec!["ablate", "--task", "natural", "--n", "10"],
            "--n: only --task repeat has a segment length",
        ),
        (
            vec!["ablate", "--len", "20"],
            "--len 20: the repeat task's sequences have 2·--n + 1 tokens",
        ),
        (
            vec!["ablate", "--heads", "1:0", "--controls", "0"],
            "at least one matched-random set",
        ),
        (
            vec!["ablate", "--heads", "0:1,0:2,0:3", "--controls", "3"],
            "layer 0 has only 1 other unit for the 3",
        ),
        (
            vec!["patch", "--site", "resid_pre", "--by", "head"],
            "is a residual-stream site",
        ),
        (
            vec!["patch", "--site", "z", "--by", "layer-position"],
            "is a per-head site",
        ),
        (vec!["patch", "--site", "zz"], "valid sites are"),
        (vec!["patch", "--site", "gate"], "no output gate"),
        (vec!["patch", "--layers", "7"], "the model has layers 0..2"),
        (vec!["patch", "--n", "17"], "2 ≤ n ≤ model.ctx / 2 = 16"),
        (
            vec!["patch", "--add", "mean-diff"],
            "--add and --at go together",
        ),
        (
            vec!["patch", "--add", "mean-diff", "--at", "1:pattern:0"],
            "not to the pattern",
        ),
        (
            vec!["patch", "--add", "mean-diff", "--at", "one:z"],
            "expected L:SITE or L:SITE:H",
        ),
    ] {
        // --force: the settings are checked whether or not an earlier report has the name
        let mut a = vec![args[0], run, "--out", o, "--force"];
        // the repeat task (the default) fits ctx 32 with n ≤ 15; other tasks take no --n
        let takes_n = !(args[0] == "ablate" && args.contains(&"--task"));
        if takes_n && !args.contains(&"--n") {
            a.extend(["--n", if args[0] == "patch" { "10" } else { "15" }]);
        }
        a.extend(&args[1..]);
        let (code, text) = common::sinklab_output(None, &a);
        assert_ne!(code, 0, "{a:?}");
        assert!(text.contains(want), "{a:?}: {text}");
    }
}

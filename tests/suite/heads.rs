//! Attention-head scores (`src/heads/`, docs/reference.md §11) against the independent NumPy
//! reference (`scripts/reference_heads.py` → tests/fixtures/heads_golden.json), the head probe's
//! α₁ against the sink probe's, and `sinklab heads` on a trained Bigram-Backcopy model.

use serde_json::Value;
use sinklab::heads::{self, Pattern, TlMeasure, eig};
use sinklab::metrics::Array;

use crate::common;
use common::fixture::{floats, shape};

fn array(v: &Value) -> Array {
    Array::new(shape(v), floats(v).into_iter().map(|x| x as f32).collect())
}

fn close(got: &[f64], want: &[f64], rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rtol * w.abs().max(1e-3),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn list(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn every_head_score_matches_numpy() {
    let g = common::golden("heads_golden.json");
    for c in g["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let tokens: Vec<u32> = c["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter())
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let attn = array(&c["attn"]);
        let slot = (!c["slot"].is_null()).then(|| array(&c["slot"]));
        let e = &c["expected"];
        for p in Pattern::ALL {
            let k = serde_json::to_value(p).unwrap();
            let k = k.as_str().unwrap();
            close(
                &heads::pattern_score(&attn, &tokens, p),
                &list(&e[format!("primary_{k}")]),
                1e-9,
                &format!("{name} primary {k}"),
            );
            for (m, mn) in [(TlMeasure::Mul, "mul"), (TlMeasure::Abs, "abs")] {
                for (ex, en) in [(false, "none"), (true, "first")] {
                    close(
                        &heads::tl_score(&attn, &tokens, p, m, ex),
                        &list(&e[format!("tl_{mn}_{k}_{en}")]),
                        1e-9,
                        &format!("{name} tl {mn} {k} exclude {en}"),
                    );
                }
            }
        }
        let values = array(&c["values"]);
        let z = array(&c["z"]);
        let l = heads::LayerHeads::of(
            &attn,
            slot.as_ref(),
            &values,
            &z,
            &tokens,
            heads::Measure::Primary,
        );
        close(&l.alpha1, &list(&e["alpha1"]), 1e-9, &format!("{name} α₁"));
        close(&l.slot_mass, &list(&e["slot_mass"]), 1e-9, name);
        close(
            &l.entropy,
            &list(&e["entropy"]),
            1e-9,
            &format!("{name} entropy"),
        );
        close(&l.value_drain, &list(&e["value_drain"]), 1e-9, name);
        close(&l.ahon, &list(&e["ahon"]), 1e-9, &format!("{name} AHON"));
        close(&l.ahon_ln, &list(&e["ahon_ln"]), 1e-9, name);
        // the planted heads stand out on the primary measure
        assert!(
            l.previous.iter().chain(&l.induction).any(|&s| s > 0.5),
            "{name}"
        );
    }
    for c in g["eig"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let m = &c["matrix"];
        let n = shape(m)[0];
        // the float32 values the reference used (the JSON holds their shortest decimals)
        let m: Vec<f64> = floats(m).into_iter().map(|x| x as f32 as f64).collect();
        let ev = eig::eigenvalues(&m, n).unwrap();
        let scale = c["abs_sum"].as_f64().unwrap() / n as f64;
        let mut re: Vec<f64> = ev.iter().map(|e| e.re).collect();
        re.sort_by(f64::total_cmp);
        let want = list(&c["eig_re"]);
        for (i, (g, w)) in re.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-9 * scale,
                "{name} Re λ[{i}]: {g} vs {w}"
            );
        }
        let abs: f64 = ev.iter().map(|e| e.abs()).sum();
        let copy = heads::copy_score(&m, n).unwrap();
        assert!(
            (abs - c["abs_sum"].as_f64().unwrap()).abs() <= 1e-9 * abs,
            "{name} Σ|λ|"
        );
        assert!(
            (copy - c["copy"].as_f64().unwrap()).abs() <= 1e-9,
            "{name} copy {copy}"
        );
    }
}

#[test]
fn the_trigger_copy_score_matches_numpy() {
    let g = common::golden("heads_golden.json");
    for c in g["trigger_copy"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let ints = |v: &Value| -> Vec<usize> {
            v.as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().cloned().unwrap_or_else(|| vec![r.clone()]))
                .map(|x| x.as_u64().unwrap() as usize)
                .collect()
        };
        let (groups, offsets) = (ints(&c["groups"]), ints(&c["offsets"]));
        let (score, queries) = heads::trigger_copy_score(&array(&c["attn"]), &groups, &offsets, 1);
        assert_eq!(queries, ints(&c["expected"]["queries"]), "{name} queries");
        let want = c["expected"]["trigger_copy"].as_array().unwrap();
        for (i, (got, want)) in score.iter().zip(want).enumerate() {
            close(got, &list(want), 1e-9, &format!("{name} trigger {i}"));
        }
    }
}

/// α₁ comes out of the head probe exactly as out of the sink probe (the same arrays through
/// the same functions), on every zoo variant.
#[test]
fn the_head_probe_and_the_sink_probe_give_the_same_alpha1() {
    use sinklab::data::repeat::repeat_probe;
    use sinklab::eval::{ProbeSpec, heads::head_scores, probe_report};
    use sinklab::metrics::Proxy;
    use sinklab::tokenizer::RegularIds;
    let g = common::golden("zoo_golden.json");
    let dev = common::device();
    let mut checked = 0;
    for case in g["cases"].as_array().unwrap() {
        let (m, exp) = common::zoo::model(case, &dev);
        let vocab = case["vocab"].as_u64().unwrap() as u32;
        let n = (exp.model.ctx - 1) / 2;
        let batch = repeat_probe(&RegularIds::Range(1, vocab), n, 2, 3, 5, Some(0)).unwrap();
        let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
        let scores = head_scores(
            &m,
            &batch,
            2,
            proxy,
            heads::Measure::Primary,
            &dev,
            &mut |_| {},
        );
        let spec = ProbeSpec::new(&batch, 2, proxy, &dev);
        let report = probe_report(&m, spec, (&[0.3], 1), None);
        let ours: Vec<Vec<f64>> = scores.iter().map(|l| l.alpha1.clone()).collect();
        assert_eq!(ours, report.importance_first, "{}", case["name"]);
        assert!(
            ours.iter()
                .flatten()
                .all(|a| (0.0..=1.0 + 1e-6).contains(a) || proxy == Proxy::Signed)
        );
        checked += 1;
    }
    assert!(checked >= 60);
}

/// `sinklab heads` on a small trained run: a typed heads.json with every score for every
/// (layer, head), a heat map per score, the TransformerLens measures selectable, and clear
/// errors for options that do not fit.
#[test]
fn heads_command_writes_every_score_and_refuses_what_does_not_fit() {
    use sinklab::analysis::heads::HeadsReport;
    use sinklab::heads::{Measure, Score};
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(dir.path(), "h", &[]);
    sinklab::train::train(&exp, &common::quiet(), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    let run = run.to_str().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let (code, text) = common::sinklab_output(None, &["heads", run, "--n", "15", "--out", o]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("top induction") && text.contains("classes:"),
        "{text}"
    );
    let r: HeadsReport =
        serde_json::from_str(&std::fs::read_to_string(out.join("heads_repeat.json")).unwrap())
            .unwrap();
    assert_eq!((r.n_layers, r.n_heads, r.probe.len), (2, 4, 31));
    assert_eq!(r.measure, Measure::Primary);
    assert_eq!(r.trigger_copy, None, "a text run has no triggers");
    for s in Score::ALL {
        let rows = r.score(s);
        assert_eq!(rows.len(), 2);
        assert!(
            rows.iter()
                .all(|h| h.len() == 4 && h.iter().all(|x| x.is_finite())),
            "{s:?}"
        );
        let png = format!("heads_repeat_{}.png", s.name());
        assert!(out.join(&png).exists(), "{png}");
    }
    for l in &r.layers {
        let a = l.ahon_ln.iter().sum::<f64>() / 4.0;
        assert!(
            (a - 1.0).abs() < 1e-9,
            "AHON-LN averages to 1 in a layer: {a}"
        );
        assert!(l.previous.iter().all(|&x| (0.0..=1.0).contains(&x)));
    }
    // TransformerLens's mul with the first column excluded: a different, valid number
    let (code, json, err) = common::sinklab_in(
        None,
        &[
            "heads",
            run,
            "--n",
            "15",
            "--out",
            o,
            "--measure",
            "tl-mul",
            "--exclude",
            "first",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let tl: HeadsReport = serde_json::from_str(&json).unwrap();
    assert!(matches!(
        tl.measure,
        Measure::Tl {
            exclude_first: true,
            ..
        }
    ));
    assert_ne!(tl.layers[0].previous, r.layers[0].previous);
    assert_eq!(tl.layers[0].alpha1, r.layers[0].alpha1);
    for (args, want) in [
        (
            vec!["--exclude", "first"],
            "--exclude applies to --measure tl-mul or tl-abs",
        ),
        (vec!["--n", "40"], "use --n ≤ 15"),
        (vec!["--measure", "tl-max"], "tl-mul"),
        (
            vec!["--probe", "natural", "--len", "64"],
            "2 ≤ len ≤ model.ctx = 32",
        ),
        (vec!["--text", "x.txt"], "x.txt"),
        (
            vec!["--probe", "repeat", "--text", "x.txt"],
            "--text gives natural probes",
        ),
    ] {
        let mut a = vec!["heads", run, "--out", o, "--force"];
        a.extend(args);
        let (code, text) = common::sinklab_output(None, &a);
        assert_ne!(code, 0, "{a:?}");
        assert!(text.contains(want), "{a:?}: {text}");
    }
}

/// The live head scores a run logs (`metrics.heads`) are `sinklab heads` on the same probe
/// (n, sequences, seed) at the same step: the last probe step's values equal the command's on
/// the final checkpoint; and the probe off means no `heads/` metric.
#[test]
fn live_head_scores_equal_the_heads_command_on_the_same_probe() {
    use sinklab::analysis::heads::HeadsReport;
    use sinklab::heads::Score;
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(
        dir.path(),
        "live",
        &["metrics.heads.sequences=3", "metrics.heads.seed=5"],
    );
    let n = exp.metrics.heads.n;
    assert_eq!(n, (exp.model.ctx.min(exp.metrics.probe_len) - 1) / 2);
    sinklab::train::train(&exp, &common::quiet(), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    let records = common::read_metrics(&run);
    let (step, last) = records
        .iter()
        .rev()
        .find(|(_, r)| r.contains_key(&Score::Previous.tag(0, 0).to_string()))
        .expect("live head scores");
    assert_eq!(*step, exp.train.steps, "the last probe is at the last step");
    let (code, json, err) = common::sinklab_in(
        None,
        &[
            "heads",
            run.to_str().unwrap(),
            "--n",
            &n.to_string(),
            "--sequences",
            "3",
            "--seed",
            "5",
            "--out",
            dir.path().join("h").to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let r: HeadsReport = serde_json::from_str(&json).unwrap();
    assert_eq!(r.step, exp.train.steps);
    let mut compared = 0;
    for s in Score::LIVE {
        for (l, row) in r.score(s).iter().enumerate() {
            for (h, want) in row.iter().enumerate() {
                let got = last[&s.tag(l, h).to_string()].as_f64().unwrap();
                assert!(
                    (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "{}: live {got} vs heads {want}",
                    s.tag(l, h)
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 4 * 2 * 4);
    // off: no heads/ metric at all
    let off = common::tiny_experiment(dir.path(), "off", &["metrics.heads.enabled=false"]);
    sinklab::train::train(&off, &common::quiet(), &mut |_| {}).unwrap();
    let any = common::read_metrics(&off.run_dir())
        .iter()
        .any(|(_, r)| r.keys().any(|k| k.starts_with("heads/")));
    assert!(!any, "metrics.heads.enabled = false logs no head scores");
}

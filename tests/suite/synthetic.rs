//! Bigram-Backcopy (Guo et al. 2024): the generated data follows the task's rule and splits into
//! records, its word-level tokenizer gives identical ids in Python, and the quickstart recipe
//! forms an attention sink with softmax attention and none with ReLU attention.

use crate::common;

use common::*;
use sinklab::config::{self, Experiment};
use sinklab::data::{Dataset, Sampler};
use sinklab::train::{self, TrainOptions};
use std::path::Path;

fn quickstart(dir: &Path, name: &str, extra: &[&str]) -> Experiment {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.toml");
    let mut o: Vec<String> = vec![
        format!("run.name={name}"),
        format!("run.out_dir={:?}", dir.join("runs").display().to_string()),
        format!(
            "data.cache_dir={:?}",
            dir.join("cache").display().to_string()
        ),
    ];
    o.extend(extra.iter().map(|s| s.to_string()));
    config::load(&path, &o).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn bigram_backcopy_records_follow_the_rule_and_the_tokenizer_loads_in_python() {
    let dir = tempfile::tempdir().unwrap();
    let exp = quickstart(dir.path(), "data", &["data.synthetic.sequences=512"]);
    let data = Dataset::prepare(&exp.data, &mut |_| {}).unwrap();
    // 64 task tokens after <|bos|> = 0 and <|endoftext|> = 1; records of ctx + 1 = 65 tokens
    assert_eq!(data.vocab_size(), 66);
    let d = &data.domains[0];
    assert_eq!(d.record, Some(65));
    assert_eq!(d.train.len(), 512 * 65);
    // val_fraction 0.05 of 512 sequences, rounded up
    assert_eq!(d.val.len(), 26 * 65);
    // Every sampled window is a whole record from its start: BOS, then a first token that is
    // never a trigger (ids 2..6 are the 4 triggers), then the copy rule with offsets 1..4 by
    // trigger (t0 → 1, t1 → 2, t2 → 3, t3 → 4).
    let sampler = Sampler::new(&data, &exp.data, exp.model.ctx, exp.run.seed).unwrap();
    let mut copies = 0;
    for step in 0..20 {
        let b = sampler.batch(&data, step, 0, 16);
        for row in 0..b.batch {
            let x = &b.inputs[row * b.len..(row + 1) * b.len];
            let y = &b.targets[row * b.len..(row + 1) * b.len];
            assert_eq!(x[0], 0, "BOS first");
            assert!(x[1] >= 6, "the first task token is no trigger: {}", x[1]);
            // the full sequence s = x ++ [last target]; s[i] is a trigger → s[i+1] = s[i−g]
            let mut s = x.to_vec();
            s.push(*y.last().unwrap());
            for i in 2..s.len() - 1 {
                if (2..6).contains(&s[i]) {
                    let g = (s[i] - 2 + 1) as usize;
                    if i > g {
                        assert_eq!(s[i + 1], s[i - g], "copy {g} back at {i}");
                        copies += 1;
                    }
                }
            }
        }
    }
    assert!(copies > 1000, "{copies} copies checked");
    // the run's tokenizer gives the same ids in Python's tokenizers
    let texts = vec!["t0 t5 t63".to_string(), "<|bos|> t12 t3 t12".to_string()];
    let texts_path = dir.path().join("texts.json");
    std::fs::write(&texts_path, serde_json::to_string(&texts).unwrap()).unwrap();
    let tok_path = data.dir.join("tokenizer.json");
    let (ok, out) = run_python(
        "encode_texts.py",
        &[tok_path.to_str().unwrap(), texts_path.to_str().unwrap()],
    );
    assert!(ok, "{out}");
    let py: Vec<Vec<u32>> = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(py, vec![vec![2, 7, 65], vec![0, 14, 5, 14]]);
    for (text, ids) in texts.iter().zip(&py) {
        assert_eq!(&data.tokenizer.encode(text).unwrap(), ids);
    }
}

/// Mean over heads of the last value of `prefix*` tags.
fn last_mean(run: &Path, prefix: &str) -> f64 {
    let records = read_metrics(run);
    let (_, last) = records
        .iter()
        .rev()
        .find(|(_, s)| s.keys().any(|k| k.starts_with(prefix)))
        .unwrap_or_else(|| panic!("no {prefix} in {}", run.display()));
    let v: Vec<f64> = last
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v.as_f64().unwrap())
        .collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn quickstart_forms_a_sink_with_softmax_and_none_with_relu_attention() {
    let dir = tempfile::tempdir().unwrap();
    let short = [
        "train.steps=700",
        "train.eval_every=350",
        "train.checkpoint_every=700",
        "metrics.every=350",
    ];
    let opts = TrainOptions {
        quiet: true,
        ..TrainOptions::default()
    };
    let soft = quickstart(dir.path(), "softmax", &short);
    train::train(&soft, &opts, &mut |_| {}).unwrap();
    let mut relu_set = short.to_vec();
    relu_set.push("model.attention.normaliser={kind=\"relu\"}");
    let relu = quickstart(dir.path(), "relu", &relu_set);
    train::train(&relu, &opts, &mut |_| {}).unwrap();
    let (s, r) = (soft.run_dir(), relu.run_dir());

    // Both learn the copy job: the copy loss falls far below the bigram loss.
    for run in [&s, &r] {
        let copy = series(run, "bb/loss_copy").last().unwrap().1;
        let bigram = series(run, "bb/loss_bigram").last().unwrap().1;
        assert!(
            (0.0..0.4).contains(&copy),
            "{}: copy loss {copy}",
            run.display()
        );
        assert!(
            (2.3..3.0).contains(&bigram),
            "{}: bigram loss {bigram}",
            run.display()
        );
    }
    // Softmax: no sink at step 0; by step 700 most heads park their non-trigger queries on BOS,
    // trigger queries do not, and BOS's value shrinks (the value-state drain).
    let sink = series(&s, "sink/rate_eps0.3/pos01");
    assert_eq!(sink[0], (0, 0.0));
    let last = sink.last().unwrap().1;
    assert!((40.0..=100.0).contains(&last), "softmax Sink1 {last}");
    let dormant = last_mean(&s, "bb/attn_first_dormant/");
    let drain = last_mean(&s, "kv/value_drain/");
    assert!((0.5..=1.0).contains(&dormant), "dormant → BOS {dormant}");
    // every head keeps the queries of the trigger it copies for off BOS (it is active there)
    let records = read_metrics(&s);
    let (_, last) = records
        .iter()
        .rev()
        .find(|(_, r)| r.contains_key("bb/attn_first_trigger0/layer00_head00"))
        .unwrap();
    for h in 0..4 {
        let own = (0..4)
            .map(|i| {
                last[&format!("bb/attn_first_trigger{i}/layer00_head{h:02}")]
                    .as_f64()
                    .unwrap()
            })
            .fold(f64::INFINITY, f64::min);
        assert!((0.0..0.1).contains(&own), "head {h}: active → BOS {own}");
    }
    assert!((0.0..0.6).contains(&drain), "value drain {drain}");
    // Ground truth for `sinklab ablate --task bb` (docs/reference.md §11): ablating a copy head
    // raises the copy loss far more than the bigram loss, under zero and move-to-first.
    let mut zero = None;
    for kind in ["zero", "move-to-first"] {
        let (code, json, err) = sinklab_in(
            None,
            &[
                "ablate",
                s.to_str().unwrap(),
                "--task",
                "bb",
                "--kind",
                kind,
                "--out",
                dir.path().join("ablate").to_str().unwrap(),
                "--json",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let r: sinklab::analysis::ablate::AblateReport = serde_json::from_str(&json).unwrap();
        let (copy, bigram) = (r.scan.unwrap(), r.scan_bigram.unwrap());
        assert!(r.baseline < 0.4 && r.baseline_bigram.unwrap() > 2.3);
        let top = copy[0].iter().copied().fold(f64::MIN, f64::max);
        let sum_copy: f64 = copy[0].iter().sum();
        let sum_bigram: f64 = bigram[0].iter().map(|d| d.abs()).sum();
        assert!(top > 0.3, "{kind}: the largest copy Δ {top}");
        assert!(
            sum_copy > 10.0 * sum_bigram,
            "{kind}: copy Δ {copy:?}, bigram Δ {bigram:?}"
        );
        if kind == "zero" {
            zero = Some((r.triggers.unwrap(), bigram[0].clone()));
        }
    }
    trigger_ground_truth(&s, dir.path(), zero.unwrap());
    // ReLU attention: a dormant head can output zero, so no head needs a sink.
    let last = series(&r, "sink/rate_eps0.3/pos01").last().unwrap().1;
    assert!((0.0..=2.0).contains(&last), "relu Sink1 {last}");
    let dormant = last_mean(&r, "bb/attn_first_dormant/");
    assert!(
        (0.0..0.1).contains(&dormant),
        "relu dormant → BOS {dormant}"
    );
    let drain = last_mean(&r, "kv/value_drain/");
    assert!((0.6..1.5).contains(&drain), "relu value drain {drain}");
}

/// Ground truth per trigger (issue 31) on the 700-step softmax quickstart run: `sinklab heads`
/// names each trigger's copy head by its per-trigger copy score A[q, q − g_i] on validation
/// windows, and zero-ablating that head (`ablate --task bb`; `t` and `bigram` from the zero
/// ablation) raises that trigger's copy loss far more than the bigram loss, and more than
/// ablating any head with no copy job for it. A "copier" of trigger i scores at least 0.4, the
/// share at which §11 calls a head by its pattern ([`Thresholds::pattern`]): 0.4 of every
/// trigger-i row on the one token it copies; a head with no copy job puts ≥ 0.8 of its rows on
/// BOS, so it scores at most 0.2 ([`NO_JOB`]). Heads in between are partial copiers and are
/// left out, as a second copier is. What the run gives (measured, seed 0, with the CPU kernels;
/// scores on 20 windows, Δ on 8): trigger 1 (offset 2) has its own head (0.2: score 0.92, the
/// rest ≤ 0.02; Δ +3.52, the rest ≤ +0.0); offset 1 is shared by 0.1 and 0.0 (0.88 and 0.81;
/// Δ +0.53 and +0.15); head 0.1 tops offsets 3 and 4 too (0.53, 0.46; Δ +1.66, +1.50), and
/// offset 4 is split with head 0.2 (0.29, Δ +1.63: a partial copier, more necessary than the
/// top-scored head — attention is not necessity). Before the kernels (SINKLAB_KERNELS=0, a
/// different rounding and so a different trained model) head 0.1's offsets 3 and 4 were
/// +2.27 and +1.40 with nothing above +0.98 elsewhere. So four triggers do not find four
/// distinct heads: two at 700 steps, three at 2000 (0.0 takes offset 1); the test asserts 2–3,
/// not 4.
/// The most a head with no copy job for a trigger puts on its copy target: 1 − 0.8, the rest
/// of a row that parks ≥ 0.8 on BOS (see [`trigger_ground_truth`]).
const NO_JOB: f64 = 0.2;

fn trigger_ground_truth(
    run: &Path,
    dir: &Path,
    (t, bigram): (sinklab::analysis::ablate::TriggerDeltas, Vec<f64>),
) {
    use sinklab::analysis::heads::HeadsReport;
    use sinklab::heads::Thresholds;
    let (code, json, err) = sinklab_in(
        None,
        &[
            "heads",
            run.to_str().unwrap(),
            "--n",
            "31",
            "--out",
            dir.join("heads").to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let h: HeadsReport = serde_json::from_str(&json).unwrap();
    let tc = h
        .trigger_copy
        .expect("a Bigram-Backcopy run has trigger copy scores");
    assert_eq!(tc.offsets, vec![1, 2, 3, 4]);
    assert_eq!(t.offsets, tc.offsets);
    assert!(tc.queries.iter().all(|&n| n >= 30), "{:?}", tc.queries);
    assert!(t.targets.iter().all(|&n| n >= 20), "{:?}", t.targets);
    let copier = Thresholds::default().pattern;
    let scan = t.scan.expect("every head scanned");
    let mut found = std::collections::BTreeSet::new();
    for (i, (scores, d)) in tc.scores.iter().zip(&scan).enumerate() {
        let (score, d) = (&scores[0], &d[0]);
        let top = tc.top[i].as_ref().expect("trigger i occurs");
        let hi = top.index;
        assert_eq!((top.layer, top.score), (0, score[hi]));
        assert!(
            (copier..=1.0).contains(&top.score),
            "trigger {i}: top copy score {score:?}"
        );
        found.insert(hi);
        // the copy head's ablation costs its trigger's copies, not the bigram
        assert!(
            (0.2..6.0).contains(&d[hi]) && d[hi] > 10.0 * bigram[hi].abs(),
            "trigger {i} head {hi}: copy Δ {d:?}, bigram Δ {bigram:?}"
        );
        // and more than any head with no copy job for trigger i (score ≤ NO_JOB); a second
        // or partial copier is left out: attention is not necessity (at 2000 steps head 0.1
        // puts 0.65 of trigger 0's rows on q − 1, and ablating it costs +0.004)
        for (h, &s) in score.iter().enumerate() {
            if s <= NO_JOB {
                assert!(
                    d[h] < d[hi],
                    "trigger {i}: head {h} with no copy job Δ {} ≥ copy head {hi} Δ {}; scores \
                     {score:?}",
                    d[h],
                    d[hi]
                );
            }
        }
        assert!(
            h.top[&sinklab::heads::TriggerCopy(i).name()][0].head == top.head,
            "the top list agrees"
        );
        assert!(
            dir.join("heads")
                .join(format!(
                    "heads_repeat_{}.png",
                    sinklab::heads::TriggerCopy(i).name()
                ))
                .exists()
        );
    }
    assert!(
        (2..=3).contains(&found.len()),
        "distinct copy heads {found:?} of {:?}",
        tc.top
    );
}

/// The Shakespeare character chain (`chain = "shakespeare_chars"`) against an independent NumPy
/// computation from the same text: character order, π and the rows of the triggers and the
/// next tokens; the triggers are the paper's ' ', 'e', 't'; the data follow the copy rule.
#[test]
fn the_shakespeare_character_chain_matches_numpy_and_keeps_the_papers_triggers() {
    let text = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/embedded/shakespeare.txt");
    let (ok, out) = run_python("reference_bigram.py", &[text.to_str().unwrap(), "6"]);
    assert!(ok, "{out}");
    let r: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let (unigram, rows, chars) =
        sinklab::data::synthetic::char_chain(&std::fs::read_to_string(&text).unwrap());
    let want: Vec<String> = r["chars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let got: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    assert_eq!(got, want);
    assert_eq!(chars.len(), sinklab::config::SHAKESPEARE_CHARS);
    assert_eq!(&chars[..3], &[' ', 'e', 't'], "the paper's triggers");
    for (a, b) in unigram.iter().zip(r["unigram"].as_array().unwrap()) {
        assert!((a - b.as_f64().unwrap()).abs() < 1e-12, "{a} vs {b}");
    }
    let v = chars.len();
    for (i, want_row) in r["rows"].as_array().unwrap().iter().enumerate() {
        // rows are stored cumulative
        let cum = &rows[i * v..(i + 1) * v];
        let mut prev = 0.0;
        for (j, w) in want_row.as_array().unwrap().iter().enumerate() {
            let p = cum[j] - prev;
            prev = cum[j];
            assert!((p - w.as_f64().unwrap()).abs() < 1e-12, "row {i} col {j}");
        }
    }
    // a run on this chain: 88 characters + 2 specials, the copy rule holds after ' ' (id 2)
    let dir = tempfile::tempdir().unwrap();
    let exp = quickstart(
        dir.path(),
        "chars",
        &[
            "data.synthetic.chain=\"shakespeare_chars\"",
            "data.synthetic.sequences=256",
        ],
    );
    let data = Dataset::prepare(&exp.data, &mut |_| {}).unwrap();
    assert_eq!(data.vocab_size(), 90);
    assert_eq!(data.tokenizer.encode("␣ e t").unwrap(), vec![2, 3, 4]);
    let train = data.domains[0].train.to_vec();
    let copies = train
        .chunks_exact(65)
        .flat_map(|r| r.windows(3))
        .filter(|w| w[1] == 2)
        .inspect(|w| assert_eq!(w[2], w[0], "after ␣ (offset 1) the previous token"))
        .count();
    assert!(copies > 1000, "{copies}");
    // chain-only keys are refused with the chain
    let err = config::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.toml"),
        &[
            "data.synthetic.chain=\"shakespeare_chars\"".into(),
            "data.synthetic.vocab=100".into(),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("data.synthetic.vocab") && err.contains("not used"),
        "{err}"
    );
}

/// A shipped experiment shortened to `steps` (one evaluation and probe at the end) and trained
/// in `dir`; `extra` overrides on top. Returns the experiment and its run directory.
fn train_shortened(
    dir: &Path,
    file: &str,
    steps: u64,
    extra: &[&str],
) -> (config::Experiment, std::path::PathBuf) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let mut o: Vec<String> = vec![
        format!("run.out_dir={:?}", dir.join("runs").display().to_string()),
        format!(
            "data.cache_dir={:?}",
            dir.join("cache").display().to_string()
        ),
        format!("train.steps={steps}"),
        format!("train.eval_every={steps}"),
        format!("train.checkpoint_every={steps}"),
        format!("metrics.every={steps}"),
    ];
    o.extend(extra.iter().map(|x| x.to_string()));
    let exp = config::load(&path, &o).unwrap_or_else(|e| panic!("{e}"));
    let opts = TrainOptions {
        quiet: true,
        ..TrainOptions::default()
    };
    train::train(&exp, &opts, &mut |_| {}).unwrap();
    let run = exp.run_dir();
    (exp, run)
}

/// The best of `heads` heads' live `score` in `layer` at `step`.
fn best_head(run: &Path, score: &str, layer: usize, heads: usize, step: u64) -> f64 {
    (0..heads)
        .map(|h| {
            series(run, &format!("heads/{score}/layer{layer:02}_head{h:02}"))
                .into_iter()
                .find(|p| p.0 == step)
                .unwrap()
                .1
        })
        .fold(f64::MIN, f64::max)
}

/// experiments/induction.toml, shortened to 400 steps: the live head scores show layer-1
/// induction heads forming in a phase change (best head 0.04 at step 0, 0.82 at step 300 on the
/// shipped run) while layer 0 keeps ALiBi's recency prior (previous-token share ≈ 0.21), and
/// the loss on copied tokens falls far below the loss on fresh ones.
#[test]
fn the_induction_experiment_grows_induction_heads_in_its_live_scores() {
    let dir = tempfile::tempdir().unwrap();
    let (exp, run) = train_shortened(
        dir.path(),
        "experiments/induction.toml",
        400,
        &["data.synthetic.sequences=16384"],
    );
    assert_eq!((exp.metrics.heads.n, exp.model.n_layers), (15, 2));
    let best = |score: &str, layer: usize, step: u64| best_head(&run, score, layer, 4, step);
    let (i0, i1) = (best("induction", 1, 0), best("induction", 1, 400));
    assert!((0.0..0.15).contains(&i0), "induction score at init {i0}");
    assert!(
        (0.6..=1.0).contains(&i1),
        "induction score at step 400 {i1}"
    );
    let p1 = best("previous", 0, 400);
    assert!(
        (0.15..0.3).contains(&p1),
        "layer 0 keeps ALiBi's prior: {p1}"
    );
    let rep = series(&run, "repeat/loss_repeated");
    let fresh = series(&run, "repeat/loss_fresh");
    assert!(
        (4.0..4.7).contains(&rep[0].1),
        "repeated loss at init {:?}",
        rep[0]
    );
    let (r, f) = (rep.last().unwrap().1, fresh.last().unwrap().1);
    assert!(
        (0.0..0.8).contains(&r) && r < f - 2.5,
        "repeated {r} vs fresh {f}"
    );
}

/// experiments/induction_rope.toml, shortened to 1000 steps: both halves of the canonical
/// circuit form in one run — a sharp layer-0 previous-token head and layer-1 induction heads
/// (shipped runs, seeds 0 and 1: previous 0.06 → 0.82 / 0.84 and induction 0.03 → 0.91 / 0.95
/// between steps 0 and 1000, the phase change between steps 600 and 800).
#[test]
fn the_rope_induction_experiment_grows_a_previous_token_head_and_induction_heads() {
    let dir = tempfile::tempdir().unwrap();
    let (exp, run) = train_shortened(dir.path(), "experiments/induction_rope.toml", 1000, &[]);
    assert_eq!((exp.model.ctx, exp.model.n_layers), (64, 2));
    let best = |score: &str, layer: usize, step: u64| best_head(&run, score, layer, 4, step);
    let (p0, p1) = (best("previous", 0, 0), best("previous", 0, 1000));
    let (i0, i1) = (best("induction", 1, 0), best("induction", 1, 1000));
    assert!(
        (0.0..0.15).contains(&p0) && (0.0..0.15).contains(&i0),
        "at init: {p0} {i0}"
    );
    assert!(
        (0.6..=1.0).contains(&p1),
        "layer-0 previous-token head at step 1000: {p1}"
    );
    assert!(
        (0.8..=1.0).contains(&i1),
        "layer-1 induction head at step 1000: {i1}"
    );
    let rep = series(&run, "repeat/loss_repeated");
    assert!((0.0..0.4).contains(&rep.last().unwrap().1), "{rep:?}");
}

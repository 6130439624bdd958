//! The analysis suite (docs/reference.md §4, §7): dark-signal maths and attention geometry against the
//! NumPy reference (`scripts/reference_analysis.py`), metric helpers on hand-built arrays, the
//! identity filter leaving NLL unchanged, and `analyze`, `dark`, `stream-eval` and `generate`
//! end to end on trained checkpoints of the baseline, KV-bias, sink-token and sigmoid variants.

use crate::common::{self, quiet, read_json, sinklab_output};

use common::fixture::{floats, shape};
use serde_json::Value;
use sinklab::analysis::geometry::{
    channel_stats, find_bars, norms_by_position, qk_geometry, received_stats,
};
use sinklab::analysis::unembedding_and_embedding;
use sinklab::dark::Bands;
use sinklab::metrics::Array;
use sinklab::model::StreamFilter;
use sinklab::train;
use std::path::{Path, PathBuf};

fn golden() -> Value {
    common::golden("analysis_golden.json")
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn array(v: &Value) -> Array {
    Array::new(shape(v), floats(v).into_iter().map(|x| x as f32).collect())
}

#[test]
fn dark_signal_maths_matches_numpy() {
    let g = &golden()["dark"];
    let [d, n] = shape(&g["m"])[..] else { panic!() };
    let nb = g["bands"].as_u64().unwrap() as usize;
    let b = Bands::from_matrix(&floats(&g["m"]), d, n, nb);
    let sv: Vec<f64> = g["singular_values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    close(&b.singular_values, &sv, 1e-10, "singular values");
    let edges: Vec<usize> = g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(b.edges, edges);
    for k in 0..=nb {
        close(&b.phi(k), &floats(&g["phi"][k]), 1e-9, &format!("Φ_{k}"));
    }
    close(&b.omega(2), &floats(&g["omega2"]), 1e-9, "Ω_2");
    let h = floats(&g["h"]);
    for (i, row) in h.chunks_exact(d).enumerate() {
        let want: Vec<f64> = g["energy"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        close(&b.band_energy(row), &want, 1e-9, "band energy");
        close(
            &[b.dark_ratio(row)],
            &[g["dark_ratio"][i].as_f64().unwrap()],
            1e-9,
            "dark ratio",
        );
    }
    let w = floats(&g["w"]);
    let want: Vec<f64> = g["write_share"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    close(&b.write_share(&w, w.len() / d), &want, 1e-9, "write share");
    // Ψ_k with M as the unembedding side and M2 as the embedding side, every k.
    let b2 = Bands::from_matrix(&floats(&g["m2"]), d, n, nb);
    for k in 0..=nb {
        let psi = sinklab::dark::psi(&b, &b2, k);
        close(&psi, &floats(&g["psi"][k]), 1e-9, &format!("Ψ_{k}"));
    }
}

#[test]
fn attention_geometry_and_received_attention_match_numpy() {
    let g = &golden()["geometry"];
    let heads = qk_geometry(&array(&g["q"]), &array(&g["k"]));
    for (h, want) in heads.iter().zip(g["heads"].as_array().unwrap()) {
        let got = [h.cos_first, h.cos_rest, h.norm_first, h.norm_rest];
        let w: Vec<f64> = ["cos_first", "cos_rest", "norm_first", "norm_rest"]
            .iter()
            .map(|k| want[*k].as_f64().unwrap())
            .collect();
        close(&got, &w, 1e-5, "q·k geometry");
    }
    let a = array(&g["attn"]);
    let t = a.shape[0];
    let min_q = g["min_q"].as_u64().unwrap() as usize;
    let stats = received_stats(&a.data, t, min_q);
    for (k, (s, want)) in stats
        .iter()
        .zip(g["received"].as_array().unwrap())
        .enumerate()
    {
        match (s, want.as_array()) {
            (None, None) => {}
            (Some((m, sd)), Some(w)) => close(
                &[*m, *sd],
                &[w[0].as_f64().unwrap(), w[1].as_f64().unwrap()],
                1e-5,
                &format!("received attention of key {k}"),
            ),
            other => panic!("key {k}: {other:?}"),
        }
    }
}

#[test]
fn bars_channels_and_position_norms_by_hand() {
    // One head, T = 5: key 2 gets exactly 0.3 from every later query (a bar); key 1 gets a
    // high but varying share (0.7, 0.1: std 0.3, not a bar); key 0 (the first token) is never
    // reported.
    #[rustfmt::skip]
    let a = vec![
        1.0, 0.0, 0.0, 0.0, 0.0,
        0.5, 0.5, 0.0, 0.0, 0.0,
        0.2, 0.7, 0.1, 0.0, 0.0,
        0.6, 0.1, 0.3, 0.0, 0.0,
        0.6, 0.0, 0.3, 0.0, 0.1,
    ];
    let attn = Array::new(vec![1, 1, 5, 5], a);
    let bars = find_bars(&attn, 3, &[9, 8, 7, 6, 5], 0.2, 0.1, 2);
    assert_eq!(bars.len(), 1, "{bars:?}");
    assert_eq!((bars[0].layer, bars[0].position, bars[0].token), (3, 2, 7));
    assert!((bars[0].mean - 0.3).abs() < 1e-6 && bars[0].std < 1e-6);
    // with min_q = 3 key 2 has only 2 later queries: no bar
    assert!(find_bars(&attn, 3, &[9, 8, 7, 6, 5], 0.2, 0.1, 3).is_empty());
    // hidden (B=1, T=3, D=2): token 0 holds a massive value in channel 1
    let h = Array::new(vec![1, 3, 2], vec![0.001, 500.0, 0.001, 0.0, 0.0, 0.001]);
    let (massive, top) = channel_stats(&h, 1);
    assert_eq!(massive, vec![(1, 1)]);
    assert_eq!(top[0].0, 1);
    assert!((top[0].1 - 500.0).abs() < 1e-3 && (top[0].2 - 1.0).abs() < 1e-12);
    let n = norms_by_position(&Array::new(
        vec![2, 2, 2],
        vec![3.0, 4.0, 0.0, 1.0, 0.0, 0.0, 0.0, 3.0],
    ));
    close(&n, &[2.5, 2.0], 1e-12, "norms by position");
}

fn is_png(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

#[test]
fn identity_filter_leaves_the_loss_unchanged_and_removing_everything_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(dir.path(), "filter", &[]);
    let s = train::train(&exp, &quiet(), &mut |_| {}).unwrap();
    let run = sinklab::run::open_run(&s.run_dir, None, &mut |_| {}).unwrap();
    let (w_u, _, d, v) = unembedding_and_embedding(&run.model, false);
    let bands = Bands::from_matrix(&w_u, d, v, 8);
    let val = sinklab::data::validation_batch(&run.data, 8, 32, true).unwrap();
    let base = sinklab::eval::eval_loss(&run.model, &val, 4, &run.device);
    let filter = |m: Vec<f64>, layers: Vec<usize>| StreamFilter {
        layers,
        matrix: burn::tensor::Tensor::from_data(
            burn::tensor::TensorData::new(m.into_iter().map(|x| x as f32).collect(), [d, d]),
            &run.device,
        ),
    };
    let all = filter(bands.phi(8), (0..=2).collect());
    let same = sinklab::eval::eval_loss_filtered(&run.model, &val, 4, &run.device, Some(&all));
    assert!((same - base).abs() < 1e-4, "Φ(all bands): {same} vs {base}");
    let half = filter(bands.phi(4), vec![1]);
    let worse = sinklab::eval::eval_loss_filtered(&run.model, &val, 4, &run.device, Some(&half));
    assert!(
        (worse - base).abs() > 1e-3,
        "Φ_4 at layer 1 changes the loss: {worse} vs {base}"
    );
}

#[test]
fn evaluations_restarted_at_the_filter_layer_equal_the_whole_walk() {
    // `sinklab dark` walks validation and probe batches to the filter's block input once and
    // restarts every filtered evaluation there (eval::RestartAt): loss and sink report must
    // equal the whole walk's, at every block input, with and without a sink token.
    use sinklab::metrics::{HEADLINE_EPS, Proxy};
    for (name, overrides) in [
        ("restart", &[][..]),
        ("restart_sink", &["model.sink_tokens = 1"][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let exp = common::tiny_experiment(dir.path(), name, overrides);
        let s = train::train(&exp, &quiet(), &mut |_| {}).unwrap();
        let run = sinklab::run::open_run(&s.run_dir, None, &mut |_| {}).unwrap();
        let (w_u, _, d, v) = unembedding_and_embedding(&run.model, false);
        let bands = Bands::from_matrix(&w_u, d, v, 8);
        let val = sinklab::data::validation_batch(&run.data, 6, 32, true).unwrap();
        let probe = sinklab::data::validation_batch(&run.data, 5, 24, true).unwrap();
        let dev = &run.device;
        let eps = [HEADLINE_EPS];
        let proxy = Proxy::Weights;
        let spec = sinklab::eval::ProbeSpec::new(&probe, 4, proxy, dev);
        let unfiltered = sinklab::eval::summaries(&run.model, spec, None, &mut |_| {});
        for l in 0..=2 {
            let f = StreamFilter::from_column_map(&bands.phi(3), d, &[l], dev);
            let r =
                sinklab::eval::RestartAt::new(&run.model, (&val, &probe), 4, dev, l, &unfiltered);
            let whole = sinklab::eval::eval_loss_filtered(&run.model, &val, 4, dev, Some(&f));
            let restarted = r.nll(&run.model, Some(&f));
            assert!(
                (whole - restarted).abs() <= 1e-5 * whole.abs(),
                "{name} at block input {l}: {restarted} vs {whole}"
            );
            let base = sinklab::eval::eval_loss(&run.model, &val, 4, dev);
            assert!((whole - base).abs() > 1e-3, "Φ_3 at {l} changes the loss");
            let want =
                sinklab::eval::probe_report(&run.model, spec.filtered(Some(&f)), (&eps, 1), None);
            let got = r.probe_report(&run.model, proxy, Some(&f), (&eps, 1));
            let flat = |x: &Vec<Vec<f64>>| x.concat();
            close(
                &flat(&got.importance_first),
                &flat(&want.importance_first),
                1e-5,
                "α₁",
            );
            close(&got.entropy, &want.entropy, 1e-5, "entropy");
            assert_eq!(got.sink_rate, want.sink_rate, "{name} at {l}: Sink rates");
            let mass = |x: &[Option<f64>]| x.iter().map(|m| m.unwrap_or(-1.0)).collect::<Vec<_>>();
            close(
                &mass(&got.slot_mass),
                &mass(&want.slot_mass),
                1e-5,
                "slot mass",
            );
            assert_eq!(got.importance_first.len(), 2, "every layer reported");
        }
    }
}

/// `sinklab dark` on a tiny run: 4 bands, k ∈ {1, 3}, 4 validation and 4 probe sequences of 16
/// tokens, written to `out`, with `extra` arguments.
fn small_dark(run: &str, out: &str, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "dark",
        run,
        "--bands",
        "4",
        "--k",
        "1,3",
        "--sequences",
        "4",
        "--probe-sequences",
        "4",
        "--probe-len",
        "16",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    sinklab_output(None, &args)
}

/// Train a tiny variant and run every analysis command on its checkpoint.
fn run_all_commands(dir: &Path, name: &str, overrides: &[&str]) -> PathBuf {
    let exp = common::tiny_experiment(dir, name, overrides);
    let s = train::train(&exp, &quiet(), &mut |_| {}).unwrap();
    let run = s.run_dir.display().to_string();
    let out = dir.join(format!("{name}_analysis"));
    let o = out.display().to_string();
    let (code, text) = sinklab_output(
        None,
        &[
            "analyze",
            &run,
            "--sequences",
            "6",
            "--len",
            "16",
            "--out",
            &o,
            "--tensorboard",
            "--map",
            "1:2",
        ],
    );
    assert_eq!(code, 0, "{name} analyze: {text}");
    assert!(
        text.contains("natural:") && text.contains("repeated:"),
        "{text}"
    );
    // every F-Attn is printed with the floor of uniform causal attention (H_16/16 = 0.211)
    assert!(
        text.contains("(uniform causal attention: 0.211)"),
        "{name}: {text}"
    );
    let a = read_json(&out.join("analysis.json"));
    let floor = a["probe"]["f_attn_uniform"].as_f64().unwrap();
    assert!((floor - 0.21136).abs() < 1e-4, "{name}: {floor}");
    for kind in ["natural", "random", "repeated"] {
        let r = a["kinds"][kind]["sink_rate"]["0.3"].as_array().unwrap();
        assert_eq!(r.len(), 10, "{name} {kind}");
        assert!(
            r.iter()
                .all(|x| (0.0..=100.0).contains(&x.as_f64().unwrap()))
        );
    }
    assert_eq!(a["activations"].as_array().unwrap().len(), 2);
    assert_eq!(a["qk"][0].as_array().unwrap().len(), 4);
    // The outlier and compression section (issue 52): per layer, and Sink₁ of the layers (each
    // the mean of its heads) averages to the natural probe's Sink₁ (the mean over all heads).
    let v = &a["valley"];
    let per = |k: &str| -> Vec<f64> {
        let xs: Vec<f64> = v[k]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: valley.{k}"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(xs.len(), 2, "{name}: valley.{k}");
        xs
    };
    let sink1 = per("sink1");
    let overall = a["kinds"]["natural"]["sink_rate"]["0.3"][0]
        .as_f64()
        .unwrap();
    let mean = (sink1[0] + sink1[1]) / 2.0;
    assert!(
        (mean - overall).abs() < 1e-9,
        "{name}: {sink1:?} vs {overall}"
    );
    assert!(per("entropy_norm").iter().all(|e| (0.0..=1.0).contains(e)));
    assert!(per("entropy").iter().all(|e| *e > 0.0), "{name}: {v}");
    assert!(per("kurtosis").iter().all(|k| (0.9..1e6).contains(k)));
    assert!(per("attn_out_max_abs").iter().all(|m| *m > 0.0));
    assert!(
        per("secondary_heads")
            .iter()
            .all(|h| (0.0..=100.0).contains(h))
    );
    assert!(
        v["spearman"].is_null(),
        "{name}: ρ over 2 layers is undefined"
    );
    assert!(is_png(&out.join("valley.png")), "{name}");
    assert!(text.contains("lowest entropy at layer"), "{name}: {text}");
    for f in a["files"].as_array().unwrap() {
        let f = f.as_str().unwrap();
        if f.ends_with(".png") {
            assert!(is_png(&out.join(f)), "{name}: {f}");
        }
    }
    assert!(is_png(&out.join("attention_l01_h02.png")));
    assert!(is_png(&out.join("importance_first.png")));
    let (code, text) = small_dark(&run, &o, &["--layer", "1"]);
    assert_eq!(code, 0, "{name} dark: {text}");
    let dj = read_json(&out.join("dark.json"));
    let filters = dj["filters"].as_array().unwrap();
    // the identity check + 5 families × 2 values of k at one site
    assert_eq!(filters.len(), 1 + 5 * 2);
    let ident = filters[0]["delta_nll"].as_f64().unwrap();
    assert!(ident.abs() < 1e-4, "{name}: identity ΔNLL {ident}");
    for f in &filters[1..] {
        assert_eq!(f["layer"].as_u64(), Some(1), "{name}: {f}");
    }
    same_as_is_consistent(filters, name);
    assert_eq!(
        dj["unembedding"].as_str(),
        Some("W_U"),
        "the paper's plain W_U by default"
    );
    for slug in ["phi", "omega", "psi", "phi_e", "random_phi"] {
        assert!(
            is_png(&out.join(format!("dark_{slug}.png"))),
            "{name}: {slug}"
        );
    }
    assert_eq!(dj["band_energy"].as_array().unwrap().len(), 3);
    let (code, text) = sinklab_output(
        None,
        &[
            "stream-eval",
            &run,
            "--sinks",
            "2",
            "--window",
            "10",
            "--tokens",
            "70",
            "--out",
            &o,
            "--tensorboard",
        ],
    );
    assert_eq!(code, 0, "{name} stream-eval: {text}");
    let sj = read_json(&out.join("stream.json"));
    let rows = sj["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{name}: {sj}");
    for r in rows {
        assert!(r["ppl"].as_f64().unwrap().is_finite(), "{name}: {r}");
    }
    // One budget L = 2 + 10 for every policy, the recomputed window included; dense attention
    // runs over the whole text, past model.ctx = 32 (RoPE).
    assert_eq!(sj["budget"].as_u64(), Some(12));
    assert_eq!(rows[0]["name"].as_str(), Some("dense"), "{name}");
    assert_eq!(rows[0]["scored"].as_u64(), Some(69), "{name}");
    assert!(rows[0]["ppl_past_ctx"].as_f64().is_some(), "{name}");
    assert_eq!(rows[4]["window"].as_u64(), Some(12), "{name}");
    for r in &rows[1..] {
        assert_eq!(r["scored"].as_u64(), Some(69), "{name}: {r}");
        let kept = r["sinks"].as_u64().unwrap_or(0) + r["window"].as_u64().unwrap();
        assert_eq!(kept, 12, "{name}: {r}");
    }
    assert!(is_png(&out.join("stream_ppl.png")));
    // --kept chooses the evicting caches (StreamingLLM's 0/1/2/4 kept tokens) and
    // --no-recompute drops the re-computed window; the numbers of a policy do not depend on
    // which others run beside it.
    let (code, text) = sinklab_output(
        None,
        &[
            "stream-eval",
            &run,
            "--sinks",
            "2",
            "--window",
            "10",
            "--tokens",
            "70",
            "--out",
            &o,
            "--kept",
            "0,2,4,2",
            "--no-recompute",
            // the same report name as the run above: replace it
            "--force",
        ],
    );
    assert_eq!(code, 0, "{name} stream-eval --kept: {text}");
    let kj = read_json(&out.join("stream.json"));
    let krows = kj["rows"].as_array().unwrap();
    let names: Vec<&str> = krows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "dense",
            "window only (0+12)",
            "window + 2 sinks (2+10)",
            "window + 4 sinks (4+8)"
        ],
        "{name}"
    );
    for (a, b) in [(0, 0), (1, 1), (2, 3)] {
        let (x, y) = (
            krows[a]["ppl"].as_f64().unwrap(),
            rows[b]["ppl"].as_f64().unwrap(),
        );
        assert!((x - y).abs() <= 1e-6 * y, "{name}: {} {x} vs {y}", names[a]);
    }
    let (code, text) = sinklab_output(
        None,
        &[
            "stream-eval",
            &run,
            "--sinks",
            "2",
            "--window",
            "10",
            "--kept",
            "12",
        ],
    );
    assert!(
        code != 0 && text.contains("--kept 12") && text.contains("valid k: 0 to 11"),
        "{name}: {text}"
    );
    let (code, text) = sinklab_output(
        None,
        &[
            "generate", &run, "--prompt", "To be", "--tokens", "12", "--seed", "3",
        ],
    );
    assert!(
        code == 0 && text.starts_with("To be"),
        "{name} generate: {text}"
    );
    // TensorBoard got the analysis scalars and images.
    // event files sit in the run directory itself (TensorBoard lists the run by its name)
    let events = std::fs::read_dir(&s.run_dir)
        .unwrap()
        .filter(|e| {
            let e = e.as_ref().unwrap();
            e.file_name()
                .to_string_lossy()
                .starts_with("events.out.tfevents.")
        })
        .count();
    assert!(
        events >= 2,
        "{name}: the analysis writes its own event file"
    );
    s.run_dir
}

/// A filter marked `same_as` another family carries that family's result at the same k, bit
/// for bit, and the family it names was evaluated.
fn same_as_is_consistent(filters: &[serde_json::Value], name: &str) {
    for f in filters {
        if let Some(of) = f.get("same_as").and_then(|x| x.as_str()) {
            let twin = filters
                .iter()
                .find(|g| g["filter"] == of && g["k"] == f["k"] && g["layer"] == f["layer"])
                .unwrap_or_else(|| panic!("{name}: {f} names no evaluated filter"));
            assert!(twin.get("same_as").is_none(), "{name}: {twin}");
            assert_eq!(twin["nll"], f["nll"], "{name}: {f} vs {twin}");
            assert_eq!(twin["sink1"], f["sink1"], "{name}: {f} vs {twin}");
        }
    }
}

/// With a tied head W_E = W_U, so Φ_e_k is Φ_k exactly and is not evaluated twice; untied, the
/// embedding's bands differ and every family is evaluated.
#[test]
fn dark_evaluates_a_filter_equal_to_another_once() {
    let dir = tempfile::tempdir().unwrap();
    for (name, head, reused) in [("tied", "tied", true), ("untied", "untied", false)] {
        let exp = common::tiny_experiment(
            dir.path(),
            name,
            &[&format!("model.head=\"{head}\""), "train.steps=4"],
        );
        let s = train::train(&exp, &quiet(), &mut |_| {}).unwrap();
        let out = dir.path().join(format!("{name}_dark"));
        let (code, text) = small_dark(
            &s.run_dir.display().to_string(),
            &out.display().to_string(),
            &["--layer", "1"],
        );
        assert_eq!(code, 0, "{name}: {text}");
        let dj = read_json(&out.join("dark.json"));
        let filters = dj["filters"].as_array().unwrap();
        assert_eq!(filters.len(), 1 + 5 * 2, "{name}");
        same_as_is_consistent(filters, name);
        let phi_e: Vec<_> = filters.iter().filter(|f| f["filter"] == "Φ_e").collect();
        assert_eq!(phi_e.len(), 2, "{name}");
        for f in phi_e {
            assert_eq!(f.get("same_as").is_some(), reused, "{name}: {f}");
        }
        assert_eq!(
            text.contains("reused its evaluation"),
            reused,
            "{name}: {text}"
        );
    }
}

#[test]
fn analysis_commands_on_baseline_kv_bias_sink_token_and_sigmoid_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_all_commands(dir.path(), "base", &[]);
    // the non-default dark options: every block input at once, W_U with the final norm's gain
    let out = dir.path().join("base_dark_all");
    let (code, text) = small_dark(
        &run.display().to_string(),
        &out.display().to_string(),
        &["--layer", "all", "--w-u", "folded"],
    );
    assert_eq!(code, 0, "dark --layer all --w-u folded: {text}");
    let dj = read_json(&out.join("dark.json"));
    assert!(
        dj["unembedding"].as_str().unwrap().contains("folded"),
        "{}",
        dj["unembedding"]
    );
    let filters = dj["filters"].as_array().unwrap();
    assert_eq!(filters.len(), 1 + 5 * 2);
    assert!(
        filters[1..].iter().all(|f| f["layer"].is_null()),
        "one site: every block input at once"
    );
    assert!(filters[0]["delta_nll"].as_f64().unwrap().abs() < 1e-4);
    // --eps without the headline ε is refused before any work
    let (code, text) = sinklab_output(
        None,
        &["analyze", &run.display().to_string(), "--eps", "0.2,0.5"],
    );
    assert!(code != 0 && text.contains("lacks 0.3"), "{text}");
    run_all_commands(
        dir.path(),
        "kvbias",
        &["model.attention.slot={kind=\"kv_bias\"}"],
    );
    run_all_commands(dir.path(), "sinktok", &["model.sink_tokens=1"]);
    run_all_commands(
        dir.path(),
        "sigmoid",
        &["model.attention.normaliser={kind=\"sigmoid\", bias=\"-ln(T)\"}"],
    );
}

/// A run trained with a fixed token at position 2 (after BOS) is validated and probed as
/// trained: the validation loss is measured on sequences carrying the token (with its target
/// unscored) and also logged on the unchanged text, `eval` prints both, and `analyze` adds the
/// `as_trained` probe kind next to the natural one.
#[test]
fn fixed_token_runs_are_validated_and_probed_as_trained() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(
        dir.path(),
        "fixed",
        &["data.fixed_token={position=2, token=70}"],
    );
    let s = train::train(&exp, &quiet(), &mut |_| {}).unwrap();
    let with = common::series(&s.run_dir, "val/loss");
    let without = common::series(&s.run_dir, "val/loss_unchanged");
    assert_eq!(with.len(), without.len());
    assert_eq!(with.len(), 3, "val at steps 0, 4, 8");
    for ((s1, a), (s2, b)) in with.iter().zip(&without) {
        assert_eq!(s1, s2);
        assert!((a - b).abs() > 1e-4, "step {s1}: {a} vs {b}");
    }
    let run = s.run_dir.display().to_string();
    let (code, text) = sinklab_output(None, &["eval", &run]);
    assert!(
        code == 0 && text.contains("on the unchanged text"),
        "{text}"
    );
    let out = dir.path().join("fixed_analysis");
    let o = out.display().to_string();
    let (code, text) = sinklab_output(
        None,
        &[
            "analyze",
            &run,
            "--sequences",
            "4",
            "--len",
            "16",
            "--out",
            &o,
        ],
    );
    assert!(code == 0 && text.contains("as trained"), "{text}");
    let a = read_json(&out.join("analysis.json"));
    assert!(
        a["kinds"]["as_trained"]["sink_rate"]["0.3"].is_array(),
        "{a}"
    );
    // A plain run has no such kind.
    let plain = common::tiny_experiment(dir.path(), "plain", &[]);
    let s = train::train(&plain, &quiet(), &mut |_| {}).unwrap();
    assert!(common::series(&s.run_dir, "val/loss_unchanged").is_empty());
}

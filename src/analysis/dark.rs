//! `sinklab dark` (Cancedda 2024, docs/reference.md §7): SVD bands of W_U and W_E, band energy
//! of the residual stream (first token against the rest), write weights on the bands, and the
//! spectral filters Φ_k, Ω_k, Ψ_k, Φ_e,k and a random-basis control, each applied one block
//! input at a time, with ΔNLL and Sink₁. The band maths are pure ([`crate::dark`]).

use super::{Output, unembedding_and_embedding};
use crate::dark::{self, Bands};
use crate::eval::{ProbeSpec, RestartAt, eval_loss, hidden_inputs, summaries};
use crate::metrics::{HEADLINE_EPS, Proxy, SinkReport};
use crate::model::StreamFilter;
use crate::plot::{self, Heatmap, LinePlot, Scale, Series};
use crate::run::OpenRun;
use anyhow::{Result, bail};
use serde::Serialize;
use std::path::PathBuf;

/// Where `sinklab dark` applies its filters.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterLayers {
    /// One block input at a time, at each of these (0..=L; L = before the final norm): the
    /// paper's per-layer curves.
    Each(Vec<usize>),
    /// Every block input at once.
    All,
}

impl FilterLayers {
    /// The default: one layer at a time at up to five evenly spaced block inputs
    /// (0, L/4, L/2, 3L/4, L rounded; every input when L ≤ 4).
    pub fn spread(n_layers: usize) -> Self {
        let mut v: Vec<usize> = (0..=4).map(|i| (i * n_layers + 2) / 4).collect();
        v.dedup();
        FilterLayers::Each(v)
    }
}

/// The default k sweep for `n` bands: 1, 2, 3, 4, then every eighth of the bands, n − 1 and n.
pub fn default_ks(n: usize) -> Vec<usize> {
    let mut ks: Vec<usize> = (1..=4.min(n)).collect();
    ks.extend((1..=8).map(|j| (j * n + 4) / 8));
    ks.extend([n.saturating_sub(1), n]);
    ks.retain(|&k| (1..=n).contains(&k));
    ks.sort_unstable();
    ks.dedup();
    ks
}

/// Options of `sinklab dark`.
#[derive(Debug, Clone)]
pub struct DarkOptions {
    pub bands: usize,
    /// Where the filters go; None = [`FilterLayers::spread`].
    pub layers: Option<FilterLayers>,
    /// Values of k for the sweeps; empty = [`default_ks`].
    pub ks: Vec<usize>,
    /// Decompose `diag(g) W_U` (final norm gain folded in) instead of the paper's plain W_U.
    pub fold_gain: bool,
    /// Validation sequences for ΔNLL (default: train.eval_sequences).
    pub sequences: Option<usize>,
    /// Probe sequences for Sink₁ under each filter.
    pub probe_sequences: usize,
    pub probe_len: usize,
    pub dest: super::Destination,
    pub seed: u64,
}

/// One filter's effect.
#[derive(Debug, Clone, Serialize)]
pub struct FilterResult {
    /// `Φ` (W_U bands 1..k), `Ω` (1..k and the dark band), `Ψ` (I − joint tail of W_E and W_U
    /// from band k+1), `Φ_e` (W_E bands 1..k), `random Φ` (bands of a random basis), or the
    /// identity check.
    pub filter: String,
    /// Block input it was applied at; None = every block input at once.
    pub layer: Option<usize>,
    pub k: Option<usize>,
    pub nll: f64,
    pub delta_nll: f64,
    pub sink1: Option<f64>,
    /// Set when this filter, rounded to f32 as it is applied, is the same matrix as an earlier
    /// family's at the same site and k (tied embeddings: `Φ_e = Φ`, and `Ψ = Φ` to f64
    /// rounding): its NLL and Sink₁ are that family's, which the deterministic forward would
    /// reproduce bit for bit, so it is not evaluated again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_as: Option<String>,
}

/// The filter families swept over k, in print order.
pub const FAMILIES: [&str; 5] = ["Φ", "Ω", "Ψ", "Φ_e", "random Φ"];

/// What `sinklab dark` found (`dark.json`).
#[derive(Debug, Clone, Serialize)]
pub struct DarkReport {
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub bands: usize,
    pub d_model: usize,
    /// The block inputs filtered one at a time, or every one at once.
    pub filter_sites: FilterSites,
    /// `W_U` or `diag(g) W_U (final norm gain folded in)`.
    pub unembedding: String,
    pub validation: Validation,
    pub probe: ProbeSize,
    pub sink1_unfiltered: Option<f64>,
    pub singular_values: SingularValues,
    pub band_energy: Vec<BandEnergy>,
    pub write_shares: Vec<WriteShares>,
    /// The identity check first, then every (site, k, family).
    pub filters: Vec<FilterResult>,
    /// The values of k swept.
    pub ks: Vec<usize>,
    pub files: Vec<String>,
}

/// Where the filters went.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum FilterSites {
    Each(Vec<usize>),
    All(String),
}

#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    pub sequences: usize,
    pub len: usize,
    pub nll: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeSize {
    pub sequences: usize,
    pub len: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct SingularValues {
    pub unembedding: Vec<f64>,
    pub embedding: Vec<f64>,
}

/// W_U band energy of the residual stream at one block input, token 1 against the rest.
#[derive(Debug, Clone, Serialize)]
pub struct BandEnergy {
    pub layer: usize,
    pub band_energy_first: Vec<f64>,
    pub band_energy_rest: Vec<f64>,
    pub dark_ratio_first: f64,
    pub dark_ratio_rest: f64,
}

/// Share of each head's W_O rows and of the MLP's W_down on the W_U bands.
#[derive(Debug, Clone, Serialize)]
pub struct WriteShares {
    pub layer: usize,
    pub heads: Vec<Vec<f64>>,
    pub mlp: Option<Vec<f64>>,
}

/// Run `sinklab dark`: writes `dark.json` and the figures, returns the report. A [`plan`]
/// that makes every refusal, a [`compute`] without I/O, a [`render`] that writes.
pub fn dark(run: &OpenRun, o: &DarkOptions, log: &mut dyn FnMut(&str)) -> Result<DarkReport> {
    let plan = plan(run, o)?;
    let mut report = compute(run, o, &plan, log)?;
    render(run, plan, &mut report)?;
    Ok(report)
}

/// What `dark` will compute, every refusal made: the report's name claimed, the bands, the
/// filter sites and the ks checked against the model.
pub struct Plan {
    pub claim: super::Claim,
    pub n_bands: usize,
    pub selection: FilterLayers,
    /// (the site's block input, or None for all at once; the block inputs filtered there)
    pub sites: Vec<(Option<usize>, Vec<usize>)>,
    pub ks: Vec<usize>,
}

/// Every refusal of `dark` before any computation: a report of the same name, a number of
/// bands outside 2..=d_model, a block input past the last, a k past the bands.
pub fn plan(run: &OpenRun, o: &DarkOptions) -> Result<Plan> {
    let claim = o.dest.claim(run, "dark")?;
    let n_layers = run.exp.model.n_layers;
    let d = run.exp.model.d_model;
    let n_bands = o.bands;
    if !(2..=d).contains(&n_bands) {
        bail!("--bands {n_bands}: need 2 ≤ bands ≤ d_model = {d}");
    }
    let selection = o
        .layers
        .clone()
        .unwrap_or_else(|| FilterLayers::spread(n_layers));
    if let FilterLayers::Each(ls) = &selection
        && let Some(&bad) = ls.iter().find(|&&l| l > n_layers)
    {
        bail!(
            "--layer {bad}: valid block inputs are 0..={n_layers} ({n_layers} = before the final norm), `each` or `all`"
        );
    }
    let ks: Vec<usize> = if o.ks.is_empty() {
        default_ks(n_bands)
    } else {
        o.ks.clone()
    };
    if let Some(&bad) = ks.iter().find(|&&k| k > n_bands) {
        bail!("--k {bad} exceeds --bands {n_bands}");
    }
    let sites = match &selection {
        FilterLayers::Each(ls) => ls.iter().map(|&l| (Some(l), vec![l])).collect(),
        FilterLayers::All => vec![(None, (0..=n_layers).collect())],
    };
    Ok(Plan {
        claim,
        n_bands,
        selection,
        sites,
        ks,
    })
}

/// The bands, the band energy of the residual stream, the write shares and every filter's
/// ΔNLL and Sink₁: the report (its `files` empty until [`render`]), nothing written.
pub fn compute(
    run: &OpenRun,
    o: &DarkOptions,
    plan: &Plan,
    log: &mut dyn FnMut(&str),
) -> Result<DarkReport> {
    let exp = &run.exp;
    let model = &run.model;
    let n_layers = exp.model.n_layers;
    let (w_u, e_t, d, v) = unembedding_and_embedding(model, o.fold_gain);
    let n_bands = plan.n_bands;
    let (sites, ks) = (&plan.sites, &plan.ks);
    // A tied head (and no folded gain) makes W_U = Eᵀ bit for bit: one decomposition serves.
    let tied = e_t == w_u;
    log(if tied {
        "SVD of W_U (tied: W_E = W_U)"
    } else {
        "SVD of W_U and W_E"
    });
    let bu = Bands::from_matrix(&w_u, d, v, n_bands);
    let be = if tied {
        bu.clone()
    } else {
        Bands::from_matrix(&e_t, d, v, n_bands)
    };
    let rand_bands = Bands::random(d, n_bands, o.seed);
    // Band energy of the residual stream (every block input), first token vs the rest.
    let n_val = o.sequences.unwrap_or(exp.train.eval_sequences);
    let chunk = exp.train.micro_batch.max(1);
    // Probes and validation carry the training data's token changes (as trained).
    let sampler = crate::data::Sampler::new(&run.data, &exp.data, exp.model.ctx, exp.run.seed)?;
    let mut probe = crate::data::validation_batch(
        &run.data,
        o.probe_sequences,
        o.probe_len.min(exp.model.ctx),
        exp.data.bos,
    )?;
    sampler.apply_token_changes(&mut probe);
    let inputs = hidden_inputs(model, &probe, chunk, &run.device);
    let energy = band_energy(&bu, &inputs, n_bands);
    let writes = write_shares(model, &exp.model, &bu, d);
    // Filters: each family over k, at each selected block input (or at all at once).
    let mut val = crate::data::validation_batch(&run.data, n_val, exp.model.ctx, exp.data.bos)?;
    crate::data::ignore_first_targets(&mut val, exp.model.attention.mask.ignored_targets());
    sampler.apply_token_changes(&mut val);
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let eps = [HEADLINE_EPS];
    let unfiltered = summaries(
        model,
        ProbeSpec::new(&probe, chunk, proxy, &run.device),
        None,
        &mut |_| {},
    );
    let base_sink = SinkReport::from_summaries(&unfiltered, &eps, 1).sink1();
    let all_inputs: Vec<usize> = (0..=n_layers).collect();
    let total = sites.len() * ks.len() * FAMILIES.len() + 1;
    log(&format!(
        "{total} filtered evaluations ({} site(s) × {} k × {} families + the identity check), \
         each restarted at its block input",
        sites.len(),
        ks.len(),
        FAMILIES.len()
    ));
    // Validation and probe streams entering the lowest filtered block input, walked once per
    // site; each filter then walks only the blocks from there ([`RestartAt`]).
    let restart = |at: &[usize]| {
        let l = at.iter().copied().min().expect("a filter site");
        RestartAt::new(model, (&val, &probe), chunk, &run.device, l, &unfiltered)
    };
    // The unfiltered NLL from the first site's restart (the same computation as the whole
    // walk, without walking the blocks below the site a second time); the site reuses it.
    let mut first = sites.first().map(|(_, at)| restart(at));
    let base = match &first {
        Some(r) => r.nll(model, None),
        None => eval_loss(model, &val, chunk, &run.device),
    };
    let bar = crate::progress::Progress::new(total as u64, "dark filtered evaluations");
    let mut results = Vec::new();
    let eval = |r: &RestartAt, name: &str, layer, at: &[usize], k, m: &[f64]| {
        let f = StreamFilter::from_column_map(m, d, at, &run.device);
        let nll = r.nll(model, Some(&f));
        let s = r.probe_report(model, proxy, Some(&f), (&eps, 1)).sink1();
        bar.inc(1);
        FilterResult {
            filter: name.to_string(),
            layer,
            k,
            nll,
            delta_nll: nll - base,
            sink1: s,
            same_as: None,
        }
    };
    results.push(eval(
        &restart(&all_inputs),
        "identity (Φ, all bands)",
        None,
        &all_inputs,
        Some(n_bands),
        &bu.phi(n_bands),
    ));
    for (layer, at) in sites {
        let r = first.take().unwrap_or_else(|| restart(at));
        for &k in ks {
            // the filters of this k as applied (f32), with their family and result
            let mut applied: Vec<(Vec<f32>, &str, f64, Option<f64>)> = Vec::new();
            for family in FAMILIES {
                let m = match family {
                    "Φ" => bu.phi(k),
                    "Ω" => bu.omega(k),
                    "Ψ" => dark::psi(&bu, &be, k),
                    "Φ_e" => be.phi(k),
                    _ => rand_bands.phi(k),
                };
                let m32: Vec<f32> = m.iter().map(|&x| x as f32).collect();
                if let Some(&(_, of, nll, sink1)) = applied.iter().find(|a| a.0 == m32) {
                    bar.inc(1);
                    results.push(FilterResult {
                        filter: family.to_string(),
                        layer: *layer,
                        k: Some(k),
                        nll,
                        delta_nll: nll - base,
                        sink1,
                        same_as: Some(of.to_string()),
                    });
                    continue;
                }
                let res = eval(&r, family, *layer, at, Some(k), &m);
                applied.push((m32, family, res.nll, res.sink1));
                results.push(res);
            }
        }
    }
    bar.finish();
    let reused = results.iter().filter(|r| r.same_as.is_some()).count();
    if reused > 0 {
        let mut pairs: Vec<String> = results
            .iter()
            .filter_map(|r| Some(format!("{} = {}", r.filter, r.same_as.as_ref()?)))
            .collect();
        pairs.sort();
        pairs.dedup();
        log(&format!(
            "{reused} filters equal (in f32, as applied) to another family's at the same site \
             and k reused its evaluation: {}",
            pairs.join(", ")
        ));
    }
    Ok(DarkReport {
        run_dir: run.run_dir.clone(),
        checkpoint: run.checkpoint.clone(),
        step: run.state.step,
        bands: n_bands,
        d_model: d,
        filter_sites: match &plan.selection {
            FilterLayers::Each(ls) => FilterSites::Each(ls.clone()),
            FilterLayers::All => FilterSites::All("all".into()),
        },
        unembedding: if o.fold_gain {
            "diag(g) W_U (final norm gain folded in)".into()
        } else {
            "W_U".into()
        },
        validation: Validation {
            sequences: n_val,
            len: exp.model.ctx,
            nll: base,
        },
        probe: ProbeSize {
            sequences: o.probe_sequences,
            len: probe.len,
        },
        sink1_unfiltered: base_sink,
        singular_values: SingularValues {
            unembedding: bu.singular_values.clone(),
            embedding: be.singular_values.clone(),
        },
        band_energy: energy,
        write_shares: writes,
        filters: results,
        ks: ks.clone(),
        files: Vec::new(),
    })
}

/// The mean energy of the stream in each W_U band, and its dark ratio, at every block input:
/// token 1 against the others (`inputs[l]`: the stream entering block l, (B, T, d)).
fn band_energy(bu: &Bands, inputs: &[crate::metrics::Array], n_bands: usize) -> Vec<BandEnergy> {
    let mut energy = Vec::new();
    for (l, x) in inputs.iter().enumerate() {
        let [b, t, dd] = x.shape[..] else {
            unreachable!("hidden states are rank 3")
        };
        let mut first = vec![0.0; n_bands];
        let mut rest = vec![0.0; n_bands];
        let (mut dr_first, mut dr_rest) = (0.0, 0.0);
        let rows: Vec<f64> = x.data[..b * t * dd].iter().map(|&z| z as f64).collect();
        for (i, e) in bu.band_energies(&rows).into_iter().enumerate() {
            let ti = i % t;
            let dr = crate::dark::dark_ratio_of_share(e[n_bands - 1]);
            if ti == 0 {
                first.iter_mut().zip(&e).for_each(|(a, b)| *a += b);
                dr_first += dr;
            } else {
                rest.iter_mut().zip(&e).for_each(|(a, b)| *a += b);
                dr_rest += dr;
            }
        }
        first.iter_mut().for_each(|x| *x /= b as f64);
        rest.iter_mut()
            .for_each(|x| *x /= (b * (t - 1)).max(1) as f64);
        energy.push(BandEnergy {
            layer: l,
            band_energy_first: first,
            band_energy_rest: rest,
            dark_ratio_first: dr_first / b as f64,
            dark_ratio_rest: dr_rest / (b * (t - 1)).max(1) as f64,
        });
    }
    energy
}

/// The share of each head's and each MLP's write weights in each W_U band, layer by layer.
fn write_shares(
    model: &crate::model::Lm,
    cfg: &crate::config::ModelConfig,
    bu: &Bands,
    d: usize,
) -> Vec<WriteShares> {
    let host = crate::eval::host_f64;
    let dh = cfg.d_head();
    let mut writes = Vec::new();
    for (l, block) in model.blocks.iter().enumerate() {
        let heads: Vec<Vec<f64>> = (0..cfg.n_heads)
            .map(|h| match &block.attn.wo {
                Some(wo) => {
                    let w = host(wo.matrix()); // (d, d): rows h·d_h.. are head h's writes
                    bu.write_share(&w[h * dh * d..(h + 1) * dh * d], dh)
                }
                None => {
                    let mut w = vec![0.0; dh * d];
                    (0..dh).for_each(|i| w[i * d + h * dh + i] = 1.0);
                    bu.write_share(&w, dh)
                }
            })
            .collect();
        let mlp = block.mlp.as_ref().map(|m| {
            let w = host(m.w_down.matrix()); // (f, d)
            bu.write_share(&w, w.len() / d)
        });
        writes.push(WriteShares {
            layer: l,
            heads,
            mlp,
        });
    }
    writes
}

/// The band-energy heat maps, the ΔNLL-against-k plot of each family, the ΔNLL scalars (to
/// the run's TensorBoard when asked) and `dark.json`, whose `files` it fills.
pub fn render(run: &OpenRun, plan: Plan, report: &mut DarkReport) -> Result<()> {
    let n_bands = plan.n_bands;
    let mut sink = Output::new(plan.claim.clone(), run)?;
    let first: Vec<Vec<f64>> = report
        .band_energy
        .iter()
        .map(|e| e.band_energy_first.clone())
        .collect();
    let rest: Vec<Vec<f64>> = report
        .band_energy
        .iter()
        .map(|e| e.band_energy_rest.clone())
        .collect();
    for (name, rows, tag) in [
        ("band_energy_first.png", &first, "first token"),
        ("band_energy_rest.png", &rest, "other tokens"),
    ] {
        let png = plot::heatmap(&Heatmap {
            title: &format!(
                "W_U band energy of the residual stream, {tag} (band {n_bands} = dark)"
            ),
            x_label: "band (1 = largest singular values)",
            y_label: "block input (layer)",
            rows,
            x_ticks: Some(&(1..=n_bands).map(|j| j.to_string()).collect::<Vec<_>>()),
            y_ticks: None,
            range: Some((0.0, 1.0)),
            annotate: false,
            colours: crate::plot::Colours::Sequential,
        })?;
        sink.png(
            name,
            &format!("dark/{}", name.trim_end_matches(".png")),
            png,
        )?;
    }
    let site_name = |l: Option<usize>| match l {
        Some(l) => format!("block input {l}"),
        None => "every block input".to_string(),
    };
    for family in FAMILIES {
        let series: Vec<Series> = plan
            .sites
            .iter()
            .map(|(layer, _)| Series {
                name: site_name(*layer),
                points: report
                    .filters
                    .iter()
                    .filter(|r| r.filter == family && r.layer == *layer)
                    .map(|r| (r.k.expect("swept") as f64, r.delta_nll))
                    .collect(),
                err: None,
            })
            .collect();
        let slug = family
            .replace(' ', "_")
            .replace('Φ', "phi")
            .replace('Ω', "omega")
            .replace('Ψ', "psi");
        let png = plot::lines(&LinePlot {
            title: &format!("ΔNLL under {family}_k, one filter site at a time ({n_bands} bands)"),
            x_label: "k",
            y_label: "ΔNLL (nats/token)",
            series: &series,
            x_scale: Scale::Integer,
            y_scale: Scale::Linear,
            hlines: &[("unfiltered".to_string(), 0.0)],
            vlines: &[],
            markers: true,
        })?;
        sink.png(&format!("dark_{slug}.png"), &format!("dark/{slug}"), png)?;
    }
    sink.scalars(
        "dark",
        &report
            .filters
            .iter()
            .map(|r| {
                (
                    format!(
                        "delta_nll/{}{}{}",
                        r.filter.replace(' ', "_"),
                        r.layer.map_or(String::new(), |l| format!("/layer{l:02}")),
                        r.k.map_or(String::new(), |k| format!("/k{k:02}"))
                    ),
                    r.delta_nll,
                )
            })
            .collect::<Vec<_>>(),
    )?;
    report.files = sink.files.clone();
    sink.json("dark.json", &*report)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dark_defaults_filter_one_spread_layer_at_a_time() {
        assert_eq!(
            FilterLayers::spread(4),
            FilterLayers::Each(vec![0, 1, 2, 3, 4])
        );
        assert_eq!(
            FilterLayers::spread(30),
            FilterLayers::Each(vec![0, 8, 15, 23, 30])
        );
        assert_eq!(FilterLayers::spread(1), FilterLayers::Each(vec![0, 1]));
        assert_eq!(
            default_ks(20),
            vec![1, 2, 3, 4, 5, 8, 10, 13, 15, 18, 19, 20]
        );
        assert_eq!(default_ks(4), vec![1, 2, 3, 4]);
    }
}

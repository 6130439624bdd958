//! Axis ranges and their labelled ticks: 1, 2 or 5 × 10^k on linear axes, decades on log axes,
//! integers on integer axes. Labels carry the digits their step needs and no more (0.2, not
//! 0.200; never a rounding residue such as −1.4e−17).

/// How an axis maps values to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Values as they are.
    Linear,
    /// `log10` of the positive values (the others are skipped); ticks labelled with the
    /// values.
    Log,
    /// Values as they are, ticks at integers only and half a unit beyond the data: layers,
    /// heads, key positions. One value (a one-layer model) is one labelled category.
    Integer,
}

impl Scale {
    /// Whether `v` can be drawn on this axis.
    pub(super) fn valid(self, v: f64) -> bool {
        v.is_finite() && (self != Scale::Log || v > 0.0)
    }

    /// The plotted coordinate of `v` (`log10 v` on a log axis).
    pub(super) fn to_plot(self, v: f64) -> f64 {
        if self == Scale::Log { v.log10() } else { v }
    }
}

/// A drawn axis: its range in plotted coordinates and its ticks (plotted coordinate, label).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<(f64, String)>,
}

/// The smallest 1, 2 or 5 × 10^k that is at least `x` (> 0).
pub(super) fn nice_step(x: f64) -> f64 {
    let base = 10f64.powf(x.log10().floor());
    let m = x / base;
    let n = [1.0, 2.0, 5.0]
        .into_iter()
        .find(|&n| m <= n * (1.0 + 1e-9))
        .unwrap_or(10.0);
    n * base
}

/// `v` (a multiple of `step`) with the digits `step` needs: fixed point, or `2e6` / `1.5e-5`
/// for very large or very small steps.
fn label(v: f64, step: f64, scientific: bool) -> String {
    let step_exp = step.log10().floor();
    if v == 0.0 {
        return "0".into();
    }
    if scientific {
        let digits = (v.abs().log10().floor() - step_exp).max(0.0) as usize;
        format!("{v:.digits$e}")
    } else {
        let decimals = (-step_exp).max(0.0) as usize;
        format!("{v:.decimals$}")
    }
}

/// Ticks `k · step` inside `[lo, hi]` with their labels.
fn linear_ticks(lo: f64, hi: f64, step: f64) -> Vec<(f64, String)> {
    let (k0, k1) = (
        (lo / step - 1e-9).ceil() as i64,
        (hi / step + 1e-9).floor() as i64,
    );
    let scientific = lo.abs().max(hi.abs()) >= 1e6 || step < 1e-4;
    (k0..=k1)
        .map(|k| {
            let v = k as f64 * step;
            (v, label(v, step, scientific))
        })
        .collect()
}

/// The axis of `values` (plotted coordinates, finite) with at most about `max_ticks` ticks.
/// `pad` leaves 5% of the span beyond the data on a linear axis (a colour bar has none); a
/// single value gets a range around it.
pub(super) fn axis(scale: Scale, values: &[f64], max_ticks: usize, pad: bool) -> Axis {
    let max_ticks = max_ticks.max(2);
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    match scale {
        Scale::Integer => {
            let (lo, hi) = (lo.round() - 0.5, hi.round() + 0.5);
            let step = nice_step(((hi - lo) / max_ticks as f64).max(1.0));
            Axis {
                lo,
                hi,
                ticks: linear_ticks(lo, hi, step),
            }
        }
        Scale::Linear => {
            let (lo, hi) = if hi > lo {
                let p = if pad { 0.05 * (hi - lo) } else { 0.0 };
                (lo - p, hi + p)
            } else {
                let p = if lo != 0.0 { 0.5 * lo.abs() } else { 1.0 };
                (lo - p, hi + p)
            };
            let step = nice_step((hi - lo) / max_ticks as f64);
            Axis {
                lo,
                hi,
                ticks: linear_ticks(lo, hi, step),
            }
        }
        Scale::Log => {
            let (lo, hi) = if hi > lo {
                (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
            } else {
                (lo - 0.5, hi + 0.5)
            };
            Axis {
                lo,
                hi,
                ticks: log_ticks(lo, hi, max_ticks),
            }
        }
    }
}

/// Ticks of a log axis over `[lo, hi]` (log10 of the values): 1, 2 and 5 × 10^d over at most
/// 2.5 decades, decades (every k-th when they are many) beyond; linear ticks of the values
/// when the range holds fewer than two of those.
fn log_ticks(lo: f64, hi: f64, max_ticks: usize) -> Vec<(f64, String)> {
    let mantissas: &[u32] = if hi - lo <= 2.5 { &[1, 2, 5] } else { &[1] };
    let (d0, d1) = (lo.floor() as i32, hi.ceil() as i32);
    let decades = (d1 - d0 + 1) as usize;
    let every = decades.div_ceil(max_ticks).max(1) as i32;
    let mut ticks = Vec::new();
    for d in (d0..=d1).filter(|d| d.rem_euclid(every) == 0 || mantissas.len() > 1) {
        for &m in mantissas {
            let v = f64::from(m) * 10f64.powi(d);
            let t = v.log10();
            if (lo..=hi).contains(&t) {
                let text = if !(-3..5).contains(&d) {
                    format!("{m}e{d}")
                } else {
                    let decimals = (-d).max(0) as usize;
                    format!("{v:.decimals$}")
                };
                ticks.push((t, text));
            }
        }
    }
    if ticks.len() >= 2 {
        return ticks;
    }
    // Less than a factor of 2.5: linear ticks of the values themselves.
    let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
    let step = nice_step((b - a) / max_ticks as f64);
    linear_ticks(a, b, step)
        .into_iter()
        .filter(|(v, _)| *v > 0.0)
        .map(|(v, s)| (v.log10(), s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(a: &Axis) -> Vec<&str> {
        a.ticks.iter().map(|(_, s)| s.as_str()).collect()
    }

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        for (x, want) in [
            (0.13, 0.2),
            (3.0, 5.0),
            (7.0, 10.0),
            (1.0, 1.0),
            (0.0004, 0.0005),
            (250.0, 500.0),
        ] {
            assert!((nice_step(x) - want).abs() < 1e-12 * want, "{x}");
        }
    }

    #[test]
    fn linear_ticks_carry_the_digits_of_their_step_and_an_exact_zero() {
        // The qk_cos case: a tick near zero was labelled −1.4e−17.
        let a = axis(Scale::Linear, &[-0.0953, 0.3097], 10, true);
        assert!(a.lo < -0.0953 && a.hi > 0.3097);
        assert_eq!(
            labels(&a),
            [
                "-0.10", "-0.05", "0", "0.05", "0.10", "0.15", "0.20", "0.25", "0.30"
            ]
        );
        for (t, s) in &a.ticks {
            assert!((s.parse::<f64>().unwrap() - t).abs() < 1e-12, "{s} vs {t}");
        }
        let c = axis(Scale::Linear, &[0.0, 1.0], 5, false);
        assert_eq!((c.lo, c.hi), (0.0, 1.0));
        assert_eq!(labels(&c), ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let big = axis(Scale::Linear, &[0.0, 4.0e6], 4, false);
        assert_eq!(labels(&big), ["0", "1e6", "2e6", "3e6", "4e6"]);
    }

    #[test]
    fn one_value_gets_a_range_around_it() {
        let a = axis(Scale::Linear, &[0.31], 6, true);
        assert!(a.lo < 0.31 && a.hi > 0.31 && a.hi - a.lo > 0.2, "{a:?}");
        assert!(a.ticks.len() >= 3);
        let z = axis(Scale::Linear, &[0.0], 6, true);
        assert_eq!((z.lo, z.hi), (-1.0, 1.0));
    }

    #[test]
    fn integer_axes_label_integers_only_with_half_a_unit_beyond() {
        // One layer: one category, labelled 0, not −0.5 … 0.5.
        let one = axis(Scale::Integer, &[0.0], 10, true);
        assert_eq!((one.lo, one.hi), (-0.5, 0.5));
        assert_eq!(one.ticks, vec![(0.0, "0".to_string())]);
        let four = axis(Scale::Integer, &[0.0, 3.0], 10, true);
        assert_eq!(labels(&four), ["0", "1", "2", "3"]);
        let thirty = axis(Scale::Integer, &[0.0, 29.0], 10, true);
        assert_eq!(labels(&thirty), ["0", "5", "10", "15", "20", "25"]);
    }

    #[test]
    fn log_ticks_are_round_values() {
        // activations.png of a one-layer model: magnitudes 1.6 … 70.
        let a = axis(Scale::Log, &[1.6f64.log10(), 70f64.log10()], 8, true);
        assert_eq!(labels(&a), ["2", "5", "10", "20", "50"]);
        for (t, s) in &a.ticks {
            assert!((10f64.powf(*t) / s.parse::<f64>().unwrap() - 1.0).abs() < 1e-9);
        }
        let wide = axis(Scale::Log, &[-3.0, 6.0], 5, true);
        assert_eq!(labels(&wide), ["0.001", "1", "1000", "1e6"]);
        // Within a factor of 2.5 there are no two decades or 1-2-5 values: linear ticks.
        let narrow = axis(Scale::Log, &[1.1f64.log10(), 1.3f64.log10()], 5, true);
        assert!(narrow.ticks.len() >= 2, "{narrow:?}");
        assert!(labels(&narrow).iter().all(|s| s.starts_with("1.")));
    }
}

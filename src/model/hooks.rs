//! Named hook points of the one forward ([`super::Lm::walk`]): every use that looks inside the
//! model or changes it — the probes of the sink metrics, dark's residual filters, the head
//! scores, ablations and activation patching — is a [`Hooks`] value handed to the same walk.
//! The names follow TransformerLens (`resid_pre`, `pattern`, `z`, …) so that its recipes read
//! across:
//!
//! ```text
//! resid_pre      (B, S, d)        block input (layer L: the input of the final norm)
//!   q            (B, H, Q, d_h)   queries after W_Q and positional rotation
//!   k, v         (B, KV, S, d_h)  keys after rotation, values: one per key/value group
//!   pattern      (B, H, Q, C)     the normaliser's weights, slot columns first (C = slots + S)
//!   gate         (B, H, Q, 1|d_h) output-gate values (headwise | elementwise), gated models
//!   z            (B, H, Q, d_h)   each head's mixed value, the input of W_O (after V bias and gate)
//! attn_out       (B, Q, d)        the attention sub-block's output (after W_O, before gains)
//! resid_mid      (B, S, d)        after the attention residual (pre- and post-norm blocks)
//! mlp_out        (B, S, d)        the MLP's output (before gains)
//! resid_post     (B, S, d)        block output
//! ```
//!
//! S counts the model's sink tokens (`Frame::sink_tokens` of them first) and the real tokens;
//! Q = S except when decoding with a cache (the new rows, `Frame::q_start` on). A hook that
//! wants nothing costs one call per site; with no hooks at all ([`None`]) the forward runs the
//! exact operations of training (no copies, no extra kernels), and the fused attention kernel
//! stays in use unless a hook wants `pattern`.

use burn::tensor::{Bool, Tensor};
use std::collections::BTreeMap;
use std::fmt;

/// A hook point on the residual stream, shape (B, S, d) (`attn_out`: (B, Q, d)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StreamSite {
    ResidPre,
    AttnOut,
    ResidMid,
    MlpOut,
    ResidPost,
}

/// A hook point inside attention, one slice per head (or per key/value group for `k`, `v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HeadSite {
    Q,
    K,
    V,
    Pattern,
    Gate,
    Z,
}

/// Any hook point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    Stream(StreamSite),
    Head(HeadSite),
}

impl Site {
    /// Every site, in the order of the forward.
    pub const ALL: [Site; 11] = [
        Site::Stream(StreamSite::ResidPre),
        Site::Head(HeadSite::Q),
        Site::Head(HeadSite::K),
        Site::Head(HeadSite::V),
        Site::Head(HeadSite::Pattern),
        Site::Head(HeadSite::Gate),
        Site::Head(HeadSite::Z),
        Site::Stream(StreamSite::AttnOut),
        Site::Stream(StreamSite::ResidMid),
        Site::Stream(StreamSite::MlpOut),
        Site::Stream(StreamSite::ResidPost),
    ];

    /// The site's name (TransformerLens's, without `hook_`).
    pub fn name(self) -> &'static str {
        match self {
            Site::Stream(s) => match s {
                StreamSite::ResidPre => "resid_pre",
                StreamSite::AttnOut => "attn_out",
                StreamSite::ResidMid => "resid_mid",
                StreamSite::MlpOut => "mlp_out",
                StreamSite::ResidPost => "resid_post",
            },
            Site::Head(s) => match s {
                HeadSite::Q => "q",
                HeadSite::K => "k",
                HeadSite::V => "v",
                HeadSite::Pattern => "pattern",
                HeadSite::Gate => "gate",
                HeadSite::Z => "z",
            },
        }
    }

    /// `k` and `v` hold one slice per key/value group, the others one per query head.
    pub fn per_kv_group(self) -> bool {
        matches!(self, Site::Head(HeadSite::K | HeadSite::V))
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Site {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        Site::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = Site::ALL.iter().map(|x| x.name()).collect();
                anyhow::anyhow!(
                    "unknown hook site `{s}`: valid sites are {}",
                    valid.join(", ")
                )
            })
    }
}

/// A site of one layer: `blocks.3.z` (layer L's `resid_pre` is the final norm's input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HookPoint {
    pub layer: usize,
    pub site: Site,
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "blocks.{}.{}", self.layer, self.site)
    }
}

/// Where a hooked tensor's rows sit in the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The model's sink tokens at the front of the sequence axis.
    pub sink_tokens: usize,
    /// First query row in sequence coordinates (0 except when decoding with a cache).
    pub q_start: usize,
    /// Slot columns at the front of `pattern` (sink logit, KV/K bias, memory keys); 0 elsewhere.
    pub slot_cols: usize,
}

/// What a forward does at its hook points. `wants` is asked first, so a hook that only
/// records one site leaves every other site untouched and uncopied.
pub trait Hooks {
    fn wants(&self, at: HookPoint) -> bool;
    /// Whether the hooks may change the value at `at` (replace or add), not only record it
    /// (default: whenever they want it). A forward whose hooks only record the attention
    /// pattern still runs the fused attention kernel for its output, so recording changes
    /// nothing.
    fn changes(&self, at: HookPoint) -> bool {
        self.wants(at)
    }
    /// Record, replace or add at a residual-stream site; returns what flows on.
    fn stream(&mut self, layer: usize, site: StreamSite, x: Tensor<3>, frame: Frame) -> Tensor<3>;
    /// Record, replace or add at a per-head site; returns what flows on.
    fn heads(&mut self, layer: usize, site: HeadSite, x: Tensor<4>, frame: Frame) -> Tensor<4>;
}

/// Hooks applied one after the other at every site (a filter, then a recorder, …).
pub struct Chain<'a>(pub Vec<&'a mut dyn Hooks>);

impl Hooks for Chain<'_> {
    fn wants(&self, at: HookPoint) -> bool {
        self.0.iter().any(|h| h.wants(at))
    }
    fn changes(&self, at: HookPoint) -> bool {
        self.0.iter().any(|h| h.changes(at))
    }
    fn stream(&mut self, l: usize, s: StreamSite, mut x: Tensor<3>, f: Frame) -> Tensor<3> {
        let at = HookPoint {
            layer: l,
            site: Site::Stream(s),
        };
        for h in self.0.iter_mut().filter(|h| h.wants(at)) {
            x = h.stream(l, s, x, f);
        }
        x
    }
    fn heads(&mut self, l: usize, s: HeadSite, mut x: Tensor<4>, f: Frame) -> Tensor<4> {
        let at = HookPoint {
            layer: l,
            site: Site::Head(s),
        };
        for h in self.0.iter_mut().filter(|h| h.wants(at)) {
            x = h.heads(l, s, x, f);
        }
        x
    }
}

/// The hooks of one layer as the block and attention see them.
pub(crate) struct Tap<'a> {
    pub layer: usize,
    pub hooks: &'a mut dyn Hooks,
}

/// `x` through the hooks at a residual-stream site of `tap`'s layer (x itself without hooks).
pub(crate) fn tap_stream(
    tap: &mut Option<&mut Tap<'_>>,
    site: StreamSite,
    x: Tensor<3>,
    frame: Frame,
) -> Tensor<3> {
    match tap {
        Some(t) if t.hooks.wants(point(t.layer, Site::Stream(site))) => {
            t.hooks.stream(t.layer, site, x, frame)
        }
        _ => x,
    }
}

/// `x` through the hooks at a per-head site of `tap`'s layer (x itself without hooks).
pub(crate) fn tap_heads(
    tap: &mut Option<&mut Tap<'_>>,
    site: HeadSite,
    x: Tensor<4>,
    frame: Frame,
) -> Tensor<4> {
    match tap {
        Some(t) if t.hooks.wants(point(t.layer, Site::Head(site))) => {
            t.hooks.heads(t.layer, site, x, frame)
        }
        _ => x,
    }
}

/// Whether `tap` wants a per-head site (attention keeps the weights only when `pattern` is).
pub(crate) fn tap_wants(tap: &Option<&mut Tap<'_>>, site: HeadSite) -> bool {
    tap.as_ref()
        .is_some_and(|t| t.hooks.wants(point(t.layer, Site::Head(site))))
}

/// Whether `tap` may change a per-head site (not only record it).
pub(crate) fn tap_changes(tap: &Option<&mut Tap<'_>>, site: HeadSite) -> bool {
    tap.as_ref()
        .is_some_and(|t| t.hooks.changes(point(t.layer, Site::Head(site))))
}

fn point(layer: usize, site: Site) -> HookPoint {
    HookPoint { layer, site }
}

/// One change at a site: `x ← value` where `mask` is true (everywhere without a mask), or
/// `x ← x + value`. Values and masks broadcast to the site's shape (dimensions of size 1).
pub enum Edit<const D: usize> {
    Replace {
        value: Tensor<D>,
        mask: Option<Box<Tensor<D, Bool>>>,
    },
    Add(Tensor<D>),
}

impl<const D: usize> Edit<D> {
    fn apply(&self, x: Tensor<D>) -> Tensor<D> {
        let shape = x.dims();
        match self {
            Edit::Replace { value, mask: None } => value.clone().expand(shape),
            Edit::Replace {
                value,
                mask: Some(m),
            } => x.mask_where(
                m.as_ref().clone().expand(shape),
                value.clone().expand(shape),
            ),
            Edit::Add(v) => x + v.clone(),
        }
    }
}

/// The general-purpose hooks: edits (replace / add) at chosen points, applied in the order
/// given, and records of chosen points (the value that flows on, after this set's edits).
#[derive(Default)]
pub struct HookSet {
    stream_edits: BTreeMap<(usize, StreamSite), Vec<Edit<3>>>,
    head_edits: BTreeMap<(usize, HeadSite), Vec<Edit<4>>>,
    record: Vec<HookPoint>,
    /// Recorded residual-stream values by point.
    pub streams: BTreeMap<(usize, StreamSite), Tensor<3>>,
    /// Recorded per-head values by point.
    pub heads: BTreeMap<(usize, HeadSite), Tensor<4>>,
}

impl HookSet {
    pub fn new() -> Self {
        Self::default()
    }
    /// Record `site` of `layer`.
    pub fn record(mut self, layer: usize, site: Site) -> Self {
        self.record.push(point(layer, site));
        self
    }
    pub fn edit_stream(mut self, layer: usize, site: StreamSite, e: Edit<3>) -> Self {
        self.stream_edits.entry((layer, site)).or_default().push(e);
        self
    }
    pub fn edit_heads(mut self, layer: usize, site: HeadSite, e: Edit<4>) -> Self {
        self.head_edits.entry((layer, site)).or_default().push(e);
        self
    }
}

impl Hooks for HookSet {
    fn wants(&self, at: HookPoint) -> bool {
        self.record.contains(&at) || self.changes(at)
    }
    fn changes(&self, at: HookPoint) -> bool {
        match at.site {
            Site::Stream(s) => self.stream_edits.contains_key(&(at.layer, s)),
            Site::Head(s) => self.head_edits.contains_key(&(at.layer, s)),
        }
    }
    fn stream(&mut self, l: usize, s: StreamSite, mut x: Tensor<3>, _: Frame) -> Tensor<3> {
        for e in self.stream_edits.get(&(l, s)).into_iter().flatten() {
            x = e.apply(x);
        }
        if self.record.contains(&point(l, Site::Stream(s))) {
            self.streams.insert((l, s), x.clone());
        }
        x
    }
    fn heads(&mut self, l: usize, s: HeadSite, mut x: Tensor<4>, _: Frame) -> Tensor<4> {
        for e in self.head_edits.get(&(l, s)).into_iter().flatten() {
            x = e.apply(x);
        }
        if self.record.contains(&point(l, Site::Head(s))) {
            self.heads.insert((l, s), x.clone());
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_names_round_trip_and_unknown_names_list_the_valid_ones() {
        for s in Site::ALL {
            assert_eq!(s.name().parse::<Site>().unwrap(), s);
        }
        let e = "hook_z".parse::<Site>().unwrap_err().to_string();
        assert!(e.contains("resid_pre") && e.contains("pattern"), "{e}");
        let p = HookPoint {
            layer: 3,
            site: Site::Head(HeadSite::Z),
        };
        assert_eq!(p.to_string(), "blocks.3.z");
    }
}

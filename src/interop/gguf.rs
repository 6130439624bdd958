//! Reading GGUF files (ggml's model format, versions 2 and 3): the header, the metadata
//! key/values, the tensor table, and dequantisation of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K
//! and Q6_K tensors to f32. docs/gguf.md gives the byte layouts and the formulas, which are
//! computed here in f32 in the order written there (no fused multiply-add), so the values equal
//! ggml's reference dequantisation bit for bit.
//!
//! Layout: `"GGUF"`, u32 version, u64 tensor count, u64 key/value count, the key/values, the
//! tensor infos (name, dims innermost first, type, offset), zero padding to the alignment
//! (`general.alignment`, default 32), then the tensor data. A tensor with dims `ne` is the
//! row-major array of shape `reversed(ne)`.

use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// Any integer type as u64 (llama.cpp writes UINT32 where the spec says "by convention
    /// uint64"), None for negatives and non-integers.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(x) => Some(x as u64),
            Value::U16(x) => Some(x as u64),
            Value::U32(x) => Some(x as u64),
            Value::U64(x) => Some(x),
            Value::I8(x) => u64::try_from(x).ok(),
            Value::I16(x) => u64::try_from(x).ok(),
            Value::I32(x) => u64::try_from(x).ok(),
            Value::I64(x) => u64::try_from(x).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(x) => Some(x as f64),
            Value::F64(x) => Some(x),
            _ => self.as_u64().map(|x| x as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// ggml tensor types sinklab dequantises (others are named in errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    Q4K,
    Q6K,
    BF16,
}

impl GgmlType {
    fn from_id(id: u32) -> std::result::Result<Self, String> {
        Ok(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4K,
            14 => GgmlType::Q6K,
            30 => GgmlType::BF16,
            other => {
                let name = match other {
                    6 => "Q5_0",
                    7 => "Q5_1",
                    9 => "Q8_1",
                    10 => "Q2_K",
                    11 => "Q3_K",
                    13 => "Q5_K",
                    15 => "Q8_K",
                    16..=23 => "an IQ quantisation",
                    24 => "I8",
                    25 => "I16",
                    26 => "I32",
                    27 => "I64",
                    28 => "F64",
                    29 => "IQ1_M",
                    _ => "an unknown type",
                };
                return Err(format!("{name} (ggml type {other})"));
            }
        })
    }
    /// (elements per block, bytes per block).
    fn block(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q6K => (256, 210),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::BF16 => "BF16",
        }
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// Dims innermost first (ne[0] is the row length).
    pub ne: Vec<u64>,
    pub kind: std::result::Result<GgmlType, String>,
    /// Offset from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// The row-major shape, `reversed(ne)`.
    pub fn shape(&self) -> Vec<usize> {
        self.ne.iter().rev().map(|&x| x as usize).collect()
    }
    pub fn n_elements(&self) -> usize {
        self.ne.iter().product::<u64>() as usize
    }
}

/// An opened GGUF file: metadata, tensor table and the memory-mapped bytes.
pub struct Gguf {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: BTreeMap<String, TensorInfo>,
    pub data_offset: usize,
    map: memmap2::Mmap,
}

/// A little-endian cursor over the header.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| format!("truncated at byte {} (wanted {n} more)", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let n = self.u64()? as usize;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| format!("string at byte {} is not UTF-8", self.at - n))
    }
    fn value(&mut self, ty: u32, depth: usize) -> std::result::Result<Value, String> {
        Ok(match ty {
            0 => Value::U8(self.u8()?),
            1 => Value::I8(self.u8()? as i8),
            2 => Value::U16(self.u16()?),
            3 => Value::I16(self.u16()? as i16),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(self.u32()? as i32),
            6 => Value::F32(f32::from_bits(self.u32()?)),
            7 => match self.u8()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("bool value {b} (expected 0 or 1)")),
            },
            8 => Value::Str(self.string()?),
            9 => {
                if depth > 8 {
                    return Err("arrays nested more than 8 deep".into());
                }
                let elem = self.u32()?;
                let n = self.u64()? as usize;
                if n > self.b.len() {
                    return Err(format!("array of {n} elements is longer than the file"));
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(elem, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_bits(self.u64()?)),
            other => return Err(format!("unknown metadata value type {other}")),
        })
    }
}

impl Gguf {
    /// Open and parse the header of a GGUF file (the tensor data stays memory-mapped).
    pub fn open(path: &Path) -> Result<Self> {
        let file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: the file is opened read-only and only read through the map; sinklab does not
        // write to it while the map lives.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("memory-mapping {}", path.display()))?;
        let err = |e: String| anyhow!("{}: not a valid GGUF file: {e}", path.display());
        let mut c = Cursor { b: &map, at: 0 };
        if c.take(4).map_err(err)? != b"GGUF" {
            bail!(
                "{}: not a GGUF file (the first bytes are not \"GGUF\")",
                path.display()
            );
        }
        let version = c.u32().map_err(err)?;
        if !(2..=3).contains(&version) {
            bail!(
                "{}: GGUF version {version} is not supported (versions 2 and 3 are)",
                path.display()
            );
        }
        let n_tensors = c.u64().map_err(err)? as usize;
        let n_kv = c.u64().map_err(err)? as usize;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string().map_err(err)?;
            let ty = c.u32().map_err(err)?;
            let v = c
                .value(ty, 0)
                .map_err(|e| err(format!("metadata `{key}`: {e}")))?;
            metadata.insert(key, v);
        }
        let mut tensors = BTreeMap::new();
        for _ in 0..n_tensors {
            let name = c.string().map_err(err)?;
            let n_dims = c.u32().map_err(err)? as usize;
            if n_dims == 0 || n_dims > 4 {
                return Err(err(format!("tensor `{name}` has {n_dims} dims")));
            }
            let ne = (0..n_dims)
                .map(|_| c.u64())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(err)?;
            let kind = GgmlType::from_id(c.u32().map_err(err)?);
            let offset = c.u64().map_err(err)?;
            tensors.insert(
                name.clone(),
                TensorInfo {
                    name,
                    ne,
                    kind,
                    offset,
                },
            );
        }
        let alignment =
            match metadata.get("general.alignment") {
                None => 32,
                Some(v) => v.as_u64().filter(|&a| a > 0 && a % 8 == 0).ok_or_else(|| {
                    err(format!("general.alignment = {v:?} is not a multiple of 8"))
                })? as usize,
            };
        let data_offset = c.at.div_ceil(alignment) * alignment;
        let g = Self {
            path: path.to_path_buf(),
            version,
            metadata,
            tensors,
            data_offset,
            map,
        };
        for t in g.tensors.values() {
            if let Ok(kind) = t.kind {
                let (bs, bytes) = kind.block();
                let n = t.n_elements();
                if !(t.ne[0] as usize).is_multiple_of(bs) {
                    return Err(err(format!(
                        "tensor `{}`: row length {} is not a multiple of the {} block size {bs}",
                        t.name,
                        t.ne[0],
                        kind.name()
                    )));
                }
                let end = data_offset as u64 + t.offset + (n / bs * bytes) as u64;
                if end > g.map.len() as u64 {
                    return Err(err(format!(
                        "tensor `{}` ends at byte {end}, past the end of the file ({} bytes)",
                        t.name,
                        g.map.len()
                    )));
                }
            }
        }
        Ok(g)
    }

    /// A metadata value, or an error naming the file and the key.
    pub fn get(&self, key: &str) -> Result<&Value> {
        self.metadata
            .get(key)
            .ok_or_else(|| anyhow!("{}: metadata key `{key}` is missing", self.path.display()))
    }

    /// A tensor dequantised to f32, row-major with its shape.
    pub fn tensor(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| anyhow!("{}: tensor `{name}` is missing", self.path.display()))?;
        let kind = t.kind.clone().map_err(|ty| {
            anyhow!(
                "{}: tensor `{name}` is stored as {ty}, which sinklab cannot dequantise; \
                 supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K",
                self.path.display()
            )
        })?;
        let (bs, bytes) = kind.block();
        let n = t.n_elements();
        let start = self.data_offset + t.offset as usize;
        let raw = &self.map[start..start + n / bs * bytes];
        Ok((t.shape(), dequantize(kind, raw, n)))
    }
}

fn f16(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Dequantise `n` values of `kind` from `raw`, in f32 without fused multiply-add.
pub fn dequantize(kind: GgmlType, raw: &[u8], n: usize) -> Vec<f32> {
    let mut y = Vec::with_capacity(n);
    match kind {
        GgmlType::F32 => y.extend(
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        GgmlType::F16 => y.extend(raw.chunks_exact(2).map(f16)),
        GgmlType::BF16 => y.extend(
            raw.chunks_exact(2)
                .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)),
        ),
        GgmlType::Q8_0 => {
            for b in raw.chunks_exact(34) {
                let d = f16(&b[0..2]);
                y.extend(b[2..34].iter().map(|&q| (q as i8) as f32 * d));
            }
        }
        GgmlType::Q4_0 => {
            for b in raw.chunks_exact(18) {
                let d = f16(&b[0..2]);
                let qs = &b[2..18];
                y.extend(qs.iter().map(|&q| ((q & 0xF) as i32 - 8) as f32 * d));
                y.extend(qs.iter().map(|&q| ((q >> 4) as i32 - 8) as f32 * d));
            }
        }
        GgmlType::Q4_1 => {
            for b in raw.chunks_exact(20) {
                let (d, m) = (f16(&b[0..2]), f16(&b[2..4]));
                let qs = &b[4..20];
                y.extend(qs.iter().map(|&q| (q & 0xF) as f32 * d + m));
                y.extend(qs.iter().map(|&q| (q >> 4) as f32 * d + m));
            }
        }
        GgmlType::Q4K => {
            for b in raw.chunks_exact(144) {
                let (d, dmin) = (f16(&b[0..2]), f16(&b[2..4]));
                let sc = &b[4..16];
                let qs = &b[16..144];
                for j in 0..8 {
                    let (s, m) = if j < 4 {
                        (sc[j] & 63, sc[j + 4] & 63)
                    } else {
                        (
                            (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4),
                            (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
                        )
                    };
                    let dj = d * s as f32;
                    let mj = dmin * m as f32;
                    let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                    for &byte in chunk {
                        let q = if j % 2 == 0 { byte & 0xF } else { byte >> 4 };
                        y.push(dj * q as f32 - mj);
                    }
                }
            }
        }
        GgmlType::Q6K => {
            for b in raw.chunks_exact(210) {
                let (ql, qh) = (&b[0..128], &b[128..192]);
                let scales = &b[192..208];
                let d = f16(&b[208..210]);
                for e in 0..256 {
                    let (h, r) = (e / 128, e % 128);
                    let (c, l) = (r / 32, r % 32);
                    let low4 = (ql[64 * h + l + 32 * (c & 1)] >> (4 * (c >> 1))) & 0xF;
                    let high2 = (qh[32 * h + l] >> (2 * c)) & 3;
                    let q = (low4 | (high2 << 4)) as i32 - 32;
                    y.push((d * (scales[e / 16] as i8) as f32) * q as f32);
                }
            }
        }
    }
    debug_assert_eq!(y.len(), n);
    y
}

/// A GGUF file of the llama architecture as a sinklab model: hyper-parameters from the
/// `llama.*` metadata, every tensor dequantised to f32, Q and K un-permuted from GGUF's
/// adjacent-pair RoPE layout to the halves layout (docs/formats.md), the tokenizer rebuilt.
pub fn read(path: &Path, log: &mut dyn FnMut(&str)) -> Result<super::Imported> {
    use super::{LlamaLayer, LlamaShape, insert_llama_layer};
    use crate::checkpoint::HostTensor;
    let t0 = std::time::Instant::now();
    let g = Gguf::open(path)?;
    let file = path.display().to_string();
    let arch = g
        .get("general.architecture")?
        .as_str()
        .unwrap_or_default()
        .to_string();
    if arch != "llama" {
        bail!(
            "{file}: general.architecture = {arch:?} is not supported; sinklab imports GGUF \
             files of the \"llama\" architecture (LLaMA, Mistral, SmolLM, TinyLlama, ...)"
        );
    }
    let int = |key: &str| -> Result<usize> {
        g.get(key)?
            .as_u64()
            .map(|x| x as usize)
            .ok_or_else(|| anyhow!("{file}: `{key}` is not an integer"))
    };
    let float = |key: &str, default: f64| -> Result<f64> {
        match g.metadata.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| anyhow!("{file}: `{key}` is not a number")),
        }
    };
    if let Some(s) = g.metadata.get("llama.rope.scaling.type")
        && s.as_str() != Some("none")
    {
        bail!("{file}: RoPE scaling {s:?} is not supported (llama.rope.scaling.type)");
    }
    let d = int("llama.embedding_length")?;
    let n_heads = int("llama.attention.head_count")?;
    let n_kv = match g.metadata.get("llama.attention.head_count_kv") {
        Some(_) => int("llama.attention.head_count_kv")?,
        None => n_heads,
    };
    let head_dim = d.checked_div(n_heads).unwrap_or(0);
    for key in [
        "llama.attention.key_length",
        "llama.attention.value_length",
        "llama.rope.dimension_count",
    ] {
        if g.metadata.contains_key(key) && int(key)? != head_dim {
            bail!(
                "{file}: `{key}` = {} differs from embedding_length / head_count = {head_dim}; \
                 sinklab's attention uses d_model / n_heads per head and rotates all of it",
                int(key)?
            );
        }
    }
    let vocab = g
        .tensors
        .get("token_embd.weight")
        .map(|t| t.ne.get(1).copied().unwrap_or(0) as usize)
        .ok_or_else(|| anyhow!("{file}: tensor `token_embd.weight` is missing"))?;
    let shape = LlamaShape {
        d_model: d,
        n_layers: int("llama.block_count")?,
        n_heads,
        n_kv_heads: n_kv,
        d_ff: int("llama.feed_forward_length")?,
        max_positions: int("llama.context_length")?,
        rope_base: float("llama.rope.freq_base", 10000.0)?,
        rms_eps: float("llama.attention.layer_norm_rms_epsilon", 1e-5)?,
        vocab,
        tied: !g.tensors.contains_key("output.weight"),
        qkv_bias: g.tensors.contains_key("blk.0.attn_q.bias"),
    };
    shape.check(path)?;
    let tensor = |name: &str| -> Result<HostTensor> {
        let (shape, data) = g.tensor(name)?;
        Ok(HostTensor { shape, data })
    };
    let expect = |t: &HostTensor, name: &str, want: &[usize]| -> Result<()> {
        if t.shape != want {
            bail!(
                "{file}: tensor `{name}` has shape {:?}, expected {want:?} for this configuration",
                t.shape
            );
        }
        Ok(())
    };
    let mut weights = std::collections::BTreeMap::new();
    let embed = tensor("token_embd.weight")?;
    expect(&embed, "token_embd.weight", &[vocab, d])?;
    weights.insert("embed".to_string(), embed);
    let (hd, kvd) = (head_dim, n_kv * head_dim);
    for l in 0..shape.n_layers {
        let get = |part: &str, want: &[usize]| -> Result<HostTensor> {
            let name = format!("blk.{l}.{part}");
            let t = tensor(&name)?;
            expect(&t, &name, want)?;
            Ok(t)
        };
        let qkv_bias = if shape.qkv_bias {
            Some([
                unpermute(&get("attn_q.bias", &[d])?, n_heads, hd),
                unpermute(&get("attn_k.bias", &[kvd])?, n_kv, hd),
                get("attn_v.bias", &[kvd])?,
            ])
        } else {
            None
        };
        let layer = LlamaLayer {
            attn_norm: get("attn_norm.weight", &[d])?,
            q: unpermute(&get("attn_q.weight", &[d, d])?, n_heads, hd),
            k: unpermute(&get("attn_k.weight", &[kvd, d])?, n_kv, hd),
            v: get("attn_v.weight", &[kvd, d])?,
            o: get("attn_output.weight", &[d, d])?,
            qkv_bias,
            mlp_norm: get("ffn_norm.weight", &[d])?,
            gate: get("ffn_gate.weight", &[shape.d_ff, d])?,
            up: get("ffn_up.weight", &[shape.d_ff, d])?,
            down: get("ffn_down.weight", &[d, shape.d_ff])?,
        };
        insert_llama_layer(&mut weights, l, layer);
    }
    let norm_f = tensor("output_norm.weight")?;
    expect(&norm_f, "output_norm.weight", &[d])?;
    weights.insert("norm_f.gain".to_string(), norm_f);
    if !shape.tied {
        let out = tensor("output.weight")?;
        expect(&out, "output.weight", &[vocab, d])?;
        weights.insert("head.weight".to_string(), super::transpose(&out));
    }
    let known: usize =
        2 + usize::from(!shape.tied) + shape.n_layers * (9 + if shape.qkv_bias { 3 } else { 0 });
    if g.tensors.len() != known {
        let mut extra: Vec<&String> = g
            .tensors
            .keys()
            .filter(|k| {
                !(k.starts_with("blk.")
                    || ["token_embd.weight", "output_norm.weight", "output.weight"]
                        .contains(&k.as_str()))
            })
            .collect();
        extra.truncate(8);
        bail!(
            "{file}: {} tensors, expected {known} for this configuration; not understood: {extra:?}",
            g.tensors.len()
        );
    }
    let tok = super::gguf_tokenizer::rebuild(&g)?;
    let adds_bos = g
        .metadata
        .get("tokenizer.ggml.add_bos_token")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // The end of a document: `<|endoftext|>` where the vocabulary has it (SmolLM, GPT-2
    // style), else the EOS token.
    let eot = if tok.json.contains("\"<|endoftext|>\"") {
        "<|endoftext|>".to_string()
    } else {
        tok.eos.clone()
    };
    let types: std::collections::BTreeMap<&str, usize> =
        g.tensors
            .values()
            .fold(std::collections::BTreeMap::new(), |mut m, t| {
                *m.entry(t.kind.as_ref().map_or("?", |k| k.name()))
                    .or_default() += 1;
                m
            });
    log(&format!(
        "{file}: GGUF v{}, llama, {} × d {d}, {} / {n_kv} kv, vocab {vocab}, \
         tensor types {types:?}; dequantised in {:.1} s",
        g.version,
        crate::progress::count(shape.n_layers, "layer", None),
        crate::progress::count(n_heads, "head", None),
        t0.elapsed().as_secs_f64()
    ));
    let source = serde_json::json!({
        "format": "gguf",
        "path": path.canonicalize().unwrap_or(path.to_path_buf()),
        "sha256": super::file_sha256(path)?,
        "version": g.version,
        "architecture": arch,
        "name": g.metadata.get("general.name").and_then(Value::as_str),
        "tensor_types": types,
        "max_positions": shape.max_positions,
    });
    Ok(super::Imported {
        model: shape.model(shape.max_positions.min(2048)),
        weights,
        tokenizer_json: tok.json,
        bos: tok.bos,
        eot,
        adds_bos,
        source,
    })
}

/// Undo llama.cpp's Q/K permutation of the output rows (docs/formats.md): GGUF row
/// `h·hd + 2i + j` holds Hugging Face row `h·hd + j·hd/2 + i` (i < hd/2, j ∈ {0, 1}), so that
/// rotating halves equals GGUF's rotation of adjacent pairs. Works on weights (rows × in) and
/// biases (rows).
pub fn unpermute(
    t: &crate::checkpoint::HostTensor,
    heads: usize,
    hd: usize,
) -> crate::checkpoint::HostTensor {
    let rows = t.shape[0];
    assert_eq!(rows, heads * hd, "rows = heads × head_dim");
    let cols = t.data.len() / rows;
    let mut data = vec![0f32; t.data.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let src = h * hd + 2 * i + j;
                let dst = h * hd + j * (hd / 2) + i;
                data[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&t.data[src * cols..(src + 1) * cols]);
            }
        }
    }
    crate::checkpoint::HostTensor {
        shape: t.shape.clone(),
        data,
    }
}

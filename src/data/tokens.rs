//! Token streams: in memory (generated tasks, tests) or memory-mapped shard files of
//! little-endian `u16` / `u32` ids (prepared corpora). A stream is a list of parts read as one
//! sequence; train and validation splits are views of the same shards, so opening a prepared
//! corpus maps files and reads nothing (start-up time and resident memory do not grow with it).

use anyhow::{Context, Result, bail};
use memmap2::Mmap;
use std::path::Path;
use std::sync::Arc;

/// Bytes per id in a shard file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Width {
    U16,
    U32,
}

impl Width {
    /// `u16` when every id fits (vocabulary ≤ 65 536), else `u32`.
    pub fn for_vocab(vocab: usize) -> Self {
        if vocab <= 1 << 16 {
            Width::U16
        } else {
            Width::U32
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            Width::U16 => 2,
            Width::U32 => 4,
        }
    }

    /// File extension of a shard: "u16" / "u32".
    pub fn ext(self) -> &'static str {
        match self {
            Width::U16 => "u16",
            Width::U32 => "u32",
        }
    }

    /// Little-endian bytes of `id` (which the vocabulary guarantees fits).
    pub fn put(self, id: u32, out: &mut Vec<u8>) {
        match self {
            Width::U16 => out.extend_from_slice(&(id as u16).to_le_bytes()),
            Width::U32 => out.extend_from_slice(&id.to_le_bytes()),
        }
    }
}

#[derive(Clone)]
enum Store {
    Owned(Arc<Vec<u32>>),
    Mapped(Arc<Mmap>, Width),
}

/// `len` ids of a store starting at id `from`.
#[derive(Clone)]
struct Part {
    store: Store,
    from: usize,
    len: usize,
}

impl Part {
    fn copy(&self, start: usize, n: usize, out: &mut Vec<u32>) {
        let a = self.from + start;
        match &self.store {
            Store::Owned(v) => out.extend_from_slice(&v[a..a + n]),
            Store::Mapped(m, Width::U16) => out.extend(
                m[2 * a..2 * (a + n)]
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32),
            ),
            Store::Mapped(m, Width::U32) => out.extend(
                m[4 * a..4 * (a + n)]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            ),
        }
    }
}

/// A token stream: parts read in order as one sequence.
#[derive(Clone, Default)]
pub struct Tokens {
    parts: Vec<Part>,
    /// Start of each part in the stream (cumulative lengths).
    starts: Vec<usize>,
    len: usize,
}

impl From<Vec<u32>> for Tokens {
    fn from(v: Vec<u32>) -> Self {
        let len = v.len();
        Self::from_parts(vec![Part {
            store: Store::Owned(Arc::new(v)),
            from: 0,
            len,
        }])
    }
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} ids in {} parts)", self.len, self.parts.len())
    }
}

impl Tokens {
    fn from_parts(parts: Vec<Part>) -> Self {
        let parts: Vec<Part> = parts.into_iter().filter(|p| p.len > 0).collect();
        let mut starts = Vec::with_capacity(parts.len());
        let mut len = 0;
        for p in &parts {
            starts.push(len);
            len += p.len;
        }
        Self { parts, starts, len }
    }

    /// Memory-map a shard file of `width` ids, checking that it holds `expect` ids.
    pub fn map(path: &Path, width: Width, expect: usize) -> Result<Self> {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let bytes = f.metadata()?.len() as usize;
        if bytes != expect * width.bytes() {
            bail!(
                "{}: {bytes} bytes, but the manifest records {expect} {} ids ({} bytes); delete \
                 the prepared directory to rebuild it",
                path.display(),
                width.ext(),
                expect * width.bytes()
            );
        }
        if expect == 0 {
            return Ok(Self::default());
        }
        // SAFETY: the shard is written once (to a temporary file, then renamed) and never
        // modified afterwards; sinklab only reads the mapping.
        let map =
            unsafe { Mmap::map(&f) }.with_context(|| format!("mapping {}", path.display()))?;
        Ok(Self::from_parts(vec![Part {
            store: Store::Mapped(Arc::new(map), width),
            from: 0,
            len: expect,
        }]))
    }

    /// The streams one after another.
    pub fn concat(streams: &[&Tokens]) -> Self {
        Self::from_parts(streams.iter().flat_map(|s| s.parts.clone()).collect())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ids `start..end` as a stream of their own (shares the storage).
    pub fn range(&self, start: usize, end: usize) -> Self {
        assert!(
            start <= end && end <= self.len,
            "range {start}..{end} of {}",
            self.len
        );
        let mut parts = Vec::new();
        for (p, &s) in self.parts.iter().zip(&self.starts) {
            let (a, b) = (start.max(s), end.min(s + p.len));
            if a < b {
                parts.push(Part {
                    store: p.store.clone(),
                    from: p.from + a - s,
                    len: b - a,
                });
            }
        }
        Self::from_parts(parts)
    }

    /// Append ids `start..start + n` to `out`.
    pub fn copy_to(&self, start: usize, n: usize, out: &mut Vec<u32>) {
        assert!(start + n <= self.len, "ids {start}+{n} of {}", self.len);
        // the part holding `start`: the last part starting at or before it
        let mut i = self
            .starts
            .partition_point(|&s| s <= start)
            .saturating_sub(1);
        let (mut at, mut left) = (start, n);
        while left > 0 {
            let p = &self.parts[i];
            let off = at - self.starts[i];
            let take = left.min(p.len - off);
            p.copy(off, take, out);
            at += take;
            left -= take;
            i += 1;
        }
    }

    /// Ids `start..start + n`.
    pub fn slice(&self, start: usize, n: usize) -> Vec<u32> {
        let mut v = Vec::with_capacity(n);
        self.copy_to(start, n, &mut v);
        v
    }

    /// Every id (small streams only: tests, generated tasks).
    pub fn to_vec(&self) -> Vec<u32> {
        self.slice(0, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_shards_read_as_one_stream_across_parts_and_widths() {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<u32> = (0..1000).map(|i| (i * 37) % 60_000).collect();
        let write = |name: &str, xs: &[u32], w: Width| {
            let mut b = Vec::new();
            for &x in xs {
                w.put(x, &mut b);
            }
            std::fs::write(dir.path().join(name), b).unwrap();
            Tokens::map(&dir.path().join(name), w, xs.len()).unwrap()
        };
        let a = write("a.u16", &ids[..300], Width::U16);
        let b = write("b.u32", &ids[300..700], Width::U32);
        let c = Tokens::from(ids[700..].to_vec());
        let all = Tokens::concat(&[&a, &Tokens::default(), &b, &c]);
        assert_eq!(all.len(), 1000);
        assert_eq!(all.to_vec(), ids);
        assert_eq!(all.slice(290, 420), ids[290..710].to_vec());
        let mid = all.range(250, 800);
        assert_eq!(mid.slice(40, 20), ids[290..310].to_vec());
        assert_eq!(mid.to_vec(), ids[250..800].to_vec());
        assert!(Tokens::map(&dir.path().join("a.u16"), Width::U16, 299).is_err());
        assert_eq!(Width::for_vocab(65_536), Width::U16);
        assert_eq!(Width::for_vocab(65_537), Width::U32);
    }
}

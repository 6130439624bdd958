#!/usr/bin/env python3
"""Independent NumPy reference for the analysis suite (docs/reference.md §4, §7) and its fixture.

    ~/.cache/sinklab-venv/bin/python scripts/reference_analysis.py   # writes tests/fixtures/analysis_golden.json

Nothing here reads sinklab. In float64 with numpy.linalg.svd:

Dark signals (Cancedda 2024). For a residual-side matrix M (d × n) with SVD M = U S Vᵀ, the
left singular vectors u_1..u_d (descending singular value) are split into `bands` bands,
band j = vectors ⌊(j−1)d/bands⌋ .. ⌊jd/bands⌋; the last band is dark.
  Φ_k = Σ_{bands ≤ k} u uᵀ,   Ω_k = Φ_k + Φ_dark,   energy_j(h) = ‖U_jᵀ h‖² / ‖h‖²,
  dark ratio(h) = ‖Φ_dark h‖ / ‖(I − Φ_dark) h‖,   write share_j(W) = ‖W U_j‖²_F / ‖W‖²_F,
  Ψ_k = I − Φ_{e,(k+1):n} Φ_{u,(k+1):n} for k = 0..n: the product of the two tail projectors
  (bands k+1..n) of a second matrix M2 (the embedding side, e) and of M (the unembedding side,
  u), subtracted from the identity, as a map on column vectors h ↦ Ψ_k h (Cancedda 2024).

Attention geometry. For queries q and keys k (B, H, T, d_h), per head, over queries t ≥ 1:
  cos_first = mean cos(q_t, k_0), norm_first = mean ‖q_t‖‖k_0‖/√d_h; the same over keys
  1 ≤ j ≤ t for cos_rest, norm_rest.
Received attention of key k in a (T × T) causal attention matrix A: mean and population std of
A[t, k] over the later queries t ∈ (k, T), when there are at least `min_q` of them.
"""
import json
from pathlib import Path

import numpy as np


def bands_of(M, n_bands):
    d = M.shape[0]
    U, S, _ = np.linalg.svd(M, full_matrices=True)
    edges = [j * d // n_bands for j in range(n_bands + 1)]
    return U, S, edges


def proj(U, cols):
    V = U[:, cols]
    return V @ V.T


def arr(x):
    x = np.asarray(x, dtype=np.float64)
    return {"shape": list(x.shape), "data": x.ravel().tolist()}


def dark_case(rng):
    d, n, nb = 12, 30, 4
    M = rng.standard_normal((d, n)) * np.linspace(3.0, 0.3, d)[:, None]
    M2 = M + 0.05 * rng.standard_normal((d, n))
    U, S, edges = bands_of(M, nb)
    U2, _, _ = bands_of(M2, nb)
    cols = lambda js: [c for j in js for c in range(edges[j], edges[j + 1])]
    H = rng.standard_normal((3, d))
    W = rng.standard_normal((5, d))
    energy = [[float(np.sum((U[:, cols([j])].T @ h) ** 2) / np.sum(h ** 2)) for j in range(nb)] for h in H]
    Pd = proj(U, cols([nb - 1]))
    ratio = [float(np.linalg.norm(Pd @ h) / np.linalg.norm(h - Pd @ h)) for h in H]
    share = [float(np.sum((W @ U[:, cols([j])]) ** 2) / np.sum(W ** 2)) for j in range(nb)]
    psi = [np.eye(d) - proj(U2, cols(range(k, nb))) @ proj(U, cols(range(k, nb))) for k in range(nb + 1)]
    return {
        "m": arr(M), "m2": arr(M2), "bands": nb, "singular_values": S.tolist(), "edges": edges,
        "phi": [arr(proj(U, cols(range(k)))) for k in range(nb + 1)],
        "omega2": arr(proj(U, cols([0, 1, nb - 1]))),
        "h": arr(H), "energy": energy, "dark_ratio": ratio, "w": arr(W), "write_share": share,
        "psi": [arr(p) for p in psi],
    }


def geometry_case(rng):
    B, H, T, dh = 2, 3, 7, 4
    q = rng.standard_normal((B, H, T, dh))
    k = rng.standard_normal((B, H, T, dh))
    k[:, :, 0, :] *= 3.0
    out = []
    for h in range(H):
        cf, nf, cr, nr = [], [], [], []
        for b in range(B):
            for t in range(1, T):
                for j in range(t + 1):
                    qq, kk = q[b, h, t], k[b, h, j]
                    c = qq @ kk / (np.linalg.norm(qq) * np.linalg.norm(kk))
                    nn = np.linalg.norm(qq) * np.linalg.norm(kk) / np.sqrt(dh)
                    (cf if j == 0 else cr).append(c)
                    (nf if j == 0 else nr).append(nn)
        out.append({"cos_first": np.mean(cf), "cos_rest": np.mean(cr), "norm_first": np.mean(nf), "norm_rest": np.mean(nr)})
    logits = rng.standard_normal((T, T)) * 2
    logits[:, 3] += 2.5  # a bar candidate at key 3
    mask = np.tril(np.ones((T, T))) > 0
    A = np.where(mask, np.exp(logits), 0.0)
    A /= A.sum(axis=1, keepdims=True)
    min_q = 2
    stats = []
    for key in range(T):
        later = A[key + 1:, key]
        stats.append(None if len(later) < min_q else [float(later.mean()), float(later.std())])
    return {"q": arr(q), "k": arr(k), "heads": [{kk: float(v) for kk, v in h.items()} for h in out],
            "attn": arr(A), "min_q": min_q, "received": stats}


def main():
    rng = np.random.default_rng(2026)
    fixture = {"dark": dark_case(rng), "geometry": geometry_case(rng)}
    path = Path(__file__).resolve().parent.parent / "tests/fixtures/analysis_golden.json"
    path.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Independent NumPy reference for U-SPA / E-SPA (docs/reference.md §3.3) and its golden fixture.

    ~/.cache/sinklab-venv/bin/python scripts/reference_spa.py   # writes tests/fixtures/spa_golden.json

Nothing here reads sinklab. For each case (a target family, its final value, the number of
layers L and the sequence length T) it builds, in float64 with numpy.linalg:

    Σ_0 = I,  Σ_l = (1 − ρ_l) I + ρ_l 11ᵀ,  1 − ρ_l = (1 − ρ_L)^{l/L}                  (U-SPA)
              (Σ_l)_ij = exp(−γ_l |i − j|),  1 − e^{−2γ_l} = (1 − e^{−2γ_L})^{l/L}      (E-SPA)
    A_l = chol(Σ_l) · inv(chol(Σ_{l−1})),  D_l = A_l 1,  Γ_l = log(A_l / D_l) on j ≤ i (0 above)

and checks the defining properties before writing anything: A_l is lower triangular with
positive causal entries, A_l Σ_{l−1} A_lᵀ = Σ_l, and D_l softmax(Γ_l) = A_l.
"""
import json
from pathlib import Path

import numpy as np

CASES = [
    {"name": "e_spa", "kind": "e_spa", "value": 0.1, "layers": 4, "t": 12},
    {"name": "u_spa", "kind": "u_spa", "value": 0.8, "layers": 4, "t": 12},
    {"name": "e_spa_small", "kind": "e_spa", "value": 0.005, "layers": 3, "t": 9},
]


def sigma(kind, x, l, L, T):
    if l == 0:
        return np.eye(T)
    f = l / L
    if kind == "u_spa":
        rho = 1.0 - (1.0 - x) ** f
        return (1.0 - rho) * np.eye(T) + rho * np.ones((T, T))
    gamma = -0.5 * np.log(1.0 - (1.0 - np.exp(-2.0 * x)) ** f)
    i = np.arange(T)
    return np.exp(-gamma * np.abs(i[:, None] - i[None, :]))


def layers(c):
    kind, x, L, T = c["kind"], c["value"], c["layers"], c["t"]
    out = []
    prev = np.linalg.cholesky(sigma(kind, x, 0, L, T))
    for l in range(1, L + 1):
        s_prev, s = sigma(kind, x, l - 1, L, T), sigma(kind, x, l, L, T)
        cur = np.linalg.cholesky(s)
        A = cur @ np.linalg.inv(prev)
        A[np.triu_indices(T, 1)] = 0.0  # exactly causal (inv of lower is lower)
        low = np.tril_indices(T)
        assert (A[low] > 0).all(), (c["name"], l, A[low].min())
        assert np.abs(A @ s_prev @ A.T - s).max() < 1e-10
        D = A.sum(axis=1)
        G = np.zeros((T, T))
        G[low] = np.log(A[low] / D[low[0]])
        E = np.where(np.tril(np.ones((T, T))) > 0, np.exp(G), 0.0)
        assert np.abs(D[:, None] * E / E.sum(axis=1, keepdims=True) - A).max() < 1e-12
        out.append({"bias": G.ravel().tolist(), "scale": D.tolist(), "min_entry": float(A[low].min())})
        prev = cur
    return out


def main():
    fixture = {"cases": [dict(c, layers_out=layers(c)) for c in CASES]}
    path = Path(__file__).resolve().parent.parent / "tests/fixtures/spa_golden.json"
    path.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {path} ({len(CASES)} cases)")


if __name__ == "__main__":
    main()

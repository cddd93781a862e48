#!/usr/bin/env python3
"""analysis_ref.py: an independent numpy implementation of every `attnscope analyze` metric
(docs/analysis.md), and the script that writes the analysis test fixtures.

    python3 tools/analysis_ref.py fixtures BUILD/attnscope     # rewrites tests/fixtures/analysis/
    python3 tools/analysis_ref.py compare TRACE.h5 RESULTS.h5 [default|variant|softmax]
                                                               # checks results against numpy
                                                               # (staged traces: format 3 too)

`fixtures` records small traces with attnscope from the committed fixture models, then
computes every metric here (per image, then mean / sample std / 95% t interval over images)
and writes <name>.expected.h5, laid out like attnscope's results (/default/analysis/... for
default options, /variant/analysis/... for VARIANT_ARGS). tests/test_analysis.c compares.
Needs numpy, h5py and mpmath (Debian: python3-numpy python3-h5py python3-mpmath).
"""
import math
import os
import subprocess
import sys

import h5py
import mpmath
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures")

# The options of each run; tests/test_analysis.c sets the same. window None: a masked head's own
# mask size, else 3. The named choices (docs/analysis.md) take their default in DEFAULT and the
# other reading in VARIANT / ALS_SOFTMAX.
DEFAULT = dict(window=None, low=0.35, high=0.65, thresholds=[0.1, 0.5, 1.0, 2.0], fusion="mean",
               discard=0.0, normalize=False, renorm=False, prefix="exclude", rows="normalise",
               map="attn", distance="pixel", qscale="scaled", diag="scores", cka_batch=8,
               hsic="unbiased")
VARIANT = dict(DEFAULT, window=5, low=0.3, high=0.5, thresholds=[0.25, 1.5], fusion="max",
               discard=0.3, normalize=True, renorm=True, prefix="include", rows="raw",
               distance="centre", qscale="raw", diag="attn", cka_batch=4,
               hsic="biased")
ALS_SOFTMAX = dict(DEFAULT, map="softmax", prefix="include")   # the als metric only
# staged traces: the other reading of every choice that applies to them (compare ... variant);
# tests/test_cli_stagemetrics.sh passes the same options to attnscope analyze
STAGED_VARIANT = dict(DEFAULT, window=5, thresholds=[0.25, 1.5], fusion="max", normalize=True,
                      renorm=True, rows="raw", distance="centre", qscale="raw", diag="attn",
                      cka_batch=4, hsic="biased")
DEFS = ["deepvit", "row", "map"]


class Trace:
    def __init__(self, path):
        self.f = h5py.File(path, "r")
        a = self.f.attrs
        self.layers = [int(x) for x in np.atleast_1d(a["layers"])]
        self.heads = [int(x) for x in np.atleast_1d(a["heads"])]
        self.T = int(a["num_tokens"])
        self.p = int(a["num_prefix_tokens"])
        pt = a["prefix_tokens"]
        pt = pt.decode() if isinstance(pt, bytes) else str(pt)
        self.cls = pt.split(",")[0] == "cls"  # registers alone: no class token
        self.g = int(np.atleast_1d(a["grid"])[0])
        self.patch = int(a["patch_size"])
        self.depth = int(a["depth"])
        self.rows_all = a["query_rows"] == "all"
        self.n = int(np.cumprod(self.f["images/done"][:]).sum())
        self.q = set(str(a["quantities"]).split(","))

    def get(self, layer, name, i):
        key = "layers/%02d/%s" % (layer, name)
        return self.f[key][i].astype(np.float64) if key in self.f else None

    def attr(self, layer, name, default=None):
        a = self.f["layers/%02d" % layer].attrs
        return a[name] if name in a else default

    def mask_size(self, layer, head):
        """MaiT's R for a model head (0: unmasked), from the trace's layer attributes."""
        if self.attr(layer, "mechanism") != "mait":
            return 0
        return int(np.atleast_1d(self.attr(layer, "mask_size"))[head])

    def num_heads(self):
        return int(self.f.attrs["num_heads"])


# ---- metrics: each returns {output: array} for one image ------------------------------------

def als_window(tr, l, h, o):
    """R of MaiT's mask M for head h of layer l: its own mask, else 3, unless one R is given."""
    return o["window"] or tr.mask_size(l, h) or 3


def als(tr, i, o):
    """MaiT Eq. 3: ALS = mean over the N patch rows n of sum_i (M . A)[n, i], M the R x R
    neighbourhood (plus the prefix columns, which the mask never removes, with prefix=include);
    A the recorded map, or softmax(scores) with map=softmax; rows=normalise divides each row's
    sum by the row's total mass, leaving out (and counting) rows whose total is not positive.
    Eq. 3 sums probabilities (MaiT 4.2: each row sums up to 1): a layer whose patch query rows
    hold a negative entry in this image is left out (NaN) and flagged in negative_maps."""
    g, p, T = tr.g, tr.p, tr.T
    P = g * g
    s = np.zeros((len(tr.layers), len(tr.heads)))
    drop = np.zeros_like(s)
    neg = np.zeros(len(tr.layers))
    for li, l in enumerate(tr.layers):
        if o["map"] == "softmax":
            S = tr.get(l, "scores", i)
            E = np.exp(S - S.max(-1, keepdims=True))
            A = E / E.sum(-1, keepdims=True)
        else:
            A = tr.get(l, "attn", i)
        if (A[:, p:, :] < 0).any():
            neg[li] = 1
            s[li] = drop[li] = np.nan
            continue
        for hi, h in enumerate(tr.heads):
            half = als_window(tr, l, h, o) // 2
            M = np.zeros((T, T))
            for n in range(P):
                r, c = divmod(n, g)
                for k in range(P):
                    if abs(k // g - r) <= half and abs(k % g - c) <= half:
                        M[p + n, p + k] = 1
                if o["prefix"] == "include":
                    M[p + n, :p] = 1
            rows = (M * A[hi]).sum(-1)[p:]
            if o["rows"] == "normalise" and o["map"] == "attn":
                tot = A[hi].sum(-1)[p:]
                ok = tot > 0
                drop[li, hi] = (~ok).sum()
                s[li, hi] = np.mean(rows[ok] / tot[ok]) if ok.any() else np.nan
            else:
                s[li, hi] = rows.mean()
    return {"score": s, "head_mean": s.mean(1), "negative_maps": neg, "dropped_rows": drop}


def mait_search(tr, score, o):
    """MaiT section 4.3, quick empirical search, one step from the masks the model has.
    1. no head masked anywhere: mask head 0 of every layer;
    2. a layer with only head 0 masked: ALS^{0,l} above high: mask all heads; between low and
       high: keep; below low: remove;
    3. a layer with several masked heads (after 2a): remove the masks of heads below low.
    Returns (layers, all model heads) mask sizes."""
    NH = tr.num_heads()
    R = o["window"] or 3
    cur = np.array([[tr.mask_size(l, h) for h in range(NH)] for l in tr.layers])
    everywhere = any(tr.mask_size(l, h) for l in range(tr.depth) for h in range(NH))
    if not everywhere:
        out = np.zeros_like(cur)
        # a mask makes the block MaiT: only plain and MaiT blocks can take one
        out[:, 0] = [R if tr.attr(l, "mechanism") in ("vanilla", "mait") else 0 for l in tr.layers]
        return out.astype(float)
    out = cur.copy()
    for li in range(len(tr.layers)):
        masked = [h for h in range(NH) if cur[li, h] > 0]
        if masked == [0]:
            a = score[li, tr.heads.index(0)] if 0 in tr.heads else np.nan
            if np.isnan(a):
                continue
            if a > o["high"]:
                out[li, :] = cur[li, 0]
            elif a < o["low"]:
                out[li, 0] = 0
        elif masked:
            for h in masked:
                if h in tr.heads and score[li, tr.heads.index(h)] < o["low"]:
                    out[li, h] = 0
    return out.astype(float)


def cos(a, b):
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return np.nan if na == 0 or nb == 0 else float(a @ b / (na * nb))


def nanmean(v):
    v = [x for x in v if not np.isnan(x)]
    return np.mean(v) if v else np.nan


def similarity(tr, i, o):
    L, H = len(tr.layers), len(tr.heads)
    maps = [tr.get(l, "attn", i) for l in tr.layers]
    ph = np.zeros((3, H, L, L))
    for a in range(L):
        for b in range(L):
            for h in range(H):
                A, B = maps[a][h], maps[b][h]
                Q = A.shape[0]
                ph[0, h, a, b] = nanmean([cos(A[:, t], B[:, t]) for t in range(A.shape[1])]) if Q >= 2 else np.nan
                ph[1, h, a, b] = nanmean([cos(A[r], B[r]) for r in range(Q)])
                ph[2, h, a, b] = cos(A.ravel(), B.ravel())
    hm = np.array([[[nanmean(ph[d, :, a, b]) for b in range(L)] for a in range(L)] for d in range(3)])
    adj = np.full((3, L), np.nan)
    for li, l in enumerate(tr.layers):
        if l - 1 in tr.layers:
            adj[:, li] = hm[:, li, tr.layers.index(l - 1)]
    return {"per_head": ph, "head_mean": hm, "adjacent": adj}


def qk(tr, i, o):
    """LMSA 3.3: the share of |q|, |k| entries above each threshold; with qscale=scaled, q is
    the one that meets k^T in the product (q * scale, Swin's q = q * self.scale), in float32."""
    L, th = len(tr.layers), o["thresholds"]
    out = {}
    for w in ("q", "k"):
        r = np.full((L, len(th)), np.nan)
        for li, l in enumerate(tr.layers):
            x = tr.get(l, w, i)
            if x is not None:
                x = x.astype(np.float32)
                if w == "q" and o["qscale"] == "scaled" and tr.attr(l, "scale_mode") != "dynamic":
                    x = x * np.float32(tr.attr(l, "scale"))
                r[li] = [np.mean(np.abs(x) > np.float32(t)) for t in th]
        out[w + "_fraction"] = r
    return out


def hsic1(K, M):
    n = K.shape[0]
    K, M = K.copy(), M.copy()
    np.fill_diagonal(K, 0)
    np.fill_diagonal(M, 0)
    one = np.ones(n)
    return (np.trace(K @ M) + (one @ K @ one) * (one @ M @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ K @ M @ one)) / (n * (n - 3))


def hsic0(K, M):
    """Kornblith et al. 2019's (biased) empirical HSIC, their Eq. 3: tr(K H M H) / (n-1)^2 with
    the centring matrix H = I - 11'/n."""
    n = K.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    return np.trace(K @ H @ M @ H) / (n - 1) ** 2


def hsic(o):
    return hsic0 if o["hsic"] == "biased" else hsic1


def evolution(tr, i, o):
    X = [tr.get(l, "tokens", i) for l in tr.layers]
    L = len(X)
    G = [x @ x.T for x in X]
    hs = np.array([[hsic(o)(G[a], G[b]) for b in range(L)] for a in range(L)])
    d = np.sqrt(np.diag(hs))
    cka = hs / np.outer(d, d)
    tc = lambda a, b: nanmean([cos(a[t], b[t]) for t in range(a.shape[0])])
    cf = np.array([tc(X[li], X[-1]) for li in range(L)])
    cp = np.array([tc(X[li], X[tr.layers.index(l - 1)]) if l - 1 in tr.layers else np.nan
                   for li, l in enumerate(tr.layers)])
    return {"cos_final": cf, "cos_prev": cp, "cka": cka, "hsic": hs}


_pixel_tables = {}


def patch_distances(tr, how):
    """(P, P) distances in pixels: between patch centres, or ViT's: the mean over every pixel of
    the query patch and every pixel of the key patch (brute force over all pixel pairs)."""
    g, ps = tr.g, tr.patch
    yy, xx = np.divmod(np.arange(g * g), g)
    if how == "centre":
        return ps * np.sqrt((yy[:, None] - yy[None]) ** 2 + (xx[:, None] - xx[None]) ** 2)
    key = (g, ps)
    if key not in _pixel_tables:
        S = g * ps
        py, px = np.divmod(np.arange(S * S), S)
        Dpix = np.sqrt((py[:, None] - py[None]) ** 2 + (px[:, None] - px[None]) ** 2)
        patch_of = (py // ps) * g + px // ps
        D = np.zeros((g * g, g * g))
        for a in range(g * g):
            ra = Dpix[patch_of == a]
            for b in range(g * g):
                D[a, b] = ra[:, patch_of == b].mean()
        _pixel_tables[key] = D
    return _pixel_tables[key]


def distance(tr, i, o):
    g, p = tr.g, tr.p
    D = patch_distances(tr, o["distance"])
    out = np.zeros((len(tr.layers), len(tr.heads)))
    drop = np.zeros_like(out)
    neg = np.zeros(len(tr.layers))
    for li, l in enumerate(tr.layers):
        A = tr.get(l, "attn", i)
        if (A[:, p:, :] < 0).any():      # attention weights are probabilities (ViT Fig. 7)
            neg[li] = 1
            out[li] = drop[li] = np.nan
            continue
        W = A[:, p:, p:]                   # (H, P, P) patch queries x keys
        m = (W * D[None]).sum(-1)
        if o["renorm"]:
            s = W.sum(-1)
            drop[li] = (s <= 0).sum(-1)
            m = np.where(s > 0, m / np.where(s > 0, s, 1), np.nan)
        out[li] = np.nanmean(m, axis=1)
    return {"distance": out, "head_mean": out.mean(1), "negative_maps": neg, "dropped_rows": drop}


def entropy(tr, i, o):
    out = np.zeros((len(tr.layers), len(tr.heads)))
    for li, l in enumerate(tr.layers):
        A = np.clip(tr.get(l, "attn", i), 0, None)
        s = A.sum(-1, keepdims=True)
        P = A / np.where(s > 0, s, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            H = -np.where(P > 0, P * np.log(np.where(P > 0, P, 1)), 0).sum(-1)
        H = np.where(s[..., 0] > 0, H, np.nan)
        out[li] = np.nanmean(H, axis=1)
    if o["normalize"]:
        out /= np.log(tr.T)
    return {"entropy": out, "head_mean": out.mean(1)}


def rollout(tr, i, o):
    T, p = tr.T, tr.p
    result = np.eye(T)
    maps = []
    for l in tr.layers:
        A = tr.get(l, "attn", i)
        F = {"mean": A.mean(0), "max": A.max(0), "min": A.min(0)}[o["fusion"]].copy()
        m = int(np.floor(o["discard"] * T * T))
        if m:
            flat = F.ravel()
            idx = np.argsort(flat, kind="stable")[:m]
            flat[idx[idx != 0]] = 0
        a = F + np.eye(T)
        a = a / a.sum(-1, keepdims=True)
        result = a @ result
        src = result[0] if tr.cls else result.mean(0)
        maps.append(src[p:])
    return {"map": np.array(maps)}


def diag(tr, i, o):
    """LaViT Eq. 8/9's two terms, sum |A_ij - A_ji| and sum_i ((N-1) A_ii - sum_{j!=i} A_ij), on
    the pre-softmax scores A^l of the less-attention layers (diag=scores; others NaN) or on
    every layer's softmax map (diag=attn)."""
    T = tr.T
    sym = np.zeros((len(tr.layers), len(tr.heads)))
    dg = np.zeros_like(sym)
    for li, l in enumerate(tr.layers):
        if o["diag"] == "scores":
            if tr.attr(l, "mechanism") != "less":
                sym[li] = dg[li] = np.nan
                continue
            A = tr.get(l, "scores", i)
        else:
            A = tr.get(l, "attn", i)
        sym[li] = np.abs(A - A.transpose(0, 2, 1)).sum((1, 2))
        d = np.diagonal(A, axis1=1, axis2=2)
        dg[li] = ((T - 1) * d - (A.sum(-1) - d)).sum(-1)
    return {"symmetry": sym, "diagonality": dg, "symmetry_head_mean": sym.mean(1),
            "diagonality_head_mean": dg.mean(1)}


METRICS = {"als": als, "similarity": similarity, "qk": qk, "evolution": evolution,
           "distance": distance, "entropy": entropy, "rollout": rollout, "diag": diag}


def missing(tr, name, o):
    """Why the trace cannot support metric name (what `attnscope analyze` skips), or None."""
    need = {"qk": ["q", "k"], "evolution": ["tokens"]}.get(name, ["attn"])
    if name == "diag" and o["diag"] == "scores":
        if not any(tr.attr(l, "mechanism") == "less" for l in tr.layers):
            return "no less-attention layer recorded"
        need = ["scores"]
    lack = [q for q in need if q not in tr.q]
    if lack:
        return "the trace lacks " + ",".join(lack)
    if name in ("als", "distance", "diag") and not tr.rows_all:
        return "only the prefix query rows recorded"
    if name == "rollout" and tr.layers != list(range(tr.depth)):
        return "not every layer recorded"
    return None


# ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------
# Written from the definitions there, plainly: every window map is placed into a dense T x T
# grid-space map of its layer (pad slots dropped), distances come from token centres and
# footprints in pixels, and merges are explicit transfer matrices.

class StagedLayer:
    def __init__(self, f, l):
        g = f["layers/%02d" % l]
        a = g.attrs
        self.l = l
        self.stage = int(a["stage"])
        self.gh, self.gw = [int(x) for x in a["grid"]]
        self.p = int(a["prefix_tokens"])
        self.T = int(a["num_tokens"])
        self.D = int(a["embed_dim"])
        self.stride = float(a["token_stride_px"])
        self.offset = float(a["token_offset_px"])
        self.window = str(a["scope"]) == "window"
        self.sra = str(a["scope"]) == "sra"
        self.cls_scope = str(a["scope"]) == "class"  # CaiT: the class token's row over [cls; patches]
        self.signed = int(a.get("attn_row_stochastic", 1)) == 0
        self.shift = int(a["shift"]) if self.window else 0
        self.scale = float(a["scale"]) if "scale" in a else None
        self.g = g
        if self.window:
            self.tok = g["params/window_token"][:]          # (nW, M^2)
            self.mask = g["params/shift_mask"][:]           # (nW, M^2, M^2)
            self.wins = [int(w) for w in g["window"][:]] if "window" in g else list(range(len(self.tok)))
        yy, xx = np.divmod(np.arange(self.gh * self.gw), self.gw)
        self.yx = np.stack([yy, xx], 1)
        self.centre = self.offset + self.stride * self.yx   # (P, 2) px
        if self.sra:
            # PVT v2's reduced keys (docs/analysis.md, "Spatial-reduction layers"): key (r, c)
            # reduces the tokens of an R x R stride-R conv window, or of adaptive pooling's bin
            # [floor(i n / P), ceil((i + 1) n / P)); its centre is the trace's key_centre_px
            # (written by the engine from the conv arithmetic; rows and columns alike here)
            self.kgh, self.kgw = [int(x) for x in a["key_grid"]]
            if "sr_pool" in a:
                P = int(a["sr_pool"])
                rng = lambda i, n: range(math.floor(i * n / P), math.ceil((i + 1) * n / P))
            else:
                R = int(a["sr_ratio"])
                rng = lambda i, n: range(R * i, R * i + R)
            self.bins = [[y * self.gw + x for y in rng(r, self.gh) for x in rng(c, self.gw)]
                         for r in range(self.kgh) for c in range(self.kgw)]
            kc = np.asarray(a["key_centre_px"], np.float64)
            assert self.kgh == self.kgw and len(kc) == self.kgh, "square key grids only here"
            self.kcentre = np.array([[kc[r], kc[c]] for r in range(self.kgh) for c in range(self.kgw)])
            self.Tk = self.kgh * self.kgw
            # S (Tk x T): each key's weight shared equally by the tokens it reduces
            self.S = np.zeros((self.Tk, self.T))
            for j, b in enumerate(self.bins):
                self.S[j, b] = 1.0 / len(b)

    def problems(self):
        """[(window index, token of each query slot, token of each key slot)] as trace tokens."""
        if self.cls_scope:
            return [(0, np.array([0]), np.arange(self.T))]
        if not self.window:
            return [(0, np.arange(self.T), np.arange(self.T))]
        return [(k, self.tok[w], self.tok[w]) for k, w in enumerate(self.wins)]

    def queries(self):
        """The grid tokens (as grid indices) that are queries of the recorded problems."""
        q = sorted({int(t) for _, qt, _ in self.problems() for t in qt if t >= self.p})
        return np.array(q, int) - self.p

    def maps(self, name, i):
        """(H, problems, Tq, Tk) of image i."""
        x = self.g[name][i].astype(np.float64)
        return x if self.window else x[:, None]

    def dense(self, A):
        """A: one head's (problems, Tq, Tk) -> the grid-space (T, T) map (pad slots dropped) and
        each token's weight on pad keys; an SRA layer's (T, T') map as it is (no pad keys)."""
        if self.sra:
            return A[0].copy(), np.zeros(self.T)
        G = np.zeros((self.T, self.T))
        pad = np.zeros(self.T)
        for k, qt, kt in self.problems():
            for r, t in enumerate(qt):
                if t < 0:
                    continue
                for s, u in enumerate(kt):
                    if u < 0:
                        pad[t] += A[k, r, s]
                    else:
                        G[t, u] = A[k, r, s]
        return G, pad

    def valid(self):
        """(T, T) True where key u is a valid key of query t: in t's window, not masked (SRA:
        (T, T'), every reduced key)."""
        if self.sra:
            return np.ones((self.T, self.Tk), bool)
        V = np.zeros((self.T, self.T), bool)
        for k, qt, kt in self.problems():
            m = self.mask[self.wins[k]] if self.window else np.zeros((len(qt), len(kt)))
            for r, t in enumerate(qt):
                for s, u in enumerate(kt):
                    if t >= 0 and u >= 0 and m[r, s] == 0:
                        V[t, u] = True
        return V

    def footprint_cell(self, c):
        """The grid index of this layer whose footprint [o + s k - s/2, o + s k + s/2) holds the
        point c (y, x), or -1."""
        k = []
        for ax, n in ((0, self.gh), (1, self.gw)):
            hit = [j for j in range(n) if self.offset + self.stride * j - self.stride / 2 <= c[ax]
                   < self.offset + self.stride * j + self.stride / 2]
            if not hit:
                return -1
            k.append(hit[0])
        return k[0] * self.gw + k[1]

    def transfer_to(self, coarse):
        """U (coarse grid cells x this layer's grid tokens): 1/n_c for the n_c tokens in cell c:
        with strides r apart (whole), token (y, x) is in cell (y // r, x // r) (docs/analysis.md:
        a merge's children, a strided conv's 2 x 2 blocks); else the cell whose footprint holds
        its centre."""
        U = np.zeros((coarse.gh * coarse.gw, self.gh * self.gw))
        r = coarse.stride / self.stride
        for t in range(self.gh * self.gw):
            if abs(r - round(r)) < 1e-9 and round(r) >= 1:
                y, x = self.yx[t] // int(round(r))
                c = y * coarse.gw + x if y < coarse.gh and x < coarse.gw else -1
            else:
                c = coarse.footprint_cell(self.centre[t])
            if c >= 0:
                U[c, t] = 1
        n = U.sum(1, keepdims=True)
        return U / np.where(n > 0, n, 1), U


class StagedTrace:
    def __init__(self, path):
        self.f = h5py.File(path, "r")
        a = self.f.attrs
        self.layers = [int(x) for x in np.atleast_1d(a["layers"])]
        self.L = [StagedLayer(self.f, l) for l in self.layers]
        self.depth = int(a["depth"])
        self.n_stages = int(a["num_stages"])
        self.n = int(np.cumprod(self.f["images/done"][:]).sum())
        self.q = set(str(a["quantities"]).split(","))
        self.H = [self.f["layers/%02d/attn" % l].shape[1] for l in self.layers]
        self.Hx = max(self.H)
        self.coarse = min(range(len(self.L)), key=lambda k: (self.L[k].gh * self.L[k].gw, k))

    def get(self, layer, name, i):
        key = "layers/%02d/%s" % (layer, name)
        return self.f[key][i].astype(np.float64) if key in self.f else None


def _stage_mean(tr, per_layer):
    out = np.full(tr.n_stages, np.nan)
    for s in range(tr.n_stages):
        v = [x for k, x in enumerate(per_layer) if tr.L[k].stage == s and not np.isnan(x)]
        if v:
            out[s] = np.mean(v)
    return out


def _pixel_table(g, how):
    """(P, P) px distances between grid tokens: centre distance, or the mean over every pixel of
    the two footprints (stride x stride squares), by brute force over the pixels."""
    P = g.gh * g.gw
    if how == "centre":
        d = g.centre[:, None, :] - g.centre[None]
        return np.sqrt((d ** 2).sum(-1))
    key = ("staged", g.gh, g.gw, g.stride)
    if key not in _pixel_tables:
        s = int(g.stride)
        py, px = np.divmod(np.arange(g.gh * s * g.gw * s), g.gw * s)
        Dpix = np.sqrt((py[:, None] - py[None]) ** 2 + (px[:, None] - px[None]) ** 2)
        of = (py // s) * g.gw + px // s
        D = np.zeros((P, P))
        for a in range(P):
            ra = Dpix[of == a]
            for b in range(P):
                D[a, b] = ra[:, of == b].mean()
        _pixel_tables[key] = D
    return _pixel_tables[key]


def _key_table(g, how):
    """An SRA layer's (T, T') px distances from each token to each reduced key: centre: to the
    key's centre; pixel: the mean over every pixel of the token's footprint and every pixel of the
    key's (the union of its tokens' stride x stride footprints), by brute force over the pixels."""
    if how == "centre":
        d = g.centre[:, None, :] - g.kcentre[None]
        return np.sqrt((d ** 2).sum(-1))
    s = int(g.stride)
    a, b = np.divmod(np.arange(s * s), s)
    pix = lambda t: np.stack([g.yx[t, 0] * s + a, g.yx[t, 1] * s + b], 1)   # (s^2, 2) of token t
    D = np.zeros((g.T, g.Tk))
    kp = [np.concatenate([pix(u) for u in bn]) for bn in g.bins]
    for t in range(g.T):
        pt = pix(t)
        for j in range(g.Tk):
            D[t, j] = np.sqrt(((pt[:, None, :] - kp[j][None]) ** 2).sum(-1)).mean()
    return D


def _nan_heads(tr):
    return np.full((len(tr.L), tr.Hx), np.nan)


def s_distance(tr, i, o):
    out, drop, pl = _nan_heads(tr), _nan_heads(tr), _nan_heads(tr)
    neg = np.zeros(len(tr.L))
    hm = np.full(len(tr.L), np.nan)
    for k, g in enumerate(tr.L):
        A = g.maps("attn", i)
        D = _key_table(g, o["distance"]) if g.sra else _pixel_table(g, o["distance"])
        Gs = [g.dense(A[h]) for h in range(A.shape[0])]
        if any((G[g.p:] < 0).any() for G, _ in Gs) or (A < 0).any():
            neg[k] = 1
            continue
        Q = g.queries()
        if not len(Q):  # a class-attention layer: its one query has no place on the grid
            out[k], pl[k], drop[k], hm[k] = np.nan, np.nan, 0, np.nan
            out[k, len(Gs):] = pl[k, len(Gs):] = drop[k, len(Gs):] = np.nan
            continue
        for h, (G, pad) in enumerate(Gs):
            if g.sra:  # every reduced key has a place; no prefix tokens
                W, less = G[Q], np.zeros(len(Q))
            else:
                W = G[g.p:, g.p:][Q]
                less = (pad[g.p:] + G[g.p:, :g.p].sum(1))[Q]
            m = (W * D[Q]).sum(1)
            if o["renorm"]:
                s = W.sum(1)
                drop[k, h] = (s <= 0).sum()
                m = m[s > 0] / s[s > 0]
            else:
                drop[k, h] = 0
            out[k, h] = m.mean()
            pl[k, h] = less.mean()
        hm[k] = out[k, :len(Gs)].mean()
    return {"distance": out, "head_mean": hm, "negative_maps": neg, "dropped_rows": drop,
            "positionless_mass": pl, "stage_mean": _stage_mean(tr, hm)}


def s_entropy(tr, i, o):
    out, drop = _nan_heads(tr), _nan_heads(tr)
    neg = np.zeros(len(tr.L))
    hm = np.full(len(tr.L), np.nan)
    nv = np.full(len(tr.L), np.nan)
    for k, g in enumerate(tr.L):
        A = g.maps("attn", i)
        if any((g.dense(A[h])[0][g.p:] < 0).any() for h in range(A.shape[0])) or (A < 0).any():
            neg[k] = 1  # a signed map is no distribution over keys: left out
            continue
        V = g.valid()
        rows = [t for t in range(g.T) if V[t].any() or not (g.window or g.cls_scope)]
        nv[k] = np.mean([V[t].sum() for t in rows])
        for h in range(A.shape[0]):
            G, _ = g.dense(A[h])
            Hs, d = [], 0
            for t in rows:
                a = np.clip(G[t, V[t]], 0, None)
                d += a.sum() <= 0
                if a.sum() <= 0 or (o["normalize"] and len(a) < 2):
                    continue
                p = a / a.sum()
                e = -sum(x * np.log(x) for x in p if x > 0)
                Hs.append(e / np.log(len(a)) if o["normalize"] else e)
            out[k, h] = np.mean(Hs) if Hs else np.nan
            drop[k, h] = d
        hm[k] = out[k, :A.shape[0]].mean()
    return {"entropy": out, "head_mean": hm, "valid_keys": nv, "negative_maps": neg, "dropped_rows": drop,
            "stage_mean": _stage_mean(tr, hm)}


def s_als(tr, i, o):
    out, drop = _nan_heads(tr), _nan_heads(tr)
    neg = np.zeros(len(tr.L))
    hm = np.full(len(tr.L), np.nan)
    half = (o["window"] or 3) // 2
    for k, g in enumerate(tr.L):
        if o["map"] == "softmax":
            S = g.maps("scores", i)
            E = np.exp(S - S.max(-1, keepdims=True))
            A = E / E.sum(-1, keepdims=True)
        else:
            A = g.maps("attn", i)
            if (A < 0).any():
                neg[k] = 1
                continue
        dy = np.abs(g.yx[:, None, 0] - g.yx[None, :, 0])
        dx = np.abs(g.yx[:, None, 1] - g.yx[None, :, 1])
        N = (dy <= half) & (dx <= half)
        if g.sra:  # the map spread back onto the tokens (F S), then the token neighbourhood
            N = N.astype(np.float64) @ g.S.T   # (T, T'): key j's share of tokens near t
        Q = g.queries()
        if not len(Q):  # a class-attention layer: no query on the grid
            drop[k, :A.shape[0]] = 0
            continue
        for h in range(A.shape[0]):
            G, pad = g.dense(A[h])
            w = (G[g.p:, g.p:] * N).sum(1)
            if o["prefix"] == "include":
                w = w + G[g.p:, :g.p].sum(1)
            tot = G[g.p:].sum(1) + pad[g.p:]
            w, tot = w[Q], tot[Q]
            if o["map"] == "attn" and o["rows"] == "normalise":
                ok = tot > 0
                drop[k, h] = (~ok).sum()
                out[k, h] = np.mean(w[ok] / tot[ok])
            else:
                drop[k, h] = 0
                out[k, h] = w.mean()
        hm[k] = out[k, :A.shape[0]].mean()
    return {"score": out, "head_mean": hm, "negative_maps": neg, "dropped_rows": drop,
            "stage_mean": _stage_mean(tr, hm)}


def s_diag(tr, i, o):
    sym, dg = _nan_heads(tr), _nan_heads(tr)
    sm, dm = np.full(len(tr.L), np.nan), np.full(len(tr.L), np.nan)
    for k, g in enumerate(tr.L):
        if g.sra and not (g.Tk == g.T and all(b == [u] for u, b in enumerate(g.bins))):
            continue  # T x T' over reduced keys: no diagonal (kept when the keys are the tokens)
        if g.cls_scope:
            continue  # one class row: no square map
        if o["diag"] == "scores" and str(g.g.attrs.get("mechanism", "")) != "less":
            continue  # LaViT's terms are on the less-attention layers' scores
        A = g.maps("scores" if o["diag"] == "scores" else "attn", i)
        for h in range(A.shape[0]):
            G, _ = g.dense(A[h])
            ss, dd = [], []
            for _, qt, _ in g.problems():
                R = qt[qt >= 0]
                S = G[np.ix_(R, R)]
                n = len(R)
                ss.append(np.abs(S - S.T).sum())
                dd.append(sum((n - 1) * S[a, a] - (S[a].sum() - S[a, a]) for a in range(n)))
            sym[k, h], dg[k, h] = np.mean(ss), np.mean(dd)
        sm[k], dm[k] = sym[k, :A.shape[0]].mean(), dg[k, :A.shape[0]].mean()
    return {"symmetry": sym, "diagonality": dg, "symmetry_head_mean": sm, "diagonality_head_mean": dm}


def s_qk(tr, i, o):
    th = o["thresholds"]
    out = {}
    for w in ("q", "k"):
        r = np.full((len(tr.L), len(th)), np.nan)
        ne = np.zeros(len(tr.L))
        cnt = np.zeros((tr.n_stages, len(th)))
        tot = np.zeros(tr.n_stages)
        for k, g in enumerate(tr.L):
            key = "layers/%02d/%s" % (g.l, w)
            if key not in tr.f:
                continue
            x = tr.f[key][i].astype(np.float32)
            if w == "q" and o["qscale"] == "scaled" and g.scale:
                x = x * np.float32(g.scale)
            c = np.array([(np.abs(x) > np.float32(t)).sum() for t in th], float)
            r[k] = c / x.size
            ne[k] = x.size
            cnt[g.stage] += c
            tot[g.stage] += x.size
        out[w + "_fraction"] = r
        out[w + "_entries"] = ne
        with np.errstate(invalid="ignore"):
            out[w + "_stage"] = np.where(tot[:, None] > 0, cnt / np.where(tot > 0, tot, 1)[:, None], np.nan)
    return out


def _same_support(a, b):
    if a.window != b.window or (a.gh, a.gw, a.p, a.shift) != (b.gh, b.gw, b.p, b.shift):
        return False
    if a.sra or b.sra:
        return a.sra and b.sra and a.bins == b.bins
    if a.cls_scope != b.cls_scope:
        return False
    return not a.window or (np.array_equal(a.tok, b.tok) and a.wins == b.wins)


def _three(A, B):
    Q = A.shape[0]
    return [nanmean([cos(A[:, t], B[:, t]) for t in range(A.shape[1])]) if Q >= 2 else np.nan,
            nanmean([cos(A[r], B[r]) for r in range(Q)]), cos(A.ravel(), B.ravel())]


def s_similarity(tr, i, o):
    L, H = len(tr.L), tr.Hx
    dense = [[g.dense(g.maps("attn", i)[h])[0] for h in range(tr.H[k])] for k, g in enumerate(tr.L)]
    ph = np.full((3, H, L, L), np.nan)
    for a in range(L):
        for b in range(L):
            if not _same_support(tr.L[a], tr.L[b]):
                continue
            for h in range(min(tr.H[a], tr.H[b])):
                A, B = dense[a][h], dense[b][h]
                if tr.L[a].cls_scope:  # the class row is the layer's only query row
                    A, B = A[:1], B[:1]
                # key columns: only those of tokens (every column of the grid-space map)
                ph[:, h, a, b] = _three(A, B)
    hm = np.array([[[nanmean(ph[d, :, a, b]) for b in range(L)] for a in range(L)] for d in range(3)])
    adj = np.full((3, L), np.nan)
    for a in range(L):
        prev = [b for b in range(a) if _same_support(tr.L[a], tr.L[b])]
        if prev:
            adj[:, a] = hm[:, a, prev[-1]]
    c = tr.L[tr.coarse]
    pooled_maps = []
    for k, g in enumerate(tr.L):
        F = np.mean(dense[k], 0)[g.p:, g.p:]
        U, Dm = g.transfer_to(c)
        if g.sra:  # a reduced key's column goes to the coarse cell that holds its centre
            Dm = np.zeros((c.gh * c.gw, g.Tk))
            for j in range(g.Tk):
                cc = c.footprint_cell(g.kcentre[j])
                if cc >= 0:
                    Dm[cc, j] = 1
        pooled_maps.append(U @ F @ Dm.T)
    po = np.array([[[_three(pooled_maps[a], pooled_maps[b])[d] for b in range(L)] for a in range(L)]
                   for d in range(3)])
    return {"per_head": ph, "head_mean": hm, "adjacent": adj, "pooled": po}


def s_rollout(tr, i, o):
    fuse = {"mean": lambda x: x.mean(0), "max": lambda x: x.max(0), "min": lambda x: x.min(0)}[o["fusion"]]
    a = []
    for g in tr.L:
        A = g.maps("attn", i)
        F = fuse(np.array([g.dense(A[h])[0] for h in range(A.shape[0])]))
        if g.sra:  # the reduced keys' weights shared by the tokens they reduce: F S (T x T)
            F = F @ g.S
        M = F + np.eye(g.T)
        a.append(M / M.sum(1, keepdims=True))
    maps = []
    g0 = tr.L[0]
    for l, g in enumerate(tr.L):
        e = np.zeros(g.T)
        if g.p:
            e[0] = 1
        else:
            e[:] = 1.0 / g.T
        R = a[l]
        for k in range(l - 1, -1, -1):
            f = tr.L[k]
            nx = tr.L[k + 1]
            if (f.gh, f.gw, f.stride, f.p) != (nx.gh, nx.gw, nx.stride, nx.p):
                U, _ = f.transfer_to(nx)                     # (T_{k+1} grid, T_k grid)
                Uf = np.zeros((nx.T, f.T))
                if nx.p == f.p:
                    Uf[:f.p, :f.p] = np.eye(f.p)
                # else CaiT: the class token enters at its first class-attention block, a parameter
                # with no source below: its row of the transfer is zero
                Uf[nx.p:, f.p:] = U
                R = R @ Uf
            R = R @ a[k]
        maps.append((e @ R)[g0.p:])
    return {"map": np.array(maps)}


def s_evolution(tr, i, o):
    c = tr.L[tr.coarse]
    X = [tr.f["layers/%02d/tokens" % g.l][i].astype(np.float64) for g in tr.L]
    P = [g.transfer_to(c)[0] @ X[k][g.p:] for k, g in enumerate(tr.L)]
    L = len(P)
    G = [x @ x.T for x in P]
    hs = np.array([[hsic(o)(G[a], G[b]) for b in range(L)] for a in range(L)])
    d = np.sqrt(np.diag(hs))
    alike = lambda a, b: (a.T, a.D, a.gh, a.gw) == (b.T, b.D, b.gh, b.gw)
    tc = lambda a, b: nanmean([cos(a[t], b[t]) for t in range(a.shape[0])])
    cf = np.array([tc(X[k], X[-1]) if alike(tr.L[k], tr.L[-1]) else np.nan for k in range(L)])
    cp = np.array([tc(X[k], X[tr.layers.index(l - 1)])
                   if l - 1 in tr.layers and alike(tr.L[k], tr.L[tr.layers.index(l - 1)]) else np.nan
                   for k, l in enumerate(tr.layers)])
    return {"cos_final": cf, "cos_prev": cp, "cka": hs / np.outer(d, d), "hsic": hs}


STAGED = {"als": s_als, "similarity": s_similarity, "qk": s_qk, "evolution": s_evolution,
          "distance": s_distance, "entropy": s_entropy, "rollout": s_rollout, "diag": s_diag}


def s_missing(tr, name, o):
    need = {"qk": ["q", "k"], "evolution": ["tokens"]}.get(name, ["attn"])
    if name == "diag" and o["diag"] == "scores":
        if not any(str(g.g.attrs.get("mechanism", "")) == "less" for g in tr.L):
            return "no less-attention layer recorded"
        need = ["scores"]
    if name == "als" and o["map"] == "softmax":
        need = ["scores"]
    lack = [q for q in need if q not in tr.q]
    if lack:
        return "the trace lacks " + ",".join(lack)
    if name == "rollout" and (tr.layers != list(range(tr.depth)) or o["discard"] != 0):
        return "not every layer recorded, or a discard ratio"
    if name == "rollout" and any(g.signed for g in tr.L):
        return "signed maps (talking heads): rollout composes row-stochastic maps"
    return None


def cka_images(tr, o, n):
    """Kornblith et al.'s linear CKA with images as the examples: image k's block output
    flattened (T x D) is row k of X_l; consecutive minibatches of cka_batch images (the last one
    if it has >= 4), the chosen HSIC per minibatch, summed, then the ratio (Nguyen et al.)."""
    m = min(o["cka_batch"], n)
    L = len(tr.layers)
    hs = np.zeros((L, L))
    for start in range(0, n, m):
        idx = range(start, min(start + m, n))
        if len(idx) < 4:
            continue
        X = [np.array([tr.get(l, "tokens", k).ravel() for k in idx]) for l in tr.layers]
        G = [x @ x.T for x in X]
        hs += np.array([[hsic(o)(G[a], G[b]) for b in range(L)] for a in range(L)])
    d = np.sqrt(np.diag(hs))
    c = hs / np.outer(d, d)
    return {"cka_images": c, "cka_images_final": c[:, -1]}


def derived(name, mean, tr, o):
    if name == "als" and isinstance(tr, StagedTrace):
        return {}                     # MaiT's search is for single-grid ViTs
    if name == "als":
        s = mean["score"]
        win = np.array([[als_window(tr, l, h, o) for h in tr.heads] for l in tr.layers], float)
        return {"recommendation": np.where(s >= o["high"], 2, np.where(s > o["low"], 1, 0)).astype(float),
                "window": win, "search": mait_search(tr, s, o)}
    if name == "evolution":
        h = mean["hsic"]
        d = np.sqrt(np.diag(h))
        mb = h / np.outer(d, d)
        out = {"cka_minibatch": mb, "cka_minibatch_final": mb[:, -1]}
        if tr.n >= 4:
            out.update(cka_images(tr, o, tr.n))
        return out
    return {}


_tq = {}


def t975(dof):
    """Student t quantile at 0.975, from the regularised incomplete beta function."""
    if dof not in _tq:
        cdf = lambda t: 1 - mpmath.betainc(dof / 2.0, 0.5, 0, dof / (dof + t * t), regularized=True) / 2
        lo, hi = mpmath.mpf(0), mpmath.mpf(1000)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if cdf(mid) < 0.975 else (lo, mid)
        _tq[dof] = float((lo + hi) / 2)
    return _tq[dof]


def stats(per_image):
    x = np.asarray(per_image)                 # (N, ...)
    ok = ~np.isnan(x)
    n = ok.sum(0)
    xs = np.where(ok, x, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, xs.sum(0) / np.maximum(n, 1), np.nan)
        dev = np.where(ok, x - mean, 0)
        sd = np.where(n > 1, np.sqrt((dev ** 2).sum(0) / np.maximum(n - 1, 1)), np.nan)
        tq = np.vectorize(lambda k: t975(int(k - 1)) if k > 1 else np.nan, otypes=[float])(n)
        half = tq * sd / np.sqrt(np.maximum(n, 1))
    return {"mean": mean, "std": sd, "ci95_low": mean - half, "ci95_high": mean + half, "count": n}


def is_staged(path):
    with h5py.File(path, "r") as f:
        return int(f.attrs["format_version"]) >= 3


def analyse(path, o, metrics=None, limit=None):
    staged = is_staged(path)
    tr = StagedTrace(path) if staged else Trace(path)
    if limit:
        tr.n = min(tr.n, limit)
    res = {}
    for name, fn in (STAGED if staged else METRICS).items():
        if metrics and name not in metrics or (s_missing if staged else missing)(tr, name, o):
            continue
        per = [fn(tr, i, o) for i in range(tr.n)]
        outs = {k: np.array([p[k] for p in per]) for k in per[0]}
        st = {k: stats(v) for k, v in outs.items()}
        res[name] = (outs, st, derived(name, {k: s["mean"] for k, s in st.items()}, tr, o))
    return res


def write_expected(path, groups):
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["description"] = "numpy reference for tests/test_analysis.c (tools/analysis_ref.py)"
        for gname, res in groups.items():
            for name, (outs, st, der) in res.items():
                for k, v in outs.items():
                    base = "%s/analysis/%s/%s/" % (gname, name, k)
                    f[base + "per_image"] = v
                    for s, a in st[k].items():
                        f[base + s] = a
                for k, v in der.items():
                    f["%s/analysis/%s/%s" % (gname, name, k)] = v


def fixtures(exe):
    out = os.path.join(FIXTURES, "analysis")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    # model, images, extra quantities: a class token with every mechanism (less blocks have
    # no q/k; internals for the LSLA figure), two prefix tokens, and no prefix token (mean-row
    # rollout)
    runs = [("mech_cls", 5, ["internals"]), ("deit_dist", 4, []), ("vit_gap", 4, [])]
    for model, n, extra in runs:
        x = rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
        yy, xx = np.mgrid[0:32, 0:32] / 31.0
        for k in range(n):  # some spatial structure so that attention is not uniform noise
            x[k] += 2.0 * np.sin((k + 1) * 3.0 * xx + yy * 2)[None]
        npy = os.path.join(out, "_inputs.npy")
        np.save(npy, x)
        trace = os.path.join(out, model + ".h5")
        subprocess.run([exe, "record", "--model", os.path.join(FIXTURES, model), "--images", npy,
                        "--out", trace, "--record", ",".join(["attn", "scores", "q", "k", "tokens"] + extra), "--dtype", "f16",
                        "--compress", "deflate:9", "--force", "-q", "--threads", "1"], check=True)
        os.remove(npy)
        groups = {"default": analyse(trace, DEFAULT), "variant": analyse(trace, VARIANT)}
        groups["als_softmax"] = analyse(trace, ALS_SOFTMAX, metrics=["als"])
        write_expected(os.path.join(out, model + ".expected.h5"), groups)
        print("wrote", trace, os.path.getsize(trace), "bytes")


def compare(trace, results, o=DEFAULT):
    """Checks a results file made with the default options (statistics and derived results)."""
    ref = analyse(trace, o)
    staged = is_staged(trace)
    tr = StagedTrace(trace) if staged else Trace(trace)
    miss = s_missing if staged else missing
    for name in METRICS:
        if miss(tr, name, o):
            print("%-11s skipped: %s" % (name, miss(tr, name, o)))
    worst = 0.0
    with h5py.File(results, "r") as f:
        for name, (outs, st, der) in ref.items():
            if "analysis/" + name not in f:
                continue
            pairs = [("%s/%s" % (k, s), want) for k in outs for s, want in st[k].items()]
            pairs += [(k, want) for k, want in der.items()]
            for key, want in pairs:
                path = "analysis/%s/%s" % (name, key)
                if path not in f:
                    print("%-11s %-32s missing" % (name, key))
                    worst = np.inf
                    continue
                got = f[path][()]
                if not np.array_equal(np.isnan(got), np.isnan(want)):
                    print("%-11s %-32s NaN pattern differs" % (name, key))
                    worst = np.inf
                    continue
                e = np.nanmax(np.abs(got - want) / np.maximum(1, np.abs(want))) if np.any(~np.isnan(want)) else 0
                worst = max(worst, e)
                print("%-11s %-32s max rel err %.3g" % (name, key, e))
    print("worst", worst)
    return worst < 1e-6


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "fixtures":
        fixtures(sys.argv[2])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "compare":
        opts = {"default": DEFAULT, "variant": STAGED_VARIANT, "softmax": ALS_SOFTMAX}
        sys.exit(0 if compare(sys.argv[2], sys.argv[3], opts[sys.argv[4] if len(sys.argv) == 5 else "default"]) else 1)
    else:
        print(__doc__)
        sys.exit(2)

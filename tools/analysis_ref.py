#!/usr/bin/env python3
"""analysis_ref.py: an independent numpy implementation of every `attnscope analyze` metric
(docs/analysis.md), and the script that writes the analysis test fixtures.

    python3 tools/analysis_ref.py fixtures BUILD/attnscope     # rewrites tests/fixtures/analysis/
    python3 tools/analysis_ref.py compare TRACE.h5 RESULTS.h5  # checks results against numpy

`fixtures` records small traces with attnscope from the committed fixture models, then
computes every metric here (per image, then mean / sample std / 95% t interval over images)
and writes <name>.expected.h5, laid out like attnscope's results (/default/analysis/... for
default options, /variant/analysis/... for VARIANT_ARGS). tests/test_analysis.c compares.
Needs numpy, h5py and mpmath (Debian: python3-numpy python3-h5py python3-mpmath).
"""
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


def analyse(path, o, metrics=None, limit=None):
    tr = Trace(path)
    if limit:
        tr.n = min(tr.n, limit)
    res = {}
    for name, fn in METRICS.items():
        if metrics and name not in metrics or missing(tr, name, o):
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
    tr = Trace(trace)
    for name in METRICS:
        if missing(tr, name, o):
            print("%-11s skipped: %s" % (name, missing(tr, name, o)))
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
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(0 if compare(sys.argv[2], sys.argv[3]) else 1)
    else:
        print(__doc__)
        sys.exit(2)

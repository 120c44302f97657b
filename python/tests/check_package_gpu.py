#!/usr/bin/env python3
"""Device check of the PyTorch package (python/mla_toolchain) against the CPU twin, through the C++ path.

On the same inputs (random bf16 queries and paged cache, pages a random permutation of the pool,
NaN-poisoned page tails and unused pages, int32-max page ids past each request):
  1. mla_decode_with_kvcache (GPU) vs quant::decode_twin_bf16 (the CPU twin, reached through the
     same shared library's mla_decode_capi_twin with the GPU's number of parts) and vs a float64
     reference; d_c 512 and the TPLA slices 256 / 128, pages 64 / 128, s_q 1 / 2, 16..128 heads.
  2. flash_mla_with_kvcache on each of its paths (direct, tokens folded into heads, tokens folded
     into requests; causal or not; s_q up to 4) vs the float64 reference, and on the direct path
     bit-equal to mla_decode_with_kvcache.
  3. CUDA graphs: a decode step captured (a FlashMLASchedMeta made inside it, two
     flash_mla_with_kvcache calls sharing it), inputs and lengths changed in place, replayed:
     bit-equal to an eager step on the new inputs.
  4. Unsupported arguments raise UnsupportedArgument naming the argument.
  5. Planned calls: one mla_decode_plan, then mla_decode_with_kvcache(plan=) on two caches (two
     layers of a step) and the first again: bit-equal to the same calls scheduling themselves
     (s_q 1 / 2, 16..128 heads, d_c 512 / 256, a request split many ways); a plan of another shape,
     of the FP8 kernels' kind or not a plan at all is refused (UnsupportedArgument naming the field).
  6. flash_mla_with_kvcache with one FlashMLASchedMeta for two calls (two layers: the first makes
     the plan, the second reads it) on each of its three paths: bit-equal to the same calls each
     with a fresh meta.
Exit 0 when every check passes, 1 otherwise, 77 (skip) without torch or a CUDA device.

    MLA_TOOLCHAIN_LIB_DIR=build/tools/mla-bench PYTHONPATH=python python3 python/tests/check_package_gpu.py
"""
import argparse
import ctypes
import json
import sys

from check_common import Report, lse_diff, rel_l2, torch_or_skip

torch = torch_or_skip()

import mla_toolchain as mt  # noqa: E402
from mla_toolchain import _lib  # noqa: E402

# Tolerances (tests/kernels/decode_case.hpp): GPU vs its twin differ only in fp32 summation order;
# vs float64, SPEC section 5's BF16 bounds.
TWIN_REL_L2 = 1e-3
TWIN_LSE_ABS = 1e-4
REF_REL_L2 = 8e-3
REF_LSE_ABS = 1e-3
SENTINEL_PAGE = 2**31 - 1


class Problem:
    """A random paged decode problem, built on the host, copied to the device."""

    def __init__(self, seed, lens, s_q, heads, d_c, d_r=64, page=64):
        g = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.lens, self.s_q, self.heads, self.d_c, self.d_r, self.page = lens, s_q, heads, d_c, d_r, page
        self.dim = d_c + d_r
        b = len(lens)
        self.max_pages = max(1, max((L + page - 1) // page for L in lens)) + 1  # + 1: an unused column
        num_pages = b * self.max_pages
        perm = torch.randperm(num_pages, generator=g).to(torch.int32).view(b, self.max_pages)
        cache = (torch.randn(num_pages, page, 1, self.dim, generator=g) / 10).clamp_(-1, 1)
        table = perm.clone()
        for i, L in enumerate(lens):
            used = (L + page - 1) // page
            cache[perm[i, used:].long()] = float("nan")  # pages past L: never read
            if L % page:
                cache[perm[i, used - 1].long(), L % page:] = float("nan")  # the tail of the last page
            table[i, used:] = SENTINEL_PAGE
        self.q_h = (torch.randn(b, s_q, heads, self.dim, generator=g) / 10).clamp_(-1, 1).to(torch.bfloat16)
        self.cache_h = cache.to(torch.bfloat16)
        self.table_h = table
        self.lens_h = torch.tensor(lens, dtype=torch.int32)
        self.q, self.cache = self.q_h.cuda(), self.cache_h.cuda()
        self.table, self.seqlens = self.table_h.cuda(), self.lens_h.cuda()
        self.scale = self.dim ** -0.5
        self.name = f"B={b} s_q={s_q} H={heads} d_c={d_c} page={page} L={lens}"

    def sibling(self):
        """Another problem of this shape and these lengths: another layer's query, cache and pages."""
        return Problem(self.seed + 1000, self.lens, self.s_q, self.heads, self.d_c, self.d_r, self.page)

    def twin(self, parts):
        """quant::decode_twin_bf16 on host copies of the inputs (out [b, s_q, h, d_c], lse [b, s_q, h])."""
        b = len(self.lens)
        out = torch.empty(b, self.s_q, self.heads, self.d_c, dtype=torch.bfloat16)
        lse = torch.empty(b, self.s_q, self.heads, dtype=torch.float32)
        err = ctypes.create_string_buffer(_lib.ERR_LEN)
        rc = _lib.decode.get().mla_decode_capi_twin(
            self.q_h.data_ptr(), self.cache_h.data_ptr(), self.table_h.data_ptr(), self.lens_h.data_ptr(),
            out.data_ptr(), lse.data_ptr(), b, self.s_q, self.heads, self.d_c, self.d_r, self.cache_h.shape[0],
            self.page, self.max_pages, self.scale, 0, parts, err, _lib.ERR_LEN)
        _lib.check(rc, err, "decode twin")
        return out, lse

    def reference(self, causal=True):
        """float64: out [b, s_q, h, d_c] and natural-log lse [b, s_q, h] (-inf, out 0 for a row without keys)."""
        b = len(self.lens)
        out = torch.zeros(b, self.s_q, self.heads, self.d_c, dtype=torch.float64)
        lse = torch.full((b, self.s_q, self.heads), float("-inf"), dtype=torch.float64)
        q = self.q_h.double()
        for i, L in enumerate(self.lens):
            pages = self.table_h[i, :(L + self.page - 1) // self.page].long()
            kv = self.cache_h[pages].double().reshape(-1, self.dim)[:L]
            for t in range(self.s_q):
                n = max(L - (self.s_q - 1 - t), 0) if causal else L
                if n == 0:
                    continue
                s = (q[i, t] @ kv[:n].T) * self.scale  # [h, n]
                lse[i, t] = torch.logsumexp(s, dim=-1)
                out[i, t] = torch.softmax(s, dim=-1) @ kv[:n, :self.d_c]
        return out, lse


def check_against_twin(rep, p):
    out, lse = mt.mla_decode_with_kvcache(p.q, p.cache, p.table, p.seqlens, p.d_c, p.scale)
    torch.cuda.synchronize()
    parts = mt.decode_parts(p.q, p.d_c)
    t_out, t_lse = p.twin(parts)
    r_out, r_lse = p.reference()
    e_twin = rel_l2(out, t_out)
    l_twin, nf_twin = lse_diff(lse, t_lse)
    e_ref = rel_l2(out, r_out)
    l_ref, nf_ref = lse_diff(lse, r_lse)
    e_twin_ref = rel_l2(t_out, r_out)
    ok = (torch.isfinite(out.float()).all().item() and e_twin < TWIN_REL_L2 and l_twin < TWIN_LSE_ABS and nf_twin
          and e_ref < REF_REL_L2 and l_ref < REF_LSE_ABS and nf_ref and e_twin_ref < REF_REL_L2)
    rep.add("gpu_vs_twin", p.name, ok, parts=parts, rel_l2_vs_twin=e_twin, lse_vs_twin=l_twin,
            rel_l2_vs_f64=e_ref, lse_vs_f64=l_ref, twin_rel_l2_vs_f64=e_twin_ref)


def check_flashmla_path(rep, p, causal, path):
    meta, _ = mt.get_mla_metadata()
    out, lse = mt.flash_mla_with_kvcache(p.q, p.cache, p.table, p.seqlens, p.d_c, meta, None, softmax_scale=p.scale,
                                         causal=causal)
    torch.cuda.synchronize()
    r_out, r_lse = p.reference(causal)
    r_lse_fm = r_lse.transpose(1, 2).clone()
    r_lse_fm[r_lse_fm == float("-inf")] = float("inf")  # FlashMLA's value for a row without keys
    shape_ok = (tuple(out.shape) == (len(p.lens), p.s_q, p.heads, p.d_c) and out.dtype == torch.bfloat16
                and tuple(lse.shape) == (len(p.lens), p.heads, p.s_q) and lse.dtype == torch.float32)
    e_ref = rel_l2(out, r_out)
    l_ref, nf_ref = lse_diff(lse, r_lse_fm)
    ok = shape_ok and e_ref < REF_REL_L2 and l_ref < REF_LSE_ABS and nf_ref
    figures = {"rel_l2_vs_f64": e_ref, "lse_vs_f64": l_ref}
    if path == "direct":  # the same single kernel call as mla_decode_with_kvcache
        o2, l2 = mt.mla_decode_with_kvcache(p.q, p.cache, p.table, p.seqlens, p.d_c, p.scale)
        l2 = l2.transpose(1, 2).masked_fill(l2.transpose(1, 2) == float("-inf"), float("inf"))
        same = torch.equal(out, o2) and torch.equal(lse, l2)
        ok = ok and same
        figures["bit_equal_to_own_entry"] = same
    rep.add(f"flash_mla_with_kvcache[{path}, causal={causal}]", p.name, ok, **figures)


def check_graph(rep, p, causal):
    """Capture a decode step (its FlashMLASchedMeta made inside the capture, so the schedule is
    captured too; two calls share it, as two layers of the step), change the queries and the lengths
    in place, replay: equal to an eager step on the new inputs."""
    q2 = p.q.flip(2).contiguous()  # the second layer's query

    def step():
        meta, _ = mt.get_mla_metadata()
        return [t for q in (p.q, q2) for t in mt.flash_mla_with_kvcache(q, p.cache, p.table, p.seqlens, p.d_c, meta,
                                                                          None, softmax_scale=p.scale, causal=causal)]

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up outside the capture (the library is loaded, the parts cached)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    g = torch.Generator(device="cuda").manual_seed(7)
    p.q.copy_((torch.randn(p.q.shape, device="cuda", generator=g) / 10).clamp_(-1, 1).to(torch.bfloat16))
    q2.copy_(p.q.flip(2))
    p.seqlens.copy_((p.seqlens - torch.arange(len(p.lens), device="cuda", dtype=torch.int32) * 37).clamp_(min=0))
    graph.replay()
    eager = step()
    torch.cuda.synchronize()
    same = all(torch.equal(a, b) for a, b in zip(captured, eager))
    rep.add("cuda_graph_replay", f"{p.name} causal={causal}, 2 calls on one meta", same, bit_equal_to_eager=same,
            new_lens=p.seqlens.tolist())


def check_planned(rep, p):
    """One mla_decode_plan, then planned calls on p's cache, on another cache (p.sibling(): another
    layer of the step, its own query and pages, the same lengths) and on p's again: each bit-equal
    to the same call scheduling itself."""
    other = p.sibling()
    plan = mt.mla_decode_plan(p.q, p.seqlens, p.d_c)
    layers = (p, other, p)
    planned = [mt.mla_decode_with_kvcache(x.q, x.cache, x.table, p.seqlens, p.d_c, p.scale, plan=plan) for x in layers]
    alone = [mt.mla_decode_with_kvcache(x.q, x.cache, x.table, p.seqlens, p.d_c, p.scale) for x in layers]
    torch.cuda.synchronize()
    same = all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(planned, alone))
    layers_differ = not torch.equal(alone[0][0], alone[1][0])  # the second cache really is another one
    rep.add("planned_decode", f"{p.name}, 3 calls on one plan (2 caches)", same and layers_differ,
            bit_equal_to_unplanned=same, layers_differ=layers_differ, parts=plan.parts)


def check_plan_refusals(rep):
    """A plan refuses a call of another shape (the message names the field), another kernel's call
    and a non-plan."""
    p = Problem(41, [100, 3000], 1, 64, 512)
    plan = mt.mla_decode_plan(p.q, p.seqlens, p.d_c)

    def wide(d_c, d_r):  # a query and cache of other widths, p's lengths and pages
        q = torch.zeros(2, 1, 64, d_c + d_r, dtype=torch.bfloat16, device="cuda")
        return q, torch.zeros(p.cache.shape[0], p.page, 1, d_c + d_r, dtype=torch.bfloat16, device="cuda")

    q_256, cache_256 = wide(256, 64)
    q_128r, cache_128r = wide(512, 128)
    fp8_cache = mt.alloc_kv_cache("fp8", p.cache.shape[0], p.page, 512, 64)
    run = mt.mla_decode_with_kvcache
    cases = [
        ("plan: made for batch = ", lambda: run(p.q[:1], p.cache, p.table[:1], p.seqlens[:1], 512, plan=plan)),
        ("plan: made for s_q = ", lambda: run(torch.cat([p.q, p.q], 1), p.cache, p.table, p.seqlens, 512, plan=plan)),
        ("plan: made for heads = ", lambda: run(p.q[:, :, :32], p.cache, p.table, p.seqlens, 512, plan=plan)),
        ("plan: made for head_dim_v = ", lambda: run(q_256, cache_256, p.table, p.seqlens, 256, plan=plan)),
        ("plan: made for d_r = ", lambda: run(q_128r, cache_128r, p.table, p.seqlens, 512, plan=plan)),
        ("plan = FlashMLASchedMeta", lambda: run(p.q, p.cache, p.table, p.seqlens, 512, plan=mt.get_mla_metadata()[0])),
        ("plan: made by mla_decode_plan",
         lambda: mt.fp8_decode_with_kvcache(p.q, fp8_cache, p.table, p.seqlens, 512, plan=plan)),
    ]
    rep.expect_refusals("planned_decode_refusal", cases, mt.UnsupportedArgument)


def check_flashmla_shared_meta(rep, p, causal, path):
    """Two flash_mla_with_kvcache calls on one FlashMLASchedMeta (two layers of a step: p's query
    and cache, then another layer's, the same lengths): the first makes the plan, the second reads
    it; bit-equal to the same two calls each on a fresh meta."""
    other = p.sibling()

    def call(x, meta):
        return mt.flash_mla_with_kvcache(x.q, x.cache, x.table, p.seqlens, p.d_c, meta, None, softmax_scale=p.scale,
                                         causal=causal)

    meta, _ = mt.get_mla_metadata()
    shared = [call(p, meta)]
    plan = meta._plan
    shared.append(call(other, meta))
    plan_kept = plan is not None and meta._plan is plan  # the second call made no plan of its own
    fresh = [call(x, mt.get_mla_metadata()[0]) for x in (p, other)]
    torch.cuda.synchronize()
    same = all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(shared, fresh))
    rep.add(f"flash_mla_shared_meta[{path}, causal={causal}]", p.name, same and plan_kept, bit_equal_to_fresh_meta=same,
            plan_kept=plan_kept)


def check_errors(rep):
    b, h, d = 2, 16, 576
    q = torch.zeros(b, 1, h, d, dtype=torch.bfloat16, device="cuda")
    cache = torch.zeros(4, 64, 1, d, dtype=torch.bfloat16, device="cuda")
    table = torch.zeros(b, 2, dtype=torch.int32, device="cuda")
    lens = torch.ones(b, dtype=torch.int32, device="cuda")
    cases = [
        ("q.dtype", dict(q=q.half())),
        ("k_cache.shape[2]", dict(k_cache=torch.zeros(4, 64, 2, d, dtype=torch.bfloat16, device="cuda"))),
        ("k_cache.shape[1]", dict(k_cache=torch.zeros(4, 32, 1, d, dtype=torch.bfloat16, device="cuda"))),
        ("head_dim_v", dict(head_dim_v=448)),
        ("is_fp8_kvcache", dict(is_fp8_kvcache=True)),
        ("indices", dict(indices=torch.zeros(b, 1, 64, dtype=torch.int32, device="cuda"))),
        ("attn_sink", dict(attn_sink=torch.zeros(h, device="cuda"))),
        ("q.shape[2]", dict(q=torch.zeros(b, 1, 256, d, dtype=torch.bfloat16, device="cuda"))),
        ("cache_seqlens.dtype", dict(cache_seqlens=lens.long())),
        ("block_table.shape", dict(block_table=table[:1])),
        ("softmax_scale", dict(softmax_scale=float("nan"))),
    ]
    for name, over in cases:
        args = dict(q=q, k_cache=cache, block_table=table, cache_seqlens=lens, head_dim_v=512)
        args.update({k: v for k, v in over.items() if k in args})
        kw = {k: v for k, v in over.items() if k not in args}
        try:
            mt.flash_mla_with_kvcache(args["q"], args["k_cache"], args["block_table"], args["cache_seqlens"],
                                      args["head_dim_v"], mt.get_mla_metadata()[0], **kw)
            rep.add("error_names_argument", name, False, message="no error raised")
        except mt.UnsupportedArgument as e:
            rep.add("error_names_argument", name, name in str(e), message=str(e))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rep = Report()
    print(f"device: {torch.cuda.get_device_name()}; library: {_lib.library_dir() / _lib.decode.file_name}")
    twin_cases = [
        Problem(1, [1, 63, 65, 2000], 1, 16, 512),                # memory-bound path, page tails
        Problem(2, [0, 1, 700, 4500], 2, 64, 512),                # s_q 2 (MTP rule), an empty request
        Problem(3, [129, 1000, 1, 256], 1, 128, 512, page=128),   # wgmma path, page 128
        Problem(4, [129, 1000, 1, 4096], 1, 128, 256, page=128),  # TPLA tp2 rank (v7 path)
        Problem(5, [3000, 65], 2, 128, 128),                      # TPLA tp4 rank, s_q 2
        Problem(6, [2, 4096], 2, 32, 256, page=128),              # TPLA, 64 rows
        Problem(7, [6000], 1, 16, 256),                           # one long request: many splits
    ]
    for p in twin_cases:
        check_against_twin(rep, p)
    fm_cases = [
        (Problem(11, [5, 300, 4097], 2, 128, 512), True, "direct"),
        (Problem(12, [1, 300], 1, 3, 512), False, "direct"),
        (Problem(13, [1, 300, 64], 2, 63, 512), False, "tokens as heads"),
        (Problem(14, [2, 300, 129], 2, 128, 512), False, "tokens as requests"),
        (Problem(15, [0, 3, 4, 500], 4, 9, 512), True, "tokens as requests"),
        (Problem(16, [0, 3, 4, 500], 4, 16, 512, page=128), False, "tokens as heads"),
        (Problem(17, [700, 33], 4, 64, 256), True, "tokens as requests"),
    ]
    for p, causal, path in fm_cases:
        check_flashmla_path(rep, p, causal, path)
        check_flashmla_shared_meta(rep, p, causal, path)
    planned_cases = [
        Problem(31, [1, 63, 65, 2000], 1, 16, 512),                # memory-bound path
        Problem(32, [0, 1, 700, 4500], 2, 64, 512),                # s_q 2 (128 rows), an empty request
        Problem(33, [3000, 65], 2, 128, 512),                      # 256 rows: four row blocks
        Problem(34, [129, 1000, 1, 4096], 1, 128, 256, page=128),  # TPLA tp2 rank (v7 path)
        Problem(35, [7000, 5], 2, 16, 256),                        # TPLA, s_q 2, 32 rows
        Problem(36, [6000], 1, 64, 256),                           # one long request: many splits
        Problem(37, [6000], 1, 16, 512),                           # the same on the memory-bound path
    ]
    for p in planned_cases:
        check_planned(rep, p)
    check_plan_refusals(rep)
    check_graph(rep, Problem(21, [100, 5000, 64, 3000], 2, 128, 512), causal=True)
    check_graph(rep, Problem(22, [100, 5000, 64, 3000], 4, 16, 256), causal=True)
    check_errors(rep)
    print(f"{len(rep.rows) - rep.failed} of {len(rep.rows)} checks passed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep.rows, f, indent=1)
    sys.exit(1 if rep.failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The target-verify metadata of a draft tree (docs/verify.md) built by a chain of torch ops, the
way an engine's torch code builds it today, against specgraph's launch_verify_metadata
(bench/bench_verify.cpp) on the very same case: build time and bytes written per layout.

The chains (no host synchronisation: every size comes from the bucket and max_seq_len M, so they
can be captured in a CUDA graph; written here after reading how SGLang's FA3 and FlashInfer
backends prepare a target-verify forward):
  FA3 cascade
    prefix   cache_seqlen = seq_len; cu_seqlens_q = arange(0, B*D + 1, D); cu_seqlens_k =
             pad(cumsum(seq_len)); page_table = req_to_token[pool, 0:M:ps] // ps, zero past
             ceil(seq_len / ps) pages
    expand   the tree columns of the mask (row i of request r at block_r + i * (seq_len + D) +
             seq_len), keys = where(mask, col, col + D), sort: the attended slots first;
             page_table = the tree slots gathered in that order; cache_seqlen = mask row sums
  FlashInfer
    qo_indptr = arange(0, (B+1)*D, D); kv_indptr = pad(cumsum(seq_len + D)); kv_indices: a
    (B, M + D) grid of slots scattered into the static buffer (cells past a row's length into
    one spare cell); mask_indptr = D * kv_indptr; packed mask: a (B, ceil(D*(M+D)/8), 8) grid
    of mask cells, bit k of byte j = cell 8j + k of the request's block (little bit order),
    summed into bytes and scattered at the running sum of ceil(D*(seq_len + D)/8)
The mask is the engine's static buffer (B * D * (M + D) cells; the padded requests' cells 1, as
SGLang pads it), so no size is read back from the device.

The timing case is bench_verify's closed form: request r at seq_len = ctx / 2 + (r * 2654435761)
% (ctx / 2 - 63), pool row r + 1, req_to_token[i] = i (rows ctx + D wide), M = ctx, the binary
tree (parent of token i: (i - 1) // 2). --check N first compares both chains, cell by cell, with
`specgraph metadata verify` on N random trees (random parents, D 2..16, page sizes 1/4/16,
padded buckets, random slots); exit 1 when one differs, 77 when torch is missing.

    python bench/peer_verify_torch.py --specgraph build/tools/specgraph --check 200
    python bench/peer_verify_torch.py --bench-verify build/bench/bench_verify \
        --specgraph build/tools/specgraph [--json FILE] [--device cpu|cuda] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys

try:
    import torch
except ImportError:
    print("peer_verify_torch: torch is not installed; nothing to compare")
    sys.exit(77)

from peer_timing import as_graph, timed  # noqa: E402 (after torch is found)


class Chains:
    """Static inputs and outputs of one bucket (sized for max_seq_len M), and the two chains."""

    def __init__(self, seq, pool, rtt, mask_buf, d, ps, m, dev):
        b = len(seq)
        self.b, self.d, self.ps, self.m = b, d, ps, m
        self.seq = torch.tensor(seq, dtype=torch.int64, device=dev)
        self.pool = torch.tensor(pool, dtype=torch.int64, device=dev)
        self.rtt = rtt.to(dev)
        self.mask = mask_buf.to(dev)
        self.pages = -(-m // ps)
        self.nbytes = -(-d * (m + d) // 8)
        i32 = dict(dtype=torch.int32, device=dev)
        self.prefix_table = torch.zeros(b, self.pages, **i32)
        self.expand_table = torch.zeros(b * d, d, **i32)
        self.kv_indices = torch.zeros(b * (m + d) + 1, **i32)  # + the spare cell
        self.packed = torch.zeros(b * self.nbytes + 1, dtype=torch.uint8, device=dev)
        self.out = {}
        self.temp_bytes = 0
        # Constants made before any capture (a host-to-device copy cannot be captured).
        self.ar_d = torch.arange(d, device=dev)
        self.cols_kv = torch.arange(m + d, device=dev)
        self.cols_pages = torch.arange(self.pages, device=dev)
        self.bits = torch.arange(8, device=dev)
        self.byte_idx = torch.arange(self.nbytes, device=dev)

    def _tally(self, temps):
        self.temp_bytes = sum(t.numel() * t.element_size() for t in temps)

    def fa3(self):
        b, d, ps, seq = self.b, self.d, self.ps, self.seq
        cache = seq.to(torch.int32)
        cu_q = torch.arange(0, b * d + 1, d, dtype=torch.int32, device=seq.device)
        cu_k = torch.nn.functional.pad(torch.cumsum(cache, 0, dtype=torch.int32), (1, 0))
        rows = self.rtt[self.pool]  # (b, W)
        table = rows[:, 0:self.m:ps] // ps
        used = (seq + ps - 1) // ps
        self.prefix_table.copy_(torch.where(self.cols_pages[None, :] < used[:, None], table, 0))
        # The expand pass: the tree columns of each mask row, attended slots first.
        lens = seq + d
        block = torch.cumsum(d * lens, 0) - d * lens
        row_start = (block[:, None] + self.ar_d[None, :] * lens[:, None]).view(-1)  # (b*d)
        tree_cols = seq.repeat_interleave(d)[:, None] + self.ar_d[None, :]  # (b*d, d)
        mask = self.mask[row_start[:, None] + tree_cols] != 0
        keys = torch.where(mask, self.ar_d[None, :], self.ar_d[None, :] + d)
        order = torch.sort(keys, dim=1).indices
        slots = rows.gather(1, seq[:, None] + self.ar_d[None, :]).repeat_interleave(d, 0)
        self.expand_table.copy_(slots.gather(1, order))
        e_cache = mask.sum(1, dtype=torch.int32)
        e_cu_k = torch.nn.functional.pad(torch.cumsum(e_cache, 0, dtype=torch.int32), (1, 0))
        e_cu_q = torch.arange(b * d + 1, dtype=torch.int32, device=seq.device)
        self.out.update(prefix_cache=cache, prefix_q=cu_q, prefix_k=cu_k, expand_cache=e_cache,
                        expand_q=e_cu_q, expand_k=e_cu_k)
        self._tally([cache, cu_q, cu_k, rows, table, used, lens, block, row_start, tree_cols, mask,
                     keys, order, slots, e_cache, e_cu_k, e_cu_q])

    def flashinfer(self):
        b, d, seq = self.b, self.d, self.seq
        dev = seq.device
        qo = torch.arange(0, (b + 1) * d, d, dtype=torch.int32, device=dev)
        lens = seq + d
        kv_indptr = torch.nn.functional.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
        last = torch.ones(b, dtype=torch.int32, device=dev)
        start = kv_indptr[:-1].long()[:, None]
        valid = self.cols_kv[None, :] < lens[:, None]
        slots = self.rtt[self.pool[:, None], self.cols_kv[None, :].clamp(max=self.rtt.shape[1] - 1)]
        spare = self.kv_indices.numel() - 1
        dest = torch.where(valid, start + self.cols_kv[None, :], spare)
        self.kv_indices.scatter_(0, dest.view(-1), slots.view(-1))
        mask_indptr = kv_indptr * d
        # Packing: cell 8j + k of request r's block into bit k of its byte j.
        cells = d * lens
        nbytes = (cells + 7) // 8
        packed_indptr = torch.nn.functional.pad(torch.cumsum(nbytes, 0, dtype=torch.int32), (1, 0))
        within = self.byte_idx[None, :, None] * 8 + self.bits[None, None, :]  # (1, nbytes, 8)
        inside = within < cells[:, None, None]
        src = torch.where(inside, mask_indptr.long()[:-1, None, None] + within, 0)
        values = (self.mask[src] != 0) & inside
        packed = (values.to(torch.int32) << self.bits).sum(2).to(torch.uint8)  # (b, nbytes)
        pspare = self.packed.numel() - 1
        pdest = torch.where(self.byte_idx[None, :] < nbytes[:, None],
                            packed_indptr.long()[:-1, None] + self.byte_idx[None, :], pspare)
        self.packed.scatter_(0, pdest.view(-1), packed.view(-1))
        self.out.update(qo=qo, kv_indptr=kv_indptr, last=last, mask_indptr=mask_indptr,
                        packed_indptr=packed_indptr)
        self._tally([qo, lens, kv_indptr, last, start, valid, slots, dest, mask_indptr, cells,
                     nbytes, packed_indptr, within, inside, src, values, packed, pdest])

    def fa3_bytes(self):
        b, d = self.b, self.d
        return 4 * (b * self.pages + 3 * b + 2 + b * d * d + 3 * b * d + 2)

    def flashinfer_bytes(self, seq):
        d = self.d
        return 4 * (sum(seq) + len(seq) * d + 5 * len(seq) + 4) + \
            sum(-(-d * (s + d) // 8) for s in seq)


def ancestry(parents, d):
    """(D, D) uint8: query i attends tree token j (j is i or one of its ancestors)."""
    anc = torch.zeros(d, d, dtype=torch.uint8)
    for i in range(d):
        t = i
        while True:
            anc[i, t] = 1
            if t == 0:
                break
            t = parents[t]
    return anc


def engine_mask(seq, real, d, parents, cap_cells):
    """The engine's static mask buffer: the real requests' blocks (prefix cells 1, tree cells by
    ancestry, docs/verify.md section 1), every later cell 1 (the padded requests attend
    everything); and the real blocks alone (what `specgraph metadata verify` reads)."""
    blocks = [torch.cat([torch.ones(d, seq[r], dtype=torch.uint8), ancestry(parents[r], d)], 1)
              .view(-1) for r in range(real)]
    real_cells = torch.cat(blocks)
    buf = torch.ones(cap_cells, dtype=torch.uint8)
    buf[:real_cells.numel()] = real_cells
    return buf, real_cells

def random_case(rng):
    d = rng.randint(2, 16)
    ps = rng.choice([1, 4, 16])
    real = rng.randint(1, 4)
    pad = rng.choice([0, 0, 1, 2])
    seq = [rng.randint(1, 60) for _ in range(real)] + [1] * pad
    pool_rows = real + 1 + rng.randint(0, 2)
    pool = rng.sample(range(1, pool_rows), real) + [0] * pad
    width = max(seq) + d + rng.randint(0, 4)
    slots = rng.sample(range(1, 100000), pool_rows * width)
    rtt = [slots[i * width:(i + 1) * width] for i in range(pool_rows)]
    parents = [[0] + [rng.randint(0, i - 1) for i in range(1, d)] for _ in range(real)]
    return d, ps, real, seq, pool, rtt, parents


def check(program, n, seed, dev):
    """Both chains against `specgraph metadata verify` on n random trees; the differing cases."""
    rng, bad = random.Random(seed), []
    for case in range(n):
        d, ps, real, seq, pool, rtt, parents = random_case(rng)
        m, b = max(seq), len(seq)
        buf, blocks = engine_mask(seq, real, d, parents, b * d * (m + d))
        doc = dict(page_size=ps, num_draft_tokens=d, seq_len=seq, req_pool_index=pool,
                   req_to_token=rtt, custom_mask=blocks.tolist(), real_batch=real)
        r = subprocess.run([program, "metadata", "verify"], input=json.dumps(doc), text=True,
                           capture_output=True, check=True)
        want = json.loads(r.stdout)
        c = Chains(seq, pool, torch.tensor(rtt, dtype=torch.int32), buf, d, ps, m, dev)
        c.fa3()
        c.flashinfer()
        fa3, fi, o = want["fa3"], want["flashinfer"], c.out
        got = {
            "prefix.page_table": c.prefix_table.tolist(),
            "prefix.cache_seqlen": o["prefix_cache"].tolist(),
            "prefix.cu_seqlens_q": o["prefix_q"].tolist(),
            "prefix.cu_seqlens_k": o["prefix_k"].tolist(),
            "expand.page_table": c.expand_table.tolist(),
            "expand.cache_seqlen": o["expand_cache"].tolist(),
            "expand.cu_seqlens_q": o["expand_q"].tolist(),
            "expand.cu_seqlens_k": o["expand_k"].tolist(),
            "qo_indptr": o["qo"].tolist(), "kv_indptr": o["kv_indptr"].tolist(),
            "kv_indices": c.kv_indices[:int(o["kv_indptr"][-1])].tolist(),
            "kv_last_page_len": o["last"].tolist(), "mask_indptr": o["mask_indptr"].tolist(),
            "packed_mask_indptr": o["packed_indptr"].tolist(),
            "packed_mask": c.packed[:int(o["packed_indptr"][-1])].tolist()}
        expect = {f"{k}.{f}": fa3[k][f] for k in ("prefix", "expand")
                  for f in ("page_table", "cache_seqlen", "cu_seqlens_q", "cu_seqlens_k")}
        expect.update({k: fi[k] for k in got if "." not in k})
        diff = [k for k in got if got[k] != expect[k]] + (["violations"] if want["violations"]
                                                           else [])
        if diff:
            bad.append(dict(case=case, fields=diff, input=doc))
    return bad


def closed_form(bucket, d, ps, ctx, dev):
    seq = [ctx // 2 + (r * 2654435761) % (ctx // 2 - 63) for r in range(bucket)]
    width = ctx + d
    rtt = torch.arange((bucket + 1) * width, dtype=torch.int32).view(bucket + 1, width)
    parents = [[0] + [(i - 1) // 2 for i in range(1, d)]] * bucket
    buf, _ = engine_mask(seq, bucket, d, parents, bucket * d * (ctx + d))
    return seq, Chains(seq, list(range(1, bucket + 1)), rtt, buf, d, ps, ctx, dev)



def specgraph_times(bench, executor, keys, min_time):
    """bench_verify's entries for these (bucket, D, page_size, ctx, layout) keys."""
    if not bench:
        return {}
    names = "|".join(f"bucket:{b}/D:{d}/page_size:{p}/ctx:{c}/layout:{l}" for b, d, p, c, l in keys)
    out = subprocess.run([bench, f"--benchmark_filter=^verify/{executor}/({names})/",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         text=True, capture_output=True, check=True).stdout
    found = {}
    for b in (json.loads(out)["benchmarks"] if out.strip() else []):
        key = tuple(int(p.split(":")[1]) for p in b["name"].split("/")[2:7])
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
        found[key] = dict(us=b["real_time"] * scale, cpu_us=b["cpu_time"] * scale,
                          bytes_written=b["bytes_written"])
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--configs", default="8x8x1x4096,64x8x16x4096,64x64x1x4096,256x8x1x4096",
                   help="bucket x D x page_size x ctx, comma separated (bench_verify's)")
    p.add_argument("--iters", type=int, default=0, help="default 50 on a GPU, 5 on the CPU")
    p.add_argument("--threads", type=int, default=0, help="torch's CPU threads")
    p.add_argument("--bench-verify", help="bench_verify program (specgraph's side)")
    p.add_argument("--min-time", default="0.2", help="bench_verify's --benchmark_min_time")
    p.add_argument("--specgraph", help="specgraph program for the output check")
    p.add_argument("--check", type=int, default=0,
                   help="only check: N random trees against `specgraph metadata verify`")
    p.add_argument("--seed", type=int, default=20261201)
    a = p.parse_args()
    dev = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.check:
        if not a.specgraph:
            p.error("--check needs --specgraph")
        bad = check(a.specgraph, a.check, a.seed, dev)
        for f in bad[:3]:
            print(f"case {f['case']} differs in {f['fields']}: {json.dumps(f['input'])[:400]}")
        print(f"peer_verify_torch: {a.check} random trees (seed {a.seed}), both layouts: "
              f"{a.check - len(bad)} equal to `specgraph metadata verify`, {len(bad)} differ")
        return 1 if bad else 0
    iters = a.iters or (50 if dev.type == "cuda" else 5)
    configs = [tuple(int(x) for x in c.split("x")) for c in a.configs.split(",")]
    executor = "cuda" if dev.type == "cuda" else "host"
    layouts = {"fa3": 0, "flashinfer": 1}
    keys = [(b, d, ps if name == "fa3" else 1, ctx, code) for b, d, ps, ctx in configs
            for name, code in layouts.items()]
    ours = specgraph_times(a.bench_verify, executor, keys, a.min_time)
    results = []
    for bucket, d, ps, ctx in configs:
        seq, c = closed_form(bucket, d, ps, ctx, dev)
        for name, fn, written in (("fa3", c.fa3, c.fa3_bytes()),
                                  ("flashinfer", c.flashinfer, c.flashinfer_bytes(seq))):
            modes = [("eager", fn)] + ([("graph", as_graph(fn))] if dev.type == "cuda" else [])
            for mode, f in modes:
                t, cpu = timed(f, iters, dev)
                sg = ours.get((bucket, d, ps if name == "fa3" else 1, ctx, layouts[name]))
                row = dict(bucket=bucket, D=d, page_size=ps if name == "fa3" else 1, ctx=ctx,
                           layout=name, mode=mode, torch_chain_us=round(t * 1e6, 1),
                           torch_bytes_written=written, torch_temporary_bytes=c.temp_bytes)
                if cpu is not None:
                    row.update(torch_chain_cpu_us=round(cpu * 1e6, 1))
                if sg:
                    row.update(specgraph_us=round(sg["us"], 1),
                               specgraph_bytes_written=int(sg["bytes_written"]),
                               ratio=round(t * 1e6 / sg["us"], 2))
                    if cpu is not None:
                        row.update(specgraph_cpu_us=round(sg["cpu_us"], 1),
                                   ratio_cpu=round(cpu * 1e6 / sg["cpu_us"], 2))
                results.append(row)
                print(f"bucket {bucket:3d} D {d:2d} ps {row['page_size']:2d} {name:10s} {mode}: "
                      f"torch chain {t * 1e6:10.1f} us" +
                      ("" if cpu is None else f" (cpu {cpu * 1e6:.1f})") +
                      ("" if not sg else f", specgraph {sg['us']:9.1f} us ({row['ratio']}x)") +
                      f"; written {written} B, temporaries {c.temp_bytes} B")
        del c
    doc = dict(benchmark="peer_verify_torch",
               device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
               timing=("cuda events (torch); bench_verify: device time, cuda events"
                       if dev.type == "cuda" else
                       "best of iters, wall clock and process CPU time (torch); bench_verify: "
                       "mean wall (manual) and CPU time, host executor"),
               torch=torch.__version__, torch_threads=torch.get_num_threads(),
               python=platform.python_version(), specgraph_executor=executor,
               config=dict(iters=iters, tree="binary: parent of i is (i - 1) // 2"),
               results=results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(f"peer_verify_torch: {len(results)} timings on {doc['device']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The draft-extend metadata (docs/extend.md: the tokens, FA3's tables C1, the CSR prefix layout
C2p and the CSR full layout C2f) built by a chain of torch ops, the way an engine's torch code
builds it today, against specgraph's run_extend_metadata (bench/bench_extend.cpp) on the very
same case: build time per bucket and bytes written.

The chain (no host synchronisation: every size comes from the bucket B, the window W and
max_seq_len M, and the real batch is a device word, so it can be captured in a CUDA graph) has
specgraph's semantics, not SGLang's (docs/extend.md sections 3 and 4 name the differences):
  pad      row r is padding when r >= real_batch (the inputs there are never read); padded:
           seq 0, pool row 0, accept W, L = 1; real: L = seq + W
  tokens   position = seq + j, out_cache_loc = req_to_token[pool, seq + j] (0 on padded rows);
           select_index = r * W + max(accept - 1, 0) (accept 0 selects the window's first row)
  rows     one gather of req_to_token[pool, 0 : M + W] (columns clamped to the width)
  FA3      cache_seqlen = L; cu_seqlens_q = arange(0, B*W + 1, W); cu_seqlens_k = pad(cumsum(L));
           max_seqlen_k = max(L, 0); page_table = rows[:, ::ps] // ps where column < ceil(L / ps),
           0 in every later column of the row (no stale tail)
  C2p      kv_indptr = pad(cumsum(seq on real rows, 0 on padded)); rows[:, :M] scattered into
           the static buffer at kv_indptr[r] + column (cells past a row's length into one spare
           cell); qo_indptr = arange(0, (B+1)*W, W)
  C2f      kv_indptr = cu_seqlens_k; rows scattered the same way up to L; last_page_len = 1
Bad input (refused rows) is not modelled: an engine's chain trusts its inputs, and the CLI the
check compares with refuses them.

The timing case is bench_extend's closed form: request r at seq_len = M / 2 + (r * 2654435761)
% (M / 2 - 63), accept_len 1 + r % W, pool row r + 1, req_to_token[i] = i (rows M + W wide).
--check N compares the chain, cell by cell, with `specgraph metadata extend` on N random rounds
(seq_len 0..M, accept_len 0..W, page sizes 1/2/4/16/64, padded buckets with junk inputs in the
padded rows, idle ranks, random slots, poisoned output buffers); exit 1 when one differs, 77 when
torch is missing.

    python bench/peer_extend_torch.py --specgraph build/tools/specgraph --check 200
    python bench/peer_extend_torch.py --bench-extend build/bench/bench_extend \
        [--json FILE] [--device cpu|cuda] [--threads 1]
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
    print("peer_extend_torch: torch is not installed; nothing to compare")
    sys.exit(77)

from peer_timing import as_graph, timed  # noqa: E402 (after torch is found)

POISON = -7


class Chain:
    """The static inputs and outputs of one bucket (sized for W and M) and the op chain."""

    def __init__(self, seq, accept, pool, real, rtt, w, ps, m, dev):
        b = len(seq)
        self.b, self.w, self.ps, self.m = b, w, ps, m
        i32 = dict(dtype=torch.int32, device=dev)
        self.seq = torch.tensor(seq, **i32)
        self.accept = torch.tensor(accept, **i32)
        self.pool = torch.tensor(pool, **i32)
        self.real = torch.tensor([real], **i32)  # the device word a graph reads
        self.rtt = rtt.to(dev)
        self.pages = -(-(m + w) // ps)  # extend_page_columns
        # The exact buffers (docs/extend.md section 5), poisoned; + 1 spare cell per CSR buffer.
        self.page_table = torch.full((b, self.pages), POISON, **i32)
        self.prefix_kv = torch.full((b * m + 1,), POISON, **i32)
        self.full_kv = torch.full((b * (m + w) + 1,), POISON, **i32)
        self.out = {}
        self.temp_bytes = 0
        # Constants made before any capture (a host-to-device copy cannot be captured).
        self.rows_ix = torch.arange(b, device=dev)
        self.cols_w = torch.arange(w, device=dev)
        self.cols = torch.arange(m + w, device=dev)
        self.cols_clamped = self.cols.clamp(max=self.rtt.shape[1] - 1)
        self.cols_pages = torch.arange(self.pages, device=dev)
        self.page_src = (self.cols_pages * ps).clamp(max=self.rtt.shape[1] - 1)
        self.zero = torch.zeros(1, dtype=torch.int64, device=dev)

    def run(self):
        b, w, ps, m = self.b, self.w, self.ps, self.m
        dev = self.seq.device
        pad = self.rows_ix >= self.real.long()  # (b,)
        seq = torch.where(pad, 0, self.seq.long())
        pool = torch.where(pad, 0, self.pool.long())
        accept = torch.where(pad, w, self.accept.long())
        lens = torch.where(pad, 1, seq + w)  # L
        # Tokens.
        pos = seq[:, None] + self.cols_w[None, :]  # (b, w)
        rows = self.rtt[pool[:, None], self.cols_clamped[None, :]]  # (b, m + w)
        slots = rows.gather(1, pos)
        position = torch.where(pad[:, None], 0, pos).to(torch.int32).view(-1)
        out_cache_loc = torch.where(pad[:, None], 0, slots).view(-1)
        select = (self.rows_ix * w + (accept - 1).clamp(min=0)).to(torch.int32)
        # FA3 (C1).
        cache = lens.to(torch.int32)
        cu_q = torch.arange(0, b * w + 1, w, dtype=torch.int32, device=dev)
        cu_k = torch.nn.functional.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
        max_k = torch.cat([lens, self.zero]).max().to(torch.int32)
        used_pages = (lens + ps - 1) // ps
        pages = self.rtt[pool[:, None], self.page_src[None, :]] // ps
        self.page_table.copy_(torch.where(self.cols_pages[None, :] < used_pages[:, None], pages, 0))
        # CSR prefix (C2p): the committed prefix only.
        kv_len = torch.where(pad, 0, seq)
        pre_indptr = torch.nn.functional.pad(torch.cumsum(kv_len, 0, dtype=torch.int32), (1, 0))
        pre_dest = torch.where(self.cols[None, :m] < kv_len[:, None],
                               pre_indptr[:-1].long()[:, None] + self.cols[None, :m],
                               self.prefix_kv.numel() - 1)
        self.prefix_kv.scatter_(0, pre_dest.reshape(-1), rows[:, :m].reshape(-1))
        qo = torch.arange(0, (b + 1) * w, w, dtype=torch.int32, device=dev)
        # CSR full (C2f): every key up to L.
        full_dest = torch.where(self.cols[None, :] < lens[:, None],
                                cu_k[:-1].long()[:, None] + self.cols[None, :],
                                self.full_kv.numel() - 1)
        self.full_kv.scatter_(0, full_dest.view(-1), rows.reshape(-1))
        last = torch.ones(b, dtype=torch.int32, device=dev)
        self.out.update(position=position, out_cache_loc=out_cache_loc, select_index=select,
                        cache_seqlen=cache, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                        max_seqlen_k=max_k, prefix_qo=qo, prefix_kv_indptr=pre_indptr,
                        full_qo=qo, full_kv_indptr=cu_k, last_page_len=last)
        self._tally([pad, seq, pool, accept, lens, pos, rows, slots, position, out_cache_loc,
                     select, cache, cu_q, cu_k, max_k, used_pages, pages, kv_len, pre_indptr,
                     pre_dest, qo, full_dest, last])

    def _tally(self, temps):
        self.temp_bytes = sum(t.numel() * t.element_size() for t in temps)

    def bytes_written(self, seq):
        """bench_extend's count: the cells one call stores into the outputs."""
        b, w = self.b, self.w
        prefix = sum(seq)
        return (4 * (2 * b * w + b) + 4 * (b * self.pages + b + 2 * (b + 1) + 1) +
                4 * (prefix + 2 * (b + 1)) + 4 * (prefix + b * w + 2 * (b + 1) + b))


def random_case(rng):
    w = rng.randint(1, 16)
    ps = rng.choice([1, 2, 4, 16, 64])
    m = rng.choice([0, 1, rng.randint(2, 20), rng.randint(20, 200)])
    real = 0 if rng.random() < 0.1 else rng.randint(1, 5)  # 0: an idle data-parallel rank
    bucket = real + rng.choice([0, 0, 1, 3])
    seq = [rng.choice([0, m, rng.randint(0, m)]) for _ in range(real)]
    accept = [rng.choice([0, w, rng.randint(0, w)]) for _ in range(real)]
    pool_rows = real + 1 + rng.randint(0, 2)
    pool = rng.sample(range(1, pool_rows), real)
    width = m + w + rng.randint(0, 4)
    slots = [rng.randrange(0, 1 << 31) for _ in range(pool_rows * width)]
    rtt = [slots[i * width:(i + 1) * width] for i in range(pool_rows)]
    # Whatever an earlier round left in the padded rows: the chain must not read it.
    junk = bucket - real
    inputs = (seq + [rng.randint(-5, 10 * m + 9) for _ in range(junk)],
              accept + [rng.randint(-3, 3 * w) for _ in range(junk)],
              pool + [rng.choice([-1, 0, pool_rows, 10 ** 6]) for _ in range(junk)])
    doc = dict(page_size=ps, num_draft_tokens=w, seq_len=seq, accept_len=accept,
               req_pool_index=pool, req_to_token=rtt, bucket=bucket,
               page_table_capacity=max(1, -(-(m + w) // ps)))
    return doc, inputs, real, m


def got_cells(c):
    o = c.out
    pre_used, full_used = int(o["prefix_kv_indptr"][-1]), int(o["full_kv_indptr"][-1])
    return {
        "tokens": dict(position=o["position"].tolist(), out_cache_loc=o["out_cache_loc"].tolist(),
                       select_index=o["select_index"].tolist()),
        "fa3": dict(cache_seqlen=o["cache_seqlen"].tolist(),
                    cu_seqlens_q=o["cu_seqlens_q"].tolist(),
                    cu_seqlens_k=o["cu_seqlens_k"].tolist(), page_table=c.page_table.tolist(),
                    max_seqlen_q=c.w, max_seqlen_k=int(o["max_seqlen_k"])),
        "triton": dict(qo_indptr=o["prefix_qo"].tolist(),
                       kv_indptr=o["prefix_kv_indptr"].tolist(),
                       kv_indices=c.prefix_kv[:pre_used].tolist(), max_extend_len=c.w),
        "flashinfer": dict(qo_indptr=o["full_qo"].tolist(), kv_indptr=o["full_kv_indptr"].tolist(),
                           kv_indices=c.full_kv[:full_used].tolist(),
                           kv_last_page_len=o["last_page_len"].tolist())}


def check(program, n, seed, dev):
    """The chain against `specgraph metadata extend` on n random rounds; the differing cases."""
    rng, bad = random.Random(seed), []
    for case in range(n):
        doc, (seq, accept, pool), real, m = random_case(rng)
        r = subprocess.run([program, "metadata", "extend"], input=json.dumps(doc), text=True,
                           capture_output=True, check=True)
        want = json.loads(r.stdout)
        # The only violations a valid round may give: one per accept length of 0.
        extra = [v for v in want.pop("violations") if v["kind"] != "accept_len"]
        c = Chain(seq, accept, pool, real, torch.tensor(doc["req_to_token"], dtype=torch.int32),
                  doc["num_draft_tokens"], doc["page_size"], m, dev)
        c.run()
        got = got_cells(c)
        diff = [f"{k}.{f}" for k in want for f in want[k] if got[k][f] != want[k][f]]
        if extra:
            diff.append("violations")
        if diff:
            bad.append(dict(case=case, fields=diff, input=doc))
    return bad


def closed_form(bucket, w, ps, m, dev):
    seq = [m // 2 + (r * 2654435761) % (m // 2 - 63) for r in range(bucket)]
    accept = [1 + r % w for r in range(bucket)]
    width = m + w
    rtt = torch.arange((bucket + 1) * width, dtype=torch.int32).view(bucket + 1, width)
    return seq, Chain(seq, accept, list(range(1, bucket + 1)), bucket, rtt, w, ps, m, dev)



def specgraph_times(bench, executor, keys, min_time):
    """bench_extend's launcher-path (path 0) entries for these (bucket, W, page_size, M) keys."""
    if not bench:
        return {}
    names = "|".join(f"bucket:{b}/W:{w}/page_size:{p}/M:{m}/path:0" for b, w, p, m in keys)
    out = subprocess.run([bench, f"--benchmark_filter=^extend/{executor}/({names})/",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         text=True, capture_output=True, check=True).stdout
    found = {}
    for e in (json.loads(out)["benchmarks"] if out.strip() else []):
        key = tuple(int(p.split(":")[1]) for p in e["name"].split("/")[2:6])
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[e["time_unit"]]
        found[key] = dict(us=e["real_time"] * scale, cpu_us=e["cpu_time"] * scale,
                          bytes_written=e["bytes_written"])
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--buckets", default="1,8,64,256", help="bench_extend's buckets")
    p.add_argument("--w", type=int, default=8, help="the window W")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--max-seq-len", type=int, default=4096, help="M")
    p.add_argument("--iters", type=int, default=0, help="default 50 on a GPU, 5 on the CPU")
    p.add_argument("--threads", type=int, default=0, help="torch's CPU threads")
    p.add_argument("--bench-extend", help="bench_extend program (specgraph's side)")
    p.add_argument("--min-time", default="0.2s", help="bench_extend's --benchmark_min_time")
    p.add_argument("--specgraph", help="specgraph program for the output check")
    p.add_argument("--check", type=int, default=0,
                   help="only check: N random rounds against `specgraph metadata extend`")
    p.add_argument("--seed", type=int, default=20261202)
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
        print(f"peer_extend_torch: {a.check} random rounds (seed {a.seed}), all four layouts: "
              f"{a.check - len(bad)} equal to `specgraph metadata extend`, {len(bad)} differ")
        return 1 if bad else 0
    iters = a.iters or (50 if dev.type == "cuda" else 5)
    w, ps, m = a.w, a.page_size, a.max_seq_len
    buckets = [int(x) for x in a.buckets.split(",")]
    executor = "cuda" if dev.type == "cuda" else "host"
    ours = specgraph_times(a.bench_extend, executor, [(b, w, ps, m) for b in buckets], a.min_time)
    results = []
    for bucket in buckets:
        seq, c = closed_form(bucket, w, ps, m, dev)
        written = c.bytes_written(seq)
        modes = [("eager", c.run)] + ([("graph", as_graph(c.run))] if dev.type == "cuda" else [])
        for mode, f in modes:
            t, cpu = timed(f, iters, dev)
            sg = ours.get((bucket, w, ps, m))
            row = dict(bucket=bucket, W=w, page_size=ps, M=m, mode=mode,
                       torch_chain_us=round(t * 1e6, 1), torch_bytes_written=written,
                       torch_temporary_bytes=c.temp_bytes)
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
            print(f"bucket {bucket:3d} W {w} ps {ps} M {m} {mode}: torch chain {t * 1e6:10.1f} us" +
                  ("" if cpu is None else f" (cpu {cpu * 1e6:.1f})") +
                  ("" if not sg else f", specgraph {sg['us']:9.1f} us ({row['ratio']}x)") +
                  f"; written {written} B, temporaries {c.temp_bytes} B")
        del c
    doc = dict(benchmark="peer_extend_torch",
               device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
               timing=("cuda events (torch); bench_extend: device time, cuda events"
                       if dev.type == "cuda" else
                       "best of iters, wall clock and process CPU time (torch); bench_extend: "
                       "mean wall (manual) and CPU time, host executor, launcher path"),
               torch=torch.__version__, torch_threads=torch.get_num_threads(),
               python=platform.python_version(), specgraph_executor=executor,
               config=dict(iters=iters, layouts="tokens, fa3, csr prefix, csr full in one call"),
               results=results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(f"peer_extend_torch: {len(results)} timings on {doc['device']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

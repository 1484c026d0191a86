#!/usr/bin/env python3
"""The CSR draft-decode indices (docs/csr.md) built by a chain of torch ops, the way a user
without a fused kernel builds them today, against specgraph's kernel (bench/bench_csr.cpp) on
the very same case; per step and for a whole round, build time and bytes written.

The chain, per step s (d = s + 1 draft tokens visible; no host synchronisation, so it can be
captured in a CUDA graph):
  1. rows' prefix lengths       seq_rows = seq_len.repeat_interleave(topk)
  2. row lengths, kv_indptr     kv_indptr[1:] = cumsum(seq_rows + d)
  3. every (row, column) cell   col = arange(max_context_len + d)
  4. its position               prefix: col; draft: seq + t * ps * nnp + (col - seq)
  5. gather the slots           req_to_token.view(-1)[pool_row * width + position]
  6. scatter into kv_indices    cells past a row's length go to one spare cell at the end
A whole round runs the same ops on a (steps, rows, columns) grid at once. specgraph's
launch_draft_kv_indices does it in one launch (three small kernels), writing each cell once.

The case (bench_csr.cpp's closed form): `bucket` requests, request r at
seq_len = ctx / 2 + (r * 2654435761) % (ctx / 2 - 63), pool row r + 1, req_to_token[i] = i (rows
ctx + 2 * topk * 16 + 5 wide), page size 16, 5 steps, no window. The chain's output is checked
equal to `specgraph metadata kv-indices` on the same case (configurations of at most
--check-cells cells), then timed: torch.cuda events on a GPU (eagerly and as CUDA graphs),
wall clock on the CPU. specgraph's side is bench_csr run for the same configurations (its host
executor on the CPU, its cuda one on a GPU; device time, CUDA events).

    python bench/peer_csr_torch.py --bench-csr build/bench/bench_csr \
        --specgraph build/tools/specgraph [--json FILE] [--device cpu|cuda]
Exit status 1 when the chain's output differs from specgraph's.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

try:
    import torch
except ImportError:
    print("peer_csr_torch: torch is not installed; nothing to compare")
    sys.exit(0)

from peer_timing import as_graph, timed  # noqa: E402 (after torch is found)

PS, STEPS, INT32 = 16, 5, 4


def case(bucket, topk, ctx, device):
    seq = [ctx // 2 + (r * 2654435761) % (ctx // 2 - 63) for r in range(bucket)]
    width = ctx + topk * PS * 2 + STEPS
    return dict(
        bucket=bucket, topk=topk, ctx=ctx, width=width, seq_list=seq,
        seq=torch.tensor(seq, dtype=torch.int64, device=device),
        pool=torch.arange(1, bucket + 1, dtype=torch.int64, device=device),
        rtt=torch.arange((bucket + 1) * width, dtype=torch.int32, device=device))


def capacity(rows, ctx, s):
    return rows * (ctx + s + 1)  # C_s, docs/csr.md section 3


class Chain:
    """Static outputs (sized like specgraph's: C_s per step, plus the spare cell) and the ops."""

    def __init__(self, c, device):
        self.c, self.topk = c, c["topk"]
        self.rows = c["bucket"] * c["topk"]
        caps = [capacity(self.rows, c["ctx"], s) for s in range(STEPS)]
        self.offsets = [sum(caps[:s]) for s in range(STEPS)]
        # On the device before any capture: a host-to-device copy cannot be captured.
        self.offsets_t = torch.tensor(self.offsets, device=device)[:, None, None]
        self.d_t = torch.arange(1, STEPS + 1, device=device)[:, None, None]
        self.kv_indices = torch.empty(sum(caps) + 1, dtype=torch.int32, device=device)
        self.kv_indptr = torch.zeros(STEPS, self.rows + 1, dtype=torch.int32, device=device)
        self.branch = torch.arange(self.topk, device=device).repeat(c["bucket"])
        self.temp_bytes = 0

    def _cells(self, d, cols):
        """Positions and validity of a (..., rows, cols) grid for d draft tokens (d: int or a
        (steps, 1, 1) tensor)."""
        c = self.c
        seq_rows = c["seq"].repeat_interleave(self.topk)[:, None]
        nnp = (seq_rows % PS + STEPS + PS - 1) // PS
        col = torch.arange(cols, device=seq_rows.device)
        draft0 = seq_rows + self.branch[:, None] * PS * nnp
        pos = torch.where(col < seq_rows, col, draft0 + (col - seq_rows))
        lens = seq_rows + d
        slot_at = c["pool"].repeat_interleave(self.topk)[:, None] * c["width"] + pos.clamp(
            max=c["width"] - 1)
        slots = c["rtt"][slot_at]
        temps = [seq_rows, nnp, col, draft0, pos, slot_at, slots, lens]
        return lens, col, slots, temps

    def step(self, s):
        d = s + 1
        lens, col, slots, temps = self._cells(d, self.c["ctx"] + d)
        indptr = torch.cumsum(lens.view(-1), 0)
        self.kv_indptr[s, 1:] = indptr
        start = (indptr - lens.view(-1))[:, None]
        spare = self.kv_indices.numel() - 1
        dest = torch.where(col < lens, start + col + self.offsets[s], spare)
        self.kv_indices.scatter_(0, dest.view(-1), slots.view(-1))
        self.temp_bytes = sum(t.numel() * t.element_size() for t in temps + [indptr, start, dest])

    def round(self):
        lens, col, slots, temps = self._cells(self.d_t, self.c["ctx"] + STEPS)
        indptr = torch.cumsum(lens, 1)  # (steps, rows, 1)
        self.kv_indptr[:, 1:] = indptr[:, :, 0]
        start = indptr - lens
        spare = self.kv_indices.numel() - 1
        dest = torch.where(col < lens, start + col + self.offsets_t, spare)
        values = slots.expand_as(dest).reshape(-1)
        self.kv_indices.scatter_(0, dest.view(-1), values)
        self.temp_bytes = sum(t.numel() * t.element_size()
                              for t in temps + [indptr, start, dest, values])

    def output_bytes(self, steps):
        kept = sum(self.c["seq_list"]) * self.topk
        return sum((kept + self.rows * (s + 1)) * INT32 + (self.rows + 1) * INT32 for s in steps)


def check(chain, program):
    """The chain's round against `specgraph metadata kv-indices` on the same case."""
    c = chain.c
    rtt = c["rtt"].cpu().view(c["bucket"] + 1, c["width"]).tolist()
    doc = dict(page_size=PS, topk=c["topk"], num_steps=STEPS, seq_len=c["seq_list"],
               req_pool_index=list(range(1, c["bucket"] + 1)), req_to_token=rtt)
    r = subprocess.run([program, "metadata", "kv-indices"], input=json.dumps(doc), text=True,
                       capture_output=True, check=True)
    want = json.loads(r.stdout)
    chain.kv_indices.fill_(-1)
    chain.round()
    for s in range(STEPS):
        n = want["kv_indptr"][s][-1]
        got = chain.kv_indices[chain.offsets[s]:chain.offsets[s] + n].cpu().tolist()
        indptr = chain.kv_indptr[s].cpu().tolist()
        if indptr != want["kv_indptr"][s] or got != want["kv_indices"][s]:
            return False
    return True



def specgraph_times(bench, executor, configs, min_time):
    """bench_csr's entries for these (bucket, topk, ctx, round) configurations, by configuration."""
    if not bench:
        return {}
    names = "|".join(f"bucket:{b}/topk:{k}/ctx:{c}/round:{r}" for b, k, c, r in configs)
    out = subprocess.run([bench, f"--benchmark_filter=^csr/{executor}/({names})/",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         text=True, capture_output=True, check=True).stdout
    found = {}
    for b in (json.loads(out)["benchmarks"] if out.strip() else []):  # none: no such configuration
        key = tuple(int(p.split(":")[1]) for p in b["name"].split("/")[2:6])
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
        found[key] = dict(us=b["real_time"] * scale, cpu_us=b["cpu_time"] * scale,
                          bytes_written=b["bytes_written"])
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--configs", default="8x8x1024,64x8x4096,256x8x4096",
                   help="bucket x topk x ctx, comma separated (bench_csr's configurations)")
    p.add_argument("--iters", type=int, default=0, help="default 50 on a GPU, 5 on the CPU")
    p.add_argument("--threads", type=int, default=0,
                   help="torch's CPU threads (default: torch's own choice)")
    p.add_argument("--bench-csr", help="bench_csr program (specgraph's side; none: torch only)")
    p.add_argument("--min-time", default="0.2", help="bench_csr's --benchmark_min_time")
    p.add_argument("--specgraph", help="specgraph program for the output check")
    p.add_argument("--check-cells", type=int, default=1 << 22,
                   help="check configurations of at most this many cells (rows x (ctx + 5) x 5)")
    a = p.parse_args()
    dev = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    iters = a.iters or (50 if dev.type == "cuda" else 5)
    configs = [tuple(int(x) for x in c.split("x")) for c in a.configs.split(",")]
    executor = "cuda" if dev.type == "cuda" else "host"
    ours = specgraph_times(a.bench_csr, executor,
                           [(b, k, c, r) for b, k, c in configs for r in (0, 1)], a.min_time)
    results, failures = [], 0
    for bucket, topk, ctx in configs:
        chain = Chain(case(bucket, topk, ctx, dev), dev)
        cells = chain.rows * (ctx + STEPS) * STEPS
        equal = None
        if a.specgraph and cells <= a.check_cells:
            equal = check(chain, a.specgraph)
            failures += not equal
        for kind, fn, steps in (("step", lambda: chain.step(STEPS - 1), [STEPS - 1]),
                                ("round", chain.round, list(range(STEPS)))):
            modes = [("eager", fn)] + ([("graph", as_graph(fn))] if dev.type == "cuda" else [])
            for mode, f in modes:
                t, cpu = timed(f, iters, dev)
                sg = ours.get((bucket, topk, ctx, int(kind == "round")))
                row = dict(bucket=bucket, topk=topk, ctx=ctx, what=kind, mode=mode,
                           torch_chain_us=round(t * 1e6, 1),
                           torch_bytes_written=chain.output_bytes(steps),
                           torch_temporary_bytes=chain.temp_bytes, checked_equal=equal)
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
                cpu_text = "" if cpu is None else f" (cpu {cpu * 1e6:.1f})"
                sg_text = "" if not sg else (
                    f", specgraph {sg['us']:9.1f} us" +
                    ("" if cpu is None else f" (cpu {sg['cpu_us']:.1f})") + f" ({row['ratio']}x)")
                print(f"bucket {bucket:3d} topk {topk} ctx {ctx:5d} {kind:5s} {mode:5s}: torch "
                      f"chain {t * 1e6:10.1f} us{cpu_text}" + sg_text +
                      f"; written {row['torch_bytes_written']} B, temporaries "
                      f"{chain.temp_bytes} B" + ("" if equal is not False else "  DIFFERENT"))
        del chain
    doc = dict(benchmark="peer_csr_torch",
               device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
               timing=("cuda events (torch); bench_csr: device time, cuda events"
                       if dev.type == "cuda" else
                       "best of iters, wall clock and process CPU time (torch); bench_csr: "
                       "mean wall (manual) and CPU time, host executor"),
               torch=torch.__version__, torch_threads=torch.get_num_threads(),
               python=platform.python_version(), specgraph_executor=executor,
               config=dict(page_size=PS, steps=STEPS, iters=iters, per_step="the last step"),
               results=results, failures=failures)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(f"peer_csr_torch: {len(results)} timings on {doc['device']}, "
          f"{'outputs equal' if not failures else f'{failures} outputs DIFFER'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

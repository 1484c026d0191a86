#!/usr/bin/env python3
"""Outside check: `specgraph metadata kv-indices` against SGLang's own draft-decode index kernel.

For random cases (topk 1..8, page sizes 1/4/16, draft windows, page-granular tables, padded
buckets), the same inputs go to the specgraph program (JSON in, JSON out) and to SGLang's Triton
kernel `generate_draft_decode_kv_indices`, loaded from an SGLang wheel at run time
(sglang_kernel.py; nothing of SGLang is kept here) and run under the Triton interpreter on the
CPU (or on a GPU with --device cuda). The kernel is launched as SGLang's multi-step draft
backends launch it (their call sites in the wheel):
  * triton:     grid (num_steps, bs, topk), int64 kv_indices (the Triton backend);
  * flashinfer: grid (num_steps * blocks, bs, topk), int32 kv_indices, NUM_STEPS set when
                blocks > 1 (the FlashInfer backend's token-block launch; any block count gives the
                same output);
with the engine's buffers: kv_indptr (num_steps, max_bs + 1) zeroed, kv_indices
(num_steps, draft_kv_indices_buffer_width(bs, topk, max_context_len)) poisoned here, `positions`
= seq_len repeated topk times (draft entry) and, for the padded requests of a bucket, the graph
runner's padding (seq_len 1, req_pool_index 0, positions 0; pool row 0 is the dummy row).

Engine rows wider than the round (slot_stride): SGLang runs S - 1 draft forwards over branch rows
S wide and lays each branch's req_to_token region out from S; about a third of the cases are
such (S = num_steps + 1 .. num_steps + 2, topk >= 2): SGLang's kernel is launched with a grid of S
steps (its num_steps = S) and its first S - 1 steps are compared with specgraph at num_steps = S - 1
and "slot_stride": S (docs/csr.md section 1); its last step is not compared.

Compared per step: kv_indices (every cell the step uses, and nothing written past it), and
kv_indptr. For padded rows SGLang's kv_indptr follows `positions` while its indices are placed by
seq_len (docs/csr.md sections 2 and 8): those entries are expected to differ from specgraph's; the check
verifies they are exactly sum(positions[:q]) + q * d, and counts them apart.

    TRITON_INTERPRET=1 python scripts/outside-check/csr_vs_sglang.py \
        --wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \
        --specgraph build/tools/specgraph --cases 300 [--json out.json]
Exit status 0 when every case agrees (documented differences aside), 1 otherwise; 77 when the
wheel, torch or triton is missing (nothing checked).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time

SKIP = 77


def ceil_div(a, b):
    return -(-a // b)


def make_case(rng: random.Random) -> dict:
    """One random case, as the engine would hand it to the kernel."""
    topk = rng.randint(1, 8)
    ps = rng.choice([1, 4, 16])
    steps = rng.randint(1, 6)
    slots = steps  # S: draft slots per branch row; SGLang's grid steps
    if rng.random() < 0.35:  # the engine's rows wider than the round (SGLang: S - 1 forwards)
        topk, slots = max(topk, 2), steps + rng.randint(1, 2)
    real = rng.randint(1, 4)
    pad = rng.choice([0, 0, 1, 2])  # padded requests of the bucket
    entry = ps if ps > 1 and rng.random() < 0.3 else 1
    window = sink = 0
    if rng.random() < 0.3:
        window, sink = rng.randint(1, 24), rng.randint(0, 4)
    # Mostly short prefixes; some long ones that span several of the kernel's token blocks.
    longest = rng.choice([40, 40, 200, 700])
    seq = [rng.randint(1, longest) for _ in range(real)] + [1] * pad
    pool_rows = real + 1 + rng.randint(0, 2)
    pool_index = rng.sample(range(1, pool_rows), real) + [0] * pad

    def width_needed(n):  # positions a row must hold for SGLang's S steps (docs/csr.md section 1)
        nnp = ceil_div(n % ps + slots, ps)
        return n + (topk - 1) * ps * nnp + slots

    positions = ceil_div(max(width_needed(n) for n in seq) + rng.randint(0, 5), entry) * entry
    entries = positions // entry
    table, used_pages = [[0] * entries], set()  # pool row 0: the dummy row, page 0

    def fresh_page():
        while True:
            p = rng.randint(1, 50000)
            if p not in used_pages:
                used_pages.add(p)
                return p

    for _ in range(1, pool_rows):
        pages = [fresh_page() for _ in range(ceil_div(positions, ps))]
        if entry == 1:
            table.append([pages[p // ps] * ps + p % ps for p in range(positions)])
        else:
            table.append(pages[:entries])
    return dict(page_size=ps, topk=topk, num_steps=steps, slot_stride=slots, seq_len=seq,
                req_pool_index=pool_index, req_to_token=table, entry_page_size=entry,
                window=window, sink=sink, real=real,
                max_context_len=max(seq) + slots + rng.randint(0, 8))


def regions_moved(case: dict) -> bool:
    """Whether laying the branch regions out from num_steps instead of slot_stride would move a
    real request's draft positions (at ps > 1 the two often round to the same pages)."""
    ps = case["page_size"]

    def region(n, slots):
        return slots if ps == 1 else ps * ceil_div(n % ps + slots, ps)

    return case["topk"] > 1 and any(region(n, case["slot_stride"]) != region(n, case["num_steps"])
                                    for n in case["seq_len"][:case["real"]])


def run_specgraph(program: str, case: dict) -> dict:
    keys = ("page_size", "topk", "num_steps", "seq_len", "req_pool_index", "req_to_token",
            "entry_page_size", "window", "sink")
    doc = {k: case[k] for k in keys}
    if case["slot_stride"] != case["num_steps"]:
        doc["slot_stride"] = case["slot_stride"]
    r = subprocess.run([program, "metadata", "kv-indices"], input=json.dumps(doc), text=True,
                       capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"specgraph exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def run_sglang(mod, torch, case: dict, backend: str, blocks: int, device: str):
    """kv_indptr, kv_indices buffers after SGLang's kernel, launched as `backend` launches it."""
    # SGLang's num_steps is the row width S (its grid's steps); specgraph's is S - 1 or S.
    bs, topk, steps = len(case["seq_len"]), case["topk"], case["slot_stride"]
    rows = bs * topk
    t = lambda x, dt: torch.tensor(x, dtype=dt, device=device)  # noqa: E731
    seq = t(case["seq_len"], torch.int64)
    pool_index = t(case["req_pool_index"], torch.int64)
    req_to_token = t(case["req_to_token"], torch.int32)
    positions = seq.repeat_interleave(topk)  # draft entry: seq_len per branch
    positions[case["real"] * topk:] = 0  # the graph runner zeroes the padded rows' positions
    width = mod.draft_kv_indices_buffer_width(bs, topk, case["max_context_len"])
    dtype = torch.int64 if backend == "triton" else torch.int32
    kv_indices = torch.full((steps, width), POISON, dtype=dtype, device=device)
    kv_indptr = torch.zeros((steps, rows + 1 + 3), dtype=torch.int32, device=device)  # max_bs > bs
    grid = (steps * blocks, bs, topk)
    extra = {"NUM_STEPS": steps} if blocks > 1 else {}
    mod.generate_draft_decode_kv_indices[grid](
        pool_index, req_to_token, seq, kv_indices, kv_indptr, positions,
        req_to_token.shape[1], kv_indices.shape[1], kv_indptr.shape[1],
        mod.next_power_of_2(bs), mod.next_power_of_2(steps), mod.next_power_of_2(rows),
        case["page_size"], case["window"], case["sink"],
        ENTRY_PAGE_SIZE=case["entry_page_size"], v2p=None, TRANSLATE=False, **extra)
    return kv_indptr.cpu().tolist(), kv_indices.cpu().tolist(), positions.cpu().tolist()


POISON = -7


def compare(case, ours, indptr, indices, positions, mod) -> tuple[list[str], int]:
    """Problems (undocumented differences) and the number of documented padded-row differences."""
    problems, documented = [], 0
    topk, steps = case["topk"], case["num_steps"]
    rows = len(case["seq_len"]) * topk
    real_rows = case["real"] * topk
    cap = case["window"] + case["sink"]
    if ours["violations"]:
        problems.append(f"specgraph reported violations {ours['violations']}")
    for s in range(steps):
        d = s + 1
        mine_ptr, mine_idx = ours["kv_indptr"][s], ours["kv_indices"][s]
        used = mine_ptr[rows]
        if used != len(mine_idx):
            problems.append(f"step {s}: kv_indptr[N] {used} != {len(mine_idx)} indices")
        sg_used = mod.draft_kv_indices_used_len(sum(case["seq_len"]), topk, rows, d)
        if case["window"] == 0 and used != sg_used:
            problems.append(f"step {s}: used {used}, SGLang's draft_kv_indices_used_len {sg_used}")
        if indices[s][:used] != mine_idx:
            first = next(i for i, (a, b) in enumerate(zip(indices[s], mine_idx)) if a != b)
            problems.append(f"step {s}: kv_indices differ from index {first}: SGLang "
                            f"{indices[s][first:first + 4]}, specgraph {mine_idx[first:first + 4]}")
        if any(v != POISON for v in indices[s][used:]):
            problems.append(f"step {s}: SGLang wrote past the {used} entries the step uses")
        if indptr[s][: real_rows + 1] != mine_ptr[: real_rows + 1]:
            problems.append(f"step {s}: kv_indptr of real rows differ: SGLang "
                            f"{indptr[s][: real_rows + 1]}, specgraph {mine_ptr[: real_rows + 1]}")
        for q in range(real_rows + 1, rows + 1):
            by_positions = sum(min(p, cap) if cap else p for p in positions[:q]) + q * d
            if indptr[s][q] != by_positions:
                problems.append(f"step {s} row {q}: SGLang's kv_indptr {indptr[s][q]} is not "
                                f"sum(positions[:q]) + q * d = {by_positions}")
            elif indptr[s][q] != mine_ptr[q]:
                documented += 1
        if any(v != 0 for v in indptr[s][rows + 1:]):
            problems.append(f"step {s}: SGLang wrote kv_indptr past row {rows}")
    return problems, documented


def write(path, tally, t0, a, torch, triton, complete):
    tally.update(seconds=round(time.time() - t0, 1), seed=a.seed, device=a.device,
                 sglang_wheel=os.path.basename(a.wheel), torch=torch.__version__,
                 triton=triton.__version__, python=platform.python_version(), complete=complete)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tally, f, indent=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheel", default=os.environ.get("SPECGRAPH_SGLANG_WHEEL"),
                   help="SGLang wheel (default $SPECGRAPH_SGLANG_WHEEL)")
    p.add_argument("--specgraph", default="build/tools/specgraph", help="the specgraph program")
    p.add_argument("--cases", type=int, default=300)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    p.add_argument("--json", help="write the tally here")
    a = p.parse_args(argv)
    if not a.wheel or not os.path.isfile(a.wheel):
        print(f"csr_vs_sglang: no SGLang wheel ({a.wheel!r}); nothing checked")
        return SKIP
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    try:
        import torch
        import triton
    except ImportError as e:
        print(f"csr_vs_sglang: {e}; nothing checked")
        return SKIP
    if not os.access(a.specgraph, os.X_OK):
        print(f"csr_vs_sglang: no specgraph program at {a.specgraph}")
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sglang_kernel

    mod = sglang_kernel.load(a.wheel)
    rng = random.Random(a.seed)
    tally = dict(cases=0, launches=0, steps_compared=0, agree=0, disagree=0,
                 padded_cases=0, padded_indptr_differences=0, window_cases=0,
                 page_granular_cases=0, topk_over_1=0, slot_stride_cases=0,
                 slot_stride_regions_moved=0,
                 slot_stride_agree=0, page_sizes={}, failures=[])
    t0 = time.time()
    for i in range(a.cases):
        case = make_case(rng)
        ours = run_specgraph(a.specgraph, case)
        tally["cases"] += 1
        tally["padded_cases"] += case["real"] < len(case["seq_len"])
        tally["window_cases"] += case["window"] > 0
        tally["page_granular_cases"] += case["entry_page_size"] > 1
        tally["topk_over_1"] += case["topk"] > 1
        tally["slot_stride_cases"] += case["slot_stride"] > case["num_steps"]
        tally["slot_stride_regions_moved"] += regions_moved(case)
        ps = str(case["page_size"])
        tally["page_sizes"][ps] = tally["page_sizes"].get(ps, 0) + 1
        for backend, blocks in (("triton", 1), ("flashinfer", rng.choice([1, 2, 3]))):
            indptr, indices, positions = run_sglang(mod, torch, case, backend, blocks, a.device)
            problems, documented = compare(case, ours, indptr, indices, positions, mod)
            tally["launches"] += 1
            tally["steps_compared"] += case["num_steps"]
            tally["padded_indptr_differences"] += documented
            if problems:
                tally["disagree"] += 1
                if len(tally["failures"]) < 5:
                    tally["failures"].append(dict(case=i, backend=backend, blocks=blocks,
                                                  problems=problems[:3], input=case))
                print(f"case {i} {backend} (blocks {blocks}): {problems[0]}")
            else:
                tally["agree"] += 1
                tally["slot_stride_agree"] += case["slot_stride"] > case["num_steps"]
        if (i + 1) % 50 == 0:
            print(f"{i + 1} cases, {tally['disagree']} launches disagree "
                  f"({time.time() - t0:.0f} s)", flush=True)
            write(a.json, tally, t0, a, torch, triton, complete=False)  # a cut run still counts
    write(a.json, tally, t0, a, torch, triton, complete=True)
    print(f"csr_vs_sglang: {tally['cases']} cases, {tally['launches']} SGLang launches "
          f"({tally['steps_compared']} steps): {tally['agree']} agree, {tally['disagree']} "
          f"disagree; {tally['padded_indptr_differences']} padded-row kv_indptr entries differ as "
          f"documented ({tally['padded_cases']} padded cases); {tally['slot_stride_cases']} cases "
          f"with slot_stride > num_steps ({tally['slot_stride_regions_moved']} where the regions move), "
          f"{tally['slot_stride_agree']} of their launches agree")
    return 1 if tally["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())

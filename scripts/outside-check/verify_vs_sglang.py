#!/usr/bin/env python3
"""Outside check: `specgraph metadata verify` (its FlashInfer layout) against SGLang's own
target-verify code, on random draft trees.

For random cases (D 2..64 tree tokens with random parents, 1..4 real requests plus 0..2 padded
ones, prefixes up to 700 tokens, random slots), the same inputs go to the specgraph program
(JSON in, JSON out) and to SGLang's code, loaded from an SGLang wheel at run time
(sglang_verify_code.py; nothing of SGLang is kept here) and run under the Triton interpreter on
the CPU (or on a GPU with --device cuda):
  * `EagleVerifyInput.generate_attn_arg_prefill` with the plain-pool translator's
    `pack_read_stream` and the Triton gather `create_flashinfer_kv_indices_triton`: qo_indptr,
    kv_indptr, kv_indices, and the custom mask it pads for a graph bucket (the padded requests'
    cells set to 1). The inputs are the engine's: seq_len without the D tree tokens (SGLang's
    docstring: "excludes the verify tokens and is widened here"), the real requests' mask blocks,
    and for padded requests what the graph runner gives them (seq_len 1, pool row 0);
  * the packed mask as the FlashInfer backend's sync-free graph plan packs it: its
    `pack_verify_mask_into` Triton kernel over that mask, into a poisoned buffer, at the packed
    offsets that plan derives on the host (cumsum of ceil((seq_len + D) * D / 8), a few lines of
    `fast_prefill_plan` repeated here); and, for FlashInfer's own `segment_packbits` (the eager
    plan's packing: a CUDA op, not runnable on a CPU), numpy's packbits with bitorder='little'
    over each request's segment of the same mask.
Compared: qo_indptr, kv_indptr, every kv_indices entry, mask_indptr[-1] against the length of
SGLang's padded mask, packed_mask_indptr against the plan's offsets, every packed byte against
both packings, and that SGLang's kernel wrote nothing past the packed bytes.

    python scripts/outside-check/verify_vs_sglang.py \
        --wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \
        --specgraph build/tools/specgraph --cases 200 [--json out.json]
Exit status 0 when every case agrees, 1 otherwise; 77 when the wheel, torch or triton is missing
(nothing checked).
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
POISON = 0xA5


def make_case(rng: random.Random) -> dict:
    d = rng.choice([rng.randint(2, 16), rng.randint(2, 16), rng.randint(17, 64)])
    real = rng.randint(1, 4)
    pad = rng.choice([0, 0, 1, 2])
    longest = rng.choice([40, 40, 200, 700])  # 700: more than one of the gather's 512-token blocks
    seq = [rng.randint(1, longest) for _ in range(real)] + [1] * pad
    pool_rows = real + 1 + rng.randint(0, 2)
    pool = rng.sample(range(1, pool_rows), real) + [0] * pad
    width = max(seq) + d + rng.randint(0, 5)
    slots = rng.sample(range(1, 1 << 20), pool_rows * width)
    rtt = [slots[i * width:(i + 1) * width] for i in range(pool_rows)]
    mask = []
    for r in range(real):
        parents = [0] + [rng.randint(0, i - 1) for i in range(1, d)]
        for i in range(d):
            anc, t = {0, i}, i
            while t:
                t = parents[t]
                anc.add(t)
            mask += [1] * seq[r] + [int(j in anc) for j in range(d)]
    return dict(num_draft_tokens=d, seq_len=seq, req_pool_index=pool, req_to_token=rtt,
                custom_mask=mask, real_batch=real, page_size=1)


def run_specgraph(program: str, case: dict) -> dict:
    r = subprocess.run([program, "metadata", "verify"], input=json.dumps(case), text=True,
                       capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"specgraph exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)["flashinfer"]


def run_sglang(mod, torch, case: dict, device: str) -> dict:
    d, seq = case["num_draft_tokens"], case["seq_len"]
    bs = len(seq)
    rtt = torch.tensor(case["req_to_token"], dtype=torch.int32, device=device)
    pool = torch.tensor(case["req_pool_index"], dtype=torch.int64, device=device)
    lens = torch.tensor(seq, dtype=torch.int64, device=device)
    spec = mod.VerifyInput(d, torch.tensor(case["custom_mask"], dtype=torch.bool, device=device))
    kv_indices, kv_indptr, qo_indptr, mask = spec.generate_attn_arg_prefill(
        req_pool_indices=pool, paged_kernel_lens=lens, paged_kernel_lens_sum=sum(seq),
        translator=mod.PlainPoolTranslator(rtt, 1), plan=None)
    # fast_prefill_plan's host offsets (EAGLE verify: kv lengths seq_len + D, query width D).
    kv_lens = torch.tensor(seq, dtype=torch.int32) + d
    packed_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    packed_indptr[1:] = torch.cumsum((kv_lens * d + 7) // 8, dim=0)
    total = int(packed_indptr[-1])
    out = torch.full((total + 16,), POISON, dtype=torch.uint8, device=device)
    mod.pack_verify_mask_into(mask, kv_indptr, packed_indptr.to(device), out, batch_size=bs,
                              query_width=d, max_kv_len=int(kv_lens.max()))
    return dict(qo_indptr=qo_indptr.cpu().tolist(), kv_indptr=kv_indptr.cpu().tolist(),
                kv_indices=kv_indices.cpu().tolist(), mask=mask.cpu().to(torch.uint8),
                packed_indptr=packed_indptr.tolist(), packed=out.cpu().tolist(), total=total)


def numpy_packbits(np, mask, kv_indptr, d) -> list[int]:
    """FlashInfer's segment_packbits(mask, mask_indptr, bitorder='little'), by numpy."""
    out = []
    flat = mask.numpy().astype(np.uint8)
    for r in range(len(kv_indptr) - 1):
        out += np.packbits(flat[kv_indptr[r] * d:kv_indptr[r + 1] * d],
                           bitorder="little").tolist()
    return out


def compare(ours: dict, sg: dict, packed_np: list[int], d: int) -> list[str]:
    problems = []
    for key in ("qo_indptr", "kv_indptr", "kv_indices"):
        if ours[key] != sg[key]:
            problems.append(f"{key}: specgraph {ours[key][:8]}..., SGLang {sg[key][:8]}...")
    if ours["mask_indptr"][-1] != sg["mask"].numel():
        problems.append(f"mask cells: specgraph's mask_indptr ends at {ours['mask_indptr'][-1]}, "
                        f"SGLang's padded mask has {sg['mask'].numel()}")
    if ours["mask_indptr"] != [d * k for k in sg["kv_indptr"]]:
        problems.append("mask_indptr is not D x SGLang's kv_indptr")
    if ours["packed_mask_indptr"] != sg["packed_indptr"]:
        problems.append(f"packed_mask_indptr: specgraph {ours['packed_mask_indptr']}, SGLang's "
                        f"plan {sg['packed_indptr']}")
    got = sg["packed"][:sg["total"]]
    if ours["packed_mask"] != got:
        first = next((i for i, (a, b) in enumerate(zip(ours["packed_mask"], got)) if a != b),
                     min(len(got), len(ours["packed_mask"])))
        problems.append(f"packed mask differs from SGLang's pack_verify_mask_into at byte {first}")
    if ours["packed_mask"] != packed_np:
        problems.append("packed mask differs from numpy's packbits (little) of SGLang's mask")
    if any(v != POISON for v in sg["packed"][sg["total"]:]):
        problems.append("SGLang's pack kernel wrote past the packed bytes")
    return problems


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
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    p.add_argument("--json", help="write the tally here")
    a = p.parse_args(argv)
    if not a.wheel or not os.path.isfile(a.wheel):
        print(f"verify_vs_sglang: no SGLang wheel ({a.wheel!r}); nothing checked")
        return SKIP
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    try:
        import numpy as np
        import torch
        import triton
    except ImportError as e:
        print(f"verify_vs_sglang: {e}; nothing checked")
        return SKIP
    if not os.access(a.specgraph, os.X_OK):
        print(f"verify_vs_sglang: no specgraph program at {a.specgraph}")
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sglang_verify_code

    mod = sglang_verify_code.load(a.wheel)
    rng = random.Random(a.seed)
    tally = dict(cases=0, agree=0, disagree=0, padded_cases=0, d_over_16=0, long_prefix_cases=0,
                 kv_indices_compared=0, packed_bytes_compared=0, failures=[])
    t0 = time.time()
    for i in range(a.cases):
        case = make_case(rng)
        ours = run_specgraph(a.specgraph, case)
        sg = run_sglang(mod, torch, case, a.device)
        d = case["num_draft_tokens"]
        problems = compare(ours, sg, numpy_packbits(np, sg["mask"], sg["kv_indptr"], d), d)
        tally["cases"] += 1
        tally["padded_cases"] += case["real_batch"] < len(case["seq_len"])
        tally["d_over_16"] += d > 16
        tally["long_prefix_cases"] += max(case["seq_len"]) > 512
        tally["kv_indices_compared"] += len(sg["kv_indices"])
        tally["packed_bytes_compared"] += sg["total"]
        if problems:
            tally["disagree"] += 1
            if len(tally["failures"]) < 5:
                tally["failures"].append(dict(case=i, problems=problems[:3], input=case))
            print(f"case {i}: {problems[0]}")
        else:
            tally["agree"] += 1
        if (i + 1) % 25 == 0:
            print(f"{i + 1} cases, {tally['disagree']} disagree ({time.time() - t0:.0f} s)",
                  flush=True)
            write(a.json, tally, t0, a, torch, triton, complete=False)  # a cut run still counts
    write(a.json, tally, t0, a, torch, triton, complete=True)
    print(f"verify_vs_sglang: {tally['cases']} cases (seed {a.seed}, {tally['padded_cases']} "
          f"padded, {tally['d_over_16']} with D > 16): {tally['agree']} agree, "
          f"{tally['disagree']} disagree; {tally['kv_indices_compared']} kv_indices entries and "
          f"{tally['packed_bytes_compared']} packed bytes compared; SGLang "
          f"{os.path.basename(a.wheel)}, triton {triton.__version__}, torch {torch.__version__}")
    return 1 if tally["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Outside check: `specgraph metadata extend` against SGLang's own draft-extend code, on random
rounds.

Random engines (page size 1/2/4/16/64, window W 2..16, captured buckets up to 8 requests, a
context length, a request pool of fragmented pages) each run 1 to 4 consecutive rounds, as on a
GPU: their static buffers persist from round to round. A round has 0..8 requests (0: an idle
data-parallel rank), a bucket from the batch or from another rank's larger one (padded rows),
committed lengths up to SGLang's admission limit max_context_len - 2 (about a fifth of the rounds
put requests at the context edge) and accept lengths 1..W (SGLang's verify never yields 0; the
last round of some engines has a few 0s, for the documented select-index difference). The same
inputs go to the specgraph program (JSON in, JSON out) and to SGLang's code, loaded from an
SGLang wheel at run time (sglang_extend_code.py; nothing of SGLang is kept here) and run under
the Triton interpreter on the CPU (or on a GPU with --device cuda):
  * verify's window slots (`assign_extend_cache_locs_uniform`), the worker's lengths and
    positions (`prepare_draft_extend_layout`) and select index (`prepare_draft_extend_inputs`);
  * the graph runner's static buffers as its `execute` fills them before a replay (those few
    lines are repeated here: a padded bucket first resets lengths to the backends' fill value,
    slots, positions and pool rows to 0; then the first bs entries are copied; select_index is
    never reset), bucket from `_pad_to_bucket`, fill value from
    `resolve_draft_extend_seq_len_fill_value`;
  * FA3's in-graph `draft_extend_set_metadata` over the engine's persistent table
    (max_bs x ceil(max_context_len / ps), as init_cuda_graph_state sizes it);
  * the Triton backend's `_update_draft_extend_buffers` (C2p) into its poisoned
    max_num_tokens * max_context_len kv_indices;
  * `EagleDraftExtendInput.generate_attn_arg_prefill` (C2f, FlashInfer's graph replay) over the
    runner's buffers, and the host layout `fast_prefill_plan` is given (the few lines of
    call_begin_forward repeated here), against the device's kv_indptr.
Compared: every position, slot and select index; cache_seqlen, both cu_seqlens, max_seqlen_q/k
and every page-table cell; both CSR layouts' qo_indptr, kv_indptr, every kv_indices entry (and
that SGLang wrote nothing past them), kv_last_page_len; the violations. The differences the spec
documents (../shared/spec/draft-extend.md sections 2, 3 and 6) are checked to be exactly the
spec's and counted, not failed:
  * stale_tail_cells: FA3 page-table cells past a row's pages that SGLang leaves holding an earlier
    round's page id (specgraph writes 0);
  * clamped_columns: at the context edge SGLang's table is ceil(max_context_len / ps) wide and its
    kernel drops the row's later pages (specgraph's default table holds them; each is checked
    against req_to_token). Such rounds also run specgraph with page_table_capacity = SGLang's
    width, which must report exactly one capacity violation per clamped row (column, count, the
    dropped page id) and otherwise equal SGLang's table; foreign_pages counts the cells FA3 would
    read from the next row of SGLang's table instead;
  * padded_select_index: a padded row's select_index that SGLang leaves from an earlier, larger
    batch (it must lie in the row's own window; specgraph's is r * W + W - 1);
  * accept_len_zero: SGLang's r * W - 1 where specgraph selects r * W and reports the row.

    python scripts/outside-check/extend_vs_sglang.py \
        --wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \
        --specgraph build/tools/specgraph --rounds 300 [--json out.json]
Exit status 0 when every round agrees (documented differences aside), 1 otherwise; 77 when the
wheel, torch or triton is missing, or the program has no `metadata extend` (nothing checked).
`--specgraph scripts/outside-check/extend_spec_reference.py` runs SGLang against an independent
Python reading of the spec's CLI section instead of the program.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extend_compare import cdiv, compare, compare_capped  # noqa: E402

SKIP = 77
POISON = -7
PAGE_SIZES = [1, 2, 4, 16, 64]
DOCUMENTED = ("stale_tail_cells", "clamped_columns", "clamped_rows", "foreign_pages",
              "padded_select_index", "accept_len_zero")


class Engine:
    """One engine's configuration, request pool and SGLang's persistent static buffers."""

    def __init__(self, rng, mod, torch, device):
        self.ps = rng.choice(PAGE_SIZES)
        self.w = rng.randint(2, 16)
        self.buckets = sorted(set([8] + rng.sample(range(1, 8), rng.randint(0, 4))))
        self.max_bs = max(self.buckets)
        # Contexts from a few pages to several of the gather kernel's 512-token blocks.
        pages = rng.choice([3, 5, 12, 40]) if self.ps >= 16 else None
        self.mcl = pages * self.ps if pages else rng.choice([16, 40, 100, 300, 700, 1100])
        self.mcl = max(self.mcl, self.w + 3)
        self.mcl += rng.choice([0, 0, rng.randint(1, self.ps)]) if self.ps > 1 else 0
        self.width = self.mcl + 4 + self.w  # get_req_to_token_extra_context_len's headroom
        self.rows = 1 + self.max_bs + rng.randint(0, 3)
        # Pool row 0 is the dummy row (all 0); the others hold random (fragmented) pages.
        npages = cdiv(self.width, self.ps)
        ids = rng.sample(range(1, max(60000 // self.ps, self.rows * npages + 1)),
                         (self.rows - 1) * npages)
        self.rtt = [[0] * self.width]
        for i in range(self.rows - 1):
            pg = ids[i * npages:(i + 1) * npages]
            self.rtt.append([pg[p // self.ps] * self.ps + p % self.ps for p in range(self.width)])
        self.mod, self.torch, self.device = mod, torch, device
        t = torch
        dev = device
        self.req_to_token = t.tensor(self.rtt, dtype=t.int32, device=dev)
        # The runner's buffers (EAGLEDraftExtendCudaGraphRunner.__init__).
        self.fill = mod.resolve_draft_extend_seq_len_fill_value(mod.FA3Backend(), self.w)
        assert self.fill == mod.TritonDraftExtend.get_cuda_graph_seq_len_fill_value(None) == \
            mod.FlashInferBackend().get_cuda_graph_seq_len_fill_value()
        n, w = self.max_bs * self.w, self.w
        self.b = dict(
            seq_lens=t.full((self.max_bs,), self.fill, dtype=t.int64, device=dev),
            seq_lens_cpu=t.full((self.max_bs,), self.fill, dtype=t.int64),
            out_cache_loc=t.ones((n,), dtype=t.int64, device=dev),
            positions=t.zeros((n,), dtype=t.int64, device=dev),
            req_pool_indices=t.zeros((self.max_bs,), dtype=t.int64, device=dev),
            extend_seq_lens=t.full((self.max_bs,), w, dtype=t.int32, device=dev),
            num_correct_drafts=t.full((self.max_bs,), w, dtype=t.int32, device=dev),
            num_accept_tokens=t.full((self.max_bs,), w, dtype=t.int32, device=dev),
            select_index=t.arange(self.max_bs, dtype=t.int64, device=dev) * w + w - 1)
        # FA3's init_cuda_graph_state: draft_extend_metadata.
        self.pages = cdiv(self.mcl, self.ps)  # max_num_pages
        self.fa3 = dict(
            cache_seqlens=t.zeros(self.max_bs, dtype=t.int32, device=dev),
            cu_seqlens_q=t.zeros(self.max_bs + 1, dtype=t.int32, device=dev),
            cu_seqlens_k=t.zeros(self.max_bs + 1, dtype=t.int32, device=dev),
            page_table=t.zeros(self.max_bs, self.pages, dtype=t.int32, device=dev))
        self.translator = mod.verify.PlainPoolTranslator(self.req_to_token, self.ps)
        self.triton = mod.TritonDraftExtend(self.translator, self.max_bs, n, self.mcl, w,
                                            w - 1, dev, POISON)
        self.kv_last_page_len = t.ones((self.max_bs,), dtype=t.int32, device=dev)


def make_round(rng, eng, zeros: bool) -> dict:
    bs = rng.randint(0, eng.max_bs)
    other = bs if rng.random() < 0.6 else rng.randint(max(bs, 1), eng.max_bs)  # DP ranks
    other = max(other, 1)  # an idle rank replays only for another rank's requests
    bucket = eng.mod.Runner._pad_to_bucket(other, eng.buckets)
    edge = rng.random() < 0.2
    hi = eng.mcl - 2  # SGLang's admission limit: the last output token is the next root
    seq = []
    for _ in range(bs):
        if edge and rng.random() < 0.6:
            seq.append(rng.randint(max(1, hi - eng.ps - eng.w), hi))
        else:
            seq.append(rng.randint(1, rng.choice([hi, max(1, hi // 8)])))
    accept = [rng.randint(1, eng.w) for _ in range(bs)]
    if zeros and bs:
        for r in rng.sample(range(bs), rng.randint(1, bs)):
            accept[r] = 0
    pool = rng.sample(range(1, eng.rows), bs)
    return dict(page_size=eng.ps, num_draft_tokens=eng.w, seq_len=seq, accept_len=accept,
                req_pool_index=pool, bucket=bucket, edge=edge)


def run_specgraph(program: str, eng, rnd: dict, capacity=None) -> dict:
    doc = {k: rnd[k] for k in ("page_size", "num_draft_tokens", "seq_len", "accept_len",
                               "req_pool_index", "bucket")}
    doc["req_to_token"] = eng.rtt
    if capacity is not None:
        doc["page_table_capacity"] = capacity
    r = subprocess.run([program, "metadata", "extend"], input=json.dumps(doc), text=True,
                       capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"specgraph exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def run_sglang(eng, rnd: dict, rng) -> dict:
    """SGLang's buffers after the worker, the runner and the three backends (one round)."""
    mod, torch, dev = eng.mod, eng.torch, eng.device
    k, b, w = mod.kernels, eng.b, eng.w
    bs, B = len(rnd["seq_len"]), rnd["bucket"]
    seq_lens = torch.tensor(rnd["seq_len"], dtype=torch.int64, device=dev)
    pool = torch.tensor(rnd["req_pool_index"], dtype=torch.int64, device=dev)
    accept = torch.tensor(rnd["accept_len"], dtype=torch.int32, device=dev)
    predict = torch.tensor([rng.randint(0, 32000) for _ in range(bs * w)], dtype=torch.int64,
                           device=dev)
    # Verify's window slots (eagle_prepare_for_verify), written again by the draft extend.
    out_cache_loc = torch.empty((bs * w,), dtype=torch.int64, device=dev)
    if bs:
        k.assign_extend_cache_locs_uniform[(bs,)](pool, eng.req_to_token, seq_lens,
                                                  out_cache_loc, eng.req_to_token.shape[1], w)
    _, extend_lens, post, (positions, _, _) = k.prepare_draft_extend_layout(seq_lens, w, False)
    correct, select, _ = k.prepare_draft_extend_inputs(accept, predict, w)
    # EAGLEDraftExtendCudaGraphRunner.execute's buffer updates (repeated here).
    num_tokens = bs * w
    if B * w != num_tokens:
        b["seq_lens"].fill_(eng.fill)
        b["out_cache_loc"].zero_()
        b["positions"].zero_()
        b["req_pool_indices"].zero_()
        b["num_correct_drafts"].fill_(w)
        b["num_accept_tokens"].fill_(w)
        b["extend_seq_lens"].fill_(w)
    b["seq_lens"][:bs].copy_(post)
    b["out_cache_loc"][:num_tokens].copy_(out_cache_loc)
    b["positions"][:num_tokens].copy_(positions)
    b["req_pool_indices"][:bs].copy_(pool)
    b["extend_seq_lens"][:bs].copy_(extend_lens)
    b["num_correct_drafts"][:bs].copy_(correct)
    b["num_accept_tokens"][:bs].copy_(accept)
    b["select_index"][:bs].copy_(select)
    if B != bs:
        b["seq_lens_cpu"].fill_(eng.fill)
    b["seq_lens_cpu"][:bs].copy_(post.cpu())
    seq_lens_sum = int(post.sum()) + (B - bs) * eng.fill
    num_correct = b["num_correct_drafts"][:B] if B != bs else correct
    # FA3, in the graph: draft_extend_set_metadata over the persistent table.
    f = eng.fa3
    k.draft_extend_set_metadata(
        cache_seqlens_int32=f["cache_seqlens"][:B], cu_seqlens_k=f["cu_seqlens_k"][:B + 1],
        cu_seqlens_q=f["cu_seqlens_q"][:B + 1], page_table=f["page_table"][:B, :],
        req_to_token=eng.req_to_token, req_pool_indices=b["req_pool_indices"][:B],
        seq_lens=b["seq_lens"][:B], extend_seq_lens=b["extend_seq_lens"][:B],
        page_size=eng.ps)
    # Triton, before the replay: _update_draft_extend_buffers into poisoned kv_indices.
    tr = eng.triton
    tr.cuda_graph_kv_indices.fill_(POISON)
    mode = type("Mode", (), {"is_draft_extend_v2": lambda self: True})()
    spec = type("Spec", (), {})()
    spec.extend_seq_lens_tensor = b["extend_seq_lens"][:B]
    t_qo, t_kv, t_max = tr._update_draft_extend_buffers(None, B, b["seq_lens"], mode, spec,
                                                        b["req_pool_indices"])
    # FlashInfer, before the replay: generate_attn_arg_prefill over the runner's buffers.
    fi = mod.DraftExtendInput(num_correct, w)
    f_idx, f_kv, f_qo, f_mask = fi.generate_attn_arg_prefill(
        req_pool_indices=b["req_pool_indices"][:B], paged_kernel_lens=b["seq_lens"][:B],
        paged_kernel_lens_sum=seq_lens_sum, translator=eng.translator, plan=None)
    # call_begin_forward's host layout for fast_prefill_plan (from the runner's mirror).
    host = torch.zeros(B + 1, dtype=torch.int32)
    host[1:] = torch.cumsum(b["seq_lens_cpu"][:B].to(torch.int32), dim=0)
    cpu = lambda x: x.cpu().tolist()  # noqa: E731
    used = int(t_kv[B])
    return dict(
        position=cpu(b["positions"][:B * w]), out_cache_loc=cpu(b["out_cache_loc"][:B * w]),
        select_index=cpu(b["select_index"][:B]), cache_seqlen=cpu(f["cache_seqlens"][:B]),
        cu_seqlens_q=cpu(f["cu_seqlens_q"][:B + 1]), cu_seqlens_k=cpu(f["cu_seqlens_k"][:B + 1]),
        page_table=cpu(f["page_table"][:B]), pool_row=cpu(b["req_pool_indices"][:B]),
        t_qo=cpu(t_qo), t_kv=cpu(t_kv), t_max=t_max,
        t_idx=cpu(tr.cuda_graph_kv_indices[:used]),
        t_past=int((tr.cuda_graph_kv_indices[used:] != POISON).sum()),
        f_qo=cpu(f_qo), f_kv=cpu(f_kv), f_idx=cpu(f_idx), f_mask=f_mask,
        f_last=cpu(eng.kv_last_page_len[:B]), f_host=host.tolist())


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
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--seed", type=int, default=20261202)
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    p.add_argument("--json", help="write the tally here")
    a = p.parse_args(argv)
    if not a.wheel or not os.path.isfile(a.wheel):
        print(f"extend_vs_sglang: no SGLang wheel ({a.wheel!r}); nothing checked")
        return SKIP
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    try:
        import torch
        import triton
    except ImportError as e:
        print(f"extend_vs_sglang: {e}; nothing checked")
        return SKIP
    if not os.access(a.specgraph, os.X_OK):
        print(f"extend_vs_sglang: no specgraph program at {a.specgraph}")
        return 2
    probe = subprocess.run([a.specgraph, "metadata", "extend", "--help"], text=True,
                           capture_output=True, check=False)
    if probe.returncode != 0 and "unknown metadata command" in probe.stderr:
        print(f"extend_vs_sglang: {a.specgraph} has no `metadata extend` yet; nothing checked")
        return SKIP
    import sglang_extend_code

    mod = sglang_extend_code.load(a.wheel)
    rng = random.Random(a.seed)
    tally = dict(rounds=0, engines=0, agree=0, disagree=0, idle_rounds=0, padded_rounds=0,
                 edge_rounds=0, capped_runs=0, zero_accept_rounds=0, page_sizes={},
                 cells_compared=0, documented={k: 0 for k in DOCUMENTED}, failures=[])
    t0 = time.time()
    eng, left = None, 0
    for i in range(a.rounds):
        if left == 0:
            eng, left = Engine(rng, mod, torch, a.device), rng.randint(1, 4)
            tally["engines"] += 1
        left -= 1
        rnd = make_round(rng, eng, zeros=left == 0 and rng.random() < 0.25)
        ours = run_specgraph(a.specgraph, eng, rnd)
        sg = run_sglang(eng, rnd, rng)
        problems = compare(eng, rnd, ours, sg, tally["documented"])
        if any(cdiv(n, eng.ps) > eng.pages for n in sg["cache_seqlen"]):
            tally["capped_runs"] += 1
            problems += compare_capped(eng, rnd, run_specgraph(a.specgraph, eng, rnd,
                                                               eng.pages), sg)
        bs, B = len(rnd["seq_len"]), rnd["bucket"]
        tally["rounds"] += 1
        tally["idle_rounds"] += bs == 0
        tally["padded_rounds"] += B > bs
        tally["edge_rounds"] += rnd["edge"]
        tally["zero_accept_rounds"] += 0 in rnd["accept_len"]
        ps = str(eng.ps)
        tally["page_sizes"][ps] = tally["page_sizes"].get(ps, 0) + 1
        tally["cells_compared"] += (2 * B * eng.w + B + 3 * (B + 1) + sum(map(len, ours["fa3"][
            "page_table"])) + 2 * (B + 1) + len(sg["t_idx"]) + 2 * (B + 1) + len(sg["f_idx"]) + B)
        if problems:
            tally["disagree"] += 1
            if len(tally["failures"]) < 5:
                tally["failures"].append(dict(round=i, problems=problems[:4], ps=eng.ps, w=eng.w,
                                              max_context_len=eng.mcl, input=rnd))
            print(f"round {i}: {problems[0]}")
        else:
            tally["agree"] += 1
        if (i + 1) % 25 == 0:
            print(f"{i + 1} rounds, {tally['disagree']} disagree ({time.time() - t0:.0f} s)",
                  flush=True)
            write(a.json, tally, t0, a, torch, triton, complete=False)  # a cut run still counts
    write(a.json, tally, t0, a, torch, triton, complete=True)
    d = tally["documented"]
    print(f"extend_vs_sglang: {tally['rounds']} rounds on {tally['engines']} engines (seed "
          f"{a.seed}; {tally['padded_rounds']} padded, {tally['idle_rounds']} idle, "
          f"{tally['edge_rounds']} at the context edge): {tally['agree']} agree, "
          f"{tally['disagree']} disagree; {tally['cells_compared']} cells compared; documented "
          f"differences: {d['stale_tail_cells']} stale tail cells, {d['clamped_columns']} "
          f"clamped columns in {d['clamped_rows']} rows ({d['foreign_pages']} read from another "
          f"row), {d['padded_select_index']} padded select indices, {d['accept_len_zero']} "
          f"accept-length-0 selects; SGLang {os.path.basename(a.wheel)}, triton "
          f"{triton.__version__}, torch {torch.__version__}")
    return 1 if tally["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())

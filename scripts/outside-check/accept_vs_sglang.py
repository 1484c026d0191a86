#!/usr/bin/env python3
"""Outside check: `specgraph metadata accept` against SGLang's own code for the round after
verify (../shared/spec/round-on-device.md), on random rounds.

A round: topk 1..4, num_steps 1..5, page size 1/2/4/16, 1..4 rows of which some may be padding
(real_batch 0 included), trees from SGLang's draft loop (random top-k distributions, some with
ties and exact zeros, which give orphans) or random parent arrays (repeated sibling tokens,
orphans, and for topk > 1 sometimes D < num_steps + 1), req_to_token rows of random pages as wide
as SGLang makes them (`get_req_to_token_extra_context_len`), committed lengths up to the context
edge, allocated lengths page-aligned or not (right after prefill), a ring of free pages in random
order (some too short), reserve R1 or SGLang's 2 * R1, stop tokens and length budgets. The same
inputs go to the specgraph program (JSON in, JSON out) and to SGLang's code, loaded from the
wheel at run time (sglang_accept_code.py; nothing of SGLang is kept here) and run under the
Triton interpreter on the CPU (accept_sglang_run.py has the steps). Compared
(accept_compare.py): the tree lists (SGLang's builders against section 2's rules), every
acceptance field, the KV move pairs and their effect, the draft-extend handoff, finish, emit
length and the slots to free, the allocation (every req_to_token write, allocated lengths, pages
taken), the next round's inputs and the violations. Documented differences (sections 4.2, 4.3,
5, 7 and 9) are checked to be exactly as documented and counted, not failed:
  * noop_pairs: SGLang's (s, s) move pairs and its (0, 0) padding;
  * compact_fill: compacted rows [a, S) that hold global node 0's value;
  * compact_crash: `_compact_accept_to_front` failing at topk > 1 with D < num_steps + 1;
  * row_spill / row_spill_slots: SGLang's allocation running past a req_to_token row (ps 1 or
    topk 1), row_width_assert: its fail-fast assert (ps > 1, topk > 1); such rounds run SGLang
    again without those rows, which the program must report as `row_width` and leave alone;
  * reserve_2x: rounds run with SGLang's own 2 * R1 (the others set R1 on both sides);
  * host_lag_rows: rows whose allocation SGLang's host would size from the pre-round committed
    length (its one-round lag) with 2 * R1; each must cover the lag-free R1 rule's;
  * padded_rows: rows SGLang never runs, checked against section 7.
Not modelled: the lagged allocation's own req_to_token writes (SGLang's allocation is run with
the lag-free committed length; the lag is checked on the sizes only), the extra round a
finished request runs in overlap mode, stop strings and grammars.

    python scripts/outside-check/accept_vs_sglang.py \
        --wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \
        --specgraph build/tools/specgraph --rounds 300 [--json out.json]
Exit status 0 when every round agrees (documented differences aside), 1 otherwise; 77 when the
wheel, torch or triton is missing. Without `metadata accept` in the program (or with
`--specgraph scripts/outside-check/accept_spec_reference.py`) SGLang is compared with the
independent reference of the spec instead, and the output says so.
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
from accept_compare import DOCUMENTED, compare, lists_from_parent  # noqa: E402

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "accept_spec_reference.py")


def cdiv(a, b):
    return -(-a // b)


def make_round(rng, mod, torch, run):
    """Inputs for one round, SGLang's tree included (built by SGLang's code)."""
    topk, ns, ps = rng.randint(1, 4), rng.randint(1, 5), rng.choice([1, 2, 4, 16])
    kind = rng.choice(["draft", "draft", "random"])
    if topk == 1:
        D = ns + 1
    elif kind == "draft":
        D = rng.randint(2, min(topk + (ns - 1) * topk * topk + 1, 16))
    else:
        D = rng.randint(max(2, ns + 1 if rng.random() < 0.85 else 2), 12)
    import sglang_accept_code
    sglang_accept_code.configure(mod, topk, ns, D, ps)
    bs = rng.randint(1, 4)
    real = bs if rng.random() < 0.6 else rng.randint(0, bs)
    mcl = rng.choice([24, 40, 64, 100]) + rng.randint(0, ps)
    W = mcl + mod.get_req_to_token_extra_context_len()
    W = cdiv(W, ps) * ps if rng.random() < 0.5 else W
    R1 = mod.get_alloc_len_per_decode()
    two = rng.random() < 0.4
    R = 2 * R1 if two else R1
    vocab = rng.choice([4, 6, 10])
    edge = rng.random() < 0.25
    nrows = 1 + bs + rng.randint(0, 2)
    npages = cdiv(W, ps)
    ids = rng.sample(range(1, 40 * nrows * npages + 50), nrows * npages + 64)
    rtt, seq, al, pool = [[0] * W], [], [], rng.sample(range(1, nrows), bs)
    for i in range(1, nrows):
        pg = ids[(i - 1) * npages:i * npages]
        rtt.append([pg[p // ps] * ps + p % ps for p in range(W)])
    ring_ids = ids[(nrows - 1) * npages:]
    rng.shuffle(ring_ids)
    for r in range(bs):
        if r >= real:
            seq.append(1)
            al.append(0)
            continue
        hi = max(1, min(mcl - 4, W - D))
        s = rng.randint(max(1, hi - 2 * ps - 4), hi) if edge else rng.randint(1, hi)
        lo = s + D
        if rng.random() < 0.3:
            a = rng.randint(lo, min(W, lo + ps + 3))  # right after prefill: maybe unaligned
        else:
            a = max(lo, cdiv(s - rng.randint(0, ns + 1) + R, ps) * ps)
            a = min(a, W)
        seq.append(s)
        al.append(a)
    for r in range(bs):  # positions past allocated_len are not the request's: 0
        if r < real:
            rtt[pool[r]][al[r]:] = [0] * (W - al[r])
    need = bs * cdiv(ns + 1, ps) + 2
    ring = ring_ids[:rng.choice([need + rng.randint(0, 8), rng.randint(0, need)])]
    bonus = [rng.randrange(vocab) for _ in range(real)]
    tree = None
    if kind == "draft" and topk > 1:
        tree = run.draft_loop(mod, torch, rng, real, topk, ns, D, bonus, seq[:real], vocab,
                              ties=rng.random() < 0.4) if real else None
    parents = []
    for r in range(real):
        if tree is not None:
            parents.append(parent_from_lists(tree["next"][r], tree["sib"][r]))
        elif topk == 1:
            parents.append([-1] + list(range(D - 1)))
        else:
            parents.append(random_parent(rng, D, ns))
    draft = (tree["draft"] if tree is not None else
             [[bonus[r]] + [rng.randrange(vocab) for _ in range(D - 1)] for r in range(real)])
    if tree is None and real:
        tree = run.mask_tree(mod, torch, parents, seq[:real])
    target = [random_target(rng, parents[r], draft[r], vocab) for r in range(real)]
    stops = rng.sample(range(vocab), rng.randint(1, 2)) if rng.random() < 0.4 else []
    left = [rng.choice([1, 2, 3, 5] + [50] * 6) for _ in range(bs)]
    prev = []
    for r in range(real):
        ok = [t for t in range(vocab) if t not in stops]
        prev.append([rng.choice(ok) for _ in range(rng.randint(1, min(seq[r], 12)))])
    pad_parent = [-1] + [0] * (D - 1)
    doc = dict(page_size=ps, topk=topk, num_steps=ns, num_draft_tokens=D, seq_len=seq,
               req_pool_index=[pool[r] if r < real else 0 for r in range(bs)], req_to_token=rtt,
               parent=parents + [pad_parent] * (bs - real),
               draft_token=draft + [[0] * D] * (bs - real),
               target_predict=target + [[0] * D] * (bs - real), allocated_len=al,
               free_pages=ring, reserve=R, real_batch=real, stop_token_ids=stops,
               max_new_tokens_left=left)
    meta = dict(kind=kind, tree=tree, prev=prev, two=two, R1=R1, edge=edge, mcl=mcl)
    return doc, meta


def parent_from_lists(nxt, sib):
    """The parent array of SGLang's lists: the children of u are next[u], then siblings."""
    par = [-1] * len(nxt)
    for u in range(len(nxt)):
        v = nxt[u]
        while v != -1:
            par[v] = u
            v = sib[v]
    return par


def random_parent(rng, D, ns):
    par, depth = [-1], [0]
    for i in range(1, D):
        ok = [j for j in range(i) if depth[j] >= 0 and depth[j] < ns]
        if rng.random() < 0.1 or not ok:
            par.append(-1)  # an orphan (its subtree is unreachable)
            depth.append(-99)
            continue
        p = rng.choice(ok + [ok[-1]] * 2)  # deeper trees now and then
        par.append(p)
        depth.append(depth[p] + 1 if depth[p] >= 0 else -99)
    return par


def random_target(rng, par, draft, vocab):
    tgt = []
    for u in range(len(par)):
        kids = [v for v in range(len(par)) if par[v] == u and v > 0]
        if kids and rng.random() < 0.7:
            tgt.append(draft[rng.choice(kids)])
        else:
            tgt.append(rng.randrange(vocab))
    return tgt


def run_program(program: str, doc: dict) -> dict:
    cmd = [program, "metadata", "accept"]
    if program.endswith(".py"):
        cmd = [sys.executable] + cmd
    r = subprocess.run(cmd, input=json.dumps(doc), text=True, capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{program} exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def has_accept(program: str) -> bool:
    if not os.access(program, os.X_OK):
        return False
    probe = subprocess.run([program, "metadata", "accept", "--help"], text=True,
                           capture_output=True, check=False)
    return not (probe.returncode != 0 and "unknown metadata command" in probe.stderr)


def write(path, tally, t0, a, torch, triton, complete):
    tally.update(seconds=round(time.time() - t0, 1), seed=a.seed,
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
    p.add_argument("--seed", type=int, default=20261203)
    p.add_argument("--json", help="write the tally here")
    a = p.parse_args(argv)
    if not a.wheel or not os.path.isfile(a.wheel):
        print(f"accept_vs_sglang: no SGLang wheel ({a.wheel!r}); nothing checked")
        return SKIP
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    try:
        import torch
        import triton
    except ImportError as e:
        print(f"accept_vs_sglang: {e}; nothing checked")
        return SKIP
    program = a.specgraph
    if not program.endswith(".py") and not has_accept(program):
        print(f"accept_vs_sglang: {program} has no `metadata accept`; comparing SGLang with "
              "accept_spec_reference.py (the spec) instead of the program")
        program = REFERENCE
    against = "reference" if program.endswith(".py") else "program"
    import accept_sglang_run as run
    import sglang_accept_code

    mod = sglang_accept_code.load(a.wheel)
    rng = random.Random(a.seed)
    tally = dict(against=against, rounds=0, agree=0, disagree=0, draft_loop_trees=0,
                 mask_builder_trees=0, orphan_trees=0, padded_rounds=0, idle_rounds=0,
                 edge_rounds=0,
                 short_ring_rounds=0, finished_rows=0, page_sizes={}, cells_compared=0,
                 documented={k: 0 for k in DOCUMENTED}, failures=[])
    t0 = time.time()
    for i in range(a.rounds):
        doc, meta = make_round(rng, mod, torch, run)
        ours = run_program(program, doc)
        problems, cells = compare(mod, torch, run, doc, meta, ours, tally)
        tally["rounds"] += 1
        tally["cells_compared"] += cells
        ps = str(doc["page_size"])
        tally["page_sizes"][ps] = tally["page_sizes"].get(ps, 0) + 1
        if problems:
            tally["disagree"] += 1
            if len(tally["failures"]) < 5:
                tally["failures"].append(dict(round=i, problems=problems[:4], input=doc))
            print(f"round {i}: {problems[0]}")
        else:
            tally["agree"] += 1
        if (i + 1) % 25 == 0:
            print(f"{i + 1} rounds, {tally['disagree']} disagree ({time.time() - t0:.0f} s)",
                  flush=True)
            write(a.json, tally, t0, a, torch, triton, complete=False)
    write(a.json, tally, t0, a, torch, triton, complete=True)
    d = tally["documented"]
    print(f"accept_vs_sglang: {tally['rounds']} rounds (seed {a.seed}) against the {against}"
          f"{' (accept_spec_reference.py, not the program)' if against == 'reference' else ''}: "
          f"{tally['agree']} agree, {tally['disagree']} disagree; {tally['cells_compared']} cells "
          f"compared; trees {tally['draft_loop_trees']} from the draft loop, "
          f"{tally['mask_builder_trees']} through the mask builder (chains, random parent "
          f"arrays), {tally['orphan_trees']} with orphans; {tally['padded_rounds']} padded, "
          f"{tally['idle_rounds']} idle, {tally['edge_rounds']} at the context edge, "
          f"{tally['short_ring_rounds']} short rings, {tally['finished_rows']} finished rows; "
          f"documented: " + ", ".join(f"{k} {v}" for k, v in d.items()) +
          f"; SGLang {os.path.basename(a.wheel)}, triton {triton.__version__}, "
          f"torch {torch.__version__}, {time.time() - t0:.1f} s")
    return 1 if tally["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())

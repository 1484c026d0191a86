"""The comparisons of scripts/outside-check/accept_vs_sglang.py: the program's JSON against
SGLang's code for one round (accept_sglang_run.py), with the spec's documented differences
counted apart (the list is in accept_vs_sglang.py's docstring)."""
from __future__ import annotations

import json

DOCUMENTED = ("noop_pairs", "compact_fill", "compact_crash", "row_spill", "row_spill_slots",
              "row_width_assert", "reserve_2x", "host_lag_rows", "padded_rows")


def cdiv(a, b):
    return -(-a // b)


def lists_from_parent(par):
    """Section 2.1's three lists of one request (node indices; index r * D + i is added)."""
    D = len(par)
    nxt, sib = [-1] * D, [-1] * D
    for i in range(D - 1, 0, -1):
        p = par[i]
        if p >= 0:
            sib[i], nxt[p] = nxt[p], i
    return nxt, sib


def reachable(par):
    ok = [True] + [False] * (len(par) - 1)
    for i in range(1, len(par)):
        ok[i] = par[i] >= 0 and ok[par[i]]
    return ok


class Check:
    def __init__(self):
        self.problems, self.cells = [], 0

    def eq(self, what, mine, theirs):
        self.cells += len(json.dumps(theirs).split(","))
        if mine != theirs:
            self.problems.append(f"{what}: specgraph {mine}, SGLang {theirs}")


def check_tree(c, doc, meta, tally):
    """SGLang's lists against section 2's rules on the parent array the program gets."""
    D, topk, tree = doc["num_draft_tokens"], doc["topk"], meta["tree"]
    real = doc["real_batch"]
    for r in range(real):
        par = doc["parent"][r]
        nxt, sib = lists_from_parent(par)
        c.eq(f"tree row {r} retrive_next_token", nxt, tree["next"][r])
        c.eq(f"tree row {r} retrive_next_sibling", sib, tree["sib"][r])
        c.eq(f"tree row {r} retrive_index", [r * D + i for i in range(D)], tree["index"][r])
        tally["orphan_trees"] += not all(reachable(par))
        if meta["kind"] == "draft" and topk > 1:
            kept, scores = tree["kept"][r], tree["scores"][r]
            # Section 2.2: the D - 1 best-scoring candidates, by flat index, their parents.
            dropped = [scores[f] for f in range(len(scores)) if f not in kept]
            if kept != sorted(kept) or (dropped and min(scores[f] for f in kept) < max(dropped)):
                c.problems.append(f"tree row {r}: kept candidates {kept} are not the best")
            beams = meta["tree"]["beams"]
            want = [-1]
            for f in kept:
                if f < topk:
                    want.append(0)
                    continue
                s, b = (f - topk) // (topk * topk) + 1, (f - topk) % (topk * topk) // topk
                beam = b if s == 1 else beams[s - 1][r][b]
                want.append(kept.index(beam) + 1 if beam in kept else -1)
            c.eq(f"tree row {r} parents from the draft loop", par, want)
            c.eq(f"tree row {r} tokens", doc["draft_token"][r][1:],
                 [tree["cand_tokens"][r][f] for f in kept])
    loop = meta["kind"] == "draft" and topk > 1
    tally["draft_loop_trees" if loop else "mask_builder_trees"] += real


def check_padded(c, doc, ours, tally):
    """Section 7, for rows SGLang never runs."""
    D, S, topk, ns = doc["num_draft_tokens"], doc["num_steps"] + 1, doc["topk"], doc["num_steps"]
    nr = ours["next_round"]
    for r in range(doc["real_batch"], len(doc["seq_len"])):
        tally["documented"]["padded_rows"] += 1
        got = [ours["accepted_nodes"][r], ours["accept_length"][r], ours["accept_index"][r],
               ours["predict"][r], ours["bonus_token"][r], ours["output_token"][r],
               ours["new_seq_len"][r], ours["finished"][r], ours["emit_len"][r],
               ours["slots_to_free"][r], ours["extend"]["select_index"][r],
               ours["extend"]["input_id"][r], ours["extend"]["hidden_source"][r],
               nr["active"][r], nr["seq_len"][r], nr["root_token"][r], nr["draft_position"][r],
               nr["draft_out_cache_loc"][r], nr["verify_out_cache_loc"][r]]
        want = [[], 0, [-1] * S, [0] * D, 0, [], doc["seq_len"][r], False, 0, [], r * D + D - 1,
                [], [], False, 1, 0, [0] * topk, [[0] * ns for _ in range(topk)], [0] * D]
        c.eq(f"padded row {r}", got, want)


def compare(mod, torch, run, doc, meta, ours, tally):
    c = Check()
    ps, topk, ns, D = doc["page_size"], doc["topk"], doc["num_steps"], doc["num_draft_tokens"]
    S, real, bs = ns + 1, doc["real_batch"], len(doc["seq_len"])
    seq, pool, rtt, al = doc["seq_len"], doc["req_pool_index"], doc["req_to_token"], \
        doc["allocated_len"]
    W = len(rtt[0])
    doc_ = tally["documented"]
    tally["padded_rounds"] += real < bs
    tally["idle_rounds"] += real == 0
    tally["edge_rounds"] += meta["edge"]
    doc_["reserve_2x"] += meta["two"]
    want_r1 = (max(ns * topk, D) if ps == 1 or topk == 1
               else max(cdiv(ps - 1 + ns, ps) * ps * topk, D))
    c.eq("SGLang's get_alloc_len_per_decode against section 5.1's R1", want_r1, meta["R1"])
    c.eq("SGLang's get_alloc_reserve_per_decode", 2 * want_r1, mod.get_alloc_reserve_per_decode())
    check_padded(c, doc, ours, tally)
    if real:
        check_tree(c, doc, meta, tally)
    verify = [[rtt[pool[r]][seq[r] + i] for i in range(D)] for r in range(real)]
    acc = run.accept(mod, torch, meta["tree"] or {"index": [], "next": [], "sib": []},
                     doc["draft_token"][:real], doc["target_predict"][:real], seq[:real], topk,
                     ns, D) if real else None
    paths, outs = [], []
    for r in range(real):
        ai = acc["accept_index"][r]
        a = acc["accept_length"][r] + 1
        path = [x - r * D for x in ai[:a]]
        paths.append(path)
        outs.append(acc["accept_tokens"][r][:a])
        c.eq(f"row {r} accept_index", ours["accept_index"][r], ai)
        c.eq(f"row {r} accept_length", ours["accept_length"][r], a - 1)
        c.eq(f"row {r} accepted_nodes", ours["accepted_nodes"][r], path)
        c.eq(f"row {r} predict", ours["predict"][r], acc["predict"][r])
        c.eq(f"row {r} bonus (fill_bonus_tokens, prepare_verify_commit_outputs)",
             [ours["bonus_token"][r]] * 2, [acc["bonus"][r], acc["bonus_commit"][r]])
        c.eq(f"row {r} output_token", ours["output_token"][r], outs[r])
        c.eq(f"row {r} new_seq_len", ours["new_seq_len"][r], acc["new_seq_len"][r])
        c.eq(f"row {r} select_index", ours["extend"]["select_index"][r], acc["select_index"][r])
    # Commit: the move pairs, their effect, the compaction.
    if topk > 1 and real:
        cm = run.commit(mod, torch, acc, verify, D)
        pairs = cm["pairs"]
        moves = [p for p in pairs if p[0] != p[1]]
        doc_["noop_pairs"] += len(pairs) - len(moves)
        packed = [[verify[r][k], verify[r][n]] for r, p in enumerate(paths)
                  for k, n in enumerate(p)]
        c.eq("SGLang's pairs: every (V[k], V[n_k]) packed, then (0, 0) to bs * S", pairs,
             packed + [[0, 0]] * (real * S - len(packed)))
        c.eq("kv_moves (SGLang's pairs with dst != src, in its order)", ours["kv_moves"], moves)
        kv = {s: ("old", s) for row in verify for s in row}
        for r in range(real):
            for i in range(D):
                kv[verify[r][i]] = (r, i)
        for dst, src in ours["kv_moves"]:
            kv[dst] = kv.get(src)
        c.eq("KV after the moves, one at a time", [[kv[verify[r][k]] for k in range(len(p))]
                                                   for r, p in enumerate(paths)],
             [[(r, n) for n in p] for r, p in enumerate(paths)])
        if "crash" in cm:
            doc_["compact_crash"] += 1
        else:
            for r in range(real):
                a = len(paths[r])
                c.eq(f"row {r} extend input_id", ours["extend"]["input_id"][r],
                     cm["predict"][r][:a])
                c.eq(f"row {r} extend hidden_source", ours["extend"]["hidden_source"][r],
                     cm["hidden"][r][:a])
                fill_p = [acc["predict"][0][0]] * (min(S, D) - a)
                fill_h = [0] * (min(S, D) - a)
                c.eq(f"row {r} compacted rows [a, S) (global node 0)",
                     [cm["predict"][r][a:S], cm["hidden"][r][a:S]], [fill_p, fill_h])
                doc_["compact_fill"] += 2 * len(fill_p)
    else:
        c.eq("kv_moves (topk 1: none)", ours["kv_moves"], [])
        for r in range(real):
            a = len(paths[r])
            c.eq(f"row {r} extend input_id (chain in place)", ours["extend"]["input_id"][r],
                 acc["predict"][r][:a])
            c.eq(f"row {r} extend hidden_source", ours["extend"]["hidden_source"][r],
                 [r * D + k for k in range(a)])
    # Finish.
    going = []
    for r in range(real):
        fin, emit, free = run.finish(mod, seq[r], outs[r], meta["prev"][r],
                                     doc["max_new_tokens_left"][r], doc["stop_token_ids"], al[r],
                                     rtt[pool[r]], ps)
        tally["finished_rows"] += fin
        c.eq(f"row {r} finished, emit_len, slots_to_free",
             [ours["finished"][r], ours["emit_len"][r], ours["slots_to_free"][r]],
             [fin, emit, free])
        if not fin:
            going.append(r)
    check_alloc(c, mod, torch, run, doc, ours, going, acc, tally)
    return c.problems, c.cells


def check_alloc(c, mod, torch, run, doc, ours, going, acc, tally):
    ps, topk, ns, D = doc["page_size"], doc["topk"], doc["num_steps"], doc["num_draft_tokens"]
    rtt, pool, al, R = doc["req_to_token"], doc["req_pool_index"], doc["allocated_len"], \
        doc["reserve"]
    W, bs = len(rtt[0]), len(doc["seq_len"])
    doc_ = tally["documented"]
    new = {r: acc["new_seq_len"][r] for r in going}
    reqs = [type("R", (), {"kv": type("K", (), {"kv_allocated_len": al[r],
                                                "kv_committed_len": new[r]})})
            for r in going]
    _, nxt, _ = mod.page_aligned_decode_alloc_lens(reqs, reserve=R, page_size=ps)
    # Section 5.1: SGLang's host sizes from the pre-round committed length (one round behind)
    # with 2 * R1; that must cover what the lag-free rule with R1 allocates.
    lagged = [type("R", (), {"kv": type("K", (), {"kv_allocated_len": al[r],
                                                  "kv_committed_len": doc["seq_len"][r]})})
              for r in going]
    _, lag, _ = mod.page_aligned_decode_alloc_lens(
        lagged, reserve=mod.get_alloc_reserve_per_decode(), page_size=ps)
    r1 = mod.get_alloc_len_per_decode()
    for r, x in zip(going, lag):
        need = max(al[r], cdiv(new[r] + r1, ps) * ps)
        if x < need:
            c.problems.append(f"row {r}: SGLang's lagged 2 * R1 allocation {x} < {need}")
        doc_["host_lag_rows"] += 1
    wide = [r for r, x in zip(going, nxt) if x > W]
    viol = [dict(kind="row_width", kernel="accept_alloc", row=r, need=x, width=W)
            for r, x in zip(going, nxt) if x > W]
    if wide:  # SGLang as it is: spills (ps 1 or topk 1) or asserts
        st, table, _, _ = run.allocate(mod, torch, rtt, [pool[r] for r in going],
                                       [al[r] for r in going], [new[r] for r in going],
                                       doc["free_pages"], ps, R)
        if st == "assert":
            doc_["row_width_assert"] += 1
        elif st == "ok":
            spilled = sum(table[i][p] != rtt[i][p] if i < len(rtt) else table[i][p] != -1
                          for i in range(len(table)) for p in range(W)
                          if i >= len(rtt) or i not in [pool[r] for r in going])
            doc_["row_spill"] += 1
            doc_["row_spill_slots"] += spilled
    rows = [r for r in going if r not in wide]
    st, table, nal, taken = run.allocate(mod, torch, rtt, [pool[r] for r in rows],
                                         [al[r] for r in rows], [new[r] for r in rows],
                                         doc["free_pages"], ps, R)
    if st == "assert":
        c.problems.append("SGLang asserted without any over-wide row")
        return
    want_al = list(al)
    nr = ours["next_round"]
    if st == "oom":
        tally["short_ring_rounds"] += 1
        N = sum(cdiv(x, ps) - cdiv(al[r], ps) for r, x in zip(going, nxt) if x <= W)
        viol.append(dict(kind="ring", kernel="accept_alloc", need=N,
                         available=len(doc["free_pages"])))
        c.eq("ring refused: pages_taken, writes, allocated_len, active",
             [ours["pages_taken"], ours["req_to_token_writes"], ours["allocated_len"],
              nr["active"]], [0, [], want_al, [False] * bs])
    else:
        for r, x in zip(rows, nal):
            want_al[r] = x
        writes = [[pool[r], p, table[pool[r]][p]] for r in rows for p in range(W)
                  if table[pool[r]][p] != rtt[pool[r]][p]]
        c.eq("req_to_token_writes", ours["req_to_token_writes"], writes)
        c.eq("allocated_len", ours["allocated_len"], want_al)
        c.eq("pages_taken", ours["pages_taken"], taken)
        active = [r in going for r in range(bs)]
        c.eq("next_round active", nr["active"], active)
        nx = run.next_round(mod, torch, table[:len(rtt)], [pool[r] for r in rows],
                            [new[r] for r in rows], topk, ns, D, ps)
        for i, r in enumerate(rows):
            c.eq(f"next round row {r} seq_len, root_token, draft_position",
                 [nr["seq_len"][r], nr["root_token"][r], nr["draft_position"][r]],
                 [new[r], acc["bonus"][r], [new[r]] * topk])
            c.eq(f"next round row {r} draft_out_cache_loc", nr["draft_out_cache_loc"][r],
                 nx["draft"][i])
            c.eq(f"next round row {r} verify_out_cache_loc", nr["verify_out_cache_loc"][r],
                 nx["verify"][i])
        c.eq("next round tail_copies [dst, src] (wide rows aside)",
             [t for t in nr["tail_copies"]
              if not any(t[0] in table[pool[r]] for r in wide)], nx["tail"])
        for r in wide:  # nothing allocated: the program reports the first unbacked position
            s = new[r]
            nnp = cdiv(s % ps + ns, ps)
            if ps == 1 or topk == 1:
                read = [s + t * ns + j for t in range(topk) for j in range(ns)]
            else:
                fp = s - s % ps
                read = [s + t * ps * nnp + j for t in range(topk) for j in range(ns)]
                read += [fp + t * nnp * ps + o for t in range(1, topk) for o in range(s % ps)]
                read += [fp + o for o in range(s % ps)] if topk > 1 else []
            read += [s + j for j in range(D)]
            out = [p for p in read if p >= al[r]]
            slot = lambda p: rtt[pool[r]][p] if p < al[r] else 0  # noqa: E731
            c.eq(f"next round row {r} (not allocated) draft and verify slots, backed or 0",
                 [nr["draft_out_cache_loc"][r], nr["verify_out_cache_loc"][r]],
                 [[[slot(p) for p in read[t * ns:(t + 1) * ns]] for t in range(topk)],
                  [slot(s + j) for j in range(D)]])
            if out:
                viol.append(dict(kind="unbacked", kernel="next_round_slots", row=r,
                                 position=min(out), allocated=al[r]))
    key = lambda v: json.dumps(v, sort_keys=True)  # noqa: E731
    c.eq("violations", sorted(map(key, ours["violations"])), sorted(map(key, viol)))

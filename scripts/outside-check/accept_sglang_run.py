"""SGLang's side of scripts/outside-check/accept_vs_sglang.py: one round after verify run through
SGLang's own functions (loaded by sglang_accept_code.py), with the stand-ins that module lists.
Trees come from SGLang's draft loop bookkeeping and Triton builder, or from a parent array
through SGLang's tree-from-mask builder; the rest is section 1's steps 3 to 6 in SGLang's order.
The results are plain lists, laid out as the program's JSON where the two share a field."""
from __future__ import annotations

import types

NS = types.SimpleNamespace


def draft_loop(mod, torch, rng, bs, topk, ns, D, bonus, seq_lens, vocab, ties):
    """SGLang's draft loop bookkeeping on random top-k distributions (ties: probabilities from
    a small set with zeros). Returns the tree lists, the draft tokens [bs][D], the per-step
    beams (flat candidate indices) and the candidates' tokens and scores, all as lists."""
    scores, hidden = None, None
    score_list, token_list, parents_list = [], [], []
    for i in range(ns):
        rows = bs if i == 0 else bs * topk
        ps_, ix = [], []
        for _ in range(rows):
            if ties:
                p = sorted((rng.choice([0.0, 0.0, 0.125, 0.25, 0.5]) for _ in range(topk)),
                           reverse=True)
            else:
                p = sorted((rng.random() for _ in range(topk)), reverse=True)
            ps_.append(p)
            ix.append(rng.sample(range(vocab), topk))
        topk_p = torch.tensor(ps_, dtype=torch.float32)
        topk_index = torch.tensor(ix, dtype=torch.int64)
        _, hidden, scores, info = mod.select_top_k_tokens(i, topk_p, topk_index, hidden, scores,
                                                          topk)
        score_list.append(info[0])
        token_list.append(info[1])
        parents_list.append(info[2])
    parent_list, top_idx, draft = mod.organize_draft_results(score_list, token_list,
                                                             parents_list, D)
    seq = torch.tensor(seq_lens, dtype=torch.int64)
    out = mod.build_tree_kernel_efficient(
        torch.tensor(bonus, dtype=torch.int64), parent_list, top_idx, draft, seq,
        int(seq.sum()), topk, ns, D, tree_mask_mode=mod.TreeMaskMode.FULL_MASK)
    _, _, r_index, r_next, r_sib, tokens = out
    flat_scores = torch.cat(score_list, dim=1).flatten(1).tolist()
    flat_tokens = torch.cat(token_list, dim=1).tolist()
    beams = [p.tolist() for p in parents_list]
    return dict(index=r_index.tolist(), next=r_next.tolist(), sib=r_sib.tolist(),
                draft=tokens.view(bs, D).tolist(), kept=top_idx.tolist(), scores=flat_scores,
                cand_tokens=flat_tokens, beams=beams)


def mask_tree(mod, torch, parents, seq_lens):
    """SGLang's tree-from-mask builder (the n-gram drafter's) on parent arrays (orphans: -1)."""
    bs, D = len(parents), len(parents[0]) if parents else 0
    mask = torch.zeros((bs, D, D), dtype=torch.bool)
    for r, par in enumerate(parents):
        for i in range(D):
            j = i
            while j >= 0:
                mask[r, i, j] = True
                j = par[j] if j > 0 else -1
    pos = torch.empty(bs * D, dtype=torch.int64)
    idx, nxt, sib = (torch.full((bs * D,), -7, dtype=torch.int64) for _ in range(3))
    mod.reconstruct_indices_from_tree_mask_triton(
        mask.flatten(), torch.tensor(seq_lens, dtype=torch.int64), pos, idx, nxt, sib, bs, D)
    v = lambda t: t.view(bs, D).tolist()  # noqa: E731
    return dict(index=v(idx), next=v(nxt), sib=v(sib), positions=v(pos))


def accept(mod, torch, tree, draft, target, seq_lens, topk, ns, D):
    """Greedy acceptance, bonus and commit outputs (Triton), the KV move pairs and the
    compaction (topk > 1), for the bs real rows."""
    k = mod.kernels
    bs, S = len(seq_lens), ns + 1
    t64 = lambda x: torch.tensor(x, dtype=torch.int64)  # noqa: E731
    predict = torch.zeros(bs * D, dtype=torch.int32)
    accept_index = torch.full((bs, S), -1, dtype=torch.int32)
    num = torch.zeros(bs, dtype=torch.int32)
    k.verify_tree_greedy_triton(predict, accept_index, num, t64(draft), t64(tree["index"]),
                                t64(tree["next"]), t64(tree["sib"]), t64(target))
    accept_lens = num + 1
    accept_tokens = predict[accept_index.long().flatten()]  # -1 wraps; only a - 1 is read
    bonus = torch.zeros(bs, dtype=torch.int32)
    if bs:
        k.fill_bonus_tokens[(bs,)](accept_tokens, accept_lens, bonus, S)
    new_seq, bonus2, _, (_, select, _) = k.prepare_verify_commit_outputs(
        predict, accept_index, accept_lens,
        t64(seq_lens), num_draft_tokens=D)
    res = dict(accept_index=accept_index.tolist(), accept_length=num.tolist(),
               predict=predict.view(bs, D).tolist(), bonus=bonus.tolist(),
               bonus_commit=bonus2.tolist(), new_seq_len=new_seq.tolist(),
               select_index=select.tolist(), accept_tokens=accept_tokens.view(bs, S).tolist())
    res["_t"] = (predict, accept_index, accept_lens)
    return res


def commit(mod, torch, acc, verify_slots, D):
    """move_accept_tokens_to_target_kvcache's pairs and _compact_accept_to_front (topk > 1)."""
    predict, accept_index, accept_lens = acc["_t"]
    bs = accept_index.shape[0]
    pairs = []
    pool = NS(get_kvcache=lambda: NS(move_kv_cache=lambda t, s: pairs.append(
        list(zip(t.tolist(), s.tolist())))))
    batch = NS(seq_lens=torch.zeros(bs, dtype=torch.int64),
               out_cache_loc=torch.tensor([x for row in verify_slots for x in row],
                                          dtype=torch.int64))
    mod.move_accept_tokens_to_target_kvcache(batch, accept_index, accept_lens - 1, pool)
    out = dict(pairs=[list(p) for p in pairs[0]] if pairs else [])
    try:
        out["predict"] = mod._compact_accept_to_front(predict, accept_index, bs,
                                                      num_draft_tokens=D).view(bs, D).tolist()
        hid = torch.arange(bs * D, dtype=torch.float32).view(bs * D, 1)
        out["hidden"] = mod._compact_accept_to_front(hid, accept_index, bs,
                                                     num_draft_tokens=D).view(bs, D).long().tolist()
    except RuntimeError as e:  # section 9: topk > 1 with D < num_steps + 1
        out["crash"] = str(e).splitlines()[0]
    return out


def finish(mod, seq, outputs, prev_outputs, left, stops, allocated, row_slots, ps):
    """Req.update_finish_state, owned_kv_len and _release_overallocated_kv_indices, one row."""
    o = len(prev_outputs)
    req = mod.Req(seq + 1 - o, prev_outputs, o + left, stops)
    req.output_ids += outputs
    req.kv.kv_committed_len, req.kv.kv_allocated_len = seq + len(outputs), allocated
    req.update_finish_state(len(outputs))
    fin = req.finished()
    emit = (req.finished_len - o) if req.finished_len is not None else len(outputs)
    freed = []
    if fin:
        owned = req.owned_kv_len()
        tc = NS(token_to_kv_pool_allocator=NS(page_size=ps),
                free_kv_row=lambda kv, ranges: freed.extend(ranges))
        mod._release_overallocated_kv_indices(req, owned, allocated, tc)
    return fin, emit, [row_slots[p] for a, b in freed for p in range(a, b)]


def allocate(mod, torch, rtt, rows, allocated, committed, ring, ps, reserve):
    """eagle_prepare_for_decode for the rows that go on, on a copy of req_to_token (one spare
    row below it, for SGLang's spill past a row). `reserve` None: SGLang's own
    get_alloc_reserve_per_decode; else that reserve. Returns (status, the table after, the new
    allocated lengths, pages taken); status 'ok', 'oom' or 'assert'."""
    table = torch.tensor(rtt + [[-1] * len(rtt[0])], dtype=torch.int64)
    free = torch.tensor(ring, dtype=torch.int64)
    alloc = mod.TokenAllocator(free) if ps == 1 else mod.PagedAllocator(free, ps)
    reqs = [NS(kv=NS(kv_allocated_len=a, kv_committed_len=c), decode_batch_idx=0)
            for a, c in zip(allocated, committed)]
    batch = NS(maybe_evict_swa=lambda: None, token_to_kv_pool_allocator=alloc, reqs=reqs,
               sampling_info=NS(penalizer_orchestrator=NS(is_required=False)),
               seq_lens_cpu=torch.tensor(committed), device="cpu", hisparse_coordinator=None,
               req_to_token_pool=NS(req_to_token=table[:len(rtt)]),
               req_pool_indices=torch.tensor(rows, dtype=torch.int64),
               tree_cache=NS(token_to_kv_pool_allocator=alloc, pretty_print=lambda: None))
    saved = mod.get_alloc_reserve_per_decode
    if reserve is not None:
        mod.get_alloc_reserve_per_decode = lambda: reserve
    try:
        if reqs:
            mod.eagle_prepare_for_decode(batch)
        status = "ok"
    except AssertionError:
        status = "assert"
    except RuntimeError as e:
        if "Out of memory" not in str(e):
            raise
        status = "oom"
    finally:
        mod.get_alloc_reserve_per_decode = saved
    return (status, table.tolist(), [r.kv.kv_allocated_len for r in reqs],
            len(ring) - len(alloc.free_pages))


def next_round(mod, torch, table, rows, seq, topk, ns, D, ps):
    """The next round's draft slots (contiguous kernel, or prepare_for_draft's paged branch with
    its prefix-tail copies) and verify slots, for the rows that go on."""
    k, bs = mod.kernels, len(rows)
    rtt = torch.tensor(table, dtype=torch.int64)
    W = rtt.shape[1]
    pool = torch.tensor(rows, dtype=torch.int64)
    s = torch.tensor(seq, dtype=torch.int64)
    copies = []
    out = torch.zeros((0,), dtype=torch.int64)
    if ps == 1 or topk == 1:
        out = torch.full((bs * topk * ns,), -7, dtype=torch.int64)
        if bs:
            k.assign_draft_cache_locs_contiguous[(bs,)](pool, rtt, s, out, W, topk, ns)
    elif bs:
        runner = NS(token_to_kv_pool=NS(move_kv_cache=lambda t, src: copies.extend(
            zip(t.tolist(), src.tolist()))))
        batch = NS(req_pool_indices=pool, seq_lens=s, out_cache_loc=None)
        out = mod.paged_draft_layout(NS(req_to_token=rtt), batch, runner, topk, ns, ps)
    ver = torch.full((bs * D,), -7, dtype=torch.int64)
    if bs:
        k.assign_extend_cache_locs_uniform[(bs,)](pool, rtt, s, ver, W, D)
    return dict(draft=out.view(bs, topk, ns).tolist(), verify=ver.view(bs, D).tolist(),
                tail=[list(c) for c in copies])

"""The engine side of examples/engine_runner.py: a paged KV cache with a fragmented page
allocator, requests in a req_to_token table, each round's branch regions, a toy draft model
(random weights) whose step forward attends through specgraph's FA3 tables and through its CSR
indices, and the round's checks against a dense float64 reference that gathers keys by position.

Branch layout (docs/csr.md section 1, what SGLang's cache-location assignment does): each branch
owns a region of its request's req_to_token row sized from the row width S (not from the S - 1
forwards): draft token j of branch t of a request with seq_len n sits at position
n + t * region + j, region = S at page size 1 and ps * nnp otherwise, nnp = ceil((n % ps + S) /
ps), so every branch owns a page-aligned region that starts where the request's partial last page
starts. Branch 0's region begins with that
very page; every other branch gets fresh pages and a copy of the partial page's tokens, as the
FA3 tables need (docs/metadata.md section 1). out_cache_loc[r][t][j] is the slot at that
position for j < S - 1; the row's last slot (S wide, S - 1 forwards) is never read, and the
example puts -1 there to show it."""

from __future__ import annotations

import random

import numpy as np
import torch


class ToyDraftModel:
    def __init__(self, a, dev, heads=2, head_dim=16, vocab=64):
        self.dev, self.page_size, self.max_context = dev, a.page_size, a.max_context
        self.heads, self.head_dim, self.vocab = heads, head_dim, vocab
        ps, steps = a.page_size, a.slots - 1
        self.rng = random.Random(a.seed)
        g = torch.Generator().manual_seed(a.seed)
        self.pool_rows = 2 * a.max_batch + 1  # row 0: the padding rows' (never a request's)
        self.nnp_max = -(-(ps - 1 + a.slots) // ps)  # regions sized from S (SGLang's way)
        # Engines allocate req_to_token wider than max_context_len: room for the regions.
        width = a.max_context + (a.topk - 1) * ps * self.nnp_max + steps
        region_pages = a.max_batch * a.topk * self.nnp_max
        num_pages = 1 + (self.pool_rows - 1) * -(-a.max_context // ps) + region_pages
        self.kv_slots = num_pages * ps
        shape = (self.kv_slots, heads, head_dim)
        self.k_cache = torch.randn(shape, generator=g).to(dev)
        self.v_cache = torch.randn(shape, generator=g).to(dev)
        hd = heads * head_dim
        w = lambda *s: (torch.randn(*s, generator=g) / s[0] ** 0.5).to(dev)  # noqa: E731
        self.embed, self.wq, self.wk, self.wv = w(vocab, hd), w(hd, hd), w(hd, hd), w(hd, hd)
        self.w_out = w(hd, vocab)
        self.free = list(range(1, num_pages))  # page 0: the dummy page padding rows use
        self.rng.shuffle(self.free)  # fragmented: neighbouring pages rarely have neighbouring ids
        r2t = torch.zeros(self.pool_rows, width, dtype=torch.int32)
        self.seq_len = [0] * self.pool_rows
        for row in range(1, self.pool_rows):
            n = self.seq_len[row] = self.rng.randint(1, a.max_context)
            pages = [self.free.pop() for _ in range(-(-n // ps))]
            r2t[row, :n] = torch.tensor([pages[p // ps] * ps + p % ps for p in range(n)])
        self.req_to_token = r2t.to(dev)

    def new_round(self, bs, topk, slots):
        """bs requests with their branch regions laid out in req_to_token (and the partial last
        page copied into every branch but the first). Returns (pool rows, seq lens,
        out_cache_loc as a flat [bs][topk][S] list, pages to free after the round)."""
        ps, steps = self.page_size, slots - 1
        rows = self.rng.sample(range(1, self.pool_rows), bs)
        r2t = self.req_to_token.cpu()
        out, used, src, dst = [], [], [], []
        for row in rows:
            n = self.seq_len[row]
            lpl, start = n % ps, n - n % ps
            nnp = -(-(lpl + slots) // ps)  # from S, the row width, as SGLang sizes it
            for t in range(topk):
                pages = [self.free.pop() for _ in range(nnp)]
                if t == 0 and lpl:
                    self.free.append(pages[0])  # branch 0 begins in the request's own page
                    pages[0] = int(r2t[row, start]) // ps
                    used += pages[1:]
                else:
                    used += pages
                    src += [int(r2t[row, start + i]) for i in range(lpl)]
                    dst += [pages[0] * ps + i for i in range(lpl)]
                base = start + t * ps * nnp
                for i in range(lpl, lpl + steps):
                    r2t[row, base + i] = pages[i // ps] * ps + i % ps
                    out.append(int(r2t[row, base + i]))
                out.append(-1)  # slot S - 1: never read
        if src:
            s, d = torch.tensor(src, device=self.dev), torch.tensor(dst, device=self.dev)
            self.k_cache[d] = self.k_cache[s]
            self.v_cache[d] = self.v_cache[s]
        self.req_to_token.copy_(r2t)
        return rows, [self.seq_len[r] for r in rows], out, used

    def free_pages(self, used):
        self.free += used

    def _attend(self, q, k, v, valid):  # q [.., H, D], k/v [.., n, H, D], valid [.., n]
        s = torch.einsum("...hd,...nhd->...hn", q, k) * self.head_dim ** -0.5
        s = s.masked_fill(~valid.unsqueeze(-2), float("-inf"))
        lse = torch.logsumexp(s, -1)  # -inf where nothing is valid
        p = torch.where(valid.unsqueeze(-2), torch.exp(s - lse.unsqueeze(-1)), 0.0)
        return torch.einsum("...hn,...nhd->...hd", p, v), lse

    def draft_step(self, runner, bucket, step, fa3, csr):
        """Draft forward `step` over the runner's static buffers for `bucket`: reads
        tokens[step], writes its K/V at the step's slots of the runner's out_cache_loc, attends
        through the FA3 tables (prefix pass + branch pass, merged) and through the CSR indices,
        writes both outputs and the argmax token to tokens[step + 1]. Torch ops on the current
        stream, static shapes: capturable."""
        H, D, ps, topk = self.heads, self.head_dim, self.page_size, runner.topk
        rows = bucket * topk
        x = self.embed[runner.tokens[step, :rows]]
        q, k, v = ((x @ w).view(rows, H, D) for w in (self.wq, self.wk, self.wv))
        slot = runner.out_cache_loc[:bucket, :, step].reshape(rows)
        self.k_cache[slot] = k
        self.v_cache[slot] = v
        kp, vp = self.k_cache.view(-1, ps, H, D), self.v_cache.view(-1, ps, H, D)
        pre = fa3.prefix_page_table.long()  # [bucket, pages]
        pk, pv = kp[pre].reshape(bucket, -1, H, D), vp[pre].reshape(bucket, -1, H, D)
        n = torch.arange(pk.shape[1], device=x.device)
        o1, l1 = self._attend(q.view(bucket, topk, H, D), pk.unsqueeze(1), pv.unsqueeze(1),
                              (n < fa3.prefix_seqlen.unsqueeze(-1)).unsqueeze(1))
        br = fa3.expand_page_table.long()  # [rows, step + 2]
        bk, bv = kp[br].reshape(rows, -1, H, D), vp[br].reshape(rows, -1, H, D)
        m = torch.arange(bk.shape[1], device=x.device)
        o2, l2 = self._attend(q, bk, bv, m < fa3.expand_cache_seqlen.unsqueeze(-1))
        o1, l1 = o1.reshape(rows, H, D), l1.reshape(rows, H)
        top = torch.maximum(l1, l2)
        w1, w2 = torch.exp(l1 - top).unsqueeze(-1), torch.exp(l2 - top).unsqueeze(-1)
        o = (o1 * w1 + o2 * w2) / (w1 + w2)
        runner.attn_fa3[step, :rows] = o
        kv_indptr, kv_indices = csr
        width = self.max_context + step + 1  # the longest row at this step
        j = torch.arange(width, device=x.device)
        at = (kv_indptr[:-1, None].long() + j).clamp(max=kv_indices.numel() - 1)
        idx = kv_indices[at]  # [rows, width] token slots
        valid = j < (kv_indptr[1:] - kv_indptr[:-1]).unsqueeze(-1)
        runner.attn_csr[step, :rows] = self._attend(q, self.k_cache[idx], self.v_cache[idx],
                                                    valid)[0]
        runner.tokens[step + 1, :rows] = ((o.reshape(rows, H * D) @ self.w_out).argmax(-1))

    def check_round(self, runner, bucket, rows, seqs, slots, kv_before, worst):
        """The round's checks; returns what failed ("" when nothing did). Updates worst
        (max relative error per path) from the dense float64 reference."""
        H, D, topk, steps = self.heads, self.head_dim, runner.topk, runner.S - 1
        real = len(rows) * topk
        outs = {"fa3": runner.attn_fa3.double().cpu().numpy(),
                "csr": runner.attn_csr.double().cpu().numpy()}
        for name, out in outs.items():
            if not np.isnan(out[:, bucket * topk:]).all():
                return f"{name}: a row past the bucket {bucket} was written"
            if np.isnan(out[:, :bucket * topk]).any():
                return f"{name}: a row of the bucket {bucket} was not written"
        tok = runner.tokens.cpu().numpy()
        if (tok[1:, bucket * topk:] != -1).any():
            return "tokens: a row past the bucket was written"
        # KV: changed only at the real rows' draft slots and on the dummy page 0.
        allowed = torch.zeros(self.kv_slots, dtype=torch.bool)
        allowed[: self.page_size] = True
        for row in range(real):
            allowed[slots[row * (steps + 1): row * (steps + 1) + steps]] = True
        for before, now in zip(kv_before, (self.k_cache, self.v_cache)):
            changed = (before != now).any(-1).any(-1).cpu()
            if (changed & ~allowed).any():
                return f"KV cache written outside the draft slots: {changed.nonzero().tolist()}"
        r2t = self.req_to_token.cpu().numpy()
        kc, vc = self.k_cache.double().cpu().numpy(), self.v_cache.double().cpu().numpy()
        emb = self.embed.double().cpu().numpy()
        wq, wk, wv = (w.double().cpu().numpy() for w in (self.wq, self.wk, self.wv))
        for i, (row, n) in enumerate(zip(rows, seqs)):
            ctx = r2t[row, :n].astype(np.int64)  # the committed prefix, by position
            for t in range(topk):
                qrow = i * topk + t
                drafts = [emb[tok[j, qrow]] for j in range(steps)]
                for s in range(steps):
                    q = (drafts[s] @ wq).reshape(H, D)
                    k = np.concatenate([kc[ctx], [(x @ wk).reshape(H, D) for x in drafts[:s + 1]]])
                    v = np.concatenate([vc[ctx], [(x @ wv).reshape(H, D) for x in drafts[:s + 1]]])
                    sc = np.einsum("hd,nhd->hn", q, k) * D ** -0.5
                    p = np.exp(sc - sc.max(-1, keepdims=True))
                    o = np.einsum("hn,nhd->hd", p / p.sum(-1, keepdims=True), v)
                    scale = max(np.abs(o).max(), 1e-12)
                    for name, out in outs.items():
                        err = float(np.abs(out[s, qrow] - o).max() / scale)
                        worst[name] = max(worst[name], err)
        return ""

// The round after verify over a plan's round section (round_ops.hpp): acceptance, the commit
// and the next round, back to back on the executor's stream.
#include "specgraph/round_ops.hpp"

#include <cstdint>
#include <string>

#include "device/checks.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/round_fields.hpp"

namespace specgraph {

round_launch after_verify_params(const round_view& v, const after_verify_inputs& in) {
  SPECGRAPH_EXPECTS(v.guard != nullptr && v.bucket > 0 && v.max_context_len > 0, "round_view",
                    "not a plan's round section: build it with draft_buffers::round(bucket)");
  detail::not_null("req_to_token", in.req_to_token);
  std::int64_t stride = v.max_context_len;
  if (in.req_to_token_stride != 0) {
    detail::between("req_to_token_stride", in.req_to_token_stride, v.max_context_len,
                    (std::int64_t{1} << 31) - 1, "[max_context_len, 2^31)");
    stride = in.req_to_token_stride;
  }
  detail::not_null("ring", in.ring);
  detail::between("ring_capacity", in.ring_capacity, 1, std::int64_t{1} << 40, "[1, 2^40]");
  detail::not_null("ring_tail", in.ring_tail);
  detail::between("real_batch", in.real_batch, -1, v.bucket, "the bucket (-1: a device word)");
  detail::between("stop_token_count", in.stop_token_count, 0, v.stop_capacity,
                  "the plan's max_stop_tokens");
  round_launch l{v.accept, v.commit, v.next};
  // The real batch: the launch scalar (every pass reads it as a bound), or the word.
  const bool scalar = in.real_batch >= 0;
  const std::int32_t* word =
      in.real_batch_at != nullptr ? in.real_batch_at : v.accept.real_batch_at;
  const std::int32_t real = scalar ? in.real_batch : v.bucket;
  l.accept.real_batch = l.commit.real_batch = l.next.real_batch = real;
  l.accept.real_batch_at = l.commit.real_batch_at = l.next.real_batch_at = scalar ? nullptr : word;
  l.commit.req_to_token = in.req_to_token;
  l.commit.req_to_token_stride = stride;
  l.commit.stop_token_count = in.stop_token_count;
  if (in.stop_token_count == 0) l.commit.stop_token_ids = nullptr;
  if (!in.budget) l.commit.max_new_tokens_left = nullptr;
  l.next.req_to_token = in.req_to_token;
  l.next.req_to_token_stride = stride;
  l.next.ring = in.ring;
  l.next.ring_capacity = in.ring_capacity;
  l.next.ring_tail = in.ring_tail;
  // Every scalar and pointer of the three launches, before anything is enqueued.
  validate(l.accept);
  validate(l.commit);
  validate(l.next);
  return l;
}

after_verify_part after_verify_part_of(const std::string& name) {
  if (name == "all") return after_verify_part::all;
  if (name == "accept_commit") return after_verify_part::accept_commit;
  if (name == "next") return after_verify_part::next;
  detail::throw_invalid(
      __FILE__, __LINE__, "part",
      "\"" + name +
          "\" is not a part of after_verify: pass \"all\" (acceptance, the commit "
          "and the next round), \"accept_commit\" or \"next\"");
}

void after_verify(executor& ex, const round_view& v, const after_verify_inputs& in,
                  after_verify_part part) {
  const round_launch l = after_verify_params(v, in);
  if (part != after_verify_part::next) {
    // The section's seven words are contiguous: one memset starts the round clean.
    ex.fill_bytes(v.guard, 0, sizeof(guard_word) * round_guard_count);
    launch_accept(ex, l.accept);
    launch_commit(ex, l.commit);
  }
  if (part != after_verify_part::accept_commit) launch_next_round(ex, l.next);
}

}  // namespace specgraph

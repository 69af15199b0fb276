#include "dist/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gpu_accel/error.h"

namespace ga::dist {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A K/V block as it travels: its length, positions, K, V and (backward) the dK/dV accumulated so far.
struct Block {
  int64_t n = 0;
  std::vector<int64_t> pos;
  std::vector<float> k, v, dk, dv;
};

int64_t kv_row(const AttentionShape& s) { return s.n_head_kv * s.head_dim; }
int64_t q_row(const AttentionShape& s) { return s.n_head * s.head_dim; }

void check_shard(const AttentionShape& s, const AttentionShard& shard) {
  GA_CHECK(s.window_left >= -1 && std::isfinite(s.softcap) && s.softcap >= 0.0f, InvalidArgument,
           "ring attention: window_left ", s.window_left, " (-1: off) and softcap ", s.softcap, " (0: off)");
  GA_CHECK(s.n_head > 0 && s.n_head_kv > 0 && s.head_dim > 0 && s.n_head % s.n_head_kv == 0, InvalidArgument,
           "ring attention: n_head ", s.n_head, " must be a positive multiple of n_head_kv ", s.n_head_kv,
           ", head_dim ", s.head_dim, " positive");
  const auto nq = static_cast<int64_t>(shard.q_pos.size()), nkv = static_cast<int64_t>(shard.kv_pos.size());
  GA_CHECK(static_cast<int64_t>(shard.q.size()) == nq * q_row(s), InvalidArgument, "ring attention: q holds ",
           shard.q.size(), " floats for ", nq, " rows of ", q_row(s));
  GA_CHECK(static_cast<int64_t>(shard.k.size()) == nkv * kv_row(s) && shard.v.size() == shard.k.size(),
           InvalidArgument, "ring attention: k/v hold ", shard.k.size(), "/", shard.v.size(), " floats for ", nkv,
           " rows of ", kv_row(s));
}

// Messages of the ring: a block's positions, K and V in one (sent ahead, before the step computes on the
// block, so the transfer overlaps the compute), its dK and dV in another (sent after the step added to them).
// Every rank knows every block's length (block_lengths), so each receive is posted with its size up front.
std::vector<unsigned char> pack_kv(const Block& b) {
  std::vector<unsigned char> out(b.pos.size() * sizeof(int64_t) + (b.k.size() + b.v.size()) * sizeof(float));
  unsigned char* p = out.data();
  const auto put = [&p](const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(p, src, bytes);
    p += bytes;
  };
  put(b.pos.data(), b.pos.size() * sizeof(int64_t));
  put(b.k.data(), b.k.size() * sizeof(float));
  put(b.v.data(), b.v.size() * sizeof(float));
  return out;
}

size_t kv_bytes(int64_t n, int64_t row) {
  return static_cast<size_t>(n) * (sizeof(int64_t) + 2 * static_cast<size_t>(row) * sizeof(float));
}

Block unpack_kv(const std::vector<unsigned char>& in, int64_t n, int64_t row) {
  Block b;
  b.n = n;
  b.pos.resize(static_cast<size_t>(n));
  b.k.resize(static_cast<size_t>(n * row));
  b.v.resize(static_cast<size_t>(n * row));
  const unsigned char* p = in.data();
  const auto get = [&p](void* dst, size_t bytes) {
    if (bytes > 0) std::memcpy(dst, p, bytes);
    p += bytes;
  };
  get(b.pos.data(), b.pos.size() * sizeof(int64_t));
  get(b.k.data(), b.k.size() * sizeof(float));
  get(b.v.data(), b.v.size() * sizeof(float));
  return b;
}

// Every rank's K/V length, indexed by rank (exact through the float sum below 2^24 rows).
std::vector<int64_t> block_lengths(Transport& t, int64_t mine) {
  GA_CHECK(mine < (int64_t{1} << 24), InvalidArgument, "ring attention: ", mine, " K/V rows on one rank");
  std::vector<float> n(static_cast<size_t>(t.world_size()), 0.0f);
  n[static_cast<size_t>(t.rank())] = static_cast<float>(mine);
  t.all_reduce_sum(n.data(), n.size());
  return std::vector<int64_t>(n.begin(), n.end());
}

// The rank whose block a rank holds after `step` passes.
int owner_after(const Transport& t, int step) { return (t.rank() - step % t.world_size() + t.world_size()) % t.world_size(); }

// One K/V pass in flight: the outgoing bytes (valid until the send is waited on) and the incoming buffer.
struct KvPass {
  std::vector<unsigned char> out, in;
  Ticket ticket;
  int64_t n_in = 0;
};

void post_kv_pass(Transport& t, const Block& b, int64_t n_in, int64_t row, KvPass& pass) {
  const int w = t.world_size();
  pass.out = pack_kv(b);
  pass.in.assign(kv_bytes(n_in, row), 0);
  pass.n_in = n_in;
  pass.ticket = t.send_recv(pass.out.data(), pass.out.size(), (t.rank() + 1) % w, pass.in.data(), pass.in.size(),
                            (t.rank() + w - 1) % w);
}

Block finish_kv_pass(Transport& t, KvPass& pass, int64_t row) {
  t.wait(pass.ticket);
  return unpack_kv(pass.in, pass.n_in, row);
}

// dK/dV of the block this rank just computed on go to the next rank; the previous rank's arrive (for the block
// that arrives with them).
void pass_grads(Transport& t, std::vector<float>& dk, std::vector<float>& dv, int64_t n_in, int64_t row) {
  const int w = t.world_size();
  std::vector<float> out(dk.size() + dv.size());
  std::copy(dk.begin(), dk.end(), out.begin());
  std::copy(dv.begin(), dv.end(), out.begin() + static_cast<std::ptrdiff_t>(dk.size()));
  std::vector<float> in(static_cast<size_t>(2 * n_in * row));
  t.wait(t.send_recv(out.data(), out.size() * sizeof(float), (t.rank() + 1) % w, in.data(), in.size() * sizeof(float),
                     (t.rank() + w - 1) % w));
  dk.assign(in.begin(), in.begin() + n_in * row);
  dv.assign(in.begin() + n_in * row, in.end());
}

Block own_block(const AttentionShard& shard, bool grads) {
  Block b;
  b.n = static_cast<int64_t>(shard.kv_pos.size());
  b.pos.assign(shard.kv_pos.begin(), shard.kv_pos.end());
  b.k.assign(shard.k.begin(), shard.k.end());
  b.v.assign(shard.v.begin(), shard.v.end());
  if (grads) {
    b.dk.assign(b.k.size(), 0.0f);
    b.dv.assign(b.v.size(), 0.0f);
  }
  return b;
}

bool visible(const AttentionShape& s, int64_t q_pos, int64_t k_pos) {
  return (!s.causal || k_pos <= q_pos) && (s.window_left < 0 || q_pos - k_pos <= s.window_left);
}

// The score of a query-key dot product: scaled, then soft-capped when the shape says so.
float score(const AttentionShape& s, float dot) {
  const float x = dot * s.scale;
  return s.softcap > 0.0f ? s.softcap * std::tanh(x * (1.0f / s.softcap)) : x;  // as backends/cpu/ops.cpp
}

// The attention of the shard's queries over one block, merged into (out, lse) by log-sum-exp: out holds the
// normalized result so far, lse its log normalizer (-inf: no key seen yet).
// Merges a partial result (its normalized row `part` and log normalizer part_lse) into (o, l) by log-sum-exp.
void merge_partial(float* o, float& l, const float* part, float part_lse, int64_t D) {
  if (part_lse == kNegInf) return;  // the partial saw no key
  const float merged = l == kNegInf ? part_lse : std::max(l, part_lse) + std::log1p(std::exp(-std::abs(l - part_lse)));
  const float w_old = l == kNegInf ? 0.0f : std::exp(l - merged);
  const float w_new = std::exp(part_lse - merged);
  for (int64_t d = 0; d < D; ++d) o[d] = w_old * o[d] + w_new * part[d];
  l = merged;
}

void attend_block(const AttentionShape& s, const AttentionShard& shard, const Block& b, std::vector<float>& out,
                  std::vector<float>& lse) {
  const int64_t nq = static_cast<int64_t>(shard.q_pos.size()), D = s.head_dim, group = s.n_head / s.n_head_kv;
  std::vector<float> scores(static_cast<size_t>(b.n));
  std::vector<float> acc(static_cast<size_t>(D));
  for (int64_t t = 0; t < nq; ++t) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      const float* q = shard.q.data() + (t * s.n_head + h) * D;
      const int64_t g = h / group;
      float m = kNegInf;
      for (int64_t j = 0; j < b.n; ++j) {
        if (!visible(s, shard.q_pos[static_cast<size_t>(t)], b.pos[static_cast<size_t>(j)])) {
          scores[static_cast<size_t>(j)] = kNegInf;
          continue;
        }
        const float* k = b.k.data() + (j * s.n_head_kv + g) * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
        scores[static_cast<size_t>(j)] = score(s, dot);
        m = std::max(m, scores[static_cast<size_t>(j)]);
      }
      if (m == kNegInf) continue;  // no visible key in this block: nothing to merge
      std::fill(acc.begin(), acc.end(), 0.0f);
      float sum = 0.0f;
      for (int64_t j = 0; j < b.n; ++j) {
        const float sc = scores[static_cast<size_t>(j)];
        if (sc == kNegInf) continue;
        const float p = std::exp(sc - m);
        sum += p;
        const float* v = b.v.data() + (j * s.n_head_kv + g) * D;
        for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += p * v[d];
      }
      for (float& a : acc) a /= sum;
      merge_partial(out.data() + (t * s.n_head + h) * D, lse[static_cast<size_t>(h * nq + t)], acc.data(),
                    m + std::log(sum), D);
    }
  }
}

// The block's contribution to dq (local) and to its own dk/dv, from the final lse and D = rowsum(dout * out).
void backward_block(const AttentionShape& s, const AttentionShard& shard, std::span<const float> lse,
                    std::span<const float> dout, const std::vector<float>& delta, Block& b, std::vector<float>& dq) {
  const int64_t nq = static_cast<int64_t>(shard.q_pos.size()), D = s.head_dim, group = s.n_head / s.n_head_kv;
  for (int64_t t = 0; t < nq; ++t) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      const float l = lse[static_cast<size_t>(h * nq + t)];
      if (l == kNegInf) continue;  // a query that sees no key has no gradient
      const float* q = shard.q.data() + (t * s.n_head + h) * D;
      const float* go = dout.data() + (t * s.n_head + h) * D;
      float* gq = dq.data() + (t * s.n_head + h) * D;
      const float dlt = delta[static_cast<size_t>(t * s.n_head + h)];
      const int64_t g = h / group;
      for (int64_t j = 0; j < b.n; ++j) {
        if (!visible(s, shard.q_pos[static_cast<size_t>(t)], b.pos[static_cast<size_t>(j)])) continue;
        const float* k = b.k.data() + (j * s.n_head_kv + g) * D;
        const float* v = b.v.data() + (j * s.n_head_kv + g) * D;
        float dot = 0.0f, dp = 0.0f;
        for (int64_t d = 0; d < D; ++d) {
          dot += q[d] * k[d];
          dp += go[d] * v[d];
        }
        const float p = std::exp(dot * s.scale - l);
        const float ds = p * (dp - dlt) * s.scale;
        float* gk = b.dk.data() + (j * s.n_head_kv + g) * D;
        float* gv = b.dv.data() + (j * s.n_head_kv + g) * D;
        for (int64_t d = 0; d < D; ++d) {
          gv[d] += p * go[d];
          gq[d] += ds * k[d];
          gk[d] += ds * q[d];
        }
      }
    }
  }
}

std::vector<int64_t> chunk_positions(int64_t n, int64_t chunks, std::initializer_list<int64_t> which) {
  std::vector<int64_t> out;
  for (const int64_t c : which) {
    for (int64_t p = n * c / chunks; p < n * (c + 1) / chunks; ++p) out.push_back(p);
  }
  return out;
}

}  // namespace

AttentionForward ring_attention_forward(Transport& t, const AttentionShape& s, const AttentionShard& shard) {
  check_shard(s, shard);
  const int64_t nq = static_cast<int64_t>(shard.q_pos.size()), row = kv_row(s);
  const int w = t.world_size();
  const std::vector<int64_t> lengths = block_lengths(t, static_cast<int64_t>(shard.kv_pos.size()));
  AttentionForward f;
  f.out.assign(static_cast<size_t>(nq * q_row(s)), 0.0f);
  f.lse.assign(static_cast<size_t>(nq * s.n_head), kNegInf);
  Block cur = own_block(shard, false);
  KvPass pass;
  for (int step = 0; step < w; ++step) {
    const bool more = step + 1 < w;
    if (more) post_kv_pass(t, cur, lengths[static_cast<size_t>(owner_after(t, step + 1))], row, pass);
    attend_block(s, shard, cur, f.out, f.lse);
    if (more) cur = finish_kv_pass(t, pass, row);
  }
  return f;
}

AttentionGrads ring_attention_backward(Transport& t, const AttentionShape& s, const AttentionShard& shard,
                                       std::span<const float> out, std::span<const float> lse,
                                       std::span<const float> dout) {
  check_shard(s, shard);
  GA_CHECK(s.softcap == 0.0f, Unsupported, "ring attention backward with a soft-capped score (softcap ", s.softcap,
           ")");
  const int64_t nq = static_cast<int64_t>(shard.q_pos.size()), D = s.head_dim, row = kv_row(s);
  const int w = t.world_size();
  GA_CHECK(static_cast<int64_t>(out.size()) == nq * q_row(s) && dout.size() == out.size() &&
               static_cast<int64_t>(lse.size()) == nq * s.n_head,
           InvalidArgument, "ring attention backward: out/dout/lse sizes ", out.size(), "/", dout.size(), "/",
           lse.size(), " for ", nq, " query rows");
  const std::vector<int64_t> lengths = block_lengths(t, static_cast<int64_t>(shard.kv_pos.size()));
  std::vector<float> delta(static_cast<size_t>(nq * s.n_head));  // D = rowsum(dout * out) per (query, head)
  for (int64_t i = 0; i < nq * s.n_head; ++i) {
    float acc = 0.0f;
    for (int64_t d = 0; d < D; ++d) acc += out[static_cast<size_t>(i * D + d)] * dout[static_cast<size_t>(i * D + d)];
    delta[static_cast<size_t>(i)] = acc;
  }
  AttentionGrads g;
  g.dq.assign(out.size(), 0.0f);
  Block cur = own_block(shard, true);
  KvPass pass;
  // K/V move ahead (w - 1 passes, overlapping the compute); dK/dV follow each compute, and their w-th pass
  // brings every block's gradients home to its owner.
  for (int step = 0; step < w; ++step) {
    const bool more = step + 1 < w;
    const int64_t n_next = lengths[static_cast<size_t>(owner_after(t, step + 1))];
    if (more) post_kv_pass(t, cur, n_next, row, pass);
    backward_block(s, shard, lse, dout, delta, cur, g.dq);
    std::vector<float> dk = std::move(cur.dk), dv = std::move(cur.dv);
    if (w > 1) pass_grads(t, dk, dv, n_next, row);
    if (more) cur = finish_kv_pass(t, pass, row);
    cur.dk = std::move(dk);
    cur.dv = std::move(dv);
  }
  g.dk = std::move(cur.dk);
  g.dv = std::move(cur.dv);
  return g;
}

AttentionForward sharded_kv_attention(Transport& t, const AttentionShape& s, const AttentionShard& shard) {
  check_shard(s, shard);
  const int64_t nq = static_cast<int64_t>(shard.q_pos.size()), D = s.head_dim, w = t.world_size();
  const size_t n_out = static_cast<size_t>(nq * q_row(s)), n_lse = static_cast<size_t>(nq * s.n_head);
  // every rank's partial: [out | lse], indexed by the rank that computed it
  std::vector<std::vector<float>> partials(static_cast<size_t>(w));
  {
    AttentionForward mine;
    mine.out.assign(n_out, 0.0f);
    mine.lse.assign(n_lse, kNegInf);
    attend_block(s, shard, own_block(shard, false), mine.out, mine.lse);
    std::vector<float>& p = partials[static_cast<size_t>(t.rank())];
    p = std::move(mine.out);
    p.insert(p.end(), mine.lse.begin(), mine.lse.end());
  }
  // all-gather around the ring: at step k a rank forwards what it received at step k - 1
  for (int step = 0; step + 1 < w; ++step) {
    const int send_owner = owner_after(t, step), recv_owner = owner_after(t, step + 1);
    std::vector<float>& in = partials[static_cast<size_t>(recv_owner)];
    in.assign(n_out + n_lse, 0.0f);
    const std::vector<float>& out = partials[static_cast<size_t>(send_owner)];
    t.wait(t.send_recv(out.data(), out.size() * sizeof(float), (t.rank() + 1) % w, in.data(), in.size() * sizeof(float),
                       (t.rank() + w - 1) % w));
  }
  // merged in rank order on every rank: identical bytes everywhere
  AttentionForward f;
  f.out.assign(n_out, 0.0f);
  f.lse.assign(n_lse, kNegInf);
  for (const std::vector<float>& p : partials) {
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t h = 0; h < s.n_head; ++h) {
        merge_partial(f.out.data() + (i * s.n_head + h) * D, f.lse[static_cast<size_t>(h * nq + i)],
                      p.data() + (i * s.n_head + h) * D, p[n_out + static_cast<size_t>(h * nq + i)], D);
      }
    }
  }
  return f;
}

std::vector<int64_t> zigzag_positions(int64_t n, int world_size, int rank) {
  GA_CHECK(world_size >= 1 && rank >= 0 && rank < world_size && n >= 0, InvalidArgument, "zigzag sharding of ", n,
           " positions: rank ", rank, " of ", world_size);
  const int64_t chunks = 2 * int64_t{world_size};
  return chunk_positions(n, chunks, {rank, chunks - 1 - rank});
}

std::vector<int64_t> contiguous_positions(int64_t n, int world_size, int rank) {
  GA_CHECK(world_size >= 1 && rank >= 0 && rank < world_size && n >= 0, InvalidArgument, "sharding of ", n,
           " positions: rank ", rank, " of ", world_size);
  return chunk_positions(n, world_size, {rank});
}

}  // namespace ga::dist

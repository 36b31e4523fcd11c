#include "pagoda/attention/flashinfer/flashinfer_plan.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>

#include "pagoda/core/error.h"

namespace pagoda {

void fi_cascade_groups(const FiPlanShape& shape, const int32_t* query_lens, const int32_t* seq_lens, int num_seqs,
                       const int32_t* tables, int stride, FiCascade* out, std::vector<int32_t>* order) {
  out->groups.clear();
  out->members.clear();
  order->clear();
  const int bs = shape.block_size;
  auto full_blocks = [&](int s) {  // full blocks before the sequence's new tokens, whose keys every new token sees
    const int first_new = seq_lens[s] - query_lens[s];
    if (query_lens[s] <= 0 || first_new < bs) return 0;
    // Under a window a query at p sees key 0 only while p < window: the prefix must be whole for every one.
    if (shape.sliding_window > 0 && seq_lens[s] - 1 >= shape.sliding_window) return 0;
    return std::min(first_new / bs, stride);
  };
  for (int s = 0; s < num_seqs; ++s)
    if (full_blocks(s) > 0) order->push_back(s);
  // By first block id, then sequence: a group's members are contiguous and in ascending order.
  std::sort(order->begin(), order->end(), [&](int32_t a, int32_t b) {
    const int32_t ia = tables[int64_t(a) * stride], ib = tables[int64_t(b) * stride];
    return ia != ib ? ia < ib : a < b;
  });
  size_t i = 0;
  while (i < order->size()) {
    const int32_t first = (*order)[i];
    const int32_t* t0 = tables + int64_t(first) * stride;
    size_t j = i + 1;
    while (j < order->size() && tables[int64_t((*order)[j]) * stride] == t0[0]) ++j;
    if (j - i >= 2) {
      int lcp = full_blocks(first);
      for (size_t m = i + 1; m < j; ++m) {
        const int32_t s = (*order)[m];
        const int32_t* t = tables + int64_t(s) * stride;
        const int n = std::min(lcp, full_blocks(s));
        // Members usually share the whole run: memcmp settles that at memory speed, mismatch finds the end else.
        lcp = std::memcmp(t, t0, size_t(n) * sizeof(int32_t)) == 0 ? n : int(std::mismatch(t, t + n, t0).first - t);
      }
      if (int64_t(lcp) * bs >= kFiMinCascadeKeys) {
        out->groups.push_back({int32_t(out->members.size()), int32_t(j - i), int32_t(lcp * bs)});
        for (size_t m = i; m < j; ++m) out->members.push_back((*order)[m]);
      }
    }
    i = j;
  }
}

bool fi_step_has_cascade(const FiPlanShape& shape, const FiStep& step, FiCascade* scratch, std::vector<int32_t>* order) {
  if (!step.block_tables || step.num_seqs < 2) return false;
  fi_cascade_groups(shape, step.query_lens, step.seq_lens, step.num_seqs, step.block_tables, step.block_table_stride,
                    scratch, order);
  return !scratch->groups.empty();
}

int FiPlan::max_task_rows() const {
  int n = 0;
  for (int i = 0; i < num_tasks_; ++i) n = std::max(n, tasks_[size_t(i)].row_end - tasks_[size_t(i)].row_begin);
  return n;
}

void FiPlan::reserve(const FiPlanShape& shape, const FiPlanLimits& limits) {
  PAGODA_CHECK(shape.num_kv_heads >= 1 && shape.num_q_heads % shape.num_kv_heads == 0 && shape.block_size >= 1,
               "FLASHINFER plan: bad shape");
  shape_ = shape;
  limits_ = limits;
  limits_.target_ctas = std::max(1, limits.target_ctas);
  const int64_t T = std::max(0, limits.max_tokens), S = std::max(0, limits.max_seqs);
  const int64_t H = shape.num_kv_heads, M = limits_.target_ctas;
  // Tiles: one per sequence and per cascade group (at most S / 2), plus one per started tile of rows (rows are
  // the tokens, and the grouped tokens once more). Splits add at most total / C <= M / H tasks.
  const int64_t tiles = S + S / 2 + 2 * T;
  int64_t tasks = tiles + (M + H - 1) / H + 1;
  // Slabs: a split tile has cost > C, so it is cut into fewer than 2 cost / C pieces, and the pieces of all
  // split tiles number below 2 total / C <= 2 M / H; each piece of a tile takes one slab per row (at most a
  // tile's tokens). Cascade adds two per grouped decode token (prefix and suffix). Grouped prefill chunks
  // may want more: lay_out's fallback serves them with a coarser chunk or without their group.
  const int64_t tile_tokens = std::max(1, kFiTileRows / (shape.num_q_heads / shape.num_kv_heads));
  int64_t slabs = 2 * ((M + H - 1) / H) * tile_tokens + (limits.cascade ? 4 * S : 0);
  if (limits.graph_splits > 1) {
    tasks = std::max(tasks, S * limits.graph_splits);
    slabs = std::max(slabs, S * limits.graph_splits);
  }
  tasks_.assign(size_t(tasks), FiTask{});
  tiles_.clear();
  tiles_.reserve(size_t(tiles));
  slots_.assign(size_t(M), 0);
  row_token_.assign(size_t(2 * T + S), 0);
  row_seq_.assign(size_t(2 * T + S), 0);
  max_slabs_ = int(slabs);
  merge_token_.assign(size_t(std::max(T, S)), 0);
  merge_indptr_.assign(size_t(std::max(T, S) + 1), 0);
  merge_slab_.assign(size_t(slabs), 0);
  cover_.assign(size_t(std::max(T, S)), 0);
  merge_of_token_.assign(size_t(std::max(T, S)), 0);
  seq_of_token_.assign(size_t(T), 0);
  qsl_.assign(size_t(S + 1), 0);
  shared_of_seq_.assign(size_t(S), 0);
  order_.reserve(size_t(S));
  cascade_.groups.reserve(size_t(S / 2 + 1));
  cascade_.members.reserve(size_t(S));
  num_tasks_ = num_rows_ = num_merged_ = num_slabs_ = num_tokens_ = 0;
}

namespace {

// The key length of the pieces lay_out cuts a tile of `span` keys and cost `cost` into at chunk cost `chunk`
// (the last piece may be shorter); chunk 0: one piece.
int piece_keys(int span, int64_t cost, int64_t chunk) {
  int64_t n = chunk > 0 ? (cost + chunk - 1) / chunk : 1;
  n = std::clamp<int64_t>(n, 1, std::max(1, (span + kFiKvAlign - 1) / kFiKvAlign));
  const int piece = int((span + n - 1) / n);
  return std::max(kFiKvAlign, (piece + kFiKvAlign - 1) / kFiKvAlign * kFiKvAlign);
}

}  // namespace

int64_t FiPlan::makespan(int64_t chunk) {
  const int g = group_size();
  std::fill(slots_.begin(), slots_.end(), 0);  // equal values: already a heap
  auto later = std::greater<int64_t>();        // a min-heap of finish times
  for (int h = 0; h < shape_.num_kv_heads; ++h)  // launch order: the task index fastest, then the KV head
    for (const Tile& tl : tiles_) {
      const int span = tl.kv_end - tl.kv_begin, piece = piece_keys(span, tl.cost, chunk);
      int b = 0;
      do {
        const int keys = std::min(piece, span - b);
        std::pop_heap(slots_.begin(), slots_.end(), later);
        slots_.back() += task_cost(keys, int64_t(tl.row_end - tl.row_begin) * g) + kFiCtaFixedCost;
        std::push_heap(slots_.begin(), slots_.end(), later);
        b += piece;
      } while (b < span);
    }
  return *std::max_element(slots_.begin(), slots_.end());
}

int64_t FiPlan::wave_chunk(int64_t chunk, int64_t max_tile) {
  const int64_t M = limits_.target_ctas, H = shape_.num_kv_heads;
  const int64_t p0 = (max_tile + chunk - 1) / chunk;
  if (p0 <= 1 || int64_t(tiles_.size()) * H > 4 * M) return chunk;
  // Candidate i cuts the largest tile into k = p0 - i pieces (candidate 0: the share itself).
  std::array<int64_t, 64> cand{}, span{};
  const int n = int(std::min<int64_t>(p0 - (p0 + 1) / 2 + 1, int64_t(cand.size())));
  int64_t best = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t k = p0 - i;
    cand[size_t(i)] = i == 0 ? chunk : std::max(chunk, (max_tile + k - 1) / k);
    span[size_t(i)] = makespan(cand[size_t(i)]);
    best = i == 0 ? span[0] : std::min(best, span[size_t(i)]);
  }
  int64_t pick = chunk;  // the coarsest within 2% of the shortest
  for (int i = 0; i < n; ++i)
    if (span[size_t(i)] * 100 <= best * 102) pick = std::max(pick, cand[size_t(i)]);
  return pick;
}

void FiPlan::make_tiles(const FiStep& st) {
  tiles_.clear();
  const int g = group_size();
  const int T = num_tokens_;
  for (int t = 0; t < T; ++t) row_token_[size_t(t)] = t, row_seq_[size_t(t)] = seq_of_token_[size_t(t)];
  num_rows_ = T;
  auto pos_of_row = [&](int r) {
    const int s = row_seq_[size_t(r)];
    return st.seq_lens[s] - st.query_lens[s] + (row_token_[size_t(r)] - qsl_[size_t(s)]);
  };
  // Tiles of rows [r0, r1) (the segment) against keys [a, b) of `seq`'s table.
  auto segment = [&](int r0, int r1, int seq, int a, int b, bool prefix_pass) {
    const bool decode = !prefix_pass && r1 - r0 == 1;
    const int step = decode ? 1 : std::max(1, kFiTileRows / g);
    for (int r = r0; r < r1; r += step) {
      const int re = std::min(r1, r + step);
      int lo = b, hi = a;
      for (int x = r; x < re; ++x) {
        int l, h;
        fi_visible_range(pos_of_row(x), st.seq_lens[row_seq_[size_t(x)]], shape_.sliding_window, shape_.causal, &l, &h);
        lo = std::min(lo, l), hi = std::max(hi, h);
      }
      lo = std::max(lo, a), hi = std::min(hi, b);
      if (hi < lo) hi = lo;  // rows that see none of these keys: an empty task still writes them
      const FiTaskKind kind = decode ? FiTaskKind::kDecode : FiTaskKind::kPrefill;
      tiles_.push_back({r, re, seq, lo, hi, kind, task_cost(hi - lo, int64_t(re - r) * g)});
    }
  };
  for (int s = 0; s < st.num_seqs; ++s) {
    if (st.query_lens[s] == 0) continue;
    segment(qsl_[size_t(s)], qsl_[size_t(s + 1)], s, shared_of_seq_[size_t(s)], st.seq_lens[s], false);
  }
  for (const FiCascadeGroup& grp : cascade_.groups) {
    const int r0 = num_rows_;
    for (int m = 0; m < grp.num_members; ++m) {
      const int s = cascade_.members[size_t(grp.first_member + m)];
      for (int t = qsl_[size_t(s)]; t < qsl_[size_t(s + 1)]; ++t) {
        row_token_[size_t(num_rows_)] = t;
        row_seq_[size_t(num_rows_)] = s;
        ++num_rows_;
      }
    }
    segment(r0, num_rows_, cascade_.members[size_t(grp.first_member)], 0, grp.shared_keys, true);
  }
}

bool FiPlan::lay_out(int64_t chunk) {
  const int T = num_tokens_;
  std::fill_n(cover_.begin(), T, 0);
  num_tasks_ = 0;
  for (const Tile& tl : tiles_) {
    const int piece = piece_keys(tl.kv_end - tl.kv_begin, tl.cost, chunk);
    int b = tl.kv_begin;
    do {
      if (num_tasks_ == max_tasks()) return false;
      FiTask& k = tasks_[size_t(num_tasks_++)];
      k = FiTask{};
      k.row_begin = tl.row_begin, k.row_end = tl.row_end, k.seq = tl.seq, k.kind = tl.kind;
      k.kv_begin = b;
      k.kv_end = std::min(tl.kv_end, b + piece);
      b = k.kv_end;
      for (int r = tl.row_begin; r < tl.row_end; ++r) ++cover_[size_t(row_token_[size_t(r)])];
    } while (b < tl.kv_end);
  }
  // Slabs for the tasks whose rows have other tasks too (every row of a task has the same cover count: a
  // tile's rows share its pieces, and a cascade member's tokens all have the prefix and the suffix).
  num_slabs_ = 0;
  for (int i = 0; i < num_tasks_; ++i) {
    FiTask& k = tasks_[size_t(i)];
    if (cover_[size_t(row_token_[size_t(k.row_begin)])] > 1) {
      if (num_slabs_ + (k.row_end - k.row_begin) > max_slabs_) return false;
      k.slab = num_slabs_;
      num_slabs_ += k.row_end - k.row_begin;
    }
  }
  // Merge list: the tokens covered more than once, in token order, each with its slabs in task order.
  num_merged_ = 0;
  int entries = 0;
  for (int t = 0; t < T; ++t) {
    if (cover_[size_t(t)] <= 1) continue;
    merge_of_token_[size_t(t)] = num_merged_;
    merge_token_[size_t(num_merged_)] = t;
    merge_indptr_[size_t(num_merged_)] = entries;
    entries += cover_[size_t(t)];
    ++num_merged_;
  }
  merge_indptr_[size_t(num_merged_)] = entries;
  PAGODA_CHECK(entries == num_slabs_, "FLASHINFER plan: ", entries, " merge entries for ", num_slabs_, " slabs");
  std::fill_n(cover_.begin(), T, 0);  // now: entries filled per merged token
  for (int i = 0; i < num_tasks_; ++i) {
    const FiTask& k = tasks_[size_t(i)];
    if (k.slab < 0) continue;
    for (int r = k.row_begin; r < k.row_end; ++r) {
      const int t = row_token_[size_t(r)], m = merge_of_token_[size_t(t)];
      merge_slab_[size_t(merge_indptr_[size_t(m)] + cover_[size_t(t)]++)] = k.slab + (r - k.row_begin);
    }
  }
  return true;
}

void FiPlan::build(const FiStep& st) {
  PAGODA_CHECK(!tasks_.empty(), "FLASHINFER plan: build() before reserve()");
  if (st.num_seqs > limits_.max_seqs)
    throw_runtime_error("FLASHINFER plan: ", st.num_seqs, " sequences, reserved for ", limits_.max_seqs);
  int T = 0;
  qsl_[0] = 0;
  for (int s = 0; s < st.num_seqs; ++s) {
    const int q = st.query_lens[s], len = st.seq_lens[s];
    if (q < 0 || q > len) throw_runtime_error("FLASHINFER plan: sequence ", s, " has ", q, " new tokens but a context of ", len);
    if (len > limits_.max_model_len)
      throw_runtime_error("FLASHINFER plan: sequence ", s, " has a context of ", len, ", reserved for ", limits_.max_model_len);
    if (T + q > limits_.max_tokens)
      throw_runtime_error("FLASHINFER plan: more than the ", limits_.max_tokens, " tokens reserved");
    for (int i = 0; i < q; ++i) seq_of_token_[size_t(T + i)] = s;
    T += q;
    qsl_[size_t(s + 1)] = T;
  }
  num_tokens_ = T;
  cascade_.groups.clear();
  cascade_.members.clear();
  if (limits_.cascade && st.block_tables)
    fi_cascade_groups(shape_, st.query_lens, st.seq_lens, st.num_seqs, st.block_tables, st.block_table_stride, &cascade_,
                      &order_);
  const int H = shape_.num_kv_heads, M = limits_.target_ctas;
  fell_back_ = false;
  for (;;) {
    std::fill_n(shared_of_seq_.begin(), st.num_seqs, 0);
    for (const FiCascadeGroup& grp : cascade_.groups)
      for (int m = 0; m < grp.num_members; ++m) shared_of_seq_[size_t(cascade_.members[size_t(grp.first_member + m)])] = grp.shared_keys;
    make_tiles(st);
    total_cost_ = 0;
    int64_t max_tile = 0;
    for (const Tile& tl : tiles_) total_cost_ += tl.cost, max_tile = std::max(max_tile, tl.cost);
    int64_t chunk = std::max<int64_t>(kFiMinChunkCost, (total_cost_ * H + M - 1) / M);
    if (chunk < max_tile) chunk = wave_chunk(chunk, max_tile);
    for (;;) {
      if (chunk >= max_tile) {  // nothing to split: the last try at this grouping
        if (lay_out(0)) {
          chunk_cost_ = 0;
          return;
        }
        break;
      }
      if (lay_out(chunk)) {
        chunk_cost_ = chunk;
        return;
      }
      chunk *= 2;
      fell_back_ = true;
    }
    fell_back_ = true;
    PAGODA_CHECK(!cascade_.groups.empty(), "FLASHINFER plan: an unsplit step does not fit the reserved plan");
    cascade_.members.resize(size_t(cascade_.groups.back().first_member));
    cascade_.groups.pop_back();
  }
}

void FiPlan::build_graph_decode(int batch, int splits) {
  PAGODA_CHECK(batch <= limits_.max_seqs && batch <= max_tasks() && splits >= 1 && int64_t(batch) * splits <= max_tasks(),
               "FLASHINFER plan: graph decode of ", batch, " x ", splits, " does not fit the reserved plan");
  PAGODA_CHECK(splits == 1 || int64_t(batch) * splits <= max_slabs_, "FLASHINFER plan: graph decode slabs");
  cascade_.groups.clear();
  cascade_.members.clear();
  num_tokens_ = batch;
  num_rows_ = batch;
  num_tasks_ = 0;
  for (int s = 0; s < batch; ++s) {
    row_token_[size_t(s)] = s, row_seq_[size_t(s)] = s;
    for (int j = 0; j < splits; ++j) {
      FiTask& k = tasks_[size_t(num_tasks_++)];
      k = FiTask{};
      k.row_begin = s, k.row_end = s + 1, k.seq = s, k.kind = FiTaskKind::kDecode;
      k.split = int16_t(j), k.num_splits = int16_t(splits);
      k.slab = splits > 1 ? s * splits + j : -1;
    }
  }
  num_slabs_ = splits > 1 ? batch * splits : 0;
  num_merged_ = splits > 1 ? batch : 0;
  for (int m = 0; m < num_merged_; ++m) {
    merge_token_[size_t(m)] = m;
    merge_indptr_[size_t(m)] = m * splits;
    for (int j = 0; j < splits; ++j) merge_slab_[size_t(m * splits + j)] = m * splits + j;
  }
  merge_indptr_[size_t(num_merged_)] = num_merged_ * splits;
  chunk_cost_ = 0;
  total_cost_ = 0;
  fell_back_ = false;
}

}  // namespace pagoda

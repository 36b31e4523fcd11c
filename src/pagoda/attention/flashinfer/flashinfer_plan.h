// FLASHINFER's host planner: one step's work list, built on the host from the query and context lengths
// (and, for cascade, the block tables), executed by the CPU reference (flashinfer_cpu.h) and by the CUDA
// kernels alike. PRIVATE to flashinfer/.
//
// Vocabulary. A *row* is one query token seen by one task; the plan's row table maps row -> (token,
// sequence). Rows [0, num_tokens) are the step's tokens in order; a cascade group appends its members'
// tokens once more (the rows of its shared-prefix pass). A *task* is a set of consecutive rows of the row
// table against a range of key positions [kv_begin, kv_end) of one block table, for every KV head (the
// kernels run tasks x KV heads; each (task, KV head) packs the rows with the query heads of that KV head,
// FlashInfer's GQA head grouping). A row at position p of its sequence sees key k when the layer's mask
// allows it (causal: k <= p; window w: k > p - w; non-causal: every key of the sequence past the window).
//
// Every (token, key) pair the mask allows is covered by exactly one task. A token covered by one task gets
// its output written directly; a token covered by several (its context split, or a shared prefix and its
// own suffix) gets one partial per task in a *slab* (float32 o of every query head plus its log-sum-exp),
// and the merge list combines them by log-sum-exp.
//
// Balance. A task costs (keys it spans) x (1 + packed rows / kFiCostRows), the packed rows being its rows
// times the GQA group. The planner splits a tile's key range into equal pieces (multiples of kFiKvAlign
// keys) so that no task costs more than the chunk cost C = max(kFiMinChunkCost, ceil(total cost x KV heads
// / target CTAs)) plus one alignment step. The GPU's block scheduler runs tasks greedily, so the step takes
// at most total / target + C <= 2x the ideal: batch 1 at 32k fills every SM, a 32k sequence among short
// ones is cut to the size of the rest's share and leaves no straggler. Steps of few CTAs (tiles x KV heads
// <= 4 x target) may take a coarser C: equal pieces run in whole waves of the target's slots, and one more
// piece a tile can add a wave (batch 16 at 8k: three pieces a sequence are 384 CTAs, two waves of 264 slots;
// two pieces are one wave). The planner simulates the block scheduler (greedy, in launch order, each CTA
// costing its task plus kFiCtaFixedCost) for the C that cut the largest tile into p0 .. ceil(p0 / 2) pieces
// (p0 at the share) and takes the shortest, the coarsest within 2% of it. If the reserved slabs or tasks do
// not hold the result, C doubles (fewer splits) up to no split at all, and then cascade groups are dropped
// from the last; the plan always fits.
//
// Graph safety: reserve() sizes every array for the step limits; build() fills them without allocating;
// a captured decode step uses build_graph_decode(), a fixed grid whose key ranges come from the run-time
// context lengths (task.num_splits > 0), valid for any context.
#pragma once

#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define PAGODA_FI_HD __host__ __device__
#else
#define PAGODA_FI_HD
#endif

namespace pagoda {

constexpr int kFiKvAlign = 16;           // split pieces start at multiples of this many keys
constexpr int64_t kFiMinChunkCost = 256;  // below this a split costs more (partials, merge) than it saves
constexpr int kFiCostRows = 64;          // packed query rows whose MMA costs as much as reading the keys
constexpr int kFiTileRows = 64;          // packed rows (tokens x GQA group) of a prefill tile
constexpr int kFiMinCascadeKeys = 32;    // shorter shared prefixes are attended per request
constexpr int64_t kFiCtaFixedCost = 128;  // a CTA's start and end (plan, rows, queries, writes) in task-cost units:
                                          // about two 64-key stages, as the paged split planner counts it

// The keys [*lo, *hi) a query at position `pos` of a sequence of seq_len keys may see (the mask's hull).
PAGODA_FI_HD inline void fi_visible_range(int pos, int seq_len, int sliding_window, bool causal, int* lo, int* hi) {
  *hi = causal ? pos + 1 : seq_len;
  *lo = sliding_window > 0 && pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
}
// Whether that query sees key k.
PAGODA_FI_HD inline bool fi_visible(int pos, int k, int sliding_window, bool causal) {
  return (!causal || k <= pos) && (sliding_window <= 0 || k > pos - sliding_window);
}
// Piece `split` of `num_splits` of the keys [lo, hi): equal lengths rounded up to kFiKvAlign, the last ones
// shorter or empty (*b == *e).
PAGODA_FI_HD inline void fi_split_range(int lo, int hi, int split, int num_splits, int* b, int* e) {
  const int n = hi > lo ? hi - lo : 0;
  int len = (n + num_splits - 1) / num_splits;
  len = (len + kFiKvAlign - 1) / kFiKvAlign * kFiKvAlign;
  const int s = lo + split * len;
  *b = s < hi ? s : hi;
  *e = s + len < hi ? s + len : hi;
}

// The layer facts the planner needs.
struct FiPlanShape {
  int num_q_heads = 0, num_kv_heads = 0;  // num_q_heads % num_kv_heads == 0
  int block_size = 16;
  int sliding_window = 0;  // 0: none
  bool causal = true;
};

struct FiPlanLimits {
  int max_tokens = 0, max_seqs = 0, max_model_len = 0;
  int target_ctas = 1;   // CTAs (CPU: worker chunks) that run at once: the split target
  bool cascade = false;  // group shared prefixes (needs the block tables in build())
  int graph_splits = 0;  // > 0: also room for build_graph_decode(max_seqs, graph_splits)
};

enum class FiTaskKind : uint8_t {
  kDecode,   // one row of one sequence (a decode token)
  kPrefill,  // up to kFiTileRows / group rows (a prefill tile, or a shared prefix's multi-query pass)
};

struct FiTask {
  int32_t row_begin = 0, row_end = 0;  // rows [row_begin, row_end) of the row table
  int32_t seq = 0;                     // the sequence whose block table holds the keys
  int32_t kv_begin = 0, kv_end = 0;    // key positions [kv_begin, kv_end) (num_splits == 0)
  int32_t slab = -1;                   // -1: write out directly; else row r -> slab + (r - row_begin)
  int16_t split = 0, num_splits = 0;   // num_splits > 0: keys are piece `split` of num_splits equal pieces
                                       // of the row's visible range, from the run-time context length
  FiTaskKind kind = FiTaskKind::kDecode;
};

// A cascade group: members share the first shared_keys / block_size block ids of their tables.
struct FiCascadeGroup {
  int32_t first_member = 0, num_members = 0;  // members[first_member, first_member + num_members)
  int32_t shared_keys = 0;                    // a multiple of the block size
};

// The shared-prefix groups of a step (cascade, spec'd in docs/flashinfer.md). A sequence is eligible when its
// new tokens all lie past its first full block and every one of them sees every key of the shared prefix
// (always when causal; under a window w only while position < w). Eligible sequences are grouped by their
// first block id; a group's shared prefix is the longest run of leading block ids every member has, among
// its full blocks before the new tokens. Groups of one member or of fewer than kFiMinCascadeKeys keys are
// dropped. members lists the grouped sequences, each group's contiguous, in ascending sequence order.
struct FiCascade {
  std::vector<FiCascadeGroup> groups;
  std::vector<int32_t> members;
};
// `out`'s vectors are reused (no allocation once they hold max_seqs entries); `order` is scratch.
void fi_cascade_groups(const FiPlanShape& shape, const int32_t* query_lens, const int32_t* seq_lens, int num_seqs,
                       const int32_t* block_tables, int block_table_stride, FiCascade* out, std::vector<int32_t>* order);

// One step's inputs.
struct FiStep {
  const int32_t* query_lens = nullptr;    // [num_seqs]
  const int32_t* seq_lens = nullptr;      // [num_seqs], >= query_lens
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride] host copy; needed for cascade only
  int block_table_stride = 0;
  int num_seqs = 0;
};

// Whether `step` has a cascade group (fi_cascade_groups finds one): such a step needs a plan of its own, so it
// must not replay a captured decode grid. false without block tables. `scratch` and `order` as there.
bool fi_step_has_cascade(const FiPlanShape& shape, const FiStep& step, FiCascade* scratch, std::vector<int32_t>* order);

class FiPlan {
 public:
  // Capacity for steps within `limits`. PRECOND: shape.num_kv_heads >= 1.
  void reserve(const FiPlanShape& shape, const FiPlanLimits& limits);
  // This step's plan. Throws a runtime pagoda::Error for a step past the reserved limits or with a query
  // longer than its context.
  void build(const FiStep& step);
  // The captured decode grid: `batch` sequences of one token each, every one split into `splits` pieces of
  // its run-time context (1: no split, direct writes). PRECOND: batch <= max_seqs, splits >= 1.
  void build_graph_decode(int batch, int splits);

  const FiPlanShape& shape() const { return shape_; }
  const FiPlanLimits& limits() const { return limits_; }
  int group_size() const { return shape_.num_q_heads / shape_.num_kv_heads; }

  int num_tokens() const { return num_tokens_; }
  int num_tasks() const { return num_tasks_; }
  const FiTask* tasks() const { return tasks_.data(); }
  int max_task_rows() const;  // the most rows of one task (0 without tasks)
  int num_rows() const { return num_rows_; }
  const int32_t* row_token() const { return row_token_.data(); }  // [num_rows]
  const int32_t* row_seq() const { return row_seq_.data(); }      // [num_rows]
  // Tokens merged from slabs: token merge_token[i] combines slabs merge_slab[merge_indptr[i], merge_indptr[i+1]).
  int num_merged() const { return num_merged_; }
  const int32_t* merge_token() const { return merge_token_.data(); }
  const int32_t* merge_indptr() const { return merge_indptr_.data(); }  // [num_merged + 1]
  const int32_t* merge_slab() const { return merge_slab_.data(); }
  int num_slabs() const { return num_slabs_; }

  // Capacities fixed at reserve(): the buffers a runner sizes once.
  int max_tasks() const { return int(tasks_.size()); }
  int max_rows() const { return int(row_token_.size()); }
  int max_slabs() const { return max_slabs_; }
  int max_merged() const { return int(merge_token_.size()); }

  // The step's facts, for tests and logs.
  int64_t chunk_cost() const { return chunk_cost_; }   // C of the file comment; 0 when nothing is split
  int64_t total_cost() const { return total_cost_; }   // over every task, one KV head
  const FiCascade& cascade() const { return cascade_; }  // the groups the plan used
  // Whether the reserved buffers made the plan coarser than its target (a larger C, or fewer groups).
  bool fell_back() const { return fell_back_; }
  static int64_t task_cost(int64_t keys, int64_t packed_rows) { return keys + keys * packed_rows / kFiCostRows; }

 private:
  struct Tile {
    int32_t row_begin, row_end, seq, kv_begin, kv_end;
    FiTaskKind kind;
    int64_t cost;
  };
  bool lay_out(int64_t chunk_cost);  // tasks, slabs and merges for tiles_ at C; false if over capacity
  int64_t makespan(int64_t chunk_cost);  // the simulated step time of tiles_ cut at C (the file comment)
  int64_t wave_chunk(int64_t chunk_cost, int64_t max_tile);  // the C the simulation prefers, >= chunk_cost
  void make_tiles(const FiStep& step);

  FiPlanShape shape_;
  FiPlanLimits limits_;
  std::vector<FiTask> tasks_;
  std::vector<int32_t> row_token_, row_seq_;
  std::vector<int32_t> merge_token_, merge_indptr_, merge_slab_;
  std::vector<int32_t> cover_;  // [max_tokens] per token: tasks covering it (scratch)
  std::vector<Tile> tiles_;     // scratch, reserved
  std::vector<int64_t> slots_;  // scratch of makespan(): [target_ctas] finish times, a min-heap
  std::vector<int32_t> seq_of_token_, qsl_, shared_of_seq_, merge_of_token_, order_;
  FiCascade cascade_;
  int num_tasks_ = 0, num_rows_ = 0, num_merged_ = 0, num_slabs_ = 0, max_slabs_ = 0, num_tokens_ = 0;
  int64_t chunk_cost_ = 0, total_cost_ = 0;
  bool fell_back_ = false;
};

}  // namespace pagoda

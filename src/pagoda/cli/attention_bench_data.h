// The inputs and the float64 reference of `pagoda bench attention` (private to attention_bench*.cc): every
// number is a function of (sequence slot, position) only, the same for every layer and candidate, so a slot's
// cache is written once up to the longest context any step reads from it and a step that rewrites its new
// tokens' keys and values writes the same numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "pagoda/attention/runner.h"
#include "pagoda/cli/attention_bench.h"
#include "pagoda/model/model_runner.h"

namespace pagoda::bench_detail {

// A counter-based uniform in [-sqrt(3), sqrt(3)) (variance 1): splitmix64 of (seed, stream, index).
float input_value(uint64_t seed, uint64_t stream, uint64_t index);
enum Stream : uint64_t { kQ = 1, kK = 2, kV = 3, kFillQ = 4 };

struct Dims {
  int hq = 0, hkv = 0, d = 0;
  int64_t q_row() const { return int64_t(hq) * d; }
  int64_t kv_row() const { return int64_t(hkv) * d; }
};

// First key position a query at position `p` sees (causal, sliding window; 0 = none).
inline int first_key(int p, int window) { return window > 0 ? (p - window + 1 > 0 ? p - window + 1 : 0) : 0; }

// The float64 attention of a step, and per output row (token, query head) what its error bound needs.
struct Reference {
  std::vector<double> out;     // [tokens, hq, d]
  std::vector<RowFacts> rows;  // [tokens, hq]
};

// One step of the workload, independent of the candidate.
struct StepData {
  std::vector<int> slots;         // [seqs]
  std::vector<int32_t> qsl;       // [seqs + 1]
  std::vector<int32_t> seq_lens;  // [seqs]
  std::vector<float> q, k, v;     // [tokens, heads, d]
  // Float64 references by the mask's (window, causal), made when a candidate needs one.
  std::map<std::pair<int, bool>, Reference> refs;
  int tokens = 0, seqs = 0;
  int max_context = 0;
};

// The full keys and values of every slot up to its fill length, [slot][pos][kv_row], for the fill and the
// reference.
struct SlotData {
  std::vector<int> fill_len;
  std::vector<std::vector<float>> k, v;
};

// The steps' inputs and the slots' keys and values; every number rounded to `round_to` (the compute dtype the
// inputs are given in: float32 on the CPU, the model dtype on the GPU), so that the reference sees what the
// kernels see.
void make_inputs(const BenchWorkload& w, const Dims& dm, uint64_t seed, DType round_to, std::vector<StepData>& steps,
                 SlotData& sd);

// What one layer of a step does under a mask: key positions some query of a sequence attends (summed over the
// sequences: the keys a kernel must read) and query-key pairs kept (the multiply-adds).
struct StepWork {
  double kv_tokens_read = 0, pairs = 0;
};
StepWork step_work(const StepData& s, int window, bool causal);

double layer_scale(const LayerShape& sh);
// The float64 attention of step `s` under the mask and scale of `sh`, made once per (window, causal).
const Reference& reference(StepData& s, const SlotData& sd, const Dims& dm, const LayerShape& sh);

// The layers a candidate is judged on: those of its KV cache dtype (TurboQuant boundary layers and skipped ones
// keep `auto` and run what the selector gives them); all of them must run the candidate's backend, else a reason
// is added to c. Sets c.num_layers, c.own_layers; returns the mask.
std::vector<bool> candidate_layers(BenchCandidate& c, const CandidateSelection& sel, bool cpu);

// Per output row: its error and bound, both relative to the largest |value| the row attends. The candidate shows
// the row nearest (or furthest past) its bound; it is checked when every row's bound is below the trivial 2.
struct AccuracyTally {
  double worst_ratio = -1, worst_bound = 0;
};
void compare_rows(BenchCandidate& c, const KvErrorModel& m, const Reference& ref, const float* out, int head_size,
                  AccuracyTally& t);
void finish_accuracy(BenchCandidate& c, const AccuracyTally& t);

// Bytes and operations of a step of the whole model, averaged over the workload's steps; q, k, v and out of
// `io_bytes` bytes an element.
void step_costs(BenchCandidate& c, const std::vector<StepData>& steps, const std::vector<AttentionGroup>& groups,
                const std::vector<int>& layer_group, int block_size, const Dims& dm, int io_bytes);

// After one untimed round of every candidate of `live`, interleaved rounds (the order rotating) until the time
// budget is spent (min_rounds..max_rounds); one_round(ci) returns a candidate's mean seconds per step. Sets the
// median and quartiles.
void timed_rounds(const BenchAttentionRequest& req, std::vector<BenchCandidate>& cands, const std::vector<size_t>& live,
                  const std::function<double(size_t)>& one_round, const BenchProgress& progress, int64_t& done,
                  int64_t& total);

}  // namespace pagoda::bench_detail

namespace pagoda {
// run_attention_bench on a CUDA device (attention_bench_cuda.cc, in CUDA builds with the GPU model path).
BenchCeilings run_attention_bench_cuda(const BenchAttentionRequest& req, std::vector<BenchCandidate>& candidates,
                                       const SelectCandidate& select, const BenchProgress& progress,
                                       const BenchAttentionHooks* hooks);
}  // namespace pagoda

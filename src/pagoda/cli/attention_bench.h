// `pagoda bench attention`'s measurement, free of the CLI's heavy headers: the workloads (one or more engine
// steps of new tokens over contexts), the candidates (a backend with a KV cache dtype, block size and
// FlashAttention version, and the engine flags that select it), and for each valid candidate the engine's own
// selection, runners and per-layer caches timed on the workload and checked against a float64 dense attention.
//
// Timing: every step of the workload runs as the engine runs it: plan() once, then run() for every layer of
// the model over that layer's own cache. Candidates are timed in interleaved rounds (the order rotating), after
// one untimed round; a candidate's figure is the median over rounds of its mean time per step.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/attention/runner.h"
#include "pagoda/attention/selector_config.h"
#include "pagoda/config/attention_config.h"
#include "pagoda/model/model_config.h"
#include "pagoda/platform/device.h"

namespace pagoda {

// One engine step of the workload: per sequence its new tokens and its context once they are written.
struct BenchStep {
  AttentionBatch batch;
  std::vector<int> slots;  // per sequence, the cache region it reads (empty: 0, 1, ...); one per request of a trace
  std::string label;  // "8 x decode at 1024", "t=3.20 s: 2 prefill + 14 decode"
};

struct BenchWorkload {
  std::string name;      // decode, prefill, mixed, serve-trace
  std::string describe;  // one line for the report
  std::vector<BenchStep> steps;
};

BenchWorkload decode_workload(int batch, int context);
BenchWorkload prefill_workload(int batch, int prompt);
// One sequence prefilling `prompt` new tokens after `prompt` tokens of context (a chunk of a long prompt) beside
// `batch` sequences decoding at `context`.
BenchWorkload mixed_workload(int batch, int context, int prompt);

// One request of `pagoda bench serve --save-trace`: when it was sent, its first token and its end (seconds from
// the start of the run), and its lengths.
struct TraceRequest {
  double arrival_s = 0, ttft_s = 0, e2e_s = 0;
  int prompt_tokens = 0, output_tokens = 0;
};
// The steps the server ran, reconstructed at `num_steps` instants evenly spaced over the run: at instant t a
// request between arrival and its first token is prefilling its prompt, one between its first token and its
// end decodes with its prompt plus the tokens produced by then (produced at an even rate) as context. Instants
// with no request in flight are skipped; throws a config error when the trace holds no request.
BenchWorkload trace_workload(const std::vector<TraceRequest>& trace, int num_steps);

// What accuracy a KV cache format allows. One output row (a token's query head) against a float64 attention over
// the unrounded inputs, relative to the largest |value| V the row attends: keys rounded with relative error u_k
// per element (a_k absolute) move the row's logit of key j by at most u_k L_j + a_k Q (+ float32 terms), with
// L_j = scale sum_e |q_e k_je| and Q = scale |q|_1; a softmax whose logits move by at most d moves each weight
// by a factor within exp(+-2 d); values rounded by u_v V + a_v add at most that. So
//   d     = u_k max_j L_j + a_k Q + (head_size + 8) 2^-24 max_j L_j + 2^-21
//   error <= exp(2 d) - 1 + u_v + a_v / V + (context + head_size + 16) 2^-23
// Formats that round in a rotated basis (TurboQuant's FP8 keys) use the basis-free L_j <= scale |q| |k_j| and
// Q <= scale sqrt(head_size) |q|. TurboQuant's 3- and 4-bit keys (Lloyd-Max codes) have no worst case below the
// trivial bound 2 + u_v: the output and the reference both lie within the values' range.
struct KvErrorModel {
  double u_k = 0, a_k = 0, u_v = 0, a_v = 0;
  // GPU kernels round the softmax weights and the output to the compute dtype (relative u_compute each): the
  // bound gains 2 u_compute. 0 on the CPU (float32 throughout).
  double u_compute = 0;
  bool rotated = false;  // L and Q in any basis
  bool trivial = false;
  std::string text;  // "bfloat16 keys and values: u = 2^-8"
};
KvErrorModel kv_error_model(const std::string& kv_cache_dtype, DType element_dtype);

// What a row's bound needs from its inputs (the reference computes it).
struct RowFacts {
  double logit_abs = 0;        // max_j scale sum_e |q_e k_je|
  double logit_any_basis = 0;  // max_j scale |q| |k_j|
  double q_l1 = 0;             // scale |q|_1
  double q_l1_any_basis = 0;   // scale sqrt(head_size) |q|
  double max_abs_v = 0;        // V
  int context = 0;             // keys the row attends
};
double kv_error_bound(const KvErrorModel& m, const RowFacts& row, int head_size);

// A backend with the settings that distinguish it, and the engine flags that select it.
struct BenchCandidate {
  BackendName backend = BackendName::kCpuAttn;
  std::string kv_cache_dtype = "auto";
  std::optional<int> block_size;          // given with --block-size
  std::optional<int> flash_attn_version;  // given with --flash-attn-version (FLASH_ATTN only)
  bool automatic = false;                 // the selection without --attention-backend
  std::vector<std::string> flags;         // the engine flags of this candidate

  // Filled by the bench.
  std::vector<std::string> reasons;  // not valid here (not timed): why
  std::string runner;                // the runners' describe(), "CPU_ATTN" or "TURBOQUANT (4 layers CPU_ATTN)"
  int plan_block_size = 0;
  KvLayout layout = KvLayout::kNHD;
  int num_layers = 0, own_layers = 0;     // layers in a step; layers that run `backend`
  int64_t kv_bytes_per_token = 0;         // every layer's K and V
  int64_t capacity_tokens = 0;            // tokens the KV budget holds
  std::vector<double> round_s;            // mean seconds per step, one per timed round
  double median_s = 0, q1_s = 0, q3_s = 0;
  double bytes_per_step = 0, flops_per_step = 0;
  double error = 0, bound = 0;            // of the row nearest its bound, relative to its largest |value|
  std::string bound_text;
  bool checked = false;   // every row's bound is below the trivial 2 (else the check says nothing)
  bool accurate = false;  // checked and error <= bound: may be recommended
  bool timed() const { return reasons.empty(); }
  std::string name() const;  // "CPU_ATTN kv=auto", "FLASH_ATTN kv=fp8 block=32 fa=3"
};

struct BenchCeilings {
  double bytes_per_s = 0;  // read bandwidth (CPU: sums over a 256 MiB buffer on every thread)
  double flops_per_s = 0;  // float multiply-adds of the kernels' instruction set on every thread
  std::string describe;
};

// Test-only hook: called on the output of the accuracy layer of each candidate before it is compared with the
// reference. No flag, option or environment variable reaches it; the CLI passes none.
struct BenchAttentionHooks {
  std::function<void(const BenchCandidate& c, float* out, int64_t n)> corrupt_output;
};

// The engine's view of one candidate: parse its flags as the engine commands do and run engine start's
// attention selection (select_engine_attention). Filled by the caller (the CLI owns the argument parser).
struct CandidateSelection {
  std::vector<BackendName> layer_backends;
  std::vector<std::string> layer_kv_cache_dtypes;
  int block_size = 0;
  KvLayout layout = KvLayout::kNHD;
  std::optional<int> flash_attn_version;
  AttentionConfig attention;
  bool batch_invariant = false;
  bool causal = true;
  std::string kv_cache_dtype;  // the effective one
  DType model_dtype = DType::kF32;
};
using SelectCandidate = std::function<CandidateSelection(const BenchCandidate&)>;

struct BenchAttentionRequest {
  DeviceInfo device;
  const ModelConfig* model = nullptr;  // not owned
  BenchWorkload workload;
  int threads = 0;               // CPU: 0 = every hardware thread
  double time_budget_s = 10;     // for the timed rounds, all candidates together
  int min_rounds = 3, max_rounds = 200;
  double kv_budget_bytes = 0;    // for the capacity column
  uint64_t seed = 0;
};

// Progress: called after each unit of work with a short label; `total` units in all.
using BenchProgress = std::function<void(int64_t done, int64_t total, const std::string& what)>;

// Selects, builds, fills, checks and times every candidate (invalid ones get reasons and are skipped).
// Throws runtime errors for a device the bench cannot time on.
BenchCeilings run_attention_bench(const BenchAttentionRequest& req, std::vector<BenchCandidate>& candidates,
                                  const SelectCandidate& select, const BenchProgress& progress,
                                  const BenchAttentionHooks* hooks);

// The fastest accurate timed candidate, or -1 (unchecked ones, whose bound is the trivial one, never); engine
// start's choice instead when it is accurate and its first quartile is at or below the fastest's third quartile
// (the rounds do not tell them apart, and it needs no flag).
int recommended_candidate(const std::vector<BenchCandidate>& candidates);

// The command with the test-only hook (bench_attention_cmd.cc); run_bench_attention passes none.
int run_bench_attention_hooked(const std::vector<std::string>& args, const BenchAttentionHooks* hooks);

}  // namespace pagoda

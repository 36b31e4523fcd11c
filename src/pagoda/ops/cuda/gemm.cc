#include "pagoda/ops/cuda/gemm.h"

#include <cublasLt.h>

#include <cstring>
#include <map>
#include <tuple>

#include "pagoda/core/error.h"
#include "pagoda/ops/cuda/device_buffer.h"

namespace pagoda {
namespace {

[[noreturn]] void cublas_failed(cublasStatus_t st, const char* expr, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  throw Error(ErrorKind::kRuntime, str_cat("cuBLASLt error ", cublasLtGetStatusName(st), " (",
                                           cublasLtGetStatusString(st), ") at ", base, ":", line, ": ", expr));
}

#define PAGODA_CUBLAS_CHECK(expr)                                                    \
  do {                                                                               \
    cublasStatus_t pagoda_st_ = (expr);                                              \
    if (pagoda_st_ != CUBLAS_STATUS_SUCCESS) cublas_failed(pagoda_st_, #expr, __FILE__, __LINE__); \
  } while (0)

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: break;
  }
  PAGODA_CHECK(false, "gemm: unsupported dtype ", dtype_name(t), " (float32, bfloat16 or float16)");
}

// All operands 16-byte aligned (checked in run()); the heuristic then only offers algorithms that work with it.
constexpr uint32_t kMinAlignment = 16;

using PlanKey = std::tuple<int, int, int, DType, bool>;

// Descriptors and the chosen algorithm of one problem. cuBLASLt is column-major: the row-major
// y[M,N] = x[M,K] W[N,K]^T is the column-major D[N,M] = op(A)[N,K] B[K,M] with A = W read as a
// column-major [K,N] matrix (ld K) and transposed, B = x read as column-major [K,M] (ld K), D = y
// read as column-major [N,M] (ld N). The bias epilogue adds bias[row of D] = bias[n].
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool bias_epilogue = false;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  explicit Preference(size_t workspace_bytes) {
    PAGODA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = workspace_bytes;
    PAGODA_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // Partial sums of split-K are reduced in fp32 (or in place), never rounded to bf16/fp16 in between.
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
    PAGODA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                             &schemes, sizeof(schemes)));
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      uint32_t align = kMinAlignment;
      PAGODA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
    }
  }
  ~Preference() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

}  // namespace

struct GemmRunner::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  size_t workspace_bytes = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  bool batch_invariant = false;
  // Batch-invariant mode: the algorithm of each (n, k, type, bias), whatever m.
  static constexpr int kInvariantM = 256;
  std::map<std::tuple<int, int, int, bool>, cublasLtMatmulAlgo_t> invariant_algos;
  cublasLtMatmulAlgo_t invariant_algo(const Plan& shape_of, int n, int k, cudaDataType_t t, const Preference& pref);

  const Plan& plan(int m, int n, int k, DType dtype, bool with_bias) {
    PlanKey key{m, n, k, dtype, with_bias};
    auto it = plans.find(key);
    if (it != plans.end()) return *it->second;

    PAGODA_CHECK(m >= 1 && n >= 1 && k >= 1, "gemm: bad shape m=", m, " n=", n, " k=", k);
    const cudaDataType_t t = cuda_type(dtype);
    auto p = std::make_unique<Plan>();
    PAGODA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    PAGODA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    PAGODA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    p->bias_epilogue = with_bias;
    if (with_bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      PAGODA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      const int32_t bias_type = t;
      PAGODA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                         sizeof(bias_type)));
      // The heuristic reads the bias pointer's alignment from its value: tell it 16 bytes, as run() checks.
      const void* fake_bias = reinterpret_cast<const void*>(uintptr_t(kMinAlignment));
      PAGODA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &fake_bias,
                                                         sizeof(fake_bias)));
    }
    PAGODA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, t, uint64_t(k), uint64_t(n), int64_t(k)));
    PAGODA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, t, uint64_t(k), uint64_t(m), int64_t(k)));
    PAGODA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, t, uint64_t(n), uint64_t(m), int64_t(n)));

    Preference pref(workspace_bytes);
    cublasLtMatmulHeuristicResult_t results[8] = {};
    int returned = 0;
    if (batch_invariant) {
      // One algorithm per (n, k) for every m: the heuristic's choice for kInvariantM rows, without split-K,
      // so that a row's result does not depend on how many other rows the step has.
      p->algo = invariant_algo(*p, n, k, t, pref);
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(handle, p->op, p->a, p->b, p->d, p->d, &p->algo, &check) != CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize > workspace_bytes)
        throw_runtime_error("gemm: the batch-invariant algorithm for n=", n, " k=", k, " does not take m=", m);
      p->workspace = check.workspaceSize;
      return *plans.emplace(key, std::move(p)).first->second;
    }
    PAGODA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, p->op, p->a, p->b, p->d, p->d, pref.pref, 8, results,
                                                       &returned));
    int chosen = -1;
    for (int i = 0; i < returned && chosen < 0; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace_bytes) chosen = i;
    if (chosen < 0)
      throw_runtime_error("gemm: cuBLASLt has no algorithm for m=", m, " n=", n, " k=", k, " dtype ",
                          dtype_name(dtype), with_bias ? " with bias" : "");
    p->algo = results[chosen].algo;
    p->workspace = results[chosen].workspaceSize;
    return *plans.emplace(key, std::move(p)).first->second;
  }
};

cublasLtMatmulAlgo_t GemmRunner::Impl::invariant_algo(const Plan& shape_of, int n, int k, cudaDataType_t t,
                                                      const Preference& pref) {
  const auto key = std::make_tuple(n, k, int(t), shape_of.bias_epilogue);
  auto it = invariant_algos.find(key);
  if (it != invariant_algos.end()) return it->second;
  cublasLtMatrixLayout_t b = nullptr, d = nullptr;
  PAGODA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, t, uint64_t(k), uint64_t(kInvariantM), int64_t(k)));
  PAGODA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, t, uint64_t(n), uint64_t(kInvariantM), int64_t(n)));
  cublasLtMatmulHeuristicResult_t results[8] = {};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, shape_of.op, shape_of.a, b, d, d, pref.pref, 8, results, &returned);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatrixLayoutDestroy(b);
  PAGODA_CUBLAS_CHECK(st);
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > workspace_bytes) continue;
    cublasLtMatmulAlgo_t algo = results[i].algo;
    int32_t splits = 1;
    if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    return invariant_algos.emplace(key, algo).first->second;
  }
  throw_runtime_error("gemm: cuBLASLt has no batch-invariant algorithm for n=", n, " k=", k);
}

GemmRunner::GemmRunner(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  PAGODA_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  impl_->workspace_bytes = workspace_bytes;
  impl_->workspace = DeviceBuffer(workspace_bytes);
}

GemmRunner::~GemmRunner() {
  if (!impl_) return;
  impl_->plans.clear();
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

void GemmRunner::prepare(int m, int n, int k, DType dtype, bool with_bias) {
  impl_->plan(m, n, k, dtype, with_bias);
}

size_t GemmRunner::cached_plans() const { return impl_->plans.size(); }

void GemmRunner::set_batch_invariant(bool on) {
  if (impl_->batch_invariant == on) return;
  impl_->batch_invariant = on;
  impl_->plans.clear();
}

void GemmRunner::run(const GemmParams& p, cudaStream_t stream) {
  if (p.m == 0) return;
  PAGODA_CHECK(p.x && p.w && p.y, "gemm: null operand");
  for (const void* ptr : {p.x, p.w, p.bias, static_cast<const void*>(p.y)})
    PAGODA_CHECK(reinterpret_cast<uintptr_t>(ptr) % kMinAlignment == 0, "gemm: operand ", ptr,
                 " is not 16-byte aligned");
  const Plan& plan = impl_->plan(p.m, p.n, p.k, p.dtype, p.bias != nullptr);
  if (p.bias)
    PAGODA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  const float alpha = 1.0f, beta = 0.0f;
  PAGODA_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, plan.op, &alpha, p.w, plan.a, p.x, plan.b, &beta, p.y, plan.d,
                                     p.y, plan.d, &plan.algo, impl_->workspace.data(), plan.workspace, stream));
}

}  // namespace pagoda

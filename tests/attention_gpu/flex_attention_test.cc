// FLEX_ATTENTION's CUDA kernels against its CPU kernel (flex_attention_harness.h: fresh random inputs, poisoned
// outputs, derived tolerances): every mask primitive and compositions of them, the score modifiers, head
// sizes 8 to 1040 in float32 / float16 / bfloat16 (tensor-core and CUDA-core kernels), the plan's tile sizes,
// the house-style lengths (1, 7, 17, 97, 513, 4099) in batches that mix prefill, chunked prefill and decode,
// GQA 1 / 4 / 8, cache blocks 16 and 32; batch invariance (a sequence alone and inside steps of 2, 7 and 33:
// bitwise equal), a CUDA graph of a decode step replayed over growing contexts (against the oracle and bitwise
// against the eager plan), a query strided as in a fused qkv row, and the runner.
#include "flex_attention_harness.h"

#include "pagoda/attention/flex_attention/flex_attention_cuda_runner.h"
#include "pagoda/attention/flex_attention/flex_layer.h"
#include "pagoda/core/error.h"

namespace pagoda::flex_test {
namespace {

// Prefill, decode, chunked prefill, and short ones; sequence 1 of the span tables below is the decode one.
std::vector<Seq> mixed() { return {{97, 97}, {513, 1}, {300, 17}, {7, 7}, {1, 1}}; }

std::vector<FlexMask> all_masks() {
  const FlexMask c = FlexMask::causal();
  const FlexMask sp = FlexMask::spans({{{0, 40}, {60, 61}}, {{5, 9}, {9, 300}, {400, 513}}, {{100, 290}}, {}});
  const FlexMask docs = FlexMask::documents({{17, 60, 61}, {128, 500}, {33}, {3}});
  return {FlexMask::full(),
          c,
          FlexMask::sliding_window(24),
          FlexMask::chunked_local(32),
          sp,
          docs,
          ~c,  // decode rows and the last prefill row have no key: zeros
          c & FlexMask::sliding_window(1),
          c & FlexMask::sliding_window(100),
          c & FlexMask::chunked_local(48),
          c | sp,
          c & docs,
          c & docs & FlexMask::sliding_window(40),
          (c & FlexMask::sliding_window(8)) | ~FlexMask::chunked_local(16),
          c & ~c};  // no key anywhere: every row zero
}

TEST(FlexAttentionCuda, EveryMask) {
  SKIP_WITHOUT_GPU();
  for (const FlexMask& m : all_masks()) {
    run_case({.head_size = 128, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 2, .dtype = DType::kBF16,
              .kv_dtype = DType::kBF16, .seqs = mixed()}, m);
    run_case({.head_size = 64, .block_size = 32, .num_q_heads = 8, .num_kv_heads = 1, .dtype = DType::kF16,
              .kv_dtype = DType::kF16, .seqs = mixed(), .block_m = 32, .block_n = 16}, m, {}, 2);
    run_case({.head_size = 80, .block_size = 16, .num_q_heads = 4, .num_kv_heads = 4, .dtype = DType::kF32,
              .kv_dtype = DType::kF32, .seqs = mixed()}, m, {}, 3);
  }
}

TEST(FlexAttentionCuda, HeadSizesAndDtypes) {
  SKIP_WITHOUT_GPU();
  const FlexMask m = FlexMask::causal() & FlexMask::sliding_window(70);
  const int gqa[3][2] = {{4, 4}, {8, 2}, {8, 1}};
  int i = 0;
  for (int hd : {8, 40, 64, 80, 96, 128, 160, 256, 576, 1040})  // 576, 1040: the query row in shared memory
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const int* g = gqa[i % 3];
      run_case({.head_size = hd, .block_size = i % 2 ? 32 : 16, .num_q_heads = g[0], .num_kv_heads = g[1], .dtype = t,
                .kv_dtype = t, .seqs = mixed()}, i % 2 ? m : FlexMask::causal(), {}, uint64_t(10 + i));
      ++i;
    }
}

TEST(FlexAttentionCuda, ScoreModifiers) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int hd : {64, 40}) {
    const int nq = 8;
    FlexScoreMod softcap, alibi, rel, all;
    softcap.softcap = 5.0f;
    for (int h = 0; h < nq; ++h) alibi.alibi_slopes.push_back(0.05f * u(rng));
    rel.rel_bias_max = 12;
    for (int i = 0; i < nq * 25; ++i) rel.rel_bias.push_back(u(rng));
    all = rel;
    all.softcap = 30.0f;
    all.alibi_slopes = alibi.alibi_slopes;
    const DType t = hd == 64 ? DType::kBF16 : DType::kF32;
    for (const FlexScoreMod& mod : {softcap, alibi, rel, all})
      for (const FlexMask& m : {FlexMask::causal(), FlexMask::full() & ~FlexMask::chunked_local(64)})
        run_case({.head_size = hd, .block_size = 16, .num_q_heads = nq, .num_kv_heads = 2, .dtype = t, .kv_dtype = t,
                  .seqs = mixed()}, m, mod, 5);
  }
}

TEST(FlexAttentionCuda, TileSizes) {
  SKIP_WITHOUT_GPU();
  const FlexMask m = FlexMask::causal() & FlexMask::documents({{17, 60, 61}, {128, 500}, {33}, {3}});
  for (int bm : {16, 32, 64, 128})
    for (int bn : {16, 32, 64, 128}) {
      run_case({.head_size = 256, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 1, .dtype = DType::kBF16,
                .kv_dtype = DType::kBF16, .seqs = mixed(), .block_m = bm, .block_n = bn}, m, {}, uint64_t(bm + bn));
      run_case({.head_size = 40, .block_size = 32, .num_q_heads = 8, .num_kv_heads = 2, .dtype = DType::kF16,
                .kv_dtype = DType::kF16, .seqs = mixed(), .block_m = bm, .block_n = bn}, m, {}, uint64_t(bm * bn));
    }
}

TEST(FlexAttentionCuda, LongContexts) {
  SKIP_WITHOUT_GPU();
  const std::vector<Seq> seqs = {{4099, 17}, {4099, 1}, {513, 513}, {17, 1}};
  for (const FlexMask& m : {FlexMask::causal(), FlexMask::causal() & FlexMask::sliding_window(1000),
                            FlexMask::causal() & FlexMask::chunked_local(512)}) {
    run_case({.head_size = 128, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 1, .dtype = DType::kBF16,
              .kv_dtype = DType::kBF16, .seqs = seqs}, m);
    run_case({.head_size = 256, .block_size = 32, .num_q_heads = 4, .num_kv_heads = 1, .dtype = DType::kF16,
              .kv_dtype = DType::kF16, .seqs = seqs, .block_n = 128}, m);
    run_case({.head_size = 96, .block_size = 16, .num_q_heads = 4, .num_kv_heads = 4, .dtype = DType::kF32,
              .kv_dtype = DType::kF32, .seqs = seqs}, m);
  }
}

TEST(FlexAttentionCuda, Float32QueriesOver16BitCache) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::kBF16, DType::kF16})
    run_case({.head_size = 128, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 2, .dtype = DType::kF32,
              .kv_dtype = kv, .seqs = mixed()}, FlexMask::causal());
}

// q as a slice of a fused qkv row (token stride past nq x hd), in both kernels.
TEST(FlexAttentionCuda, StridedQuery) {
  SKIP_WITHOUT_GPU();
  for (int hd : {128, 80})
    run_case({.head_size = hd, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 2, .dtype = DType::kBF16,
              .kv_dtype = DType::kBF16, .seqs = mixed(), .block_m = 64, .block_n = 64, .q_pad = 2 * 2 * hd},
             FlexMask::causal() & FlexMask::sliding_window(40));
}

// The rows of sequence `s` of a step, as bytes.
std::vector<uint8_t> rows_of(const Step& st, const std::vector<uint8_t>& out, int s) {
  const size_t row = size_t(st.c.num_q_heads) * st.c.head_size * dtype_size(st.c.dtype);
  return {out.begin() + long(st.qsl[size_t(s)] * row), out.begin() + long(st.qsl[size_t(s) + 1] * row)};
}

TEST(FlexAttentionCuda, BatchInvariant) {
  SKIP_WITHOUT_GPU();
  const Seq chunk{300, 40, 777}, decode{513, 1, 778};
  std::mt19937 rng(9);
  for (DType t : {DType::kBF16, DType::kF32})
    for (int tiles : {16, 64})
      for (const FlexMask& m : {FlexMask::causal() & FlexMask::sliding_window(64), FlexMask::chunked_local(100)})
        for (const Seq& own : {chunk, decode}) {
          Case c{.head_size = t == DType::kBF16 ? 128 : 80, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 2,
                 .dtype = t, .kv_dtype = t, .seqs = {own}, .block_m = tiles, .block_n = tiles};
          SCOPED_TRACE(c.str(m));
          const Step alone = make_step(c, 1);
          DeviceStep da(alone);
          const std::vector<uint8_t> want = rows_of(alone, gpu_forward(alone, m, {}, da), 0);
          check_outputs(alone, m, {}, to_floats(want, t), cpu_forward(alone, m, {}));
          for (int n : {2, 7, 33}) {
            // Other sequences of every kind around the one under test, which sits at a random index.
            std::vector<Seq> seqs;
            for (int i = 0; i + 1 < n; ++i) {
              const int ctx = 1 + int(rng() % 700);
              seqs.push_back({ctx, i % 3 == 0 ? ctx : i % 3 == 1 ? 1 : std::min(ctx, 1 + int(rng() % 64))});
            }
            const int at = int(rng() % uint32_t(n));
            seqs.insert(seqs.begin() + at, own);
            c.seqs = seqs;
            const Step st = make_step(c, uint64_t(n));
            DeviceStep d(st);
            EXPECT_EQ(rows_of(st, gpu_forward(st, m, {}, d), at), want) << "in a step of " << n << " at " << at;
          }
        }
}

// A decode step of 3 sequences and one padding slot (no token, context 0) captured once in a CUDA graph with a
// graph workspace, replayed over growing contexts with fresh inputs: against the oracle, and bitwise against
// the eager plan of the same step.
TEST(FlexAttentionCuda, CudaGraphDecode) {
  SKIP_WITHOUT_GPU();
  const FlexMask masks[] = {FlexMask::causal() & FlexMask::sliding_window(100),
                            FlexMask::causal() | FlexMask::spans({{{0, 50}}, {{10, 700}}, {}})};
  for (DType t : {DType::kBF16, DType::kF32})
    for (const FlexMask& m : masks) {
      const int hd = t == DType::kBF16 ? 64 : 40, max_ctx = 1100;
      // block_n 16 in the graph workspace and in the eager plan it is compared with.
      Case c{.head_size = hd, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 1, .dtype = t, .kv_dtype = t,
             .seqs = {}, .block_m = 64, .block_n = 16};
      auto seqs_at = [](int step) {
        return std::vector<Seq>{{5 + 40 * step, 1}, {300 + 97 * step, 1}, {513 + 131 * step, 1}, {0, 0}};
      };
      // Device arrays sized for the largest step, at fixed addresses for the graph.
      c.seqs = {{max_ctx, 1}, {max_ctx, 1}, {max_ctx, 1}, {max_ctx, 1}};
      const Step big = make_step(c, 99);
      DeviceStep d(big);
      FlexCudaWorkspace ws;
      FlexCudaLimits l;
      l.max_tokens = 4;
      l.max_seqs = 4;
      l.max_model_len = max_ctx;
      l.num_q_heads = 8;
      l.num_kv_heads = 1;
      l.block_n = c.block_n;
      l.graph_batch = 4;
      ws.reserve(l);
      cudaStream_t stream;
      CUDA_OK(cudaStreamCreate(&stream));
      ws.plan(m, {}, nullptr, nullptr, 0, stream);
      c.seqs = seqs_at(0);
      Step st = make_step(c, 100);
      auto upload = [&](const Step& s) {  // into the fixed buffers (the graph's addresses), tables at big's stride
        std::vector<int32_t> tables(big.tables.size(), 0);
        for (int i = 0; i < s.S; ++i)
          for (int b = 0; b < s.max_blocks; ++b)
            tables[size_t(i) * big.max_blocks + b] = s.tables[size_t(i) * s.max_blocks + b];
        cudaMemcpy(d.q.p, s.q_dev_bytes.data(), s.q_dev_bytes.size(), cudaMemcpyHostToDevice);
        cudaMemcpy(d.cache.p, s.cache_nhd_bytes.data(), s.cache_nhd_bytes.size(), cudaMemcpyHostToDevice);
        cudaMemcpy(d.qsl.p, s.qsl.data(), s.qsl.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d.seq_lens.p, s.seq_lens.data(), s.seq_lens.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d.tables.p, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice);
        d.poison();
      };
      upload(st);
      FlexCudaParams p = d.params(big);  // big's table stride; 4 sequences
      ASSERT_NO_THROW(flex_cuda_forward(p, ws, stream));  // eager run first, as the model runner does
      CUDA_OK(cudaStreamSynchronize(stream));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      flex_cuda_forward(p, ws, stream);
      CUDA_OK(cudaStreamEndCapture(stream, &graph));
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int step = 0; step < 4; ++step) {
        c.seqs = seqs_at(step);
        st = make_step(c, uint64_t(200 + step));
        SCOPED_TRACE(st.c.str(m) + " replay " + std::to_string(step));
        upload(st);
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        std::vector<uint8_t> out = d.download_bytes();
        out.resize(size_t(st.T) * 8 * hd * dtype_size(t));
        check_outputs(st, m, {}, to_floats(out, t), cpu_forward(st, m, {}));
        // The eager plan of the same step computes the same bits.
        DeviceStep e(st);
        EXPECT_EQ(gpu_forward(st, m, {}, e), out);
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
}

// The runner over a layer's shape: the mask and soft-cap come from the shape, the call from AttentionParams.
TEST(FlexAttentionCuda, Runner) {
  SKIP_WITHOUT_GPU();
  LayerShape shape;
  shape.num_q_heads = 8;
  shape.num_kv_heads = 2;
  shape.head_size = 128;
  shape.dtype = shape.kv_dtype = DType::kBF16;
  shape.block_size = 16;
  shape.sliding_window = 50;
  shape.softcap = 20.0f;
  for (bool causal : {true, false}) {
    shape.causal = causal;
    RunnerOptions options;
    auto runner = make_flex_attention_cuda_runner(shape, options);
    Case c{.head_size = 128, .block_size = 16, .num_q_heads = 8, .num_kv_heads = 2, .seqs = mixed()};
    const Step st = make_step(c, 31);
    DeviceStep d(st);
    runner->reserve({.max_tokens = st.T, .max_seqs = st.S, .max_model_len = st.max_ctx});
    runner->plan({std::vector<int>(st.q_lens.begin(), st.q_lens.end()), std::vector<int>(st.seq_lens.begin(), st.seq_lens.end())},
                 nullptr);
    AttentionParams ap;
    ap.q = d.q.p;
    ap.out = d.out.p;
    ap.kv_cache = d.cache.p;
    ap.num_blocks = st.num_blocks;
    ap.query_start_loc = d.qsl.p;
    ap.seq_lens = d.seq_lens.p;
    ap.block_tables = d.tables.p;
    ap.block_table_stride = st.max_blocks;
    ap.num_tokens = st.T;
    ap.num_seqs = st.S;
    d.poison();
    runner->run(ap, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const FlexMask m = flex_layer_mask(shape);
    FlexScoreMod mod;
    mod.softcap = shape.softcap;
    check_outputs(st, m, mod, to_floats(d.download_bytes(), DType::kBF16), cpu_forward(st, m, mod));
  }
  shape.kv_dtype = DType::kF8E4M3;
  EXPECT_THROW(make_flex_attention_cuda_runner(shape, {}), Error);
}

}  // namespace
}  // namespace pagoda::flex_test

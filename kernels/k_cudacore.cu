// CUDA-core FMA throughput, memory-level bandwidth, and the FP32 mixed-intensity sweep.
#include "carm_internal.cuh"
#include <cuda_fp16.h>

#define CARM_GUARD_STORE(value)                                              \
  do {                                                                       \
    float v_ = (float)(value);                                               \
    if (v_ == sentinel || threadIdx.x == 0) out[blockIdx.x] = v_;            \
  } while (0)

// ---------------------------------------------------------------- FMA chains
// CHAINS independent dependency chains per thread give the ILP that hides the FMA latency;
// a and b are kernel arguments so nothing can be folded at compile time.
constexpr int FMA_CHAINS = 8, FMA_UNROLL = 8;

template <typename T> __device__ __forceinline__ T carm_fma(T x, T a, T b);
template <> __device__ __forceinline__ float carm_fma(float x, float a, float b) { return fmaf(x, a, b); }
template <> __device__ __forceinline__ double carm_fma(double x, double a, double b) { return fma(x, a, b); }
template <> __device__ __forceinline__ __half2 carm_fma(__half2 x, __half2 a, __half2 b) { return __hfma2(x, a, b); }

template <typename T> __device__ __forceinline__ T carm_from(float f);
template <> __device__ __forceinline__ float carm_from(float f) { return f; }
template <> __device__ __forceinline__ double carm_from(float f) { return (double)f; }
template <> __device__ __forceinline__ __half2 carm_from(float f) { return __floats2half2_rn(f, f); }
__device__ __forceinline__ float carm_to_float(float x) { return x; }
__device__ __forceinline__ float carm_to_float(double x) { return (float)x; }
__device__ __forceinline__ float carm_to_float(__half2 x) { return __low2float(x) + __high2float(x); }

template <typename T>
__global__ void __launch_bounds__(256) fma_kernel(long long iters, float af, float bf, float* out, float sentinel) {
  const T a = carm_from<T>(af), b = carm_from<T>(bf);
  T x[FMA_CHAINS];
#pragma unroll
  for (int c = 0; c < FMA_CHAINS; ++c) x[c] = carm_from<T>((threadIdx.x + c) * 1e-3f);
  for (long long it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < FMA_UNROLL; ++u)
#pragma unroll
      for (int c = 0; c < FMA_CHAINS; ++c) x[c] = carm_fma(x[c], a, b);
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < FMA_CHAINS; ++c) s += carm_to_float(x[c]);
  CARM_GUARD_STORE(s);
}

template <typename T>
static cudaError_t launch_fma(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)fma_kernel<T>; return cudaSuccess; }
  // a slightly below 1 and a small b keep the values bounded for any number of iterations
  fma_kernel<T><<<l.grid, l.block, 0, s>>>(l.iterations, 0.999f, 1e-3f, l.out, l.sentinel);
  return cudaGetLastError();
}
cudaError_t carm_launch_fma_fp32(const carm_launch& l, cudaStream_t s, const void** k) { return launch_fma<float>(l, s, k); }
cudaError_t carm_launch_fma_fp64(const carm_launch& l, cudaStream_t s, const void** k) { return launch_fma<double>(l, s, k); }
cudaError_t carm_launch_fma_fp16x2(const carm_launch& l, cudaStream_t s, const void** k) { return launch_fma<__half2>(l, s, k); }

// ---------------------------------------------------------------- shared memory
// Each thread re-reads fixed 16-byte slots with volatile ld.shared.v4 (not hoisted, not merged);
// a warp reads 512 contiguous bytes, so every access is conflict-free.
// ld.volatile: ptxas would otherwise merge the loop-invariant loads (seen: 3.8x the per-clock maximum).
constexpr int SHARED_UNROLL = 8;  // loads in flight per thread; smem per block = UNROLL * block * 16

// Fills the block's tile (SHARED_UNROLL * blockDim.x 16-byte words) and returns this thread's
// shared-space address of its first word.
__device__ __forceinline__ uint32_t fill_shared_tile() {
  extern __shared__ uint4 smem_v[];
  const int n = SHARED_UNROLL * blockDim.x;
  for (int i = threadIdx.x; i < n; i += blockDim.x) smem_v[i] = make_uint4(i, i * 3u, i * 5u, i * 7u);
  __syncthreads();
  return (uint32_t)__cvta_generic_to_shared(smem_v + threadIdx.x);
}

__global__ void __launch_bounds__(256) shared_read_kernel(long long iters, float* out, float sentinel) {
  const uint32_t base = fill_shared_tile();
  const uint32_t step = blockDim.x * 16u;
  uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (long long it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < SHARED_UNROLL; ++u) {
      uint32_t x, y, z, w;
      asm volatile("ld.volatile.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(base + u * step));
      a0 += x; a1 += y; a2 += z; a3 += w;  // sums: XOR of repeated passes cancels
    }
  }
  CARM_GUARD_STORE((float)((a0 + a1 + a2 + a3) & 0xffff));
}

cudaError_t carm_launch_shared_read(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)shared_read_kernel; return cudaSuccess; }
  shared_read_kernel<<<l.grid, l.block, l.smem, s>>>(l.iterations, l.out, l.sentinel);
  return cudaGetLastError();
}

// ---------------------------------------------------------------- global-memory streams
// MODE 0: read (ld.global.cg: L2 and HBM, bypassing L1), 1: read through L1 (plain weak ld.global,
// LDG.E.128, L1-cached by default; .ca assembles to a strong SM-scope load instead),
// 2: write (st.global.cg), 3: copy. UNROLL independent 16-byte accesses per thread per step;
// the planner rounds elems to a multiple of grid*block*UNROLL, so there is no bounds check.
constexpr int STREAM_UNROLL = 4;

template <int MODE, int UNROLL = STREAM_UNROLL>
__global__ void __launch_bounds__(256) stream_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                     long long elems, long long passes, float* out, float sentinel) {
  uint32_t acc = 0;
  if (MODE == 1) {
    // L1: each block re-reads its own slice, small enough that the slices of one SM stay in L1
    const long long slice = elems / gridDim.x;
    const uint4* p = src + slice * blockIdx.x;
    for (long long pass = 0; pass < passes; ++pass)
      for (long long i = threadIdx.x; i < slice; i += (long long)blockDim.x * UNROLL) {
        uint32_t v[UNROLL][4];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
          asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                       : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3])
                       : "l"(p + i + u * blockDim.x));
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc += v[u][0] + v[u][1] + v[u][2] + v[u][3];
      }
  } else {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long pass = 0; pass < passes; ++pass)
      for (long long i = tid; i < elems; i += stride * UNROLL) {
        uint32_t v[UNROLL][4];
        if (MODE == 0 || MODE == 3) {
#pragma unroll
          for (int u = 0; u < UNROLL; ++u)
            asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3])
                         : "l"(src + i + u * stride));
        }
        if (MODE == 0) {
#pragma unroll
          for (int u = 0; u < UNROLL; ++u) acc += v[u][0] + v[u][1] + v[u][2] + v[u][3];
        } else {
#pragma unroll
          for (int u = 0; u < UNROLL; ++u) {
            if (MODE == 2) { v[u][0] = (uint32_t)(i + u * stride); v[u][1] = v[u][2] = v[u][3] = (uint32_t)pass; }
            asm volatile("st.global.cg.v4.u32 [%0], {%1,%2,%3,%4};"
                         :: "l"(dst + i + u * stride), "r"(v[u][0]), "r"(v[u][1]), "r"(v[u][2]), "r"(v[u][3]) : "memory");
          }
        }
      }
  }
  CARM_GUARD_STORE((float)(acc & 0xffff));
}

template <int MODE, int UNROLL = STREAM_UNROLL>
static cudaError_t launch_stream(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)stream_kernel<MODE, UNROLL>; return cudaSuccess; }
  stream_kernel<MODE, UNROLL><<<l.grid, l.block, 0, s>>>((const uint4*)l.buf0, (uint4*)l.buf1, l.elems, l.iterations, l.out, l.sentinel);
  return cudaGetLastError();
}
cudaError_t carm_launch_read_cg(const carm_launch& l, cudaStream_t s, const void** k) { return launch_stream<0>(l, s, k); }
// L2 reads: 8 loads in flight per thread (4 left the H200's L2 at 8.9 TB/s, short of its ~10).
cudaError_t carm_launch_read_cg8(const carm_launch& l, cudaStream_t s, const void** k) { return launch_stream<0, 8>(l, s, k); }
cudaError_t carm_launch_read_l1(const carm_launch& l, cudaStream_t s, const void** k) { return launch_stream<1>(l, s, k); }
cudaError_t carm_launch_write(const carm_launch& l, cudaStream_t s, const void** k) { return launch_stream<2>(l, s, k); }
cudaError_t carm_launch_copy(const carm_launch& l, cudaStream_t s, const void** k) { return launch_stream<3>(l, s, k); }

// ---------------------------------------------------------------- L2 reads by the Tensor Memory Accelerator (sm_90)
// One thread per block streams 16 KiB chunks L2 -> shared memory with cp.async.bulk (the path Hopper
// GEMMs load their operands by), BULK_STAGES copies in flight, each completing on its own mbarrier.
// Which chunk a block copies is carm_chunk_walk's; no L1 involved.
constexpr int BULK_BYTES = 16384, BULK_STAGES = 4;

int carm_bulk_smem_bytes() { return BULK_BYTES * BULK_STAGES; }

// mbarrier and bulk-copy primitives of the TMA kernels (sm_90 PTX; called only under __CUDA_ARCH__ >= 900).
__device__ __forceinline__ void carm_mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(arrivals) : "memory");
}
// Spin until the mbarrier at shared address `bar` has completed the phase of this parity.
__device__ __forceinline__ void carm_mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n.reg .pred P1;\nLAB_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               "@P1 bra DONE;\nbra LAB_WAIT;\nDONE:\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
// One bulk copy global -> shared that completes `bytes` on the mbarrier `bar` (this thread's arrival).
__device__ __forceinline__ void carm_bulk_copy(uint32_t dst, const uint8_t* src, uint32_t bytes, uint32_t bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// The k-th chunk block b copies out of a power-of-two set of chunks. Sets of >= 8 chunks per block (the
// HBM working sets) are cut into one contiguous slice per block, walked cyclically: no chunk is read by
// two blocks, so a block that drifts behind never finds another block's chunk still in L2 (an
// interleaved walk did: 5.4 TB/s "from HBM" at 512 MiB on the H200,
// benchmarks/results/nvidia-h200-size-sweep-2026-12-02.json). Smaller sets (L2 rows, where
// re-reading from L2 is the point) are walked interleaved: chunks b, b + grid, ...
__device__ __forceinline__ long long carm_chunk_walk(long long k, long long chunk_mask) {
  const long long per_block = (chunk_mask + 1) / gridDim.x;
  return per_block >= 8 ? blockIdx.x * per_block + k % per_block : (blockIdx.x + k * gridDim.x) & chunk_mask;
}

__global__ void __launch_bounds__(32) l2_bulk_kernel(const uint8_t* __restrict__ src, long long chunk_mask, long long iters,
                                                     float* out, float sentinel) {
  uint32_t sum = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t bulk_buf[];
  __shared__ __align__(8) uint64_t bulk_bar[BULK_STAGES];
  const uint32_t buf0 = (uint32_t)__cvta_generic_to_shared(bulk_buf);
  const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(bulk_bar);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < BULK_STAGES; ++s) carm_mbar_init(bar0 + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    long long k_copy = 0;
    auto issue = [&](int s) {
      carm_bulk_copy(buf0 + s * BULK_BYTES, src + carm_chunk_walk(k_copy++, chunk_mask) * BULK_BYTES, BULK_BYTES, bar0 + 8 * s);
    };
    for (int s = 0; s < BULK_STAGES && s < iters; ++s) issue(s);
    for (long long it = 0; it < iters; ++it) {
      const int s = (int)(it % BULK_STAGES);
      const uint32_t parity = (uint32_t)((it / BULK_STAGES) & 1);
      carm_mbar_wait(bar0 + 8 * s, parity);
      sum += reinterpret_cast<volatile uint32_t*>(bulk_buf + s * BULK_BYTES)[it & 1023];  // the data arrived
      if (it + BULK_STAGES < iters) issue(s);
    }
  }
#endif
  CARM_GUARD_STORE((float)(sum & 0xffff));
}

cudaError_t carm_launch_l2_bulk(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)l2_bulk_kernel; return cudaSuccess; }
  l2_bulk_kernel<<<l.grid, l.block, l.smem, s>>>((const uint8_t*)l.buf0, l.elems * 16 / BULK_BYTES - 1, l.iterations, l.out, l.sentinel);
  return cudaGetLastError();
}

// ---------------------------------------------------------------- FP32 mixed-intensity sweep
// Nothing but FFMA: each float loaded goes through C-1 FMAs of its own (t = t*a + b) and one that
// folds it into an accumulator (acc = t*a + acc), so 2*C FLOPs per 4 bytes: AI = C/2 FLOP/byte, and
// no issue slot goes to adds or masks (the buffers hold finite floats in [-1, 1)). The rounds run
// across all the floats of a step, so every FMA has 4*UNROLL independent neighbours.
template <int C, int N>
__device__ __forceinline__ void mix_fold(float (&t)[N], float a, float b, float (&acc)[4]) {
  // Fully unrolled, C = 128 and 256 overflow the instruction cache (seen: 0.8x the FP32 roof).
  constexpr int kUnroll = C - 1 < 1 ? 1 : (C - 1 < 32 ? C - 1 : 32);
#pragma unroll kUnroll
  for (int c = 1; c < C; ++c)
#pragma unroll
    for (int j = 0; j < N; ++j) t[j] = fmaf(t[j], a, b);
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j & 3] = fmaf(t[j], a, acc[j & 3]);
}

__device__ __forceinline__ void carm_ld_cg_f4(float* t, const uint4* p) {
  asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(t[0]), "=f"(t[1]), "=f"(t[2]), "=f"(t[3]) : "l"(p));
}

// Each thread loads a step of U float4 with ld.global.cg, then computes on it; the warps overlap one
// another. (Tried on the H200 and dropped: registers double-buffered, and a cp.async ring in shared
// memory; neither was faster near the ridge, and the counters saw part of their L2 bytes missing.)
template <int C, int U = STREAM_UNROLL, int MINB = 8>
__global__ void __launch_bounds__(256, MINB) mix_fp32_global_kernel(const uint4* __restrict__ src, long long elems,
                                                                    long long passes, float a, float b, float* out,
                                                                    float sentinel) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (long long pass = 0; pass < passes; ++pass)
    for (long long i = tid; i < elems; i += stride * U) {
      float t[4 * U];
#pragma unroll
      for (int u = 0; u < U; ++u) carm_ld_cg_f4(t + 4 * u, src + i + u * stride);
      mix_fold<C>(t, a, b, acc);
    }
  CARM_GUARD_STORE((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

// sm_90: the Tensor Memory Accelerator streams the data, as in a Hopper GEMM mainloop. Thread 0 keeps
// MIX_TMA_STAGES bulk copies (one 16 KiB step of the block each) in flight into a shared-memory ring;
// every thread waits for its step's copy (full barrier), reads its U float4 with ld.shared, releases
// the slot (empty barrier, 256 arrivals) and computes. Memory traffic never waits for the FMAs of a
// warp: only for a slot to be free. Chunks as in carm_chunk_walk.
constexpr int MIX_TMA_STAGES = 4, MIX_TMA_SLOT = 256 * STREAM_UNROLL * 16;
int carm_mix_tma_smem_bytes() { return MIX_TMA_STAGES * MIX_TMA_SLOT; }

template <int C>
__global__ void __launch_bounds__(256, 3) mix_fp32_tma_kernel(const uint8_t* __restrict__ src, long long chunk_mask, long long steps,
                                                              float a, float b, float* out, float sentinel) {
  constexpr int U = STREAM_UNROLL;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t mix_ring[];
  __shared__ __align__(8) uint64_t full_bar[MIX_TMA_STAGES], empty_bar[MIX_TMA_STAGES];
  const uint32_t ring0 = (uint32_t)__cvta_generic_to_shared(mix_ring);
  const uint32_t full0 = (uint32_t)__cvta_generic_to_shared(full_bar), empty0 = (uint32_t)__cvta_generic_to_shared(empty_bar);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < MIX_TMA_STAGES; ++s) {
      carm_mbar_init(full0 + 8 * s, 1);
      carm_mbar_init(empty0 + 8 * s, blockDim.x);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  long long k_copy = 0;
  auto produce = [&](int s) {  // thread 0 only
    carm_bulk_copy(ring0 + s * MIX_TMA_SLOT, src + carm_chunk_walk(k_copy++, chunk_mask) * MIX_TMA_SLOT, MIX_TMA_SLOT, full0 + 8 * s);
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < MIX_TMA_STAGES && s < steps; ++s) produce(s);
  for (long long k = 0; k < steps; ++k) {
    const int s = (int)(k % MIX_TMA_STAGES);
    const uint32_t parity = (uint32_t)((k / MIX_TMA_STAGES) & 1);
    carm_mbar_wait(full0 + 8 * s, parity);
    float t[4 * U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];"
                   : "=f"(t[4 * u]), "=f"(t[4 * u + 1]), "=f"(t[4 * u + 2]), "=f"(t[4 * u + 3])
                   : "r"(ring0 + s * MIX_TMA_SLOT + (u * blockDim.x + threadIdx.x) * 16) : "memory");
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(empty0 + 8 * s) : "memory");  // release: the reads are done
    if (threadIdx.x == 0 && k + MIX_TMA_STAGES < steps) {
      carm_mbar_wait(empty0 + 8 * s, parity);
      produce(s);
    }
    mix_fold<C>(t, a, b, acc);
  }
#endif
  CARM_GUARD_STORE((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

// SU of the tile's SHARED_UNROLL slots are read per iteration (8: the default; 4: half the code, twice
// the loop overhead).
template <int C, int SU = SHARED_UNROLL>
__global__ void __launch_bounds__(256) mix_fp32_shared_kernel(long long iters, float a, float b, float* out, float sentinel) {
  const uint32_t base = fill_shared_tile();
  const uint32_t step = blockDim.x * 16u;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (long long it = 0; it < iters; ++it) {
    float t[4 * SU];
#pragma unroll
    for (int u = 0; u < SU; ++u)
      asm volatile("ld.volatile.shared.v4.f32 {%0,%1,%2,%3}, [%4];"
                   : "=f"(t[4 * u]), "=f"(t[4 * u + 1]), "=f"(t[4 * u + 2]), "=f"(t[4 * u + 3]) : "r"(base + u * step));
    mix_fold<C>(t, a, b, acc);
  }
  CARM_GUARD_STORE((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

template <int C, int U, int MINB>
cudaError_t carm_launch_mix_fp32_global(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)mix_fp32_global_kernel<C, U, MINB>; return cudaSuccess; }
  mix_fp32_global_kernel<C, U, MINB><<<l.grid, l.block, 0, s>>>((const uint4*)l.buf0, l.elems, l.iterations, 0.999f, 1e-3f, l.out, l.sentinel);
  return cudaGetLastError();
}
template <int C>
cudaError_t carm_launch_mix_fp32_tma(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)mix_fp32_tma_kernel<C>; return cudaSuccess; }
  mix_fp32_tma_kernel<C><<<l.grid, l.block, l.smem, s>>>((const uint8_t*)l.buf0, l.elems * 16 / MIX_TMA_SLOT - 1, l.iterations,
                                                        0.999f, 1e-3f, l.out, l.sentinel);
  return cudaGetLastError();
}
template <int C, int SU>
cudaError_t carm_launch_mix_fp32_shared(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)mix_fp32_shared_kernel<C, SU>; return cudaSuccess; }
  mix_fp32_shared_kernel<C, SU><<<l.grid, l.block, l.smem, s>>>(l.iterations, 0.999f, 1e-3f, l.out, l.sentinel);
  return cudaGetLastError();
}

#define CARM_MIX_INSTANTIATE(C)                                                                                 \
  template cudaError_t carm_launch_mix_fp32_global<C, STREAM_UNROLL, 8>(const carm_launch&, cudaStream_t, const void**);  \
  template cudaError_t carm_launch_mix_fp32_tma<C>(const carm_launch&, cudaStream_t, const void**);            \
  template cudaError_t carm_launch_mix_fp32_shared<C, SHARED_UNROLL>(const carm_launch&, cudaStream_t, const void**);
CARM_MIX_INSTANTIATE(1) CARM_MIX_INSTANTIATE(2) CARM_MIX_INSTANTIATE(4) CARM_MIX_INSTANTIATE(8)
CARM_MIX_INSTANTIATE(16) CARM_MIX_INSTANTIATE(32) CARM_MIX_INSTANTIATE(64) CARM_MIX_INSTANTIATE(128)
CARM_MIX_INSTANTIATE(256)
// more loads in flight per thread near the ridges (fewer, fatter threads), and shorter shared steps
#define CARM_MIX_VARIANTS(C)                                                                                    \
  template cudaError_t carm_launch_mix_fp32_global<C, 8, 4>(const carm_launch&, cudaStream_t, const void**);   \
  template cudaError_t carm_launch_mix_fp32_global<C, 16, 2>(const carm_launch&, cudaStream_t, const void**);  \
  template cudaError_t carm_launch_mix_fp32_shared<C, 4>(const carm_launch&, cudaStream_t, const void**);
CARM_MIX_VARIANTS(4) CARM_MIX_VARIANTS(8) CARM_MIX_VARIANTS(16) CARM_MIX_VARIANTS(32) CARM_MIX_VARIANTS(64)

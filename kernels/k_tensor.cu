// Tensor Core throughput: wgmma (sm_90a) and mma.sync (sm_80+; FP8 sm_89+), plus the BF16
// mma.sync mixed-intensity sweep against global memory.
#include "carm_internal.cuh"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CARM_HAS_WGMMA 1
#include "wgmma_ops.inc"
#endif

// One 32-bit word of random elements of type DT (or zeros when seed == 0).
__device__ __forceinline__ uint32_t carm_rand_word(int dt, uint32_t seed, uint32_t i) {
  if (seed == 0) return 0u;
  const uint32_t k = seed * 0x9e3779b9u + i * 4u;
  switch (dt) {
    case DT_BF16: {
      __nv_bfloat162 h = __floats2bfloat162_rn(carm_uniform(k), carm_uniform(k + 1));
      return *reinterpret_cast<uint32_t*>(&h);
    }
    case DT_F16: {
      __half2 h = __floats2half2_rn(carm_uniform(k), carm_uniform(k + 1));
      return *reinterpret_cast<uint32_t*>(&h);
    }
    case DT_TF32: case DT_F32: return __float_as_uint(carm_uniform(k));
    case DT_E4M3: case DT_E5M2: {
      const __nv_fp8_interpretation_t f = dt == DT_E4M3 ? __NV_E4M3 : __NV_E5M2;
      uint32_t w = 0;
      for (int j = 0; j < 4; ++j) w |= (uint32_t)__nv_cvt_float_to_fp8(carm_uniform(k + j), __NV_SATFINITE, f) << (8 * j);
      return w;
    }
    default: return carm_hash(k);  // int8: any bit pattern is a valid value
  }
}

// ---------------------------------------------------------------- wgmma (sm_90a)
// Operands stay resident in shared memory (128-byte swizzled, K-major tiles: A 64x128 B per
// warpgroup, B 256x128 B shared); each warpgroup issues 4 wgmma (one 128-byte K slab) per
// commit group and waits with one group still in flight, so the tensor pipe never drains.
// Accumulating into the same registers across wgmma of one shape needs no fence (PTX ISA).
constexpr int WG_KSTEPS = 4;
constexpr int WG_A_BYTES = 64 * 128, WG_B_BYTES = 256 * 128;

#ifdef CARM_HAS_WGMMA
__device__ __forceinline__ uint64_t carm_smem_desc(uint32_t smem_addr) {
  uint64_t d = 0;
  d |= (uint64_t)((smem_addr & 0x3FFFF) >> 4);  // start address
  d |= (uint64_t)(16 >> 4) << 16;                // leading byte offset (ignored for swizzled K-major)
  d |= (uint64_t)(1024 >> 4) << 32;              // stride byte offset: 8 rows of 128 bytes
  d |= 1ull << 62;                               // 128-byte swizzle
  return d;
}
#endif

template <int OP> struct wg_traits;
// OP: 0 bf16/f32, 1 f16/f32, 2 f16/f16, 3 tf32/f32, 4 e4m3/f32, 5 e5m2/f32, 6 s8/s32
template <> struct wg_traits<0> { static constexpr int dt = DT_BF16, nreg = 128; using acc_t = float; };
template <> struct wg_traits<1> { static constexpr int dt = DT_F16, nreg = 128; using acc_t = float; };
template <> struct wg_traits<2> { static constexpr int dt = DT_F16, nreg = 64; using acc_t = uint32_t; };
template <> struct wg_traits<3> { static constexpr int dt = DT_TF32, nreg = 128; using acc_t = float; };
template <> struct wg_traits<4> { static constexpr int dt = DT_E4M3, nreg = 128; using acc_t = float; };
template <> struct wg_traits<5> { static constexpr int dt = DT_E5M2, nreg = 128; using acc_t = float; };
template <> struct wg_traits<6> { static constexpr int dt = DT_S8, nreg = 128; using acc_t = uint32_t; };

#ifdef CARM_HAS_WGMMA
template <int OP>
__device__ __forceinline__ void wg_issue(typename wg_traits<OP>::acc_t (&d)[wg_traits<OP>::nreg], uint64_t da, uint64_t db) {
  if constexpr (OP == 0) wgmma_bf16_f32(d, da, db);
  else if constexpr (OP == 1) wgmma_f16_f32(d, da, db);
  else if constexpr (OP == 2) wgmma_f16_f16(d, da, db);
  else if constexpr (OP == 3) wgmma_tf32_f32(d, da, db);
  else if constexpr (OP == 4) wgmma_e4m3_f32(d, da, db);
  else if constexpr (OP == 5) wgmma_e5m2_f32(d, da, db);
  else wgmma_s8_s32(d, da, db);
}
#endif

template <int OP, int WGS>
__global__ void __launch_bounds__(WGS * 128, 1) wgmma_kernel(long long iters, uint32_t seed, float* out, float sentinel) {
#ifdef CARM_HAS_WGMMA
  using T = wg_traits<OP>;
  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzle needs 1024-byte aligned tiles
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tiles = smem_raw + (base - raw);
  const int words = (WGS * WG_A_BYTES + WG_B_BYTES) / 4;
  for (int i = threadIdx.x; i < words; i += blockDim.x)
    reinterpret_cast<uint32_t*>(tiles)[i] = carm_rand_word(T::dt, seed ? seed + blockIdx.x : 0u, i);  // seed 0: zero data
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes -> tensor core reads
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const uint64_t da = carm_smem_desc(base + wg * WG_A_BYTES);
  const uint64_t db = carm_smem_desc(base + WGS * WG_A_BYTES);
  typename T::acc_t d[T::nreg];
#pragma unroll
  for (int r = 0; r < T::nreg; ++r) d[r] = 0;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  for (long long it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < WG_KSTEPS; ++k) wg_issue<OP>(d, da + 2 * k, db + 2 * k);  // +32 bytes along K
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  float s = 0.f;
#pragma unroll
  for (int r = 0; r < T::nreg; ++r) {
    if constexpr (OP == 2) { __half2 h = *reinterpret_cast<__half2*>(&d[r]); s += __low2float(h) + __high2float(h); }
    else if constexpr (OP == 6) s += (float)(int)d[r];
    else s += d[r];
  }
  if (s == sentinel || threadIdx.x == 0) out[blockIdx.x] = s;
#endif
}

int carm_wgmma_smem_bytes(int wgs) { return wgs * WG_A_BYTES + WG_B_BYTES + 1024; }

template <int OP>
cudaError_t carm_launch_wgmma(const carm_launch& l, cudaStream_t s, const void** k) {
  const void* fn = l.config == 3 ? (const void*)wgmma_kernel<OP, 3> : (const void*)wgmma_kernel<OP, 2>;
  if (k) { *k = fn; return cudaSuccess; }
  if (l.config == 3) wgmma_kernel<OP, 3><<<l.grid, l.block, l.smem, s>>>(l.iterations, l.seed, l.out, l.sentinel);
  else wgmma_kernel<OP, 2><<<l.grid, l.block, l.smem, s>>>(l.iterations, l.seed, l.out, l.sentinel);
  return cudaGetLastError();
}
template cudaError_t carm_launch_wgmma<0>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_wgmma<1>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_wgmma<2>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_wgmma<3>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_wgmma<4>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_wgmma<5>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_wgmma<6>(const carm_launch&, cudaStream_t, const void**);

// ---------------------------------------------------------------- BF16 wgmma mixed sweep (sm_90a)
// The CARM sweep on Hopper's own Tensor Core instruction: per step each thread loads MIX_WG_UNROLL
// 16-byte words with ld.global.cg and each warpgroup issues C wgmma m64n256k16 (zero-data operands
// resident in shared memory, as in the roof kernel). wgmma runs asynchronously, so the loads of a
// step overlap the Tensor Core work of the step before. Per 16-byte item: 2 warpgroups * C * 524288
// FLOPs / (256 threads * MIX_WG_UNROLL) = 256*C FLOPs, AI = 16*C FLOP/byte.
constexpr int MIX_WG_UNROLL = 16;

template <int C>
__global__ void __launch_bounds__(256, 1) mix_bf16_wgmma_kernel(const uint4* __restrict__ src, long long elems, long long passes,
                                                                float* out, float sentinel) {
#ifdef CARM_HAS_WGMMA
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tiles = smem_raw + (base - raw);
  for (int i = threadIdx.x; i < (2 * WG_A_BYTES + WG_B_BYTES) / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(tiles)[i] = 0u;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint64_t da = carm_smem_desc(base + (threadIdx.x / 128) * WG_A_BYTES);
  const uint64_t db = carm_smem_desc(base + 2 * WG_A_BYTES);
  float d[128];
#pragma unroll
  for (int r = 0; r < 128; ++r) d[r] = 0.f;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  // a trip count uniform across the block: a tid-dependent loop bound makes ptxas serialize wgmma
  const long long steps = elems / (stride * MIX_WG_UNROLL);  // the planner makes elems a multiple
  for (long long pass = 0; pass < passes; ++pass)
    for (long long k = 0; k < steps; ++k) {
      const long long i = tid + k * stride * MIX_WG_UNROLL;
      uint32_t v[MIX_WG_UNROLL][4];
#pragma unroll
      for (int u = 0; u < MIX_WG_UNROLL; ++u)
        asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3]) : "l"(src + i + u * stride));
#pragma unroll
      for (int c = 0; c < C; ++c) wgmma_bf16_f32(d, da + 2 * (c % WG_KSTEPS), db + 2 * (c % WG_KSTEPS));
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
#pragma unroll
      for (int u = 0; u < MIX_WG_UNROLL; ++u) acc += v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
    }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  float s = (float)(acc & 0xffff);
#pragma unroll
  for (int r = 0; r < 128; ++r) s += d[r];
  if (s == sentinel || threadIdx.x == 0) out[blockIdx.x] = s;
#endif
}

template <int C>
cudaError_t carm_launch_mix_bf16_wgmma(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)mix_bf16_wgmma_kernel<C>; return cudaSuccess; }
  mix_bf16_wgmma_kernel<C><<<l.grid, l.block, l.smem, s>>>((const uint4*)l.buf0, l.elems, l.iterations, l.out, l.sentinel);
  return cudaGetLastError();
}
template cudaError_t carm_launch_mix_bf16_wgmma<1>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_wgmma<2>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_wgmma<4>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_wgmma<8>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_wgmma<16>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_wgmma<32>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_wgmma<64>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_wgmma<128>(const carm_launch&, cudaStream_t, const void**);

// ---------------------------------------------------------------- mma.sync (sm_80+)
// Operands in registers, MMA_CHAINS independent accumulators per warp so the pipe stays busy.
constexpr int MMA_CHAINS = 8;

// OP: 0 bf16/f32 m16n8k16, 1 f16/f32 m16n8k16, 2 f16/f16 m16n8k16, 3 tf32/f32 m16n8k8,
//     4 e4m3/f32 m16n8k32 (sm_89+), 5 e5m2/f32 m16n8k32 (sm_89+), 6 s8/s32 m16n8k32
__device__ __forceinline__ int mma_dt(int op) {
  return op == 0 ? DT_BF16 : op <= 2 ? DT_F16 : op == 3 ? DT_TF32 : op == 4 ? DT_E4M3 : op == 5 ? DT_E5M2 : DT_S8;
}

template <int OP>
__device__ __forceinline__ void mma_issue(uint32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CARM_MMA4(INS)                                                                               \
  asm volatile(INS " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                          \
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
  if constexpr (OP == 0) CARM_MMA4("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
  else if constexpr (OP == 1) CARM_MMA4("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
  else if constexpr (OP == 2)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
                 : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else if constexpr (OP == 3) CARM_MMA4("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32");
  else if constexpr (OP == 4 || OP == 5) {
#if __CUDA_ARCH__ >= 890
    if constexpr (OP == 4) CARM_MMA4("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32");
    else CARM_MMA4("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32");
#endif
  } else CARM_MMA4("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32");
#undef CARM_MMA4
#endif
}

template <int OP>
__global__ void __launch_bounds__(256) mma_sync_kernel(long long iters, uint32_t seed, float* out, float sentinel) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t a[4], b[2], d[MMA_CHAINS][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) a[j] = carm_rand_word(mma_dt(OP), seed, t * 8 + j);
#pragma unroll
  for (int j = 0; j < 2; ++j) b[j] = carm_rand_word(mma_dt(OP), seed, t * 8 + 4 + j);
#pragma unroll
  for (int c = 0; c < MMA_CHAINS; ++c)
#pragma unroll
    for (int j = 0; j < 4; ++j) d[c][j] = 0;
  for (long long it = 0; it < iters; ++it)
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c) mma_issue<OP>(d[c], a, b);
  // identical chains would cancel under XOR: add the accumulators as numbers instead
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < MMA_CHAINS; ++c)
#pragma unroll
    for (int j = 0; j < 4; ++j) s += OP == 6 ? (float)(int)d[c][j] : OP == 2 ? 0.f : __uint_as_float(d[c][j]);
  if (OP == 2) {
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c) s += __low2float(*reinterpret_cast<__half2*>(&d[c][0])) + __high2float(*reinterpret_cast<__half2*>(&d[c][1]));
  }
  if (s == sentinel || threadIdx.x == 0) out[blockIdx.x] = s;
}

template <int OP>
cudaError_t carm_launch_mma_sync(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)mma_sync_kernel<OP>; return cudaSuccess; }
  mma_sync_kernel<OP><<<l.grid, l.block, 0, s>>>(l.iterations, l.seed, l.out, l.sentinel);
  return cudaGetLastError();
}
template cudaError_t carm_launch_mma_sync<0>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mma_sync<1>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mma_sync<2>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mma_sync<3>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mma_sync<4>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mma_sync<5>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mma_sync<6>(const carm_launch&, cudaStream_t, const void**);

// ---------------------------------------------------------------- BF16 Tensor Core mixed sweep
// Each thread loads 16 bytes (= its A fragment of one m16n8k16) with ld.global.cg, then its warp
// issues C mma.sync on it: per 16-byte item C*4096/32 = 128*C FLOPs, AI = 8*C FLOP/byte.
constexpr int MIX_TC_UNROLL = 4;

template <int C>
__global__ void __launch_bounds__(256) mix_bf16_global_kernel(const uint4* __restrict__ src, long long elems, long long passes,
                                                              float* out, float sentinel) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t b[2] = {0x3f803f80u, 0x3f803f80u};  // bf16 1.0
  uint32_t d[MIX_TC_UNROLL][4] = {};
  for (long long pass = 0; pass < passes; ++pass)
    for (long long i = tid; i < elems; i += stride * MIX_TC_UNROLL) {
      uint32_t a[MIX_TC_UNROLL][4];
#pragma unroll
      for (int u = 0; u < MIX_TC_UNROLL; ++u)
        asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(a[u][0]), "=r"(a[u][1]), "=r"(a[u][2]), "=r"(a[u][3]) : "l"(src + i + u * stride));
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int u = 0; u < MIX_TC_UNROLL; ++u) mma_issue<0>(d[u], a[u], b);
    }
  float s = 0.f;
#pragma unroll
  for (int u = 0; u < MIX_TC_UNROLL; ++u) s += __uint_as_float(d[u][0]) + __uint_as_float(d[u][1]) + __uint_as_float(d[u][2]) + __uint_as_float(d[u][3]);
  if (s == sentinel || threadIdx.x == 0) out[blockIdx.x] = s;
}

template <int C>
cudaError_t carm_launch_mix_bf16_global(const carm_launch& l, cudaStream_t s, const void** k) {
  if (k) { *k = (const void*)mix_bf16_global_kernel<C>; return cudaSuccess; }
  mix_bf16_global_kernel<C><<<l.grid, l.block, 0, s>>>((const uint4*)l.buf0, l.elems, l.iterations, l.out, l.sentinel);
  return cudaGetLastError();
}
template cudaError_t carm_launch_mix_bf16_global<1>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_global<2>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_global<4>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_global<8>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_global<16>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_global<32>(const carm_launch&, cudaStream_t, const void**);
template cudaError_t carm_launch_mix_bf16_global<64>(const carm_launch&, cudaStream_t, const void**);

// Internal interface between the ABI (carm_bench.cu) and the kernel files. Not part of the C ABI.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

// Everything one launch needs; filled by the planner in carm_bench.cu.
struct carm_launch {
  int grid, block, smem;
  long long iterations;  // inner iterations (or passes over the working set)
  long long elems;       // 16-byte elements in the working set (memory and mixed rows)
  void* buf0;            // read buffer
  void* buf1;            // write buffer
  float* out;            // one float per block; the checksum is out[0]
  float sentinel;        // never equal to a result: guards the work from dead-code removal
  uint32_t seed;         // 0 = zero data (Tensor Core rows), else random data
  int config;
};

// Returns the kernel (for occupancy and attribute queries) when launch is false, launches when true.
typedef cudaError_t (*carm_launch_fn)(const carm_launch& l, cudaStream_t s, const void** kernel);

// Random bits for every element type the Tensor Core rows use, packed into one 32-bit word.
enum carm_dtype { DT_BF16 = 0, DT_F16, DT_TF32, DT_E4M3, DT_E5M2, DT_S8, DT_F32 };

__device__ __forceinline__ uint32_t carm_hash(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}

// Uniform in [-1, 1): finite in every format, so accumulators neither overflow nor go NaN quickly.
__device__ __forceinline__ float carm_uniform(uint32_t x) {
  return (float)(carm_hash(x) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}
